-- 0016_ingest_write_path: two per-message costs of ingest taken off each insert. Append-only.

-- Which capture paths a thread holds, answered from an index. Ingest asks, once per thread and batch, whether a
-- thread holds turns of a rank other than the incoming one; with only the partial index dropped here that meant
-- reading every turn of the thread. An index led by (thread, rank) answers each rank with one probe and still
-- serves the look-up of a role's turns among the other ranks (role is in the index, so rows of another role are
-- skipped without reading them).
DROP INDEX messages_thread_source;
CREATE INDEX messages_thread_rank ON messages(thread_id, source_rank, role);

-- No trigger runs on a message insert any more. A new message's change-feed entry is written with its full-text
-- entry, by one statement per transaction from the queue of new messages (`pending::flush`), and the queue is
-- filled by the code that inserts (`pending::queue`). An insert that fires a trigger makes SQLite keep a statement
-- journal — a copy of every page the statement touches — for every message; a single-row insert without one
-- needs none. Updates, renderings and deletes still move or remove entries by trigger.
DROP TRIGGER sync_log_message_insert;
DROP TRIGGER messages_fts_insert;
