-- 0022_memory: rolling memory (short, mid, long) and the user's profile, every version kept. Append-only.
-- A version is immutable except for being withdrawn: when a thread it drew on is forgotten its body is blanked
-- and `withdrawn_at` set, and the tier runs again. Versions carry a content-derived id, their origin and a
-- per-origin sequence number, as every row that may travel to another relay does.
CREATE TABLE memory_versions (
    id             TEXT PRIMARY KEY,
    tier           TEXT NOT NULL CHECK (tier = 'short' OR tier = 'mid' OR tier = 'long' OR tier = 'profile'),
    created_at     TEXT NOT NULL,
    body           TEXT NOT NULL,
    tokens         INTEGER NOT NULL CHECK (tokens >= 0),
    -- The model that wrote it and the prompt's version (NULL for the short tier and the profile).
    model          TEXT,
    prompt_version TEXT,
    -- The span of time its material came from.
    covers_from    TEXT,
    covers_to      TEXT,
    -- The versions it was made from (JSON list of ids): mid from a short version, long from a mid and the
    -- previous long.
    based_on       TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(based_on)),
    withdrawn_at   TEXT,
    origin_device  TEXT NOT NULL,
    origin_seq     INTEGER NOT NULL
) STRICT;
CREATE INDEX memory_versions_tier ON memory_versions(tier, created_at);

-- The threads a version drew on (directly, or through the versions it was made from).
CREATE TABLE memory_sources (
    version_id TEXT NOT NULL REFERENCES memory_versions(id) ON DELETE CASCADE,
    thread_id  TEXT NOT NULL,
    PRIMARY KEY (version_id, thread_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX memory_sources_thread ON memory_sources(thread_id);

-- Small named values: each tier's last run and its outcome, a tier due again after a forget.
CREATE TABLE memory_state (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
