//! Ingest benchmark. Run: `cargo bench -p personkit-store --bench ingest` (`PERSONKIT_BENCH_QUICK=1` for a
//! smoke run). Results print as a Markdown block for BENCHMARKS.md.
//!
//! 1. **Sustained batched ingest through HTTP**: the real `personkit serve --rate-limit 0` (release build, temp
//!    corpus), one keep-alive connection POSTing batches of 500 turns; turns per second.
//! 2. **The bare ceiling, same run**: a plain rusqlite loop into the smallest table that can hold turns durably
//!    and searchably — `messages(pk, thread_id, content, content_hash, UNIQUE(thread_id, content_hash))` with an
//!    external-content FTS5 index kept by trigger, WAL, `synchronous=FULL`, 500 rows per transaction. No JSON, no
//!    validation, no threads, revisions, signal layer or bookkeeping. Reported: ratio = HTTP turns/s ÷ bare rows/s
//!    (goal ≥ 0.8): the median of the five repetitions' own ratios (bare and relay run back to back in each).
//! 3. **Library ingest** (`ingest_batch` in-process on parsed items): a diagnostic that splits the gap into "what
//!    the corpus writes" and "the server around it".
//! 4. **Latency**: single-turn POSTs at a fixed 200 requests/s (open loop: each request has a scheduled start, and
//!    latency is measured from that schedule, so a slow answer also counts against the ones queued behind it);
//!    p50/p99/max (goal p99 < 5 ms). The same schedule is run against raw one-turn transactions writing the rows
//!    ingest writes (same fsync) as the floor the disk sets under any relay.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_debug_implementations
)]

use personkit_testkit as common;

use std::time::{Duration, Instant};

use common::*;
use rusqlite::params;
use serde_json::Value;

const SURFACE: &str = "browser-ext:bench";
const BATCH: usize = 500;

struct Sizes {
    batches: usize,
    reps: usize,
    latency_requests: usize,
    warmup_requests: usize,
}

fn sizes() -> Sizes {
    if std::env::var_os("PERSONKIT_BENCH_QUICK").is_some() {
        Sizes {
            batches: 4,
            reps: 1,
            latency_requests: 200,
            warmup_requests: 20,
        }
    } else {
        Sizes {
            batches: 40,
            reps: 5,
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
            let role = alternating_role(i);
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
fn http_ingest(turns: &[Value], per_batch: &mut Vec<Duration>) -> f64 {
    let (_dir, db) = temp_db();
    let relay = Relay::start(&db, &["--rate-limit", "0"]);
    let token = relay.pair_printed("bench");
    // Warm-up: one batch on another tag (connection set-up, first-statement preparation).
    relay.http.send_batch(&token, &make_turns("warmup", BATCH));
    let bodies = bodies(turns);
    let t = Instant::now();
    for b in &bodies {
        let tb = Instant::now();
        let r = relay.http.post("/v1/observations", Some(&token), b);
        per_batch.push(tb.elapsed());
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let secs = t.elapsed().as_secs_f64();
    // Check that the work was really done (outside the timed part).
    let rows = dump_surface(&relay.db, SURFACE).len();
    assert_eq!(rows, turns.len() + BATCH, "every turn landed");
    turns.len() as f64 / secs
}

/// The raw baseline's write of one batch: one transaction, the same rows per turn and per batch as ingest.
fn raw_insert_batch(conn: &mut rusqlite::Connection, chunk: &[Value], seq: &mut i64) {
    let now = "2026-11-22T10:00:00.000Z";
    let origin = "bench-device";
    let tx = conn.transaction().unwrap();
    tx.prepare_cached(
        "INSERT INTO provenance(captured_at, origin_device, client_device_id, app_version) VALUES (?1, ?2, ?3, ?4)",
    )
    .unwrap()
    .execute(params![now, origin, "test-device", "0.1.0-test"])
    .unwrap();
    let prov = tx.last_insert_rowid();
    for v in chunk {
        *seq += 1;
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
        .execute(params![tid, SURFACE, v["conversation_id"].as_str().unwrap(), now, origin, *seq])
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
            *seq
        ])
        .unwrap();
        personkit_store::pending::queue(&tx, tx.last_insert_rowid()).unwrap();
    }
    tx.prepare_cached(
        "INSERT INTO origin_seqs(origin, last_seq) VALUES (?1, ?2)
         ON CONFLICT(origin) DO UPDATE SET last_seq = excluded.last_seq",
    )
    .unwrap()
    .execute(params![origin, *seq])
    .unwrap();
    tx.prepare_cached(
        "INSERT INTO surface_stats(surface, last_accepted_at, accepted_total) VALUES (?1, ?2, ?3)
         ON CONFLICT(surface) DO UPDATE SET last_accepted_at = excluded.last_accepted_at,
             accepted_total = accepted_total + ?3",
    )
    .unwrap()
    .execute(params![SURFACE, now, chunk.len() as i64])
    .unwrap();
    personkit_store::pending::commit(tx).unwrap();
}

/// Rows/s of the bare ceiling (see the module doc): its own minimal schema, WAL, `synchronous=FULL`, one
/// transaction per batch. With `fts_by_statement` the loop fills its FTS index the relay's way instead — one
/// `INSERT … SELECT` per transaction rather than a trigger per row — which tells how much of the gap is the
/// relay's extra rows and how much the way FTS5 is fed.
fn bare_ingest(turns: &[Value], per_batch: &mut Vec<Duration>, fts_by_statement: bool) -> f64 {
    let (_dir, db) = temp_db();
    let mut conn = rusqlite::Connection::open(&db).expect("open");
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    conn.execute_batch(
        "PRAGMA synchronous=FULL;
         CREATE TABLE messages (
             pk INTEGER PRIMARY KEY,
             thread_id TEXT NOT NULL,
             content TEXT NOT NULL,
             content_hash TEXT NOT NULL,
             UNIQUE (thread_id, content_hash)
         );
         CREATE VIRTUAL TABLE messages_fts USING fts5(
             content, content='messages', content_rowid='pk', tokenize='porter unicode61'
         );
         CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
             INSERT INTO messages_fts(rowid, content) VALUES (new.pk, new.content);
         END;",
    )
    .unwrap();
    if fts_by_statement {
        conn.execute_batch("DROP TRIGGER messages_fts_insert")
            .unwrap();
    }
    // The last row already indexed when FTS is fed by statement.
    let mut first = 0i64;
    let t = Instant::now();
    for chunk in turns.chunks(BATCH) {
        let tb = Instant::now();
        let tx = conn.transaction().unwrap();
        {
            let mut ins = tx
                .prepare_cached(
                    "INSERT INTO messages(thread_id, content, content_hash) VALUES (?1, ?2, ?3)",
                )
                .unwrap();
            for v in chunk {
                ins.execute(params![
                    v["thread_id"].as_str().unwrap(),
                    v["turn"]["content"].as_str().unwrap(),
                    v["turn"]["content_hash"].as_str().unwrap()
                ])
                .unwrap();
            }
        }
        if fts_by_statement {
            tx.execute(
                "INSERT INTO messages_fts(rowid, content) SELECT pk, content FROM messages WHERE pk > ?1",
                [first],
            )
            .unwrap();
            first = tx
                .query_row("SELECT max(pk) FROM messages", [], |r| r.get(0))
                .unwrap();
        }
        tx.commit().unwrap();
        per_batch.push(tb.elapsed());
    }
    let secs = t.elapsed().as_secs_f64();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM messages_fts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n as usize, turns.len(), "the bare loop indexed every turn");
    turns.len() as f64 / secs
}

/// Turns/s of the relay's own ingest function called in-process (no HTTP, no JSON text): a diagnostic that splits
/// the gap between the baseline and HTTP into "ingest logic" and "server around it".
fn lib_ingest(turns: &[Value], per_batch: &mut Vec<Duration>) -> f64 {
    let (_dir, db) = temp_db();
    let mut conn = personkit_store::db::open(&db).expect("open corpus");
    let origin = personkit_store::ingest::Origin {
        device_id: "bench-device".into(),
    };
    let t = Instant::now();
    for chunk in turns.chunks(BATCH) {
        let tb = Instant::now();
        let r = personkit_store::ingest::ingest_batch(
            &mut conn,
            &origin,
            chunk,
            time::OffsetDateTime::now_utc(),
        )
        .expect("ingest");
        per_batch.push(tb.elapsed());
        assert_eq!(r.stored, chunk.len());
    }
    turns.len() as f64 / t.elapsed().as_secs_f64()
}

/// Run `op(i)` at a fixed `rate` per second (open loop); latencies from each scheduled start, after warm-up.
fn paced(
    count: usize,
    warmup: usize,
    rate: u64,
    mut op: impl FnMut(usize),
) -> (Vec<Duration>, Vec<Duration>) {
    let interval = Duration::from_nanos(1_000_000_000 / rate);
    let mut from_schedule = Vec::with_capacity(count);
    let mut service = Vec::with_capacity(count);
    let t0 = Instant::now();
    for i in 0..warmup + count {
        let scheduled = t0 + interval * i as u32;
        let now = Instant::now();
        if scheduled > now {
            std::thread::sleep(scheduled - now);
        }
        let start = Instant::now();
        op(i);
        let end = Instant::now();
        if i >= warmup {
            from_schedule.push(end - scheduled);
            service.push(end - start);
        }
    }
    from_schedule.sort();
    service.sort();
    (from_schedule, service)
}

/// The floor under the latency goal: one raw transaction per turn (same rows, same fsync) at the same rate.
fn raw_latency(sizes: &Sizes, rate: u64) -> (Vec<Duration>, Vec<Duration>) {
    let (_dir, db) = temp_db();
    let mut conn = personkit_store::db::open(&db).expect("open corpus");
    let turns = make_turns("rawlat", sizes.warmup_requests + sizes.latency_requests);
    let mut seq = 0;
    paced(sizes.latency_requests, sizes.warmup_requests, rate, |i| {
        raw_insert_batch(&mut conn, std::slice::from_ref(&turns[i]), &mut seq)
    })
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
    paced(sizes.latency_requests, sizes.warmup_requests, rate, |i| {
        let r = relay
            .http
            .post("/v1/observations", Some(&token), &bodies[i]);
        assert_eq!(r.status, 200, "{}", r.body);
    })
}

fn pct(sorted: &[Duration], q: f64) -> Duration {
    let idx = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// Turns/s over the first (or last) tenth of the batches: shows whether ingest slows as the corpus grows.
fn tenth_rate(per_batch: &[Duration], last: bool) -> String {
    let k = (per_batch.len() / 10).max(1);
    let part = if last {
        &per_batch[per_batch.len() - k..]
    } else {
        &per_batch[..k]
    };
    let secs: f64 = part.iter().map(Duration::as_secs_f64).sum();
    format!("{:.0}", (k * BATCH) as f64 / secs)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    // The HTTP half measures the release binary as it is now, never a stale one.
    personkit_testkit::build_bin(true);
    let sizes = sizes();
    let n = sizes.batches * BATCH;
    eprintln!(
        "ingest bench: {n} turns in batches of {BATCH}, {} repetitions",
        sizes.reps
    );
    let mut http = Vec::new();
    let mut bare = Vec::new();
    let mut bare_stmt = Vec::new();
    let mut lib = Vec::new();
    for rep in 0..sizes.reps {
        let turns = make_turns(&format!("rep{rep}"), n);
        let (mut bb, mut lb, mut hb) = (Vec::new(), Vec::new(), Vec::new());
        bare_stmt.push(bare_ingest(&turns, &mut Vec::new(), true));
        let l = lib_ingest(&turns, &mut lb);
        // The two the goal compares, back to back.
        let b = bare_ingest(&turns, &mut bb, false);
        let h = http_ingest(&turns, &mut hb);
        eprintln!(
            "    turns/s over the first / last tenth of the batches: bare {} / {}, library {} / {}, HTTP {} / {}",
            tenth_rate(&bb, false),
            tenth_rate(&bb, true),
            tenth_rate(&lb, false),
            tenth_rate(&lb, true),
            tenth_rate(&hb, false),
            tenth_rate(&hb, true)
        );
        eprintln!(
            "  rep {rep}: bare {b:.0} rows/s, library ingest {l:.0}, HTTP {h:.0}, ratio {:.2}",
            h / b
        );
        bare.push(b);
        lib.push(l);
        http.push(h);
    }
    let (h, r, l) = (
        median(http.clone()),
        median(bare.clone()),
        median(lib.clone()),
    );

    let rate = 200;
    eprintln!(
        "latency: {} single-turn POSTs at {rate}/s, then the raw floor",
        sizes.latency_requests
    );
    let (sched, service) = latency(&sizes, rate);
    let (raw_sched, raw_service) = raw_latency(&sizes, rate);

    println!("```");
    println!("turns per batch            {BATCH}");
    println!("turns per repetition       {n}");
    println!(
        "bare ceiling (rusqlite)    {} rows/s (median of {:?})",
        r.round(),
        bare.iter().map(|x| x.round()).collect::<Vec<_>>()
    );
    println!(
        "HTTP ingest (personkit)    {} turns/s (median of {:?})",
        h.round(),
        http.iter().map(|x| x.round()).collect::<Vec<_>>()
    );
    println!(
        "library ingest_batch       {} turns/s (median of {:?}; diagnostic, no HTTP)",
        l.round(),
        lib.iter().map(|x| x.round()).collect::<Vec<_>>()
    );
    let rs = median(bare_stmt.clone());
    println!(
        "bare, FTS by statement     {} rows/s (median of {:?}; the bare loop fed the relay's way)",
        rs.round(),
        bare_stmt.iter().map(|x| x.round()).collect::<Vec<_>>()
    );
    // Each repetition runs the bare loop and the relay back to back, so the ratio within a repetition sees the
    // same disk weather; their median is steadier than the ratio of the medians on a shared virtual disk.
    let ratios: Vec<f64> = http.iter().zip(&bare).map(|(h, b)| h / b).collect();
    println!(
        "ratio HTTP / bare          {:.2}   (goal >= 0.80; median of the repetitions' ratios {:?})",
        median(ratios.clone()),
        ratios
            .iter()
            .map(|x| (x * 100.0).round() / 100.0)
            .collect::<Vec<_>>()
    );
    println!("  ratio of the medians     {:.2}", h / r);
    println!("  HTTP / bare by statement {:.2}", h / rs);
    println!("  library / bare           {:.2}", l / r);
    println!("  HTTP / library           {:.2}", h / l);
    let line = |name: &str, v: &[Duration]| {
        println!(
            "{name:<34} n={}  p50 {}  p99 {}  max {}",
            v.len(),
            ms(pct(v, 0.50)),
            ms(pct(v, 0.99)),
            ms(pct(v, 1.0))
        )
    };
    println!("latency at {rate} requests/s (goal: HTTP p99 < 5 ms, from schedule)");
    line("  HTTP single-turn POST, from schedule", &sched);
    line("  HTTP single-turn POST, service time", &service);
    line("  raw 1-turn transaction, from schedule", &raw_sched);
    line("  raw 1-turn transaction, service time", &raw_service);
    println!("```");
}
