//! Parsers of what the chat sites' own pages receive: the streamed reply and the conversation JSON a page loads,
//! one module per format. They turn bytes into [`NetTurn`]s, the site's own record of a turn (its message id,
//! parent, source text, reasoning, tool calls, citations, model, time) — plain values, no I/O.
//!
//! Two kinds of input:
//! - **streams** ([`stream_parser`]): an incremental parser fed arbitrary byte chunks (`push`, then `finish`). A
//!   turn comes out only once the site said its message is complete; a stream cut short yields no partial turn but
//!   [`ParseError::Incomplete`], which the caller reports as `stream_unparsed`. Any chunking of the same bytes
//!   yields the same turns (property-tested).
//! - **conversation JSON** ([`parse_conversation`]): the whole tree the page loads when it opens a conversation,
//!   every turn of it, branches (edits, regenerations) included, each with its parent's key, its depth
//!   (`position`) and whether it lies on the branch the site shows.
//!
//! What a parser does not understand is never silently dropped and never a panic: an unknown content or block
//! type becomes a marked placeholder `[unsupported: <what>]` in the turn's text and is named in
//! [`NetTurn::unknown`]; an unknown stream event is named in the parser's [`NetStream::unknown`]; bytes that are
//! not the format at all are a [`ParseError`].
//!
//! ## Mapping onto the wire format (`crate::wire::Turn`)
//! This type is not the wire format and does not change it. A caller that sends network turns maps: `role` →
//! `role`; [`NetTurn::parts`] rendered by [`crate::turn_text::render`] → `content` (the page's capture keeps
//! reasoning and answer, an import also the tool calls, their output and the sources; see `turn_text`);
//! `message_key` → `message_key` (the same id the DOM path reads where the markup carries it, e.g. ChatGPT's
//! `data-message-id`); `parent_key` → `parent_key`; `created_at_ms` → `occurred_at` (via `crate::time::rfc3339`);
//! `position` → `ordinal` only for turns on the shown branch (`on_current_branch`), since a DOM ordinal counts the
//! shown thread. `model`, `tool_calls` and `citations` have no wire field of their own. How network and DOM turns
//! are matched and merged is the wire format's rule (docs/wire-format.md), not this module's.

pub mod chatgpt;
pub mod claude;
pub mod copilot;
pub mod deepseek;
pub mod endpoints;
pub mod frame;
pub mod gemini;
pub mod grok;

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use serde_json::Value;

use crate::wire::Role;

/// One turn as the site itself records it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetTurn {
    /// `browser-ext:<name>`, as in the wire format.
    pub surface: String,
    pub conversation_id: Option<String>,
    /// The site's own id of the message.
    pub message_key: String,
    /// The site's id of the message this one answers or follows (its parent in the tree), when known.
    pub parent_key: Option<String>,
    pub role: Role,
    /// The turn's answer (or prompt) in the site's source form: Markdown or plain text. Reasoning, tool input and
    /// output, and citations are not in it.
    pub text: String,
    /// Reasoning ("thinking") kept apart from the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Tools the turn called, in order, with their output when the same message carries it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Output of a tool when the turn is a tool's message (ChatGPT's `tool` role) or a result not matched to a
    /// call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_output: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub citations: Vec<Citation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// When the site says the turn was made, milliseconds since the Unix epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at_ms: Option<i64>,
    /// Depth in the conversation tree (0 = the first message), when the input is a tree.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<u32>,
    /// Whether the turn lies on the branch the site currently shows (conversation JSON only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_current_branch: Option<bool>,
    /// A message the site keeps out of the visible thread (system prompts, custom-instruction context).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
    /// Content or block types this parser did not understand; each also left a `[unsupported: …]` placeholder.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
}

impl NetTurn {
    pub(crate) fn new(surface: Surface, message_key: String, role: Role) -> NetTurn {
        NetTurn::empty(surface.id().to_owned(), message_key, role)
    }

    /// A turn of surface id `surface` with nothing read yet: no text, parts, parent or place. Parsers and the
    /// harvesters start every turn from here.
    pub fn empty(surface: String, message_key: String, role: Role) -> NetTurn {
        NetTurn {
            surface,
            conversation_id: None,
            message_key,
            parent_key: None,
            role,
            text: String::new(),
            reasoning: None,
            tool_calls: Vec::new(),
            tool_output: None,
            citations: Vec::new(),
            model: None,
            created_at_ms: None,
            position: None,
            on_current_branch: None,
            hidden: false,
            unknown: Vec::new(),
        }
    }

    /// The turn's parts, for [`crate::turn_text::render`].
    pub fn parts(&self) -> crate::turn_text::Parts<'_> {
        crate::turn_text::Parts {
            role: self.role,
            text: &self.text,
            reasoning: self.reasoning.as_deref(),
            tool_calls: &self.tool_calls,
            tool_output: self.tool_output.as_deref(),
            citations: &self.citations,
            hidden: self.hidden,
        }
    }

    pub(crate) fn add_reasoning(&mut self, r: &str) {
        if r.trim().is_empty() {
            return;
        }
        match &mut self.reasoning {
            Some(s) => {
                s.push_str("\n\n");
                s.push_str(r);
            }
            None => self.reasoning = Some(r.to_owned()),
        }
    }

    pub(crate) fn add_text(&mut self, t: &str) {
        if t.is_empty() {
            return;
        }
        if !self.text.is_empty() {
            self.text.push_str("\n\n");
        }
        self.text.push_str(t);
    }

    pub(crate) fn add_tool_output(&mut self, t: &str) {
        match &mut self.tool_output {
            Some(s) => {
                s.push_str("\n\n");
                s.push_str(t);
            }
            None => self.tool_output = Some(t.to_owned()),
        }
    }

    /// Marks something not understood: a placeholder in the text and a note in `unknown`.
    pub(crate) fn unsupported(&mut self, what: &str) {
        let what = short(what);
        self.add_text(&crate::turn_text::unsupported(&what));
        if !self.unknown.contains(&what) {
            self.unknown.push(what);
        }
    }
}

/// A tool call inside a turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    pub name: String,
    /// The call's input as the site sent it (JSON text, code, or a query).
    pub input: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The site's id of the call, when it has one (used to match the output).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// A source the turn cites.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Citation {
    pub url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The quoted passage, when the site gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quote: Option<String>,
}

pub(crate) fn push_citation(list: &mut Vec<Citation>, c: Citation) {
    if !c.url.is_empty() && !list.iter().any(|x| x.url == c.url) {
        list.push(c);
    }
}

/// Why bytes did not become turns. `code()` is what the caller reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The stream ended before its message was complete (cut off, aborted, or the site reported an error).
    #[error("the stream ended before the message was complete: {detail}")]
    Incomplete { detail: String },
    /// The bytes are not the expected format. `at` is the byte offset where the framing failed; it is 0 when
    /// the error is in a frame's content or a whole body (the detail says what).
    #[error("not the expected format at byte {at}: {detail}")]
    Malformed { at: u64, detail: String },
    /// A line or frame is longer than the parser accepts.
    #[error("a frame is longer than {limit} bytes")]
    TooLarge { limit: usize },
}

impl ParseError {
    /// The stable code of the error. All three mean the capture path reports `stream_unparsed` for the surface;
    /// the code says why.
    pub fn code(&self) -> &'static str {
        match self {
            ParseError::Incomplete { .. } => "stream_incomplete",
            ParseError::Malformed { .. } => "stream_unparsed",
            ParseError::TooLarge { .. } => "stream_too_large",
        }
    }

    pub(crate) fn malformed(detail: impl Into<String>) -> ParseError {
        ParseError::Malformed {
            at: 0,
            detail: detail.into(),
        }
    }

    pub(crate) fn incomplete(detail: impl Into<String>) -> ParseError {
        ParseError::Incomplete {
            detail: detail.into(),
        }
    }
}

/// A site whose network formats are parsed here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Surface {
    ChatGpt,
    Claude,
    Gemini,
    Copilot,
    Grok,
    DeepSeek,
}

impl Surface {
    pub const ALL: [Surface; 6] = [
        Surface::ChatGpt,
        Surface::Claude,
        Surface::Gemini,
        Surface::Copilot,
        Surface::Grok,
        Surface::DeepSeek,
    ];

    /// The wire format's surface id.
    pub fn id(self) -> &'static str {
        match self {
            Surface::ChatGpt => "browser-ext:chatgpt",
            Surface::Claude => "browser-ext:claude",
            Surface::Gemini => "browser-ext:gemini",
            Surface::Copilot => "browser-ext:copilot",
            Surface::Grok => "browser-ext:grok",
            Surface::DeepSeek => "browser-ext:deepseek",
        }
    }

    /// From a surface id (`browser-ext:chatgpt`) or its bare name (`chatgpt`).
    pub fn from_id(s: &str) -> Option<Surface> {
        let name = s.strip_prefix("browser-ext:").unwrap_or(s);
        Surface::ALL
            .into_iter()
            .find(|x| x.id().strip_prefix("browser-ext:") == Some(name))
    }

    /// Whether the site has a conversation JSON this module parses.
    pub fn has_conversation_format(self) -> bool {
        matches!(
            self,
            Surface::ChatGpt | Surface::Claude | Surface::Grok | Surface::DeepSeek
        )
    }
}

/// An incremental parser of one streamed reply.
pub trait NetStream: std::fmt::Debug {
    /// Feeds the next bytes; returns the turns they completed. After an error every call returns the same error.
    fn push(&mut self, chunk: &[u8]) -> Result<Vec<NetTurn>, ParseError>;
    /// The stream ended: the turns still to come out, or [`ParseError::Incomplete`] when a message was left
    /// unfinished (no partial turn is ever returned).
    fn finish(&mut self) -> Result<Vec<NetTurn>, ParseError>;
    /// Event or operation types seen and not understood (deduplicated, at most 32).
    fn unknown(&self) -> &[String];
    /// The conversation id the stream named, if any.
    fn conversation_id(&self) -> Option<&str>;
}

/// A new stream parser for a surface's streamed reply.
pub fn stream_parser(surface: Surface) -> Box<dyn NetStream> {
    match surface {
        Surface::ChatGpt => Box::new(Stream::new(chatgpt::StreamHandler::default())),
        Surface::Claude => Box::new(Stream::new(claude::StreamHandler::default())),
        Surface::Gemini => Box::new(Stream::new(gemini::StreamHandler::default())),
        Surface::Copilot => Box::new(Stream::new(copilot::StreamHandler::default())),
        Surface::Grok => Box::new(Stream::new(grok::StreamHandler::default())),
        Surface::DeepSeek => Box::new(Stream::new(deepseek::StreamHandler::default())),
    }
}

/// A parsed conversation JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Conversation {
    pub conversation_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Every turn of the tree, parents before children, siblings oldest first.
    pub turns: Vec<NetTurn>,
}

/// Parses the conversation JSON a surface's page loads (ChatGPT, Claude, Grok, DeepSeek).
pub fn parse_conversation(surface: Surface, bytes: &[u8]) -> Result<Conversation, ParseError> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| ParseError::malformed(format!("not JSON: {e}")))?;
    parse_conversation_value(surface, &v)
}

/// [`parse_conversation`] over JSON already parsed: one conversation of an official export (whose entries have
/// the shape of the conversation JSON the site's page loads) or the body of that request.
pub fn parse_conversation_value(surface: Surface, v: &Value) -> Result<Conversation, ParseError> {
    match surface {
        Surface::ChatGpt => chatgpt::conversation(v),
        Surface::Claude => claude::conversation(v),
        Surface::Grok => grok::conversation(v),
        Surface::DeepSeek => deepseek::conversation(v),
        Surface::Gemini | Surface::Copilot => Err(ParseError::malformed(format!(
            "{} has no conversation JSON format here",
            surface.id()
        ))),
    }
}

/// What [`parse_network`] returns: the turns of a whole body and what was not understood.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Parsed {
    pub conversation_id: Option<String>,
    pub turns: Vec<NetTurn>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
}

/// One call for a whole body: `kind` is `stream` or `conversation`.
pub fn parse_network(surface: &str, kind: &str, bytes: &[u8]) -> Result<Parsed, ParseError> {
    let s = Surface::from_id(surface).ok_or_else(|| {
        ParseError::malformed(format!("no network parser for surface {}", short(surface)))
    })?;
    match kind {
        "stream" => {
            let mut p = stream_parser(s);
            let mut turns = p.push(bytes)?;
            turns.extend(p.finish()?);
            Ok(Parsed {
                conversation_id: p.conversation_id().map(str::to_owned),
                turns,
                unknown: p.unknown().to_vec(),
            })
        }
        "conversation" => {
            let c = parse_conversation(s, bytes)?;
            let unknown = c.turns.iter().flat_map(|t| t.unknown.iter().cloned()).fold(
                Vec::new(),
                |mut acc: Vec<String>, u| {
                    if !acc.contains(&u) {
                        acc.push(u);
                    }
                    acc
                },
            );
            Ok(Parsed {
                conversation_id: c.conversation_id,
                turns: c.turns,
                unknown,
            })
        }
        other => Err(ParseError::malformed(format!(
            "kind must be stream or conversation, not {}",
            short(other)
        ))),
    }
}

/// [`parse_network`] as JSON text, for a JS caller: `{"ok": Parsed}` or `{"error": {"code", "message"}}`.
pub fn parse_network_json(surface: &str, kind: &str, bytes: &[u8]) -> String {
    let v = match parse_network(surface, kind, bytes) {
        Ok(p) => serde_json::json!({ "ok": p }),
        Err(e) => serde_json::json!({ "error": { "code": e.code(), "message": e.to_string() } }),
    };
    v.to_string()
}

/// A format's stream logic on top of a framing.
pub(crate) trait Handler: std::fmt::Debug {
    const FRAMING: frame::Framing;
    fn frame(&mut self, f: frame::Frame<'_>, out: &mut Vec<NetTurn>) -> Result<(), ParseError>;
    /// The stream ended.
    fn end(&mut self, out: &mut Vec<NetTurn>) -> Result<(), ParseError>;
    fn unknown(&self) -> &Unknown;
    fn conversation_id(&self) -> Option<&str>;
}

/// Byte buffering, sticky errors and the finished state, shared by every format.
#[derive(Debug)]
pub(crate) struct Stream<H: Handler> {
    framer: frame::Framer,
    handler: H,
    error: Option<ParseError>,
    finished: bool,
}

impl<H: Handler> Stream<H> {
    fn new(handler: H) -> Stream<H> {
        Stream {
            framer: frame::Framer::new(H::FRAMING),
            handler,
            error: None,
            finished: false,
        }
    }

    fn run(
        &mut self,
        step: impl FnOnce(&mut frame::Framer, &mut H, &mut Vec<NetTurn>) -> Result<(), ParseError>,
    ) -> Result<Vec<NetTurn>, ParseError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let mut out = Vec::new();
        match step(&mut self.framer, &mut self.handler, &mut out) {
            Ok(()) => Ok(out),
            Err(e) => {
                self.error = Some(e.clone());
                Err(e)
            }
        }
    }
}

impl<H: Handler> NetStream for Stream<H> {
    fn push(&mut self, chunk: &[u8]) -> Result<Vec<NetTurn>, ParseError> {
        if self.finished {
            return Err(ParseError::malformed("bytes after the stream was finished"));
        }
        self.run(|framer, h, out| framer.push(chunk, &mut |f| h.frame(f, out)))
    }

    fn finish(&mut self) -> Result<Vec<NetTurn>, ParseError> {
        if self.finished {
            return Ok(Vec::new());
        }
        self.finished = true;
        self.run(|framer, h, out| {
            framer.finish(&mut |f| h.frame(f, out))?;
            h.end(out)
        })
    }

    fn unknown(&self) -> &[String] {
        &self.handler.unknown().0
    }

    fn conversation_id(&self) -> Option<&str> {
        self.handler.conversation_id()
    }
}

/// Names of things not understood, deduplicated and bounded.
#[derive(Debug, Default, Clone)]
pub(crate) struct Unknown(pub Vec<String>);

impl Unknown {
    pub fn note(&mut self, what: &str) {
        let what = short(what);
        if self.0.len() < 32 && !self.0.contains(&what) {
            self.0.push(what);
        }
    }
}

/// A value quoted back in a report: at most 60 characters, control characters dropped.
pub(crate) fn short(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(60).collect()
}

/// Parses a JSON frame, as an error naming the format when it is not JSON.
pub(crate) fn json(text: &str, what: &str) -> Result<Value, ParseError> {
    serde_json::from_str(text)
        .map_err(|e| ParseError::malformed(format!("{what} is not JSON: {e}")))
}

/// A string field, `None` when absent, not a string or empty.
pub(crate) fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The value at a path of object keys (what `Value::pointer` does, without parsing a pointer string).
pub(crate) fn field<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(k))
}

/// An id that may be given as a string or a number.
pub(crate) fn id_of(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Seconds since the epoch (float, as ChatGPT and DeepSeek give them) → milliseconds.
pub(crate) fn secs_to_ms(v: Option<&Value>) -> Option<i64> {
    let f = v?.as_f64()?;
    if f.is_finite() && (0.0..1e11).contains(&f) {
        Some((f * 1000.0).round() as i64)
    } else {
        None
    }
}

/// Orders a tree's turns (parents before children, siblings by time then input order), sets each turn's depth
/// and whether it lies on the branch ending at `current` (the site's shown leaf). Turns whose parent is not in
/// the set are roots; a cycle in hostile input is broken where it is found.
pub(crate) fn arrange(turns: Vec<NetTurn>, current: Option<&str>) -> Vec<NetTurn> {
    let index: HashMap<&str, usize> = turns
        .iter()
        .enumerate()
        .map(|(i, t)| (t.message_key.as_str(), i))
        .collect();
    let parent_of = |i: usize| -> Option<usize> {
        let p = turns[i].parent_key.as_deref()?;
        index.get(p).copied().filter(|&j| j != i)
    };
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); turns.len()];
    let mut roots = Vec::new();
    for i in 0..turns.len() {
        match parent_of(i) {
            Some(p) => children[p].push(i),
            None => roots.push(i),
        }
    }
    let key = |i: &usize| (turns[*i].created_at_ms.unwrap_or(i64::MAX), *i);
    for c in &mut children {
        c.sort_by_key(key);
    }
    roots.sort_by_key(key);

    let mut on_branch = HashSet::new();
    if let Some(mut i) = current.and_then(|c| index.get(c).copied()) {
        while on_branch.insert(i) {
            match parent_of(i) {
                Some(p) => i = p,
                None => break,
            }
        }
    }

    let mut order = Vec::with_capacity(turns.len());
    let mut depth = vec![0u32; turns.len()];
    let mut seen = vec![false; turns.len()];
    let mut pending: Vec<usize> = roots.iter().rev().copied().collect();
    // Nodes only reachable through a cycle get visited as roots after the rest.
    let mut rest = (0..turns.len()).rev().collect::<Vec<_>>();
    loop {
        let i = match pending.pop() {
            Some(i) => i,
            None => match rest.pop() {
                Some(i) => i,
                None => break,
            },
        };
        if seen[i] {
            continue;
        }
        seen[i] = true;
        order.push(i);
        for &c in children[i].iter().rev() {
            if !seen[c] {
                depth[c] = depth[i].saturating_add(1);
                pending.push(c);
            }
        }
    }

    let mut slots: Vec<Option<NetTurn>> = turns.into_iter().map(Some).collect();
    order
        .into_iter()
        .filter_map(|i| {
            let mut t = slots[i].take()?;
            t.position = Some(depth[i]);
            t.on_current_branch = Some(current.is_some() && on_branch.contains(&i));
            Some(t)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(key: &str, parent: Option<&str>, at: i64) -> NetTurn {
        let mut t = NetTurn::new(Surface::Claude, key.into(), Role::User);
        t.parent_key = parent.map(str::to_owned);
        t.created_at_ms = Some(at);
        t
    }

    #[test]
    fn arrange_orders_tree_and_marks_branch() {
        let turns = vec![
            t("c2", Some("b"), 5),
            t("a", None, 1),
            t("b", Some("a"), 2),
            t("c1", Some("b"), 3),
            t("x", Some("y"), 0),
            t("y", Some("x"), 0),
        ];
        let got = arrange(turns, Some("c2"));
        let keys: Vec<_> = got
            .iter()
            .map(|t| (t.message_key.as_str(), t.position, t.on_current_branch))
            .collect();
        assert_eq!(
            keys,
            vec![
                ("a", Some(0), Some(true)),
                ("b", Some(1), Some(true)),
                ("c1", Some(2), Some(false)),
                ("c2", Some(2), Some(true)),
                ("x", Some(0), Some(false)),
                ("y", Some(1), Some(false)),
            ]
        );
    }

    #[test]
    fn parts_carry_every_field_the_text_is_made_of() {
        let mut t = NetTurn::new(Surface::Claude, "k".into(), Role::Assistant);
        t.text = "The answer.".into();
        t.reasoning = Some("Let me think.".into());
        t.tool_output = Some("out".into());
        t.hidden = true;
        let p = t.parts();
        assert_eq!(
            (p.role, p.text, p.reasoning, p.tool_output, p.hidden),
            (
                Role::Assistant,
                "The answer.",
                Some("Let me think."),
                Some("out"),
                true
            )
        );
        assert_eq!(
            crate::turn_text::render(&p, crate::turn_text::Style::Page),
            format!(
                "{}\n\nThe answer.",
                crate::turn_text::reasoning_block("Let me think.")
            )
        );
    }

    #[test]
    fn parse_network_json_answers_ok_or_error() {
        let ok = parse_network_json(
            "grok",
            "conversation",
            br#"{"responses":[{"responseId":"a","sender":"human","message":"hi"}]}"#,
        );
        let v: Value = serde_json::from_str(&ok).unwrap_or_default();
        assert_eq!(v["ok"]["turns"][0]["text"], "hi", "{ok}");
        let err = parse_network_json(
            "claude",
            "stream",
            b"data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\n",
        );
        let v: Value = serde_json::from_str(&err).unwrap_or_default();
        assert_eq!(v["error"]["code"], "stream_incomplete", "{err}");
    }

    #[test]
    fn parse_network_refuses_unknown_surface_and_kind() {
        assert!(parse_network("browser-ext:poe", "stream", b"").is_err());
        assert!(parse_network("chatgpt", "snapshot", b"").is_err());
    }
}
