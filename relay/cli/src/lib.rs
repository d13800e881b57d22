//! The `personkit` command line: one [`Command`] variant per subcommand group, one module per group in [`cmd`],
//! and [`run`] dispatching. Every command that opens the corpus takes `--db` and every listing takes `--json`
//! ([`args`]); listings print a table by default ([`output`]). Errors say what to do next.
//!
//! To add a subcommand: a variant here (with an `Args` struct flattening [`args::DbArg`] if it opens the
//! corpus), its code in a `cmd` module, and one arm in [`run`].

pub mod args;
pub mod cmd;
pub mod output;

use clap::{Parser, Subcommand};

use args::JsonArgs;
use cmd::corpus::CorpusCommand;
use cmd::devices::DevicesCommand;

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
    Serve(cmd::serve::ServeArgs),
    /// Print a one-time pairing code (valid 10 minutes) for a new device, or with --sync for another relay.
    Pair(cmd::devices::PairArgs),
    /// List or revoke paired devices and agent tokens.
    #[command(subcommand)]
    Devices(DevicesCommand),
    /// Read-only tokens for your own agents (MCP clients over HTTP): add, list, revoke.
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// Serve the corpus to an MCP client over stdio (read-only). `mcp install <client>` registers it with Claude
    /// Desktop, Claude Code, Cursor, VS Code, Codex or Gemini CLI; `mcp uninstall <client>` removes it.
    Mcp(cmd::mcp::McpArgs),
    /// Look into the corpus and search it.
    #[command(subcommand)]
    Corpus(CorpusCommand),
    /// Manage the local embedding model.
    #[command(subcommand)]
    Model(ModelCommand),
    /// What was captured today and this week, per site and per project; the last 90 days per site; knowledge
    /// waiting for approval; capture health. The dashboard's Today page in text.
    Today(cmd::today::TodayArgs),
    /// Everything about one entity (a project, tool, model, site, person, …): kind, aliases, relations, threads,
    /// last seen. `--json` for the whole view.
    Entity(cmd::graph::EntityArgs),
    /// The entity graph: build it now, list entities, neighbours, a path between two, merge proposals, merge.
    #[command(subcommand)]
    Graph(cmd::graph::GraphCommand),
    /// Print (and open in the browser) a one-time link that signs in to your library, the relay's dashboard.
    Open(cmd::open::OpenArgs),
    /// Export threads as Markdown (Obsidian-ready) or JSON files into a folder; a rerun updates it.
    Export(cmd::archive::ExportArgs),
    /// Forget turns for good (a thread, a surface, a time range): shows the counts and asks first.
    Forget(cmd::archive::ForgetArgs),
    /// Sync with other relays of yours: add a peer (with a code of `personkit pair --sync` there), list, revoke,
    /// or run a round now. `serve` syncs on its own, on new data and every few seconds.
    #[command(subcommand)]
    Sync(cmd::sync::SyncCommand),
    /// Import an official export (ChatGPT, Claude, Grok, DeepSeek, Gemini Takeout: zip, folder or JSON file) into the corpus.
    Import(cmd::import::ImportArgs),
    /// Read the transcripts of local AI tools (Claude Code, Codex CLI, Gemini CLI, Aider, Continue), each
    /// opt-in: `harvest list`, `harvest enable <name>`, `harvest --once`.
    Harvest(cmd::harvest::HarvestArgs),
    /// What you did — commits, plans, task lists, memory files, AI-tool config, reading list, screenshots,
    /// sessions — each source opt-in: `events sources`, `events enable git`, `events harvest`, `events list`.
    #[command(subcommand)]
    Events(cmd::events::EventsCommand),
    /// What the knowledge pipeline drew from the turns, and your decisions on it: `knowledge run --once`,
    /// `knowledge list`, `knowledge approve <id>`, `knowledge reject <id>`, `knowledge audit`.
    #[command(subcommand)]
    Knowledge(cmd::knowledge::KnowledgeCommand),
    /// Run a memory tier now (`distill short|mid|long`) or see where each stands (`distill status`): short is a
    /// digest of recent days (no model, daily at 03:00), mid a weekly summary and long a monthly memory (a model).
    Distill(cmd::memory::DistillArgs),
    /// The memory tiers' versions, every one kept: `memory list --tier mid`, `memory show mid`, `memory diff mid`.
    #[command(subcommand)]
    Memory(cmd::memory::MemoryCommand),
    /// The profile you write about yourself for your agents: `profile show`, `profile set FILE`, `profile path`.
    #[command(subcommand)]
    Profile(cmd::memory::ProfileCommand),
    /// Print what an agent loads (`--tier 1..4`), for pasting into a CLAUDE.md or AGENTS.md.
    Context(cmd::memory::ContextArgs),
    /// How much each thread was used lately: `heat list --tier hot`, `heat recompute`.
    #[command(subcommand)]
    Heat(cmd::heat::HeatCommand),
}

#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// Make a read-only token for an agent (printed once).
    Add(cmd::devices::AgentAddArgs),
    /// Every agent token, with its status (`devices list` shows them beside the devices).
    List(JsonArgs),
    /// Revoke an agent by name or id: its token stops working at once.
    Revoke(cmd::devices::AgentRevokeArgs),
}

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Install the default embedding model (all-MiniLM-L6-v2) from its hub, or from a folder with --from-dir.
    Fetch(cmd::model::ModelFetchArgs),
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
    personkit_store::db::register_sqlite_vec();
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
    use cmd::{archive, corpus, devices, mcp, model, open, serve};
    match cli.command {
        Command::Serve(a) => serve::run(a),
        Command::Pair(a) => devices::pair(a),
        Command::Devices(DevicesCommand::List(a)) => devices::list(a),
        Command::Devices(DevicesCommand::Revoke(a)) => devices::revoke(a),
        Command::Agents(AgentsCommand::Add(a)) => devices::add_agent(a),
        Command::Agents(AgentsCommand::List(a)) => devices::list_agents(a),
        Command::Agents(AgentsCommand::Revoke(a)) => devices::revoke_agent(a),
        Command::Mcp(a) => mcp::run(a),
        Command::Corpus(CorpusCommand::Health(a)) => corpus::health(a),
        Command::Corpus(CorpusCommand::Surfaces(a)) => corpus::surfaces(a),
        Command::Corpus(CorpusCommand::Messages(a)) => corpus::messages(a),
        Command::Corpus(CorpusCommand::Query(a)) => corpus::run_query(&a.db, &a.args),
        Command::Corpus(CorpusCommand::Embed(a)) => corpus::run_embed(&a.db, &a.args),
        Command::Model(ModelCommand::Fetch(a)) => model::run_model_fetch(&a),
        Command::Open(a) => open::run(a),
        Command::Today(a) => cmd::today::run(a),
        Command::Entity(a) => cmd::graph::entity(a),
        Command::Graph(c) => cmd::graph::run(c),
        Command::Export(a) => archive::export(a),
        Command::Forget(a) => archive::forget(a),
        Command::Import(a) => cmd::import::run(a),
        Command::Sync(c) => cmd::sync::run(c),
        Command::Harvest(a) => cmd::harvest::run(a),
        Command::Events(c) => cmd::events::run(c),
        Command::Knowledge(c) => cmd::knowledge::run(c),
        Command::Distill(a) => cmd::memory::distill(a),
        Command::Memory(c) => cmd::memory::run(c),
        Command::Profile(c) => cmd::memory::profile_cmd(c),
        Command::Context(a) => cmd::memory::context_cmd(a),
        Command::Heat(c) => cmd::heat::run(c),
        Command::Corpus(CorpusCommand::Snapshot(a)) => archive::snapshot(a),
        Command::Corpus(CorpusCommand::Restore(a)) => archive::restore(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
