//! Reciprocal rank fusion: pure, no I/O. Each signal gives a ranked list of keys; a key's fused score is
//! `sum over signals of weight / (k + rank)` with 1-based ranks. Ties break on the number of signals that found
//! the key, then on the best single rank, then on the key, so the order is deterministic.

use std::collections::HashMap;

use serde::Serialize;

/// A retrieval signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Signal {
    Fts,
    Vector,
    Entity,
    Recency,
    /// Not a list of its own: the turn right before this one in its thread matched ([`crate::Query::context`]).
    Context,
    /// The message is from a date the question names ([`crate::when`]).
    Date,
    /// The question asks when, and the message says when ([`crate::when`]).
    When,
    /// An approved knowledge entry the words matched cites the message ([`crate::Query::knowledge`]).
    Knowledge,
}

impl Signal {
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Fts => "fts",
            Signal::Vector => "vector",
            Signal::Entity => "entity",
            Signal::Recency => "recency",
            Signal::Context => "context",
            Signal::Date => "date",
            Signal::When => "when",
            Signal::Knowledge => "knowledge",
        }
    }
}

/// One signal's ranked candidates, best first, with the signal's own score (BM25, cosine, ...).
#[derive(Debug, Clone)]
pub struct Ranked<K> {
    pub signal: Signal,
    pub weight: f64,
    pub items: Vec<(K, f64)>,
}

/// Where one signal put a fused key.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SignalRank {
    /// 1-based rank within the signal's list.
    pub rank: usize,
    /// The signal's own score.
    pub score: f64,
}

/// A fused result.
#[derive(Debug, Clone, PartialEq)]
pub struct Fused<K> {
    pub key: K,
    pub score: f64,
    /// Signals that found the key, in [`Signal`] order.
    pub via: Vec<(Signal, SignalRank)>,
}

/// Fuses ranked lists with RRF constant `k` (60 is the usual default). A key listed twice by one signal counts at
/// its best rank.
pub fn rrf<K: Clone + Eq + std::hash::Hash + Ord>(lists: &[Ranked<K>], k: f64) -> Vec<Fused<K>> {
    fuse(lists, |list| {
        let weight = list.weight;
        move |rank: usize, _score: f64| weight / (k + rank as f64)
    })
}

/// Score-aware fusion: each signal's scores are divided by its best score (so the best is 1 and every listed
/// candidate keeps some credit; lists with non-positive scores are min-max normalised instead), then summed
/// with the signal weights. Unlike
/// RRF it keeps how far ahead a signal's best candidate is, so a weak signal's rank 1 cannot override a strong
/// signal's confident rank 1. Ranks are still reported per signal.
pub fn convex<K: Clone + Eq + std::hash::Hash + Ord>(lists: &[Ranked<K>]) -> Vec<Fused<K>> {
    fuse(lists, |list| {
        let scores = || list.items.iter().map(|(_, s)| *s);
        let max = scores().fold(f64::NEG_INFINITY, f64::max);
        let min = scores().fold(f64::INFINITY, f64::min);
        let span = max - min;
        let weight = list.weight;
        move |_rank: usize, score: f64| {
            let norm = if min > 0.0 && max.is_finite() {
                score / max
            } else if span > 0.0 && span.is_finite() {
                (score - min) / span
            } else {
                1.0
            };
            weight * norm
        }
    })
}

/// The fusion both methods share: `credit_for(list)` gives, per list, the credit of a candidate from its 1-based
/// rank and score; a key listed twice by one signal counts once, at its best rank. Results are ordered by fused
/// score, then by how many signals found them, then by their best rank, then by key (deterministic).
fn fuse<K, F>(lists: &[Ranked<K>], credit_for: impl Fn(&Ranked<K>) -> F) -> Vec<Fused<K>>
where
    K: Clone + Eq + std::hash::Hash + Ord,
    F: Fn(usize, f64) -> f64,
{
    let mut acc: HashMap<K, Fused<K>> = HashMap::new();
    for list in lists {
        let credit = credit_for(list);
        let mut seen = std::collections::HashSet::new();
        for (i, (key, score)) in list.items.iter().enumerate() {
            if !seen.insert(key) {
                continue;
            }
            let rank = i + 1;
            let e = acc.entry(key.clone()).or_insert_with(|| Fused {
                key: key.clone(),
                score: 0.0,
                via: Vec::new(),
            });
            e.score += credit(rank, *score);
            e.via.push((
                list.signal,
                SignalRank {
                    rank,
                    score: *score,
                },
            ));
        }
    }
    let mut out: Vec<Fused<K>> = acc.into_values().collect();
    for f in out.iter_mut() {
        f.via.sort_by_key(|(s, _)| *s);
    }
    let best = |f: &Fused<K>| {
        f.via
            .iter()
            .map(|(_, r)| r.rank)
            .min()
            .unwrap_or(usize::MAX)
    };
    out.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.via.len().cmp(&a.via.len()))
            .then(best(a).cmp(&best(b)))
            .then(a.key.cmp(&b.key))
    });
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn list(signal: Signal, keys: &[&'static str]) -> Ranked<&'static str> {
        Ranked {
            signal,
            weight: 1.0,
            items: keys
                .iter()
                .enumerate()
                .map(|(i, k)| (*k, 1.0 / (i + 1) as f64))
                .collect(),
        }
    }

    #[test]
    fn two_signals_outrank_one() {
        let out = rrf(
            &[
                list(Signal::Fts, &["a", "b", "c"]),
                list(Signal::Vector, &["x", "y", "c"]),
            ],
            60.0,
        );
        assert_eq!(out[0].key, "c");
        assert_eq!(out[0].via.len(), 2);
        assert_eq!(out[0].via[0].0, Signal::Fts);
        assert_eq!(out[0].via[0].1.rank, 3);
    }

    #[test]
    fn duplicate_keys_count_once_at_best_rank() {
        let out = rrf(&[list(Signal::Fts, &["a", "a", "b"])], 60.0);
        assert_eq!(out.len(), 2);
        assert!((out[0].score - 1.0 / 61.0).abs() < 1e-12);
    }

    #[test]
    fn convex_keeps_a_confident_lead() {
        // FTS: "a" far ahead of "b"; vector: "b" slightly ahead of "a". Convex fusion with FTS weighted higher
        // keeps "a" first.
        let fts = Ranked {
            signal: Signal::Fts,
            weight: 0.7,
            items: vec![("a", 10.0), ("b", 2.0), ("c", 1.0)],
        };
        let vec = Ranked {
            signal: Signal::Vector,
            weight: 0.3,
            items: vec![("b", 0.62), ("a", 0.60), ("c", 0.1)],
        };
        let out = convex(&[fts, vec]);
        assert_eq!(out[0].key, "a");
        assert_eq!(out[0].via.len(), 2);
        // Found by both beats found by one at equal normalised strength.
        let only = Ranked {
            signal: Signal::Fts,
            weight: 0.7,
            items: vec![("x", 1.0), ("y", 1.0)],
        };
        let both = Ranked {
            signal: Signal::Vector,
            weight: 0.3,
            items: vec![("y", 1.0)],
        };
        assert_eq!(convex(&[only, both])[0].key, "y");
    }

    #[test]
    fn weights_scale_contributions() {
        let mut v = list(Signal::Vector, &["v"]);
        v.weight = 0.5;
        let out = rrf(&[list(Signal::Fts, &["f"]), v], 60.0);
        assert_eq!(out[0].key, "f");
        assert!((out[1].score - 0.5 / 61.0).abs() < 1e-12);
    }
}
