//! Vectors in the corpus: the `embeddings` cache (keyed by the sha256 of the embedded text, per model), the
//! per-dimension vec0 tables (`messages_vec_384`, `events_vec_768`, ... float; `*_vbit_*` sign bits) and the
//! `search_vec_state` bookkeeping that tells which rows are pending for the current model.
//!
//! Work is done in small batches, each in its own transaction: stopping at any point loses at most one batch,
//! and the next run resumes where this one stopped.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

use super::{EmbedError, Embedder};

/// Errors of the vector store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Db(#[from] rusqlite::Error),
    #[error(transparent)]
    Embed(#[from] EmbedError),
}

/// What a row is: a message or an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Message,
    Event,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Message => "message",
            Kind::Event => "event",
        }
    }
    fn table(self) -> &'static str {
        match self {
            Kind::Message => "messages",
            Kind::Event => "events",
        }
    }
    /// `messages_vec_384` etc. Only call with a supported dim.
    pub fn vec_table(self, dim: usize) -> String {
        format!("{}_vec_{dim}", self.table())
    }
    /// `messages_vbit_384` etc.
    pub fn bit_table(self, dim: usize) -> String {
        format!("{}_vbit_{dim}", self.table())
    }
}

/// sha256 (hex) of the text given to the embedder: the key of the `embeddings` cache.
pub fn text_hash(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Little-endian f32 bytes, the layout sqlite-vec reads.
pub fn vec_to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Inverse of [`vec_to_blob`].
pub fn blob_to_vec(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Counts of rows with and without a vector from the given model.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Coverage {
    pub messages_total: u64,
    pub messages_embedded: u64,
    pub events_total: u64,
    pub events_embedded: u64,
}

impl Coverage {
    pub fn pending(&self) -> u64 {
        (self.messages_total - self.messages_embedded.min(self.messages_total))
            + (self.events_total - self.events_embedded.min(self.events_total))
    }
}

/// How much of the corpus has vectors from `model_key`.
pub fn coverage(conn: &Connection, model_key: &str) -> Result<Coverage, StoreError> {
    let count = |sql: &str, p: &[&dyn rusqlite::ToSql]| -> rusqlite::Result<u64> {
        conn.query_row(sql, p, |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
    };
    Ok(Coverage {
        messages_total: count("SELECT count(*) FROM messages WHERE is_current = 1", &[])?,
        messages_embedded: count(
            "SELECT count(*) FROM search_vec_state s JOIN messages m ON m.pk = s.pk
             WHERE s.kind = 'message' AND s.model_key = ?1 AND m.is_current = 1",
            &[&model_key],
        )?,
        events_total: count("SELECT count(*) FROM events", &[])?,
        events_embedded: count(
            "SELECT count(*) FROM search_vec_state WHERE kind = 'event' AND model_key = ?1",
            &[&model_key],
        )?,
    })
}

/// Result of one [`embed_pending`] call.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct EmbedRun {
    /// Rows that got a vector.
    pub rows: u64,
    /// Texts actually run through the model (the rest came from the cache or duplicates in the batch).
    pub computed: u64,
    /// True when nothing is pending any more.
    pub finished: bool,
}

/// Keyset cursor over the two tables, so a long backfill never rescans what it has done.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cursor {
    message_pk: i64,
    event_pk: i64,
}

fn pending_batch(
    conn: &Connection,
    kind: Kind,
    model_key: &str,
    after: i64,
    limit: usize,
) -> Result<Vec<(i64, String)>, StoreError> {
    let sql = match kind {
        Kind::Message => {
            "SELECT m.pk, m.content FROM messages m
             LEFT JOIN search_vec_state s ON s.kind = 'message' AND s.pk = m.pk
             WHERE m.pk > ?1 AND m.is_current = 1 AND (s.pk IS NULL OR s.model_key != ?2)
             ORDER BY m.pk LIMIT ?3"
        }
        Kind::Event => {
            "SELECT e.pk, e.content FROM events e
             LEFT JOIN search_vec_state s ON s.kind = 'event' AND s.pk = e.pk
             WHERE e.pk > ?1 AND (s.pk IS NULL OR s.model_key != ?2)
             ORDER BY e.pk LIMIT ?3"
        }
    };
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt
        .query_map(params![after, model_key, limit as i64], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Embeds up to `max` pending rows (messages first, then events) in batches of `batch`, calling `progress` with
/// the number of rows done after each batch, and stopping early when `stop` is set. Each batch commits on its own.
pub fn embed_pending(
    conn: &mut Connection,
    embedder: &dyn Embedder,
    cursor: &mut Cursor,
    max: u64,
    batch: usize,
    stop: Option<&AtomicBool>,
    mut progress: impl FnMut(u64),
) -> Result<EmbedRun, StoreError> {
    let model_key = embedder.model_key();
    let mut run = EmbedRun::default();
    for kind in [Kind::Message, Kind::Event] {
        loop {
            if run.rows >= max || stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                return Ok(run);
            }
            let after = match kind {
                Kind::Message => cursor.message_pk,
                Kind::Event => cursor.event_pk,
            };
            let want = batch.min((max - run.rows) as usize).max(1);
            let rows = pending_batch(conn, kind, &model_key, after, want)?;
            let Some(&(last_pk, _)) = rows.last() else {
                break;
            };
            run.computed += store_batch(conn, embedder, kind, &rows)?;
            run.rows += rows.len() as u64;
            match kind {
                Kind::Message => cursor.message_pk = last_pk,
                Kind::Event => cursor.event_pk = last_pk,
            }
            progress(rows.len() as u64);
        }
    }
    run.finished = true;
    Ok(run)
}

/// Embeds one batch (using the cache where it can) and writes vectors and state in one transaction. Returns how
/// many texts went through the model.
fn store_batch(
    conn: &mut Connection,
    embedder: &dyn Embedder,
    kind: Kind,
    rows: &[(i64, String)],
) -> Result<u64, StoreError> {
    let dim = embedder.dim();
    super::check_dim(dim)?;
    let model_id = embedder.model_id().to_owned();
    let version = embedder.model_version().to_owned();
    let hashes: Vec<String> = rows.iter().map(|(_, t)| text_hash(t)).collect();
    // Cache look-up.
    let mut vectors: HashMap<String, Vec<f32>> = HashMap::new();
    {
        let mut stmt = conn.prepare_cached(
            "SELECT vector FROM embeddings WHERE text_hash = ?1 AND model_id = ?2 AND model_version = ?3",
        )?;
        for h in &hashes {
            if vectors.contains_key(h) {
                continue;
            }
            if let Some(blob) = stmt
                .query_row(params![h, model_id, version], |r| r.get::<_, Vec<u8>>(0))
                .optional()?
            {
                vectors.insert(h.clone(), blob_to_vec(&blob));
            }
        }
    }
    // Embed each distinct missing text once.
    let mut missing: Vec<(&str, &str)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for ((_, text), h) in rows.iter().zip(&hashes) {
        if !vectors.contains_key(h) && seen.insert(h.as_str()) {
            missing.push((h.as_str(), text.as_str()));
        }
    }
    let texts: Vec<&str> = missing.iter().map(|(_, t)| *t).collect();
    let fresh = if texts.is_empty() {
        Vec::new()
    } else {
        embedder.embed_documents(&texts)?
    };
    let now = crate::search::now_rfc3339();
    let tx = conn.transaction()?;
    {
        let mut ins = tx.prepare_cached(
            "INSERT OR IGNORE INTO embeddings (text_hash, model_id, model_version, dim, vector, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for ((h, _), v) in missing.iter().zip(fresh) {
            if v.len() != dim {
                return Err(EmbedError::WrongDim {
                    want: dim,
                    got: v.len(),
                }
                .into());
            }
            ins.execute(params![
                h,
                model_id,
                version,
                dim as i64,
                vec_to_blob(&v),
                now
            ])?;
            vectors.insert((*h).to_owned(), v);
        }
        let model_key = embedder.model_key();
        for ((pk, _), h) in rows.iter().zip(&hashes) {
            let v = vectors
                .get(h)
                .ok_or(EmbedError::CountMismatch { want: 1, got: 0 })?;
            for d in super::SUPPORTED_DIMS {
                tx.execute(
                    &format!("DELETE FROM {} WHERE rowid = ?1", kind.vec_table(d)),
                    [pk],
                )?;
                tx.execute(
                    &format!("DELETE FROM {} WHERE rowid = ?1", kind.bit_table(d)),
                    [pk],
                )?;
            }
            let blob = vec_to_blob(v);
            tx.prepare_cached(&format!(
                "INSERT INTO {}(rowid, embedding) VALUES (?1, ?2)",
                kind.vec_table(dim)
            ))?
            .execute(params![pk, blob])?;
            tx.prepare_cached(&format!(
                "INSERT INTO {}(rowid, embedding) VALUES (?1, vec_quantize_binary(?2))",
                kind.bit_table(dim)
            ))?
            .execute(params![pk, blob])?;
            tx.prepare_cached(
                "INSERT INTO search_vec_state (kind, pk, text_hash, model_key, dim) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (kind, pk) DO UPDATE SET text_hash = excluded.text_hash,
                   model_key = excluded.model_key, dim = excluded.dim",
            )?
            .execute(params![kind.as_str(), pk, h, model_key, dim as i64])?;
        }
        crate::search::index::prune_log(&tx, crate::search::index::LOG_KEEP)?;
    }
    tx.commit()?;
    Ok(texts.len() as u64)
}

/// Handle of the background embedding worker; dropping it does not stop the thread, [`Worker::stop`] does.
#[derive(Debug)]
pub struct Worker {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    /// Asks the worker to stop after its current batch and waits for it.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Starts a thread that keeps embedding pending messages and events with its own connection (`open` makes it),
/// in small batches so that ingest never waits on it, polling every `idle` when there is nothing to do.
pub fn spawn_worker<F>(open: F, embedder: Arc<dyn Embedder>, idle: Duration) -> Worker
where
    F: Fn() -> Result<Connection, String> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::Builder::new()
        .name("personkit-embed".into())
        .spawn(move || {
            let mut conn = None;
            let mut cursor = Cursor::default();
            while !flag.load(Ordering::Relaxed) {
                if conn.is_none() {
                    match open() {
                        Ok(c) => conn = Some(c),
                        Err(e) => tracing::warn!(error = %e, "embed worker cannot open the corpus"),
                    }
                }
                let mut done = true;
                if let Some(c) = conn.as_mut() {
                    match embed_pending(
                        c,
                        embedder.as_ref(),
                        &mut cursor,
                        64,
                        16,
                        Some(&flag),
                        |_| {},
                    ) {
                        Ok(run) => {
                            done = run.finished;
                            if run.rows > 0 {
                                tracing::debug!(rows = run.rows, "embedded pending rows");
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "embed worker batch failed; will retry")
                        }
                    }
                }
                if done {
                    // Start over from the first row next time: new rows and revisions may be anywhere.
                    cursor = Cursor::default();
                    let mut slept = Duration::ZERO;
                    while slept < idle && !flag.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(50));
                        slept += Duration::from_millis(50);
                    }
                }
            }
        })
        .ok();
    Worker { stop, handle }
}
