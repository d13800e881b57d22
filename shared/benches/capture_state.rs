//! What one capture call costs as the user's history grows, natively: the worker's state is filled first (N
//! remembered turns in the dedupe set, plus 500 turns queued while the relay is away), then one 4 KB turn is
//! captured through the core's capture entry point, the call the extension's worker makes for every read of a
//! page. Reported per row as the median of `CALLS` calls and as a ratio against the call with empty state (nothing
//! remembered, nothing queued), measured in the same run. Each timed call starts from the same filled state, so
//! N stays what the row says.
//! Run: `cargo bench -p personkit-shared --bench capture_state`. The in-browser figure comes from
//! `cargo bench -p personkit-e2e --bench capture_state` (the worker's `__personkitBenchState` hook).

use std::time::Instant;

use personkit_shared::capture::api;
use serde_json::{Value, json};

mod common;
use common::{median, turn};

const NOW: u64 = 1_795_341_600_000;
const CALLS: usize = 40;
const QUEUED: usize = 500;

fn settings() -> Value {
    json!({"enabled": {"browser-ext:chatgpt": true}})
}

/// A capture of one turn at `url`, with the given state.
fn input(url: &str, text: &str, key: &str, queue: &Value, seen: &Value) -> String {
    json!({
        "url": url,
        "turns": [{"role": "assistant", "text": text, "message_key": key}],
        "device_id": "bench",
        "app_version": "bench",
        "now_ms": NOW,
        "settings": settings(),
        "queue": queue,
        "seen": seen,
    })
    .to_string()
}

/// The queue after `QUEUED` 4 KB turns of another conversation were captured and not delivered.
fn filled_queue() -> Value {
    let turns: Vec<Value> = (0..QUEUED)
        .map(|i| json!({"role": "assistant", "text": turn(1_000_000 + i), "message_key": format!("q{i}")}))
        .collect();
    let input = json!({
        "url": "https://chatgpt.com/c/bench-queued",
        "turns": turns,
        "device_id": "bench",
        "app_version": "bench",
        "now_ms": NOW,
        "settings": settings(),
    })
    .to_string();
    let out: Value = serde_json::from_str(&api::capture(&input).expect("fill the queue"))
        .expect("capture output");
    assert_eq!(out["queued"], QUEUED, "the queue was not filled: {}", out["queued"]);
    out["queue"].clone()
}

/// A dedupe set remembering `n` turns (keys as the core makes them: 20 hex digits of a digest).
fn filled_seen(n: usize) -> Value {
    let keys: Vec<String> = (0..n)
        .map(|i| {
            let h = personkit_shared::content_hash(&format!("remembered {i}"), personkit_shared::wire::Role::User);
            h[h.len() - 20..].to_owned()
        })
        .collect();
    json!({"capacity": 20_000, "keys": keys})
}

/// Median ms of one capture call with this state.
fn time_calls(row: usize, queue: &Value, seen: &Value) -> f64 {
    let mut ms = Vec::with_capacity(CALLS);
    for c in 0..CALLS {
        let text = turn(row * 1000 + c);
        let input = input("https://chatgpt.com/c/bench", &text, &format!("k{row}-{c}"), queue, seen);
        let t = Instant::now();
        let out = api::capture(&input).unwrap_or_else(|e| panic!("capture failed: {e}"));
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(out.contains("\"queued\":1"), "the bench turn was not queued");
    }
    median(&mut ms)
}

fn main() {
    let queue = filled_queue();
    let empty = json!({});
    // Warm-up: the redactor, the registry.
    time_calls(0, &empty, &empty);
    let base = time_calls(1, &empty, &empty);
    println!("capture_state (native, one 4 KB turn per call, median of {CALLS} calls):");
    println!("  empty state: {base:.3} ms  1.00x");
    for (row, n) in [0usize, 1_000, 10_000, 20_000].into_iter().enumerate() {
        let seen = filled_seen(n);
        let ms = time_calls(row + 2, &queue, &seen);
        println!(
            "  {n:>6} remembered + {QUEUED} queued: {ms:.3} ms  {:.2}x",
            ms / base
        );
    }
}
