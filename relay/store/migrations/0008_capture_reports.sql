-- Devices' reports that a surface's adapter no longer reads its pages (`adapter_stale`): one row per surface
-- and device while the report stands. `stale_since` is the device's time (stored form) when its pages started
-- failing; a turn of the surface from the same device captured after it, or a report with `stale_since: null`,
-- removes the row.
CREATE TABLE capture_reports (
    surface     TEXT NOT NULL,
    device_id   TEXT NOT NULL,
    stale_since TEXT NOT NULL,
    rule        TEXT,
    reported_at TEXT NOT NULL,
    PRIMARY KEY (surface, device_id)
) STRICT;
