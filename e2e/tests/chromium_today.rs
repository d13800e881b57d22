//! The dashboard's Today page in the real Chromium against the real relay: a corpus of turns sent over HTTP on
//! four sites across the last 90 days (and some older, some edited), two Claude Code sessions in two project
//! folders read by `personkit harvest --once`, and an agent's knowledge proposal over `/mcp` waiting for approval.
//! Signed in through `personkit open`'s link, the overview's link leads to `/today`, whose chart bars (their
//! `data-` attributes) and numbers table must equal what was sent, per local day and site, at the offset the page
//! counted in; the cards count today's turns per site and project, and the pending entry is linked.
//!
//! The page is screenshotted in light and dark into `<target>/e2e-screenshots/today-<unix time>/`;
//! `docs/screenshots/` holds one committed copy of each.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use personkit_e2e::chromium::{Chromium, LaunchOptions};
use personkit_e2e::page::{eval_json, text_of};
use personkit_e2e::screenshots;
use personkit_shared::time::{day, rfc3339};
use personkit_testkit::{Relay, alternating_role, claude_code_line, cli, temp_db, turn_at};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(15);
const DAY_MS: i64 = 86_400_000;
const SITES: [&str; 4] = [
    "browser-ext:chatgpt",
    "browser-ext:claude",
    "browser-ext:gemini",
    "browser-ext:deepseek",
];

/// A small deterministic generator (the same corpus on every run, relative to today).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// One MCP tool call over the relay's `/mcp` with an agent token (the current protocol revision: no handshake).
fn mcp_call(relay: &Relay, token: &str, tool: &str, args: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let bearer = format!("Bearer {token}");
    let r = relay.http.post_with(
        "/mcp",
        &[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("authorization", &bearer),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", tool),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{tool}: {}", r.body);
    let v = r.json();
    assert_eq!(v["result"]["isError"], json!(false), "{tool}: {v}");
    v["result"]["structuredContent"].clone()
}

#[test]
fn today_page_charts_the_corpus_per_day_and_site_in_light_and_dark() {
    let shots = screenshots::run_dir("today").unwrap();
    eprintln!("screenshots: {}", shots.display());
    let (dir, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let device = relay.pair_printed("laptop");

    // The offset this machine's local days are counted at (the CLI and the relay read the same one).
    let offset_min = relay.cli_json(&["today", "--json"])["utc_offset_minutes"]
        .as_i64()
        .unwrap();
    let off = offset_min * 60_000;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let today_start = (now + off).div_euclid(DAY_MS) * DAY_MS - off;
    let local_day = |ms: i64| day(ms + off);

    // Turns per site and day: busier on weekdays of the recent weeks, quiet some days, one site only lately.
    let mut rng = Lcg(33);
    let mut items = Vec::new();
    let mut sent: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut today_turns: BTreeMap<String, u64> = BTreeMap::new();
    for ago in (0..=95i64).rev() {
        let start = today_start - ago * DAY_MS;
        for (k, site) in SITES.iter().enumerate() {
            if k == 3 && ago > 30 {
                continue;
            }
            let threads = rng.next(if ago < 40 { 4 } else { 3 });
            for th in 0..threads {
                let turns = 2 * (1 + rng.next(3)) as u32;
                // Today: between midnight and now; other days: 08:00 to 21:00.
                let first = if ago == 0 {
                    start + (now - start) * (th as i64 + 1) / (threads as i64 + 2)
                } else {
                    start + 8 * 3_600_000 + rng.next(13 * 3_600_000) as i64
                };
                let conv = format!("{k}-{ago}-{th}");
                for i in 0..turns {
                    let at = first + i64::from(i) * 1000;
                    items.push(turn_at(
                        site,
                        &conv,
                        alternating_role(i as usize),
                        &format!("turn {i} of conversation {conv} on {site}"),
                        Some(i),
                        None,
                        &rfc3339(at),
                    ));
                    *sent.entry((local_day(at), (*site).to_owned())).or_default() += 1;
                    if ago == 0 {
                        *today_turns.entry((*site).to_owned()).or_default() += 1;
                    }
                }
                // Some answers were regenerated: a second revision of the same position counts once.
                if rng.next(4) == 0 {
                    items.push(turn_at(
                        site,
                        &conv,
                        alternating_role(1),
                        &format!("a regenerated answer in {conv}"),
                        Some(1),
                        None,
                        &rfc3339(first + 500),
                    ));
                }
            }
        }
    }
    for chunk in items.chunks(400) {
        let r = relay.http.send_batch(&device, chunk);
        assert_eq!(r["rejected"], 0, "{r}");
    }

    // Two Claude Code sessions today, in projects `orbit` and `kite`.
    let home = dir.path().join("home");
    let at = rfc3339(today_start + (now - today_start) / 2);
    for (project, session, n) in [
        (
            "-home-ada-src-orbit",
            "11111111-1111-4111-8111-111111111111",
            4,
        ),
        (
            "-home-ada-src-kite",
            "22222222-2222-4222-8222-222222222222",
            2,
        ),
    ] {
        let folder = home.join(".claude/projects").join(project);
        std::fs::create_dir_all(&folder).unwrap();
        let lines: Vec<String> = (0..n)
            .map(|i| claude_code_line(session, i, &format!("step {i} of the work"), &at))
            .collect();
        std::fs::write(
            folder.join(format!("{session}.jsonl")),
            lines.join("\n") + "\n",
        )
        .unwrap();
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
    *sent
        .entry((
            local_day(today_start + (now - today_start) / 2),
            "harvest:claude-code".into(),
        ))
        .or_default() += 6;
    today_turns.insert("harvest:claude-code".into(), 6);

    // An agent's proposal, waiting for approval.
    let messages = relay.cli_json(&["corpus", "messages", "--json"]);
    let mid = messages[0]["id"].as_str().unwrap().to_owned();
    let agent = relay.cli_json(&["agents", "add", "claude-code", "--json"])["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let filed = mcp_call(
        &relay,
        &agent,
        "propose_knowledge",
        json!({"type": "decision", "topic": "release timing", "position": "Releases go out on Tuesdays",
               "reasoning": "A release early in the week leaves days to fix what breaks",
               "tags": ["releases"], "sources": [mid], "reason": "The user settled the release day"}),
    );
    assert_eq!(filed["outcome"], "pending", "{filed}");

    // Sign in, and follow the overview's link.
    let browser = Chromium::launch(&LaunchOptions::default()).unwrap();
    let open = relay.cli_json(&["open", "--json"]);
    let tab = browser.open_tab(open["url"].as_str().unwrap()).unwrap();
    tab.wait_for(
        "location.pathname === '/' && document.readyState === 'complete'",
        WAIT,
    )
    .unwrap();
    let clicked = tab
        .eval("(() => { const a = document.querySelector('main p.today-link a[href=\"/today\"]'); if (!a) return false; a.click(); return true; })()")
        .unwrap();
    assert_eq!(clicked, json!(true), "{}", text_of(&tab));
    tab.wait_for(
        "location.pathname === '/today' && document.readyState === 'complete' && !!document.querySelector('svg#chart')",
        WAIT,
    )
    .unwrap_or_else(|e| panic!("no chart on /today ({e}): {}", text_of(&tab)));
    assert_eq!(
        eval_json(
            &tab,
            "document.querySelector('header nav a[aria-current=\"page\"]').getAttribute('href')"
        ),
        json!("/today")
    );

    // The bars are the corpus's counts, per local day and site.
    assert_eq!(
        eval_json(
            &tab,
            "+document.querySelector('svg#chart').dataset.offsetMinutes"
        ),
        json!(offset_min)
    );
    let days: Vec<String> = serde_json::from_value(eval_json(
        &tab,
        "[...document.querySelectorAll('svg#chart g.day')].map(g => g.dataset.day)",
    ))
    .unwrap();
    assert_eq!(days.len(), 90);
    assert_eq!(days.last().unwrap(), &local_day(now));
    let bars: Vec<(String, String, u64)> = serde_json::from_value(eval_json(
        &tab,
        "[...document.querySelectorAll('svg#chart rect.bar')].map(r => [r.dataset.day, r.dataset.surface, +r.dataset.turns])",
    ))
    .unwrap();
    let charted: BTreeMap<(String, String), u64> =
        bars.into_iter().map(|(d, s, n)| ((d, s), n)).collect();
    let expected: BTreeMap<(String, String), u64> = sent
        .iter()
        .filter(|((d, _), _)| days.contains(d))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    assert_eq!(charted, expected);
    assert!(expected.len() < sent.len(), "older turns are left out");
    // Each bar has a title, and a stack's height follows its day's total (the busiest day reaches highest).
    assert_eq!(
        eval_json(
            &tab,
            "[...document.querySelectorAll('svg#chart rect.bar')].every(r => r.querySelector('title') && r.getBBox().height > 0)"
        ),
        json!(true)
    );
    let busiest = expected
        .iter()
        .fold(BTreeMap::<&str, u64>::new(), |mut m, ((d, _), n)| {
            *m.entry(d.as_str()).or_default() += n;
            m
        });
    let lowest_y: String = serde_json::from_value(eval_json(
        &tab,
        "(() => { let best = null, y = Infinity; for (const r of document.querySelectorAll('svg#chart rect.bar')) { const v = +r.getAttribute('y'); if (v < y) { y = v; best = r.dataset.day; } } return best; })()",
    ))
    .unwrap();
    assert_eq!(
        busiest[lowest_y.as_str()],
        *busiest.values().max().unwrap(),
        "the highest stack is a busiest day"
    );

    // The numbers table says the same, for screen readers.
    let table: Vec<(String, String, u64)> = serde_json::from_value(eval_json(
        &tab,
        "[...document.querySelectorAll('#chart-numbers tbody td[data-surface]')].filter(td => td.textContent !== '0').map(td => [td.closest('tr').dataset.day, td.dataset.surface, +td.textContent])",
    ))
    .unwrap();
    assert_eq!(
        table
            .into_iter()
            .map(|(d, s, n)| ((d, s), n))
            .collect::<BTreeMap<_, _>>(),
        expected
    );

    // Today's card: per site, and the agent sessions per project.
    let card: BTreeMap<String, u64> = serde_json::from_value::<Vec<(String, u64)>>(eval_json(
        &tab,
        "[...document.querySelectorAll('#today-now table.sites tbody tr')].map(tr => [tr.dataset.surface, +tr.querySelectorAll('td')[1].textContent])",
    ))
    .unwrap()
    .into_iter()
    .collect();
    assert_eq!(card, today_turns);
    let projects: Vec<(String, String)> = serde_json::from_value(eval_json(
        &tab,
        "[...document.querySelectorAll('#today-now table.projects tbody tr')].map(tr => [tr.querySelector('th').textContent, tr.querySelectorAll('td')[2].textContent])",
    ))
    .unwrap();
    assert_eq!(
        projects,
        vec![("orbit".into(), "4".into()), ("kite".into(), "2".into())]
    );
    let page = text_of(&tab);
    assert!(page.contains("1 entry waiting for your approval"), "{page}");
    assert_eq!(
        eval_json(
            &tab,
            "!!document.querySelector('#knowledge-pending a[href=\"/knowledge?status=pending\"]')"
        ),
        json!(true)
    );
    assert!(page.contains("Capture health"), "{page}");
    assert_eq!(
        eval_json(
            &tab,
            "document.querySelectorAll('table.health .light.green').length"
        ),
        json!(SITES.len() + 1),
        "every site sent turns just now: {page}"
    );

    // Dark and light: the bars take their site's colour from the stylesheet (no inline styles under the CSP).
    for scheme in ["light", "dark"] {
        tab.call(
            "Emulation.setEmulatedMedia",
            json!({"features": [{"name": "prefers-color-scheme", "value": scheme}]}),
        )
        .unwrap();
        let fills: Vec<String> = serde_json::from_value(eval_json(
            &tab,
            "[0,1,2,3,4].map(k => { const r = document.querySelector('svg#chart rect.site-' + k); return r ? getComputedStyle(r).fill : ''; })",
        ))
        .unwrap();
        let distinct: std::collections::BTreeSet<&String> =
            fills.iter().filter(|f| !f.is_empty()).collect();
        assert_eq!(distinct.len(), SITES.len() + 1, "{scheme}: {fills:?}");
    }
    tab.call("Emulation.setEmulatedMedia", json!({"features": []}))
        .unwrap();
    screenshots::shoot(&tab, &shots, "today").unwrap();
}
