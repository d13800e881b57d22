//! The retention guard: some tools delete their own transcripts after a while — Claude Code `cleanupPeriodDays`
//! in its `settings.json` (default 30 days, by file age, at start-up), Gemini CLI `general.sessionRetention` in
//! `~/.gemini/settings.json` (on by default since 2026-02, `maxAge` "30d"). Format facts and sources:
//! `docs/import.md` "Harvesters".
//!
//! [`setting`] reads what a tool is set to; [`warnings`] says when that will delete sessions before a harvest
//! could copy them — the source is off while sessions exist, no pass ran within the period, or a session nobody
//! copied is about to age out — and names the setting to change. `corpus health`, `personkit harvest list` and the
//! dashboard show them.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use personkit_store::Connection;
use personkit_store::harvest as state;
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;

use super::{Config, Source};

/// Days before a deletion at which a session nobody copied is warned about.
const MARGIN_DAYS: f64 = 3.0;

/// What a tool is set to keep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setting {
    /// The setting's name, as the user writes it.
    pub name: &'static str,
    /// The settings file it is (or would be) in.
    pub file: String,
    /// Days a session is kept after its last change; `None` when the tool keeps sessions forever.
    pub days: Option<f64>,
    /// No value was set: the tool's default applies.
    pub default: bool,
    /// A value was set but could not be read (shown, and the default assumed).
    pub unreadable: Option<String>,
}

/// A warning about sessions a tool will delete.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Warning {
    pub source: String,
    /// `danger` (sessions are being or will be lost), `warning` (they will be unless something changes).
    pub level: &'static str,
    pub message: String,
    /// What to do.
    pub fix: String,
}

/// The retention setting of the tool behind `s`, if it has one.
pub fn setting(config: &Config, s: Source) -> Option<Setting> {
    match s {
        Source::ClaudeCode => Some(claude_code(&tool_dir(config, s, ".claude"))),
        Source::GeminiCli => Some(gemini_cli(&tool_dir(config, s, ".gemini"))),
        _ => None,
    }
}

/// The tool's own folder: the parent of its transcript folder (`~/.claude` for `~/.claude/projects`).
fn tool_dir(config: &Config, s: Source, default: &str) -> PathBuf {
    config
        .roots(s)
        .first()
        .and_then(|r| r.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| config.home.join(default))
}

/// Settings files are small; anything larger is not read.
const MAX_SETTINGS: u64 = 1 << 20;

fn read_json(path: &Path) -> Result<Option<Value>, String> {
    match std::fs::metadata(path) {
        Err(_) => return Ok(None),
        Ok(m) if m.len() > MAX_SETTINGS => return Err("the file is over 1 MB".into()),
        Ok(_) => {}
    }
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| format!("not valid JSON ({e})"))
}

fn claude_code(dir: &Path) -> Setting {
    let file = dir.join("settings.json");
    let mut out = Setting {
        name: "cleanupPeriodDays",
        file: file.display().to_string(),
        days: Some(30.0),
        default: true,
        unreadable: None,
    };
    match read_json(&file) {
        Ok(Some(v)) => match v.get("cleanupPeriodDays") {
            None | Some(Value::Null) => {}
            Some(n) => match n.as_f64().filter(|d| d.is_finite() && *d >= 0.0) {
                Some(d) => {
                    out.days = Some(d);
                    out.default = false;
                }
                None => {
                    out.unreadable = Some(format!("cleanupPeriodDays is {n}, not a number of days"))
                }
            },
        },
        Ok(None) => {}
        Err(e) => out.unreadable = Some(e),
    }
    out
}

fn gemini_cli(dir: &Path) -> Setting {
    let file = dir.join("settings.json");
    let mut out = Setting {
        name: "general.sessionRetention",
        file: file.display().to_string(),
        days: Some(30.0),
        default: true,
        unreadable: None,
    };
    let v = match read_json(&file) {
        Ok(Some(v)) => v,
        Ok(None) => return out,
        Err(e) => {
            out.unreadable = Some(e);
            return out;
        }
    };
    let Some(r) = v.get("general").and_then(|g| g.get("sessionRetention")) else {
        return out;
    };
    out.default = false;
    if r.get("enabled").and_then(Value::as_bool) == Some(false) {
        out.days = None;
        return out;
    }
    if let Some(age) = r.get("maxAge") {
        match age.as_str().and_then(parse_age) {
            Some(d) => out.days = Some(d),
            None => out.unreadable = Some(format!("maxAge is {age}, not an age such as \"30d\"")),
        }
    }
    out
}

/// `"30d"`, `"24h"`, `"1w"`, `"2m"` (months of 30 days) → days.
fn parse_age(s: &str) -> Option<f64> {
    let s = s.trim();
    let unit = s.chars().last()?;
    let n: f64 = s[..s.len() - unit.len_utf8()].trim().parse().ok()?;
    let per = match unit {
        'h' => 1.0 / 24.0,
        'd' => 1.0,
        'w' => 7.0,
        'm' => 30.0,
        _ => return None,
    };
    Some(n * per).filter(|d| d.is_finite() && *d >= 0.0)
}

fn days(d: f64) -> String {
    if d.fract() == 0.0 {
        format!("{d:.0} day{}", if d == 1.0 { "" } else { "s" })
    } else {
        format!("{d:.1} days")
    }
}

fn tool(s: Source) -> &'static str {
    match s {
        Source::ClaudeCode => "Claude Code",
        Source::GeminiCli => "Gemini CLI",
        _ => s.name(),
    }
}

/// The warnings for source `s`: `enabled` whether it is harvested, `last_run` its last pass.
pub fn warnings(
    conn: &Connection,
    config: &Config,
    s: Source,
    enabled: bool,
    last_run: Option<OffsetDateTime>,
    now: OffsetDateTime,
) -> Vec<Warning> {
    let Some(set) = setting(config, s) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let warn = |level, message: String, fix: String| Warning {
        source: s.name().into(),
        level,
        message,
        fix,
    };
    let named = format!(
        "`{}` in {}{}",
        set.name,
        set.file,
        if set.default {
            " (not set: the default)"
        } else {
            ""
        }
    );
    if let Some(why) = &set.unreadable {
        out.push(warn(
            "warning",
            format!(
                "{}'s retention setting could not be read ({why}); assuming the default of 30 days",
                tool(s)
            ),
            format!("fix `{}` in {}", set.name, set.file),
        ));
    }
    let Some(period) = set.days else {
        return out;
    };
    let fix = match s {
        Source::ClaudeCode => format!(
            "set \"cleanupPeriodDays\": 36500 in {} (0 stops Claude Code writing transcripts at all)",
            set.file
        ),
        _ => format!(
            "set \"general\": {{\"sessionRetention\": {{\"enabled\": false}}}} (or a longer \"maxAge\") in {}",
            set.file
        ),
    };
    if s == Source::ClaudeCode && period == 0.0 {
        out.push(warn(
            "danger",
            format!("Claude Code keeps no transcripts at all: {named} is 0"),
            fix,
        ));
        return out;
    }
    let files = config.files(s);
    if !enabled {
        if !files.is_empty() {
            out.push(warn(
                "danger",
                format!(
                    "{} deletes sessions {} after their last change ({named}) and personkit is not copying them: {} session file{} here will be lost",
                    tool(s),
                    days(period),
                    files.len(),
                    if files.len() == 1 { "" } else { "s" }
                ),
                format!("`personkit harvest enable {}`, or {fix}", s.name()),
            ));
        }
        return out;
    }
    let age_days = |t: OffsetDateTime| (now - t).as_seconds_f64() / 86_400.0;
    match last_run {
        Some(t) if age_days(t) > period - MARGIN_DAYS => out.push(warn(
            "danger",
            format!(
                "no harvest in {} while {} deletes sessions after {} ({named}): sessions may already be gone",
                days(age_days(t).floor()),
                tool(s),
                days(period)
            ),
            format!("keep `personkit serve` running (it harvests every 15 minutes), run `personkit harvest --once` now, or {fix}"),
        )),
        None if !files.is_empty() => out.push(warn(
            "warning",
            format!(
                "{} is enabled but was never harvested; {} deletes sessions after {} ({named})",
                s.name(),
                tool(s),
                days(period)
            ),
            "run `personkit harvest --once`, or keep `personkit serve` running".into(),
        )),
        _ => {}
    }
    // Sessions changed since they were last copied (or never copied) that are about to age out.
    let mut at_risk = 0u64;
    let now_sys = SystemTime::now();
    for f in &files {
        let Ok(m) = std::fs::metadata(f) else {
            continue;
        };
        let Some(modified) = m.modified().ok() else {
            continue;
        };
        let age = now_sys
            .duration_since(modified)
            .map_or(0.0, |d| d.as_secs_f64() / 86_400.0);
        if age < period - MARGIN_DAYS {
            continue;
        }
        let mtime_ms = modified
            .duration_since(SystemTime::UNIX_EPOCH)
            .ok()
            .map(|d| d.as_millis() as i64);
        let copied = state::file(conn, s.name(), &f.display().to_string())
            .ok()
            .flatten()
            .is_some_and(|r| r.size == m.len() && r.mtime_ms == mtime_ms);
        if !copied {
            at_risk += 1;
        }
    }
    if at_risk > 0 {
        out.push(warn(
            "danger",
            format!(
                "{at_risk} session file{} not yet copied will be deleted by {} within {} ({named})",
                if at_risk == 1 { "" } else { "s" },
                tool(s),
                days(MARGIN_DAYS)
            ),
            format!("run `personkit harvest --once` now, or {fix}"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_days() {
        assert_eq!(parse_age("30d"), Some(30.0));
        assert_eq!(parse_age("24h"), Some(1.0));
        assert_eq!(parse_age("2w"), Some(14.0));
        assert_eq!(parse_age("1m"), Some(30.0));
        for bad in ["", "d", "30", "30x", "-1d", "NaNd", "1e400d"] {
            assert_eq!(parse_age(bad), None, "{bad}");
        }
    }
}
