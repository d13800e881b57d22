//! Forgetting part of a thread on a real corpus file: the links of the forgotten turn go at once, the thread's own
//! links go with it and come back from the turns that stay at the next pass (the thread is read again), and what
//! only the forgotten turn said is gone for good.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_graph::run;
use personkit_shared::wire::Role;
use personkit_store::Connection;
use personkit_store::db;
use personkit_store::forget::{Selection, forget};
use personkit_store::graph as rows;
use personkit_store::ingest::{Origin, ingest_batch};
use personkit_testkit::turn_at;
use time::macros::datetime;

fn names(conn: &Connection, kind: &str) -> Vec<String> {
    rows::find(conn, None, Some(kind), 50)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect()
}

#[test]
fn a_partly_forgotten_thread_keeps_what_its_other_turns_say() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = db::open(&dir.path().join("c.db")).unwrap();
    let s = "browser-ext:claude";
    let items = [
        turn_at(
            s,
            "c1",
            Role::User,
            "see https://old.example.com/a",
            Some(0),
            None,
            "2026-11-20T09:00:00.000Z",
        ),
        turn_at(
            s,
            "c1",
            Role::Assistant,
            "and https://kept.example.org/b with claude-3-5-sonnet",
            Some(1),
            None,
            "2026-11-22T09:00:00.000Z",
        ),
    ];
    let origin = Origin {
        device_id: "dev".into(),
    };
    let now = datetime!(2026-11-23 00:00 UTC);
    ingest_batch(&mut conn, &origin, &items, now).unwrap();
    let r = run::build(&conn, now, 500, 10).unwrap();
    assert_eq!(r.messages, 2);
    assert_eq!(
        names(&conn, "site"),
        ["kept.example.org", "old.example.com"]
    );
    assert_eq!(names(&conn, "tool"), ["Claude"]);

    // Forget the first turn only (by its time).
    let thread = personkit_testkit::thread_id(s, "c1");
    forget(
        &mut conn,
        &Selection {
            thread: Some(thread.clone()),
            until: Some("2026-11-21T00:00:00.000Z".into()),
            ..Selection::default()
        },
        now,
    )
    .unwrap();
    assert_eq!(names(&conn, "site"), ["kept.example.org"], "at once");
    assert!(
        names(&conn, "tool").is_empty(),
        "the thread's own links went with the turn"
    );

    let again = run::build(&conn, now, 500, 10).unwrap();
    assert_eq!((again.redone, again.messages), (1, 0), "{again:?}");
    assert_eq!(
        names(&conn, "tool"),
        ["Claude"],
        "read again from the turn that stays"
    );
    assert_eq!(names(&conn, "site"), ["kept.example.org"]);
    assert_eq!(names(&conn, "model"), ["claude-3-5-sonnet"]);
    let claude = rows::resolve(&conn, "tool", "claude").unwrap().unwrap();
    let (threads, n) = rows::entity_threads(&conn, &claude, 10).unwrap();
    assert_eq!((threads.len(), n), (1, 1));
    // The relation's validity now starts at the first turn that stays.
    let e = rows::edges_of(&conn, &claude, 10).unwrap();
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].valid_from.as_deref(), Some("2026-11-22T09:00:00.000Z"));
    assert_eq!(run::build(&conn, now, 500, 10).unwrap().redone, 0);
}
