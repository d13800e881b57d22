//! Held turns in the real Chromium against the real relay, started with a small `--max-batch-bytes` so that it
//! refuses one large answer of `scenarios/chatgpt_held` (a limit mismatch between extension and relay): the
//! other turns are delivered, the popup shows the held turn with the relay's reason and lists its conversation
//! as incomplete, new capture goes on, and "Clear held turns" removes it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use personkit_e2e::fixtures;
use personkit_e2e::session::{LAND_TIMEOUT, Session};

const CHATGPT: &str = "browser-ext:chatgpt";

#[test]
fn held_turns_are_shown_with_their_reason_cleared_and_never_block_capture() {
    let s = Session::start_with(&["--max-batch-bytes", "4096"], &[CHATGPT]).unwrap();
    let held = Session::scenario_case("scenarios/chatgpt_held").unwrap();
    let tab = s.open_case(&held).unwrap();
    let problems = s.wait_landed(&held, LAND_TIMEOUT).unwrap();
    assert!(
        problems.is_empty(),
        "the turns that fit did not land:\n{}",
        problems.join("\n")
    );
    let _ = tab.close();

    // The popup lists the held turn with the relay's reason.
    s.popup.reload().unwrap();
    let reasons = s
        .popup
        .wait_for(
            "(() => { const held = document.querySelector('#held'); \
               const items = [...document.querySelectorAll('#held-reasons li')].map((li) => li.textContent); \
               return document.querySelector('#held-count')?.textContent === '1' && held && !held.hidden \
                 && items.length > 0 ? items : null; })()",
            Duration::from_secs(20),
        )
        .expect("the popup never showed the held turn with its reason");
    eprintln!("held reasons shown: {reasons}");
    assert!(
        reasons[0].as_str().unwrap_or_default().starts_with("1 × "),
        "{reasons}"
    );
    // The conversation is listed as incomplete, with the refused turn as the reason.
    let incomplete = s
        .popup
        .wait_for(
            "(() => { const rows = [...document.querySelectorAll('#incomplete-list li')]; \
               return !document.querySelector('#incomplete').hidden && rows.length > 0 \
                 ? rows.map((li) => [li.querySelector('a').getAttribute('href'), li.querySelector('.why').textContent]) \
                 : null; })()",
            Duration::from_secs(20),
        )
        .expect("the popup never listed the conversation with a refused turn as incomplete");
    let rows = incomplete.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{incomplete}");
    assert!(
        rows[0][0].as_str().unwrap().ends_with(&held.expected.path),
        "{incomplete}"
    );
    let why = rows[0][1].as_str().unwrap();
    assert!(
        why.starts_with("ChatGPT · ") && why.contains("1 refused by the relay"),
        "{why}"
    );
    let png = s.popup.screenshot_full_page(3000.0).unwrap();
    std::fs::write(
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("popup-held.png"),
        &png,
    )
    .unwrap();
    let stored = s.messages(CHATGPT).unwrap();
    assert!(
        stored.iter().all(|m| !m.content.contains("harbour pilots")),
        "the relay stored the answer it refused"
    );

    // A held turn does not stop capture: another conversation is delivered.
    let short = fixtures::cases("chatgpt")
        .unwrap()
        .into_iter()
        .find(|c| c.name == "chatgpt/short")
        .unwrap();
    let tab = s.open_case(&short).unwrap();
    let problems = s.wait_landed(&short, LAND_TIMEOUT).unwrap();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let _ = tab.close();

    // The user clears it.
    s.popup.reload().unwrap();
    s.popup
        .wait_for(
            "document.querySelector('#held-count')?.textContent === '1'",
            Duration::from_secs(10),
        )
        .unwrap();
    s.popup
        .eval("document.querySelector('#clear-held').click(), true")
        .unwrap();
    s.popup
        .wait_for(
            "document.querySelector('#held-count')?.textContent === '0' && document.querySelector('#held').hidden \
             && (document.querySelector('#held-status')?.textContent || '').includes('Cleared 1')",
            Duration::from_secs(10),
        )
        .expect("Clear held turns did not clear the held turn");
    // The delivered conversation was never listed; the cleared one no longer is.
    s.popup
        .wait_for(
            "document.querySelector('#incomplete').hidden \
             && document.querySelectorAll('#incomplete-list li').length === 0",
            Duration::from_secs(10),
        )
        .expect("the popup still lists incomplete conversations after the held turn was cleared");
    let debug = s.worker_eval("globalThis.__personkitDebug()").unwrap();
    assert_eq!(debug["held"], 0, "{debug}");
    assert_eq!(debug["queueLength"], 0, "{debug}");
}
