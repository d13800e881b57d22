//! `personkit corpus …`: look into the corpus (health, surfaces, messages), search it (`query`) and embed it.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand};
use personkit_embed::{self as embed, EmbedderConfig};
use personkit_search::params::{Params, build_query_with};
use personkit_search::{Indexes, indexer};
use personkit_store::clock::{Clock, SPAN_HELP, back_from, parse_span};
use personkit_store::read::corpus::{self as views, Embedder};
use personkit_store::vectors;

use crate::args::{DbArg, JsonArgs};
use crate::output::{self, ellipsize, print_json, print_table};

#[derive(Debug, Subcommand)]
pub enum CorpusCommand {
    /// Capture state per surface, counts, embedding state (what the MCP tool `corpus_health` answers), and
    /// storage: size on disk, rows per table.
    Health(JsonArgs),
    /// Per-surface roll-up of recent threads and capture status.
    Surfaces(SurfacesArgs),
    /// Recent messages, newest first.
    Messages(MessagesArgs),
    /// Search: hybrid (words, meaning, entities, recency) over messages and events, with why each hit matched;
    /// `--all-words` for a plain keyword search (every word must occur, ranked by BM25).
    Query(WithDb<QueryArgs>),
    /// Embed pending messages and events with the configured embedder (interruptible; run again to resume).
    Embed(WithDb<EmbedArgs>),
    /// Write an Ed25519-signed JSONL snapshot of the whole corpus (format: docs/snapshot.md).
    Snapshot(super::archive::SnapshotArgs),
    /// Restore a snapshot into an empty corpus, after verifying all of it (nothing is written if any check fails).
    Restore(super::archive::RestoreArgs),
}

/// A subcommand's arguments plus `--db`.
#[derive(Debug, Args)]
pub struct WithDb<T: Args> {
    #[command(flatten)]
    pub db: DbArg,
    #[command(flatten)]
    pub args: T,
}

#[derive(Debug, Clone, Args)]
pub struct SurfacesArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Window of threads to roll up, e.g. 24h, 7d, 4w.
    #[arg(long, default_value = "7d")]
    pub since: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct MessagesArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Surface id, e.g. browser-ext:chatgpt (all surfaces when omitted).
    #[arg(long)]
    pub surface: Option<String>,
    /// Thread id.
    #[arg(long)]
    pub thread: Option<String>,
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    #[arg(long)]
    pub json: bool,
}

pub fn health(a: JsonArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let search = personkit_search::health::embed_health(&conn, Some(&a.db.path()));
    let embedder = search.model.as_deref().map(|model_key| Embedder {
        model_key,
        dim: search.dim.unwrap_or(0) as u64,
    });
    let report = views::health_report(&conn, Clock::system().now(), embedder)?;
    let storage = views::storage(&conn, &a.db.path())?;
    // Local AI tools that delete their own sessions, and threads only this corpus still holds.
    let harvest = match super::harvest::HomeArg::default().config() {
        Ok(cfg) => personkit_import::harvest::status(&conn, &cfg)?,
        Err(_) => Vec::new(),
    };
    let warnings: Vec<_> = harvest.iter().flat_map(|s| s.warnings.clone()).collect();
    let only_copies: u64 = harvest.iter().map(|s| s.only_copies).sum();
    let knowledge =
        personkit_knowledge::health(&conn, &personkit_llm::LlmConfig::load(Some(&a.db.path())))?;
    if a.json {
        let mut v = serde_json::to_value(&report)?;
        v["storage"] = serde_json::to_value(&storage)?;
        v["search"] = serde_json::to_value(&search)?;
        v["harvest"] = serde_json::json!({"warnings": warnings, "only_copies": only_copies});
        v["knowledge"] = serde_json::to_value(&knowledge)?;
        return print_json(&v);
    }
    output::print_health(&search);
    for w in &warnings {
        println!(
            "{} {}: {}\n           → {}",
            w.level.to_uppercase(),
            w.source,
            w.message,
            w.fix
        );
    }
    if only_copies > 0 {
        println!(
            "harvest    {only_copies} thread(s) whose transcript files their tool deleted: this corpus holds the only copy"
        );
    }
    println!(
        "knowledge  pipeline {}: {}; {} pending, {} approved, {} rejected",
        knowledge.pipeline,
        knowledge.model,
        knowledge.entries.pending,
        knowledge.entries.approved,
        knowledge.entries.rejected
    );
    if knowledge.pipeline == "on" {
        println!(
            "           daily at {:02}:00; scrubbing {}",
            knowledge.hour, knowledge.scrubbing
        );
    }
    if let Some(alert) = &knowledge.alert {
        println!(
            "ALERT knowledge: {} ({})\n           → {}",
            alert["message"].as_str().unwrap_or("?"),
            alert["at"].as_str().unwrap_or("?"),
            alert["hint"]
                .as_str()
                .unwrap_or("see `personkit knowledge audit --kind alert`")
        );
    }
    println!("corpus     {}", storage.path);
    println!(
        "size       {:.1} MiB",
        storage.size_bytes as f64 / (1024.0 * 1024.0)
    );
    println!("schema     v{}", report.schema_version);
    println!("relay id   {}", storage.relay_id);
    println!(
        "holds      {} threads, {} turns ({} stored contents), {} events",
        report.counts.threads, report.counts.turns, report.counts.messages, report.counts.events
    );
    println!();
    if report.surfaces.is_empty() {
        println!("No surface has sent anything yet. Pair the extension (`personkit pair`).");
    } else {
        let rows: Vec<Vec<String>> = report
            .surfaces
            .iter()
            .map(|s| {
                vec![
                    s.surface.clone(),
                    s.status.as_str().to_owned(),
                    s.turns.to_string(),
                    s.turns_24h.to_string(),
                    s.reason.clone(),
                ]
            })
            .collect();
        print_table(&["surface", "status", "turns", "24 h", "why"], &rows)?;
    }
    println!();
    let rows: Vec<Vec<String>> = storage
        .tables
        .iter()
        .map(|t| vec![t.table.clone(), t.rows.to_string()])
        .collect();
    print_table(&["table", "rows"], &rows)?;
    if !storage.embedding_models.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = storage
            .embedding_models
            .iter()
            .map(|m| {
                vec![
                    m.model_id.clone(),
                    m.model_version.clone(),
                    m.dim.to_string(),
                    m.rows.to_string(),
                ]
            })
            .collect();
        print_table(&["model", "version", "dim", "embeddings"], &rows)?;
    }
    Ok(())
}

pub fn surfaces(a: SurfacesArgs) -> anyhow::Result<()> {
    let now = Clock::system().now();
    let since = parse_span(&a.since)
        .and_then(|span| back_from(now, span))
        .with_context(|| format!("--since {:?} is not {}", a.since, SPAN_HELP))?;
    let conn = a.db.open_read_only()?;
    let rows = views::surfaces(&conn, since, now)?;
    if a.json {
        return print_json(&rows);
    }
    if rows.is_empty() {
        println!(
            "Nothing captured yet. Pair the extension (`personkit pair`) and chat on a supported site."
        );
        return Ok(());
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|s| {
            vec![
                s.surface.clone(),
                s.status.as_str().to_owned(),
                s.threads.to_string(),
                s.messages.to_string(),
                s.last_captured_at.clone().unwrap_or_else(|| "-".into()),
                s.reason.clone(),
            ]
        })
        .collect();
    print_table(
        &[
            "surface",
            "status",
            &format!("threads {}", a.since),
            &format!("messages {}", a.since),
            "last captured",
            "why",
        ],
        &table,
    )
}

pub fn messages(a: MessagesArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let rows = views::messages(&conn, a.surface.as_deref(), a.thread.as_deref(), a.limit)?;
    if a.json {
        return print_json(&rows);
    }
    if rows.is_empty() {
        println!("No messages match. `personkit corpus surfaces` lists what has been captured.");
        return Ok(());
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|m| {
            vec![
                m.captured_at.clone(),
                m.surface.clone(),
                m.thread_id[..8.min(m.thread_id.len())].to_owned(),
                m.role.clone(),
                if m.is_current {
                    format!("r{}", m.revision)
                } else {
                    format!("r{} (old)", m.revision)
                },
                ellipsize(&m.content, 70),
            ]
        })
        .collect();
    print_table(
        &["captured", "surface", "thread", "role", "rev", "content"],
        &table,
    )
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
    /// Keyword search only: messages containing every word, ranked by BM25 (no meaning, entities or recency).
    #[arg(long, conflicts_with_all = ["surface", "thread", "role", "since", "until", "entity", "fusion"])]
    pub all_words: bool,
    /// How the signals' rankings are combined: convex (scores, the default) or rrf (reciprocal rank fusion,
    /// k = 60). Without it, `[search] fusion` of the settings file decides.
    #[arg(long)]
    pub fusion: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run_query(db: &DbArg, a: &QueryArgs) -> anyhow::Result<()> {
    if a.all_words {
        return all_words(db, a);
    }
    let now = Clock::system().now();
    let settings = personkit_search::settings::Settings::for_db(&db.path())
        .map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))?;
    let q = build_query_with(
        &Params {
            q: Some(a.text.clone()),
            k: Some(a.k),
            surface: a.surface.clone(),
            thread: a.thread.clone(),
            role: a.role.clone(),
            since: a.since.clone(),
            until: a.until.clone(),
            entity: a.entity.clone(),
            events: None,
            fusion: a.fusion.clone(),
        },
        now,
        &settings,
    )
    .map_err(|e| anyhow!("{e}"))?;
    let conn = db.open_read_only()?;
    let (_, embedder) = load_embedder(&db.path())?;
    let r =
        personkit_search::query(&conn, &Indexes::new(), embedder.as_deref(), &q).map_err(|e| {
            match e {
                personkit_search::SearchError::Embed(e) => anyhow!("{e}\nhint: {}", e.hint()),
                e => match e.caller_hint() {
                    Some(hint) => anyhow!("{e}\nhint: {hint}"),
                    None => anyhow!("{e}"),
                },
            }
        })?;
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &r)?;
        writeln!(out)?;
    } else {
        write!(
            out,
            "{}",
            output::human(&r, std::io::stdout().is_terminal())
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

pub fn run_embed(db: &DbArg, a: &EmbedArgs) -> anyhow::Result<()> {
    let mut conn = db.open_existing()?;
    let (cfg, embedder) = load_embedder(&db.path())?;
    let Some(e) = embedder else {
        bail!(
            "no embedder is configured (source: {})\nhint: set PERSONKIT_EMBEDDER=local and PERSONKIT_MODEL_DIR, or run `personkit model fetch --from-dir DIR`",
            cfg.source
        );
    };
    let before = vectors::coverage(&conn, &e.model_key())?;
    let todo = before.pending().min(a.max);
    let bar = output::progress_bar(todo, "embedding");
    // Ctrl-C stops after the current batch; every finished batch is committed, so a later run resumes.
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let _ = ctrlc_flag(flag);
    let mut cursor = indexer::Cursor::default();
    let run = indexer::embed_pending(
        &mut conn,
        e.as_ref(),
        &Clock::system(),
        &mut cursor,
        a.max,
        32,
        Some(&stop),
        |n| bar.inc(n),
    )?;
    bar.finish_and_clear();
    let after = vectors::coverage(&conn, &e.model_key())?;
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

/// `corpus query --all-words`: keyword search over current messages.
fn all_words(db: &DbArg, a: &QueryArgs) -> anyhow::Result<()> {
    if views::fts_query(&a.text).is_none() {
        bail!(
            "give at least one word to search for, e.g. personkit corpus query --all-words \"borrow checker\""
        );
    }
    let conn = db.open_read_only()?;
    let hits = views::search(&conn, &a.text, a.k as u32)?;
    if a.json {
        return print_json(&hits);
    }
    if hits.is_empty() {
        println!("No message contains all of: {}", a.text);
        return Ok(());
    }
    let table: Vec<Vec<String>> = hits
        .iter()
        .map(|h| {
            vec![
                format!("{:.3}", -h.score),
                h.captured_at.clone(),
                h.surface.clone(),
                h.role.clone(),
                ellipsize(&h.snippet, 80),
            ]
        })
        .collect();
    print_table(&["score", "captured", "surface", "role", "snippet"], &table)
}
