-- 0013_harvest: what the harvesters of local AI-tool transcripts know (docs/import.md "Harvesters"). Append-only.
-- Machine-local state: none of it travels in a snapshot.

-- One row per source a user has touched (`claude-code`, `codex`, `gemini-cli`, `aider`, `continue`): opt-in
-- (`enabled`), an optional path replacing the default under the home folder, and the last run's outcome.
CREATE TABLE harvest_sources (
    name         TEXT PRIMARY KEY,
    enabled      INTEGER NOT NULL DEFAULT 0 CHECK (enabled IN (0, 1)),
    path         TEXT,
    last_run_at  TEXT,
    last_error   TEXT,
    files_read   INTEGER NOT NULL DEFAULT 0,
    turns_read   INTEGER NOT NULL DEFAULT 0
) STRICT;

-- Folders whose `.aider.chat.history.md` the aider source reads (`personkit harvest add-folder`).
CREATE TABLE harvest_folders (
    path      TEXT PRIMARY KEY,
    added_at  TEXT NOT NULL
) STRICT;

-- Per file: how far it was read. `read_to` is the byte offset after the last complete line (or record) taken;
-- `prefix_hash` the sha256 of the file's first `min(read_to, 4096)` bytes and `file_id` its device:inode, so a
-- file truncated or replaced under the same name is noticed and read again from the start; `meta` what the
-- source's parser carries from one run to the next (session id, last message key, …) as JSON.
CREATE TABLE harvest_files (
    source       TEXT NOT NULL,
    path         TEXT NOT NULL,
    file_id      TEXT,
    size         INTEGER NOT NULL DEFAULT 0,
    mtime_ms     INTEGER,
    read_to      INTEGER NOT NULL DEFAULT 0,
    lines        INTEGER NOT NULL DEFAULT 0,
    prefix_hash  TEXT,
    meta         TEXT NOT NULL DEFAULT '{}',
    turns        INTEGER NOT NULL DEFAULT 0,
    read_at      TEXT NOT NULL,
    PRIMARY KEY (source, path)
) STRICT;
