//! Ingest: validate each item of a batch on its own, then store every valid one in ONE transaction — thread upsert,
//! message insert or new revision (a new message is queued for the full-text index and indexed by one statement before
//! the commit, [`crate::pending`]; changed content follows by trigger; the signal layer `persona_observations` is a
//! view of the message rows, migration 0010), capture-health stats — and answer per item.
//!
//! **Architecture invariant:** the caller acknowledges a batch only after [`ingest_batch`] returned `Ok`, i.e.
//! after the commit. On any storage error the transaction is rolled back and nothing of the batch is stored or
//! acknowledged.
//!
//! Identity and revisions: `personkit_shared::identity::decide` is the rule (docs/wire-format.md, "Turn
//! identity"): a turn is recognised by its text, a folded rendering, the site's id or — across paths — its words;
//! a higher-ranked rendering replaces a stored one in place (no revision), a lower-ranked one is folded. New
//! content at a known position is stored as a new revision; revisions at a position are numbered in
//! `(captured_at, content_hash)` order and the last is current, so any replay or reordering of the same batches
//! on one path yields the same corpus (only `pk`, `received_at`, `origin_seq` and provenance rows depend on
//! arrival order).

use std::collections::HashMap;

use personkit_shared::identity::{self, Decision, Incoming, Lookup, Path, Stored};
use personkit_shared::ids;
use personkit_shared::wire::Role;
use personkit_shared::wire::{
    ApiError, BatchResponse, Invalid, ItemResult, ItemStatus, Observation, is_valid_surface,
    parse_observation, parse_observation_json, quote_safely, surface_of_json,
};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use time::{Duration, OffsetDateTime};

use crate::clock::{fmt_time, normalize_time};

/// The revisions at one position, oldest first: by capture time; at the same capture time (one read of a tree)
/// the turn on the branch the site shows (it alone carries an ordinal) is the newer one. Found by the position
/// index (migration 0017), named so that the planner never walks the whole thread by capture time to skip the sort
/// of a position's few rows: that made ingest quadratic in thread length.
const REVISIONS_AT_POSITION: &str = "SELECT pk, revision, is_current, message_key
    FROM messages INDEXED BY messages_position
    WHERE thread_id = ?1 AND position_key = ?2 ORDER BY captured_at, ordinal IS NOT NULL, content_hash";

/// Whether a position holds another message than `?3` (read from the position index alone).
const POSITION_SHARED: &str = "SELECT 1 FROM messages INDEXED BY messages_position
    WHERE thread_id = ?1 AND position_key = ?2 AND pk != ?3 LIMIT 1";

/// The capture paths a thread holds, one bit per rank (migration 0017).
const THREAD_RANKS: &str = "SELECT source_ranks FROM threads WHERE id = ?1";

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
    ingest_items_then(conn, origin, items, now, true)
}

/// What [`ingest_observations`] would answer, with nothing kept: the same transaction, rolled back (an import's
/// `--dry-run`).
pub fn preview_observations(
    conn: &mut Connection,
    origin: &Origin,
    observations: &[Observation],
    now: OffsetDateTime,
) -> Result<BatchResponse, StorageError> {
    let items: Vec<serde_json::Value> = observations
        .iter()
        .map(|o| serde_json::to_value(o).unwrap_or(serde_json::Value::Null))
        .collect();
    let raw: Vec<RawItem<'_>> = items.iter().map(RawItem::Value).collect();
    ingest_items_then(conn, origin, &raw, now, false)
}

fn ingest_items_then(
    conn: &mut Connection,
    origin: &Origin,
    items: &[RawItem<'_>],
    now: OffsetDateTime,
    commit: bool,
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
    if commit {
        crate::pending::commit(tx)?;
    } else {
        tx.rollback()?;
    }

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
    /// Per thread: the source ranks its messages have (bit per rank), read once per batch when first needed.
    ranks: HashMap<String, u8>,
    /// Whether the corpus holds any tombstone: when it holds none (read once, in this transaction), no turn of the
    /// batch can be a forgotten one and the two look-ups per turn are skipped.
    any_forgotten: bool,
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
        let any_forgotten = tx
            .prepare_cached("SELECT 1 FROM forgotten_messages LIMIT 1")?
            .exists([])?;
        Ok(Writer {
            tx,
            origin,
            now,
            last_seq,
            start_seq: last_seq,
            provenance: HashMap::new(),
            threads: HashMap::new(),
            accepted: HashMap::new(),
            ranks: HashMap::new(),
            any_forgotten,
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
        if self.any_forgotten
            && crate::forget::turn_is_forgotten(
                self.tx,
                &crate::forget::Arriving {
                    thread_id: &o.thread_id,
                    message_id: &message_id,
                    key: o.turn.message_key.as_deref(),
                    role: o.turn.role,
                    content: &o.turn.content,
                },
            )?
        {
            return Ok(ItemResult {
                index: r.index,
                status: ItemStatus::Duplicate,
                message_id: Some(message_id),
                thread_id: Some(o.thread_id.clone()),
                error: None,
            });
        }
        self.see_thread(r)?;
        let inc = Incoming::of(o);
        // Capture health speaks of live capture: an imported export says nothing about whether the site is being
        // captured now.
        if inc.path != identity::Path::Export {
            let seen = self
                .accepted
                .entry(o.source_surface.clone())
                .or_insert((0, String::new()));
            seen.0 += 1;
            if r.captured_at > seen.1 {
                seen.1.clone_from(&r.captured_at);
            }
        }
        let decision = identity::decide(
            &inc,
            &mut SqlLookup {
                tx: self.tx,
                thread_id: &o.thread_id,
                ranks: &mut self.ranks,
            },
        )?;
        let done = |status, message_id: String| ItemResult {
            index: r.index,
            status,
            message_id: Some(message_id),
            thread_id: Some(o.thread_id.clone()),
            error: None,
        };
        let pos = match decision {
            Decision::Duplicate { pk, promote } => {
                if promote {
                    self.take_rendering(pk, r, &inc, false)?;
                }
                return Ok(done(ItemStatus::Duplicate, self.id_of(pk)?));
            }
            Decision::Fold { pk } => {
                self.fold(pk, r, inc.path)?;
                return Ok(done(ItemStatus::Duplicate, self.id_of(pk)?));
            }
            Decision::Upgrade { pk } => {
                self.take_rendering(pk, r, &inc, true)?;
                return Ok(done(ItemStatus::Stored, self.id_of(pk)?));
            }
            Decision::Insert {
                position_key,
                repeat_hash,
            } => (position_key, repeat_hash),
        };
        let (pos, hash) = match pos {
            (pos, Some(h)) => (pos, h),
            (pos, None) => (pos, o.turn.content_hash.clone()),
        };
        let message_id = if hash == o.turn.content_hash {
            message_id
        } else {
            ids::message_id(&thread_uuid, &hash)
                .hyphenated()
                .to_string()
        };
        let done = |status| done(status, message_id.clone());
        mark_rank(&mut self.ranks, &o.thread_id, inc.path.rank());
        let provenance_id = self.provenance_id(o)?;
        let seq = self.next_seq();
        self.tx
            .prepare_cached(
                "INSERT INTO messages(id, thread_id, role, content, content_hash, message_key, ordinal, position_key,
                    revision, is_current, occurred_at, captured_at, received_at, provenance_id, origin_device,
                    origin_seq, source_path, source_rank, parent_key)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1, 1, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
            )?
            .execute(params![
                message_id,
                o.thread_id,
                o.turn.role.as_str(),
                o.turn.content,
                hash,
                o.turn.message_key,
                o.turn.ordinal,
                pos,
                r.occurred_at,
                r.captured_at,
                self.now,
                provenance_id,
                self.origin.device_id,
                seq,
                inc.path.as_str(),
                inc.path.rank(),
                o.turn.parent_key
            ])?;
        let pk = self.tx.last_insert_rowid();
        crate::pending::queue(self.tx, pk)?;
        if let Some(pos) = &pos
            && self.needs_numbering(&o.thread_id, pos, pk)?
        {
            self.renumber_revisions(&o.thread_id, pos)?;
        }

        Ok(done(ItemStatus::Stored))
    }

    /// Whether a message just inserted at `pos` (as revision 1, current) needs its position numbered: when another
    /// content shares the position, or when the position hangs under a parent turn that may be off the shown branch
    /// (`b:`). A new turn alone at a position of its own is already numbered right, and finding that out reads only
    /// the position index, where numbering would read every row at the position and sort them.
    fn needs_numbering(&self, thread_id: &str, pos: &str, pk: i64) -> Result<bool, StorageError> {
        if pos.starts_with("b:") {
            return Ok(true);
        }
        Ok(self
            .tx
            .prepare_cached(POSITION_SHARED)?
            .exists(params![thread_id, pos, pk])?)
    }

    fn id_of(&self, pk: i64) -> Result<String, StorageError> {
        Ok(self
            .tx
            .prepare_cached("SELECT id FROM messages WHERE pk = ?1")?
            .query_row([pk], |r| r.get(0))?)
    }

    /// Records a lower-ranked rendering of message `pk` (its hash only): resending it is a duplicate.
    fn fold(&mut self, pk: i64, r: &Ready, path: Path) -> Result<(), StorageError> {
        self.tx
            .prepare_cached(
                "INSERT OR IGNORE INTO message_renderings(thread_id, content_hash, message_pk, source_path, folded_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                r.obs.thread_id,
                r.obs.turn.content_hash,
                pk,
                path.as_str(),
                self.now
            ])?;
        Ok(())
    }

    /// Message `pk` takes the incoming turn's path, rank, site id, parent, ordinal and position — and with
    /// `content`, its text (the old text's hash is folded, FTS follows by trigger, the vector is recomputed). No
    /// revision: it is the same turn, better read. Its receive time becomes now, so the change feed reports it.
    fn take_rendering(
        &mut self,
        pk: i64,
        r: &Ready,
        inc: &Incoming<'_>,
        content: bool,
    ) -> Result<(), StorageError> {
        let (old_hash, old_path, old_pos): (String, String, Option<String>) = self
            .tx
            .prepare_cached(
                "SELECT content_hash, source_path, position_key FROM messages WHERE pk = ?1",
            )?
            .query_row([pk], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
        let pos = inc.position_key().or_else(|| old_pos.clone());
        let o = &r.obs;
        self.tx
            .prepare_cached(
                "UPDATE messages SET source_path = ?2, source_rank = ?3,
                    message_key = coalesce(?4, message_key), parent_key = coalesce(?5, parent_key),
                    ordinal = coalesce(?6, ordinal), position_key = ?7,
                    occurred_at = coalesce(occurred_at, ?8), received_at = ?9
                 WHERE pk = ?1",
            )?
            .execute(params![
                pk,
                inc.path.as_str(),
                inc.path.rank(),
                o.turn.message_key,
                o.turn.parent_key,
                o.turn.ordinal,
                pos,
                r.occurred_at,
                self.now
            ])?;
        if content {
            self.tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO message_renderings(thread_id, content_hash, message_pk, source_path,
                        folded_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![o.thread_id, old_hash, pk, old_path, self.now])?;
            self.tx
                .prepare_cached(
                    "UPDATE messages SET content = ?2, content_hash = ?3 WHERE pk = ?1",
                )?
                .execute(params![pk, o.turn.content, o.turn.content_hash])?;
            // The embedding job finds the row again and recomputes its vector.
            self.tx
                .prepare_cached("DELETE FROM search_vec_state WHERE kind = 'message' AND pk = ?1")?
                .execute([pk])?;
        }
        mark_rank(&mut self.ranks, &o.thread_id, inc.path.rank());
        if old_pos != pos
            && let Some(p) = &old_pos
        {
            self.renumber_revisions(&o.thread_id, p)?;
        }
        if let Some(p) = &pos {
            self.renumber_revisions(&o.thread_id, p)?;
        }
        Ok(())
    }

    /// Number the revisions at one position in [`REVISIONS_AT_POSITION`] order; the last is current — unless the
    /// position hangs under a turn that is no longer on the shown branch (`b:<parent key>`), where none is. A turn
    /// that stops or starts being current takes the turns under it along ([`Self::follow_branch`]): after an edit
    /// or a regeneration, the answers to the old prompt are revisions of the past, not current turns beside the
    /// new ones.
    fn renumber_revisions(&mut self, thread_id: &str, pos: &str) -> Result<(), StorageError> {
        Ok(renumber_revisions(self.tx, thread_id, pos)?)
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

/// Number the revisions at one position in [`REVISIONS_AT_POSITION`] order; the last is current — unless the
/// position hangs under a turn that is no longer on the shown branch (`b:<parent key>`), where none is. A turn that
/// stops or starts being current takes the turns under it along ([`follow_branch`]): after an edit or a
/// regeneration, the answers to the old prompt are revisions of the past, not current turns beside the new ones.
/// Ingest and sync both call it, so a position reads the same whichever way its contents arrived.
pub(crate) fn renumber_revisions(
    conn: &Connection,
    thread_id: &str,
    pos: &str,
) -> Result<(), rusqlite::Error> {
    settle_and_follow(conn, thread_id, pos, false)
}

/// [`renumber_revisions`], also when one content is left (after a forget): it becomes revision 1.
pub(crate) fn number_revisions(
    conn: &Connection,
    thread_id: &str,
    pos: &str,
) -> Result<(), rusqlite::Error> {
    settle_and_follow(conn, thread_id, pos, true)
}

fn settle_and_follow(
    conn: &Connection,
    thread_id: &str,
    pos: &str,
    renumber_one: bool,
) -> Result<(), rusqlite::Error> {
    let shown = match pos.strip_prefix("b:") {
        Some(parent) => key_shown(conn, thread_id, parent)?,
        None => true,
    };
    let changed = settle_position(conn, thread_id, pos, shown, renumber_one)?;
    follow_branch(conn, thread_id, changed)
}

/// Whether the turn with site id `key` is current, or absent (a parent never seen does not hide its children).
fn key_shown(conn: &Connection, thread_id: &str, key: &str) -> Result<bool, rusqlite::Error> {
    let (rows, current): (i64, i64) = conn
        .prepare_cached(
            "SELECT count(*), coalesce(sum(is_current), 0) FROM messages WHERE thread_id = ?1 AND message_key = ?2",
        )?
        .query_row(params![thread_id, key], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows == 0 || current > 0)
}

/// Numbers the revisions at `pos` (a lone content keeps its number unless `renumber_one`); with `shown`, the newest
/// is current, else none is. Returns the keyed rows whose current state changed, with their new state.
fn settle_position(
    conn: &Connection,
    thread_id: &str,
    pos: &str,
    shown: bool,
    renumber_one: bool,
) -> Result<Vec<(String, bool)>, rusqlite::Error> {
    let rows: Vec<(i64, i64, i64, Option<String>)> = conn
        .prepare_cached(REVISIONS_AT_POSITION)?
        .query_map(params![thread_id, pos], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<Result<_, _>>()?;
    let n = rows.len();
    let mut changed = Vec::new();
    let mut update =
        conn.prepare_cached("UPDATE messages SET revision = ?2, is_current = ?3 WHERE pk = ?1")?;
    for (i, (pk, revision, is_current, key)) in rows.into_iter().enumerate() {
        let want_rev = if n == 1 && !renumber_one {
            revision
        } else {
            i as i64 + 1
        };
        let want_cur = i64::from(shown && i + 1 == n);
        if revision != want_rev || is_current != want_cur {
            update.execute(params![pk, want_rev, want_cur])?;
            if is_current != want_cur
                && let Some(k) = key
            {
                changed.push((k, want_cur == 1));
            }
        }
    }
    Ok(changed)
}

/// The turns under each changed turn follow it, down the tree: under a turn that left the shown branch none is
/// current; under one that joined it, the newest of each position is.
fn follow_branch(
    conn: &Connection,
    thread_id: &str,
    mut todo: Vec<(String, bool)>,
) -> Result<(), rusqlite::Error> {
    // A tree of site ids cannot loop, but stored keys come from clients: bound the walk.
    let mut budget = 100_000usize;
    while let Some((key, shown)) = todo.pop() {
        budget = budget.saturating_sub(1);
        if budget == 0 {
            break;
        }
        todo.extend(settle_position(
            conn,
            thread_id,
            &format!("b:{key}"),
            shown,
            false,
        )?);
    }
    Ok(())
}

/// Records that thread `thread_id` has a message of source rank `rank`, if its ranks were read in this batch.
fn mark_rank(ranks: &mut HashMap<String, u8>, thread_id: &str, rank: u8) {
    if let Some(bits) = ranks.get_mut(thread_id) {
        *bits |= 1 << rank;
    }
}

/// The identity rule's lookups, within one thread, in the batch's transaction.
struct SqlLookup<'a, 't> {
    tx: &'a Transaction<'t>,
    thread_id: &'a str,
    ranks: &'a mut HashMap<String, u8>,
}

/// `SELECT` of the columns [`stored_row`] reads, then `$rest`: a macro so that every look-up's SQL is one constant
/// string (a statement is found in the connection's cache by its text, once or more per turn).
macro_rules! select_stored {
    ($rest:literal) => {
        concat!(
            "SELECT pk, role, message_key, source_rank, position_key",
            $rest
        )
    };
}

const BY_HASH: &str = select_stored!(" FROM messages WHERE thread_id = ?1 AND content_hash = ?2");

const BY_KEY: &str = select_stored!(
    " FROM messages WHERE thread_id = ?1 AND message_key = ?2 ORDER BY is_current DESC, revision DESC LIMIT 1"
);

/// A thread's current turns of one role read from a source (rank above 0), for comparing a DOM turn's words with
/// them. Served by the partial index `messages_thread_source`.
const SOURCE_FORMS: &str = select_stored!(
    ", content FROM messages WHERE thread_id = ?1 AND role = ?2 AND source_rank > 0 AND is_current = 1 ORDER BY pk"
);

/// A thread's current turns of one role read by a path of another rank than `?3`.
const OTHER_RANK_FORMS: &str = select_stored!(
    ", content FROM messages WHERE thread_id = ?1 AND role = ?2 AND source_rank != ?3 AND is_current = 1 ORDER BY pk"
);

fn stored_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Stored> {
    let role: String = r.get(1)?;
    Ok(Stored {
        pk: r.get(0)?,
        role: Role::parse(&role).unwrap_or(Role::User),
        message_key: r.get(2)?,
        rank: r.get(3)?,
        position_key: r.get(4)?,
    })
}

impl SqlLookup<'_, '_> {
    /// The source ranks among the thread's messages (bit per rank), read from the thread once per batch; the
    /// batch's own inserts are added by `mark_rank`.
    fn ranks(&mut self) -> Result<u8, StorageError> {
        if let Some(bits) = self.ranks.get(self.thread_id) {
            return Ok(*bits);
        }
        let bits: i64 = self
            .tx
            .prepare_cached(THREAD_RANKS)?
            .query_row([self.thread_id], |r| r.get(0))
            .optional()?
            .unwrap_or(0);
        // A value no rank makes (not written by the relay) counts as every rank: a look-up too many, never too few.
        let bits = u8::try_from(bits).unwrap_or(u8::MAX);
        self.ranks.insert(self.thread_id.to_owned(), bits);
        Ok(bits)
    }
}

impl Lookup for SqlLookup<'_, '_> {
    type Error = StorageError;

    fn has_other_ranks(&mut self, rank: u8) -> Result<bool, StorageError> {
        Ok(self.ranks()? & !(1 << rank) != 0)
    }

    fn by_hash(&mut self, hash: &str) -> Result<Option<Stored>, StorageError> {
        Ok(self
            .tx
            .prepare_cached(BY_HASH)?
            .query_row(params![self.thread_id, hash], stored_row)
            .optional()?)
    }

    fn by_rendering(&mut self, hash: &str) -> Result<Option<i64>, StorageError> {
        Ok(self
            .tx
            .prepare_cached(
                "SELECT message_pk FROM message_renderings WHERE thread_id = ?1 AND content_hash = ?2",
            )?
            .query_row(params![self.thread_id, hash], |r| r.get(0))
            .optional()?)
    }

    fn by_key(&mut self, key: &str) -> Result<Option<Stored>, StorageError> {
        Ok(self
            .tx
            .prepare_cached(BY_KEY)?
            .query_row(params![self.thread_id, key], stored_row)
            .optional()?)
    }

    fn by_match_text(
        &mut self,
        role: Role,
        text: &str,
        rank: u8,
    ) -> Result<Option<Stored>, StorageError> {
        // Only a thread read by more than one path has anything to compare.
        if !self.has_other_ranks(rank)? {
            return Ok(None);
        }
        let sql = if rank == 0 {
            SOURCE_FORMS
        } else {
            OTHER_RANK_FORMS
        };
        let mut stmt = self.tx.prepare_cached(sql)?;
        let mut rows = if rank == 0 {
            stmt.query(params![self.thread_id, role.as_str()])?
        } else {
            stmt.query(params![self.thread_id, role.as_str(), rank])?
        };
        while let Some(row) = rows.next()? {
            let content: String = row.get(5)?;
            if identity::match_text(&content) == text {
                return Ok(Some(stored_row(row)?));
            }
        }
        Ok(None)
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

    /// SQLite's plan for `sql`, its steps joined by ` | `.
    fn plan(conn: &Connection, sql: &str, args: impl rusqlite::Params) -> String {
        let steps: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map(args, |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        steps.join(" | ")
    }

    /// Regression (ingest benchmark finding): the revision query must find one position's rows by the position
    /// index, not scan the whole thread by `captured_at`, or ingest is quadratic in thread length.
    #[test]
    fn revision_query_uses_the_position_index() {
        let (_dir, conn) = corpus();
        let plan = plan(&conn, REVISIONS_AT_POSITION, params!["t", "p"]);
        assert!(
            plan.contains("USING INDEX messages_position (thread_id=? AND position_key=?)"),
            "plan: {plan}"
        );
    }

    /// Whether a new turn shares its position is answered from the position index alone (no row is read).
    #[test]
    fn the_shared_position_probe_reads_only_the_position_index() {
        let (_dir, conn) = corpus();
        let plan = plan(&conn, POSITION_SHARED, params!["t", "p", 1]);
        assert!(
            plan.contains(
                "USING COVERING INDEX messages_position (thread_id=? AND position_key=?)"
            ),
            "plan: {plan}"
        );
    }

    /// A DOM turn is compared by its words with the thread's source-form turns only, found by the partial index.
    #[test]
    fn the_source_form_look_up_uses_the_partial_index() {
        let (_dir, conn) = corpus();
        let plan = plan(&conn, SOURCE_FORMS, params!["t", "user"]);
        assert!(
            plan.contains("USING INDEX messages_thread_source (thread_id=? AND role=?)"),
            "plan: {plan}"
        );
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
        for table in ["threads", "messages"] {
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
            (1..=5).collect::<Vec<_>>(),
            "2 threads + 3 messages, no reuse"
        );
        // The signal layer is the messages seen through a view: one row per message, with its origin.
        let unmatched: i64 = conn
            .query_row(
                "SELECT count(*) FROM persona_observations o JOIN messages m ON m.id = o.message_id
                 WHERE o.origin_seq != m.origin_seq OR o.origin_device != m.origin_device",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let observations: i64 = conn
            .query_row("SELECT count(*) FROM persona_observations", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!((observations, unmatched), (3, 0));
        let last: i64 = conn
            .query_row(
                "SELECT last_seq FROM origin_seqs WHERE origin = 'dev-a'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(last, 5);
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
}
