//! Qwen Code: `~/.qwen/projects/<project path, / as ->/chats/<session id>.jsonl` (`$QWEN_RUNTIME_DIR` instead of
//! `~/.qwen` when set; archived sessions in `chats/archive/`). Format facts: QwenLM/qwen-code
//! `packages/core/src/config/storage.ts` @013e660f and `packages/core/src/services/chatRecordingService.ts`
//! @015346f1 (`ChatRecord`); vshulcz/deja-vu `docs/registry/qwen.md` @04efd697.
//!
//! One `ChatRecord` per line, appended as the session goes (a tree like Claude Code's: `uuid`, `parentUuid`,
//! `sessionId`, `timestamp`, `type`, `subtype`, `provenance`, `message`), `message` a Gemini `Content` `{role,
//! parts[]}`:
//! - `user`: the prompt (`text` parts); a record whose `provenance` says it was not typed by the user (anything
//!   but `real_user`) is kept as context, hidden.
//! - `assistant`: `text` parts, parts with `thought: true` as reasoning, `functionCall` parts as tool calls.
//! - `tool_result`: `functionResponse` parts (`response.output`, or `response.error`), a `tool` turn.
//! - `system`: `custom_title` names the thread (carried to later runs in the file's state); `ui_telemetry` and
//!   `file_history_snapshot` are not conversation and are counted as skipped; the others (`chat_compression`,
//!   `slash_command`, `at_command`, `rewind`, …) are context turns with their subtype.
//! - any other type: a `[unsupported: …]` placeholder turn, counted.

use personkit_shared::network::{NetTurn, ToolCall};
use personkit_shared::turn_text;
use personkit_shared::wire::Role;
use serde_json::{Map, Value};

use super::{
    Collected, LineAt, LineParser, Notes, Source, cut, placeholder, text_of, time_ms, turn,
};

const SRC: Source = Source::QwenCode;

#[derive(Debug, Default)]
pub struct Parser;

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

impl LineParser for Parser {
    fn line(
        &mut self,
        meta: &mut Map<String, Value>,
        at: LineAt<'_>,
        v: Value,
        out: &mut Collected,
        notes: &mut Notes,
    ) {
        let kind = personkit_shared::wire::quote_safely(s(&v, "type").unwrap_or("(none)"), 64);
        let key = s(&v, "uuid")
            .map(str::to_owned)
            .unwrap_or_else(|| format!("@{}", at.offset));
        let parent = s(&v, "parentUuid");
        let conv = s(&v, "sessionId").map(str::to_owned).unwrap_or_else(|| {
            at.file
                .file_stem()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| "session".into())
        });
        let parts: &[Value] = match v.get("message").and_then(|m| m.get("parts")) {
            Some(Value::Array(p)) => p,
            _ => &[],
        };
        let mut t = match kind.as_str() {
            "user" | "assistant" | "tool_result" if v.get("message").is_none() => {
                notes.problems.push((
                    Some(at.line),
                    format!("a {kind} record without a message; skipped"),
                ));
                return;
            }
            "user" => {
                let mut t = content(parts, &key, parent, Role::User);
                if s(&v, "provenance").is_some_and(|p| p != "real_user") {
                    t.hidden = true;
                }
                t
            }
            "assistant" => {
                let mut t = content(parts, &key, parent, Role::Assistant);
                t.model = s(&v, "model").map(str::to_owned);
                t
            }
            "tool_result" => content(parts, &key, parent, Role::Tool),
            "system" => {
                let sub =
                    personkit_shared::wire::quote_safely(s(&v, "subtype").unwrap_or("system"), 64);
                match sub.as_str() {
                    "custom_title" => {
                        let title = v
                            .get("systemPayload")
                            .and_then(|p| s(p, "title"))
                            .or_else(|| s(&v, "title"));
                        if let Some(title) = title {
                            meta.insert("title".into(), Value::String(title.to_owned()));
                        }
                        notes.skip("qwen-code:custom_title (thread title)");
                        return;
                    }
                    "ui_telemetry" | "file_history_snapshot" => {
                        notes.skip(&format!("qwen-code:{sub}"));
                        return;
                    }
                    _ => {
                        let mut t = turn(SRC, &key, parent, Role::System);
                        let body = if parts.is_empty() {
                            v.get("systemPayload")
                                .map(|p| cut(&text_of(p)))
                                .unwrap_or_default()
                        } else {
                            words(parts)
                        };
                        t.text = turn_text::note(&sub, &body);
                        t.hidden = true;
                        t
                    }
                }
            }
            other => placeholder(SRC, &key, parent, other),
        };
        t.created_at_ms = time_ms(v.get("timestamp"));
        let title = meta.get("title").and_then(Value::as_str).map(str::to_owned);
        out.push(SRC, &conv, title.as_deref(), t);
    }
}

/// The text parts that are not thoughts.
fn words(parts: &[Value]) -> String {
    parts
        .iter()
        .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
        .filter_map(|p| s(p, "text"))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// A Gemini `Content`'s parts → one turn.
fn content(parts: &[Value], key: &str, parent: Option<&str>, role: Role) -> NetTurn {
    let mut t = turn(SRC, key, parent, role);
    let mut texts: Vec<String> = Vec::new();
    let mut thoughts: Vec<String> = Vec::new();
    let mut results: Vec<String> = Vec::new();
    for p in parts {
        if let Some(text) = p.get("text").and_then(Value::as_str) {
            if p.get("thought").and_then(Value::as_bool) == Some(true) {
                thoughts.push(text.to_owned());
            } else {
                texts.push(text.to_owned());
            }
        } else if let Some(call) = p.get("functionCall") {
            t.tool_calls.push(ToolCall {
                name: s(call, "name").unwrap_or("tool").to_owned(),
                input: cut(&call
                    .get("args")
                    .map(|a| serde_json::to_string_pretty(a).unwrap_or_default())
                    .unwrap_or_default()),
                output: None,
                id: s(call, "id").map(str::to_owned),
            });
        } else if let Some(r) = p.get("functionResponse") {
            let resp = r.get("response").unwrap_or(&Value::Null);
            results.push(match (resp.get("output"), resp.get("error")) {
                (Some(o), _) => text_of(o),
                (None, Some(e)) => turn_text::tool_error(&text_of(e)),
                (None, None) => resp.to_string(),
            });
        } else if p.get("inlineData").is_some() || p.get("fileData").is_some() {
            texts.push(turn_text::IMAGE.into());
        } else {
            let what = p
                .as_object()
                .and_then(|o| o.keys().next())
                .map(String::as_str)
                .unwrap_or("part");
            let what = personkit_shared::wire::quote_safely(what, 64);
            texts.push(turn_text::unsupported(&format!("qwen-code part {what:?}")));
            t.unknown.push(format!("qwen-code:part:{what}"));
        }
    }
    t.text = texts
        .into_iter()
        .filter(|x| !x.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");
    let thoughts = thoughts.join("\n\n");
    if !thoughts.trim().is_empty() {
        t.reasoning = Some(thoughts);
    }
    if !results.is_empty() {
        t.tool_output = Some(cut(&results.join("\n\n")));
        if t.text.is_empty() && t.tool_calls.is_empty() {
            t.role = Role::Tool;
        }
    }
    t
}
