//! Hostile pages and the device token, in the real Chromium with the built extension and the real relay.
//!
//! - `hostile_page_cannot_steer_capture_or_read_the_token`: the `scenarios/chatgpt_hostile` page forges window
//!   messages of every shape the extension might accept, message events claiming the extension's origin, custom
//!   and navigation events, runtime messages to the extension id, synthetic badge clicks; reads the badge and its
//!   own storage; then rewrites `history` to a second conversation and injects turns claiming a third
//!   conversation and another surface. The corpus must hold exactly the page's own turns, each under the thread
//!   id derived from the URL the frame had when the turn was read, nothing else on any surface, and nothing the
//!   page read may contain the token. The content script's isolated world cannot read the token either, and
//!   its messages naming another conversation or site are refused (the conversation is the sending frame's as
//!   the browser reports it).
//! - `storage_local_is_never_trusted_for_the_token_or_the_relay`: the token and the worker's state are in the
//!   extension origin's IndexedDB and storage.local is empty; an older version's layout in storage.local (with a
//!   planted token and a relay URL naming another host) is moved once by a restarted worker, which takes the
//!   user's settings but neither the token nor the relay URL (the popup says "Sign in again", nothing reaches the
//!   named host, and keys written there later are never read); pairing again delivers the queued turns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use personkit_e2e::fixtures::{self, Case};
use personkit_e2e::proxy::Proxy;
use personkit_e2e::session::{LAND_TIMEOUT, SETTLE, Session, wait_fixture_done};
use serde_json::{Value, json};

const CHATGPT: &str = "browser-ext:chatgpt";
const OTHER_SURFACES: &[&str] = &[
    "browser-ext:claude",
    "browser-ext:gemini",
    "browser-ext:copilot",
];

use personkit_e2e::READ_TOKEN_RECORD;

fn token_record(s: &Session) -> Value {
    // The worker may be between restarts: retry briefly.
    let mut last = None;
    for _ in 0..20 {
        match s.worker_eval(READ_TOKEN_RECORD) {
            Ok(v) => return v,
            Err(e) => last = Some(e),
        }
        s.popup.reload().ok();
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("could not read the token record from the worker: {last:?}");
}

/// A record of the worker's state in the extension origin's IndexedDB, read from the popup.
fn state(s: &Session, key: &str) -> Value {
    s.popup
        .eval(&format!("{}({})", personkit_e2e::READ_STATE, json!(key)))
        .expect("worker state from the popup")
}

fn storage_local(s: &Session) -> Value {
    s.popup
        .eval("chrome.storage.local.get(null)")
        .expect("storage.local from the popup")
}

fn all_surfaces_text(s: &Session) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for surface in std::iter::once(&CHATGPT).chain(OTHER_SURFACES) {
        for m in s.messages(surface).unwrap() {
            out.push((surface.to_string(), m.thread_id, m.content));
        }
    }
    out
}

#[test]
fn hostile_page_cannot_steer_capture_or_read_the_token() {
    let s = Session::start(&[CHATGPT]).unwrap();
    let ext = s.browser.extension_id.clone().unwrap();
    let rec = token_record(&s);
    let token = rec["token"]
        .as_str()
        .expect("the paired token is in the extension's IndexedDB")
        .to_string();
    assert!(token.len() >= 16, "implausible token");
    let local = storage_local(&s);
    assert!(
        local.get("token").is_none() && !local.to_string().contains(&token),
        "the token is in storage.local, which content scripts can read"
    );

    let case = Session::scenario_case("scenarios/chatgpt_hostile").unwrap();
    s.serve_case(&case);
    let tab = s
        .browser
        .open_tab(&format!("{}?ext={ext}", case.url()))
        .unwrap();
    tab.wait_for(
        "document.documentElement.dataset.phase === '1' && document.querySelector('#personkit-badge')?.dataset.state === 'capturing'",
        Duration::from_secs(30),
    )
    .unwrap();

    // The content script's own isolated world: storage.local has no token, storage.session is closed to it,
    // and the IndexedDB it sees is the page's (no secrets store).
    let world = tab.isolated_world(&ext, Duration::from_secs(10)).unwrap();
    let seen = tab
        .eval_in(
            world,
            r#"(async () => {
  const out = {};
  try { out.local = JSON.stringify(await chrome.storage.local.get(null)); } catch (e) { out.local = 'refused: ' + e.message; }
  try { out.session = JSON.stringify(await chrome.storage.session.get(null)); } catch (e) { out.session = 'refused: ' + e.message; }
  out.origin = location.origin;
  out.runtimeId = chrome.runtime.id;
  const db = await new Promise((res, rej) => { const r = indexedDB.open('personkit-secrets'); r.onsuccess = () => res(r.result); r.onerror = () => rej(r.error); });
  out.stores = Array.from(db.objectStoreNames);
  db.close();
  return out;
})()"#,
        )
        .unwrap();
    eprintln!(
        "content script isolated world: origin {}, storage.local {} bytes, storage.session: {}, IndexedDB stores {}",
        seen["origin"],
        seen["local"].as_str().unwrap_or_default().len(),
        seen["session"]
            .as_str()
            .unwrap_or_default()
            .chars()
            .take(120)
            .collect::<String>(),
        seen["stores"]
    );
    assert_eq!(
        seen["runtimeId"],
        json!(ext),
        "evaluated in the wrong context"
    );
    // The worker sets storage.local's access level to trusted contexts at start (Chromium supports it).
    assert!(
        seen["local"]
            .as_str()
            .is_some_and(|v| v.starts_with("refused")),
        "storage.local (queue, settings, skip list) must be closed to content scripts: {seen}"
    );
    assert!(
        !seen.to_string().contains(&token),
        "the content script's isolated world can read the token: {seen}"
    );
    assert!(
        seen["session"]
            .as_str()
            .is_some_and(|v| v.starts_with("refused")),
        "storage.session (settings intents) must be closed to content scripts: {seen}"
    );

    // A compromised content script (its isolated world) names other conversations and another site in its
    // messages: the worker takes the conversation from the browser's record of the sending frame only, so each is
    // refused as stale and nothing is queued, skipped or answered for the named conversation (the final corpus
    // check finds any FORGED text or a thread the page's URL never named).
    let forged = tab
        .eval_in(
            world,
            r#"(async () => {
  const M = globalThis.personkitMessages;
  const turns = [{role: 'user', text: 'FORGED by the isolated world for another conversation'}];
  const out = {};
  out.otherConversation = await chrome.runtime.sendMessage(M.make.capture('https://chatgpt.com/c/someone-else', 'x', turns));
  out.otherSite = await chrome.runtime.sendMessage(M.make.capture('https://claude.ai/chat/someone-else', 'x', turns));
  out.skipOther = await chrome.runtime.sendMessage(M.make.toggleSkip('https://chatgpt.com/c/someone-else'));
  out.helloOther = await chrome.runtime.sendMessage(M.make.hello('https://chatgpt.com/c/someone-else'));
  return out;
})()"#,
        )
        .unwrap();
    eprintln!("isolated world naming other conversations: {forged}");
    for k in ["otherConversation", "otherSite", "skipOther", "helloOther"] {
        assert_eq!(
            forged[k]["stale"],
            json!(true),
            "{k}: the worker acted on a conversation named by the message: {forged}"
        );
    }
    assert_eq!(forged["otherConversation"]["queued"], json!(0));
    assert_eq!(forged["helloOther"]["surface"], Value::Null);

    // Phase 1 lands (the page's own first conversation), then the page rewrites history and injects turns.
    let mut first = case.clone();
    first.expected.conversations.truncate(1);
    let problems = s.wait_landed(&first, LAND_TIMEOUT).unwrap();
    assert!(
        problems.is_empty(),
        "the hostile page's own conversation did not land:\n{}",
        problems.join("\n")
    );
    tab.eval("document.documentElement.dataset.go = '1', true")
        .unwrap();
    wait_fixture_done(&tab, &case).unwrap();
    let problems = s.wait_landed(&case, LAND_TIMEOUT).unwrap();
    std::thread::sleep(SETTLE);
    let msgs = s.messages(CHATGPT).unwrap();
    let mut problems = if problems.is_empty() {
        fixtures::diff(&case, &msgs)
    } else {
        problems
    };
    for m in fixtures::strays(&msgs, &case.thread_ids()) {
        problems.push(format!(
            "stored in a thread the page's URL never named ({}): {} {:?}",
            m.thread_id, m.role, m.content
        ));
    }
    for (surface, thread, content) in all_surfaces_text(&s) {
        if surface != CHATGPT {
            problems.push(format!("stored on {surface} ({thread}): {content:?}"));
        }
        if content.contains("FORGED") {
            problems.push(format!(
                "forged text stored on {surface} ({thread}): {content:?}"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "hostile page:\n{}",
        problems.join("\n")
    );

    // The forged badge clicks did not skip the conversation, and nothing the page read holds the token.
    assert_eq!(
        Session::badge_state(&tab).unwrap().as_deref(),
        Some("capturing")
    );
    let report = tab
        .eval("document.documentElement.dataset.hostileReport || ''")
        .unwrap();
    let report = report.as_str().unwrap_or_default().to_string();
    let parsed: Value = serde_json::from_str(&report).expect("the page wrote its report");
    eprintln!(
        "hostile page: {} window messages posted, {} forged events; runtime: {}; page IndexedDB: {}; secrets stores seen by the page: {}; globals: {}",
        parsed["posted"],
        parsed["events"],
        parsed["runtime"],
        parsed["storage"]["idb"],
        parsed["storage"]["secretsStores"],
        parsed["globals"]
    );
    assert!(
        parsed["posted"].as_u64().unwrap_or(0) >= 100,
        "the page did not run its attacks"
    );
    assert!(
        !report.contains(&token),
        "the hostile page obtained the token"
    );
    assert!(
        !parsed["runtime"].to_string().contains("answered: {"),
        "the page got an answer from the extension: {}",
        parsed["runtime"]
    );
    // The settings the page tried to change through forged messages are untouched, and nothing was skipped.
    let settings = state(&s, "settings");
    assert_eq!(settings["killSwitch"], json!(false));
    assert_ne!(settings["enabled"]["browser-ext:claude"], json!(true));
    assert_eq!(state(&s, "skipped"), json!([]));
    assert_eq!(token_record(&s)["token"], json!(token));
}

#[test]
fn storage_local_is_never_trusted_for_the_token_or_the_relay() {
    let s = Session::start(&[CHATGPT]).unwrap();
    let rec = token_record(&s);
    let token = rec["token"].as_str().expect("token record").to_string();
    assert_eq!(
        rec["relay"].as_str(),
        Some(s.proxy.url().trim_end_matches('/')),
        "the token is bound to the relay origin that issued it"
    );
    // The worker's state is in IndexedDB; storage.local holds nothing.
    assert_eq!(storage_local(&s), json!({}));
    assert_eq!(state(&s, "settings")["enabled"][CHATGPT], json!(true));

    // What a compromised content process could have planted in storage.local (Firefox lets content scripts
    // write it) before an upgrade from a version that kept the worker's state there: a token and a relay URL
    // naming another host (here a counting pass-through, so any request that reaches it is seen), next to the
    // user's real settings. IndexedDB is as that version left it: no token record, no state.
    let attacker = Proxy::start(s.relay.port).unwrap();
    s.popup
        .eval(
            r#"(async () => {
  for (const [name, store] of [['personkit-secrets', 'secrets'], ['personkit-state', 'state']]) {
    const db = await new Promise((res, rej) => { const r = indexedDB.open(name); r.onsuccess = () => res(r.result); r.onerror = () => rej(r.error); });
    await new Promise((res, rej) => { const tx = db.transaction(store, 'readwrite'); tx.objectStore(store).clear(); tx.oncomplete = res; tx.onerror = () => rej(tx.error); });
    db.close();
  }
  return true;
})()"#,
        )
        .unwrap();
    s.popup
        .eval(&format!(
            "chrome.storage.local.set({}).then(() => true)",
            json!({
                "token": token,
                "settings": {"relayUrl": attacker.url(), "enabled": {CHATGPT: true}, "everPaired": true},
                "skipped": [],
            })
        ))
        .unwrap();
    s.terminate_worker().unwrap();
    // Opening the popup wakes a fresh worker, which moves the state once and takes neither token nor relay.
    let shown = s.popup_queue_length().unwrap();
    assert!(!shown.is_empty());
    assert_eq!(
        token_record(&s),
        Value::Null,
        "the worker adopted a token found in storage.local"
    );
    let settings = state(&s, "settings");
    assert_eq!(settings["enabled"][CHATGPT], json!(true), "{settings}");
    assert_ne!(
        settings["relayUrl"].as_str(),
        Some(attacker.url().trim_end_matches('/')),
        "the relay URL was taken from storage.local"
    );
    assert_eq!(
        storage_local(&s),
        json!({}),
        "the old layout was left behind"
    );
    s.popup
        .wait_for(
            "(document.querySelector('#pair-status')?.textContent || '').includes('Sign in again')",
            Duration::from_secs(10),
        )
        .unwrap();

    // A capture now queues (the user's settings came across) and nothing reaches the planted relay.
    let since = std::time::Instant::now();
    let c: Case = fixtures::cases("chatgpt")
        .unwrap()
        .into_iter()
        .find(|c| c.name == "chatgpt/short")
        .unwrap();
    let tab = s.open_case(&c).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while s.queue_len().unwrap() < 4 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(
        s.queue_len().unwrap(),
        4,
        "the page's turns were not queued"
    );
    // Written after the migration, the same keys are never read again.
    s.popup
        .eval(&format!(
            "chrome.storage.local.set({}).then(() => true)",
            json!({"token": token, "settings": {"relayUrl": attacker.url()}})
        ))
        .unwrap();
    s.terminate_worker().unwrap();
    assert_eq!(s.queue_len().unwrap(), 4);
    assert_eq!(token_record(&s), Value::Null);
    assert_eq!(
        attacker.count_since("/", since),
        0,
        "a request went to the relay named in storage.local"
    );

    // Pairing again (with the real relay) delivers what was queued.
    let code = s.relay.new_pairing_code().unwrap();
    s.pair(&code).unwrap();
    let problems = s.wait_landed(&c, LAND_TIMEOUT).unwrap();
    assert!(
        problems.is_empty(),
        "after pairing again: {}",
        problems.join("\n")
    );
    let _ = tab.close();
    assert_eq!(attacker.count_since("/", since), 0);
}
