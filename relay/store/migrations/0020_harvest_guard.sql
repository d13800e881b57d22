-- 0020_harvest_guard: what a harvest pass learns beyond turns. Append-only.

-- The retention warnings of a source's last pass (JSON list): the tool's own setting that deletes sessions, and
-- whether it will delete them before a harvest could copy them.
ALTER TABLE harvest_sources ADD COLUMN warnings TEXT NOT NULL DEFAULT '[]';

-- When a pass found a file it had read gone from disk (the tool deleted it); cleared if it comes back.
ALTER TABLE harvest_files ADD COLUMN gone_at TEXT;

-- Which threads each harvested file's turns went to: a thread whose every file is gone is the only copy left.
CREATE TABLE harvest_file_threads (
    source     TEXT NOT NULL,
    path       TEXT NOT NULL,
    thread_id  TEXT NOT NULL,
    PRIMARY KEY (source, path, thread_id)
) STRICT;
CREATE INDEX harvest_file_threads_thread ON harvest_file_threads(thread_id);
