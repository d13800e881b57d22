//! Harvesters of tools that keep their history in SQLite files or VS Code-style storage: Cursor (`state.vscdb`),
//! VS Code Copilot Chat (`chatSessions/*.json` / `.jsonl`), OpenCode (`opencode.db` and the older `storage/`
//! tree), Goose (`sessions.db`). Each test builds the tool's real file in a temporary home folder, with the
//! schema and record shapes the module docs of `personkit_import::harvest::{cursor, copilot_chat, opencode,
//! goose}` describe and source (public readers and the tools' own code, by repository and commit). SQLite
//! fixtures are written in WAL mode with the writer still open while the harvest runs, as when the tool is
//! running: what the harvest sees is in the `-wal` only.
//!
//! Per source: the turns land with the right roles, reasoning and tool calls; a second run stores nothing; a grown
//! session stores only its new turns; a malformed record is a problem while the rest lands; no record is silent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use personkit_import::Options;
use personkit_import::harvest::{self, Config, Report, Source};
use rusqlite::{Connection, params};
use serde_json::json;
use time::OffsetDateTime;

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

struct Home {
    _dir: tempfile::TempDir,
    home: PathBuf,
    db: PathBuf,
}

fn home() -> Home {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    Home {
        db: dir.path().join("corpus.db"),
        home,
        _dir: dir,
    }
}

fn run(h: &Home, c: &Config, s: Source) -> harvest::SourceReport {
    let mut conn = personkit_store::db::open(&h.db).unwrap();
    let r: Report =
        harvest::run(&mut conn, c, &[s], &Options::default(), now(), &mut |_| {}).unwrap();
    assert_eq!(r.sources.len(), 1);
    let s = r.sources.into_iter().next().unwrap();
    assert_eq!(s.records.silent, 0, "no record is dropped silently: {s:?}");
    assert_eq!(
        s.records.read,
        s.records.to_turns + s.records.skipped + s.records.problems,
        "{s:?}"
    );
    s
}

/// (conversation id, title, role, content) of the current turns of a surface, in thread order.
fn turns(db: &Path, surface: &str) -> Vec<(String, Option<String>, String, String)> {
    let conn = personkit_store::db::open_read_only(db).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT t.conversation_id, t.title, m.role, m.content FROM messages m JOIN threads t ON t.id = m.thread_id
             WHERE t.surface = ?1 AND m.is_current = 1
             ORDER BY t.conversation_id, m.ordinal IS NULL, m.ordinal, COALESCE(m.occurred_at, m.captured_at), m.pk",
        )
        .unwrap();
    stmt.query_map([surface], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

fn messages(db: &Path) -> i64 {
    let conn = personkit_store::db::open_read_only(db).unwrap();
    conn.query_row("SELECT count(*) FROM messages", [], |r| r.get(0))
        .unwrap()
}

/// A SQLite file as a running tool holds it: WAL mode, no checkpoint, the writer kept open.
fn wal_db(path: &Path, schema: &str) -> Connection {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let c = Connection::open(path).unwrap();
    c.execute_batch("PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;")
        .unwrap();
    c.execute_batch(schema).unwrap();
    c
}

fn wal_exists(path: &Path) -> bool {
    let mut w = path.as_os_str().to_owned();
    w.push("-wal");
    Path::new(&w).metadata().is_ok_and(|m| m.len() > 0)
}

// ---------------------------------------------------------------------------------------------------- Cursor

const CURSOR_DB: &str = ".config/Cursor/User/globalStorage/state.vscdb";
const CURSOR_SCHEMA: &str =
    "CREATE TABLE ItemTable (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB);
     CREATE TABLE cursorDiskKV (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB);";

fn kv(c: &Connection, key: &str, value: &str) {
    c.execute(
        "INSERT INTO cursorDiskKV(key, value) VALUES (?1, ?2)",
        params![key, value],
    )
    .unwrap();
}

fn composer(c: &Connection, id: &str, name: &str, headers: &[(&str, i64)]) {
    let h: Vec<_> = headers
        .iter()
        .map(|(b, t)| json!({"bubbleId": b, "type": t}))
        .collect();
    kv(
        c,
        &format!("composerData:{id}"),
        &json!({"_v": 10, "composerId": id, "name": name, "createdAt": 1_790_000_000_000_i64,
                "lastUpdatedAt": 1_790_000_100_000_i64, "unifiedMode": "agent",
                "fullConversationHeadersOnly": h, "conversation": []})
        .to_string(),
    );
}

fn bubble(c: &Connection, chat: &str, id: &str, v: serde_json::Value) {
    kv(c, &format!("bubbleId:{chat}:{id}"), &v.to_string());
}

const CHAT: &str = "7c1e0f4a-2b3d-4e5f-8a9b-0c1d2e3f4a5b";

fn cursor_fixture(path: &Path) -> Connection {
    let c = wal_db(path, CURSOR_SCHEMA);
    composer(
        &c,
        CHAT,
        "Fix the flaky parser test",
        &[
            ("b1", 1),
            ("b2", 2),
            ("b3", 2),
            ("b4", 2),
            ("b5", 2),
            ("b6", 2),
        ],
    );
    bubble(
        &c,
        CHAT,
        "b1",
        json!({"_v": 3, "type": 1, "bubbleId": "b1", "text": "Why does parse_orbit fail on CI?",
               "createdAt": "2026-09-01T10:00:00.000Z"}),
    );
    bubble(
        &c,
        CHAT,
        "b2",
        json!({"_v": 3, "type": 2, "bubbleId": "b2", "text": "",
               "thinking": {"text": "The test depends on the time zone."},
               "modelInfo": {"modelName": "claude-4-sonnet"}}),
    );
    bubble(
        &c,
        CHAT,
        "b3",
        json!({"_v": 3, "type": 2, "bubbleId": "b3", "text": "",
               "toolFormerData": {"name": "read_file", "toolCallId": "toolu_01",
                                  "rawArgs": "{\"target_file\":\"src/orbit.rs\"}",
                                  "result": "{\"contents\":\"fn parse_orbit() {}\"}", "status": "completed"}}),
    );
    // Cursor's placeholder around a tool run: nothing in it.
    bubble(
        &c,
        CHAT,
        "b4",
        json!({"_v": 3, "type": 2, "bubbleId": "b4", "text": ""}),
    );
    bubble(
        &c,
        CHAT,
        "b5",
        json!({"_v": 3, "type": 2, "bubbleId": "b5",
               "text": "It reads the local time zone; pin it to UTC in the test."}),
    );
    // b6 is a damaged record; b7 is not in the chat's headers (an edited-away message).
    kv(
        &c,
        &format!("bubbleId:{CHAT}:b6"),
        "{\"type\": 2, \"text\": ",
    );
    bubble(
        &c,
        CHAT,
        "b7",
        json!({"_v": 3, "type": 1, "bubbleId": "b7", "text": "an older draft"}),
    );
    // An older build's chat, its messages inline.
    kv(
        &c,
        "composerData:legacy-1",
        &json!({"composerId": "legacy-1", "name": "Old chat", "conversation": [
            {"bubbleId": "l1", "type": 1, "text": "hello"},
            {"bubbleId": "l2", "type": 2, "text": "Hi! How can I help?"}]})
        .to_string(),
    );
    // A chat record that is not JSON.
    kv(&c, "composerData:broken", "not json");
    c
}

#[test]
fn cursor_chats_land_with_reasoning_and_tools_and_a_second_run_stores_nothing() {
    let h = home();
    let path = h.home.join(CURSOR_DB);
    let writer = cursor_fixture(&path);
    assert!(wal_exists(&path), "the fixture's content is in the -wal");
    let c = Config::new(h.home.clone());
    let s = run(&h, &c, Source::Cursor);
    assert_eq!(s.surface, "harvest:cursor");
    assert_eq!((s.files, s.files_read), (1, 1), "{s:?}");
    // b1, b2, b3, b5 and the two inline messages.
    assert_eq!(s.stored, 6, "{s:?}");
    assert_eq!(s.records.to_turns, 6);
    assert_eq!(
        s.records_skipped
            .get("cursor message with no content")
            .copied(),
        Some(1)
    );
    assert_eq!(
        s.records_skipped
            .get("cursor message not in its chat (edited away)")
            .copied(),
        Some(1)
    );
    // The damaged message and the damaged chat, each named; the rest landed.
    assert_eq!(s.problems.len(), 2, "{:?}", s.problems);
    assert!(
        s.problems.iter().any(|p| p.message.contains("b6")),
        "{:?}",
        s.problems
    );
    assert!(
        s.problems.iter().any(|p| p.message.contains("broken")),
        "{:?}",
        s.problems
    );
    let t = turns(&h.db, "harvest:cursor");
    let chat: Vec<_> = t.iter().filter(|x| x.0 == CHAT).collect();
    let roles: Vec<&str> = chat.iter().map(|x| x.2.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "assistant", "assistant"]);
    assert_eq!(chat[0].1.as_deref(), Some("Fix the flaky parser test"));
    assert_eq!(chat[0].3, "Why does parse_orbit fail on CI?");
    assert!(chat[1].3.contains("[reasoning]") && chat[1].3.contains("time zone"));
    assert!(chat[2].3.contains("[tool: read_file]"), "{}", chat[2].3);
    assert!(
        chat[2].3.contains("parse_orbit"),
        "the tool's result is kept"
    );
    assert!(chat[3].3.contains("pin it to UTC"));
    let old: Vec<_> = t.iter().filter(|x| x.0 == "legacy-1").collect();
    assert_eq!(old.len(), 2);
    assert_eq!(old[0].1.as_deref(), Some("Old chat"));

    // Nothing changed: the file is not read again.
    let before = messages(&h.db);
    let s = run(&h, &c, Source::Cursor);
    assert_eq!((s.files_read, s.turns, s.stored), (0, 0, 0), "{s:?}");
    // Its state forgotten, the file is read whole again: every turn answers as a duplicate.
    personkit_store::db::open(&h.db)
        .unwrap()
        .execute("DELETE FROM harvest_files", [])
        .unwrap();
    let s = run(&h, &c, Source::Cursor);
    assert_eq!((s.stored, s.duplicate), (0, 6), "{s:?}");
    assert_eq!(messages(&h.db), before);
    drop(writer);
}

#[test]
fn a_growing_cursor_chat_stores_only_its_new_messages() {
    let h = home();
    let path = h.home.join(CURSOR_DB);
    let writer = cursor_fixture(&path);
    let c = Config::new(h.home.clone());
    assert_eq!(run(&h, &c, Source::Cursor).stored, 6);
    // The user asks again; the chat's headers list the new messages.
    bubble(
        &writer,
        CHAT,
        "b8",
        json!({"type": 1, "bubbleId": "b8", "text": "Done, thanks. Anything else flaky?"}),
    );
    bubble(
        &writer,
        CHAT,
        "b9",
        json!({"type": 2, "bubbleId": "b9", "text": "Not that I can see."}),
    );
    composer(
        &writer,
        CHAT,
        "Fix the flaky parser test",
        &[
            ("b1", 1),
            ("b2", 2),
            ("b3", 2),
            ("b4", 2),
            ("b5", 2),
            ("b6", 2),
            ("b8", 1),
            ("b9", 2),
        ],
    );
    let s = run(&h, &c, Source::Cursor);
    // The grown chat is sent again (its 4 turns answer as duplicates); the other chats, unchanged, are not.
    assert_eq!((s.files_read, s.stored, s.duplicate), (1, 2, 4), "{s:?}");
    assert_eq!(
        s.records_skipped
            .get("sessions unchanged since the last read")
            .copied(),
        Some(2),
        "{s:?}"
    );
    // The grown chat's damaged message is reported again; the damaged chat, unchanged, is not.
    assert_eq!(s.problems.len(), 1, "{s:?}");
    assert!(s.problems[0].message.contains("b6"), "{s:?}");
    let chat: Vec<_> = turns(&h.db, "harvest:cursor")
        .into_iter()
        .filter(|x| x.0 == CHAT)
        .collect();
    assert_eq!(chat.len(), 6);
    assert_eq!(chat[5].3, "Not that I can see.");
}

#[test]
fn a_file_that_is_not_a_cursor_database_is_a_problem_and_the_tools_override_is_honoured() {
    let h = home();
    // XDG_CONFIG_HOME moves Cursor's user folder on Linux.
    let mut c = Config::new(h.home.clone());
    let xdg = h.home.join("xdg");
    c.env
        .insert("XDG_CONFIG_HOME".into(), xdg.display().to_string());
    if cfg!(target_os = "linux") {
        assert_eq!(c.roots(Source::Cursor), vec![xdg.join("Cursor/User")]);
    }
    let root = c.roots(Source::Cursor).remove(0);
    let path = root.join("globalStorage/state.vscdb");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"this is not a SQLite file at all, just text").unwrap();
    let s = run(&h, &c, Source::Cursor);
    assert_eq!(s.stored, 0);
    assert_eq!(s.problems.len(), 1, "{s:?}");
    assert!(s.problems[0].message.contains("next run"), "{s:?}");
    // A real database replaces it: read on the next run.
    std::fs::remove_file(&path).unwrap();
    let w = cursor_fixture(&path);
    let s = run(&h, &c, Source::Cursor);
    assert_eq!(s.stored, 6, "{s:?}");
    drop(w);
}

// ------------------------------------------------------------------------------------------ VS Code Copilot Chat

const CODE_USER: &str = ".config/Code/User";

fn request(id: &str, text: &str, response: serde_json::Value) -> serde_json::Value {
    json!({"requestId": id, "message": {"text": text, "parts": []}, "timestamp": 1_790_000_000_000_i64,
           "modelId": "copilot/gpt-5", "variableData": {"variables": []}, "response": response,
           "result": {"metadata": {}}})
}

fn copilot_fixture(user: &Path) -> (PathBuf, PathBuf) {
    let flat = user.join("workspaceStorage/8f3a/chatSessions/0b7d-flat.json");
    std::fs::create_dir_all(flat.parent().unwrap()).unwrap();
    let mut first = request(
        "request_1",
        "Make the orbit test pass on CI",
        json!([
            {"kind": "thinking", "value": ["The test reads the ", "local time zone."], "id": "t1"},
            {"kind": "progressMessage", "content": {"value": "Searching the workspace"}},
            {"value": "The failure comes from ", "supportThemeIcons": false},
            {"kind": "inlineReference", "inlineReference": {"path": "/src/orbit.rs", "scheme": "file"}},
            {"value": ": it formats local time.", "supportThemeIcons": false},
            {"kind": "toolInvocationSerialized", "toolId": "run_in_terminal", "toolCallId": "call_7",
             "invocationMessage": {"value": "Running the tests"}, "pastTenseMessage": {"value": "Ran the tests: 12 passed"},
             "toolSpecificData": {"kind": "terminal", "commandLine": {"original": "cargo test orbit"}},
             "isComplete": true},
            {"kind": "textEditGroup", "uri": {"path": "/src/orbit.rs", "scheme": "file"}, "edits": [], "done": true},
            {"kind": "undoStop", "id": "u1"},
            {"kind": "holographicWidget", "data": 1}
        ]),
    );
    first["variableData"] =
        json!({"variables": [{"name": "orbit.rs", "id": "file:///src/orbit.rs"}]});
    let session = json!({"version": 3, "sessionId": "0b7d-flat", "creationDate": 1_790_000_000_000_i64,
    "customTitle": "Orbit test on CI", "requesterUsername": "ada", "responderUsername": "GitHub Copilot",
    "initialLocation": "panel", "requests": [
        first,
        {"message": {"text": "a request without its id"}, "response": []},
        request("request_3", "Thanks!", json!([{"value": "You're welcome."}]))
    ]});
    std::fs::write(&flat, serde_json::to_vec_pretty(&session).unwrap()).unwrap();
    let log = user.join("globalStorage/emptyWindowChatSessions/5e2c-log.jsonl");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    let lines = [
        json!({"kind": 0, "v": {"version": 3, "sessionId": "5e2c-log", "creationDate": 1_790_000_000_000_i64,
                                "requests": [request("req_a", "What is a monad?", json!([]))]}})
        .to_string(),
        json!({"kind": 1, "k": ["requests", 0, "response"], "v": [{"value": "A monoid in the category of endofunctors."}]})
            .to_string(),
        json!({"kind": 1, "k": ["customTitle"], "v": "Monads"}).to_string(),
        "{\"kind\": 2, \"k\": [\"requests\"], \"v\": [".to_owned() + "\u{0}garbage",
        json!({"kind": 2, "k": ["requests"], "v": [request("req_b", "Simpler, please.", json!([]))]}).to_string(),
        json!({"kind": 2, "k": ["requests", 1, "response"], "v": [{"value": "A way to chain steps."}]}).to_string(),
    ];
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    (flat, log)
}

#[test]
fn copilot_chat_sessions_flat_and_logged_land_and_a_second_run_stores_nothing() {
    let h = home();
    let user = h.home.join(CODE_USER);
    copilot_fixture(&user);
    let c = Config::new(h.home.clone());
    let s = run(&h, &c, Source::CopilotChat);
    assert_eq!(s.surface, "harvest:copilot-chat");
    assert_eq!((s.files, s.files_read), (2, 2), "{s:?}");
    // Flat: request 1 (user + answer), request 3 (user + answer); log: two requests, each user + answer.
    assert_eq!(s.stored, 8, "{s:?}");
    // The request without an id and the garbage line of the log: named, the rest landed.
    assert_eq!(s.problems.len(), 2, "{:?}", s.problems);
    assert!(s.problems.iter().any(|p| p.message.contains("requestId")));
    assert!(
        s.problems.iter().any(|p| p.line == Some(4)),
        "{:?}",
        s.problems
    );
    assert_eq!(
        s.records_skipped
            .get("copilot-chat response part progressMessage")
            .copied(),
        Some(1)
    );
    assert_eq!(s.unknown.get("copilot-chat:holographicWidget"), Some(&1));
    let t = turns(&h.db, "harvest:copilot-chat");
    let flat: Vec<_> = t.iter().filter(|x| x.0 == "0b7d-flat").collect();
    let roles: Vec<&str> = flat.iter().map(|x| x.2.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
    assert_eq!(flat[0].1.as_deref(), Some("Orbit test on CI"));
    assert!(flat[0].3.starts_with("Make the orbit test pass on CI"));
    assert!(flat[0].3.contains("[context: orbit.rs]"));
    let answer = &flat[1].3;
    assert!(
        answer.contains("The failure comes from `/src/orbit.rs`: it formats local time."),
        "{answer}"
    );
    assert!(
        answer.contains("[reasoning]") && answer.contains("local time zone."),
        "{answer}"
    );
    assert!(
        answer.contains("[tool: run_in_terminal]") && answer.contains("cargo test orbit"),
        "{answer}"
    );
    assert!(answer.contains("12 passed"), "{answer}");
    assert!(answer.contains("[tool: edit]"), "{answer}");
    assert!(
        !answer.contains("Searching the workspace"),
        "UI chrome is not the answer: {answer}"
    );
    let log: Vec<_> = t.iter().filter(|x| x.0 == "5e2c-log").collect();
    let texts: Vec<&str> = log.iter().map(|x| x.3.as_str()).collect();
    assert_eq!(
        texts,
        [
            "What is a monad?",
            "A monoid in the category of endofunctors.",
            "Simpler, please.",
            "A way to chain steps."
        ]
    );
    assert_eq!(log[0].1.as_deref(), Some("Monads"));
    // Nothing changed: nothing read, nothing stored.
    let s = run(&h, &c, Source::CopilotChat);
    assert_eq!((s.files_read, s.stored), (0, 0), "{s:?}");
}

#[test]
fn a_growing_and_then_compacted_copilot_chat_log_stores_only_new_turns() {
    let h = home();
    let user = h.home.join(CODE_USER);
    let (_, log) = copilot_fixture(&user);
    let c = Config::new(h.home.clone());
    assert_eq!(run(&h, &c, Source::CopilotChat).stored, 8);
    let before = messages(&h.db);
    // A new request is pushed, then its answer.
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str(
        &(json!({"kind": 2, "k": ["requests"], "v": [request("req_c", "And in Rust?", json!([]))]})
            .to_string() + "\n"),
    );
    text.push_str(
        &(json!({"kind": 2, "k": ["requests", 2, "response"], "v": [{"value": "Option and Result chain with and_then."}]})
            .to_string()
            + "\n"),
    );
    std::fs::write(&log, &text).unwrap();
    let s = run(&h, &c, Source::CopilotChat);
    assert_eq!((s.files_read, s.stored), (1, 2), "{s:?}");
    assert_eq!(messages(&h.db), before + 2);
    // VS Code compacts the log: one whole-session line replaces it. Same turns: nothing new.
    let session = json!({"version": 3, "sessionId": "5e2c-log", "customTitle": "Monads", "requests": [
        request("req_a", "What is a monad?", json!([{"value": "A monoid in the category of endofunctors."}])),
        request("req_b", "Simpler, please.", json!([{"value": "A way to chain steps."}])),
        request("req_c", "And in Rust?", json!([{"value": "Option and Result chain with and_then."}]))
    ]});
    std::fs::write(&log, json!({"kind": 0, "v": session}).to_string() + "\n").unwrap();
    let s = run(&h, &c, Source::CopilotChat);
    assert_eq!((s.files_read, s.stored, s.duplicate), (1, 0, 6), "{s:?}");
    assert!(s.problems.is_empty(), "{s:?}");
    assert_eq!(messages(&h.db), before + 2);
}

// ----------------------------------------------------------------------------------------------------- OpenCode

const OPENCODE_DB: &str = ".local/share/opencode/opencode.db";
const OPENCODE_SCHEMA: &str = "
    CREATE TABLE project (id TEXT PRIMARY KEY, worktree TEXT NOT NULL, time_created INTEGER, time_updated INTEGER);
    CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT NOT NULL, parent_id TEXT, slug TEXT, directory TEXT NOT NULL,
        title TEXT NOT NULL, version TEXT NOT NULL, time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL);
    CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, time_created INTEGER NOT NULL,
        time_updated INTEGER NOT NULL, data TEXT NOT NULL);
    CREATE INDEX message_session_idx ON message(session_id);
    CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT NOT NULL, session_id TEXT NOT NULL, time_created INTEGER NOT NULL,
        time_updated INTEGER NOT NULL, data TEXT NOT NULL);
    CREATE INDEX part_message_idx ON part(message_id);";

fn oc_message(c: &Connection, id: &str, at: i64, data: &str, parts: &[(&str, serde_json::Value)]) {
    c.execute(
        "INSERT INTO message(id, session_id, time_created, time_updated, data) VALUES (?1, 'ses_1', ?2, ?2, ?3)",
        params![id, at, data],
    )
    .unwrap();
    for (pid, p) in parts {
        c.execute(
            "INSERT INTO part(id, message_id, session_id, time_created, time_updated, data) VALUES (?1, ?2, 'ses_1', ?3, ?3, ?4)",
            params![pid, id, at, p.to_string()],
        )
        .unwrap();
    }
}

fn opencode_fixture(path: &Path) -> Connection {
    let c = wal_db(path, OPENCODE_SCHEMA);
    c.execute_batch(
        "INSERT INTO project VALUES ('prj_1', '/home/ada/src/orbit', 1790000000000, 1790000000000);
         INSERT INTO session(id, project_id, directory, title, version, time_created, time_updated)
           VALUES ('ses_1', 'prj_1', '/home/ada/src/orbit', 'Flaky orbit test', '1.18.30', 1790000000000, 1790000100000);",
    )
    .unwrap();
    oc_message(
        &c,
        "msg_01",
        1_790_000_000_000,
        &json!({"role": "user", "time": {"created": 1_790_000_000_000_i64}, "agent": "build"})
            .to_string(),
        &[
            (
                "prt_01a",
                json!({"type": "text", "text": "Why does the orbit test fail?"}),
            ),
            (
                "prt_01b",
                json!({"type": "text", "text": "Called the Read tool with src/orbit.rs", "synthetic": true}),
            ),
            (
                "prt_01c",
                json!({"type": "file", "mime": "text/plain", "filename": "orbit.rs", "url": "file:///src/orbit.rs"}),
            ),
        ],
    );
    oc_message(
        &c,
        "msg_02",
        1_790_000_001_000,
        &json!({"role": "assistant", "time": {"created": 1_790_000_001_000_i64, "completed": 1_790_000_005_000_i64},
                "modelID": "claude-sonnet-4", "providerID": "anthropic", "cost": 0.01,
                "tokens": {"input": 10, "output": 20, "reasoning": 5, "cache": {"read": 0, "write": 0}},
                "path": {"cwd": "/home/ada/src/orbit", "root": "/home/ada/src/orbit"}})
        .to_string(),
        &[
            ("prt_02a", json!({"type": "step-start"})),
            ("prt_02b", json!({"type": "reasoning", "text": "Look at the time zone handling."})),
            ("prt_02c", json!({"type": "tool", "tool": "bash", "callID": "call_1",
                               "state": {"status": "completed", "input": {"command": "cargo test orbit"},
                                         "output": "test orbit ... FAILED", "metadata": {"exit": 101}, "title": "cargo test"}})),
            ("prt_02d", json!({"type": "text", "text": "It formats local time; pin the test to UTC."})),
            ("prt_02e", json!({"type": "step-finish", "reason": "stop"})),
            ("prt_02f", json!({"type": "hologram"})),
        ],
    );
    // A message whose data is damaged, and an aborted step with nothing in it.
    oc_message(
        &c,
        "msg_03",
        1_790_000_006_000,
        "{\"role\": \"user\", ",
        &[],
    );
    oc_message(
        &c,
        "msg_04",
        1_790_000_007_000,
        &json!({"role": "assistant", "time": {"created": 1_790_000_007_000_i64}}).to_string(),
        &[("prt_04a", json!({"type": "step-start"}))],
    );
    c
}

#[test]
fn opencode_sessions_from_the_database_land_and_a_grown_session_adds_only_new_turns() {
    let h = home();
    let path = h.home.join(OPENCODE_DB);
    let w = opencode_fixture(&path);
    assert!(wal_exists(&path));
    let c = Config::new(h.home.clone());
    let s = run(&h, &c, Source::OpenCode);
    assert_eq!(s.surface, "harvest:opencode");
    assert_eq!((s.files, s.stored), (1, 2), "{s:?}");
    assert_eq!(s.problems.len(), 1, "{:?}", s.problems);
    assert!(s.problems[0].message.contains("msg_03"), "{:?}", s.problems);
    assert_eq!(
        s.records_skipped
            .get("opencode message with no content")
            .copied(),
        Some(1)
    );
    assert_eq!(s.unknown.get("opencode:hologram"), Some(&1));
    let t = turns(&h.db, "harvest:opencode");
    let roles: Vec<&str> = t.iter().map(|x| x.2.as_str()).collect();
    assert_eq!(roles, ["user", "assistant"]);
    assert_eq!(t[0].1.as_deref(), Some("Flaky orbit test"));
    assert!(
        t[0].3.starts_with("Why does the orbit test fail?"),
        "{}",
        t[0].3
    );
    assert!(
        t[0].3.contains("[injected: opencode]"),
        "text OpenCode added is not the user's: {}",
        t[0].3
    );
    assert!(t[0].3.contains("orbit.rs"));
    assert!(
        t[1].3.contains("[reasoning]") && t[1].3.contains("time zone"),
        "{}",
        t[1].3
    );
    assert!(
        t[1].3.contains("[tool: bash]") && t[1].3.contains("cargo test orbit"),
        "{}",
        t[1].3
    );
    assert!(
        t[1].3.contains("FAILED"),
        "the tool's output is kept: {}",
        t[1].3
    );
    assert!(t[1].3.contains("pin the test to UTC"));
    // Unchanged: not read again.
    let s = run(&h, &c, Source::OpenCode);
    assert_eq!((s.files_read, s.stored), (0, 0), "{s:?}");
    // The session grows by one exchange.
    oc_message(
        &w,
        "msg_05",
        1_790_000_009_000,
        &json!({"role": "user", "time": {"created": 1_790_000_009_000_i64}}).to_string(),
        &[("prt_05a", json!({"type": "text", "text": "Do it."}))],
    );
    oc_message(
        &w,
        "msg_06",
        1_790_000_010_000,
        &json!({"role": "assistant", "time": {"created": 1_790_000_010_000_i64}}).to_string(),
        &[(
            "prt_06a",
            json!({"type": "text", "text": "Done: TZ=UTC in the test."}),
        )],
    );
    let s = run(&h, &c, Source::OpenCode);
    assert_eq!((s.files_read, s.stored, s.duplicate), (1, 2, 2), "{s:?}");
    assert_eq!(turns(&h.db, "harvest:opencode").len(), 4);
    drop(w);
}

#[test]
fn opencode_older_json_tree_and_its_overrides() {
    let h = home();
    let mut c = Config::new(h.home.clone());
    let data = h.home.join("xdg-data");
    c.env
        .insert("XDG_DATA_HOME".into(), data.display().to_string());
    c.env
        .insert("OPENCODE_DB".into(), "/elsewhere/oc.db".into());
    assert_eq!(
        c.roots(Source::OpenCode),
        vec![data.join("opencode"), PathBuf::from("/elsewhere/oc.db")]
    );
    c.env.remove("OPENCODE_DB");
    let storage = data.join("opencode/storage");
    let write = |rel: &str, v: serde_json::Value| {
        let p = storage.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, v.to_string()).unwrap();
    };
    write(
        "session/prj_1/ses_old.json",
        json!({"id": "ses_old", "projectID": "prj_1", "title": "Old session", "directory": "/home/ada/src/orbit",
               "version": "0.3.0", "time": {"created": 1_750_000_000_000_i64, "updated": 1_750_000_100_000_i64}}),
    );
    write(
        "message/ses_old/msg_a.json",
        json!({"id": "msg_a", "sessionID": "ses_old", "role": "user", "time": {"created": 1_750_000_000_000_i64}}),
    );
    write(
        "part/msg_a/prt_a1.json",
        json!({"id": "prt_a1", "messageID": "msg_a", "sessionID": "ses_old", "type": "text", "text": "List the files."}),
    );
    write(
        "message/ses_old/msg_b.json",
        json!({"id": "msg_b", "sessionID": "ses_old", "role": "assistant", "modelID": "gpt-4.1",
               "time": {"created": 1_750_000_001_000_i64}}),
    );
    write(
        "part/msg_b/prt_b1.json",
        json!({"id": "prt_b1", "messageID": "msg_b", "type": "tool", "tool": "list", "callID": "c1",
               "state": {"status": "error", "input": {"path": "."}, "error": "permission denied"}}),
    );
    write(
        "part/msg_b/prt_b2.json",
        json!({"id": "prt_b2", "messageID": "msg_b", "type": "text", "text": "I could not list them."}),
    );
    std::fs::write(storage.join("message/ses_old/msg_c.json"), "{broken").unwrap();
    let s = run(&h, &c, Source::OpenCode);
    assert_eq!((s.files, s.stored), (1, 2), "{s:?}");
    assert_eq!(s.problems.len(), 1, "{:?}", s.problems);
    let t = turns(&h.db, "harvest:opencode");
    assert_eq!(t.len(), 2);
    assert_eq!(
        (t[0].2.as_str(), t[0].3.as_str()),
        ("user", "List the files.")
    );
    assert_eq!(t[0].1.as_deref(), Some("Old session"));
    assert!(
        t[1].3.contains("[tool: list]") && t[1].3.contains("permission denied"),
        "{}",
        t[1].3
    );
    let s = run(&h, &c, Source::OpenCode);
    assert_eq!((s.files_read, s.stored), (0, 0), "{s:?}");
}

// -------------------------------------------------------------------------------------------------------- Goose

const GOOSE_SCHEMA: &str = "
    CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP);
    CREATE TABLE sessions (id TEXT PRIMARY KEY, name TEXT NOT NULL DEFAULT '', description TEXT NOT NULL DEFAULT '',
        user_set_name BOOLEAN DEFAULT FALSE, session_type TEXT NOT NULL DEFAULT 'user', working_dir TEXT NOT NULL,
        created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
        extension_data TEXT DEFAULT '{}', total_tokens INTEGER, input_tokens INTEGER, output_tokens INTEGER,
        schedule_id TEXT, recipe_json TEXT);
    CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id),
        role TEXT NOT NULL, content_json TEXT NOT NULL, created_timestamp INTEGER NOT NULL,
        timestamp TIMESTAMP DEFAULT CURRENT_TIMESTAMP, tokens INTEGER, metadata_json TEXT);
    CREATE INDEX idx_messages_session ON messages(session_id);
    INSERT INTO schema_version(version) VALUES (5);";

fn goose_message(c: &Connection, role: &str, content: serde_json::Value, meta: serde_json::Value) {
    c.execute(
        "INSERT INTO messages(session_id, role, content_json, created_timestamp, metadata_json)
         VALUES ('20260901_1', ?1, ?2, 1790000000, ?3)",
        params![role, content.to_string(), meta.to_string()],
    )
    .unwrap();
}

fn goose_fixture(path: &Path) -> Connection {
    let c = wal_db(path, GOOSE_SCHEMA);
    c.execute(
        "INSERT INTO sessions(id, name, description, working_dir) VALUES ('20260901_1', 'Orbit tests', '', '/home/ada/src/orbit')",
        [],
    )
    .unwrap();
    let visible = json!({"userVisible": true, "agentVisible": true});
    goose_message(
        &c,
        "user",
        json!([{"type": "text", "text": "Run the orbit tests."}]),
        visible.clone(),
    );
    goose_message(
        &c,
        "assistant",
        json!([{"type": "thinking", "thinking": "I should run cargo test.", "signature": "sig"},
               {"type": "text", "text": "Running them now."},
               {"type": "toolRequest", "id": "toolu_1",
                "toolCall": {"status": "success", "value": {"name": "developer__shell", "arguments": {"command": "cargo test orbit"}}}}]),
        visible.clone(),
    );
    goose_message(
        &c,
        "user",
        json!([{"type": "toolResponse", "id": "toolu_1",
                "toolResult": {"status": "success", "value": [{"type": "text", "text": "test result: ok. 12 passed"}]}}]),
        visible.clone(),
    );
    // What Goose keeps for the model only (a summary of earlier context).
    goose_message(
        &c,
        "user",
        json!([{"type": "text", "text": "Summary: the user works on orbit."}]),
        json!({"userVisible": false, "agentVisible": true}),
    );
    goose_message(&c, "assistant", json!({"not": "a list"}), visible.clone());
    goose_message(
        &c,
        "assistant",
        json!([{"type": "text", "text": "All 12 pass."}, {"type": "toolConfirmationRequest", "id": "x", "toolName": "shell"}]),
        visible,
    );
    c
}

#[test]
fn goose_sessions_land_and_a_grown_session_adds_only_new_turns_and_the_overrides_move_it() {
    let h = home();
    let mut c = Config::new(h.home.clone());
    assert_eq!(
        c.roots(Source::Goose),
        vec![h.home.join(".local/share/goose/sessions")]
    );
    c.env.insert(
        "XDG_DATA_HOME".into(),
        h.home.join("xdg").display().to_string(),
    );
    assert_eq!(
        c.roots(Source::Goose),
        vec![h.home.join("xdg/goose/sessions")]
    );
    let root = h.home.join("goose-root");
    c.env
        .insert("GOOSE_PATH_ROOT".into(), root.display().to_string());
    assert_eq!(c.roots(Source::Goose), vec![root.join("data/sessions")]);
    let path = root.join("data/sessions/sessions.db");
    let w = goose_fixture(&path);
    assert!(wal_exists(&path));
    let s = run(&h, &c, Source::Goose);
    assert_eq!(s.surface, "harvest:goose");
    assert_eq!((s.files, s.stored), (1, 5), "{s:?}");
    assert_eq!(s.problems.len(), 1, "{:?}", s.problems);
    assert!(s.problems[0].message.contains("#5"), "{:?}", s.problems);
    assert_eq!(
        s.records_skipped
            .get("goose content toolConfirmationRequest")
            .copied(),
        Some(1)
    );
    let t = turns(&h.db, "harvest:goose");
    let roles: Vec<&str> = t.iter().map(|x| x.2.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "system", "assistant"]);
    assert_eq!(t[0].1.as_deref(), Some("Orbit tests"));
    assert_eq!(t[0].3, "Run the orbit tests.");
    assert!(
        t[1].3.contains("[reasoning]") && t[1].3.contains("cargo test"),
        "{}",
        t[1].3
    );
    assert!(t[1].3.contains("[tool: developer__shell]"), "{}", t[1].3);
    assert!(t[2].3.contains("12 passed"), "{}", t[2].3);
    assert_eq!(t[4].3, "All 12 pass.");
    assert!(
        t[3].3.starts_with("[context]") && t[3].3.contains("Summary"),
        "the message the user does not see is hidden context: {}",
        t[3].3
    );
    // Unchanged: nothing read. Grown: only the new turn.
    let s = run(&h, &c, Source::Goose);
    assert_eq!((s.files_read, s.stored), (0, 0), "{s:?}");
    goose_message(
        &w,
        "user",
        json!([{"type": "text", "text": "Thanks."}]),
        json!({"userVisible": true}),
    );
    let s = run(&h, &c, Source::Goose);
    assert_eq!((s.files_read, s.stored, s.duplicate), (1, 1, 5), "{s:?}");
    drop(w);
}

// ------------------------------------------------------------------------------------------- Cursor's agent CLI

const AGENT_FILE: &str = ".cursor/projects/home-ada-src-orbit/agent-transcripts/3f9c2d1e-aa10-4c5b-9e7d-1b2c3d4e5f60.jsonl";

fn agent_line(role: &str, content: serde_json::Value) -> String {
    json!({"role": role, "message": {"content": content}}).to_string()
}

#[test]
fn cursor_agent_transcripts_keep_the_users_words_apart_and_grow_incrementally() {
    let h = home();
    let path = h.home.join(AGENT_FILE);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let lines = [
        agent_line(
            "user",
            json!([{"type": "text", "text": "<timestamp>Monday, Sep 1, 2026, 10:00</timestamp>\n<user_query>\nFix the orbit test\n</user_query>"}]),
        ),
        agent_line(
            "assistant",
            json!([{"type": "thinking", "thinking": "Probably the time zone."},
                   {"type": "text", "text": "Let me look at the test."},
                   {"type": "tool_use", "id": "tool_1", "name": "Shell", "input": {"command": "cargo test orbit"}}]),
        ),
        agent_line(
            "user",
            json!([{"type": "text", "text": "<user_info>OS: linux; shell: bash</user_info>"}]),
        ),
        "{\"role\": \"assistant\", \"message\": ".to_owned(),
        agent_line(
            "assistant",
            json!([{"type": "text", "text": "Pinned the test to UTC."}]),
        ),
        agent_line("assistant", json!([])),
    ];
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let c = Config::new(h.home.clone());
    let s = run(&h, &c, Source::CursorAgent);
    assert_eq!(s.surface, "harvest:cursor-agent");
    assert_eq!((s.files, s.stored), (1, 4), "{s:?}");
    assert_eq!(s.problems.len(), 1, "{:?}", s.problems);
    assert_eq!(s.problems[0].line, Some(4));
    assert_eq!(
        s.records_skipped
            .get("cursor-agent message with no content")
            .copied(),
        Some(1)
    );
    let t = turns(&h.db, "harvest:cursor-agent");
    let roles: Vec<&str> = t.iter().map(|x| x.2.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "system", "assistant"]);
    assert_eq!(t[0].0, "3f9c2d1e-aa10-4c5b-9e7d-1b2c3d4e5f60");
    assert!(t[0].3.starts_with("Fix the orbit test"), "{}", t[0].3);
    assert!(t[0].3.contains("[injected: timestamp]"), "{}", t[0].3);
    assert!(!t[0].3.contains("<user_query>"), "{}", t[0].3);
    assert!(
        t[1].3.contains("[reasoning]") && t[1].3.contains("[tool: Shell]"),
        "{}",
        t[1].3
    );
    assert!(t[2].3.contains("[injected: user_info]"), "{}", t[2].3);
    // The file grows by one line and half of another (being written): only the whole line is taken.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    use std::io::Write;
    write!(
        f,
        "{}\n{{\"role\": \"user\", \"mess",
        agent_line(
            "user",
            json!([{"type": "text", "text": "<user_query>Thanks!</user_query>"}])
        )
    )
    .unwrap();
    drop(f);
    let s = run(&h, &c, Source::CursorAgent);
    assert_eq!((s.files_read, s.stored, s.duplicate), (1, 1, 0), "{s:?}");
    assert!(s.problems.is_empty(), "{s:?}");
    let s = run(&h, &c, Source::CursorAgent);
    assert_eq!((s.files_read, s.stored), (0, 0), "{s:?}");
    // CURSOR_CONFIG_DIR moves it.
    let mut moved = Config::new(h.home.clone());
    moved
        .env
        .insert("CURSOR_CONFIG_DIR".into(), "/opt/cursor-conf".into());
    assert_eq!(
        moved.roots(Source::CursorAgent),
        vec![PathBuf::from("/opt/cursor-conf/projects")]
    );
}

#[test]
fn cursors_older_chat_panel_in_a_workspace_database_lands() {
    let h = home();
    let path = h
        .home
        .join(".config/Cursor/User/workspaceStorage/4be1c0de/state.vscdb");
    let w = wal_db(&path, CURSOR_SCHEMA);
    // A workspace database of a newer build: the sidebar index only, no chat of the older panel.
    let plain = h
        .home
        .join(".config/Cursor/User/workspaceStorage/9a9a9a9a/state.vscdb");
    let w2 = wal_db(&plain, CURSOR_SCHEMA);
    w2.execute(
        "INSERT INTO ItemTable(key, value) VALUES ('composer.composerData', '{\"allComposers\": []}')",
        [],
    )
    .unwrap();
    let data = json!({"tabs": [{"tabId": "tab-1", "chatTitle": "Regex help", "bubbles": [
        {"type": "user", "id": "u1", "text": "How do I match a date?"},
        {"type": "ai", "id": "a1", "text": "Use \\d{4}-\\d{2}-\\d{2}."},
        {"type": "user", "text": ""},
        {"type": "system-note", "text": "?"}
    ]}]});
    w.execute(
        "INSERT INTO ItemTable(key, value) VALUES ('workbench.panel.aichat.view.aichat.chatdata', ?1)",
        params![data.to_string()],
    )
    .unwrap();
    let c = Config::new(h.home.clone());
    let s = run(&h, &c, Source::Cursor);
    assert_eq!((s.files, s.stored), (2, 3), "{s:?}");
    assert!(s.problems.is_empty(), "{s:?}");
    assert_eq!(s.unknown.get("cursor:bubble type system-note"), Some(&1));
    let t = turns(&h.db, "harvest:cursor");
    assert_eq!(t[0].0, "tab-1");
    assert_eq!(t[0].1.as_deref(), Some("Regex help"));
    assert_eq!((t[0].2.as_str(), t[1].2.as_str()), ("user", "assistant"));
    assert!(t[1].3.contains("\\d{4}"));
    assert_eq!(run(&h, &c, Source::Cursor).stored, 0);
    drop((w, w2));
}
