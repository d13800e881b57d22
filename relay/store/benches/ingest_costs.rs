//! Where ingest's time goes: the library's `ingest_batch` on the same 20,000 turns (batches of 500, 20 threads)
//! into a fresh corpus per variant, each variant removing or changing one thing after the corpus is made, all in
//! one run and reported as a ratio to the unchanged corpus measured alongside. A diagnostic for the ingest
//! throughput work (BENCHMARKS.md, "Relay ingest"); the variants that drop indexes or rows are not things the
//! relay may do as they stand. Run: `cargo bench -p personkit-store --bench ingest_costs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use personkit_testkit::{alternating_role, temp_db, turn};

const TURNS: usize = 20_000;
const BATCH: usize = 500;

const VARIANTS: &[(&str, &str)] = &[
    ("as shipped", ""),
    (
        "FTS fed by a trigger per message (schema 13)",
        "DROP TRIGGER messages_fts_insert;
         CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
             INSERT INTO messages_fts(rowid, content) VALUES (new.pk, new.content);
         END;",
    ),
    ("without the FTS index", "DROP TRIGGER messages_fts_insert;"),
    (
        "without the change-feed (sync log) entry",
        "DROP TRIGGER sync_log_message_insert;",
    ),
    (
        "change-feed entry keyed by message id (schema 14)",
        "DROP TRIGGER sync_log_message_insert;
         CREATE TABLE bench_feed_by_id (
             seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, id TEXT NOT NULL, UNIQUE (kind, id));
         CREATE TRIGGER bench_feed_by_id_insert AFTER INSERT ON messages BEGIN
             INSERT OR REPLACE INTO bench_feed_by_id (kind, id) VALUES ('m', new.id);
         END;",
    ),
    (
        "revision index without the hash",
        "DROP INDEX messages_position_order;
         CREATE INDEX messages_position_order ON messages(thread_id, position_key, captured_at);",
    ),
    (
        "without the (thread, captured) and received indexes",
        "DROP INDEX messages_thread_captured; DROP INDEX messages_received;",
    ),
    (
        "page cache 2 MiB (SQLite's default)",
        "PRAGMA cache_size=-2000;",
    ),
    (
        "WAL checkpoint every 10,000 pages",
        "PRAGMA wal_autocheckpoint=10000;",
    ),
];

fn run(sql: &str, tag: &str) -> f64 {
    let filler = "The relay keeps every acknowledged turn exactly once; this sentence pads the turn to a \
                  realistic length so that FTS indexing has words to tokenize and the WAL has bytes to sync. ";
    let (_dir, db) = temp_db();
    let mut conn = personkit_store::db::open(&db).unwrap();
    personkit_store::bulk::tune_for_diagnostics(&conn, sql).unwrap();
    let origin = personkit_store::ingest::Origin {
        device_id: "bench".into(),
    };
    let turns: Vec<_> = (0..TURNS)
        .map(|i| {
            turn(
                "browser-ext:bench",
                &format!("c-{}", i % 20),
                alternating_role(i),
                &format!("{tag} turn {i}. {filler}{filler}"),
                Some((i / 20) as u32),
            )
        })
        .collect();
    let t = Instant::now();
    for chunk in turns.chunks(BATCH) {
        personkit_store::ingest::ingest_batch(
            &mut conn,
            &origin,
            chunk,
            time::OffsetDateTime::now_utc(),
        )
        .unwrap();
    }
    TURNS as f64 / t.elapsed().as_secs_f64()
}

fn main() {
    println!("| variant | turns/s | vs as shipped |\n|---|---|---|");
    let mut base = Vec::new();
    for (i, (name, sql)) in VARIANTS.iter().enumerate() {
        // The unchanged corpus is measured before every variant, so drift hits both alike.
        let b = run("", &format!("base{i}"));
        base.push(b);
        if i == 0 {
            continue;
        }
        let v = run(sql, &format!("v{i}"));
        println!("| {name} | {v:.0} | {:.2} |", v / b);
    }
    base.sort_by(f64::total_cmp);
    println!(
        "| as shipped (median of {} runs) | {:.0} | 1.00 |",
        base.len(),
        base[base.len() / 2]
    );
}
