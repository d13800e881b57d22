//! `personkit events`: the events stream — what you did (commits, plans, task lists, memory files, AI-tool
//! config, reading list, screenshots, sessions). `events sources|enable|disable|add-path|remove-path` manage the
//! harvesters (each off until enabled), `events harvest` runs them once with a progress bar and per-source
//! counts, `events list` reads the stream. `serve` runs each enabled source on its own cadence.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use personkit_events::{Config, Report, Source};
use personkit_store::clock::Clock;
use personkit_store::events::{self as store, Filter};

use crate::args::DbArg;
use crate::cmd::harvest::HomeArg;
use crate::output::{ellipsize, print_json, print_table, progress_bar};

#[derive(Debug, Clone, Subcommand)]
pub enum EventsCommand {
    /// The events, newest first: `events list --kind git.commit --since 7d`.
    List(ListArgs),
    /// Run the enabled sources once (or the ones named with --source, enabled or not).
    Harvest(HarvestArgs),
    /// Each source: enabled or not, its cadence, what it reads, its last run and totals.
    Sources(SourcesArgs),
    /// Turn a source on: git, claude-plans, config-state, reading-list, screenshots, sessions.
    Enable(NameArgs),
    /// Turn a source off (what it stored stays).
    Disable(NameArgs),
    /// Give a source a place to read: a repository for git, a project folder for claude-plans, the file for
    /// reading-list, the folder for screenshots.
    AddPath(PathArgs),
    /// Stop reading a place added with add-path.
    RemovePath(PathArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// A kind (git.commit, plan.updated, session.started, …), or all under a prefix: `session.*`.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only events of this source surface (events:git, harvest:claude-code, …).
    #[arg(long)]
    pub source: Option<String>,
    /// Only the events derived from this thread (full id).
    #[arg(long)]
    pub thread: Option<String>,
    /// From this time: RFC 3339, a date (2026-11-01) or a span back from now (7d, 12h).
    #[arg(long)]
    pub since: Option<String>,
    /// Before this time (same forms as --since).
    #[arg(long)]
    pub until: Option<String>,
    /// At most this many (1 to 500).
    #[arg(long, default_value_t = 50,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(store::MAX_LIMIT)))]
    pub limit: u32,
    /// Continue after a previous page (its `next`).
    #[arg(long)]
    pub cursor: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct HarvestArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[command(flatten)]
    pub home: HomeArg,
    /// Only this source (repeatable; runs it even when not enabled).
    #[arg(long = "source", value_name = "NAME")]
    pub sources: Vec<String>,
    /// Redaction patterns, one regex per line (as for `personkit import`) [default:
    /// ~/.dotperson/redact-patterns.txt when it exists].
    #[arg(long, env = "PERSONKIT_REDACT_PATTERNS", value_name = "FILE")]
    pub patterns: Option<PathBuf>,
    /// One JSON document instead of a summary (and no progress bar).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct SourcesArgs {
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
    /// A source's name, as `personkit events sources` shows it.
    pub name: String,
}

#[derive(Debug, Clone, Args)]
pub struct PathArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// A source's name: git, claude-plans, reading-list or screenshots.
    pub name: String,
    pub path: PathBuf,
}

fn source(name: &str) -> anyhow::Result<Source> {
    Source::parse(name).with_context(|| {
        let names: Vec<&str> = Source::ALL.iter().map(|s| s.name()).collect();
        format!(
            "no event source {name:?}; the sources are {}",
            names.join(", ")
        )
    })
}

fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("cannot resolve {}", p.display()))
}

/// The config of a pass: the home folder and the tools' variables from the environment, the corpus's paths.
pub fn config(home: &HomeArg, patterns: Vec<String>) -> anyhow::Result<Config> {
    let h = home.config()?.home;
    let mut c = Config::new(h).with_env(|k| std::env::var_os(k));
    c.patterns = patterns;
    Ok(c)
}

pub fn run(c: EventsCommand) -> anyhow::Result<()> {
    match c {
        EventsCommand::List(a) => list(a),
        EventsCommand::Harvest(a) => harvest(a),
        EventsCommand::Sources(a) => sources(a),
        EventsCommand::Enable(a) => {
            let s = source(&a.name)?;
            let conn = a.db.open()?;
            store::set_enabled(&conn, s.name(), true)?;
            println!(
                "{} enabled; `personkit events harvest` reads it now, a running `personkit serve` within {} minutes",
                s.name(),
                s.cadence().as_secs() / 60
            );
            if s == Source::Git && store::paths(&conn, s.name())?.is_empty() {
                println!("add the repositories to read: `personkit events add-path git <repo>`");
            }
            Ok(())
        }
        EventsCommand::Disable(a) => {
            let s = source(&a.name)?;
            let conn = a.db.open()?;
            store::set_enabled(&conn, s.name(), false)?;
            println!("{} disabled; what it stored stays", s.name());
            Ok(())
        }
        EventsCommand::AddPath(a) => {
            let s = source(&a.name)?;
            let Some(meaning) = s.path_meaning() else {
                bail!(
                    "{} takes no path; sources that do: git, claude-plans, reading-list, screenshots",
                    s.name()
                );
            };
            let p = absolute(&a.path)?;
            let ok = match s {
                Source::ReadingList => p.is_file() || p.parent().is_some_and(Path::is_dir),
                Source::Git => p.join(".git").exists() || p.join("HEAD").is_file(),
                _ => p.is_dir(),
            };
            if !ok {
                bail!("{} is not one of {meaning}", p.display());
            }
            let conn = a.db.open()?;
            let added = store::add_path(
                &conn,
                s.name(),
                &p.display().to_string(),
                Clock::system().now(),
            )?;
            println!(
                "{} {} for {}",
                p.display(),
                if added { "added" } else { "was already added" },
                s.name()
            );
            Ok(())
        }
        EventsCommand::RemovePath(a) => {
            let s = source(&a.name)?;
            let p = absolute(&a.path)?;
            let conn = a.db.open()?;
            if !store::remove_path(&conn, s.name(), &p.display().to_string())? {
                bail!(
                    "{} was not added to {}; `personkit events sources` shows what was",
                    p.display(),
                    s.name()
                );
            }
            println!("{} removed from {}", p.display(), s.name());
            Ok(())
        }
    }
}

fn list(a: ListArgs) -> anyhow::Result<()> {
    let now = Clock::system().now();
    let bound = |v: &Option<String>| -> anyhow::Result<Option<String>> {
        v.as_deref()
            .map(|s| personkit_search::normalize_bound(s, now).map_err(|e| anyhow::anyhow!("{e}")))
            .transpose()
    };
    let filter = Filter {
        kind: a.kind.clone(),
        source_surface: a.source.clone(),
        thread: a.thread.clone(),
        since: bound(&a.since).context("--since")?,
        until: bound(&a.until).context("--until")?,
        before: a.cursor.clone(),
        limit: a.limit,
    };
    let conn = a.db.open_read_only()?;
    let page = store::list(&conn, &filter)?;
    if a.json {
        return print_json(&page);
    }
    let rows: Vec<Vec<String>> = page
        .events
        .iter()
        .map(|e| {
            let first_line = e.content.lines().next().unwrap_or("");
            vec![
                e.occurred_at.clone(),
                e.kind.clone(),
                e.source_surface.clone(),
                ellipsize(first_line, 80),
            ]
        })
        .collect();
    print_table(&["WHEN", "KIND", "SOURCE", "WHAT"], &rows)?;
    if page.events.is_empty() {
        println!(
            "No events{}. Enable a source (`personkit events sources` lists them), then `personkit events harvest`.",
            if filter.kind.is_some() || filter.since.is_some() {
                " match"
            } else {
                ""
            }
        );
    }
    if let Some(n) = &page.next {
        println!("more: --cursor '{n}'");
    }
    Ok(())
}

fn sources(a: SourcesArgs) -> anyhow::Result<()> {
    let conn = a.db.open()?;
    let mut c = config(&a.home, Vec::new())?;
    c.load(&conn)?;
    let rows = personkit_events::status(&conn, &c)?;
    if a.json {
        return print_json(&rows);
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                if r.enabled { "on" } else { "off" }.into(),
                format!("{} min", r.cadence_minutes),
                reads(r),
                r.last_run_at.clone().unwrap_or_else(|| "never".into()),
                r.stored.to_string(),
                r.rejected.to_string(),
                r.last_error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    print_table(
        &[
            "SOURCE",
            "ENABLED",
            "EVERY",
            "READS",
            "LAST RUN",
            "STORED",
            "REJECTED",
            "LAST PROBLEM",
        ],
        &table,
    )?;
    if !rows.iter().any(|r| r.enabled) {
        println!(
            "\nNo source is enabled: `personkit events enable git` (or claude-plans, config-state, reading-list, screenshots, sessions)."
        );
    }
    Ok(())
}

/// What a source reads, short: the places that exist (all of them with `--json`).
fn reads(r: &personkit_events::SourceStatus) -> String {
    if r.paths.is_empty() {
        return match &r.takes_paths {
            Some(_) => format!("(none: personkit events add-path {} <path>)", r.name),
            None => "(the corpus)".into(),
        };
    }
    let there: Vec<&str> = r
        .paths
        .iter()
        .filter(|p| Path::new(p).exists())
        .map(String::as_str)
        .collect();
    if there.is_empty() {
        ellipsize(&format!("{} (not found)", r.paths.join(", ")), 100)
    } else {
        ellipsize(&there.join(", "), 100)
    }
}

fn harvest(a: HarvestArgs) -> anyhow::Result<()> {
    let patterns = crate::cmd::import::load_patterns(a.patterns.as_deref())?;
    let conn = a.db.open()?;
    let mut c = config(&a.home, patterns)?;
    let enabled = c.load(&conn)?;
    let list = if a.sources.is_empty() {
        enabled
    } else {
        a.sources
            .iter()
            .map(|s| source(s))
            .collect::<anyhow::Result<Vec<_>>>()?
    };
    if list.is_empty() {
        bail!(
            "no event source is enabled: `personkit events enable git` (or claude-plans, config-state, reading-list, screenshots, sessions), then run again; `personkit events sources` shows them"
        );
    }
    let bar = progress_bar(list.len() as u64, "reading events");
    if a.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let report = personkit_events::run(&conn, &c, &list, Clock::system().now(), &mut |p| {
        bar.set_message(format!("reading {}", p.source.name()));
        bar.set_position(p.sources_done);
    });
    bar.finish_and_clear();
    let report = report?;
    if a.json {
        return print_json(&report);
    }
    print_report(&report);
    Ok(())
}

fn print_report(r: &Report) {
    for s in &r.sources {
        println!(
            "{}: read {}, stored {}, duplicate {}, rejected {}{}",
            s.source,
            s.read,
            s.stored,
            s.duplicate,
            s.rejected,
            if s.more { " (more next pass)" } else { "" }
        );
        for p in &s.problems {
            eprintln!("personkit: {}: {p}", s.source);
        }
    }
}
