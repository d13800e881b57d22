//! The events stream through the real `personkit` binary and a real relay process: a git repository made here
//! with the `git` CLI read by `personkit events harvest`, its commits listed by `events list --json` and by
//! `GET /v1/events` for a device and an agent token, bad parameters answered `{code, message, hint}`; `serve`'s
//! events job picking up a reading list on its own; and a thread forgotten over HTTP taking its events along.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use personkit_testkit::{Relay, cli, cli_json, git, temp_db};
use serde_json::Value;

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn commits_harvested_by_the_cli_are_read_over_http() {
    let (dir, db) = temp_db();
    let repo = dir.path().join("orbit");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"], "2026-11-20T10:00:00Z");
    for (i, (file, msg)) in [("a.txt", "Start orbit"), ("b.txt", "Add the launcher")]
        .iter()
        .enumerate()
    {
        std::fs::write(repo.join(file), "one\ntwo\n").unwrap();
        git(&repo, &["add", file], "2026-11-20T10:00:00Z");
        let when = format!("2026-11-2{}T10:00:00Z", i + 1);
        git(&repo, &["commit", "-q", "-m", msg], &when);
    }
    // Nothing is on by default, and the refusal says what to do.
    let out = cli(&db, &["events", "harvest"]);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("personkit events enable"),
        "{}",
        out.stderr
    );
    cli(&db, &["events", "enable", "git"]).ok();
    let bad = cli(
        &db,
        &["events", "add-path", "git", dir.path().to_str().unwrap()],
    );
    assert!(
        !bad.status.success(),
        "a folder that is not a repository is refused"
    );
    cli(&db, &["events", "add-path", "git", repo.to_str().unwrap()]).ok();
    let report = cli_json(&db, &["events", "harvest", "--json"]);
    let git_report = &report["sources"][0];
    assert_eq!(git_report["source"], "git");
    assert_eq!(
        (git_report["read"].as_u64(), git_report["stored"].as_u64()),
        (Some(2), Some(2))
    );
    let again = cli_json(&db, &["events", "harvest", "--json"]);
    assert_eq!(again["sources"][0]["stored"], 0, "{again}");

    let listed = cli_json(&db, &["events", "list", "--kind", "git.commit", "--json"]);
    let evs = listed["events"].as_array().unwrap();
    assert_eq!(evs.len(), 2);
    assert_eq!(evs[0]["content"], "Add the launcher", "newest first");
    assert_eq!(evs[0]["attrs"]["repo"], "orbit");
    let sources = cli_json(&db, &["events", "sources", "--json"]);
    let row = sources
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "git")
        .unwrap();
    assert_eq!(
        (row["enabled"].as_bool(), row["stored"].as_u64()),
        (Some(true), Some(2))
    );
    assert_eq!(row["cadence_minutes"], 15);

    let relay = Relay::start(&db, &["--events-check", "0"]);
    let token = relay.pair_printed("laptop");
    let v = relay
        .http
        .get("/v1/events?kind=git.commit&since=2026-11-22", Some(&token))
        .json();
    let evs = v["events"].as_array().unwrap();
    assert_eq!(evs.len(), 1, "{v}");
    assert_eq!(evs[0]["attrs"]["author"], "Ada Lovelace");
    assert!(!v.to_string().contains("ada@example.org"), "{v}");
    // Pages: one at a time, the cursor goes on.
    let p1 = relay.http.get("/v1/events?limit=1", Some(&token)).json();
    let next = p1["next"].as_str().unwrap().to_owned();
    let p2 = relay
        .http
        .get(&format!("/v1/events?limit=1&cursor={next}"), Some(&token))
        .json();
    assert_eq!(p2["events"][0]["content"], "Start orbit", "{p2}");
    // An agent token reads too.
    let agent = relay.cli_json(&["agents", "add", "reader", "--json"]);
    let agent_token = agent["token"].as_str().unwrap();
    let v = relay.http.get("/v1/events", Some(agent_token)).json();
    assert_eq!(v["events"].as_array().unwrap().len(), 2);
    // Bad requests: the error shape, a hint.
    relay
        .http
        .get("/v1/events?limit=0", Some(&token))
        .assert_error(400, "bad_query");
    relay
        .http
        .get("/v1/events?limit=501", Some(&token))
        .assert_error(400, "bad_query");
    relay
        .http
        .get("/v1/events?knd=git.commit", Some(&token))
        .assert_error(400, "unknown_parameter");
    relay
        .http
        .get("/v1/events?since=yesterdayish", Some(&token))
        .assert_error(400, "bad_query");
    relay
        .http
        .get("/v1/events?cursor=nonsense", Some(&token))
        .assert_error(400, "bad_query");
    relay
        .http
        .get("/v1/events", None)
        .assert_error(401, "unauthorized");
}

#[test]
fn serve_runs_due_sources_and_a_forgotten_thread_takes_its_events() {
    let (dir, db) = temp_db();
    // The relay's HOME is the corpus's folder: the reading list is in its default place there.
    let inbox = dir.path().join(".dotperson/reading-list/inbox.jsonl");
    std::fs::create_dir_all(inbox.parent().unwrap()).unwrap();
    std::fs::write(
        &inbox,
        "{\"url\":\"https://example.org/orbits\",\"title\":\"Orbits\",\"added_at\":\"2026-11-27T08:00:00Z\"}\nnot json\n",
    )
    .unwrap();
    cli(&db, &["events", "enable", "reading-list"]).ok();
    cli(&db, &["events", "enable", "sessions"]).ok();
    let home = dir.path().display().to_string();
    let relay = Relay::start_env(
        &db,
        &["--events-check", "1"],
        &[("PERSONKIT_HARVEST_HOME", home.as_str())],
    );
    let token = relay.pair_printed("laptop");
    let events = |q: &str| -> Vec<Value> {
        relay
            .http
            .get(&format!("/v1/events?{q}"), Some(&token))
            .json()["events"]
            .as_array()
            .unwrap()
            .clone()
    };
    wait_for("the reading list's event", || {
        !events("kind=reading.added").is_empty()
    });
    assert_eq!(
        events("kind=reading.added")[0]["content"],
        "Orbits\nhttps://example.org/orbits"
    );
    let sources = cli_json(&db, &["events", "sources", "--json"]);
    let row = sources
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "reading-list")
        .unwrap()
        .clone();
    assert_eq!(row["rejected"], 1, "the broken line is counted: {row}");

    // A captured thread: the sessions source gives it a thread.started event at its next run (its cadence has
    // not passed, so run it now from the CLI, beside the relay).
    let turn = personkit_testkit::turn(
        "browser-ext:chatgpt",
        "c-orbit",
        personkit_shared::wire::Role::User,
        "plan the orbit",
        Some(0),
    );
    relay.http.send_batch(&token, &[turn]);
    let thread = personkit_testkit::thread_id("browser-ext:chatgpt", "c-orbit");
    cli(&db, &["events", "harvest", "--source", "sessions"]).ok();
    let mine = events(&format!("thread={thread}"));
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(mine[0]["kind"], "thread.started");
    assert_eq!(mine[0]["attrs"]["surface"], "browser-ext:chatgpt");

    let r = relay
        .http
        .delete(&format!("/v1/threads/{thread}"), Some(&token));
    assert!(r.status == 200 || r.status == 204, "{}", r.status);
    assert!(events(&format!("thread={thread}")).is_empty());
    assert_eq!(events("kind=reading.added").len(), 1, "other events stay");
    // Logs carry counts, never content.
    assert!(!relay.stderr().contains("Orbits"), "{}", relay.stderr());
}
