//! Perplexity's per-thread Markdown export (a thread's "Export → Markdown"): one `.md` per thread.
//!
//! The structure, from real exported files and MNBGit/PerplexityChatToOpenWebUI's README (which parses them):
//! - an opening logo line `<img src="https://r2cdn.perplexity.ai/pplx-full-logo-primary-dark%402x.png" …/>`
//!   (older files: `class="logo"`), and sometimes YAML front matter a user added;
//! - per exchange, the question as a `# ` heading, then the answer with footnote references `[^N_M]` (N the
//!   exchange, M the source), then `<span style="display:none">[^N_…]…</span>` (sources not cited inline),
//!   `<div align="center">⁂</div>` and the definitions `[^N_M]: <url>` (a URL, no title);
//! - exchanges separated by a `---` (or `***`) line.
//!
//! There is no thread id, no time and no model name. The thread's id is made from its first question (so the
//! same thread exported again, longer, is the same thread and stores only what is new), on the surface
//! `import:perplexity`: live capture keys a thread by its URL, which the export does not hold. A long question
//! may go on below its heading as plain paragraphs, with nothing telling where the answer starts: the heading
//! is the question and the rest the answer. An exchange without a question heading keeps its answer and is
//! reported.

use std::collections::BTreeMap;

use personkit_shared::network::{Citation, NetTurn};
use personkit_shared::wire::Role;
use sha2::{Digest, Sha256};

use crate::formats::SourceConversation;

/// The surface of imported Perplexity threads.
pub const SURFACE: &str = "import:perplexity";
/// The largest thread file read (whole, in memory).
pub const MAX_BYTES: u64 = 16 * 1_000_000;

/// Whether the first bytes of a Markdown file are a Perplexity thread export.
pub fn looks_like(head: &str) -> bool {
    (head.contains("<img") && head.contains("perplexity.ai"))
        || (head.contains("[^1_") && head.contains("<div align=\"center\">⁂</div>"))
}

/// A thread read from its Markdown, and the exchanges (1-based) that had no question heading.
#[derive(Debug)]
pub struct Thread {
    pub conversation: SourceConversation,
    pub without_question: Vec<usize>,
}

fn is_rule(line: &str) -> bool {
    matches!(line.trim(), "---" | "***")
}

/// The exchanges of a thread: its lines split at separator rules outside code fences, where a new question
/// heading follows or the exchange before has ended (its `⁂` line seen).
fn exchanges(text: &str) -> Vec<Vec<&str>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<Vec<&str>> = vec![Vec::new()];
    let (mut fence, mut ended) = (false, false);
    for (i, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        }
        if !fence && is_rule(line) {
            let next = lines[i + 1..].iter().find(|l| !l.trim().is_empty());
            if ended || next.is_some_and(|l| l.starts_with("# ")) {
                out.push(Vec::new());
                ended = false;
                continue;
            }
        }
        if !fence && line.trim() == "<div align=\"center\">⁂</div>" {
            ended = true;
        }
        if let Some(cur) = out.last_mut() {
            cur.push(line);
        }
    }
    out
}

/// `[^1_2]` references taken out of a line (the page shows them as chips of the sources listed below).
fn drop_refs(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(i) = rest.find("[^") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 2..];
        match tail.find(']') {
            Some(j) if j > 0 && tail[..j].bytes().all(|b| b.is_ascii_digit() || b == b'_') => {
                rest = &tail[j + 1..];
            }
            _ => {
                out.push_str("[^");
                rest = tail;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A footnote definition `[^1_2]: https://…` → its label and URL.
fn definition(line: &str) -> Option<(&str, &str)> {
    let rest = line.trim().strip_prefix("[^")?;
    let (label, url) = rest.split_once("]:")?;
    let url = url.trim();
    (label.bytes().all(|b| b.is_ascii_digit() || b == b'_') && !url.is_empty())
        .then_some((label, url))
}

/// Reads one thread's Markdown; `None` when it holds no exchange at all.
pub fn thread(text: &str) -> Option<Thread> {
    let mut text = text.trim_start_matches('\u{feff}');
    // Front matter a user added.
    if let Some(rest) = text.strip_prefix("---\n")
        && let Some(end) = rest.find("\n---\n")
    {
        text = &rest[end + 5..];
    }
    let mut turns: Vec<NetTurn> = Vec::new();
    let mut without_question = Vec::new();
    let mut first_question: Option<String> = None;
    let mut n = 0usize;
    for ex in exchanges(text) {
        let mut body: Vec<&str> = ex
            .into_iter()
            .filter(|l| {
                let t = l.trim();
                let logo = t.starts_with("<img") && t.contains("perplexity");
                let hidden_refs = t.starts_with("<span style=\"display:none\">");
                !logo && !hidden_refs && t != "<div align=\"center\">⁂</div>"
            })
            .collect();
        let mut cites: Vec<Citation> = Vec::new();
        body.retain(|l| match definition(l) {
            Some((_, url)) => {
                if !cites.iter().any(|c| c.url == url) {
                    cites.push(Citation {
                        url: url.to_owned(),
                        title: None,
                        quote: None,
                    });
                }
                false
            }
            None => true,
        });
        let start = body.iter().position(|l| !l.trim().is_empty());
        let Some(start) = start else {
            continue;
        };
        n += 1;
        let question = body[start]
            .strip_prefix("# ")
            .map(|q| drop_refs(q).trim().to_owned());
        let answer_from = if question.is_some() { start + 1 } else { start };
        // References are taken out of prose, not out of code.
        let mut fence = false;
        let answer = body[answer_from..]
            .iter()
            .map(|l| {
                if l.trim_start().starts_with("```") {
                    fence = !fence;
                }
                if fence { (*l).to_owned() } else { drop_refs(l) }
            })
            .collect::<Vec<_>>()
            .join("\n")
            .trim()
            .to_owned();
        let mut parent = turns.last().map(|t: &NetTurn| t.message_key.clone());
        match &question {
            Some(q) => {
                first_question.get_or_insert_with(|| q.clone());
                let mut t = NetTurn::empty(SURFACE.to_owned(), format!("q{n}"), Role::User);
                t.text = q.clone();
                t.parent_key = parent.replace(t.message_key.clone());
                turns.push(t);
            }
            None => without_question.push(n),
        }
        let mut t = NetTurn::empty(SURFACE.to_owned(), format!("a{n}"), Role::Assistant);
        t.text = answer;
        t.citations = cites;
        t.parent_key = parent;
        turns.push(t);
    }
    if turns.is_empty() {
        return None;
    }
    let seed = first_question.unwrap_or_else(|| turns[0].text.clone());
    let digest = Sha256::digest(seed.as_bytes());
    let id: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    let id = format!("pplx-{id}");
    for (i, t) in turns.iter_mut().enumerate() {
        t.conversation_id = Some(id.clone());
        t.position = Some(i as u32);
        t.on_current_branch = Some(true);
    }
    let title = turns
        .iter()
        .find(|t| t.role == Role::User)
        .map(|t| t.text.chars().take(120).collect::<String>());
    Some(Thread {
        conversation: SourceConversation {
            surface: SURFACE.to_owned(),
            conversation_id: id,
            title,
            url: None,
            updated_at_ms: None,
            turns,
            unreadable: BTreeMap::new(),
        },
        without_question,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn references_go_and_other_brackets_stay() {
        assert_eq!(
            drop_refs("Canberra[^1_2][^1_10]. See [^x] and [^]"),
            "Canberra. See [^x] and [^]"
        );
        assert_eq!(
            definition("[^2_1]: https://a.example/x"),
            Some(("2_1", "https://a.example/x"))
        );
        assert_eq!(definition("[^a]: b"), None);
    }

    #[test]
    fn a_rule_inside_an_answer_does_not_split_the_exchange() {
        let md = "# Q one\n\nPart A\n\n---\n\nPart B\n\n---\n\n# Q two\n\nAnswer two\n";
        let t = thread(md).unwrap();
        let texts: Vec<&str> = t
            .conversation
            .turns
            .iter()
            .map(|t| t.text.as_str())
            .collect();
        assert_eq!(
            texts,
            ["Q one", "Part A\n\n---\n\nPart B", "Q two", "Answer two"]
        );
        assert!(t.without_question.is_empty());
    }
}
