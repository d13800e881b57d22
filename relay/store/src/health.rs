//! Capture health per surface: when a turn was last accepted, how many turns and threads arrived in the last
//! 24 hours, the last error, and a colour — green (last accepted ≤ 5 min ago), yellow (5–60 min), red
//! otherwise or when the surface's latest event is an error. The extension shows exactly this. Devices report
//! surfaces whose adapter no longer reads their pages ([`record_reports`]); such a surface is at least yellow with
//! the reason `adapter_stale` until the device reports it reads them again or captures a turn of it.

use personkit_shared::health::{CaptureReport, Facts, assess};
use personkit_shared::wire::{ApiError, ItemResult, ItemStatus};
use rusqlite::{Connection, params};
use time::{Duration, OffsetDateTime};

use crate::clock::{fmt_time, normalize_time, parse_time};
use crate::db::DbError;

pub use personkit_shared::health::{CaptureHealth, LastError, PathsHealth, Status, SurfaceHealth};

/// Records one device's reports, each on its own: a report with `stale_since` stands (replacing the device's
/// earlier one for the surface), one without removes it. Answers per report in the order given (`stored`, or
/// `rejected` with the rule it breaks); valid reports beside an invalid one still land.
pub fn record_reports(
    conn: &mut Connection,
    device_id: &str,
    reports: &[CaptureReport],
    now: OffsetDateTime,
) -> Result<Vec<ItemResult>, DbError> {
    let tx = conn.transaction()?;
    let now_s = fmt_time(now);
    let mut out = Vec::with_capacity(reports.len());
    for (index, r) in reports.iter().enumerate() {
        let since = match &r.stale_since {
            Some(t) => normalize_time(t).ok_or(()),
            None => Err(()),
        };
        let problem = r.problem().or_else(|| {
            (r.stale_since.is_some() && since.is_err()).then(|| {
                (
                    "bad_timestamp",
                    "stale_since is not a valid time".to_owned(),
                )
            })
        });
        if let Some((code, message)) = problem {
            out.push(ItemResult {
                index,
                status: ItemStatus::Rejected,
                message_id: None,
                thread_id: None,
                error: Some(ApiError::new(
                    code,
                    message,
                    "send {surface, stale_since: RFC 3339 time or null, rule} (see docs/wire-format.md)",
                )),
            });
            continue;
        }
        if let Some(p) = &r.paths
            && let (Some(code), Some(at)) = (
                &p.unparsed,
                p.unparsed_since.as_deref().and_then(normalize_time),
            )
        {
            // A device's site responses no longer parse: the surface's last error, unless a newer one stands.
            tx.prepare_cached(
                "INSERT INTO surface_stats(surface, last_error_code, last_error_message, last_error_at)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(surface) DO UPDATE SET last_error_code = ?2, last_error_message = ?3,
                    last_error_at = ?4
                 WHERE last_error_at IS NULL OR last_error_at < ?4",
            )?
            .execute(params![
                r.surface,
                code,
                "the site's responses from its known endpoints no longer parse (network path); the DOM path still reads its pages",
                at
            ])?;
        }
        match since {
            Ok(since) => tx
                .prepare_cached(
                    "INSERT INTO capture_reports(surface, device_id, stale_since, rule, reported_at)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT(surface, device_id) DO UPDATE SET stale_since = ?3, rule = ?4, reported_at = ?5",
                )?
                .execute(params![r.surface, device_id, since, r.rule, now_s])?,
            Err(()) => tx
                .prepare_cached("DELETE FROM capture_reports WHERE surface = ?1 AND device_id = ?2")?
                .execute(params![r.surface, device_id])?,
        };
        out.push(ItemResult {
            index,
            status: ItemStatus::Stored,
            message_id: None,
            thread_id: None,
            error: None,
        });
    }
    tx.commit()?;
    Ok(out)
}

/// A turn of `surface` captured by `device_id` at `captured_at` (stored form) was accepted: the device's stale
/// report of the surface from before that capture no longer stands (its adapter read a page again).
pub fn clear_reports_before(
    conn: &Connection,
    device_id: &str,
    surface: &str,
    captured_at: &str,
) -> Result<(), DbError> {
    conn.prepare_cached(
        "DELETE FROM capture_reports WHERE surface = ?1 AND device_id = ?2 AND stale_since < ?3",
    )?
    .execute(params![surface, device_id, captured_at])?;
    Ok(())
}

/// Capture health of every surface that has sent anything (accepted or rejected) or is reported stale, sorted by
/// surface.
pub fn capture_health(conn: &Connection, now: OffsetDateTime) -> Result<CaptureHealth, DbError> {
    let since = fmt_time(now - Duration::hours(24));
    let mut stmt = conn.prepare_cached(
        "WITH names AS (SELECT surface FROM surface_stats UNION SELECT surface FROM capture_reports)
         SELECT n.surface, s.last_accepted_at, s.last_error_code, s.last_error_message, s.last_error_at,
            (SELECT count(*) FROM messages m JOIN threads t ON t.id = m.thread_id
              WHERE t.surface = n.surface AND m.received_at >= ?1),
            (SELECT count(DISTINCT m.thread_id) FROM messages m JOIN threads t ON t.id = m.thread_id
              WHERE t.surface = n.surface AND m.received_at >= ?1),
            (SELECT min(r.stale_since) FROM capture_reports r WHERE r.surface = n.surface),
            (SELECT max(x) FROM (
                SELECT max(m.received_at) AS x FROM messages m JOIN threads t ON t.id = m.thread_id
                 WHERE t.surface = n.surface AND m.received_at >= ?1 AND m.source_path = 'dom'
                UNION ALL
                SELECT max(f.folded_at) FROM message_renderings f JOIN threads t ON t.id = f.thread_id
                 WHERE t.surface = n.surface AND f.folded_at >= ?1 AND f.source_path = 'dom')),
            (SELECT max(m.received_at) FROM messages m JOIN threads t ON t.id = m.thread_id
              WHERE t.surface = n.surface AND m.received_at >= ?1 AND m.source_path = 'network')
         FROM names n LEFT JOIN surface_stats s ON s.surface = n.surface ORDER BY n.surface",
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
            let stale_since: Option<String> = r.get(7)?;
            let ms = |t: OffsetDateTime| (t.unix_timestamp_nanos() / 1_000_000) as i64;
            let t = |v: &Option<String>| v.as_deref().and_then(parse_time).map(ms);
            let surface: String = r.get(0)?;
            let dom_at: Option<String> = r.get(8)?;
            let network_at: Option<String> = r.get(9)?;
            let facts = Facts {
                last_accepted_ms: t(&last_accepted_at),
                last_error: last_error
                    .as_ref()
                    .and_then(|e| Some((e.code.as_str(), ms(parse_time(&e.at)?)))),
                stale_since_ms: t(&stale_since),
                network_ms: t(&network_at),
            };
            let (status, reason) = assess(&facts, ms(now));
            let unparsed = last_error.as_ref().filter(|_| facts.unparsed().is_some());
            let paths =
                personkit_shared::network::Surface::from_id(&surface).map(|_| PathsHealth {
                    working: personkit_shared::health::working_paths(
                        t(&dom_at),
                        t(&network_at),
                        facts.unparsed().map(|(_, at)| at),
                        ms(now),
                    )
                    .to_owned(),
                    unparsed_since: unparsed.map(|u| u.at.clone()),
                    unparsed: unparsed.map(|u| u.code.clone()),
                    dom_at,
                    network_at,
                });
            Ok(SurfaceHealth {
                paths,
                reason: reason.map(str::to_owned),
                stale_since,
                surface,
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use time::macros::datetime;

    /// The relay's stored times reach the shared rule at millisecond precision: an error recorded in the same batch
    /// (the same instant) as the last accepted turn is red; one a millisecond older is not.
    #[test]
    fn times_reach_the_shared_rule_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::db::open(&dir.path().join("c.db")).unwrap();
        let now = datetime!(2026-11-22 12:00:00 UTC);
        // Half a second past a whole second: a rule fed whole seconds would see the two errors below as one.
        let at = now - Duration::minutes(1) + Duration::milliseconds(500);
        let colour = |error_at: OffsetDateTime| {
            conn.execute(
                "INSERT OR REPLACE INTO surface_stats (surface, last_accepted_at, last_error_code, last_error_message,
                    last_error_at) VALUES ('browser-ext:claude', ?1, 'bad_role', 'm', ?2)",
                params![fmt_time(at), fmt_time(error_at)],
            )
            .unwrap();
            capture_health(&conn, now).unwrap().surfaces[0].status
        };
        assert_eq!(colour(at), Status::Red);
        assert_eq!(colour(at - Duration::milliseconds(1)), Status::Green);
    }
}
