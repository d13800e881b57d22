//! A turn's text as HTML. Captured text is the core renderer's Markdown-flavoured text (`shared/src/capture/
//! render.rs`): code fences, tables, lists, TeX source of formulas, `[reasoning]`…`[/reasoning]` blocks. It is
//! rendered with pulldown-cmark, with everything a page could turn against the reader taken out: raw HTML in the
//! text is shown as text, links other than http(s) and mailto are shown as text, images become links (no
//! request leaves the page), maths stays as its source. Reasoning blocks are collapsed in `<details>`.

use maud::{Markup, PreEscaped, html};
use personkit_shared::turn_text;
use pulldown_cmark::{CowStr, Event, LinkType, Options, Parser, Tag, TagEnd, html as md_html};

fn options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_MATH
}

fn safe_url(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    lower.starts_with("https://") || lower.starts_with("http://") || lower.starts_with("mailto:")
}

/// Markdown to HTML with the rules of the module docs.
fn render_markdown(text: &str) -> String {
    let mut events: Vec<Event<'_>> = Vec::new();
    // Per open link: `None` when kept, or the refused target (the link is shown as its text).
    let mut links: Vec<Option<CowStr<'_>>> = Vec::new();
    let mut image_urls: Vec<CowStr<'_>> = Vec::new();
    for ev in Parser::new_ext(text, options()) {
        match ev {
            Event::Html(s) | Event::InlineHtml(s) => events.push(Event::Text(s)),
            // A line break in a chat turn is one the person typed (or the page showed): keep it.
            Event::SoftBreak => events.push(Event::HardBreak),
            Event::InlineMath(s) => events.push(Event::Code(format!("${s}$").into())),
            Event::DisplayMath(s) => events.push(Event::Code(format!("$${s}$$").into())),
            Event::Start(Tag::Link {
                link_type,
                dest_url,
                title,
                id,
            }) => {
                if link_type == LinkType::Email || safe_url(&dest_url) {
                    links.push(None);
                    events.push(Event::Start(Tag::Link {
                        link_type,
                        dest_url,
                        title,
                        id,
                    }));
                } else {
                    events.push(Event::Text("[".into()));
                    links.push(Some(dest_url));
                }
            }
            Event::End(TagEnd::Link) => match links.pop().flatten() {
                None => events.push(Event::End(TagEnd::Link)),
                Some(url) => events.push(Event::Text(format!("]({url})").into())),
            },
            Event::Start(Tag::Image { dest_url, .. }) => {
                events.push(Event::Text("[image: ".into()));
                image_urls.push(dest_url);
            }
            Event::End(TagEnd::Image) => {
                let url = image_urls.pop().unwrap_or(CowStr::Borrowed(""));
                if safe_url(&url) {
                    events.push(Event::Text("] ".into()));
                    events.push(Event::Start(Tag::Link {
                        link_type: LinkType::Inline,
                        dest_url: url.clone(),
                        title: "".into(),
                        id: "".into(),
                    }));
                    events.push(Event::Text(url));
                    events.push(Event::End(TagEnd::Link));
                } else {
                    events.push(Event::Text("]".into()));
                }
            }
            other => events.push(other),
        }
    }
    let mut out = String::with_capacity(text.len() * 3 / 2);
    md_html::push_html(&mut out, events.into_iter());
    // Links leave the dashboard without telling the other site where they came from.
    out.replace("<a href=", "<a rel=\"noopener noreferrer\" href=")
}

/// A turn's content as HTML: Markdown, with reasoning blocks collapsed.
pub(crate) fn render(content: &str) -> Markup {
    let mut parts: Vec<(bool, String)> = Vec::new();
    let mut current = String::new();
    let mut in_reasoning = false;
    for line in content.split_inclusive('\n') {
        let t = line.trim();
        if !in_reasoning && t == turn_text::REASONING_OPEN {
            parts.push((false, std::mem::take(&mut current)));
            in_reasoning = true;
        } else if in_reasoning && t == turn_text::REASONING_CLOSE {
            parts.push((true, std::mem::take(&mut current)));
            in_reasoning = false;
        } else {
            current.push_str(line);
        }
    }
    parts.push((in_reasoning, current));
    html! {
        @for (reasoning, text) in parts.iter().filter(|(_, t)| !t.trim().is_empty()) {
            @if *reasoning {
                details.reasoning {
                    summary { "Reasoning" }
                    div.md { (PreEscaped(render_markdown(text))) }
                }
            } @else {
                div.md { (PreEscaped(render_markdown(text))) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> String {
        render(s).into_string()
    }

    #[test]
    fn hostile_html_is_text() {
        let out = r(
            "hi <script>alert(1)</script> <img src=x onerror=alert(2)>\n\n<iframe src=\"https://evil\"></iframe>",
        );
        assert!(!out.contains("<script"), "{out}");
        assert!(!out.contains("<img"), "{out}");
        assert!(!out.contains("<iframe"), "{out}");
        assert!(out.contains("&lt;script&gt;"), "{out}");
    }

    #[test]
    fn unsafe_links_and_images_do_not_become_elements() {
        let out = r("[click](javascript:alert(1)) and ![pic](https://tracker.example/p.png)");
        assert!(!out.contains("href=\"javascript"), "{out}");
        assert!(!out.contains("<img"), "{out}");
        assert!(out.contains("[image: pic]"), "{out}");
        let ok = r("[docs](https://example.com/a)");
        assert!(ok.contains("href=\"https://example.com/a\""), "{ok}");
        assert!(ok.contains("noreferrer"), "{ok}");
    }

    #[test]
    fn code_tables_maths_and_reasoning() {
        let out = r(
            "[reasoning]\nthink <b>hard</b>\n[/reasoning]\n\nAnswer:\n\n```rust\nfn main() { let a = 1 < 2; }\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nEuler: $e^{i\\pi} + 1 = 0$",
        );
        assert!(out.contains("<details class=\"reasoning\">"), "{out}");
        assert!(out.contains("think &lt;b&gt;hard&lt;/b&gt;"), "{out}");
        assert!(out.contains("<code class=\"language-rust\">"), "{out}");
        assert!(out.contains("1 &lt; 2"), "{out}");
        assert!(out.contains("<table>"), "{out}");
        assert!(out.contains("<code>$e^{i\\pi} + 1 = 0$</code>"), "{out}");
    }

    #[test]
    fn typed_line_breaks_are_kept() {
        let out = r("Write a function.\nKeep it short.");
        assert!(out.contains("Write a function.<br />"), "{out}");
    }
}
