//! ChatGPT: the "delta v1" event stream of `POST /backend-api/f/conversation` and the conversation JSON of
//! `GET /backend-api/conversation/<id>`.
//!
//! Format facts (see `../shared/docs/surfaces.md` and `formats.md`): lanqian528/chat2api `chatgpt/stream_v1.py`
//! (the delta encoding: `event: delta_encoding` / `"v1"`, ops `{p, o, v}` with `append`/`replace`/`patch`/`add`,
//! omitted `p`/`o` repeating the previous op's, `c` numbering the message an op belongs to, `data: [DONE]`);
//! mitkury/chatgpt-export-parser `docs/chatgpt-data-export-format.md` and pionxzh/chatgpt-exporter `src/api.ts`
//! (the `mapping` tree, `current_node`, message fields, content types `text`, `multimodal_text`, `code`,
//! `execution_output`, `tether_quote`, `tether_browsing_display`, `thoughts`, `reasoning_recap`,
//! `user_editable_context`, `model_editable_context`). The stream also carries non-answer messages: reasoning on
//! the `analysis` channel and tool calls (a `recipient` other than `all`).
//!
//! An answer's citation markers (`【6†source】`, the private-use `\u{e200}cite…\u{e201}`) become the page's chips of
//! the cited URLs, placed by the message metadata (`citations`, `_cite_metadata`, `content_references`: pionxzh
//! `src/api.ts` and `src/utils/citations.ts`), each source listed in the turn's citations (`resolve_markers`).
//! The "Thought for 9s" recap (`reasoning_recap`) is the page's chrome: no turn, its children hang from its
//! parent.
//!
//! One [`NetTurn`] per message node: a reply that thought, called a tool and answered is several turns (the
//! site's own messages), each with its id; the answer is the one on the `final` channel (or with no channel).
//! Legacy streams without the delta encoding (each event a whole `{message, conversation_id}` snapshot) parse too.

use serde_json::Value;

use super::frame::{self, Frame, Framing, PatchOp};
use super::{
    Citation, Conversation, Handler, NetTurn, ParseError, Surface, ToolCall, Unknown, arrange,
    field, json, push_citation, secs_to_ms, str_of,
};
use crate::turn_text;
use crate::wire::Role;

/// Events that carry nothing a turn needs; recognised so they are not reported as unknown.
const QUIET_TYPES: &[&str] = &[
    "title_generation",
    "conversation_detail_metadata",
    "server_ste_metadata",
    "message_marker",
    "moderation",
    "url_moderation",
    "resume_conversation_token",
    "conversation_async_status",
];

#[derive(Debug)]
struct Open {
    c: Option<u64>,
    doc: Value,
    done: bool,
}

#[derive(Debug, Default)]
pub struct StreamHandler {
    open: Vec<Open>,
    current: Option<usize>,
    last_p: String,
    last_seg: Vec<String>,
    last_o: String,
    conversation_id: Option<String>,
    done: bool,
    saw_anything: bool,
    unknown: Unknown,
    /// Recaps streamed so far: their ids and parents.
    recaps: Vec<(String, Option<String>)>,
}

impl StreamHandler {
    fn doc_for(&mut self, c: Option<u64>) -> Option<usize> {
        match c {
            Some(c) => self.open.iter().position(|o| o.c == Some(c)),
            None => self.current,
        }
    }

    fn op(&mut self, mut obj: Value, out: &mut Vec<NetTurn>) -> Result<(), ParseError> {
        let c = obj.get("c").and_then(Value::as_u64);
        if let Some(c) = c {
            self.current = self.doc_for(Some(c));
        }
        let is_patch = match obj.get("o").and_then(Value::as_str) {
            Some(o) => o == "patch",
            None => {
                obj.get("p").is_none()
                    && obj.get("v").and_then(Value::as_array).is_some_and(|a| {
                        !a.is_empty()
                            && a.iter()
                                .all(|x| x.get("p").is_some() || x.get("o").is_some())
                    })
            }
        };
        let mut v = obj.get_mut("v").map(Value::take).unwrap_or(Value::Null);
        if is_patch {
            let Value::Array(ops) = &mut v else {
                return Err(ParseError::malformed("a patch op without a list of ops"));
            };
            for sub in ops {
                let sv = sub.get_mut("v").map(Value::take).unwrap_or(Value::Null);
                let sp = sub.get("p").and_then(Value::as_str);
                let so = sub.get("o").and_then(Value::as_str).unwrap_or("append");
                self.single(c, sp, Some(so), sv, out)?;
            }
            return Ok(());
        }
        let p = obj.get("p").and_then(Value::as_str);
        let o = obj.get("o").and_then(Value::as_str);
        self.single(c, p, o, v, out)
    }

    /// One operation; an omitted path or op repeats the previous one's.
    fn single(
        &mut self,
        c: Option<u64>,
        p: Option<&str>,
        o: Option<&str>,
        v: Value,
        out: &mut Vec<NetTurn>,
    ) -> Result<(), ParseError> {
        if let Some(p) = p
            && p != self.last_p
        {
            self.last_p.clear();
            self.last_p.push_str(p);
            self.last_seg = frame::segments(p);
        }
        if let Some(o) = o
            && o != self.last_o
        {
            self.last_o.clear();
            self.last_o.push_str(o);
        }
        let op = match self.last_o.as_str() {
            "add" | "replace" => PatchOp::Set,
            "append" => PatchOp::Append,
            "remove" => PatchOp::Remove,
            other => {
                let what = format!("op:{other}");
                self.unknown.note(&what);
                return Ok(());
            }
        };
        if self.last_seg.is_empty() && op == PatchOp::Set {
            // A whole new message document.
            if let Some(id) = v.get("conversation_id").and_then(Value::as_str) {
                self.conversation_id = Some(id.to_owned());
            }
            self.open.push(Open {
                c,
                doc: v,
                done: false,
            });
            self.current = Some(self.open.len() - 1);
        } else {
            let Some(i) = self.doc_for(c).or(self.current) else {
                self.unknown.note("op before any message");
                return Ok(());
            };
            if !frame::apply(&mut self.open[i].doc, &self.last_seg, op, v) {
                let what = format!("path:{}", self.last_p);
                self.unknown.note(&what);
            }
        }
        self.emit_finished(out);
        Ok(())
    }

    /// Emits every open message whose status says it is finished (in arrival order).
    fn emit_finished(&mut self, out: &mut Vec<NetTurn>) {
        for o in &mut self.open {
            if o.done {
                continue;
            }
            let status = field(&o.doc, &["message", "status"]).and_then(Value::as_str);
            if status.is_some_and(|s| s.starts_with("finished")) {
                o.done = true;
                if let Some(t) =
                    stream_turn(&o.doc, self.conversation_id.as_deref(), &mut self.recaps)
                {
                    out.push(t);
                }
            }
        }
    }

    fn emit_all(&mut self, out: &mut Vec<NetTurn>) {
        for o in &mut self.open {
            if !o.done {
                o.done = true;
                if let Some(t) =
                    stream_turn(&o.doc, self.conversation_id.as_deref(), &mut self.recaps)
                {
                    out.push(t);
                }
            }
        }
    }
}

/// A finished streamed message → its turn. `recaps` keeps each recap's id and parent, so that a message below a
/// recap hangs from the message above it, as in the conversation JSON.
fn stream_turn(
    doc: &Value,
    conversation_id: Option<&str>,
    recaps: &mut Vec<(String, Option<String>)>,
) -> Option<NetTurn> {
    let msg = doc.get("message")?;
    if is_recap(msg) {
        recaps.push((str_of(msg, "id")?.to_owned(), parent_id(msg)));
        return None;
    }
    let mut t = message_turn(msg)?;
    t.conversation_id = doc
        .get("conversation_id")
        .and_then(Value::as_str)
        .or(conversation_id)
        .map(str::to_owned);
    t.parent_key = parent_id(msg);
    if let Some((_, above)) = recaps
        .iter()
        .find(|(id, _)| t.parent_key.as_ref() == Some(id))
    {
        t.parent_key.clone_from(above);
    }
    Some(t)
}

/// The parent a streamed message names in its metadata; the client's placeholder root is no message.
fn parent_id(msg: &Value) -> Option<String> {
    field(msg, &["metadata", "parent_id"])
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty() && *p != "client-created-root")
        .map(str::to_owned)
}

impl Handler for StreamHandler {
    const FRAMING: Framing = Framing::Sse;

    fn frame(&mut self, f: Frame<'_>, out: &mut Vec<NetTurn>) -> Result<(), ParseError> {
        let Frame::Sse { event, data } = f else {
            return Ok(());
        };
        self.saw_anything = true;
        if data.trim() == "[DONE]" {
            self.done = true;
            self.emit_all(out);
            return Ok(());
        }
        let v = json(data, "a ChatGPT event")?;
        match event {
            "delta_encoding" => {
                if v.as_str() != Some("v1") {
                    self.unknown.note(&format!("delta_encoding:{v}"));
                }
                return Ok(());
            }
            "" | "delta" => {}
            other => {
                self.unknown.note(&format!("event:{other}"));
                return Ok(());
            }
        }
        if let Some(ty) = v.get("type").and_then(Value::as_str) {
            match ty {
                "input_message" => {
                    if let Some(msg) = v.get("input_message")
                        && let Some(mut t) = message_turn(msg)
                    {
                        t.conversation_id = str_of(&v, "conversation_id")
                            .or(self.conversation_id.as_deref())
                            .map(str::to_owned);
                        t.parent_key = parent_id(msg);
                        out.push(t);
                    }
                }
                "message_stream_complete" => {
                    self.done = true;
                    self.emit_all(out);
                }
                t if QUIET_TYPES.contains(&t) => {}
                other => self.unknown.note(&format!("type:{other}")),
            }
            if let Some(id) = str_of(&v, "conversation_id") {
                self.conversation_id = Some(id.to_owned());
            }
            return Ok(());
        }
        if v.get("v").is_some() || v.get("o").is_some() {
            return self.op(v, out);
        }
        if let Some(msg) = v.get("message").filter(|m| m.is_object()) {
            // A legacy whole-message snapshot: replaces the open message with the same id.
            if let Some(id) = str_of(&v, "conversation_id") {
                self.conversation_id = Some(id.to_owned());
            }
            let id = msg.get("id").and_then(Value::as_str);
            let at = self.open.iter().position(|o| {
                !o.done && field(&o.doc, &["message", "id"]).and_then(Value::as_str) == id
            });
            match at {
                Some(i) => self.open[i].doc = v.clone(),
                None => self.open.push(Open {
                    c: None,
                    doc: v.clone(),
                    done: false,
                }),
            }
            self.emit_finished(out);
            return Ok(());
        }
        if v.is_string() || v.get("error").is_some() {
            let detail = v
                .get("error")
                .map(|e| e.to_string())
                .unwrap_or_else(|| v.to_string());
            return Err(ParseError::incomplete(format!(
                "the site reported an error: {}",
                super::short(&detail)
            )));
        }
        self.unknown.note("event without a known shape");
        Ok(())
    }

    fn end(&mut self, _out: &mut Vec<NetTurn>) -> Result<(), ParseError> {
        if !self.saw_anything {
            return Err(ParseError::incomplete("the stream carried no events"));
        }
        if self.done {
            return Ok(());
        }
        // Without `[DONE]` (or `message_stream_complete`) the stream was cut: messages finished before the cut
        // came out already; the one in progress, if any, is not a turn.
        Err(ParseError::incomplete(
            "no [DONE]: the stream was cut off before it completed",
        ))
    }

    fn unknown(&self) -> &Unknown {
        &self.unknown
    }

    fn conversation_id(&self) -> Option<&str> {
        self.conversation_id.as_deref()
    }
}

fn role_of(msg: &Value, t_unknown: &mut Vec<String>) -> Role {
    match field(msg, &["author", "role"]).and_then(Value::as_str) {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("system") => Role::System,
        Some("tool") => Role::Tool,
        other => {
            let what = format!("role:{}", other.unwrap_or("none"));
            if !t_unknown.contains(&what) {
                t_unknown.push(what);
            }
            Role::System
        }
    }
}

/// One message object → a turn (`None` without an id).
pub(crate) fn message_turn(msg: &Value) -> Option<NetTurn> {
    let id = str_of(msg, "id")?;
    if is_recap(msg) {
        return None;
    }
    let mut unknown = Vec::new();
    let role = role_of(msg, &mut unknown);
    let mut t = NetTurn::new(Surface::ChatGpt, id.to_owned(), role);
    t.unknown = unknown;
    t.created_at_ms = secs_to_ms(msg.get("create_time"));
    let meta = msg.get("metadata").unwrap_or(&Value::Null);
    t.model = str_of(meta, "model_slug")
        .or_else(|| str_of(meta, "resolved_model_slug"))
        .map(str::to_owned);
    t.hidden = meta
        .get("is_visually_hidden_from_conversation")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let recipient = str_of(msg, "recipient").unwrap_or("all");
    let channel = str_of(msg, "channel");
    let content = msg.get("content").unwrap_or(&Value::Null);
    let ctype = content
        .get("content_type")
        .and_then(Value::as_str)
        .unwrap_or("");

    let parts_text = || -> (String, Vec<String>) {
        let mut s = String::new();
        let mut unk = Vec::new();
        for p in content
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let piece = match p {
                Value::String(x) => x.clone(),
                Value::Object(_) => match p.get("content_type").and_then(Value::as_str) {
                    Some("image_asset_pointer") => turn_text::IMAGE.to_owned(),
                    Some("audio_transcription") => str_of(p, "text").unwrap_or_default().to_owned(),
                    Some("audio_asset_pointer") => turn_text::AUDIO.to_owned(),
                    Some("real_time_user_audio_video_asset_pointer") => {
                        turn_text::AUDIO_VIDEO.to_owned()
                    }
                    Some("image_asset_pointer_v2" | "file_asset_pointer") => {
                        turn_text::FILE.to_owned()
                    }
                    other => {
                        let what = format!("part:{}", other.unwrap_or("object"));
                        unk.push(what.clone());
                        turn_text::unsupported(&what)
                    }
                },
                _ => String::new(),
            };
            if piece.is_empty() {
                continue;
            }
            if !s.is_empty() {
                s.push('\n');
            }
            s.push_str(&piece);
        }
        (s, unk)
    };

    match ctype {
        "text" | "multimodal_text" => {
            let (s, unk) = parts_text();
            for u in unk {
                if !t.unknown.contains(&u) {
                    t.unknown.push(u);
                }
            }
            if recipient != "all" && role == Role::Assistant {
                t.tool_calls.push(ToolCall {
                    name: recipient.to_owned(),
                    input: s,
                    output: None,
                    id: None,
                });
            } else if channel == Some("analysis") {
                t.add_reasoning(&s);
            } else if role == Role::Tool {
                t.add_tool_output(&s);
            } else if role == Role::Assistant {
                t.text = resolve_markers(&s, meta, &mut t.citations);
            } else {
                t.text = s;
            }
        }
        "code" => {
            let code = str_of(content, "text").unwrap_or_default();
            if recipient != "all" {
                t.tool_calls.push(ToolCall {
                    name: recipient.to_owned(),
                    input: code.to_owned(),
                    output: None,
                    id: None,
                });
            } else {
                let lang = str_of(content, "language").unwrap_or_default();
                let lang = if lang == "unknown" { "" } else { lang };
                t.text = format!("```{lang}\n{code}\n```");
            }
        }
        "execution_output" => {
            t.add_tool_output(str_of(content, "text").unwrap_or_default());
        }
        "tether_browsing_display" => {
            let mut s = str_of(content, "result").unwrap_or_default().to_owned();
            if let Some(sum) = str_of(content, "summary") {
                if !s.is_empty() {
                    s.push_str("\n\n");
                }
                s.push_str(sum);
            }
            t.add_tool_output(&s);
        }
        "tether_quote" => {
            push_citation(
                &mut t.citations,
                Citation {
                    url: str_of(content, "url").unwrap_or_default().to_owned(),
                    title: str_of(content, "title").map(str::to_owned),
                    quote: str_of(content, "text").map(str::to_owned),
                },
            );
        }
        "thoughts" => {
            for th in content
                .get("thoughts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let summary = str_of(th, "summary").unwrap_or_default();
                let body = str_of(th, "content").unwrap_or_default();
                let piece = match (summary.is_empty(), body.is_empty()) {
                    (false, false) => format!("**{summary}**\n\n{body}"),
                    (false, true) => format!("**{summary}**"),
                    _ => body.to_owned(),
                };
                t.add_reasoning(&piece);
            }
        }
        "user_editable_context" => {
            t.hidden = true;
            let mut s = String::new();
            for k in ["user_profile", "user_instructions"] {
                if let Some(x) = str_of(content, k) {
                    if !s.is_empty() {
                        s.push_str("\n\n");
                    }
                    s.push_str(x);
                }
            }
            t.text = s;
        }
        "model_editable_context" => {
            t.hidden = true;
            t.text = str_of(content, "model_set_context")
                .unwrap_or_default()
                .to_owned();
        }
        "system_error" => {
            t.text = crate::turn_text::site_error(
                str_of(content, "text").unwrap_or("the site reported an error"),
            );
        }
        other => t.unsupported(&format!(
            "content_type:{}",
            if other.is_empty() { "none" } else { other }
        )),
    }
    if t.role == Role::System && t.text.trim().is_empty() && t.unknown.is_empty() {
        t.hidden = true;
    }
    citations(meta, &mut t.citations);
    Some(t)
}

/// ChatGPT's "Thought for 9s" line after a reasoning message: a message node of its own in the site's data, but
/// page chrome (its text is localized), so no turn. Told by its content type, never by its words.
fn is_recap(msg: &Value) -> bool {
    field(msg, &["content", "content_type"]).and_then(Value::as_str) == Some("reasoning_recap")
}

/// The most citation references of one message that are looked at (hostile metadata stays bounded).
const MAX_REFS: usize = 512;
/// The longest citation marker, in bytes, looked for between its opening and closing characters.
const MAX_MARKER: usize = 512;

/// An answer with its citation markers replaced by what the page shows in their place: the cited URLs as chips
/// (`turn_text::cited`), or nothing where the site gives no URL. The markers are `【6†source】`/`【3:0†source】`
/// (placed by `metadata.citations[]` `start_ix`/`end_ix`, or found by number in `citations[].metadata.extra` and
/// `_cite_metadata.metadata_list`) and the private-use `\u{e200}cite\u{e202}turn0search3\u{e201}` of newer answers
/// (placed by `metadata.content_references[]` `start_idx`/`end_idx`, or found by their `matched_text`);
/// `\u{e203}`/`\u{e204}` around a cited span are dropped and an entity marker becomes its name. The offsets count
/// code points (the export is written by Python); one that is out of range or does not point at its marker is not
/// trusted. Every cited source is added to `cites`.
fn resolve_markers(text: &str, meta: &Value, cites: &mut Vec<Citation>) -> String {
    if !text.contains(opens_marker) {
        return text.to_owned();
    }
    // The byte offset of each code point, and of the end.
    let at: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let span_at = |from: Option<&Value>, to: Option<&Value>| -> Option<(usize, usize)> {
        let a = usize::try_from(from?.as_u64()?).ok()?;
        let b = usize::try_from(to?.as_u64()?).ok()?;
        (a < b && b < at.len()).then(|| (at[a], at[b]))
    };
    let list = |k: &str| {
        meta.get(k)
            .and_then(Value::as_array)
            .map_or(&[][..], |a| &a[..a.len().min(MAX_REFS)])
    };
    // Spans of the text (bytes, not overlapping) and the sources cited there.
    let mut spans: Vec<(usize, usize, Vec<&Value>)> = Vec::new();
    let free = |spans: &[(usize, usize, Vec<&Value>)], a: usize, b: usize| {
        spans.iter().all(|s| b <= s.0 || a >= s.1)
    };
    for r in list("content_references") {
        let Some(m) = str_of(r, "matched_text").filter(|m| !m.trim().is_empty()) else {
            continue;
        };
        let placed = span_at(r.get("start_idx"), r.get("end_idx"))
            .filter(|&(a, b)| &text[a..b] == m && free(&spans, a, b))
            .or_else(|| {
                text.match_indices(m)
                    .map(|(a, _)| (a, a + m.len()))
                    .find(|&(a, b)| free(&spans, a, b))
            });
        if let Some((a, b)) = placed {
            let items = r.get("items").and_then(Value::as_array);
            place(
                &mut spans,
                (a, b, items.into_iter().flatten().chain([r]).collect()),
            );
        }
    }
    for c in list("citations") {
        if let Some((a, b)) = span_at(c.get("start_ix"), c.get("end_ix"))
            && text[a..b].starts_with('【')
            && text[a..b].ends_with('】')
            && free(&spans, a, b)
        {
            place(&mut spans, (a, b, vec![c.get("metadata").unwrap_or(c)]));
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    for (a, b, sources) in spans {
        leftover_markers(&text[pos..a], meta, cites, &mut out);
        let chips = chips(&sources, cites);
        put_marker(&mut out, &chips, text[b..].chars().next());
        pos = b;
    }
    leftover_markers(&text[pos..], meta, cites, &mut out);
    out
}

/// Whether a character opens a citation marker (or is one of the span markers `\u{e203}`/`\u{e204}`).
fn opens_marker(c: char) -> bool {
    matches!(c, '【' | '\u{e200}' | '\u{e203}' | '\u{e204}')
}

/// Adds a span where it belongs in start order (the list is short: a message's markers).
fn place<'a>(spans: &mut Vec<(usize, usize, Vec<&'a Value>)>, s: (usize, usize, Vec<&'a Value>)) {
    let at = spans.iter().position(|x| x.0 > s.0).unwrap_or(spans.len());
    spans.insert(at, s);
}

/// The chips of the sources cited at one marker (each URL once), each source added to `cites`.
fn chips(sources: &[&Value], cites: &mut Vec<Citation>) -> String {
    let mut out = String::new();
    let mut seen: Vec<&str> = Vec::new();
    for s in sources {
        let Some(url) = str_of(s, "url").filter(|u| !seen.contains(u)) else {
            continue;
        };
        seen.push(url);
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&turn_text::cited(url));
        push_citation(
            cites,
            Citation {
                url: url.to_owned(),
                title: str_of(s, "title")
                    .or_else(|| str_of(s, "attribution"))
                    .map(str::to_owned),
                quote: None,
            },
        );
    }
    out
}

/// Writes what replaces a marker; a marker replaced by nothing before punctuation, a space or the end leaves no
/// whitespace behind it.
fn put_marker(out: &mut String, chips: &str, next: Option<char>) {
    if chips.is_empty() {
        if next.is_none_or(|c| c.is_whitespace() || ".,;:!?)".contains(c)) {
            out.truncate(out.trim_end().len());
        }
        return;
    }
    if !out.is_empty() && !out.ends_with(char::is_whitespace) {
        out.push(' ');
    }
    out.push_str(chips);
}

/// Markers the metadata did not place: a legacy `【N(:M)?†…】` is looked up by its numbers, a private-use marker
/// is dropped (an entity's becomes its name).
fn leftover_markers(seg: &str, meta: &Value, cites: &mut Vec<Citation>, out: &mut String) {
    let mut rest = seg;
    while let Some(i) = rest.find(opens_marker) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        let first = tail.chars().next().map_or(1, char::len_utf8);
        // Where the marker closes: before the next opening and within MAX_MARKER bytes, or it is no marker.
        let end = |close: char| {
            let open = tail.chars().next();
            tail[first..]
                .char_indices()
                .take_while(|&(j, _)| j <= MAX_MARKER)
                .find(|&(_, c)| c == close || Some(c) == open)
                .filter(|&(_, c)| c == close)
                .map(|(j, c)| (first + j, first + j + c.len_utf8()))
        };
        let replaced = if tail.starts_with('【') {
            end('】').and_then(|(j, len)| {
                let (n, m) = legacy_numbers(&tail[first..j])?;
                let source = legacy_source(meta, n, m);
                Some((len, chips(source.as_slice(), cites)))
            })
        } else if tail.starts_with('\u{e200}') {
            end('\u{e201}').map(|(j, len)| {
                // An entity's name is words of the answer, written as they are.
                out.push_str(&entity_name(&tail[first..j]));
                (len, String::new())
            })
        } else {
            Some((first, String::new()))
        };
        match replaced {
            Some((len, with)) => {
                put_marker(out, &with, tail[len..].chars().next());
                rest = &tail[len..];
            }
            None => {
                out.push_str(&tail[..first]);
                rest = &tail[first..];
            }
        }
    }
    out.push_str(rest);
}

/// `6†source` → (6, None), `3:0†source` → (3, Some(0)): the numbers of a legacy marker's inside.
fn legacy_numbers(inner: &str) -> Option<(u64, Option<u64>)> {
    let (nums, _) = inner.split_once('†')?;
    let (n, m) = match nums.split_once(':') {
        Some((n, m)) => (n, Some(m.parse().ok()?)),
        None => (nums, None),
    };
    Some((n.parse().ok()?, m))
}

/// The source a legacy marker names: the entry of `citations[].metadata` or `_cite_metadata.metadata_list` whose
/// `extra` has its message number (and result number, when it has one).
fn legacy_source(meta: &Value, n: u64, m: Option<u64>) -> Option<&Value> {
    let hits = |e: &Value| {
        let extra = e.get("extra");
        let num = |k: &str| extra.and_then(|x| x.get(k)).and_then(Value::as_u64);
        num("cited_message_idx") == Some(n) && m.is_none_or(|m| num("search_result_idx") == Some(m))
    };
    let cited = meta
        .get("citations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("metadata"));
    let listed = field(meta, &["_cite_metadata", "metadata_list"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    cited.chain(listed).take(MAX_REFS).find(|e| hits(e))
}

/// The text a private-use marker's inside stands for: an entity (`entity\u{e202}["people","Name",0]`) is its
/// name; anything else (a `cite` the metadata did not place) is nothing.
fn entity_name(inner: &str) -> String {
    let mut parts = inner.split('\u{e202}');
    if parts.next() != Some("entity") {
        return String::new();
    }
    parts
        .next()
        .and_then(|j| serde_json::from_str::<Value>(j).ok())
        .and_then(|v| v.get(1).and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default()
}

/// Sources named in a message's metadata: `citations[].metadata` and `content_references[]` (`items[]` or the
/// reference itself).
fn citations(meta: &Value, out: &mut Vec<Citation>) {
    let cite = |v: &Value, out: &mut Vec<Citation>| {
        if let Some(url) = str_of(v, "url") {
            push_citation(
                out,
                Citation {
                    url: url.to_owned(),
                    title: str_of(v, "title").map(str::to_owned),
                    quote: None,
                },
            );
        }
    };
    for c in meta
        .get("citations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        cite(c.get("metadata").unwrap_or(c), out);
    }
    for r in meta
        .get("content_references")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        cite(r, out);
        for i in r
            .get("items")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            cite(i, out);
        }
    }
}

/// The conversation JSON (`GET /backend-api/conversation/<id>`, and each conversation of an export): every
/// message node of `mapping`. A node's parent is its nearest ancestor that holds a message (the tree's root is
/// usually an empty node).
pub(crate) fn conversation(v: &Value) -> Result<Conversation, ParseError> {
    let mapping = v
        .get("mapping")
        .and_then(Value::as_object)
        .ok_or_else(|| ParseError::malformed("no mapping object: not a ChatGPT conversation"))?;
    let conversation_id = str_of(v, "conversation_id")
        .or_else(|| str_of(v, "id"))
        .map(str::to_owned);
    // A recap node is no message: its children hang from the message above it.
    let has_message = |id: &str| {
        mapping
            .get(id)
            .and_then(|n| n.get("message"))
            .is_some_and(|m| m.is_object() && !is_recap(m))
    };
    let mut turns = Vec::new();
    for (id, node) in mapping {
        let Some(msg) = node.get("message").filter(|m| m.is_object()) else {
            continue;
        };
        let Some(mut t) = message_turn(msg) else {
            continue;
        };
        if t.message_key != *id {
            // The node id is what `current_node` and `parent` use; the two agree on real data.
            t.message_key = id.clone();
        }
        let mut p = str_of(node, "parent");
        let mut hops = 0;
        while let Some(pid) = p {
            if has_message(pid) || hops > mapping.len() {
                break;
            }
            hops += 1;
            p = mapping.get(pid).and_then(|n| str_of(n, "parent"));
        }
        t.parent_key = p.filter(|pid| has_message(pid)).map(str::to_owned);
        t.conversation_id = conversation_id.clone();
        turns.push(t);
    }
    // The shown leaf may be an empty node; walk up to the nearest message.
    let mut current = str_of(v, "current_node");
    let mut hops = 0;
    while let Some(c) = current {
        if has_message(c) || hops > mapping.len() {
            break;
        }
        hops += 1;
        current = mapping.get(c).and_then(|n| str_of(n, "parent"));
    }
    Ok(Conversation {
        conversation_id,
        title: str_of(v, "title").map(str::to_owned),
        turns: arrange(turns, current),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn answer(text: &str, meta: Value) -> NetTurn {
        let msg = json!({"id": "a", "author": {"role": "assistant"},
            "content": {"content_type": "text", "parts": [text]}, "metadata": meta});
        message_turn(&msg).unwrap()
    }

    #[test]
    fn a_streamed_recap_is_no_turn_and_the_answer_hangs_from_the_reasoning() {
        let snap = |id: &str, parent: &str, content: Value| {
            let m = json!({"conversation_id": "c", "message": {"id": id, "author": {"role": "assistant"},
                "content": content, "status": "finished_successfully", "metadata": {"parent_id": parent}}});
            format!("data: {m}\n\n")
        };
        let body = [
            snap(
                "th",
                "u",
                json!({"content_type": "thoughts", "thoughts": [{"content": "hmm"}]}),
            ),
            snap(
                "rr",
                "th",
                json!({"content_type": "reasoning_recap", "content": "Thought for 9s"}),
            ),
            snap(
                "an",
                "rr",
                json!({"content_type": "text", "parts": ["Yes."]}),
            ),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        let p = super::super::parse_network("chatgpt", "stream", body.as_bytes()).unwrap();
        let got: Vec<(&str, Option<&str>)> = p
            .turns
            .iter()
            .map(|t| (t.message_key.as_str(), t.parent_key.as_deref()))
            .collect();
        assert_eq!(got, [("th", Some("u")), ("an", Some("th"))]);
    }

    #[test]
    fn offsets_count_code_points_and_wrong_ones_are_not_trusted() {
        // "🦀" is one code point, two UTF-16 units, four bytes: only code points place the marker.
        let text = "Ja 🦀【1†source】 und【2†source】.";
        let at = |s: &str| text[..text.find(s).unwrap()].chars().count();
        let start = at("【1");
        let meta = json!({"citations": [
            {"start_ix": start, "end_ix": start + 10, "metadata": {"url": "https://a.example/", "title": "A"}},
            // Points at words, not a marker: not trusted, and the marker it names has no other way to a source.
            {"start_ix": 0, "end_ix": 2, "metadata": {"url": "https://b.example/"}},
        ]});
        let t = answer(text, meta);
        assert_eq!(t.text, "Ja 🦀 (https://a.example/) und.");
        assert_eq!(t.citations[0].title.as_deref(), Some("A"));
    }

    proptest! {
        /// Whatever the text and the offsets, resolving markers never panics and leaves no private-use marker.
        #[test]
        fn hostile_markers_and_offsets_never_panic(
            text in "[a 🦀【】†:0-9\u{e200}-\u{e204}cite]{0,40}",
            spans in prop::collection::vec((any::<i64>(), any::<i64>(), 0usize..50, 0usize..50), 0..4),
        ) {
            let refs: Vec<Value> = spans.iter().map(|(a, b, _, _)| json!({
                "matched_text": text.chars().take(3).collect::<String>(), "start_idx": a, "end_idx": b,
                "items": [{"url": "https://x.example/"}]})).collect();
            let cites: Vec<Value> = spans.iter().map(|(_, _, a, b)| json!({
                "start_ix": a, "end_ix": b, "metadata": {"url": "https://y.example/"}})).collect();
            let t = answer(&text, json!({"content_references": refs, "citations": cites}));
            let left = t.text.contains(['\u{e203}', '\u{e204}']);
            prop_assert!(!left, "{:?}", t.text);
        }
    }
}
