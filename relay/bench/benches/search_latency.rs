//! Search-latency benchmark; see `personkit_bench::latency`. Run:
//! `cargo bench -p personkit-bench --bench search_latency -- --messages 100000 [--db PATH] [--query-model] [--json]`
//! (with `PERSONKIT_EMBEDDER=local` and `PERSONKIT_MODEL_DIR` it also measures embedding throughput).

use std::path::PathBuf;

use anyhow::{anyhow, bail};
use clap::Parser;
use personkit_bench::{bench_args, latency};
use personkit_cli::output::progress_bar;
use personkit_embed::{self as embed, EmbedderConfig};
use personkit_store::bulk;

/// `cargo bench -p personkit-bench --bench search_latency -- [options]`.
#[derive(Debug, Parser)]
#[command(
    name = "search_latency",
    about = "Query latency (FTS, vector, hybrid) on a synthetic corpus, and embedding throughput"
)]
struct LatencyArgs {
    /// Messages in the synthetic corpus.
    #[arg(long, default_value_t = 100_000)]
    messages: usize,
    /// Queries per method.
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Build or reuse the corpus at this path (default: a temporary one).
    #[arg(long)]
    db: Option<PathBuf>,
    /// Texts for the embedding-throughput run (needs the local embedder configured; 0 skips).
    #[arg(long, default_value_t = 256)]
    embed_texts: usize,
    /// Also measure vector and hybrid queries with each query embedded by the configured embedder (the local
    /// model), as a relay with that embedder would; the corpus vectors stay synthetic.
    #[arg(long)]
    query_model: bool,
    /// Also measure FTS and hybrid with the turn before each message as a second FTS column of this weight
    /// (a side table built in the corpus; interleaved with the shipped index).
    #[arg(long)]
    neighbours: Option<f64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn main() -> anyhow::Result<()> {
    let a = LatencyArgs::parse_from(bench_args());
    if let Some(w) = a.neighbours
        && !(w.is_finite() && w > 0.0)
    {
        bail!(
            "--neighbours takes the turn before's BM25 weight, a number above 0 (e.g. 0.3); got {w}"
        );
    }
    let seed = 0x5EED_u64;
    let tmp = std::env::temp_dir().join(format!("personkit-latency-{}", std::process::id()));
    let path = a.db.clone().unwrap_or_else(|| tmp.join("corpus.db"));
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
    let query_model = if a.query_model {
        let config = EmbedderConfig::load(None).map_err(|e| anyhow!("{e}"))?;
        Some(
            embed::build(&config)
                .map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))?
                .ok_or_else(|| anyhow!("--query-model needs an embedder: set PERSONKIT_EMBEDDER=local and PERSONKIT_MODEL_DIR"))?,
        )
    } else {
        None
    };
    let (results, bit_recall) =
        latency::measure(&conn, a.queries, seed, query_model.as_deref(), a.neighbours)?;
    let mut throughput = None;
    if a.embed_texts > 0 {
        let config = EmbedderConfig::load(None).map_err(|e| anyhow!("{e}"))?;
        if let Some(e) = embed::build(&config).map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))? {
            let (batched, single) = latency::embed_throughput(e.as_ref(), a.embed_texts, seed)?;
            throughput = Some((e.model_key(), batched, single));
        }
    }
    if a.db.is_none() {
        drop(conn);
        let _ = std::fs::remove_dir_all(&tmp);
    }
    if a.json {
        println!(
            "{}",
            serde_json::json!({"messages": a.messages, "queries": a.queries, "build_secs": build_secs,
                "results": results, "bit_recall_at_10_vs_exact": bit_recall,
                "embed_throughput": throughput.as_ref().map(|(m, b, s)| serde_json::json!(
                    {"model": m, "batched_texts_per_s": b, "one_by_one_texts_per_s": s, "ratio": b / s}))})
        );
        return Ok(());
    }
    println!(
        "synthetic corpus: {} messages (built in {build_secs:.0}s), {} queries per method",
        a.messages, a.queries
    );
    println!("| method | p50 ms | p95 ms |\n|---|---|---|");
    for r in &results {
        println!("| {} | {:.2} | {:.2} |", r.method, r.p50_ms, r.p95_ms);
    }
    println!(
        "in-memory sign-bit pass + int8 rescoring: top-10 overlap with exact float KNN = {bit_recall:.3}"
    );
    if let Some((m, b, s)) = throughput {
        println!(
            "embedding throughput ({m}): batched {b:.1} texts/s vs one-by-one {s:.1} texts/s = {:.2}x",
            b / s
        );
    }
    Ok(())
}
