//! What was captured in a span of time: current turns per local day and surface, threads and turns per surface,
//! and the threads of the harvested agent sessions with turns in the span (their projects are worked out above
//! the store, from the transcript files [`crate::harvest::thread_files`] names). Counts are over
//! `messages.captured_at` through its index (`messages_captured`), current turns only (`is_current = 1`: an
//! edited turn counts once). A span is `since <= captured_at < until` and at most [`MAX_SPAN_DAYS`] long.
//!
//! Days are the caller's local days: the caller passes its offset from UTC in minutes and SQLite shifts each
//! stored time by it before taking the date, so a turn captured at 23:30 UTC is on the next day at UTC+01:00.

use rusqlite::{Connection, params};
use serde::Serialize;
use time::OffsetDateTime;

use super::ReadError;
use crate::clock::fmt_time;

/// Longest span one read may cover.
pub const MAX_SPAN_DAYS: i64 = 400;
/// Largest offset from UTC accepted, in minutes (±18 h, beyond every real time zone).
pub const MAX_OFFSET_MINUTES: i32 = 18 * 60;
/// Most threads [`threads_in_span`] returns.
pub const MAX_THREADS: u32 = 10_000;

/// Current turns of one surface captured on one local day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DayCount {
    /// The local date, `YYYY-MM-DD`.
    pub day: String,
    pub surface: String,
    pub turns: u64,
}

/// One surface's activity in a span.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SurfaceCount {
    pub surface: String,
    /// Threads with at least one current turn captured in the span.
    pub threads: u64,
    /// Current turns captured in the span.
    pub turns: u64,
}

/// One thread's activity in a span.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadCount {
    pub thread_id: String,
    pub surface: String,
    /// Current turns captured in the span.
    pub turns: u64,
}

/// Checks a span and an offset; answers the stored forms of the span's ends and SQLite's date modifier.
fn span(
    since: OffsetDateTime,
    until: OffsetDateTime,
    offset_minutes: i32,
) -> Result<(String, String, String), ReadError> {
    if until <= since {
        return Err(ReadError::BadRequest(
            "the span ends before it starts: give an end after its start".into(),
        ));
    }
    if until - since > time::Duration::days(MAX_SPAN_DAYS) {
        return Err(ReadError::BadRequest(format!(
            "the span is longer than {MAX_SPAN_DAYS} days: ask for a shorter one"
        )));
    }
    if offset_minutes.abs() > MAX_OFFSET_MINUTES {
        return Err(ReadError::BadRequest(format!(
            "a UTC offset of {offset_minutes} minutes is beyond ±{MAX_OFFSET_MINUTES}: give a real time zone's offset"
        )));
    }
    Ok((
        fmt_time(since),
        fmt_time(until),
        format!("{offset_minutes:+} minutes"),
    ))
}

/// Current turns per local day and surface captured in `since..until`, by day then surface; days without turns
/// are left out.
pub fn turns_per_day(
    conn: &Connection,
    since: OffsetDateTime,
    until: OffsetDateTime,
    offset_minutes: i32,
) -> Result<Vec<DayCount>, ReadError> {
    let (since, until, shift) = span(since, until, offset_minutes)?;
    let mut stmt = conn.prepare_cached(
        "SELECT date(m.captured_at, ?3) AS day, t.surface, count(*)
         FROM messages m INDEXED BY messages_captured JOIN threads t ON t.id = m.thread_id
         WHERE m.captured_at >= ?1 AND m.captured_at < ?2 AND m.is_current = 1
         GROUP BY day, t.surface ORDER BY day, t.surface",
    )?;
    let rows = stmt
        .query_map(params![since, until, shift], |r| {
            Ok(DayCount {
                day: r.get(0)?,
                surface: r.get(1)?,
                turns: r.get(2)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Threads and current turns per surface captured in `since..until`, by surface; surfaces without turns in the
/// span are left out.
pub fn per_surface(
    conn: &Connection,
    since: OffsetDateTime,
    until: OffsetDateTime,
) -> Result<Vec<SurfaceCount>, ReadError> {
    let (since, until, _) = span(since, until, 0)?;
    let mut stmt = conn.prepare_cached(
        "SELECT t.surface, count(DISTINCT m.thread_id), count(*)
         FROM messages m INDEXED BY messages_captured JOIN threads t ON t.id = m.thread_id
         WHERE m.captured_at >= ?1 AND m.captured_at < ?2 AND m.is_current = 1
         GROUP BY t.surface ORDER BY t.surface",
    )?;
    let rows = stmt
        .query_map(params![since, until], |r| {
            Ok(SurfaceCount {
                surface: r.get(0)?,
                threads: r.get(1)?,
                turns: r.get(2)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// The threads whose surface starts with `surface_prefix` (`harvest:` for the agent sessions) with current turns
/// captured in `since..until`, most turns first, at most `limit` (capped at [`MAX_THREADS`]); the flag says
/// whether more were left out.
pub fn threads_in_span(
    conn: &Connection,
    since: OffsetDateTime,
    until: OffsetDateTime,
    surface_prefix: &str,
    limit: u32,
) -> Result<(Vec<ThreadCount>, bool), ReadError> {
    let (since, until, _) = span(since, until, 0)?;
    let limit = limit.min(MAX_THREADS);
    let mut stmt = conn.prepare_cached(
        "SELECT m.thread_id, t.surface, count(*) AS n
         FROM messages m INDEXED BY messages_captured JOIN threads t ON t.id = m.thread_id
         WHERE m.captured_at >= ?1 AND m.captured_at < ?2 AND m.is_current = 1
           AND substr(t.surface, 1, length(?3)) = ?3
         GROUP BY m.thread_id ORDER BY n DESC, m.thread_id LIMIT ?4",
    )?;
    let mut rows = stmt
        .query_map(
            params![since, until, surface_prefix, i64::from(limit) + 1],
            |r| {
                Ok(ThreadCount {
                    thread_id: r.get(0)?,
                    surface: r.get(1)?,
                    turns: r.get(2)?,
                })
            },
        )?
        .collect::<Result<Vec<_>, _>>()?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    Ok((rows, more))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ingest::{Origin, ingest_observations};
    use personkit_shared::wire::{ClientInfo, Observation, Role, build_observation};
    use time::macros::datetime;

    const GPT: &str = "browser-ext:chatgpt";
    const CLAUDE: &str = "browser-ext:claude";
    const CODE: &str = "harvest:claude-code";

    fn obs(surface: &str, conv: &str, ord: u32, text: &str, at: &str) -> Observation {
        let client = ClientInfo {
            app_version: "0.1.0".into(),
            device_id: "ext".into(),
        };
        let role = if ord.is_multiple_of(2) {
            Role::User
        } else {
            Role::Assistant
        };
        build_observation(surface, conv, role, text, Some(ord), None, at, client)
    }

    fn corpus(batch: Vec<Observation>) -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = crate::db::open(&dir.path().join("c.db")).unwrap();
        let origin = Origin {
            device_id: "d".into(),
        };
        let r = ingest_observations(&mut conn, &origin, &batch, NOW).unwrap();
        assert_eq!(r.rejected, 0, "{r:?}");
        (dir, conn)
    }

    const NOW: OffsetDateTime = datetime!(2026-11-28 12:00 UTC);

    /// Around midnight UTC on 2026-11-27/28, on two surfaces, one turn edited (two revisions, one current).
    fn around_midnight() -> (tempfile::TempDir, Connection) {
        corpus(vec![
            obs(GPT, "a", 0, "late question", "2026-11-27T22:30:00Z"),
            obs(GPT, "a", 1, "late answer", "2026-11-27T23:30:00Z"),
            obs(GPT, "a", 1, "late answer, edited", "2026-11-27T23:40:00Z"),
            obs(GPT, "b", 0, "early question", "2026-11-28T00:30:00Z"),
            obs(CLAUDE, "c", 0, "morning question", "2026-11-28T09:00:00Z"),
            obs(CLAUDE, "c", 1, "morning answer", "2026-11-28T09:01:00Z"),
        ])
    }

    fn days(rows: &[DayCount]) -> Vec<(&str, &str, u64)> {
        rows.iter()
            .map(|d| (d.day.as_str(), d.surface.as_str(), d.turns))
            .collect()
    }

    #[test]
    fn days_are_local_and_count_current_turns_once() {
        let (_d, conn) = around_midnight();
        let since = datetime!(2026-11-26 00:00 UTC);
        let until = datetime!(2026-11-29 00:00 UTC);
        let utc = turns_per_day(&conn, since, until, 0).unwrap();
        assert_eq!(
            days(&utc),
            vec![
                ("2026-11-27", GPT, 2),
                ("2026-11-28", GPT, 1),
                ("2026-11-28", CLAUDE, 2)
            ]
        );
        // At UTC+01:00 the 23:30 answer is on the 28th; the 22:30 question stays on the 27th.
        let east = turns_per_day(&conn, since, until, 60).unwrap();
        assert_eq!(
            days(&east),
            vec![
                ("2026-11-27", GPT, 1),
                ("2026-11-28", GPT, 2),
                ("2026-11-28", CLAUDE, 2)
            ]
        );
        // At UTC-05:00 the 00:30 question is still the 27th.
        let west = turns_per_day(&conn, since, until, -300).unwrap();
        assert_eq!(
            days(&west),
            vec![("2026-11-27", GPT, 3), ("2026-11-28", CLAUDE, 2)]
        );
    }

    #[test]
    fn the_span_bounds_are_start_inclusive_end_exclusive() {
        let (_d, conn) = around_midnight();
        let since = datetime!(2026-11-27 23:30 UTC);
        let until = datetime!(2026-11-28 09:00 UTC);
        // The edited answer's current revision is at 23:40, inside; the 09:00 question is at the end, outside.
        assert_eq!(
            per_surface(&conn, since, until).unwrap(),
            vec![SurfaceCount {
                surface: GPT.into(),
                threads: 2,
                turns: 2
            }]
        );
        let whole = per_surface(
            &conn,
            datetime!(2026-11-01 00:00 UTC),
            datetime!(2026-12-01 00:00 UTC),
        )
        .unwrap();
        assert_eq!(
            whole
                .iter()
                .map(|s| (s.surface.as_str(), s.threads, s.turns))
                .collect::<Vec<_>>(),
            vec![(GPT, 2, 3), (CLAUDE, 1, 2)]
        );
    }

    #[test]
    fn spans_and_offsets_are_bounded() {
        let (_d, conn) = around_midnight();
        let t = datetime!(2026-11-28 00:00 UTC);
        for (since, until, offset) in [
            (t, t, 0),
            (t, t - time::Duration::days(1), 0),
            (t - time::Duration::days(MAX_SPAN_DAYS + 1), t, 0),
            (t - time::Duration::days(1), t, MAX_OFFSET_MINUTES + 1),
        ] {
            assert!(
                matches!(
                    turns_per_day(&conn, since, until, offset),
                    Err(ReadError::BadRequest(_))
                ),
                "{since} {until} {offset}"
            );
        }
        assert!(turns_per_day(&conn, t - time::Duration::days(MAX_SPAN_DAYS), t, 0).is_ok());
        assert!(matches!(
            per_surface(&conn, t, t),
            Err(ReadError::BadRequest(_))
        ));
    }

    #[test]
    fn threads_of_a_surface_prefix_most_turns_first_and_limited() {
        let (_d, conn) = corpus(vec![
            obs(CODE, "s1", 0, "fix the build", "2026-11-28T08:00:00Z"),
            obs(CODE, "s1", 1, "done", "2026-11-28T08:01:00Z"),
            obs(CODE, "s2", 0, "add a test", "2026-11-28T08:02:00Z"),
            obs("harvest:codex", "s3", 0, "old", "2026-11-20T08:00:00Z"),
            obs(GPT, "a", 0, "not an agent", "2026-11-28T08:00:00Z"),
        ]);
        let since = datetime!(2026-11-28 00:00 UTC);
        let until = datetime!(2026-11-29 00:00 UTC);
        let (rows, more) = threads_in_span(&conn, since, until, "harvest:", 10).unwrap();
        assert!(!more);
        assert_eq!(
            rows.iter()
                .map(|t| (t.surface.as_str(), t.turns))
                .collect::<Vec<_>>(),
            vec![(CODE, 2), (CODE, 1)]
        );
        let (one, more) = threads_in_span(&conn, since, until, "harvest:", 1).unwrap();
        assert_eq!((one.len(), more), (1, true));
        assert_eq!(one[0].turns, 2);
    }
}
