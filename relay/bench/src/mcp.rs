//! MCP call-overhead benchmark: the `search` tool called through the SDK's own client (rmcp) over stdio (a
//! spawned `personkit mcp` on the corpus file) and over Streamable HTTP (`/mcp` on a real relay started by
//! `personkit_testkit::Relay` on the same file), against the same query through `GET /v1/query` on that relay.
//! All three run in one process, one query at a time, the order of the three paths rotating from query to query
//! so that load drift and cache effects hit all of them alike.
//!
//! The corpus is the synthetic one of [`crate::latency`] (bulk-loaded, SynthEmbedder vectors). Both processes
//! run with `PERSONKIT_EMBEDDER=none`, so all three paths run the same search: full text, entities and recency
//! (no vector signal: no shipped embedder makes the synthetic vectors' model). That is the harder case for the
//! ratio: the search itself is as cheap as it gets, so the transports' own cost weighs most.
//!
//! Queries are three words drawn from a random message of the corpus (read through `personkit_store::read`),
//! so each finds that message among others. Every answer's hit ids are compared across the three paths.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use personkit_store::Connection;
use personkit_store::read;
use personkit_testkit::{Relay, Rng};
use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde::Serialize;
use serde_json::{Value, json};

/// Messages per synthetic thread (as [`crate::latency::build_corpus`] makes them).
const THREAD_LEN: usize = 50;
const SURFACES: [&str; 3] = [
    "browser-ext:chatgpt",
    "browser-ext:claude",
    "browser-ext:gemini",
];

/// `count` queries of three words, each drawn from one random message of the synthetic corpus of `messages`
/// messages (deterministic for a seed).
pub fn queries_from_corpus(
    conn: &Connection,
    messages: usize,
    count: usize,
    seed: u64,
) -> anyhow::Result<Vec<String>> {
    let mut rng = Rng::new(seed);
    let threads = messages.div_ceil(THREAD_LEN).max(1);
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let t = rng.below(threads);
        let id = personkit_shared::ids::thread_id(SURFACES[t % 3], &format!("synth-{t}"));
        let thread = read::get_thread(conn, &id.to_string(), true, THREAD_LEN as u32, None)
            .map_err(|e| anyhow!("reading synthetic thread {t}: {e}"))?;
        let Some(turn) = thread.turns.get(rng.below(thread.turns.len().max(1))) else {
            bail!("synthetic thread {t} has no turns: is this the synthetic corpus?");
        };
        // The synthetic text is words then ` #<n>`; the marker is no word to search for.
        let words: Vec<&str> = turn
            .content
            .split_whitespace()
            .filter(|w| !w.starts_with('#'))
            .collect();
        if words.len() < 3 {
            continue;
        }
        let q: Vec<&str> = (0..3).map(|_| words[rng.below(words.len())]).collect();
        out.push(q.join(" "));
    }
    Ok(out)
}

/// Latency of one path.
#[derive(Debug, Clone, Serialize)]
pub struct PathLatency {
    pub path: String,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub mean_ms: f64,
}

/// One MCP path against the `GET /v1/query` baseline of the same run.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub path: String,
    pub p50: f64,
    pub p95: f64,
}

/// What the benchmark measured.
#[derive(Debug, Clone, Serialize)]
pub struct McpReport {
    pub queries: usize,
    pub warmup: usize,
    pub k: u32,
    /// Signals the searches ran (the same on every path).
    pub signals: Vec<String>,
    pub results: Vec<PathLatency>,
    pub ratios: Vec<Ratio>,
    /// Queries whose hit ids (in order) were the same on all three paths.
    pub same_hits: usize,
    /// Mean hits per query.
    pub mean_hits: f64,
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn stats(path: &str, v: &[f64]) -> PathLatency {
    PathLatency {
        path: path.to_owned(),
        p50_ms: pct(v, 0.5),
        p95_ms: pct(v, 0.95),
        mean_ms: v.iter().sum::<f64>() / v.len().max(1) as f64,
    }
}

/// Percent-encodes a query-string value (RFC 3986 unreserved characters pass).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

type Client = RunningService<RoleClient, ()>;

/// The current protocol revision, without the previous one's `initialize` handshake.
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

/// Calls `search` and returns the hit ids and signals of its structured answer.
async fn mcp_search(
    client: &Client,
    q: &str,
    k: u32,
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let Value::Object(args) = json!({"query": q, "k": k}) else {
        bail!("arguments are an object");
    };
    let r = client
        .call_tool(CallToolRequestParams::new("search".to_owned()).with_arguments(args))
        .await
        .context("search over MCP")?;
    if r.is_error == Some(true) {
        bail!("search answered a tool error: {:?}", r.content);
    }
    let v = r
        .structured_content
        .context("search gave no structured content")?;
    Ok((ids(&v["hits"], "message_id"), strings(&v["signals_used"])))
}

/// `GET /v1/query` with the same query; returns the hit ids and signals.
fn http_query(
    relay: &Relay,
    token: &str,
    q: &str,
    k: u32,
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let r = relay
        .http
        .try_get(&format!("/v1/query?q={}&k={k}", encode(q)), Some(token))
        .map_err(|e| anyhow!("GET /v1/query: {e}"))?;
    if r.status != 200 {
        bail!("GET /v1/query answered {}: {}", r.status, r.body);
    }
    let v = r.json();
    Ok((ids(&v["hits"], "id"), strings(&v["signals_used"])))
}

fn ids(hits: &Value, key: &str) -> Vec<String> {
    hits.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|h| h[key].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Runs the benchmark on the corpus at `db` (built, not in use): starts the relay and `personkit mcp`
/// ([`personkit_testkit::bin`], which the caller chose), runs `warmup` untimed rounds, then one timed round per
/// query.
pub fn run(db: &Path, queries: &[String], warmup: usize, k: u32) -> anyhow::Result<McpReport> {
    let dir = db.parent().context("the corpus path has a folder")?;
    // No rate limit: the benchmark sends as fast as answers come, which the default per-token limit would
    // throttle (it guards ingest, not this).
    let relay = Relay::start_env(
        db,
        &["--rate-limit", "0"],
        &[("PERSONKIT_EMBEDDER", "none")],
    );
    // A corpus kept from an earlier run has a device already, and then serve prints no code: ask for one.
    let code = match relay.pairing_code_if_printed() {
        Some(c) => c,
        None => relay.cli_json(&["pair", "--json"])["code"]
            .as_str()
            .context("pair printed a code")?
            .to_owned(),
    };
    let device = relay.pair_with(&code, "bench-query");
    let agent = relay.cli_json(&["agents", "add", "bench-mcp", "--json"])["token"]
        .as_str()
        .context("agents add printed a token")?
        .to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut cmd = tokio::process::Command::new(personkit_testkit::bin());
        cmd.arg("mcp")
            .arg("--db")
            .arg(db)
            .env("HOME", dir)
            .env("PERSONKIT_EMBEDDER", "none")
            .env_remove("PERSONKIT_DB");
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::null())
            .spawn()
            .context("spawn personkit mcp")?;
        let stdio = ().serve_with_lifecycle(transport, lifecycle()).await?;
        let http = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", relay.base))
                .auth_header(agent),
        );
        let http = ().serve_with_lifecycle(http, lifecycle()).await?;

        let mut times: [Vec<f64>; 3] = Default::default();
        let mut signals = Vec::new();
        let (mut same, mut hits) = (0, 0usize);
        let rounds = queries.iter().cycle().take(warmup).chain(queries.iter());
        for (i, q) in rounds.enumerate() {
            let timed = i >= warmup;
            let mut got: [Vec<String>; 3] = Default::default();
            for j in 0..3 {
                // Rotate which path goes first.
                let path = (i + j) % 3;
                let t = Instant::now();
                let (ids, sig) = match path {
                    0 => http_query(&relay, &device, q, k)?,
                    1 => mcp_search(&stdio, q, k).await?,
                    _ => mcp_search(&http, q, k).await?,
                };
                let ms = t.elapsed().as_secs_f64() * 1000.0;
                if timed {
                    times[path].push(ms);
                }
                if signals.is_empty() {
                    signals = sig.clone();
                } else if sig != signals {
                    bail!(
                        "path {path} ran signals {sig:?}, another {signals:?}: not the same search"
                    );
                }
                got[path] = ids;
            }
            if timed {
                hits += got[0].len();
                if got[0] == got[1] && got[0] == got[2] {
                    same += 1;
                }
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), stdio.cancel()).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), http.cancel()).await;
        let names = [
            "GET /v1/query (baseline)",
            "MCP search over stdio (personkit mcp)",
            "MCP search over Streamable HTTP (/mcp)",
        ];
        let results: Vec<PathLatency> =
            names.iter().zip(&times).map(|(n, t)| stats(n, t)).collect();
        let ratios = results[1..]
            .iter()
            .map(|r| Ratio {
                path: r.path.clone(),
                p50: r.p50_ms / results[0].p50_ms,
                p95: r.p95_ms / results[0].p95_ms,
            })
            .collect();
        Ok(McpReport {
            queries: queries.len(),
            warmup,
            k,
            signals,
            results,
            ratios,
            same_hits: same,
            mean_hits: hits as f64 / queries.len().max(1) as f64,
        })
    })
}
