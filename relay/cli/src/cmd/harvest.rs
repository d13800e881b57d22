//! `personkit harvest`: the transcripts local AI tools keep (Claude Code, Codex CLI, Gemini CLI, Aider,
//! Continue) into the corpus, each source opt-in. `harvest list|enable|disable|add-folder|remove-folder` manage
//! the sources; `harvest [--once]` runs them (with a progress bar and a summary). `serve` runs the same harvest
//! every 15 minutes. Safe beside a running `serve`: short transactions on its own connection.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use personkit_import::Options;
use personkit_import::harvest::{self, Config, Report, Source};
use personkit_store::clock::Clock;

use crate::args::DbArg;
use crate::output::{print_json, print_table, progress_bar};

#[derive(Debug, Clone, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct HarvestArgs {
    #[command(subcommand)]
    pub command: Option<HarvestCommand>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Clone, Subcommand)]
pub enum HarvestCommand {
    /// Each source: its path, whether it is enabled, its last run, the files and turns read.
    List(ListArgs),
    /// Turn a source on (claude-code, codex, gemini-cli, aider, continue, cline, … as `list` names them); `--path`
    /// replaces its default folder.
    Enable(EnableArgs),
    /// Turn a source off (what it stored stays in the corpus).
    Disable(NameArgs),
    /// Read `.aider.chat.history.md` in this folder (aider writes it into each project folder).
    AddFolder(FolderArgs),
    /// Stop reading a folder added with add-folder.
    RemoveFolder(FolderArgs),
}

/// Where the sources' default paths are.
#[derive(Debug, Clone, Default, Args)]
pub struct HomeArg {
    /// The home folder the default paths are under (~/.claude/projects, ~/.codex/sessions, ~/.gemini/tmp,
    /// ~/.continue/sessions) [default: $HOME].
    #[arg(long, env = "PERSONKIT_HARVEST_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,
}

impl HomeArg {
    pub fn config(&self) -> anyhow::Result<Config> {
        let home = match &self.home {
            Some(h) => h.clone(),
            None => std::env::var_os("PERSONKIT_HARVEST_HOME")
                .filter(|h| !h.is_empty())
                .or_else(|| std::env::var_os("HOME"))
                .map(PathBuf::from)
                .context("no home folder: set HOME, or pass --home / PERSONKIT_HARVEST_HOME")?,
        };
        // Where the tools themselves were told to keep their files (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`, …).
        Ok(Config::new(home).with_tool_env(|k| std::env::var_os(k)))
    }
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[command(flatten)]
    pub home: HomeArg,
    /// One pass, then exit; without it, harvest again every --interval until stopped.
    #[arg(long)]
    pub once: bool,
    /// Seconds between passes (without --once). `PERSONKIT_HARVEST_INTERVAL` is `serve`'s (0 there turns its job
    /// off), so it is not read here.
    #[arg(long, default_value_t = 900, value_name = "SECS",
        value_parser = clap::value_parser!(u64).range(1..))]
    pub interval: u64,
    /// Only this source (repeatable; runs it even when not enabled).
    #[arg(long = "source", value_name = "NAME")]
    pub sources: Vec<String>,
    /// A source's folder for this run, e.g. `--path codex=/mnt/old/.codex/sessions` (repeatable).
    #[arg(long = "path", value_name = "NAME=DIR")]
    pub paths: Vec<String>,
    /// Seconds a transcript without end markers (aider) must be unchanged before its last block is taken.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub settle: u64,
    /// Redaction patterns, one regex per line (as for `personkit import`) [default:
    /// ~/.dotperson/redact-patterns.txt when it exists].
    #[arg(long, env = "PERSONKIT_REDACT_PATTERNS", value_name = "FILE")]
    pub patterns: Option<PathBuf>,
    /// Print one JSON document per pass instead of a summary (and no progress bar).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[command(flatten)]
    pub home: HomeArg,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct NameArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// A source's name, as `personkit harvest list` shows it (claude-code, codex, gemini-cli, …).
    pub name: String,
}

#[derive(Debug, Clone, Args)]
pub struct EnableArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// A source's name, as `personkit harvest list` shows it (claude-code, codex, gemini-cli, …).
    pub name: String,
    /// The folder to read instead of the default (e.g. on another OS or a copied home folder).
    #[arg(long, value_name = "DIR")]
    pub path: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct FolderArgs {
    #[command(flatten)]
    pub db: DbArg,
    pub dir: PathBuf,
}

/// The sources' names after the first, for the hints that name `claude-code`.
fn other_names() -> String {
    let names: Vec<&str> = Source::ALL.iter().skip(1).map(|s| s.name()).collect();
    names.join(", ")
}

fn source(name: &str) -> anyhow::Result<Source> {
    Source::parse(name).with_context(|| {
        let names: Vec<&str> = Source::ALL.iter().map(|s| s.name()).collect();
        format!(
            "no harvest source {name:?}; the sources are {}",
            names.join(", ")
        )
    })
}

fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("cannot resolve {}", p.display()))
}

pub fn run(a: HarvestArgs) -> anyhow::Result<()> {
    match a.command {
        None => run_passes(a.run),
        Some(HarvestCommand::List(a)) => list(a),
        Some(HarvestCommand::Enable(a)) => {
            let s = source(&a.name)?;
            let conn = a.db.open()?;
            if let Some(p) = &a.path {
                let p = absolute(p)?;
                personkit_store::harvest::set_path(
                    &conn,
                    s.name(),
                    Some(&p.display().to_string()),
                )?;
            }
            personkit_store::harvest::set_enabled(&conn, s.name(), true)?;
            println!(
                "{} enabled; `personkit harvest --once` reads it now, a running `personkit serve` within 15 minutes",
                s.name()
            );
            if s == Source::Aider && personkit_store::harvest::folders(&conn)?.is_empty() {
                println!(
                    "aider keeps its history in each project folder: add them with `personkit harvest add-folder <dir>`"
                );
            }
            Ok(())
        }
        Some(HarvestCommand::Disable(a)) => {
            let s = source(&a.name)?;
            let conn = a.db.open()?;
            personkit_store::harvest::set_enabled(&conn, s.name(), false)?;
            println!("{} disabled; what it stored stays in the corpus", s.name());
            Ok(())
        }
        Some(HarvestCommand::AddFolder(a)) => {
            let dir = absolute(&a.dir)?;
            if !dir.is_dir() {
                bail!(
                    "{} is not a folder; give the project folder aider ran in",
                    dir.display()
                );
            }
            let conn = a.db.open()?;
            let now = Clock::system().now();
            let added =
                personkit_store::harvest::add_folder(&conn, &dir.display().to_string(), now)?;
            println!(
                "{} {}",
                dir.display(),
                if added { "added" } else { "was already added" }
            );
            if !dir.join(harvest::aider::FILE_NAME).exists() {
                println!("(no {} there yet)", harvest::aider::FILE_NAME);
            }
            Ok(())
        }
        Some(HarvestCommand::RemoveFolder(a)) => {
            let dir = absolute(&a.dir)?;
            let conn = a.db.open()?;
            if !personkit_store::harvest::remove_folder(&conn, &dir.display().to_string())? {
                bail!(
                    "{} was not added; `personkit harvest list` shows the folders",
                    dir.display()
                );
            }
            println!("{} removed", dir.display());
            Ok(())
        }
    }
}

fn list(a: ListArgs) -> anyhow::Result<()> {
    let conn = a.db.open()?;
    let config = a.home.config()?;
    let rows = harvest::status(&conn, &config)?;
    if a.json {
        return print_json(&rows);
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                if r.enabled { "on" } else { "off" }.into(),
                if r.paths.is_empty() {
                    "(no folders: personkit harvest add-folder <dir>)".into()
                } else {
                    // A source with several places (VS Code and its variants) shows those that exist.
                    let there: Vec<&str> = r
                        .paths
                        .iter()
                        .filter(|p| Path::new(p).exists())
                        .map(String::as_str)
                        .collect();
                    if there.is_empty() {
                        r.paths.join(", ") + " (not found)"
                    } else {
                        there.join(", ")
                    }
                },
                r.last_run_at.clone().unwrap_or_else(|| "never".into()),
                r.files.to_string(),
                r.turns.to_string(),
                r.last_error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    print_table(
        &[
            "SOURCE",
            "ENABLED",
            "PATH",
            "LAST RUN",
            "FILES",
            "TURNS",
            "LAST PROBLEM",
        ],
        &table,
    )?;
    for r in &rows {
        if let Some(set) = &r.retention {
            let keeps = match set.days {
                Some(d) => format!("deletes sessions {d} days after their last change"),
                None => "keeps sessions forever".into(),
            };
            println!(
                "\n{}: {keeps} (`{}` in {}{})",
                r.name,
                set.name,
                set.file,
                if set.default {
                    ", not set: the default"
                } else {
                    ""
                }
            );
        }
        for w in &r.warnings {
            println!("  {}: {}\n  → {}", w.level.to_uppercase(), w.message, w.fix);
        }
        if r.only_copies > 0 {
            println!(
                "  {} thread{} from {} whose files the tool deleted: personkit holds the only copy",
                r.only_copies,
                if r.only_copies == 1 { "" } else { "s" },
                r.name
            );
        }
    }
    if !rows.iter().any(|r| r.enabled) {
        println!(
            "\nNo source is enabled: `personkit harvest enable claude-code` (or {}).",
            other_names()
        );
    }
    Ok(())
}

/// The config and sources of one pass, from the arguments and the corpus's settings.
fn prepare(
    a: &RunArgs,
    conn: &personkit_store::Connection,
) -> anyhow::Result<(Config, Vec<Source>)> {
    let mut config = a.home.config()?;
    config.settle = Duration::from_secs(a.settle);
    for p in &a.paths {
        let (name, dir) = p.split_once('=').with_context(|| {
            format!("--path {p:?} is not NAME=DIR (e.g. codex=/mnt/old/.codex/sessions)")
        })?;
        config
            .paths
            .insert(source(name)?, absolute(Path::new(dir))?);
    }
    let enabled = config.load(conn)?;
    let sources = if a.sources.is_empty() {
        enabled
    } else {
        a.sources
            .iter()
            .map(|s| source(s))
            .collect::<anyhow::Result<Vec<_>>>()?
    };
    Ok((config, sources))
}

fn run_passes(a: RunArgs) -> anyhow::Result<()> {
    let patterns = crate::cmd::import::load_patterns(a.patterns.as_deref())?;
    let opts = Options {
        patterns,
        ..Options::default()
    };
    loop {
        let mut conn = a.db.open()?;
        let (config, sources) = prepare(&a, &conn)?;
        if sources.is_empty() {
            bail!(
                "no harvest source is enabled: `personkit harvest enable claude-code` (or {}), then run again; `personkit harvest list` shows them",
                other_names()
            );
        }
        let bar = progress_bar(0, "harvesting");
        if a.json {
            bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        let now = Clock::system().now();
        let report = harvest::run(&mut conn, &config, &sources, &opts, now, &mut |p| {
            bar.set_message(format!("harvesting {}", p.source.name()));
            bar.set_length(p.files_total);
            bar.set_position(p.files_done);
        });
        bar.finish_and_clear();
        let report = report.map_err(anyhow::Error::from)?;
        if a.json {
            print_json(&report)?;
        } else {
            print_report(&report);
        }
        drop(conn);
        if a.once {
            if report.problems() > 0 {
                bail!(
                    "{} part(s) could not be read (see above); everything else was harvested",
                    report.problems()
                );
            }
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(a.interval));
    }
}

fn print_report(r: &Report) {
    for s in &r.sources {
        let replaced = match s.files_replaced {
            0 => String::new(),
            n => format!(" ({n} replaced, read again)"),
        };
        println!(
            "{}: {} files, {} with new content{replaced}; {} turns: stored {}, duplicate {}, rejected {}",
            s.surface, s.files, s.files_read, s.turns, s.stored, s.duplicate, s.rejected
        );
        for (reason, n) in &s.rejected_by_reason {
            println!("  rejected {reason}: {n}");
        }
        for (what, n) in &s.unknown {
            println!("  not understood, kept as a placeholder: {what} ({n})");
        }
        for (what, n) in &s.records_skipped {
            println!("  not turns, skipped: {what} ({n})");
        }
        let t = &s.records;
        if t.read > 0 {
            println!(
                "  records read {}: {} gave turns, {} skipped, {} problems{}",
                t.read,
                t.to_turns,
                t.skipped,
                t.problems,
                if t.silent > 0 {
                    format!(", {} gave nothing (reported below)", t.silent)
                } else {
                    String::new()
                }
            );
        }
        if s.files_gone > 0 {
            println!(
                "  {} file{} deleted by the tool since the last pass: its conversations are now only in the corpus",
                s.files_gone,
                if s.files_gone == 1 { "" } else { "s" }
            );
        }
        for p in &s.problems {
            eprintln!("personkit: {p}");
        }
    }
}
