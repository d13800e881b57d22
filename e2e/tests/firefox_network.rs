//! The network path in Firefox ESR (the built `dist/firefox` as a temporary add-on, the real relay), on two
//! surfaces: the ChatGPT page's own script reads its streamed reply (`shared/tests/fixtures/network/chatgpt/
//! stream-answer`), and the Claude page loads a conversation's message tree (`claude/conversation-tree`). The
//! page-world interceptor tees what the page receives, and each turn lands once in its source form beside the DOM
//! path's reading.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use personkit_e2e::firefox::Firefox;
use personkit_e2e::fixtures::{self, Case};
use personkit_e2e::proxy::Proxy;
use personkit_e2e::relay::{Relay, StoredMessage};
use personkit_e2e::server::FixtureServer;
use serde_json::{Value, json};

/// A relay, Firefox with the extension paired to it and `surface` on, and the fixture server.
struct Setup {
    relay: Relay,
    _proxy: Proxy,
    server: FixtureServer,
    ff: Firefox,
}

fn setup(surface: &str) -> Setup {
    let relay = Relay::start().unwrap();
    let code = relay.pairing_code.clone().unwrap();
    let proxy = Proxy::start(relay.port).unwrap();
    let server = FixtureServer::start().unwrap();
    let ff = Firefox::with_extension().unwrap();
    ff.pair_in_popup(&proxy.url(), &code, "Paired")
        .unwrap_or_else(|e| panic!("{e:#}; relay log:\n{}", relay.log()));
    ff.enable_surface(surface).unwrap();
    Setup {
        relay,
        _proxy: proxy,
        server,
        ff,
    }
}

impl Setup {
    /// Firefox may run document_start scripts late in the first documents after an add-on is installed, while it
    /// still compiles them (w3c/webextensions#1009): a page's first request can then pass untouched, and only the
    /// DOM path reads that reply. What is tested here is the network path once it is in place, so a probe page on
    /// `host` is loaded until its first script sees the interceptor already installed.
    fn wait_page_world_first(&self, host: &str) {
        let probe = format!(
            "https://{host}:{}/__e2e/page_world_probe.html",
            self.server.port
        );
        let warm_by = Instant::now() + Duration::from_secs(30);
        loop {
            self.ff.navigate(&probe).unwrap();
            let first = self
                .ff
                .exec("return document.documentElement.dataset.pageWorldFirst || '';")
                .unwrap();
            if first == json!("true") {
                return;
            }
            assert!(
                Instant::now() < warm_by,
                "the page-world script never ran before the page's own scripts (last: {first})"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn open(&self, case: &Case) {
        self.wait_page_world_first(&case.expected.host);
        self.server.route(&case.expected.path, case.page());
        self.ff
            .navigate(&format!(
                "https://{}:{}{}",
                case.expected.host, self.server.port, case.expected.path
            ))
            .unwrap();
        self.ff
            .wait_for(
                "return document.documentElement.dataset.fixtureDone === '1'",
                Duration::from_millis(case.expected.script_ms + 15_000),
            )
            .unwrap();
    }

    fn thread(&self, case: &Case) -> Vec<StoredMessage> {
        let thread =
            personkit_shared::thread_id(&case.expected.surface, &case.expected.conversations[0].id)
                .to_string();
        self.relay
            .messages(&case.expected.surface)
            .unwrap()
            .into_iter()
            .filter(|m| m.thread_id == thread)
            .collect()
    }

    /// Waits (≤ 30 s, then 2 s more) until every `(key, text)` is stored; returns the thread, and prints what both
    /// ends saw when it is not what was wanted (a failure that does not reproduce at will).
    fn wait_turns(&self, case: &Case, want: &[(String, String)]) -> Vec<StoredMessage> {
        let all = |got: &[StoredMessage]| {
            want.iter().all(|(k, t)| {
                got.iter()
                    .any(|m| m.message_key.as_deref() == Some(k) && &m.content == t)
            })
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && !all(&self.thread(case)) {
            std::thread::sleep(Duration::from_millis(500));
        }
        std::thread::sleep(Duration::from_secs(2));
        let got = self.thread(case);
        if got.len() != want.len() || !all(&got) {
            let health = self
                .relay
                .cli(&["corpus", "surfaces", "--json"])
                .unwrap_or_default();
            let console: Vec<_> = self
                .ff
                .log()
                .lines()
                .filter(|l| l.contains("personkit") || l.contains("Error"))
                .map(str::to_owned)
                .collect();
            eprintln!(
                "relay surfaces: {health}\nrelay log:\n{}\nFirefox console:\n{}",
                self.relay.log(),
                console.join("\n")
            );
        }
        got
    }
}

fn case(name: &str) -> Case {
    fixtures::cases("network")
        .unwrap()
        .into_iter()
        .find(|c| c.name == format!("network/{name}"))
        .unwrap()
}

fn parsed(rel: &str) -> Vec<Value> {
    let fx = personkit_e2e::workspace_root()
        .join("shared/tests/fixtures/network")
        .join(rel);
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(fx.join("expected.json")).unwrap()).unwrap();
    v["turns"].as_array().unwrap().clone()
}

/// A parsed turn as the capture stores it: reasoning in its own block before the answer.
fn stored_text(t: &Value) -> String {
    let text = t["text"].as_str().unwrap();
    match t["reasoning"].as_str() {
        Some(r) => format!(
            "{}\n\n{text}",
            personkit_shared::turn_text::reasoning_block(r)
        ),
        None => text.to_owned(),
    }
}

fn keyed(turns: &[Value]) -> Vec<(String, String)> {
    turns
        .iter()
        .map(|t| {
            (
                t["message_key"].as_str().unwrap().to_owned(),
                stored_text(t),
            )
        })
        .collect()
}

#[test]
fn firefox_chatgpt_stream_and_dom_store_each_turn_once_in_source_form() {
    let s = setup("browser-ext:chatgpt");
    s.server.route(
        "/backend-api/f/conversation",
        personkit_e2e::workspace_root()
            .join("shared/tests/fixtures/network/chatgpt/stream-answer/stream.sse"),
    );
    let c = case("chatgpt_stream_dom");
    s.open(&c);
    let want = keyed(&parsed("chatgpt/stream-answer"));
    let got = s.wait_turns(&c, &want);
    assert_eq!(got.len(), want.len(), "each turn once: {got:#?}");
    for (k, t) in &want {
        let m: Vec<_> = got
            .iter()
            .filter(|m| m.message_key.as_deref() == Some(k))
            .collect();
        assert_eq!(m.len(), 1, "{k}: {got:#?}");
        assert_eq!(&m[0].content, t, "the source form is kept");
    }
}

#[test]
fn firefox_claude_tree_lands_once_per_turn_with_its_branches() {
    let s = setup("browser-ext:claude");
    s.server.route(
        "/api/organizations/0e3c6a52-7f7b-4d4e-9a4c-1d2b3c4d5e6f/chat_conversations/9a8b7c6d-1111-4222-8333-444455556666",
        personkit_e2e::workspace_root()
            .join("shared/tests/fixtures/network/claude/conversation-tree/conversation.json"),
    );
    let c = case("claude_tree");
    s.open(&c);
    let turns = parsed("claude/conversation-tree");
    let got = s.wait_turns(&c, &keyed(&turns));
    // The DOM's readings of the four shown turns (Claude's markup has no ids) joined the tree's turns.
    assert_eq!(got.len(), turns.len(), "each turn once: {got:#?}");
    for t in &turns {
        let k = t["message_key"].as_str().unwrap();
        let m: Vec<_> = got
            .iter()
            .filter(|m| m.message_key.as_deref() == Some(k))
            .collect();
        assert_eq!(m.len(), 1, "{k}: {got:#?}");
        assert_eq!(m[0].content, stored_text(t), "{k}: the source form");
        assert_eq!(m[0].parent_key.as_deref(), t["parent_key"].as_str(), "{k}");
        // The shown branch is current; the abandoned prompt and its two answers are kept, not current.
        assert_eq!(
            m[0].is_current,
            t["on_current_branch"] == json!(true),
            "{k}: {got:#?}"
        );
    }
}
