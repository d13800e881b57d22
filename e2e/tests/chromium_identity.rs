//! Turn identity across the DOM and network paths (docs/wire-format.md, "Turn identity") in the real Chromium
//! with the built extension and the real relay. The ChatGPT fixture page carries the site's message ids
//! (`data-message-id`, as the site's markup does); the DOM path must key its turns by them. The same turn then
//! arrives as a network-path submission in the site's source Markdown and must upgrade the DOM rendering in place:
//! one turn, the source form kept, no revision.
//!
//! The network rendering comes the real way: the page itself loads ChatGPT's conversation JSON (the request is
//! made in the page's own world, as the site's script does when a conversation opens), the page-world
//! interceptor tees it, and the worker queues its turns as `path: "network"` items. The JSON is built here in the
//! site's mapping format (the structure of `shared/tests/fixtures/network/chatgpt/conversation-branches`) with the
//! fixture page's message ids and texts, the answer in its source Markdown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use personkit_e2e::fixtures::{self, Case};
use personkit_e2e::session::{LAND_TIMEOUT, SETTLE, Session};
use serde_json::json;

const CHATGPT: &str = "browser-ext:chatgpt";

fn case(name: &str) -> Case {
    fixtures::cases("chatgpt")
        .unwrap()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap()
}

#[test]
fn chatgpt_dom_turn_upgraded_by_its_network_rendering_without_a_revision() {
    let s = Session::start(&[CHATGPT]).unwrap();
    let c = case("chatgpt/short");
    let tab = s.open_case(&c).unwrap();
    let problems = s.wait_landed(&c, LAND_TIMEOUT).unwrap();
    assert!(problems.is_empty(), "DOM capture: {}", problems.join("\n"));
    std::thread::sleep(SETTLE);

    let thread = c.thread_ids()[0].clone();
    let conversation = c.expected.conversations[0].id.clone();
    let in_thread = || -> Vec<_> {
        s.messages(CHATGPT)
            .unwrap()
            .into_iter()
            .filter(|m| m.thread_id == thread)
            .collect()
    };
    // The DOM path keyed each turn by the site's message id (the fixture's data-message-id values).
    let dom = in_thread();
    assert_eq!(dom.len(), 4, "{dom:?}");
    let answer = dom
        .iter()
        .find(|m| {
            m.content
                .starts_with("The capital of Australia is Canberra.")
        })
        .unwrap();
    assert_eq!(
        answer.message_key.as_deref(),
        Some("48abcf3b-02"),
        "{answer:?}"
    );
    assert_eq!(answer.ordinal, Some(1));

    // The same turn as ChatGPT's conversation JSON has it: Markdown, the citation as a link.
    let source = "The capital of Australia is **Canberra**.\n\nIt was chosen as a compromise between Sydney and \
                  Melbourne. [Wikipedia](https://en.wikipedia.org/wiki/Canberra)";
    let turns = [
        ("48abcf3b-01", "user", "What is the capital of Australia?"),
        ("48abcf3b-02", "assistant", source),
        ("48abcf3b-03", "user", "And how many people live there?"),
        (
            "48abcf3b-04",
            "assistant",
            "About 470,000 people live in Canberra (2024 estimate).",
        ),
    ];
    let mut mapping = serde_json::Map::new();
    mapping.insert(
        "root".into(),
        json!({"id": "root", "message": null, "parent": null, "children": ["48abcf3b-01"]}),
    );
    for (i, (id, role, text)) in turns.iter().enumerate() {
        let parent = if i == 0 { "root" } else { turns[i - 1].0 };
        let children: Vec<&str> = turns.get(i + 1).map(|t| t.0).into_iter().collect();
        mapping.insert(
            (*id).into(),
            json!({"id": id, "parent": parent, "children": children, "message": {
                "id": id, "author": {"role": role, "name": null, "metadata": {}},
                "create_time": 1_795_341_600.0 + i as f64,
                "content": {"content_type": "text", "parts": [text]},
                "status": "finished_successfully", "weight": 1.0, "metadata": {}, "recipient": "all"}}),
        );
    }
    let body = json!({"title": "Australia", "mapping": mapping, "current_node": "48abcf3b-04",
        "conversation_id": conversation, "id": conversation});
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("conversation.json");
    std::fs::write(&file, serde_json::to_vec(&body).unwrap()).unwrap();
    s.server
        .route(&format!("/backend-api/conversation/{conversation}"), file);
    tab.eval(&format!(
        "fetch('/backend-api/conversation/{conversation}').then((r) => r.json()).then((j) => j.mapping ? 1 : 0)"
    ))
    .unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < until && !in_thread().iter().any(|m| m.content == source) {
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(SETTLE);

    // One turn, in source form, no revision; the other three untouched.
    let after = in_thread();
    assert_eq!(after.len(), 4, "an upgrade adds no row: {after:?}");
    let keyed: Vec<_> = after
        .iter()
        .filter(|m| m.message_key.as_deref() == Some("48abcf3b-02"))
        .collect();
    assert_eq!(keyed.len(), 1, "{keyed:?}");
    assert_eq!(keyed[0].content, source);
    assert!(keyed[0].is_current);
    assert!(after.iter().all(|m| m.is_current), "no revision: {after:?}");

    // The page is read again (a new tab, a fresh content script and the same worker): the DOM rendering it
    // sends again, if any, never downgrades the source form.
    let again = s.open_case(&c).unwrap();
    std::thread::sleep(SETTLE);
    let _ = again.close();
    let last = in_thread();
    assert_eq!(last.len(), 4, "{last:?}");
    assert_eq!(
        last.iter()
            .find(|m| m.message_key.as_deref() == Some("48abcf3b-02"))
            .unwrap()
            .content,
        source
    );
}
