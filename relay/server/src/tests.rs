//! Handler tests: the real router from [`crate::app`] over a real corpus file in a temp dir, driven with
//! `tower::ServiceExt::oneshot` (no socket). The clock is a manual one so capture-health colours can be tested.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use personkit_shared::wire::{ClientInfo, Role, build_observation};
use serde_json::{Value, json};
use time::macros::datetime;
use time::{Duration, OffsetDateTime};
use tower::ServiceExt;

use personkit_store::Db;
use personkit_store::auth;
use personkit_store::clock::Clock;

use crate::config::ApiConfig;
use crate::{AppState, app};

const T0: OffsetDateTime = datetime!(2026-11-22 10:00:00 UTC);
pub(crate) const CHATGPT: &str = "browser-ext:chatgpt";

pub(crate) struct Harness {
    _dir: tempfile::TempDir,
    state: AppState,
    router: Router,
}

pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Value,
}

pub(crate) fn harness_with(config: ApiConfig) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("corpus.db")).unwrap();
    // Never the developer's own profile.
    let state = AppState::new(db, config, Clock::manual(T0))
        .with_profile_path(dir.path().join(".dotperson/profile.md"));
    Harness {
        _dir: dir,
        router: app(state.clone()),
        state,
    }
}

pub(crate) fn harness() -> Harness {
    harness_with(ApiConfig {
        rate_limit: 0.0,
        ..ApiConfig::default()
    })
}

impl Harness {
    /// Stops this relay and starts a new one on the same corpus file, config and clock (nothing in memory
    /// survives, as after a process restart).
    pub(crate) fn restart(&mut self) {
        let path = self.state.db.path().to_path_buf();
        let config = (*self.state.config).clone();
        let clock = self.state.clock.clone();
        let profile = self.state.profile_path.clone();
        let state =
            AppState::new(Db::open(&path).unwrap(), config, clock).with_profile_path(profile);
        self.router = app(state.clone());
        self.state = state;
    }

    /// Sends `req` as a client on this machine would: addressed to `127.0.0.1:8787` unless it names a host.
    pub(crate) async fn call(&self, mut req: Request<Body>) -> Reply {
        if !req.headers().contains_key(header::HOST) {
            req.headers_mut()
                .insert(header::HOST, "127.0.0.1:8787".parse().unwrap());
        }
        let resp = self.router.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Reply {
            status,
            headers,
            body,
        }
    }

    pub(crate) async fn post(
        &self,
        path: &str,
        token: Option<&str>,
        body: impl Into<Body>,
    ) -> Reply {
        let mut req = Request::post(path).header(header::CONTENT_TYPE, "application/json");
        if let Some(t) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        self.call(req.body(body.into()).unwrap()).await
    }

    pub(crate) async fn get(&self, path: &str, token: Option<&str>) -> Reply {
        let mut req = Request::get(path);
        if let Some(t) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        self.call(req.body(Body::empty()).unwrap()).await
    }

    fn new_code(&self) -> String {
        let now = self.state.clock.now();
        self.state
            .db
            .write(|c| auth::create_pairing_code(c, now))
            .unwrap()
            .0
            .display()
    }

    pub(crate) async fn pair(&self) -> String {
        let code = self.new_code();
        let r = self
            .post(
                "/v1/pair",
                None,
                json!({"code": code, "device_name": "test"}).to_string(),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        r.body["token"].as_str().unwrap().to_owned()
    }

    pub(crate) async fn send(&self, token: &str, items: &[Value]) -> Reply {
        self.post(
            "/v1/observations",
            Some(token),
            json!({"observations": items}).to_string(),
        )
        .await
    }

    pub(crate) fn state(&self) -> &AppState {
        &self.state
    }

    pub(crate) fn count(&self, sql: &str) -> i64 {
        self.state
            .db
            .read(|c| Ok::<_, personkit_store::DbError>(c.query_row(sql, [], |r| r.get(0))?))
            .unwrap()
    }
}

fn client() -> ClientInfo {
    ClientInfo {
        app_version: "0.1.0".into(),
        device_id: "ext-1".into(),
    }
}

pub(crate) fn turn(
    conv: &str,
    role: Role,
    content: &str,
    ordinal: Option<u32>,
    key: Option<&str>,
    at: &str,
) -> Value {
    serde_json::to_value(build_observation(
        CHATGPT,
        conv,
        role,
        content,
        ordinal,
        key,
        at,
        client(),
    ))
    .unwrap()
}

/// A valid user turn with this content in conversation `conv`, captured now.
pub(crate) fn turn_value(conv: &str, content: &str) -> Value {
    turn(
        conv,
        Role::User,
        content,
        None,
        None,
        "2026-11-22T09:59:00Z",
    )
}

/// User turns "turn {i}" of conversation "c" at ordinals `range`.
fn numbered_turns(range: std::ops::Range<u32>) -> Vec<Value> {
    range
        .map(|i| {
            turn(
                "c",
                Role::User,
                &format!("turn {i}"),
                Some(i),
                None,
                "2026-11-22T09:59:00Z",
            )
        })
        .collect()
}

fn statuses(r: &Reply) -> Vec<String> {
    r.body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["status"].as_str().unwrap().to_owned())
        .collect()
}

pub(crate) fn assert_error(r: &Reply, status: StatusCode, code: &str) {
    assert_eq!(r.status, status, "{}", r.body);
    assert_eq!(r.body["code"], code, "{}", r.body);
    assert!(
        r.body["message"].is_string() && r.body["hint"].is_string(),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn pairing_code_works_once_in_any_spelling_and_expires() {
    let h = harness();
    let code = h.new_code();
    let typed = code.replace('-', "").to_lowercase();
    let ok = h
        .post(
            "/v1/pair",
            None,
            json!({"code": typed, "device_name": "laptop"}).to_string(),
        )
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    assert!(ok.body["token"].as_str().unwrap().starts_with("pkt_"));
    assert!(ok.body["device_id"].is_string());
    let again = h
        .post(
            "/v1/pair",
            None,
            json!({"code": code, "device_name": "x"}).to_string(),
        )
        .await;
    assert_error(&again, StatusCode::UNAUTHORIZED, "invalid_pairing_code");

    let late = h.new_code();
    h.state
        .clock
        .advance(Duration::minutes(10) + Duration::seconds(1));
    let r = h
        .post(
            "/v1/pair",
            None,
            json!({"code": late, "device_name": "x"}).to_string(),
        )
        .await;
    assert_error(&r, StatusCode::UNAUTHORIZED, "invalid_pairing_code");
    let r = h.post("/v1/pair", None, "{not json").await;
    assert_error(&r, StatusCode::BAD_REQUEST, "malformed_json");
    assert_eq!(h.count("SELECT count(*) FROM devices"), 1);
}

#[tokio::test]
async fn every_v1_route_but_health_and_pair_needs_a_live_token() {
    let h = harness();
    let health = h.get("/v1/health", None).await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.body["ok"], true);
    assert_eq!(
        health.body["limits"]["max_batch_items"], h.state.config.max_batch_items,
        "{}",
        health.body
    );
    assert_eq!(
        health.body["limits"]["max_batch_bytes"],
        h.state.config.max_batch_bytes
    );
    let item = turn("c", Role::User, "hi", Some(0), None, "2026-11-22T09:59:00Z");
    for token in [
        None,
        Some("garbage"),
        Some("pkt_0000000000000000000000000000000000000000000000000000000000000000"),
    ] {
        let r = h
            .post(
                "/v1/observations",
                token,
                json!({"observations": [item]}).to_string(),
            )
            .await;
        assert_error(&r, StatusCode::UNAUTHORIZED, "unauthorized");
        assert_eq!(
            r.headers.get("connection").and_then(|v| v.to_str().ok()),
            Some("close"),
            "a refusal that left the body unread closes the connection"
        );
        let r = h.get("/v1/me/capture-health", token).await;
        assert_error(&r, StatusCode::UNAUTHORIZED, "unauthorized");
        let r = h.get("/v1/query?q=hi", token).await;
        assert_error(&r, StatusCode::UNAUTHORIZED, "unauthorized");
    }
    let token = h.pair().await;
    assert_eq!(
        h.send(&token, std::slice::from_ref(&item)).await.status,
        StatusCode::OK
    );
    for path in ["/v1/me/capture-health", "/v1/query?q=hi"] {
        let r = h.get(path, Some(&token)).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
    }
    let device_id = h
        .state
        .db
        .read(|c| Ok::<_, personkit_store::DbError>(auth::list_devices(c)?[0].id.clone()))
        .unwrap();
    h.state
        .db
        .write(|c| auth::revoke_device(c, &device_id, T0))
        .unwrap();
    let r = h.send(&token, &[item]).await;
    assert_error(&r, StatusCode::UNAUTHORIZED, "unauthorized");
    for path in ["/v1/me/capture-health", "/v1/query?q=hi"] {
        let r = h.get(path, Some(&token)).await;
        assert_error(&r, StatusCode::UNAUTHORIZED, "unauthorized");
    }
    assert_error(
        &h.get("/nope", None).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &h.get("/v1/pair", None).await,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    );
}

#[tokio::test]
async fn bad_items_are_rejected_one_by_one_and_valid_ones_land() {
    let h = harness();
    let token = h.pair().await;
    let at = "2026-11-22T09:59:00Z";
    let good1 = turn("c1", Role::User, "first question", Some(0), None, at);
    let good2 = turn("c1", Role::Assistant, "first answer", Some(1), None, at);
    let mut unknown_kind = turn("c1", Role::User, "x", Some(2), None, at);
    unknown_kind["kind"] = json!("page_view");
    let mut wrong_type = turn("c1", Role::User, "y", Some(3), None, at);
    wrong_type["turn"]["ordinal"] = json!("three");
    let mut hash_mismatch = turn("c1", Role::User, "z", Some(4), None, at);
    hash_mismatch["turn"]["content"] = json!("tampered");
    // A forged thread id: a valid id, but of another conversation.
    let mut forged = turn("c1", Role::User, "w", Some(5), None, at);
    forged["thread_id"] =
        turn("other-conversation", Role::User, "w", None, None, at)["thread_id"].clone();
    let mut bad_surface = turn("c1", Role::User, "v", Some(6), None, at);
    bad_surface["source_surface"] = json!("evil.com");
    let mut empty = turn("c1", Role::User, "u", Some(7), None, at);
    empty["turn"]["content"] = json!("");
    let mut oversize = turn("c1", Role::User, "t", Some(8), None, at);
    oversize["turn"]["content"] = json!("a".repeat(personkit_shared::wire::MAX_CONTENT_BYTES + 1));
    let mut bad_time = turn("c1", Role::User, "s", Some(9), None, at);
    bad_time["turn"]["captured_at"] = json!("2026-02-30T10:00:00Z");
    let items = vec![
        good1,
        unknown_kind,
        wrong_type,
        hash_mismatch,
        forged,
        bad_surface,
        empty,
        oversize,
        json!("not an object"),
        bad_time,
        good2,
    ];
    let r = h
        .post(
            "/v1/observations",
            Some(&token),
            json!({"observations": items}).to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let codes: Vec<Value> = r.body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["error"]["code"].clone())
        .collect();
    assert_eq!(
        codes,
        vec![
            Value::Null,
            json!("unknown_kind"),
            json!("malformed_item"),
            json!("hash_mismatch"),
            json!("thread_id_mismatch"),
            json!("invalid_surface"),
            json!("empty_field"),
            json!("too_large"),
            json!("malformed_item"),
            json!("bad_timestamp"),
            Value::Null,
        ]
    );
    for res in r.body["results"].as_array().unwrap() {
        if res["status"] == "rejected" {
            assert!(
                res["error"]["message"].is_string() && res["error"]["hint"].is_string(),
                "{res}"
            );
        }
    }
    assert_eq!(
        (r.body["stored"].clone(), r.body["rejected"].clone()),
        (json!(2), json!(9))
    );
    assert_eq!(h.count("SELECT count(*) FROM messages"), 2);
    assert_eq!(h.count("SELECT count(*) FROM persona_observations"), 2);
    assert_eq!(
        h.count("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'question'"),
        1
    );
}

#[tokio::test]
async fn oversize_batches_get_413_and_store_nothing() {
    let h = harness_with(ApiConfig {
        max_batch_items: 3,
        max_batch_bytes: 4096,
        rate_limit: 0.0,
        ..ApiConfig::default()
    });
    let token = h.pair().await;
    let items = numbered_turns(0..4);
    let r = h.send(&token, &items).await;
    assert_error(&r, StatusCode::PAYLOAD_TOO_LARGE, "batch_too_large");
    assert!(
        r.body["hint"].as_str().unwrap().contains("at most 3"),
        "{}",
        r.body
    );
    let big = turn(
        "c",
        Role::User,
        &"x".repeat(5000),
        Some(0),
        None,
        "2026-11-22T09:59:00Z",
    );
    let r = h.send(&token, &[big]).await;
    assert_error(&r, StatusCode::PAYLOAD_TOO_LARGE, "batch_too_large");
    // A declared Content-Length over the limit is refused before the body is read.
    let req = Request::post("/v1/observations")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_LENGTH, "999999")
        .body(Body::from(vec![b' '; 999_999]))
        .unwrap();
    assert_error(
        &h.call(req).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "batch_too_large",
    );
    assert_eq!(h.count("SELECT count(*) FROM messages"), 0);
}

#[tokio::test]
async fn a_body_that_never_finishes_gets_408() {
    let h = harness_with(ApiConfig {
        rate_limit: 0.0,
        body_timeout: std::time::Duration::from_millis(200),
        ..ApiConfig::default()
    });
    let token = h.pair().await;
    let (_sender, stalled) =
        http_body_util::channel::Channel::<axum::body::Bytes, std::convert::Infallible>::new(1);
    let req = Request::post("/v1/observations")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::new(stalled))
        .unwrap();
    let r = tokio::time::timeout(std::time::Duration::from_secs(10), h.call(req))
        .await
        .expect("answered");
    assert_error(&r, StatusCode::REQUEST_TIMEOUT, "request_timeout");
}

#[tokio::test]
async fn malformed_bodies_get_400() {
    let h = harness();
    let token = h.pair().await;
    let r = h
        .post("/v1/observations", Some(&token), "{\"observations\": [")
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "malformed_json");
    for body in ["{\"items\": []}", "[]", "{\"observations\": {}}", "42"] {
        let r = h.post("/v1/observations", Some(&token), body).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "malformed_batch");
    }
    let r = h.send(&token, &[]).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "an empty batch is fine: {}",
        r.body
    );
}

#[tokio::test]
async fn a_replayed_batch_is_all_duplicate_with_the_same_ids() {
    let h = harness();
    let token = h.pair().await;
    let items = numbered_turns(0..5);
    let first = h.send(&token, &items).await;
    assert_eq!(statuses(&first), vec!["stored"; 5]);
    let again = h.send(&token, &items).await;
    assert_eq!(statuses(&again), vec!["duplicate"; 5]);
    for (a, b) in first.body["results"]
        .as_array()
        .unwrap()
        .iter()
        .zip(again.body["results"].as_array().unwrap())
    {
        assert_eq!(a["message_id"], b["message_id"]);
        assert_eq!(a["thread_id"], b["thread_id"]);
    }
    assert_eq!(h.count("SELECT count(*) FROM messages"), 5);
    assert_eq!(h.count("SELECT count(*) FROM threads"), 1);
    assert_eq!(h.count("SELECT count(*) FROM persona_observations"), 5);
}

#[tokio::test]
async fn an_edit_becomes_a_new_current_revision() {
    let h = harness();
    let token = h.pair().await;
    let v1 = turn(
        "c",
        Role::Assistant,
        "answer, first draft",
        Some(1),
        Some("msg-9"),
        "2026-11-22T09:00:00Z",
    );
    let v2 = turn(
        "c",
        Role::Assistant,
        "answer, regenerated",
        Some(1),
        Some("msg-9"),
        "2026-11-22T09:05:00Z",
    );
    // Arrival order reversed on purpose: the later capture is still the current one.
    assert_eq!(
        statuses(&h.send(&token, std::slice::from_ref(&v2)).await),
        ["stored"]
    );
    assert_eq!(
        statuses(&h.send(&token, std::slice::from_ref(&v1)).await),
        ["stored"]
    );
    assert_eq!(
        statuses(&h.send(&token, &[v1, v2]).await),
        ["duplicate", "duplicate"]
    );
    let rows: Vec<(String, i64, i64)> = h
        .state
        .db
        .read(|c| {
            let mut s =
                c.prepare("SELECT content, revision, is_current FROM messages ORDER BY revision")?;
            let rows = s
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok::<_, personkit_store::DbError>(rows)
        })
        .unwrap();
    assert_eq!(
        rows,
        vec![
            ("answer, first draft".into(), 1, 0),
            ("answer, regenerated".into(), 2, 1)
        ]
    );
}

#[tokio::test]
async fn capture_health_colours_follow_time_and_errors() {
    let h = harness();
    let token = h.pair().await;
    let empty = h.get("/v1/me/capture-health", Some(&token)).await;
    assert_eq!(empty.body["surfaces"], json!([]));
    let ok = turn(
        "c",
        Role::User,
        "hello",
        Some(0),
        None,
        "2026-11-22T09:59:00Z",
    );
    h.send(&token, &[ok]).await;
    let colour = |r: &Reply| r.body["surfaces"][0]["status"].as_str().unwrap().to_owned();
    let r = h.get("/v1/me/capture-health", Some(&token)).await;
    assert_eq!(r.status, StatusCode::OK);
    let s = &r.body["surfaces"][0];
    assert_eq!(s["surface"], CHATGPT);
    assert_eq!(s["last_accepted_at"], "2026-11-22T10:00:00.000Z");
    assert_eq!(
        (s["turns_24h"].clone(), s["threads_24h"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(s["last_error"], Value::Null);
    assert_eq!(colour(&r), "green");
    h.state.clock.advance(Duration::minutes(6));
    assert_eq!(
        colour(&h.get("/v1/me/capture-health", Some(&token)).await),
        "yellow"
    );
    h.state.clock.advance(Duration::minutes(55));
    assert_eq!(
        colour(&h.get("/v1/me/capture-health", Some(&token)).await),
        "red"
    );

    let mut bad = turn(
        "c",
        Role::User,
        "bad",
        Some(1),
        None,
        "2026-11-22T11:00:00Z",
    );
    bad["turn"]["content_hash"] = json!("0".repeat(64));
    h.send(&token, &[bad]).await;
    let r = h.get("/v1/me/capture-health", Some(&token)).await;
    assert_eq!(colour(&r), "red");
    assert_eq!(r.body["surfaces"][0]["last_error"]["code"], "hash_mismatch");
    h.state.clock.advance(Duration::seconds(1));
    let fixed = turn(
        "c",
        Role::User,
        "fixed",
        Some(1),
        None,
        "2026-11-22T11:00:00Z",
    );
    h.send(&token, &[fixed]).await;
    let r = h.get("/v1/me/capture-health", Some(&token)).await;
    assert_eq!(colour(&r), "green", "{}", r.body);
    h.state.clock.advance(Duration::hours(25));
    let r = h.get("/v1/me/capture-health", Some(&token)).await;
    assert_eq!(r.body["surfaces"][0]["turns_24h"], 0);
}

#[tokio::test]
async fn cors_allows_extension_origins_only() {
    let h = harness();
    for (origin, allowed) in [
        ("chrome-extension://abcdefghijklmnop", true),
        ("moz-extension://0b9c2d6e-1111-4c1a-9d33-5b2e0f6a7c88", true),
        ("https://chatgpt.com", false),
        ("http://127.0.0.1:8787", false),
        ("chrome-extension://", false),
    ] {
        let req = Request::builder()
            .method("OPTIONS")
            .uri("/v1/observations")
            .header(header::ORIGIN, origin)
            .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
            .header(
                header::ACCESS_CONTROL_REQUEST_HEADERS,
                "authorization,content-type",
            )
            .body(Body::empty())
            .unwrap();
        let r = h.call(req).await;
        let acao = r
            .headers
            .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
            .map(|v| v.to_str().unwrap().to_owned());
        if allowed {
            assert_eq!(acao.as_deref(), Some(origin), "{origin}");
        } else {
            assert_eq!(acao, None, "{origin}");
        }
        let req = Request::get("/v1/health")
            .header(header::ORIGIN, origin)
            .body(Body::empty())
            .unwrap();
        let r = h.call(req).await;
        assert_eq!(
            r.headers.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_some(),
            allowed,
            "{origin}"
        );
    }
}

#[tokio::test]
async fn rate_limit_answers_429_with_retry_after() {
    let h = harness_with(ApiConfig {
        rate_limit: 1.0,
        rate_burst: 2.0,
        ..ApiConfig::default()
    });
    let token = h.pair().await;
    assert_eq!(
        h.get("/v1/me/capture-health", Some(&token)).await.status,
        StatusCode::OK
    );
    assert_eq!(
        h.get("/v1/me/capture-health", Some(&token)).await.status,
        StatusCode::OK
    );
    let r = h.get("/v1/me/capture-health", Some(&token)).await;
    assert_error(&r, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    let retry: u64 = r.headers[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry), "{retry}");
    // Another device has its own bucket.
    let other = h.pair().await;
    assert_eq!(
        h.get("/v1/me/capture-health", Some(&other)).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_storage_failure_is_503_and_nothing_of_the_batch_is_kept() {
    let h = harness();
    let token = h.pair().await;
    let a = turn(
        "c",
        Role::User,
        "lands before the failure",
        Some(0),
        None,
        "2026-11-22T09:59:00Z",
    );
    let b = turn(
        "c",
        Role::Assistant,
        "makes storage fail",
        Some(1),
        None,
        "2026-11-22T09:59:00Z",
    );
    // Simulate a storage failure in the middle of the batch (as a full disk or I/O error would).
    h.state
        .db
        .write(|c| {
            c.execute_batch(
                "CREATE TEMP TRIGGER fail_ingest BEFORE INSERT ON messages WHEN new.content = 'makes storage fail'
                 BEGIN SELECT RAISE(ABORT, 'simulated I/O failure'); END;",
            )?;
            Ok::<_, personkit_store::DbError>(())
        })
        .unwrap();
    let r = h.send(&token, &[a.clone(), b.clone()]).await;
    assert_error(&r, StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable");
    assert!(r.headers.contains_key(header::RETRY_AFTER));
    for table in [
        "messages",
        "threads",
        "persona_observations",
        "surface_stats",
        "origin_seqs",
        "provenance",
    ] {
        assert_eq!(
            h.count(&format!("SELECT count(*) FROM {table}")),
            0,
            "{table}"
        );
    }
    h.state
        .db
        .write(|c| {
            c.execute_batch("DROP TRIGGER temp.fail_ingest")?;
            Ok::<_, personkit_store::DbError>(())
        })
        .unwrap();
    let r = h.send(&token, &[a, b]).await;
    assert_eq!(
        statuses(&r),
        ["stored", "stored"],
        "the retry lands: {}",
        r.body
    );
}

/// A `tracing` writer that keeps everything in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The in-memory log of this test binary: a global TRACE-level subscriber installed once (a scoped one misses
/// events when other tests run in parallel threads and cache callsite interest).
fn captured_logs() -> Captured {
    static CAPTURED: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    CAPTURED
        .get_or_init(|| {
            let captured = Captured::default();
            let sink = captured.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::TRACE)
                .with_writer(move || sink.clone())
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in unit tests");
            captured
        })
        .clone()
}

#[tokio::test]
async fn logs_hold_neither_content_nor_secrets() {
    let captured = captured_logs();
    let h = harness();
    let code = h.new_code();
    let paired = h
        .post(
            "/v1/pair",
            None,
            json!({"code": code, "device_name": "n"}).to_string(),
        )
        .await;
    let token = paired.body["token"].as_str().unwrap().to_owned();
    let secret_words = "zebra-passphrase-horse-staple";
    let mut bad = turn(
        "c",
        Role::User,
        "rejected secret sentence",
        Some(1),
        None,
        "2026-11-22T09:59:00Z",
    );
    bad["turn"]["content_hash"] = json!("0".repeat(64));
    h.send(
        &token,
        &[
            turn(
                "c",
                Role::User,
                secret_words,
                Some(0),
                None,
                "2026-11-22T09:59:00Z",
            ),
            bad,
        ],
    )
    .await;
    h.post("/v1/observations", Some("pkt_wrongtoken"), "{}")
        .await;
    h.post("/v1/observations", Some(&token), "{broken").await;

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("batch ingested"), "the capture works: {logs}");
    for secret in [
        secret_words,
        "rejected secret sentence",
        &token,
        "pkt_wrongtoken",
        &code,
        &code.replace('-', ""),
    ] {
        assert!(!logs.contains(secret), "log leaks {secret:?}:\n{logs}");
    }
}

/// A stand-in embedder for the query route's tests: each text's vector counts a few marker words, so "car" and
/// "vehicle" land close together without sharing a word. (The real model is exercised by the embed crate's and
/// the CLI's tests.)
#[derive(Debug)]
struct Concepts;

impl personkit_embed::Embedder for Concepts {
    fn kind(&self) -> &'static str {
        "test"
    }
    fn model_id(&self) -> &str {
        "test:concepts"
    }
    fn model_version(&self) -> &str {
        "1"
    }
    fn dim(&self) -> usize {
        384
    }
    fn embed_documents(
        &self,
        texts: &[&str],
    ) -> Result<Vec<Vec<f32>>, personkit_embed::EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0f32; 384];
                for w in t.to_lowercase().split(|c: char| !c.is_alphanumeric()) {
                    match w {
                        "car" | "vehicle" | "brakes" => v[0] += 1.0,
                        "soup" | "lentil" | "recipe" => v[1] += 1.0,
                        _ => v[2] += 0.1,
                    }
                }
                personkit_embed::l2_normalize(&mut v);
                v
            })
            .collect())
    }
}

#[tokio::test]
async fn query_route_uses_the_states_embedder_and_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corpus.db");
    let db = Db::open(&path).unwrap();
    let embedder: std::sync::Arc<dyn personkit_embed::Embedder> = std::sync::Arc::new(Concepts);
    let state = AppState::new(
        db,
        ApiConfig {
            rate_limit: 0.0,
            ..ApiConfig::default()
        },
        Clock::manual(T0),
    )
    .with_embedder(Some(embedder.clone()));
    let h = Harness {
        _dir: dir,
        router: app(state.clone()),
        state,
    };
    let token = h.pair().await;
    let items = [
        turn(
            "q",
            Role::User,
            "my car brakes squeal",
            Some(0),
            None,
            "2026-11-22T09:00:00Z",
        ),
        turn(
            "q",
            Role::User,
            "a lentil soup recipe",
            Some(1),
            None,
            "2026-11-22T09:01:00Z",
        ),
    ];
    assert_eq!(h.send(&token, &items).await.status, StatusCode::OK);
    // Embed what was stored, as the background job would.
    let mut conn = personkit_store::db::open(&path).unwrap();
    let run = personkit_search::indexer::embed_pending(
        &mut conn,
        embedder.as_ref(),
        &Clock::manual(T0),
        &mut personkit_search::indexer::Cursor::default(),
        100,
        8,
        None,
        |_| {},
    )
    .unwrap();
    assert_eq!(run.rows, 2);
    // No word in common with either turn: only the vector signal can find it.
    let r = h.get("/v1/query?q=vehicle&k=1", Some(&token)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["model"], "test:concepts@1");
    assert_eq!(r.body["hits"][0]["snippet"], "my car brakes squeal");
    assert_eq!(r.body["hits"][0]["matched_via"], json!(["vector"]));
    assert_eq!(r.body["fusion"], "convex", "the default fusion");
    // Reciprocal rank fusion on request finds the same turn, and says it fused by rank.
    let r = h
        .get("/v1/query?q=vehicle&k=1&fusion=RRF", Some(&token))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["fusion"], "rrf");
    assert_eq!(r.body["hits"][0]["snippet"], "my car brakes squeal");
    // The state's index now holds both vectors.
    let held = h
        .state
        .db
        .read(|c| {
            h.state.indexes.with_index(
                c,
                personkit_store::vectors::Kind::Message,
                "test:concepts@1",
                384,
                |ix| ix.len(),
            )
        })
        .unwrap();
    assert_eq!(held, 2);
    // Bad parameters are a 400 with the error shape, before any search runs.
    for bad in [
        "/v1/query?q=x&k=0",
        "/v1/query?q=x&k=abc",
        "/v1/query?q=x&role=robot",
        "/v1/query?q=x&fusion=borda",
        "/v1/query",
    ] {
        assert_error(
            &h.get(bad, Some(&token)).await,
            StatusCode::BAD_REQUEST,
            "bad_query",
        );
    }
}

#[tokio::test]
async fn a_valid_code_pairs_after_any_number_of_wrong_ones() {
    let h = harness();
    let code = h.new_code();
    let wrong = |i: usize| json!({"code": format!("ABCD-{:04}", 2000 + i).replace('0', "2").replace('1', "3"), "device_name": "guesser"});
    let mut limited = 0;
    for i in 0..80 {
        let r = h.post("/v1/pair", None, wrong(i).to_string()).await;
        match r.status {
            StatusCode::UNAUTHORIZED => assert_eq!(r.body["code"], "invalid_pairing_code"),
            StatusCode::TOO_MANY_REQUESTS => {
                assert!(r.headers.contains_key(header::RETRY_AFTER));
                limited += 1;
            }
            other => panic!("wrong code {i} answered {other}: {}", r.body),
        }
    }
    assert!(limited > 0, "wrong codes beyond the burst are limited");
    let r = h
        .post(
            "/v1/pair",
            None,
            json!({"code": code, "device_name": "the user"}).to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "the valid code pairs: {}", r.body);
    assert!(r.body["token"].as_str().unwrap().starts_with("pkt_"));
}

#[tokio::test]
async fn requests_to_another_host_name_are_refused() {
    let h = harness();
    for host in [
        "evil.example",
        "evil.example:8787",
        "127.0.0.1.nip.example",
        "192.168.1.20:8787",
    ] {
        let req = Request::get("/v1/health")
            .header(header::HOST, host)
            .body(Body::empty())
            .unwrap();
        let r = h.call(req).await;
        assert_error(&r, StatusCode::MISDIRECTED_REQUEST, "host_not_allowed");
        // A rebinding page's pairing attempt, preflight or not.
        let req = Request::post("/v1/pair")
            .header(header::HOST, host)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(json!({"code": h.new_code()}).to_string()))
            .unwrap();
        assert_error(
            &h.call(req).await,
            StatusCode::MISDIRECTED_REQUEST,
            "host_not_allowed",
        );
    }
    assert_eq!(h.count("SELECT count(*) FROM devices"), 0);
    for host in ["localhost:8787", "[::1]:8787", "127.0.0.1"] {
        let req = Request::get("/v1/health")
            .header(header::HOST, host)
            .body(Body::empty())
            .unwrap();
        assert_eq!(h.call(req).await.status, StatusCode::OK, "{host}");
    }
    // A configured public name is answered.
    let h = harness_with(ApiConfig {
        allowed_hosts: vec!["relay.example.com".into()],
        ..ApiConfig::default()
    });
    let req = Request::get("/v1/health")
        .header(header::HOST, "relay.example.com")
        .body(Body::empty())
        .unwrap();
    assert_eq!(h.call(req).await.status, StatusCode::OK);
}

#[tokio::test]
async fn pairing_needs_json_on_both_pairing_routes() {
    let h = harness();
    let code = h.new_code();
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let mut req = Request::post("/v1/pair");
        if let Some(ct) = ct {
            req = req.header(header::CONTENT_TYPE, ct);
        }
        let req = req
            .body(Body::from(
                json!({"code": code, "device_name": "page"}).to_string(),
            ))
            .unwrap();
        assert_error(
            &h.call(req).await,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        );
    }
    assert_eq!(h.count("SELECT count(*) FROM devices"), 0);
    let req = Request::post("/v1/pair")
        .header(header::CONTENT_TYPE, "application/json; charset=utf-8")
        .body(Body::from(
            json!({"code": code, "device_name": "ext"}).to_string(),
        ))
        .unwrap();
    assert_eq!(h.call(req).await.status, StatusCode::OK);

    // The relay-to-relay pairing route is held to the same rule.
    let now = h.state.clock.now();
    let sync_code = h
        .state
        .db
        .write(|c| personkit_store::sync::create_sync_code(c, now))
        .unwrap()
        .0
        .display();
    let body = json!({"code": sync_code, "relay_id": "relay-page", "name": "page"}).to_string();
    for ct in [None, Some("text/plain")] {
        let mut req = Request::post("/v1/sync/pair");
        if let Some(ct) = ct {
            req = req.header(header::CONTENT_TYPE, ct);
        }
        assert_error(
            &h.call(req.body(Body::from(body.clone())).unwrap()).await,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        );
    }
    assert_eq!(h.count("SELECT count(*) FROM sync_peers"), 0);
    let req = Request::post("/v1/sync/pair")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap();
    assert_eq!(h.call(req).await.status, StatusCode::OK);
    assert_eq!(h.count("SELECT count(*) FROM sync_peers"), 1);
}

/// A device reports a surface's adapter stale: capture health colours it at least yellow with the reason
/// `adapter_stale` (red after 10 minutes of failing); a turn of the surface the same device captured later, or
/// its report that the adapter reads again, clears it. Invalid reports are refused one by one.
#[tokio::test]
async fn a_stale_adapter_report_colours_capture_health_until_a_capture_clears_it() {
    let h = harness();
    let token = h.pair().await;
    let other = h.pair().await;
    let grok = |r: &Reply| {
        r.body["surfaces"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["surface"] == "browser-ext:grok")
            .cloned()
            .unwrap_or(Value::Null)
    };
    let report = |since: Value| {
        json!({"reports": [{"surface": "browser-ext:grok", "stale_since": since, "rule": "message_roots[1]"}]})
            .to_string()
    };
    // Reported two minutes after the pages started failing; nothing of Grok was ever sent before.
    let r = h
        .post(
            "/v1/me/capture-reports",
            Some(&token),
            report(json!("2026-11-22T09:58:00Z")),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["results"][0]["status"], "stored");
    let health = h.get("/v1/me/capture-health", Some(&token)).await;
    let g = grok(&health);
    assert_eq!(
        (g["status"].as_str(), g["reason"].as_str()),
        (Some("red"), Some("adapter_stale")),
        "never accepted: red, and the reason says why: {g}"
    );
    assert_eq!(g["stale_since"], "2026-11-22T09:58:00.000Z");

    // A Grok turn captured before the breakage (a late delivery) does not clear it; the surface is now yellow.
    let obs = |content: &str, at: &str| {
        serde_json::to_value(build_observation(
            "browser-ext:grok",
            "g1",
            Role::User,
            content,
            Some(0),
            None,
            at,
            client(),
        ))
        .unwrap()
    };
    h.send(&token, &[obs("before", "2026-11-22T09:57:00Z")])
        .await;
    let g = grok(&h.get("/v1/me/capture-health", Some(&token)).await);
    assert_eq!(
        (g["status"].as_str(), g["reason"].as_str()),
        (Some("yellow"), Some("adapter_stale")),
        "{g}"
    );
    h.state.clock.advance(Duration::minutes(9));
    let g = grok(&h.get("/v1/me/capture-health", Some(&token)).await);
    assert_eq!(g["status"], "red", "failing for 11 minutes: {g}");
    // Another device capturing Grok does not speak for this one.
    h.send(&other, &[obs("elsewhere", "2026-11-22T10:08:00Z")])
        .await;
    assert_eq!(
        grok(&h.get("/v1/me/capture-health", Some(&token)).await)["reason"],
        "adapter_stale"
    );
    // The same device captures Grok again: the report no longer stands.
    h.send(&token, &[obs("after", "2026-11-22T10:09:00Z")])
        .await;
    let g = grok(&h.get("/v1/me/capture-health", Some(&token)).await);
    assert_eq!(
        (g["status"].as_str(), g["reason"].clone()),
        (Some("green"), Value::Null),
        "{g}"
    );

    // Reported again, then cleared by the device itself.
    h.post(
        "/v1/me/capture-reports",
        Some(&token),
        report(json!("2026-11-22T10:09:30Z")),
    )
    .await;
    assert_eq!(
        grok(&h.get("/v1/me/capture-health", Some(&token)).await)["reason"],
        "adapter_stale"
    );
    let r = h
        .post("/v1/me/capture-reports", Some(&token), report(Value::Null))
        .await;
    assert_eq!(r.body["results"][0]["status"], "stored", "{}", r.body);
    assert_eq!(
        grok(&h.get("/v1/me/capture-health", Some(&token)).await)["reason"],
        Value::Null
    );

    // Bad reports: each refused on its own, the valid one beside them lands.
    let r = h
        .post(
            "/v1/me/capture-reports",
            Some(&token),
            json!({"reports": [
                {"surface": "grok", "stale_since": null},
                {"surface": "browser-ext:grok", "stale_since": "2026-13-40T10:00:00Z"},
                {"surface": "browser-ext:grok", "stale_since": "yesterday"},
                {"surface": "browser-ext:poe", "stale_since": "2026-11-22T10:10:00Z", "rule": "x".repeat(500)},
                {"surface": "browser-ext:pi", "stale_since": "2026-11-22T10:10:00Z"},
            ]})
            .to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let codes: Vec<Value> = r.body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["error"]["code"].clone())
        .collect();
    assert_eq!(
        codes,
        vec![
            json!("invalid_surface"),
            json!("bad_timestamp"),
            json!("bad_timestamp"),
            json!("bad_rule"),
            Value::Null
        ]
    );
    assert_eq!(h.count("SELECT count(*) FROM capture_reports"), 1);
    for (body, code) in [
        ("{", "malformed_json"),
        (r#"{"reports": {}}"#, "malformed_reports"),
        (r#"{"reports": [], "more": 1}"#, "malformed_reports"),
    ] {
        let r = h.post("/v1/me/capture-reports", Some(&token), body).await;
        assert_eq!(
            (r.status, r.body["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some(code)),
            "{body}"
        );
    }
    let many: Vec<Value> = (0..65)
        .map(|_| json!({"surface": "browser-ext:pi", "stale_since": null}))
        .collect();
    let r = h
        .post(
            "/v1/me/capture-reports",
            Some(&token),
            json!({ "reports": many }).to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.body);
    let r = h
        .post("/v1/me/capture-reports", None, report(Value::Null))
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}
