//! Property tests of the router over hostile input: arbitrary observations (every field replaced by arbitrary
//! JSON, or a time with any offset) beside a valid one, and arbitrary query strings. No input may answer 5xx or
//! panic; a rejected item stores nothing; the valid item beside it lands.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::http::StatusCode;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};

use super::tests::{Harness, harness, turn_value};

/// Any JSON value, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "\\PC{0,40}".prop_map(Value::from),
        rfc3339_like().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,12}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Strings shaped like RFC 3339 times with any year and any offset (the edges where conversion to UTC leaves
/// the four-digit range).
fn rfc3339_like() -> impl Strategy<Value = String> {
    "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9])[Tt ]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
}

/// A valid item with some fields (top-level or in `turn`) replaced by arbitrary JSON or removed.
fn mangled_item(seed_content: String) -> impl Strategy<Value = Value> {
    let base = turn_value("prop", &seed_content);
    let fields: Vec<String> = {
        let mut f: Vec<String> = base
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.to_string())
            .collect();
        f.extend(
            base["turn"]
                .as_object()
                .unwrap()
                .keys()
                .map(|k| format!("turn.{k}")),
        );
        f
    };
    let n = fields.len();
    prop::collection::vec((0..n, prop::option::of(any_json())), 1..4).prop_map(move |edits| {
        let mut v = base.clone();
        for (i, value) in edits {
            let field = &fields[i];
            let (obj, key) = match field.strip_prefix("turn.") {
                Some(k) => match v["turn"].as_object_mut() {
                    Some(turn) => (turn, k.to_owned()),
                    // An earlier edit replaced the whole turn.
                    None => continue,
                },
                None => match v.as_object_mut() {
                    Some(o) => (o, field.clone()),
                    None => continue,
                },
            };
            match value {
                Some(x) => {
                    obj.insert(key, x);
                }
                None => {
                    obj.remove(&key);
                }
            }
        }
        v
    })
}

fn batch_case() -> impl Strategy<Value = Vec<Value>> {
    prop_oneof![
        3 => "[a-z ]{1,30}".prop_flat_map(mangled_item),
        1 => any_json(),
    ]
    .prop_map(|v| vec![v])
    .prop_flat_map(|first| {
        prop::collection::vec(
            prop_oneof![3 => "[a-z ]{1,30}".prop_flat_map(mangled_item), 1 => any_json()],
            0..3,
        )
        .prop_map(move |rest| first.iter().cloned().chain(rest).collect())
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn no_item_however_built_answers_5xx_or_stores_a_rejected_item() {
    let rt = runtime();
    let h: Harness = rt.block_on(async { harness() });
    let token = rt.block_on(h.pair());
    let mut runner = TestRunner::new(Config {
        cases: 160,
        ..Config::default()
    });
    let n = std::cell::Cell::new(0u64);
    runner
        .run(&batch_case(), |mangled| {
            n.set(n.get() + 1);
            // A valid item with content of its own, beside the mangled ones.
            let valid = turn_value("prop-valid", &format!("a valid turn number {}", n.get()));
            let mut items = vec![valid];
            items.extend(mangled);
            let before = h.count("SELECT count(*) FROM messages");
            let r = rt.block_on(h.send(&token, &items));
            prop_assert!(
                !r.status.is_server_error(),
                "{} for {items:?}: {}",
                r.status,
                r.body
            );
            prop_assert_eq!(r.status, StatusCode::OK, "{}", r.body);
            let results = r.body["results"].as_array().unwrap();
            prop_assert_eq!(results.len(), items.len());
            prop_assert_eq!(
                &results[0]["status"],
                "stored",
                "the valid item lands: {}",
                r.body
            );
            let stored = results.iter().filter(|x| x["status"] == "stored").count() as i64;
            for x in results.iter().filter(|x| x["status"] == "rejected") {
                prop_assert!(x["message_id"].is_null(), "{x}");
                prop_assert!(
                    x["error"]["code"].is_string() && x["error"]["hint"].is_string(),
                    "{x}"
                );
            }
            let after = h.count("SELECT count(*) FROM messages");
            prop_assert_eq!(
                after - before,
                stored,
                "only stored items add rows: {}",
                r.body
            );
            Ok(())
        })
        .map_err(|e| TestCaseError::fail(e.to_string()))
        .unwrap();
}

/// Capture reports with every field arbitrary JSON (or missing), beside a valid one: never a 5xx, and when the
/// body as a whole is well-formed, the valid report lands.
#[test]
fn no_capture_report_answers_5xx() {
    let rt = runtime();
    let h: Harness = rt.block_on(async { harness() });
    let token = rt.block_on(h.pair());
    let report = (
        prop::option::of(prop_oneof![
            "browser-ext:[a-z]{1,12}".prop_map(Value::from),
            any_json()
        ]),
        prop::option::of(prop_oneof![
            rfc3339_like().prop_map(Value::from),
            Just(Value::Null),
            any_json()
        ]),
        prop::option::of(any_json()),
    )
        .prop_map(|(surface, since, rule)| {
            let mut m = Map::new();
            for (k, v) in [("surface", surface), ("stale_since", since), ("rule", rule)] {
                if let Some(v) = v {
                    m.insert(k.to_owned(), v);
                }
            }
            Value::Object(m)
        });
    let strategy = prop::collection::vec(prop_oneof![3 => report, 1 => any_json()], 0..4);
    let mut runner = TestRunner::new(Config {
        cases: 200,
        ..Config::default()
    });
    runner
        .run(&strategy, |reports| {
            let valid = json!({"surface": "browser-ext:pi", "stale_since": "2026-11-22T09:59:00Z"});
            let mut all = vec![valid];
            all.extend(reports);
            let body = json!({ "reports": all }).to_string();
            let r = rt.block_on(h.post("/v1/me/capture-reports", Some(&token), body.clone()));
            prop_assert!(
                !r.status.is_server_error(),
                "{body}: {} {}",
                r.status,
                r.body
            );
            if r.status == StatusCode::OK {
                prop_assert_eq!(&r.body["results"][0]["status"], "stored", "{}", r.body);
            } else {
                prop_assert!(r.body["code"].is_string() && r.body["hint"].is_string());
            }
            let health = rt.block_on(h.get("/v1/me/capture-health", Some(&token)));
            prop_assert_eq!(health.status, StatusCode::OK, "{}", health.body);
            Ok(())
        })
        .map_err(|e| TestCaseError::fail(e.to_string()))
        .unwrap();
}

/// Values a query parameter may hold: anything printable, spans of any size, RFC 3339-shaped times.
fn param_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,20}",
        "[0-9]{1,25}(s|m|min|h|d|w|y|)",
        rfc3339_like(),
        "-?[0-9]{1,22}",
        Just(String::new()),
    ]
}

#[test]
fn no_query_string_answers_5xx() {
    let rt = runtime();
    let h: Harness = rt.block_on(async { harness() });
    let token = rt.block_on(h.pair());
    rt.block_on(h.send(&token, &[turn_value("q", "the borrow checker")]));
    let names = [
        "q", "k", "surface", "thread", "role", "since", "until", "entity", "events",
    ];
    let strategy = prop::collection::vec((0..names.len(), param_value()), 0..5);
    let mut runner = TestRunner::new(Config {
        cases: 200,
        ..Config::default()
    });
    runner
        .run(&strategy, |params| {
            let qs: Vec<String> = params
                .iter()
                .map(|(i, v)| format!("{}={}", names[*i], encode(v)))
                .collect();
            let path = format!("/v1/query?{}", qs.join("&"));
            let r = rt.block_on(h.get(&path, Some(&token)));
            prop_assert!(
                !r.status.is_server_error(),
                "{path}: {} {}",
                r.status,
                r.body
            );
            if r.status != StatusCode::OK {
                prop_assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}: {}", path, r.body);
                prop_assert_eq!(&r.body["code"], "bad_query");
                prop_assert!(r.body["hint"].is_string());
            }
            Ok(())
        })
        .map_err(|e| TestCaseError::fail(e.to_string()))
        .unwrap();
}

#[test]
fn no_events_query_answers_5xx() {
    let rt = runtime();
    let h: Harness = rt.block_on(async { harness() });
    let token = rt.block_on(h.pair());
    let names = [
        "kind", "source", "thread", "since", "until", "limit", "cursor",
    ];
    let strategy = prop::collection::vec((0..names.len(), param_value()), 0..5);
    let mut runner = TestRunner::new(Config {
        cases: 200,
        ..Config::default()
    });
    runner
        .run(&strategy, |params| {
            let mut seen = std::collections::HashSet::new();
            let qs: Vec<String> = params
                .iter()
                .filter(|(i, _)| seen.insert(*i))
                .map(|(i, v)| format!("{}={}", names[*i], encode(v)))
                .collect();
            let path = format!("/v1/events?{}", qs.join("&"));
            let r = rt.block_on(h.get(&path, Some(&token)));
            prop_assert!(
                !r.status.is_server_error(),
                "{path}: {} {}",
                r.status,
                r.body
            );
            if r.status != StatusCode::OK {
                prop_assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}: {}", path, r.body);
                prop_assert_eq!(&r.body["code"], "bad_query");
                prop_assert!(r.body["hint"].is_string());
            }
            Ok(())
        })
        .map_err(|e| TestCaseError::fail(e.to_string()))
        .unwrap();
}

/// Percent-encodes every byte outside the unreserved set.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[test]
fn the_reported_cases_are_rejected_one_by_one() {
    let rt = runtime();
    let h: Harness = rt.block_on(async { harness() });
    let token = rt.block_on(h.pair());
    for (field, value) in [
        ("captured_at", "9999-12-31T23:59:59-23:59"),
        ("occurred_at", "9999-12-31T23:59:59-23:59"),
        ("captured_at", "0000-01-01T00:00:00+23:59"),
    ] {
        let valid = turn_value("reported", &format!("valid beside {field} {value}"));
        let mut odd = turn_value("reported", &format!("odd {field} {value}"));
        odd["turn"][field] = json!(value);
        let r = rt.block_on(h.send(&token, &[valid, odd]));
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(r.body["results"][0]["status"], "stored", "{}", r.body);
        assert_eq!(r.body["results"][1]["status"], "rejected", "{}", r.body);
        assert_eq!(
            r.body["results"][1]["error"]["code"], "bad_timestamp",
            "{}",
            r.body
        );
    }
    assert_eq!(
        h.count(
            "SELECT count(*) FROM messages WHERE captured_at NOT LIKE '____-__-__T__:__:__.___Z'"
        ),
        0,
        "every stored time is in the fixed-width form"
    );
    for since in [
        "99999999d",
        "9223372036854775807d",
        "999999999999w",
        "+999999-01-01T00:00:00Z",
    ] {
        let r = rt.block_on(h.get(
            &format!("/v1/query?q=x&since={}", encode(since)),
            Some(&token),
        ));
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{since}: {}", r.body);
        assert_eq!(r.body["code"], "bad_query");
        assert!(
            r.body["message"].as_str().unwrap().contains("10,000 years"),
            "{}",
            r.body
        );
    }
}
