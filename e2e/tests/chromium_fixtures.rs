//! Every fixture case of every surface, end to end in the real Chromium with the built extension (`dist/chrome`)
//! and the real relay: one `check` per case diffs what the relay stored against the case's `expected.json`
//! (each expected turn exactly once with the right role and text, nothing else — no streaming partials, no site
//! chrome, no raw secrets). All cases of a surface run in one browser session and every failure is reported.
//! `E2E_CASE=chatgpt/short` runs a single case.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_e2e::fixtures::{self, Case};
use personkit_e2e::session::Session;

fn run_surface(dir: &str) {
    let only = std::env::var("E2E_CASE").ok();
    let cases: Vec<Case> = fixtures::cases(dir)
        .unwrap()
        .into_iter()
        .filter(|c| only.as_deref().is_none_or(|o| o == c.name))
        .collect();
    if cases.is_empty() {
        // E2E_CASE names a case of another surface: nothing of this surface was asked for.
        assert!(only.is_some(), "no fixture cases under e2e/fixtures/{dir}");
        return;
    }
    let surface = cases[0].expected.surface.clone();
    let session = Session::start(&[&surface]).unwrap();
    let mut failures = Vec::new();
    let mut known_threads = Vec::new();
    for case in &cases {
        known_threads.extend(case.thread_ids());
        let problems = match session.check(case) {
            Ok(p) => p,
            Err(e) => vec![format!("harness error: {e:#}")],
        };
        let passed = problems.is_empty();
        match (case.expected.known_failure, passed) {
            (false, true) => eprintln!("ok    {}", case.name),
            (true, false) => eprintln!(
                "known failure {} ({}): {}",
                case.name,
                case.expected.known_failure_reason.as_deref().unwrap_or("no reason given"),
                problems.join("; ")
            ),
            (false, false) => {
                eprintln!("FAIL  {}", case.name);
                failures.push(format!("{}:\n  - {}", case.name, problems.join("\n  - ")));
            }
            (true, true) => failures.push(format!(
                "{} is marked known_failure but now passes: remove `known_failure` from its expected.json",
                case.name
            )),
        }
    }
    // Turns captured under a conversation id no case announced (wrong id extraction, crossed SPA navigation).
    let all = session.messages(&surface).unwrap();
    let strays = fixtures::strays(&all, &known_threads);
    if !strays.is_empty() {
        failures.push(format!(
            "{} message(s) stored under unknown threads: {:?}",
            strays.len(),
            strays
                .iter()
                .map(|m| format!("{}:{}", m.role, fixtures::squash(&m.content)))
                .collect::<Vec<_>>()
        ));
    }
    assert!(
        failures.is_empty(),
        "{} fixture failure(s) on {surface}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn chatgpt_fixtures() {
    run_surface("chatgpt");
}

#[test]
fn claude_fixtures() {
    run_surface("claude");
}

#[test]
fn gemini_fixtures() {
    run_surface("gemini");
}

#[test]
fn copilot_fixtures() {
    run_surface("copilot");
}
