//! The entity graph end to end, on a real relay process and corpus file: web threads sent over `POST
//! /v1/observations` (URLs and a model id in their turns) and three Claude Code sessions in project folders read by
//! `personkit harvest --once`; `personkit graph build` derives what they certainly say; the CLI, the HTTP reads and
//! the MCP tools `entity` and `related` (the SDK's client over `personkit mcp`) answer from it; look-alike projects
//! are proposed and stay apart until `graph merge`; forgetting a thread takes what it alone supported.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_shared::wire::Role;
use personkit_testkit::{Relay, claude_code_line, cli, cli_json, temp_db, turn_at};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};

fn stored(t: time::OffsetDateTime) -> String {
    personkit_store::clock::fmt_time(t)
}

fn names(list: &Value) -> Vec<String> {
    let mut v: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            e.get("entity")
                .unwrap_or(e)
                .get("name")
                .and_then(Value::as_str)
                .unwrap()
                .to_owned()
        })
        .collect();
    v.sort();
    v
}

fn relation_lines(view: &Value) -> Vec<String> {
    let mut v: Vec<String> = view["relations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {} {}",
                r["subject"]["name"].as_str().unwrap(),
                r["predicate"].as_str().unwrap(),
                r["object"]["name"].as_str().unwrap()
            )
        })
        .collect();
    v.sort();
    v
}

/// A relay whose corpus holds two web threads and three harvested sessions (projects orbit, orbitweb, kite).
fn relay_with_graph() -> (tempfile::TempDir, Relay, String) {
    let (dir, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let token = relay.pair_printed("laptop");
    let now = time::OffsetDateTime::now_utc();
    let at = stored(now - time::Duration::minutes(5));
    let items = vec![
        turn_at(
            "browser-ext:chatgpt",
            "c-deploy",
            Role::User,
            "how do I deploy? see https://docs.rs/tokio and https://github.com/ada/orbit",
            Some(0),
            None,
            &at,
        ),
        turn_at(
            "browser-ext:chatgpt",
            "c-deploy",
            Role::Assistant,
            "Answered by gpt-4o: use a systemd unit.",
            Some(1),
            None,
            &at,
        ),
        turn_at(
            "browser-ext:claude",
            "c-soup",
            Role::User,
            "a soup like https://www.bbc.co.uk/food/lentil",
            Some(0),
            None,
            &at,
        ),
    ];
    let r = relay.http.send_batch(&token, &items);
    assert_eq!(r["stored"], 3, "{r}");

    let home = dir.path().join("home");
    for (folder, session, text) in [
        (
            "-home-ada-src-orbit",
            "11111111-1111-4111-8111-111111111111",
            "orbit: read https://docs.rs/serde first",
        ),
        (
            "-home-ada-src-orbitweb",
            "22222222-2222-4222-8222-222222222222",
            "the orbit web front end",
        ),
        (
            "-home-ada-src-kite",
            "33333333-3333-4333-8333-333333333333",
            "kite's parser",
        ),
    ] {
        let dir = home.join(".claude/projects").join(folder);
        std::fs::create_dir_all(&dir).unwrap();
        let lines = [
            claude_code_line(session, 0, text, &at),
            claude_code_line(session, 1, "done", &at),
        ];
        std::fs::write(
            dir.join(format!("{session}.jsonl")),
            lines.join("\n") + "\n",
        )
        .unwrap();
    }
    assert!(
        cli(&db, &["harvest", "enable", "claude-code"])
            .status
            .success()
    );
    let home_s = home.display().to_string();
    let pass = cli_json(&db, &["harvest", "--once", "--home", &home_s, "--json"]);
    assert!(pass.to_string().contains("\"stored\":6"), "{pass}");
    (dir, relay, token)
}

#[test]
fn the_graph_is_derived_read_merged_and_forgotten() {
    let (_dir, relay, token) = relay_with_graph();
    let built = relay.cli_json(&["graph", "build", "--json"]);
    // `serve`'s own job may have read some turns first: together they read all nine.
    assert_eq!(built["cursor"], 9, "{built}");
    assert_eq!(built["more"], false, "{built}");
    let again = relay.cli_json(&["graph", "build", "--json"]);
    assert_eq!(again["messages"], 0, "the cursor remembers: {again}");

    // The harvested tool, its maker and the projects that use it; any spelling of its name finds it.
    let cc = relay.cli_json(&["entity", "claude-code", "--json"]);
    assert_eq!(cc["entity"]["name"], "Claude Code", "{cc}");
    assert_eq!(cc["entity"]["kind"], "tool");
    assert_eq!(cc["thread_count"], 3, "{cc}");
    assert_eq!(
        relation_lines(&cc),
        [
            "Claude Code made_by Anthropic",
            "kite uses Claude Code",
            "orbit uses Claude Code",
            "orbitweb uses Claude Code",
        ]
    );
    let orbit = relay.cli_json(&["entity", "orbit", "--json"]);
    assert!(
        relation_lines(&orbit).contains(&"orbit mentions docs.rs".to_owned()),
        "{orbit}"
    );
    let text = relay.cli(&["entity", "Claude Code"]);
    assert!(text.status.success());
    assert!(
        text.stdout.contains("Claude Code (tool)"),
        "{}",
        text.stdout
    );
    let missing = relay.cli(&["entity", "zeppelin"]);
    assert!(!missing.status.success());
    assert!(missing.stderr.contains("hint:"), "{}", missing.stderr);

    // Web threads: the product, its maker, the model named and the sites linked.
    let gpt = relay.cli_json(&["entity", "gpt-4o", "--json"]);
    assert_eq!(gpt["entity"]["kind"], "model");
    assert_eq!(relation_lines(&gpt), ["gpt-4o made_by OpenAI"]);
    let sites = relay.cli_json(&["graph", "list", "--kind", "site", "--json"]);
    assert_eq!(
        names(&sites),
        ["bbc.co.uk", "docs.rs", "github.com"],
        "{sites}"
    );

    // HTTP reads.
    let h = &relay.http;
    let found = h.get("/v1/entities?q=anthro", Some(&token)).json();
    assert_eq!(names(&found["entities"]), ["Anthropic"]);
    let orbit_id = orbit["entity"]["id"].as_str().unwrap().to_owned();
    let kite_id = relay.cli_json(&["entity", "kite", "--json"])["entity"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let one = h
        .get(&format!("/v1/entities/{orbit_id}"), Some(&token))
        .json();
    assert_eq!(one["entity"]["name"], "orbit");
    let n1 = h
        .get(
            &format!("/v1/entities/{orbit_id}/neighbours?depth=1"),
            Some(&token),
        )
        .json();
    assert_eq!(names(&n1["entities"]), ["Claude Code", "docs.rs"]);
    let n2 = h
        .get(
            &format!("/v1/entities/{orbit_id}/neighbours?depth=2"),
            Some(&token),
        )
        .json();
    assert_eq!(
        names(&n2["entities"]),
        ["Anthropic", "Claude Code", "docs.rs", "kite", "orbitweb"]
    );
    h.get(
        &format!("/v1/entities/{orbit_id}/neighbours?depth=3"),
        Some(&token),
    )
    .assert_error(400, "bad_query");
    h.get("/v1/entities?kind=planet", Some(&token))
        .assert_error(400, "bad_query");
    h.get("/v1/entities?colour=red", Some(&token))
        .assert_error(400, "unknown_parameter");
    h.get("/v1/entities/0000", Some(&token))
        .assert_error(404, "not_found");
    let path = h
        .get(
            &format!("/v1/graph/path?from={orbit_id}&to={kite_id}"),
            Some(&token),
        )
        .json();
    let steps: Vec<String> = path["path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {} {}",
                e["subject"]["name"], e["predicate"], e["object"]["name"]
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            "\"orbit\" \"uses\" \"Claude Code\"",
            "\"kite\" \"uses\" \"Claude Code\""
        ]
    );
    h.get(&format!("/v1/graph/path?from={orbit_id}"), Some(&token))
        .assert_error(400, "bad_query");
    h.get(
        &format!("/v1/graph/path?from={orbit_id}&to={kite_id}&depth=5"),
        Some(&token),
    )
    .assert_error(400, "bad_query");
    assert_eq!(h.get("/v1/entities", None).status, 401);
    // The subgraph of a thread, and of the day everything was captured on.
    let deploy = personkit_testkit::thread_id("browser-ext:chatgpt", "c-deploy");
    let sub = h
        .get(&format!("/v1/graph/subgraph?thread={deploy}"), Some(&token))
        .json();
    assert_eq!(
        names(&sub["entities"]),
        ["ChatGPT", "OpenAI", "docs.rs", "github.com", "gpt-4o"],
        "{sub}"
    );
    let today = &built_day(&relay);
    let day = h
        .get(&format!("/v1/graph/subgraph?day={today}"), Some(&token))
        .json();
    assert!(
        names(&day["entities"]).contains(&"kite".to_owned()),
        "{day}"
    );
    h.get("/v1/graph/subgraph?day=yesterday", Some(&token))
        .assert_error(400, "bad_query");
    h.get(
        &format!("/v1/graph/subgraph?day={today}&thread={deploy}"),
        Some(&token),
    )
    .assert_error(400, "bad_query");
    // An agent's token reads the graph and may not build it.
    let agent = relay.cli_json(&["agents", "add", "reader", "--json"]);
    let agent = agent["token"].as_str().unwrap();
    let read = h.get("/v1/entities?q=kite", Some(agent)).json();
    assert_eq!(names(&read["entities"]), ["kite"]);
    h.post("/v1/graph/build", Some(agent), b"")
        .assert_error(403, "read_only_token");
    assert_eq!(h.post("/v1/graph/build", Some(&token), b"").status, 200);

    // Search: entity ids restrict the candidates to the threads linked to them.
    let all = h.get("/v1/query?q=docs", Some(&token)).json();
    let surfaces = |v: &Value| -> Vec<String> {
        let mut s: Vec<String> = v["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["surface"].as_str().unwrap().to_owned())
            .collect();
        s.sort();
        s.dedup();
        s
    };
    assert_eq!(
        surfaces(&all),
        ["browser-ext:chatgpt", "harvest:claude-code"],
        "{all}"
    );
    let only = h
        .get(&format!("/v1/query?q=docs&entity={orbit_id}"), Some(&token))
        .json();
    assert_eq!(surfaces(&only), ["harvest:claude-code"], "{only}");
    let orbit_threads: Vec<&str> = orbit["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["thread_id"].as_str().unwrap())
        .collect();
    assert!(
        only["hits"]
            .as_array()
            .unwrap()
            .iter()
            .all(|hit| orbit_threads.contains(&hit["thread_id"].as_str().unwrap())),
        "{only}"
    );

    // MCP, through the SDK's client and `personkit mcp`.
    mcp_entity_and_related(&relay);

    // Look-alike projects are proposed, not merged, until the user merges them.
    let c = relay.cli_json(&["graph", "candidates", "--json"]);
    let pairs: Vec<(String, String)> = c
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let mut p = [
                c["a"]["name"].as_str().unwrap().to_owned(),
                c["b"]["name"].as_str().unwrap().to_owned(),
            ];
            p.sort();
            (p[0].clone(), p[1].clone())
        })
        .collect();
    assert!(pairs.contains(&("orbit".into(), "orbitweb".into())), "{c}");
    assert!(
        c.as_array()
            .unwrap()
            .iter()
            .all(|c| c["similarity"].as_f64().unwrap() > 0.4)
    );
    let web = relay.cli_json(&["entity", "orbitweb", "--json"]);
    assert_eq!(
        web["entity"]["name"], "orbitweb",
        "a proposal merges nothing"
    );
    let merged = relay.cli_json(&["graph", "merge", "orbit", "orbitweb", "--json"]);
    assert_eq!(merged["state"], "merged");
    let after = relay.cli_json(&["entity", "orbitweb", "--json"]);
    assert_eq!(
        after["entity"]["name"], "orbit",
        "the merged name finds the kept entity"
    );
    assert_eq!(after["thread_count"], 2);

    // Forgetting the soup thread takes its site and the product only it used; what others support stays.
    let soup = personkit_testkit::thread_id("browser-ext:claude", "c-soup");
    let r = h.delete(&format!("/v1/threads/{soup}"), Some(&token));
    assert_eq!(r.status, 200, "{}", r.body);
    let sites = relay.cli_json(&["graph", "list", "--kind", "site", "--json"]);
    assert_eq!(names(&sites), ["docs.rs", "github.com"]);
    let tools = relay.cli_json(&["graph", "list", "--kind", "tool", "--json"]);
    assert_eq!(names(&tools), ["ChatGPT", "Claude Code"], "{tools}");
    let orgs = relay.cli_json(&["graph", "list", "--kind", "organisation", "--json"]);
    assert_eq!(names(&orgs), ["Anthropic", "OpenAI"]);
    let rebuilt = relay.cli_json(&["graph", "build", "--json"]);
    assert_eq!(rebuilt["redone"], 0, "the whole thread went: {rebuilt}");
}

/// The UTC day the test's turns were captured on (five minutes before it started).
fn built_day(_relay: &Relay) -> String {
    let at = time::OffsetDateTime::now_utc() - time::Duration::minutes(5);
    stored(at)[..10].to_owned()
}

async fn call(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &str,
    args: Value,
) -> CallToolResult {
    let Value::Object(map) = args else {
        panic!("arguments must be an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(map))
        .await
        .unwrap_or_else(|e| panic!("{tool}: protocol error {e}"))
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn mcp_entity_and_related(relay: &Relay) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut cmd = tokio::process::Command::new(personkit_testkit::bin());
        cmd.arg("mcp")
            .arg("--db")
            .arg(&relay.db)
            .env("HOME", relay.db.parent().unwrap())
            .env_remove("PERSONKIT_DB");
        let client = ()
            .serve_with_lifecycle(
                TokioChildProcess::new(cmd).unwrap(),
                ClientLifecycleMode::Initialize,
            )
            .await
            .unwrap();
        let r = call(&client, "entity", json!({"name": "claude code"})).await;
        assert_ne!(r.is_error, Some(true), "{}", text(&r));
        let v = r.structured_content.clone().unwrap();
        assert_eq!(v["view"]["entity"]["name"], "Claude Code");
        assert_eq!(v["truncated"], false);
        assert!(text(&r).contains("made_by Anthropic"), "{}", text(&r));
        // Within a small budget the answer is cut and says so.
        let small = call(
            &client,
            "entity",
            json!({"name": "Claude Code", "max_chars": 1000}),
        )
        .await;
        let sv = small.structured_content.clone().unwrap();
        assert!(
            serde_json::to_string(&sv).unwrap().chars().count() <= 1000,
            "{sv}"
        );
        assert_eq!(sv["truncated"], true);
        let rel = call(&client, "related", json!({"name": "orbit", "depth": 2})).await;
        assert_ne!(rel.is_error, Some(true), "{}", text(&rel));
        let g = rel.structured_content.clone().unwrap();
        assert!(
            names(&g["graph"]["entities"]).contains(&"Anthropic".to_owned()),
            "{g}"
        );
        let deep = call(&client, "related", json!({"name": "orbit", "depth": 3})).await;
        assert_eq!(deep.is_error, Some(true));
        assert!(text(&deep).contains("1 or 2"), "{}", text(&deep));
        let none = call(&client, "entity", json!({"name": "zeppelin"})).await;
        assert_eq!(none.is_error, Some(true));
        assert!(text(&none).contains("no entity"), "{}", text(&none));
        let bad = call(&client, "entity", json!({"name": "x", "colour": 1})).await;
        assert_eq!(bad.is_error, Some(true));
        client.cancel().await.unwrap();
    });
}

/// `graph extract`, `graph proposals`, `graph approve` and `graph reject` through the binary. The model is a
/// stand-in for an OpenAI-compatible server (a remote model cannot run here) that names what it is sent. Without a
/// model, `graph extract` says what to configure; a bad state or id says what to do instead.
#[test]
fn names_a_model_found_are_decided_from_the_command_line() {
    use personkit_testkit::standin::{StandIn, chat};
    let (_dir, db) = temp_db();
    let mut conn = personkit_store::db::open(&db).unwrap();
    let items = [turn_at(
        "browser-ext:claude",
        "trip",
        Role::User,
        "Book the Lisbon office for the Acme Corporation review.",
        Some(0),
        None,
        "2026-11-20T09:00:00.000Z",
    )];
    personkit_store::ingest::ingest_batch(
        &mut conn,
        &personkit_store::ingest::Origin {
            device_id: "dev".into(),
        },
        &items,
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    drop(conn);

    let none = cli(&db, &["graph", "extract"]);
    assert!(!none.status.success());
    assert!(
        none.stderr.contains("no language model is configured") && none.stderr.contains("hint:"),
        "{}",
        none.stderr
    );

    let server = StandIn::start_replies(|_, seen| {
        let text = chat::messages_text(seen);
        let mut names = Vec::new();
        for (name, kind) in [("Lisbon", "place"), ("Acme Corporation", "organisation")] {
            if text.contains(name) {
                names.push(json!({"name": name, "kind": kind, "turn": 1, "confidence": "high"}));
            }
        }
        chat::completion(&json!({ "names": names }).to_string())
    });
    std::fs::write(
        db.parent().unwrap().join("config.toml"),
        format!(
            "[llm]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"stand-in\"\n",
            server.base
        ),
    )
    .unwrap();
    let r = cli_json(&db, &["graph", "extract", "--json"]);
    assert_eq!(
        (r["calls"].as_u64(), r["proposed"].as_u64()),
        (Some(1), Some(2)),
        "{r}"
    );
    let waiting = cli_json(&db, &["graph", "proposals", "--json"]);
    assert_eq!(names(&waiting), ["Acme Corporation", "Lisbon"]);
    let id_of = |name: &str| {
        waiting
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (acme, lisbon) = (id_of("Acme Corporation"), id_of("Lisbon"));
    let approved = cli_json(&db, &["graph", "approve", &acme, "--json"]);
    assert_eq!(approved[0]["state"], "approved", "{approved}");
    let rejected = cli(&db, &["graph", "reject", &lisbon]);
    assert!(rejected.status.success(), "{}", rejected.stderr);
    assert!(
        rejected.stdout.contains("will not be proposed again"),
        "{}",
        rejected.stdout
    );
    let orgs = cli_json(&db, &["graph", "list", "--kind", "organisation", "--json"]);
    assert!(
        names(&orgs).contains(&"Acme Corporation".to_owned()),
        "{orgs}"
    );
    let places = cli_json(&db, &["graph", "list", "--kind", "place", "--json"]);
    assert!(
        names(&places).is_empty(),
        "a rejected name stays out: {places}"
    );
    let gone = cli_json(
        &db,
        &["graph", "proposals", "--state", "rejected", "--json"],
    );
    assert_eq!(names(&gone), ["Lisbon"]);
    let again = cli_json(&db, &["graph", "extract", "--json"]);
    assert_eq!(again["calls"], 0, "nothing new to read: {again}");

    let bad = cli(&db, &["graph", "proposals", "--state", "maybe"]);
    assert!(
        !bad.status.success() && bad.stderr.contains("hint:"),
        "{}",
        bad.stderr
    );
    let missing = cli(&db, &["graph", "approve", "nope"]);
    assert!(
        !missing.status.success() && missing.stderr.contains("graph proposals"),
        "{}",
        missing.stderr
    );
}
