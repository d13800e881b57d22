-- 0019_dashboard_sessions: dashboard sessions outlive a relay restart. Append-only.

-- One row per open dashboard session, by the sha256 of its cookie secret (the secret itself is never stored).
-- A session works until `expires_at`; signing out deletes its row.
CREATE TABLE dashboard_sessions (
    secret_hash TEXT PRIMARY KEY,
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL
) STRICT;
