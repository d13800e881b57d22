//! The reads hybrid search needs, behind [`SearchReader`]: FTS5 candidates, row metadata for filters and hits,
//! entity names, recent rows, exact vector scans, and the vector log that in-memory indexes replay. The search
//! crate ranks and fuses; this module only fetches.

use rusqlite::{Connection, OptionalExtension, params};

use crate::db::DbError;
use crate::order;
use crate::vectors::{self, Kind, vec_to_blob};

/// What a hit shows and what filters look at, for one message or event.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RowMeta {
    pub id: String,
    pub thread_id: Option<String>,
    pub thread_title: Option<String>,
    pub surface: String,
    pub role: Option<String>,
    pub message_key: Option<String>,
    /// `occurred_at`, else `captured_at`, in the stored time form.
    pub occurred_at: Option<String>,
    #[serde(skip)]
    pub content: String,
}

/// Which ordering an FTS5 probe uses (benchmarks compare them side by side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FtsOrder {
    /// FTS5's `rank` column (the usual idiom).
    Rank,
    /// `bm25()` (what [`SearchReader::fts`] uses).
    Bm25,
}

/// The corpus as hybrid search reads it. Scores: BM25 as FTS5 returns it (lower is better), cosine similarity
/// for vectors (higher is better).
pub trait SearchReader {
    /// Up to `limit` rows of `kind` matching the FTS5 expression, best first: `(pk, bm25)`.
    fn fts(&self, kind: Kind, expr: &str, limit: usize) -> Result<Vec<(i64, f64)>, DbError>;
    /// Up to `limit` messages of the given threads matching the FTS5 expression, best first.
    fn fts_in_threads(
        &self,
        expr: &str,
        threads: &[String],
        limit: usize,
    ) -> Result<Vec<(i64, f64)>, DbError>;
    /// The metadata of a current message or an event; `None` when it does not exist or is not current.
    fn row_meta(&self, kind: Kind, pk: i64) -> Result<Option<RowMeta>, DbError>;
    /// The current message right after message `pk` in its thread, in turn order ([`crate::order`]).
    fn next_in_thread(&self, pk: i64) -> Result<Option<i64>, DbError>;
    /// The current messages of a thread, as pks in turn order (step through them with
    /// [`crate::order::ThreadOrder`]).
    fn thread_order(&self, thread_id: &str) -> Result<Vec<i64>, DbError>;
    /// The content of a current message.
    fn content_of(&self, pk: i64) -> Result<Option<String>, DbError>;
    /// The row count and the average row length in tokens of `kind`'s FTS index, as `bm25()` uses them (FTS5's
    /// averages record); `None` for an empty index.
    fn fts_totals(&self, kind: Kind) -> Result<Option<(f64, f64)>, DbError>;
    /// Ids of the entities whose name or an alias is `phrase` (case-insensitive).
    fn entities_named(&self, phrase: &str) -> Result<Vec<String>, DbError>;
    /// The name and aliases of an entity.
    fn entity_names(&self, id: &str) -> Result<Vec<String>, DbError>;
    /// Current messages with `since <= time < until`, newest first, at most `limit`.
    fn recent_messages(&self, since: &str, until: &str, limit: usize) -> Result<Vec<i64>, DbError>;
    /// Cosine similarity of `qv` to every current message of the given threads with a vector from `model_key`.
    fn vectors_in_threads(
        &self,
        model_key: &str,
        qv: &[f32],
        threads: &[String],
    ) -> Result<Vec<(i64, f64)>, DbError>;
    /// sqlite-vec's exact float KNN: the `k` nearest rows of `kind` with a vector from `model_key`.
    fn vector_knn_exact(
        &self,
        kind: Kind,
        model_key: &str,
        qv: &[f32],
        k: usize,
    ) -> Result<Vec<(i64, f64)>, DbError>;
    /// See [`vectors::log_head`].
    fn vector_log_head(&self) -> Result<i64, DbError>;
    /// See [`vectors::pruned_through`].
    fn vector_log_pruned_through(&self) -> Result<i64, DbError>;
    /// See [`vectors::log_since`].
    fn vector_log_since(&self, seq: i64, kind: Kind) -> Result<Vec<(i64, i64)>, DbError>;
    /// See [`vectors::vector_of`].
    fn vector_of(&self, kind: Kind, pk: i64, model_key: &str) -> Result<Option<Vec<f32>>, DbError>;
    /// See [`vectors::for_each_vector`].
    fn for_each_vector(
        &self,
        kind: Kind,
        model_key: &str,
        dim: usize,
        f: &mut dyn FnMut(i64, &[f32]),
    ) -> Result<(), DbError>;
}

/// FTS5's averages record (row 1 of `<table>_data`): a varint row count, then per column a varint token total.
/// Returns the rows and the average tokens per row over all columns.
fn fts_averages(block: &[u8]) -> Option<(f64, f64)> {
    let (rows, mut at) = varint(block)?;
    let mut tokens = 0u64;
    while at < block.len() {
        let (n, used) = varint(&block[at..])?;
        tokens = tokens.saturating_add(n);
        at += used;
    }
    (rows > 0).then(|| (rows as f64, tokens as f64 / rows as f64))
}

/// SQLite's varint: big-endian groups of 7 bits while the high bit is set, the ninth byte whole.
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(9) {
        if i == 8 {
            return Some(((v << 8) | u64::from(*byte), 9));
        }
        v = (v << 7) | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

fn fts_table(kind: Kind) -> &'static str {
    match kind {
        Kind::Message => "messages_fts",
        Kind::Event => "events_fts",
    }
}

impl SearchReader for Connection {
    /// A standalone `ORDER BY bm25(..) LIMIT n` subquery, so FTS5 can stop early. `bm25()` rather than the `rank`
    /// column: the same scores and order, but at 10^6 messages the `rank` sorter path costs more per query
    /// (measured side by side by the search-latency benchmark; BENCHMARKS.md).
    fn fts(&self, kind: Kind, expr: &str, limit: usize) -> Result<Vec<(i64, f64)>, DbError> {
        let table = fts_table(kind);
        let sql = format!(
            "SELECT f.pk, f.score FROM (SELECT rowid AS pk, bm25({table}) AS score FROM {table}
               WHERE {table} MATCH ?1 ORDER BY score LIMIT ?2) AS f"
        );
        Ok(self
            .prepare_cached(&sql)?
            .query_map(params![expr, limit as i64], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?)
    }

    fn fts_in_threads(
        &self,
        expr: &str,
        threads: &[String],
        limit: usize,
    ) -> Result<Vec<(i64, f64)>, DbError> {
        let threads = serde_json::to_string(threads).unwrap_or_else(|_| "[]".into());
        Ok(self
            .prepare_cached(
                "SELECT messages_fts.rowid, bm25(messages_fts) AS score FROM messages_fts
                 JOIN messages m ON m.pk = messages_fts.rowid
                 WHERE messages_fts MATCH ?1 AND m.thread_id IN (SELECT value FROM json_each(?2))
                 ORDER BY score LIMIT ?3",
            )?
            .query_map(params![expr, threads, limit as i64], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect::<Result<_, _>>()?)
    }

    fn next_in_thread(&self, pk: i64) -> Result<Option<i64>, DbError> {
        order::next_turn(self, pk)
    }

    fn thread_order(&self, thread_id: &str) -> Result<Vec<i64>, DbError> {
        order::thread_turns(self, thread_id)
    }

    fn content_of(&self, pk: i64) -> Result<Option<String>, DbError> {
        Ok(self
            .prepare_cached("SELECT content FROM messages WHERE pk = ?1 AND is_current = 1")?
            .query_row([pk], |r| r.get(0))
            .optional()?)
    }

    fn fts_totals(&self, kind: Kind) -> Result<Option<(f64, f64)>, DbError> {
        let sql = match kind {
            Kind::Message => "SELECT block FROM messages_fts_data WHERE id = 1",
            Kind::Event => "SELECT block FROM events_fts_data WHERE id = 1",
        };
        let block: Option<Vec<u8>> = self
            .prepare_cached(sql)?
            .query_row([], |r| r.get(0))
            .optional()?;
        Ok(block.as_deref().and_then(fts_averages))
    }

    fn row_meta(&self, kind: Kind, pk: i64) -> Result<Option<RowMeta>, DbError> {
        let m = match kind {
            Kind::Message => self
                .prepare_cached(
                    "SELECT m.id, m.thread_id, t.title, t.surface, m.role, m.message_key,
                            COALESCE(m.occurred_at, m.captured_at), m.content
                     FROM messages m JOIN threads t ON t.id = m.thread_id
                     WHERE m.pk = ?1 AND m.is_current = 1",
                )?
                .query_row([pk], |r| {
                    Ok(RowMeta {
                        id: r.get(0)?,
                        thread_id: Some(r.get(1)?),
                        thread_title: r.get(2)?,
                        surface: r.get(3)?,
                        role: Some(r.get(4)?),
                        message_key: r.get(5)?,
                        occurred_at: r.get(6)?,
                        content: r.get(7)?,
                    })
                })
                .optional()?,
            Kind::Event => self
                .prepare_cached(
                    "SELECT id, source_surface, occurred_at, content, kind FROM events WHERE pk = ?1",
                )?
                .query_row([pk], |r| {
                    Ok(RowMeta {
                        id: r.get(0)?,
                        thread_id: None,
                        thread_title: Some(format!("event: {}", r.get::<_, String>(4)?)),
                        surface: r.get(1)?,
                        role: None,
                        message_key: None,
                        occurred_at: Some(r.get(2)?),
                        content: r.get(3)?,
                    })
                })
                .optional()?,
        };
        Ok(m)
    }

    fn entities_named(&self, phrase: &str) -> Result<Vec<String>, DbError> {
        let mut ids: Vec<String> = self
            .prepare_cached("SELECT id FROM entities WHERE lower(name) = ?1")?
            .query_map([phrase], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        for id in self
            .prepare_cached("SELECT entity_id FROM entity_aliases WHERE lower(alias) = ?1")?
            .query_map([phrase], |r| r.get::<_, String>(0))?
        {
            ids.push(id?);
        }
        Ok(ids)
    }

    fn entity_names(&self, id: &str) -> Result<Vec<String>, DbError> {
        let mut names: Vec<String> = self
            .prepare_cached("SELECT name FROM entities WHERE id = ?1")?
            .query_row([id], |r| r.get::<_, String>(0))
            .optional()?
            .into_iter()
            .collect();
        for a in self
            .prepare_cached("SELECT alias FROM entity_aliases WHERE entity_id = ?1")?
            .query_map([id], |r| r.get::<_, String>(0))?
        {
            names.push(a?);
        }
        Ok(names)
    }

    fn recent_messages(&self, since: &str, until: &str, limit: usize) -> Result<Vec<i64>, DbError> {
        Ok(self
            .prepare_cached(
                "SELECT pk FROM messages WHERE is_current = 1 AND COALESCE(occurred_at, captured_at) >= ?1
                 AND COALESCE(occurred_at, captured_at) < ?2
                 ORDER BY COALESCE(occurred_at, captured_at) DESC LIMIT ?3",
            )?
            .query_map(params![since, until, limit as i64], |r| r.get(0))?
            .collect::<Result<_, _>>()?)
    }

    fn vectors_in_threads(
        &self,
        model_key: &str,
        qv: &[f32],
        threads: &[String],
    ) -> Result<Vec<(i64, f64)>, DbError> {
        let dim = checked_dim(qv)?;
        let threads = serde_json::to_string(threads).unwrap_or_else(|_| "[]".into());
        let sql = format!(
            "SELECT m.pk, 1.0 - vec_distance_cosine(v.embedding, ?1) FROM messages m
             JOIN search_vec_state s ON s.kind = 'message' AND s.pk = m.pk AND s.model_key = ?2
             JOIN {} v ON v.rowid = m.pk
             WHERE m.thread_id IN (SELECT value FROM json_each(?3)) AND m.is_current = 1",
            Kind::Message.vec_table(dim)
        );
        Ok(self
            .prepare_cached(&sql)?
            .query_map(params![vec_to_blob(qv), model_key, threads], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect::<Result<_, _>>()?)
    }

    fn vector_knn_exact(
        &self,
        kind: Kind,
        model_key: &str,
        qv: &[f32],
        k: usize,
    ) -> Result<Vec<(i64, f64)>, DbError> {
        let dim = checked_dim(qv)?;
        let sql = format!(
            "SELECT rowid, 1.0 - distance FROM {} WHERE embedding MATCH ?1 AND k = ?2",
            kind.vec_table(dim)
        );
        let rows: Vec<(i64, f64)> = self
            .prepare_cached(&sql)?
            .query_map(params![vec_to_blob(qv), k as i64], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect::<Result<_, _>>()?;
        let mut keep = Vec::with_capacity(rows.len());
        let mut st = self.prepare_cached(
            "SELECT 1 FROM search_vec_state WHERE kind = ?1 AND pk = ?2 AND model_key = ?3",
        )?;
        for (pk, s) in rows {
            if st.exists(params![kind.as_str(), pk, model_key])? {
                keep.push((pk, s));
            }
        }
        Ok(keep)
    }

    fn vector_log_head(&self) -> Result<i64, DbError> {
        vectors::log_head(self)
    }

    fn vector_log_pruned_through(&self) -> Result<i64, DbError> {
        vectors::pruned_through(self)
    }

    fn vector_log_since(&self, seq: i64, kind: Kind) -> Result<Vec<(i64, i64)>, DbError> {
        vectors::log_since(self, seq, kind)
    }

    fn vector_of(&self, kind: Kind, pk: i64, model_key: &str) -> Result<Option<Vec<f32>>, DbError> {
        vectors::vector_of(self, kind, pk, model_key)
    }

    fn for_each_vector(
        &self,
        kind: Kind,
        model_key: &str,
        dim: usize,
        f: &mut dyn FnMut(i64, &[f32]),
    ) -> Result<(), DbError> {
        vectors::for_each_vector(self, kind, model_key, dim, f)
    }
}

fn checked_dim(qv: &[f32]) -> Result<usize, DbError> {
    if vectors::SUPPORTED_DIMS.contains(&qv.len()) {
        Ok(qv.len())
    } else {
        Err(DbError::Invalid(format!(
            "{}-dimensional query vector: the corpus has vector tables for 384 and 768 dimensions only",
            qv.len()
        )))
    }
}

/// The FTS5 subquery alone, with either ordering, for benchmarks: the first `limit` message pks.
pub fn fts_probe(
    conn: &Connection,
    expr: &str,
    order: FtsOrder,
    limit: usize,
) -> Result<Vec<i64>, DbError> {
    let order = match order {
        FtsOrder::Rank => "rank",
        FtsOrder::Bm25 => "bm25(messages_fts)",
    };
    let sql = format!(
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?1 ORDER BY {order} LIMIT ?2"
    );
    Ok(conn
        .prepare_cached(&sql)?
        .query_map(params![expr, limit as i64], |r| r.get(0))?
        .collect::<Result<_, _>>()?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn averages_record_varints() {
        // 3 rows; 200 tokens (two-byte varint 0x81 0x48) in one column.
        assert_eq!(fts_averages(&[3, 0x81, 0x48]), Some((3.0, 200.0 / 3.0)));
        assert_eq!(fts_averages(&[0]), None);
        assert_eq!(fts_averages(&[0x81]), None);
        assert_eq!(varint(&[0xff; 9]), Some((u64::MAX, 9)));
    }
}
