//! Hostile query text against every search entry point of a real relay — `GET /v1/query`, the dashboard's search,
//! MCP `search` over Streamable HTTP and over stdio (`personkit mcp`), and `personkit corpus query` — and a relay
//! told to stop while a request is still arriving. Each answer must come within a bound (a correctness bound on
//! runaway work, far above what a query costs; timings belong to the benchmarks) as a result or a clear refusal,
//! never a 5xx; the relay must still answer afterwards, and exit within its stop deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::time::{Duration, Instant};

use personkit_shared::wire::Role;
use personkit_testkit::{Relay, Rng, temp_db, turn};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

/// What one search may take here, hostile or not, before the test calls it runaway work.
const BOUND: Duration = Duration::from_secs(15);

/// Query texts a hostile caller sends: huge, many-termed, FTS5 syntax, control characters, random bytes.
fn hostile_queries() -> Vec<(String, String)> {
    let mut qs: Vec<(String, String)> = vec![
        (
            "100k words".into(),
            (0..100_000).map(|i| format!("w{i} ")).collect(),
        ),
        (
            "50k prefix terms".into(),
            (0..50_000)
                .map(|i| format!("t{i}*"))
                .collect::<Vec<_>>()
                .join(" OR "),
        ),
        (
            "128 prefix terms".into(),
            (0..128).map(|i| format!("p{i}* ")).collect(),
        ),
        ("one 2000-letter word".into(), "x".repeat(2_000)),
        (
            "FTS5 syntax".into(),
            "NEAR(\"a\" \"b\", 1) content:x ^y -z AND OR NOT ( \" * {a b}: col".into(),
        ),
        (
            "quotes and NUL".into(),
            "\"\"\"\u{0}\u{1}'; DROP TABLE messages; --".into(),
        ),
        (
            "unicode".into(),
            "\u{202e}ﷺ 🦀🦀 e\u{301}\u{301}\u{301} 漢字 \u{feff}".repeat(20),
        ),
        ("only stopwords".into(), "the a of and to in ".repeat(50)),
    ];
    let mut rng = Rng::new(29);
    let alphabet: Vec<char> = "ab*\"():^-+ \u{0}éß漢🦀ORANDNEAR\t\n".chars().collect();
    for i in 0..6 {
        let len = 1 + rng.below(1_500);
        let s: String = (0..len)
            .map(|_| alphabet[rng.below(alphabet.len())])
            .collect();
        qs.push((format!("random {i}"), s));
    }
    qs
}

fn relay_with_corpus() -> (tempfile::TempDir, Relay, String) {
    let (dir, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let token = relay.pair_printed("laptop");
    let mut items = Vec::new();
    for i in 0..40 {
        items.push(turn(
            "browser-ext:chatgpt",
            &format!("c{}", i / 4),
            if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            },
            &format!("turn {i} about p{i} w{i} t{i} borrow checker lifetimes and a rust crate"),
            Some(i % 4),
        ));
    }
    let r = relay.http.send_batch(&token, &items);
    assert_eq!(r["stored"], 40, "{r}");
    (dir, relay, token)
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    assert!(
        t.elapsed() < BOUND,
        "{what}: {:?} is runaway work",
        t.elapsed()
    );
    out
}

async fn mcp_search(client: &RunningService<RoleClient, ()>, q: &str) -> (bool, String) {
    let args = json!({"query": q});
    let Value::Object(map) = args else {
        unreachable!()
    };
    match client
        .call_tool(CallToolRequestParams::new("search").with_arguments(map))
        .await
    {
        Ok(r) => (
            r.is_error == Some(true),
            r.content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        // A request the server refuses at the protocol level is an answer too.
        Err(e) => (true, e.to_string()),
    }
}

#[test]
fn hostile_query_text_gets_a_bounded_answer_from_every_search_entry_point() {
    let (_dir, relay, token) = relay_with_corpus();
    let queries = hostile_queries();

    // HTTP read API.
    for (name, q) in &queries {
        let r = timed(name, || {
            relay
                .http
                .try_get(&format!("/v1/query?q={}", encode(q)), Some(&token))
        });
        if let Ok(r) = r {
            assert!(r.status < 500, "{name}: {} {}", r.status, r.body);
            if r.status == 400 && r.body.contains("query_too_large") {
                assert!(
                    r.json()["hint"].as_str().unwrap().contains("words"),
                    "{}",
                    r.body
                );
            }
        }
    }
    // Within the URL limit but over the query bound: a clear 400 naming the limit.
    let many: String = (0..400).map(|i| format!("w{i} ")).collect();
    let r = relay
        .http
        .get(&format!("/v1/query?q={}", encode(&many)), Some(&token));
    r.assert_error(400, "query_too_large");
    assert!(r.json()["message"].as_str().unwrap().contains("128"));

    // The dashboard's search, signed in through a one-time link.
    let link = relay.cli_json(&["open", "--json"]);
    let path = link["url"].as_str().unwrap()[relay.base.len()..].to_owned();
    let signed = relay.http.get_with(&path, &[]);
    let cookie = signed
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    for (name, q) in &queries {
        let r = timed(name, || {
            relay.http.get_with(
                &format!("/search?q={}", encode(&q[..q.len().min(4_000)])),
                &[("cookie", &cookie)],
            )
        });
        assert!(r.status < 500, "dashboard {name}: {}", r.status);
    }
    let r = relay.http.get_with(
        &format!("/search?q={}", encode(&many)),
        &[("cookie", &cookie)],
    );
    assert_eq!(r.status, 400);
    assert!(r.body.contains("the limit is 128"), "{}", r.body);

    // MCP over Streamable HTTP with a read-only agent token, and over stdio.
    let agent = relay.cli_json(&["agents", "add", "hostile", "--json"]);
    let agent_token = agent["token"].as_str().unwrap().to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let http = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", relay.base))
                .auth_header(agent_token.clone()),
        );
        let mut cmd = tokio::process::Command::new(personkit_testkit::bin());
        cmd.arg("mcp")
            .arg("--db")
            .arg(&relay.db)
            .env("HOME", relay.db.parent().unwrap())
            .env_remove("PERSONKIT_DB");
        let stdio = TokioChildProcess::new(cmd).unwrap();
        for (transport, client) in [
            ("http", ().serve(http).await.unwrap()),
            ("stdio", ().serve(stdio).await.unwrap()),
        ] {
            for (name, q) in &queries {
                let t = Instant::now();
                let (_is_error, _text) = mcp_search(&client, q).await;
                assert!(
                    t.elapsed() < BOUND,
                    "mcp {transport} {name}: {:?}",
                    t.elapsed()
                );
            }
            let (is_error, text) = mcp_search(&client, &many).await;
            assert!(is_error, "{transport}: {text}");
            assert!(text.contains("query_too_large"), "{transport}: {text}");
            // Still serving.
            let (is_error, text) = mcp_search(&client, "borrow checker").await;
            assert!(!is_error, "{transport}: {text}");
            client.cancel().await.unwrap();
        }
    });

    // The CLI (an argument is at most 128 KiB on Linux, so the largest texts are cut to fit).
    for (name, q) in &queries {
        let q: String = q.chars().filter(|c| *c != '\0').take(20_000).collect();
        let out = timed(name, || relay.cli(&["corpus", "query", "--json", "--", &q]));
        assert!(
            out.status.success() || out.stderr.contains("limit"),
            "cli {name}: {}",
            out.stderr
        );
    }
    let out = relay.cli(&["corpus", "query", "--all-words", "--", &many]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("the limit is 128"), "{}", out.stderr);

    // After all that, an ordinary search still answers, with what it should find.
    let r = relay.http.get("/v1/query?q=lifetimes", Some(&token));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!r.json()["hits"].as_array().unwrap().is_empty());
}

#[test]
fn a_relay_told_to_stop_exits_within_its_deadline_while_a_request_is_still_arriving() {
    let (_dir, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let token = relay.pair_printed("laptop");
    // A batch whose body trickles in: the handler waits for it, and would keep the relay up.
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", relay.port())).unwrap();
    write!(
        slow,
        "POST /v1/observations HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{{\"items\": [",
        relay.port()
    )
    .unwrap();
    let trickle = std::thread::spawn(move || {
        for _ in 0..120 {
            if slow.write_all(b" ").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let status = relay.sigterm_and_wait(Duration::from_secs(20));
    let took = t.elapsed();
    assert!(status.is_some(), "the relay did not exit after SIGTERM");
    assert!(
        took < Duration::from_secs(10),
        "the relay took {took:?} to stop"
    );
    trickle.join().unwrap();
}
