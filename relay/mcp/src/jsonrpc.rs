//! The first look at an incoming message, before the SDK's: what is not one JSON-RPC 2.0 message gets its
//! JSON-RPC error here (`-32700` parse error, `-32600` invalid request), on stdio and over HTTP alike, so a client
//! never waits for an answer that will not come. What passes is handed to the SDK unchanged.

use serde_json::{Value, json};

/// Deepest nesting of arrays and objects a message may have (tool arguments are flat; the SDK's parser stops at
/// 128 anyway).
pub const MAX_DEPTH: usize = 64;
/// Largest message, on stdio and over HTTP.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// JSON-RPC's "Parse error": the bytes are not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's "Invalid Request": JSON, but not one JSON-RPC 2.0 request, notification or response.
pub const INVALID_REQUEST: i64 = -32600;

/// Why a message was refused before the SDK saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// [`PARSE_ERROR`] or [`INVALID_REQUEST`].
    pub code: i64,
    pub message: String,
    /// The message's own id when it had a usable one, so the client can match the error to its request.
    pub id: Value,
}

impl Refusal {
    fn parse(message: impl Into<String>) -> Refusal {
        Refusal {
            code: PARSE_ERROR,
            message: message.into(),
            id: Value::Null,
        }
    }

    fn invalid(message: impl Into<String>, id: Value) -> Refusal {
        Refusal {
            code: INVALID_REQUEST,
            message: message.into(),
            id,
        }
    }

    /// A refusal for a message longer than [`MAX_MESSAGE_BYTES`].
    pub fn too_large() -> Refusal {
        Refusal::invalid(
            format!("Invalid Request: a message is at most {MAX_MESSAGE_BYTES} bytes"),
            Value::Null,
        )
    }

    /// A refusal for JSON the SDK could not take as a message (its own shapes are stricter than [`check`]);
    /// `id` is what [`check`] returned.
    pub fn unreadable(id: Value) -> Refusal {
        Refusal::invalid(
            "Invalid Request: not a JSON-RPC 2.0 request, notification or response",
            id,
        )
    }

    /// The JSON-RPC error response.
    pub fn to_json(&self) -> Value {
        json!({
            "jsonrpc": "2.0",
            "id": self.id,
            "error": {"code": self.code, "message": self.message},
        })
    }
}

/// Checks one message (a stdio line without its newline, or an HTTP body): UTF-8, JSON, not nested deeper than
/// [`MAX_DEPTH`], one object (no batch), `"jsonrpc": "2.0"`. Returns the message's id (null when it has none
/// that a response could carry).
pub fn check(bytes: &[u8]) -> Result<Value, Refusal> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(Refusal::too_large());
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Err(Refusal::parse("Parse error: the message is not UTF-8"));
    };
    if depth(text) > MAX_DEPTH {
        return Err(Refusal::invalid(
            format!("Invalid Request: nested deeper than {MAX_DEPTH} levels"),
            Value::Null,
        ));
    }
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Refusal::parse(format!("Parse error: not JSON ({e})")))?;
    let Value::Object(obj) = value else {
        return Err(Refusal::invalid(
            if value.is_array() {
                "Invalid Request: batches are not supported; send one message at a time"
            } else {
                "Invalid Request: a message is a JSON object"
            },
            Value::Null,
        ));
    };
    let id = match obj.get("id") {
        Some(v @ (Value::String(_) | Value::Number(_))) => v.clone(),
        _ => Value::Null,
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(Refusal::invalid(
            "Invalid Request: \"jsonrpc\" must be \"2.0\"",
            id,
        ));
    }
    Ok(id)
}

/// The deepest nesting of arrays and objects in `text`, counted outside strings (no parse needed, so a
/// million-deep message costs one pass).
fn depth(text: &str) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for b in text.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn code(bytes: &[u8]) -> Option<i64> {
        check(bytes).err().map(|r| r.code)
    }

    #[test]
    fn only_one_json_rpc_2_message_passes() {
        assert_eq!(code(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), None);
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            None
        );
        assert_eq!(code(b"garbage"), Some(PARSE_ERROR));
        assert_eq!(
            code(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}"),
            Some(PARSE_ERROR)
        );
        assert_eq!(code(br#"{"jsonrpc":"2.0","id":1"#), Some(PARSE_ERROR));
        assert_eq!(
            code(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
            Some(INVALID_REQUEST)
        );
        assert_eq!(code(b"[]"), Some(INVALID_REQUEST));
        assert_eq!(code(b"42"), Some(INVALID_REQUEST));
        let old = check(br#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#).unwrap_err();
        assert_eq!((old.code, old.id), (INVALID_REQUEST, json!("a")));
        let deep = format!("{}1{}", "[".repeat(1_000_000), "]".repeat(1_000_000));
        assert_eq!(code(deep.as_bytes()), Some(INVALID_REQUEST));
        // Brackets inside strings are text.
        let text = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"q":"{}\"["}}}}"#,
            "[".repeat(500)
        );
        assert_eq!(code(text.as_bytes()), None);
        let e = Refusal::parse("Parse error").to_json();
        assert_eq!(e["id"], Value::Null);
        assert_eq!(e["error"]["code"], PARSE_ERROR);
    }
}
