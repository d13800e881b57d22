//! What one capture call costs as the user's history grows, natively: the worker's state is filled first (N
//! remembered turns in the dedupe set, plus 500 turns queued while the relay is away) and loaded into a
//! `capture::api::Core` from records as the worker stores them, then one 4 KB turn is captured through
//! `Core::capture`, the call the extension's worker makes for every read of a page. Reported per row as the median
//! of `CALLS` calls and as a ratio against the call with empty state (nothing remembered, nothing queued),
//! measured in the same run; also the time to load the filled state (once per worker start). Each call adds its
//! turn to the state, so a row ends `CALLS` turns above its N.
//! Run: `cargo bench -p personkit-shared --bench capture_state`. The in-browser figure comes from
//! `cargo bench -p personkit-e2e --bench capture_state` (the worker's `__personkitBenchState` hook).
#![allow(clippy::expect_used)]

use std::time::Instant;

use personkit_shared::capture::api::Core;
use serde_json::{Value, json};

mod common;
use common::{median, turn};

const NOW: u64 = 1_795_341_600_000;
const CALLS: usize = 40;
const QUEUED: usize = 500;

fn settings() -> Value {
    json!({"enabled": {"browser-ext:chatgpt": true}})
}

/// A capture of one turn at `url`.
fn input(url: &str, text: &str, key: &str) -> String {
    json!({
        "url": url,
        "turns": [{"role": "assistant", "text": text, "message_key": key}],
        "device_id": "bench",
        "app_version": "bench",
        "now_ms": NOW,
        "settings": settings(),
    })
    .to_string()
}

/// The stored records of a queue after `QUEUED` 4 KB turns of another conversation were captured and not
/// delivered: `(queue_meta, items)`.
fn filled_queue() -> (Value, Value) {
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
    let mut scratch = Core::load("{}").expect("empty core");
    let out: Value = serde_json::from_str(&scratch.capture(&input, None).expect("fill the queue"))
        .expect("capture output");
    assert_eq!(
        out["queued"], QUEUED,
        "the queue was not filled: {}",
        out["queued"]
    );
    (
        out["changes"]["queue_meta"].clone(),
        out["changes"]["items_put"].clone(),
    )
}

/// Dedupe key records of `n` remembered turns (keys as the core makes them: 20 hex digits), as the worker reads
/// them: keys in key order, and their sequence numbers.
fn filled_seen(n: usize) -> (Value, Value) {
    let mut keys: Vec<(String, usize)> = (0..n)
        .map(|i| {
            let h = personkit_shared::content_hash(
                &format!("remembered {i}"),
                personkit_shared::wire::Role::User,
            );
            (h[h.len() - 20..].to_owned(), i)
        })
        .collect();
    keys.sort();
    let (k, s): (Vec<String>, Vec<usize>) = keys.into_iter().unzip();
    (json!(k), json!(s))
}

/// Median ms of one capture call.
fn time_calls(core: &mut Core, row: usize) -> f64 {
    let mut ms = Vec::with_capacity(CALLS);
    for c in 0..CALLS {
        let text = turn(row * 1000 + c);
        let input = input("https://chatgpt.com/c/bench", &text, &format!("k{row}-{c}"));
        let t = Instant::now();
        let out = core
            .capture(&input, None)
            .unwrap_or_else(|e| panic!("capture failed: {e}"));
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(
            out.contains("\"queued\":1"),
            "the bench turn was not queued"
        );
    }
    median(&mut ms)
}

fn main() {
    let (meta, items) = filled_queue();
    let mut empty = Core::load("{}").expect("empty core");
    // Warm-up: the redactor, the registry.
    time_calls(&mut empty, 0);
    let mut empty = Core::load("{}").expect("empty core");
    let base = time_calls(&mut empty, 1);
    println!("capture_state (native, one 4 KB turn per call, median of {CALLS} calls):");
    println!("  empty state: {base:.3} ms  1.00x");
    for (row, n) in [0usize, 1_000, 10_000, 20_000].into_iter().enumerate() {
        let (keys, seqs) = filled_seen(n);
        let records =
            json!({"queue_meta": meta, "items": items, "seen_keys": keys, "seen_seqs": seqs})
                .to_string();
        let t = Instant::now();
        let mut core = Core::load(&records).expect("load the filled state");
        let load = t.elapsed().as_secs_f64() * 1e3;
        let ms = time_calls(&mut core, row + 2);
        println!(
            "  {n:>6} remembered + {QUEUED} queued: {ms:.3} ms  {:.2}x  (state loaded in {load:.1} ms)",
            ms / base
        );
    }
}
