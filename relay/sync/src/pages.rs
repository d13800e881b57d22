//! The sync page (docs/sync.md, docs/api.md `GET`/`POST /v1/sync/pages`): its items as they travel, how each is
//! checked, and the rules that merge a peer's page into this relay's corpus.
//!
//! The corpus is a grow-only set of content-addressed rows (threads, messages with every revision and the hashes
//! of their folded renderings, memory versions with the threads they drew on) plus tombstones. [`apply_page`]
//! merges each row into the local one of the same id by rules that do not depend on arrival order (a rendering
//! replaces another only from a higher `(rank, hash)`, revisions are renumbered by `(captured_at, content_hash)`
//! as ingest does, [`merge_thread`] and [`merge_facts`] keep the earliest and the latest of what they compare, a
//! memory version's withdrawal wins and keeps its earliest time, [`merge_withdrawal`]), and a tombstone deletes
//! its message through the store's forgetting and keeps it from coming back — so every interleaving of pages
//! converges.
//!
//! A memory version that arrives having drawn on a thread with a turn forgotten here at or after the version was
//! made is stored withdrawn and its tier marked due, as forgetting here would have done. One made after the
//! forget is stored as it is: if the relay that made it had not yet heard of the forget, that relay withdraws it
//! when the tombstone reaches it (it holds the turns the version drew on), and the withdrawal travels back.
//! Withdrawing those too would withdraw every later version that draws on the rest of a partly forgotten thread,
//! on every relay, each time one is made.
//!
//! The rules decide; storage answers and writes through [`PageStore`] (the store's
//! `personkit_store::sync::SyncTx` is the SQLite one), and never decides anything itself.
//!
//! **Architecture invariant:** a page is applied in one transaction, and a pulled page's cursor moves in that same
//! transaction. Each item of a page is checked on its own (ids recomputed from content, sizes, times, roles,
//! paths); a bad one is rejected and counted, never a panic.

use std::collections::{BTreeSet, HashMap};

use personkit_shared::identity::Path;
use personkit_shared::ids;
use personkit_shared::wire::{MAX_CONTENT_BYTES, MAX_FIELD_BYTES, Role, is_valid_surface};
use personkit_store::clock::normalize_time;
use personkit_store::forget::Arriving;
use personkit_store::sync::{
    self as store, Change, EventSyncRow, MemoryRow, MergeRow, MessageRow, ProposalRow,
    ProposalSourceRow, ProvenanceRow, RenderingRow, StoredTurn, StoredVersion, SyncTx, ThreadRow,
    TombstoneRow, TurnFacts,
};
use personkit_store::{Connection, DbError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

/// Most log entries one page answers, and the default.
pub const MAX_PAGE_ITEMS: usize = 5000;
pub const DEFAULT_PAGE_ITEMS: usize = 1000;
/// A page stops growing once its items pass this many bytes of content (the last item may pass it).
pub const PAGE_CONTENT_BYTES: usize = 4 * 1024 * 1024;
/// Most folded renderings one message may carry.
const MAX_RENDERINGS: usize = 64;
/// Most bytes of a memory version's body.
pub const MAX_MEMORY_BODY_BYTES: usize = 256 * 1024;
/// Most threads a memory version may name as its sources.
pub const MAX_MEMORY_SOURCES: usize = 10_000;
/// Most versions a memory version may name as made from.
const MAX_BASED_ON: usize = 64;
/// Most messages an entity proposal may name.
pub const MAX_PROPOSAL_SOURCES: usize = 10_000;

/// One page of the change feed, as it travels.
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
    /// Threads (those the page's messages belong to, first), messages, tombstones, memory versions, events,
    /// merge decisions and entity proposals.
    pub items: Vec<Value>,
}

// ---------------------------------------------------------------------------------------------------------------
// Items as they travel: an object with `kind` ("thread", "message", "tombstone", "memory", "event", "merge",
// "proposal") and the fields below.

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProvenanceItem {
    captured_at: String,
    origin_device: Option<String>,
    client_device_id: Option<String>,
    app_version: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RenderingItem {
    content_hash: String,
    source_path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TombstoneItem {
    id: String,
    thread_id: String,
    forgotten_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemoryItem {
    id: String,
    tier: String,
    created_at: String,
    body: String,
    tokens: i64,
    model: Option<String>,
    prompt_version: Option<String>,
    covers_from: Option<String>,
    covers_to: Option<String>,
    based_on: Vec<String>,
    withdrawn_at: Option<String>,
    origin_device: String,
    origin_seq: i64,
    sources: Vec<String>,
}

impl From<MemoryRow> for MemoryItem {
    fn from(v: MemoryRow) -> Self {
        MemoryItem {
            id: v.id,
            tier: v.tier,
            created_at: v.created_at,
            body: v.body,
            tokens: v.tokens,
            model: v.model,
            prompt_version: v.prompt_version,
            covers_from: v.covers_from,
            covers_to: v.covers_to,
            based_on: v.based_on,
            withdrawn_at: v.withdrawn_at,
            origin_device: v.origin_device,
            origin_seq: v.origin_seq,
            sources: v.sources,
        }
    }
}

impl From<MemoryItem> for MemoryRow {
    fn from(v: MemoryItem) -> Self {
        let mut sources = v.sources;
        sources.sort_unstable();
        sources.dedup();
        MemoryRow {
            id: v.id,
            tier: v.tier,
            created_at: v.created_at,
            body: v.body,
            tokens: v.tokens,
            model: v.model,
            prompt_version: v.prompt_version,
            covers_from: v.covers_from,
            covers_to: v.covers_to,
            based_on: v.based_on,
            withdrawn_at: v.withdrawn_at,
            origin_device: v.origin_device,
            origin_seq: v.origin_seq,
            sources,
        }
    }
}

impl From<ThreadRow> for ThreadItem {
    fn from(t: ThreadRow) -> Self {
        ThreadItem {
            id: t.id,
            surface: t.surface,
            conversation_id: t.conversation_id,
            title: t.title,
            url: t.url,
            first_seen_at: t.first_seen_at,
            last_seen_at: t.last_seen_at,
            origin_device: t.origin_device,
            origin_seq: t.origin_seq,
        }
    }
}

impl From<ThreadItem> for ThreadRow {
    fn from(t: ThreadItem) -> Self {
        ThreadRow {
            id: t.id,
            surface: t.surface,
            conversation_id: t.conversation_id,
            title: t.title,
            url: t.url,
            first_seen_at: t.first_seen_at,
            last_seen_at: t.last_seen_at,
            origin_device: t.origin_device,
            origin_seq: t.origin_seq,
        }
    }
}

impl From<MessageRow> for MessageItem {
    fn from(m: MessageRow) -> Self {
        MessageItem {
            id: m.id,
            thread_id: m.thread_id,
            role: m.role,
            content: m.content,
            content_hash: m.content_hash,
            message_key: m.message_key,
            ordinal: m.ordinal,
            position_key: m.position_key,
            occurred_at: m.occurred_at,
            captured_at: m.captured_at,
            tool_calls: m.tool_calls,
            source_path: m.source_path,
            source_rank: m.source_rank,
            parent_key: m.parent_key,
            origin_device: m.origin_device,
            origin_seq: m.origin_seq,
            provenance: m.provenance.map(|p| ProvenanceItem {
                captured_at: p.captured_at,
                origin_device: p.origin_device,
                client_device_id: p.client_device_id,
                app_version: p.app_version,
            }),
            renderings: m
                .renderings
                .into_iter()
                .map(|r| RenderingItem {
                    content_hash: r.content_hash,
                    source_path: r.source_path,
                })
                .collect(),
        }
    }
}

impl From<MessageItem> for MessageRow {
    fn from(m: MessageItem) -> Self {
        MessageRow {
            id: m.id,
            thread_id: m.thread_id,
            role: m.role,
            content: m.content,
            content_hash: m.content_hash,
            message_key: m.message_key,
            ordinal: m.ordinal,
            position_key: m.position_key,
            occurred_at: m.occurred_at,
            captured_at: m.captured_at,
            tool_calls: m.tool_calls,
            source_path: m.source_path,
            source_rank: m.source_rank,
            parent_key: m.parent_key,
            origin_device: m.origin_device,
            origin_seq: m.origin_seq,
            provenance: m.provenance.map(|p| ProvenanceRow {
                captured_at: p.captured_at,
                origin_device: p.origin_device,
                client_device_id: p.client_device_id,
                app_version: p.app_version,
            }),
            renderings: m
                .renderings
                .into_iter()
                .map(|r| RenderingRow {
                    content_hash: r.content_hash,
                    source_path: r.source_path,
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventItem {
    id: String,
    event_kind: String,
    source_surface: String,
    content: String,
    content_hash: String,
    minute_bucket: i64,
    occurred_at: String,
    captured_at: String,
    attrs: serde_json::Map<String, Value>,
    origin_device: String,
    origin_seq: i64,
}

impl From<EventSyncRow> for EventItem {
    fn from(e: EventSyncRow) -> Self {
        EventItem {
            id: e.id,
            event_kind: e.kind,
            source_surface: e.source_surface,
            content: e.content,
            content_hash: e.content_hash,
            minute_bucket: e.minute_bucket,
            occurred_at: e.occurred_at,
            captured_at: e.captured_at,
            attrs: serde_json::from_str(&e.attrs).unwrap_or_default(),
            origin_device: e.origin_device,
            origin_seq: e.origin_seq,
        }
    }
}

impl From<EventItem> for EventSyncRow {
    fn from(e: EventItem) -> Self {
        EventSyncRow {
            id: e.id,
            kind: e.event_kind,
            source_surface: e.source_surface,
            content: e.content,
            content_hash: e.content_hash,
            minute_bucket: e.minute_bucket,
            occurred_at: e.occurred_at,
            captured_at: e.captured_at,
            attrs: Value::Object(e.attrs).to_string(),
            origin_device: e.origin_device,
            origin_seq: e.origin_seq,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MergeItem {
    a: String,
    b: String,
    entity_kind: String,
    similarity: f64,
    state: String,
    kept: Option<String>,
    created_at: String,
    decided_at: Option<String>,
}

impl From<MergeRow> for MergeItem {
    fn from(m: MergeRow) -> Self {
        MergeItem {
            a: m.a,
            b: m.b,
            entity_kind: m.kind,
            similarity: m.similarity,
            state: m.state,
            kept: m.kept,
            created_at: m.created_at,
            decided_at: m.decided_at,
        }
    }
}

impl From<MergeItem> for MergeRow {
    fn from(m: MergeItem) -> Self {
        MergeRow {
            a: m.a,
            b: m.b,
            kind: m.entity_kind,
            similarity: m.similarity,
            state: m.state,
            kept: m.kept,
            created_at: m.created_at,
            decided_at: m.decided_at,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProposalSourceItem {
    message_id: String,
    thread_id: String,
    confidence: f64,
    seen_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProposalItem {
    id: String,
    entity_kind: String,
    name: String,
    key: String,
    confidence: f64,
    model: String,
    state: String,
    created_at: String,
    decided_at: Option<String>,
    sources: Vec<ProposalSourceItem>,
}

impl From<ProposalRow> for ProposalItem {
    fn from(p: ProposalRow) -> Self {
        ProposalItem {
            id: p.id,
            entity_kind: p.kind,
            name: p.name,
            key: p.key,
            confidence: p.confidence,
            model: p.model,
            state: p.state,
            created_at: p.created_at,
            decided_at: p.decided_at,
            sources: p
                .sources
                .into_iter()
                .map(|s| ProposalSourceItem {
                    message_id: s.message_id,
                    thread_id: s.thread_id,
                    confidence: s.confidence,
                    seen_at: s.seen_at,
                })
                .collect(),
        }
    }
}

impl From<ProposalItem> for ProposalRow {
    fn from(p: ProposalItem) -> Self {
        let mut sources: Vec<ProposalSourceRow> = p
            .sources
            .into_iter()
            .map(|s| ProposalSourceRow {
                message_id: s.message_id,
                thread_id: s.thread_id,
                confidence: s.confidence,
                seen_at: s.seen_at,
            })
            .collect();
        sources.sort_by(|x, y| x.message_id.cmp(&y.message_id));
        sources.dedup_by(|x, y| x.message_id == y.message_id);
        ProposalRow {
            id: p.id,
            kind: p.entity_kind,
            name: p.name,
            key: p.key,
            confidence: p.confidence,
            model: p.model,
            state: p.state,
            created_at: p.created_at,
            decided_at: p.decided_at,
            sources,
        }
    }
}

/// An item with its `kind`, as it travels.
fn tagged(kind: &str, item: impl Serialize) -> Result<Value, DbError> {
    let mut v = serde_json::to_value(item)
        .map_err(|e| DbError::Invalid(format!("cannot write a page item: {e}")))?;
    if let Some(o) = v.as_object_mut() {
        o.insert("kind".to_owned(), Value::String(kind.to_owned()));
    }
    Ok(v)
}

/// The feed after `after`: at most `limit` entries, and no more than [`PAGE_CONTENT_BYTES`] of content. The
/// threads of the page's messages come first, so a page applies on its own.
pub fn page(conn: &Connection, after: i64, limit: usize) -> Result<Page, DbError> {
    let limit = limit.clamp(1, MAX_PAGE_ITEMS);
    let mut next = after;
    let mut bytes = 0usize;
    let mut threads: BTreeSet<String> = BTreeSet::new();
    let mut rest: Vec<Value> = Vec::new();
    for (seq, change) in store::feed(conn, after, limit)? {
        if bytes >= PAGE_CONTENT_BYTES {
            break;
        }
        next = seq;
        match change {
            Change::Thread(id) => {
                threads.insert(id);
            }
            Change::Message(pk) => {
                if let Some(m) = store::message_row(conn, pk)? {
                    bytes += m.content.len();
                    threads.insert(m.thread_id.clone());
                    rest.push(tagged("message", MessageItem::from(m))?);
                }
            }
            Change::Tombstone(id) => {
                if let Some(t) = store::tombstone_row(conn, &id)? {
                    rest.push(tagged(
                        "tombstone",
                        TombstoneItem {
                            id: t.id,
                            thread_id: t.thread_id,
                            forgotten_at: t.forgotten_at,
                        },
                    )?);
                }
            }
            Change::Memory(id) => {
                // One source more than an item may hold: a version with too many is refused by the peer, not cut.
                if let Some(v) = store::memory_row(conn, &id, MAX_MEMORY_SOURCES + 1)? {
                    bytes += v.body.len() + 40 * v.sources.len();
                    rest.push(tagged("memory", MemoryItem::from(v))?);
                }
            }
            Change::Event(id) => {
                if let Some(e) = store::event_row(conn, &id)? {
                    bytes += e.content.len() + e.attrs.len();
                    rest.push(tagged("event", EventItem::from(e))?);
                }
            }
            Change::Merge(a, b) => {
                if let Some(m) = store::merge_row(conn, &a, &b)?.filter(|m| m.state != "proposed") {
                    rest.push(tagged("merge", MergeItem::from(m))?);
                }
            }
            Change::Proposal(id) => {
                // A name found in more messages travels with the first MAX_PROPOSAL_SOURCES of them (by id): its
                // decision must reach the peer, which links the messages it was sent.
                if let Some(p) = store::proposal_row(conn, &id, MAX_PROPOSAL_SOURCES)? {
                    bytes += p.name.len() + 120 * p.sources.len();
                    rest.push(tagged("proposal", ProposalItem::from(p))?);
                }
            }
            Change::Other => {}
        }
    }
    let mut items = Vec::with_capacity(threads.len() + rest.len());
    for t in &threads {
        if let Some(row) = store::thread_row(conn, t)? {
            items.push(tagged("thread", ThreadItem::from(row))?);
        }
    }
    items.extend(rest);
    let remaining = store::pending(conn, next)?;
    Ok(Page {
        relay_id: personkit_store::db::relay_id(conn)?,
        next,
        more: remaining > 0,
        remaining,
        items,
    })
}

// ---------------------------------------------------------------------------------------------------------------
// Checking items.

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
    /// Counts one item's outcome; answers whether the merge may be news to the peer.
    fn count(&mut self, outcome: Outcome, index: usize) -> bool {
        match outcome {
            Outcome::Inserted => self.stored += 1,
            Outcome::Stored => {
                self.stored += 1;
                return true;
            }
            Outcome::Unchanged => self.unchanged += 1,
            Outcome::Forgotten => self.forgotten += 1,
            Outcome::Rejected(code, message) => self.rejected.push(reject(index, code, message)),
        }
        false
    }

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
    // A repeat (the same words under another id of the source) is stored under its repeat hash.
    let repeat = m
        .message_key
        .as_deref()
        .is_some_and(|k| ids::repeat_hash(&m.content, role, k) == m.content_hash);
    if ids::content_hash(&m.content, role) != m.content_hash && !repeat {
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

/// A memory version's id: 32 lowercase hex digits (`personkit_store::memory::version_id`).
fn is_version_id(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A thread id in its stored form.
fn is_thread_id(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok_and(|u| u.hyphenated().to_string() == s)
}

fn check_memory(v: &MemoryItem) -> Result<(), (&'static str, String)> {
    if !personkit_store::memory::TIERS.contains(&v.tier.as_str()) {
        return Err((
            "invalid_memory",
            "tier is not short, mid, long or profile".into(),
        ));
    }
    if !is_version_id(&v.id) {
        return Err(("invalid_memory", "version id is not 32 hex digits".into()));
    }
    if v.body.len() > MAX_MEMORY_BODY_BYTES {
        return Err(("invalid_content", "memory body is too large".into()));
    }
    if !canonical_time(&v.created_at)
        || [&v.covers_from, &v.covers_to, &v.withdrawn_at]
            .iter()
            .any(|t| t.as_deref().is_some_and(|t| !canonical_time(t)))
    {
        return Err((
            "invalid_time",
            "memory times are not in the stored form".into(),
        ));
    }
    match &v.withdrawn_at {
        // A withdrawn version's body is gone, and with it what its id was made from.
        Some(_) if !v.body.is_empty() => {
            return Err((
                "invalid_memory",
                "a withdrawn version carries a body".into(),
            ));
        }
        Some(_) => {}
        None => {
            if personkit_store::memory::version_id(
                &v.tier,
                &v.created_at,
                &v.origin_device,
                &v.body,
            ) != v.id
            {
                return Err((
                    "id_mismatch",
                    "version id is not the id of its tier, time, origin and body".into(),
                ));
            }
        }
    }
    if !short(&v.origin_device)
        || v.origin_seq < 0
        || !(0..=MAX_MEMORY_BODY_BYTES as i64).contains(&v.tokens)
        || !opt_short(&v.model)
        || !opt_short(&v.prompt_version)
    {
        return Err((
            "invalid_memory",
            "a field is empty, too long or out of range".into(),
        ));
    }
    if v.based_on.len() > MAX_BASED_ON || !v.based_on.iter().all(|b| is_version_id(b)) {
        return Err((
            "invalid_memory",
            "based_on is not a short list of version ids".into(),
        ));
    }
    if v.sources.len() > MAX_MEMORY_SOURCES {
        return Err((
            "invalid_memory",
            format!("a version may name at most {MAX_MEMORY_SOURCES} source threads"),
        ));
    }
    if !v.sources.iter().all(|t| is_thread_id(t)) {
        return Err(("invalid_memory", "a source is not a thread id".into()));
    }
    Ok(())
}

/// An entity's id: 32 lowercase hex digits (`personkit_store::graph::entity_id`).
fn is_entity_id(s: &str) -> bool {
    is_version_id(s)
}

fn unit(x: f64) -> bool {
    x.is_finite() && (0.0..=1.0).contains(&x)
}

fn check_event(e: &EventItem) -> Result<(), (&'static str, String)> {
    if !short(&e.event_kind)
        || !short(&e.source_surface)
        || !short(&e.origin_device)
        || e.origin_seq < 0
    {
        return Err((
            "invalid_event",
            "a field is empty, too long or holds control characters".into(),
        ));
    }
    if e.content.len() > personkit_store::events::MAX_CONTENT_BYTES {
        return Err(("invalid_content", "event content is too large".into()));
    }
    if serde_json::to_string(&e.attrs).map_or(usize::MAX, |a| a.len())
        > personkit_store::events::MAX_CONTENT_BYTES
    {
        return Err(("invalid_event", "event attrs are too large".into()));
    }
    // Events derived from a thread are each relay's own (docs/sync.md).
    if e.attrs.contains_key("thread_id") {
        return Err((
            "invalid_event",
            "an event derived from a thread does not travel".into(),
        ));
    }
    if !canonical_time(&e.occurred_at) || !canonical_time(&e.captured_at) {
        return Err((
            "invalid_time",
            "event times are not in the stored form".into(),
        ));
    }
    let at = personkit_store::clock::parse_time(&e.occurred_at)
        .map(|t| i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0));
    if !is_hash(&e.content_hash)
        || at.map(ids::minute_bucket) != Some(e.minute_bucket)
        || ids::event_id(&e.content_hash, e.minute_bucket) != e.id
    {
        return Err((
            "id_mismatch",
            "event id is not the id of its content hash and the minute it occurred in".into(),
        ));
    }
    Ok(())
}

fn check_merge(m: &MergeItem) -> Result<(), (&'static str, String)> {
    if !is_entity_id(&m.a) || !is_entity_id(&m.b) || m.a >= m.b {
        return Err((
            "invalid_merge",
            "a and b are not two entity ids in order".into(),
        ));
    }
    if !short(&m.entity_kind) || !unit(m.similarity) {
        return Err((
            "invalid_merge",
            "a field is empty, too long or out of range".into(),
        ));
    }
    let kept_ok = match (m.state.as_str(), m.kept.as_deref()) {
        ("merged", Some(k)) => k == m.a || k == m.b,
        ("dismissed", None) => true,
        _ => false,
    };
    if !kept_ok {
        return Err((
            "invalid_merge",
            "a decision is merged (keeping a or b) or dismissed".into(),
        ));
    }
    if !canonical_time(&m.created_at) || !m.decided_at.as_deref().is_some_and(canonical_time) {
        return Err((
            "invalid_time",
            "merge times are not in the stored form".into(),
        ));
    }
    Ok(())
}

fn check_proposal(p: &ProposalItem) -> Result<(), (&'static str, String)> {
    if !short(&p.entity_kind)
        || !short(&p.name)
        || !short(&p.key)
        || !short(&p.model)
        || !unit(p.confidence)
    {
        return Err((
            "invalid_proposal",
            "a field is empty, too long or out of range".into(),
        ));
    }
    if personkit_store::proposals::proposal_id(&p.entity_kind, &p.key) != p.id {
        return Err((
            "id_mismatch",
            "proposal id is not the id of its kind and key".into(),
        ));
    }
    let decided = match p.state.as_str() {
        "proposed" => p.decided_at.is_none(),
        "approved" | "rejected" => p.decided_at.is_some(),
        _ => false,
    };
    if !decided {
        return Err((
            "invalid_proposal",
            "state is proposed (undecided), approved or rejected (decided)".into(),
        ));
    }
    if !canonical_time(&p.created_at) || !p.decided_at.as_deref().is_none_or(canonical_time) {
        return Err((
            "invalid_time",
            "proposal times are not in the stored form".into(),
        ));
    }
    if p.sources.is_empty() || p.sources.len() > MAX_PROPOSAL_SOURCES {
        return Err((
            "invalid_proposal",
            format!("a proposal names 1 to {MAX_PROPOSAL_SOURCES} messages"),
        ));
    }
    let sources_ok = p.sources.iter().all(|s| {
        is_thread_id(&s.message_id)
            && is_thread_id(&s.thread_id)
            && unit(s.confidence)
            && canonical_time(&s.seen_at)
    });
    if !sources_ok {
        return Err((
            "invalid_proposal",
            "a source is not a message of a thread with a confidence and a time".into(),
        ));
    }
    Ok(())
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
    Memory(Box<MemoryItem>),
    Event(Box<EventItem>),
    Merge(Box<MergeItem>),
    Proposal(Box<ProposalItem>),
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
            format!(
                "item does not parse: {}",
                personkit_shared::wire::quote_safely(&e.to_string(), 200)
            ),
        )
    };
    let item = match kind {
        "thread" => Item::Thread(serde_json::from_value(body).map_err(bad)?),
        "message" => Item::Message(Box::new(serde_json::from_value(body).map_err(bad)?)),
        "tombstone" => Item::Tombstone(serde_json::from_value(body).map_err(bad)?),
        "memory" => Item::Memory(Box::new(serde_json::from_value(body).map_err(bad)?)),
        "event" => Item::Event(Box::new(serde_json::from_value(body).map_err(bad)?)),
        "merge" => Item::Merge(Box::new(serde_json::from_value(body).map_err(bad)?)),
        "proposal" => Item::Proposal(Box::new(serde_json::from_value(body).map_err(bad)?)),
        _ => {
            return Err(reject(
                index,
                "unknown_kind",
                "kind is not thread, message, tombstone, memory, event, merge or proposal",
            ));
        }
    };
    let checked = match &item {
        Item::Thread(t) => check_thread(t),
        Item::Message(m) => check_message(m).map(|_| ()),
        Item::Tombstone(t) => check_tombstone(t),
        Item::Memory(v) => check_memory(v),
        Item::Event(e) => check_event(e),
        Item::Merge(m) => check_merge(m),
        Item::Proposal(p) => check_proposal(p),
    };
    checked.map_err(|(code, message)| reject(index, code, message))?;
    Ok(item)
}

/// A page's items, checked: the threads by id, the messages, tombstones and memory versions with their index in
/// the page, and the rejected ones.
#[derive(Default)]
struct Checked {
    threads: HashMap<String, ThreadRow>,
    messages: Vec<(usize, MessageRow)>,
    tombstones: Vec<(usize, TombstoneRow)>,
    memories: Vec<(usize, MemoryRow)>,
    events: Vec<(usize, EventSyncRow)>,
    merges: Vec<(usize, MergeRow)>,
    proposals: Vec<(usize, ProposalRow)>,
    rejected: Vec<Rejection>,
}

fn check_items(items: &[Value]) -> Checked {
    let mut out = Checked::default();
    for (index, v) in items.iter().enumerate() {
        match parse_item(index, v) {
            Ok(Item::Thread(t)) => {
                out.threads.insert(t.id.clone(), t.into());
            }
            Ok(Item::Message(m)) => out.messages.push((index, (*m).into())),
            Ok(Item::Tombstone(t)) => out.tombstones.push((
                index,
                TombstoneRow {
                    id: t.id,
                    thread_id: t.thread_id,
                    forgotten_at: t.forgotten_at,
                },
            )),
            Ok(Item::Memory(v)) => out.memories.push((index, (*v).into())),
            Ok(Item::Event(e)) => out.events.push((index, (*e).into())),
            Ok(Item::Merge(m)) => out.merges.push((index, (*m).into())),
            Ok(Item::Proposal(p)) => out.proposals.push((index, (*p).into())),
            Err(r) => out.rejected.push(r),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------------------------
// Merging.

/// What the merge rules ask of storage, inside the one transaction a page is applied in. Every method reads or
/// writes rows as told; none decides.
pub trait PageStore {
    type Error;
    /// The newest sequence number of this relay's feed.
    fn head(&mut self) -> Result<i64, Self::Error>;
    fn thread(&mut self, id: &str) -> Result<Option<ThreadRow>, Self::Error>;
    fn insert_thread(&mut self, t: &ThreadRow) -> Result<(), Self::Error>;
    /// Writes a thread's title, URL, seen times and origin.
    fn update_thread(&mut self, t: &ThreadRow) -> Result<(), Self::Error>;
    /// The forgetting rule every intake path shares (the store's `forget::turn_is_forgotten`).
    fn turn_is_forgotten(&mut self, t: &Arriving<'_>) -> Result<bool, Self::Error>;
    /// Whether a message id has a tombstone.
    fn is_forgotten(&mut self, id: &str) -> Result<bool, Self::Error>;
    /// The stored turn of id `id`, else the one of the thread whose text or a folded rendering has the hash.
    fn stored_turn(
        &mut self,
        id: &str,
        thread_id: &str,
        content_hash: &str,
    ) -> Result<Option<StoredTurn>, Self::Error>;
    /// Replaces a turn's text and keys with `m`'s, keeping the replaced text's hash as a folded rendering.
    fn replace_text(&mut self, pk: i64, m: &MessageRow) -> Result<(), Self::Error>;
    /// Records a rendering folded into turn `pk`; answers whether it is new.
    fn add_rendering(
        &mut self,
        thread_id: &str,
        content_hash: &str,
        pk: i64,
        source_path: &str,
    ) -> Result<bool, Self::Error>;
    /// Inserts a new turn (its renderings are added one by one); returns its row number.
    fn insert_message(&mut self, m: &MessageRow) -> Result<i64, Self::Error>;
    fn set_facts(&mut self, pk: i64, f: &TurnFacts) -> Result<(), Self::Error>;
    /// Numbers the revisions at one position of a thread again, as ingest does.
    fn number_revisions(&mut self, thread_id: &str, position_key: &str) -> Result<(), Self::Error>;
    /// Whether `id` is a message or a tombstone of another thread than `thread_id`.
    fn known_in_other_thread(&mut self, id: &str, thread_id: &str) -> Result<bool, Self::Error>;
    fn tombstone(&mut self, id: &str) -> Result<Option<TombstoneRow>, Self::Error>;
    fn put_tombstone(&mut self, t: &TombstoneRow) -> Result<(), Self::Error>;
    /// Removes every message the tombstones `(id, thread)` name, as forgetting does; returns how many went.
    fn remove_named(&mut self, named: &[(String, String)]) -> Result<u64, Self::Error>;
    fn set_pull_cursor(&mut self, peer_id: &str, cursor: i64) -> Result<(), Self::Error>;
    /// Moves a peer's push cursor to the feed's head if it was at `head_before` or later.
    fn skip_push_cursor(&mut self, peer_id: &str, head_before: i64) -> Result<(), Self::Error>;
    /// A memory version's tier and withdrawal, if stored.
    fn memory_version(&mut self, id: &str) -> Result<Option<StoredVersion>, Self::Error>;
    /// Inserts a memory version with its sources, as given.
    fn insert_memory_version(&mut self, v: &MemoryRow) -> Result<(), Self::Error>;
    /// Blanks a memory version's body and sets its withdrawal time.
    fn withdraw_memory_version(&mut self, id: &str, at: &str) -> Result<(), Self::Error>;
    /// Whether one of `threads` has a turn forgotten here at `at` or later.
    fn forgotten_since(&mut self, threads: &[String], at: &str) -> Result<bool, Self::Error>;
    /// Marks a memory tier due to run again.
    fn mark_memory_due(&mut self, tier: &str) -> Result<(), Self::Error>;
    /// Whether an event of this id, or of its content hash in its minute, is stored.
    fn event_stored(
        &mut self,
        id: &str,
        content_hash: &str,
        bucket: i64,
    ) -> Result<bool, Self::Error>;
    fn insert_event(&mut self, e: &EventSyncRow) -> Result<(), Self::Error>;
    /// The merge candidate `(a, b)` in any state, if stored.
    fn merge_decision(&mut self, a: &str, b: &str) -> Result<Option<MergeRow>, Self::Error>;
    fn put_merge_decision(&mut self, m: &MergeRow) -> Result<(), Self::Error>;
    /// A proposal, with those of `messages` it names here and how many messages it names in all.
    fn proposal(
        &mut self,
        id: &str,
        messages: &[&str],
    ) -> Result<Option<(ProposalRow, u64)>, Self::Error>;
    /// Writes a proposal's state, confidence and decision time, and adds (or raises) the messages given.
    fn put_proposal(&mut self, p: &ProposalRow) -> Result<(), Self::Error>;
    /// Lists an approved proposal for the graph to link here.
    fn settle_proposal(&mut self, id: &str) -> Result<(), Self::Error>;
    /// Lists for linking every approved proposal found in a message that just arrived.
    fn settle_proposals_of(&mut self, message_id: &str) -> Result<(), Self::Error>;
}

impl PageStore for SyncTx<'_> {
    type Error = DbError;
    fn head(&mut self) -> Result<i64, DbError> {
        SyncTx::head(self)
    }
    fn thread(&mut self, id: &str) -> Result<Option<ThreadRow>, DbError> {
        SyncTx::thread(self, id)
    }
    fn insert_thread(&mut self, t: &ThreadRow) -> Result<(), DbError> {
        SyncTx::insert_thread(self, t)
    }
    fn update_thread(&mut self, t: &ThreadRow) -> Result<(), DbError> {
        SyncTx::update_thread(self, t)
    }
    fn turn_is_forgotten(&mut self, t: &Arriving<'_>) -> Result<bool, DbError> {
        SyncTx::turn_is_forgotten(self, t)
    }
    fn is_forgotten(&mut self, id: &str) -> Result<bool, DbError> {
        SyncTx::is_forgotten(self, id)
    }
    fn stored_turn(
        &mut self,
        id: &str,
        thread_id: &str,
        content_hash: &str,
    ) -> Result<Option<StoredTurn>, DbError> {
        SyncTx::stored_turn(self, id, thread_id, content_hash)
    }
    fn replace_text(&mut self, pk: i64, m: &MessageRow) -> Result<(), DbError> {
        SyncTx::replace_text(self, pk, m)
    }
    fn add_rendering(
        &mut self,
        thread_id: &str,
        content_hash: &str,
        pk: i64,
        source_path: &str,
    ) -> Result<bool, DbError> {
        SyncTx::add_rendering(self, thread_id, content_hash, pk, source_path)
    }
    fn insert_message(&mut self, m: &MessageRow) -> Result<i64, DbError> {
        SyncTx::insert_message(self, m)
    }
    fn set_facts(&mut self, pk: i64, f: &TurnFacts) -> Result<(), DbError> {
        SyncTx::set_facts(self, pk, f)
    }
    fn number_revisions(&mut self, thread_id: &str, position_key: &str) -> Result<(), DbError> {
        SyncTx::number_revisions(self, thread_id, position_key)
    }
    fn known_in_other_thread(&mut self, id: &str, thread_id: &str) -> Result<bool, DbError> {
        SyncTx::known_in_other_thread(self, id, thread_id)
    }
    fn tombstone(&mut self, id: &str) -> Result<Option<TombstoneRow>, DbError> {
        SyncTx::tombstone(self, id)
    }
    fn put_tombstone(&mut self, t: &TombstoneRow) -> Result<(), DbError> {
        SyncTx::put_tombstone(self, t)
    }
    fn remove_named(&mut self, named: &[(String, String)]) -> Result<u64, DbError> {
        self.prepare_removal()?;
        for (id, thread) in named {
            self.select_named(id, thread)?;
        }
        let removed = self.remove_selected()?;
        if removed > 0 {
            self.optimize_fts()?;
        }
        Ok(removed)
    }
    fn set_pull_cursor(&mut self, peer_id: &str, cursor: i64) -> Result<(), DbError> {
        SyncTx::set_pull_cursor(self, peer_id, cursor)
    }
    fn skip_push_cursor(&mut self, peer_id: &str, head_before: i64) -> Result<(), DbError> {
        SyncTx::skip_push_cursor(self, peer_id, head_before)
    }
    fn memory_version(&mut self, id: &str) -> Result<Option<StoredVersion>, DbError> {
        SyncTx::memory_version(self, id)
    }
    fn insert_memory_version(&mut self, v: &MemoryRow) -> Result<(), DbError> {
        SyncTx::insert_memory_version(self, v)
    }
    fn withdraw_memory_version(&mut self, id: &str, at: &str) -> Result<(), DbError> {
        SyncTx::withdraw_memory_version(self, id, at)
    }
    fn forgotten_since(&mut self, threads: &[String], at: &str) -> Result<bool, DbError> {
        SyncTx::forgotten_since(self, threads, at)
    }
    fn mark_memory_due(&mut self, tier: &str) -> Result<(), DbError> {
        SyncTx::mark_memory_due(self, tier)
    }
    fn event_stored(&mut self, id: &str, content_hash: &str, bucket: i64) -> Result<bool, DbError> {
        SyncTx::event_stored(self, id, content_hash, bucket)
    }
    fn insert_event(&mut self, e: &EventSyncRow) -> Result<(), DbError> {
        SyncTx::insert_event(self, e)
    }
    fn merge_decision(&mut self, a: &str, b: &str) -> Result<Option<MergeRow>, DbError> {
        SyncTx::merge_decision(self, a, b)
    }
    fn put_merge_decision(&mut self, m: &MergeRow) -> Result<(), DbError> {
        SyncTx::put_merge_decision(self, m)
    }
    fn proposal(
        &mut self,
        id: &str,
        messages: &[&str],
    ) -> Result<Option<(ProposalRow, u64)>, DbError> {
        SyncTx::proposal(self, id, messages)
    }
    fn put_proposal(&mut self, p: &ProposalRow) -> Result<(), DbError> {
        SyncTx::put_proposal(self, p)
    }
    fn settle_proposal(&mut self, id: &str) -> Result<(), DbError> {
        SyncTx::settle_proposal(self, id)
    }
    fn settle_proposals_of(&mut self, message_id: &str) -> Result<(), DbError> {
        SyncTx::settle_proposals_of(self, message_id)
    }
}

/// A thread as stored here merged with a peer's sighting of it: the earlier first-seen time, the later last-seen
/// time, the title and URL of the later sighting (of the greater value at the same time; a missing one never
/// replaces a known one), and the smaller origin. `None` when nothing changes.
pub fn merge_thread(local: &ThreadRow, seen: &ThreadRow) -> Option<ThreadRow> {
    let theirs_win = |mine: &Option<String>, theirs: &Option<String>| match (mine, theirs) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(a), Some(b)) => {
            seen.last_seen_at > local.last_seen_at
                || (seen.last_seen_at == local.last_seen_at && b > a)
        }
    };
    let pick = |mine: &Option<String>, theirs: &Option<String>| {
        if theirs_win(mine, theirs) {
            theirs.clone()
        } else {
            mine.clone()
        }
    };
    let (origin_device, origin_seq) = std::cmp::min(
        (&local.origin_device, local.origin_seq),
        (&seen.origin_device, seen.origin_seq),
    );
    let merged = ThreadRow {
        title: pick(&local.title, &seen.title),
        url: pick(&local.url, &seen.url),
        first_seen_at: std::cmp::min(&local.first_seen_at, &seen.first_seen_at).clone(),
        last_seen_at: std::cmp::max(&local.last_seen_at, &seen.last_seen_at).clone(),
        origin_device: origin_device.clone(),
        origin_seq,
        ..local.clone()
    };
    (merged != *local).then_some(merged)
}

/// The order-free facts of a turn merged with a peer's: the earliest capture, the first known occurrence time,
/// the smallest origin. `None` when nothing changes.
pub fn merge_facts(local: &TurnFacts, theirs: &TurnFacts) -> Option<TurnFacts> {
    let (origin_device, origin_seq) = std::cmp::min(
        (&local.origin_device, local.origin_seq),
        (&theirs.origin_device, theirs.origin_seq),
    );
    let merged = TurnFacts {
        captured_at: std::cmp::min(&local.captured_at, &theirs.captured_at).clone(),
        occurred_at: local.occurred_at.clone().or(theirs.occurred_at.clone()),
        origin_device: origin_device.clone(),
        origin_seq,
    };
    (merged != *local).then_some(merged)
}

/// A memory version's withdrawal merged with a peer's: withdrawn when either says so, at the earlier time.
/// `None` when nothing changes here.
pub fn merge_withdrawal(local: Option<&str>, theirs: Option<&str>) -> Option<String> {
    let merged = match (local, theirs) {
        (Some(a), Some(b)) => Some(std::cmp::min(a, b)),
        (a, b) => a.or(b),
    };
    (merged != local)
        .then(|| merged.map(str::to_owned))
        .flatten()
}

/// Whether an incoming rendering replaces the stored one of the same turn: the higher `(rank, hash)` wins, so
/// the kept text does not depend on arrival order.
pub fn incoming_wins(stored: &StoredTurn, incoming: &MessageRow) -> bool {
    (incoming.source_rank, incoming.content_hash.as_str())
        > (stored.source_rank, stored.content_hash.as_str())
}

/// The stored turn's row after a winning rendering replaces it: the incoming text, and the incoming site id,
/// parent, ordinal, position and tool calls where it has them; the first known occurrence time stays.
fn upgraded(stored: &StoredTurn, m: &MessageRow) -> MessageRow {
    MessageRow {
        message_key: m.message_key.clone().or(stored.message_key.clone()),
        parent_key: m.parent_key.clone().or(stored.parent_key.clone()),
        ordinal: m.ordinal.or(stored.ordinal),
        position_key: m.position_key.clone().or(stored.position_key.clone()),
        occurred_at: stored.occurred_at.clone().or(m.occurred_at.clone()),
        tool_calls: m.tool_calls.clone().or(stored.tool_calls.clone()),
        ..m.clone()
    }
}

fn facts_of(m: &MessageRow) -> TurnFacts {
    TurnFacts {
        captured_at: m.captured_at.clone(),
        occurred_at: m.occurred_at.clone(),
        origin_device: m.origin_device.clone(),
        origin_seq: m.origin_seq,
    }
}

/// Applies a peer's page in one transaction (see the module docs); with `source.pull_cursor`, the peer's pull
/// cursor moves to it in the same transaction. Items are checked one by one; rejected ones are listed.
pub fn apply_page(
    conn: &mut Connection,
    items: &[Value],
    source: Source<'_>,
    now: OffsetDateTime,
) -> Result<Applied, DbError> {
    let checked = check_items(items);
    let forgets = !checked.tombstones.is_empty();
    let now_s = personkit_store::clock::fmt_time(now);
    store::apply_in_transaction(conn, forgets, now, |tx| {
        merge_page(tx, checked, source, &now_s)
    })
}

/// The merge rules over a checked page, through `store`.
fn merge_page<S: PageStore>(
    store: &mut S,
    page: Checked,
    source: Source<'_>,
    now: &str,
) -> Result<Applied, S::Error> {
    let Checked {
        threads,
        messages,
        tombstones,
        memories,
        events,
        merges,
        proposals,
        rejected,
    } = page;
    let mut out = Applied {
        rejected,
        ..Applied::default()
    };
    // Tombstones first: a message of this page that one of them names is then refused like any other.
    if !tombstones.is_empty() {
        let page_messages: HashMap<&str, &str> = messages
            .iter()
            .map(|(_, m)| (m.id.as_str(), m.thread_id.as_str()))
            .collect();
        out.removed += apply_tombstones(store, &tombstones, &page_messages, &mut out)?;
    }
    let head_before = store.head()?;
    let mut merged = false;
    for t in threads.values() {
        if merge_thread_into(store, t)? {
            out.stored += 1;
            merged = true;
        }
    }
    let mut positions: BTreeSet<(String, String)> = BTreeSet::new();
    for (index, m) in &messages {
        let outcome = apply_message(store, m, &threads, &mut positions)?;
        merged |= out.count(outcome, *index);
    }
    for (thread, pos) in &positions {
        store.number_revisions(thread, pos)?;
    }
    // After the tombstones, so a version that drew on a thread this page forgets is withdrawn on arrival.
    for (index, v) in &memories {
        let outcome = apply_memory(store, v, now)?;
        merged |= out.count(outcome, *index);
    }
    for (index, e) in &events {
        let outcome = if store.event_stored(&e.id, &e.content_hash, e.minute_bucket)? {
            Outcome::Unchanged
        } else {
            store.insert_event(e)?;
            Outcome::Inserted
        };
        merged |= out.count(outcome, *index);
    }
    for (index, m) in &merges {
        let outcome = apply_merge_decision(store, m)?;
        merged |= out.count(outcome, *index);
    }
    // After the tombstones and messages: a proposal's forgotten messages are left out, and an approved one is
    // linked to the messages that are here.
    for (index, p) in &proposals {
        let outcome = apply_proposal(store, p)?;
        merged |= out.count(outcome, *index);
    }
    if let Some(cursor) = source.pull_cursor {
        store.set_pull_cursor(source.peer_id, cursor)?;
        // What this page added is the peer's own state: when nothing was merged and the peer had everything
        // before it, the push cursor skips it instead of sending the page back.
        if !merged {
            store.skip_push_cursor(source.peer_id, head_before)?;
        }
    }
    Ok(out)
}

/// Stores the tombstones (the earliest forget time wins) and removes what they name: a message by its id, or by
/// the site's id (`key:` tombstones), or by its words (`words:` tombstones). A tombstone whose id is known in
/// another thread (a message here or in the page, or a tombstone here) is rejected: it would delete or block a
/// turn of a thread it does not name. Returns how many messages went.
fn apply_tombstones<S: PageStore>(
    store: &mut S,
    tombstones: &[(usize, TombstoneRow)],
    page_messages: &HashMap<&str, &str>,
    out: &mut Applied,
) -> Result<u64, S::Error> {
    let mut named = Vec::with_capacity(tombstones.len());
    for (index, t) in tombstones {
        let in_page = page_messages
            .get(t.id.as_str())
            .is_some_and(|thread| *thread != t.thread_id);
        if in_page || store.known_in_other_thread(&t.id, &t.thread_id)? {
            out.rejected.push(reject(
                *index,
                "tombstone_thread_mismatch",
                "the tombstone's id belongs to another thread here than its thread_id",
            ));
            continue;
        }
        let newer = match store.tombstone(&t.id)? {
            None => true,
            Some(stored) => t.forgotten_at < stored.forgotten_at,
        };
        if newer {
            store.put_tombstone(t)?;
            out.stored += 1;
        } else {
            out.unchanged += 1;
        }
        named.push((t.id.clone(), t.thread_id.clone()));
    }
    store.remove_named(&named)
}

/// Merges a peer's sighting into the stored thread (a thread row is created with its first message, in
/// [`apply_message`]); answers whether a value changed.
fn merge_thread_into<S: PageStore>(store: &mut S, t: &ThreadRow) -> Result<bool, S::Error> {
    let Some(local) = store.thread(&t.id)? else {
        return Ok(false);
    };
    match merge_thread(&local, t) {
        Some(merged) => {
            store.update_thread(&merged)?;
            Ok(true)
        }
        None => Ok(false),
    }
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

/// Merges a peer's memory version: a new one is stored with its sources (withdrawn, and its tier due, when it
/// drew on a thread with a turn forgotten here since it was made); a known one only ever gains a withdrawal.
fn apply_memory<S: PageStore>(
    store: &mut S,
    v: &MemoryRow,
    now: &str,
) -> Result<Outcome, S::Error> {
    let Some(local) = store.memory_version(&v.id)? else {
        if v.withdrawn_at.is_none() && store.forgotten_since(&v.sources, &v.created_at)? {
            let withdrawn = MemoryRow {
                body: String::new(),
                withdrawn_at: Some(now.to_owned()),
                ..v.clone()
            };
            store.insert_memory_version(&withdrawn)?;
            store.mark_memory_due(&v.tier)?;
            return Ok(Outcome::Stored);
        }
        store.insert_memory_version(v)?;
        return Ok(Outcome::Inserted);
    };
    if local.tier != v.tier {
        return Ok(Outcome::Rejected(
            "id_mismatch",
            "a version of this id is stored here with another tier".into(),
        ));
    }
    let Some(at) = merge_withdrawal(local.withdrawn_at.as_deref(), v.withdrawn_at.as_deref())
    else {
        return Ok(Outcome::Unchanged);
    };
    store.withdraw_memory_version(&v.id, &at)?;
    if local.withdrawn_at.is_none() {
        store.mark_memory_due(&v.tier)?;
    }
    // The peer's own withdrawal is no news to it; an earlier one of this relay's is.
    Ok(if v.withdrawn_at.as_deref() == Some(at.as_str()) {
        Outcome::Inserted
    } else {
        Outcome::Stored
    })
}

/// How far a decision went: a merge over a dismissal over a proposal; an approval over a rejection over a
/// proposal. What a user did is never undone by what another relay had not done yet.
fn decision_rank(state: &str) -> u8 {
    match state {
        "merged" | "approved" => 2,
        "dismissed" | "rejected" => 1,
        _ => 0,
    }
}

/// Two relays' readings of one decision: the further state; at the same state the earlier decision time and,
/// for two merges, the smaller kept id (two opposite merges of one pair made before either relay heard of the
/// other end up keeping the same entity in the record).
pub fn merge_decisions(local: &MergeRow, theirs: &MergeRow) -> MergeRow {
    match decision_rank(&theirs.state).cmp(&decision_rank(&local.state)) {
        std::cmp::Ordering::Greater => theirs.clone(),
        std::cmp::Ordering::Less => local.clone(),
        std::cmp::Ordering::Equal => MergeRow {
            kept: least(&local.kept, &theirs.kept),
            decided_at: least(&local.decided_at, &theirs.decided_at),
            ..local.clone()
        },
    }
}

/// The smaller of two values either may lack (times in the stored form compare as text).
fn least(a: &Option<String>, b: &Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(std::cmp::min(a, b).clone()),
        (a, b) => a.clone().or(b.clone()),
    }
}

fn apply_merge_decision<S: PageStore>(store: &mut S, m: &MergeRow) -> Result<Outcome, S::Error> {
    let merged = match store.merge_decision(&m.a, &m.b)? {
        None => m.clone(),
        Some(local) => {
            if local.kind != m.kind {
                return Ok(Outcome::Rejected(
                    "id_mismatch",
                    "a pair of these ids is stored here with another kind".into(),
                ));
            }
            let merged = merge_decisions(&local, m);
            if merged == local {
                return Ok(Outcome::Unchanged);
            }
            merged
        }
    };
    store.put_merge_decision(&merged)?;
    let theirs =
        merged.state == m.state && merged.kept == m.kept && merged.decided_at == m.decided_at;
    Ok(if theirs {
        Outcome::Inserted
    } else {
        Outcome::Stored
    })
}

/// A peer's proposal merged into the one stored here: the messages forgotten here are left out (a proposal left
/// with none is not stored), the rest joins the stored ones (the higher confidence kept); the state is the
/// further decision ([`decision_rank`]), at the earlier time when both made it. An approval, or a message more
/// for an approved one, lists the proposal for the graph to link.
fn apply_proposal<S: PageStore>(store: &mut S, p: &ProposalRow) -> Result<Outcome, S::Error> {
    let mut kept = Vec::with_capacity(p.sources.len());
    for s in &p.sources {
        if !store.is_forgotten(&s.message_id)? {
            kept.push(s.clone());
        }
    }
    let sent: Vec<&str> = p.sources.iter().map(|s| s.message_id.as_str()).collect();
    // Only the sent messages are read back (one key each), so the work is the item's size, whatever the stored
    // proposal's.
    let Some((local, stored_sources)) = store.proposal(&p.id, &sent)? else {
        if kept.is_empty() {
            return Ok(Outcome::Forgotten);
        }
        let row = ProposalRow {
            sources: kept,
            ..p.clone()
        };
        store.put_proposal(&row)?;
        if row.state == "approved" {
            store.settle_proposal(&row.id)?;
        }
        return Ok(Outcome::Inserted);
    };
    let (state, decided_at) = match decision_rank(&p.state).cmp(&decision_rank(&local.state)) {
        std::cmp::Ordering::Greater => (p.state.clone(), p.decided_at.clone()),
        std::cmp::Ordering::Less => (local.state.clone(), local.decided_at.clone()),
        std::cmp::Ordering::Equal => (local.state.clone(), least(&local.decided_at, &p.decided_at)),
    };
    let known: HashMap<&str, f64> = local
        .sources
        .iter()
        .map(|s| (s.message_id.as_str(), s.confidence))
        .collect();
    let news: Vec<ProposalSourceRow> = kept
        .into_iter()
        .filter(|s| {
            known
                .get(s.message_id.as_str())
                .is_none_or(|c| s.confidence > *c)
        })
        .collect();
    let row = ProposalRow {
        confidence: local.confidence.max(p.confidence),
        state,
        decided_at,
        sources: news,
        ..local.clone()
    };
    let changed = row.state != local.state
        || row.decided_at != local.decided_at
        || row.confidence != local.confidence
        || !row.sources.is_empty();
    if !changed {
        return Ok(Outcome::Unchanged);
    }
    store.put_proposal(&row)?;
    if row.state == "approved" && (local.state != "approved" || !row.sources.is_empty()) {
        store.settle_proposal(&row.id)?;
    }
    // The peer's reading is news to it when this relay's decision won or it held messages the peer lacks.
    // `local.sources` are the stored ones among those sent: any other stored message is one the peer lacks.
    let theirs = row.state == p.state
        && row.decided_at == p.decided_at
        && row.confidence == p.confidence
        && stored_sources == local.sources.len() as u64;
    Ok(if theirs {
        Outcome::Inserted
    } else {
        Outcome::Stored
    })
}

fn apply_message<S: PageStore>(
    store: &mut S,
    m: &MessageRow,
    threads: &HashMap<String, ThreadRow>,
    positions: &mut BTreeSet<(String, String)>,
) -> Result<Outcome, S::Error> {
    let role = Role::parse(&m.role).unwrap_or(Role::User);
    if store.turn_is_forgotten(&Arriving {
        thread_id: &m.thread_id,
        message_id: &m.id,
        key: m.message_key.as_deref(),
        role,
        content: &m.content,
    })? {
        return Ok(Outcome::Forgotten);
    }
    let mut changed = false;
    let mut inserted = false;
    // The same turn here: by id, else by its text or a folded rendering of it (a turn another order of
    // renderings named differently).
    let pk = match store.stored_turn(&m.id, &m.thread_id, &m.content_hash)? {
        Some(stored) => {
            let mut facts = TurnFacts {
                captured_at: stored.captured_at.clone(),
                occurred_at: stored.occurred_at.clone(),
                origin_device: stored.origin_device.clone(),
                origin_seq: stored.origin_seq,
            };
            let mut position = stored.position_key.clone();
            if incoming_wins(&stored, m) {
                // The incoming rendering wins: the stored text is folded under it, as ingest's upgrade does.
                let row = upgraded(&stored, m);
                store.replace_text(stored.pk, &row)?;
                if let Some(p) = &stored.position_key {
                    positions.insert((m.thread_id.clone(), p.clone()));
                }
                facts.occurred_at = row.occurred_at.clone();
                position = row.position_key;
                changed = true;
            } else if stored.content_hash != m.content_hash {
                // The stored rendering wins: the incoming one is folded under it.
                changed |= store.add_rendering(
                    &m.thread_id,
                    &m.content_hash,
                    stored.pk,
                    &m.source_path,
                )?;
            }
            if let Some(merged) = merge_facts(&facts, &facts_of(m)) {
                store.set_facts(stored.pk, &merged)?;
                changed = true;
                if let Some(p) = position {
                    positions.insert((m.thread_id.clone(), p));
                }
            }
            stored.pk
        }
        None => {
            if store.thread(&m.thread_id)?.is_none() {
                let Some(t) = threads.get(&m.thread_id) else {
                    return Ok(Outcome::Rejected(
                        "unknown_thread",
                        "the page holds a message of a thread it does not carry".into(),
                    ));
                };
                store.insert_thread(t)?;
            }
            inserted = true;
            let pk = store.insert_message(m)?;
            store.settle_proposals_of(&m.id)?;
            pk
        }
    };
    let thread = uuid::Uuid::parse_str(&m.thread_id).unwrap_or_default();
    for r in &m.renderings {
        if r.content_hash == m.content_hash {
            continue;
        }
        let rid = ids::message_id(&thread, &r.content_hash)
            .hyphenated()
            .to_string();
        if store.is_forgotten(&rid)? {
            continue;
        }
        changed |= store.add_rendering(&m.thread_id, &r.content_hash, pk, &r.source_path)?;
    }
    if let Some(p) = &m.position_key {
        positions.insert((m.thread_id.clone(), p.clone()));
    }
    if let Some(t) = threads.get(&m.thread_id) {
        changed |= merge_thread_into(store, t)?;
    }
    Ok(if changed {
        Outcome::Stored
    } else if inserted {
        Outcome::Inserted
    } else {
        Outcome::Unchanged
    })
}

#[cfg(test)]
#[path = "pages/tests.rs"]
mod tests;
