//! Amp (Sourcegraph): `${XDG_DATA_HOME:-~/.local/share}/amp/threads/T-<id>.json`, one file per thread, rewritten
//! whole as the thread grows. Historical: from build 0.0.1774963753 (2026-03-31) Amp keeps threads on
//! ampcode.com and writes none locally (`amp threads export` fetches them), so this reads the threads older
//! builds left. Format facts: vshulcz/deja-vu `docs/registry/amp.md` @0b1ddf23; kenn-io/agentsview
//! `internal/parser/amp.go` @08a272b6 (no public producer source).
//!
//! A thread `{id, title, created (ms), env.initial.trees[{displayName, uri}], messages[]}`; each message `{role,
//! content[], meta.sentAt (ms), usage{model, timestamp}}` with blocks `text`, `thinking` (reasoning), `tool_use`
//! (tool calls) and `tool_result` (`toolUseID`, `run{status, result{output|content|…}, error}`). A user message
//! holding only tool results is a `tool` turn. A turn's key is the message's `messageId` when it has one, else
//! its place (`#<n>`); its parent the message before it; the thread's title its `title`, else the project's name.

use std::path::Path;

use personkit_shared::network::{NetTurn, ToolCall};
use personkit_shared::turn_text;
use personkit_shared::wire::Role;
use serde_json::Value;

use super::{Collected, Notes, Source, cut, placeholder, text_of, time_ms, turn};

const SRC: Source = Source::Amp;

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

pub fn read(
    path: &Path,
    bytes: &[u8],
    out: &mut Collected,
    notes: &mut Notes,
) -> Result<(), String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON ({e})"))?;
    let Some(Value::Array(messages)) = v.get("messages") else {
        return Err("not an Amp thread (no `messages` list)".into());
    };
    let conv = s(&v, "id").map(str::to_owned).unwrap_or_else(|| {
        path.file_stem()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| "thread".into())
    });
    let project = v
        .pointer("/env/initial/trees/0/displayName")
        .and_then(Value::as_str);
    let title = s(&v, "title").or(project);
    let created = v.get("created").and_then(Value::as_i64);
    let mut prev: Option<String> = None;
    for (i, m) in messages.iter().enumerate() {
        let key = match m.get("messageId") {
            Some(Value::Number(n)) => format!("m{n}"),
            Some(Value::String(id)) if !id.is_empty() => id.clone(),
            _ => format!("#{i}"),
        };
        notes.record(out, None, &|| format!("message {}", i + 1), |out, notes| {
            if !m.is_object() {
                notes.problems.push((
                    None,
                    format!("message {}: not a JSON object; skipped", i + 1),
                ));
                return;
            }
            let mut t = message(m, &key, prev.as_deref());
            t.created_at_ms = m
                .pointer("/meta/sentAt")
                .and_then(Value::as_i64)
                .or_else(|| time_ms(m.pointer("/usage/timestamp")))
                .or(if i == 0 { created } else { None });
            out.push(SRC, &conv, title, t);
        });
        prev = Some(key);
    }
    Ok(())
}

fn message(m: &Value, key: &str, parent: Option<&str>) -> NetTurn {
    let role = match s(m, "role") {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        other => {
            return placeholder(
                SRC,
                key,
                parent,
                &format!("role {}", other.unwrap_or("(none)")),
            );
        }
    };
    let mut t = turn(SRC, key, parent, role);
    t.model = m
        .pointer("/usage/model")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let blocks: Vec<Value> = match m.get("content") {
        Some(Value::Array(b)) => b.clone(),
        Some(Value::String(text)) => vec![serde_json::json!({"type": "text", "text": text})],
        _ => Vec::new(),
    };
    let mut texts: Vec<String> = Vec::new();
    let mut results: Vec<String> = Vec::new();
    for b in &blocks {
        match s(b, "type").unwrap_or("(none)") {
            "text" => texts.push(s(b, "text").unwrap_or_default().to_owned()),
            "thinking" => {
                if let Some(r) = s(b, "thinking").filter(|r| !r.trim().is_empty()) {
                    t.reasoning = Some(match t.reasoning.take() {
                        Some(p) => format!("{p}\n\n{r}"),
                        None => r.to_owned(),
                    });
                }
            }
            "redacted_thinking" => texts.push(turn_text::REASONING_WITHHELD.into()),
            "tool_use" => t.tool_calls.push(ToolCall {
                name: s(b, "name").unwrap_or("tool").to_owned(),
                input: cut(&b
                    .get("input")
                    .map(|i| serde_json::to_string_pretty(i).unwrap_or_default())
                    .unwrap_or_default()),
                output: None,
                id: s(b, "id").map(str::to_owned),
            }),
            "tool_result" => results.push(result_text(b)),
            "image" => texts.push(turn_text::IMAGE.into()),
            other => {
                let other = personkit_shared::wire::quote_safely(other, 64);
                texts.push(turn_text::unsupported(&format!("amp block {other:?}")));
                t.unknown.push(format!("amp:block:{other}"));
            }
        }
    }
    t.text = texts
        .into_iter()
        .filter(|x| !x.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");
    if !results.is_empty() {
        t.tool_output = Some(cut(&results.join("\n\n")));
        if t.text.is_empty() && t.tool_calls.is_empty() {
            t.role = Role::Tool;
        }
    }
    t
}

/// Amp's tool result: `run.result` (`output`, `content`, a diff…) or `run.error`; the standard `content` too.
fn result_text(b: &Value) -> String {
    let run = b.get("run").unwrap_or(&Value::Null);
    if let Some(e) = run.get("error").filter(|e| !e.is_null()) {
        return turn_text::tool_error(&text_of(e));
    }
    match run.get("result") {
        Some(r @ Value::Object(_)) => ["output", "content", "diff"]
            .iter()
            .find_map(|k| r.get(*k).map(text_of))
            .unwrap_or_else(|| r.to_string()),
        Some(other) => text_of(other),
        None => text_of(b.get("content").unwrap_or(&Value::Null)),
    }
}
