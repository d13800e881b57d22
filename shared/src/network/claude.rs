//! Claude (claude.ai): the SSE reply of `POST …/chat_conversations/<uuid>/completion` and the conversation tree
//! of `GET …/chat_conversations/<uuid>?tree=True&rendering_mode=messages`.
//!
//! Format facts (see `../shared/docs/surfaces.md` and `formats.md`): Xerxes-2/clewdr
//! `src/claude_web_state/chat.rs` and Sinity/polylogue `claude_bridge.js` (the web completion stream is the
//! Messages API's event stream: `message_start`, `content_block_start` with block types `text`, `thinking`,
//! `tool_use`, `tool_result`, `content_block_delta` with `text_delta`, `thinking_delta`, `input_json_delta`,
//! `citations_delta`, `signature_delta`, `content_block_stop`, `message_delta`, `message_stop`, `ping`, `error`;
//! the web app adds `uuid`/`parent_uuid` to the `message_start` message and sends `message_limit` events);
//! AgileWorksZA/claude_export and Sinity/polylogue `docs/providers/claude-ai.md` (conversation `{uuid, name,
//! current_leaf_message_uuid, chat_messages[]}`, message `{uuid, sender, text, content[], created_at,
//! parent_message_uuid, attachments, files}`, the all-zero root parent).
//!
//! The completion stream carries only the assistant's message (the prompt is in the request): one turn per
//! `message_stop`.

use serde_json::Value;

use super::frame::{Frame, Framing};
use super::{
    Citation, Conversation, Handler, NetTurn, ParseError, Surface, ToolCall, Unknown, arrange,
    json, push_citation, str_of,
};
use crate::wire::Role;

/// claude.ai's parent of a conversation's first message.
const ROOT_PARENT: &str = "00000000-0000-4000-8000-000000000000";

#[derive(Debug)]
enum Block {
    Text(String, Vec<Citation>),
    Thinking(String),
    ToolUse {
        id: Option<String>,
        name: String,
        input: String,
    },
    ToolResult {
        id: Option<String>,
        name: String,
        output: String,
    },
    Unknown(String),
}

#[derive(Debug)]
struct Msg {
    key: String,
    parent: Option<String>,
    model: Option<String>,
    blocks: Vec<(u64, Block)>,
}

#[derive(Debug, Default)]
pub struct StreamHandler {
    msg: Option<Msg>,
    saw_message: bool,
    unknown: Unknown,
}

impl StreamHandler {
    fn block(&mut self, index: u64) -> Option<&mut Block> {
        self.msg
            .as_mut()?
            .blocks
            .iter_mut()
            .find(|(i, _)| *i == index)
            .map(|(_, b)| b)
    }
}

fn result_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .filter_map(|i| {
                str_of(i, "text").map(str::to_owned).or_else(|| {
                    // Web-search results: a title and a URL.
                    str_of(i, "url").map(|u| match str_of(i, "title") {
                        Some(t) => format!("{t} <{u}>"),
                        None => u.to_owned(),
                    })
                })
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn citation_of(c: &Value) -> Option<Citation> {
    let url = str_of(c, "url")?;
    Some(Citation {
        url: url.to_owned(),
        title: str_of(c, "title").map(str::to_owned),
        quote: str_of(c, "cited_text").map(str::to_owned),
    })
}

fn block_of(b: &Value) -> Block {
    let ty = b.get("type").and_then(Value::as_str).unwrap_or("none");
    match ty {
        "text" => {
            let mut cites = Vec::new();
            for c in b
                .get("citations")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(c) = citation_of(c) {
                    push_citation(&mut cites, c);
                }
            }
            Block::Text(str_of(b, "text").unwrap_or_default().to_owned(), cites)
        }
        "thinking" => Block::Thinking(str_of(b, "thinking").unwrap_or_default().to_owned()),
        "tool_use" | "server_tool_use" => Block::ToolUse {
            id: str_of(b, "id").map(str::to_owned),
            name: str_of(b, "name").unwrap_or("tool").to_owned(),
            input: match b.get("input") {
                Some(Value::Object(m)) if m.is_empty() => String::new(),
                Some(Value::Null) | None => String::new(),
                Some(v) => v.to_string(),
            },
        },
        "tool_result" | "web_search_tool_result" => Block::ToolResult {
            id: str_of(b, "tool_use_id").map(str::to_owned),
            name: str_of(b, "name").unwrap_or_default().to_owned(),
            output: result_text(b.get("content").unwrap_or(&Value::Null)),
        },
        other => Block::Unknown(format!("block:{other}")),
    }
}

/// Builds a turn from its blocks in order.
fn turn_from_blocks(mut t: NetTurn, blocks: Vec<Block>) -> NetTurn {
    for b in blocks {
        match b {
            Block::Text(s, cites) => {
                t.text.push_str(&s);
                for c in cites {
                    push_citation(&mut t.citations, c);
                }
            }
            Block::Thinking(s) => t.add_reasoning(&s),
            Block::ToolUse { id, name, input } => t.tool_calls.push(ToolCall {
                name,
                input,
                output: None,
                id,
            }),
            Block::ToolResult { id, name, output } => {
                let call = t
                    .tool_calls
                    .iter_mut()
                    .rev()
                    .find(|c| c.output.is_none() && (id.is_none() || c.id == id));
                match call {
                    Some(c) => c.output = Some(output),
                    None if name.is_empty() => t.add_tool_output(&output),
                    None => t.add_tool_output(&format!("{name}: {output}")),
                }
            }
            Block::Unknown(what) => t.unsupported(&what),
        }
    }
    t
}

impl Handler for StreamHandler {
    const FRAMING: Framing = Framing::Sse;

    fn frame(&mut self, f: Frame<'_>, out: &mut Vec<NetTurn>) -> Result<(), ParseError> {
        let Frame::Sse { event, data } = f else {
            return Ok(());
        };
        let v = json(data, "a Claude event")?;
        let ty = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event)
            .to_owned();
        match ty.as_str() {
            "message_start" => {
                let m = v.get("message").unwrap_or(&Value::Null);
                let key = str_of(m, "uuid")
                    .or_else(|| str_of(m, "id"))
                    .ok_or_else(|| ParseError::malformed("message_start without a message id"))?;
                self.saw_message = true;
                self.msg = Some(Msg {
                    key: key.to_owned(),
                    parent: str_of(m, "parent_uuid")
                        .filter(|p| *p != ROOT_PARENT)
                        .map(str::to_owned),
                    model: str_of(m, "model").map(str::to_owned),
                    blocks: Vec::new(),
                });
            }
            "content_block_start" => {
                let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                let b = block_of(v.get("content_block").unwrap_or(&Value::Null));
                let Some(m) = self.msg.as_mut() else {
                    return Err(ParseError::malformed(
                        "a content block before message_start",
                    ));
                };
                m.blocks.retain(|(i, _)| *i != index);
                m.blocks.push((index, b));
            }
            "content_block_delta" => {
                let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                let d = v.get("delta").unwrap_or(&Value::Null);
                let dty = d
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("none")
                    .to_owned();
                let Some(b) = self.block(index) else {
                    return Err(ParseError::malformed(
                        "a delta for a block that was not started",
                    ));
                };
                match (dty.as_str(), b) {
                    ("text_delta", Block::Text(s, _)) => {
                        s.push_str(str_of(d, "text").unwrap_or_default())
                    }
                    ("thinking_delta", Block::Thinking(s)) => {
                        s.push_str(str_of(d, "thinking").unwrap_or_default())
                    }
                    ("input_json_delta", Block::ToolUse { input, .. }) => {
                        input.push_str(str_of(d, "partial_json").unwrap_or_default())
                    }
                    ("citations_delta", Block::Text(_, cites)) => {
                        if let Some(c) = d.get("citation").and_then(citation_of) {
                            push_citation(cites, c);
                        }
                    }
                    ("signature_delta" | "thinking_summary_delta", _) => {}
                    (other, _) => self.unknown.note(&format!("delta:{other}")),
                }
            }
            "content_block_stop" | "message_delta" | "ping" | "message_limit" => {}
            "message_stop" => {
                let Some(m) = self.msg.take() else {
                    return Err(ParseError::malformed("message_stop before message_start"));
                };
                let mut t = NetTurn::new(Surface::Claude, m.key, Role::Assistant);
                t.parent_key = m.parent;
                t.model = m.model;
                let mut blocks = m.blocks;
                blocks.sort_by_key(|(i, _)| *i);
                out.push(turn_from_blocks(
                    t,
                    blocks.into_iter().map(|(_, b)| b).collect(),
                ));
            }
            "error" => {
                let e = v.get("error").unwrap_or(&v);
                let detail = str_of(e, "message")
                    .or_else(|| str_of(e, "type"))
                    .unwrap_or("unknown error");
                return Err(ParseError::incomplete(format!(
                    "the site reported an error: {}",
                    super::short(detail)
                )));
            }
            other => self.unknown.note(&format!("event:{other}")),
        }
        Ok(())
    }

    fn end(&mut self, _out: &mut Vec<NetTurn>) -> Result<(), ParseError> {
        if self.msg.is_some() {
            return Err(ParseError::incomplete(
                "no message_stop: the reply was cut off",
            ));
        }
        if !self.saw_message {
            return Err(ParseError::incomplete("the stream carried no message"));
        }
        Ok(())
    }

    fn unknown(&self) -> &Unknown {
        &self.unknown
    }

    fn conversation_id(&self) -> Option<&str> {
        None
    }
}

/// The conversation tree: every message of `chat_messages`, linked by `parent_message_uuid`.
pub(crate) fn conversation(v: &Value) -> Result<Conversation, ParseError> {
    let msgs = v
        .get("chat_messages")
        .and_then(Value::as_array)
        .ok_or_else(|| ParseError::malformed("no chat_messages list: not a Claude conversation"))?;
    let conversation_id = str_of(v, "uuid").map(str::to_owned);
    let mut turns = Vec::new();
    for m in msgs {
        let Some(key) = str_of(m, "uuid") else {
            continue;
        };
        let role = match str_of(m, "sender") {
            Some("human") => Role::User,
            Some("assistant") => Role::Assistant,
            _ => Role::System,
        };
        let mut t = NetTurn::new(Surface::Claude, key.to_owned(), role);
        if role == Role::System {
            t.unknown.push(format!(
                "sender:{}",
                super::short(str_of(m, "sender").unwrap_or("none"))
            ));
        }
        t.conversation_id = conversation_id.clone();
        t.parent_key = str_of(m, "parent_message_uuid")
            .filter(|p| *p != ROOT_PARENT)
            .map(str::to_owned);
        t.created_at_ms = str_of(m, "created_at").and_then(crate::time::parse_rfc3339);
        let blocks: Vec<Block> = m
            .get("content")
            .and_then(Value::as_array)
            .map(|c| c.iter().map(block_of).collect())
            .unwrap_or_default();
        t = if blocks.is_empty() {
            t.text = str_of(m, "text").unwrap_or_default().to_owned();
            t
        } else {
            turn_from_blocks(t, blocks)
        };
        for list in ["attachments", "files", "files_v2"] {
            for a in m.get(list).and_then(Value::as_array).into_iter().flatten() {
                if let Some(name) = str_of(a, "file_name") {
                    let chip = crate::turn_text::file(name);
                    if !t.text.contains(&chip) {
                        t.add_text(&chip);
                    }
                }
            }
        }
        turns.push(t);
    }
    // The official export's messages are a plain list without parent ids: each follows the one before it, and
    // the last is the shown leaf.
    let mut current = str_of(v, "current_leaf_message_uuid").map(str::to_owned);
    if !turns.is_empty() && turns.iter().all(|t| t.parent_key.is_none()) {
        let mut prev: Option<String> = None;
        for t in &mut turns {
            t.parent_key = prev.replace(t.message_key.clone());
        }
        if current.is_none() {
            current = prev;
        }
    }
    Ok(Conversation {
        conversation_id,
        title: str_of(v, "name").map(str::to_owned),
        turns: arrange(turns, current.as_deref()),
    })
}
