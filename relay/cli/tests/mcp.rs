//! The MCP server end to end: the SDK's own client (rmcp) drives the real `personkit mcp` process over stdio and
//! a real relay's `/mcp` over Streamable HTTP, on a corpus built through `POST /v1/observations`, speaking both
//! the current protocol revision (2026-07-28, no handshake) and the previous one (2025-11-25, `initialize`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_shared::wire::Role;
use personkit_testkit::{Relay, temp_db, turn_at};
use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};

const GPT: &str = "browser-ext:chatgpt";
const CLAUDE: &str = "browser-ext:claude";
const LONG_CHARS: usize = 30_000;

type Client = RunningService<RoleClient, ()>;

/// Both lifecycles a client may use: the current revision and the previous one's handshake.
fn lifecycles() -> Vec<(&'static str, ClientLifecycleMode)> {
    vec![
        (
            "2026-07-28",
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        ),
        ("2025-11-25 initialize", ClientLifecycleMode::Initialize),
    ]
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn at(minute: u32) -> String {
    // Recent enough for green lights: within the last minutes.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    personkit_testkit::rfc3339(now - 600 + u64::from(minute) * 10)
}

/// A relay with a paired device and a corpus: a ChatGPT thread about a Postgres migration (one answer edited,
/// one very long answer) and a Claude thread about soup.
fn relay_with_corpus() -> (tempfile::TempDir, Relay, String) {
    let (dir, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let token = relay.pair_printed("laptop");
    let titled = |mut v: Value, title: &str, url: &str| {
        v["title"] = json!(title);
        v["url"] = json!(url);
        v
    };
    let pg = |role, text: &str, ord, m| {
        titled(
            turn_at(GPT, "pg", role, text, Some(ord), None, &at(m)),
            "Postgres migration plan",
            "https://chatgpt.com/c/pg",
        )
    };
    let long = format!(
        "Appendix: {}",
        "the rollback steps in detail. ".repeat(LONG_CHARS / 29 + 1)
    );
    let items = vec![
        pg(
            Role::User,
            "what did we decide about the postgres migration?",
            0,
            0,
        ),
        pg(Role::Assistant, "draft: migrate in one go", 1, 1),
        pg(
            Role::Assistant,
            "We decided to migrate the postgres cluster table by table with logical replication.",
            1,
            2,
        ),
        pg(Role::User, "and the rollback?", 2, 3),
        pg(Role::Assistant, &long, 3, 4),
        titled(
            turn_at(
                CLAUDE,
                "soup",
                Role::User,
                "a recipe for lentil soup",
                Some(0),
                None,
                &at(5),
            ),
            "Soup",
            "https://claude.ai/chat/soup",
        ),
    ];
    let r = relay.http.send_batch(&token, &items);
    assert_eq!(r["stored"], 6, "{r}");
    (dir, relay, token)
}

async fn call(client: &Client, tool: &str, args: Value) -> CallToolResult {
    let Value::Object(map) = args else {
        panic!("arguments must be an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(map))
        .await
        .unwrap_or_else(|e| panic!("{tool}: protocol error {e}"))
}

fn ok(r: &CallToolResult) -> Value {
    assert_ne!(r.is_error, Some(true), "tool error: {:?}", text(r));
    r.structured_content.clone().expect("structured content")
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn tool_error(r: &CallToolResult, contains: &str) {
    assert_eq!(
        r.is_error,
        Some(true),
        "expected a tool error, got {:?}",
        r.structured_content
    );
    let t = text(r);
    assert!(t.contains(contains), "error text {t:?} lacks {contains:?}");
}

/// Every tool, called the way an agent would, checked against the corpus the relay was sent.
async fn exercise(client: &Client) {
    let tools = client.list_all_tools().await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "corpus_health",
            "entity",
            "get_context",
            "get_knowledge",
            "get_message",
            "get_thread",
            "list_threads",
            "propose_knowledge",
            "related",
            "search"
        ]
    );
    for t in &tools {
        assert!(t.output_schema.is_some(), "{} has an output schema", t.name);
        assert!(
            t.description.as_ref().is_some_and(|d| d.len() < 140),
            "{} terse description",
            t.name
        );
        // Every tool reads only, but the one that files a proposal for the user to decide on.
        assert_eq!(
            t.annotations.as_ref().and_then(|a| a.read_only_hint),
            Some(t.name != "propose_knowledge"),
            "{}",
            t.name
        );
    }
    let search = tools.iter().find(|t| t.name == "search").unwrap();
    assert!(
        search
            .input_schema
            .get("properties")
            .and_then(|p| p.get("since"))
            .is_some()
    );

    // search: finds the decision, says why, carries ids.
    let r = call(
        client,
        "search",
        json!({"query": "postgres migration decision", "k": 5}),
    )
    .await;
    let v = ok(&r);
    let hits = v["hits"].as_array().unwrap();
    assert!(!hits.is_empty(), "{v}");
    let decided = hits
        .iter()
        .find(|h| {
            h["snippet"]
                .as_str()
                .unwrap()
                .contains("logical replication")
        })
        .unwrap_or_else(|| panic!("the decision is among the hits: {v}"));
    assert_eq!(decided["surface"], GPT);
    assert_eq!(decided["thread_title"], "Postgres migration plan");
    assert!(
        decided["matched_via"]
            .as_array()
            .unwrap()
            .contains(&json!("fts"))
    );
    assert!(
        hits.iter().all(|h| h["surface"] == GPT),
        "soup does not match: {v}"
    );
    assert!(
        text(&r).contains("logical replication"),
        "text form: {}",
        text(&r)
    );
    let thread_id = decided["thread_id"].as_str().unwrap().to_owned();
    // Filters: role and surface.
    let v = ok(&call(
        client,
        "search",
        json!({"query": "postgres", "role": "user"}),
    )
    .await);
    assert!(
        v["hits"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["role"] == "user"),
        "{v}"
    );
    let v = ok(&call(
        client,
        "search",
        json!({"query": "postgres", "surface": CLAUDE}),
    )
    .await);
    assert_eq!(v["hits"].as_array().unwrap().len(), 0, "{v}");
    // Compact form: lines and full ids side by side.
    let v = ok(&call(
        client,
        "search",
        json!({"query": "postgres", "format": "compact"}),
    )
    .await);
    let c = &v["compact"];
    assert_eq!(
        c["lines"].as_array().unwrap().len(),
        c["ids"].as_array().unwrap().len()
    );
    assert!(v.get("hits").is_none());
    let first_id = c["ids"][0].as_str().unwrap();
    assert!(c["lines"][0].as_str().unwrap().starts_with(&first_id[..8]));

    // list_threads: newest activity first, filters, cursor.
    let v = ok(&call(client, "list_threads", json!({})).await);
    let threads = v["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2);
    assert_eq!(threads[0]["title"], "Soup", "newest activity first: {v}");
    assert_eq!(threads[1]["turns"], 4, "the edit is one turn: {v}");
    assert_eq!(v["page"]["total"], 2);
    let p1 = ok(&call(client, "list_threads", json!({"limit": 1})).await);
    assert_eq!(p1["page"]["has_more"], true);
    let cursor = p1["page"]["next_cursor"].as_str().unwrap();
    let p2 = ok(&call(
        client,
        "list_threads",
        json!({"limit": 1, "cursor": cursor}),
    )
    .await);
    assert_eq!(p2["threads"][0]["id"], thread_id);
    assert_eq!(p2["page"]["has_more"], false);
    let v = ok(&call(
        client,
        "list_threads",
        json!({"words": "rollback", "since": "1d"}),
    )
    .await);
    assert_eq!(v["page"]["total"], 1, "{v}");
    let v = ok(&call(client, "list_threads", json!({"format": "compact"})).await);
    assert!(
        v["compact"]["lines"][0]
            .as_str()
            .unwrap()
            .contains("\"Soup\""),
        "{v}"
    );

    // get_thread by id prefix: turns in order, the edit as a revision, the long answer cut within budget.
    let r = call(
        client,
        "get_thread",
        json!({"thread_id": &thread_id[..8], "max_chars": 8000}),
    )
    .await;
    let v = ok(&r);
    let json_len = serde_json::to_string(&v).unwrap().len();
    assert!(json_len <= 8000 + 500, "budget kept: {json_len} chars");
    assert_eq!(v["thread"]["url"], "https://chatgpt.com/c/pg");
    let turns = v["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 4);
    assert_eq!(turns[0]["role"], "user");
    assert!(
        turns[1]["content"]
            .as_str()
            .unwrap()
            .contains("table by table")
    );
    assert_eq!(
        turns[1]["revisions"][0]["content"],
        "draft: migrate in one go"
    );
    assert_eq!(v["truncated"], true, "the long answer was cut");
    let long_turn = turns[3]["content"].as_str().unwrap();
    assert!(
        long_turn.contains("[cut: ") && long_turn.contains("get_message"),
        "cut marked"
    );
    let long_id = turns[3]["id"].as_str().unwrap().to_owned();
    let v = ok(&call(
        client,
        "get_thread",
        json!({"thread_id": &thread_id, "current_only": true, "limit": 2}),
    )
    .await);
    assert!(
        v["turns"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t.get("revisions").is_none())
    );
    assert_eq!(v["page"]["next_cursor"], "3");
    let v = ok(&call(
        client,
        "get_thread",
        json!({"thread_id": &thread_id, "cursor": "3", "format": "compact"}),
    )
    .await);
    assert_eq!(v["compact"]["lines"].as_array().unwrap().len(), 2);
    assert!(
        v["compact"]["lines"][0]
            .as_str()
            .unwrap()
            .contains("#3 user"),
        "{v}"
    );

    // get_message: the whole long answer in pieces, continuing at the offset.
    let v = ok(&call(
        client,
        "get_message",
        json!({"message_id": &long_id, "max_chars": 10000}),
    )
    .await);
    assert_eq!(v["truncated"], true);
    let total = v["content_chars"].as_u64().unwrap();
    assert!(total as usize >= LONG_CHARS);
    let mut got: String = v["message"]["content"]
        .as_str()
        .unwrap()
        .split("… [cut:")
        .next()
        .unwrap()
        .to_owned();
    let mut offset = got.chars().count() as u64;
    while offset < total {
        let v = ok(&call(
            client,
            "get_message",
            json!({"message_id": &long_id, "offset": offset, "max_chars": 10000}),
        )
        .await);
        let part = v["message"]["content"]
            .as_str()
            .unwrap()
            .split("… [cut:")
            .next()
            .unwrap()
            .to_owned();
        assert!(!part.is_empty());
        offset += part.chars().count() as u64;
        got.push_str(&part);
    }
    assert!(got.starts_with("Appendix: the rollback steps"));
    assert_eq!(
        got.chars().count() as u64,
        total,
        "pieces add up to the whole"
    );

    // corpus_health: both surfaces green with reasons, counts, schema version, embedding state.
    let r = call(client, "corpus_health", json!({})).await;
    let v = ok(&r);
    assert_eq!(v["counts"]["threads"], 2);
    assert_eq!(v["counts"]["turns"], 5);
    assert_eq!(v["counts"]["messages"], 6);
    assert!(v["schema_version"].as_u64().unwrap() >= 7);
    let s = v["surfaces"].as_array().unwrap();
    assert_eq!(s.len(), 2);
    for surface in s {
        assert_eq!(surface["status"], "green", "{surface}");
        assert!(
            surface["reason"].as_str().unwrap().contains("accepted"),
            "{surface}"
        );
    }
    assert!(v["embedding"].is_object());
    assert!(
        text(&r).contains("browser-ext:claude Green"),
        "{}",
        text(&r)
    );

    // Bad arguments: tool errors that say what is wrong, and the server keeps answering.
    tool_error(
        &call(client, "search", json!({"query": "x", "kk": 3})).await,
        "unknown field `kk`",
    );
    tool_error(
        &call(client, "search", json!({"query": "x", "k": 0})).await,
        "k must be between",
    );
    tool_error(
        &call(client, "search", json!({"query": "   "})).await,
        "query is empty",
    );
    tool_error(
        &call(client, "search", json!({"query": "x", "role": "wizard"})).await,
        "role",
    );
    tool_error(
        &call(
            client,
            "search",
            json!({"query": "x", "since": "last tuesday"}),
        )
        .await,
        "not a time bound",
    );
    tool_error(
        &call(client, "search", json!({"query": 42})).await,
        "bad arguments",
    );
    tool_error(
        &call(client, "get_thread", json!({"thread_id": "nope"})).await,
        "no thread",
    );
    tool_error(
        &call(
            client,
            "get_thread",
            json!({"thread_id": &thread_id, "cursor": "x"}),
        )
        .await,
        "cursor",
    );
    tool_error(
        &call(client, "list_threads", json!({"cursor": "garbage"})).await,
        "cursor",
    );
    tool_error(
        &call(client, "list_threads", json!({"limit": 100000})).await,
        "limit",
    );
    tool_error(
        &call(
            client,
            "get_message",
            json!({"message_id": &long_id, "offset": total + 1}),
        )
        .await,
        "past the end",
    );
    tool_error(
        &call(
            client,
            "get_message",
            json!({"message_id": &long_id, "max_chars": 5}),
        )
        .await,
        "max_chars",
    );
    let v = ok(&call(client, "corpus_health", json!({})).await);
    assert_eq!(v["counts"]["threads"], 2, "still serving after bad calls");
}

#[test]
fn stdio_serves_every_tool_read_only() {
    let (_dir, relay, _token) = relay_with_corpus();
    // The relay's own graph job derives entities from the turns on its first tick after they arrived, which on a
    // loaded machine can fall inside this test: bring the graph up to date first, so what is compared below is
    // what `personkit mcp` could have written.
    relay.cli_json(&["graph", "build", "--json"]);
    let before = relay.cli_json(&["corpus", "health", "--json"]);
    let rt = rt();
    for (name, lifecycle) in lifecycles() {
        rt.block_on(async {
            let mut cmd = tokio::process::Command::new(personkit_testkit::bin());
            cmd.arg("mcp")
                .arg("--db")
                .arg(&relay.db)
                .env("HOME", relay.db.parent().unwrap())
                .env_remove("PERSONKIT_DB");
            let transport = TokioChildProcess::new(cmd).expect("spawn personkit mcp");
            let client =
                ().serve_with_lifecycle(transport, lifecycle)
                    .await
                    .unwrap_or_else(|e| {
                        panic!(
                            "{name}: the client could not start a session with personkit mcp: {e}"
                        )
                    });
            let info = client.peer_info().expect("server info");
            assert_eq!(
                info.server_info.as_ref().map(|i| i.name.as_str()),
                Some("personkit"),
                "{name}"
            );
            exercise(&client).await;
            // The CLI and the MCP tool read the one health report: the same figures.
            let mcp = ok(&call(&client, "corpus_health", json!({})).await);
            let cli = relay.cli_json(&["corpus", "health", "--json"]);
            same_health(&cli, &mcp);
            client.cancel().await.unwrap();
        });
    }
    let after = relay.cli_json(&["corpus", "health", "--json"]);
    assert_eq!(
        before["storage"]["tables"], after["storage"]["tables"],
        "personkit mcp wrote nothing"
    );
}

/// Two health reports taken moments apart agree on every figure (the reason sentences' "N s ago" aside).
fn same_health(cli: &Value, mcp: &Value) {
    let figures = |v: &Value| {
        let mut v = v.clone();
        v["counts"]["generated_at"] = Value::Null;
        for s in v["surfaces"].as_array_mut().unwrap() {
            s["reason"] = Value::Null;
        }
        json!({"schema": v["schema_version"], "counts": v["counts"], "surfaces": v["surfaces"],
            "embedding": v["embedding"]})
    };
    assert!(
        cli["surfaces"].as_array().is_some_and(|s| !s.is_empty()),
        "{cli}"
    );
    assert_eq!(
        figures(cli),
        figures(mcp),
        "corpus health --json vs corpus_health"
    );
}

fn http_client_config(relay: &Relay, token: &str) -> StreamableHttpClientTransportConfig {
    StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", relay.base))
        .auth_header(token.to_owned())
}

#[test]
fn http_serves_agents_and_devices_and_refuses_the_rest() {
    let (_dir, relay, device_token) = relay_with_corpus();
    let agent = relay.cli_json(&["agents", "add", "claude-code", "--json"]);
    let agent_token = agent["token"].as_str().unwrap().to_owned();
    assert!(agent_token.starts_with("pka_"));
    let listed = relay.cli_json(&["devices", "list", "--json"]);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["kind"] == "agent" && d["name"] == "claude-code"),
        "agents are listed with the devices: {listed}"
    );
    let rt = rt();
    for (name, lifecycle) in lifecycles() {
        rt.block_on(async {
            let transport = StreamableHttpClientTransport::from_config(http_client_config(
                &relay,
                &agent_token,
            ));
            let client = ()
                .serve_with_lifecycle(transport, lifecycle)
                .await
                .unwrap_or_else(|e| panic!("{name}: no session over HTTP: {e}"));
            exercise(&client).await;
            client.cancel().await.unwrap();
        });
    }
    // A paired device's token reads too.
    rt.block_on(async {
        let transport =
            StreamableHttpClientTransport::from_config(http_client_config(&relay, &device_token));
        let client =
            ().serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
                .await
                .unwrap();
        let v = ok(&call(&client, "list_threads", json!({})).await);
        assert_eq!(v["page"]["total"], 2);
        client.cancel().await.unwrap();
    });

    // The agent token cannot add to the corpus.
    let item = turn_at(GPT, "x", Role::User, "sneaky", Some(0), None, &at(0));
    relay
        .http
        .post_json(
            "/v1/observations",
            Some(&agent_token),
            &json!({"observations": [item]}),
        )
        .assert_error(403, "read_only_token");

    let list_body = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let accept = ("accept", "application/json, text/event-stream");
    let bearer = format!("Bearer {agent_token}");
    // Unauthenticated and unknown tokens are refused.
    relay
        .http
        .post_with("/mcp", &[accept], list_body)
        .assert_error(401, "unauthorized");
    relay
        .http
        .post_with(
            "/mcp",
            &[accept, ("authorization", "Bearer pka_0000")],
            list_body,
        )
        .assert_error(401, "unauthorized");
    // A page of another site is refused even with a token; one of the relay's own names is not.
    for origin in [
        "https://evil.example",
        "http://127.0.0.1.evil.example:80",
        "null",
        "chrome-extension://abc",
    ] {
        relay
            .http
            .post_with(
                "/mcp",
                &[accept, ("authorization", &bearer), ("origin", origin)],
                list_body,
            )
            .assert_error(403, "origin_not_allowed");
    }
    let own = relay.http.post_with(
        "/mcp",
        &[
            accept,
            ("authorization", &bearer),
            ("origin", "http://localhost:6274"),
        ],
        list_body,
    );
    assert_eq!(own.status, 200, "{}", own.body);
    // A wrong Host is refused before anything else (the relay's one Host rule).
    relay
        .http
        .post_with(
            "/mcp",
            &[accept, ("authorization", &bearer), ("host", "evil.example")],
            list_body,
        )
        .assert_error(421, "host_not_allowed");

    // Revoked: refused from the next request on, over raw HTTP and through the SDK client.
    let id = agent["id"].as_str().unwrap();
    relay.cli(&["devices", "revoke", &id[..8]]).ok();
    relay
        .http
        .post_with("/mcp", &[accept, ("authorization", &bearer)], list_body)
        .assert_error(401, "unauthorized");
    rt.block_on(async {
        let transport =
            StreamableHttpClientTransport::from_config(http_client_config(&relay, &agent_token));
        let started = ().serve_with_lifecycle(transport, ClientLifecycleMode::Initialize).await;
        assert!(started.is_err(), "a revoked agent gets no session");
    });
}

#[test]
fn agents_are_listed_and_revoked_by_name_or_id_never_a_device() {
    let (_dir, relay, device_token) = relay_with_corpus();
    let listed = relay.cli_json(&["agents", "list", "--json"]);
    assert_eq!(listed, json!([]), "a paired device is no agent");
    assert!(
        relay
            .cli(&["agents", "list"])
            .ok()
            .stdout
            .contains("personkit agents add"),
        "an empty list says how to make one"
    );
    let add = |name: &str| relay.cli_json(&["agents", "add", name, "--json"]);
    let (code1, cursor, code2) = (add("claude-code"), add("cursor"), add("claude-code"));
    let id = |v: &Value| v["id"].as_str().unwrap().to_owned();
    let token = |v: &Value| v["token"].as_str().unwrap().to_owned();
    let listed = relay.cli_json(&["agents", "list", "--json"]);
    let rows = listed.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{listed}");
    assert!(rows.iter().all(|r| r["kind"] == "agent"), "{listed}");
    let table = relay.cli(&["agents", "list"]).ok().stdout.clone();
    assert!(
        table.contains("cursor") && table.contains(&id(&code1)) && !table.contains("laptop"),
        "{table}"
    );
    // The devices listing still shows both kinds.
    let all = relay.cli_json(&["devices", "list", "--json"]);
    assert_eq!(all.as_array().unwrap().len(), 4, "{all}");

    let reads = |t: &str| relay.http.get("/v1/query?q=postgres", Some(t)).status;
    assert_eq!(reads(&token(&cursor)), 200);
    // By name.
    let revoked = relay.cli_json(&["agents", "revoke", "cursor", "--json"]);
    assert_eq!(revoked["id"], cursor["id"]);
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    assert_eq!(
        reads(&token(&cursor)),
        401,
        "a revoked agent's token stops working"
    );
    let again = relay.cli(&["agents", "revoke", "cursor"]);
    assert!(!again.status.success());
    assert!(again.stderr.contains("already revoked"), "{}", again.stderr);
    // Two active agents of one name: refused, naming both ids.
    let both = relay.cli(&["agents", "revoke", "claude-code"]);
    assert!(!both.status.success(), "an ambiguous name revokes nothing");
    assert!(
        both.stderr.contains(&id(&code1)) && both.stderr.contains(&id(&code2)),
        "{}",
        both.stderr
    );
    assert_eq!(reads(&token(&code1)), 200);
    assert_eq!(reads(&token(&code2)), 200);
    // By id prefix; then the name is unique again.
    relay.cli(&["agents", "revoke", &id(&code1)[..8]]).ok();
    assert_eq!(reads(&token(&code1)), 401);
    assert_eq!(reads(&token(&code2)), 200);
    let text = relay
        .cli(&["agents", "revoke", "claude-code"])
        .ok()
        .stdout
        .clone();
    assert!(text.contains(&id(&code2)), "{text}");
    assert_eq!(reads(&token(&code2)), 401);

    // A device is never an agent: not by its name, nor by its id.
    let device_id = all
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["kind"] == "device")
        .map(id)
        .unwrap();
    for who in ["laptop", device_id.as_str(), &device_id[..8]] {
        let r = relay.cli(&["agents", "revoke", who]);
        assert!(
            !r.status.success(),
            "agents revoke {who} must refuse a device"
        );
        assert!(r.stderr.contains("personkit agents list"), "{}", r.stderr);
    }
    assert_eq!(reads(&device_token), 200, "the device still works");
    let listed = relay.cli_json(&["agents", "list", "--json"]);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["revoked_at"].is_string()),
        "{listed}"
    );
}

/// `personkit mcp` loads the vector index when it starts, before any search asks for it (as `serve` does), so
/// the first search does not pay for it. Runs the real local model.
#[test]
fn stdio_warms_the_vector_index_at_start() {
    let (_dir, db) = temp_db();
    let dir = db.parent().unwrap().to_path_buf();
    std::fs::write(
        dir.join("config.toml"),
        format!(
            "[embedder]\nkind = \"local\"\nmodel_dir = {:?}\n",
            personkit_testkit::model_dir().display().to_string()
        ),
    )
    .unwrap();
    let relay = Relay::start(&db, &[]);
    let token = relay.pair_printed("laptop");
    let items: Vec<Value> = [
        "How should I plan the Postgres upgrade?",
        "Use pg_upgrade with --link and rehearse on a copy first.",
        "A recipe for lentil soup, please.",
    ]
    .iter()
    .enumerate()
    .map(|(i, t)| {
        turn_at(
            GPT,
            "warm",
            personkit_testkit::alternating_role(i),
            t,
            Some(i as u32),
            None,
            &at(i as u32),
        )
    })
    .collect();
    assert_eq!(relay.http.send_batch(&token, &items)["stored"], 3);
    relay.cli(&["corpus", "embed"]).ok();

    rt().block_on(async {
        let mut cmd = tokio::process::Command::new(personkit_testkit::bin());
        cmd.arg("mcp")
            .arg("--db")
            .arg(&db)
            .env("HOME", &dir)
            .env("PERSONKIT_LOG", "info")
            .env_remove("PERSONKIT_DB");
        let (transport, stderr) = TokioChildProcess::builder(cmd)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn personkit mcp");
        let client =
            ().serve_with_lifecycle(transport, lifecycles().remove(0).1)
                .await
                .expect("session");
        // Before any tool call: the warm-up logs the loaded index (a search's own load logs nothing).
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
            stderr.expect("piped stderr"),
        ));
        let mut seen = Vec::new();
        let loaded = tokio::time::timeout(std::time::Duration::from_secs(120), async {
            while let Ok(Some(line)) = lines.next_line().await {
                seen.push(line.clone());
                if line.contains("vector index loaded") && line.contains("message") {
                    return Some(line);
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("no warm-up line on stderr: {seen:?}"));
        assert!(loaded.contains("vectors=3"), "{loaded}");
        let v = ok(&call(&client, "search", json!({"query": "database upgrade plan"})).await);
        assert!(
            v["signals_used"]
                .as_array()
                .unwrap()
                .contains(&json!("vector")),
            "{v}"
        );
        client.cancel().await.unwrap();
    });
}

/// `personkit mcp` on `db` as a plain process with piped stdio; stderr is read until the process has said which
/// search it runs (so it is up), then drained in the background.
fn spawn_stdio(db: &std::path::Path) -> std::process::Child {
    use std::io::BufRead;
    let mut child = std::process::Command::new(personkit_testkit::bin())
        .arg("mcp")
        .arg("--db")
        .arg(db)
        .env("HOME", db.parent().unwrap())
        .env_remove("PERSONKIT_DB")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn personkit mcp");
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(first.starts_with("personkit mcp:"), "{first}");
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    child
}

/// Waits up to `secs` for `child` to exit.
fn exits_within(child: &mut std::process::Child, secs: u64) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < end {
        if child.try_wait().unwrap().is_some() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// Sends one line to `personkit mcp`.
fn send_line(stdin: &mut std::process::ChildStdin, line: &[u8]) {
    use std::io::Write;
    stdin.write_all(line).unwrap();
    stdin.write_all(b"\n").unwrap();
    stdin.flush().unwrap();
}

/// The next line `personkit mcp` wrote, as JSON.
fn next_answer(rx: &std::sync::mpsc::Receiver<String>, after: &[u8]) -> Value {
    let line = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("no answer to {:?}", String::from_utf8_lossy(after)));
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

#[test]
fn stdio_answers_garbage_lines_with_json_rpc_errors_and_keeps_serving() {
    use std::io::BufRead;
    let (_dir, relay, _token) = relay_with_corpus();
    let mut child = spawn_stdio(&relay.db);
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let cases: Vec<(&[u8], i64, Value)> = vec![
        (b"this is not json", -32700, Value::Null),
        (b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}", -32700, Value::Null),
        (b"{\"jsonrpc\":\"2.0\",\"id\":2,", -32700, Value::Null),
        (deep.as_bytes(), -32600, Value::Null),
        (
            br#"[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","id":4,"method":"ping"}]"#,
            -32600,
            Value::Null,
        ),
        (br#"{"jsonrpc":"1.0","id":5,"method":"ping"}"#, -32600, json!(5)),
    ];
    for (sent, code, id) in cases {
        send_line(&mut stdin, sent);
        let e = next_answer(&rx, sent);
        assert_eq!(e["jsonrpc"], "2.0", "{e}");
        assert_eq!(e["error"]["code"], code, "{e}");
        assert_eq!(e["id"], id, "{e}");
    }
    // Still serving: a real session starts and answers.
    let init = br#"{"jsonrpc":"2.0","id":10,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    send_line(&mut stdin, init);
    let v = next_answer(&rx, init);
    assert_eq!(v["id"], 10, "{v}");
    assert_eq!(v["result"]["serverInfo"]["name"], "personkit", "{v}");
    send_line(
        &mut stdin,
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    let list = br#"{"jsonrpc":"2.0","id":11,"method":"tools/list"}"#;
    send_line(&mut stdin, list);
    let v = next_answer(&rx, list);
    assert_eq!(v["id"], 11, "{v}");
    assert!(v["result"]["tools"].as_array().unwrap().len() >= 5, "{v}");
    drop(stdin);
    assert!(
        exits_within(&mut child, 10),
        "stdin closed: personkit mcp ends"
    );
}

#[test]
fn stdio_exits_when_the_client_stops_reading_its_answers() {
    use std::io::Write;
    let (_dir, relay, _token) = relay_with_corpus();
    // The client closes its reading end and sends nothing more.
    let mut quiet = spawn_stdio(&relay.db);
    let _stdin = quiet.stdin.take().unwrap();
    drop(quiet.stdout.take());
    assert!(
        exits_within(&mut quiet, 10),
        "stdout closed, stdin open: personkit mcp still runs"
    );
    // The client closes its reading end and goes on sending requests.
    let mut talking = spawn_stdio(&relay.db);
    let mut stdin = talking.stdin.take().unwrap();
    drop(talking.stdout.take());
    let ping = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n";
    for _ in 0..20 {
        if stdin.write_all(ping).is_err() || talking.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        exits_within(&mut talking, 10),
        "stdout closed while requests come in: personkit mcp still runs"
    );
}

#[test]
fn http_answers_malformed_messages_with_json_rpc_errors() {
    let (_dir, relay, token) = relay_with_corpus();
    let accept = ("accept", "application/json, text/event-stream");
    let bearer = format!("Bearer {token}");
    let post = |body: &[u8]| {
        relay
            .http
            .post_with("/mcp", &[accept, ("authorization", &bearer)], body)
    };
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let cases: Vec<(&str, &[u8], u16, i64, Value)> = vec![
        ("not JSON", b"this is not json", 400, -32700, Value::Null),
        (
            "not UTF-8",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}",
            400,
            -32700,
            Value::Null,
        ),
        (
            "cut off",
            b"{\"jsonrpc\":\"2.0\",\"id\":2,",
            400,
            -32700,
            Value::Null,
        ),
        ("too deep", deep.as_bytes(), 400, -32600, Value::Null),
        (
            "a batch",
            br#"[{"jsonrpc":"2.0","id":3,"method":"ping"}]"#,
            400,
            -32600,
            Value::Null,
        ),
        (
            "jsonrpc 1.0",
            br#"{"jsonrpc":"1.0","id":4,"method":"ping"}"#,
            400,
            -32600,
            json!(4),
        ),
        (
            "neither request nor response",
            br#"{"jsonrpc":"2.0","id":5}"#,
            400,
            -32600,
            json!(5),
        ),
    ];
    for (name, body, status, code, id) in cases {
        let r = post(body);
        assert_eq!(r.status, status, "{name}: {}", r.body);
        let ct = r
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        assert!(ct.starts_with("application/json"), "{name}: {ct}");
        let v = r.json();
        assert_eq!(v["jsonrpc"], "2.0", "{name}: {v}");
        assert_eq!(v["error"]["code"], code, "{name}: {v}");
        assert_eq!(v["id"], id, "{name}: {v}");
    }
    // A well-formed message still gets its answer.
    let ok = post(
        br#"{"jsonrpc":"2.0","id":9,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    );
    assert_eq!(ok.status, 200, "{}", ok.body);
}

#[test]
fn agents_add_prints_the_running_relays_own_mcp_address() {
    let (_dir, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    assert!(
        !relay.base.ends_with(":8787"),
        "the test relay picks a free port"
    );
    let want = format!("{}/mcp", relay.base);
    let out = relay.cli(&["agents", "add", "claude-code"]);
    out.ok();
    assert!(out.stdout.contains(&want), "{}", out.stdout);
    assert!(!out.stdout.contains(":8787"), "{}", out.stdout);
    let json = relay.cli_json(&["agents", "add", "cursor", "--json"]);
    assert_eq!(json["mcp_url"], want.as_str(), "{json}");
    drop(relay);
    // No relay serves the corpus: no address is made up, and the output says where to find it.
    let out = personkit_testkit::cli(&db, &["agents", "add", "later"]);
    out.ok();
    assert!(!out.stdout.contains(":8787"), "{}", out.stdout);
    assert!(out.stdout.contains("personkit serve"), "{}", out.stdout);
    let json = personkit_testkit::cli_json(&db, &["agents", "add", "later2", "--json"]);
    assert_eq!(json["mcp_url"], Value::Null, "{json}");
}

/// A pending entry, written straight into the corpus as the pipeline would.
fn pending_entry(
    db: &std::path::Path,
    topic: &str,
    position: &str,
    message_id: &str,
    thread_id: &str,
) -> String {
    let conn = personkit_store::db::open(db).unwrap();
    personkit_store::knowledge::insert(
        &conn,
        &personkit_store::knowledge::NewEntry {
            kind: "decision".into(),
            topic: topic.into(),
            position: position.into(),
            reasoning:
                "The migration plan showed the old store could not keep up with the write load"
                    .into(),
            confidence: "high".into(),
            stability: "stable".into(),
            origin: "pipeline".into(),
            sources: vec![personkit_store::knowledge::Source {
                message_id: message_id.into(),
                thread_id: thread_id.into(),
            }],
            ..Default::default()
        },
        time::OffsetDateTime::now_utc(),
    )
    .unwrap()
}

#[test]
fn knowledge_reaches_agents_only_once_approved_and_their_proposals_wait_for_the_user() {
    let (_dir, db) = temp_db();
    // Two proposals an hour per agent, so the limit can be seen.
    std::fs::write(
        db.parent().unwrap().join("config.toml"),
        "[knowledge]\nproposals_per_hour = 2\n",
    )
    .unwrap();
    let (_d2, relay, token) = {
        let relay = Relay::start(&db, &[]);
        let token = relay.pair_printed("laptop");
        let items = vec![
            turn_at(
                GPT,
                "pg",
                Role::User,
                "Should we move the events store to Postgres?",
                Some(0),
                None,
                &at(0),
            ),
            turn_at(
                GPT,
                "pg",
                Role::Assistant,
                "Yes: the write load outgrew SQLite's single writer.",
                Some(1),
                None,
                &at(1),
            ),
        ];
        let r = relay.http.send_batch(&token, &items);
        assert_eq!(r["stored"], 2, "{r}");
        (tempfile::tempdir().unwrap(), relay, token)
    };
    let _ = token;
    let messages = relay.cli_json(&["corpus", "messages", "--json"]);
    let first = &messages
        .as_array()
        .map(|a| a[0].clone())
        .unwrap_or_else(|| messages["messages"][0].clone());
    let (mid, tid) = (
        first["id"].as_str().unwrap().to_owned(),
        first["thread_id"].as_str().unwrap().to_owned(),
    );
    let approved = pending_entry(
        &relay.db,
        "events store",
        "Move the events store to Postgres",
        &mid,
        &tid,
    );
    pending_entry(
        &relay.db,
        "events store backups",
        "Back the events store up hourly",
        &mid,
        &tid,
    );
    let out = relay.cli(&["knowledge", "approve", &approved]);
    assert!(out.status.success(), "{}", out.stderr);
    let agent_token = relay.cli_json(&["agents", "add", "claude-code", "--json"])["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let rt = rt();
    rt.block_on(async {
        let transport = StreamableHttpClientTransport::from_config(http_client_config(&relay, &agent_token));
        let client = ().serve_with_lifecycle(transport, ClientLifecycleMode::Initialize).await.unwrap();
        let k = ok(&call(&client, "get_knowledge", json!({"query": "events store"})).await);
        let ids: Vec<&str> = k["entries"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
        assert_eq!(ids, [approved.as_str()], "only the approved entry reaches an agent");
        assert_eq!(k["entries"][0]["sources"], json!([mid]));
        let s = ok(&call(&client, "search", json!({"query": "events store", "knowledge": true})).await);
        let ids: Vec<&str> = s["knowledge"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
        assert_eq!(ids, [approved.as_str()]);
        let plain = ok(&call(&client, "search", json!({"query": "events store"})).await);
        assert!(plain.get("knowledge").is_none(), "knowledge only when asked for");

        let proposal = json!({"type": "standard", "topic": "database choice",
            "position": "Prefer Postgres once writes outgrow one writer",
            "reasoning": "A single SQLite writer became the bottleneck for the events store under load",
            "sources": [mid], "reason": "The user chose Postgres for this reason in the pg thread"});
        let filed = ok(&call(&client, "propose_knowledge", proposal.clone()).await);
        assert_eq!(filed["outcome"], "pending");
        let k = ok(&call(&client, "get_knowledge", json!({"query": "database choice"})).await);
        assert_eq!(k["entries"], json!([]), "a proposal is not knowledge until the user approves it");
        let mut unknown = proposal.clone();
        unknown["sources"] = json!(["no-such-message"]);
        tool_error(&call(&client, "propose_knowledge", unknown).await, "sources_unknown");
        let mut vague = proposal.clone();
        vague["topic"] = json!("testing");
        vague["reasoning"] = json!("It's important.");
        tool_error(&call(&client, "propose_knowledge", vague).await, "proposal_invalid");
        let mut second = proposal.clone();
        second["topic"] = json!("code review");
        second["position"] = json!("Every change gets a second pair of eyes");
        ok(&call(&client, "propose_knowledge", second.clone()).await);
        second["topic"] = json!("release timing");
        tool_error(&call(&client, "propose_knowledge", second).await, "rate_limited");
        client.cancel().await.unwrap();
    });
    let pending = relay.cli_json(&["knowledge", "list", "--json"]);
    let by_agent: Vec<&Value> = pending
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["origin"] == "agent:claude-code")
        .collect();
    assert_eq!(by_agent.len(), 2, "{pending}");
    assert!(
        by_agent
            .iter()
            .all(|e| e["reason"].as_str().unwrap().contains("pg thread"))
    );
}

/// Memory as agents get it: the device distils the tiers and writes the profile over HTTP (mid and long through a
/// loopback stand-in for a model API, which cannot be reached from here), and an agent reads its context in tiers
/// through `/v1/context` and the MCP tool `get_context` — over HTTP and over stdio, the same text, each within its
/// budget — and can change none of it.
#[test]
fn memory_reaches_agents_in_tiers_within_budget_and_only_the_user_changes_it() {
    const MID: &str = "## Current priorities\n- ship the memory tiers for agents";
    let model =
        personkit_testkit::StandIn::start_replies(|_, _| personkit_testkit::chat::completion(MID));
    let (dir, db) = temp_db();
    std::fs::write(
        dir.path().join("config.toml"),
        format!(
            "[llm]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"stand-in\"\n\n[memory.long]\nenabled = true\n",
            model.base
        ),
    )
    .unwrap();
    let relay = Relay::start(&db, &[]);
    let device = relay.pair_printed("laptop");
    let agent = relay.cli_json(&["agents", "add", "claude-code", "--json"])["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let items = vec![
        turn_at(
            GPT,
            "pg",
            Role::User,
            "plan the postgres migration",
            Some(0),
            None,
            &at(0),
        ),
        turn_at(
            GPT,
            "pg",
            Role::Assistant,
            "table by table",
            Some(1),
            None,
            &at(1),
        ),
        turn_at(
            CLAUDE,
            "soup",
            Role::User,
            "a recipe for lentil soup",
            Some(0),
            None,
            &at(2),
        ),
    ];
    assert_eq!(relay.http.send_batch(&device, &items)["stored"], 3);

    // An agent may not run, see the runs of, or write any of it.
    for (method, path) in [("POST", "/v1/distill/short"), ("GET", "/v1/distill/status")] {
        let r = if method == "POST" {
            relay.http.post(path, Some(&agent), b"")
        } else {
            relay.http.get(path, Some(&agent))
        };
        r.assert_error(403, "read_only_token");
    }
    relay
        .http
        .put_json(
            "/v1/profile",
            Some(&agent),
            &json!({"text": "I am an agent now"}),
        )
        .assert_error(403, "read_only_token");

    // The user's device writes the profile and runs the tiers.
    let profile = "# About me\nI am Ana, I build personkit in Rust.\n\nAnswer briefly.\n";
    let p = relay
        .http
        .put_json("/v1/profile", Some(&device), &json!({"text": profile}));
    assert_eq!(p.status, 200, "{}", p.body);
    relay
        .http
        .put_json("/v1/profile", Some(&device), &json!({"txt": "x"}))
        .assert_error(400, "malformed_profile");
    relay
        .http
        .put_json("/v1/profile", Some(&device), &json!({"text": "a\u{0}b"}))
        .assert_error(400, "bad_profile");
    // Over the 64 KB a profile holds, and over what the route reads at all.
    relay
        .http
        .put_json(
            "/v1/profile",
            Some(&device),
            &json!({"text": "x".repeat(70_000)}),
        )
        .assert_error(400, "bad_profile");
    let huge = relay.http.put_json(
        "/v1/profile",
        Some(&device),
        &json!({"text": "x".repeat(200_000)}),
    );
    assert_eq!(huge.status, 413, "{}", huge.body);
    relay
        .http
        .put_json("/v1/profile", Some(&device), &json!({"text": 7}))
        .assert_error(400, "malformed_profile");
    let distill = |tier: &str| -> Value {
        for _ in 0..100 {
            let r = relay
                .http
                .post(&format!("/v1/distill/{tier}"), Some(&device), b"");
            if r.status == 409 && r.json()["code"] == "distill_running" {
                // The schedule's own first run is under way.
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
            assert_eq!(r.status, 200, "{tier}: {}", r.body);
            return r.json();
        }
        panic!("{tier}: the tier stayed busy");
    };
    assert_eq!(distill("short")["outcome"], "ok");
    assert_eq!(distill("mid")["outcome"], "ok");
    assert_eq!(distill("long")["outcome"], "ok");
    relay
        .http
        .post("/v1/distill/weekly", Some(&device), b"")
        .assert_error(404, "unknown_tier");
    let status = relay.http.get("/v1/distill/status", Some(&device)).json();
    assert_eq!(status["tiers"][1]["versions"], 1, "{status}");
    assert!(
        model.seen.lock().unwrap().len() >= 2,
        "mid and long asked the model"
    );

    // Context over HTTP, for the agent.
    for tier in 1..=4 {
        for budget in ["", "&budget=120"] {
            let r = relay
                .http
                .get(&format!("/v1/context?tier={tier}{budget}"), Some(&agent));
            assert_eq!(r.status, 200, "{}", r.body);
            let c = r.json();
            assert!(
                c["tokens"].as_u64().unwrap() <= c["budget"].as_u64().unwrap(),
                "{c}"
            );
            assert!(c["text"].as_str().unwrap().contains("I am Ana"), "{c}");
        }
    }
    let t2 = relay.http.get("/v1/context?tier=2", Some(&agent)).json();
    let t2_text = t2["text"].as_str().unwrap().to_owned();
    for s in [
        "ship the memory tiers",
        "plan the postgres migration",
        "lentil soup",
    ] {
        assert!(t2_text.contains(s), "tier 2 lacks {s:?}: {t2_text}");
    }
    relay
        .http
        .get("/v1/context?tier=9", Some(&agent))
        .assert_error(400, "invalid_argument");
    relay
        .http
        .get("/v1/context?tier=2&budget=lots", Some(&agent))
        .assert_error(400, "bad_query");

    // The MCP tool, through the SDK's client: over HTTP with the agent's token, then over stdio.
    let rt = rt();
    rt.block_on(async {
        let transport =
            StreamableHttpClientTransport::from_config(http_client_config(&relay, &agent));
        let client =
            ().serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
                .await
                .unwrap();
        for tier in 1..=4 {
            let v = ok(&call(&client, "get_context", json!({"tier": tier, "budget": 120})).await);
            assert!(v["tokens"].as_u64().unwrap() <= 120, "{v}");
            assert_eq!(v["tier"], tier);
        }
        let v = ok(&call(&client, "get_context", json!({})).await);
        assert_eq!(
            v["text"].as_str().unwrap(),
            t2_text,
            "the tool and /v1/context give the same text"
        );
        tool_error(
            &call(&client, "get_context", json!({"tier": 7})).await,
            "tier 7",
        );
        tool_error(
            &call(&client, "get_context", json!({"tier": 2, "profile": "x"})).await,
            "profile",
        );
        client.cancel().await.unwrap();

        let mut cmd = tokio::process::Command::new(personkit_testkit::bin());
        cmd.arg("mcp")
            .arg("--db")
            .arg(&relay.db)
            .env("HOME", relay.db.parent().unwrap())
            .env_remove("PERSONKIT_DB")
            .env_remove("PERSONKIT_PROFILE");
        let client = ()
            .serve_with_lifecycle(
                TokioChildProcess::new(cmd).unwrap(),
                ClientLifecycleMode::Initialize,
            )
            .await
            .unwrap();
        let v = ok(&call(&client, "get_context", json!({"tier": 2})).await);
        assert_eq!(
            v["text"].as_str().unwrap(),
            t2_text,
            "stdio reads the same memory and profile"
        );
        client.cancel().await.unwrap();
    });

    // The CLI prints the same context; nothing an agent did changed the profile.
    let cli = relay.cli_json(&["context", "--tier", "2", "--json"]);
    assert_eq!(cli["text"].as_str().unwrap(), t2_text);
    let got = relay.http.get("/v1/profile", Some(&agent)).json();
    assert_eq!(got["body"].as_str().unwrap(), profile);
    let versions = relay.cli_json(&["memory", "list", "--tier", "profile", "--json"]);
    assert_eq!(versions.as_array().unwrap().len(), 1, "{versions}");
}
