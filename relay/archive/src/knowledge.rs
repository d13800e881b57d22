//! The user's approved knowledge as one file at the top of an export folder (`knowledge.md` or `knowledge.json`).
//! Only entries the user approved are written; pending and rejected ones never leave the corpus this way. Each
//! entry's sources link to the files of their threads when the export holds them, and name the message otherwise.
//!
//! Markdown: YAML front-matter (format, entries), a `#` title, then one `##` section per kind (decisions,
//! standards, reasoning, philosophy, reactions, in that order) with one `###` heading per entry's topic, sorted by
//! topic: the position, the reasoning, the context a variant holds in, its ratings and tags, and its sources.

use std::collections::BTreeMap;

use personkit_store::Connection;
use personkit_store::knowledge::{self as rows, Entry};
use serde::Serialize;

use crate::render::{Format, RENDER_VERSION, q};

/// The file's name in the folder for `format`.
pub fn file_name(format: Format) -> String {
    format!("knowledge.{}", format.ext())
}

/// How many entries are read per page.
const PAGE: u32 = 500;

/// Every approved entry, in id order.
pub fn approved(conn: &Connection) -> Result<Vec<Entry>, personkit_store::DbError> {
    let mut all: Vec<Entry> = Vec::new();
    loop {
        let page = rows::approved_page(conn, all.last().map(|e| e.id.as_str()), PAGE)?;
        let done = page.len() < PAGE as usize;
        all.extend(page);
        if done {
            return Ok(all);
        }
    }
}

/// Kinds in the order the Markdown file shows them, with their section titles.
const KINDS: [(&str, &str); 5] = [
    ("decision", "Decisions"),
    ("standard", "Standards"),
    ("reasoning", "Reasoning"),
    ("philosophy", "Philosophy"),
    ("reaction", "Reactions"),
];

/// The file's bytes. `paths` maps thread ids to their files in the folder (relative, `/`-separated).
pub fn render(entries: &[Entry], format: Format, paths: &BTreeMap<String, String>) -> Vec<u8> {
    match format {
        Format::Markdown => markdown(entries, paths).into_bytes(),
        Format::Json => json(entries),
    }
}

#[derive(Serialize)]
struct JsonFile<'a> {
    format: &'static str,
    version: u32,
    entries: &'a [Entry],
}

fn json(entries: &[Entry]) -> Vec<u8> {
    let mut v = serde_json::to_vec_pretty(&JsonFile {
        format: "personkit-knowledge",
        version: RENDER_VERSION,
        entries,
    })
    .unwrap_or_default();
    v.push(b'\n');
    v
}

/// Text on one line (a heading or a list item cannot hold a line break).
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A Markdown link target with the characters that would end it escaped.
fn link_target(path: &str) -> String {
    path.replace(' ', "%20")
        .replace('(', "%28")
        .replace(')', "%29")
}

fn markdown(entries: &[Entry], paths: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    out.push_str("---\n");
    out.push_str(&format!("format: {}\n", q("personkit-knowledge")));
    out.push_str(&format!("entries: {}\n", entries.len()));
    out.push_str("---\n\n# Knowledge\n\n");
    out.push_str(
        "The positions you approved in personkit, with the reasoning behind them and the turns they came from.\n",
    );
    for (kind, title) in KINDS {
        let mut of_kind: Vec<&Entry> = entries.iter().filter(|e| e.kind == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        of_kind.sort_by(|a, b| a.topic.cmp(&b.topic).then(a.id.cmp(&b.id)));
        out.push_str(&format!("\n## {title}\n"));
        for e in of_kind {
            out.push_str(&format!("\n### {}\n\n", one_line(&e.topic)));
            out.push_str(&format!("{}\n\n", e.position.trim()));
            out.push_str(&format!("**Why:** {}\n", e.reasoning.trim()));
            if let Some(c) = e.context.as_deref().filter(|c| !c.trim().is_empty()) {
                out.push_str(&format!("\n**Holds when:** {}\n", c.trim()));
            }
            out.push('\n');
            let mut facts = vec![
                format!("confidence {}", e.confidence),
                format!("stability {}", e.stability),
            ];
            if e.reinforced > 0 {
                facts.push(format!("said again {} times", e.reinforced));
            }
            out.push_str(&format!("- {}\n", facts.join(" · ")));
            {
                let tags: Vec<String> = e
                    .tags
                    .iter()
                    .map(|t| tag(t))
                    .filter(|t| !t.is_empty())
                    .map(|t| format!("#{t}"))
                    .collect();
                if !tags.is_empty() {
                    out.push_str(&format!("- tags: {}\n", tags.join(" ")));
                }
            }
            if e.sources.is_empty() {
                out.push_str("- sources: none left (forgotten)\n");
            } else {
                out.push_str("- sources:");
                for s in &e.sources {
                    match paths.get(&s.thread_id) {
                        Some(p) => {
                            out.push_str(&format!(
                                " [{}]({})",
                                one_line(&s.message_id),
                                link_target(p)
                            ));
                        }
                        None => out.push_str(&format!(" {}", one_line(&s.message_id))),
                    }
                }
                out.push('\n');
                if e.sources_forgotten {
                    out.push_str("- some of its sources were forgotten\n");
                }
            }
            out.push_str(&format!("- id: {}\n", e.id));
        }
    }
    out
}

/// A tag as Obsidian reads one: letters, digits, `_`, `-` and `/`, nothing else.
fn tag(t: &str) -> String {
    let s: String = t
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '_' | '-' | '/') {
                c
            } else {
                '-'
            }
        })
        .collect();
    s.trim_matches('-').to_owned()
}
