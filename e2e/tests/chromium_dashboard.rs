//! The library (the relay's dashboard) in the real Chromium against the real relay: sign in through `personkit
//! open`'s link and through the popup's "Open library"; a conversation captured by the extension from a fixture
//! page is browsed to, found by search a moment after its capture, linked from the popup while its tab is the
//! current one, and forgotten from the dashboard — after which no page, search or popup link shows it. Hostile
//! titles and contents are shown as text, and a form posted from another site changes nothing.
//!
//! Every page is screenshotted in light and dark (CDP `Emulation.setEmulatedMedia`, `prefers-color-scheme`) into
//! `<target>/e2e-screenshots/dashboard-<unix time>/`; `docs/screenshots/` holds one committed copy of each.
//!
//! Besides the extension's captures, the test sends a few threads straight to `POST /v1/observations` with the
//! extension's own device token, standing in for conversations whose content a fixture page has no reason to
//! hold (script tags in a title, a thread with numbered turns missing); they travel the same wire and ingest.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use personkit_e2e::chromium::Tab;
use personkit_e2e::fixtures;
use personkit_e2e::screenshots;
use personkit_e2e::session::{LAND_TIMEOUT, Session};
use serde_json::{Value, json};

const HOSTILE_TITLE: &str = "<script>window.__pk_pwned = 1</script><img src=x onerror=\"window.__pk_pwned = 2\"> release notes";
const HOSTILE_TEXT: &str = "Here is the snippet you asked for: <script>window.__pk_pwned = 3</script>\n\n\
<img src=x onerror=\"window.__pk_pwned = 4\"> and a [link](javascript:window.__pk_pwned=5) and <b>bold?</b>";

/// Where this run's screenshots go: `<target dir>/e2e-screenshots/dashboard-<unix time>`.
fn run_dir() -> PathBuf {
    screenshots::run_dir("dashboard").unwrap()
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

fn h1(tab: &Tab) -> String {
    tab.eval("document.querySelector('h1')?.textContent ?? ''")
        .unwrap()
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Page targets whose URL starts with `prefix`.
fn page_targets(s: &Session, prefix: &str) -> Vec<Value> {
    let t = s
        .browser
        .cdp
        .call(None, "Target.getTargets", json!({}))
        .unwrap();
    t["targetInfos"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["type"] == "page" && t["url"].as_str().unwrap_or("").starts_with(prefix))
        .cloned()
        .collect()
}

/// Waits for a new page target at `prefix` + `path_want` (after its sign-in redirect) and attaches to it.
fn wait_new_tab(s: &Session, prefix: &str, before: usize, path_want: &str) -> Tab {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let pages = page_targets(s, prefix);
        if pages.len() > before
            && let Some(t) = pages
                .iter()
                .find(|t| t["url"].as_str().unwrap_or("").ends_with(path_want))
        {
            let attached = s
                .browser
                .cdp
                .call(
                    None,
                    "Target.attachToTarget",
                    json!({"targetId": t["targetId"], "flatten": true}),
                )
                .unwrap();
            let tab = Tab {
                cdp: s.browser.cdp.clone(),
                session: attached["sessionId"].as_str().unwrap().to_string(),
                target_id: t["targetId"].as_str().unwrap().to_string(),
            };
            tab.call("Page.enable", json!({})).unwrap();
            tab.call("Runtime.enable", json!({})).unwrap();
            tab.wait_for(
                "document.readyState === 'complete'",
                Duration::from_secs(10),
            )
            .unwrap();
            return tab;
        }
        assert!(
            Instant::now() < deadline,
            "no new tab at {prefix}…{path_want}; pages: {:?}",
            page_targets(s, "")
                .iter()
                .map(|t| t["url"].clone())
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Sends turns with the extension's device token, as the extension would.
fn send_turns(s: &Session, token: &str, items: Vec<Value>) {
    let r = personkit_e2e::http::request(
        "POST",
        &format!("{}/v1/observations", s.relay.url()),
        Some(&personkit_testkit::batch(&items)),
        Some(token),
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json().unwrap();
    assert!(
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["status"] == "stored"),
        "{v}"
    );
}

fn turn(conv: &str, i: u32, text: &str, title: &str) -> Value {
    let mut t = personkit_testkit::turn(
        "browser-ext:chatgpt",
        conv,
        personkit_testkit::alternating_role(i as usize),
        text,
        Some(i),
    );
    t["title"] = json!(title);
    t["url"] = json!(format!("https://chatgpt.com/c/{conv}"));
    t
}

#[test]
fn library_sign_in_browse_search_popup_link_and_forget() {
    let s = Session::start(&["browser-ext:chatgpt"]).unwrap();
    let shots = run_dir();
    eprintln!("screenshots: {}", shots.display());

    // 1. The extension captures a conversation with code blocks and lists from its fixture page.
    let long = fixtures::cases("chatgpt")
        .unwrap()
        .into_iter()
        .find(|c| c.name == "chatgpt/long")
        .unwrap();
    let long_tab = s.open_case(&long).unwrap();
    let problems = s.wait_landed(&long, LAND_TIMEOUT).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    let long_id = long.thread_ids()[0].clone();

    // Stand-ins (see the header): a hostile title and content, a table and a long title, a thread with gaps.
    let token = s.worker_eval(personkit_e2e::READ_TOKEN_RECORD).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let hostile_conv = "6f1d2e3c-0000-4000-8000-00000000beef";
    let table_conv = "6f1d2e3c-0000-4000-8000-00000000cafe";
    let gaps_conv = "6f1d2e3c-0000-4000-8000-00000000f00d";
    let long_title = "A very long conversation title about comparing PostgreSQL logical replication slots, \
        publication filters and the behaviour of pg_upgrade across major versions on managed hosting";
    let table = "| Engine | Version | Replication |\n|---|---|---|\n| PostgreSQL | 17.2 | logical, physical |\n\
        | MySQL | 8.4 | binlog row-based |\n| SQLite | 3.47 | none (use Litestream or a copy of the WAL) |\n\n\
        Inline math stays text: $e^{i\\pi} + 1 = 0$, and a long identifier \
        `a_really_long_identifier_name_without_any_spaces_that_should_wrap_somewhere_sensible_in_the_page`.";
    send_turns(
        &s,
        &token,
        vec![
            turn(
                hostile_conv,
                0,
                "Show me how to embed a script tag.",
                HOSTILE_TITLE,
            ),
            turn(hostile_conv, 1, HOSTILE_TEXT, HOSTILE_TITLE),
            turn(
                table_conv,
                0,
                "Compare replication in three databases as a table.",
                long_title,
            ),
            turn(table_conv, 1, table, long_title),
            turn(
                gaps_conv,
                0,
                "First question of a long chat.",
                "Chat with turns never delivered",
            ),
            turn(
                gaps_conv,
                1,
                "First answer.",
                "Chat with turns never delivered",
            ),
            turn(
                gaps_conv,
                4,
                "A later question after two missed turns.",
                "Chat with turns never delivered",
            ),
        ],
    );
    let hostile_id = personkit_testkit::thread_id("browser-ext:chatgpt", hostile_conv);
    let table_id = personkit_testkit::thread_id("browser-ext:chatgpt", table_conv);
    let gaps_id = personkit_testkit::thread_id("browser-ext:chatgpt", gaps_conv);

    // 2. Sign in with `personkit open`'s link: it lands on the overview, and the session cookie is HttpOnly.
    let open = s.relay.cli(&["open", "--json"]).unwrap();
    let open: Value = serde_json::from_str(open.trim()).unwrap();
    let link = open["url"].as_str().unwrap();
    let base = s.relay.url();
    assert!(link.starts_with(&format!("{base}/signin?t=")), "{link}");
    let dash = s.browser.open_tab(link).unwrap();
    dash.wait_for(
        "location.pathname === '/' && document.readyState === 'complete'",
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(h1(&dash), "Overview");
    assert_eq!(
        dash.eval("document.cookie").unwrap(),
        json!(""),
        "the session cookie is HttpOnly"
    );
    let overview = text_of(&dash);
    assert!(
        overview.contains("chatgpt") && overview.contains("Threads"),
        "{overview}"
    );
    shoot(&dash, &shots, "overview");
    // The link worked once.
    let again = s.browser.open_tab(link).unwrap();
    assert!(
        text_of(&again).contains("does not work"),
        "{}",
        text_of(&again)
    );
    again.close().unwrap();

    // 3. Threads: the captured conversation is listed, with completeness; the gaps thread says what is missing.
    dash.navigate(&format!("{base}/threads")).unwrap();
    let href = format!("/threads/{long_id}");
    assert_eq!(
        dash.eval(&format!("!!document.querySelector('a[href=\"{href}\"]')"))
            .unwrap(),
        json!(true),
        "the threads page has no link to the captured conversation: {}",
        text_of(&dash)
    );
    let gaps_row = dash
        .eval(&format!(
            "document.querySelector('a[href=\"/threads/{gaps_id}\"]').closest('tr').innerText"
        ))
        .unwrap();
    assert!(
        gaps_row.as_str().unwrap().contains("2 missing"),
        "{gaps_row}"
    );
    shoot(&dash, &shots, "threads");

    // Browse to it by clicking, as a person would.
    dash.eval(&format!(
        "document.querySelector('a[href=\"{href}\"]').click(), true"
    ))
    .unwrap();
    dash.wait_for(
        &format!("location.pathname === '{href}' && document.readyState === 'complete'"),
        Duration::from_secs(10),
    )
    .unwrap();
    let first_user = &long.expected.conversations[0].turns[0].text;
    let page = text_of(&dash);
    assert!(
        fixtures::squash(&page).contains(&fixtures::squash(first_user.lines().next().unwrap())),
        "the thread page lacks the first turn: {page}"
    );
    assert!(
        dash.eval("document.querySelectorAll('.md pre code').length")
            .unwrap()
            .as_u64()
            .unwrap()
            >= 1,
        "code blocks are rendered as code"
    );
    shoot(&dash, &shots, "thread");
    dash.navigate(&format!("{base}/threads/{table_id}"))
        .unwrap();
    assert_eq!(
        dash.eval("document.querySelectorAll('.md table td').length")
            .unwrap(),
        json!(9)
    );
    shoot(&dash, &shots, "thread-table");

    // 4. Hostile title and content are text: no script ran, no element came from them.
    dash.navigate(&format!("{base}/threads/{hostile_id}"))
        .unwrap();
    assert_eq!(dash.eval("window.__pk_pwned ?? null").unwrap(), Value::Null);
    assert_eq!(
        dash.eval("document.querySelectorAll('script, main img, a[href^=\"javascript\"]').length")
            .unwrap(),
        json!(0)
    );
    assert!(
        h1(&dash).contains("<script>window.__pk_pwned = 1</script>"),
        "{}",
        h1(&dash)
    );
    assert!(
        text_of(&dash).contains("<b>bold?</b>"),
        "{}",
        text_of(&dash)
    );
    shoot(&dash, &shots, "thread-hostile");
    dash.navigate(&format!("{base}/threads")).unwrap();
    assert_eq!(dash.eval("window.__pk_pwned ?? null").unwrap(), Value::Null);

    // 5. A conversation captured a moment ago is found by search.
    let short = fixtures::cases("chatgpt")
        .unwrap()
        .into_iter()
        .find(|c| c.name == "chatgpt/short")
        .unwrap();
    let short_tab = s.open_case(&short).unwrap();
    assert!(s.wait_landed(&short, LAND_TIMEOUT).unwrap().is_empty());
    let short_id = short.thread_ids()[0].clone();
    dash.navigate(&format!("{base}/search?q=Canberra")).unwrap();
    let hit = format!("a[href^=\"/threads/{short_id}?from=search#turn-\"]");
    assert_eq!(
        dash.eval(&format!("!!document.querySelector('{hit}')"))
            .unwrap(),
        json!(true),
        "search did not find the turn captured a moment earlier: {}",
        text_of(&dash)
    );
    assert!(
        dash.eval("document.querySelector('.hit mark')?.textContent")
            .unwrap()
            .as_str()
            .unwrap_or("")
            .contains("Canberra")
    );
    shoot(&dash, &shots, "search");
    dash.navigate(&format!("{base}/devices")).unwrap();
    assert!(
        !text_of(&dash).contains(&token),
        "the dashboard shows no token"
    );
    shoot(&dash, &shots, "devices");
    dash.navigate(&format!("{base}/privacy")).unwrap();
    shoot(&dash, &shots, "privacy");

    // 6. The popup: with the conversation's tab current, it links to its thread; "Open library" signs in (through
    //    the address the extension was paired with) without the page ever seeing the device token.
    s.browser
        .cdp
        .call(
            None,
            "Target.activateTarget",
            json!({"targetId": short_tab.target_id}),
        )
        .unwrap();
    let thread_link = s
        .popup
        .wait_for(
            "document.querySelector('#open-thread:not([hidden])')?.dataset.thread ?? ''",
            Duration::from_secs(15),
        )
        .unwrap();
    assert_eq!(thread_link, json!(short_id));
    let proxy = s.proxy.url();
    let before = page_targets(&s, &proxy).len();
    s.popup
        .eval("document.querySelector('#open-library').click(), true")
        .unwrap();
    let lib = wait_new_tab(&s, &proxy, before, "/");
    lib.wait_for("!!document.querySelector('h1')", Duration::from_secs(10))
        .unwrap();
    assert_eq!(h1(&lib), "Overview");
    // The library's tab is now the current one (a toolbar popup would have closed): go back to the conversation.
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
            &format!("document.querySelector('#open-thread:not([hidden])')?.dataset.thread === '{short_id}'"),
            Duration::from_secs(15),
        )
        .unwrap();
    let before = page_targets(&s, &proxy).len();
    s.popup
        .eval("document.querySelector('#open-thread').click(), true")
        .unwrap();
    let on_thread = wait_new_tab(&s, &proxy, before, &format!("/threads/{short_id}"));
    on_thread
        .wait_for("!!document.querySelector('h1')", Duration::from_secs(10))
        .unwrap();
    assert!(
        text_of(&on_thread).contains("Canberra"),
        "{}",
        text_of(&on_thread)
    );
    assert!(!text_of(&on_thread).contains(&token));
    s.browser
        .cdp
        .call(
            None,
            "Target.activateTarget",
            json!({"targetId": long_tab.target_id}),
        )
        .unwrap();
    s.popup
        .wait_for(
            &format!("document.querySelector('#open-thread')?.dataset.thread === '{long_id}'"),
            Duration::from_secs(15),
        )
        .unwrap();
    shoot(&s.popup, &shots, "popup");

    // 7. Forget the short conversation from its thread page (confirm page, real form post with its CSRF token).
    dash.navigate(&format!("{base}/threads/{short_id}"))
        .unwrap();
    dash.eval("document.querySelector('a.danger[href$=\"/forget\"]').click(), true")
        .unwrap();
    dash.wait_for(
        "location.pathname.endsWith('/forget') && document.readyState === 'complete'",
        Duration::from_secs(10),
    )
    .unwrap();
    assert!(
        text_of(&dash).contains("This forgets 4 messages"),
        "{}",
        text_of(&dash)
    );
    shoot(&dash, &shots, "forget");
    dash.eval("document.querySelector('form button.danger').click(), true")
        .unwrap();
    dash.wait_for(
        "location.pathname === '/threads' && location.search.includes('forgot=4')",
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(
        dash.eval(&format!(
            "!!document.querySelector('a[href^=\"/threads/{short_id}\"]')"
        ))
        .unwrap(),
        json!(false),
        "the forgotten thread is still listed"
    );
    dash.navigate(&format!("{base}/threads/{short_id}"))
        .unwrap();
    assert_eq!(h1(&dash), "Not found");
    dash.navigate(&format!("{base}/search?q=Canberra")).unwrap();
    assert_eq!(
        dash.eval(&format!("!!document.querySelector('{hit}')"))
            .unwrap(),
        json!(false),
        "search still finds a forgotten turn: {}",
        text_of(&dash)
    );
    dash.navigate(&format!("{base}/threads/{short_id}/export.md"))
        .ok();
    assert!(!text_of(&dash).contains("Canberra"));
    dash.navigate(&format!("{base}/")).unwrap();
    assert!(!text_of(&dash).contains("Canberra"));
    let left: Vec<_> = s
        .messages("browser-ext:chatgpt")
        .unwrap()
        .into_iter()
        .filter(|m| m.thread_id == short_id)
        .collect();
    assert!(
        left.is_empty(),
        "the corpus still holds {} forgotten messages",
        left.len()
    );
    // The popup no longer links to it, with its tab current again.
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
            "document.querySelector('#open-thread').hidden",
            Duration::from_secs(15),
        )
        .unwrap();
    // A replay of the same capture (the page reloaded) does not bring it back.
    short_tab.reload().unwrap();
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        s.messages("browser-ext:chatgpt")
            .unwrap()
            .iter()
            .all(|m| m.thread_id != short_id)
    );
}

/// A page on another site that posts the dashboard's forget form (with the user signed in in the same browser)
/// changes nothing: the SameSite=Strict cookie is not sent, and the relay refuses a cross-site form anyway.
#[test]
fn a_form_posted_from_another_site_changes_nothing() {
    let s = Session::start(&["browser-ext:chatgpt"]).unwrap();
    let short = fixtures::cases("chatgpt")
        .unwrap()
        .into_iter()
        .find(|c| c.name == "chatgpt/short")
        .unwrap();
    let _tab = s.open_case(&short).unwrap();
    assert!(s.wait_landed(&short, LAND_TIMEOUT).unwrap().is_empty());
    let open: Value =
        serde_json::from_str(s.relay.cli(&["open", "--json"]).unwrap().trim()).unwrap();
    let dash = s.browser.open_tab(open["url"].as_str().unwrap()).unwrap();
    dash.wait_for("location.pathname === '/'", Duration::from_secs(10))
        .unwrap();
    let before = s.messages("browser-ext:chatgpt").unwrap().len();
    assert!(before > 0);

    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("evil.html");
    std::fs::write(
        &page,
        format!(
            "<!doctype html><title>win a prize</title><form id=f method=post action=\"{}/privacy/forget\">\
             <input name=csrf value=guess><input name=site value=browser-ext:chatgpt><input name=confirm value={before}>\
             </form><script>document.getElementById('f').submit()</script>",
            s.relay.url()
        ),
    )
    .unwrap();
    s.server.route("/evil", page);
    let evil = s.browser.open_tab("https://chatgpt.com/evil").unwrap();
    let landed = evil
        .wait_for(
            "document.readyState === 'complete' && location.href.includes('/privacy/forget') ? location.href + ' ' + document.body.innerText : ''",
            Duration::from_secs(10),
        )
        .unwrap();
    eprintln!("the cross-site post ended at: {landed}");
    assert!(
        landed
            .as_str()
            .unwrap()
            .contains("this form was sent from another site"),
        "the relay did not refuse the cross-site post: {landed}"
    );
    assert_eq!(
        s.messages("browser-ext:chatgpt").unwrap().len(),
        before,
        "a cross-site form post forgot turns"
    );

    // On the dashboard's own page: a form whose token the relay never minted is refused, and so is a token
    // that was already used once.
    let long = fixtures::cases("chatgpt")
        .unwrap()
        .into_iter()
        .find(|c| c.name == "chatgpt/long")
        .unwrap();
    let _long_tab = s.open_case(&long).unwrap();
    assert!(s.wait_landed(&long, LAND_TIMEOUT).unwrap().is_empty());
    let base = s.relay.url();
    let submit_with = |page: &str, token: Option<&str>| {
        dash.navigate(&format!("{base}{page}")).unwrap();
        let set = match token {
            Some(t) => format!("f.querySelector('input[name=csrf]').value = {};", json!(t)),
            None => String::new(),
        };
        let used = dash
            .eval(&format!(
                "(() => {{ const f = document.querySelector('main form[method=post]'); {set} \
                 const v = f.querySelector('input[name=csrf]').value; f.querySelector('button').click(); return v; }})()"
            ))
            .unwrap();
        dash.wait_for(
            "document.readyState === 'complete' && !location.pathname.endsWith('/forget')",
            Duration::from_secs(10),
        )
        .ok();
        std::thread::sleep(Duration::from_millis(500));
        (used.as_str().unwrap().to_string(), text_of(&dash))
    };
    let (_, refused) = submit_with("/privacy/forget?site=browser-ext:chatgpt", Some("guess"));
    assert!(refused.contains("expired or was already sent"), "{refused}");
    let all = s.messages("browser-ext:chatgpt").unwrap().len();
    let short_id = short.thread_ids()[0].clone();
    let (token, done) = submit_with(&format!("/threads/{short_id}/forget"), None);
    assert!(done.contains("Forgotten: 4 messages"), "{done}");
    let long_id = long.thread_ids()[0].clone();
    let (_, reused) = submit_with(&format!("/threads/{long_id}/forget"), Some(&token));
    assert!(
        reused.contains("expired or was already sent"),
        "a used CSRF token worked again: {reused}"
    );
    let left = s.messages("browser-ext:chatgpt").unwrap();
    assert_eq!(left.len(), all - 4);
    assert!(left.iter().any(|m| m.thread_id == long_id));
}

/// What the library says about local AI tools: a harvested Claude Code session whose file Claude Code then
/// deleted is marked "Only copy" on its page, and a Gemini CLI whose sessions are not harvested (its default
/// 30-day retention will delete them) is warned about on the overview, naming the setting to change. The harvest
/// runs through the real CLI beside the running relay, on transcript files the test writes in the shape
/// `relay/import/tests/fixtures/harvest/README.md` documents.
#[test]
fn the_library_warns_about_tools_that_delete_sessions_and_marks_the_only_copy() {
    let s = Session::start(&["browser-ext:chatgpt"]).unwrap();
    let shots = run_dir();
    let home = tempfile::tempdir().unwrap();
    let sid = "7e000000-0000-4000-8000-0000000000e2";
    let project = home.path().join(".claude/projects/-home-ada-src-orbit");
    std::fs::create_dir_all(&project).unwrap();
    let line = |uuid: &str, parent: Option<&str>, kind: &str, text: &str, at: &str| {
        json!({"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": sid, "timestamp": at,
            "message": {"role": kind, "content": text}})
        .to_string()
    };
    let session = project.join(format!("{sid}.jsonl"));
    std::fs::write(
        &session,
        [
            line(
                "u1",
                None,
                "user",
                "Why does the orbit parser stop at line 40?",
                "2026-11-01T10:00:00Z",
            ),
            line(
                "a1",
                Some("u1"),
                "assistant",
                "It hits the 4 KiB buffer cap; raise it.",
                "2026-11-01T10:00:05Z",
            ),
        ]
        .join("\n")
            + "\n",
    )
    .unwrap();
    let chats = home.path().join(".gemini/tmp/orbit/chats");
    std::fs::create_dir_all(&chats).unwrap();
    std::fs::write(
        chats.join("session-2026-11-01T10-00-g1.json"),
        r#"{"sessionId":"g1","messages":[{"id":"m1","type":"user","content":"hello","timestamp":"2026-11-01T10:00:00Z"}]}"#,
    )
    .unwrap();
    let home_arg = home.path().display().to_string();
    let pass = [
        "harvest",
        "--once",
        "--home",
        &home_arg,
        "--source",
        "claude-code",
    ];
    s.relay.cli(&pass).unwrap();
    std::fs::remove_file(&session).unwrap();
    let out = s.relay.cli(&[&pass[..], &["--json"]].concat()).unwrap();
    let report: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["sources"][0]["files_gone"], 1, "{report}");

    let open: Value =
        serde_json::from_str(s.relay.cli(&["open", "--json"]).unwrap().trim()).unwrap();
    let base = s.relay.url();
    let dash = s.browser.open_tab(open["url"].as_str().unwrap()).unwrap();
    dash.wait_for(
        "location.pathname === '/' && document.readyState === 'complete'",
        Duration::from_secs(10),
    )
    .unwrap();
    let text = text_of(&dash);
    assert!(text.contains("Local AI tools"), "{text}");
    assert!(
        text.contains("Gemini CLI deletes sessions 30 days after their last change")
            && text.contains("general.sessionRetention"),
        "{text}"
    );
    assert!(
        text.contains("1 conversation whose transcript files their tool deleted"),
        "{text}"
    );
    shoot(&dash, &shots, "tools-overview");

    let thread = personkit_testkit::thread_id("harvest:claude-code", sid);
    dash.navigate(&format!("{base}/threads/{thread}")).unwrap();
    dash.wait_for(
        "document.readyState === 'complete'",
        Duration::from_secs(10),
    )
    .unwrap();
    let text = text_of(&dash);
    assert!(
        text.contains("Only copy.") && text.contains("deleted its transcript file"),
        "{text}"
    );
    assert!(text.contains("It hits the 4 KiB buffer cap"), "{text}");
    shoot(&dash, &shots, "thread-only-copy");
}
