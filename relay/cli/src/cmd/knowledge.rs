//! `personkit knowledge`: the entries the pipeline drew from the turns, and the user's decisions on them.
//! `knowledge run --once` makes a pass now (with a progress bar); `list` / `show` read entries (pending by default);
//! `approve` / `reject` decide (only approved entries reach agents and exports); `edit` corrects one; `audit`
//! shows what was sent where and what was kept or dropped; `dismiss` closes the open alert.

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

use personkit_knowledge::{Settings, run_once};
use personkit_llm::LlmConfig;
use personkit_store::Db;
use personkit_store::clock::Clock;
use personkit_store::knowledge::{self as rows, Edit, Filter};

use crate::args::DbArg;
use crate::output::{ellipsize, print_json, print_table, progress_bar};

#[derive(Debug, Clone, Subcommand)]
pub enum KnowledgeCommand {
    /// Make a pass over the turns stored since the last one (`serve` makes one daily at [knowledge] hour).
    Run(RunArgs),
    /// Entries, pending ones by default.
    List(ListArgs),
    /// One entry with its sources, scores and who proposed it.
    Show(IdArgs),
    /// Approve entries: agents and exports see approved entries only.
    Approve(DecideArgs),
    /// Reject entries (they stay, so the same words said again do not come back as new).
    Reject(DecideArgs),
    /// Correct an entry's words.
    Edit(EditArgs),
    /// The audit log: every model call (where it went, scrubbed or not) and every decision (kept, dropped, why).
    Audit(AuditArgs),
    /// Dismiss the open alert once you have seen to it (a clean pass dismisses it too).
    Dismiss(DismissArgs),
}

#[derive(Debug, Clone, Args)]
pub struct DismissArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// One pass, then exit (the only mode: the daily pass is `serve`'s).
    #[arg(long)]
    pub once: bool,
    /// Print the pass's report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusArg {
    Pending,
    Approved,
    Rejected,
    All,
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[arg(long, value_enum, default_value = "pending")]
    pub status: StatusArg,
    /// Only entries matching these words (best first).
    #[arg(long, value_name = "WORDS")]
    pub search: Option<String>,
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub limit: u32,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct IdArgs {
    #[command(flatten)]
    pub db: DbArg,
    pub id: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct DecideArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Entry ids (as `list` shows them; a unique prefix of 8 or more characters will do).
    #[arg(required = true)]
    pub ids: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct EditArgs {
    #[command(flatten)]
    pub db: DbArg,
    pub id: String,
    #[arg(long)]
    pub topic: Option<String>,
    #[arg(long)]
    pub position: Option<String>,
    #[arg(long)]
    pub reasoning: Option<String>,
    #[arg(long)]
    pub context: Option<String>,
    #[arg(long, value_parser = ["low", "medium", "high"])]
    pub confidence: Option<String>,
    #[arg(long, value_parser = ["durable", "stable", "evolving"])]
    pub stability: Option<String>,
    /// Tags, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub tags: Option<Vec<String>>,
}

#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Only rows of this kind: run, call, decision, alert, approval, proposal.
    #[arg(long, value_parser = ["run", "call", "decision", "alert", "approval", "proposal"])]
    pub kind: Option<String>,
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    #[arg(long)]
    pub json: bool,
}

pub fn run(c: KnowledgeCommand) -> anyhow::Result<()> {
    match c {
        KnowledgeCommand::Run(a) => run_pass(a),
        KnowledgeCommand::List(a) => list(a),
        KnowledgeCommand::Show(a) => show(a),
        KnowledgeCommand::Approve(a) => decide(a, "approved"),
        KnowledgeCommand::Reject(a) => decide(a, "rejected"),
        KnowledgeCommand::Edit(a) => edit(a),
        KnowledgeCommand::Audit(a) => audit(a),
        KnowledgeCommand::Dismiss(a) => dismiss(a),
    }
}

fn open_db(db: &DbArg) -> anyhow::Result<Db> {
    db.open_existing()?;
    Db::open(&db.path())
        .with_context(|| format!("cannot open the corpus at {}", db.path().display()))
}

fn run_pass(a: RunArgs) -> anyhow::Result<()> {
    if !a.once {
        bail!(
            "say `--once`: the daily pass is made by `personkit serve` (at [knowledge] hour, 22 by default)"
        );
    }
    let path = a.db.path();
    let cfg =
        LlmConfig::load(Some(&path)).map_err(|e| anyhow::anyhow!("{e}\nhint: {}", e.hint()))?;
    let Some(model) =
        personkit_llm::open(&cfg).map_err(|e| anyhow::anyhow!("{e}\nhint: {}", e.hint()))?
    else {
        bail!(
            "no language model is configured, so the knowledge pipeline is off\n\
             hint: set [llm] kind = \"local\" with model_path = a GGUF file, or kind = \"openai\" with base_url and model, in ~/.dotperson/config.toml"
        );
    };
    let mut settings = Settings::load(cfg.file.as_deref())
        .map_err(|e| anyhow::anyhow!("{e}\nhint: {}", e.hint()))?;
    settings.max_tokens = cfg.max_tokens;
    settings.call_timeout = cfg.timeout();
    let db = open_db(&a.db)?;
    let clock = Clock::system();
    let bar = progress_bar(0, "threads");
    let report = run_once(&db, model.as_ref(), &settings, &clock, &mut |p| {
        bar.set_length(p.threads);
        bar.set_position(p.threads_done);
    })?;
    bar.finish_and_clear();
    if a.json {
        return print_json(&report);
    }
    if report.turns == 0 {
        println!("nothing new since the last pass (model {})", report.model);
        return Ok(());
    }
    println!(
        "{} turns in {} threads → {} windows ({} read in parts), {} model calls, {} + {} tokens, {:.1} s",
        report.turns,
        report.threads,
        report.windows,
        report.split_windows,
        report.calls,
        report.usage.prompt_tokens,
        report.usage.completion_tokens,
        report.elapsed_ms as f64 / 1000.0
    );
    println!(
        "candidates {}: new {}, reinforced {}, variants {}; dropped: invalid {}, over the cap {}, by the judge {}",
        report.candidates,
        report.new_entries,
        report.reinforced,
        report.variants,
        report.dropped_invalid,
        report.dropped_over_cap,
        report.dropped_by_judge
    );
    println!("model {} — text sent {}", report.model, report.sent_as);
    if report.judge_failures + report.extract_failures > 0 {
        println!(
            "ALERT: {} judge failures (batches dropped), {} extraction failures — see `personkit knowledge audit --kind alert`",
            report.judge_failures, report.extract_failures
        );
    }
    if let Some(why) = &report.stopped {
        println!("stopped early: {why}; the rest is read on the next pass");
    }
    if report.new_entries + report.variants > 0 {
        println!("review them: personkit knowledge list (then approve or reject)");
    }
    Ok(())
}

fn list(a: ListArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let status = match a.status {
        StatusArg::Pending => Some("pending"),
        StatusArg::Approved => Some("approved"),
        StatusArg::Rejected => Some("rejected"),
        StatusArg::All => None,
    };
    let list = rows::entries(
        &conn,
        &Filter {
            status: status.map(str::to_owned),
            words: a.search.clone(),
            limit: a.limit,
        },
    )?;
    if a.json {
        return print_json(&list);
    }
    if list.is_empty() {
        println!("no {} entries", status.unwrap_or("knowledge"));
        return Ok(());
    }
    let table: Vec<Vec<String>> = list
        .iter()
        .map(|e| {
            vec![
                e.id[..8].to_owned(),
                e.status.clone(),
                e.kind.clone(),
                ellipsize(&e.topic, 28),
                ellipsize(&e.position, 60),
                e.confidence.clone(),
                e.origin.clone(),
                e.sources.len().to_string(),
            ]
        })
        .collect();
    print_table(
        &[
            "ID", "STATUS", "TYPE", "TOPIC", "POSITION", "CONF", "FROM", "SOURCES",
        ],
        &table,
    )
}

/// The one entry `id` names (a full id, or a unique prefix of at least 8 characters).
fn resolve(conn: &personkit_store::Connection, id: &str) -> anyhow::Result<rows::Entry> {
    if let Some(e) = rows::entry(conn, id)? {
        return Ok(e);
    }
    if id.len() >= 8 {
        let all = rows::entries(
            conn,
            &Filter {
                limit: 500,
                ..Filter::default()
            },
        )?;
        let hits: Vec<_> = all.into_iter().filter(|e| e.id.starts_with(id)).collect();
        if hits.len() == 1 {
            return hits.into_iter().next().context("one hit");
        }
        if hits.len() > 1 {
            bail!("{id} matches {} entries: give more of the id", hits.len());
        }
    }
    bail!("no knowledge entry {id}\nhint: `personkit knowledge list --status all` shows the ids")
}

fn show(a: IdArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let e = resolve(&conn, &a.id)?;
    if a.json {
        return print_json(&e);
    }
    println!("{} [{}] {} — {}", e.id, e.status, e.kind, e.topic);
    println!("position:   {}", e.position);
    println!("reasoning:  {}", e.reasoning);
    if let Some(c) = &e.context {
        println!("context:    {c}");
    }
    println!(
        "confidence: {}, stability: {}, tags: {}",
        e.confidence,
        e.stability,
        e.tags.join(", ")
    );
    println!(
        "from:       {}{}",
        e.origin,
        e.reason
            .as_deref()
            .map(|r| format!(" — {r}"))
            .unwrap_or_default()
    );
    if let Some(m) = &e.model {
        println!(
            "model:      {m} ({})",
            e.prompt_version.as_deref().unwrap_or("-")
        );
    }
    if let Some(v) = &e.variant_of {
        println!("variant of: {v}");
    }
    if e.reinforced > 0 {
        println!("said again: {} times", e.reinforced);
    }
    if e.sources_forgotten {
        println!("some of its sources were forgotten");
    }
    for s in &e.sources {
        println!("source:     {} (thread {})", s.message_id, s.thread_id);
    }
    Ok(())
}

fn decide(a: DecideArgs, status: &str) -> anyhow::Result<()> {
    let db = open_db(&a.db)?;
    let clock = Clock::system();
    let mut done = Vec::new();
    for id in &a.ids {
        let e = db.read(|c| resolve(c, id))?;
        let now = clock.now();
        db.write(|c| personkit_knowledge::decisions::decide(c, &e.id, status, "cli", now))?;
        done.push(e.id);
    }
    if a.json {
        return print_json(&json!({ "status": status, "ids": done }));
    }
    for id in done {
        println!("{status} {id}");
    }
    Ok(())
}

fn dismiss(a: DismissArgs) -> anyhow::Result<()> {
    let db = open_db(&a.db)?;
    let now = Clock::system().now();
    let dismissed = db.write(|c| personkit_knowledge::decisions::dismiss_alert(c, "cli", now))?;
    if a.json {
        return print_json(&json!({ "dismissed": dismissed }));
    }
    if dismissed {
        println!("alert dismissed (the audit log keeps it)");
    } else {
        println!("no open alert");
    }
    Ok(())
}

fn edit(a: EditArgs) -> anyhow::Result<()> {
    let db = open_db(&a.db)?;
    let e = db.read(|c| resolve(c, &a.id))?;
    let trim = |o: &Option<String>| o.as_deref().map(|s| s.trim().to_owned());
    let change = Edit {
        topic: trim(&a.topic),
        position: trim(&a.position),
        reasoning: trim(&a.reasoning),
        context: trim(&a.context),
        confidence: a.confidence.clone(),
        stability: a.stability.clone(),
        tags: a.tags.as_ref().map(|t| {
            t.iter()
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty())
                .collect()
        }),
    };
    if let Err(problem) = personkit_knowledge::decisions::check_edit(&change) {
        bail!("{problem}; nothing was changed");
    }
    let now = Clock::system().now();
    let fields = db
        .write(|c| personkit_knowledge::decisions::edit(c, &e.id, &change, "cli", now))?
        .unwrap_or_default();
    if fields.is_empty() {
        println!("{}: nothing to change", e.id);
    } else {
        println!("edited {} ({})", e.id, fields.join(", "));
    }
    Ok(())
}

fn audit(a: AuditArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let log = rows::audit_log(&conn, a.kind.as_deref(), a.limit)?;
    if a.json {
        return print_json(&log);
    }
    if log.is_empty() {
        match &a.kind {
            Some(k) => println!("no {k} rows in the audit log"),
            None => println!("no audit rows yet: `personkit knowledge run --once` makes a pass"),
        }
        return Ok(());
    }
    let table: Vec<Vec<String>> = log
        .iter()
        .map(|r| {
            let d = &r.detail;
            let what = match r.kind.as_str() {
                "call" => format!(
                    "{} → {} ({}), {} + {} tokens, {}",
                    d["stage"].as_str().unwrap_or("?"),
                    d["endpoint"].as_str().unwrap_or("?"),
                    d["sent_as"].as_str().unwrap_or("?"),
                    d["prompt_tokens"],
                    d["completion_tokens"],
                    d["outcome"].as_str().unwrap_or("?")
                ),
                "decision" => format!(
                    "{}: {} — {}",
                    d["action"].as_str().unwrap_or("?"),
                    d["topic"].as_str().unwrap_or(""),
                    d["why"].as_str().unwrap_or("")
                ),
                _ => ellipsize(&d.to_string(), 100),
            };
            vec![r.at.clone(), r.kind.clone(), ellipsize(&what, 110)]
        })
        .collect();
    print_table(&["AT", "KIND", "WHAT"], &table)
}
