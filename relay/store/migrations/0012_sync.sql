-- 0012_sync: relay-to-relay sync (docs/sync.md). Append-only.

-- The change feed a sync peer pages through: one row per syncable row (`t` thread, `m` message, `f` tombstone),
-- holding the sequence of its latest change. A change deletes the row's entry and inserts it again, so the
-- entry moves to the end; AUTOINCREMENT never hands out a number twice, so `seq > cursor` is exactly what changed
-- since a peer's cursor. Kept in step by the triggers below, whoever writes (ingest, forget, restore, sync).
CREATE TABLE sync_log (
    seq  INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL CHECK (kind IN ('t', 'm', 'f')),
    id   TEXT NOT NULL,
    UNIQUE (kind, id)
) STRICT;

INSERT INTO sync_log (kind, id) SELECT 't', id FROM threads ORDER BY first_seen_at, id;
INSERT INTO sync_log (kind, id) SELECT 'm', id FROM messages ORDER BY pk;
INSERT INTO sync_log (kind, id) SELECT 'f', id FROM forgotten_messages ORDER BY forgotten_at, id;

CREATE TRIGGER sync_log_thread_insert AFTER INSERT ON threads BEGIN
    DELETE FROM sync_log WHERE kind = 't' AND id = new.id;
    INSERT INTO sync_log (kind, id) VALUES ('t', new.id);
END;
CREATE TRIGGER sync_log_thread_update AFTER UPDATE OF title, url, origin_device, origin_seq ON threads
WHEN old.title IS NOT new.title OR old.url IS NOT new.url
  OR old.origin_device IS NOT new.origin_device OR old.origin_seq IS NOT new.origin_seq BEGIN
    DELETE FROM sync_log WHERE kind = 't' AND id = new.id;
    INSERT INTO sync_log (kind, id) VALUES ('t', new.id);
END;
CREATE TRIGGER sync_log_thread_delete AFTER DELETE ON threads BEGIN
    DELETE FROM sync_log WHERE kind = 't' AND id = old.id;
END;
CREATE TRIGGER sync_log_message_insert AFTER INSERT ON messages BEGIN
    DELETE FROM sync_log WHERE kind = 'm' AND id = new.id;
    INSERT INTO sync_log (kind, id) VALUES ('m', new.id);
END;
CREATE TRIGGER sync_log_message_update
AFTER UPDATE OF content_hash, source_rank, message_key, parent_key, ordinal, position_key, occurred_at,
    captured_at, origin_device, origin_seq ON messages
WHEN old.content_hash IS NOT new.content_hash OR old.source_rank IS NOT new.source_rank
  OR old.message_key IS NOT new.message_key OR old.parent_key IS NOT new.parent_key
  OR old.ordinal IS NOT new.ordinal OR old.position_key IS NOT new.position_key
  OR old.occurred_at IS NOT new.occurred_at OR old.captured_at IS NOT new.captured_at
  OR old.origin_device IS NOT new.origin_device OR old.origin_seq IS NOT new.origin_seq BEGIN
    DELETE FROM sync_log WHERE kind = 'm' AND id = new.id;
    INSERT INTO sync_log (kind, id) VALUES ('m', new.id);
END;
CREATE TRIGGER sync_log_message_delete AFTER DELETE ON messages BEGIN
    DELETE FROM sync_log WHERE kind = 'm' AND id = old.id;
END;
CREATE TRIGGER sync_log_rendering_insert AFTER INSERT ON message_renderings BEGIN
    DELETE FROM sync_log WHERE kind = 'm' AND id = (SELECT id FROM messages WHERE pk = new.message_pk);
    INSERT INTO sync_log (kind, id) SELECT 'm', id FROM messages WHERE pk = new.message_pk;
END;
CREATE TRIGGER sync_log_tombstone_insert AFTER INSERT ON forgotten_messages BEGIN
    DELETE FROM sync_log WHERE kind = 'f' AND id = new.id;
    INSERT INTO sync_log (kind, id) VALUES ('f', new.id);
END;

-- One-time codes of `personkit pair --sync`, stored as sha256 of the normalized code, as pairing codes are.
CREATE TABLE sync_codes (
    code_hash  TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    used_at    TEXT
) STRICT;

-- Other relays this one syncs with, by their relay id. `url` + `token`: this relay calls the peer (pull and push)
-- with that secret (`personkit sync add`; kept in the corpus file, which is created 0600). `token_hash`: the
-- peer calls this relay with a token this relay issued (`personkit pair --sync`). Cursors are sync_log sequence
-- numbers: `pull_cursor` of the peer's log, `push_cursor` of this relay's.
CREATE TABLE sync_peers (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    url          TEXT,
    token        TEXT,
    token_hash   TEXT UNIQUE,
    pull_cursor  INTEGER NOT NULL DEFAULT 0,
    push_cursor  INTEGER NOT NULL DEFAULT 0,
    created_at   TEXT NOT NULL,
    last_sync_at TEXT,
    last_error   TEXT,
    revoked_at   TEXT
) STRICT;
