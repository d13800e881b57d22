//! The entity graph from the command line: `entity <name-or-id>` (everything about one entity, compact), and
//! `graph build|list|neighbours|path|candidates|merge|dismiss|extract|proposals|approve|reject`. Reads open the corpus read-only (they work beside a
//! running relay); `build`, `merge` and `dismiss` write. Two entities become one only through `graph merge`.

use anyhow::anyhow;
use clap::{Args, Subcommand};

use personkit_graph::{GraphError, extract, run, view};
use personkit_store::clock::Clock;
use personkit_store::graph as rows;
use personkit_store::proposals;

use crate::args::DbArg;
use crate::output::{ellipsize, print_json, print_table};

fn graph_error(e: GraphError) -> anyhow::Error {
    anyhow!("{e}\nhint: {}", e.hint())
}

#[derive(Debug, Clone, Args)]
pub struct EntityArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// An entity's name, an alias or its id.
    pub entity: String,
    /// Threads to list.
    #[arg(long, default_value_t = 10)]
    pub threads: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Subcommand)]
pub enum GraphCommand {
    /// Derive entities and relations from the turns not read yet (what `serve` does in the background).
    Build(BuildArgs),
    /// List entities, by name, optionally those whose name contains --q or of one --kind.
    List(ListArgs),
    /// The entities related to one, within --depth (1 or 2) relations.
    Neighbours(NeighboursArgs),
    /// The shortest chain of relations between two entities (at most --depth, 1 to 4).
    Path(PathArgs),
    /// Entities whose names look alike (trigram similarity above 0.4), proposed for merging.
    Candidates(CandidatesArgs),
    /// Fold entity GONE into KEEP: its aliases, sources and relations move to KEEP.
    Merge(MergeArgs),
    /// Dismiss a proposed merge: the pair is never proposed again.
    Dismiss(MergeArgs),
    /// Ask the configured language model for the people, projects, organisations, places and tools named in the
    /// turns not read yet. What it finds waits for you (`graph proposals`); nothing joins the graph unapproved.
    Extract(ExtractArgs),
    /// Names the model found, waiting for your decision (or --state approved / rejected).
    Proposals(ProposalsArgs),
    /// Approve proposed names: each becomes an entity, linked to the turns it was found in.
    Approve(DecideArgs),
    /// Reject proposed names: they are not proposed again.
    Reject(DecideArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ExtractArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Most model calls (each reads up to 12 consecutive turns of one thread).
    #[arg(long, default_value_t = 20)]
    pub calls: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ProposalsArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// proposed, approved or rejected.
    #[arg(long, default_value = "proposed")]
    pub state: String,
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct DecideArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Proposal ids (from `graph proposals`).
    #[arg(required = true)]
    pub ids: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct BuildArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Messages per batch.
    #[arg(long, default_value_t = run::BATCH)]
    pub batch: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[arg(long)]
    pub q: Option<String>,
    /// person, project, repository, tool, model, organisation, place or site.
    #[arg(long)]
    pub kind: Option<String>,
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct NeighboursArgs {
    #[command(flatten)]
    pub db: DbArg,
    pub entity: String,
    #[arg(long, default_value_t = 1)]
    pub depth: u32,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct PathArgs {
    #[command(flatten)]
    pub db: DbArg,
    pub from: String,
    pub to: String,
    #[arg(long, default_value_t = 4)]
    pub depth: u32,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct CandidatesArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// proposed, merged or dismissed.
    #[arg(long, default_value = "proposed")]
    pub state: String,
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct MergeArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// The entity that stays (name, alias or id).
    pub keep: String,
    /// The entity folded into it (name, alias or id).
    pub gone: String,
    #[arg(long)]
    pub json: bool,
}

pub fn entity(a: EntityArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let e = view::lookup(&conn, &a.entity).map_err(graph_error)?;
    let v = view::view(&conn, &e.id, a.threads.min(rows::MAX_LIST)).map_err(graph_error)?;
    if a.json {
        return print_json(&v);
    }
    print!("{}", view::compact(&v, 8_000));
    Ok(())
}

pub fn run(c: GraphCommand) -> anyhow::Result<()> {
    match c {
        GraphCommand::Build(a) => build(a),
        GraphCommand::List(a) => list(a),
        GraphCommand::Neighbours(a) => neighbours(a),
        GraphCommand::Path(a) => path(a),
        GraphCommand::Candidates(a) => candidates(a),
        GraphCommand::Merge(a) => merge(a, true),
        GraphCommand::Dismiss(a) => merge(a, false),
        GraphCommand::Extract(a) => extract_names(a),
        GraphCommand::Proposals(a) => list_proposals(a),
        GraphCommand::Approve(a) => decide(a, true),
        GraphCommand::Reject(a) => decide(a, false),
    }
}

fn extract_names(a: ExtractArgs) -> anyhow::Result<()> {
    let path = a.db.path();
    let cfg = personkit_llm::LlmConfig::load(Some(&path))
        .map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))?;
    let Some(model) = personkit_llm::open(&cfg).map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))?
    else {
        return Err(anyhow!(
            "no language model is configured, so names are read only where they are certain (`graph build`)\n\
             hint: set [llm] kind = \"local\" with model_path = a GGUF file, or kind = \"openai\" with base_url and \
             model, in ~/.dotperson/config.toml"
        ));
    };
    let mut knowledge = personkit_knowledge::Settings::load(cfg.file.as_deref())
        .map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))?;
    knowledge.call_timeout = cfg.timeout();
    let conn = a.db.open_existing()?;
    let bar = crate::output::progress_bar(a.calls as u64, "model calls");
    let mut total = extract::ExtractReport::default();
    // One call per step, so the bar moves as the model answers.
    while (total.calls as usize) < a.calls {
        let r = extract::run(
            &conn,
            model.as_ref(),
            &knowledge,
            extract::Limits {
                calls: 1,
                timeout: knowledge.call_timeout,
            },
            Clock::system().now(),
        )
        .map_err(graph_error)?;
        total.calls += r.calls;
        total.failed += r.failed;
        total.messages += r.messages;
        total.kept += r.kept;
        total.dropped += r.dropped;
        total.proposed += r.proposed;
        total.linked += r.linked;
        total.cursor = r.cursor;
        total.more = r.more;
        bar.set_position(total.calls);
        if !r.more || (r.calls == 0 && r.messages == 0) {
            break;
        }
    }
    bar.finish_and_clear();
    if a.json {
        return print_json(&total);
    }
    println!(
        "read {} turns in {} model calls ({} failed, model {}): {} names kept, {} dropped as not written in their turn, {} new proposals, {} mentions of approved names linked{}",
        total.messages,
        total.calls,
        total.failed,
        model.model_id(),
        total.kept,
        total.dropped,
        total.proposed,
        total.linked,
        if total.more {
            "; more turns wait (run it again)"
        } else {
            ""
        }
    );
    if total.proposed > 0 {
        println!("review them with `personkit graph proposals`");
    }
    Ok(())
}

fn list_proposals(a: ProposalsArgs) -> anyhow::Result<()> {
    let state = proposals::State::parse(&a.state).ok_or_else(|| {
        anyhow!(
            "no state {:?}\nhint: states are proposed, approved and rejected",
            a.state
        )
    })?;
    let conn = a.db.open_read_only()?;
    let list = proposals::list(&conn, state, a.limit)?;
    if a.json {
        return print_json(&list);
    }
    let table: Vec<Vec<String>> = list
        .iter()
        .map(|p| {
            vec![
                p.id.clone(),
                p.kind.clone(),
                ellipsize(&p.name, 40),
                format!("{:.1}", p.confidence),
                format!("{} in {} threads", p.messages, p.threads),
            ]
        })
        .collect();
    print_table(&["ID", "KIND", "NAME", "CONFIDENCE", "FOUND"], &table)?;
    if state == proposals::State::Proposed && !list.is_empty() {
        println!("decide with `personkit graph approve ID…` or `personkit graph reject ID…`");
    }
    Ok(())
}

fn decide(a: DecideArgs, approve: bool) -> anyhow::Result<()> {
    let conn = a.db.open_existing()?;
    let now = Clock::system().now();
    let mut done = Vec::new();
    for id in &a.ids {
        let p = proposals::get(&conn, id)?.ok_or_else(|| {
            anyhow!("no proposal {id}\nhint: list them with `personkit graph proposals`")
        })?;
        let entity = if approve {
            Some(extract::approve(&conn, id, now).map_err(graph_error)?)
        } else {
            extract::reject(&conn, id, now).map_err(graph_error)?;
            None
        };
        if !a.json {
            match &entity {
                Some(e) => println!("{} ({}) is now entity {e}", p.name, p.kind),
                None => println!("{} ({}) will not be proposed again", p.name, p.kind),
            }
        }
        done.push(
            serde_json::json!({"id": id, "name": p.name, "kind": p.kind, "entity_id": entity,
            "state": if approve { "approved" } else { "rejected" }}),
        );
    }
    if a.json {
        return print_json(&done);
    }
    Ok(())
}

fn build(a: BuildArgs) -> anyhow::Result<()> {
    let conn = a.db.open_existing()?;
    let r = run::build(&conn, Clock::system().now(), a.batch, usize::MAX).map_err(graph_error)?;
    if a.json {
        return print_json(&r);
    }
    println!(
        "read {} turns of {} threads ({} read again after a forget): {} new entities, {} new relations, {} merge proposals",
        r.messages, r.threads, r.redone, r.entities, r.relations, r.proposed
    );
    if r.proposed > 0 {
        println!("see them with `personkit graph candidates`");
    }
    Ok(())
}

fn list(a: ListArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let found =
        view::search(&conn, a.q.as_deref(), a.kind.as_deref(), a.limit).map_err(graph_error)?;
    if a.json {
        return print_json(&found);
    }
    let table: Vec<Vec<String>> = found
        .iter()
        .map(|e| vec![e.id.clone(), e.kind.clone(), ellipsize(&e.name, 60)])
        .collect();
    print_table(&["ID", "KIND", "NAME"], &table)
}

fn neighbours(a: NeighboursArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let e = view::lookup(&conn, &a.entity).map_err(graph_error)?;
    let g = view::neighbours(&conn, &e.id, a.depth).map_err(graph_error)?;
    if a.json {
        return print_json(&g);
    }
    print!("{}", view::compact_neighbours(&e, &g, 16_000));
    Ok(())
}

fn path(a: PathArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let from = view::lookup(&conn, &a.from).map_err(graph_error)?;
    let to = view::lookup(&conn, &a.to).map_err(graph_error)?;
    let p = view::path(&conn, &from.id, &to.id, a.depth).map_err(graph_error)?;
    if a.json {
        return print_json(&serde_json::json!({ "from": from.id, "to": to.id, "path": p }));
    }
    match p {
        None => println!(
            "no chain of at most {} relations joins {} and {}",
            a.depth, from.name, to.name
        ),
        Some(edges) => {
            for e in edges {
                println!(
                    "{} ({}) {} {} ({})",
                    e.subject.name, e.subject.kind, e.predicate, e.object.name, e.object.kind
                );
            }
        }
    }
    Ok(())
}

fn candidates(a: CandidatesArgs) -> anyhow::Result<()> {
    if !["proposed", "merged", "dismissed"].contains(&a.state.as_str()) {
        return Err(anyhow!(
            "no state {:?}\nhint: states are proposed, merged and dismissed",
            a.state
        ));
    }
    let conn = a.db.open_read_only()?;
    let list = rows::candidates(&conn, &a.state, a.limit)?;
    if a.json {
        return print_json(&list);
    }
    let table: Vec<Vec<String>> = list
        .iter()
        .map(|c| {
            vec![
                c.a.kind.clone(),
                format!("{} ({})", ellipsize(&c.a.name, 30), c.a.id),
                format!("{} ({})", ellipsize(&c.b.name, 30), c.b.id),
                format!("{:.2}", c.similarity),
            ]
        })
        .collect();
    print_table(&["KIND", "A", "B", "SIMILARITY"], &table)?;
    if a.state == "proposed" && !list.is_empty() {
        println!("merge with `personkit graph merge KEEP GONE`, or `personkit graph dismiss A B`");
    }
    Ok(())
}

fn merge(a: MergeArgs, merge: bool) -> anyhow::Result<()> {
    let conn = a.db.open_existing()?;
    let keep = view::lookup(&conn, &a.keep).map_err(graph_error)?;
    let gone = view::lookup(&conn, &a.gone).map_err(graph_error)?;
    let now = Clock::system().now();
    if merge {
        view::merge(&conn, &keep.id, &gone.id, now).map_err(graph_error)?;
    } else if !rows::dismiss(&conn, &keep.id, &gone.id, now)? {
        return Err(anyhow!(
            "{} and {} are not a proposed merge\nhint: see the proposals with `personkit graph candidates`",
            keep.name,
            gone.name
        ));
    }
    if a.json {
        return print_json(&serde_json::json!({
            "keep": keep.id, "gone": gone.id, "state": if merge { "merged" } else { "dismissed" }
        }));
    }
    if merge {
        println!("{} is now part of {} ({})", gone.name, keep.name, keep.id);
    } else {
        println!("{} and {} will not be proposed again", keep.name, gone.name);
    }
    Ok(())
}
