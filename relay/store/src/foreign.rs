//! Reading another program's SQLite file: the history some AI tools keep (Cursor's `state.vscdb`, OpenCode's
//! `opencode.db`, Goose's `sessions.db`), for the harvesters in `personkit_import::harvest`. This module knows
//! nothing of those tools: it copies a file, and answers bounded selects whose table and column names the caller
//! gives.
//!
//! The tool may be running and writing. Its file is never opened in place: the database and its `-wal` (what was
//! written since the last checkpoint) are copied into a private temporary folder, and the copy is opened. So
//! nothing is written beside the tool's file (no `-shm`, no recovered `-wal`), the tool's locks are never taken,
//! and committed WAL content is seen. A copy taken mid-write can be inconsistent: opening or reading it then fails
//! with an error the caller reports, and the next run copies again. The copy is deleted when the handle drops; its
//! folder is the user's alone, and copies a killed process left are removed a day later.
//!
//! Bounds: the caller caps the file size before copying ([`ForeignDb::open_copy`]); every select has a row limit;
//! a cell larger than [`MAX_CELL`] is not read, it comes back as [`Cell::TooLarge`] with its size.

use std::path::{Path, PathBuf};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

/// The largest text or blob value read from a foreign file.
pub const MAX_CELL: u64 = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ForeignError {
    #[error("the database is {size} MB, more than {max} MB; not read")]
    TooLarge { size: u64, max: u64 },
    #[error("cannot copy the database: {0}")]
    Copy(std::io::Error),
    #[error("cannot read the database: {0}")]
    Sql(#[from] rusqlite::Error),
}

/// One value of a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
    /// A text or blob value of this many bytes, more than [`MAX_CELL`]: not read.
    TooLarge(u64),
}

impl Cell {
    /// The value as text: text as is, a blob when it is UTF-8 (tools store JSON in either).
    pub fn text(&self) -> Option<&str> {
        match self {
            Cell::Text(s) => Some(s),
            Cell::Blob(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    pub fn int(&self) -> Option<i64> {
        match self {
            Cell::Int(i) => Some(*i),
            Cell::Real(f) => Some(*f as i64),
            Cell::Text(s) => s.trim().parse().ok(),
            _ => None,
        }
    }
}

/// A bounded select: `columns` of `table` (a column the table lacks reads as NULL, so an older or newer schema
/// still answers), rows where `eq` holds and whose `prefix` column starts with the text given, in `order`, at
/// most `limit`.
#[derive(Debug, Clone, Default)]
pub struct Select<'a> {
    pub table: &'a str,
    pub columns: &'a [&'a str],
    pub eq: Option<(&'a str, &'a str)>,
    pub prefix: Option<(&'a str, &'a str)>,
    pub order: &'a [&'a str],
    pub limit: usize,
}

/// A private, read-only copy of a foreign SQLite file.
pub struct ForeignDb {
    /// `None` only while dropping: the connection closes before its folder is removed.
    conn: Option<Connection>,
    dir: PathBuf,
}

impl std::fmt::Debug for ForeignDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForeignDb").field("dir", &self.dir).finish()
    }
}

impl Drop for ForeignDb {
    fn drop(&mut self) {
        drop(self.conn.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

impl ForeignDb {
    /// Copies `path` and its `-wal` (when there is one) into a private folder under the system's temporary
    /// folder and opens the copy; refused when the two are more than `max_bytes` together.
    pub fn open_copy(path: &Path, max_bytes: u64) -> Result<ForeignDb, ForeignError> {
        let wal = wal_of(path);
        let size = std::fs::metadata(path).map_err(ForeignError::Copy)?.len()
            + std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
        if size > max_bytes {
            return Err(ForeignError::TooLarge {
                size: size >> 20,
                max: max_bytes >> 20,
            });
        }
        sweep_stale();
        let dir = std::env::temp_dir().join(format!("{COPY_PREFIX}{}", uuid::Uuid::new_v4()));
        private_dir(&dir).map_err(ForeignError::Copy)?;
        let copy = dir.join("copy.db");
        // Dropped on any error below, which removes the folder.
        let guard = Cleanup(dir.clone());
        std::fs::copy(path, &copy).map_err(ForeignError::Copy)?;
        if wal.is_file() {
            std::fs::copy(&wal, wal_of(&copy)).map_err(ForeignError::Copy)?;
        }
        // Read-write on the copy so SQLite can recover its WAL; nothing is ever written to it by us.
        let conn = Connection::open_with_flags(
            &copy,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.execute_batch("PRAGMA query_only = ON;")?;
        // Reading the schema here makes a file that is not a database fail now, with a clear error.
        conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
            r.get::<_, i64>(0)
        })?;
        std::mem::forget(guard);
        Ok(ForeignDb {
            conn: Some(conn),
            dir,
        })
    }

    fn conn(&self) -> Result<&Connection, ForeignError> {
        self.conn
            .as_ref()
            .ok_or(ForeignError::Sql(rusqlite::Error::InvalidQuery))
    }

    /// The columns of `table` (none when there is no such table).
    pub fn columns(&self, table: &str) -> Result<Vec<String>, ForeignError> {
        let mut stmt = self.conn()?.prepare(&format!(
            "SELECT name FROM pragma_table_info({})",
            lit(table)
        ))?;
        let cols = stmt
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(cols)
    }

    pub fn has_table(&self, table: &str) -> Result<bool, ForeignError> {
        Ok(!self.columns(table)?.is_empty())
    }

    /// Runs a [`Select`]; each row has one cell per asked column, in order.
    pub fn rows(&self, q: &Select<'_>) -> Result<Vec<Vec<Cell>>, ForeignError> {
        let have = self.columns(q.table)?;
        let known = |c: &str| have.iter().any(|h| h == c);
        let mut exprs = Vec::new();
        for c in q.columns {
            if known(c) {
                let c = quote(c);
                exprs.push(format!(
                    "CASE WHEN length(CAST({c} AS BLOB)) > {MAX_CELL} THEN NULL ELSE {c} END, \
                     CASE WHEN typeof({c}) IN ('text', 'blob') THEN length(CAST({c} AS BLOB)) END"
                ));
            } else {
                exprs.push("NULL, NULL".into());
            }
        }
        let mut sql = format!("SELECT {} FROM {}", exprs.join(", "), quote(q.table));
        let mut args: Vec<String> = Vec::new();
        let mut conds = Vec::new();
        if let Some((c, v)) = q.eq {
            if !known(c) {
                return Ok(Vec::new());
            }
            args.push(v.to_owned());
            conds.push(format!("{} = ?{}", quote(c), args.len()));
        }
        if let Some((c, p)) = q.prefix {
            if !known(c) {
                return Ok(Vec::new());
            }
            // A range on the text, so the column's index serves it: every text that starts with `p` sorts at or
            // after `p` and before `p` followed by the largest character.
            args.push(p.to_owned());
            conds.push(format!("{} >= ?{}", quote(c), args.len()));
            args.push(format!("{p}{}", char::MAX));
            conds.push(format!("{} < ?{}", quote(c), args.len()));
        }
        if !conds.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conds.join(" AND "));
        }
        let order: Vec<String> = q
            .order
            .iter()
            .filter(|c| known(c))
            .map(|c| quote(c))
            .collect();
        if !order.is_empty() {
            sql.push_str(" ORDER BY ");
            sql.push_str(&order.join(", "));
        }
        sql.push_str(&format!(" LIMIT {}", q.limit));
        let mut stmt = self.conn()?.prepare(&sql)?;
        let n = q.columns.len();
        let rows = stmt
            .query_map(rusqlite::params_from_iter(args.iter()), |r| {
                let mut row = Vec::with_capacity(n);
                for i in 0..n {
                    let len: Option<i64> = r.get(2 * i + 1)?;
                    let cell = match r.get_ref(2 * i)? {
                        ValueRef::Null => match len {
                            Some(l) if l as u64 > MAX_CELL => Cell::TooLarge(l as u64),
                            _ => Cell::Null,
                        },
                        ValueRef::Integer(x) => Cell::Int(x),
                        ValueRef::Real(x) => Cell::Real(x),
                        ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
                        ValueRef::Blob(b) => Cell::Blob(b.to_vec()),
                    };
                    row.push(cell);
                }
                Ok(row)
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}

/// A string literal (for the table-valued pragma, which takes no parameter binding in every SQLite build).
fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The name the copies' folders start with.
const COPY_PREFIX: &str = "personkit-harvest-";

/// A folder only this user can open: the copy holds someone's chat history.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
}

/// Removes copies left behind by a process that was killed while reading (older than a day).
fn sweep_stale() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    let day = std::time::Duration::from_secs(24 * 3600);
    for e in entries.filter_map(Result::ok) {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > day);
        if old && e.file_name().to_string_lossy().starts_with(COPY_PREFIX) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn wal_of(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push("-wal");
    PathBuf::from(s)
}

struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
