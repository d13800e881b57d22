//! The Today page: what was captured today and this week per site and per project, a chart of turns per day per
//! site over the last 90 days, the knowledge waiting for approval and capture health, all from
//! [`crate::today::build`] (the same figures as `personkit today`).
//!
//! The chart is an inline SVG drawn here, with no script: a stacked bar per day, one colour class per site
//! (`site-0`…`site-7` in `app.css`, light and dark; the CSP allows no inline styles), a `<title>` on each bar for
//! pointer and screen-reader users, and the numbers again in a table below it. Each bar carries its day, surface
//! and turns as `data-` attributes.

use std::fmt::Write as _;

use axum::Extension;
use axum::extract::State;
use maud::{Markup, html};
use time::UtcOffset;

use super::SessionSecret;
use super::pages::{Page, ctx, layout, light, site_name, time_el};
use crate::routes::read::run;
use crate::state::AppState;
use crate::today::{Chart, Span, Today, build};

/// Colour classes the stylesheet defines for sites; more sites reuse them in turn.
const SITE_COLOURS: usize = 8;

/// The chart's drawing box (SVG units) and the margins around its plot area.
const W: f64 = 900.0;
const H: f64 = 260.0;
const LEFT: f64 = 44.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 34.0;

/// `GET /today`.
pub(super) async fn page(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
) -> Page {
    let now = st.clock.now();
    let offset = st.local;
    let t = run(&st, "reload the page", move |c| build(c, now, offset)).await?;
    let ctx = ctx(st, secret);
    Ok(layout(&ctx, "/today", "Today", render(&t, now, offset)))
}

fn offset_label(o: UtcOffset) -> String {
    if o == UtcOffset::UTC {
        "UTC".into()
    } else {
        let (h, m, _) = o.as_hms();
        format!(
            "UTC{}{:02}:{:02}",
            if o.is_negative() { '-' } else { '+' },
            h.abs(),
            m.abs()
        )
    }
}

/// `2026-11-28` → `Sat 28 Nov`, `Nov 28` for axis labels.
fn day_label(day: &str, with_weekday: bool) -> String {
    let parsed = time::Date::parse(
        day,
        time::macros::format_description!("[year]-[month]-[day]"),
    );
    match parsed {
        Ok(d) if with_weekday => {
            let wd = d.weekday().to_string();
            let m = d.month().to_string();
            format!("{} {} {}", &wd[..3], d.day(), &m[..3])
        }
        Ok(d) => {
            let m = d.month().to_string();
            format!("{} {}", &m[..3], d.day())
        }
        Err(_) => day.to_owned(),
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn render(t: &Today, now: time::OffsetDateTime, offset: UtcOffset) -> Markup {
    let colour = |surface: &str| -> usize {
        t.chart
            .sites
            .iter()
            .position(|s| s.surface == surface)
            .unwrap_or(0)
            % SITE_COLOURS
    };
    html! {
        p.intro { "Local days at " (offset_label(offset)) "; this week began on Monday " (day_label(&t.week.first_day, false)) "." }
        div.today-cards {
            (span_card("today-now", &format!("Today, {}", day_label(&t.date, true)), &t.today, &colour))
            (span_card("today-week", "This week", &t.week, &colour))
        }
        section aria-labelledby="chart-h" {
            h2 #chart-h { "Last 90 days" }
            @if t.chart.sites.is_empty() {
                p.empty { "Nothing captured in the last 90 days." }
            } @else {
                (chart(&t.chart, t.utc_offset_minutes))
                ul.legend aria-label="Sites" {
                    @for s in &t.chart.sites {
                        li { span class={"swatch site-" (colour(&s.surface))} aria-hidden="true" {}
                             span title=(s.surface) { (site_name(&s.surface)) } " " span.meta { (plural(s.total, "turn", "turns")) } }
                    }
                }
                (numbers(&t.chart))
            }
        }
        section aria-labelledby="knowledge-h" {
            h2 #knowledge-h { "Knowledge" }
            p #knowledge-pending data-pending=(t.knowledge_pending) {
                @if t.knowledge_pending == 0 {
                    "Nothing waits for your approval. "
                    a href="/knowledge?status=approved" { "Approved entries" }
                } @else {
                    a href="/knowledge?status=pending" { (plural(t.knowledge_pending, "entry", "entries")) " waiting for your approval" }
                }
            }
        }
        section aria-labelledby="health-h" {
            h2 #health-h { "Capture health" }
            @if t.health.is_empty() {
                p.empty { "Nothing captured yet. Pair the extension (Devices → Pair a new device) and chat on a supported site." }
            } @else {
                table.health {
                    thead { tr { th scope="col" { "Site" } th scope="col" { "State" } th scope="col" { "Last capture" } th scope="col" { "Why" } } }
                    tbody {
                        @for s in &t.health {
                            tr {
                                th scope="row" title=(s.surface) { (site_name(&s.surface)) }
                                td { (light(s.status)) }
                                td { @if let Some(at) = &s.last_accepted_at { (time_el(at, now)) } @else { "never" } }
                                td { (s.reason) }
                            }
                        }
                    }
                }
                p.meta { "Errors and counts per site: " a href="/" { "the overview" } "." }
            }
        }
    }
}

/// One span's card; `colour` gives a surface's colour class in the chart (its legend), so rows match the bars.
fn span_card(id: &str, title: &str, s: &Span, colour: &dyn Fn(&str) -> usize) -> Markup {
    let h = format!("{id}-h");
    html! {
        section.card id=(id) aria-labelledby=(h) data-turns=(s.turns) data-threads=(s.threads) {
            h2 id=(h) { (title) }
            p.big { strong { (plural(s.turns, "turn", "turns")) } " in " (plural(s.threads, "thread", "threads")) }
            @if s.sites.is_empty() {
                p.empty { "Nothing captured." }
            } @else {
                table.sites {
                    caption.visually-hidden { (title) ", per site" }
                    thead { tr { th scope="col" { "Site" } th scope="col" { "Threads" } th scope="col" { "Turns" } } }
                    tbody {
                        @for c in &s.sites {
                            tr data-surface=(c.surface) {
                                th scope="row" title=(c.surface) {
                                    span class={"swatch site-" (colour(&c.surface))} aria-hidden="true" {} " " (site_name(&c.surface))
                                }
                                td.num { (c.threads) }
                                td.num { (c.turns) }
                            }
                        }
                    }
                }
            }
            @if !s.projects.is_empty() {
                h3 { "Agent sessions by project" }
                table.projects {
                    thead { tr { th scope="col" { "Project" } th scope="col" { "Tools" } th scope="col" { "Sessions" } th scope="col" { "Turns" } } }
                    tbody {
                        @for p in &s.projects {
                            tr {
                                th scope="row" {
                                    @if let Some(name) = &p.project { (name) } @else { span.meta { "no project named" } }
                                }
                                td { (p.tools.join(", ")) }
                                td.num { (p.threads) }
                                td.num { (p.turns) }
                            }
                        }
                    }
                }
                @if s.projects_truncated {
                    p.meta { "Only the busiest sessions are counted here." }
                }
            }
        }
    }
}

/// The step of the value axis: 1, 2 or 5 times a power of ten, giving at most four steps up to `max`.
fn axis_step(max: u64) -> u64 {
    let mut unit = 1u64;
    loop {
        for m in [1, 2, 5] {
            let step = unit.saturating_mul(m);
            if step.saturating_mul(4) >= max {
                return step;
            }
        }
        unit = unit.saturating_mul(10);
    }
}

/// One site's part of a day's bar: its colour index, surface, turns, and the turns of the sites below it.
type Segment<'a> = (usize, &'a str, u64, u64);

/// The stacked bar chart, one bar per day, one segment per site.
fn chart(c: &Chart, offset_minutes: i32) -> Markup {
    let step = axis_step(c.max_day.max(1));
    let top = step * c.max_day.max(1).div_ceil(step);
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let slot = plot_w / c.days.len().max(1) as f64;
    let bar_w = (slot * 0.78).max(1.0);
    let y = |v: u64| TOP + plot_h - plot_h * v as f64 / top as f64;
    let n = c.days.len();
    let mut desc = format!(
        "Stacked bars, one per day from {} to {}; ",
        c.days.first().map(String::as_str).unwrap_or(""),
        c.days.last().map(String::as_str).unwrap_or("")
    );
    for (i, s) in c.sites.iter().enumerate() {
        let _ = write!(
            desc,
            "{}{}: {} turns",
            if i > 0 { ", " } else { "" },
            site_name(&s.surface),
            s.total
        );
    }
    let ticks: Vec<u64> = (0..=top / step).map(|k| k * step).collect();
    let bars: Vec<(&str, Vec<Segment<'_>>)> = c
        .days
        .iter()
        .enumerate()
        .map(|(i, day)| {
            let mut below = 0;
            let segments = c
                .sites
                .iter()
                .enumerate()
                .filter_map(|(k, s)| {
                    let v = s.turns.get(i).copied().unwrap_or(0);
                    let seg = (k, s.surface.as_str(), v, below);
                    below += v;
                    (v > 0).then_some(seg)
                })
                .collect();
            (day.as_str(), segments)
        })
        .collect();
    html! {
        svg.chart #chart viewBox={"0 0 " (W) " " (H)} role="img" aria-labelledby="chart-title chart-desc"
            data-days=(n) data-max=(c.max_day) data-offset-minutes=(offset_minutes) {
            title #chart-title { "Turns per day per site, last " (n) " days" }
            desc #chart-desc { (desc) }
            @for v in &ticks {
                line.grid x1=(LEFT) x2=(W - RIGHT) y1=(y(*v)) y2=(y(*v)) {}
                text.axis x=(LEFT - 6.0) y=(y(*v) + 4.0) text-anchor="end" { (v) }
            }
            @for (i, (day, segments)) in bars.iter().enumerate() {
                @let x = LEFT + slot * i as f64 + (slot - bar_w) / 2.0;
                g.day data-day=(day) {
                    @for (k, surface, v, below) in segments {
                        rect class={"bar site-" (k % SITE_COLOURS)} x=(fmt(x)) y=(fmt(y(below + v))) width=(fmt(bar_w))
                            height=(fmt(y(*below) - y(below + v))) data-day=(day) data-surface=(surface) data-turns=(v) {
                            title { (day) " · " (site_name(surface)) ": " (plural(*v, "turn", "turns")) }
                        }
                    }
                }
                @if (n - 1 - i).is_multiple_of(15) {
                    line.tick x1=(fmt(LEFT + slot * (i as f64 + 0.5))) x2=(fmt(LEFT + slot * (i as f64 + 0.5)))
                        y1=(TOP + plot_h) y2=(TOP + plot_h + 4.0) {}
                    // The last day's label ends at the plot's edge instead of running past it.
                    @if i + 1 == n {
                        text.axis x=(fmt(W - RIGHT)) y=(H - 12.0) text-anchor="end" { (day_label(day, false)) }
                    } @else {
                        text.axis x=(fmt(LEFT + slot * (i as f64 + 0.5))) y=(H - 12.0) text-anchor="middle" { (day_label(day, false)) }
                    }
                }
            }
            line.base x1=(LEFT) x2=(W - RIGHT) y1=(TOP + plot_h) y2=(TOP + plot_h) {}
        }
    }
}

/// SVG coordinates with two decimals.
fn fmt(v: f64) -> String {
    format!("{v:.2}")
}

/// The chart's numbers as a table: the days with turns, newest first.
fn numbers(c: &Chart) -> Markup {
    html! {
        details.numbers {
            summary { "The numbers: turns per day and site" }
            table #chart-numbers {
                caption.visually-hidden { "Turns per day per site, days with turns, newest first" }
                thead { tr {
                    th scope="col" { "Day" }
                    @for s in &c.sites { th scope="col" title=(s.surface) { (site_name(&s.surface)) } }
                    th scope="col" { "All" }
                } }
                tbody {
                    @for (i, day) in c.days.iter().enumerate().rev() {
                        @let total: u64 = c.sites.iter().map(|s| s.turns.get(i).copied().unwrap_or(0)).sum();
                        @if total > 0 {
                            tr data-day=(day) {
                                th scope="row" { (day) }
                                @for s in &c.sites {
                                    td.num data-surface=(s.surface) { (s.turns.get(i).copied().unwrap_or(0)) }
                                }
                                td.num { (total) }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_steps_are_round_and_few() {
        for (max, step) in [
            (1, 1),
            (4, 1),
            (5, 2),
            (8, 2),
            (9, 5),
            (20, 5),
            (21, 10),
            (1234, 500),
        ] {
            assert_eq!(axis_step(max), step, "{max}");
        }
    }

    #[test]
    fn labels() {
        assert_eq!(day_label("2026-11-28", true), "Sat 28 Nov");
        assert_eq!(day_label("2026-11-28", false), "Nov 28");
        assert_eq!(offset_label(UtcOffset::UTC), "UTC");
        assert_eq!(
            offset_label(UtcOffset::from_hms(-5, -30, 0).unwrap_or(UtcOffset::UTC)),
            "UTC-05:30"
        );
    }
}
