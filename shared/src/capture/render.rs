//! The one text renderer of every surface. The content script reduces a turn's DOM to a small tree of a fixed
//! vocabulary (the page's structure without its styling, site chrome already left out by the surface's registry
//! rules); this module turns that tree into Markdown-flavoured plain text. No site is named here: what differs
//! between sites is how their markup maps onto the vocabulary, which is registry data read by the content script.
//!
//! A tree node is a JSON string (text) or an array `[tag, {attributes}?, children…]`. Tags:
//!
//! | tag | what it is | rendered as |
//! |---|---|---|
//! | `b` | a block (`div`, custom block elements) | its own line(s) |
//! | `p`, `h` (`l`: level) | paragraph, heading | a paragraph (`#`×level for headings) |
//! | `q` | blockquote | lines prefixed `> ` |
//! | `ul`, `ol` (`s`: start), `li` | lists | one item per line, `- ` / `N. `, nested items indented |
//! | `table`, `tr`, `td`, `th` | tables | a Markdown table, first row as header |
//! | `pre` (`lang`) | code block | a fenced block with its language, whitespace exact |
//! | `code` | inline code | `` `code` `` |
//! | `ws` | text that keeps its whitespace (`white-space: pre*`) | as is |
//! | `br`, `hr` | line break, rule | newline, `---` |
//! | `m` (`tex`, `d`: display) | one formula | `$tex$` / `$$tex$$` when the TeX source is known, else its text |
//! | `a` (`href`), `cite` (`href`) | link, citation chip | `[text](url)`; a citation is its URL only |
//! | `img` (`alt`), `file` (`name`) | image, attachment | `[image: alt]`, `[file: name]` |
//! | `think` | reasoning shown beside the answer | a block between `[reasoning]` and `[/reasoning]` lines |
//! | `lbl` | who answered (a side or model, e.g. in a two-answer battle) | a first line `[label]` |
//!
//! The markers (`[reasoning]`, `[image: …]`, `[file: …]`, a citation's `(url)`) are written by
//! [`crate::turn_text`], which owns them for every capture path.
//!
//! Unknown tags render their children (a newer content script never loses text on an older core).

/// Deepest tree accepted and rendered (a hostile page can nest without end; the content script flattens below
/// 80 levels).
const MAX_DEPTH: usize = 96;

use crate::turn_text;

/// A node of the render tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Text(String),
    El(Element),
    /// Numbers, booleans, null and objects where a node is expected: ignored.
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    tag: String,
    attrs: Vec<(String, String)>,
    kids: Vec<Value>,
}

/// Renders a tree given as JSON text. `None` when it is not JSON of the tree's shape or nests too deep.
pub fn render_json(doc: &str) -> Option<String> {
    let v = parse(doc)?;
    Some(render(&v))
}

/// Renders a parsed tree.
pub fn render(doc: &Value) -> String {
    let mut w = Writer::default();
    w.node(doc, false, 0);
    w.out
}

/// Parses the tree's JSON (a small parser of its own: no numbers are converted, which keeps floating-point
/// parsing out of the wasm build).
pub fn parse(doc: &str) -> Option<Value> {
    let mut p = Parser {
        s: doc.as_bytes(),
        i: 0,
    };
    let v = p.value(0)?;
    p.ws();
    (p.i == p.s.len()).then_some(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

/// A JSON value as the tree needs it: strings, arrays, objects of strings; anything else is skipped.
enum Json {
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, String)>),
    Skip,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|b| b.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        self.ws();
        if self.s.get(self.i) == Some(&b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
        let j = self.json(depth)?;
        Some(to_node(j))
    }

    fn json(&mut self, depth: usize) -> Option<Json> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        match *self.s.get(self.i)? {
            b'"' => self.string().map(Json::Str),
            b'[' => {
                self.i += 1;
                let mut items = Vec::new();
                if self.eat(b']') {
                    return Some(Json::Arr(items));
                }
                loop {
                    items.push(self.json(depth + 1)?);
                    if self.eat(b']') {
                        return Some(Json::Arr(items));
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            b'{' => {
                self.i += 1;
                let mut fields = Vec::new();
                if self.eat(b'}') {
                    return Some(Json::Obj(fields));
                }
                loop {
                    self.ws();
                    let k = self.string()?;
                    if !self.eat(b':') {
                        return None;
                    }
                    if let Json::Str(v) = self.json(depth + 1)? {
                        fields.push((k, v));
                    }
                    if self.eat(b'}') {
                        return Some(Json::Obj(fields));
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            _ => {
                // A number or a literal: skipped as a token.
                let start = self.i;
                while self
                    .s
                    .get(self.i)
                    .is_some_and(|b| b.is_ascii_alphanumeric() || b"+-.".contains(b))
                {
                    self.i += 1;
                }
                (self.i > start).then_some(Json::Skip)
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let h = self.s.get(self.i..self.i + 4)?;
        self.i += 4;
        u32::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()
    }

    fn string(&mut self) -> Option<String> {
        if self.s.get(self.i) != Some(&b'"') {
            return None;
        }
        self.i += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let b = *self.s.get(self.i)?;
            self.i += 1;
            match b {
                b'"' => return String::from_utf8(out).ok(),
                b'\\' => {
                    let e = *self.s.get(self.i)?;
                    self.i += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let cp = if (0xD800..0xDC00).contains(&hi)
                                && self.s.get(self.i..self.i + 2) == Some(b"\\u")
                            {
                                self.i += 2;
                                let lo = self.hex4()?;
                                0x10000 + ((hi - 0xD800) << 10) + (lo.wrapping_sub(0xDC00) & 0x3FF)
                            } else {
                                hi
                            };
                            char::from_u32(cp).unwrap_or('\u{FFFD}')
                        }
                        _ => return None,
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                0..=0x1f => return None,
                _ => out.push(b),
            }
        }
    }
}

fn to_node(j: Json) -> Value {
    match j {
        Json::Str(s) => Value::Text(s),
        Json::Arr(items) => {
            let mut it = items.into_iter();
            let Some(Json::Str(tag)) = it.next() else {
                return Value::Other;
            };
            let mut attrs = Vec::new();
            let mut kids = Vec::new();
            for (i, item) in it.enumerate() {
                match item {
                    Json::Obj(a) if i == 0 => attrs = a,
                    other => kids.push(to_node(other)),
                }
            }
            Value::El(Element { tag, attrs, kids })
        }
        Json::Obj(_) | Json::Skip => Value::Other,
    }
}

#[derive(Default)]
struct Writer {
    out: String,
}

type Attrs = [(String, String)];

fn tag_of(v: &Value) -> Option<(&str, &Attrs, &[Value])> {
    match v {
        Value::El(e) => Some((e.tag.as_str(), e.attrs.as_slice(), e.kids.as_slice())),
        _ => None,
    }
}

fn attr<'a>(attrs: &'a Attrs, key: &str) -> &'a str {
    attrs
        .iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.as_str())
}

/// The text of a subtree, whitespace as written (for code blocks and formulas without a source).
fn raw_text(v: &Value, out: &mut String, depth: usize) {
    match v {
        Value::Text(s) => out.push_str(s),
        Value::El(_) if depth < MAX_DEPTH * 4 => {
            if let Some((tag, _, kids)) = tag_of(v) {
                if tag == "br" {
                    out.push('\n');
                }
                for k in kids {
                    raw_text(k, out, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// Renders `kids` on their own, as a standalone piece of text (a list item's, a cell's, a quote's content).
fn blocks(kids: &[Value], pre: bool, depth: usize) -> String {
    let mut w = Writer::default();
    for k in kids {
        w.node(k, pre, depth);
    }
    w.out
}

/// Whether a piece of inline text may be put between single backticks / in a table cell as is.
fn fence_for(code: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in code.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat(longest + 1)
}

impl Writer {
    /// Make sure the output ends with at least `n` newlines (nothing at the very start).
    fn newlines(&mut self, n: usize) {
        if self.out.is_empty() {
            return;
        }
        let trimmed = self.out.trim_end_matches([' ', '\t']).len();
        self.out.truncate(trimmed);
        let have = self.out.len() - self.out.trim_end_matches('\n').len();
        for _ in have..n {
            self.out.push('\n');
        }
    }

    fn at_line_start(&self) -> bool {
        self.out.is_empty() || self.out.ends_with('\n')
    }

    fn text(&mut self, t: &str, pre: bool) {
        if pre {
            self.out.push_str(t);
            return;
        }
        let mut space = false;
        for c in t.chars() {
            if matches!(c, ' ' | '\t' | '\n' | '\r' | '\u{c}') {
                space = true;
                continue;
            }
            if space && !self.at_line_start() && !self.out.ends_with(' ') {
                self.out.push(' ');
            }
            space = false;
            self.out.push(c);
        }
        if space && !self.at_line_start() && !self.out.ends_with(' ') {
            self.out.push(' ');
        }
    }

    /// Inline content placed as is (its spacing comes from the text nodes around it).
    fn inline(&mut self, s: &str) {
        self.out.push_str(s);
    }

    /// A finished block of text (rendered on its own) placed as a paragraph.
    fn paragraph(&mut self, s: &str) {
        let s = s.trim_matches('\n');
        if s.trim().is_empty() {
            return;
        }
        self.newlines(2);
        self.out.push_str(s);
        self.newlines(2);
    }

    fn node(&mut self, v: &Value, pre: bool, depth: usize) {
        let Some((tag, attrs, kids)) = tag_of(v) else {
            if let Value::Text(s) = v {
                self.text(s, pre);
            }
            return;
        };
        if depth >= MAX_DEPTH {
            let mut s = String::new();
            raw_text(v, &mut s, depth);
            self.text(&s, pre);
            return;
        }
        let d = depth + 1;
        match tag {
            "br" => {
                let trimmed = self.out.trim_end_matches(' ').len();
                self.out.truncate(trimmed);
                self.out.push('\n');
            }
            "hr" => self.paragraph("---"),
            "p" => {
                self.newlines(2);
                self.children(kids, pre, d);
                self.newlines(2);
            }
            "h" => {
                let level = attr(attrs, "l").parse::<usize>().unwrap_or(1).clamp(1, 6);
                let body = blocks(kids, pre, d);
                let body = body.split_whitespace().collect::<Vec<_>>().join(" ");
                if !body.is_empty() {
                    self.paragraph(&format!("{} {body}", "#".repeat(level)));
                }
            }
            "b" | "li" | "tr" | "td" | "th" => {
                self.newlines(1);
                self.children(kids, pre, d);
                self.newlines(1);
            }
            "ws" => self.children(kids, true, d),
            "q" => {
                let body = blocks(kids, pre, d);
                let quoted: Vec<String> = body
                    .trim_matches('\n')
                    .split('\n')
                    .map(|l| {
                        if l.trim().is_empty() {
                            ">".to_owned()
                        } else {
                            format!("> {l}")
                        }
                    })
                    .collect();
                self.paragraph(&quoted.join("\n"));
            }
            "think" => {
                let body = blocks(kids, pre, d);
                let body = body.trim_matches('\n');
                if !body.trim().is_empty() {
                    self.paragraph(&turn_text::reasoning_block(body));
                }
            }
            "lbl" => {
                let body = blocks(kids, false, d);
                let body = body.split_whitespace().collect::<Vec<_>>().join(" ");
                if !body.is_empty() {
                    self.paragraph(&format!("[{body}]"));
                }
            }
            "ul" | "ol" => {
                let list = self.list(tag == "ol", attrs, kids, d);
                self.paragraph(&list);
            }
            "table" => {
                let table = table(kids, d);
                self.paragraph(&table);
            }
            "pre" => {
                let mut code = String::new();
                for k in kids {
                    raw_text(k, &mut code, d);
                }
                let code = code.strip_suffix('\n').unwrap_or(&code);
                let fence = "`".repeat(3.max(fence_for(code).len()));
                let lang = attr(attrs, "lang");
                self.paragraph(&format!("{fence}{lang}\n{code}\n{fence}"));
            }
            "code" if !pre => {
                let mut code = String::new();
                for k in kids {
                    raw_text(k, &mut code, d);
                }
                let code = code.split_whitespace().collect::<Vec<_>>().join(" ");
                if !code.is_empty() {
                    let f = fence_for(&code);
                    let pad = if code.starts_with('`') || code.ends_with('`') {
                        " "
                    } else {
                        ""
                    };
                    self.inline(&format!("{f}{pad}{code}{pad}{f}"));
                }
            }
            "m" => {
                let tex = attr(attrs, "tex").trim();
                let display = !attr(attrs, "d").is_empty();
                if tex.is_empty() {
                    let mut s = String::new();
                    for k in kids {
                        raw_text(k, &mut s, d);
                    }
                    if display {
                        self.paragraph(s.trim());
                    } else {
                        self.text(&s, false);
                    }
                } else if display {
                    self.paragraph(&format!("$${tex}$$"));
                } else {
                    self.inline(&format!("${tex}$"));
                }
            }
            "a" => {
                let href = attr(attrs, "href");
                let label = blocks(kids, false, d);
                let label = label.split_whitespace().collect::<Vec<_>>().join(" ");
                let web = href.starts_with("https://") || href.starts_with("http://");
                if !web || label == href {
                    self.text(&label, false);
                } else if label.is_empty() {
                    self.inline(href);
                } else {
                    self.inline(&format!("[{label}]({href})"));
                }
            }
            "cite" => {
                let href = attr(attrs, "href");
                if href.starts_with("https://") || href.starts_with("http://") {
                    if !self.at_line_start() && !self.out.ends_with(' ') {
                        self.out.push(' ');
                    }
                    self.inline(&turn_text::cited(href));
                }
            }
            "img" => {
                self.inline(&turn_text::image(attr(attrs, "alt")));
            }
            "file" => {
                self.newlines(1);
                self.inline(&turn_text::file(attr(attrs, "name")));
                self.newlines(1);
            }
            _ => self.children(kids, pre, d),
        }
    }

    fn children(&mut self, kids: &[Value], pre: bool, depth: usize) {
        for k in kids {
            self.node(k, pre, depth);
        }
    }

    /// A list: one item per line with its marker; an item's further lines (nested lists, more paragraphs)
    /// indented under its text, blank lines inside items dropped.
    fn list(&mut self, ordered: bool, attrs: &Attrs, kids: &[Value], depth: usize) -> String {
        let mut n: i64 = attr(attrs, "s").parse().unwrap_or(1);
        let mut lines: Vec<String> = Vec::new();
        for k in kids {
            let item_kids: &[Value] = match tag_of(k) {
                Some(("li", _, kids)) => kids,
                // Stray content between items (whitespace, or markup a site put there) stays in the list.
                _ => std::slice::from_ref(k),
            };
            let is_item = matches!(tag_of(k), Some(("li", _, _)));
            let body = blocks(item_kids, false, depth + 1);
            let body_lines: Vec<&str> = body
                .split('\n')
                .map(str::trim_end)
                .filter(|l| !l.trim().is_empty())
                .collect();
            if body_lines.is_empty() {
                continue;
            }
            if !is_item {
                lines.extend(body_lines.iter().map(|l| (*l).to_owned()));
                continue;
            }
            let marker = if ordered {
                format!("{n}. ")
            } else {
                "- ".to_owned()
            };
            n += 1;
            let indent = " ".repeat(marker.len());
            for (i, l) in body_lines.iter().enumerate() {
                if i == 0 {
                    lines.push(format!("{marker}{l}"));
                } else {
                    lines.push(format!("{indent}{l}"));
                }
            }
        }
        lines.join("\n")
    }
}

/// A Markdown table: rows of `tr` (anywhere below the table: head, body and foot are flattened by the content
/// script or here), cells of `td`/`th` rendered on one line each, `|` escaped; the first row is the header.
fn table(kids: &[Value], depth: usize) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    collect_rows(kids, depth, &mut rows);
    rows.retain(|r| !r.is_empty());
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    if cols == 0 {
        return String::new();
    }
    let line = |cells: &[String]| {
        let mut s = String::from("|");
        for i in 0..cols {
            s.push(' ');
            s.push_str(cells.get(i).map_or("", String::as_str));
            s.push_str(" |");
        }
        s
    };
    let mut out = vec![line(&rows[0])];
    out.push(format!("|{}", " --- |".repeat(cols)));
    out.extend(rows[1..].iter().map(|r| line(r)));
    out.join("\n")
}

fn collect_rows(kids: &[Value], depth: usize, rows: &mut Vec<Vec<String>>) {
    if depth >= MAX_DEPTH {
        return;
    }
    for k in kids {
        match tag_of(k) {
            Some(("tr", _, cells)) => {
                let mut row = Vec::new();
                for c in cells {
                    if let Some(("td" | "th", _, body)) = tag_of(c) {
                        let text = blocks(body, false, depth + 1);
                        let text = text
                            .split('\n')
                            .map(str::trim)
                            .filter(|l| !l.is_empty())
                            .collect::<Vec<_>>()
                            .join(" ")
                            .replace('|', "\\|");
                        row.push(text);
                    }
                }
                rows.push(row);
            }
            Some((_, _, inner)) => collect_rows(inner, depth + 1, rows),
            None => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r(v: serde_json::Value) -> String {
        crate::capture::normalize::normalize(&render_json(&v.to_string()).unwrap())
    }

    #[test]
    fn paragraphs_blocks_and_whitespace() {
        assert_eq!(
            r(json!([
                "b",
                ["p", "  Hello\n  world "],
                ["p", "Second ", ["code", "x"], "."]
            ])),
            "Hello world\n\nSecond `x`."
        );
        assert_eq!(
            r(json!(["b", ["ws", "line 1\n  line 2"]])),
            "line 1\n  line 2"
        );
        assert_eq!(r(json!(["b", "a", ["br"], "b"])), "a\nb");
        assert_eq!(
            r(json!(["b", ["h", {"l": "2"}, "Title"], ["p", "x"]])),
            "## Title\n\nx"
        );
        assert_eq!(
            r(json!(["b", ["q", ["p", "quoted"], ["p", "two"]]])),
            "> quoted\n>\n> two"
        );
    }

    /// Each construct as the content script reduces real markup to the tree (see `content.js` `docOf`), and the
    /// text it must become. The markup behind each tree: a GFM table as the sites' Markdown renderers emit it
    /// (`table > thead > tr > th`, `tbody > tr > td`); KaTeX (`span.katex > span.katex-mathml > math > semantics >
    /// annotation[encoding="application/x-tex"]` + an aria-hidden `span.katex-html`, display maths inside
    /// `span.katex-display`), reduced to one `m` node with the annotation's TeX; MathJax 3 CHTML without a TeX
    /// source (`mjx-container > mjx-assistive-mml > math`), reduced to the MathML text; highlighted code blocks
    /// (`pre > code.language-x`); nested lists; an image; an attachment chip; a citation chip; reasoning; a label.
    #[test]
    fn every_construct_renders_faithfully() {
        let cases: Vec<(&str, serde_json::Value, &str)> = vec![
            (
                "table",
                json!([
                    "b",
                    [
                        "table",
                        ["tr", ["th", "Name"], ["th", "Role"], ["th", "Language"]],
                        [
                            "tr",
                            ["td", "Alice"],
                            ["td", "Developer"],
                            ["td", ["code", "Python"]]
                        ],
                        [
                            "tr",
                            ["td", "Bob"],
                            ["td", ["p", "Ops"], ["p", "and on-call"]],
                            ["td", "a|b"]
                        ]
                    ]
                ]),
                "| Name | Role | Language |\n| --- | --- | --- |\n| Alice | Developer | `Python` |\n| Bob | Ops and on-call | a\\|b |",
            ),
            (
                "ragged table",
                json!([
                    "table",
                    ["tr", ["td", "only"]],
                    ["tr", ["td", "x"], ["td", "y"]]
                ]),
                "| only |  |\n| --- | --- |\n| x | y |",
            ),
            (
                "inline and block maths from KaTeX annotations",
                json!(["b", ["p", "Energy: ", ["m", {"tex": "E = mc^2"}], " holds."],
                    ["b", ["m", {"tex": "\\int_0^\\infty e^{-x}\\,dx = 1", "d": "1"}]], ["p", "Done."]]),
                "Energy: $E = mc^2$ holds.\n\n$$\\int_0^\\infty e^{-x}\\,dx = 1$$\n\nDone.",
            ),
            (
                "maths without a source: its text once",
                json!(["p", "So ", ["m", {}, "E=mc2"], "."]),
                "So E=mc2.",
            ),
            (
                "code block keeps language and whitespace",
                json!(["b", ["p", "Code:"], ["pre", {"lang": "python"}, "def f():\n    return 1\n"]]),
                "Code:\n\n```python\ndef f():\n    return 1\n```",
            ),
            (
                "code containing fences",
                json!(["pre", "```\nx\n```"]),
                "````\n```\nx\n```\n````",
            ),
            (
                "nested lists with markers",
                json!(["b", ["ul", ["li", "one"], ["li", ["p", "two"], ["ol", {"s": "3"}, ["li", "three"], ["li", "four"]]]]]),
                "- one\n- two\n  3. three\n  4. four",
            ),
            (
                "image, file, link and citation",
                json!(["b", ["p", "See ", ["img", {"alt": "a cat"}], " and ", ["img", {}]],
                    ["file", {"name": "report.pdf"}],
                    ["p", "Per ", ["a", {"href": "https://example.com/a"}, "the docs"], ["cite", {"href": "https://src.example/1"}], "."]]),
                "See [image: a cat] and [image]\n\n[file: report.pdf]\n\nPer [the docs](https://example.com/a) (https://src.example/1).",
            ),
            (
                "reasoning apart from the answer, label first",
                json!([
                    "b",
                    ["lbl", " Assistant A  gpt-x "],
                    ["think", ["b", ["p", "Let me think."]]],
                    ["p", ["b", "The answer."]]
                ]),
                "[Assistant A gpt-x]\n\n[reasoning]\nLet me think.\n[/reasoning]\n\nThe answer.",
            ),
            (
                "headings, quote, rule",
                json!(["b", ["h", {"l": "3"}, "Plan"], ["q", "note"], ["hr"], "end"]),
                "### Plan\n\n> note\n\n---\n\nend",
            ),
        ];
        let mut failures = Vec::new();
        for (name, tree, want) in cases {
            let got = r(tree);
            if got != want {
                failures.push(format!("{name}:\n got: {got:?}\nwant: {want:?}"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn unknown_tags_and_bad_nodes_keep_their_text() {
        assert_eq!(
            r(json!(["zz", "kept", 5, null, ["b", "more"]])),
            "kept\nmore"
        );
        assert_eq!(render_json("not json"), None);
        let mut deep = json!("bottom");
        for _ in 0..90 {
            deep = json!(["b", deep]);
        }
        assert_eq!(r(deep.clone()), "bottom");
        for _ in 0..20 {
            deep = json!(["b", deep]);
        }
        assert_eq!(
            render_json(&deep.to_string()),
            None,
            "deeper than the limit is refused"
        );
        assert_eq!(
            render_json(r#"["p","a\u00e9\ud83d\ude00\n"]"#).as_deref(),
            Some("aé😀\n\n")
        );
        assert_eq!(render_json(r#"["b","x"] trailing"#), None);
    }
}
