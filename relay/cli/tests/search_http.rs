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

/// What leaves for a cloud embedder: a real relay configured with an OpenAI-compatible embedder whose endpoint is
/// not on loopback (a stand-in for the cloud API, listening on this machine's non-loopback address) receives
/// e-mails, phone numbers and amounts as placeholders — for stored turns and for queries — and `corpus health`
/// says so; with `scrub = "off"` the same text goes as stored.
#[test]
fn text_for_a_remote_embedder_is_scrubbed_unless_turned_off() {
    let ip = search_support::non_loopback_ip();
    let server = search_support::StandIn::start_on(
        ip.unwrap_or(std::net::Ipv4Addr::LOCALHOST.into()),
        |_, body| {
            let data: Vec<_> = body["input"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .enumerate()
                .map(|(i, t)| serde_json::json!({"index": i, "embedding": search_support::fake_vector(t.as_str().unwrap_or(""), 384)}))
                .collect();
            (200, serde_json::json!({"data": data}))
        },
    );
    // Without a non-loopback interface the rule cannot be exercised by address; force it instead (and say so).
    let mode = if ip.is_some() {
        "auto"
    } else {
        eprintln!(
            "note: no non-loopback address on this machine; testing scrub = \"on\" against loopback"
        );
        "on"
    };
    let secret_text =
        "Mail me at jane.doe@example.org or call +1 415 555 2671, the quote was $12,400.";
    let sent = |scrub: &str| -> Vec<String> {
        let (_tmp, db) = common::temp_db();
        std::fs::write(
            db.parent().unwrap().join("config.toml"),
            format!(
                "[embedder]\nkind = \"openai\"\nbase_url = {:?}\nmodel = \"stand-in\"\ndim = 384\nscrub = {scrub:?}\n",
                server.base
            ),
        )
        .unwrap();
        server.seen.lock().unwrap().clear();
        let relay = Relay::start(&db, &[]);
        let health = cli(&db, &["corpus", "health", "--json"]).json();
        let token = relay.pair_printed("scrub-test");
        let items = vec![turn(
            "browser-ext:claude",
            "scrub",
            Role::User,
            secret_text,
            Some(0),
        )];
        let resp = relay
            .http
            .post_json("/v1/observations", Some(&token), &batch(&items));
        assert_eq!(resp.status, 200, "{}", resp.body);
        let deadline = Instant::now() + Duration::from_secs(60);
        // `corpus health` asks the endpoint once with a fixed text; the worker's request is the one awaited.
        let from_worker = |s: &search_support::Seen| {
            s.body["input"][0].as_str() != Some("personkit health check")
        };
        while !server.seen.lock().unwrap().iter().any(from_worker) {
            assert!(
                Instant::now() < deadline,
                "the worker never called the embedder"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let q = relay.http.get(
            "/v1/query?q=write%20to%20bob%40corp.example%20about%20%E2%82%AC900&k=1",
            Some(&token),
        );
        assert_eq!(q.status, 200, "{}", q.body);
        let mut texts: Vec<String> = server
            .seen
            .lock()
            .unwrap()
            .iter()
            .flat_map(|s| s.body["input"].as_array().cloned().unwrap_or_default())
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect();
        texts.push(health["search"]["scrub"].as_str().unwrap_or("").to_owned());
        texts
    };

    let scrubbed = sent(mode);
    let all = scrubbed.join("\n");
    for leaked in [
        "jane.doe@example.org",
        "415 555 2671",
        "12,400",
        "bob@corp.example",
        "900",
    ] {
        assert!(!all.contains(leaked), "{leaked:?} left the machine: {all}");
    }
    assert!(
        all.contains("Mail me at [EMAIL] or call [PHONE], the quote was [AMOUNT].")
            && all.contains("write to [EMAIL] about [AMOUNT]"),
        "{all}"
    );
    assert!(scrubbed.last().unwrap().starts_with("on:"), "{all}");

    let raw = sent("off");
    let all = raw.join("\n");
    assert!(all.contains(secret_text), "{all}");
    assert!(raw.last().unwrap().starts_with("OFF:"), "{all}");
}

/// Search without the embedder: a real relay whose OpenAI-compatible embedder (a stand-in for a remote API, on
/// loopback) goes down, hangs and answers garbage still answers `/v1/query` and the dashboard from keywords, says
/// the vector signal was skipped and why — in the response and on each hit — within its query timeout, and
/// `corpus health` shows the error; when the endpoint is back, meaning is searched again.
#[test]
fn a_failing_embedder_costs_the_vector_signal_not_the_search() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU8, Ordering};
    const GOOD: u8 = 0;
    const DOWN: u8 = 1;
    const HANGS: u8 = 2;
    const GARBAGE: u8 = 3;
    let mode = Arc::new(AtomicU8::new(GOOD));
    let m = mode.clone();
    let server = search_support::StandIn::start(move |_, body| match m.load(Ordering::SeqCst) {
        DOWN => (
            500,
            serde_json::json!({"error": {"message": "model overloaded"}}),
        ),
        HANGS => {
            std::thread::sleep(Duration::from_secs(3));
            (200, serde_json::json!({"data": []}))
        }
        GARBAGE => (
            200,
            serde_json::json!({"data": [{"embedding": [0.5, "x"]}]}),
        ),
        _ => {
            let data: Vec<_> = body["input"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .enumerate()
                .map(|(i, t)| serde_json::json!({"index": i, "embedding": search_support::fake_vector(t.as_str().unwrap_or(""), 384)}))
                .collect();
            (200, serde_json::json!({"data": data}))
        }
    });
    let (_tmp, db) = common::temp_db();
    std::fs::write(
        db.parent().unwrap().join("config.toml"),
        format!(
            "[embedder]\nkind = \"openai\"\nbase_url = {:?}\nmodel = \"stand-in\"\ndim = 384\nquery_timeout_ms = 700\n",
            server.base
        ),
    )
    .unwrap();
    let relay = Relay::start(&db, &[]);
    let token = relay.pair_printed("no-embedder");
    let items = vec![
        turn(
            "browser-ext:claude",
            "pg",
            Role::User,
            "How should I plan the Postgres upgrade?",
            Some(0),
        ),
        turn(
            "browser-ext:claude",
            "pg",
            Role::Assistant,
            "Run pg_upgrade on a copy of the Postgres data first.",
            Some(1),
        ),
    ];
    let resp = relay
        .http
        .post_json("/v1/observations", Some(&token), &batch(&items));
    assert_eq!(resp.status, 200, "{}", resp.body);
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.seen.lock().unwrap().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the worker never called the embedder"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let signals = |v: &serde_json::Value, k: &str| -> Vec<String> {
        v[k].as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|s| s.as_str().or(s["signal"].as_str()).unwrap_or("").to_owned())
            .collect()
    };
    // Working: both signals, nothing skipped.
    let ok = relay
        .http
        .get("/v1/query?q=postgres%20upgrade", Some(&token));
    assert_eq!(ok.status, 200, "{}", ok.body);
    let ok = ok.json();
    assert!(
        signals(&ok, "signals_used").contains(&"vector".to_owned()),
        "{ok}"
    );
    assert!(signals(&ok, "signals_skipped").is_empty(), "{ok}");

    for (m, why) in [
        (DOWN, "HTTP 500"),
        (HANGS, "time"),
        (GARBAGE, "unexpected answer"),
    ] {
        mode.store(m, Ordering::SeqCst);
        let started = Instant::now();
        let r = relay
            .http
            .get("/v1/query?q=postgres%20upgrade", Some(&token));
        let took = started.elapsed();
        assert_eq!(r.status, 200, "mode {m}: {}", r.body);
        let v = r.json();
        assert_eq!(signals(&v, "signals_used"), ["fts"], "mode {m}: {v}");
        let sk = &v["signals_skipped"][0];
        assert_eq!(
            (sk["signal"].as_str(), sk["code"].as_str()),
            (Some("vector"), Some("embedder_unavailable")),
            "mode {m}: {v}"
        );
        let reason = sk["reason"].as_str().unwrap_or("");
        assert!(
            reason.to_lowercase().contains(&why.to_lowercase()),
            "mode {m}: {reason}"
        );
        assert!(
            !reason.contains("postgres"),
            "the query text is not in the reason: {reason}"
        );
        let hits = v["hits"].as_array().unwrap();
        assert_eq!(hits.len(), 2, "mode {m}: {v}");
        for h in hits {
            assert_eq!(signals(h, "matched_via"), ["fts"], "{h}");
            assert_eq!(h["skipped"][0]["signal"], "vector", "{h}");
        }
        if m == HANGS {
            assert!(
                took < Duration::from_millis(2500),
                "a hanging endpoint held the search for {took:?}"
            );
            // Let the stand-in finish the hung request before the next mode.
            std::thread::sleep(Duration::from_secs(3));
        }
    }

    // corpus health shows the error while the endpoint fails.
    mode.store(DOWN, Ordering::SeqCst);
    let health = cli(&db, &["corpus", "health", "--json"]).json();
    assert_eq!(health["search"]["search"], "keywords", "{health}");
    let err = health["search"]["error"].as_str().unwrap_or("");
    assert!(
        err.contains("HTTP 500") && err.contains("skip the vector signal"),
        "{err}"
    );

    // The dashboard's search page says meaning was not searched.
    let link = relay.cli_json(&["open", "--json"]);
    let path = link["url"].as_str().unwrap()[relay.base.len()..].to_owned();
    let signed = relay.http.get_with(&path, &[]);
    let cookie = signed
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = relay
        .http
        .get_with("/search?q=postgres", &[("cookie", &cookie)]);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("Meaning was not searched") && page.body.contains("HTTP 500"),
        "{}",
        page.body
    );
    assert!(page.body.contains("Postgres"), "{}", page.body);

    // Back up: meaning is searched again.
    mode.store(GOOD, Ordering::SeqCst);
    let back = relay
        .http
        .get("/v1/query?q=postgres%20upgrade", Some(&token))
        .json();
    assert!(
        signals(&back, "signals_used").contains(&"vector".to_owned()),
        "{back}"
    );
    assert!(signals(&back, "signals_skipped").is_empty(), "{back}");
}
