//! Whether two names look alike: trigram similarity as PostgreSQL's `pg_trgm` defines it (each word lower-cased
//! and padded with two spaces before and one after, the set of its three-character windows; similarity is the
//! shared trigrams over all of them). Pairs above [`THRESHOLD`] are proposed as merges.

use std::collections::BTreeSet;

/// Names more alike than this are proposed as one entity (the seed's 0.4).
pub const THRESHOLD: f64 = 0.4;

/// A name's set of trigrams.
pub type Trigrams = BTreeSet<[char; 3]>;

/// The trigrams of a name.
pub fn trigrams(name: &str) -> Trigrams {
    let mut out = BTreeSet::new();
    for word in name
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let padded: Vec<char> = "  ".chars().chain(word.chars()).chain([' ']).collect();
        for w in padded.windows(3) {
            out.insert([w[0], w[1], w[2]]);
        }
    }
    out
}

/// Similarity of two trigram sets in [0, 1].
pub fn similarity_of(a: &Trigrams, b: &Trigrams) -> f64 {
    let shared = a.intersection(b).count();
    let all = a.len() + b.len() - shared;
    if all == 0 {
        0.0
    } else {
        shared as f64 / all as f64
    }
}

/// Similarity of two names in [0, 1].
pub fn similarity(a: &str, b: &str) -> f64 {
    similarity_of(&trigrams(a), &trigrams(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn similarity_follows_pg_trgm() {
        // pg_trgm: similarity('word', 'two words') = 0.363636 (4 shared of 11).
        assert!((similarity("word", "two words") - 4.0 / 11.0).abs() < 1e-9);
        assert_eq!(similarity("Priya Shah", "priya shah"), 1.0);
        assert!(similarity("Priya Shah", "Priya Sha") > THRESHOLD);
        assert!(similarity("personkit", "personkit-relay") > THRESHOLD);
        assert!(similarity("atlas", "zephyr") < THRESHOLD);
        assert_eq!(similarity("", ""), 0.0);
    }
}
