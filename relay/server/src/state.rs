//! [`AppState`]: what every handler shares — the corpus, the clock, the API limits and rate limiters, the
//! embedder and the in-memory vector indexes. The server owns them; nothing here is a process global.

use std::sync::Arc;

use personkit_embed::SharedEmbedder;
use personkit_search::Indexes;
use personkit_store::clock::Clock;
use personkit_store::{Db, DbError};

use crate::config::ApiConfig;
use crate::error::AppError;
use crate::ratelimit::RateLimiter;

/// Wrong pairing codes answered per second (all clients together), and their burst; more get 429.
const PAIR_RATE: f64 = 2.0;
const PAIR_BURST: f64 = 20.0;

/// Shared state of the server. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    pub db: Arc<Db>,
    pub clock: Clock,
    pub config: Arc<ApiConfig>,
    /// The embedder of the vector signal (`None`: full text, entities and recency only).
    pub embedder: SharedEmbedder,
    /// The in-memory vector indexes queries search (warmed at `serve` start).
    pub indexes: Indexes,
    pub(crate) limiter: Arc<RateLimiter>,
    pub(crate) pair_limiter: Arc<RateLimiter>,
    /// Told after a commit that added turns, so the sync job runs at once instead of at its next tick.
    pub sync_notify: Arc<tokio::sync::Notify>,
    /// The dashboard's unused CSRF tokens (in memory; the sessions themselves are in the corpus).
    pub(crate) sessions: Arc<crate::dashboard::Sessions>,
    /// This machine's offset from UTC, read where the process started: the days the Today page counts.
    pub local_offset: time::UtcOffset,
}

impl AppState {
    pub fn new(db: Db, config: ApiConfig, clock: Clock) -> AppState {
        AppState {
            db: Arc::new(db),
            clock,
            limiter: Arc::new(RateLimiter::new(config.rate_limit, config.rate_burst)),
            pair_limiter: Arc::new(RateLimiter::new(PAIR_RATE, PAIR_BURST)),
            sessions: Arc::default(),
            sync_notify: Arc::default(),
            config: Arc::new(config),
            embedder: None,
            indexes: Indexes::new(),
            local_offset: time::UtcOffset::UTC,
        }
    }

    /// The same state with local days at this offset from UTC.
    pub fn with_local_offset(mut self, offset: time::UtcOffset) -> AppState {
        self.local_offset = offset;
        self
    }

    /// The same state with this embedder for the vector signal.
    pub fn with_embedder(mut self, embedder: SharedEmbedder) -> AppState {
        self.embedder = embedder;
        self
    }

    /// Run a closure on a reader connection on a blocking thread.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&personkit_store::Connection) -> Result<T, DbError> + Send + 'static,
    ) -> Result<T, AppError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || db.read(f))
            .await
            .map_err(|_| AppError::internal())?
            .map_err(AppError::from)
    }
}

/// The device a request was authenticated as; handlers behind auth take `Extension<AuthedDevice>`.
#[derive(Debug, Clone)]
pub struct AuthedDevice(pub personkit_store::auth::Device);
