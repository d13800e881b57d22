//! Capture health: the one traffic-light rule, and the body of the relay's `GET /v1/me/capture-health`, which
//! the relay serialises and the extension's worker parses.
//!
//! The rule: green when the last accepted turn is at most 5 minutes old, yellow up to 60 minutes, red when it is
//! older, when nothing was ever accepted, or when the latest error is at least as new as the last accepted turn
//! (an error recorded in the same batch as an accepted turn counts: part of the capture is failing).
//!
//! A surface whose adapter no longer reads its pages (a device reported `adapter_stale`: conversation pages show
//! text, yet no turns or one role only are read) is at least yellow, and red once it has been failing for
//! [`STALE_RED_AFTER_MS`], whatever its last accepted turn says: turns from other pages or other devices do not
//! prove that the site's current markup is read.

use serde::{Deserialize, Serialize};

/// Newest accepted turn at most this old (ms): green.
pub const GREEN_WITHIN_MS: i64 = 5 * 60_000;
/// Newest accepted turn at most this old (ms): yellow; older is red.
pub const YELLOW_WITHIN_MS: i64 = 60 * 60_000;

/// A device reports a surface stale after its pages failed the adapter for this long (ms): yellow from then on.
pub const STALE_YELLOW_AFTER_MS: i64 = 2 * 60_000;
/// Failing this long (ms): red.
pub const STALE_RED_AFTER_MS: i64 = 10 * 60_000;

/// The reason code of a surface whose adapter reads nothing on pages that show a conversation.
pub const ADAPTER_STALE: &str = "adapter_stale";
/// The reason code of one conversation page whose read found its text but no turn (or turns of one role only),
/// said at once, before the surface's stale period shows.
pub const UNREAD: &str = "unread";
/// The reason code of a surface whose site responses (network path) the parser no longer understands.
pub const STREAM_UNPARSED: &str = "stream_unparsed";
/// A capture path counts as working when it gave turns at most this long ago (ms).
pub const PATH_WORKING_WITHIN_MS: i64 = 24 * 60 * 60_000;

/// At most this many reports in one `POST /v1/me/capture-reports` body.
pub const MAX_REPORTS: usize = 64;
/// The longest `rule` a report may carry.
pub const MAX_RULE_CHARS: usize = 64;

/// A surface's traffic light.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Green,
    Yellow,
    Red,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Green => "green",
            Status::Yellow => "yellow",
            Status::Red => "red",
        }
    }
}

/// The colour of a surface from its last accepted turn and its last error. Times are milliseconds since the Unix
/// epoch.
pub fn status(last_accepted_ms: Option<i64>, last_error_ms: Option<i64>, now_ms: i64) -> Status {
    let Some(accepted) = last_accepted_ms else {
        return Status::Red;
    };
    if last_error_ms.is_some_and(|e| e >= accepted) {
        return Status::Red;
    }
    let age = now_ms.saturating_sub(accepted);
    if age <= GREEN_WITHIN_MS {
        Status::Green
    } else if age <= YELLOW_WITHIN_MS {
        Status::Yellow
    } else {
        Status::Red
    }
}

/// [`status`] with a stale adapter taken into account: `stale_since_ms` is when the surface's pages started
/// failing its adapter (`None`: they do not). Returns the colour and the reason (`adapter_stale`) when the stale
/// adapter made it worse than [`status`] alone or agrees with it.
pub fn status_with_stale(
    last_accepted_ms: Option<i64>,
    last_error_ms: Option<i64>,
    stale_since_ms: Option<i64>,
    now_ms: i64,
) -> (Status, Option<&'static str>) {
    let base = status(last_accepted_ms, last_error_ms, now_ms);
    let Some(since) = stale_since_ms else {
        return (base, None);
    };
    let stale = if now_ms.saturating_sub(since) >= STALE_RED_AFTER_MS {
        Status::Red
    } else {
        Status::Yellow
    };
    let worse = match (base, stale) {
        (Status::Red, _) | (_, Status::Red) => Status::Red,
        _ => Status::Yellow,
    };
    (worse, Some(ADAPTER_STALE))
}

/// The reason code of a surface whose site responses are larger than the parser reads.
pub const STREAM_TOO_LARGE: &str = "stream_too_large";

/// What the relay knows of one surface, as milliseconds since the Unix epoch: the input of [`assess`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Facts<'a> {
    /// The newest accepted turn.
    pub last_accepted_ms: Option<i64>,
    /// The newest rejection or device error: its code and time.
    pub last_error: Option<(&'a str, i64)>,
    /// Since when a device reports the surface's adapter stale.
    pub stale_since_ms: Option<i64>,
    /// The newest turn the network path gave.
    pub network_ms: Option<i64>,
}

impl Facts<'_> {
    /// The newest error when it says the site's responses are not understood and no network turn is newer.
    pub fn unparsed(&self) -> Option<(&str, i64)> {
        self.last_error
            .filter(|(code, _)| matches!(*code, STREAM_UNPARSED | STREAM_TOO_LARGE))
            .filter(|(_, at)| self.network_ms.is_none_or(|n| *at >= n))
    }
}

/// The one rule behind every colour the relay, its CLI, dashboard, MCP tools and the extension show: [`status`]
/// from the last accepted turn and error, made at least yellow by a stale adapter ([`status_with_stale`]) or by
/// site responses the parser no longer understands (the DOM path still captures, so not red on that alone).
/// Returns the colour and the reason code when one of those made it.
pub fn assess(f: &Facts<'_>, now_ms: i64) -> (Status, Option<&'static str>) {
    let (mut status, mut reason) = status_with_stale(
        f.last_accepted_ms,
        f.last_error.map(|(_, at)| at),
        f.stale_since_ms,
        now_ms,
    );
    if let Some((code, _)) = f.unparsed() {
        if status == Status::Green {
            status = Status::Yellow;
        }
        reason.get_or_insert(if code == STREAM_TOO_LARGE {
            STREAM_TOO_LARGE
        } else {
            STREAM_UNPARSED
        });
    }
    (status, reason)
}

/// How long ago, in words: `40 s ago`, `12 min ago`, `3 h ago`, `5 days ago` (a time in the future reads `0 s ago`).
pub fn ago(then_ms: i64, now_ms: i64) -> String {
    let s = now_ms.saturating_sub(then_ms).max(0) / 1000;
    match s {
        0..60 => format!("{s} s ago"),
        60..7200 => format!("{} min ago", s / 60),
        7200..172_800 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86_400),
    }
}

/// Why a surface has its colour, in one sentence, with the thresholds of the rule ([`assess`]).
pub fn explain(s: &SurfaceHealth, now_ms: i64) -> String {
    let ms = |t: &Option<String>| t.as_deref().and_then(crate::time::parse_rfc3339);
    let accepted = ms(&s.last_accepted_at);
    let error_at = s
        .last_error
        .as_ref()
        .and_then(|e| crate::time::parse_rfc3339(&e.at));
    let min = |limit: i64| limit / 60_000;
    let accepted_words = match accepted {
        Some(t) => format!("last turn accepted {}", ago(t, now_ms)),
        None => "no turn accepted yet".to_owned(),
    };
    match s.reason.as_deref() {
        Some(ADAPTER_STALE) => {
            let since = ms(&s.stale_since)
                .map_or_else(String::new, |t| format!(" since {}", ago(t, now_ms)));
            return format!(
                "a device reports that this site's conversation pages yield no turns{since} (has the site's markup \
                 changed?): at least yellow, red after {} min of it; {accepted_words}",
                min(STALE_RED_AFTER_MS)
            );
        }
        Some(code @ (STREAM_UNPARSED | STREAM_TOO_LARGE)) => {
            let since = error_at.map_or_else(String::new, |t| format!(" since {}", ago(t, now_ms)));
            return format!(
                "the site's responses are not understood{since} ({code}); pages are still read; {accepted_words}"
            );
        }
        _ => {}
    }
    match (s.status, accepted, &s.last_error) {
        (Status::Red, _, Some(e)) if error_at >= accepted => format!(
            "the newest event is an error: {} ({}), {}",
            e.code,
            e.message,
            error_at.map_or_else(|| e.at.clone(), |t| ago(t, now_ms))
        ),
        (_, None, _) => "no turn has been accepted from this surface yet".into(),
        (Status::Green, Some(t), _) => format!(
            "last turn accepted {} (green up to {} min)",
            ago(t, now_ms),
            min(GREEN_WITHIN_MS)
        ),
        (Status::Yellow, Some(t), _) => format!(
            "last turn accepted {} (yellow from {} to {} min)",
            ago(t, now_ms),
            min(GREEN_WITHIN_MS),
            min(YELLOW_WITHIN_MS)
        ),
        (Status::Red, Some(t), _) => format!(
            "no turn accepted for {} (red after {} min)",
            ago(t, now_ms).trim_end_matches(" ago"),
            min(YELLOW_WITHIN_MS)
        ),
    }
}

/// One device's report about one surface (`POST /v1/me/capture-reports`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureReport {
    /// A surface id (`browser-ext:grok`).
    pub surface: String,
    /// Since when (RFC 3339, the device's clock) the surface's pages have failed its adapter; `null` when the
    /// adapter reads them again (the relay forgets this device's earlier report).
    pub stale_since: Option<String>,
    /// Which message-root rule matched at the device's last read (`message_roots[<rank>]`), for debugging.
    #[serde(default)]
    pub rule: Option<String>,
    /// Which capture paths gave this device turns of the surface, and when (absent: not reported; the relay
    /// keeps what it was told before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<PathReport>,
}

/// A device's view of a surface's capture paths: when the DOM path and the network path last gave turns, and
/// since when (and with which parser code) bodies from the surface's known endpoints fail to parse. Times are
/// RFC 3339; `null` for never.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PathReport {
    #[serde(default)]
    pub dom_at: Option<String>,
    #[serde(default)]
    pub network_at: Option<String>,
    #[serde(default)]
    pub unparsed_since: Option<String>,
    /// `stream_unparsed` or `stream_too_large`.
    #[serde(default)]
    pub unparsed: Option<String>,
}

/// `POST /v1/me/capture-reports` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureReports {
    pub reports: Vec<CaptureReport>,
}

impl CaptureReport {
    /// The wire rule a report breaks, as `(code, message)`, or `None` when it is valid.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if !crate::wire::is_valid_surface(&self.surface) {
            return Some((
                "invalid_surface",
                format!(
                    "invalid surface {:?}",
                    crate::wire::quote_safely(&self.surface, 80)
                ),
            ));
        }
        if let Some(t) = &self.stale_since
            && !crate::wire::looks_like_rfc3339(t)
        {
            return Some((
                "bad_timestamp",
                format!(
                    "stale_since {:?} is not an RFC 3339 time",
                    crate::wire::quote_safely(t, 80)
                ),
            ));
        }
        if let Some(p) = &self.paths {
            for t in [&p.dom_at, &p.network_at, &p.unparsed_since]
                .into_iter()
                .flatten()
            {
                if !crate::wire::looks_like_rfc3339(t) {
                    return Some((
                        "bad_timestamp",
                        format!(
                            "paths: {:?} is not an RFC 3339 time",
                            crate::wire::quote_safely(t, 80)
                        ),
                    ));
                }
            }
            if let Some(c) = &p.unparsed
                && !matches!(c.as_str(), STREAM_UNPARSED | STREAM_TOO_LARGE)
            {
                return Some((
                    "bad_code",
                    format!(
                        "paths.unparsed {:?} is not stream_unparsed or stream_too_large",
                        crate::wire::quote_safely(c, 40)
                    ),
                ));
            }
        }
        if let Some(r) = &self.rule
            && (r.chars().count() > MAX_RULE_CHARS
                || r.chars()
                    .any(|c| c.is_control() || crate::wire::is_invisible(c)))
        {
            return Some((
                "bad_rule",
                format!(
                    "rule is longer than {MAX_RULE_CHARS} characters or has control characters"
                ),
            ));
        }
        None
    }
}

/// The last rejection the relay recorded for a surface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastError {
    pub code: String,
    pub message: String,
    /// Stored time form (`2026-11-22T10:00:00.000Z`).
    pub at: String,
}

/// One surface as the relay sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SurfaceHealth {
    pub surface: String,
    pub status: Status,
    pub last_accepted_at: Option<String>,
    pub turns_24h: u64,
    pub threads_24h: u64,
    pub last_error: Option<LastError>,
    /// `adapter_stale` when a device reported that the surface's pages no longer yield turns (see
    /// [`status_with_stale`]); `null` otherwise. Absent from older relays' bodies.
    #[serde(default)]
    pub reason: Option<String>,
    /// The earliest `stale_since` among the devices that report the surface stale (stored time form).
    #[serde(default)]
    pub stale_since: Option<String>,
    /// Which capture paths work for the surface, from the devices' reports. Absent from older relays' bodies.
    #[serde(default)]
    pub paths: Option<PathsHealth>,
}

/// The capture paths of a surface as the relay knows them from its devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PathsHealth {
    /// `dom`, `network`, `both` or `none`: the paths that gave turns within [`PATH_WORKING_WITHIN_MS`] (the
    /// network path not while its bodies fail to parse since).
    pub working: String,
    /// When the DOM path and the network path last gave turns (stored time form), across devices.
    pub dom_at: Option<String>,
    pub network_at: Option<String>,
    /// Since when bodies from the surface's endpoints fail to parse, and the code (`stream_unparsed`,
    /// `stream_too_large`); `null` when no device reports it.
    pub unparsed_since: Option<String>,
    pub unparsed: Option<String>,
}

/// Which paths work, at `now_ms`, from the newest times (ms) the paths gave turns and the newest unparsed report.
pub fn working_paths(
    dom_ms: Option<i64>,
    network_ms: Option<i64>,
    unparsed_ms: Option<i64>,
    now_ms: i64,
) -> &'static str {
    let recent =
        |t: Option<i64>| t.is_some_and(|t| now_ms.saturating_sub(t) <= PATH_WORKING_WITHIN_MS);
    let dom = recent(dom_ms);
    let network =
        recent(network_ms) && unparsed_ms.is_none_or(|u| network_ms.is_some_and(|n| u < n));
    match (dom, network) {
        (true, true) => "both",
        (true, false) => "dom",
        (false, true) => "network",
        (false, false) => "none",
    }
}

/// `GET /v1/me/capture-health` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureHealth {
    pub generated_at: String,
    pub surfaces: Vec<SurfaceHealth>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    #[test]
    fn colours_follow_the_thresholds() {
        let now = 1_000 * YELLOW_WITHIN_MS;
        let ago = |m: i64| Some(now - m * MIN);
        assert_eq!(status(ago(0), None, now), Status::Green);
        assert_eq!(status(ago(5), None, now), Status::Green);
        assert_eq!(status(ago(6), None, now), Status::Yellow);
        assert_eq!(status(ago(60), None, now), Status::Yellow);
        assert_eq!(status(ago(61), None, now), Status::Red);
        assert_eq!(status(None, None, now), Status::Red);
        assert_eq!(status(None, ago(3), now), Status::Red);
        assert_eq!(
            status(ago(1), ago(0), now),
            Status::Red,
            "error after the last accept"
        );
        assert_eq!(
            status(ago(1), ago(1), now),
            Status::Red,
            "error at the same instant (same batch)"
        );
        assert_eq!(
            status(ago(1), ago(2), now),
            Status::Green,
            "an accept after the error heals"
        );
    }

    #[test]
    fn a_stale_adapter_is_at_least_yellow_then_red() {
        let now = 1_000 * YELLOW_WITHIN_MS;
        let ago = |m: i64| Some(now - m * MIN);
        assert_eq!(
            status_with_stale(ago(0), None, None, now),
            (Status::Green, None)
        );
        let stale = Some(ADAPTER_STALE);
        assert_eq!(
            status_with_stale(ago(0), None, ago(3), now),
            (Status::Yellow, stale)
        );
        assert_eq!(
            status_with_stale(ago(30), None, ago(3), now),
            (Status::Yellow, stale)
        );
        assert_eq!(
            status_with_stale(ago(0), None, ago(10), now),
            (Status::Red, stale)
        );
        assert_eq!(
            status_with_stale(None, None, ago(1), now),
            (Status::Red, stale)
        );
        // A device clock ahead of the relay's: a report from the future is young, not negative.
        assert_eq!(
            status_with_stale(ago(0), None, Some(now + 5 * MIN), now),
            (Status::Yellow, stale)
        );
    }

    #[test]
    fn unparsed_responses_make_green_yellow_until_a_network_turn_is_newer() {
        let now = 1_000 * YELLOW_WITHIN_MS;
        let ago = |m: i64| Some(now - m * MIN);
        let facts = Facts {
            last_accepted_ms: ago(1),
            last_error: Some((STREAM_UNPARSED, now - 3 * MIN)),
            stale_since_ms: None,
            network_ms: ago(4),
        };
        assert_eq!(assess(&facts, now), (Status::Yellow, Some(STREAM_UNPARSED)));
        let healed = Facts {
            network_ms: ago(2),
            ..facts
        };
        assert_eq!(assess(&healed, now), (Status::Green, None));
        let stale = Facts {
            stale_since_ms: ago(11),
            ..facts
        };
        assert_eq!(assess(&stale, now), (Status::Red, Some(ADAPTER_STALE)));
    }

    #[test]
    fn the_sentence_names_the_reason_and_the_thresholds() {
        let now = 1_000 * YELLOW_WITHIN_MS;
        let at = |m: i64| Some(crate::time::rfc3339(now - m * MIN));
        let mut s = SurfaceHealth {
            surface: "browser-ext:grok".into(),
            status: Status::Green,
            last_accepted_at: at(2),
            turns_24h: 1,
            threads_24h: 1,
            last_error: None,
            reason: None,
            stale_since: None,
            paths: None,
        };
        assert_eq!(
            explain(&s, now),
            "last turn accepted 2 min ago (green up to 5 min)"
        );
        s.status = Status::Yellow;
        s.last_accepted_at = at(30);
        assert_eq!(
            explain(&s, now),
            "last turn accepted 30 min ago (yellow from 5 to 60 min)"
        );
        s.reason = Some(ADAPTER_STALE.into());
        s.stale_since = at(3);
        let stale = explain(&s, now);
        assert!(stale.contains("yield no turns since 3 min ago"), "{stale}");
        assert!(stale.contains("red after 10 min"), "{stale}");
        assert!(!stale.contains("  "), "one space between words: {stale}");
    }

    #[test]
    fn working_paths_follow_recent_turns_and_unparsed_bodies() {
        let now = 10 * PATH_WORKING_WITHIN_MS;
        let ago = |m: i64| Some(now - m * MIN);
        assert_eq!(working_paths(ago(1), ago(2), None, now), "both");
        assert_eq!(working_paths(ago(1), None, None, now), "dom");
        assert_eq!(working_paths(None, ago(1), None, now), "network");
        assert_eq!(working_paths(None, None, None, now), "none");
        // A body that failed after the last good one: the network path is not working.
        assert_eq!(working_paths(ago(1), ago(5), ago(2), now), "dom");
        // A good body after the failure: it works again.
        assert_eq!(working_paths(ago(1), ago(1), ago(2), now), "both");
        // Older than a day: not working.
        assert_eq!(working_paths(ago(25 * 60), ago(1), None, now), "network");
    }

    #[test]
    fn reports_are_checked() {
        let ok = CaptureReport {
            surface: "browser-ext:grok".into(),
            stale_since: Some("2026-11-22T10:00:00Z".into()),
            rule: Some("message_roots[1]".into()),
            paths: Some(PathReport {
                dom_at: Some("2026-11-22T10:00:00Z".into()),
                network_at: None,
                unparsed_since: Some("2026-11-22T10:01:00Z".into()),
                unparsed: Some("stream_unparsed".into()),
            }),
        };
        assert_eq!(ok.problem(), None);
        let bad = |f: &dyn Fn(&mut CaptureReport)| {
            let mut r = ok.clone();
            f(&mut r);
            r.problem().map(|p| p.0)
        };
        assert_eq!(bad(&|r| r.surface = "grok".into()), Some("invalid_surface"));
        assert_eq!(
            bad(&|r| r.stale_since = Some("yesterday".into())),
            Some("bad_timestamp")
        );
        assert_eq!(bad(&|r| r.rule = Some("x".repeat(65))), Some("bad_rule"));
        assert_eq!(
            bad(&|r| r.rule = Some("a\u{202e}b".into())),
            Some("bad_rule")
        );
        assert_eq!(bad(&|r| r.stale_since = None), None);
        assert_eq!(
            bad(&|r| r.paths.as_mut().unwrap().network_at = Some("now".into())),
            Some("bad_timestamp")
        );
        assert_eq!(
            bad(&|r| r.paths.as_mut().unwrap().unparsed = Some("anything".into())),
            Some("bad_code")
        );
        let body = r#"{"reports":[{"surface":"browser-ext:grok","stale_since":null,"extra":1}]}"#;
        assert!(
            serde_json::from_str::<CaptureReports>(body).is_err(),
            "unknown keys are refused"
        );
    }

    #[test]
    fn the_body_round_trips() {
        let body = r#"{"generated_at":"2026-11-22T10:00:00.000Z","surfaces":[{"surface":"browser-ext:claude",
            "status":"red","last_accepted_at":null,"turns_24h":0,"threads_24h":0,
            "last_error":{"code":"bad_role","message":"m","at":"2026-11-22T09:00:00.000Z"}}]}"#;
        let h: CaptureHealth = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(h.surfaces[0].status, Status::Red);
        assert_eq!(
            h.surfaces[0].last_error.as_ref().map(|e| e.code.as_str()),
            Some("bad_role")
        );
    }
}
