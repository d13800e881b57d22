//! File-based harvest sources on temporary folders (fixtures under `tests/fixtures/harvest/`, whose README says
//! where each structure comes from): the tools' own folder variables (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`), Codex's
//! archived and zstd-compressed rollouts, Gemini CLI's project-slug folders, and the sources read from task or
//! session files. Per source: the turns land with their roles, reasoning and tools; injected text is not the
//! user's words; a second run stores nothing; a grown file stores only its new turns; a malformed record is a
//! problem while the rest lands; no record is silent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use personkit_import::Options;
use personkit_import::harvest::{self, Config, Report, Source, SourceReport};
use time::OffsetDateTime;

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/harvest")
}

fn copy_tree(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(from).unwrap();
        let dest = to.join(rel);
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// A temporary folder with a home folder and a corpus in it.
struct Tmp {
    dir: tempfile::TempDir,
    home: PathBuf,
    db: PathBuf,
}

impl Tmp {
    fn new() -> Tmp {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        Tmp {
            db: dir.path().join("corpus.db"),
            home,
            dir,
        }
    }

    /// Copies fixture folder `name` to `to` (relative to the temporary folder).
    fn put(&self, name: &str, to: &str) -> PathBuf {
        let dest = self.dir.path().join(to);
        copy_tree(&fixtures().join(name), &dest);
        dest
    }

    fn config(&self) -> Config {
        let mut c = Config::new(self.home.clone());
        c.settle = Duration::ZERO;
        c
    }

    fn run(&self, c: &Config, sources: &[Source]) -> Report {
        let mut conn = personkit_store::db::open(&self.db).unwrap();
        harvest::run(
            &mut conn,
            c,
            sources,
            &Options::default(),
            now(),
            &mut |_| {},
        )
        .unwrap()
    }

    /// (conversation id, title, role, content) of the current turns of a surface, in thread order.
    fn turns(&self, surface: &str) -> Vec<(String, Option<String>, String, String)> {
        let conn = personkit_store::db::open_read_only(&self.db).unwrap();
        let mut stmt = conn
            .prepare(
                "SELECT t.conversation_id, t.title, m.role, m.content FROM messages m
                 JOIN threads t ON t.id = m.thread_id
                 WHERE t.surface = ?1 AND m.is_current = 1
                 ORDER BY t.conversation_id, m.ordinal IS NULL, m.ordinal,
                          COALESCE(m.occurred_at, m.captured_at), m.pk",
            )
            .unwrap();
        stmt.query_map([surface], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    }
}

fn source(r: &Report, s: Source) -> &SourceReport {
    r.sources.iter().find(|x| x.source == s.name()).unwrap()
}

/// Every record read was accounted for: a turn, a named skip or a problem.
fn accounted(s: &SourceReport) {
    let r = &s.records;
    assert_eq!(r.silent, 0, "{s:?}");
    assert_eq!(r.read, r.to_turns + r.skipped + r.problems, "{s:?}");
}

fn env(vars: &[(&str, &Path)]) -> impl Fn(&str) -> Option<OsString> {
    let m: BTreeMap<String, OsString> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.as_os_str().to_owned()))
        .collect();
    move |k| m.get(k).cloned()
}

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

// ---- The tools' own folder variables, Codex's archive and compressed rollouts, Gemini CLI's slug folders ----

#[test]
fn tool_folder_variables_move_claude_code_and_codex() {
    let t = Tmp::new();
    let claude = t.put("claude-config", "elsewhere/claude");
    let codex = t.put("codex-home", "elsewhere/codex");
    // Without the variables the defaults under the home folder hold nothing.
    let plain = t.config();
    let r = t.run(&plain, &[Source::ClaudeCode, Source::Codex]);
    assert_eq!(source(&r, Source::ClaudeCode).files, 0);
    assert_eq!(source(&r, Source::Codex).files, 0);
    // As the CLI builds it: from the environment.
    let c = t.config().with_tool_env(env(&[
        ("CLAUDE_CONFIG_DIR", &claude),
        ("CODEX_HOME", &codex),
        ("UNRELATED", Path::new("/nowhere")),
    ]));
    assert_eq!(
        c.roots(Source::Codex),
        vec![codex.join("sessions"), codex.join("archived_sessions")]
    );
    assert_eq!(c.roots(Source::ClaudeCode), vec![claude.join("projects")]);
    let r = t.run(&c, &[Source::ClaudeCode, Source::Codex]);
    let cc = source(&r, Source::ClaudeCode);
    assert_eq!((cc.files, cc.stored), (1, 2), "{cc:?}");
    accounted(cc);
    let cx = source(&r, Source::Codex);
    // One archived rollout, one compressed: both read.
    assert_eq!(cx.files, 2, "{cx:?}");
    assert!(cx.problems.is_empty(), "{:?}", cx.problems);
    accounted(cx);
    let ct = t.turns("harvest:claude-code");
    assert_eq!(ct.len(), 2);
    assert!(ct[1].3.contains("retry loop never sleeps"));
    let xt = t.turns("harvest:codex");
    let archived: Vec<_> = xt
        .iter()
        .filter(|x| x.0 == "0198c2a1-5b6e-7d10-9a3f-1e2d3c4b5a60")
        .collect();
    assert_eq!(archived.len(), 2, "{xt:?}");
    assert_eq!(archived[0].2, "user");
    let zst: Vec<_> = xt
        .iter()
        .filter(|x| x.0 == "0199a0b2-6c7d-7e21-8b40-2f3e4d5c6b71")
        .collect();
    assert_eq!(zst[0].3, "Which crate parses the config?", "{zst:?}");
    assert!(zst.iter().any(|x| {
        x.3.contains("[reasoning]\n**Searching** for serde derives.")
    }));
    assert!(zst.iter().any(|x| x.3.contains("[tool: shell]")));
    assert!(
        zst.iter()
            .any(|x| x.2 == "assistant" && x.3 == "kite-config parses it.")
    );
    // A second run stores nothing.
    let again = t.run(&c, &[Source::ClaudeCode, Source::Codex]);
    assert_eq!(again.stored(), 0, "{again:?}");
}

#[test]
fn a_rollout_compressed_after_it_was_read_stores_nothing_new() {
    let t = Tmp::new();
    let dir = t.dir.path().join("rollouts");
    std::fs::create_dir_all(&dir).unwrap();
    let name = "rollout-2025-09-01T07-30-00-0199a0b2-6c7d-7e21-8b40-2f3e4d5c6b71.jsonl";
    std::fs::copy(fixtures().join("codex-plain").join(name), dir.join(name)).unwrap();
    let mut c = t.config();
    c.paths.insert(Source::Codex, dir.clone());
    let first = t.run(&c, &[Source::Codex]);
    let stored = source(&first, Source::Codex).stored;
    assert!(stored >= 4, "{first:?}");
    // Codex compresses the finished rollout: same turns, nothing new.
    std::fs::remove_file(dir.join(name)).unwrap();
    std::fs::copy(
        fixtures()
            .join("codex-home/sessions/2025/09/01")
            .join(format!("{name}.zst")),
        dir.join(format!("{name}.zst")),
    )
    .unwrap();
    let second = t.run(&c, &[Source::Codex]);
    let s = source(&second, Source::Codex);
    assert_eq!((s.files_read, s.stored), (1, 0), "{s:?}");
    assert_eq!(s.duplicate, stored);
    accounted(s);
    // Unchanged since: not read again.
    let third = t.run(&c, &[Source::Codex]);
    assert_eq!(source(&third, Source::Codex).files_read, 0);
}

#[test]
fn a_damaged_compressed_rollout_is_a_problem_and_the_others_land() {
    let t = Tmp::new();
    let codex = t.put("codex-home", "codex");
    std::fs::write(
        codex.join("archived_sessions/rollout-2025-08-21T08-00-00-0198c2a1-5b6e-7d10-9a3f-1e2d3c4b5a61.jsonl.zst"),
        b"\x28\xb5\x2f\xfd this is not a zstd frame",
    )
    .unwrap();
    let c = t.config().with_tool_env(env(&[("CODEX_HOME", &codex)]));
    let r = t.run(&c, &[Source::Codex]);
    let s = source(&r, Source::Codex);
    assert_eq!(s.files, 3);
    assert_eq!(s.problems.len(), 1, "{:?}", s.problems);
    assert!(s.problems[0].file.ends_with(".jsonl.zst"));
    assert!(s.stored >= 6, "{s:?}");
}

#[test]
fn gemini_cli_project_slug_folders_are_read_and_titled_by_project() {
    let t = Tmp::new();
    copy_tree(&fixtures().join("gemini-cli-slug"), &t.home);
    let c = t.config();
    let r = t.run(&c, &[Source::GeminiCli]);
    let s = source(&r, Source::GeminiCli);
    assert_eq!((s.files, s.stored), (1, 2), "{s:?}");
    accounted(s);
    let g = t.turns("harvest:gemini-cli");
    assert_eq!(g[0].0, "5e6f7a8b-1c2d-4e3f-9a0b-7c6d5e4f3a2b");
    assert_eq!(g[0].1.as_deref(), Some("kite"));
    assert_eq!(
        (g[0].2.as_str(), g[0].3.as_str()),
        ("user", "List the open TODOs in src/.")
    );
    assert!(
        g[1].3
            .contains("[reasoning]\n**Searching** grep for TODO under src.")
    );
}

// ---- Cline and Roo Code task folders ----

const CLINE_TASKS: &str = ".config/Code/User/globalStorage/saoudrizwan.claude-dev/tasks";
const ROO_TASKS: &str = ".config/Code/User/globalStorage/rooveterinaryinc.roo-cline/tasks";

#[test]
fn cline_tasks_keep_tool_results_and_environment_apart_from_the_users_words() {
    let t = Tmp::new();
    copy_tree(&fixtures().join("cline"), &t.home);
    let c = t.config();
    assert_eq!(c.roots(Source::Cline), vec![t.home.join(CLINE_TASKS)]);
    let r = t.run(&c, &[Source::Cline]);
    let s = source(&r, Source::Cline);
    assert_eq!((s.files, s.stored), (1, 8), "{s:?}");
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    accounted(s);
    let ct = t.turns("harvest:cline");
    assert_eq!(ct.len(), 8);
    assert!(ct.iter().all(|x| x.0 == "1762077600000"));
    // Titled by the task as the panel showed it (its first line).
    assert_eq!(
        ct[0].1.as_deref(),
        Some("Add a --verbose flag to the kite CLI.")
    );
    let roles: Vec<&str> = ct.iter().map(|x| x.2.as_str()).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant"
        ]
    );
    // The task's words are the user's; the wrapper is gone and the environment dump is an injected block.
    assert!(
        ct[0].3.starts_with("Add a --verbose flag to the kite CLI."),
        "{}",
        ct[0].3
    );
    assert!(!ct[0].3.contains("<task>"));
    assert!(ct[0].3.contains("[injected: environment_details]"));
    // Tool-use XML stays text; a tool's result is tool output, not the user's words.
    assert!(ct[1].3.contains("<read_file>"));
    assert!(ct[2].3.contains("kite::Args::parse()"), "{}", ct[2].3);
    // Feedback given with a result is the user's.
    assert!(
        ct[6].3.starts_with("Also accept -v as the short form."),
        "{}",
        ct[6].3
    );
    assert!(ct[6].3.contains("[tool output]"));
    let again = t.run(&c, &[Source::Cline]);
    assert_eq!(source(&again, Source::Cline).stored, 0);
}

#[test]
fn a_growing_cline_task_stores_only_new_messages_and_a_bad_message_is_a_problem() {
    let t = Tmp::new();
    copy_tree(&fixtures().join("cline"), &t.home);
    let file = t
        .home
        .join(CLINE_TASKS)
        .join("1762077600000/api_conversation_history.json");
    let full: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let all = full.as_array().unwrap().clone();
    std::fs::write(&file, serde_json::to_vec(&all[..6]).unwrap()).unwrap();
    let c = t.config();
    let first = t.run(&c, &[Source::Cline]);
    assert_eq!(source(&first, Source::Cline).stored, 6);
    // Cline rewrites the whole file as the task goes on; one message is damaged.
    let mut grown = all.clone();
    grown.insert(7, serde_json::json!(42));
    std::fs::write(&file, serde_json::to_vec(&grown).unwrap()).unwrap();
    let second = t.run(&c, &[Source::Cline]);
    let s = source(&second, Source::Cline);
    assert_eq!((s.stored, s.duplicate), (2, 6), "{s:?}");
    assert_eq!(s.problems.len(), 1, "{:?}", s.problems);
    assert!(
        s.problems[0].message.contains("message 8"),
        "{:?}",
        s.problems
    );
    assert_eq!(s.records.problems, 1);
    accounted(s);
}

#[test]
fn roo_code_tasks_keep_reasoning_tools_times_and_the_condensed_summary_as_context() {
    let t = Tmp::new();
    copy_tree(&fixtures().join("roo-code"), &t.home);
    let c = t.config();
    assert_eq!(c.roots(Source::RooCode), vec![t.home.join(ROO_TASKS)]);
    let r = t.run(&c, &[Source::RooCode]);
    let s = source(&r, Source::RooCode);
    assert_eq!((s.files, s.stored), (1, 6), "{s:?}");
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    accounted(s);
    let rt = t.turns("harvest:roo-code");
    assert_eq!(rt[0].0, "0f3c9a52-2b7e-4d61-8e10-5a4b3c2d1e0f");
    // No `say: task` in the panel's messages: titled by the first `<task>`.
    assert_eq!(
        rt[0].1.as_deref(),
        Some("Why does kite drop the first packet?")
    );
    let roles: Vec<&str> = rt.iter().map(|x| x.2.as_str()).collect();
    assert_eq!(
        roles[..5],
        ["user", "assistant", "tool", "assistant", "user"]
    );
    assert!(
        rt[1]
            .3
            .contains("[reasoning]\nThe handshake may be discarding the buffer.")
    );
    assert!(rt[1].3.contains("[tool: search_files]"));
    assert!(rt[2].3.contains("buf.clear(); // after handshake"));
    assert!(rt[4].3.starts_with("Fix it, keep the buffer."));
    assert!(rt[4].3.contains("[injected: environment_details]"));
    assert!(rt[5].3.starts_with("[context]"), "{}", rt[5].3);
    // Roo Code's message times are kept.
    let conn = personkit_store::db::open_read_only(&t.db).unwrap();
    let first_at: Option<String> = conn
        .query_row(
            "SELECT MIN(m.occurred_at) FROM messages m JOIN threads t ON t.id = m.thread_id
             WHERE t.surface = 'harvest:roo-code'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(first_at.unwrap().starts_with("2025-11-24"));
}

// ---- Qwen Code ----

const QWEN_FILE: &str =
    "projects/-home-ada-src-kite/chats/7d2e4f60-1a3b-4c5d-8e9f-0a1b2c3d4e5f.jsonl";

#[test]
fn qwen_code_sessions_tree_tools_thoughts_and_system_records() {
    let t = Tmp::new();
    // Where QWEN_RUNTIME_DIR points instead of ~/.qwen.
    let rt = t.put("qwen-code/.qwen", "qwen-runtime");
    let c = t.config().with_tool_env(env(&[("QWEN_RUNTIME_DIR", &rt)]));
    assert_eq!(c.roots(Source::QwenCode), vec![rt.join("projects")]);
    let r = t.run(&c, &[Source::QwenCode]);
    let s = source(&r, Source::QwenCode);
    assert_eq!((s.files, s.stored), (1, 7), "{s:?}");
    assert_eq!(s.records.skipped, 2, "{s:?}");
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    accounted(s);
    let q = t.turns("harvest:qwen-code");
    assert_eq!(q.len(), 7);
    assert_eq!(q[0].0, "7d2e4f60-1a3b-4c5d-8e9f-0a1b2c3d4e5f");
    assert_eq!(q[6].1.as_deref(), Some("Slow tests in kite"));
    assert_eq!(
        (q[0].2.as_str(), q[0].3.as_str()),
        ("user", "Why is cargo test slow in kite?")
    );
    assert_eq!(q[1].2, "assistant");
    assert!(
        q[1].3.contains("[/reasoning]\n\nLet me read Cargo.toml."),
        "{}",
        q[1].3
    );
    assert!(
        q[1].3
            .contains("[reasoning]\nThe test profile may not optimise dependencies.")
    );
    assert!(q[1].3.contains("[tool: read_file]"));
    assert_eq!(q[2].2, "tool");
    assert!(q[2].3.contains("opt-level = 0"));
    // System records and text the tool wrote into the conversation are context, not the user's words.
    let context: Vec<_> = q.iter().filter(|x| x.3.starts_with("[context]")).collect();
    assert_eq!(context.len(), 3, "{q:?}");
    assert!(context.iter().any(|x| x.3.contains("[slash_command]")));
    assert!(context.iter().any(|x| x.3.contains("state_snapshot")));
    let again = t.run(&c, &[Source::QwenCode]);
    assert_eq!(source(&again, Source::QwenCode).stored, 0);
}

#[test]
fn a_growing_qwen_code_session_stores_only_new_turns_and_a_bad_line_is_a_problem() {
    let t = Tmp::new();
    let src = std::fs::read_to_string(fixtures().join("qwen-code/.qwen").join(QWEN_FILE)).unwrap();
    let lines: Vec<&str> = src.lines().collect();
    let file = t.home.join(".qwen").join(QWEN_FILE);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, lines[..4].join("\n") + "\n").unwrap();
    let c = t.config();
    let first = t.run(&c, &[Source::QwenCode]);
    assert_eq!(source(&first, Source::QwenCode).stored, 4);
    append(&file, "{\"uuid\": \"q-x\", \"type\": \n");
    append(&file, &(lines[4..].join("\n") + "\n"));
    let second = t.run(&c, &[Source::QwenCode]);
    let s = source(&second, Source::QwenCode);
    assert_eq!((s.stored, s.duplicate), (3, 0), "{s:?}");
    assert_eq!(s.problems.len(), 1, "{:?}", s.problems);
    assert_eq!(s.problems[0].line, Some(5));
    accounted(s);
}

#[test]
fn the_new_sources_are_listed_and_enabled_by_name() {
    let t = Tmp::new();
    copy_tree(&fixtures().join("cline"), &t.home);
    for name in [
        "cline",
        "roo-code",
        "qwen-code",
        "grok-build",
        "kiro",
        "amp",
    ] {
        assert_eq!(Source::parse(name).map(|s| s.name()), Some(name));
    }
    let conn = personkit_store::db::open(&t.db).unwrap();
    personkit_store::harvest::set_enabled(&conn, "cline", true).unwrap();
    let c = t.config();
    let mut enabled_from_corpus = c.clone();
    assert_eq!(
        enabled_from_corpus.load(&conn).unwrap(),
        vec![Source::Cline]
    );
    let list = harvest::status(&conn, &c).unwrap();
    let cline = list.iter().find(|s| s.name == "cline").unwrap();
    assert!(cline.enabled && cline.found, "{cline:?}");
    let qwen = list.iter().find(|s| s.name == "qwen-code").unwrap();
    assert!(!qwen.enabled && !qwen.found, "{qwen:?}");
}

// ---- Grok Build ----

const GROK_A: &str = "sessions/%2Fhome%2Fada%2Fsrc%2Fkite/01JD2K8Q7ZAB/updates.jsonl";

#[test]
fn grok_build_updates_are_joined_by_prompt_and_chat_history_is_read_when_present() {
    let t = Tmp::new();
    let gh = t.put("grok-build/.grok", "grok-home");
    let c = t.config().with_tool_env(env(&[("GROK_HOME", &gh)]));
    assert_eq!(c.roots(Source::GrokBuild), vec![gh.join("sessions")]);
    let r = t.run(&c, &[Source::GrokBuild]);
    let s = source(&r, Source::GrokBuild);
    assert_eq!((s.files, s.stored), (3, 9), "{s:?}");
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    assert_eq!(
        s.records_skipped
            .get("grok-build:updates.jsonl (chat_history.jsonl read instead)"),
        Some(&1)
    );
    accounted(s);
    let g = t.turns("harvest:grok-build");
    let a: Vec<_> = g.iter().filter(|x| x.0 == "01JD2K8Q7ZAB").collect();
    assert_eq!(a.len(), 4, "{g:?}");
    assert_eq!(a[0].1.as_deref(), Some("Retry fetch_frames"));
    assert_eq!(
        (a[0].2.as_str(), a[0].3.as_str()),
        ("user", "Add a retry to fetch_frames.")
    );
    assert_eq!(a[1].2, "assistant");
    assert!(
        a[1].3
            .contains("[reasoning]\nfetch_frames is in src/net.rs.\n"),
        "{}",
        a[1].3
    );
    assert!(a[1].3.contains("I added three retries with backoff."));
    assert!(a[1].3.contains("[tool: read_file]") && a[1].3.contains("conn.read_all()"));
    assert_eq!(a[3].3, "Done: five retries.");
    let b: Vec<_> = g.iter().filter(|x| x.0 == "01JD3M1X4YCD").collect();
    let roles: Vec<&str> = b.iter().map(|x| x.2.as_str()).collect();
    assert_eq!(
        roles[1..],
        ["user", "assistant", "tool", "assistant"],
        "{b:?}"
    );
    assert!(b[0].3.starts_with("[context]"));
    assert!(b[2].3.contains("[reasoning]\nRead src/frame.rs first."));
    assert_eq!(b[4].1.as_deref(), Some("What a Frame holds"));
    let again = t.run(&c, &[Source::GrokBuild]);
    assert_eq!(source(&again, Source::GrokBuild).stored, 0);
}

#[test]
fn a_growing_grok_build_session_stores_only_new_turns_and_a_bad_line_is_a_problem() {
    let t = Tmp::new();
    let src = std::fs::read_to_string(fixtures().join("grok-build/.grok").join(GROK_A)).unwrap();
    let lines: Vec<&str> = src.lines().collect();
    let file = t.home.join(".grok").join(GROK_A);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, lines[..8].join("\n") + "\n").unwrap();
    let c = t.config();
    let first = t.run(&c, &[Source::GrokBuild]);
    assert_eq!(source(&first, Source::GrokBuild).stored, 2);
    append(&file, "{\"timestamp\": 1767607250000, \"params\": \n");
    append(&file, &(lines[8..].join("\n") + "\n"));
    let second = t.run(&c, &[Source::GrokBuild]);
    let s = source(&second, Source::GrokBuild);
    assert_eq!((s.stored, s.duplicate), (2, 2), "{s:?}");
    assert_eq!(s.problems.len(), 1, "{:?}", s.problems);
    assert_eq!(s.problems[0].line, Some(9));
    accounted(s);
}

// ---- Kiro CLI ----

const KIRO_FILE: &str = ".kiro/sessions/cli/5b0c7d2e-8f91-4a3b-b6c5-d4e3f2a1b0c9.jsonl";

#[test]
fn kiro_cli_streamed_pieces_of_a_message_are_one_turn() {
    let t = Tmp::new();
    copy_tree(&fixtures().join("kiro"), &t.home);
    let c = t.config();
    let r = t.run(&c, &[Source::Kiro]);
    let s = source(&r, Source::Kiro);
    assert_eq!((s.files, s.stored), (1, 4), "{s:?}");
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    accounted(s);
    let k = t.turns("harvest:kiro");
    assert_eq!(k[0].0, "5b0c7d2e-8f91-4a3b-b6c5-d4e3f2a1b0c9");
    assert_eq!(k[0].1.as_deref(), Some("kite"));
    let roles: Vec<&str> = k.iter().map(|x| x.2.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert!(k[1].3.starts_with("Running the tests now."), "{}", k[1].3);
    assert!(k[1].3.contains("[tool: execute_bash]"));
    assert!(k[2].3.contains("test net::retry ... FAILED"));
    let again = t.run(&c, &[Source::Kiro]);
    assert_eq!(source(&again, Source::Kiro).stored, 0);
}

#[test]
fn a_growing_kiro_session_stores_only_new_turns_and_a_bad_line_is_a_problem() {
    let t = Tmp::new();
    copy_tree(&fixtures().join("kiro"), &t.home);
    let file = t.home.join(KIRO_FILE);
    let src = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = src.lines().collect();
    std::fs::write(&file, lines[..3].join("\n") + "\n").unwrap();
    let c = t.config();
    let first = t.run(&c, &[Source::Kiro]);
    assert_eq!(source(&first, Source::Kiro).stored, 2);
    append(&file, "not json at all\n");
    append(&file, &(lines[3..].join("\n") + "\n"));
    let second = t.run(&c, &[Source::Kiro]);
    let s = source(&second, Source::Kiro);
    assert_eq!((s.stored, s.duplicate), (2, 2), "{s:?}");
    assert_eq!(s.problems.len(), 1, "{:?}", s.problems);
    assert_eq!(s.problems[0].line, Some(4));
    accounted(s);
}

// ---- Amp (threads older builds kept locally) ----

const AMP_FILE: &str = "data/amp/threads/T-7f3e2a10-4c5d-4e6f-8a9b-0c1d2e3f4a5b.json";

#[test]
fn amp_threads_keep_reasoning_tools_and_a_bad_message_is_a_problem() {
    let t = Tmp::new();
    // Where XDG_DATA_HOME points instead of ~/.local/share.
    let data = t.put("amp/.local/share", "data");
    let c = t.config().with_tool_env(env(&[("XDG_DATA_HOME", &data)]));
    assert_eq!(c.roots(Source::Amp), vec![data.join("amp/threads")]);
    let file = t.dir.path().join(AMP_FILE);
    let mut thread: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let all = thread["messages"].as_array().unwrap().clone();
    thread["messages"] = serde_json::Value::Array(all[..2].to_vec());
    std::fs::write(&file, serde_json::to_vec(&thread).unwrap()).unwrap();
    let first = t.run(&c, &[Source::Amp]);
    assert_eq!(source(&first, Source::Amp).stored, 2);
    // The thread grows; one message is damaged.
    let mut grown = all.clone();
    grown.insert(2, serde_json::json!("garbled"));
    thread["messages"] = serde_json::Value::Array(grown);
    std::fs::write(&file, serde_json::to_vec(&thread).unwrap()).unwrap();
    let second = t.run(&c, &[Source::Amp]);
    let s = source(&second, Source::Amp);
    assert_eq!((s.stored, s.duplicate), (2, 2), "{s:?}");
    assert_eq!(s.problems.len(), 1, "{:?}", s.problems);
    accounted(s);
    let a = t.turns("harvest:amp");
    assert_eq!(a[0].0, "T-7f3e2a10-4c5d-4e6f-8a9b-0c1d2e3f4a5b");
    assert_eq!(a[0].1.as_deref(), Some("Parse frames without copying"));
    let roles: Vec<&str> = a.iter().map(|x| x.2.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert!(
        a[1].3
            .contains("[reasoning]\nparse takes Vec<u8>; a slice is enough.")
    );
    assert!(a[1].3.contains("[tool: edit_file]"));
    assert!(a[2].3.contains("+pub fn parse(b: &[u8])"));
    let again = t.run(&c, &[Source::Amp]);
    assert_eq!(source(&again, Source::Amp).stored, 0);
}
