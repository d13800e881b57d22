//! Memory is part of the corpus, end to end on the real binary and real corpus files:
//!
//! - forgetting a thread withdraws the short memory that drew on it (`memory list` shows it withdrawn, its body
//!   empty), marks the tier due (`distill status`), leaves the thread's words out of what an agent loads
//!   (`context --tier 2`), and the next `distill short` makes a version without them and clears the mark;
//! - two relays (`personkit serve` processes paired with `pair --sync` / `sync add`): a short memory made on A
//!   appears on B, and forgetting its thread on A withdraws it on B too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use personkit_store::clock::fmt_time;
use personkit_store::ingest::{Origin, ingest_batch};
use personkit_testkit::{self as kit, Relay, cli, cli_json, turn_at};
use serde_json::Value;

const SURFACE: &str = "browser-ext:chatgpt";

/// Two threads of a few turns each, captured within the last hours: one about a trip (the one forgotten), one
/// about Rust.
fn conversations() -> Vec<Value> {
    let at = |mins: i64| fmt_time(time::OffsetDateTime::now_utc() - time::Duration::minutes(mins));
    let trip = [
        "Plan a snorkelling week in Zanzibar for March",
        "Stone Town first, then the east coast reefs.",
    ];
    let code = [
        "Why does the borrow checker reject this lifetime?",
        "The reference outlives the vector it points into.",
    ];
    let mut items = Vec::new();
    for (conv, texts, start) in [("trip", trip, 120), ("code", code, 90)] {
        for (i, t) in texts.iter().enumerate() {
            items.push(turn_at(
                SURFACE,
                conv,
                kit::alternating_role(i),
                t,
                Some(i as u32),
                None,
                &at(start - i as i64),
            ));
        }
    }
    items
}

fn seed(db: &Path) {
    let mut conn = personkit_store::db::open(db).unwrap();
    let origin = Origin {
        device_id: "ext".into(),
    };
    let r = ingest_batch(
        &mut conn,
        &origin,
        &conversations(),
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    assert_eq!(r.rejected, 0, "{r:?}");
}

fn short_versions(db: &Path) -> Vec<Value> {
    cli_json(db, &["memory", "list", "--tier", "short", "--json"])
        .as_array()
        .unwrap()
        .clone()
}

fn short_status(db: &Path) -> Value {
    let status = cli_json(db, &["distill", "status", "--json"]);
    status
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["tier"] == "short")
        .unwrap()
        .clone()
}

fn context_text(db: &Path) -> String {
    cli_json(db, &["context", "--tier", "2", "--json"])["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn forgetting_a_thread_withdraws_its_memory_and_the_next_run_leaves_it_out() {
    let (_dir, db) = kit::temp_db();
    seed(&db);
    let run = cli_json(&db, &["distill", "short", "--json"]);
    assert_eq!(run["outcome"], "ok", "{run}");
    let first = run["version"].as_str().unwrap().to_owned();
    let listed = short_versions(&db);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed[0]["body"].as_str().unwrap().contains("Zanzibar"));
    assert!(context_text(&db).contains("Zanzibar"), "the agent sees it");
    assert_eq!(short_status(&db)["due"], false);

    let trip = kit::thread_id(SURFACE, "trip");
    cli(&db, &["forget", "--thread", &trip, "--yes", "--json"]).ok();

    let listed = short_versions(&db);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["id"], first.as_str());
    assert_eq!(listed[0]["body"], "", "{listed:?}");
    assert!(listed[0]["withdrawn_at"].is_string(), "{listed:?}");
    let status = short_status(&db);
    assert_eq!(status["due"], true, "{status}");
    assert!(status["current"].is_null(), "{status}");
    let text = context_text(&db);
    for word in ["Zanzibar", "snorkelling", "Stone Town"] {
        assert!(
            !text.contains(word),
            "{word:?} is still given to agents:\n{text}"
        );
    }

    let run = cli_json(&db, &["distill", "short", "--json"]);
    assert_eq!(run["outcome"], "ok", "{run}");
    assert_ne!(run["version"], first.as_str());
    let listed = short_versions(&db);
    assert_eq!(listed.len(), 2, "{listed:?}");
    let body = listed[0]["body"].as_str().unwrap();
    assert!(body.contains("borrow checker"), "{body}");
    assert!(!body.contains("Zanzibar"), "{body}");
    assert_eq!(short_status(&db)["due"], false);
    // A diff against the withdrawn version has nothing to compare with, and says what to do instead.
    let second = run["version"].as_str().unwrap();
    let d = cli(&db, &["memory", "diff", second]);
    assert!(!d.status.success(), "{}", d.stdout);
    assert!(
        d.stderr.contains("withdrawn") && d.stderr.contains("memory show"),
        "{}",
        d.stderr
    );
    assert!(!d.stdout.contains("Zanzibar") && !d.stderr.contains("Zanzibar"));
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `personkit pair --sync` on `to`, `personkit sync add` on `from`.
fn link(from: &Relay, to: &Relay) {
    let code = to.cli_json(&["pair", "--sync", "--json"])["code"]
        .as_str()
        .unwrap()
        .to_owned();
    from.cli_json(&["sync", "add", &to.base, "--code", &code, "--json"]);
}

/// The short version `id` as `relay` lists it, if it has it.
fn short_version(relay: &Relay, id: &str) -> Option<Value> {
    relay
        .cli_json(&["memory", "list", "--tier", "short", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == id)
        .cloned()
}

#[test]
fn memory_made_on_one_relay_reaches_the_other_and_a_forget_withdraws_it_there() {
    let (_ta, db_a) = kit::temp_db();
    let (_tb, db_b) = kit::temp_db();
    let a = Relay::start(&db_a, &["--sync-interval", "2"]);
    let b = Relay::start(&db_b, &["--sync-interval", "2"]);
    let tok_a = a.pair_printed("laptop browser");
    link(&a, &b);
    a.http.send_batch(&tok_a, &conversations());

    let run = a.cli_json(&["distill", "short", "--json"]);
    assert_eq!(run["outcome"], "ok", "{run}");
    let id = run["version"].as_str().unwrap().to_owned();
    let on_a = short_version(&a, &id).unwrap();
    wait_for("A's short memory on B", Duration::from_secs(20), || {
        short_version(&b, &id).is_some()
    });
    let on_b = short_version(&b, &id).unwrap();
    assert_eq!(on_b["body"], on_a["body"]);
    assert!(on_b["body"].as_str().unwrap().contains("Zanzibar"));
    assert_eq!(on_b["created_at"], on_a["created_at"]);
    assert_eq!(on_b["sources"], 2, "{on_b}");

    let trip = kit::thread_id(SURFACE, "trip");
    let r = a.http.delete(&format!("/v1/threads/{trip}"), Some(&tok_a));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(short_version(&a, &id).unwrap()["body"], "");
    wait_for("the withdrawal on B", Duration::from_secs(20), || {
        short_version(&b, &id).is_some_and(|v| v["withdrawn_at"].is_string())
    });
    let on_b = short_version(&b, &id).unwrap();
    assert_eq!(on_b["body"], "", "{on_b}");
    let text = b.cli_json(&["context", "--tier", "2", "--json"])["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!text.contains("Zanzibar"), "{text}");
}
