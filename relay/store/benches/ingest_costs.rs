//! Where ingest's time goes: the library's `ingest_batch` on the same 20,000 turns (batches of 500, 20 threads)
//! into a fresh corpus per variant, each variant removing or changing one thing after the corpus is made, all in
//! one run and reported as a ratio to the unchanged corpus measured alongside. A diagnostic for the ingest
//! throughput work (BENCHMARKS.md, "Relay ingest"); the variants that drop indexes or rows are not things the
//! relay may do as they stand. The corpus is a plain writer connection (`db::open`): SQLite checkpoints inside the
//! commit that crosses 1,000 pages; the checkpoint thread belongs to the server's `Db`, which `--bench ingest`
//! measures over HTTP. Run: `cargo bench -p personkit-store --bench ingest_costs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use personkit_testkit::{alternating_role, temp_db, turn};

const TURNS: usize = 20_000;
const BATCH: usize = 500;

const VARIANTS: &[(&str, &str)] = &[
    ("as shipped", ""),
    (
        // The index migration 0017 replaced by the ranks on the thread (SQLite then keeps it on every insert).
        "with the (thread, rank, role) index of 0016",
        "CREATE INDEX messages_thread_rank ON messages(thread_id, source_rank, role);",
    ),
    (
        "with the position index of 0003 (capture time and hash in every entry)",
        "CREATE INDEX messages_position_order ON messages(thread_id, position_key, captured_at, content_hash);",
    ),
    (
        "with the (thread, capture time) index of 0001",
        "CREATE INDEX messages_thread_captured ON messages(thread_id, captured_at);",
    ),
    (
        // The constraints as 0001, 0011 and 0015 wrote them: an IN list of more than two values is a b-tree SQLite
        // builds each time the constraint is checked.
        "with the IN-list CHECKs of 0001, 0011 and 0015",
        "PRAGMA writable_schema=ON;
         UPDATE sqlite_schema SET sql = replace(replace(sql,
             'CHECK (role = ''user'' OR role = ''assistant'' OR role = ''system'' OR role = ''tool'')',
             'CHECK (role IN (''user'', ''assistant'', ''system'', ''tool''))'),
             'CHECK (source_path = ''dom'' OR source_path = ''network'' OR source_path = ''export''
        OR source_path = ''harvest'')',
             'CHECK (source_path IN (''dom'', ''network'', ''export'', ''harvest''))')
             WHERE name = 'messages';
         UPDATE sqlite_schema SET sql = replace(sql, 'CHECK (kind = ''t'' OR kind = ''m'' OR kind = ''f'')',
             'CHECK (kind IN (''t'', ''m'', ''f''))') WHERE name = 'sync_log';
         PRAGMA writable_schema=RESET;",
    ),
    (
        "without the capture-time and received indexes",
        "DROP INDEX messages_captured; DROP INDEX messages_received;",
    ),
    (
        // Schema surgery on the empty corpus: the column loses UNIQUE, its index goes, and the (thread, hash)
        // index takes the first automatic index's name, as SQLite expects when it reads the schema back.
        "without the unique index on the message id",
        "PRAGMA writable_schema=ON;
         UPDATE sqlite_schema SET sql = replace(sql, 'id            TEXT NOT NULL UNIQUE,', 'id TEXT NOT NULL,')
             WHERE name = 'messages';
         DELETE FROM sqlite_schema WHERE name = 'sqlite_autoindex_messages_1';
         UPDATE sqlite_schema SET name = 'sqlite_autoindex_messages_1' WHERE name = 'sqlite_autoindex_messages_2';
         PRAGMA writable_schema=RESET;",
    ),
    (
        "statement journal in a temporary file (SQLite's default)",
        "PRAGMA temp_store=DEFAULT;",
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

/// Turns/s of one ingest of the turns into a fresh corpus changed by `sql`. With `count_pages` the corpus never
/// checkpoints and the answer is instead the WAL pages each batch's commit wrote (the frames in the log at the end,
/// over the batches): how many pages a batch dirties, which does not drift with the disk.
fn run(sql: &str, tag: &str, count_pages: bool) -> f64 {
    let filler = "The relay keeps every acknowledged turn exactly once; this sentence pads the turn to a \
                  realistic length so that FTS indexing has words to tokenize and the WAL has bytes to sync. ";
    let (_dir, db) = temp_db();
    let mut conn = personkit_store::db::open(&db).unwrap();
    let schema = |conn: &rusqlite::Connection| -> String {
        conn.query_row(
            "SELECT group_concat(sql, ';') FROM sqlite_schema",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    let before = schema(&conn);
    personkit_store::bulk::tune_for_diagnostics(&conn, sql).unwrap();
    // A text edit whose pattern no longer matches the shipped schema would measure the shipped corpus twice.
    assert!(
        !sql.contains("writable_schema") || schema(&conn) != before,
        "the variant's edit matched nothing in the schema: {sql}"
    );
    if count_pages {
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    }
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
    let rate = TURNS as f64 / t.elapsed().as_secs_f64();
    if !count_pages {
        return rate;
    }
    let frames: i64 = conn
        .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))
        .unwrap();
    frames as f64 / (TURNS / BATCH) as f64
}

/// Runs per variant, each beside a run of the unchanged corpus: the ratio reported is the median of the pairs'.
const PAIRS: usize = 3;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    println!(
        "| variant | turns/s | vs as shipped (median of {PAIRS} pairs) | WAL pages per batch of {BATCH} |\n|---|---|---|---|"
    );
    let mut base = Vec::new();
    let base_pages = run("", "pages", true);
    for (i, (name, sql)) in VARIANTS.iter().enumerate().skip(1) {
        let (mut rates, mut ratios) = (Vec::new(), Vec::new());
        for k in 0..PAIRS {
            // The unchanged corpus is measured beside every variant run, so drift hits both alike.
            let b = run("", &format!("base{i}-{k}"), false);
            let v = run(sql, &format!("v{i}-{k}"), false);
            base.push(b);
            rates.push(v);
            ratios.push(v / b);
        }
        let pages = run(sql, &format!("pages{i}"), true);
        println!(
            "| {name} | {:.0} | {:.2} | {pages:.0} |",
            median(rates),
            median(ratios)
        );
    }
    println!(
        "| as shipped (median of {} runs) | {:.0} | 1.00 | {base_pages:.0} |",
        base.len(),
        median(base)
    );
}
