//! Tests of the harness itself, without the extension: the TLS fixture server under the real origins, Chromium
//! over the CDP pipe, every fixture page's own script, and the real relay + counting proxy pairing over HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use personkit_e2e::chromium::{Chromium, LaunchOptions};
use personkit_e2e::fixtures::{self, squash};
use personkit_e2e::http;
use personkit_e2e::proxy::Proxy;
use personkit_e2e::relay::Relay;
use personkit_e2e::server::FixtureServer;
use personkit_e2e::session::wait_fixture_done;
use serde_json::json;

const SURFACES: &[&str] = &["chatgpt", "claude", "gemini", "copilot"];

/// Every fixture page loads under its real origin (host mapping + TLS), runs its script to the end without a
/// page error, and ends showing the final text of every turn it promises (for cases that keep all turns in the
/// DOM and show them unredacted).
#[test]
fn every_fixture_page_renders_under_its_real_origin() {
    let server = FixtureServer::start().unwrap();
    let browser = Chromium::launch(&LaunchOptions {
        extension: None,
        fixture_port: server.port,
    })
    .unwrap();
    let mut all = Vec::new();
    for s in SURFACES {
        all.extend(fixtures::cases(s).unwrap());
    }
    assert_eq!(all.len(), 32, "8 cases for each of the 4 surfaces");
    // Open every page at once (each in its own tab); their scripts run concurrently.
    let mut tabs = Vec::new();
    for case in &all {
        server.route(&case.expected.path, case.page());
        let tab = browser.open_tab("about:blank").unwrap();
        tab.call("Page.navigate", json!({"url": case.url()}))
            .unwrap();
        tabs.push(tab);
    }
    let mut problems = Vec::new();
    for (case, tab) in all.iter().zip(&tabs) {
        if let Err(e) = wait_fixture_done(tab, case) {
            problems.push(format!("{}: {e:#}", case.name));
            continue;
        }
        let host = tab.eval("location.hostname").unwrap();
        if host != json!(case.expected.host) {
            problems.push(format!(
                "{}: loaded from {host}, not {}",
                case.name, case.expected.host
            ));
        }
        let scheme = tab.eval("location.protocol").unwrap();
        if scheme != json!("https:") {
            problems.push(format!("{}: not https ({scheme})", case.name));
        }
        let keeps_all = ["short", "long", "streaming"]
            .iter()
            .any(|c| case.name.ends_with(c));
        if keeps_all {
            let text = squash(
                tab.eval("document.body.innerText")
                    .unwrap()
                    .as_str()
                    .unwrap_or_default(),
            );
            for conv in &case.expected.conversations {
                for t in &conv.turns {
                    // Chrome (code headers, labels) sits around the content, so compare the content's words in order.
                    // What the core's renderer adds — code fences, inline-code backticks, list markers and a
                    // citation's URL in brackets — is not page text.
                    let is_marker = |w: &str| {
                        w == "-"
                            || w == "*"
                            || (w.ends_with('.') && w[..w.len() - 1].parse::<u32>().is_ok())
                    };
                    let words: Vec<String> = t
                        .text
                        .split_whitespace()
                        .filter(|w| {
                            !w.starts_with("```") && !w.starts_with("(http") && !is_marker(w)
                        })
                        .map(|w| w.replace('`', ""))
                        .filter(|w| !w.is_empty())
                        .collect();
                    let mut at = 0;
                    for w in &words {
                        match text[at..].find(w.as_str()) {
                            Some(i) => at += i + w.len(),
                            None => {
                                problems.push(format!(
                                    "{}: page never shows {w:?} of {:?}",
                                    case.name,
                                    squash(&t.text)
                                ));
                                break;
                            }
                        }
                    }
                }
            }
        }
    }
    let errors = browser
        .cdp
        .events_matching(|e| e["method"] == "Runtime.exceptionThrown");
    for e in errors {
        problems.push(format!("page error: {}", e["params"]["exceptionDetails"]));
    }
    assert!(
        problems.is_empty(),
        "fixture problems:\n{}",
        problems.join("\n")
    );
    // The pages were fetched under the site host names, not the loopback address.
    let hits = server.hits();
    assert!(
        hits.iter()
            .any(|h| h.host == "chatgpt.com" && h.status == 200),
        "{hits:?}"
    );
    assert!(
        hits.iter()
            .any(|h| h.host == "www.copilot.com" && h.status == 200),
        "{hits:?}"
    );
}

/// The same fixture loaded as `https://127.0.0.1:<port>/...` is served too (the negative control of the
/// extension tests relies on it), under a different origin.
#[test]
fn fixture_is_reachable_under_the_loopback_origin() {
    let server = FixtureServer::start().unwrap();
    let browser = Chromium::launch(&LaunchOptions {
        extension: None,
        fixture_port: server.port,
    })
    .unwrap();
    let case = fixtures::cases("chatgpt")
        .unwrap()
        .into_iter()
        .find(|c| c.name.ends_with("/short"))
        .unwrap();
    server.route(&case.expected.path, case.page());
    let tab = browser
        .open_tab(&format!(
            "https://127.0.0.1:{}{}",
            server.port, case.expected.path
        ))
        .unwrap();
    wait_fixture_done(&tab, &case).unwrap();
    assert_eq!(tab.eval("location.hostname").unwrap(), json!("127.0.0.1"));
    assert!(
        tab.eval("document.querySelectorAll('section[data-turn-id]').length")
            .unwrap()
            .as_u64()
            .unwrap()
            == 4
    );
}

/// The real relay starts on an ephemeral port, prints its pairing code, and pairs a device over HTTP through
/// the counting proxy; a wrong code is refused with the contract's JSON error.
#[test]
fn relay_pairs_through_the_counting_proxy() {
    let relay = Relay::start().unwrap();
    let code = relay
        .pairing_code
        .clone()
        .expect("serve prints a pairing code on an empty corpus");
    let proxy = Proxy::start(relay.port).unwrap();
    let t = Duration::from_secs(10);
    let health =
        http::request("GET", &format!("{}/v1/health", proxy.url()), None, None, t).unwrap();
    assert_eq!(health.status, 200, "{}", health.body);
    assert_eq!(health.json().unwrap()["ok"], json!(true));
    let bad = http::request(
        "POST",
        &format!("{}/v1/pair", proxy.url()),
        Some(&json!({"code": "AAAA-AAAA", "device_name": "e2e"})),
        None,
        t,
    )
    .unwrap();
    assert_eq!(bad.status, 401);
    assert_eq!(bad.json().unwrap()["code"], json!("invalid_pairing_code"));
    let ok = http::request(
        "POST",
        &format!("{}/v1/pair", proxy.url()),
        Some(&json!({"code": code, "device_name": "e2e"})),
        None,
        t,
    )
    .unwrap();
    assert_eq!(ok.status, 200, "{}", ok.body);
    let token = ok.json().unwrap()["token"].as_str().unwrap().to_string();
    let health = http::request(
        "GET",
        &format!("{}/v1/me/capture-health", proxy.url()),
        None,
        Some(&token),
        t,
    )
    .unwrap();
    assert_eq!(health.status, 200, "{}", health.body);
    let seen = proxy.seen();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(
        seen.iter().map(|s| s.status).collect::<Vec<_>>(),
        vec![200, 401, 200, 200]
    );
    // With the relay stopped the proxy answers nothing (a network error for the client) and counts it.
    let mut relay = relay;
    relay.stop();
    assert!(http::request("GET", &format!("{}/v1/health", proxy.url()), None, None, t).is_err());
    assert_eq!(proxy.seen().last().unwrap().status, 0);
    relay.restart().unwrap();
    let health =
        http::request("GET", &format!("{}/v1/health", proxy.url()), None, None, t).unwrap();
    assert_eq!(health.status, 200);
}

/// The fixture files are consistent: every case parses (unknown keys are refused), is served from one of the
/// mapped hosts at a path carrying its first conversation id, signals the end of its script, and no two cases
/// share a conversation (their turns would be mixed in the corpus).
#[test]
fn fixture_files_are_consistent() {
    let mut ids = std::collections::HashSet::new();
    let mut all = Vec::new();
    for s in SURFACES {
        all.extend(fixtures::cases(s).unwrap());
    }
    for name in [
        "scenarios/chatgpt_delayed",
        "scenarios/chatgpt_custom_pattern",
    ] {
        all.push(personkit_e2e::session::Session::scenario_case(name).unwrap());
    }
    for case in &all {
        let e = &case.expected;
        assert!(
            personkit_e2e::SITE_HOSTS.contains(&e.host.as_str()),
            "{}: unmapped host {}",
            case.name,
            e.host
        );
        assert!(
            e.surface.starts_with("browser-ext:"),
            "{}: surface {}",
            case.name,
            e.surface
        );
        assert!(
            e.path.ends_with(&e.conversations[0].id),
            "{}: path {} vs id {}",
            case.name,
            e.path,
            e.conversations[0].id
        );
        let page = std::fs::read_to_string(case.page()).unwrap();
        assert!(
            page.contains("/__e2e/fixture.js") && page.contains("FX.done()"),
            "{}: page lacks the fixture lib",
            case.name
        );
        for c in &e.conversations {
            assert!(
                ids.insert(c.id.clone()),
                "{}: conversation id {} used twice",
                case.name,
                c.id
            );
            assert!(!c.turns.is_empty(), "{}: no turns", case.name);
        }
        if e.known_failure {
            assert!(
                e.known_failure_reason.is_some(),
                "{}: known_failure without a reason",
                case.name
            );
        }
    }
}
