//! The network path in the real Chromium with the built extension and the real relay: the page-world script tees
//! what the fixture page's own script requests from the site's endpoints, the worker parses it with the core's
//! network parsers (the second wasm module) and queues `path: "network"` turns beside the DOM path's.
//!
//! The fixture server answers the endpoints with the realistic streams and conversation JSON of
//! `shared/tests/fixtures/network/` (their sources are named in that folder's README); the 500-turn conversation
//! JSON is generated here in ChatGPT's mapping format. Pages: `e2e/fixtures/network/<case>/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use personkit_e2e::fixtures::{self, Case};
use personkit_e2e::relay::StoredMessage;
use personkit_e2e::session::{SETTLE, Session, wait_fixture_done};
use serde_json::{Value, json};

const CHATGPT: &str = "browser-ext:chatgpt";
const CLAUDE: &str = "browser-ext:claude";
const CID: &str = "6740a3f2-1c9e-8001-b2a4-3f0e8d7c1a55";
const OTHER: &str = "0b7d2e94-5c3a-4f18-a6e2-9d41c7b8e350";
const STREAM: &str = "/backend-api/f/conversation";

fn case(name: &str) -> Case {
    fixtures::cases("network")
        .unwrap()
        .into_iter()
        .find(|c| c.name == format!("network/{name}"))
        .unwrap_or_else(|| panic!("no fixture network/{name}"))
}

fn net_fixture(rel: &str) -> PathBuf {
    personkit_e2e::workspace_root()
        .join("shared/tests/fixtures/network")
        .join(rel)
}

/// A file in a fresh temporary folder (kept until the test ends).
fn temp_file(dir: &tempfile::TempDir, name: &str, content: &[u8]) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, content).unwrap();
    p
}

/// The turns the parser gives for the ChatGPT stream (`stream-answer/expected.json`): (role, key, text).
fn stream_turns() -> Vec<(String, String, String)> {
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(net_fixture("chatgpt/stream-answer/expected.json")).unwrap(),
    )
    .unwrap();
    v["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["role"].as_str().unwrap().to_owned(),
                t["message_key"].as_str().unwrap().to_owned(),
                t["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn thread_of(conversation: &str) -> String {
    personkit_shared::thread_id(CHATGPT, conversation).to_string()
}

fn in_thread(s: &Session, conversation: &str) -> Vec<StoredMessage> {
    let t = thread_of(conversation);
    s.messages(CHATGPT)
        .unwrap()
        .into_iter()
        .filter(|m| m.thread_id == t)
        .collect()
}

/// Polls until `done` holds for the thread's messages or `timeout` passes; returns the last read.
fn wait_thread(
    s: &Session,
    conversation: &str,
    timeout: Duration,
    done: impl Fn(&[StoredMessage]) -> bool,
) -> Vec<StoredMessage> {
    let until = Instant::now() + timeout;
    loop {
        let m = in_thread(s, conversation);
        if done(&m) || Instant::now() > until {
            return m;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The two stream turns, each once, in the stream's source form, keyed by the site's ids, no revision.
fn assert_stream_turns_once(got: &[StoredMessage]) {
    let want = stream_turns();
    assert_eq!(got.len(), want.len(), "each turn once: {got:#?}");
    for (role, key, text) in &want {
        let m: Vec<_> = got
            .iter()
            .filter(|m| m.message_key.as_deref() == Some(key))
            .collect();
        assert_eq!(m.len(), 1, "{key}: {got:#?}");
        assert_eq!(&m[0].role, role);
        assert_eq!(&m[0].content, text, "the source form is kept");
        assert!(m[0].is_current);
    }
}

fn source_form_landed(m: &[StoredMessage]) -> bool {
    let want = stream_turns();
    want.iter().all(|(_, key, text)| {
        m.iter()
            .any(|x| x.message_key.as_deref() == Some(key) && &x.content == text)
    })
}

#[test]
fn stream_and_dom_together_store_each_turn_once_in_source_form() {
    let s = Session::start(&[CHATGPT]).unwrap();
    let file = net_fixture("chatgpt/stream-answer/stream.sse");
    s.server.route(STREAM, file.clone());
    let c = case("chatgpt_stream_dom");
    let tab = s.open_case(&c).unwrap();
    // The page got exactly the bytes the server sent.
    let got = tab.eval("window.__got").unwrap();
    assert_eq!(
        got.as_str().unwrap(),
        std::fs::read_to_string(&file).unwrap(),
        "the page's own read of its stream is unchanged"
    );
    let m = wait_thread(&s, CID, Duration::from_secs(30), source_form_landed);
    std::thread::sleep(SETTLE);
    let m2 = in_thread(&s, CID);
    assert_eq!(m.len(), m2.len());
    assert_stream_turns_once(&m2);
    // Both paths gave turns: the relay and the popup say so.
    let paths = relay_paths(&s, |p| p["working"] == "both");
    assert_eq!(paths["working"], "both", "{paths}");
    assert_eq!(popup_paths(&s).0, "both");
}

#[test]
fn dom_selectors_broken_turns_still_come_from_the_network() {
    let s = Session::start(&[CHATGPT]).unwrap();
    s.server
        .route(STREAM, net_fixture("chatgpt/stream-answer/stream.sse"));
    let c = case("chatgpt_stream_broken_dom");
    let _tab = s.open_case(&c).unwrap();
    let _ = wait_thread(&s, CID, Duration::from_secs(30), source_form_landed);
    std::thread::sleep(SETTLE);
    assert_stream_turns_once(&in_thread(&s, CID));
    // Only the network path gave turns.
    let paths = relay_paths(&s, |p| p["working"] == "network");
    assert_eq!(paths["working"], "network", "{paths}");
    assert!(paths["dom_at"].is_null(), "{paths}");
    assert_eq!(popup_paths(&s).0, "network");
}

#[test]
fn a_stream_the_parser_no_longer_reads_is_reported_and_dom_still_captures() {
    let s = Session::start(&[CHATGPT]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A format change: the events are no longer JSON.
    let bad = temp_file(
        &dir,
        "changed.sse",
        b"event: delta_encoding\ndata: \"v1\"\n\nevent: delta\ndata: <msg id=2>Hier ist</msg>\n\ndata: [DONE]\n\n",
    );
    s.server.route(STREAM, bad);
    let c = case("chatgpt_unparsed");
    let _tab = s.open_case(&c).unwrap();
    // DOM: both turns, keyed by the site's ids from the markup.
    let m = wait_thread(&s, CID, Duration::from_secs(30), |m| m.len() >= 2);
    let keys: Vec<_> = m.iter().filter_map(|m| m.message_key.clone()).collect();
    assert_eq!(m.len(), 2, "{m:#?}");
    assert!(keys.contains(&"a1b2c3d4-0002-4000-8000-000000000002".to_owned()));
    // The worker recorded the unreadable body for the surface (never silently dropped).
    let until = Instant::now() + Duration::from_secs(10);
    let stats = loop {
        let st = s
            .worker_eval(&format!("({})('stats')", personkit_e2e::READ_STATE))
            .unwrap();
        if !st[CHATGPT]["unparsed"].is_null() || Instant::now() > until {
            break st;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(stats[CHATGPT]["unparsed"], "stream_unparsed", "{stats}");
    assert!(stats[CHATGPT]["domMs"].is_number(), "{stats}");
    assert!(stats[CHATGPT]["networkMs"].is_null(), "{stats}");
    // The relay's capture health and the popup say so: the page works, the network path does not.
    let paths = relay_paths(&s, |p| p["unparsed"] == "stream_unparsed");
    assert_eq!(paths["working"], "dom", "{paths}");
    assert_eq!(
        popup_paths(&s),
        ("dom".to_owned(), Some("stream_unparsed".to_owned()))
    );
}

/// The relay's `paths` for ChatGPT once `done` holds (or after 20 s).
fn relay_paths(s: &Session, done: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let h = s.relay_capture_health().unwrap();
        let p = h["surfaces"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["surface"] == CHATGPT)
            .map(|x| x["paths"].clone())
            .unwrap_or(Value::Null);
        if done(&p) || Instant::now() > until {
            return p;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The popup's paths label for ChatGPT, after reopening it: (`data-working`, `data-unparsed`).
fn popup_paths(s: &Session) -> (String, Option<String>) {
    s.popup.reload().unwrap();
    let v = s
        .popup
        .wait_for(
            "(() => { const e = document.querySelector('[data-paths=\"browser-ext:chatgpt\"]'); \
             return e && e.dataset.working ? [e.dataset.working, e.dataset.unparsed || null] : null; })()",
            Duration::from_secs(10),
        )
        .unwrap();
    (
        v[0].as_str().unwrap().to_owned(),
        v[1].as_str().map(str::to_owned),
    )
}

/// ChatGPT's conversation JSON (`mapping` tree, `current_node`) of `n` alternating turns, the shape of
/// `chatgpt/conversation-branches` without branches.
fn long_conversation(n: usize) -> Value {
    let mut mapping = serde_json::Map::new();
    mapping.insert(
        "root".into(),
        json!({"id": "root", "message": null, "parent": null, "children": ["m0"]}),
    );
    for i in 0..n {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let parent = if i == 0 {
            "root".to_owned()
        } else {
            format!("m{}", i - 1)
        };
        let children: Vec<String> = if i + 1 < n {
            vec![format!("m{}", i + 1)]
        } else {
            vec![]
        };
        mapping.insert(
            format!("m{i}"),
            json!({
                "id": format!("m{i}"),
                "parent": parent,
                "children": children,
                "message": {
                    "id": format!("m{i}"),
                    "author": {"role": role, "name": null, "metadata": {}},
                    "create_time": 1_795_341_600.0 + i as f64,
                    "content": {"content_type": "text", "parts": [format!("Turn {i} of the long conversation ({role}).")]},
                    "status": "finished_successfully",
                    "end_turn": role == "assistant",
                    "weight": 1.0,
                    "metadata": {},
                    "recipient": "all",
                    "channel": null
                }
            }),
        );
    }
    json!({
        "title": "A long one",
        "create_time": 1_795_341_600.0,
        "mapping": mapping,
        "current_node": format!("m{}", n - 1),
        "conversation_id": CID,
        "id": CID
    })
}

#[test]
fn a_500_turn_conversation_json_of_which_20_are_shown_is_captured_whole() {
    let s = Session::start(&[CHATGPT]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let body = serde_json::to_vec(&long_conversation(500)).unwrap();
    let file = temp_file(&dir, "conversation.json", &body);
    s.server
        .route(&format!("/backend-api/conversation/{CID}"), file);
    let c = case("chatgpt_long_json");
    let tab = s.open_case(&c).unwrap();
    assert_eq!(tab.eval("window.__got").unwrap(), json!(500));
    let _ = wait_thread(&s, CID, Duration::from_secs(90), |m| m.len() >= 500);
    std::thread::sleep(SETTLE);
    let m = in_thread(&s, CID);
    assert_eq!(m.len(), 500, "every turn once");
    for i in 0..500 {
        let key = format!("m{i}");
        let found: Vec<_> = m
            .iter()
            .filter(|x| x.message_key.as_deref() == Some(key.as_str()))
            .collect();
        assert_eq!(found.len(), 1, "{key}");
        assert_eq!(
            found[0].content,
            format!(
                "Turn {i} of the long conversation ({}).",
                if i % 2 == 0 { "user" } else { "assistant" }
            )
        );
        assert!(found[0].is_current, "{key}");
    }
}

#[test]
fn a_hostile_page_cannot_forge_the_channel_or_reach_another_thread_or_surface() {
    let s = Session::start(&[CHATGPT, CLAUDE]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let original =
        std::fs::read_to_string(net_fixture("chatgpt/stream-answer/stream.sse")).unwrap();
    // Well-formed, this page's own conversation, sent over the page's forged port.
    let forged = original.replace("Hier ist ", "FORGED Hier ist ");
    s.server.route(
        "/forged/stream.sse",
        temp_file(&dir, "forged.sse", forged.as_bytes()),
    );
    // A real request of a known endpoint whose stream names another conversation.
    let foreign = original
        .replace(CID, OTHER)
        .replace("Hier ist ", "FORGED Hier ist ");
    s.server
        .route(STREAM, temp_file(&dir, "foreign.sse", foreign.as_bytes()));
    // A known endpoint of another surface, served on this host.
    s.server.route(
        "/api/organizations/o/chat_conversations/c/completion",
        net_fixture("claude/stream-thinking-tool/stream.sse"),
    );
    let c = case("chatgpt_hostile");
    let _tab = s.open_case(&c).unwrap();
    let problems = s
        .wait_landed(&c, personkit_e2e::session::LAND_TIMEOUT)
        .unwrap();
    std::thread::sleep(SETTLE);
    std::thread::sleep(SETTLE);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let all = s.messages(CHATGPT).unwrap();
    assert!(
        all.iter().all(|m| !m.content.contains("FORGED")),
        "{all:#?}"
    );
    assert_eq!(in_thread(&s, CID).len(), 2, "{all:#?}");
    assert!(in_thread(&s, OTHER).is_empty(), "{all:#?}");
    assert!(s.messages(CLAUDE).unwrap().is_empty());
}

/// ChatGPT's conversation JSON of `conversation-branches` as it was before the edit: only the branch that ends in
/// `a-2` (the prompt `u-2` and its answer), that branch current.
fn before_the_edit() -> Value {
    let mut conv: Value = serde_json::from_str(
        &std::fs::read_to_string(net_fixture(
            "chatgpt/conversation-branches/conversation.json",
        ))
        .unwrap(),
    )
    .unwrap();
    let mut keep = Vec::new();
    let mut id = Some("a-2".to_owned());
    while let Some(i) = id {
        id = conv["mapping"][&i]["parent"].as_str().map(str::to_owned);
        keep.push(i);
    }
    let mapping = conv["mapping"].as_object_mut().unwrap();
    mapping.retain(|k, _| keep.contains(k));
    for node in mapping.values_mut() {
        let children: Vec<Value> = node["children"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| keep.iter().any(|k| c.as_str() == Some(k)))
            .cloned()
            .collect();
        node["children"] = Value::Array(children);
    }
    conv["current_node"] = json!("a-2");
    conv
}

#[test]
fn an_edit_and_a_regeneration_are_revisions_with_their_parents_kept() {
    let s = Session::start(&[CHATGPT]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("/backend-api/conversation/{CID}");
    // First visit: the conversation before the prompt was edited.
    s.server.route(
        &endpoint,
        temp_file(
            &dir,
            "before.json",
            &serde_json::to_vec(&before_the_edit()).unwrap(),
        ),
    );
    let c = case("chatgpt_branches");
    let tab = s.open_case(&c).unwrap();
    assert_eq!(
        tab.eval("window.__got").unwrap(),
        json!(["u-1", "a-1", "u-2", "a-2"])
    );
    let key = |m: &[StoredMessage], k: &str| -> Vec<StoredMessage> {
        m.iter()
            .filter(|x| x.message_key.as_deref() == Some(k))
            .cloned()
            .collect()
    };
    let m = wait_thread(&s, CID, Duration::from_secs(30), |m| {
        key(m, "a-2")
            .first()
            .is_some_and(|a| a.source_path.as_deref() == Some("network"))
    });
    let a2 = key(&m, "a-2");
    assert_eq!(a2.len(), 1, "{m:#?}");
    assert!(
        a2[0].is_current,
        "before the edit, a-2 is the answer: {m:#?}"
    );

    // The prompt was edited and the last answer regenerated on the site; the page, opened again, loads the tree.
    s.server.route(
        &endpoint,
        net_fixture("chatgpt/conversation-branches/conversation.json"),
    );
    tab.reload().unwrap();
    wait_fixture_done(&tab, &c).unwrap();
    assert_eq!(
        tab.eval("window.__got").unwrap(),
        json!(["u-1", "a-1", "u-2e", "a-3r"])
    );
    let _ = wait_thread(&s, CID, Duration::from_secs(30), |m| {
        !key(m, "a-3r").is_empty() && !key(m, "a-3").is_empty()
    });
    std::thread::sleep(SETTLE);
    let m = in_thread(&s, CID);
    let want: Value = serde_json::from_str(
        &std::fs::read_to_string(net_fixture("chatgpt/conversation-branches/expected.json"))
            .unwrap(),
    )
    .unwrap();
    for (k, current) in [
        ("u-1", true),
        ("a-1", true),
        ("u-2", false),
        ("a-2", false),
        ("u-2e", true),
        ("a-3", false),
        ("a-3r", true),
    ] {
        let got = key(&m, k);
        assert_eq!(got.len(), 1, "{k} stored once: {m:#?}");
        let t = want["turns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["message_key"] == k)
            .unwrap();
        assert_eq!(
            got[0].content,
            t["text"].as_str().unwrap(),
            "{k}: the source form"
        );
        assert_eq!(
            got[0].parent_key.as_deref(),
            t["parent_key"].as_str(),
            "{k}: its parent is kept"
        );
        assert_eq!(got[0].source_path.as_deref(), Some("network"), "{k}");
        assert_eq!(got[0].is_current, current, "{k}: {m:#?}");
    }
    // The edit and the regeneration are revisions of their positions: the prompt u-2e after u-2, the answer a-3r
    // after a-3.
    let rev = |k: &str| key(&m, k)[0].revision.unwrap();
    assert!(rev("u-2e") > rev("u-2"), "{m:#?}");
    assert!(rev("a-3r") > rev("a-3"), "{m:#?}");
}

#[test]
fn a_claude_tree_without_ids_in_the_dom_lands_once_per_turn_with_its_branches() {
    const CONV: &str = "9a8b7c6d-1111-4222-8333-444455556666";
    let s = Session::start(&[CLAUDE]).unwrap();
    s.server.route(
        &format!(
            "/api/organizations/0e3c6a52-7f7b-4d4e-9a4c-1d2b3c4d5e6f/chat_conversations/{CONV}"
        ),
        net_fixture("claude/conversation-tree/conversation.json"),
    );
    let c = case("claude_tree");
    let tab = s.open_case(&c).unwrap();
    assert_eq!(
        tab.eval("window.__got").unwrap().as_array().unwrap().len(),
        4
    );
    let want: Value = serde_json::from_str(
        &std::fs::read_to_string(net_fixture("claude/conversation-tree/expected.json")).unwrap(),
    )
    .unwrap();
    let want = want["turns"].as_array().unwrap().clone();
    let thread = personkit_shared::thread_id(CLAUDE, CONV).to_string();
    let read = || -> Vec<StoredMessage> {
        s.messages(CLAUDE)
            .unwrap()
            .into_iter()
            .filter(|m| m.thread_id == thread)
            .collect()
    };
    let landed = |m: &[StoredMessage]| {
        want.iter().all(|t| {
            m.iter()
                .any(|x| x.message_key.as_deref() == t["message_key"].as_str())
        })
    };
    let until = Instant::now() + Duration::from_secs(30);
    while !landed(&read()) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(SETTLE);
    std::thread::sleep(SETTLE);
    let m = read();
    // Every turn of the tree once, in its source form with its parent; the DOM's readings of the shown turns
    // (no ids in Claude's markup) joined them instead of standing beside them.
    assert_eq!(m.len(), want.len(), "each turn once: {m:#?}");
    for t in &want {
        let k = t["message_key"].as_str().unwrap();
        let got: Vec<_> = m
            .iter()
            .filter(|x| x.message_key.as_deref() == Some(k))
            .collect();
        assert_eq!(got.len(), 1, "{k}: {m:#?}");
        // Reasoning is kept before the answer, in its own block (as the DOM path writes it).
        let text = t["text"].as_str().unwrap();
        let text = match t["reasoning"].as_str() {
            Some(r) => format!(
                "{}\n\n{text}",
                personkit_shared::turn_text::reasoning_block(r)
            ),
            None => text.to_owned(),
        };
        assert_eq!(got[0].content, text, "{k}");
        assert_eq!(
            got[0].parent_key.as_deref(),
            t["parent_key"].as_str(),
            "{k}"
        );
        assert_eq!(got[0].source_path.as_deref(), Some("network"), "{k}");
    }
    // The shown branch is current; the abandoned prompt and its two answers are not.
    let current: Vec<_> = m
        .iter()
        .filter(|x| x.is_current)
        .filter_map(|x| x.message_key.as_deref())
        .map(|k| &k[k.len() - 1..])
        .collect::<Vec<_>>();
    let mut current = current;
    current.sort_unstable();
    assert_eq!(current, ["1", "2", "6", "7"], "{m:#?}");
}

#[test]
fn a_connection_lost_mid_reply_stores_no_partial_network_turn_and_the_dom_still_captures() {
    let s = Session::start(&[CHATGPT]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let whole = std::fs::read(net_fixture("chatgpt/stream-answer/stream.sse")).unwrap();
    // The first half of the reply, then the connection closes (the server promised more: `.cut`).
    s.server.route(
        STREAM,
        temp_file(&dir, "stream.cut", &whole[..whole.len() / 2]),
    );
    let c = case("chatgpt_stream_cut");
    let tab = s.open_case(&c).unwrap();
    assert_eq!(tab.eval("window.__read").unwrap(), json!("failed"));
    let problems = s
        .wait_landed(&c, personkit_e2e::session::LAND_TIMEOUT)
        .unwrap();
    std::thread::sleep(SETTLE);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let m = in_thread(&s, CID);
    assert_eq!(m.len(), 2, "{m:#?}");
    assert!(
        m.iter().all(|x| x.source_path.as_deref() == Some("dom")),
        "nothing of the cut body is stored: {m:#?}"
    );
    // A cut connection is not a format the parser no longer reads: nothing is reported as unparsed.
    let stats = s
        .worker_eval(&format!("({})('stats')", personkit_e2e::READ_STATE))
        .unwrap();
    assert!(stats[CHATGPT]["unparsed"].is_null(), "{stats}");
    assert!(stats[CHATGPT]["networkMs"].is_null(), "{stats}");
    assert_eq!(popup_paths(&s), ("dom".to_owned(), None));
}

#[test]
fn copilot_replies_over_a_websocket_land_in_source_form() {
    const COPILOT: &str = "browser-ext:copilot";
    let s = Session::start(&[COPILOT]).unwrap();
    s.server.route(
        "/c/api/chat",
        net_fixture("copilot/socket-two-replies/stream.ndjson"),
    );
    let c = case("copilot_socket");
    let tab = s.open_case(&c).unwrap();
    assert_eq!(
        tab.eval("window.__got").unwrap(),
        json!(15),
        "every frame reached the page"
    );
    let thread = personkit_shared::thread_id(COPILOT, "CoP7xYz").to_string();
    let read = || -> Vec<StoredMessage> {
        s.messages(COPILOT)
            .unwrap()
            .into_iter()
            .filter(|m| m.thread_id == thread)
            .collect()
    };
    let want: Value = serde_json::from_str(
        &std::fs::read_to_string(net_fixture("copilot/socket-two-replies/expected.json")).unwrap(),
    )
    .unwrap();
    let answers: Vec<(String, String)> = want["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let text = t["text"].as_str().unwrap();
            let text = match t["reasoning"].as_str() {
                Some(r) => format!(
                    "{}\n\n{text}",
                    personkit_shared::turn_text::reasoning_block(r)
                ),
                None => text.to_owned(),
            };
            (t["message_key"].as_str().unwrap().to_owned(), text)
        })
        .collect();
    let landed = |m: &[StoredMessage]| {
        answers.iter().all(|(k, t)| {
            m.iter()
                .any(|x| x.message_key.as_deref() == Some(k) && &x.content == t)
        })
    };
    // The bridge sends a socket's frames when it closes (or after 3 s without one).
    let until = Instant::now() + Duration::from_secs(30);
    while !landed(&read()) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(SETTLE);
    let m = read();
    assert!(landed(&m), "the answers in source form: {m:#?}");
    assert_eq!(m.len(), 4, "two prompts, two answers, each once: {m:#?}");
    for (k, _) in &answers {
        let a: Vec<_> = m
            .iter()
            .filter(|x| x.message_key.as_deref() == Some(k))
            .collect();
        assert_eq!(a.len(), 1, "{k}");
        assert_eq!(a[0].source_path.as_deref(), Some("network"), "{k}");
    }
    assert_eq!(
        m.iter().filter(|x| x.role == "user").count(),
        2,
        "the prompts, from the DOM: {m:#?}"
    );
}
