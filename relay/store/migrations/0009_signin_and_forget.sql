-- 0008_signin_and_forget: one-time dashboard sign-in links, and the tombstones forgetting leaves. Append-only.

-- One-time links that open a dashboard session (`personkit open`, `POST /v1/me/dashboard-link`). Stored only
-- as sha256 of the secret; usable once, before `expires_at`.
CREATE TABLE signin_links (
    secret_hash TEXT PRIMARY KEY,
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    used_at     TEXT
) STRICT;

-- Every message ever forgotten, by its content-derived id (no content): ingest answers a forgotten turn as a
-- duplicate and stores nothing, so a replayed queue, a re-import or a sync peer cannot bring it back.
CREATE TABLE forgotten_messages (
    id           TEXT PRIMARY KEY,
    thread_id    TEXT NOT NULL,
    forgotten_at TEXT NOT NULL
) STRICT;

-- One row per thread a forget touched: `whole` = 1 when the thread itself went (the change feed's `deleted`),
-- 0 when some of its turns went (`updated`).
CREATE TABLE forget_log (
    id           INTEGER PRIMARY KEY,
    thread_id    TEXT NOT NULL,
    surface      TEXT NOT NULL,
    messages     INTEGER NOT NULL,
    whole        INTEGER NOT NULL CHECK (whole IN (0, 1)),
    forgotten_at TEXT NOT NULL
) STRICT;
CREATE INDEX forget_log_at ON forget_log(forgotten_at);
