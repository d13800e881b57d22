-- 0011_turn_identity: one identity per turn across capture paths (docs/wire-format.md, "Turn identity").
-- Append-only. Existing rows keep working: a browser-extension thread's rows are DOM renderings (rank 0), an
-- import's are exports (rank 2), a harvest's are transcripts (rank 2) — what wire v1 clients meant.

-- How the stored rendering was read (`dom`, `network`, `export`, `harvest`) and its rank (0, 1, 2, 2): a rendering
-- of the same turn replaces it only from a higher rank, so a later DOM capture never downgrades a source form.
ALTER TABLE messages ADD COLUMN source_path TEXT NOT NULL DEFAULT 'dom'
    CHECK (source_path IN ('dom', 'network', 'export', 'harvest'));
ALTER TABLE messages ADD COLUMN source_rank INTEGER NOT NULL DEFAULT 0;
-- The site's id of the message this one follows in the site's branch tree (edits and regenerations share one).
ALTER TABLE messages ADD COLUMN parent_key TEXT;

UPDATE messages SET source_path = 'export', source_rank = 2
    WHERE thread_id IN (SELECT id FROM threads WHERE surface LIKE 'import:%');
UPDATE messages SET source_path = 'harvest', source_rank = 2
    WHERE thread_id IN (SELECT id FROM threads WHERE surface LIKE 'harvest:%');

-- Turns by the site's id, for matching a rendering from another path.
CREATE INDEX messages_thread_key ON messages(thread_id, message_key) WHERE message_key IS NOT NULL;
-- Source-form turns of a thread (a DOM turn is compared with them by its words only when there are any).
CREATE INDEX messages_thread_source ON messages(thread_id, role) WHERE source_rank > 0;

-- Lower-ranked renderings folded into a stored turn (their text is not kept, only its hash): resending one is a
-- duplicate. Removed with the turn.
CREATE TABLE message_renderings (
    thread_id    TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    message_pk   INTEGER NOT NULL REFERENCES messages(pk) ON DELETE CASCADE,
    source_path  TEXT NOT NULL,
    folded_at    TEXT NOT NULL,
    PRIMARY KEY (thread_id, content_hash)
) STRICT;
CREATE INDEX message_renderings_message ON message_renderings(message_pk);
