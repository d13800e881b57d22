//! DeepSeek (chat.deepseek.com): the SSE reply of `POST /api/v0/chat/completion` and the conversation of
//! `GET /api/v0/chat/history_messages?chat_session_id=<id>`.
//!
//! Format facts (see `../shared/docs/surfaces.md`): terminail/chromai-extension
//! `__tests__/request_response/deepseek/request-response-20251121.md` (a recorded reply: `event: ready` with
//! `request_message_id`/`response_message_id`, `event: update_session`, a first `{"v": {"response": {message_id,
//! parent_id, model, role, thinking_enabled, status, inserted_at, fragments[]}}}` snapshot, then ops `{p, o, v}`
//! with upper-case `APPEND`, `SET`, `BATCH` — a `BATCH`'s ops have paths relative to its own —, a bare `{"v": …}`
//! continuing the previous path and op, `-1` indexing from the end; `status` `FINISHED`; `event: finish`,
//! `title`, `close`); surfaces.md (fragments typed `THINK` or `RESPONSE`; `INCOMPLETE` means the answer continues
//! in a follow-up request); DavidShiang/DeepSeek2md README (messages `{message_id, parent_id, role, fragments}`
//! in the conversation data).

use serde_json::Value;

use super::frame::{self, Frame, Framing, PatchOp};
use super::{
    Citation, Conversation, Handler, NetTurn, ParseError, Surface, Unknown, arrange, field, id_of,
    json, push_citation, secs_to_ms, str_of,
};
use crate::wire::Role;

#[derive(Debug, Default)]
pub struct StreamHandler {
    doc: Value,
    last_p: String,
    last_seg: Vec<String>,
    last_o: String,
    started: bool,
    emitted: bool,
    continues: bool,
    unknown: Unknown,
}

impl StreamHandler {
    /// A top-level op: an omitted path or op repeats the previous one's.
    fn op(&mut self, mut obj: Value) -> Result<(), ParseError> {
        let v = obj.get_mut("v").map(Value::take).unwrap_or(Value::Null);
        let p = obj.get("p").and_then(Value::as_str);
        let o = obj.get("o").and_then(Value::as_str);
        if let Some(p) = p
            && p != self.last_p
        {
            self.last_p.clear();
            self.last_p.push_str(p);
            self.last_seg = frame::segments(p);
        }
        match (o, p) {
            (Some(o), _) => {
                if o != self.last_o {
                    self.last_o.clear();
                    self.last_o.push_str(o);
                }
            }
            // A path without an op sets it.
            (None, Some(_)) => {
                self.last_o.clear();
                self.last_o.push_str("SET");
            }
            (None, None) => {}
        }
        let seg = std::mem::take(&mut self.last_seg);
        let o = std::mem::take(&mut self.last_o);
        let r = self.apply(&seg, &o, v);
        self.last_seg = seg;
        self.last_o = o;
        r
    }

    fn apply(&mut self, seg: &[String], o: &str, v: Value) -> Result<(), ParseError> {
        let op = match o {
            "SET" | "" => PatchOp::Set,
            "APPEND" => PatchOp::Append,
            "BATCH" => {
                let Value::Array(ops) = v else {
                    return Err(ParseError::malformed("a BATCH op without a list of ops"));
                };
                for mut sub in ops {
                    let sv = sub.get_mut("v").map(Value::take).unwrap_or(Value::Null);
                    let mut path = seg.to_vec();
                    if let Some(rel) = sub.get("p").and_then(Value::as_str) {
                        path.extend(frame::segments(rel));
                    }
                    let so = sub.get("o").and_then(Value::as_str).unwrap_or("SET");
                    self.apply(&path, so, sv)?;
                }
                return Ok(());
            }
            other => {
                self.unknown.note(&format!("op:{other}"));
                return Ok(());
            }
        };
        if seg.is_empty() && op == PatchOp::Set {
            self.started = true;
        }
        if !frame::apply(&mut self.doc, seg, op, v) {
            self.unknown.note(&format!("path:{}", seg.join("/")));
        }
        Ok(())
    }

    fn status(&self) -> Option<&str> {
        field(&self.doc, &["response", "status"]).and_then(Value::as_str)
    }

    fn emit(&mut self, out: &mut Vec<NetTurn>) {
        if self.emitted {
            return;
        }
        match self.status() {
            Some("FINISHED") => {}
            Some("INCOMPLETE") => {
                self.continues = true;
                return;
            }
            _ => return,
        }
        self.emitted = true;
        if let Some(r) = self.doc.get("response")
            && let Some(t) = message_turn(r, None)
        {
            out.push(t);
        }
    }
}

/// Fragments → the turn's text, reasoning, citations; unknown fragment types leave a placeholder.
fn fragments(t: &mut NetTurn, frags: &[Value]) {
    for f in frags {
        let content = str_of(f, "content").unwrap_or_default();
        match str_of(f, "type").unwrap_or("none") {
            "RESPONSE" | "REQUEST" => t.text.push_str(content),
            "THINK" => t.add_reasoning(content),
            "SEARCH" => {
                for r in f
                    .get("results")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(url) = str_of(r, "url") {
                        push_citation(
                            &mut t.citations,
                            Citation {
                                url: url.to_owned(),
                                title: str_of(r, "title").map(str::to_owned),
                                quote: None,
                            },
                        );
                    }
                }
            }
            other => t.unsupported(&format!("fragment:{other}")),
        }
    }
}

/// A message object (the stream's `response`, or an item of `chat_messages`) → a turn.
fn message_turn(m: &Value, conversation_id: Option<&str>) -> Option<NetTurn> {
    let key = id_of(m, "message_id")?;
    let role = match str_of(m, "role") {
        Some("USER") => Role::User,
        Some("ASSISTANT") => Role::Assistant,
        _ => Role::System,
    };
    let mut t = NetTurn::new(Surface::DeepSeek, key, role);
    if role == Role::System {
        t.unknown.push(format!(
            "role:{}",
            super::short(str_of(m, "role").unwrap_or("none"))
        ));
    }
    t.conversation_id = conversation_id.map(str::to_owned);
    t.parent_key = id_of(m, "parent_id");
    t.model = str_of(m, "model").map(str::to_owned);
    t.created_at_ms = secs_to_ms(m.get("inserted_at"));
    match m.get("fragments").and_then(Value::as_array) {
        Some(frags) => fragments(&mut t, frags),
        None => {
            // The older shape: `content` and `thinking_content`.
            t.text = str_of(m, "content").unwrap_or_default().to_owned();
            if let Some(r) = str_of(m, "thinking_content") {
                t.add_reasoning(r);
            }
        }
    }
    Some(t)
}

impl Handler for StreamHandler {
    const FRAMING: Framing = Framing::Sse;

    fn frame(&mut self, f: Frame<'_>, out: &mut Vec<NetTurn>) -> Result<(), ParseError> {
        let Frame::Sse { event, data } = f else {
            return Ok(());
        };
        match event {
            "" => {
                let v = json(data, "a DeepSeek event")?;
                if v.get("v").is_none() && v.get("o").is_none() {
                    if let Some(e) = v.get("error").or_else(|| v.get("msg")) {
                        return Err(ParseError::incomplete(format!(
                            "the site reported an error: {}",
                            super::short(&e.to_string())
                        )));
                    }
                    self.unknown.note("event without a known shape");
                    return Ok(());
                }
                self.op(v)?;
                self.emit(out);
            }
            "finish" => {
                if self.status() != Some("INCOMPLETE") {
                    // A finish event closes the answer even when no status op came before it.
                    if let Some(r) = self.doc.get_mut("response").and_then(Value::as_object_mut)
                        && r.get("status").and_then(Value::as_str) != Some("FINISHED")
                    {
                        r.insert("status".into(), Value::String("FINISHED".into()));
                    }
                }
                self.emit(out);
            }
            "ready" | "update_session" | "title" | "close" => {}
            other => self.unknown.note(&format!("event:{other}")),
        }
        Ok(())
    }

    fn end(&mut self, _out: &mut Vec<NetTurn>) -> Result<(), ParseError> {
        if self.emitted {
            return Ok(());
        }
        if self.continues {
            return Err(ParseError::incomplete(
                "status INCOMPLETE: the answer continues in a follow-up request",
            ));
        }
        if !self.started {
            return Err(ParseError::incomplete("the stream carried no message"));
        }
        Err(ParseError::incomplete(
            "the reply was cut off before it finished",
        ))
    }

    fn unknown(&self) -> &Unknown {
        &self.unknown
    }

    fn conversation_id(&self) -> Option<&str> {
        None
    }
}

/// `history_messages`: `{data: {biz_data: {chat_session: {id, title, current_message_id}, chat_messages}}}`
/// (the wrapper is optional).
pub(crate) fn conversation(v: &Value) -> Result<Conversation, ParseError> {
    let body = field(v, &["data", "biz_data"])
        .filter(|b| b.is_object())
        .unwrap_or(v);
    let msgs = body
        .get("chat_messages")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            ParseError::malformed("no chat_messages list: not a DeepSeek conversation")
        })?;
    let session = body.get("chat_session").unwrap_or(&Value::Null);
    let conversation_id = str_of(session, "id").map(str::to_owned);
    let turns: Vec<NetTurn> = msgs
        .iter()
        .filter_map(|m| message_turn(m, conversation_id.as_deref()))
        .collect();
    let current = id_of(session, "current_message_id");
    Ok(Conversation {
        conversation_id,
        title: str_of(session, "title").map(str::to_owned),
        turns: arrange(turns, current.as_deref()),
    })
}
