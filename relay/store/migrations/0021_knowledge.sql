-- 0021_knowledge: what the knowledge pipeline derives from the turns, and what it needs to remember. Append-only.
-- Machine-local: none of it travels to another relay (a peer derives its own from the turns it holds).

-- An entry: one position of the user's, with the reasoning behind it. `status` is the user's decision: only
-- approved entries reach agents and exports. `origin` is `pipeline` or `agent:<name>` (an agent's proposal).
CREATE TABLE knowledge_entries (
    id                TEXT PRIMARY KEY,
    kind              TEXT NOT NULL CHECK (kind IN ('reasoning', 'philosophy', 'standard', 'decision', 'reaction')),
    topic             TEXT NOT NULL CHECK (topic <> ''),
    position          TEXT NOT NULL CHECK (position <> ''),
    reasoning         TEXT NOT NULL CHECK (reasoning <> ''),
    context           TEXT,
    confidence        TEXT NOT NULL CHECK (confidence IN ('low', 'medium', 'high')),
    stability         TEXT NOT NULL CHECK (stability IN ('durable', 'stable', 'evolving')),
    tags              TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(tags)),
    status            TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'rejected')),
    origin            TEXT NOT NULL,
    reason            TEXT,
    model             TEXT,
    prompt_version    TEXT,
    scores            TEXT CHECK (scores IS NULL OR json_valid(scores)),
    variant_of        TEXT REFERENCES knowledge_entries(id) ON DELETE SET NULL,
    reinforced        INTEGER NOT NULL DEFAULT 0,
    -- Some of its sources were forgotten (the entry stays: others still support it).
    sources_forgotten INTEGER NOT NULL DEFAULT 0 CHECK (sources_forgotten IN (0, 1)),
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    decided_at        TEXT,
    decided_by        TEXT
) STRICT;
CREATE INDEX knowledge_entries_status ON knowledge_entries(status, updated_at);
CREATE INDEX knowledge_entries_origin ON knowledge_entries(origin, created_at);

-- The turns an entry was drawn from.
CREATE TABLE knowledge_sources (
    entry_id   TEXT NOT NULL REFERENCES knowledge_entries(id) ON DELETE CASCADE,
    message_id TEXT NOT NULL,
    thread_id  TEXT NOT NULL,
    PRIMARY KEY (entry_id, message_id)
) STRICT;
CREATE INDEX knowledge_sources_message ON knowledge_sources(message_id);

-- Full-text index of the entries (kept by the store's functions, keyed by the entry's rowid).
CREATE VIRTUAL TABLE knowledge_fts USING fts5(topic, position, reasoning, context, tags, tokenize = 'unicode61 remove_diacritics 2');

-- Every model call and every decision: what was sent where (scrubbed or not), what was kept or dropped and why.
-- `messages` lists the turns a row speaks about, so forgetting them blanks the row's details.
CREATE TABLE knowledge_audit (
    id       INTEGER PRIMARY KEY,
    at       TEXT NOT NULL,
    run_id   TEXT NOT NULL,
    kind     TEXT NOT NULL CHECK (kind IN ('run', 'call', 'decision', 'alert', 'approval', 'proposal')),
    messages TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(messages)),
    detail   TEXT NOT NULL CHECK (json_valid(detail))
) STRICT;
CREATE INDEX knowledge_audit_at ON knowledge_audit(at);

-- Small named values: the pull cursor, the last run, the open alert, the pseudonym key.
CREATE TABLE knowledge_state (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;

-- Names replaced by pseudonyms in text sent to a model outside this machine, and back again in its answers.
CREATE TABLE pseudonyms (
    pseudonym  TEXT PRIMARY KEY,
    real       TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL
) STRICT;
