//! `personkit-server`: the relay's HTTP server. [`app`] builds the axum router over an [`AppState`] (the corpus,
//! the clock, limits, the embedder and the vector indexes); [`routes`] has one module per route group; [`dashboard`] is the
//! server-rendered library at the relay's root; [`jobs`]
//! runs the background work of a live relay; [`serve`] binds, announces and shuts down.
//!
//! It holds no SQL (it calls `personkit-store`) and no ranking (it calls `personkit-search`).

pub mod config;
pub mod conn;
pub mod dashboard;
pub mod error;
pub mod jobs;
pub mod ratelimit;
pub mod routes;
pub mod serve;
pub mod state;
pub mod today;

pub use error::AppError;
pub use routes::{app, is_extension_origin};
pub use serve::{ServeConfig, TlsFiles, serve, tls_acceptor};
pub use state::{AppState, AuthedDevice};

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_dashboard;
