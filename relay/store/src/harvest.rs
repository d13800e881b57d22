//! What the harvesters of local AI-tool transcripts remember between runs (`personkit_import::harvest`): which
//! sources the user enabled and where they live, the folders the aider source reads, and how far each file was
//! read. Machine-local: none of it travels in a snapshot or to another relay. The turns themselves are stored
//! by `ingest` like every other capture path's.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use time::OffsetDateTime;

use crate::clock::fmt_time;
use crate::db::DbError;

/// One source's settings and last run, as `personkit harvest list` shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SourceRow {
    pub name: String,
    pub enabled: bool,
    /// A path replacing the source's default under the home folder.
    pub path: Option<String>,
    pub last_run_at: Option<String>,
    /// The last problem a run had, prefixed by that run's time.
    pub last_error: Option<String>,
    /// Files read (new or grown) and turns taken from them, over every run.
    pub files_read: u64,
    pub turns_read: u64,
}

/// The stored sources (a source never enabled or configured has no row).
pub fn sources(conn: &Connection) -> Result<Vec<SourceRow>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, enabled, path, last_run_at, last_error, files_read, turns_read
         FROM harvest_sources ORDER BY name",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok(SourceRow {
                name: r.get(0)?,
                enabled: r.get::<_, i64>(1)? != 0,
                path: r.get(2)?,
                last_run_at: r.get(3)?,
                last_error: r.get(4)?,
                files_read: r.get(5)?,
                turns_read: r.get(6)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Turns a source on or off.
pub fn set_enabled(conn: &Connection, name: &str, enabled: bool) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO harvest_sources(name, enabled) VALUES (?1, ?2)
         ON CONFLICT(name) DO UPDATE SET enabled = ?2",
    )?
    .execute(params![name, enabled as i64])?;
    Ok(())
}

/// Sets (or with `None` clears) the path that replaces a source's default.
pub fn set_path(conn: &Connection, name: &str, path: Option<&str>) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO harvest_sources(name, path) VALUES (?1, ?2)
         ON CONFLICT(name) DO UPDATE SET path = ?2",
    )?
    .execute(params![name, path])?;
    Ok(())
}

/// Records the end of a run of one source: when, what it read, and its first problem. The last problem stays
/// (with the time of its run) until a later run has one of its own, so a problem reported once is not lost.
pub fn record_run(
    conn: &Connection,
    name: &str,
    at: OffsetDateTime,
    files_read: u64,
    turns_read: u64,
    error: Option<&str>,
) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO harvest_sources(name, last_run_at, last_error, files_read, turns_read)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT(name) DO UPDATE SET last_run_at = ?2, last_error = coalesce(?3, last_error),
            files_read = files_read + ?4, turns_read = turns_read + ?5",
    )?
    .execute(params![
        name,
        fmt_time(at),
        error.map(|e| format!("{}: {e}", fmt_time(at))),
        files_read as i64,
        turns_read as i64
    ])?;
    Ok(())
}

/// The folders the aider source reads, in the order added.
pub fn folders(conn: &Connection) -> Result<Vec<String>, DbError> {
    let mut stmt =
        conn.prepare_cached("SELECT path FROM harvest_folders ORDER BY added_at, path")?;
    let rows = stmt
        .query_map([], |r| r.get(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Adds a folder; true when it was not there yet.
pub fn add_folder(conn: &Connection, path: &str, at: OffsetDateTime) -> Result<bool, DbError> {
    let n = conn
        .prepare_cached("INSERT OR IGNORE INTO harvest_folders(path, added_at) VALUES (?1, ?2)")?
        .execute(params![path, fmt_time(at)])?;
    Ok(n > 0)
}

/// Removes a folder; true when it was there.
pub fn remove_folder(conn: &Connection, path: &str) -> Result<bool, DbError> {
    let n = conn
        .prepare_cached("DELETE FROM harvest_folders WHERE path = ?1")?
        .execute([path])?;
    Ok(n > 0)
}

/// How far one file was read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FileRow {
    pub source: String,
    pub path: String,
    /// `device:inode` where the OS has them.
    pub file_id: Option<String>,
    pub size: u64,
    pub mtime_ms: Option<i64>,
    /// Byte offset after the last complete line (or, for whole-file formats, the size read).
    pub read_to: u64,
    /// Lines before `read_to` (for messages naming a line).
    pub lines: u64,
    /// sha256 (hex) of the first `min(read_to, 4096)` bytes, or of the whole file for whole-file formats.
    pub prefix_hash: Option<String>,
    /// The parser's carried state, JSON.
    pub meta: String,
    /// Turns taken from this file over every run.
    pub turns: u64,
    pub read_at: String,
}

/// The stored state of one file, if it was read before.
pub fn file(conn: &Connection, source: &str, path: &str) -> Result<Option<FileRow>, DbError> {
    let row = conn
        .prepare_cached(
            "SELECT file_id, size, mtime_ms, read_to, lines, prefix_hash, meta, turns, read_at
             FROM harvest_files WHERE source = ?1 AND path = ?2",
        )?
        .query_row(params![source, path], |r| {
            Ok(FileRow {
                source: source.to_owned(),
                path: path.to_owned(),
                file_id: r.get(0)?,
                size: r.get(1)?,
                mtime_ms: r.get(2)?,
                read_to: r.get(3)?,
                lines: r.get(4)?,
                prefix_hash: r.get(5)?,
                meta: r.get(6)?,
                turns: r.get(7)?,
                read_at: r.get(8)?,
            })
        })
        .optional()?;
    Ok(row)
}

/// Saves the state of one file (after its turns were stored).
pub fn save_file(conn: &Connection, f: &FileRow) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO harvest_files(source, path, file_id, size, mtime_ms, read_to, lines, prefix_hash, meta,
            turns, read_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
         ON CONFLICT(source, path) DO UPDATE SET file_id = ?3, size = ?4, mtime_ms = ?5, read_to = ?6,
            lines = ?7, prefix_hash = ?8, meta = ?9, turns = ?10, read_at = ?11, gone_at = NULL",
    )?
    .execute(params![
        f.source,
        f.path,
        f.file_id,
        f.size as i64,
        f.mtime_ms,
        f.read_to as i64,
        f.lines as i64,
        f.prefix_hash,
        f.meta,
        f.turns as i64,
        f.read_at
    ])?;
    Ok(())
}

/// Saves a file's state and the threads its stored turns went to ([`link_threads`]) in one transaction: one sync
/// to disk for both.
pub fn save_file_and_threads(
    conn: &mut Connection,
    f: &FileRow,
    threads: &[String],
) -> Result<(), DbError> {
    let tx = conn.transaction()?;
    link_threads(&tx, &f.source, &f.path, threads)?;
    save_file(&tx, f)?;
    tx.commit()?;
    Ok(())
}

/// Files known for a source, and the turns taken from them.
pub fn file_totals(conn: &Connection, source: &str) -> Result<(u64, u64), DbError> {
    Ok(conn
        .prepare_cached(
            "SELECT count(*), coalesce(sum(turns), 0) FROM harvest_files WHERE source = ?1",
        )?
        .query_row([source], |r| Ok((r.get(0)?, r.get(1)?)))?)
}

/// Records the threads a file's turns went to.
pub fn link_threads(
    conn: &Connection,
    source: &str,
    path: &str,
    threads: &[String],
) -> Result<(), DbError> {
    let mut stmt = conn.prepare_cached(
        "INSERT OR IGNORE INTO harvest_file_threads(source, path, thread_id) VALUES (?1, ?2, ?3)",
    )?;
    for t in threads {
        stmt.execute(params![source, path, t])?;
    }
    Ok(())
}

/// The paths of a source's known files that are not yet marked gone.
pub fn present_paths(conn: &Connection, source: &str) -> Result<Vec<String>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT path FROM harvest_files WHERE source = ?1 AND gone_at IS NULL ORDER BY path",
    )?;
    let rows = stmt
        .query_map([source], |r| r.get(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Marks a file found gone from disk at `at`.
pub fn mark_gone(
    conn: &Connection,
    source: &str,
    path: &str,
    at: OffsetDateTime,
) -> Result<(), DbError> {
    conn.prepare_cached(
        "UPDATE harvest_files SET gone_at = ?3 WHERE source = ?1 AND path = ?2 AND gone_at IS NULL",
    )?
    .execute(params![source, path, fmt_time(at)])?;
    Ok(())
}

/// A thread whose every harvested file is gone from disk: the corpus holds the only copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OnlyCopy {
    pub thread_id: String,
    pub source: String,
    /// When the last of its files was found gone.
    pub gone_at: String,
}

const ONLY_COPY: &str = "SELECT l.thread_id, min(l.source), max(f.gone_at)
     FROM harvest_file_threads l JOIN harvest_files f ON f.source = l.source AND f.path = l.path
     WHERE l.thread_id IN (SELECT thread_id FROM harvest_file_threads WHERE thread_id = ?1 OR ?1 IS NULL)
     GROUP BY l.thread_id
     HAVING count(*) = count(f.gone_at)
     ORDER BY l.thread_id";

fn only_copy_rows(conn: &Connection, thread: Option<&str>) -> Result<Vec<OnlyCopy>, DbError> {
    let mut stmt = conn.prepare_cached(ONLY_COPY)?;
    let rows = stmt
        .query_map(params![thread], |r| {
            Ok(OnlyCopy {
                thread_id: r.get(0)?,
                source: r.get(1)?,
                gone_at: r.get(2)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Every thread the corpus holds the only copy of.
pub fn only_copies(conn: &Connection) -> Result<Vec<OnlyCopy>, DbError> {
    only_copy_rows(conn, None)
}

/// Whether the corpus holds the only copy of `thread_id`.
pub fn only_copy(conn: &Connection, thread_id: &str) -> Result<Option<OnlyCopy>, DbError> {
    Ok(only_copy_rows(conn, Some(thread_id))?.into_iter().next())
}

/// Most thread ids one [`thread_files`] call takes.
pub const MAX_THREAD_IDS: usize = 10_000;
/// Most files [`thread_files`] answers per thread.
const FILES_PER_THREAD: i64 = 64;

/// The transcript files each of `thread_ids` was read from, as `(thread, source, path)` in the order the ids were
/// given, each thread's files by source and path (at most 64 a thread); threads no harvester wrote have none.
/// More than [`MAX_THREAD_IDS`] ids is refused.
pub fn thread_files(
    conn: &Connection,
    thread_ids: &[String],
) -> Result<Vec<(String, String, String)>, DbError> {
    if thread_ids.len() > MAX_THREAD_IDS {
        return Err(DbError::Invalid(format!(
            "{} thread ids at once is more than {MAX_THREAD_IDS}: ask in smaller batches",
            thread_ids.len()
        )));
    }
    let mut stmt = conn.prepare_cached(
        "SELECT source, path FROM harvest_file_threads WHERE thread_id = ?1
         ORDER BY source, path LIMIT ?2",
    )?;
    let mut out = Vec::new();
    for t in thread_ids {
        let rows = stmt.query_map(params![t, FILES_PER_THREAD], |r| {
            Ok((t.clone(), r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?;
        for row in rows {
            out.push(row?);
        }
    }
    Ok(out)
}

/// Saves the retention warnings of a source's last pass (a JSON list).
pub fn set_warnings(conn: &Connection, name: &str, warnings_json: &str) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO harvest_sources(name, warnings) VALUES (?1, ?2)
         ON CONFLICT(name) DO UPDATE SET warnings = ?2",
    )?
    .execute(params![name, warnings_json])?;
    Ok(())
}

/// Every source's warnings of its last pass: (source, JSON list), sources without any left out.
pub fn warnings(conn: &Connection) -> Result<Vec<(String, String)>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, warnings FROM harvest_sources WHERE warnings != '[]' ORDER BY name",
    )?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn sources_folders_and_files_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::db::open(&dir.path().join("c.db")).unwrap();
        assert!(sources(&conn).unwrap().is_empty());
        set_enabled(&conn, "codex", true).unwrap();
        set_path(&conn, "codex", Some("/x/sessions")).unwrap();
        let at = datetime!(2026-11-23 12:00 UTC);
        record_run(&conn, "codex", at, 2, 7, None).unwrap();
        record_run(&conn, "codex", at, 1, 1, Some("a.jsonl line 3: not JSON")).unwrap();
        let s = &sources(&conn).unwrap()[0];
        assert!(s.enabled);
        assert_eq!(s.path.as_deref(), Some("/x/sessions"));
        assert_eq!((s.files_read, s.turns_read), (3, 8));
        assert_eq!(
            s.last_error.as_deref(),
            Some("2026-11-23T12:00:00.000Z: a.jsonl line 3: not JSON")
        );
        record_run(&conn, "codex", at, 0, 0, None).unwrap();
        assert!(sources(&conn).unwrap()[0].last_error.is_some(), "kept");
        set_enabled(&conn, "codex", false).unwrap();
        assert!(!sources(&conn).unwrap()[0].enabled);

        assert!(add_folder(&conn, "/p", at).unwrap());
        assert!(!add_folder(&conn, "/p", at).unwrap());
        assert_eq!(folders(&conn).unwrap(), vec!["/p".to_owned()]);
        assert!(remove_folder(&conn, "/p").unwrap());
        assert!(folders(&conn).unwrap().is_empty());

        assert_eq!(file(&conn, "codex", "/f").unwrap(), None);
        let mut f = FileRow {
            source: "codex".into(),
            path: "/f".into(),
            size: 10,
            read_to: 8,
            lines: 2,
            meta: "{}".into(),
            turns: 2,
            read_at: fmt_time(at),
            ..FileRow::default()
        };
        save_file(&conn, &f).unwrap();
        f.read_to = 10;
        save_file(&conn, &f).unwrap();
        assert_eq!(file(&conn, "codex", "/f").unwrap(), Some(f));
        assert_eq!(file_totals(&conn, "codex").unwrap(), (1, 2));
    }

    #[test]
    fn thread_files_answers_each_threads_files_in_the_order_asked() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::db::open(&dir.path().join("c.db")).unwrap();
        let (a, b) = (
            "/h/.claude/projects/-src-kite/a.jsonl",
            "/h/.codex/sessions/2026/11/28/rollout-1.jsonl",
        );
        link_threads(&conn, "claude-code", a, &["t1".into(), "t2".into()]).unwrap();
        link_threads(&conn, "codex", b, &["t2".into()]).unwrap();
        let got = thread_files(&conn, &["t2".into(), "none".into(), "t1".into()]).unwrap();
        let want = [
            ("t2", "claude-code", a),
            ("t2", "codex", b),
            ("t1", "claude-code", a),
        ];
        assert_eq!(
            got,
            want.map(|(t, s, p)| (t.to_owned(), s.to_owned(), p.to_owned()))
        );
        assert!(thread_files(&conn, &[]).unwrap().is_empty());
        let too_many = vec![String::from("t"); MAX_THREAD_IDS + 1];
        assert!(matches!(
            thread_files(&conn, &too_many),
            Err(DbError::Invalid(_))
        ));
    }
}
