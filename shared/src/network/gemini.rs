//! Gemini (gemini.google.com): the reply of `POST …/assistant.lamda.BardFrontendService/StreamGenerate`.
//!
//! Format facts (see `../shared/docs/surfaces.md` and `formats.md`): HanaokaYuzu/Gemini-API
//! `src/gemini_webapi/utils/parsing.py` (the body opens with `)]}'`; frames `<length>\n<json>\n` where the length
//! counts UTF-16 code units from the newline after the digits through the newline after the JSON; a frame is a
//! list of envelopes) and its client (`["wrb.fr", null, "<inner JSON as a string>"]`; in the inner array `[1]` =
//! `[conversation id, response id]`, `[4]` = candidates; in a candidate `[0]` = candidate id, `[1][0]` = the text
//! so far, `[37][0][0]` = thoughts). Each frame repeats the whole text so far, so the last one wins. The batch
//! protocol closes with an `["e", …]` envelope; the reply is complete there (other bookkeeping envelopes,
//! `di` and `af.httprm`, carry nothing a turn needs).
//!
//! The prompt is in the request, not the reply: the stream yields the assistant's turn only. Conversation ids
//! arrive as `c_<hex>`, the page's URL shows `<hex>`: the prefix is dropped. The site has no conversation JSON
//! parsed here (the page loads history through a batch RPC whose positions are not published).

use serde_json::Value;

use super::frame::{Frame, Framing};
use super::{Handler, NetTurn, ParseError, Surface, Unknown, json};
use crate::wire::Role;

#[derive(Debug, Default)]
pub struct StreamHandler {
    conversation_id: Option<String>,
    response_id: Option<String>,
    candidate_id: Option<String>,
    text: Option<String>,
    thoughts: Option<String>,
    ended: bool,
    emitted: bool,
    unknown: Unknown,
}

fn at<'a>(v: &'a Value, path: &[usize]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, &i| v.get(i))
}

fn at_mut<'a>(v: &'a mut Value, path: &[usize]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, &i| v.get_mut(i))
}

impl StreamHandler {
    fn inner(&mut self, mut inner: Value) {
        if let Some(c) = at(&inner, &[1, 0]).and_then(Value::as_str) {
            self.conversation_id = Some(c.strip_prefix("c_").unwrap_or(c).to_owned());
        }
        if let Some(r) = at(&inner, &[1, 1]).and_then(Value::as_str) {
            self.response_id = Some(r.to_owned());
        }
        let Some(cand) = at_mut(&mut inner, &[4, 0]) else {
            return;
        };
        if let Some(id) = at(cand, &[0]).and_then(Value::as_str) {
            self.candidate_id = Some(id.to_owned());
        }
        if let Some(Value::String(t)) = at_mut(cand, &[1, 0]) {
            self.text = Some(std::mem::take(t));
        }
        if let Some(Value::String(t)) = at_mut(cand, &[37, 0, 0]) {
            self.thoughts = Some(std::mem::take(t));
        }
    }

    fn emit(&mut self, out: &mut Vec<NetTurn>) {
        if self.emitted {
            return;
        }
        let Some(text) = self.text.clone() else {
            return;
        };
        let Some(key) = self
            .response_id
            .clone()
            .or_else(|| self.candidate_id.clone())
        else {
            return;
        };
        self.emitted = true;
        let mut t = NetTurn::new(Surface::Gemini, key, Role::Assistant);
        t.conversation_id = self.conversation_id.clone();
        t.text = text;
        if let Some(r) = &self.thoughts {
            t.add_reasoning(r);
        }
        out.push(t);
    }
}

impl Handler for StreamHandler {
    const FRAMING: Framing = Framing::LengthPrefixed;

    fn frame(&mut self, f: Frame<'_>, out: &mut Vec<NetTurn>) -> Result<(), ParseError> {
        let Frame::Json(text) = f else {
            return Ok(());
        };
        let v = json(text, "a Gemini frame")?;
        let Value::Array(envelopes) = v else {
            return Err(ParseError::malformed(
                "a Gemini frame is not a list of envelopes",
            ));
        };
        for env in &envelopes {
            match at(env, &[0]).and_then(Value::as_str) {
                Some("wrb.fr") => {
                    let Some(s) = at(env, &[2]).and_then(Value::as_str) else {
                        // A wrb.fr envelope without a payload is how the RPC reports an error.
                        if let Some(code) = at(env, &[5]) {
                            return Err(ParseError::incomplete(format!(
                                "the site reported an error: {}",
                                super::short(&code.to_string())
                            )));
                        }
                        continue;
                    };
                    let inner = json(s, "a Gemini inner payload")?;
                    self.inner(inner);
                }
                Some("e") => {
                    self.ended = true;
                    self.emit(out);
                }
                Some("di" | "af.httprm") => {}
                Some(other) => self.unknown.note(&format!("envelope:{other}")),
                None => self.unknown.note("envelope without a name"),
            }
        }
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<NetTurn>) -> Result<(), ParseError> {
        if !self.ended {
            return Err(ParseError::incomplete(
                "no closing envelope: the reply was cut off",
            ));
        }
        self.emit(out);
        if !self.emitted {
            return Err(ParseError::incomplete("the stream carried no reply"));
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
