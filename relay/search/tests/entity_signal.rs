//! The entity signal on a real SQLite corpus: a name the question mentions boosts the turns that name it, unless it
//! is in so many turns of the scope (at least the query's depth) that it tells none of them apart — then it adds
//! nothing, and the words decide.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_search::{self as search, Indexes, Query, Signal};
use personkit_shared::wire::{ClientInfo, Role, build_observation};
use personkit_store::ingest::{Origin, ingest_observations};

fn corpus(turns: &[&str]) -> (tempfile::TempDir, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = personkit_store::db::open(&dir.path().join("corpus.db")).unwrap();
    let client = ClientInfo {
        app_version: "test".into(),
        device_id: "test-device".into(),
    };
    let obs: Vec<_> = turns
        .iter()
        .enumerate()
        .map(|(i, text)| {
            build_observation(
                "browser-ext:claude",
                "c",
                Role::User,
                text,
                Some(i as u32),
                None,
                "2026-05-01T10:00:00Z",
                client.clone(),
            )
        })
        .collect();
    let origin = Origin {
        device_id: "test-device".into(),
    };
    ingest_observations(&mut conn, &origin, &obs, time::OffsetDateTime::now_utc()).unwrap();
    let now = time::OffsetDateTime::now_utc();
    for (kind, name) in [("person", "Maya"), ("project", "Orbit")] {
        personkit_store::graph::upsert_entity(&conn, kind, name, &name.to_lowercase(), now)
            .unwrap();
    }
    (dir, conn)
}

#[test]
fn a_name_in_every_turn_adds_nothing_and_a_rare_one_boosts() {
    let mut turns: Vec<String> = (0..6)
        .map(|i| format!("Maya: note number {i} about the garden"))
        .collect();
    turns.push("Maya: the Orbit launch moves to May".into());
    let refs: Vec<&str> = turns.iter().map(String::as_str).collect();
    let (_dir, conn) = corpus(&refs);
    let mut q = Query::new("what did Maya say about Orbit");
    q.k = 10;
    q.depth = 5;
    let r = search::query(&conn, &Indexes::default(), None, &q).unwrap();
    let via_entity: Vec<&str> = r
        .hits
        .iter()
        .filter(|h| h.matched_via.contains(&Signal::Entity))
        .map(|h| h.snippet.as_str())
        .collect();
    assert_eq!(
        via_entity.len(),
        1,
        "only the turn naming Orbit: {via_entity:?}"
    );
    assert!(via_entity[0].contains("Orbit"), "{via_entity:?}");
    assert!(r.hits[0].snippet.contains("Orbit"), "{:?}", r.hits[0]);
    // With a depth above Maya's seven turns, Maya counts again: every turn is found by the entity signal.
    q.depth = 50;
    let r = search::query(&conn, &Indexes::default(), None, &q).unwrap();
    let via_entity = r
        .hits
        .iter()
        .filter(|h| h.matched_via.contains(&Signal::Entity))
        .count();
    assert_eq!(via_entity, 7);
}
