-- 0025_heat: how much this relay's user has used each record lately (personkit-heat).
-- Machine-local: heat describes the use of this relay, so it is in no snapshot and no sync page. One row per
-- record, aggregated in place: an access adds one to `accesses` and moves `last_access`, so the table grows with
-- the records used, never with the number of uses.
CREATE TABLE heat (
    kind        TEXT NOT NULL CHECK (kind = 'thread' OR kind = 'entity' OR kind = 'event'),
    record_id   TEXT NOT NULL,
    accesses    INTEGER NOT NULL CHECK (accesses >= 0),
    -- The accesses that still count at `computed_at` (older ones fade; personkit-heat has the rule).
    effective   REAL NOT NULL DEFAULT 0 CHECK (effective >= 0),
    last_access TEXT NOT NULL,
    heat        REAL NOT NULL DEFAULT 0 CHECK (heat >= 0 AND heat <= 1),
    tier        TEXT NOT NULL DEFAULT 'cold' CHECK (tier = 'hot' OR tier = 'warm' OR tier = 'cold'),
    computed_at TEXT NOT NULL,
    UNIQUE (kind, record_id)
) STRICT;
CREATE INDEX heat_by_tier ON heat(kind, tier, heat);

-- Small named values: when the last recompute ran.
CREATE TABLE heat_state (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
