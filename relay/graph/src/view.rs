//! The graph as every front end shows it: finding an entity by id or name, everything about it in one value
//! ([`EntityView`]), its compact text for readers that pay per character ([`compact`]), neighbours, a path, and the
//! user's merge. The CLI, the HTTP API, MCP and the dashboard all call these.

use personkit_store::Connection;
use personkit_store::graph::{
    self as store, Day, Edge, EntityEvent, EntityInfo, EntityRef, EntityThread, Subgraph,
};
use serde::Serialize;
use time::OffsetDateTime;

use crate::{GraphError, Kind, key};

/// Relations an [`EntityView`] holds.
pub const VIEW_RELATIONS: usize = 30;
/// Events an [`EntityView`] holds.
pub const VIEW_EVENTS: usize = 20;
/// Days of an [`EntityView`]'s timeline.
pub const VIEW_DAYS: usize = 60;

/// Everything about one entity, bounded.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct EntityView {
    pub entity: EntityInfo,
    /// Its relations, newest validity first.
    pub relations: Vec<Edge>,
    /// Its threads, newest first.
    pub threads: Vec<EntityThread>,
    /// How many threads it appears in (more than 10,000 reads 10,001).
    pub thread_count: u64,
    pub events: Vec<EntityEvent>,
    /// Sources per day, newest day first.
    pub timeline: Vec<Day>,
}

/// The entity `name_or_id` names: an entity id, else a name or alias of any kind, else the only entity whose name
/// contains it. Several matches: the one with the most sources.
pub fn lookup(conn: &Connection, name_or_id: &str) -> Result<EntityInfo, GraphError> {
    let q = name_or_id.trim();
    if q.is_empty() {
        return Err(GraphError::Invalid(
            "name an entity (its name, an alias or its id)".into(),
        ));
    }
    if let Some(e) = store::entity(conn, q)? {
        return Ok(e);
    }
    let mut found: Vec<EntityRef> = Vec::new();
    for k in [key(Kind::Tool, q), key(Kind::Site, q)] {
        for e in store::resolve_any(conn, &k, 20)? {
            if !found.iter().any(|f| f.id == e.id) {
                found.push(e);
            }
        }
    }
    if found.is_empty() {
        let near = store::find(conn, Some(q), None, 6)?;
        if near.len() == 1 {
            found = near;
        } else if !near.is_empty() {
            let names: Vec<String> = near
                .iter()
                .take(5)
                .map(|e| format!("{} ({}, {})", e.name, e.kind, e.id))
                .collect();
            return Err(GraphError::NotFound(format!(
                "{q:?} matches several entities: {}; give one's id",
                names.join("; ")
            )));
        }
    }
    let mut best: Option<EntityInfo> = None;
    for f in found {
        if let Some(e) = store::entity(conn, &f.id)?
            && best.as_ref().is_none_or(|b| e.sources > b.sources)
        {
            best = Some(e);
        }
    }
    best.ok_or_else(|| GraphError::NotFound(format!("no entity named {q:?}")))
}

/// Everything about entity `id`, with at most `threads` threads.
pub fn view(conn: &Connection, id: &str, threads: usize) -> Result<EntityView, GraphError> {
    let entity =
        store::entity(conn, id)?.ok_or_else(|| GraphError::NotFound(format!("no entity {id}")))?;
    let relations = store::edges_of(conn, id, VIEW_RELATIONS)?;
    let (threads, thread_count) = store::entity_threads(conn, id, threads)?;
    Ok(EntityView {
        relations,
        threads,
        thread_count,
        events: store::entity_events(conn, id, VIEW_EVENTS)?,
        timeline: store::timeline(conn, id, VIEW_DAYS)?,
        entity,
    })
}

/// Entities whose name or alias contains `q`, of `kind` when given.
pub fn search(
    conn: &Connection,
    q: Option<&str>,
    kind: Option<&str>,
    limit: usize,
) -> Result<Vec<EntityRef>, GraphError> {
    if let Some(k) = kind
        && Kind::parse(k).is_none()
    {
        return Err(GraphError::Invalid(format!("no entity kind {k:?}")));
    }
    if limit == 0 || limit > store::MAX_LIST {
        return Err(GraphError::Invalid(format!(
            "limit must be 1 to {}",
            store::MAX_LIST
        )));
    }
    Ok(store::find(
        conn,
        q.filter(|q| !q.trim().is_empty()),
        kind,
        limit,
    )?)
}

/// The neighbours of `id` within `depth` (1 or 2).
pub fn neighbours(conn: &Connection, id: &str, depth: u32) -> Result<Subgraph, GraphError> {
    if store::entity(conn, id)?.is_none() {
        return Err(GraphError::NotFound(format!("no entity {id}")));
    }
    Ok(store::neighbours(conn, id, depth, 50)?)
}

/// The shortest path from `from` to `to`, at most `depth` (1 to 4) relations.
pub fn path(
    conn: &Connection,
    from: &str,
    to: &str,
    depth: u32,
) -> Result<Option<Vec<Edge>>, GraphError> {
    for id in [from, to] {
        if store::entity(conn, id)?.is_none() {
            return Err(GraphError::NotFound(format!("no entity {id}")));
        }
    }
    Ok(store::path(conn, from, to, depth)?)
}

/// Entities and relations a thread or its turns support, at most `limit` of each.
pub fn thread_subgraph(
    conn: &Connection,
    thread_id: &str,
    limit: usize,
) -> Result<Subgraph, GraphError> {
    Ok(store::thread_subgraph(conn, thread_id, limit)?)
}

/// Entities and relations with a source on a UTC day (`YYYY-MM-DD`), at most `limit` of each.
pub fn day_subgraph(conn: &Connection, day: &str, limit: usize) -> Result<Subgraph, GraphError> {
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let date = time::Date::parse(day, format)
        .map_err(|_| GraphError::Invalid(format!("{day:?} is not a day (YYYY-MM-DD)")))?;
    let since = date.midnight().assume_utc();
    let until = since + time::Duration::days(1);
    Ok(store::span_subgraph(
        conn,
        &personkit_store::clock::fmt_time(since),
        &personkit_store::clock::fmt_time(until),
        limit,
    )?)
}

/// The user's merge: `gone` folded into `keep`.
pub fn merge(
    conn: &Connection,
    keep: &str,
    gone: &str,
    now: OffsetDateTime,
) -> Result<(), GraphError> {
    for id in [keep, gone] {
        if store::entity(conn, id)?.is_none() {
            return Err(GraphError::NotFound(format!("no entity {id}")));
        }
    }
    Ok(store::merge(conn, keep, gone, now)?)
}

fn day(t: &Option<String>) -> &str {
    t.as_deref().map_or("?", |t| t.get(..10).unwrap_or(t))
}

/// The other end of an edge seen from `id`, with the predicate read in that direction.
pub fn other_end<'a>(e: &'a Edge, id: &str) -> (&'a EntityRef, String) {
    if e.subject.id == id {
        (&e.object, e.predicate.clone())
    } else {
        (&e.subject, format!("{} (of)", e.predicate))
    }
}

/// The view as compact text, at most `budget` characters (cut at a line end).
pub fn compact(v: &EntityView, budget: usize) -> String {
    let e = &v.entity;
    let mut lines = vec![format!("{} ({}) id {}", e.name, e.kind, e.id)];
    if !e.aliases.is_empty() {
        lines.push(format!("aliases: {}", e.aliases.join(", ")));
    }
    lines.push(format!(
        "seen {} to {}, {} threads",
        day(&e.first_seen),
        day(&e.last_seen),
        v.thread_count
    ));
    for r in &v.relations {
        let (other, p) = other_end(r, &e.id);
        lines.push(format!(
            "- {p} {} ({}) {}..{}",
            other.name,
            other.kind,
            day(&r.valid_from),
            day(&r.valid_to)
        ));
    }
    for t in &v.threads {
        lines.push(format!(
            "thread {} {} {} {}",
            &t.thread_id,
            day(&Some(t.last_seen_at.clone())),
            t.surface,
            t.title.as_deref().unwrap_or("(untitled)")
        ));
    }
    for ev in &v.events {
        lines.push(format!(
            "event {} {} {}",
            day(&Some(ev.occurred_at.clone())),
            ev.kind,
            ev.event_id
        ));
    }
    cut(&lines, budget)
}

/// Neighbours as compact text, at most `budget` characters.
pub fn compact_neighbours(center: &EntityInfo, g: &Subgraph, budget: usize) -> String {
    let mut lines = vec![format!(
        "{} ({}) id {}: {} related{}",
        center.name,
        center.kind,
        center.id,
        g.entities.len(),
        if g.truncated {
            " (cut at the bounds)"
        } else {
            ""
        }
    )];
    for e in &g.edges {
        lines.push(format!(
            "- {} ({}) {} {} ({})",
            e.subject.name, e.subject.kind, e.predicate, e.object.name, e.object.kind
        ));
    }
    cut(&lines, budget)
}

fn cut(lines: &[String], budget: usize) -> String {
    let mut out = String::new();
    for l in lines {
        if out.chars().count() + l.chars().count() + 1 > budget {
            if out.is_empty() {
                out = l.chars().take(budget).collect();
            }
            break;
        }
        out.push_str(l);
        out.push('\n');
    }
    out
}
