//! Cursor (the IDE): `<Cursor User>/globalStorage/state.vscdb`, a SQLite file (`~/.config/Cursor/User` on
//! Linux, `~/Library/Application Support/Cursor/User` on macOS). Format facts (reverse-engineered by readers;
//! Cursor publishes none): michaeldhood/chatrxiv `docs/cursor/storage-reference.md` @ d28513a8, vshulcz/deja-vu
//! `docs/registry/cursor.md` @ 0b1ddf23, hanzoai/agents `docs/desktop/CURSOR_MESSAGE_HISTORY.md`
//! (`../shared/docs/formats.md`, and the research notes the fixtures' README names).
//!
//! Table `cursorDiskKV(key TEXT UNIQUE, value BLOB)`, values JSON:
//! - `composerData:<composerId>`: one chat (a "composer"), `{composerId, name, createdAt, lastUpdatedAt (Unix ms),
//!   fullConversationHeadersOnly: [{bubbleId, type}], …}`, the headers in display order; older builds keep the
//!   messages inline instead, as `conversation: [bubble…]` (or `conversationMap: {bubbleId: bubble}` beside the
//!   headers).
//! - `bubbleId:<composerId>:<bubbleId>`: one message, `{bubbleId, type (1 user, 2 assistant), text, thinking
//!   {text}, allThinkingBlocks, toolFormerData {name, rawArgs, result, status, toolCallId}, modelInfo
//!   {modelName}, createdAt (RFC 3339)}`.
//!
//! - Older builds' chat panel, in each workspace's `workspaceStorage/<hash>/state.vscdb`: the `ItemTable` key
//!   `workbench.panel.aichat.view.aichat.chatdata`, `{tabs: [{tabId, chatTitle, bubbles: [{type: "user"|"ai",
//!   text, id?}]}]}`: a thread per tab, a turn per bubble (keyed by its id, else `<tabId>#<place>`).
//!
//! One thread per composer (its id, titled by `name`); a turn per bubble, keyed by the bubble id, its parent the
//! bubble before it. An assistant bubble with no text, reasoning or tool call (Cursor writes such placeholders
//! around tool runs) is skipped by name; a bubble the headers do not list (left behind by an edit of an earlier
//! message) is skipped by name too; a header whose bubble has no record is a problem. Every turn is sent again
//! on each read: bubble ids make that idempotent.

use std::collections::HashMap;

use personkit_shared::network::{NetTurn, ToolCall};
use personkit_shared::wire::Role;
use personkit_store::foreign::{Cell, ForeignDb, Select};
use serde_json::Value;

use super::{Collected, Notes, Source, cut, placeholder, text_of, time_ms, turn};

const SRC: Source = Source::Cursor;
const TABLE: &str = "cursorDiskKV";
const ITEMS: &str = "ItemTable";
/// The older chat panel's record in a workspace's `ItemTable`.
const OLD_CHAT_KEY: &str = "workbench.panel.aichat.view.aichat.chatdata";
/// What a session id of the older chat panel starts with (composer ids are UUIDs).
const TAB: &str = "tab:";
/// Chats read from one file, and messages from one chat.
const MAX_COMPOSERS: usize = 100_000;
const MAX_BUBBLES: usize = 100_000;

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The chats of the file (their composer ids).
pub fn sessions(db: &ForeignDb, notes: &mut Notes) -> Result<Vec<String>, String> {
    let kv = db.has_table(TABLE).map_err(|e| e.to_string())?;
    let items = db.has_table(ITEMS).map_err(|e| e.to_string())?;
    if !kv && !items {
        return Err(format!(
            "no `{TABLE}` or `{ITEMS}` table: not a Cursor state database"
        ));
    }
    let mut ids: Vec<String> = Vec::new();
    // The older chat panel's tabs (a workspace's database).
    if items {
        match old_chat_data(db) {
            Ok(Some(Value::Object(data))) => {
                if let Some(Value::Array(tabs)) = data.get("tabs") {
                    ids.extend(
                        tabs.iter()
                            .filter_map(|t| s(t, "tabId"))
                            .map(|t| format!("{TAB}{t}")),
                    );
                }
            }
            Ok(None) => {}
            Ok(Some(_)) | Err(_) => notes.problems.push((
                None,
                format!(
                    "the older chat panel's record (`{OLD_CHAT_KEY}`) is not a JSON object; skipped"
                ),
            )),
        }
    }
    if !kv {
        return Ok(ids);
    }
    let rows = db
        .rows(&Select {
            table: TABLE,
            columns: &["key"],
            prefix: Some(("key", "composerData:")),
            order: &["key"],
            limit: MAX_COMPOSERS + 1,
            ..Select::default()
        })
        .map_err(|e| e.to_string())?;
    if rows.len() > MAX_COMPOSERS {
        notes.problems.push((
            None,
            format!("more than {MAX_COMPOSERS} chats; the first {MAX_COMPOSERS} were read"),
        ));
    }
    ids.extend(rows.iter().take(MAX_COMPOSERS).filter_map(|r| {
        r.first()?
            .text()?
            .strip_prefix("composerData:")
            .map(str::to_owned)
    }));
    Ok(ids)
}

/// The older chat panel's record, `{tabs: [{tabId, chatTitle, bubbles: [{type: "user"|"ai", text, id?}]}]}`.
fn old_chat_data(db: &ForeignDb) -> Result<Option<Value>, String> {
    let rows = db
        .rows(&Select {
            table: ITEMS,
            columns: &["value"],
            eq: Some(("key", OLD_CHAT_KEY)),
            limit: 1,
            ..Select::default()
        })
        .map_err(|e| e.to_string())?;
    match rows.first().and_then(|r| r.first()) {
        None => Ok(None),
        Some(c) => match c.text().map(serde_json::from_str::<Value>) {
            Some(Ok(v)) => Ok(Some(v)),
            _ => Err("not JSON".into()),
        },
    }
}

/// One tab of the older chat panel into `out`.
fn old_tab(db: &ForeignDb, tab: &str, out: &mut Collected, notes: &mut Notes) {
    let Ok(Some(data)) = old_chat_data(db) else {
        return;
    };
    let Some(t) = data
        .get("tabs")
        .and_then(Value::as_array)
        .and_then(|tabs| tabs.iter().find(|t| s(t, "tabId") == Some(tab)))
    else {
        return;
    };
    let title = s(t, "chatTitle");
    let Some(Value::Array(bubbles)) = t.get("bubbles") else {
        return;
    };
    let mut prev: Option<String> = None;
    for (i, b) in bubbles.iter().enumerate() {
        let key = s(b, "id").map_or_else(|| format!("{tab}#{i}"), str::to_owned);
        notes.record(
            out,
            None,
            &|| format!("chat tab {tab}, message {}", i + 1),
            |out, notes| {
                let role = match s(b, "type") {
                    Some("user") => Role::User,
                    Some("ai") => Role::Assistant,
                    other => {
                        let what = format!("bubble type {}", other.unwrap_or("(none)"));
                        return out.push(
                            SRC,
                            tab,
                            title,
                            placeholder(SRC, &key, prev.as_deref(), &what),
                        );
                    }
                };
                let mut t = turn(SRC, &key, prev.as_deref(), role);
                t.text = s(b, "text").unwrap_or_default().to_owned();
                if t.text.trim().is_empty() {
                    return notes.skip("cursor message with no content");
                }
                t.position = u32::try_from(i).ok();
                t.on_current_branch = Some(true);
                out.push(SRC, tab, title, t);
            },
        );
        prev = Some(key);
    }
}

/// One chat's turns into `out`.
pub fn session(db: &ForeignDb, id: &str, out: &mut Collected, notes: &mut Notes) {
    if let Some(tab) = id.strip_prefix(TAB) {
        return old_tab(db, tab, out, notes);
    }
    let key = format!("composerData:{id}");
    let what = || format!("chat {id}");
    let composer = db.rows(&Select {
        table: TABLE,
        columns: &["value"],
        eq: Some(("key", &key)),
        limit: 1,
        ..Select::default()
    });
    let composer: Value = match composer
        .as_deref()
        .map(|r| r.first().and_then(|r| r.first()))
    {
        Ok(Some(Cell::TooLarge(n))) => {
            return bad(
                out,
                notes,
                &what,
                format!("its record is {n} bytes, too large; not read"),
            );
        }
        Ok(Some(c)) => match c.text().map(serde_json::from_str::<Value>) {
            Some(Ok(v @ Value::Object(_))) => v,
            Some(Ok(_)) | Some(Err(_)) | None => {
                return bad(
                    out,
                    notes,
                    &what,
                    "its record is not a JSON object; skipped".into(),
                );
            }
        },
        Ok(None) => return,
        Err(e) => return bad(out, notes, &what, e.to_string()),
    };
    let title = s(&composer, "name");
    // The chat's messages in display order, each with the record it came from (or why it has none).
    let mut order: Vec<(String, Option<Value>)> = Vec::new();
    if let Some(Value::Array(inline)) = composer.get("conversation")
        && !inline.is_empty()
    {
        for (i, b) in inline.iter().enumerate() {
            let bid = s(b, "bubbleId").map_or_else(|| format!("#{i}"), str::to_owned);
            order.push((bid, Some(b.clone())));
        }
    } else {
        let mut records = match bubbles(db, id, notes) {
            Ok(r) => r,
            Err(e) => return bad(out, notes, &what, e),
        };
        if let Some(Value::Object(map)) = composer.get("conversationMap") {
            for (k, v) in map {
                records.entry(k.clone()).or_insert_with(|| Ok(v.clone()));
            }
        }
        let headers = match composer.get("fullConversationHeadersOnly") {
            Some(Value::Array(h)) => h.clone(),
            _ => Vec::new(),
        };
        for h in &headers {
            let Some(bid) = s(h, "bubbleId") else {
                notes.record(out, None, &what, |_, notes| {
                    notes.problems.push((
                        None,
                        format!("chat {id}: a message header without a bubble id"),
                    ))
                });
                continue;
            };
            match records.remove(bid) {
                Some(Ok(v)) => order.push((bid.to_owned(), Some(v))),
                Some(Err(why)) => {
                    notes.record(out, None, &what, |_, notes| {
                        notes
                            .problems
                            .push((None, format!("chat {id}, message {bid}: {why}")))
                    });
                }
                None => order.push((bid.to_owned(), None)),
            }
        }
        for (bid, rec) in records {
            notes.record(
                out,
                None,
                &|| format!("chat {id}, message {bid}"),
                |_, notes| match rec {
                    Ok(_) => notes.skip("cursor message not in its chat (edited away)"),
                    Err(why) => notes
                        .problems
                        .push((None, format!("chat {id}, message {bid}: {why}"))),
                },
            );
        }
    }
    let mut prev: Option<String> = None;
    for (i, (bid, rec)) in order.into_iter().enumerate() {
        let what = || format!("chat {id}, message {bid}");
        notes.record(out, None, &what, |out, notes| {
            let Some(b) = rec else {
                notes.problems.push((
                    None,
                    format!("chat {id}: message {bid} is listed but has no record"),
                ));
                return;
            };
            match bubble(&b, &bid, prev.as_deref()) {
                Some(mut t) => {
                    t.position = u32::try_from(i).ok();
                    t.on_current_branch = Some(true);
                    out.push(SRC, id, title, t);
                }
                None => notes.skip("cursor message with no content"),
            }
        });
        prev = Some(bid);
    }
}

fn bad(out: &mut Collected, notes: &mut Notes, what: &dyn Fn() -> String, why: String) {
    notes.record(out, None, what, |_, notes| {
        notes.problems.push((None, format!("{}: {why}", what())))
    });
}

/// The chat's message records by bubble id (or why one could not be read).
fn bubbles(
    db: &ForeignDb,
    id: &str,
    notes: &mut Notes,
) -> Result<HashMap<String, Result<Value, String>>, String> {
    let prefix = format!("bubbleId:{id}:");
    let rows = db
        .rows(&Select {
            table: TABLE,
            columns: &["key", "value"],
            prefix: Some(("key", &prefix)),
            order: &["key"],
            limit: MAX_BUBBLES + 1,
            ..Select::default()
        })
        .map_err(|e| e.to_string())?;
    if rows.len() > MAX_BUBBLES {
        notes.problems.push((
            None,
            format!(
                "chat {id} has more than {MAX_BUBBLES} messages; the first {MAX_BUBBLES} were read"
            ),
        ));
    }
    let mut map = HashMap::new();
    for r in rows.into_iter().take(MAX_BUBBLES) {
        let Some(bid) = r
            .first()
            .and_then(Cell::text)
            .and_then(|k| k.strip_prefix(&prefix))
            .map(str::to_owned)
        else {
            continue;
        };
        let v = match r.get(1) {
            Some(Cell::TooLarge(n)) => Err(format!("its record is {n} bytes, too large; not read")),
            Some(c) => match c.text().map(serde_json::from_str::<Value>) {
                Some(Ok(v @ Value::Object(_))) => Ok(v),
                _ => Err("its record is not a JSON object; skipped".to_owned()),
            },
            None => Err("no record".to_owned()),
        };
        map.insert(bid, v);
    }
    Ok(map)
}

/// A message record as a turn; `None` for one with nothing in it (an assistant placeholder).
fn bubble(b: &Value, key: &str, parent: Option<&str>) -> Option<NetTurn> {
    let ty = b.get("type").and_then(Value::as_i64);
    let mut t = match ty {
        Some(1) => turn(SRC, key, parent, Role::User),
        Some(2) => turn(SRC, key, parent, Role::Assistant),
        _ => {
            let what = b
                .get("type")
                .map_or_else(|| "(none)".to_owned(), |v| v.to_string());
            return Some(placeholder(
                SRC,
                key,
                parent,
                &format!("bubble type {what}"),
            ));
        }
    };
    t.text = s(b, "text").unwrap_or_default().to_owned();
    let mut thoughts: Vec<String> = Vec::new();
    if let Some(th) = b.get("thinking").and_then(|x| s(x, "text")) {
        thoughts.push(th.to_owned());
    }
    if let Some(Value::Array(blocks)) = b.get("allThinkingBlocks") {
        for x in blocks {
            let th = s(x, "thinking")
                .or_else(|| s(x, "text"))
                .map(str::to_owned)
                .unwrap_or_default();
            if !th.is_empty() && !thoughts.contains(&th) {
                thoughts.push(th);
            }
        }
    }
    if !thoughts.is_empty() {
        t.reasoning = Some(thoughts.join("\n\n"));
    }
    if let Some(tf) = b.get("toolFormerData").filter(|v| v.is_object()) {
        let output = tf
            .get("result")
            .map(text_of)
            .filter(|o| !o.trim().is_empty());
        t.tool_calls.push(ToolCall {
            name: s(tf, "name").unwrap_or("tool").to_owned(),
            input: cut(&tf.get("rawArgs").map(text_of).unwrap_or_default()),
            output: output.as_deref().map(cut),
            id: s(tf, "toolCallId").map(str::to_owned),
        });
    }
    t.model = b
        .get("modelInfo")
        .and_then(|m| s(m, "modelName"))
        .map(str::to_owned);
    t.created_at_ms = match b.get("createdAt") {
        Some(Value::Number(n)) => n.as_i64(),
        other => time_ms(other),
    };
    let empty = t.text.trim().is_empty() && t.reasoning.is_none() && t.tool_calls.is_empty();
    (!empty).then_some(t)
}
