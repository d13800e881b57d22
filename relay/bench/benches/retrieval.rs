//! LoCoMo retrieval benchmark; see `personkit_bench::retrieval`. Run:
//! `cargo bench -p personkit-bench --bench retrieval -- ../shared/data/locomo-dev.json [--ablations] [--json]`
//! (set `PERSONKIT_EMBEDDER=local` and `PERSONKIT_MODEL_DIR` for the vector rows).

use std::path::PathBuf;

use anyhow::anyhow;
use clap::Parser;
use personkit_bench::locomo::TextMode;
use personkit_bench::{bench_args, retrieval};
use personkit_embed::{EmbedderConfig, EmbedderKind};

/// `cargo bench -p personkit-bench --bench retrieval -- <file> [options]`.
#[derive(Debug, Parser)]
#[command(
    name = "retrieval",
    about = "Recall@1/5/10 of FTS, vector and hybrid retrieval on a LoCoMo JSON file"
)]
struct RetrievalArgs {
    /// LoCoMo JSON (e.g. ../shared/data/locomo-dev.json).
    file: PathBuf,
    /// Index the raw turn text only (`speaker: text`, as the published reference figures), without image captions.
    #[arg(long)]
    plain_text: bool,
    /// Keep the benchmark corpus at this path.
    #[arg(long)]
    keep_db: Option<PathBuf>,
    /// Also report the fusion variants that explain the choice of defaults (see BENCHMARKS.md).
    #[arg(long)]
    ablations: bool,
    /// Only these methods (comma-separated names, `prefix*` for names starting so); skips the turn-alone copy.
    #[arg(long)]
    only: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn main() -> anyhow::Result<()> {
    let a = RetrievalArgs::parse_from(bench_args());
    let config = EmbedderConfig::load(None).map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))?;
    if config.kind == EmbedderKind::None {
        eprintln!(
            "note: no embedder configured; only FTS is measured (set PERSONKIT_EMBEDDER=local)"
        );
    }
    let report = retrieval::run_retrieval(&retrieval::RetrievalOpts {
        file: a.file.clone(),
        mode: if a.plain_text {
            TextMode::Plain
        } else {
            TextMode::WithCaptions
        },
        db: a.keep_db.clone(),
        config,
        extra: if a.ablations {
            retrieval::ablations()
        } else {
            Vec::new()
        },
        previous_turn: a.ablations && a.only.is_none(),
        only: a
            .only
            .as_deref()
            .map(|o| o.split(',').map(str::to_owned).collect())
            .unwrap_or_default(),
    })?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "LoCoMo {}: {} conversations, {} turns, {} questions (categories 1-4; {} without evidence in the data skipped)",
        report.file, report.conversations, report.turns, report.questions, report.skipped_questions
    );
    println!(
        "indexed text: {}; model: {}; ingest {:.1}s over HTTP, embedding {:.1}s",
        report.text_mode,
        report.model.as_deref().unwrap_or("none"),
        report.ingest_secs,
        report.embed_secs
    );
    let per_cat = report
        .results
        .first()
        .map(|r| {
            r.by_category
                .iter()
                .map(|c| format!(" R@5 cat {} ({} q) |", c.category, c.questions))
                .collect::<String>()
        })
        .unwrap_or_default();
    println!(
        "| method | R@1 | R@5 | R@10 |{per_cat} p50 ms |\n|---|---|---|---|---|---|---|---|---|"
    );
    for r in &report.results {
        let cats: String = r
            .by_category
            .iter()
            .map(|c| format!(" {:.3} |", c.r5))
            .collect();
        println!(
            "| {} | {:.3} | {:.3} | {:.3} |{cats} {:.1} |",
            r.method, r.r1, r.r5, r.r10, r.p50_ms
        );
    }
    Ok(())
}
