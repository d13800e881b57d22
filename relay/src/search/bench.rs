//! `personkit bench retrieval <locomo.json>`: recall@1/5/10 of FTS-only, vector-only, plain RRF and the shipped
//! hybrid on LoCoMo. The turns are ingested through the public HTTP API of a relay process this command starts
//! (`personkit serve` on a free loopback port, paired like any device), then embedded with the configured
//! embedder, then every question of categories 1–4 is asked restricted to its own conversation's threads.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde::Serialize;

use super::locomo::{self, Conversation, TextMode};
use super::{Query, Weights};
use crate::embed::{self, Embedder, EmbedderConfig};

/// One retrieval method of the benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct Method {
    pub name: &'static str,
    pub weights: Weights,
    pub fusion: super::Fusion,
    pub rrf_k: f64,
    pub depth: usize,
}

/// The methods reported: the two single signals, plain RRF and the shipped hybrid defaults.
pub fn methods() -> Vec<Method> {
    let d = Query::new("");
    vec![
        Method {
            name: "fts",
            weights: Weights::FTS_ONLY,
            fusion: super::Fusion::Rrf,
            rrf_k: 60.0,
            depth: 100,
        },
        Method {
            name: "vector",
            weights: Weights::VECTOR_ONLY,
            fusion: super::Fusion::Rrf,
            rrf_k: 60.0,
            depth: 100,
        },
        Method {
            name: "rrf-plain",
            weights: Weights::EQUAL,
            fusion: super::Fusion::Rrf,
            rrf_k: 60.0,
            depth: 100,
        },
        Method {
            name: "hybrid",
            weights: d.weights,
            fusion: d.fusion,
            rrf_k: d.rrf_k,
            depth: d.depth,
        },
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
    vec![
        Method {
            name: "rrf depth 10",
            weights: Weights::EQUAL,
            fusion: super::Fusion::Rrf,
            rrf_k: 60.0,
            depth: 10,
        },
        Method {
            name: "rrf depth 20",
            weights: Weights::EQUAL,
            fusion: super::Fusion::Rrf,
            rrf_k: 60.0,
            depth: 20,
        },
        Method {
            name: "rrf depth 30",
            weights: Weights::EQUAL,
            fusion: super::Fusion::Rrf,
            rrf_k: 60.0,
            depth: 30,
        },
        Method {
            name: "rrf k=10",
            weights: Weights::EQUAL,
            fusion: super::Fusion::Rrf,
            rrf_k: 10.0,
            depth: 100,
        },
        Method {
            name: "rrf fts 2 : vec 1",
            weights: w(2.0, 1.0),
            fusion: super::Fusion::Rrf,
            rrf_k: 60.0,
            depth: 100,
        },
        Method {
            name: "rrf fts 2 : vec 1, depth 20",
            weights: w(2.0, 1.0),
            fusion: super::Fusion::Rrf,
            rrf_k: 60.0,
            depth: 20,
        },
        Method {
            name: "rrf fts 1.5 : vec 1, depth 20",
            weights: w(1.5, 1.0),
            fusion: super::Fusion::Rrf,
            rrf_k: 60.0,
            depth: 20,
        },
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

/// A relay process started for the benchmark; killed on drop.
#[derive(Debug)]
pub struct RelayProcess {
    child: Child,
    pub base: String,
    pub token: String,
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `personkit serve` on a free loopback port with its own corpus, with no embedder (the benchmark embeds
/// afterwards) and no rate limit, and pairs with it.
pub fn start_relay(bin: &Path, db: &Path) -> anyhow::Result<RelayProcess> {
    let mut child = Command::new(bin)
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--rate-limit",
            "0",
            "--db",
        ])
        .arg(db)
        .env("PERSONKIT_EMBEDDER", "none")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut base = None;
    let mut code = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    while base.is_none() || code.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).map_err(|_| {
            anyhow!("the relay did not print its address and pairing code within 30 s")
        })?;
        if let Some(rest) = line.strip_prefix("personkit: listening on ") {
            base = Some(rest.trim().to_owned());
        } else if let Some(rest) = line.strip_prefix("personkit: pairing code ") {
            code = rest.split_whitespace().next().map(str::to_owned);
        }
    }
    let (base, code) = (base.unwrap_or_default(), code.unwrap_or_default());
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let paired: serde_json::Value = agent
        .post(&format!("{base}/v1/pair"))
        .send_json(serde_json::json!({"code": code, "device_name": "bench-retrieval"}))?
        .body_mut()
        .read_json()?;
    let token = paired
        .get("token")
        .and_then(|t| t.as_str())
        .ok_or_else(|| anyhow!("pairing answered without a token"))?
        .to_owned();
    Ok(RelayProcess { child, base, token })
}

/// Posts every session of every conversation, one batch per session.
pub fn ingest(relay: &RelayProcess, convs: &[Conversation]) -> anyhow::Result<usize> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let mut stored = 0;
    for c in convs {
        for s in &c.sessions {
            let obs = locomo::observations(s);
            let body = serde_json::json!({ "observations": obs });
            let resp: serde_json::Value = agent
                .post(&format!("{}/v1/observations", relay.base))
                .header("Authorization", &format!("Bearer {}", relay.token))
                .send_json(&body)?
                .body_mut()
                .read_json()?;
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
        let c = crate::db::open(&db_path)?;
        let n: i64 = c.query_row("SELECT count(*) FROM messages", [], |r| r.get(0))?;
        n as usize == expected
    };
    let turns = if reuse {
        expected
    } else {
        let bin = std::env::current_exe()?;
        let relay = start_relay(&bin, &db_path)?;
        ingest(&relay, &convs)?
    };
    let ingest_secs = t0.elapsed().as_secs_f64();
    let mut conn = crate::db::open(&db_path)?;
    let embedder = embed::build(&opts.config).map_err(|e| anyhow!("{e} ({})", e.hint()))?;
    let t1 = Instant::now();
    if let Some(e) = &embedder {
        let bar = crate::search::render::progress_bar(turns as u64, "embedding");
        let mut cursor = embed::store::Cursor::default();
        embed::store::embed_pending(
            &mut conn,
            e.as_ref(),
            &mut cursor,
            u64::MAX,
            64,
            None,
            |n| bar.inc(n),
        )?;
        bar.finish_and_clear();
    }
    let embed_secs = t1.elapsed().as_secs_f64();
    let mut all = methods();
    all.extend(opts.extra.iter().cloned());
    if embedder.is_none() {
        all.retain(|m| m.weights.vector == 0.0);
    }
    let (results, questions, skipped) = evaluate(&conn, embedder.as_deref(), &convs, &all)?;
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

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Asks every question of categories 1–4 with every method; returns recall per method, questions asked and
/// questions skipped (no evidence turn found in the conversation).
pub fn evaluate(
    conn: &rusqlite::Connection,
    embedder: Option<&dyn Embedder>,
    convs: &[Conversation],
    methods: &[Method],
) -> anyhow::Result<(Vec<Recall>, usize, usize)> {
    let mut hits = vec![[0usize; 3]; methods.len()];
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
    let bar = crate::search::render::progress_bar(total as u64, "questions");
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
            for (mi, m) in methods.iter().enumerate() {
                let mut q = Query::new(qa.question.clone());
                q.k = 10;
                q.threads = threads.clone();
                q.weights = m.weights;
                q.fusion = m.fusion;
                q.rrf_k = m.rrf_k;
                q.depth = m.depth;
                let t = Instant::now();
                let r = super::query(conn, embedder, &q)?;
                times[mi].push(t.elapsed().as_secs_f64() * 1000.0);
                let first = r.hits.iter().position(|h| want.contains(&&h.id));
                for (slot, k) in [1, 5, 10].iter().enumerate() {
                    if first.is_some_and(|p| p < *k) {
                        hits[mi][slot] += 1;
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
        .map(|((m, h), mut t)| {
            t.sort_by(f64::total_cmp);
            Recall {
                method: m.name.to_owned(),
                r1: h[0] as f64 / n,
                r5: h[1] as f64 / n,
                r10: h[2] as f64 / n,
                p50_ms: t.get(t.len() / 2).copied().unwrap_or(0.0),
            }
        })
        .collect();
    Ok((results, asked, skipped))
}
