//! "Today": what the dashboard's `/today` page and `personkit today` both show, assembled once here — what was
//! captured today and this week per site and per project, current turns per day per site over the last
//! [`CHART_DAYS`] days, the knowledge entries waiting for approval, and capture health per surface (the overview's
//! rows: `personkit_store::read::surface_states`, coloured and explained by `personkit_shared::health`).
//!
//! Days are local days at a fixed offset from UTC the front end passes in (read once where the process starts,
//! `time::UtcOffset::current_local_offset`); "this week" starts on the local Monday at 00:00. A harvested agent
//! session's project is its transcript file's folder ([`personkit_import::harvest::project_of`]); threads of
//! the chat sites have none and are counted per site only.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use personkit_import::harvest::project_of;
use personkit_store::Connection;
use personkit_store::clock::fmt_time;
use personkit_store::read::activity::{self, MAX_THREADS, SurfaceCount};
use personkit_store::read::{self, ReadError, SurfaceState};
use serde::Serialize;
use time::{Date, Duration, OffsetDateTime, PrimitiveDateTime, Time, UtcOffset};

/// Days the chart covers, today included.
pub const CHART_DAYS: i64 = 90;
/// The surface prefix of harvested agent sessions, whose threads belong to projects.
const HARVEST: &str = "harvest:";

/// Everything the Today views show.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Today {
    pub generated_at: String,
    /// The offset from UTC local days were counted at.
    pub utc_offset_minutes: i32,
    /// Today's local date, `YYYY-MM-DD`.
    pub date: String,
    /// Since local midnight.
    pub today: Span,
    /// Since the local Monday, 00:00.
    pub week: Span,
    pub chart: Chart,
    /// Knowledge entries waiting for the user's approval.
    pub knowledge_pending: u64,
    /// Capture health per surface, as the overview shows it.
    pub health: Vec<SurfaceState>,
}

/// What was captured in one span, per site and per project.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Span {
    /// Start (inclusive) and end (exclusive), stored time form (UTC).
    pub since: String,
    pub until: String,
    /// The span's first local day, `YYYY-MM-DD`.
    pub first_day: String,
    /// Current turns captured in the span, and the threads they are in.
    pub turns: u64,
    pub threads: u64,
    pub sites: Vec<SurfaceCount>,
    /// Harvested agent sessions by project, most turns first; sessions whose tool names no project last.
    pub projects: Vec<ProjectCount>,
    /// True when the span held more agent sessions than were read (the project counts are then a lower bound).
    pub projects_truncated: bool,
}

/// The agent sessions of one project in a span.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProjectCount {
    /// The project folder's name; `None` for sessions whose tool's layout names no project (Codex, …).
    pub project: Option<String>,
    /// The tools (harvest sources) the sessions came from.
    pub tools: Vec<String>,
    pub threads: u64,
    pub turns: u64,
}

/// Current turns per local day per site.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Chart {
    /// The local dates, oldest first, today last.
    pub days: Vec<String>,
    /// Sites with at least one turn in the chart's days, by surface; each series lines up with `days`.
    pub sites: Vec<SiteSeries>,
    /// The largest number of turns on one day, all sites together.
    pub max_day: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SiteSeries {
    pub surface: String,
    pub turns: Vec<u64>,
    pub total: u64,
}

fn out_of_range() -> ReadError {
    ReadError::BadRequest("the date is out of range: check the system clock".into())
}

fn start_of(day: Date, offset: UtcOffset) -> OffsetDateTime {
    PrimitiveDateTime::new(day, Time::MIDNIGHT).assume_offset(offset)
}

/// The Today views at `now`, with local days at `offset`.
pub fn build(
    conn: &Connection,
    now: OffsetDateTime,
    offset: UtcOffset,
) -> Result<Today, ReadError> {
    let date = now.to_offset(offset).date();
    let until = start_of(date.next_day().ok_or_else(out_of_range)?, offset);
    let monday = date
        .checked_sub(Duration::days(i64::from(
            date.weekday().number_days_from_monday(),
        )))
        .ok_or_else(out_of_range)?;
    let first = date
        .checked_sub(Duration::days(CHART_DAYS - 1))
        .ok_or_else(out_of_range)?;
    let minutes = i32::from(offset.whole_hours()) * 60 + i32::from(offset.minutes_past_hour());

    let per_day = activity::turns_per_day(conn, start_of(first, offset), until, minutes)?;
    let mut days = Vec::with_capacity(CHART_DAYS as usize);
    let mut d = first;
    while d <= date {
        days.push(d.to_string());
        d = d.next_day().ok_or_else(out_of_range)?;
    }
    let index: BTreeMap<&str, usize> = days
        .iter()
        .enumerate()
        .map(|(i, d)| (d.as_str(), i))
        .collect();
    let mut series: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for c in &per_day {
        if let Some(&i) = index.get(c.day.as_str()) {
            series
                .entry(c.surface.clone())
                .or_insert_with(|| vec![0; days.len()])[i] += c.turns;
        }
    }
    let max_day = (0..days.len())
        .map(|i| series.values().map(|s| s[i]).sum::<u64>())
        .max()
        .unwrap_or(0);
    let sites = series
        .into_iter()
        .map(|(surface, turns)| SiteSeries {
            total: turns.iter().sum(),
            surface,
            turns,
        })
        .collect();

    Ok(Today {
        generated_at: fmt_time(now),
        utc_offset_minutes: minutes,
        date: date.to_string(),
        today: span(conn, date, until, offset)?,
        week: span(conn, monday, until, offset)?,
        chart: Chart {
            days,
            sites,
            max_day,
        },
        knowledge_pending: personkit_store::knowledge::counts(conn)?.pending,
        health: read::surface_states(conn, now)?,
    })
}

/// What was captured from local day `first` to `until`.
fn span(
    conn: &Connection,
    first: Date,
    until: OffsetDateTime,
    offset: UtcOffset,
) -> Result<Span, ReadError> {
    let since = start_of(first, offset);
    let sites = activity::per_surface(conn, since, until)?;
    let (projects, projects_truncated) = projects(conn, since, until)?;
    Ok(Span {
        since: fmt_time(since),
        until: fmt_time(until),
        first_day: first.to_string(),
        turns: sites.iter().map(|s| s.turns).sum(),
        threads: sites.iter().map(|s| s.threads).sum(),
        sites,
        projects,
        projects_truncated,
    })
}

/// The harvested sessions with turns in the span, grouped by the project of their transcript files.
fn projects(
    conn: &Connection,
    since: OffsetDateTime,
    until: OffsetDateTime,
) -> Result<(Vec<ProjectCount>, bool), ReadError> {
    let (threads, more) = activity::threads_in_span(conn, since, until, HARVEST, MAX_THREADS)?;
    let ids: Vec<String> = threads.iter().map(|t| t.thread_id.clone()).collect();
    let mut project: BTreeMap<String, String> = BTreeMap::new();
    for (thread, source, path) in personkit_store::harvest::thread_files(conn, &ids)? {
        if !project.contains_key(&thread)
            && let Some(p) = project_of(&source, Path::new(&path))
        {
            project.insert(thread, p);
        }
    }
    let mut groups: BTreeMap<Option<String>, (BTreeSet<String>, u64, u64)> = BTreeMap::new();
    for t in &threads {
        let g = groups
            .entry(project.get(&t.thread_id).cloned())
            .or_default();
        g.0.insert(
            t.surface
                .strip_prefix(HARVEST)
                .unwrap_or(&t.surface)
                .to_owned(),
        );
        g.1 += 1;
        g.2 += t.turns;
    }
    let mut out: Vec<ProjectCount> = groups
        .into_iter()
        .map(|(project, (tools, threads, turns))| ProjectCount {
            project,
            tools: tools.into_iter().collect(),
            threads,
            turns,
        })
        .collect();
    out.sort_by(|a, b| {
        a.project
            .is_none()
            .cmp(&b.project.is_none())
            .then(b.turns.cmp(&a.turns))
            .then(a.project.cmp(&b.project))
    });
    Ok((out, more))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use personkit_shared::wire::{ClientInfo, Observation, Role, build_observation};
    use personkit_store::ingest::{Origin, ingest_observations};
    use time::macros::{datetime, offset};

    fn obs(surface: &str, conv: &str, ord: u32, at: &str) -> Observation {
        let client = ClientInfo {
            app_version: "0.1.0".into(),
            device_id: "ext".into(),
        };
        let role = if ord.is_multiple_of(2) {
            Role::User
        } else {
            Role::Assistant
        };
        let text = format!("{conv} turn {ord}");
        build_observation(surface, conv, role, &text, Some(ord), None, at, client)
    }

    /// Saturday 2026-11-28 10:00 at UTC+02:00. Chat turns today, earlier this week, last week and 100 days ago;
    /// agent sessions of two projects (one from two tools) and one Codex session (no project).
    #[test]
    fn today_week_chart_and_projects() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = personkit_store::db::open(&dir.path().join("c.db")).unwrap();
        let now = datetime!(2026-11-28 08:00 UTC);
        let local = offset!(+2);
        let batch = vec![
            // Local 2026-11-28 00:30 = UTC 27th 22:30: today.
            obs("browser-ext:chatgpt", "a", 0, "2026-11-27T22:30:00Z"),
            obs("browser-ext:chatgpt", "a", 1, "2026-11-28T07:00:00Z"),
            // Local 27th 23:30: this week, not today.
            obs("browser-ext:chatgpt", "b", 0, "2026-11-27T21:30:00Z"),
            // Monday 23rd 00:10 local (= 22nd 22:10 UTC): this week; Sunday 22nd 23:50 local: last week.
            obs("browser-ext:claude", "c", 0, "2026-11-22T22:10:00Z"),
            obs("browser-ext:claude", "d", 0, "2026-11-22T21:50:00Z"),
            // Outside the chart.
            obs("browser-ext:claude", "e", 0, "2026-08-01T12:00:00Z"),
            obs("harvest:claude-code", "s1", 0, "2026-11-28T06:00:00Z"),
            obs("harvest:claude-code", "s1", 1, "2026-11-28T06:01:00Z"),
            obs("harvest:gemini-cli", "s2", 0, "2026-11-28T06:02:00Z"),
            obs("harvest:claude-code", "s3", 0, "2026-11-28T06:03:00Z"),
            obs("harvest:codex", "s4", 0, "2026-11-25T06:03:00Z"),
        ];
        let origin = Origin {
            device_id: "d".into(),
        };
        let r = ingest_observations(&mut conn, &origin, &batch, now).unwrap();
        assert_eq!(r.rejected, 0, "{r:?}");
        let thread = |s: &str, c: &str| personkit_shared::ids::thread_id(s, c).to_string();
        let link = |source: &str, path: &str, t: String| {
            personkit_store::harvest::link_threads(&conn, source, path, &[t]).unwrap();
        };
        link(
            "claude-code",
            "/h/.claude/projects/-home-ada-src-orbit/s1.jsonl",
            thread("harvest:claude-code", "s1"),
        );
        link(
            "gemini-cli",
            "/h/.gemini/tmp/orbit/chats/session-1.jsonl",
            thread("harvest:gemini-cli", "s2"),
        );
        link(
            "claude-code",
            "/h/.claude/projects/-home-ada-src-kite/s3.jsonl",
            thread("harvest:claude-code", "s3"),
        );
        link(
            "codex",
            "/h/.codex/sessions/2026/11/25/rollout-1.jsonl",
            thread("harvest:codex", "s4"),
        );

        let t = build(&conn, now, local).unwrap();
        assert_eq!((t.date.as_str(), t.utc_offset_minutes), ("2026-11-28", 120));
        assert_eq!(t.today.since, "2026-11-27T22:00:00.000Z");
        assert_eq!(t.week.first_day, "2026-11-23");
        let sites = |s: &Span| {
            s.sites
                .iter()
                .map(|c| (c.surface.clone(), c.threads, c.turns))
                .collect::<Vec<_>>()
        };
        let own = |v: &[(&str, u64, u64)]| {
            v.iter()
                .map(|(s, a, b)| ((*s).to_owned(), *a, *b))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            sites(&t.today),
            own(&[
                ("browser-ext:chatgpt", 1, 2),
                ("harvest:claude-code", 2, 3),
                ("harvest:gemini-cli", 1, 1)
            ])
        );
        assert_eq!((t.today.turns, t.today.threads), (6, 4));
        assert_eq!(
            sites(&t.week),
            own(&[
                ("browser-ext:chatgpt", 2, 3),
                ("browser-ext:claude", 1, 1),
                ("harvest:claude-code", 2, 3),
                ("harvest:codex", 1, 1),
                ("harvest:gemini-cli", 1, 1)
            ])
        );
        let projects = |s: &Span| {
            s.projects
                .iter()
                .map(|p| (p.project.clone(), p.tools.join("+"), p.threads, p.turns))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            projects(&t.today),
            vec![
                (Some("orbit".into()), "claude-code+gemini-cli".into(), 2, 3),
                (Some("kite".into()), "claude-code".into(), 1, 1),
            ]
        );
        assert_eq!(
            projects(&t.week).last().unwrap(),
            &(None, "codex".into(), 1, 1)
        );

        assert_eq!(t.chart.days.len(), CHART_DAYS as usize);
        assert_eq!(t.chart.days.last().unwrap(), "2026-11-28");
        assert_eq!(t.chart.days[0], "2026-08-31");
        let day = |d: &str| t.chart.days.iter().position(|x| x == d).unwrap();
        let gpt = t
            .chart
            .sites
            .iter()
            .find(|s| s.surface == "browser-ext:chatgpt")
            .unwrap();
        assert_eq!(
            (
                gpt.turns[day("2026-11-28")],
                gpt.turns[day("2026-11-27")],
                gpt.total
            ),
            (2, 1, 3)
        );
        let claude = t
            .chart
            .sites
            .iter()
            .find(|s| s.surface == "browser-ext:claude")
            .unwrap();
        assert_eq!(
            (
                claude.turns[day("2026-11-23")],
                claude.turns[day("2026-11-22")],
                claude.total
            ),
            (1, 1, 2),
            "the August turn is outside the chart"
        );
        assert_eq!(t.chart.max_day, 6);
        assert_eq!(t.knowledge_pending, 0);
        assert_eq!(t.health.len(), 5, "{:?}", t.health);
    }
}
