//! The capture core's state while the worker runs, typed: the delivery queue (held items included), the dedupe set
//! of what this browser already queued, and the local stats — loaded once from the worker's IndexedDB records
//! ([`Core::from_records`]) and kept in the wasm instance. What a call changed comes back as [`Changes`], the
//! records to store or delete, found from ids and counters only, so a call costs the same with 20,000 remembered
//! turns as with none. [`super::api`] is the JSON edge over it.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::dedupe::{DEFAULT_SEEN_CAPACITY, SeenChanges, SeenSet, SeenWire};
use super::policy::Stats;
use super::queue::{QueueState, QueuedItem};

/// The capture core's state. Every call that changes it answers with [`Changes`], which the worker writes to
/// IndexedDB before it answers its caller, so a worker that is killed at any moment and loaded again has lost
/// nothing it acknowledged.
#[derive(Debug, Default)]
pub struct Core {
    pub(super) queue: QueueState,
    pub(super) seen: SeenSet,
    pub(super) stats: Stats,
    /// What [`Core::from_records`] found to rewrite (an older version's records), until
    /// [`Core::take_load_changes`] takes it.
    loaded: Option<Changes>,
}

/// The records a call changed, for the worker to delete or store (each item, each dedupe key, and the small
/// records); deletions go first. Applying every call's changes in order to the stored records and loading them
/// gives the same state.
#[derive(Debug, Default, Serialize)]
pub struct Changes {
    /// Dedupe keys to store, each with its sequence number (the load order), and keys to delete.
    seen_put: Vec<(String, u64)>,
    seen_delete: Vec<String>,
    /// Queue items to store (new or changed), by id, and ids to delete.
    items_put: Vec<QueuedItem>,
    items_delete: Vec<u64>,
    /// The held items, when they changed (bounded: one record).
    held: Option<Vec<QueuedItem>>,
    /// The queue without its items (see [`QueueState::meta`]), when it changed (one small record).
    queue_meta: Option<Box<RawValue>>,
    stats: Option<Box<RawValue>>,
}

impl Changes {
    /// Every record was rewritten (the state came from an older version's whole-state records).
    pub fn is_rewrite(&self) -> bool {
        self.queue_meta.is_some()
    }
}

/// The worker's records as it read them, each still JSON text: the queue without items, its items, the held items,
/// the dedupe keys with their sequence numbers in any order, the stats; or, from an older version, the whole queue
/// and the whole dedupe set as one record each.
#[derive(Debug, Default)]
pub struct Records<'a> {
    pub queue_meta: Option<&'a RawValue>,
    pub items: Vec<&'a RawValue>,
    pub held: Option<&'a RawValue>,
    pub seen: Vec<(String, u64)>,
    pub stats: Option<&'a RawValue>,
    pub legacy_queue: Option<&'a RawValue>,
    pub legacy_seen: Option<&'a RawValue>,
}

/// A stored value, or its default when it is absent or not of its type.
pub(super) fn stored<'a, T: Deserialize<'a> + Default>(raw: Option<&'a RawValue>) -> T {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
        .unwrap_or_default()
}

fn raw_json<T: Serialize>(v: &T) -> serde_json::Result<Box<RawValue>> {
    RawValue::from_string(serde_json::to_string(v)?)
}

/// What a call is about to change, remembered cheaply (ids and counters, no contents; the small records as
/// their JSON text) to find its [`Changes`].
pub(super) struct Before {
    items: Vec<(u64, u32)>,
    held: Vec<(u64, Option<u64>)>,
    meta: String,
    stats: String,
}

fn held_marks(q: &QueueState) -> Vec<(u64, Option<u64>)> {
    q.held.iter().map(|h| (h.id, h.held_at_ms)).collect()
}

impl Core {
    /// The state from the worker's records. A record that does not parse is left out: a damaged record never stops
    /// the worker. Linear in the number of records (the dedupe keys are sorted once by sequence number).
    pub fn from_records(r: Records) -> serde_json::Result<Core> {
        let mut rewrite = false;
        let mut queue = match r.legacy_queue {
            Some(q) => {
                rewrite = true;
                stored::<QueueState>(Some(q))
            }
            None => {
                let mut q = stored::<QueueState>(r.queue_meta);
                q.items = Vec::with_capacity(r.items.len());
                for item in r
                    .items
                    .iter()
                    .filter_map(|r| serde_json::from_str::<QueuedItem>(r.get()).ok())
                {
                    // Id order is queue order; the records come in it (an insertion costs nothing then).
                    let at = q.items.partition_point(|other| other.id < item.id);
                    q.items.insert(at, item);
                }
                q.held = stored(r.held);
                q
            }
        };
        let seen = match r.legacy_seen {
            Some(w) => {
                rewrite = true;
                SeenSet::from_wire(stored::<SeenWire>(Some(w)))
            }
            None => SeenSet::from_records(DEFAULT_SEEN_CAPACITY, r.seen),
        };
        // New ids must not meet stored ones, whatever a damaged counter says.
        let newest = queue.items.iter().chain(&queue.held).map(|q| q.id).max();
        queue.next_id = queue.next_id.max(newest.unwrap_or(0));
        let mut core = Core {
            queue,
            seen,
            stats: stored(r.stats),
            loaded: None,
        };
        let seen = core.seen.take_changes();
        core.loaded = Some(if rewrite {
            Changes {
                seen_put: core.seen.records(),
                seen_delete: seen.delete,
                items_put: core.queue.items.clone(),
                items_delete: Vec::new(),
                held: Some(core.queue.held.clone()),
                queue_meta: Some(raw_json(&core.queue.meta())?),
                stats: Some(raw_json(&core.stats)?),
            }
        } else {
            Changes {
                seen_delete: seen.delete,
                ..Changes::default()
            }
        });
        Ok(core)
    }

    /// What the worker should write after [`Core::from_records`] — every record, when the state came from an
    /// older version's whole-state records (the worker deletes those in the same transaction), else only dedupe
    /// keys beyond the bound. Empty the second time.
    pub fn take_load_changes(&mut self) -> Changes {
        self.loaded.take().unwrap_or_default()
    }

    pub(super) fn before(&self) -> serde_json::Result<Before> {
        Ok(Before {
            items: self
                .queue
                .items
                .iter()
                .map(|i| (i.id, i.attempts))
                .collect(),
            held: held_marks(&self.queue),
            meta: serde_json::to_string(&self.queue.meta())?,
            stats: serde_json::to_string(&self.stats)?,
        })
    }

    /// What changed since `before`. Costs a pass over the queue's ids, never over its contents or the dedupe set.
    /// Items are in id order before and after (see [`QueueState`]).
    pub(super) fn changes(&mut self, before: Before) -> serde_json::Result<Changes> {
        let SeenChanges { put, delete } = self.seen.take_changes();
        let after = &self.queue.items;
        let items_put = self
            .queue
            .items
            .iter()
            .filter(|i| {
                before
                    .items
                    .binary_search_by_key(&i.id, |b| b.0)
                    .map_or(true, |n| before.items[n].1 != i.attempts)
            })
            .cloned()
            .collect();
        let items_delete = before
            .items
            .iter()
            .filter(|b| after.binary_search_by_key(&b.0, |i| i.id).is_err())
            .map(|b| b.0)
            .collect();
        let raw = |now: String, then: String| -> serde_json::Result<Option<Box<RawValue>>> {
            Ok(if now == then {
                None
            } else {
                Some(RawValue::from_string(now)?)
            })
        };
        Ok(Changes {
            seen_put: put,
            seen_delete: delete,
            items_put,
            items_delete,
            held: (held_marks(&self.queue) != before.held).then(|| self.queue.held.clone()),
            queue_meta: raw(serde_json::to_string(&self.queue.meta())?, before.meta)?,
            stats: raw(serde_json::to_string(&self.stats)?, before.stats)?,
        })
    }
}
