//! Owning the corpus: `personkit export` (a Markdown or JSON folder kept in step), `personkit corpus snapshot` /
//! `restore` (signed JSONL), and `personkit forget` (counts first, then for good).

use std::io::{BufWriter, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use clap::Args;
use personkit_archive::export::{self, Report};
use personkit_archive::render::Format;
use personkit_archive::snapshot;
use personkit_search::normalize_bound;
use personkit_store::archive::{self as store_archive, ExportFilter};
use personkit_store::clock::Clock;
use personkit_store::forget::{self, Selection};
use personkit_store::read::{self, ReadError};

use crate::args::DbArg;
use crate::output::{print_json, progress_bar};

#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// markdown (one .md per thread, Obsidian-ready) or json.
    #[arg(long, default_value = "markdown", value_name = "markdown|json")]
    pub format: String,
    /// The export folder; a later run into the same folder updates it.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Only threads active since: RFC 3339, a date (2026-11-01) or a span back from now (7d).
    #[arg(long)]
    pub since: Option<String>,
    /// Only threads of this surface, e.g. browser-ext:chatgpt.
    #[arg(long)]
    pub surface: Option<String>,
    /// Only this thread (full id or 8+ leading characters); repeatable.
    #[arg(long)]
    pub thread: Vec<String>,
    /// Print one JSON document instead of a summary line.
    #[arg(long)]
    pub json: bool,
}

fn read_err(e: ReadError) -> anyhow::Error {
    match e {
        ReadError::NotFound(m) | ReadError::BadRequest(m) => {
            anyhow!("{m} (list threads with `personkit corpus messages`)")
        }
        ReadError::Db(e) => anyhow!(e),
    }
}

pub fn export(a: ExportArgs) -> anyhow::Result<()> {
    let format = Format::parse(&a.format)
        .ok_or_else(|| anyhow!("--format must be markdown or json, not {:?}", a.format))?;
    let conn = a.db.open_read_only()?;
    let now = Clock::system().now();
    let filter = ExportFilter {
        surface: a.surface.clone(),
        since: a
            .since
            .as_deref()
            .map(|s| normalize_bound(s, now).map_err(|e| anyhow!("--since: {e}")))
            .transpose()?,
        threads: a
            .thread
            .iter()
            .map(|t| read::resolve_thread_id(&conn, t).map_err(read_err))
            .collect::<anyhow::Result<_>>()?,
    };
    let bar = progress_bar(0, "exporting");
    let report = export::export(&conn, &a.out, format, &filter, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })
    .with_context(|| format!("export to {} failed", a.out.display()))?;
    bar.finish_and_clear();
    if a.json {
        return print_json(&report);
    }
    print_report(&report);
    Ok(())
}

fn print_report(r: &Report) {
    println!(
        "exported {} threads as {} to {}: {} written, {} unchanged, {} removed",
        r.threads, r.format, r.out, r.written, r.unchanged, r.removed
    );
    if r.knowledge > 0 {
        println!(
            "knowledge: {} approved entr{} in knowledge.{} (pending and rejected entries are never exported)",
            r.knowledge,
            if r.knowledge == 1 { "y" } else { "ies" },
            if r.format == "json" { "json" } else { "md" }
        );
    }
    for n in &r.not_removed {
        eprintln!("personkit: not removed: {}: {}", n.path, n.why);
    }
}

#[derive(Debug, Clone, Args)]
pub struct KeyArg {
    /// The snapshot signing key [default: ~/.dotperson/snapshot-signing.key; made on first use, mode 0600].
    #[arg(long, env = "PERSONKIT_SIGNING_KEY", value_name = "PATH")]
    pub key: Option<PathBuf>,
}

impl KeyArg {
    fn path(&self) -> PathBuf {
        self.key.clone().unwrap_or_else(|| {
            personkit_server::config::default_db_path()
                .parent()
                .map(|d| d.join("snapshot-signing.key"))
                .unwrap_or_else(|| PathBuf::from("snapshot-signing.key"))
        })
    }
}

#[derive(Debug, Clone, Args)]
pub struct SnapshotArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[command(flatten)]
    pub key: KeyArg,
    /// The snapshot file to write (replaced when it exists).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    #[arg(long)]
    pub json: bool,
}

pub fn snapshot(a: SnapshotArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let key_path = a.key.path();
    let (key, made) = snapshot::load_or_create_key(&key_path)?;
    if made {
        eprintln!(
            "personkit: made a snapshot signing key at {} (keep it; its public half is {})",
            key_path.display(),
            snapshot::public_hex(&key)
        );
    }
    let total: u64 = store_archive::table_counts(&conn)?
        .iter()
        .map(|(_, n)| n)
        .sum();
    let bar = progress_bar(total, "snapshot");
    let mut tmp = a.out.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let file =
        std::fs::File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let summary = snapshot::write(&conn, &key, &mut w, |n| bar.set_position(n))?;
    let file = w
        .into_inner()
        .map_err(|e| anyhow!("writing {}: {e}", tmp.display()))?;
    file.sync_all()?;
    std::fs::rename(&tmp, &a.out).with_context(|| format!("cannot write {}", a.out.display()))?;
    bar.finish_and_clear();
    if a.json {
        let mut v = serde_json::to_value(&summary)?;
        v["out"] = a.out.display().to_string().into();
        return print_json(&v);
    }
    println!(
        "snapshot of {} records ({} bytes) written to {}\nsigned with key {}",
        summary.records,
        summary.bytes,
        a.out.display(),
        summary.key
    );
    Ok(())
}

#[derive(Debug, Clone, Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[command(flatten)]
    pub key: KeyArg,
    /// The snapshot file.
    pub file: PathBuf,
    /// Accept a snapshot signed by this public key (64 hex characters) besides this relay's own; repeatable.
    #[arg(long, value_name = "KEY")]
    pub trust: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

pub fn restore(a: RestoreArgs) -> anyhow::Result<()> {
    let mut trusted = Vec::new();
    if let Some(k) = snapshot::load_key(&a.key.path())? {
        trusted.push(k.verifying_key());
    }
    for t in &a.trust {
        trusted.push(snapshot::parse_public(t)?);
    }
    let bytes =
        std::fs::read(&a.file).with_context(|| format!("cannot read {}", a.file.display()))?;
    let verified = snapshot::read_verified(&bytes, &trusted)?;
    drop(bytes);
    let path = a.db.path();
    let _lock = personkit_store::db::ServeLock::acquire(&path)
        .map_err(|e| anyhow!("{e}; stop the relay serving this corpus before restoring into it"))?;
    let mut conn = a.db.open()?;
    if !store_archive::is_empty(&conn)? {
        bail!(
            "refused: the corpus at {} is not empty; restore into a new corpus file (--db NEW.db) — nothing was written",
            path.display()
        );
    }
    let bar = progress_bar(verified.records.len() as u64, "restoring");
    store_archive::restore(&mut conn, &verified.records, 2, |n| bar.set_position(n))
        .map_err(|e| anyhow!("{e}; nothing was written"))?;
    bar.finish_and_clear();
    let s = &verified.summary;
    if a.json {
        let mut v = serde_json::to_value(s)?;
        v["db"] = path.display().to_string().into();
        return print_json(&v);
    }
    println!(
        "restored {} records signed by {} into {}\nvectors are not in snapshots: `personkit serve` (or `personkit corpus embed`) re-derives them",
        s.records,
        s.key,
        path.display()
    );
    Ok(())
}

#[derive(Debug, Clone, Args)]
pub struct ForgetArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// A thread (full id or 8+ leading characters).
    #[arg(long)]
    pub thread: Option<String>,
    /// Every thread of a surface, e.g. browser-ext:chatgpt.
    #[arg(long)]
    pub surface: Option<String>,
    /// Turns from this time on: RFC 3339, a date (2026-11-01) or a span back from now (7d).
    #[arg(long)]
    pub since: Option<String>,
    /// Turns before this time (same forms; a date means its start).
    #[arg(long)]
    pub until: Option<String>,
    /// Forget without asking.
    #[arg(long)]
    pub yes: bool,
    /// Only show what would be forgotten.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn forget(a: ForgetArgs) -> anyhow::Result<()> {
    let mut conn = a.db.open_existing()?;
    let now = Clock::system().now();
    let bound = |name: &str, v: &Option<String>| {
        v.as_deref()
            .map(|s| normalize_bound(s, now).map_err(|e| anyhow!("--{name}: {e}")))
            .transpose()
    };
    let sel = Selection {
        thread: a
            .thread
            .as_deref()
            .map(|t| read::resolve_thread_id(&conn, t).map_err(read_err))
            .transpose()?,
        surface: a.surface.clone(),
        since: bound("since", &a.since)?,
        until: bound("until", &a.until)?,
    };
    if sel == Selection::default() {
        bail!("say what to forget: --thread ID, --surface S, and/or --since/--until");
    }
    let counts = forget::preview(&conn, &sel)?;
    let describe = |c: &forget::Counts| {
        format!(
            "{} messages (revisions included) in {} threads, {} of them entirely",
            c.messages, c.threads, c.whole_threads
        )
    };
    if counts.messages == 0 || a.dry_run {
        if a.json {
            return print_json(&serde_json::json!({ "matched": counts, "forgotten": null }));
        }
        println!("{} match", describe(&counts));
        return Ok(());
    }
    if !a.yes {
        if !std::io::stdin().is_terminal() {
            bail!(
                "this would forget {}; pass --yes to forget without asking (--dry-run shows the counts only)",
                describe(&counts)
            );
        }
        eprint!("Forget {} for good? [y/N] ", describe(&counts));
        std::io::stderr().flush()?;
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
            bail!("nothing forgotten");
        }
    }
    let done = forget::forget(&mut conn, &sel, now)?;
    if a.json {
        return print_json(&serde_json::json!({ "matched": counts, "forgotten": done }));
    }
    println!("forgot {}", describe(&done));
    Ok(())
}
