//! One export conversation (a parsed JSON element) → the site's turns. The conversation JSON of ChatGPT's,
//! Claude's, Grok's and DeepSeek's exports has the shape their pages load, so the parsers of
//! `personkit_shared::network` read both; what only the export has is adapted here. Format facts:
//! `../shared/docs/formats.md` and the fixture READMEs under `tests/fixtures/`.

use std::collections::{BTreeMap, BTreeSet};

use personkit_shared::network::{self, NetTurn, Surface};
use serde_json::Value;

use crate::detect::Format;

/// One conversation as a source yields it: which site and thread it belongs to and the site's turns (every
/// branch, each with its parent and whether it is on the branch the site shows). A harvester yields the same.
#[derive(Debug, Clone)]
pub struct SourceConversation {
    /// The wire surface (`browser-ext:chatgpt`): the one live capture uses, so both land in one thread.
    pub surface: String,
    pub conversation_id: String,
    pub title: Option<String>,
    /// The page the conversation lives at (as live capture records it), when the site has one per conversation.
    pub url: Option<String>,
    /// When the conversation was last changed, milliseconds since the epoch (the time of turns without one).
    pub updated_at_ms: Option<i64>,
    pub turns: Vec<NetTurn>,
    /// Messages of the source that could not be read, per reason (see [`unreadable_messages`]); the turns
    /// above are the others.
    pub unreadable: BTreeMap<String, u64>,
}

impl SourceConversation {
    /// How many messages could not be read.
    pub fn unreadable_count(&self) -> u64 {
        self.unreadable.values().sum()
    }
}

/// Why a message of a conversation could not be read: the reason's code and how the import report says it.
pub const UNREADABLE_REASONS: [(&str, &str); 5] = [
    ("not_an_object", "not a JSON object"),
    ("no_id", "without a message id"),
    ("not_understood", "not understood"),
    ("too_large", "with a text over the size bound"),
    (
        "too_many",
        "over the most messages read from one conversation",
    ),
];

/// The report's words for an unreadable reason code.
pub fn unreadable_words(code: &str) -> &str {
    UNREADABLE_REASONS
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(code, |(_, w)| w)
}

/// Why one conversation could not be read (the others of the file still are).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub conversation_id: Option<String>,
    pub why: String,
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// Seconds (float or integer) or an RFC 3339 string → milliseconds.
fn time_ms(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => {
            let f = n.as_f64()?;
            (f.is_finite() && (0.0..1e11).contains(&f)).then(|| (f * 1000.0).round() as i64)
        }
        Value::String(s) => personkit_shared::time::parse_rfc3339(s),
        // Grok (Mongo extended JSON): {"$date": {"$numberLong": "<ms>"}} or {"$date": "<rfc3339>"}.
        Value::Object(o) => match o.get("$date")? {
            Value::Object(d) => d.get("$numberLong")?.as_str()?.parse().ok(),
            Value::String(s) => personkit_shared::time::parse_rfc3339(s),
            Value::Number(n) => n.as_i64(),
            _ => None,
        },
        _ => None,
    }
}

/// Reads one conversation of an export of `format`.
pub fn read(format: Format, v: &Value) -> Result<SourceConversation, Unreadable> {
    let id_hint = str_at(v, "conversation_id")
        .or_else(|| str_at(v, "id"))
        .or_else(|| str_at(v, "uuid"))
        .or_else(|| {
            v.get("conversation")
                .and_then(|c| str_at(c, "id").or_else(|| str_at(c, "conversationId")))
        })
        .map(|s| personkit_shared::wire::quote_safely(s, 80));
    let fail = |why: String| Unreadable {
        conversation_id: id_hint.clone(),
        why,
    };
    if !v.is_object() {
        return Err(fail(format!(
            "a conversation must be a JSON object, found {}",
            kind(v)
        )));
    }
    let (surface, parsed, updated, url_prefix) = match format {
        Format::Gemini | Format::GeminiHtml => {
            return Err(fail(
                "Gemini activity records are grouped by `gemini::Grouper`, not read one by one"
                    .into(),
            ));
        }
        Format::ClaudeProjects => {
            return crate::claude_projects::project(v).map_err(|u| Unreadable {
                conversation_id: u.conversation_id.or(id_hint.clone()),
                why: u.why,
            });
        }
        Format::Perplexity => {
            return Err(fail(
                "a Perplexity thread is Markdown, read by `perplexity::thread`".into(),
            ));
        }
        Format::LeChat => {
            return Err(fail(
                "a Le Chat file is one conversation, read by `lechat::conversation`".into(),
            ));
        }
        Format::ChatGpt => (
            Surface::ChatGpt,
            network::parse_conversation_value(Surface::ChatGpt, v),
            time_ms(v.get("update_time")).or_else(|| time_ms(v.get("create_time"))),
            Some("https://chatgpt.com/c/"),
        ),
        Format::Claude => (
            Surface::Claude,
            network::parse_conversation_value(Surface::Claude, v),
            time_ms(v.get("updated_at")).or_else(|| time_ms(v.get("created_at"))),
            Some("https://claude.ai/chat/"),
        ),
        Format::Grok => {
            let conv = v.get("conversation").unwrap_or(&Value::Null);
            (
                Surface::Grok,
                network::parse_conversation_value(Surface::Grok, &grok_page_shape(v)),
                time_ms(conv.get("modify_time")).or_else(|| time_ms(conv.get("create_time"))),
                Some("https://grok.com/c/"),
            )
        }
        Format::DeepSeek => (
            Surface::DeepSeek,
            network::parse_conversation_value(Surface::DeepSeek, &deepseek_page_shape(v)),
            time_ms(v.get("updated_at")).or_else(|| time_ms(v.get("inserted_at"))),
            Some("https://chat.deepseek.com/a/chat/s/"),
        ),
    };
    let mut conv = parsed.map_err(|e| match e {
        network::ParseError::Malformed { detail, .. } => fail(detail),
        e => fail(e.to_string()),
    })?;
    if format == Format::Claude {
        add_extracted_text(v, &mut conv.turns);
    }
    let (listed, unreadable) = unreadable_messages(format, v, &conv.turns);
    if listed > 0 && conv.turns.is_empty() {
        return Err(fail(format!(
            "none of its {listed} messages could be read ({}); the export may be damaged: download it again",
            describe_unreadable(&unreadable)
        )));
    }
    let conversation_id = conv
        .conversation_id
        .clone()
        .or_else(|| id_hint.clone())
        .ok_or_else(|| fail("the conversation has no id".into()))?;
    Ok(SourceConversation {
        unreadable,
        surface: surface.id().to_owned(),
        url: url_prefix.map(|p| format!("{p}{conversation_id}")),
        conversation_id,
        title: conv.title,
        updated_at_ms: updated,
        turns: conv.turns,
    })
}

/// "2 not a JSON object, 1 without a message id": the counts of an unreadable map, for a report.
pub fn describe_unreadable(unreadable: &BTreeMap<String, u64>) -> String {
    unreadable
        .iter()
        .map(|(code, n)| format!("{n} {}", unreadable_words(code)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The messages a conversation lists (structural nodes without a message, like ChatGPT's and DeepSeek's roots,
/// are not messages) and, per reason, those that did not become one of `turns`: an entry that is not an object,
/// one without the id the site gives every message, or one the parser left out.
pub fn unreadable_messages(
    format: Format,
    v: &Value,
    turns: &[NetTurn],
) -> (u64, BTreeMap<String, u64>) {
    // Each listed message: its id, or why it has none.
    let mut listed: Vec<Result<&str, &'static str>> = Vec::new();
    let object = |x: &Value| x.is_object().then_some(()).ok_or("not_an_object");
    match format {
        Format::ChatGpt | Format::DeepSeek => {
            for (id, node) in v
                .get("mapping")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                let entry = object(node).and_then(|()| match node.get("message") {
                    None | Some(Value::Null) => Ok(None),
                    // Chrome is counted apart (`chrome_messages`).
                    Some(m) if is_chrome(format, m) => Ok(None),
                    Some(m) => object(m).and_then(|()| {
                        if format == Format::ChatGpt && str_at(m, "id").is_none() {
                            Err("no_id")
                        } else {
                            Ok(Some(id.as_str()))
                        }
                    }),
                });
                match entry {
                    Ok(None) => {}
                    Ok(Some(id)) => listed.push(Ok(id)),
                    Err(why) => listed.push(Err(why)),
                }
            }
        }
        Format::Claude => {
            for m in v
                .get("chat_messages")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                listed.push(object(m).and_then(|()| str_at(m, "uuid").ok_or("no_id")));
            }
        }
        Format::Grok => {
            for item in v
                .get("responses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let r = item.get("response").unwrap_or(item);
                listed.push(object(item).and_then(|()| object(r)).and_then(|()| {
                    str_at(r, "_id")
                        .or_else(|| str_at(r, "responseId"))
                        .ok_or("no_id")
                }));
            }
        }
        Format::Gemini
        | Format::GeminiHtml
        | Format::LeChat
        | Format::ClaudeProjects
        | Format::Perplexity => {}
    }
    let keys: BTreeSet<&str> = turns.iter().map(|t| t.message_key.as_str()).collect();
    let mut out = BTreeMap::new();
    for entry in &listed {
        let why = match entry {
            Ok(id) if keys.contains(id) => continue,
            Ok(_) => "not_understood",
            Err(why) => why,
        };
        *out.entry(why.to_owned()).or_insert(0) += 1;
    }
    (listed.len() as u64, out)
}

/// A message that is the site's chrome, not content: ChatGPT's "Thought for 9s" recap (`reasoning_recap`), which
/// the parser makes no turn of.
fn is_chrome(format: Format, m: &Value) -> bool {
    format == Format::ChatGpt
        && m.get("content")
            .and_then(|c| c.get("content_type"))
            .and_then(Value::as_str)
            == Some("reasoning_recap")
}

/// How many of a conversation's messages are chrome ([`is_chrome`]), dropped on purpose.
pub fn chrome_messages(format: Format, v: &Value) -> u64 {
    v.get("mapping")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(_, n)| n.get("message"))
        .filter(|m| is_chrome(format, m))
        .count() as u64
}

/// Claude's export keeps the text claude.ai extracted from each attached file (`attachments[].extracted_content`);
/// the page shows only the file's chip. The text follows the chip, fenced, so the import keeps what was said.
fn add_extracted_text(v: &Value, turns: &mut [NetTurn]) {
    for m in v
        .get("chat_messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(key) = str_at(m, "uuid") else {
            continue;
        };
        let Some(t) = turns.iter_mut().find(|t| t.message_key == key) else {
            continue;
        };
        for a in m
            .get("attachments")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let (Some(name), Some(body)) = (str_at(a, "file_name"), str_at(a, "extracted_content"))
            else {
                continue;
            };
            let chip = personkit_shared::turn_text::file(name);
            let block = format!("```\n{}\n```", body.trim_end());
            match t.text.find(&chip) {
                Some(i) => t.text.insert_str(i + chip.len(), &format!("\n\n{block}")),
                None => {
                    if !t.text.is_empty() {
                        t.text.push_str("\n\n");
                    }
                    t.text.push_str(&format!("{chip}\n\n{block}"));
                }
            }
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Grok's export `{conversation: {id, title, create_time, modify_time}, responses: [{response: {_id, sender,
/// message, create_time, model, parent_response_id?}}]}` → the page's conversation shape the network parser reads
/// (`responses` of `{responseId, sender, message, createTime, parentResponseId, model}`).
fn grok_page_shape(v: &Value) -> Value {
    let conv = v.get("conversation").cloned().unwrap_or(Value::Null);
    let id = str_at(&conv, "id").map(str::to_owned);
    let mut responses = Vec::new();
    let mut prev: Option<String> = None;
    for item in v
        .get("responses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let r = item.get("response").unwrap_or(item);
        let key = str_at(r, "_id")
            .or_else(|| str_at(r, "responseId"))
            .map(str::to_owned);
        let mut out = serde_json::Map::new();
        if let Some(k) = &key {
            out.insert("responseId".into(), Value::String(k.clone()));
        }
        for (from, to) in [
            ("sender", "sender"),
            ("message", "message"),
            ("model", "model"),
            ("thinking_trace", "thinkingTrace"),
        ] {
            if let Some(x) = r.get(from) {
                out.insert(to.into(), x.clone());
            }
        }
        if let Some(ms) = time_ms(r.get("create_time")) {
            out.insert(
                "createTime".into(),
                Value::String(personkit_shared::time::rfc3339(ms)),
            );
        }
        // Without a parent id the export's responses are a plain list: each follows the one before it.
        let parent = str_at(r, "parent_response_id")
            .map(str::to_owned)
            .or_else(|| prev.clone());
        if let Some(p) = parent {
            out.insert("parentResponseId".into(), Value::String(p));
        }
        prev = key;
        responses.push(Value::Object(out));
    }
    serde_json::json!({
        "conversation": { "conversationId": id, "title": conv.get("title") },
        "responses": responses,
    })
}

/// DeepSeek's export `{id, title, inserted_at, updated_at, mapping: {root: {children}, <id>: {id, parent,
/// children, message: {files, model, inserted_at, fragments: [{type, content}]}}}}` → the page's
/// `{chat_session, chat_messages}` shape. A node's role follows from its fragments (`REQUEST` → user); the shown
/// branch ends at the newest leaf.
fn deepseek_page_shape(v: &Value) -> Value {
    let mapping = v.get("mapping").and_then(Value::as_object);
    let mut messages = Vec::new();
    let mut leaf: Option<(i64, String)> = None;
    for (id, node) in mapping.into_iter().flatten() {
        let Some(msg) = node.get("message").filter(|m| m.is_object()) else {
            continue;
        };
        let frags = msg.get("fragments").and_then(Value::as_array);
        let is_request = frags.is_some_and(|f| {
            f.iter()
                .any(|x| x.get("type").and_then(Value::as_str) == Some("REQUEST"))
        });
        let parent = str_at(node, "parent")
            .filter(|p| *p != "root")
            .map(str::to_owned);
        let fragments = msg.get("fragments").cloned().unwrap_or(Value::Null);
        let at = time_ms(msg.get("inserted_at"));
        let no_children = node
            .get("children")
            .and_then(Value::as_array)
            .is_none_or(|c| c.is_empty());
        if no_children {
            let t = at.unwrap_or(0);
            if leaf.as_ref().is_none_or(|(lt, _)| t >= *lt) {
                leaf = Some((t, id.clone()));
            }
        }
        messages.push(serde_json::json!({
            "message_id": id,
            "parent_id": parent,
            "role": if is_request { "USER" } else { "ASSISTANT" },
            "model": msg.get("model"),
            "inserted_at": at.map(|ms| ms as f64 / 1000.0),
            "fragments": fragments,
        }));
    }
    serde_json::json!({
        "chat_session": {
            "id": v.get("id"),
            "title": v.get("title"),
            "current_message_id": leaf.map(|(_, id)| id),
        },
        "chat_messages": messages,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_in_every_form() {
        assert_eq!(time_ms(Some(&json!(1700000000.5))), Some(1_700_000_000_500));
        assert_eq!(
            time_ms(Some(&json!({"$date": {"$numberLong": "1700000000123"}}))),
            Some(1_700_000_000_123)
        );
        assert_eq!(
            time_ms(Some(&json!("2023-11-14T22:13:20Z"))),
            Some(1_700_000_000_000)
        );
        assert_eq!(time_ms(Some(&json!(null))), None);
        assert_eq!(time_ms(Some(&json!(-5))), None);
    }

    #[test]
    fn a_conversation_that_is_not_an_object_is_unreadable() {
        let e = read(Format::ChatGpt, &json!([1])).unwrap_err();
        assert!(e.why.contains("a list"), "{}", e.why);
        let e = read(Format::ChatGpt, &json!({"id": "c1", "mapping": 3})).unwrap_err();
        assert_eq!(e.conversation_id.as_deref(), Some("c1"));
    }
}
