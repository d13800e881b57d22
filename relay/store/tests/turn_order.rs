//! Every reader of a thread shows the same turn before each turn (`personkit_store::order`): the dashboard, the
//! read API and MCP (`read::get_thread`), export (`archive::export_thread`), turn pairs
//! (`SearchReader::thread_order` stepped by `order::ThreadOrder`), the turn after a search hit
//! (`SearchReader::next_in_thread`) and the embedder's previous turn (`vectors::pending_with`), on a thread that
//! mixes numbered and unnumbered turns stored out of order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_shared::wire::{ClientInfo, Role, build_observation};
use personkit_store::ingest::{Origin, ingest_observations};
use personkit_store::order::ThreadOrder;
use personkit_store::retrieval::SearchReader;
use personkit_store::vectors::{self, Kind};
use personkit_store::{archive, db, read};

#[test]
fn every_reader_agrees_on_the_turn_before_in_a_thread_mixing_numbered_and_unnumbered_turns() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = db::open(&dir.path().join("c.db")).unwrap();
    let client = ClientInfo {
        app_version: "test".into(),
        device_id: "dev".into(),
    };
    // (content, ordinal, captured at, the site's time): stored in this order, so arrival order is not turn
    // order for the unnumbered turns.
    let turns: [(&str, Option<u32>, &str, Option<&str>); 5] = [
        (
            "unnumbered, captured last",
            None,
            "2026-11-25T10:05:00Z",
            None,
        ),
        ("numbered zero", Some(0), "2026-11-25T10:06:00Z", None),
        ("numbered one", Some(1), "2026-11-25T10:07:00Z", None),
        (
            "unnumbered, captured first",
            None,
            "2026-11-25T10:01:00Z",
            None,
        ),
        (
            "unnumbered, dated by the site",
            None,
            "2026-11-25T10:09:00Z",
            Some("2026-11-25T10:03:00Z"),
        ),
    ];
    let observations: Vec<_> = turns
        .iter()
        .enumerate()
        .map(|(i, (content, ordinal, captured, occurred))| {
            let role = if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            let mut o = build_observation(
                "browser-ext:chatgpt",
                "mixed",
                role,
                content,
                *ordinal,
                None,
                captured,
                client.clone(),
            );
            o.turn.occurred_at = occurred.map(str::to_owned);
            o
        })
        .collect();
    let origin = Origin {
        device_id: "dev".into(),
    };
    // One batch per turn, so each turn arrives after the one listed before it.
    for o in &observations {
        ingest_observations(
            &mut conn,
            &origin,
            std::slice::from_ref(o),
            time::OffsetDateTime::now_utc(),
        )
        .unwrap();
    }
    let thread: String = conn
        .query_row("SELECT id FROM threads", [], |r| r.get(0))
        .unwrap();
    let pk_of = |id: &str| -> i64 {
        conn.query_row("SELECT pk FROM messages WHERE id = ?1", [id], |r| r.get(0))
            .unwrap()
    };

    // The dashboard's order, which is the order this test expects of everyone.
    let shown = read::get_thread(&conn, &thread, true, 100, None)
        .unwrap()
        .turns;
    let contents: Vec<&str> = shown.iter().map(|t| t.content.as_str()).collect();
    assert_eq!(
        contents,
        [
            "numbered zero",
            "numbered one",
            "unnumbered, captured first",
            "unnumbered, dated by the site",
            "unnumbered, captured last",
        ]
    );
    let ids: Vec<&str> = shown.iter().map(|t| t.id.as_str()).collect();
    let pks: Vec<i64> = ids.iter().map(|id| pk_of(id)).collect();

    // Export.
    let export = archive::export_thread(&conn, &thread).unwrap().unwrap();
    let exported: Vec<&str> = export.turns.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        exported, ids,
        "export lists the turns as the dashboard does"
    );

    // Turn pairs and the turn after a hit.
    let order = ThreadOrder::new(conn.thread_order(&thread).unwrap());
    // The embedder's text of each message, carrying its previous turn.
    let embedded: std::collections::HashMap<i64, String> =
        vectors::pending_with(&conn, Kind::Message, "model@1", 0, 100, true)
            .unwrap()
            .into_iter()
            .collect();
    for (i, (pk, turn)) in pks.iter().zip(&shown).enumerate() {
        let before = i.checked_sub(1).map(|i| pks[i]);
        let after = pks.get(i + 1).copied();
        assert_eq!(
            order.before(*pk),
            before,
            "turn pairs: the turn before {:?}",
            turn.content
        );
        assert_eq!(
            order.after(*pk),
            after,
            "turn pairs: the turn after {:?}",
            turn.content
        );
        assert_eq!(
            conn.next_in_thread(*pk).unwrap(),
            after,
            "search: the turn after {:?}",
            turn.content
        );
        let want = match i.checked_sub(1) {
            Some(b) => format!("{}\n\n(after: {})", turn.content, shown[b].content),
            None => turn.content.clone(),
        };
        assert_eq!(
            embedded[pk], want,
            "embedder: the turn before {:?}",
            turn.content
        );
    }
}
