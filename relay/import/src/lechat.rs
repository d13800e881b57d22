//! Mistral Le Chat's export: one `chat-<uuid>.json` per conversation (attachments beside it in
//! `chat-<uuid>-files/`), the file a bare list of messages with no conversation wrapper and no title.
//!
//! A message is `{id, version, chatId, role: user|assistant, content, contentChunks: [{type: text, text} |
//! {type: tool_call, name, toolType, publicArguments, publicResult, …} | {type: reference, referenceIds} |
//! {type: custom_element, …}] | null, createdAt (RFC 3339), files: [{type: image|text|document, name}], …}`
//! (Superkikim/nexus-ai-chat-importer `src/providers/lechat/lechat-types.ts`, typed from real exports). The
//! messages carry no parent: they are one thread in order of `createdAt` (file order when a time is missing).
//! `reference` chunks name sources by number only, with no table of them in the export, so they give nothing.
//!
//! The thread is the one live capture of `chat.mistral.ai/chat/<uuid>` makes (surface `browser-ext:mistral`, the
//! same conversation id), so an import and a live capture meet in one thread.

use std::collections::{BTreeMap, HashSet};

use personkit_shared::network::{NetTurn, ToolCall};
use personkit_shared::turn_text;
use personkit_shared::wire::Role;
use serde_json::Value;

use crate::formats::{SourceConversation, Unreadable};

/// Live capture's surface for Le Chat.
pub const SURFACE: &str = "browser-ext:mistral";
/// The most messages read from one conversation file; the rest are reported.
pub const MAX_MESSAGES: usize = 100_000;

/// Whether a file name is Le Chat's `chat-<uuid>.json`.
pub fn is_chat_name(base: &str) -> bool {
    base.strip_prefix("chat-")
        .and_then(|r| r.strip_suffix(".json"))
        .is_some_and(|id| id.len() >= 8 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'))
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// A tool's arguments or result as text: a string as it is, anything else as JSON.
fn as_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// One message → its turn, or the reason it cannot be read.
fn turn(m: &Value, conversation_id: &str) -> Result<NetTurn, &'static str> {
    if !m.is_object() {
        return Err("not_an_object");
    }
    let id = str_at(m, "id").ok_or("no_id")?;
    let role = match str_at(m, "role") {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("system") => Role::System,
        _ => return Err("not_understood"),
    };
    let mut t = NetTurn::empty(SURFACE.to_owned(), id.to_owned(), role);
    t.conversation_id = Some(conversation_id.to_owned());
    t.created_at_ms = str_at(m, "createdAt").and_then(personkit_shared::time::parse_rfc3339);
    let mut lines: Vec<String> = Vec::new();
    for f in m
        .get("files")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = str_at(f, "name").unwrap_or_default();
        lines.push(match str_at(f, "type") {
            Some("image") => turn_text::image(""),
            _ => turn_text::file(name),
        });
    }
    let mut chunk_text = String::new();
    for c in m
        .get("contentChunks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match str_at(c, "type") {
            Some("text") => chunk_text.push_str(str_at(c, "text").unwrap_or_default()),
            Some("tool_call") => t.tool_calls.push(ToolCall {
                name: str_at(c, "name")
                    .or_else(|| str_at(c, "toolType"))
                    .unwrap_or("tool")
                    .to_owned(),
                input: as_text(c.get("publicArguments")).unwrap_or_default(),
                output: as_text(c.get("publicResult")),
                id: str_at(c, "id").map(str::to_owned),
            }),
            // Sources by number, with no table of them in the export; a page widget: nothing to keep as text.
            Some("reference" | "custom_element") => {}
            other => {
                let what = format!("chunk:{}", other.unwrap_or("none"));
                lines.push(turn_text::unsupported(&what));
                t.unknown.push(what);
            }
        }
    }
    // `content` is the message's whole text; the text chunks repeat it in pieces.
    let text = str_at(m, "content").map_or(chunk_text, str::to_owned);
    if !text.trim().is_empty() {
        lines.push(text);
    }
    t.text = lines.join("\n");
    Ok(t)
}

/// The conversation of one `chat-<uuid>.json`: its messages as read from the file (each a JSON value, or why it
/// could not be kept). `file` names the file, whose `chat-<uuid>` gives the id when no message has a `chatId`.
pub fn conversation(
    file: &str,
    messages: Vec<Result<Value, String>>,
) -> Result<SourceConversation, Unreadable> {
    let base = file.rsplit(['/', '\\', '!']).next().unwrap_or(file);
    let from_name =
        is_chat_name(base).then(|| base["chat-".len()..base.len() - ".json".len()].to_owned());
    let conversation_id = messages
        .iter()
        .filter_map(|m| m.as_ref().ok())
        .find_map(|m| str_at(m, "chatId"))
        .map(str::to_owned)
        .or(from_name)
        .ok_or_else(|| Unreadable {
            conversation_id: None,
            why: "no message has a chatId and the file is not named chat-<id>.json".into(),
        })?;
    let mut unreadable: BTreeMap<String, u64> = BTreeMap::new();
    let mut turns: Vec<NetTurn> = Vec::new();
    let mut keys: HashSet<String> = HashSet::new();
    for m in &messages {
        let t = match m {
            Ok(v) => turn(v, &conversation_id),
            Err(_) => Err("too_large"),
        };
        match t {
            Ok(mut t) => {
                // A second message with the same id (a regenerated answer) is kept under a key of its own.
                if !keys.insert(t.message_key.clone()) {
                    t.message_key = format!("{}#{}", t.message_key, turns.len());
                    keys.insert(t.message_key.clone());
                }
                turns.push(t);
            }
            Err(why) => *unreadable.entry(why.to_owned()).or_default() += 1,
        }
    }
    if turns.is_empty() && !unreadable.is_empty() {
        return Err(Unreadable {
            conversation_id: Some(conversation_id),
            why: format!(
                "none of its {} messages could be read ({})",
                messages.len(),
                crate::formats::describe_unreadable(&unreadable)
            ),
        });
    }
    if turns.iter().all(|t| t.created_at_ms.is_some()) {
        turns.sort_by_key(|t| t.created_at_ms);
    }
    let mut parent: Option<String> = None;
    for (i, t) in turns.iter_mut().enumerate() {
        t.parent_key = parent.replace(t.message_key.clone());
        t.position = Some(i as u32);
        t.on_current_branch = Some(true);
    }
    Ok(SourceConversation {
        surface: SURFACE.to_owned(),
        url: Some(format!("https://chat.mistral.ai/chat/{conversation_id}")),
        conversation_id,
        // The export has none.
        title: None,
        updated_at_ms: turns.iter().filter_map(|t| t.created_at_ms).max(),
        turns,
        unreadable,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn chat_file_names() {
        assert!(is_chat_name(
            "chat-0b8f2c1e-7d1a-4c55-9e0b-3f6a2d9c1e77.json"
        ));
        for no in [
            "chat-.json",
            "chat-notes.json",
            "chats.json",
            "chat-0b8f2c1e.txt",
        ] {
            assert!(!is_chat_name(no), "{no}");
        }
    }
}
