//! Wire format v2 (v1 plus the optional turn fields `path`, `parent_key`, `ordinal_source`; every v1 item is a
//! valid v2 item): what a client POSTs to `/v1/observations` and what the relay answers. `docs/wire-format.md`
//! is the prose version of this file; keep the two in step. How the relay decides which turn an item is:
//! [`crate::identity`].
//!
//! **API boundary:** these types are the contract between the extension, importers, other relays and the relay.
//! Adding an optional field is compatible; renaming or removing one is a new wire version.

use serde::{Deserialize, Serialize};

use crate::ids;

/// The only observation kind in v1.
pub const KIND_THREAD_TURN: &str = "thread_turn";

/// Default limits; the relay makes them configurable.
pub const DEFAULT_MAX_BATCH_ITEMS: usize = 500;
pub const DEFAULT_MAX_BATCH_BYTES: usize = 2 * 1024 * 1024;
/// Largest single turn content accepted, in bytes of UTF-8.
pub const MAX_CONTENT_BYTES: usize = 512 * 1024;
/// Longest conversation id, message key, title, url, app version or device id.
pub const MAX_FIELD_BYTES: usize = 2048;

/// Who said a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    System,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
            Role::Tool => "tool",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            "system" => Some(Role::System),
            "tool" => Some(Role::Tool),
            _ => None,
        }
    }
}

/// `POST /v1/observations` body. Items are kept as raw JSON so that one malformed item is rejected on its own
/// while the valid items of the same batch still land.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObservationBatch {
    pub observations: Vec<serde_json::Value>,
}

/// One observation of kind `thread_turn`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observation {
    pub kind: String,
    /// `browser-ext:<name>`, `import:<name>` or `harvest:<name>`.
    pub source_surface: String,
    pub conversation_id: String,
    /// Must equal `ids::thread_id(source_surface, conversation_id)`.
    pub thread_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub turn: Turn,
    pub client: ClientInfo,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    pub role: Role,
    pub content: String,
    /// Must equal `ids::content_hash(content, role)`.
    pub content_hash: String,
    /// Position of the turn in its thread (0-based), when the client knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinal: Option<u32>,
    /// The site's own stable id of the message, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_key: Option<String>,
    /// RFC 3339 time the turn was said, when the site shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurred_at: Option<String>,
    /// RFC 3339 time the client captured the turn.
    pub captured_at: String,
    /// Wire v2: how the client read the turn (`dom`, `network`, `export`, `harvest`); absent, it follows from
    /// the surface (`identity::Path::of`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<crate::identity::Path>,
    /// Wire v2: the site's id of the message this one answers or follows (its parent in the site's branch tree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_key: Option<String>,
    /// Wire v2: whether `ordinal` is the site's own numbering (`site`) or counted by the client (`counted`,
    /// the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinal_source: Option<crate::identity::OrdinalSource>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientInfo {
    pub app_version: String,
    pub device_id: String,
}

/// Status of one item of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ItemStatus {
    /// Newly stored (a new message, or a new revision of an existing turn).
    Stored,
    /// Already in the corpus; nothing changed. The client may drop it.
    Duplicate,
    /// Not stored; `code`, `message` and `hint` say why. Resending it unchanged will not help.
    Rejected,
}

/// The relay's answer for one item, in the order the items were sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemResult {
    pub index: usize,
    pub status: ItemStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
}

/// `POST /v1/observations` response (HTTP 200 whenever the batch itself was well-formed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchResponse {
    pub stored: usize,
    pub duplicate: usize,
    pub rejected: usize,
    pub results: Vec<ItemResult>,
}

/// Every error body the relay sends, and every per-item rejection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    /// Stable machine-readable code, e.g. `hash_mismatch`.
    pub code: String,
    /// What went wrong, for a person.
    pub message: String,
    /// What to do next.
    pub hint: String,
}

impl ApiError {
    pub fn new(code: &str, message: impl Into<String>, hint: impl Into<String>) -> Self {
        ApiError {
            code: code.to_owned(),
            message: message.into(),
            hint: hint.into(),
        }
    }
}

/// Why an observation is invalid. Each variant maps to one stable `code`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("item is not a valid observation: {0}")]
    Malformed(String),
    #[error("unknown observation kind {0:?}")]
    UnknownKind(String),
    #[error("invalid source_surface {0:?}")]
    InvalidSurface(String),
    #[error("{0} is empty")]
    Empty(&'static str),
    #[error("{field} is {len} bytes, over the limit of {max}")]
    TooLarge {
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("content_hash does not match content and role")]
    HashMismatch,
    #[error("thread_id does not match source_surface and conversation_id")]
    ThreadIdMismatch,
    #[error("{field} is not an RFC 3339 timestamp")]
    BadTimestamp { field: &'static str },
}

impl Invalid {
    pub fn code(&self) -> &'static str {
        match self {
            Invalid::Malformed(_) => "malformed_item",
            Invalid::UnknownKind(_) => "unknown_kind",
            Invalid::InvalidSurface(_) => "invalid_surface",
            Invalid::Empty(_) => "empty_field",
            Invalid::TooLarge { .. } => "too_large",
            Invalid::HashMismatch => "hash_mismatch",
            Invalid::ThreadIdMismatch => "thread_id_mismatch",
            Invalid::BadTimestamp { .. } => "bad_timestamp",
        }
    }

    pub fn hint(&self) -> &'static str {
        match self {
            Invalid::Malformed(_) => {
                "send an object with kind, source_surface, conversation_id, thread_id, turn and client (see docs/wire-format.md)"
            }
            Invalid::UnknownKind(_) => "wire format v1 knows only kind \"thread_turn\"",
            Invalid::InvalidSurface(_) => {
                "use browser-ext:<name>, import:<name> or harvest:<name>, with <name> of a-z, 0-9, '-', '_' or '.'"
            }
            Invalid::Empty(_) => "drop empty turns on the client; they carry nothing to keep",
            Invalid::TooLarge { .. } => "split the content or raise the relay's limits",
            Invalid::HashMismatch => {
                "compute content_hash as lowercase hex sha256(content || 0x1E || role) after redaction"
            }
            Invalid::ThreadIdMismatch => {
                "compute thread_id as UUIDv5(UUIDv5(NAMESPACE_URL, \"personkit:thread\"), \"<source_surface>|<conversation_id>\")"
            }
            Invalid::BadTimestamp { .. } => "send times as RFC 3339, e.g. 2026-11-22T10:00:00Z",
        }
    }

    pub fn to_api_error(&self) -> ApiError {
        ApiError::new(self.code(), self.to_string(), self.hint())
    }
}

/// Parse one raw item of a batch and check every rule that needs no storage.
pub fn parse_observation(raw: &serde_json::Value) -> Result<Observation, Invalid> {
    if let Some(kind) = raw.get("kind").and_then(|k| k.as_str())
        && kind != KIND_THREAD_TURN
    {
        return Err(Invalid::UnknownKind(quote_safely(kind, 64)));
    }
    // Read from the borrowed value: no copy of the item (its content is its largest part) before it is parsed.
    let obs = Observation::deserialize(raw)
        .map_err(|e| Invalid::Malformed(quote_safely(&e.to_string(), 200)))?;
    validate(&obs)?;
    Ok(obs)
}

/// [`parse_observation`] for an item given as JSON text: the text is read once, straight into the observation.
/// Same rules and codes (a repeated field is malformed here; a parsed `Value` would have kept the last one).
pub fn parse_observation_json(raw: &str) -> Result<Observation, Invalid> {
    match serde_json::from_str::<Observation>(raw) {
        Ok(obs) => {
            validate(&obs)?;
            Ok(obs)
        }
        Err(e) => {
            if let Ok(Peek {
                kind: Some(serde_json::Value::String(kind)),
                ..
            }) = serde_json::from_str::<Peek>(raw)
                && kind != KIND_THREAD_TURN
            {
                return Err(Invalid::UnknownKind(quote_safely(&kind, 64)));
            }
            Err(Invalid::Malformed(quote_safely(&e.to_string(), 200)))
        }
    }
}

/// The `source_surface` string of an item given as JSON text, if it has one.
pub fn surface_of_json(raw: &str) -> Option<String> {
    match serde_json::from_str::<Peek>(raw).ok()?.source_surface? {
        serde_json::Value::String(s) => Some(s),
        _ => None,
    }
}

/// The fields an unparseable item is looked at for: any JSON value each, every other field ignored.
#[derive(Deserialize)]
struct Peek {
    kind: Option<serde_json::Value>,
    source_surface: Option<serde_json::Value>,
}

/// True for `browser-ext:<name>`, `import:<name>`, `harvest:<name>`.
pub fn is_valid_surface(surface: &str) -> bool {
    let Some((prefix, name)) = surface.split_once(':') else {
        return false;
    };
    matches!(prefix, "browser-ext" | "import" | "harvest")
        && !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
        })
}

/// Check an observation against every rule that needs no storage.
pub fn validate(obs: &Observation) -> Result<(), Invalid> {
    if obs.kind != KIND_THREAD_TURN {
        return Err(Invalid::UnknownKind(quote_safely(&obs.kind, 64)));
    }
    if !is_valid_surface(&obs.source_surface) {
        return Err(Invalid::InvalidSurface(quote_safely(
            &obs.source_surface,
            80,
        )));
    }
    check_text(
        "conversation_id",
        &obs.conversation_id,
        MAX_FIELD_BYTES,
        true,
    )?;
    check_text(
        "client.device_id",
        &obs.client.device_id,
        MAX_FIELD_BYTES,
        true,
    )?;
    check_text(
        "client.app_version",
        &obs.client.app_version,
        MAX_FIELD_BYTES,
        false,
    )?;
    if let Some(url) = &obs.url {
        check_text("url", url, MAX_FIELD_BYTES, false)?;
    }
    if let Some(title) = &obs.title {
        check_text("title", title, MAX_FIELD_BYTES, false)?;
    }
    if let Some(key) = &obs.turn.message_key {
        check_text("turn.message_key", key, MAX_FIELD_BYTES, true)?;
    }
    if let Some(key) = &obs.turn.parent_key {
        check_text("turn.parent_key", key, MAX_FIELD_BYTES, true)?;
    }
    if is_blank(&obs.turn.content) {
        return Err(Invalid::Empty("turn.content"));
    }
    check_text("turn.content", &obs.turn.content, MAX_CONTENT_BYTES, true)?;
    if obs.turn.content_hash != ids::content_hash(&obs.turn.content, obs.turn.role) {
        return Err(Invalid::HashMismatch);
    }
    let expected = ids::thread_id(&obs.source_surface, &obs.conversation_id);
    if obs.thread_id != expected.hyphenated().to_string() {
        return Err(Invalid::ThreadIdMismatch);
    }
    if !looks_like_rfc3339(&obs.turn.captured_at) {
        return Err(Invalid::BadTimestamp {
            field: "turn.captured_at",
        });
    }
    if let Some(at) = &obs.turn.occurred_at
        && !looks_like_rfc3339(at)
    {
        return Err(Invalid::BadTimestamp {
            field: "turn.occurred_at",
        });
    }
    Ok(())
}

fn check_text(field: &'static str, value: &str, max: usize, required: bool) -> Result<(), Invalid> {
    if required && value.is_empty() {
        return Err(Invalid::Empty(field));
    }
    if value.len() > max {
        return Err(Invalid::TooLarge {
            field,
            len: value.len(),
            max,
        });
    }
    Ok(())
}

/// A strict shape check of RFC 3339 (`YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`), without a date library so that
/// this crate stays small for wasm. The relay parses the value fully before it stores it.
pub fn looks_like_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 20 || b.len() > 40 {
        return false;
    }
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    let shape = digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && matches!(b[10], b'T' | b't' | b' ')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !shape {
        return false;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &frac[n..];
    }
    match rest.as_bytes() {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit()),
        _ => false,
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
pub fn truncate_bytes(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// A value quoted back in an error: at most `max` characters, control and invisible format characters replaced
/// by `?`, and `…` where it was cut. Errors travel to logs, `ingest_errors` and the popup, so a hostile value
/// must not become a long, multi-line or direction-flipping string there.
pub fn quote_safely(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .take(max)
        .map(|c| {
            if c.is_control() || is_invisible(c) {
                '?'
            } else {
                c
            }
        })
        .collect();
    if s.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

/// Characters that render as nothing: zero-width spaces and joiners, direction marks and isolates, word joiners,
/// the BOM, soft hyphens and the Hangul fillers.
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{3164}'
            | '\u{FEFF}'
            | '\u{FFA0}'
    )
}

/// True when `s` shows nothing: only white space and invisible characters.
pub fn is_blank(s: &str) -> bool {
    s.chars().all(|c| c.is_whitespace() || is_invisible(c))
}

/// Build a valid observation from its parts, computing the hash and thread id with the one functions in `ids`.
/// Used by importers, benchmarks and tests; the extension computes the same through the wasm facade.
#[allow(clippy::too_many_arguments)]
pub fn build_observation(
    source_surface: &str,
    conversation_id: &str,
    role: Role,
    content: &str,
    ordinal: Option<u32>,
    message_key: Option<&str>,
    captured_at: &str,
    client: ClientInfo,
) -> Observation {
    Observation {
        kind: KIND_THREAD_TURN.to_owned(),
        source_surface: source_surface.to_owned(),
        conversation_id: conversation_id.to_owned(),
        thread_id: ids::thread_id(source_surface, conversation_id)
            .hyphenated()
            .to_string(),
        url: None,
        title: None,
        turn: Turn {
            role,
            content: content.to_owned(),
            content_hash: ids::content_hash(content, role),
            ordinal,
            message_key: message_key.map(str::to_owned),
            occurred_at: None,
            captured_at: captured_at.to_owned(),
            path: None,
            parent_key: None,
            ordinal_source: None,
        },
        client,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn client() -> ClientInfo {
        ClientInfo {
            app_version: "0.1.0".into(),
            device_id: "dev-1".into(),
        }
    }

    fn valid() -> serde_json::Value {
        let obs = build_observation(
            "browser-ext:chatgpt",
            "abc",
            Role::User,
            "hi there",
            Some(0),
            None,
            "2026-11-22T10:00:00Z",
            client(),
        );
        serde_json::to_value(obs).unwrap_or_default()
    }

    #[test]
    fn valid_item_parses() {
        assert!(parse_observation(&valid()).is_ok());
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn v2_turn_fields_parse_and_a_v1_item_means_what_it_meant() {
        let mut v = valid();
        v["turn"]["path"] = json!("network");
        v["turn"]["parent_key"] = json!("p-1");
        v["turn"]["ordinal_source"] = json!("site");
        let obs = parse_observation(&v).unwrap();
        assert_eq!(obs.turn.path, Some(crate::identity::Path::Network));
        assert_eq!(obs.turn.parent_key.as_deref(), Some("p-1"));
        assert_eq!(
            obs.turn.ordinal_source,
            Some(crate::identity::OrdinalSource::Site)
        );
        assert_eq!(parse_observation_json(&v.to_string()).unwrap(), obs);
        let v1 = parse_observation(&valid()).unwrap();
        assert_eq!(crate::identity::Path::of(&v1), crate::identity::Path::Dom);
        assert!(!serde_json::to_string(&v1).unwrap().contains("path"));
    }

    #[test]
    fn each_rule_has_its_code() {
        type Mutation = Box<dyn Fn(&mut serde_json::Value)>;
        let cases: Vec<(&str, Mutation)> = vec![
            ("unknown_kind", Box::new(|v| v["kind"] = json!("page_view"))),
            (
                "malformed_item",
                Box::new(|v| v["turn"]["role"] = json!("wizard")),
            ),
            (
                "malformed_item",
                Box::new(|v| v["turn"]["ordinal"] = json!("first")),
            ),
            ("malformed_item", Box::new(|v| v["extra"] = json!(1))),
            (
                "malformed_item",
                Box::new(|v| v["turn"]["path"] = json!("screenshot")),
            ),
            (
                "malformed_item",
                Box::new(|v| v["turn"]["ordinal_source"] = json!("guess")),
            ),
            (
                "empty_field",
                Box::new(|v| v["turn"]["parent_key"] = json!("")),
            ),
            (
                "too_large",
                Box::new(|v| v["turn"]["parent_key"] = json!("p".repeat(MAX_FIELD_BYTES + 1))),
            ),
            (
                "invalid_surface",
                Box::new(|v| v["source_surface"] = json!("chatgpt")),
            ),
            (
                "invalid_surface",
                Box::new(|v| v["source_surface"] = json!("browser-ext:Chat GPT")),
            ),
            (
                "empty_field",
                Box::new(|v| v["conversation_id"] = json!("")),
            ),
            (
                "hash_mismatch",
                Box::new(|v| v["turn"]["content"] = json!("changed")),
            ),
            (
                "thread_id_mismatch",
                Box::new(|v| v["conversation_id"] = json!("other")),
            ),
            (
                "bad_timestamp",
                Box::new(|v| v["turn"]["captured_at"] = json!("yesterday")),
            ),
        ];
        for (code, mutate) in cases {
            let mut v = valid();
            mutate(&mut v);
            let err = parse_observation(&v).err().map(|e| e.code());
            assert_eq!(err, Some(code), "case {code}: {v}");
        }
    }

    #[test]
    fn json_text_and_parsed_items_get_the_same_answers() {
        let mut cases = vec![valid()];
        for (path, value) in [
            ("kind", json!("other")),
            ("kind", json!(7)),
            ("source_surface", json!("nope")),
            ("thread_id", json!("x")),
            ("turn", json!(null)),
            ("client", json!([])),
        ] {
            let mut v = valid();
            v[path] = value;
            cases.push(v);
        }
        cases.push(json!([1, 2]));
        cases.push(json!("text"));
        for v in cases {
            let a = parse_observation(&v).map_err(|e| e.code());
            let b = parse_observation_json(&v.to_string()).map_err(|e| e.code());
            assert_eq!(a, b, "{v}");
        }
        assert_eq!(
            surface_of_json(r#"{"source_surface":"browser-ext:claude","turn":5}"#).as_deref(),
            Some("browser-ext:claude")
        );
        assert_eq!(surface_of_json("[1]"), None);
    }

    #[test]
    fn empty_content_is_rejected_before_hash() {
        let mut v = valid();
        v["turn"]["content"] = json!("   ");
        v["turn"]["content_hash"] = json!(ids::content_hash("   ", Role::User));
        assert_eq!(
            parse_observation(&v).err().map(|e| e.code()),
            Some("empty_field")
        );
    }

    #[test]
    fn content_of_only_invisible_characters_is_empty() {
        for blank in [
            "\u{200B}\u{200D}\u{FEFF}",
            " \u{2060}\n\u{00AD}",
            "\u{3164}",
        ] {
            let mut v = valid();
            v["turn"]["content"] = json!(blank);
            v["turn"]["content_hash"] = json!(ids::content_hash(blank, Role::User));
            assert_eq!(
                parse_observation(&v).err().map(|e| e.code()),
                Some("empty_field"),
                "{blank:?}"
            );
        }
        // Visible text with a zero-width joiner inside (emoji sequences) is content.
        assert!(!is_blank("👩\u{200D}💻"));
    }

    #[test]
    fn quoted_values_are_short_and_printable() {
        let hostile = format!("{}\n\u{202E}evil{}", "x".repeat(10), "y".repeat(500));
        let q = quote_safely(&hostile, 40);
        assert_eq!(q.chars().count(), 41, "{q}");
        assert!(q.ends_with('…'));
        assert!(!q.contains('\n') && !q.contains('\u{202E}'), "{q}");
        let mut v = valid();
        v["turn"]["role"] = json!(hostile);
        let e = parse_observation(&v)
            .err()
            .map(|e| e.to_api_error())
            .unwrap_or_else(|| panic!("accepted"));
        assert!(e.message.chars().count() <= 260, "{}", e.message);
        assert!(!e.message.contains('\n'), "{}", e.message);
    }

    #[test]
    fn rfc3339_shapes() {
        for ok in [
            "2026-11-22T10:00:00Z",
            "2026-11-22T10:00:00.123+01:00",
            "2026-11-22 10:00:00-05:30",
        ] {
            assert!(looks_like_rfc3339(ok), "{ok}");
        }
        for bad in [
            "2026-11-22",
            "2026-11-22T10:00:00",
            "2026-11-22T10:00:00.Z",
            "x026-11-22T10:00:00Z",
        ] {
            assert!(!looks_like_rfc3339(bad), "{bad}");
        }
    }
}
