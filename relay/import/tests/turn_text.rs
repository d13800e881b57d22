//! One turn, three capture paths, one identity. A generated logical turn (answer paragraphs with links,
//! reasoning, tool calls with output, images, files, citations) is captured the three ways the product captures
//! it, each through its real entry point:
//! - **DOM**: the render tree the content script makes of the page, through `capture::api::capture`;
//! - **network**: the site's structured turn (`network::NetTurn`, as `parseNetwork` answers it), through
//!   `capture::api::capture` with `network.parsed`;
//! - **import**: the same structured turn in an export, through `convert::convert`.
//!
//! The three texts differ (the page's Markdown rendering, the site's source text, the archive with tool calls and
//! sources) but must fold to one identity: the same `identity::match_text` and `identity::words_hash`. Every
//! marker is checked to come from `personkit_shared::turn_text` on each path that writes it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_import::SourceConversation;
use personkit_import::convert::convert;
use personkit_shared::capture::{Redactor, api};
use personkit_shared::identity::{Path, match_text, words_hash};
use personkit_shared::network::{Citation, NetTurn, ToolCall};
use personkit_shared::turn_text;
use personkit_shared::wire::{ClientInfo, Role};
use proptest::prelude::*;
use serde_json::{Value, json};

const CID: &str = "6740a3f2-1c9e-8001-b2a4-3f0e8d7c1a55";
const KEY: &str = "a1b2c3d4-0002-4000-8000-000000000002";
/// 2026-11-22T10:00:00.000Z.
const NOW: u64 = 1_795_341_600_000;

#[derive(Debug, Clone)]
enum Piece {
    Word(String),
    Link { label: String, url: String },
}

/// A turn as the user saw it, before any path read it.
#[derive(Debug, Clone)]
struct Logical {
    role: Role,
    paragraphs: Vec<Vec<Piece>>,
    reasoning: Vec<String>,
    tools: Vec<(String, String, Option<String>)>,
    images: Vec<String>,
    files: Vec<String>,
    citations: Vec<Citation>,
}

impl Logical {
    /// The render tree the content script makes of the turn's DOM: reasoning in a `think` node, links as `a`,
    /// citation chips as `cite`, images and attachment chips; the page shows no tool input or output as text.
    fn dom_tree(&self) -> Value {
        let mut root = vec![json!("b")];
        if !self.reasoning.is_empty() {
            let mut think = vec![json!("think")];
            think.extend(self.reasoning.iter().map(|p| json!(["p", p])));
            root.push(Value::Array(think));
        }
        let last = self.paragraphs.len().saturating_sub(1);
        for (i, para) in self.paragraphs.iter().enumerate() {
            let mut p = vec![json!("p")];
            for (j, piece) in para.iter().enumerate() {
                if j > 0 {
                    p.push(json!(" "));
                }
                p.push(match piece {
                    Piece::Word(w) => json!(w),
                    Piece::Link { label, url } => json!(["a", {"href": url}, label]),
                });
            }
            if i == last {
                for c in &self.citations {
                    p.push(json!(["cite", {"href": c.url}]));
                }
            }
            root.push(Value::Array(p));
        }
        for alt in &self.images {
            root.push(json!(["p", ["img", {"alt": alt}]]));
        }
        for name in &self.files {
            root.push(json!(["file", {"name": name}]));
        }
        Value::Array(root)
    }

    /// The site's own record of the turn: Markdown source text (images and files as the parsers mark them),
    /// reasoning, tool calls and citations apart.
    fn net_turn(&self) -> NetTurn {
        let mut blocks: Vec<String> = self
            .paragraphs
            .iter()
            .map(|para| {
                para.iter()
                    .map(|piece| match piece {
                        Piece::Word(w) => w.clone(),
                        Piece::Link { label, url } => format!("[{label}]({url})"),
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        blocks.extend(self.images.iter().map(|_| turn_text::IMAGE.to_owned()));
        blocks.extend(self.files.iter().map(|n| turn_text::file(n)));
        NetTurn {
            surface: "browser-ext:chatgpt".into(),
            conversation_id: Some(CID.into()),
            message_key: KEY.into(),
            parent_key: None,
            role: self.role,
            text: blocks.join("\n\n"),
            reasoning: (!self.reasoning.is_empty()).then(|| self.reasoning.join("\n\n")),
            tool_calls: self
                .tools
                .iter()
                .map(|(name, input, output)| ToolCall {
                    name: name.clone(),
                    input: input.clone(),
                    output: output.clone(),
                    id: None,
                })
                .collect(),
            tool_output: None,
            citations: self.citations.clone(),
            model: None,
            created_at_ms: Some(NOW as i64),
            position: Some(0),
            on_current_branch: Some(true),
            hidden: false,
            unknown: Vec::new(),
        }
    }
}

/// The stored content of the one item a capture call queued.
fn queued_content(out: &Value) -> String {
    let items = out["changes"]["items_put"]
        .as_array()
        .expect("queued items");
    assert_eq!(items.len(), 1, "{out}");
    let item: Value = serde_json::from_str(items[0]["json"].as_str().unwrap()).unwrap();
    item["turn"]["content"].as_str().unwrap().to_owned()
}

/// One capture call on a capture core with empty state, as the worker makes it (the parsed network answer as its
/// own argument).
fn capture(input: &Value, parsed: Option<&Value>) -> Value {
    let mut core = api::Core::load("{}").unwrap();
    let parsed = parsed.map(Value::to_string);
    serde_json::from_str(&core.capture(&input.to_string(), parsed.as_deref()).unwrap()).unwrap()
}

fn capture_input(turns: Value) -> Value {
    json!({
        "url": format!("https://chatgpt.com/c/{CID}"),
        "title": "A chat",
        "turns": turns,
        "device_id": "dev-1",
        "app_version": "0.1.0",
        "now_ms": NOW,
        "settings": {"enabled": {"browser-ext:chatgpt": true}},
    })
}

/// The DOM path: the content script's render tree through the capture core.
fn by_dom(t: &Logical) -> String {
    let input = capture_input(json!([{
        "role": t.role.as_str(),
        "doc": t.dom_tree().to_string(),
    }]));
    queued_content(&capture(&input, None))
}

/// The network path: the parser's answer through the capture core.
fn by_network(turn: &NetTurn) -> String {
    let mut input = capture_input(json!([]));
    input["network"] = json!({
        "surface": "chatgpt",
        "kind": "conversation",
        "endpoint": format!("https://chatgpt.com/backend-api/conversation/{CID}"),
        "method": "GET",
    });
    let parsed = json!({"conversation_id": CID, "turns": [turn]});
    queued_content(&capture(&input, Some(&parsed)))
}

/// The import path: the same turn in an export, through the importers' conversion.
fn by_import(turn: &NetTurn) -> String {
    let conv = SourceConversation {
        surface: "browser-ext:chatgpt".into(),
        conversation_id: CID.into(),
        title: Some("A chat".into()),
        url: None,
        updated_at_ms: None,
        turns: vec![turn.clone()],
        unreadable: Default::default(),
    };
    let client = ClientInfo {
        app_version: "0.1.0".into(),
        device_id: "import".into(),
    };
    let c = convert(&conv, Path::Export, &Redactor::builtin(), &client);
    assert_eq!(c.observations.len(), 1, "{c:?}");
    c.observations[0].turn.content.clone()
}

fn word() -> impl Strategy<Value = String> {
    "[a-zäöüß]{2,9}"
}

fn words(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(word(), 1..max).prop_map(|w| w.join(" "))
}

fn url() -> impl Strategy<Value = String> {
    ("[a-z]{3,8}", "[a-z0-9]{1,6}").prop_map(|(h, p)| format!("https://{h}.example/{p}"))
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        4 => word().prop_map(Piece::Word),
        1 => (words(3), url()).prop_map(|(label, url)| Piece::Link { label, url }),
    ]
}

fn logical() -> impl Strategy<Value = Logical> {
    let role = prop_oneof![Just(Role::User), Just(Role::Assistant)];
    // Tool input and output: lines of arbitrary text, fences and marker lines among them.
    let line = prop_oneof![
        3 => "[a-z{}\":`\\[\\] ]{0,20}",
        1 => "`{3,5}[a-z]{0,4}",
        1 => prop::sample::select(vec!["[/reasoning]", "[tool output]", "Sources:", "- [a](https://x.example)", ""])
            .prop_map(str::to_owned),
    ];
    let tool_text = prop::collection::vec(line, 0..5).prop_map(|l| l.join("\n"));
    (
        role,
        prop::collection::vec(prop::collection::vec(piece(), 1..8), 1..4),
        prop::collection::vec(words(10), 0..3),
        prop::collection::vec(
            (
                "[a-z_]{2,10}",
                tool_text.clone(),
                prop::option::of(tool_text),
            ),
            0..3,
        ),
        prop::collection::vec(prop_oneof![Just(String::new()), words(4)], 0..3),
        prop::collection::vec(words(3), 0..3),
        prop::collection::vec(
            (
                url(),
                prop::option::of(words(5)),
                prop::option::of(words(12)),
            ),
            0..3,
        ),
    )
        .prop_map(
            |(role, paragraphs, reasoning, tools, images, files, cites)| {
                // Only an assistant reasons, calls tools and cites.
                let assistant = role == Role::Assistant;
                Logical {
                    role,
                    paragraphs,
                    reasoning: if assistant { reasoning } else { Vec::new() },
                    tools: if assistant { tools } else { Vec::new() },
                    images,
                    files,
                    citations: if assistant {
                        cites
                            .into_iter()
                            .map(|(url, title, quote)| Citation { url, title, quote })
                            .collect()
                    } else {
                        Vec::new()
                    },
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn dom_network_and_import_fold_to_one_identity(t in logical()) {
        let net = t.net_turn();
        let dom = by_dom(&t);
        let network = by_network(&net);
        let import = by_import(&net);
        let want = match_text(&dom);
        prop_assert!(!want.is_empty(), "{dom:?}");
        prop_assert_eq!(&match_text(&network), &want, "network {:?}\ndom {:?}", network, dom);
        prop_assert_eq!(&match_text(&import), &want, "import {:?}\ndom {:?}", import, dom);
        let hash = words_hash(t.role, &dom);
        prop_assert_eq!(words_hash(t.role, &network), hash.clone());
        prop_assert_eq!(words_hash(t.role, &import), hash);
        // The archive keeps what the page does not show as text.
        if !t.tools.is_empty() || !t.citations.is_empty() {
            prop_assert!(import.len() > network.len(), "{import:?}");
        }
    }
}

/// A turn with one of everything, for the per-marker checks.
fn everything() -> Logical {
    Logical {
        role: Role::Assistant,
        paragraphs: vec![vec![
            Piece::Word("Answer".into()),
            Piece::Link {
                label: "here".into(),
                url: "https://docs.example/a".into(),
            },
        ]],
        reasoning: vec!["Let me think.".into()],
        tools: vec![(
            "python".into(),
            "print(```)".into(),
            Some("```\n1\n```".into()),
        )],
        images: vec!["a bar chart".into()],
        files: vec!["report final.pdf".into()],
        citations: vec![Citation {
            url: "https://src.example/1".into(),
            title: Some("Source One".into()),
            quote: Some("quoted line".into()),
        }],
    }
}

#[test]
fn reasoning_block_comes_from_the_owner_on_every_path() {
    let t = everything();
    let block = turn_text::reasoning_block("Let me think.");
    let net = t.net_turn();
    for (path, text) in [
        ("dom", by_dom(&t)),
        ("network", by_network(&net)),
        ("import", by_import(&net)),
    ] {
        assert!(text.starts_with(&block), "{path}: {text:?}");
    }
}

#[test]
fn tool_blocks_and_sources_come_from_the_owner_in_the_archive_only() {
    let t = everything();
    let net = t.net_turn();
    let import = by_import(&net);
    let c = &net.tool_calls[0];
    for want in [
        turn_text::tool_block(&c.name, &c.input),
        turn_text::tool_output_block(c.output.as_deref().unwrap()),
        turn_text::sources_block(&net.citations),
    ] {
        assert!(import.contains(&want), "{want:?} not in {import:?}");
    }
    assert!(import.ends_with(&turn_text::sources_block(&net.citations)));
    for (path, text) in [("dom", by_dom(&t)), ("network", by_network(&net))] {
        assert!(!text.contains(turn_text::TOOL_PREFIX), "{path}: {text:?}");
        assert!(!text.contains(turn_text::SOURCES), "{path}: {text:?}");
    }
}

#[test]
fn image_file_and_citation_chips_come_from_the_owner() {
    let t = everything();
    let net = t.net_turn();
    let dom = by_dom(&t);
    assert!(dom.contains(&turn_text::image("a bar chart")), "{dom:?}");
    assert!(
        dom.contains(&turn_text::file("report final.pdf")),
        "{dom:?}"
    );
    assert!(
        dom.contains(&turn_text::cited("https://src.example/1")),
        "{dom:?}"
    );
    for (path, text) in [("network", by_network(&net)), ("import", by_import(&net))] {
        assert!(text.contains(turn_text::IMAGE), "{path}: {text:?}");
        assert!(
            text.contains(&turn_text::file("report final.pdf")),
            "{path}: {text:?}"
        );
    }
}

#[test]
fn hidden_context_is_marked_by_the_owner() {
    let mut net = everything().net_turn();
    net.hidden = true;
    let import = by_import(&net);
    let mut parts = net.parts();
    parts.hidden = false;
    let plain = turn_text::render(&parts, turn_text::Style::Archive);
    assert_eq!(import, format!("{}\n{plain}", turn_text::CONTEXT));
    // The page's capture never stores a hidden turn.
    let mut input = capture_input(json!([]));
    input["network"] = json!({
        "surface": "chatgpt", "kind": "conversation", "method": "GET",
        "endpoint": format!("https://chatgpt.com/backend-api/conversation/{CID}"),
    });
    let parsed = json!({"conversation_id": CID, "turns": [net]});
    let out = capture(&input, Some(&parsed));
    assert_eq!(out["queued"], 0, "{out}");
}

#[test]
fn the_parsers_write_the_owners_placeholders() {
    // ChatGPT's conversation JSON with an image part; Claude's with an attachment.
    let chatgpt = json!({
        "conversation_id": CID, "current_node": "u",
        "mapping": {"u": {"id": "u", "parent": null, "children": [], "message": {
            "id": "u", "author": {"role": "user"}, "create_time": 1.0,
            "content": {"content_type": "multimodal_text", "parts": [
                {"content_type": "image_asset_pointer"}, "What is this?"]}}}}
    });
    let parsed = personkit_shared::network::parse_network(
        "chatgpt",
        "conversation",
        chatgpt.to_string().as_bytes(),
    )
    .unwrap();
    assert!(
        parsed.turns[0].text.contains(turn_text::IMAGE),
        "{:?}",
        parsed.turns[0]
    );
    let claude = json!({
        "uuid": CID, "name": "x", "chat_messages": [{
            "uuid": "m1", "sender": "human", "text": "See the file.", "created_at": "2025-01-01T00:00:00Z",
            "attachments": [{"file_name": "notes  v2.txt"}]}]
    });
    let parsed = personkit_shared::network::parse_network(
        "claude",
        "conversation",
        claude.to_string().as_bytes(),
    )
    .unwrap();
    assert!(
        parsed.turns[0]
            .text
            .contains(&turn_text::file("notes  v2.txt")),
        "{:?}",
        parsed.turns[0]
    );
}
