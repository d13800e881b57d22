//! The knowledge pipeline's rows (`personkit_knowledge` owns the rules): entries with their sources and the
//! user's decision, their full-text index, the audit log of model calls and decisions, the pipeline's small
//! state (pull cursor, last run, open alert, pseudonym key) and the pseudonym map. Forgetting turns reaches these
//! rows through [`forget_selected`], inside the forget transaction.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use time::OffsetDateTime;

use crate::clock::fmt_time;
use crate::db::DbError;

/// A turn an entry was drawn from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Source {
    pub message_id: String,
    pub thread_id: String,
}

/// An entry to store.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewEntry {
    pub kind: String,
    pub topic: String,
    pub position: String,
    pub reasoning: String,
    pub context: Option<String>,
    pub confidence: String,
    pub stability: String,
    pub tags: Vec<String>,
    /// `pipeline` or `agent:<name>`.
    pub origin: String,
    /// An agent's stated reason for proposing it.
    pub reason: Option<String>,
    pub model: Option<String>,
    pub prompt_version: Option<String>,
    pub scores: Option<serde_json::Value>,
    pub variant_of: Option<String>,
    pub sources: Vec<Source>,
}

/// A stored entry.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Entry {
    pub id: String,
    /// One of `reasoning`, `philosophy`, `standard`, `decision`, `reaction`.
    #[serde(rename = "type")]
    pub kind: String,
    pub topic: String,
    pub position: String,
    pub reasoning: String,
    /// The context a variant holds in.
    pub context: Option<String>,
    pub confidence: String,
    pub stability: String,
    pub tags: Vec<String>,
    /// `pending`, `approved` or `rejected`.
    pub status: String,
    /// `pipeline`, or `agent:<name>` for an agent's proposal.
    pub origin: String,
    pub reason: Option<String>,
    pub model: Option<String>,
    pub prompt_version: Option<String>,
    pub scores: Option<serde_json::Value>,
    /// The entry this one is a variant of (the same topic, held differently in another context).
    pub variant_of: Option<String>,
    /// How many later windows said the same again.
    pub reinforced: u64,
    /// Some of its sources were forgotten.
    pub sources_forgotten: bool,
    pub created_at: String,
    pub updated_at: String,
    pub decided_at: Option<String>,
    pub decided_by: Option<String>,
    pub sources: Vec<Source>,
}

/// Which entries [`entries`] lists.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub status: Option<String>,
    /// Full-text words (any of them; best first).
    pub words: Option<String>,
    pub limit: u32,
}

/// Entries by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Counts {
    pub pending: u64,
    pub approved: u64,
    pub rejected: u64,
}

const ENTRY_COLUMNS: &str = "e.id, e.kind, e.topic, e.position, e.reasoning, e.context, e.confidence, e.stability,
    e.tags, e.status, e.origin, e.reason, e.model, e.prompt_version, e.scores, e.variant_of, e.reinforced,
    e.sources_forgotten, e.created_at, e.updated_at, e.decided_at, e.decided_by";

fn entry_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Entry> {
    let tags: String = r.get(8)?;
    let scores: Option<String> = r.get(14)?;
    Ok(Entry {
        id: r.get(0)?,
        kind: r.get(1)?,
        topic: r.get(2)?,
        position: r.get(3)?,
        reasoning: r.get(4)?,
        context: r.get(5)?,
        confidence: r.get(6)?,
        stability: r.get(7)?,
        tags: serde_json::from_str(&tags).unwrap_or_default(),
        status: r.get(9)?,
        origin: r.get(10)?,
        reason: r.get(11)?,
        model: r.get(12)?,
        prompt_version: r.get(13)?,
        scores: scores.and_then(|s| serde_json::from_str(&s).ok()),
        variant_of: r.get(15)?,
        reinforced: r.get(16)?,
        sources_forgotten: r.get::<_, i64>(17)? != 0,
        created_at: r.get(18)?,
        updated_at: r.get(19)?,
        decided_at: r.get(20)?,
        decided_by: r.get(21)?,
        sources: Vec::new(),
    })
}

fn with_sources(conn: &Connection, mut list: Vec<Entry>) -> Result<Vec<Entry>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT message_id, thread_id FROM knowledge_sources WHERE entry_id = ?1 ORDER BY message_id",
    )?;
    for e in &mut list {
        e.sources = stmt
            .query_map([&e.id], |r| {
                Ok(Source {
                    message_id: r.get(0)?,
                    thread_id: r.get(1)?,
                })
            })?
            .collect::<Result<_, _>>()?;
    }
    Ok(list)
}

fn index(conn: &Connection, id: &str) -> Result<(), DbError> {
    let (rowid, topic, position, reasoning, context, tags): (
        i64,
        String,
        String,
        String,
        Option<String>,
        String,
    ) = conn.query_row(
        "SELECT rowid, topic, position, reasoning, context, tags FROM knowledge_entries WHERE id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)),
    )?;
    conn.execute("DELETE FROM knowledge_fts WHERE rowid = ?1", [rowid])?;
    let tags: Vec<String> = serde_json::from_str(&tags).unwrap_or_default();
    conn.execute(
        "INSERT INTO knowledge_fts(rowid, topic, position, reasoning, context, tags) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![rowid, topic, position, reasoning, context.unwrap_or_default(), tags.join(" ")],
    )?;
    Ok(())
}

fn add_sources(conn: &Connection, id: &str, sources: &[Source]) -> Result<usize, DbError> {
    let mut stmt = conn.prepare_cached(
        "INSERT OR IGNORE INTO knowledge_sources(entry_id, message_id, thread_id) VALUES (?1, ?2, ?3)",
    )?;
    let mut added = 0;
    for s in sources {
        added += stmt.execute(params![id, s.message_id, s.thread_id])?;
    }
    Ok(added)
}

/// Stores `e` as pending and returns its id.
pub fn insert(conn: &Connection, e: &NewEntry, now: OffsetDateTime) -> Result<String, DbError> {
    let id = uuid::Uuid::new_v4().to_string();
    let now = fmt_time(now);
    conn.execute(
        "INSERT INTO knowledge_entries(id, kind, topic, position, reasoning, context, confidence, stability, tags,
             origin, reason, model, prompt_version, scores, variant_of, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?16)",
        params![
            id,
            e.kind,
            e.topic,
            e.position,
            e.reasoning,
            e.context,
            e.confidence,
            e.stability,
            serde_json::to_string(&e.tags).unwrap_or_else(|_| "[]".into()),
            e.origin,
            e.reason,
            e.model,
            e.prompt_version,
            e.scores.as_ref().map(|s| s.to_string()),
            e.variant_of,
            now,
        ],
    )?;
    add_sources(conn, &id, &e.sources)?;
    index(conn, &id)?;
    Ok(id)
}

/// Records that a later window said what entry `id` says again: its new sources are added and the count goes up.
pub fn reinforce(
    conn: &Connection,
    id: &str,
    sources: &[Source],
    now: OffsetDateTime,
) -> Result<bool, DbError> {
    let n = conn.execute(
        "UPDATE knowledge_entries SET reinforced = reinforced + 1, updated_at = ?2 WHERE id = ?1",
        params![id, fmt_time(now)],
    )?;
    add_sources(conn, id, sources)?;
    Ok(n == 1)
}

/// One entry with its sources.
pub fn entry(conn: &Connection, id: &str) -> Result<Option<Entry>, DbError> {
    let e = conn
        .query_row(
            &format!("SELECT {ENTRY_COLUMNS} FROM knowledge_entries e WHERE e.id = ?1"),
            [id],
            entry_row,
        )
        .optional()?;
    Ok(with_sources(conn, e.into_iter().collect())?.pop())
}

/// Entries matching `f`, newest first (best first with words), at most `f.limit` (1..=500).
pub fn entries(conn: &Connection, f: &Filter) -> Result<Vec<Entry>, DbError> {
    let limit = f.limit.clamp(1, 500);
    let list = match f.words.as_deref().and_then(any_words) {
        Some(q) => {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {ENTRY_COLUMNS} FROM knowledge_fts JOIN knowledge_entries e ON e.rowid = knowledge_fts.rowid
                 WHERE knowledge_fts MATCH ?1 AND (?2 IS NULL OR e.status = ?2)
                 ORDER BY bm25(knowledge_fts) LIMIT ?3"
            ))?;
            stmt.query_map(params![q, f.status, limit], entry_row)?
                .collect::<Result<Vec<_>, _>>()?
        }
        None => {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {ENTRY_COLUMNS} FROM knowledge_entries e WHERE (?1 IS NULL OR e.status = ?1)
                 ORDER BY e.updated_at DESC, e.id LIMIT ?2"
            ))?;
            stmt.query_map(params![f.status, limit], entry_row)?
                .collect::<Result<Vec<_>, _>>()?
        }
    };
    with_sources(conn, list)
}

/// Approved entries in id order after `after` (keyset paging: pass the last id of the previous page), at most
/// `limit` (1..=500): what exports read.
pub fn approved_page(
    conn: &Connection,
    after: Option<&str>,
    limit: u32,
) -> Result<Vec<Entry>, DbError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {ENTRY_COLUMNS} FROM knowledge_entries e WHERE e.status = 'approved' AND e.id > ?1
         ORDER BY e.id LIMIT ?2"
    ))?;
    let list = stmt
        .query_map(params![after.unwrap_or(""), limit.clamp(1, 500)], entry_row)?
        .collect::<Result<Vec<_>, _>>()?;
    with_sources(conn, list)
}

/// An FTS5 query matching any of the words (each quoted, so no FTS syntax gets through).
fn any_words(words: &str) -> Option<String> {
    let terms: Vec<String> = words
        .split_whitespace()
        .take(32)
        .map(|w| w.replace('"', "\"\""))
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .map(|w| format!("\"{w}\""))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" OR "))
}

/// The approved entries an agent's context carries: most reinforced first, then the most recently decided,
/// `limit` at most (≤ 200), without their sources.
pub fn approved_for_context(conn: &Connection, limit: u32) -> Result<Vec<Entry>, DbError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {ENTRY_COLUMNS} FROM knowledge_entries e WHERE e.status = 'approved'
         ORDER BY e.reinforced DESC, e.decided_at DESC, e.id LIMIT ?1"
    ))?;
    Ok(stmt
        .query_map([limit.clamp(1, 200)], entry_row)?
        .collect::<Result<Vec<_>, _>>()?)
}

/// The candidates for reconciling a new entry: every entry whose topic shares a word with `topic`, best first, of
/// any status (a rejected entry said again stays rejected rather than coming back).
pub fn near_topic(conn: &Connection, topic: &str, limit: u32) -> Result<Vec<Entry>, DbError> {
    let Some(q) = any_words(topic) else {
        return Ok(Vec::new());
    };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {ENTRY_COLUMNS} FROM knowledge_fts JOIN knowledge_entries e ON e.rowid = knowledge_fts.rowid
         WHERE knowledge_fts MATCH ?1 ORDER BY bm25(knowledge_fts) LIMIT ?2"
    ))?;
    let q = format!("topic : ({q})");
    let list = stmt
        .query_map(params![q, limit.clamp(1, 200)], entry_row)?
        .collect::<Result<Vec<_>, _>>()?;
    with_sources(conn, list)
}

/// Entries by status.
pub fn counts(conn: &Connection) -> Result<Counts, DbError> {
    let mut c = Counts::default();
    let mut stmt =
        conn.prepare_cached("SELECT status, count(*) FROM knowledge_entries GROUP BY status")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u64>(1)?)))?;
    for row in rows {
        let (s, n) = row?;
        match s.as_str() {
            "pending" => c.pending = n,
            "approved" => c.approved = n,
            _ => c.rejected = n,
        }
    }
    Ok(c)
}

/// Sets an entry's status (`approved` / `rejected` / `pending`) and who decided; false if there is no such entry.
pub fn decide(
    conn: &Connection,
    id: &str,
    status: &str,
    by: &str,
    now: OffsetDateTime,
) -> Result<bool, DbError> {
    let now = fmt_time(now);
    let n = conn.execute(
        "UPDATE knowledge_entries SET status = ?2, decided_at = ?3, decided_by = ?4, updated_at = ?3 WHERE id = ?1",
        params![id, status, now, by],
    )?;
    Ok(n == 1)
}

/// What a user's edit changes (each `None` keeps the stored value; an empty `context` removes it: the entry then
/// holds in general).
#[derive(Debug, Clone, Default)]
pub struct Edit {
    pub topic: Option<String>,
    pub position: Option<String>,
    pub reasoning: Option<String>,
    pub context: Option<String>,
    pub confidence: Option<String>,
    pub stability: Option<String>,
    pub tags: Option<Vec<String>>,
}

/// Applies a user's edit; false if there is no such entry.
pub fn edit(conn: &Connection, id: &str, e: &Edit, now: OffsetDateTime) -> Result<bool, DbError> {
    let n = conn.execute(
        "UPDATE knowledge_entries SET topic = COALESCE(?2, topic), position = COALESCE(?3, position),
             reasoning = COALESCE(?4, reasoning),
             context = CASE WHEN ?5 IS NULL THEN context WHEN trim(?5) = '' THEN NULL ELSE ?5 END,
             confidence = COALESCE(?6, confidence), stability = COALESCE(?7, stability),
             tags = COALESCE(?8, tags), updated_at = ?9
         WHERE id = ?1",
        params![
            id,
            e.topic,
            e.position,
            e.reasoning,
            e.context,
            e.confidence,
            e.stability,
            e.tags
                .as_ref()
                .map(|t| serde_json::to_string(t).unwrap_or_else(|_| "[]".into())),
            fmt_time(now)
        ],
    )?;
    if n == 1 {
        index(conn, id)?;
    }
    Ok(n == 1)
}

/// How many entries `origin` proposed since `since` (the per-agent rate limit).
pub fn proposed_since(
    conn: &Connection,
    origin: &str,
    since: OffsetDateTime,
) -> Result<u64, DbError> {
    Ok(conn.query_row(
        "SELECT count(*) FROM knowledge_entries WHERE origin = ?1 AND created_at >= ?2",
        params![origin, fmt_time(since)],
        |r| r.get(0),
    )?)
}

/// One row of the audit log.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct AuditRow {
    pub id: i64,
    pub at: String,
    pub run_id: String,
    /// `run`, `call`, `decision`, `alert`, `approval` or `proposal`.
    pub kind: String,
    /// The turns the row speaks about.
    pub messages: Vec<String>,
    pub detail: serde_json::Value,
}

/// Appends to the audit log.
pub fn audit(
    conn: &Connection,
    run_id: &str,
    kind: &str,
    messages: &[String],
    detail: &serde_json::Value,
    now: OffsetDateTime,
) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO knowledge_audit(at, run_id, kind, messages, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        fmt_time(now),
        run_id,
        kind,
        serde_json::to_string(messages).unwrap_or_else(|_| "[]".into()),
        detail.to_string()
    ])?;
    Ok(())
}

/// The newest audit rows, newest first, optionally of one kind.
pub fn audit_log(
    conn: &Connection,
    kind: Option<&str>,
    limit: u32,
) -> Result<Vec<AuditRow>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, at, run_id, kind, messages, detail FROM knowledge_audit
         WHERE (?1 IS NULL OR kind = ?1) ORDER BY id DESC LIMIT ?2",
    )?;
    let rows = stmt
        .query_map(params![kind, limit.clamp(1, 1000)], |r| {
            let m: String = r.get(4)?;
            let d: String = r.get(5)?;
            Ok(AuditRow {
                id: r.get(0)?,
                at: r.get(1)?,
                run_id: r.get(2)?,
                kind: r.get(3)?,
                messages: serde_json::from_str(&m).unwrap_or_default(),
                detail: serde_json::from_str(&d).unwrap_or(serde_json::Value::Null),
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// A named value of the pipeline's state.
pub fn state(conn: &Connection, key: &str) -> Result<Option<String>, DbError> {
    crate::named::get(conn, crate::named::Table::Knowledge, key)
}

/// Sets (or with `None` removes) a named value of the pipeline's state.
pub fn set_state(conn: &Connection, key: &str, value: Option<&str>) -> Result<(), DbError> {
    crate::named::set(conn, crate::named::Table::Knowledge, key, value)
}

/// The pseudonym map: (pseudonym, real name).
pub fn pseudonyms(conn: &Connection) -> Result<Vec<(String, String)>, DbError> {
    let mut stmt =
        conn.prepare_cached("SELECT pseudonym, real FROM pseudonyms ORDER BY pseudonym")?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Adds mappings to the pseudonym map (existing ones are kept as they are).
pub fn add_pseudonyms(
    conn: &Connection,
    pairs: &[(String, String)],
    now: OffsetDateTime,
) -> Result<(), DbError> {
    let now = fmt_time(now);
    let mut stmt = conn.prepare_cached(
        "INSERT OR IGNORE INTO pseudonyms(pseudonym, real, created_at) VALUES (?1, ?2, ?3)",
    )?;
    for (p, r) in pairs {
        stmt.execute(params![p, r, now])?;
    }
    Ok(())
}

/// A turn the pipeline reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// The message's row number: the pull cursor's unit.
    pub pk: i64,
    pub id: String,
    pub thread_id: String,
    pub surface: String,
    pub role: String,
    pub text: String,
    /// `occurred_at`, else `captured_at` (stored form).
    pub at: String,
}

/// Current turns of the signal layer stored after row `after`, oldest row first, at most `limit` (1..=100,000).
pub fn turns_after(conn: &Connection, after: i64, limit: u32) -> Result<Vec<Turn>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT m.pk, m.id, m.thread_id, o.source_surface, m.role, m.content, COALESCE(m.occurred_at, m.captured_at)
         FROM persona_observations o JOIN messages m ON m.id = o.message_id
         WHERE m.pk > ?1 AND m.is_current = 1
         ORDER BY m.pk LIMIT ?2",
    )?;
    let rows = stmt
        .query_map(params![after, limit.clamp(1, 100_000)], |r| {
            Ok(Turn {
                pk: r.get(0)?,
                id: r.get(1)?,
                thread_id: r.get(2)?,
                surface: r.get(3)?,
                role: r.get(4)?,
                text: r.get(5)?,
                at: r.get(6)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// The thread each of `ids` is in; ids of no stored message are left out.
pub fn message_threads(conn: &Connection, ids: &[String]) -> Result<Vec<Source>, DbError> {
    let mut stmt = conn.prepare_cached("SELECT thread_id FROM messages WHERE id = ?1")?;
    let mut out = Vec::new();
    for id in ids.iter().take(1000) {
        if let Some(t) = stmt.query_row([id], |r| r.get::<_, String>(0)).optional()? {
            out.push(Source {
                message_id: id.clone(),
                thread_id: t,
            });
        }
    }
    Ok(out)
}

/// Inside the forget transaction, for the messages in `forget_sel`: an entry whose every source is forgotten goes
/// (with its index row); an entry keeping other sources loses these and is marked; a name the pseudonym map learnt
/// that no other stored turn mentions leaves the map; audit rows about these turns keep only their kind and
/// outcome. Returns (entries removed, entries marked).
pub(crate) fn forget_selected(tx: &rusqlite::Transaction<'_>) -> Result<(u64, u64), DbError> {
    let touched: Vec<String> = tx
        .prepare(
            "SELECT DISTINCT s.entry_id FROM knowledge_sources s JOIN forget_sel f ON f.id = s.message_id",
        )?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    tx.execute(
        "DELETE FROM knowledge_sources WHERE message_id IN (SELECT id FROM forget_sel)",
        [],
    )?;
    let (mut removed, mut marked) = (0, 0);
    for id in &touched {
        let left: u64 = tx.query_row(
            "SELECT count(*) FROM knowledge_sources WHERE entry_id = ?1",
            [id],
            |r| r.get(0),
        )?;
        if left == 0 {
            tx.execute(
                "DELETE FROM knowledge_fts WHERE rowid = (SELECT rowid FROM knowledge_entries WHERE id = ?1)",
                [id],
            )?;
            tx.execute("DELETE FROM knowledge_entries WHERE id = ?1", [id])?;
            removed += 1;
        } else {
            tx.execute(
                "UPDATE knowledge_entries SET sources_forgotten = 1 WHERE id = ?1",
                [id],
            )?;
            marked += 1;
        }
    }
    forget_names(tx)?;
    tx.execute(
        "UPDATE knowledge_audit SET messages = '[]',
             detail = json_object('forgotten', json('true'), 'outcome', json_extract(detail, '$.outcome'))
         WHERE id IN (SELECT a.id FROM knowledge_audit a, json_each(a.messages) j
                      WHERE j.value IN (SELECT id FROM forget_sel))",
        [],
    )?;
    Ok((removed, marked))
}

/// Drops from the pseudonym map every name that the turns in `forget_sel` mention and no other stored turn does
/// (matched as a phrase by the messages' full-text index). One or two index look-ups per name in the map.
fn forget_names(tx: &rusqlite::Transaction<'_>) -> Result<(), DbError> {
    let names: Vec<String> = tx
        .prepare("SELECT real FROM pseudonyms")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut in_forgotten = tx.prepare(
        "SELECT 1 FROM messages_fts JOIN forget_sel f ON f.pk = messages_fts.rowid
         WHERE messages_fts MATCH ?1 LIMIT 1",
    )?;
    let mut elsewhere = tx.prepare(
        "SELECT 1 FROM messages_fts WHERE messages_fts MATCH ?1
           AND messages_fts.rowid NOT IN (SELECT pk FROM forget_sel) LIMIT 1",
    )?;
    for name in names {
        let words: Vec<&str> = name
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        if words.is_empty() {
            continue;
        }
        let phrase = format!("\"{}\"", words.join(" "));
        if in_forgotten.exists([&phrase])? && !elsewhere.exists([&phrase])? {
            tx.execute("DELETE FROM pseudonyms WHERE real = ?1", [&name])?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn db() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::db::open(&dir.path().join("c.db")).unwrap();
        (dir, conn)
    }

    fn new(topic: &str, sources: &[(&str, &str)]) -> NewEntry {
        NewEntry {
            kind: "standard".into(),
            topic: topic.into(),
            position: "Tests run against real parts".into(),
            reasoning: "A stand-in hides the failures that matter in production".into(),
            confidence: "high".into(),
            stability: "durable".into(),
            tags: vec!["testing".into()],
            origin: "pipeline".into(),
            sources: sources
                .iter()
                .map(|(m, t)| Source {
                    message_id: (*m).into(),
                    thread_id: (*t).into(),
                })
                .collect(),
            ..NewEntry::default()
        }
    }

    #[test]
    fn entries_are_pending_searchable_decidable_and_editable() {
        let (_d, conn) = db();
        let now = OffsetDateTime::now_utc();
        let a = insert(&conn, &new("integration testing", &[("m1", "t1")]), now).unwrap();
        let b = insert(&conn, &new("code review", &[("m2", "t1")]), now).unwrap();
        assert_eq!(counts(&conn).unwrap().pending, 2);
        let found = entries(
            &conn,
            &Filter {
                words: Some("testing".into()),
                limit: 10,
                ..Filter::default()
            },
        )
        .unwrap();
        assert_eq!(found.len(), 2, "the tag and the topic both say testing");
        assert_eq!(found[0].id, a, "the topic match ranks first");
        assert!(decide(&conn, &a, "approved", "cli", now).unwrap());
        assert!(!decide(&conn, "nope", "approved", "cli", now).unwrap());
        let approved = entries(
            &conn,
            &Filter {
                status: Some("approved".into()),
                limit: 10,
                ..Filter::default()
            },
        )
        .unwrap();
        assert_eq!(approved.len(), 1);
        assert_eq!(approved[0].sources[0].message_id, "m1");
        edit(
            &conn,
            &b,
            &Edit {
                topic: Some("pull requests".into()),
                ..Edit::default()
            },
            now,
        )
        .unwrap();
        edit(
            &conn,
            &b,
            &Edit {
                context: Some("big teams".into()),
                ..Edit::default()
            },
            now,
        )
        .unwrap();
        assert_eq!(
            entry(&conn, &b).unwrap().unwrap().context.as_deref(),
            Some("big teams")
        );
        edit(
            &conn,
            &b,
            &Edit {
                context: Some(String::new()),
                ..Edit::default()
            },
            now,
        )
        .unwrap();
        assert_eq!(
            entry(&conn, &b).unwrap().unwrap().context,
            None,
            "an empty context removes it"
        );
        let by_new_topic = near_topic(&conn, "pull requests", 5).unwrap();
        assert_eq!(by_new_topic.len(), 1);
        assert_eq!(by_new_topic[0].id, b);
        assert!(near_topic(&conn, "code review", 5).unwrap().is_empty());
        assert!(
            reinforce(
                &conn,
                &b,
                &[Source {
                    message_id: "m3".into(),
                    thread_id: "t2".into()
                }],
                now
            )
            .unwrap()
        );
        let b2 = entry(&conn, &b).unwrap().unwrap();
        assert_eq!((b2.reinforced, b2.sources.len()), (1, 2));
    }

    #[test]
    fn state_pseudonyms_and_audit_round_trip() {
        let (_d, conn) = db();
        let now = OffsetDateTime::now_utc();
        set_state(&conn, "cursor", Some("12")).unwrap();
        assert_eq!(state(&conn, "cursor").unwrap().as_deref(), Some("12"));
        set_state(&conn, "cursor", None).unwrap();
        assert_eq!(state(&conn, "cursor").unwrap(), None);
        add_pseudonyms(&conn, &[("Person_A1B2".into(), "Ana".into())], now).unwrap();
        add_pseudonyms(&conn, &[("Person_A1B2".into(), "Other".into())], now).unwrap();
        assert_eq!(
            pseudonyms(&conn).unwrap(),
            vec![("Person_A1B2".into(), "Ana".into())]
        );
        audit(
            &conn,
            "r1",
            "call",
            &["m1".into()],
            &serde_json::json!({"outcome": "ok"}),
            now,
        )
        .unwrap();
        let log = audit_log(&conn, None, 10).unwrap();
        assert_eq!(log[0].messages, vec!["m1".to_string()]);
        assert_eq!(log[0].detail["outcome"], "ok");
    }
}
