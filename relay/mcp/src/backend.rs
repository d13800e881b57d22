//! What the tools read through: a [`ReadAccess`] (the server's connection pool, or one read-only connection for
//! `personkit mcp`), the vector indexes and embedder of whoever serves, and the clock.

use std::sync::{Arc, Mutex};

use personkit_embed::SharedEmbedder;
use personkit_search::Indexes;
use personkit_store::budget::{self, Budget, READ_BUDGET};
use personkit_store::clock::Clock;
use personkit_store::{Connection, Db, DbError};

/// Runs a closure on a connection that reads the corpus.
pub trait ReadAccess: Send + Sync + std::fmt::Debug + 'static {
    /// Runs `f` with its statements stopped once `budget` is spent.
    fn with_reader(&self, budget: &Budget, f: &mut dyn FnMut(&Connection)) -> Result<(), DbError>;
}

/// The server's pool: each call borrows a reader.
impl ReadAccess for Db {
    fn with_reader(&self, budget: &Budget, f: &mut dyn FnMut(&Connection)) -> Result<(), DbError> {
        self.read_within(budget, |c| -> Result<(), DbError> {
            f(c);
            Ok(())
        })
    }
}

/// One connection (opened read-only by `personkit mcp`), used by one call at a time.
#[derive(Debug)]
pub struct SingleReader(Mutex<Connection>);

impl SingleReader {
    pub fn new(conn: Connection) -> SingleReader {
        SingleReader(Mutex::new(conn))
    }
}

impl ReadAccess for SingleReader {
    fn with_reader(&self, budget: &Budget, f: &mut dyn FnMut(&Connection)) -> Result<(), DbError> {
        // A panic in a read leaves nothing half-written (reads write nothing), so a poisoned lock is usable.
        let conn = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        budget::within(&conn, budget, |c| f(c));
        Ok(())
    }
}

/// Everything a tool call needs. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Backend {
    pub access: Arc<dyn ReadAccess>,
    pub indexes: Indexes,
    pub embedder: SharedEmbedder,
    pub clock: Clock,
    /// Where agents' knowledge proposals are filed; `None`: the tool says proposals are not taken.
    pub proposals: Option<crate::knowledge::Proposals>,
    /// The profile `get_context` reads.
    pub profile_path: std::path::PathBuf,
    /// Where the day begins for `get_context`'s today (read at start: the process's local offset).
    pub local: time::UtcOffset,
    /// Where a thread read with `get_thread` or an entity read with `entity` counts as a use for heat; `None`: not
    /// counted.
    pub uses: Option<Uses>,
    /// `[search]` of the settings file (the fusion a search uses).
    pub search: personkit_search::settings::Settings,
}

/// Counts threads and entities read by agents as uses (`personkit_heat`) through the server's writer. `personkit mcp` over
/// stdio reads on a read-only connection and counts nothing.
#[derive(Debug, Clone)]
pub struct Uses {
    db: Arc<Db>,
}

impl Uses {
    /// Over an open writer.
    pub fn over(db: Arc<Db>) -> Uses {
        Uses { db }
    }

    /// One use of the record `id` of `kind` (`thread`, `entity`) at `at`. A failure is logged, never the caller's:
    /// the read it follows succeeded.
    pub(crate) async fn read(&self, kind: &'static str, id: String, at: time::OffsetDateTime) {
        let db = self.db.clone();
        let done = tokio::task::spawn_blocking(move || -> Result<(), String> {
            db.write(|c| personkit_heat::record_access(c, kind, &id, at))
                .map_err(|e| e.to_string())
        })
        .await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(kind, error = %e, "a read was not counted as a use"),
            Err(e) => tracing::warn!(kind, error = %e, "a read was not counted as a use"),
        }
    }
}

/// A failed read, as the tools report it.
#[derive(Debug)]
pub(crate) enum Fail {
    /// Shown to the caller as is: what was wrong with the request and what to do.
    Caller(String),
    /// Logged; the caller gets a generic message.
    Internal(String),
}

impl Backend {
    pub fn new(
        access: Arc<dyn ReadAccess>,
        indexes: Indexes,
        embedder: SharedEmbedder,
        clock: Clock,
    ) -> Backend {
        Backend {
            access,
            indexes,
            embedder,
            clock,
            proposals: None,
            profile_path: personkit_memory::profile::path(),
            local: time::UtcOffset::UTC,
            uses: None,
            search: personkit_search::settings::Settings::default(),
        }
    }

    /// Searches with these settings (the fusion a search uses).
    pub fn with_search(mut self, s: personkit_search::settings::Settings) -> Backend {
        self.search = s;
        self
    }

    /// Counts threads read with `get_thread` as uses through `u`.
    pub fn with_uses(mut self, u: Uses) -> Backend {
        self.uses = Some(u);
        self
    }

    /// Reads the profile at `path` and cuts days at `local`.
    pub fn with_memory(mut self, path: std::path::PathBuf, local: time::UtcOffset) -> Backend {
        self.profile_path = path;
        self.local = local;
        self
    }

    /// Takes agents' knowledge proposals through `p`.
    pub fn with_proposals(mut self, p: crate::knowledge::Proposals) -> Backend {
        self.proposals = Some(p);
        self
    }

    /// Runs `f` on a reader on a blocking thread, within [`READ_BUDGET`]; the read stops early when the call is
    /// dropped (its client went away or cancelled it).
    pub(crate) async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection, &Backend) -> Result<T, Fail> + Send + 'static,
    ) -> Result<T, Fail> {
        let me = self.clone();
        let budget = Budget::new(READ_BUDGET);
        let _stop_if_gone = budget.cancel_on_drop();
        tokio::task::spawn_blocking(move || {
            let mut f = Some(f);
            let mut out = None;
            me.access
                .with_reader(&budget, &mut |c| {
                    if let Some(f) = f.take() {
                        out = Some(f(c, &me));
                    }
                })
                .map_err(|e| Fail::Internal(e.to_string()))?;
            out.unwrap_or_else(|| Err(Fail::Internal("the reader ran nothing".into())))
        })
        .await
        .map_err(|e| Fail::Internal(format!("the read task failed: {e}")))?
    }
}
