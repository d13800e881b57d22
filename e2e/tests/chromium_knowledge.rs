//! The dashboard's Knowledge page in the real Chromium against the real relay: entries arrive through the real
//! paths — a pass of `personkit knowledge run --once` and an agent's `propose_knowledge` call over the relay's
//! `/mcp` with its own token — and the user reviews them in the browser: the pending list names the agent and its
//! reason, a source link opens the thread at the turn, approve and reject move entries between tabs (and MCP
//! `get_knowledge` and `personkit knowledge list` agree), an edit persists, and the Privacy page lists every model
//! call and decision without any pseudonym.
//!
//! The language model is a loopback HTTP server (`personkit_testkit::StandIn`) answering in the OpenAI chat
//! format: no model API can be reached from here, and a real local model writes different entries on every
//! machine. It is configured with `scrub = "on"`, so what it receives is scrubbed as for a remote model.
//!
//! Pages are screenshotted in light and dark into `<target>/e2e-screenshots/knowledge-<unix time>/`;
//! `docs/screenshots/` holds one committed copy of each.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use personkit_e2e::chromium::{Chromium, LaunchOptions, Tab};
use personkit_e2e::screenshots;
use personkit_testkit::chat::{completion, judge_candidates, keep_all, messages_text, person_in};
use personkit_testkit::{Relay, Reply, Seen, StandIn, temp_db, turn};
use serde_json::{Value, json};

const GPT: &str = "browser-ext:chatgpt";
const WAIT: Duration = Duration::from_secs(15);

/// Where this run's screenshots go: `<target dir>/e2e-screenshots/knowledge-<unix time>`.
fn run_dir() -> PathBuf {
    screenshots::run_dir("knowledge").unwrap()
}

fn shoot(tab: &Tab, dir: &Path, name: &str) {
    screenshots::shoot(tab, dir, name).unwrap();
}

fn text_of(tab: &Tab) -> String {
    tab.eval("document.body.innerText")
        .unwrap()
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Clicks the element `selector` and waits until `until` (a JS expression) holds on the page that follows.
fn click_and_wait(tab: &Tab, selector: &str, until: &str) {
    let clicked = tab
        .eval(&format!(
            "(() => {{ const el = document.querySelector({}); if (!el) return false; el.click(); return true; }})()",
            json!(selector)
        ))
        .unwrap();
    assert_eq!(
        clicked,
        json!(true),
        "nothing to click at {selector}: {}",
        text_of(tab)
    );
    tab.wait_for(
        &format!("document.readyState === 'complete' && ({until})"),
        WAIT,
    )
    .unwrap_or_else(|e| {
        panic!(
            "after clicking {selector}, {until} never held ({e}): {}",
            text_of(tab)
        )
    });
}

/// The stand-in model: one entry per window citing lines 1 and 3, naming the person as the request named them;
/// the judge keeps every candidate.
fn answer(seen: &Seen, chatty_judge: bool) -> Reply {
    let text = messages_text(seen);
    match judge_candidates(&text) {
        Some(_) if chatty_judge => completion("They all look fine to me!"),
        Some(n) => keep_all(n),
        None => {
            let person = person_in(&text, "Ana García");
            let entry = json!({"type": "standard", "topic": "release timing",
                "position": format!("Never ship on a Friday, as agreed with {person}"),
                "reasoning": "A Friday release once cost a whole weekend of rollbacks; a working day after a release leaves time to fix it",
                "context": "team releases", "confidence": "high", "stability": "durable", "tags": ["releases", "process"],
                "sources": [1, 3]});
            completion(&json!({ "entries": [entry] }).to_string())
        }
    }
}

/// One MCP tool call over the relay's `/mcp` with an agent token (the current protocol revision: no handshake).
fn mcp_call(relay: &Relay, token: &str, tool: &str, args: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let bearer = format!("Bearer {token}");
    let r = relay.http.post_with(
        "/mcp",
        &[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("authorization", &bearer),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", tool),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{tool}: {}", r.body);
    let v = r.json();
    assert_eq!(v["result"]["isError"], json!(false), "{tool}: {v}");
    v["result"]["structuredContent"].clone()
}

fn approved_ids_seen_by_agent(relay: &Relay, token: &str) -> Vec<String> {
    mcp_call(relay, token, "get_knowledge", json!({"limit": 50}))["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect()
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn knowledge_is_reviewed_in_the_library_and_the_privacy_page_shows_the_audit_log() {
    let shots = run_dir();
    eprintln!("screenshots: {}", shots.display());
    let (_dir, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let device = relay.pair_printed("laptop");
    let said = [
        "I told Ana García we never ship on Fridays: write to ana.garcia@example.org if a release is planned. \
         The contract is worth $2.4M, so a broken weekend is not an option.",
        "Understood. Avoiding Friday releases leaves a working day to fix what breaks.",
        "Right — a Friday release once cost us a whole weekend of rollbacks.",
        "That is a sound rule.",
    ];
    let items: Vec<Value> = said
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut v = turn(
                GPT,
                "release-rules",
                personkit_testkit::alternating_role(i),
                t,
                Some(i as u32),
            );
            v["title"] = json!("Release rules for the team");
            v["url"] = json!("https://chatgpt.com/c/release-rules");
            v
        })
        .collect();
    relay.http.send_batch(&device, &items);
    let messages = relay.cli_json(&["corpus", "messages", "--surface", GPT, "--json"]);
    let first_user = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user" && m["content"].as_str().unwrap().contains("ana.garcia"))
        .unwrap()
        .clone();
    let (mid, tid) = (
        first_user["id"].as_str().unwrap().to_owned(),
        first_user["thread_id"].as_str().unwrap().to_owned(),
    );
    assert_eq!(tid, personkit_testkit::thread_id(GPT, "release-rules"));

    // Sign in with `personkit open`'s link.
    let browser = Chromium::launch(&LaunchOptions::default()).unwrap();
    let open = relay.cli_json(&["open", "--json"]);
    let base = relay.base.clone();
    let tab = browser.open_tab(open["url"].as_str().unwrap()).unwrap();
    tab.wait_for(
        "location.pathname === '/' && document.readyState === 'complete'",
        WAIT,
    )
    .unwrap();

    // 1. No language model configured: the page says the pipeline is off and what to do.
    click_and_wait(
        &tab,
        "header nav a[href='/knowledge']",
        "location.pathname === '/knowledge'",
    );
    let page = text_of(&tab);
    assert!(page.contains("The knowledge pipeline is off."), "{page}");
    assert!(
        page.contains("[llm]") && page.contains("personkit knowledge run --once"),
        "{page}"
    );
    assert!(page.contains("Nothing waits for you."), "{page}");
    shoot(&tab, &shots, "knowledge-off");

    // 2. A pass with the stand-in model (configured as remote, scrubbed), then an agent's proposal over MCP.
    let chatty = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let judge_talks = chatty.clone();
    let model = StandIn::start_replies(move |_, seen| {
        answer(seen, judge_talks.load(std::sync::atomic::Ordering::SeqCst))
    });
    // The relay read no [llm] settings when it started, so it makes no daily pass of its own during the test.
    std::fs::write(
        db.parent().unwrap().join("config.toml"),
        format!(
            "[llm]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"stand-in\"\ntimeout_ms = 20000\n\n[knowledge]\nscrub = \"on\"\n",
            model.base
        ),
    )
    .unwrap();
    let report = relay.cli_json(&["knowledge", "run", "--once", "--json"]);
    assert_eq!(
        (report["new_entries"].as_u64(), report["sent_as"].as_str()),
        (Some(1), Some("scrubbed")),
        "{report}"
    );
    for s in model.seen.lock().unwrap().iter() {
        let sent = messages_text(s);
        assert!(
            !sent.contains("ana.garcia@example.org") && !sent.contains("García"),
            "{sent}"
        );
    }
    let from_pipeline = ids(&relay.cli_json(&["knowledge", "list", "--json"]))[0].clone();
    let agent = relay.cli_json(&["agents", "add", "claude-code", "--json"])["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let filed = mcp_call(
        &relay,
        &agent,
        "propose_knowledge",
        json!({"type": "decision", "topic": "contract risk", "position": "Large contracts get a release freeze before weekends",
               "reasoning": "A weekend outage on a multi-million contract costs more than a delayed feature",
               "tags": ["contracts"], "sources": [mid], "reason": "The user weighed the contract's value against weekend releases"}),
    );
    assert_eq!(filed["outcome"], "pending", "{filed}");
    let from_agent = filed["id"].as_str().unwrap().to_owned();
    assert!(
        approved_ids_seen_by_agent(&relay, &agent).is_empty(),
        "nothing is approved yet"
    );

    // 3. The pending list: both entries, the agent and its reason, the model, the sources.
    tab.navigate(&format!("{base}/knowledge")).unwrap();
    let page = text_of(&tab);
    assert!(!page.contains("The knowledge pipeline is off."), "{page}");
    assert!(
        page.contains("Pipeline on:") && page.contains("stand-in"),
        "{page}"
    );
    let tab_count = |status: &str| {
        tab.eval(&format!(
            "document.querySelector('nav.tabs a[href=\"/knowledge?status={status}\"] .n').textContent"
        ))
        .unwrap()
    };
    assert_eq!(
        (tab_count("pending"), tab_count("approved")),
        (json!("2"), json!("0"))
    );
    let card = |id: &str| {
        tab.eval(&format!(
            "document.querySelector('#entry-{id}')?.innerText ?? ''"
        ))
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned()
    };
    let agent_card = card(&from_agent);
    assert!(
        agent_card.contains("Proposed by the agent claude-code"),
        "{agent_card}"
    );
    assert!(
        agent_card.contains("The user weighed the contract's value against weekend releases"),
        "{agent_card}"
    );
    let pipeline_card = card(&from_pipeline);
    let stored = relay.cli_json(&["knowledge", "show", &from_pipeline, "--json"]);
    let version = stored["prompt_version"].as_str().unwrap();
    assert!(version.starts_with("knowledge-v"), "{stored}");
    assert!(
        pipeline_card.contains("knowledge pipeline") && pipeline_card.contains(version),
        "{pipeline_card}"
    );
    assert!(
        pipeline_card.contains("Ana García"),
        "the pseudonym was put back before storing: {pipeline_card}"
    );
    assert!(
        pipeline_card.contains("Release rules for the team"),
        "its sources are named: {pipeline_card}"
    );
    shoot(&tab, &shots, "knowledge");

    // 4. A source is one click away: the thread opens at the turn.
    click_and_wait(
        &tab,
        &format!("#entry-{from_agent} li.source a"),
        &format!("location.pathname === '/threads/{tid}' && location.hash === '#turn-{mid}'"),
    );
    assert_eq!(
        tab.eval("document.querySelector(':target')?.id ?? ''")
            .unwrap(),
        json!(format!("turn-{mid}"))
    );
    assert!(
        tab.eval("document.querySelector(':target').innerText")
            .unwrap()
            .as_str()
            .unwrap()
            .contains("ana.garcia@example.org")
    );

    // 5. Approve the pipeline's entry: it moves to Approved, and the CLI and an agent see it approved.
    tab.navigate(&format!("{base}/knowledge")).unwrap();
    click_and_wait(
        &tab,
        &format!("#entry-{from_pipeline} button.approve"),
        "location.search.includes('done=approved')",
    );
    assert!(
        text_of(&tab).contains("Approved: “release timing”"),
        "{}",
        text_of(&tab)
    );
    assert_eq!(
        (tab_count("pending"), tab_count("approved")),
        (json!("1"), json!("1"))
    );
    assert_eq!(
        ids(&relay.cli_json(&["knowledge", "list", "--status", "approved", "--json"])),
        [from_pipeline.as_str()]
    );
    assert_eq!(
        approved_ids_seen_by_agent(&relay, &agent),
        [from_pipeline.as_str()]
    );
    // Search lists the approved entry above the hits, and the turns it cites say they were found through it.
    tab.navigate(&format!("{base}/search?q=friday+rollbacks"))
        .unwrap();
    let page = text_of(&tab);
    assert!(
        page.contains("Your approved knowledge") && page.contains("release timing"),
        "{page}"
    );
    assert!(
        page.contains("your approved knowledge, which cites it"),
        "{page}"
    );
    assert!(
        !page.contains("contract risk"),
        "a pending entry is not searched: {page}"
    );
    shoot(&tab, &shots, "search-knowledge");
    tab.navigate(&format!("{base}/knowledge")).unwrap();

    // 6. Reject the agent's proposal: it moves to Rejected and never reaches an agent.
    click_and_wait(
        &tab,
        &format!("#entry-{from_agent} button.danger"),
        "location.search.includes('done=rejected')",
    );
    assert_eq!(tab_count("pending"), json!("0"));
    assert!(text_of(&tab).contains("Nothing waits for you."));
    assert_eq!(
        ids(&relay.cli_json(&["knowledge", "list", "--status", "rejected", "--json"])),
        [from_agent.as_str()]
    );
    assert_eq!(
        approved_ids_seen_by_agent(&relay, &agent),
        [from_pipeline.as_str()]
    );

    // 7. Edit the approved entry on its page; the change persists and agents read the new words.
    click_and_wait(
        &tab,
        "nav.tabs a[href='/knowledge?status=approved']",
        "location.search.includes('status=approved')",
    );
    click_and_wait(
        &tab,
        &format!("#entry-{from_pipeline} a.button[href$='#edit']"),
        &format!("location.pathname === '/knowledge/{from_pipeline}'"),
    );
    tab.eval(
        "(() => { document.querySelector('#topic').value = 'Friday releases';
                  document.querySelector('#tags').value = 'releases, weekends'; return true; })()",
    )
    .unwrap();
    click_and_wait(
        &tab,
        "form.edit button[type=submit]",
        "location.search.includes('done=edited')",
    );
    assert_eq!(
        tab.eval("document.querySelector('h1').textContent")
            .unwrap(),
        json!("Friday releases")
    );
    let shown = relay.cli_json(&["knowledge", "show", &from_pipeline, "--json"]);
    assert_eq!(
        (shown["topic"].as_str(), shown["status"].as_str()),
        (Some("Friday releases"), Some("approved")),
        "{shown}"
    );
    assert_eq!(shown["tags"], json!(["releases", "weekends"]));
    let seen = mcp_call(
        &relay,
        &agent,
        "get_knowledge",
        json!({"query": "Friday releases"}),
    );
    assert_eq!(seen["entries"][0]["topic"], "Friday releases", "{seen}");
    shoot(&tab, &shots, "knowledge-entry");

    // 8. The Privacy page: every call (where it went, scrubbed, what was replaced) and every decision, no pseudonym.
    click_and_wait(
        &tab,
        "header nav a[href='/privacy']",
        "location.pathname === '/privacy'",
    );
    let rows = |kind: &str| {
        tab.eval(&format!(
            "document.querySelectorAll('table.audit tr[data-kind=\"{kind}\"]').length"
        ))
        .unwrap()
        .as_u64()
        .unwrap()
    };
    let calls = report["calls"].as_u64().unwrap();
    assert_eq!(rows("call"), calls, "one row per model call");
    assert_eq!(
        (rows("run"), rows("proposal"), rows("approval")),
        (1, 1, 3),
        "{}",
        text_of(&tab)
    );
    let first_call = tab
        .eval("document.querySelector('table.audit tr[data-kind=\"call\"]').innerText")
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        first_call.contains(&model.base) && first_call.contains("scrubbed"),
        "{first_call}"
    );
    assert!(
        first_call.contains("email") && first_call.contains("name"),
        "the replacements are counted: {first_call}"
    );
    let page = text_of(&tab);
    assert!(
        page.contains("The agent claude-code proposed “contract risk”"),
        "{page}"
    );
    assert!(!page.contains("Person_"), "no pseudonym is shown: {page}");
    shoot(&tab, &shots, "privacy-knowledge");

    // 9. A judge that answers in prose: the batch is dropped and the Knowledge page raises the alert.
    chatty.store(true, std::sync::atomic::Ordering::SeqCst);
    let more: Vec<Value> = [
        "We review every migration in pairs because a solo change once dropped a column in production.",
        "Pair review catches the destructive statements early.",
        "Yes — and the second reviewer always reads the rollback script too.",
        "Reading the rollback script is the step people skip.",
    ]
    .iter()
    .enumerate()
    .map(|(i, t)| turn(GPT, "reviews", personkit_testkit::alternating_role(i), t, Some(i as u32)))
    .collect();
    relay.http.send_batch(&device, &more);
    let failed = relay.cli_json(&["knowledge", "run", "--once", "--json"]);
    assert_eq!(failed["judge_failures"], 1, "{failed}");
    tab.navigate(&format!("{base}/knowledge")).unwrap();
    let alert = tab
        .eval("document.querySelector('[role=alert]')?.innerText ?? ''")
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        alert.contains("Alert:") && alert.contains("What to do:"),
        "{}",
        text_of(&tab)
    );
    assert_eq!(
        tab_count("pending"),
        json!("0"),
        "nothing the judge did not pass is filed"
    );
}
