//! End to end against a real `personkit serve`: turns sent over `POST /v1/observations` read back through the
//! read API, and `personkit open`'s one-time link signing a client in to the dashboard, which shows them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_shared::wire::Role;
use personkit_testkit::{Relay, temp_db, thread_id, turn};

#[test]
fn read_api_and_dashboard_sign_in_through_personkit_open() {
    let (_tmp, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let token = relay.pair_printed("dash-test");
    let items = vec![
        turn(
            "browser-ext:claude",
            "q1",
            Role::User,
            "what is a <b>monad</b>",
            Some(0),
        ),
        turn(
            "browser-ext:claude",
            "q1",
            Role::Assistant,
            "a monoid in the category of endofunctors",
            Some(1),
        ),
    ];
    let r = relay.http.send_batch(&token, &items);
    assert_eq!(r["stored"], 2, "{r}");
    let id = thread_id("browser-ext:claude", "q1");

    let list = relay.http.get("/v1/threads?format=compact", Some(&token));
    assert_eq!(list.status, 200, "{}", list.body);
    assert_eq!(list.json()["ids"][0], id.as_str());
    let thread = relay
        .http
        .get(&format!("/v1/threads/{}", &id[..8]), Some(&token))
        .json();
    assert_eq!(
        thread["turns"][1]["content"],
        "a monoid in the category of endofunctors"
    );
    let ch = relay.http.get("/v1/changes?since=1h", Some(&token)).json();
    assert_eq!(ch["created"][0]["id"], id.as_str(), "{ch}");
    relay
        .http
        .get("/v1/threads?sort=title", Some(&token))
        .assert_error(400, "unknown_parameter");

    // `personkit open` finds the running relay through the corpus lock and makes a link.
    let link = relay.cli_json(&["open", "--json"]);
    let url = link["url"].as_str().unwrap();
    assert!(
        url.starts_with(&format!("{}/signin?t=", relay.base)),
        "{url}"
    );
    let path = &url[relay.base.len()..];
    let signed = relay.http.get_with(path, &[]);
    assert_eq!(signed.status, 200, "{}", signed.body);
    let cookie = signed
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(
        relay.http.get_with(path, &[]).status,
        401,
        "the link works once"
    );
    let page = relay
        .http
        .get_with(&format!("/threads/{id}"), &[("cookie", &cookie)]);
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("what is a &lt;b&gt;monad&lt;/b&gt;"),
        "{}",
        page.body
    );
    // The device token does not open the dashboard.
    let bearer = format!("Bearer {token}");
    assert_eq!(
        relay
            .http
            .get_with("/", &[("authorization", &bearer)])
            .status,
        401
    );
}

#[test]
fn personkit_open_says_when_no_relay_serves_the_corpus() {
    let (_tmp, db) = temp_db();
    {
        let _relay = Relay::start(&db, &[]);
    }
    let out = personkit_testkit::cli(&db, &["open", "--no-browser"]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("personkit serve"), "{}", out.stderr);
}
