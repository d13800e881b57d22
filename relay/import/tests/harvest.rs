//! Harvesters on temporary home folders (the fixtures under `tests/fixtures/harvest/`, whose README says where
//! each structure comes from): every tool's turns, a session file that grows between runs, a rewritten Gemini
//! CLI session, a replaced file, redaction before storage, a garbage line, running twice, aider's last block.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use personkit_import::Options;
use personkit_import::harvest::{self, Config, Report, Source};
use time::OffsetDateTime;

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/harvest")
}

fn copy_tree(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(from).unwrap();
        let dest = to.join(rel);
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

struct Home {
    _dir: tempfile::TempDir,
    home: PathBuf,
    db: PathBuf,
}

/// A temporary home with the fixture folders of `tools` copied in (aider's project folder as `orbit`).
fn home(tools: &[&str]) -> Home {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    for t in tools {
        copy_tree(&fixtures().join(t), &home);
    }
    Home {
        db: dir.path().join("corpus.db"),
        home,
        _dir: dir,
    }
}

fn config(h: &Home) -> Config {
    let mut c = Config::new(h.home.clone());
    c.aider_folders.push(h.home.join("orbit"));
    c.settle = Duration::ZERO;
    c
}

fn run_with(h: &Home, c: &Config, sources: &[Source], patterns: &[&str]) -> Report {
    let mut conn = personkit_store::db::open(&h.db).unwrap();
    let opts = Options {
        patterns: patterns.iter().map(|p| (*p).to_owned()).collect(),
        ..Options::default()
    };
    harvest::run(&mut conn, c, sources, &opts, now(), &mut |_| {}).unwrap()
}

fn run(h: &Home, sources: &[Source]) -> Report {
    run_with(h, &config(h), sources, &[])
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

fn count(db: &Path, sql: &str) -> i64 {
    let conn = personkit_store::db::open_read_only(db).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn one(r: &Report) -> &harvest::SourceReport {
    assert_eq!(r.sources.len(), 1, "{r:?}");
    &r.sources[0]
}

/// Writes a Claude Code session file of `(uuid, parent, type, text, timestamp)` lines (the line shape of
/// `fixtures/harvest/README.md`).
fn cc_session(h: &Home, sid: &str, lines: &[(&str, Option<&str>, &str, &str, &str)]) -> PathBuf {
    let dir = h.home.join(".claude/projects/-home-ada-src-orbit");
    std::fs::create_dir_all(&dir).unwrap();
    let text: Vec<String> = lines
        .iter()
        .map(|(uuid, parent, kind, text, at)| {
            serde_json::json!({
                "type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": sid, "timestamp": at,
                "isSidechain": false, "message": {"role": kind, "content": text}
            })
            .to_string()
        })
        .collect();
    let path = dir.join(format!("{sid}.jsonl"));
    std::fs::write(&path, text.join("\n") + "\n").unwrap();
    path
}

const CLAUDE_FILE: &str =
    ".claude/projects/-home-ada-src-orbit/5d1c2a3e-7f40-4b7e-9a51-2c8e0f6d9b12.jsonl";
const SESSION: &str = "5d1c2a3e-7f40-4b7e-9a51-2c8e0f6d9b12";

#[test]
fn claude_code_sessions_sidechains_tools_and_bad_lines() {
    let h = home(&["claude-code"]);
    let r = run(&h, &[Source::ClaudeCode]);
    let s = one(&r);
    assert_eq!(s.surface, "harvest:claude-code");
    assert_eq!((s.files, s.files_read), (2, 2));
    // 12 turn records in the session file (the garbage line and three metadata records aside) + 2 sub-agent.
    assert_eq!(s.turns, 14, "{s:?}");
    assert_eq!(s.stored, 14);
    // The garbage line: named by file and line, the lines after it read.
    assert_eq!(s.problems.len(), 1, "{:?}", s.problems);
    let p = &s.problems[0];
    assert!(p.file.ends_with(CLAUDE_FILE), "{p:?}");
    assert_eq!(p.line, Some(13));
    assert!(p.to_string().contains("line 13"), "{p}");
    // Unknown record and block types are kept and counted.
    assert_eq!(
        s.unknown.get("claude-code:telepathy"),
        Some(&1),
        "{:?}",
        s.unknown
    );
    assert_eq!(s.unknown.get("claude-code:block:hologram"), Some(&1));
    assert_eq!(
        s.records_skipped.get("claude-code:file-history-snapshot"),
        Some(&1)
    );
    assert_eq!(
        s.records_skipped.get("claude-code:summary (thread title)"),
        Some(&1)
    );

    let all = turns(&h.db, "harvest:claude-code");
    let main: Vec<_> = all.iter().filter(|t| t.0 == SESSION).collect();
    assert_eq!(main.len(), 10, "{main:#?}");
    assert!(
        main.iter()
            .all(|t| t.1.as_deref() == Some("Fix the flaky orbit parser test"))
    );
    let roles: Vec<&str> = main.iter().map(|t| t.2.as_str()).collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "system",
            "system"
        ]
    );
    assert!(
        main[0].3.starts_with("[context]"),
        "isMeta is context: {:?}",
        main[0].3
    );
    assert!(
        main[2].3.contains("[reasoning]\nA one-in-ten failure"),
        "{:?}",
        main[2].3
    );
    assert!(main[3].3.contains("[tool: Grep]") && main[3].3.contains("\"pattern\": \"HashMap\""));
    assert!(main[4].3.contains("src/parser.rs:42"));
    assert!(main[7].3.contains("héhé, deterministic 🎯"));
    assert!(
        main[7]
            .3
            .contains("[unsupported: claude-code block \"hologram\"]")
    );
    assert!(
        main[8]
            .3
            .contains("[compact_boundary] Conversation compacted")
    );
    assert!(all.iter().any(|t| {
        t.3.contains("[unsupported: claude-code record \"telepathy\"]")
    }));
    // Sidechains: a thread per sub-agent, out of the main thread.
    let side: Vec<_> = all
        .iter()
        .filter(|t| t.0 == format!("{SESSION}/sidechain"))
        .collect();
    assert_eq!(side.len(), 2);
    assert_eq!(
        side[0].1.as_deref(),
        Some("Fix the flaky orbit parser test (sub-agent)")
    );
    let agent: Vec<_> = all
        .iter()
        .filter(|t| t.0 == format!("{SESSION}/agent-7c3e9f01"))
        .collect();
    assert_eq!(agent.len(), 2);
    assert!(agent[1].3.contains("tests/parse.rs"));
    // Parent chains are kept as the turns' positions.
    assert_eq!(
        count(
            &h.db,
            "SELECT count(*) FROM messages WHERE position_key = 'b:a0000000-0000-4000-8000-000000000001'"
        ),
        1
    );
}

#[test]
fn a_secret_in_a_transcript_is_redacted_before_storage() {
    let h = home(&["claude-code"]);
    let r = run_with(&h, &config(&h), &[Source::ClaudeCode], &["orbit parser"]);
    assert!(one(&r).stored > 0);
    assert_eq!(
        count(
            &h.db,
            "SELECT count(*) FROM messages WHERE content LIKE '%sk-proj-Zq81%'"
        ),
        0
    );
    assert_eq!(
        count(
            &h.db,
            "SELECT count(*) FROM messages WHERE content LIKE '%[REDACTED:openai_key]%'"
        ),
        1
    );
    // The user's own pattern applies too (title and turns).
    assert_eq!(
        count(
            &h.db,
            "SELECT count(*) FROM messages WHERE content LIKE '%orbit parser%'"
        ),
        0
    );
    assert_eq!(
        count(
            &h.db,
            "SELECT count(*) FROM threads WHERE title LIKE '%orbit parser%'"
        ),
        0
    );
}

#[test]
fn running_twice_stores_nothing_new() {
    let h = home(&["claude-code", "codex", "gemini-cli", "aider", "continue"]);
    let first = run(&h, &Source::ALL);
    assert!(first.stored() > 20, "{first:?}");
    let before = count(&h.db, "SELECT count(*) FROM messages");
    let second = run(&h, &Source::ALL);
    for s in &second.sources {
        assert_eq!((s.files_read, s.turns, s.stored), (0, 0, 0), "{s:?}");
        assert!(s.problems.is_empty(), "{s:?}");
    }
    assert_eq!(count(&h.db, "SELECT count(*) FROM messages"), before);
    // Even when every file is read again from the start (state forgotten), nothing new is stored.
    personkit_store::db::open(&h.db)
        .unwrap()
        .execute("DELETE FROM harvest_files", [])
        .unwrap();
    let third = run(&h, &Source::ALL);
    assert_eq!(third.stored(), 0, "{third:?}");
    assert!(third.sources.iter().map(|s| s.duplicate).sum::<u64>() > 20);
    assert_eq!(count(&h.db, "SELECT count(*) FROM messages"), before);
}

#[test]
fn a_growing_session_file_adds_only_its_new_turns() {
    let h = home(&[]);
    let src = std::fs::read_to_string(fixtures().join("claude-code").join(CLAUDE_FILE)).unwrap();
    let lines: Vec<&str> = src.lines().collect();
    let path = h.home.join(CLAUDE_FILE);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    // The first six lines, and half of the seventh (being written).
    let half = &lines[6][..lines[6].len() / 2];
    std::fs::write(&path, format!("{}\n{half}", lines[..6].join("\n"))).unwrap();
    let first = run(&h, &[Source::ClaudeCode]);
    let s = one(&first);
    assert_eq!(s.stored, 4, "{s:?}");
    assert!(
        s.problems.is_empty(),
        "a half-written line is not a problem: {s:?}"
    );
    // The rest arrives.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    write!(
        f,
        "{}\n{}\n",
        &lines[6][half.len()..],
        lines[7..].join("\n")
    )
    .unwrap();
    drop(f);
    let second = run(&h, &[Source::ClaudeCode]);
    let s = one(&second);
    // 8 more turn records (line 7 on, the garbage line aside), nothing sent twice.
    assert_eq!((s.turns, s.stored, s.duplicate), (8, 8, 0), "{s:?}");
    assert_eq!(s.problems.len(), 1);
    assert_eq!(
        s.problems[0].line,
        Some(13),
        "line numbers count across runs"
    );
    assert_eq!(turns(&h.db, "harvest:claude-code").len(), 12);
    // The title read in the first run (line 1) still names the thread of turns read in the second.
    assert!(
        turns(&h.db, "harvest:claude-code")
            .iter()
            .filter(|t| t.0 == SESSION)
            .all(|t| t.1.as_deref() == Some("Fix the flaky orbit parser test"))
    );
}

#[test]
fn a_rewritten_gemini_cli_session_stores_only_its_new_messages() {
    let h = home(&["gemini-cli"]);
    let dir = h
        .home
        .join(".gemini/tmp/79b6fa86e3c0d31765c7e3c6de511a7b96342a2e947135d5db396e49e27020cd/chats");
    let file = dir.join("session-2025-10-18T14-57-f86f5318.json");
    let full: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    // The session as it was after its first message.
    let mut early = full.clone();
    early["messages"].as_array_mut().unwrap().truncate(1);
    std::fs::write(&file, serde_json::to_vec_pretty(&early).unwrap()).unwrap();
    let s1 = run(&h, &[Source::GeminiCli]);
    assert_eq!(one(&s1).stored, 1);
    // Gemini CLI rewrites the whole file as the session grows.
    std::fs::write(&file, serde_json::to_vec_pretty(&full).unwrap()).unwrap();
    let s2 = run(&h, &[Source::GeminiCli]);
    let s = one(&s2);
    assert_eq!((s.stored, s.duplicate), (2, 1), "{s:?}");
    let t = turns(&h.db, "harvest:gemini-cli");
    assert_eq!(t.len(), 3);
    assert!(
        t[1].3
            .contains("[reasoning]\n**Listing the directory** I will call the list tool.")
    );
    assert!(t[1].3.contains("[tool: list_directory]") && t[1].3.contains("Listed 2 item(s)."));
    assert_eq!(t[2].2, "system");
    // A file caught half-written is left for the next run, then read.
    let bytes = serde_json::to_vec_pretty(&full).unwrap();
    let mut grown = full.clone();
    grown["messages"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
        "id": "aa000000-0000-4000-8000-000000000004", "timestamp": "2025-10-18T14:59:00.000Z",
        "type": "user", "content": [{"text": "Thanks!"}]}));
    let grown = serde_json::to_vec_pretty(&grown).unwrap();
    std::fs::write(&file, &grown[..bytes.len() - 10]).unwrap();
    let s3 = run(&h, &[Source::GeminiCli]);
    let s = one(&s3);
    assert_eq!(s.stored, 0);
    assert_eq!(s.problems.len(), 1);
    assert!(
        s.problems[0].message.contains("next run"),
        "{:?}",
        s.problems
    );
    std::fs::write(&file, &grown).unwrap();
    let s4 = run(&h, &[Source::GeminiCli]);
    assert_eq!((one(&s4).stored, one(&s4).duplicate), (1, 3));
}

#[test]
fn gemini_cli_jsonl_sessions_with_set_and_rewind() {
    let h = home(&[]);
    let dir = h.home.join(".gemini/tmp/abc123/chats");
    std::fs::create_dir_all(&dir).unwrap();
    let lines = [
        r#"{"sessionId":"s-jsonl","projectHash":"abc123","startTime":"2026-01-05T10:00:00.000Z","lastUpdated":"2026-01-05T10:00:00.000Z","messages":[]}"#,
        r#"{"id":"m1","timestamp":"2026-01-05T10:00:01.000Z","type":"user","content":"first try"}"#,
        r#"{"id":"m2","timestamp":"2026-01-05T10:00:02.000Z","type":"gemini","content":"answer one","model":"gemini-2.5-flash"}"#,
        r#"{"$rewindTo":"m1"}"#,
        r#"{"id":"m3","timestamp":"2026-01-05T10:01:00.000Z","type":"user","content":"second try"}"#,
        r#"{"$set":{"summary":"Trying twice","lastUpdated":"2026-01-05T10:01:00.000Z"}}"#,
    ];
    std::fs::write(dir.join("session-s-jsonl.jsonl"), lines.join("\n") + "\n").unwrap();
    let r = run(&h, &[Source::GeminiCli]);
    assert_eq!(
        one(&r).stored,
        1,
        "after the rewind only the second try is shown: {r:?}"
    );
    let t = turns(&h.db, "harvest:gemini-cli");
    assert_eq!(t.len(), 1);
    assert_eq!(
        (t[0].1.as_deref(), t[0].3.as_str()),
        (Some("Trying twice"), "second try")
    );
}

#[test]
fn a_truncated_or_replaced_file_is_read_again_from_the_start() {
    let h = home(&["codex"]);
    let file = h
        .home
        .join(".codex/sessions/2025/10/29/rollout-2025-10-29T00-59-38-019a2d7a-41c4-78b1-b7cc-a45d62a89cd5.jsonl");
    let r = run(&h, &[Source::Codex]);
    let s = one(&r);
    assert_eq!(s.stored, 7, "{s:?}");
    assert_eq!(s.unknown.get("codex:ghost_snapshot"), Some(&1));
    assert_eq!(s.records_skipped.get("codex:event_msg"), Some(&2));
    let t = turns(&h.db, "harvest:codex");
    assert!(
        t.iter()
            .all(|t| t.0 == "019a2d7a-41c4-78b1-b7cc-a45d62a89cd5")
    );
    assert!(
        t[0].3.starts_with("[context]\n<environment_context>"),
        "{:?}",
        t[0]
    );
    assert_eq!(
        (t[1].2.as_str(), t[1].3.as_str()),
        ("user", "How many lines does src/parser.rs have?")
    );
    assert!(t[2].3.contains("**Counting lines** with wc."));
    assert!(t[3].3.contains("[tool: shell]") && t[3].3.contains("\"wc\""));
    assert_eq!(t[4].2, "tool");
    assert_eq!(t[5].3, "src/parser.rs has 212 lines.");

    // Replaced by a shorter file with other content under the same name (a new session written over it).
    let replacement = [
        r#"{"timestamp":"2025-10-30T08:00:00.000Z","type":"session_meta","payload":{"id":"019a3000-0000-7000-8000-000000000001","cwd":"/tmp","cli_version":"0.47.0"}}"#,
        r#"{"timestamp":"2025-10-30T08:00:01.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"a new session"}]}}"#,
    ];
    std::fs::write(&file, replacement.join("\n") + "\n").unwrap();
    let r = run(&h, &[Source::Codex]);
    let s = one(&r);
    assert_eq!((s.files_replaced, s.stored), (1, 1), "{s:?}");
    assert_eq!(
        count(
            &h.db,
            "SELECT count(*) FROM threads WHERE conversation_id = '019a3000-0000-7000-8000-000000000001'"
        ),
        1
    );
    // The same length but other first bytes is noticed too (a later modification time: written after the run).
    std::thread::sleep(Duration::from_millis(20));
    let other = replacement
        .join("\n")
        .replace("a new session", "b new session")
        + "\n";
    std::fs::write(&file, other).unwrap();
    let r = run(&h, &[Source::Codex]);
    assert_eq!((one(&r).files_replaced, one(&r).stored), (1, 1), "{r:?}");
}

#[test]
fn aider_sessions_and_a_reply_still_being_written() {
    let h = home(&["aider"]);
    let mut c = config(&h);
    // Just written: the last block waits for the file to settle.
    c.settle = Duration::from_secs(3600);
    let r = run_with(&h, &c, &[Source::Aider], &[]);
    assert_eq!(one(&r).stored, 5, "{r:?}");
    c.settle = Duration::ZERO;
    let r = run_with(&h, &c, &[Source::Aider], &[]);
    assert_eq!((one(&r).stored, one(&r).duplicate), (1, 0), "{r:?}");
    let t = turns(&h.db, "harvest:aider");
    assert_eq!(t.len(), 6);
    let sessions: std::collections::BTreeSet<&str> = t.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(sessions.len(), 2);
    let first: Vec<_> = t.iter().filter(|x| x.0 == t[0].0).collect();
    let roles: Vec<&str> = first.iter().map(|x| x.2.as_str()).collect();
    assert_eq!(roles, ["tool", "user", "assistant", "tool"]);
    assert_eq!(
        first[1].3,
        "add a --verbose flag to the cli\nand print the parsed tree with it"
    );
    assert!(first[2].3.contains(">>>>>>> REPLACE"));
    assert_eq!(
        first[0].1.as_deref(),
        Some("aider: orbit, 2025-09-14 10:02:11")
    );
    // More appended to the history: only that is new.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(h.home.join("orbit/.aider.chat.history.md"))
        .unwrap();
    f.write_all(b"\n#### thanks\n\nYou're welcome.\n").unwrap();
    drop(f);
    let r = run_with(&h, &c, &[Source::Aider], &[]);
    assert_eq!((one(&r).stored, one(&r).duplicate), (2, 0), "{r:?}");
}

#[test]
fn continue_sessions_keep_tools_reasoning_and_unknown_roles() {
    let h = home(&["continue"]);
    let r = run(&h, &[Source::Continue]);
    let s = one(&r);
    assert_eq!(s.files, 1, "sessions.json is an index, not a session");
    assert_eq!(s.stored, 5, "{s:?}");
    assert_eq!(s.unknown.get("continue:critic"), Some(&1));
    let t = turns(&h.db, "harvest:continue");
    let roles: Vec<&str> = t.iter().map(|x| x.2.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "assistant", "tool", "system"]);
    assert!(t[0].3.ends_with("[context: parser.rs]"));
    assert!(t[1].3.contains("[reasoning]"));
    assert!(t[2].3.contains("[tool: read_file]"));
    assert_eq!(t[0].1.as_deref(), Some("Explain the parser"));
}

#[test]
fn list_shows_each_source_and_its_state() {
    let h = home(&["codex"]);
    let conn = personkit_store::db::open(&h.db).unwrap();
    personkit_store::harvest::set_enabled(&conn, "codex", true).unwrap();
    drop(conn);
    let mut c = config(&h);
    let enabled = c.load(&personkit_store::db::open(&h.db).unwrap()).unwrap();
    assert_eq!(enabled, vec![Source::Codex]);
    run_with(&h, &c, &enabled, &[]);
    let rows = harvest::status(
        &personkit_store::db::open(&h.db).unwrap(),
        &Config::new(h.home.clone()),
    )
    .unwrap();
    assert_eq!(rows.len(), Source::ALL.len());
    let codex = rows.iter().find(|r| r.name == "codex").unwrap();
    assert!(codex.enabled && codex.found && codex.last_run_at.is_some());
    assert_eq!((codex.files, codex.turns), (1, 7));
    let claude = rows.iter().find(|r| r.name == "claude-code").unwrap();
    assert!(!claude.enabled && !claude.found && claude.last_run_at.is_none());
}

/// A Claude Code session whose later line starts a new root (`parentUuid: null`, as after a compaction, `/clear`
/// or a resumed session): every turn is stored, none dropped.
#[test]
fn a_claude_code_session_with_several_roots_keeps_every_turn() {
    let h = home(&[]);
    let sid = "9a1b2c3d-0000-4000-8000-000000000001";
    cc_session(
        &h,
        sid,
        &[
            (
                "u1",
                None,
                "user",
                "First question about the parser.",
                "2026-11-01T10:00:00Z",
            ),
            (
                "a1",
                Some("u1"),
                "assistant",
                "First answer.",
                "2026-11-01T10:00:05Z",
            ),
            (
                "u2",
                None,
                "user",
                "Second question, after a clear.",
                "2026-11-01T10:05:00Z",
            ),
            (
                "a2",
                Some("u2"),
                "assistant",
                "Second answer.",
                "2026-11-01T10:05:05Z",
            ),
            (
                "u3",
                Some("a2"),
                "user",
                "Third question.",
                "2026-11-01T10:06:00Z",
            ),
            (
                "a3",
                Some("u3"),
                "assistant",
                "Third answer.",
                "2026-11-01T10:06:05Z",
            ),
        ],
    );
    let r = run(&h, &[Source::ClaudeCode]);
    let s = one(&r);
    assert_eq!((s.turns, s.stored), (6, 6), "{s:?}");
    let all = turns(&h.db, "harvest:claude-code");
    let texts: Vec<&str> = all.iter().map(|t| t.3.as_str()).collect();
    assert_eq!(texts.len(), 6, "{all:#?}");
    assert!(
        texts.contains(&"Second question, after a clear."),
        "{texts:?}"
    );
}

/// A Codex rollout whose prompt is recorded only as the terminal's `user_message` event (no user response item)
/// keeps the prompt; where both record it, and in either order, it is stored once.
#[test]
fn a_codex_prompt_recorded_only_as_an_event_is_kept_once() {
    let h = home(&[]);
    let dir = h.home.join(".codex/sessions/2026/11/02");
    std::fs::create_dir_all(&dir).unwrap();
    let id = "019b0000-0000-7000-8000-0000000000aa";
    let lines = [
        format!(r#"{{"timestamp":"2026-11-02T09:00:00.000Z","type":"session_meta","payload":{{"id":"{id}","cwd":"/tmp","cli_version":"0.60.0"}}}}"#),
        r#"{"timestamp":"2026-11-02T09:00:01.000Z","type":"event_msg","payload":{"type":"user_message","message":"List the files in src.","kind":"plain"}}"#.to_owned(),
        r#"{"timestamp":"2026-11-02T09:00:02.000Z","type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{\"command\":[\"ls\",\"src\"]}","call_id":"c1"}}"#.to_owned(),
        r#"{"timestamp":"2026-11-02T09:00:03.000Z","type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"main.rs\nparser.rs"}}"#.to_owned(),
        r#"{"timestamp":"2026-11-02T09:00:04.000Z","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Two files: main.rs and parser.rs."}]}}"#.to_owned(),
        // The event first, then the response item with the same words: one prompt.
        r#"{"timestamp":"2026-11-02T09:01:00.000Z","type":"event_msg","payload":{"type":"user_message","message":"And in tests?","kind":"plain"}}"#.to_owned(),
        r#"{"timestamp":"2026-11-02T09:01:00.001Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"And in tests?"}]}}"#.to_owned(),
        r#"{"timestamp":"2026-11-02T09:01:02.000Z","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"None."}]}}"#.to_owned(),
    ];
    std::fs::write(
        dir.join(format!("rollout-2026-11-02T09-00-00-{id}.jsonl")),
        lines.join("\n") + "\n",
    )
    .unwrap();
    let r = run(&h, &[Source::Codex]);
    let s = one(&r);
    let t = turns(&h.db, "harvest:codex");
    let users: Vec<&str> = t
        .iter()
        .filter(|t| t.2 == "user")
        .map(|t| t.3.as_str())
        .collect();
    assert_eq!(users, ["List the files in src.", "And in tests?"], "{t:#?}");
    assert_eq!(s.stored, 6, "{s:?}");
}

/// A compacted Claude Code session: the boundary (a new root naming its logical parent) and the model-written
/// summary that follows it are context, not the user's words; every turn before and after is kept.
#[test]
fn a_compacted_claude_code_session_keeps_its_turns_and_marks_the_summary_as_context() {
    let h = home(&[]);
    let dir = h.home.join(".claude/projects/-home-ada-src-orbit");
    std::fs::create_dir_all(&dir).unwrap();
    let sid = "9a1b2c3d-0000-4000-8000-000000000002";
    let base = |uuid: &str, parent: Option<&str>, at: &str| serde_json::json!({"uuid": uuid, "parentUuid": parent, "sessionId": sid, "timestamp": at, "isSidechain": false});
    let msg = |uuid: &str, parent: Option<&str>, kind: &str, text: &str, at: &str| {
        let mut v = base(uuid, parent, at);
        v["type"] = kind.into();
        v["message"] = serde_json::json!({"role": kind, "content": text});
        v
    };
    let mut boundary = base("b1", None, "2026-11-01T11:00:00Z");
    boundary["type"] = "system".into();
    boundary["subtype"] = "compact_boundary".into();
    boundary["content"] = "Conversation compacted".into();
    boundary["logicalParentUuid"] = "a1".into();
    let mut summary = msg(
        "s1",
        Some("b1"),
        "user",
        "This session is being continued from a previous conversation. Summary: parser work.",
        "2026-11-01T11:00:01Z",
    );
    summary["isCompactSummary"] = true.into();
    let lines = [
        msg(
            "u1",
            None,
            "user",
            "Fix the parser.",
            "2026-11-01T10:00:00Z",
        ),
        msg(
            "a1",
            Some("u1"),
            "assistant",
            "Fixed.",
            "2026-11-01T10:00:05Z",
        ),
        boundary,
        summary,
        msg(
            "u2",
            Some("s1"),
            "user",
            "Now add a test.",
            "2026-11-01T11:01:00Z",
        ),
        msg(
            "a2",
            Some("u2"),
            "assistant",
            "Added.",
            "2026-11-01T11:01:05Z",
        ),
    ];
    let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    std::fs::write(dir.join(format!("{sid}.jsonl")), text.join("\n") + "\n").unwrap();
    let r = run(&h, &[Source::ClaudeCode]);
    assert_eq!(one(&r).stored, 6, "{:?}", one(&r));
    let all = turns(&h.db, "harvest:claude-code");
    let users: Vec<&str> = all
        .iter()
        .filter(|t| t.2 == "user")
        .map(|t| t.3.as_str())
        .collect();
    assert_eq!(users, ["Fix the parser.", "Now add a test."], "{all:#?}");
    let summary = all
        .iter()
        .find(|t| t.3.contains("being continued"))
        .unwrap();
    assert_eq!(summary.2, "system", "{summary:?}");
    assert!(summary.3.starts_with("[context]"), "{summary:?}");
}

/// A prompt asked again word for word later in the same session (a new root after `/clear`, or simply "go on"
/// twice) is a turn of its own: it has its own uuid, so it is stored, not answered as a duplicate.
#[test]
fn the_same_words_asked_twice_in_a_session_are_two_turns() {
    let h = home(&[]);
    let sid = "9a1b2c3d-0000-4000-8000-000000000003";
    cc_session(
        &h,
        sid,
        &[
            ("u1", None, "user", "go on", "2026-11-01T10:00:00Z"),
            (
                "a1",
                Some("u1"),
                "assistant",
                "Done with step one.",
                "2026-11-01T10:00:05Z",
            ),
            ("u2", None, "user", "go on", "2026-11-01T10:05:00Z"),
            (
                "a2",
                Some("u2"),
                "assistant",
                "Done with step two.",
                "2026-11-01T10:05:05Z",
            ),
            ("u3", Some("a2"), "user", "go on", "2026-11-01T10:06:00Z"),
            (
                "a3",
                Some("u3"),
                "assistant",
                "Done with step two.",
                "2026-11-01T10:06:05Z",
            ),
        ],
    );
    let r = run(&h, &[Source::ClaudeCode]);
    let s = one(&r);
    assert_eq!(s.records.read, 6, "{s:?}");
    assert_eq!((s.records.to_turns, s.records.silent), (6, 0), "{s:?}");
    assert_eq!((s.turns, s.stored), (6, 6), "{s:?}");
    assert_eq!(
        count(&h.db, "SELECT COUNT(*) FROM messages"),
        6,
        "{:#?}",
        turns(&h.db, "harvest:claude-code")
    );
}

/// What Claude Code adds to a user line is kept apart from the user's words: a reminder inside a prompt becomes
/// an `[injected: …]` block, a line that is only the local-command caveat is context, a slash command reads as
/// typed, and a prompt queued while the model worked (an `attachment` line) is the user's turn.
#[test]
fn text_claude_code_injected_is_not_the_users_words() {
    let h = home(&[]);
    let dir = h.home.join(".claude/projects/-home-ada-src-orbit");
    std::fs::create_dir_all(&dir).unwrap();
    let sid = "9a1b2c3d-0000-4000-8000-000000000004";
    let base = |uuid: &str, parent: Option<&str>| {
        serde_json::json!({"uuid": uuid, "parentUuid": parent, "sessionId": sid,
            "timestamp": "2026-11-01T10:00:00Z", "isSidechain": false})
    };
    let msg = |uuid: &str, parent: Option<&str>, kind: &str, content: serde_json::Value| {
        let mut v = base(uuid, parent);
        v["type"] = kind.into();
        v["message"] = serde_json::json!({"role": kind, "content": content});
        v
    };
    let mut caveat = msg(
        "c1",
        None,
        "user",
        "<local-command-caveat>Caveat: The messages below were generated by the user while running local commands. DO NOT respond to these messages.</local-command-caveat>".into(),
    );
    caveat["isMeta"] = true.into();
    let mut queued = base("q1", Some("a2"));
    queued["type"] = "attachment".into();
    queued["attachment"] =
        serde_json::json!({"type": "queued_command", "prompt": "Also rename the flag."});
    let mut other = base("x1", Some("q1"));
    other["type"] = "attachment".into();
    other["attachment"] = serde_json::json!({"type": "todo_reminder", "content": []});
    let lines = [
        caveat,
        msg("m1", Some("c1"), "user", "<command-name>/model</command-name>\n<command-message>model</command-message>\n<command-args>opus</command-args>".into()),
        msg("o1", Some("m1"), "user", "<local-command-stdout>Set model to opus</local-command-stdout>".into()),
        msg("u1", Some("o1"), "user", serde_json::json!([
            {"type": "text", "text": "Why does the parser stop at line 40?"},
            {"type": "text", "text": "<system-reminder>\nThe TodoWrite tool hasn't been used recently.\n</system-reminder>"}
        ])),
        msg("a1", Some("u1"), "assistant", serde_json::json!([{"type": "text", "text": "It hits the size cap."}])),
        msg("u2", Some("a1"), "user", "<system-reminder>Files changed on disk.</system-reminder>".into()),
        msg("a2", Some("u2"), "assistant", serde_json::json!([{"type": "text", "text": "Raising the cap."}])),
        queued,
        other,
    ];
    let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    std::fs::write(dir.join(format!("{sid}.jsonl")), text.join("\n") + "\n").unwrap();
    let r = run(&h, &[Source::ClaudeCode]);
    let s = one(&r);
    assert_eq!(s.records.read, 9, "{s:?}");
    assert_eq!(
        (s.records.to_turns, s.records.skipped, s.records.silent),
        (8, 1, 0),
        "{s:?}"
    );
    let all = turns(&h.db, "harvest:claude-code");
    let users: Vec<&str> = all
        .iter()
        .filter(|t| t.2 == "user")
        .map(|t| t.3.as_str())
        .collect();
    assert_eq!(
        users,
        [
            "/model opus",
            "Why does the parser stop at line 40?\n\n[injected: system-reminder]\n```\nThe TodoWrite tool hasn't been used recently.\n```",
            "Also rename the flag."
        ],
        "{all:#?}"
    );
    // The caveat, the command's output and the reminder-only line are context, each kept as an injected block.
    let context: Vec<&str> = all
        .iter()
        .filter(|t| t.2 == "system")
        .map(|t| t.3.as_str())
        .collect();
    assert_eq!(context.len(), 3, "{all:#?}");
    assert!(
        context
            .iter()
            .all(|c| c.starts_with("[context]\n[injected: ")),
        "{context:#?}"
    );
}

fn claude_session(h: &Home, sid: &str, age_days: u64) -> PathBuf {
    let path = cc_session(
        h,
        sid,
        &[
            (
                "u1",
                None,
                "user",
                "Keep this session.",
                "2026-11-01T10:00:00Z",
            ),
            (
                "a1",
                Some("u1"),
                "assistant",
                "Kept.",
                "2026-11-01T10:00:05Z",
            ),
        ],
    );
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(std::time::SystemTime::now() - Duration::from_secs(age_days * 86_400))
        .unwrap();
    path
}

fn status_of(h: &Home, s: Source) -> harvest::SourceStatus {
    let conn = personkit_store::db::open(&h.db).unwrap();
    harvest::status(&conn, &config(h))
        .unwrap()
        .into_iter()
        .find(|x| x.name == s.name())
        .unwrap()
}

/// The retention guard reads Claude Code's `cleanupPeriodDays` and Gemini CLI's `general.sessionRetention` and
/// warns, naming the setting, when sessions will be deleted before a harvest copies them.
#[test]
fn the_retention_guard_names_the_setting_that_will_delete_sessions() {
    let h = home(&[]);
    std::fs::create_dir_all(h.home.join(".claude")).unwrap();
    claude_session(&h, "7e000000-0000-4000-8000-000000000001", 5);
    // No settings file: the default, 30 days; the source is off while a session exists.
    let st = status_of(&h, Source::ClaudeCode);
    let set = st.retention.clone().unwrap();
    assert_eq!(
        (set.name, set.days, set.default),
        ("cleanupPeriodDays", Some(30.0), true)
    );
    assert_eq!(st.warnings.len(), 1, "{st:#?}");
    assert_eq!(st.warnings[0].level, "danger");
    assert!(st.warnings[0].message.contains("not copying"), "{st:#?}");
    assert!(
        st.warnings[0]
            .fix
            .contains("personkit harvest enable claude-code"),
        "{st:#?}"
    );

    // 7 days, enabled and never harvested: the 5-day-old session is within 3 days of deletion.
    std::fs::write(
        h.home.join(".claude/settings.json"),
        r#"{"cleanupPeriodDays": 7}"#,
    )
    .unwrap();
    {
        let conn = personkit_store::db::open(&h.db).unwrap();
        personkit_store::harvest::set_enabled(&conn, "claude-code", true).unwrap();
    }
    let st = status_of(&h, Source::ClaudeCode);
    assert_eq!(st.retention.clone().unwrap().days, Some(7.0));
    let msgs: Vec<&str> = st.warnings.iter().map(|w| w.message.as_str()).collect();
    assert!(
        msgs.iter().any(|m| m.contains("never harvested")),
        "{msgs:#?}"
    );
    assert!(
        msgs.iter()
            .any(|m| m.starts_with("1 session file not yet copied")),
        "{msgs:#?}"
    );
    assert!(
        st.warnings
            .iter()
            .all(|w| w.fix.contains("cleanupPeriodDays") || w.fix.contains("harvest")),
        "{st:#?}"
    );
    // Copied: nothing at risk any more.
    run(&h, &[Source::ClaudeCode]);
    let st = status_of(&h, Source::ClaudeCode);
    assert!(st.warnings.is_empty(), "{:#?}", st.warnings);

    // 0 means Claude Code writes no transcripts at all.
    std::fs::write(
        h.home.join(".claude/settings.json"),
        r#"{"cleanupPeriodDays": 0}"#,
    )
    .unwrap();
    let st = status_of(&h, Source::ClaudeCode);
    assert!(
        st.warnings[0].message.contains("keeps no transcripts"),
        "{st:#?}"
    );
    // An unreadable value is said, and the default assumed.
    std::fs::write(
        h.home.join(".claude/settings.json"),
        r#"{"cleanupPeriodDays": "forever"}"#,
    )
    .unwrap();
    let st = status_of(&h, Source::ClaudeCode);
    assert_eq!(st.retention.clone().unwrap().days, Some(30.0));
    assert!(
        st.warnings[0].message.contains("could not be read"),
        "{st:#?}"
    );

    // Gemini CLI: on by default (30 days); turned off, nothing to warn about; a bad maxAge is said.
    let chats = h.home.join(".gemini/tmp/orbit/chats");
    std::fs::create_dir_all(&chats).unwrap();
    std::fs::write(
        chats.join("session-1.json"),
        r#"{"sessionId":"g1","messages":[]}"#,
    )
    .unwrap();
    let st = status_of(&h, Source::GeminiCli);
    assert_eq!(st.retention.clone().unwrap().days, Some(30.0));
    assert!(st.warnings[0].fix.contains("sessionRetention"), "{st:#?}");
    std::fs::write(
        h.home.join(".gemini/settings.json"),
        r#"{"general":{"sessionRetention":{"enabled":false}}}"#,
    )
    .unwrap();
    let st = status_of(&h, Source::GeminiCli);
    assert_eq!(st.retention.clone().unwrap().days, None);
    assert!(st.warnings.is_empty(), "{st:#?}");
    std::fs::write(
        h.home.join(".gemini/settings.json"),
        r#"{"general":{"sessionRetention":{"enabled":true,"maxAge":"soon"}}}"#,
    )
    .unwrap();
    let st = status_of(&h, Source::GeminiCli);
    assert!(
        st.warnings
            .iter()
            .any(|w| w.message.contains("could not be read")),
        "{st:#?}"
    );
    // A tool without a retention setting has none.
    assert_eq!(status_of(&h, Source::Codex).retention, None);
}

/// A session file its tool deleted after it was harvested: its turns stay, the run counts the file gone, and the
/// thread is listed as the corpus's only copy; a file that comes back is no longer gone.
#[test]
fn a_harvested_session_whose_file_is_deleted_is_the_only_copy() {
    let h = home(&[]);
    let sid = "7e000000-0000-4000-8000-000000000002";
    let path = claude_session(&h, sid, 1);
    claude_session(&h, "7e000000-0000-4000-8000-000000000003", 1);
    let r = run(&h, &[Source::ClaudeCode]);
    assert_eq!((one(&r).stored, one(&r).files_gone), (4, 0));
    std::fs::remove_file(&path).unwrap();
    let r = run(&h, &[Source::ClaudeCode]);
    assert_eq!(
        (one(&r).stored, one(&r).files_gone),
        (0, 1),
        "{:?}",
        one(&r)
    );
    let conn = personkit_store::db::open(&h.db).unwrap();
    let only = personkit_store::harvest::only_copies(&conn).unwrap();
    let thread = personkit_shared::ids::thread_id("harvest:claude-code", sid)
        .hyphenated()
        .to_string();
    assert_eq!(only.len(), 1, "{only:?}");
    assert_eq!(
        (only[0].thread_id.as_str(), only[0].source.as_str()),
        (thread.as_str(), "claude-code")
    );
    assert_eq!(status_of(&h, Source::ClaudeCode).only_copies, 1);
    assert_eq!(count(&h.db, "SELECT COUNT(*) FROM messages"), 4);
    // Running again does not count it twice; the file coming back clears it.
    let r = run(&h, &[Source::ClaudeCode]);
    assert_eq!(one(&r).files_gone, 0);
    claude_session(&h, sid, 0);
    run(&h, &[Source::ClaudeCode]);
    assert!(
        personkit_store::harvest::only_copies(&conn)
            .unwrap()
            .is_empty()
    );
}

/// The test kit clears every variable the harvester reads, so a developer's own settings never reach a test.
#[test]
fn the_test_kit_clears_every_tool_variable() {
    assert_eq!(personkit_testkit::TOOL_ENV, harvest::ENV);
}

/// Lines out of order (an answer written before the prompt it answers, as after a resumed session copies lines)
/// and a resumed session replaying lines it already holds: every turn stored once, each under its parent, and the
/// thread reads prompt, answer, prompt, answer.
#[test]
fn out_of_order_and_replayed_claude_code_lines_keep_every_turn_once() {
    let h = home(&[]);
    let sid = "9a1b2c3d-0000-4000-8000-000000000005";
    cc_session(
        &h,
        sid,
        &[
            (
                "a1",
                Some("u1"),
                "assistant",
                "First answer.",
                "2026-11-01T10:00:05Z",
            ),
            ("u1", None, "user", "First prompt.", "2026-11-01T10:00:00Z"),
            (
                "u2",
                Some("a1"),
                "user",
                "Second prompt.",
                "2026-11-01T10:01:00Z",
            ),
            // Replayed by a resume: the same uuids again.
            ("u1", None, "user", "First prompt.", "2026-11-01T10:00:00Z"),
            (
                "a1",
                Some("u1"),
                "assistant",
                "First answer.",
                "2026-11-01T10:00:05Z",
            ),
            (
                "a2",
                Some("u2"),
                "assistant",
                "Second answer.",
                "2026-11-01T10:01:05Z",
            ),
        ],
    );
    let r = run(&h, &[Source::ClaudeCode]);
    let s = one(&r);
    assert_eq!((s.records.read, s.records.silent), (6, 0), "{s:?}");
    assert_eq!((s.stored, s.duplicate), (4, 2), "{s:?}");
    let texts: Vec<String> = turns(&h.db, "harvest:claude-code")
        .into_iter()
        .map(|t| t.3)
        .collect();
    assert_eq!(
        texts,
        [
            "First prompt.",
            "First answer.",
            "Second prompt.",
            "Second answer."
        ]
    );
}
