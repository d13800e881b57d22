//! `personkit-relay` is the relay: the HTTP server that receives observations from paired devices and keeps the
//! user's corpus in one SQLite file, and the `personkit` CLI over that corpus. The library holds everything
//! (config, corpus access and migrations, ingest, pairing and auth, capture health, the axum router, the CLI);
//! `src/main.rs` is a thin binary around [`cli::main`].
//!
//! It is not the wire format (that is `personkit-shared`, which also computes every hash and id) and it does not
//! run in the browser. **Architecture invariant:** only this crate knows SQL.

pub mod api;
pub mod auth;
pub mod cli;
pub mod clock;
pub mod config;
pub mod corpus;
pub mod db;
pub mod embed;
pub mod health;
pub mod ingest;
pub mod migrations;
pub mod ratelimit;
pub mod search;
pub mod server;

#[cfg(test)]
mod api_tests;
