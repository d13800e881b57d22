//! `personkit knowledge` end to end on the real binary and a real corpus file: what a remote model receives
//! (a loopback HTTP server stands in for a cloud model API, which cannot be reached from here, and is configured
//! as remote with `scrub = "on"`), pending until approved, the audit log, and the pipeline off without a model.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::{Value, json};

use personkit_shared::wire::{ClientInfo, Role, build_observation};
use personkit_store::ingest::{Origin, ingest_observations};
use personkit_testkit::chat::{completion, judge_candidates, keep_all, messages_text, person_in};
use personkit_testkit::{Reply, Seen, StandIn, cli, cli_json, temp_db};

/// What the user said: every kind of detail that must not leave the machine.
const SECRET_KEY: &str = "sk-proj4f9QeT7xLmN2pR8sVw3Yz";
const TURNS: &[&str] = &[
    "I told Ana García we never ship on Fridays: write to ana.garcia@example.org or call +44 20 7946 0958. \
     The deal is worth $2.4M and my key is sk-proj4f9QeT7xLmN2pR8sVw3Yz.",
    "Understood. Avoiding Friday releases leaves a working day to fix what breaks.",
    "Right — Ana agreed: a Friday release once cost us a whole weekend of rollbacks.",
    "That is a sound rule.",
];
const RAW: &[&str] = &[
    "Ana",
    "García",
    "ana.garcia@example.org",
    "7946",
    "2.4M",
    SECRET_KEY,
];

fn seed(db: &Path) {
    let mut conn = personkit_store::db::open(db).unwrap();
    let client = ClientInfo {
        app_version: "0.1.0".into(),
        device_id: "ext".into(),
    };
    let obs: Vec<_> = TURNS
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let role = if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            build_observation(
                "browser-ext:chatgpt",
                "release-rules",
                role,
                t,
                Some(i as u32),
                None,
                &format!("2026-11-20T09:0{i}:00Z"),
                client.clone(),
            )
        })
        .collect();
    ingest_observations(
        &mut conn,
        &Origin {
            device_id: "d".into(),
        },
        &obs,
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
}

/// Extracts one entry that names the person as the request named them (a pseudonym or the real name), and keeps
/// everything the judge is shown.
fn model_server() -> StandIn {
    StandIn::start_replies(|_, seen| answer(seen, false))
}

/// The stand-in's answer to `seen`; with `chatty_judge`, the judge answers in prose, not JSON.
fn answer(seen: &Seen, chatty_judge: bool) -> Reply {
    let text = messages_text(seen);
    match judge_candidates(&text) {
        Some(_) if chatty_judge => completion("All of these look great to me!"),
        Some(n) => keep_all(n),
        None => {
            let person = person_in(&text, "Ana García");
            let entry = json!({"type": "standard", "topic": "release timing",
                "position": format!("Never ship on a Friday, as agreed with {person}"),
                "reasoning": "A Friday release once cost a whole weekend of rollbacks; a working day after a release leaves time to fix it",
                "context": "", "confidence": "high", "stability": "durable", "tags": ["releases"], "sources": [1, 3]});
            completion(&format!(
                "Here you go:\n```json\n{}\n```",
                json!({ "entries": [entry] })
            ))
        }
    }
}

fn configure(db: &Path, base: &str, scrub: &str) {
    let cfg = format!(
        "[llm]\nkind = \"openai\"\nbase_url = \"{base}\"\nmodel = \"stand-in\"\ntimeout_ms = 20000\n\n[knowledge]\nscrub = \"{scrub}\"\n"
    );
    std::fs::write(db.parent().unwrap().join("config.toml"), cfg).unwrap();
}

#[test]
fn a_remote_model_sees_only_scrubbed_text_and_the_names_come_back_in_what_is_stored() {
    let (_dir, db) = temp_db();
    seed(&db);
    let server = model_server();
    configure(&db, &server.base, "on");
    let report = cli_json(&db, &["knowledge", "run", "--once", "--json"]);
    assert_eq!(report["sent_as"], "scrubbed", "{report}");
    assert_eq!(report["new_entries"], 1, "{report}");
    let seen = server.seen.lock().unwrap().clone();
    assert!(seen.len() >= 2, "an extraction and a judge call");
    for s in &seen {
        let text = messages_text(s);
        for raw in RAW {
            assert!(
                !text.contains(raw),
                "{raw:?} reached the remote model:\n{text}"
            );
        }
        assert!(
            text.contains("[EMAIL]") || text.contains("You check candidate"),
            "{text}"
        );
    }
    let first = messages_text(&seen[0]);
    for placeholder in ["[EMAIL]", "[PHONE]", "[AMOUNT]", "Person_"] {
        assert!(
            first.contains(placeholder),
            "{placeholder} missing:\n{first}"
        );
    }
    let pending = cli_json(&db, &["knowledge", "list", "--json"]);
    let e = &pending[0];
    assert_eq!(e["status"], "pending");
    assert!(
        e["position"].as_str().unwrap().contains("Ana García"),
        "the pseudonym is put back before storing: {e}"
    );
    assert_eq!(e["sources"].as_array().unwrap().len(), 2);
    // The audit log says where each call went and that it was scrubbed, with what was replaced.
    let calls = cli_json(&db, &["knowledge", "audit", "--kind", "call", "--json"]);
    for c in calls.as_array().unwrap() {
        assert_eq!(c["detail"]["sent_as"], "scrubbed");
        assert!(
            c["detail"]["endpoint"]
                .as_str()
                .unwrap()
                .starts_with(&server.base)
        );
    }
    let replaced = &calls[0]["detail"]["replaced"];
    for kind in ["email", "phone", "amount", "secret", "name"] {
        assert!(
            replaced[kind].as_u64().unwrap_or(0) > 0,
            "{kind}: {replaced}"
        );
    }
}

#[test]
fn with_scrubbing_turned_off_explicitly_the_remote_model_sees_the_text_as_stored() {
    let (_dir, db) = temp_db();
    seed(&db);
    let server = model_server();
    configure(&db, &server.base, "off");
    let report = cli_json(&db, &["knowledge", "run", "--once", "--json"]);
    assert_eq!(report["sent_as"], "unscrubbed");
    let first = messages_text(&server.seen.lock().unwrap()[0]);
    for raw in RAW {
        assert!(first.contains(raw), "{raw:?} should arrive as stored");
    }
}

#[test]
fn entries_wait_for_the_users_decision_and_every_decision_is_audited() {
    let (_dir, db) = temp_db();
    seed(&db);
    let server = model_server();
    configure(&db, &server.base, "auto");
    let report = cli_json(&db, &["knowledge", "run", "--once", "--json"]);
    assert_eq!(
        report["sent_as"], "loopback",
        "a loopback server gets the text as stored under auto"
    );
    let id = cli_json(&db, &["knowledge", "list", "--json"])[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        cli_json(
            &db,
            &["knowledge", "list", "--status", "approved", "--json"]
        ),
        json!([])
    );
    let out = cli(&db, &["knowledge", "approve", &id[..8]]);
    assert!(out.status.success(), "{}", out.stderr);
    let approved = cli_json(
        &db,
        &["knowledge", "list", "--status", "approved", "--json"],
    );
    assert_eq!(approved[0]["id"], id.as_str());
    assert_eq!(approved[0]["decided_by"], "cli");
    let out = cli(&db, &["knowledge", "reject", "no-such-entry"]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("knowledge list"), "{}", out.stderr);
    let log = cli_json(&db, &["knowledge", "audit", "--kind", "approval", "--json"]);
    assert_eq!(log[0]["detail"]["entry"], id.as_str());
    // An edit is checked as the dashboard checks it, and audited by field name, never by text.
    let out = cli(&db, &["knowledge", "edit", &id, "--topic", "  "]);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("topic cannot be empty"),
        "{}",
        out.stderr
    );
    let long = "x".repeat(2_001);
    let out = cli(&db, &["knowledge", "edit", &id, "--reasoning", &long]);
    assert!(out.stderr.contains("at most 2000"), "{}", out.stderr);
    let out = cli(
        &db,
        &["knowledge", "edit", &id, "--topic", "Release cadence"],
    );
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("(topic)"), "{}", out.stdout);
    let shown = cli_json(&db, &["knowledge", "show", &id, "--json"]);
    assert_eq!(shown["topic"], "Release cadence");
    let log = cli_json(&db, &["knowledge", "audit", "--kind", "approval", "--json"]);
    assert_eq!(log[0]["detail"]["edited"], json!(["topic"]));
    assert!(!log[0]["detail"].to_string().contains("Release cadence"));
    // A second pass has nothing new to read and sends nothing.
    let before = server.seen.lock().unwrap().len();
    let again = cli_json(&db, &["knowledge", "run", "--once", "--json"]);
    assert_eq!(
        (again["turns"].as_u64(), server.seen.lock().unwrap().len()),
        (Some(0), before)
    );
}

#[test]
fn without_a_model_the_pipeline_is_off_and_says_how_to_turn_it_on() {
    let (_dir, db) = temp_db();
    seed(&db);
    let out = cli(&db, &["knowledge", "run", "--once"]);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("no language model is configured"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("[llm]"), "{}", out.stderr);
    let health = cli_json(&db, &["corpus", "health", "--json"]);
    assert_eq!(
        health["knowledge"]["pipeline"], "off",
        "{}",
        health["knowledge"]
    );
    assert!(
        health["knowledge"]["model"]
            .as_str()
            .unwrap()
            .contains("[llm]")
    );
}

#[test]
fn a_judge_answering_nonsense_drops_the_batch_and_health_raises_the_alert() {
    let (_dir, db) = temp_db();
    seed(&db);
    let server = StandIn::start_replies(|_, seen| answer(seen, true));
    configure(&db, &server.base, "on");
    let report = cli_json(&db, &["knowledge", "run", "--once", "--json"]);
    assert_eq!(
        (
            report["judge_failures"].as_u64(),
            report["new_entries"].as_u64()
        ),
        (Some(1), Some(0)),
        "{report}"
    );
    assert_eq!(
        cli_json(&db, &["knowledge", "list", "--status", "all", "--json"]),
        json!([])
    );
    let health = cli_json(&db, &["corpus", "health", "--json"]);
    assert_eq!(health["knowledge"]["pipeline"], "on");
    assert!(
        health["knowledge"]["scrubbing"]
            .as_str()
            .unwrap()
            .starts_with("on: secrets, e-mails, phone numbers, amounts and people's names"),
        "{}",
        health["knowledge"]
    );
    assert!(
        health["knowledge"]["alert"]["message"]
            .as_str()
            .unwrap()
            .contains("judge failed"),
        "{}",
        health["knowledge"]
    );
    let text = cli(&db, &["corpus", "health"]).stdout;
    assert!(text.contains("ALERT knowledge"), "{text}");
    // Seen to: dismissed by hand, kept in the audit log, and health is quiet again.
    assert_eq!(
        cli_json(&db, &["knowledge", "dismiss", "--json"]),
        json!({"dismissed": true})
    );
    let health = cli_json(&db, &["corpus", "health", "--json"]);
    assert!(
        health["knowledge"]["alert"].is_null(),
        "{}",
        health["knowledge"]
    );
    assert!(
        !cli(&db, &["corpus", "health"])
            .stdout
            .contains("ALERT knowledge")
    );
    let rows = cli_json(&db, &["knowledge", "audit", "--kind", "alert", "--json"]);
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .any(|r| r["detail"]["dismissed"] == json!(true) && r["detail"]["by"] == "cli"),
        "{rows}"
    );
    assert_eq!(
        cli_json(&db, &["knowledge", "dismiss", "--json"]),
        json!({"dismissed": false})
    );
}

/// `personkit <args>` with a bound long enough for the real model on a slow machine.
fn slow_cli(db: &Path, args: &[&str]) -> std::process::Output {
    let mut child = std::process::Command::new(personkit_testkit::bin())
        .args(args)
        .env("PERSONKIT_DB", db)
        .env("HOME", db.parent().unwrap())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(900);
    while child.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "`personkit {}` ran past 15 minutes",
            args.join(" ")
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    child.wait_with_output().unwrap()
}

/// SLOW (about a minute or two on two cores): the whole path on the real SmolLM2-135M from PyPI, in process.
/// What the model says is not asserted (a 135M model writes poor entries); the path's rules are: windows were
/// built and read, no window kept more than eight entries, every kept entry cites stored messages and waits for
/// approval, and an agent sees an entry only once it is approved.
#[test]
fn slow_the_whole_path_on_the_real_local_model() {
    let (_dir, db) = temp_db();
    seed(&db);
    let model = personkit_testkit::llm_model_path();
    std::fs::write(
        db.parent().unwrap().join("config.toml"),
        format!(
            "[llm]\nkind = \"local\"\nmodel_path = {:?}\nmax_tokens = 320\ntimeout_ms = 600000\n",
            model.display().to_string()
        ),
    )
    .unwrap();
    let out = slow_cli(&db, &["knowledge", "run", "--once", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("real-model pass: {report}");
    assert_eq!(report["sent_as"], "in_process");
    assert!(
        report["model"]
            .as_str()
            .unwrap()
            .starts_with("local:SmolLM2"),
        "{report}"
    );
    assert_eq!(report["windows"], 1, "{report}");
    assert!(report["calls"].as_u64().unwrap() >= 1, "{report}");
    assert!(
        report["usage"]["prompt_tokens"].as_u64().unwrap() > 100,
        "{report}"
    );
    for k in report["kept_per_window"].as_array().unwrap() {
        assert!(k.as_u64().unwrap() <= 8);
    }
    let stored: Vec<String> = cli_json(&db, &["corpus", "messages", "--limit", "100", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    let all = cli_json(&db, &["knowledge", "list", "--status", "all", "--json"]);
    let all = all.as_array().unwrap();
    assert_eq!(
        all.len() as u64,
        report["new_entries"].as_u64().unwrap() + report["variants"].as_u64().unwrap()
    );
    for e in all {
        assert_eq!(e["status"], "pending", "{e}");
        assert_eq!(e["model"], report["model"]);
        let sources = e["sources"].as_array().unwrap();
        assert!(!sources.is_empty());
        for s in sources {
            assert!(
                stored.contains(&s["message_id"].as_str().unwrap().to_owned()),
                "{e}"
            );
        }
    }
    for d in cli_json(&db, &["knowledge", "audit", "--kind", "decision", "--json"])
        .as_array()
        .unwrap()
    {
        eprintln!("decision: {}", d["detail"]);
    }
    // Every call is in the audit log, in process and unscrubbed (nothing left the machine).
    let calls = cli_json(&db, &["knowledge", "audit", "--kind", "call", "--json"]);
    assert_eq!(
        calls.as_array().unwrap().len() as u64,
        report["calls"].as_u64().unwrap().min(50)
    );
    for c in calls.as_array().unwrap() {
        assert_eq!(c["detail"]["endpoint"], "in process");
        assert_eq!(c["detail"]["sent_as"], "in_process");
    }
    // Approval decides what an agent sees (over `personkit mcp`, the real MCP client).
    if let Some(first) = all.first() {
        let id = first["id"].as_str().unwrap();
        assert!(cli(&db, &["knowledge", "approve", id]).status.success());
        let seen = mcp_knowledge(&db);
        assert_eq!(seen, [id.to_owned()], "only the approved entry");
    } else {
        assert!(mcp_knowledge(&db).is_empty());
    }
}

/// The ids `get_knowledge` answers over `personkit mcp` (stdio).
fn mcp_knowledge(db: &Path) -> Vec<String> {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut cmd = tokio::process::Command::new(personkit_testkit::bin());
        cmd.arg("mcp")
            .arg("--db")
            .arg(db)
            .env("HOME", db.parent().unwrap())
            .env_remove("PERSONKIT_DB");
        let client = ().serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap()).await.unwrap();
        let args = json!({"limit": 50});
        let Value::Object(map) = args else {
            unreachable!()
        };
        let r = client
            .call_tool(CallToolRequestParams::new("get_knowledge".to_owned()).with_arguments(map))
            .await
            .unwrap();
        client.cancel().await.unwrap();
        let v = r.structured_content.unwrap();
        v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_owned())
            .collect()
    })
}

#[test]
fn serve_makes_the_daily_pass_by_itself_in_the_configured_local_hour() {
    let (_dir, db) = temp_db();
    seed(&db);
    let server = model_server();
    configure(&db, &server.base, "on");
    // The pass hour is the hour it is now (in UTC, the zone the relay is started in).
    let mut now = time::OffsetDateTime::now_utc();
    if now.minute() == 59 && now.second() > 50 {
        std::thread::sleep(std::time::Duration::from_secs(15));
        now = time::OffsetDateTime::now_utc();
    }
    let cfg = db.parent().unwrap().join("config.toml");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(&format!("hour = {}\n", now.hour()));
    std::fs::write(&cfg, text).unwrap();
    let relay = personkit_testkit::Relay::start_env(&db, &[], &[("TZ", "UTC")]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let entries = loop {
        let list = relay.cli_json(&["knowledge", "list", "--json"]);
        if list.as_array().is_some_and(|a| !a.is_empty()) {
            break list;
        }
        assert!(std::time::Instant::now() < deadline, "no pass within 30 s");
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    assert_eq!(entries[0]["status"], "pending");
    let runs = relay.cli_json(&["knowledge", "audit", "--kind", "run", "--json"]);
    assert_eq!(runs.as_array().unwrap().len(), 1, "one pass a day");
    drop(relay);
}
