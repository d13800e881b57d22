//! OpenCode (the terminal agent): `$XDG_DATA_HOME/opencode` (`~/.local/share/opencode`, on macOS too), either the
//! SQLite file `opencode.db` (`opencode-<channel>.db` for other release channels; `OPENCODE_DB` names another
//! file, absolute or relative to that folder) or the JSON tree its older builds wrote under `storage/`. Format
//! facts: anomalyco/opencode `packages/opencode/src/session/message-v2.ts` and `session.ts` @ 67caf894 (as pinned
//! by kenn-io/agentsview `docs/internal/session-format-sources.md` @ 001b4027), v1.18.30 = 3104c142; vshulcz/deja-vu
//! `docs/registry/opencode.md` @ 1d9ef074.
//!
//! - SQLite: `session(id, parent_id, directory, title, time_created, time_updated)`, `message(id, session_id,
//!   time_created, data)`, `part(id, message_id, session_id, data)`; `data` is the JSON of the message or part
//!   without its ids.
//! - JSON tree: `storage/session/<project>/<session>.json` (`{id, title, directory, time}`), its messages
//!   `storage/message/<session>/<message>.json` and their parts `storage/part/<message>/<part>.json`. The session
//!   file is the transcript: OpenCode rewrites it (its `time.updated`) as the session grows, and then the
//!   session's messages are read again.
//!
//! A message `{role: user|assistant, time {created}, modelID}` is a turn keyed by its id (parent: the message
//! before it in the session), its parts in id order: `text` (a `synthetic` one is text OpenCode added, kept as an
//! `[injected: opencode]` block), `reasoning`, `tool` (`tool`, `callID`, `state {status, input, output, error}`:
//! a tool call with its output), `file` (`[file: name]`); `step-start`, `step-finish`, `snapshot`, `patch` and
//! `agent` parts are bookkeeping, skipped by name; any other is kept as an `[unsupported: …]` marker. A message with
//! nothing to show (an aborted step) is skipped by name. One thread per session, titled by its title.

use std::path::Path;

use personkit_shared::network::{NetTurn, ToolCall};
use personkit_shared::turn_text;
use personkit_shared::wire::Role;
use personkit_store::foreign::{Cell, ForeignDb, Select};
use serde_json::Value;

use super::{Collected, Notes, Source, cut, text_of, turn};

const SRC: Source = Source::OpenCode;
const MAX_MESSAGES: usize = 100_000;
const MAX_PARTS: usize = 10_000;
/// The largest message or part file of the JSON tree read.
const MAX_JSON_FILE: u64 = 64 * 1024 * 1024;

const BOOKKEEPING: &[&str] = &[
    "step-start",
    "step-finish",
    "snapshot",
    "patch",
    "agent",
    "retry",
];

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn json_cell(c: Option<&Cell>) -> Result<Value, String> {
    match c {
        Some(Cell::TooLarge(n)) => Err(format!("its data is {n} bytes, too large; not read")),
        Some(c) => match c.text().map(serde_json::from_str::<Value>) {
            Some(Ok(v @ Value::Object(_))) => Ok(v),
            _ => Err("its data is not a JSON object; skipped".into()),
        },
        None => Err("no data".into()),
    }
}

/// The sessions of the database (their ids).
pub fn sessions(db: &ForeignDb, notes: &mut Notes) -> Result<Vec<String>, String> {
    super::db_session_ids(
        db,
        notes,
        "session",
        "message",
        &["time_created", "id"],
        "no `message` table: not an OpenCode database",
    )
}

/// One session of the database into `out`.
pub fn session(db: &ForeignDb, id: &str, out: &mut Collected, notes: &mut Notes) {
    let fail = |out: &mut Collected, notes: &mut Notes, why: String| {
        notes.record(out, None, &|| format!("session {id}"), |_, notes| {
            notes.problems.push((None, format!("session {id}: {why}")))
        });
    };
    let title = match db.rows(&Select {
        table: "session",
        columns: &["title"],
        eq: Some(("id", id)),
        limit: 1,
        ..Select::default()
    }) {
        Ok(r) => r
            .first()
            .and_then(|r| r.first())
            .and_then(Cell::text)
            .map(str::to_owned),
        Err(e) => return fail(out, notes, e.to_string()),
    };
    let rows = match db.rows(&Select {
        table: "message",
        columns: &["id", "data", "time_created"],
        eq: Some(("session_id", id)),
        order: &["time_created", "id"],
        limit: MAX_MESSAGES + 1,
        ..Select::default()
    }) {
        Ok(r) => r,
        Err(e) => return fail(out, notes, e.to_string()),
    };
    if rows.len() > MAX_MESSAGES {
        notes.problems.push((
            None,
            format!("session {id} has more than {MAX_MESSAGES} messages; the first were read"),
        ));
    }
    let mut prev: Option<String> = None;
    for (i, r) in rows.iter().take(MAX_MESSAGES).enumerate() {
        let Some(mid) = r.first().and_then(Cell::text).map(str::to_owned) else {
            continue;
        };
        let what = || format!("session {id}, message {mid}");
        let msg = json_cell(r.get(1));
        let parts = db
            .rows(&Select {
                table: "part",
                columns: &["id", "data"],
                eq: Some(("message_id", &mid)),
                order: &["id"],
                limit: MAX_PARTS,
                ..Select::default()
            })
            .map_err(|e| e.to_string());
        let created = r.get(2).and_then(Cell::int);
        notes.record(out, None, &what, |out, notes| {
            let msg = match msg {
                Ok(m) => m,
                Err(why) => return notes.problems.push((None, format!("{}: {why}", what()))),
            };
            let parts = match parts {
                Ok(p) => p,
                Err(why) => return notes.problems.push((None, format!("{}: {why}", what()))),
            };
            let mut ps = Vec::new();
            for p in &parts {
                match json_cell(p.get(1)) {
                    Ok(v) => ps.push(v),
                    Err(why) => notes.problems.push((
                        None,
                        format!(
                            "{}, part {}: {why}",
                            what(),
                            p.first().and_then(Cell::text).unwrap_or("?")
                        ),
                    )),
                }
            }
            push(
                out,
                notes,
                id,
                title.as_deref(),
                &mid,
                prev.as_deref(),
                i,
                &msg,
                &ps,
                created,
            );
        });
        prev = Some(mid);
    }
}

/// One session file of the JSON tree (`storage/session/<project>/<id>.json`) with its messages and parts.
pub fn read_tree(
    path: &Path,
    bytes: &[u8],
    out: &mut Collected,
    notes: &mut Notes,
) -> Result<(), String> {
    let info: Value = serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON ({e})"))?;
    let id = s(&info, "id").map(str::to_owned).unwrap_or_else(|| {
        path.file_stem()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let title = s(&info, "title").map(str::to_owned);
    // `<storage>/session/<project>/<id>.json`
    let Some(storage) = path.parent().and_then(Path::parent).and_then(Path::parent) else {
        return Err("not in an OpenCode storage folder".into());
    };
    let mut msgs: Vec<(String, Result<Value, String>)> =
        json_files(&storage.join("message").join(&id), MAX_MESSAGES);
    // Message ids sort in creation order; the time, when there, decides first.
    msgs.sort_by_key(|(name, m)| {
        let t = m
            .as_ref()
            .ok()
            .and_then(|m| m.get("time")?.get("created")?.as_i64());
        (t, name.clone())
    });
    let mut prev: Option<String> = None;
    for (i, (name, msg)) in msgs.into_iter().enumerate() {
        let mid = msg
            .as_ref()
            .ok()
            .and_then(|m| s(m, "id"))
            .map_or(name, str::to_owned);
        let what = || format!("session {id}, message {mid}");
        notes.record(out, None, &what, |out, notes| {
            let msg = match msg {
                Ok(m) => m,
                Err(why) => return notes.problems.push((None, format!("{}: {why}", what()))),
            };
            let mut ps = Vec::new();
            let mut parts = json_files(&storage.join("part").join(&mid), MAX_PARTS);
            parts.sort_by(|a, b| a.0.cmp(&b.0));
            for (pname, p) in parts {
                match p {
                    Ok(v) => ps.push(v),
                    Err(why) => notes
                        .problems
                        .push((None, format!("{}, part {pname}: {why}", what()))),
                }
            }
            push(
                out,
                notes,
                &id,
                title.as_deref(),
                &mid,
                prev.as_deref(),
                i,
                &msg,
                &ps,
                None,
            );
        });
        prev = Some(mid);
    }
    Ok(())
}

/// The `.json` files of a folder (at most `max`), each parsed, by file stem.
fn json_files(dir: &Path, max: usize) -> Vec<(String, Result<Value, String>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.filter_map(Result::ok).take(max) {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let name = p
            .file_stem()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let v = match std::fs::metadata(&p) {
            Ok(m) if m.len() > MAX_JSON_FILE => Err(format!(
                "the file is {} bytes, too large; not read",
                m.len()
            )),
            Ok(_) => std::fs::read(&p)
                .map_err(|e| format!("cannot read it: {e}"))
                .and_then(|b| match serde_json::from_slice::<Value>(&b) {
                    Ok(v @ Value::Object(_)) => Ok(v),
                    _ => Err("not a JSON object; skipped".into()),
                }),
            Err(e) => Err(format!("cannot read it: {e}")),
        };
        out.push((name, v));
    }
    out
}

/// A message and its parts as a turn in `out`, or a named skip when it holds nothing to show.
#[allow(clippy::too_many_arguments)]
fn push(
    out: &mut Collected,
    notes: &mut Notes,
    conv: &str,
    title: Option<&str>,
    key: &str,
    parent: Option<&str>,
    place: usize,
    msg: &Value,
    parts: &[Value],
    created: Option<i64>,
) {
    let role = match s(msg, "role") {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        other => {
            let what = format!("message role {}", other.unwrap_or("(none)"));
            let mut t = super::placeholder(SRC, key, parent, &what);
            t.position = u32::try_from(place).ok();
            return out.push(SRC, conv, title, t);
        }
    };
    let mut t: NetTurn = turn(SRC, key, parent, role);
    t.model = s(msg, "modelID").map(str::to_owned);
    t.created_at_ms = msg
        .get("time")
        .and_then(|x| x.get("created"))
        .and_then(Value::as_i64)
        .or(created);
    t.position = u32::try_from(place).ok();
    t.on_current_branch = Some(true);
    let mut text: Vec<String> = Vec::new();
    let mut thoughts: Vec<String> = Vec::new();
    for p in parts {
        match s(p, "type").unwrap_or("(none)") {
            "text" => {
                let body = s(p, "text").unwrap_or_default();
                if body.trim().is_empty() {
                    continue;
                }
                if p.get("synthetic").and_then(Value::as_bool) == Some(true) {
                    text.push(turn_text::injected_block("opencode", body));
                } else {
                    text.push(body.to_owned());
                }
            }
            "reasoning" => {
                if let Some(r) = s(p, "text") {
                    thoughts.push(r.to_owned());
                }
            }
            "tool" => {
                let st = p.get("state").unwrap_or(&Value::Null);
                let input = st
                    .get("input")
                    .filter(|x| !x.is_null())
                    .map(|x| serde_json::to_string_pretty(x).unwrap_or_default())
                    .unwrap_or_default();
                let output = match s(st, "status") {
                    Some("error") => st.get("error").map(|e| turn_text::tool_error(&text_of(e))),
                    _ => st.get("output").map(text_of),
                }
                .filter(|o| !o.trim().is_empty());
                t.tool_calls.push(ToolCall {
                    name: s(p, "tool").unwrap_or("tool").to_owned(),
                    input: cut(&input),
                    output: output.as_deref().map(cut),
                    id: s(p, "callID").map(str::to_owned),
                });
            }
            "file" => text.push(turn_text::file(
                s(p, "filename").or_else(|| s(p, "url")).unwrap_or("file"),
            )),
            k if BOOKKEEPING.contains(&k) => notes.skip(&format!("opencode part {k}")),
            k => {
                let k = personkit_shared::wire::quote_safely(k, 64);
                text.push(turn_text::unsupported(&format!("opencode part {k:?}")));
                t.unknown.push(format!("opencode:{k}"));
            }
        }
    }
    t.text = text.join("\n\n");
    if !thoughts.is_empty() {
        t.reasoning = Some(thoughts.join("\n\n"));
    }
    if t.text.trim().is_empty() && t.reasoning.is_none() && t.tool_calls.is_empty() {
        return notes.skip("opencode message with no content");
    }
    out.push(SRC, conv, title, t);
}
