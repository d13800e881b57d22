//! The short tier: a digest of the most recent days that fit the budget, assembled without a model.
//!
//! The walk starts at the newest captured turn before now and goes back a day with activity at a time (days
//! without any are skipped by one indexed look-up), rendering each day: its threads by site with their titles and
//! first prompts, the agent sessions (harvested transcripts) with what was asked, and the approved knowledge made
//! that day, decisions first. Days are added while the total fits the budget (the newest day is always there, cut
//! to fit when it alone is too long) and written oldest first. Every read is bounded: at most [`MAX_DAYS`] days,
//! [`MAX_THREADS_PER_DAY`] threads and [`MAX_KNOWLEDGE_PER_DAY`] entries a day.

use std::fmt::Write as _;
use std::time::Instant;

use serde::Serialize;
use time::{Date, OffsetDateTime, UtcOffset};

use personkit_store::Connection;
use personkit_store::clock::{fmt_time, parse_time};
use personkit_store::memory::{self as rows, NewVersion, ThreadActivity};

use crate::{LastRun, MemoryError, Settings, Tier, clear_due, cut_to_budget, record_run, tokens};

/// Most days one digest looks at.
pub const MAX_DAYS: usize = 60;
/// Most threads listed for a day (the rest are counted).
pub const MAX_THREADS_PER_DAY: u32 = 40;
/// Most approved entries listed for a day.
pub const MAX_KNOWLEDGE_PER_DAY: u32 = 20;
/// Characters of a first prompt shown.
const PROMPT_CHARS: u32 = 240;

/// A digest before it is stored.
#[derive(Debug, Clone, Serialize)]
pub struct Digest {
    pub body: String,
    pub tokens: usize,
    /// Days it covers, oldest first (local dates).
    pub days: Vec<String>,
    /// The threads it mentions.
    pub sources: Vec<String>,
    pub covers_from: Option<String>,
    pub covers_to: Option<String>,
}

/// A local day's bounds as stored times.
fn day_bounds(day: Date, local: UtcOffset) -> (String, String) {
    let start = day.midnight().assume_offset(local);
    (fmt_time(start), fmt_time(start + time::Duration::days(1)))
}

/// A stored time as local `HH:MM`.
fn clock_time(stored: &str, local: UtcOffset) -> String {
    parse_time(stored)
        .map(|t| {
            let t = t.to_offset(local);
            format!("{:02}:{:02}", t.hour(), t.minute())
        })
        .unwrap_or_default()
}

/// A site as people say it: `chatgpt` of `browser-ext:chatgpt`, `claude-code` of `harvest:claude-code`.
pub fn site_name(surface: &str) -> &str {
    surface.rsplit_once(':').map_or(surface, |(_, s)| s)
}

fn one_line(s: &str) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    flat.replace(['[', ']'], "")
}

fn render_day(
    conn: &Connection,
    day: Date,
    local: UtcOffset,
    sources: &mut Vec<String>,
) -> Result<String, MemoryError> {
    let (from, to) = day_bounds(day, local);
    let threads = rows::activity(conn, &from, &to, MAX_THREADS_PER_DAY + 1, PROMPT_CHARS)?;
    let knowledge = rows::approved_knowledge_between(conn, &from, &to, MAX_KNOWLEDGE_PER_DAY)?;
    let mut out = String::new();
    let _ = writeln!(out, "## {} ({})", day, day.weekday());
    let (agents, chats): (Vec<&ThreadActivity>, Vec<&ThreadActivity>) = threads
        .iter()
        .take(MAX_THREADS_PER_DAY as usize)
        .partition(|t| t.surface.starts_with("harvest:"));
    let line = |t: &ThreadActivity, asked: &str| {
        let mut l = format!(
            "- {} {} — {} ({} turns)",
            clock_time(&t.first_at, local),
            site_name(&t.surface),
            t.title
                .as_deref()
                .map(one_line)
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "untitled".into()),
            t.turns
        );
        if let Some(p) = t
            .first_prompt
            .as_deref()
            .map(one_line)
            .filter(|p| !p.is_empty())
        {
            let _ = write!(l, "; {asked}: {p}");
        }
        l
    };
    if !chats.is_empty() {
        out.push_str("Conversations:\n");
        for t in &chats {
            out.push_str(&line(t, "first prompt"));
            out.push('\n');
        }
    }
    if !agents.is_empty() {
        out.push_str("Agent sessions:\n");
        for t in &agents {
            out.push_str(&line(t, "asked"));
            out.push('\n');
        }
    }
    if threads.len() > MAX_THREADS_PER_DAY as usize {
        out.push_str("- … and more threads this day\n");
    }
    let (decisions, other): (Vec<_>, Vec<_>) = knowledge.iter().partition(|k| k.kind == "decision");
    if !decisions.is_empty() {
        out.push_str("Decisions:\n");
        for k in decisions {
            let _ = writeln!(out, "- {}: {}", one_line(&k.topic), one_line(&k.position));
        }
    }
    if !other.is_empty() {
        out.push_str("Knowledge approved:\n");
        for k in other {
            let _ = writeln!(
                out,
                "- [{}] {}: {}",
                k.kind,
                one_line(&k.topic),
                one_line(&k.position)
            );
        }
    }
    sources.extend(threads.iter().map(|t| t.thread_id.clone()));
    Ok(out)
}

/// The digest as of `now` within `budget` tokens; `local` is the offset days are cut at.
pub fn build(
    conn: &Connection,
    budget: usize,
    now: OffsetDateTime,
    local: UtcOffset,
) -> Result<Digest, MemoryError> {
    let header = "# Recent activity (personkit short memory)\n";
    let mut used = tokens(header);
    let mut days: Vec<(Date, String, Vec<String>)> = Vec::new();
    let mut cursor = fmt_time(now);
    while days.len() < MAX_DAYS {
        let Some(last) = rows::last_capture_before(conn, &cursor)? else {
            break;
        };
        let Some(at) = parse_time(&last) else { break };
        let day = at.to_offset(local).date();
        let mut srcs = Vec::new();
        let text = render_day(conn, day, local, &mut srcs)?;
        let need = tokens(&text) + 1;
        if used + need > budget {
            if days.is_empty() {
                let (cut, _) = cut_to_budget(&text, budget.saturating_sub(used + 1));
                days.push((day, cut, srcs));
            }
            break;
        }
        used += need;
        days.push((day, text, srcs));
        cursor = day_bounds(day, local).0;
    }
    days.reverse();
    let mut body = header.to_owned();
    let mut sources = Vec::new();
    for (_, text, srcs) in &days {
        body.push('\n');
        body.push_str(text);
        sources.extend(srcs.iter().cloned());
    }
    sources.sort();
    sources.dedup();
    let covers_from = days.first().map(|(d, _, _)| day_bounds(*d, local).0);
    let covers_to = days.last().map(|(d, _, _)| day_bounds(*d, local).1);
    Ok(Digest {
        tokens: tokens(&body),
        body,
        days: days.iter().map(|(d, _, _)| d.to_string()).collect(),
        sources,
        covers_from,
        covers_to,
    })
}

/// Builds the digest and stores it as a new version unless it equals the current one. `trigger` is `manual` or
/// `scheduled`.
pub fn run(
    conn: &Connection,
    settings: &Settings,
    now: OffsetDateTime,
    local: UtcOffset,
    trigger: &str,
) -> Result<LastRun, MemoryError> {
    if !settings.short.enabled {
        return Err(MemoryError::Off(
            "the short tier is off ([memory.short] enabled = false)".into(),
        ));
    }
    let started = Instant::now();
    let digest = build(conn, settings.short.budget, now, local)?;
    let current = rows::latest(conn, Tier::Short.as_str())?;
    let unchanged = current.as_ref().is_some_and(|c| c.body == digest.body);
    let (outcome, version, message) = if digest.days.is_empty() {
        ("unchanged", None, "nothing captured yet".to_owned())
    } else if unchanged {
        (
            "unchanged",
            current.map(|c| c.id),
            "nothing new since the current version".to_owned(),
        )
    } else {
        let v = rows::insert(
            conn,
            &NewVersion {
                tier: "short".into(),
                body: digest.body.clone(),
                tokens: digest.tokens as u64,
                covers_from: digest.covers_from.clone(),
                covers_to: digest.covers_to.clone(),
                sources: digest.sources.clone(),
                ..Default::default()
            },
            now,
        )?;
        (
            "ok",
            Some(v.id),
            format!(
                "{} days, {} threads, {} tokens",
                digest.days.len(),
                digest.sources.len(),
                digest.tokens
            ),
        )
    };
    clear_due(conn, Tier::Short)?;
    let run = LastRun {
        at: fmt_time(now),
        outcome: outcome.into(),
        message,
        version,
        tokens: digest.tokens as u64,
        elapsed_ms: started.elapsed().as_millis() as u64,
        trigger: trigger.into(),
    };
    record_run(conn, Tier::Short, &run)?;
    Ok(run)
}
