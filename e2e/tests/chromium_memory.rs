//! The dashboard's Memory page in the real Chromium against the real relay: turns sent over HTTP on two sites
//! today and yesterday; the user writes a profile in the page's form, runs the short tier, forgets a thread and
//! runs it again, and reads the tier's history. What the page shows is checked against what an agent reads
//! (`GET /v1/context` with an agent token) and against the profile file on disk. The mid tier runs without a
//! configured model and must say so on the page, without losing the short version.
//!
//! The page is screenshotted in light and dark into `<target>/e2e-screenshots/memory-<unix time>/`;
//! `docs/screenshots/` holds one committed copy of each.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use personkit_e2e::chromium::{Chromium, LaunchOptions, Tab};
use personkit_e2e::page::{click_and_wait, eval_json, text_of};
use personkit_e2e::screenshots;
use personkit_shared::time::rfc3339;
use personkit_testkit::{Relay, alternating_role, temp_db, thread_id, turn_at};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(15);

/// The text of the short tier's section.
fn short_section(tab: &Tab) -> String {
    eval_json(
        tab,
        "document.querySelector('section[aria-labelledby=\"short-h\"]').innerText",
    )
    .as_str()
    .unwrap()
    .to_owned()
}

#[test]
fn memory_page_writes_the_profile_runs_tiers_and_shows_history_in_light_and_dark() {
    let shots = screenshots::run_dir("memory").unwrap();
    eprintln!("screenshots: {}", shots.display());
    let (dir, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let device = relay.pair_printed("laptop");
    let agent = relay.cli_json(&["agents", "add", "claude-code", "--json"])["token"]
        .as_str()
        .unwrap()
        .to_owned();

    // Three conversations: two today, one yesterday, each with a first prompt the digest quotes.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let convs = [
        (
            "browser-ext:chatgpt",
            "shed",
            "How deep should the footings of a garden shed be?",
            now - 40 * 60_000,
        ),
        (
            "browser-ext:claude",
            "tax",
            "Summarise the rules for deducting a home office",
            now - 20 * 60_000,
        ),
        (
            "browser-ext:claude",
            "yesterday",
            "Draft a polite note declining the Thursday meeting",
            now - 26 * 3_600_000,
        ),
    ];
    let mut items = Vec::new();
    for (site, conv, prompt, at) in convs {
        for i in 0..4u32 {
            let text = if i == 0 {
                prompt.to_owned()
            } else {
                format!("turn {i} about {conv}")
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

    // Sign in and follow the navigation to Memory.
    let browser = Chromium::launch(&LaunchOptions::default()).unwrap();
    let open = relay.cli_json(&["open", "--json"]);
    let tab = browser.open_tab(open["url"].as_str().unwrap()).unwrap();
    tab.wait_for(
        "location.pathname === '/' && document.readyState === 'complete'",
        WAIT,
    )
    .unwrap();
    let clicked = tab
        .eval("(() => { const a = document.querySelector('header nav a[href=\"/memory\"]'); if (!a) return false; a.click(); return true; })()")
        .unwrap();
    assert_eq!(clicked, json!(true), "{}", text_of(&tab));
    tab.wait_for(
        "location.pathname === '/memory' && document.readyState === 'complete'",
        WAIT,
    )
    .unwrap();
    assert_eq!(
        eval_json(
            &tab,
            "document.querySelector('header nav a[aria-current=\"page\"]').getAttribute('href')"
        ),
        json!("/memory")
    );
    let page = text_of(&tab);
    assert!(page.contains("No version yet."), "{page}");
    assert!(page.contains("Last run\nnever"), "{page}");

    // The profile, written in the page's form: saved to the file agents' context starts with.
    let profile = "# About me\n\nI build garden furniture on weekends.\n\n## How to work with me\n\n- Answer in metric units.\n- Keep replies short.";
    tab.eval(&format!(
        "document.querySelector('#profile-text').value = {}",
        serde_json::to_string(profile).unwrap()
    ))
    .unwrap();
    click_and_wait(
        &tab,
        "form.profile button[type=submit]",
        "location.search.includes('done=profile')",
        WAIT,
    )
    .unwrap();
    assert!(
        text_of(&tab).contains("Profile saved."),
        "{}",
        text_of(&tab)
    );
    let on_disk = std::fs::read_to_string(dir.path().join(".dotperson/profile.md")).unwrap();
    assert_eq!(on_disk.trim_end(), profile);
    assert_eq!(
        eval_json(&tab, "document.querySelector('#profile-text').value")
            .as_str()
            .unwrap()
            .trim_end(),
        profile,
        "the form shows the saved profile"
    );
    let ctx = relay.http.get("/v1/context?tier=1", Some(&agent));
    assert_eq!(ctx.status, 200, "{}", ctx.body);
    assert!(
        ctx.json()["text"]
            .as_str()
            .unwrap()
            .contains("Answer in metric units."),
        "{}",
        ctx.body
    );

    // Short, run now: the page shows the version, quoting each conversation's first prompt.
    click_and_wait(
        &tab,
        "section[aria-labelledby=\"short-h\"] form button[type=submit]",
        "location.search.includes('done=ran')",
        WAIT,
    )
    .unwrap();
    let short = short_section(&tab);
    assert!(short.contains("Version 1"), "{short}");
    for (_, _, prompt, _) in convs {
        assert!(short.contains(prompt), "{prompt} in {short}");
    }
    assert!(short.contains("manual"), "{short}");
    let ctx = relay.http.get("/v1/context?tier=2", Some(&agent)).json();
    assert!(
        ctx["text"].as_str().unwrap().contains("garden shed be?"),
        "{ctx}"
    );

    // Mid has no model configured here: the page says what went wrong and what to do; short keeps its version.
    click_and_wait(
        &tab,
        "section[aria-labelledby=\"mid-h\"] form button[type=submit]",
        "!!document.querySelector('main')",
        WAIT,
    )
    .unwrap();
    let after_mid = text_of(&tab);
    assert!(
        after_mid.contains("That did not work") && after_mid.contains("[llm]"),
        "the page says a model is needed and where to set it: {after_mid}"
    );
    tab.navigate(&format!("{}/memory", relay.base)).unwrap();
    tab.wait_for("document.readyState === 'complete'", WAIT)
        .unwrap();
    assert!(short_section(&tab).contains("Version 1"));

    // Forgetting a thread withdraws the version that quoted it; running again leaves it out.
    let tax = thread_id("browser-ext:claude", "tax");
    relay
        .cli(&["forget", "--thread", &tax, "--yes", "--json"])
        .ok();
    tab.navigate(&format!("{}/memory", relay.base)).unwrap();
    tab.wait_for("document.readyState === 'complete'", WAIT)
        .unwrap();
    let short = short_section(&tab);
    assert!(short.contains("1 version(s)"), "withdrawn: {short}");
    assert!(!short.contains("home office"), "{short}");
    click_and_wait(
        &tab,
        "section[aria-labelledby=\"short-h\"] form button[type=submit]",
        "location.search.includes('done=ran')",
        WAIT,
    )
    .unwrap();
    let short = short_section(&tab);
    assert!(short.contains("Version 2"), "{short}");
    assert!(short.contains("garden shed be?"), "{short}");
    assert!(!short.contains("home office"), "forgotten: {short}");
    let ctx = relay.http.get("/v1/context?tier=2", Some(&agent)).json();
    assert!(
        !ctx["text"].as_str().unwrap().contains("home office"),
        "{ctx}"
    );
    screenshots::shoot(&tab, &shots, "memory").unwrap();

    // History: both versions listed, the first withdrawn, the second shown.
    let clicked = tab
        .eval("(() => { const a = document.querySelector('section[aria-labelledby=\"short-h\"] a[href=\"/memory/short\"]'); if (!a) return false; a.click(); return true; })()")
        .unwrap();
    assert_eq!(clicked, json!(true));
    tab.wait_for(
        "location.pathname === '/memory/short' && document.readyState === 'complete'",
        WAIT,
    )
    .unwrap();
    let rows: Vec<(String, String)> = serde_json::from_value(eval_json(
        &tab,
        "[...document.querySelectorAll('table.versions tbody tr')].map(tr => [tr.cells[0].innerText, tr.cells[4].innerText])",
    ))
    .unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0].0, "#2");
    assert_eq!(rows[1].0, "#1");
    assert!(rows[1].1.starts_with("withdrawn"), "{rows:?}");
    assert!(rows[0].1.is_empty(), "{rows:?}");
    let history = text_of(&tab);
    assert!(history.contains("Version 2"), "{history}");
    assert!(
        history.contains("was withdrawn and its text is gone"),
        "no diff against a blank text: {history}"
    );
    assert_eq!(
        eval_json(
            &tab,
            "document.querySelectorAll('pre.diff ins, pre.diff del').length"
        ),
        json!(0)
    );
    // The withdrawn version's text is gone from its own page too.
    let clicked = tab
        .eval("(() => { const a = [...document.querySelectorAll('table.versions a')].find(a => a.innerText === '#1'); if (!a) return false; a.click(); return true; })()")
        .unwrap();
    assert_eq!(clicked, json!(true));
    tab.wait_for(
        "document.readyState === 'complete' && location.search.startsWith('?v=')",
        WAIT,
    )
    .unwrap();
    let v1 = text_of(&tab);
    assert!(v1.contains("Withdrawn"), "{v1}");
    assert!(!v1.contains("home office"), "{v1}");
    tab.navigate(&format!("{}/memory/short", relay.base))
        .unwrap();
    tab.wait_for("document.readyState === 'complete'", WAIT)
        .unwrap();
    screenshots::shoot(&tab, &shots, "memory-history").unwrap();
}
