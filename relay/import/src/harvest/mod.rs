//! Harvesters: the transcripts local AI tools keep on this machine, read into the corpus through the same
//! [`Sink`] as official exports (path `harvest`, surface `harvest:<source>`, redacted by the same core rules and
//! user patterns). `docs/import.md` "Harvesters" is the user's side of this module.
//!
//! Each [`Source`] is opt-in (the user enables it; `personkit_store::harvest` keeps that, the paths and how far
//! each file was read). A run walks every enabled source's files and reads only what is new:
//! - **line formats** (Claude Code, Codex CLI, Aider, Qwen Code, Cursor's agent): from the byte offset after the
//!   last complete line taken before; a last line without its newline is left for the next run. A file that shrank,
//!   changed device/inode, or whose first bytes (up to 4 KiB of what was read) no longer hash the same was
//!   replaced: it is read again from the start (what was stored before answers as duplicate).
//! - **whole-file formats** (Gemini CLI, Continue, Cline, Roo Code, Amp, Copilot Chat, OpenCode's older JSON tree;
//!   Grok Build and Kiro, whose answers are streamed over several lines): the tool rewrites the file as the session
//!   grows, so a changed file is read whole and every turn sent again; message ids and content hashes make that
//!   idempotent (only new turns are stored). A file that does not parse (half written) is left for the next run.
//!   VS Code Copilot Chat's `.jsonl` operation logs are rewritten when VS Code compacts them: whole-file too.
//! - **compressed line files** (Codex CLI's `.jsonl.zst`): complete once compressed, decompressed (bounded) and
//!   read whole when their bytes changed, with the line offsets of the plain file.
//! - **SQLite sources** (Cursor, OpenCode, Goose): the tool writes its database while it runs, so it is never
//!   opened in place; when the file or its `-wal` changed (sizes, times), both are copied and the copy read
//!   ([`personkit_store::foreign`]); a session whose turns hash as at the last read is passed over, a changed one
//!   sent whole (message ids make that idempotent), in batches.
//!
//! A file's state is saved only after its turns are stored, so a crash re-reads at most what it had not
//! committed (and the store answers it as duplicate). Parsers never panic on input: a line that is not JSON is a
//! [`Problem`] naming the file and line, a record type they do not know becomes a `[unsupported: …]` placeholder
//! turn counted in the report.

pub mod aider;
pub mod amp;
pub mod claude_code;
pub mod cline;
pub mod codex;
pub mod continue_dev;
pub mod gemini_cli;
pub mod grok;
pub mod kiro;
pub mod project;
pub mod qwen_code;
pub mod retention;
// Sources kept in SQLite files or VS Code-style storage.
pub mod copilot_chat;
pub mod cursor;
pub mod cursor_agent;
pub mod goose;
pub mod opencode;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use personkit_shared::identity;
use personkit_shared::network::NetTurn;
use personkit_shared::wire::Role;
use personkit_store::Connection;
use personkit_store::clock::fmt_time;
use personkit_store::foreign::ForeignDb;
use personkit_store::harvest::{self as state, FileRow};
use personkit_store::ingest::StorageError;
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::{BATCH_TURNS, ImportError, Options, Problem, Sink, SourceConversation};

pub use project::project_of;

/// A local AI tool whose transcripts can be harvested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    ClaudeCode,
    Codex,
    GeminiCli,
    Aider,
    Continue,
    // Task and session files of more tools (each module says where and what).
    Cline,
    RooCode,
    QwenCode,
    GrokBuild,
    Kiro,
    Amp,
    // Sources kept in SQLite files or VS Code-style storage.
    Cursor,
    CopilotChat,
    OpenCode,
    Goose,
    CursorAgent,
}

impl Source {
    pub const ALL: [Source; 16] = [
        Source::ClaudeCode,
        Source::Codex,
        Source::GeminiCli,
        Source::Aider,
        Source::Continue,
        Source::Cline,
        Source::RooCode,
        Source::QwenCode,
        Source::GrokBuild,
        Source::Kiro,
        Source::Amp,
        // Sources kept in SQLite files or VS Code-style storage.
        Source::Cursor,
        Source::CopilotChat,
        Source::OpenCode,
        Source::Goose,
        Source::CursorAgent,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Source::ClaudeCode => "claude-code",
            Source::Codex => "codex",
            Source::GeminiCli => "gemini-cli",
            Source::Aider => "aider",
            Source::Continue => "continue",
            Source::Cline => "cline",
            Source::RooCode => "roo-code",
            Source::QwenCode => "qwen-code",
            Source::GrokBuild => "grok-build",
            Source::Kiro => "kiro",
            Source::Amp => "amp",
            Source::Cursor => "cursor",
            Source::CopilotChat => "copilot-chat",
            Source::OpenCode => "opencode",
            Source::Goose => "goose",
            Source::CursorAgent => "cursor-agent",
        }
    }

    pub fn parse(s: &str) -> Option<Source> {
        Source::ALL.into_iter().find(|x| x.name() == s)
    }

    /// The wire surface its turns are stored under.
    pub fn surface(self) -> String {
        format!("harvest:{}", self.name())
    }

    /// Where the tool keeps its transcripts, under the home folder (aider: none — it writes into each project
    /// folder, see `personkit harvest add-folder`).
    pub fn default_dir(self) -> Option<&'static str> {
        match self {
            Source::ClaudeCode => Some(".claude/projects"),
            Source::Codex => Some(".codex/sessions"),
            Source::GeminiCli => Some(".gemini/tmp"),
            Source::Aider => None,
            Source::Continue => Some(".continue/sessions"),
            Source::Cline => Some(".config/Code/User/globalStorage/saoudrizwan.claude-dev/tasks"),
            Source::RooCode => {
                Some(".config/Code/User/globalStorage/rooveterinaryinc.roo-cline/tasks")
            }
            Source::QwenCode => Some(".qwen/projects"),
            Source::GrokBuild => Some(".grok/sessions"),
            Source::Kiro => Some(".kiro/sessions/cli"),
            Source::Amp => Some(".local/share/amp/threads"),
            Source::Cursor => Some(if cfg!(target_os = "macos") {
                "Library/Application Support/Cursor/User"
            } else {
                ".config/Cursor/User"
            }),
            // Also Insiders' and VSCodium's (see `Config::roots`).
            Source::CopilotChat => Some(if cfg!(target_os = "macos") {
                "Library/Application Support/Code/User"
            } else {
                ".config/Code/User"
            }),
            // The XDG data folder on macOS too.
            Source::OpenCode => Some(".local/share/opencode"),
            Source::Goose => Some(".local/share/goose/sessions"),
            Source::CursorAgent => Some(".cursor/projects"),
        }
    }

    /// Which files of its folder are transcripts.
    fn is_transcript(self, rel: &Path) -> bool {
        let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        match self {
            Source::ClaudeCode => name.ends_with(".jsonl"),
            // `sessions/YYYY/MM/DD/` or `archived_sessions/`; older rollouts compressed to `.jsonl.zst`.
            Source::Codex => {
                name.starts_with("rollout-")
                    && (name.ends_with(".jsonl") || name.ends_with(".jsonl.zst"))
            }
            // `<project hash or slug>/chats/<session>.json` or `.jsonl`.
            Source::GeminiCli => {
                let in_chats = rel
                    .parent()
                    .and_then(|p| p.file_name())
                    .is_some_and(|p| p == "chats");
                in_chats
                    && rel.components().count() == 3
                    && (name.ends_with(".json") || name.ends_with(".jsonl"))
            }
            Source::Aider => name == aider::FILE_NAME,
            // `sessions.json` is Continue's index of sessions, not a session.
            Source::Continue => {
                rel.components().count() == 1 && name.ends_with(".json") && name != "sessions.json"
            }
            // `<task id>/api_conversation_history.json`.
            Source::Cline | Source::RooCode => {
                rel.components().count() == 2 && name == cline::FILE_NAME
            }
            // `<encoded project path>/chats/<session>.jsonl`, or `chats/archive/`.
            Source::QwenCode => {
                let dirs: Vec<_> = rel
                    .parent()
                    .map(|p| p.components().map(|c| c.as_os_str()).collect())
                    .unwrap_or_default();
                name.ends_with(".jsonl")
                    && (dirs.len() == 2 && dirs[1] == "chats"
                        || dirs.len() == 3 && dirs[1] == "chats" && dirs[2] == "archive")
            }
            // `<encoded cwd>/<session id>/updates.jsonl` or `chat_history.jsonl`.
            Source::GrokBuild => {
                rel.components().count() == 3
                    && (name == grok::UPDATES || name == grok::CHAT_HISTORY)
            }
            // `<session id>.jsonl` (beside its `<session id>.json` header).
            Source::Kiro => rel.components().count() == 1 && name.ends_with(".jsonl"),
            Source::Amp => {
                rel.components().count() == 1 && name.starts_with("T-") && name.ends_with(".json")
            }
            // `globalStorage/state.vscdb`, and `workspaceStorage/<hash>/state.vscdb` (the older chat panel).
            Source::Cursor => {
                let parts: Vec<_> = rel.components().map(|c| c.as_os_str()).collect();
                name == "state.vscdb"
                    && match parts.as_slice() {
                        [g, _] => *g == "globalStorage",
                        [w, _, _] => *w == "workspaceStorage",
                        _ => false,
                    }
            }
            // `workspaceStorage/<workspace>/chatSessions/<id>.json[l]`,
            // `globalStorage/emptyWindowChatSessions/<id>.json[l]`.
            Source::CopilotChat => {
                let parts: Vec<_> = rel.components().map(|c| c.as_os_str()).collect();
                let session = name.ends_with(".json") || name.ends_with(".jsonl");
                session
                    && match parts.as_slice() {
                        [w, _, c, _] => *w == "workspaceStorage" && *c == "chatSessions",
                        [g, e, _] => *g == "globalStorage" && *e == "emptyWindowChatSessions",
                        _ => false,
                    }
            }
            // `opencode.db` / `opencode-<channel>.db`, or the older tree's
            // `storage/session/<project>/<session>.json`.
            Source::OpenCode => {
                let parts: Vec<_> = rel.components().map(|c| c.as_os_str()).collect();
                match parts.as_slice() {
                    [_] => name.starts_with("opencode") && name.ends_with(".db"),
                    [st, se, _, _] => {
                        *st == "storage" && *se == "session" && name.ends_with(".json")
                    }
                    _ => false,
                }
            }
            Source::Goose => rel == Path::new("sessions.db"),
            // `<encoded working folder>/agent-transcripts/**/<chat id>.jsonl`.
            Source::CursorAgent => {
                name.ends_with(".jsonl")
                    && rel
                        .components()
                        .nth(1)
                        .is_some_and(|c| c.as_os_str() == "agent-transcripts")
            }
        }
    }

    /// Whether a transcript file of the source is a SQLite database (read through a copy, see [`db_file`]).
    fn is_db(self, path: &Path) -> bool {
        match self {
            Source::Cursor | Source::Goose => true,
            // `OPENCODE_DB` may name a file of any name; the older tree's files are JSON.
            Source::OpenCode => path.extension().is_none_or(|e| e != "json"),
            _ => false,
        }
    }

    fn whole_file(self) -> bool {
        matches!(
            self,
            Source::GeminiCli
                | Source::Continue
                | Source::Cline
                | Source::RooCode
                | Source::GrokBuild
                | Source::Kiro
                | Source::Amp
                | Source::CopilotChat
                | Source::OpenCode
        )
    }
}

/// Where to look, for one run.
#[derive(Debug, Clone)]
pub struct Config {
    /// The home folder the default paths are under.
    pub home: PathBuf,
    /// Paths replacing a source's default folder.
    pub paths: BTreeMap<Source, PathBuf>,
    /// Folders whose `.aider.chat.history.md` is read.
    pub aider_folders: Vec<PathBuf>,
    /// How long a line-format file must be unchanged before a last block that has no successor yet is taken
    /// (aider's Markdown, where a reply has no end marker).
    pub settle: Duration,
    /// The environment variables of [`ENV`] that were set where the config was built: a tool's own override
    /// of where it keeps its history (set by whoever builds the config — the CLI, `serve` — so tests set them
    /// explicitly).
    pub env: BTreeMap<String, String>,
}

/// The environment variables the tools themselves read to move where they keep their history: Claude Code's
/// `CLAUDE_CONFIG_DIR` (instead of `~/.claude`), Codex CLI's `CODEX_HOME` (instead of `~/.codex`), Qwen Code's
/// `QWEN_RUNTIME_DIR` (instead of `~/.qwen`), Grok Build's `GROK_HOME` (instead of `~/.grok`), `XDG_CONFIG_HOME`
/// (instead of `~/.config`: the VS Code family's and Cursor's user folders on Linux), `XDG_DATA_HOME` (instead of
/// `~/.local/share`: Amp, OpenCode, Goose), `OPENCODE_DB` (OpenCode's database file), `GOOSE_PATH_ROOT` (all of
/// Goose's folders), `CURSOR_CONFIG_DIR` (Cursor's agent transcripts).
pub const ENV: &[&str] = &[
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "QWEN_RUNTIME_DIR",
    "GROK_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "OPENCODE_DB",
    "GOOSE_PATH_ROOT",
    "CURSOR_CONFIG_DIR",
];

impl Config {
    pub fn new(home: PathBuf) -> Config {
        Config {
            home,
            paths: BTreeMap::new(),
            aider_folders: Vec::new(),
            settle: Duration::from_secs(30),
            env: BTreeMap::new(),
        }
    }

    /// `env` filled from `get` (normally `std::env::var_os`) for each of [`ENV`]; empty values are ignored.
    pub fn with_tool_env(mut self, get: impl Fn(&str) -> Option<std::ffi::OsString>) -> Config {
        for k in ENV {
            if let Some(v) = get(k).filter(|v| !v.is_empty()) {
                self.env
                    .insert((*k).to_owned(), v.to_string_lossy().into_owned());
            }
        }
        self
    }

    /// An extension's folder in the user folder of each VS Code-family editor found on this machine (VS Code,
    /// Insiders, VSCodium, Cursor, Windsurf), or of VS Code alone when none is.
    fn code_extension_dirs(&self, extension: &str) -> Vec<PathBuf> {
        let bases = [
            self.tool_dir("XDG_CONFIG_HOME", ".config"),
            self.home.join("Library/Application Support"),
            self.home.join("AppData/Roaming"),
        ];
        let hosts = ["Code", "Code - Insiders", "VSCodium", "Cursor", "Windsurf"];
        let tail = |b: &Path, h: &str| {
            b.join(h)
                .join("User/globalStorage")
                .join(extension)
                .join("tasks")
        };
        let found: Vec<PathBuf> = bases
            .iter()
            .flat_map(|b| hosts.iter().map(move |h| (b, *h)))
            .filter(|(b, h)| b.join(h).join("User").is_dir())
            .map(|(b, h)| tail(b, h))
            .collect();
        if !found.is_empty() {
            return found;
        }
        let base = if cfg!(target_os = "macos") {
            &bases[1]
        } else if cfg!(windows) {
            &bases[2]
        } else {
            &bases[0]
        };
        vec![tail(base, "Code")]
    }

    /// A tool's own folder: `var` when it is set, else `default` under the home folder.
    fn tool_dir(&self, var: &str, default: &str) -> PathBuf {
        self.env
            .get(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| self.home.join(default))
    }

    /// The settings a corpus keeps (`personkit harvest enable --path`, `add-folder`) applied to this config;
    /// returns the enabled sources.
    pub fn load(&mut self, conn: &Connection) -> Result<Vec<Source>, StorageError> {
        let mut enabled = Vec::new();
        for row in state::sources(conn)? {
            let Some(s) = Source::parse(&row.name) else {
                continue;
            };
            if let Some(p) = row.path {
                self.paths.entry(s).or_insert_with(|| PathBuf::from(p));
            }
            if row.enabled {
                enabled.push(s);
            }
        }
        for f in state::folders(conn)? {
            let p = PathBuf::from(f);
            if !self.aider_folders.contains(&p) {
                self.aider_folders.push(p);
            }
        }
        enabled.sort();
        Ok(enabled)
    }

    /// The folders a source reads.
    pub fn roots(&self, s: Source) -> Vec<PathBuf> {
        if let Some(p) = self.paths.get(&s) {
            return vec![p.clone()];
        }
        match s {
            Source::ClaudeCode => vec![
                self.tool_dir("CLAUDE_CONFIG_DIR", ".claude")
                    .join("projects"),
            ],
            Source::Codex => {
                let base = self.tool_dir("CODEX_HOME", ".codex");
                vec![base.join("sessions"), base.join("archived_sessions")]
            }
            Source::Cline => self.code_extension_dirs(cline::CLINE_EXTENSION),
            Source::RooCode => self.code_extension_dirs(cline::ROO_EXTENSION),
            Source::QwenCode => vec![self.tool_dir("QWEN_RUNTIME_DIR", ".qwen").join("projects")],
            Source::GrokBuild => vec![self.tool_dir("GROK_HOME", ".grok").join("sessions")],
            Source::Amp => vec![
                self.tool_dir("XDG_DATA_HOME", ".local/share")
                    .join("amp/threads"),
            ],
            _ => match self.tool_roots(s) {
                Some(r) => r,
                None => match s.default_dir() {
                    Some(d) => vec![self.home.join(d)],
                    None => self.aider_folders.clone(),
                },
            },
        }
    }

    /// A source's folders as the tool's own environment variables move them, or when it has several.
    fn tool_roots(&self, s: Source) -> Option<Vec<PathBuf>> {
        let var = |k: &str| self.env.get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        // Electron apps keep their user folder under XDG_CONFIG_HOME on Linux.
        let app_data = || {
            if cfg!(target_os = "macos") {
                self.home.join("Library/Application Support")
            } else {
                var("XDG_CONFIG_HOME").unwrap_or_else(|| self.home.join(".config"))
            }
        };
        match s {
            Source::Cursor => Some(vec![app_data().join("Cursor/User")]),
            Source::CopilotChat => Some(
                ["Code", "Code - Insiders", "VSCodium"]
                    .iter()
                    .map(|app| app_data().join(app).join("User"))
                    .collect(),
            ),
            Source::OpenCode => {
                let data = var("XDG_DATA_HOME").map_or_else(
                    || self.home.join(".local/share/opencode"),
                    |x| x.join("opencode"),
                );
                let mut roots = vec![data.clone()];
                // OPENCODE_DB: a file, absolute or relative to the data folder (`:memory:` keeps nothing).
                if let Some(db) = self
                    .env
                    .get("OPENCODE_DB")
                    .filter(|v| !v.is_empty() && *v != ":memory:")
                {
                    let p = Path::new(db);
                    roots.push(if p.is_absolute() {
                        p.to_path_buf()
                    } else {
                        data.join(p)
                    });
                }
                Some(roots)
            }
            Source::CursorAgent => Some(vec![
                var("CURSOR_CONFIG_DIR")
                    .unwrap_or_else(|| self.home.join(".cursor"))
                    .join("projects"),
            ]),
            Source::Goose => Some(vec![match (var("GOOSE_PATH_ROOT"), var("XDG_DATA_HOME")) {
                (Some(root), _) => root.join("data/sessions"),
                (None, Some(x)) => x.join("goose/sessions"),
                (None, None) => self.home.join(".local/share/goose/sessions"),
            }]),
            _ => None,
        }
    }

    /// Every transcript file of a source, sorted.
    pub fn files(&self, s: Source) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for root in self.roots(s) {
            if root.is_file() {
                out.push(root);
                continue;
            }
            let depth = if s == Source::Aider { 1 } else { 8 };
            for e in walkdir::WalkDir::new(&root)
                .max_depth(depth)
                .follow_links(false)
                .into_iter()
                .filter_map(Result::ok)
            {
                if !e.file_type().is_file() {
                    continue;
                }
                if let Ok(rel) = e.path().strip_prefix(&root)
                    && s.is_transcript(rel)
                {
                    out.push(e.path().to_path_buf());
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

/// What one run did for one source.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SourceReport {
    pub source: String,
    pub surface: String,
    pub roots: Vec<String>,
    /// Transcript files found.
    pub files: u64,
    /// Files with something new (read from where the last run stopped, or whole).
    pub files_read: u64,
    /// Files found replaced or truncated since the last run, read again from the start.
    pub files_replaced: u64,
    /// Files read before that this run found deleted (their threads are now the only copy).
    pub files_gone: u64,
    /// Turns handed to storage, and what storage did with them.
    pub turns: u64,
    pub stored: u64,
    pub duplicate: u64,
    pub rejected: u64,
    pub rejected_by_reason: BTreeMap<String, u64>,
    /// Records the tool keeps that are not turns (metadata, progress, duplicated events), per type.
    pub records_skipped: BTreeMap<String, u64>,
    /// Record or block types not understood, per type: each kept as a `[unsupported: …]` placeholder turn.
    pub unknown: BTreeMap<String, u64>,
    /// What became of every record read: `read` = `to_turns` + `skipped` + `problems` + `silent`.
    pub records: RecordTally,
    pub problems: Vec<Problem>,
}

/// What a run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub started_at: String,
    pub sources: Vec<SourceReport>,
}

impl Report {
    pub fn stored(&self) -> u64 {
        self.sources.iter().map(|s| s.stored).sum()
    }
    pub fn problems(&self) -> usize {
        self.sources.iter().map(|s| s.problems.len()).sum()
    }
}

/// How far a run is, for a progress bar.
#[derive(Debug, Clone)]
pub struct Progress {
    pub source: Source,
    pub files_done: u64,
    pub files_total: u64,
}

/// Harvests `sources` (the enabled ones, normally) once: new turns of every transcript stored, file states
/// and each source's run recorded in the corpus.
pub fn run(
    conn: &mut Connection,
    config: &Config,
    sources: &[Source],
    opts: &Options,
    now: OffsetDateTime,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report, ImportError> {
    let mut report = Report {
        started_at: fmt_time(now),
        sources: Vec::new(),
    };
    let opts = Options {
        path: identity::Path::Harvest,
        client_name: "personkit-harvest".into(),
        ..opts.clone()
    };
    for &source in sources {
        let files = config.files(source);
        let mut sr = SourceReport {
            source: source.name().into(),
            surface: source.surface(),
            roots: config
                .roots(source)
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            files: files.len() as u64,
            ..SourceReport::default()
        };
        let mut sink = Sink::new(conn, &opts, now)?;
        for (i, f) in files.iter().enumerate() {
            progress(Progress {
                source,
                files_done: i as u64,
                files_total: files.len() as u64,
            });
            harvest_file(&mut sink, &mut sr, source, f, config, now)?;
        }
        // A file read before and now gone was deleted by its tool: what it held is the corpus's only copy.
        for known in
            state::present_paths(sink.connection(), source.name()).map_err(StorageError::from)?
        {
            let p = Path::new(&known);
            if !files.iter().any(|f| f == p) && !p.exists() {
                state::mark_gone(sink.connection(), source.name(), &known, now)
                    .map_err(StorageError::from)?;
                sr.files_gone += 1;
            }
        }
        let s = &sink.summary;
        sr.turns = s.turns;
        sr.stored = s.stored;
        sr.duplicate = s.duplicate;
        sr.rejected = s.rejected;
        sr.rejected_by_reason = s.rejected_by_reason.clone();
        for (k, n) in &s.unknown_content {
            *sr.unknown.entry(k.clone()).or_default() += n;
        }
        let first_problem = sr.problems.first().map(|p| {
            let mut s = p.to_string();
            if sr.problems.len() > 1 {
                s.push_str(&format!(" (and {} more)", sr.problems.len() - 1));
            }
            s
        });
        state::record_run(
            sink.connection(),
            source.name(),
            now,
            sr.files_read,
            sr.stored,
            first_problem.as_deref(),
        )
        .map_err(StorageError::from)?;
        let enabled = state::sources(sink.connection())
            .map_err(StorageError::from)?
            .iter()
            .any(|r| r.name == source.name() && r.enabled);
        save_warnings(sink.connection(), config, source, enabled, Some(now), now)?;
        progress(Progress {
            source,
            files_done: files.len() as u64,
            files_total: files.len() as u64,
        });
        report.sources.push(sr);
    }
    // A tool whose sessions are not harvested may still delete them: its warnings are kept current too.
    for s in Source::ALL {
        if !sources.contains(&s) && retention::setting(config, s).is_some() {
            let row = state::sources(conn).map_err(StorageError::from)?;
            let row = row.iter().find(|r| r.name == s.name());
            let last = row
                .and_then(|r| r.last_run_at.as_deref())
                .and_then(personkit_store::clock::parse_time);
            save_warnings(conn, config, s, row.is_some_and(|r| r.enabled), last, now)?;
        }
    }
    Ok(report)
}

fn save_warnings(
    conn: &Connection,
    config: &Config,
    s: Source,
    enabled: bool,
    last_run: Option<OffsetDateTime>,
    now: OffsetDateTime,
) -> Result<(), StorageError> {
    let w = retention::warnings(conn, config, s, enabled, last_run, now);
    let json = serde_json::to_string(&w).unwrap_or_else(|_| "[]".into());
    state::set_warnings(conn, s.name(), &json).map_err(StorageError::from)?;
    Ok(())
}

/// Saves a file's state and the threads its stored turns went to, in one transaction (one sync to disk per file,
/// not one per row), after its turns were stored.
fn save_state(sink: &mut Sink<'_>, out: &mut Collected, row: &FileRow) -> Result<(), FileError> {
    state::save_file_and_threads(sink.connection(), row, &out.threads)?;
    out.threads.clear();
    Ok(())
}

/// One file's facts from the OS.
struct Stat {
    size: u64,
    mtime_ms: Option<i64>,
    file_id: Option<String>,
    modified: Option<SystemTime>,
}

fn stat(path: &Path) -> std::io::Result<Stat> {
    let m = std::fs::metadata(path)?;
    let modified = m.modified().ok();
    let mtime_ms = modified
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as i64);
    #[cfg(unix)]
    let file_id = {
        use std::os::unix::fs::MetadataExt;
        Some(format!("{}:{}", m.dev(), m.ino()))
    };
    #[cfg(not(unix))]
    let file_id = None;
    Ok(Stat {
        size: m.len(),
        mtime_ms,
        file_id,
        modified,
    })
}

/// A SQLite file's facts with its `-wal`'s: the sizes added, the later modification time. A commit changes the
/// one or the other.
fn db_stat(path: &Path) -> std::io::Result<Stat> {
    let mut st = stat(path)?;
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    if let Ok(w) = stat(Path::new(&wal)) {
        st.size += w.size;
        st.mtime_ms = st.mtime_ms.max(w.mtime_ms);
        st.modified = st.modified.max(w.modified);
    }
    Ok(st)
}

/// sha256 (hex) of a file's first `n` bytes (fewer when it is shorter).
fn prefix_hash(path: &Path, n: u64) -> std::io::Result<String> {
    let mut buf = Vec::new();
    File::open(path)?.take(n).read_to_end(&mut buf)?;
    Ok(hex(&Sha256::digest(&buf)))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

const PREFIX: u64 = 4096;

/// Turns of one file gathered before they are stored, per conversation, in order of first appearance.
#[derive(Debug, Default)]
pub struct Collected {
    convs: Vec<SourceConversation>,
    turns: usize,
    /// Turns pushed since this was made (not reset by storing), for [`Notes::record`].
    pushed: u64,
    /// Threads stored to and not yet recorded against the file ([`save_state`]).
    threads: Vec<String>,
}

impl Collected {
    /// Adds a turn to conversation `id` (made with `title` when new; a later title replaces an earlier one).
    pub fn push(&mut self, source: Source, id: &str, title: Option<&str>, turn: NetTurn) {
        let i = match self.convs.iter().position(|c| c.conversation_id == id) {
            Some(i) => i,
            None => {
                self.convs.push(SourceConversation {
                    surface: source.surface(),
                    conversation_id: id.to_owned(),
                    title: None,
                    url: None,
                    updated_at_ms: None,
                    turns: Vec::new(),
                    unreadable: Default::default(),
                });
                self.convs.len() - 1
            }
        };
        let c = &mut self.convs[i];
        if let Some(t) = title.filter(|t| !t.trim().is_empty()) {
            c.title = Some(t.to_owned());
        }
        if let Some(at) = turn.created_at_ms {
            c.updated_at_ms = Some(c.updated_at_ms.map_or(at, |u| u.max(at)));
        }
        c.turns.push(turn);
        self.turns += 1;
        self.pushed += 1;
    }

    pub fn len(&self) -> usize {
        self.turns
    }

    /// Moves what `other` gathered after what this one has.
    fn append(&mut self, other: Collected) {
        self.turns += other.turns;
        self.pushed += other.pushed;
        self.convs.extend(other.convs);
    }

    /// A hash of what was gathered and what the reading reported: equal when a source gave the same again.
    fn fingerprint(&self, notes: &Notes) -> String {
        let mut h = Sha256::new();
        for c in &self.convs {
            h.update(c.conversation_id.as_bytes());
            h.update(c.title.as_deref().unwrap_or_default().as_bytes());
            for t in &c.turns {
                h.update(serde_json::to_vec(t).unwrap_or_default());
            }
        }
        h.update(format!("{:?}{:?}", notes.skipped, notes.problems).as_bytes());
        hex(&h.finalize())
    }

    pub fn is_empty(&self) -> bool {
        self.turns == 0
    }

    /// Stores what was gathered; `file_ms` (the file's modification time) stands for the time of turns whose
    /// source records none.
    /// Stores what was gathered; the threads its turns went to are kept for [`save_state`], which records them
    /// with the file's state in one transaction.
    fn store(&mut self, sink: &mut Sink<'_>, file_ms: Option<i64>) -> Result<(), StorageError> {
        for mut c in std::mem::take(&mut self.convs) {
            if c.updated_at_ms.is_none() {
                c.updated_at_ms = file_ms;
            }
            sink.put(&c)?;
            let t = identity_thread(&c.surface, &c.conversation_id);
            if !self.threads.contains(&t) {
                self.threads.push(t);
            }
        }
        self.turns = 0;
        sink.flush()
    }
}

fn identity_thread(surface: &str, conversation_id: &str) -> String {
    personkit_shared::ids::thread_id(surface, conversation_id)
        .hyphenated()
        .to_string()
}

/// What a parser reports besides turns.
#[derive(Debug, Default)]
pub struct Notes {
    pub skipped: BTreeMap<String, u64>,
    pub problems: Vec<(Option<u64>, String)>,
    /// What became of each record read through [`Notes::record`].
    pub records: RecordTally,
    skips: u64,
}

/// What became of the records (lines, or a whole-file format's messages) a run read. Each record counts once,
/// under the first that applies: it gave a turn, it was skipped for a named reason, it was reported as a problem —
/// or none of these, `silent`, which is itself reported as a problem naming the record, so no record is ever
/// dropped without a word.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RecordTally {
    pub read: u64,
    pub to_turns: u64,
    pub skipped: u64,
    pub problems: u64,
    pub silent: u64,
}

impl RecordTally {
    fn add(&mut self, o: RecordTally) {
        self.read += o.read;
        self.to_turns += o.to_turns;
        self.skipped += o.skipped;
        self.problems += o.problems;
        self.silent += o.silent;
    }
}

impl Notes {
    /// Takes in what another read reported.
    fn absorb(&mut self, o: Notes) {
        for (k, n) in o.skipped {
            *self.skipped.entry(k).or_default() += n;
        }
        self.problems.extend(o.problems);
        self.records.add(o.records);
        self.skips += o.skips;
    }

    pub fn skip(&mut self, what: &str) {
        *self.skipped.entry(what.to_owned()).or_default() += 1;
        self.skips += 1;
    }

    /// Reads one record through `read` and accounts for it (see [`RecordTally`]); `line` and `what` name the
    /// record in the problem a silent one raises (a line number, or for a whole-file format its place, e.g.
    /// `message 12`).
    pub fn record<R>(
        &mut self,
        out: &mut Collected,
        line: Option<u64>,
        what: &dyn Fn() -> String,
        read: impl FnOnce(&mut Collected, &mut Notes) -> R,
    ) -> R {
        let (turns, skips, problems) = (out.pushed, self.skips, self.problems.len());
        let r = read(out, self);
        self.records.read += 1;
        if out.pushed > turns {
            self.records.to_turns += 1;
        } else if self.skips > skips {
            self.records.skipped += 1;
        } else if self.problems.len() > problems {
            self.records.problems += 1;
        } else {
            self.records.silent += 1;
            self.problems.push((
                line,
                format!(
                    "{} gave no turn and no reason to skip it; reported so that nothing is lost silently",
                    what()
                ),
            ));
        }
        r
    }
}

/// A turn of a harvested transcript, with the fields every source sets.
pub fn turn(source: Source, key: &str, parent: Option<&str>, role: Role) -> NetTurn {
    NetTurn {
        parent_key: parent.map(str::to_owned),
        ..NetTurn::empty(source.surface(), key.to_owned(), role)
    }
}

/// A placeholder turn for a record type a parser does not know: kept, marked and counted, never dropped.
pub fn placeholder(source: Source, key: &str, parent: Option<&str>, what: &str) -> NetTurn {
    // The type name comes from the file: cut short and stripped of control characters before it is shown.
    let what = personkit_shared::wire::quote_safely(what, 64);
    let what = what.as_str();
    let mut t = turn(source, key, parent, Role::System);
    t.text =
        personkit_shared::turn_text::unsupported(&format!("{} record {what:?}", source.name()));
    t.unknown.push(format!("{}:{what}", source.name()));
    t
}

/// Tool input and output longer than this are cut (with a marker saying how much), so one huge tool result
/// does not make its whole turn too large to store.
pub const MAX_TOOL_TEXT: usize = 32 * 1024;

pub fn cut(s: &str) -> String {
    if s.len() <= MAX_TOOL_TEXT {
        return s.to_owned();
    }
    let mut end = MAX_TOOL_TEXT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[… {} more bytes cut]", &s[..end], s.len() - end)
}

/// Text of a JSON value that may be a string, a list of `{type: text, text}` parts, or something else (shown as
/// JSON).
pub fn text_of(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p {
                Value::String(s) => s.clone(),
                Value::Object(o) => match o.get("text").and_then(Value::as_str) {
                    Some(t) => t.to_owned(),
                    None => {
                        let kind = o.get("type").and_then(Value::as_str).unwrap_or("part");
                        personkit_shared::turn_text::note(kind, "")
                    }
                },
                other => other.to_string(),
            })
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n\n"),
        other => other.to_string(),
    }
}

/// RFC 3339 text → milliseconds.
pub fn time_ms(v: Option<&Value>) -> Option<i64> {
    personkit_shared::time::parse_rfc3339(v?.as_str()?)
}

/// A parser of a line format: one line (parsed JSON, or for aider the raw text) at a time, with the state it
/// carries between runs in `meta`.
pub trait LineParser {
    fn line(
        &mut self,
        meta: &mut Map<String, Value>,
        at: LineAt<'_>,
        v: Value,
        out: &mut Collected,
        notes: &mut Notes,
    );
}

/// Where a line is: its byte offset and 1-based number in the file, and the file.
#[derive(Debug, Clone, Copy)]
pub struct LineAt<'a> {
    pub offset: u64,
    pub line: u64,
    pub file: &'a Path,
}

fn problem(file: &Path, line: Option<u64>, message: String) -> Problem {
    Problem {
        file: file.display().to_string(),
        conversation_id: None,
        index: None,
        line: line.map(|l| l as usize),
        column: None,
        message,
    }
}

fn harvest_file(
    sink: &mut Sink<'_>,
    sr: &mut SourceReport,
    source: Source,
    path: &Path,
    config: &Config,
    now: OffsetDateTime,
) -> Result<(), ImportError> {
    let st = match if source.is_db(path) {
        db_stat(path)
    } else {
        stat(path)
    } {
        Ok(s) => s,
        Err(e) => {
            sr.problems
                .push(problem(path, None, format!("cannot read the file: {e}")));
            return Ok(());
        }
    };
    let key = path.display().to_string();
    let prev = state::file(sink.connection(), source.name(), &key).map_err(StorageError::from)?;
    let unchanged = prev
        .as_ref()
        .is_some_and(|p| p.size == st.size && p.mtime_ms == st.mtime_ms && p.file_id == st.file_id);
    if unchanged {
        return Ok(());
    }
    let compressed = path.extension().is_some_and(|e| e == "zst");
    let res = if source.is_db(path) {
        db_file(sink, sr, source, path, &st, prev, now)
    } else if source.whole_file() {
        whole_file(sink, sr, source, path, &st, prev, now)
    } else if compressed {
        compressed_line_file(sink, sr, source, path, &st, prev, now)
    } else {
        line_file(sink, sr, source, path, &st, prev, config, now)
    };
    match res {
        Ok(()) => Ok(()),
        Err(FileError::Io(e)) => {
            sr.problems.push(problem(
                path,
                None,
                format!("cannot read the file: {e}; it will be tried again on the next run"),
            ));
            Ok(())
        }
        Err(FileError::Storage(e)) => Err(ImportError::Storage(e)),
    }
}

enum FileError {
    Io(std::io::Error),
    Storage(StorageError),
}

impl From<std::io::Error> for FileError {
    fn from(e: std::io::Error) -> FileError {
        FileError::Io(e)
    }
}

impl From<StorageError> for FileError {
    fn from(e: StorageError) -> FileError {
        FileError::Storage(e)
    }
}

impl From<personkit_store::DbError> for FileError {
    fn from(e: personkit_store::DbError) -> FileError {
        FileError::Storage(e.into())
    }
}

fn merge_notes(sr: &mut SourceReport, path: &Path, notes: Notes) {
    sr.records.add(notes.records);
    for (k, n) in notes.skipped {
        *sr.records_skipped.entry(k).or_default() += n;
    }
    for (line, m) in notes.problems {
        sr.problems.push(problem(path, line, m));
    }
}

/// The largest whole-file transcript read (a Gemini CLI or Continue session is kilobytes to a few megabytes).
const MAX_WHOLE_FILE: u64 = 256 * 1024 * 1024;

/// A file read whole: its bytes and their sha256, the state row to update, and whether the bytes are those read
/// last time.
struct Whole {
    bytes: Vec<u8>,
    hash: String,
    row: FileRow,
    same: bool,
}

/// Reads a whole-file transcript (`what` names it in the problem when it is over [`MAX_WHOLE_FILE`]: `None`).
fn read_whole(
    sr: &mut SourceReport,
    source: Source,
    path: &Path,
    st: &Stat,
    prev: Option<FileRow>,
    what: &str,
) -> Result<Option<Whole>, FileError> {
    if st.size > MAX_WHOLE_FILE {
        sr.problems.push(problem(
            path,
            None,
            format!(
                "the file is {} MB, more than {what} can be ({} MB); skipped",
                st.size >> 20,
                MAX_WHOLE_FILE >> 20
            ),
        ));
        return Ok(None);
    }
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let hash = hex(&Sha256::digest(&bytes));
    let same = prev
        .as_ref()
        .is_some_and(|p| p.prefix_hash.as_deref() == Some(hash.as_str()));
    let row = prev.unwrap_or_else(|| FileRow {
        source: source.name().into(),
        path: path.display().to_string(),
        meta: "{}".into(),
        ..FileRow::default()
    });
    Ok(Some(Whole {
        bytes,
        hash,
        row,
        same,
    }))
}

fn whole_file(
    sink: &mut Sink<'_>,
    sr: &mut SourceReport,
    source: Source,
    path: &Path,
    st: &Stat,
    prev: Option<FileRow>,
    now: OffsetDateTime,
) -> Result<(), FileError> {
    let Some(Whole {
        bytes,
        hash,
        mut row,
        same,
    }) = read_whole(sr, source, path, st, prev, "a session file")?
    else {
        return Ok(());
    };
    let mut out = Collected::default();
    if !same {
        let mut notes = Notes::default();
        let parsed = match source {
            Source::GeminiCli => gemini_cli::read(path, &bytes, &mut out, &mut notes),
            Source::Continue => continue_dev::read(path, &bytes, &mut out, &mut notes),
            Source::Cline | Source::RooCode => {
                cline::read(source, path, &bytes, &mut out, &mut notes)
            }
            Source::GrokBuild => grok::read(path, &bytes, &mut out, &mut notes),
            Source::Kiro => kiro::read(path, &bytes, &mut out, &mut notes),
            Source::Amp => amp::read(path, &bytes, &mut out, &mut notes),
            Source::CopilotChat => copilot_chat::read(path, &bytes, &mut out, &mut notes),
            Source::OpenCode => opencode::read_tree(path, &bytes, &mut out, &mut notes),
            _ => Ok(()),
        };
        if let Err(why) = parsed {
            // Most often the tool is writing the file right now: keep the old state, try again next run.
            merge_notes(sr, path, notes);
            sr.problems.push(problem(
                path,
                None,
                format!(
                    "{why}; the file may be being written — it will be read again on the next run"
                ),
            ));
            return Ok(());
        }
        merge_notes(sr, path, notes);
        let before = sink.summary.stored;
        out.store(sink, st.mtime_ms)?;
        sr.files_read += 1;
        row.turns += sink.summary.stored - before;
    }
    row.file_id.clone_from(&st.file_id);
    row.size = bytes.len() as u64;
    row.mtime_ms = st.mtime_ms;
    row.read_to = bytes.len() as u64;
    row.prefix_hash = Some(hash);
    row.read_at = fmt_time(now);
    save_state(sink, &mut out, &row)?;
    Ok(())
}

/// The most sessions read from one tool database.
const MAX_DB_SESSIONS: usize = 100_000;

/// The ids of the sessions of a tool database, oldest first: rows of `sessions` (at most [`MAX_DB_SESSIONS`], more
/// reported), once the database is known to hold `messages` (else `not_ours`, the database is not the tool's).
pub fn db_session_ids(
    db: &personkit_store::foreign::ForeignDb,
    notes: &mut Notes,
    sessions: &'static str,
    messages: &str,
    order: &'static [&'static str],
    not_ours: &str,
) -> Result<Vec<String>, String> {
    use personkit_store::foreign::{Cell, Select};
    if !db.has_table(messages).map_err(|e| e.to_string())? {
        return Err(not_ours.to_owned());
    }
    let rows = db
        .rows(&Select {
            table: sessions,
            columns: &["id"],
            order,
            limit: MAX_DB_SESSIONS + 1,
            ..Select::default()
        })
        .map_err(|e| e.to_string())?;
    if rows.len() > MAX_DB_SESSIONS {
        notes.problems.push((
            None,
            format!("more than {MAX_DB_SESSIONS} sessions; the first {MAX_DB_SESSIONS} were read"),
        ));
    }
    Ok(rows
        .iter()
        .take(MAX_DB_SESSIONS)
        .filter_map(|r| match r.first()? {
            Cell::Int(i) => Some(i.to_string()),
            c => c.text().map(str::to_owned),
        })
        .collect())
}

/// The largest SQLite history file read (with its `-wal`): a Cursor state database of years of use is a few GB.
const MAX_DB: u64 = 8 * 1024 * 1024 * 1024;

/// A SQLite source, read whole through a private copy whenever the file or its `-wal` changed: each session whose
/// turns (and what reading it reported) hash differently from the last read is sent whole (the store answers what it
/// has as duplicate), in batches of about [`BATCH_TURNS`]. A file that cannot be copied or read (too large, half
/// written when copied, not a database) is a problem, its state left as it was so the next run tries again.
fn db_file(
    sink: &mut Sink<'_>,
    sr: &mut SourceReport,
    source: Source,
    path: &Path,
    st: &Stat,
    prev: Option<FileRow>,
    now: OffsetDateTime,
) -> Result<(), FileError> {
    let retry = |sr: &mut SourceReport, why: String| {
        sr.problems.push(problem(
            path,
            None,
            format!("{why}; it will be read again on the next run"),
        ));
    };
    let db = match ForeignDb::open_copy(path, MAX_DB) {
        Ok(db) => db,
        Err(e) => {
            retry(sr, e.to_string());
            return Ok(());
        }
    };
    let mut notes = Notes::default();
    let sessions = match source {
        Source::Cursor => cursor::sessions(&db, &mut notes),
        Source::OpenCode => opencode::sessions(&db, &mut notes),
        Source::Goose => goose::sessions(&db, &mut notes),
        _ => Ok(Vec::new()),
    };
    let sessions = match sessions {
        Ok(s) => s,
        Err(why) => {
            merge_notes(sr, path, notes);
            retry(sr, why);
            return Ok(());
        }
    };
    let mut row = prev.unwrap_or_else(|| FileRow {
        source: source.name().into(),
        path: path.display().to_string(),
        meta: "{}".into(),
        ..FileRow::default()
    });
    // Each session's fingerprint (of what it gave) as of the last read: a session that gives the same again is
    // not sent to the store a second time.
    let mut meta: Map<String, Value> = serde_json::from_str(&row.meta).unwrap_or_default();
    let old = match meta.remove("sessions") {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let mut seen = Map::new();
    let mut unchanged = 0u64;
    let mut out = Collected::default();
    let before = sink.summary.stored;
    for id in &sessions {
        let mut one = Collected::default();
        let mut n = Notes::default();
        match source {
            Source::Cursor => cursor::session(&db, id, &mut one, &mut n),
            Source::OpenCode => opencode::session(&db, id, &mut one, &mut n),
            Source::Goose => goose::session(&db, id, &mut one, &mut n),
            _ => {}
        }
        let fp = one.fingerprint(&n);
        let same = old.get(id).and_then(Value::as_str) == Some(fp.as_str());
        seen.insert(id.clone(), Value::String(fp));
        if same {
            unchanged += 1;
            continue;
        }
        out.append(one);
        notes.absorb(n);
        if out.len() >= BATCH_TURNS {
            out.store(sink, st.mtime_ms)?;
        }
    }
    out.store(sink, st.mtime_ms)?;
    merge_notes(sr, path, notes);
    if unchanged > 0 {
        *sr.records_skipped
            .entry("sessions unchanged since the last read".into())
            .or_default() += unchanged;
    }
    meta.insert("sessions".into(), Value::Object(seen));
    row.meta = Value::Object(meta).to_string();
    sr.files_read += 1;
    row.turns += sink.summary.stored - before;
    row.file_id.clone_from(&st.file_id);
    row.size = st.size;
    row.mtime_ms = st.mtime_ms;
    row.read_to = st.size;
    row.prefix_hash = None;
    row.read_at = fmt_time(now);
    save_state(sink, &mut out, &row)?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn line_file(
    sink: &mut Sink<'_>,
    sr: &mut SourceReport,
    source: Source,
    path: &Path,
    st: &Stat,
    prev: Option<FileRow>,
    config: &Config,
    now: OffsetDateTime,
) -> Result<(), FileError> {
    let fresh = || FileRow {
        source: source.name().into(),
        path: path.display().to_string(),
        meta: "{}".into(),
        ..FileRow::default()
    };
    let mut row = match prev {
        None => fresh(),
        Some(p) => {
            let replaced = (p.file_id.is_some() && p.file_id != st.file_id)
                || st.size < p.read_to
                || p.prefix_hash.as_deref()
                    != Some(prefix_hash(path, p.read_to.min(PREFIX))?.as_str());
            if replaced {
                sr.files_replaced += 1;
                fresh()
            } else {
                p
            }
        }
    };
    let mut meta: Map<String, Value> = serde_json::from_str(&row.meta).unwrap_or_default();
    // Aider's last block has no end marker: it is taken only once the file has been quiet for `settle`.
    let quiet = st
        .modified
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .is_some_and(|d| d >= config.settle);
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(row.read_to))?;
    let mut reader = BufReader::with_capacity(256 * 1024, file);
    let mut out = Collected::default();
    let mut notes = Notes::default();
    let mut offset = row.read_to;
    let mut line_no = row.lines;
    let mut buf = Vec::new();
    let mut read_any = false;
    let mut aider = aider::Parser::default();
    // What was taken and stored so far: saved after each batch, so a long file is read in bounded memory.
    let checkpoint = |sink: &mut Sink<'_>,
                      out: &mut Collected,
                      row: &mut FileRow,
                      meta: &Map<String, Value>,
                      to: u64,
                      lines: u64|
     -> Result<(), FileError> {
        let before = sink.summary.stored;
        out.store(sink, st.mtime_ms)?;
        row.turns += sink.summary.stored - before;
        row.read_to = to;
        row.lines = lines;
        row.meta = Value::Object(meta.clone()).to_string();
        row.prefix_hash = Some(prefix_hash(path, to.min(PREFIX))?);
        row.file_id.clone_from(&st.file_id);
        row.read_at = fmt_time(now);
        Ok(())
    };
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf)?;
        if n == 0 || buf.last() != Some(&b'\n') {
            // End of file, or a last line still being written: left for the next run.
            break;
        }
        read_any = true;
        line_no += 1;
        let at = LineAt {
            offset,
            line: line_no,
            file: path,
        };
        offset += n as u64;
        if source == Source::Aider {
            // Aider's Markdown is read a block at a time: its lines are not records of their own.
            let text = String::from_utf8_lossy(&buf);
            aider.line(
                &mut meta,
                at,
                Value::String(text.into_owned()),
                &mut out,
                &mut notes,
            );
        } else {
            let text = String::from_utf8_lossy(&buf);
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            json_line(source, &mut meta, at, text, &mut out, &mut notes);
            if out.len() >= BATCH_TURNS {
                checkpoint(sink, &mut out, &mut row, &meta, offset, line_no)?;
                save_state(sink, &mut out, &row)?;
            }
        }
    }
    let (to, lines) = if source == Source::Aider {
        aider.finish(&mut meta, quiet, &mut out, offset, line_no)
    } else {
        (offset, line_no)
    };
    merge_notes(sr, path, notes);
    if read_any {
        sr.files_read += 1;
    }
    checkpoint(sink, &mut out, &mut row, &meta, to, lines)?;
    row.size = st.size;
    // An aider block held back keeps the file "changed", so it is looked at again on the next run.
    row.mtime_ms = if to < st.size && source == Source::Aider {
        None
    } else {
        st.mtime_ms
    };
    save_state(sink, &mut out, &row)?;
    Ok(())
}

/// One line of a JSON-lines format, parsed and handed to its source's parser, accounted as one record.
fn json_line(
    source: Source,
    meta: &mut Map<String, Value>,
    at: LineAt<'_>,
    text: &str,
    out: &mut Collected,
    notes: &mut Notes,
) {
    let line_no = at.line;
    let what = || format!("line {line_no}");
    notes.record(
        out,
        Some(line_no),
        &what,
        |out, notes| match serde_json::from_str::<Value>(text) {
            Ok(v) if v.is_object() => match source {
                Source::ClaudeCode => claude_code::Parser.line(meta, at, v, out, notes),
                Source::Codex => codex::Parser.line(meta, at, v, out, notes),
                Source::QwenCode => qwen_code::Parser.line(meta, at, v, out, notes),
                Source::CursorAgent => cursor_agent::Parser.line(meta, at, v, out, notes),
                _ => {}
            },
            Ok(v) => notes.problems.push((
                Some(line_no),
                format!(
                    "a record must be a JSON object, found {}; skipped",
                    kind(&v)
                ),
            )),
            Err(e) => notes.problems.push((
                Some(line_no),
                format!("not a JSON record ({e}); skipped, the lines after it were read"),
            )),
        },
    );
}

/// The most a compressed transcript may hold once decompressed.
const MAX_DECOMPRESSED: u64 = 512 * 1024 * 1024;

/// Decompresses a zstd file (every frame), at most `MAX_DECOMPRESSED` bytes.
fn unzstd(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut input = bytes;
    let mut out = Vec::new();
    while !input.is_empty() {
        let mut dec = ruzstd::decoding::StreamingDecoder::new(&mut input)
            .map_err(|e| format!("not a zstd file ({e})"))?;
        let room = MAX_DECOMPRESSED - out.len() as u64;
        (&mut dec)
            .take(room + 1)
            .read_to_end(&mut out)
            .map_err(|e| format!("the zstd data is damaged ({e})"))?;
        if out.len() as u64 > MAX_DECOMPRESSED {
            return Err(format!(
                "it decompresses to more than {} MB; skipped",
                MAX_DECOMPRESSED >> 20
            ));
        }
    }
    Ok(out)
}

/// A line format compressed whole (Codex CLI's older rollouts, `.jsonl.zst`): the tool compresses a file it has
/// finished, so it is complete — decompressed (bounded) and read whole when its bytes changed. Offsets are
/// those of the decompressed lines, the same as in the file before it was compressed, so turns read from it
/// then answer as duplicates now.
fn compressed_line_file(
    sink: &mut Sink<'_>,
    sr: &mut SourceReport,
    source: Source,
    path: &Path,
    st: &Stat,
    prev: Option<FileRow>,
    now: OffsetDateTime,
) -> Result<(), FileError> {
    let Some(Whole {
        bytes,
        hash,
        mut row,
        same,
    }) = read_whole(sr, source, path, st, prev, "a compressed session")?
    else {
        return Ok(());
    };
    let mut out = Collected::default();
    if !same {
        let plain = match unzstd(&bytes) {
            Ok(p) => p,
            Err(why) => {
                sr.problems.push(problem(path, None, why));
                return Ok(());
            }
        };
        let mut meta = Map::new();
        let mut notes = Notes::default();
        let mut offset = 0u64;
        let mut line_no = 0u64;
        for raw in plain.split_inclusive(|b| *b == b'\n') {
            line_no += 1;
            let at = LineAt {
                offset,
                line: line_no,
                file: path,
            };
            offset += raw.len() as u64;
            let text = String::from_utf8_lossy(raw);
            let text = text.trim();
            if !text.is_empty() {
                json_line(source, &mut meta, at, text, &mut out, &mut notes);
            }
            if out.len() >= BATCH_TURNS {
                let before = sink.summary.stored;
                out.store(sink, st.mtime_ms)?;
                row.turns += sink.summary.stored - before;
            }
        }
        merge_notes(sr, path, notes);
        let before = sink.summary.stored;
        out.store(sink, st.mtime_ms)?;
        row.turns += sink.summary.stored - before;
        sr.files_read += 1;
        row.lines = line_no;
        row.meta = Value::Object(meta).to_string();
    }
    row.file_id.clone_from(&st.file_id);
    row.size = st.size;
    row.mtime_ms = st.mtime_ms;
    row.read_to = st.size;
    row.prefix_hash = Some(hash);
    row.read_at = fmt_time(now);
    save_state(sink, &mut out, &row)?;
    Ok(())
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

/// The source list with each one's state, for `personkit harvest list`.
#[derive(Debug, Clone, Serialize)]
pub struct SourceStatus {
    pub name: String,
    pub surface: String,
    pub enabled: bool,
    pub paths: Vec<String>,
    /// Whether the (first) path exists on this machine.
    pub found: bool,
    pub last_run_at: Option<String>,
    /// The last problem a run had, prefixed by that run's time.
    pub last_error: Option<String>,
    /// Files known (read at least once) and turns stored from them.
    pub files: u64,
    pub turns: u64,
    /// The tool's own setting that deletes its sessions, when it has one.
    pub retention: Option<retention::Setting>,
    /// When that setting will delete sessions before a harvest could copy them, and what to do.
    pub warnings: Vec<retention::Warning>,
    /// Threads whose every transcript file the tool has deleted: the corpus holds the only copy.
    pub only_copies: u64,
}

pub fn status(conn: &Connection, config: &Config) -> Result<Vec<SourceStatus>, StorageError> {
    let mut cfg = config.clone();
    cfg.load(conn)?;
    let rows = state::sources(conn)?;
    let only = state::only_copies(conn)?;
    let now = OffsetDateTime::now_utc();
    let mut out = Vec::new();
    for s in Source::ALL {
        let row = rows.iter().find(|r| r.name == s.name());
        let paths: Vec<String> = cfg
            .roots(s)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let (files, turns) = state::file_totals(conn, s.name())?;
        out.push(SourceStatus {
            name: s.name().into(),
            surface: s.surface(),
            enabled: row.is_some_and(|r| r.enabled),
            found: cfg.roots(s).iter().any(|p| p.exists()),
            paths,
            last_run_at: row.and_then(|r| r.last_run_at.clone()),
            last_error: row.and_then(|r| r.last_error.clone()),
            files,
            turns,
            retention: retention::setting(&cfg, s),
            warnings: retention::warnings(
                conn,
                &cfg,
                s,
                row.is_some_and(|r| r.enabled),
                row.and_then(|r| r.last_run_at.as_deref())
                    .and_then(personkit_store::clock::parse_time),
                now,
            ),
            only_copies: only.iter().filter(|o| o.source == s.name()).count() as u64,
        });
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_record_is_a_turn_a_skip_a_problem_or_reported_as_silent() {
        let mut out = Collected::default();
        let mut notes = Notes::default();
        let what = || "line 3".to_owned();
        notes.record(&mut out, Some(1), &what, |out, _| {
            out.push(
                Source::Codex,
                "c",
                None,
                turn(Source::Codex, "k1", None, Role::User),
            )
        });
        notes.record(&mut out, Some(2), &what, |_, n| n.skip("codex:state"));
        notes.record(&mut out, Some(3), &what, |_, n| {
            n.problems.push((Some(3), "bad".into()))
        });
        // A parser that takes a record and gives nothing back is caught, not trusted.
        notes.record(&mut out, Some(4), &what, |_, _| {});
        let t = notes.records;
        assert_eq!(
            (t.read, t.to_turns, t.skipped, t.problems, t.silent),
            (4, 1, 1, 1, 1)
        );
        assert_eq!(t.read, t.to_turns + t.skipped + t.problems + t.silent);
        let (line, msg) = notes.problems.last().unwrap();
        assert_eq!(*line, Some(4));
        assert!(msg.starts_with("line 3 gave no turn"), "{msg}");
    }
}
