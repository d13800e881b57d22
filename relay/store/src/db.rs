//! Opening a corpus: SQLite pragmas, the sqlite-vec extension, migrations; and `Db`, the connection set the
//! server shares between requests (one writer, a few readers).
//!
//! **Architecture invariant:** every connection to a corpus is made by [`open`], so every connection has WAL,
//! `synchronous=FULL`, foreign keys, a busy timeout and sqlite-vec. An acknowledgement is sent only after a
//! commit on such a connection, which in WAL mode with `synchronous=FULL` has been fsynced to the WAL.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use rusqlite::Connection;

use crate::{budget, migrations};

/// How long a connection waits for another writer before failing with `SQLITE_BUSY`.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Prepared statements kept per connection (rusqlite's default is 16; an ingest batch uses about 20).
const STATEMENT_CACHE: usize = 64;

/// Page cache of a connection opened by [`open`] (a writer), in KiB.
const WRITER_CACHE_KIB: i64 = 64 * 1024;

/// Readers kept open for reuse.
const MAX_IDLE_READERS: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("cannot create the corpus directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("migration {name} failed: {source}")]
    Migration {
        name: &'static str,
        source: rusqlite::Error,
    },
    #[error(
        "the corpus has schema version {found} but this personkit knows only up to {supported}"
    )]
    TooNew { found: u32, supported: u32 },
    /// A caller handed the store something it cannot hold (a vector of the wrong dimension, ...).
    #[error("{0}")]
    Invalid(String),
    #[error("no corpus at {0}")]
    Missing(PathBuf),
    #[error("{0} is not a personkit corpus (it has no schema version)")]
    NotACorpus(PathBuf),
    #[error(
        "the corpus has schema version {found}; this personkit reads version {latest}: start `personkit serve` on it once to upgrade it"
    )]
    NeedsUpgrade { found: u32, latest: u32 },
    #[error("another relay (pid {pid}, {addr}) is serving {path}")]
    InUse {
        path: PathBuf,
        pid: String,
        addr: String,
    },
    #[error("cannot lock {path}: {source}")]
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl DbError {
    /// Whether a statement stopped because its read's budget was spent, its client went away or the relay is
    /// stopping ([`budget`]): the request was too costly or is no longer wanted, not a broken corpus.
    pub fn is_interrupted(&self) -> bool {
        matches!(self, DbError::Sqlite(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::OperationInterrupted)
    }
}

/// Register sqlite-vec as an auto extension, once per process, so that every connection opened afterwards has
/// `vec0` and `vec_*` functions. [`open`] calls it; `main` calls it at start.
pub fn register_sqlite_vec() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: `sqlite3_vec_init` is the extension entry point with the signature SQLite expects of an auto
        // extension (`int (*)(sqlite3*, char**, const sqlite3_api_routines*)`); the crate declares it without
        // arguments, so we cast the function pointer, which is what sqlite-vec's own documentation does.
        #[allow(unsafe_code)]
        unsafe {
            type ExtInit = unsafe extern "C" fn(
                *mut rusqlite::ffi::sqlite3,
                *mut *mut std::os::raw::c_char,
                *const rusqlite::ffi::sqlite3_api_routines,
            ) -> std::os::raw::c_int;
            let init: ExtInit = std::mem::transmute::<*const (), ExtInit>(
                sqlite_vec::sqlite3_vec_init as *const (),
            );
            rusqlite::ffi::sqlite3_auto_extension(Some(init));
        }
    });
}

/// Set the pragmas every corpus connection needs.
pub fn configure(conn: &Connection) -> Result<(), DbError> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") && !mode.eq_ignore_ascii_case("memory") {
        tracing::warn!(journal_mode = %mode, "corpus is not in WAL mode");
    }
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Room for every statement an ingest batch runs, so none is prepared again in every batch.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(())
}

/// Open (creating if needed) the corpus at `path`: make its directory, set pragmas, apply migrations, make sure
/// the corpus has a `relay_id`.
pub fn open(path: &Path) -> Result<Connection, DbError> {
    register_sqlite_vec();
    ensure_parent_dir(path)?;
    let existed = path.exists();
    let mut conn = Connection::open(path)?;
    if !existed {
        // The corpus is private: owner-only. SQLite gives the -wal/-shm files the same mode.
        make_private(path);
    }
    configure(&conn)?;
    // A writer's page cache: ingest touches the message table, its indexes and the FTS segments in every batch;
    // with SQLite's default 2 MiB they evict each other and come back through read calls. Filled only as pages
    // are used; durability is unchanged.
    conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)?;
    // A statement that fires triggers or writes many rows (a thread upsert, a message update, the FTS flush) makes
    // SQLite keep a statement journal to undo that one statement if it fails. By default the journal spills to a
    // temporary file once a statement touches more than 64 KiB, and then every page the rest of the transaction
    // changes is first written there. The statement journal is never read after a crash (the WAL is), so keeping
    // it in memory costs nothing in durability.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    migrations::apply(&mut conn)?;
    ensure_relay_id(&conn)?;
    // Messages committed without their index and feed entries (a write path that skipped `pending::commit`, or
    // rows added with another SQLite tool) get them now.
    crate::pending::repair(&mut conn)?;
    Ok(conn)
}

/// Makes the folder of `path` (owner-only) when it does not exist yet.
fn ensure_parent_dir(path: &Path) -> Result<(), DbError> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.exists() => create_private_dir(dir)
            .map_err(|source| DbError::CreateDir {
                path: dir.to_path_buf(),
                source,
            }),
        _ => Ok(()),
    }
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

fn make_private(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
            tracing::warn!(error = %e, "cannot make the corpus file owner-only");
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// Open an existing corpus for reading only: never creates, migrates or writes anything, so it works on a file
/// another process serves, on a read-only file and on a read-only mount (where SQLite cannot create the WAL's
/// shared-memory file, the corpus is opened as immutable: what a crashed writer left in the WAL is not seen).
pub fn open_read_only(path: &Path) -> Result<Connection, DbError> {
    use rusqlite::OpenFlags;
    register_sqlite_vec();
    if !path.is_file() {
        return Err(DbError::Missing(path.to_path_buf()));
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let first = Connection::open_with_flags(path, flags).and_then(|c| {
        c.busy_timeout(BUSY_TIMEOUT)?;
        let v: u32 = c.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        Ok((c, v))
    });
    let (conn, version) = match first {
        Ok(cv) => cv,
        Err(e) if is_read_only_fs(&e) => {
            let uri = format!("file:{}?immutable=1", uri_path(path));
            let c = Connection::open_with_flags(uri, flags)?;
            let v: u32 = c.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            (c, v)
        }
        Err(e) => return Err(e.into()),
    };
    let latest = migrations::latest_version();
    match version {
        0 => Err(DbError::NotACorpus(path.to_path_buf())),
        v if v > latest => Err(DbError::TooNew {
            found: v,
            supported: latest,
        }),
        v if v < latest => Err(DbError::NeedsUpgrade { found: v, latest }),
        _ => Ok(conn),
    }
}

/// Open an existing corpus for writing (migrating it if needed); never turns a missing file, or a file that is
/// not a corpus, into one.
pub fn open_existing(path: &Path) -> Result<Connection, DbError> {
    match open_read_only(path) {
        Ok(_) | Err(DbError::NeedsUpgrade { .. }) => open(path),
        Err(e) => Err(e),
    }
}

/// SQLite's answers when a read-only open cannot set up WAL shared memory on a read-only file system.
fn is_read_only_fs(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen)
    )
}

/// `path` as the path part of a `file:` URI (`%`, `?` and `#` escaped).
fn uri_path(path: &Path) -> String {
    path.to_string_lossy()
        .replace('%', "%25")
        .replace('?', "%3f")
        .replace('#', "%23")
}

/// Held by the one `serve` process of a corpus: an exclusive lock on `<corpus>.lock`, which records that
/// process's pid and address. The operating system releases it when the process ends, however it ends.
#[derive(Debug)]
pub struct ServeLock {
    file: std::fs::File,
}

impl ServeLock {
    /// Takes the lock, or says which process holds it.
    pub fn acquire(corpus: &Path) -> Result<ServeLock, DbError> {
        let path = lock_path(corpus);
        let lock_err = |source| DbError::Lock {
            path: path.clone(),
            source,
        };
        ensure_parent_dir(corpus)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(lock_err)?;
        match file.try_lock() {
            Ok(()) => Ok(ServeLock { file }),
            Err(std::fs::TryLockError::WouldBlock) => {
                let held = std::fs::read_to_string(&path).unwrap_or_default();
                let mut parts = held.split_whitespace();
                Err(DbError::InUse {
                    path: corpus.to_path_buf(),
                    pid: parts.next().unwrap_or("?").to_owned(),
                    addr: parts.next().unwrap_or("address unknown").to_owned(),
                })
            }
            Err(std::fs::TryLockError::Error(e)) => Err(lock_err(e)),
        }
    }

    /// Records this process's pid and address in the lock file, for the message another `serve` prints.
    pub fn record(&mut self, addr: &str) -> std::io::Result<()> {
        use std::io::{Seek, Write};
        self.file.set_len(0)?;
        self.file.seek(std::io::SeekFrom::Start(0))?;
        writeln!(self.file, "{} {addr}", std::process::id())?;
        self.file.flush()
    }
}

fn lock_path(corpus: &Path) -> PathBuf {
    let mut p = corpus.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// Open a second connection to an already-migrated corpus (no migration check beyond the version read).
fn open_reader(path: &Path) -> Result<Connection, DbError> {
    register_sqlite_vec();
    let conn = Connection::open(path)?;
    configure(&conn)?;
    Ok(conn)
}

/// Begins a write transaction that takes the write lock at once. A deferred transaction that reads before it
/// writes fails at its first write, without waiting, when another connection (a background job, the relay's
/// writer) committed in between; an immediate one waits its turn under the busy timeout instead.
pub fn begin_write(conn: &Connection) -> Result<rusqlite::Transaction<'_>, DbError> {
    Ok(rusqlite::Transaction::new_unchecked(
        conn,
        rusqlite::TransactionBehavior::Immediate,
    )?)
}

/// This corpus's own origin id (a random UUID made when the corpus was created).
pub fn relay_id(conn: &Connection) -> Result<String, DbError> {
    Ok(conn.query_row(
        "SELECT value FROM relay_meta WHERE key = 'relay_id'",
        [],
        |r| r.get(0),
    )?)
}

fn ensure_relay_id(conn: &Connection) -> Result<(), DbError> {
    conn.execute(
        "INSERT OR IGNORE INTO relay_meta(key, value) VALUES ('relay_id', ?1)",
        [uuid::Uuid::new_v4().to_string()],
    )?;
    Ok(())
}

/// Size of the corpus on disk: main file plus WAL, in bytes.
pub fn size_on_disk(path: &Path) -> u64 {
    let main = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    main + std::fs::metadata(PathBuf::from(wal))
        .map(|m| m.len())
        .unwrap_or(0)
}

/// The connections the server shares: one writer (SQLite allows one at a time anyway), a pool of readers, and a
/// checkpointer. Callers run closures on them from blocking threads (`tokio::task::spawn_blocking`).
#[derive(Debug)]
pub struct Db {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
    checkpointer: Checkpointer,
    /// Set by [`Db::interrupt_reads`]: every read running or started afterwards stops at its next check.
    closing: Arc<AtomicBool>,
}

impl Db {
    /// Open the corpus (migrating it) and keep the connection as the writer.
    pub fn open(path: &Path) -> Result<Db, DbError> {
        let writer = open(path)?;
        // The checkpointer copies the WAL into the database file; the writer checkpoints itself only when the
        // WAL has grown past its fallback bound (see `Checkpointer`).
        writer.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES)?;
        let checkpointer = Checkpointer::start(open_reader(path)?)?;
        Ok(Db {
            path: path.to_path_buf(),
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
            checkpointer,
            closing: Arc::new(AtomicBool::new(false)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `f` on the writer connection.
    pub fn write<T, E: From<DbError>>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, E>,
    ) -> Result<T, E> {
        // A panic while the lock was held unwound through `Transaction::drop`, which rolled back: the
        // connection is still consistent, so recover it rather than failing every later write.
        let mut conn = self
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let out = f(&mut conn);
        drop(conn);
        self.checkpointer.nudge();
        out
    }

    /// Run `f` on a reader connection (opened on demand, returned to the pool afterwards), its statements
    /// interrupted after [`budget::READ_BUDGET`] ([`DbError::is_interrupted`]).
    pub fn read<T, E: From<DbError>>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, E>,
    ) -> Result<T, E> {
        self.read_within(&budget::Budget::new(budget::READ_BUDGET), f)
    }

    /// [`Db::read`] under the caller's budget (a request's deadline and cancel flag).
    pub fn read_within<T, E: From<DbError>>(
        &self,
        budget: &budget::Budget,
        f: impl FnOnce(&Connection) -> Result<T, E>,
    ) -> Result<T, E> {
        let budget = budget.clone().with_closing(self.closing.clone());
        if budget.spent() {
            return Err(DbError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_INTERRUPT),
                None,
            ))
            .into());
        }
        let pooled = self
            .readers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        let conn = match pooled {
            Some(c) => c,
            None => open_reader(&self.path)?,
        };
        let out = budget::within(&conn, &budget, f);
        if let Ok(mut pool) = self.readers.lock()
            && pool.len() < MAX_IDLE_READERS
        {
            pool.push(conn);
        }
        out
    }
}

impl Db {
    /// Stops every read now running and refuses new ones: what a relay does when it is told to stop.
    pub fn interrupt_reads(&self) {
        self.closing.store(true, Ordering::Relaxed);
    }
}

/// Pages the WAL may hold before the writer checkpoints it itself (SQLite's default is 1,000).
const WRITER_CHECKPOINT_PAGES: i64 = 4_000;

/// How long the checkpointer lets commits gather before it copies them, so one database fsync covers many.
const CHECKPOINT_PAUSE: Duration = Duration::from_millis(100);

/// A thread with its own connection that copies committed WAL frames into the database file, so a commit does
/// not also pay for the copy and the database fsync (SQLite's automatic checkpoint runs inside the commit that
/// crosses its threshold). Durability is unchanged: a commit is durable once its WAL frames are synced;
/// checkpointing only moves them.
///
/// A checkpoint that runs while the writer keeps appending never finds the WAL wholly copied, and SQLite starts
/// the WAL over only when it does. The writer's own automatic checkpoint, at [`WRITER_CHECKPOINT_PAGES`], is the
/// bound: it runs between two writes, finds most frames already copied, and lets the next write start the WAL
/// from the beginning.
#[derive(Debug)]
struct Checkpointer {
    nudge: Option<std::sync::mpsc::SyncSender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    fn start(conn: Connection) -> Result<Checkpointer, DbError> {
        // The bound is the writer's; this connection never checkpoints on its own commits (it makes none).
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("personkit-checkpoint".into())
            .spawn(move || {
                while rx.recv().is_ok() {
                    std::thread::sleep(CHECKPOINT_PAUSE);
                    while rx.try_recv().is_ok() {}
                    // PASSIVE never waits for readers or the writer; what it cannot copy now, a later run does.
                    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    {
                        tracing::debug!(error = %e, "background checkpoint skipped");
                    }
                }
            })
            .map_err(|e| DbError::Invalid(format!("cannot start the checkpoint thread: {e}")))?;
        Ok(Checkpointer {
            nudge: Some(tx),
            thread: Some(thread),
        })
    }

    /// Something was written: checkpoint soon. Never blocks (a pending nudge already covers this one).
    fn nudge(&self) {
        if let Some(tx) = &self.nudge {
            let _ = tx.try_send(());
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        // Closing the channel ends the thread after its current checkpoint; its connection closes with it.
        self.nudge = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn open_sets_pragmas_and_migrates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/corpus.db");
        let conn = open(&path).unwrap();
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let sync: i64 = conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 2, "synchronous=FULL");
        let fk: i64 = conn
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert_eq!(fk, 1);
        assert_eq!(
            migrations::current_version(&conn).unwrap(),
            migrations::latest_version()
        );
        let v: String = conn
            .query_row("SELECT vec_version()", [], |r| r.get(0))
            .unwrap();
        assert!(v.starts_with('v'), "{v}");
        let id1 = relay_id(&conn).unwrap();
        drop(conn);
        // Re-opening keeps the version and the relay id.
        let conn = open(&path).unwrap();
        assert_eq!(relay_id(&conn).unwrap(), id1);
    }

    #[cfg(unix)]
    #[test]
    fn a_new_corpus_is_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("private/corpus.db");
        let conn = open(&path).unwrap();
        conn.execute_batch("CREATE TEMP TABLE t(x); INSERT INTO relay_meta VALUES ('k', 'v');")
            .unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(mode(&dir.path().join("private/corpus.db-wal")), 0o600);
    }

    #[test]
    fn vec_tables_accept_vectors() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("c.db")).unwrap();
        let v: Vec<f32> = (0..384).map(|i| i as f32 / 384.0).collect();
        let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
        conn.execute(
            "INSERT INTO messages_vec_384(rowid, embedding) VALUES (1, ?1)",
            [bytes.clone()],
        )
        .unwrap();
        let (rowid, dist): (i64, f64) = conn
            .query_row(
                "SELECT rowid, distance FROM messages_vec_384 WHERE embedding MATCH ?1 AND k = 1",
                [bytes],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(rowid, 1);
        assert!(dist.abs() < 1e-5, "{dist}");
    }

    #[test]
    fn events_are_append_only() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("c.db")).unwrap();
        conn.execute(
            "INSERT INTO events(id, kind, source_surface, content, content_hash, minute_bucket, occurred_at,
                 captured_at, origin_device, origin_seq)
             VALUES ('e1', 'note', 'import:x', 'c', 'h', 1, 't', 't', 'd', 1)",
            [],
        )
        .unwrap();
        assert!(conn.execute("DELETE FROM events", []).is_err());
        assert!(conn.execute("UPDATE events SET content = 'x'", []).is_err());
    }

    #[test]
    fn read_only_opens_never_create_or_migrate() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.db");
        assert!(matches!(open_read_only(&missing), Err(DbError::Missing(_))));
        assert!(!missing.exists(), "nothing created");
        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, b"").unwrap();
        assert!(matches!(
            open_read_only(&empty),
            Err(DbError::NotACorpus(_))
        ));
        assert_eq!(
            std::fs::metadata(&empty).unwrap().len(),
            0,
            "nothing written"
        );
        let path = dir.path().join("c.db");
        drop(open(&path).unwrap());
        let ro = open_read_only(&path).unwrap();
        assert!(ro.execute("DELETE FROM devices", []).is_err(), "read only");
        let old = dir.path().join("old.db");
        let c = open(&old).unwrap();
        c.pragma_update(None, "user_version", 2).unwrap();
        drop(c);
        assert!(matches!(
            open_read_only(&old),
            Err(DbError::NeedsUpgrade { found: 2, .. })
        ));
    }

    #[test]
    fn one_serve_lock_per_corpus() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let mut first = ServeLock::acquire(&path).unwrap();
        first.record("http://127.0.0.1:8787").unwrap();
        match ServeLock::acquire(&path) {
            Err(DbError::InUse { pid, addr, .. }) => {
                assert_eq!(pid, std::process::id().to_string());
                assert_eq!(addr, "http://127.0.0.1:8787");
            }
            other => panic!("second lock: {other:?}"),
        }
        drop(first);
        assert!(ServeLock::acquire(&path).is_ok(), "released on drop");
    }

    #[test]
    fn refuses_a_newer_corpus() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let conn = open(&path).unwrap();
        conn.pragma_update(None, "user_version", 999).unwrap();
        drop(conn);
        assert!(matches!(
            open(&path),
            Err(DbError::TooNew { found: 999, .. })
        ));
    }

    /// Writes `txns` transactions of `pages` 4 KiB pages each through the server's writer.
    fn write_pages(db: &Db, txns: usize, pages: usize) {
        db.write(|c| -> Result<(), DbError> {
            c.execute_batch("CREATE TABLE IF NOT EXISTS filler (b BLOB NOT NULL)")?;
            Ok(())
        })
        .unwrap();
        for _ in 0..txns {
            db.write(|c| -> Result<(), DbError> {
                let tx = c.transaction()?;
                for _ in 0..pages {
                    tx.execute("INSERT INTO filler (b) VALUES (randomblob(4000))", [])?;
                }
                tx.commit()?;
                Ok(())
            })
            .unwrap();
        }
    }

    fn file_pages(path: &Path) -> u64 {
        std::fs::metadata(path).map_or(0, |m| m.len()) / 4096
    }

    #[test]
    fn the_checkpointer_copies_committed_pages_into_the_database_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let db = Db::open(&path).unwrap();
        let before = file_pages(&path);
        // 1,500 pages: below the writer's own bound, so only the checkpointer can move them.
        write_pages(&db, 30, 50);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while file_pages(&path) < before + 1_500 {
            assert!(
                std::time::Instant::now() < deadline,
                "the database file still holds {} pages, {} before the writes",
                file_pages(&path),
                before
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let rows: i64 = db
            .read(|c| -> Result<i64, DbError> {
                Ok(c.query_row("SELECT count(*) FROM filler", [], |r| r.get(0))?)
            })
            .unwrap();
        assert_eq!(rows, 1_500);
    }

    #[test]
    fn the_wal_stays_bounded_under_a_stream_of_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let db = Db::open(&path).unwrap();
        // Three times the writer's bound, written back to back.
        write_pages(&db, 240, 50);
        // The WAL file keeps its largest extent. The writer's own checkpoint can find the checkpoint thread
        // holding the lock and run again after its next commit, so the bound has room for a few more commits.
        let wal = file_pages(&dir.path().join("c.db-wal"));
        let bound = WRITER_CHECKPOINT_PAGES as u64 + 1_000;
        assert!(wal <= bound, "WAL of {wal} pages, bound {bound}");
        drop(db);
        let conn = open(&path).unwrap();
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM filler", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 12_000);
    }
}
