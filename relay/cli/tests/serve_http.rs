//! Integration tests against the REAL `personkit` binary: `serve` on an ephemeral loopback port with a temp
//! corpus, pairing, batches over a real socket, and the CLI (`corpus surfaces|messages|search`, `devices`,
//! `pair --json`) reading the same database while the server runs. Bad input is sent over the socket too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_testkit as common;

use common::*;
use personkit_shared::wire::Role;
use serde_json::{Value, json};

const CHATGPT: &str = "browser-ext:chatgpt";
const CLAUDE: &str = "browser-ext:claude";

/// A started relay with one paired device.
fn paired(extra: &[&str]) -> (tempfile::TempDir, Relay, String) {
    let (dir, db) = temp_db();
    let relay = Relay::start(&db, extra);
    let token = relay.pair_printed("test device");
    (dir, relay, token)
}

#[test]
fn rfc3339_helper_is_right() {
    assert_eq!(rfc3339(1_795_000_000), "2026-11-18T11:06:40Z");
    assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
}

#[test]
fn health_needs_no_token_and_the_rest_does() {
    let (_dir, db) = temp_db();
    let relay = Relay::start(&db, &["--rate-limit", "0"]);
    let h = relay.http.get("/v1/health", None);
    assert_eq!(h.status, 200, "{}", h.body);
    let v = h.json();
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["version"].is_string(), "{v}");

    let one = turn(CHATGPT, "c-auth", Role::User, "needs a token", Some(0));
    relay
        .http
        .post_json("/v1/observations", None, &batch(std::slice::from_ref(&one)))
        .assert_error(401, "unauthorized");
    relay
        .http
        .post_json("/v1/observations", Some("not-a-real-token"), &batch(&[one]))
        .assert_error(401, "unauthorized");
    relay
        .http
        .get("/v1/me/capture-health", None)
        .assert_error(401, "unauthorized");
}

#[test]
fn pairing_codes_are_one_use_and_pair_cli_works_with_a_running_server() {
    let (_dir, db) = temp_db();
    let relay = Relay::start(&db, &["--rate-limit", "0"]);
    let code = relay.printed_pairing_code();
    let plain: String = code.chars().filter(|c| *c != '-').collect();
    assert_eq!(plain.len(), 8, "8-character code, printed {code:?}");

    // A wrong code is refused.
    let wrong = if plain.starts_with('A') {
        "BBBBBBBB"
    } else {
        "AAAAAAAA"
    };
    relay
        .http
        .post_json(
            "/v1/pair",
            None,
            &json!({"code": wrong, "device_name": "x"}),
        )
        .assert_error(401, "invalid_pairing_code");

    // Lower case without the dash is accepted; the code then is used up.
    let token1 = relay.pair_with(&plain.to_lowercase(), "first");
    relay
        .http
        .post_json(
            "/v1/pair",
            None,
            &json!({"code": code, "device_name": "again"}),
        )
        .assert_error(401, "invalid_pairing_code");

    // A code made by a separate `personkit pair --json` process is accepted by the running server.
    let v = relay.cli_json(&["pair", "--json"]);
    let code2 = v["code"]
        .as_str()
        .unwrap_or_else(|| panic!("pair --json lacks code: {v}"));
    assert!(
        v["expires_at"].is_string(),
        "pair --json lacks expires_at: {v}"
    );
    let token2 = relay.pair_with(code2, "second");
    assert_ne!(token1, token2);

    // Both tokens work.
    for t in [&token1, &token2] {
        let r = relay.http.get("/v1/me/capture-health", Some(t));
        assert_eq!(r.status, 200, "{}", r.body);
    }

    // Human `pair` output carries the code line too.
    let human = relay.cli(&["pair"]);
    human.ok();
    assert!(
        human.stdout.contains("pairing code "),
        "`personkit pair` prints `pairing code <CODE> (valid until ...)`: {}",
        human.stdout
    );

    // Tokens are never logged.
    let log = relay.stderr();
    assert!(
        !log.contains(&token1) && !log.contains(&token2),
        "a token leaked to the log"
    );
}

#[test]
fn a_batch_lands_replays_are_duplicates_and_the_cli_shows_it() {
    let (_dir, relay, token) = paired(&["--rate-limit", "0"]);
    let secret_word = "zebracornflakes";
    let items = vec![
        turn(
            CHATGPT,
            "conv-1",
            Role::User,
            &format!("tell me about {secret_word}"),
            Some(0),
        ),
        turn(
            CHATGPT,
            "conv-1",
            Role::Assistant,
            "they are a breakfast myth",
            Some(1),
        ),
        turn(
            CHATGPT,
            "conv-2",
            Role::User,
            "second thread on chatgpt",
            Some(0),
        ),
        turn(
            CLAUDE,
            "conv-1",
            Role::User,
            "same conversation id, other surface",
            Some(0),
        ),
    ];
    let v = relay.http.send_batch(&token, &items);
    assert_eq!(statuses(&v), ["stored"; 4], "{v}");
    for (item, r) in items.iter().zip(v["results"].as_array().unwrap()) {
        let tid = item["thread_id"].as_str().unwrap();
        assert_eq!(r["thread_id"], tid, "{r}");
        let expected = personkit_shared::ids::message_id(
            &tid.parse().unwrap(),
            item["turn"]["content_hash"].as_str().unwrap(),
        )
        .to_string();
        assert_eq!(
            r["message_id"], expected,
            "message id is content-derived: {r}"
        );
    }

    // The same batch again: every item is a duplicate, nothing new is stored.
    let again = relay.http.send_batch(&token, &items);
    assert_eq!(statuses(&again), ["duplicate"; 4], "{again}");

    // corpus messages --json: exactly the three chatgpt turns, with their fields.
    let msgs = relay.cli_json(&["corpus", "messages", "--surface", CHATGPT, "--json"]);
    let msgs = msgs.as_array().expect("array");
    assert_eq!(msgs.len(), 3, "{msgs:?}");
    for item in &items[..3] {
        let hash = item["turn"]["content_hash"].as_str().unwrap();
        let m = msgs
            .iter()
            .find(|m| m["content_hash"] == hash)
            .unwrap_or_else(|| panic!("turn {hash} missing from {msgs:?}"));
        assert_eq!(m["content"], item["turn"]["content"]);
        assert_eq!(m["role"], item["turn"]["role"]);
        assert_eq!(m["thread_id"], item["thread_id"]);
        assert_eq!(m["surface"], CHATGPT);
        assert_eq!(m["ordinal"], item["turn"]["ordinal"]);
        assert!(
            m.get("message_key").is_some(),
            "message_key field present (null here): {m}"
        );
        assert!(m["captured_at"].is_string(), "{m}");
        assert!(dump_row(m).is_current);
    }

    // --thread narrows to one thread.
    let t2 = thread_id(CHATGPT, "conv-2");
    let one = relay.cli_json(&[
        "corpus",
        "messages",
        "--surface",
        CHATGPT,
        "--thread",
        &t2,
        "--json",
    ]);
    let one = one.as_array().expect("array");
    assert_eq!(one.len(), 1, "{one:?}");
    assert_eq!(one[0]["thread_id"], t2);

    // --limit caps the listing.
    let lim = relay.cli_json(&[
        "corpus",
        "messages",
        "--surface",
        CHATGPT,
        "--limit",
        "2",
        "--json",
    ]);
    assert_eq!(lim.as_array().expect("array").len(), 2, "{lim}");

    // The other surface holds its own thread.
    let c = relay.cli_json(&["corpus", "messages", "--surface", CLAUDE, "--json"]);
    assert_eq!(c.as_array().expect("array").len(), 1, "{c}");

    // corpus surfaces --json names both surfaces.
    // (The contract does not name the roll-up's fields; these are the relay's: surface, threads, messages.)
    let s = relay.cli_json(&["corpus", "surfaces", "--json"]);
    let roll = |name: &str| {
        s.as_array()
            .and_then(|a| a.iter().find(|x| x["surface"] == name).cloned())
            .unwrap_or_else(|| panic!("{name} missing from corpus surfaces: {s}"))
    };
    assert_eq!(roll(CHATGPT)["threads"], 2, "{s}");
    assert_eq!(roll(CHATGPT)["messages"], 3, "{s}");
    assert_eq!(roll(CLAUDE)["threads"], 1, "{s}");
    assert_eq!(roll(CLAUDE)["messages"], 1, "{s}");
    let s7 = relay.cli_json(&["corpus", "surfaces", "--since", "7d", "--json"]);
    assert!(s7.to_string().contains(CHATGPT), "{s7}");

    // Human tables print too.
    let human = relay.cli(&["corpus", "messages", "--surface", CHATGPT]);
    human.ok();
    assert!(human.stdout.contains("breakfast"), "{}", human.stdout);
    relay.cli(&["corpus", "surfaces"]).ok();
    relay.cli(&["corpus", "health"]).ok();

    // corpus search finds the unique word (FTS5), and only that message.
    let found = relay.cli_json(&["corpus", "query", "--all-words", secret_word, "--json"]);
    let hits = found
        .as_array()
        .unwrap_or_else(|| panic!("search --json prints an array: {found}"));
    assert_eq!(
        hits.len(),
        1,
        "exactly the one message with the word: {found}"
    );
    assert_eq!(
        hits[0]["message_id"], v["results"][0]["message_id"],
        "{found}"
    );
    assert!(
        found.to_string().contains(secret_word),
        "the hit shows the word: {found}"
    );
    let none = relay.cli_json(&[
        "corpus",
        "query",
        "--all-words",
        "qqxxnonexistentword",
        "--json",
    ]);
    assert_eq!(
        none,
        serde_json::json!([]),
        "search for a missing word returned hits"
    );

    // Capture health: both surfaces green with a last accepted time.
    let h = relay.http.get("/v1/me/capture-health", Some(&token));
    assert_eq!(h.status, 200, "{}", h.body);
    let h = h.json();
    assert!(h["generated_at"].is_string(), "{h}");
    let surfaces = h["surfaces"].as_array().expect("surfaces array");
    for name in [CHATGPT, CLAUDE] {
        let s = surfaces
            .iter()
            .find(|s| s["surface"] == name)
            .unwrap_or_else(|| panic!("{name} missing from capture health {h}"));
        assert_eq!(s["status"], "green", "{s}");
        assert!(s["last_accepted_at"].is_string(), "{s}");
        assert!(s["turns_24h"].as_u64().unwrap_or(0) >= 1, "{s}");
        assert!(s["threads_24h"].as_u64().unwrap_or(0) >= 1, "{s}");
    }

    // Logs never carry content or the token.
    let log = relay.stderr();
    assert!(
        !log.contains(secret_word),
        "message content leaked into the log"
    );
    assert!(!log.contains(&token), "token leaked into the log");
}

#[test]
fn a_new_content_at_the_same_position_is_a_revision() {
    let (_dir, relay, token) = paired(&["--rate-limit", "0"]);
    // By ordinal.
    let a = turn(
        CHATGPT,
        "rev",
        Role::Assistant,
        "first draft answer",
        Some(1),
    );
    let b = turn(
        CHATGPT,
        "rev",
        Role::Assistant,
        "regenerated answer",
        Some(1),
    );
    assert_eq!(
        statuses(&relay.http.send_batch(&token, std::slice::from_ref(&a))),
        ["stored"]
    );
    assert_eq!(
        statuses(&relay.http.send_batch(&token, std::slice::from_ref(&b))),
        ["stored"]
    );
    // By message key.
    let k1 = turn_at(
        CHATGPT,
        "rev-key",
        Role::User,
        "typo'd qestion",
        None,
        Some("msg-7"),
        &now_rfc3339(),
    );
    let k2 = turn_at(
        CHATGPT,
        "rev-key",
        Role::User,
        "fixed question",
        None,
        Some("msg-7"),
        &now_rfc3339(),
    );
    assert_eq!(
        statuses(&relay.http.send_batch(&token, std::slice::from_ref(&k1))),
        ["stored"]
    );
    assert_eq!(
        statuses(&relay.http.send_batch(&token, std::slice::from_ref(&k2))),
        ["stored"]
    );
    // Replaying the old revision does not make it current again, nor a third row.
    assert_eq!(
        statuses(&relay.http.send_batch(&token, &[a.clone(), k1.clone()])),
        ["duplicate"; 2]
    );

    let rows = dump_surface(&relay.db, CHATGPT);
    assert_eq!(rows.len(), 4, "both revisions of both turns kept: {rows:?}");
    for (old, new) in [(&a, &b), (&k1, &k2)] {
        let find = |x: &Value| {
            rows.iter()
                .find(|r| r.content_hash == x["turn"]["content_hash"].as_str().unwrap())
                .unwrap_or_else(|| panic!("missing revision {x}"))
                .clone()
        };
        assert!(
            !find(old).is_current,
            "old revision still current: {rows:?}"
        );
        assert!(find(new).is_current, "new revision not current: {rows:?}");
    }
}

#[test]
fn bad_items_are_rejected_one_by_one_and_valid_ones_still_land() {
    let (_dir, relay, token) = paired(&["--rate-limit", "0"]);
    let good = turn(
        CHATGPT,
        "bad-input",
        Role::User,
        "the one good turn",
        Some(0),
    );

    let mut unknown_kind = turn(CHATGPT, "bad-input", Role::User, "kind?", Some(1));
    unknown_kind["kind"] = json!("page_view");
    let mut hash_mismatch = turn(CHATGPT, "bad-input", Role::User, "original", Some(2));
    hash_mismatch["turn"]["content"] = json!("tampered after hashing");
    let mut forged_thread = turn(CHATGPT, "bad-input", Role::User, "forged thread", Some(3));
    forged_thread["thread_id"] = json!(thread_id(CHATGPT, "somebody-else"));
    let mut empty = turn(CHATGPT, "bad-input", Role::User, "x", Some(4));
    empty["turn"]["content"] = json!("   ");
    empty["turn"]["content_hash"] = json!(personkit_shared::ids::content_hash("   ", Role::User));
    let mut bad_surface = turn(CHATGPT, "bad-input", Role::User, "surface?", Some(5));
    bad_surface["source_surface"] = json!("chatgpt");
    let mut wrong_type = turn(CHATGPT, "bad-input", Role::User, "types", Some(6));
    wrong_type["turn"]["ordinal"] = json!("first");
    let not_an_object = json!("just a string");
    let mut bad_time = turn(CHATGPT, "bad-input", Role::User, "time", Some(7));
    bad_time["turn"]["captured_at"] = json!("yesterday");
    let big = "a".repeat(600 * 1024);
    let too_big = turn(CHATGPT, "bad-input", Role::User, &big, Some(8));

    let items = vec![
        unknown_kind,
        good.clone(),
        hash_mismatch,
        forged_thread,
        empty,
        bad_surface,
        wrong_type,
        not_an_object,
        bad_time,
        too_big,
    ];
    let v = relay.http.send_batch(&token, &items);
    let codes: Vec<Value> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["error"]["code"].clone())
        .collect();
    assert_eq!(
        codes,
        [
            json!("unknown_kind"),
            Value::Null,
            json!("hash_mismatch"),
            json!("thread_id_mismatch"),
            json!("empty_field"),
            json!("invalid_surface"),
            json!("malformed_item"),
            json!("malformed_item"),
            json!("bad_timestamp"),
            json!("too_large"),
        ],
        "{v}"
    );
    assert_eq!(v["stored"], 1, "{v}");
    assert_eq!(v["rejected"], 9, "{v}");

    let rows = dump_surface(&relay.db, CHATGPT);
    assert_eq!(rows.len(), 1, "only the good turn landed: {rows:?}");
    assert_eq!(
        rows[0].content_hash,
        good["turn"]["content_hash"].as_str().unwrap()
    );

    // The rejection shows up in capture health for the surface it named.
    let mut gem = turn("browser-ext:gemini", "g", Role::User, "orig", Some(0));
    gem["turn"]["content"] = json!("changed");
    let v = relay.http.send_batch(&token, &[gem]);
    assert_eq!(statuses(&v), ["rejected"], "{v}");
    let h = relay.http.get("/v1/me/capture-health", Some(&token)).json();
    let s = h["surfaces"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|s| s["surface"] == "browser-ext:gemini")
                .cloned()
        })
        .unwrap_or_else(|| panic!("gemini missing from capture health after its error: {h}"));
    assert_eq!(s["status"], "red", "{s}");
    assert_eq!(s["last_error"]["code"], "hash_mismatch", "{s}");
}

#[test]
fn malformed_bodies_get_400_with_code_message_hint() {
    let (_dir, relay, token) = paired(&["--rate-limit", "0"]);
    let t = Some(token.as_str());
    relay
        .http
        .post("/v1/observations", t, b"{\"observations\": [")
        .assert_error(400, "malformed_json");
    relay
        .http
        .post("/v1/observations", t, b"not json at all")
        .assert_error(400, "malformed_json");
    relay
        .http
        .post("/v1/observations", t, br#"{"items": []}"#)
        .assert_error(400, "malformed_batch");
    relay
        .http
        .post("/v1/observations", t, br#"{"observations": "nope"}"#)
        .assert_error(400, "malformed_batch");
    relay
        .http
        .post("/v1/observations", t, b"[]")
        .assert_error(400, "malformed_batch");
    // Nothing was stored by any of it, and the server is still fine.
    let ok = turn(CHATGPT, "after-bad", Role::User, "still alive", Some(0));
    assert_eq!(statuses(&relay.http.send_batch(&token, &[ok])), ["stored"]);
    assert_eq!(dump_surface(&relay.db, CHATGPT).len(), 1);
}

#[test]
fn oversize_batches_get_413_and_store_nothing() {
    let (_dir, relay, token) = paired(&[
        "--rate-limit",
        "0",
        "--max-batch-items",
        "3",
        "--max-batch-bytes",
        "8192",
    ]);
    let items: Vec<Value> = (0..4)
        .map(|i| turn(CHATGPT, "big", Role::User, &format!("turn {i}"), Some(i)))
        .collect();
    relay
        .http
        .post_json("/v1/observations", Some(&token), &batch(&items))
        .assert_error(413, "batch_too_large");

    // Few items but too many bytes. Kept small so the whole body fits in the socket buffers.
    let fat: Vec<Value> = (0..2)
        .map(|i| {
            turn(
                CHATGPT,
                "big",
                Role::User,
                &"b".repeat(6000 + i as usize),
                Some(10 + i),
            )
        })
        .collect();
    relay
        .http
        .post_json("/v1/observations", Some(&token), &batch(&fat))
        .assert_error(413, "batch_too_large");

    // Exactly at the item limit is fine.
    let v = relay.http.send_batch(&token, &items[..3]);
    assert_eq!(statuses(&v), ["stored"; 3]);
    let rows = dump_surface(&relay.db, CHATGPT);
    assert_eq!(
        rows.len(),
        3,
        "nothing from the refused batches landed: {rows:?}"
    );
}

#[test]
fn a_revoked_token_gets_401_and_others_keep_working() {
    let (_dir, relay, token1) = paired(&["--rate-limit", "0"]);
    let code = relay.cli_json(&["pair", "--json"])["code"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = relay.http.post_json(
        "/v1/pair",
        None,
        &json!({"code": code, "device_name": "to be revoked"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let paired2 = r.json();
    let token2 = paired2["token"].as_str().unwrap().to_owned();
    let device2 = paired2["device_id"]
        .as_str()
        .unwrap_or_else(|| panic!("pair response lacks device_id: {paired2}"))
        .to_owned();

    let list = relay.cli_json(&["devices", "list", "--json"]);
    let arr = list
        .as_array()
        .unwrap_or_else(|| panic!("devices list --json is an array: {list}"));
    assert_eq!(arr.len(), 2, "{list}");
    assert!(list.to_string().contains(&device2), "{list}");
    assert!(list.to_string().contains("to be revoked"), "{list}");
    assert!(
        !list.to_string().contains(&token1) && !list.to_string().contains(&token2),
        "tokens listed"
    );
    relay.cli(&["devices", "list"]).ok();

    let one = turn(CHATGPT, "revoke", Role::User, "before revoke", Some(0));
    assert_eq!(
        statuses(&relay.http.send_batch(&token2, &[one])),
        ["stored"]
    );

    relay.cli(&["devices", "revoke", &device2]).ok();
    let two = turn(CHATGPT, "revoke", Role::User, "after revoke", Some(1));
    relay
        .http
        .post_json(
            "/v1/observations",
            Some(&token2),
            &batch(std::slice::from_ref(&two)),
        )
        .assert_error(401, "unauthorized");
    relay
        .http
        .get("/v1/me/capture-health", Some(&token2))
        .assert_error(401, "unauthorized");
    assert_eq!(
        statuses(&relay.http.send_batch(&token1, &[two])),
        ["stored"]
    );

    // Revoking an unknown device fails with a message.
    let bad = relay.cli(&["devices", "revoke", "no-such-device"]);
    assert!(
        !bad.status.success(),
        "revoking an unknown device must fail: {}",
        bad.stdout
    );
}

#[test]
fn rate_limit_gives_429_with_retry_after() {
    let (_dir, relay, token) = paired(&["--rate-limit", "1"]);
    let mut limited = None;
    for _ in 0..1000 {
        let r = relay.http.get("/v1/me/capture-health", Some(&token));
        if r.status == 429 {
            limited = Some(r);
            break;
        }
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let r = limited.expect("no 429 within 1000 requests at --rate-limit 1");
    r.assert_error(429, "rate_limited");
    let after = r.header("retry-after").expect("429 carries Retry-After");
    assert!(
        after.trim().parse::<u64>().is_ok(),
        "Retry-After is seconds: {after:?}"
    );
}

#[test]
fn cors_allows_only_extension_origins() {
    let (_dir, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let ok = relay.http.get_with(
        "/v1/health",
        &[("origin", "chrome-extension://abcdefghijklmnop")],
    );
    assert_eq!(ok.status, 200);
    assert_eq!(
        ok.header("access-control-allow-origin"),
        Some("chrome-extension://abcdefghijklmnop"),
        "{:?}",
        ok.headers
    );
    let moz = relay
        .http
        .get_with("/v1/health", &[("origin", "moz-extension://1234-5678")]);
    assert_eq!(
        moz.header("access-control-allow-origin"),
        Some("moz-extension://1234-5678")
    );
    let evil = relay
        .http
        .get_with("/v1/health", &[("origin", "https://evil.example")]);
    let acao = evil.header("access-control-allow-origin");
    assert!(
        acao.is_none(),
        "a web page origin must not get CORS: {acao:?}"
    );
}

#[test]
fn non_loopback_bind_without_allow_remote_exits_with_a_clear_error() {
    let (dir, db) = temp_db();
    let mut child = std::process::Command::new(bin())
        .args(["serve", "--addr", "0.0.0.0:0", "--db"])
        .arg(&db)
        .env("HOME", dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + START_TIMEOUT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`serve --addr 0.0.0.0:0` without --allow-remote kept running");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let out = child.wait_with_output().expect("output");
    assert!(!status.success(), "must refuse a non-loopback bind");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--allow-remote"),
        "the error says what to do next: {err}"
    );
}

#[test]
fn sigterm_shuts_down_gracefully_and_keeps_what_was_acknowledged() {
    let (_dir, relay, token) = paired(&["--rate-limit", "0"]);
    let one = turn(
        CHATGPT,
        "term",
        Role::User,
        "acknowledged before SIGTERM",
        Some(0),
    );
    assert_eq!(statuses(&relay.http.send_batch(&token, &[one])), ["stored"]);
    let status = relay
        .sigterm_and_wait(START_TIMEOUT)
        .unwrap_or_else(|| relay.fail("relay still running after SIGTERM"));
    assert!(status.success(), "graceful shutdown exits 0, got {status}");
    assert_eq!(dump_surface(&relay.db, CHATGPT).len(), 1);
}

#[test]
fn the_cli_never_makes_a_corpus_out_of_a_missing_or_foreign_file() {
    let (dir, _) = temp_db();
    let missing = dir.path().join("nowhere/corpus.db");
    let out = cli(&missing, &["pair"]);
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("no corpus at"), "{}", out.stderr);
    assert!(
        !missing.exists() && !missing.parent().unwrap().exists(),
        "nothing created"
    );
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    for args in [
        &["pair"][..],
        &["corpus", "health"],
        &["corpus", "messages"],
        &["devices", "list"],
        &["corpus", "query", "anything"],
        &["corpus", "embed"],
    ] {
        let out = cli(&empty, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("not a personkit corpus"),
            "{args:?}: {}",
            out.stderr
        );
        assert_eq!(
            std::fs::metadata(&empty).unwrap().len(),
            0,
            "{args:?} wrote to the file"
        );
    }
}

#[test]
fn time_spans_out_of_range_are_errors_not_panics() {
    let (_dir, relay, token) = paired(&[]);
    relay.http.send_batch(
        &token,
        &[turn(CHATGPT, "spans", Role::User, "a turn", Some(0))],
    );
    for args in [
        &["corpus", "query", "turn", "--since", "99999999d"][..],
        &["corpus", "query", "turn", "--until", "9223372036854775807d"],
        &["corpus", "surfaces", "--since", "99999999d"],
        &["corpus", "surfaces", "--since", "999999999999w"],
    ] {
        let out = relay.cli(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("10,000 years"),
            "{args:?}: {}",
            out.stderr
        );
    }
}

#[test]
fn a_second_serve_on_the_same_corpus_refuses_and_names_the_first() {
    let (_dir, relay, _token) = paired(&[]);
    let out = relay.cli(&["serve", "--addr", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("pid {}", relay.pid())) && out.stderr.contains(&relay.base),
        "{}",
        out.stderr
    );
    assert!(
        !out.stdout.contains("pairing code"),
        "the refused serve printed a code: {}",
        out.stdout
    );
    // The first relay is untouched.
    assert_eq!(relay.http.get("/v1/health", None).status, 200);
}

/// Read commands on a corpus whose file system is mounted read-only (a private mount namespace made with
/// `unshare -m`, as root in this test environment).
#[test]
fn read_commands_work_on_a_read_only_mount() {
    let (dir, relay, token) = paired(&[]);
    relay.http.send_batch(
        &token,
        &[
            turn(
                CHATGPT,
                "ro",
                Role::User,
                "the borrow checker rejects this",
                Some(0),
            ),
            turn(
                CHATGPT,
                "ro",
                Role::Assistant,
                "use a shorter lifetime",
                Some(1),
            ),
        ],
    );
    assert!(
        relay
            .sigterm_and_wait(std::time::Duration::from_secs(20))
            .is_some()
    );
    let d = dir.path().display().to_string();
    let db = relay.db.display().to_string();
    let bin = bin().display().to_string();
    let script = format!(
        "set -e; mount --bind '{d}' '{d}'; mount -o remount,ro,bind '{d}'; \
         if touch '{d}/probe' 2>/dev/null; then echo 'mount is writable' >&2; exit 3; fi; \
         export HOME='{d}' PERSONKIT_DB='{db}'; \
         '{bin}' corpus health --json > /dev/null; \
         '{bin}' corpus surfaces --json; \
         '{bin}' devices list --json > /dev/null; \
         '{bin}' corpus query --all-words borrow --json; \
         '{bin}' corpus messages --json"
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
        .expect("run unshare");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "status {}\nstdout {stdout}\nstderr {stderr}",
        out.status
    );
    assert!(
        stdout.contains("the borrow checker rejects this"),
        "{stdout}"
    );
    assert!(stdout.contains("use a shorter lifetime"), "{stdout}");
}
