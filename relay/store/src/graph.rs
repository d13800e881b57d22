//! The entity graph's rows: entities with their aliases, typed relations with a validity interval, the sources
//! that support each (migration 0026), merge candidates, and the bounded reads over them (an entity, its
//! neighbours, a path between two, the subgraph of a thread or a span, an entity's threads, events and timeline).
//!
//! The rules — which kinds exist, how a name is normalised into the alias key, what a thread or event says, when two
//! names look alike — are `personkit-graph`'s; this module stores what it is handed. Aliases hold keys as the caller
//! normalised them, and every entity has its own key among its aliases.
//!
//! **Architecture invariant:** every entity and relation has at least one source (a thread, a message or an
//! event); [`forget_selected`] removes the sources of forgotten turns and deletes what is left without one. Every
//! read here is bounded: walks by depth, fan-out and visited nodes, listings by a limit.

use std::collections::{HashMap, HashSet, VecDeque};

use rusqlite::{Connection, OptionalExtension, params};
use schemars::JsonSchema;
use serde::Serialize;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::clock::fmt_time;
use crate::db::{DbError, relay_id};

/// The deepest [`neighbours`] walk.
pub const MAX_NEIGHBOUR_DEPTH: u32 = 2;
/// The longest [`path`].
pub const MAX_PATH_DEPTH: u32 = 4;
/// Relations read per entity in a walk.
pub const MAX_FAN_OUT: usize = 200;
/// Entities a [`path`] search visits at most before it gives up.
pub const MAX_PATH_VISITS: usize = 20_000;
/// Entities a [`neighbours`] answer holds at most.
pub const MAX_NEIGHBOURS: usize = 500;
/// The most rows any listing here returns.
pub const MAX_LIST: usize = 1_000;
/// Counts above this are reported as "more than".
pub const COUNT_CAP: u64 = 10_000;

/// What supports an entity or a relation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Thread,
    Message,
    Event,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Thread => "thread",
            SourceKind::Message => "message",
            SourceKind::Event => "event",
        }
    }
}

/// How a link was found: read from what the corpus states, or extracted by a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum How {
    Certain,
    Model,
}

impl How {
    pub fn as_str(self) -> &'static str {
        match self {
            How::Certain => "certain",
            How::Model => "model",
        }
    }
}

/// One source of an entity or relation.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub kind: SourceKind,
    pub id: String,
    pub how: How,
    /// In [0, 1]; 1 for what is certain.
    pub confidence: f64,
    /// The source's own time (stored form).
    pub seen_at: String,
}

/// An entity in a listing or a walk.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct EntityRef {
    pub id: String,
    pub kind: String,
    pub name: String,
}

/// An entity with what is known of it at a glance.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct EntityInfo {
    pub id: String,
    pub kind: String,
    pub name: String,
    /// Alias keys other than the name's own, at most 50.
    pub aliases: Vec<String>,
    pub created_at: String,
    /// How many sources support it (capped at [`COUNT_CAP`] + 1).
    pub sources: u64,
    pub first_seen: Option<String>,
    pub last_seen: Option<String>,
}

/// A relation between two entities.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Edge {
    pub id: String,
    pub subject: EntityRef,
    pub predicate: String,
    pub object: EntityRef,
    pub valid_from: Option<String>,
    pub valid_to: Option<String>,
}

/// An entity reached by a walk, and how far from where it started.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Reached {
    pub entity: EntityRef,
    pub depth: u32,
}

/// A bounded piece of the graph.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct Subgraph {
    pub entities: Vec<Reached>,
    pub edges: Vec<Edge>,
    /// A bound cut the answer short.
    pub truncated: bool,
}

/// A thread an entity appears in.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct EntityThread {
    pub thread_id: String,
    pub surface: String,
    pub title: Option<String>,
    pub last_seen_at: String,
}

/// An event an entity appears in.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct EntityEvent {
    pub event_id: String,
    pub kind: String,
    pub source_surface: String,
    pub occurred_at: String,
}

/// Sources of an entity per day (UTC).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Day {
    pub day: String,
    pub sources: u64,
}

/// A proposed (or decided) merge of two entities of one kind.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Candidate {
    pub a: EntityRef,
    pub b: EntityRef,
    pub similarity: f64,
    pub state: String,
    pub created_at: String,
    pub decided_at: Option<String>,
}

/// A thread as the derivation reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadMeta {
    pub id: String,
    pub surface: String,
    pub title: Option<String>,
    pub url: Option<String>,
    pub first_seen_at: String,
    pub last_seen_at: String,
}

/// A message as the derivation reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageRow {
    pub pk: i64,
    pub id: String,
    pub thread_id: String,
    pub role: String,
    pub content: String,
    pub captured_at: String,
}

fn hash_id(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    hex::encode(&h.finalize()[..16])
}

/// The id an entity of `kind` with alias key `key` gets when it is first made.
pub fn entity_id(kind: &str, key: &str) -> String {
    hash_id(&["entity", kind, key])
}

/// The id of the relation `subject predicate object`.
pub fn relation_id(subject: &str, predicate: &str, object: &str) -> String {
    hash_id(&["relation", subject, predicate, object])
}

fn next_seq(conn: &Connection, origin: &str) -> Result<i64, DbError> {
    let seq: i64 = conn
        .prepare_cached("SELECT last_seq FROM origin_seqs WHERE origin = ?1")?
        .query_row([origin], |r| r.get(0))
        .optional()?
        .unwrap_or(0)
        + 1;
    conn.prepare_cached(
        "INSERT INTO origin_seqs(origin, last_seq) VALUES (?1, ?2)
         ON CONFLICT(origin) DO UPDATE SET last_seq = ?2",
    )?
    .execute(params![origin, seq])?;
    Ok(seq)
}

/// Begins a write transaction that takes the write lock at once (a derivation pass reads its cursor and writes
/// after it): [`crate::db::begin_write`].
pub fn begin(conn: &Connection) -> Result<rusqlite::Transaction<'_>, DbError> {
    crate::db::begin_write(conn)
}

fn check_source(s: &Source) -> Result<(), DbError> {
    if !(0.0..=1.0).contains(&s.confidence) {
        return Err(DbError::Invalid(format!(
            "a confidence must be between 0 and 1, not {}",
            s.confidence
        )));
    }
    Ok(())
}

/// The entity of `kind` one of whose alias keys is `key`.
pub fn resolve(conn: &Connection, kind: &str, key: &str) -> Result<Option<String>, DbError> {
    Ok(conn
        .prepare_cached(
            // CROSS JOIN keeps the alias index first: a plan from the kind's side reads every entity of the kind
            // (the derivation calls this once per name it finds).
            "SELECT a.entity_id FROM entity_aliases a CROSS JOIN entities e ON e.id = a.entity_id
             WHERE a.alias = ?2 AND e.kind = ?1 ORDER BY e.created_at, e.id LIMIT 1",
        )?
        .query_row(params![kind, key], |r| r.get(0))
        .optional()?)
}

/// Entities of any kind with alias key `key`, at most `limit`.
pub fn resolve_any(conn: &Connection, key: &str, limit: usize) -> Result<Vec<EntityRef>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT e.id, e.kind, e.name FROM entity_aliases a CROSS JOIN entities e ON e.id = a.entity_id
         WHERE a.alias = ?1 ORDER BY e.kind, e.name LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![key, limit.min(MAX_LIST) as i64], entity_ref)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The entity of `kind` known by `key`, made (named `name`) when there is none. Returns its id.
pub fn upsert_entity(
    conn: &Connection,
    kind: &str,
    name: &str,
    key: &str,
    now: OffsetDateTime,
) -> Result<String, DbError> {
    if let Some(id) = resolve(conn, kind, key)? {
        return Ok(id);
    }
    if kind.is_empty() || name.trim().is_empty() || key.is_empty() {
        return Err(DbError::Invalid(
            "an entity needs a kind, a name and a key".into(),
        ));
    }
    let at = fmt_time(now);
    // Another key may already carry this exact display name: that entity is the one.
    let named: Option<String> = conn
        .prepare_cached("SELECT id FROM entities WHERE kind = ?1 AND name = ?2")?
        .query_row(params![kind, name], |r| r.get(0))
        .optional()?;
    let id = match named {
        Some(id) => id,
        None => {
            let origin = relay_id(conn)?;
            let id = entity_id(kind, key);
            let seq = next_seq(conn, &origin)?;
            conn.prepare_cached(
                "INSERT INTO entities (id, kind, name, created_at, origin_device, origin_seq)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![id, kind, name, at, origin, seq])?;
            id
        }
    };
    add_alias(conn, &id, key, now)?;
    Ok(id)
}

/// Records `key` as another alias key of the entity.
pub fn add_alias(
    conn: &Connection,
    entity_id: &str,
    key: &str,
    now: OffsetDateTime,
) -> Result<(), DbError> {
    let exists: bool = conn
        .prepare_cached("SELECT 1 FROM entity_aliases WHERE entity_id = ?1 AND alias = ?2")?
        .exists(params![entity_id, key])?;
    if exists {
        return Ok(());
    }
    let origin = relay_id(conn)?;
    let seq = next_seq(conn, &origin)?;
    conn.prepare_cached(
        "INSERT INTO entity_aliases (entity_id, alias, created_at, origin_device, origin_seq)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![entity_id, key, fmt_time(now), origin, seq])?;
    Ok(())
}

/// Records that `source` supports the entity (again: the newer time and the higher confidence are kept, and
/// `certain` wins over `model`).
pub fn add_entity_source(
    conn: &Connection,
    entity_id: &str,
    source: &Source,
    now: OffsetDateTime,
) -> Result<(), DbError> {
    check_source(source)?;
    conn.prepare_cached(
        "INSERT INTO entity_sources (entity_id, source_kind, source_id, how, confidence, seen_at, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT(entity_id, source_kind, source_id) DO UPDATE SET
             seen_at = max(seen_at, excluded.seen_at),
             confidence = max(confidence, excluded.confidence),
             how = CASE WHEN how = 'certain' OR excluded.how = 'certain' THEN 'certain' ELSE 'model' END",
    )?
    .execute(params![
        entity_id,
        source.kind.as_str(),
        source.id,
        source.how.as_str(),
        source.confidence,
        source.seen_at,
        fmt_time(now)
    ])?;
    Ok(())
}

/// Records `subject predicate object` as supported by `source`: the relation is made when new, and its validity
/// interval widened to the source's time. Returns the relation's id.
pub fn add_relation(
    conn: &Connection,
    subject: &str,
    predicate: &str,
    object: &str,
    source: &Source,
    now: OffsetDateTime,
) -> Result<String, DbError> {
    check_source(source)?;
    if subject == object {
        return Err(DbError::Invalid(
            "a relation joins two different entities".into(),
        ));
    }
    let at = fmt_time(now);
    let existing: Option<String> = conn
        .prepare_cached(
            "SELECT id FROM relations WHERE subject_id = ?1 AND predicate = ?2 AND object_id = ?3",
        )?
        .query_row(params![subject, predicate, object], |r| r.get(0))
        .optional()?;
    let id = match existing {
        Some(id) => {
            conn.prepare_cached(
                "UPDATE relations SET valid_from = min(coalesce(valid_from, ?2), ?2),
                     valid_to = max(coalesce(valid_to, ?2), ?2) WHERE id = ?1",
            )?
            .execute(params![id, source.seen_at])?;
            id
        }
        None => {
            let origin = relay_id(conn)?;
            let id = relation_id(subject, predicate, object);
            let seq = next_seq(conn, &origin)?;
            conn.prepare_cached(
                "INSERT INTO relations (id, subject_id, predicate, object_id, valid_from, valid_to, created_at,
                     origin_device, origin_seq)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                id,
                subject,
                predicate,
                object,
                source.seen_at,
                at,
                origin,
                seq
            ])?;
            id
        }
    };
    conn.prepare_cached(
        "INSERT INTO relation_sources (relation_id, source_kind, source_id, how, confidence, seen_at, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT(relation_id, source_kind, source_id) DO UPDATE SET
             seen_at = max(seen_at, excluded.seen_at),
             confidence = max(confidence, excluded.confidence),
             how = CASE WHEN how = 'certain' OR excluded.how = 'certain' THEN 'certain' ELSE 'model' END",
    )?
    .execute(params![
        id,
        source.kind.as_str(),
        source.id,
        source.how.as_str(),
        source.confidence,
        source.seen_at,
        at
    ])?;
    Ok(id)
}

fn entity_ref(r: &rusqlite::Row<'_>) -> rusqlite::Result<EntityRef> {
    Ok(EntityRef {
        id: r.get(0)?,
        kind: r.get(1)?,
        name: r.get(2)?,
    })
}

/// An entity's id, kind and name, or `None`: the light read of [`entity`], without its aliases and sources.
pub fn entity_ref_of(conn: &Connection, id: &str) -> Result<Option<EntityRef>, DbError> {
    Ok(conn
        .prepare_cached("SELECT id, kind, name FROM entities WHERE id = ?1")?
        .query_row([id], entity_ref)
        .optional()?)
}

/// One entity, or `None`.
pub fn entity(conn: &Connection, id: &str) -> Result<Option<EntityInfo>, DbError> {
    let row: Option<(String, String, String, String)> = conn
        .prepare_cached("SELECT id, kind, name, created_at FROM entities WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .optional()?;
    let Some((id, kind, name, created_at)) = row else {
        return Ok(None);
    };
    let aliases: Vec<String> = conn
        .prepare_cached(
            "SELECT alias FROM entity_aliases WHERE entity_id = ?1 AND alias != lower(?2)
             ORDER BY alias LIMIT 50",
        )?
        .query_map(params![id, name], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let (sources, first_seen, last_seen) = conn
        .prepare_cached(
            "SELECT count(*), min(seen_at), max(seen_at) FROM
                 (SELECT seen_at FROM entity_sources WHERE entity_id = ?1 LIMIT ?2)",
        )?
        .query_row(params![id, COUNT_CAP as i64 + 1], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get(1)?, r.get(2)?))
        })?;
    Ok(Some(EntityInfo {
        id,
        kind,
        name,
        aliases,
        created_at,
        sources,
        first_seen,
        last_seen,
    }))
}

/// Entities whose name or an alias key contains `q` (case-insensitive; every entity without `q`), of `kind` when
/// given, by name, at most `limit`.
pub fn find(
    conn: &Connection,
    q: Option<&str>,
    kind: Option<&str>,
    limit: usize,
) -> Result<Vec<EntityRef>, DbError> {
    let pattern = q.map(|q| {
        let esc = q
            .to_lowercase()
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        format!("%{esc}%")
    });
    let mut stmt = conn.prepare_cached(
        "SELECT e.id, e.kind, e.name FROM entities e
         WHERE (?1 IS NULL OR e.kind = ?1)
           AND (?2 IS NULL OR lower(e.name) LIKE ?2 ESCAPE '\\'
                OR EXISTS (SELECT 1 FROM entity_aliases a WHERE a.entity_id = e.id AND a.alias LIKE ?2 ESCAPE '\\'))
         ORDER BY lower(e.name), e.id LIMIT ?3",
    )?;
    let rows = stmt.query_map(
        params![kind, pattern, limit.min(MAX_LIST) as i64],
        entity_ref,
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The relations of one entity, either direction, newest validity first, at most `limit`.
pub fn edges_of(conn: &Connection, id: &str, limit: usize) -> Result<Vec<Edge>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT r.id, s.id, s.kind, s.name, r.predicate, o.id, o.kind, o.name, r.valid_from, r.valid_to
         FROM (SELECT id FROM relations WHERE subject_id = ?1
               UNION ALL SELECT id FROM relations WHERE object_id = ?1) x
         JOIN relations r ON r.id = x.id
         JOIN entities s ON s.id = r.subject_id JOIN entities o ON o.id = r.object_id
         ORDER BY r.valid_to DESC, r.id LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![id, limit.min(MAX_FAN_OUT) as i64], edge_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn edge_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Edge> {
    Ok(Edge {
        id: r.get(0)?,
        subject: EntityRef {
            id: r.get(1)?,
            kind: r.get(2)?,
            name: r.get(3)?,
        },
        predicate: r.get(4)?,
        object: EntityRef {
            id: r.get(5)?,
            kind: r.get(6)?,
            name: r.get(7)?,
        },
        valid_from: r.get(8)?,
        valid_to: r.get(9)?,
    })
}

/// The entities within `depth` (1..=[`MAX_NEIGHBOUR_DEPTH`]) relations of `id`, each entity's relations read at
/// most `fan_out` (≤ [`MAX_FAN_OUT`]) at a time, at most [`MAX_NEIGHBOURS`] entities.
pub fn neighbours(
    conn: &Connection,
    id: &str,
    depth: u32,
    fan_out: usize,
) -> Result<Subgraph, DbError> {
    if !(1..=MAX_NEIGHBOUR_DEPTH).contains(&depth) {
        return Err(DbError::Invalid(format!(
            "depth must be 1 to {MAX_NEIGHBOUR_DEPTH}"
        )));
    }
    let fan_out = fan_out.clamp(1, MAX_FAN_OUT);
    let mut out = Subgraph::default();
    let mut seen: HashSet<String> = HashSet::from([id.to_owned()]);
    let mut seen_edges: HashSet<String> = HashSet::new();
    let mut frontier = vec![id.to_owned()];
    for d in 1..=depth {
        let mut next = Vec::new();
        for from in &frontier {
            let edges = edges_of(conn, from, fan_out + 1)?;
            if edges.len() > fan_out {
                out.truncated = true;
            }
            for e in edges.into_iter().take(fan_out) {
                let other = if e.subject.id == *from {
                    e.object.clone()
                } else {
                    e.subject.clone()
                };
                if !seen.contains(&other.id) {
                    if seen.len() > MAX_NEIGHBOURS {
                        out.truncated = true;
                        continue;
                    }
                    seen.insert(other.id.clone());
                    next.push(other.id.clone());
                    out.entities.push(Reached {
                        entity: other,
                        depth: d,
                    });
                }
                if seen_edges.insert(e.id.clone()) {
                    out.edges.push(e);
                }
            }
        }
        frontier = next;
    }
    Ok(out)
}

/// The shortest chain of relations (either direction) from `from` to `to`, at most `max_depth`
/// (≤ [`MAX_PATH_DEPTH`]) long; `None` when there is none within the bounds (depth, fan-out, visits).
pub fn path(
    conn: &Connection,
    from: &str,
    to: &str,
    max_depth: u32,
) -> Result<Option<Vec<Edge>>, DbError> {
    if !(1..=MAX_PATH_DEPTH).contains(&max_depth) {
        return Err(DbError::Invalid(format!(
            "a path is 1 to {MAX_PATH_DEPTH} relations long"
        )));
    }
    if from == to {
        return Ok(Some(Vec::new()));
    }
    // The walk reads ids only (a relation's ends and its validity, for the same order `edges_of` follows); the
    // chain's names are read once it is found.
    let mut came_by: HashMap<String, (String, String)> = HashMap::new();
    let mut seen: HashSet<String> = HashSet::from([from.to_owned()]);
    let mut queue: VecDeque<(String, u32)> = VecDeque::from([(from.to_owned(), 0)]);
    let mut adjacent = conn.prepare_cached(
        "SELECT id, subject_id, object_id FROM (
             SELECT id, subject_id, object_id, valid_to FROM relations WHERE subject_id = ?1
             UNION ALL SELECT id, subject_id, object_id, valid_to FROM relations WHERE object_id = ?1)
         ORDER BY valid_to DESC, id LIMIT ?2",
    )?;
    while let Some((at, d)) = queue.pop_front() {
        if d >= max_depth {
            continue;
        }
        let edges: Vec<(String, String, String)> = adjacent
            .query_map(params![at, MAX_FAN_OUT as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<Result<_, _>>()?;
        for (rel, subject, object) in edges {
            let other = if subject == at { object } else { subject };
            if seen.contains(&other) {
                continue;
            }
            if seen.len() >= MAX_PATH_VISITS {
                return Ok(None);
            }
            seen.insert(other.clone());
            came_by.insert(other.clone(), (rel, at.clone()));
            if other == to {
                let mut chain = Vec::new();
                let mut cur = to.to_owned();
                while cur != from {
                    let Some((rel, prev)) = came_by.get(&cur) else {
                        break;
                    };
                    chain.push(rel.clone());
                    cur = prev.clone();
                }
                chain.reverse();
                return Ok(Some(edges_by_ids(conn, &chain)?));
            }
            queue.push_back((other, d + 1));
        }
    }
    Ok(None)
}

fn entities_by_ids(conn: &Connection, ids: &[String]) -> Result<Vec<EntityRef>, DbError> {
    let mut stmt = conn.prepare_cached("SELECT id, kind, name FROM entities WHERE id = ?1")?;
    let mut out = Vec::new();
    for id in ids {
        if let Some(e) = stmt.query_row([id], entity_ref).optional()? {
            out.push(e);
        }
    }
    Ok(out)
}

fn edges_by_ids(conn: &Connection, ids: &[String]) -> Result<Vec<Edge>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT r.id, s.id, s.kind, s.name, r.predicate, o.id, o.kind, o.name, r.valid_from, r.valid_to
         FROM relations r JOIN entities s ON s.id = r.subject_id JOIN entities o ON o.id = r.object_id
         WHERE r.id = ?1",
    )?;
    let mut out = Vec::new();
    for id in ids {
        if let Some(e) = stmt.query_row([id], edge_row).optional()? {
            out.push(e);
        }
    }
    Ok(out)
}

fn subgraph_of(
    conn: &Connection,
    entity_sql: &str,
    relation_sql: &str,
    args: &[&dyn rusqlite::ToSql],
    limit: usize,
) -> Result<Subgraph, DbError> {
    let limit = limit.clamp(1, MAX_LIST);
    let mut with_limit: Vec<&dyn rusqlite::ToSql> = args.to_vec();
    let lim = limit as i64 + 1;
    with_limit.push(&lim);
    let mut ids: Vec<String> = conn
        .prepare_cached(entity_sql)?
        .query_map(with_limit.as_slice(), |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut rels: Vec<String> = conn
        .prepare_cached(relation_sql)?
        .query_map(with_limit.as_slice(), |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let truncated = ids.len() > limit || rels.len() > limit;
    ids.truncate(limit);
    rels.truncate(limit);
    Ok(Subgraph {
        entities: entities_by_ids(conn, &ids)?
            .into_iter()
            .map(|entity| Reached { entity, depth: 0 })
            .collect(),
        edges: edges_by_ids(conn, &rels)?,
        truncated,
    })
}

/// The entities and relations a thread (itself or one of its messages) supports, at most `limit` of each.
pub fn thread_subgraph(
    conn: &Connection,
    thread_id: &str,
    limit: usize,
) -> Result<Subgraph, DbError> {
    subgraph_of(
        conn,
        "SELECT entity_id FROM entity_sources WHERE source_kind = 'thread' AND source_id = ?1
         UNION SELECT s.entity_id FROM messages m JOIN entity_sources s
             ON s.source_kind = 'message' AND s.source_id = m.id WHERE m.thread_id = ?1
         LIMIT ?2",
        "SELECT relation_id FROM relation_sources WHERE source_kind = 'thread' AND source_id = ?1
         UNION SELECT s.relation_id FROM messages m JOIN relation_sources s
             ON s.source_kind = 'message' AND s.source_id = m.id WHERE m.thread_id = ?1
         LIMIT ?2",
        &[&thread_id],
        limit,
    )
}

/// The entities and relations with a source seen in `since <= t < until` (stored forms), at most `limit` of each.
pub fn span_subgraph(
    conn: &Connection,
    since: &str,
    until: &str,
    limit: usize,
) -> Result<Subgraph, DbError> {
    subgraph_of(
        conn,
        "SELECT DISTINCT entity_id FROM entity_sources WHERE seen_at >= ?1 AND seen_at < ?2 LIMIT ?3",
        "SELECT DISTINCT relation_id FROM relation_sources WHERE seen_at >= ?1 AND seen_at < ?2 LIMIT ?3",
        &[&since, &until],
        limit,
    )
}

const ENTITY_THREADS: &str =
    "SELECT source_id FROM entity_sources WHERE entity_id = ?1 AND source_kind = 'thread'
     UNION SELECT m.thread_id FROM entity_sources s JOIN messages m ON m.id = s.source_id
         WHERE s.entity_id = ?1 AND s.source_kind = 'message'";

/// The threads an entity appears in, newest first, at most `limit`, and how many there are (capped at
/// [`COUNT_CAP`] + 1).
pub fn entity_threads(
    conn: &Connection,
    id: &str,
    limit: usize,
) -> Result<(Vec<EntityThread>, u64), DbError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT t.id, t.surface, t.title, t.last_seen_at FROM threads t WHERE t.id IN ({ENTITY_THREADS})
         ORDER BY t.last_seen_at DESC, t.id LIMIT ?2"
    ))?;
    let rows = stmt
        .query_map(params![id, limit.min(MAX_LIST) as i64], |r| {
            Ok(EntityThread {
                thread_id: r.get(0)?,
                surface: r.get(1)?,
                title: r.get(2)?,
                last_seen_at: r.get(3)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    let count: i64 = conn
        .prepare_cached(&format!(
            "SELECT count(*) FROM (SELECT * FROM ({ENTITY_THREADS}) LIMIT ?2)"
        ))?
        .query_row(params![id, COUNT_CAP as i64 + 1], |r| r.get(0))?;
    Ok((rows, count as u64))
}

/// The threads any of `ids` appears in, at most `limit` (the search's entity restriction).
pub fn threads_of_entities(
    conn: &Connection,
    ids: &[String],
    limit: usize,
) -> Result<Vec<String>, DbError> {
    let mut stmt = conn.prepare_cached(&format!("{ENTITY_THREADS} LIMIT ?2"))?;
    let mut out: Vec<String> = Vec::new();
    for id in ids.iter().take(100) {
        let left = limit.saturating_sub(out.len());
        if left == 0 {
            break;
        }
        for t in stmt.query_map(params![id, left as i64], |r| r.get::<_, String>(0))? {
            let t = t?;
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    Ok(out)
}

/// The events an entity appears in, newest first, at most `limit`.
pub fn entity_events(
    conn: &Connection,
    id: &str,
    limit: usize,
) -> Result<Vec<EntityEvent>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT e.id, e.kind, e.source_surface, e.occurred_at FROM entity_sources s
         JOIN events e ON e.id = s.source_id
         WHERE s.entity_id = ?1 AND s.source_kind = 'event'
         ORDER BY e.occurred_at DESC, e.id LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![id, limit.min(MAX_LIST) as i64], |r| {
        Ok(EntityEvent {
            event_id: r.get(0)?,
            kind: r.get(1)?,
            source_surface: r.get(2)?,
            occurred_at: r.get(3)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// An entity's sources per UTC day, newest day first, at most `days` days.
pub fn timeline(conn: &Connection, id: &str, days: usize) -> Result<Vec<Day>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT substr(seen_at, 1, 10) AS d, count(*) FROM entity_sources WHERE entity_id = ?1
         GROUP BY d ORDER BY d DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![id, days.min(MAX_LIST) as i64], |r| {
        Ok(Day {
            day: r.get(0)?,
            sources: r.get::<_, i64>(1)? as u64,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The kinds entities have, at most 100.
pub fn kinds(conn: &Connection) -> Result<Vec<String>, DbError> {
    let mut stmt =
        conn.prepare_cached("SELECT DISTINCT kind FROM entities ORDER BY kind LIMIT 100")?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Entities of `kind` by name, at most `limit` (what merge candidates are looked for among).
pub fn entities_of_kind(
    conn: &Connection,
    kind: &str,
    limit: usize,
) -> Result<Vec<EntityRef>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, kind, name FROM entities WHERE kind = ?1 ORDER BY lower(name), id LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![kind, limit as i64], entity_ref)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Proposes merging `a` and `b` (of one kind). A pair already proposed, merged or dismissed is left as it is.
/// Returns whether the pair is new.
pub fn propose_merge(
    conn: &Connection,
    a: &EntityRef,
    b: &EntityRef,
    similarity: f64,
    now: OffsetDateTime,
) -> Result<bool, DbError> {
    let (a, b) = if a.id < b.id { (a, b) } else { (b, a) };
    if a.id == b.id || a.kind != b.kind {
        return Err(DbError::Invalid(
            "a merge joins two different entities of one kind".into(),
        ));
    }
    let n = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO entity_merge_candidates (a, b, kind, a_name, b_name, similarity, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            a.id,
            b.id,
            a.kind,
            a.name,
            b.name,
            similarity,
            fmt_time(now)
        ])?;
    Ok(n > 0)
}

/// Merge candidates in `state` (`proposed`, `merged`, `dismissed`), most alike first, at most `limit`.
pub fn candidates(conn: &Connection, state: &str, limit: usize) -> Result<Vec<Candidate>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT a, kind, a_name, b, b_name, similarity, state, created_at, decided_at
         FROM entity_merge_candidates WHERE state = ?1 ORDER BY similarity DESC, a, b LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![state, limit.min(MAX_LIST) as i64], |r| {
        let kind: String = r.get(1)?;
        Ok(Candidate {
            a: EntityRef {
                id: r.get(0)?,
                kind: kind.clone(),
                name: r.get(2)?,
            },
            b: EntityRef {
                id: r.get(3)?,
                kind,
                name: r.get(4)?,
            },
            similarity: r.get(5)?,
            state: r.get(6)?,
            created_at: r.get(7)?,
            decided_at: r.get(8)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Dismisses the proposed merge of `a` and `b` (either order): it is never proposed again. Returns whether there
/// was such a proposal.
pub fn dismiss(conn: &Connection, a: &str, b: &str, now: OffsetDateTime) -> Result<bool, DbError> {
    let (a, b) = if a < b { (a, b) } else { (b, a) };
    let n = conn
        .prepare_cached(
            "UPDATE entity_merge_candidates SET state = 'dismissed', decided_at = ?3
             WHERE a = ?1 AND b = ?2 AND state = 'proposed'",
        )?
        .execute(params![a, b, fmt_time(now)])?;
    Ok(n > 0)
}

/// Folds entity `gone` into `keep` (one kind), on the user's word only: `gone`'s aliases (and its name's key, given
/// by the caller as `gone_key`), sources and relations move to `keep`, relations that become the same are joined,
/// one that would join `keep` to itself is dropped, and the merge is recorded. One transaction.
pub fn merge(
    conn: &Connection,
    keep: &str,
    gone: &str,
    now: OffsetDateTime,
) -> Result<(), DbError> {
    if keep == gone {
        return Err(DbError::Invalid(
            "an entity cannot be merged into itself".into(),
        ));
    }
    let k = entity(conn, keep)?.ok_or_else(|| DbError::Invalid(format!("no entity {keep}")))?;
    let g = entity(conn, gone)?.ok_or_else(|| DbError::Invalid(format!("no entity {gone}")))?;
    if k.kind != g.kind {
        return Err(DbError::Invalid(format!(
            "{} is a {} and {} a {}: only entities of one kind merge",
            k.name, k.kind, g.name, g.kind
        )));
    }
    let at = fmt_time(now);
    let tx = begin(conn)?;
    let aliases: Vec<String> = tx
        .prepare("SELECT alias FROM entity_aliases WHERE entity_id = ?1")?
        .query_map([gone], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for a in &aliases {
        add_alias(&tx, keep, a, now)?;
    }
    tx.execute(
        "INSERT INTO entity_sources (entity_id, source_kind, source_id, how, confidence, seen_at, created_at)
         SELECT ?1, source_kind, source_id, how, confidence, seen_at, created_at FROM entity_sources
         WHERE entity_id = ?2 AND true
         ON CONFLICT(entity_id, source_kind, source_id) DO UPDATE SET
             seen_at = max(seen_at, excluded.seen_at), confidence = max(confidence, excluded.confidence)",
        params![keep, gone],
    )?;
    let rels: Vec<(String, String, String, String)> = tx
        .prepare(
            "SELECT id, subject_id, predicate, object_id FROM relations WHERE subject_id = ?1 OR object_id = ?1",
        )?
        .query_map([gone], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<Result<_, _>>()?;
    for (id, s, p, o) in rels {
        let s = if s == gone { keep.to_owned() } else { s };
        let o = if o == gone { keep.to_owned() } else { o };
        if s == o {
            tx.execute("DELETE FROM relations WHERE id = ?1", [&id])?;
            continue;
        }
        let same: Option<String> = tx
            .query_row(
                "SELECT id FROM relations WHERE subject_id = ?1 AND predicate = ?2 AND object_id = ?3",
                params![s, p, o],
                |r| r.get(0),
            )
            .optional()?;
        match same {
            Some(other) => {
                tx.execute(
                    "INSERT INTO relation_sources (relation_id, source_kind, source_id, how, confidence, seen_at,
                         created_at)
                     SELECT ?1, source_kind, source_id, how, confidence, seen_at, created_at FROM relation_sources
                     WHERE relation_id = ?2 AND true
                     ON CONFLICT(relation_id, source_kind, source_id) DO NOTHING",
                    params![other, id],
                )?;
                tx.execute(
                    "UPDATE relations SET
                         valid_from = (SELECT min(seen_at) FROM relation_sources WHERE relation_id = ?1),
                         valid_to = (SELECT max(seen_at) FROM relation_sources WHERE relation_id = ?1)
                     WHERE id = ?1",
                    [&other],
                )?;
                tx.execute("DELETE FROM relations WHERE id = ?1", [&id])?;
            }
            None => {
                tx.execute(
                    "UPDATE relations SET subject_id = ?2, object_id = ?3 WHERE id = ?1",
                    params![id, s, o],
                )?;
            }
        }
    }
    tx.execute(
        "DELETE FROM entity_merge_candidates WHERE (a = ?1 OR b = ?1) AND state = 'proposed'",
        [gone],
    )?;
    let (a, b, an, bn) = if keep < gone {
        (keep, gone, &k.name, &g.name)
    } else {
        (gone, keep, &g.name, &k.name)
    };
    tx.execute(
        "INSERT INTO entity_merge_candidates (a, b, kind, a_name, b_name, similarity, state, created_at, decided_at,
             kept)
         VALUES (?1, ?2, ?3, ?4, ?5, coalesce((SELECT similarity FROM entity_merge_candidates WHERE a = ?1 AND b = ?2), 0), 'merged', ?6, ?6, ?7)
         ON CONFLICT(a, b) DO UPDATE SET
             decided_at = CASE WHEN state = 'merged' THEN decided_at ELSE ?6 END, state = 'merged', kept = ?7,
             a_name = ?4, b_name = ?5",
        params![a, b, k.kind, an, bn, at, keep],
    )?;
    tx.execute("DELETE FROM entities WHERE id = ?1", [gone])?;
    tx.commit()?;
    Ok(())
}

/// Merges the user decided (here or on a sync peer) whose two entities both exist here: `(kept, gone)` pairs, at
/// most `limit`. A peer's merge arrives before this relay has derived one of its entities, or a later pass makes
/// the folded one again from a new mention; the graph's pass folds them.
pub fn unsettled_merges(conn: &Connection, limit: usize) -> Result<Vec<(String, String)>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT c.kept, CASE WHEN c.kept = c.a THEN c.b ELSE c.a END FROM entity_merge_candidates c
         WHERE c.state = 'merged' AND c.kept IS NOT NULL
           AND EXISTS (SELECT 1 FROM entities WHERE id = c.a) AND EXISTS (SELECT 1 FROM entities WHERE id = c.b)
         ORDER BY c.decided_at, c.a, c.b LIMIT ?1",
    )?;
    let rows = stmt.query_map([limit.min(MAX_LIST) as i64], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A named value of the derivation's state.
pub fn state(conn: &Connection, key: &str) -> Result<Option<String>, DbError> {
    Ok(conn
        .prepare_cached("SELECT value FROM graph_state WHERE key = ?1")?
        .query_row([key], |r| r.get(0))
        .optional()?)
}

/// Sets a named value of the derivation's state.
pub fn set_state(conn: &Connection, key: &str, value: &str) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO graph_state (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = ?2",
    )?
    .execute(params![key, value])?;
    Ok(())
}

/// Messages with a pk above `after`, in pk order, at most `limit`.
pub fn messages_after(
    conn: &Connection,
    after: i64,
    limit: usize,
) -> Result<Vec<MessageRow>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT pk, id, thread_id, role, content, captured_at FROM messages WHERE pk > ?1 ORDER BY pk LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![after, limit.min(MAX_LIST * 10) as i64], message_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A thread's messages in pk order, at most `limit`.
pub fn thread_messages(
    conn: &Connection,
    thread_id: &str,
    limit: usize,
) -> Result<Vec<MessageRow>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT pk, id, thread_id, role, content, captured_at FROM messages WHERE thread_id = ?1
         ORDER BY pk LIMIT ?2",
    )?;
    let rows = stmt.query_map(
        params![thread_id, limit.min(MAX_LIST * 10) as i64],
        message_row,
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn message_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<MessageRow> {
    Ok(MessageRow {
        pk: r.get(0)?,
        id: r.get(1)?,
        thread_id: r.get(2)?,
        role: r.get(3)?,
        content: r.get(4)?,
        captured_at: r.get(5)?,
    })
}

/// An event as the derivation reads it (never its content: only its kind and named attributes).
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    pub pk: i64,
    pub id: String,
    pub kind: String,
    pub attrs: String,
    pub occurred_at: String,
}

/// Events with a pk above `after`, in pk order, at most `limit`.
pub fn events_after(conn: &Connection, after: i64, limit: usize) -> Result<Vec<EventRow>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT pk, id, kind, attrs, occurred_at FROM events WHERE pk > ?1 ORDER BY pk LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![after, limit.min(MAX_LIST * 10) as i64], |r| {
        Ok(EventRow {
            pk: r.get(0)?,
            id: r.get(1)?,
            kind: r.get(2)?,
            attrs: r.get(3)?,
            occurred_at: r.get(4)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// One thread as the derivation reads it.
pub fn thread_meta(conn: &Connection, thread_id: &str) -> Result<Option<ThreadMeta>, DbError> {
    Ok(conn
        .prepare_cached(
            "SELECT id, surface, title, url, first_seen_at, last_seen_at FROM threads WHERE id = ?1",
        )?
        .query_row([thread_id], |r| {
            Ok(ThreadMeta {
                id: r.get(0)?,
                surface: r.get(1)?,
                title: r.get(2)?,
                url: r.get(3)?,
                first_seen_at: r.get(4)?,
                last_seen_at: r.get(5)?,
            })
        })
        .optional()?)
}

/// Threads whose links a forget removed, at most `limit`.
pub fn redo_threads(conn: &Connection, limit: usize) -> Result<Vec<String>, DbError> {
    let mut stmt =
        conn.prepare_cached("SELECT thread_id FROM graph_redo ORDER BY thread_id LIMIT ?1")?;
    let rows = stmt.query_map([limit as i64], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Marks a thread read again after a forget.
pub fn redo_done(conn: &Connection, thread_id: &str) -> Result<(), DbError> {
    conn.prepare_cached("DELETE FROM graph_redo WHERE thread_id = ?1")?
        .execute([thread_id])?;
    Ok(())
}

/// How many entities, relations and proposed merges the corpus holds.
pub fn counts(conn: &Connection) -> Result<(u64, u64, u64), DbError> {
    Ok(conn.query_row(
        "SELECT (SELECT count(*) FROM entities), (SELECT count(*) FROM relations),
                (SELECT count(*) FROM entity_merge_candidates WHERE state = 'proposed')",
        [],
        |r| {
            Ok((
                r.get::<_, i64>(0)? as u64,
                r.get::<_, i64>(1)? as u64,
                r.get::<_, i64>(2)? as u64,
            ))
        },
    )?)
}

/// Runs inside the forget transaction, before `forget_sel`'s messages go: the sources of the forgotten messages
/// go, and so do the thread-level sources of every thread they were in (a thread's links may rest on any of its
/// turns); relations and entities left without a source are deleted, the validity of the rest narrowed to what
/// is left, and the threads queued for the derivation to read again from the turns that stay.
pub(crate) fn forget_selected(tx: &rusqlite::Transaction<'_>) -> Result<(), DbError> {
    tx.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS graph_forget_threads (thread_id TEXT PRIMARY KEY);
         CREATE TEMP TABLE IF NOT EXISTS graph_touched_relations (id TEXT PRIMARY KEY);
         CREATE TEMP TABLE IF NOT EXISTS graph_touched_entities (id TEXT PRIMARY KEY);
         DELETE FROM graph_forget_threads; DELETE FROM graph_touched_relations; DELETE FROM graph_touched_entities;
         INSERT OR IGNORE INTO graph_forget_threads SELECT DISTINCT thread_id FROM forget_sel;
         INSERT OR IGNORE INTO graph_touched_relations
             SELECT relation_id FROM relation_sources WHERE source_kind = 'message'
                 AND source_id IN (SELECT id FROM forget_sel)
             UNION SELECT relation_id FROM relation_sources WHERE source_kind = 'thread'
                 AND source_id IN (SELECT thread_id FROM graph_forget_threads);
         INSERT OR IGNORE INTO graph_touched_entities
             SELECT entity_id FROM entity_sources WHERE source_kind = 'message'
                 AND source_id IN (SELECT id FROM forget_sel)
             UNION SELECT entity_id FROM entity_sources WHERE source_kind = 'thread'
                 AND source_id IN (SELECT thread_id FROM graph_forget_threads);
         DELETE FROM relation_sources WHERE source_kind = 'message' AND source_id IN (SELECT id FROM forget_sel);
         DELETE FROM relation_sources WHERE source_kind = 'thread'
             AND source_id IN (SELECT thread_id FROM graph_forget_threads);
         DELETE FROM entity_sources WHERE source_kind = 'message' AND source_id IN (SELECT id FROM forget_sel);
         DELETE FROM entity_sources WHERE source_kind = 'thread'
             AND source_id IN (SELECT thread_id FROM graph_forget_threads);
         DELETE FROM graph_touched_entities
             WHERE EXISTS (SELECT 1 FROM entity_sources s WHERE s.entity_id = graph_touched_entities.id);
         INSERT OR IGNORE INTO graph_touched_relations
             SELECT id FROM relations WHERE subject_id IN (SELECT id FROM graph_touched_entities)
             UNION SELECT id FROM relations WHERE object_id IN (SELECT id FROM graph_touched_entities);
         DELETE FROM relations WHERE id IN (SELECT id FROM graph_touched_relations)
             AND (NOT EXISTS (SELECT 1 FROM relation_sources s WHERE s.relation_id = relations.id)
                  OR subject_id IN (SELECT id FROM graph_touched_entities)
                  OR object_id IN (SELECT id FROM graph_touched_entities));
         UPDATE relations SET
             valid_from = (SELECT min(seen_at) FROM relation_sources s WHERE s.relation_id = relations.id),
             valid_to = (SELECT max(seen_at) FROM relation_sources s WHERE s.relation_id = relations.id)
             WHERE id IN (SELECT id FROM graph_touched_relations);
         DELETE FROM entity_merge_candidates WHERE a IN (SELECT id FROM graph_touched_entities)
             OR b IN (SELECT id FROM graph_touched_entities);
         DELETE FROM entities WHERE id IN (SELECT id FROM graph_touched_entities);
         INSERT OR IGNORE INTO graph_redo SELECT thread_id FROM graph_forget_threads;",
    )?;
    Ok(())
}
