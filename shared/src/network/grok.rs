//! Grok (grok.com): the NDJSON reply of `POST /rest/app-chat/conversations/new` and
//! `…/conversations/<id>/responses`, and the conversation's responses list
//! (`GET /rest/app-chat/conversations/<id>/responses`).
//!
//! Format facts (see `../shared/docs/formats.md`): xtekky/gpt4free `g4f/Provider/needs_auth/Grok.py` (lines
//! `{result: {conversation{conversationId}}}`, `{result: {response: {token, isThinking, responseId,
//! modelResponse…}}}` — a reply to an existing conversation leaves out the `response` wrapper —, `userResponse`,
//! `title{newTitle}`); cwt/Grok3API `docs/En/GrokResponse.md` (`modelResponse{responseId, message, sender,
//! createTime, parentResponseId, model?, webSearchResults}`, `isThinking`, `isSoftStop`); codeface-io/mac-stack
//! `grok/export_conversations/README.md` (responses `{responseId, message, sender, createTime,
//! parentResponseId, model}`). The reply is complete at its `modelResponse`, which repeats the whole answer.

use serde_json::Value;

use super::frame::{Frame, Framing};
use super::{
    Citation, Conversation, Handler, NetTurn, ParseError, Surface, Unknown, arrange, json,
    push_citation, str_of,
};
use crate::wire::Role;

const QUIET: &[&str] = &[
    "isThinking",
    "isSoftStop",
    "responseId",
    "messageTag",
    "messageStepId",
    "finalMetadata",
    "llmInfo",
    "toolUsageCardId",
    "webSearchResults",
    "uiLayout",
    "streamingImageGenerationResponse",
    "cardAttachment",
    "conversationId",
    "userMessageId",
    "rolloutId",
    "isPartial",
];

#[derive(Debug, Default)]
pub struct StreamHandler {
    conversation_id: Option<String>,
    thinking: String,
    tokens: String,
    in_progress: bool,
    emitted: usize,
    unknown: Unknown,
}

/// A response object (stream `modelResponse`/`userResponse`, or an item of the responses list) → a turn.
fn response_turn(r: &Value, conversation_id: Option<&str>) -> Option<NetTurn> {
    // Exports name the id `_id`.
    let key = str_of(r, "responseId").or_else(|| str_of(r, "_id"))?;
    let role = match str_of(r, "sender").map(str::to_ascii_lowercase).as_deref() {
        Some("human" | "user") => Role::User,
        Some("assistant") => Role::Assistant,
        _ => Role::System,
    };
    let mut t = NetTurn::new(Surface::Grok, key.to_owned(), role);
    if role == Role::System {
        t.unknown.push(format!(
            "sender:{}",
            super::short(str_of(r, "sender").unwrap_or("none"))
        ));
    }
    t.conversation_id = str_of(r, "conversationId")
        .or(conversation_id)
        .map(str::to_owned);
    t.parent_key = str_of(r, "parentResponseId").map(str::to_owned);
    t.text = str_of(r, "message").unwrap_or_default().to_owned();
    t.model = str_of(r, "model").map(str::to_owned);
    t.created_at_ms = str_of(r, "createTime").and_then(crate::time::parse_rfc3339);
    if let Some(tr) = str_of(r, "thinkingTrace") {
        t.add_reasoning(tr);
    }
    for w in r
        .get("webSearchResults")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(url) = str_of(w, "url") {
            push_citation(
                &mut t.citations,
                Citation {
                    url: url.to_owned(),
                    title: str_of(w, "title").map(str::to_owned),
                    quote: None,
                },
            );
        }
    }
    for a in r
        .get("generatedImageUrls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if a.is_string() {
            t.add_text(crate::turn_text::IMAGE);
        }
    }
    Some(t)
}

impl Handler for StreamHandler {
    const FRAMING: Framing = Framing::Ndjson;

    fn frame(&mut self, f: Frame<'_>, out: &mut Vec<NetTurn>) -> Result<(), ParseError> {
        let Frame::Json(text) = f else {
            return Ok(());
        };
        let v = json(text, "a Grok line")?;
        if let Some(e) = v.get("error") {
            let detail = str_of(e, "message").unwrap_or("unknown error");
            return Err(ParseError::incomplete(format!(
                "the site reported an error: {}",
                super::short(detail)
            )));
        }
        let result = v
            .get("result")
            .ok_or_else(|| ParseError::malformed("a Grok line without result"))?;
        if let Some(c) = result
            .get("conversation")
            .and_then(|c| str_of(c, "conversationId"))
        {
            self.conversation_id = Some(c.to_owned());
        }
        let r = result.get("response").unwrap_or(result);
        let Some(obj) = r.as_object() else {
            return Err(ParseError::malformed("a Grok result is not an object"));
        };
        for (k, val) in obj {
            match k.as_str() {
                "token" => {
                    let tok = val.as_str().unwrap_or_default();
                    self.in_progress = true;
                    if r.get("isThinking").and_then(Value::as_bool) == Some(true) {
                        self.thinking.push_str(tok);
                    } else {
                        self.tokens.push_str(tok);
                    }
                }
                "modelResponse" => {
                    if let Some(mut t) = response_turn(val, self.conversation_id.as_deref()) {
                        if t.role == Role::System {
                            t.role = Role::Assistant;
                        }
                        if t.text.is_empty() {
                            t.text = std::mem::take(&mut self.tokens);
                        }
                        if t.reasoning.is_none() {
                            t.add_reasoning(&self.thinking);
                        }
                        out.push(t);
                        self.emitted += 1;
                    }
                    self.tokens.clear();
                    self.thinking.clear();
                    self.in_progress = false;
                }
                "userResponse" => {
                    if let Some(mut t) = response_turn(val, self.conversation_id.as_deref()) {
                        t.role = Role::User;
                        t.unknown.clear();
                        out.push(t);
                    }
                }
                "conversation" | "title" => {}
                k if QUIET.contains(&k) => {}
                other => self.unknown.note(&format!("field:{other}")),
            }
        }
        Ok(())
    }

    fn end(&mut self, _out: &mut Vec<NetTurn>) -> Result<(), ParseError> {
        if self.in_progress {
            return Err(ParseError::incomplete(
                "no modelResponse: the reply was cut off",
            ));
        }
        if self.emitted == 0 {
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

/// The responses list of a conversation: `{responses: [...]}` (the shape of `GET …/responses`, also accepted
/// wrapped as an export's `{conversation: {id}, responses: [{response: {...}}]}`).
pub(crate) fn conversation(v: &Value) -> Result<Conversation, ParseError> {
    let list = v
        .get("responses")
        .and_then(Value::as_array)
        .ok_or_else(|| ParseError::malformed("no responses list: not a Grok conversation"))?;
    let conversation_id = v
        .get("conversation")
        .and_then(|c| str_of(c, "conversationId").or_else(|| str_of(c, "id")))
        .or_else(|| str_of(v, "conversationId"))
        .map(str::to_owned);
    let mut turns = Vec::new();
    for item in list {
        let r = item.get("response").unwrap_or(item);
        if let Some(mut t) = response_turn(r, conversation_id.as_deref()) {
            t.conversation_id = t.conversation_id.or_else(|| conversation_id.clone());
            turns.push(t);
        }
    }
    // The shown branch ends at the newest leaf.
    let parents: std::collections::HashSet<&str> = turns
        .iter()
        .filter_map(|t| t.parent_key.as_deref())
        .collect();
    let leaf = turns
        .iter()
        .filter(|t| !parents.contains(t.message_key.as_str()))
        .max_by_key(|t| t.created_at_ms)
        .map(|t| t.message_key.clone());
    Ok(Conversation {
        conversation_id,
        title: v
            .get("conversation")
            .and_then(|c| str_of(c, "title"))
            .map(str::to_owned),
        turns: arrange(turns, leaf.as_deref()),
    })
}
