//! The search commands of the CLI: `corpus query`, `corpus embed`, `model fetch`, `bench retrieval`,
//! `bench search-latency`. `cli.rs` holds one variant per command wrapping these argument structs.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, anyhow, bail};

use super::http::{Params, build_query};
use super::locomo::TextMode;
use crate::embed::{self, EmbedderConfig, EmbedderKind};

fn require_corpus(db: &Path) -> anyhow::Result<()> {
    if !db.exists() {
        bail!(
            "no corpus at {}\nhint: pass --db PATH or set PERSONKIT_DB; `personkit serve` creates the corpus",
            db.display()
        );
    }
    Ok(())
}

fn load_embedder(db: &Path) -> anyhow::Result<(EmbedderConfig, embed::SharedEmbedder)> {
    let cfg = EmbedderConfig::load(Some(db)).map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))?;
    let e = embed::build(&cfg).map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))?;
    Ok((cfg, e))
}

/// `personkit corpus query "<text>"`.
#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    /// Words to search for (also used for the meaning-based search when an embedder is configured).
    pub text: String,
    /// Number of hits.
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Only this surface, e.g. browser-ext:chatgpt.
    #[arg(long)]
    pub surface: Option<String>,
    /// Only these threads (comma-separated ids).
    #[arg(long)]
    pub thread: Option<String>,
    /// Only this role: user, assistant, system, tool.
    #[arg(long)]
    pub role: Option<String>,
    /// From this time: RFC 3339, YYYY-MM-DD, or a span back from now (7d).
    #[arg(long)]
    pub since: Option<String>,
    /// Before this time.
    #[arg(long)]
    pub until: Option<String>,
    /// Entity ids whose mentions count (comma-separated).
    #[arg(long)]
    pub entity: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run_query(db: &Path, a: &QueryArgs) -> anyhow::Result<()> {
    let q = build_query(&Params {
        q: Some(a.text.clone()),
        k: Some(a.k),
        surface: a.surface.clone(),
        thread: a.thread.clone(),
        role: a.role.clone(),
        since: a.since.clone(),
        until: a.until.clone(),
        entity: a.entity.clone(),
        events: None,
    })
    .map_err(|e| anyhow!("{e}"))?;
    require_corpus(db)?;
    let conn =
        crate::db::open(db).with_context(|| format!("cannot open the corpus {}", db.display()))?;
    let (_, embedder) = load_embedder(db)?;
    let r = super::query(&conn, embedder.as_deref(), &q).map_err(|e| match e {
        super::SearchError::Embed(e) => anyhow!("{e}\nhint: {}", e.hint()),
        e => anyhow!("{e}"),
    })?;
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &r)?;
        writeln!(out)?;
    } else {
        write!(
            out,
            "{}",
            super::render::human(&r, std::io::stdout().is_terminal())
        )?;
    }
    Ok(())
}

/// `personkit corpus embed`.
#[derive(Debug, clap::Args)]
pub struct EmbedArgs {
    /// Embed at most this many messages/events in this run (run again to continue).
    #[arg(long, default_value_t = 2000)]
    pub max: u64,
    /// Print a JSON summary.
    #[arg(long)]
    pub json: bool,
}

pub fn run_embed(db: &Path, a: &EmbedArgs) -> anyhow::Result<()> {
    require_corpus(db)?;
    let mut conn =
        crate::db::open(db).with_context(|| format!("cannot open the corpus {}", db.display()))?;
    let (cfg, embedder) = load_embedder(db)?;
    let Some(e) = embedder else {
        bail!(
            "no embedder is configured (source: {})\nhint: set PERSONKIT_EMBEDDER=local and PERSONKIT_MODEL_DIR, or run `personkit model fetch --from-dir DIR`",
            cfg.source
        );
    };
    let before = embed::store::coverage(&conn, &e.model_key())?;
    let todo = before.pending().min(a.max);
    let bar = super::render::progress_bar(todo, "embedding");
    // Ctrl-C stops after the current batch; every finished batch is committed, so a later run resumes.
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let _ = ctrlc_flag(flag);
    let mut cursor = embed::store::Cursor::default();
    let run = embed::store::embed_pending(
        &mut conn,
        e.as_ref(),
        &mut cursor,
        a.max,
        32,
        Some(&stop),
        |n| bar.inc(n),
    )?;
    bar.finish_and_clear();
    let after = embed::store::coverage(&conn, &e.model_key())?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"model": e.model_key(), "embedded": run.rows, "computed": run.computed,
                "pending": after.pending(), "coverage": after})
        );
    } else {
        println!(
            "embedded {} rows with {} ({} computed, the rest reused by text hash); {} still pending{}",
            run.rows,
            e.model_key(),
            run.computed,
            after.pending(),
            if after.pending() > 0 {
                " — run `personkit corpus embed` again to continue"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// Sets `flag` on SIGINT/SIGTERM from a small tokio runtime thread. Best effort.
fn ctrlc_flag(flag: Arc<AtomicBool>) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::spawn(move || {
        rt.block_on(async {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("stopping after the current batch…");
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        })
    });
    Ok(())
}

/// `personkit model fetch`.
#[derive(Debug, clap::Args)]
pub struct ModelFetchArgs {
    /// Take the model from this directory (model.safetensors, tokenizer.json, config.json) instead of the hub.
    #[arg(long)]
    pub from_dir: Option<PathBuf>,
    /// Install into this directory (default ~/.dotperson/models/all-MiniLM-L6-v2).
    #[arg(long)]
    pub to: Option<PathBuf>,
}

/// Where the default model comes from on a machine with internet.
pub const HUB_URL: &str =
    "https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2/resolve/main";

pub fn run_model_fetch(a: &ModelFetchArgs) -> anyhow::Result<()> {
    let to =
        a.to.clone()
            .unwrap_or_else(embed::config::default_model_dir);
    std::fs::create_dir_all(&to).with_context(|| format!("cannot create {}", to.display()))?;
    match &a.from_dir {
        Some(src) => {
            embed::local::validate_dir(src).map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))?;
            if src.canonicalize().ok() != to.canonicalize().ok() {
                for f in embed::local::REQUIRED_FILES
                    .iter()
                    .chain(["sentence_bert_config.json"].iter())
                {
                    let from = src.join(f);
                    if from.is_file() {
                        std::fs::copy(&from, to.join(f)).with_context(|| {
                            format!("cannot copy {} to {}", from.display(), to.display())
                        })?;
                    }
                }
            }
        }
        None => {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .timeout_global(Some(std::time::Duration::from_secs(30)))
                .build()
                .into();
            for f in embed::local::REQUIRED_FILES {
                let url = format!("{HUB_URL}/{f}");
                let mut resp = agent.get(&url).call().map_err(|e| {
                    anyhow!(
                        "cannot download {url}: {e}\nhint: without internet access, copy the model folder here and run `personkit model fetch --from-dir DIR`"
                    )
                })?;
                let mut file = std::fs::File::create(to.join(f))?;
                std::io::copy(
                    &mut resp.body_mut().with_config().limit(1 << 30).reader(),
                    &mut file,
                )?;
            }
        }
    }
    let dim = embed::local::validate_dir(&to).map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))?;
    let model =
        embed::local::LocalEmbedder::load(&to).map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))?;
    println!(
        "model ready: {} ({dim}-d, {}) in {}\nuse it with PERSONKIT_EMBEDDER=local (the default when this folder exists)",
        embed::Embedder::model_id(&model),
        embed::Embedder::model_version(&model),
        to.display()
    );
    Ok(())
}

/// `personkit bench retrieval <file>`.
#[derive(Debug, clap::Args)]
pub struct RetrievalArgs {
    /// LoCoMo JSON (e.g. ../shared/data/locomo-dev.json).
    pub file: PathBuf,
    /// Index the raw turn text only (`speaker: text`, as the published reference figures), without image captions.
    #[arg(long)]
    pub plain_text: bool,
    /// Keep the benchmark corpus at this path.
    #[arg(long)]
    pub keep_db: Option<PathBuf>,
    /// Also report the fusion variants that explain the choice of defaults (see BENCHMARKS.md).
    #[arg(long)]
    pub ablations: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run_retrieval(a: &RetrievalArgs) -> anyhow::Result<()> {
    let config = EmbedderConfig::load(None).map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))?;
    if config.kind == EmbedderKind::None {
        eprintln!(
            "note: no embedder configured; only FTS is measured (set PERSONKIT_EMBEDDER=local)"
        );
    }
    let report = super::bench::run_retrieval(&super::bench::RetrievalOpts {
        file: a.file.clone(),
        mode: if a.plain_text {
            TextMode::Plain
        } else {
            TextMode::WithCaptions
        },
        db: a.keep_db.clone(),
        config,
        extra: if a.ablations {
            super::bench::ablations()
        } else {
            Vec::new()
        },
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
    println!("| method | R@1 | R@5 | R@10 | p50 ms |\n|---|---|---|---|---|");
    for r in &report.results {
        println!(
            "| {} | {:.3} | {:.3} | {:.3} | {:.1} |",
            r.method, r.r1, r.r5, r.r10, r.p50_ms
        );
    }
    Ok(())
}

/// `personkit bench search-latency`.
#[derive(Debug, clap::Args)]
pub struct LatencyArgs {
    /// Messages in the synthetic corpus.
    #[arg(long, default_value_t = 100_000)]
    pub messages: usize,
    /// Queries per method.
    #[arg(long, default_value_t = 200)]
    pub queries: usize,
    /// Build or reuse the corpus at this path (default: a temporary one).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Texts for the embedding-throughput run (needs the local embedder configured; 0 skips).
    #[arg(long, default_value_t = 256)]
    pub embed_texts: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run_latency(a: &LatencyArgs) -> anyhow::Result<()> {
    let seed = 0x5EED_u64;
    let tmp = std::env::temp_dir().join(format!("personkit-latency-{}", std::process::id()));
    let path = a.db.clone().unwrap_or_else(|| tmp.join("corpus.db"));
    let mut conn = crate::db::open(&path)?;
    let have: i64 = conn.query_row("SELECT count(*) FROM messages", [], |r| r.get(0))?;
    let t = std::time::Instant::now();
    if have == 0 {
        let bar = super::render::progress_bar(a.messages as u64, "building");
        super::latency::build_corpus(&mut conn, a.messages, seed, |n| bar.inc(n))?;
        bar.finish_and_clear();
        conn.execute_batch("ANALYZE; PRAGMA optimize;")?;
    } else if have as usize != a.messages {
        bail!(
            "{} holds {have} messages, not {}; pass another --db",
            path.display(),
            a.messages
        );
    }
    let build_secs = t.elapsed().as_secs_f64();
    let (results, bit_recall) = super::latency::measure(&conn, a.queries, seed)?;
    let mut throughput = None;
    if a.embed_texts > 0 {
        let config = EmbedderConfig::load(None).map_err(|e| anyhow!("{e}"))?;
        if let Some(e) = embed::build(&config).map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))? {
            let (batched, single) =
                super::latency::embed_throughput(e.as_ref(), a.embed_texts, seed)?;
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
