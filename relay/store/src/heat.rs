//! Heat's rows: per record, how often and how lately this relay's user used it (table `heat`, migration 0025).
//! Machine-local: never in a snapshot or a sync page.
//!
//! The store keeps the counts and the last computed value; how counts become heat and which tier a value is in are
//! `personkit-heat`'s rules, handed in as a [`Rule`]. Every access is aggregated into its record's one row, so the
//! table grows with the records used, not with the uses.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use time::OffsetDateTime;

use crate::clock::{fmt_time, parse_time};
use crate::db::DbError;
use crate::named::{self, Table};

/// The most ids one [`heat_of`] call reads; more is a caller's bug, refused.
pub const MAX_IDS: usize = 10_000;
/// The most rows one [`list`] call returns.
pub const MAX_LIST: u32 = 1_000;
/// Ids bound into one statement of [`heat_of`].
const IDS_PER_STATEMENT: usize = 500;

/// What a heat row is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Thread,
    Entity,
    Event,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Thread => "thread",
            Kind::Entity => "entity",
            Kind::Event => "event",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "thread" => Some(Kind::Thread),
            "entity" => Some(Kind::Entity),
            "event" => Some(Kind::Event),
            _ => None,
        }
    }
}

/// The stored names of the tiers (where their boundaries lie is `personkit-heat`'s rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Hot,
    Warm,
    Cold,
}

impl Tier {
    pub const ALL: [Tier; 3] = [Tier::Hot, Tier::Warm, Tier::Cold];

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Hot => "hot",
            Tier::Warm => "warm",
            Tier::Cold => "cold",
        }
    }

    pub fn parse(s: &str) -> Option<Tier> {
        match s {
            "hot" => Some(Tier::Hot),
            "warm" => Some(Tier::Warm),
            "cold" => Some(Tier::Cold),
            _ => None,
        }
    }
}

/// A record's heat as computed at one time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    /// Accesses that still count (at most `accesses`, never negative).
    pub effective: f64,
    /// In 0..=1; values outside are clamped before they are stored.
    pub heat: f64,
    pub tier: Tier,
}

/// How a record's counts become heat at a time; `personkit-heat` answers it.
pub trait Rule {
    fn score(&self, accesses: i64, last_access: OffsetDateTime, now: OffsetDateTime) -> Scored;
}

/// One stored heat row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeatRow {
    pub kind: Kind,
    pub id: String,
    pub accesses: i64,
    pub effective: f64,
    pub last_access: String,
    pub heat: f64,
    pub tier: Tier,
    pub computed_at: String,
}

fn clamp_heat(h: f64) -> f64 {
    if h.is_nan() { 0.0 } else { h.clamp(0.0, 1.0) }
}

fn clamp_effective(e: f64) -> f64 {
    if e.is_nan() { 0.0 } else { e.max(0.0) }
}

fn store_scored(
    conn: &Connection,
    kind: Kind,
    id: &str,
    s: Scored,
    computed_at: &str,
) -> Result<(), DbError> {
    conn.prepare_cached(
        "UPDATE heat SET effective = ?3, heat = ?4, tier = ?5, computed_at = ?6 WHERE kind = ?1 AND record_id = ?2",
    )?
    .execute(params![
        kind.as_str(),
        id,
        clamp_effective(s.effective),
        clamp_heat(s.heat),
        s.tier.as_str(),
        computed_at
    ])?;
    Ok(())
}

/// Records one access to a record at `at`: its count goes up by one, its last access moves to `at` (never back)
/// and its heat is computed again by `rule` at `at`. One upsert and one update of the same row, in a transaction
/// of their own unless the caller has one open.
pub fn record_access(
    conn: &Connection,
    kind: Kind,
    id: &str,
    at: OffsetDateTime,
    rule: &dyn Rule,
) -> Result<(), DbError> {
    if conn.is_autocommit() {
        let tx = crate::db::begin_write(conn)?;
        access_in(&tx, kind, id, at, rule)?;
        tx.commit()?;
        Ok(())
    } else {
        access_in(conn, kind, id, at, rule)
    }
}

/// [`record_access`] for several records at once (a batch of turns touching a few threads): one access each,
/// in one transaction (the caller's, when one is open).
pub fn record_accesses(
    conn: &Connection,
    kind: Kind,
    ids: &[String],
    at: OffsetDateTime,
    rule: &dyn Rule,
) -> Result<(), DbError> {
    if ids.is_empty() {
        return Ok(());
    }
    if !conn.is_autocommit() {
        for id in ids {
            access_in(conn, kind, id, at, rule)?;
        }
        return Ok(());
    }
    let tx = crate::db::begin_write(conn)?;
    for id in ids {
        access_in(&tx, kind, id, at, rule)?;
    }
    tx.commit()?;
    Ok(())
}

fn access_in(
    conn: &Connection,
    kind: Kind,
    id: &str,
    at: OffsetDateTime,
    rule: &dyn Rule,
) -> Result<(), DbError> {
    let at_s = fmt_time(at);
    let (accesses, last): (i64, String) = conn
        .prepare_cached(
            "INSERT INTO heat (kind, record_id, accesses, last_access, computed_at) VALUES (?1, ?2, 1, ?3, ?3)
             ON CONFLICT (kind, record_id) DO UPDATE SET
               accesses = accesses + 1, last_access = max(last_access, excluded.last_access)
             RETURNING accesses, last_access",
        )?
        .query_row(params![kind.as_str(), id, at_s], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    // Computed at the stored (millisecond) precision, so a record is scored at its last access exactly.
    let at = parse_time(&at_s).unwrap_or(at);
    let last_t = parse_time(&last).unwrap_or(at);
    let now = last_t.max(at);
    store_scored(
        conn,
        kind,
        id,
        rule.score(accesses, last_t, now),
        &fmt_time(now),
    )
}

/// The stored heat of each of `ids` that has a row (a record without one has never been used: heat 0).
/// At most [`MAX_IDS`] ids, read [`IDS_PER_STATEMENT`] to a statement.
pub fn heat_of(
    conn: &Connection,
    kind: Kind,
    ids: &[String],
) -> Result<HashMap<String, f64>, DbError> {
    if ids.len() > MAX_IDS {
        return Err(DbError::Invalid(format!(
            "heat of {} records asked at once; at most {MAX_IDS}",
            ids.len()
        )));
    }
    let mut out = HashMap::new();
    let mut stmt = conn.prepare_cached(
        "SELECT h.record_id, h.heat FROM json_each(?2) j JOIN heat h ON h.kind = ?1 AND h.record_id = j.value",
    )?;
    for chunk in ids.chunks(IDS_PER_STATEMENT) {
        let list = serde_json::to_string(chunk).unwrap_or_else(|_| "[]".into());
        let rows = stmt.query_map(params![kind.as_str(), list], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, f64>(1)?))
        })?;
        for row in rows {
            let (id, h) = row?;
            out.insert(id, h);
        }
    }
    Ok(out)
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<HeatRow> {
    let kind: String = r.get(0)?;
    let tier: String = r.get(6)?;
    Ok(HeatRow {
        kind: Kind::parse(&kind).unwrap_or(Kind::Thread),
        id: r.get(1)?,
        accesses: r.get(2)?,
        effective: r.get(3)?,
        last_access: r.get(4)?,
        heat: r.get(5)?,
        tier: Tier::parse(&tier).unwrap_or(Tier::Cold),
        computed_at: r.get(7)?,
    })
}

const COLUMNS: &str = "kind, record_id, accesses, effective, last_access, heat, tier, computed_at";

/// The stored heat rows of `kind` (any kind when `None`), of one tier when given, hottest first (ties by kind and
/// id), at most `limit` (capped at [`MAX_LIST`]). Records never used have no row and are not listed.
pub fn list(
    conn: &Connection,
    kind: Option<Kind>,
    tier: Option<Tier>,
    limit: u32,
) -> Result<Vec<HeatRow>, DbError> {
    let limit = limit.min(MAX_LIST);
    let rows = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM heat WHERE (?1 IS NULL OR kind = ?1) AND (?2 IS NULL OR tier = ?2)
             ORDER BY heat DESC, kind, record_id LIMIT ?3"
        ))?
        .query_map(
            params![kind.map(Kind::as_str), tier.map(Tier::as_str), limit],
            row,
        )?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// One record's stored heat row, if it has one.
pub fn get(conn: &Connection, kind: Kind, id: &str) -> Result<Option<HeatRow>, DbError> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM heat WHERE kind = ?1 AND record_id = ?2"
        ))?
        .query_row(params![kind.as_str(), id], row)
        .optional()?)
}

/// Rows per transaction of [`recompute`].
pub const RECOMPUTE_BATCH: usize = 500;

/// Computes every row's heat again at `now` with `rule` (heat decays with time, so values drift toward cold
/// between accesses), [`RECOMPUTE_BATCH`] rows a transaction in rowid order, and notes `now` as the last
/// recompute. Returns the rows computed.
pub fn recompute(conn: &Connection, now: OffsetDateTime, rule: &dyn Rule) -> Result<u64, DbError> {
    let now_s = fmt_time(now);
    let mut after: i64 = 0;
    let mut done: u64 = 0;
    loop {
        let tx = crate::db::begin_write(conn)?;
        let batch: Vec<(i64, i64, String)> = tx
            .prepare_cached(
                "SELECT rowid, accesses, last_access FROM heat WHERE rowid > ?1 ORDER BY rowid LIMIT ?2",
            )?
            .query_map(params![after, RECOMPUTE_BATCH as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<Result<_, _>>()?;
        let Some(last) = batch.last() else {
            tx.commit()?;
            break;
        };
        after = last.0;
        {
            let mut upd = tx.prepare_cached(
                "UPDATE heat SET effective = ?2, heat = ?3, tier = ?4, computed_at = ?5 WHERE rowid = ?1",
            )?;
            for (rowid, accesses, last_access) in &batch {
                let last_t = parse_time(last_access).unwrap_or(now);
                let s = rule.score(*accesses, last_t, now);
                upd.execute(params![
                    rowid,
                    clamp_effective(s.effective),
                    clamp_heat(s.heat),
                    s.tier.as_str(),
                    now_s
                ])?;
            }
        }
        done += batch.len() as u64;
        let short = batch.len() < RECOMPUTE_BATCH;
        tx.commit()?;
        if short {
            break;
        }
    }
    named::set(conn, Table::Heat, "last_recompute", Some(&now_s))?;
    Ok(done)
}

/// When [`recompute`] last ran, if ever.
pub fn last_recompute(conn: &Connection) -> Result<Option<OffsetDateTime>, DbError> {
    Ok(named::get(conn, Table::Heat, "last_recompute")?
        .as_deref()
        .and_then(parse_time))
}

/// Inside the forget transaction: the heat rows of threads the forget removed whole go.
pub(crate) fn forget_thread(
    tx: &rusqlite::Transaction<'_>,
    thread_id: &str,
) -> Result<(), DbError> {
    tx.prepare_cached("DELETE FROM heat WHERE kind = 'thread' AND record_id = ?1")?
        .execute([thread_id])?;
    Ok(())
}
