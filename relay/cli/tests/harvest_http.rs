//! The harvest job of a real relay process: `personkit harvest enable claude-code`, then `serve` with a one-second
//! harvest interval (`PERSONKIT_HARVEST_INTERVAL`) and a temporary home (`PERSONKIT_HARVEST_HOME`) holding the
//! Claude Code fixture of `relay/import/tests/fixtures/harvest/claude-code`: the session's turns appear,
//! `harvest:claude-code` shows in capture health and `corpus surfaces`, a line appended to the session file
//! while the relay runs arrives at the next pass, and `harvest list --json` reports the runs. Also the CLI's
//! own `harvest --once --json` and its refusal without an enabled source.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use personkit_testkit::{Relay, cli, cli_json, temp_db, workspace_root};
use serde_json::Value;

const FILE: &str =
    ".claude/projects/-home-ada-src-orbit/5d1c2a3e-7f40-4b7e-9a51-2c8e0f6d9b12.jsonl";

fn copy_tree(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let dest = to.join(e.path().strip_prefix(from).unwrap());
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

fn claude_health(relay: &Relay, token: &str) -> Option<Value> {
    let v = relay.http.get("/v1/me/capture-health", Some(token)).json();
    v["surfaces"]
        .as_array()?
        .iter()
        .find(|s| s["surface"] == "harvest:claude-code")
        .cloned()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn serve_harvests_enabled_sources_on_its_interval() {
    let (dir, db) = temp_db();
    let home = dir.path().join("home");
    copy_tree(
        &workspace_root().join("relay/import/tests/fixtures/harvest/claude-code"),
        &home,
    );
    cli(&db, &["harvest", "enable", "claude-code"]).ok();
    let home_s = home.display().to_string();
    let relay = Relay::start_env(
        &db,
        &[],
        &[
            ("PERSONKIT_HARVEST_INTERVAL", "1"),
            ("PERSONKIT_HARVEST_HOME", home_s.as_str()),
        ],
    );
    let token = relay.pair_printed("harvest test");
    wait_for("harvest:claude-code in capture health", || {
        claude_health(&relay, &token).is_some_and(|h| h["turns_24h"] == 14)
    });
    let h = claude_health(&relay, &token).unwrap();
    assert_eq!(h["status"], "green", "{h}");

    // A turn appended while the relay runs arrives at a later pass, alone.
    let line = r#"{"parentUuid":"a0000000-0000-4000-8000-000000000009","isSidechain":false,"sessionId":"5d1c2a3e-7f40-4b7e-9a51-2c8e0f6d9b12","type":"user","message":{"role":"user","content":"One more question about render()"},"uuid":"a0000000-0000-4000-8000-000000000010","timestamp":"2025-11-02T09:30:00.000Z"}"#;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(home.join(FILE))
        .unwrap();
    writeln!(f, "{line}").unwrap();
    drop(f);
    wait_for("the appended turn", || {
        claude_health(&relay, &token).is_some_and(|h| h["turns_24h"] == 15)
    });

    // The surface's window counts turns by their own time (the transcript's, November 2025), as for imports.
    let surfaces = cli_json(&db, &["corpus", "surfaces", "--json", "--since", "520w"]);
    let row = surfaces
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["surface"] == "harvest:claude-code")
        .unwrap_or_else(|| panic!("no harvest:claude-code in {surfaces}"));
    assert_eq!(row["threads"], 3, "{row}");
    assert_eq!(row["messages"], 15, "{row}");
    assert_eq!(row["status"], "green", "{row}");

    let list = cli_json(&db, &["harvest", "list", "--json", "--home", &home_s]);
    let claude = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "claude-code")
        .unwrap()
        .clone();
    assert_eq!(claude["enabled"], true);
    assert_eq!(claude["files"], 2);
    assert_eq!(claude["turns"], 15);
    assert!(claude["last_run_at"].is_string(), "{claude}");
    assert!(
        claude["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("line 13")),
        "the garbage line is the last problem: {claude}"
    );
    // Logs carry counts and places, never content.
    assert!(!relay.stderr().contains("render()"), "{}", relay.stderr());
}

#[test]
fn harvest_once_from_the_command_line() {
    let (dir, db) = temp_db();
    let home = dir.path().join("home");
    copy_tree(
        &workspace_root().join("relay/import/tests/fixtures/harvest/codex"),
        &home,
    );
    let home_s = home.display().to_string();
    let refused = cli(&db, &["harvest", "--once", "--home", &home_s]);
    assert!(!refused.status.success());
    assert!(
        refused.stderr.contains("personkit harvest enable"),
        "{}",
        refused.stderr
    );
    let bad = cli(&db, &["harvest", "enable", "windsurf"]);
    assert!(!bad.status.success());
    assert!(
        bad.stderr
            .contains("claude-code, codex, gemini-cli, aider, continue"),
        "{}",
        bad.stderr
    );
    assert!(
        bad.stderr.contains("cursor, copilot-chat, opencode, goose"),
        "{}",
        bad.stderr
    );
    // The sources kept in SQLite files or VS Code storage are enabled like the others and listed with their paths.
    for name in ["cursor", "copilot-chat", "opencode", "goose"] {
        cli(&db, &["harvest", "enable", name]).ok();
    }
    let list = cli_json(&db, &["harvest", "list", "--json", "--home", &home_s]);
    for name in ["cursor", "copilot-chat", "opencode", "goose"] {
        let row = list
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {list}"));
        assert_eq!(row["enabled"], true, "{row}");
        assert!(!row["paths"].as_array().unwrap().is_empty(), "{row}");
        cli(&db, &["harvest", "disable", name]).ok();
    }

    cli(&db, &["harvest", "enable", "codex"]).ok();
    let out = cli(&db, &["harvest", "--once", "--json", "--home", &home_s]);
    out.ok();
    let report = out.json();
    let codex = &report["sources"][0];
    assert_eq!(codex["surface"], "harvest:codex");
    assert_eq!(codex["stored"], 7, "{report}");
    let again = cli(&db, &["harvest", "--once", "--json", "--home", &home_s]).json();
    assert_eq!(again["sources"][0]["stored"], 0, "{again}");
    assert_eq!(again["sources"][0]["files_read"], 0, "{again}");
    // `serve`'s off switch in the environment does not stop a harvest from the command line.
    let off = std::process::Command::new(personkit_testkit::bin())
        .args(["harvest", "--once", "--json", "--home", &home_s])
        .env("PERSONKIT_DB", &db)
        .env("HOME", dir.path())
        .env("PERSONKIT_HARVEST_INTERVAL", "0")
        .output()
        .unwrap();
    assert!(
        off.status.success(),
        "{}",
        String::from_utf8_lossy(&off.stderr)
    );
    // A tool's own path variable, read from the environment: VS Code's user folder under XDG_CONFIG_HOME.
    let xdg = dir.path().join("xdg");
    let chat = xdg.join("Code/User/workspaceStorage/ws1/chatSessions/s1.json");
    std::fs::create_dir_all(chat.parent().unwrap()).unwrap();
    std::fs::write(
        &chat,
        r#"{"version": 3, "sessionId": "s1", "requests": [{"requestId": "r1", "message": {"text": "Hello there"},
            "response": [{"value": "Hi! How can I help?"}], "timestamp": 1790000000000}]}"#,
    )
    .unwrap();
    let moved = std::process::Command::new(personkit_testkit::bin())
        .args([
            "harvest",
            "--once",
            "--json",
            "--source",
            "copilot-chat",
            "--home",
            &home_s,
        ])
        .env("PERSONKIT_DB", &db)
        .env("XDG_CONFIG_HOME", &xdg)
        .output()
        .unwrap();
    assert!(
        moved.status.success(),
        "{}",
        String::from_utf8_lossy(&moved.stderr)
    );
    let report: Value = serde_json::from_slice(&moved.stdout).unwrap();
    assert_eq!(report["sources"][0]["stored"], 2, "{report}");
    let human = cli(&db, &["harvest", "list", "--home", &home_s]);
    human.ok();
    assert!(
        human.stdout.contains("codex") && human.stdout.contains("on"),
        "{}",
        human.stdout
    );
    cli(&db, &["harvest", "disable", "codex"]).ok();
    assert!(
        !cli(&db, &["harvest", "--once", "--home", &home_s])
            .status
            .success()
    );
}
