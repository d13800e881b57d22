//! MCP call-overhead benchmark; see `personkit_bench::mcp`. Run:
//! `cargo bench -p personkit-bench --bench mcp -- --messages 100000 [--queries 300] [--db PATH] [--json]`
//! (builds the release `personkit` binary first unless `PERSONKIT_BIN` names one).

use std::path::PathBuf;

use anyhow::bail;
use clap::Parser;
use personkit_bench::{bench_args, latency, mcp};
use personkit_cli::output::progress_bar;
use personkit_store::bulk;

/// `cargo bench -p personkit-bench --bench mcp -- [options]`.
#[derive(Debug, Parser)]
#[command(
    name = "mcp",
    about = "MCP `search` over stdio and Streamable HTTP against GET /v1/query, same corpus, same run"
)]
struct McpArgs {
    /// Messages in the synthetic corpus.
    #[arg(long, default_value_t = 100_000)]
    messages: usize,
    /// Timed queries (each through all three paths).
    #[arg(long, default_value_t = 300)]
    queries: usize,
    /// Untimed rounds first (page caches, connections, allocators).
    #[arg(long, default_value_t = 30)]
    warmup: usize,
    /// Hits per query.
    #[arg(long, default_value_t = 10)]
    k: u32,
    /// Build or reuse the corpus at this path, and keep it (default: a temporary one, deleted at the end).
    #[arg(long)]
    db: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn main() -> anyhow::Result<()> {
    let a = McpArgs::parse_from(bench_args());
    let seed = 0x5EED_u64;
    personkit_testkit::build_bin(true);
    let tmp = std::env::temp_dir().join(format!("personkit-mcp-bench-{}", std::process::id()));
    let path = a.db.clone().unwrap_or_else(|| tmp.join("corpus.db"));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let result = (|| {
        let mut conn = personkit_store::db::open(&path)?;
        let have = bulk::message_count(&conn)?;
        let t = std::time::Instant::now();
        if have == 0 {
            let bar = progress_bar(a.messages as u64, "building");
            latency::build_corpus(&mut conn, a.messages, seed, |n| bar.inc(n))?;
            bar.finish_and_clear();
            bulk::analyze(&conn)?;
        } else if have as usize != a.messages {
            bail!(
                "{} holds {have} messages, not {}; pass another --db",
                path.display(),
                a.messages
            );
        }
        let build_secs = t.elapsed().as_secs_f64();
        let queries = mcp::queries_from_corpus(&conn, a.messages, a.queries, seed ^ 0x4D43)?;
        drop(conn);
        let report = mcp::run(&path, &queries, a.warmup, a.k)?;
        Ok((build_secs, report))
    })();
    if a.db.is_none() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    let (build_secs, r) = result?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"messages": a.messages, "build_secs": build_secs, "report": r})
        );
        return Ok(());
    }
    println!(
        "synthetic corpus: {} messages (built in {build_secs:.0}s); {} queries after {} warm-up rounds, k={}, \
         signals: {}; the same hits on all three paths for {} of {} queries ({:.1} hits per query)",
        a.messages,
        r.queries,
        r.warmup,
        r.k,
        r.signals.join(", "),
        r.same_hits,
        r.queries,
        r.mean_hits
    );
    println!("| path | p50 ms | p95 ms | mean ms |\n|---|---|---|---|");
    for p in &r.results {
        println!(
            "| {} | {:.2} | {:.2} | {:.2} |",
            p.path, p.p50_ms, p.p95_ms, p.mean_ms
        );
    }
    for x in &r.ratios {
        println!(
            "{}: p50 {:.2}x, p95 {:.2}x the GET /v1/query baseline (goal <= 1.2x)",
            x.path, x.p50, x.p95
        );
    }
    Ok(())
}
