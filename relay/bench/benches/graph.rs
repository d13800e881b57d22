//! Entity graph benchmark: neighbours (depth 1 and 2) and paths (depth ≤ 4) on a corpus of `--messages` messages
//! with `--entities` entities, each against the same walk over bare adjacency reads in the same run. Run:
//! `cargo bench -p personkit-bench --bench graph -- --messages 1000000 --entities 100000 [--db PATH] [--queries 300] [--json]`
//!
//! The corpus is the search-latency benchmark's (`latency::build_corpus`, threads of 50). The graph is synthetic,
//! loaded straight into the tables (`bulk::load_graph`, the ids `personkit_store::graph` gives, one alias and one
//! thread source each): entities of every kind, 3 relations per entity on average, a fifth of them to a few
//! hundred hubs (the tools, models and organisations most threads touch), so a walk meets both sparse and
//! crowded corners. Timed, one query at a time:
//!
//! - `graph::neighbours` at depth 1 and 2 (the shipped fan-out, 200 relations per entity) from random entities;
//! - `graph::path` (depth ≤ 4) between pairs known to be joined within 3 relations (a random walk from the first
//!   gives the second) and between random pairs (mostly not joined: the walk runs to its bounds);
//!
//! and beside each, interleaved, the same walk (same bounds) in the bench over `bulk::baseline::adjacent` —
//! ids only, no names, no validity order, no edge records —, so the ratio is what the store's walk adds to the
//! bare reads it is made of.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Parser;
use personkit_bench::{bench_args, latency};
use personkit_cli::output::progress_bar;
use personkit_store::bulk::{self, BulkEntity, BulkRelation, baseline};
use personkit_store::graph;
use personkit_store::{Connection, clock::fmt_time};
use personkit_testkit::Rng;
use serde::Serialize;

#[derive(Debug, Parser)]
#[command(
    name = "graph",
    about = "Entity graph neighbours and paths against bare adjacency walks"
)]
struct Args {
    #[arg(long, default_value_t = 100_000)]
    messages: usize,
    #[arg(long, default_value_t = 10_000)]
    entities: usize,
    /// Timed queries per kind.
    #[arg(long, default_value_t = 300)]
    queries: usize,
    /// Build or reuse the corpus at this path (default: a temporary one, removed afterwards).
    #[arg(long)]
    db: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

const KINDS: [&str; 8] = [
    "person",
    "project",
    "repository",
    "site",
    "tool",
    "model",
    "organisation",
    "place",
];
const PREDICATES: [&str; 5] = ["uses", "about", "made_by", "mentions", "part_of"];
const HUBS: usize = 300;
const THREAD_LEN: usize = 50;

#[derive(Debug, Serialize)]
struct Row {
    query: String,
    p50_ms: f64,
    p95_ms: f64,
    bare_p50_ms: f64,
    bare_p95_ms: f64,
    /// Queries whose answer was found (a path) or non-empty (neighbours), of all.
    answered: usize,
    queries: usize,
}

#[derive(Debug, Serialize)]
struct Report {
    messages: usize,
    entities: u64,
    relations: u64,
    build_secs: f64,
    graph_secs: f64,
    rows: Vec<Row>,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse_from(bench_args());
    let tmp = std::env::temp_dir().join(format!("personkit-graph-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let path = a.db.clone().unwrap_or_else(|| tmp.join("corpus.db"));
    let result = run(&a, &path);
    let _ = std::fs::remove_dir_all(&tmp);
    let r = result?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!(
        "synthetic corpus: {} messages (built in {:.0}s), {} entities and {} relations (written in {:.0}s)",
        r.messages, r.build_secs, r.entities, r.relations, r.graph_secs
    );
    println!(
        "| query | p50 ms | p95 ms | bare walk p50 / p95 ms | × p95 | answered |\n|---|---|---|---|---|---|"
    );
    for x in &r.rows {
        println!(
            "| {} | {:.2} | {:.2} | {:.2} / {:.2} | {:.1} | {} of {} |",
            x.query,
            x.p50_ms,
            x.p95_ms,
            x.bare_p50_ms,
            x.bare_p95_ms,
            x.p95_ms / x.bare_p95_ms.max(1e-6),
            x.answered,
            x.queries
        );
    }
    Ok(())
}

fn run(a: &Args, path: &std::path::Path) -> anyhow::Result<Report> {
    let mut conn = personkit_store::db::open(path)?;
    let t = Instant::now();
    let have = bulk::message_count(&conn)? as usize;
    if have == 0 {
        let bar = progress_bar(a.messages as u64, "building");
        latency::build_corpus(&mut conn, a.messages, 0x5EED, |n| bar.inc(n))?;
        bar.finish_and_clear();
        bulk::analyze(&conn)?;
    } else if have != a.messages {
        bail!(
            "{} holds {have} messages, not {}; pass another --db",
            path.display(),
            a.messages
        );
    }
    let build_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let ids = ensure_graph(&mut conn, a.entities, a.messages / THREAD_LEN)?;
    let graph_secs = t.elapsed().as_secs_f64();
    let (entities, relations) = counts(&conn)?;

    let mut rng = Rng::new(0x6A4F);
    let pick = |rng: &mut Rng| ids[rng.below(ids.len())].clone();
    let mut rows = Vec::new();
    for depth in [1u32, 2] {
        let starts: Vec<String> = (0..a.queries).map(|_| pick(&mut rng)).collect();
        let (mut ms, mut bare, mut answered) = (Vec::new(), Vec::new(), 0);
        for s in &starts {
            let t = Instant::now();
            let g = graph::neighbours(&conn, s, depth, graph::MAX_FAN_OUT)?;
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
            answered += usize::from(!g.entities.is_empty());
            let t = Instant::now();
            std::hint::black_box(bare_neighbours(&conn, s, depth)?);
            bare.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        rows.push(row(
            &format!("neighbours, depth {depth}"),
            &mut ms,
            &mut bare,
            answered,
        ));
    }
    // Pairs joined within 3 relations: a random walk from the first.
    let mut joined = Vec::new();
    while joined.len() < a.queries {
        let from = pick(&mut rng);
        let mut at = from.clone();
        for _ in 0..3 {
            let next = baseline::adjacent(&conn, &at, graph::MAX_FAN_OUT as u32)?;
            if next.is_empty() {
                break;
            }
            at = next[rng.below(next.len())].clone();
        }
        if at != from {
            joined.push((from, at));
        }
    }
    let random: Vec<(String, String)> = (0..a.queries)
        .map(|_| (pick(&mut rng), pick(&mut rng)))
        .collect();
    for (name, pairs) in [
        ("path ≤ 4, pairs joined within 3", &joined),
        ("path ≤ 4, random pairs", &random),
    ] {
        let (mut ms, mut bare, mut answered) = (Vec::new(), Vec::new(), 0);
        for (from, to) in pairs {
            let t = Instant::now();
            let p = graph::path(&conn, from, to, graph::MAX_PATH_DEPTH)?;
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
            answered += usize::from(p.is_some());
            let t = Instant::now();
            std::hint::black_box(bare_path(&conn, from, to)?);
            bare.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        rows.push(row(name, &mut ms, &mut bare, answered));
    }
    Ok(Report {
        messages: a.messages,
        entities,
        relations,
        build_secs,
        graph_secs,
        rows,
    })
}

fn row(name: &str, ms: &mut [f64], bare: &mut [f64], answered: usize) -> Row {
    Row {
        query: name.to_owned(),
        p50_ms: pct(ms, 0.5),
        p95_ms: pct(ms, 0.95),
        bare_p50_ms: pct(bare, 0.5),
        bare_p95_ms: pct(bare, 0.95),
        answered,
        queries: ms.len(),
    }
}

/// The synthetic graph's size, as the bench wrote it down.
fn counts(conn: &Connection) -> anyhow::Result<(u64, u64)> {
    let read = |key: &str| -> anyhow::Result<u64> {
        Ok(graph::state(conn, key)?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0))
    };
    Ok((read("bench:entities")?, read("bench:relations")?))
}

/// The graph's entity ids, loading the synthetic graph first when the corpus has none.
fn ensure_graph(conn: &mut Connection, n: usize, threads: usize) -> anyhow::Result<Vec<String>> {
    if let Some(ids) = graph::state(conn, "bench:ids")? {
        return Ok(serde_json::from_str(&ids)?);
    }
    let mut rng = Rng::new(0x6A10);
    let thread_ids: Vec<String> = (0..threads.max(1))
        .map(|t| {
            personkit_shared::ids::thread_id(
                [
                    "browser-ext:chatgpt",
                    "browser-ext:claude",
                    "browser-ext:gemini",
                ][t % 3],
                &format!("synth-{t}"),
            )
            .hyphenated()
            .to_string()
        })
        .collect();
    let thread = |rng: &mut Rng| thread_ids[rng.below(thread_ids.len())].clone();
    let entities: Vec<BulkEntity> = (0..n)
        .map(|i| BulkEntity {
            // The first HUBS entities are tools, models and organisations; the rest of every kind.
            kind: if i < HUBS {
                ["tool", "model", "organisation"][i % 3]
            } else {
                KINDS[i % KINDS.len()]
            }
            .to_owned(),
            name: format!("{} {i}", latency::word(i)),
            thread_id: thread(&mut rng),
        })
        .collect();
    let relations: Vec<BulkRelation> = (0..n * 3)
        .map(|_| BulkRelation {
            subject: rng.below(n),
            predicate: PREDICATES[rng.below(PREDICATES.len())].to_owned(),
            object: if rng.below(5) == 0 {
                rng.below(HUBS.min(n))
            } else {
                rng.below(n)
            },
            thread_id: thread(&mut rng),
        })
        .collect();
    let now = fmt_time(time::OffsetDateTime::now_utc());
    let ids = bulk::load_graph(conn, &entities, &relations, &now)?;
    let made = relations.iter().filter(|r| r.subject != r.object).count();
    graph::set_state(conn, "bench:ids", &serde_json::to_string(&ids)?)?;
    graph::set_state(conn, "bench:entities", &n.to_string())?;
    graph::set_state(conn, "bench:relations", &made.to_string())?;
    bulk::analyze(conn)?;
    Ok(ids)
}

/// `graph::neighbours`' walk over bare adjacency reads: the same fan-out and entity bounds.
fn bare_neighbours(conn: &Connection, id: &str, depth: u32) -> anyhow::Result<usize> {
    let mut seen: HashSet<String> = HashSet::from([id.to_owned()]);
    let mut frontier = vec![id.to_owned()];
    for _ in 0..depth {
        let mut next = Vec::new();
        for from in &frontier {
            for other in baseline::adjacent(conn, from, graph::MAX_FAN_OUT as u32)? {
                if seen.len() > graph::MAX_NEIGHBOURS {
                    break;
                }
                if seen.insert(other.clone()) {
                    next.push(other);
                }
            }
        }
        frontier = next;
    }
    Ok(seen.len() - 1)
}

/// `graph::path`'s breadth-first walk over bare adjacency reads: the same depth, fan-out and visit bounds.
fn bare_path(conn: &Connection, from: &str, to: &str) -> anyhow::Result<Option<usize>> {
    let mut came: HashMap<String, String> = HashMap::new();
    let mut seen: HashSet<String> = HashSet::from([from.to_owned()]);
    let mut queue = VecDeque::from([(from.to_owned(), 0u32)]);
    while let Some((at, d)) = queue.pop_front() {
        if d >= graph::MAX_PATH_DEPTH {
            continue;
        }
        for other in baseline::adjacent(conn, &at, graph::MAX_FAN_OUT as u32)? {
            if seen.contains(&other) {
                continue;
            }
            if seen.len() >= graph::MAX_PATH_VISITS {
                return Ok(None);
            }
            seen.insert(other.clone());
            came.insert(other.clone(), at.clone());
            if other == to {
                let mut n = 0;
                let mut cur = to.to_owned();
                while cur != from {
                    cur = came.get(&cur).context("a step back")?.clone();
                    n += 1;
                }
                return Ok(Some(n));
            }
            queue.push_back((other, d + 1));
        }
    }
    Ok(None)
}
