-- 0026_graph: where every entity and relation came from, merge candidates, and the derivation's state.
--
-- An entity or relation exists because something supports it: a thread, one message, or an event. Each support is
-- one row here, with how it was found (`certain`: read from what the corpus states, such as a harvested session's
-- project or a URL's host; `model`: extracted by a language model) and a confidence in [0, 1]. `seen_at` is the
-- source's own time (a thread's or message's capture time, an event's occurrence), which a timeline groups by.
-- Forgetting a source removes its rows; an entity or relation left with none is deleted.

CREATE TABLE entity_sources (
    entity_id   TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    source_kind TEXT NOT NULL CHECK (source_kind = 'thread' OR source_kind = 'message' OR source_kind = 'event'),
    source_id   TEXT NOT NULL,
    how         TEXT NOT NULL CHECK (how = 'certain' OR how = 'model'),
    confidence  REAL NOT NULL CHECK (confidence >= 0.0 AND confidence <= 1.0),
    seen_at     TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (entity_id, source_kind, source_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX entity_sources_source ON entity_sources(source_kind, source_id);
CREATE INDEX entity_sources_seen ON entity_sources(seen_at);

CREATE TABLE relation_sources (
    relation_id TEXT NOT NULL REFERENCES relations(id) ON DELETE CASCADE,
    source_kind TEXT NOT NULL CHECK (source_kind = 'thread' OR source_kind = 'message' OR source_kind = 'event'),
    source_id   TEXT NOT NULL,
    how         TEXT NOT NULL CHECK (how = 'certain' OR how = 'model'),
    confidence  REAL NOT NULL CHECK (confidence >= 0.0 AND confidence <= 1.0),
    seen_at     TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (relation_id, source_kind, source_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX relation_sources_source ON relation_sources(source_kind, source_id);

-- Neighbour walks go out from an entity along relations in either direction.
CREATE INDEX relations_subject_object ON relations(subject_id, object_id);
CREATE INDEX relations_object_subject ON relations(object_id, subject_id);
CREATE UNIQUE INDEX relations_triple ON relations(subject_id, predicate, object_id);
CREATE INDEX entities_kind_name ON entities(kind, lower(name));

-- Pairs of entities of one kind whose names look alike (`a` < `b`). Proposed by the derivation, decided by the
-- user only: merged (b folded into a) or dismissed (never proposed again).
CREATE TABLE entity_merge_candidates (
    a          TEXT NOT NULL,
    b          TEXT NOT NULL,
    kind       TEXT NOT NULL,
    a_name     TEXT NOT NULL,
    b_name     TEXT NOT NULL,
    similarity REAL NOT NULL,
    state      TEXT NOT NULL DEFAULT 'proposed'
               CHECK (state = 'proposed' OR state = 'merged' OR state = 'dismissed'),
    created_at TEXT NOT NULL,
    decided_at TEXT,
    PRIMARY KEY (a, b)
) STRICT, WITHOUT ROWID;
CREATE INDEX entity_merge_candidates_state ON entity_merge_candidates(state, similarity);

-- Threads whose links a forget removed while some of their turns stayed: the derivation reads them again.
CREATE TABLE graph_redo (
    thread_id TEXT PRIMARY KEY
) STRICT;

-- Small named values: the derivation's cursor (the highest message pk it has read), its last pass.
CREATE TABLE graph_state (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
CREATE INDEX relation_sources_seen ON relation_sources(seen_at);
