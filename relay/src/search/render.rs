//! Human output for `corpus query` and the benchmarks, and the progress bars of long work.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{QueryResult, Signal};

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
    if result.hits.is_empty() {
        out.push_str(&format!("No matches for {:?}.\n", result.query));
        if result.model.is_none() {
            out.push_str(
                "(no embedder configured: only words, entities and recency were searched)\n",
            );
        }
        return out;
    }
    for (i, h) in result.hits.iter().enumerate() {
        let date = h
            .occurred_at
            .as_deref()
            .map(|d| d.get(..16).unwrap_or(d).replace('T', " "))
            .unwrap_or_default();
        let title = h.thread_title.as_deref().unwrap_or("(untitled)");
        let role = h.role.as_deref().unwrap_or(h.kind);
        out.push_str(&format!(
            "{:>2}. {}  {}  {}\n",
            i + 1,
            h.surface,
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
pub fn print_health(h: &crate::embed::EmbedHealth) {
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
    if let Some(e) = &h.error {
        println!("embedder error: {e}");
    }
}
