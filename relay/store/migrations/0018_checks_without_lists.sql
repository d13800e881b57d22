-- 0018_checks_without_lists: the CHECK constraints that every ingested turn runs list their values with OR instead
-- of IN. Append-only.
--
-- Why: SQLite codes `x IN (a, b, c, ...)` with more than two constants as a throwaway b-tree built afresh each time
-- the constraint is checked, so each new message paid for two (role, capture path) and its change-feed entry for a
-- third: about 2 µs each on this machine, and library ingest ran at 0.84x of its speed without them
-- (`--bench ingest_costs`). `x = a OR x = b ...` is a few comparisons and accepts and refuses the same values.
--
-- How: CHECK constraints live only in the table's SQL text, not in stored rows, so the text is edited in place —
-- SQLite's documented procedure for changing constraints without rebuilding a table (lang_altertable.html,
-- "Making other kinds of table schema changes"); every row already satisfies the rewritten constraint. The
-- migration runner then bumps the schema version, so every open connection reads the new text. A corpus whose
-- text differs (none made by personkit) keeps its IN lists: slower, never wrong.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
SET sql = replace(
        replace(sql,
            'CHECK (role IN (''user'', ''assistant'', ''system'', ''tool''))',
            'CHECK (role = ''user'' OR role = ''assistant'' OR role = ''system'' OR role = ''tool'')'),
        'CHECK (source_path IN (''dom'', ''network'', ''export'', ''harvest''))',
        'CHECK (source_path = ''dom'' OR source_path = ''network'' OR source_path = ''export''
        OR source_path = ''harvest'')')
WHERE type = 'table' AND name = 'messages';
UPDATE sqlite_schema
SET sql = replace(sql,
        'CHECK (kind IN (''t'', ''m'', ''f''))',
        'CHECK (kind = ''t'' OR kind = ''m'' OR kind = ''f'')')
WHERE type = 'table' AND name = 'sync_log';
-- RESET: writing off again, and this connection reads the schema anew.
PRAGMA writable_schema = RESET;
