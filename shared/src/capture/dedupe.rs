//! The set of turns this browser has already queued for the relay, so that re-reading a page (every quiet
//! period, every revisit) sends nothing twice. Bounded: the oldest keys are forgotten first, and a forgotten turn
//! that is seen again is merely sent again, which the relay answers with `duplicate`.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Default bound on remembered turns.
pub const DEFAULT_SEEN_CAPACITY: usize = 20_000;

/// A bounded, serialisable set of turn keys, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "SeenWire", into = "SeenWire")]
pub struct SeenSet {
    capacity: usize,
    order: VecDeque<String>,
    /// The same keys, sorted, for lookup (a sorted Vec keeps the wasm smaller than a hash set).
    sorted: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct SeenWire {
    #[serde(default = "default_capacity")]
    capacity: usize,
    #[serde(default)]
    keys: Vec<String>,
}

fn default_capacity() -> usize {
    DEFAULT_SEEN_CAPACITY
}

impl From<SeenWire> for SeenSet {
    fn from(w: SeenWire) -> Self {
        let mut s = SeenSet::new(w.capacity);
        for k in w.keys {
            s.insert(k);
        }
        s
    }
}

impl From<SeenSet> for SeenWire {
    fn from(s: SeenSet) -> Self {
        SeenWire {
            capacity: s.capacity,
            keys: s.order.into_iter().collect(),
        }
    }
}

impl Default for SeenSet {
    fn default() -> Self {
        SeenSet::new(DEFAULT_SEEN_CAPACITY)
    }
}

impl SeenSet {
    pub fn new(capacity: usize) -> SeenSet {
        SeenSet {
            capacity: capacity.max(1),
            order: VecDeque::new(),
            sorted: Vec::new(),
        }
    }

    /// The dedupe key of a turn: a short digest of thread id, message key and content hash. The content hash and
    /// thread id come from `crate::ids`; this only combines them.
    pub fn key(thread_id: &str, message_key: Option<&str>, content_hash: &str) -> String {
        let mut h = Sha256::new();
        h.update(thread_id.as_bytes());
        h.update([0x1E]);
        h.update(message_key.unwrap_or("").as_bytes());
        h.update([0x1E]);
        h.update(content_hash.as_bytes());
        hex::encode(&h.finalize()[..10])
    }

    pub fn contains(&self, key: &str) -> bool {
        self.sorted
            .binary_search_by(|k| k.as_str().cmp(key))
            .is_ok()
    }

    /// Remember a key; returns false when it was already there. Evicts the oldest keys beyond the capacity.
    pub fn insert(&mut self, key: String) -> bool {
        let Err(at) = self.sorted.binary_search(&key) else {
            return false;
        };
        self.sorted.insert(at, key.clone());
        self.order.push_back(key);
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front()
                && let Ok(i) = self.sorted.binary_search(&old)
            {
                self.sorted.remove(i);
            }
        }
        true
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keys_differ_by_each_part() {
        let a = SeenSet::key("t", None, "h");
        assert_ne!(a, SeenSet::key("t", Some("k"), "h"));
        assert_ne!(a, SeenSet::key("u", None, "h"));
        assert_ne!(a, SeenSet::key("t", None, "i"));
        assert_eq!(a, SeenSet::key("t", None, "h"));
        assert_eq!(a.len(), 20);
    }

    proptest! {
        #[test]
        fn bounded_and_roundtrips(keys in proptest::collection::vec("[a-f]{1,3}", 0..200), cap in 1usize..50) {
            let mut s = SeenSet::new(cap);
            for k in &keys {
                s.insert(k.clone());
                prop_assert!(s.len() <= cap);
                prop_assert!(s.contains(k));
            }
            let json = serde_json::to_string(&s).unwrap();
            let back: SeenSet = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(&back, &s);
            // With distinct keys, exactly the most recent `cap` are remembered.
            let mut distinct: Vec<&String> = Vec::new();
            for k in &keys {
                if !distinct.contains(&k) {
                    distinct.push(k);
                }
            }
            let mut t = SeenSet::new(cap);
            for k in &distinct {
                t.insert((*k).clone());
            }
            let keep = distinct.len().saturating_sub(cap);
            for (i, k) in distinct.iter().enumerate() {
                prop_assert_eq!(t.contains(k), i >= keep);
            }
        }
    }
}
