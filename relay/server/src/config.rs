//! Configuration of the server and defaults shared by the CLI: where the corpus lives, where to listen, limits.

use std::path::PathBuf;

use personkit_shared::wire::{DEFAULT_MAX_BATCH_BYTES, DEFAULT_MAX_BATCH_ITEMS};

pub const DEFAULT_ADDR: &str = "127.0.0.1:8787";
/// Requests per second per device token, and the burst allowed above it.
pub const DEFAULT_RATE_LIMIT: f64 = 50.0;
pub const DEFAULT_RATE_BURST: f64 = 200.0;
pub const DEFAULT_BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `~/.dotperson/corpus.db` (or `./.dotperson/corpus.db` when there is no home directory).
pub fn default_db_path() -> PathBuf {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".dotperson").join("corpus.db")
}

/// Limits and rates the HTTP API enforces.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiConfig {
    pub max_batch_items: usize,
    pub max_batch_bytes: usize,
    /// Requests per second per token; 0 disables the limiter.
    pub rate_limit: f64,
    pub rate_burst: f64,
    /// Longest time a client may take to send a request body (slow senders get 408).
    pub body_timeout: std::time::Duration,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            max_batch_items: DEFAULT_MAX_BATCH_ITEMS,
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            rate_limit: DEFAULT_RATE_LIMIT,
            rate_burst: DEFAULT_RATE_BURST,
            body_timeout: DEFAULT_BODY_TIMEOUT,
        }
    }
}
