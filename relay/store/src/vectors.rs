//! Vectors in the corpus: the `embeddings` cache (keyed by the sha256 of the embedded text, per model), the
//! per-dimension vec0 tables (`messages_vec_384`, `events_vec_768`, ... float; `*_vbit_*` sign bits), the
//! `search_vec_state` bookkeeping that tells which rows are pending for a model, and `search_vec_log`, the change
//! log that in-memory indexes replay (written by a trigger on `search_vec_state`, pruned here).
//!
//! The embedding job (`personkit_search::indexer`) reads pending rows, embeds them and hands the vectors to
//! [`write_batch`], one transaction per batch.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

use crate::db::DbError;

/// Dimensions the corpus has vector tables for.
pub const SUPPORTED_DIMS: [usize; 2] = [384, 768];

/// What a row is: a message or an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    pub fn table(self) -> &'static str {
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
pub fn coverage(conn: &Connection, model_key: &str) -> Result<Coverage, DbError> {
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

/// Which model a batch of vectors comes from.
#[derive(Debug, Clone, Copy)]
pub struct ModelRef<'a> {
    pub id: &'a str,
    pub version: &'a str,
    pub dim: usize,
}

impl ModelRef<'_> {
    /// `id@version`, the key `search_vec_state` records.
    pub fn key(&self) -> String {
        format!("{}@{}", self.id, self.version)
    }
}

/// Up to `limit` rows of `kind` after `after` (primary key order) that have no vector from `model_key`: current
/// messages, or events. Returns `(pk, text)`.
pub fn pending(
    conn: &Connection,
    kind: Kind,
    model_key: &str,
    after: i64,
    limit: usize,
) -> Result<Vec<(i64, String)>, DbError> {
    pending_with(conn, kind, model_key, after, limit, false)
}

/// The subquery that finds the current message before message `m` in its thread, in turn order
/// ([`crate::order`]), for its content.
pub const PREVIOUS_IN_THREAD: &str = crate::order::turn_before!("content");

/// Like [`pending`]; with `previous`, a message's text is followed by the current message before it in its thread
/// ([`PREVIOUS_IN_THREAD`]), as `<text>\n\n(after: <previous>)` — the text of a reply then carries what it
/// answers. Events have no previous.
pub fn pending_with(
    conn: &Connection,
    kind: Kind,
    model_key: &str,
    after: i64,
    limit: usize,
    previous: bool,
) -> Result<Vec<(i64, String)>, DbError> {
    let sql = match kind {
        Kind::Message if previous => {
            concat!(
                "SELECT m.pk, m.content || coalesce('\n\n(after: ' || ",
                crate::order::turn_before!("content"),
                " || ')', '')
             FROM messages m
             LEFT JOIN search_vec_state s ON s.kind = 'message' AND s.pk = m.pk
             WHERE m.pk > ?1 AND m.is_current = 1 AND (s.pk IS NULL OR s.model_key != ?2)
             ORDER BY m.pk LIMIT ?3"
            )
        }
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

/// Vectors already in the `embeddings` cache for these text hashes and this model.
pub fn cached(
    conn: &Connection,
    hashes: &[String],
    model: ModelRef<'_>,
) -> Result<HashMap<String, Vec<f32>>, DbError> {
    let mut out = HashMap::new();
    let mut stmt = conn.prepare_cached(
        "SELECT vector FROM embeddings WHERE text_hash = ?1 AND model_id = ?2 AND model_version = ?3",
    )?;
    for h in hashes {
        if out.contains_key(h) {
            continue;
        }
        if let Some(blob) = stmt
            .query_row(params![h, model.id, model.version], |r| {
                r.get::<_, Vec<u8>>(0)
            })
            .optional()?
        {
            out.insert(h.clone(), blob_to_vec(&blob));
        }
    }
    Ok(out)
}

/// Writes one batch in one transaction: new cache entries (`fresh`: text hash and vector), then for every
/// `(pk, text hash)` of `rows` its vector (looked up in `vectors`) into the vec0 tables of `model.dim`, replacing
/// any vector of another model, and its `search_vec_state` row. Prunes the change log to [`LOG_KEEP`] rows.
pub fn write_batch(
    conn: &mut Connection,
    kind: Kind,
    model: ModelRef<'_>,
    fresh: &[(String, Vec<f32>)],
    rows: &[(i64, String)],
    vectors: &HashMap<String, Vec<f32>>,
    now: &str,
) -> Result<(), DbError> {
    write_rows(conn, kind, model, fresh, rows, vectors, now, false)
}

/// [`write_batch`] for the embedding job: a row removed (forgotten, or by a sync tombstone) while its vector was
/// being computed gets none, and its text is not cached — the vector would outlive the content.
pub fn write_batch_live(
    conn: &mut Connection,
    kind: Kind,
    model: ModelRef<'_>,
    fresh: &[(String, Vec<f32>)],
    rows: &[(i64, String)],
    vectors: &HashMap<String, Vec<f32>>,
    now: &str,
) -> Result<(), DbError> {
    write_rows(conn, kind, model, fresh, rows, vectors, now, true)
}

#[allow(clippy::too_many_arguments)]
fn write_rows(
    conn: &mut Connection,
    kind: Kind,
    model: ModelRef<'_>,
    fresh: &[(String, Vec<f32>)],
    rows: &[(i64, String)],
    vectors: &HashMap<String, Vec<f32>>,
    now: &str,
    only_live: bool,
) -> Result<(), DbError> {
    let dim = model.dim;
    if !SUPPORTED_DIMS.contains(&dim) {
        return Err(DbError::Invalid(format!(
            "{dim}-dimensional vectors have no table (supported: 384, 768)"
        )));
    }
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let rows: Vec<&(i64, String)> = if !only_live {
        rows.iter().collect()
    } else {
        let sql = match kind {
            Kind::Message => "SELECT 1 FROM messages WHERE pk = ?1",
            Kind::Event => "SELECT 1 FROM events WHERE pk = ?1",
        };
        let mut exists = tx.prepare_cached(sql)?;
        let mut kept = Vec::with_capacity(rows.len());
        for r in rows {
            if exists.exists([r.0])? {
                kept.push(r);
            }
        }
        kept
    };
    let used: std::collections::HashSet<&str> = rows.iter().map(|(_, h)| h.as_str()).collect();
    let fresh: Vec<&(String, Vec<f32>)> = fresh
        .iter()
        .filter(|(h, _)| used.contains(h.as_str()))
        .collect();
    {
        let mut ins = tx.prepare_cached(
            "INSERT OR IGNORE INTO embeddings (text_hash, model_id, model_version, dim, vector, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for (h, v) in fresh {
            if v.len() != dim {
                return Err(DbError::Invalid(format!(
                    "a {}-dimensional vector for a {dim}-dimensional model",
                    v.len()
                )));
            }
            ins.execute(params![
                h,
                model.id,
                model.version,
                dim as i64,
                vec_to_blob(v),
                now
            ])?;
        }
        let model_key = model.key();
        for (pk, h) in rows.iter().copied() {
            let v = vectors
                .get(h)
                .ok_or_else(|| DbError::Invalid("a row of the batch has no vector".into()))?;
            if v.len() != dim {
                return Err(DbError::Invalid(format!(
                    "a {}-dimensional vector for a {dim}-dimensional model",
                    v.len()
                )));
            }
            delete_vectors(&tx, kind, *pk)?;
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
        prune_log(&tx, LOG_KEEP)?;
    }
    tx.commit()?;
    Ok(())
}

/// How many of the newest `search_vec_log` rows [`prune_log`] keeps: an index that fell further behind than this
/// (another process's, idle while that many vectors were written) reloads instead of replaying.
pub const LOG_KEEP: i64 = 10_000;

/// The newest `search_vec_log.seq` (0 when the log is empty).
pub fn log_head(conn: &Connection) -> Result<i64, DbError> {
    Ok(conn.query_row(
        "SELECT COALESCE(MAX(seq), 0) FROM search_vec_log",
        [],
        |r| r.get(0),
    )?)
}

/// The highest `search_vec_log.seq` ever pruned (0: none).
pub fn pruned_through(conn: &Connection) -> Result<i64, DbError> {
    Ok(conn
        .prepare_cached("SELECT through FROM search_vec_log_pruned WHERE id = 1")?
        .query_row([], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

/// Deletes all but the newest `keep` rows of `search_vec_log` and records how far it deleted, so that indexes
/// behind that point reload. Returns the number of rows deleted. Cheap when there is nothing to prune (two
/// look-ups on the primary key); [`write_batch`] calls it in each batch's transaction.
pub fn prune_log(conn: &Connection, keep: i64) -> Result<usize, DbError> {
    let last = log_head(conn)?;
    let cut = last - keep;
    if cut <= pruned_through(conn)? {
        return Ok(0);
    }
    let n = conn
        .prepare_cached("DELETE FROM search_vec_log WHERE seq <= ?1")?
        .execute([cut])?;
    conn.prepare_cached("UPDATE search_vec_log_pruned SET through = ?1 WHERE id = 1")?
        .execute([cut])?;
    Ok(n)
}

/// `(seq, pk)` of the log rows of `kind` after `seq`.
pub fn log_since(conn: &Connection, seq: i64, kind: Kind) -> Result<Vec<(i64, i64)>, DbError> {
    Ok(conn
        .prepare_cached("SELECT seq, pk FROM search_vec_log WHERE seq > ?1 AND kind = ?2")?
        .query_map(params![seq, kind.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?)
}

/// The vector row `pk` of `kind` holds from `model_key`, if any.
pub fn vector_of(
    conn: &Connection,
    kind: Kind,
    pk: i64,
    model_key: &str,
) -> Result<Option<Vec<f32>>, DbError> {
    let (model_id, version) = model_key.rsplit_once('@').unwrap_or((model_key, ""));
    Ok(conn
        .prepare_cached(
            "SELECT e.vector FROM search_vec_state s
             JOIN embeddings e ON e.text_hash = s.text_hash AND e.model_id = ?3 AND e.model_version = ?4
             WHERE s.kind = ?1 AND s.pk = ?2 AND s.model_key = ?5",
        )?
        .query_row(
            params![kind.as_str(), pk, model_id, version, model_key],
            |r| r.get::<_, Vec<u8>>(0),
        )
        .optional()?
        .map(|b| blob_to_vec(&b)))
}

/// Calls `f(pk, vector)` for every row of `kind` holding a `dim`-dimensional vector from `model_key`. Reads the
/// `embeddings` cache (keyed by text hash and model): at 10^6 rows ~25x faster than a scan of the float vec0
/// table, whose full scan reads row by row through its chunks.
pub fn for_each_vector(
    conn: &Connection,
    kind: Kind,
    model_key: &str,
    dim: usize,
    f: &mut dyn FnMut(i64, &[f32]),
) -> Result<(), DbError> {
    let (model_id, version) = model_key.rsplit_once('@').unwrap_or((model_key, ""));
    let mut st = conn.prepare(
        "SELECT s.pk, e.vector FROM search_vec_state s
         JOIN embeddings e ON e.text_hash = s.text_hash AND e.model_id = ?3 AND e.model_version = ?4
         WHERE s.kind = ?1 AND s.model_key = ?2 AND s.dim = ?5",
    )?;
    let mut rows = st.query(params![
        kind.as_str(),
        model_key,
        model_id,
        version,
        dim as i64
    ])?;
    while let Some(r) = rows.next()? {
        let pk: i64 = r.get(0)?;
        let v = blob_to_vec(r.get_ref(1)?.as_blob().map_err(rusqlite::Error::from)?);
        f(pk, &v);
    }
    Ok(())
}

/// Removes the vector of row `pk` of `kind` (every model and dimension) and its state; the change log records it,
/// so in-memory indexes drop the row at their next catch-up.
pub fn remove(conn: &mut Connection, kind: Kind, pk: i64) -> Result<(), DbError> {
    let tx = conn.transaction()?;
    delete_vectors(&tx, kind, pk)?;
    tx.execute(
        "DELETE FROM search_vec_state WHERE kind = ?1 AND pk = ?2",
        params![kind.as_str(), pk],
    )?;
    tx.commit()?;
    Ok(())
}

/// Rows in the change log (after pruning).
pub fn log_len(conn: &Connection) -> Result<u64, DbError> {
    Ok(conn.query_row("SELECT count(*) FROM search_vec_log", [], |r| r.get(0))?)
}

/// Deletes row `pk`'s float and sign-bit vectors of every dimension.
fn delete_vectors(conn: &Connection, kind: Kind, pk: i64) -> Result<(), DbError> {
    for d in SUPPORTED_DIMS {
        for table in [kind.vec_table(d), kind.bit_table(d)] {
            conn.prepare_cached(&format!("DELETE FROM {table} WHERE rowid = ?1"))?
                .execute([pk])?;
        }
    }
    Ok(())
}
