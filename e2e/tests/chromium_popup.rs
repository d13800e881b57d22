//! Popup settings writes in the real Chromium: a click is never silently lost. A change whose message never left
//! (only its `storage.session` intent was written) is applied by the worker; a click while the service worker is
//! stopped wakes it and is confirmed; a popup closed in the same instant as the click still gets its setting; a
//! periodic refresh never reverts a change still awaiting its confirmation; a change whose every message fails
//! shows an error (and is still applied from its intent). Malformed messages are refused by name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use personkit_e2e::chromium::Tab;
use personkit_e2e::session::Session;
use serde_json::{Value, json};

fn settings(s: &Session) -> Value {
    s.popup
        .eval(&format!("{}('settings')", personkit_e2e::READ_STATE))
        .unwrap()
}

fn wait_setting(s: &Session, surface: &str, on: bool, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if settings(s)["enabled"][surface] == json!(on) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn open_popup(s: &Session) -> Tab {
    let tab = s
        .browser
        .open_tab(&s.browser.extension_url("popup.html").unwrap())
        .unwrap();
    tab.wait_for(
        "!!document.querySelector('[data-health]')",
        Duration::from_secs(10),
    )
    .unwrap();
    tab
}

#[test]
fn popup_settings_changes_are_never_lost() {
    let s = Session::start(&[]).unwrap();
    let rev0 = settings(&s)["rev"].as_u64().expect("settings carry a rev");

    // 1. Only the intent was recorded (as when the popup closes before its message leaves), with the worker
    //    stopped: the worker applies it (storage change or start-up) and removes the intent.
    s.terminate_worker().unwrap();
    s.popup
        .eval(
            "chrome.storage.session.set({'settingsIntent:e2e-1': {patch: {enabled: {'browser-ext:gemini': true}}, at: Date.now()}}).then(() => true)",
        )
        .unwrap();
    if s.browser.extension_worker_target().unwrap().is_none() {
        // Nothing woke it: a popup opening does (as the user's next look would).
        s.popup.reload().unwrap();
    }
    assert!(
        wait_setting(&s, "browser-ext:gemini", true, Duration::from_secs(15)),
        "a recorded settings intent was never applied: {}",
        settings(&s)
    );
    let session = s.popup.eval("chrome.storage.session.get(null)").unwrap();
    assert!(
        session.get("settingsIntent:e2e-1").is_none(),
        "the applied intent was not removed: {session}"
    );
    assert!(
        session["settingsApplied"]
            .as_array()
            .is_some_and(|a| a.contains(&json!("settingsIntent:e2e-1"))),
        "{session}"
    );
    assert!(settings(&s)["rev"].as_u64().unwrap() > rev0);

    // 2. A click while the worker is stopped: the message wakes it, the popup gets the confirmation (no error,
    //    box checked) and the setting is persisted.
    s.terminate_worker().unwrap();
    let popup = open_popup(&s);
    s.terminate_worker().ok();
    popup
        .eval("document.querySelector('input[data-surface=\"browser-ext:claude\"]').click(), true")
        .unwrap();
    assert!(
        wait_setting(&s, "browser-ext:claude", true, Duration::from_secs(15)),
        "a click with the worker stopped was lost"
    );
    std::thread::sleep(Duration::from_millis(2500)); // one periodic refresh
    let ui = popup
        .eval("[document.querySelector('input[data-surface=\"browser-ext:claude\"]').checked, document.querySelector('#settings-error').hidden]")
        .unwrap();
    assert_eq!(
        ui,
        json!([true, true]),
        "the popup reverted the box or showed an error"
    );
    let _ = popup.close();

    // 3. The popup is closed in the same instant as the click (and the worker was stopped): the setting lands.
    let popup = open_popup(&s);
    s.terminate_worker().ok();
    popup
        .eval("document.querySelector('#kill-switch').click(), true")
        .unwrap();
    popup.close().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while settings(&s)["killSwitch"] != json!(true) {
        assert!(
            Instant::now() < deadline,
            "the kill switch clicked in a popup closed at once was lost: {}",
            settings(&s)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Idempotent: the same intent applied again (a late duplicate) changes nothing; a newer change wins.
    let before = settings(&s);
    s.popup
        .eval("chrome.runtime.sendMessage({type: 'setSettings', patch: {killSwitch: false}, intent: 'settingsIntent:e2e-2'})")
        .unwrap();
    let replay = s
        .popup
        .eval("chrome.runtime.sendMessage({type: 'setSettings', patch: {killSwitch: true}, intent: 'settingsIntent:e2e-2'})")
        .unwrap();
    assert_eq!(
        replay["settings"]["killSwitch"],
        json!(false),
        "a replayed intent id was applied again"
    );
    assert!(settings(&s)["rev"].as_u64().unwrap() > before["rev"].as_u64().unwrap());
}

/// Wraps the popup page's own `chrome.runtime.sendMessage` (CDP evaluates in the page's world, which is the
/// popup script's): `setSettings` messages are delayed by `delay_ms`, or rejected when `delay_ms` is negative.
fn interfere_with_set_settings(popup: &Tab, delay_ms: i64) {
    popup
        .eval(&format!(
            "(() => {{ const real = chrome.runtime.sendMessage.bind(chrome.runtime); const d = {delay_ms}; \
             window.__setSettingsCalls = 0; \
             chrome.runtime.sendMessage = (msg, ...rest) => {{ \
               if (!msg || msg.type !== 'setSettings') return real(msg, ...rest); \
               window.__setSettingsCalls++; \
               if (d < 0) return Promise.reject(new Error('Could not establish connection. Receiving end does not exist.')); \
               return new Promise((res) => setTimeout(res, d)).then(() => real(msg, ...rest)); }}; \
             return true; }})()"
        ))
        .unwrap();
}

#[test]
fn popup_keeps_pending_changes_and_reports_failures() {
    let s = Session::start(&[]).unwrap();
    let box_sel = "input[data-surface=\"browser-ext:copilot\"]";

    // A slow confirmation (3.5 s, longer than the 2 s refresh period): the box never flips back meanwhile.
    let popup = open_popup(&s);
    interfere_with_set_settings(&popup, 3500);
    popup
        .eval(&format!(
            "document.querySelector({}).click(), true",
            json!(box_sel)
        ))
        .unwrap();
    let start = Instant::now();
    let mut flips = 0;
    while start.elapsed() < Duration::from_millis(5000) {
        let checked = popup
            .eval(&format!(
                "document.querySelector({}).checked",
                json!(box_sel)
            ))
            .unwrap();
        if checked != json!(true) {
            flips += 1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        flips, 0,
        "a periodic refresh showed the box unchecked while its change was pending"
    );
    assert!(wait_setting(
        &s,
        "browser-ext:copilot",
        true,
        Duration::from_secs(10)
    ));
    let _ = popup.close();

    // Every message rejected: the popup retries, then shows an error; the recorded intent still applies it.
    let popup = open_popup(&s);
    interfere_with_set_settings(&popup, -1);
    popup
        .eval(&format!(
            "document.querySelector({}).click(), true",
            json!(box_sel)
        ))
        .unwrap();
    let err = popup
        .wait_for(
            "(() => { const e = document.querySelector('#settings-error'); return e && !e.hidden ? e.textContent : ''; })()",
            Duration::from_secs(15),
        )
        .unwrap();
    let calls = popup.eval("window.__setSettingsCalls").unwrap();
    eprintln!("after {calls} rejected attempts the popup says: {err}");
    assert!(
        calls.as_u64().unwrap_or(0) >= 2,
        "the popup did not retry a rejected message ({calls} attempts)"
    );
    assert!(
        err.as_str()
            .unwrap_or_default()
            .contains("Could not confirm"),
        "{err}"
    );
    assert!(
        wait_setting(&s, "browser-ext:copilot", false, Duration::from_secs(15)),
        "the change was lost although its intent was recorded"
    );
}

/// The worker checks every message against `messages.js` and the core: a field the message type does not list, a
/// misspelt settings key and a content-script message sent from an extension page are each refused with a clear
/// error and change nothing; the same change spelt right is applied (positive control).
#[test]
fn malformed_messages_are_refused_by_name() {
    let s = Session::start(&[]).unwrap();
    let send = |msg: &str| {
        s.popup
            .eval(&format!("chrome.runtime.sendMessage({msg})"))
            .unwrap()
    };
    let before = settings(&s);

    let extra_field = send(
        "{type: 'setSettings', patch: {killSwitch: true}, intent: 'settingsIntent:m1', note: 'extra'}",
    );
    assert_eq!(extra_field, json!({"error": "invalid_message"}));
    let typo =
        send("{type: 'setSettings', patch: {killswitch: true}, intent: 'settingsIntent:m2'}");
    let why = typo["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("killswitch"),
        "the error names the misspelt key: {typo}"
    );
    let wrong_sender =
        send("{type: 'capture', url: 'https://chatgpt.com/c/x', title: null, turns: []}");
    assert_eq!(wrong_sender, json!({"error": "unknown_message"}));
    let after = settings(&s);
    assert_eq!(after["killSwitch"], before["killSwitch"]);
    assert_eq!(
        after["rev"], before["rev"],
        "a refused message changed the settings"
    );

    let ok = send("{type: 'setSettings', patch: {killSwitch: true}, intent: 'settingsIntent:m3'}");
    assert_eq!(ok["settings"]["killSwitch"], json!(true), "{ok}");
    assert_eq!(settings(&s)["killSwitch"], json!(true));
}
