//! Continue (the IDE extension): `~/.continue/sessions/<session id>.json`, beside `sessions.json` (the list of
//! sessions, not read). Format facts: bdougie/vibe-check `docs/continue-session-tracking.md`, continuedev/continue
//! `core/index.d.ts` (`Session`, `ChatHistoryItem`, `ChatMessage`; `../shared/docs/formats.md`).
//!
//! A session `{sessionId, title, workspaceDirectory, history[]}` is rewritten whole as it grows, so a changed
//! file is read whole. Each history item `{message, contextItems[], reasoning?}`; `message {role, content,
//! toolCalls?, toolCallId?, id?}` with roles `user`, `assistant`, `thinking` (reasoning), `system` (context),
//! `tool` (a tool's output); `content` a string or parts (`text`, `imageUrl` → `[image]`). The context items a
//! prompt carried (files, docs) are named under the prompt, not copied. A turn's key is the message id, else its
//! place in the history (`#<n>`, stable as the history only grows), its parent the item before it, and its
//! place the turn's ordinal (there are no timestamps).

use std::path::Path;

use personkit_shared::network::ToolCall;
use personkit_shared::wire::Role;
use serde_json::Value;

use super::{Collected, Notes, Source, cut, placeholder, text_of, turn};

const SRC: Source = Source::Continue;

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

pub fn read(
    path: &Path,
    bytes: &[u8],
    out: &mut Collected,
    notes: &mut Notes,
) -> Result<(), String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON ({e})"))?;
    let Some(Value::Array(history)) = v.get("history") else {
        return Err("not a Continue session (no `history` list)".into());
    };
    let conv = s(&v, "sessionId").map(str::to_owned).unwrap_or_else(|| {
        path.file_stem()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| "session".into())
    });
    let title = s(&v, "title");
    let mut prev: Option<String> = None;
    for (i, item) in history.iter().enumerate() {
        let m = item.get("message").unwrap_or(&Value::Null);
        let key = s(m, "id")
            .map(str::to_owned)
            .unwrap_or_else(|| format!("#{i}"));
        let role = s(m, "role").unwrap_or("(none)");
        let content = text_of(m.get("content").unwrap_or(&Value::Null));
        let mut t = match role {
            "user" | "assistant" => {
                let mut t = turn(
                    SRC,
                    &key,
                    prev.as_deref(),
                    if role == "user" {
                        Role::User
                    } else {
                        Role::Assistant
                    },
                );
                t.text = content;
                if let Some(Value::Array(calls)) = m.get("toolCalls") {
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
                if let Some(r) = item.get("reasoning").and_then(|r| s(r, "text")) {
                    t.reasoning = Some(r.to_owned());
                }
                if role == "user"
                    && let Some(Value::Array(ctx)) = item.get("contextItems")
                {
                    let names: Vec<&str> = ctx.iter().filter_map(|c| s(c, "name")).collect();
                    if !names.is_empty() {
                        t.text
                            .push_str(&format!("\n\n[context: {}]", names.join(", ")));
                    }
                }
                t
            }
            "thinking" => {
                let mut t = turn(SRC, &key, prev.as_deref(), Role::Assistant);
                t.reasoning = Some(content);
                t
            }
            "tool" => {
                let mut t = turn(SRC, &key, prev.as_deref(), Role::Tool);
                t.tool_output = Some(cut(&content));
                t
            }
            "system" => {
                let mut t = turn(SRC, &key, prev.as_deref(), Role::System);
                t.text = content;
                t.hidden = true;
                t
            }
            other => placeholder(SRC, &key, prev.as_deref(), other),
        };
        t.position = u32::try_from(i).ok();
        t.on_current_branch = Some(true);
        notes.record(
            out,
            None,
            &|| format!("history item {}", i + 1),
            |out, _| out.push(SRC, &conv, title, t),
        );
        prev = Some(key);
    }
    Ok(())
}
