-- 0015_sync_log_by_pk: the change feed names a message by its row number instead of its id. Append-only.
--
-- Why: every new message appends a feed entry, and entries were unique by (kind, id) — a random 36-character id,
-- so each insert landed on a cold page of that index (ingest ran at 0.92x of its speed with row numbers). Row
-- numbers grow with every insert, so the entry's index only ever appends. A message row keeps its number for life,
-- and deleting it deletes its entry, so an entry always names the message it was written for. Threads and
-- tombstones keep their ids. Sequence numbers are kept (peers' cursors stay valid) and never reused.

CREATE TABLE sync_log_next (
    seq  INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL CHECK (kind IN ('t', 'm', 'f')),
    -- Thread id ('t') or forgotten message id ('f').
    id   TEXT,
    -- Message row number ('m').
    pk   INTEGER,
    CHECK ((kind = 'm' AND pk IS NOT NULL AND id IS NULL) OR (kind != 'm' AND id IS NOT NULL AND pk IS NULL))
) STRICT;

INSERT INTO sync_log_next (seq, kind, id, pk)
    SELECT s.seq, s.kind, NULL, m.pk FROM sync_log s JOIN messages m ON m.id = s.id WHERE s.kind = 'm'
    UNION ALL
    SELECT seq, kind, id, NULL FROM sync_log WHERE kind != 'm';

-- The next sequence number continues after the highest ever handed out, not after the highest still listed.
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'sync_log_next', 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'sync_log_next');
UPDATE sqlite_sequence
    SET seq = max(seq, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'sync_log'), 0))
    WHERE name = 'sync_log_next';

DROP TRIGGER sync_log_thread_insert;
DROP TRIGGER sync_log_thread_update;
DROP TRIGGER sync_log_thread_delete;
DROP TRIGGER sync_log_message_insert;
DROP TRIGGER sync_log_message_update;
DROP TRIGGER sync_log_message_delete;
DROP TRIGGER sync_log_rendering_insert;
DROP TRIGGER sync_log_tombstone_insert;
DROP TABLE sync_log;
ALTER TABLE sync_log_next RENAME TO sync_log;

CREATE UNIQUE INDEX sync_log_row ON sync_log(kind, id) WHERE id IS NOT NULL;
CREATE UNIQUE INDEX sync_log_message ON sync_log(pk) WHERE pk IS NOT NULL;

-- Every change to a syncable row moves its entry to the end: an insert that replaces the entry on conflict.
CREATE TRIGGER sync_log_thread_insert AFTER INSERT ON threads BEGIN
    INSERT OR REPLACE INTO sync_log (kind, id) VALUES ('t', new.id);
END;
CREATE TRIGGER sync_log_thread_update AFTER UPDATE OF title, url, origin_device, origin_seq ON threads
WHEN old.title IS NOT new.title OR old.url IS NOT new.url
  OR old.origin_device IS NOT new.origin_device OR old.origin_seq IS NOT new.origin_seq BEGIN
    INSERT OR REPLACE INTO sync_log (kind, id) VALUES ('t', new.id);
END;
CREATE TRIGGER sync_log_thread_delete AFTER DELETE ON threads BEGIN
    DELETE FROM sync_log WHERE kind = 't' AND id = old.id;
END;
CREATE TRIGGER sync_log_message_insert AFTER INSERT ON messages BEGIN
    INSERT OR REPLACE INTO sync_log (kind, pk) VALUES ('m', new.pk);
END;
CREATE TRIGGER sync_log_message_update
AFTER UPDATE OF content_hash, source_rank, message_key, parent_key, ordinal, position_key, occurred_at,
    captured_at, origin_device, origin_seq ON messages
WHEN old.content_hash IS NOT new.content_hash OR old.source_rank IS NOT new.source_rank
  OR old.message_key IS NOT new.message_key OR old.parent_key IS NOT new.parent_key
  OR old.ordinal IS NOT new.ordinal OR old.position_key IS NOT new.position_key
  OR old.occurred_at IS NOT new.occurred_at OR old.captured_at IS NOT new.captured_at
  OR old.origin_device IS NOT new.origin_device OR old.origin_seq IS NOT new.origin_seq BEGIN
    INSERT OR REPLACE INTO sync_log (kind, pk) VALUES ('m', new.pk);
END;
CREATE TRIGGER sync_log_message_delete AFTER DELETE ON messages BEGIN
    DELETE FROM sync_log WHERE pk = old.pk;
END;
CREATE TRIGGER sync_log_rendering_insert AFTER INSERT ON message_renderings BEGIN
    INSERT OR REPLACE INTO sync_log (kind, pk) VALUES ('m', new.message_pk);
END;
CREATE TRIGGER sync_log_tombstone_insert AFTER INSERT ON forgotten_messages BEGIN
    INSERT OR REPLACE INTO sync_log (kind, id) VALUES ('f', new.id);
END;
