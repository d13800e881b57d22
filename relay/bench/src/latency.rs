//! Search-latency benchmark: query latency on a deterministic synthetic corpus, and embedding throughput of the
//! configured local model.
//!
//! The corpus: `n` messages in threads of 50, texts drawn from a fixed vocabulary with a per-thread topic, and
//! 384-d unit vectors made from 256 topic centroids plus noise (a real model cannot embed a million texts on
//! this machine in a benchmark's time; the vectors exercise the same tables and the same code). Everything comes
//! from a seeded generator, so every run builds the same corpus. Rows are bulk-loaded straight into the tables
//! (`personkit_store::bulk`; this is not an ingest benchmark).

use std::time::Instant;

use personkit_embed::{EmbedError, Embedder};
use personkit_search::{Indexes, Query, Weights};
use personkit_shared::wire::Role;
use personkit_store::Connection;
use personkit_store::bulk::{self, BulkMessage};
use personkit_store::neighbours::{self, NeighbourFts};
use personkit_store::retrieval::{FtsOrder, fts_probe};
use personkit_store::vectors::{Kind, ModelRef};
use personkit_testkit::Rng;
use serde::Serialize;

const DIM: usize = 384;
pub const TOPICS: usize = 256;
const VOCAB: usize = 5000;

/// Word `i` of the synthetic vocabulary (a topic owns words `topic * 40 ..= topic * 40 + 39`).
pub fn word(i: usize) -> String {
    const SYL: [&str; 16] = [
        "ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ber", "dan", "gor", "hul", "jin", "pex",
        "quo", "zed",
    ];
    let mut s = String::new();
    let mut x = i + 17;
    for _ in 0..3 {
        s.push_str(SYL[x % 16]);
        x /= 16;
    }
    s
}

struct Gen {
    rng: Rng,
    centroids: Vec<Vec<f32>>,
}

impl Gen {
    fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let centroids = (0..TOPICS)
            .map(|_| {
                let mut v: Vec<f32> = (0..DIM).map(|_| rng.gauss()).collect();
                personkit_embed::l2_normalize(&mut v);
                v
            })
            .collect();
        Gen { rng, centroids }
    }
    fn text(&mut self, topic: usize, words: usize) -> String {
        (0..words)
            .map(|_| {
                // Half the words come from the topic's own 40-word slice of the vocabulary (Zipf-ish), half at large.
                if self.rng.below(2) == 0 {
                    word((topic * 40 + self.rng.below(40).min(self.rng.below(40))) % VOCAB)
                } else {
                    word(self.rng.below(VOCAB))
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
    fn vector(&mut self, topic: usize, noise: f32) -> Vec<f32> {
        let c = &self.centroids[topic];
        let mut v: Vec<f32> = c
            .iter()
            .map(|x| x + noise * self.rng.gauss() / (DIM as f32).sqrt())
            .collect();
        personkit_embed::l2_normalize(&mut v);
        v
    }
}

/// The model key the synthetic vectors are stored under.
pub const SYNTH_MODEL: &str = "synthetic:topics@1";

/// Builds the synthetic corpus into an open (migrated) connection. Returns the number of messages.
pub fn build_corpus(
    conn: &mut Connection,
    n: usize,
    seed: u64,
    progress: impl Fn(u64),
) -> anyhow::Result<usize> {
    let mut g = Gen::new(seed);
    let now = personkit_store::clock::fmt_time(time::OffsetDateTime::now_utc());
    let base = time::OffsetDateTime::from_unix_timestamp(1_700_000_000)?;
    let (model_id, version) = SYNTH_MODEL.split_once('@').unwrap_or((SYNTH_MODEL, ""));
    let model = ModelRef {
        id: model_id,
        version,
        dim: DIM,
    };
    let chunk = 5000;
    let mut done = 0;
    while done < n {
        let mut rows = Vec::with_capacity(chunk);
        for i in done..(done + chunk).min(n) {
            let t = i / 50;
            let topic = (t * 7919) % TOPICS;
            let surface = [
                "browser-ext:chatgpt",
                "browser-ext:claude",
                "browser-ext:gemini",
            ][t % 3];
            let role = if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            let words = 12 + g.rng.below(40);
            let content = format!("{} #{i}", g.text(topic, words));
            rows.push(BulkMessage {
                surface: surface.to_owned(),
                conversation_id: format!("synth-{t}"),
                title: format!("synthetic thread {t}"),
                role,
                content,
                ordinal: (i % 50) as u32,
                at: personkit_store::clock::fmt_time(
                    base + time::Duration::seconds((i as i64) * 60),
                ),
                vector: Some(g.vector(topic, 1.2)),
            });
        }
        bulk::load(conn, &rows, Some(model), "bench", done as i64 + 1, &now)?;
        let step = rows.len();
        done += step;
        progress(step as u64);
    }
    Ok(n)
}

/// A stand-in embedder for the synthetic corpus: maps a query text to the topic vector its words belong to.
#[derive(Debug)]
pub struct SynthEmbedder {
    centroids: Vec<Vec<f32>>,
}

impl SynthEmbedder {
    pub fn new(seed: u64) -> Self {
        SynthEmbedder {
            centroids: Gen::new(seed).centroids,
        }
    }
}

impl Embedder for SynthEmbedder {
    fn kind(&self) -> &'static str {
        "synthetic"
    }
    fn model_id(&self) -> &str {
        "synthetic:topics"
    }
    fn model_version(&self) -> &str {
        "1"
    }
    fn dim(&self) -> usize {
        DIM
    }
    fn embed_documents(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                // The query's topic is encoded as its first token `topicN`.
                let topic = t
                    .split_whitespace()
                    .next()
                    .and_then(|w| w.strip_prefix("topic"))
                    .and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or(0)
                    % TOPICS;
                self.centroids[topic].clone()
            })
            .collect())
    }
}

/// The synthetic embedder for the corpus's vectors, with every query also run through a real model first: the
/// query's latency then includes the real query embedding while the vectors searched stay the synthetic ones
/// (a real model cannot embed the corpus here).
#[derive(Debug)]
pub struct ModelTimed<'a> {
    pub synth: &'a SynthEmbedder,
    pub model: &'a dyn Embedder,
}

impl Embedder for ModelTimed<'_> {
    fn kind(&self) -> &'static str {
        self.synth.kind()
    }
    fn model_id(&self) -> &str {
        self.synth.model_id()
    }
    fn model_version(&self) -> &str {
        self.synth.model_version()
    }
    fn dim(&self) -> usize {
        self.synth.dim()
    }
    fn embed_documents(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.synth.embed_documents(texts)
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        std::hint::black_box(self.model.embed_query(text)?);
        self.synth.embed_query(text)
    }
}

/// Latency figures of one method.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub method: String,
    pub p50_ms: f64,
    pub p95_ms: f64,
}

/// Result of the latency benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyReport {
    pub messages: usize,
    pub queries: usize,
    pub build_secs: f64,
    pub results: Vec<Latency>,
    /// Mean overlap of the top 10 of the in-memory sign-bit + int8 path with exact float KNN.
    pub bit_recall_at_10: f64,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Runs `queries` queries per method against a built corpus.
/// With `query_model`, the vector and hybrid methods are measured a second time with each query also embedded by
/// that model ([`ModelTimed`]).
/// With `neighbours` (the weight of the turn before), FTS and hybrid are also measured with the FTS part answered
/// from [`neighbours`]'s side table, interleaved query by query with the shipped index.
pub fn measure(
    conn: &Connection,
    queries: usize,
    seed: u64,
    query_model: Option<&dyn Embedder>,
    neighbours: Option<f64>,
) -> anyhow::Result<(Vec<Latency>, f64)> {
    let emb = SynthEmbedder::new(seed);
    let mut g = Gen::new(seed ^ 0xABCD);
    let qs: Vec<(usize, String)> = (0..queries)
        .map(|_| {
            let topic = g.rng.below(TOPICS);
            (topic, g.text(topic, 4))
        })
        .collect();
    let methods: [(&str, Weights); 3] = [
        ("fts", Weights::FTS_ONLY),
        ("vector", Weights::VECTOR_ONLY),
        ("hybrid", Query::new("").weights),
    ];
    let mut out = Vec::new();
    // The in-memory vector index loads on first use; time that once, outside the per-query figures.
    let t = Instant::now();
    let indexes = Indexes::new();
    let n = indexes.with_index(conn, Kind::Message, SYNTH_MODEL, DIM, |ix| ix.len())?;
    let load_ms = t.elapsed().as_secs_f64() * 1000.0;
    out.push(Latency {
        method: format!("vector index load, once ({n} vectors)"),
        p50_ms: load_ms,
        p95_ms: load_ms,
    });
    let timed = query_model.map(|model| ModelTimed { synth: &emb, model });
    let mut runs: Vec<(String, Weights, &dyn Embedder)> = methods
        .iter()
        .map(|(name, w)| (name.to_string(), *w, &emb as &dyn Embedder))
        .collect();
    if let Some(t) = &timed {
        for (name, w) in methods.iter().skip(1) {
            runs.push((
                format!("{name}, query embedded by {}", t.model.model_id()),
                *w,
                t as &dyn Embedder,
            ));
        }
    }
    for (name, w, e) in runs {
        let mut times = Vec::with_capacity(queries);
        for (topic, words) in &qs {
            let mut q = Query::new(format!("topic{topic} {words}"));
            q.weights = w;
            q.include_events = false;
            let t = Instant::now();
            let r = personkit_search::query(conn, &indexes, Some(e), &q)?;
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            std::hint::black_box(r);
        }
        out.push(Latency {
            method: name,
            p50_ms: pct(&mut times, 0.5),
            p95_ms: pct(&mut times, 0.95),
        });
    }
    // Turn pairs (the shipped full-text signal) against each turn alone, query by query, interleaved; the
    // hybrid with the query model when one is given.
    {
        let hybrid_embedder: &dyn Embedder = match &timed {
            Some(t) => t,
            None => &emb,
        };
        let mut times: [Vec<f64>; 4] = Default::default();
        for (topic, words) in &qs {
            for (i, (w, e)) in [
                (Weights::FTS_ONLY, &emb as &dyn Embedder),
                (Query::new("").weights, hybrid_embedder),
            ]
            .into_iter()
            .enumerate()
            {
                for (j, pairs) in [false, true].into_iter().enumerate() {
                    let mut q = Query::new(format!("topic{topic} {words}"));
                    q.weights = w;
                    q.include_events = false;
                    if !pairs {
                        q.turn_before = 0.0;
                        q.turn_after = 0.0;
                    }
                    let t = Instant::now();
                    std::hint::black_box(personkit_search::query(conn, &indexes, Some(e), &q)?);
                    times[2 * i + j].push(t.elapsed().as_secs_f64() * 1000.0);
                }
            }
        }
        let model = timed
            .as_ref()
            .map(|t| format!(", query embedded by {}", t.model.model_id()))
            .unwrap_or_default();
        let names = [
            "fts, each turn alone (interleaved)".to_string(),
            "fts, turn pairs: shipped (interleaved)".to_string(),
            format!("hybrid, each turn alone{model} (interleaved)"),
            format!("hybrid, turn pairs: shipped{model} (interleaved)"),
        ];
        for (name, mut t) in names.into_iter().zip(times) {
            out.push(Latency {
                method: name,
                p50_ms: pct(&mut t, 0.5),
                p95_ms: pct(&mut t, 0.95),
            });
        }
    }
    if let Some(before) = neighbours {
        let t = Instant::now();
        neighbours::build(conn)?;
        let build_ms = t.elapsed().as_secs_f64() * 1000.0;
        out.push(Latency {
            method: "side table with the turn before, built once".into(),
            p50_ms: build_ms,
            p95_ms: build_ms,
        });
        let expanded = NeighbourFts {
            conn,
            before,
            after: 0.0,
        };
        // [shipped fts, expanded fts, shipped hybrid, expanded hybrid], alternating per query.
        let mut times: [Vec<f64>; 4] = Default::default();
        for (topic, words) in &qs {
            for (i, w) in [Weights::FTS_ONLY, Query::new("").weights]
                .into_iter()
                .enumerate()
            {
                let mut q = Query::new(format!("topic{topic} {words}"));
                q.weights = w;
                q.include_events = false;
                let t = Instant::now();
                std::hint::black_box(personkit_search::query(conn, &indexes, Some(&emb), &q)?);
                times[2 * i].push(t.elapsed().as_secs_f64() * 1000.0);
                let t = Instant::now();
                std::hint::black_box(personkit_search::query(
                    &expanded,
                    &indexes,
                    Some(&emb),
                    &q,
                )?);
                times[2 * i + 1].push(t.elapsed().as_secs_f64() * 1000.0);
            }
        }
        let names = [
            "fts, shipped index (interleaved)".to_string(),
            format!("fts, index + turn before at {before} (interleaved)"),
            "hybrid, shipped index (interleaved)".to_string(),
            format!("hybrid, index + turn before at {before} (interleaved)"),
        ];
        for (name, mut t) in names.into_iter().zip(times) {
            out.push(Latency {
                method: name,
                p50_ms: pct(&mut t, 0.5),
                p95_ms: pct(&mut t, 0.95),
            });
        }
    }
    // The FTS subquery alone, ordered by FTS5's `rank` column (the usual idiom) and by `bm25()` (what
    // `fts_signal` uses): same rows, different cost. Interleaved per query so load drifts hit both alike.
    let orders = [
        ("fts subquery, ORDER BY rank (baseline)", FtsOrder::Rank),
        ("fts subquery, ORDER BY bm25() (shipped)", FtsOrder::Bm25),
    ];
    let mut times = [Vec::new(), Vec::new()];
    let mut same = 0;
    for (topic, words) in &qs {
        let terms = personkit_search::text::query_terms(&format!("topic{topic} {words}"));
        let Some(expr) = personkit_search::text::fts_match(&terms) else {
            continue;
        };
        let mut firsts = Vec::new();
        for (i, (_, order)) in orders.iter().enumerate() {
            let t = Instant::now();
            let rows = fts_probe(conn, &expr, *order, 200)?;
            times[i].push(t.elapsed().as_secs_f64() * 1000.0);
            firsts.push(rows);
        }
        if firsts[0] == firsts[1] {
            same += 1;
        }
    }
    for ((name, _), mut t) in orders.iter().zip(times) {
        out.push(Latency {
            method: format!(
                "{name}; same 200 rows in the same order on {same} of {} queries",
                qs.len()
            ),
            p50_ms: pct(&mut t, 0.5),
            p95_ms: pct(&mut t, 0.95),
        });
    }
    // Exact float KNN, for latency and as the recall reference of the bit first pass.
    let mut times = Vec::new();
    let mut overlap = 0.0;
    for (topic, _) in &qs {
        let qv = &emb.centroids[*topic];
        // The 10 nearest messages by exact float KNN, or by the in-memory index.
        let top10 = |exact: bool| {
            personkit_search::vector_candidates(
                conn,
                &indexes,
                Kind::Message,
                SYNTH_MODEL,
                qv,
                10,
                &[],
                exact,
            )
        };
        let t = Instant::now();
        let exact = top10(true)?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        let fast = top10(false)?;
        let top: std::collections::HashSet<i64> = exact.iter().take(10).map(|x| x.0).collect();
        let got = fast.iter().take(10).filter(|x| top.contains(&x.0)).count();
        overlap += got as f64 / top.len().max(1) as f64;
    }
    out.push(Latency {
        method: "vector-exact-float".into(),
        p50_ms: pct(&mut times, 0.5),
        p95_ms: pct(&mut times, 0.95),
    });
    Ok((out, overlap / qs.len().max(1) as f64))
}

/// Embedding throughput of `embedder` on `n` deterministic texts: batched (the shipped path) and one text per
/// call (the baseline), texts per second.
pub fn embed_throughput(
    embedder: &dyn Embedder,
    n: usize,
    seed: u64,
) -> Result<(f64, f64), EmbedError> {
    let mut g = Gen::new(seed);
    let texts: Vec<String> = (0..n)
        .map(|i| {
            let words = 10 + g.rng.below(40);
            g.text(i % TOPICS, words)
        })
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let t = Instant::now();
    for s in &refs {
        embedder.embed_documents(&[s])?;
    }
    let single = n as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    embedder.embed_documents(&refs)?;
    let batched = n as f64 / t.elapsed().as_secs_f64();
    Ok((batched, single))
}
