//! Entities a language model found in turns, waiting for the user (migration 0027). `personkit-graph`'s
//! extraction files them here ([`propose`]); the user approves or rejects each ([`decide`]); the graph stores an
//! approved one with its messages as sources. Rows here are never read by agents.

use rusqlite::{Connection, OptionalExtension, params};
use schemars::JsonSchema;
use serde::Serialize;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::clock::fmt_time;
use crate::db::DbError;

/// Most proposals one [`list`] answers.
pub const MAX_LIST: usize = 1_000;
/// Most source messages [`sources`] answers for one proposal.
pub const MAX_SOURCES: usize = 500;

/// Where a proposal stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Proposed,
    Approved,
    Rejected,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Proposed => "proposed",
            State::Approved => "approved",
            State::Rejected => "rejected",
        }
    }

    pub fn parse(s: &str) -> Option<State> {
        [State::Proposed, State::Approved, State::Rejected]
            .into_iter()
            .find(|x| x.as_str() == s)
    }
}

/// One mention the model found: a name of a kind in one message.
#[derive(Debug, Clone, PartialEq)]
pub struct Mention<'a> {
    pub kind: &'a str,
    pub name: &'a str,
    /// The graph's key of the name.
    pub key: &'a str,
    pub confidence: f64,
    pub model: &'a str,
    pub message_id: &'a str,
    pub thread_id: &'a str,
    /// The message's own time.
    pub seen_at: &'a str,
}

/// A proposal as listed.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Proposal {
    pub id: String,
    pub kind: String,
    pub name: String,
    pub confidence: f64,
    pub model: String,
    pub state: State,
    /// The graph entity an approval made (or found).
    pub entity_id: Option<String>,
    /// Messages it was found in.
    pub messages: u64,
    /// Threads it was found in.
    pub threads: u64,
    pub created_at: String,
    pub decided_at: Option<String>,
}

/// One message a proposal was found in.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ProposalSource {
    pub message_id: String,
    pub thread_id: String,
    pub confidence: f64,
    pub seen_at: String,
}

/// The id of the proposal of `key` of `kind`.
pub fn proposal_id(kind: &str, key: &str) -> String {
    let mut h = Sha256::new();
    for p in ["proposal", kind, key] {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    hex::encode(&h.finalize()[..16])
}

/// Files `m`: a new proposal, or one more source of the existing proposal of its kind and key (the higher
/// confidence kept). Returns the proposal's id and state; a caller links a mention of an approved name itself.
pub fn propose(
    conn: &Connection,
    m: &Mention<'_>,
    now: OffsetDateTime,
) -> Result<(String, State), DbError> {
    if m.kind.is_empty() || m.key.is_empty() || m.name.trim().is_empty() {
        return Err(DbError::Invalid(
            "a proposal needs a kind, a name and a key".into(),
        ));
    }
    if !(0.0..=1.0).contains(&m.confidence) {
        return Err(DbError::Invalid("a confidence is between 0 and 1".into()));
    }
    let id = proposal_id(m.kind, m.key);
    let at = fmt_time(now);
    conn.prepare_cached(
        "INSERT INTO entity_proposals (id, kind, name, key, confidence, model, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT(id) DO UPDATE SET confidence = max(confidence, excluded.confidence)",
    )?
    .execute(params![
        id,
        m.kind,
        m.name,
        m.key,
        m.confidence,
        m.model,
        at
    ])?;
    conn.prepare_cached(
        "INSERT INTO entity_proposal_sources (proposal_id, message_id, thread_id, confidence, seen_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT(proposal_id, message_id) DO UPDATE SET confidence = max(confidence, excluded.confidence)",
    )?
    .execute(params![id, m.message_id, m.thread_id, m.confidence, m.seen_at])?;
    let state: String = conn
        .prepare_cached("SELECT state FROM entity_proposals WHERE id = ?1")?
        .query_row([&id], |r| r.get(0))?;
    Ok((id, State::parse(&state).unwrap_or(State::Proposed)))
}

const SELECT: &str = "SELECT p.id, p.kind, p.name, p.confidence, p.model, p.state, p.entity_id,
        (SELECT count(*) FROM entity_proposal_sources s WHERE s.proposal_id = p.id),
        (SELECT count(DISTINCT thread_id) FROM entity_proposal_sources s WHERE s.proposal_id = p.id),
        p.created_at, p.decided_at
     FROM entity_proposals p";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Proposal> {
    let state: String = r.get(5)?;
    Ok(Proposal {
        id: r.get(0)?,
        kind: r.get(1)?,
        name: r.get(2)?,
        confidence: r.get(3)?,
        model: r.get(4)?,
        state: State::parse(&state).unwrap_or(State::Proposed),
        entity_id: r.get(6)?,
        messages: r.get::<_, i64>(7)?.max(0) as u64,
        threads: r.get::<_, i64>(8)?.max(0) as u64,
        created_at: r.get(9)?,
        decided_at: r.get(10)?,
    })
}

/// Proposals in `state`, the most confident first (then the most mentioned), at most `limit`.
pub fn list(conn: &Connection, state: State, limit: usize) -> Result<Vec<Proposal>, DbError> {
    let mut stmt = conn.prepare_cached(&format!(
        "{SELECT} WHERE p.state = ?1 ORDER BY p.confidence DESC, 8 DESC, p.name LIMIT ?2"
    ))?;
    let rows = stmt.query_map(params![state.as_str(), limit.min(MAX_LIST) as i64], row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// One proposal, or `None`.
pub fn get(conn: &Connection, id: &str) -> Result<Option<Proposal>, DbError> {
    Ok(conn
        .prepare_cached(&format!("{SELECT} WHERE p.id = ?1"))?
        .query_row([id], row)
        .optional()?)
}

/// How many proposals wait for the user.
pub fn waiting(conn: &Connection) -> Result<u64, DbError> {
    let n: i64 = conn
        .prepare_cached("SELECT count(*) FROM entity_proposals WHERE state = 'proposed'")?
        .query_row([], |r| r.get(0))?;
    Ok(n.max(0) as u64)
}

/// The messages a proposal was found in, oldest first, at most [`MAX_SOURCES`].
pub fn sources(conn: &Connection, id: &str) -> Result<Vec<ProposalSource>, DbError> {
    sources_where(conn, id, false)
}

fn sources_where(
    conn: &Connection,
    id: &str,
    stored_here: bool,
) -> Result<Vec<ProposalSource>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT s.message_id, s.thread_id, s.confidence, s.seen_at FROM entity_proposal_sources s
         WHERE s.proposal_id = ?1 AND (?3 = 0 OR EXISTS (SELECT 1 FROM messages m WHERE m.id = s.message_id))
         ORDER BY s.seen_at, s.message_id LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![id, MAX_SOURCES as i64, stored_here], |r| {
        Ok(ProposalSource {
            message_id: r.get(0)?,
            thread_id: r.get(1)?,
            confidence: r.get(2)?,
            seen_at: r.get(3)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Records the user's decision (and, for an approval, the entity it made). A decision on a decided proposal
/// replaces it.
pub fn decide(
    conn: &Connection,
    id: &str,
    state: State,
    entity_id: Option<&str>,
    now: OffsetDateTime,
) -> Result<bool, DbError> {
    let n = conn
        .prepare_cached(
            "UPDATE entity_proposals SET state = ?2, entity_id = ?3, decided_at = ?4 WHERE id = ?1",
        )?
        .execute(params![id, state.as_str(), entity_id, fmt_time(now)])?;
    Ok(n > 0)
}

/// Approved proposals the graph has yet to link here (a peer's approval, or a message of one that arrived since),
/// at most `limit`.
pub fn unsettled(conn: &Connection, limit: usize) -> Result<Vec<String>, DbError> {
    let mut stmt =
        conn.prepare_cached("SELECT proposal_id FROM graph_settle ORDER BY proposal_id LIMIT ?1")?;
    let rows = stmt.query_map([limit.min(MAX_LIST) as i64], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Records the entity an approved proposal is linked to here (a decision made on a peer names its own).
pub fn set_entity(conn: &Connection, id: &str, entity_id: &str) -> Result<(), DbError> {
    conn.prepare_cached("UPDATE entity_proposals SET entity_id = ?2 WHERE id = ?1")?
        .execute(params![id, entity_id])?;
    Ok(())
}

/// Takes a proposal off the list [`unsettled`] reads.
pub fn settled(conn: &Connection, id: &str) -> Result<(), DbError> {
    conn.prepare_cached("DELETE FROM graph_settle WHERE proposal_id = ?1")?
        .execute([id])?;
    Ok(())
}

/// The messages of a proposal that are stored here, oldest first, at most [`MAX_SOURCES`].
pub fn sources_here(conn: &Connection, id: &str) -> Result<Vec<ProposalSource>, DbError> {
    sources_where(conn, id, true)
}

/// Inside a forget (`forget::remove_selected`): the selected messages' rows go, and every proposal left without a
/// message with them.
pub(crate) fn forget_selected(tx: &rusqlite::Transaction<'_>) -> Result<(), DbError> {
    tx.execute_batch(
        "DELETE FROM entity_proposal_sources WHERE message_id IN (SELECT id FROM forget_sel);
         DELETE FROM entity_proposals WHERE NOT EXISTS (
             SELECT 1 FROM entity_proposal_sources s WHERE s.proposal_id = entity_proposals.id);",
    )?;
    Ok(())
}
