//! Gemini CLI: `~/.gemini/tmp/<sha256 of the project path>/chats/session-<time>-<id>.json` (older builds) or
//! `.jsonl`; newer builds name the project folder by a slug of the project's name (`tmp/<slug>/chats/*.jsonl`)
//! and keep the project's path in `tmp/<slug>/.project_root`, whose last part titles a session without a
//! summary. Format facts: google-gemini/gemini-cli `packages/core/src/services/chatRecordingTypes.ts` /
//! `chatRecordingService.ts` (`ConversationRecord`, `MessageRecord`, `ToolCallRecord`; `../shared/docs/formats.md`).
//!
//! - `.json`: one `ConversationRecord` `{sessionId, projectHash, startTime, lastUpdated, messages[], summary?}`,
//!   rewritten whole as the session grows, so the file is read whole each time it changed.
//! - `.jsonl`: the record's fields on the first line, then one message per line, `{"$set": {…}}` lines updating
//!   the record's fields, and `{"$rewindTo": "<message id>"}` lines: the user went back to before that message,
//!   so the messages from it on leave the shown conversation (what was stored stays; the next message is placed
//!   where the rewound one was, as a revision of it).
//!
//! Messages `{id, timestamp, type, content}`: `user`; `gemini` (with `toolCalls[{id, name, args, result,
//! resultDisplay, status}]`, `thoughts[{subject, description}]` as reasoning, `model`); `info` / `error` /
//! `warning` kept as context turns; any other type a placeholder. `content` is a string or a list of parts.
//! A turn's key is the message id, its parent the message before it; the thread is the `sessionId`, titled by
//! `summary` when there is one. Sending the whole file again is idempotent: turns already stored answer as
//! duplicates.

use std::path::Path;

use personkit_shared::network::{NetTurn, ToolCall};
use personkit_shared::wire::Role;
use serde_json::{Map, Value};

use super::{Collected, Notes, Source, cut, placeholder, text_of, time_ms, turn};

const SRC: Source = Source::GeminiCli;

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// Reads one session file into `out`; an error when the file is not (yet) a readable session.
pub fn read(
    path: &Path,
    bytes: &[u8],
    out: &mut Collected,
    notes: &mut Notes,
) -> Result<(), String> {
    let text = String::from_utf8_lossy(bytes);
    let (record, messages) = if path.extension().is_some_and(|e| e == "jsonl") {
        jsonl(&text, notes)
    } else {
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("not valid JSON ({e})"))?;
        let msgs = match v.get("messages") {
            Some(Value::Array(m)) => m.clone(),
            _ => return Err("not a Gemini CLI session (no `messages` list)".into()),
        };
        let Value::Object(rec) = v else {
            return Err("not a Gemini CLI session (not an object)".into());
        };
        (rec, msgs)
    };
    let conv = record
        .get("sessionId")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| {
            path.file_stem()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| "session".into())
        });
    // The session's summary, else the project's name: newer builds keep each project in a folder named after it
    // (`tmp/<slug>/`) with a `.project_root` file holding the project's path.
    let project = project_name(path);
    let title = record
        .get("summary")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .or(project.as_deref());
    let mut prev: Option<String> = None;
    for (i, m) in messages.iter().enumerate() {
        let key = s(m, "id")
            .map(str::to_owned)
            .unwrap_or_else(|| format!("#{i}"));
        let mut t = message(m, &key, prev.as_deref());
        t.created_at_ms = time_ms(m.get("timestamp"));
        notes.record(out, None, &|| format!("message {}", i + 1), |out, _| {
            out.push(SRC, &conv, title, t)
        });
        prev = Some(key);
    }
    Ok(())
}

/// The last part of the path in `<project folder>/.project_root` beside the session's `chats/` folder, if any.
fn project_name(session: &Path) -> Option<String> {
    use std::io::Read;
    let file = session.parent()?.parent()?.join(".project_root");
    let mut text = String::new();
    std::fs::File::open(file)
        .ok()?
        .take(4096)
        .read_to_string(&mut text)
        .ok()?;
    let root = text.trim().trim_end_matches(['/', '\\']);
    let name = root.rsplit(['/', '\\']).next()?.trim();
    (!name.is_empty()).then(|| personkit_shared::wire::quote_safely(name, 120))
}

/// The `.jsonl` form: the record's fields and its messages after every `$set` and `$rewindTo`.
fn jsonl(text: &str, notes: &mut Notes) -> (Map<String, Value>, Vec<Value>) {
    let mut record = Map::new();
    let mut messages: Vec<Value> = Vec::new();
    let complete = text.rfind('\n').map_or("", |i| &text[..i]);
    for (i, line) in complete.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let v: Value = match serde_json::from_str(line) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) | Err(_) => {
                notes.problems.push((
                    Some(i as u64 + 1),
                    "not a JSON record; skipped, the lines after it were read".into(),
                ));
                continue;
            }
        };
        if let Some(Value::Object(set)) = v.get("$set") {
            for (k, x) in set {
                record.insert(k.clone(), x.clone());
            }
        } else if let Some(id) = v.get("$rewindTo").and_then(Value::as_str) {
            if let Some(at) = messages.iter().position(|m| s(m, "id") == Some(id)) {
                messages.truncate(at);
            }
        } else if v.get("type").is_some() && v.get("id").is_some() {
            messages.push(v);
        } else if let Value::Object(o) = v {
            for (k, x) in o {
                if k != "messages" {
                    record.insert(k, x);
                } else if let Value::Array(m) = x {
                    messages.extend(m);
                }
            }
        }
    }
    (record, messages)
}

fn message(m: &Value, key: &str, parent: Option<&str>) -> NetTurn {
    let ty = s(m, "type").unwrap_or("(none)");
    let content = text_of(m.get("content").unwrap_or(&Value::Null));
    match ty {
        "user" => {
            let mut t = turn(SRC, key, parent, Role::User);
            t.text = content;
            t
        }
        "gemini" | "model" => {
            let mut t = turn(SRC, key, parent, Role::Assistant);
            t.text = content;
            t.model = s(m, "model").map(str::to_owned);
            if let Some(Value::Array(th)) = m.get("thoughts") {
                let r = th
                    .iter()
                    .map(|x| match (s(x, "subject"), s(x, "description")) {
                        (Some(a), Some(b)) => format!("**{a}** {b}"),
                        (Some(a), None) | (None, Some(a)) => a.to_owned(),
                        (None, None) => String::new(),
                    })
                    .filter(|x| !x.is_empty())
                    .collect::<Vec<_>>()
                    .join("\n\n");
                if !r.is_empty() {
                    t.reasoning = Some(r);
                }
            }
            if let Some(Value::Array(calls)) = m.get("toolCalls") {
                for c in calls {
                    let output = s(c, "resultDisplay")
                        .map(str::to_owned)
                        .or_else(|| c.get("result").map(result_text))
                        .filter(|o| !o.trim().is_empty());
                    t.tool_calls.push(ToolCall {
                        name: s(c, "name").unwrap_or("tool").to_owned(),
                        input: cut(&c
                            .get("args")
                            .map(|a| serde_json::to_string_pretty(a).unwrap_or_default())
                            .unwrap_or_default()),
                        output: output.as_deref().map(cut),
                        id: s(c, "id").map(str::to_owned),
                    });
                }
            }
            t
        }
        "info" | "error" | "warning" => {
            let mut t = turn(SRC, key, parent, Role::System);
            t.text = personkit_shared::turn_text::note(ty, &content);
            t.hidden = true;
            t
        }
        other => placeholder(SRC, key, parent, other),
    }
}

/// A tool result (`PartListUnion`): function responses' output, or the parts' text.
fn result_text(v: &Value) -> String {
    match v {
        Value::Array(parts) => parts
            .iter()
            .map(
                |p| match p.get("functionResponse").and_then(|f| f.get("response")) {
                    Some(r) => r
                        .get("output")
                        .or_else(|| r.get("error"))
                        .map(text_of)
                        .unwrap_or_else(|| r.to_string()),
                    None => text_of(&Value::Array(vec![p.clone()])),
                },
            )
            .collect::<Vec<_>>()
            .join("\n"),
        other => text_of(other),
    }
}
