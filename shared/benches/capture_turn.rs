//! Per-turn cost of the capture core, natively: normalise + redact + hash + dedupe + enqueue of a 4 KB turn
//! through `capture::api::Core::capture` (the same entry point the extension's worker calls through WASM), reported as
//! a ratio against a baseline measured in the same run (the content hash of the same text alone).
//! Run: `cargo bench -p personkit-shared --bench capture_turn`. The in-browser figure comes from the worker's
//! `__personkitBench(n)` hook (extension/TESTING.md) on the same input.

use std::time::Instant;

use personkit_shared::capture::api::Core;
use personkit_shared::wire::Role;

mod common;
use common::turn;

fn main() {
    let n: usize = std::env::var("BENCH_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let texts: Vec<String> = (0..n).map(turn).collect();

    let t = Instant::now();
    let mut sink = 0usize;
    for text in &texts {
        sink += personkit_shared::content_hash(text, Role::Assistant).len();
    }
    let baseline = t.elapsed().as_secs_f64() / n as f64;

    // One core, as the worker keeps it; each call adds its turn (n turns stay far below every bound).
    let mut core = Core::load("{}").unwrap_or_else(|e| panic!("empty core: {e}"));
    let t = Instant::now();
    for (i, text) in texts.iter().enumerate() {
        let input = serde_json::json!({
            "url": "https://chatgpt.com/c/bench",
            "turns": [{"role": "assistant", "text": text, "message_key": format!("k{i}")}],
            "device_id": "bench",
            "app_version": "bench",
            "now_ms": 1_795_341_600_000_u64,
            "settings": {"enabled": {"browser-ext:chatgpt": true}},
        })
        .to_string();
        let out = core
            .capture(&input, None)
            .unwrap_or_else(|e| panic!("capture failed: {e}"));
        if i == 0 {
            assert!(
                out.contains("\"queued\":1"),
                "the bench turn was not queued: {out}"
            );
        }
        sink += out.len();
    }
    let core = t.elapsed().as_secs_f64() / n as f64;
    println!(
        "capture_turn (4 KB, native): {:.1} us/turn; baseline content_hash {:.1} us/turn; ratio {:.1}x  [n={n}, sink={sink}]",
        core * 1e6,
        baseline * 1e6,
        core / baseline
    );
}
