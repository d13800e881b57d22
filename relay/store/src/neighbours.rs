//! Document expansion measured without a migration, for benchmarks (the relay never calls this): a side FTS5
//! table in a corpus whose rows carry, beside each current message, the turn before it and the turn after it in
//! its thread as separate columns, and a [`SearchReader`] that answers the FTS part of a query from it with
//! per-column BM25 weights (everything else is the corpus as shipped). The retrieval and latency benchmarks use it
//! to decide whether the shipped index should carry the neighbouring turns before that costs a schema change.

use rusqlite::{Connection, params};

use crate::db::DbError;
use crate::retrieval::{KnowledgeMatch, RowMeta, SearchReader};
use crate::vectors::Kind;

/// The side table the benchmark builds (dropped and rebuilt on every run).
const TABLE: &str = "bench_context_fts";

/// Builds [`TABLE`] from the corpus's current messages. "Before" and "after" follow the turn order
/// ([`crate::order`]).
pub fn build(conn: &Connection) -> Result<usize, DbError> {
    conn.execute_batch(&format!(
        concat!(
            "DROP TABLE IF EXISTS {TABLE};
         CREATE VIRTUAL TABLE {TABLE} USING fts5(content, before, after, tokenize='porter unicode61');
         INSERT INTO {TABLE}(rowid, content, before, after)
         SELECT pk, content,
                COALESCE(LAG(content) OVER w, ''),
                COALESCE(LEAD(content) OVER w, '')
           FROM messages WHERE is_current = 1
         WINDOW w AS (PARTITION BY thread_id ",
            crate::order::order_by!("messages"),
            ");"
        ),
        TABLE = TABLE
    ))?;
    Ok(
        conn.query_row(&format!("SELECT count(*) FROM {TABLE}"), [], |r| {
            r.get::<_, i64>(0)
        })? as usize,
    )
}

/// The corpus, with FTS answered from [`TABLE`] as `bm25(content 1.0, before, after)`; a neighbour weighted 0
/// is not searched at all.
#[derive(Debug)]
pub struct NeighbourFts<'a> {
    pub conn: &'a Connection,
    pub before: f64,
    pub after: f64,
}

impl SearchReader for NeighbourFts<'_> {
    fn fts(&self, kind: Kind, expr: &str, limit: usize) -> Result<Vec<(i64, f64)>, DbError> {
        match kind {
            Kind::Message => self.fts_in(expr, None, limit),
            Kind::Event => self.conn.fts(kind, expr, limit),
        }
    }

    fn fts_in_threads(
        &self,
        expr: &str,
        threads: &[String],
        limit: usize,
    ) -> Result<Vec<(i64, f64)>, DbError> {
        self.fts_in(expr, Some(threads), limit)
    }

    fn row_meta(&self, kind: Kind, pk: i64) -> Result<Option<RowMeta>, DbError> {
        self.conn.row_meta(kind, pk)
    }

    fn next_in_thread(&self, pk: i64) -> Result<Option<i64>, DbError> {
        self.conn.next_in_thread(pk)
    }

    fn thread_order(&self, thread_id: &str) -> Result<Vec<i64>, DbError> {
        self.conn.thread_order(thread_id)
    }

    fn message_terms(&self, text: &str) -> Result<Vec<String>, DbError> {
        self.conn.message_terms(text)
    }

    fn message_term_docs(&self, terms: &[String]) -> Result<Vec<u64>, DbError> {
        self.conn.message_term_docs(terms)
    }

    fn message_term_counts(
        &self,
        pks: &[i64],
        terms: &[String],
    ) -> Result<std::collections::HashMap<i64, crate::retrieval::TermCounts>, DbError> {
        self.conn.message_term_counts(pks, terms)
    }

    fn fts_totals(&self, kind: Kind) -> Result<Option<(f64, f64)>, DbError> {
        self.conn.fts_totals(kind)
    }

    fn entities_named(&self, phrase: &str) -> Result<Vec<String>, DbError> {
        self.conn.entities_named(phrase)
    }

    fn entity_names(&self, id: &str) -> Result<Vec<String>, DbError> {
        self.conn.entity_names(id)
    }

    fn entity_threads(&self, ids: &[String], limit: usize) -> Result<Vec<String>, DbError> {
        self.conn.entity_threads(ids, limit)
    }

    fn knowledge(&self, expr: &str, limit: usize) -> Result<Vec<KnowledgeMatch>, DbError> {
        self.conn.knowledge(expr, limit)
    }

    fn recent_messages(&self, since: &str, until: &str, limit: usize) -> Result<Vec<i64>, DbError> {
        self.conn.recent_messages(since, until, limit)
    }

    fn vectors_in_threads(
        &self,
        model_key: &str,
        qv: &[f32],
        threads: &[String],
    ) -> Result<Vec<(i64, f64)>, DbError> {
        self.conn.vectors_in_threads(model_key, qv, threads)
    }

    fn vector_knn_exact(
        &self,
        kind: Kind,
        model_key: &str,
        qv: &[f32],
        k: usize,
    ) -> Result<Vec<(i64, f64)>, DbError> {
        self.conn.vector_knn_exact(kind, model_key, qv, k)
    }

    fn heat_of(
        &self,
        kind: crate::heat::Kind,
        ids: &[String],
    ) -> Result<std::collections::HashMap<String, f64>, DbError> {
        self.conn.heat_of(kind, ids)
    }

    fn vector_log_head(&self) -> Result<i64, DbError> {
        self.conn.vector_log_head()
    }

    fn vector_log_pruned_through(&self) -> Result<i64, DbError> {
        self.conn.vector_log_pruned_through()
    }

    fn vector_log_since(&self, seq: i64, kind: Kind) -> Result<Vec<(i64, i64)>, DbError> {
        self.conn.vector_log_since(seq, kind)
    }

    fn vector_of(&self, kind: Kind, pk: i64, model_key: &str) -> Result<Option<Vec<f32>>, DbError> {
        self.conn.vector_of(kind, pk, model_key)
    }

    fn for_each_vector(
        &self,
        kind: Kind,
        model_key: &str,
        dim: usize,
        f: &mut dyn FnMut(i64, &[f32]),
    ) -> Result<(), DbError> {
        self.conn.for_each_vector(kind, model_key, dim, f)
    }
}

impl NeighbourFts<'_> {
    fn fts_in(
        &self,
        expr: &str,
        threads: Option<&[String]>,
        limit: usize,
    ) -> Result<Vec<(i64, f64)>, DbError> {
        // A column weighted 0 is left out of the match: it would still add rows, at score 0.
        let mut columns = vec!["content"];
        if self.before > 0.0 {
            columns.push("before");
        }
        if self.after > 0.0 {
            columns.push("after");
        }
        let expr = format!("{{{}}} : ({expr})", columns.join(" "));
        // The same two statement shapes as the shipped `fts` and `fts_in_threads` (the table holds current
        // messages only), so the latency bench compares like with like.
        let threads = threads.map(|t| serde_json::to_string(t).unwrap_or_else(|_| "[]".into()));
        let sql = if threads.is_some() {
            format!(
                "SELECT {TABLE}.rowid, bm25({TABLE}, 1.0, ?4, ?5) AS score FROM {TABLE}
                 JOIN messages m ON m.pk = {TABLE}.rowid
                 WHERE {TABLE} MATCH ?1 AND m.thread_id IN (SELECT value FROM json_each(?2))
                 ORDER BY score LIMIT ?3"
            )
        } else {
            format!(
                "SELECT f.pk, f.score FROM (SELECT rowid AS pk, bm25({TABLE}, 1.0, ?4, ?5) AS score FROM {TABLE}
                   WHERE {TABLE} MATCH ?1 ORDER BY score LIMIT ?3) AS f"
            )
        };
        let mut st = self.conn.prepare_cached(&sql)?;
        let rows = st
            .query_map(
                params![expr, threads, limit as i64, self.before, self.after],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use personkit_shared::wire::Role;

    use super::*;
    use crate::bulk::{self, BulkMessage};

    fn turn(conversation: &str, ordinal: u32, role: Role, content: &str) -> BulkMessage {
        BulkMessage {
            surface: "chatgpt".into(),
            conversation_id: conversation.into(),
            title: conversation.into(),
            role,
            content: content.into(),
            ordinal,
            at: format!("2026-11-25T10:00:{ordinal:02}.000Z"),
            vector: None,
        }
    }

    /// A reply that does not repeat the question's words is found through the turn before it, only in its own
    /// thread, and the turn before it keeps the better score; the shipped index does not find the reply at all.
    #[test]
    fn a_reply_is_found_by_the_words_of_the_turn_it_answers() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = crate::db::open(&dir.path().join("corpus.db")).unwrap();
        // Stored out of order: the neighbours come from ordinals, not from insertion order.
        let rows = vec![
            turn("a", 2, Role::User, "thanks"),
            turn("a", 0, Role::User, "which fruit grows best on a balcony"),
            turn("a", 1, Role::Assistant, "mangoes in large pots"),
            turn("b", 0, Role::User, "tell me about trains"),
            turn("b", 1, Role::Assistant, "they run on rails"),
        ];
        bulk::load(
            &mut conn,
            &rows,
            None,
            "test",
            1,
            "2026-11-25T10:00:00.000Z",
        )
        .unwrap();
        assert_eq!(build(&conn).unwrap(), 5);
        let of = |content: &str| -> (i64, String) {
            conn.query_row(
                "SELECT pk, thread_id FROM messages WHERE content = ?1",
                [content],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
        };
        let pk_of = |content: &str| of(content).0;
        let thread_of = |content: &str| of(content).1;
        let a = vec![thread_of("thanks")];
        let shipped = conn.fts_in_threads("\"fruit\"", &a, 10).unwrap();
        assert_eq!(
            shipped.iter().map(|h| h.0).collect::<Vec<_>>(),
            vec![pk_of("which fruit grows best on a balcony")]
        );
        let expanded = NeighbourFts {
            conn: &conn,
            before: 0.5,
            after: 0.0,
        };
        let hits = expanded.fts_in_threads("\"fruit\"", &a, 10).unwrap();
        assert_eq!(
            hits.iter().map(|h| h.0).collect::<Vec<_>>(),
            vec![
                pk_of("which fruit grows best on a balcony"),
                pk_of("mangoes in large pots")
            ],
            "the question first, then its reply through the `before` column"
        );
        // Unrestricted (the statement shape of an unscoped search): the same two rows.
        let everywhere = expanded.fts(Kind::Message, "\"fruit\"", 10).unwrap();
        assert_eq!(
            everywhere.iter().map(|h| h.0).collect::<Vec<_>>(),
            hits.iter().map(|h| h.0).collect::<Vec<_>>()
        );
        // "thanks" comes after the reply, so it carries "mangoes" as its turn before, never "fruit".
        let b = vec![thread_of("they run on rails")];
        assert!(
            expanded
                .fts_in_threads("\"fruit\"", &b, 10)
                .unwrap()
                .is_empty()
        );
        let after = NeighbourFts {
            conn: &conn,
            before: 0.0,
            after: 0.5,
        };
        let by_next = after.fts_in_threads("\"mangoes\"", &a, 10).unwrap();
        assert_eq!(
            by_next.iter().map(|h| h.0).collect::<Vec<_>>(),
            vec![
                pk_of("mangoes in large pots"),
                pk_of("which fruit grows best on a balcony")
            ],
            "with only `after` weighted, the question is found through its reply and `thanks` is not"
        );
    }
}
