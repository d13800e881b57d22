//! `personkit-store` is the corpus: one SQLite file (WAL, `synchronous=FULL`, FTS5, sqlite-vec) and every query the
//! relay runs on it. It opens and migrates the file ([`db`], [`migrations`]), stores batches of observations
//! ([`ingest`], [`pending`]), keeps devices, tokens and sign-in links ([`auth`], [`signin`]), bounds every read in
//! time ([`budget`]), reports capture health ([`health`]), keeps how much each record is used ([`heat`]), forgets for good ([`forget`]), remembers what the
//! harvesters read ([`harvest`]) and reads the SQLite files of the tools they harvest ([`foreign`]), holds sync's
//! and snapshots' rows ([`sync`], [`archive`]), orders a thread's turns ([`order`]), serves every reader of threads
//! and messages ([`read`]), keeps vectors ([`vectors`]), holds the entity graph with every link's source ([`graph`]) and answers the reads hybrid search needs ([`retrieval`]).
//! The rules of features live in the crates that own them; the store answers their traits. With the `bench` feature
//! (benchmarks only), it also bulk-loads synthetic corpora (`bulk`) and keeps a side full-text index for
//! comparisons (`neighbours`); neither is part of the shipped API.
//!
//! **Architecture invariant:** this is the only crate that depends on rusqlite or sqlite-vec, and the only one
//! with SQL in it. Crates above it see functions and traits ([`retrieval::SearchReader`]) whose types are plain
//! Rust values, so a second backend (Postgres, for a multi-user relay) implements the same surface.
//! **Architecture invariant:** times are stored in one fixed-width UTC text form ([`clock::fmt_time`]), so text
//! order is time order; "now" comes from a [`clock::Clock`] the caller passes in.

pub mod archive;
pub mod auth;
pub mod budget;
#[cfg(feature = "bench")]
pub mod bulk;
pub mod clock;
pub mod db;
pub mod events;
pub mod foreign;
pub mod forget;
pub mod graph;
pub mod harvest;
pub mod health;
pub mod heat;
pub mod ingest;
pub mod knowledge;
pub mod memory;
pub mod migrations;
mod named;
#[cfg(feature = "bench")]
pub mod neighbours;
pub mod order;
pub mod pending;
pub mod proposals;
pub mod read;
pub mod retrieval;
pub mod signin;
pub mod sync;
pub mod vectors;

pub use db::{Db, DbError};
/// The connection type callers hand back to this crate's functions. Only this crate runs statements on it.
pub use rusqlite::Connection;
