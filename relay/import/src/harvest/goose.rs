//! Goose (block/goose, CLI and desktop): the SQLite file `sessions.db` in `$XDG_DATA_HOME/goose/sessions`
//! (`~/.local/share/goose/sessions`, on macOS too), or `$GOOSE_PATH_ROOT/data/sessions`. Format facts: block/goose
//! `crates/goose/src/session/session_manager.rs` (the schema) and `crates/goose/src/conversation/message.rs`
//! (`MessageContent`) @ 0164300649cf5e4ab327105d9155779ab8bfde4b; vshulcz/deja-vu `docs/registry/goose.md` @
//! 0d969180.
//!
//! `sessions(id, name, description, working_dir, created_at, updated_at, …)` and `messages(id, message_id?,
//! session_id, role, content_json, created_timestamp (Unix s), metadata_json)`. `content_json` is a list of content
//! items tagged by `type` (camelCase): `text` {text}, `thinking` {thinking} and `reasoning` {text} (reasoning),
//! `redactedThinking` (counted as withheld reasoning), `document` (named as a file), `toolRequest` {id, toolCall
//! {status, value {name, arguments}}} (a tool call), `toolResponse` {id, toolResult {status, value: [content] |
//! error}} (a tool's output: a message of only these is a tool turn), `image`; `toolConfirmationRequest`,
//! `frontendToolRequest`, `actionRequired`, `toolInputDelta`, `contextLengthExceeded`, `summarizationRequested` and
//! `systemNotification` are the app's own notes, skipped by name; any other is kept as an `[unsupported: …]`
//! marker. `metadata_json.userVisible: false` marks a message the user does not see: stored hidden. A message is
//! keyed by its `message_id` when the schema has one, else by its row id; one thread per session, titled by its
//! name (or description).

use personkit_shared::network::ToolCall;
use personkit_shared::turn_text;
use personkit_shared::wire::Role;
use personkit_store::foreign::{Cell, ForeignDb, Select};
use serde_json::Value;

use super::{Collected, Notes, Source, cut, placeholder, text_of, turn};

const SRC: Source = Source::Goose;
const MAX_MESSAGES: usize = 100_000;

const APP_NOTES: &[&str] = &[
    "toolConfirmationRequest",
    "frontendToolRequest",
    "contextLengthExceeded",
    "summarizationRequested",
    "systemNotification",
    "actionRequired",
    "toolInputDelta",
];

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

pub fn sessions(db: &ForeignDb, notes: &mut Notes) -> Result<Vec<String>, String> {
    super::db_session_ids(
        db,
        notes,
        "sessions",
        "messages",
        &["created_at", "id"],
        "no `messages` table: not a Goose sessions database",
    )
}

pub fn session(db: &ForeignDb, id: &str, out: &mut Collected, notes: &mut Notes) {
    let fail = |out: &mut Collected, notes: &mut Notes, why: String| {
        notes.record(out, None, &|| format!("session {id}"), |_, notes| {
            notes.problems.push((None, format!("session {id}: {why}")))
        });
    };
    let title = match db.rows(&Select {
        table: "sessions",
        columns: &["name", "description"],
        eq: Some(("id", id)),
        limit: 1,
        ..Select::default()
    }) {
        Ok(r) => r.first().and_then(|r| {
            r.iter()
                .filter_map(Cell::text)
                .find(|t| !t.trim().is_empty())
                .map(str::to_owned)
        }),
        Err(e) => return fail(out, notes, e.to_string()),
    };
    let rows = match db.rows(&Select {
        table: "messages",
        columns: &[
            "id",
            "message_id",
            "role",
            "content_json",
            "created_timestamp",
            "metadata_json",
        ],
        eq: Some(("session_id", id)),
        order: &["id"],
        limit: MAX_MESSAGES + 1,
        ..Select::default()
    }) {
        Ok(r) => r,
        Err(e) => return fail(out, notes, e.to_string()),
    };
    if rows.len() > MAX_MESSAGES {
        notes.problems.push((
            None,
            format!("session {id} has more than {MAX_MESSAGES} messages; the first were read"),
        ));
    }
    let mut prev: Option<String> = None;
    for (i, r) in rows.iter().take(MAX_MESSAGES).enumerate() {
        let key = match (r.get(1).and_then(Cell::text), r.first()) {
            (Some(m), _) if !m.is_empty() => m.to_owned(),
            (_, Some(Cell::Int(n))) => format!("#{n}"),
            (_, Some(c)) => c.text().unwrap_or("?").to_owned(),
            (_, None) => format!("@{i}"),
        };
        let what = || format!("session {id}, message {key}");
        notes.record(out, None, &what, |out, notes| {
            let content = match r.get(3) {
                Some(Cell::TooLarge(n)) => {
                    return notes.problems.push((
                        None,
                        format!("{}: its content is {n} bytes, too large; not read", what()),
                    ));
                }
                Some(c) => c.text().map(serde_json::from_str::<Value>),
                None => None,
            };
            let Some(Ok(Value::Array(items))) = content else {
                return notes.problems.push((
                    None,
                    format!("{}: its content is not a JSON list; skipped", what()),
                ));
            };
            let role = r.get(2).and_then(Cell::text).unwrap_or("(none)");
            let mut t = match role {
                "user" => turn(SRC, &key, prev.as_deref(), Role::User),
                "assistant" => turn(SRC, &key, prev.as_deref(), Role::Assistant),
                other => {
                    let mut t = placeholder(SRC, &key, prev.as_deref(), &format!("role {other}"));
                    t.position = u32::try_from(i).ok();
                    return out.push(SRC, id, title.as_deref(), t);
                }
            };
            let mut text: Vec<String> = Vec::new();
            let mut thoughts: Vec<String> = Vec::new();
            let mut outputs: Vec<String> = Vec::new();
            for c in &items {
                match s(c, "type").unwrap_or("(none)") {
                    "text" => {
                        if let Some(x) = s(c, "text") {
                            text.push(x.to_owned());
                        }
                    }
                    "thinking" => {
                        if let Some(x) = s(c, "thinking") {
                            thoughts.push(x.to_owned());
                        }
                    }
                    "reasoning" => {
                        if let Some(x) = s(c, "text") {
                            thoughts.push(x.to_owned());
                        }
                    }
                    "redactedThinking" => thoughts.push(turn_text::REASONING_WITHHELD.to_owned()),
                    "image" => text.push(turn_text::image("")),
                    "document" => text.push(turn_text::file(
                        s(c, "name").or_else(|| s(c, "uri")).unwrap_or("document"),
                    )),
                    "toolRequest" => {
                        let call = c.get("toolCall").unwrap_or(&Value::Null);
                        let v = call.get("value").unwrap_or(&Value::Null);
                        let input = v
                            .get("arguments")
                            .filter(|a| !a.is_null())
                            .map(|a| serde_json::to_string_pretty(a).unwrap_or_default())
                            .or_else(|| call.get("error").map(text_of))
                            .unwrap_or_default();
                        t.tool_calls.push(ToolCall {
                            name: s(v, "name").unwrap_or("tool").to_owned(),
                            input: cut(&input),
                            output: None,
                            id: s(c, "id").map(str::to_owned),
                        });
                    }
                    "toolResponse" => {
                        let res = c.get("toolResult").unwrap_or(&Value::Null);
                        let o = match res.get("value") {
                            Some(v) if !v.is_null() => match v.get("content") {
                                Some(inner) => text_of(inner),
                                None => text_of(v),
                            },
                            _ => res
                                .get("error")
                                .map(|e| turn_text::tool_error(&text_of(e)))
                                .unwrap_or_default(),
                        };
                        outputs.push(o);
                    }
                    k if APP_NOTES.contains(&k) => notes.skip(&format!("goose content {k}")),
                    k => {
                        let k = personkit_shared::wire::quote_safely(k, 64);
                        text.push(turn_text::unsupported(&format!("goose content {k:?}")));
                        t.unknown.push(format!("goose:{k}"));
                    }
                }
            }
            t.text = text.join("\n\n");
            if !thoughts.is_empty() {
                t.reasoning = Some(thoughts.join("\n\n"));
            }
            if !outputs.is_empty() {
                let out_text = cut(&outputs.join("\n\n"));
                if t.text.trim().is_empty() && t.tool_calls.is_empty() {
                    // A message of tool results only: the tools' turn.
                    t.role = Role::Tool;
                }
                t.tool_output = Some(out_text);
            }
            t.created_at_ms = r.get(4).and_then(Cell::int).map(|secs| secs * 1000);
            t.position = u32::try_from(i).ok();
            t.on_current_branch = Some(true);
            let meta: Option<Value> = r
                .get(5)
                .and_then(Cell::text)
                .and_then(|m| serde_json::from_str(m).ok());
            if meta
                .as_ref()
                .and_then(|m| m.get("userVisible"))
                .and_then(Value::as_bool)
                == Some(false)
            {
                t.hidden = true;
            }
            let empty = t.text.trim().is_empty()
                && t.reasoning.is_none()
                && t.tool_calls.is_empty()
                && t.tool_output.is_none();
            if empty {
                return notes.skip("goose message with no content");
            }
            out.push(SRC, id, title.as_deref(), t);
        });
        prev = Some(key);
    }
}
