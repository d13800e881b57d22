//! Aider: `.aider.chat.history.md` in each project folder it ran in (the folders `personkit harvest add-folder`
//! names). Format facts: Aider-AI/aider `aider/io.py` (`append_chat_history`, `user_input`, `tool_output`,
//! `ai_output`) and `aider/utils.py` (`../shared/docs/formats.md`).
//!
//! Markdown, appended to: `# aider chat started at <local time>` opens a session (one thread each); the user's
//! input is written as `#### ` lines; aider's own messages (files added, edits applied, token counts) as `> `
//! blockquote lines (`> ` with its space: a reply's `>>>>>>> REPLACE` marker is not one); the model's reply as
//! plain Markdown. A block is a run of lines of one kind (blank lines
//! belong to the block they are in); a reply has no end marker, so the last block of the file is taken only
//! when the next block has begun or the file has been quiet for the configured settle time — until then the
//! file's offset stays at the block's start. A reply that itself quotes with `> ` is split there (the format does
//! not tell the two apart). Turns are keyed by their place in the session (`#<n>`), each the child of the one
//! before; the session's thread id is the file's path hash and the header's byte offset (stable, as the file only
//! grows). Sessions have no time zone and turns no times: turns are ordered by their place.

use personkit_shared::wire::Role;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::{Collected, LineAt, LineParser, Notes, Source, turn};

const SRC: Source = Source::Aider;
pub const FILE_NAME: &str = ".aider.chat.history.md";
const HEADER: &str = "# aider chat started at";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    User,
    Tool,
    Reply,
}

#[derive(Debug)]
struct Block {
    kind: Kind,
    start: u64,
    start_line: u64,
    lines: Vec<String>,
}

#[derive(Debug, Default)]
pub struct Parser {
    pending: Option<Block>,
    file_tag: Option<String>,
}

impl Parser {
    fn tag(&mut self, at: &LineAt<'_>) -> String {
        self.file_tag
            .get_or_insert_with(|| {
                let h = Sha256::digest(at.file.display().to_string().as_bytes());
                h.iter().take(6).map(|b| format!("{b:02x}")).collect()
            })
            .clone()
    }

    fn emit(&mut self, meta: &mut Map<String, Value>, out: &mut Collected) {
        let Some(b) = self.pending.take() else {
            return;
        };
        let text = b.lines.join("\n").trim().to_owned();
        if text.is_empty() {
            return;
        }
        let index = meta.get("index").and_then(Value::as_u64).unwrap_or(0);
        let key = format!("#{index}");
        let prev = meta.get("prev").and_then(Value::as_str).map(str::to_owned);
        let role = match b.kind {
            Kind::User => Role::User,
            Kind::Tool => Role::Tool,
            Kind::Reply => Role::Assistant,
        };
        let mut t = turn(SRC, &key, prev.as_deref(), role);
        t.text = text;
        t.position = u32::try_from(index).ok();
        t.on_current_branch = Some(true);
        let conv = meta
            .get("session")
            .and_then(Value::as_str)
            .unwrap_or("session")
            .to_owned();
        let title = meta.get("title").and_then(Value::as_str).map(str::to_owned);
        out.push(SRC, &conv, title.as_deref(), t);
        meta.insert("index".into(), Value::from(index + 1));
        meta.insert("prev".into(), Value::String(key));
    }

    /// The end of what was read: the last block is taken when the file is `quiet`, else held back. Returns the
    /// offset and line count the file is read to.
    pub fn finish(
        &mut self,
        meta: &mut Map<String, Value>,
        quiet: bool,
        out: &mut Collected,
        offset: u64,
        lines: u64,
    ) -> (u64, u64) {
        match &self.pending {
            Some(b) if !quiet => (b.start, b.start_line),
            _ => {
                self.emit(meta, out);
                (offset, lines)
            }
        }
    }
}

impl LineParser for Parser {
    fn line(
        &mut self,
        meta: &mut Map<String, Value>,
        at: LineAt<'_>,
        v: Value,
        out: &mut Collected,
        _notes: &mut Notes,
    ) {
        let raw = v.as_str().unwrap_or_default();
        let line = raw.trim_end_matches(['\n', '\r']);
        if let Some(when) = line.strip_prefix(HEADER) {
            self.emit(meta, out);
            let tag = self.tag(&at);
            let folder = at
                .file
                .parent()
                .and_then(|p| p.file_name())
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            meta.insert(
                "session".into(),
                Value::String(format!("{tag}@{}", at.offset)),
            );
            meta.insert(
                "title".into(),
                Value::String(format!("aider: {folder}, {}", when.trim())),
            );
            meta.insert("index".into(), Value::from(0u64));
            meta.remove("prev");
            return;
        }
        if !meta.contains_key("session") {
            let tag = self.tag(&at);
            meta.insert("session".into(), Value::String(format!("{tag}@0")));
        }
        // `####` alone or followed by a space: the user's line (a reply's `#####` heading is not).
        let (kind, text) = if let Some(r) = line.strip_prefix("#### ") {
            (Some(Kind::User), r)
        } else if line == "####" {
            (Some(Kind::User), "")
        } else if let Some(r) = line.strip_prefix("> ") {
            (Some(Kind::Tool), r)
        } else if line == ">" {
            (Some(Kind::Tool), "")
        } else if line.trim().is_empty() {
            (None, "")
        } else {
            (Some(Kind::Reply), line)
        };
        match (kind, &mut self.pending) {
            (None, Some(b)) => b.lines.push(String::new()),
            (None, None) => {}
            (Some(k), Some(b)) if b.kind == k => b.lines.push(text.to_owned()),
            (Some(k), _) => {
                self.emit(meta, out);
                self.pending = Some(Block {
                    kind: k,
                    start: at.offset,
                    start_line: at.line - 1,
                    lines: vec![text.to_owned()],
                });
            }
        }
    }
}
