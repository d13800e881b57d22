//! The read layer every reader of the corpus shares — the MCP tools now, the read API and dashboard later: list
//! threads (filters, newest activity first, cursor paging), one thread's turns in order (the current revision
//! of each position and its other revisions, paged), one message, and per-surface capture state with the reason
//! for its colour. [`compact`] renders listings one line per record for readers that pay per character (LLMs).
//!
//! Times given to these functions are already in the stored form ([`crate::clock::fmt_time`]); callers parse
//! what people type (RFC 3339, dates, spans) before calling. Ids may be given in full or as a unique prefix of
//! at least [`MIN_ID_PREFIX`] characters, as compact listings show them.

use rusqlite::{Connection, OptionalExtension, params};
use schemars::JsonSchema;
use serde::Serialize;
use time::OffsetDateTime;

use crate::clock::fmt_time;
use crate::db::DbError;
use crate::health::{self, Status};
use corpus::fts_query;

pub mod activity;
pub mod corpus;

/// Most records one page may hold.
pub const MAX_PAGE: u32 = 200;
/// Shortest id prefix accepted in place of a full id (and the length compact lines show).
pub const MIN_ID_PREFIX: usize = 8;

/// Errors of the read layer that the caller should show to the person (or model) that asked.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<rusqlite::Error> for ReadError {
    fn from(e: rusqlite::Error) -> Self {
        ReadError::Db(DbError::Sqlite(e))
    }
}

/// Which threads [`list_threads`] returns.
#[derive(Debug, Clone, Default)]
pub struct ThreadFilter {
    pub surface: Option<String>,
    /// Inclusive lower bound on the thread's last activity (stored time form).
    pub since: Option<String>,
    /// Exclusive upper bound on the thread's last activity.
    pub until: Option<String>,
    /// Words that must all occur in the title or all in one current message.
    pub words: Option<String>,
    /// Only threads of this heat tier (a thread never used has no heat row and is cold).
    pub tier: Option<crate::heat::Tier>,
}

/// One thread as listings show it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ThreadSummary {
    pub id: String,
    pub surface: String,
    pub conversation_id: String,
    pub title: Option<String>,
    /// The original conversation's address, when the capture reported one.
    pub url: Option<String>,
    pub first_seen_at: String,
    /// Last activity: the newest capture of any of its turns.
    pub last_seen_at: String,
    /// Turns (positions with a current revision).
    pub turns: u64,
    /// Whether turns are known to be missing (see [`Completeness`]).
    pub completeness: Completeness,
}

/// What the corpus can say about turns of a thread that were never captured.
///
/// Sites that number their turns (an ordinal attribute in the page, counted from 0) let the relay see holes:
/// with the newest numbered turn at position `n`, a complete thread holds `n + 1` turns, and every position
/// short of that is a turn the page showed numbered but no capture delivered (a virtualised list scrolled past,
/// a tab closed mid-stream). Sites that do not number turns give nothing to check against (`unknown`). Separately,
/// when a device reported that the extension stopped reading the site's pages (`adapter_stale`, `POST
/// /v1/me/capture-reports`), turns since that time may be missing from any thread of the site.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Completeness {
    /// `complete` (every numbered position up to the newest is there), `gaps` (`missing` positions are not),
    /// or `unknown` (the site does not number its turns).
    pub state: CompletenessState,
    /// Turns known to be missing (0 unless `gaps`).
    pub missing: u64,
    /// Set while a device reports the site's adapter stale: the earliest time since which its pages were not
    /// read (stored time form).
    pub adapter_stale_since: Option<String>,
}

/// See [`Completeness::state`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompletenessState {
    Complete,
    Gaps,
    Unknown,
}

impl CompletenessState {
    pub fn as_str(self) -> &'static str {
        match self {
            CompletenessState::Complete => "complete",
            CompletenessState::Gaps => "gaps",
            CompletenessState::Unknown => "unknown",
        }
    }
}

impl Completeness {
    /// From a thread's current turns: how many there are, and the highest ordinal among them (if any has one).
    fn from_counts(
        turns: u64,
        max_ordinal: Option<i64>,
        stale_since: Option<String>,
    ) -> Completeness {
        let (state, missing) = match max_ordinal.and_then(|m| u64::try_from(m).ok()) {
            None => (CompletenessState::Unknown, 0),
            Some(max) => {
                let missing = max.saturating_add(1).saturating_sub(turns);
                if missing == 0 {
                    (CompletenessState::Complete, 0)
                } else {
                    (CompletenessState::Gaps, missing)
                }
            }
        };
        Completeness {
            state,
            missing,
            adapter_stale_since: stale_since,
        }
    }
}

/// `{total, limit, has_more}` plus the cursor of the next page.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PageInfo {
    /// Records matching the filters, on every page.
    pub total: u64,
    pub limit: u32,
    pub has_more: bool,
    /// Pass as `cursor` to get the next page.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ThreadList {
    pub threads: Vec<ThreadSummary>,
    pub page: PageInfo,
}

fn check_limit(limit: u32) -> Result<u32, ReadError> {
    if limit == 0 || limit > MAX_PAGE {
        return Err(ReadError::BadRequest(format!(
            "limit must be between 1 and {MAX_PAGE}"
        )));
    }
    Ok(limit)
}

/// Thread-list cursor: `<last_seen_at>/<id>` of the last thread of the previous page.
fn parse_thread_cursor(c: &str) -> Result<(String, String), ReadError> {
    c.split_once('/')
        .filter(|(t, id)| crate::clock::normalize_time(t).as_deref() == Some(*t) && !id.is_empty())
        .map(|(t, id)| (t.to_owned(), id.to_owned()))
        .ok_or_else(|| {
            ReadError::BadRequest(format!(
                "cursor {:?} is not one this listing gave out; pass next_cursor from the previous page, or omit it",
                crate::clock::normalize_time(c).unwrap_or_else(|| c.chars().take(60).collect())
            ))
        })
}

/// A thread's columns; the turn count and highest ordinal come from one pass over its current turns (as a
/// JSON pair, since a scalar subquery yields one value), the adapter report from `capture_reports`.
const THREAD_COLUMNS: &str =
    "t.id, t.surface, t.conversation_id, t.title, t.url, t.first_seen_at, t.last_seen_at,
    (SELECT json_array(count(*), max(m.ordinal)) FROM messages m WHERE m.thread_id = t.id AND m.is_current = 1),
    (SELECT min(r.stale_since) FROM capture_reports r WHERE r.surface = t.surface)";

fn thread_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ThreadSummary> {
    let counts: String = r.get(7)?;
    let (turns, max_ordinal) =
        serde_json::from_str::<(u64, Option<i64>)>(&counts).unwrap_or((0, None));
    Ok(ThreadSummary {
        id: r.get(0)?,
        surface: r.get(1)?,
        conversation_id: r.get(2)?,
        title: r.get(3)?,
        url: r.get(4)?,
        first_seen_at: r.get(5)?,
        last_seen_at: r.get(6)?,
        turns,
        completeness: Completeness::from_counts(turns, max_ordinal, r.get(8)?),
    })
}

/// Threads matching `filter`, most recent activity first, `limit` per page after `cursor`.
pub fn list_threads(
    conn: &Connection,
    filter: &ThreadFilter,
    limit: u32,
    cursor: Option<&str>,
) -> Result<ThreadList, ReadError> {
    let limit = check_limit(limit)?;
    let after = cursor.map(parse_thread_cursor).transpose()?;
    if let Some(w) = filter.words.as_deref() {
        crate::budget::check_query_text(w)
            .map_err(|e| ReadError::BadRequest(format!("words: {e}; {}", e.hint())))?;
    }
    let words = match filter.words.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(w) => Some(fts_query(w).ok_or_else(|| {
            ReadError::BadRequest(format!("words {w:?} has nothing to search for"))
        })?),
    };
    // The title test: every word, case-insensitively, as a substring.
    let title_words: Vec<String> = filter
        .words
        .as_deref()
        .unwrap_or("")
        .split_whitespace()
        .map(|w| format!("%{}%", w.replace(['%', '_'], "")))
        .collect();
    let title_words = serde_json::to_string(&title_words).unwrap_or_else(|_| "[]".into());
    let where_sql = "(?1 IS NULL OR t.surface = ?1)
        AND (?2 IS NULL OR t.last_seen_at >= ?2)
        AND (?3 IS NULL OR t.last_seen_at < ?3)
        AND (?4 IS NULL
             OR t.id IN (SELECT m.thread_id FROM messages_fts JOIN messages m ON m.pk = messages_fts.rowid
                         WHERE messages_fts MATCH ?4 AND m.is_current = 1)
             OR (t.title IS NOT NULL AND NOT EXISTS (SELECT 1 FROM json_each(?5) w WHERE t.title NOT LIKE w.value)))
        AND (?9 IS NULL
             OR (?9 <> 'cold' AND t.id IN (SELECT record_id FROM heat WHERE kind = 'thread' AND tier = ?9))
             OR (?9 = 'cold' AND t.id NOT IN (SELECT record_id FROM heat WHERE kind = 'thread' AND tier <> 'cold')))";
    let tier = filter.tier.map(crate::heat::Tier::as_str);
    let total: u64 = conn.query_row(
        &format!("SELECT count(*) FROM threads t WHERE {where_sql}"),
        params![
            filter.surface,
            filter.since,
            filter.until,
            words,
            title_words,
            None::<String>,
            None::<String>,
            None::<i64>,
            tier
        ],
        |r| r.get(0),
    )?;
    let (after_t, after_id) = after.unzip();
    // The page's ids are chosen first, so the per-thread columns (a pass over each thread's turns) are computed
    // for the page only, not for every thread the sort looks at.
    let sql = format!(
        "SELECT {THREAD_COLUMNS} FROM (
            SELECT t.id FROM threads t WHERE {where_sql}
              AND (?6 IS NULL OR t.last_seen_at < ?6 OR (t.last_seen_at = ?6 AND t.id < ?7))
            ORDER BY t.last_seen_at DESC, t.id DESC LIMIT ?8
         ) page JOIN threads t ON t.id = page.id
         ORDER BY t.last_seen_at DESC, t.id DESC"
    );
    let mut threads: Vec<ThreadSummary> = conn
        .prepare_cached(&sql)?
        .query_map(
            params![
                filter.surface,
                filter.since,
                filter.until,
                words,
                title_words,
                after_t,
                after_id,
                i64::from(limit) + 1,
                tier
            ],
            thread_row,
        )?
        .collect::<Result<_, _>>()?;
    let has_more = threads.len() > limit as usize;
    threads.truncate(limit as usize);
    let next_cursor = has_more
        .then(|| {
            threads
                .last()
                .map(|t| format!("{}/{}", t.last_seen_at, t.id))
        })
        .flatten();
    Ok(ThreadList {
        threads,
        page: PageInfo {
            total,
            limit,
            has_more,
            next_cursor,
        },
    })
}

/// The full id of a thread given its id or a unique prefix of it.
pub fn resolve_thread_id(conn: &Connection, given: &str) -> Result<String, ReadError> {
    resolve_id(conn, "threads", "thread", given)
}

/// Resolves a full id or a unique prefix (≥ [`MIN_ID_PREFIX`] characters) in `table` (`threads` or `messages`).
fn resolve_id(
    conn: &Connection,
    table: &str,
    what: &str,
    given: &str,
) -> Result<String, ReadError> {
    let given = given.trim();
    let exact: Option<String> = conn
        .prepare_cached(&format!("SELECT id FROM {table} WHERE id = ?1"))?
        .query_row([given], |r| r.get(0))
        .optional()?;
    if let Some(id) = exact {
        return Ok(id);
    }
    let valid = given.len() >= MIN_ID_PREFIX
        && given.len() <= 36
        && given.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    if !valid {
        return Err(ReadError::NotFound(format!(
            "no {what} has id {:?}; give a full id or at least {MIN_ID_PREFIX} characters of one",
            given.chars().take(60).collect::<String>()
        )));
    }
    let like = format!("{}%", given.to_ascii_lowercase());
    let found: Vec<String> = conn
        .prepare_cached(&format!("SELECT id FROM {table} WHERE id LIKE ?1 LIMIT 2"))?
        .query_map([like], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(ReadError::NotFound(format!(
            "no {what} has an id starting {given:?}"
        ))),
        _ => Err(ReadError::BadRequest(format!(
            "{given:?} starts the ids of several {what}s; give more of the id"
        ))),
    }
}

/// An earlier (or later, on another branch) content at the same position as a turn's current one.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Revision {
    pub id: String,
    /// 1.. in capture order; the highest is current.
    pub revision: u32,
    pub captured_at: String,
    pub content: String,
}

/// One turn of a thread: its current content and, unless only current revisions were asked for, the others.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Turn {
    /// 1-based place in the thread.
    pub index: u64,
    pub id: String,
    pub role: String,
    pub content: String,
    /// `occurred_at` when the surface reported it, else `captured_at`.
    pub time: String,
    pub revision: u32,
    /// Other revisions at this position (edits, regenerations), oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub revisions: Vec<Revision>,
}

#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ThreadDetail {
    pub thread: ThreadSummary,
    pub turns: Vec<Turn>,
    pub page: PageInfo,
}

/// Turn-page cursor: the 1-based index of the first turn of the next page.
fn parse_turn_cursor(c: &str) -> Result<u64, ReadError> {
    c.parse::<u64>().ok().filter(|n| *n >= 1).ok_or_else(|| {
        ReadError::BadRequest(format!(
            "cursor {:?} is not a turn cursor; pass next_cursor from the previous page, or omit it",
            c.chars().take(60).collect::<String>()
        ))
    })
}

/// A thread's turns in turn order ([`crate::order`]), `limit` per page from `cursor`.
pub fn get_thread(
    conn: &Connection,
    id: &str,
    current_only: bool,
    limit: u32,
    cursor: Option<&str>,
) -> Result<ThreadDetail, ReadError> {
    let limit = check_limit(limit)?;
    let from = cursor.map(parse_turn_cursor).transpose()?.unwrap_or(1);
    let id = resolve_id(conn, "threads", "thread", id)?;
    let thread = conn
        .prepare_cached(&format!(
            "SELECT {THREAD_COLUMNS} FROM threads t WHERE t.id = ?1"
        ))?
        .query_row([&id], thread_row)?;
    let mut turns = turns_in_order(conn, &id, current_only, i64::from(limit) + 1, from)?;
    let has_more = turns.len() > limit as usize;
    turns.truncate(limit as usize);
    let next_cursor = has_more.then(|| (from + turns.len() as u64).to_string());
    Ok(ThreadDetail {
        page: PageInfo {
            total: thread.turns,
            limit,
            has_more,
            next_cursor,
        },
        thread,
        turns,
    })
}

/// Up to `limit` (negative: all) current turns of thread `id` in order, from the 1-based turn `from`, each with
/// its other revisions unless `current_only`. The one reading of a thread's turns: pages, export and snapshots.
pub fn turns_in_order(
    conn: &Connection,
    id: &str,
    current_only: bool,
    limit: i64,
    from: u64,
) -> Result<Vec<Turn>, DbError> {
    let rows: Vec<(String, String, String, String, u32, Option<String>)> = conn
        .prepare_cached(concat!(
            "SELECT id, role, content, COALESCE(occurred_at, captured_at), revision, position_key
             FROM messages WHERE thread_id = ?1 AND is_current = 1 ",
            crate::order::order_by!("messages"),
            " LIMIT ?2 OFFSET ?3",
        ))?
        .query_map(params![id, limit, from.saturating_sub(1) as i64], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?
        .collect::<Result<_, _>>()?;
    let mut turns = Vec::with_capacity(rows.len());
    let mut others = conn.prepare_cached(
        "SELECT id, revision, captured_at, content FROM messages
         WHERE thread_id = ?1 AND position_key = ?2 AND is_current = 0 ORDER BY revision",
    )?;
    for (i, (mid, role, content, time, revision, pos)) in rows.into_iter().enumerate() {
        let revisions = match (&pos, current_only) {
            (Some(pos), false) => others
                .query_map(params![id, pos], |r| {
                    Ok(Revision {
                        id: r.get(0)?,
                        revision: r.get(1)?,
                        captured_at: r.get(2)?,
                        content: r.get(3)?,
                    })
                })?
                .collect::<Result<_, _>>()?,
            _ => Vec::new(),
        };
        turns.push(Turn {
            index: from + i as u64,
            id: mid,
            role,
            content,
            time,
            revision,
            revisions,
        });
    }
    Ok(turns)
}

/// One message with its thread's context.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct MessageDetail {
    pub id: String,
    pub thread_id: String,
    pub thread_title: Option<String>,
    pub surface: String,
    pub url: Option<String>,
    pub role: String,
    pub content: String,
    pub occurred_at: Option<String>,
    pub captured_at: String,
    pub revision: u32,
    pub is_current: bool,
    /// Contents stored at this message's position, this one included.
    pub revisions_at_position: u32,
}

/// One message by id (or unique prefix), any revision.
pub fn get_message(conn: &Connection, id: &str) -> Result<MessageDetail, ReadError> {
    let id = resolve_id(conn, "messages", "message", id)?;
    Ok(conn
        .prepare_cached(
            "SELECT m.id, m.thread_id, t.title, t.surface, t.url, m.role, m.content, m.occurred_at, m.captured_at,
                m.revision, m.is_current,
                CASE WHEN m.position_key IS NULL THEN 1 ELSE
                  (SELECT count(*) FROM messages o WHERE o.thread_id = m.thread_id AND o.position_key = m.position_key)
                END
             FROM messages m JOIN threads t ON t.id = m.thread_id WHERE m.id = ?1",
        )?
        .query_row([&id], |r| {
            Ok(MessageDetail {
                id: r.get(0)?,
                thread_id: r.get(1)?,
                thread_title: r.get(2)?,
                surface: r.get(3)?,
                url: r.get(4)?,
                role: r.get(5)?,
                content: r.get(6)?,
                occurred_at: r.get(7)?,
                captured_at: r.get(8)?,
                revision: r.get(9)?,
                is_current: r.get(10)?,
                revisions_at_position: r.get(11)?,
            })
        })?)
}

/// A surface's capture state: its traffic light, why it has that colour, and its counts.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SurfaceState {
    pub surface: String,
    pub status: StatusName,
    /// The reason code when a stale adapter or unparsed site responses made the colour (`adapter_stale`,
    /// `stream_unparsed`, `stream_too_large`); `null` when the last accepted turn and error alone made it.
    pub reason_code: Option<String>,
    /// Why the light has its colour, in words ([`personkit_shared::health::explain`]).
    pub reason: String,
    pub last_accepted_at: Option<String>,
    pub turns_24h: u64,
    pub threads_24h: u64,
    pub threads: u64,
    /// Current turns (latest revisions).
    pub turns: u64,
    pub last_error_code: Option<String>,
    pub last_error_message: Option<String>,
    pub last_error_at: Option<String>,
}

/// `green`, `yellow` or `red`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StatusName {
    Green,
    Yellow,
    Red,
}

impl StatusName {
    pub fn as_str(self) -> &'static str {
        Status::from(self).as_str()
    }
}

impl From<StatusName> for Status {
    fn from(s: StatusName) -> Self {
        match s {
            StatusName::Green => Status::Green,
            StatusName::Yellow => Status::Yellow,
            StatusName::Red => Status::Red,
        }
    }
}

impl From<Status> for StatusName {
    fn from(s: Status) -> Self {
        match s {
            Status::Green => StatusName::Green,
            Status::Yellow => StatusName::Yellow,
            Status::Red => StatusName::Red,
        }
    }
}

/// The surfaces that have at least one thread, by name: what a site filter offers (cheap, from the threads'
/// surface index, unlike [`surface_states`], which counts every turn).
pub fn surface_names(conn: &Connection) -> Result<Vec<String>, DbError> {
    let mut stmt = conn.prepare_cached("SELECT DISTINCT surface FROM threads ORDER BY surface")?;
    let names = stmt
        .query_map([], |r| r.get(0))?
        .collect::<Result<Vec<String>, _>>()?;
    Ok(names)
}

/// Per-surface capture state of every surface that has sent anything, sorted by surface.
pub fn surface_states(
    conn: &Connection,
    now: OffsetDateTime,
) -> Result<Vec<SurfaceState>, DbError> {
    let h = health::capture_health(conn, now)?;
    let now_ms = (now.unix_timestamp_nanos() / 1_000_000) as i64;
    let mut totals = conn.prepare_cached(
        "SELECT count(*), COALESCE(sum((SELECT count(*) FROM messages m WHERE m.thread_id = t.id AND m.is_current = 1)), 0)
         FROM threads t WHERE t.surface = ?1",
    )?;
    let mut out = Vec::with_capacity(h.surfaces.len());
    for s in h.surfaces {
        let (threads, turns): (u64, u64) =
            totals.query_row([&s.surface], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let reason = personkit_shared::health::explain(&s, now_ms);
        out.push(SurfaceState {
            surface: s.surface,
            status: s.status.into(),
            reason_code: s.reason.clone(),
            reason,
            last_accepted_at: s.last_accepted_at,
            turns_24h: s.turns_24h,
            threads_24h: s.threads_24h,
            threads,
            turns,
            last_error_code: s.last_error.as_ref().map(|e| e.code.clone()),
            last_error_message: s.last_error.as_ref().map(|e| e.message.clone()),
            last_error_at: s.last_error.map(|e| e.at),
        });
    }
    Ok(out)
}

/// Corpus-wide counts for an overview.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Counts {
    pub threads: u64,
    /// Current turns.
    pub turns: u64,
    /// Every stored content, revisions included.
    pub messages: u64,
    pub events: u64,
    pub schema_version: u32,
    pub generated_at: String,
}

pub fn counts(conn: &Connection, now: OffsetDateTime) -> Result<Counts, DbError> {
    let n = |sql: &str| -> Result<u64, DbError> { Ok(conn.query_row(sql, [], |r| r.get(0))?) };
    Ok(Counts {
        threads: n("SELECT count(*) FROM threads")?,
        turns: n("SELECT count(*) FROM messages WHERE is_current = 1")?,
        messages: n("SELECT count(*) FROM messages")?,
        events: n("SELECT count(*) FROM events")?,
        schema_version: crate::migrations::current_version(conn)?,
        generated_at: fmt_time(now),
    })
}

/// A thread that no longer exists: every turn of it was forgotten.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct DeletedThread {
    pub id: String,
    pub surface: String,
    pub deleted_at: String,
}

/// What changed since a time: threads that appeared, threads that changed (a new turn or revision, a turn
/// forgotten), threads that went. A thread id is in at most one list: in `created`/`updated` (its state now)
/// if it exists, else in `deleted`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Changes {
    pub created: Vec<ThreadSummary>,
    pub updated: Vec<ThreadSummary>,
    pub deleted: Vec<DeletedThread>,
    /// Pass as `since` next time. Nothing is lost between calls; a change may be reported twice.
    pub next_since: String,
    /// More changes are waiting: call again with `next_since` at once.
    pub has_more: bool,
}

/// How far before "now" the change feed's cursor is set, so that a batch whose receive time was taken just
/// before the query but which committed just after it is reported next time rather than missed.
pub const FEED_GRACE: time::Duration = time::Duration::seconds(2);

/// Threads created, updated and deleted at or after `since` (stored form; times are the relay's receive times,
/// not the capture times the client reported). `now` must be taken before the call. At most about `limit`
/// threads per answer (a group of changes sharing one receive time is never split); the rest follow with
/// `has_more`.
pub fn changes(
    conn: &Connection,
    since: &str,
    surface: Option<&str>,
    limit: u32,
    now: OffsetDateTime,
) -> Result<Changes, ReadError> {
    let limit = check_limit(limit)?;
    let sql = format!(
        "WITH ch AS (
             SELECT thread_id, max(received_at) AS at FROM messages WHERE received_at >= ?1 GROUP BY thread_id
             UNION ALL
             SELECT thread_id, max(forgotten_at) FROM forget_log WHERE forgotten_at >= ?1 AND whole = 0
             GROUP BY thread_id),
         agg AS (SELECT thread_id, max(at) AS at FROM ch GROUP BY thread_id)
         SELECT {THREAD_COLUMNS}, agg.at,
                NOT EXISTS (SELECT 1 FROM messages o WHERE o.thread_id = t.id AND o.received_at < ?1)
         FROM agg JOIN threads t ON t.id = agg.thread_id
         WHERE (?2 IS NULL OR t.surface = ?2)
         ORDER BY agg.at, t.id"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(params![since, surface])?;
    let (mut created, mut updated) = (Vec::new(), Vec::new());
    let mut last_at: Option<String> = None;
    let mut has_more = false;
    let mut n = 0u32;
    while let Some(r) = rows.next()? {
        // Columns after THREAD_COLUMNS (9 of them).
        let at: String = r.get(9)?;
        if n >= limit && last_at.as_deref() != Some(at.as_str()) {
            has_more = true;
            break;
        }
        let t = thread_row(r)?;
        if r.get::<_, bool>(10)? {
            created.push(t);
        } else {
            updated.push(t);
        }
        last_at = Some(at);
        n += 1;
    }
    let deleted = conn
        .prepare_cached(
            "SELECT f.thread_id, f.surface, max(f.forgotten_at) FROM forget_log f
             WHERE f.forgotten_at >= ?1 AND f.whole = 1 AND (?2 IS NULL OR f.surface = ?2)
               AND NOT EXISTS (SELECT 1 FROM threads t WHERE t.id = f.thread_id)
             GROUP BY f.thread_id ORDER BY 3, 1",
        )?
        .query_map(params![since, surface], |r| {
            Ok(DeletedThread {
                id: r.get(0)?,
                surface: r.get(1)?,
                deleted_at: r.get(2)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    // Every change up to `last_at` was included, so the next page starts a millisecond after it.
    let next_since = match (
        has_more,
        last_at.as_deref().and_then(crate::clock::parse_time),
    ) {
        (true, Some(t)) => fmt_time(t + time::Duration::milliseconds(1)),
        _ => fmt_time(now - FEED_GRACE).max(since.to_owned()),
    };
    Ok(Changes {
        created,
        updated,
        deleted,
        next_since,
        has_more,
    })
}

/// The compact form of listings: one line per record, starting with a short id prefix, the full ids in a
/// parallel array, and the page counts. Cheap for a language model to read.
pub mod compact {
    use schemars::JsonSchema;
    use serde::Serialize;

    use super::{MIN_ID_PREFIX, PageInfo, ThreadDetail, ThreadList};

    #[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
    pub struct Compact {
        /// One line per record: `<id prefix> <fields>`.
        pub lines: Vec<String>,
        /// The full id of each line's record, in the same order.
        pub ids: Vec<String>,
        pub total: u64,
        pub limit: u32,
        pub has_more: bool,
        pub next_cursor: Option<String>,
    }

    /// The first [`MIN_ID_PREFIX`] characters of an id.
    pub fn short(id: &str) -> &str {
        id.get(..MIN_ID_PREFIX).unwrap_or(id)
    }

    /// `text` on one line (whitespace runs become one space), at most `max` characters, `…` marking a cut.
    pub fn one_line(text: &str, max: usize) -> String {
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if flat.chars().count() <= max {
            return flat;
        }
        let mut s: String = flat.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }

    /// The date and minute of a stored time (`2026-11-22 09:01`).
    pub fn minute(t: &str) -> String {
        t.get(..16).unwrap_or(t).replacen('T', " ", 1)
    }

    fn page(lines: Vec<String>, ids: Vec<String>, p: &PageInfo) -> Compact {
        Compact {
            lines,
            ids,
            total: p.total,
            limit: p.limit,
            has_more: p.has_more,
            next_cursor: p.next_cursor.clone(),
        }
    }

    /// `<id> <last activity> <surface> "<title>" (<n> turns[, <m> missing])`.
    pub fn threads(list: &ThreadList) -> Compact {
        let lines = list
            .threads
            .iter()
            .map(|t| {
                let missing = match t.completeness.missing {
                    0 => String::new(),
                    m => format!(", {m} missing"),
                };
                format!(
                    "{} {} {} \"{}\" ({} turns{missing})",
                    short(&t.id),
                    minute(&t.last_seen_at),
                    t.surface,
                    one_line(t.title.as_deref().unwrap_or("untitled"), 80),
                    t.turns
                )
            })
            .collect();
        let ids = list.threads.iter().map(|t| t.id.clone()).collect();
        page(lines, ids, &list.page)
    }

    /// `<id> #<index> <role> <time>[ (+n revisions)]: <content, up to `max_content` characters>`.
    pub fn turns(d: &ThreadDetail, max_content: usize) -> Compact {
        let lines = d
            .turns
            .iter()
            .map(|t| {
                let revs = if t.revisions.is_empty() {
                    String::new()
                } else {
                    format!(" (+{} revisions)", t.revisions.len())
                };
                format!(
                    "{} #{} {} {}{revs}: {}",
                    short(&t.id),
                    t.index,
                    t.role,
                    minute(&t.time),
                    one_line(&t.content, max_content)
                )
            })
            .collect();
        let ids = d.turns.iter().map(|t| t.id.clone()).collect();
        page(lines, ids, &d.page)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::ingest::{Origin, ingest_observations};
    use personkit_shared::wire::{ClientInfo, Observation, Role, build_observation};
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-22 10:00:00 UTC);

    fn obs(surface: &str, conv: &str, role: Role, text: &str, ord: u32, at: &str) -> Observation {
        let client = ClientInfo {
            app_version: "0.1.0".into(),
            device_id: "ext".into(),
        };
        let mut o = build_observation(surface, conv, role, text, Some(ord), None, at, client);
        o.title = Some(format!("{conv} title"));
        o
    }

    /// Three threads; thread `a` has 3 turns (turn 2 edited once), `b` 1 turn, `c` 2 turns.
    fn filled() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = crate::db::open(&dir.path().join("c.db")).unwrap();
        let g = "browser-ext:chatgpt";
        let batch = vec![
            obs(
                g,
                "a",
                Role::User,
                "how do I rename a postgres column",
                0,
                "2026-11-20T09:00:00Z",
            ),
            obs(
                g,
                "a",
                Role::Assistant,
                "use ALTER TABLE first draft",
                1,
                "2026-11-20T09:01:00Z",
            ),
            obs(
                g,
                "a",
                Role::Assistant,
                "use ALTER TABLE ... RENAME COLUMN",
                1,
                "2026-11-20T09:02:00Z",
            ),
            obs(g, "a", Role::User, "thanks", 2, "2026-11-20T09:03:00Z"),
            obs(
                "browser-ext:claude",
                "b",
                Role::User,
                "lentil soup recipe",
                0,
                "2026-11-21T09:00:00Z",
            ),
            obs(
                g,
                "c",
                Role::User,
                "borrow checker error",
                0,
                "2026-11-22T09:00:00Z",
            ),
            obs(
                g,
                "c",
                Role::Assistant,
                "shorter lifetime",
                1,
                "2026-11-22T09:01:00Z",
            ),
        ];
        ingest_observations(
            &mut conn,
            &Origin {
                device_id: "d".into(),
            },
            &batch,
            NOW,
        )
        .unwrap();
        (dir, conn)
    }

    #[test]
    fn completeness_counts_unnumbered_positions_and_stale_reports() {
        let (_d, mut conn) = filled();
        let by_title = |conn: &Connection, t: &str| {
            list_threads(conn, &ThreadFilter::default(), 10, None)
                .unwrap()
                .threads
                .into_iter()
                .find(|x| x.title.as_deref() == Some(t))
                .unwrap()
        };
        let a = by_title(&conn, "a title");
        assert_eq!(a.completeness.state, CompletenessState::Complete);
        assert_eq!(a.completeness.missing, 0);
        // Thread `d` shows positions 0, 1 and 4: 2 and 3 were never delivered.
        let g = "browser-ext:chatgpt";
        let batch = vec![
            obs(g, "d", Role::User, "one", 0, "2026-11-22T09:00:00Z"),
            obs(g, "d", Role::Assistant, "two", 1, "2026-11-22T09:00:01Z"),
            obs(g, "d", Role::User, "five", 4, "2026-11-22T09:00:04Z"),
        ];
        let origin = Origin {
            device_id: "d".into(),
        };
        ingest_observations(&mut conn, &origin, &batch, NOW).unwrap();
        let d = by_title(&conn, "d title");
        assert_eq!(
            (d.completeness.state, d.completeness.missing),
            (CompletenessState::Gaps, 2)
        );
        assert!(
            compact::threads(&list_threads(&conn, &ThreadFilter::default(), 10, None).unwrap())
                .lines
                .iter()
                .any(|l| l.ends_with("(3 turns, 2 missing)"))
        );
        // A standing adapter report for the site is shown on its threads only.
        conn.execute(
            "INSERT INTO capture_reports (surface, device_id, stale_since, rule, reported_at)
             VALUES (?1, 'ext', '2026-11-22T08:00:00.000Z', NULL, '2026-11-22T08:05:00.000Z')",
            [g],
        )
        .unwrap();
        let d = by_title(&conn, "d title");
        assert_eq!(
            d.completeness.adapter_stale_since.as_deref(),
            Some("2026-11-22T08:00:00.000Z")
        );
        assert_eq!(
            by_title(&conn, "b title").completeness.adapter_stale_since,
            None
        );
        let one = get_thread(&conn, &d.id, false, 10, None).unwrap();
        assert_eq!(one.thread.completeness, d.completeness);
    }

    #[test]
    fn threads_newest_first_with_cursor_paging_and_filters() {
        let (_d, conn) = filled();
        let all = list_threads(&conn, &ThreadFilter::default(), 10, None).unwrap();
        let titles: Vec<_> = all
            .threads
            .iter()
            .map(|t| t.title.clone().unwrap())
            .collect();
        assert_eq!(titles, ["c title", "b title", "a title"]);
        assert_eq!(all.threads[2].turns, 3, "an edit is one turn");
        assert_eq!((all.page.total, all.page.has_more), (3, false));
        // Pages of one, following the cursor, give the same order with nothing lost or repeated.
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let p = list_threads(&conn, &ThreadFilter::default(), 1, cursor.as_deref()).unwrap();
            assert_eq!(p.page.total, 3);
            seen.extend(p.threads.iter().map(|t| t.id.clone()));
            if !p.page.has_more {
                break;
            }
            cursor = p.page.next_cursor;
        }
        assert_eq!(
            seen,
            all.threads.iter().map(|t| t.id.clone()).collect::<Vec<_>>()
        );
        let f = |surface: Option<&str>, since: Option<&str>, words: Option<&str>| ThreadFilter {
            surface: surface.map(Into::into),
            since: since.map(Into::into),
            until: None,
            words: words.map(Into::into),
            tier: None,
        };
        let n = |f: ThreadFilter| list_threads(&conn, &f, 10, None).unwrap().page.total;
        assert_eq!(n(f(Some("browser-ext:claude"), None, None)), 1);
        assert_eq!(n(f(None, Some("2026-11-21T00:00:00.000Z"), None)), 2);
        assert_eq!(
            n(f(None, None, Some("Postgres rename"))),
            1,
            "all words in one message"
        );
        assert_eq!(n(f(None, None, Some("postgres lentil"))), 0);
        assert_eq!(n(f(None, None, Some("B TITLE"))), 1, "words in the title");
        // Tiers: a thread without a heat row is cold; hot and warm come from the rows.
        let tier = |t: crate::heat::Tier| ThreadFilter {
            tier: Some(t),
            ..ThreadFilter::default()
        };
        let ids = |f: ThreadFilter| -> Vec<String> {
            list_threads(&conn, &f, 10, None)
                .unwrap()
                .threads
                .into_iter()
                .map(|t| t.id)
                .collect()
        };
        assert_eq!(n(tier(crate::heat::Tier::Cold)), 3);
        assert_eq!(n(tier(crate::heat::Tier::Hot)), 0);
        let (hot, warm) = (all.threads[1].id.clone(), all.threads[2].id.clone());
        for (id, t) in [(&hot, "hot"), (&warm, "warm")] {
            conn.execute(
                "INSERT INTO heat (kind, record_id, accesses, last_access, heat, tier, computed_at)
                 VALUES ('thread', ?1, 1, '2026-11-22T00:00:00.000Z', 0.5, ?2, '2026-11-22T00:00:00.000Z')",
                rusqlite::params![id, t],
            )
            .unwrap();
        }
        assert_eq!(ids(tier(crate::heat::Tier::Hot)), [hot]);
        assert_eq!(ids(tier(crate::heat::Tier::Warm)), [warm]);
        assert_eq!(
            ids(tier(crate::heat::Tier::Cold)),
            [all.threads[0].id.clone()]
        );
        assert_eq!(
            list_threads(&conn, &tier(crate::heat::Tier::Hot), 10, None)
                .unwrap()
                .page
                .total,
            1
        );
        assert!(matches!(
            list_threads(&conn, &ThreadFilter::default(), 10, Some("garbage")),
            Err(ReadError::BadRequest(_))
        ));
        assert!(matches!(
            list_threads(&conn, &ThreadFilter::default(), 0, None),
            Err(ReadError::BadRequest(_))
        ));
    }

    #[test]
    fn a_thread_reads_in_order_with_revisions_and_pages() {
        let (_d, conn) = filled();
        let id = corpus::messages(&conn, Some("browser-ext:chatgpt"), None, 100)
            .unwrap()
            .into_iter()
            .find(|m| m.content == "thanks")
            .unwrap()
            .thread_id;
        let t = get_thread(&conn, &id[..8], false, 10, None).unwrap();
        assert_eq!(t.thread.id, id, "a unique prefix resolves");
        let contents: Vec<_> = t.turns.iter().map(|t| t.content.as_str()).collect();
        assert_eq!(
            contents,
            [
                "how do I rename a postgres column",
                "use ALTER TABLE ... RENAME COLUMN",
                "thanks"
            ]
        );
        assert_eq!(t.turns[1].revision, 2);
        assert_eq!(t.turns[1].revisions.len(), 1);
        assert_eq!(
            t.turns[1].revisions[0].content,
            "use ALTER TABLE first draft"
        );
        let current = get_thread(&conn, &id, true, 10, None).unwrap();
        assert!(current.turns.iter().all(|t| t.revisions.is_empty()));
        let p1 = get_thread(&conn, &id, true, 2, None).unwrap();
        assert_eq!(
            (p1.turns.len(), p1.page.has_more, p1.page.total),
            (2, true, 3)
        );
        let p2 = get_thread(&conn, &id, true, 2, p1.page.next_cursor.as_deref()).unwrap();
        assert_eq!(p2.turns.len(), 1);
        assert_eq!(p2.turns[0].index, 3);
        assert!(!p2.page.has_more);
        assert!(matches!(
            get_thread(&conn, "nope", true, 2, None),
            Err(ReadError::NotFound(_))
        ));
        let m = get_message(&conn, &t.turns[1].revisions[0].id).unwrap();
        assert!(!m.is_current);
        assert_eq!(m.revisions_at_position, 2);
        assert_eq!(m.thread_title.as_deref(), Some("a title"));
        let c = compact::turns(&t, 20);
        assert_eq!(c.lines.len(), 3);
        assert_eq!(c.ids[1], t.turns[1].id);
        assert!(
            c.lines[1].starts_with(&t.turns[1].id[..8]),
            "{}",
            c.lines[1]
        );
        assert!(
            c.lines[1].contains("(+1 revisions)") && c.lines[1].contains('…'),
            "{}",
            c.lines[1]
        );
    }

    #[test]
    fn the_change_feed_reports_created_updated_and_deleted_and_pages_without_loss() {
        let (_d, mut conn) = filled();
        let before = NOW - time::Duration::minutes(1);
        let all = changes(&conn, &fmt_time(before), None, 10, NOW).unwrap();
        assert_eq!((all.created.len(), all.updated.len()), (3, 0));
        assert!(!all.has_more);
        assert_eq!(all.next_since, fmt_time(NOW - FEED_GRACE));
        // All three share one receive time: a page of one still carries the whole group.
        let one = changes(&conn, &fmt_time(before), None, 1, NOW).unwrap();
        assert_eq!((one.created.len(), one.has_more), (3, false));
        // One more turn in thread c, later; then thread b forgotten.
        let later = NOW + time::Duration::minutes(5);
        ingest_observations(
            &mut conn,
            &Origin {
                device_id: "d".into(),
            },
            &[obs(
                "browser-ext:chatgpt",
                "c",
                Role::User,
                "and another",
                2,
                "2026-11-22T09:02:00Z",
            )],
            later,
        )
        .unwrap();
        let b = all
            .created
            .iter()
            .find(|t| t.surface == "browser-ext:claude")
            .unwrap()
            .id
            .clone();
        crate::forget::forget(&mut conn, &crate::forget::Selection::thread(&b), later).unwrap();
        // From the cursor: the grace repeats what arrived at NOW (duplicates are allowed, losses are not).
        let next = changes(&conn, &all.next_since, None, 10, later).unwrap();
        assert_eq!(next.created.len() + next.updated.len(), 2);
        assert_eq!(next.deleted.len(), 1);
        let next = changes(
            &conn,
            &fmt_time(NOW + time::Duration::seconds(1)),
            None,
            10,
            later,
        )
        .unwrap();
        assert!(next.created.is_empty());
        assert_eq!(next.updated.len(), 1);
        assert_eq!(next.updated[0].turns, 3);
        assert_eq!(next.deleted.len(), 1);
        assert_eq!(next.deleted[0].id, b);
        // Thread a arrived at NOW, c last changed later: pages of one, in order, nothing lost.
        let p = changes(&conn, &fmt_time(before), None, 1, later).unwrap();
        assert_eq!(p.created.len(), 1);
        assert!(p.has_more);
        let p2 = changes(&conn, &p.next_since, None, 1, later).unwrap();
        assert_eq!(p2.updated.len(), 1);
        assert_eq!(p2.updated[0].turns, 3);
        assert!(!p2.has_more);
    }

    #[test]
    fn surface_states_say_why() {
        let (_d, conn) = filled();
        let s = surface_states(&conn, NOW).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].surface, "browser-ext:chatgpt");
        assert_eq!((s[0].threads, s[0].turns), (2, 5));
        assert_eq!(s[0].status, StatusName::Green);
        assert!(s[0].reason.contains("green"), "{}", s[0].reason);
        let later = surface_states(&conn, NOW + time::Duration::hours(3)).unwrap();
        assert_eq!(later[0].status, StatusName::Red);
        assert!(later[0].reason.contains("3 h"), "{}", later[0].reason);
        let c = counts(&conn, NOW).unwrap();
        assert_eq!((c.threads, c.turns, c.messages), (3, 6, 7));
    }
}
