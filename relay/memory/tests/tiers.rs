//! The memory tiers on a real corpus file: the short digest (budget, time order, nothing from a forgotten thread),
//! mid and long with a scripted model (budgets enforced, every version kept, a failing model leaves the current
//! version and says so, text scrubbed on its way to a remote endpoint), the context tiers, and once mid and long
//! with the real local model (SmolLM2-135M from PyPI, installed by scripts/setup).
//!
//! The scripted model stands in for a model endpoint: it answers with the texts a test queues and records what it
//! was sent. Names a remote endpoint so scrubbing applies, as it would for a cloud API that cannot be reached here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::Mutex;

use time::macros::{datetime, offset};
use time::{Duration, OffsetDateTime};

use personkit_llm::{ChatModel, Completion, LlmError, Request, Usage};
use personkit_memory::context::{Ask, assemble};
use personkit_memory::{Settings, Tier, distill, profile, short, status, tokens};
use personkit_shared::wire::{ClientInfo, Role, build_observation};
use personkit_store::Connection;
use personkit_store::forget::{Selection, forget};
use personkit_store::ingest::{Origin, ingest_observations};
use personkit_store::knowledge::{self as krows, NewEntry};
use personkit_store::memory as rows;

const NOW: OffsetDateTime = datetime!(2026-11-27 20:00 UTC);

fn corpus() -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let conn = personkit_store::db::open(&dir.path().join("corpus.db")).unwrap();
    (dir, conn)
}

/// One thread of `turns` (user first, alternating) starting at `at`, a minute apart.
fn thread(
    conn: &mut Connection,
    surface: &str,
    id: &str,
    title: &str,
    at: OffsetDateTime,
    turns: &[&str],
) {
    let client = ClientInfo {
        app_version: "0.1.0".into(),
        device_id: "ext".into(),
    };
    let obs: Vec<_> = turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let role = if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            let when = at + Duration::minutes(i as i64);
            let mut o = build_observation(
                surface,
                id,
                role,
                t,
                Some(i as u32),
                None,
                &personkit_store::clock::fmt_time(when),
                client.clone(),
            );
            o.title = Some(title.into());
            o
        })
        .collect();
    let r = ingest_observations(
        conn,
        &Origin {
            device_id: "d".into(),
        },
        &obs,
        NOW,
    )
    .unwrap();
    assert_eq!(r.rejected, 0, "{r:?}");
}

/// Five days of work: two chats a day and, on the last day, an agent session.
fn seed(conn: &mut Connection) {
    for d in 0..5 {
        let day = datetime!(2026-11-23 09:00 UTC) + Duration::days(d);
        thread(
            conn,
            "browser-ext:chatgpt",
            &format!("plan-{d}"),
            &format!("Relay plan day {d}"),
            day,
            &[
                &format!("day {d}: how should the relay batch its writes?"),
                "One transaction per batch.",
            ],
        );
        thread(
            conn,
            "browser-ext:claude",
            &format!("soup-{d}"),
            &format!("Soup number {d}"),
            day + Duration::hours(3),
            &[
                &format!("a lentil soup for day {d}, ask ana.garcia@example.org"),
                "Here is a recipe.",
            ],
        );
    }
    thread(
        conn,
        "harvest:claude-code",
        "session-1",
        "fix the flaky sync test",
        datetime!(2026-11-27 15:00 UTC),
        &[
            "make the sync test wait for the pull cursor",
            "Done: the test now polls the cursor.",
        ],
    );
}

fn approve(conn: &Connection, kind: &str, topic: &str, position: &str, status: &str) -> String {
    let id = krows::insert(
        conn,
        &NewEntry {
            kind: kind.into(),
            topic: topic.into(),
            position: position.into(),
            reasoning: "because it says so in the turns".into(),
            confidence: "high".into(),
            stability: "stable".into(),
            origin: "pipeline".into(),
            ..Default::default()
        },
        datetime!(2026-11-26 22:00 UTC),
    )
    .unwrap();
    if status != "pending" {
        krows::decide(conn, &id, status, "user", NOW).unwrap();
    }
    id
}

#[test]
fn the_short_digest_fits_its_budget_in_time_order_and_forgets() {
    let (_d, mut conn) = corpus();
    seed(&mut conn);
    approve(
        &conn,
        "decision",
        "write batching",
        "one transaction per batch",
        "approved",
    );
    approve(
        &conn,
        "standard",
        "secret pending topic",
        "never shown",
        "pending",
    );

    let full = short::build(&conn, 3_000, NOW, offset!(UTC)).unwrap();
    assert_eq!(
        full.days,
        [
            "2026-11-23",
            "2026-11-24",
            "2026-11-25",
            "2026-11-26",
            "2026-11-27"
        ]
    );
    assert!(full.tokens <= 3_000);
    let pos = |s: &str| {
        full.body
            .find(s)
            .unwrap_or_else(|| panic!("{s:?} not in\n{}", full.body))
    };
    assert!(pos("## 2026-11-23") < pos("## 2026-11-24"));
    assert!(
        pos("Relay plan day 4") < pos("Soup number 4"),
        "threads in time order within a day"
    );
    assert!(pos("Agent sessions:") > pos("## 2026-11-27"));
    assert!(full.body.contains(
        "claude-code — fix the flaky sync test (2 turns); asked: make the sync test wait"
    ));
    assert!(
        full.body
            .contains("Decisions:\n- write batching: one transaction per batch")
    );
    assert!(
        !full.body.contains("secret pending topic"),
        "pending knowledge is never in memory"
    );

    // A small budget keeps the newest days.
    let small = short::build(&conn, 150, NOW, offset!(UTC)).unwrap();
    assert!(small.tokens <= 150, "{} tokens", small.tokens);
    assert_eq!(small.days.last().unwrap(), "2026-11-27");
    assert!(small.days.len() < 5);
    // Days are local days: at UTC+12 the afternoon session of the 27th is on the 28th.
    let east = short::build(&conn, 3_000, NOW, offset!(+12)).unwrap();
    assert_eq!(east.days.last().unwrap(), "2026-11-28");

    // Stored, then a thread is forgotten: the version is withdrawn, the tier due, and the next one lacks it.
    let settings = Settings::default();
    let run = short::run(&conn, &settings, NOW, offset!(UTC), "manual").unwrap();
    assert_eq!(run.outcome, "ok");
    let again = short::run(&conn, &settings, NOW, offset!(UTC), "manual").unwrap();
    assert_eq!(again.outcome, "unchanged");
    let soup = personkit_shared::ids::thread_id("browser-ext:claude", "soup-2");
    forget(&mut conn, &Selection::thread(&soup.to_string()), NOW).unwrap();
    let v1 = rows::version(&conn, run.version.as_deref().unwrap())
        .unwrap()
        .unwrap();
    assert!(v1.withdrawn_at.is_some() && v1.body.is_empty());
    assert!(rows::latest(&conn, "short").unwrap().is_none());
    assert_eq!(personkit_memory::due_now(&conn).unwrap(), [Tier::Short]);
    let rerun = short::run(&conn, &settings, NOW, offset!(UTC), "scheduled").unwrap();
    let v2 = rows::latest(&conn, "short").unwrap().unwrap();
    assert_eq!(rerun.version.as_deref(), Some(v2.id.as_str()));
    assert!(!v2.body.contains("Soup number 2") && !v2.body.contains("soup for day 2"));
    assert!(v2.body.contains("Soup number 3"));
    assert!(personkit_memory::due_now(&conn).unwrap().is_empty());
    assert_eq!(
        rows::versions(&conn, "short", 10, None).unwrap().len(),
        2,
        "every version kept"
    );
}

/// A model that answers with queued texts (or errors) and keeps what it was sent.
#[derive(Debug)]
struct Scripted {
    answers: Mutex<VecDeque<Result<String, String>>>,
    seen: Mutex<Vec<Request>>,
    endpoint: Option<String>,
}

impl Scripted {
    fn new(endpoint: Option<&str>, answers: &[Result<&str, &str>]) -> Scripted {
        Scripted {
            answers: Mutex::new(
                answers
                    .iter()
                    .map(|a| a.map(str::to_owned).map_err(str::to_owned))
                    .collect(),
            ),
            seen: Mutex::default(),
            endpoint: endpoint.map(str::to_owned),
        }
    }
    fn last_user(&self) -> String {
        self.seen.lock().unwrap().last().unwrap().user.clone()
    }
}

impl ChatModel for Scripted {
    fn kind(&self) -> &'static str {
        "scripted"
    }
    fn model_id(&self) -> &str {
        "scripted:test"
    }
    fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }
    fn context_tokens(&self) -> usize {
        8_192
    }
    fn complete(&self, req: &Request) -> Result<Completion, LlmError> {
        self.seen.lock().unwrap().push(req.clone());
        match self
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .expect("an answer queued")
        {
            Ok(text) => Ok(Completion {
                text,
                usage: Usage::default(),
            }),
            Err(e) => Err(LlmError::Inference(e)),
        }
    }
}

#[test]
fn mid_and_long_keep_budgets_and_versions_and_survive_a_failing_model() {
    let (_d, mut conn) = corpus();
    seed(&mut conn);
    let mut settings = Settings::default();
    settings.mid.budget = 200;
    settings.long.enabled = true;
    let knowledge = personkit_knowledge::Settings::default();
    let remote = Some("https://api.example.com/v1");

    // Nothing to distil yet.
    let m = Scripted::new(remote, &[]);
    let e = distill::run(&conn, Tier::Mid, &settings, &knowledge, &m, NOW, "manual").unwrap_err();
    assert!(e.to_string().contains("personkit distill short"), "{e}");

    short::run(&conn, &settings, NOW, offset!(UTC), "manual").unwrap();
    let long_answer = format!(
        "```markdown\n## Recurring themes\n{}\n```",
        "- the user plans how the relay batches its writes\n".repeat(60)
    );
    let m = Scripted::new(
        remote,
        &[
            Ok(&long_answer),
            Err("the server went away"),
            Ok("## Current priorities\n- ship the relay's write batching"),
        ],
    );
    let r1 = distill::run(&conn, Tier::Mid, &settings, &knowledge, &m, NOW, "manual").unwrap();
    assert_eq!(r1.outcome, "ok");
    let v1 = rows::latest(&conn, "mid").unwrap().unwrap();
    assert!(
        v1.tokens <= 200 && tokens(&v1.body) <= 200,
        "{} tokens",
        v1.tokens
    );
    assert!(v1.body.starts_with("## Recurring themes") && v1.body.ends_with("(cut to the budget)"));
    assert_eq!(v1.model.as_deref(), Some("scripted:test"));
    assert_eq!(v1.prompt_version.as_deref(), Some(distill::PROMPT_VERSION));
    assert!(
        v1.sources >= 10,
        "a mid version draws on the short version's threads"
    );
    // What left the machine was scrubbed.
    let sent = m.last_user();
    assert!(sent.contains("Relay plan day 4"));
    assert!(!sent.contains("ana.garcia@example.org"), "{sent}");

    let later = NOW + Duration::days(7);
    let e = distill::run(
        &conn,
        Tier::Mid,
        &settings,
        &knowledge,
        &m,
        later,
        "scheduled",
    )
    .unwrap_err();
    assert_eq!(e.code(), "llm_inference");
    assert_eq!(
        rows::latest(&conn, "mid").unwrap().unwrap().id,
        v1.id,
        "the current version stays"
    );
    let st = status(&conn, &settings, &Ok(personkit_llm::LlmConfig::default())).unwrap();
    let mid = st.iter().find(|s| s.tier == Tier::Mid).unwrap();
    let last = mid.last_run.as_ref().unwrap();
    assert_eq!(last.outcome, "failed");
    assert!(
        last.message.contains("version 1 stays in use"),
        "{}",
        last.message
    );

    let r3 = distill::run(
        &conn,
        Tier::Mid,
        &settings,
        &knowledge,
        &m,
        later + Duration::minutes(1),
        "manual",
    )
    .unwrap();
    let v3 = rows::latest(&conn, "mid").unwrap().unwrap();
    assert_eq!((r3.outcome.as_str(), v3.number), ("ok", 2));
    let d = personkit_memory::diff::diff(&v1.body, &v3.body);
    assert!(d.added >= 1 && d.removed >= 1);

    // Long integrates mid into the previous long.
    let m = Scripted::new(
        None,
        &[
            Ok("## Long-running projects\n- the relay, whose writes are batched"),
            Ok(
                "## Long-running projects\n- the relay, whose writes are batched\n## History\n- week 48: batching shipped",
            ),
        ],
    );
    distill::run(
        &conn,
        Tier::Long,
        &settings,
        &knowledge,
        &m,
        later + Duration::minutes(2),
        "manual",
    )
    .unwrap();
    let l1 = rows::latest(&conn, "long").unwrap().unwrap();
    assert_eq!(l1.based_on, std::slice::from_ref(&v3.id));
    assert!(
        m.last_user()
            .contains("Current long-term memory:\n\n(empty)")
    );
    distill::run(
        &conn,
        Tier::Long,
        &settings,
        &knowledge,
        &m,
        later + Duration::minutes(3),
        "manual",
    )
    .unwrap();
    let l2 = rows::latest(&conn, "long").unwrap().unwrap();
    assert_eq!(l2.based_on, [v3.id.clone(), l1.id.clone()]);
    assert!(
        m.last_user()
            .contains("- the relay, whose writes are batched"),
        "the previous long memory is integrated"
    );

    // Off means off.
    let mut off = settings.clone();
    off.long.enabled = false;
    let e = distill::run(&conn, Tier::Long, &off, &knowledge, &m, later, "manual").unwrap_err();
    assert_eq!(e.code(), "memory_tier_off");
}

#[test]
fn context_tiers_stay_within_budget_and_read_only_what_is_current_and_approved() {
    let (dir, mut conn) = corpus();
    seed(&mut conn);
    approve(
        &conn,
        "standard",
        "error handling",
        "errors say what to do next",
        "approved",
    );
    approve(
        &conn,
        "standard",
        "unapproved idea",
        "never shown to agents",
        "pending",
    );
    let path = dir.path().join(".dotperson/profile.md");
    profile::write(
        &conn,
        &path,
        "# About me\nI build personkit in Rust.\n\n\nI like short answers.\n",
        NOW,
    )
    .unwrap();
    short::run(&conn, &Settings::default(), NOW, offset!(UTC), "manual").unwrap();
    for (tier, body) in [
        ("mid", "## Current priorities\n- the memory tiers"),
        ("long", "## History\n- started personkit"),
    ] {
        rows::insert(
            &conn,
            &rows::NewVersion {
                tier: tier.into(),
                body: body.into(),
                tokens: tokens(body) as u64,
                ..Default::default()
            },
            NOW,
        )
        .unwrap();
    }
    let ctx = |tier, budget, compact| {
        assemble(
            &conn,
            &Ask::checked(tier, budget, compact).unwrap(),
            &path,
            NOW,
            offset!(UTC),
        )
        .unwrap()
    };
    let t1 = ctx(1, None, true);
    assert!(
        t1.text
            .contains("I build personkit in Rust.\nI like short answers."),
        "compact drops blank lines"
    );
    assert!(!t1.text.contains("Relay plan"));
    let t2 = ctx(2, None, true);
    for s in [
        "I build personkit",
        "the memory tiers",
        "errors say what to do next",
        "Relay plan day 4",
    ] {
        assert!(t2.text.contains(s), "tier 2 lacks {s:?}");
    }
    assert!(!t2.text.contains("started personkit") && !t2.text.contains("never shown to agents"));
    let t3 = ctx(3, None, false);
    assert!(t3.text.contains("started personkit"));
    assert!(
        t3.text.contains("Why: because it says so"),
        "full keeps reasoning"
    );
    assert!(t3.text.find("Long-term memory").unwrap() < t3.text.find("This week").unwrap());
    let t4 = ctx(4, None, true);
    assert!(
        t4.text.contains("Today's open threads") && t4.text.contains("fix the flaky sync test")
    );
    for tier in 1..=4 {
        for budget in [100, 180, 400, 1_000] {
            let c = ctx(tier, Some(budget), true);
            assert!(
                c.tokens <= budget,
                "tier {tier} budget {budget}: {} tokens",
                c.tokens
            );
            assert_eq!(c.tokens, tokens(&c.text));
            assert!(
                c.text.contains("I build personkit"),
                "the profile comes first in the budget"
            );
        }
    }
    assert!(ctx(4, Some(100), true).sections.iter().any(|s| s.cut));
    assert!(Ask::checked(5, None, true).is_err());
    assert!(Ask::checked(2, Some(40_000), true).is_err());
}

#[test]
fn mid_and_long_with_the_real_local_model() {
    let (_d, mut conn) = corpus();
    seed(&mut conn);
    let mut cfg = personkit_llm::LlmConfig::of_kind(personkit_llm::LlmKind::Local);
    cfg.model_path = Some(personkit_testkit::standin::llm_model_path());
    let model = personkit_llm::open(&cfg).unwrap().unwrap();
    let mut settings = Settings::default();
    settings.long.enabled = true;
    settings.mid.budget = 300;
    settings.long.budget = 300;
    let knowledge = personkit_knowledge::Settings::default();
    short::run(&conn, &settings, NOW, offset!(UTC), "manual").unwrap();
    for tier in [Tier::Mid, Tier::Long] {
        let r = distill::run(
            &conn,
            tier,
            &settings,
            &knowledge,
            model.as_ref(),
            NOW,
            "manual",
        )
        .unwrap_or_else(|e| panic!("{tier:?}: {e}"));
        assert_eq!(r.outcome, "ok", "{tier:?}: {}", r.message);
        let v = rows::latest(&conn, tier.as_str()).unwrap().unwrap();
        assert!(v.tokens <= 300 && !v.body.trim().is_empty());
        assert_eq!(v.model.as_deref(), Some(model.model_id()));
    }
    let audit = krows::audit_log(&conn, Some("call"), 10).unwrap();
    assert_eq!(audit.len(), 2);
    assert!(audit.iter().all(|a| a.detail["sent_as"] == "in_process"));
}
