//! Every case under `tests/fixtures/<format>/<case>/` imported into a real SQLite corpus three ways — the folder,
//! the same files in a real zip, and the conversations file alone — and checked against its `expected.json`
//! (summary counts, problems, each thread's current turns in order with their exact stored text). A second
//! import of the same input stores nothing new.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};

use personkit_import::{Options, Summary, import_path};
use personkit_store::read;
use serde_json::Value;
use time::OffsetDateTime;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn cases() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for format in std::fs::read_dir(fixtures()).unwrap() {
        let format = format.unwrap().path();
        if !format.is_dir() {
            continue;
        }
        for case in std::fs::read_dir(&format).unwrap() {
            let case = case.unwrap().path();
            if case.join("expected.json").exists() {
                out.push(case);
            }
        }
    }
    out.sort();
    assert!(out.len() >= 4, "fixture cases missing: {out:?}");
    out
}

/// The case's conversations file (everything but expected.json).
fn data_file(case: &Path) -> PathBuf {
    std::fs::read_dir(case)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap() != "expected.json")
        .unwrap()
}

fn zip_of(case: &Path, out: &Path) {
    let f = std::fs::File::create(out).unwrap();
    let mut z = zip::ZipWriter::new(f);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    // Other files of a real export sit beside the conversations.
    z.start_file("user.json", opts).unwrap();
    z.write_all(br#"{"id":"user-1","email":"someone@example.com"}"#)
        .unwrap();
    let data = data_file(case);
    let name = data.file_name().unwrap().to_string_lossy().to_string();
    z.start_file(name, opts).unwrap();
    z.write_all(&std::fs::read(&data).unwrap()).unwrap();
    z.finish().unwrap();
}

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

fn run(db: &Path, input: &Path, patterns: &[String]) -> Summary {
    let mut conn = personkit_store::db::open(db).unwrap();
    let opts = Options {
        patterns: patterns.to_vec(),
        ..Options::default()
    };
    import_path(&mut conn, input, &opts, now(), &mut |_| {}).unwrap()
}

fn check(case: &Path, input: &Path) {
    let what = format!("{} via {}", case.display(), input.display());
    let expected: Value =
        serde_json::from_slice(&std::fs::read(case.join("expected.json")).unwrap()).unwrap();
    let patterns: Vec<String> = serde_json::from_value(expected["patterns"].clone()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("corpus.db");

    let s = run(&db, input, &patterns);
    let got = serde_json::to_value(&s).unwrap();
    for (k, v) in expected["summary"].as_object().unwrap() {
        assert_eq!(&got[k], v, "{what}: summary.{k}\n{got:#}");
    }
    // Every message read is accounted for: stored, a duplicate, rejected, or counted apart with its reason.
    assert_eq!(
        s.messages,
        s.turns + s.empty + s.chrome + s.messages_unreadable,
        "{what}: {s:?}"
    );
    assert_eq!(
        s.turns,
        s.stored + s.duplicate + s.rejected,
        "{what}: {s:?}"
    );
    let problems: Vec<(Value, Value)> = s
        .problems
        .iter()
        .map(|p| {
            (
                serde_json::to_value(&p.conversation_id).unwrap(),
                serde_json::to_value(p.index).unwrap(),
            )
        })
        .collect();
    let want: Vec<(Value, Value)> = expected["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["conversation_id"].clone(), p["index"].clone()))
        .collect();
    assert_eq!(problems, want, "{what}: problems {:?}", s.problems);

    let conn = personkit_store::db::open_read_only(&db).unwrap();
    for t in expected["threads"].as_array().unwrap() {
        let surface = t["surface"].as_str().unwrap();
        let cid = t["conversation_id"].as_str().unwrap();
        let id = personkit_shared::ids::thread_id(surface, cid).to_string();
        let d = read::get_thread(&conn, &id, false, 200, None)
            .unwrap_or_else(|e| panic!("{what}: thread {cid}: {e:?}"));
        assert_eq!(
            serde_json::to_value(&d.thread.title).unwrap(),
            t["title"],
            "{what}: title of {cid}"
        );
        assert_eq!(
            serde_json::to_value(&d.thread.url).unwrap(),
            t["url"],
            "{what}: url of {cid}"
        );
        let got: Vec<Value> = d
            .turns
            .iter()
            .map(|x| {
                serde_json::json!({
                    "role": x.role, "content": x.content, "other_revisions": x.revisions.len()
                })
            })
            .collect();
        let want = t["turns"].as_array().unwrap();
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g, w, "{what}: turn {i} of {cid}");
        }
        assert_eq!(got.len(), want.len(), "{what}: turns of {cid}: {got:#?}");
    }
    drop(conn);

    // The same input again: nothing new.
    let again = run(&db, input, &patterns);
    assert_eq!(again.stored, 0, "{what}: second import stored {again:?}");
    assert_eq!(again.duplicate, s.stored + s.duplicate, "{what}: {again:?}");
}

#[test]
fn every_fixture_imports_as_expected_from_a_folder_a_zip_and_a_file() {
    for case in cases() {
        check(&case, &case);
        let dir = tempfile::tempdir().unwrap();
        let z = dir.path().join("export.zip");
        zip_of(&case, &z);
        check(&case, &z);
        // The conversations file alone, under a name that says nothing: the format comes from its content.
        let renamed = dir.path().join("download (3).json");
        std::fs::copy(data_file(&case), &renamed).unwrap();
        check(&case, &renamed);
    }
}

#[test]
fn a_dry_run_counts_but_stores_nothing() {
    let case = fixtures().join("chatgpt/branches");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("corpus.db");
    let mut conn = personkit_store::db::open(&db).unwrap();
    let opts = Options {
        dry_run: true,
        ..Options::default()
    };
    let s = import_path(&mut conn, &case, &opts, now(), &mut |_| {}).unwrap();
    assert!(s.dry_run);
    assert_eq!(s.stored, 16, "{s:?}");
    let n: i64 = conn
        .query_row("SELECT count(*) FROM messages", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0);
    let threads: i64 = conn
        .query_row("SELECT count(*) FROM threads", [], |r| r.get(0))
        .unwrap();
    assert_eq!(threads, 0);
}

#[test]
fn a_sharded_export_is_read_shard_by_shard_in_order() {
    // Newer ChatGPT exports split the list over conversations-000.json, conversations-001.json, …
    let all: Vec<Value> = serde_json::from_slice(
        &std::fs::read(fixtures().join("chatgpt/branches/conversations.json")).unwrap(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let z = dir.path().join("chatgpt-export.zip");
    {
        let f = std::fs::File::create(&z).unwrap();
        let mut w = zip::ZipWriter::new(f);
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        // Written out of order: the importer reads them by name.
        for (name, part) in [
            ("conversations-001.json", &all[2..]),
            ("export_manifest.json", &[][..]),
            ("conversations-000.json", &all[..2]),
        ] {
            w.start_file(name, opts).unwrap();
            w.write_all(&serde_json::to_vec(part).unwrap()).unwrap();
        }
        w.finish().unwrap();
    }
    let db = dir.path().join("corpus.db");
    let s = run(&db, &z, &["Project Falcon".into()]);
    let files: Vec<_> = s
        .files
        .iter()
        .map(|f| {
            (
                f.file.rsplit('!').next().unwrap().to_owned(),
                f.conversations,
            )
        })
        .collect();
    assert_eq!(
        files,
        [
            ("conversations-000.json".to_owned(), 2),
            ("conversations-001.json".to_owned(), 1)
        ]
    );
    assert_eq!((s.conversations, s.stored), (2, 16), "{s:?}");
}

#[test]
fn a_takeout_zip_imports_gemini_activity_and_skips_other_products() {
    let gemini = std::fs::read(fixtures().join("gemini/takeout/MyActivity.json")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let z = dir.path().join("takeout-20250503.zip");
    {
        let f = std::fs::File::create(&z).unwrap();
        let mut w = zip::ZipWriter::new(f);
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        w.start_file("Takeout/My Activity/Search/MyActivity.json", opts)
            .unwrap();
        w.write_all(
            br#"[{"header":"Search","title":"Searched for rust","time":"2025-05-01T10:00:00Z"}]"#,
        )
        .unwrap();
        w.start_file("Takeout/My Activity/Gemini Apps/MyActivity.json", opts)
            .unwrap();
        w.write_all(&gemini).unwrap();
        w.finish().unwrap();
    }
    let s = run(&dir.path().join("corpus.db"), &z, &[]);
    assert_eq!(s.files.len(), 1, "{s:?}");
    assert!(
        s.files[0].file.ends_with("Gemini Apps/MyActivity.json"),
        "{s:?}"
    );
    assert_eq!((s.conversations, s.stored), (2, 6), "{s:?}");
}

#[test]
fn a_takeout_zip_in_html_imports_gemini_activity_whatever_its_head_holds() {
    let page =
        std::fs::read_to_string(fixtures().join("gemini/takeout-html/MyActivity.html")).unwrap();
    // Takeout's pages open with a long inline style sheet: more than the bytes a format is sniffed from.
    let page = page.replacen(
        "<style type=\"text/css\">",
        &format!("<style type=\"text/css\">{}", ".x{margin:0}\n".repeat(8000)),
        1,
    );
    let dir = tempfile::tempdir().unwrap();
    let z = dir.path().join("takeout-20250503.zip");
    {
        let f = std::fs::File::create(&z).unwrap();
        let mut w = zip::ZipWriter::new(f);
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        w.start_file("Takeout/My Activity/Search/MyActivity.html", opts)
            .unwrap();
        w.write_all(b"<html><body><div class=\"outer-cell\"><p class=\"mdl-typography--title\">Search<br></p></div></body></html>")
            .unwrap();
        w.start_file("Takeout/My Activity/Gemini Apps/MyActivity.html", opts)
            .unwrap();
        w.write_all(page.as_bytes()).unwrap();
        w.finish().unwrap();
    }
    let s = run(&dir.path().join("corpus.db"), &z, &[]);
    assert_eq!(s.files.len(), 1, "{s:?}");
    assert!(
        s.files[0].file.ends_with("Gemini Apps/MyActivity.html"),
        "{s:?}"
    );
    assert_eq!((s.conversations, s.stored, s.empty), (2, 6, 1), "{s:?}");
}

#[test]
fn a_claude_export_zip_imports_conversations_and_projects_and_passes_over_other_projects_files() {
    let convs = std::fs::read(fixtures().join("claude/blocks/conversations.json")).unwrap();
    let projects = std::fs::read(fixtures().join("claude-projects/basic/projects.json")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let z = dir.path().join("data-2025-09-03-10-00-00.zip");
    {
        let f = std::fs::File::create(&z).unwrap();
        let mut w = zip::ZipWriter::new(f);
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, data) in [
            (
                "users.json",
                &br#"[{"uuid":"u1","full_name":"Sam Example"}]"#[..],
            ),
            ("conversations.json", &convs[..]),
            ("projects.json", &projects[..]),
            // Another tool's file of the same name, in another folder: not Claude's projects, passed over.
            ("other/projects.json", &br#"{"projects": ["a", "b"]}"#[..]),
        ] {
            w.start_file(name, opts).unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap();
    }
    let s = run(&dir.path().join("corpus.db"), &z, &[]);
    let formats: Vec<_> = s
        .files
        .iter()
        .map(|f| {
            (
                f.file.rsplit('!').next().unwrap().to_owned(),
                f.format.map(|x| x.name()),
            )
        })
        .collect();
    assert_eq!(
        formats,
        [
            ("conversations.json".to_owned(), Some("claude")),
            ("projects.json".to_owned(), Some("claude-projects")),
        ],
        "{s:#?}"
    );
    assert!(s.stored > 4, "{s:#?}");
}
