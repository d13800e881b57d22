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
        harvest::run(&mut conn, c, sources, &Options::default(), now(), &mut |_| {}).unwrap()
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

fn source<'a>(r: &'a Report, s: Source) -> &'a SourceReport {
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
    assert!(
        zst.iter()
            .any(|x| x.3.contains("[reasoning]\n**Searching** for serde derives."))
    );
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
    assert_eq!((g[0].2.as_str(), g[0].3.as_str()), ("user", "List the open TODOs in src/."));
    assert!(g[1].3.contains("[reasoning]\n**Searching** grep for TODO under src."));
}
