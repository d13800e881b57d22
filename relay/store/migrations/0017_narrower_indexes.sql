-- 0017_narrower_indexes: three secondary indexes of `messages` made cheaper to keep. Each index entry is a b-tree write
-- on every insert, and every page it dirties is written to the WAL again at commit. Append-only.

-- Which capture paths (ranks) a thread holds, one bit per rank (`1 << source_rank`), kept on the thread rather than
-- read from an index over every message. Bits are only ever added: a thread whose last turn of a rank was forgotten
-- keeps the bit, which costs ingest one look-up that finds nothing. Set for new messages by `pending::flush` (every
-- insert is queued there) and by the trigger below when a stored turn takes a rendering of another rank.
ALTER TABLE threads ADD COLUMN source_ranks INTEGER NOT NULL DEFAULT 0;
-- SQLite's bitwise operators share one precedence level, hence the brackets.
UPDATE threads SET source_ranks =
      (EXISTS (SELECT 1 FROM messages m WHERE m.thread_id = threads.id AND m.source_rank = 0))
    | ((EXISTS (SELECT 1 FROM messages m WHERE m.thread_id = threads.id AND m.source_rank = 1)) << 1)
    | ((EXISTS (SELECT 1 FROM messages m WHERE m.thread_id = threads.id AND m.source_rank = 2)) << 2);
CREATE TRIGGER threads_source_ranks_update AFTER UPDATE OF source_rank ON messages
    WHEN new.source_rank != old.source_rank
BEGIN
    UPDATE threads SET source_ranks = source_ranks | (1 << new.source_rank)
        WHERE id = new.thread_id AND (source_ranks & (1 << new.source_rank)) = 0;
END;

-- With the ranks on the thread, the index of every message by (thread, rank, role) is needed only to find the
-- source-form turns a DOM turn is compared with: the partial index of 0011 holds just those.
DROP INDEX messages_thread_rank;
CREATE INDEX messages_thread_source ON messages(thread_id, role) WHERE source_rank > 0;

-- The revisions at one position are found by (thread, position) and the few of them sorted in memory: the capture
-- time and the 64-character hash made every entry about twice as wide. The revision query names this index
-- (`INDEXED BY`), so the planner never prefers walking the thread by capture time instead.
DROP INDEX messages_position_order;
CREATE INDEX messages_position ON messages(thread_id, position_key);

-- Messages by capture time across the corpus, instead of within each thread. Turns arrive in capture order, so
-- new entries go at the end of one index rather than at the end of every active thread's range (where each insert
-- split pages in the middle of the index). What it served reads the same rows another way: a thread's turns come
-- from the thread's other indexes (a thread is small), a surface's recent turns from this index.
DROP INDEX messages_thread_captured;
CREATE INDEX messages_captured ON messages(captured_at);
