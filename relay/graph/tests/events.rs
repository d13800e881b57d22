//! The derivation over events on a real corpus file: a commit's repository and author, a session's project and
//! tool, a reading's site become entities whose source is the event; the events appear on the entity, a second
//! pass reads nothing again, and an event kind that names nothing adds nothing. The rows are written as the events
//! table defines them (its writer is another feature's).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_graph::{run, view};
use personkit_store::db;
use personkit_store::graph as rows;
use time::macros::datetime;

fn event(conn: &rusqlite::Connection, n: i64, kind: &str, at: &str, attrs: serde_json::Value) {
    conn.execute(
        "INSERT INTO events (id, kind, source_surface, content, content_hash, minute_bucket, occurred_at,
             captured_at, attrs, origin_device, origin_seq)
         VALUES (?1, ?2, 'harvest:git', 'x', ?3, ?4, ?5, ?5, ?6, 'test', ?4)",
        rusqlite::params![
            format!("ev-{n}"),
            kind,
            format!("h{n}"),
            n,
            at,
            attrs.to_string()
        ],
    )
    .unwrap();
}

#[test]
fn events_name_repositories_people_projects_and_sites() {
    let dir = tempfile::tempdir().unwrap();
    let conn = db::open(&dir.path().join("c.db")).unwrap();
    let commit = |n, at| {
        event(
            &conn,
            n,
            "git.commit",
            at,
            serde_json::json!({"repo": "orbit", "repo_path": "/home/ada/src/orbit", "branch": "main",
                "sha": format!("{n:040}"), "author": "Ada Lovelace", "files": 2, "insertions": 5, "deletions": 1}),
        )
    };
    commit(1, "2026-11-20T09:00:00.000Z");
    commit(2, "2026-11-22T09:00:00.000Z");
    event(
        &conn,
        3,
        "session.started",
        "2026-11-22T10:00:00.000Z",
        serde_json::json!({"thread_id": "t", "surface": "harvest:codex", "project": "orbit"}),
    );
    event(
        &conn,
        4,
        "reading.added",
        "2026-11-22T11:00:00.000Z",
        serde_json::json!({"url": "https://www.example.org/post", "title": "A post"}),
    );
    event(
        &conn,
        5,
        "screenshot.added",
        "2026-11-22T12:00:00.000Z",
        serde_json::json!({"path": "s.png"}),
    );
    let now = datetime!(2026-11-23 00:00 UTC);
    let r = run::build(&conn, now, 500, 10).unwrap();
    assert_eq!(r.events, 5);
    assert_eq!(run::build(&conn, now, 500, 10).unwrap().events, 0);

    let repo = view::lookup(&conn, "orbit").unwrap();
    // A project and a repository are both named orbit; the lookup picks the one with more sources.
    assert_eq!(repo.kind, "repository");
    let v = view::view(&conn, &repo.id, 10).unwrap();
    let evs: Vec<&str> = v.events.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(evs, ["ev-2", "ev-1"], "newest first");
    let rel = &v.relations[0];
    assert_eq!(
        (rel.predicate.as_str(), rel.object.name.as_str()),
        ("made_by", "Ada Lovelace")
    );
    assert_eq!(rel.valid_from.as_deref(), Some("2026-11-20T09:00:00.000Z"));
    assert_eq!(rel.valid_to.as_deref(), Some("2026-11-22T09:00:00.000Z"));
    let days: Vec<&str> = v.timeline.iter().map(|d| d.day.as_str()).collect();
    assert_eq!(days, ["2026-11-22", "2026-11-20"]);

    let kinds = |k: &str| -> Vec<String> {
        rows::find(&conn, None, Some(k), 10)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect()
    };
    assert_eq!(kinds("project"), ["orbit"]);
    assert_eq!(kinds("tool"), ["Codex CLI"]);
    assert_eq!(kinds("site"), ["example.org"]);
    assert_eq!(kinds("person"), ["Ada Lovelace"]);
    let (entities, relations, _) = rows::counts(&conn).unwrap();
    assert_eq!(
        (entities, relations),
        (6, 3),
        "repository, person, project, tool, its maker, site; made_by twice and uses"
    );
}
