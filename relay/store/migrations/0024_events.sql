-- 0024_events: the events stream gets its writers (`personkit-events`, `personkit_store::events`). Append-only.

-- Bounded reads by time, by kind and by source, newest first.
CREATE INDEX events_occurred ON events(occurred_at);
CREATE INDEX events_kind_occurred ON events(kind, occurred_at);
CREATE INDEX events_source_occurred ON events(source_surface, occurred_at);
-- The events derived from a thread (sessions, threads) name it in `attrs.thread_id`: reading a thread's events
-- and forgetting them use this index.
CREATE INDEX events_thread ON events(json_extract(attrs, '$.thread_id'))
    WHERE json_extract(attrs, '$.thread_id') IS NOT NULL;

-- Events stay append-only, with one exception: forgetting a thread removes the events derived from it. The
-- forget transaction lists the threads it forgets here, deletes their events and empties the list before it
-- commits, so outside a forget the list is empty and every delete is still refused. (A trigger of the main
-- schema cannot see the forget's temporary tables, hence a table of its own.)
CREATE TABLE events_forgetting (
    thread_id TEXT PRIMARY KEY
) STRICT;
DROP TRIGGER events_no_delete;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM events_forgetting WHERE thread_id = json_extract(old.attrs, '$.thread_id'))
BEGIN SELECT RAISE(ABORT, 'events are append-only: only forgetting their thread removes them'); END;
-- The full-text index follows a removed event (it is external-content: rows do not leave it by themselves).
CREATE TRIGGER events_fts_delete AFTER DELETE ON events BEGIN
    INSERT INTO events_fts(events_fts, rowid, content) VALUES ('delete', old.pk, old.content);
END;

-- The event harvesters' settings and state. Machine-local: none of it travels in a snapshot or to a peer.
-- One row per source a user has touched: opt-in (`enabled`), the last run and its counts over every run.
CREATE TABLE event_sources (
    name         TEXT PRIMARY KEY,
    enabled      INTEGER NOT NULL DEFAULT 0 CHECK (enabled IN (0, 1)),
    last_run_at  TEXT,
    last_error   TEXT,
    read         INTEGER NOT NULL DEFAULT 0,
    stored       INTEGER NOT NULL DEFAULT 0,
    duplicate    INTEGER NOT NULL DEFAULT 0,
    rejected     INTEGER NOT NULL DEFAULT 0
) STRICT;

-- The places a source reads that the user names: git repositories, project folders (TASKS.md, CLAUDE.md), the
-- screenshots folder.
CREATE TABLE event_paths (
    source    TEXT NOT NULL,
    path      TEXT NOT NULL,
    added_at  TEXT NOT NULL,
    PRIMARY KEY (source, path)
) STRICT;

-- What a source remembers per file, repository or feed between runs (the last commit read, a file's content
-- hash, a byte offset), as JSON the source defines.
CREATE TABLE event_cursors (
    source   TEXT NOT NULL,
    key      TEXT NOT NULL,
    state    TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(state)),
    read_at  TEXT NOT NULL,
    PRIMARY KEY (source, key)
) STRICT;
