//! The reads hybrid search needs, behind [`SearchReader`]: FTS5 candidates, row metadata for filters and hits,
//! entity names, recent rows, exact vector scans, and the vector log that in-memory indexes replay. The search
//! crate ranks and fuses; this module only fetches.

use std::collections::HashMap;

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

/// One text as the messages' full-text index counts it: its length in tokens and how often each asked term occurs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TermCounts {
    pub len: u32,
    /// One count per asked term, in the order asked.
    pub tf: Vec<u32>,
}

/// An approved knowledge entry a query's words matched, with the current messages it cites.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KnowledgeMatch {
    pub id: String,
    /// One of `reasoning`, `philosophy`, `standard`, `decision`, `reaction`.
    #[serde(rename = "type")]
    pub kind: String,
    pub topic: String,
    pub position: String,
    /// BM25 as FTS5 returns it (lower is better).
    #[serde(skip)]
    pub bm25: f64,
    /// Message ids of its sources that are still current, at most [`KNOWLEDGE_SOURCES`].
    pub sources: Vec<String>,
    /// The same sources' pks, in the same order.
    #[serde(skip)]
    pub source_pks: Vec<i64>,
}

/// How many sources of one matched entry a query reads.
pub const KNOWLEDGE_SOURCES: usize = 50;

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
    /// The distinct terms of `text` as the messages' full-text index stores them (its own tokenizer: lowercased,
    /// stemmed, ...), in the order they first occur.
    fn message_terms(&self, text: &str) -> Result<Vec<String>, DbError>;
    /// How many rows of the messages' full-text index hold each term (FTS5's own count, `fts5vocab`), in `terms`
    /// order: the document counts `bm25()` computes its IDFs from.
    fn message_term_docs(&self, terms: &[String]) -> Result<Vec<u64>, DbError>;
    /// For each current message of `pks`: its length in tokens and how often each term occurs in it, as the
    /// messages' full-text index counts them. Messages that are not current are left out.
    fn message_term_counts(
        &self,
        pks: &[i64],
        terms: &[String],
    ) -> Result<HashMap<i64, TermCounts>, DbError>;
    /// The row count and the average row length in tokens of `kind`'s FTS index, as `bm25()` uses them (FTS5's
    /// averages record); `None` for an empty index.
    fn fts_totals(&self, kind: Kind) -> Result<Option<(f64, f64)>, DbError>;
    /// Ids of the entities whose name or an alias is `phrase` (case-insensitive).
    fn entities_named(&self, phrase: &str) -> Result<Vec<String>, DbError>;
    /// The name and aliases of an entity.
    fn entity_names(&self, id: &str) -> Result<Vec<String>, DbError>;
    /// The threads any of the entities appears in (through the graph's sources), at most `limit`.
    fn entity_threads(&self, ids: &[String], limit: usize) -> Result<Vec<String>, DbError>;
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
    /// Up to `limit` **approved** knowledge entries matching the FTS5 expression, best first; pending and rejected
    /// entries are never returned.
    fn knowledge(&self, expr: &str, limit: usize) -> Result<Vec<KnowledgeMatch>, DbError>;
    /// The stored heat of each of `ids` of `kind` that has any ([`crate::heat::heat_of`]; at most
    /// [`crate::heat::MAX_IDS`] ids).
    fn heat_of(
        &self,
        kind: crate::heat::Kind,
        ids: &[String],
    ) -> Result<std::collections::HashMap<String, f64>, DbError>;
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

/// The `tokenize` option of an FTS5 table's declaration (`tokenize='porter unicode61'` or with double quotes);
/// `None` when it has none (FTS5's default, `unicode61`).
fn fts_tokenizer(sql: &str) -> Option<&str> {
    let at = sql.find("tokenize")?;
    let rest = sql[at + "tokenize".len()..]
        .trim_start()
        .strip_prefix('=')?
        .trim_start();
    let quote = rest.chars().next().filter(|q| *q == '\'' || *q == '"')?;
    let body = &rest[1..];
    body.find(quote).map(|end| &body[..end])
}

/// Makes, once per connection, the temporary tables the term look-ups read (nothing is written to the corpus, so
/// a read-only connection has them too):
/// - `message_terms`: FTS5's per-term statistics of `messages_fts` (`fts5vocab`, `row`: rows holding the term);
/// - `search_tokens`: an empty contentless FTS5 table with `messages_fts`'s tokenizer, read from its declaration,
///   that texts pass through to be counted the way that index counts them, read back through `search_tokens_at`
///   (`fts5vocab`, `instance`: one row per token) and its `docsize` table (tokens per text).
fn token_tables(conn: &Connection) -> Result<(), DbError> {
    let made: i64 = conn
        .prepare_cached("SELECT count(*) FROM temp.sqlite_master WHERE name = 'search_tokens_at'")?
        .query_row([], |r| r.get(0))?;
    if made > 0 {
        return Ok(());
    }
    let sql: String = conn.query_row(
        "SELECT sql FROM sqlite_master WHERE name = 'messages_fts'",
        [],
        |r| r.get(0),
    )?;
    let tokenizer = fts_tokenizer(&sql)
        .unwrap_or("unicode61")
        .replace('\'', "''");
    // Texts pass through these tables: they stay in memory, never in a temporary file (set before any temporary
    // table exists: changing it drops them).
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.execute_batch(&format!(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.message_terms USING fts5vocab(main, messages_fts, row);
         CREATE VIRTUAL TABLE IF NOT EXISTS temp.search_tokens USING fts5(x, content='', tokenize='{tokenizer}');
         CREATE VIRTUAL TABLE IF NOT EXISTS temp.search_tokens_at USING fts5vocab(temp, search_tokens, instance);"
    ))?;
    Ok(())
}

/// Empties `search_tokens` (texts do not stay in it between calls).
fn clear_tokens(conn: &Connection) -> Result<(), DbError> {
    conn.prepare_cached("INSERT INTO temp.search_tokens(search_tokens) VALUES ('delete-all')")?
        .execute([])?;
    Ok(())
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

    fn message_terms(&self, text: &str) -> Result<Vec<String>, DbError> {
        token_tables(self)?;
        clear_tokens(self)?;
        self.prepare_cached("INSERT INTO temp.search_tokens(rowid, x) VALUES (1, ?1)")?
            .execute([text])?;
        let tokens: Vec<String> = self
            .prepare_cached("SELECT term FROM temp.search_tokens_at ORDER BY offset")?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        clear_tokens(self)?;
        let mut terms: Vec<String> = Vec::new();
        for t in tokens {
            if !terms.contains(&t) {
                terms.push(t);
            }
        }
        Ok(terms)
    }

    fn message_term_docs(&self, terms: &[String]) -> Result<Vec<u64>, DbError> {
        token_tables(self)?;
        let mut stmt = self.prepare_cached("SELECT doc FROM temp.message_terms WHERE term = ?1")?;
        terms
            .iter()
            .map(|t| {
                Ok(stmt
                    .query_row([t], |r| r.get::<_, i64>(0))
                    .optional()?
                    .map_or(0, |n| n.max(0) as u64))
            })
            .collect()
    }

    fn message_term_counts(
        &self,
        pks: &[i64],
        terms: &[String],
    ) -> Result<HashMap<i64, TermCounts>, DbError> {
        token_tables(self)?;
        clear_tokens(self)?;
        let ids = serde_json::to_string(pks).unwrap_or_else(|_| "[]".into());
        // One statement, so FTS5 writes the texts' tokens once.
        self.prepare_cached(
            "INSERT INTO temp.search_tokens(rowid, x)
             SELECT pk, content FROM messages WHERE pk IN (SELECT value FROM json_each(?1)) AND is_current = 1",
        )?
        .execute([ids])?;
        let mut out: HashMap<i64, TermCounts> = HashMap::new();
        let sizes: Vec<(i64, Vec<u8>)> = self
            .prepare_cached("SELECT id, sz FROM temp.search_tokens_docsize")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        for (pk, sz) in sizes {
            let len = varint(&sz).map_or(0, |(n, _)| u32::try_from(n).unwrap_or(u32::MAX));
            out.insert(
                pk,
                TermCounts {
                    len,
                    tf: vec![0; terms.len()],
                },
            );
        }
        let mut stmt = self.prepare_cached(
            "SELECT doc, count(*) FROM temp.search_tokens_at WHERE term = ?1 GROUP BY doc",
        )?;
        for (i, t) in terms.iter().enumerate() {
            let rows = stmt.query_map([t], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?;
            for row in rows {
                let (pk, n) = row?;
                if let Some(c) = out.get_mut(&pk) {
                    c.tf[i] = u32::try_from(n).unwrap_or(u32::MAX);
                }
            }
        }
        clear_tokens(self)?;
        Ok(out)
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

    fn entity_threads(&self, ids: &[String], limit: usize) -> Result<Vec<String>, DbError> {
        crate::graph::threads_of_entities(self, ids, limit)
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

    fn knowledge(&self, expr: &str, limit: usize) -> Result<Vec<KnowledgeMatch>, DbError> {
        let mut found: Vec<KnowledgeMatch> = self
            .prepare_cached(
                "SELECT e.id, e.kind, e.topic, e.position, bm25(knowledge_fts) AS score
                 FROM knowledge_fts JOIN knowledge_entries e ON e.rowid = knowledge_fts.rowid
                 WHERE knowledge_fts MATCH ?1 AND e.status = 'approved'
                 ORDER BY score LIMIT ?2",
            )?
            .query_map(params![expr, limit as i64], |r| {
                Ok(KnowledgeMatch {
                    id: r.get(0)?,
                    kind: r.get(1)?,
                    topic: r.get(2)?,
                    position: r.get(3)?,
                    bm25: r.get(4)?,
                    sources: Vec::new(),
                    source_pks: Vec::new(),
                })
            })?
            .collect::<Result<_, _>>()?;
        let mut stmt = self.prepare_cached(
            "SELECT m.id, m.pk FROM knowledge_sources s JOIN messages m ON m.id = s.message_id
             WHERE s.entry_id = ?1 AND m.is_current = 1 ORDER BY m.pk LIMIT ?2",
        )?;
        for k in &mut found {
            let rows = stmt
                .query_map(params![k.id, KNOWLEDGE_SOURCES as i64], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            (k.sources, k.source_pks) = rows.into_iter().unzip();
        }
        Ok(found)
    }

    fn heat_of(
        &self,
        kind: crate::heat::Kind,
        ids: &[String],
    ) -> Result<std::collections::HashMap<String, f64>, DbError> {
        crate::heat::heat_of(self, kind, ids)
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

    #[test]
    fn reads_the_tokenizer_of_a_declaration() {
        let sql = "CREATE VIRTUAL TABLE messages_fts USING fts5(\n content, content='messages', tokenize = \"porter unicode61\")";
        assert_eq!(fts_tokenizer(sql), Some("porter unicode61"));
        assert_eq!(
            fts_tokenizer("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='trigram')"),
            Some("trigram")
        );
        assert_eq!(fts_tokenizer("CREATE VIRTUAL TABLE t USING fts5(x)"), None);
        assert_eq!(
            fts_tokenizer("CREATE VIRTUAL TABLE t USING fts5(x, tokenize=)"),
            None
        );
    }

    /// Terms are whatever the messages index's declared tokenizer makes of the words: the same words give other
    /// terms under another declaration, so no second tokenizer can drift from it.
    #[test]
    fn terms_follow_the_tokenizer_the_index_declares() {
        let terms = |tokenizer: &str| {
            let conn = Connection::open_in_memory().unwrap();
            conn.execute_batch(&format!(
                "CREATE TABLE messages (pk INTEGER PRIMARY KEY, content TEXT, is_current INTEGER);
                 CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='pk'{tokenizer});"
            ))
            .unwrap();
            conn.message_terms("Running, the turtles RAN; running Ünïcödé")
                .unwrap()
        };
        assert_eq!(
            terms(", tokenize='porter unicode61'"),
            ["run", "the", "turtl", "ran", "unicod"]
        );
        assert_eq!(terms(""), ["running", "the", "turtles", "ran", "unicode"]);
        assert_eq!(
            terms(", tokenize='unicode61 remove_diacritics 0'"),
            ["running", "the", "turtles", "ran", "ünïcödé"]
        );
    }

    /// On a real corpus opened read-only: terms, document counts and term counts come from the index, the counts
    /// cover current messages only, and nothing is left behind between calls.
    #[test]
    fn term_statistics_on_a_read_only_corpus() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let conn = crate::db::open(&path).unwrap();
        conn.execute_batch(
            "INSERT INTO messages_fts(rowid, content) VALUES (1, 'Turtles love the lake'), (2, 'A turtle; turtles!')",
        )
        .unwrap();
        let ro = crate::db::open_read_only(&path).unwrap();
        let terms = ro.message_terms("turtles lake piano").unwrap();
        assert_eq!(terms, ["turtl", "lake", "piano"]);
        assert_eq!(ro.message_term_docs(&terms).unwrap(), [2, 1, 0]);
        // The index rows have no current message behind them, so there is nothing to count.
        assert!(ro.message_term_counts(&[1, 2], &terms).unwrap().is_empty());
        assert_eq!(ro.message_terms("").unwrap(), Vec::<String>::new());
        let temp_store: i64 = ro.query_row("PRAGMA temp_store", [], |r| r.get(0)).unwrap();
        assert_eq!(temp_store, 2, "the texts counted stay in memory");
    }
}
