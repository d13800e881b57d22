-- 0027_entity_proposals: entities a language model found in turns, waiting for the user.
--
-- A proposal is one name of one kind (`kind`, `key` as the graph keys names), with every message it was found in.
-- Nothing here is part of the graph, which agents read, until the user approves it: approving stores the entity
-- with each source message (`how` = 'model', the proposal's confidence), and later mentions of an approved name
-- are linked as they are found. A rejected name is not proposed again. Forgetting a message removes its rows here;
-- a proposal left with no message is deleted, whatever its state.

CREATE TABLE entity_proposals (
    id         TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    name       TEXT NOT NULL,
    key        TEXT NOT NULL,
    confidence REAL NOT NULL CHECK (confidence >= 0.0 AND confidence <= 1.0),
    model      TEXT NOT NULL,
    state      TEXT NOT NULL DEFAULT 'proposed'
               CHECK (state = 'proposed' OR state = 'approved' OR state = 'rejected'),
    entity_id  TEXT,
    created_at TEXT NOT NULL,
    decided_at TEXT,
    UNIQUE (kind, key)
) STRICT;
CREATE INDEX entity_proposals_state ON entity_proposals(state, confidence);

CREATE TABLE entity_proposal_sources (
    proposal_id TEXT NOT NULL REFERENCES entity_proposals(id) ON DELETE CASCADE,
    message_id  TEXT NOT NULL,
    thread_id   TEXT NOT NULL,
    confidence  REAL NOT NULL CHECK (confidence >= 0.0 AND confidence <= 1.0),
    seen_at     TEXT NOT NULL,
    PRIMARY KEY (proposal_id, message_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX entity_proposal_sources_message ON entity_proposal_sources(message_id);
