//! What one capture call costs in the extension's worker as the user's history grows: the worker's state is
//! filled first (N remembered turns, plus 500 queued while no relay is paired) through its bench hook
//! `__personkitBenchState` (extension/TESTING.md), then one 4 KB turn is captured through the worker's own path —
//! the core call and the persistence to IndexedDB — timed inside the worker. Reported per row as the median of
//! `--calls` calls and as a ratio against the call with empty state measured in the same run (same browser, same
//! worker).
//!
//! `cargo bench -p personkit-e2e --bench capture_state [-- --calls 20] [--dist DIR]` (needs
//! `scripts/build-extension` first; `--dist` names another unpacked build, e.g. one of an earlier commit).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use personkit_e2e::chromium::{Chromium, LaunchOptions, Tab};
use personkit_e2e::server::FixtureServer;

const QUEUED: usize = 500;

fn worker(browser: &Chromium) -> Tab {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match browser.attach_worker() {
            Ok(w) => return w,
            Err(e) if Instant::now() > deadline => panic!("no extension worker: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Fills the state, then the median ms of `calls` captures (call numbers from `first`), and the ms the worker
/// took to load the filled state when the hook reports it.
fn row(
    w: &Tab,
    remembered: usize,
    queued: usize,
    calls: usize,
    first: usize,
) -> (f64, Option<f64>) {
    let filled = w
        .eval(&format!(
            "__personkitBenchState.fill({remembered}, {queued})"
        ))
        .unwrap();
    assert_eq!(
        filled["queued"], queued,
        "the queue was not filled: {filled}"
    );
    let mut ms: Vec<f64> = (0..calls)
        .map(|c| {
            w.eval(&format!("__personkitBenchState.capture({})", first + c))
                .unwrap()
                .as_f64()
                .unwrap()
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    (ms[ms.len() / 2], filled["loadMs"].as_f64())
}

fn main() {
    let calls: usize = std::env::args()
        .skip_while(|a| a != "--calls")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let dist = std::env::args()
        .skip_while(|a| a != "--dist")
        .nth(1)
        .map_or_else(|| personkit_e2e::dist_dir("chrome").unwrap(), Into::into);
    let server = FixtureServer::start().unwrap();
    let browser = Chromium::launch(&LaunchOptions {
        extension: Some(dist),
        fixture_port: server.port,
    })
    .unwrap();
    let w = worker(&browser);
    // The target can be attached before the worker's script ran.
    w.wait_for(
        "typeof __personkitBenchState === 'object' ? true : null",
        Duration::from_secs(20),
    )
    .unwrap();
    w.eval("chrome.storage.session.set({testFastFlush: true}).then(() => true)")
        .unwrap();
    // The worker picks the flag up from its storage listener.
    w.wait_for(
        "__personkitBenchState.fill(0, 0).then(() => true, () => null)",
        Duration::from_secs(10),
    )
    .unwrap();
    // Warm-up: the core's first calls (regex compilation, JIT).
    row(&w, 0, 0, calls, 0);
    let (base, _) = row(&w, 0, 0, calls, 1_000);
    println!(
        "capture_state (Chromium worker, one 4 KB turn per call, core call + IndexedDB, median of {calls}):"
    );
    println!("  empty state: {base:.2} ms  1.00x");
    for (i, n) in [0usize, 1_000, 10_000, 20_000].into_iter().enumerate() {
        let (ms, load) = row(&w, n, QUEUED, calls, 2_000 + i * 1_000);
        let load = load.map_or(String::new(), |l| format!("  (state loaded in {l:.0} ms)"));
        println!(
            "  {n:>6} remembered + {QUEUED} queued: {ms:.2} ms  {:.2}x{load}",
            ms / base
        );
    }
}
