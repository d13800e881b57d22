//! Import of a generated ChatGPT export against HTTP ingest of the same turns, in the same run.
//!
//! `cargo bench -p personkit-import --bench import -- [MB]` (default 20): writes a `conversations.json` of about
//! MB megabytes (conversations of 40 turns with a regenerated answer each, unicode and code), imports it with
//! the library into a fresh corpus (peak RSS of this process measured over the import alone, by resetting the
//! kernel's high-water mark first), then sends the same observations to a real relay over HTTP in batches of
//! 500 into another fresh corpus. Prints turns/s of both, their ratio, and the import's peak RSS.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufWriter, Write};
use std::time::Instant;

use personkit_import::{Options, import_path};
use personkit_testkit::{Relay, Rng, build_bin, peak_rss_kib, reset_peak_rss};
use serde_json::{Value, json};

const WORDS: &[&str] = &[
    "the",
    "list",
    "reverse",
    "Zürich",
    "données",
    "数据",
    "function",
    "returns",
    "value",
    "because",
    "memory",
    "stream",
    "parser",
    "conversation",
    "branch",
    "edit",
    "✓",
    "model",
    "answer",
    "question",
];

fn sentence(rng: &mut Rng, n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(WORDS[rng.below(WORDS.len())]);
    }
    s
}

fn conversation(rng: &mut Rng, c: usize) -> Value {
    let id = format!("bench-{c:08}");
    let mut mapping = serde_json::Map::new();
    let root = format!("{id}-root");
    let mut parent = root.clone();
    let mut children_of_root = Vec::new();
    let t0 = 1_600_000_000.0 + c as f64 * 1000.0;
    let mut nodes: Vec<(String, Value)> = Vec::new();
    for i in 0..40usize {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let mut ids = vec![format!("{id}-{i}")];
        if i == 21 {
            // A regenerated answer: a second child of the same parent, not on the shown branch.
            ids.insert(0, format!("{id}-{i}-old"));
        }
        for (k, mid) in ids.iter().enumerate() {
            let text = if role == "assistant" && i % 6 == 1 {
                format!(
                    "{}\n\n```rust\nfn f{i}() -> u32 {{ {i} }}\n```",
                    sentence(rng, 60)
                )
            } else {
                let n = 25 + rng.below(80);
                sentence(rng, n)
            };
            let last = k + 1 == ids.len();
            nodes.push((
                mid.clone(),
                json!({"id": mid, "parent": parent, "children": [],
                       "message": {"id": mid, "author": {"role": role, "name": null, "metadata": {}},
                                   "create_time": t0 + i as f64 + k as f64 * 0.5, "update_time": null,
                                   "content": {"content_type": "text", "parts": [text]},
                                   "status": "finished_successfully", "end_turn": true, "weight": 1.0,
                                   "metadata": {}, "recipient": "all", "channel": null}}),
            ));
            if last {
                if i == 0 {
                    children_of_root.push(mid.clone());
                }
                parent = mid.clone();
            }
        }
    }
    mapping.insert(
        root.clone(),
        json!({"id": root, "message": null, "parent": null, "children": children_of_root}),
    );
    for (k, v) in nodes {
        mapping.insert(k, v);
    }
    json!({"title": format!("Bench {c}"), "create_time": t0, "update_time": t0 + 40.0,
           "mapping": mapping, "current_node": parent, "conversation_id": id, "id": id})
}

fn main() {
    let mb: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("conversations.json");
    let mut rng = Rng::new(11);
    let mut conversations = 0usize;
    {
        let mut w = BufWriter::new(std::fs::File::create(&file).unwrap());
        w.write_all(b"[").unwrap();
        let mut written = 1u64;
        while written < mb * 1024 * 1024 {
            if conversations > 0 {
                w.write_all(b",").unwrap();
            }
            let bytes = serde_json::to_vec(&conversation(&mut rng, conversations)).unwrap();
            written += bytes.len() as u64 + 1;
            w.write_all(&bytes).unwrap();
            conversations += 1;
        }
        w.write_all(b"]").unwrap();
    }
    let size = std::fs::metadata(&file).unwrap().len();
    println!(
        "generated {} conversations, {:.1} MB",
        conversations,
        size as f64 / 1e6
    );

    // Import through the library.
    let db = dir.path().join("import.db");
    let mut conn = personkit_store::db::open(&db).unwrap();
    reset_peak_rss();
    let rss_before = peak_rss_kib();
    let t = Instant::now();
    let s = import_path(
        &mut conn,
        &file,
        &Options::default(),
        time::OffsetDateTime::now_utc(),
        &mut |_| {},
    )
    .unwrap();
    let import_secs = t.elapsed().as_secs_f64();
    let import_peak = peak_rss_kib();
    drop(conn);
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    let turns = s.stored;
    let import_rate = turns as f64 / import_secs;
    println!(
        "import: {turns} turns in {import_secs:.2}s = {import_rate:.0} turns/s, {:.1} MB/s; peak RSS {:.1} MB (before {:.1} MB)",
        size as f64 / 1e6 / import_secs,
        import_peak as f64 / 1024.0,
        rss_before as f64 / 1024.0
    );

    // The same observations over HTTP into a real relay (release binary, fresh corpus).
    build_bin(true);
    let http_db = dir.path().join("http.db");
    let relay = Relay::start(&http_db, &[]);
    let token = relay.pair_printed("bench");
    let redactor = personkit_shared::capture::Redactor::builtin();
    let client = personkit_shared::wire::ClientInfo {
        app_version: "bench".into(),
        device_id: "bench".into(),
    };
    let mut items: Vec<Value> = Vec::new();
    let text = std::fs::read(&file).unwrap();
    let all: Vec<Value> = serde_json::from_slice(&text).unwrap();
    drop(text);
    for v in &all {
        let conv = personkit_import::formats::read(personkit_import::Format::ChatGpt, v).unwrap();
        let c = personkit_import::convert::convert(
            &conv,
            personkit_shared::identity::Path::Export,
            &redactor,
            &client,
        );
        items.extend(
            c.observations
                .iter()
                .map(|o| serde_json::to_value(o).unwrap()),
        );
    }
    drop(all);
    let t = Instant::now();
    let mut stored = 0u64;
    for chunk in items.chunks(500) {
        let r = relay.http.send_batch(&token, chunk);
        stored += r["stored"].as_u64().unwrap();
    }
    let http_secs = t.elapsed().as_secs_f64();
    assert_eq!(stored, turns, "both paths store the same turns");
    let http_rate = stored as f64 / http_secs;
    println!("http ingest: {stored} turns in {http_secs:.2}s = {http_rate:.0} turns/s");
    println!(
        "RESULT import/http throughput ratio {:.2}x; import peak RSS {:.1} MB for a {:.1} MB file",
        import_rate / http_rate,
        import_peak as f64 / 1024.0,
        size as f64 / 1e6
    );
}
