//! `personkit mcp`: the MCP server over stdio on the local corpus, for MCP clients that start it as a process
//! (Claude Desktop, Claude Code). It opens the corpus read-only and never writes it; it runs beside a relay.
//! Logs go to stderr (stdout carries the protocol). It stops when the client closes stdin or stops reading
//! stdout. `personkit mcp install|uninstall <client>` ([`super::mcp_install`]) registers it with a client.

use anyhow::{Context, anyhow};
use clap::{Args, Subcommand};
use personkit_search::Indexes;
use personkit_store::clock::Clock;

use crate::args::DbArg;

#[derive(Debug, Clone, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct McpArgs {
    #[command(subcommand)]
    pub action: Option<McpAction>,
    #[command(flatten)]
    pub db: DbArg,
}

#[derive(Debug, Clone, Subcommand)]
pub enum McpAction {
    /// Register personkit's MCP server in a client's config file (stdio, or --http with an agent token);
    /// backs the file up first and prints the line to add to CLAUDE.md / AGENTS.md / GEMINI.md.
    Install(super::mcp_install::InstallArgs),
    /// Remove the entry `mcp install` wrote (never one personkit did not write).
    Uninstall(super::mcp_install::UninstallArgs),
}

pub fn run(a: McpArgs) -> anyhow::Result<()> {
    match a.action {
        Some(McpAction::Install(i)) => return super::mcp_install::install(i),
        Some(McpAction::Uninstall(u)) => return super::mcp_install::uninstall(u),
        None => {}
    }
    // Read while this is the only thread (the offset is not readable safely once others run).
    let local = time::UtcOffset::current_local_offset().unwrap_or(time::UtcOffset::UTC);
    let conn = a.db.open_read_only()?;
    // The configured embedder gives search its meaning signal; without one (or if it fails to load) search
    // still answers from words, entities and time, as `serve` does.
    let (embedder, search_line) = personkit_server::jobs::configured_embedder(&a.db.path());
    // stdout is the protocol channel: say which search runs on stderr.
    eprintln!("personkit mcp: {search_line}");
    let indexes = Indexes::new();
    // Load the vector index while the client starts up, as `serve` does, so the first search does not pay for
    // it; a search that comes sooner waits for that load. On its own read-only connection.
    if let Some(e) = &embedder {
        let path = a.db.path();
        let _ = indexes.warm_in_background(
            move || personkit_store::db::open_read_only(&path).map_err(|e| e.to_string()),
            e.model_key(),
            e.dim(),
        );
    }
    let backend = personkit_mcp::Backend::new(
        std::sync::Arc::new(personkit_mcp::SingleReader::new(conn)),
        indexes,
        embedder,
        Clock::system(),
    )
    .with_proposals(personkit_mcp::Proposals::lazy(
        a.db.path(),
        personkit_server::jobs::knowledge_settings(&a.db.path()),
        Clock::system(),
    ))
    .with_memory(personkit_memory::profile::path(), local)
    .with_search(
        personkit_search::settings::Settings::for_db(&a.db.path())
            .map_err(|e| anyhow::anyhow!("{e}\nhint: {}", e.hint()))?,
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let served = rt.block_on(personkit_mcp::serve_stdio(backend));
    // A read of stdin may still be waiting on a blocking thread (stdin is not a pipe); do not wait for it.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    served.map_err(|e| anyhow!("{e}"))
}
