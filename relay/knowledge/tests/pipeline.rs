//! The pipeline's rules, driven by a scripted model (a test double of the `ChatModel` trait: it answers what each
//! test tells it to, so the cap, the fail-closed judge, validation, reconciling and forgetting can be checked
//! exactly). The real model runs the same path in `relay/cli/tests/knowledge.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

use personkit_knowledge::{Settings, run_once};
use personkit_llm::{ChatModel, Completion, LlmError, Request, Usage};
use personkit_shared::wire::{ClientInfo, Role, build_observation};
use personkit_store::Db;
use personkit_store::clock::Clock;
use personkit_store::forget::{self, Selection};
use personkit_store::ingest::{Origin, ingest_observations};
use personkit_store::knowledge::{self as rows, Filter};

type Script = Box<dyn Fn(&str, &Request, usize) -> Result<String, LlmError> + Send + Sync>;

/// Answers by stage (`extract`, `judge`, `reduce`, from the system prompt) and the stage's call count.
struct Scripted {
    script: Script,
    seen: Mutex<Vec<(String, Request)>>,
}

impl std::fmt::Debug for Scripted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scripted")
    }
}

impl Scripted {
    fn new(
        script: impl Fn(&str, &Request, usize) -> Result<String, LlmError> + Send + Sync + 'static,
    ) -> Self {
        Scripted {
            script: Box::new(script),
            seen: Mutex::new(Vec::new()),
        }
    }
    fn calls(&self, stage: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(s, _)| s == stage)
            .count()
    }
}

fn stage(req: &Request) -> &'static str {
    if req.system.starts_with("You check") {
        "judge"
    } else if req.system.starts_with("You merge") {
        "reduce"
    } else {
        "extract"
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
        None
    }
    fn context_tokens(&self) -> usize {
        8_192
    }
    fn complete(&self, req: &Request) -> Result<Completion, LlmError> {
        let st = stage(req);
        let n = {
            let mut seen = self.seen.lock().unwrap();
            seen.push((st.to_owned(), req.clone()));
            seen.iter().filter(|(s, _)| s == st).count()
        };
        let text = (self.script)(st, req, n)?;
        Ok(Completion {
            text,
            usage: Usage {
                prompt_tokens: 100,
                completion_tokens: 10,
            },
        })
    }
}

fn entry(topic: &str, position: &str, sources: &[u32]) -> Value {
    json!({"type": "standard", "topic": topic, "position": position,
           "reasoning": format!("{position} because the last three incidents all came from skipping it"),
           "context": "", "confidence": "high", "stability": "durable", "tags": ["work"], "sources": sources})
}

fn entries(list: Vec<Value>) -> String {
    json!({ "entries": list }).to_string()
}

/// A verdict for each of the judge's numbered candidates, from `f(index, candidate)`.
fn verdicts(req: &Request, f: impl Fn(usize, &Value) -> (bool, bool, bool)) -> String {
    let list: Vec<Value> = req
        .user
        .lines()
        .filter_map(|l| {
            let (n, rest) = l.split_once(". ")?;
            let n: usize = n.parse().ok()?;
            let v: Value = serde_json::from_str(rest).ok()?;
            let (k, g, d) = f(n, &v);
            Some(json!({"entry": n, "keep": k, "grounded": g, "distinctive": d}))
        })
        .collect();
    json!({ "verdicts": list }).to_string()
}

fn keep_all(req: &Request) -> String {
    verdicts(req, |_, _| (true, true, true))
}

struct Corpus {
    _dir: tempfile::TempDir,
    db: Db,
    clock: Clock,
}

fn corpus(threads: &[(&str, &[&str])]) -> Corpus {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("c.db")).unwrap();
    let c = Corpus {
        _dir: dir,
        db,
        clock: Clock::system(),
    };
    for (conv, turns) in threads {
        add(&c, conv, turns, 0);
    }
    c
}

fn add(c: &Corpus, conv: &str, turns: &[&str], from: u32) {
    let client = ClientInfo {
        app_version: "0.1.0".into(),
        device_id: "ext".into(),
    };
    let obs: Vec<_> = turns
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let ord = from + i as u32;
            let role = if ord.is_multiple_of(2) {
                Role::User
            } else {
                Role::Assistant
            };
            let at = format!("2026-11-20T09:{:02}:00Z", ord.min(59));
            build_observation(
                "browser-ext:chatgpt",
                conv,
                role,
                text,
                Some(ord),
                None,
                &at,
                client.clone(),
            )
        })
        .collect();
    let origin = Origin {
        device_id: "d".into(),
    };
    c.db.write(|conn| ingest_observations(conn, &origin, &obs, c.clock.now()))
        .unwrap();
}

fn settings() -> Settings {
    Settings {
        call_timeout: Duration::from_secs(5),
        ..Settings::default()
    }
}

fn run(c: &Corpus, model: &Scripted) -> personkit_knowledge::Report {
    run_once(&c.db, model, &settings(), &c.clock, &mut |_| {}).unwrap()
}

fn stored(c: &Corpus, status: Option<&str>) -> Vec<rows::Entry> {
    c.db.read(|conn| {
        rows::entries(
            conn,
            &Filter {
                status: status.map(str::to_owned),
                limit: 100,
                ..Filter::default()
            },
        )
    })
    .unwrap()
}

fn alert(c: &Corpus) -> Option<Value> {
    c.db.read(|conn| rows::state(conn, "alert"))
        .unwrap()
        .map(|s| serde_json::from_str(&s).unwrap())
}

fn audit(c: &Corpus, kind: &str) -> Vec<Value> {
    c.db.read(|conn| rows::audit_log(conn, Some(kind), 1000))
        .unwrap()
        .into_iter()
        .map(|r| r.detail)
        .collect()
}

const TOPICS: [&str; 12] = [
    "dependency pinning",
    "code review",
    "release timing",
    "error handling",
    "logging",
    "naming",
    "documentation",
    "benchmarks",
    "migrations",
    "backups",
    "secrets",
    "onboarding",
];

const TALK: &[&str] = &[
    "I always pin dependencies to exact versions; two surprise upgrades broke production last year.",
    "Pinning makes builds reproducible.",
    "And I review every lockfile change by hand before merging, since a bot once slipped in a typosquat.",
    "That is a good habit.",
];

#[test]
fn at_most_eight_entries_per_window_whatever_the_model_returns() {
    let c = corpus(&[("a", TALK)]);
    let model = Scripted::new(|st, req, _| match st {
        "extract" => Ok(entries(
            TOPICS
                .iter()
                .map(|t| entry(t, &format!("Always {t}, without exception"), &[1]))
                .collect(),
        )),
        _ => Ok(keep_all(req)),
    });
    let r = run(&c, &model);
    assert_eq!((r.windows, r.candidates, r.dropped_over_cap), (1, 12, 4));
    assert_eq!(stored(&c, None).len(), 8);
    assert_eq!(r.kept_per_window, [8]);
    let judged = model
        .seen
        .lock()
        .unwrap()
        .iter()
        .find(|(s, _)| s == "judge")
        .map(|(_, r)| r.user.clone())
        .unwrap();
    assert!(
        judged.contains("\n8. ") && !judged.contains("\n9. "),
        "the judge saw only the first eight"
    );
    let drops: Vec<Value> = audit(&c, "decision")
        .into_iter()
        .filter(|d| d["why"].as_str().unwrap_or("").starts_with("cap"))
        .collect();
    assert_eq!(drops.len(), 4);
    // Every entry is pending, cites a stored message of the window, and carries its model and prompt version.
    let ids: Vec<String> =
        c.db.read(|conn| rows::turns_after(conn, 0, 100))
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect();
    for e in stored(&c, None) {
        assert_eq!(e.status, "pending");
        assert_eq!(e.model.as_deref(), Some("scripted:test"));
        assert_eq!(e.prompt_version.as_deref(), Some("knowledge-v2"));
        assert!(
            e.sources.iter().all(|s| ids.contains(&s.message_id)),
            "{:?}",
            e.sources
        );
        assert_eq!(e.scores.as_ref().unwrap()["grounded"], json!(true));
    }
}

#[test]
fn the_judge_fails_closed_on_error_garbage_and_timeout_and_raises_an_alert() {
    type Judge = fn(usize) -> Result<String, LlmError>;
    let failures: [(&str, Judge); 3] = [
        ("error", |_| {
            Err(LlmError::Inference("model crashed".into()))
        }),
        ("garbage", |_| Ok("I think they are all fine!".into())),
        ("timeout", |_| {
            Err(LlmError::Timeout(Duration::from_secs(5)))
        }),
    ];
    for (name, judge) in failures {
        let c = corpus(&[("a", TALK)]);
        let model = Scripted::new(move |st, _, n| match st {
            "extract" => Ok(entries(vec![entry(
                "dependency pinning",
                "Pin every dependency",
                &[1],
            )])),
            _ => judge(n),
        });
        let r = run(&c, &model);
        assert_eq!(r.judge_failures, 1, "{name}");
        assert!(
            stored(&c, None).is_empty(),
            "{name}: nothing unjudged is stored"
        );
        let a = alert(&c).unwrap_or_else(|| panic!("{name}: no alert"));
        assert!(
            a["message"].as_str().unwrap().contains("judge failed"),
            "{name}: {a}"
        );
        let expected_calls = if name == "garbage" { 2 } else { 1 };
        assert_eq!(
            model.calls("judge"),
            expected_calls,
            "{name}: one retry for an unusable answer only"
        );
    }
}

#[test]
fn a_judge_that_answers_after_one_retry_is_heard_and_each_failed_question_drops_its_entry() {
    let c = corpus(&[("a", TALK)]);
    let model = Scripted::new(|st, req, n| match (st, n) {
        ("extract", _) => Ok(entries(vec![
            entry(
                "dependency pinning",
                "Pin every dependency to exact versions",
                &[1],
            ),
            entry("lockfile review", "Review lockfile changes by hand", &[3]),
            entry(
                "code style",
                "Tabs are better than spaces for everyone",
                &[1],
            ),
            entry("release timing", "Never ship on a Friday afternoon", &[1]),
        ])),
        ("judge", 1) => Ok("```json\n{\"verdicts\": [oops".into()),
        _ => Ok(verdicts(req, |i, _| match i {
            1 | 2 => (true, true, true),
            3 => (true, true, false),
            _ => (true, false, true),
        })),
    });
    let r = run(&c, &model);
    assert_eq!(r.judge_failures, 0);
    assert_eq!((r.new_entries, r.dropped_by_judge), (2, 2));
    let whys: Vec<String> = audit(&c, "decision")
        .iter()
        .filter_map(|d| d["why"].as_str().map(str::to_owned))
        .collect();
    assert!(
        whys.iter().any(|w| w == "judge: not distinctive"),
        "{whys:?}"
    );
    assert!(whys.iter().any(|w| w == "judge: not grounded"), "{whys:?}");
    assert!(alert(&c).is_none());
}

#[test]
fn malformed_entries_are_dropped_not_guessed_and_defaults_fill_only_what_is_missing() {
    let c = corpus(&[("a", TALK)]);
    let model = Scripted::new(|st, req, _| match st {
        "extract" => {
            let mut no_conf = entry("dependency pinning", "Pin every dependency", &[1]);
            no_conf.as_object_mut().unwrap().remove("confidence");
            no_conf.as_object_mut().unwrap().remove("stability");
            let mut boiler = entry("testing", "Write tests", &[1]);
            boiler["reasoning"] = json!("It's important.");
            let mut bad_type = entry("style", "Short functions", &[1]);
            bad_type["type"] = json!("opinion");
            let mut no_source = entry("naming", "Name things for what they do", &[]);
            no_source["sources"] = json!([]);
            let mut out_of_window = entry("reviews", "Review by hand", &[42]);
            out_of_window["sources"] = json!([42]);
            Ok(entries(vec![
                no_conf,
                boiler,
                bad_type,
                no_source,
                out_of_window,
            ]))
        }
        _ => Ok(keep_all(req)),
    });
    let r = run(&c, &model);
    assert_eq!((r.candidates, r.dropped_invalid, r.new_entries), (5, 4, 1));
    let e = &stored(&c, None)[0];
    assert_eq!(
        (e.confidence.as_str(), e.stability.as_str()),
        ("medium", "stable")
    );
    let whys: Vec<String> = audit(&c, "decision")
        .iter()
        .filter_map(|d| d["why"].as_str().map(str::to_owned))
        .collect();
    for want in [
        "reasoning is too short",
        "type \"opinion\"",
        "cites no line",
        "not a line of the window",
    ] {
        assert!(whys.iter().any(|w| w.contains(want)), "{want}: {whys:?}");
    }
}

#[test]
fn the_same_position_again_reinforces_a_different_one_is_a_variant_and_a_pass_reads_only_new_turns()
{
    let c = corpus(&[("a", TALK)]);
    let model = Scripted::new(|st, req, n| match (st, n) {
        ("extract", 1) => Ok(entries(vec![entry(
            "dependency pinning",
            "Pin every dependency to an exact version",
            &[1],
        )])),
        ("extract", 2) => Ok(entries(vec![
            entry(
                "dependency pinning",
                "Pin each dependency to an exact version",
                &[1],
            ),
            entry(
                "pinning dependencies",
                "Let throwaway prototypes float on the latest versions",
                &[1],
            ),
        ])),
        ("extract", _) => Ok(entries(vec![])),
        _ => Ok(keep_all(req)),
    });
    let first = run(&c, &model);
    assert_eq!(first.new_entries, 1);
    let again = run(&c, &model);
    assert_eq!(
        (again.turns, again.calls),
        (0, 0),
        "nothing new, nothing sent"
    );
    add(
        &c,
        "b",
        &[
            "For a throwaway prototype I let dependencies float: speed matters more than stability there.",
            "ok",
        ],
        0,
    );
    let second = run(&c, &model);
    assert_eq!(
        (
            second.turns,
            second.reinforced,
            second.variants,
            second.new_entries
        ),
        (2, 1, 1, 0)
    );
    let all = stored(&c, None);
    assert_eq!(all.len(), 2, "no duplicate");
    let root = all.iter().find(|e| e.variant_of.is_none()).unwrap();
    let variant = all.iter().find(|e| e.variant_of.is_some()).unwrap();
    assert_eq!(variant.variant_of.as_deref(), Some(root.id.as_str()));
    assert_eq!(root.reinforced, 1);
    assert_eq!(
        root.sources.len(),
        2,
        "the reinforcing window's turn is a source too"
    );
}

#[test]
fn a_model_that_goes_away_stops_the_pass_and_the_next_pass_reads_the_same_turns() {
    let c = corpus(&[("a", TALK), ("b", TALK)]);
    let down = Scripted::new(|_, _, _| {
        Err(LlmError::Http {
            url: "http://127.0.0.1:9/v1".into(),
            message: "connection refused".into(),
        })
    });
    let r = run(&c, &down);
    assert!(r.stopped.is_some());
    assert_eq!(
        down.calls("extract"),
        1,
        "the pass stops at the first unreachable call"
    );
    assert!(
        alert(&c).unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("extraction failed")
    );
    let up = Scripted::new(|st, req, _| match st {
        "extract" => Ok(entries(vec![entry(
            "dependency pinning",
            "Pin every dependency",
            &[1],
        )])),
        _ => Ok(keep_all(req)),
    });
    let r = run(&c, &up);
    assert_eq!((r.turns, r.windows), (8, 2), "both threads are read again");
    assert!(alert(&c).is_none(), "a clean pass clears the alert");
}

#[test]
fn forgetting_removes_entries_drawn_only_from_the_thread_and_marks_the_others() {
    let c = corpus(&[("a", TALK)]);
    let model = Scripted::new(|st, req, n| match (st, n) {
        ("extract", 1) => Ok(entries(vec![
            entry(
                "dependency pinning",
                "Pin every dependency to an exact version",
                &[1],
            ),
            entry("lockfile review", "Review lockfile changes by hand", &[3]),
        ])),
        ("extract", _) => Ok(entries(vec![entry(
            "dependency pinning",
            "Pin every dependency to an exact version",
            &[1],
        )])),
        _ => Ok(keep_all(req)),
    });
    run(&c, &model);
    add(
        &c,
        "b",
        &[
            "Again: exact versions for every dependency, no ranges.",
            "noted",
        ],
        0,
    );
    run(&c, &model);
    let before = stored(&c, None);
    assert_eq!(before.len(), 2);
    let thread_a = personkit_shared::ids::thread_id("browser-ext:chatgpt", "a")
        .hyphenated()
        .to_string();
    c.db.write(|conn| forget::forget(conn, &Selection::thread(&thread_a), c.clock.now()))
        .unwrap();
    let after = stored(&c, None);
    assert_eq!(
        after.len(),
        1,
        "the lockfile entry rested on thread a alone"
    );
    assert_eq!(after[0].topic, "dependency pinning");
    assert!(after[0].sources_forgotten);
    assert!(after[0].sources.iter().all(|s| s.thread_id != thread_a));
    let searchable =
        c.db.read(|conn| {
            rows::entries(
                conn,
                &Filter {
                    words: Some("lockfile".into()),
                    limit: 10,
                    ..Filter::default()
                },
            )
        })
        .unwrap();
    assert!(searchable.is_empty(), "the forgotten entry left the index");
    let about_a: Vec<Value> =
        c.db.read(|conn| rows::audit_log(conn, None, 1000))
            .unwrap()
            .into_iter()
            .filter(|r| r.detail.to_string().contains("lockfile"))
            .map(|r| r.detail)
            .collect();
    assert!(
        about_a.is_empty(),
        "audit rows about the forgotten turns keep no content: {about_a:?}"
    );
}

#[test]
fn a_window_longer_than_one_call_is_read_in_parts_and_reduced_to_at_most_eight() {
    // Six turns (too few to cut at a time gap) whose three user turns alone are over the budget.
    let long: Vec<String> = (0..6)
        .map(|i| {
            format!(
                "Point {i}: {}",
                "I prefer explicit error types over strings because callers must branch on them. "
                    .repeat(12)
            )
        })
        .collect();
    let turns: Vec<&str> = long.iter().map(String::as_str).collect();
    let c = corpus(&[("a", &turns)]);
    let model = Scripted::new(|st, req, _| match st {
        "extract" => Ok(entries(
            TOPICS[..5]
                .iter()
                .map(|t| entry(t, &format!("Always {t}, without exception"), &[1]))
                .collect(),
        )),
        "reduce" => {
            assert!(
                req.user.lines().filter(|l| l.starts_with('{')).count() > 8,
                "the reduce step reads every part's candidates"
            );
            Ok(entries(
                TOPICS
                    .iter()
                    .map(|t| entry(t, &format!("Always {t}, merged"), &[1, 2]))
                    .collect(),
            ))
        }
        _ => Ok(keep_all(req)),
    });
    let s = Settings {
        window_tokens: 400,
        ..settings()
    };
    let r = run_once(&c.db, &model, &s, &c.clock, &mut |_| {}).unwrap();
    assert_eq!((r.windows, r.split_windows), (1, 1));
    assert!(model.calls("extract") >= 2, "read in parts");
    assert_eq!(model.calls("reduce"), 1);
    assert!(
        r.kept_per_window[0] <= 8 && r.kept_per_window[0] > 0,
        "{:?}",
        r.kept_per_window
    );
    assert_eq!(
        r.dropped_over_cap, 4,
        "the reduce step returned 12; the cap holds"
    );
}

/// The pseudonym map keeps no name that only forgotten turns mention: a name another stored turn still mentions
/// stays, as does one no turn mentions (the user's own list), and forgetting the last turn to mention a name
/// takes it out.
#[test]
fn forgetting_takes_names_only_the_forgotten_turns_mention_out_of_the_pseudonym_map() {
    let c = corpus(&[
        (
            "a",
            &["Marguerite Duval wants exact versions pinned.", "noted"],
        ),
        (
            "b",
            &["Ask Oskar and Marguerite Duval about the lockfile.", "ok"],
        ),
        ("c", &["Oskar reviews the release notes.", "fine"]),
    ]);
    let now = c.clock.now();
    let names: Vec<(String, String)> = ["Marguerite Duval", "Oskar", "Ines Alvarez"]
        .iter()
        .enumerate()
        .map(|(i, n)| (format!("Person_{i:04X}"), (*n).to_owned()))
        .collect();
    c.db.write(|conn| rows::add_pseudonyms(conn, &names, now))
        .unwrap();
    let map = || -> Vec<String> {
        let mut v: Vec<String> =
            c.db.read(rows::pseudonyms)
                .unwrap()
                .into_iter()
                .map(|(_, real)| real)
                .collect();
        v.sort();
        v
    };
    let thread = |conv: &str| {
        personkit_shared::ids::thread_id("browser-ext:chatgpt", conv)
            .hyphenated()
            .to_string()
    };
    let forget_thread = |conv: &str| {
        c.db.write(|conn| forget::forget(conn, &Selection::thread(&thread(conv)), now))
            .unwrap();
    };
    forget_thread("a");
    assert_eq!(
        map(),
        ["Ines Alvarez", "Marguerite Duval", "Oskar"],
        "b still names both"
    );
    forget_thread("b");
    assert_eq!(map(), ["Ines Alvarez", "Oskar"], "c still names Oskar");
    forget_thread("c");
    assert_eq!(map(), ["Ines Alvarez"], "no turn ever named Ines");
}
