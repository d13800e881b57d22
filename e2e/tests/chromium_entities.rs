//! The dashboard's entity pages in the real Chromium against the real relay: chats sent over HTTP on two sites
//! over three days (one names a model and links a documentation site), Claude Code sessions in two project
//! folders on two days read by `personkit harvest --once`, and commits of a git repository made by the test read
//! by `personkit events harvest`; `personkit graph build` derives the graph. From a session's thread page the
//! "About" link leads to its project; the page's relations, threads and timeline must equal what the read API
//! (`GET /v1/entities/{id}`) says, and the timeline's bars the sources per day that were sent. The repository's
//! page lists its commits as events and its author as related.
//!
//! Last, names a model found (`personkit graph extract` against a stand-in for a remote model) are listed on the
//! Entities page, and approving one there makes it an entity.
//!
//! Screenshots in light and dark into `<target>/e2e-screenshots/entities-<unix time>/`; `docs/screenshots/` holds
//! one committed copy of each.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use personkit_e2e::chromium::{Chromium, LaunchOptions};
use personkit_e2e::page::{click_and_wait, eval_json, text_of};
use personkit_e2e::screenshots;
use personkit_shared::time::rfc3339;
use personkit_testkit::standin::{StandIn, chat as standin_chat};
use personkit_testkit::{Relay, alternating_role, claude_code_line, cli, git, temp_db, turn_at};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(15);
const DAY_MS: i64 = 86_400_000;

#[test]
fn entity_pages_show_relations_threads_events_and_a_timeline_in_light_and_dark() {
    let shots = screenshots::run_dir("entities").unwrap();
    eprintln!("screenshots: {}", shots.display());
    let (dir, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let device = relay.pair_printed("laptop");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let day_of = |ms: i64| rfc3339(ms)[..10].to_owned();

    // Chats over three days.
    let mut items = Vec::new();
    for (ago, site, conv, first) in [
        (
            2,
            "browser-ext:chatgpt",
            "deploy",
            "How do I run orbit as a service? See https://docs.rs/tokio",
        ),
        (
            1,
            "browser-ext:claude",
            "soup",
            "A lentil soup like https://www.bbc.co.uk/food/lentil",
        ),
        (
            0,
            "browser-ext:chatgpt",
            "names",
            "Names for a launcher, answered by gpt-4o",
        ),
    ] {
        let at = now - ago * DAY_MS - 3_600_000;
        for i in 0..2u32 {
            let text = if i == 0 {
                first.to_owned()
            } else {
                "an answer".to_owned()
            };
            items.push(turn_at(
                site,
                conv,
                alternating_role(i as usize),
                &text,
                Some(i),
                None,
                &rfc3339(at + i64::from(i) * 1000),
            ));
        }
    }
    let r = relay.http.send_batch(&device, &items);
    assert_eq!(r["rejected"], 0, "{r}");

    // Claude Code sessions: orbit on two days, kite on one.
    let home = dir.path().join("home");
    let mut orbit_days: BTreeMap<String, u64> = BTreeMap::new();
    for (folder, session, ago) in [
        (
            "-home-ada-src-orbit",
            "11111111-1111-4111-8111-111111111111",
            1,
        ),
        (
            "-home-ada-src-orbit",
            "22222222-2222-4222-8222-222222222222",
            0,
        ),
        (
            "-home-ada-src-kite",
            "33333333-3333-4333-8333-333333333333",
            0,
        ),
    ] {
        let at_ms = now - ago * DAY_MS - 1_800_000;
        let at = rfc3339(at_ms);
        let f = home.join(".claude/projects").join(folder);
        std::fs::create_dir_all(&f).unwrap();
        let lines: Vec<String> = (0..4)
            .map(|i| claude_code_line(session, i, &format!("step {i} of {folder}"), &at))
            .collect();
        std::fs::write(f.join(format!("{session}.jsonl")), lines.join("\n") + "\n").unwrap();
        if folder.ends_with("orbit") {
            *orbit_days.entry(day_of(at_ms)).or_default() += 1;
        }
    }
    assert!(
        cli(&db, &["harvest", "enable", "claude-code"])
            .status
            .success()
    );
    let pass = cli(
        &db,
        &["harvest", "--once", "--home", &home.display().to_string()],
    );
    assert!(pass.status.success(), "{}", pass.stderr);

    // A repository with three commits over two days.
    let repo = dir.path().join("atlas");
    std::fs::create_dir(&repo).unwrap();
    let first_day = rfc3339(now - DAY_MS);
    git(&repo, &["init", "-q", "-b", "main"], &first_day);
    for (i, (file, msg, when)) in [
        ("a.txt", "Start atlas", rfc3339(now - DAY_MS)),
        (
            "b.txt",
            "Add the map loader",
            rfc3339(now - DAY_MS + 60_000),
        ),
        ("c.txt", "Draw the coastlines", rfc3339(now - 120_000)),
    ]
    .into_iter()
    .enumerate()
    {
        std::fs::write(repo.join(file), format!("line {i}\n")).unwrap();
        git(&repo, &["add", file], &when);
        git(&repo, &["commit", "-q", "-m", msg], &when);
    }
    assert!(cli(&db, &["events", "enable", "git"]).status.success());
    let added = cli(&db, &["events", "add-path", "git", repo.to_str().unwrap()]);
    assert!(added.status.success(), "{}", added.stderr);
    let harvested = cli(&db, &["events", "harvest", "--json"]);
    assert!(harvested.status.success(), "{}", harvested.stderr);
    let built = relay.cli_json(&["graph", "build", "--json"]);
    assert_eq!(built["more"], false, "{built}");

    // Sign in and open a kite session's neighbour: the orbit session of today, from the thread list.
    let browser = Chromium::launch(&LaunchOptions::default()).unwrap();
    let open = relay.cli_json(&["open", "--json"]);
    let tab = browser.open_tab(open["url"].as_str().unwrap()).unwrap();
    tab.wait_for(
        "location.pathname === '/' && document.readyState === 'complete'",
        WAIT,
    )
    .unwrap();
    let orbit_thread = relay.cli_json(&["graph", "list", "--kind", "project", "--json"]);
    let orbit = orbit_thread
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "orbit")
        .unwrap_or_else(|| panic!("no orbit project: {orbit_thread}"))
        .clone();
    let orbit_id = orbit["id"].as_str().unwrap().to_owned();
    let api = relay.http.get(
        &format!("/v1/entities/{orbit_id}?threads=50"),
        Some(&device),
    );
    assert_eq!(api.status, 200, "{}", api.body);
    let api = api.json();
    let session = api["threads"][0]["thread_id"].as_str().unwrap().to_owned();
    tab.navigate(&format!("{}/threads/{session}", relay.base))
        .unwrap();
    tab.wait_for("document.readyState === 'complete'", WAIT)
        .unwrap();
    let about: Vec<String> = serde_json::from_value(eval_json(
        &tab,
        "[...document.querySelectorAll('#thread-entities a')].map(a => a.innerText)",
    ))
    .unwrap();
    assert!(about.contains(&"orbit".to_owned()), "{about:?}");
    click_and_wait(
        &tab,
        &format!("#thread-entities a[href=\"/entities/{orbit_id}\"]"),
        "location.pathname.startsWith('/entities/')",
        WAIT,
    )
    .unwrap();
    assert_eq!(
        eval_json(&tab, "document.querySelector('h1').innerText"),
        json!("orbit")
    );
    assert_eq!(
        eval_json(&tab, "document.querySelector('#entity-head').dataset.kind"),
        json!("project")
    );

    // The page says what the API says: relations, threads, and a bar per day with its sources.
    let rows: Vec<(String, String)> = serde_json::from_value(eval_json(
        &tab,
        "[...document.querySelectorAll('table.relations tbody tr')].map(tr => [tr.dataset.predicate, tr.cells[1].innerText])",
    ))
    .unwrap();
    assert!(
        rows.contains(&("uses".to_owned(), "Claude Code".to_owned())),
        "{rows:?}"
    );
    assert_eq!(
        rows.len(),
        api["relations"].as_array().unwrap().len(),
        "{rows:?}"
    );
    let threads: Vec<String> = serde_json::from_value(eval_json(
        &tab,
        "[...document.querySelectorAll('table.threads tbody a')].map(a => a.getAttribute('href'))",
    ))
    .unwrap();
    assert_eq!(threads.len(), 2, "two orbit sessions: {threads:?}");
    assert_eq!(api["thread_count"], 2);
    let bars: BTreeMap<String, u64> =
        serde_json::from_value::<Vec<(String, u64)>>(eval_json(
            &tab,
            "[...document.querySelectorAll('svg.timeline g.day')].map(g => [g.dataset.day, +g.dataset.sources])",
        ))
        .unwrap()
        .into_iter()
        .collect();
    let api_days: BTreeMap<String, u64> = api["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["day"].as_str().unwrap().to_owned(),
                d["sources"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(bars, api_days);
    assert_eq!(
        bars.keys().collect::<Vec<_>>(),
        orbit_days.keys().collect::<Vec<_>>(),
        "a bar for each day an orbit session ran"
    );
    screenshots::shoot(&tab, &shots, "entity-project").unwrap();

    // Claude Code, one click on: the tool, its maker, both projects.
    click_and_wait(
        &tab,
        "table.relations td.title a",
        "location.pathname.startsWith('/entities/')",
        WAIT,
    )
    .unwrap();
    let page = text_of(&tab);
    assert!(page.contains("Anthropic"), "{page}");
    assert!(page.contains("kite") && page.contains("orbit"), "{page}");

    // The repository: its commits as events, its author related.
    let repos = relay.cli_json(&["graph", "list", "--kind", "repository", "--json"]);
    let atlas = repos
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "atlas")
        .unwrap_or_else(|| panic!("no atlas repository: {repos}"))
        .clone();
    tab.navigate(&format!(
        "{}/entities/{}",
        relay.base,
        atlas["id"].as_str().unwrap()
    ))
    .unwrap();
    tab.wait_for("document.readyState === 'complete'", WAIT)
        .unwrap();
    let events: Vec<String> = serde_json::from_value(eval_json(
        &tab,
        "[...document.querySelectorAll('table.events tbody tr')].map(tr => tr.cells[0].innerText)",
    ))
    .unwrap();
    assert_eq!(
        events,
        ["git.commit", "git.commit", "git.commit"],
        "{}",
        text_of(&tab)
    );
    let page = text_of(&tab);
    assert!(page.contains("Ada Lovelace"), "{page}");
    assert!(
        !page.contains("ada@example.org"),
        "no e-mail address: {page}"
    );
    screenshots::shoot(&tab, &shots, "entity-repository").unwrap();

    // The list of entities, from the navigation.
    click_and_wait(
        &tab,
        "header nav a[href=\"/entities\"]",
        "location.pathname === '/entities'",
        WAIT,
    )
    .unwrap();
    let listed = text_of(&tab);
    for name in ["orbit", "kite", "atlas", "Claude Code", "ChatGPT"] {
        assert!(listed.contains(name), "{name} in {listed}");
    }
    screenshots::shoot(&tab, &shots, "entities").unwrap();

    // Names a model finds. `personkit graph extract` asks a stand-in for an OpenAI-compatible server (a remote
    // model cannot run here) that names the person (by the pseudonym it was sent: scrubbing is on) and the company
    // wherever their words are in the request (and the raw first name, should it ever arrive unscrubbed); the Entities page lists the proposals with Approve and
    // Reject, and approving one makes it an entity with the chat it came from.
    let chat = vec![turn_at(
        "browser-ext:claude",
        "launch",
        alternating_role(0),
        "Ask Priya Raman at Acme Corporation which launcher name to pick; we build it with tokio.",
        Some(0),
        None,
        &rfc3339(now - 600_000),
    )];
    assert_eq!(relay.http.send_batch(&device, &chat)["rejected"], 0);
    let server = StandIn::start_replies(|_, seen| {
        let text = standin_chat::messages_text(seen);
        let mut names = Vec::new();
        if text.contains("Person_") {
            let p = standin_chat::person_in(&text, "nobody");
            names.push(json!({"name": p, "kind": "person", "turn": 1, "confidence": "high"}));
        }
        if text.contains("Acme Corporation") {
            names.push(json!({"name": "Acme Corporation", "kind": "organisation", "turn": 1, "confidence": "medium"}));
        }
        if text.contains("Priya") {
            names.push(json!({"name": "Priya", "kind": "person", "turn": 1, "confidence": "low"}));
        }
        standin_chat::completion(&json!({ "names": names }).to_string())
    });
    std::fs::write(
        db.parent().unwrap().join("config.toml"),
        format!(
            "[llm]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"stand-in\"\n\n[knowledge]\nscrub = \"on\"\n",
            server.base
        ),
    )
    .unwrap();
    let extracted = relay.cli_json(&["graph", "extract", "--calls", "100", "--json"]);
    assert_eq!(extracted["failed"], 0, "{extracted}");
    assert!(extracted["proposed"].as_u64().unwrap() >= 2, "{extracted}");
    for s in server.seen.lock().unwrap().iter() {
        let sent = standin_chat::messages_text(s);
        assert!(
            !sent.contains("Priya Raman"),
            "scrubbed before it left: {sent}"
        );
    }
    let waiting = relay.http.get("/v1/graph/proposals", Some(&device)).json();
    let mut api_names: Vec<String> = waiting["proposals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    api_names.sort();
    assert_eq!(api_names, ["Acme Corporation", "Priya Raman"], "{waiting}");
    tab.navigate(&format!("{}/entities", relay.base)).unwrap();
    tab.wait_for("document.readyState === 'complete'", WAIT)
        .unwrap();
    let mut shown: Vec<String> = serde_json::from_value(eval_json(
        &tab,
        "[...document.querySelectorAll('#proposals tbody tr')].map(tr => tr.cells[0].innerText)",
    ))
    .unwrap();
    shown.sort();
    assert_eq!(shown, api_names);
    screenshots::shoot(&tab, &shots, "entity-proposals").unwrap();
    click_and_wait(
        &tab,
        "#proposals button[aria-label=\"Approve: Priya Raman\"]",
        "location.search.includes('done=approved')",
        WAIT,
    )
    .unwrap();
    let page = text_of(&tab);
    assert!(
        page.contains("Approved: Priya Raman is now an entity"),
        "{page}"
    );
    assert_eq!(
        eval_json(
            &tab,
            "document.querySelectorAll('#proposals tbody tr').length"
        ),
        json!(1),
        "Acme Corporation still waits"
    );
    let people = relay.cli_json(&["graph", "list", "--kind", "person", "--json"]);
    let priya = people
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "Priya Raman")
        .unwrap_or_else(|| panic!("no Priya Raman: {people}"))
        .clone();
    tab.navigate(&format!(
        "{}/entities/{}",
        relay.base,
        priya["id"].as_str().unwrap()
    ))
    .unwrap();
    tab.wait_for("document.readyState === 'complete'", WAIT)
        .unwrap();
    assert_eq!(
        eval_json(&tab, "document.querySelector('#entity-head').dataset.kind"),
        json!("person")
    );
    let launch = personkit_testkit::thread_id("browser-ext:claude", "launch");
    let threads: Vec<String> = serde_json::from_value(eval_json(
        &tab,
        "[...document.querySelectorAll('table.threads tbody a')].map(a => a.getAttribute('href'))",
    ))
    .unwrap();
    assert_eq!(threads, [format!("/threads/{launch}")]);
}
