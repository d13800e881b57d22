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
    /// The machine's offset from UTC, read at start (where a day begins for memory and Today).
    pub local: time::UtcOffset,
    /// The user's profile file (`personkit_memory::profile`).
    pub profile_path: std::path::PathBuf,
    /// Held while a memory tier is distilled (by a request or the schedule): one at a time.
    pub memory_busy: Arc<tokio::sync::Mutex<()>>,
    /// `[search]` of the settings file: the fusion a query uses when it names none.
    pub search: personkit_search::settings::Settings,
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
            local: time::UtcOffset::UTC,
            profile_path: personkit_memory::profile::path(),
            memory_busy: Arc::default(),
            search: personkit_search::settings::Settings::default(),
        }
    }

    /// The same state with these search settings.
    pub fn with_search(mut self, search: personkit_search::settings::Settings) -> AppState {
        self.search = search;
        self
    }

    /// The same state reading and writing the profile at `path`.
    pub fn with_profile_path(mut self, path: std::path::PathBuf) -> AppState {
        self.profile_path = path;
        self
    }

    /// The same state cutting days at `local`.
    pub fn with_local(mut self, local: time::UtcOffset) -> AppState {
        self.local = local;
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
