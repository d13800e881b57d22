//! Turn text: how the parts of a turn — its answer (or prompt), reasoning, tool calls and their output, images,
//! files, citations, hidden context — become the one text a turn is stored as, and how that text is read back.
//! Every capture path writes through here: the DOM renderer (`capture::render`) for what a page shows, the
//! network capture (`capture::api`) and the importers and harvesters (`personkit-import`) for a site's structured
//! turn ([`render`]); turn identity (`identity::match_text`) reads the text back through [`own_lines`]. A marker
//! written anywhere else is a copy that can drift, and identity folding across paths depends on them agreeing.
//!
//! ## Markers
//!
//! | part | written as | read back by [`own_lines`] |
//! |---|---|---|
//! | reasoning | a `[reasoning]` line, the reasoning, a `[/reasoning]` line | dropped (the page folds it away) |
//! | tool call (archive) | a `[tool: name]` line, then its input in a fence longer than any backtick run in it | dropped |
//! | tool output (archive) | a `[tool output]` line, then the output fenced likewise | dropped |
//! | citations (archive) | last: a `Sources:` line, then `- [title](url)` lines, each quote as `  > ` lines | dropped |
//! | citation chip (page) | `(url)` after the text | the URL is dropped by identity as every URL is |
//! | image | `[image]`, `[image: alt]` | a line of its own is dropped |
//! | file | `[file]`, `[file: name]` | a line of its own is dropped |
//! | audio | `[audio]`, `[audio/video]` | a line of its own is dropped |
//! | not understood | `[unsupported: what]` | a line of its own is dropped |
//! | hidden context (archive) | a first line `[context]` | dropped |
//! | injected text (archive) | an `[injected: kind]` line, then the text fenced ([`injected_block`]) | dropped |
//! | a transcript's note (harvest) | `[kind] text` ([`note`]), `[reasoning withheld by the model provider]` | words |
//!
//! ## One mapping, two styles
//!
//! [`render`] maps a structured turn ([`Parts`]: a network turn's, an export's, a harvested transcript's) to
//! text. The paths legitimately differ in what they keep, chosen by [`Style`]:
//! - [`Style::Page`] — the network capture in the page. It stores what the page shows, reasoning and answer, as a
//!   better rendering of the turn the DOM path reads (it replaces the DOM text). Tool input and output and the
//!   citation list are not shown as text on the page, and hidden turns never reach it.
//! - [`Style::Archive`] — official exports and local transcripts. They are the only record of a turn's tool calls,
//!   tool output, cited sources and hidden context, so those are kept, each in a block of its own after the answer.
//!
//! Both styles fold to one identity: what `Archive` adds is exactly what [`own_lines`] drops, so the words of a
//! turn (`identity::match_text`) are the same whichever path read it (property-tested in `personkit-import`'s
//! `tests/turn_text.rs` through the three real entry points).

use crate::network::{Citation, ToolCall};
use crate::wire::Role;

/// First line of a reasoning block.
pub const REASONING_OPEN: &str = "[reasoning]";
/// Last line of a reasoning block.
pub const REASONING_CLOSE: &str = "[/reasoning]";
/// Start of the line naming a tool call: `[tool: name]`.
pub const TOOL_PREFIX: &str = "[tool: ";
/// The line before a tool's output.
pub const TOOL_OUTPUT: &str = "[tool output]";
/// First line of a turn the site keeps out of the visible thread.
pub const CONTEXT: &str = "[context]";
/// Start of the line before text a tool put into the user's message (a reminder, a command's caveat, an
/// environment dump): `[injected: kind]`.
pub const INJECTED_PREFIX: &str = "[injected: ";
/// First line of the list of cited sources.
pub const SOURCES: &str = "Sources:";
/// An image without a description.
pub const IMAGE: &str = "[image]";
/// A file without a name.
pub const FILE: &str = "[file]";
/// A voice message.
pub const AUDIO: &str = "[audio]";
/// A live voice or video session.
pub const AUDIO_VIDEO: &str = "[audio/video]";
/// Reasoning the model provider sent only encrypted.
pub const REASONING_WITHHELD: &str = "[reasoning withheld by the model provider]";
/// A document attached to a prompt (a transcript keeps only that there was one).
pub const DOCUMENT: &str = "[document]";
/// Start of a tool result the tool marked as an error: `[error] body`.
pub const ERROR: &str = "[error]";

/// What a path keeps of a turn (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// The network capture in the page: reasoning and answer.
    Page,
    /// Exports and local transcripts: everything, tool calls, output, sources and hidden context included.
    Archive,
}

/// The parts of one turn, borrowed from wherever they were parsed.
#[derive(Debug, Clone, Copy)]
pub struct Parts<'a> {
    pub role: Role,
    /// The answer (or prompt) in the site's source form; placeholders for images and files already in it.
    pub text: &'a str,
    pub reasoning: Option<&'a str>,
    pub tool_calls: &'a [ToolCall],
    /// Output not matched to a call, or the whole message of a `tool` turn (written as it is).
    pub tool_output: Option<&'a str>,
    pub citations: &'a [Citation],
    /// A message the site keeps out of the visible thread.
    pub hidden: bool,
}

impl<'a> Parts<'a> {
    /// A turn with only its text.
    pub fn new(role: Role, text: &'a str) -> Parts<'a> {
        Parts {
            role,
            text,
            reasoning: None,
            tool_calls: &[],
            tool_output: None,
            citations: &[],
            hidden: false,
        }
    }
}

/// The one mapping from a turn's parts to its text (see the module doc for the styles).
// Inlined so that a caller passing `Style::Page` (the capture core, which has a size budget) links no archive code.
#[inline(always)]
pub fn render(p: &Parts<'_>, style: Style) -> String {
    let mut out = match p.reasoning.map(str::trim).filter(|r| !r.is_empty()) {
        Some(r) if p.text.is_empty() => reasoning_block(r),
        Some(r) => format!("{}\n\n{}", reasoning_block(r), p.text),
        None => p.text.to_owned(),
    };
    if style == Style::Archive {
        archive_blocks(p, &mut out);
    }
    out
}

/// What the archive style adds after the reasoning and the answer.
#[inline(never)]
fn archive_blocks(p: &Parts<'_>, out: &mut String) {
    let mut add = |s: &str| {
        if s.trim().is_empty() {
            return;
        }
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(s);
    };
    for c in p.tool_calls {
        add(&tool_block(&c.name, &c.input));
        if let Some(o) = c.output.as_deref() {
            add(&tool_output_block(o));
        }
    }
    if let Some(o) = p.tool_output {
        if p.role == Role::Tool {
            add(o);
        } else {
            add(&tool_output_block(o));
        }
    }
    add(&sources_block(p.citations));
    if p.hidden && !out.trim().is_empty() {
        *out = format!("{CONTEXT}\n{out}");
    }
}

/// Reasoning as a block of its own.
pub fn reasoning_block(body: &str) -> String {
    format!("{REASONING_OPEN}\n{body}\n{REASONING_CLOSE}")
}

/// A tool call: its name, then its input fenced (just the name when there is no input).
pub fn tool_block(name: &str, input: &str) -> String {
    let head = format!("{TOOL_PREFIX}{}]", one_line(name));
    if input.trim().is_empty() {
        head
    } else {
        format!("{head}\n{}", fenced(input))
    }
}

/// Text a tool injected into a user's message, fenced after an `[injected: kind]` line, so it is kept but is not
/// read as the user's words.
pub fn injected_block(kind: &str, body: &str) -> String {
    format!("{INJECTED_PREFIX}{}]\n{}", one_line(kind), fenced(body))
}

/// A user message with the spans a tool wrapped in one of `tags` (`<tag>…</tag>`, e.g. `system-reminder`) taken
/// out of the user's words: the words first, then each span as an [`injected_block`] named by its tag, in order.
/// The second value says whether any words of the user's own are left. An opening tag without its closing tag
/// is left as the user's text.
pub fn split_injected(text: &str, tags: &[&str]) -> (String, bool) {
    let mut words = String::new();
    let mut blocks: Vec<String> = Vec::new();
    let mut rest = text;
    loop {
        let next = tags
            .iter()
            .filter_map(|t| {
                let open = format!("<{t}>");
                let at = rest.find(&open)?;
                let body_from = at + open.len();
                let close = format!("</{t}>");
                let end = rest[body_from..].find(&close)? + body_from;
                Some((at, *t, body_from, end, end + close.len()))
            })
            .min_by_key(|x| x.0);
        let Some((at, tag, from, to, after)) = next else {
            words.push_str(rest);
            break;
        };
        words.push_str(&rest[..at]);
        let body = rest[from..to].trim();
        if !body.is_empty() {
            blocks.push(injected_block(tag, body));
        }
        rest = &rest[after..];
    }
    let words = words.trim().to_owned();
    let own = !words.is_empty();
    let mut out = words;
    for b in blocks {
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(&b);
    }
    (out, own)
}

/// A tool's output, fenced; empty when there is none.
pub fn tool_output_block(output: &str) -> String {
    if output.trim().is_empty() {
        String::new()
    } else {
        format!("{TOOL_OUTPUT}\n{}", fenced(output))
    }
}

/// The list of cited sources; empty when there are none.
pub fn sources_block(citations: &[Citation]) -> String {
    if citations.is_empty() {
        return String::new();
    }
    let mut s = String::from(SOURCES);
    for c in citations {
        let title = c
            .title
            .as_deref()
            .map(one_line)
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| c.url.clone());
        s.push_str(&format!("\n- [{title}]({})", c.url));
        if let Some(q) = c.quote.as_deref().filter(|q| !q.trim().is_empty()) {
            for line in q.lines() {
                s.push_str(&format!("\n  > {line}"));
            }
        }
    }
    s
}

/// A citation chip as the page shows it: its URL in parentheses.
pub fn cited(url: &str) -> String {
    format!("({url})")
}

/// An image: `[image: alt]`, or `[image]` without a description.
pub fn image(alt: &str) -> String {
    let alt = one_line(alt);
    if alt.is_empty() {
        IMAGE.to_owned()
    } else {
        format!("[image: {alt}]")
    }
}

/// A file: `[file: name]`, or `[file]` without a name.
pub fn file(name: &str) -> String {
    let name = one_line(name);
    if name.is_empty() {
        FILE.to_owned()
    } else {
        format!("[file: {name}]")
    }
}

/// A tool result the tool marked as an error: `[error] body`.
pub fn tool_error(body: &str) -> String {
    format!("{ERROR} {body}")
}

/// An error the site reported in place of a message: `[error: text]`.
pub fn site_error(text: &str) -> String {
    format!("[error: {text}]")
}

/// Something a parser did not understand.
pub fn unsupported(what: &str) -> String {
    format!("[unsupported: {what}]")
}

/// A note a tool writes into its transcript (a compaction, an info or error line, a part without text): its kind
/// in brackets, then its text.
pub fn note(kind: &str, body: &str) -> String {
    if body.trim().is_empty() {
        format!("[{kind}]")
    } else {
        format!("[{kind}] {body}")
    }
}

/// Whitespace runs (newlines included) as one space, trimmed: a name or title inside a one-line marker.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `body` in a fence of backticks longer than any run of backticks in it (at least three).
fn fenced(body: &str) -> String {
    let body = body.trim_end();
    let fence = "`".repeat(3.max(longest_backtick_run(body) + 1));
    format!("{fence}\n{body}\n{fence}")
}

fn longest_backtick_run(s: &str) -> usize {
    let (mut longest, mut run) = (0, 0);
    for c in s.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    longest
}

/// A line that stands for something the page renders as other than text: `[image]`, `[image: alt]`, `[audio]`,
/// `[audio/video]`, `[file]`, `[file: name]`, `[unsupported: what]`, and the `[context]` line.
pub fn is_placeholder(line: &str) -> bool {
    let Some(inner) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) else {
        return false;
    };
    if inner.contains(['[', ']', '\n']) {
        return false;
    }
    [IMAGE, FILE, AUDIO, AUDIO_VIDEO, CONTEXT]
        .iter()
        .any(|m| &m[1..m.len() - 1] == inner)
        || ["image: ", "file: ", "unsupported: "]
            .iter()
            .any(|p| inner.starts_with(p))
}

/// The lines of a turn's text that are the turn's own words: reasoning, tool and tool-output blocks, a final
/// sources list and placeholder lines ([`is_placeholder`]) left out. Lines come trimmed.
pub fn own_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let end = sources_start(&lines).unwrap_or(lines.len());
    let mut out = Vec::with_capacity(end);
    let mut i = 0;
    while i < end {
        let l = lines[i];
        i += 1;
        if l == REASONING_OPEN {
            while i < end && lines[i] != REASONING_CLOSE {
                i += 1;
            }
            i += 1;
        } else if l == TOOL_OUTPUT
            || ((l.starts_with(TOOL_PREFIX) || l.starts_with(INJECTED_PREFIX)) && l.ends_with(']'))
        {
            // The fenced body follows on the very next line, when there is one.
            if let Some(fence) = lines.get(i).filter(|f| is_fence(f) && i < end) {
                let fence = *fence;
                i += 1;
                while i < end && lines[i] != fence {
                    i += 1;
                }
                i += 1;
            }
        } else if !is_placeholder(l) {
            out.push(l);
        }
    }
    out
}

fn is_fence(line: &str) -> bool {
    line.len() >= 3 && line.bytes().all(|b| b == b'`')
}

/// Where a sources list that ends the text starts: a `Sources:` line at the start of a paragraph, then (after at
/// most one blank line) only `- [title](http…)` lines and their `  > ` quote lines to the end.
fn sources_start(lines: &[&str]) -> Option<usize> {
    let at = lines.iter().rposition(|l| *l == SOURCES)?;
    if at > 0 && !lines[at - 1].is_empty() {
        return None;
    }
    let mut rest = &lines[at + 1..];
    if rest.first().is_some_and(|l| l.is_empty()) {
        rest = &rest[1..];
    }
    let is_source = |l: &&str| {
        l.strip_prefix("- [")
            .and_then(|r| r.split_once("](http"))
            .is_some_and(|(_, tail)| tail.ends_with(')'))
    };
    let ok = rest.first().is_some_and(is_source)
        && rest
            .iter()
            .all(|l| is_source(l) || *l == ">" || l.starts_with("> "));
    ok.then_some(at)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::identity::match_text;
    use proptest::prelude::*;

    #[test]
    fn error_notes_are_one_line_markers_that_keep_their_words() {
        assert_eq!(tool_error("disk full"), "[error] disk full");
        assert!(tool_error("x").starts_with(ERROR));
        assert_eq!(site_error("rate limited"), "[error: rate limited]");
        for line in [tool_error("disk full"), site_error("disk full")] {
            assert!(!is_placeholder(&line), "{line}");
            assert!(match_text(&line).contains("disk full"), "{line}");
        }
    }

    fn call(name: &str, input: &str, output: Option<&str>) -> ToolCall {
        ToolCall {
            name: name.into(),
            input: input.into(),
            output: output.map(str::to_owned),
            id: None,
        }
    }

    #[test]
    fn page_style_is_reasoning_then_answer() {
        let mut p = Parts::new(Role::Assistant, "The answer.");
        p.reasoning = Some("  Let me think.\n");
        let calls = [call("search", "{}", Some("out"))];
        p.tool_calls = &calls;
        assert_eq!(
            render(&p, Style::Page),
            "[reasoning]\nLet me think.\n[/reasoning]\n\nThe answer."
        );
        p.text = "";
        assert_eq!(
            render(&p, Style::Page),
            "[reasoning]\nLet me think.\n[/reasoning]"
        );
        p.reasoning = Some("  ");
        assert_eq!(render(&p, Style::Page), "");
    }

    #[test]
    fn archive_style_keeps_tools_output_sources_and_context() {
        let calls = [
            call("python", "print(1)\n", Some("1\n")),
            call("noop", " ", None),
        ];
        let cites = [
            Citation {
                url: "https://a.example/x".into(),
                title: Some("A\n title".into()),
                quote: Some("one\ntwo".into()),
            },
            Citation {
                url: "https://b.example".into(),
                title: None,
                quote: None,
            },
        ];
        let mut p = Parts::new(Role::Assistant, "Done.");
        p.tool_calls = &calls;
        p.tool_output = Some("loose");
        p.citations = &cites;
        p.hidden = true;
        assert_eq!(
            render(&p, Style::Archive),
            "[context]\nDone.\n\n[tool: python]\n```\nprint(1)\n```\n\n[tool output]\n```\n1\n```\n\n[tool: noop]\n\n\
             [tool output]\n```\nloose\n```\n\nSources:\n- [A title](https://a.example/x)\n  > one\n  > two\n\
             - [https://b.example](https://b.example)"
        );
        // A tool's own message is its output as it is.
        let mut t = Parts::new(Role::Tool, "");
        t.tool_output = Some("raw");
        assert_eq!(render(&t, Style::Archive), "raw");
    }

    #[test]
    fn fences_outgrow_the_backticks_inside() {
        assert_eq!(
            tool_block("sh", "echo ```x```\n````"),
            "[tool: sh]\n`````\necho ```x```\n````\n`````"
        );
        let text = format!(
            "Hello there\n\n{}",
            tool_block("sh", "```\nsecret words\n```")
        );
        assert_eq!(own_lines(&text), vec!["Hello there", ""]);
    }

    #[test]
    fn placeholders_are_recognised_only_as_whole_lines() {
        for l in [
            IMAGE,
            "[image: a cat]",
            FILE,
            "[file: a.txt]",
            AUDIO,
            AUDIO_VIDEO,
            "[unsupported: x]",
            CONTEXT,
        ] {
            assert!(is_placeholder(l), "{l}");
        }
        for l in ["[draft]", "[image: a] b", "[file: a [b]]", "image"] {
            assert!(!is_placeholder(l), "{l}");
        }
        assert_eq!(image(""), IMAGE);
        assert_eq!(note("info", " "), "[info]");
        assert_eq!(note("compacted", "a b"), "[compacted] a b");
        assert_eq!(file("  "), FILE);
        assert_eq!(file(" a\nb "), "[file: a b]");
        assert_eq!(image("a  cat"), "[image: a cat]");
    }

    #[test]
    fn sources_are_dropped_only_as_the_final_list() {
        let list = "Sources:\n- [T one](https://x.example)\n  > q";
        assert_eq!(own_lines(&format!("Body\n\n{list}")), vec!["Body", ""]);
        // With a blank line after the heading (as a page renders a paragraph and a list).
        assert_eq!(
            own_lines("Body\n\nSources:\n\n- [T](https://x.example)"),
            vec!["Body", ""]
        );
        // Not last, not a link list, or inside a paragraph: words.
        assert_eq!(own_lines(&format!("{list}\n\nAfter")).len(), 5);
        assert_eq!(own_lines("Sources:\n- plain").len(), 2);
        assert_eq!(own_lines("Intro\nSources:\n- [T](https://x)").len(), 3);
    }

    fn word() -> impl Strategy<Value = String> {
        "[a-zäöß]{1,8}"
    }

    #[test]
    fn injected_spans_leave_the_words_and_are_not_read_back() {
        let tags = ["system-reminder", "local-command-caveat"];
        let msg =
            "Fix the build.\n<system-reminder>\nTodo list is empty.\n</system-reminder>\nThanks";
        let (text, own) = split_injected(msg, &tags);
        assert!(own);
        assert_eq!(
            text,
            "Fix the build.\n\nThanks\n\n[injected: system-reminder]\n```\nTodo list is empty.\n```"
        );
        assert_eq!(own_lines(&text), vec!["Fix the build.", "", "Thanks", ""]);
        assert_eq!(match_text(&text), match_text("Fix the build.\n\nThanks"));

        let (only, own) = split_injected(
            "<local-command-caveat>Caveat: x</local-command-caveat>",
            &tags,
        );
        assert!(!own);
        assert!(own_lines(&only).iter().all(|l| l.is_empty()), "{only}");

        // An unclosed tag and a tag not asked for stay the user's words.
        for m in ["a <system-reminder> b", "<other>x</other>"] {
            assert_eq!(split_injected(m, &tags), (m.to_owned(), true));
        }
        // A body with backticks keeps a longer fence, so its lines cannot end the block early.
        let (t, _) = split_injected("<system-reminder>```\nx\n```</system-reminder>", &tags);
        assert!(own_lines(&t).iter().all(|l| l.is_empty()), "{t}");
    }

    fn words(n: usize) -> impl Strategy<Value = String> {
        prop::collection::vec(word(), 1..n).prop_map(|w| w.join(" "))
    }

    proptest! {
        /// What the archive style adds is exactly what reading back drops: both styles have the same words.
        #[test]
        fn both_styles_have_the_same_words(
            text in words(12),
            reasoning in prop::option::of(words(8)),
            tools in prop::collection::vec((word(), "[a-z`{}:\" \n]{0,30}", prop::option::of("[a-z` \n]{0,30}")), 0..3),
            cites in prop::collection::vec((word(), prop::option::of(words(4)), prop::option::of(words(6))), 0..3),
        ) {
            let calls: Vec<ToolCall> = tools.iter().map(|(n, i, o)| call(n, i, o.as_deref())).collect();
            let cites: Vec<Citation> = cites
                .into_iter()
                .map(|(host, title, quote)| Citation { url: format!("https://{host}.example/"), title, quote })
                .collect();
            let mut p = Parts::new(Role::Assistant, &text);
            p.reasoning = reasoning.as_deref();
            p.tool_calls = &calls;
            p.citations = &cites;
            let page = crate::capture::normalize::normalize(&render(&p, Style::Page));
            let archive = crate::capture::normalize::normalize(&render(&p, Style::Archive));
            prop_assert_eq!(match_text(&page), match_text(&text));
            prop_assert_eq!(match_text(&archive), match_text(&text));
        }
    }
}
