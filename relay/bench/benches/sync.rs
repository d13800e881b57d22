//! Initial sync benchmark. Run: `cargo bench -p personkit-bench --bench sync` (`-- N` messages, default 100000;
//! `PERSONKIT_BENCH_QUICK=1` for 10000). Both sides are real release relays on loopback ports chosen at run time.
//!
//! 1. **Baseline, HTTP ingest**: N generated turns (1,000 per thread, ~300 bytes each) POSTed in batches of 500
//!    to a fresh relay B over one keep-alive connection; turns per second.
//! 2. **Initial sync, same run**: a fresh relay A pairs with B (`pair --sync`, `sync add`) and `personkit sync now`
//!    pulls all N from B (pages of 1,000, each applied in one transaction) — timed from the start of the CLI to its
//!    exit; turns per second. Reported: ratio = sync turns/s ÷ HTTP ingest turns/s (goal ≥ 0.5), and the corpora
//!    are checked equal (canonical dump).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use personkit_shared::wire::Role;
use personkit_testkit::{self as kit, Relay, Rng, build_bin};
use serde_json::Value;

const WORDS: &[&str] = &[
    "relay",
    "corpus",
    "migration",
    "index",
    "vector",
    "thread",
    "token",
    "search",
    "export",
    "snapshot",
    "garden",
    "recipe",
    "travel",
    "budget",
    "poem",
    "python",
    "rust",
    "sqlite",
    "kernel",
    "lambda",
];

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(if std::env::var_os("PERSONKIT_BENCH_QUICK").is_some() {
            10_000
        } else {
            100_000
        });
    build_bin(true);
    let mut rng = Rng::new(5);
    let per_thread = 1000;
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let words: Vec<&str> = (0..45).map(|_| WORDS[rng.below(WORDS.len())]).collect();
            let role = if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            kit::turn_at(
                "browser-ext:bench",
                &format!("sync-bench-{}", i / per_thread),
                role,
                &format!("{i} {}", words.join(" ")),
                Some((i % per_thread) as u32),
                None,
                &format!(
                    "2026-11-{:02}T10:{:02}:{:02}.000Z",
                    1 + (i / 3600) % 28,
                    (i / 60) % 60,
                    i % 60
                ),
            )
        })
        .collect();

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("b")).unwrap();
    std::fs::create_dir_all(dir.path().join("a")).unwrap();
    let db_b = dir.path().join("b/corpus.db");
    let db_a = dir.path().join("a/corpus.db");
    let b = Relay::start(&db_b, &["--rate-limit", "0", "--sync-interval", "86400"]);
    let token = b.pair_printed("bench");
    let t = Instant::now();
    let mut stored = 0u64;
    for chunk in items.chunks(500) {
        let r = b.http.send_batch(&token, chunk);
        stored += r["stored"].as_u64().unwrap();
    }
    let http_secs = t.elapsed().as_secs_f64();
    assert_eq!(stored as usize, n);
    let http_rate = n as f64 / http_secs;
    println!("http ingest: {n} turns in {http_secs:.2}s = {http_rate:.0} turns/s");

    let a = Relay::start(&db_a, &["--rate-limit", "0", "--sync-interval", "86400"]);
    let code = b.cli_json(&["pair", "--sync", "--json"])["code"]
        .as_str()
        .unwrap()
        .to_owned();
    a.cli_json(&["sync", "add", &b.base, "--code", &code, "--json"]);
    let t = Instant::now();
    let out = a.cli_json(&["sync", "now", "--json"]);
    let sync_secs = t.elapsed().as_secs_f64();
    assert_eq!(out["peers"][0]["ok"], true, "{out}");
    let pulled = &out["peers"][0]["report"]["pulled"];
    assert!(pulled["stored"].as_u64().unwrap() >= n as u64, "{out}");
    let sync_rate = n as f64 / sync_secs;
    println!(
        "initial sync: {n} turns in {sync_secs:.2}s = {sync_rate:.0} turns/s ({} pages pulled, {} pushed)",
        out["peers"][0]["report"]["pulled_pages"], out["peers"][0]["report"]["pushed_pages"]
    );
    let dump = |db: &std::path::Path| {
        let c = personkit_store::db::open_read_only(db).unwrap();
        personkit_store::sync::canonical_dump(&c).unwrap()
    };
    assert!(
        dump(&db_a) == dump(&db_b),
        "the corpora differ after the initial sync"
    );
    println!(
        "RESULT sync/http-ingest throughput ratio {:.2}x ({n} messages; goal >= 0.5x)",
        sync_rate / http_rate
    );
}
