//! Events and the user's graph decisions between two real corpus files, through the page format: harvested
//! events travel and thread-derived ones do not; a merge and an approved entity proposal made on one relay show in
//! the other's graph after its graph pass; a dismissal and a rejection travel as decisions; and forgetting the
//! turn a proposal was found in, on either relay, removes the proposal and the entity it alone supported on both.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_graph::extract;
use personkit_shared::wire::Role;
use personkit_store::Connection;
use personkit_store::db;
use personkit_store::events::{self, NewEvent};
use personkit_store::forget::{Selection, forget};
use personkit_store::graph as rows;
use personkit_store::ingest::{Origin, ingest_batch};
use personkit_store::proposals::{self, Mention, State};
use personkit_store::sync::canonical_dump;
use personkit_sync::pages::{Source, apply_page, page};
use personkit_testkit::turn_at;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::macros::datetime;

const NOW: OffsetDateTime = datetime!(2026-11-24 12:00 UTC);
const S: &str = "browser-ext:claude";

fn corpus(name: &str) -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let conn = db::open(&dir.path().join(format!("{name}.db"))).unwrap();
    (dir, conn)
}

/// Applies `items` to `to` as a pushed page; none may be rejected.
fn apply(to: &mut Connection, items: &[Value]) {
    let source = Source {
        peer_id: "peer",
        pull_cursor: None,
    };
    let r = apply_page(to, items, source, NOW).unwrap();
    assert!(r.rejected.is_empty(), "{r:?}");
}

/// Every page of `from` after its cursor `after`, applied to `to`; returns the new cursor.
fn sync(from: &Connection, to: &mut Connection, after: i64) -> i64 {
    let mut after = after;
    loop {
        let p = page(from, after, 50).unwrap();
        apply(to, &p.items);
        after = p.next;
        if !p.more {
            return after;
        }
    }
}

fn commit(author: &str, sha: &str, minute: i64) -> NewEvent {
    NewEvent {
        kind: "git.commit".into(),
        source_surface: "events:git".into(),
        content: format!("fix the parser ({sha})"),
        key: format!("personkit|{sha}"),
        occurred_at: datetime!(2026-11-23 09:00 UTC) + time::Duration::minutes(minute),
        attrs: json!({"repo": "/home/u/src/personkit", "author": author, "sha": sha}),
    }
}

fn person(conn: &Connection, name: &str) -> Option<String> {
    rows::entities_of_kind(conn, "person", 100)
        .unwrap()
        .into_iter()
        .find(|e| e.name == name)
        .map(|e| e.id)
}

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn section(dump: &str, prefix: &str) -> Vec<String> {
    dump.lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

#[test]
fn events_merges_and_approved_names_reach_the_other_relays_graph_and_forgetting_reaches_both() {
    let (_da, mut a) = corpus("a");
    let (_db, mut b) = corpus("b");
    // Relay A holds a conversation and the commits its git harvester read.
    let turns: Vec<Value> = [
        (
            Role::User,
            "Priya reviewed the parser change yesterday.",
            "2026-11-23T10:00:00Z",
        ),
        (
            Role::Assistant,
            "Then ask Priya about the edge cases.",
            "2026-11-23T10:00:05Z",
        ),
        (
            Role::User,
            "Unrelated: what is a B-tree?",
            "2026-11-23T10:01:00Z",
        ),
    ]
    .iter()
    .enumerate()
    .map(|(i, (role, text, at))| turn_at(S, "c1", *role, text, Some(i as u32), None, at))
    .collect();
    let origin = Origin {
        device_id: "dev".into(),
    };
    ingest_batch(&mut a, &origin, &turns, NOW).unwrap();
    let stored = events::insert_batch(
        &a,
        &[
            commit("Ana Silva", "a1", 0),
            commit("Ana M. Silva", "b2", 1),
            NewEvent {
                kind: "thread.started".into(),
                source_surface: S.into(),
                content: "parser review".into(),
                key: "thread".into(),
                occurred_at: datetime!(2026-11-23 10:00 UTC),
                attrs: json!({"thread_id": "00000000-0000-0000-0000-000000000001", "surface": S}),
            },
        ],
        NOW,
    )
    .unwrap();
    assert_eq!(stored.stored, 3);
    personkit_graph::run::build(&a, NOW, 500, 10).unwrap();

    // A model found "Priya" in two turns; the user approves it on A and merges the two spellings of Ana.
    let msgs: Vec<(String, String, String)> = a
        .prepare("SELECT id, thread_id, captured_at FROM messages ORDER BY pk")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for (id, thread, at) in &msgs[..2] {
        proposals::propose(
            &a,
            &Mention {
                kind: "person",
                name: "Priya",
                key: "priya",
                confidence: 0.9,
                model: "scripted:test",
                message_id: id,
                thread_id: thread,
                seen_at: at,
            },
            NOW,
        )
        .unwrap();
    }
    // A second name, rejected on A, travels as a rejection.
    proposals::propose(
        &a,
        &Mention {
            kind: "concept",
            name: "B-tree",
            key: "b-tree",
            confidence: 0.6,
            model: "scripted:test",
            message_id: &msgs[2].0,
            thread_id: &msgs[2].1,
            seen_at: &msgs[2].2,
        },
        NOW,
    )
    .unwrap();
    let priya = proposals::proposal_id("person", "priya");
    let btree = proposals::proposal_id("concept", "b-tree");
    let on_a = extract::approve(&a, &priya, NOW).unwrap();
    extract::reject(&a, &btree, NOW).unwrap();
    let ana = person(&a, "Ana Silva").expect("derived from the commit");
    let ana_dot = person(&a, "Ana M. Silva").expect("derived from the other commit");
    personkit_graph::view::merge(&a, &ana, &ana_dot, NOW).unwrap();
    assert!(person(&a, "Ana M. Silva").is_none());

    // B pulls A's pages and runs its own graph pass.
    let cursor = sync(&a, &mut b, 0);
    personkit_graph::run::build(&b, NOW, 500, 10).unwrap();
    assert_eq!(
        count(&b, "SELECT count(*) FROM events WHERE kind = 'git.commit'"),
        2,
        "harvested events travel"
    );
    assert_eq!(
        count(
            &b,
            "SELECT count(*) FROM events WHERE kind = 'thread.started'"
        ),
        0,
        "events derived from a thread are each relay's own"
    );
    let (da, db) = (canonical_dump(&a).unwrap(), canonical_dump(&b).unwrap());
    for prefix in [
        "\"event\"",
        "\"merge\"",
        "\"proposal\"",
        "\"proposal_source\"",
    ] {
        let on_a = section(&da, prefix);
        assert!(!on_a.is_empty(), "A has {prefix} rows");
        assert_eq!(
            on_a,
            section(&db, prefix),
            "{prefix} rows are the same on both"
        );
    }
    // A merge decision travels without the names: B names it after its own entities.
    let merge_items: Vec<Value> = page(&a, 0, 5000)
        .unwrap()
        .items
        .into_iter()
        .filter(|i| i["kind"] == "merge")
        .collect();
    assert_eq!(merge_items.len(), 1);
    let text = merge_items[0].to_string();
    assert!(!text.contains("Ana"), "{text}");
    let names: (String, String) = b
        .query_row(
            "SELECT a_name, b_name FROM entity_merge_candidates WHERE state = 'merged'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let mut names = [names.0, names.1];
    names.sort();
    assert_eq!(
        names,
        ["Ana M. Silva", "Ana Silva"],
        "named once B folded its own two"
    );
    // The merge A's user made is B's graph too: one Ana, known by both spellings' sources.
    assert_eq!(person(&b, "Ana Silva").as_deref(), Some(ana.as_str()));
    assert!(
        person(&b, "Ana M. Silva").is_none(),
        "the folded entity is folded on B"
    );
    let ana_b = rows::entity(&b, &ana).unwrap().unwrap();
    assert!(
        ana_b.aliases.iter().any(|a| a == "ana m. silva"),
        "{:?}",
        ana_b.aliases
    );
    // The approved name is an entity on B, supported by the two turns it was found in.
    let p = proposals::get(&b, &priya).unwrap().unwrap();
    assert_eq!(p.state, State::Approved);
    assert_eq!(p.entity_id.as_deref(), Some(on_a.as_str()));
    assert_eq!(
        count(
            &b,
            &format!(
                "SELECT count(*) FROM entity_sources WHERE entity_id = '{on_a}' AND how = 'model' AND source_kind = 'message'"
            )
        ),
        2
    );
    assert_eq!(
        proposals::get(&b, &btree).unwrap().unwrap().state,
        State::Rejected
    );
    assert_eq!(
        count(&b, "SELECT count(*) FROM graph_settle"),
        0,
        "nothing left to link"
    );

    // A third relay gets the approval before the turns it was found in: nothing to link yet, and nothing waits on
    // a list; when the turns arrive, the graph's next pass links them.
    let (_dc, mut c) = corpus("c");
    let all: Vec<Value> = page(&a, 0, 5000).unwrap().items;
    let (first, rest): (Vec<Value>, Vec<Value>) =
        all.into_iter().partition(|i| i["kind"] == "proposal");
    for items in [first, rest] {
        apply(&mut c, &items);
        personkit_graph::run::build(&c, NOW, 500, 10).unwrap();
        assert_eq!(count(&c, "SELECT count(*) FROM graph_settle"), 0);
    }
    assert_eq!(
        count(
            &c,
            &format!(
                "SELECT count(*) FROM entity_sources WHERE entity_id = '{on_a}' AND how = 'model'"
            )
        ),
        2,
        "linked once its turns arrived"
    );

    // The user forgets the first two turns on B; the tombstones reach A. On both relays the proposal and the
    // entity it alone supported are gone.
    let sel = Selection {
        thread: Some(msgs[0].1.clone()),
        since: Some("2026-11-23T10:00:00.000Z".into()),
        until: Some("2026-11-23T10:00:30.000Z".into()),
        ..Selection::default()
    };
    assert_eq!(forget(&mut b, &sel, NOW).unwrap().messages, 2);
    sync(&b, &mut a, 0);
    let _ = cursor;
    for (name, conn) in [("A", &a), ("B", &b)] {
        assert!(
            proposals::get(conn, &priya).unwrap().is_none(),
            "{name}: proposal gone"
        );
        assert!(
            rows::entity(conn, &on_a).unwrap().is_none(),
            "{name}: entity gone"
        );
        assert!(
            person(conn, "Ana Silva").is_some(),
            "{name}: Ana stays (the commits support her)"
        );
    }
    // A replay of A's old pages on B does not bring the name back.
    sync(&a, &mut b, 0);
    assert!(proposals::get(&b, &priya).unwrap().is_none());
}
