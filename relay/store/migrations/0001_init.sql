-- 0001_init: the corpus schema (seed design V2). Append-only: never edit this file once it has landed; add
-- 0002_*.sql instead. Applied in one transaction by relay/src/migrations.rs, tracked with PRAGMA user_version.
--
-- Conventions
--   * Times are TEXT in one fixed-width UTC form, `YYYY-MM-DDTHH:MM:SS.mmmZ`, so they sort and compare as text.
--   * Every row that can travel to another relay carries `origin_device` (the id of the device or relay that
--     created it), `origin_seq` (that origin's sequence number, strictly increasing per origin; gaps allowed) and
--     a content-derived id where the row has content. A sync peer treats the corpus as a grow-only set.
--   * `messages.pk` / `events.pk` are the integer rowids that the vec0 and FTS5 tables are keyed by.

-- Facts about this corpus (e.g. `relay_id`, the origin of rows the relay creates itself).
CREATE TABLE relay_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;

-- Highest sequence number handed out per origin.
CREATE TABLE origin_seqs (
    origin   TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL
) STRICT;

-- Paired devices. Tokens are never stored, only their sha256 (lowercase hex).
CREATE TABLE devices (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    token_hash   TEXT NOT NULL UNIQUE,
    created_at   TEXT NOT NULL,
    last_seen_at TEXT,
    revoked_at   TEXT
) STRICT;

-- One-time pairing codes, stored as sha256 of the normalized code (upper case, no dash).
CREATE TABLE pairing_codes (
    code_hash  TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    used_at    TEXT,
    device_id  TEXT REFERENCES devices(id)
) STRICT;

-- Where a batch of rows came from. `signed_by`/`signature` are for signed relay-to-relay sync (later issue).
CREATE TABLE provenance (
    id               INTEGER PRIMARY KEY,
    captured_at      TEXT NOT NULL,
    origin_device    TEXT NOT NULL,
    client_device_id TEXT,
    app_version      TEXT,
    signed_by        TEXT,
    signature        BLOB
) STRICT;

CREATE TABLE entities (
    id            TEXT PRIMARY KEY,
    kind          TEXT NOT NULL,
    name          TEXT NOT NULL,
    attrs         TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(attrs)),
    created_at    TEXT NOT NULL,
    provenance_id INTEGER REFERENCES provenance(id),
    origin_device TEXT NOT NULL,
    origin_seq    INTEGER NOT NULL,
    UNIQUE (kind, name)
) STRICT;

CREATE TABLE entity_aliases (
    entity_id     TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    alias         TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    origin_device TEXT NOT NULL,
    origin_seq    INTEGER NOT NULL,
    PRIMARY KEY (entity_id, alias)
) STRICT;
CREATE INDEX entity_aliases_alias ON entity_aliases(alias);

-- Typed triples with a validity interval (NULL = open).
CREATE TABLE relations (
    id            TEXT PRIMARY KEY,
    subject_id    TEXT NOT NULL REFERENCES entities(id),
    predicate     TEXT NOT NULL,
    object_id     TEXT NOT NULL REFERENCES entities(id),
    valid_from    TEXT,
    valid_to      TEXT,
    attrs         TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(attrs)),
    created_at    TEXT NOT NULL,
    provenance_id INTEGER REFERENCES provenance(id),
    origin_device TEXT NOT NULL,
    origin_seq    INTEGER NOT NULL
) STRICT;
CREATE INDEX relations_subject ON relations(subject_id, predicate);
CREATE INDEX relations_object ON relations(object_id, predicate);

-- Append-only events; the same content in the same minute bucket is stored once.
CREATE TABLE events (
    pk             INTEGER PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    kind           TEXT NOT NULL,
    source_surface TEXT NOT NULL,
    content        TEXT NOT NULL,
    content_hash   TEXT NOT NULL,
    minute_bucket  INTEGER NOT NULL,
    occurred_at    TEXT NOT NULL,
    captured_at    TEXT NOT NULL,
    attrs          TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(attrs)),
    provenance_id  INTEGER REFERENCES provenance(id),
    origin_device  TEXT NOT NULL,
    origin_seq     INTEGER NOT NULL,
    UNIQUE (content_hash, minute_bucket)
) STRICT;
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;

-- One conversation on one surface. id = shared::thread_id(surface, conversation_id).
CREATE TABLE threads (
    id              TEXT PRIMARY KEY,
    surface         TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    title           TEXT,
    url             TEXT,
    first_seen_at   TEXT NOT NULL,
    last_seen_at    TEXT NOT NULL,
    origin_device   TEXT NOT NULL,
    origin_seq      INTEGER NOT NULL,
    UNIQUE (surface, conversation_id)
) STRICT;
CREATE INDEX threads_surface_last_seen ON threads(surface, last_seen_at);

-- One turn. id = shared::message_id(thread_id, content_hash). A turn position is `position_key`
-- ('k:' || message_key, else 'o:' || ordinal, else NULL). Several contents at one position are revisions,
-- numbered 1.. in (captured_at, content_hash) order; the last one is current.
CREATE TABLE messages (
    pk            INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    thread_id     TEXT NOT NULL REFERENCES threads(id),
    role          TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
    content       TEXT NOT NULL,
    content_hash  TEXT NOT NULL,
    message_key   TEXT,
    ordinal       INTEGER,
    position_key  TEXT,
    revision      INTEGER NOT NULL DEFAULT 1,
    is_current    INTEGER NOT NULL DEFAULT 1 CHECK (is_current IN (0, 1)),
    occurred_at   TEXT,
    captured_at   TEXT NOT NULL,
    received_at   TEXT NOT NULL,
    tool_calls    TEXT CHECK (tool_calls IS NULL OR json_valid(tool_calls)),
    provenance_id INTEGER REFERENCES provenance(id),
    origin_device TEXT NOT NULL,
    origin_seq    INTEGER NOT NULL,
    UNIQUE (thread_id, content_hash)
) STRICT;
CREATE INDEX messages_position ON messages(thread_id, position_key);
CREATE INDEX messages_thread_captured ON messages(thread_id, captured_at);
CREATE INDEX messages_received ON messages(received_at);
CREATE INDEX messages_origin ON messages(origin_device, origin_seq);

-- Embeddings keyed by the hash of the embedded text, so identical text shares one row per model.
CREATE TABLE embeddings (
    text_hash     TEXT NOT NULL,
    model_id      TEXT NOT NULL,
    model_version TEXT NOT NULL,
    dim           INTEGER NOT NULL,
    vector        BLOB NOT NULL,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (text_hash, model_id, model_version)
) STRICT;

-- Vector indexes keyed by rowid = messages.pk / events.pk.
CREATE VIRTUAL TABLE messages_vec_384 USING vec0(embedding float[384] distance_metric=cosine);
CREATE VIRTUAL TABLE messages_vec_768 USING vec0(embedding float[768] distance_metric=cosine);
CREATE VIRTUAL TABLE events_vec_384 USING vec0(embedding float[384] distance_metric=cosine);
CREATE VIRTUAL TABLE events_vec_768 USING vec0(embedding float[768] distance_metric=cosine);

-- Full-text indexes (external content), kept in step by triggers.
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, content='messages', content_rowid='pk', tokenize='porter unicode61'
);
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.pk, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.pk, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.pk, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.pk, new.content);
END;

CREATE VIRTUAL TABLE events_fts USING fts5(
    content, content='events', content_rowid='pk', tokenize='porter unicode61'
);
CREATE TRIGGER events_fts_insert AFTER INSERT ON events BEGIN
    INSERT INTO events_fts(rowid, content) VALUES (new.pk, new.content);
END;

-- The signal layer: one row per accepted observation that added something to the corpus.
CREATE TABLE persona_observations (
    id             TEXT PRIMARY KEY,
    kind           TEXT NOT NULL,
    source_surface TEXT NOT NULL,
    thread_id      TEXT REFERENCES threads(id),
    message_id     TEXT REFERENCES messages(id),
    role           TEXT,
    observed_at    TEXT NOT NULL,
    attrs          TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(attrs)),
    processed_at   TEXT,
    origin_device  TEXT NOT NULL,
    origin_seq     INTEGER NOT NULL
) STRICT;
CREATE INDEX persona_observations_surface ON persona_observations(source_surface, observed_at);

-- Capture health per surface.
CREATE TABLE surface_stats (
    surface            TEXT PRIMARY KEY,
    last_accepted_at   TEXT,
    last_error_code    TEXT,
    last_error_message TEXT,
    last_error_at      TEXT,
    accepted_total     INTEGER NOT NULL DEFAULT 0,
    rejected_total     INTEGER NOT NULL DEFAULT 0
) STRICT;

-- Recent per-item rejections (never content), pruned after 7 days.
CREATE TABLE ingest_errors (
    id        INTEGER PRIMARY KEY,
    at        TEXT NOT NULL,
    surface   TEXT,
    device_id TEXT,
    code      TEXT NOT NULL,
    message   TEXT NOT NULL
) STRICT;
CREATE INDEX ingest_errors_at ON ingest_errors(at);
