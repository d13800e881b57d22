//! The network parsers (`personkit_shared::network`) against recorded-format fixtures, one directory per case
//! under `tests/fixtures/network/<surface>/<case>/` (`stream.*` or `conversation.json`, and `expected.json`), all
//! checked by one function; plus generated long conversations and property tests over every stream fixture.
//!
//! To rewrite the expected files after a deliberate change: `NETPARSE_BLESS=1 cargo test -p personkit-shared
//! --test network`, then read the diff.

use std::path::{Path, PathBuf};

use personkit_shared::network::{self, NetStream, NetTurn, Surface};
use proptest::prelude::*;
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/network")
}

/// Every case: (surface, case name, input file, kind).
fn cases() -> Vec<(Surface, String, PathBuf, &'static str)> {
    let mut out = Vec::new();
    for s in Surface::ALL {
        let name = s.id().trim_start_matches("browser-ext:");
        let Ok(dir) = std::fs::read_dir(fixtures().join(name)) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
        dirs.sort();
        for d in dirs {
            let Ok(files) = std::fs::read_dir(&d) else {
                continue;
            };
            for f in files.filter_map(|e| e.ok().map(|e| e.path())) {
                let fname = f
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default()
                    .to_owned();
                let kind = if fname.starts_with("stream.") {
                    "stream"
                } else if fname == "conversation.json" {
                    "conversation"
                } else {
                    continue;
                };
                let case = d
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default()
                    .to_owned();
                out.push((s, case, f, kind));
            }
        }
    }
    out
}

fn outcome(surface: Surface, kind: &str, bytes: &[u8]) -> Value {
    match network::parse_network(surface.id(), kind, bytes) {
        Ok(p) => serde_json::to_value(&p).unwrap_or_else(|e| panic!("serialise: {e}")),
        Err(e) => json!({"error": e.code(), "detail": e.to_string()}),
    }
}

fn check(surface: Surface, case: &str, input: &Path, kind: &str) {
    let bytes = std::fs::read(input).unwrap_or_else(|e| panic!("{}: {e}", input.display()));
    let got = outcome(surface, kind, &bytes);
    let expected_path = input.with_file_name("expected.json");
    if std::env::var_os("NETPARSE_BLESS").is_some() {
        let text = serde_json::to_string_pretty(&got).unwrap_or_default() + "\n";
        std::fs::write(&expected_path, text).unwrap_or_else(|e| panic!("write: {e}"));
        return;
    }
    let expected: Value = std::fs::read_to_string(&expected_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| panic!("{}: missing or not JSON", expected_path.display()));
    assert_eq!(
        got,
        expected,
        "{} {case}: got\n{}",
        surface.id(),
        serde_json::to_string_pretty(&got).unwrap_or_default()
    );
}

#[test]
fn every_fixture_matches_its_expected_result() {
    let all = cases();
    assert!(all.len() >= 18, "fixtures missing: found {}", all.len());
    for (s, case, input, kind) in &all {
        check(*s, case, input, kind);
    }
}

/// Feeds `chunks` and collects every turn that came out, with the final error if any.
fn drive(surface: Surface, chunks: &[&[u8]]) -> (Vec<NetTurn>, Option<String>) {
    let mut p = network::stream_parser(surface);
    let mut turns = Vec::new();
    for c in chunks {
        match p.push(c) {
            Ok(t) => turns.extend(t),
            Err(e) => return (turns, Some(e.code().to_owned())),
        }
    }
    match p.finish() {
        Ok(t) => turns.extend(t),
        Err(e) => return (turns, Some(e.code().to_owned())),
    }
    (turns, None)
}

fn stream_cases() -> Vec<(Surface, String, Vec<u8>)> {
    cases()
        .into_iter()
        .filter(|c| c.3 == "stream")
        .map(|(s, case, p, _)| {
            let b = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (s, case, b)
        })
        .collect()
}

fn split_at_points(bytes: &[u8], mut points: Vec<usize>) -> Vec<&[u8]> {
    points.iter_mut().for_each(|p| *p %= bytes.len() + 1);
    points.sort_unstable();
    let mut out = Vec::new();
    let mut last = 0;
    for p in points {
        out.push(&bytes[last..p]);
        last = p;
    }
    out.push(&bytes[last..]);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any chunking of a recorded stream yields exactly the same turns (and the same error, if any).
    #[test]
    fn any_chunking_yields_the_same_turns(points in proptest::collection::vec(any::<usize>(), 0..40)) {
        for (s, case, bytes) in stream_cases() {
            let whole = drive(s, &[&bytes]);
            let chunks = split_at_points(&bytes, points.clone());
            let split = drive(s, &chunks);
            prop_assert_eq!(&whole, &split, "{} {}", s.id(), case);
        }
    }

    /// Byte-at-a-time is the hardest chunking; the same turns again.
    #[test]
    fn arbitrary_bytes_are_an_error_never_a_panic(
        surface in 0usize..6,
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let s = Surface::ALL[surface];
        let (turns, err) = drive(s, &[&bytes]);
        prop_assert!(turns.is_empty() && err.is_some(), "{}: {turns:?} {err:?}", s.id());
    }

    /// Recorded streams with bytes flipped or spliced: any result but a panic.
    #[test]
    fn mangled_streams_never_panic(
        which in any::<usize>(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
    ) {
        let all = stream_cases();
        let (s, _, mut bytes) = all[which % all.len()].clone();
        for (at, b) in flips {
            let n = bytes.len().max(1);
            if let Some(x) = bytes.get_mut(at % n) {
                *x = b;
            }
        }
        let _ = drive(s, &[&bytes]);
        let _ = network::parse_network(s.id(), "conversation", &bytes);
    }
}

/// A stream cut at any byte yields no partial turn: every turn it yields is one the whole stream yields,
/// identical and in order; and when a turn is missing without an error, that turn's message had not begun
/// before the cut (a socket may close between two replies).
#[test]
fn a_truncated_stream_yields_no_partial_turn() {
    for (s, case, bytes) in stream_cases() {
        let (full, full_err) = drive(s, &[&bytes]);
        if full_err.is_some() {
            continue;
        }
        for cut in 0..bytes.len() {
            let (turns, err) = drive(s, &[&bytes[..cut]]);
            for t in &turns {
                assert!(
                    full.contains(t),
                    "{} {case} cut at {cut}: a turn that the whole stream does not have: {t:?}",
                    s.id()
                );
            }
            if err.is_none() {
                assert_eq!(
                    turns[..],
                    full[..turns.len()],
                    "{} {case} cut at {cut}",
                    s.id()
                );
            }
            if turns.len() < full.len() && err.is_none() {
                let next = full[turns.len()].message_key.as_bytes();
                let begun = bytes[..cut].windows(next.len()).any(|w| w == next);
                assert!(
                    !begun,
                    "{} {case} cut at {cut}: {} of {} turns and no error, the next one had begun",
                    s.id(),
                    turns.len(),
                    full.len()
                );
            }
        }
    }
}

#[test]
fn one_byte_chunks_yield_the_same_turns() {
    for (s, case, bytes) in stream_cases() {
        let whole = drive(s, &[&bytes]);
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(whole, drive(s, &singles), "{} {case}", s.id());
    }
}

/// A ChatGPT conversation of `n` turns on one branch, ids `n-<i>`, under the usual empty root.
fn chatgpt_long(n: usize) -> Vec<u8> {
    let mut mapping = serde_json::Map::new();
    mapping.insert(
        "root".into(),
        json!({"id": "root", "message": null, "parent": null, "children": ["n-0"]}),
    );
    for i in 0..n {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let text = format!(
            "Turn {i}: {} — ünïcödé ✓\n\n```\ncode {i}\n```",
            "word ".repeat(i % 17)
        );
        let parent = if i == 0 {
            "root".to_owned()
        } else {
            format!("n-{}", i - 1)
        };
        let children: Vec<String> = if i + 1 < n {
            vec![format!("n-{}", i + 1)]
        } else {
            vec![]
        };
        mapping.insert(
            format!("n-{i}"),
            json!({"id": format!("n-{i}"), "parent": parent, "children": children, "message": {
                "id": format!("n-{i}"), "author": {"role": role}, "create_time": 1_795_000_000.0 + i as f64,
                "content": {"content_type": "text", "parts": [text]}, "status": "finished_successfully",
                "metadata": {}, "recipient": "all"}}),
        );
    }
    serde_json::to_vec(
        &json!({"conversation_id": "long", "title": "long", "current_node": format!("n-{}", n - 1),
        "mapping": mapping}),
    )
    .unwrap_or_default()
}

#[test]
fn a_500_turn_conversation_yields_all_500_in_order() {
    let c = network::parse_conversation(Surface::ChatGpt, &chatgpt_long(500))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.turns.len(), 500);
    for (i, t) in c.turns.iter().enumerate() {
        assert_eq!(t.message_key, format!("n-{i}"));
        assert_eq!(t.position, Some(i as u32));
        assert_eq!(t.on_current_branch, Some(true));
        let parent = (i > 0).then(|| format!("n-{}", i - 1));
        assert_eq!(t.parent_key, parent);
        assert!(t.text.starts_with(&format!("Turn {i}: ")), "{}", t.text);
    }

    // The same length as a Claude tree, newest first in the list (order comes from the tree, not the list).
    let msgs: Vec<Value> = (0..500)
        .rev()
        .map(|i| {
            json!({"uuid": format!("m{i}"), "sender": if i % 2 == 0 {"human"} else {"assistant"},
                "created_at": format!("2026-11-20T{:02}:{:02}:{:02}Z", i / 3600, i / 60 % 60, i % 60),
                "parent_message_uuid": if i == 0 { "00000000-0000-4000-8000-000000000000".to_owned() } else { format!("m{}", i - 1) },
                "content": [{"type": "text", "text": format!("t{i}")}]})
        })
        .collect();
    let body = serde_json::to_vec(
        &json!({"uuid": "c", "current_leaf_message_uuid": "m499", "chat_messages": msgs}),
    )
    .unwrap_or_default();
    let c = network::parse_conversation(Surface::Claude, &body).unwrap_or_else(|e| panic!("{e}"));
    let keys: Vec<String> = c.turns.iter().map(|t| t.message_key.clone()).collect();
    let want: Vec<String> = (0..500).map(|i| format!("m{i}")).collect();
    assert_eq!(keys, want);
    assert!(c.turns.iter().all(|t| t.on_current_branch == Some(true)));
}

#[test]
fn a_deep_hostile_tree_does_not_overflow_the_stack() {
    // 200,000 nodes in one chain, plus a cycle: iterative ordering, no recursion.
    let n = 200_000;
    let msgs: Vec<Value> = (0..n)
        .map(|i| {
            json!({"uuid": format!("m{i}"), "sender": "human",
                "parent_message_uuid": format!("m{}", if i == 0 { n - 1 } else { i - 1 }), "text": ""})
        })
        .collect();
    let body = serde_json::to_vec(&json!({"chat_messages": msgs})).unwrap_or_default();
    let c = network::parse_conversation(Surface::Claude, &body).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.turns.len(), n);
}

#[test]
fn stream_parsers_refuse_bytes_after_finish_and_keep_their_error() {
    let mut p = network::stream_parser(Surface::Claude);
    assert!(p.push(b"data: not json\n\n").is_err());
    let first = p.push(b"").err();
    assert!(first.is_some());
    assert_eq!(p.finish().err(), first);
    let mut p: Box<dyn NetStream> = network::stream_parser(Surface::Grok);
    let _ = p.finish();
    assert!(p.push(b"{}").is_err());
}

/// The same message seen in the stream and later in the conversation JSON comes out with the same key, parent,
/// role, model and text: the two paths agree on a turn's identity and source form.
#[test]
fn stream_and_conversation_agree_on_a_turn() {
    let bytes =
        std::fs::read(fixtures().join("chatgpt/stream-answer/stream.sse")).unwrap_or_default();
    let (streamed, err) = drive(Surface::ChatGpt, &[&bytes]);
    assert_eq!(err, None);
    let [user, answer] = &streamed[..] else {
        panic!("expected two turns, got {streamed:?}");
    };
    let node = |t: &NetTurn, parent: &str, children: Vec<&str>| {
        json!({"id": t.message_key, "parent": parent, "children": children, "message": {
            "id": t.message_key, "author": {"role": t.role.as_str()}, "create_time": t.created_at_ms.map(|ms| ms as f64 / 1000.0),
            "content": {"content_type": "text", "parts": [t.text]}, "status": "finished_successfully",
            "metadata": {"model_slug": t.model}, "recipient": "all", "channel": "final"}})
    };
    let body = json!({"conversation_id": user.conversation_id, "current_node": answer.message_key, "mapping": {
        "client-created-root": {"id": "client-created-root", "message": null, "parent": null, "children": [user.message_key]},
        user.message_key.clone(): node(user, "client-created-root", vec![answer.message_key.as_str()]),
        answer.message_key.clone(): node(answer, &user.message_key, vec![]),
    }});
    let conv = network::parse_conversation(Surface::ChatGpt, body.to_string().as_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(conv.turns.len(), 2);
    for (s, c) in streamed.iter().zip(&conv.turns) {
        assert_eq!(
            (
                &s.message_key,
                &s.parent_key,
                s.role,
                &s.model,
                &s.text,
                s.created_at_ms,
                &s.conversation_id
            ),
            (
                &c.message_key,
                &c.parent_key,
                c.role,
                &c.model,
                &c.text,
                c.created_at_ms,
                &c.conversation_id
            )
        );
    }
}
