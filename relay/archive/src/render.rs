//! One thread as a file: Markdown for Obsidian and other Markdown tools, or JSON.
//!
//! Markdown: YAML front-matter (id, title, surface, conversation, url, created, updated, messages, turns, tags;
//! strings double-quoted with JSON escapes, which YAML reads the same), the title as `#`, then one `##` heading
//! per turn with its place, role and time, and the turn's text as the capture renderer wrote it (Markdown-
//! flavoured: code fences, tables, lists kept byte for byte). A `[reasoning]` … `[/reasoning]` block outside code
//! becomes a folded `> [!note]- Reasoning` callout, so the answer reads on its own; the other revisions at a
//! turn's position (edits, regenerations) follow it in a folded `> [!abstract]-` callout, oldest first.

use personkit_shared::turn_text;
use personkit_store::archive::{ExportThread, ExportTurn};
use serde::Serialize;

/// Version of the rendering: a change of it rewrites every file on the next export.
pub const RENDER_VERSION: u32 = 1;

/// Export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Json,
}

impl Format {
    pub fn ext(self) -> &'static str {
        match self {
            Format::Markdown => "md",
            Format::Json => "json",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Markdown => "markdown",
            Format::Json => "json",
        }
    }

    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "markdown" | "md" => Some(Format::Markdown),
            "json" => Some(Format::Json),
            _ => None,
        }
    }
}

/// The file's bytes.
pub fn render(t: &ExportThread, format: Format) -> Vec<u8> {
    match format {
        Format::Markdown => markdown(t).into_bytes(),
        Format::Json => json(t),
    }
}

#[derive(Serialize)]
struct JsonFile<'a> {
    format: &'static str,
    version: u32,
    thread: &'a ExportThread,
}

fn json(t: &ExportThread) -> Vec<u8> {
    let mut v = serde_json::to_vec_pretty(&JsonFile {
        format: "personkit-thread",
        version: RENDER_VERSION,
        thread: t,
    })
    .unwrap_or_default();
    v.push(b'\n');
    v
}

pub(crate) fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// `2026-11-22T10:01:02.123Z` → `2026-11-22 10:01 UTC`.
pub fn human_time(t: &str) -> String {
    match (t.get(..10), t.get(11..16)) {
        (Some(d), Some(hm)) if t.len() >= 16 => format!("{d} {hm} UTC"),
        _ => t.to_owned(),
    }
}

fn role_name(r: &str) -> &str {
    match r {
        "user" => "User",
        "assistant" => "Assistant",
        "system" => "System",
        "tool" => "Tool",
        other => other,
    }
}

/// Text on one line: controls and line breaks become spaces.
fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        out.push(if c.is_control() { ' ' } else { c });
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An Obsidian tag from a surface: its name after the kind (`browser-ext:chatgpt` → `chatgpt`), letters,
/// digits, `-` and `_` only.
fn surface_tag(surface: &str) -> String {
    let name = surface.rsplit(':').next().unwrap_or(surface);
    let t: String = name
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if t.is_empty() { "unknown".into() } else { t }
}

/// Every line of `text` behind `> `.
fn quote(out: &mut String, text: &str) {
    for line in text.lines() {
        if line.is_empty() {
            out.push_str(">\n");
        } else {
            out.push_str("> ");
            out.push_str(line);
            out.push('\n');
        }
    }
}

/// Whether `line` opens or closes a code fence (``` or ~~~, up to three spaces of indent).
fn fence(line: &str) -> bool {
    let l = line.trim_start_matches(' ');
    line.len() - l.len() <= 3 && (l.starts_with("```") || l.starts_with("~~~"))
}

/// A turn's text with reasoning blocks (outside code) folded into callouts.
fn body(out: &mut String, text: &str) {
    let mut in_code = false;
    let mut reasoning: Option<String> = None;
    // After a callout: one blank line ends it (a text line right after would continue the quote).
    let mut after_callout = false;
    for line in text.lines() {
        if std::mem::take(&mut after_callout) && line.trim().is_empty() {
            continue;
        }
        if let Some(r) = reasoning.as_mut() {
            if line.trim_end() == turn_text::REASONING_CLOSE {
                out.push_str("> [!note]- Reasoning\n");
                quote(out, r.trim_end_matches('\n'));
                out.push('\n');
                reasoning = None;
                after_callout = true;
            } else {
                r.push_str(line);
                r.push('\n');
            }
            continue;
        }
        if !in_code && line.trim_end() == turn_text::REASONING_OPEN {
            reasoning = Some(String::new());
            continue;
        }
        if fence(line) {
            in_code = !in_code;
        }
        out.push_str(line);
        out.push('\n');
    }
    // An unclosed block is kept as it was written.
    if let Some(r) = reasoning {
        out.push_str(turn_text::REASONING_OPEN);
        out.push('\n');
        out.push_str(&r);
    }
}

fn turn(out: &mut String, i: usize, t: &ExportTurn) {
    out.push_str(&format!(
        "## {} · {} · {}\n\n",
        i + 1,
        role_name(&t.role),
        human_time(&t.time)
    ));
    body(out, &t.content);
    if !t.revisions.is_empty() {
        let n = t.revisions.len();
        out.push('\n');
        out.push_str(&format!(
            "> [!abstract]- {n} other revision{} (this is revision {})\n",
            if n == 1 { "" } else { "s" },
            t.revision
        ));
        for (k, r) in t.revisions.iter().enumerate() {
            if k > 0 {
                out.push_str(">\n");
            }
            out.push_str(&format!(
                "> **Revision {}** · captured {}\n>\n",
                r.revision,
                human_time(&r.captured_at)
            ));
            quote(out, &r.content);
        }
    }
    out.push('\n');
}

fn markdown(t: &ExportThread) -> String {
    let title = t.title.as_deref().map(one_line).filter(|s| !s.is_empty());
    let mut out =
        String::with_capacity(1024 + t.turns.iter().map(|x| x.content.len() + 64).sum::<usize>());
    out.push_str("---\n");
    out.push_str(&format!("id: {}\n", q(&t.id)));
    match &title {
        Some(s) => out.push_str(&format!("title: {}\n", q(s))),
        None => out.push_str("title: null\n"),
    }
    out.push_str(&format!("surface: {}\n", q(&t.surface)));
    out.push_str(&format!("conversation: {}\n", q(&t.conversation_id)));
    match &t.url {
        Some(u) => out.push_str(&format!("url: {}\n", q(u))),
        None => out.push_str("url: null\n"),
    }
    out.push_str(&format!("created: {}\n", q(&t.first_seen_at)));
    out.push_str(&format!("updated: {}\n", q(&t.last_seen_at)));
    out.push_str(&format!("messages: {}\n", t.messages));
    out.push_str(&format!("turns: {}\n", t.turns.len()));
    out.push_str(&format!(
        "tags:\n  - personkit\n  - personkit/{}\n",
        surface_tag(&t.surface)
    ));
    out.push_str("---\n\n");
    out.push_str(&format!(
        "# {}\n\n",
        title.as_deref().unwrap_or("Untitled conversation")
    ));
    for (i, x) in t.turns.iter().enumerate() {
        turn(&mut out, i, x);
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}
