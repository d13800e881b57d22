//! The `personkit` command line: one [`Command`] variant per subcommand and one [`run`] that dispatches.
//! Listings print a human table by default and one JSON document with `--json`. Errors say what to do next.
//!
//! To add a subcommand: add a variant (with an `Args` struct, flattening [`DbArg`] if it opens the corpus) and
//! one arm in [`run`].

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use crate::auth;
use crate::clock::{Clock, fmt_time, parse_span};
use crate::config::{self, ApiConfig};
use crate::corpus;
use crate::db;
use crate::server::{self, ServeConfig};

#[derive(Debug, Parser)]
#[command(
    name = "personkit",
    version,
    about = "personkit relay: keeps the corpus of your AI conversations"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the relay server (prints the address and, when nothing is paired yet, a pairing code).
    Serve(ServeArgs),
    /// Print a one-time pairing code (valid 10 minutes) for a new device.
    Pair(PairArgs),
    /// List or revoke paired devices.
    #[command(subcommand)]
    Devices(DevicesCommand),
    /// Look into the corpus.
    #[command(subcommand)]
    Corpus(CorpusCommand),
    /// Manage the local embedding model.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Install the default embedding model (all-MiniLM-L6-v2) from its hub, or from a folder with --from-dir.
    Fetch(crate::search::cmd::ModelFetchArgs),
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Recall@1/5/10 of FTS, vector and hybrid retrieval on a LoCoMo JSON file.
    Retrieval(crate::search::cmd::RetrievalArgs),
    /// Query latency (FTS, vector, hybrid) on a deterministic synthetic corpus, and embedding throughput.
    SearchLatency(crate::search::cmd::LatencyArgs),
}

/// A search command that opens the corpus.
#[derive(Debug, Args)]
pub struct WithDb<T: Args> {
    #[command(flatten)]
    pub db: DbArg,
    #[command(flatten)]
    pub args: T,
}

#[derive(Debug, Subcommand)]
pub enum DevicesCommand {
    /// Every paired device, with its status.
    List(JsonArgs),
    /// Revoke a device: its token stops working at once.
    Revoke(RevokeArgs),
}

#[derive(Debug, Subcommand)]
pub enum CorpusCommand {
    /// Row counts per table, embedding state, size on disk.
    Health(JsonArgs),
    /// Per-surface roll-up of recent threads and capture status.
    Surfaces(SurfacesArgs),
    /// Recent messages, newest first.
    Messages(MessagesArgs),
    /// Keyword search (FTS5 BM25) over current messages.
    Search(SearchArgs),
    /// Hybrid search (words, meaning, entities, recency) over messages and events, with why each hit matched.
    Query(WithDb<crate::search::cmd::QueryArgs>),
    /// Embed pending messages and events with the configured embedder (interruptible; run again to resume).
    Embed(WithDb<crate::search::cmd::EmbedArgs>),
}

/// `--db PATH` (env `PERSONKIT_DB`, default `~/.dotperson/corpus.db`).
#[derive(Debug, Clone, Args)]
pub struct DbArg {
    /// Corpus file [default: ~/.dotperson/corpus.db]
    #[arg(long, env = "PERSONKIT_DB", value_name = "PATH")]
    pub db: Option<PathBuf>,
}

impl DbArg {
    pub fn path(&self) -> PathBuf {
        self.db.clone().unwrap_or_else(config::default_db_path)
    }

    /// Open an existing corpus (migrating it if needed); a clear error when there is none at the path.
    pub fn open_existing(&self) -> anyhow::Result<rusqlite::Connection> {
        let path = self.path();
        if !path.exists() {
            bail!(
                "no corpus at {}; start the relay with `personkit serve`, or pass --db PATH / set PERSONKIT_DB",
                path.display()
            );
        }
        self.open()
    }

    /// Open (creating and migrating if needed) the corpus.
    pub fn open(&self) -> anyhow::Result<rusqlite::Connection> {
        let path = self.path();
        db::open(&path).with_context(|| {
            format!(
                "cannot open the corpus at {} (pass --db PATH or set PERSONKIT_DB)",
                path.display()
            )
        })
    }
}

#[derive(Debug, Clone, Args)]
pub struct JsonArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "PERSONKIT_ADDR", default_value = config::DEFAULT_ADDR, value_name = "HOST:PORT")]
    pub addr: String,
    /// Allow a non-loopback address (put TLS in front of it).
    #[arg(long)]
    pub allow_remote: bool,
    /// Most observations per batch.
    #[arg(long, default_value_t = personkit_shared::wire::DEFAULT_MAX_BATCH_ITEMS)]
    pub max_batch_items: usize,
    /// Most bytes per batch body.
    #[arg(long, default_value_t = personkit_shared::wire::DEFAULT_MAX_BATCH_BYTES)]
    pub max_batch_bytes: usize,
    /// Requests per second per device token (burst 4x); 0 disables the limit.
    #[arg(long, default_value_t = config::DEFAULT_RATE_LIMIT, value_name = "REQ_PER_SEC")]
    pub rate_limit: f64,
}

#[derive(Debug, Clone, Args)]
pub struct PairArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Print `{"code": ..., "expires_at": ...}`.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct RevokeArgs {
    /// Device id (or a unique prefix of it), as `personkit devices list` shows.
    pub id: String,
    #[command(flatten)]
    pub db: DbArg,
    #[arg(long)]
    pub json: bool,
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

#[derive(Debug, Clone, Args)]
pub struct SearchArgs {
    /// Words to find (all of them must occur).
    pub words: String,
    #[command(flatten)]
    pub db: DbArg,
    #[arg(long, default_value_t = 10)]
    pub limit: u32,
    #[arg(long)]
    pub json: bool,
}

/// Parse the command line, set up logging to stderr, run, and turn errors into a message and exit code 1.
pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let default_level = if matches!(cli.command, Command::Serve(_)) {
        "info"
    } else {
        "warn"
    };
    init_tracing(default_level);
    crate::db::register_sqlite_vec();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("personkit: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr; `PERSONKIT_LOG` (or `RUST_LOG`) overrides the level.
pub fn init_tracing(default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PERSONKIT_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(a) => serve(a),
        Command::Pair(a) => pair(a),
        Command::Devices(DevicesCommand::List(a)) => devices_list(a),
        Command::Devices(DevicesCommand::Revoke(a)) => devices_revoke(a),
        Command::Corpus(CorpusCommand::Health(a)) => corpus_health(a),
        Command::Corpus(CorpusCommand::Surfaces(a)) => corpus_surfaces(a),
        Command::Corpus(CorpusCommand::Messages(a)) => corpus_messages(a),
        Command::Corpus(CorpusCommand::Search(a)) => corpus_search(a),
        Command::Corpus(CorpusCommand::Query(a)) => {
            crate::search::cmd::run_query(&a.db.path(), &a.args)
        }
        Command::Corpus(CorpusCommand::Embed(a)) => {
            crate::search::cmd::run_embed(&a.db.path(), &a.args)
        }
        Command::Model(ModelCommand::Fetch(a)) => crate::search::cmd::run_model_fetch(&a),
        Command::Bench(BenchCommand::Retrieval(a)) => crate::search::cmd::run_retrieval(&a),
        Command::Bench(BenchCommand::SearchLatency(a)) => crate::search::cmd::run_latency(&a),
    }
}

fn serve(a: ServeArgs) -> anyhow::Result<()> {
    if a.max_batch_items == 0 || a.max_batch_bytes == 0 {
        bail!("--max-batch-items and --max-batch-bytes must be at least 1");
    }
    if !(a.rate_limit >= 0.0 && a.rate_limit.is_finite()) {
        bail!("--rate-limit must be a number of requests per second, 0 to disable");
    }
    let config = ServeConfig {
        db_path: a.db.path(),
        addr: a.addr,
        allow_remote: a.allow_remote,
        api: ApiConfig {
            max_batch_items: a.max_batch_items,
            max_batch_bytes: a.max_batch_bytes,
            rate_limit: a.rate_limit,
            rate_burst: (a.rate_limit * 4.0).max(1.0),
            body_timeout: config::DEFAULT_BODY_TIMEOUT,
        },
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(server::serve(config))
}

/// Print `value` as one pretty JSON document on stdout.
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// Print a plain-text table with a header row; cells are cut to one line.
pub fn print_table(headers: &[&str], rows: &[Vec<String>]) -> anyhow::Result<()> {
    let clean = |s: &str| s.replace(['\n', '\r', '\t'], " ");
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| clean(c)).collect())
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let mut out = std::io::stdout().lock();
    let line = |cells: Vec<String>| -> String {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    writeln!(
        out,
        "{}",
        line(headers.iter().map(|h| h.to_uppercase()).collect())
    )?;
    for r in rows {
        writeln!(out, "{}", line(r))?;
    }
    Ok(())
}

/// Cut `s` to `max` characters, with an ellipsis.
pub fn ellipsize(s: &str, max: usize) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        let cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

fn pair(a: PairArgs) -> anyhow::Result<()> {
    let conn = a.db.open()?;
    let (code, expires) = auth::create_pairing_code(&conn, Clock::system().now())?;
    if a.json {
        print_json(&serde_json::json!({"code": code.display(), "expires_at": fmt_time(expires)}))
    } else {
        println!(
            "pairing code {} (valid until {})",
            code.display(),
            fmt_time(expires)
        );
        println!(
            "Enter it in the personkit extension's popup; it works once, while the relay runs."
        );
        Ok(())
    }
}

fn devices_list(a: JsonArgs) -> anyhow::Result<()> {
    let conn = a.db.open_existing()?;
    let devices = auth::list_devices(&conn)?;
    if a.json {
        return print_json(&devices);
    }
    if devices.is_empty() {
        println!("No devices paired. Run `personkit pair` and enter the code in the extension.");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = devices
        .iter()
        .map(|d| {
            vec![
                d.id.clone(),
                ellipsize(&d.name, 40),
                d.created_at.clone(),
                d.last_seen_at.clone().unwrap_or_else(|| "-".into()),
                if d.revoked_at.is_some() {
                    "revoked".into()
                } else {
                    "active".into()
                },
            ]
        })
        .collect();
    print_table(&["id", "name", "paired", "last seen", "status"], &rows)
}

fn devices_revoke(a: RevokeArgs) -> anyhow::Result<()> {
    let conn = a.db.open_existing()?;
    let device = auth::revoke_device(&conn, &a.id, Clock::system().now())
        .map_err(|e| anyhow::anyhow!("{e}; see `personkit devices list`"))?;
    if a.json {
        print_json(&device)
    } else {
        println!(
            "revoked device {} ({}); its token no longer works",
            device.id, device.name
        );
        Ok(())
    }
}

fn corpus_health(a: JsonArgs) -> anyhow::Result<()> {
    let conn = a.db.open_existing()?;
    let h = corpus::corpus_health(&conn, &a.db.path())?;
    let search = crate::embed::health(&conn, Some(&a.db.path()));
    if a.json {
        let mut v = serde_json::to_value(&h)?;
        v["search"] = serde_json::to_value(&search)?;
        return print_json(&v);
    }
    crate::search::render::print_health(&search);
    println!("corpus     {}", h.path);
    println!(
        "size       {:.1} MiB",
        h.size_bytes as f64 / (1024.0 * 1024.0)
    );
    println!("schema     v{}", h.schema_version);
    println!("relay id   {}", h.relay_id);
    println!(
        "embedded   {} of {} messages (384-d), {} (768-d)",
        h.messages_embedded_384,
        h.tables
            .iter()
            .find(|t| t.table == "messages")
            .map_or(0, |t| t.rows),
        h.messages_embedded_768
    );
    println!();
    let rows: Vec<Vec<String>> = h
        .tables
        .iter()
        .map(|t| vec![t.table.clone(), t.rows.to_string()])
        .collect();
    print_table(&["table", "rows"], &rows)?;
    if !h.embedding_models.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = h
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

fn corpus_surfaces(a: SurfacesArgs) -> anyhow::Result<()> {
    let span = parse_span(&a.since).with_context(|| {
        format!(
            "--since {:?} is not a span; use e.g. 24h, 7d or 4w",
            a.since
        )
    })?;
    let conn = a.db.open_existing()?;
    let now = Clock::system().now();
    let rows = corpus::surfaces(&conn, now - span, now)?;
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
        ],
        &table,
    )
}

fn corpus_messages(a: MessagesArgs) -> anyhow::Result<()> {
    let conn = a.db.open_existing()?;
    let rows = corpus::messages(&conn, a.surface.as_deref(), a.thread.as_deref(), a.limit)?;
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

fn corpus_search(a: SearchArgs) -> anyhow::Result<()> {
    if corpus::fts_query(&a.words).is_none() {
        bail!(
            "give at least one word to search for, e.g. personkit corpus search \"borrow checker\""
        );
    }
    let conn = a.db.open_existing()?;
    let hits = corpus::search(&conn, &a.words, a.limit)?;
    if a.json {
        return print_json(&hits);
    }
    if hits.is_empty() {
        println!("No message contains all of: {}", a.words);
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn ellipsize_cuts_to_one_line() {
        assert_eq!(ellipsize("a\nb", 10), "a b");
        assert_eq!(ellipsize("abcdef", 4), "abc…");
    }
}
