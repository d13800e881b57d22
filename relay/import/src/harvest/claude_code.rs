//! Claude Code: `~/.claude/projects/<project folder, / as ->/<session id>.jsonl` (and sub-agent files beside
//! them, `<session id>/subagents/agent-<id>.jsonl`). Format facts: daaain/claude-code-log
//! `claude_code_log/models.py`, kvsankar/agent-history `docs/specs/agents/formats/claude-code-format.md`
//! (`../shared/docs/formats.md`).
//!
//! One JSON record per line. How each becomes turns:
//! - `user` / `assistant` lines (`uuid`, `parentUuid`, `sessionId`, `timestamp`, `isSidechain`, `message`): one
//!   turn each, keyed by `uuid` with `parentUuid` as its parent, so an edited or re-run prompt (a second child of
//!   the same parent) is a revision of the turn it replaced. `message.content` is a string or Anthropic content
//!   blocks: `text` → the text, `thinking` → reasoning, `tool_use` → a tool call (name and JSON input),
//!   `tool_result` → tool output; a user line holding only tool results is a `tool` turn. `isMeta` user lines
//!   (command caveats, injected context) and the `isCompactSummary` line that continues a compacted session (a
//!   model's summary, not the user's words) are kept as context (system) turns. A line with no `parentUuid`
//!   (a compaction boundary) takes `logicalParentUuid` as its parent.
//! - inside a user line, what Claude Code adds (`<system-reminder>`, the local-command caveat, a command's
//!   output, hook text) becomes an `[injected: …]` block (`turn_text::split_injected`); a slash command's wrapper
//!   becomes what was typed (`/name args`); a line left with no words of the user's is context.
//! - `attachment` lines: a `queued_command` (a prompt typed while the model worked) is the user's turn; other
//!   attachment types are counted as skipped.
//! - thread: one per `sessionId`; sidechain lines (`isSidechain: true`, a sub-agent's own conversation) go to a
//!   thread of their own, `<sessionId>/agent-<agentId>` (`<sessionId>/sidechain` without an agent id), so the
//!   main thread reads as the user saw it.
//! - `summary` lines (`summary`, `leafUuid`, no session id) name the session: its text is the thread title
//!   (carried to later runs in the file's state).
//! - `system` lines (compaction boundaries, notices): context turns with their subtype.
//! - `file-history-snapshot`, `queue-operation`, `progress`: tool state, not conversation — counted as skipped.
//! - any other type: a `[unsupported: …]` placeholder turn, counted.

use personkit_shared::network::ToolCall;
use personkit_shared::wire::Role;
use serde_json::{Map, Value};

use super::{
    Collected, LineAt, LineParser, Notes, Source, cut, placeholder, text_of, time_ms, turn,
};

const SRC: Source = Source::ClaudeCode;

#[derive(Debug, Default)]
pub struct Parser;

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The thread a line belongs to.
fn conversation(v: &Value, at: &LineAt<'_>) -> String {
    let session = s(v, "sessionId").map(str::to_owned).unwrap_or_else(|| {
        at.file
            .file_stem()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| "session".into())
    });
    if v.get("isSidechain").and_then(Value::as_bool) == Some(true) {
        match s(v, "agentId") {
            Some(a) => format!("{session}/agent-{a}"),
            None => format!("{session}/sidechain"),
        }
    } else {
        session
    }
}

impl LineParser for Parser {
    fn line(
        &mut self,
        meta: &mut Map<String, Value>,
        at: LineAt<'_>,
        v: Value,
        out: &mut Collected,
        notes: &mut Notes,
    ) {
        let kind = personkit_shared::wire::quote_safely(s(&v, "type").unwrap_or("(none)"), 64);
        let key = s(&v, "uuid")
            .map(str::to_owned)
            .unwrap_or_else(|| format!("@{}", at.offset));
        // A compaction boundary starts a new root and names the turn it follows in `logicalParentUuid`.
        let parent = s(&v, "parentUuid").or_else(|| s(&v, "logicalParentUuid"));
        let conv = conversation(&v, &at);
        let sidechain = conv.contains('/');
        let title = meta.get("title").and_then(Value::as_str).map(|t| {
            if sidechain {
                format!("{t} (sub-agent)")
            } else {
                t.to_owned()
            }
        });
        let mut t = match kind.as_str() {
            "summary" => {
                if let Some(sum) = s(&v, "summary") {
                    meta.insert("title".into(), Value::String(sum.to_owned()));
                }
                notes.skip("claude-code:summary (thread title)");
                return;
            }
            "file-history-snapshot" | "queue-operation" | "progress" => {
                notes.skip(&format!("claude-code:{kind}"));
                return;
            }
            "attachment" => {
                let a = v.get("attachment").unwrap_or(&Value::Null);
                match s(a, "type") {
                    // A prompt typed while the model was still working: the user's turn.
                    Some("queued_command") => {
                        let msg = serde_json::json!({"content": a.get("prompt").cloned().unwrap_or(Value::Null)});
                        message("user", &key, parent, &msg)
                    }
                    other => {
                        let other =
                            personkit_shared::wire::quote_safely(other.unwrap_or("(none)"), 64);
                        notes.skip(&format!("claude-code:attachment:{other}"));
                        return;
                    }
                }
            }
            "user" | "assistant" => {
                let Some(msg) = v.get("message").filter(|m| m.is_object()) else {
                    notes.problems.push((
                        Some(at.line),
                        format!("a {kind} record without a message object; skipped"),
                    ));
                    return;
                };
                message(&kind, &key, parent, msg)
            }
            "system" => {
                let mut t = turn(SRC, &key, parent, Role::System);
                let sub = s(&v, "subtype").unwrap_or("system");
                let body = text_of(v.get("content").unwrap_or(&Value::Null));
                t.text = personkit_shared::turn_text::note(sub, &body);
                t.hidden = true;
                t
            }
            other => placeholder(SRC, &key, parent, other),
        };
        // Injected context and the model-written summary that continues a compacted session are not the user's
        // words: kept as context.
        let flag = |k: &str| v.get(k).and_then(Value::as_bool) == Some(true);
        if flag("isMeta") || flag("isCompactSummary") {
            t.hidden = true;
        }
        t.created_at_ms = time_ms(v.get("timestamp"));
        out.push(SRC, &conv, title.as_deref(), t);
    }
}

/// A `user` or `assistant` line's message → one turn.
fn message(
    kind: &str,
    key: &str,
    parent: Option<&str>,
    msg: &Value,
) -> personkit_shared::network::NetTurn {
    let role = if kind == "user" {
        Role::User
    } else {
        Role::Assistant
    };
    let mut t = turn(SRC, key, parent, role);
    t.model = s(msg, "model").map(str::to_owned);
    let content = msg.get("content").unwrap_or(&Value::Null);
    let blocks = match content {
        Value::Array(b) => b.as_slice(),
        other => {
            t.text = text_of(other);
            if role == Role::User {
                user_words(&mut t);
            }
            return t;
        }
    };
    let mut texts: Vec<String> = Vec::new();
    let mut results: Vec<String> = Vec::new();
    for b in blocks {
        let bt = b.get("type").and_then(Value::as_str).unwrap_or("(none)");
        match bt {
            "text" => texts.push(text_of(b.get("text").unwrap_or(&Value::Null))),
            "thinking" => {
                let r = text_of(b.get("thinking").unwrap_or(&Value::Null));
                if !r.trim().is_empty() {
                    t.reasoning = Some(match t.reasoning.take() {
                        Some(prev) => format!("{prev}\n\n{r}"),
                        None => r,
                    });
                }
            }
            "redacted_thinking" => {
                texts.push(personkit_shared::turn_text::REASONING_WITHHELD.into())
            }
            "tool_use" | "server_tool_use" => t.tool_calls.push(ToolCall {
                name: s(b, "name").unwrap_or("tool").to_owned(),
                input: cut(&b
                    .get("input")
                    .map(|i| serde_json::to_string_pretty(i).unwrap_or_default())
                    .unwrap_or_default()),
                output: None,
                id: s(b, "id").map(str::to_owned),
            }),
            "tool_result" | "web_search_tool_result" => {
                let body = text_of(b.get("content").unwrap_or(&Value::Null));
                let err = b.get("is_error").and_then(Value::as_bool) == Some(true);
                results.push(cut(&if err {
                    personkit_shared::turn_text::tool_error(&body)
                } else {
                    body
                }));
            }
            "image" => texts.push(personkit_shared::turn_text::IMAGE.into()),
            "document" => texts.push(personkit_shared::turn_text::DOCUMENT.into()),
            other => {
                let other = personkit_shared::wire::quote_safely(other, 64);
                texts.push(personkit_shared::turn_text::unsupported(&format!(
                    "claude-code block {other:?}"
                )));
                t.unknown.push(format!("claude-code:block:{other}"));
            }
        }
    }
    t.text = texts
        .into_iter()
        .filter(|x| !x.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");
    if !results.is_empty() {
        if t.text.is_empty() && t.tool_calls.is_empty() {
            t.role = Role::Tool;
        }
        t.tool_output = Some(results.join("\n\n"));
    }
    if t.role == Role::User {
        user_words(&mut t);
    }
    t
}

/// Wrappers Claude Code puts around text it adds to a user line: kept, but as injected blocks, not as the user's
/// words.
const INJECTED: &[&str] = &[
    "system-reminder",
    "local-command-caveat",
    "local-command-stdout",
    "local-command-stderr",
    "bash-stdout",
    "bash-stderr",
    "task-notification",
    "user-prompt-submit-hook",
];

/// A user line's text as the user's words: a slash command's wrapper (`<command-name>/x</command-name>` …
/// `<command-args>a</command-args>`) becomes what was typed (`/x a`), a `!cmd` line's `<bash-input>` its command,
/// and injected spans become marked blocks. A line with no words of the user's own left is context.
fn user_words(t: &mut personkit_shared::network::NetTurn) {
    let mut text = std::mem::take(&mut t.text);
    if let Some(name) = between(&text, "command-name") {
        let args = between(&text, "command-args").unwrap_or_default();
        let typed = format!("{} {}", name.trim(), args.trim()).trim().to_owned();
        // `command-message` repeats the name without its slash.
        for tag in ["command-name", "command-message", "command-args"] {
            text = remove_tag(&text, tag);
        }
        text = format!("{typed}\n{text}");
    }
    if let Some(cmd) = between(&text, "bash-input") {
        let typed = format!("!{}", cmd.trim());
        text = format!("{typed}\n{}", remove_tag(&text, "bash-input"));
    }
    let (words, own) = personkit_shared::turn_text::split_injected(&text, INJECTED);
    t.text = words;
    if !own && t.tool_output.is_none() {
        t.hidden = true;
    }
}

/// The text inside the first `<tag>…</tag>`.
fn between(text: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let from = text.find(&open)? + open.len();
    let to = text[from..].find(&format!("</{tag}>"))? + from;
    Some(text[from..to].to_owned())
}

/// `text` without its first `<tag>…</tag>` span.
fn remove_tag(text: &str, tag: &str) -> String {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    match (text.find(&open), text.find(&close)) {
        (Some(a), Some(b)) if b >= a => format!("{}{}", &text[..a], &text[b + close.len()..]),
        _ => text.to_owned(),
    }
}
