//! Capture health: the one traffic-light rule, and the body of the relay's `GET /v1/me/capture-health`, which
//! the relay serialises and the extension's worker parses.
//!
//! The rule: green when the last accepted turn is at most 5 minutes old, yellow up to 60 minutes, red when it is
//! older, when nothing was ever accepted, or when the latest error is at least as new as the last accepted turn
//! (an error recorded in the same batch as an accepted turn counts: part of the capture is failing).

use serde::{Deserialize, Serialize};

/// Newest accepted turn at most this old (ms): green.
pub const GREEN_WITHIN_MS: i64 = 5 * 60_000;
/// Newest accepted turn at most this old (ms): yellow; older is red.
pub const YELLOW_WITHIN_MS: i64 = 60 * 60_000;

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
}

/// `GET /v1/me/capture-health` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureHealth {
    pub generated_at: String,
    pub surfaces: Vec<SurfaceHealth>,
}

#[cfg(test)]
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
