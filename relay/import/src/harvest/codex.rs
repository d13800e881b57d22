//! OpenAI Codex CLI: `~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<session uuid>.jsonl` (`$CODEX_HOME` instead of
//! `~/.codex` when set), archived ones moved to `archived_sessions/`, older ones compressed to `.jsonl.zst` (read
//! whole once decompressed, with the same line offsets). Format facts: openai/codex
//! `codex-rs/protocol/src/protocol.rs` (`RolloutLine`, `RolloutItem`) and `models.rs` (`ResponseItem`);
//! Sinity/polylogue `docs/providers/openai-codex.md` for the older generation (`../shared/docs/formats.md`).
//!
//! One record per line, `{timestamp, type, payload}`:
//! - `session_meta` (`id`, `cwd`, `cli_version`, …): the session id is the thread's conversation id (carried to
//!   later runs in the file's state; without one, the uuid at the end of the file name);
//! - `response_item`: `message` (role `user` / `assistant`, or `developer` / `system` kept as context; content
//!   parts `input_text` / `output_text`; the `<environment_context>` and `<user_instructions>` blocks Codex sends
//!   as user messages are kept as context turns), `reasoning` (its readable `summary` as reasoning; encrypted
//!   content alone is counted as skipped), `function_call` / `custom_tool_call` / `local_shell_call` /
//!   `web_search_call` (tool calls), `function_call_output` / `custom_tool_call_output` (tool turns);
//! - `compacted` (the summary that replaced earlier history): a context turn;
//! - `turn_context` (model, cwd, policies) carries the model name to the next answers; `event_msg` repeats what
//!   `response_item`s hold for the terminal UI and is counted as skipped, except a `user_message` whose prompt no
//!   response item records (some rollouts keep the prompt only there): that is the user's turn.
//!
//! Records carry no ids: a turn's key is its byte offset in the file (`@<offset>`, stable, as the file only
//! grows) and its parent the turn before it. The older generation (records without `payload`: the response
//! item itself, the first line `{id, timestamp, instructions}`) is read the same way.

use personkit_shared::network::ToolCall;
use personkit_shared::wire::Role;
use serde_json::{Map, Value};

use super::{
    Collected, LineAt, LineParser, Notes, Source, cut, placeholder, text_of, time_ms, turn,
};

const SRC: Source = Source::Codex;

#[derive(Debug, Default)]
pub struct Parser;

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The session id from a file name `rollout-<time>-<uuid>.jsonl` (or `.jsonl.zst`).
fn id_from_name(at: &LineAt<'_>) -> String {
    let name = at
        .file
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name
        .strip_suffix(".zst")
        .unwrap_or(&name)
        .strip_suffix(".jsonl")
        .unwrap_or(&name)
        .to_owned();
    if stem.len() >= 36 && stem.is_char_boundary(stem.len() - 36) {
        let tail = &stem[stem.len() - 36..];
        if tail.bytes().filter(|b| *b == b'-').count() == 4 {
            return tail.to_owned();
        }
    }
    stem
}

const ITEM_TYPES: &[&str] = &[
    "message",
    "reasoning",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "web_search_call",
];

impl LineParser for Parser {
    fn line(
        &mut self,
        meta: &mut Map<String, Value>,
        at: LineAt<'_>,
        v: Value,
        out: &mut Collected,
        notes: &mut Notes,
    ) {
        let ts = time_ms(v.get("timestamp"));
        let (kind, payload) = match (s(&v, "type"), v.get("payload")) {
            (Some(k), Some(p)) => (k.to_owned(), p.clone()),
            // The older generation: the item itself, or the session header.
            (Some(k), None) if ITEM_TYPES.contains(&k) => ("response_item".to_owned(), v.clone()),
            (None, None) if s(&v, "id").is_some() => ("session_meta".to_owned(), v.clone()),
            (None, None) if s(&v, "record_type").is_some() => {
                notes.skip("codex:state");
                return;
            }
            (k, _) => (k.unwrap_or("(none)").to_owned(), v.clone()),
        };
        let t = match kind.as_str() {
            "session_meta" => {
                if let Some(id) = s(&payload, "id") {
                    meta.insert("session".into(), Value::String(id.to_owned()));
                }
                notes.skip("codex:session_meta");
                return;
            }
            "turn_context" => {
                if let Some(m) = s(&payload, "model") {
                    meta.insert("model".into(), Value::String(m.to_owned()));
                }
                notes.skip("codex:turn_context");
                return;
            }
            "event_msg" => {
                // The terminal's copy of a prompt is the only record of it in some rollouts: kept unless the
                // response item with the same words was already read (the other order is handled below).
                let prompt = (s(&payload, "type") == Some("user_message"))
                    .then(|| text_of(payload.get("message").unwrap_or(&Value::Null)))
                    .filter(|t| !t.trim().is_empty());
                match prompt {
                    Some(text) if !seen(meta, "user_item", &text) => {
                        meta.insert("user_event".into(), Value::String(text.clone()));
                        let mut t = turn(SRC, "", None, Role::User);
                        t.text = text;
                        Some(t)
                    }
                    _ => {
                        notes.skip("codex:event_msg");
                        return;
                    }
                }
            }
            "compacted" => {
                let mut t = turn(SRC, "", None, Role::System);
                t.text = personkit_shared::turn_text::note(
                    "compacted",
                    &text_of(payload.get("message").unwrap_or(&Value::Null)),
                );
                t.hidden = true;
                Some(t)
            }
            "response_item" => {
                let t = item(&payload, meta, notes);
                if let Some(u) = t.as_ref().filter(|t| t.role == Role::User && !t.hidden) {
                    if seen(meta, "user_event", &u.text) {
                        notes.skip("codex:message (its user_message event was read first)");
                        return;
                    }
                    meta.insert("user_item".into(), Value::String(u.text.clone()));
                }
                t
            }
            other => Some(placeholder(SRC, "", None, other)),
        };
        let Some(mut t) = t else {
            return;
        };
        let key = format!("@{}", at.offset);
        t.message_key.clone_from(&key);
        t.parent_key = meta.get("prev").and_then(Value::as_str).map(str::to_owned);
        t.created_at_ms = ts;
        meta.insert("prev".into(), Value::String(key));
        let conv = meta
            .get("session")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| id_from_name(&at));
        out.push(SRC, &conv, None, t);
    }
}

/// Whether `text` is the prompt last recorded under `slot` (`user_item`: a response item; `user_event`: a
/// `user_message` event); a match is used up, so the same words asked again later are a new prompt.
fn seen(meta: &mut Map<String, Value>, slot: &str, text: &str) -> bool {
    let hit = meta
        .get(slot)
        .and_then(Value::as_str)
        .is_some_and(|t| t.trim() == text.trim());
    if hit {
        meta.remove(slot);
    }
    hit
}

fn call(name: &str, input: String, id: Option<&str>) -> ToolCall {
    ToolCall {
        name: name.to_owned(),
        input: cut(&input),
        output: None,
        id: id.map(str::to_owned),
    }
}

/// One `response_item` → a turn (None for an item with nothing readable, counted as skipped).
fn item(
    p: &Value,
    meta: &Map<String, Value>,
    notes: &mut Notes,
) -> Option<personkit_shared::network::NetTurn> {
    let ty = s(p, "type").unwrap_or("(none)");
    let model = meta.get("model").and_then(Value::as_str);
    match ty {
        "message" => {
            let role = s(p, "role").unwrap_or("user");
            let text = text_of(p.get("content").unwrap_or(&Value::Null));
            let (r, hidden) = match role {
                "assistant" => (Role::Assistant, false),
                "user" => {
                    let head = text.trim_start();
                    let context = head.starts_with("<environment_context>")
                        || head.starts_with("<user_instructions>")
                        || head.starts_with("# AGENTS.md");
                    (Role::User, context)
                }
                _ => (Role::System, true),
            };
            let mut t = turn(SRC, "", None, r);
            t.text = text;
            t.hidden = hidden;
            if r == Role::Assistant {
                t.model = model.map(str::to_owned);
            }
            Some(t)
        }
        "reasoning" => {
            let summary = text_of(p.get("summary").unwrap_or(&Value::Null));
            let content = text_of(p.get("content").unwrap_or(&Value::Null));
            let r = if summary.trim().is_empty() {
                content
            } else {
                summary
            };
            if r.trim().is_empty() {
                notes.skip("codex:reasoning (encrypted only)");
                return None;
            }
            let mut t = turn(SRC, "", None, Role::Assistant);
            t.reasoning = Some(r);
            t.model = model.map(str::to_owned);
            Some(t)
        }
        "function_call" | "custom_tool_call" => {
            let mut t = turn(SRC, "", None, Role::Assistant);
            let input = match p.get("arguments").or_else(|| p.get("input")) {
                Some(Value::String(a)) => serde_json::from_str::<Value>(a)
                    .ok()
                    .and_then(|v| serde_json::to_string_pretty(&v).ok())
                    .unwrap_or_else(|| a.clone()),
                Some(other) => serde_json::to_string_pretty(other).unwrap_or_default(),
                None => String::new(),
            };
            t.tool_calls
                .push(call(s(p, "name").unwrap_or("tool"), input, s(p, "call_id")));
            t.model = model.map(str::to_owned);
            Some(t)
        }
        "local_shell_call" => {
            let mut t = turn(SRC, "", None, Role::Assistant);
            let cmd = p
                .get("action")
                .and_then(|a| a.get("command"))
                .map(|c| match c {
                    Value::Array(parts) => parts
                        .iter()
                        .map(|x| {
                            x.as_str()
                                .map(str::to_owned)
                                .unwrap_or_else(|| x.to_string())
                        })
                        .collect::<Vec<_>>()
                        .join(" "),
                    other => text_of(other),
                })
                .unwrap_or_default();
            t.tool_calls.push(call("shell", cmd, s(p, "call_id")));
            Some(t)
        }
        "web_search_call" => {
            let mut t = turn(SRC, "", None, Role::Assistant);
            let q = p
                .get("action")
                .and_then(|a| a.get("query"))
                .map(text_of)
                .unwrap_or_default();
            t.tool_calls.push(call("web_search", q, None));
            Some(t)
        }
        "function_call_output" | "custom_tool_call_output" => {
            let mut t = turn(SRC, "", None, Role::Tool);
            let out = match p.get("output") {
                Some(Value::String(o)) => o.clone(),
                // `{content, success}` in some versions.
                Some(o @ Value::Object(_)) => o
                    .get("content")
                    .map(text_of)
                    .unwrap_or_else(|| o.to_string()),
                Some(other) => text_of(other),
                None => String::new(),
            };
            t.tool_output = Some(cut(&out));
            Some(t)
        }
        other => Some(placeholder(SRC, "", None, other)),
    }
}
