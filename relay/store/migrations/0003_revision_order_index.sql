-- 0003_revision_order_index: an index that serves both the WHERE and the ORDER BY of the revision renumbering
-- query (ingest.rs `renumber_revisions`). Without it SQLite's planner (no ANALYZE statistics) chose
-- messages_thread_captured(thread_id, captured_at) to avoid a sort, scanning every earlier message of the thread for
-- each inserted turn: ingest became quadratic in thread length (found by the ingest benchmark). Append-only.
CREATE INDEX messages_position_order ON messages(thread_id, position_key, captured_at, content_hash);
DROP INDEX messages_position;
