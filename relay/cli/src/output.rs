//! What the CLI prints: JSON documents, plain tables, the readable form of query results and `corpus health`,
//! and the progress bars of long work.

use std::io::{IsTerminal, Write};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use personkit_search::health::EmbedHealth;
use personkit_search::{QueryResult, Signal};
use serde::Serialize;

/// Print `value` as one pretty JSON document on stdout.
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// Print a plain-text table with a header row; cells are cut to one line.
pub fn print_table(headers: &[&str], rows: &[Vec<String>]) -> anyhow::Result<()> {
    let clean = |s: &str| s.replace(['\n', '\r', '\t'], " ");
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| clean(c)).collect())
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let mut out = std::io::stdout().lock();
    let line = |cells: Vec<String>| -> String {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    writeln!(
        out,
        "{}",
        line(headers.iter().map(|h| h.to_uppercase()).collect())
    )?;
    for r in rows {
        writeln!(out, "{}", line(r))?;
    }
    Ok(())
}

/// Cut `s` to `max` characters, with an ellipsis.
pub fn ellipsize(s: &str, max: usize) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        let cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn progress_bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(what.to_owned());
    bar
}

fn why(s: Signal) -> &'static str {
    match s {
        Signal::Fts => "words",
        Signal::Vector => "meaning",
        Signal::Entity => "entity",
        Signal::Recency => "recent",
        Signal::Context => "after a match",
        Signal::Date => "on the date asked",
        Signal::When => "says when",
        Signal::Knowledge => "cited by your knowledge",
    }
}

/// A readable listing: one block per hit with surface, date, thread title, snippet (matches in bold on a
/// terminal, `[...]` otherwise) and why it matched.
pub fn human(result: &QueryResult, color: bool) -> String {
    let (open, close) = if color {
        ("\x1b[1m", "\x1b[0m")
    } else {
        ("[", "]")
    };
    let mut out = String::new();
    for sk in &result.signals_skipped {
        out.push_str(&format!(
            "(the {} signal was skipped: {}; {}. These results come from the other signals.)\n",
            sk.signal.as_str(),
            sk.reason,
            sk.hint
        ));
    }
    if !result.knowledge.is_empty() {
        out.push_str("Your approved knowledge:\n");
        for k in &result.knowledge {
            out.push_str(&format!(
                "  - [{}] {}: {}  (id {}, cites {} message{})\n",
                k.kind,
                ellipsize(&k.topic, 80),
                ellipsize(&k.position, 160),
                k.id,
                k.sources.len(),
                if k.sources.len() == 1 { "" } else { "s" }
            ));
        }
        out.push('\n');
    }
    if result.hits.is_empty() {
        out.push_str(&format!("No matches for {:?}.\n", result.query));
        if result.model.is_none() && result.signals_skipped.is_empty() {
            out.push_str(
                "(no embedder configured: only words, entities and recency were searched)\n",
            );
        }
        return out;
    }
    for (i, h) in result.hits.iter().enumerate() {
        let date = h
            .row
            .occurred_at
            .as_deref()
            .map(|d| d.get(..16).unwrap_or(d).replace('T', " "))
            .unwrap_or_default();
        let title = h.row.thread_title.as_deref().unwrap_or("(untitled)");
        let role = h.row.role.as_deref().unwrap_or(h.kind);
        out.push_str(&format!(
            "{:>2}. {}  {}  {}\n",
            i + 1,
            h.row.surface,
            date,
            title
        ));
        let snippet = h.snippet.replace("**", "\u{1}");
        let mut s = String::new();
        for (j, part) in snippet.split('\u{1}').enumerate() {
            if j % 2 == 1 {
                s.push_str(open);
                s.push_str(part);
                s.push_str(close);
            } else {
                s.push_str(part);
            }
        }
        out.push_str(&format!("    {role}: {s}\n"));
        let reasons: Vec<String> = h
            .signals
            .iter()
            .map(|(sig, r)| format!("{} #{}", why(*sig), r.rank))
            .collect();
        out.push_str(&format!("    matched: {}\n", reasons.join(", ")));
    }
    out
}

/// The search lines of `corpus health`.
pub fn print_health(h: &EmbedHealth) {
    println!(
        "search     {}",
        h.summary.strip_prefix("search: ").unwrap_or(&h.summary)
    );
    println!(
        "embedder   {} (from {})",
        h.embedder,
        if h.source.is_empty() { "-" } else { &h.source }
    );
    if let Some(m) = &h.model {
        println!("model      {m} ({}-d)", h.dim.unwrap_or(0));
    }
    if let Some(c) = &h.coverage {
        println!(
            "vectors    {}/{} messages, {}/{} events with this model ({} pending)",
            c.messages_embedded,
            c.messages_total,
            c.events_embedded,
            c.events_total,
            c.pending()
        );
    }
    if let Some(s) = &h.scrub {
        println!("scrub      {s}");
    }
    if let Some(e) = &h.error {
        println!("embedder error: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ellipsize_cuts_to_one_line() {
        assert_eq!(ellipsize("a\nb", 10), "a b");
        assert_eq!(ellipsize("abcdef", 4), "abc…");
    }
}
