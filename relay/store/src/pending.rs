//! What a new message adds to the corpus besides its row — its full-text entry, its change-feed entry and its
//! capture path's bit on its thread (`threads.source_ranks`, migration 0017) — written for a whole transaction at
//! once. The code that inserts a message queues its row number
//! ([`queue`], into `messages_fts_pending`) and [`flush`] handles the queue in two statements just before the
//! transaction commits: FTS5 then writes one segment per transaction instead of one per message (it flushes its
//! pending terms whenever a statement-journaled statement starts after it was written to), the feed takes one
//! statement, and the insert itself fires no trigger, so SQLite keeps no statement journal for it (migration
//! 0016). Updates and deletes of messages still go through triggers; a queued message deleted before the flush
//! leaves no trace in either.
//!
//! **Architecture invariant:** every insert into `messages` is followed by [`queue`] in the same transaction, and
//! every such transaction ends with [`commit`] (or calls [`flush`] before its own commit), so a committed message
//! is searchable and in the feed. [`crate::db::open`] runs [`repair`] for rows another tool added.

use rusqlite::{Connection, Transaction};

/// Queues the message at row `pk`, just inserted, for [`flush`].
pub fn queue(conn: &Connection, pk: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT OR IGNORE INTO messages_fts_pending (pk) VALUES (?1)")?
        .execute([pk])?;
    Ok(())
}

/// Gives every queued message its change-feed entry and its full-text entry (with its current content), marks its
/// capture path on its thread, then empties the queue; returns how many messages it handled.
pub fn flush(conn: &Connection) -> rusqlite::Result<usize> {
    // In row order, the order the messages were written; an entry an update already wrote moves to the end.
    conn.prepare_cached(
        "INSERT OR REPLACE INTO sync_log (kind, pk) SELECT 'm', pk FROM messages_fts_pending ORDER BY pk",
    )?
    .execute([])?;
    let n = conn
        .prepare_cached(
            "INSERT INTO messages_fts(rowid, content)
             SELECT m.pk, m.content FROM messages_fts_pending p JOIN messages m ON m.pk = p.pk ORDER BY p.pk",
        )?
        .execute([])?;
    // The capture paths the new messages add to their threads; a thread that already has them is not rewritten.
    conn.prepare_cached(
        "UPDATE threads SET source_ranks = source_ranks | r.bits
         FROM (SELECT m.thread_id AS id, sum(DISTINCT 1 << m.source_rank) AS bits
               FROM messages_fts_pending p JOIN messages m ON m.pk = p.pk GROUP BY m.thread_id) AS r
         WHERE threads.id = r.id AND (threads.source_ranks | r.bits) != threads.source_ranks",
    )?
    .execute([])?;
    // No WHERE and no trigger on the queue: SQLite clears the table without visiting its rows.
    conn.prepare_cached("DELETE FROM messages_fts_pending")?
        .execute([])?;
    Ok(n)
}

/// [`flush`], then commit.
pub fn commit(tx: Transaction<'_>) -> rusqlite::Result<()> {
    flush(&tx)?;
    tx.commit()
}

/// How many messages wait for [`flush`] (0 after every committed write).
pub fn count(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT count(*) FROM messages_fts_pending", [], |r| {
        r.get(0)
    })
}

/// Indexes and lists in the feed what was committed without them: a writer that queued but did not flush, or
/// rows another SQLite tool inserted (they were never queued; found because the newest row is newer than the
/// newest indexed one). Returns how many messages it handled; two index look-ups when there is nothing to do.
pub fn repair(conn: &mut Connection) -> rusqlite::Result<usize> {
    let newest = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, Option<i64>>(0));
    let unindexed = newest("SELECT max(pk) FROM messages")?
        > newest("SELECT max(id) FROM messages_fts_docsize")?;
    if !unindexed && count(conn)? == 0 {
        return Ok(0);
    }
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    if unindexed {
        tx.execute(
            "INSERT OR IGNORE INTO messages_fts_pending (pk)
             SELECT pk FROM messages m WHERE NOT EXISTS (SELECT 1 FROM messages_fts_docsize d WHERE d.id = m.pk)",
            [],
        )?;
    }
    let n = flush(&tx)?;
    tx.commit()?;
    Ok(n)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rusqlite::params;

    const T: &str = "0b7f3c1e-2d4a-5b6c-8d9e-0f1a2b3c4d5e";

    fn corpus() -> (tempfile::TempDir, std::path::PathBuf, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let conn = crate::db::open(&path).unwrap();
        conn.execute(
            "INSERT INTO threads(id, surface, conversation_id, first_seen_at, last_seen_at, origin_device, origin_seq)
             VALUES (?1, 'browser-ext:chatgpt', 'c1', 't', 't', 'dev', 1)",
            [T],
        )
        .unwrap();
        (dir, path, conn)
    }

    /// Inserts a message and queues it, as every writer of the relay does.
    fn insert(conn: &Connection, i: i64, content: &str) {
        insert_unqueued(conn, i, content);
        queue(conn, conn.last_insert_rowid()).unwrap();
    }

    /// Inserts a message the way another SQLite tool would: the row only.
    fn insert_unqueued(conn: &Connection, i: i64, content: &str) {
        conn.execute(
            "INSERT INTO messages(id, thread_id, role, content, content_hash, ordinal, position_key, captured_at,
                received_at, origin_device, origin_seq)
             VALUES (?1, ?2, 'user', ?3, ?4, ?5, 'o:' || ?5, 't', 't', 'dev', ?5)",
            params![format!("m-{i}"), T, content, format!("h{i}"), i],
        )
        .unwrap();
    }

    fn hits(conn: &Connection, q: &str) -> i64 {
        conn.query_row(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?1",
            [q],
            |r| r.get(0),
        )
        .unwrap()
    }

    /// The message ids the change feed lists, in feed order.
    fn feed(conn: &Connection) -> Vec<String> {
        let mut st = conn
            .prepare(
                "SELECT m.id FROM sync_log s JOIN messages m ON m.pk = s.pk WHERE s.kind = 'm' ORDER BY s.seq",
            )
            .unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    fn index_is_sound(conn: &Connection) {
        conn.execute(
            "INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)",
            [],
        )
        .unwrap();
    }

    #[test]
    fn a_committed_transaction_leaves_every_message_indexed_with_its_last_content() {
        let (_d, _p, mut conn) = corpus();
        let tx = conn.transaction().unwrap();
        insert(&tx, 1, "apples and pears");
        insert(&tx, 2, "plums");
        insert(&tx, 3, "cherries");
        // Still queued: changed and deleted before the flush, never indexed in between.
        tx.execute(
            "UPDATE messages SET content = 'quinces' WHERE id = 'm-2'",
            [],
        )
        .unwrap();
        tx.execute("DELETE FROM messages WHERE id = 'm-3'", [])
            .unwrap();
        assert_eq!(count(&tx).unwrap(), 2);
        commit(tx).unwrap();
        assert_eq!(count(&conn).unwrap(), 0);
        assert_eq!(hits(&conn, "apple"), 1);
        assert_eq!(hits(&conn, "quinces"), 1);
        assert_eq!(hits(&conn, "plums OR cherries"), 0);
        index_is_sound(&conn);
        // The feed lists the two that were committed, once each, in the order they were written.
        assert_eq!(feed(&conn), ["m-1", "m-2"]);
        let orphans: i64 = conn
            .query_row(
                "SELECT count(*) FROM sync_log s WHERE s.kind = 'm' AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.pk = s.pk)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(orphans, 0);

        // Indexed messages are changed and deleted through the index's own triggers.
        conn.execute("UPDATE messages SET content = 'figs' WHERE id = 'm-1'", [])
            .unwrap();
        conn.execute("DELETE FROM messages WHERE id = 'm-2'", [])
            .unwrap();
        assert_eq!(hits(&conn, "apple OR quinces"), 0);
        assert_eq!(hits(&conn, "figs"), 1);
        index_is_sound(&conn);
    }

    #[test]
    fn opening_the_corpus_handles_rows_another_tool_added() {
        let (_d, path, mut conn) = corpus();
        let tx = conn.transaction().unwrap();
        insert(&tx, 1, "indexed the usual way");
        commit(tx).unwrap();
        insert_unqueued(&conn, 2, "added behind the relay's back");
        insert_unqueued(&conn, 3, "and another");
        // One read from the network: the thread's capture paths gain it with the repair.
        conn.execute(
            "INSERT INTO messages(id, thread_id, role, content, content_hash, captured_at, received_at,
                origin_device, origin_seq, source_path, source_rank)
             VALUES ('m-4', ?1, 'assistant', 'streamed', 'h4', 't', 't', 'dev', 4, 'network', 1)",
            [T],
        )
        .unwrap();
        let ranks = |conn: &Connection| -> i64 {
            conn.query_row("SELECT source_ranks FROM threads WHERE id = ?1", [T], |r| {
                r.get(0)
            })
            .unwrap()
        };
        assert_eq!(ranks(&conn), 0b01);
        assert_eq!(hits(&conn, "back OR another"), 0);
        drop(conn);
        let conn = crate::db::open(&path).unwrap();
        assert_eq!(hits(&conn, "back OR another OR streamed"), 3);
        assert_eq!(ranks(&conn), 0b11);
        assert_eq!(hits(&conn, "usual"), 1);
        assert_eq!(feed(&conn), ["m-1", "m-2", "m-3", "m-4"]);
        index_is_sound(&conn);
    }

    #[test]
    fn opening_the_corpus_indexes_what_a_writer_left_queued() {
        let (_d, path, conn) = corpus();
        // Queued, then a plain commit (not `pending::commit`).
        insert(&conn, 1, "left in the queue");
        assert_eq!(hits(&conn, "queue"), 0);
        assert!(feed(&conn).is_empty());
        drop(conn);
        let conn = crate::db::open(&path).unwrap();
        assert_eq!(count(&conn).unwrap(), 0);
        assert_eq!(hits(&conn, "queue"), 1);
        assert_eq!(feed(&conn), ["m-1"]);
        index_is_sound(&conn);
    }
}
