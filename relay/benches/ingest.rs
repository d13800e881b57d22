//! Ingest benchmark (issue 2, item 9). Run: `cargo bench -p personkit-relay --bench ingest`.
//!
//! 1. **Sustained batched ingest through HTTP**: the real `personkit serve --rate-limit 0` (release build, temp
//!    corpus), one keep-alive connection POSTing batches of 100 turns; turns per second.
//! 2. **Baseline, same run**: a raw rusqlite insert loop into the same schema (created by the library's own
//!    `db::open`: migrations, FTS5 triggers, WAL, `synchronous=FULL`), one transaction per 100 turns, writing the
//!    same rows per turn as ingest (thread upsert, message + its FTS row via trigger, persona observation) and per
//!    batch (provenance, origin sequence, surface stats) — but with no HTTP, no JSON, no validation and no lookups.
//!    Reported: ratio = HTTP turns/s ÷ baseline turns/s (goal ≥ 0.8), median of alternating repetitions.
//! 3. **Latency**: single-turn POSTs at a fixed 200 requests/s (open loop: each request has a scheduled start, and
//!    latency is measured from that schedule, so a slow answer also counts against the ones queued behind it);
//!    p50/p99/max (goal p99 < 5 ms).
//!
//! `PERSONKIT_BENCH_QUICK=1` shrinks every size for a smoke run. Results print as a Markdown block for
//! BENCHMARKS.md.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_debug_implementations
)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use personkit_shared::wire::Role;
use rusqlite::params;
use serde_json::Value;

const SURFACE: &str = "browser-ext:bench";
const BATCH: usize = 100;

struct Sizes {
    batches: usize,
    reps: usize,
    latency_requests: usize,
    warmup_requests: usize,
}

fn sizes() -> Sizes {
    if std::env::var_os("PERSONKIT_BENCH_QUICK").is_some() {
        Sizes {
            batches: 20,
            reps: 1,
            latency_requests: 200,
            warmup_requests: 20,
        }
    } else {
        Sizes {
            batches: 200,
            reps: 3,
            latency_requests: 3000,
            warmup_requests: 200,
        }
    }
}

/// `n` distinct turns over 20 threads, realistic length (~400 bytes of prose).
fn make_turns(tag: &str, n: usize) -> Vec<Value> {
    let filler = "The relay keeps every acknowledged turn exactly once; this sentence pads the turn to a \
                  realistic length so that FTS indexing has words to tokenize and the WAL has bytes to sync. ";
    (0..n)
        .map(|i| {
            let role = if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            turn(
                SURFACE,
                &format!("{tag}-conv-{}", i % 20),
                role,
                &format!("{tag} turn {i}. {filler}{filler}"),
                Some((i / 20) as u32),
            )
        })
        .collect()
}

fn bodies(turns: &[Value]) -> Vec<Vec<u8>> {
    turns
        .chunks(BATCH)
        .map(|c| batch(c).to_string().into_bytes())
        .collect()
}

/// Turns/s through the real server.
fn http_ingest(turns: &[Value]) -> f64 {
    let (_dir, db) = temp_db();
    let relay = Relay::start(&db, &["--rate-limit", "0"]);
    let token = relay.pair_printed("bench");
    // Warm-up: one batch on another tag (connection set-up, first-statement preparation).
    relay.http.send_batch(&token, &make_turns("warmup", BATCH));
    let bodies = bodies(turns);
    let t = Instant::now();
    for b in &bodies {
        let r = relay.http.post("/v1/observations", Some(&token), b);
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let secs = t.elapsed().as_secs_f64();
    // Check that the work was really done (outside the timed part).
    let rows = dump_surface(&relay.db, SURFACE).len();
    assert_eq!(rows, turns.len() + BATCH, "every turn landed");
    turns.len() as f64 / secs
}

/// Turns/s of a raw insert loop into the same schema, same pragmas, same rows.
fn raw_ingest(turns: &[Value]) -> f64 {
    let (_dir, db) = temp_db();
    let mut conn = personkit_relay::db::open(&db).expect("open corpus");
    let now = "2026-11-22T10:00:00.000Z";
    let origin = "bench-device";
    let mut seq: i64 = 0;
    let t = Instant::now();
    for chunk in turns.chunks(BATCH) {
        let tx = conn.transaction().unwrap();
        tx.prepare_cached(
            "INSERT INTO provenance(captured_at, origin_device, client_device_id, app_version) VALUES (?1, ?2, ?3, ?4)",
        )
        .unwrap()
        .execute(params![now, origin, "test-device", "0.1.0-test"])
        .unwrap();
        let prov = tx.last_insert_rowid();
        for v in chunk {
            seq += 1;
            let tid = v["thread_id"].as_str().unwrap();
            let turn = &v["turn"];
            let hash = turn["content_hash"].as_str().unwrap();
            let ordinal = turn["ordinal"].as_i64();
            tx.prepare_cached(
                "INSERT INTO threads(id, surface, conversation_id, first_seen_at, last_seen_at, origin_device, origin_seq)
                 VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6)
                 ON CONFLICT(id) DO UPDATE SET last_seen_at = excluded.last_seen_at",
            )
            .unwrap()
            .execute(params![tid, SURFACE, v["conversation_id"].as_str().unwrap(), now, origin, seq])
            .unwrap();
            let mid = personkit_shared::ids::message_id(&tid.parse().unwrap(), hash).to_string();
            tx.prepare_cached(
                "INSERT INTO messages(id, thread_id, role, content, content_hash, ordinal, position_key, captured_at,
                     received_at, provenance_id, origin_device, origin_seq)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?9, ?10, ?11)",
            )
            .unwrap()
            .execute(params![
                mid,
                tid,
                turn["role"].as_str().unwrap(),
                turn["content"].as_str().unwrap(),
                hash,
                ordinal,
                ordinal.map(|o| format!("o:{o}")),
                now,
                prov,
                origin,
                seq
            ])
            .unwrap();
            tx.prepare_cached(
                "INSERT INTO persona_observations(id, kind, source_surface, thread_id, message_id, role, observed_at,
                     origin_device, origin_seq)
                 VALUES (?1, 'thread_turn', ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .unwrap()
            .execute(params![
                format!("{origin}:{seq}"),
                SURFACE,
                tid,
                mid,
                turn["role"].as_str().unwrap(),
                now,
                origin,
                seq
            ])
            .unwrap();
        }
        tx.prepare_cached(
            "INSERT INTO origin_seqs(origin, last_seq) VALUES (?1, ?2)
             ON CONFLICT(origin) DO UPDATE SET last_seq = excluded.last_seq",
        )
        .unwrap()
        .execute(params![origin, seq])
        .unwrap();
        tx.prepare_cached(
            "INSERT INTO surface_stats(surface, last_accepted_at, accepted_total) VALUES (?1, ?2, ?3)
             ON CONFLICT(surface) DO UPDATE SET last_accepted_at = excluded.last_accepted_at,
                 accepted_total = accepted_total + ?3",
        )
        .unwrap()
        .execute(params![SURFACE, now, chunk.len() as i64])
        .unwrap();
        tx.commit().unwrap();
    }
    let secs = t.elapsed().as_secs_f64();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM messages_fts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n as usize, turns.len(), "baseline indexed every turn");
    turns.len() as f64 / secs
}

/// Latencies (from the scheduled start) of single-turn POSTs at `rate` per second.
fn latency(sizes: &Sizes, rate: u64) -> (Vec<Duration>, Vec<Duration>) {
    let (_dir, db) = temp_db();
    let relay = Relay::start(&db, &["--rate-limit", "0"]);
    let token = relay.pair_printed("bench latency");
    let turns = make_turns("lat", sizes.warmup_requests + sizes.latency_requests);
    let bodies: Vec<Vec<u8>> = turns
        .iter()
        .map(|t| batch(std::slice::from_ref(t)).to_string().into_bytes())
        .collect();
    let interval = Duration::from_nanos(1_000_000_000 / rate);
    let mut from_schedule = Vec::with_capacity(sizes.latency_requests);
    let mut service = Vec::with_capacity(sizes.latency_requests);
    let t0 = Instant::now();
    for (i, b) in bodies.iter().enumerate() {
        let scheduled = t0 + interval * i as u32;
        let now = Instant::now();
        if scheduled > now {
            std::thread::sleep(scheduled - now);
        }
        let start = Instant::now();
        let r = relay.http.post("/v1/observations", Some(&token), b);
        let end = Instant::now();
        assert_eq!(r.status, 200, "{}", r.body);
        if i >= sizes.warmup_requests {
            from_schedule.push(end - scheduled);
            service.push(end - start);
        }
    }
    (from_schedule, service)
}

fn pct(sorted: &[Duration], q: f64) -> Duration {
    let idx = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let sizes = sizes();
    let n = sizes.batches * BATCH;
    eprintln!(
        "ingest bench: {n} turns in batches of {BATCH}, {} repetitions",
        sizes.reps
    );
    let mut http = Vec::new();
    let mut raw = Vec::new();
    for rep in 0..sizes.reps {
        let turns = make_turns(&format!("rep{rep}"), n);
        let r = raw_ingest(&turns);
        let h = http_ingest(&turns);
        eprintln!(
            "  rep {rep}: baseline {r:.0} turns/s, HTTP {h:.0} turns/s, ratio {:.2}",
            h / r
        );
        raw.push(r);
        http.push(h);
    }
    let (h, r) = (median(http.clone()), median(raw.clone()));

    let rate = 200;
    eprintln!(
        "latency: {} single-turn POSTs at {rate}/s",
        sizes.latency_requests
    );
    let (mut sched, mut service) = latency(&sizes, rate);
    sched.sort();
    service.sort();

    println!("```");
    println!("turns per batch            {BATCH}");
    println!("turns per repetition       {n}");
    println!(
        "baseline (raw rusqlite)    {} turns/s (median of {:?})",
        r.round(),
        raw.iter().map(|x| x.round()).collect::<Vec<_>>()
    );
    println!(
        "HTTP ingest (personkit)    {} turns/s (median of {:?})",
        h.round(),
        http.iter().map(|x| x.round()).collect::<Vec<_>>()
    );
    println!("ratio HTTP / baseline      {:.2}   (goal >= 0.80)", h / r);
    println!(
        "single-turn POST @ {rate}/s   n={}  p50 {}  p99 {}  max {}   (from schedule; goal p99 < 5 ms)",
        sched.len(),
        ms(pct(&sched, 0.50)),
        ms(pct(&sched, 0.99)),
        ms(pct(&sched, 1.0))
    );
    println!(
        "  service time only        p50 {}  p99 {}  max {}",
        ms(pct(&service, 0.50)),
        ms(pct(&service, 0.99)),
        ms(pct(&service, 1.0))
    );
    println!("```");
}
