//! Ingest: validate each item of a batch on its own, then store every valid one in ONE transaction — fan-out to
//! `persona_observations`, thread upsert, message insert or new revision (+ FTS via triggers), capture-health
//! stats — and answer per item.
//!
//! **Architecture invariant:** the caller acknowledges a batch only after [`ingest_batch`] returned `Ok`, i.e.
//! after the commit. On any storage error the transaction is rolled back and nothing of the batch is stored or
//! acknowledged.
//!
//! Revision semantics: a turn position is `(thread_id, message_key)` when the site gives a key, else
//! `(thread_id, ordinal)`. A new content at a known position is stored as a new revision; revisions at a
//! position are numbered in `(captured_at, content_hash)` order and the last is current, so any replay or
//! reordering of the same batches yields the same corpus (only `pk`, `received_at`, `origin_seq` and
//! provenance rows depend on arrival order).

use std::collections::HashMap;

use personkit_shared::ids;
use personkit_shared::wire::{
    ApiError, BatchResponse, Invalid, ItemResult, ItemStatus, Observation, is_valid_surface,
    parse_observation, parse_observation_json, quote_safely, surface_of_json,
};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use time::{Duration, OffsetDateTime};

use crate::clock::{fmt_time, normalize_time};

/// Every revision at one turn position, oldest first. Served by index `messages_position_order` (migration 0003).
const REVISIONS_AT_POSITION: &str = "SELECT pk, revision, is_current FROM messages
    WHERE thread_id = ?1 AND position_key = ?2 ORDER BY captured_at, content_hash";

/// Who sent a batch: the origin its rows are attributed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The paired device's id (`devices.id`), or the relay's own id for local imports.
    pub device_id: String,
}

/// A storage failure during ingest. Nothing of the batch was stored.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("storage failure during ingest: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error(transparent)]
    Db(#[from] crate::db::DbError),
}

/// Days of per-item rejections kept in `ingest_errors`.
const ERROR_RETENTION_DAYS: i64 = 7;

/// One valid item, ready to store.
struct Ready {
    index: usize,
    obs: Observation,
    captured_at: String,
    occurred_at: Option<String>,
}

/// One item of a batch as a client sent it.
#[derive(Debug, Clone, Copy)]
pub enum RawItem<'a> {
    /// Parsed JSON (importers, tests).
    Value(&'a serde_json::Value),
    /// The item's JSON text, borrowed from the request body (the server: content is read once, straight into the
    /// observation).
    Json(&'a str),
}

impl RawItem<'_> {
    fn parse(self) -> Result<Observation, Invalid> {
        match self {
            RawItem::Value(v) => parse_observation(v),
            RawItem::Json(s) => parse_observation_json(s),
        }
    }

    /// The item's surface, when it names a valid one (a rejection still counts against that surface's health).
    fn surface(self) -> Option<String> {
        let s = match self {
            RawItem::Value(v) => v.get("source_surface")?.as_str()?.to_owned(),
            RawItem::Json(s) => surface_of_json(s)?,
        };
        is_valid_surface(&s).then_some(s)
    }
}

/// Validate and store one batch of raw items. Invalid items are rejected on their own; the valid ones are stored
/// in a single transaction. Works on any corpus connection (the server's writer, or a plain connection from
/// [`crate::db::open`]).
pub fn ingest_batch(
    conn: &mut Connection,
    origin: &Origin,
    items: &[serde_json::Value],
    now: OffsetDateTime,
) -> Result<BatchResponse, StorageError> {
    let raw: Vec<RawItem<'_>> = items.iter().map(RawItem::Value).collect();
    ingest_items(conn, origin, &raw, now)
}

/// [`ingest_batch`] over items of any [`RawItem`] form.
pub fn ingest_items(
    conn: &mut Connection,
    origin: &Origin,
    items: &[RawItem<'_>],
    now: OffsetDateTime,
) -> Result<BatchResponse, StorageError> {
    let mut results: Vec<Option<ItemResult>> = vec![None; items.len()];
    let mut ready = Vec::with_capacity(items.len());
    // (surface if valid, code, message) of each rejection, for capture health.
    let mut rejections: Vec<(Option<String>, ApiError)> = Vec::new();
    for (index, raw) in items.iter().enumerate() {
        match raw.parse().and_then(check_item) {
            Ok(r) => ready.push(Ready { index, ..r }),
            Err(err) => {
                let api = err.to_api_error();
                rejections.push((raw.surface(), api.clone()));
                results[index] = Some(rejected(index, api));
            }
        }
    }

    let now_s = fmt_time(now);
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut w = Writer::new(&tx, origin, &now_s)?;
    for r in &ready {
        let res = w.store(r)?;
        results[r.index] = Some(res);
    }
    w.record_rejections(&rejections, now)?;
    w.finish()?;
    tx.commit()?;

    let results: Vec<ItemResult> = results
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.unwrap_or_else(|| {
                rejected(
                    i,
                    ApiError::new("internal", "item was not processed", "resend the item"),
                )
            })
        })
        .collect();
    let count = |s: ItemStatus| results.iter().filter(|r| r.status == s).count();
    Ok(BatchResponse {
        stored: count(ItemStatus::Stored),
        duplicate: count(ItemStatus::Duplicate),
        rejected: count(ItemStatus::Rejected),
        results,
    })
}

/// Store already-built observations (importers, benchmarks): serializes them and runs [`ingest_batch`].
pub fn ingest_observations(
    conn: &mut Connection,
    origin: &Origin,
    observations: &[Observation],
    now: OffsetDateTime,
) -> Result<BatchResponse, StorageError> {
    let items: Vec<serde_json::Value> = observations
        .iter()
        .map(|o| serde_json::to_value(o).unwrap_or(serde_json::Value::Null))
        .collect();
    ingest_batch(conn, origin, &items, now)
}

fn rejected(index: usize, error: ApiError) -> ItemResult {
    ItemResult {
        index,
        status: ItemStatus::Rejected,
        message_id: None,
        thread_id: None,
        error: Some(error),
    }
}

fn check_item(obs: Observation) -> Result<Ready, Invalid> {
    let captured_at = normalize_time(&obs.turn.captured_at).ok_or(Invalid::BadTimestamp {
        field: "turn.captured_at",
    })?;
    let occurred_at = match &obs.turn.occurred_at {
        None => None,
        Some(t) => Some(normalize_time(t).ok_or(Invalid::BadTimestamp {
            field: "turn.occurred_at",
        })?),
    };
    Ok(Ready {
        index: 0,
        obs,
        captured_at,
        occurred_at,
    })
}

/// The position key of a turn: `k:<message_key>`, else `o:<ordinal>`, else none.
pub fn position_key(message_key: Option<&str>, ordinal: Option<u32>) -> Option<String> {
    match (message_key, ordinal) {
        (Some(k), _) => Some(format!("k:{k}")),
        (None, Some(o)) => Some(format!("o:{o}")),
        (None, None) => None,
    }
}

/// What a batch says about one thread, applied once at the end of the batch: first and last seen are the min and
/// max of its items' capture times; title and url follow the latest item that has one (by capture time, then
/// batch order), and replace the stored one only if that item is at least as new as the thread's last capture.
#[derive(Debug, Default)]
struct ThreadSeen {
    first: String,
    last: String,
    title: Option<(String, String)>,
    url: Option<(String, String)>,
    /// The thread existed before this batch, or the batch has more than the item that created it.
    needs_update: bool,
}

impl ThreadSeen {
    fn add(&mut self, r: &Ready) {
        let at = &r.captured_at;
        if self.first.is_empty() || *at < self.first {
            self.first.clone_from(at);
        }
        if *at > self.last {
            self.last.clone_from(at);
        }
        let newer = |cur: &Option<(String, String)>| cur.as_ref().is_none_or(|(t, _)| at >= t);
        if let Some(t) = &r.obs.title
            && newer(&self.title)
        {
            self.title = Some((at.clone(), t.clone()));
        }
        if let Some(u) = &r.obs.url
            && newer(&self.url)
        {
            self.url = Some((at.clone(), u.clone()));
        }
    }
}

/// Per-transaction state: the origin's sequence counter, provenance rows and threads seen in this batch.
struct Writer<'a> {
    tx: &'a Transaction<'a>,
    origin: &'a Origin,
    now: &'a str,
    last_seq: i64,
    start_seq: i64,
    provenance: HashMap<(String, String), i64>,
    threads: HashMap<String, ThreadSeen>,
    /// Per surface: items accepted, and the newest capture time among them.
    accepted: HashMap<String, (u64, String)>,
}

impl<'a> Writer<'a> {
    fn new(
        tx: &'a Transaction<'a>,
        origin: &'a Origin,
        now: &'a str,
    ) -> Result<Self, StorageError> {
        let last_seq: i64 = tx
            .query_row(
                "SELECT last_seq FROM origin_seqs WHERE origin = ?1",
                [&origin.device_id],
                |r| r.get(0),
            )
            .optional()?
            .unwrap_or(0);
        Ok(Writer {
            tx,
            origin,
            now,
            last_seq,
            start_seq: last_seq,
            provenance: HashMap::new(),
            threads: HashMap::new(),
            accepted: HashMap::new(),
        })
    }

    fn next_seq(&mut self) -> i64 {
        self.last_seq += 1;
        self.last_seq
    }

    fn provenance_id(&mut self, obs: &Observation) -> Result<i64, StorageError> {
        let key = (obs.client.device_id.clone(), obs.client.app_version.clone());
        if let Some(id) = self.provenance.get(&key) {
            return Ok(*id);
        }
        self.tx
            .prepare_cached(
                "INSERT INTO provenance(captured_at, origin_device, client_device_id, app_version)
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![self.now, self.origin.device_id, key.0, key.1])?;
        let id = self.tx.last_insert_rowid();
        self.provenance.insert(key, id);
        Ok(id)
    }

    /// Creates the thread at its first item (messages reference it); later items only update what this batch
    /// knows about it, written once by [`Writer::update_threads`].
    fn see_thread(&mut self, r: &Ready) -> Result<(), StorageError> {
        let o = &r.obs;
        if let Some(seen) = self.threads.get_mut(&o.thread_id) {
            seen.needs_update = true;
            seen.add(r);
            return Ok(());
        }
        let existed = self
            .tx
            .prepare_cached("SELECT 1 FROM threads WHERE id = ?1")?
            .exists([&o.thread_id])?;
        if !existed {
            let seq = self.next_seq();
            self.tx
                .prepare_cached(
                    "INSERT INTO threads(id, surface, conversation_id, title, url, first_seen_at, last_seen_at,
                        origin_device, origin_seq)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8)",
                )?
                .execute(params![
                    o.thread_id,
                    o.source_surface,
                    o.conversation_id,
                    o.title,
                    o.url,
                    r.captured_at,
                    self.origin.device_id,
                    seq
                ])?;
        }
        let mut seen = ThreadSeen {
            needs_update: existed,
            ..ThreadSeen::default()
        };
        seen.add(r);
        self.threads.insert(o.thread_id.clone(), seen);
        Ok(())
    }

    /// Applies what the batch saw of each thread, one statement per thread. SQLite evaluates every SET
    /// expression on the row as it was, so the title and url tests compare with the last capture before this
    /// batch, as an item-by-item update would.
    fn update_threads(&mut self) -> Result<(), StorageError> {
        let mut update = self.tx.prepare_cached(
            "UPDATE threads SET
                title = CASE WHEN ?2 IS NOT NULL AND (title IS NULL OR ?3 >= last_seen_at) THEN ?2 ELSE title END,
                url = CASE WHEN ?4 IS NOT NULL AND (url IS NULL OR ?5 >= last_seen_at) THEN ?4 ELSE url END,
                first_seen_at = min(first_seen_at, ?6),
                last_seen_at = max(last_seen_at, ?7)
             WHERE id = ?1",
        )?;
        for (id, seen) in self.threads.iter().filter(|(_, s)| s.needs_update) {
            let (title_at, title) = seen.title.clone().unzip();
            let (url_at, url) = seen.url.clone().unzip();
            update.execute(params![
                id, title, title_at, url, url_at, seen.first, seen.last
            ])?;
        }
        Ok(())
    }

    fn store(&mut self, r: &Ready) -> Result<ItemResult, StorageError> {
        let o = &r.obs;
        let thread_uuid = uuid::Uuid::parse_str(&o.thread_id).unwrap_or_default();
        let message_id = ids::message_id(&thread_uuid, &o.turn.content_hash)
            .hyphenated()
            .to_string();
        // A forgotten turn stays forgotten: answered as a duplicate (the sender drops it), nothing stored.
        if crate::forget::is_forgotten(self.tx, &message_id)? {
            return Ok(ItemResult {
                index: r.index,
                status: ItemStatus::Duplicate,
                message_id: Some(message_id),
                thread_id: Some(o.thread_id.clone()),
                error: None,
            });
        }
        self.see_thread(r)?;
        let seen = self
            .accepted
            .entry(o.source_surface.clone())
            .or_insert((0, String::new()));
        seen.0 += 1;
        if r.captured_at > seen.1 {
            seen.1.clone_from(&r.captured_at);
        }
        let exists = self
            .tx
            .prepare_cached("SELECT 1 FROM messages WHERE thread_id = ?1 AND content_hash = ?2")?
            .exists(params![o.thread_id, o.turn.content_hash])?;
        let done = |status| ItemResult {
            index: r.index,
            status,
            message_id: Some(message_id.clone()),
            thread_id: Some(o.thread_id.clone()),
            error: None,
        };
        if exists {
            return Ok(done(ItemStatus::Duplicate));
        }

        let pos = position_key(o.turn.message_key.as_deref(), o.turn.ordinal);
        let provenance_id = self.provenance_id(o)?;
        let seq = self.next_seq();
        self.tx
            .prepare_cached(
                "INSERT INTO messages(id, thread_id, role, content, content_hash, message_key, ordinal, position_key,
                    revision, is_current, occurred_at, captured_at, received_at, provenance_id, origin_device,
                    origin_seq)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1, 1, ?9, ?10, ?11, ?12, ?13, ?14)",
            )?
            .execute(params![
                message_id,
                o.thread_id,
                o.turn.role.as_str(),
                o.turn.content,
                o.turn.content_hash,
                o.turn.message_key,
                o.turn.ordinal,
                pos,
                r.occurred_at,
                r.captured_at,
                self.now,
                provenance_id,
                self.origin.device_id,
                seq
            ])?;
        if let Some(pos) = &pos {
            self.renumber_revisions(&o.thread_id, pos)?;
        }

        let obs_seq = self.next_seq();
        let attrs = format!(
            r#"{{"chars":{},"has_code":{}}}"#,
            o.turn.content.chars().count(),
            o.turn.content.contains("```")
        );
        self.tx
            .prepare_cached(
                "INSERT OR IGNORE INTO persona_observations(id, kind, source_surface, thread_id, message_id, role,
                    observed_at, attrs, origin_device, origin_seq)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?
            .execute(params![
                message_id,
                o.kind,
                o.source_surface,
                o.thread_id,
                message_id,
                o.turn.role.as_str(),
                r.captured_at,
                attrs,
                self.origin.device_id,
                obs_seq
            ])?;
        Ok(done(ItemStatus::Stored))
    }

    /// Number the revisions at one position in (captured_at, content_hash) order; the last is current.
    fn renumber_revisions(&mut self, thread_id: &str, pos: &str) -> Result<(), StorageError> {
        let rows: Vec<(i64, i64, i64)> = self
            .tx
            .prepare_cached(REVISIONS_AT_POSITION)?
            .query_map(params![thread_id, pos], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<Result<_, _>>()?;
        let n = rows.len();
        if n <= 1 {
            return Ok(());
        }
        let mut update = self
            .tx
            .prepare_cached("UPDATE messages SET revision = ?2, is_current = ?3 WHERE pk = ?1")?;
        for (i, (pk, revision, is_current)) in rows.into_iter().enumerate() {
            let want_rev = i as i64 + 1;
            let want_cur = i64::from(i + 1 == n);
            if revision != want_rev || is_current != want_cur {
                update.execute(params![pk, want_rev, want_cur])?;
            }
        }
        Ok(())
    }

    fn record_rejections(
        &mut self,
        rejections: &[(Option<String>, ApiError)],
        now: OffsetDateTime,
    ) -> Result<(), StorageError> {
        if rejections.is_empty() {
            return Ok(());
        }
        for (surface, err) in rejections {
            // Rejection messages quote what the client sent: keep them short and printable in storage too.
            let err = ApiError::new(
                &quote_safely(&err.code, 64),
                quote_safely(&err.message, 300),
                err.hint.clone(),
            );
            self.tx
                .prepare_cached(
                    "INSERT INTO ingest_errors(at, surface, device_id, code, message) VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![self.now, surface, self.origin.device_id, err.code, err.message])?;
            if let Some(surface) = surface {
                self.tx
                    .prepare_cached(
                        "INSERT INTO surface_stats(surface, last_error_code, last_error_message, last_error_at,
                            rejected_total)
                         VALUES (?1, ?2, ?3, ?4, 1)
                         ON CONFLICT(surface) DO UPDATE SET last_error_code = ?2, last_error_message = ?3,
                            last_error_at = ?4, rejected_total = rejected_total + 1",
                    )?
                    .execute(params![surface, err.code, err.message, self.now])?;
            }
        }
        let cutoff = fmt_time(now - Duration::days(ERROR_RETENTION_DAYS));
        self.tx
            .prepare_cached("DELETE FROM ingest_errors WHERE at < ?1")?
            .execute([cutoff])?;
        Ok(())
    }

    fn finish(mut self) -> Result<(), StorageError> {
        self.update_threads()?;
        for (surface, (n, newest)) in &self.accepted {
            crate::health::clear_reports_before(self.tx, &self.origin.device_id, surface, newest)
                .map_err(StorageError::from)?;
            self.tx
                .prepare_cached(
                    "INSERT INTO surface_stats(surface, last_accepted_at, accepted_total) VALUES (?1, ?2, ?3)
                     ON CONFLICT(surface) DO UPDATE SET last_accepted_at = ?2,
                        accepted_total = accepted_total + ?3",
                )?
                .execute(params![surface, self.now, *n as i64])?;
        }
        self.tx
            .prepare_cached("UPDATE devices SET last_seen_at = ?2 WHERE id = ?1")?
            .execute(params![self.origin.device_id, self.now])?;
        if self.last_seq != self.start_seq {
            self.tx
                .prepare_cached(
                    "INSERT INTO origin_seqs(origin, last_seq) VALUES (?1, ?2)
                     ON CONFLICT(origin) DO UPDATE SET last_seq = ?2",
                )?
                .execute(params![self.origin.device_id, self.last_seq])?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use personkit_shared::wire::{ClientInfo, Role, build_observation};
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-22 10:00:00 UTC);

    fn corpus() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::db::open(&dir.path().join("c.db")).unwrap();
        (dir, conn)
    }

    /// Regression (ingest benchmark finding): the revision query must use the position index, not scan the
    /// whole thread by `captured_at`, or ingest is quadratic in thread length.
    #[test]
    fn revision_query_uses_the_position_index() {
        let (_dir, conn) = corpus();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {REVISIONS_AT_POSITION}"))
            .unwrap()
            .query_map(params!["t", "p"], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let plan = plan.join(" | ");
        assert!(plan.contains("messages_position_order"), "plan: {plan}");
        assert!(!plan.contains("TEMP B-TREE"), "plan sorts: {plan}");
    }

    fn origin() -> Origin {
        Origin {
            device_id: "dev-a".into(),
        }
    }

    fn obs(conv: &str, content: &str, ordinal: Option<u32>, at: &str) -> Observation {
        let client = ClientInfo {
            app_version: "0.1.0".into(),
            device_id: "ext".into(),
        };
        build_observation(
            "import:test",
            conv,
            Role::User,
            content,
            ordinal,
            None,
            at,
            client,
        )
    }

    /// The example in docs/wire-format.md is valid and gets the message id the document states.
    #[test]
    fn the_documented_example_is_valid_and_stores_with_the_documented_id() {
        let doc = include_str!("../../../docs/wire-format.md");
        let start = doc
            .find("```json example-observation")
            .expect("example block")
            + "```json example-observation".len();
        let end = start + doc[start..].find("```").expect("end of block");
        let item: serde_json::Value = serde_json::from_str(&doc[start..end]).unwrap();
        let (_d, mut conn) = corpus();
        let r = ingest_batch(&mut conn, &origin(), &[item], NOW).unwrap();
        assert_eq!(r.stored, 1, "{r:?}");
        let id = r.results[0].message_id.clone().unwrap();
        assert!(
            doc.contains(&format!("message id `{id}`")),
            "doc states another id than {id}"
        );
    }

    #[test]
    fn rows_carry_origin_and_increasing_sequence_numbers() {
        let (_d, mut conn) = corpus();
        let batch1 = [
            obs("c1", "one", Some(0), "2026-11-22T09:00:00Z"),
            obs("c1", "two", Some(1), "2026-11-22T09:01:00Z"),
        ];
        ingest_observations(&mut conn, &origin(), &batch1, NOW).unwrap();
        ingest_observations(&mut conn, &origin(), &batch1, NOW).unwrap();
        let batch2 = [obs("c2", "three", Some(0), "2026-11-22T09:02:00Z")];
        ingest_observations(&mut conn, &origin(), &batch2, NOW).unwrap();
        let mut seqs: Vec<i64> = Vec::new();
        for table in ["threads", "messages", "persona_observations"] {
            let mut s = conn
                .prepare(&format!(
                    "SELECT origin_seq FROM {table} WHERE origin_device = 'dev-a'"
                ))
                .unwrap();
            seqs.extend(
                s.query_map([], |r| r.get::<_, i64>(0))
                    .unwrap()
                    .map(Result::unwrap),
            );
        }
        seqs.sort_unstable();
        assert_eq!(
            seqs,
            (1..=8).collect::<Vec<_>>(),
            "2 threads + 3 messages + 3 observations, no reuse"
        );
        let last: i64 = conn
            .query_row(
                "SELECT last_seq FROM origin_seqs WHERE origin = 'dev-a'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(last, 8);
    }

    #[test]
    fn thread_times_are_min_and_max_of_captures_in_any_order() {
        let (_d, mut conn) = corpus();
        let late = obs("c", "late", Some(1), "2026-11-22T09:30:00Z");
        let early = obs("c", "early", Some(0), "2026-11-22T09:00:00+01:00");
        ingest_observations(&mut conn, &origin(), &[late], NOW).unwrap();
        ingest_observations(&mut conn, &origin(), &[early], NOW).unwrap();
        let (first, last): (String, String) = conn
            .query_row("SELECT first_seen_at, last_seen_at FROM threads", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!(first, "2026-11-22T08:00:00.000Z");
        assert_eq!(last, "2026-11-22T09:30:00.000Z");
    }

    #[test]
    fn three_revisions_number_by_capture_time() {
        let (_d, mut conn) = corpus();
        let v = |c: &str, at: &str| obs("c", c, Some(3), at);
        for o in [
            v("b", "2026-11-22T09:02:00Z"),
            v("c", "2026-11-22T09:03:00Z"),
            v("a", "2026-11-22T09:01:00Z"),
        ] {
            let r = ingest_observations(&mut conn, &origin(), &[o], NOW).unwrap();
            assert_eq!(r.stored, 1);
        }
        let mut s = conn
            .prepare("SELECT content, revision, is_current FROM messages ORDER BY revision")
            .unwrap();
        let rows: Vec<(String, i64, i64)> = s
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            rows,
            vec![("a".into(), 1, 0), ("b".into(), 2, 0), ("c".into(), 3, 1)]
        );
        drop(s);
        // Turns without a position never replace each other.
        ingest_observations(
            &mut conn,
            &origin(),
            &[obs("c", "x", None, "2026-11-22T09:05:00Z")],
            NOW,
        )
        .unwrap();
        ingest_observations(
            &mut conn,
            &origin(),
            &[obs("c", "y", None, "2026-11-22T09:06:00Z")],
            NOW,
        )
        .unwrap();
        let current: i64 = conn
            .query_row(
                "SELECT count(*) FROM messages WHERE position_key IS NULL AND is_current = 1",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(current, 2);
    }

    #[test]
    fn position_keys() {
        assert_eq!(position_key(Some("m1"), Some(3)).as_deref(), Some("k:m1"));
        assert_eq!(position_key(None, Some(3)).as_deref(), Some("o:3"));
        assert_eq!(position_key(None, None), None);
    }
}
