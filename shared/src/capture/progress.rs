//! Completeness per conversation: how many turns a page showed against how many of them reached the relay. The
//! content script counts the complete turns a conversation page has shown and how many of them the worker took
//! into its queue; the queue knows which of those still wait to be sent or were refused by the relay. The popup
//! lists the conversations where the two differ, so a user can see that a capture is incomplete and why.

use serde::{Deserialize, Serialize};

use super::policy::Stats;
use super::queue::QueueState;
use super::registry::Registry;

/// Conversations remembered per surface (the most recently read ones).
pub const KEPT_PER_SURFACE: usize = 20;
/// Rows the popup lists at most.
pub const LISTED: usize = 10;
const MAX_TITLE_CHARS: usize = 120;

/// What the content script counted at its last read of a conversation page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCounts {
    /// Complete turns the page has shown since it was opened (a virtualised thread counts the ones scrolled past).
    pub shown: u32,
    /// Of those, the ones the worker took into its queue in their current text.
    pub sent: u32,
    /// The last read found conversation text the surface's rules read no turn of (or turns of one role only):
    /// the total is unknown ("0 of ? read"), which the popup says at once, before the stale period ends.
    pub unreadable: bool,
}

/// One conversation's last counts (`stats[<surface>].conversations`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversationProgress {
    pub conversation_id: String,
    /// The page's URL without query or fragment.
    pub url: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub title: String,
    pub shown: u32,
    pub sent: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unreadable: bool,
    pub updated_ms: u64,
}

/// Records `counts` for a conversation among `list` (most recent first, at most [`KEPT_PER_SURFACE`]); returns
/// whether anything changed.
pub fn record(
    list: &mut Vec<ConversationProgress>,
    conversation_id: &str,
    url: &str,
    title: &str,
    counts: PageCounts,
    now_ms: u64,
) -> bool {
    let title: String = title.trim().chars().take(MAX_TITLE_CHARS).collect();
    let sent = counts.sent.min(counts.shown);
    if let Some(i) = list
        .iter()
        .position(|c| c.conversation_id == conversation_id)
    {
        let c = &list[i];
        if c.shown == counts.shown
            && c.sent == sent
            && c.unreadable == counts.unreadable
            && c.url == url
            && c.title == title
        {
            return false;
        }
        list.remove(i);
    }
    list.insert(
        0,
        ConversationProgress {
            conversation_id: conversation_id.to_owned(),
            url: url.to_owned(),
            title,
            shown: counts.shown,
            sent,
            unreadable: counts.unreadable,
            updated_ms: now_ms,
        },
    );
    list.truncate(KEPT_PER_SURFACE);
    true
}

/// A conversation whose capture is incomplete, as the popup lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IncompleteRow {
    pub surface: String,
    pub surface_name: String,
    pub conversation_id: String,
    pub url: String,
    pub title: String,
    pub shown: u32,
    /// Turns the relay has (shown minus the ones not read, waiting or held; never negative).
    pub captured: u32,
    /// Shown but not taken into the queue (still streaming, capture refused, the queue full).
    pub unread: u32,
    /// In the queue, not yet acknowledged by the relay.
    pub waiting: u32,
    /// Refused by the relay and held (see the popup's held turns for the reasons).
    pub held: u32,
    /// The page shows conversation text its surface's rules do not read (see [`PageCounts::unreadable`]).
    pub unreadable: bool,
    pub updated_ms: u64,
}

/// The conversations whose capture is incomplete, most recently read first, at most [`LISTED`].
pub fn incomplete(registry: &Registry, stats: &Stats, queue: &QueueState) -> Vec<IncompleteRow> {
    let count = |items: &[super::queue::QueuedItem], surface: &str, conversation: &str| {
        let n = items
            .iter()
            .filter(|i| i.surface == surface && i.conversation.as_deref() == Some(conversation))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    };
    let mut rows = Vec::new();
    for (surface, st) in stats.0.iter() {
        let surface = surface.to_owned();
        for c in &st.conversations {
            let unread = c.shown.saturating_sub(c.sent);
            let waiting = count(&queue.items, &surface, &c.conversation_id);
            let held = count(&queue.held, &surface, &c.conversation_id);
            if unread == 0 && waiting == 0 && held == 0 && !c.unreadable {
                continue;
            }
            let surface_name = registry
                .get(&surface)
                .map_or_else(|| surface.clone(), |s| s.name.clone());
            rows.push(IncompleteRow {
                surface: surface.clone(),
                surface_name,
                conversation_id: c.conversation_id.clone(),
                url: c.url.clone(),
                title: c.title.clone(),
                shown: c.shown,
                captured: c.sent.saturating_sub(waiting.saturating_add(held)),
                unread,
                waiting,
                held,
                unreadable: c.unreadable,
                updated_ms: c.updated_ms,
            });
        }
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.updated_ms));
    rows.truncate(LISTED);
    rows
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn counts(shown: u32, sent: u32) -> PageCounts {
        PageCounts {
            shown,
            sent,
            unreadable: false,
        }
    }

    #[test]
    fn record_keeps_the_latest_counts_most_recent_first_and_bounded() {
        let mut list = Vec::new();
        assert!(record(
            &mut list,
            "a",
            "https://x/c/a",
            "A",
            counts(4, 2),
            1
        ));
        assert!(!record(
            &mut list,
            "a",
            "https://x/c/a",
            "A",
            counts(4, 2),
            2
        ));
        assert!(record(&mut list, "b", "https://x/c/b", "", counts(1, 5), 3));
        assert_eq!(list[0].conversation_id, "b");
        assert_eq!(list[0].sent, 1, "sent is never above shown");
        assert!(record(
            &mut list,
            "a",
            "https://x/c/a",
            "A",
            counts(4, 4),
            4
        ));
        assert_eq!(
            list.iter()
                .map(|c| c.conversation_id.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        for i in 0..(KEPT_PER_SURFACE + 5) {
            record(
                &mut list,
                &format!("c{i}"),
                "u",
                "",
                counts(1, 1),
                10 + i as u64,
            );
        }
        assert_eq!(list.len(), KEPT_PER_SURFACE);
        assert_eq!(
            list[0].conversation_id,
            format!("c{}", KEPT_PER_SURFACE + 4)
        );
    }

    #[test]
    fn incomplete_lists_unread_waiting_and_held_turns_and_nothing_complete() {
        use crate::capture::queue::QueuedItem;
        let registry = Registry::builtin();
        let mut stats = Stats::default();
        let chatgpt = "browser-ext:chatgpt";
        stats.on_progress(
            chatgpt,
            "done",
            "https://chatgpt.com/c/done",
            "Done",
            counts(4, 4),
            1,
        );
        stats.on_progress(
            chatgpt,
            "partial",
            "https://chatgpt.com/c/partial",
            "",
            counts(6, 4),
            2,
        );
        stats.on_progress(
            chatgpt,
            "queued",
            "https://chatgpt.com/c/queued",
            "Q",
            counts(3, 3),
            3,
        );
        let item = |id: u64, conversation: &str| QueuedItem {
            id,
            surface: chatgpt.into(),
            conversation: Some(conversation.into()),
            bytes: 1,
            attempts: 0,
            json: "{}".into(),
            error: None,
            held_at_ms: None,
            held_version: None,
            held_relay: None,
            retried: false,
        };
        let queue = QueueState {
            items: vec![item(1, "queued"), item(2, "queued"), item(3, "elsewhere")],
            held: vec![item(4, "queued")],
            ..QueueState::default()
        };
        let rows = incomplete(registry, &stats, &queue);
        let got: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.conversation_id.as_str(),
                    r.shown,
                    r.captured,
                    r.unread,
                    r.waiting,
                    r.held,
                )
            })
            .collect();
        assert_eq!(got, [("queued", 3, 0, 0, 2, 1), ("partial", 6, 4, 2, 0, 0)]);
        assert_eq!(rows[0].surface_name, "ChatGPT");
        assert!(incomplete(registry, &Stats::default(), &queue).is_empty());
    }

    #[test]
    fn a_page_whose_text_reads_as_no_turn_is_listed_at_once_and_leaves_the_list_once_read() {
        let registry = Registry::builtin();
        let queue = QueueState::default();
        let mut stats = Stats::default();
        let deepseek = "browser-ext:deepseek";
        let url = "https://chat.deepseek.com/a/chat/s/x";
        let unreadable = PageCounts {
            shown: 0,
            sent: 0,
            unreadable: true,
        };
        assert!(stats.on_progress(deepseek, "x", url, "", unreadable, 1));
        let rows = incomplete(registry, &stats, &queue);
        assert_eq!(rows.len(), 1, "nothing shown, nothing sent, yet listed");
        assert!(rows[0].unreadable);
        assert_eq!((rows[0].shown, rows[0].unread), (0, 0));
        // A later read that finds the turns (all taken) clears it.
        assert!(stats.on_progress(deepseek, "x", url, "", counts(2, 2), 2));
        assert!(incomplete(registry, &stats, &queue).is_empty());
    }

    #[test]
    fn titles_are_trimmed_and_cut() {
        let mut list = Vec::new();
        let long = format!("  {}  ", "é".repeat(500));
        record(&mut list, "a", "u", &long, counts(1, 1), 1);
        assert_eq!(list[0].title.chars().count(), MAX_TITLE_CHARS);
    }
}
