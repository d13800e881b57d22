//! The graph derivation's write path: `personkit_graph::run::build` over a corpus of `--messages` turns whose
//! threads and text name sites, models and tools, against the bare read of the same turns in the same batches
//! (`store::graph::messages_after`, what every pass reads first), in the same run. Run:
//! `cargo bench -p personkit-bench --bench graph_derive -- --messages 50000 [--hosts 5000] [--json]`
//!
//! The corpus: threads of 20 turns on four chat sites; each assistant turn links one of `--hosts` sites
//! (`https://docs<k>.example.org/…`) and names one of six model ids, so the derivation makes one site entity per
//! host, one per model, the sites' tools and makers, and a source for every mention.

use std::time::Instant;

use clap::Parser;
use personkit_bench::bench_args;
use personkit_cli::output::progress_bar;
use personkit_shared::wire::Role;
use personkit_store::graph;
use personkit_store::ingest::{Origin, ingest_batch};
use personkit_testkit::{Rng, turn_at};
use serde::Serialize;

#[derive(Debug, Parser)]
#[command(
    name = "graph_derive",
    about = "Graph derivation against the bare read of its turns"
)]
struct Args {
    #[arg(long, default_value_t = 50_000)]
    messages: usize,
    #[arg(long, default_value_t = 5_000)]
    hosts: usize,
    #[arg(long)]
    json: bool,
}

const SURFACES: [&str; 4] = [
    "browser-ext:chatgpt",
    "browser-ext:claude",
    "browser-ext:gemini",
    "browser-ext:perplexity",
];
const MODELS: [&str; 6] = [
    "gpt-4o",
    "claude-3-5-sonnet",
    "gemini-1.5-pro",
    "llama-3.1-8b",
    "mistral-large",
    "qwen2.5-coder-7b",
];
const THREAD_LEN: usize = 20;

#[derive(Debug, Serialize)]
struct Report {
    messages: usize,
    entities: u64,
    relations: u64,
    sources: u64,
    read_secs: f64,
    derive_secs: f64,
    ratio: f64,
    messages_per_sec: f64,
    sources_per_sec: f64,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse_from(bench_args());
    let dir = tempfile::tempdir()?;
    let mut conn = personkit_store::db::open(&dir.path().join("corpus.db"))?;
    let mut rng = Rng::new(0xD3_21);
    let origin = Origin {
        device_id: "bench".into(),
    };
    let now = time::OffsetDateTime::now_utc();
    let bar = progress_bar(a.messages as u64, "building");
    let mut batch = Vec::with_capacity(500);
    for i in 0..a.messages {
        let thread = i / THREAD_LEN;
        let turn = i % THREAD_LEN;
        let surface = SURFACES[thread % SURFACES.len()];
        let (role, text) = if turn.is_multiple_of(2) {
            (
                Role::User,
                format!("Question {i} about the parser, part {turn}."),
            )
        } else {
            (
                Role::Assistant,
                format!(
                    "Answer {i}: {} handles it; see https://docs{}.example.org/guide/{turn} for the details.",
                    MODELS[rng.below(MODELS.len())],
                    rng.below(a.hosts)
                ),
            )
        };
        let at = format!(
            "2026-{:02}-{:02}T{:02}:{:02}:00Z",
            1 + (thread / 28) % 12,
            1 + thread % 28,
            turn % 24,
            i % 60
        );
        batch.push(turn_at(
            surface,
            &format!("c{thread}"),
            role,
            &text,
            Some(turn as u32),
            None,
            &at,
        ));
        if batch.len() == 500 || i + 1 == a.messages {
            ingest_batch(&mut conn, &origin, &batch, now)?;
            bar.inc(batch.len() as u64);
            batch.clear();
        }
    }
    bar.finish_and_clear();

    // Baseline: the pass's own read of every turn, in its batches.
    let t = Instant::now();
    let (mut after, mut read) = (0, 0usize);
    loop {
        let rows = graph::messages_after(&conn, after, personkit_graph::run::BATCH)?;
        let Some(last) = rows.last() else { break };
        after = last.pk;
        read += rows.len();
    }
    let read_secs = t.elapsed().as_secs_f64();
    assert_eq!(read, a.messages);

    let t = Instant::now();
    let report = personkit_graph::run::build(&conn, now, personkit_graph::run::BATCH, usize::MAX)?;
    let derive_secs = t.elapsed().as_secs_f64();
    let (entities, relations, _) = graph::counts(&conn)?;
    let sources: u64 = conn.query_row(
        "SELECT (SELECT count(*) FROM entity_sources) + (SELECT count(*) FROM relation_sources)",
        [],
        |r| r.get(0),
    )?;
    let r = Report {
        messages: report.messages as usize,
        entities,
        relations,
        sources,
        read_secs,
        derive_secs,
        ratio: derive_secs / read_secs.max(1e-9),
        messages_per_sec: report.messages as f64 / derive_secs.max(1e-9),
        sources_per_sec: sources as f64 / derive_secs.max(1e-9),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "{} messages: derivation {:.2} s ({:.0} messages/s, {} entities, {} relations, {} sources = {:.0} sources/s); \
             bare read {:.3} s; {:.0}× the read",
            r.messages,
            r.derive_secs,
            r.messages_per_sec,
            r.entities,
            r.relations,
            r.sources,
            r.sources_per_sec,
            r.read_secs,
            r.ratio
        );
    }
    Ok(())
}
