//! Forgetting from the extension, in the real Chromium against the real relay: with a captured conversation's tab
//! current, the popup offers "Forget this conversation…", shows what will go (title and turns) before a
//! confirmation, and on confirmation the worker deletes the thread on the relay with the device token. The other
//! conversation stays; the page's conversation is skipped from then on; reloading it, or resuming it from the
//! badge, never brings the forgotten turns back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use personkit_e2e::fixtures;
use personkit_e2e::session::{LAND_TIMEOUT, Session};
use serde_json::json;

const CHATGPT: &str = "browser-ext:chatgpt";

fn case(name: &str) -> fixtures::Case {
    fixtures::cases("chatgpt")
        .unwrap()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap()
}

#[test]
fn the_popup_forgets_the_current_conversation_for_good() {
    let s = Session::start(&[CHATGPT]).unwrap();
    let long = case("chatgpt/long");
    let short = case("chatgpt/short");
    let long_tab = s.open_case(&long).unwrap();
    assert!(s.wait_landed(&long, LAND_TIMEOUT).unwrap().is_empty());
    let short_tab = s.open_case(&short).unwrap();
    assert!(s.wait_landed(&short, LAND_TIMEOUT).unwrap().is_empty());
    let short_id = short.thread_ids().remove(0);
    let long_id = long.thread_ids().remove(0);
    let long_before = s
        .messages(CHATGPT)
        .unwrap()
        .iter()
        .filter(|m| m.thread_id == long_id)
        .count();
    assert!(long_before > 0);

    // The short conversation's tab is current: the popup links to it and offers to forget it.
    s.browser
        .cdp
        .call(
            None,
            "Target.activateTarget",
            json!({"targetId": short_tab.target_id}),
        )
        .unwrap();
    s.popup
        .wait_for(
            &format!(
                "document.querySelector('#open-thread:not([hidden])')?.dataset.thread === '{short_id}' \
                 && !document.querySelector('#forget-thread').hidden"
            ),
            Duration::from_secs(15),
        )
        .expect("the popup never offered to forget the current conversation");

    // First the counts and a confirmation; Cancel changes nothing.
    s.popup
        .eval("document.querySelector('#forget-thread').click(), true")
        .unwrap();
    let question = s
        .popup
        .wait_for(
            "!document.querySelector('#forget-confirm').hidden \
             && document.querySelector('#forget-question').textContent",
            Duration::from_secs(5),
        )
        .unwrap();
    let question = question.as_str().unwrap_or_default().to_owned();
    assert!(
        question.contains("(4 turns, every revision)") && question.contains("for good"),
        "{question}"
    );
    let png = s.popup.screenshot_full_page(2000.0).unwrap();
    std::fs::write(
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("popup-forget.png"),
        &png,
    )
    .unwrap();
    s.popup
        .eval("document.querySelector('#forget-no').click(), true")
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        s.messages(CHATGPT)
            .unwrap()
            .iter()
            .filter(|m| m.thread_id == short_id)
            .count(),
        4,
        "Cancel forgot something"
    );

    // Confirmed: the relay forgets the thread; the popup says how many turns went.
    s.popup
        .eval("document.querySelector('#forget-thread').click(), true")
        .unwrap();
    s.popup
        .wait_for(
            "!document.querySelector('#forget-confirm').hidden",
            Duration::from_secs(5),
        )
        .unwrap();
    s.popup
        .eval("document.querySelector('#forget-yes').click(), true")
        .unwrap();
    let status = s
        .popup
        .wait_for(
            "(() => { const t = document.querySelector('#library-status').textContent; \
               return t.startsWith('Forgot') || t.startsWith('Could not') ? t : null; })()",
            Duration::from_secs(20),
        )
        .unwrap();
    assert_eq!(
        status,
        json!("Forgot 4 turns. The conversation is skipped from now on.")
    );
    let stored = s.messages(CHATGPT).unwrap();
    assert!(
        stored.iter().all(|m| m.thread_id != short_id),
        "the forgotten thread's turns are still stored"
    );
    assert_eq!(
        stored.iter().filter(|m| m.thread_id == long_id).count(),
        long_before,
        "the other conversation changed"
    );
    s.popup
        .wait_for(
            "document.querySelector('#open-thread').hidden && document.querySelector('#forget-thread').hidden",
            Duration::from_secs(15),
        )
        .expect("the popup still links to the forgotten thread");

    // The page's conversation is skipped now (the worker told the open tab), also after a reload.
    short_tab
        .wait_for(
            "document.querySelector('#personkit-badge')?.dataset.state === 'skipped'",
            Duration::from_secs(15),
        )
        .expect("the forgotten conversation's badge does not say skipped");
    short_tab.reload().unwrap();
    short_tab
        .wait_for(
            "document.documentElement.dataset.fixtureDone === '1' \
             && document.querySelector('#personkit-badge')?.dataset.state === 'skipped'",
            Duration::from_secs(20),
        )
        .expect("after a reload the conversation is not skipped");

    // Resumed from the badge (a real click): the page is read again, and the forgotten turns still never return.
    Session::click_badge(&short_tab).unwrap();
    short_tab
        .wait_for(
            "document.querySelector('#personkit-badge')?.dataset.state === 'capturing'",
            Duration::from_secs(15),
        )
        .unwrap();
    short_tab
        .wait_for(
            "Number(document.querySelector('#personkit-badge')?.dataset.captured) >= 4",
            Duration::from_secs(20),
        )
        .expect("the resumed page was not read again");
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        s.messages(CHATGPT)
            .unwrap()
            .iter()
            .all(|m| m.thread_id != short_id),
        "forgotten turns came back after the conversation was resumed"
    );
    let _ = long_tab.close();
}
