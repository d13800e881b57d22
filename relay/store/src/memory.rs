//! Memory's rows (`personkit_memory` owns the rules): the versions of each tier (`short`, `mid`, `long`) and of
//! the user's profile, the threads each drew on, the tiers' small state, and the bounded reads the short digest
//! is made from. Forgetting turns reaches these rows through [`forget_selected`], inside the forget transaction:
//! every version that drew on a thread with a forgotten turn is withdrawn (its body blanked) and its tier marked
//! due again.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::clock::fmt_time;
use crate::db::{DbError, relay_id};

/// The tiers a version may belong to.
pub const TIERS: [&str; 4] = ["short", "mid", "long", "profile"];

/// A version to store.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewVersion {
    pub tier: String,
    pub body: String,
    pub tokens: u64,
    pub model: Option<String>,
    pub prompt_version: Option<String>,
    pub covers_from: Option<String>,
    pub covers_to: Option<String>,
    /// The versions it was made from.
    pub based_on: Vec<String>,
    /// The threads it drew on.
    pub sources: Vec<String>,
}

/// A stored version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Version {
    pub id: String,
    pub tier: String,
    /// 1 for a tier's first version, in [`ORDER`].
    pub number: u64,
    pub created_at: String,
    /// Empty when withdrawn.
    pub body: String,
    pub tokens: u64,
    pub model: Option<String>,
    pub prompt_version: Option<String>,
    pub covers_from: Option<String>,
    pub covers_to: Option<String>,
    pub based_on: Vec<String>,
    /// Set when a thread it drew on was forgotten.
    pub withdrawn_at: Option<String>,
    pub origin_device: String,
    /// How many threads it drew on.
    pub sources: u64,
}

/// A tier's versions in the order they were made: by time, then (within one millisecond on one relay) by their
/// origin's sequence, then by id.
pub const ORDER: &str = "created_at, origin_seq, id";

const VERSION_COLUMNS: &str =
    "v.id, v.tier, v.created_at, v.body, v.tokens, v.model, v.prompt_version,
     v.covers_from, v.covers_to, v.based_on, v.withdrawn_at, v.origin_device,
     (SELECT count(*) FROM memory_versions w WHERE w.tier = v.tier
        AND (w.created_at, w.origin_seq, w.id) <= (v.created_at, v.origin_seq, v.id)),
     (SELECT count(*) FROM memory_sources s WHERE s.version_id = v.id)";

fn version_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Version> {
    let based_on: String = r.get(9)?;
    Ok(Version {
        id: r.get(0)?,
        tier: r.get(1)?,
        created_at: r.get(2)?,
        body: r.get(3)?,
        tokens: r.get(4)?,
        model: r.get(5)?,
        prompt_version: r.get(6)?,
        covers_from: r.get(7)?,
        covers_to: r.get(8)?,
        based_on: serde_json::from_str(&based_on).unwrap_or_default(),
        withdrawn_at: r.get(10)?,
        origin_device: r.get(11)?,
        number: r.get(12)?,
        sources: r.get(13)?,
    })
}

/// The content-derived id of a version.
pub fn version_id(tier: &str, created_at: &str, origin: &str, body: &str) -> String {
    let mut h = Sha256::new();
    for part in ["memory", tier, created_at, origin, body] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Stores `v` as made by this relay at `now`, with its sources, in one transaction.
pub fn insert(conn: &Connection, v: &NewVersion, now: OffsetDateTime) -> Result<Version, DbError> {
    if !TIERS.contains(&v.tier.as_str()) {
        return Err(DbError::Invalid(format!("no memory tier {:?}", v.tier)));
    }
    let origin = relay_id(conn)?;
    let created_at = fmt_time(now);
    let id = version_id(&v.tier, &created_at, &origin, &v.body);
    let tx = crate::db::begin_write(conn)?;
    let seq: i64 = tx
        .query_row(
            "SELECT last_seq FROM origin_seqs WHERE origin = ?1",
            [&origin],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(0)
        + 1;
    tx.execute(
        "INSERT INTO origin_seqs(origin, last_seq) VALUES (?1, ?2)
         ON CONFLICT(origin) DO UPDATE SET last_seq = ?2",
        params![origin, seq],
    )?;
    tx.execute(
        "INSERT INTO memory_versions (id, tier, created_at, body, tokens, model, prompt_version, covers_from,
             covers_to, based_on, origin_device, origin_seq)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        params![
            id,
            v.tier,
            created_at,
            v.body,
            v.tokens as i64,
            v.model,
            v.prompt_version,
            v.covers_from,
            v.covers_to,
            serde_json::to_string(&v.based_on).unwrap_or_else(|_| "[]".into()),
            origin,
            seq
        ],
    )?;
    {
        let mut add = tx.prepare_cached(
            "INSERT OR IGNORE INTO memory_sources (version_id, thread_id) VALUES (?1, ?2)",
        )?;
        for t in &v.sources {
            add.execute(params![id, t])?;
        }
    }
    tx.commit()?;
    version(conn, &id)?.ok_or_else(|| DbError::Invalid("a stored version is gone".into()))
}

/// One version by id.
pub fn version(conn: &Connection, id: &str) -> Result<Option<Version>, DbError> {
    Ok(conn
        .query_row(
            &format!("SELECT {VERSION_COLUMNS} FROM memory_versions v WHERE v.id = ?1"),
            [id],
            version_row,
        )
        .optional()?)
}

/// The ids starting with `prefix` (at most 2: enough to tell a unique prefix from an ambiguous one).
pub fn ids_by_prefix(conn: &Connection, prefix: &str) -> Result<Vec<String>, DbError> {
    let hex = prefix.chars().all(|c| c.is_ascii_hexdigit()) && !prefix.is_empty();
    if !hex {
        return Ok(Vec::new());
    }
    Ok(conn
        .prepare(
            "SELECT id FROM memory_versions WHERE id >= ?1 AND id < ?1 || 'g' ORDER BY id LIMIT 2",
        )?
        .query_map([prefix.to_ascii_lowercase()], |r| r.get(0))?
        .collect::<Result<_, _>>()?)
}

/// A tier's newest version that is not withdrawn.
pub fn latest(conn: &Connection, tier: &str) -> Result<Option<Version>, DbError> {
    Ok(conn
        .query_row(
            &format!(
                "SELECT {VERSION_COLUMNS} FROM memory_versions v
                 WHERE v.tier = ?1 AND v.withdrawn_at IS NULL
                 ORDER BY v.created_at DESC, v.origin_seq DESC, v.id DESC LIMIT 1"
            ),
            [tier],
            version_row,
        )
        .optional()?)
}

/// A tier's versions, newest first, withdrawn ones included, `limit` at most (≤ 500), older than `before` (a
/// version id) when given.
pub fn versions(
    conn: &Connection,
    tier: &str,
    limit: u32,
    before: Option<&str>,
) -> Result<Vec<Version>, DbError> {
    let limit = limit.clamp(1, 500);
    let cut: Option<(String, i64, String)> = match before {
        Some(id) => conn
            .query_row(
                "SELECT created_at, origin_seq, id FROM memory_versions WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?,
        None => None,
    };
    let (at, seq, id) = cut.unwrap_or_else(|| ("\u{10ffff}".into(), i64::MAX, String::new()));
    Ok(conn
        .prepare(&format!(
            "SELECT {VERSION_COLUMNS} FROM memory_versions v
             WHERE v.tier = ?1 AND (v.created_at, v.origin_seq, v.id) < (?2, ?3, ?4)
             ORDER BY v.created_at DESC, v.origin_seq DESC, v.id DESC LIMIT ?5"
        ))?
        .query_map(params![tier, at, seq, id, limit], version_row)?
        .collect::<Result<_, _>>()?)
}

/// The version of `tier` made just before `v` (for diffs), withdrawn ones included.
pub fn previous(conn: &Connection, v: &Version) -> Result<Option<Version>, DbError> {
    Ok(versions(conn, &v.tier, 1, Some(&v.id))?.into_iter().next())
}

/// The threads a version drew on.
pub fn sources(conn: &Connection, version_id: &str) -> Result<Vec<String>, DbError> {
    Ok(conn
        .prepare(
            "SELECT thread_id FROM memory_sources WHERE version_id = ?1 ORDER BY thread_id LIMIT 10000",
        )?
        .query_map([version_id], |r| r.get(0))?
        .collect::<Result<_, _>>()?)
}

/// How many versions each tier has (withdrawn ones included), and how many are withdrawn.
pub fn counts(conn: &Connection) -> Result<Vec<(String, u64, u64)>, DbError> {
    Ok(conn
        .prepare(
            "SELECT tier, count(*), count(withdrawn_at) FROM memory_versions GROUP BY tier ORDER BY tier",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?)
}

/// A small named value.
pub fn state(conn: &Connection, key: &str) -> Result<Option<String>, DbError> {
    crate::named::get(conn, crate::named::Table::Memory, key)
}

/// Sets (or, with `None`, removes) a small named value.
pub fn set_state(conn: &Connection, key: &str, value: Option<&str>) -> Result<(), DbError> {
    crate::named::set(conn, crate::named::Table::Memory, key, value)
}

/// Marks `tier` due to run again (`due:<tier>`) since `at`: a version it made was withdrawn.
pub(crate) fn mark_due(conn: &Connection, tier: &str, at: &str) -> Result<(), DbError> {
    set_state(conn, &format!("due:{tier}"), Some(at))
}

/// Withdraws every version that drew on a thread with a turn in `forget_sel` (body blanked, `withdrawn_at` set)
/// and marks each affected tier due again (`due:<tier>`). Runs inside the forget transaction; answers how many
/// versions were withdrawn.
pub(crate) fn forget_selected(tx: &rusqlite::Transaction<'_>, now_s: &str) -> Result<u64, DbError> {
    let tiers: Vec<String> = tx
        .prepare(
            "SELECT DISTINCT v.tier FROM memory_versions v
             WHERE v.withdrawn_at IS NULL AND v.id IN (
                 SELECT s.version_id FROM memory_sources s
                 WHERE s.thread_id IN (SELECT DISTINCT thread_id FROM forget_sel))",
        )?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if tiers.is_empty() {
        return Ok(0);
    }
    let n = tx.execute(
        "UPDATE memory_versions SET body = '', withdrawn_at = ?1
         WHERE withdrawn_at IS NULL AND id IN (
             SELECT s.version_id FROM memory_sources s
             WHERE s.thread_id IN (SELECT DISTINCT thread_id FROM forget_sel))",
        [now_s],
    )?;
    for tier in tiers {
        mark_due(tx, &tier, now_s)?;
    }
    Ok(n as u64)
}

/// A thread's activity in a span of time: what the short digest lists per day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadActivity {
    pub thread_id: String,
    pub surface: String,
    pub title: Option<String>,
    /// The first turn in the span.
    pub first_at: String,
    pub turns: u64,
    /// The first user prompt in the span, cut to the caller's length.
    pub first_prompt: Option<String>,
}

/// The threads with current turns captured in `[from, to)`, in order of their first turn there, `limit` at most
/// (≤ 1,000), each with its first user prompt cut to `prompt_chars` characters.
pub fn activity(
    conn: &Connection,
    from: &str,
    to: &str,
    limit: u32,
    prompt_chars: u32,
) -> Result<Vec<ThreadActivity>, DbError> {
    let mut rows: Vec<ThreadActivity> = conn
        .prepare_cached(
            "SELECT a.thread_id, t.surface, t.title, a.first_at, a.turns FROM (
                 SELECT thread_id, min(captured_at) AS first_at, count(*) AS turns FROM messages
                 WHERE captured_at >= ?1 AND captured_at < ?2 AND is_current = 1
                 GROUP BY thread_id) a
             JOIN threads t ON t.id = a.thread_id
             ORDER BY a.first_at, a.thread_id LIMIT ?3",
        )?
        .query_map(params![from, to, limit.min(1_000)], |r| {
            Ok(ThreadActivity {
                thread_id: r.get(0)?,
                surface: r.get(1)?,
                title: r.get(2)?,
                first_at: r.get(3)?,
                turns: r.get(4)?,
                first_prompt: None,
            })
        })?
        .collect::<Result<_, _>>()?;
    let mut prompt = conn.prepare_cached(
        "SELECT substr(content, 1, ?4) FROM messages
         WHERE thread_id = ?1 AND captured_at >= ?2 AND captured_at < ?3 AND role = 'user' AND is_current = 1
         ORDER BY captured_at LIMIT 1",
    )?;
    for row in &mut rows {
        row.first_prompt = prompt
            .query_row(params![row.thread_id, from, to, prompt_chars], |r| r.get(0))
            .optional()?;
    }
    Ok(rows)
}

/// The newest time a current turn was captured before `before`, if any (where the digest's walk back starts).
pub fn last_capture_before(conn: &Connection, before: &str) -> Result<Option<String>, DbError> {
    Ok(conn
        .query_row(
            "SELECT max(captured_at) FROM messages WHERE captured_at < ?1",
            [before],
            |r| r.get(0),
        )
        .optional()?
        .flatten())
}

/// An approved knowledge entry made in a span of time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KnowledgeLine {
    pub id: String,
    pub kind: String,
    pub topic: String,
    pub position: String,
    pub created_at: String,
}

/// The approved knowledge entries created in `[from, to)`, oldest first, `limit` at most (≤ 200).
pub fn approved_knowledge_between(
    conn: &Connection,
    from: &str,
    to: &str,
    limit: u32,
) -> Result<Vec<KnowledgeLine>, DbError> {
    Ok(conn
        .prepare_cached(
            "SELECT id, kind, topic, position, created_at FROM knowledge_entries
             WHERE status = 'approved' AND created_at >= ?1 AND created_at < ?2
             ORDER BY created_at, id LIMIT ?3",
        )?
        .query_map(params![from, to, limit.min(200)], |r| {
            Ok(KnowledgeLine {
                id: r.get(0)?,
                kind: r.get(1)?,
                topic: r.get(2)?,
                position: r.get(3)?,
                created_at: r.get(4)?,
            })
        })?
        .collect::<Result<_, _>>()?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn conn() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let c = crate::db::open(&dir.path().join("c.db")).unwrap();
        (dir, c)
    }

    fn new(tier: &str, body: &str, sources: &[&str]) -> NewVersion {
        NewVersion {
            tier: tier.into(),
            body: body.into(),
            tokens: 3,
            sources: sources.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn versions_are_numbered_listed_and_latest_skips_withdrawn() {
        let (_d, c) = conn();
        let t0 = time::macros::datetime!(2026-11-01 03:00 UTC);
        let a = insert(&c, &new("short", "one", &["t1"]), t0).unwrap();
        let b = insert(
            &c,
            &new("short", "two", &["t2"]),
            t0 + time::Duration::days(1),
        )
        .unwrap();
        assert_eq!((a.number, b.number), (1, 2));
        assert_eq!(b.sources, 1);
        assert_eq!(latest(&c, "short").unwrap().unwrap().id, b.id);
        assert_eq!(previous(&c, &b).unwrap().unwrap().id, a.id);
        assert_eq!(versions(&c, "short", 10, None).unwrap().len(), 2);
        assert!(insert(&c, &new("weekly", "x", &[]), t0).is_err());

        c.execute_batch(
            "CREATE TEMP TABLE forget_sel (pk INTEGER, id TEXT, thread_id TEXT, position_key TEXT);
             INSERT INTO forget_sel VALUES (1, 'm', 't2', NULL);",
        )
        .unwrap();
        let tx = c.unchecked_transaction().unwrap();
        assert_eq!(forget_selected(&tx, "2026-11-03T00:00:00.000Z").unwrap(), 1);
        tx.commit().unwrap();
        let b2 = version(&c, &b.id).unwrap().unwrap();
        assert_eq!(b2.body, "");
        assert!(b2.withdrawn_at.is_some());
        assert_eq!(latest(&c, "short").unwrap().unwrap().id, a.id);
        assert!(state(&c, "due:short").unwrap().is_some());
        assert_eq!(ids_by_prefix(&c, &a.id[..6]).unwrap(), vec![a.id.clone()]);
    }

    #[test]
    fn versions_made_in_the_same_millisecond_keep_the_order_they_were_made_in() {
        let (_d, c) = conn();
        let t = time::macros::datetime!(2026-11-01 03:00 UTC);
        let mut made = Vec::new();
        for body in ["a", "b", "c", "d", "e", "f"] {
            let v = insert(&c, &new("profile", body, &[]), t).unwrap();
            assert_eq!(latest(&c, "profile").unwrap().unwrap().id, v.id, "{body}");
            if let Some(p) = made.last() {
                assert_eq!(&previous(&c, &v).unwrap().unwrap().id, p);
            }
            assert_eq!(v.number as usize, made.len() + 1);
            made.push(v.id);
        }
        let listed: Vec<String> = versions(&c, "profile", 10, None)
            .unwrap()
            .into_iter()
            .map(|v| v.id)
            .collect();
        made.reverse();
        assert_eq!(listed, made);
    }
}
