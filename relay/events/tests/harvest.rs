//! The event harvesters on real fixtures: a git repository made here with the `git` CLI, plan, task and memory
//! files, a reading list with a broken line, a screenshots folder, AI-tool config files holding secrets, and
//! threads stored through ingest — each into a real corpus file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use personkit_events::{Config, Report, Source, run};
use personkit_shared::wire::{ClientInfo, Role, build_observation};
use personkit_store::Connection;
use personkit_store::events::{self, Filter};
use personkit_testkit::git;
use serde_json::Value;
use time::OffsetDateTime;
use time::macros::datetime;

const NOW: OffsetDateTime = datetime!(2026-11-28 12:00 UTC);

struct Fixture {
    dir: tempfile::TempDir,
    conn: Connection,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let conn = personkit_store::db::open(&dir.path().join("corpus.db")).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        Fixture { dir, conn }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn config(&self) -> Config {
        let mut c = Config::new(self.home());
        c.load(&self.conn).unwrap();
        c
    }

    fn run(&self, s: Source) -> Report {
        self.run_at(s, NOW)
    }

    fn run_at(&self, s: Source, now: OffsetDateTime) -> Report {
        run(&self.conn, &self.config(), &[s], now, &mut |_| {}).unwrap()
    }

    fn events(&self, kind: &str) -> Vec<events::EventRow> {
        let mut v = events::list(
            &self.conn,
            &Filter {
                kind: Some(kind.into()),
                limit: events::MAX_LIMIT,
                ..Filter::default()
            },
        )
        .unwrap()
        .events;
        v.reverse();
        v
    }
}

fn commit(repo: &Path, file: &str, text: &str, message: &str, when: &str) {
    std::fs::write(repo.join(file), text).unwrap();
    git(repo, &["add", file], when);
    git(repo, &["commit", "-q", "-m", message], when);
}

#[test]
fn git_commits_land_once_and_a_second_pass_takes_only_new_ones() {
    let f = Fixture::new();
    let repo = f.dir.path().join("kite");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"], "2026-11-20T10:00:00Z");
    // An empty repository is no problem, just nothing.
    events::set_enabled(&f.conn, "git", true).unwrap();
    events::add_path(&f.conn, "git", &repo.display().to_string(), NOW).unwrap();
    let r = f.run(Source::Git);
    assert_eq!((r.sources[0].read, r.sources[0].stored), (0, 0), "{r:?}");
    assert!(r.sources[0].problems.is_empty(), "{r:?}");

    commit(
        &repo,
        "a.rs",
        "fn a() {}\nfn b() {}\n",
        "Add the parser",
        "2026-11-20T10:00:00Z",
    );
    commit(
        &repo,
        "b.rs",
        "x\ny\nz\n",
        "Wire the token ghp_abcdefghijklmnopqrstuvwxyz0123456789 in\n\nBody line.",
        "2026-11-21T11:30:00Z",
    );
    let r = f.run(Source::Git);
    assert_eq!(
        (
            r.sources[0].read,
            r.sources[0].stored,
            r.sources[0].duplicate
        ),
        (2, 2, 0)
    );
    let got = f.events("git.commit");
    assert_eq!(got.len(), 2);
    let first = &got[0];
    assert_eq!(first.content, "Add the parser");
    assert_eq!(first.occurred_at, "2026-11-20T10:00:00.000Z");
    assert_eq!(first.source_surface, "events:git");
    let a = &first.attrs;
    assert_eq!(a["repo"], "kite");
    assert_eq!(a["repo_path"], repo.display().to_string());
    assert_eq!(a["branch"], "main");
    assert_eq!(a["author"], "Ada Lovelace");
    assert_eq!(a["files"], serde_json::json!(["a.rs"]));
    assert_eq!(
        (a["insertions"].as_u64(), a["deletions"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(a["sha"].as_str().unwrap().len(), 40);
    // No e-mail anywhere, and the secret in the message is redacted.
    let all = serde_json::to_string(
        &got.iter()
            .map(|e| (&e.content, &e.attrs))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    assert!(!all.contains("ada@example.org"), "{all}");
    assert!(!got[1].content.contains("ghp_abcdef"), "{}", got[1].content);
    assert!(got[1].content.contains("Body line."));

    // Nothing new: nothing read.
    let r = f.run(Source::Git);
    assert_eq!((r.sources[0].read, r.sources[0].stored), (0, 0));
    // One more commit: only it.
    commit(
        &repo,
        "a.rs",
        "fn a() {}\n",
        "Drop b",
        "2026-11-22T09:00:00Z",
    );
    let r = f.run(Source::Git);
    assert_eq!(
        (
            r.sources[0].read,
            r.sources[0].stored,
            r.sources[0].duplicate
        ),
        (1, 1, 0)
    );
    let got = f.events("git.commit");
    assert_eq!(got.len(), 3);
    assert_eq!(
        (
            got[2].attrs["insertions"].as_u64(),
            got[2].attrs["deletions"].as_u64()
        ),
        (Some(0), Some(1))
    );

    // History rewritten under the cursor: read again from the start, stored commits answer as duplicate.
    git(
        &repo,
        &["reset", "-q", "--hard", "HEAD~1"],
        "2026-11-22T09:00:00Z",
    );
    commit(&repo, "c.rs", "c\n", "Another way", "2026-11-22T10:00:00Z");
    let r = f.run(Source::Git);
    assert_eq!(
        (
            r.sources[0].read,
            r.sources[0].stored,
            r.sources[0].duplicate
        ),
        (3, 1, 2)
    );
    assert_eq!(f.events("git.commit").len(), 4);

    // A repository that went away is a problem named in the report and the source's row, not a failure.
    std::fs::rename(&repo, f.dir.path().join("moved")).unwrap();
    let r = f.run(Source::Git);
    assert_eq!(r.sources[0].problems.len(), 1, "{r:?}");
    let row = &events::sources(&f.conn).unwrap()[0];
    assert!(
        row.last_error.as_deref().unwrap().contains("not found"),
        "{row:?}"
    );
}

#[test]
fn plans_tasks_and_memory_files_are_read_when_they_change() {
    let f = Fixture::new();
    let claude = f.home().join(".claude");
    std::fs::create_dir_all(claude.join("plans")).unwrap();
    std::fs::write(
        claude.join("plans/ship-v2.md"),
        "# Ship v2\n- migrate\n- announce\n",
    )
    .unwrap();
    std::fs::write(claude.join("plans/notes.txt"), "not a plan").unwrap();
    let mem = claude.join("projects/-src-kite/memory");
    std::fs::create_dir_all(&mem).unwrap();
    std::fs::write(mem.join("MEMORY.md"), "The build needs nightly.\n").unwrap();
    let project = f.dir.path().join("kite");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("TASKS.md"),
        "- [ ] write tests\napi_key=sk-abcdefghijklmnopqrstuvwxyz012345\n",
    )
    .unwrap();
    std::fs::write(project.join("CLAUDE.md"), "Use cargo.\n").unwrap();
    events::set_enabled(&f.conn, "claude-plans", true).unwrap();
    events::add_path(&f.conn, "claude-plans", &project.display().to_string(), NOW).unwrap();

    let r = f.run(Source::ClaudePlans);
    assert_eq!((r.sources[0].read, r.sources[0].stored), (4, 4), "{r:?}");
    let plans = f.events("plan.updated");
    assert_eq!(plans.len(), 1);
    assert!(plans[0].content.starts_with("# Ship v2"));
    assert_eq!(
        plans[0].attrs["path"],
        claude.join("plans/ship-v2.md").display().to_string()
    );
    assert_eq!(plans[0].attrs["project"], Value::Null);
    let tasks = f.events("tasks.updated");
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].attrs["project"], "kite");
    assert!(
        !tasks[0].content.contains("sk-abcdefghij"),
        "{}",
        tasks[0].content
    );
    let mems = f.events("memory_file.updated");
    assert_eq!(mems.len(), 2);
    assert!(
        mems.iter().all(|m| m.attrs["project"] == "kite"),
        "{mems:?}"
    );

    // Unchanged: nothing read, nothing written.
    let r = f.run(Source::ClaudePlans);
    assert_eq!(
        (
            r.sources[0].read,
            r.sources[0].stored,
            r.sources[0].duplicate
        ),
        (0, 0, 0)
    );
    // A changed task list is a new event.
    std::fs::write(project.join("TASKS.md"), "- [x] write tests\n").unwrap();
    let r = f.run(Source::ClaudePlans);
    assert_eq!((r.sources[0].read, r.sources[0].stored), (1, 1));
    assert_eq!(f.events("tasks.updated").len(), 2);
}

#[test]
fn a_reading_list_with_a_broken_line_stores_the_rest_and_counts_it() {
    let f = Fixture::new();
    let inbox = f.home().join(".dotperson/reading-list/inbox.jsonl");
    std::fs::create_dir_all(inbox.parent().unwrap()).unwrap();
    std::fs::write(
        &inbox,
        concat!(
            r#"{"url":"https://example.org/rust-async","title":"Async Rust","added_at":"2026-11-27T08:00:00Z"}"#,
            "\n{not json\n",
            r#"{"title":"no address"}"#,
            "\n",
            r#"{"url":"https://news.example.com/a?token=x","added_at":1795770000000}"#,
            "\n"
        ),
    )
    .unwrap();
    events::set_enabled(&f.conn, "reading-list", true).unwrap();
    let r = f.run(Source::ReadingList);
    let s = &r.sources[0];
    assert_eq!((s.read, s.stored, s.rejected), (4, 2, 2), "{r:?}");
    assert!(
        s.problems[0].ends_with("line 2: not a JSON object"),
        "{:?}",
        s.problems
    );
    assert!(
        s.problems[1].ends_with("line 3: no http(s) url"),
        "{:?}",
        s.problems
    );
    let got = f.events("reading.added");
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].content, "Async Rust\nhttps://example.org/rust-async");
    assert_eq!(got[0].attrs["site"], "example.org");
    assert_eq!(got[0].occurred_at, "2026-11-27T08:00:00.000Z");
    assert_eq!(got[1].attrs["site"], "news.example.com");

    // A half-written line waits; once complete it is taken, and nothing before it again.
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&inbox)
        .unwrap();
    file.write_all(br#"{"url":"https://example.net/later","title":"Later"}"#)
        .unwrap();
    let r = f.run(Source::ReadingList);
    assert_eq!((r.sources[0].read, r.sources[0].stored), (0, 0));
    file.write_all(b"\n").unwrap();
    let r = f.run(Source::ReadingList);
    assert_eq!(
        (
            r.sources[0].read,
            r.sources[0].stored,
            r.sources[0].rejected
        ),
        (1, 1, 0)
    );
    assert_eq!(f.events("reading.added").len(), 3);
    assert_eq!(events::sources(&f.conn).unwrap()[0].rejected, 2);
}

#[test]
fn the_same_item_in_one_minute_is_one_event_and_in_the_next_minute_another() {
    let f = Fixture::new();
    let inbox = f.home().join(".dotperson/reading-list/inbox.jsonl");
    std::fs::create_dir_all(inbox.parent().unwrap()).unwrap();
    let line =
        |at: &str| format!(r#"{{"url":"https://example.org/a","title":"A","added_at":"{at}"}}"#);
    let text = [
        line("2026-11-27T08:00:05Z"),
        line("2026-11-27T08:00:59Z"),
        line("2026-11-27T08:01:00Z"),
    ]
    .join("\n")
        + "\n";
    std::fs::write(&inbox, text).unwrap();
    events::set_enabled(&f.conn, "reading-list", true).unwrap();
    let r = f.run(Source::ReadingList);
    let s = &r.sources[0];
    assert_eq!((s.read, s.stored, s.duplicate), (3, 2, 1), "{r:?}");
    let at: Vec<String> = f
        .events("reading.added")
        .into_iter()
        .map(|e| e.occurred_at)
        .collect();
    assert_eq!(at, ["2026-11-27T08:00:05.000Z", "2026-11-27T08:01:00.000Z"]);
}

#[test]
fn screenshots_are_file_events_taken_once() {
    let f = Fixture::new();
    let shots = f.dir.path().join("shots");
    std::fs::create_dir_all(&shots).unwrap();
    std::fs::write(
        shots.join("Screenshot 2026-11-28 at 10.00.png"),
        [0x89, b'P', b'N', b'G'],
    )
    .unwrap();
    std::fs::write(shots.join("notes.txt"), "not an image").unwrap();
    events::set_enabled(&f.conn, "screenshots", true).unwrap();
    let mut c = f.config();
    c.env.insert(
        "DOTPERSON_SCREENSHOTS_DIR".into(),
        shots.display().to_string(),
    );
    let once = |c: &Config| run(&f.conn, c, &[Source::Screenshots], NOW, &mut |_| {}).unwrap();
    let r = once(&c);
    assert_eq!(r.sources[0].stored, 1, "{r:?}");
    let got = f.events("screenshot.added");
    assert_eq!(got[0].content, "Screenshot 2026-11-28 at 10.00.png");
    assert_eq!(got[0].attrs["size"], 4);
    let r = once(&c);
    assert_eq!(r.sources[0].stored, 0, "{r:?}");
    assert_eq!(f.events("screenshot.added").len(), 1);
}

#[test]
fn config_state_names_tools_models_and_servers_never_secrets() {
    let f = Fixture::new();
    let claude = f.home().join(".claude");
    std::fs::create_dir_all(&claude).unwrap();
    std::fs::write(
        claude.join("settings.json"),
        r#"{"model":"opus","env":{"ANTHROPIC_API_KEY":"sk-ant-api03-secretsecretsecret"}}"#,
    )
    .unwrap();
    std::fs::write(
        f.home().join(".claude.json"),
        r#"{"mcpServers":{"github":{"command":"gh","env":{"GITHUB_TOKEN":"ghp_secretsecretsecretsecretsecretsecret12"}}}}"#,
    )
    .unwrap();
    std::fs::create_dir_all(f.home().join(".codex")).unwrap();
    std::fs::write(
        f.home().join(".codex/config.toml"),
        "model = \"gpt-5-codex\"\n[mcp_servers.docs]\ncommand = \"npx\"\n",
    )
    .unwrap();
    std::fs::create_dir_all(f.home().join(".cursor")).unwrap();
    std::fs::write(f.home().join(".cursor/mcp.json"), "{broken").unwrap();
    events::set_enabled(&f.conn, "config-state", true).unwrap();
    let r = f.run(Source::ConfigState);
    assert_eq!(
        (r.sources[0].stored, r.sources[0].rejected),
        (3, 1),
        "{r:?}"
    );
    let got = f.events("config.state");
    let text = serde_json::to_string(&got).unwrap();
    assert!(!text.contains("secret"), "{text}");
    let tools: Vec<&str> = got
        .iter()
        .filter_map(|e| e.attrs["tool"].as_str())
        .collect();
    assert!(
        tools.contains(&"claude-code")
            && tools.contains(&"claude-code-mcp")
            && tools.contains(&"codex")
    );
    assert!(
        got.iter()
            .any(|e| e.content == "codex: model gpt-5-codex; MCP servers: docs"),
        "{got:?}"
    );
    // The same state again writes nothing.
    let r = f.run(Source::ConfigState);
    assert_eq!(r.sources[0].stored, 0);
}

fn client() -> ClientInfo {
    ClientInfo {
        app_version: "0.1.0".into(),
        device_id: "test".into(),
    }
}

#[test]
fn sessions_and_threads_become_events_and_leave_with_a_forgotten_thread() {
    let mut f = Fixture::new();
    let turn = |surface: &str, conv: &str, text: &str, ord: u32, at: &str| {
        let role = if ord.is_multiple_of(2) {
            Role::User
        } else {
            Role::Assistant
        };
        build_observation(surface, conv, role, text, Some(ord), None, at, client())
    };
    let batch = vec![
        turn(
            "harvest:claude-code",
            "s1",
            "fix the build",
            0,
            "2026-11-28T09:00:00Z",
        ),
        turn(
            "harvest:claude-code",
            "s1",
            "done",
            1,
            "2026-11-28T09:40:00Z",
        ),
        turn(
            "harvest:codex",
            "s2",
            "still going",
            0,
            "2026-11-28T11:50:00Z",
        ),
        turn(
            "browser-ext:chatgpt",
            "c1",
            "soup recipes",
            0,
            "2026-11-27T18:00:00Z",
        ),
    ];
    let origin = personkit_store::ingest::Origin {
        device_id: "test".into(),
    };
    personkit_store::ingest::ingest_observations(&mut f.conn, &origin, &batch, NOW).unwrap();
    let (s1, s2, c1) = (
        batch[0].thread_id.clone(),
        batch[2].thread_id.clone(),
        batch[3].thread_id.clone(),
    );
    personkit_store::harvest::link_threads(
        &f.conn,
        "claude-code",
        "/h/.claude/projects/-src-kite/s1.jsonl",
        std::slice::from_ref(&s1),
    )
    .unwrap();
    events::set_enabled(&f.conn, "sessions", true).unwrap();
    let r = f.run(Source::Sessions);
    assert_eq!(r.sources[0].stored, 4, "{r:?}");
    let started = f.events("session.started");
    assert_eq!(started.len(), 2);
    let s1_start = started
        .iter()
        .find(|e| e.attrs["thread_id"] == s1.as_str())
        .unwrap();
    assert_eq!(s1_start.occurred_at, "2026-11-28T09:00:00.000Z");
    assert_eq!(s1_start.attrs["surface"], "harvest:claude-code");
    assert_eq!(s1_start.attrs["project"], "kite");
    assert_eq!(s1_start.source_surface, "harvest:claude-code");
    // s1 has been quiet for more than 30 minutes; s2 has not ended yet.
    let ended = f.events("session.ended");
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].attrs["thread_id"], s1.as_str());
    assert_eq!(ended[0].occurred_at, "2026-11-28T09:40:00.000Z");
    let threads = f.events("thread.started");
    assert_eq!(threads.len(), 1);
    assert_eq!(threads[0].attrs["thread_id"], c1.as_str());
    assert_eq!(threads[0].attrs["surface"], "browser-ext:chatgpt");

    // Later, s2 has gone quiet: it ends; nothing else is written again.
    let r = f.run_at(Source::Sessions, datetime!(2026-11-28 13:00 UTC));
    assert_eq!(r.sources[0].stored, 1, "{r:?}");
    assert_eq!(f.events("session.ended").len(), 2);
    assert_eq!(events::of_thread(&f.conn, &s2, 10).unwrap().len(), 2);

    // Forgetting a thread takes its events; the others stay, and the next pass does not bring them back.
    let sel = personkit_store::forget::Selection::thread(&s1);
    personkit_store::forget::forget(&mut f.conn, &sel, NOW).unwrap();
    assert!(events::of_thread(&f.conn, &s1, 10).unwrap().is_empty());
    assert_eq!(events::of_thread(&f.conn, &c1, 10).unwrap().len(), 1);
    f.run_at(Source::Sessions, datetime!(2026-11-28 13:15 UTC));
    assert!(events::of_thread(&f.conn, &s1, 10).unwrap().is_empty());
}

#[test]
fn due_follows_each_sources_cadence() {
    let f = Fixture::new();
    assert!(
        personkit_events::due(&f.conn, NOW).unwrap().is_empty(),
        "nothing is on by default"
    );
    events::set_enabled(&f.conn, "config-state", true).unwrap();
    events::set_enabled(&f.conn, "reading-list", true).unwrap();
    assert_eq!(
        personkit_events::due(&f.conn, NOW).unwrap(),
        [Source::ConfigState, Source::ReadingList]
    );
    run(
        &f.conn,
        &f.config(),
        &[Source::ConfigState, Source::ReadingList],
        NOW,
        &mut |_| {},
    )
    .unwrap();
    assert!(personkit_events::due(&f.conn, NOW).unwrap().is_empty());
    let later = NOW + time::Duration::minutes(15);
    assert_eq!(
        personkit_events::due(&f.conn, later).unwrap(),
        [Source::ReadingList]
    );
    let hour = NOW + time::Duration::minutes(60);
    assert_eq!(
        personkit_events::due(&f.conn, hour).unwrap(),
        [Source::ConfigState, Source::ReadingList]
    );
}

#[test]
fn a_git_read_stops_at_its_bound_and_says_more_follow() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("r");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"], "2026-11-20T10:00:00Z");
    for i in 0..3 {
        let when = format!("2026-11-2{i}T10:00:00Z");
        commit(
            &repo,
            "f.txt",
            &format!("{i}\n"),
            &format!("Commit {i}"),
            &when,
        );
    }
    let read = personkit_events::git::commits(&repo, "HEAD", 2).unwrap();
    assert!(read.more);
    let messages: Vec<&str> = read.commits.iter().map(|c| c.message.as_str()).collect();
    assert_eq!(messages, ["Commit 0", "Commit 1"], "oldest first");
    let all = personkit_events::git::commits(&repo, "HEAD", 10).unwrap();
    assert!(!all.more);
    assert_eq!((all.commits.len(), all.unreadable), (3, 0));
    let err = personkit_events::git::commits(dir.path(), "HEAD", 10).unwrap_err();
    assert!(err.contains("not a git repository"), "{err}");
}

#[test]
fn a_title_given_later_makes_no_second_start() {
    let mut f = Fixture::new();
    let origin = personkit_store::ingest::Origin {
        device_id: "test".into(),
    };
    let first = build_observation(
        "browser-ext:claude",
        "c9",
        Role::User,
        "hello",
        Some(0),
        None,
        "2026-11-28T11:00:00Z",
        client(),
    );
    personkit_store::ingest::ingest_observations(&mut f.conn, &origin, &[first], NOW).unwrap();
    events::set_enabled(&f.conn, "sessions", true).unwrap();
    assert_eq!(f.run(Source::Sessions).sources[0].stored, 1);
    // The page's title arrives with the next turn.
    let mut next = build_observation(
        "browser-ext:claude",
        "c9",
        Role::User,
        "and hotels?",
        Some(2),
        None,
        "2026-11-28T11:05:00Z",
        client(),
    );
    next.title = Some("Trip to Lisbon".into());
    personkit_store::ingest::ingest_observations(&mut f.conn, &origin, &[next], NOW).unwrap();
    let title: Option<String> = f
        .conn
        .query_row("SELECT title FROM threads", [], |r| r.get(0))
        .unwrap();
    assert_eq!(title.as_deref(), Some("Trip to Lisbon"));
    let r = f.run_at(Source::Sessions, NOW + time::Duration::minutes(15));
    assert_eq!(
        (r.sources[0].stored, r.sources[0].duplicate),
        (0, 0),
        "{r:?}"
    );
    assert_eq!(f.events("thread.started").len(), 1);
}
