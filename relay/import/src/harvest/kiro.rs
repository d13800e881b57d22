//! Kiro CLI: `~/.kiro/sessions/cli/<session id>.jsonl` beside a header `<session id>.json` (`{session_id, cwd,
//! …}`). Format facts: vshulcz/deja-vu `docs/registry/kiro.md` @07241996 (kiro-cli 2.22.0); kenn-io/agentsview
//! `docs/internal/session-format-sources.md` @001b4027 (Kiro CLI is proprietary: no producer source). Newer
//! builds also keep `~/.local/share/kiro-cli/data.sqlite3`, whose schema is not public: not read.
//!
//! Lines `{kind, data{message_id, content[], meta{timestamp (s)}}}`: `Prompt` (the user's), `AssistantMessage`
//! (the answer, streamed: several lines share a `message_id` and are joined in order into one turn),
//! `ToolResults` (a `tool` turn); content items `{kind, data}`: `text`, `toolUse` (`{toolUseId, name, input}`),
//! `toolResult` (`{toolUseId, content, status}`), `reasoning`. Since the pieces of one message span lines, the file
//! is read whole when it changed and every message sent again (the message ids make that idempotent; a message
//! read while it was still streaming is stored again once complete, as a revision of the same turn). A line that
//! is not JSON is a problem, the rest is read; a record kind not known is a placeholder turn. The thread is the
//! session, titled by the last part of the header's `cwd`.

use std::path::Path;

use personkit_shared::network::{NetTurn, ToolCall};
use personkit_shared::turn_text;
use personkit_shared::wire::Role;
use serde_json::Value;

use super::{Collected, Notes, Source, cut, placeholder, text_of, turn};

const SRC: Source = Source::Kiro;

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// One message: the kind and the lines' content items joined.
struct Message {
    kind: String,
    id: String,
    at_ms: Option<i64>,
    items: Vec<Value>,
}

pub fn read(
    path: &Path,
    bytes: &[u8],
    out: &mut Collected,
    notes: &mut Notes,
) -> Result<(), String> {
    let text = String::from_utf8_lossy(bytes);
    // A last line without its newline is still being written: left for the next read.
    let complete = text.rfind('\n').map_or("", |i| &text[..i]);
    let mut messages: Vec<Message> = Vec::new();
    for (i, line) in complete.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let v: Value = match serde_json::from_str(line) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                notes.problems.push((
                    Some(i as u64 + 1),
                    "not a JSON record; skipped, the lines after it were read".into(),
                ));
                continue;
            }
        };
        let kind = s(&v, "kind").unwrap_or("(none)").to_owned();
        let data = v.get("data").unwrap_or(&Value::Null);
        let id = s(data, "message_id")
            .map(str::to_owned)
            .unwrap_or_else(|| format!("line-{}", i + 1));
        let items = match data.get("content") {
            Some(Value::Array(c)) => c.clone(),
            Some(other) if !other.is_null() => vec![other.clone()],
            _ => Vec::new(),
        };
        let at_ms = data
            .pointer("/meta/timestamp")
            .and_then(Value::as_f64)
            .map(|t| (t * 1000.0) as i64);
        match messages.last_mut() {
            Some(m) if m.id == id && m.kind == kind => m.items.extend(items),
            _ => messages.push(Message {
                kind,
                id,
                at_ms,
                items,
            }),
        }
    }
    let conv = path
        .file_stem()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| "session".into());
    let title = header_title(path);
    let mut prev: Option<String> = None;
    for (i, m) in messages.iter().enumerate() {
        notes.record(out, None, &|| format!("message {}", i + 1), |out, _| {
            let mut t = message(m, prev.as_deref());
            t.created_at_ms = m.at_ms;
            out.push(SRC, &conv, title.as_deref(), t);
        });
        prev = Some(m.id.clone());
    }
    Ok(())
}

/// The last part of the header's `cwd`, as a title.
fn header_title(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path.with_extension("json"))
        .ok()?
        .take(1024 * 1024)
        .read_to_end(&mut bytes)
        .ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    let cwd = s(&v, "cwd")?.trim_end_matches(['/', '\\']);
    let name = cwd.rsplit(['/', '\\']).next()?;
    (!name.is_empty()).then(|| personkit_shared::wire::quote_safely(name, 120))
}

fn message(m: &Message, parent: Option<&str>) -> NetTurn {
    let role = match m.kind.as_str() {
        "Prompt" => Role::User,
        "AssistantMessage" => Role::Assistant,
        "ToolResults" | "ToolResult" => Role::Tool,
        other => return placeholder(SRC, &m.id, parent, other),
    };
    let mut t = turn(SRC, &m.id, parent, role);
    let mut texts: Vec<String> = Vec::new();
    let mut results: Vec<String> = Vec::new();
    for item in &m.items {
        let kind = s(item, "kind")
            .or_else(|| s(item, "type"))
            .unwrap_or("(none)");
        let data = item.get("data").unwrap_or(&Value::Null);
        match kind {
            "text" => texts.push(
                data.as_str()
                    .or_else(|| s(item, "text"))
                    .unwrap_or_default()
                    .to_owned(),
            ),
            "reasoning" | "thinking" => {
                let r = text_of(data);
                if !r.trim().is_empty() {
                    t.reasoning = Some(match t.reasoning.take() {
                        Some(p) => format!("{p}{r}"),
                        None => r,
                    });
                }
            }
            "toolUse" => t.tool_calls.push(ToolCall {
                name: s(data, "name").unwrap_or("tool").to_owned(),
                input: cut(&data
                    .get("input")
                    .or_else(|| data.get("args"))
                    .map(|i| serde_json::to_string_pretty(i).unwrap_or_default())
                    .unwrap_or_default()),
                output: None,
                id: s(data, "toolUseId").map(str::to_owned),
            }),
            "toolResult" => {
                let body = result_text(data.get("content").unwrap_or(&Value::Null));
                results.push(if s(data, "status") == Some("error") {
                    turn_text::tool_error(&body)
                } else {
                    body
                });
            }
            other => {
                let other = personkit_shared::wire::quote_safely(other, 64);
                texts.push(turn_text::unsupported(&format!("kiro item {other:?}")));
                t.unknown.push(format!("kiro:item:{other}"));
            }
        }
    }
    // Streamed pieces of text are parts of one text: joined as written.
    t.text = texts.concat().trim().to_owned();
    if !results.is_empty() {
        t.tool_output = Some(cut(&results.join("\n\n")));
        if t.text.is_empty() && t.tool_calls.is_empty() {
            t.role = Role::Tool;
        }
    }
    t
}

/// A tool result's content: `[{kind: text|json, data}]` items, or plain text.
fn result_text(v: &Value) -> String {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| match i.get("data") {
                Some(Value::String(t)) => t.clone(),
                Some(other) => other.to_string(),
                None => text_of(i),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => text_of(other),
    }
}
