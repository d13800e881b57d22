//! Property test: ingest is idempotent and order-independent. Any replay, reorder or re-split of a set of batches
//! yields the same corpus as sending each turn once in order.
//!
//! Two real relays (A and B) run for the whole test. For each generated case, A receives the turns once, in order,
//! in one batch; B receives them shuffled, with random items replayed, cut into random small batches. Each case
//! uses its own surface, so the cases do not see each other. The two corpora are then compared through the CLI
//! (`corpus messages --surface <s> --json`) as a canonical dump of (id, thread, role, content_hash, is_current).
//!
//! A second property runs the same check in-process (`personkit_store::ingest::ingest_batch` on corpora made by
//! `personkit_store::db::open`), with more cases and a wider dump (revision, position, times, threads).
//!
//! Generated turns have unique contents except for deliberate exact replays, and may share a position (ordinal or
//! message key) with other turns of their thread, so revisions and `is_current` are exercised; capture times are
//! drawn from a small set so that ties happen.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_testkit as common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use personkit_shared::wire::Role;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::Value;

#[derive(Debug, Clone)]
enum Pos {
    None,
    Ordinal(u32),
    Key(u8),
}

#[derive(Debug, Clone)]
struct GenTurn {
    conv: u8,
    role: Role,
    pos: Pos,
    minute: u8,
    /// Write the capture time with a +01:00 offset instead of Z (the same instant).
    offset: bool,
}

fn gen_turn() -> impl Strategy<Value = GenTurn> {
    let role = prop_oneof![
        Just(Role::User),
        Just(Role::Assistant),
        Just(Role::System),
        Just(Role::Tool)
    ];
    let pos = prop_oneof![
        Just(Pos::None),
        (0u32..4).prop_map(Pos::Ordinal),
        (0u8..3).prop_map(Pos::Key),
    ];
    (0u8..3, role, pos, 0u8..4, any::<bool>()).prop_map(|(conv, role, pos, minute, offset)| {
        GenTurn {
            conv,
            role,
            pos,
            minute,
            offset,
        }
    })
}

struct Pair {
    _dir: tempfile::TempDir,
    a: Relay,
    a_token: String,
    b: Relay,
    b_token: String,
}

fn start_pair() -> Pair {
    let (dir, _) = temp_db();
    let a = Relay::start(&dir.path().join("a.db"), &["--rate-limit", "0"]);
    let b = Relay::start(&dir.path().join("b.db"), &["--rate-limit", "0"]);
    let a_token = a.pair_printed("prop A");
    let b_token = b.pair_printed("prop B");
    Pair {
        _dir: dir,
        a,
        a_token,
        b,
        b_token,
    }
}

static CASE: AtomicUsize = AtomicUsize::new(0);

fn items_for(surface: &str, turns: &[GenTurn]) -> Vec<Value> {
    turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let (ordinal, key) = match &t.pos {
                Pos::None => (None, None),
                Pos::Ordinal(o) => (Some(*o), None),
                Pos::Key(k) => (None, Some(format!("key-{k}"))),
            };
            turn_at(
                surface,
                &format!("conv-{}", t.conv),
                t.role,
                &format!("turn number {i} of this case"),
                ordinal,
                key.as_deref(),
                &if t.offset {
                    format!("2026-11-21T11:0{}:00+01:00", t.minute)
                } else {
                    format!("2026-11-21T10:0{}:00Z", t.minute)
                },
            )
        })
        .collect()
}

/// B's schedule: all items plus replays, shuffled, cut into batches of 1..=6; some batches sent twice.
fn schedule(n: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut rng = common::Rng::new(seed);
    let mut order: Vec<usize> = (0..n).collect();
    for _ in 0..rng.range(0, n as u64 + 1) {
        order.push(rng.range(0, n as u64) as usize);
    }
    for i in (1..order.len()).rev() {
        let j = rng.range(0, i as u64 + 1) as usize;
        order.swap(i, j);
    }
    let mut batches = Vec::new();
    let mut rest = &order[..];
    while !rest.is_empty() {
        let k = (rng.range(1, 7) as usize).min(rest.len());
        batches.push(rest[..k].to_vec());
        if rng.range(0, 4) == 0 {
            batches.push(rest[..k].to_vec());
        }
        rest = &rest[k..];
    }
    batches
}

/// 32 cases per property; failures persisted beside the test.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 32,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/ingest_props.txt",
        ))),
        ..ProptestConfig::default()
    }
}

fn stored_count(v: &Value) -> usize {
    v["stored"].as_u64().unwrap_or(0) as usize
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_replay_reorder_or_split_yields_the_same_corpus(
        turns in prop::collection::vec(gen_turn(), 1..16),
        seed in any::<u64>(),
    ) {
        thread_local! {
            static PAIR: std::cell::OnceCell<Pair> = const { std::cell::OnceCell::new() };
        }
        PAIR.with(|cell| {
            let p = cell.get_or_init(start_pair);
            let case = CASE.fetch_add(1, Ordering::SeqCst);
            let surface = format!("import:prop-{case}");
            let items = items_for(&surface, &turns);

            // A: each turn once, in order, one batch.
            let va = p.a.http.send_batch(&p.a_token, &items);
            assert!(statuses(&va).iter().all(|s| s == "stored"), "unique turns all stored in A: {va}");

            // B: replays, shuffled, split.
            let mut b_stored = 0;
            for b in schedule(items.len(), seed) {
                let chunk: Vec<Value> = b.iter().map(|&i| items[i].clone()).collect();
                let vb = p.b.http.send_batch(&p.b_token, &chunk);
                assert!(
                    statuses(&vb).iter().all(|s| s == "stored" || s == "duplicate"),
                    "no rejections for valid turns: {vb}"
                );
                b_stored += stored_count(&vb);
            }

            let dump_a = dump_surface(&p.a.db, &surface);
            let dump_b = dump_surface(&p.b.db, &surface);
            assert_eq!(&dump_a, &dump_b, "corpus differs after replay/reorder/split");

            // Every turn is there exactly once, and "stored" was answered exactly once per turn.
            let ids: BTreeSet<&str> = dump_a.iter().map(|r| r.id.as_str()).collect();
            assert_eq!(ids.len(), dump_a.len(), "a message id appears twice");
            assert_eq!(dump_a.len(), items.len(), "one row per distinct turn");
            assert_eq!(b_stored, items.len(), "`stored` answered once per distinct turn");
            // At most one current revision per position.
            let mut positions = BTreeSet::new();
            for (item, t) in items.iter().zip(&turns) {
                let row = dump_a
                    .iter()
                    .find(|r| r.content_hash == item["turn"]["content_hash"].as_str().unwrap())
                    .expect("turn present");
                if row.is_current && !matches!(t.pos, Pos::None) {
                    let pos = format!("{}|{:?}", t.conv, t.pos);
                    assert!(positions.insert(pos.clone()), "two current revisions at {pos}");
                }
            }
        });
    }
}

/// Every column of messages and threads that must not depend on arrival order (everything except `pk`,
/// `received_at`, `origin_seq`, `origin_device` and provenance).
fn db_dump(conn: &rusqlite::Connection) -> Vec<String> {
    let mut out = Vec::new();
    let mut st = conn
        .prepare(
            "SELECT id, thread_id, role, content, content_hash, message_key, ordinal, position_key, revision,
                    is_current, occurred_at, captured_at
             FROM messages ORDER BY id",
        )
        .unwrap();
    let rows = st
        .query_map([], |r| {
            let mut cols = Vec::new();
            for i in 0..12 {
                let v: rusqlite::types::Value = r.get(i)?;
                cols.push(format!("{v:?}"));
            }
            Ok(format!("message {}", cols.join(" | ")))
        })
        .unwrap();
    out.extend(rows.map(Result::unwrap));
    let mut st = conn
        .prepare(
            "SELECT id, surface, conversation_id, title, url, first_seen_at, last_seen_at FROM threads ORDER BY id",
        )
        .unwrap();
    let rows = st
        .query_map([], |r| {
            let mut cols = Vec::new();
            for i in 0..7 {
                let v: rusqlite::types::Value = r.get(i)?;
                cols.push(format!("{v:?}"));
            }
            Ok(format!("thread {}", cols.join(" | ")))
        })
        .unwrap();
    out.extend(rows.map(Result::unwrap));
    let fts: i64 = conn
        .query_row("SELECT count(*) FROM messages_fts", [], |r| r.get(0))
        .unwrap();
    let obs: i64 = conn
        .query_row("SELECT count(*) FROM persona_observations", [], |r| {
            r.get(0)
        })
        .unwrap();
    out.push(format!("fts rows {fts}, persona observations {obs}"));
    out
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn in_process_any_replay_reorder_or_split_yields_the_same_corpus(
        turns in prop::collection::vec(gen_turn(), 1..24),
        seed in any::<u64>(),
    ) {
        use personkit_store::ingest::{Origin, ingest_batch};
        let (dir, _) = temp_db();
        let mut a = personkit_store::db::open(&dir.path().join("a.db")).unwrap();
        let mut b = personkit_store::db::open(&dir.path().join("b.db")).unwrap();
        let origin = Origin { device_id: "prop-device".into() };
        let now = time::OffsetDateTime::now_utc();
        let items = items_for("import:prop", &turns);

        let ra = ingest_batch(&mut a, &origin, &items, now).unwrap();
        prop_assert_eq!(ra.stored, items.len());
        let mut b_stored = 0;
        for chunk in schedule(items.len(), seed) {
            let chunk: Vec<Value> = chunk.iter().map(|&i| items[i].clone()).collect();
            let rb = ingest_batch(&mut b, &origin, &chunk, now).unwrap();
            prop_assert_eq!(rb.rejected, 0);
            b_stored += rb.stored;
        }
        prop_assert_eq!(b_stored, items.len());
        let (da, db) = (db_dump(&a), db_dump(&b));
        prop_assert_eq!(da, db);
    }
}
