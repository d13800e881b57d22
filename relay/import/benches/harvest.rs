//! Harvest of a generated Claude Code project folder against `personkit import` of the same turns as a JSON
//! export, in the same run.
//!
//! `cargo bench -p personkit-import --bench harvest -- [MB]` (default 20): writes a `~/.claude/projects/<project>/`
//! folder of about MB megabytes of session files (sessions of 40 lines: prompts, answers with reasoning, tool calls
//! and their results — the record shapes of `src/harvest/claude_code.rs`), harvests it with the library into a
//! fresh corpus (peak RSS of this process over the harvest alone, its high-water mark reset first), then imports a
//! Claude `conversations.json` holding the same turns (one conversation per session) into another fresh corpus.
//! Prints turns/s of both, their ratio, and each one's peak RSS.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufWriter, Write};
use std::time::Instant;

use personkit_import::harvest::{self, Config, Source};
use personkit_import::{Options, import_path};
use personkit_testkit::{Rng, peak_rss_kib, reset_peak_rss};
use serde_json::{Value, json};

const WORDS: &[&str] = &[
    "the", "parser", "returns", "Zürich", "données", "数据", "function", "stream", "memory",
    "branch", "edit", "✓", "model", "answer", "question", "file", "test", "cargo", "error", "line",
];

fn sentence(rng: &mut Rng, n: usize) -> String {
    (0..n)
        .map(|_| WORDS[rng.below(WORDS.len())])
        .collect::<Vec<_>>()
        .join(" ")
}

fn stamp(s: usize, i: usize) -> String {
    let t =
        time::OffsetDateTime::from_unix_timestamp(1_760_000_000 + (s * 100 + i) as i64).unwrap();
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// One session: its transcript lines, and the same turns as a Claude export conversation.
fn session(rng: &mut Rng, s: usize) -> (String, Value) {
    let sid = format!("00000000-0000-4000-8000-{s:012}");
    let mut lines = Vec::new();
    let mut messages = Vec::new();
    let mut parent: Option<String> = None;
    for i in 0..40usize {
        let uuid = format!("{sid}-{i}");
        let user = i % 2 == 0;
        let text = if user {
            let n = 15 + rng.below(40);
            sentence(rng, n)
        } else {
            let n = 60 + rng.below(120);
            format!(
                "{}\n\n```rust\nfn f{i}() -> u32 {{ {i} }}\n```",
                sentence(rng, n)
            )
        };
        let content = if user {
            json!(text)
        } else {
            let mut blocks = vec![
                json!({"type": "thinking", "thinking": sentence(rng, 30)}),
                json!({"type": "text", "text": text}),
            ];
            if i % 4 == 1 {
                blocks.push(
                    json!({"type": "tool_use", "id": format!("t{i}"), "name": "Read",
                    "input": {"file_path": format!("/src/f{i}.rs")}}),
                );
            }
            json!(blocks)
        };
        lines.push(
            json!({"type": if user { "user" } else { "assistant" }, "uuid": uuid, "parentUuid": parent,
                "sessionId": sid, "timestamp": stamp(s, i), "isSidechain": false, "cwd": "/src",
                "message": {"role": if user { "user" } else { "assistant" }, "content": content}})
            .to_string(),
        );
        messages.push(
            json!({"uuid": uuid, "text": text, "sender": if user { "human" } else { "assistant" },
            "created_at": stamp(s, i), "updated_at": stamp(s, i),
            "content": [{"type": "text", "text": text}], "attachments": [], "files": []}),
        );
        parent = Some(uuid);
    }
    let conv = json!({"uuid": sid, "name": format!("Session {s}"), "created_at": stamp(s, 0),
        "updated_at": stamp(s, 39), "chat_messages": messages});
    (lines.join("\n") + "\n", conv)
}

fn main() {
    let mb: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let project = home.join(".claude/projects/-src-bench");
    std::fs::create_dir_all(&project).unwrap();
    let export = dir.path().join("conversations.json");
    let mut rng = Rng::new(7);
    let (mut written, mut sessions) = (0u64, 0usize);
    {
        let mut w = BufWriter::new(std::fs::File::create(&export).unwrap());
        w.write_all(b"[").unwrap();
        while written < mb * 1024 * 1024 {
            let (transcript, conv) = session(&mut rng, sessions);
            let sid = conv["uuid"].as_str().unwrap().to_owned();
            std::fs::write(project.join(format!("{sid}.jsonl")), &transcript).unwrap();
            written += transcript.len() as u64;
            if sessions > 0 {
                w.write_all(b",").unwrap();
            }
            w.write_all(&serde_json::to_vec(&conv).unwrap()).unwrap();
            sessions += 1;
        }
        w.write_all(b"]").unwrap();
    }
    println!(
        "generated {sessions} sessions, {:.1} MB of transcripts",
        written as f64 / 1e6
    );

    let mut conn = personkit_store::db::open(&dir.path().join("harvest.db")).unwrap();
    reset_peak_rss();
    let t = Instant::now();
    let r = harvest::run(
        &mut conn,
        &Config::new(home),
        &[Source::ClaudeCode],
        &Options::default(),
        time::OffsetDateTime::now_utc(),
        &mut |_| {},
    )
    .unwrap();
    let harvest_secs = t.elapsed().as_secs_f64();
    let harvest_peak = peak_rss_kib();
    drop(conn);
    let s = &r.sources[0];
    assert!(s.problems.is_empty() && s.records.silent == 0, "{s:?}");
    let turns = s.stored;
    let harvest_rate = turns as f64 / harvest_secs;
    println!(
        "harvest: {turns} turns in {harvest_secs:.2}s = {harvest_rate:.0} turns/s, {:.1} MB/s; peak RSS {:.1} MB",
        written as f64 / 1e6 / harvest_secs,
        harvest_peak as f64 / 1024.0
    );

    let mut conn = personkit_store::db::open(&dir.path().join("import.db")).unwrap();
    reset_peak_rss();
    let t = Instant::now();
    let i = import_path(
        &mut conn,
        &export,
        &Options::default(),
        time::OffsetDateTime::now_utc(),
        &mut |_| {},
    )
    .unwrap();
    let import_secs = t.elapsed().as_secs_f64();
    let import_peak = peak_rss_kib();
    assert!(i.problems.is_empty(), "{:?}", i.problems);
    assert_eq!(i.stored, turns, "both paths store the same turns");
    let import_rate = i.stored as f64 / import_secs;
    println!(
        "import: {} turns in {import_secs:.2}s = {import_rate:.0} turns/s; peak RSS {:.1} MB",
        i.stored,
        import_peak as f64 / 1024.0
    );
    println!(
        "RESULT harvest/import throughput ratio {:.2}x; harvest peak RSS {:.1} MB, import {:.1} MB, for {:.1} MB of transcripts",
        harvest_rate / import_rate,
        harvest_peak as f64 / 1024.0,
        import_peak as f64 / 1024.0,
        written as f64 / 1e6
    );
}
