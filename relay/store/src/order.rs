//! A thread's turn order, defined once. Every reader that lists a thread's turns or steps from one turn to its
//! neighbour uses the key below: the dashboard, the read API and MCP ([`crate::read`]), export
//! ([`crate::archive`]), the embedder's previous turn ([`crate::vectors`]), the reads of hybrid search
//! ([`crate::retrieval`]: the turn after a hit, and a thread's order for turn pairs, stepped through in memory by
//! [`ThreadOrder`]) and the benchmark side table ([`crate::neighbours`]). A snapshot carries every column of the
//! key except the row number, which a restore assigns anew: only turns equal in all the rest (unnumbered, same
//! time) can change places.
//!
//! **The order:** the turns the surface numbered come first, by ordinal; then the unnumbered ones (a site that
//! numbers nothing, a transcript, a turn captured without its place), by time (`occurred_at`, else
//! `captured_at`); ties by row number, i.e. arrival. A revised turn takes the place of the turn it replaces
//! (only current messages are stepped through; export lists the other revisions under their current turn). Slot
//! names (`position_key`) are never compared: `o:10` sorts before `o:9`.
//!
//! **Why a key and not a sequence kept by ingest:** a turn can land anywhere in its thread (a numbered turn after
//! unnumbered ones, an older turn read from an export, a revision), so a stored sequence would have to renumber
//! the turns after it, a write per turn, on the path that ingest's benchmarks watch most closely. The key is
//! read from columns every message already has.
//!
//! **Cost:** no index is ordered by the key (an index on `(thread_id, ordinal)` cost ingest 1.12×, BENCHMARKS.md
//! "Turn pairs"). Every query here finds one thread's rows through the `(thread_id, position_key)` index and
//! sorts them: a look-up costs one pass over a thread, never over the corpus (plan test below).
//!
//! **Architecture invariant:** nothing else puts a thread's turns in order. SQL uses the macros here; Rust code
//! steps through the order SQL returned ([`ThreadOrder`]) and never sorts turns itself. (The CLI's diagnostic
//! views that list rows by storage or capture time say so; they do not show a thread's turns.)

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension};

use crate::db::DbError;

/// The turn-order key of the message row named `$t` (a table or alias) as SQL expressions joined by `$sep`:
/// numbered before unnumbered, ordinal, time, row number. None of them is ever NULL, so the list also compares
/// as a row value.
macro_rules! key {
    ($t:literal, $sep:literal) => {
        concat!(
            "(",
            $t,
            ".ordinal IS NULL)",
            $sep,
            "ifnull(",
            $t,
            ".ordinal, 0)",
            $sep,
            "coalesce(",
            $t,
            ".occurred_at, ",
            $t,
            ".captured_at)",
            $sep,
            $t,
            ".pk"
        )
    };
}

/// `ORDER BY` the turn order, for the message rows named `$t`.
macro_rules! order_by {
    ($t:literal) => {
        concat!("ORDER BY ", $crate::order::key!($t, ", "))
    };
}

/// A scalar subquery: column `$col` of the current message right after message `m` in `m`'s thread (NULL when
/// `m` is the last).
macro_rules! turn_after {
    ($col:literal) => {
        concat!(
            "(SELECT n.",
            $col,
            " FROM messages n ",
            "WHERE n.thread_id = m.thread_id AND n.is_current = 1 AND (",
            $crate::order::key!("n", ", "),
            ") > (",
            $crate::order::key!("m", ", "),
            ") ",
            $crate::order::order_by!("n"),
            " LIMIT 1)"
        )
    };
}

/// A scalar subquery: column `$col` of the current message right before message `m` in `m`'s thread (NULL when
/// `m` is the first).
macro_rules! turn_before {
    ($col:literal) => {
        concat!(
            "(SELECT p.",
            $col,
            " FROM messages p ",
            "WHERE p.thread_id = m.thread_id AND p.is_current = 1 AND (",
            $crate::order::key!("p", ", "),
            ") < (",
            $crate::order::key!("m", ", "),
            ") ",
            "ORDER BY ",
            $crate::order::key!("p", " DESC, "),
            " DESC LIMIT 1)"
        )
    };
}

pub(crate) use {key, order_by, turn_before};

/// The turn order as an `ORDER BY` clause over `messages` (for documentation and for callers' tests).
pub const ORDER_BY: &str = order_by!("messages");

/// The current messages of a thread, as row numbers in turn order.
const THREAD_TURNS: &str = concat!(
    "SELECT m.pk FROM messages m WHERE m.thread_id = ?1 AND m.is_current = 1 ",
    order_by!("m")
);

/// The current message right after message `?1` in its thread.
const NEXT_TURN: &str = concat!(
    "SELECT ",
    turn_after!("pk"),
    " FROM messages m WHERE m.pk = ?1"
);

/// The current message right before message `?1` in its thread.
const PREVIOUS_TURN: &str = concat!(
    "SELECT ",
    turn_before!("pk"),
    " FROM messages m WHERE m.pk = ?1"
);

/// The current messages of thread `thread_id`, as row numbers (`messages.pk`) in turn order.
pub fn thread_turns(conn: &Connection, thread_id: &str) -> Result<Vec<i64>, DbError> {
    Ok(conn
        .prepare_cached(THREAD_TURNS)?
        .query_map([thread_id], |r| r.get(0))?
        .collect::<Result<_, _>>()?)
}

/// The current message right after message `pk` in its thread; `None` when it is the last or does not exist.
pub fn next_turn(conn: &Connection, pk: i64) -> Result<Option<i64>, DbError> {
    step(conn, NEXT_TURN, pk)
}

/// The current message right before message `pk` in its thread; `None` when it is the first or does not exist.
pub fn previous_turn(conn: &Connection, pk: i64) -> Result<Option<i64>, DbError> {
    step(conn, PREVIOUS_TURN, pk)
}

fn step(conn: &Connection, sql: &str, pk: i64) -> Result<Option<i64>, DbError> {
    Ok(conn
        .prepare_cached(sql)?
        .query_row([pk], |r| r.get::<_, Option<i64>>(0))
        .optional()?
        .flatten())
}

/// A thread's current messages in turn order, as [`thread_turns`] returns them, for stepping from one to its
/// neighbours in memory (turn pairs look up both neighbours of many messages of one thread).
#[derive(Debug, Clone, Default)]
pub struct ThreadOrder {
    pks: Vec<i64>,
    at: HashMap<i64, usize>,
}

impl ThreadOrder {
    /// From row numbers already in turn order.
    pub fn new(pks: Vec<i64>) -> Self {
        let at = pks.iter().enumerate().map(|(i, pk)| (*pk, i)).collect();
        ThreadOrder { pks, at }
    }

    /// The message right after `pk` (`None` when it is the last, or not a current message of this thread).
    pub fn after(&self, pk: i64) -> Option<i64> {
        self.pks.get(self.at.get(&pk)? + 1).copied()
    }

    /// The message right before `pk` (`None` when it is the first, or not a current message of this thread).
    pub fn before(&self, pk: i64) -> Option<i64> {
        let i = self.at.get(&pk)?.checked_sub(1)?;
        self.pks.get(i).copied()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// One stored message: its content (also its name here), ordinal, capture time (seconds past 10:00),
    /// the site's time (seconds, if any), and whether it is current.
    type Row = (&'static str, Option<i64>, u32, Option<u32>, bool);

    fn at(s: u32) -> String {
        format!("2026-11-25T10:{:02}:{:02}.000Z", s / 60, s % 60)
    }

    fn corpus() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::db::open(&dir.path().join("c.db")).unwrap();
        (dir, conn)
    }

    /// Creates thread `thread`.
    fn thread(conn: &Connection, thread: &str) {
        conn.execute(
            "INSERT INTO threads(id, surface, conversation_id, first_seen_at, last_seen_at, origin_device,
                 origin_seq) VALUES (?1, 'test', ?1, ?2, ?2, 'd', 1)",
            rusqlite::params![thread, at(0)],
        )
        .unwrap();
    }

    /// Stores one message of `thread` (content `name`) and returns its pk.
    fn message(
        conn: &Connection,
        thread: &str,
        name: &str,
        (ordinal, captured, occurred, current): (Option<i64>, u32, Option<u32>, bool),
    ) -> i64 {
        conn.execute(
            "INSERT INTO messages(id, thread_id, role, content, content_hash, ordinal, position_key, is_current,
                 occurred_at, captured_at, received_at, origin_device, origin_seq)
             VALUES (?1, ?2, 'user', ?3, ?3, ?4, ?5, ?6, ?7, ?8, ?8, 'd',
                     (SELECT count(*) + 2 FROM messages))",
            rusqlite::params![
                format!("{thread}/{name}"),
                thread,
                name,
                ordinal,
                ordinal.map(|o| format!("o:{o}")),
                current,
                occurred.map(at),
                at(captured),
            ],
        )
        .unwrap();
        conn.last_insert_rowid()
    }

    /// Stores `rows` as thread `thread`, in the order given (so row numbers follow the list), and returns the pk
    /// of each content.
    fn store(conn: &Connection, thread: &str, rows: &[Row]) -> HashMap<&'static str, i64> {
        self::thread(conn, thread);
        rows.iter()
            .map(|(name, ordinal, captured, occurred, current)| {
                let pk = message(
                    conn,
                    thread,
                    name,
                    (*ordinal, *captured, *occurred, *current),
                );
                (*name, pk)
            })
            .collect()
    }

    /// Every thread shape, with the order a reader must show its current turns in (written out by hand).
    fn shapes() -> Vec<(&'static str, Vec<Row>, Vec<&'static str>)> {
        vec![
            (
                // Stored out of order; 10 comes after 9 (numbers, not the text of slot names).
                "numbered",
                vec![
                    ("c", Some(2), 1, None, true),
                    ("a", Some(0), 3, None, true),
                    ("b", Some(1), 2, None, true),
                    ("ten", Some(10), 0, None, true),
                    ("nine", Some(9), 4, None, true),
                ],
                vec!["a", "b", "c", "nine", "ten"],
            ),
            (
                // By time, the site's time first; stored out of time order.
                "unnumbered",
                vec![
                    ("late", None, 50, None, true),
                    ("early", None, 10, None, true),
                    ("mid", None, 30, None, true),
                    ("site time", None, 90, Some(20), true),
                ],
                vec!["early", "site time", "mid", "late"],
            ),
            (
                // Numbered turns first, whatever their times; then the unnumbered ones by time.
                "mixed",
                vec![
                    ("u late", None, 1, None, true),
                    ("n1", Some(1), 5, None, true),
                    ("u early", None, 0, None, true),
                    ("n0", Some(0), 6, None, true),
                ],
                vec!["n0", "n1", "u early", "u late"],
            ),
            (
                // A later revision takes its turn's place; the replaced text is not a turn.
                "revised",
                vec![
                    ("question", Some(0), 0, None, true),
                    ("answer v1", Some(1), 1, None, false),
                    ("follow-up", Some(2), 2, None, true),
                    ("answer v2", Some(1), 3, None, true),
                ],
                vec!["question", "answer v2", "follow-up"],
            ),
            (
                // The shown branch is current; the other branch's turns (same ordinals) are not.
                "branched",
                vec![
                    ("root", Some(0), 0, None, true),
                    ("left", Some(1), 1, None, false),
                    ("left child", Some(2), 2, None, false),
                    ("right", Some(1), 3, None, true),
                    ("right child", Some(2), 4, None, true),
                ],
                vec!["root", "right", "right child"],
            ),
            (
                // Equal ordinals fall to time, equal times to arrival.
                "equal timestamps",
                vec![
                    ("p", None, 1, None, true),
                    ("q", None, 1, None, true),
                    ("r", None, 0, None, true),
                    ("o3 late", Some(3), 1, None, true),
                    ("o3 early", Some(3), 0, None, true),
                    ("o3 late too", Some(3), 1, None, true),
                ],
                vec!["o3 early", "o3 late", "o3 late too", "r", "p", "q"],
            ),
        ]
    }

    /// The order SQL lists a thread in, the turn after and the turn before as SQL steps them, and [`ThreadOrder`]
    /// stepping in memory all agree, on every thread shape, with the order written out by hand.
    #[test]
    fn listing_and_stepping_agree_on_every_thread_shape() {
        let (_dir, conn) = corpus();
        for (shape, rows, want) in shapes() {
            let pks = store(&conn, shape, &rows);
            let want: Vec<i64> = want.iter().map(|c| pks[c]).collect();
            let name =
                |pk: Option<i64>| pk.map(|pk| *pks.iter().find(|(_, p)| **p == pk).unwrap().0);
            let listed = thread_turns(&conn, shape).unwrap();
            assert_eq!(listed, want, "{shape}: listed");
            let by_const: Vec<i64> = conn
                .prepare(&format!(
                    "SELECT pk FROM messages WHERE thread_id = ?1 AND is_current = 1 {ORDER_BY}"
                ))
                .unwrap()
                .query_map([shape], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(by_const, want, "{shape}: ORDER_BY");
            let order = ThreadOrder::new(listed);
            for (i, pk) in want.iter().enumerate() {
                let before = i.checked_sub(1).map(|i| want[i]);
                let after = want.get(i + 1).copied();
                let turn = name(Some(*pk));
                assert_eq!(
                    name(previous_turn(&conn, *pk).unwrap()),
                    name(before),
                    "{shape}: SQL before {turn:?}"
                );
                assert_eq!(
                    name(next_turn(&conn, *pk).unwrap()),
                    name(after),
                    "{shape}: SQL after {turn:?}"
                );
                assert_eq!(
                    name(order.before(*pk)),
                    name(before),
                    "{shape}: memory before {turn:?}"
                );
                assert_eq!(
                    name(order.after(*pk)),
                    name(after),
                    "{shape}: memory after {turn:?}"
                );
            }
        }
        assert_eq!(
            next_turn(&conn, 1_000_000).unwrap(),
            None,
            "no such message"
        );
        assert_eq!(
            ThreadOrder::new(vec![1, 2]).after(3),
            None,
            "not a turn of this thread"
        );
    }

    /// SQLite's plan for `sql`, its steps joined by ` | `.
    fn plan(conn: &Connection, sql: &str, arg: impl rusqlite::ToSql) -> String {
        let steps: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map([arg], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        steps.join(" | ")
    }

    /// Listing a thread and stepping from a turn read that one thread's rows through an index, never the table:
    /// they run per search hit and per embedded message.
    #[test]
    fn every_turn_order_query_reads_one_thread_by_index() {
        let (_dir, conn) = corpus();
        for (what, sql, arg) in [
            (
                "list",
                THREAD_TURNS,
                rusqlite::types::Value::Text("t".into()),
            ),
            ("next", NEXT_TURN, rusqlite::types::Value::Integer(1)),
            (
                "previous",
                PREVIOUS_TURN,
                rusqlite::types::Value::Integer(1),
            ),
        ] {
            let plan = plan(&conn, sql, arg);
            assert!(
                plan.contains("INDEX messages_position (thread_id=?)"),
                "{what}: {plan}"
            );
            assert!(!plan.contains("SCAN"), "{what}: {plan}");
        }
    }

    /// A generated thread: per message its ordinal, capture time, the site's time and whether it is current, from
    /// small ranges so that equal ordinals and equal times are common.
    type Generated = Vec<(Option<i64>, u32, Option<u32>, bool)>;

    fn generated() -> impl Strategy<Value = Generated> {
        proptest::collection::vec(
            (
                proptest::option::of(0i64..4),
                0u32..4,
                proptest::option::of(0u32..4),
                proptest::bool::weighted(0.8),
            ),
            0..12,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// On any thread, listing and stepping (in SQL and in memory) follow the order as this test spells it out
        /// in Rust: numbered before unnumbered, then ordinal, then time (the site's, else the capture's), then
        /// arrival; only current messages.
        #[test]
        fn any_thread_follows_the_order(rows in generated()) {
            // One corpus for every case, a new thread per case (opening a corpus costs more than a case).
            SHARED.with(|(_dir, conn)| check_generated(conn, &rows))?;
        }
    }

    thread_local! {
        static SHARED: (tempfile::TempDir, Connection) = corpus();
        static CASES: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }

    fn check_generated(conn: &Connection, rows: &Generated) -> Result<(), TestCaseError> {
        let case = CASES.with(|c| {
            c.set(c.get() + 1);
            c.get()
        });
        let t = format!("t{case}");
        let t = t.as_str();
        thread(conn, t);
        let mut stored: Vec<(bool, i64, String, i64)> = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            let pk = message(conn, t, &format!("m{i}"), *row);
            let (ordinal, captured, occurred, current) = *row;
            if current {
                stored.push((
                    ordinal.is_none(),
                    ordinal.unwrap_or(0),
                    at(occurred.unwrap_or(captured)),
                    pk,
                ));
            }
        }
        stored.sort();
        let want: Vec<i64> = stored.iter().map(|k| k.3).collect();
        let listed = thread_turns(conn, t).unwrap();
        prop_assert_eq!(&listed, &want);
        let order = ThreadOrder::new(listed);
        for (i, pk) in want.iter().enumerate() {
            let before = i.checked_sub(1).map(|i| want[i]);
            let after = want.get(i + 1).copied();
            prop_assert_eq!(previous_turn(conn, *pk).unwrap(), before);
            prop_assert_eq!(next_turn(conn, *pk).unwrap(), after);
            prop_assert_eq!(order.before(*pk), before);
            prop_assert_eq!(order.after(*pk), after);
        }
        Ok(())
    }
}
