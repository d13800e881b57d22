-- 0014_fts_by_statement: new messages reach the full-text index in one statement per transaction instead of one
-- trigger insert per row. Append-only.
--
-- Why: FTS5 writes its in-memory terms to a new on-disk segment whenever a statement that needs a statement journal
-- starts inside a transaction that has already written to it (its xSavepoint flushes). A trigger-fed index therefore
-- gets one segment per message, and ingest pays for writing and then merging them: about a fifth of a batch's time.
-- Queued here and indexed by one `INSERT … SELECT` just before the commit (`crate::fts::flush`), a batch of 500
-- messages becomes one segment. The queue lives inside the same transaction, so a committed message is always in
-- the index or in the queue, and `db::open` flushes any queue a crashed or older writer left.

CREATE TABLE messages_fts_pending (
    pk INTEGER PRIMARY KEY
) STRICT;

DROP TRIGGER messages_fts_insert;
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT OR IGNORE INTO messages_fts_pending(pk) VALUES (new.pk);
END;

-- A message still queued was never indexed: deleting it only leaves the queue (an external-content FTS5 index
-- must never be told to delete what it does not hold).
DROP TRIGGER messages_fts_delete;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content)
        SELECT 'delete', old.pk, old.content
        WHERE NOT EXISTS (SELECT 1 FROM messages_fts_pending WHERE pk = old.pk);
    DELETE FROM messages_fts_pending WHERE pk = old.pk;
END;

-- A queued message is indexed with whatever content it has when the queue is flushed.
DROP TRIGGER messages_fts_update;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages
WHEN NOT EXISTS (SELECT 1 FROM messages_fts_pending WHERE pk = new.pk) BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.pk, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.pk, new.content);
END;
