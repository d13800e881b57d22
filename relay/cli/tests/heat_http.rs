//! Heat end to end against a real `personkit serve`: new turns, a thread opened in the dashboard (also from a
//! search hit) and an agent's MCP `get_thread` count as uses; `?tier=` narrows the thread listings of the read
//! API and the dashboard; `personkit heat list|recompute`; forgetting a thread drops its heat; an entity viewed in
//! the dashboard or read by an agent is used too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_shared::wire::Role;
use personkit_testkit::{Relay, temp_db, thread_id, turn};
use serde_json::{Value, json};

fn ids(v: &Value) -> Vec<String> {
    v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect()
}

fn heat_rows(relay: &Relay) -> Vec<Value> {
    relay
        .cli_json(&["heat", "list", "--json"])
        .as_array()
        .unwrap()
        .clone()
}

fn row<'a>(rows: &'a [Value], id: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no heat row for {id}: {rows:?}"))
}

fn sign_in(relay: &Relay) -> String {
    let link = relay.cli_json(&["open", "--json"]);
    let url = link["url"].as_str().unwrap();
    let signed = relay.http.get_with(&url[relay.base.len()..], &[]);
    assert_eq!(signed.status, 200, "{}", signed.body);
    signed
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

#[test]
fn uses_heat_threads_and_tiers_filter_the_listings() {
    let (_tmp, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let token = relay.pair_printed("heat-test");
    let s = "browser-ext:claude";
    let items = vec![
        turn(s, "often", Role::User, "lentil soup with cumin", Some(0)),
        turn(
            s,
            "often",
            Role::Assistant,
            "toast the cumin first",
            Some(1),
        ),
        turn(s, "seldom", Role::User, "lentil salad for lunch", Some(0)),
    ];
    assert_eq!(relay.http.send_batch(&token, &items)["stored"], 3);
    let (often, seldom) = (thread_id(s, "often"), thread_id(s, "seldom"));

    // A batch is one use of each thread it added to, not one per turn.
    let rows = heat_rows(&relay);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(row(&rows, &often)["accesses"], 1);
    assert_eq!(row(&rows, &often)["tier"], "cold");
    let cold = relay.http.get("/v1/threads?tier=cold", Some(&token));
    assert_eq!(cold.status, 200, "{}", cold.body);
    assert_eq!(ids(&cold.json()).len(), 2);

    // Opened in the dashboard five times (once from a search hit), read by an agent twice: eight uses, hot.
    let cookie = sign_in(&relay);
    for path in [
        format!("/threads/{often}"),
        format!("/threads/{often}?from=search"),
        format!("/threads/{often}"),
        format!("/threads/{often}"),
        format!("/threads/{often}"),
    ] {
        let page = relay.http.get_with(&path, &[("cookie", &cookie)]);
        assert_eq!(page.status, 200, "{path}: {}", page.body);
    }
    let search = relay
        .http
        .get_with("/search?q=cumin", &[("cookie", &cookie)]);
    assert!(
        search
            .body
            .contains(&format!("/threads/{often}?from=search#turn-")),
        "a hit links with from=search: {}",
        search.body
    );
    let bad_from = relay.http.get_with(
        &format!("/threads/{often}?from=mars"),
        &[("cookie", &cookie)],
    );
    assert_eq!(bad_from.status, 400);
    let bearer = format!("Bearer {token}");
    let mcp = |tool: &str, arguments: Value| -> Value {
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        let r = relay.http.post_with(
            "/mcp",
            &[
                ("accept", "application/json, text/event-stream"),
                ("content-type", "application/json"),
                ("authorization", &bearer),
            ],
            call.to_string().as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()["result"].clone()
    };
    for _ in 0..2 {
        let r = mcp("get_thread", json!({"thread_id": often}));
        assert!(r.to_string().contains("toast the cumin"), "{r}");
    }
    let rows = heat_rows(&relay);
    assert_eq!(row(&rows, &often)["accesses"], 8, "{rows:?}");
    assert_eq!(row(&rows, &often)["tier"], "hot", "{rows:?}");
    assert_eq!(row(&rows, &seldom)["tier"], "cold");

    // The read API and the dashboard list by tier.
    let hot = relay.http.get("/v1/threads?tier=hot", Some(&token)).json();
    assert_eq!(ids(&hot), [often.as_str()]);
    assert_eq!(hot["page"]["total"], 1);
    let cold = relay.http.get("/v1/threads?tier=cold", Some(&token)).json();
    assert_eq!(ids(&cold), [seldom.as_str()]);
    assert!(ids(&relay.http.get("/v1/threads?tier=warm", Some(&token)).json()).is_empty());
    let listed = mcp("list_threads", json!({"tier": "hot"})).to_string();
    assert!(
        listed.contains(&often) && !listed.contains(&seldom),
        "{listed}"
    );
    let refused = mcp("list_threads", json!({"tier": "boiling"}));
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        refused.to_string().contains("hot, warm or cold"),
        "{refused}"
    );
    let bad = relay.http.get("/v1/threads?tier=boiling", Some(&token));
    bad.assert_error(400, "bad_query");
    assert!(bad.json()["hint"].as_str().unwrap().contains("tier="));
    let page = relay
        .http
        .get_with("/threads?tier=hot", &[("cookie", &cookie)]);
    assert_eq!(page.status, 200);
    assert!(page.body.contains(&format!("/threads/{often}")));
    assert!(!page.body.contains(&format!("/threads/{seldom}")));
    assert!(
        page.body.contains(r#"<option value="hot" selected>"#),
        "{}",
        page.body
    );
    let page = relay
        .http
        .get_with("/threads?tier=lukewarm", &[("cookie", &cookie)]);
    assert_eq!(page.status, 400);

    // The CLI lists by tier and computes again on demand.
    let listed = relay.cli_json(&["heat", "list", "--tier", "hot", "--json"]);
    assert_eq!(listed.as_array().unwrap().len(), 1);
    let done = relay.cli_json(&["heat", "recompute", "--json"]);
    assert_eq!(done["recomputed"], 2);
    let table = relay.cli(&["heat", "list", "--tier", "warm"]);
    assert!(table.status.success());
    assert!(table.stdout.contains("no warm records"), "{}", table.stdout);

    // Forgetting a thread takes its heat with it.
    let gone = relay
        .http
        .delete(&format!("/v1/threads/{often}"), Some(&token));
    assert_eq!(gone.status, 200, "{}", gone.body);
    let rows = heat_rows(&relay);
    assert!(rows.iter().all(|r| r["id"] != often.as_str()), "{rows:?}");
    assert_eq!(rows.len(), 1);

    // Viewing an entity — its dashboard page, an agent's `entity` call — is a use of it.
    relay.cli_json(&["graph", "build", "--json"]);
    let listed = relay.cli_json(&["graph", "list", "--json"]);
    let entity = &listed.as_array().unwrap()[0];
    let (eid, name) = (
        entity["id"].as_str().unwrap().to_owned(),
        entity["name"].as_str().unwrap().to_owned(),
    );
    for _ in 0..2 {
        let page = relay
            .http
            .get_with(&format!("/entities/{eid}"), &[("cookie", &cookie)]);
        assert_eq!(page.status, 200, "{}", page.body);
    }
    let r = mcp("entity", json!({"name": name}));
    assert_eq!(r["isError"], false, "{r}");
    let used = relay.cli_json(&["heat", "list", "--kind", "entity", "--json"]);
    let used = used.as_array().unwrap();
    assert_eq!(used.len(), 1, "{used:?}");
    assert_eq!(used[0]["id"], eid.as_str());
    assert_eq!(used[0]["accesses"], 3, "{used:?}");
}
