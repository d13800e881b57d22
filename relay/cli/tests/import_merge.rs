//! `personkit import` against a running relay: a conversation captured live (DOM-path items over HTTP, as the
//! extension sends them) and the same conversation imported from its official export, in both orders, is one
//! thread with no turn twice, showing the export's source text. The import runs while `serve` holds the corpus
//! (WAL, busy timeout). The export is the ChatGPT fixture of `relay/import/tests/fixtures/chatgpt/branches`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::path::PathBuf;

use personkit_shared::wire::{ClientInfo, Role, build_observation};
use personkit_testkit::{Relay, temp_db, workspace_root};
use serde_json::{Value, json};

const CONV: &str = "67000000-0000-4000-8000-00000000c0a1";
const SURFACE: &str = "browser-ext:chatgpt";

fn export_dir() -> PathBuf {
    workspace_root().join("relay/import/tests/fixtures/chatgpt/branches")
}

fn expected_turns() -> Vec<Value> {
    let v: Value =
        serde_json::from_slice(&std::fs::read(export_dir().join("expected.json")).unwrap())
            .unwrap();
    v["threads"][0]["turns"].as_array().unwrap().clone()
}

/// What the DOM path sends for the shown thread of the conversation: the rendered text (Markdown marks gone,
/// reasoning in the renderer's block), the site's message id read from `data-message-id`, the site's turn
/// number.
fn dom_items() -> Vec<Value> {
    let client = ClientInfo {
        app_version: "0.1.0".into(),
        device_id: "dev-dom".into(),
    };
    let turns: [(Role, &str, &str, u32); 4] = [
        (Role::User, "u1", "How do I reverse a list in Python? 🐍", 1),
        (
            Role::Assistant,
            "a1b",
            "[reasoning]\nThought for 2 seconds\n[/reasoning]\n\nUse lst[::-1] for a copy or lst.reverse() in place.",
            2,
        ),
        (Role::User, "u2", "[image]\nWhat does this print?", 3),
        (Role::Assistant, "a5", "Done — ✓ 完成.", 6),
    ];
    turns
        .iter()
        .map(|(role, key, text, n)| {
            let mut o = build_observation(
                SURFACE,
                CONV,
                *role,
                text,
                Some(*n),
                Some(key),
                &personkit_testkit::now_rfc3339(),
                client.clone(),
            );
            o.url = Some(format!("https://chatgpt.com/c/{CONV}"));
            o.turn.path = Some(personkit_shared::identity::Path::Dom);
            o.turn.ordinal_source = Some(personkit_shared::identity::OrdinalSource::Site);
            serde_json::to_value(&o).unwrap()
        })
        .collect()
}

/// `personkit import <fixture> --json`: the fixture holds one broken conversation, so the command reports it and
/// exits non-zero after importing the rest.
fn import(relay: &Relay) -> Value {
    let dir = export_dir();
    let out = relay.cli(&["import", dir.to_str().unwrap(), "--json"]);
    assert!(!out.status.success(), "a broken conversation is a failure");
    assert!(
        out.stderr.contains("1 part(s)") && out.stderr.contains("could not be imported"),
        "{}",
        out.stderr
    );
    let s: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        s["problems"][0]["conversation_id"], "67000000-0000-4000-8000-00000000c0b2",
        "{s}"
    );
    s
}

/// The conversation's one thread: its current turns (role, text) in order, and the count of all its rows.
fn thread_state(relay: &Relay) -> (Vec<Value>, usize, Vec<Value>) {
    let conn = personkit_store::db::open_read_only(&relay.db).unwrap();
    let threads: i64 = conn
        .query_row(
            "SELECT count(*) FROM threads WHERE conversation_id = ?1",
            [CONV],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(threads, 1, "one conversation, one thread");
    let id = personkit_shared::ids::thread_id(SURFACE, CONV).to_string();
    let d = personkit_store::read::get_thread(&conn, &id, false, 200, None).unwrap();
    let turns = d
        .turns
        .iter()
        .map(
            |t| json!({"role": t.role, "content": t.content, "other_revisions": t.revisions.len()}),
        )
        .collect();
    let rows: i64 = conn
        .query_row(
            "SELECT count(*) FROM messages WHERE thread_id = ?1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    let keys: Vec<Value> = {
        let mut st = conn
            .prepare("SELECT message_key FROM messages WHERE thread_id = ?1 AND is_current = 1")
            .unwrap();
        st.query_map([&id], |r| r.get::<_, Option<String>>(0))
            .unwrap()
            .map(|k| json!(k.unwrap()))
            .collect()
    };
    (turns, rows as usize, keys)
}

fn check_merged(relay: &Relay, order: &str) {
    let (turns, rows, keys) = thread_state(relay);
    assert_eq!(
        turns,
        expected_turns(),
        "{order}: the export's text, in order"
    );
    // 12 shown turns plus the two of the abandoned branch; no DOM rendering left as a turn of its own (the
    // "Thought for 2 seconds" recap the DOM keeps inside its reasoning block is no turn of the export's either).
    assert_eq!(rows, 14, "{order}: rows of the thread");
    let distinct: HashSet<String> = keys.iter().map(|k| k.to_string()).collect();
    assert_eq!(
        distinct.len(),
        keys.len(),
        "{order}: a turn twice: {keys:?}"
    );
}

#[test]
fn live_then_import_is_one_thread_with_the_export_text() {
    let (_dir, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let token = relay.pair_printed("browser");
    let first = relay.http.send_batch(&token, &dom_items());
    assert_eq!(first["stored"], 4, "{first}");

    let s = import(&relay);
    // u1 has the same text on both paths (a duplicate that takes the export's place); a1b, u2 and a5 are
    // upgraded in place (stored, no new row).
    assert_eq!(s["conversations"], 2, "{s}");
    assert_eq!(s["turns"], 16, "{s}");
    assert_eq!(s["rejected"], 0, "{s}");
    check_merged(&relay, "live, then import");

    // Live capture goes on after the import: the same DOM reads change nothing.
    let again = relay.http.send_batch(&token, &dom_items());
    assert_eq!(again["stored"], 0, "{again}");
    assert_eq!(again["duplicate"], 4, "{again}");
    check_merged(&relay, "live, import, live again");
    // And a second import stores nothing.
    let s2 = import(&relay);
    assert_eq!(s2["stored"], 0, "{s2}");
}

#[test]
fn import_then_live_is_one_thread_with_the_export_text() {
    let (_dir, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let token = relay.pair_printed("browser");
    let s = import(&relay);
    assert_eq!(s["stored"], 16, "{s}");

    let r = relay.http.send_batch(&token, &dom_items());
    assert_eq!(
        r["stored"], 0,
        "DOM renderings of imported turns fold into them: {r}"
    );
    assert_eq!(r["duplicate"], 4, "{r}");
    check_merged(&relay, "import, then live");
}

#[test]
fn import_reports_bad_input_with_the_file_and_exits_non_zero() {
    let (dir, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let bad = dir.path().join("conversations.json");
    std::fs::write(&bad, br#"{"not": "an export"}"#).unwrap();
    let out = relay.cli(&["import", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("conversations.json") && out.stderr.contains("not a Grok export"),
        "{}",
        out.stderr
    );
    let missing = relay.cli(&["import", "/nonexistent/export.zip"]);
    assert!(!missing.status.success());
    assert!(
        missing.stderr.contains("/nonexistent/export.zip"),
        "{}",
        missing.stderr
    );
}
