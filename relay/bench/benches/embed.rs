//! Local embedding throughput: the packed encoder (the shipped engine) against candle's `BertModel` (the engine
//! it replaced), on the same texts in the same run, with the cosine between their vectors. Run:
//! `PERSONKIT_MODEL_DIR=DIR cargo bench -p personkit-bench --bench embed -- ../shared/data/locomo-dev.json
//! [--texts 600] [--join 1] [--reps 2] [--json]` (DIR: the model folder `scripts/setup` installs).
//!
//! Texts: LoCoMo turns as the retrieval benchmark indexes them (or `--join N` consecutive turns of a session as one
//! text), taken evenly across the file.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, anyhow};
use clap::Parser;
use personkit_bench::bench_args;
use personkit_bench::locomo::{self, TextMode};
use personkit_embed::Embedder;
use personkit_embed::local::{Engine, LocalEmbedder};

#[derive(Debug, Parser)]
#[command(
    name = "embed",
    about = "Local embedding throughput, packed encoder vs candle"
)]
struct EmbedArgs {
    /// LoCoMo JSON (e.g. ../shared/data/locomo-dev.json): where the texts come from.
    file: PathBuf,
    /// Texts per measurement.
    #[arg(long, default_value_t = 600)]
    texts: usize,
    /// Join this many consecutive turns of a session into one text (2 gives texts of ~75 tokens).
    #[arg(long, default_value_t = 1)]
    join: usize,
    /// Repetitions (alternating engines); the median is reported.
    #[arg(long, default_value_t = 2)]
    reps: usize,
    /// Model folder (default: $PERSONKIT_MODEL_DIR, else ~/.dotperson/models/all-MiniLM-L6-v2).
    #[arg(long)]
    model_dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Run only the packed encoder, batched (for profiling it alone).
    #[arg(long)]
    packed_only: bool,
}

fn rate(
    e: &LocalEmbedder,
    texts: &[&str],
    one_by_one: bool,
) -> anyhow::Result<(f64, Vec<Vec<f32>>)> {
    let t = Instant::now();
    let vectors = if one_by_one {
        texts
            .iter()
            .map(|x| e.embed_query(x))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        e.embed_documents(texts)?
    };
    Ok((texts.len() as f64 / t.elapsed().as_secs_f64(), vectors))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let a = EmbedArgs::parse_from(bench_args());
    let dir = a
        .model_dir
        .clone()
        .or_else(|| std::env::var_os("PERSONKIT_MODEL_DIR").map(PathBuf::from))
        .unwrap_or_else(personkit_embed::config::default_model_dir);
    let convs = locomo::load(&a.file, TextMode::WithCaptions)?;
    let all: Vec<String> = convs
        .iter()
        .flat_map(|c| &c.sessions)
        .flat_map(|s| {
            s.turns.chunks(a.join.max(1)).map(|c| {
                c.iter()
                    .map(|t| t.content.as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
        })
        .collect();
    if all.is_empty() {
        return Err(anyhow!("{} has no turns", a.file.display()));
    }
    let step = (all.len() / a.texts.max(1)).max(1);
    let texts: Vec<&str> = all
        .iter()
        .step_by(step)
        .take(a.texts)
        .map(String::as_str)
        .collect();
    let packed = LocalEmbedder::load_with(&dir, Engine::Packed)
        .map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))
        .with_context(|| format!("loading {}", dir.display()))?;
    let candle = LocalEmbedder::load_with(&dir, Engine::Candle).map_err(|e| anyhow!("{e}"))?;
    if a.packed_only {
        let (r, _) = rate(&packed, &texts, false)?;
        println!("packed encoder: {r:.1} texts/s");
        return Ok(());
    }
    let tokens = packed.token_counts(&texts)?;
    let mean_tokens = tokens.iter().sum::<usize>() as f64 / tokens.len() as f64;

    let rows: [(&str, &LocalEmbedder, bool); 4] = [
        (
            "candle, batches of 32 sorted by length (the replaced path)",
            &candle,
            false,
        ),
        ("candle, one text per call", &candle, true),
        (
            "packed encoder, batches of ~4096 tokens (shipped)",
            &packed,
            false,
        ),
        ("packed encoder, one text per call (a query)", &packed, true),
    ];
    let mut rates = vec![Vec::new(); rows.len()];
    let mut reference = Vec::new();
    let mut shipped = Vec::new();
    for rep in 0..a.reps.max(1) {
        for (i, (_, e, single)) in rows.iter().enumerate() {
            let (r, v) = rate(e, &texts, *single)?;
            rates[i].push(r);
            if rep == 0 && i == 0 {
                reference = v;
            } else if rep == 0 && i == 2 {
                shipped = v;
            }
        }
    }
    let cos: Vec<f64> = reference
        .iter()
        .zip(&shipped)
        .map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p * q) as f64).sum())
        .collect();
    let min_cos = cos.iter().copied().fold(f64::INFINITY, f64::min);
    let mean_cos = cos.iter().sum::<f64>() / cos.len() as f64;
    let medians: Vec<f64> = rates.into_iter().map(median).collect();
    let ratio = medians[2] / medians[0];
    if a.json {
        println!(
            "{}",
            serde_json::json!({"texts": texts.len(), "mean_tokens": mean_tokens, "threads": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
                "rows": rows.iter().zip(&medians).map(|((n, _, _), r)| serde_json::json!({"path": n, "texts_per_s": r})).collect::<Vec<_>>(),
                "ratio_packed_vs_replaced": ratio, "cosine_min": min_cos, "cosine_mean": mean_cos})
        );
        return Ok(());
    }
    println!(
        "{} LoCoMo turns, {mean_tokens:.1} tokens on average, model {}, {} repetitions (median)",
        texts.len(),
        packed.model_key(),
        a.reps.max(1)
    );
    println!("| path | texts/s |\n|---|---|");
    for ((name, _, _), r) in rows.iter().zip(&medians) {
        println!("| {name} | {r:.1} |");
    }
    println!(
        "packed / replaced path = {ratio:.2}x; cosine between their vectors: min {min_cos:.6}, mean {mean_cos:.6}"
    );
    Ok(())
}
