//! Memory for agents from the command line: `distill short|mid|long|status` runs a tier now or shows where each
//! stands; `memory list|show|diff` reads the versions (every one is kept); `profile show|set|path` the profile you
//! write; `context --tier N` prints what an agent loads, for pasting into a CLAUDE.md or AGENTS.md.

use std::io::Read as _;
use std::path::PathBuf;

use anyhow::{Context as _, anyhow, bail};
use clap::{Args, Subcommand, ValueEnum};

use personkit_memory::context::{self, Ask};
use personkit_memory::run::{Configured, run_tier};
use personkit_memory::{MemoryError, Tier, diff, profile, status};
use personkit_store::clock::Clock;
use personkit_store::memory as rows;

use crate::args::DbArg;
use crate::output::{ellipsize, print_json, print_table};

fn local_offset() -> time::UtcOffset {
    time::UtcOffset::current_local_offset().unwrap_or(time::UtcOffset::UTC)
}

fn memory_error(e: MemoryError) -> anyhow::Error {
    anyhow!("{e}\nhint: {}", e.hint())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DistillWhat {
    Short,
    Mid,
    Long,
    /// Where each tier stands: on or off, model, versions, last run.
    Status,
}

#[derive(Debug, Clone, Args)]
pub struct DistillArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// The tier to run now, or `status`.
    pub what: DistillWhat,
    #[arg(long)]
    pub json: bool,
}

pub fn distill(a: DistillArgs) -> anyhow::Result<()> {
    let local = local_offset();
    let path = a.db.path();
    let cfg = Configured::load(&path).map_err(memory_error)?;
    let tier = match a.what {
        DistillWhat::Short => Tier::Short,
        DistillWhat::Mid => Tier::Mid,
        DistillWhat::Long => Tier::Long,
        DistillWhat::Status => {
            let conn = a.db.open_read_only()?;
            let list = status(&conn, &cfg.settings, &cfg.llm_result())?;
            if a.json {
                return print_json(&list);
            }
            let rows: Vec<Vec<String>> = list
                .iter()
                .map(|s| {
                    vec![
                        s.tier.as_str().to_owned(),
                        if s.enabled { "on" } else { "off" }.to_owned(),
                        s.budget.to_string(),
                        s.current.as_ref().map_or("-".into(), |v| {
                            format!(
                                "#{} {} ({} tokens)",
                                v.number,
                                &v.created_at[..16],
                                v.tokens
                            )
                        }),
                        s.last_run.as_ref().map_or("never".into(), |r| {
                            format!(
                                "{} {}: {}",
                                &r.at[..16],
                                r.outcome,
                                ellipsize(&r.message, 50)
                            )
                        }),
                        if s.due { "due".into() } else { String::new() },
                        ellipsize(&s.model, 40),
                    ]
                })
                .collect();
            print_table(
                &["TIER", "ON", "BUDGET", "CURRENT", "LAST RUN", "", "MODEL"],
                &rows,
            )?;
            for s in &list {
                println!("{}: {}", s.tier.as_str(), s.schedule);
            }
            return Ok(());
        }
    };
    let conn = a.db.open_existing()?;
    let now = Clock::system().now();
    if tier != Tier::Short && !a.json {
        eprintln!(
            "distilling {} memory with the model (this can take minutes)…",
            tier.as_str()
        );
    }
    let run = run_tier(&conn, tier, &cfg, now, local, "manual").map_err(memory_error)?;
    if a.json {
        return print_json(&run);
    }
    match run.outcome.as_str() {
        "unchanged" => println!("{} memory: unchanged ({})", tier.as_str(), run.message),
        _ => println!(
            "{} memory: {} — see it with `personkit memory show {}`",
            tier.as_str(),
            run.message,
            tier.as_str()
        ),
    }
    Ok(())
}

#[derive(Debug, Clone, Subcommand)]
pub enum MemoryCommand {
    /// A tier's versions, newest first (withdrawn ones say so).
    List(ListArgs),
    /// A version: a tier's current one (`short`, `mid`, `long`, `profile`) or one by id.
    Show(ShowArgs),
    /// What changed between a version and the one before it (or another version).
    Diff(DiffArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[arg(long, default_value = "short", value_parser = ["short", "mid", "long", "profile"])]
    pub tier: String,
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub limit: u32,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// `short`, `mid`, `long`, `profile`, or a version id (a unique prefix will do).
    pub which: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct DiffArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// The newer version: a tier's current one, or an id.
    pub which: String,
    /// The older version (default: the one before it in its tier).
    pub against: Option<String>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(c: MemoryCommand) -> anyhow::Result<()> {
    match c {
        MemoryCommand::List(a) => list(a),
        MemoryCommand::Show(a) => show(a),
        MemoryCommand::Diff(a) => diff_cmd(a),
    }
}

fn resolve(conn: &personkit_store::Connection, which: &str) -> anyhow::Result<rows::Version> {
    if rows::TIERS.contains(&which) {
        return rows::latest(conn, which)?.ok_or_else(|| {
            anyhow!(
                "there is no {which} version yet\nhint: {}",
                if which == "profile" {
                    "write one with `personkit profile set FILE` or on the dashboard's Memory page"
                        .to_owned()
                } else {
                    format!("run `personkit distill {which}`")
                }
            )
        });
    }
    let ids = rows::ids_by_prefix(conn, which)?;
    match ids.as_slice() {
        [id] => rows::version(conn, id)?.context("the version went away"),
        [] => {
            bail!("no version {which:?}\nhint: `personkit memory list --tier TIER` shows the ids")
        }
        _ => bail!("{which:?} names more than one version; give more of the id"),
    }
}

fn list(a: ListArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let list = rows::versions(&conn, &a.tier, a.limit, None)?;
    if a.json {
        return print_json(&list);
    }
    if list.is_empty() {
        println!("no {} versions yet", a.tier);
        return Ok(());
    }
    let table: Vec<Vec<String>> = list
        .iter()
        .map(|v| {
            vec![
                format!("#{}", v.number),
                v.id[..12].to_owned(),
                v.created_at[..16].to_owned(),
                v.tokens.to_string(),
                v.model.clone().unwrap_or_default(),
                match &v.withdrawn_at {
                    Some(at) => format!("withdrawn {} (a source was forgotten)", &at[..10]),
                    None => String::new(),
                },
            ]
        })
        .collect();
    print_table(&["", "ID", "MADE", "TOKENS", "MODEL", ""], &table)
}

fn show(a: ShowArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let v = resolve(&conn, &a.which)?;
    if a.json {
        return print_json(&v);
    }
    println!(
        "{} version {} ({}), made {}{}, {} tokens",
        v.tier,
        v.number,
        &v.id[..12],
        v.created_at,
        v.model
            .as_deref()
            .map(|m| format!(" by {m}"))
            .unwrap_or_default(),
        v.tokens
    );
    if let Some(at) = &v.withdrawn_at {
        println!("withdrawn at {at}: a thread it drew on was forgotten");
        return Ok(());
    }
    println!();
    println!("{}", v.body);
    Ok(())
}

fn diff_cmd(a: DiffArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let new = resolve(&conn, &a.which)?;
    let old = match &a.against {
        Some(o) => Some(resolve(&conn, o)?),
        None => rows::previous(&conn, &new)?,
    };
    // A withdrawn version's text is gone: comparing with its blank body would call every line new.
    if let Some(o) = old.as_ref().filter(|o| o.withdrawn_at.is_some()) {
        anyhow::bail!(
            "{} #{} was withdrawn (a thread it drew on was forgotten), so there is nothing to compare with; \
             try `personkit memory show {}` for the whole text, or `personkit memory diff {} <older id>`",
            o.tier,
            o.number,
            new.id,
            new.id
        );
    }
    let d = diff::diff(old.as_ref().map_or("", |o| o.body.as_str()), &new.body);
    if a.json {
        return print_json(&serde_json::json!({
            "old": old.as_ref().map(|o| &o.id), "new": new.id, "diff": d,
        }));
    }
    match &old {
        Some(o) => println!(
            "{} #{} → #{}: +{} −{} lines",
            new.tier, o.number, new.number, d.added, d.removed
        ),
        None => println!("{} #{}: the first version", new.tier, new.number),
    }
    print!("{}", d.render());
    Ok(())
}

#[derive(Debug, Clone, Subcommand)]
pub enum ProfileCommand {
    /// Print the profile (and whether it is recorded).
    Show(ProfileShowArgs),
    /// Replace the profile with a file's text (`-` for standard input); the old text stays as a version.
    Set(ProfileSetArgs),
    /// Print where the profile file is (edit it with any editor; the relay records each new text).
    Path(ProfileShowArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ProfileShowArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ProfileSetArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// A Markdown file, or `-` for standard input.
    pub file: PathBuf,
    #[arg(long)]
    pub json: bool,
}

pub fn profile_cmd(c: ProfileCommand) -> anyhow::Result<()> {
    let path = profile::path();
    match c {
        ProfileCommand::Path(a) => {
            if a.json {
                return print_json(&serde_json::json!({"path": path}));
            }
            println!("{}", path.display());
            Ok(())
        }
        ProfileCommand::Show(a) => {
            let conn = a.db.open_existing()?;
            let p = profile::record(&conn, &path, Clock::system().now()).map_err(memory_error)?;
            if a.json {
                return print_json(&p);
            }
            if !p.exists {
                println!(
                    "no profile yet at {}\nhint: write who you are and how agents should work with you there, or `personkit profile set FILE`",
                    p.path
                );
                return Ok(());
            }
            println!(
                "{} — version {}, {} tokens\n",
                p.path,
                p.version.as_ref().map_or(0, |v| v.number),
                p.tokens
            );
            print!("{}", p.body);
            Ok(())
        }
        ProfileCommand::Set(a) => {
            let mut text = String::new();
            if a.file.as_os_str() == "-" {
                std::io::stdin()
                    .take(profile::MAX_BYTES as u64 + 1)
                    .read_to_string(&mut text)
                    .context("cannot read standard input as UTF-8 text")?;
            } else {
                let meta = std::fs::metadata(&a.file)
                    .with_context(|| format!("cannot read {}", a.file.display()))?;
                if meta.len() > profile::MAX_BYTES as u64 {
                    bail!(
                        "{} is {} bytes; a profile holds at most {}",
                        a.file.display(),
                        meta.len(),
                        profile::MAX_BYTES
                    );
                }
                text = std::fs::read_to_string(&a.file)
                    .with_context(|| format!("cannot read {} as UTF-8 text", a.file.display()))?;
            }
            let conn = a.db.open_existing()?;
            let p =
                profile::write(&conn, &path, &text, Clock::system().now()).map_err(memory_error)?;
            if a.json {
                return print_json(&p);
            }
            println!(
                "profile saved to {} (version {}, {} tokens)",
                p.path,
                p.version.as_ref().map_or(0, |v| v.number),
                p.tokens
            );
            Ok(())
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct ContextArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// 1: the profile; 2: + short and mid memory and approved knowledge; 3: + long memory; 4: + today's threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=4))]
    pub tier: u8,
    /// Most tokens (default by tier: 1,500 / 6,000 / 8,000 / 10,000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(100..=32_000))]
    pub budget: Option<u64>,
    /// Keep blank lines and each knowledge entry's reasoning.
    #[arg(long)]
    pub full: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn context_cmd(a: ContextArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let ask = Ask::checked(a.tier, a.budget.map(|b| b as usize), !a.full).map_err(memory_error)?;
    let c = context::assemble(
        &conn,
        &ask,
        &profile::path(),
        Clock::system().now(),
        local_offset(),
    )
    .map_err(memory_error)?;
    if a.json {
        return print_json(&c);
    }
    if c.text.is_empty() {
        eprintln!(
            "nothing to give yet: write a profile (`personkit profile path`) and run `personkit distill short`"
        );
        return Ok(());
    }
    print!("{}", c.text);
    eprintln!("(tier {}, {} of {} tokens)", c.tier, c.tokens, c.budget);
    Ok(())
}
