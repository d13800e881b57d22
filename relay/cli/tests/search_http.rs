//! End to end: a real `personkit serve` with the real local model (configured by a `config.toml` next to the
//! corpus) ingests turns over HTTP, its background worker embeds them, `GET /v1/query` finds them with both
//! signals and the CLI (`corpus query`, `corpus embed`) reads the same corpus with the same embedder choice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_testkit as common;
use personkit_testkit as search_support;

use std::time::{Duration, Instant};

use common::{Relay, batch, cli, turn};
use personkit_shared::wire::Role;

fn write_config(dir: &std::path::Path) {
    let model = search_support::model_dir();
    std::fs::write(
        dir.join("config.toml"),
        format!(
            "[embedder]\nkind = \"local\"\nmodel_dir = {:?}\n",
            model.display().to_string()
        ),
    )
    .unwrap();
}

#[test]
fn query_over_http_and_cli_with_background_embedding() {
    let (_tmp, db) = common::temp_db();
    write_config(db.parent().unwrap());
    let relay = Relay::start(&db, &[]);
    let token = relay.pair_printed("search-test");
    let items = vec![
        turn(
            "browser-ext:chatgpt",
            "pg",
            Role::User,
            "How should I plan the Postgres 16 upgrade?",
            Some(0),
        ),
        turn(
            "browser-ext:chatgpt",
            "pg",
            Role::Assistant,
            "Use pg_upgrade with --link and test the migration on a copy of the database first.",
            Some(1),
        ),
        turn(
            "browser-ext:claude",
            "cooking",
            Role::User,
            "What is a good recipe for sourdough bread?",
            Some(0),
        ),
        turn(
            "browser-ext:claude",
            "cooking",
            Role::Assistant,
            "Feed the starter, then bake at 250 C.",
            Some(1),
        ),
    ];
    let resp = relay
        .http
        .post_json("/v1/observations", Some(&token), &batch(&items));
    assert_eq!(resp.status, 200, "{}", resp.body);

    // Auth like every /v1 route.
    relay
        .http
        .get("/v1/query?q=postgres", None)
        .assert_error(401, "unauthorized");
    // Bad input: a clear 400.
    relay
        .http
        .get("/v1/query?q=", Some(&token))
        .assert_error(400, "bad_query");
    relay
        .http
        .get("/v1/query?q=x&role=robot", Some(&token))
        .assert_error(400, "bad_query");

    // The worker embeds in the background; wait (bounded) until the vector signal contributes.
    let deadline = Instant::now() + Duration::from_secs(180);
    let hits = loop {
        let r = relay.http.get(
            "/v1/query?q=database%20migration%20advice&k=3",
            Some(&token),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        let hits = v["hits"].as_array().cloned().unwrap_or_default();
        if hits
            .first()
            .is_some_and(|h| h["matched_via"].as_array().unwrap().len() == 2)
        {
            assert!(v["model"].as_str().unwrap().starts_with("local:"), "{v}");
            break hits;
        }
        assert!(
            Instant::now() < deadline,
            "vector signal never appeared: {v}\n{}",
            relay.stderr()
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let top = &hits[0];
    assert!(
        top["snippet"].as_str().unwrap().contains("**migration**"),
        "{top}"
    );
    assert_eq!(top["matched_via"], serde_json::json!(["fts", "vector"]));
    assert_eq!(top["surface"], "browser-ext:chatgpt");
    assert_eq!(top["role"], "assistant");
    for field in ["id", "thread_id", "occurred_at", "signals"] {
        assert!(!top[field].is_null(), "{field} missing in {top}");
    }
    assert!(top["signals"]["fts"]["rank"].as_u64().is_some(), "{top}");
    assert!(top["signals"]["vector"]["rank"].as_u64().is_some(), "{top}");
    // Meaning without shared words: "pastry oven" finds the bread thread through the vector signal only.
    let v = relay
        .http
        .get(
            "/v1/query?q=pastry%20oven&k=1&surface=browser-ext:claude",
            Some(&token),
        )
        .json();
    assert_eq!(v["hits"][0]["surface"], "browser-ext:claude", "{v}");
    assert_eq!(
        v["hits"][0]["matched_via"],
        serde_json::json!(["vector"]),
        "{v}"
    );

    // The CLI uses the same config (next to the DB) and corpus.
    let out = cli(&db, &["corpus", "query", "database migration", "--k", "2"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("browser-ext:chatgpt"), "{}", out.stdout);
    assert!(out.stdout.contains("[migration]"), "{}", out.stdout);
    assert!(
        out.stdout.contains("matched: words #1, meaning #"),
        "{}",
        out.stdout
    );
    let out = cli(&db, &["corpus", "query", "database migration", "--json"]);
    assert!(out.status.success(), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["hits"][0]["id"], top["id"]);
    let out = cli(&db, &["corpus", "embed", "--json"]);
    assert!(out.status.success(), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["pending"], 0, "{v}");
}

/// A newcomer's relay: with no configuration at all, search is keywords only and says how to get more; once the
/// model is installed where `personkit model fetch` (and `scripts/run`) puts it, the same relay restarted serves
/// hybrid search with no configuration, and `corpus health` says which search runs.
#[test]
fn semantic_by_default_once_the_model_is_installed() {
    let (_tmp, db) = common::temp_db();
    let relay = Relay::start(&db, &[]);
    let said = |relay: &Relay| {
        relay
            .stdout_lines()
            .into_iter()
            .find(|l| l.starts_with("personkit: search: "))
            .unwrap_or_else(|| relay.fail("serve did not say which search runs"))
    };
    let line = said(&relay);
    assert!(line.contains("keywords only"), "{line}");
    assert!(line.contains("personkit model fetch"), "{line}");
    let health = cli(&db, &["corpus", "health", "--json"]).json();
    assert_eq!(health["search"]["search"], "keywords", "{health}");
    drop(relay);

    // HOME is the corpus folder for both the CLI and the relay: install the model there.
    let model = search_support::model_dir();
    let out = cli(
        &db,
        &["model", "fetch", "--from-dir", model.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", out.stderr);
    let relay = Relay::start(&db, &[]);
    let line = said(&relay);
    assert!(
        line.contains("hybrid") && line.contains("local:all-MiniLM-L6-v2@"),
        "{line}"
    );
    let health = cli(&db, &["corpus", "health"]);
    assert!(
        health
            .stdout
            .contains("search     hybrid (keywords + local embeddings"),
        "{}",
        health.stdout
    );
    let token = relay.pair_printed("default-search");
    let items = vec![turn(
        "browser-ext:claude",
        "bread",
        Role::User,
        "What is a good recipe for sourdough bread?",
        Some(0),
    )];
    let resp = relay
        .http
        .post_json("/v1/observations", Some(&token), &batch(&items));
    assert_eq!(resp.status, 200, "{}", resp.body);
    // Meaning without shared words reaches the turn once the background worker has embedded it.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let v = relay
            .http
            .get("/v1/query?q=pastry%20oven&k=1", Some(&token))
            .json();
        if v["hits"][0]["matched_via"] == serde_json::json!(["vector"]) {
            break;
        }
        assert!(Instant::now() < deadline, "no vector hit: {v}");
        std::thread::sleep(Duration::from_millis(300));
    }
}
