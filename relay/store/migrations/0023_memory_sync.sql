-- 0023_memory_sync: memory versions travel to sync peers. Append-only.
--
-- The change feed gains a kind, 'v' (a memory version, by id). A version enters the feed when it is stored and
-- moves to the end when it is withdrawn (its body blanked when a thread it drew on is forgotten): those are the
-- only changes a version ever sees. Its sources travel with it, so they need no entries of their own.
--
-- The feed's CHECK is edited in place as 0018 did (SQLite's documented procedure for changing a constraint
-- without rebuilding the table); both the text 0018 wrote and the older IN list are rewritten, and every stored
-- row satisfies the wider constraint.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
SET sql = replace(
        replace(sql,
            'CHECK (kind = ''t'' OR kind = ''m'' OR kind = ''f'')',
            'CHECK (kind = ''t'' OR kind = ''m'' OR kind = ''f'' OR kind = ''v'')'),
        'CHECK (kind IN (''t'', ''m'', ''f''))',
        'CHECK (kind IN (''t'', ''m'', ''f'', ''v''))')
WHERE type = 'table' AND name = 'sync_log';
PRAGMA writable_schema = RESET;

CREATE TRIGGER sync_log_memory_insert AFTER INSERT ON memory_versions BEGIN
    INSERT OR REPLACE INTO sync_log (kind, id) VALUES ('v', new.id);
END;
CREATE TRIGGER sync_log_memory_withdraw AFTER UPDATE OF withdrawn_at, body ON memory_versions
WHEN old.withdrawn_at IS NOT new.withdrawn_at OR old.body IS NOT new.body BEGIN
    INSERT OR REPLACE INTO sync_log (kind, id) VALUES ('v', new.id);
END;
CREATE TRIGGER sync_log_memory_delete AFTER DELETE ON memory_versions BEGIN
    DELETE FROM sync_log WHERE kind = 'v' AND id = old.id;
END;

-- The versions made before this migration, oldest first.
INSERT INTO sync_log (kind, id) SELECT 'v', id FROM memory_versions ORDER BY created_at, id;

-- A version arriving from a peer asks whether a thread it drew on was forgotten here since it was made.
CREATE INDEX forgotten_messages_thread ON forgotten_messages(thread_id, forgotten_at);
