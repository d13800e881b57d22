//! `personkit-memory`: what an agent should know when it starts, kept as rolling memory.
//!
//! Three tiers, each a series of versions in the corpus (every version kept, diffable):
//! - **short** ([`short`], daily at 03:00 local, no model): a digest of the most recent days that fit its budget —
//!   per day the threads and sites, titles and first prompts, agent sessions, and the approved knowledge and
//!   decisions of that day, in time order;
//! - **mid** ([`distill`], Sundays at 03:30): the model summarises the newest short version — recurring themes,
//!   decisions, ongoing projects, current priorities;
//! - **long** ([`distill`], the 1st of the month at 04:00; off by default, so its first run is one the user asked
//!   for): the model integrates the newest mid version into the previous long one.
//!
//! Beside them, the **profile** ([`profile`]) the user writes about themselves, a Markdown file under
//! `~/.dotperson/`, versioned the same way. [`context`] assembles them in tiers for agents (MCP `get_context`,
//! `GET /v1/context`, `personkit context`). Forgetting a thread withdraws every version that drew on it (the
//! store blanks them in the forget transaction) and marks its tier due; [`due_now`] says which tiers to run again.
//!
//! **Invariant:** text for a model outside this process or loopback is scrubbed as the knowledge pipeline scrubs
//! it (`personkit_knowledge::privacy`), unless `[knowledge] scrub = "off"` was set; every call is in the audit log.
//! **Invariant:** a failed run leaves the previous version in place and says so in the tier's status.

pub mod context;
pub mod diff;
pub mod distill;
pub mod profile;
pub mod run;
pub mod short;

use std::path::Path;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use personkit_store::memory as rows;
use personkit_store::{Connection, DbError};

/// Why a run or a read could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("config: {0}")]
    Config(String),
    #[error(transparent)]
    Llm(#[from] personkit_llm::LlmError),
    /// The tier is switched off, or needs a model and none is configured.
    #[error("{0}")]
    Off(String),
    #[error("{0}")]
    Invalid(String),
    #[error("profile file {path}: {message}")]
    Profile { path: String, message: String },
}

impl MemoryError {
    /// A stable code for API errors.
    pub fn code(&self) -> &'static str {
        match self {
            MemoryError::Db(_) => "storage",
            MemoryError::Config(_) => "memory_config",
            MemoryError::Llm(e) => e.code(),
            MemoryError::Off(_) => "memory_tier_off",
            MemoryError::Invalid(_) => "invalid_argument",
            MemoryError::Profile { .. } => "profile_file",
        }
    }

    /// What to do next.
    pub fn hint(&self) -> &'static str {
        match self {
            MemoryError::Db(_) => "check the corpus with `personkit corpus health`",
            MemoryError::Config(_) => {
                "fix [memory.short], [memory.mid] or [memory.long] in ~/.dotperson/config.toml (enabled, budget, llm)"
            }
            MemoryError::Llm(e) => e.hint(),
            MemoryError::Off(_) => {
                "set [memory.<tier>] enabled = true, and [llm] (or [memory.<tier>.llm]) for mid and long"
            }
            MemoryError::Invalid(_) => "tiers are short, mid and long; context tiers are 1 to 4",
            MemoryError::Profile { .. } => {
                "the profile is a UTF-8 Markdown file of at most 64 KB; check its path and permissions"
            }
        }
    }
}

/// A tier of rolling memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Short,
    Mid,
    Long,
}

impl Tier {
    pub const ALL: [Tier; 3] = [Tier::Short, Tier::Mid, Tier::Long];

    pub fn parse(s: &str) -> Option<Tier> {
        match s {
            "short" => Some(Tier::Short),
            "mid" => Some(Tier::Mid),
            "long" => Some(Tier::Long),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Short => "short",
            Tier::Mid => "mid",
            Tier::Long => "long",
        }
    }

    /// When the tier runs by itself, in words.
    pub fn schedule(self) -> &'static str {
        match self {
            Tier::Short => "daily at 03:00 local time",
            Tier::Mid => "Sundays at 03:30 local time",
            Tier::Long => "on the 1st of each month at 04:00 local time",
        }
    }

    /// The most recent scheduled start at or before `now`, in `now`'s offset (the machine's local time).
    pub fn last_scheduled(self, now: OffsetDateTime) -> OffsetDateTime {
        let at = |d: time::Date, h: u8, m: u8| {
            d.with_hms(h, m, 0)
                .unwrap_or(d.midnight())
                .assume_offset(now.offset())
        };
        let today = now.date();
        let candidate = match self {
            Tier::Short => at(today, 3, 0),
            Tier::Mid => {
                let back = today.weekday().number_days_from_sunday();
                at(today - time::Duration::days(i64::from(back)), 3, 30)
            }
            Tier::Long => at(today.replace_day(1).unwrap_or(today), 4, 0),
        };
        if candidate <= now {
            return candidate;
        }
        match self {
            Tier::Short => candidate - time::Duration::days(1),
            Tier::Mid => candidate - time::Duration::days(7),
            Tier::Long => {
                let prev = today.replace_day(1).unwrap_or(today) - time::Duration::days(1);
                at(prev.replace_day(1).unwrap_or(prev), 4, 0)
            }
        }
    }
}

/// One tier's settings.
#[derive(Debug, Clone)]
pub struct TierSettings {
    pub enabled: bool,
    /// Most tokens a version holds.
    pub budget: usize,
    /// The tier's own model settings (keys of `[llm]`), replacing those of `[llm]`.
    pub llm: Option<toml::Value>,
}

/// `[memory.short]`, `[memory.mid]`, `[memory.long]`.
#[derive(Debug, Clone)]
pub struct Settings {
    pub short: TierSettings,
    pub mid: TierSettings,
    pub long: TierSettings,
}

impl Default for Settings {
    fn default() -> Self {
        let tier = |enabled, budget| TierSettings {
            enabled,
            budget,
            llm: None,
        };
        Settings {
            short: tier(true, 3_000),
            mid: tier(true, 2_000),
            long: tier(false, 2_000),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TierSection {
    enabled: Option<bool>,
    budget: Option<usize>,
    llm: Option<toml::Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Section {
    short: Option<TierSection>,
    mid: Option<TierSection>,
    long: Option<TierSection>,
}

#[derive(Deserialize, Default)]
struct File {
    #[serde(default)]
    memory: Option<toml::Value>,
}

/// Bounds of a tier's budget in tokens.
pub const BUDGET_RANGE: (usize, usize) = (200, 32_000);

impl Settings {
    /// `[memory.*]` from the config file at `path` (if any), over the defaults.
    pub fn load(path: Option<&Path>) -> Result<Settings, MemoryError> {
        let mut s = Settings::default();
        let Some(path) = path else { return Ok(s) };
        let text = std::fs::read_to_string(path)
            .map_err(|e| MemoryError::Config(format!("cannot read {}: {e}", path.display())))?;
        let file: File = toml::from_str(&text)
            .map_err(|e| MemoryError::Config(format!("{}: {e}", path.display())))?;
        let Some(section) = file.memory else {
            return Ok(s);
        };
        let m: Section = section
            .try_into()
            .map_err(|e| MemoryError::Config(format!("{} [memory]: {e}", path.display())))?;
        for (slot, given) in [
            (&mut s.short, m.short),
            (&mut s.mid, m.mid),
            (&mut s.long, m.long),
        ] {
            let Some(given) = given else { continue };
            slot.enabled = given.enabled.unwrap_or(slot.enabled);
            if let Some(b) = given.budget {
                slot.budget = b.clamp(BUDGET_RANGE.0, BUDGET_RANGE.1);
            }
            slot.llm = given.llm;
        }
        if s.short.llm.is_some() {
            return Err(MemoryError::Config(
                "[memory.short] llm: the short tier uses no model".into(),
            ));
        }
        Ok(s)
    }

    pub fn tier(&self, t: Tier) -> &TierSettings {
        match t {
            Tier::Short => &self.short,
            Tier::Mid => &self.mid,
            Tier::Long => &self.long,
        }
    }

    /// The model settings of `tier`: `[llm]` with the tier's own keys over it.
    pub fn llm_for(
        &self,
        tier: Tier,
        base: &personkit_llm::LlmConfig,
    ) -> Result<personkit_llm::LlmConfig, MemoryError> {
        match &self.tier(tier).llm {
            Some(t) => base
                .overridden(t.clone())
                .map_err(|e| MemoryError::Config(format!("[memory.{}.llm]: {e}", tier.as_str()))),
            None => Ok(base.clone()),
        }
    }
}

/// A tier's last run, as kept in its state (`last:<tier>`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct LastRun {
    pub at: String,
    /// `ok`, `unchanged` (nothing new: no version made) or `failed` (the previous version stays).
    pub outcome: String,
    pub message: String,
    pub version: Option<String>,
    pub tokens: u64,
    pub elapsed_ms: u64,
    /// `manual` or `scheduled`.
    pub trigger: String,
}

/// Records a tier's last run.
pub fn record_run(conn: &Connection, tier: Tier, run: &LastRun) -> Result<(), DbError> {
    let json = serde_json::to_string(run).unwrap_or_default();
    rows::set_state(conn, &format!("last:{}", tier.as_str()), Some(&json))
}

/// A tier's last run, if any.
pub fn last_run(conn: &Connection, tier: Tier) -> Result<Option<LastRun>, DbError> {
    Ok(rows::state(conn, &format!("last:{}", tier.as_str()))?
        .and_then(|s| serde_json::from_str(&s).ok()))
}

/// Whether the schedule wants `tier` run at `now` (local time): its last scheduled start passed since its last
/// run (a machine asleep at 03:00 catches up when it wakes), or — for short, which needs no model — a forget
/// withdrew its current version.
pub fn scheduled_due(conn: &Connection, tier: Tier, now: OffsetDateTime) -> Result<bool, DbError> {
    if tier == Tier::Short && due_now(conn)?.contains(&Tier::Short) {
        return Ok(true);
    }
    let last = last_run(conn, tier)?.and_then(|r| personkit_store::clock::parse_time(&r.at));
    Ok(last.is_none_or(|l| l < tier.last_scheduled(now)))
}

/// The tiers a forget withdrew a version of, since they last ran.
pub fn due_now(conn: &Connection) -> Result<Vec<Tier>, DbError> {
    let mut due = Vec::new();
    for t in Tier::ALL {
        if rows::state(conn, &format!("due:{}", t.as_str()))?.is_some() {
            due.push(t);
        }
    }
    Ok(due)
}

/// Clears a tier's due mark (after a run that made a version).
pub fn clear_due(conn: &Connection, tier: Tier) -> Result<(), DbError> {
    rows::set_state(conn, &format!("due:{}", tier.as_str()), None)
}

/// A tier as `personkit distill status` and `/v1/distill/status` show it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct TierStatus {
    pub tier: Tier,
    pub enabled: bool,
    pub budget: usize,
    pub schedule: &'static str,
    /// The model (`describe` of its settings), `none` for short, or why there is none.
    pub model: String,
    pub versions: u64,
    pub withdrawn: u64,
    /// The newest version in use (not withdrawn).
    pub current: Option<VersionHead>,
    pub last_run: Option<LastRun>,
    /// A forget withdrew a version: the tier runs again (short at once, mid and long at their next run).
    pub due: bool,
}

/// A version without its body.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct VersionHead {
    pub id: String,
    pub number: u64,
    pub created_at: String,
    pub tokens: u64,
    pub model: Option<String>,
    pub withdrawn_at: Option<String>,
}

impl From<&rows::Version> for VersionHead {
    fn from(v: &rows::Version) -> Self {
        VersionHead {
            id: v.id.clone(),
            number: v.number,
            created_at: v.created_at.clone(),
            tokens: v.tokens,
            model: v.model.clone(),
            withdrawn_at: v.withdrawn_at.clone(),
        }
    }
}

/// Every tier's status under `settings` and the `[llm]` settings `llm` (`Err`: a broken configuration).
pub fn status(
    conn: &Connection,
    settings: &Settings,
    llm: &Result<personkit_llm::LlmConfig, personkit_llm::LlmError>,
) -> Result<Vec<TierStatus>, DbError> {
    let counts = rows::counts(conn)?;
    let due = due_now(conn)?;
    let mut out = Vec::new();
    for t in Tier::ALL {
        let s = settings.tier(t);
        let (versions, withdrawn) = counts
            .iter()
            .find(|(tier, _, _)| tier == t.as_str())
            .map_or((0, 0), |(_, n, w)| (*n, *w));
        let model = match (t, llm) {
            (Tier::Short, _) => "none (no model: the digest is assembled)".to_owned(),
            (_, Ok(base)) => match settings.llm_for(t, base) {
                Ok(c) if c.kind == personkit_llm::LlmKind::None => {
                    "none configured: set [llm] to run this tier".to_owned()
                }
                Ok(c) => c.describe(),
                Err(e) => format!("configuration error: {e}"),
            },
            (_, Err(e)) => format!("configuration error: {e}"),
        };
        out.push(TierStatus {
            tier: t,
            enabled: s.enabled,
            budget: s.budget,
            schedule: t.schedule(),
            model,
            versions,
            withdrawn,
            current: rows::latest(conn, t.as_str())?
                .as_ref()
                .map(VersionHead::from),
            last_run: last_run(conn, t)?,
            due: due.contains(&t),
        });
    }
    Ok(out)
}

/// Roughly how many tokens `text` is (the same estimate the model layer uses).
pub fn tokens(text: &str) -> usize {
    personkit_llm::estimate_tokens(text)
}

/// `text` cut at a line end so that it holds at most `budget` tokens, with a marker when cut.
pub fn cut_to_budget(text: &str, budget: usize) -> (String, bool) {
    if tokens(text) <= budget {
        return (text.to_owned(), false);
    }
    const MARK: &str = "\n… (cut to the budget)";
    let max_bytes = (budget * 4).saturating_sub(MARK.len());
    let mut end = 0;
    for (i, _) in text.match_indices('\n') {
        if i > max_bytes {
            break;
        }
        end = i;
    }
    if end == 0 {
        end = max_bytes.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
    }
    (format!("{}{MARK}", text[..end].trim_end()), true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn cutting_keeps_whole_lines_and_the_budget() {
        let text: String = (0..200).map(|i| format!("line number {i}\n")).collect();
        let (cut, was) = cut_to_budget(&text, 100);
        assert!(was);
        assert!(tokens(&cut) <= 100, "{}", tokens(&cut));
        assert!(cut.ends_with("(cut to the budget)"));
        assert!(cut.lines().rev().nth(1).unwrap().starts_with("line number"));
        let (same, was) = cut_to_budget("short", 100);
        assert_eq!((same.as_str(), was), ("short", false));
        let (one, _) = cut_to_budget(&"é".repeat(1000), 10);
        assert!(tokens(&one) <= 10);
    }

    #[test]
    fn settings_read_tiers_and_refuse_unknown_keys() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.toml");
        std::fs::write(
            &p,
            "[memory.long]\nenabled = true\nbudget = 50\n[memory.mid.llm]\nmodel = \"other\"\n",
        )
        .unwrap();
        let s = Settings::load(Some(&p)).unwrap();
        assert!(s.long.enabled && s.short.enabled);
        assert_eq!(s.long.budget, BUDGET_RANGE.0);
        let base = personkit_llm::LlmConfig::openai("http://127.0.0.1:1/v1", "base");
        assert_eq!(
            s.llm_for(Tier::Mid, &base).unwrap().model.as_deref(),
            Some("other")
        );
        assert_eq!(
            s.llm_for(Tier::Long, &base).unwrap().model.as_deref(),
            Some("base")
        );
        std::fs::write(&p, "[memory.mid]\nbudgett = 3\n").unwrap();
        assert!(Settings::load(Some(&p)).is_err());
    }

    #[test]
    fn schedules() {
        let at = |s: &str| {
            OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).unwrap()
        };
        let last = |t: Tier, s: &str| {
            t.last_scheduled(at(s))
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap()
        };
        assert_eq!(
            last(Tier::Short, "2026-11-27T03:05:00+01:00"),
            "2026-11-27T03:00:00+01:00"
        );
        assert_eq!(
            last(Tier::Short, "2026-11-27T02:59:00+01:00"),
            "2026-11-26T03:00:00+01:00"
        );
        // 2026-11-29 is a Sunday.
        assert_eq!(
            last(Tier::Mid, "2026-11-29T03:31:00Z"),
            "2026-11-29T03:30:00Z"
        );
        assert_eq!(
            last(Tier::Mid, "2026-11-29T03:29:00Z"),
            "2026-11-22T03:30:00Z"
        );
        assert_eq!(
            last(Tier::Mid, "2026-11-28T12:00:00Z"),
            "2026-11-22T03:30:00Z"
        );
        assert_eq!(
            last(Tier::Long, "2026-12-01T04:10:00Z"),
            "2026-12-01T04:00:00Z"
        );
        assert_eq!(
            last(Tier::Long, "2026-12-01T03:10:00Z"),
            "2026-11-01T04:00:00Z"
        );
        assert_eq!(
            last(Tier::Long, "2026-01-01T03:10:00Z"),
            "2025-12-01T04:00:00Z"
        );
    }
}
