//! Connection handling of the real relay over real sockets: clients that send nothing or a trickle of header
//! bytes are dropped after the header deadline, connections over the cap get a clear 503 at once, a low
//! open-file limit lowers the cap instead of failing accept, errors hyper answers by itself carry the error
//! shape, and a write past the file-size limit is a 503, not a dead relay.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use personkit_shared::wire::Role;
use personkit_testkit::{Relay, temp_db, turn};

/// Sends raw bytes on a new connection and reads the answer until the server closes it or `wait` passes.
fn raw(base: &str, bytes: &[u8], wait: Duration) -> String {
    let addr = base.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    let _ = s.write_all(bytes);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn body_of(resp: &str) -> serde_json::Value {
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not a JSON body ({e}): {resp:?}"))
}

#[test]
fn slow_silent_and_surplus_connections_get_clear_answers() {
    let (_dir, db) = temp_db();
    // 160 open files: the relay must lower its cap (1000 asked) to fit, not run out of descriptors.
    let relay = Relay::start_under(
        &db,
        &["--header-timeout", "2", "--max-connections", "1000"],
        &[],
        &["prlimit", "--nofile=160:160"],
    );
    let addr = relay.base.trim_start_matches("http://").to_owned();
    // 250 clients that send part of a request line and stop.
    let mut slow: Vec<TcpStream> = (0..250)
        .filter_map(|_| {
            let mut s = TcpStream::connect(&addr).ok()?;
            s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: 127").ok()?;
            Some(s)
        })
        .collect();
    assert!(slow.len() >= 200, "only {} connections opened", slow.len());
    // A client now gets an answer at once — served, or a clear 503 — never a hang.
    let t = Instant::now();
    let resp = raw(
        &relay.base,
        b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "took {:?}",
        t.elapsed()
    );
    if resp.starts_with("HTTP/1.1 503") {
        assert_eq!(body_of(&resp)["code"], "too_many_connections", "{resp}");
        assert!(
            resp.to_ascii_lowercase().contains("retry-after: 1"),
            "{resp}"
        );
    } else {
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    }
    // The surplus connections were answered 503 and closed.
    let mut refused = 0;
    for s in slow.iter_mut().rev().take(40) {
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = String::new();
        let _ = s.read_to_string(&mut buf);
        if buf.starts_with("HTTP/1.1 503") {
            refused += 1;
        }
    }
    assert!(refused > 0, "no connection over the cap was refused");
    // After the header deadline the slow clients are gone and the relay serves again.
    std::thread::sleep(Duration::from_secs(3));
    let r = relay.http.get("/v1/health", None);
    assert_eq!(r.status, 200, "{}", r.body);
    for s in slow.iter_mut().take(20) {
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap_or(0);
        assert_eq!(
            n,
            0,
            "a slow client is still connected: {:?}",
            String::from_utf8_lossy(&buf[..n])
        );
    }
    // A kept-alive connection that goes quiet after a request is closed at the same deadline.
    let mut kept = TcpStream::connect(&addr).unwrap();
    kept.write_all(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
    let mut first = [0u8; 512];
    let n = kept.read(&mut first).unwrap();
    assert!(
        first[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&first[..n])
    );
    let t = Instant::now();
    let mut rest = Vec::new();
    let _ = kept.read_to_end(&mut rest);
    assert!(
        t.elapsed() < Duration::from_secs(6),
        "an idle kept-alive connection stayed open {:?}",
        t.elapsed()
    );
    // A client that sends nothing at all is dropped too.
    let t = Instant::now();
    let silent = raw(&relay.base, b"", Duration::from_secs(8));
    assert!(
        silent.is_empty() && t.elapsed() < Duration::from_secs(6),
        "{silent:?} after {:?}",
        t.elapsed()
    );
    let log = relay.stderr();
    assert!(!log.contains("Too many open files"), "{log}");
    assert!(
        log.contains("allows fewer connections than configured"),
        "{log}"
    );
}

#[test]
fn requests_hyper_refuses_get_the_error_shape() {
    let (_dir, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let long_uri = format!(
        "GET /v1/query?q={} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        "a".repeat(70_000)
    );
    let headers: String = (0..200)
        .map(|i| format!("X-Filler-{i}: {}\r\n", "b".repeat(500)))
        .collect();
    let big_headers = format!("GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}\r\n");
    for (bytes, status, code) in [
        (long_uri.into_bytes(), "414", "uri_too_long"),
        (big_headers.into_bytes(), "431", "headers_too_large"),
        (
            b"NOT HTTP AT ALL\r\n\r\n".to_vec(),
            "400",
            "malformed_request",
        ),
    ] {
        let resp = raw(&relay.base, &bytes, Duration::from_secs(10));
        assert!(resp.starts_with(&format!("HTTP/1.1 {status}")), "{resp:?}");
        let v = body_of(&resp);
        assert_eq!(v["code"], code, "{resp}");
        assert!(v["message"].is_string() && v["hint"].is_string(), "{resp}");
    }
    assert_eq!(relay.http.get("/v1/health", None).status, 200);
}

#[test]
fn a_write_past_the_file_size_limit_is_a_503_not_a_dead_relay() {
    let (_dir, db) = temp_db();
    // Create and pair first, so the limit only bites on growth.
    let first = Relay::start(&db, &[]);
    let code = first.printed_pairing_code();
    let token = first.pair_with(&code, "fsize");
    drop(first);
    let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let limit = size(&db).max(size(std::path::Path::new(&wal))) + 256 * 1024;
    let relay = Relay::start_under(&db, &[], &[], &["prlimit", &format!("--fsize={limit}")]);
    let filler = "x".repeat(60_000);
    let mut acknowledged = Vec::new();
    let mut refused = None;
    for i in 0..60 {
        let content = format!("turn {i} {filler}");
        let item = turn(
            "browser-ext:chatgpt",
            "fsize",
            Role::User,
            &content,
            Some(i),
        );
        let r = relay.http.post_json(
            "/v1/observations",
            Some(&token),
            &serde_json::json!({"observations": [item]}),
        );
        if r.status == 200 {
            acknowledged.push(content);
        } else {
            r.assert_error(503, "storage_unavailable");
            refused = Some(i);
            break;
        }
    }
    assert!(refused.is_some(), "the file-size limit was never reached");
    assert!(
        relay.try_exit().is_none(),
        "the relay died: {}",
        relay.stderr()
    );
    assert_eq!(relay.http.get("/v1/health", None).status, 200);
    drop(relay);
    // Everything acknowledged is there.
    let stored = personkit_testkit::cli_json(
        &db,
        &[
            "corpus",
            "messages",
            "--surface",
            "browser-ext:chatgpt",
            "--limit",
            "1000",
            "--json",
        ],
    );
    let contents: Vec<&str> = stored
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    for c in &acknowledged {
        assert!(
            contents.contains(&c.as_str()),
            "an acknowledged turn is missing"
        );
    }
}

#[test]
fn connection_limits_out_of_range_are_usage_errors() {
    let (_dir, db) = temp_db();
    for args in [
        &["--header-timeout", "0"][..],
        &["--header-timeout", "18446744073709551615"],
        &["--max-connections", "0"],
        &["--max-connections", "99999999999"],
    ] {
        let mut all = vec!["serve", "--addr", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let out = personkit_testkit::cli(&db, &all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("is not in 1..="),
            "{args:?}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    }
}
