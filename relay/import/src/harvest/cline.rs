//! Cline and Roo Code (VS Code extensions; also in Cursor, Windsurf, VSCodium): one folder per task,
//! `<editor user folder>/globalStorage/saoudrizwan.claude-dev/tasks/<task id>/` (Roo Code:
//! `rooveterinaryinc.roo-cline`), holding `api_conversation_history.json` (what was sent to the model) and
//! `ui_messages.json` (what the panel showed). Format facts: cline/cline `src/core/storage/disk.ts` @0162b828 and
//! `src/shared/ExtensionMessage.ts` (`ClineMessage`); RooCodeInc/Roo-Code `src/core/task-persistence/` @8400c685
//! (`../shared/docs/formats.md`, the research notes on more tools).
//!
//! Both files are rewritten whole as the task goes on, so the conversation file is read whole when it changed.
//! It is a list of Anthropic message params `{role: user|assistant, content: string | blocks}` (Roo Code adds
//! `ts` in ms and `isSummary` on the summary that replaces condensed history):
//! - user messages: the first wraps the task in `<task>…</task>` (the words are the user's, the wrapper is not),
//!   feedback and answers come in `<feedback>` / `<answer>` / `<user_message>`; every message carries an
//!   `<environment_details>` dump (open files, terminals, time), kept as an injected block, never the user's
//!   words. A text block `[<tool> for '…'] Result:` starts a tool's output (the blocks after it until the
//!   environment dump are that output); `tool_result` blocks too. A user message with only tool output is a
//!   `tool` turn; one with only injected text is kept hidden.
//! - assistant messages: `text` (the tool-use XML older builds write stays text), `thinking` / `reasoning` as
//!   reasoning, `tool_use` as tool calls.
//!
//! A turn's key is its place in the list (`#<n>`; the list only grows, and a restored checkpoint's new messages
//! at an old place are revisions), its parent the message before it, the thread the task id, titled by the task
//! (`ui_messages.json`'s first `say: task`, else the first `<task>`), the first turn dated by that message's `ts`.

use std::io::Read;
use std::path::Path;

use personkit_shared::network::{NetTurn, ToolCall};
use personkit_shared::turn_text;
use personkit_shared::wire::Role;
use serde_json::Value;

use super::{Collected, Notes, Source, cut, placeholder, text_of, turn};

/// The conversation file of a task folder.
pub const FILE_NAME: &str = "api_conversation_history.json";
/// Cline's extension id (its folder under `globalStorage/`).
pub const CLINE_EXTENSION: &str = "saoudrizwan.claude-dev";
/// Roo Code's extension id.
pub const ROO_EXTENSION: &str = "rooveterinaryinc.roo-cline";

/// `ui_messages.json` larger than this is not read (it only gives the title and the first time).
const MAX_UI_FILE: u64 = 64 * 1024 * 1024;

/// Wrappers around the user's own words.
const USER_WORDS: &[&str] = &["task", "feedback", "answer", "user_message"];
/// Text the extension adds to a user message.
const INJECTED: &[&str] = &["environment_details"];

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// Reads one task's conversation into `out`; an error when the file is not (yet) a readable conversation.
pub fn read(
    source: Source,
    path: &Path,
    bytes: &[u8],
    out: &mut Collected,
    notes: &mut Notes,
) -> Result<(), String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON ({e})"))?;
    let Value::Array(messages) = v else {
        return Err("not a task's conversation (not a list of messages)".into());
    };
    let task_dir = path.parent();
    let conv = task_dir
        .and_then(|d| d.file_name())
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| "task".into());
    let (ui_title, ui_ts) = task_dir.map(|d| ui_task(d, notes)).unwrap_or_default();
    let title = ui_title.or_else(|| messages.first().and_then(first_task));
    let mut prev: Option<String> = None;
    for (i, m) in messages.iter().enumerate() {
        let key = format!("#{i}");
        let what = || format!("message {}", i + 1);
        notes.record(out, None, &what, |out, notes| {
            if !m.is_object() {
                notes.problems.push((
                    None,
                    format!("message {}: not a JSON object; skipped", i + 1),
                ));
                return;
            }
            let mut t = message(source, m, &key, prev.as_deref());
            t.created_at_ms =
                m.get("ts")
                    .and_then(Value::as_i64)
                    .or(if i == 0 { ui_ts } else { None });
            out.push(source, &conv, title.as_deref(), t);
        });
        prev = Some(key);
    }
    Ok(())
}

/// The task's text and time from `ui_messages.json` (its first `say: task` message), when the file is there.
fn ui_task(dir: &Path, notes: &mut Notes) -> (Option<String>, Option<i64>) {
    let file = dir.join("ui_messages.json");
    let Ok(f) = std::fs::File::open(&file) else {
        return (None, None);
    };
    let mut bytes = Vec::new();
    if f.take(MAX_UI_FILE + 1).read_to_end(&mut bytes).is_err() || bytes.len() as u64 > MAX_UI_FILE
    {
        notes.problems.push((
            None,
            "ui_messages.json is unreadable or too large; the task is titled from the conversation"
                .into(),
        ));
        return (None, None);
    }
    let Ok(Value::Array(ui)) = serde_json::from_slice::<Value>(&bytes) else {
        notes.problems.push((
            None,
            "ui_messages.json is not a list of messages; the task is titled from the conversation"
                .into(),
        ));
        return (None, None);
    };
    let task = ui.iter().find(|m| s(m, "say") == Some("task"));
    let ts = task
        .or(ui.first())
        .and_then(|m| m.get("ts"))
        .and_then(Value::as_i64);
    (task.and_then(|m| s(m, "text")).map(title_of), ts)
}

/// The words of the first `<task>` in the first message.
fn first_task(m: &Value) -> Option<String> {
    let text = text_of(m.get("content")?);
    let from = text.find("<task>")? + "<task>".len();
    let to = text[from..].find("</task>")? + from;
    Some(title_of(&text[from..to])).filter(|t| !t.is_empty())
}

/// A task's first line, at most 120 characters, as a title.
fn title_of(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or_default();
    personkit_shared::wire::quote_safely(line, 120)
}

fn message(source: Source, m: &Value, key: &str, parent: Option<&str>) -> NetTurn {
    let role = s(m, "role").unwrap_or("(none)");
    let content = m.get("content").unwrap_or(&Value::Null);
    let blocks: Vec<Value> = match content {
        Value::Array(b) => b.clone(),
        Value::String(text) => vec![serde_json::json!({"type": "text", "text": text})],
        _ => Vec::new(),
    };
    let mut t = match role {
        "user" => user(source, &blocks, key, parent),
        "assistant" => assistant(source, &blocks, key, parent),
        other => return placeholder(source, key, parent, &format!("role {other}")),
    };
    // Roo Code's summary of condensed history: the model's words standing in for earlier turns, context.
    if m.get("isSummary").and_then(Value::as_bool) == Some(true) {
        t.hidden = true;
    }
    t
}

fn user(source: Source, blocks: &[Value], key: &str, parent: Option<&str>) -> NetTurn {
    let mut t = turn(source, key, parent, Role::User);
    let mut words: Vec<String> = Vec::new();
    let mut injected: Vec<String> = Vec::new();
    let mut results: Vec<String> = Vec::new();
    let mut in_result = false;
    for b in blocks {
        match s(b, "type").unwrap_or("(none)") {
            "text" => {
                let text = s(b, "text").unwrap_or_default();
                let trimmed = text.trim_start();
                if trimmed.starts_with("<environment_details>") {
                    let (dump, _) = turn_text::split_injected(trimmed, INJECTED);
                    injected.push(dump);
                    in_result = false;
                    continue;
                }
                let first = trimmed.lines().next().unwrap_or_default();
                if first.starts_with('[') && first.trim_end().ends_with("] Result:") {
                    // `[read_file for 'src/a.rs'] Result:` then the output, here or in the blocks after.
                    // Feedback given with a result (`<feedback>`) is the user's.
                    in_result = true;
                    let (own, rest) = unwrap_words(trimmed);
                    words.extend(own);
                    results.push(rest.trim().to_owned());
                    continue;
                }
                let (own, rest) = unwrap_words(text);
                words.extend(own);
                let (rest, is_own) = turn_text::split_injected(&rest, INJECTED);
                if rest.trim().is_empty() {
                    continue;
                }
                if in_result && is_own {
                    results.push(rest);
                } else if is_own {
                    words.push(rest);
                } else {
                    injected.push(rest);
                }
            }
            "tool_result" => {
                let body = text_of(b.get("content").unwrap_or(&Value::Null));
                let err = b.get("is_error").and_then(Value::as_bool) == Some(true);
                results.push(if err {
                    turn_text::tool_error(&body)
                } else {
                    body
                });
            }
            "image" => words.push(turn_text::IMAGE.into()),
            "document" => words.push(turn_text::DOCUMENT.into()),
            other => {
                let other = personkit_shared::wire::quote_safely(other, 64);
                words.push(turn_text::unsupported(&format!(
                    "{} block {other:?}",
                    source.name()
                )));
                t.unknown.push(format!("{}:block:{other}", source.name()));
            }
        }
    }
    let words: Vec<String> = words
        .into_iter()
        .map(|w| w.trim().to_owned())
        .filter(|w| !w.is_empty())
        .collect();
    let own = !words.is_empty();
    t.text = words
        .into_iter()
        .chain(injected)
        .collect::<Vec<_>>()
        .join("\n\n");
    if !results.is_empty() {
        t.tool_output = Some(cut(&results.join("\n\n")));
        if !own {
            t.role = Role::Tool;
        }
    } else if !own {
        // Nothing but what the extension added: kept, out of the user's words.
        t.hidden = true;
    }
    t
}

/// The bodies of the user-word wrappers (`<task>`, `<feedback>`, …) in `text`, and the text around them.
fn unwrap_words(text: &str) -> (Vec<String>, String) {
    let mut own = Vec::new();
    let mut rest = String::new();
    let mut left = text;
    loop {
        let next = USER_WORDS
            .iter()
            .filter_map(|tag| {
                let open = format!("<{tag}>");
                let close = format!("</{tag}>");
                let at = left.find(&open)?;
                let from = at + open.len();
                let to = left[from..].find(&close)? + from;
                Some((at, from, to, to + close.len()))
            })
            .min_by_key(|x| x.0);
        let Some((at, from, to, after)) = next else {
            rest.push_str(left);
            break;
        };
        rest.push_str(&left[..at]);
        own.push(left[from..to].trim().to_owned());
        left = &left[after..];
    }
    (own, rest)
}

fn assistant(source: Source, blocks: &[Value], key: &str, parent: Option<&str>) -> NetTurn {
    let mut t = turn(source, key, parent, Role::Assistant);
    let mut texts: Vec<String> = Vec::new();
    for b in blocks {
        match s(b, "type").unwrap_or("(none)") {
            "text" => texts.push(s(b, "text").unwrap_or_default().to_owned()),
            "thinking" | "reasoning" => {
                let r = s(b, "thinking")
                    .or_else(|| s(b, "text"))
                    .unwrap_or_default()
                    .trim()
                    .to_owned();
                if !r.is_empty() {
                    t.reasoning = Some(match t.reasoning.take() {
                        Some(p) => format!("{p}\n\n{r}"),
                        None => r,
                    });
                }
            }
            "redacted_thinking" => texts.push(turn_text::REASONING_WITHHELD.into()),
            "tool_use" => t.tool_calls.push(ToolCall {
                name: s(b, "name").unwrap_or("tool").to_owned(),
                input: cut(&b
                    .get("input")
                    .map(|i| serde_json::to_string_pretty(i).unwrap_or_default())
                    .unwrap_or_default()),
                output: None,
                id: s(b, "id").map(str::to_owned),
            }),
            "image" => texts.push(turn_text::IMAGE.into()),
            other => {
                let other = personkit_shared::wire::quote_safely(other, 64);
                texts.push(turn_text::unsupported(&format!(
                    "{} block {other:?}",
                    source.name()
                )));
                t.unknown.push(format!("{}:block:{other}", source.name()));
            }
        }
    }
    t.text = texts
        .into_iter()
        .filter(|x| !x.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");
    t
}
