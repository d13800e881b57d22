//! Cursor's agent (the `cursor-agent` CLI, and the IDE's agent since early 2026): `~/.cursor/projects/<encoded
//! working folder>/agent-transcripts/**/<chat id>.jsonl` (`$CURSOR_CONFIG_DIR/projects` when set). Format facts:
//! vshulcz/deja-vu `docs/registry/cursor.md` @ 0b1ddf23 (verified on cursor-agent 2026.09.02); kenn-io/agentsview
//! `docs/internal/session-format-sources.md` @ 001b4027.
//!
//! One message per line, `{role: user|assistant, message: {content: [parts]}}`, Anthropic-style parts: `text`,
//! `thinking` (reasoning), `tool_use` {name, input, id} (a tool call), `tool_result` (a tool's output). Lines carry
//! no ids and no times; the file only grows. A user's words are wrapped in `<user_query>`; what Cursor adds around
//! them (`<timestamp>`, `<user_info>`, `<attached_files>`, rules, reminders…) is kept as `[injected: …]` blocks,
//! and a user line with nothing of the user's own is stored hidden. A turn's key is its byte offset (`@<offset>`),
//! its parent the turn before it; the thread is the file's chat id.

use personkit_shared::network::ToolCall;
use personkit_shared::turn_text;
use personkit_shared::wire::Role;
use serde_json::{Map, Value};

use super::{Collected, LineAt, LineParser, Notes, Source, cut, placeholder, text_of, turn};

const SRC: Source = Source::CursorAgent;

/// The tags Cursor wraps around what it adds to a user's message.
const INJECTED: &[&str] = &[
    "timestamp",
    "user_info",
    "attached_files",
    "additional_data",
    "rules",
    "user_rules",
    "project_layout",
    "git_status",
    "system_reminder",
    "system-reminder",
    "manually_attached_skills",
    "agent_skills",
];

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
        let key = format!("@{}", at.offset);
        let prev = meta.get("prev").and_then(Value::as_str).map(str::to_owned);
        let parts = match v.get("message").and_then(|m| m.get("content")) {
            Some(Value::Array(p)) => p.clone(),
            Some(Value::String(t)) => vec![serde_json::json!({"type": "text", "text": t})],
            _ => {
                return notes.problems.push((
                    Some(at.line),
                    "a line without message content; skipped".into(),
                ));
            }
        };
        let mut t = match s(&v, "role") {
            Some("user") => turn(SRC, &key, prev.as_deref(), Role::User),
            Some("assistant") => turn(SRC, &key, prev.as_deref(), Role::Assistant),
            other => placeholder(
                SRC,
                &key,
                prev.as_deref(),
                &format!("role {}", other.unwrap_or("(none)")),
            ),
        };
        let mut text: Vec<String> = Vec::new();
        let mut thoughts: Vec<String> = Vec::new();
        let mut outputs: Vec<String> = Vec::new();
        for p in &parts {
            match s(p, "type").unwrap_or("(none)") {
                "text" => {
                    if let Some(x) = s(p, "text") {
                        text.push(x.to_owned());
                    }
                }
                "thinking" => {
                    if let Some(x) = s(p, "thinking").or_else(|| s(p, "text")) {
                        thoughts.push(x.to_owned());
                    }
                }
                "tool_use" => t.tool_calls.push(ToolCall {
                    name: s(p, "name").unwrap_or("tool").to_owned(),
                    input: cut(&p
                        .get("input")
                        .map(|i| serde_json::to_string_pretty(i).unwrap_or_default())
                        .unwrap_or_default()),
                    output: None,
                    id: s(p, "id").map(str::to_owned),
                }),
                "tool_result" => outputs.push(text_of(p.get("content").unwrap_or(&Value::Null))),
                k => {
                    let k = personkit_shared::wire::quote_safely(k, 64);
                    text.push(turn_text::unsupported(&format!("cursor-agent part {k:?}")));
                    t.unknown.push(format!("cursor-agent:{k}"));
                }
            }
        }
        let mut body = text.join("\n\n");
        if t.role == Role::User {
            let unwrapped = body
                .replace("<user_query>", "")
                .replace("</user_query>", "");
            let (words, own) = turn_text::split_injected(unwrapped.trim(), INJECTED);
            body = words;
            if !own && t.tool_calls.is_empty() && outputs.is_empty() {
                t.hidden = true;
            }
        }
        t.text = body;
        if !thoughts.is_empty() {
            t.reasoning = Some(thoughts.join("\n\n"));
        }
        if !outputs.is_empty() {
            if t.text.trim().is_empty() {
                t.role = Role::Tool;
            }
            t.tool_output = Some(cut(&outputs.join("\n\n")));
        }
        if t.text.trim().is_empty()
            && t.reasoning.is_none()
            && t.tool_calls.is_empty()
            && t.tool_output.is_none()
        {
            return notes.skip("cursor-agent message with no content");
        }
        meta.insert("prev".into(), Value::String(key));
        let conv = at
            .file
            .file_stem()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| "chat".into());
        out.push(SRC, &conv, None, t);
    }
}
