//! Capture policy: whether a page is captured ([`capture_state`]), the user's per-conversation skip list, the
//! limits a content script's snapshot of turns must keep (derived from the wire format's), and the local
//! per-surface stats the popup's traffic lights read.

use serde::{Deserialize, Serialize};

use super::keyed::Keyed;
use super::queue::Applied;
use super::registry::{Registry, Status, Surface};
use super::settings::Settings;
use crate::wire::{self, Role};

/// Most turns one message from a content script may carry: one relay batch's worth.
pub const MAX_TURNS_PER_MESSAGE: usize = wire::DEFAULT_MAX_BATCH_ITEMS;
/// Longest text of one turn as read from the page (bytes): the wire's content limit again as room for the site
/// chrome and layout whitespace that normalisation removes. Longer text could not become a valid turn.
pub const MAX_RAW_TEXT_BYTES: usize = 2 * wire::MAX_CONTENT_BYTES;
/// Longest render tree (JSON text) of one turn: the tree's markup roughly doubles the text it carries.
pub const MAX_RAW_DOC_BYTES: usize = 2 * MAX_RAW_TEXT_BYTES;
/// Longest message key or raw ordinal attribute value (bytes): a wire field.
pub const MAX_RAW_FIELD_BYTES: usize = wire::MAX_FIELD_BYTES;
/// Longest page title read (bytes) before redaction; the stored title is cut to the wire's field limit after it.
pub const MAX_RAW_TITLE_BYTES: usize = 2 * wire::MAX_FIELD_BYTES;
/// How many skipped conversations are remembered (the oldest is forgotten first).
pub const MAX_SKIPPED: usize = 5000;

/// Whether a page's turns are captured, as its badge shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CaptureState {
    Capturing,
    /// The user skipped this conversation.
    Skipped,
    /// The kill switch is on.
    Paused,
    /// Not a registered surface, the surface is not enabled, or it is experimental and the flag is off.
    #[default]
    Off,
}

/// The state of a page of `surface` showing the conversation `thread_id` (`None`: no conversation yet).
pub fn capture_state(
    settings: &Settings,
    surface: Option<&Surface>,
    thread_id: Option<&str>,
    skipped: &SkipList,
) -> CaptureState {
    let Some(surface) = surface else {
        return CaptureState::Off;
    };
    if !settings.is_enabled(&surface.id)
        || (surface.status == Status::Experimental && !settings.experimental)
    {
        return CaptureState::Off;
    }
    if settings.kill_switch {
        return CaptureState::Paused;
    }
    if thread_id.is_some_and(|t| skipped.contains(t)) {
        return CaptureState::Skipped;
    }
    CaptureState::Capturing
}

/// The page a content script's message speaks for, chosen only among the URLs the browser itself reported for
/// the sender: `url` (the sending frame's, `sender.url`) and `tab_url` (the tab's, when the sender is its top
/// frame). `claimed` — the URL the script says it read the page under — only picks between them: the first whose
/// surface and conversation are the claim's is returned. `None` when neither agrees (the browser's record is
/// behind a same-document navigation the script has already seen, or the script names another conversation): the
/// message is then refused, never filed under the claim. Without a claim, `url` is the page.
pub fn vouched_url<'a>(
    registry: &Registry,
    day: &str,
    url: &'a str,
    tab_url: Option<&'a str>,
    claimed: Option<&str>,
) -> Option<&'a str> {
    let Some(claimed) = claimed else {
        return Some(url);
    };
    let key = |u: &str| {
        registry
            .match_url(u, day)
            .map(|m| (m.surface.id.clone(), m.conversation_id))
    };
    let want = key(claimed)?;
    std::iter::once(url)
        .chain(tab_url)
        .find(|u| key(u).as_ref() == Some(&want))
}

/// Thread ids the user skipped from the badge, oldest first (the worker's IndexedDB record `skipped`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SkipList(Vec<String>);

impl SkipList {
    pub fn contains(&self, thread_id: &str) -> bool {
        self.0.iter().any(|t| t == thread_id)
    }

    /// Skips `thread_id`, or resumes it when it was skipped; returns whether it is skipped now.
    pub fn toggle(&mut self, thread_id: &str) -> bool {
        if let Some(i) = self.0.iter().position(|t| t == thread_id) {
            self.0.remove(i);
            return false;
        }
        self.0.push(thread_id.to_owned());
        let excess = self.0.len().saturating_sub(MAX_SKIPPED);
        self.0.drain(..excess);
        true
    }

    /// Skips `thread_id` (no change when it already is); returns whether anything changed.
    pub fn skip(&mut self, thread_id: &str) -> bool {
        if self.contains(thread_id) {
            return false;
        }
        self.toggle(thread_id)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One turn as a content script read it from the page.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTurn {
    pub role: Role,
    /// Plain text, used when `doc` is absent.
    #[serde(default)]
    pub text: String,
    /// The turn's content as the content script's render tree, JSON text (see [`crate::capture::render`]).
    #[serde(default)]
    pub doc: Option<String>,
    #[serde(default)]
    pub message_key: Option<String>,
    /// The raw value of the surface's ordinal attribute (or the position), if the surface has an ordinal rule.
    #[serde(default)]
    pub ordinal_raw: Option<String>,
}

/// The most turns one network body (a conversation JSON) may queue.
pub const MAX_NETWORK_TURNS: usize = 5000;

/// The turns of a content script's message, checked against the limits above; the error says which turn broke
/// which limit. A message that breaks one is refused whole (a content script never sends one).
pub fn parse_turns(json: &str) -> Result<Vec<RawTurn>, String> {
    let turns: Vec<RawTurn> = serde_json::from_str(json).map_err(|e| format!("turns: {e}"))?;
    if turns.len() > MAX_TURNS_PER_MESSAGE {
        return Err(format!(
            "{} turns in one message, more than {MAX_TURNS_PER_MESSAGE}",
            turns.len()
        ));
    }
    let check = |i: usize, field: &str, len: usize, max: usize| {
        if len > max {
            Err(format!("turn {i}: {field} is {len} bytes, more than {max}"))
        } else {
            Ok(())
        }
    };
    for (i, t) in turns.iter().enumerate() {
        if !matches!(t.role, Role::User | Role::Assistant) {
            return Err(format!(
                "turn {i}: role `{}` is not read from pages",
                t.role.as_str()
            ));
        }
        check(i, "text", t.text.len(), MAX_RAW_TEXT_BYTES)?;
        check(
            i,
            "doc",
            t.doc.as_ref().map_or(0, String::len),
            MAX_RAW_DOC_BYTES,
        )?;
        check(
            i,
            "message_key",
            t.message_key.as_ref().map_or(0, String::len),
            MAX_RAW_FIELD_BYTES,
        )?;
        check(
            i,
            "ordinal_raw",
            t.ordinal_raw.as_ref().map_or(0, String::len),
            MAX_RAW_FIELD_BYTES,
        )?;
    }
    Ok(turns)
}

/// What this browser did for one surface (`stats[<surface id>]`, kept by `api::Core`). Times: ms since the epoch.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SurfaceStats {
    /// Turns queued.
    pub captured: u64,
    /// Turns refused because the queue was full.
    pub overflowed: u64,
    /// Turns the relay acknowledged.
    pub accepted: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_accepted_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error_ms: Option<u64>,
    /// The relay's code for the last rejection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Since when a page of this surface has looked like a conversation (its URL names one, text is shown) while
    /// the adapter read no turns, or only one role: the site's markup may have changed (`adapter_stale`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_since_ms: Option<u64>,
    /// Which message-root rule matched at the last read (`message_roots[<rank>]`), for debugging adapters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_rule: Option<String>,
    /// The `stale_since_ms` the relay was last told (`POST /v1/me/capture-reports`); `None`: the relay holds no
    /// stale report of this device for the surface.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_reported_ms: Option<u64>,
    /// The conversations of this surface read most recently, with what their pages showed and what was queued
    /// (see [`super::progress`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conversations: Vec<super::progress::ConversationProgress>,
    /// When a DOM read of this surface last found turns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dom_ms: Option<u64>,
    /// When a body the page received (network path) last gave turns of this surface.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_ms: Option<u64>,
    /// When a body from one of this surface's known endpoints last failed to parse (`stream_unparsed`), and the
    /// parser's code for it; cleared by the next body that parses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unparsed_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unparsed: Option<String>,
    /// What the relay was last told about the paths ([`SurfaceStats::paths_mark`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths_reported: Option<u64>,
}

/// Paths are reported again when a path's time moves to a new 10-minute slot or the unparsed state changes.
const PATHS_SLOT_MS: u64 = 10 * 60_000;

impl SurfaceStats {
    /// A mark of what the relay should know about the paths: `None` when there is nothing to tell.
    pub fn paths_mark(&self) -> Option<u64> {
        if self.dom_ms.is_none() && self.network_ms.is_none() && self.unparsed_ms.is_none() {
            return None;
        }
        let slot = |t: Option<u64>| t.map_or(u64::MAX, |t| t / PATHS_SLOT_MS);
        // Slots and the unparsed time, mixed into one number (a mark, not a secret).
        Some(
            slot(self.dom_ms)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(17)
                ^ slot(self.network_ms).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
                ^ self.unparsed_ms.map_or(u64::MAX, |t| t).rotate_left(31),
        )
    }
}

/// What a content script saw on a conversation page at its last read, whether or not it found turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Probe {
    /// The page shows conversation text (its content area holds at least a screenful of words).
    pub text_present: bool,
    /// Message roots found, and how many of them got a role, per role.
    pub roots: u32,
    pub users: u32,
    pub assistants: u32,
    /// The rank of the `message_roots` rule that matched (`None`: none did).
    #[serde(default)]
    pub rank: Option<u32>,
    /// While the page is captured: complete turns this conversation's page has shown, and how many of them the
    /// worker took (see [`super::progress`]).
    #[serde(default)]
    pub shown: Option<u32>,
    #[serde(default)]
    pub sent: Option<u32>,
}

impl Probe {
    /// The adapter fails this page: conversation text is shown, yet no turn was read, or turns of one role only
    /// among several.
    pub fn broken(&self) -> bool {
        self.text_present
            && (self.users + self.assistants == 0
                || (self.roots >= 2 && (self.users == 0 || self.assistants == 0)))
    }
}

/// Per-surface stats.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Stats(pub Keyed<SurfaceStats>);

impl Stats {
    pub fn get(&self, surface: &str) -> Option<&SurfaceStats> {
        self.0.get(surface)
    }

    fn entry(&mut self, surface: &str) -> &mut SurfaceStats {
        self.0.entry(surface)
    }

    /// Records a read of a conversation page; returns whether anything changed. A broken read starts (or keeps)
    /// the stale period; a good one ends it.
    pub fn on_probe(&mut self, surface: &str, probe: &Probe, now_ms: u64) -> bool {
        let st = self.entry(surface);
        let before = (st.stale_since_ms, st.last_rule.clone());
        if probe.broken() {
            st.stale_since_ms.get_or_insert(now_ms);
        } else if probe.users + probe.assistants > 0 {
            st.stale_since_ms = None;
        }
        st.last_rule = probe.rank.map(|r| format!("message_roots[{r}]"));
        before != (st.stale_since_ms, st.last_rule.clone())
    }

    /// The relay now holds `stale_since_ms` (or no stale report) of this device for `surface`.
    pub fn mark_reported(
        &mut self,
        surface: &str,
        stale_since_ms: Option<u64>,
        paths: Option<u64>,
    ) -> bool {
        let st = self.entry(surface);
        let mut changed = st.stale_reported_ms != stale_since_ms;
        st.stale_reported_ms = stale_since_ms;
        if paths.is_some() && st.paths_reported != paths {
            st.paths_reported = paths;
            changed = true;
        }
        changed
    }

    /// Records what a conversation page showed and queued at its last read; returns whether anything changed.
    pub fn on_progress(
        &mut self,
        surface: &str,
        conversation_id: &str,
        url: &str,
        title: &str,
        counts: super::progress::PageCounts,
        now_ms: u64,
    ) -> bool {
        let st = self.entry(surface);
        super::progress::record(
            &mut st.conversations,
            conversation_id,
            url,
            title,
            counts,
            now_ms,
        )
    }

    /// Counts a capture; returns whether anything changed.
    pub fn on_capture(&mut self, surface: &str, queued: usize, overflowed: usize) -> bool {
        if queued == 0 && overflowed == 0 {
            return false;
        }
        let st = self.entry(surface);
        st.captured += queued as u64;
        st.overflowed += overflowed as u64;
        true
    }

    /// Records which capture path gave turns at `now_ms` (`network`: a body the page received, else a DOM read);
    /// returns whether anything changed. Kept at minute resolution so repeated reads do not rewrite state.
    pub fn on_path(&mut self, surface: &str, network: bool, now_ms: u64) -> bool {
        let st = self.entry(surface);
        let slot = if network {
            &mut st.network_ms
        } else {
            &mut st.dom_ms
        };
        if slot.is_some_and(|t| now_ms.saturating_sub(t) < 60_000) {
            return false;
        }
        *slot = Some(now_ms);
        if network {
            st.unparsed_ms = None;
            st.unparsed = None;
        }
        true
    }

    /// Records a body from a known endpoint that the parser did not understand (`code`: `stream_unparsed` or
    /// `stream_too_large`).
    pub fn on_unparsed(&mut self, surface: &str, code: &str, now_ms: u64) -> bool {
        let st = self.entry(surface);
        if st.unparsed.as_deref() == Some(code) && st.unparsed_ms.is_some() {
            return false;
        }
        st.unparsed_ms = Some(now_ms);
        st.unparsed = Some(code.to_owned());
        true
    }

    /// Counts what the relay acknowledged and rejected in one delivery, at `now_ms`.
    pub fn on_outcome(&mut self, applied: &Applied, now_ms: u64) {
        for (surface, n) in &applied.acknowledged {
            let st = self.entry(surface);
            st.last_accepted_ms = Some(now_ms);
            st.accepted += *n as u64;
        }
        for (surface, code) in &applied.rejected {
            let st = self.entry(surface);
            st.last_error_ms = Some(now_ms);
            st.last_error = Some(code.clone());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::capture::registry::Registry;

    fn on(ids: &[&str]) -> Settings {
        Settings {
            enabled: ids.iter().map(|i| (i.to_string(), true)).collect(),
            ..Settings::default()
        }
    }

    #[test]
    fn capture_state_follows_settings_kill_switch_and_skips() {
        let r = Registry::builtin();
        let chatgpt = r.get("browser-ext:chatgpt");
        let mut skipped = SkipList::default();
        let s = on(&["browser-ext:chatgpt"]);
        assert_eq!(capture_state(&s, None, None, &skipped), CaptureState::Off);
        assert_eq!(
            capture_state(&Settings::default(), chatgpt, Some("t"), &skipped),
            CaptureState::Off
        );
        assert_eq!(
            capture_state(&s, chatgpt, Some("t"), &skipped),
            CaptureState::Capturing
        );
        assert_eq!(
            capture_state(&s, r.get("browser-ext:claude"), Some("t"), &skipped),
            CaptureState::Off
        );
        assert!(skipped.toggle("t"));
        assert_eq!(
            capture_state(&s, chatgpt, Some("t"), &skipped),
            CaptureState::Skipped
        );
        assert_eq!(
            capture_state(&s, chatgpt, Some("u"), &skipped),
            CaptureState::Capturing
        );
        assert_eq!(
            capture_state(&s, chatgpt, None, &skipped),
            CaptureState::Capturing
        );
        let paused = Settings {
            kill_switch: true,
            ..s.clone()
        };
        assert_eq!(
            capture_state(&paused, chatgpt, Some("t"), &skipped),
            CaptureState::Paused
        );
        assert!(!skipped.toggle("t"));
        assert_eq!(
            capture_state(&s, chatgpt, Some("t"), &skipped),
            CaptureState::Capturing
        );
    }

    #[test]
    fn experimental_surfaces_need_the_flag() {
        let doc = r#"{"version":1,"surfaces":[{"id":"browser-ext:pi","name":"Pi","status":"experimental",
            "hosts":["pi.ai"],"conversation_patterns":["^/c/(\\w+)"],
            "message_roots":["[data-role]"],"role_rules":[{"match":"[data-role=user]","on":"self","role":"user"}]}]}"#;
        let r = Registry::parse(doc).unwrap();
        let pi = r.get("browser-ext:pi");
        let s = on(&["browser-ext:pi"]);
        let none = SkipList::default();
        assert_eq!(capture_state(&s, pi, None, &none), CaptureState::Off);
        let with_flag = Settings {
            experimental: true,
            ..s
        };
        assert_eq!(
            capture_state(&with_flag, pi, None, &none),
            CaptureState::Capturing
        );
    }

    #[test]
    fn the_skip_list_is_bounded_and_forgets_the_oldest() {
        let mut s = SkipList::default();
        for i in 0..MAX_SKIPPED + 3 {
            s.toggle(&format!("t{i}"));
        }
        assert_eq!(s.len(), MAX_SKIPPED);
        assert!(!s.contains("t0") && !s.contains("t2") && s.contains("t3"));
        assert!(s.contains(&format!("t{}", MAX_SKIPPED + 2)));
    }

    #[test]
    fn turns_keep_the_wire_limits() {
        let turn = |text: &str, key: Option<&str>| serde_json::json!({"role": "user", "text": text, "message_key": key});
        let ok = serde_json::json!([turn("hi", Some("k")), {"role": "assistant", "text": "yo", "ordinal_raw": "3"}]);
        assert_eq!(parse_turns(&ok.to_string()).unwrap().len(), 2);
        let long = "x".repeat(MAX_RAW_TEXT_BYTES + 1);
        let e = parse_turns(&serde_json::json!([turn("a", None), turn(&long, None)]).to_string())
            .unwrap_err();
        assert!(e.contains("turn 1: text"), "{e}");
        let key = "k".repeat(wire::MAX_FIELD_BYTES + 1);
        assert!(
            parse_turns(&serde_json::json!([turn("a", Some(&key))]).to_string())
                .unwrap_err()
                .contains("message_key")
        );
        let many: Vec<_> = (0..=wire::DEFAULT_MAX_BATCH_ITEMS)
            .map(|_| turn("a", None))
            .collect();
        assert!(
            parse_turns(&serde_json::Value::from(many).to_string())
                .unwrap_err()
                .contains("turns in one message")
        );
        let e = parse_turns(r#"[{"role": "system", "text": "x"}]"#).unwrap_err();
        assert!(e.contains("system"), "{e}");
        let e = parse_turns(r#"[{"role": "user", "text": "x", "messageKey": "k"}]"#).unwrap_err();
        assert!(e.contains("messageKey"), "{e}");
        assert!(parse_turns(r#"{"role": "user"}"#).is_err());
    }

    #[test]
    fn stats_count_captures_and_outcomes() {
        let mut st = Stats::default();
        assert!(!st.on_capture("s", 0, 0));
        assert!(st.on_capture("s", 2, 1));
        let applied = Applied {
            acknowledged: vec![("s".into(), 2)],
            rejected: vec![("s".into(), "bad_role".into())],
            ..Applied::default()
        };
        st.on_outcome(&applied, 77);
        st.on_outcome(
            &Applied {
                acknowledged: vec![("s".into(), 1)],
                ..Applied::default()
            },
            90,
        );
        let s = st.get("s").unwrap();
        assert_eq!((s.captured, s.overflowed, s.accepted), (2, 1, 3));
        assert_eq!((s.last_accepted_ms, s.last_error_ms), (Some(90), Some(77)));
        assert_eq!(s.last_error.as_deref(), Some("bad_role"));
        // The stored form is what older versions wrote.
        let back: Stats =
            serde_json::from_str(r#"{"s": {"captured": 4, "lastAcceptedMs": 5}}"#).unwrap();
        assert_eq!(back.get("s").unwrap().last_accepted_ms, Some(5));
        assert!(
            serde_json::to_string(&st)
                .unwrap()
                .contains("\"lastErrorMs\":77")
        );
    }
}
