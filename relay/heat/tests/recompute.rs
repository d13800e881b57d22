//! The recompute pass and access recording on a real corpus file, with times set through a manual clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_heat::{Kind, RECOMPUTE_EVERY, Tier};
use personkit_store::clock::Clock;
use personkit_store::heat as rows;
use time::Duration;
use time::macros::datetime;

fn corpus() -> (tempfile::TempDir, personkit_store::Connection) {
    let dir = tempfile::tempdir().expect("temp dir");
    let conn = personkit_store::db::open(&dir.path().join("corpus.db")).expect("open corpus");
    (dir, conn)
}

#[test]
fn accesses_heat_a_record_and_time_cools_it() {
    let (_dir, conn) = corpus();
    let clock = Clock::manual(datetime!(2026-11-01 09:00 UTC));
    for _ in 0..8 {
        personkit_heat::record_access(&conn, "thread", "t-hot", clock.now()).expect("access");
    }
    personkit_heat::record_access(&conn, "thread", "t-once", clock.now()).expect("access");
    for _ in 0..3 {
        personkit_heat::record_access(&conn, "entity", "e-1", clock.now()).expect("access");
    }
    let hot = rows::get(&conn, Kind::Thread, "t-hot")
        .expect("read")
        .expect("row");
    assert_eq!(hot.accesses, 8);
    assert_eq!(hot.tier, Tier::Hot, "8 fresh accesses: 0.8");
    assert!((hot.heat - 0.8).abs() < 1e-9);
    let e = rows::get(&conn, Kind::Entity, "e-1")
        .expect("read")
        .expect("row");
    assert_eq!(e.tier, Tier::Warm);
    assert!(
        rows::get(&conn, Kind::Thread, "e-1")
            .expect("read")
            .is_none(),
        "kinds are apart"
    );

    // A week later, before any recompute, the stored values are still those of the last access.
    clock.advance(Duration::hours(168));
    let before = rows::get(&conn, Kind::Thread, "t-hot")
        .expect("read")
        .expect("row");
    assert_eq!(before.tier, Tier::Hot);
    // The pass halves them (the accesses faded a little too) and moves tiers.
    assert_eq!(
        personkit_heat::recompute(&conn, clock.now()).expect("recompute"),
        3
    );
    let after = rows::get(&conn, Kind::Thread, "t-hot")
        .expect("read")
        .expect("row");
    let fade = 1.0 - 168.0 / personkit_heat::FADE_HOURS;
    assert!((after.heat - 0.4 * fade).abs() < 1e-9, "{}", after.heat);
    assert_eq!(after.tier, Tier::Warm);
    assert!((after.effective - 8.0 * fade).abs() < 1e-9);
    let once = rows::get(&conn, Kind::Thread, "t-once")
        .expect("read")
        .expect("row");
    assert_eq!(once.tier, Tier::Cold);

    // A new access counts the old ones again in full, at full recency.
    personkit_heat::record_access(&conn, "thread", "t-hot", clock.now()).expect("access");
    let again = rows::get(&conn, Kind::Thread, "t-hot")
        .expect("read")
        .expect("row");
    assert_eq!(again.accesses, 9);
    assert!(
        (again.heat - (0.8 + 0.1 * 0.5)).abs() < 1e-9,
        "0.9 past the soft cap: {}",
        again.heat
    );

    // Listings by tier, hottest first; bounded.
    let hot_list = rows::list(&conn, Some(Kind::Thread), Some(Tier::Hot), 10).expect("list");
    assert_eq!(
        hot_list.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["t-hot"]
    );
    let all = rows::list(&conn, None, None, 2).expect("list");
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].id, "t-hot");
    let by_id = rows::heat_of(
        &conn,
        Kind::Thread,
        &[
            "t-hot".to_owned(),
            "t-once".to_owned(),
            "t-never".to_owned(),
        ],
    )
    .expect("heat of");
    assert_eq!(by_id.len(), 2, "a record never used has no row");
    assert!(by_id["t-hot"] > by_id["t-once"]);
}

#[test]
fn an_access_out_of_order_never_moves_the_last_access_back() {
    let (_dir, conn) = corpus();
    let t = datetime!(2026-11-01 09:00 UTC);
    personkit_heat::record_access(&conn, "thread", "t", t).expect("access");
    personkit_heat::record_access(&conn, "thread", "t", t - Duration::days(30)).expect("access");
    let r = rows::get(&conn, Kind::Thread, "t")
        .expect("read")
        .expect("row");
    assert_eq!(r.last_access, "2026-11-01T09:00:00.000Z");
    assert_eq!(r.accesses, 2);
    assert!((r.heat - 0.2).abs() < 1e-9);
}

#[test]
fn an_unknown_kind_is_refused() {
    let (_dir, conn) = corpus();
    let e = personkit_heat::record_access(&conn, "note", "x", datetime!(2026-11-01 09:00 UTC))
        .expect_err("unknown kind");
    assert!(e.to_string().contains("note"));
    assert!(rows::list(&conn, None, None, 10).expect("list").is_empty());
}

/// The heat job's step runs at once on a corpus never computed, then again only six hours after the last run.
#[test]
fn the_job_runs_every_six_hours() {
    let (_dir, conn) = corpus();
    let clock = Clock::manual(datetime!(2026-11-01 09:00 UTC));
    for _ in 0..7 {
        personkit_heat::record_access(&conn, "thread", "t", clock.now()).expect("access");
    }
    assert_eq!(
        personkit_heat::run_if_due(&conn, clock.now()).expect("run"),
        Some(1)
    );
    clock.advance(RECOMPUTE_EVERY - Duration::minutes(1));
    assert_eq!(
        personkit_heat::run_if_due(&conn, clock.now()).expect("run"),
        None
    );
    let r = rows::get(&conn, Kind::Thread, "t")
        .expect("read")
        .expect("row");
    assert_eq!(r.tier, Tier::Hot, "not recomputed yet");
    clock.advance(Duration::minutes(1));
    assert_eq!(
        personkit_heat::run_if_due(&conn, clock.now()).expect("run"),
        Some(1)
    );
    let r = rows::get(&conn, Kind::Thread, "t")
        .expect("read")
        .expect("row");
    assert_eq!(r.computed_at, "2026-11-01T15:00:00.000Z");
    assert_eq!(
        r.tier,
        Tier::Warm,
        "6 h of decay takes 0.7 below the hot line"
    );
    assert_eq!(
        rows::last_recompute(&conn).expect("read"),
        Some(datetime!(2026-11-01 15:00 UTC))
    );
}

/// More rows than one transaction of the pass holds are all computed.
#[test]
fn the_pass_covers_more_rows_than_one_batch() {
    let (_dir, conn) = corpus();
    let t = datetime!(2026-11-01 09:00 UTC);
    let ids: Vec<String> = (0..(rows::RECOMPUTE_BATCH + 7))
        .map(|i| format!("t{i}"))
        .collect();
    personkit_heat::record_thread_accesses(&conn, &ids, t).expect("accesses");
    assert_eq!(
        personkit_heat::recompute(&conn, t + Duration::days(1)).expect("recompute"),
        ids.len() as u64
    );
    let stale: i64 = rows::list(&conn, None, None, rows::MAX_LIST)
        .expect("list")
        .iter()
        .filter(|r| r.computed_at != "2026-11-02T09:00:00.000Z")
        .count() as i64;
    assert_eq!(stale, 0);
}
