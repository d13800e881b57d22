//! Microsoft Copilot: the events of the WebSocket `wss://copilot.microsoft.com/c/api/chat?api-version=2`.
//!
//! Format facts (see `../shared/docs/surfaces.md` and `formats.md`): xtekky/gpt4free `g4f/Provider/Copilot.py`
//! (JSON events with an `event` field: `received`, `startMessage`, `appendText{text}`, `replaceText{text}`,
//! `partCompleted`, `citation{title, url}`, `chainOfThought{text}`, `titleUpdate`, `suggestedFollowups`,
//! `imageGenerated`, `done`, `error`; events carry the assistant message's `messageId`).
//!
//! Input: the socket's received text frames, one per line (the content script joins them with `\n`; a server
//! frame is one compact JSON value). One socket carries one reply after another: each `startMessage` … `done`
//! yields one assistant turn.

use std::collections::BTreeMap;

use serde_json::Value;

use super::frame::{Frame, Framing};
use super::{
    Citation, Handler, NetTurn, ParseError, Surface, Unknown, json, push_citation, str_of,
};
use crate::wire::Role;

fn open<'a>(map: &'a mut BTreeMap<String, Open>, id: Option<&str>) -> Option<&'a mut Open> {
    Some(map.entry(id?.to_owned()).or_default())
}

const QUIET: &[&str] = &[
    "received",
    "partCompleted",
    "titleUpdate",
    "suggestedFollowups",
    "connected",
    "pong",
    "challenge",
    "generatingImage",
];

#[derive(Debug, Default)]
struct Open {
    text: String,
    reasoning: String,
    citations: Vec<Citation>,
    images: Vec<String>,
}

#[derive(Debug, Default)]
pub struct StreamHandler {
    open: BTreeMap<String, Open>,
    conversation_id: Option<String>,
    emitted: usize,
    unknown: Unknown,
}

impl Handler for StreamHandler {
    const FRAMING: Framing = Framing::Ndjson;

    fn frame(&mut self, f: Frame<'_>, out: &mut Vec<NetTurn>) -> Result<(), ParseError> {
        let Frame::Json(text) = f else {
            return Ok(());
        };
        let v = json(text, "a Copilot event")?;
        let event = v
            .get("event")
            .and_then(Value::as_str)
            .ok_or_else(|| ParseError::malformed("a Copilot event without an event name"))?;
        if let Some(c) = str_of(&v, "conversationId") {
            self.conversation_id = Some(c.to_owned());
        }
        let id = str_of(&v, "messageId").map(str::to_owned);
        match event {
            "startMessage" => {
                if open(&mut self.open, id.as_deref()).is_none() {
                    return Err(ParseError::malformed("startMessage without a messageId"));
                }
            }
            "appendText" => match open(&mut self.open, id.as_deref()) {
                Some(o) => o.text.push_str(str_of(&v, "text").unwrap_or_default()),
                None => return Err(ParseError::malformed("appendText without a messageId")),
            },
            "replaceText" => match open(&mut self.open, id.as_deref()) {
                Some(o) => o.text = str_of(&v, "text").unwrap_or_default().to_owned(),
                None => return Err(ParseError::malformed("replaceText without a messageId")),
            },
            "chainOfThought" => {
                if let Some(o) = open(&mut self.open, id.as_deref()) {
                    o.reasoning.push_str(str_of(&v, "text").unwrap_or_default());
                }
            }
            "citation" => {
                if let Some(o) = open(&mut self.open, id.as_deref()) {
                    push_citation(
                        &mut o.citations,
                        Citation {
                            url: str_of(&v, "url").unwrap_or_default().to_owned(),
                            title: str_of(&v, "title").map(str::to_owned),
                            quote: None,
                        },
                    );
                }
            }
            "imageGenerated" => {
                if let Some(o) = open(&mut self.open, id.as_deref()) {
                    o.images
                        .push(str_of(&v, "url").unwrap_or_default().to_owned());
                }
            }
            "done" => {
                let Some(id) = id else {
                    return Err(ParseError::malformed("done without a messageId"));
                };
                if let Some(o) = self.open.remove(&id) {
                    let mut t = NetTurn::new(Surface::Copilot, id, Role::Assistant);
                    t.conversation_id = self.conversation_id.clone();
                    t.text = o.text;
                    for _ in &o.images {
                        t.add_text(crate::turn_text::IMAGE);
                    }
                    t.add_reasoning(&o.reasoning);
                    t.citations = o.citations;
                    out.push(t);
                    self.emitted += 1;
                }
            }
            "error" => {
                let detail = str_of(&v, "message").unwrap_or("unknown error");
                return Err(ParseError::incomplete(format!(
                    "the site reported an error: {}",
                    super::short(detail)
                )));
            }
            e if QUIET.contains(&e) => {}
            other => self.unknown.note(&format!("event:{other}")),
        }
        Ok(())
    }

    fn end(&mut self, _out: &mut Vec<NetTurn>) -> Result<(), ParseError> {
        if !self.open.is_empty() {
            return Err(ParseError::incomplete(
                "no done event: the reply was cut off",
            ));
        }
        if self.emitted == 0 {
            return Err(ParseError::incomplete("the socket carried no reply"));
        }
        Ok(())
    }

    fn unknown(&self) -> &Unknown {
        &self.unknown
    }

    fn conversation_id(&self) -> Option<&str> {
        self.conversation_id.as_deref()
    }
}
