//! The derivation pass: reads the messages after its cursor (the highest message pk it has read) and the events
//! after theirs in bounded batches, and the threads a forget queued again, derives what each thread and turn certainly says
//! ([`derive`](crate::derive)) and stores it with its source, one transaction per batch. Then it looks for
//! look-alike names among the entities it touched and proposes them as merges. `serve` runs it in the background;
//! `personkit graph build` runs it on demand. Logs counts, never names or text.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use personkit_store::Connection;
use personkit_store::graph::{self as store, EntityRef, How, MessageRow, Source, SourceKind};
use serde::Serialize;
use time::OffsetDateTime;

use crate::derive::{self, Proposals, ThreadFacts};
use crate::similar::{self, THRESHOLD};
use crate::surfaces::is_harvest;
use crate::{GraphError, Kind, key};

/// Messages read per batch by default.
pub const BATCH: usize = 500;
/// Threads a forget queued that one batch reads again.
const REDO_PER_BATCH: usize = 20;
/// Turns of one thread read again after a forget.
const REDO_TURNS: usize = 2_000;
/// Entities of one kind a look-alike is looked for among.
const CANDIDATE_POOL: usize = 5_000;
/// Touched entities compared per batch.
const CANDIDATES_PER_BATCH: usize = 500;

/// Decided merges and approved proposals one [`settle`] brings into the graph at most.
const SETTLE_PER_CALL: usize = 100;

const CURSOR: &str = "cursor";
const EVENT_CURSOR: &str = "event_cursor";
const LAST_PASS: &str = "last_pass";

/// What one batch (or a whole build) did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Report {
    pub messages: u64,
    pub events: u64,
    pub threads: u64,
    /// Threads read again after a forget.
    pub redone: u64,
    pub entities: u64,
    pub relations: u64,
    /// New merge proposals.
    pub proposed: u64,
    /// The cursor after the pass.
    pub cursor: i64,
    /// Messages are left for another batch.
    pub more: bool,
}

impl Report {
    fn add(&mut self, o: &Report) {
        self.messages += o.messages;
        self.events += o.events;
        self.threads += o.threads;
        self.redone += o.redone;
        self.entities += o.entities;
        self.relations += o.relations;
        self.proposed += o.proposed;
        self.cursor = o.cursor;
        self.more = o.more;
    }
}

/// Where one source's proposals come from.
#[derive(Debug, Clone)]
pub struct Support<'a> {
    pub kind: SourceKind,
    pub id: &'a str,
    pub how: How,
    pub seen_at: &'a str,
}

/// Stores `p` as supported by `from`: each entity resolved through its key (made when new), each relation
/// widened to the source's time. Returns the ids of the entities, in `p`'s order.
pub fn apply(
    conn: &Connection,
    p: &Proposals,
    from: &Support<'_>,
    now: OffsetDateTime,
) -> Result<Vec<String>, GraphError> {
    let mut ids = Vec::with_capacity(p.entities.len());
    for f in &p.entities {
        let id = store::upsert_entity(conn, f.kind.as_str(), &f.name, &key(f.kind, &f.name), now)?;
        store::add_entity_source(
            conn,
            &id,
            &Source {
                kind: from.kind,
                id: from.id.to_owned(),
                how: from.how,
                confidence: f.confidence.clamp(0.0, 1.0),
                seen_at: from.seen_at.to_owned(),
            },
            now,
        )?;
        ids.push(id);
    }
    for l in &p.relations {
        let (s, o) = (&ids[l.subject], &ids[l.object]);
        if s == o {
            continue;
        }
        let confidence = p.entities[l.subject]
            .confidence
            .min(p.entities[l.object].confidence);
        store::add_relation(
            conn,
            s,
            l.predicate.as_str(),
            o,
            &Source {
                kind: from.kind,
                id: from.id.to_owned(),
                how: from.how,
                confidence: confidence.clamp(0.0, 1.0),
                seen_at: from.seen_at.to_owned(),
            },
            now,
        )?;
    }
    Ok(ids)
}

/// A harvested session's project, from the transcript files it was read from.
fn project_of_thread(conn: &Connection, thread_id: &str) -> Result<Option<String>, GraphError> {
    for (_, source, path) in personkit_store::harvest::thread_files(conn, &[thread_id.to_owned()])?
    {
        if let Some(p) = personkit_import::harvest::project_of(&source, Path::new(&path)) {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

/// Derives one thread's own facts and those of the given turns.
fn derive_thread(
    conn: &Connection,
    meta: &store::ThreadMeta,
    turns: &[&MessageRow],
    now: OffsetDateTime,
    touched: &mut HashSet<String>,
) -> Result<(), GraphError> {
    let project = if is_harvest(&meta.surface) {
        project_of_thread(conn, &meta.id)?
    } else {
        None
    };
    let facts = derive::from_thread(&ThreadFacts {
        surface: &meta.surface,
        project: project.as_deref(),
        repository: None,
    });
    // Twice: the relations' validity spans the thread's first and last turn; the source keeps the last.
    for at in [&meta.first_seen_at, &meta.last_seen_at] {
        let from = Support {
            kind: SourceKind::Thread,
            id: &meta.id,
            how: How::Certain,
            seen_at: at,
        };
        touched.extend(apply(conn, &facts, &from, now)?);
    }
    for m in turns {
        let p = derive::from_text(&m.content, project.as_deref());
        if p.entities.is_empty() {
            continue;
        }
        let from = Support {
            kind: SourceKind::Message,
            id: &m.id,
            how: How::Certain,
            seen_at: &m.captured_at,
        };
        touched.extend(apply(conn, &p, &from, now)?);
    }
    Ok(())
}

/// One batch: the threads a forget queued, then up to `batch` messages after the cursor; one transaction.
pub fn pass(conn: &Connection, now: OffsetDateTime, batch: usize) -> Result<Report, GraphError> {
    let batch = batch.clamp(1, 10_000);
    let tx = store::begin(conn)?;
    let (e0, r0, _) = store::counts(&tx)?;
    let mut report = Report::default();
    let mut touched: HashSet<String> = HashSet::new();
    for thread_id in store::redo_threads(&tx, REDO_PER_BATCH)? {
        if let Some(meta) = store::thread_meta(&tx, &thread_id)? {
            let turns = store::thread_messages(&tx, &thread_id, REDO_TURNS)?;
            let refs: Vec<&MessageRow> = turns.iter().collect();
            derive_thread(&tx, &meta, &refs, now, &mut touched)?;
            report.redone += 1;
        }
        store::redo_done(&tx, &thread_id)?;
    }
    let cursor: i64 = store::state(&tx, CURSOR)?
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let messages = store::messages_after(&tx, cursor, batch)?;
    let mut by_thread: BTreeMap<&str, Vec<&MessageRow>> = BTreeMap::new();
    for m in &messages {
        by_thread.entry(&m.thread_id).or_default().push(m);
    }
    for (thread_id, turns) in &by_thread {
        if let Some(meta) = store::thread_meta(&tx, thread_id)? {
            derive_thread(&tx, &meta, turns, now, &mut touched)?;
        }
    }
    report.messages = messages.len() as u64;
    report.threads = by_thread.len() as u64;
    report.cursor = messages.last().map_or(cursor, |m| m.pk);
    store::set_state(&tx, CURSOR, &report.cursor.to_string())?;
    // Events: what their kind's named attributes say (`derive::from_event`), each the source of its links.
    let event_cursor: i64 = store::state(&tx, EVENT_CURSOR)?
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let events = store::events_after(&tx, event_cursor, batch)?;
    for ev in &events {
        let attrs: serde_json::Value =
            serde_json::from_str(&ev.attrs).unwrap_or(serde_json::Value::Null);
        let p = derive::from_event(&ev.kind, &attrs);
        if p.entities.is_empty() {
            continue;
        }
        let from = Support {
            kind: SourceKind::Event,
            id: &ev.id,
            how: How::Certain,
            seen_at: &ev.occurred_at,
        };
        touched.extend(apply(&tx, &p, &from, now)?);
    }
    report.events = events.len() as u64;
    if let Some(last) = events.last() {
        store::set_state(&tx, EVENT_CURSOR, &last.pk.to_string())?;
    }
    report.more = messages.len() == batch || events.len() == batch;
    report.proposed = propose_candidates(&tx, &touched, now)?;
    let (e1, r1, _) = store::counts(&tx)?;
    report.entities = e1.saturating_sub(e0);
    report.relations = r1.saturating_sub(r0);
    store::set_state(&tx, LAST_PASS, &personkit_store::clock::fmt_time(now))?;
    tx.commit().map_err(personkit_store::DbError::from)?;
    Ok(report)
}

/// Passes until nothing is left or `max_batches` ran; the summed report.
pub fn build(
    conn: &Connection,
    now: OffsetDateTime,
    batch: usize,
    max_batches: usize,
) -> Result<Report, GraphError> {
    let mut total = Report::default();
    for _ in 0..max_batches.max(1) {
        let r = pass(conn, now, batch)?;
        total.add(&r);
        if !r.more {
            break;
        }
    }
    // After the passes, so what they derived from a peer's rows is there to be folded and linked.
    settle(conn, now)?;
    tracing::info!(
        messages = total.messages,
        events = total.events,
        threads = total.threads,
        redone = total.redone,
        entities = total.entities,
        relations = total.relations,
        proposed = total.proposed,
        "graph pass"
    );
    Ok(total)
}

/// Merges and approvals the user decided (here or on a sync peer) that this relay's graph does not show yet: a
/// merged pair whose two entities both exist is folded again (a peer's merge that arrived before this relay
/// derived one of them, or a name a later turn made again), and an approved proposal's messages stored here are
/// linked ([`crate::extract::settle`]). Bounded per call; the rest waits for the next.
pub fn settle(conn: &Connection, now: OffsetDateTime) -> Result<(), GraphError> {
    for (kept, gone) in store::unsettled_merges(conn, SETTLE_PER_CALL)? {
        store::merge(conn, &kept, &gone, now)?;
    }
    crate::extract::settle(conn, now, SETTLE_PER_CALL)?;
    Ok(())
}

/// When the derivation last ran, if ever.
pub fn last_pass(conn: &Connection) -> Result<Option<String>, GraphError> {
    Ok(store::state(conn, LAST_PASS)?)
}

/// Proposes merges of touched entities with look-alikes of their kind (names of kinds with loose names only).
fn propose_candidates(
    conn: &Connection,
    touched: &HashSet<String>,
    now: OffsetDateTime,
) -> Result<u64, GraphError> {
    let mut pools: HashMap<String, Vec<(EntityRef, similar::Trigrams)>> = HashMap::new();
    let mut proposed = 0;
    let mut ids: Vec<&String> = touched.iter().collect();
    ids.sort();
    for id in ids.into_iter().take(CANDIDATES_PER_BATCH) {
        let Some(e) = store::entity_ref_of(conn, id)? else {
            continue;
        };
        if !Kind::parse(&e.kind).is_some_and(Kind::has_loose_names) {
            continue;
        }
        if !pools.contains_key(&e.kind) {
            let pool = store::entities_of_kind(conn, &e.kind, CANDIDATE_POOL)?
                .into_iter()
                .map(|r| {
                    let t = similar::trigrams(&r.name);
                    (r, t)
                })
                .collect();
            pools.insert(e.kind.clone(), pool);
        }
        let mine = similar::trigrams(&e.name);
        let me = e.clone();
        for (other, t) in pools.get(&e.kind).into_iter().flatten() {
            if other.id == e.id {
                continue;
            }
            let s = similar::similarity_of(&mine, t);
            if s > THRESHOLD && store::propose_merge(conn, &me, other, s, now)? {
                proposed += 1;
            }
        }
    }
    Ok(proposed)
}
