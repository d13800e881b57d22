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
//! FTS5 does not expose a word's document count, but its scores contain it: a candidate's score is
//! `Σ idf(t) · g(tf, len)` over the query's words, with `tf` and `len` known once the candidate's text is
//! tokenized like FTS5 tokenizes it ([`crate::stem`]). [`idf_from_scores`] solves those equations for the
//! `idf`s (least squares over all candidates; exact when the tokenizers agree).

/// FTS5's `bm25()` constants.
pub const K1: f64 = 1.2;
pub const B: f64 = 0.75;
/// Queries with more distinct words than this are not scored as pairs: recovering the IDFs solves a system as large
/// as the word count (cubic time), and a question has far fewer content words.
pub const MAX_TERMS: usize = 32;
/// FTS5's floor for a word in more than half the rows.
const MIN_IDF: f64 = 1e-6;

/// The query's words as FTS5 stores them (stemmed).
#[derive(Debug, Clone)]
pub struct Terms {
    stems: Vec<String>,
}

impl Terms {
    /// The distinct indexed terms of the query's words.
    pub fn of(words: &[String]) -> Self {
        let mut stems: Vec<String> = Vec::new();
        for t in words.iter().flat_map(|w| crate::stem::tokens(w)) {
            if !stems.contains(&t) {
                stems.push(t);
            }
        }
        Terms { stems }
    }

    pub fn len(&self) -> usize {
        self.stems.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stems.is_empty()
    }

    /// Which term an ASCII word stems to, stemming it only when its start could lead there: the stemmer only
    /// rewrites the last few letters of a word (at most 3 of the stem differ from the word), never lengthens it,
    /// and leaves its first letter alone.
    fn ascii_match(&self, word: &str) -> Option<usize> {
        let w = word.as_bytes();
        let mut stemmed: Option<String> = None;
        for (i, t) in self.stems.iter().enumerate() {
            let t = t.as_bytes();
            if w.len() < t.len() {
                continue;
            }
            let p = t.len().saturating_sub(4).max(1).min(t.len());
            if !w[..p].eq_ignore_ascii_case(&t[..p]) {
                continue;
            }
            let s = stemmed.get_or_insert_with(|| crate::stem::term(word));
            if s.as_bytes() == t {
                return Some(i);
            }
        }
        None
    }

    fn index_of(&self, word: &str) -> Option<usize> {
        if word.is_ascii() {
            self.ascii_match(word)
        } else {
            let t = crate::stem::term(word);
            self.stems.iter().position(|s| *s == t)
        }
    }
}

/// How often each query term occurs in one text, and the text's length in tokens, as FTS5 counts them.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    tf: Vec<u32>,
    len: u32,
}

impl Counts {
    pub fn of(text: &str, terms: &Terms) -> Self {
        let mut tf = vec![0u32; terms.len()];
        let mut len = 0;
        let mut start = None;
        let mut count = |word: &str| {
            len += 1;
            if let Some(i) = terms.index_of(word) {
                tf[i] += 1;
            }
        };
        for (i, c) in text.char_indices() {
            match (c.is_alphanumeric(), start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    count(&text[s..i]);
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            count(&text[s..]);
        }
        Counts { tf, len }
    }

    /// Occurrences of term `i` (in [`Terms`] order).
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

/// Each word's IDF as FTS5 computed it, from candidates scored by FTS5: `(score, text)` with the score as
/// `-bm25()` (higher is better). `None` for a word no candidate contains.
pub fn idf_from_scores(terms: usize, rows: &[(f64, &Counts)], avg_len: f64) -> Vec<Option<f64>> {
    let m = terms;
    let mut ata = vec![vec![0.0f64; m]; m];
    let mut atb = vec![0.0f64; m];
    let mut seen = vec![false; m];
    for (score, text) in rows {
        let g: Vec<f64> = (0..m)
            .map(|t| saturate(text.tf(t), text.len(), avg_len))
            .collect();
        for i in 0..m {
            if g[i] == 0.0 {
                continue;
            }
            seen[i] = true;
            atb[i] += g[i] * score;
            for j in 0..m {
                ata[i][j] += g[i] * g[j];
            }
        }
    }
    let idx: Vec<usize> = (0..m).filter(|&i| seen[i]).collect();
    let n = idx.len();
    // The normal equations over the words seen, with a tiny ridge so words that always appear together still
    // get a (shared) answer.
    let mut a: Vec<Vec<f64>> = idx
        .iter()
        .map(|&i| {
            let mut row: Vec<f64> = idx.iter().map(|&j| ata[i][j]).collect();
            row.push(atb[i]);
            row
        })
        .collect();
    for (r, &i) in idx.iter().enumerate() {
        a[r][r] += 1e-9 * ata[i][i].max(1e-12);
    }
    let solved = solve(&mut a, n);
    let mut out = vec![None; m];
    for (r, &i) in idx.iter().enumerate() {
        out[i] = solved
            .as_ref()
            .map(|x| x[r])
            .filter(|x| x.is_finite())
            .map(|x| x.max(MIN_IDF));
    }
    out
}

/// Gaussian elimination with partial pivoting on an `n × (n+1)` augmented matrix.
fn solve(a: &mut [Vec<f64>], n: usize) -> Option<Vec<f64>> {
    for col in 0..n {
        let pivot = (col..n).max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))?;
        if a[pivot][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col].clone();
        for (r, row) in a.iter_mut().enumerate().take(n) {
            if r != col {
                let f = row[col] / pivot_row[col];
                if f != 0.0 {
                    for (x, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                        *x -= f * p;
                    }
                }
            }
        }
    }
    Some((0..n).map(|i| a[i][n] / a[i][i]).collect())
}

/// The IDF a word would have if each row held `texts` turns instead of one: its document count (recovered from
/// `idf` over `rows` rows, FTS5's formula `ln((N - n + 0.5) / (n + 0.5))`) multiplied by `texts`.
pub fn spread_idf(idf: f64, rows: f64, texts: f64) -> f64 {
    let e = idf.exp();
    let n = ((rows + 0.5 - 0.5 * e) / (e + 1.0)).max(0.0);
    let spread = (n * texts).min(rows);
    ((rows - spread + 0.5) / (spread + 0.5)).ln().max(MIN_IDF)
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

    /// FTS5's own scores and statistics on a small corpus: the recovered IDFs are FTS5's, and a pair scored here
    /// equals what FTS5 scores for a row holding the two turns as weighted columns.
    #[test]
    fn recovers_fts5_idf_and_scores_pairs_like_fts5() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61');
             CREATE VIRTUAL TABLE two USING fts5(x, y, tokenize='porter unicode61');
             CREATE VIRTUAL TABLE v USING fts5vocab(t, row);",
        )
        .unwrap();
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
        for (i, s) in texts.iter().enumerate() {
            conn.execute(
                "INSERT INTO t(rowid, x) VALUES (?1, ?2)",
                rusqlite::params![i as i64 + 1, s],
            )
            .unwrap();
        }
        let terms = Terms::of(&["turtles".into(), "lake".into(), "sunset".into()]);
        assert_eq!(terms.stems, ["turtl", "lake", "sunset"]);
        let counts: Vec<Counts> = texts.iter().map(|s| Counts::of(s, &terms)).collect();
        let avg = counts.iter().map(Counts::len).sum::<f64>() / texts.len() as f64;
        let rows: Vec<(i64, f64)> = conn
            .prepare("SELECT rowid, -bm25(t) FROM t WHERE t MATCH 'turtles OR lake OR sunset'")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let scored: Vec<(f64, &Counts)> = rows
            .iter()
            .map(|(id, s)| (*s, &counts[*id as usize - 1]))
            .collect();
        let idf = idf_from_scores(terms.len(), &scored, avg);
        let n = texts.len() as f64;
        for (t, got) in terms.stems.iter().zip(&idf) {
            let docs: f64 = conn
                .query_row("SELECT doc FROM v WHERE term = ?1", [t], |r| r.get(0))
                .unwrap();
            let want = ((n - docs + 0.5) / (docs + 0.5)).ln().max(MIN_IDF);
            let got = got.expect("every word is in some candidate");
            assert!((got - want).abs() < 1e-6, "{t}: {got} vs {want}");
        }
        // Turn 2 with turn 1 before it at weight 0.5, against FTS5 scoring the same two texts as columns.
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
        let docs: f64 = conn
            .query_row(
                "SELECT count(*) FROM two WHERE two MATCH 'turtles'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let rows2 = (texts.len() - 1) as f64;
        let idf2 = ((rows2 - docs + 0.5) / (docs + 0.5)).ln().max(MIN_IDF);
        let total: f64 = counts.iter().map(Counts::len).sum();
        let pair = Pair {
            turn: &counts[1],
            before: Some(&counts[0]),
            after: None,
        };
        let ours = score(&pair, &[idf2, 0.0, 0.0], 0.5, 0.0, total / rows2);
        assert!((ours - fts5).abs() < 1e-9, "{ours} vs {fts5}");
    }

    /// Counting only the query's terms finds every word the full stemmer maps to them, and counts every token.
    #[test]
    fn counts_find_every_word_that_stems_to_a_term() {
        let text = include_str!("../../../ARCHITECTURE.md");
        let mut words: Vec<&str> = text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        words.extend([
            "sensibility",
            "generalization",
            "hopping",
            "happy",
            "Ünïcödé",
            "relational",
        ]);
        for w in &words {
            let terms = Terms::of(&[(*w).to_owned()]);
            let c = Counts::of(w, &terms);
            assert_eq!((c.tf(0), c.len()), (1.0, 1.0), "{w} → {:?}", terms.stems);
        }
        let terms = Terms::of(&["running".into(), "sunset".into()]);
        let c = Counts::of("Runs, RUNNING and ran — a sunset; sunsets!", &terms);
        assert_eq!((c.tf(0), c.tf(1), c.len()), (2.0, 2.0, 7.0));
    }

    #[test]
    fn spread_idf_is_the_idf_of_a_multiplied_document_count() {
        let rows = 1000.0;
        let idf = ((rows - 10.0 + 0.5) / (10.0 + 0.5f64)).ln();
        let want = ((rows - 30.0 + 0.5) / (30.0 + 0.5f64)).ln();
        assert!((spread_idf(idf, rows, 3.0) - want).abs() < 1e-9);
        assert_eq!(spread_idf(MIN_IDF, rows, 3.0), MIN_IDF);
    }
}
