//! Relay-to-relay sync (docs/sync.md): the change feed a peer pages through ([`page`]), the one call that applies
//! a peer's page ([`apply_page`]), sync pairing codes and the peers this relay syncs with.
//!
//! The corpus is a grow-only set of content-addressed rows (threads, messages with every revision and the hashes
//! of their folded renderings) plus tombstones. [`apply_page`] merges each row into the local one of the same id
//! by rules that do not depend on arrival order (a rendering replaces another only from a higher `(rank, hash)`,
//! revisions are renumbered by `(captured_at, content_hash)` as ingest does), and a tombstone deletes its message
//! through [`crate::forget`]'s removal and keeps it from coming back — so every interleaving of pages converges.
//! `sync_log` (migration 0012) is the feed: every change to a syncable row moves the row's entry to the end, so a
//! peer's cursor (a sequence number of that log) resumes exactly where it stopped.
//!
//! **Architecture invariant:** a page is applied in one transaction, and the peer's cursor moves in that same
//! transaction: a cursor never passes rows that were not committed. Each item of a page is checked on its own
//! (ids recomputed from content, sizes, times, roles, paths); a bad one is rejected and counted, never a panic.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use personkit_shared::identity::Path;
use personkit_shared::ids;
use personkit_shared::wire::{MAX_CONTENT_BYTES, MAX_FIELD_BYTES, Role, is_valid_surface};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::{Duration, OffsetDateTime};

use crate::auth::{AuthError, CODE_LEN, CODE_TTL, PairingCode, hash_secret, normalize_code};
use crate::clock::{fmt_time, normalize_time};
use crate::db::DbError;

/// Prefix of sync tokens, so a leaked one is recognisable.
pub const SYNC_TOKEN_PREFIX: &str = "pks_";
/// Most log entries one page answers, and the default.
pub const MAX_PAGE_ITEMS: usize = 5000;
pub const DEFAULT_PAGE_ITEMS: usize = 1000;
/// A page stops growing once its items pass this many bytes of content (the last item may pass it).
pub const PAGE_CONTENT_BYTES: usize = 4 * 1024 * 1024;
/// Most folded renderings one message may carry.
const MAX_RENDERINGS: usize = 64;

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

/// One page of the change feed, as it travels (docs/api.md, `GET /v1/sync/pages`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Page {
    /// The relay the page comes from.
    pub relay_id: String,
    /// The cursor after this page: pass it as `after` for the next one.
    pub next: i64,
    /// Whether entries follow `next`.
    pub more: bool,
    /// Entries after `next` (for progress).
    pub remaining: i64,
    /// Threads (those the page's messages belong to, first), messages and tombstones.
    pub items: Vec<Value>,
}

/// The feed after `after`: at most `limit` entries, and no more than [`PAGE_CONTENT_BYTES`] of content.
pub fn page(conn: &Connection, after: i64, limit: usize) -> Result<Page, DbError> {
    let limit = limit.clamp(1, MAX_PAGE_ITEMS);
    // Messages are named by row number, threads and tombstones by id (migration 0015).
    let entries: Vec<(i64, String, Option<String>, Option<i64>)> = conn
        .prepare_cached(
            "SELECT seq, kind, id, pk FROM sync_log WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )?
        .query_map(params![after, limit as i64], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<Result<_, _>>()?;
    let mut next = after;
    let mut bytes = 0usize;
    let mut threads: BTreeSet<String> = BTreeSet::new();
    let mut rest: Vec<Value> = Vec::new();
    for (seq, kind, id, pk) in entries {
        if bytes >= PAGE_CONTENT_BYTES {
            break;
        }
        next = seq;
        match (kind.as_str(), id, pk) {
            ("t", Some(id), _) => {
                threads.insert(id);
            }
            ("m", _, Some(pk)) => {
                if let Some((thread_id, item)) = message_item(conn, pk)? {
                    bytes += item
                        .get("content")
                        .and_then(Value::as_str)
                        .map_or(0, str::len);
                    threads.insert(thread_id);
                    rest.push(item);
                }
            }
            ("f", Some(id), _) => {
                if let Some(item) = tombstone_item(conn, &id)? {
                    rest.push(item);
                }
            }
            // The table's CHECK rules every other shape out.
            _ => {}
        }
    }
    let mut items = Vec::with_capacity(threads.len() + rest.len());
    for t in &threads {
        if let Some(item) = thread_item(conn, t)? {
            items.push(item);
        }
    }
    items.extend(rest);
    let remaining = pending(conn, next)?;
    Ok(Page {
        relay_id: crate::db::relay_id(conn)?,
        next,
        more: remaining > 0,
        remaining,
        items,
    })
}

fn thread_item(conn: &Connection, id: &str) -> Result<Option<Value>, DbError> {
    Ok(conn
        .prepare_cached(
            "SELECT surface, conversation_id, title, url, first_seen_at, last_seen_at, origin_device, origin_seq
             FROM threads WHERE id = ?1",
        )?
        .query_row([id], |r| {
            Ok(serde_json::json!({
                "kind": "thread", "id": id,
                "surface": r.get::<_, String>(0)?, "conversation_id": r.get::<_, String>(1)?,
                "title": r.get::<_, Option<String>>(2)?, "url": r.get::<_, Option<String>>(3)?,
                "first_seen_at": r.get::<_, String>(4)?, "last_seen_at": r.get::<_, String>(5)?,
                "origin_device": r.get::<_, String>(6)?, "origin_seq": r.get::<_, i64>(7)?,
            }))
        })
        .optional()?)
}

fn message_item(conn: &Connection, pk: i64) -> Result<Option<(String, Value)>, DbError> {
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
                Some(at) => serde_json::json!({
                    "captured_at": at, "origin_device": r.get::<_, Option<String>>(17)?,
                    "client_device_id": r.get::<_, Option<String>>(18)?,
                    "app_version": r.get::<_, Option<String>>(19)?,
                }),
                None => Value::Null,
            };
            let thread_id: String = r.get(1)?;
            Ok((
                thread_id.clone(),
                serde_json::json!({
                    "kind": "message", "id": r.get::<_, String>(0)?, "thread_id": thread_id,
                    "role": r.get::<_, String>(2)?, "content": r.get::<_, String>(3)?,
                    "content_hash": r.get::<_, String>(4)?, "message_key": r.get::<_, Option<String>>(5)?,
                    "ordinal": r.get::<_, Option<i64>>(6)?, "position_key": r.get::<_, Option<String>>(7)?,
                    "occurred_at": r.get::<_, Option<String>>(8)?, "captured_at": r.get::<_, String>(9)?,
                    "tool_calls": r.get::<_, Option<String>>(10)?, "source_path": r.get::<_, String>(11)?,
                    "source_rank": r.get::<_, i64>(12)?, "parent_key": r.get::<_, Option<String>>(13)?,
                    "origin_device": r.get::<_, String>(14)?, "origin_seq": r.get::<_, i64>(15)?,
                    "provenance": provenance,
                }),
            ))
        })
        .optional()?;
    let Some((thread_id, mut item)) = row else {
        return Ok(None);
    };
    let renderings: Vec<Value> = conn
        .prepare_cached(
            "SELECT content_hash, source_path FROM message_renderings WHERE message_pk = ?1
             ORDER BY content_hash",
        )?
        .query_map([pk], |r| {
            Ok(serde_json::json!({"content_hash": r.get::<_, String>(0)?,
                "source_path": r.get::<_, String>(1)?}))
        })?
        .collect::<Result<_, _>>()?;
    item["renderings"] = Value::Array(renderings);
    Ok(Some((thread_id, item)))
}

fn tombstone_item(conn: &Connection, id: &str) -> Result<Option<Value>, DbError> {
    Ok(conn
        .prepare_cached("SELECT thread_id, forgotten_at FROM forgotten_messages WHERE id = ?1")?
        .query_row([id], |r| {
            Ok(serde_json::json!({"kind": "tombstone", "id": id,
                "thread_id": r.get::<_, String>(0)?, "forgotten_at": r.get::<_, String>(1)?}))
        })
        .optional()?)
}

// ---------------------------------------------------------------------------------------------------------------
// Applying a page.

/// A rejected item of a page: its index, a stable code and a short message (no content).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejection {
    pub index: usize,
    pub code: &'static str,
    pub message: String,
}

/// What applying a page did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Applied {
    /// Rows added or changed here.
    pub stored: u64,
    /// Rows this relay already had as they are.
    pub unchanged: u64,
    /// Messages not stored because they are forgotten here.
    pub forgotten: u64,
    /// Messages a tombstone of the page removed.
    pub removed: u64,
    pub rejected: Vec<Rejection>,
}

impl Applied {
    /// Adds another page's counts to these.
    pub fn add(&mut self, other: Applied) {
        self.stored += other.stored;
        self.unchanged += other.unchanged;
        self.forgotten += other.forgotten;
        self.removed += other.removed;
        self.rejected.extend(other.rejected);
    }
}

/// Where a page came from and, for a pull, the cursor to save with it.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub peer_id: &'a str,
    /// `Some(next)` for a pulled page: the peer's pull cursor moves to it in the same transaction.
    pub pull_cursor: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ThreadItem {
    id: String,
    surface: String,
    conversation_id: String,
    title: Option<String>,
    url: Option<String>,
    first_seen_at: String,
    last_seen_at: String,
    origin_device: String,
    origin_seq: i64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProvenanceItem {
    captured_at: String,
    origin_device: Option<String>,
    client_device_id: Option<String>,
    app_version: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RenderingItem {
    content_hash: String,
    source_path: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageItem {
    id: String,
    thread_id: String,
    role: String,
    content: String,
    content_hash: String,
    message_key: Option<String>,
    ordinal: Option<i64>,
    position_key: Option<String>,
    occurred_at: Option<String>,
    captured_at: String,
    tool_calls: Option<String>,
    source_path: String,
    source_rank: i64,
    parent_key: Option<String>,
    origin_device: String,
    origin_seq: i64,
    provenance: Option<ProvenanceItem>,
    #[serde(default)]
    renderings: Vec<RenderingItem>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TombstoneItem {
    id: String,
    thread_id: String,
    forgotten_at: String,
}

fn reject(index: usize, code: &'static str, message: impl Into<String>) -> Rejection {
    Rejection {
        index,
        code,
        message: message.into(),
    }
}

fn short(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_FIELD_BYTES && !s.chars().any(char::is_control)
}

fn opt_short(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(short)
}

fn is_hash(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn canonical_time(s: &str) -> bool {
    normalize_time(s).as_deref() == Some(s)
}

fn check_thread(t: &ThreadItem) -> Result<(), (&'static str, String)> {
    if !is_valid_surface(&t.surface) || !short(&t.conversation_id) {
        return Err((
            "invalid_thread",
            "surface or conversation id is not valid".into(),
        ));
    }
    if ids::thread_id(&t.surface, &t.conversation_id)
        .hyphenated()
        .to_string()
        != t.id
    {
        return Err((
            "id_mismatch",
            "thread id is not the id of its surface and conversation".into(),
        ));
    }
    if !opt_short(&t.title) || !opt_short(&t.url) || !short(&t.origin_device) || t.origin_seq < 0 {
        return Err((
            "invalid_thread",
            "a field is empty, too long or holds control characters".into(),
        ));
    }
    if !canonical_time(&t.first_seen_at) || !canonical_time(&t.last_seen_at) {
        return Err((
            "invalid_time",
            "thread times are not in the stored form".into(),
        ));
    }
    Ok(())
}

fn check_message(m: &MessageItem) -> Result<(Role, Path), (&'static str, String)> {
    let role = Role::parse(&m.role).ok_or(("invalid_role", "unknown role".to_owned()))?;
    let path =
        Path::parse(&m.source_path).ok_or(("invalid_path", "unknown source path".to_owned()))?;
    if i64::from(path.rank()) != m.source_rank {
        return Err(("invalid_path", "source rank does not match the path".into()));
    }
    if m.content.is_empty() || m.content.len() > MAX_CONTENT_BYTES {
        return Err(("invalid_content", "content is empty or too large".into()));
    }
    if ids::content_hash(&m.content, role) != m.content_hash {
        return Err((
            "hash_mismatch",
            "content hash is not the hash of the content".into(),
        ));
    }
    let Ok(thread) = uuid::Uuid::parse_str(&m.thread_id) else {
        return Err(("invalid_thread", "thread id is not a UUID".into()));
    };
    if m.renderings.len() > MAX_RENDERINGS
        || m.renderings
            .iter()
            .any(|r| !is_hash(&r.content_hash) || Path::parse(&r.source_path).is_none())
    {
        return Err((
            "invalid_rendering",
            "a folded rendering is not a hash and a path".into(),
        ));
    }
    let id_of = |h: &str| ids::message_id(&thread, h).hyphenated().to_string();
    if id_of(&m.content_hash) != m.id
        && !m.renderings.iter().any(|r| id_of(&r.content_hash) == m.id)
    {
        return Err((
            "id_mismatch",
            "message id is not the id of its content or of a folded rendering".into(),
        ));
    }
    if !opt_short(&m.message_key)
        || !opt_short(&m.position_key)
        || !opt_short(&m.parent_key)
        || !short(&m.origin_device)
        || m.origin_seq < 0
        || m.ordinal.is_some_and(|o| !(0..=1_000_000_000).contains(&o))
    {
        return Err((
            "invalid_message",
            "a field is empty, too long or out of range".into(),
        ));
    }
    if !canonical_time(&m.captured_at)
        || m.occurred_at.as_deref().is_some_and(|t| !canonical_time(t))
    {
        return Err((
            "invalid_time",
            "message times are not in the stored form".into(),
        ));
    }
    if let Some(tc) = &m.tool_calls
        && (tc.len() > MAX_CONTENT_BYTES || serde_json::from_str::<Value>(tc).is_err())
    {
        return Err(("invalid_message", "tool calls are not JSON".into()));
    }
    if let Some(p) = &m.provenance
        && (!canonical_time(&p.captured_at)
            || !opt_short(&p.origin_device)
            || !opt_short(&p.client_device_id)
            || !opt_short(&p.app_version))
    {
        return Err(("invalid_message", "provenance fields are not valid".into()));
    }
    Ok((role, path))
}

/// What a tombstone id names: a message id (a UUID in its stored form), or a turn of one thread by another of its
/// identities (`key:<thread>|<site id>`, `words:<thread>|<role>|<hash>`), which carries that thread.
enum TombstoneName<'a> {
    Message,
    InThread(&'a str),
}

/// Prefixes of tombstone ids that name their thread first.
const THREAD_PREFIXES: [&str; 2] = ["key:", "words:"];

fn tombstone_name(id: &str) -> Option<TombstoneName<'_>> {
    if let Some(rest) = THREAD_PREFIXES.iter().find_map(|p| id.strip_prefix(p)) {
        let (thread, name) = rest.split_once('|')?;
        return (!thread.is_empty() && !name.is_empty()).then_some(TombstoneName::InThread(thread));
    }
    let canonical = uuid::Uuid::parse_str(id).ok()?.hyphenated().to_string();
    (canonical == id).then_some(TombstoneName::Message)
}

fn check_tombstone(t: &TombstoneItem) -> Result<(), (&'static str, String)> {
    if uuid::Uuid::parse_str(&t.thread_id).is_err()
        || !short(&t.id)
        || t.id.len() > 2 * MAX_FIELD_BYTES
    {
        return Err(("invalid_tombstone", "tombstone ids are not valid".into()));
    }
    match tombstone_name(&t.id) {
        None => {
            return Err((
                "invalid_tombstone",
                "tombstone id is not a message id, a key: id or a words: id".into(),
            ));
        }
        Some(TombstoneName::InThread(thread)) if thread != t.thread_id => {
            return Err((
                "tombstone_thread_mismatch",
                "the tombstone's id names another thread than its thread_id".into(),
            ));
        }
        Some(_) => {}
    }
    if !canonical_time(&t.forgotten_at) {
        return Err((
            "invalid_time",
            "tombstone time is not in the stored form".into(),
        ));
    }
    Ok(())
}

enum Item {
    Thread(ThreadItem),
    Message(Box<MessageItem>),
    Tombstone(TombstoneItem),
}

fn parse_item(index: usize, v: &Value) -> Result<Item, Rejection> {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or_default();
    let mut body = v.clone();
    if let Some(o) = body.as_object_mut() {
        o.remove("kind");
    }
    let bad = |e: serde_json::Error| {
        reject(
            index,
            "malformed_item",
            format!("item does not parse: {}", cut(&e.to_string())),
        )
    };
    let item = match kind {
        "thread" => Item::Thread(serde_json::from_value(body).map_err(bad)?),
        "message" => Item::Message(Box::new(serde_json::from_value(body).map_err(bad)?)),
        "tombstone" => Item::Tombstone(serde_json::from_value(body).map_err(bad)?),
        _ => {
            return Err(reject(
                index,
                "unknown_kind",
                "kind is not thread, message or tombstone",
            ));
        }
    };
    let checked = match &item {
        Item::Thread(t) => check_thread(t),
        Item::Message(m) => check_message(m).map(|_| ()),
        Item::Tombstone(t) => check_tombstone(t),
    };
    checked.map_err(|(code, message)| reject(index, code, message))?;
    Ok(item)
}

fn cut(s: &str) -> String {
    personkit_shared::wire::quote_safely(s, 200)
}

/// Applies a peer's page in one transaction (see the module docs); with `source.pull_cursor`, the peer's pull
/// cursor moves to it in the same transaction. Items are checked one by one; rejected ones are listed.
pub fn apply_page(
    conn: &mut Connection,
    items: &[Value],
    source: Source<'_>,
    now: OffsetDateTime,
) -> Result<Applied, DbError> {
    let now_s = fmt_time(now);
    let mut out = Applied::default();
    let mut threads: HashMap<String, ThreadItem> = HashMap::new();
    let mut messages: Vec<(usize, Box<MessageItem>)> = Vec::new();
    let mut tombstones: Vec<(usize, TombstoneItem)> = Vec::new();
    for (index, v) in items.iter().enumerate() {
        match parse_item(index, v) {
            Ok(Item::Thread(t)) => {
                threads.insert(t.id.clone(), t);
            }
            Ok(Item::Message(m)) => messages.push((index, m)),
            Ok(Item::Tombstone(t)) => tombstones.push((index, t)),
            Err(r) => out.rejected.push(r),
        }
    }
    conn.pragma_update(
        None,
        "secure_delete",
        if tombstones.is_empty() { "OFF" } else { "ON" },
    )?;
    let result = (|| -> Result<Applied, DbError> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Tombstones first: a message of this page that one of them names is then refused like any other.
        let mut touched: BTreeSet<String> = BTreeSet::new();
        if !tombstones.is_empty() {
            let page_messages: HashMap<&str, &str> = messages
                .iter()
                .map(|(_, m)| (m.id.as_str(), m.thread_id.as_str()))
                .collect();
            out.removed += apply_tombstones(&tx, &tombstones, &page_messages, &now_s, &mut out)?;
        }
        let head_before = head(&tx)?;
        let mut merged = false;
        for t in threads.values() {
            if merge_thread(&tx, t)? {
                out.stored += 1;
                merged = true;
            }
        }
        let mut positions: BTreeMap<(String, String), ()> = BTreeMap::new();
        for (index, m) in &messages {
            match apply_message(&tx, m, &threads, &now_s, &mut positions)? {
                Outcome::Inserted => {
                    out.stored += 1;
                    touched.insert(m.thread_id.clone());
                }
                Outcome::Stored => {
                    out.stored += 1;
                    merged = true;
                    touched.insert(m.thread_id.clone());
                }
                Outcome::Unchanged => out.unchanged += 1,
                Outcome::Forgotten => out.forgotten += 1,
                Outcome::Rejected(code, message) => {
                    out.rejected.push(reject(*index, code, message))
                }
            }
        }
        for (thread, pos) in positions.keys() {
            crate::ingest::number_revisions(&tx, thread, pos)?;
        }
        if out.removed > 0 {
            crate::forget::optimize_fts(&tx)?;
        }
        if let Some(cursor) = source.pull_cursor {
            tx.execute(
                "UPDATE sync_peers SET pull_cursor = ?2, last_sync_at = ?3 WHERE id = ?1",
                params![source.peer_id, cursor, now_s],
            )?;
            // What this page added is the peer's own state: when nothing was merged and the peer had everything
            // before it, the push cursor skips it instead of sending the page back.
            if !merged {
                tx.execute(
                    "UPDATE sync_peers SET push_cursor = (SELECT coalesce(max(seq), 0) FROM sync_log)
                     WHERE id = ?1 AND push_cursor >= ?2",
                    params![source.peer_id, head_before],
                )?;
            }
        }
        crate::pending::commit(tx)?;
        Ok(std::mem::take(&mut out))
    })();
    conn.pragma_update(None, "secure_delete", "OFF")?;
    result
}

/// Inserts the tombstones (the earliest forget time wins) and removes what they name: a message by its id, or
/// by the site's id (`key:` tombstones). A tombstone whose id is known in another thread (a message here or in
/// the page, or a tombstone here) is rejected: it would delete or block a turn of a thread it does not name.
/// Returns how many messages went.
fn apply_tombstones(
    tx: &Transaction<'_>,
    tombstones: &[(usize, TombstoneItem)],
    page_messages: &HashMap<&str, &str>,
    now_s: &str,
    out: &mut Applied,
) -> Result<u64, DbError> {
    crate::forget::prepare_selection(tx)?;
    for (index, t) in tombstones {
        let in_page = page_messages
            .get(t.id.as_str())
            .is_some_and(|thread| *thread != t.thread_id);
        let elsewhere = in_page
            || tx
                .prepare_cached(
                    "SELECT 1 FROM messages WHERE id = ?1 AND thread_id <> ?2
                 UNION ALL SELECT 1 FROM forgotten_messages WHERE id = ?1 AND thread_id <> ?2",
                )?
                .exists(params![t.id, t.thread_id])?;
        if elsewhere {
            out.rejected.push(reject(
                *index,
                "tombstone_thread_mismatch",
                "the tombstone's id belongs to another thread here than its thread_id",
            ));
            continue;
        }
        let inserted = tx
            .prepare_cached(
                "INSERT INTO forgotten_messages (id, thread_id, forgotten_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT(id) DO UPDATE SET forgotten_at = ?3 WHERE ?3 < forgotten_at",
            )?
            .execute(params![t.id, t.thread_id, t.forgotten_at])?;
        if inserted > 0 {
            out.stored += 1;
        } else {
            out.unchanged += 1;
        }
        crate::forget::select_named(tx, &t.id, &t.thread_id)?;
    }
    let selected: usize = tx.query_row("SELECT count(*) FROM forget_sel", [], |r| r.get(0))?;
    if selected == 0 {
        return Ok(0);
    }
    let counts = crate::forget::remove_selected(tx, now_s, selected)?;
    Ok(counts.messages)
}

/// Inserts nothing: a thread row is created with its first message ([`apply_message`]). An existing one takes
/// the earlier first-seen time, the later last-seen time, and the title and URL of the later sighting. Answers
/// whether a value changed (a page seen before changes nothing and says so).
fn merge_thread(tx: &Transaction<'_>, t: &ThreadItem) -> Result<bool, DbError> {
    let changed = tx
        .prepare_cached(
            "UPDATE threads SET
                title = CASE WHEN ?2 IS NOT NULL AND (title IS NULL OR ?5 > last_seen_at
                    OR (?5 = last_seen_at AND ?2 > title)) THEN ?2 ELSE title END,
                url = CASE WHEN ?3 IS NOT NULL AND (url IS NULL OR ?5 > last_seen_at
                    OR (?5 = last_seen_at AND ?3 > url)) THEN ?3 ELSE url END,
                first_seen_at = min(first_seen_at, ?4),
                last_seen_at = max(last_seen_at, ?5),
                origin_device = CASE WHEN (?6, ?7) < (origin_device, origin_seq) THEN ?6 ELSE origin_device END,
                origin_seq = CASE WHEN (?6, ?7) < (origin_device, origin_seq) THEN ?7 ELSE origin_seq END
             WHERE id = ?1 AND (
                (?2 IS NOT NULL AND ?2 IS NOT title AND (title IS NULL OR ?5 > last_seen_at
                    OR (?5 = last_seen_at AND ?2 > title)))
                OR (?3 IS NOT NULL AND ?3 IS NOT url AND (url IS NULL OR ?5 > last_seen_at
                    OR (?5 = last_seen_at AND ?3 > url)))
                OR first_seen_at > ?4 OR last_seen_at < ?5 OR (?6, ?7) < (origin_device, origin_seq))",
        )?
        .execute(params![
            t.id, t.title, t.url, t.first_seen_at, t.last_seen_at, t.origin_device, t.origin_seq
        ])?;
    Ok(changed > 0)
}

enum Outcome {
    /// Added as the peer has it (a new row).
    Inserted,
    /// Merged into a local row that differed: the result may be news to the peer too.
    Stored,
    Unchanged,
    Forgotten,
    Rejected(&'static str, String),
}

fn apply_message(
    tx: &Transaction<'_>,
    m: &MessageItem,
    threads: &HashMap<String, ThreadItem>,
    now_s: &str,
    positions: &mut BTreeMap<(String, String), ()>,
) -> Result<Outcome, DbError> {
    let role = Role::parse(&m.role).unwrap_or(Role::User);
    if crate::forget::turn_is_forgotten(
        tx,
        &crate::forget::Arriving {
            thread_id: &m.thread_id,
            message_id: &m.id,
            key: m.message_key.as_deref(),
            role,
            content: &m.content,
        },
    )? {
        return Ok(Outcome::Forgotten);
    }
    // The same turn here: by id, else by its text or a folded rendering of it (a turn another order of
    // renderings named differently).
    let local: Option<(i64, String, i64, Option<String>)> = tx
        .prepare_cached(
            "SELECT pk, content_hash, source_rank, position_key FROM messages WHERE id = ?1
             UNION ALL
             SELECT pk, content_hash, source_rank, position_key FROM messages WHERE thread_id = ?2 AND content_hash = ?3
             UNION ALL
             SELECT m.pk, m.content_hash, m.source_rank, m.position_key FROM message_renderings r
                JOIN messages m ON m.pk = r.message_pk WHERE r.thread_id = ?2 AND r.content_hash = ?3
             LIMIT 1",
        )?
        .query_row(params![m.id, m.thread_id, m.content_hash], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()?;
    let mut changed = false;
    let mut inserted = false;
    let pk = match local {
        Some((pk, hash, rank, old_pos)) => {
            if (m.source_rank, m.content_hash.as_str()) > (rank, hash.as_str()) {
                // The incoming rendering wins: the stored text is folded under it, as ingest's upgrade does.
                tx.prepare_cached(
                    "INSERT OR IGNORE INTO message_renderings(thread_id, content_hash, message_pk, source_path,
                        folded_at) SELECT thread_id, content_hash, pk, source_path, ?2 FROM messages WHERE pk = ?1",
                )?
                .execute(params![pk, now_s])?;
                tx.prepare_cached(
                    "UPDATE messages SET content = ?2, content_hash = ?3, source_path = ?4, source_rank = ?5,
                        message_key = coalesce(?6, message_key), parent_key = coalesce(?7, parent_key),
                        ordinal = coalesce(?8, ordinal), position_key = coalesce(?9, position_key),
                        occurred_at = coalesce(occurred_at, ?10), tool_calls = coalesce(?11, tool_calls),
                        received_at = ?12
                     WHERE pk = ?1",
                )?
                .execute(params![
                    pk, m.content, m.content_hash, m.source_path, m.source_rank, m.message_key, m.parent_key,
                    m.ordinal, m.position_key, m.occurred_at, m.tool_calls, now_s
                ])?;
                tx.prepare_cached(
                    "DELETE FROM search_vec_state WHERE kind = 'message' AND pk = ?1",
                )?
                .execute([pk])?;
                if let Some(p) = old_pos {
                    positions.insert((m.thread_id.clone(), p), ());
                }
                changed = true;
            } else if hash != m.content_hash {
                // The stored rendering wins: the incoming one is folded under it.
                changed |= tx
                    .prepare_cached(
                        "INSERT OR IGNORE INTO message_renderings(thread_id, content_hash, message_pk,
                            source_path, folded_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                    )?
                    .execute(params![m.thread_id, m.content_hash, pk, m.source_path, now_s])?
                    > 0;
            }
            pk
        }
        None => {
            let exists: bool = tx
                .prepare_cached("SELECT 1 FROM threads WHERE id = ?1")?
                .exists([&m.thread_id])?;
            if !exists {
                let Some(t) = threads.get(&m.thread_id) else {
                    return Ok(Outcome::Rejected(
                        "unknown_thread",
                        "the page holds a message of a thread it does not carry".into(),
                    ));
                };
                tx.prepare_cached(
                    "INSERT INTO threads(id, surface, conversation_id, title, url, first_seen_at, last_seen_at,
                        origin_device, origin_seq) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )?
                .execute(params![
                    t.id, t.surface, t.conversation_id, t.title, t.url, t.first_seen_at, t.last_seen_at,
                    t.origin_device, t.origin_seq
                ])?;
            }
            let provenance_id = match &m.provenance {
                Some(p) => Some(provenance_id(tx, p)?),
                None => None,
            };
            tx.prepare_cached(
                "INSERT INTO messages(id, thread_id, role, content, content_hash, message_key, ordinal,
                    position_key, revision, is_current, occurred_at, captured_at, received_at, tool_calls,
                    provenance_id, origin_device, origin_seq, source_path, source_rank, parent_key)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1, 1, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
            )?
            .execute(params![
                m.id, m.thread_id, m.role, m.content, m.content_hash, m.message_key, m.ordinal,
                m.position_key, m.occurred_at, m.captured_at, now_s, m.tool_calls, provenance_id,
                m.origin_device, m.origin_seq, m.source_path, m.source_rank, m.parent_key
            ])?;
            inserted = true;
            let pk = tx.last_insert_rowid();
            crate::pending::queue(tx, pk)?;
            pk
        }
    };
    // Order-free facts of the turn: the earliest capture, the first known occurrence time, the smallest origin.
    let lattice = tx
        .prepare_cached(
            "UPDATE messages SET captured_at = min(captured_at, ?2), occurred_at = coalesce(occurred_at, ?3),
                origin_device = CASE WHEN (?4, ?5) < (origin_device, origin_seq) THEN ?4 ELSE origin_device END,
                origin_seq = CASE WHEN (?4, ?5) < (origin_device, origin_seq) THEN ?5 ELSE origin_seq END
             WHERE pk = ?1 AND (captured_at > ?2 OR (occurred_at IS NULL AND ?3 IS NOT NULL)
                OR (?4, ?5) < (origin_device, origin_seq))",
        )?
        .execute(params![pk, m.captured_at, m.occurred_at, m.origin_device, m.origin_seq])?;
    if lattice > 0 {
        changed = true;
        if let Some(p) = tx
            .prepare_cached("SELECT position_key FROM messages WHERE pk = ?1")?
            .query_row([pk], |r| r.get::<_, Option<String>>(0))?
        {
            positions.insert((m.thread_id.clone(), p), ());
        }
    }
    for r in &m.renderings {
        if r.content_hash == m.content_hash {
            continue;
        }
        let thread = uuid::Uuid::parse_str(&m.thread_id).unwrap_or_default();
        let rid = ids::message_id(&thread, &r.content_hash)
            .hyphenated()
            .to_string();
        if crate::forget::is_forgotten(tx, &rid)? {
            continue;
        }
        changed |= tx
            .prepare_cached(
                "INSERT OR IGNORE INTO message_renderings(thread_id, content_hash, message_pk, source_path,
                    folded_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![m.thread_id, r.content_hash, pk, r.source_path, now_s])?
            > 0;
    }
    if let Some(p) = &m.position_key {
        positions.insert((m.thread_id.clone(), p.clone()), ());
    }
    if let Some(t) = threads.get(&m.thread_id) {
        changed |= merge_thread(tx, t)?;
    }
    Ok(if changed {
        Outcome::Stored
    } else if inserted {
        Outcome::Inserted
    } else {
        Outcome::Unchanged
    })
}

fn provenance_id(tx: &Transaction<'_>, p: &ProvenanceItem) -> Result<i64, DbError> {
    let origin = p.origin_device.as_deref().unwrap_or("unknown");
    let found: Option<i64> = tx
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
    tx.prepare_cached(
        "INSERT INTO provenance(captured_at, origin_device, client_device_id, app_version) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![p.captured_at, origin, p.client_device_id, p.app_version])?;
    Ok(tx.last_insert_rowid())
}

/// The corpus as sync sees it, in one canonical text form: sorted rows of threads (without the seen times, which
/// say when a relay saw a thread), messages (without receive times), folded renderings and tombstones. Two
/// relays that converged give the same string.
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
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::ingest::{Origin, ingest_observations};
    use personkit_shared::wire::{ClientInfo, Observation, build_observation};
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-22 10:00:00 UTC);

    fn obs(conv: &str, text: &str, ord: u32, at: &str) -> Observation {
        let client = ClientInfo {
            app_version: "0.1.0".into(),
            device_id: "ext".into(),
        };
        let role = if ord.is_multiple_of(2) {
            Role::User
        } else {
            Role::Assistant
        };
        build_observation(
            "browser-ext:chatgpt",
            conv,
            role,
            text,
            Some(ord),
            None,
            at,
            client,
        )
    }

    fn corpus(name: &str) -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::db::open(&dir.path().join(format!("{name}.db"))).unwrap();
        (dir, conn)
    }

    fn all_pages(conn: &Connection) -> Vec<Value> {
        let mut items = Vec::new();
        let mut after = 0;
        loop {
            let p = page(conn, after, 2).unwrap();
            items.extend(p.items);
            after = p.next;
            if !p.more {
                return items;
            }
        }
    }

    fn source() -> Source<'static> {
        Source {
            peer_id: "peer",
            pull_cursor: None,
        }
    }

    #[test]
    fn pages_applied_twice_in_any_order_give_the_same_corpus_and_tombstones_win() {
        let (_d1, mut a) = corpus("a");
        let origin = Origin {
            device_id: "dev".into(),
        };
        let batch = vec![
            obs("x", "hello there", 0, "2026-11-20T09:00:00Z"),
            obs("x", "first answer", 1, "2026-11-20T09:01:00Z"),
            obs("x", "second answer", 1, "2026-11-21T09:01:00Z"),
            obs("y", "other thread", 0, "2026-11-20T09:00:00Z"),
        ];
        ingest_observations(&mut a, &origin, &batch, NOW).unwrap();
        let items = all_pages(&a);
        let (_d2, mut b) = corpus("b");
        let mut reversed = items.clone();
        reversed.reverse();
        // Threads must come with their messages: a reversed list still carries every thread.
        let r = apply_page(&mut b, &reversed, source(), NOW).unwrap();
        assert!(r.rejected.is_empty(), "{:?}", r.rejected);
        let again = apply_page(&mut b, &items, source(), NOW).unwrap();
        assert_eq!(again.stored, 0, "{again:?}");
        assert_eq!(canonical_dump(&a).unwrap(), canonical_dump(&b).unwrap());

        crate::forget::forget(
            &mut a,
            &crate::forget::Selection::thread(&batch[0].thread_id),
            NOW,
        )
        .unwrap();
        // B still sends the thread's messages; A's tombstones keep them out, and B applying A's feed forgets them.
        let from_b = all_pages(&b);
        let r = apply_page(&mut a, &from_b, source(), NOW).unwrap();
        assert_eq!(r.forgotten, 3, "{r:?}");
        apply_page(&mut b, &all_pages(&a), source(), NOW).unwrap();
        assert_eq!(canonical_dump(&a).unwrap(), canonical_dump(&b).unwrap());
        let left: i64 = b
            .query_row(
                "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'answer'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 0);
    }

    #[test]
    fn hostile_items_are_rejected_one_by_one_and_the_rest_lands() {
        let (_d1, mut a) = corpus("a");
        let origin = Origin {
            device_id: "dev".into(),
        };
        ingest_observations(
            &mut a,
            &origin,
            &[obs("x", "good turn", 0, "2026-11-20T09:00:00Z")],
            NOW,
        )
        .unwrap();
        let good = all_pages(&a);
        let msg = good
            .iter()
            .find(|v| v["kind"] == "message")
            .unwrap()
            .clone();
        let thread = good.iter().find(|v| v["kind"] == "thread").unwrap().clone();
        let mut tampered = msg.clone();
        tampered["content"] = "changed text".into();
        let mut wrong_id = msg.clone();
        wrong_id["id"] = "00000000-0000-5000-8000-000000000000".into();
        let mut wrong_thread = thread.clone();
        wrong_thread["conversation_id"] = "other".into();
        let mut huge = msg.clone();
        huge["content"] = "x".repeat(MAX_CONTENT_BYTES + 1).into();
        let mut bad_time = msg.clone();
        bad_time["captured_at"] = "yesterday".into();
        let mut bad_rank = msg.clone();
        bad_rank["source_rank"] = 9.into();
        let mut orphan = msg.clone();
        orphan["thread_id"] = "11111111-1111-5111-8111-111111111111".into();
        let hostile = vec![
            serde_json::json!(42),
            serde_json::json!({"kind": "message"}),
            serde_json::json!({"kind": "bomb"}),
            tampered,
            wrong_id,
            wrong_thread,
            huge,
            bad_time,
            bad_rank,
            orphan,
            serde_json::json!({"kind": "tombstone", "id": "", "thread_id": "x", "forgotten_at": "z"}),
            thread,
            msg,
        ];
        let (_d2, mut b) = corpus("b");
        let r = apply_page(&mut b, &hostile, source(), NOW).unwrap();
        let codes: Vec<&str> = r.rejected.iter().map(|x| x.code).collect();
        assert_eq!(
            codes,
            vec![
                "unknown_kind",
                "malformed_item",
                "unknown_kind",
                "hash_mismatch",
                "id_mismatch",
                "id_mismatch",
                "invalid_content",
                "invalid_time",
                "invalid_path",
                "id_mismatch",
                "invalid_tombstone"
            ],
            "{r:?}"
        );
        assert_eq!(r.stored, 1, "the valid message beside them lands: {r:?}");
        assert_eq!(canonical_dump(&a).unwrap(), canonical_dump(&b).unwrap());
    }

    fn message_id(conn: &Connection, thread: &str) -> String {
        conn.query_row(
            "SELECT id FROM messages WHERE thread_id = ?1",
            [thread],
            |r| r.get(0),
        )
        .unwrap()
    }

    #[test]
    fn a_tombstone_naming_another_thread_is_rejected_and_removes_nothing() {
        let (_d, mut a) = corpus("a");
        let origin = Origin {
            device_id: "dev".into(),
        };
        let batch = vec![
            obs("x", "keep this turn", 0, "2026-11-20T09:00:00Z"),
            obs("y", "other thread", 0, "2026-11-20T09:00:00Z"),
        ];
        ingest_observations(&mut a, &origin, &batch, NOW).unwrap();
        let (tx, ty) = (&batch[0].thread_id, &batch[1].thread_id);
        let victim = message_id(&a, tx);
        let at = fmt_time(NOW);
        let hash = "a".repeat(64);
        let tomb = |id: String, thread: &str| serde_json::json!({"kind": "tombstone", "id": id, "thread_id": thread, "forgotten_at": at});
        let page = vec![
            // The id of a message of x, said to be of y.
            tomb(victim.clone(), ty),
            // Prefixed ids name their own thread, which must be the tombstone's.
            tomb(format!("key:{tx}|site-1"), ty),
            tomb(format!("words:{tx}|user|{hash}"), ty),
            tomb("not-an-id".into(), ty),
            tomb(victim.to_uppercase(), tx),
            // Beside them, well-formed tombstones of y land.
            tomb(format!("key:{ty}|site-2"), ty),
            tomb(format!("words:{ty}|user|{hash}"), ty),
        ];
        let r = apply_page(&mut a, &page, source(), NOW).unwrap();
        let codes: Vec<(usize, &str)> = r.rejected.iter().map(|x| (x.index, x.code)).collect();
        assert_eq!(
            codes,
            vec![
                (1, "tombstone_thread_mismatch"),
                (2, "tombstone_thread_mismatch"),
                (3, "invalid_tombstone"),
                (4, "invalid_tombstone"),
                (0, "tombstone_thread_mismatch"),
            ],
            "{r:?}"
        );
        assert_eq!((r.removed, r.stored), (0, 2), "{r:?}");
        assert_eq!(message_id(&a, tx), victim, "the turn of x stays");
        let tombs: Vec<String> = a
            .prepare("SELECT id FROM forgotten_messages ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            tombs,
            vec![
                format!("key:{ty}|site-2"),
                format!("words:{ty}|user|{hash}")
            ]
        );
        // The same id with its own thread removes it.
        let r = apply_page(&mut a, &[tomb(victim.clone(), tx)], source(), NOW).unwrap();
        assert_eq!((r.removed, r.rejected.len()), (1, 0), "{r:?}");
        // And a tombstone of it naming another thread is refused, as the message's own one stays.
        let r = apply_page(&mut a, &[tomb(victim, ty)], source(), NOW).unwrap();
        assert_eq!(r.rejected[0].code, "tombstone_thread_mismatch", "{r:?}");

        // A message new here, with a tombstone of its id naming another thread in the same page: the message lands.
        let (_d2, mut b) = corpus("b");
        let mut items = all_pages(&a);
        let msg = items
            .iter()
            .find(|v| v["kind"] == "message")
            .unwrap()
            .clone();
        let id = msg["id"].as_str().unwrap().to_owned();
        items.insert(0, tomb(id.clone(), tx));
        let r = apply_page(&mut b, &items, source(), NOW).unwrap();
        assert_eq!(r.rejected[0].code, "tombstone_thread_mismatch", "{r:?}");
        assert_eq!(message_id(&b, ty), id);
    }

    #[test]
    fn a_replayed_page_counts_as_unchanged_where_this_relay_saw_the_thread_later() {
        let origin = Origin {
            device_id: "dev".into(),
        };
        let (_d1, mut a) = corpus("a");
        let mut early = obs("x", "hello there", 0, "2026-11-20T09:00:00Z");
        early.title = Some("Old title".into());
        ingest_observations(
            &mut a,
            &origin,
            &[
                early.clone(),
                obs("x", "an answer", 1, "2026-11-20T09:01:00Z"),
                obs("z", "to forget", 0, "2026-11-20T09:00:00Z"),
            ],
            NOW,
        )
        .unwrap();
        let z = obs("z", "to forget", 0, "2026-11-20T09:00:00Z").thread_id;
        crate::forget::forget(&mut a, &crate::forget::Selection::thread(&z), NOW).unwrap();
        let (_d2, mut b) = corpus("b");
        let mut late = obs("x", "a later question", 2, "2026-11-21T09:00:00Z");
        late.title = Some("New title".into());
        ingest_observations(&mut b, &origin, &[late], NOW).unwrap();
        let page = all_pages(&a);
        assert!(page.iter().any(|v| v["kind"] == "tombstone"), "{page:?}");
        let first = apply_page(&mut b, &page, source(), NOW).unwrap();
        assert!(first.stored > 0 && first.rejected.is_empty(), "{first:?}");
        let dump = canonical_dump(&b).unwrap();
        let again = apply_page(&mut b, &page, source(), NOW).unwrap();
        assert_eq!(again.stored, 0, "{again:?}");
        assert!(again.unchanged >= 3, "messages and tombstones: {again:?}");
        assert_eq!(canonical_dump(&b).unwrap(), dump);
    }

    #[test]
    fn a_pulled_page_moves_the_cursor_with_its_commit_and_a_revoked_peer_is_refused() {
        let (_d, mut b) = corpus("b");
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
        let r = apply_page(
            &mut b,
            &[],
            Source {
                peer_id: "relay-a",
                pull_cursor: Some(17),
            },
            NOW,
        )
        .unwrap();
        assert_eq!(r, Applied::default());
        assert_eq!(list_peers(&b).unwrap()[0].pull_cursor, 17);
        revoke_peer(&b, "laptop", NOW).unwrap();
        assert!(authenticate(&b, token.expose()).unwrap().is_none());
        assert!(outgoing(&b).unwrap().is_empty());
    }
}
