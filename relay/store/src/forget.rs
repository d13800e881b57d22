//! Forgetting: the one call that removes turns from the corpus for good — the dashboard's Forget (a thread, a
//! site, a date range), `personkit forget` and `DELETE /v1/threads/{id}` all use it.
//!
//! A [`Selection`] names messages; [`preview`] counts them (shown before a confirmation) and [`forget`] removes them in
//! one transaction: their content leaves `messages` and the full-text index (by trigger), their vectors, vector state
//! (the change log tells in-memory indexes) and cached embeddings no other row uses (the signal layer,
//! `persona_observations`, is a view of the messages and goes with them); a thread left with no turns goes too. Each
//! message leaves a tombstone — its content-derived id, no content — in `forgotten_messages`, and ingest answers a
//! forgotten turn as a duplicate without storing it, so a replayed queue or a re-import never brings it back.
//! The events derived from a thread with a forgotten turn (sessions, thread starts: `attrs.thread_id`) go in the
//! same transaction, with their full-text rows and vectors. `forget_log` records which threads changed, for the read API's change feed. The writer connection runs with
//! `secure_delete` on while it forgets, so freed pages are zeroed rather than left in the file.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::Serialize;
use time::OffsetDateTime;

use personkit_shared::identity::words_hash;
use personkit_shared::wire::Role;

use crate::clock::fmt_time;
use crate::db::DbError;
use crate::vectors::{Kind, SUPPORTED_DIMS};

/// Which messages to forget: every message matching all the given parts. At least one part must be given.
/// Times are in the stored form and compare with a message's time (`occurred_at`, else `captured_at`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// A full thread id.
    pub thread: Option<String>,
    pub surface: Option<String>,
    /// Inclusive lower bound.
    pub since: Option<String>,
    /// Exclusive upper bound.
    pub until: Option<String>,
}

impl Selection {
    pub fn thread(id: &str) -> Selection {
        Selection {
            thread: Some(id.to_owned()),
            ..Selection::default()
        }
    }

    fn is_empty(&self) -> bool {
        self.thread.is_none()
            && self.surface.is_none()
            && self.since.is_none()
            && self.until.is_none()
    }
}

/// What a forget touches (before) or touched (after).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Stored contents, revisions included.
    pub messages: u64,
    /// Threads with at least one selected message.
    pub threads: u64,
    /// Threads that have nothing left afterwards and go as a whole.
    pub whole_threads: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ForgetError {
    #[error("say what to forget: a thread, a site, or a date range")]
    EmptySelection,
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<rusqlite::Error> for ForgetError {
    fn from(e: rusqlite::Error) -> Self {
        ForgetError::Db(DbError::Sqlite(e))
    }
}

const SELECT_WHERE: &str = "(?1 IS NULL OR m.thread_id = ?1)
    AND (?2 IS NULL OR m.thread_id IN (SELECT id FROM threads WHERE surface = ?2))
    AND (?3 IS NULL OR COALESCE(m.occurred_at, m.captured_at) >= ?3)
    AND (?4 IS NULL OR COALESCE(m.occurred_at, m.captured_at) < ?4)";

/// Counts what [`forget`] would remove, without changing anything.
pub fn preview(conn: &Connection, sel: &Selection) -> Result<Counts, ForgetError> {
    if sel.is_empty() {
        return Err(ForgetError::EmptySelection);
    }
    let sql = format!(
        "WITH sel AS (SELECT m.thread_id FROM messages m WHERE {SELECT_WHERE}),
              per AS (SELECT thread_id, count(*) AS n FROM sel GROUP BY thread_id)
         SELECT COALESCE(sum(n), 0), count(*),
                COALESCE(sum(n = (SELECT count(*) FROM messages a WHERE a.thread_id = per.thread_id)), 0)
         FROM per"
    );
    let c = conn.query_row(
        &sql,
        params![sel.thread, sel.surface, sel.since, sel.until],
        |r| {
            Ok(Counts {
                messages: r.get(0)?,
                threads: r.get(1)?,
                whole_threads: r.get(2)?,
            })
        },
    )?;
    Ok(c)
}

/// Removes the selected messages for good (see the module docs) in one transaction, and says what went.
pub fn forget(
    conn: &mut Connection,
    sel: &Selection,
    now: OffsetDateTime,
) -> Result<Counts, ForgetError> {
    if sel.is_empty() {
        return Err(ForgetError::EmptySelection);
    }
    // Pages freed while forgetting are zeroed; afterwards the writer goes back to SQLite's default, so ingest
    // does not pay for zeroing pages that held nothing forgotten.
    conn.pragma_update(None, "secure_delete", "ON")?;
    let result = forget_zeroing(conn, sel, now);
    conn.pragma_update(None, "secure_delete", "OFF")?;
    result
}

fn forget_zeroing(
    conn: &mut Connection,
    sel: &Selection,
    now: OffsetDateTime,
) -> Result<Counts, ForgetError> {
    let now_s = fmt_time(now);
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    prepare_selection(&tx)?;
    let selected = tx.execute(
        &format!(
            "INSERT INTO forget_sel (pk, id, thread_id, position_key)
             SELECT m.pk, m.id, m.thread_id, m.position_key FROM messages m WHERE {SELECT_WHERE}"
        ),
        params![sel.thread, sel.surface, sel.since, sel.until],
    )?;
    if selected == 0 {
        drop(tx);
        return Ok(Counts::default());
    }
    let counts = remove_selected(&tx, &now_s, selected)?;
    optimize_fts(&tx)?;
    tx.commit()?;
    // Move the freed (zeroed) pages out of the write-ahead log as soon as no reader needs them.
    let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
    Ok(counts)
}

/// Removes the messages listed in the temporary table `forget_sel` (pk, id, thread_id, position_key) — which
/// [`forget`] and sync's tombstones fill — from every table, tombstones them, fixes the current revision at their
/// positions and drops threads left empty; `selected` is how many rows `forget_sel` holds. The caller commits
/// (and rewrites the full-text index, [`optimize_fts`]).
pub(crate) fn remove_selected(
    tx: &rusqlite::Transaction<'_>,
    now_s: &str,
    selected: usize,
) -> Result<Counts, DbError> {
    let now_s = now_s.to_owned();
    tx.execute(
        "INSERT OR IGNORE INTO forgotten_messages (id, thread_id, forgotten_at)
         SELECT id, thread_id, ?1 FROM forget_sel",
        [&now_s],
    )?;
    forget_other_names(tx, &now_s)?;
    crate::knowledge::forget_selected(tx)?;
    crate::memory::forget_selected(tx, &now_s)?;
    crate::events::forget_selected(tx)?;
    crate::graph::forget_selected(tx)?;
    crate::proposals::forget_selected(tx)?;
    // Cached embeddings of these texts, unless another row still uses the same text.
    tx.execute(
        "DELETE FROM embeddings WHERE text_hash IN (
             SELECT s.text_hash FROM search_vec_state s JOIN forget_sel f ON s.kind = 'message' AND s.pk = f.pk)
           AND text_hash NOT IN (
             SELECT s.text_hash FROM search_vec_state s
             WHERE NOT (s.kind = 'message' AND s.pk IN (SELECT pk FROM forget_sel)))",
        [],
    )?;
    let pks: Vec<i64> = tx
        .prepare("SELECT pk FROM forget_sel")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for d in SUPPORTED_DIMS {
        for table in [Kind::Message.vec_table(d), Kind::Message.bit_table(d)] {
            let mut del = tx.prepare_cached(&format!("DELETE FROM {table} WHERE rowid = ?1"))?;
            for pk in &pks {
                del.execute([pk])?;
            }
        }
    }
    tx.execute(
        "DELETE FROM search_vec_state WHERE kind = 'message' AND pk IN (SELECT pk FROM forget_sel)",
        [],
    )?;
    let positions: Vec<(String, String)> = tx
        .prepare(
            "SELECT DISTINCT thread_id, position_key FROM forget_sel WHERE position_key IS NOT NULL",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let threads: Vec<(String, u64)> = tx
        .prepare("SELECT thread_id, count(*) FROM forget_sel GROUP BY thread_id")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    tx.execute(
        "DELETE FROM messages WHERE pk IN (SELECT pk FROM forget_sel)",
        [],
    )?;
    // The remaining contents at a position are numbered again from 1 and the newest is current (by capture time,
    // then hash, as ingest does), so a position reads the same on every relay whatever order its turns and
    // tombstones arrived in.
    for (t, p) in &positions {
        crate::ingest::number_revisions(tx, t, p)?;
    }
    let mut counts = Counts {
        messages: selected as u64,
        threads: threads.len() as u64,
        whole_threads: 0,
    };
    for (thread_id, n) in &threads {
        let surface: Option<String> = tx
            .query_row(
                "SELECT surface FROM threads WHERE id = ?1",
                [thread_id],
                |r| r.get(0),
            )
            .optional()?;
        let Some(surface) = surface else { continue };
        let left: Option<(String, String)> = tx
            .query_row(
                "SELECT min(captured_at), max(captured_at) FROM messages WHERE thread_id = ?1 HAVING count(*) > 0",
                [thread_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let whole = left.is_none();
        match left {
            None => {
                tx.execute("DELETE FROM threads WHERE id = ?1", [thread_id])?;
                crate::heat::forget_thread(tx, thread_id)?;
                counts.whole_threads += 1;
            }
            Some((first, last)) => {
                tx.execute(
                    "UPDATE threads SET first_seen_at = ?2, last_seen_at = ?3 WHERE id = ?1",
                    params![thread_id, first, last],
                )?;
            }
        }
        tx.execute(
            "INSERT INTO forget_log (thread_id, surface, messages, whole, forgotten_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![thread_id, surface, n, whole, now_s],
        )?;
    }
    tx.execute("DELETE FROM forget_sel", [])?;
    Ok(counts)
}

/// The temporary table [`remove_selected`] reads, made empty.
pub(crate) fn prepare_selection(tx: &rusqlite::Transaction<'_>) -> Result<(), DbError> {
    tx.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS forget_sel (pk INTEGER PRIMARY KEY, id TEXT NOT NULL,
             thread_id TEXT NOT NULL, position_key TEXT);
         DELETE FROM forget_sel;",
    )?;
    Ok(())
}

/// FTS5 records a deletion as a marker in a new segment and keeps the old segment, with the forgotten words,
/// until a merge: rewrite the index so they leave the file (freed pages are zeroed under `secure_delete`).
pub(crate) fn optimize_fts(tx: &rusqlite::Transaction<'_>) -> Result<(), DbError> {
    tx.execute(
        "INSERT INTO messages_fts(messages_fts) VALUES ('optimize')",
        [],
    )?;
    tx.execute(
        "INSERT INTO knowledge_fts(knowledge_fts) VALUES ('optimize')",
        [],
    )?;
    tx.execute("INSERT INTO events_fts(events_fts) VALUES ('optimize')", [])?;
    Ok(())
}

/// A turn is known by more than its stored text (docs/wire-format.md, "Turn identity"): the renderings folded
/// into it and the site's id. Each gets a tombstone too, so neither a replayed DOM rendering nor the site's source
/// form of the same message brings it back.
fn forget_other_names(tx: &rusqlite::Transaction<'_>, now: &str) -> Result<(), DbError> {
    let folded: Vec<(String, String)> = tx
        .prepare(
            "SELECT r.thread_id, r.content_hash FROM message_renderings r JOIN forget_sel f ON r.message_pk = f.pk",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let keys: Vec<(String, String)> = tx
        .prepare(
            "SELECT m.thread_id, m.message_key FROM messages m JOIN forget_sel f ON m.pk = f.pk
             WHERE m.message_key IS NOT NULL",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut tomb = tx.prepare_cached(
        "INSERT OR IGNORE INTO forgotten_messages (id, thread_id, forgotten_at) VALUES (?1, ?2, ?3)",
    )?;
    for (thread, hash) in folded {
        let id = personkit_shared::ids::message_id(
            &uuid::Uuid::parse_str(&thread).unwrap_or_default(),
            &hash,
        )
        .hyphenated()
        .to_string();
        tomb.execute(params![id, thread, now])?;
    }
    for (thread, key) in keys {
        tomb.execute(params![key_tombstone(&thread, &key), thread, now])?;
    }
    let mut words = tx.prepare(
        "SELECT m.thread_id, m.role, m.content FROM messages m JOIN forget_sel f ON m.pk = f.pk",
    )?;
    let mut rows = words.query([])?;
    while let Some(r) = rows.next()? {
        let thread: String = r.get(0)?;
        let role = Role::parse(&r.get::<_, String>(1)?);
        let content: String = r.get(2)?;
        if let Some(hash) = role.and_then(|role| words_hash(role, &content)) {
            tomb.execute(params![words_tombstone(&thread, &hash), thread, now])?;
        }
    }
    Ok(())
}

/// The tombstone of the site's message id `key` in thread `thread_id`.
pub fn key_tombstone(thread_id: &str, key: &str) -> String {
    format!("key:{thread_id}|{key}")
}

/// The tombstone of a turn's words (`identity::words_hash`) in thread `thread_id`.
pub fn words_tombstone(thread_id: &str, words_hash: &str) -> String {
    format!("words:{thread_id}|{words_hash}")
}

/// Whether a message id was forgotten.
pub fn is_forgotten(conn: &Connection, message_id: &str) -> Result<bool, DbError> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM forgotten_messages WHERE id = ?1")?
        .exists([message_id])?)
}

/// A turn arriving by ingest or sync, by every name a tombstone may know it by.
#[derive(Debug, Clone, Copy)]
pub struct Arriving<'a> {
    pub thread_id: &'a str,
    /// Its content-derived id (thread and exact text).
    pub message_id: &'a str,
    /// The site's id of the message.
    pub key: Option<&'a str>,
    pub role: Role,
    pub content: &'a str,
}

/// The one forgetting rule for every intake path (live capture, import, harvest, sync): a turn was forgotten when
/// a tombstone names its exact text (message id), the site's id for it in its thread, or its words and role in its
/// thread — the identities `identity::decide` folds renderings by, so a forgotten turn does not come back as the
/// site's Markdown of what the page showed, or the other way round.
pub fn turn_is_forgotten(conn: &Connection, t: &Arriving<'_>) -> Result<bool, DbError> {
    if let Some(k) = t.key
        && is_forgotten(conn, &key_tombstone(t.thread_id, k))?
    {
        return Ok(true);
    }
    if is_forgotten(conn, t.message_id)? {
        return Ok(true);
    }
    match words_hash(t.role, t.content) {
        Some(hash) => is_forgotten(conn, &words_tombstone(t.thread_id, &hash)),
        None => Ok(false),
    }
}

/// Adds to the temporary table `forget_sel` ([`prepare_selection`]) every message a tombstone names: its id, the
/// site's id (`key:` tombstones) or its words and role (`words:` tombstones), within the tombstone's thread.
pub(crate) fn select_named(
    tx: &rusqlite::Transaction<'_>,
    tombstone: &str,
    thread_id: &str,
) -> Result<(), DbError> {
    tx.prepare_cached(
        "INSERT OR IGNORE INTO forget_sel (pk, id, thread_id, position_key)
         SELECT pk, id, thread_id, position_key FROM messages WHERE id = ?1 AND thread_id = ?2",
    )?
    .execute([tombstone, thread_id])?;
    if let Some(key) = tombstone.strip_prefix(&format!("key:{thread_id}|")) {
        tx.prepare_cached(
            "INSERT OR IGNORE INTO forget_sel (pk, id, thread_id, position_key)
             SELECT pk, id, thread_id, position_key FROM messages WHERE thread_id = ?1 AND message_key = ?2",
        )?
        .execute(params![thread_id, key])?;
    }
    if let Some(hash) = tombstone.strip_prefix(&format!("words:{thread_id}|")) {
        let matching: Vec<i64> = {
            let mut stmt =
                tx.prepare_cached("SELECT pk, role, content FROM messages WHERE thread_id = ?1")?;
            let mut rows = stmt.query([thread_id])?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                let role = Role::parse(&r.get::<_, String>(1)?);
                let content: String = r.get(2)?;
                if role.and_then(|role| words_hash(role, &content)).as_deref() == Some(hash) {
                    out.push(r.get(0)?);
                }
            }
            out
        };
        let mut add = tx.prepare_cached(
            "INSERT OR IGNORE INTO forget_sel (pk, id, thread_id, position_key)
             SELECT pk, id, thread_id, position_key FROM messages WHERE pk = ?1",
        )?;
        for pk in matching {
            add.execute([pk])?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::ingest::{Origin, ingest_observations};
    use personkit_shared::identity::Path;
    use personkit_shared::wire::{ClientInfo, Observation, build_observation};
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-22 10:00:00 UTC);

    fn obs(surface: &str, conv: &str, text: &str, ord: u32, at: &str) -> Observation {
        let client = ClientInfo {
            app_version: "0.1.0".into(),
            device_id: "ext".into(),
        };
        let role = if ord.is_multiple_of(2) {
            Role::User
        } else {
            Role::Assistant
        };
        build_observation(surface, conv, role, text, Some(ord), None, at, client)
    }

    fn origin() -> Origin {
        Origin {
            device_id: "d".into(),
        }
    }

    fn count(conn: &Connection, sql: &str) -> u64 {
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    fn corpus() -> (tempfile::TempDir, Connection, Vec<Observation>) {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = crate::db::open(&dir.path().join("c.db")).unwrap();
        let g = "browser-ext:chatgpt";
        let batch = vec![
            obs(g, "a", "secret plan alpha", 0, "2026-11-20T09:00:00Z"),
            obs(g, "a", "first draft answer", 1, "2026-11-20T09:01:00Z"),
            obs(g, "a", "second draft answer", 1, "2026-11-21T09:02:00Z"),
            obs(g, "b", "lentil soup", 0, "2026-11-21T09:00:00Z"),
            obs(
                "browser-ext:claude",
                "c",
                "borrow checker",
                0,
                "2026-11-22T09:00:00Z",
            ),
        ];
        ingest_observations(&mut conn, &origin(), &batch, NOW).unwrap();
        (dir, conn, batch)
    }

    #[test]
    fn a_whole_thread_goes_from_every_table_and_never_comes_back() {
        let (_d, mut conn, batch) = corpus();
        let thread = batch[0].thread_id.clone();
        let sel = Selection::thread(&thread);
        let before = preview(&conn, &sel).unwrap();
        assert_eq!(
            before,
            Counts {
                messages: 3,
                threads: 1,
                whole_threads: 1
            }
        );
        // A vector and a cached embedding for one of its messages.
        let pk: i64 = conn
            .query_row(
                "SELECT pk FROM messages WHERE content = 'secret plan alpha'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let v = vec![0.5f32; 384];
        let h = crate::vectors::text_hash("secret plan alpha");
        let model = crate::vectors::ModelRef {
            id: "m",
            version: "1",
            dim: 384,
        };
        let vectors = std::collections::HashMap::from([(h.clone(), v.clone())]);
        crate::vectors::write_batch(
            &mut conn,
            Kind::Message,
            model,
            &[(h.clone(), v)],
            &[(pk, h)],
            &vectors,
            "2026-11-22T10:00:00.000Z",
        )
        .unwrap();
        assert_eq!(count(&conn, "SELECT count(*) FROM embeddings"), 1);
        let done = forget(&mut conn, &sel, NOW).unwrap();
        let zeroing: i64 = conn
            .pragma_query_value(None, "secure_delete", |r| r.get(0))
            .unwrap();
        assert_eq!(
            zeroing, 0,
            "the writer zeroes freed pages only while it forgets"
        );
        assert_eq!(done, before);
        for (sql, n) in [
            (
                "SELECT count(*) FROM messages WHERE thread_id IN (SELECT thread_id FROM forgotten_messages)",
                0,
            ),
            (
                "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'secret OR draft'",
                0,
            ),
            ("SELECT count(*) FROM embeddings", 0),
            ("SELECT count(*) FROM messages_vec_384", 0),
            ("SELECT count(*) FROM search_vec_state", 0),
            (
                "SELECT count(*) FROM persona_observations WHERE message_id NOT IN (SELECT id FROM messages)",
                0,
            ),
            ("SELECT count(*) FROM threads", 2),
            (
                "SELECT count(*) FROM forgotten_messages WHERE id NOT LIKE 'words:%'",
                3,
            ),
            // Each text's words too: three texts, three different sets of words.
            (
                "SELECT count(*) FROM forgotten_messages WHERE id LIKE 'words:%'",
                3,
            ),
            ("SELECT count(*) FROM forget_log WHERE whole = 1", 1),
        ] {
            assert_eq!(count(&conn, sql), n, "{sql}");
        }
        // Replaying the same turns stores nothing and answers duplicate (so the extension drops them).
        let again = ingest_observations(&mut conn, &origin(), &batch[..3], NOW).unwrap();
        assert_eq!((again.stored, again.duplicate), (0, 3));
        assert_eq!(
            count(&conn, "SELECT count(*) FROM threads"),
            2,
            "no empty thread row"
        );
        // A new turn in the same conversation is captured as usual.
        let new = obs(
            "browser-ext:chatgpt",
            "a",
            "a new question",
            2,
            "2026-11-22T09:30:00Z",
        );
        let r = ingest_observations(&mut conn, &origin(), &[new], NOW).unwrap();
        assert_eq!(r.stored, 1);
    }

    #[test]
    fn a_date_range_takes_some_turns_and_the_older_revision_becomes_current() {
        let (_d, mut conn, batch) = corpus();
        let sel = Selection {
            since: Some("2026-11-21T00:00:00.000Z".into()),
            until: Some("2026-11-22T00:00:00.000Z".into()),
            ..Selection::default()
        };
        let c = forget(&mut conn, &sel, NOW).unwrap();
        assert_eq!(
            c,
            Counts {
                messages: 2,
                threads: 2,
                whole_threads: 1
            }
        );
        let current: String = conn
            .query_row(
                "SELECT content FROM messages WHERE thread_id = ?1 AND ordinal = 1 AND is_current = 1",
                [&batch[0].thread_id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(current, "first draft answer");
        let last: String = conn
            .query_row(
                "SELECT last_seen_at FROM threads WHERE id = ?1",
                [&batch[0].thread_id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(last, "2026-11-20T09:01:00.000Z");
        assert_eq!(
            count(&conn, "SELECT count(*) FROM forget_log WHERE whole = 0"),
            1
        );
    }

    /// The same turn as another path renders it: `path`, the site's id, and the text that path gives.
    fn rendered(base: &Observation, path: Path, key: Option<&str>, text: &str) -> Observation {
        let mut o = base.clone();
        o.turn.path = Some(path);
        o.turn.message_key = key.map(str::to_owned);
        o.turn.content = text.to_owned();
        o.turn.content_hash = personkit_shared::ids::content_hash(text, o.turn.role);
        o
    }

    #[test]
    fn a_forgotten_turn_is_refused_in_every_rendering_and_on_every_path() {
        let dom_text = "The capital is Canberra, secret KIWIMARK";
        let other_renderings = [
            (
                Path::Network,
                Some("msg-7"),
                "The capital is **Canberra**, secret KIWIMARK",
            ),
            (
                Path::Export,
                Some("msg-7"),
                "The capital is *Canberra*, secret `KIWIMARK`.",
            ),
            (
                Path::Harvest,
                None,
                "The capital is Canberra — secret KIWIMARK!",
            ),
            (
                Path::Dom,
                None,
                "The capital is\n\nCanberra, secret KIWIMARK",
            ),
        ];
        for (path, key, text) in other_renderings {
            let (_d, mut conn, _) = corpus();
            let dom = obs(
                "browser-ext:chatgpt",
                "k",
                dom_text,
                1,
                "2026-11-22T09:00:00Z",
            );
            let question = obs(
                "browser-ext:chatgpt",
                "k",
                "What is the capital?",
                0,
                "2026-11-22T08:59:00Z",
            );
            ingest_observations(&mut conn, &origin(), &[question, dom.clone()], NOW).unwrap();
            forget(&mut conn, &Selection::thread(&dom.thread_id), NOW).unwrap();
            let again = rendered(&dom, path, key, text);
            let r = ingest_observations(&mut conn, &origin(), &[again], NOW).unwrap();
            assert_eq!((r.stored, r.duplicate), (0, 1), "{path:?}: {text}");
            assert_eq!(
                count(
                    &conn,
                    "SELECT count(*) FROM messages WHERE content LIKE '%KIWIMARK%'"
                ),
                0,
                "{path:?}: {text}"
            );
            // Other words in the same thread are a new turn, and the same words as another role are too.
            let new = obs(
                "browser-ext:chatgpt",
                "k",
                "The capital is Sydney",
                1,
                "2026-11-22T09:05:00Z",
            );
            let mut as_user = dom.clone();
            as_user.turn.role = Role::User;
            as_user.turn.content_hash = personkit_shared::ids::content_hash(dom_text, Role::User);
            let r = ingest_observations(&mut conn, &origin(), &[new, as_user], NOW).unwrap();
            assert_eq!(r.stored, 2);
        }
    }

    #[test]
    fn a_words_tombstone_from_a_peer_removes_the_rendering_stored_here() {
        let (_d, mut conn, _) = corpus();
        let dom = obs(
            "browser-ext:chatgpt",
            "k",
            "The capital is Canberra",
            1,
            "2026-11-22T09:00:00Z",
        );
        let net = rendered(
            &dom,
            Path::Network,
            Some("m1"),
            "The capital is **Canberra**",
        );
        ingest_observations(&mut conn, &origin(), &[net], NOW).unwrap();
        let hash = words_hash(Role::Assistant, &dom.turn.content).unwrap();
        let tx = conn.transaction().unwrap();
        prepare_selection(&tx).unwrap();
        select_named(&tx, &words_tombstone(&dom.thread_id, &hash), &dom.thread_id).unwrap();
        // Named in another thread, it names nothing.
        select_named(&tx, &words_tombstone("other", &hash), "other").unwrap();
        let n: u64 = tx
            .query_row("SELECT count(*) FROM forget_sel", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1);
    }

    #[test]
    fn nothing_is_forgotten_without_a_selection() {
        let (_d, mut conn, _) = corpus();
        assert!(matches!(
            forget(&mut conn, &Selection::default(), NOW),
            Err(ForgetError::EmptySelection)
        ));
        let site = Selection {
            surface: Some("browser-ext:claude".into()),
            ..Selection::default()
        };
        assert_eq!(preview(&conn, &site).unwrap().messages, 1);
        assert_eq!(
            count(&conn, "SELECT count(*) FROM messages"),
            5,
            "preview changes nothing"
        );
    }

    #[test]
    fn a_forgotten_threads_events_go_and_others_stay() {
        let (_d, mut conn, batch) = corpus();
        let (a, b) = (batch[0].thread_id.clone(), batch[3].thread_id.clone());
        let ev = |thread: &str, kind: &str| crate::events::NewEvent {
            kind: kind.into(),
            source_surface: "browser-ext:chatgpt".into(),
            content: format!("{kind} of {thread}"),
            key: thread.into(),
            occurred_at: NOW,
            attrs: serde_json::json!({"thread_id": thread}),
        };
        let unrelated = crate::events::NewEvent {
            attrs: serde_json::json!({"repo": "kite"}),
            key: "kite@1".into(),
            ..ev("", "git.commit")
        };
        crate::events::insert_batch(
            &conn,
            &[
                ev(&a, "thread.started"),
                ev(&a, "session.ended"),
                ev(&b, "thread.started"),
                unrelated,
            ],
            NOW,
        )
        .unwrap();
        let pk: i64 = conn
            .query_row("SELECT min(pk) FROM events", [], |r| r.get(0))
            .unwrap();
        conn.execute(
            "INSERT INTO search_vec_state(kind, pk, text_hash, model_key, dim) VALUES ('event', ?1, 'h', 'm', 384)",
            [pk],
        )
        .unwrap();
        forget(&mut conn, &Selection::thread(&a), NOW).unwrap();
        let left: Vec<String> = conn
            .prepare("SELECT kind || ':' || coalesce(json_extract(attrs, '$.thread_id'), '-') FROM events ORDER BY pk")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            left,
            vec![format!("thread.started:{b}"), "git.commit:-".to_owned()]
        );
        assert_eq!(
            count(
                &conn,
                "SELECT count(*) FROM events_fts WHERE events_fts MATCH 'session'"
            ),
            0
        );
        assert_eq!(
            count(
                &conn,
                "SELECT count(*) FROM search_vec_state WHERE kind = 'event'"
            ),
            0
        );
        assert_eq!(count(&conn, "SELECT count(*) FROM events_forgetting"), 0);
        // And the rest stays append-only.
        assert!(conn.execute("DELETE FROM events", []).is_err());
    }
}
