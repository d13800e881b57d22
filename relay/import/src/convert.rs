//! A source's conversation → wire observations, the way every capture path makes them: the turn's text
//! rendered, normalised and redacted (`personkit_shared::capture` — the same rules and user patterns as the
//! extension), then hashed; `path` export (or harvest), the site's message id as `message_key`, its parent as
//! `parent_key`.
//!
//! Branches: the turns on the branch the site shows are the thread; every other branch is kept. A turn's
//! position is its parent (`b:<parent>`, docs/wire-format.md "Turn identity"), so siblings are revisions of one
//! another. Two adjustments make the stored thread show what the site shows:
//! - a turn below the first turn of another branch is placed at that branch's position (its `parent_key` is the
//!   parent where the branch forks off the shown one), so a whole abandoned branch is revisions of the turn it
//!   replaced rather than turns of the shown thread;
//! - the shown turn of a position gets a capture time 1 ms after the newest other revision there, because the
//!   store makes the newest revision current.
//!
//! Time: `occurred_at` is the site's time of the turn; `captured_at` the same time (or the conversation's last
//! change when a turn has none), so re-importing gives the same items.

use std::collections::HashMap;

use personkit_shared::capture::Redactor;
use personkit_shared::capture::normalize::normalize;
use personkit_shared::identity::Path;
use personkit_shared::network::NetTurn;
use personkit_shared::wire::{self, ClientInfo, Observation, Role};

use crate::formats::SourceConversation;

/// What became of one conversation's turns before storage.
#[derive(Debug, Default)]
pub struct Converted {
    pub observations: Vec<Observation>,
    /// Turns with nothing to keep (an empty system root, an empty tool call).
    pub empty: usize,
    /// Content or block types not understood: each left a `[unsupported: …]` placeholder in its turn.
    pub unknown: Vec<String>,
}

/// The text of a turn as it is stored: `turn_text`'s archive style (reasoning, answer, tool calls and output,
/// sources; a hidden turn marked as context).
pub fn turn_text(t: &NetTurn) -> String {
    personkit_shared::turn_text::render(&t.parts(), personkit_shared::turn_text::Style::Archive)
}

/// Builds the observations of one conversation.
pub fn convert(
    conv: &SourceConversation,
    path: Path,
    redactor: &Redactor,
    client: &ClientInfo,
) -> Converted {
    let mut out = Converted::default();
    let by_key: HashMap<&str, &NetTurn> = conv
        .turns
        .iter()
        .map(|t| (t.message_key.as_str(), t))
        .collect();
    let shown = |k: &str| {
        by_key
            .get(k)
            .is_some_and(|t| t.on_current_branch == Some(true))
    };
    let any_shown = conv.turns.iter().any(|t| t.on_current_branch == Some(true));
    // Where each turn is placed: its parent, or for a turn deep in an abandoned branch the parent where that
    // branch forks off the shown one.
    let placed_parent = |t: &NetTurn| -> Option<String> {
        let parent = t.parent_key.as_deref()?;
        if !any_shown || t.on_current_branch == Some(true) || shown(parent) {
            return Some(parent.to_owned());
        }
        let mut cur = parent;
        let mut hops = 0;
        loop {
            let Some(p) = by_key.get(cur).and_then(|n| n.parent_key.as_deref()) else {
                // The branch starts at a root of its own.
                return Some(cur.to_owned());
            };
            if shown(p) || hops > by_key.len() {
                return Some(p.to_owned());
            }
            cur = p;
            hops += 1;
        }
    };
    let title = conv
        .title
        .as_deref()
        .map(|t| redactor.redact(&normalize(t)))
        .filter(|t| !t.trim().is_empty())
        .map(|t| wire::truncate_bytes(&t, wire::MAX_FIELD_BYTES));

    struct Pending {
        obs: Observation,
        shown: bool,
        at_ms: i64,
        position: Option<String>,
    }
    let mut pending: Vec<Pending> = Vec::new();
    for t in &conv.turns {
        for u in &t.unknown {
            out.unknown.push(u.clone());
        }
        // Messages the site keeps out of the visible thread (custom instructions, model context) are kept as
        // system turns: they say how the answers came about.
        let role = if t.hidden { Role::System } else { t.role };
        let text = turn_text(t);
        let content = redactor.redact(&normalize(&text));
        if content.trim().is_empty() {
            out.empty += 1;
            continue;
        }
        let at_ms = t.created_at_ms.or(conv.updated_at_ms).unwrap_or(0);
        let parent = placed_parent(t);
        let mut obs = wire::build_observation(
            &conv.surface,
            &conv.conversation_id,
            role,
            &content,
            // A position counts the shown thread only on the shown branch (as a DOM ordinal does).
            t.position.filter(|_| t.on_current_branch == Some(true)),
            Some(&wire::truncate_bytes(&t.message_key, wire::MAX_FIELD_BYTES)),
            "",
            client.clone(),
        );
        obs.url.clone_from(&conv.url);
        obs.title.clone_from(&title);
        obs.turn.occurred_at = t.created_at_ms.map(personkit_shared::time::rfc3339);
        obs.turn.path = Some(path);
        obs.turn.parent_key = parent
            .as_deref()
            .map(|p| wire::truncate_bytes(p, wire::MAX_FIELD_BYTES));
        pending.push(Pending {
            position: obs.turn.parent_key.clone(),
            obs,
            shown: t.on_current_branch == Some(true),
            at_ms,
        });
    }
    // The shown turn of each position is the newest there.
    let mut newest_other: HashMap<Option<String>, i64> = HashMap::new();
    for p in pending.iter().filter(|p| !p.shown) {
        let e = newest_other.entry(p.position.clone()).or_insert(i64::MIN);
        *e = (*e).max(p.at_ms);
    }
    for mut p in pending {
        let mut at = p.at_ms;
        if p.shown
            && let Some(&other) = newest_other.get(&p.position)
            && other >= at
        {
            at = other.saturating_add(1);
        }
        p.obs.turn.captured_at = personkit_shared::time::rfc3339(at);
        out.observations.push(p.obs);
    }
    out.unknown.sort();
    out
}
