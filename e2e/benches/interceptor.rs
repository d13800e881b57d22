//! What the page-world interceptor costs the page: the time from a page's `fetch` of a 1 MB streamed ChatGPT reply
//! to its last chunk read, in Chromium with the built extension (the interceptor tees the response; the worker
//! parses it) against the same Chromium without the extension, in the same run. The fixture server sends the reply
//! in 16 KiB writes as fast as the loopback allows — the worst case for the tee: a real reply trickles in over
//! seconds, which hides any per-chunk cost.
//!
//! `cargo bench -p personkit-e2e --bench interceptor [-- --rounds 30]` (needs `scripts/build-extension` first).
//! Rounds alternate the two browsers; the ratio is the median of per-round ratios (with / without).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use personkit_e2e::chromium::{Chromium, LaunchOptions, Tab};
use personkit_e2e::server::FixtureServer;

const CID: &str = "6740a3f2-1c9e-8001-b2a4-3f0e8d7c1a55";

/// A ChatGPT delta-v1 stream of about `bytes` bytes: one answer message appended in token-sized deltas.
fn stream(bytes: usize) -> String {
    let mut s = String::from("event: delta_encoding\ndata: \"v1\"\n\n");
    s.push_str(&format!(
        "event: delta\ndata: {{\"p\":\"\",\"o\":\"add\",\"v\":{{\"message\":{{\"id\":\"b-2\",\"author\":{{\"role\":\"assistant\"}},\
         \"content\":{{\"content_type\":\"text\",\"parts\":[\"\"]}},\"status\":\"in_progress\",\"metadata\":{{\"parent_id\":\"b-1\"}},\
         \"recipient\":\"all\",\"channel\":\"final\"}},\"conversation_id\":\"{CID}\"}},\"c\":0}}\n\n"
    ));
    s.push_str("event: delta\ndata: {\"p\":\"/message/content/parts/0\",\"o\":\"append\",\"v\":\"Start \"}\n\n");
    let words = [
        "Größe ",
        "世界 ",
        "token ",
        "`code` ",
        "| a | b |\\n",
        "🙂 ",
    ];
    let mut i = 0;
    while s.len() < bytes {
        s.push_str(&format!(
            "event: delta\ndata: {{\"v\":\"{}\"}}\n\n",
            words[i % words.len()]
        ));
        i += 1;
    }
    s.push_str("event: delta\ndata: {\"p\":\"/message/status\",\"o\":\"replace\",\"v\":\"finished_successfully\"}\n\n");
    s.push_str("event: delta\ndata: {\"type\":\"message_stream_complete\"}\n\ndata: [DONE]\n\n");
    s
}

const READ: &str = "(async () => { const t0 = performance.now(); \
  const r = await fetch('/backend-api/f/conversation', {method: 'POST', body: '{}'}); \
  const rd = r.body.getReader(); let n = 0; \
  for (;;) { const {done, value} = await rd.read(); if (done) break; n += value.length; } \
  return [performance.now() - t0, n]; })()";

fn time_read(tab: &Tab) -> (f64, u64) {
    // Replies do not arrive back to back: the previous body's hand-over to the worker (at the page's idle time) is
    // done before the next reply starts.
    std::thread::sleep(Duration::from_millis(400));
    let v = tab.eval(READ).unwrap();
    (v[0].as_f64().unwrap(), v[1].as_u64().unwrap())
}

fn main() {
    let rounds: usize = std::env::args()
        .skip_while(|a| a != "--rounds")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let dir = tempfile::tempdir().unwrap();
    let body = stream(1024 * 1024);
    let file = dir.path().join("reply.sse");
    std::fs::write(&file, &body).unwrap();
    let page = dir.path().join("page.html");
    std::fs::write(&page, "<!doctype html><title>ChatGPT</title><p>bench</p>").unwrap();

    let server = FixtureServer::start().unwrap();
    server.route("/backend-api/f/conversation", file);
    server.route(&format!("/c/{CID}"), page);
    let url = format!("https://chatgpt.com/c/{CID}");
    let with_ext = Chromium::launch(&LaunchOptions {
        extension: Some(personkit_e2e::dist_dir("chrome").unwrap()),
        fixture_port: server.port,
    })
    .unwrap();
    let without = Chromium::launch(&LaunchOptions {
        extension: None,
        fixture_port: server.port,
    })
    .unwrap();
    let a = with_ext.open_tab(&url).unwrap();
    let b = without.open_tab(&url).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    // The interceptor is in the page: fetch is our wrapper.
    assert_eq!(
        a.eval("window.fetch.toString().includes('[native code]')")
            .unwrap(),
        serde_json::json!(false),
        "the extension's page-world script did not run"
    );
    // Warm-up (connections, the worker's first parse, the second wasm module's instantiation).
    for _ in 0..3 {
        time_read(&a);
        time_read(&b);
    }
    let mut ratios = Vec::new();
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let (x, y) = if r % 2 == 0 {
            let x = time_read(&a);
            (x, time_read(&b))
        } else {
            let y = time_read(&b);
            (time_read(&a), y)
        };
        assert_eq!(x.1, body.len() as u64, "the page got every byte");
        assert_eq!(y.1, body.len() as u64);
        ta.push(x.0);
        tb.push(y.0);
        ratios.push(x.0 / y.0);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "1 MB streamed reply ({} bytes, 16 KiB writes), {rounds} rounds: to last chunk with interceptor {:.1} ms, \
         without {:.1} ms (medians); median per-round ratio {:.3}x",
        body.len(),
        median(&mut ta),
        median(&mut tb),
        median(&mut ratios)
    );
}
