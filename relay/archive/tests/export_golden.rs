//! Export golden files, data-driven: each folder of `tests/export/` holds `input.json` (a format and threads in
//! the wire format's terms, stored through the real ingest into a real SQLite corpus) and `expected/`, the whole
//! export folder the first run must produce, manifest included. `PERSONKIT_BLESS=1` rewrites `expected/`
//! (review the diff before committing). Then the same folder is exported again (nothing written), and after a
//! change the rerun rewrites only the changed thread.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use personkit_archive::export::export;
use personkit_archive::render::Format;
use personkit_store::archive::ExportFilter;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Case {
    format: String,
    threads: Vec<common::ThreadSpec>,
}

fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn cases() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/export");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("input.json").is_file())
        .collect();
    v.sort();
    v
}

#[test]
fn every_case_matches_its_golden_folder() {
    let cases = cases();
    assert!(cases.len() >= 4, "golden cases missing: {cases:?}");
    for case_dir in cases {
        let case: Case =
            serde_json::from_slice(&std::fs::read(case_dir.join("input.json")).unwrap()).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let conn = common::corpus(&tmp.path().join("corpus.db"), &case.threads);
        let out = tmp.path().join("out");
        let format = Format::parse(&case.format).unwrap();
        let r = export(&conn, &out, format, &ExportFilter::default(), |_, _| {}).unwrap();
        assert_eq!(r.written, case.threads.len() as u64, "{case_dir:?}");
        let got = files(&out);
        let expected_dir = case_dir.join("expected");
        if std::env::var_os("PERSONKIT_BLESS").is_some() {
            let _ = std::fs::remove_dir_all(&expected_dir);
            for (rel, bytes) in &got {
                let p = expected_dir.join(rel);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, bytes).unwrap();
            }
        }
        let want = files(&expected_dir);
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{case_dir:?}: file names"
        );
        for (rel, bytes) in &want {
            assert_eq!(
                String::from_utf8_lossy(&got[rel]),
                String::from_utf8_lossy(bytes),
                "{case_dir:?}: {rel}"
            );
        }
        // A second run writes nothing.
        let again = export(&conn, &out, format, &ExportFilter::default(), |_, _| {}).unwrap();
        assert_eq!(
            (again.written, again.unchanged, again.removed),
            (0, r.threads, 0)
        );
    }
}

fn spec(conv: &str, title: &str, contents: &[&str]) -> common::ThreadSpec {
    serde_json::from_value(serde_json::json!({
        "surface": "browser-ext:claude",
        "conversation": conv,
        "title": title,
        "turns": contents.iter().enumerate().map(|(i, c)| serde_json::json!({
            "role": if i % 2 == 0 { "user" } else { "assistant" },
            "content": c,
            "ordinal": i,
            "captured_at": format!("2026-11-2{}T10:00:0{}Z", 1 + i / 10, i % 10),
        })).collect::<Vec<_>>(),
    }))
    .unwrap()
}

#[test]
fn a_rerun_rewrites_only_what_changed_and_removes_forgotten_threads() {
    let tmp = tempfile::tempdir().unwrap();
    let mut conn = common::corpus(
        &tmp.path().join("corpus.db"),
        &[
            spec("a", "Alpha", &["one", "two"]),
            spec("b", "Beta", &["three", "four"]),
            spec("c", "Gamma", &["five"]),
        ],
    );
    let out = tmp.path().join("out");
    let all = ExportFilter::default();
    let first = export(&conn, &out, Format::Markdown, &all, |_, _| {}).unwrap();
    assert_eq!((first.written, first.unchanged, first.removed), (3, 0, 0));
    let before = files(&out);

    // A new turn in Alpha: only Alpha's file changes.
    common::add(
        &mut conn,
        &[spec("a", "Alpha", &["one", "two", "and a third"])],
    );
    let r = export(&conn, &out, Format::Markdown, &all, |_, _| {}).unwrap();
    assert_eq!((r.written, r.unchanged, r.removed), (1, 2, 0));
    let after = files(&out);
    let changed: Vec<&String> = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(v))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        changed.len(),
        2,
        "Alpha's file and the manifest: {changed:?}"
    );
    assert!(changed.iter().any(|k| k.contains("Alpha-")));
    assert!(
        String::from_utf8_lossy(
            &after[changed
                .iter()
                .find(|k| k.contains("Alpha-"))
                .unwrap()
                .as_str()]
        )
        .contains("and a third")
    );

    // Beta forgotten: its file goes on the next run, even one filtered to another thread.
    let beta = personkit_shared::ids::thread_id("browser-ext:claude", "b").to_string();
    personkit_store::forget::forget(
        &mut conn,
        &personkit_store::forget::Selection::thread(&beta),
        common::now(),
    )
    .unwrap();
    let gamma = personkit_shared::ids::thread_id("browser-ext:claude", "c").to_string();
    let only_gamma = ExportFilter {
        threads: vec![gamma],
        ..ExportFilter::default()
    };
    let r = export(&conn, &out, Format::Markdown, &only_gamma, |_, _| {}).unwrap();
    assert_eq!((r.written, r.unchanged, r.removed), (0, 2, 1));
    let now = files(&out);
    assert!(!now.keys().any(|k| k.contains("Beta-")), "{:?}", now.keys());
    assert!(
        !now.values()
            .any(|v| String::from_utf8_lossy(v).contains("three"))
    );

    // A new title moves the file; the old name goes.
    common::add(&mut conn, &[spec("c", "Gamma: renamed", &["five", "six"])]);
    let r = export(&conn, &out, Format::Markdown, &all, |_, _| {}).unwrap();
    assert_eq!(r.written, 1);
    let now = files(&out);
    assert!(
        now.keys().any(|k| k.contains("Gamma renamed-")),
        "{:?}",
        now.keys()
    );
    assert!(
        !now.keys().any(|k| k.contains("/Gamma-")),
        "{:?}",
        now.keys()
    );

    // A deleted file is written again; a JSON export into a Markdown folder is refused.
    let alpha_file = now.keys().find(|k| k.contains("Alpha-")).unwrap().clone();
    std::fs::remove_file(out.join(&alpha_file)).unwrap();
    let r = export(&conn, &out, Format::Markdown, &all, |_, _| {}).unwrap();
    assert_eq!((r.written, r.unchanged), (1, 1));
    let e = export(&conn, &out, Format::Json, &all, |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("another folder"), "{e}");
}

#[test]
fn a_hostile_manifest_cannot_remove_files_outside_the_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let conn = common::corpus(
        &tmp.path().join("corpus.db"),
        &[spec("a", "Alpha", &["one"])],
    );
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let victim = tmp.path().join("victim.txt");
    std::fs::write(&victim, "keep me").unwrap();
    std::fs::write(
        out.join(personkit_archive::export::MANIFEST),
        r#"{"format":"markdown","render_version":1,"threads":{"gone":{"path":"../victim.txt","sha256":"x"},"gone2":{"path":"/etc/hostname","sha256":"x"}}}"#,
    )
    .unwrap();
    let r = export(
        &conn,
        &out,
        Format::Markdown,
        &ExportFilter::default(),
        |_, _| {},
    )
    .unwrap();
    // Refused deletions are not counted as removed: they are reported apart, with why.
    assert_eq!((r.written, r.removed), (1, 0));
    assert_eq!(r.not_removed.len(), 2, "{r:?}");
    assert!(
        r.not_removed
            .iter()
            .all(|n| n.why.contains("outside the export folder")),
        "{r:?}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
}

#[cfg(unix)]
#[test]
fn a_symlinked_folder_inside_out_is_refused_and_its_target_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let conn = common::corpus(
        &tmp.path().join("corpus.db"),
        &[spec("a", "Alpha", &["one"])],
    );
    let all = ExportFilter::default();
    // Where the first export puts the thread's file: its folder is what gets replaced by a link.
    let probe = tmp.path().join("probe");
    export(&conn, &probe, Format::Markdown, &all, |_, _| {}).unwrap();
    let file = files(&probe)
        .into_keys()
        .find(|k| k.ends_with(".md"))
        .unwrap();
    let folder = file.split('/').next().unwrap().to_owned();
    assert_ne!(folder, file, "the thread's file sits in a folder");

    let out = tmp.path().join("out");
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, out.join(&folder)).unwrap();
    let e = export(&conn, &out, Format::Markdown, &all, |_, _| {}).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(&folder) && msg.contains("symbolic link") && msg.contains("Remove the link"),
        "{msg}"
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

    // A manifest entry behind a linked folder is not deleted through the link: it is reported, not counted.
    std::fs::remove_file(out.join(&folder)).unwrap();
    std::fs::write(elsewhere.join("x.md"), "keep me").unwrap();
    std::os::unix::fs::symlink(&elsewhere, out.join("linked")).unwrap();
    std::fs::write(
        out.join(personkit_archive::export::MANIFEST),
        r#"{"format":"markdown","render_version":1,"threads":{"gone":{"path":"linked/x.md","sha256":"x"}}}"#,
    )
    .unwrap();
    let r = export(&conn, &out, Format::Markdown, &all, |_, _| {}).unwrap();
    assert_eq!((r.written, r.removed), (1, 0), "{r:?}");
    assert_eq!(r.not_removed.len(), 1, "{r:?}");
    assert!(r.not_removed[0].why.contains("symbolic link"), "{r:?}");
    assert_eq!(
        std::fs::read_to_string(elsewhere.join("x.md")).unwrap(),
        "keep me"
    );
}

/// The export holds the user's approved knowledge, and only that: `knowledge.md` lists approved entries with
/// links to their threads' files (pending and rejected entries never appear), JSON exports write
/// `knowledge.json`, an unchanged rerun leaves it alone, and when nothing approved is left (its sources
/// forgotten) the file goes.
#[test]
fn approved_knowledge_is_exported_and_nothing_else() {
    use personkit_store::knowledge::{self as rows, NewEntry, Source};
    let tmp = tempfile::tempdir().unwrap();
    let mut conn = common::corpus(
        &tmp.path().join("corpus.db"),
        &[
            spec("a", "Alpha", &["Steel frames for the daily ride", "noted"]),
            spec("b", "Beta", &["Tabs over spaces, always", "ok"]),
        ],
    );
    let source = |needle: &str| -> Source {
        conn.query_row(
            "SELECT id, thread_id FROM messages WHERE content LIKE ?1",
            [format!("%{needle}%")],
            |r| {
                Ok(Source {
                    message_id: r.get(0)?,
                    thread_id: r.get(1)?,
                })
            },
        )
        .unwrap()
    };
    let entry = |kind: &str, topic: &str, position: &str, s: Source| NewEntry {
        kind: kind.into(),
        topic: topic.into(),
        position: position.into(),
        reasoning: format!("{position}: said with reasons in the thread it came from."),
        confidence: "high".into(),
        stability: "stable".into(),
        tags: vec!["cycling gear".into()],
        origin: "pipeline".into(),
        sources: vec![s],
        ..NewEntry::default()
    };
    let now = common::now();
    let approved = rows::insert(
        &conn,
        &entry(
            "decision",
            "bike frames",
            "Steel over aluminium",
            source("Steel frames"),
        ),
        now,
    )
    .unwrap();
    rows::decide(&conn, &approved, "approved", "test", now).unwrap();
    rows::insert(
        &conn,
        &entry(
            "standard",
            "indentation",
            "PENDING-tabs",
            source("Tabs over"),
        ),
        now,
    )
    .unwrap();
    let rejected = rows::insert(
        &conn,
        &entry("standard", "editors", "REJECTED-vim", source("Tabs over")),
        now,
    )
    .unwrap();
    rows::decide(&conn, &rejected, "rejected", "test", now).unwrap();

    let out = tmp.path().join("out");
    let all = ExportFilter::default();
    let r = export(&conn, &out, Format::Markdown, &all, |_, _| {}).unwrap();
    assert_eq!(r.knowledge, 1);
    let f = files(&out);
    let md = String::from_utf8(f["knowledge.md"].clone()).unwrap();
    assert!(
        md.contains("## Decisions\n\n### bike frames\n\nSteel over aluminium\n"),
        "{md}"
    );
    assert!(md.contains("#cycling-gear"), "{md}");
    assert!(!md.contains("PENDING") && !md.contains("REJECTED"), "{md}");
    let alpha = f.keys().find(|k| k.contains("Alpha-")).unwrap();
    let msg = source("Steel frames").message_id;
    assert!(md.contains(&format!("[{msg}]({alpha})")), "{md}");

    // Unchanged: not rewritten.
    let r = export(&conn, &out, Format::Markdown, &all, |_, _| {}).unwrap();
    assert_eq!((r.written, r.knowledge), (0, 1));
    assert_eq!(files(&out), f);

    // JSON: the approved entry with its sources, nothing else.
    let out_json = tmp.path().join("json");
    export(&conn, &out_json, Format::Json, &all, |_, _| {}).unwrap();
    let j: serde_json::Value = serde_json::from_slice(&files(&out_json)["knowledge.json"]).unwrap();
    assert_eq!(j["format"], "personkit-knowledge");
    let listed = j["entries"].as_array().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], approved.as_str());
    assert_eq!(listed[0]["status"], "approved");
    assert_eq!(listed[0]["sources"][0]["message_id"], msg.as_str());

    // Alpha forgotten: the entry's only source is gone, so is the entry, and the file with it.
    let alpha_id = personkit_shared::ids::thread_id("browser-ext:claude", "a").to_string();
    personkit_store::forget::forget(
        &mut conn,
        &personkit_store::forget::Selection::thread(&alpha_id),
        common::now(),
    )
    .unwrap();
    let r = export(&conn, &out, Format::Markdown, &all, |_, _| {}).unwrap();
    assert_eq!(r.knowledge, 0);
    let f = files(&out);
    assert!(!f.contains_key("knowledge.md"), "{:?}", f.keys());
    assert!(
        !f.values()
            .any(|v| String::from_utf8_lossy(v).contains("Steel"))
    );
}

/// The current version of each memory tier and of the profile is exported as `memory/<tier>.md` with a small
/// front-matter; an unchanged rerun leaves the files alone; forgetting a thread withdraws the versions that drew
/// on it, so the next run writes the tier's previous current version or removes its file; JSON exports write
/// `memory/<tier>.json`; a linked `memory` folder is refused, not written through.
#[test]
fn memory_tiers_are_exported_in_step_with_the_corpus() {
    use personkit_store::memory::{self as rows, NewVersion};
    let tmp = tempfile::tempdir().unwrap();
    let mut conn = common::corpus(
        &tmp.path().join("corpus.db"),
        &[
            spec("a", "Alpha", &["Plans for the Zanzibar trip", "noted"]),
            spec("b", "Beta", &["Tabs over spaces, always", "ok"]),
        ],
    );
    let thread = |c: &str| personkit_shared::ids::thread_id("browser-ext:claude", c).to_string();
    let (a, b) = (thread("a"), thread("b"));
    let t0 = common::now() - time::Duration::days(3);
    let version = |tier: &str, body: &str, model: Option<&str>, sources: &[&String]| NewVersion {
        tier: tier.into(),
        body: body.into(),
        tokens: 5,
        model: model.map(str::to_owned),
        sources: sources.iter().map(|s| (*s).clone()).collect(),
        ..NewVersion::default()
    };
    let first = rows::insert(
        &conn,
        &version("short", "## Day one\n- Tabs over spaces", None, &[&b]),
        t0,
    )
    .unwrap();
    let second = rows::insert(
        &conn,
        &version(
            "short",
            "## Day two\n- Zanzibar trip\n- Tabs",
            None,
            &[&a, &b],
        ),
        t0 + time::Duration::days(1),
    )
    .unwrap();
    rows::insert(
        &conn,
        &version(
            "mid",
            "Planning a Zanzibar trip.",
            Some("qwen2.5:7b"),
            &[&a],
        ),
        t0 + time::Duration::days(1),
    )
    .unwrap();
    rows::insert(&conn, &version("profile", "I write Rust.\n", None, &[]), t0).unwrap();

    let out = tmp.path().join("out");
    let all = ExportFilter::default();
    let r = export(&conn, &out, Format::Markdown, &all, |_, _| {}).unwrap();
    assert_eq!(r.memory, 3, "{r:?}");
    let f = files(&out);
    let short = String::from_utf8(f["memory/short.md"].clone()).unwrap();
    assert_eq!(
        short,
        format!(
            "---\ntier: \"short\"\nversion: 2\nid: \"{}\"\ncreated_at: \"{}\"\nmodel: null\n---\n\n\
             # Short memory\n\n## Day two\n- Zanzibar trip\n- Tabs\n",
            second.id, second.created_at
        )
    );
    let mid = String::from_utf8(f["memory/mid.md"].clone()).unwrap();
    assert!(
        mid.contains("model: \"qwen2.5:7b\"\n") && mid.contains("# Mid memory\n\nPlanning"),
        "{mid}"
    );
    assert!(f.contains_key("memory/profile.md"));
    assert!(
        !f.contains_key("memory/long.md"),
        "no long version, no file"
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&f[personkit_archive::export::MANIFEST]).unwrap();
    assert_eq!(manifest["memory"]["short"]["path"], "memory/short.md");

    // Unchanged: nothing rewritten.
    let r = export(&conn, &out, Format::Markdown, &all, |_, _| {}).unwrap();
    assert_eq!((r.written, r.memory), (0, 3));
    assert_eq!(files(&out), f);

    // Alpha forgotten: the versions that drew on it are withdrawn; short goes back to its first version, mid's
    // file goes.
    personkit_store::forget::forget(
        &mut conn,
        &personkit_store::forget::Selection::thread(&a),
        common::now(),
    )
    .unwrap();
    let r = export(&conn, &out, Format::Markdown, &all, |_, _| {}).unwrap();
    assert_eq!(r.memory, 2, "{r:?}");
    let f = files(&out);
    assert!(!f.contains_key("memory/mid.md"), "{:?}", f.keys());
    let short = String::from_utf8(f["memory/short.md"].clone()).unwrap();
    assert!(
        short.contains("version: 1\n") && short.contains(&first.id),
        "{short}"
    );
    assert!(
        !f.values()
            .any(|v| String::from_utf8_lossy(v).contains("Zanzibar")),
        "nothing of the forgotten thread is left in the folder"
    );

    // Beta forgotten too: no short version is current, its file goes; the profile stays.
    personkit_store::forget::forget(
        &mut conn,
        &personkit_store::forget::Selection::thread(&b),
        common::now(),
    )
    .unwrap();
    let r = export(&conn, &out, Format::Markdown, &all, |_, _| {}).unwrap();
    assert_eq!(r.memory, 1, "{r:?}");
    let f = files(&out);
    let memory: Vec<&String> = f.keys().filter(|k| k.starts_with("memory/")).collect();
    assert_eq!(memory, vec!["memory/profile.md"]);

    // JSON: the version as the store lists it.
    let out_json = tmp.path().join("json");
    export(&conn, &out_json, Format::Json, &all, |_, _| {}).unwrap();
    let j: serde_json::Value =
        serde_json::from_slice(&files(&out_json)["memory/profile.json"]).unwrap();
    assert_eq!(j["format"], "personkit-memory");
    assert_eq!(j["memory"]["tier"], "profile");
    assert_eq!(j["memory"]["body"], "I write Rust.\n");

    // A linked `memory` folder is not written through.
    let linked = tmp.path().join("linked");
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&linked).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, linked.join("memory")).unwrap();
    let e = export(&conn, &linked, Format::Markdown, &all, |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}
