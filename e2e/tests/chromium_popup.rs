//! Popup settings writes in the real Chromium: a click is never silently lost. A change whose message never left
//! (only its `storage.session` intent was written) is applied by the worker; a click while the service worker is
//! stopped wakes it and is confirmed; a popup closed in the same instant as the click still gets its setting.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use personkit_e2e::chromium::Tab;
use personkit_e2e::session::Session;
use serde_json::{Value, json};

fn settings(s: &Session) -> Value {
    s.popup
        .eval("chrome.storage.local.get('settings').then((o) => o.settings || null)")
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
