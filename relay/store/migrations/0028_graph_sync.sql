-- 0028_graph_sync: events and the user's graph decisions travel to sync peers (docs/sync.md). Append-only.
--
-- The change feed gains three kinds:
--   'e' an event, by id: the events a harvester read on this machine (git, plans, tasks, AI-tool config, the
--       reading list, screenshots). Events derived from a thread (`attrs.thread_id`: sessions and threads as
--       events) do not enter the feed: every relay derives them from the turns it holds, and forgetting removes
--       them with the thread.
--   'g' a decided merge candidate, by `a|b`: the user merged the pair (`kept` says which entity stayed) or
--       dismissed it. Proposed pairs stay local: each relay's derivation proposes them from its own entities.
--   'p' an entity proposal, by id, with the messages it was found in: a name a model found, in any state, so the
--       user can decide on whichever relay they use.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
SET sql = replace(
        replace(sql,
            'CHECK (kind = ''t'' OR kind = ''m'' OR kind = ''f'' OR kind = ''v'')',
            'CHECK (kind = ''t'' OR kind = ''m'' OR kind = ''f'' OR kind = ''v'' OR kind = ''e'' OR kind = ''g'' OR kind = ''p'')'),
        'CHECK (kind IN (''t'', ''m'', ''f'', ''v''))',
        'CHECK (kind IN (''t'', ''m'', ''f'', ''v'', ''e'', ''g'', ''p''))')
WHERE type = 'table' AND name = 'sync_log';
PRAGMA writable_schema = RESET;

-- Which entity a merge kept (the other was folded into it). NULL for a pair merged before this migration and
-- for every pair not merged.
ALTER TABLE entity_merge_candidates ADD COLUMN kept TEXT;
UPDATE entity_merge_candidates SET kept = CASE WHEN EXISTS (SELECT 1 FROM entities WHERE id = a) THEN a ELSE b END
WHERE state = 'merged';

CREATE TRIGGER sync_log_event_insert AFTER INSERT ON events
WHEN json_extract(new.attrs, '$.thread_id') IS NULL BEGIN
    INSERT OR REPLACE INTO sync_log (kind, id) VALUES ('e', new.id);
END;

CREATE TRIGGER sync_log_merge_insert AFTER INSERT ON entity_merge_candidates
WHEN new.state != 'proposed' BEGIN
    INSERT OR REPLACE INTO sync_log (kind, id) VALUES ('g', new.a || '|' || new.b);
END;
CREATE TRIGGER sync_log_merge_update AFTER UPDATE OF state, kept ON entity_merge_candidates
WHEN new.state != 'proposed' AND (old.state IS NOT new.state OR old.kept IS NOT new.kept) BEGIN
    INSERT OR REPLACE INTO sync_log (kind, id) VALUES ('g', new.a || '|' || new.b);
END;
CREATE TRIGGER sync_log_merge_delete AFTER DELETE ON entity_merge_candidates BEGIN
    DELETE FROM sync_log WHERE kind = 'g' AND id = old.a || '|' || old.b;
END;

CREATE TRIGGER sync_log_proposal_insert AFTER INSERT ON entity_proposals BEGIN
    INSERT OR REPLACE INTO sync_log (kind, id) VALUES ('p', new.id);
END;
CREATE TRIGGER sync_log_proposal_update AFTER UPDATE OF state, confidence ON entity_proposals
WHEN old.state IS NOT new.state OR old.confidence IS NOT new.confidence BEGIN
    INSERT OR REPLACE INTO sync_log (kind, id) VALUES ('p', new.id);
END;
CREATE TRIGGER sync_log_proposal_delete AFTER DELETE ON entity_proposals BEGIN
    DELETE FROM sync_log WHERE kind = 'p' AND id = old.id;
END;
-- A message more for a proposal is news for the peers too.
CREATE TRIGGER sync_log_proposal_source AFTER INSERT ON entity_proposal_sources BEGIN
    INSERT OR REPLACE INTO sync_log (kind, id) VALUES ('p', new.proposal_id);
END;

-- Approved proposals whose messages the graph has yet to link here: one arrived from a peer, or a message of one
-- did. The graph's pass links them and empties the list.
CREATE TABLE graph_settle (
    proposal_id TEXT PRIMARY KEY
) STRICT;

-- What was stored before this migration, oldest first.
INSERT INTO sync_log (kind, id)
    SELECT 'e', id FROM events WHERE json_extract(attrs, '$.thread_id') IS NULL ORDER BY pk;
INSERT INTO sync_log (kind, id)
    SELECT 'g', a || '|' || b FROM entity_merge_candidates WHERE state != 'proposed' ORDER BY decided_at, a, b;
INSERT INTO sync_log (kind, id) SELECT 'p', id FROM entity_proposals ORDER BY created_at, id;
