//! `personkit today`: what was captured today and this week per site and per project, a bar of marks per site over
//! the last 90 days, the knowledge waiting for approval and capture health — the dashboard's Today page in text,
//! from the same builder (`personkit_server::today`). `--json` prints the whole `Today` document.

use anyhow::{Context as _, bail};
use clap::Args;
use personkit_server::today::{Span, Today, build};
use personkit_store::clock::Clock;

use crate::args::JsonArgs;
use crate::output::print_json;

#[derive(Debug, Clone, Args)]
pub struct TodayArgs {
    #[command(flatten)]
    pub out: JsonArgs,
    /// Count local days at this offset from UTC (`+02:00`, `-05:30`, `Z`) instead of this machine's.
    #[arg(long, value_name = "±HH:MM", allow_hyphen_values = true)]
    pub utc_offset: Option<String>,
}

/// `+02:00`, `-0530`, `+2`, `Z`/`UTC`.
fn parse_offset(s: &str) -> anyhow::Result<time::UtcOffset> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("z") || t.eq_ignore_ascii_case("utc") {
        return Ok(time::UtcOffset::UTC);
    }
    let (sign, rest) = match t.as_bytes().first() {
        Some(b'+') => (1i8, &t[1..]),
        Some(b'-') => (-1i8, &t[1..]),
        _ => bail!("--utc-offset {s:?} needs a sign: give it as +HH:MM or -HH:MM (or Z)"),
    };
    let (h, m) = match rest.split_once(':') {
        Some((h, m)) => (h, m),
        None if rest.len() == 4 => rest.split_at(2),
        None => (rest, "0"),
    };
    let (h, m): (i8, i8) = match (h.parse(), m.parse()) {
        (Ok(h), Ok(m)) if (0..=18).contains(&h) && (0..60).contains(&m) => (h, m),
        _ => bail!(
            "--utc-offset {s:?} is not an offset: give it as +HH:MM or -HH:MM (at most 18 hours)"
        ),
    };
    time::UtcOffset::from_hms(sign * h, sign * m, 0)
        .with_context(|| format!("--utc-offset {s:?} is out of range"))
}

pub fn run(a: TodayArgs) -> anyhow::Result<()> {
    let offset = match &a.utc_offset {
        Some(s) => parse_offset(s)?,
        None => time::UtcOffset::current_local_offset().unwrap_or(time::UtcOffset::UTC),
    };
    let now = Clock::system().now();
    let conn = a.out.db.open_read_only()?;
    let t =
        build(&conn, now, offset).map_err(|e| anyhow::anyhow!("cannot read the corpus: {e}"))?;
    if a.out.json {
        return print_json(&t);
    }
    print!("{}", text(&t));
    Ok(())
}

/// `browser-ext:chatgpt` → `chatgpt`.
fn site(surface: &str) -> &str {
    surface.split_once(':').map_or(surface, |(_, s)| s)
}

/// `1 turn`, `2 turns`, right-aligned in `width` digits.
fn count(n: u64, width: usize, one: &str) -> String {
    format!("{n:>width$} {one}{}", if n == 1 { " " } else { "s" })
}

fn span_text(out: &mut String, title: &str, s: &Span) {
    out.push_str(&format!(
        "{title}: {} in {}\n",
        count(s.turns, 0, "turn").trim_end(),
        count(s.threads, 0, "thread").trim_end()
    ));
    for c in &s.sites {
        out.push_str(&format!(
            "  {:<22} {}  {}\n",
            site(&c.surface),
            count(c.turns, 6, "turn"),
            count(c.threads, 4, "thread")
        ));
    }
    if !s.projects.is_empty() {
        out.push_str("  agent sessions by project:\n");
        for p in &s.projects {
            out.push_str(&format!(
                "    {:<20} {}  {}  ({})\n",
                p.project.as_deref().unwrap_or("(no project)"),
                count(p.turns, 6, "turn"),
                count(p.threads, 4, "session"),
                p.tools.join(", ")
            ));
        }
        if s.projects_truncated {
            out.push_str("    (only the busiest sessions are counted)\n");
        }
    }
}

/// One mark per day, its height by the day's turns against the site's busiest day.
fn sparkline(turns: &[u64]) -> String {
    const MARKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = turns.iter().copied().max().unwrap_or(0);
    turns
        .iter()
        .map(|&v| match v {
            0 => ' ',
            _ => MARKS[((v.saturating_mul(7) / max.max(1)) as usize).min(7)],
        })
        .collect()
}

fn text(t: &Today) -> String {
    let mut out = String::new();
    let off = t.utc_offset_minutes;
    let zone = if off == 0 {
        "UTC".to_owned()
    } else {
        format!(
            "UTC{}{:02}:{:02}",
            if off < 0 { '-' } else { '+' },
            off.abs() / 60,
            off.abs() % 60
        )
    };
    span_text(&mut out, &format!("Today ({}, {zone})", t.date), &t.today);
    out.push('\n');
    span_text(
        &mut out,
        &format!("This week (since Monday {})", t.week.first_day),
        &t.week,
    );
    out.push('\n');
    if t.chart.sites.is_empty() {
        out.push_str("Last 90 days: nothing captured.\n");
    } else {
        out.push_str(&format!(
            "Last 90 days ({} to {}, one mark a day):\n",
            t.chart.days.first().map(String::as_str).unwrap_or(""),
            t.chart.days.last().map(String::as_str).unwrap_or("")
        ));
        for s in &t.chart.sites {
            out.push_str(&format!(
                "  {:<22} |{}| {}\n",
                site(&s.surface),
                sparkline(&s.turns),
                s.total
            ));
        }
    }
    out.push('\n');
    match t.knowledge_pending {
        0 => out.push_str("Knowledge: nothing waits for your approval.\n"),
        n => out.push_str(&format!(
            "Knowledge: {n} entr{} waiting for your approval (`personkit knowledge list`).\n",
            if n == 1 { "y" } else { "ies" }
        )),
    }
    out.push('\n');
    if t.health.is_empty() {
        out.push_str(
            "Capture health: nothing captured yet. Pair the extension (`personkit pair`) and chat on a supported site.\n",
        );
    } else {
        out.push_str("Capture health:\n");
        for h in &t.health {
            out.push_str(&format!(
                "  {:<22} {:<6} {}\n",
                site(&h.surface),
                h.status.as_str(),
                h.reason
            ));
        }
    }
    // Padding for alignment leaves no trailing spaces.
    out.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_parse_or_say_how_to_write_them() {
        let ok = |s: &str| {
            parse_offset(s)
                .unwrap_or(time::UtcOffset::UTC)
                .whole_minutes()
        };
        assert_eq!(ok("+02:00"), 120);
        assert_eq!(ok("-05:30"), -330);
        assert_eq!(ok("+0545"), 345);
        assert_eq!(ok("+1"), 60);
        assert_eq!(ok("Z"), 0);
        for bad in ["2", "+25:00", "+02:75", "east"] {
            assert!(parse_offset(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sparkline_marks_zero_as_blank_and_the_busiest_day_full() {
        assert_eq!(sparkline(&[0, 1, 7, 0]), " ▂█ ");
        assert_eq!(sparkline(&[0, 0]), "  ");
    }
}
