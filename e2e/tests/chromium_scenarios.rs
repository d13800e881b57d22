//! Behaviour of the extension in the real Chromium beyond "the right turns land": the origin negative control,
//! the popup screenshot, opt-in toggles, the kill switch, skipping a conversation from the badge, relay outage,
//! a terminated service worker, and a revoked token. Each test has a positive control so that "nothing was
//! captured" cannot pass merely because capture is broken.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use personkit_e2e::fixtures::{self, Case};
use personkit_e2e::session::{LAND_TIMEOUT, SETTLE, Session, wait_fixture_done};

const CHATGPT: &str = "browser-ext:chatgpt";
const CLAUDE: &str = "browser-ext:claude";

fn case(name: &str) -> Case {
    let (surface, case) = name.split_once('/').unwrap();
    fixtures::cases(surface)
        .unwrap()
        .into_iter()
        .find(|c| c.name.ends_with(&format!("/{case}")))
        .unwrap()
}

fn assert_landed(s: &Session, c: &Case) {
    let problems = s.wait_landed(c, LAND_TIMEOUT).unwrap();
    assert!(
        problems.is_empty(),
        "{} did not land as expected:\n{}",
        c.name,
        problems.join("\n")
    );
}

fn assert_nothing_for(s: &Session, c: &Case, why: &str) {
    let threads = c.thread_ids();
    let stored: Vec<_> = s
        .messages(&c.expected.surface)
        .unwrap()
        .into_iter()
        .filter(|m| threads.contains(&m.thread_id))
        .collect();
    assert!(
        stored.is_empty(),
        "{why}: {} turn(s) of {} were captured anyway",
        stored.len(),
        c.name
    );
}

/// The same page under `https://127.0.0.1:<port>/...` triggers no capture (no badge, nothing stored), while
/// under `https://chatgpt.com/...` it does; the popup is screenshotted (into the target dir, or docs/popup.png with PERSONKIT_UPDATE_SCREENSHOT=1).
#[test]
fn negative_control_and_popup_screenshot() {
    let s = Session::start(&[CHATGPT]).unwrap();
    let c = case("chatgpt/short");
    s.serve_case(&c);
    let ip_tab = s
        .browser
        .open_tab(&format!(
            "https://127.0.0.1:{}{}",
            s.server.port, c.expected.path
        ))
        .unwrap();
    wait_fixture_done(&ip_tab, &c).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        Session::badge_state(&ip_tab).unwrap(),
        None,
        "the badge must not appear on a non-site origin"
    );
    assert_nothing_for(&s, &c, "a page on https://127.0.0.1 is not chatgpt.com");
    // Positive control: the same page under the real origin is captured and shows the badge.
    let tab = s.open_case(&c).unwrap();
    assert_landed(&s, &c);
    assert_eq!(
        Session::badge_state(&tab).unwrap().as_deref(),
        Some("capturing")
    );

    // The popup, paired, with ChatGPT on: screenshot for the README.
    s.popup.reload().unwrap();
    s.popup.call("Emulation.setDeviceMetricsOverride", serde_json::json!({"width": 376, "height": 770, "deviceScaleFactor": 1, "mobile": false})).unwrap();
    s.popup
        .wait_for(
            "(document.querySelector('#pair-status')?.textContent || '').includes('Paired')",
            Duration::from_secs(10),
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let png = s.popup.screenshot().unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 5_000,
        "screenshot is not a real PNG ({} bytes)",
        png.len()
    );
    // Each run's screenshot goes to the target dir (the port in it changes every run); set
    // PERSONKIT_UPDATE_SCREENSHOT=1 to refresh the committed docs/popup.png.
    let out = if std::env::var_os("PERSONKIT_UPDATE_SCREENSHOT").is_some() {
        personkit_e2e::workspace_root().join("docs/popup.png")
    } else {
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("popup.png")
    };
    std::fs::write(&out, &png).unwrap();
    eprintln!("popup screenshot: {} ({} bytes)", out.display(), png.len());
}

/// A surface the user has not turned on captures nothing; the kill switch pauses every surface; skipping a
/// conversation from the badge stops that conversation only.
#[test]
fn toggled_off_kill_switch_and_skip_capture_nothing() {
    let s = Session::start(&[CHATGPT]).unwrap();

    // 1. Claude is off (all surfaces are opt-in): nothing lands, the badge (if any) says off.
    let claude = case("claude/short");
    let tab = s.open_case(&claude).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let badge = Session::badge_state(&tab).unwrap();
    assert!(
        badge.is_none() || badge.as_deref() == Some("off"),
        "badge on a surface that is off: {badge:?}"
    );
    assert_nothing_for(&s, &claude, "Claude is toggled off");
    // Positive control: turning Claude on in the popup captures the same page on reload.
    s.set_surface(CLAUDE, true).unwrap();
    tab.reload().unwrap();
    wait_fixture_done(&tab, &claude).unwrap();
    assert_landed(&s, &claude);

    // 2. Kill switch on: a ChatGPT page captures nothing and the badge says paused.
    s.set_kill_switch(true).unwrap();
    let short = case("chatgpt/short");
    let tab = s.open_case(&short).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        Session::badge_state(&tab).unwrap().as_deref(),
        Some("paused")
    );
    assert_nothing_for(&s, &short, "the kill switch is on");
    // Positive control: kill switch off, reload, the page is captured.
    s.set_kill_switch(false).unwrap();
    tab.reload().unwrap();
    wait_fixture_done(&tab, &short).unwrap();
    assert_landed(&s, &short);

    // 3. Skip: the badge is clicked before the conversation's turns render; none of them lands. Another
    //    conversation in another tab is still captured (the skip is for this conversation only).
    let delayed = Session::scenario_case("scenarios/chatgpt_delayed").unwrap();
    s.serve_case(&delayed);
    let tab = s.browser.open_tab(&delayed.url()).unwrap();
    s.browser
        .cdp
        .call(
            None,
            "Target.activateTarget",
            serde_json::json!({"targetId": tab.target_id}),
        )
        .ok();
    tab.wait_for(
        "document.querySelector('#personkit-badge')?.dataset.state === 'capturing'",
        Duration::from_secs(10),
    )
    .unwrap();
    Session::click_badge(&tab).unwrap();
    tab.wait_for(
        "document.querySelector('#personkit-badge')?.dataset.state === 'skipped'",
        Duration::from_secs(5),
    )
    .unwrap();
    wait_fixture_done(&tab, &delayed).unwrap();
    let long = case("chatgpt/long");
    s.open_case(&long).unwrap();
    assert_landed(&s, &long);
    std::thread::sleep(SETTLE);
    assert_nothing_for(&s, &delayed, "the conversation was skipped from the badge");
    // Resume with a second click: the conversation is captured again.
    Session::click_badge(&tab).unwrap();
    tab.wait_for(
        "document.querySelector('#personkit-badge')?.dataset.state === 'capturing'",
        Duration::from_secs(5),
    )
    .unwrap();
    tab.reload().unwrap();
    wait_fixture_done(&tab, &delayed).unwrap();
    assert_landed(&s, &delayed);
}

/// Relay down → turns queue (the popup shows them) → relay back on the same port → every turn delivered once.
/// Then, with the relay down again, the service worker is terminated mid-queue: nothing is lost.
#[test]
fn relay_outage_and_worker_termination_lose_nothing() {
    let mut s = Session::start(&[CHATGPT]).unwrap();
    s.relay.stop();
    let long = case("chatgpt/long");
    s.open_case(&long).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.queue_len().unwrap_or(0) < 4 {
        assert!(
            Instant::now() < deadline,
            "the popup never showed the 4 queued turns (queue: {:?})",
            s.popup_queue_length()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // The popup lists the conversation as incomplete: its turns wait to be sent.
    s.popup.reload().unwrap();
    let row = s
        .popup
        .wait_for(
            "(() => { const li = document.querySelector('#incomplete-list li'); \
               return li && !document.querySelector('#incomplete').hidden \
                 ? [li.querySelector('a').getAttribute('href'), li.querySelector('.why').textContent] : null; })()",
            Duration::from_secs(20),
        )
        .expect("the popup never listed the undelivered conversation as incomplete");
    assert!(
        row[0].as_str().unwrap().ends_with(&long.expected.path)
            && row[1].as_str().unwrap().contains("waiting to be sent"),
        "{row}"
    );
    // The worker tries (and fails: nothing answers) while the relay is down.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !s
        .proxy
        .seen()
        .iter()
        .any(|r| r.path.starts_with("/v1/observations") && r.status == 0)
    {
        assert!(
            Instant::now() < deadline,
            "the worker never tried to deliver while the relay was down"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let outage_start = Instant::now();
    s.relay.restart().unwrap();
    assert_landed(&s, &long);
    eprintln!(
        "outage: {} failed delivery attempt(s) while the relay was down; delivered {:?} after restart",
        s.proxy.seen().iter().filter(|r| r.status == 0).count(),
        outage_start.elapsed()
    );
    std::thread::sleep(SETTLE);
    let problems = fixtures::diff(&long, &s.messages(CHATGPT).unwrap());
    assert!(
        problems.is_empty(),
        "after the outage: {}",
        problems.join("\n")
    );
    // Delivered: the popup no longer lists it.
    s.popup.reload().unwrap();
    s.popup
        .wait_for(
            "document.querySelector('#incomplete').hidden ? true : null",
            Duration::from_secs(20),
        )
        .expect("the popup still lists the conversation after every turn was delivered");

    // Worker terminated while turns are queued.
    s.relay.stop();
    let short = case("chatgpt/short");
    s.open_case(&short).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.queue_len().unwrap_or(0) < 4 {
        assert!(
            Instant::now() < deadline,
            "turns of chatgpt/short never queued"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let old_worker = s.browser.extension_worker_target().unwrap().unwrap()["targetId"].clone();
    s.terminate_worker().unwrap();
    // The popup opening wakes a new worker, which still holds the queue (it was persisted, not in a global).
    let queued = s.queue_len().unwrap();
    let new_worker = s
        .browser
        .extension_worker_target()
        .unwrap()
        .map(|t| t["targetId"].clone());
    assert!(
        new_worker.is_some() && new_worker.as_ref() != Some(&old_worker),
        "no fresh worker after termination"
    );
    assert!(
        queued >= 4,
        "the new worker shows {queued} queued turns; 4 were queued before it was terminated"
    );
    s.relay.restart().unwrap();
    let problems = s.wait_landed(&short, Duration::from_secs(60)).unwrap();
    assert!(
        problems.is_empty(),
        "after the worker was terminated mid-queue: {}",
        problems.join("\n")
    );
    std::thread::sleep(SETTLE);
    let all = s.messages(CHATGPT).unwrap();
    assert!(
        fixtures::diff(&short, &all).is_empty() && fixtures::diff(&long, &all).is_empty(),
        "duplicates after restart"
    );
}

/// A revoked device token: the relay answers 401, the worker stops retrying (a bounded number of requests),
/// keeps the queued turns, and the popup says "Sign in again"; re-pairing delivers the kept turns.
#[test]
fn revoked_token_shows_sign_in_again_without_retry_storm() {
    let s = Session::start(&[CHATGPT]).unwrap();
    let short = case("chatgpt/short");
    s.open_case(&short).unwrap();
    assert_landed(&s, &short);
    let revoked = s.relay.revoke_all_devices().unwrap();
    assert_eq!(revoked, 1, "exactly the one paired browser");
    let since = Instant::now();
    let long = case("chatgpt/long");
    s.open_case(&long).unwrap();
    s.popup
        .wait_for_reload(
            "(document.querySelector('#pair-status')?.textContent || '').includes('Sign in again')",
            Duration::from_secs(30),
        )
        .unwrap();
    let unauthorized = s
        .proxy
        .seen()
        .iter()
        .filter(|r| r.at >= since && r.status == 401)
        .count();
    assert!(
        unauthorized >= 1,
        "the relay never answered 401: {:?}",
        s.proxy.seen()
    );
    // Quiet period: no retry storm after the 401.
    std::thread::sleep(Duration::from_secs(10));
    let after = s
        .proxy
        .seen()
        .iter()
        .filter(|r| r.at >= since && r.path.starts_with("/v1/observations"))
        .count();
    eprintln!(
        "revoked token: {unauthorized} answer(s) 401, {after} POST(s) to /v1/observations in the 10 s after"
    );
    assert!(
        after <= 3,
        "{after} POSTs to /v1/observations after the token was revoked (retry storm)"
    );
    assert_nothing_for(&s, &long, "the token was revoked");
    assert!(
        s.queue_len().unwrap() >= 4,
        "the queued turns must be kept after a 401"
    );
    // Re-pair through the popup with a fresh code: the kept turns are delivered.
    let code = s.relay.new_pairing_code().unwrap();
    s.pair(&code).unwrap();
    assert_landed(&s, &long);
}

/// The user's own redaction patterns: an invalid one is flagged inline in the popup (and not used), a valid one
/// redacts before the turn leaves the browser; the health dot of a surface that delivered turns is green.
#[test]
fn user_patterns_are_validated_and_applied() {
    let s = Session::start(&[CHATGPT]).unwrap();
    s.popup.reload().unwrap();
    s.popup
        .eval(r"(() => { const t = document.querySelector('#patterns'); t.value = 'ACME-\\d{6}\n(unclosed'; t.dispatchEvent(new Event('input', {bubbles: true})); document.querySelector('#save-patterns').click(); return true; })()")
        .unwrap();
    let status = s
        .popup
        .wait_for(
            "document.querySelector('#patterns-status')?.textContent || ''",
            Duration::from_secs(10),
        )
        .unwrap();
    let status = status.as_str().unwrap_or_default().to_string();
    assert!(
        status.contains("(unclosed") && status.contains("line 2"),
        "invalid pattern not flagged inline: {status:?}"
    );
    assert!(
        !status.contains("ACME"),
        "the valid pattern was flagged: {status:?}"
    );
    let c = Session::scenario_case("scenarios/chatgpt_custom_pattern").unwrap();
    s.open_case(&c).unwrap();
    assert_landed(&s, &c);
    std::thread::sleep(SETTLE);
    let problems = fixtures::diff(&c, &s.messages(CHATGPT).unwrap());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let dot = s
        .popup
        .wait_for_reload(
            "document.querySelector('[data-health=\"browser-ext:chatgpt\"]')?.dataset.status === 'green'",
            Duration::from_secs(15),
        );
    assert!(
        dot.is_ok(),
        "the ChatGPT health dot is not green after a delivery"
    );
}
