//! Dashboard page benchmark: the server's time for the thread list, a 500-turn thread and a search page, each
//! against one bare SQL query for the same rows in the same run. Run:
//! `cargo bench -p personkit-bench --bench dashboard -- --messages 100000 [--db PATH] [--iterations 200] [--json]`
//!
//! The corpus is the search-latency benchmark's (`personkit_bench::latency::build_corpus`: threads of 50 turns
//! over three sites) plus one thread of 500 turns. Pages are requested through the relay's real router
//! (`personkit_server::app`, every middleware, a signed-in session) in process, and the time runs until the
//! whole body is read: routing, session check, reads, rendering; no socket. Search runs without an embedder
//! (keywords, entities, recency), as a relay with `PERSONKIT_EMBEDDER=none` does.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use clap::Parser;
use personkit_bench::{bench_args, latency};
use personkit_cli::output::progress_bar;
use personkit_server::config::ApiConfig;
use personkit_server::{AppState, app};
use personkit_shared::wire::Role;
use personkit_store::bulk::{self, BulkMessage, baseline};
use personkit_store::clock::Clock;
use personkit_store::db::Db;
use serde::Serialize;
use tower::ServiceExt;

#[derive(Debug, Parser)]
#[command(
    name = "dashboard",
    about = "Server time of dashboard pages against bare SQL for the same rows"
)]
struct Args {
    /// Messages in the synthetic corpus (plus the 500-turn thread).
    #[arg(long, default_value_t = 100_000)]
    messages: usize,
    /// Requests per page.
    #[arg(long, default_value_t = 200)]
    iterations: usize,
    /// Build or reuse the corpus at this path (default: a temporary one, removed afterwards).
    #[arg(long)]
    db: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

const LONG_CONV: &str = "bench-long-500";
const LONG_TURNS: u32 = 500;

#[derive(Debug, Serialize)]
struct Row {
    page: String,
    p50_ms: f64,
    p95_ms: f64,
    sql_p50_ms: f64,
    sql_p95_ms: f64,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse_from(bench_args());
    let tmp = std::env::temp_dir().join(format!("personkit-dashboard-{}", std::process::id()));
    let path = a.db.clone().unwrap_or_else(|| tmp.join("corpus.db"));
    {
        let mut conn = personkit_store::db::open(&path)?;
        let have = bulk::message_count(&conn)? as usize;
        let want = a.messages + LONG_TURNS as usize;
        if have == 0 {
            let bar = progress_bar(a.messages as u64, "building");
            latency::build_corpus(&mut conn, a.messages, 0x5EED, |n| bar.inc(n))?;
            bar.finish_and_clear();
            add_long_thread(&mut conn)?;
            bulk::analyze(&conn)?;
        } else if have != want {
            bail!(
                "{} holds {have} messages, not {want}; pass another --db",
                path.display()
            );
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let rows = rt.block_on(measure(&path, a.iterations))?;
    if a.db.is_none() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!(
        "dashboard pages, {} messages (+{LONG_TURNS}-turn thread), {} requests each; server time (ms) vs bare SQL for the same rows",
        a.messages, a.iterations
    );
    println!(
        "{:<44} {:>8} {:>8} {:>9} {:>9} {:>7}",
        "page", "p50", "p95", "sql p50", "sql p95", "×p50"
    );
    for r in &rows {
        println!(
            "{:<44} {:>8.2} {:>8.2} {:>9.3} {:>9.3} {:>7.1}",
            r.page,
            r.p50_ms,
            r.p95_ms,
            r.sql_p50_ms,
            r.sql_p95_ms,
            r.p50_ms / r.sql_p50_ms.max(1e-6)
        );
    }
    Ok(())
}

/// One thread of 500 turns, newer than everything else (so it heads the list, as a long current chat would).
fn add_long_thread(conn: &mut personkit_store::Connection) -> anyhow::Result<()> {
    let base = time::OffsetDateTime::from_unix_timestamp(1_900_000_000)?;
    let now = personkit_store::clock::fmt_time(time::OffsetDateTime::now_utc());
    let rows: Vec<BulkMessage> = (0..LONG_TURNS)
        .map(|i| BulkMessage {
            surface: "browser-ext:claude".into(),
            conversation_id: LONG_CONV.into(),
            title: "a long working session".into(),
            role: if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            },
            content: format!(
                "Turn {i}. {}\n\n```rust\nfn step_{i}() -> u32 {{ {i} }}\n```\n\n- {}\n- {}",
                (0..60)
                    .map(|k| latency::word(i as usize * 7 + k))
                    .collect::<Vec<_>>()
                    .join(" "),
                latency::word(i as usize),
                latency::word(i as usize + 1)
            ),
            ordinal: i,
            at: personkit_store::clock::fmt_time(base + time::Duration::seconds(i64::from(i) * 30)),
            vector: None,
        })
        .collect();
    bulk::load(conn, &rows, None, "bench-long", 1, &now)?;
    Ok(())
}

async fn measure(path: &std::path::Path, n: usize) -> anyhow::Result<Vec<Row>> {
    let db = Db::open(path).with_context(|| format!("opening {}", path.display()))?;
    let state = AppState::new(db, ApiConfig::default(), Clock::system());
    let router = app(state.clone());
    // A session, the way a browser gets one: a one-time link, then its cookie.
    let now = state.clock.now();
    let (secret, _) = state
        .db
        .write(|c| personkit_store::signin::create_link(c, now))?;
    let r = get(&router, &format!("/signin?t={}", secret.expose()), None).await?;
    let cookie =
        r.1.context("sign-in set no cookie")?
            .split(';')
            .next()
            .unwrap_or_default()
            .to_owned();
    let long_id = personkit_shared::ids::thread_id("browser-ext:claude", LONG_CONV)
        .hyphenated()
        .to_string();
    let queries: Vec<(String, String)> = (0..n)
        .map(|i| {
            let topic = (i * 7919) % latency::TOPICS;
            let (w1, w2) = (
                latency::word(topic * 40 + i % 7),
                latency::word(topic * 40 + i % 11 + 1),
            );
            (format!("{w1} {w2}"), format!("\"{w1}\" \"{w2}\""))
        })
        .collect();

    let reader = personkit_store::db::open_read_only(path)?;
    let mut out = Vec::new();
    let pages: [(&str, String); 3] = [
        ("thread list (/threads, 50 rows)", "/threads".into()),
        (
            "500-turn thread (/threads/{id}, first 100 turns)",
            format!("/threads/{long_id}"),
        ),
        ("search (/search?q=, 20 hits, keywords)", String::new()),
    ];
    for (name, url) in pages {
        // Warm-up (statement caches, page cache), then the timed runs; the bare query right after, same rows.
        for q in queries.iter().take(5) {
            let u = if url.is_empty() {
                search_url(&q.0)
            } else {
                url.clone()
            };
            get(&router, &u, Some(&cookie)).await?;
        }
        let mut page_ms = Vec::with_capacity(n);
        for q in queries.iter().take(n) {
            let u = if url.is_empty() {
                search_url(&q.0)
            } else {
                url.clone()
            };
            let t = Instant::now();
            let (status, _, len) = get_timed(&router, &u, &cookie).await?;
            page_ms.push(t.elapsed().as_secs_f64() * 1000.0);
            if status != StatusCode::OK || len == 0 {
                bail!("{u} answered {status}");
            }
        }
        let mut sql_ms = Vec::with_capacity(n);
        for q in queries.iter().take(n) {
            let t = Instant::now();
            let rows = match name.split(' ').next() {
                Some("thread") => baseline::thread_list(&reader, 50)?,
                Some("500-turn") => baseline::thread_turns(&reader, &long_id, 100)?,
                _ => baseline::keyword_hits(&reader, &q.1, 20)?,
            };
            sql_ms.push(t.elapsed().as_secs_f64() * 1000.0);
            std::hint::black_box(rows);
        }
        out.push(Row {
            page: name.to_owned(),
            p50_ms: pct(&mut page_ms, 0.5),
            p95_ms: pct(&mut page_ms, 0.95),
            sql_p50_ms: pct(&mut sql_ms, 0.5),
            sql_p95_ms: pct(&mut sql_ms, 0.95),
        });
    }
    Ok(out)
}

fn search_url(q: &str) -> String {
    format!("/search?q={}", q.replace(' ', "+"))
}

async fn get(
    router: &axum::Router,
    uri: &str,
    cookie: Option<&str>,
) -> anyhow::Result<(StatusCode, Option<String>, usize)> {
    let mut req = Request::get(uri).header(header::HOST, "127.0.0.1:8787");
    if let Some(c) = cookie {
        req = req.header(header::COOKIE, c);
    }
    let resp = router.clone().oneshot(req.body(Body::empty())?).await?;
    let status = resp.status();
    let set = resp
        .headers()
        .get(header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await?;
    Ok((status, set, body.len()))
}

async fn get_timed(
    router: &axum::Router,
    uri: &str,
    cookie: &str,
) -> anyhow::Result<(StatusCode, Option<String>, usize)> {
    get(router, uri, Some(cookie)).await
}
