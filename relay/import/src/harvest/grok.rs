//! Grok Build (xAI's coding agent): `${GROK_HOME:-~/.grok}/sessions/<encoded cwd>/<session id>/`, holding
//! `summary.json` (`info{id, cwd}`, `generated_title` / `session_summary`, times, sub-agent links) and the
//! transcript: `updates.jsonl` (the agent-client protocol's session updates) in the builds vshulcz/deja-vu
//! `docs/registry/grok.md` @04efd697 describes (Grok Build 1.0.5), `chat_history.jsonl` in the ones
//! kenn-io/agentsview reads. No public producer source: medium confidence.
//!
//! - `updates.jsonl`: lines `{timestamp, params{update{sessionUpdate, content{type: text, text}, …}}, _meta{promptId}}`.
//!   `user_message_chunk`s of one prompt are the user's turn, `agent_message_chunk`s its answer (joined in order),
//!   `agent_thought_chunk`s the answer's reasoning, `tool_call` / `tool_call_update` (`toolCallId`, `title`,
//!   `rawInput`, `content` / `rawOutput`) its tool calls; other updates (plans, mode and command lists) are not
//!   conversation and are counted as skipped. Keys are `<promptId>/user` and `<promptId>/agent`.
//! - `chat_history.jsonl`: one chat message per line `{role, content, tool_calls[{id, function{name,
//!   arguments}}], tool_call_id, reasoning_content}` (the xAI API's message shape); key `#<line>`.
//!
//! Chunks of one answer span lines and a rewind can cut the file and write it again, so the file is read whole
//! when it changed (keys make that idempotent; an answer read while still streaming is stored again once
//! complete, as a revision). When a session has both files, `chat_history.jsonl` is read and `updates.jsonl`
//! counted as skipped. The thread is the session id, titled by the summary's title.

use std::path::Path;

use personkit_shared::network::{NetTurn, ToolCall};
use personkit_shared::turn_text;
use personkit_shared::wire::Role;
use serde_json::Value;

use super::{Collected, Notes, Source, cut, placeholder, text_of, turn};

const SRC: Source = Source::GrokBuild;

/// The transcript files of a session folder.
pub const UPDATES: &str = "updates.jsonl";
pub const CHAT_HISTORY: &str = "chat_history.jsonl";

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The complete lines of a JSON-lines file, parsed; a line that is not a JSON object is a problem.
fn lines(bytes: &[u8], notes: &mut Notes) -> Vec<(usize, Value)> {
    let text = String::from_utf8_lossy(bytes);
    let complete = text.rfind('\n').map_or("", |i| &text[..i]);
    let mut out = Vec::new();
    for (i, line) in complete.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(v @ Value::Object(_)) => out.push((i + 1, v)),
            _ => notes.problems.push((
                Some(i as u64 + 1),
                "not a JSON record; skipped, the lines after it were read".into(),
            )),
        }
    }
    out
}

pub fn read(
    path: &Path,
    bytes: &[u8],
    out: &mut Collected,
    notes: &mut Notes,
) -> Result<(), String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let (conv, title) = summary(dir);
    let conv = conv.unwrap_or_else(|| {
        dir.file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| "session".into())
    });
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let turns = if name == CHAT_HISTORY {
        chat_history(bytes, notes)
    } else if dir.join(CHAT_HISTORY).is_file() {
        notes.skip("grok-build:updates.jsonl (chat_history.jsonl read instead)");
        return Ok(());
    } else {
        updates(bytes, notes)
    };
    for (i, t) in turns.into_iter().enumerate() {
        notes.record(out, None, &|| format!("message {}", i + 1), |out, _| {
            out.push(SRC, &conv, title.as_deref(), t)
        });
    }
    Ok(())
}

/// The session id and title from `summary.json`, when it is there.
fn summary(dir: &Path) -> (Option<String>, Option<String>) {
    use std::io::Read;
    let mut bytes = Vec::new();
    let read = std::fs::File::open(dir.join("summary.json"))
        .and_then(|f| f.take(4 * 1024 * 1024).read_to_end(&mut bytes));
    let Ok(v) = read
        .map_err(|_| ())
        .and_then(|_| serde_json::from_slice::<Value>(&bytes).map_err(|_| ()))
    else {
        return (None, None);
    };
    let id = v
        .pointer("/info/id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let title = s(&v, "generated_title")
        .or_else(|| s(&v, "session_summary"))
        .map(|t| personkit_shared::wire::quote_safely(t.lines().next().unwrap_or(t), 120));
    (id, title)
}

/// One prompt's user turn and answer, built from its updates.
#[derive(Default)]
struct Prompt {
    id: String,
    user: Vec<String>,
    user_at: Option<i64>,
    agent: Vec<String>,
    thought: Vec<String>,
    agent_at: Option<i64>,
    calls: Vec<ToolCall>,
    unknown: Vec<String>,
}

fn time_of(v: &Value) -> Option<i64> {
    match v.get("timestamp")? {
        // Seconds or milliseconds.
        Value::Number(n) => n.as_f64().map(|t| {
            if t < 1e11 {
                (t * 1000.0) as i64
            } else {
                t as i64
            }
        }),
        s @ Value::String(_) => super::time_ms(Some(s)),
        _ => None,
    }
}

fn updates(bytes: &[u8], notes: &mut Notes) -> Vec<NetTurn> {
    let mut prompts: Vec<Prompt> = Vec::new();
    for (line, v) in lines(bytes, notes) {
        let update = v.pointer("/params/update").unwrap_or(&Value::Null);
        let kind = s(update, "sessionUpdate").unwrap_or("(none)");
        let prompt_id = v
            .pointer("/_meta/promptId")
            .or_else(|| v.pointer("/params/_meta/promptId"))
            .or_else(|| update.pointer("/_meta/promptId"))
            .and_then(|p| {
                p.as_str()
                    .map(str::to_owned)
                    .or_else(|| Some(p.to_string()))
            })
            .filter(|p| p != "null");
        let at = time_of(&v);
        // A user chunk without a prompt id after an answer starts a new prompt.
        let new_prompt = match (&prompt_id, prompts.last()) {
            (Some(id), Some(p)) => &p.id != id,
            (None, Some(p)) => kind == "user_message_chunk" && !p.agent.is_empty(),
            (_, None) => true,
        };
        if new_prompt {
            prompts.push(Prompt {
                id: prompt_id.unwrap_or_else(|| format!("line-{line}")),
                ..Prompt::default()
            });
        }
        let Some(p) = prompts.last_mut() else {
            continue;
        };
        let text = || text_of(update.pointer("/content/text").unwrap_or(&Value::Null));
        match kind {
            "user_message_chunk" => {
                p.user.push(text());
                p.user_at = p.user_at.or(at);
            }
            "agent_message_chunk" => {
                p.agent.push(text());
                p.agent_at = p.agent_at.or(at);
            }
            "agent_thought_chunk" => p.thought.push(text()),
            "tool_call" => {
                p.calls.push(ToolCall {
                    name: s(update, "title")
                        .or_else(|| s(update, "kind"))
                        .unwrap_or("tool")
                        .to_owned(),
                    input: cut(&update
                        .get("rawInput")
                        .map(|i| serde_json::to_string_pretty(i).unwrap_or_default())
                        .unwrap_or_default()),
                    output: None,
                    id: s(update, "toolCallId").map(str::to_owned),
                });
                p.agent_at = p.agent_at.or(at);
            }
            "tool_call_update" => {
                let id = s(update, "toolCallId");
                let body = update
                    .get("rawOutput")
                    .or_else(|| update.get("content"))
                    .map(tool_content)
                    .unwrap_or_default();
                if let Some(c) = p.calls.iter_mut().rev().find(|c| c.id.as_deref() == id)
                    && !body.trim().is_empty()
                {
                    c.output = Some(cut(&body));
                }
            }
            "plan" | "available_commands_update" | "current_mode_update" | "usage_update" => {
                notes.skip(&format!("grok-build:{kind}"));
            }
            other => p
                .unknown
                .push(personkit_shared::wire::quote_safely(other, 64)),
        }
    }
    let mut out = Vec::new();
    let mut prev: Option<String> = None;
    for p in prompts {
        if !p.user.is_empty() {
            let key = format!("{}/user", p.id);
            let mut t = turn(SRC, &key, prev.as_deref(), Role::User);
            t.text = p.user.concat().trim().to_owned();
            t.created_at_ms = p.user_at;
            out.push(t);
            prev = Some(key);
        }
        let answered = !p.agent.is_empty() || !p.thought.is_empty() || !p.calls.is_empty();
        if answered || !p.unknown.is_empty() {
            let key = format!("{}/agent", p.id);
            let mut t = turn(SRC, &key, prev.as_deref(), Role::Assistant);
            t.text = p.agent.concat().trim().to_owned();
            let thought = p.thought.concat();
            if !thought.trim().is_empty() {
                t.reasoning = Some(thought.trim().to_owned());
            }
            t.tool_calls = p.calls;
            for u in p.unknown {
                t.text.push_str(&format!(
                    "\n\n{}",
                    turn_text::unsupported(&format!("grok-build update {u:?}"))
                ));
                t.unknown.push(format!("grok-build:update:{u}"));
            }
            t.created_at_ms = p.agent_at;
            out.push(t);
            prev = Some(key);
        }
    }
    out
}

/// A tool call's output: the protocol's content list (`{type: content, content: {type: text, text}}`), or JSON.
fn tool_content(v: &Value) -> String {
    match v {
        Value::Array(items) => items
            .iter()
            .map(
                |i| match i.pointer("/content/text").and_then(Value::as_str) {
                    Some(t) => t.to_owned(),
                    None => text_of(i),
                },
            )
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(o) => o
            .get("output")
            .or_else(|| o.get("stdout"))
            .map(text_of)
            .unwrap_or_else(|| v.to_string()),
        other => text_of(other),
    }
}

fn chat_history(bytes: &[u8], notes: &mut Notes) -> Vec<NetTurn> {
    let mut out = Vec::new();
    let mut prev: Option<String> = None;
    for (line, v) in lines(bytes, notes) {
        let key = format!("#{line}");
        let role = s(&v, "role").unwrap_or("(none)");
        let mut t = match role {
            "user" => turn(SRC, &key, prev.as_deref(), Role::User),
            "assistant" => turn(SRC, &key, prev.as_deref(), Role::Assistant),
            "tool" => turn(SRC, &key, prev.as_deref(), Role::Tool),
            "system" => {
                let mut t = turn(SRC, &key, prev.as_deref(), Role::System);
                t.hidden = true;
                t
            }
            other => placeholder(SRC, &key, prev.as_deref(), &format!("role {other}")),
        };
        if t.unknown.is_empty() {
            let content = text_of(v.get("content").unwrap_or(&Value::Null));
            if t.role == Role::Tool {
                t.tool_output = Some(cut(&content));
            } else {
                t.text = content;
            }
            if let Some(r) = s(&v, "reasoning_content") {
                t.reasoning = Some(r.to_owned());
            }
            if let Some(Value::Array(calls)) = v.get("tool_calls") {
                for c in calls {
                    let f = c.get("function").unwrap_or(&Value::Null);
                    t.tool_calls.push(ToolCall {
                        name: s(f, "name").unwrap_or("tool").to_owned(),
                        input: cut(&text_of(f.get("arguments").unwrap_or(&Value::Null))),
                        output: None,
                        id: s(c, "id").map(str::to_owned),
                    });
                }
            }
        }
        out.push(t);
        prev = Some(key);
    }
    out
}
