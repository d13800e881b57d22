//! The set of turns this browser has already queued for the relay, so that re-reading a page (every quiet
//! period, every revisit) sends nothing twice. Bounded: the oldest keys are forgotten first, and a forgotten turn
//! that is seen again is merely sent again, which the relay answers with `duplicate`.
//!
//! The set lives in the capture core for as long as the worker runs and is persisted key by key: every insert and
//! eviction is journalled ([`SeenSet::take_changes`]) with a persistent sequence number that orders the keys when
//! they are loaded again ([`SeenSet::from_records`], linear in the number of keys after a sort). Lookups, inserts
//! and evictions cost the same at 20,000 keys as at 10: a small open-addressing index over the keys (linear
//! probing, backward-shift deletion; a hand-written table keeps the wasm smaller than `std`'s hash set).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Default bound on remembered turns.
pub const DEFAULT_SEEN_CAPACITY: usize = 20_000;

/// A bounded set of turn keys, oldest first.
#[derive(Debug, Clone)]
pub struct SeenSet {
    capacity: usize,
    /// The keys, oldest first, each with its persistent sequence number.
    order: VecDeque<(u64, String)>,
    /// Position (in `order`, counted from `head`) + 1 of the key hashed to each slot; 0 = empty. A power of two
    /// at least twice as long as `order`.
    slots: Vec<u64>,
    /// How many keys were evicted from the front of `order`, ever (positions in `slots` are counted from it).
    head: u64,
    /// The sequence number the next inserted key gets.
    next_seq: u64,
    /// Inserted and evicted since the last [`SeenSet::take_changes`].
    added: Vec<(String, u64)>,
    removed: Vec<String>,
}

/// What changed in a [`SeenSet`]: keys to delete, then keys to store with their sequence numbers (in that order:
/// a key forgotten and seen again in one call is deleted and stored anew).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SeenChanges {
    pub put: Vec<(String, u64)>,
    pub delete: Vec<String>,
}

impl SeenChanges {
    pub fn is_empty(&self) -> bool {
        self.put.is_empty() && self.delete.is_empty()
    }
}

/// The form an older version stored the whole set in (one record): `{capacity, keys}`, oldest first.
#[derive(Debug, Serialize, Deserialize)]
pub struct SeenWire {
    #[serde(default = "default_capacity")]
    pub capacity: usize,
    #[serde(default)]
    pub keys: Vec<String>,
}

fn default_capacity() -> usize {
    DEFAULT_SEEN_CAPACITY
}

impl Default for SeenWire {
    fn default() -> Self {
        SeenWire {
            capacity: DEFAULT_SEEN_CAPACITY,
            keys: Vec::new(),
        }
    }
}

impl Default for SeenSet {
    fn default() -> Self {
        SeenSet::new(DEFAULT_SEEN_CAPACITY)
    }
}

impl PartialEq for SeenSet {
    /// The same capacity and the same keys in the same order (sequence numbers and journals aside).
    fn eq(&self, other: &Self) -> bool {
        self.capacity == other.capacity && self.keys().eq(other.keys())
    }
}

/// FNV-1a: the keys are digests already, any spread will do, and this is a few bytes of wasm.
fn hash(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl SeenSet {
    pub fn new(capacity: usize) -> SeenSet {
        SeenSet {
            capacity: capacity.max(1),
            order: VecDeque::new(),
            slots: vec![0; 16],
            head: 0,
            next_seq: 0,
            added: Vec::new(),
            removed: Vec::new(),
        }
    }

    /// A set loaded from storage: `records` are `(key, sequence number)` in any order, each key once. Sequence
    /// numbers are handed out one by one and the oldest keys leave first, so the stored ones form a run; each key
    /// is placed at its number's offset in that run (linear time, no sort). Only the newest `capacity` keys are
    /// kept; the rest are journalled for deletion.
    pub fn from_records(capacity: usize, records: Vec<(String, u64)>) -> SeenSet {
        let mut s = SeenSet::new(capacity);
        let Some(newest) = records.iter().map(|r| r.1).max() else {
            return s;
        };
        // A few numbers of slack: a damaged record leaves a hole in the run.
        let span = (records.len().min(s.capacity) + 64) as u64;
        let first = newest.saturating_sub(span - 1);
        let mut run: Vec<Option<String>> = vec![None; usize::try_from(span).unwrap_or(0)];
        for (key, seq) in records {
            match usize::try_from(seq.wrapping_sub(first))
                .ok()
                .filter(|_| seq >= first)
            {
                Some(at) if at < run.len() => run[at] = Some(key),
                _ => s.removed.push(key),
            }
        }
        let mut extra = run.iter().flatten().count().saturating_sub(s.capacity);
        s.reserve(run.len().min(s.capacity));
        for (at, key) in run.into_iter().enumerate() {
            let Some(key) = key else { continue };
            if extra > 0 {
                extra -= 1;
                s.removed.push(key);
                continue;
            }
            s.next_seq = first + at as u64;
            s.insert(key);
        }
        s.next_seq = newest + 1;
        // Loading is not a change: only keys that fell out are.
        s.added.clear();
        s
    }

    /// The set an older version stored as one record, with sequence numbers in its order; every key is
    /// journalled, so the caller can store them one by one.
    pub fn from_wire(w: SeenWire) -> SeenSet {
        let mut s = SeenSet::new(w.capacity);
        let old = w.keys.len().saturating_sub(s.capacity);
        s.reserve(w.keys.len() - old);
        for k in w.keys.into_iter().skip(old) {
            s.insert(k);
        }
        s
    }

    /// The keys, oldest first.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(|(_, k)| k.as_str())
    }

    /// The keys' sequence numbers, in the order of [`SeenSet::keys`].
    pub fn values(&self) -> impl Iterator<Item = u64> + '_ {
        self.order.iter().map(|(s, _)| *s)
    }

    /// Every key with its sequence number, as [`SeenChanges::put`] (to store the whole set).
    pub fn records(&self) -> Vec<(String, u64)> {
        self.order.iter().map(|(s, k)| (k.clone(), *s)).collect()
    }

    /// What changed since the last call.
    pub fn take_changes(&mut self) -> SeenChanges {
        SeenChanges {
            put: std::mem::take(&mut self.added),
            delete: std::mem::take(&mut self.removed),
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

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot holding `key`, or the empty slot where it would go.
    fn find(&self, key: &str) -> Result<usize, usize> {
        let mut i = (hash(key) as usize) & self.mask();
        loop {
            match self.slots[i] {
                0 => return Err(i),
                p if self.at(p) == key => return Ok(i),
                _ => i = (i + 1) & self.mask(),
            }
        }
    }

    /// The key a slot points at.
    fn at(&self, p: u64) -> &str {
        p.checked_sub(1 + self.head)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| self.order.get(i))
            .map_or("", |(_, k)| k.as_str())
    }

    /// Makes room for `n` keys without growing the index again.
    fn reserve(&mut self, n: usize) {
        let want = (n.max(self.order.len()) * 2).next_power_of_two().max(16);
        if want <= self.slots.len() {
            return;
        }
        self.slots = vec![0; want];
        for i in 0..self.order.len() {
            let Err(slot) = self.find(&self.order[i].1) else {
                continue;
            };
            self.slots[slot] = self.head + i as u64 + 1;
        }
    }

    /// Empties slot `i` and moves later entries of its probe run back, so every key stays reachable.
    fn clear_slot(&mut self, mut i: usize) {
        self.slots[i] = 0;
        let mut j = i;
        loop {
            j = (j + 1) & self.mask();
            let p = self.slots[j];
            if p == 0 {
                return;
            }
            let home = (hash(self.at(p)) as usize) & self.mask();
            // The entry at j may move to i when its home is not in the cyclic range (i, j].
            let stays = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !stays {
                self.slots[i] = p;
                self.slots[j] = 0;
                i = j;
            }
        }
    }

    pub fn contains(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Remember a key; returns false when it was already there. Evicts the oldest keys beyond the capacity.
    pub fn insert(&mut self, key: String) -> bool {
        if self.contains(&key) {
            return false;
        }
        self.reserve(self.order.len() + 1);
        let Err(slot) = self.find(&key) else {
            return false;
        };
        self.slots[slot] = self.head + self.order.len() as u64 + 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.added.push((key.clone(), seq));
        self.order.push_back((seq, key));
        while self.order.len() > self.capacity {
            if let Some((_, old)) = self.order.front()
                && let Ok(i) = self.find(old)
            {
                self.clear_slot(i);
            }
            if let Some((_, old)) = self.order.pop_front() {
                // Added since the last journal and already gone: not to be stored (only recent additions can be).
                if let Some(n) = self.added.iter().rposition(|(k, _)| *k == old) {
                    self.added.swap_remove(n);
                }
                self.removed.push(old);
            }
            self.head += 1;
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

    /// Applies a journal to a model of the stored records, as the worker does to IndexedDB.
    fn apply(store: &mut std::collections::BTreeMap<String, u64>, c: SeenChanges) {
        for k in c.delete {
            store.remove(&k);
        }
        for (k, s) in c.put {
            store.insert(k, s);
        }
    }

    proptest! {
        #[test]
        fn bounded_journalled_and_reloaded(keys in proptest::collection::vec("[a-f]{1,3}", 0..300), cap in 1usize..50, every in 1usize..20) {
            let mut s = SeenSet::new(cap);
            let mut store = std::collections::BTreeMap::new();
            for (n, k) in keys.iter().enumerate() {
                s.insert(k.clone());
                prop_assert!(s.len() <= cap);
                prop_assert!(s.contains(k));
                if n % every == 0 {
                    apply(&mut store, s.take_changes());
                    // What is stored loads back as the same set: same keys, same order.
                    let back = SeenSet::from_records(cap, store.clone().into_iter().collect());
                    prop_assert_eq!(&back, &s);
                    prop_assert_eq!(store.len(), s.len());
                }
            }
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
            // The one-record form of an older version loads with every key journalled, in its order.
            let mut w = SeenSet::from_wire(SeenWire { capacity: cap, keys: t.keys().map(str::to_owned).collect() });
            prop_assert_eq!(&w, &t);
            let put: Vec<String> = w.take_changes().put.into_iter().map(|(k, _)| k).collect();
            prop_assert_eq!(put, t.keys().map(str::to_owned).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_full_set_stays_findable_through_many_evictions() {
        let mut s = SeenSet::new(1_000);
        for i in 0..50_000 {
            s.insert(SeenSet::key("t", Some(&i.to_string()), "h"));
        }
        assert_eq!(s.len(), 1_000);
        assert!((49_000..50_000).all(|i| s.contains(&SeenSet::key(
            "t",
            Some(&i.to_string()),
            "h"
        ))));
        assert!((0..49_000).step_by(97).all(|i| !s.contains(&SeenSet::key(
            "t",
            Some(&i.to_string()),
            "h"
        ))));
        assert!(
            s.slots.len() <= 4_096,
            "the index grew past its bound: {}",
            s.slots.len()
        );
    }
}
