//! Append-only numbered migrations (`relay/store/migrations/NNNN_*.sql`), applied in order inside one transaction
//! each and tracked with `PRAGMA user_version`.
//!
//! **Architecture invariant:** a migration that has landed is never edited; schema changes add a new file here.

use rusqlite::Connection;

use crate::db::DbError;

/// One migration: its number (== the `user_version` after it), its name and its SQL.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: u32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// A migration from its number and its file's name (`migrations/<name>.sql`).
macro_rules! migration {
    ($version:literal, $name:literal) => {
        Migration {
            version: $version,
            name: $name,
            sql: include_str!(concat!("../migrations/", $name, ".sql")),
        }
    };
}

/// Every migration, in order. Versions are 1, 2, 3, ... (12 is the relay-to-relay sync's, landing separately).
pub const MIGRATIONS: &[Migration] = &[
    migration!(1, "0001_init"),
    migration!(2, "0002_search"),
    migration!(3, "0003_revision_order_index"),
    migration!(4, "0004_search_vec_log"),
    migration!(5, "0005_search_vec_log_pruning"),
    migration!(6, "0006_drop_redundant_position_index"),
    migration!(7, "0007_agent_tokens"),
    migration!(8, "0008_capture_reports"),
    migration!(9, "0009_signin_and_forget"),
    migration!(10, "0010_signal_layer_view"),
    migration!(11, "0011_turn_identity"),
    migration!(12, "0012_sync"),
    migration!(13, "0013_harvest"),
    migration!(14, "0014_fts_by_statement"),
    migration!(15, "0015_sync_log_by_pk"),
    migration!(16, "0016_ingest_write_path"),
    migration!(17, "0017_narrower_indexes"),
    migration!(18, "0018_checks_without_lists"),
    migration!(19, "0019_dashboard_sessions"),
    migration!(20, "0020_harvest_guard"),
    migration!(21, "0021_knowledge"),
    migration!(22, "0022_memory"),
    migration!(23, "0023_memory_sync"),
    migration!(24, "0024_events"),
    migration!(25, "0025_heat"),
    migration!(26, "0026_graph"),
    migration!(27, "0027_entity_proposals"),
    migration!(28, "0028_graph_sync"),
];

/// The schema version this build writes.
pub fn latest_version() -> u32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// The schema version of an open corpus.
pub fn current_version(conn: &Connection) -> Result<u32, DbError> {
    Ok(conn.query_row("PRAGMA user_version", [], |r| r.get(0))?)
}

/// Apply every migration the corpus lacks; returns the resulting version. Refuses a corpus written by a newer
/// personkit.
pub fn apply(conn: &mut Connection) -> Result<u32, DbError> {
    let mut version = current_version(conn)?;
    let latest = latest_version();
    if version > latest {
        return Err(DbError::TooNew {
            found: version,
            supported: latest,
        });
    }
    let start = version;
    for m in MIGRATIONS.iter().filter(|m| m.version > start) {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // Another process may have migrated between our read and the lock.
        let now: u32 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if now >= m.version {
            tx.commit()?;
            version = now;
            continue;
        }
        tx.execute_batch(m.sql)
            .map_err(|source| DbError::Migration {
                name: m.name,
                source,
            })?;
        // A migration may edit a table's SQL text in place (`writable_schema`, 0018), which connections notice only
        // when the schema version changes; a migration of statements changes it anyway, one more step is harmless.
        let schema: i64 = tx.query_row("PRAGMA schema_version", [], |r| r.get(0))?;
        tx.pragma_update(None, "schema_version", schema + 1)?;
        tx.pragma_update(None, "user_version", m.version)?;
        tx.commit()?;
        tracing::info!(migration = m.name, "applied migration");
        version = m.version;
    }
    Ok(version)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use rusqlite::params;

    /// A corpus at schema `version`, made the way `apply` made it then.
    fn corpus_at(path: &std::path::Path, version: u32) -> Connection {
        crate::db::register_sqlite_vec();
        let conn = Connection::open(path).unwrap();
        crate::db::configure(&conn).unwrap();
        for m in MIGRATIONS.iter().filter(|m| m.version <= version) {
            conn.execute_batch(m.sql).unwrap();
            conn.pragma_update(None, "user_version", m.version).unwrap();
        }
        conn
    }

    const THREAD: &str = "0b7f3c1e-2d4a-5b6c-8d9e-0f1a2b3c4d5e";
    const AT: &str = "2026-11-22T09:00:00.000Z";

    /// The thread the older-corpus tests write into, as any schema since 1 holds it.
    fn add_thread(conn: &Connection) {
        conn.execute(
            "INSERT INTO threads(id, surface, conversation_id, first_seen_at, last_seen_at, origin_device, origin_seq)
             VALUES (?1, 'browser-ext:chatgpt', 'c1', ?2, ?2, 'dev', 1)",
            params![THREAD, AT],
        )
        .unwrap();
    }

    const SIGNAL_ROWS: &str =
        "SELECT id, kind, source_surface, thread_id, message_id, role, observed_at, attrs,
        origin_device FROM persona_observations ORDER BY id";

    fn signal_rows(conn: &Connection) -> Vec<Vec<String>> {
        conn.prepare(SIGNAL_ROWS)
            .unwrap()
            .query_map([], |r| (0..9).map(|i| r.get::<_, String>(i)).collect())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// 0010 turns the signal-layer table into a view of the messages: a corpus written at schema 9 (rows as its
    /// ingest wrote them) reads the same signal rows afterwards, and forgetting still takes them.
    #[test]
    fn the_signal_layer_of_an_older_corpus_reads_the_same_through_the_view() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let conn = corpus_at(&path, 9);
        let (t, at) = (THREAD, AT);
        add_thread(&conn);
        let turns = [
            ("m-1", "user", "how do I fence code? \u{e9}t\u{e9}"),
            ("m-2", "assistant", "like this:\n```rust\nfn main() {}\n```"),
        ];
        for (i, (id, role, content)) in turns.iter().enumerate() {
            let seq = 2 + 2 * i as i64;
            conn.execute(
                "INSERT INTO messages(id, thread_id, role, content, content_hash, ordinal, position_key,
                    captured_at, received_at, origin_device, origin_seq)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'o:' || ?6, ?7, ?7, 'dev', ?8)",
                params![id, t, role, content, format!("h{i}"), i as i64, at, seq],
            )
            .unwrap();
            let attrs = format!(
                r#"{{"chars":{},"has_code":{}}}"#,
                content.chars().count(),
                content.contains("```")
            );
            conn.execute(
                "INSERT INTO persona_observations(id, kind, source_surface, thread_id, message_id, role,
                    observed_at, attrs, origin_device, origin_seq)
                 VALUES (?1, 'thread_turn', 'browser-ext:chatgpt', ?2, ?1, ?3, ?4, ?5, 'dev', ?6)",
                params![id, t, role, at, attrs, seq + 1],
            )
            .unwrap();
        }
        let before = signal_rows(&conn);
        assert_eq!(before.len(), 2);
        drop(conn);

        let mut conn = crate::db::open(&path).unwrap();
        assert_eq!(current_version(&conn).unwrap(), latest_version());
        assert_eq!(signal_rows(&conn), before);
        let kind: String = conn
            .query_row(
                "SELECT type FROM sqlite_schema WHERE name = 'persona_observations'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(kind, "view");
        let origin_index: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'messages_origin'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(origin_index, 0);

        // Forgetting the thread takes its signal rows with its messages.
        let sel = crate::forget::Selection::thread(t);
        let done = crate::forget::forget(&mut conn, &sel, time::OffsetDateTime::now_utc()).unwrap();
        assert_eq!(done.messages, 2);
        assert!(signal_rows(&conn).is_empty());
    }

    /// 0014 and 0015: a corpus written at schema 13 keeps its change feed (sequence numbers, order, and a number
    /// once handed out never handed out again) and its full-text index, and both keep working for new rows.
    #[test]
    fn the_feed_and_the_index_of_a_schema_13_corpus_carry_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let conn = corpus_at(&path, 13);
        let (t, at) = (THREAD, AT);
        add_thread(&conn);
        for (i, content) in ["alpha question", "beta answer", "gamma aside"]
            .iter()
            .enumerate()
        {
            conn.execute(
                "INSERT INTO messages(id, thread_id, role, content, content_hash, ordinal, position_key,
                    captured_at, received_at, origin_device, origin_seq)
                 VALUES (?1, ?2, 'user', ?3, ?4, ?5, 'o:' || ?5, ?6, ?6, 'dev', ?5)",
                params![format!("m-{i}"), t, content, format!("h{i}"), i as i64, at],
            )
            .unwrap();
        }
        // The first message changes (moves to the end of the feed), then the newest entry's message is forgotten:
        // the highest sequence number handed out (5) is no longer listed.
        conn.execute("UPDATE messages SET ordinal = 7 WHERE id = 'm-0'", [])
            .unwrap();
        conn.execute("DELETE FROM messages WHERE id = 'm-0'", [])
            .unwrap();
        let feed = |c: &Connection, sql: &str| -> Vec<(i64, String)> {
            c.prepare(sql)
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        let before = feed(
            &conn,
            "SELECT seq, kind || ':' || id FROM sync_log ORDER BY seq",
        );
        assert_eq!(
            before,
            [
                (1, format!("t:{t}")),
                (3, "m:m-1".into()),
                (4, "m:m-2".into())
            ]
        );
        drop(conn);

        let mut conn = crate::db::open(&path).unwrap();
        assert_eq!(current_version(&conn).unwrap(), latest_version());
        let after = feed(
            &conn,
            "SELECT s.seq, s.kind || ':' || coalesce(s.id, m.id) FROM sync_log s
             LEFT JOIN messages m ON m.pk = s.pk ORDER BY s.seq",
        );
        assert_eq!(after, before);
        // The feed's entries still name their rows: the thread by id, the messages by row number.
        let ids: Vec<String> = crate::sync::feed(&conn, 0, 100)
            .unwrap()
            .into_iter()
            .filter_map(|(_, change)| match change {
                crate::sync::Change::Thread(id) => Some(id),
                crate::sync::Change::Message(pk) => {
                    crate::sync::message_row(&conn, pk).unwrap().map(|m| m.id)
                }
                _ => None,
            })
            .collect();
        assert_eq!(ids, [t, "m-1", "m-2"]);

        // A new message takes a number after every one handed out, and is searchable once committed.
        let tx = conn.transaction().unwrap();
        tx.execute(
            "INSERT INTO messages(id, thread_id, role, content, content_hash, ordinal, position_key,
                captured_at, received_at, origin_device, origin_seq)
             VALUES ('m-3', ?1, 'user', 'delta remark', 'h3', 3, 'o:3', ?2, ?2, 'dev', 9)",
            params![t, at],
        )
        .unwrap();
        crate::pending::queue(&tx, tx.last_insert_rowid()).unwrap();
        crate::pending::commit(tx).unwrap();
        let newest: i64 = conn
            .query_row("SELECT max(seq) FROM sync_log", [], |r| r.get(0))
            .unwrap();
        assert_eq!(newest, 6);
        let hits = |c: &Connection, q: &str| -> i64 {
            c.query_row(
                "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?1",
                [q],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(hits(&conn, "beta OR delta"), 2);
        assert_eq!(hits(&conn, "alpha"), 0);
        conn.execute(
            "INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)",
            [],
        )
        .unwrap();
    }

    /// The ranks of a schema-16 corpus's messages become bits on their threads, and a thread that then takes a
    /// turn of a new rank, or a turn that is upgraded to one, gains the bit.
    #[test]
    fn a_schema_16_corpus_gets_the_narrower_indexes_and_its_capture_paths_move_to_its_threads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let conn = corpus_at(&path, 16);
        add_thread(&conn);
        let other = "1c8e4d2f-3e5b-4c7d-9eaf-1a2b3c4d5e6f";
        conn.execute(
            "INSERT INTO threads(id, surface, conversation_id, first_seen_at, last_seen_at, origin_device, origin_seq)
             VALUES (?1, 'import:chatgpt', 'c2', ?2, ?2, 'dev', 2)",
            params![other, AT],
        )
        .unwrap();
        let insert = |conn: &Connection, i: i64, thread: &str, rank: i64| {
            let source = ["dom", "network", "export"][rank as usize];
            conn.execute(
                "INSERT INTO messages(id, thread_id, role, content, content_hash, ordinal, position_key,
                    captured_at, received_at, origin_device, origin_seq, source_path, source_rank)
                 VALUES (?1, ?2, 'user', 'words', ?3, ?4, 'o:' || ?4, ?5, ?5, 'dev', ?4, ?6, ?7)",
                params![format!("m-{i}"), thread, format!("h{i}"), i, AT, source, rank],
            )
            .unwrap();
        };
        insert(&conn, 1, THREAD, 0);
        insert(&conn, 2, THREAD, 1);
        insert(&conn, 3, other, 2);
        drop(conn);

        let conn = crate::db::open(&path).unwrap();
        let bits = |conn: &Connection, t: &str| -> i64 {
            conn.query_row("SELECT source_ranks FROM threads WHERE id = ?1", [t], |r| {
                r.get(0)
            })
            .unwrap()
        };
        assert_eq!((bits(&conn, THREAD), bits(&conn, other)), (0b011, 0b100));
        let index = |name: &str| -> i64 {
            conn.query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = ?1",
                [name],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(
            (
                index("messages_thread_rank"),
                index("messages_position_order"),
                index("messages_position"),
                index("messages_thread_source"),
                index("messages_thread_captured"),
                index("messages_captured")
            ),
            (0, 0, 1, 1, 0, 1)
        );

        // A turn of a new rank, written the relay's way (queued, flushed), adds its bit.
        let tx = conn.unchecked_transaction().unwrap();
        insert(&tx, 4, other, 0);
        crate::pending::queue(&tx, tx.last_insert_rowid()).unwrap();
        crate::pending::commit(tx).unwrap();
        assert_eq!(bits(&conn, other), 0b101);
        // A stored turn that takes a rendering of another rank adds that rank's bit (trigger).
        conn.execute(
            "UPDATE messages SET source_path = 'export', source_rank = 2 WHERE id = 'm-2'",
            [],
        )
        .unwrap();
        assert_eq!(bits(&conn, THREAD), 0b111);
    }

    /// Whether inserting a row into `table` builds a throwaway b-tree (SQLite's code for a CHECK's `IN` list of
    /// more than two values) on this connection.
    fn insert_builds_a_btree(conn: &Connection, table: &str) -> bool {
        let sql = match table {
            "messages" => {
                "EXPLAIN INSERT INTO messages(id, thread_id, role, content, content_hash, captured_at, received_at,
                    origin_device, origin_seq, source_path) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8, ?9)"
            }
            _ => "EXPLAIN INSERT INTO sync_log(kind, pk) VALUES (?1, ?2)",
        };
        let mut stmt = conn.prepare(sql).unwrap();
        let unbound = std::iter::repeat_n(rusqlite::types::Null, stmt.parameter_count());
        let ops: Vec<String> = stmt
            .query_map(rusqlite::params_from_iter(unbound), |r| r.get(1))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        ops.iter().any(|op| op == "OpenEphemeral")
    }

    /// 0018 rewrites the per-turn CHECK constraints without IN lists: a schema-17 corpus (which builds a b-tree per
    /// inserted row) no longer does — on the connection that migrated it and on one that was open beside it — and
    /// the constraints still accept and refuse the same values.
    #[test]
    fn a_schema_17_corpus_checks_its_rows_without_building_a_btree_per_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let mut conn = corpus_at(&path, 17);
        add_thread(&conn);
        assert!(insert_builds_a_btree(&conn, "messages"));
        assert!(insert_builds_a_btree(&conn, "sync_log"));
        let beside = Connection::open(&path).unwrap();
        assert!(insert_builds_a_btree(&beside, "messages"));

        apply(&mut conn).unwrap();
        // A connection notices the new schema version at its next read (an EXPLAIN reads no table).
        let _: i64 = beside
            .query_row("SELECT count(*) FROM threads", [], |r| r.get(0))
            .unwrap();
        for (name, c) in [("migrating", &conn), ("beside", &beside)] {
            assert!(!insert_builds_a_btree(c, "messages"), "{name}");
            assert!(!insert_builds_a_btree(c, "sync_log"), "{name}");
        }
        let fresh = crate::db::open(&dir.path().join("new.db")).unwrap();
        assert!(!insert_builds_a_btree(&fresh, "messages"));
        assert!(!insert_builds_a_btree(&fresh, "sync_log"));

        let insert = |i: i64, role: &str, path: &str| {
            conn.execute(
                "INSERT INTO messages(id, thread_id, role, content, content_hash, captured_at, received_at,
                    origin_device, origin_seq, source_path) VALUES (?1, ?2, ?3, 'words', ?4, ?5, ?5, 'dev', ?6, ?7)",
                params![format!("m-{i}"), THREAD, role, format!("h{i}"), AT, i, path],
            )
        };
        let roles = ["user", "assistant", "system", "tool"];
        let paths = ["dom", "network", "export", "harvest"];
        for (i, (role, path)) in roles.iter().zip(paths).enumerate() {
            insert(i as i64, role, path).unwrap();
        }
        let refused = |r: rusqlite::Result<usize>| {
            r.is_err_and(|e| e.to_string().contains("CHECK constraint failed"))
        };
        assert!(refused(insert(10, "robot", "dom")));
        assert!(refused(insert(11, "User", "dom")));
        assert!(refused(insert(12, "user", "scrape")));
        assert!(refused(insert(13, "user", "")));
        assert!(refused(beside.execute(
            "INSERT INTO messages(id, thread_id, role, content, content_hash, captured_at, received_at,
                origin_device, origin_seq) VALUES ('m-20', ?1, 'robot', 'w', 'h20', ?2, ?2, 'dev', 20)",
            params![THREAD, AT],
        )));
        for kind in ["t", "f"] {
            conn.execute("INSERT INTO sync_log(kind, id) VALUES (?1, 'x')", [kind])
                .unwrap();
        }
        conn.execute("INSERT INTO sync_log(kind, pk) VALUES ('m', 1)", [])
            .unwrap();
        assert!(refused(conn.execute(
            "INSERT INTO sync_log(kind, id) VALUES ('q', 'y')",
            []
        )));
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    }

    /// 0023 puts the memory versions of a schema-22 corpus on the change feed, after its other entries, and feeds
    /// every later version and withdrawal; the feed's CHECK takes the new kind and still builds no b-tree.
    #[test]
    fn a_schema_22_corpus_feeds_its_memory_versions() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = corpus_at(&dir.path().join("old.db"), 22);
        add_thread(&conn);
        conn.execute_batch(
            "INSERT INTO memory_versions (id, tier, created_at, body, tokens, origin_device, origin_seq)
                 VALUES ('bb', 'short', '2026-11-22T03:00:00.000Z', 'two', 1, 'dev', 2),
                        ('aa', 'short', '2026-11-21T03:00:00.000Z', 'one', 1, 'dev', 1);",
        )
        .unwrap();
        let feed = |c: &Connection| -> Vec<String> {
            c.prepare("SELECT kind || ':' || coalesce(id, pk) FROM sync_log ORDER BY seq")
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        assert_eq!(feed(&conn), vec![format!("t:{THREAD}")]);
        apply(&mut conn).unwrap();
        assert_eq!(
            feed(&conn),
            vec![format!("t:{THREAD}"), "v:aa".into(), "v:bb".into()]
        );
        assert!(!insert_builds_a_btree(&conn, "sync_log"));
        conn.execute(
            "UPDATE memory_versions SET body = '', withdrawn_at = ?1 WHERE id = 'aa'",
            [AT],
        )
        .unwrap();
        // A change that is not a withdrawal does not move the entry.
        conn.execute("UPDATE memory_versions SET tokens = 5 WHERE id = 'bb'", [])
            .unwrap();
        assert_eq!(
            feed(&conn),
            vec![format!("t:{THREAD}"), "v:bb".into(), "v:aa".into()]
        );
        let refused = conn
            .execute("INSERT INTO sync_log(kind, id) VALUES ('q', 'y')", [])
            .is_err_and(|e| e.to_string().contains("CHECK constraint failed"));
        assert!(refused);
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    }

    #[test]
    fn versions_are_dense_and_ordered() {
        for (expected, m) in (1..).zip(MIGRATIONS.iter()) {
            assert_eq!(m.version, expected, "{}", m.name);
            assert!(
                m.name.starts_with(&format!("{:04}_", m.version)),
                "{}",
                m.name
            );
        }
    }
}
