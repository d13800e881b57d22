//! Relay-to-relay sync's storage (docs/sync.md): sync pairing codes, the peers this relay syncs with and their
//! cursors, the change feed's rows, and the row-level reads and writes a peer's page is applied with. The page
//! format, its validation and the merge rules are `personkit-sync`'s: it reads rows here ([`feed`],
//! [`thread_row`], [`message_row`], [`tombstone_row`], [`memory_row`]) and applies a page through a [`SyncTx`], which only stores
//! the values the rules computed.
//!
//! `sync_log` (migration 0012) is the feed: every change to a syncable row moves the row's entry to the end, so a
//! peer's cursor (a sequence number of that log) resumes exactly where it stopped.
//!
//! **Architecture invariant:** a page is applied in one transaction ([`apply_in_transaction`]), and the peer's
//! cursor moves in that same transaction: a cursor never passes rows that were not committed.

use std::fmt;

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use serde::Serialize;
use time::{Duration, OffsetDateTime};

use crate::auth::{AuthError, CODE_LEN, CODE_TTL, PairingCode, hash_secret, normalize_code};
use crate::clock::fmt_time;
use crate::db::DbError;
use crate::forget::Arriving;

/// Prefix of sync tokens, so a leaked one is recognisable.
pub const SYNC_TOKEN_PREFIX: &str = "pks_";

/// A sync token: the secret one relay sends another. Shown to (and kept by) the calling relay only.
#[derive(Clone, PartialEq, Eq)]
pub struct SyncToken(String);

impl SyncToken {
    pub fn new(secret: String) -> SyncToken {
        SyncToken(secret)
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SyncToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SyncToken(<redacted>)")
    }
}

/// A relay this one syncs with, as listed (never with its secret).
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct Peer {
    /// The peer's relay id.
    pub id: String,
    pub name: String,
    /// Where this relay calls it; `None` when only the peer calls this relay.
    pub url: Option<String>,
    /// Whether the peer holds a token of this relay (it added this relay with a code of `pair --sync`).
    pub calls_us: bool,
    pub pull_cursor: i64,
    pub push_cursor: i64,
    pub created_at: String,
    pub last_sync_at: Option<String>,
    pub last_error: Option<String>,
    pub revoked_at: Option<String>,
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("url", &self.url)
            .field("token", &"<redacted>")
            .field("revoked", &self.revoked_at.is_some())
            .finish()
    }
}

/// What this relay needs to call a peer.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub peer: Peer,
    pub token: SyncToken,
}

const PEER_COLUMNS: &str =
    "id, name, url, token_hash IS NOT NULL, pull_cursor, push_cursor, created_at,
    last_sync_at, last_error, revoked_at";

fn peer_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Peer> {
    Ok(Peer {
        id: r.get(0)?,
        name: r.get(1)?,
        url: r.get(2)?,
        calls_us: r.get(3)?,
        pull_cursor: r.get(4)?,
        push_cursor: r.get(5)?,
        created_at: r.get(6)?,
        last_sync_at: r.get(7)?,
        last_error: r.get(8)?,
        revoked_at: r.get(9)?,
    })
}

/// Make a one-time sync code valid for [`CODE_TTL`] (`personkit pair --sync`).
pub fn create_sync_code(
    conn: &Connection,
    now: OffsetDateTime,
) -> Result<(PairingCode, OffsetDateTime), DbError> {
    let code = crate::auth::random_code()?;
    let expires = now + CODE_TTL;
    conn.execute(
        "INSERT INTO sync_codes(code_hash, created_at, expires_at) VALUES (?1, ?2, ?3)",
        params![hash_secret(&code), fmt_time(now), fmt_time(expires)],
    )?;
    conn.execute(
        "DELETE FROM sync_codes WHERE used_at IS NULL AND expires_at < ?1",
        [fmt_time(now - Duration::days(1))],
    )?;
    debug_assert_eq!(code.len(), CODE_LEN);
    Ok((PairingCode::from_normalized(code), expires))
}

/// Redeem a sync code for the relay `peer_id` (named `name`): marks the code used and records the peer with a
/// fresh token (stored hashed), in one transaction. A peer that pairs again gets a new token; the old one stops.
pub fn redeem_sync_code(
    conn: &mut Connection,
    code: &str,
    peer_id: &str,
    name: &str,
    now: OffsetDateTime,
) -> Result<SyncToken, AuthError> {
    let code = normalize_code(code).ok_or(AuthError::InvalidCode)?;
    let peer_id = clean_name(peer_id);
    if peer_id.is_empty() {
        return Err(AuthError::InvalidCode);
    }
    let name = clean_name(name);
    let token = SyncToken(format!(
        "{SYNC_TOKEN_PREFIX}{}",
        hex::encode(crate::auth::random_bytes::<32>()?)
    ));
    let now_s = fmt_time(now);
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let used = tx.execute(
        "UPDATE sync_codes SET used_at = ?2 WHERE code_hash = ?1 AND used_at IS NULL AND expires_at > ?2",
        params![hash_secret(&code), now_s],
    )?;
    if used != 1 {
        return Err(AuthError::InvalidCode);
    }
    tx.execute(
        "INSERT INTO sync_peers(id, name, token_hash, created_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(id) DO UPDATE SET token_hash = ?3, revoked_at = NULL,
             name = CASE WHEN ?2 = '' THEN name ELSE ?2 END",
        params![peer_id, name, hash_secret(token.expose()), now_s],
    )?;
    tx.commit()?;
    Ok(token)
}

fn clean_name(s: &str) -> String {
    s.trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(100)
        .collect()
}

/// Record a peer this relay calls (`personkit sync add`): its id and name as it answered, its URL and the token
/// it issued. Adding a known peer again replaces its URL and token and keeps its cursors.
pub fn add_outgoing(
    conn: &Connection,
    peer_id: &str,
    name: &str,
    url: &str,
    token: &SyncToken,
    now: OffsetDateTime,
) -> Result<(), DbError> {
    conn.execute(
        "INSERT INTO sync_peers(id, name, url, token, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT(id) DO UPDATE SET name = ?2, url = ?3, token = ?4, revoked_at = NULL, last_error = NULL",
        params![peer_id, clean_name(name), url, token.expose(), fmt_time(now)],
    )?;
    Ok(())
}

/// Every peer, newest first.
pub fn list_peers(conn: &Connection) -> Result<Vec<Peer>, DbError> {
    Ok(conn
        .prepare(&format!(
            "SELECT {PEER_COLUMNS} FROM sync_peers ORDER BY created_at DESC, id"
        ))?
        .query_map([], peer_row)?
        .collect::<Result<_, _>>()?)
}

/// The peers this relay calls (not revoked), with their tokens.
pub fn outgoing(conn: &Connection) -> Result<Vec<Outgoing>, DbError> {
    Ok(conn
        .prepare(&format!(
            "SELECT {PEER_COLUMNS}, token FROM sync_peers
             WHERE url IS NOT NULL AND token IS NOT NULL AND revoked_at IS NULL ORDER BY created_at, id"
        ))?
        .query_map([], |r| {
            Ok(Outgoing {
                peer: peer_row(r)?,
                token: SyncToken(r.get(10)?),
            })
        })?
        .collect::<Result<_, _>>()?)
}

/// The peer a sync token belongs to, if it is one and not revoked.
pub fn authenticate(conn: &Connection, token: &str) -> Result<Option<Peer>, DbError> {
    if !token.starts_with(SYNC_TOKEN_PREFIX) {
        return Ok(None);
    }
    Ok(conn
        .query_row(
            &format!(
                "SELECT {PEER_COLUMNS} FROM sync_peers WHERE token_hash = ?1 AND revoked_at IS NULL"
            ),
            [hash_secret(token)],
            peer_row,
        )
        .optional()?)
}

/// Revoke a peer by name or (a unique prefix of) its id: its token is refused from the next request on, and this
/// relay stops calling it. Returns the peer as it was.
pub fn revoke_peer(conn: &Connection, which: &str, now: OffsetDateTime) -> Result<Peer, AuthError> {
    let matches: Vec<Peer> = list_peers(conn)?
        .into_iter()
        .filter(|p| p.revoked_at.is_none() && (p.name == which || p.id.starts_with(which)))
        .collect();
    match matches.as_slice() {
        [] => Err(AuthError::NoSuchDevice(which.to_owned())),
        [p] => {
            conn.execute(
                "UPDATE sync_peers SET revoked_at = ?2, token = NULL, token_hash = NULL WHERE id = ?1",
                params![p.id, fmt_time(now)],
            )?;
            Ok(p.clone())
        }
        _ => Err(AuthError::AmbiguousDevice(which.to_owned())),
    }
}

/// Record how a sync round with a peer ended (`None`: it went well).
pub fn record_result(
    conn: &Connection,
    peer_id: &str,
    error: Option<&str>,
    now: OffsetDateTime,
) -> Result<(), DbError> {
    conn.execute(
        "UPDATE sync_peers SET last_sync_at = ?2, last_error = ?3 WHERE id = ?1",
        params![peer_id, fmt_time(now), error],
    )?;
    Ok(())
}

/// Move the push cursor (this relay's log, as far as the peer acknowledged it).
pub fn set_push_cursor(conn: &Connection, peer_id: &str, cursor: i64) -> Result<(), DbError> {
    conn.execute(
        "UPDATE sync_peers SET push_cursor = max(push_cursor, ?2) WHERE id = ?1",
        params![peer_id, cursor],
    )?;
    Ok(())
}

/// A peer's push cursor as stored now (a pull may have moved it past what the peer already has).
pub fn push_cursor(conn: &Connection, peer_id: &str) -> Result<i64, DbError> {
    Ok(conn
        .query_row(
            "SELECT push_cursor FROM sync_peers WHERE id = ?1",
            [peer_id],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(0))
}

/// The newest sequence number of this relay's change feed.
pub fn head(conn: &Connection) -> Result<i64, DbError> {
    Ok(
        conn.query_row("SELECT coalesce(max(seq), 0) FROM sync_log", [], |r| {
            r.get(0)
        })?,
    )
}

/// How many feed entries lie after `after` (for progress bars).
pub fn pending(conn: &Connection, after: i64) -> Result<i64, DbError> {
    Ok(conn.query_row(
        "SELECT count(*) FROM sync_log WHERE seq > ?1",
        [after],
        |r| r.get(0),
    )?)
}

// ---------------------------------------------------------------------------------------------------------------
// The feed's rows, as stored.

/// What one entry of the feed names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A thread, by id.
    Thread(String),
    /// A message, by row number.
    Message(i64),
    /// A tombstone, by the id it forgets.
    Tombstone(String),
    /// A memory version, by id (migration 0023).
    Memory(String),
    /// A harvested event, by id (migration 0028).
    Event(String),
    /// A decided merge candidate, by its two entity ids (migration 0028).
    Merge(String, String),
    /// An entity proposal, by id (migration 0028).
    Proposal(String),
    /// A shape the table's CHECK rules out; it still moves the cursor.
    Other,
}

/// The feed after `after`, at most `limit` entries, in sequence order.
pub fn feed(conn: &Connection, after: i64, limit: usize) -> Result<Vec<(i64, Change)>, DbError> {
    // Messages are named by row number, threads and tombstones by id (migration 0015).
    Ok(conn
        .prepare_cached(
            "SELECT seq, kind, id, pk FROM sync_log WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )?
        .query_map(
            params![after, i64::try_from(limit).unwrap_or(i64::MAX)],
            |r| {
                let change = match (
                    r.get::<_, String>(1)?.as_str(),
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                ) {
                    ("t", Some(id), _) => Change::Thread(id),
                    ("m", _, Some(pk)) => Change::Message(pk),
                    ("f", Some(id), _) => Change::Tombstone(id),
                    ("v", Some(id), _) => Change::Memory(id),
                    ("e", Some(id), _) => Change::Event(id),
                    ("g", Some(id), _) => match id.split_once('|') {
                        Some((a, b)) => Change::Merge(a.to_owned(), b.to_owned()),
                        None => Change::Other,
                    },
                    ("p", Some(id), _) => Change::Proposal(id),
                    _ => Change::Other,
                };
                Ok((r.get(0)?, change))
            },
        )?
        .collect::<Result<_, _>>()?)
}

/// A thread row as sync reads and writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadRow {
    pub id: String,
    pub surface: String,
    pub conversation_id: String,
    pub title: Option<String>,
    pub url: Option<String>,
    pub first_seen_at: String,
    pub last_seen_at: String,
    pub origin_device: String,
    pub origin_seq: i64,
}

/// Where a message row came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenanceRow {
    pub captured_at: String,
    pub origin_device: Option<String>,
    pub client_device_id: Option<String>,
    pub app_version: Option<String>,
}

/// A rendering folded into a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderingRow {
    pub content_hash: String,
    pub source_path: String,
}

/// A message row as sync reads and writes it (receive time, revision and `is_current` are this relay's own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageRow {
    pub id: String,
    pub thread_id: String,
    pub role: String,
    pub content: String,
    pub content_hash: String,
    pub message_key: Option<String>,
    pub ordinal: Option<i64>,
    pub position_key: Option<String>,
    pub occurred_at: Option<String>,
    pub captured_at: String,
    pub tool_calls: Option<String>,
    pub source_path: String,
    pub source_rank: i64,
    pub parent_key: Option<String>,
    pub origin_device: String,
    pub origin_seq: i64,
    pub provenance: Option<ProvenanceRow>,
    /// Ordered by content hash.
    pub renderings: Vec<RenderingRow>,
}

/// A tombstone row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TombstoneRow {
    pub id: String,
    pub thread_id: String,
    pub forgotten_at: String,
}

/// A memory version as sync reads and writes it (`personkit_store::memory` has the rest of its story): every
/// column but the tier's version number, which each relay counts, and the threads it drew on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryRow {
    pub id: String,
    pub tier: String,
    pub created_at: String,
    /// Empty when withdrawn.
    pub body: String,
    pub tokens: i64,
    pub model: Option<String>,
    pub prompt_version: Option<String>,
    pub covers_from: Option<String>,
    pub covers_to: Option<String>,
    pub based_on: Vec<String>,
    pub withdrawn_at: Option<String>,
    pub origin_device: String,
    pub origin_seq: i64,
    /// Thread ids, sorted.
    pub sources: Vec<String>,
}

/// A stored memory version as the merge rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredVersion {
    pub tier: String,
    pub withdrawn_at: Option<String>,
}

/// The memory version `id`, if stored, with at most `max_sources` of the threads it drew on (in id order).
pub fn memory_row(
    conn: &Connection,
    id: &str,
    max_sources: usize,
) -> Result<Option<MemoryRow>, DbError> {
    let row = conn
        .prepare_cached(
            "SELECT tier, created_at, body, tokens, model, prompt_version, covers_from, covers_to, based_on,
                withdrawn_at, origin_device, origin_seq
             FROM memory_versions WHERE id = ?1",
        )?
        .query_row([id], |r| {
            let based_on: String = r.get(8)?;
            Ok(MemoryRow {
                id: id.to_owned(),
                tier: r.get(0)?,
                created_at: r.get(1)?,
                body: r.get(2)?,
                tokens: r.get(3)?,
                model: r.get(4)?,
                prompt_version: r.get(5)?,
                covers_from: r.get(6)?,
                covers_to: r.get(7)?,
                based_on: serde_json::from_str(&based_on).unwrap_or_default(),
                withdrawn_at: r.get(9)?,
                origin_device: r.get(10)?,
                origin_seq: r.get(11)?,
                sources: Vec::new(),
            })
        })
        .optional()?;
    let Some(mut row) = row else {
        return Ok(None);
    };
    row.sources = conn
        .prepare_cached(
            "SELECT thread_id FROM memory_sources WHERE version_id = ?1 ORDER BY thread_id LIMIT ?2",
        )?
        .query_map(
            params![id, i64::try_from(max_sources).unwrap_or(i64::MAX)],
            |r| r.get(0),
        )?
        .collect::<Result<_, _>>()?;
    Ok(Some(row))
}

/// A harvested event as sync reads and writes it: every column but its provenance row, which is each relay's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSyncRow {
    pub id: String,
    pub kind: String,
    pub source_surface: String,
    pub content: String,
    pub content_hash: String,
    pub minute_bucket: i64,
    pub occurred_at: String,
    pub captured_at: String,
    /// A JSON object, as text.
    pub attrs: String,
    pub origin_device: String,
    pub origin_seq: i64,
}

/// The event `id`, if stored.
pub fn event_row(conn: &Connection, id: &str) -> Result<Option<EventSyncRow>, DbError> {
    Ok(conn
        .prepare_cached(
            "SELECT id, kind, source_surface, content, content_hash, minute_bucket, occurred_at, captured_at, attrs,
                origin_device, origin_seq FROM events WHERE id = ?1",
        )?
        .query_row([id], |r| {
            Ok(EventSyncRow {
                id: r.get(0)?,
                kind: r.get(1)?,
                source_surface: r.get(2)?,
                content: r.get(3)?,
                content_hash: r.get(4)?,
                minute_bucket: r.get(5)?,
                occurred_at: r.get(6)?,
                captured_at: r.get(7)?,
                attrs: r.get(8)?,
                origin_device: r.get(9)?,
                origin_seq: r.get(10)?,
            })
        })
        .optional()?)
}

/// A decided merge candidate as sync reads and writes it. The entities' names do not travel: a relay shows the
/// names of its own entities, so a name that only forgotten turns gave here never comes back through a peer's
/// decision about it.
#[derive(Debug, Clone, PartialEq)]
pub struct MergeRow {
    /// The smaller entity id.
    pub a: String,
    pub b: String,
    pub kind: String,
    pub similarity: f64,
    /// `merged` or `dismissed`.
    pub state: String,
    /// For a merge, the entity that stayed (`a` or `b`).
    pub kept: Option<String>,
    pub created_at: String,
    pub decided_at: Option<String>,
}

/// The merge candidate `(a, b)`, if stored (in any state).
pub fn merge_row(conn: &Connection, a: &str, b: &str) -> Result<Option<MergeRow>, DbError> {
    Ok(conn
        .prepare_cached(
            "SELECT a, b, kind, similarity, state, kept, created_at, decided_at
             FROM entity_merge_candidates WHERE a = ?1 AND b = ?2",
        )?
        .query_row(params![a, b], |r| {
            Ok(MergeRow {
                a: r.get(0)?,
                b: r.get(1)?,
                kind: r.get(2)?,
                similarity: r.get(3)?,
                state: r.get(4)?,
                kept: r.get(5)?,
                created_at: r.get(6)?,
                decided_at: r.get(7)?,
            })
        })
        .optional()?)
}

/// One message an entity proposal was found in.
#[derive(Debug, Clone, PartialEq)]
pub struct ProposalSourceRow {
    pub message_id: String,
    pub thread_id: String,
    pub confidence: f64,
    pub seen_at: String,
}

/// An entity proposal as sync reads and writes it (`entity_id` is each relay's own: its graph links it).
#[derive(Debug, Clone, PartialEq)]
pub struct ProposalRow {
    pub id: String,
    pub kind: String,
    pub name: String,
    pub key: String,
    pub confidence: f64,
    pub model: String,
    /// `proposed`, `approved` or `rejected`.
    pub state: String,
    pub created_at: String,
    pub decided_at: Option<String>,
    /// Ordered by message id.
    pub sources: Vec<ProposalSourceRow>,
}

/// The proposal `id`, if stored, with at most `max_sources` of its messages (in id order).
pub fn proposal_row(
    conn: &Connection,
    id: &str,
    max_sources: usize,
) -> Result<Option<ProposalRow>, DbError> {
    let row = conn
        .prepare_cached(
            "SELECT kind, name, key, confidence, model, state, created_at, decided_at
             FROM entity_proposals WHERE id = ?1",
        )?
        .query_row([id], |r| {
            Ok(ProposalRow {
                id: id.to_owned(),
                kind: r.get(0)?,
                name: r.get(1)?,
                key: r.get(2)?,
                confidence: r.get(3)?,
                model: r.get(4)?,
                state: r.get(5)?,
                created_at: r.get(6)?,
                decided_at: r.get(7)?,
                sources: Vec::new(),
            })
        })
        .optional()?;
    let Some(mut row) = row else {
        return Ok(None);
    };
    row.sources = conn
        .prepare_cached(
            "SELECT message_id, thread_id, confidence, seen_at FROM entity_proposal_sources
             WHERE proposal_id = ?1 ORDER BY message_id LIMIT ?2",
        )?
        .query_map(
            params![id, i64::try_from(max_sources).unwrap_or(i64::MAX)],
            |r| {
                Ok(ProposalSourceRow {
                    message_id: r.get(0)?,
                    thread_id: r.get(1)?,
                    confidence: r.get(2)?,
                    seen_at: r.get(3)?,
                })
            },
        )?
        .collect::<Result<_, _>>()?;
    Ok(Some(row))
}

/// The thread `id`, if stored.
pub fn thread_row(conn: &Connection, id: &str) -> Result<Option<ThreadRow>, DbError> {
    Ok(conn
        .prepare_cached(
            "SELECT surface, conversation_id, title, url, first_seen_at, last_seen_at, origin_device, origin_seq
             FROM threads WHERE id = ?1",
        )?
        .query_row([id], |r| {
            Ok(ThreadRow {
                id: id.to_owned(),
                surface: r.get(0)?,
                conversation_id: r.get(1)?,
                title: r.get(2)?,
                url: r.get(3)?,
                first_seen_at: r.get(4)?,
                last_seen_at: r.get(5)?,
                origin_device: r.get(6)?,
                origin_seq: r.get(7)?,
            })
        })
        .optional()?)
}

/// The message of row number `pk`, with its provenance and folded renderings, if stored.
pub fn message_row(conn: &Connection, pk: i64) -> Result<Option<MessageRow>, DbError> {
    let row = conn
        .prepare_cached(
            "SELECT m.id, m.thread_id, m.role, m.content, m.content_hash, m.message_key, m.ordinal,
                m.position_key, m.occurred_at, m.captured_at, m.tool_calls, m.source_path, m.source_rank,
                m.parent_key, m.origin_device, m.origin_seq,
                p.captured_at, p.origin_device, p.client_device_id, p.app_version
             FROM messages m LEFT JOIN provenance p ON p.id = m.provenance_id WHERE m.pk = ?1",
        )?
        .query_row([pk], |r| {
            let provenance = match r.get::<_, Option<String>>(16)? {
                Some(captured_at) => Some(ProvenanceRow {
                    captured_at,
                    origin_device: r.get(17)?,
                    client_device_id: r.get(18)?,
                    app_version: r.get(19)?,
                }),
                None => None,
            };
            Ok(MessageRow {
                id: r.get(0)?,
                thread_id: r.get(1)?,
                role: r.get(2)?,
                content: r.get(3)?,
                content_hash: r.get(4)?,
                message_key: r.get(5)?,
                ordinal: r.get(6)?,
                position_key: r.get(7)?,
                occurred_at: r.get(8)?,
                captured_at: r.get(9)?,
                tool_calls: r.get(10)?,
                source_path: r.get(11)?,
                source_rank: r.get(12)?,
                parent_key: r.get(13)?,
                origin_device: r.get(14)?,
                origin_seq: r.get(15)?,
                provenance,
                renderings: Vec::new(),
            })
        })
        .optional()?;
    let Some(mut row) = row else {
        return Ok(None);
    };
    row.renderings = conn
        .prepare_cached(
            "SELECT content_hash, source_path FROM message_renderings WHERE message_pk = ?1
             ORDER BY content_hash",
        )?
        .query_map([pk], |r| {
            Ok(RenderingRow {
                content_hash: r.get(0)?,
                source_path: r.get(1)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(Some(row))
}

/// The tombstone of `id`, if stored.
pub fn tombstone_row(conn: &Connection, id: &str) -> Result<Option<TombstoneRow>, DbError> {
    Ok(conn
        .prepare_cached("SELECT thread_id, forgotten_at FROM forgotten_messages WHERE id = ?1")?
        .query_row([id], |r| {
            Ok(TombstoneRow {
                id: id.to_owned(),
                thread_id: r.get(0)?,
                forgotten_at: r.get(1)?,
            })
        })
        .optional()?)
}

// ---------------------------------------------------------------------------------------------------------------
// Applying a page: row-level writes inside one transaction.

/// A stored turn as the merge rules see it (its text is not read: a turn is compared by hash and rank).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTurn {
    pub pk: i64,
    pub content_hash: String,
    pub source_rank: i64,
    pub message_key: Option<String>,
    pub parent_key: Option<String>,
    pub ordinal: Option<i64>,
    pub position_key: Option<String>,
    pub occurred_at: Option<String>,
    pub captured_at: String,
    pub tool_calls: Option<String>,
    pub origin_device: String,
    pub origin_seq: i64,
}

/// The facts of a turn that do not depend on which rendering is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnFacts {
    pub captured_at: String,
    pub occurred_at: Option<String>,
    pub origin_device: String,
    pub origin_seq: i64,
}

/// The open transaction a page is applied in. Its methods read and write rows and decide nothing.
pub struct SyncTx<'c> {
    tx: Transaction<'c>,
    now_s: String,
}

impl fmt::Debug for SyncTx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncTx").field("now", &self.now_s).finish()
    }
}

/// Runs `apply` in one immediate transaction and commits it (with the search index's pending rows); with
/// `secure_delete`, freed pages are zeroed while it runs (a page that forgets). Nothing is kept when `apply` fails.
pub fn apply_in_transaction<T, E: From<DbError>>(
    conn: &mut Connection,
    secure_delete: bool,
    now: OffsetDateTime,
    apply: impl FnOnce(&mut SyncTx<'_>) -> Result<T, E>,
) -> Result<T, E> {
    conn.pragma_update(
        None,
        "secure_delete",
        if secure_delete { "ON" } else { "OFF" },
    )
    .map_err(DbError::from)?;
    let result = (|| -> Result<T, E> {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(DbError::from)?;
        let mut stx = SyncTx {
            tx,
            now_s: fmt_time(now),
        };
        let value = apply(&mut stx)?;
        crate::pending::commit(stx.tx).map_err(DbError::from)?;
        Ok(value)
    })();
    conn.pragma_update(None, "secure_delete", "OFF")
        .map_err(DbError::from)?;
    result
}

impl SyncTx<'_> {
    /// The newest sequence number of the feed.
    pub fn head(&self) -> Result<i64, DbError> {
        head(&self.tx)
    }

    pub fn thread(&self, id: &str) -> Result<Option<ThreadRow>, DbError> {
        thread_row(&self.tx, id)
    }

    pub fn insert_thread(&self, t: &ThreadRow) -> Result<(), DbError> {
        self.tx
            .prepare_cached(
                "INSERT INTO threads(id, surface, conversation_id, title, url, first_seen_at, last_seen_at,
                    origin_device, origin_seq) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?
            .execute(params![
                t.id, t.surface, t.conversation_id, t.title, t.url, t.first_seen_at, t.last_seen_at,
                t.origin_device, t.origin_seq
            ])?;
        Ok(())
    }

    /// Writes a thread's merged values (its surface and conversation never change).
    pub fn update_thread(&self, t: &ThreadRow) -> Result<(), DbError> {
        self.tx
            .prepare_cached(
                "UPDATE threads SET title = ?2, url = ?3, first_seen_at = ?4, last_seen_at = ?5,
                    origin_device = ?6, origin_seq = ?7 WHERE id = ?1",
            )?
            .execute(params![
                t.id,
                t.title,
                t.url,
                t.first_seen_at,
                t.last_seen_at,
                t.origin_device,
                t.origin_seq
            ])?;
        Ok(())
    }

    /// The forgetting rule of every intake path ([`crate::forget::turn_is_forgotten`]).
    pub fn turn_is_forgotten(&self, t: &Arriving<'_>) -> Result<bool, DbError> {
        crate::forget::turn_is_forgotten(&self.tx, t)
    }

    /// Whether the message id `id` has a tombstone.
    pub fn is_forgotten(&self, id: &str) -> Result<bool, DbError> {
        crate::forget::is_forgotten(&self.tx, id)
    }

    /// The stored turn of id `id`, else the one of `thread_id` whose text or a folded rendering has
    /// `content_hash`.
    pub fn stored_turn(
        &self,
        id: &str,
        thread_id: &str,
        content_hash: &str,
    ) -> Result<Option<StoredTurn>, DbError> {
        const COLUMNS: &str =
            "pk, content_hash, source_rank, message_key, parent_key, ordinal, position_key,
            occurred_at, captured_at, tool_calls, origin_device, origin_seq";
        Ok(self
            .tx
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM messages WHERE id = ?1
                 UNION ALL
                 SELECT {COLUMNS} FROM messages WHERE thread_id = ?2 AND content_hash = ?3
                 UNION ALL
                 SELECT {COLUMNS} FROM messages WHERE pk IN (
                    SELECT message_pk FROM message_renderings WHERE thread_id = ?2 AND content_hash = ?3)
                 LIMIT 1"
            ))?
            .query_row(params![id, thread_id, content_hash], |r| {
                Ok(StoredTurn {
                    pk: r.get(0)?,
                    content_hash: r.get(1)?,
                    source_rank: r.get(2)?,
                    message_key: r.get(3)?,
                    parent_key: r.get(4)?,
                    ordinal: r.get(5)?,
                    position_key: r.get(6)?,
                    occurred_at: r.get(7)?,
                    captured_at: r.get(8)?,
                    tool_calls: r.get(9)?,
                    origin_device: r.get(10)?,
                    origin_seq: r.get(11)?,
                })
            })
            .optional()?)
    }

    /// Replaces the text of turn `pk` with `m`'s (its content, hash, path, rank, keys, ordinal, position,
    /// occurrence time and tool calls, as given), keeps the replaced text's hash as a folded rendering and drops
    /// the turn's vector so it is embedded again.
    pub fn replace_text(&self, pk: i64, m: &MessageRow) -> Result<(), DbError> {
        self.tx
            .prepare_cached(
                "INSERT OR IGNORE INTO message_renderings(thread_id, content_hash, message_pk, source_path,
                    folded_at) SELECT thread_id, content_hash, pk, source_path, ?2 FROM messages WHERE pk = ?1",
            )?
            .execute(params![pk, self.now_s])?;
        self.tx
            .prepare_cached(
                "UPDATE messages SET content = ?2, content_hash = ?3, source_path = ?4, source_rank = ?5,
                    message_key = ?6, parent_key = ?7, ordinal = ?8, position_key = ?9, occurred_at = ?10,
                    tool_calls = ?11, received_at = ?12
                 WHERE pk = ?1",
            )?
            .execute(params![
                pk, m.content, m.content_hash, m.source_path, m.source_rank, m.message_key, m.parent_key,
                m.ordinal, m.position_key, m.occurred_at, m.tool_calls, self.now_s
            ])?;
        self.tx
            .prepare_cached("DELETE FROM search_vec_state WHERE kind = 'message' AND pk = ?1")?
            .execute([pk])?;
        Ok(())
    }

    /// Records `content_hash` (read by `source_path`) as a rendering folded into turn `pk`; answers whether it is
    /// new.
    pub fn add_rendering(
        &self,
        thread_id: &str,
        content_hash: &str,
        pk: i64,
        source_path: &str,
    ) -> Result<bool, DbError> {
        Ok(self
            .tx
            .prepare_cached(
                "INSERT OR IGNORE INTO message_renderings(thread_id, content_hash, message_pk,
                    source_path, folded_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                thread_id,
                content_hash,
                pk,
                source_path,
                self.now_s
            ])?
            > 0)
    }

    /// Inserts `m` as a new turn (revision 1, current; its renderings are not written) with its provenance, and
    /// queues it for the search index. Returns its row number.
    pub fn insert_message(&self, m: &MessageRow) -> Result<i64, DbError> {
        let provenance_id = match &m.provenance {
            Some(p) => Some(self.provenance_id(p)?),
            None => None,
        };
        self.tx
            .prepare_cached(
                "INSERT INTO messages(id, thread_id, role, content, content_hash, message_key, ordinal,
                    position_key, revision, is_current, occurred_at, captured_at, received_at, tool_calls,
                    provenance_id, origin_device, origin_seq, source_path, source_rank, parent_key)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1, 1, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
            )?
            .execute(params![
                m.id, m.thread_id, m.role, m.content, m.content_hash, m.message_key, m.ordinal,
                m.position_key, m.occurred_at, m.captured_at, self.now_s, m.tool_calls, provenance_id,
                m.origin_device, m.origin_seq, m.source_path, m.source_rank, m.parent_key
            ])?;
        let pk = self.tx.last_insert_rowid();
        crate::pending::queue(&self.tx, pk)?;
        Ok(pk)
    }

    fn provenance_id(&self, p: &ProvenanceRow) -> Result<i64, DbError> {
        let origin = p.origin_device.as_deref().unwrap_or("unknown");
        let found: Option<i64> = self
            .tx
            .prepare_cached(
                "SELECT id FROM provenance WHERE captured_at = ?1 AND origin_device = ?2
                    AND client_device_id IS ?3 AND app_version IS ?4 LIMIT 1",
            )?
            .query_row(
                params![p.captured_at, origin, p.client_device_id, p.app_version],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(id) = found {
            return Ok(id);
        }
        self.tx
            .prepare_cached(
                "INSERT INTO provenance(captured_at, origin_device, client_device_id, app_version) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![p.captured_at, origin, p.client_device_id, p.app_version])?;
        Ok(self.tx.last_insert_rowid())
    }

    /// Writes the order-free facts of turn `pk`.
    pub fn set_facts(&self, pk: i64, f: &TurnFacts) -> Result<(), DbError> {
        self.tx
            .prepare_cached(
                "UPDATE messages SET captured_at = ?2, occurred_at = ?3, origin_device = ?4, origin_seq = ?5
                 WHERE pk = ?1",
            )?
            .execute(params![pk, f.captured_at, f.occurred_at, f.origin_device, f.origin_seq])?;
        Ok(())
    }

    /// Numbers the revisions at one position of a thread again, as ingest does.
    pub fn number_revisions(&self, thread_id: &str, position_key: &str) -> Result<(), DbError> {
        crate::ingest::number_revisions(&self.tx, thread_id, position_key)?;
        Ok(())
    }

    /// Empties the selection of messages tombstones remove ([`SyncTx::select_named`]).
    pub fn prepare_removal(&self) -> Result<(), DbError> {
        crate::forget::prepare_selection(&self.tx)
    }

    /// Whether `id` is a message or a tombstone of another thread than `thread_id` here.
    pub fn known_in_other_thread(&self, id: &str, thread_id: &str) -> Result<bool, DbError> {
        Ok(self
            .tx
            .prepare_cached(
                "SELECT 1 FROM messages WHERE id = ?1 AND thread_id <> ?2
                 UNION ALL SELECT 1 FROM forgotten_messages WHERE id = ?1 AND thread_id <> ?2",
            )?
            .exists(params![id, thread_id])?)
    }

    pub fn tombstone(&self, id: &str) -> Result<Option<TombstoneRow>, DbError> {
        tombstone_row(&self.tx, id)
    }

    /// Writes a tombstone (a new one, or a stored one's time).
    pub fn put_tombstone(&self, t: &TombstoneRow) -> Result<(), DbError> {
        self.tx
            .prepare_cached(
                "INSERT INTO forgotten_messages (id, thread_id, forgotten_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT(id) DO UPDATE SET forgotten_at = ?3",
            )?
            .execute(params![t.id, t.thread_id, t.forgotten_at])?;
        // A proposal a peer sent may name a message that never reached this relay: its rows go with the id.
        let proposals: Vec<String> = self
            .tx
            .prepare_cached(
                "SELECT proposal_id FROM entity_proposal_sources WHERE message_id = ?1",
            )?
            .query_map([&t.id], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        if !proposals.is_empty() {
            self.tx
                .prepare_cached("DELETE FROM entity_proposal_sources WHERE message_id = ?1")?
                .execute([&t.id])?;
            let mut orphan = self.tx.prepare_cached(
                "DELETE FROM entity_proposals WHERE id = ?1
                 AND NOT EXISTS (SELECT 1 FROM entity_proposal_sources WHERE proposal_id = ?1)",
            )?;
            for p in &proposals {
                orphan.execute([p])?;
            }
        }
        Ok(())
    }

    /// Selects for removal what a tombstone names ([`crate::forget`]'s one reading of tombstone ids).
    pub fn select_named(&self, id: &str, thread_id: &str) -> Result<(), DbError> {
        crate::forget::select_named(&self.tx, id, thread_id)
    }

    /// Removes the selected messages as forgetting does; returns how many went.
    pub fn remove_selected(&self) -> Result<u64, DbError> {
        let selected: usize = self
            .tx
            .query_row("SELECT count(*) FROM forget_sel", [], |r| r.get(0))?;
        if selected == 0 {
            return Ok(0);
        }
        Ok(crate::forget::remove_selected(&self.tx, &self.now_s, selected)?.messages)
    }

    /// Rewrites the full-text index so removed words leave the file.
    pub fn optimize_fts(&self) -> Result<(), DbError> {
        crate::forget::optimize_fts(&self.tx)
    }

    /// The memory version `id`'s tier and withdrawal, if stored.
    pub fn memory_version(&self, id: &str) -> Result<Option<StoredVersion>, DbError> {
        Ok(self
            .tx
            .prepare_cached("SELECT tier, withdrawn_at FROM memory_versions WHERE id = ?1")?
            .query_row([id], |r| {
                Ok(StoredVersion {
                    tier: r.get(0)?,
                    withdrawn_at: r.get(1)?,
                })
            })
            .optional()?)
    }

    /// Inserts a memory version and the threads it drew on, as given.
    pub fn insert_memory_version(&self, v: &MemoryRow) -> Result<(), DbError> {
        self.tx
            .prepare_cached(
                "INSERT INTO memory_versions (id, tier, created_at, body, tokens, model, prompt_version,
                    covers_from, covers_to, based_on, withdrawn_at, origin_device, origin_seq)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            )?
            .execute(params![
                v.id,
                v.tier,
                v.created_at,
                v.body,
                v.tokens,
                v.model,
                v.prompt_version,
                v.covers_from,
                v.covers_to,
                serde_json::to_string(&v.based_on).unwrap_or_else(|_| "[]".into()),
                v.withdrawn_at,
                v.origin_device,
                v.origin_seq
            ])?;
        let mut add = self.tx.prepare_cached(
            "INSERT OR IGNORE INTO memory_sources (version_id, thread_id) VALUES (?1, ?2)",
        )?;
        for t in &v.sources {
            add.execute(params![v.id, t])?;
        }
        Ok(())
    }

    /// Withdraws the memory version `id` at `at`: its body blanked, `withdrawn_at` set to `at`.
    pub fn withdraw_memory_version(&self, id: &str, at: &str) -> Result<(), DbError> {
        self.tx
            .prepare_cached(
                "UPDATE memory_versions SET body = '', withdrawn_at = ?2 WHERE id = ?1",
            )?
            .execute(params![id, at])?;
        Ok(())
    }

    /// Whether one of `threads` has a turn forgotten here at `at` or later.
    pub fn forgotten_since(&self, threads: &[String], at: &str) -> Result<bool, DbError> {
        let mut probe = self.tx.prepare_cached(
            "SELECT 1 FROM forgotten_messages WHERE thread_id = ?1 AND forgotten_at >= ?2 LIMIT 1",
        )?;
        for t in threads {
            if probe.exists(params![t, at])? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Marks a memory tier due to run again (`due:<tier>`), as forgetting does.
    pub fn mark_memory_due(&self, tier: &str) -> Result<(), DbError> {
        crate::memory::mark_due(&self.tx, tier, &self.now_s)
    }

    /// Whether an event of this id, or of its content hash in its minute, is stored.
    pub fn event_stored(&self, id: &str, content_hash: &str, bucket: i64) -> Result<bool, DbError> {
        Ok(self
            .tx
            .prepare_cached(
                "SELECT 1 FROM events WHERE id = ?1
                 UNION ALL SELECT 1 FROM events WHERE content_hash = ?2 AND minute_bucket = ?3",
            )?
            .exists(params![id, content_hash, bucket])?)
    }

    /// Inserts a peer's event as given (without a provenance row: it was made on the peer).
    pub fn insert_event(&self, e: &EventSyncRow) -> Result<(), DbError> {
        self.tx
            .prepare_cached(
                "INSERT INTO events (id, kind, source_surface, content, content_hash, minute_bucket, occurred_at,
                     captured_at, attrs, provenance_id, origin_device, origin_seq)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, NULL, ?10, ?11)",
            )?
            .execute(params![
                e.id,
                e.kind,
                e.source_surface,
                e.content,
                e.content_hash,
                e.minute_bucket,
                e.occurred_at,
                e.captured_at,
                e.attrs,
                e.origin_device,
                e.origin_seq
            ])?;
        Ok(())
    }

    pub fn merge_decision(&self, a: &str, b: &str) -> Result<Option<MergeRow>, DbError> {
        merge_row(&self.tx, a, b)
    }

    /// Writes a merge candidate's row as given (a new one, or a stored one's decision). A new row is named after
    /// this relay's entities, or by their ids while it has none of them (`graph::merge` names it when it folds).
    pub fn put_merge_decision(&self, m: &MergeRow) -> Result<(), DbError> {
        self.tx
            .prepare_cached(
                "INSERT INTO entity_merge_candidates (a, b, kind, a_name, b_name, similarity, state, kept, created_at,
                     decided_at)
                 VALUES (?1, ?2, ?3, coalesce((SELECT name FROM entities WHERE id = ?1), ?1),
                     coalesce((SELECT name FROM entities WHERE id = ?2), ?2), ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT(a, b) DO UPDATE SET state = ?5, kept = ?6, decided_at = ?8",
            )?
            .execute(params![
                m.a,
                m.b,
                m.kind,
                m.similarity,
                m.state,
                m.kept,
                m.created_at,
                m.decided_at
            ])?;
        Ok(())
    }

    /// The proposal `id`, if stored, with those of `messages` it names here and how many messages it names in all.
    pub fn proposal(
        &self,
        id: &str,
        messages: &[&str],
    ) -> Result<Option<(ProposalRow, u64)>, DbError> {
        let Some(mut row) = proposal_row(&self.tx, id, 0)? else {
            return Ok(None);
        };
        let mut one = self.tx.prepare_cached(
            "SELECT thread_id, confidence, seen_at FROM entity_proposal_sources
             WHERE proposal_id = ?1 AND message_id = ?2",
        )?;
        for m in messages {
            if let Some(s) = one
                .query_row(params![id, m], |r| {
                    Ok(ProposalSourceRow {
                        message_id: (*m).to_owned(),
                        thread_id: r.get(0)?,
                        confidence: r.get(1)?,
                        seen_at: r.get(2)?,
                    })
                })
                .optional()?
            {
                row.sources.push(s);
            }
        }
        let all: i64 = self
            .tx
            .prepare_cached("SELECT count(*) FROM entity_proposal_sources WHERE proposal_id = ?1")?
            .query_row([id], |r| r.get(0))?;
        Ok(Some((row, all.max(0) as u64)))
    }

    /// Writes a proposal's row (a new one, or a stored one's state, confidence and decision time) and adds the
    /// messages given; `sources` are written as given.
    pub fn put_proposal(&self, p: &ProposalRow) -> Result<(), DbError> {
        self.tx
            .prepare_cached(
                "INSERT INTO entity_proposals (id, kind, name, key, confidence, model, state, created_at, decided_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT(id) DO UPDATE SET confidence = ?5, state = ?7, decided_at = ?9",
            )?
            .execute(params![
                p.id,
                p.kind,
                p.name,
                p.key,
                p.confidence,
                p.model,
                p.state,
                p.created_at,
                p.decided_at
            ])?;
        let mut add = self.tx.prepare_cached(
            "INSERT INTO entity_proposal_sources (proposal_id, message_id, thread_id, confidence, seen_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT(proposal_id, message_id) DO UPDATE SET confidence = ?4 WHERE confidence < ?4",
        )?;
        for s in &p.sources {
            add.execute(params![
                p.id,
                s.message_id,
                s.thread_id,
                s.confidence,
                s.seen_at
            ])?;
        }
        Ok(())
    }

    /// Lists an approved proposal for the graph to link its messages here (`graph_settle`).
    pub fn settle_proposal(&self, id: &str) -> Result<(), DbError> {
        self.tx
            .prepare_cached("INSERT OR IGNORE INTO graph_settle (proposal_id) VALUES (?1)")?
            .execute([id])?;
        Ok(())
    }

    /// Lists for linking every approved proposal found in message `id` (which just arrived).
    pub fn settle_proposals_of(&self, message_id: &str) -> Result<(), DbError> {
        self.tx
            .prepare_cached(
                "INSERT OR IGNORE INTO graph_settle (proposal_id)
                 SELECT s.proposal_id FROM entity_proposal_sources s JOIN entity_proposals p ON p.id = s.proposal_id
                 WHERE s.message_id = ?1 AND p.state = 'approved'",
            )?
            .execute([message_id])?;
        Ok(())
    }

    /// Moves a peer's pull cursor (and its last sync time).
    pub fn set_pull_cursor(&self, peer_id: &str, cursor: i64) -> Result<(), DbError> {
        self.tx.execute(
            "UPDATE sync_peers SET pull_cursor = ?2, last_sync_at = ?3 WHERE id = ?1",
            params![peer_id, cursor, self.now_s],
        )?;
        Ok(())
    }

    /// Moves a peer's push cursor to the feed's head if it was at `head_before` or later.
    pub fn skip_push_cursor(&self, peer_id: &str, head_before: i64) -> Result<(), DbError> {
        self.tx.execute(
            "UPDATE sync_peers SET push_cursor = (SELECT coalesce(max(seq), 0) FROM sync_log)
             WHERE id = ?1 AND push_cursor >= ?2",
            params![peer_id, head_before],
        )?;
        Ok(())
    }
}

/// The corpus as sync sees it, in one canonical text form: sorted rows of threads (without the seen times, which
/// say when a relay saw a thread), messages (without receive times), folded renderings, tombstones, and memory
/// versions with the threads they drew on. Two relays that converged give the same string.
pub fn canonical_dump(conn: &Connection) -> Result<String, DbError> {
    let mut out = String::new();
    let mut section = |sql: &str, n: usize| -> Result<(), DbError> {
        let mut stmt = conn.prepare(sql)?;
        let rows = stmt.query_map([], |r| {
            let mut cols = Vec::with_capacity(n);
            for i in 0..n {
                let v: rusqlite::types::Value = r.get(i)?;
                cols.push(match v {
                    rusqlite::types::Value::Null => "∅".to_owned(),
                    rusqlite::types::Value::Integer(i) => i.to_string(),
                    rusqlite::types::Value::Real(f) => f.to_string(),
                    rusqlite::types::Value::Text(t) => {
                        serde_json::to_string(&t).unwrap_or_default()
                    }
                    rusqlite::types::Value::Blob(b) => hex::encode(b),
                });
            }
            Ok(cols.join("\t"))
        })?;
        let mut lines: Vec<String> = rows.collect::<Result<_, _>>()?;
        lines.sort();
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
        out.push_str("--\n");
        Ok(())
    };
    section(
        "SELECT 'thread', id, surface, conversation_id, title, url, origin_device, origin_seq FROM threads",
        8,
    )?;
    section(
        "SELECT 'message', id, thread_id, role, content, content_hash, message_key, ordinal, position_key, revision,
            is_current, occurred_at, captured_at, tool_calls, source_path, source_rank, parent_key, origin_device,
            origin_seq FROM messages",
        19,
    )?;
    section(
        "SELECT 'rendering', r.thread_id, r.content_hash, m.id, r.source_path FROM message_renderings r
         JOIN messages m ON m.pk = r.message_pk",
        5,
    )?;
    section(
        "SELECT 'tombstone', id, thread_id FROM forgotten_messages",
        3,
    )?;
    section(
        "SELECT 'memory', id, tier, created_at, body, tokens, model, prompt_version, covers_from, covers_to,
            based_on, withdrawn_at, origin_device, origin_seq FROM memory_versions",
        14,
    )?;
    section(
        "SELECT 'memory_source', version_id, thread_id FROM memory_sources",
        3,
    )?;
    section(
        "SELECT 'event', id, kind, source_surface, content, content_hash, minute_bucket, occurred_at, captured_at,
            attrs, origin_device, origin_seq FROM events WHERE json_extract(attrs, '$.thread_id') IS NULL",
        12,
    )?;
    section(
        "SELECT 'merge', a, b, state, kept FROM entity_merge_candidates WHERE state != 'proposed'",
        5,
    )?;
    section(
        "SELECT 'proposal', id, kind, key, state FROM entity_proposals",
        5,
    )?;
    section(
        "SELECT 'proposal_source', proposal_id, message_id FROM entity_proposal_sources",
        3,
    )?;
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-22 10:00:00 UTC);

    #[test]
    fn a_sync_code_pairs_once_and_a_revoked_peer_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = crate::db::open(&dir.path().join("b.db")).unwrap();
        let (code, _) = create_sync_code(&b, NOW).unwrap();
        let token = redeem_sync_code(&mut b, &code.display(), "relay-a", "laptop", NOW).unwrap();
        assert!(
            redeem_sync_code(&mut b, &code.display(), "relay-a", "laptop", NOW).is_err(),
            "one use"
        );
        assert_eq!(
            authenticate(&b, token.expose()).unwrap().unwrap().id,
            "relay-a"
        );
        assert!(format!("{token:?}").contains("redacted"));
        add_outgoing(&b, "relay-a", "laptop", "http://127.0.0.1:1", &token, NOW).unwrap();
        apply_in_transaction(&mut b, false, NOW, |tx| tx.set_pull_cursor("relay-a", 17)).unwrap();
        assert_eq!(list_peers(&b).unwrap()[0].pull_cursor, 17);
        revoke_peer(&b, "laptop", NOW).unwrap();
        assert!(authenticate(&b, token.expose()).unwrap().is_none());
        assert!(outgoing(&b).unwrap().is_empty());
    }

    #[test]
    fn a_failed_apply_keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = crate::db::open(&dir.path().join("c.db")).unwrap();
        let row = ThreadRow {
            id: "t".into(),
            surface: "browser-ext:chatgpt".into(),
            conversation_id: "x".into(),
            title: None,
            url: None,
            first_seen_at: fmt_time(NOW),
            last_seen_at: fmt_time(NOW),
            origin_device: "dev".into(),
            origin_seq: 0,
        };
        let r: Result<(), DbError> = apply_in_transaction(&mut c, true, NOW, |tx| {
            tx.insert_thread(&row)?;
            Err(DbError::from(rusqlite::Error::QueryReturnedNoRows))
        });
        assert!(r.is_err());
        assert!(thread_row(&c, "t").unwrap().is_none());
        apply_in_transaction(&mut c, false, NOW, |tx| tx.insert_thread(&row)).unwrap();
        assert_eq!(thread_row(&c, "t").unwrap(), Some(row));
    }
}
