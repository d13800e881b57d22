//! Capture health per surface: when a turn was last accepted, how many turns and threads arrived in the last
//! 24 hours, the last error, and a colour — green (last accepted ≤ 5 min ago), yellow (5–60 min), red
//! otherwise or when the surface's latest event is an error. The extension shows exactly this.

use rusqlite::Connection;
use time::{Duration, OffsetDateTime};

use crate::clock::{fmt_time, parse_time};
use crate::db::DbError;

pub use personkit_shared::health::{CaptureHealth, LastError, Status, SurfaceHealth};

/// The colour of a surface given its last accepted turn and last error: [`personkit_shared::health::status`].
pub fn status_for(
    last_accepted: Option<OffsetDateTime>,
    last_error: Option<OffsetDateTime>,
    now: OffsetDateTime,
) -> Status {
    let ms = |t: OffsetDateTime| (t.unix_timestamp_nanos() / 1_000_000) as i64;
    personkit_shared::health::status(last_accepted.map(ms), last_error.map(ms), ms(now))
}

/// Capture health of every surface that has sent anything (accepted or rejected), sorted by surface.
pub fn capture_health(conn: &Connection, now: OffsetDateTime) -> Result<CaptureHealth, DbError> {
    let since = fmt_time(now - Duration::hours(24));
    let mut stmt = conn.prepare_cached(
        "SELECT s.surface, s.last_accepted_at, s.last_error_code, s.last_error_message, s.last_error_at,
            (SELECT count(*) FROM messages m JOIN threads t ON t.id = m.thread_id
              WHERE t.surface = s.surface AND m.received_at >= ?1),
            (SELECT count(DISTINCT m.thread_id) FROM messages m JOIN threads t ON t.id = m.thread_id
              WHERE t.surface = s.surface AND m.received_at >= ?1)
         FROM surface_stats s ORDER BY s.surface",
    )?;
    let surfaces = stmt
        .query_map([since], |r| {
            let last_accepted_at: Option<String> = r.get(1)?;
            let code: Option<String> = r.get(2)?;
            let message: Option<String> = r.get(3)?;
            let at: Option<String> = r.get(4)?;
            let last_error = match (code, at) {
                (Some(code), Some(at)) => Some(LastError {
                    code,
                    message: message.unwrap_or_default(),
                    at,
                }),
                _ => None,
            };
            let status = status_for(
                last_accepted_at.as_deref().and_then(parse_time),
                last_error.as_ref().and_then(|e| parse_time(&e.at)),
                now,
            );
            Ok(SurfaceHealth {
                surface: r.get(0)?,
                status,
                last_accepted_at,
                turns_24h: r.get(5)?,
                threads_24h: r.get(6)?,
                last_error,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(CaptureHealth {
        generated_at: fmt_time(now),
        surfaces,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    /// The relay's times reach the shared rule at millisecond precision: an error recorded in the same batch
    /// (the same instant) as the last accepted turn is red; a minute of age is green.
    #[test]
    fn times_reach_the_shared_rule_exactly() {
        let now = datetime!(2026-11-22 12:00:00 UTC);
        let at = now - Duration::minutes(1);
        assert_eq!(status_for(Some(at), Some(at), now), Status::Red);
        assert_eq!(
            status_for(Some(at), Some(at - Duration::milliseconds(1)), now),
            Status::Green
        );
        assert_eq!(status_for(None, None, now), Status::Red);
    }
}
