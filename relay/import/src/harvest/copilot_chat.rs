//! VS Code Copilot Chat (VS Code's own chat panel; also VS Code Insiders and VSCodium): per workspace
//! `<Code User>/workspaceStorage/<workspace id>/chatSessions/<session id>.json` or `.jsonl`, and for windows
//! without a folder `<Code User>/globalStorage/emptyWindowChatSessions/<session id>.json` / `.jsonl`. Format facts:
//! microsoft/vscode `src/vs/workbench/contrib/chat/common/model/chatSessionStore.ts`, `objectMutationLog.ts` and
//! `chatModel.ts` (`ISerializableChatData`, `ISerializableChatRequestData`) @ 047238f9; vshulcz/deja-vu
//! `docs/registry/copilot-chat.md` @ 0375489f.
//!
//! - `.json` (before VS Code 1.109, or with `chat.useLogSessionStorage` off): the session object.
//! - `.jsonl`: an operation log replayed in order — `{kind: 0, v}` the whole session, `{kind: 1, k: [path], v}`
//!   set, `{kind: 2, k: [path], v: [items], i?}` push (cut the list to `i` items first), `{kind: 3, k: [path]}`
//!   delete. VS Code rewrites the file as one `kind: 0` line when the log grows long, so the file is read whole
//!   each time it changed (a last line without its newline that does not parse is being written: left).
//!
//! The session `{sessionId, creationDate, customTitle, requests[]}`; a request `{requestId, message: {text} or a
//! string, variableData {variables[{name}]}, response[], modelId, timestamp (ms)}` gives the user's turn (keyed
//! by the request id; the files and symbols attached named under it as `[context: …]`) and the answer's turn
//! (keyed `<request id>:response`) made of the response parts: Markdown `{value}` (or `markdownContent`), a
//! `thinking` part (reasoning), `toolInvocationSerialized` (a tool call: `toolId`, `toolCallId`, the
//! `invocationMessage` and the terminal's `toolSpecificData.commandLine` as input, `pastTenseMessage` /
//! `resultDetails` as output), `textEditGroup` (an edit of a file, as an `edit` tool call naming it),
//! `inlineReference` (a file or symbol named in the answer, kept in its text); UI parts (progress, undo stops,
//! code block links, warnings, confirmations…) are skipped by name; any other kind is kept as an
//! `[unsupported: …]` marker. One thread per session, titled by `customTitle`.

use std::path::Path;

use personkit_shared::network::ToolCall;
use personkit_shared::wire::Role;
use serde_json::{Map, Value};

use super::{Collected, Notes, Source, cut, text_of, turn};

const SRC: Source = Source::CopilotChat;

/// Response parts that are the chat panel's chrome, not what the model said.
const UI_PARTS: &[&str] = &[
    "progressMessage",
    "progressTask",
    "progressTaskSerialized",
    "undoStop",
    "codeblockUri",
    "prepareToolInvocation",
    "warning",
    "confirmation",
    "command",
    "mcpServersStarting",
    "elicitation",
    "elicitationSerialized",
    "notebookEditGroup",
    "pullRequest",
    "extensions",
    "treeData",
    "multiDiffData",
    "codeCitation",
    "reference",
];

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// A string, or a MarkdownString `{value}`.
fn md(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        o @ Value::Object(_) => s(o, "value").map(str::to_owned),
        _ => None,
    }
    .filter(|s| !s.trim().is_empty())
}

pub fn read(
    path: &Path,
    bytes: &[u8],
    out: &mut Collected,
    notes: &mut Notes,
) -> Result<(), String> {
    let session = if path.extension().is_some_and(|e| e == "jsonl") {
        replay(bytes, notes)?
    } else {
        serde_json::from_slice::<Value>(bytes).map_err(|e| format!("not valid JSON ({e})"))?
    };
    let Some(Value::Array(requests)) = session.get("requests") else {
        return Err("not a chat session (no `requests` list)".into());
    };
    let conv = s(&session, "sessionId")
        .map(str::to_owned)
        .unwrap_or_else(|| {
            path.file_stem()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| "session".into())
        });
    let title = s(&session, "customTitle");
    let mut prev: Option<String> = None;
    for (i, r) in requests.iter().enumerate() {
        let what = || format!("request {}", i + 1);
        notes.record(out, None, &what, |out, notes| {
            let Some(id) = s(r, "requestId") else {
                notes
                    .problems
                    .push((None, format!("request {} has no requestId; skipped", i + 1)));
                return;
            };
            let at = r.get("timestamp").and_then(Value::as_i64);
            let place = u32::try_from(2 * i).ok();
            let prompt = match r.get("message") {
                Some(Value::String(t)) => t.clone(),
                Some(m) => s(m, "text").unwrap_or_default().to_owned(),
                None => String::new(),
            };
            let mut u = turn(SRC, id, prev.as_deref(), Role::User);
            u.text = prompt;
            if let Some(Value::Array(vars)) = r.get("variableData").and_then(|d| d.get("variables"))
            {
                let names: Vec<&str> = vars.iter().filter_map(|x| s(x, "name")).collect();
                if !names.is_empty() {
                    u.text
                        .push_str(&format!("\n\n[context: {}]", names.join(", ")));
                }
            }
            u.created_at_ms = at;
            u.position = place;
            u.on_current_branch = Some(true);
            let akey = format!("{id}:response");
            let mut a = turn(SRC, &akey, Some(id), Role::Assistant);
            a.model = s(r, "modelId").map(str::to_owned);
            a.created_at_ms = at;
            a.position = place.map(|p| p + 1);
            a.on_current_branch = Some(true);
            let mut text = String::new();
            let mut thoughts: Vec<String> = Vec::new();
            if let Some(Value::Array(parts)) = r.get("response") {
                for p in parts {
                    match s(p, "kind") {
                        None => {
                            if let Some(v) = md(Some(p)) {
                                text.push_str(&v);
                            }
                        }
                        Some("markdownContent") => {
                            if let Some(v) = md(p.get("content")) {
                                text.push_str(&v);
                            }
                        }
                        Some("inlineReference") => {
                            let r = p.get("inlineReference").unwrap_or(&Value::Null);
                            let name = s(p, "name")
                                .or_else(|| s(r, "name"))
                                .or_else(|| s(r, "path"))
                                .or_else(|| r.get("uri").and_then(|u| s(u, "path")));
                            if let Some(n) = name {
                                text.push_str(&format!("`{n}`"));
                            }
                        }
                        Some("thinking") => {
                            let v = match p.get("value") {
                                Some(Value::Array(xs)) => xs
                                    .iter()
                                    .filter_map(Value::as_str)
                                    .collect::<Vec<_>>()
                                    .join(""),
                                Some(x) => text_of(x),
                                None => String::new(),
                            };
                            if !v.trim().is_empty() {
                                thoughts.push(v);
                            }
                        }
                        Some("toolInvocationSerialized") => {
                            let mut input = md(p.get("invocationMessage")).unwrap_or_default();
                            if let Some(cmd) = p
                                .get("toolSpecificData")
                                .and_then(|d| d.get("commandLine"))
                                .and_then(|c| {
                                    s(c, "userEdited")
                                        .or_else(|| s(c, "toolEdited"))
                                        .or_else(|| s(c, "original"))
                                })
                            {
                                input = format!("{input}\n$ {cmd}").trim().to_owned();
                            }
                            let output = md(p.get("pastTenseMessage")).or_else(|| {
                                p.get("resultDetails")
                                    .filter(|d| !d.is_null())
                                    .map(|d| d.to_string())
                            });
                            a.tool_calls.push(ToolCall {
                                name: s(p, "toolId").unwrap_or("tool").to_owned(),
                                input: cut(&input),
                                output: output.as_deref().map(cut),
                                id: s(p, "toolCallId").map(str::to_owned),
                            });
                        }
                        Some("textEditGroup") => {
                            let file = p
                                .get("uri")
                                .and_then(|u| s(u, "path").or_else(|| u.as_str()))
                                .unwrap_or("(file)");
                            a.tool_calls.push(ToolCall {
                                name: "edit".into(),
                                input: file.to_owned(),
                                output: None,
                                id: None,
                            });
                        }
                        Some(k) if UI_PARTS.contains(&k) => {
                            notes.skip(&format!("copilot-chat response part {k}"));
                        }
                        Some(k) => {
                            let k = personkit_shared::wire::quote_safely(k, 64);
                            text.push_str(&format!(
                                "\n\n{}\n\n",
                                personkit_shared::turn_text::unsupported(&format!(
                                    "copilot-chat response part {k:?}"
                                ))
                            ));
                            a.unknown.push(format!("copilot-chat:{k}"));
                        }
                    }
                }
            }
            a.text = text.trim().to_owned();
            if !thoughts.is_empty() {
                a.reasoning = Some(thoughts.join("\n\n"));
            }
            out.push(SRC, &conv, title, u);
            let empty = a.text.is_empty() && a.reasoning.is_none() && a.tool_calls.is_empty();
            if !empty {
                out.push(SRC, &conv, title, a);
                prev = Some(akey);
            } else {
                prev = Some(id.to_owned());
            }
        });
    }
    Ok(())
}

/// The session a `.jsonl` operation log describes.
fn replay(bytes: &[u8], notes: &mut Notes) -> Result<Value, String> {
    let text = String::from_utf8_lossy(bytes);
    let mut session: Option<Value> = None;
    let lines: Vec<&str> = text.split('\n').collect();
    let last = lines.len().saturating_sub(1);
    for (i, line) in lines.iter().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let no = Some(i as u64 + 1);
        let op: Value = match serde_json::from_str(line) {
            Ok(v @ Value::Object(_)) => v,
            // A last line without its newline that does not parse is still being written.
            Err(_) if i == last => continue,
            _ => {
                notes.problems.push((
                    no,
                    "not a JSON operation; skipped, the lines after it were read".into(),
                ));
                continue;
            }
        };
        let kind = op.get("kind").and_then(Value::as_i64);
        let keys: Vec<Value> = match op.get("k") {
            Some(Value::Array(k)) => k.clone(),
            _ => Vec::new(),
        };
        match (kind, session.as_mut()) {
            (Some(0), _) => session = op.get("v").cloned(),
            (Some(1), Some(root)) => {
                if let Some(slot) = at(root, &keys, true) {
                    *slot = op.get("v").cloned().unwrap_or(Value::Null);
                } else {
                    notes
                        .problems
                        .push((no, "a set at a path that does not exist; skipped".into()));
                }
            }
            (Some(2), Some(root)) => match at(root, &keys, true) {
                Some(slot) => {
                    if !slot.is_array() {
                        *slot = Value::Array(Vec::new());
                    }
                    if let Value::Array(list) = slot {
                        if let Some(cut_to) = op.get("i").and_then(Value::as_u64) {
                            list.truncate(cut_to as usize);
                        }
                        match op.get("v") {
                            Some(Value::Array(items)) => list.extend(items.iter().cloned()),
                            Some(Value::Null) | None => {}
                            Some(one) => list.push(one.clone()),
                        }
                    }
                }
                None => notes
                    .problems
                    .push((no, "a push at a path that does not exist; skipped".into())),
            },
            (Some(3), Some(root)) => {
                if let Some((last_key, parent)) = keys.split_last()
                    && let Some(p) = at(root, parent, false)
                {
                    match (p, last_key) {
                        (Value::Object(o), Value::String(k)) => {
                            o.remove(k);
                        }
                        (Value::Array(a), Value::Number(n)) => {
                            if let Some(n) = n.as_u64().map(|n| n as usize)
                                && n < a.len()
                            {
                                a.remove(n);
                            }
                        }
                        _ => {}
                    }
                }
            }
            (Some(1..=3), None) => notes.problems.push((
                no,
                "an operation before the session's first record; skipped".into(),
            )),
            _ => notes
                .problems
                .push((no, "an operation of an unknown kind; skipped".into())),
        }
    }
    session.ok_or_else(|| "no session record (kind 0) in the log".into())
}

/// The value at `keys` under `root`; with `create`, missing object members on the way are made.
fn at<'a>(root: &'a mut Value, keys: &[Value], create: bool) -> Option<&'a mut Value> {
    let mut cur = root;
    for k in keys {
        cur = match (cur, k) {
            (Value::Object(o), Value::String(name)) => {
                if create && !o.contains_key(name) {
                    o.insert(name.clone(), Value::Object(Map::new()));
                }
                o.get_mut(name)?
            }
            (Value::Array(a), Value::Number(n)) => a.get_mut(usize::try_from(n.as_u64()?).ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}
