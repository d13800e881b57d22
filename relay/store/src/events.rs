//! The events stream's storage: what the user did (commits, plans, tasks, sessions, …) as written by the event
//! harvesters of `personkit-events`, and the harvesters' own settings and state.
//!
//! An event is stored once per content hash and minute bucket (`personkit_shared::ids::event_content_hash` over
//! kind, key and content; `minute_bucket` of its time): [`insert_batch`] answers the rest as duplicates. Each
//! batch that stores something gets one provenance row, and every stored event this relay's origin id and the
//! next per-origin sequence number, as turns do. Events are append-only (triggers of migrations 0001 and 0024);
//! the one way out is forgetting the thread an event was derived from (`attrs.thread_id`), inside
//! `forget::remove_selected` ([`forget_selected`]).
//!
//! The settings and state tables (`event_sources`, `event_paths`, `event_cursors`) are machine-local: none of them
//! travels in a snapshot or to another relay. Which sources exist, their cadences and what a cursor holds are
//! `personkit-events`' to decide; here they are names and JSON text.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use time::OffsetDateTime;

use personkit_shared::ids;

use crate::clock::fmt_time;
use crate::db::DbError;
use crate::vectors::{Kind, SUPPORTED_DIMS};

/// Most bytes of one event's content; longer content is refused (harvesters cut what they read before this).
pub const MAX_CONTENT_BYTES: usize = 64 * 1024;
/// Most events one [`list`] call answers.
pub const MAX_LIMIT: u32 = 500;
/// Most events one [`insert_batch`] call takes.
pub const MAX_BATCH: usize = 2_000;

/// An event to store.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// `git.commit`, `plan.updated`, `session.started`, …
    pub kind: String,
    /// The source that saw it (`events:git`, `harvest:claude-code`, …).
    pub source_surface: String,
    pub content: String,
    /// What tells two events of the same kind and words apart (a repository and sha, a file's path, a thread id);
    /// part of the content hash, not stored on its own.
    pub key: String,
    pub occurred_at: OffsetDateTime,
    /// A JSON object.
    pub attrs: serde_json::Value,
}

/// What [`insert_batch`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Inserted {
    pub stored: u64,
    /// Already stored: the same content hash in the same minute bucket.
    pub duplicate: u64,
}

fn ms(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

/// Stores `events` in one transaction, each at most once per content hash and minute bucket.
pub fn insert_batch(
    conn: &Connection,
    events: &[NewEvent],
    now: OffsetDateTime,
) -> Result<Inserted, DbError> {
    if events.len() > MAX_BATCH {
        return Err(DbError::Invalid(format!(
            "{} events in one batch is more than {MAX_BATCH}: store them in smaller batches",
            events.len()
        )));
    }
    for e in events {
        if e.content.len() > MAX_CONTENT_BYTES {
            return Err(DbError::Invalid(format!(
                "an event of kind {:?} holds {} bytes, more than {MAX_CONTENT_BYTES}: cut it first",
                e.kind,
                e.content.len()
            )));
        }
        if !e.attrs.is_object() {
            return Err(DbError::Invalid(format!(
                "an event of kind {:?} has attrs that are not a JSON object",
                e.kind
            )));
        }
    }
    let mut out = Inserted::default();
    if events.is_empty() {
        return Ok(out);
    }
    let origin = crate::db::relay_id(conn)?;
    let now_s = fmt_time(now);
    let tx = crate::db::begin_write(conn)?;
    let mut seq: i64 = tx
        .query_row(
            "SELECT last_seq FROM origin_seqs WHERE origin = ?1",
            [&origin],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(0);
    let start_seq = seq;
    let mut provenance: Option<i64> = None;
    {
        let mut exists = tx.prepare_cached(
            "SELECT 1 FROM events WHERE content_hash = ?1 AND minute_bucket = ?2",
        )?;
        let mut insert = tx.prepare_cached(
            "INSERT INTO events (id, kind, source_surface, content, content_hash, minute_bucket, occurred_at,
                 captured_at, attrs, provenance_id, origin_device, origin_seq)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        )?;
        for e in events {
            let hash = ids::event_content_hash(&e.kind, &e.key, &e.content);
            let bucket = ids::minute_bucket(ms(e.occurred_at));
            if exists.exists(params![hash, bucket])? {
                out.duplicate += 1;
                continue;
            }
            let prov = match provenance {
                Some(p) => p,
                None => {
                    tx.prepare_cached(
                        "INSERT INTO provenance(captured_at, origin_device, client_device_id, app_version)
                         VALUES (?1, ?2, 'personkit-events', ?3)",
                    )?
                    .execute(params![now_s, origin, env!("CARGO_PKG_VERSION")])?;
                    let p = tx.last_insert_rowid();
                    provenance = Some(p);
                    p
                }
            };
            seq += 1;
            insert.execute(params![
                ids::event_id(&hash, bucket),
                e.kind,
                e.source_surface,
                e.content,
                hash,
                bucket,
                fmt_time(e.occurred_at),
                now_s,
                e.attrs.to_string(),
                prov,
                origin,
                seq
            ])?;
            out.stored += 1;
        }
    }
    if seq != start_seq {
        tx.execute(
            "INSERT INTO origin_seqs(origin, last_seq) VALUES (?1, ?2)
             ON CONFLICT(origin) DO UPDATE SET last_seq = ?2",
            params![origin, seq],
        )?;
    }
    tx.commit()?;
    Ok(out)
}

/// One stored event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRow {
    pub id: String,
    pub kind: String,
    pub source_surface: String,
    pub content: String,
    pub occurred_at: String,
    pub captured_at: String,
    pub attrs: serde_json::Value,
}

/// Which events [`list`] answers: every part given must hold. Times are in the stored form.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// A kind (`git.commit`), or every kind under a prefix when it ends in `.*` (`session.*`).
    pub kind: Option<String>,
    pub source_surface: Option<String>,
    /// The thread an event was derived from (`attrs.thread_id`).
    pub thread: Option<String>,
    /// Inclusive lower bound of `occurred_at`.
    pub since: Option<String>,
    /// Exclusive upper bound of `occurred_at`.
    pub until: Option<String>,
    /// Continue after this event: the `next` cursor of a previous page, `<occurred_at>/<id>`.
    pub before: Option<String>,
    /// 1 to [`MAX_LIMIT`].
    pub limit: u32,
}

/// A page of events, newest first, and the cursor of the next page when there may be one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Page {
    pub events: Vec<EventRow>,
    pub next: Option<String>,
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<EventRow> {
    let attrs: String = r.get(6)?;
    Ok(EventRow {
        id: r.get(0)?,
        kind: r.get(1)?,
        source_surface: r.get(2)?,
        content: r.get(3)?,
        occurred_at: r.get(4)?,
        captured_at: r.get(5)?,
        attrs: serde_json::from_str(&attrs).unwrap_or(serde_json::Value::Null),
    })
}

/// Events matching `f`, newest first (by `occurred_at`, then id), at most `f.limit`.
pub fn list(conn: &Connection, f: &Filter) -> Result<Page, DbError> {
    if f.limit == 0 || f.limit > MAX_LIMIT {
        return Err(DbError::Invalid(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    let (kind_exact, kind_prefix) = match f.kind.as_deref() {
        Some(k) => match k.strip_suffix(".*") {
            Some(p) => (None, Some(format!("{p}."))),
            None => (Some(k.to_owned()), None),
        },
        None => (None, None),
    };
    let (before_at, before_id) = match f.before.as_deref() {
        Some(c) => {
            let (at, id) = c.rsplit_once('/').ok_or_else(|| {
                DbError::Invalid(format!(
                    "cursor {:?} is not one this listing gave: pass its `next` back as it is",
                    personkit_shared::wire::quote_safely(c, 60)
                ))
            })?;
            (Some(at.to_owned()), Some(id.to_owned()))
        }
        None => (None, None),
    };
    // Only the conditions given, so SQLite can pick the index that serves them (kind, source, thread, time).
    let mut conds: Vec<&str> = Vec::new();
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    let mut add = |cond: &'static str, v: Option<String>| {
        if let Some(v) = v {
            conds.push(cond);
            args.push(rusqlite::types::Value::Text(v));
        }
    };
    add("kind = ?", kind_exact);
    add("kind >= ?", kind_prefix.clone());
    // Every kind under the prefix sorts below the prefix with its last character raised by one.
    add(
        "kind < ?",
        kind_prefix.map(|p| {
            let mut p = p;
            p.pop();
            p.push('/'); // the character after '.'
            p
        }),
    );
    add("source_surface = ?", f.source_surface.clone());
    add("json_extract(attrs, '$.thread_id') = ?", f.thread.clone());
    add("occurred_at >= ?", f.since.clone());
    add("occurred_at < ?", f.until.clone());
    if let (Some(at), Some(id)) = (before_at, before_id) {
        conds.push("(occurred_at < ? OR (occurred_at = ? AND id < ?))");
        args.push(rusqlite::types::Value::Text(at.clone()));
        args.push(rusqlite::types::Value::Text(at));
        args.push(rusqlite::types::Value::Text(id));
    }
    args.push(rusqlite::types::Value::Integer(i64::from(f.limit)));
    let sql = format!(
        "SELECT id, kind, source_surface, content, occurred_at, captured_at, attrs FROM events {}
         ORDER BY occurred_at DESC, id DESC LIMIT ?",
        if conds.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", conds.join(" AND "))
        }
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let events = stmt
        .query_map(rusqlite::params_from_iter(args), row)?
        .collect::<Result<Vec<_>, _>>()?;
    let next = (events.len() == f.limit as usize)
        .then(|| events.last().map(|e| format!("{}/{}", e.occurred_at, e.id)))
        .flatten();
    Ok(Page { events, next })
}

/// The events derived from one thread, oldest first, at most `limit` (1 to [`MAX_LIMIT`]).
pub fn of_thread(conn: &Connection, thread_id: &str, limit: u32) -> Result<Vec<EventRow>, DbError> {
    if limit == 0 || limit > MAX_LIMIT {
        return Err(DbError::Invalid(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    let mut stmt = conn.prepare_cached(
        "SELECT id, kind, source_surface, content, occurred_at, captured_at, attrs FROM events
         WHERE json_extract(attrs, '$.thread_id') = ?1 ORDER BY occurred_at, id LIMIT ?2",
    )?;
    let rows = stmt
        .query_map(params![thread_id, limit], row)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Events per kind (at most 200 kinds, most first), from `since` (stored form) when given.
pub fn counts(conn: &Connection, since: Option<&str>) -> Result<Vec<(String, u64)>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT kind, count(*) AS n FROM events WHERE (?1 IS NULL OR occurred_at >= ?1)
         GROUP BY kind ORDER BY n DESC, kind LIMIT 200",
    )?;
    let rows = stmt
        .query_map([since], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Inside the forget transaction (`forget::remove_selected`, before the messages go): removes every event derived
/// from a thread with a selected message — its full-text row (by trigger), vectors, vector state and cached
/// embeddings no other row uses. The threads are listed in `events_forgetting` only for the time of the delete,
/// which is what lets the append-only trigger allow it.
pub(crate) fn forget_selected(tx: &rusqlite::Transaction<'_>) -> Result<u64, DbError> {
    tx.execute(
        "INSERT OR IGNORE INTO events_forgetting(thread_id) SELECT DISTINCT thread_id FROM forget_sel",
        [],
    )?;
    let pks: Vec<i64> = tx
        .prepare(
            "SELECT e.pk FROM events_forgetting f
             JOIN events e ON json_extract(e.attrs, '$.thread_id') = f.thread_id",
        )?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if !pks.is_empty() {
        tx.execute_batch(
            "CREATE TEMP TABLE IF NOT EXISTS forget_event_sel (pk INTEGER PRIMARY KEY);
             DELETE FROM forget_event_sel;",
        )?;
        {
            let mut ins = tx.prepare_cached("INSERT INTO forget_event_sel(pk) VALUES (?1)")?;
            for pk in &pks {
                ins.execute([pk])?;
            }
        }
        tx.execute(
            "DELETE FROM embeddings WHERE text_hash IN (
                 SELECT s.text_hash FROM search_vec_state s JOIN forget_event_sel f ON s.kind = 'event' AND s.pk = f.pk)
               AND text_hash NOT IN (
                 SELECT s.text_hash FROM search_vec_state s
                 WHERE NOT (s.kind = 'event' AND s.pk IN (SELECT pk FROM forget_event_sel)))",
            [],
        )?;
        for d in SUPPORTED_DIMS {
            for table in [Kind::Event.vec_table(d), Kind::Event.bit_table(d)] {
                let mut del =
                    tx.prepare_cached(&format!("DELETE FROM {table} WHERE rowid = ?1"))?;
                for pk in &pks {
                    del.execute([pk])?;
                }
            }
        }
        tx.execute(
            "DELETE FROM search_vec_state WHERE kind = 'event' AND pk IN (SELECT pk FROM forget_event_sel)",
            [],
        )?;
        tx.execute(
            "DELETE FROM events WHERE pk IN (SELECT pk FROM forget_event_sel)",
            [],
        )?;
        tx.execute("DELETE FROM forget_event_sel", [])?;
    }
    tx.execute("DELETE FROM events_forgetting", [])?;
    Ok(pks.len() as u64)
}

/// A thread as the session and thread events see it: its surface, title and the times of its first and last
/// turns (a turn's `occurred_at`, else its `captured_at`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSpan {
    pub thread_id: String,
    pub surface: String,
    pub title: Option<String>,
    pub first_at: String,
    pub last_at: String,
    pub last_seen_at: String,
    /// Whether a `thread.started` or `session.started` event names it already.
    pub started: bool,
    /// The newest `session.ended` event's time, if any.
    pub ended_at: Option<String>,
}

/// Most threads one [`thread_spans`] call answers.
pub const MAX_SPANS: u32 = 2_000;

/// Threads seen at or after `seen_since` (stored form), and threads no event names yet (kinds `thread.started`
/// or `session.started`), by `last_seen_at` then id, at most `limit` (1 to [`MAX_SPANS`]).
pub fn thread_spans(
    conn: &Connection,
    seen_since: Option<&str>,
    limit: u32,
) -> Result<Vec<ThreadSpan>, DbError> {
    if limit == 0 || limit > MAX_SPANS {
        return Err(DbError::Invalid(format!(
            "limit must be between 1 and {MAX_SPANS}"
        )));
    }
    let mut stmt = conn.prepare_cached(
        "SELECT t.id, t.surface, t.title, t.last_seen_at,
                (SELECT min(coalesce(m.occurred_at, m.captured_at)) FROM messages m WHERE m.thread_id = t.id),
                (SELECT max(coalesce(m.occurred_at, m.captured_at)) FROM messages m WHERE m.thread_id = t.id),
                EXISTS (SELECT 1 FROM events e WHERE json_extract(e.attrs, '$.thread_id') = t.id
                        AND e.kind IN ('thread.started', 'session.started')),
                (SELECT max(e.occurred_at) FROM events e WHERE json_extract(e.attrs, '$.thread_id') = t.id
                        AND e.kind = 'session.ended')
         FROM threads t
         WHERE (?1 IS NOT NULL AND t.last_seen_at >= ?1)
            OR NOT EXISTS (SELECT 1 FROM events e WHERE json_extract(e.attrs, '$.thread_id') = t.id
                           AND e.kind IN ('thread.started', 'session.started'))
         ORDER BY t.last_seen_at, t.id LIMIT ?2",
    )?;
    let rows = stmt
        .query_map(params![seen_since, limit], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, Option<String>>(5)?,
                r.get::<_, bool>(6)?,
                r.get::<_, Option<String>>(7)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows
        .into_iter()
        .filter_map(
            |(thread_id, surface, title, last_seen_at, first, last, started, ended_at)| {
                Some(ThreadSpan {
                    thread_id,
                    surface,
                    title,
                    first_at: first?,
                    last_at: last?,
                    last_seen_at,
                    started,
                    ended_at,
                })
            },
        )
        .collect())
}

/// One event source's settings and last run, as `personkit events sources` shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SourceRow {
    pub name: String,
    pub enabled: bool,
    pub last_run_at: Option<String>,
    /// The last problem a run had, prefixed by that run's time.
    pub last_error: Option<String>,
    /// Items read, events stored, duplicates and rejected items, over every run.
    pub read: u64,
    pub stored: u64,
    pub duplicate: u64,
    pub rejected: u64,
}

/// The stored sources (a source never enabled has no row).
pub fn sources(conn: &Connection) -> Result<Vec<SourceRow>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, enabled, last_run_at, last_error, read, stored, duplicate, rejected
         FROM event_sources ORDER BY name",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok(SourceRow {
                name: r.get(0)?,
                enabled: r.get::<_, i64>(1)? != 0,
                last_run_at: r.get(2)?,
                last_error: r.get(3)?,
                read: r.get(4)?,
                stored: r.get(5)?,
                duplicate: r.get(6)?,
                rejected: r.get(7)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Turns a source on or off.
pub fn set_enabled(conn: &Connection, name: &str, enabled: bool) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO event_sources(name, enabled) VALUES (?1, ?2)
         ON CONFLICT(name) DO UPDATE SET enabled = ?2",
    )?
    .execute(params![name, enabled as i64])?;
    Ok(())
}

/// What one run of one source did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RunCounts {
    pub read: u64,
    pub stored: u64,
    pub duplicate: u64,
    pub rejected: u64,
}

/// Records the end of a run of one source. The last problem stays (with its run's time) until a later run has
/// one of its own.
pub fn record_run(
    conn: &Connection,
    name: &str,
    at: OffsetDateTime,
    c: RunCounts,
    error: Option<&str>,
) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO event_sources(name, last_run_at, last_error, read, stored, duplicate, rejected)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT(name) DO UPDATE SET last_run_at = ?2, last_error = coalesce(?3, last_error),
            read = read + ?4, stored = stored + ?5, duplicate = duplicate + ?6, rejected = rejected + ?7",
    )?
    .execute(params![
        name,
        fmt_time(at),
        error.map(|e| format!("{}: {e}", fmt_time(at))),
        c.read as i64,
        c.stored as i64,
        c.duplicate as i64,
        c.rejected as i64
    ])?;
    Ok(())
}

/// The paths a source reads that the user added, in the order added (at most 1,000).
pub fn paths(conn: &Connection, source: &str) -> Result<Vec<String>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT path FROM event_paths WHERE source = ?1 ORDER BY added_at, path LIMIT 1000",
    )?;
    let rows = stmt
        .query_map([source], |r| r.get(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Adds a path to a source; true when it was not there yet.
pub fn add_path(
    conn: &Connection,
    source: &str,
    path: &str,
    at: OffsetDateTime,
) -> Result<bool, DbError> {
    let n = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO event_paths(source, path, added_at) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![source, path, fmt_time(at)])?;
    Ok(n > 0)
}

/// Removes a path from a source; true when it was there.
pub fn remove_path(conn: &Connection, source: &str, path: &str) -> Result<bool, DbError> {
    let n = conn
        .prepare_cached("DELETE FROM event_paths WHERE source = ?1 AND path = ?2")?
        .execute(params![source, path])?;
    Ok(n > 0)
}

/// What a source remembered about one of its files or repositories (JSON), if anything.
pub fn cursor(conn: &Connection, source: &str, key: &str) -> Result<Option<String>, DbError> {
    Ok(conn
        .prepare_cached("SELECT state FROM event_cursors WHERE source = ?1 AND key = ?2")?
        .query_row(params![source, key], |r| r.get(0))
        .optional()?)
}

/// Saves what a source remembers about one of its files or repositories (JSON), after its events were stored.
pub fn save_cursor(
    conn: &Connection,
    source: &str,
    key: &str,
    state: &str,
    at: OffsetDateTime,
) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO event_cursors(source, key, state, read_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(source, key) DO UPDATE SET state = ?3, read_at = ?4",
    )?
    .execute(params![source, key, state, fmt_time(at)])?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn ev(kind: &str, content: &str, key: &str, at: OffsetDateTime) -> NewEvent {
        NewEvent {
            kind: kind.into(),
            source_surface: "events:test".into(),
            content: content.into(),
            key: key.into(),
            occurred_at: at,
            attrs: serde_json::json!({"k": key}),
        }
    }

    #[test]
    fn the_same_content_in_one_minute_is_stored_once_and_in_the_next_minute_again() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::db::open(&dir.path().join("c.db")).unwrap();
        let now = datetime!(2026-11-28 12:00 UTC);
        let a = ev(
            "plan.updated",
            "ship it",
            "p",
            datetime!(2026-11-28 10:00:05 UTC),
        );
        let same_minute = ev(
            "plan.updated",
            "ship it",
            "p",
            datetime!(2026-11-28 10:00:55 UTC),
        );
        let next_minute = ev(
            "plan.updated",
            "ship it",
            "p",
            datetime!(2026-11-28 10:01:00 UTC),
        );
        let got = insert_batch(&conn, &[a.clone(), same_minute], now).unwrap();
        assert_eq!((got.stored, got.duplicate), (1, 1));
        let got = insert_batch(&conn, &[a, next_minute], now).unwrap();
        assert_eq!((got.stored, got.duplicate), (1, 1));
        let n: i64 = conn
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2);
        // Each batch that stored something has one provenance row; sequence numbers follow each other.
        let (p, s): (i64, String) = conn
            .query_row(
                "SELECT count(DISTINCT provenance_id), group_concat(origin_seq) FROM events",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(p, 2);
        assert_eq!(s, "1,2");
        // Still append-only outside a forget.
        assert!(conn.execute("DELETE FROM events", []).is_err());
    }

    #[test]
    fn list_filters_pages_and_refuses_bad_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::db::open(&dir.path().join("c.db")).unwrap();
        let now = datetime!(2026-11-28 12:00 UTC);
        let evs = [
            ev("git.commit", "a", "1", datetime!(2026-11-20 10:00 UTC)),
            ev("git.commit", "b", "2", datetime!(2026-11-21 10:00 UTC)),
            ev("session.started", "c", "3", datetime!(2026-11-22 10:00 UTC)),
            ev("session.ended", "d", "4", datetime!(2026-11-23 10:00 UTC)),
        ];
        insert_batch(&conn, &evs, now).unwrap();
        let f = |kind: Option<&str>, since: Option<&str>, limit| Filter {
            kind: kind.map(str::to_owned),
            since: since.map(str::to_owned),
            limit,
            ..Filter::default()
        };
        let contents = |p: &Page| {
            p.events
                .iter()
                .map(|e| e.content.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            contents(&list(&conn, &f(None, None, 10)).unwrap()),
            ["d", "c", "b", "a"]
        );
        assert_eq!(
            contents(&list(&conn, &f(Some("git.commit"), None, 10)).unwrap()),
            ["b", "a"]
        );
        assert_eq!(
            contents(&list(&conn, &f(Some("session.*"), None, 10)).unwrap()),
            ["d", "c"]
        );
        assert_eq!(
            contents(&list(&conn, &f(None, Some("2026-11-22T00:00:00.000Z"), 10)).unwrap()),
            ["d", "c"]
        );
        let first = list(&conn, &f(None, None, 3)).unwrap();
        assert_eq!(contents(&first), ["d", "c", "b"]);
        let mut rest = f(None, None, 3);
        rest.before = first.next.clone();
        assert_eq!(contents(&list(&conn, &rest).unwrap()), ["a"]);
        assert!(list(&conn, &f(None, None, 0)).is_err());
        assert!(list(&conn, &f(None, None, MAX_LIMIT + 1)).is_err());
        rest.before = Some("nonsense".into());
        assert!(list(&conn, &rest).is_err());
        assert_eq!(
            counts(&conn, None).unwrap(),
            vec![
                ("git.commit".to_owned(), 2),
                ("session.ended".to_owned(), 1),
                ("session.started".to_owned(), 1)
            ]
        );
    }

    #[test]
    fn sources_paths_and_cursors_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::db::open(&dir.path().join("c.db")).unwrap();
        let at = datetime!(2026-11-28 12:00 UTC);
        set_enabled(&conn, "git", true).unwrap();
        let c = RunCounts {
            read: 3,
            stored: 2,
            duplicate: 1,
            rejected: 0,
        };
        record_run(&conn, "git", at, c, None).unwrap();
        record_run(&conn, "git", at, c, Some("repo x: not a git repository")).unwrap();
        let s = &sources(&conn).unwrap()[0];
        assert!(s.enabled);
        assert_eq!((s.read, s.stored, s.duplicate), (6, 4, 2));
        assert!(
            s.last_error
                .as_deref()
                .unwrap()
                .ends_with("not a git repository")
        );
        assert!(add_path(&conn, "git", "/r", at).unwrap());
        assert!(!add_path(&conn, "git", "/r", at).unwrap());
        assert_eq!(paths(&conn, "git").unwrap(), vec!["/r".to_owned()]);
        assert!(remove_path(&conn, "git", "/r").unwrap());
        assert!(paths(&conn, "git").unwrap().is_empty());
        assert_eq!(cursor(&conn, "git", "/r").unwrap(), None);
        save_cursor(&conn, "git", "/r", r#"{"sha":"abc"}"#, at).unwrap();
        assert_eq!(
            cursor(&conn, "git", "/r").unwrap().as_deref(),
            Some(r#"{"sha":"abc"}"#)
        );
    }

    #[test]
    fn the_thread_index_serves_a_threads_events() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::db::open(&dir.path().join("c.db")).unwrap();
        let plan: String = conn
            .query_row(
                "EXPLAIN QUERY PLAN SELECT pk FROM events WHERE json_extract(attrs, '$.thread_id') = 'x'",
                [],
                |r| r.get(3),
            )
            .unwrap();
        assert!(plan.contains("events_thread"), "{plan}");
    }
}
