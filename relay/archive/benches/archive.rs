//! Export and snapshot/restore of a 100k-message corpus, each against a plain baseline measured in the same run:
//!
//! - export (Markdown and JSON, every file written) vs reading the same rows with one plain query and writing the
//!   same bytes to the same number of files (`std::fs::write`);
//! - snapshot vs reading the same rows plainly and writing the snapshot's bytes to one file;
//! - restore (read, verify, parse, insert) vs reading the file and inserting the same rows with plain prepared
//!   statements into an empty corpus.
//!
//! `cargo bench -p personkit-archive --bench archive [-- MESSAGES]` (default 100000). Medians of 3 runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufWriter;
use std::path::Path;
use std::time::{Duration, Instant};

use personkit_archive::export::export;
use personkit_archive::record::Record;
use personkit_archive::render::Format;
use personkit_archive::snapshot;
use personkit_shared::wire::Role;
use personkit_store::archive::{self, ExportFilter};
use personkit_store::bulk::{self, BulkMessage};

const PER_THREAD: usize = 100;

fn content(i: usize) -> String {
    match i % 5 {
        0 => format!(
            "How do I handle case {i} in the parser? It fails on nested input and I am not sure why."
        ),
        1 => format!(
            "Here is a version that handles it:\n\n```rust\nfn parse_{i}(input: &str) -> Result<Node, Error> {{\n    let mut p = Parser::new(input);\n    p.expect_open()?;\n    p.nested()\n}}\n```\n\nThe nested call keeps a stack, so depth {i} is fine."
        ),
        2 => format!(
            "| option | cost | notes |\n| --- | --- | --- |\n| a | {i} | cheap |\n| b | 3 | safer |\n\nPick b unless latency matters."
        ),
        3 => format!(
            "[reasoning]\nThe user asks about item {i}; compare both.\n[/reasoning]\n\nBoth work; the second is simpler."
        ),
        _ => format!(
            "Thanks, that worked for item {i}. One more question about the error messages in that module."
        ),
    }
}

fn build(db: &Path, n: usize) {
    personkit_store::db::register_sqlite_vec();
    let mut conn = personkit_store::db::open(db).expect("open");
    let rows: Vec<BulkMessage> = (0..n)
        .map(|i| BulkMessage {
            surface: if i % 3 == 0 {
                "browser-ext:claude"
            } else {
                "browser-ext:chatgpt"
            }
            .into(),
            conversation_id: format!("conv-{}", i / PER_THREAD),
            title: format!("Parser question {} — nested input", i / PER_THREAD),
            role: if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            },
            content: content(i),
            ordinal: (i % PER_THREAD) as u32,
            at: format!(
                "2026-{:02}-{:02}T{:02}:{:02}:00.000Z",
                1 + (i / PER_THREAD) % 12,
                1 + (i / PER_THREAD) % 28,
                (i % PER_THREAD) / 60,
                (i % PER_THREAD) % 60
            ),
            vector: None,
        })
        .collect();
    for (k, chunk) in rows.chunks(20_000).enumerate() {
        bulk::load(
            &mut conn,
            chunk,
            None,
            "bench",
            (k * 20_000) as i64 + 1,
            "2026-11-22T00:00:00.000Z",
        )
        .expect("load");
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed()
            })
            .collect(),
    )
}

/// Every file under `dir` (bytes), for the baseline to write again.
fn read_tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p
                    .strip_prefix(dir)
                    .expect("prefix")
                    .to_string_lossy()
                    .into_owned();
                out.push((rel, std::fs::read(&p).expect("read")));
            }
        }
    }
    out
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = tmp.path().join("corpus.db");
    let t = Instant::now();
    build(&db, n);
    eprintln!("built {n} messages in {:?}", t.elapsed());
    let conn = personkit_store::db::open_read_only(&db).expect("open");
    let runs = 3;
    let mut results = Vec::new();

    for format in [Format::Markdown, Format::Json] {
        let mut k = 0;
        let mut fresh = || {
            k += 1;
            tmp.path().join(format!("export-{}-{k}", format.name()))
        };
        let export_t = time(runs, || {
            export(&conn, &fresh(), format, &ExportFilter::default(), |_, _| {}).expect("export")
        });
        let out = fresh();
        export(&conn, &out, format, &ExportFilter::default(), |_, _| {}).expect("export");
        let unchanged_t = time(runs, || {
            export(&conn, &out, format, &ExportFilter::default(), |_, _| {}).expect("rerun")
        });
        let files = read_tree(&out);
        let bytes: usize = files.iter().map(|(_, b)| b.len()).sum();
        let base_t = time(runs, || {
            let rows = archive::read_plain(&conn, "messages").expect("rows");
            let threads = archive::read_plain(&conn, "threads").expect("threads");
            let dir = fresh();
            for (rel, b) in &files {
                let p = dir.join(rel);
                if let Some(parent) = p.parent() {
                    std::fs::create_dir_all(parent).expect("mkdir");
                }
                std::fs::write(p, b).expect("write");
            }
            (rows.len(), threads.len())
        });
        results.push((
            format!("export {}", format.name()),
            export_t,
            base_t,
            format!(
                "{} files, {} MB; unchanged rerun {:.2} s",
                files.len(),
                bytes / 1_000_000,
                unchanged_t.as_secs_f64()
            ),
        ));
    }

    let key = ed25519_dalek_key();
    let snap = tmp.path().join("snapshot.jsonl");
    let snap_t = time(runs, || {
        let f = std::fs::File::create(&snap).expect("create");
        snapshot::write(&conn, &key, BufWriter::with_capacity(1 << 20, f), |_| {})
            .expect("snapshot")
    });
    let snap_bytes = std::fs::read(&snap).expect("read snapshot");
    let plain = tmp.path().join("plain.bin");
    let snap_base_t = time(runs, || {
        let rows: usize = archive::TABLES
            .iter()
            .map(|t| archive::read_plain(&conn, t.name).expect("rows").len())
            .sum();
        std::fs::write(&plain, &snap_bytes).expect("write");
        rows
    });
    results.push((
        "snapshot".into(),
        snap_t,
        snap_base_t,
        format!("{} MB", snap_bytes.len() / 1_000_000),
    ));

    let trusted = [key.verifying_key()];
    let all_rows: Vec<(usize, Vec<Vec<archive::Value>>)> = archive::TABLES
        .iter()
        .enumerate()
        .map(|(i, t)| (i, archive::read_plain(&conn, t.name).expect("rows")))
        .collect();
    let mut k = 0;
    let mut empty = || {
        k += 1;
        let p = tmp.path().join(format!("restore-{k}.db"));
        personkit_store::db::open(&p).expect("new corpus")
    };
    let mut targets: Vec<_> = (0..runs).map(|_| empty()).collect();
    let restore_t = median(
        targets
            .iter_mut()
            .map(|target| {
                let t = Instant::now();
                let bytes = std::fs::read(&snap).expect("read");
                let v = snapshot::read_verified(&bytes, &trusted).expect("verify");
                archive::restore(target, &v.records, 2, |_| {}).expect("restore");
                t.elapsed()
            })
            .collect(),
    );
    let mut targets: Vec<_> = (0..runs).map(|_| empty()).collect();
    let restore_base_t = median(
        targets
            .iter_mut()
            .map(|target| {
                let t = Instant::now();
                let bytes = std::fs::read(&snap).expect("read");
                std::hint::black_box(bytes.len());
                let records: Vec<Record> = all_rows
                    .iter()
                    .flat_map(|(i, rows)| {
                        rows.iter().map(|r| Record {
                            table: *i,
                            values: r.clone(),
                        })
                    })
                    .collect();
                archive::insert_plain(target, &records).expect("insert");
                t.elapsed()
            })
            .collect(),
    );
    results.push(("restore".into(), restore_t, restore_base_t, String::new()));

    println!(
        "archive benchmark: {n} messages in {} threads",
        n.div_ceil(PER_THREAD)
    );
    println!(
        "{:<18} {:>10} {:>10} {:>7}  notes",
        "what", "time s", "plain s", "ratio"
    );
    for (what, t, b, notes) in &results {
        println!(
            "{what:<18} {:>10.2} {:>10.2} {:>6.2}x  {notes}",
            t.as_secs_f64(),
            b.as_secs_f64(),
            t.as_secs_f64() / b.as_secs_f64()
        );
    }
}

fn ed25519_dalek_key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[42; 32])
}
