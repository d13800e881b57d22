//! `personkit-bench`: the search benchmarks, outside the shipped binary. Each runs with one command (see
//! BENCHMARKS.md):
//!
//! - `cargo bench -p personkit-bench --bench retrieval -- ../shared/data/locomo-dev.json` — LoCoMo recall
//!   ([`retrieval`], data loading in [`locomo`]);
//! - `cargo bench -p personkit-bench --bench search_latency -- --messages 100000` — query latency on a
//!   synthetic corpus and embedding throughput ([`latency`]);
//! - `cargo bench -p personkit-bench --bench mcp -- --messages 100000` — the MCP `search` tool over stdio and
//!   Streamable HTTP against `GET /v1/query` on the same corpus ([`mcp`]).
//!
//! The ingest benchmark belongs to the store: `cargo bench -p personkit-store --bench ingest`.

pub mod latency;
pub mod locomo;
pub mod mcp;
pub mod retrieval;

/// The arguments a bench target was given, without the `--bench` flag `cargo bench` appends.
pub fn bench_args() -> Vec<String> {
    std::env::args().filter(|a| a != "--bench").collect()
}
