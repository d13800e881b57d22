//! Handler tests of the read API and the dashboard: the real router over a real corpus file, through `oneshot`.
//! Sign-in, sessions, CSRF, hostile content, forget and the change feed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use personkit_shared::wire::Role;
use serde_json::{Value, json};
use time::Duration;

use crate::tests::{CHATGPT, Harness, Reply, assert_error, harness, turn};

/// A corpus: thread "a" (3 turns, the second edited once, hostile title), thread "b" (1 turn).
async fn filled() -> (Harness, String) {
    let h = harness();
    let token = h.pair().await;
    let mut a0 = turn(
        "a",
        Role::User,
        "how do I rename a postgres column",
        Some(0),
        None,
        "2026-11-22T09:00:00Z",
    );
    a0["title"] = json!("<script>alert('title')</script> Postgres");
    a0["url"] = json!("https://chatgpt.com/c/a");
    let items = vec![
        a0,
        turn(
            "a",
            Role::Assistant,
            "first draft",
            Some(1),
            None,
            "2026-11-22T09:01:00Z",
        ),
        turn(
            "a",
            Role::Assistant,
            "Use `ALTER TABLE t RENAME COLUMN a TO b`.\n\n<img src=x onerror=alert(1)>\n\n| a | b |\n|---|---|\n| 1 | 2 |",
            Some(1),
            None,
            "2026-11-22T09:02:00Z",
        ),
        turn(
            "a",
            Role::User,
            "thanks",
            Some(2),
            None,
            "2026-11-22T09:03:00Z",
        ),
        turn(
            "b",
            Role::User,
            "lentil soup recipe",
            Some(0),
            None,
            "2026-11-22T09:30:00Z",
        ),
    ];
    let r = h.send(&token, &items).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    (h, token)
}

async fn get_with(h: &Harness, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut req = Request::get(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    h.call(req.body(Body::empty()).unwrap()).await
}

async fn post_form(
    h: &Harness,
    path: &str,
    cookie: &str,
    form: &str,
    extra: &[(&str, &str)],
) -> Reply {
    let mut req = Request::post(path)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::COOKIE, cookie)
        .header(header::ORIGIN, "http://127.0.0.1:8787");
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    h.call(req.body(Body::from(form.to_owned())).unwrap()).await
}

fn text(r: &Reply) -> &str {
    r.body.as_str().unwrap_or("")
}

/// The value of the `name="csrf"` field of the page's form that posts to `action`.
fn csrf(page: &str, action: &str) -> String {
    let form = page
        .find(&format!("action=\"{action}\""))
        .unwrap_or_else(|| panic!("no form posts to {action}"));
    let i = page[form..]
        .find("name=\"csrf\" value=\"")
        .expect("a form with a csrf field")
        + form
        + 19;
    page[i..i + 64].to_owned()
}

/// Makes a sign-in link the way `personkit open` does and uses it; returns the `Cookie` header value.
async fn sign_in(h: &Harness) -> String {
    let secret = link(h);
    let r = get_with(h, &format!("/signin?t={secret}"), &[]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let set = r.headers.get(header::SET_COOKIE).unwrap().to_str().unwrap();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    set.split(';').next().unwrap().to_owned()
}

fn link(h: &Harness) -> String {
    let now = h.state().clock.now();
    h.state()
        .db
        .write(|c| personkit_store::signin::create_link(c, now))
        .unwrap()
        .0
        .expose()
        .to_owned()
}

// ----------------------------------------------------------------------------------------------------------------
// Read API

#[tokio::test]
async fn threads_list_pages_filters_and_compact() {
    let (h, token) = filled().await;
    let t = Some(token.as_str());
    let all = h.get("/v1/threads", t).await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.body);
    assert_eq!(all.body["page"]["total"], 2);
    assert_eq!(all.body["threads"][0]["turns"], 1, "b is the most recent");
    assert_eq!(all.body["threads"][1]["turns"], 3, "an edit is one turn");
    let p1 = h.get("/v1/threads?limit=1", t).await;
    assert_eq!(p1.body["page"]["has_more"], true);
    let cursor = p1.body["page"]["next_cursor"].as_str().unwrap();
    let p2 = h
        .get(
            &format!("/v1/threads?limit=1&cursor={}", cursor.replace(':', "%3A")),
            t,
        )
        .await;
    assert_eq!(p2.status, StatusCode::OK, "{}", p2.body);
    assert_eq!(p2.body["threads"][0]["id"], all.body["threads"][1]["id"]);
    assert_eq!(p2.body["page"]["has_more"], false);
    let c = h.get("/v1/threads?format=compact", t).await;
    assert_eq!(c.body["lines"].as_array().unwrap().len(), 2);
    let id = c.body["ids"][1].as_str().unwrap();
    assert!(c.body["lines"][1].as_str().unwrap().starts_with(&id[..8]));
    assert_eq!(
        (c.body["total"].clone(), c.body["has_more"].clone()),
        (json!(2), json!(false))
    );
    let f = h
        .get("/v1/threads?words=postgres+rename&since=2026-11-22", t)
        .await;
    assert_eq!(f.body["page"]["total"], 1);
    let none = h
        .get(
            &format!("/v1/threads?surface={CHATGPT}&until=2026-11-01"),
            t,
        )
        .await;
    assert_eq!(none.body["page"]["total"], 0);
    // Refusals, each with the error shape.
    for (path, status, code) in [
        ("/v1/threads?limt=5", 400, "unknown_parameter"),
        ("/v1/threads?limit=0", 400, "bad_query"),
        ("/v1/threads?limit=5&limit=6", 400, "repeated_parameter"),
        ("/v1/threads?since=yesterday-ish", 400, "bad_query"),
        ("/v1/threads?cursor=garbage", 400, "bad_query"),
        ("/v1/threads?format=xml", 400, "bad_query"),
        ("/v1/threads/0000000000000000", 404, "not_found"),
        ("/v1/messages/nope", 404, "not_found"),
    ] {
        let r = h.get(path, t).await;
        assert_eq!(r.status.as_u16(), status, "{path}: {}", r.body);
        assert_eq!(r.body["code"], code, "{path}");
        assert!(
            r.body["hint"].as_str().is_some_and(|s| !s.is_empty()),
            "{path}"
        );
    }
    let anon = h.get("/v1/threads", None).await;
    assert_eq!(anon.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_thread_and_a_message_read_with_revisions() {
    let (h, token) = filled().await;
    let t = Some(token.as_str());
    let id = personkit_testkit::thread_id(CHATGPT, "a");
    let d = h.get(&format!("/v1/threads/{}", &id[..8]), t).await;
    assert_eq!(d.status, StatusCode::OK, "{}", d.body);
    assert_eq!(d.body["thread"]["url"], "https://chatgpt.com/c/a");
    let turns = d.body["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 3);
    assert_eq!(turns[1]["revisions"][0]["content"], "first draft");
    let c = h
        .get(&format!("/v1/threads/{id}?format=compact&limit=2"), t)
        .await;
    assert_eq!(c.body["turns"]["lines"].as_array().unwrap().len(), 2);
    assert_eq!(c.body["turns"]["has_more"], true);
    let mid = turns[1]["revisions"][0]["id"].as_str().unwrap();
    let m = h.get(&format!("/v1/messages/{mid}"), t).await;
    assert_eq!(m.body["is_current"], false);
    assert_eq!(m.body["revisions_at_position"], 2);
}

#[tokio::test]
async fn the_change_feed_reports_new_turns_and_forgotten_threads() {
    let (h, token) = filled().await;
    let t = Some(token.as_str());
    let first = h.get("/v1/changes?since=2026-11-01", t).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    assert_eq!(first.body["created"].as_array().unwrap().len(), 2);
    let next = first.body["next_since"].as_str().unwrap().to_owned();
    h.state().clock.advance(Duration::minutes(1));
    let r = h
        .send(
            &token,
            &[turn(
                "a",
                Role::Assistant,
                "you're welcome",
                Some(3),
                None,
                "2026-11-22T10:00:30Z",
            )],
        )
        .await;
    assert_eq!(r.body["stored"], 1);
    // Forget thread b through the dashboard.
    let cookie = sign_in(&h).await;
    let b = personkit_testkit::thread_id(CHATGPT, "b");
    let page = get_with(&h, &format!("/threads/{b}/forget"), &[("cookie", &cookie)]).await;
    assert!(text(&page).contains("1 messages"), "{}", text(&page));
    let form = format!(
        "csrf={}&confirm=1",
        csrf(text(&page), &format!("/threads/{b}/forget"))
    );
    let done = post_form(&h, &format!("/threads/{b}/forget"), &cookie, &form, &[]).await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    h.state().clock.advance(Duration::minutes(1));
    let ch = h
        .get(
            &format!("/v1/changes?since={}", next.replace(':', "%3A")),
            t,
        )
        .await;
    assert_eq!(ch.status, StatusCode::OK, "{}", ch.body);
    let ids = |k: &str| -> Vec<String> {
        ch.body[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids("deleted"), std::slice::from_ref(&b));
    assert!(
        ids("created")
            .iter()
            .chain(ids("updated").iter())
            .any(|i| *i == personkit_testkit::thread_id(CHATGPT, "a"))
    );
    assert!(!ids("created").contains(&b) && !ids("updated").contains(&b));
    let missing = h.get("/v1/changes", t).await;
    assert_eq!(missing.body["code"], "bad_query");
}

#[tokio::test]
async fn a_device_gets_a_dashboard_link_and_an_agent_does_not() {
    let (h, token) = filled().await;
    let r = h.post("/v1/me/dashboard-link", Some(&token), "").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let url = r.body["url"].as_str().unwrap();
    assert!(url.starts_with("http://127.0.0.1:8787/signin?t="), "{url}");
    let path = &url["http://127.0.0.1:8787".len()..];
    let s = get_with(&h, path, &[]).await;
    assert_eq!(s.status, StatusCode::OK);
    let now = h.state().clock.now();
    let (_, agent) = h
        .state()
        .db
        .write(|c| personkit_store::auth::create_agent(c, "claude", now))
        .unwrap();
    let r = h
        .post("/v1/me/dashboard-link", Some(agent.expose()), "")
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(r.body["code"], "read_only_token");
    // Nor may it report on capture (a write like ingest).
    let r = h
        .post(
            "/v1/me/capture-reports",
            Some(agent.expose()),
            r#"{"reports":[{"surface":"browser-ext:grok","stale_since":"2026-11-01T00:00:00Z"}]}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    assert_eq!(r.body["code"], "read_only_token");
}

// ----------------------------------------------------------------------------------------------------------------
// Dashboard: sign-in and sessions

#[tokio::test]
async fn sign_in_links_work_once_and_expire_and_tokens_never_open_pages() {
    let (h, token) = filled().await;
    // Without a session: the signed-out page, whatever bearer token comes along.
    let bearer = format!("Bearer {token}");
    let r = get_with(&h, "/", &[("authorization", &bearer)]).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(text(&r).contains("personkit open"));
    let secret = link(&h);
    let ok = get_with(&h, &format!("/signin?t={secret}"), &[]).await;
    assert_eq!(ok.status, StatusCode::OK);
    let cookie = ok
        .headers
        .get(header::SET_COOKIE)
        .unwrap()
        .to_str()
        .unwrap();
    assert!(cookie.starts_with("personkit_session_8787="), "{cookie}");
    let reused = get_with(&h, &format!("/signin?t={secret}"), &[]).await;
    assert_eq!(reused.status, StatusCode::UNAUTHORIZED, "a link works once");
    assert!(reused.headers.get(header::SET_COOKIE).is_none());
    let late = link(&h);
    h.state().clock.advance(Duration::minutes(6));
    let expired = get_with(&h, &format!("/signin?t={late}"), &[]).await;
    assert_eq!(
        expired.status,
        StatusCode::UNAUTHORIZED,
        "links last 5 minutes"
    );
    // A session opens every page; the bearer token is not what does it.
    let cookie = sign_in(&h).await;
    for path in [
        "/",
        "/threads",
        "/search?q=postgres",
        "/devices",
        "/privacy",
    ] {
        let r = get_with(&h, path, &[("cookie", &cookie)]).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", text(&r));
        assert!(!text(&r).contains(&token), "{path} shows a token");
        let csp = r
            .headers
            .get(header::CONTENT_SECURITY_POLICY)
            .unwrap()
            .to_str()
            .unwrap();
        assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
    }
    // The cookie does not open the API.
    let api = get_with(&h, "/v1/threads", &[("cookie", &cookie)]).await;
    assert_eq!(api.status, StatusCode::UNAUTHORIZED);
    // Sessions expire.
    h.state()
        .clock
        .advance(crate::dashboard::SESSION_TTL + Duration::minutes(1));
    let r = get_with(&h, "/", &[("cookie", &cookie)]).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn sign_out_ends_the_session() {
    let (h, _) = filled().await;
    let cookie = sign_in(&h).await;
    let page = get_with(&h, "/", &[("cookie", &cookie)]).await;
    let out = post_form(
        &h,
        "/signout",
        &cookie,
        &format!("csrf={}", csrf(text(&page), "/signout")),
        &[],
    )
    .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert!(
        out.headers
            .get(header::SET_COOKIE)
            .unwrap()
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let r = get_with(&h, "/", &[("cookie", &cookie)]).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn forms_need_a_fresh_csrf_token_from_this_origin_and_host() {
    let (h, _) = filled().await;
    let cookie = sign_in(&h).await;
    let devices = |h: &Harness| h.count("SELECT count(*) FROM pairing_codes");
    let before = devices(&h);
    let page = get_with(&h, "/devices", &[("cookie", &cookie)]).await;
    let tok = csrf(text(&page), "/devices/pair");
    let missing = post_form(&h, "/devices/pair", &cookie, "", &[]).await;
    assert_eq!(missing.status, StatusCode::FORBIDDEN, "no token");
    let wrong = post_form(
        &h,
        "/devices/pair",
        &cookie,
        &format!("csrf={}", "0".repeat(64)),
        &[],
    )
    .await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN, "unknown token");
    let cross = {
        let req = Request::post("/devices/pair")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::COOKIE, &cookie)
            .header(header::ORIGIN, "https://evil.example")
            .body(Body::from(format!("csrf={tok}")))
            .unwrap();
        h.call(req).await
    };
    assert_eq!(cross.status, StatusCode::FORBIDDEN, "another origin");
    let fetch_site = post_form(
        &h,
        "/devices/pair",
        &cookie,
        &format!("csrf={tok}"),
        &[("sec-fetch-site", "cross-site")],
    )
    .await;
    assert_eq!(
        fetch_site.status,
        StatusCode::FORBIDDEN,
        "Sec-Fetch-Site: cross-site"
    );
    assert_eq!(devices(&h), before, "nothing happened so far");
    let ok = post_form(&h, "/devices/pair", &cookie, &format!("csrf={tok}"), &[]).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", text(&ok));
    assert!(text(&ok).contains("Pairing code"));
    assert_eq!(devices(&h), before + 1);
    let reused = post_form(&h, "/devices/pair", &cookie, &format!("csrf={tok}"), &[]).await;
    assert_eq!(reused.status, StatusCode::FORBIDDEN, "a token works once");
    assert_eq!(devices(&h), before + 1);
    // Without the session cookie (what a cross-site post gets under SameSite=Strict): refused.
    let page = get_with(&h, "/devices", &[("cookie", &cookie)]).await;
    let req = Request::post("/devices/pair")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!(
            "csrf={}",
            csrf(text(&page), "/devices/pair")
        )))
        .unwrap();
    assert_eq!(h.call(req).await.status, StatusCode::FORBIDDEN);
    // A wrong Host (DNS rebinding) is refused before anything else.
    let r = get_with(
        &h,
        "/",
        &[("cookie", &cookie), ("host", "evil.example:8787")],
    )
    .await;
    assert_eq!(r.status, StatusCode::MISDIRECTED_REQUEST);
    let r = get_with(
        &h,
        &format!("/signin?t={}", link(&h)),
        &[("host", "evil.example")],
    )
    .await;
    assert_eq!(r.status, StatusCode::MISDIRECTED_REQUEST);
}

#[tokio::test]
async fn a_csrf_token_minted_for_one_form_is_refused_on_another() {
    let (h, _) = filled().await;
    let cookie = sign_in(&h).await;
    let codes = |h: &Harness| h.count("SELECT count(*) FROM pairing_codes");
    let before = codes(&h);
    let page = get_with(&h, "/devices", &[("cookie", &cookie)]).await;
    let signout_tok = csrf(text(&page), "/signout");
    let pair_tok = csrf(text(&page), "/devices/pair");
    // The sign-out form's token does not pair a device.
    let r = post_form(
        &h,
        "/devices/pair",
        &cookie,
        &format!("csrf={signout_tok}"),
        &[],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", text(&r));
    assert_eq!(codes(&h), before);
    // The pairing form's token does not sign out, nor forget anything.
    let r = post_form(&h, "/signout", &cookie, &format!("csrf={pair_tok}"), &[]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", text(&r));
    let r = post_form(
        &h,
        "/privacy/forget",
        &cookie,
        &format!("csrf={pair_tok}&confirm=5"),
        &[],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", text(&r));
    assert_eq!(h.count("SELECT count(*) FROM messages"), 5);
    let r = get_with(&h, "/", &[("cookie", &cookie)]).await;
    assert_eq!(r.status, StatusCode::OK, "still signed in");
    // Each works on its own form.
    let r = post_form(
        &h,
        "/devices/pair",
        &cookie,
        &format!("csrf={pair_tok}"),
        &[],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    assert_eq!(codes(&h), before + 1);
    let r = post_form(&h, "/signout", &cookie, &format!("csrf={signout_tok}"), &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", text(&r));
}

#[tokio::test]
async fn a_session_outlives_a_relay_restart_until_it_expires() {
    let (mut h, _) = filled().await;
    let cookie = sign_in(&h).await;
    let before = get_with(&h, "/devices", &[("cookie", &cookie)]).await;
    let stale_tok = csrf(text(&before), "/devices/pair");
    h.restart();
    let r = get_with(&h, "/threads", &[("cookie", &cookie)]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    // A form shown before the restart asks for a reload; the reloaded one works.
    let r = post_form(
        &h,
        "/devices/pair",
        &cookie,
        &format!("csrf={stale_tok}"),
        &[],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(text(&r).contains("reload"), "{}", text(&r));
    let page = get_with(&h, "/devices", &[("cookie", &cookie)]).await;
    let tok = csrf(text(&page), "/devices/pair");
    let r = post_form(&h, "/devices/pair", &cookie, &format!("csrf={tok}"), &[]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    // The cookie's lifetime is the session's.
    let set = {
        let secret = link(&h);
        let r = get_with(&h, &format!("/signin?t={secret}"), &[]).await;
        r.headers
            .get(header::SET_COOKIE)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert!(
        set.contains(&format!(
            "Max-Age={}",
            crate::dashboard::SESSION_TTL.whole_seconds()
        )),
        "{set}"
    );
    h.state()
        .clock
        .advance(crate::dashboard::SESSION_TTL + Duration::minutes(1));
    h.restart();
    let r = get_with(&h, "/", &[("cookie", &cookie)]).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "expired");
    // Signing out ends it for every later relay too.
    let cookie = sign_in(&h).await;
    let page = get_with(&h, "/", &[("cookie", &cookie)]).await;
    let out = post_form(
        &h,
        "/signout",
        &cookie,
        &format!("csrf={}", csrf(text(&page), "/signout")),
        &[],
    )
    .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    h.restart();
    let r = get_with(&h, "/", &[("cookie", &cookie)]).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "signed out");
}

// ----------------------------------------------------------------------------------------------------------------
// Dashboard: pages

#[tokio::test]
async fn each_turn_names_its_role_in_its_one_class_attribute() {
    let (h, _) = filled().await;
    let cookie = sign_in(&h).await;
    let id = personkit_testkit::thread_id(CHATGPT, "a");
    let r = get_with(&h, &format!("/threads/{id}"), &[("cookie", &cookie)]).await;
    let page = text(&r);
    let items: Vec<&str> = page
        .split("<li ")
        .skip(1)
        .filter_map(|li| li.split('>').next())
        .filter(|tag| tag.contains("id=\"turn-"))
        .collect();
    assert_eq!(items.len(), 3, "{page}");
    for tag in &items {
        assert_eq!(tag.matches("class=").count(), 1, "{tag}");
    }
    assert!(items[0].contains("class=\"turn user\""), "{}", items[0]);
    assert!(
        items[1].contains("class=\"turn assistant\""),
        "{}",
        items[1]
    );
}

#[tokio::test]
async fn hostile_titles_and_content_are_shown_as_text() {
    let (h, _) = filled().await;
    let cookie = sign_in(&h).await;
    let id = personkit_testkit::thread_id(CHATGPT, "a");
    for path in [
        "/threads".to_owned(),
        format!("/threads/{id}"),
        "/search?q=postgres".to_owned(),
    ] {
        let r = get_with(&h, &path, &[("cookie", &cookie)]).await;
        let page = text(&r);
        assert!(!page.contains("<script"), "{path}: {page}");
        assert!(!page.contains("<img"), "{path}");
        assert!(
            page.contains("&lt;script&gt;alert('title')&lt;/script&gt;")
                || page.contains("&lt;script&gt;alert(&#39;title&#39;)"),
            "{path}: {page}"
        );
    }
    let r = get_with(&h, &format!("/threads/{id}"), &[("cookie", &cookie)]).await;
    let page = text(&r);
    assert!(
        page.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "{page}"
    );
    assert!(
        page.contains("<table>")
            && page.contains("<code>ALTER TABLE t RENAME COLUMN a TO b</code>")
    );
    assert!(page.contains("1 other revision"), "revisions are listed");
    assert!(
        page.contains("href=\"https://chatgpt.com/c/a\""),
        "link to the original"
    );
    let md = get_with(
        &h,
        &format!("/threads/{id}/export.md"),
        &[("cookie", &cookie)],
    )
    .await;
    assert_eq!(md.status, StatusCode::OK);
    // The file `personkit export` writes: its file name (no path or markup characters) and its headings.
    let disposition = md
        .headers
        .get(header::CONTENT_DISPOSITION)
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let name = disposition
        .strip_prefix("attachment; filename=\"")
        .and_then(|r| r.split_once('"'))
        .map(|(n, _)| n.to_owned())
        .unwrap_or_default();
    assert!(
        name.contains("Postgres") && name.ends_with(".md") && !name.contains(['<', '>', '/', '\\']),
        "{disposition}"
    );
    assert!(disposition.contains("filename*=UTF-8''"), "{disposition}");
    let body = text(&md);
    assert!(
        body.starts_with("---\n") && body.contains("· Assistant · 2026-11-22"),
        "{body}"
    );
}

#[tokio::test]
async fn forgetting_a_date_range_counts_first_and_removes_from_every_page() {
    let (h, token) = filled().await;
    let cookie = sign_in(&h).await;
    let confirm = get_with(
        &h,
        "/privacy/forget?site=browser-ext%3Achatgpt&since=2026-11-22&until=2026-11-22",
        &[("cookie", &cookie)],
    )
    .await;
    assert_eq!(confirm.status, StatusCode::OK, "{}", text(&confirm));
    assert!(text(&confirm).contains("5 messages"), "{}", text(&confirm));
    assert_eq!(
        h.count("SELECT count(*) FROM messages"),
        5,
        "counting changes nothing"
    );
    let form = format!(
        "csrf={}&site=browser-ext%3Achatgpt&since=2026-11-22&until=2026-11-22&confirm=5",
        csrf(text(&confirm), "/privacy/forget")
    );
    let done = post_form(&h, "/privacy/forget", &cookie, &form, &[]).await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", text(&done));
    assert_eq!(h.count("SELECT count(*) FROM messages"), 0);
    let list = get_with(&h, "/threads", &[("cookie", &cookie)]).await;
    assert!(!text(&list).contains("Postgres") && text(&list).contains("0 threads"));
    let s = get_with(&h, "/search?q=lentil", &[("cookie", &cookie)]).await;
    assert!(text(&s).contains("0 results"), "{}", text(&s));
    let api = h.get("/v1/query?q=lentil", Some(&token)).await;
    assert_eq!(api.body["hits"].as_array().unwrap().len(), 0);
    // The extension replaying its queue brings nothing back.
    let replay = h
        .send(
            &token,
            &[turn(
                "b",
                Role::User,
                "lentil soup recipe",
                Some(0),
                None,
                "2026-11-22T09:30:00Z",
            )],
        )
        .await;
    assert_eq!(replay.body["duplicate"], 1);
    assert_eq!(h.count("SELECT count(*) FROM messages"), 0);
}

#[tokio::test]
async fn overview_shows_lights_counts_and_search_says_why() {
    let (h, _) = filled().await;
    let cookie = sign_in(&h).await;
    let o = get_with(&h, "/", &[("cookie", &cookie)]).await;
    let page = text(&o);
    assert!(
        page.contains("chatgpt") && page.contains("light green"),
        "{page}"
    );
    assert!(page.contains("keywords only"));
    let s = get_with(&h, "/search?q=lentil+soup", &[("cookie", &cookie)]).await;
    let page = text(&s);
    assert!(page.contains("<mark>lentil</mark>"), "{page}");
    assert!(page.contains("Matched by its words"), "{page}");
    // A date in the question is a reason of its own.
    let s = get_with(
        &h,
        "/search?q=lentil+soup+on+22+November%2C+2026",
        &[("cookie", &cookie)],
    )
    .await;
    let page = text(&s);
    assert!(
        page.contains("Matched by its words (keyword rank 1), the date asked about"),
        "{page}"
    );
    let bad = get_with(&h, "/search?q=x&role=robot", &[("cookie", &cookie)]).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let unknown = get_with(&h, "/threads?bogus=1", &[("cookie", &cookie)]).await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    let _: Value = json!(null);
}

// ----------------------------------------------------------------------------------------------------------------
// Links to the current conversation, public URLs, completeness

#[tokio::test]
async fn a_conversation_url_finds_its_thread_and_a_link_lands_on_it() {
    let (h, token) = filled().await;
    let a = personkit_shared::ids::thread_id(crate::tests::CHATGPT, "a")
        .hyphenated()
        .to_string();
    let r = h
        .get(
            "/v1/threads/by-url?url=https%3A%2F%2Fchatgpt.com%2Fc%2Fa",
            Some(&token),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["thread"]["id"], json!(a));
    assert_eq!(r.body["thread"]["completeness"]["state"], "complete");
    let none = h
        .get(
            "/v1/threads/by-url?url=https%3A%2F%2Fchatgpt.com%2Fc%2Fnever",
            Some(&token),
        )
        .await;
    assert_eq!(
        (none.status, none.body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let elsewhere = h
        .get(
            "/v1/threads/by-url?url=https%3A%2F%2Fexample.com%2Fc%2Fa",
            Some(&token),
        )
        .await;
    assert_eq!(
        elsewhere.body["code"], "not_a_conversation",
        "{}",
        elsewhere.body
    );
    let missing = h.get("/v1/threads/by-url", Some(&token)).await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);

    // A link for the thread lands on it after sign-in; a `next` elsewhere is ignored.
    let r = h
        .post(
            "/v1/me/dashboard-link",
            Some(&token),
            json!({"thread": &a[..8]}).to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let url = r.body["url"].as_str().unwrap();
    assert!(url.ends_with(&format!("&next=threads/{a}")), "{url}");
    let s = get_with(&h, &url["http://127.0.0.1:8787".len()..], &[]).await;
    assert!(
        text(&s).contains(&format!("url=./threads/{a}")),
        "{}",
        text(&s)
    );
    let evil = format!("/signin?t={}&next=https://evil.example/", link(&h));
    let s = get_with(&h, &evil, &[]).await;
    assert_eq!(s.status, StatusCode::OK);
    assert!(
        text(&s).contains("url=./\"") && !text(&s).contains("evil"),
        "{}",
        text(&s)
    );
    let unknown = h
        .post(
            "/v1/me/dashboard-link",
            Some(&token),
            r#"{"thread": "ffffffff-0000"}"#,
        )
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    let bad = h
        .post(
            "/v1/me/dashboard-link",
            Some(&token),
            r#"{"thread": 1, "x": 2}"#,
        )
        .await;
    assert_eq!(
        (bad.status, bad.body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request"))
    );
}

#[tokio::test]
async fn links_use_the_public_url_behind_a_proxy() {
    let h = crate::tests::harness_with(crate::config::ApiConfig {
        rate_limit: 0.0,
        allowed_hosts: vec!["relay.example.com".into()],
        public_url: Some("https://relay.example.com/personkit".into()),
        ..crate::config::ApiConfig::default()
    });
    let token = h.pair().await;
    let r = h.post("/v1/me/dashboard-link", Some(&token), "").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let url = r.body["url"].as_str().unwrap();
    assert!(
        url.starts_with("https://relay.example.com/personkit/signin?t="),
        "{url}"
    );
    // The sign-in page moves on relative to itself, so it stays under the sub-path.
    let s = get_with(&h, &url["https://relay.example.com/personkit".len()..], &[]).await;
    assert!(text(&s).contains("url=./\""), "{}", text(&s));
    let cookie = s
        .headers
        .get(header::SET_COOKIE)
        .unwrap()
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    // The proxy removes the prefix; the pages' links and redirects carry it again.
    let page = get_with(&h, "/threads", &[("cookie", &cookie)]).await;
    assert_eq!(page.status, StatusCode::OK);
    let body = text(&page);
    assert!(
        body.contains("href=\"/personkit/search\"")
            && body.contains("action=\"/personkit/signout\""),
        "{body}"
    );
    assert!(!body.contains("href=\"/search\""), "{body}");
    // A form from the public origin is this relay's own, even when the proxy rewrote Host.
    let form = format!("csrf={}", csrf(body, "/personkit/signout"));
    let req = Request::post("/signout")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::COOKIE, &cookie)
        .header(header::ORIGIN, "https://relay.example.com")
        .body(Body::from(form))
        .unwrap();
    let out = h.call(req).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER, "{}", out.body);
    assert_eq!(out.headers.get(header::LOCATION).unwrap(), "/personkit/");
}

#[tokio::test]
async fn threads_say_how_complete_they_are() {
    let (h, token) = filled().await;
    let items = vec![
        turn(
            "g",
            Role::User,
            "one",
            Some(0),
            None,
            "2026-11-22T09:40:00Z",
        ),
        turn(
            "g",
            Role::Assistant,
            "two",
            Some(1),
            None,
            "2026-11-22T09:41:00Z",
        ),
        turn(
            "g",
            Role::User,
            "five",
            Some(4),
            None,
            "2026-11-22T09:44:00Z",
        ),
    ];
    assert_eq!(h.send(&token, &items).await.status, StatusCode::OK);
    let r = h.get("/v1/threads", Some(&token)).await;
    let g = personkit_shared::ids::thread_id(crate::tests::CHATGPT, "g")
        .hyphenated()
        .to_string();
    let row = r.body["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == json!(g))
        .unwrap()
        .clone();
    assert_eq!(
        row["completeness"],
        json!({"state": "gaps", "missing": 2, "adapter_stale_since": null})
    );
    let cookie = sign_in(&h).await;
    let page = get_with(&h, "/threads", &[("cookie", &cookie)]).await;
    assert!(text(&page).contains("2 missing"), "{}", text(&page));
    let one = get_with(&h, &format!("/threads/{g}"), &[("cookie", &cookie)]).await;
    assert!(text(&one).contains("2 missing"));
}

// ----------------------------------------------------------------------------------------------------------------
// Dashboard: knowledge

/// Files a pending entry the way the pipeline (origin `pipeline`) or an agent's proposal (`agent:<name>`) does,
/// citing thread "a"'s first turn; returns (entry id, message id, thread id).
fn file_entry(
    h: &Harness,
    topic: &str,
    origin: &str,
    reason: Option<&str>,
) -> (String, String, String) {
    use personkit_store::knowledge::{NewEntry, Source, insert};
    let now = h.state().clock.now();
    h.state()
        .db
        .write(|c| {
            let (mid, tid): (String, String) = c.query_row(
                "SELECT id, thread_id FROM messages WHERE is_current = 1 ORDER BY pk LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            let pipeline = origin == "pipeline";
            let id = insert(
                c,
                &NewEntry {
                    kind: "standard".into(),
                    topic: topic.into(),
                    position: "Rename columns in one migration, never by hand".into(),
                    reasoning: "A hand-made rename once left the replica and the primary disagreeing for a day".into(),
                    context: Some("production databases".into()),
                    confidence: "high".into(),
                    stability: "durable".into(),
                    tags: vec!["postgres".into(), "migrations".into()],
                    origin: origin.into(),
                    reason: reason.map(str::to_owned),
                    model: pipeline.then(|| "openai:stand-in".to_owned()),
                    prompt_version: pipeline.then(|| "knowledge-v1".to_owned()),
                    scores: pipeline.then(|| json!({"keep": true, "grounded": true, "distinctive": true, "judge": "openai:stand-in"})),
                    sources: vec![Source { message_id: mid.clone(), thread_id: tid.clone() }],
                    ..NewEntry::default()
                },
                now,
            )?;
            Ok::<_, personkit_store::DbError>((id, mid, tid))
        })
        .unwrap()
}

fn write_llm_config(h: &Harness, text: &str) {
    let dir = h.state().db.path().parent().unwrap().to_path_buf();
    std::fs::write(dir.join("config.toml"), text).unwrap();
}

#[tokio::test]
async fn knowledge_is_approved_rejected_and_edited_from_its_page_with_session_forms() {
    let (h, _) = filled().await;
    write_llm_config(&h, "[llm]\nkind = \"none\"\n");
    let cookie = sign_in(&h).await;
    let c = [("cookie", cookie.as_str())];
    let empty = get_with(&h, "/knowledge", &c).await;
    assert_eq!(empty.status, StatusCode::OK, "{}", text(&empty));
    let page = text(&empty);
    assert!(
        page.contains("The knowledge pipeline is off.") && page.contains("[llm]"),
        "{page}"
    );
    assert!(page.contains("Nothing waits for you."), "{page}");
    assert!(
        page.contains("href=\"/knowledge\" aria-current=\"page\""),
        "the nav links to the page: {page}"
    );

    let (from_pipeline, mid, tid) = file_entry(&h, "column renames", "pipeline", None);
    let (from_agent, _, _) = file_entry(
        &h,
        "<script>alert(1)</script> schema changes",
        "agent:claude-code",
        Some("The user explained this while renaming a column"),
    );
    let page = get_with(&h, "/knowledge", &c).await;
    let page = text(&page);
    assert!(
        page.contains("Pending <span class=\"n\">2</span>"),
        "{page}"
    );
    assert!(
        page.contains("Approved <span class=\"n\">0</span>"),
        "{page}"
    );
    assert!(
        page.contains("claude-code")
            && page.contains("The user explained this while renaming a column"),
        "{page}"
    );
    assert!(
        page.contains("knowledge pipeline")
            && page.contains("openai:stand-in")
            && page.contains("knowledge-v1"),
        "{page}"
    );
    assert!(
        page.contains(&format!("href=\"/threads/{tid}#turn-{mid}\"")),
        "a source links to its turn: {page}"
    );
    assert!(
        page.contains("how do I rename a postgres column"),
        "the source's words are shown: {page}"
    );
    assert!(
        page.contains("production databases") && page.contains("migrations"),
        "{page}"
    );
    assert!(!page.contains("<script>alert(1)"), "{page}");
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt; schema changes"),
        "{page}"
    );

    // Approve: a session form with the token minted for the page's decision forms, used once.
    let token = csrf(page, "/knowledge/decide");
    let decide = |token: &str, id: &str, decision: &str| {
        format!("csrf={token}&entry={id}&decision={decision}")
    };
    let r = post_form(
        &h,
        "/knowledge/decide",
        &cookie,
        &decide(&token, &from_pipeline, "approve"),
        &[],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", text(&r));
    let to = r
        .headers
        .get(header::LOCATION)
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        to.starts_with("/knowledge?status=pending&done=approved"),
        "{to}"
    );
    let again = post_form(
        &h,
        "/knowledge/decide",
        &cookie,
        &decide(&token, &from_agent, "approve"),
        &[],
    )
    .await;
    assert_eq!(again.status, StatusCode::FORBIDDEN, "a used token");
    let status = |id: &str| {
        let id = id.to_owned();
        h.state()
            .db
            .read(move |c| personkit_store::knowledge::entry(c, &id))
            .unwrap()
            .unwrap()
    };
    let e = status(&from_pipeline);
    assert_eq!(
        (e.status.as_str(), e.decided_by.as_deref()),
        ("approved", Some("dashboard"))
    );
    // Search finds the approved entry, and the turn it cites through it; the pending one stays out.
    let found = get_with(&h, "/search?q=replica+disagreeing+schema", &c).await;
    let found = text(&found);
    assert!(found.contains("Your approved knowledge"), "{found}");
    assert!(
        found.contains(&format!("href=\"/knowledge/{from_pipeline}\"")),
        "{found}"
    );
    assert!(
        !found.contains(&from_agent),
        "a pending entry is not searched: {found}"
    );
    assert!(
        found.contains(&format!("#turn-{mid}"))
            && found.contains("your approved knowledge, which cites it"),
        "{found}"
    );
    assert_eq!(status(&from_agent).status, "pending");
    let landed = get_with(&h, &to, &c).await;
    assert!(
        text(&landed).contains("Approved: “column renames”"),
        "{}",
        text(&landed)
    );
    assert!(text(&landed).contains("Approved <span class=\"n\">1</span>"));

    // Reject the agent's note from its own page.
    let one = get_with(&h, &format!("/knowledge/{from_agent}"), &c).await;
    assert_eq!(one.status, StatusCode::OK);
    let token = csrf(text(&one), "/knowledge/decide");
    let odd = post_form(
        &h,
        "/knowledge/decide",
        &cookie,
        &decide(&token, &from_agent, "maybe"),
        &[],
    )
    .await;
    assert_eq!(odd.status, StatusCode::BAD_REQUEST, "{}", text(&odd));
    assert_eq!(status(&from_agent).status, "pending");
    let one = get_with(&h, &format!("/knowledge/{from_agent}"), &c).await;
    let token = csrf(text(&one), "/knowledge/decide");
    let r = post_form(
        &h,
        "/knowledge/decide",
        &cookie,
        &decide(&token, &from_agent, "reject"),
        &[],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", text(&r));
    assert_eq!(status(&from_agent).status, "rejected");

    // Edit: an empty topic is refused with the form shown again; a good edit is saved and searchable.
    let edit = format!("/knowledge/{from_pipeline}/edit");
    let one = get_with(&h, &format!("/knowledge/{from_pipeline}"), &c).await;
    let bad = post_form(
        &h,
        &edit,
        &cookie,
        &format!("csrf={}&topic=+&position=p&reasoning=r&context=&tags=&confidence=high&stability=durable", csrf(text(&one), &edit)),
        &[],
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(
        text(&bad).contains("Not saved: the topic cannot be empty"),
        "{}",
        text(&bad)
    );
    let form = format!(
        "csrf={}&topic=column+renames+in+Postgres&position=Rename+columns+in+a+migration&reasoning=Hand+renames+drift+between+replica+and+primary&context=&tags=postgres%2C+schema&confidence=medium&stability=stable",
        csrf(text(&bad), &edit)
    );
    let r = post_form(&h, &edit, &cookie, &form, &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", text(&r));
    let e = status(&from_pipeline);
    assert_eq!(e.topic, "column renames in Postgres");
    assert_eq!(e.tags, vec!["postgres", "schema"]);
    assert_eq!(
        (e.confidence.as_str(), e.context.as_deref()),
        ("medium", None)
    );
    assert_eq!(e.status, "approved", "an edit keeps the decision");
    let found = get_with(&h, "/knowledge?status=approved&q=schema", &c).await;
    assert!(
        text(&found).contains("column renames in Postgres"),
        "{}",
        text(&found)
    );

    // Every decision is in the audit log the privacy page shows; a bad tab is a 400 that says what to use.
    let privacy = get_with(&h, "/privacy", &c).await;
    let p = text(&privacy);
    assert!(p.contains("Knowledge: what was sent to a model"), "{p}");
    assert_eq!(
        p.matches("<tr data-kind=\"approval\"").count(),
        3,
        "approve, reject, edit: {p}"
    );
    assert!(
        p.contains(
            "Edited topic, position, reasoning, context, confidence, stability, tags by dashboard"
        ),
        "{p}"
    );
    let bad_tab = get_with(&h, "/knowledge?status=maybe", &c).await;
    assert_eq!(bad_tab.status, StatusCode::BAD_REQUEST);
    assert!(text(&bad_tab).contains("pending, approved or rejected"));
    let missing = get_with(&h, "/knowledge/no-such-entry", &c).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let anon = get_with(&h, "/knowledge", &[]).await;
    assert_eq!(anon.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_privacy_page_shows_model_calls_and_decisions_never_pseudonyms() {
    let (h, _) = filled().await;
    write_llm_config(
        &h,
        "[llm]\nkind = \"openai\"\nbase_url = \"https://llm.example/v1\"\nmodel = \"m\"\n\n[knowledge]\nscrub = \"on\"\n",
    );
    let now = h.state().clock.now();
    h.state()
        .db
        .write(|c| {
            use personkit_store::knowledge::{add_pseudonyms, audit, set_state};
            add_pseudonyms(c, &[("Person_7F3A".into(), "Ana García".into())], now)?;
            audit(
                c,
                "r1",
                "call",
                &["m1".into()],
                &json!({"stage": "extract", "model": "openai:m", "endpoint": "https://llm.example/v1",
                        "sent_as": "scrubbed", "replaced": {"email": 2, "name": 1},
                        "prompt_tokens": 50, "completion_tokens": 20, "ms": 30, "outcome": "ok"}),
                now,
            )?;
            audit(
                c,
                "r1",
                "decision",
                &["m1".into()],
                &json!({"topic": "release timing", "action": "dropped", "why": "judge: not grounded", "outcome": "dropped"}),
                now,
            )?;
            let alert = json!({"at": "2026-11-22T09:59:00Z", "message": "the judge failed twice; the batch was dropped",
                               "hint": "check the model answers JSON"});
            set_state(c, "alert", Some(&alert.to_string()))?;
            Ok::<_, personkit_store::DbError>(())
        })
        .unwrap();
    let cookie = sign_in(&h).await;
    let c = [("cookie", cookie.as_str())];
    let privacy = get_with(&h, "/privacy", &c).await;
    let p = text(&privacy);
    assert!(p.contains("openai m at https://llm.example/v1"), "{p}");
    assert!(
        p.contains("<strong>scrubbed</strong>") && p.contains("2 email, 1 name"),
        "{p}"
    );
    assert!(
        p.contains("dropped: “release timing” — judge: not grounded"),
        "{p}"
    );
    assert!(
        !p.contains("Person_7F3A") && !p.contains("Ana García"),
        "no pseudonym map: {p}"
    );
    let k = get_with(&h, "/knowledge", &c).await;
    let k = text(&k);
    assert!(
        k.contains("Alert: ") && k.contains("the judge failed twice"),
        "{k}"
    );
    assert!(
        k.contains("What to do: check the model answers JSON"),
        "{k}"
    );
    assert!(k.contains("Pipeline on:"), "{k}");
    assert!(!k.contains("The knowledge pipeline is off."), "{k}");
}

#[tokio::test]
async fn every_decision_button_of_a_long_list_works() {
    let (h, _) = filled().await;
    let cookie = sign_in(&h).await;
    let filed: Vec<String> = (0..80)
        .map(|i| file_entry(&h, &format!("topic number {i}"), "pipeline", None).0)
        .collect();
    let page = get_with(&h, "/knowledge", &[("cookie", &cookie)]).await;
    let page = text(&page);
    assert_eq!(
        page.matches("action=\"/knowledge/decide\"").count(),
        160,
        "approve and reject on each card"
    );
    // The token at the top of the page works on the last card's button.
    let token = csrf(page, "/knowledge/decide");
    let marker = "name=\"entry\" value=\"";
    let at = page.rfind(marker).unwrap() + marker.len();
    let oldest = &page[at..at + 36];
    assert!(filed.iter().any(|id| id == oldest), "{oldest}");
    let r = post_form(
        &h,
        "/knowledge/decide",
        &cookie,
        &format!("csrf={token}&entry={oldest}&decision=approve"),
        &[],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", text(&r));
    assert_eq!(
        h.count("SELECT count(*) FROM knowledge_entries WHERE status = 'approved'"),
        1
    );
}

#[tokio::test]
async fn the_memory_page_saves_the_profile_runs_a_tier_and_shows_what_changed() {
    let (h, _token) = filled().await;
    let cookie = sign_in(&h).await;
    let page = get_with(&h, "/memory", &[("cookie", &cookie)]).await;
    assert_eq!(page.status, StatusCode::OK);
    for s in [
        "Profile",
        "Short memory",
        "Mid memory",
        "Long memory",
        "No version yet",
        "get_context",
    ] {
        assert!(text(&page).contains(s), "the page lacks {s:?}");
    }
    // The profile form writes the file and records a version; a second save records a second one.
    let form = format!(
        "csrf={}&text=I+build+personkit.%0D%0AAnswer+briefly.",
        csrf(text(&page), "/memory/profile")
    );
    let r = post_form(&h, "/memory/profile", &cookie, &form, &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let file = std::fs::read_to_string(&h.state().profile_path).unwrap();
    assert_eq!(file, "I build personkit.\nAnswer briefly.");
    let page = get_with(&h, "/memory?done=profile", &[("cookie", &cookie)]).await;
    assert!(text(&page).contains("Profile saved") && text(&page).contains("Version 1"));
    let form = format!(
        "csrf={}&text=I+build+personkit+in+Rust.%0D%0AAnswer+briefly.",
        csrf(text(&page), "/memory/profile")
    );
    post_form(&h, "/memory/profile", &cookie, &form, &[]).await;
    let hist = get_with(&h, "/memory/profile", &[("cookie", &cookie)]).await;
    assert_eq!(hist.status, StatusCode::OK);
    assert!(
        text(&hist).contains("<del>- I build personkit.</del>"),
        "{}",
        text(&hist)
    );
    assert!(text(&hist).contains("<ins>+ I build personkit in Rust.</ins>"));
    // A form posted without its token changes nothing.
    let r = post_form(&h, "/memory/profile", &cookie, "text=hijacked", &[]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(
        std::fs::read_to_string(&h.state().profile_path)
            .unwrap()
            .contains("in Rust")
    );

    // Run now: the short tier from the corpus; its version is shown; the off tier says how to turn it on.
    let page = get_with(&h, "/memory", &[("cookie", &cookie)]).await;
    let form = format!("csrf={}&tier=short", csrf(text(&page), "/memory/run"));
    let r = post_form(&h, "/memory/run", &cookie, &form, &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let page = get_with(&h, "/memory?done=ran&tier=short", &[("cookie", &cookie)]).await;
    let body = text(&page);
    assert!(body.contains("lentil soup recipe"), "the digest is shown");
    assert!(!body.contains("<script>alert"), "titles stay text");
    assert!(body.contains("enabled = true to turn it on"));
    let form = format!("csrf={}&tier=long", csrf(body, "/memory/run"));
    let r = post_form(&h, "/memory/run", &cookie, &form, &[]).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    let hist = get_with(&h, "/memory/short", &[("cookie", &cookie)]).await;
    assert!(text(&hist).contains("The first version."));
    let r = get_with(&h, "/memory/weekly", &[("cookie", &cookie)]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn today_charts_the_current_turns_per_day_and_the_overview_links_to_it() {
    let (h, _) = filled().await;
    let cookie = sign_in(&h).await;
    let o = get_with(&h, "/", &[("cookie", &cookie)]).await;
    assert!(text(&o).contains("<a href=\"/today\""), "{}", text(&o));
    let r = get_with(&h, "/today", &[("cookie", &cookie)]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    let page = text(&r);
    // Thread a: three positions (one edited: its current revision only), thread b: one.
    assert!(
        page.contains(&format!(
            "data-day=\"2026-11-22\" data-surface=\"{CHATGPT}\" data-turns=\"4\""
        )),
        "{page}"
    );
    assert_eq!(page.matches("<rect ").count(), 1, "{page}");
    assert!(
        page.contains(
            "id=\"today-now\" aria-labelledby=\"today-now-h\" data-turns=\"4\" data-threads=\"2\""
        ),
        "{page}"
    );
    assert!(
        page.contains("href=\"/knowledge?status=approved\""),
        "{page}"
    );
    assert!(page.contains("light green"), "{page}");
    // The CSP forbids inline styles: the page has none.
    assert!(!page.contains("style="), "{page}");
    let signed_out = get_with(&h, "/today", &[]).await;
    assert_eq!(signed_out.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn v1_today_answers_tokens_with_the_today_figures_and_refuses_a_bad_offset() {
    let (h, token) = filled().await;
    let r = h.get("/v1/today", Some(&token)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["date"], "2026-11-22");
    assert_eq!(r.body["today"]["turns"], 4, "{}", r.body);
    assert_eq!(r.body["chart"]["days"].as_array().unwrap().len(), 90);
    // At UTC-10:00 the turns of 09:00 UTC fall on the 21st, and "now" (10:00 UTC) is the 22nd at 00:00.
    let west = h
        .get("/v1/today?utc_offset_minutes=-600", Some(&token))
        .await;
    assert_eq!(west.status, StatusCode::OK, "{}", west.body);
    assert_eq!(west.body["date"], "2026-11-22");
    assert_eq!(west.body["today"]["turns"], 0, "{}", west.body);
    assert_eq!(west.body["week"]["first_day"], "2026-11-16");
    assert_eq!(west.body["week"]["turns"], 4, "{}", west.body);
    let now = h.state().clock.now();
    let (_, agent) = h
        .state()
        .db
        .write(|c| personkit_store::auth::create_agent(c, "claude", now))
        .unwrap();
    let a = h.get("/v1/today", Some(agent.expose())).await;
    assert_eq!(
        a.status,
        StatusCode::OK,
        "an agent token may read: {}",
        a.body
    );
    for bad in [
        "utc_offset_minutes=2000",
        "utc_offset_minutes=east",
        "bogus=1",
    ] {
        let r = h.get(&format!("/v1/today?{bad}"), Some(&token)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.body);
        assert!(
            r.body["hint"].as_str().unwrap().contains("/v1/today"),
            "{}",
            r.body
        );
    }
    assert_eq!(
        h.get("/v1/today", None).await.status,
        StatusCode::UNAUTHORIZED
    );
}

/// The entity pages: `POST /v1/graph/build` derives the graph of a corpus whose turns link sites and name a
/// model; the list filters by kind, an entity's page shows its relations (links to the related entities), its
/// threads, and its timeline (a bar per day); the thread page links the entities the thread supports.
#[tokio::test]
async fn entity_pages_show_relations_threads_and_a_timeline_and_threads_link_them() {
    let h = harness();
    let token = h.pair().await;
    let items = vec![
        turn(
            "g1",
            Role::User,
            "compare https://docs.rs/tokio with <b>gpt-4o</b>",
            Some(0),
            None,
            "2026-11-20T09:00:00Z",
        ),
        turn(
            "g2",
            Role::User,
            "again https://docs.rs/serde",
            Some(0),
            None,
            "2026-11-22T09:00:00Z",
        ),
    ];
    assert_eq!(h.send(&token, &items).await.status, StatusCode::OK);
    let built = h.post("/v1/graph/build", Some(&token), "").await;
    assert_eq!(built.status, StatusCode::OK, "{}", built.body);
    assert_eq!(built.body["messages"], 2, "{}", built.body);
    let cookie = sign_in(&h).await;

    let list = get_with(&h, "/entities?kind=site", &[("cookie", &cookie)]).await;
    assert_eq!(list.status, StatusCode::OK, "{}", text(&list));
    let page = text(&list);
    assert!(page.contains(">docs.rs</a>"), "{page}");
    assert!(!page.contains(">OpenAI</a>"), "the kind filters: {page}");
    assert!(page.contains("aria-current=\"page\">Entities"), "{page}");
    let bad = get_with(&h, "/entities?kind=planet", &[("cookie", &cookie)]).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);

    let docs = h.get("/v1/entities?q=docs.rs", Some(&token)).await;
    let id = docs.body["entities"][0]["id"].as_str().unwrap().to_owned();
    let r = get_with(&h, &format!("/entities/{id}"), &[("cookie", &cookie)]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    let page = text(&r);
    assert!(
        page.contains("data-kind=\"site\" data-threads=\"2\""),
        "{page}"
    );
    // A bar per day with a source, oldest first.
    let d20 = page.find("data-day=\"2026-11-20\" data-sources=\"1\"");
    let d22 = page.find("data-day=\"2026-11-22\" data-sources=\"1\"");
    assert!(d20.is_some() && d22.is_some() && d20 < d22, "{page}");
    assert_eq!(page.matches("<rect ").count(), 2, "{page}");
    let t1 = personkit_testkit::thread_id(CHATGPT, "g1");
    assert!(page.contains(&format!("href=\"/threads/{t1}\"")), "{page}");
    assert!(!page.contains("style="), "{page}");

    let gpt = h.get("/v1/entities?q=gpt-4o", Some(&token)).await;
    let gid = gpt.body["entities"][0]["id"].as_str().unwrap().to_owned();
    let r = get_with(&h, &format!("/entities/{gid}"), &[("cookie", &cookie)]).await;
    let page = text(&r);
    assert!(page.contains("data-predicate=\"made_by\""), "{page}");
    assert!(page.contains(">OpenAI</a>"), "{page}");

    let thread = get_with(&h, &format!("/threads/{t1}"), &[("cookie", &cookie)]).await;
    let page = text(&thread);
    assert!(page.contains("id=\"thread-entities\""), "{page}");
    assert!(
        page.contains(&format!("href=\"/entities/{gid}\"")),
        "{page}"
    );
    assert!(page.contains(&format!("href=\"/entities/{id}\"")), "{page}");

    let missing = get_with(&h, "/entities/nope", &[("cookie", &cookie)]).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let signed_out = get_with(&h, &format!("/entities/{id}"), &[]).await;
    assert_eq!(signed_out.status, StatusCode::UNAUTHORIZED);
}

/// Names a model found: a device token lists them and decides; an approved name is an entity with its turn as the
/// source; a rejected one is not; an agent token can neither read nor decide (unapproved model output never reaches
/// an agent); an unknown id or decision is a 404 with the error shape.
#[tokio::test]
async fn proposals_are_the_users_to_read_and_decide() {
    let h = harness();
    let token = h.pair().await;
    let items = vec![turn(
        "p1",
        Role::User,
        "I met Priya Raman in Lisbon",
        Some(0),
        None,
        "2026-11-20T09:00:00Z",
    )];
    assert_eq!(h.send(&token, &items).await.status, StatusCode::OK);
    let now = h.state().clock.now();
    let (priya, lisbon) = h
        .state()
        .db
        .write(|c| {
            let (mid, tid): (String, String) =
                c.query_row("SELECT id, thread_id FROM messages LIMIT 1", [], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
            let mut ids = Vec::new();
            for (kind, name) in [("person", "Priya Raman"), ("place", "Lisbon")] {
                let key = name.to_lowercase();
                let (id, _) = personkit_store::proposals::propose(
                    c,
                    &personkit_store::proposals::Mention {
                        kind,
                        name,
                        key: &key,
                        confidence: 0.9,
                        model: "scripted:test",
                        message_id: &mid,
                        thread_id: &tid,
                        seen_at: "2026-11-20T09:00:00.000Z",
                    },
                    now,
                )?;
                ids.push(id);
            }
            Ok::<_, personkit_store::DbError>((ids[0].clone(), ids[1].clone()))
        })
        .unwrap();
    let (_, agent) = h
        .state()
        .db
        .write(|c| personkit_store::auth::create_agent(c, "claude", now))
        .unwrap();
    let r = h.get("/v1/graph/proposals", Some(agent.expose())).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    assert_eq!(r.body["code"], "read_only_token");
    let r = h
        .post(
            &format!("/v1/graph/proposals/{priya}/approve"),
            Some(agent.expose()),
            "",
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    let r = h.get("/v1/graph/proposals", Some(&token)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        r.body["proposals"].as_array().unwrap().len(),
        2,
        "{}",
        r.body
    );
    assert_error(
        &h.get("/v1/graph/proposals?state=maybe", Some(&token)).await,
        StatusCode::BAD_REQUEST,
        "bad_query",
    );
    // Before approval the graph does not know the name, for any token.
    let none = h.get("/v1/entities?q=priya", Some(&token)).await;
    assert_eq!(
        none.body["entities"].as_array().unwrap().len(),
        0,
        "{}",
        none.body
    );

    let r = h
        .post(
            &format!("/v1/graph/proposals/{priya}/approve"),
            Some(&token),
            "",
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let entity = r.body["entity_id"].as_str().unwrap().to_owned();
    let r = h
        .post(
            &format!("/v1/graph/proposals/{lisbon}/reject"),
            Some(&token),
            "",
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let found = h.get("/v1/entities?q=priya", Some(agent.expose())).await;
    assert_eq!(
        found.body["entities"][0]["id"],
        entity.as_str(),
        "{}",
        found.body
    );
    let gone = h.get("/v1/entities?q=lisbon", Some(&token)).await;
    assert_eq!(gone.body["entities"].as_array().unwrap().len(), 0);
    let rejected = h
        .get("/v1/graph/proposals?state=rejected", Some(&token))
        .await;
    assert_eq!(rejected.body["proposals"][0]["name"], "Lisbon");

    assert_error(
        &h.post("/v1/graph/proposals/nope/approve", Some(&token), "")
            .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &h.post(
            &format!("/v1/graph/proposals/{lisbon}/maybe"),
            Some(&token),
            "",
        )
        .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
}

/// The Entities page lists the names a model found with Approve and Reject buttons (session forms with a CSRF
/// token); approving makes the entity and says so; a used token, a missing proposal and a bad decision are refused.
#[tokio::test]
async fn the_entities_page_lets_the_user_decide_on_a_models_names() {
    let h = harness();
    let token = h.pair().await;
    let items = vec![turn(
        "p1",
        Role::User,
        "I met Priya Raman in Lisbon",
        Some(0),
        None,
        "2026-11-20T09:00:00Z",
    )];
    assert_eq!(h.send(&token, &items).await.status, StatusCode::OK);
    let now = h.state().clock.now();
    let priya = h
        .state()
        .db
        .write(|c| {
            let (mid, tid): (String, String) =
                c.query_row("SELECT id, thread_id FROM messages LIMIT 1", [], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
            personkit_store::proposals::propose(
                c,
                &personkit_store::proposals::Mention {
                    kind: "person",
                    name: "Priya Raman",
                    key: "priya raman",
                    confidence: 0.7,
                    model: "scripted:test",
                    message_id: &mid,
                    thread_id: &tid,
                    seen_at: "2026-11-20T09:00:00.000Z",
                },
                now,
            )
            .map(|(id, _)| id)
        })
        .unwrap();
    let cookie = sign_in(&h).await;
    let r = get_with(&h, "/entities", &[("cookie", &cookie)]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    let page = text(&r).to_owned();
    assert!(page.contains("id=\"proposals\""), "{page}");
    assert!(
        page.contains(&format!("data-proposal=\"{priya}\"")),
        "{page}"
    );
    assert!(
        page.contains("aria-label=\"Approve: Priya Raman\""),
        "{page}"
    );
    assert!(page.contains("1 turn, 1 thread"), "{page}");
    let form = |t: &str, id: &str, d: &str| format!("csrf={t}&proposal={id}&decision={d}");
    let decide = "/entities/proposals/decide";
    let t = csrf(&page, decide);
    let bad = post_form(&h, decide, &cookie, &form(&t, &priya, "maybe"), &[]).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", text(&bad));
    let page = text(&get_with(&h, "/entities", &[("cookie", &cookie)]).await).to_owned();
    let t = csrf(&page, decide);
    let missing = post_form(&h, decide, &cookie, &form(&t, "nope", "approve"), &[]).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "{}", text(&missing));
    let page = text(&get_with(&h, "/entities", &[("cookie", &cookie)]).await).to_owned();
    let t = csrf(&page, decide);
    let r = post_form(&h, decide, &cookie, &form(&t, &priya, "approve"), &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", text(&r));
    let to = r
        .headers
        .get(header::LOCATION)
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(to.starts_with("/entities?done=approved"), "{to}");
    let again = post_form(&h, decide, &cookie, &form(&t, &priya, "reject"), &[]).await;
    assert_eq!(again.status, StatusCode::FORBIDDEN, "a used token");
    let after = get_with(&h, &to, &[("cookie", &cookie)]).await;
    let page = text(&after);
    assert!(
        page.contains("Approved: Priya Raman is now an entity"),
        "{page}"
    );
    assert!(!page.contains("id=\"proposals\""), "nothing waits: {page}");
    assert!(
        page.contains(">Priya Raman</a>"),
        "listed as an entity: {page}"
    );
}
