//! The embedding job: find rows without a vector from the current model, embed them (reusing the text-hash cache)
//! and store the vectors, in small batches, each its own transaction, so stopping at any point loses at most one
//! batch and the next run resumes. `personkit corpus embed` runs it in the foreground; `serve` runs it on a
//! background thread with its own connection ([`spawn_worker`]), so ingest never waits for it.
//!
//! This is the one writer besides ingest: it writes only vectors, the cache and their bookkeeping, never
//! messages, so a batch that fails loses no turn.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use personkit_embed::{EmbedError, Embedder};
use personkit_store::clock::Clock;
use personkit_store::vectors::{self, Kind, ModelRef, text_hash};
use personkit_store::{Connection, DbError};

/// Errors of the embedding job.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("database: {0}")]
    Db(#[from] DbError),
    #[error(transparent)]
    Embed(#[from] EmbedError),
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

/// What text a message's vector is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmbedText {
    /// The message alone.
    #[default]
    Turn,
    /// The message followed by the one before it in its thread (`vectors::pending_with`).
    TurnWithPrevious,
}

impl EmbedText {
    /// The text the embedder asks for ([`Embedder::previous_turn_context`]).
    pub fn for_embedder(embedder: &dyn Embedder) -> Self {
        if embedder.previous_turn_context() {
            EmbedText::TurnWithPrevious
        } else {
            EmbedText::Turn
        }
    }
}

/// Embeds up to `max` pending rows (messages first, then events) in batches of `batch`, calling `progress` with
/// the number of rows done after each batch, and stopping early when `stop` is set. Each batch commits on its own.
#[allow(clippy::too_many_arguments)]
pub fn embed_pending(
    conn: &mut Connection,
    embedder: &dyn Embedder,
    clock: &Clock,
    cursor: &mut Cursor,
    max: u64,
    batch: usize,
    stop: Option<&AtomicBool>,
    progress: impl FnMut(u64),
) -> Result<EmbedRun, IndexError> {
    embed_pending_with(
        conn,
        embedder,
        clock,
        cursor,
        max,
        batch,
        stop,
        EmbedText::for_embedder(embedder),
        progress,
    )
}

/// [`embed_pending`] with a choice of text (benchmarks compare them).
#[allow(clippy::too_many_arguments)]
pub fn embed_pending_with(
    conn: &mut Connection,
    embedder: &dyn Embedder,
    clock: &Clock,
    cursor: &mut Cursor,
    max: u64,
    batch: usize,
    stop: Option<&AtomicBool>,
    text: EmbedText,
    mut progress: impl FnMut(u64),
) -> Result<EmbedRun, IndexError> {
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
            let rows = vectors::pending_with(
                conn,
                kind,
                &model_key,
                after,
                want,
                text == EmbedText::TurnWithPrevious,
            )?;
            let Some(&(last_pk, _)) = rows.last() else {
                break;
            };
            run.computed += store_batch(conn, embedder, clock, kind, &rows)?;
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

/// Embeds one batch (using the cache where it can) and stores it. Returns how many texts went through the model.
fn store_batch(
    conn: &mut Connection,
    embedder: &dyn Embedder,
    clock: &Clock,
    kind: Kind,
    rows: &[(i64, String)],
) -> Result<u64, IndexError> {
    let dim = embedder.dim();
    personkit_embed::check_dim(dim)?;
    let model = ModelRef {
        id: embedder.model_id(),
        version: embedder.model_version(),
        dim,
    };
    let hashes: Vec<String> = rows.iter().map(|(_, t)| text_hash(t)).collect();
    let mut known = vectors::cached(conn, &hashes, model)?;
    // Embed each distinct missing text once.
    let mut missing: Vec<(&str, &str)> = Vec::new();
    let mut seen = HashSet::new();
    for ((_, text), h) in rows.iter().zip(&hashes) {
        if !known.contains_key(h) && seen.insert(h.as_str()) {
            missing.push((h.as_str(), text.as_str()));
        }
    }
    let texts: Vec<&str> = missing.iter().map(|(_, t)| *t).collect();
    let fresh_vectors = if texts.is_empty() {
        Vec::new()
    } else {
        embedder.embed_documents(&texts)?
    };
    if fresh_vectors.len() != texts.len() {
        return Err(EmbedError::CountMismatch {
            want: texts.len(),
            got: fresh_vectors.len(),
        }
        .into());
    }
    let mut fresh = Vec::with_capacity(missing.len());
    for ((h, _), v) in missing.iter().zip(fresh_vectors) {
        if v.len() != dim {
            return Err(EmbedError::WrongDim {
                want: dim,
                got: v.len(),
            }
            .into());
        }
        known.insert((*h).to_owned(), v.clone());
        fresh.push(((*h).to_owned(), v));
    }
    let keyed: Vec<(i64, String)> = rows.iter().map(|(pk, _)| *pk).zip(hashes).collect();
    let now = personkit_store::clock::fmt_time(clock.now());
    vectors::write_batch_live(conn, kind, model, &fresh, &keyed, &known, &now)?;
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
pub fn spawn_worker<F>(open: F, embedder: Arc<dyn Embedder>, clock: Clock, idle: Duration) -> Worker
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
                        &clock,
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
