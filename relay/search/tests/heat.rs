//! Heat in ranking, on a real SQLite corpus: after fusion a result's score is multiplied by `1 + 0.1 · heat` of
//! its thread, so equal scores are ordered by heat and a hot result never passes one that scored more than 10 %
//! above it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use personkit_search::{self as search, Indexes, Query};
use personkit_shared::wire::{ClientInfo, Role, build_observation};
use personkit_store::ingest::{Origin, ingest_observations};
use time::macros::datetime;

fn corpus(turns: &[(String, String)]) -> (tempfile::TempDir, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = personkit_store::db::open(&dir.path().join("corpus.db")).unwrap();
    let client = ClientInfo {
        app_version: "test".into(),
        device_id: "test-device".into(),
    };
    let obs: Vec<_> = turns
        .iter()
        .map(|(conv, text)| {
            build_observation(
                "browser-ext:claude",
                conv,
                Role::User,
                text,
                Some(0),
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
    (dir, conn)
}

fn ask(conn: &rusqlite::Connection, text: &str, heat: bool) -> Vec<(String, f64)> {
    let mut q = Query::new(text);
    q.k = 100;
    q.heat = heat;
    search::query(conn, &Indexes::default(), None, &q)
        .unwrap()
        .hits
        .into_iter()
        .map(|h| (h.row.thread_id.unwrap(), h.score))
        .collect()
}

fn use_thread(conn: &rusqlite::Connection, thread: &str, times: usize) {
    for _ in 0..times {
        personkit_heat::record_access(conn, "thread", thread, datetime!(2026-11-01 09:00 UTC))
            .unwrap();
    }
}

#[test]
fn equal_scores_are_ordered_by_heat() {
    let text = "how do I tune the postgres autovacuum thresholds";
    let (_dir, conn) = corpus(&[("a".into(), text.into()), ("b".into(), text.into())]);
    let cold = ask(&conn, "autovacuum thresholds", false);
    assert_eq!(cold.len(), 2);
    assert_eq!(cold[0].1, cold[1].1, "the same text scores the same");
    let (first, second) = (cold[0].0.clone(), cold[1].0.clone());
    // Without heat the tie breaks on the key; the second one used a little is ahead.
    use_thread(&conn, &second, 1);
    let warm = ask(&conn, "autovacuum thresholds", true);
    assert_eq!(warm[0].0, second);
    assert!((warm[0].1 - cold[0].1 * 1.01).abs() < 1e-12, "{warm:?}");
    // Used more, the first one is ahead again.
    use_thread(&conn, &first, 5);
    let again = ask(&conn, "autovacuum thresholds", true);
    assert_eq!(again[0].0, first);
    // Off, heat changes nothing.
    assert_eq!(ask(&conn, "autovacuum thresholds", false), cold);
}

#[test]
fn a_hot_result_never_passes_one_scoring_more_than_ten_percent_above_it() {
    // Threads whose one turn says "lentil" more or less often among other words: a spread of scores, some within
    // 10 % of each other and some far apart.
    let filler = [
        "soup", "stew", "salad", "curry", "broth", "dal", "bread", "rice",
    ];
    let turns: Vec<(String, String)> = (0..16)
        .map(|i| {
            let mut words = vec!["lentil"; 1 + i % 4];
            words.extend(filler.iter().take(1 + (i * 3) % 8));
            (format!("c{i}"), words.join(" "))
        })
        .collect();
    let (_dir, conn) = corpus(&turns);
    let base = ask(&conn, "lentil", false);
    assert_eq!(base.len(), 16);
    // The lower half as hot as heat goes (12 fresh uses: 1.0), the upper half never used.
    for (thread, _) in &base[8..] {
        use_thread(&conn, thread, 12);
    }
    let heated = ask(&conn, "lentil", true);
    let base_of: HashMap<&str, f64> = base.iter().map(|(t, s)| (t.as_str(), *s)).collect();
    let place: HashMap<&str, usize> = heated
        .iter()
        .enumerate()
        .map(|(i, (t, _))| (t.as_str(), i))
        .collect();
    let mut passed = 0;
    for (a, sa) in &base {
        for (b, sb) in &base {
            if *sa > sb * 1.1 {
                assert!(
                    place[a.as_str()] < place[b.as_str()],
                    "{b} (hot, {sb}) passed {a} ({sa}), which scored more than 10 % above it"
                );
            }
            if sa > sb && place[a.as_str()] > place[b.as_str()] {
                passed += 1;
            }
        }
    }
    assert!(passed > 0, "heat lifted no result past a close one");
    for (t, s) in &heated {
        let b = base_of[t.as_str()];
        assert!(*s >= b && *s <= b * 1.1 + 1e-12, "{t}: {b} became {s}");
    }
}
