//! Claude's export of projects: `projects.json` beside `conversations.json`, a list of `{uuid, name,
//! description, is_private, is_starter_project, prompt_template, created_at, updated_at, creator{uuid,
//! full_name}, docs[{uuid, filename, content, created_at}]}` (Superkikim/nexus-ai-chat-importer issue 22, tested
//! on exports of May–June 2026; the older single-file form of what newer exports split into `projects/<uuid>.json`).
//!
//! No key links a conversation to its project (conversations carry no project id, projects list no
//! conversations: anthropics/claude-code issue 40411, nexus issue 22), so a project cannot be a conversation's
//! thread metadata. Each project is a thread of its own instead, on the surface `import:claude-project`: its
//! instructions (description and prompt template) as one context turn, then each document as a context turn of
//! its name and its text, so the project's knowledge is searchable and kept.

use std::collections::BTreeMap;

use personkit_shared::network::NetTurn;
use personkit_shared::turn_text;
use personkit_shared::wire::Role;
use serde_json::Value;

use crate::formats::{SourceConversation, Unreadable};

/// The surface of project threads (no live capture has them).
pub const SURFACE: &str = "import:claude-project";

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
}

fn time(v: &Value, key: &str) -> Option<i64> {
    str_at(v, key).and_then(personkit_shared::time::parse_rfc3339)
}

fn context_turn(key: String, text: String, at: Option<i64>, project: &str) -> NetTurn {
    let mut t = NetTurn::empty(SURFACE.to_owned(), key, Role::System);
    t.conversation_id = Some(project.to_owned());
    t.hidden = true;
    t.text = text;
    t.created_at_ms = at;
    t
}

/// One project of the list → its thread. A document that is not an object, or has neither a name nor a text, is
/// counted as unreadable; the others are kept.
pub fn project(v: &Value) -> Result<SourceConversation, Unreadable> {
    let id = str_at(v, "uuid").ok_or_else(|| Unreadable {
        conversation_id: None,
        why: "a project without a uuid".into(),
    })?;
    let created = time(v, "created_at");
    let mut turns = Vec::new();
    let mut instructions = Vec::new();
    for (label, key) in [
        ("Description", "description"),
        ("Instructions", "prompt_template"),
    ] {
        if let Some(s) = str_at(v, key) {
            instructions.push(format!("{label}:\n{}", s.trim_end()));
        }
    }
    if !instructions.is_empty() {
        turns.push(context_turn(
            format!("{id}:instructions"),
            instructions.join("\n\n"),
            created,
            id,
        ));
    }
    let mut unreadable: BTreeMap<String, u64> = BTreeMap::new();
    for (i, d) in v
        .get("docs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        if !d.is_object() {
            *unreadable.entry("not_an_object".into()).or_default() += 1;
            continue;
        }
        let (name, body) = (str_at(d, "filename"), str_at(d, "content"));
        if name.is_none() && body.is_none() {
            *unreadable.entry("not_understood".into()).or_default() += 1;
            continue;
        }
        let mut text = turn_text::file(name.unwrap_or_default());
        if let Some(b) = body {
            // Fenced like the text claude.ai extracted from a conversation's attachment (`formats.rs`).
            text.push_str(&format!("\n\n```\n{}\n```", b.trim_end()));
        }
        let key = str_at(d, "uuid").map_or_else(|| format!("{id}:doc:{i}"), str::to_owned);
        turns.push(context_turn(
            key,
            text,
            time(d, "created_at").or(created),
            id,
        ));
    }
    let mut parent: Option<String> = None;
    for (i, t) in turns.iter_mut().enumerate() {
        t.parent_key = parent.replace(t.message_key.clone());
        t.position = Some(i as u32);
        t.on_current_branch = Some(true);
    }
    Ok(SourceConversation {
        surface: SURFACE.to_owned(),
        conversation_id: id.to_owned(),
        title: str_at(v, "name").map(str::to_owned),
        url: Some(format!("https://claude.ai/project/{id}")),
        updated_at_ms: time(v, "updated_at").or(created),
        turns,
        unreadable,
    })
}
