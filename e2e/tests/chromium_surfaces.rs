//! The surfaces beyond the first four (e2e/fixtures/<surface>/ for every registry surface except chatgpt, claude,
//! gemini, copilot), end to end in the real Chromium with the built extension and the real relay: one browser
//! session, every surface turned on in the popup (the experimental ones after the "Experimental surfaces" flag),
//! every case of every surface checked against its `expected.json` (exact text: tables, maths, code, lists,
//! placeholders, labels and reasoning blocks as the core renders them). The fixture pages stand in for the live
//! sites, which cannot be reached from here; each says where its markup comes from. `E2E_CASE=grok/formatting`
//! runs one case.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_e2e::fixtures::{self, Case};
use personkit_e2e::session::Session;

const FIRST_FOUR: [&str; 4] = ["chatgpt", "claude", "gemini", "copilot"];

/// Every surface file's name (`grok`, …) with its status, from the registry files themselves.
fn registry_surfaces() -> Vec<(String, String)> {
    let dir = personkit_e2e::workspace_root().join("shared/surfaces");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        if path.extension().is_none_or(|e| e != "json") || name.starts_with('_') {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        out.push((name, v["status"].as_str().unwrap().to_owned()));
    }
    out.sort();
    out
}

#[test]
fn every_other_surface_captures_its_fixtures_faithfully() {
    let only = std::env::var("E2E_CASE").ok();
    let surfaces: Vec<(String, String)> = registry_surfaces()
        .into_iter()
        .filter(|(n, _)| !FIRST_FOUR.contains(&n.as_str()))
        .collect();
    assert_eq!(
        surfaces.len(),
        17,
        "the registry should hold 17 surfaces beyond the first four"
    );
    let mut cases: Vec<Case> = Vec::new();
    for (name, _) in &surfaces {
        let found = fixtures::cases(name).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        assert!(!found.is_empty(), "surface {name} has no fixture case");
        cases.extend(found);
    }
    cases.retain(|c| only.as_deref().is_none_or(|o| o == c.name));
    if cases.is_empty() {
        assert!(only.is_some());
        return;
    }
    let session = Session::start(&[]).unwrap();
    session.set_experimental(true).unwrap();
    let mut wanted: Vec<String> = cases.iter().map(|c| c.expected.surface.clone()).collect();
    wanted.dedup();
    for s in &wanted {
        session.set_surface(s, true).unwrap();
    }
    let mut failures = Vec::new();
    // Threads of the cases run so far: a surface's earlier cases stay stored.
    let mut known_threads = Vec::new();
    for case in &cases {
        known_threads.extend(case.thread_ids());
        let problems = match session.check(case) {
            Ok(p) => p,
            Err(e) => vec![format!("harness error: {e:#}")],
        };
        if problems.is_empty() {
            eprintln!("ok    {}", case.name);
        } else {
            eprintln!("FAIL  {}", case.name);
            failures.push(format!("{}:\n  - {}", case.name, problems.join("\n  - ")));
        }
        let all = session.messages(&case.expected.surface).unwrap();
        let strays = fixtures::strays(&all, &known_threads);
        if !strays.is_empty() {
            failures.push(format!(
                "{}: {} message(s) under unknown threads",
                case.name,
                strays.len()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A redesigned site: a Grok conversation page whose text is on screen but whose markup the adapter no longer
/// knows. Nothing is captured; at once the badge says "0 of ? read" and the popup lists the conversation as
/// unreadable, and within seconds (the test's fast timings: yellow after 2 s of failing reads) the popup's Grok
/// light says `adapter_stale`; a readable Grok page shows its completeness on the badge (`4/4`).
#[test]
fn a_redesigned_page_turns_the_surface_stale_and_the_badge_counts_turns() {
    let session = Session::start(&["browser-ext:grok"]).unwrap();
    let good = fixtures::cases("grok").unwrap().remove(0);
    assert!(session.check(&good).unwrap().is_empty());
    let tab = session.open_case(&good).unwrap();
    tab.wait_for(
        "(() => { const b = document.querySelector('#personkit-badge'); return !!b && b.dataset.shown === '4' && b.dataset.captured === '4' && b.dataset.rule === 'message_roots[0]'; })()",
        std::time::Duration::from_secs(15),
    )
    .expect("the badge shows 4/4 captured and the matching rule");
    let _ = tab.close();
    let case = Session::scenario_case("scenarios/grok_redesigned").unwrap();
    let tab = session.open_case(&case).unwrap();
    // On the first visit, within seconds and before the stale period: the badge says the page's turns are not read.
    let opened = std::time::Instant::now();
    tab.wait_for(
        "(() => { const b = document.querySelector('#personkit-badge'); return !!b && b.dataset.health === 'unread' && b.shadowRoot.querySelector('button').textContent === 'PK 0 of ? read'; })()",
        std::time::Duration::from_secs(10),
    )
    .expect("the badge says 0 of ? read");
    assert!(opened.elapsed() < std::time::Duration::from_secs(10));
    session.popup.reload().unwrap();
    session
        .popup
        .wait_for(
            "[...document.querySelectorAll('#incomplete-list li[data-surface=\"browser-ext:grok\"] .why')].some((e) => e.textContent.includes('0 of ? read'))",
            std::time::Duration::from_secs(10),
        )
        .expect("the popup lists the unreadable conversation");
    session
        .popup
        .wait_for(
            "document.querySelector('[data-health=\"browser-ext:grok\"]')?.dataset.reason === 'adapter_stale'",
            std::time::Duration::from_secs(30),
        )
        .expect("the popup shows Grok as adapter_stale");
    let status = session
        .popup
        .eval("document.querySelector('[data-health=\"browser-ext:grok\"]').dataset.status")
        .unwrap();
    assert!(status == "yellow" || status == "red", "{status}");
    // The worker told the relay: its capture health says the same (the Grok turns of the readable page were
    // accepted a moment ago, so only the stale adapter can make it yellow).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let relay_grok = loop {
        let health = session.relay_capture_health().unwrap();
        let grok = health["surfaces"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["surface"] == "browser-ext:grok")
            .cloned()
            .unwrap_or_default();
        if grok["reason"] == "adapter_stale" || std::time::Instant::now() > deadline {
            break grok;
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    assert_eq!(relay_grok["reason"], "adapter_stale", "{relay_grok}");
    assert_eq!(relay_grok["status"], "yellow", "{relay_grok}");
    assert!(relay_grok["stale_since"].is_string(), "{relay_grok}");
    let tid = personkit_shared::thread_id("browser-ext:grok", "redesign-0001").to_string();
    let stored = session.messages("browser-ext:grok").unwrap();
    assert!(
        stored.iter().all(|m| m.thread_id != tid),
        "nothing is captured from the unreadable page"
    );
    let _ = tab.close();
}

/// Grok inside X (`x.com/i/grok?conversation=<id>`): matched under that path only, the conversation taken from the
/// query, and the page URL kept with that one parameter (the page reuses grok.com markup: X's is not public).
#[test]
fn grok_inside_x_is_captured_under_the_conversation_its_query_names() {
    let session = Session::start(&["browser-ext:grok"]).unwrap();
    let case = Session::scenario_case("scenarios/grok_on_x").unwrap();
    let problems = session.check(&case).unwrap();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let cid = &case.expected.conversations[0].id;
    let tid = personkit_shared::thread_id("browser-ext:grok", cid).to_string();
    let thread = session.relay_get(&format!("/v1/threads/{tid}")).unwrap();
    assert_eq!(
        thread["thread"]["url"],
        format!("https://x.com/i/grok?conversation={cid}"),
        "{thread}"
    );
    // The popup's link to the library finds it from the page address.
    let url = format!("https://x.com/i/grok?conversation={cid}");
    let by_url = session
        .relay_get(&format!(
            "/v1/threads/by-url?url={}",
            url.replace('?', "%3F").replace('=', "%3D")
        ))
        .unwrap();
    assert_eq!(by_url["thread"]["id"], tid, "{by_url}");
}

/// Surfaces whose long case runs the full 500 turns by default (one verified with a message key, one verified
/// without, one experimental); the others run 60, or 500 too with `E2E_LONG_TURNS=500`.
const FULL_LONG: [&str; 3] = ["grok", "perplexity", "deepseek"];

/// The generated cases (`personkit_e2e::generated`) on the markup of every surface beyond the first four: a long
/// virtualised thread (each turn once, in order), a streaming answer that pauses for over 600 ms and is re-rendered
/// whole, edited and regenerated turns, secrets redacted before they leave the browser, single-page navigation to
/// another conversation, and formatting where the surface has no hand-written case for it. LMArena's run on its
/// battle markup (every answer on both sides); Pi's, whose one conversation is the day, each get a relay of their
/// own. `E2E_SURFACE=grok` runs one surface.
#[test]
fn every_other_surface_handles_the_generated_cases() {
    use personkit_e2e::generated::{self, Plan};
    let only = std::env::var("E2E_SURFACE").ok();
    let long_all: Option<usize> = std::env::var("E2E_LONG_TURNS")
        .ok()
        .and_then(|v| v.parse().ok());
    let out = tempfile::tempdir().unwrap();
    let mut cases: Vec<Case> = Vec::new();
    let mut own_session: Vec<Case> = Vec::new();
    for (name, _) in registry_surfaces() {
        if FIRST_FOUR.contains(&name.as_str()) || only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let long_turns = long_all.unwrap_or(if FULL_LONG.contains(&name.as_str()) {
            500
        } else {
            60
        });
        let generated = generated::cases(&name, out.path(), Plan { long_turns })
            .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        if generated::one_conversation_per_day(&name) {
            own_session.extend(generated);
        } else {
            cases.extend(generated);
        }
    }
    if cases.is_empty() && own_session.is_empty() {
        assert!(only.is_some());
        return;
    }
    let mut failures = Vec::new();
    let run = |session: &Session, case: &Case, failures: &mut Vec<String>| {
        let started = std::time::Instant::now();
        let problems = match session.check(case) {
            Ok(p) => p,
            Err(e) => vec![format!("harness error: {e:#}")],
        };
        if problems.is_empty() {
            eprintln!(
                "ok    {} ({:.1} s)",
                case.name,
                started.elapsed().as_secs_f64()
            );
        } else {
            eprintln!("FAIL  {}", case.name);
            failures.push(format!("{}:\n  - {}", case.name, problems.join("\n  - ")));
        }
    };
    let start = |surfaces: &[String]| {
        let session = Session::start(&[]).unwrap();
        session.set_experimental(true).unwrap();
        for s in surfaces {
            session.set_surface(s, true).unwrap();
        }
        session
    };
    if !cases.is_empty() {
        let mut wanted: Vec<String> = cases.iter().map(|c| c.expected.surface.clone()).collect();
        wanted.dedup();
        let session = start(&wanted);
        let mut known: Vec<String> = Vec::new();
        for case in &cases {
            run(&session, case, &mut failures);
            known.extend(case.thread_ids());
            let all = session.messages(&case.expected.surface).unwrap();
            let strays = fixtures::strays(&all, &known);
            if !strays.is_empty() {
                failures.push(format!(
                    "{}: {} message(s) under unknown threads",
                    case.name,
                    strays.len()
                ));
            }
        }
    }
    for case in &own_session {
        let session = start(std::slice::from_ref(&case.expected.surface));
        run(&session, case, &mut failures);
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
