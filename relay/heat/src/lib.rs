//! `personkit-heat`: how much the user has used each record lately, as a number in 0..=1 and a tier.
//!
//! Uses raise a record's heat — a thread opened in the dashboard or from a search hit, read by an agent through
//! MCP `get_thread`, a new turn captured into it, an entity page viewed — and time lowers it. This crate holds the
//! rules: the formula ([`heat`]), the tiers ([`tier`]), the pass that computes every row again ([`recompute`],
//! run every [`RECOMPUTE_EVERY`] by the relay's heat job) and the one way heat may touch search ranking
//! ([`tiebreak`]). The rows are `personkit_store::heat`'s; this crate has no SQL.
//!
//! Heat is not relevance: search uses it only after fusion, as a factor of at most 1.1, so a result scoring more
//! than 10 % above another is never passed by it however hot the other is.

use personkit_store::heat::{self as rows, Rule, Scored};
pub use personkit_store::heat::{Kind, Tier};
use personkit_store::{Connection, DbError};
use time::{Duration, OffsetDateTime};

/// Recency halves a record's raw heat every week.
pub const HALF_LIFE_HOURS: f64 = 168.0;
/// Accesses stop counting linearly over this many hours without a new one.
pub const FADE_HOURS: f64 = 4383.0;
/// Raw heat divided by this is the normalised value (ten fresh accesses make 1.0 before the cap).
pub const SCALE: f64 = 10.0;
/// Above this normalised value, the excess counts half.
pub const SOFT_CAP: f64 = 0.8;
/// Heat at or above this is hot.
pub const HOT: f64 = 0.7;
/// Heat at or above this (and below [`HOT`]) is warm; below it, cold.
pub const WARM: f64 = 0.2;
/// The most heat adds to a search score, as a fraction of the score.
pub const MAX_BOOST: f64 = 0.1;
/// How often the relay computes every row again.
pub const RECOMPUTE_EVERY: Duration = Duration::hours(6);

/// The accesses that still count `hours` after the last one: `accesses × max(0, 1 − hours / 4383)`.
///
/// Every access adds one to the count and is the newest, so the hours since the count last grew are the hours
/// since the last access; without new accesses, the whole count fades linearly and counts for nothing after
/// [`FADE_HOURS`] (about half a year). A negative count counts as none, and negative hours (a last access after
/// `now`, from a clock set back) as zero.
pub fn effective_access(accesses: i64, hours: f64) -> f64 {
    let h = if hours.is_nan() { 0.0 } else { hours.max(0.0) };
    let n = accesses.max(0) as f64;
    n * (1.0 - h / FADE_HOURS).max(0.0)
}

/// Effective accesses decayed by recency: `effective × e^(−λ·hours)` with `λ = ln 2 / 168`.
pub fn raw_heat(effective: f64, hours: f64) -> f64 {
    let h = if hours.is_nan() { 0.0 } else { hours.max(0.0) };
    let e = if effective.is_nan() {
        0.0
    } else {
        effective.max(0.0)
    };
    e * (-(std::f64::consts::LN_2 / HALF_LIFE_HOURS) * h).exp()
}

/// Raw heat on the 0..=1 scale: divided by [`SCALE`], the part above [`SOFT_CAP`] halved, never above 1.
pub fn normalise(raw: f64) -> f64 {
    if raw.is_nan() || raw <= 0.0 {
        return 0.0;
    }
    let n = raw / SCALE;
    let capped = if n <= SOFT_CAP {
        n
    } else {
        SOFT_CAP + (n - SOFT_CAP) * 0.5
    };
    capped.min(1.0)
}

/// A record's heat `hours` after its last access, given how many accesses it has had.
pub fn heat(accesses: i64, hours: f64) -> f64 {
    normalise(raw_heat(effective_access(accesses, hours), hours))
}

/// The tier of a heat value: hot at or above [`HOT`], warm at or above [`WARM`], else cold.
pub fn tier(heat: f64) -> Tier {
    if heat >= HOT {
        Tier::Hot
    } else if heat >= WARM {
        Tier::Warm
    } else {
        Tier::Cold
    }
}

/// A fused search score with heat as a tiebreaker: `score × (1 + 0.1 · heat)`, heat taken in 0..=1.
pub fn tiebreak(score: f64, heat: f64) -> f64 {
    let h = if heat.is_nan() {
        0.0
    } else {
        heat.clamp(0.0, 1.0)
    };
    score * (1.0 + MAX_BOOST * h)
}

/// The formula as the store's [`Rule`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Formula;

impl Rule for Formula {
    fn score(&self, accesses: i64, last_access: OffsetDateTime, now: OffsetDateTime) -> Scored {
        let hours = (now - last_access).as_seconds_f64() / 3600.0;
        let effective = effective_access(accesses, hours);
        let h = normalise(raw_heat(effective, hours));
        Scored {
            effective,
            heat: h,
            tier: tier(h),
        }
    }
}

/// What went wrong recording or computing heat.
#[derive(Debug, thiserror::Error)]
pub enum HeatError {
    #[error("unknown record kind {0:?}")]
    UnknownKind(String),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl HeatError {
    pub fn hint(&self) -> &'static str {
        match self {
            HeatError::UnknownKind(_) => "the kinds are thread, entity and event",
            HeatError::Db(_) => "retry; if it persists, check the relay's log",
        }
    }
}

/// Records one use of a record (`kind` is `thread`, `entity` or `event`) at `at`: one upsert of its row.
pub fn record_access(
    conn: &Connection,
    kind: &str,
    id: &str,
    at: OffsetDateTime,
) -> Result<(), HeatError> {
    let k = Kind::parse(kind).ok_or_else(|| HeatError::UnknownKind(kind.to_owned()))?;
    Ok(rows::record_access(conn, k, id, at, &Formula)?)
}

/// One use of each of `threads` at `at` (a batch of new turns: one access per thread, not per turn).
pub fn record_thread_accesses(
    conn: &Connection,
    threads: &[String],
    at: OffsetDateTime,
) -> Result<(), DbError> {
    rows::record_accesses(conn, Kind::Thread, threads, at, &Formula)
}

/// Computes every row's heat again at `now`; returns how many.
pub fn recompute(conn: &Connection, now: OffsetDateTime) -> Result<u64, DbError> {
    rows::recompute(conn, now, &Formula)
}

/// Whether the recompute is due at `now`: never run, or last run [`RECOMPUTE_EVERY`] or longer ago (or, after a
/// clock set back, in the future).
pub fn due(conn: &Connection, now: OffsetDateTime) -> Result<bool, DbError> {
    Ok(match rows::last_recompute(conn)? {
        None => true,
        Some(last) => now - last >= RECOMPUTE_EVERY || last > now,
    })
}

/// The heat job's step: [`recompute`] when [`due`], else nothing. `Some(rows)` when it ran.
pub fn run_if_due(conn: &Connection, now: OffsetDateTime) -> Result<Option<u64>, DbError> {
    if due(conn, now)? {
        recompute(conn, now).map(Some)
    } else {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tier_boundaries() {
        assert_eq!(tier(0.7), Tier::Hot);
        assert_eq!(tier(0.699_999), Tier::Warm);
        assert_eq!(tier(0.2), Tier::Warm);
        assert_eq!(tier(0.199_999), Tier::Cold);
        assert_eq!(tier(0.0), Tier::Cold);
        assert_eq!(tier(1.0), Tier::Hot);
    }

    #[test]
    fn the_seed_examples() {
        // Three fresh accesses: 0.3, warm. One: 0.1, cold. Seven: 0.7, hot.
        assert!((heat(3, 0.0) - 0.3).abs() < 1e-12);
        assert_eq!(tier(heat(1, 0.0)), Tier::Cold);
        assert_eq!(tier(heat(7, 0.0)), Tier::Hot);
        // Twelve fresh accesses: 1.2 normalised, 0.8 + 0.4 / 2 = 1.0.
        assert!((heat(12, 0.0) - 1.0).abs() < 1e-12);
        // Ten: 0.8 + 0.2 / 2 = 0.9.
        assert!((heat(10, 0.0) - 0.9).abs() < 1e-12);
        // A hundred accesses half a year ago count for nothing.
        assert_eq!(heat(100, FADE_HOURS), 0.0);
    }

    #[test]
    fn tiebreak_is_at_most_ten_percent() {
        assert_eq!(tiebreak(2.0, 0.0), 2.0);
        assert!((tiebreak(2.0, 1.0) - 2.2).abs() < 1e-12);
        assert!((tiebreak(2.0, 5.0) - 2.2).abs() < 1e-12);
        assert_eq!(tiebreak(2.0, f64::NAN), 2.0);
    }
}
