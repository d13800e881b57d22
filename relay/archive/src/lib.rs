//! `personkit-archive`: what leaves the corpus in open formats and comes back. [`export`] keeps a folder of one
//! Markdown or JSON file per thread ([`render`], named by [`names`]), one of the user's approved knowledge
//! ([`knowledge`]) and one per memory tier and the profile ([`memory`]) in step with the corpus; [`snapshot`] writes
//! and verifies Ed25519-signed JSONL snapshots of [`record`]s, the snapshot's line format. The rows come from
//! `personkit_store::archive`; this crate has no SQL.

pub mod export;
pub mod knowledge;
pub mod memory;
pub mod names;
pub mod record;
pub mod render;
pub mod snapshot;
