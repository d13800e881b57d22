//! `personkit import <path>`: an official export (zip, folder or JSON file) into the corpus, with a progress
//! bar and a summary. Safe beside a running `serve`: short write transactions of whole conversations, on its own
//! connection (WAL, busy timeout).

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use personkit_import::{Options, Progress, Summary};
use personkit_store::clock::Clock;

use crate::args::DbArg;
use crate::output::{print_json, progress_bar};

#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// The export: the zip as downloaded, its unpacked folder, or a conversations JSON file (ChatGPT, Claude,
    /// Grok, DeepSeek, Gemini Takeout; the format is read from the file).
    pub path: PathBuf,
    /// Read and count everything, store nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Redaction patterns, one regex per line (the ones in the extension's popup), applied with the built-in
    /// rules [default: ~/.dotperson/redact-patterns.txt when it exists].
    #[arg(long, env = "PERSONKIT_REDACT_PATTERNS", value_name = "FILE")]
    pub patterns: Option<PathBuf>,
    /// Print one JSON document instead of a summary (and no progress bar).
    #[arg(long)]
    pub json: bool,
}

/// The user's redaction patterns: from `file` when given, else from `~/.dotperson/redact-patterns.txt` when it
/// exists (imports, harvests and `serve`'s harvest job read the same).
pub fn load_patterns(file: Option<&std::path::Path>) -> anyhow::Result<Vec<String>> {
    let (path, explicit) = match file {
        Some(p) => (p.to_path_buf(), true),
        None => match personkit_server::config::default_db_path().parent() {
            Some(dir) => (dir.join("redact-patterns.txt"), false),
            None => return Ok(Vec::new()),
        },
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(text
            .lines()
            .map(str::trim_end)
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(str::to_owned)
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => Ok(Vec::new()),
        Err(e) => {
            Err(e).with_context(|| format!("cannot read the patterns file {}", path.display()))
        }
    }
}

pub fn run(a: ImportArgs) -> anyhow::Result<()> {
    let opts = Options {
        dry_run: a.dry_run,
        patterns: load_patterns(a.patterns.as_deref())?,
        ..Options::default()
    };
    // An import may be the first thing a corpus receives, so it creates one; a dry run compares against an
    // existing corpus and never creates a file.
    let mut conn = if a.dry_run {
        a.db.open_existing()?
    } else {
        a.db.open()?
    };
    let bar = progress_bar(0, "importing");
    if a.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let now = Clock::system().now();
    let summary =
        personkit_import::import_path(&mut conn, &a.path, &opts, now, &mut |p: Progress| {
            bar.set_length(p.bytes_total);
            bar.set_position(p.bytes_done);
        });
    bar.finish_and_clear();
    let summary = summary.map_err(anyhow::Error::from)?;
    if a.json {
        print_json(&summary)?;
    } else {
        print_summary(&summary);
    }
    if !summary.problems.is_empty() {
        bail!(
            "{} part(s) of {} could not be imported (see the problems); everything else was",
            summary.problems.len(),
            a.path.display()
        );
    }
    Ok(())
}

fn print_summary(s: &Summary) {
    let verb = if s.dry_run { "would store" } else { "stored" };
    for f in &s.files {
        let format = f.format.map(|f| f.name()).unwrap_or("empty");
        println!("{} ({format}): {} conversations", f.file, f.conversations);
    }
    let failed = match s.conversations_failed {
        0 => String::new(),
        n => format!(" ({n} more could not be read)"),
    };
    println!(
        "{} conversations{failed}, {} turns: {verb} {}, duplicate {}, rejected {}",
        s.conversations, s.turns, s.stored, s.duplicate, s.rejected
    );
    for (reason, n) in &s.rejected_by_reason {
        println!("  rejected {reason}: {n}");
    }
    if s.empty > 0 {
        println!("  empty turns skipped: {}", s.empty);
    }
    if s.chrome > 0 {
        println!(
            "  site chrome skipped (\"Thought for …\" recaps): {}",
            s.chrome
        );
    }
    for (reason, n) in &s.messages_unreadable_by_reason {
        println!(
            "  messages that could not be read, skipped: {n} {}",
            personkit_import::formats::unreadable_words(reason)
        );
    }
    for (what, n) in &s.unknown_content {
        println!("  not understood, kept as a placeholder: {what} ({n})");
    }
    for p in &s.problems {
        eprintln!("personkit: {p}");
    }
    if s.dry_run {
        println!("dry run: nothing was stored");
    }
}
