//! Retrieval benchmark: recall@1/5/10 of FTS-only, vector-only, plain RRF and the shipped hybrid on LoCoMo. The
//! turns are ingested through the public HTTP API of a real relay process (started by the testkit's launcher on
//! a free loopback port, paired like any device), then embedded with the configured embedder, then every
//! question of categories 1–4 is asked restricted to its own conversation's threads.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail};
use personkit_cli::output::progress_bar;
use personkit_embed::{self as embed, Embedder, EmbedderConfig};
use personkit_search::indexer;
use personkit_search::{Fusion, Indexes, Query, Weights};
use personkit_store::clock::Clock;
use personkit_store::neighbours::{self, NeighbourFts};
use personkit_store::{Connection, bulk};
use personkit_testkit::Relay;
use serde::Serialize;

use crate::locomo::{self, Conversation, TextMode};

/// One retrieval method of the benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct Method {
    pub name: &'static str,
    pub weights: Weights,
    pub fusion: Fusion,
    pub rrf_k: f64,
    pub depth: usize,
    /// [`Query::context`]: share of a turn's score given to the turn after it.
    pub context: f64,
    /// FTS from the side table of [`neighbours`] with these BM25 weights for the turn before and the turn after
    /// (the message itself weighs 1); `None`: the shipped `messages_fts`.
    pub neighbours: Option<(f64, f64)>,
    /// [`Query::neighbour`]: share of a turn's full-text score given to the turn after it, before fusion.
    pub neighbour: f64,
    /// [`Query::prf`]: weight of the pseudo-relevance feedback query.
    pub prf: f64,
    /// [`Query::turn_before`] and [`Query::turn_after`]: full-text scores of turn pairs.
    pub turn_before: f64,
    pub turn_after: f64,
    /// [`Query::dates`] and [`Query::when`]: the signals of time in the question.
    pub dates: f64,
    pub when: f64,
    /// [`Query::heat`]: heat as a tiebreaker after fusion.
    pub heat: bool,
    /// What the corpus holds besides the turns while this method is asked.
    pub setup: Setup,
}

/// The corpus as a method sees it. Each setup other than [`Setup::Turns`] is made on a copy of the corpus, where
/// the methods of that setup are asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Setup {
    /// The turns as the relay stored them (heat from one use per ingest batch, all at the same hour; no entities).
    Turns,
    /// Each conversation's speakers as person entities (what an extraction of people from the turns would find),
    /// so the entity signal matches their names in a question.
    Speakers,
    /// Heat as if the conversations had been captured live: one use per turn at its session's time, recomputed
    /// a day after the last session.
    LiveHeat,
}

impl Method {
    /// Reciprocal-rank fusion of the given signals with nothing else switched on.
    fn rrf(name: &'static str, weights: Weights, rrf_k: f64, depth: usize) -> Method {
        Method {
            name,
            weights,
            fusion: Fusion::Rrf,
            rrf_k,
            depth,
            context: 0.0,
            neighbours: None,
            neighbour: 0.0,
            prf: 0.0,
            turn_before: 0.0,
            turn_after: 0.0,
            dates: 0.0,
            when: 0.0,
            heat: true,
            setup: Setup::Turns,
        }
    }

    /// The shipped hybrid with the turn pairs and the time signals set as given.
    fn shipped(name: &'static str, before: f64, after: f64, dates: f64, when: f64) -> Method {
        let d = Query::new("");
        Method {
            name,
            weights: d.weights,
            fusion: d.fusion,
            rrf_k: d.rrf_k,
            depth: d.depth,
            context: d.context,
            neighbours: None,
            neighbour: d.neighbour,
            prf: d.prf,
            turn_before: before,
            turn_after: after,
            dates,
            when,
            heat: d.heat,
            setup: Setup::Turns,
        }
    }
}

/// The methods reported: the two single signals (each turn alone, no time signals), plain RRF and the shipped
/// hybrid defaults.
pub fn methods() -> Vec<Method> {
    let d = Query::new("");
    vec![
        Method::rrf("fts", Weights::FTS_ONLY, 60.0, 100),
        Method::rrf("vector", Weights::VECTOR_ONLY, 60.0, 100),
        Method::rrf("rrf-plain", Weights::EQUAL, 60.0, 100),
        Method::shipped("hybrid", d.turn_before, d.turn_after, d.dates, d.when),
    ]
}

/// Variants reported with `--ablations`, to show what each change does (all on the dev split).
pub fn ablations() -> Vec<Method> {
    let w = |fts: f64, vector: f64| Weights {
        fts,
        vector,
        entity: 1.0,
        recency: 1.0,
    };
    let d = Query::new("");
    let expand =
        |name: &'static str, weights: Weights, before: f64, after: f64, context: f64| Method {
            name,
            weights,
            fusion: d.fusion,
            rrf_k: d.rrf_k,
            depth: d.depth,
            context,
            neighbours: (before > 0.0 || after > 0.0).then_some((before, after)),
            neighbour: 0.0,
            prf: 0.0,
            turn_before: 0.0,
            turn_after: 0.0,
            dates: 0.0,
            when: 0.0,
            heat: true,
            setup: Setup::Turns,
        };
    let next = |name: &'static str, weights: Weights, context: f64| {
        expand(name, weights, 0.0, 0.0, context)
    };
    let convex = |name: &'static str, fts: f64, vector: f64, depth: usize| Method {
        depth,
        ..next(
            name,
            Weights {
                fts,
                vector,
                ..d.weights
            },
            d.context,
        )
    };
    let nb = |name: &'static str, weights: Weights, neighbour: f64| Method {
        neighbour,
        ..next(name, weights, 0.0)
    };
    let prf = |name: &'static str, weights: Weights, prf: f64| Method {
        prf,
        ..next(name, weights, 0.0)
    };
    let fts_pairs = |name: &'static str, before: f64, after: f64, dates: f64, when: f64| Method {
        weights: Weights::FTS_ONLY,
        ..Method::shipped(name, before, after, dates, when)
    };
    let (b, a) = (d.turn_before, d.turn_after);
    let shipped = || Method::shipped("", b, a, d.dates, d.when);
    vec![
        Method {
            name: "shipped + RRF k=60 instead of convex",
            fusion: Fusion::Rrf,
            ..shipped()
        },
        Method {
            name: "shipped + RRF k=60 depth 20",
            fusion: Fusion::Rrf,
            depth: 20,
            ..shipped()
        },
        Method {
            name: "shipped - heat tiebreak",
            heat: false,
            ..shipped()
        },
        Method {
            name: "shipped + heat from live capture",
            setup: Setup::LiveHeat,
            ..shipped()
        },
        Method {
            name: "shipped + speakers as person entities",
            setup: Setup::Speakers,
            ..shipped()
        },
        Method {
            name: "shipped + speakers as entities (entity 0.1)",
            setup: Setup::Speakers,
            weights: Weights {
                entity: 0.1,
                ..d.weights
            },
            ..shipped()
        },
        Method {
            name: "shipped + speakers as entities (entity 0.6)",
            setup: Setup::Speakers,
            weights: Weights {
                entity: 0.6,
                ..d.weights
            },
            ..shipped()
        },
        Method {
            name: "fts + speakers as person entities (entity 0.3)",
            setup: Setup::Speakers,
            weights: Weights {
                entity: 0.3,
                ..Weights::FTS_ONLY
            },
            ..Method::rrf("", Weights::FTS_ONLY, 60.0, 100)
        },
        Method::shipped("hybrid, turn alone, no time signals", 0.0, 0.0, 0.0, 0.0),
        Method::shipped("hybrid, turn pairs only", b, a, 0.0, 0.0),
        Method::shipped("hybrid, turn pairs + dates", b, a, d.dates, 0.0),
        Method::shipped("hybrid, no turn pairs", 0.0, 0.0, d.dates, d.when),
        Method::shipped("hybrid, pairs before 0.3", 0.3, 0.0, d.dates, d.when),
        Method::shipped("hybrid, pairs before 0.5", 0.5, 0.0, d.dates, d.when),
        Method::shipped(
            "hybrid, pairs before 0.3 after 0.2",
            0.3,
            0.2,
            d.dates,
            d.when,
        ),
        Method::shipped("hybrid, dates at half weight", b, a, 0.5 * d.dates, d.when),
        Method::shipped("hybrid, when at 0.1", b, a, d.dates, 0.1),
        Method::shipped("hybrid, when at 0.3", b, a, d.dates, 0.3),
        fts_pairs("fts pairs", b, a, 0.0, 0.0),
        fts_pairs("fts pairs + time", b, a, d.dates, d.when),
        fts_pairs("fts + time", 0.0, 0.0, d.dates, d.when),
        prf("fts prf 0.2", Weights::FTS_ONLY, 0.2),
        prf("fts prf 0.4", Weights::FTS_ONLY, 0.4),
        prf("hybrid prf 0.1", d.weights, 0.1),
        prf("hybrid prf 0.2", d.weights, 0.2),
        prf("hybrid prf 0.4", d.weights, 0.4),
        nb("fts nb 0.3", Weights::FTS_ONLY, 0.3),
        nb("fts nb 0.5", Weights::FTS_ONLY, 0.5),
        nb("hybrid nb 0.2", d.weights, 0.2),
        nb("hybrid nb 0.3", d.weights, 0.3),
        nb("hybrid nb 0.5", d.weights, 0.5),
        nb("hybrid nb 0.7", d.weights, 0.7),
        expand("fts doc+before 0.2", Weights::FTS_ONLY, 0.2, 0.0, 0.0),
        expand("fts doc+before 0.3", Weights::FTS_ONLY, 0.3, 0.0, 0.0),
        expand("fts doc+before 0.5", Weights::FTS_ONLY, 0.5, 0.0, 0.0),
        expand(
            "fts doc+before 0.3 +after 0.1",
            Weights::FTS_ONLY,
            0.3,
            0.1,
            0.0,
        ),
        expand(
            "fts doc+before 0.3 +after 0.2",
            Weights::FTS_ONLY,
            0.3,
            0.2,
            0.0,
        ),
        expand("hybrid doc+before 0.2", d.weights, 0.2, 0.0, 0.0),
        expand("hybrid doc+before 0.3", d.weights, 0.3, 0.0, 0.0),
        expand("hybrid doc+before 0.5", d.weights, 0.5, 0.0, 0.0),
        expand("hybrid doc+before 0.7", d.weights, 0.7, 0.0, 0.0),
        expand("hybrid doc+before 1.0", d.weights, 1.0, 0.0, 0.0),
        expand("hybrid doc+before 0.5 +after 0.2", d.weights, 0.5, 0.2, 0.0),
        expand("hybrid doc+before 0.3 +after 0.1", d.weights, 0.3, 0.1, 0.0),
        expand("hybrid doc+before 0.3 +after 0.2", d.weights, 0.3, 0.2, 0.0),
        expand(
            "hybrid doc+before 0.3 next turn 0.2",
            d.weights,
            0.3,
            0.0,
            0.2,
        ),
        expand(
            "hybrid doc+before 0.3 fts 0.8 : vec 0.2",
            Weights {
                fts: 0.8,
                vector: 0.2,
                ..d.weights
            },
            0.3,
            0.0,
            0.0,
        ),
        expand(
            "hybrid doc+before 0.3 fts 0.6 : vec 0.4",
            Weights {
                fts: 0.6,
                vector: 0.4,
                ..d.weights
            },
            0.3,
            0.0,
            0.0,
        ),
        expand(
            "hybrid doc+before 0.5 fts 0.8 : vec 0.2",
            Weights {
                fts: 0.8,
                vector: 0.2,
                ..d.weights
            },
            0.5,
            0.0,
            0.0,
        ),
        expand(
            "hybrid doc+before 0.5 next turn 0.1",
            d.weights,
            0.5,
            0.0,
            0.1,
        ),
        next("fts + next turn 0.3", Weights::FTS_ONLY, 0.3),
        next("hybrid + next turn 0.1", d.weights, 0.1),
        next("hybrid + next turn 0.2", d.weights, 0.2),
        next("hybrid + next turn 0.3", d.weights, 0.3),
        next("hybrid + next turn 0.5", d.weights, 0.5),
        convex("hybrid fts 0.8 : vec 0.2", 0.8, 0.2, d.depth),
        convex("hybrid fts 0.6 : vec 0.4", 0.6, 0.4, d.depth),
        convex("hybrid fts 0.5 : vec 0.5", 0.5, 0.5, d.depth),
        convex("hybrid depth 30", d.weights.fts, d.weights.vector, 30),
        convex("hybrid depth 300", d.weights.fts, d.weights.vector, 300),
        Method::rrf("rrf depth 10", Weights::EQUAL, 60.0, 10),
        Method::rrf("rrf depth 20", Weights::EQUAL, 60.0, 20),
        Method::rrf("rrf depth 30", Weights::EQUAL, 60.0, 30),
        Method::rrf("rrf k=10", Weights::EQUAL, 10.0, 100),
        Method::rrf("rrf fts 2 : vec 1", w(2.0, 1.0), 60.0, 100),
        Method::rrf("rrf fts 2 : vec 1, depth 20", w(2.0, 1.0), 60.0, 20),
        Method::rrf("rrf fts 1.5 : vec 1, depth 20", w(1.5, 1.0), 60.0, 20),
    ]
}

/// Recall figures of one method.
#[derive(Debug, Clone, Serialize)]
pub struct Recall {
    pub method: String,
    pub r1: f64,
    pub r5: f64,
    pub r10: f64,
    pub p50_ms: f64,
    /// The same figures per LoCoMo category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop).
    pub by_category: Vec<CategoryRecall>,
}

/// Recall of one method on the questions of one category.
#[derive(Debug, Clone, Serialize)]
pub struct CategoryRecall {
    pub category: u8,
    pub questions: usize,
    pub r1: f64,
    pub r5: f64,
    pub r10: f64,
}

/// The benchmark report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub file: String,
    pub conversations: usize,
    pub turns: usize,
    pub questions: usize,
    pub skipped_questions: usize,
    pub model: Option<String>,
    pub text_mode: String,
    pub ingest_secs: f64,
    pub embed_secs: f64,
    pub results: Vec<Recall>,
}

/// Starts `personkit serve` on a free loopback port with its own corpus, with no embedder (the benchmark embeds
/// afterwards) and no rate limit, and pairs with it. Returns the relay and its token.
pub fn start_relay(db: &Path) -> (Relay, String) {
    let relay = Relay::start_env(
        db,
        &["--rate-limit", "0"],
        &[("PERSONKIT_EMBEDDER", "none")],
    );
    let token = relay.pair_printed("bench-retrieval");
    (relay, token)
}

/// Posts every session of every conversation, one batch per session.
pub fn ingest(relay: &Relay, token: &str, convs: &[Conversation]) -> anyhow::Result<usize> {
    let mut stored = 0;
    for c in convs {
        for s in &c.sessions {
            let obs = locomo::observations(s);
            let items: Vec<serde_json::Value> = obs
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<_, _>>()?;
            let resp = relay.http.send_batch(token, &items);
            let ok = resp.get("stored").and_then(|v| v.as_u64()).unwrap_or(0)
                + resp.get("duplicate").and_then(|v| v.as_u64()).unwrap_or(0);
            if ok as usize != obs.len() {
                bail!("the relay rejected turns of {}: {resp}", s.conversation_id);
            }
            stored += obs.len();
        }
    }
    Ok(stored)
}

/// Options of `bench retrieval`.
#[derive(Debug, Clone)]
pub struct RetrievalOpts {
    pub file: PathBuf,
    pub mode: TextMode,
    /// Keep the corpus here (default: a temporary directory removed afterwards).
    pub db: Option<PathBuf>,
    pub config: EmbedderConfig,
    /// Extra methods to report besides [`methods`].
    pub extra: Vec<Method>,
    /// Also measure vectors computed from each turn alone, without the turn before it (on a copy of the corpus).
    pub previous_turn: bool,
    /// Only the methods with one of these names (`prefix*`: names starting so; empty: all).
    pub only: Vec<String>,
}

/// Runs the benchmark.
pub fn run_retrieval(opts: &RetrievalOpts) -> anyhow::Result<Report> {
    let convs = locomo::load(&opts.file, opts.mode)?;
    let tmp = std::env::temp_dir().join(format!(
        "personkit-bench-{}-{}",
        std::process::id(),
        now_nanos()
    ));
    let db_path = opts.db.clone().unwrap_or_else(|| tmp.join("corpus.db"));
    std::fs::create_dir_all(db_path.parent().unwrap_or(Path::new(".")))?;
    let t0 = Instant::now();
    let expected: usize = convs
        .iter()
        .flat_map(|c| &c.sessions)
        .map(|s| s.turns.len())
        .sum();
    let reuse = db_path.exists() && {
        let c = personkit_store::db::open(&db_path)?;
        bulk::message_count(&c)? as usize == expected
    };
    let turns = if reuse {
        expected
    } else {
        personkit_testkit::build_bin(true);
        let (relay, token) = start_relay(&db_path);
        ingest(&relay, &token, &convs)?
    };
    let ingest_secs = t0.elapsed().as_secs_f64();
    let mut conn = personkit_store::db::open(&db_path)?;
    let embedder = embed::build(&opts.config).map_err(|e| anyhow!("{e} ({})", e.hint()))?;
    // The turn-only variant gets its own copy of the corpus, made before anything is embedded.
    let ctx_path = db_path.with_extension("turn-only.db");
    let ctx = match (&embedder, opts.previous_turn) {
        (Some(_), true) => {
            let _ = std::fs::remove_file(&ctx_path);
            conn.execute("VACUUM INTO ?1", [ctx_path.to_string_lossy()])?;
            Some(personkit_store::db::open(&ctx_path)?)
        }
        _ => None,
    };
    let t1 = Instant::now();
    if let Some(e) = &embedder {
        embed_all(
            &mut conn,
            e.as_ref(),
            turns,
            indexer::EmbedText::for_embedder(e.as_ref()),
        )?;
    }
    let embed_secs = t1.elapsed().as_secs_f64();
    let mut all = methods();
    all.extend(opts.extra.iter().cloned());
    if embedder.is_none() {
        all.retain(|m| m.weights.vector == 0.0);
    }
    if !opts.only.is_empty() {
        all.retain(|m| {
            opts.only.iter().any(|o| match o.strip_suffix('*') {
                Some(prefix) => m.name.starts_with(prefix),
                None => m.name == o,
            })
        });
    }
    if all.iter().any(|m| m.neighbours.is_some()) {
        neighbours::build(&conn)?;
    }
    let (plain, set_up): (Vec<Method>, Vec<Method>) =
        all.into_iter().partition(|m| m.setup == Setup::Turns);
    let (mut results, questions, skipped) = evaluate(&conn, embedder.as_deref(), &convs, &plain)?;
    for setup in [Setup::Speakers, Setup::LiveHeat] {
        let these: Vec<Method> = set_up
            .iter()
            .filter(|m| m.setup == setup)
            .cloned()
            .collect();
        if these.is_empty() {
            continue;
        }
        let copy = db_path.with_extension("setup.db");
        let _ = std::fs::remove_file(&copy);
        conn.execute("VACUUM INTO ?1", [copy.to_string_lossy()])?;
        let set = personkit_store::db::open(&copy)?;
        prepare(&set, &convs, setup)?;
        results.extend(evaluate(&set, embedder.as_deref(), &convs, &these)?.0);
        drop(set);
        let _ = std::fs::remove_file(&copy);
    }
    if let (Some(mut ctx), Some(e)) = (ctx, &embedder) {
        embed_all(
            &mut ctx,
            e.as_ref(),
            turns,
            indexer::EmbedText::TurnWithPrevious,
        )?;
        let with_vectors: Vec<Method> = methods()
            .into_iter()
            .filter(|m| m.weights.vector > 0.0)
            .collect();
        let (more, _, _) = evaluate(&ctx, Some(e.as_ref()), &convs, &with_vectors)?;
        results.extend(more.into_iter().map(|mut r| {
            r.method = format!("{}, vectors of the turn alone", r.method);
            r
        }));
        drop(ctx);
        let _ = std::fs::remove_file(&ctx_path);
    }
    if opts.db.is_none() {
        drop(conn);
        let _ = std::fs::remove_dir_all(&tmp);
    }
    Ok(Report {
        file: opts.file.display().to_string(),
        conversations: convs.len(),
        turns,
        questions,
        skipped_questions: skipped,
        model: embedder.as_ref().map(|e| e.model_key()),
        text_mode: match opts.mode {
            TextMode::Plain => "speaker: text".into(),
            TextMode::WithCaptions => "speaker: text [shared a photo: caption]".into(),
        },
        ingest_secs,
        embed_secs,
        results,
    })
}

/// Makes `setup` in the corpus (a copy).
fn prepare(conn: &Connection, convs: &[Conversation], setup: Setup) -> anyhow::Result<()> {
    let now = Clock::system().now();
    match setup {
        Setup::Turns => {}
        Setup::Speakers => {
            for c in convs {
                for name in c.speakers() {
                    let key = name.to_lowercase();
                    personkit_store::graph::upsert_entity(conn, "person", &name, &key, now)?;
                }
            }
        }
        Setup::LiveHeat => {
            let parse = |s: &str| {
                time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
            };
            let mut last = None;
            conn.execute("DELETE FROM heat", [])?;
            for s in convs.iter().flat_map(|c| &c.sessions) {
                let at = parse(&s.occurred_at)?;
                let thread = [s.thread_id.clone()];
                for _ in &s.turns {
                    personkit_heat::record_thread_accesses(conn, &thread, at)?;
                }
                last = last.max(Some(at));
            }
            if let Some(last) = last {
                personkit_heat::recompute(conn, last + time::Duration::days(1))?;
            }
        }
    }
    Ok(())
}

fn embed_all(
    conn: &mut Connection,
    e: &dyn Embedder,
    turns: usize,
    text: indexer::EmbedText,
) -> anyhow::Result<()> {
    let bar = progress_bar(turns as u64, "embedding");
    let mut cursor = indexer::Cursor::default();
    indexer::embed_pending_with(
        conn,
        e,
        &Clock::system(),
        &mut cursor,
        u64::MAX,
        256,
        None,
        text,
        |n| bar.inc(n),
    )?;
    bar.finish_and_clear();
    Ok(())
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Asks every question of categories 1–4 with every method; returns recall per method, questions asked and
/// questions skipped (no evidence turn found in the conversation).
pub fn evaluate(
    conn: &Connection,
    embedder: Option<&dyn Embedder>,
    convs: &[Conversation],
    methods: &[Method],
) -> anyhow::Result<(Vec<Recall>, usize, usize)> {
    let mut hits = vec![[0usize; 3]; methods.len()];
    // [method][category 1..=4] -> hits at 1/5/10, and questions per category.
    let mut cat_hits = vec![[[0usize; 3]; 4]; methods.len()];
    let mut cat_asked = [0usize; 4];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); methods.len()];
    let mut asked = 0;
    let mut skipped = 0;
    let total: usize = convs
        .iter()
        .map(|c| {
            c.qa.iter()
                .filter(|q| (1..=4).contains(&q.category))
                .count()
        })
        .sum();
    let bar = progress_bar(total as u64, "questions");
    let indexes = Indexes::new();
    for c in convs {
        let ids = c.message_ids();
        let threads = c.thread_ids();
        for qa in c.qa.iter().filter(|q| (1..=4).contains(&q.category)) {
            bar.inc(1);
            let want: Vec<&String> = locomo::evidence_ids(&qa.evidence)
                .iter()
                .filter_map(|d| ids.get(d))
                .collect::<std::collections::HashSet<_>>()
                .into_iter()
                .collect();
            if want.is_empty() {
                skipped += 1;
                continue;
            }
            asked += 1;
            let cat = (qa.category - 1) as usize;
            cat_asked[cat] += 1;
            for (mi, m) in methods.iter().enumerate() {
                let mut q = Query::new(qa.question.clone());
                q.k = 10;
                q.threads = threads.clone();
                q.weights = m.weights;
                q.fusion = m.fusion;
                q.rrf_k = m.rrf_k;
                q.depth = m.depth;
                q.context = m.context;
                q.neighbour = m.neighbour;
                q.prf = m.prf;
                q.turn_before = m.turn_before;
                q.turn_after = m.turn_after;
                q.dates = m.dates;
                q.when = m.when;
                q.heat = m.heat;
                let t = Instant::now();
                let r = match m.neighbours {
                    None => personkit_search::query(conn, &indexes, embedder, &q)?,
                    Some((before, after)) => {
                        let reader = NeighbourFts {
                            conn,
                            before,
                            after,
                        };
                        personkit_search::query(&reader, &indexes, embedder, &q)?
                    }
                };
                times[mi].push(t.elapsed().as_secs_f64() * 1000.0);
                let first = r.hits.iter().position(|h| want.contains(&&h.row.id));
                for (slot, k) in [1, 5, 10].iter().enumerate() {
                    if first.is_some_and(|p| p < *k) {
                        hits[mi][slot] += 1;
                        cat_hits[mi][cat][slot] += 1;
                    }
                }
            }
        }
    }
    bar.finish_and_clear();
    let n = asked.max(1) as f64;
    let results = methods
        .iter()
        .zip(hits)
        .zip(times)
        .zip(cat_hits)
        .map(|(((m, h), mut t), ch)| {
            t.sort_by(f64::total_cmp);
            Recall {
                method: m.name.to_owned(),
                r1: h[0] as f64 / n,
                r5: h[1] as f64 / n,
                r10: h[2] as f64 / n,
                p50_ms: t.get(t.len() / 2).copied().unwrap_or(0.0),
                by_category: (0..4)
                    .map(|c| {
                        let q = cat_asked[c].max(1) as f64;
                        CategoryRecall {
                            category: c as u8 + 1,
                            questions: cat_asked[c],
                            r1: ch[c][0] as f64 / q,
                            r5: ch[c][1] as f64 / q,
                            r10: ch[c][2] as f64 / q,
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    Ok((results, asked, skipped))
}
