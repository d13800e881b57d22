//! BM25 of a turn together with its neighbours, computed for the full-text candidates only.
//!
//! In a conversation the words of a question are often in the turn before its answer ("How long have you had
//! them?" / "Three years now"). Scoring each message as if the turn before it (and, less, the turn after it)
//! were extra fields of the same document finds such answers: on LoCoMo's dev split it lifts recall@5 of the
//! full-text signal by ~0.1 (BENCHMARKS.md). A second FTS5 index holding every turn with its neighbours would
//! score every matching row twice over and cost ~1.7× per query at 10^6 messages, so this module scores only the
//! candidates the ordinary index returned and the turns right after them, with FTS5's own formula
//! (`bm25()` with column weights: term frequencies summed with the weights before saturation, the row's whole
//! length against the average).
//!
//! Everything the formula needs comes from SQLite: the query's words as the index stores them, each word's
//! document count (FTS5's `fts5vocab`), each text's term frequencies and length (the text passed through FTS5's
//! tokenizer), the row count and average length (FTS5's averages record) — all through
//! `personkit_store::retrieval::SearchReader`. This module only does the arithmetic.

use personkit_store::retrieval::TermCounts;

/// FTS5's `bm25()` constants.
pub const K1: f64 = 1.2;
pub const B: f64 = 0.75;
/// Queries with more distinct words than this are not scored as pairs: each word costs a document-count look-up
/// (FTS5 walks the word's whole posting list) and a question has far fewer content words.
pub const MAX_TERMS: usize = 32;
/// FTS5's floor for a word in more than half the rows.
const MIN_IDF: f64 = 1e-6;

/// How often each query term occurs in one text, and the text's length in tokens, as FTS5 counts them.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    tf: Vec<u32>,
    len: u32,
}

impl From<TermCounts> for Counts {
    fn from(c: TermCounts) -> Self {
        Counts {
            tf: c.tf,
            len: c.len,
        }
    }
}

impl Counts {
    /// Occurrences of term `i` (in the order the terms were asked).
    pub fn tf(&self, i: usize) -> f64 {
        self.tf.get(i).copied().unwrap_or(0) as f64
    }

    pub fn len(&self) -> f64 {
        self.len as f64
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The saturated, length-normalised term frequency of BM25.
pub fn saturate(tf: f64, len: f64, avg_len: f64) -> f64 {
    if tf <= 0.0 {
        return 0.0;
    }
    let avg = if avg_len > 0.0 { avg_len } else { 1.0 };
    tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / avg))
}

/// FTS5's IDF of a word found in `docs` of `rows` rows: `ln((N - n + 0.5) / (n + 0.5))`, floored.
pub fn idf(docs: f64, rows: f64) -> f64 {
    ((rows - docs + 0.5) / (docs + 0.5)).ln().max(MIN_IDF)
}

/// The IDF a word would have if each row held `texts` turns instead of one: its document count multiplied by
/// `texts` (at most every row).
pub fn spread_idf(docs: f64, rows: f64, texts: f64) -> f64 {
    idf((docs * texts).min(rows), rows)
}

/// A turn with the turn before and the turn after it, weighted like FTS5 column weights.
#[derive(Debug)]
pub struct Pair<'a> {
    pub turn: &'a Counts,
    pub before: Option<&'a Counts>,
    pub after: Option<&'a Counts>,
}

/// The pair's BM25 (higher is better) for words with the given IDFs.
pub fn score(pair: &Pair<'_>, idf: &[f64], w_before: f64, w_after: f64, avg_len: f64) -> f64 {
    let len = pair.turn.len()
        + pair.before.map_or(0.0, Counts::len)
        + pair.after.map_or(0.0, Counts::len);
    idf.iter()
        .enumerate()
        .map(|(t, idf)| {
            let tf = pair.turn.tf(t)
                + w_before * pair.before.map_or(0.0, |c| c.tf(t))
                + w_after * pair.after.map_or(0.0, |c| c.tf(t));
            idf * saturate(tf, len, avg_len)
        })
        .sum()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    use std::collections::HashMap;

    use personkit_store::retrieval::SearchReader;
    use personkit_store::vectors::Kind;

    /// A corpus of `texts` (pk = position + 1) with the relay's `messages_fts` declaration, and `extra` rows that
    /// are indexed but no longer current.
    fn corpus(texts: &[&str], extra: &[&str]) -> rusqlite::Connection {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE messages (pk INTEGER PRIMARY KEY, content TEXT NOT NULL, is_current INTEGER NOT NULL);
             CREATE VIRTUAL TABLE messages_fts USING fts5(
                 content, content='messages', content_rowid='pk', tokenize='porter unicode61');",
        )
        .unwrap();
        let all = texts
            .iter()
            .map(|t| (t, 1))
            .chain(extra.iter().map(|t| (t, 0)));
        for (i, (t, current)) in all.enumerate() {
            conn.execute(
                "INSERT INTO messages(pk, content, is_current) VALUES (?1, ?2, ?3)",
                rusqlite::params![i as i64 + 1, t, current],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO messages_fts(rowid, content) VALUES (?1, ?2)",
                rusqlite::params![i as i64 + 1, t],
            )
            .unwrap();
        }
        conn
    }

    /// With SQLite's own counts (terms, document counts, term frequencies, lengths, averages), a turn alone scores
    /// exactly what `bm25()` scores it, and a pair exactly what FTS5 scores for a row holding the two turns as
    /// weighted columns.
    #[test]
    fn scores_turns_and_pairs_like_fts5_from_its_own_counts() {
        let texts = [
            "How long have you had the turtles?",
            "Three years now, and the turtles bring me joy",
            "I went to the pottery class yesterday",
            "Pottery is relaxing; painting too",
            "We painted a sunset at the lake last summer",
            "The lake was calm and the sunset was orange",
            "My turtles love the lake",
            "Nothing to see here",
        ];
        let conn = corpus(&texts, &["An older revision: turtles, turtles and a lake"]);
        let terms = conn.message_terms("Turtles lake SUNSETS turtle").unwrap();
        assert_eq!(terms, ["turtl", "lake", "sunset"]);
        let (rows, avg) = conn.fts_totals(Kind::Message).unwrap().unwrap();
        assert_eq!(rows, 9.0);
        let docs = conn.message_term_docs(&terms).unwrap();
        assert_eq!(docs, [4, 4, 2]);
        let idfs: Vec<f64> = docs.iter().map(|&n| idf(n as f64, rows)).collect();
        let pks: Vec<i64> = (1..=9).collect();
        let counts: HashMap<i64, Counts> = conn
            .message_term_counts(&pks, &terms)
            .unwrap()
            .into_iter()
            .map(|(pk, c)| (pk, c.into()))
            .collect();
        assert_eq!(counts.len(), texts.len(), "the older revision is left out");
        assert_eq!((counts[&2].tf(0), counts[&2].len()), (1.0, 9.0));
        let found: Vec<(i64, f64)> = conn
            .prepare("SELECT rowid, -bm25(messages_fts) FROM messages_fts WHERE messages_fts MATCH 'turtles OR lake OR sunset'")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(found.len(), 6);
        for (pk, fts5) in found.iter().filter(|(pk, _)| *pk <= 8) {
            let alone = Pair {
                turn: &counts[pk],
                before: None,
                after: None,
            };
            let ours = score(&alone, &idfs, 0.0, 0.0, avg);
            assert!((ours - fts5).abs() < 1e-9, "{pk}: {ours} vs {fts5}");
        }
        // Turn 2 with turn 1 before it at weight 0.5, against FTS5 scoring the same two texts as columns.
        conn.execute_batch(
            "CREATE VIRTUAL TABLE two USING fts5(x, y, tokenize='porter unicode61');",
        )
        .unwrap();
        conn.execute(
            "INSERT INTO two(rowid, x, y) VALUES (1, ?1, ?2)",
            [texts[1], texts[0]],
        )
        .unwrap();
        for (i, s) in texts.iter().enumerate().skip(2) {
            conn.execute(
                "INSERT INTO two(rowid, x, y) VALUES (?1, ?2, '')",
                rusqlite::params![i as i64, s],
            )
            .unwrap();
        }
        let fts5: f64 = conn
            .query_row(
                "SELECT -bm25(two, 1.0, 0.5) FROM two WHERE two MATCH 'turtles' AND rowid = 1",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let docs2: f64 = conn
            .query_row(
                "SELECT count(*) FROM two WHERE two MATCH 'turtles'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let rows2 = (texts.len() - 1) as f64;
        let total: f64 = counts.values().map(Counts::len).sum();
        let pair = Pair {
            turn: &counts[&2],
            before: Some(&counts[&1]),
            after: None,
        };
        let ours = score(
            &pair,
            &[idf(docs2, rows2), 0.0, 0.0],
            0.5,
            0.0,
            total / rows2,
        );
        assert!((ours - fts5).abs() < 1e-9, "{ours} vs {fts5}");
    }

    #[test]
    fn spread_idf_is_the_idf_of_a_multiplied_document_count() {
        let rows = 1000.0;
        let want = ((rows - 30.0 + 0.5) / (30.0 + 0.5f64)).ln();
        assert!((spread_idf(10.0, rows, 3.0) - want).abs() < 1e-9);
        assert_eq!(spread_idf(400.0, rows, 3.0), MIN_IDF);
        assert_eq!(idf(600.0, rows), MIN_IDF);
    }
}
