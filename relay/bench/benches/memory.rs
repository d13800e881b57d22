//! Memory benchmark: the short digest and an agent's context on a large corpus, each against the bare reads of the
//! same rows in the same run. Run:
//! `cargo bench -p personkit-bench --bench memory -- --messages 1000000 [--db PATH] [--runs 20] [--calls 300] [--json]`
//!
//! The corpus is the search-latency benchmark's (`latency::build_corpus`: one turn a minute, threads of 50 over
//! three sites, so about 29 threads a day), plus 60 approved knowledge entries. Measured:
//!
//! - **Short distill**: `personkit_memory::short::build` with the shipped budget as of one minute after the newest
//!   turn (so it walks back from a full day), `--runs` times; the most memory it held at once above what was held
//!   before (Rust's heap through a counting allocator plus SQLite's heap high-water mark). Baseline, same run: one
//!   plain query reading every turn the digest covers (`bulk::baseline::span_turns` over its days), its time and
//!   peak the same way. One `short::run` then stores the version the context reads.
//! - **`get_context`**: the MCP tool called as an agent calls it — a JSON-RPC `tools/call` posted to `/mcp` of the
//!   relay's real router in process (every middleware, an agent token; no socket) — and `GET /v1/context`, for
//!   tiers 1 to 4, `--calls` times each. The mid and long tiers need a model; the bench stores versions of their
//!   full default budgets in their place (their text is read, not made, by the context). Baseline, same run: the
//!   bare reads of the same rows (`bulk::baseline::context_rows`: the newest body of each tier and the approved
//!   entries; tier 4 also the day's turns) plus reading the profile file.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use clap::Parser;
use personkit_bench::{bench_args, latency};
use personkit_cli::output::progress_bar;
use personkit_memory::context::{self, Ask};
use personkit_memory::{Settings, short};
use personkit_server::config::ApiConfig;
use personkit_server::{AppState, app};
use personkit_store::bulk::{self, baseline};
use personkit_store::clock::{Clock, fmt_time, parse_time};
use personkit_store::db::Db;
use personkit_store::knowledge::{self as krows, NewEntry};
use personkit_store::memory::{self as mrows, NewVersion};
use serde::Serialize;
use time::{Duration, OffsetDateTime, UtcOffset};
use tower::ServiceExt;

#[derive(Debug, Parser)]
#[command(
    name = "memory",
    about = "Short distill and get_context on a large corpus against bare reads of the same rows"
)]
struct Args {
    /// Messages in the synthetic corpus.
    #[arg(long, default_value_t = 100_000)]
    messages: usize,
    /// Timed short digests (and as many baseline reads).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Timed context calls per tier and path.
    #[arg(long, default_value_t = 300)]
    calls: usize,
    /// Build or reuse the corpus at this path (default: a temporary one, removed afterwards).
    #[arg(long)]
    db: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

const KNOWLEDGE: usize = 60;

#[derive(Debug, Serialize)]
struct Timing {
    p50_ms: f64,
    p95_ms: f64,
}

#[derive(Debug, Serialize)]
struct Distill {
    days: usize,
    tokens: usize,
    turns_covered: usize,
    digest: Timing,
    baseline: Timing,
    digest_peak_mb: f64,
    baseline_peak_mb: f64,
    store_ms: f64,
}

#[derive(Debug, Serialize)]
struct ContextRow {
    tier: u8,
    tokens: usize,
    mcp: Timing,
    http: Timing,
    baseline: Timing,
}

#[derive(Debug, Serialize)]
struct Report {
    messages: usize,
    build_secs: f64,
    distill: Distill,
    context: Vec<ContextRow>,
}

fn timing(v: &mut [f64]) -> Timing {
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    Timing {
        p50_ms: at(0.5),
        p95_ms: at(0.95),
    }
}

/// The system allocator, counting the bytes Rust code holds and the most it held since the mark was last reset.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn held(more: usize) {
    let now = HELD.fetch_add(more, Ordering::Relaxed) + more;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

#[allow(unsafe_code)]
// SAFETY: every call is passed to `System` unchanged; the counters are plain atomics and never touch the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is `System`'s.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            held(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) };
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `alloc` and `dealloc`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            HELD.fetch_sub(layout.size(), Ordering::Relaxed);
            held(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result with the most memory it held at once above what was held before, in MB:
/// Rust's heap (the counting allocator) plus SQLite's own heap (its high-water mark), each reset first.
fn peak_of<T>(f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<(T, f64)> {
    let before = HELD.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let (sql_before, _) = bulk::sqlite_memory(true);
    let out = f()?;
    let rust = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    let (_, sql_peak) = bulk::sqlite_memory(false);
    let sql = usize::try_from(sql_peak.saturating_sub(sql_before)).unwrap_or(0);
    Ok((out, (rust + sql) as f64 / (1024.0 * 1024.0)))
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse_from(bench_args());
    let tmp = std::env::temp_dir().join(format!("personkit-memory-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let path = a.db.clone().unwrap_or_else(|| tmp.join("corpus.db"));
    let result = run(&a, &path, &tmp);
    let _ = std::fs::remove_dir_all(&tmp);
    let r = result?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let d = &r.distill;
    println!(
        "synthetic corpus: {} messages (built in {:.0}s)",
        r.messages, r.build_secs
    );
    println!(
        "short distill: {} days, {} tokens, {} turns covered; stored in {:.1} ms",
        d.days, d.tokens, d.turns_covered, d.store_ms
    );
    println!("| | p50 ms | p95 ms | peak MB |\n|---|---|---|---|");
    println!(
        "| short::build | {:.2} | {:.2} | {:.1} |",
        d.digest.p50_ms, d.digest.p95_ms, d.digest_peak_mb
    );
    println!(
        "| bare read of the covered turns | {:.2} | {:.2} | {:.1} |",
        d.baseline.p50_ms, d.baseline.p95_ms, d.baseline_peak_mb
    );
    println!(
        "ratio: p50 {:.2}x, p95 {:.2}x",
        d.digest.p50_ms / d.baseline.p50_ms.max(1e-6),
        d.digest.p95_ms / d.baseline.p95_ms.max(1e-6)
    );
    println!(
        "\n| tier | tokens | MCP get_context p50 / p95 ms | GET /v1/context p50 / p95 ms | bare reads p50 / p95 ms | MCP × p95 |\n|---|---|---|---|---|---|"
    );
    for c in &r.context {
        println!(
            "| {} | {} | {:.2} / {:.2} | {:.2} / {:.2} | {:.3} / {:.3} | {:.1} |",
            c.tier,
            c.tokens,
            c.mcp.p50_ms,
            c.mcp.p95_ms,
            c.http.p50_ms,
            c.http.p95_ms,
            c.baseline.p50_ms,
            c.baseline.p95_ms,
            c.mcp.p95_ms / c.baseline.p95_ms.max(1e-6)
        );
    }
    Ok(())
}

fn run(a: &Args, path: &Path, tmp: &Path) -> anyhow::Result<Report> {
    let t = Instant::now();
    let newest = {
        let mut conn = personkit_store::db::open(path)?;
        let have = bulk::message_count(&conn)? as usize;
        if have == 0 {
            let bar = progress_bar(a.messages as u64, "building");
            latency::build_corpus(&mut conn, a.messages, 0x5EED, |n| bar.inc(n))?;
            bar.finish_and_clear();
            add_knowledge(&conn)?;
            bulk::analyze(&conn)?;
        } else if have != a.messages {
            bail!(
                "{} holds {have} messages, not {}; pass another --db",
                path.display(),
                a.messages
            );
        }
        let last = mrows::last_capture_before(&conn, "9999")?.context("the corpus has turns")?;
        parse_time(&last).context("a stored time")?
    };
    let build_secs = t.elapsed().as_secs_f64();
    let now = newest + Duration::minutes(1);
    let distill = distill(a, path, now)?;

    let profile = tmp.join("profile.md");
    std::fs::write(&profile, profile_text())?;
    {
        let conn = personkit_store::db::open(path)?;
        // Stand-ins for the model-made tiers, each as long as its default budget allows.
        let s = Settings::default();
        for (tier, budget) in [("mid", s.mid.budget), ("long", s.long.budget)] {
            let body = filler(tier, budget);
            mrows::insert(
                &conn,
                &NewVersion {
                    tier: tier.into(),
                    tokens: personkit_memory::tokens(&body) as u64,
                    body,
                    model: Some("bench-stand-in".into()),
                    ..Default::default()
                },
                now,
            )?;
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let context = rt.block_on(context_calls(a, path, &profile, now))?;
    Ok(Report {
        messages: a.messages,
        build_secs,
        distill,
        context,
    })
}

fn distill(a: &Args, path: &Path, now: OffsetDateTime) -> anyhow::Result<Distill> {
    let conn = personkit_store::db::open(path)?;
    let settings = Settings::default();
    let budget = settings.short.budget;
    // One untimed digest warms the page cache for both sides.
    let first = short::build(&conn, budget, now, UtcOffset::UTC)?;
    let (from, to) = (
        first
            .covers_from
            .clone()
            .context("the digest covers days")?,
        first.covers_to.clone().context("the digest covers days")?,
    );
    let turns = baseline::span_turns(&conn, &from, &to, 240)?;
    let mut digest_ms = Vec::with_capacity(a.runs);
    let mut base_ms = Vec::with_capacity(a.runs);
    let (mut digest_peak, mut base_peak) = (0f64, 0f64);
    for _ in 0..a.runs {
        let t = Instant::now();
        let (d, peak) = peak_of(|| Ok(short::build(&conn, budget, now, UtcOffset::UTC)?))?;
        digest_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        digest_peak = digest_peak.max(peak);
        if d.body != first.body {
            bail!("the digest changed between runs on an unchanged corpus");
        }
        let t = Instant::now();
        let (n, peak) = peak_of(|| Ok(baseline::span_turns(&conn, &from, &to, 240)?))?;
        base_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        base_peak = base_peak.max(peak);
        std::hint::black_box(n);
    }
    let t = Instant::now();
    let stored = short::run(&conn, &settings, now, UtcOffset::UTC, "manual")?;
    let store_ms = t.elapsed().as_secs_f64() * 1000.0;
    if stored.version.is_none() {
        bail!("short::run stored no version: {}", stored.message);
    }
    Ok(Distill {
        days: first.days.len(),
        tokens: first.tokens,
        turns_covered: turns,
        digest: timing(&mut digest_ms),
        baseline: timing(&mut base_ms),
        digest_peak_mb: digest_peak,
        baseline_peak_mb: base_peak,
        store_ms,
    })
}

async fn context_calls(
    a: &Args,
    path: &Path,
    profile: &Path,
    now: OffsetDateTime,
) -> anyhow::Result<Vec<ContextRow>> {
    let db = Db::open(path).with_context(|| format!("opening {}", path.display()))?;
    // No rate limit: the loop sends as fast as answers come, which the per-token limit would throttle.
    let config = ApiConfig {
        rate_limit: 0.0,
        ..ApiConfig::default()
    };
    let state =
        AppState::new(db, config, Clock::manual(now)).with_profile_path(profile.to_path_buf());
    let (_, token) = state
        .db
        .write(|c| personkit_store::auth::create_agent(c, "bench-agent", now))?;
    let bearer = format!("Bearer {}", token.expose());
    let router = app(state);
    let reader = personkit_store::db::open_read_only(path)?;
    let today = fmt_time(now.date().midnight().assume_utc());
    let tomorrow = fmt_time(now + Duration::seconds(1));
    let mut out = Vec::new();
    for tier in 1..=4u8 {
        let ask = Ask::checked(tier, None, true)?;
        let tokens = context::assemble(&reader, &ask, profile, now, UtcOffset::UTC)?.tokens;
        let rpc = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"get_context","arguments":{{"tier":{tier}}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
        );
        let url = format!("/v1/context?tier={tier}");
        for _ in 0..10 {
            mcp_call(&router, &bearer, &rpc).await?;
            get(&router, &bearer, &url).await?;
        }
        let (mut mcp, mut http, mut base) = (
            Vec::with_capacity(a.calls),
            Vec::with_capacity(a.calls),
            Vec::with_capacity(a.calls),
        );
        for i in 0..a.calls {
            // Rotate which path goes first so drift and caches hit all three alike.
            for j in 0..3 {
                let t = Instant::now();
                match (i + j) % 3 {
                    0 => {
                        std::hint::black_box(mcp_call(&router, &bearer, &rpc).await?);
                        mcp.push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                    1 => {
                        std::hint::black_box(get(&router, &bearer, &url).await?);
                        http.push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                    _ => {
                        let mut n = std::fs::read_to_string(profile)?.len();
                        if tier >= 2 {
                            n += baseline::context_rows(&reader, KNOWLEDGE as u32)?;
                        }
                        if tier >= 4 {
                            n += baseline::span_turns(&reader, &today, &tomorrow, 160)?;
                        }
                        std::hint::black_box(n);
                        base.push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                }
            }
        }
        out.push(ContextRow {
            tier,
            tokens,
            mcp: timing(&mut mcp),
            http: timing(&mut http),
            baseline: timing(&mut base),
        });
    }
    Ok(out)
}

/// Posts one JSON-RPC message to `/mcp` and checks the tool answered with text.
async fn mcp_call(router: &axum::Router, bearer: &str, body: &str) -> anyhow::Result<usize> {
    let req = Request::post("/mcp")
        .header(header::HOST, "127.0.0.1:8787")
        .header(header::AUTHORIZATION, bearer)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "get_context")
        .body(Body::from(body.to_owned()))?;
    let resp = router.clone().oneshot(req).await?;
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await?;
    let text = String::from_utf8_lossy(&bytes);
    if status != StatusCode::OK || !text.contains("\"result\"") || text.contains("\"isError\":true")
    {
        bail!(
            "/mcp get_context answered {status}: {}",
            &text[..text.len().min(300)]
        );
    }
    Ok(bytes.len())
}

async fn get(router: &axum::Router, bearer: &str, uri: &str) -> anyhow::Result<usize> {
    let req = Request::get(uri)
        .header(header::HOST, "127.0.0.1:8787")
        .header(header::AUTHORIZATION, bearer)
        .body(Body::empty())?;
    let resp = router.clone().oneshot(req).await?;
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await?;
    if status != StatusCode::OK {
        bail!("{uri} answered {status}");
    }
    Ok(bytes.len())
}

/// Approved entries for the context's knowledge section.
fn add_knowledge(conn: &personkit_store::Connection) -> anyhow::Result<()> {
    let now = OffsetDateTime::now_utc();
    for i in 0..KNOWLEDGE {
        let id = krows::insert(
            conn,
            &NewEntry {
                kind: ["decision", "standard", "reasoning"][i % 3].into(),
                topic: format!("{} {}", latency::word(i * 3), latency::word(i * 3 + 1)),
                position: (0..24)
                    .map(|k| latency::word(i * 31 + k))
                    .collect::<Vec<_>>()
                    .join(" "),
                reasoning: (0..40)
                    .map(|k| latency::word(i * 17 + k))
                    .collect::<Vec<_>>()
                    .join(" "),
                confidence: "high".into(),
                stability: "stable".into(),
                origin: "pipeline".into(),
                ..Default::default()
            },
            now,
        )?;
        krows::decide(conn, &id, "approved", "user", now)?;
    }
    Ok(())
}

fn profile_text() -> String {
    let mut s = String::from("# About me\n\n");
    for i in 0..40 {
        s.push_str(&format!(
            "- {}\n",
            (0..12)
                .map(|k| latency::word(i * 13 + k))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    s
}

/// Text of about `budget` tokens, in paragraphs, standing in for a model-written tier.
fn filler(tier: &str, budget: usize) -> String {
    let mut s = format!("# {tier} memory (benchmark stand-in)\n");
    let mut i = 0;
    while personkit_memory::tokens(&s) < budget - 40 {
        s.push_str(&format!(
            "\n- {}",
            (0..20)
                .map(|k| latency::word(i * 20 + k))
                .collect::<Vec<_>>()
                .join(" ")
        ));
        i += 1;
    }
    s
}
