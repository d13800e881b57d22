//! What an agent loads at the start of a session, in tiers:
//!
//! | tier | holds |
//! |---|---|
//! | 1 | the profile |
//! | 2 | + mid and short memory, approved knowledge |
//! | 3 | + long memory |
//! | 4 | + today's open threads |
//!
//! Sections are written in reading order (profile, long, mid, knowledge, short, today) and given the budget in
//! order of worth (profile, mid, long, knowledge, short, today): each takes what it needs of what is left and is cut
//! at a line end when that is not enough, so the whole is within the budget. Compact (the default) drops blank
//! lines and gives knowledge one line an entry; `full` keeps the texts as stored and each entry's reasoning. Only
//! approved knowledge and versions not withdrawn are read; nothing here writes.

use std::path::Path;

use serde::Serialize;
use time::{OffsetDateTime, UtcOffset};

use personkit_store::Connection;
use personkit_store::clock::fmt_time;
use personkit_store::knowledge as krows;
use personkit_store::memory as rows;

use crate::short::site_name;
use crate::{MemoryError, cut_to_budget, profile, tokens};

/// The context tiers.
pub const TIERS: std::ops::RangeInclusive<u8> = 1..=4;
/// Budget bounds in tokens.
pub const BUDGET_RANGE: (usize, usize) = (100, 32_000);
/// Most approved entries read.
const KNOWLEDGE_LIMIT: u32 = 60;
/// Most of today's threads listed.
const TODAY_LIMIT: u32 = 30;

/// A tier's budget when the caller gives none.
pub fn default_budget(tier: u8) -> usize {
    match tier {
        1 => 1_500,
        2 => 6_000,
        3 => 8_000,
        _ => 10_000,
    }
}

/// What a caller asks for.
#[derive(Debug, Clone)]
pub struct Ask {
    pub tier: u8,
    pub budget: Option<usize>,
    pub compact: bool,
}

impl Ask {
    /// Checks the tier and bounds the budget.
    pub fn checked(tier: u8, budget: Option<usize>, compact: bool) -> Result<Ask, MemoryError> {
        if !TIERS.contains(&tier) {
            return Err(MemoryError::Invalid(format!(
                "tier {tier}: use 1 (profile), 2 (+ memory and knowledge), 3 (+ long memory) or 4 (+ today's threads)"
            )));
        }
        if let Some(b) = budget
            && !(BUDGET_RANGE.0..=BUDGET_RANGE.1).contains(&b)
        {
            return Err(MemoryError::Invalid(format!(
                "budget {b}: use {} to {} tokens",
                BUDGET_RANGE.0, BUDGET_RANGE.1
            )));
        }
        Ok(Ask {
            tier,
            budget,
            compact,
        })
    }
}

/// One part of the context.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Section {
    /// `profile`, `long`, `mid`, `knowledge`, `short`, `today`.
    pub name: String,
    /// Where it came from: a version id, the profile's version, or how many entries or threads.
    pub source: Option<String>,
    pub created_at: Option<String>,
    pub tokens: usize,
    /// Cut to fit the budget.
    pub cut: bool,
    /// Nothing there yet (no version, no profile, no approved entries).
    pub empty: bool,
}

/// The assembled context.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Context {
    pub tier: u8,
    pub budget: usize,
    pub tokens: usize,
    pub compact: bool,
    pub sections: Vec<Section>,
    pub text: String,
}

struct Part {
    name: &'static str,
    title: &'static str,
    /// Budget priority (lower first).
    worth: u8,
    source: Option<String>,
    created_at: Option<String>,
    text: String,
}

fn squeeze(text: &str, compact: bool) -> String {
    if !compact {
        return text.trim().to_owned();
    }
    text.lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

fn version_part(
    conn: &Connection,
    tier: &str,
    name: &'static str,
    title: &'static str,
    worth: u8,
    compact: bool,
) -> Result<Part, MemoryError> {
    let v = rows::latest(conn, tier)?;
    Ok(Part {
        name,
        title,
        worth,
        source: v
            .as_ref()
            .map(|v| format!("{tier} version {} ({})", v.number, v.id)),
        created_at: v.as_ref().map(|v| v.created_at.clone()),
        text: v.map(|v| squeeze(&v.body, compact)).unwrap_or_default(),
    })
}

/// The context for `ask` as of `now` (`local`: where today begins), reading the profile at `profile_path`.
pub fn assemble(
    conn: &Connection,
    ask: &Ask,
    profile_path: &Path,
    now: OffsetDateTime,
    local: UtcOffset,
) -> Result<Context, MemoryError> {
    let budget = ask.budget.unwrap_or_else(|| default_budget(ask.tier));
    let c = ask.compact;
    let mut parts = Vec::new();
    let p = profile::current(conn, profile_path)?;
    parts.push(Part {
        name: "profile",
        title: "Who the user is and how they want you to work",
        worth: 0,
        source: p
            .version
            .as_ref()
            .map(|v| format!("profile version {}", v.number))
            .or_else(|| p.exists.then(|| "profile file".to_owned())),
        created_at: p.version.as_ref().map(|v| v.created_at.clone()),
        text: squeeze(&p.body, c),
    });
    if ask.tier >= 3 {
        parts.push(version_part(
            conn,
            "long",
            "long",
            "Long-term memory",
            2,
            c,
        )?);
    }
    if ask.tier >= 2 {
        parts.push(version_part(
            conn,
            "mid",
            "mid",
            "This week (mid-term memory)",
            1,
            c,
        )?);
        let entries = krows::approved_for_context(conn, KNOWLEDGE_LIMIT)?;
        let mut text = String::new();
        for e in &entries {
            let line = if c {
                format!("- [{}] {}: {}\n", e.kind, e.topic, e.position)
            } else {
                format!(
                    "- [{}] {}: {}\n  Why: {}{}\n",
                    e.kind,
                    e.topic,
                    e.position,
                    e.reasoning,
                    e.context
                        .as_deref()
                        .map(|x| format!("\n  When: {x}"))
                        .unwrap_or_default()
                )
            };
            text.push_str(&line);
        }
        parts.push(Part {
            name: "knowledge",
            title: "What the user holds (approved knowledge)",
            worth: 3,
            source: (!entries.is_empty()).then(|| format!("{} approved entries", entries.len())),
            created_at: None,
            text: text.trim_end().to_owned(),
        });
        parts.push(version_part(
            conn,
            "short",
            "short",
            "Recent days (short-term memory)",
            4,
            c,
        )?);
    }
    if ask.tier >= 4 {
        let today = now.to_offset(local).date().midnight().assume_offset(local);
        let threads = rows::activity(
            conn,
            &fmt_time(today),
            &fmt_time(now + time::Duration::seconds(1)),
            TODAY_LIMIT,
            160,
        )?;
        let mut text = String::new();
        for t in &threads {
            text.push_str(&format!(
                "- {} — {} ({} turns, thread {})\n",
                site_name(&t.surface),
                t.title.as_deref().unwrap_or("untitled"),
                t.turns,
                t.thread_id
            ));
        }
        parts.push(Part {
            name: "today",
            title: "Today's open threads",
            worth: 5,
            source: (!threads.is_empty()).then(|| format!("{} threads", threads.len())),
            created_at: None,
            text: text.trim_end().to_owned(),
        });
    }
    // Give the budget out by worth; a section's heading counts against it.
    let mut left = budget;
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by_key(|&i| parts[i].worth);
    let mut fitted: Vec<Option<(String, bool)>> = vec![None; parts.len()];
    for i in order {
        let part = &parts[i];
        if part.text.is_empty() {
            continue;
        }
        let head = tokens(&format!("## {}\n\n\n\n", part.title));
        if left <= head + 10 {
            fitted[i] = Some((String::new(), true));
            continue;
        }
        let (text, cut) = cut_to_budget(&part.text, left - head);
        left = left.saturating_sub(head + tokens(&text));
        fitted[i] = Some((text, cut));
    }
    let mut text = String::new();
    let mut sections = Vec::new();
    for (part, fit) in parts.into_iter().zip(fitted) {
        let (body, cut) = fit.unwrap_or_default();
        if !body.is_empty() {
            if !text.is_empty() {
                text.push_str(if c { "\n" } else { "\n\n" });
            }
            text.push_str(&format!("## {}\n", part.title));
            if !c {
                text.push('\n');
            }
            text.push_str(&body);
            text.push('\n');
        }
        sections.push(Section {
            name: part.name.into(),
            source: part.source,
            created_at: part.created_at,
            tokens: tokens(&body),
            cut,
            empty: part.text.is_empty(),
        });
    }
    Ok(Context {
        tier: ask.tier,
        budget,
        tokens: tokens(&text),
        compact: c,
        sections,
        text,
    })
}
