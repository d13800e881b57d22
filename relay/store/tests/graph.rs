//! The entity graph's store on a real corpus file: sources kept per link, walks bounded by depth and fan-out, a path
//! of at most four relations, merge candidates proposed and left alone until the user merges, and forgetting a
//! thread taking the links it alone supported.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_shared::wire::Role;
use personkit_store::db;
use personkit_store::forget::{Selection, forget};
use personkit_store::graph::{self, EntityRef, How, Source, SourceKind};
use personkit_store::ingest::{Origin, ingest_batch};
use rusqlite::Connection;
use time::OffsetDateTime;
use time::macros::datetime;

const NOW: OffsetDateTime = datetime!(2026-11-20 10:00 UTC);

fn src(kind: SourceKind, id: &str, at: &str) -> Source {
    Source {
        kind,
        id: id.into(),
        how: How::Certain,
        confidence: 1.0,
        seen_at: at.into(),
    }
}

fn ent(conn: &Connection, kind: &str, name: &str, s: &Source) -> String {
    let id = graph::upsert_entity(conn, kind, name, &name.to_lowercase(), NOW).unwrap();
    graph::add_entity_source(conn, &id, s, NOW).unwrap();
    id
}

fn names(sub: &graph::Subgraph) -> Vec<String> {
    let mut v: Vec<String> = sub.entities.iter().map(|r| r.entity.name.clone()).collect();
    v.sort();
    v
}

fn corpus() -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let conn = db::open(&dir.path().join("c.db")).unwrap();
    (dir, conn)
}

#[test]
fn aliases_resolve_to_one_entity_and_a_relation_widens_its_validity() {
    let (_d, conn) = corpus();
    let s1 = src(SourceKind::Thread, "t1", "2026-11-01T09:00:00.000Z");
    let a = ent(&conn, "tool", "Claude Code", &s1);
    graph::add_alias(&conn, &a, "claude-code", NOW).unwrap();
    let again = graph::upsert_entity(&conn, "tool", "claude-code", "claude-code", NOW).unwrap();
    assert_eq!(a, again, "an alias key finds the entity");
    let other_kind =
        graph::upsert_entity(&conn, "site", "Claude Code", "claude code", NOW).unwrap();
    assert_ne!(a, other_kind, "keys resolve within a kind");
    let org = ent(&conn, "organisation", "Anthropic", &s1);
    let r = graph::add_relation(&conn, &a, "made_by", &org, &s1, NOW).unwrap();
    let s2 = src(SourceKind::Thread, "t2", "2026-11-05T09:00:00.000Z");
    let r2 = graph::add_relation(&conn, &a, "made_by", &org, &s2, NOW).unwrap();
    assert_eq!(r, r2);
    let e = &graph::edges_of(&conn, &a, 10).unwrap()[0];
    assert_eq!(e.valid_from.as_deref(), Some("2026-11-01T09:00:00.000Z"));
    assert_eq!(e.valid_to.as_deref(), Some("2026-11-05T09:00:00.000Z"));
    let info = graph::entity(&conn, &a).unwrap().unwrap();
    assert_eq!(info.aliases, ["claude-code"]);
    assert!(
        graph::add_relation(&conn, &a, "uses", &a, &s1, NOW).is_err(),
        "no relation from an entity to itself"
    );
    let bad = Source {
        confidence: 1.5,
        ..s1.clone()
    };
    assert!(graph::add_entity_source(&conn, &a, &bad, NOW).is_err());
}

/// A chain p0 - p1 - ... - p6 and a hub with many leaves.
fn chain_and_hub(conn: &Connection, leaves: usize) -> (Vec<String>, String) {
    let s = src(SourceKind::Thread, "t", "2026-11-01T09:00:00.000Z");
    let chain: Vec<String> = (0..7)
        .map(|i| ent(conn, "project", &format!("p{i}"), &s))
        .collect();
    for w in chain.windows(2) {
        graph::add_relation(conn, &w[0], "part_of", &w[1], &s, NOW).unwrap();
    }
    let hub = ent(conn, "tool", "hub", &s);
    graph::add_relation(conn, &chain[0], "uses", &hub, &s, NOW).unwrap();
    for i in 0..leaves {
        let leaf = ent(conn, "site", &format!("leaf{i}.example"), &s);
        graph::add_relation(conn, &leaf, "uses", &hub, &s, NOW).unwrap();
    }
    (chain, hub)
}

#[test]
fn neighbours_stop_at_their_depth_and_fan_out() {
    let (_d, conn) = corpus();
    let (chain, _hub) = chain_and_hub(&conn, 5);
    let one = graph::neighbours(&conn, &chain[2], 1, 50).unwrap();
    assert_eq!(names(&one), ["p1", "p3"]);
    let two = graph::neighbours(&conn, &chain[2], 2, 50).unwrap();
    assert_eq!(
        names(&two),
        ["p0", "p1", "p3", "p4"],
        "the hub is three away"
    );
    let from_p1 = graph::neighbours(&conn, &chain[1], 2, 50).unwrap();
    assert!(names(&from_p1).contains(&"hub".to_owned()));
    assert!(two.entities.iter().all(|r| r.depth <= 2));
    assert!(!two.truncated);
    assert!(graph::neighbours(&conn, &chain[2], 3, 50).is_err());
    assert!(graph::neighbours(&conn, &chain[2], 0, 50).is_err());
    // The hub has 6 relations; read 3 at a time, the answer says it was cut.
    let hub = graph::resolve(&conn, "tool", "hub").unwrap().unwrap();
    let cut = graph::neighbours(&conn, &hub, 1, 3).unwrap();
    assert_eq!(cut.entities.len(), 3);
    assert!(cut.truncated);
}

#[test]
fn a_path_is_at_most_four_relations() {
    let (_d, conn) = corpus();
    let (chain, _) = chain_and_hub(&conn, 2);
    let p = graph::path(&conn, &chain[0], &chain[4], 4)
        .unwrap()
        .unwrap();
    assert_eq!(p.len(), 4);
    let ends: Vec<&str> = p.iter().map(|e| e.object.name.as_str()).collect();
    assert_eq!(ends, ["p1", "p2", "p3", "p4"]);
    assert_eq!(
        graph::path(&conn, &chain[0], &chain[5], 4).unwrap(),
        None,
        "five relations apart is beyond the bound"
    );
    assert_eq!(graph::path(&conn, &chain[0], &chain[3], 2).unwrap(), None);
    assert!(graph::path(&conn, &chain[0], &chain[5], 5).is_err());
    // Relations are walked in either direction: a leaf reaches p0 through the hub.
    let leaf = graph::resolve(&conn, "site", "leaf0.example")
        .unwrap()
        .unwrap();
    let back = graph::path(&conn, &leaf, &chain[1], 4).unwrap().unwrap();
    assert_eq!(back.len(), 3);
}

#[test]
fn merge_candidates_stay_proposed_until_the_user_merges() {
    let (_d, conn) = corpus();
    let s1 = src(SourceKind::Thread, "t1", "2026-11-01T09:00:00.000Z");
    let s2 = src(SourceKind::Thread, "t2", "2026-11-02T09:00:00.000Z");
    let a = ent(&conn, "person", "Priya Shah", &s1);
    let b = ent(&conn, "person", "Priya Sha", &s2);
    let proj = ent(&conn, "project", "atlas", &s2);
    graph::add_relation(&conn, &b, "about", &proj, &s2, NOW).unwrap();
    let ra = EntityRef {
        id: a.clone(),
        kind: "person".into(),
        name: "Priya Shah".into(),
    };
    let rb = EntityRef {
        id: b.clone(),
        kind: "person".into(),
        name: "Priya Sha".into(),
    };
    assert!(graph::propose_merge(&conn, &ra, &rb, 0.8, NOW).unwrap());
    assert!(!graph::propose_merge(&conn, &rb, &ra, 0.8, NOW).unwrap());
    let c = graph::candidates(&conn, "proposed", 10).unwrap();
    assert_eq!(c.len(), 1);
    assert!(
        graph::entity(&conn, &b).unwrap().is_some(),
        "a proposal merges nothing"
    );
    graph::merge(&conn, &a, &b, NOW).unwrap();
    assert!(graph::entity(&conn, &b).unwrap().is_none());
    assert_eq!(
        graph::resolve(&conn, "person", "priya sha")
            .unwrap()
            .as_deref(),
        Some(a.as_str()),
        "the merged name resolves to the kept entity"
    );
    let n = graph::neighbours(&conn, &a, 1, 10).unwrap();
    assert_eq!(names(&n), ["atlas"], "relations move");
    assert_eq!(graph::entity(&conn, &a).unwrap().unwrap().sources, 2);
    assert!(graph::candidates(&conn, "proposed", 10).unwrap().is_empty());
    assert_eq!(graph::candidates(&conn, "merged", 10).unwrap().len(), 1);
    // A dismissed pair is never proposed again.
    let c2 = ent(&conn, "person", "Pria Shah", &s1);
    let rc = EntityRef {
        id: c2.clone(),
        kind: "person".into(),
        name: "Pria Shah".into(),
    };
    graph::propose_merge(&conn, &ra, &rc, 0.6, NOW).unwrap();
    assert!(graph::dismiss(&conn, &c2, &a, NOW).unwrap());
    assert!(!graph::propose_merge(&conn, &ra, &rc, 0.6, NOW).unwrap());
    assert!(graph::candidates(&conn, "proposed", 10).unwrap().is_empty());
    let site = graph::upsert_entity(&conn, "site", "x.example", "x.example", NOW).unwrap();
    assert!(graph::merge(&conn, &a, &site, NOW).is_err(), "kinds differ");
}

#[test]
fn forgetting_a_thread_removes_the_links_it_alone_supported() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = db::open(&dir.path().join("c.db")).unwrap();
    let origin = Origin {
        device_id: "dev".into(),
    };
    let items = [
        personkit_testkit::turn(
            "browser-ext:chatgpt",
            "c-one",
            Role::User,
            "about atlas",
            Some(0),
        ),
        personkit_testkit::turn(
            "browser-ext:chatgpt",
            "c-two",
            Role::User,
            "also atlas",
            Some(0),
        ),
    ];
    ingest_batch(&mut conn, &origin, &items, NOW).unwrap();
    let t1 = personkit_testkit::thread_id("browser-ext:chatgpt", "c-one");
    let t2 = personkit_testkit::thread_id("browser-ext:chatgpt", "c-two");
    let m1: String = conn
        .query_row("SELECT id FROM messages WHERE thread_id = ?1", [&t1], |r| {
            r.get(0)
        })
        .unwrap();
    let at = "2026-11-20T10:00:00.000Z";
    let on1 = src(SourceKind::Thread, &t1, at);
    let on2 = src(SourceKind::Thread, &t2, at);
    let msg1 = src(SourceKind::Message, &m1, at);
    let atlas = ent(&conn, "project", "atlas", &on1);
    graph::add_entity_source(&conn, &atlas, &on2, NOW).unwrap();
    let chatgpt = ent(&conn, "site", "ChatGPT", &on1);
    graph::add_entity_source(&conn, &chatgpt, &on2, NOW).unwrap();
    let only1 = ent(&conn, "site", "docs.example", &msg1);
    graph::add_relation(&conn, &atlas, "mentions", &only1, &msg1, NOW).unwrap();
    graph::add_relation(&conn, &atlas, "uses", &chatgpt, &on1, NOW).unwrap();
    graph::add_relation(&conn, &atlas, "uses", &chatgpt, &on2, NOW).unwrap();
    let sub = graph::thread_subgraph(&conn, &t1, 100).unwrap();
    assert_eq!(names(&sub), ["ChatGPT", "atlas", "docs.example"]);

    forget(
        &mut conn,
        &Selection {
            thread: Some(t1.clone()),
            ..Selection::default()
        },
        NOW,
    )
    .unwrap();
    assert!(
        graph::entity(&conn, &only1).unwrap().is_none(),
        "an entity only the forgotten thread supported is gone"
    );
    let kept = graph::entity(&conn, &atlas).unwrap().unwrap();
    assert_eq!(kept.sources, 1, "the other thread still supports it");
    let edges = graph::edges_of(&conn, &atlas, 10).unwrap();
    assert_eq!(edges.len(), 1, "the relation supported by both stays");
    assert_eq!(edges[0].predicate, "uses");
    assert!(
        graph::thread_subgraph(&conn, &t1, 100)
            .unwrap()
            .entities
            .is_empty()
    );
    assert_eq!(graph::entity_threads(&conn, &atlas, 10).unwrap().1, 1);
    let left: i64 = conn
        .query_row(
            "SELECT count(*) FROM entity_sources WHERE source_id IN (?1, ?2)",
            [&t1, &m1],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0);
}

#[test]
fn listings_are_bounded() {
    let (_d, conn) = corpus();
    let (_, hub) = chain_and_hub(&conn, 30);
    assert_eq!(
        graph::find(&conn, Some("leaf"), None, 10).unwrap().len(),
        10
    );
    assert_eq!(
        graph::find(&conn, Some("leaf1"), Some("site"), 100)
            .unwrap()
            .len(),
        11
    );
    assert!(
        graph::find(&conn, Some("leaf"), Some("person"), 10)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        graph::find(&conn, Some("%"), None, 10).unwrap().len(),
        0,
        "LIKE characters are literal"
    );
    assert_eq!(graph::edges_of(&conn, &hub, 5).unwrap().len(), 5);
    let tl = graph::timeline(&conn, &hub, 10).unwrap();
    assert_eq!(tl.len(), 1);
    assert_eq!(tl[0].day, "2026-11-01");
    let span = graph::span_subgraph(
        &conn,
        "2026-11-01T00:00:00.000Z",
        "2026-11-02T00:00:00.000Z",
        5,
    )
    .unwrap();
    assert_eq!(span.entities.len(), 5);
    assert!(span.truncated);
}

/// A link a model extracted keeps its confidence; the same link found for certain later is certain, and a second
/// model reading keeps the higher confidence.
#[test]
fn a_source_keeps_how_it_was_found_and_its_best_confidence() {
    let (_d, conn) = corpus();
    let by_model = |c: f64| Source {
        kind: SourceKind::Message,
        id: "m1".into(),
        how: How::Model,
        confidence: c,
        seen_at: "2026-11-01T09:00:00.000Z".into(),
    };
    let id = graph::upsert_entity(&conn, "person", "Priya", "priya", NOW).unwrap();
    let read = || -> (String, f64) {
        conn.query_row(
            "SELECT how, confidence FROM entity_sources WHERE entity_id = ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    };
    graph::add_entity_source(&conn, &id, &by_model(0.6), NOW).unwrap();
    assert_eq!(read(), ("model".to_owned(), 0.6));
    graph::add_entity_source(&conn, &id, &by_model(0.4), NOW).unwrap();
    assert_eq!(read(), ("model".to_owned(), 0.6));
    let certain = Source {
        how: How::Certain,
        confidence: 1.0,
        ..by_model(1.0)
    };
    graph::add_entity_source(&conn, &id, &certain, NOW).unwrap();
    assert_eq!(read(), ("certain".to_owned(), 1.0));
    graph::add_entity_source(&conn, &id, &by_model(0.5), NOW).unwrap();
    assert_eq!(
        read(),
        ("certain".to_owned(), 1.0),
        "certain is never downgraded"
    );
}
