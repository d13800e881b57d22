//! Harvesters: the transcripts local AI tools keep on this machine, read into the corpus through the same
//! [`Sink`] as official exports (path `harvest`, surface `harvest:<source>`, redacted by the same core rules and
//! user patterns). `docs/import.md` "Harvesters" is the user's side of this module.
//!
//! Each [`Source`] is opt-in (the user enables it; `personkit_store::harvest` keeps that, the paths and how far
//! each file was read). A run walks every enabled source's files and reads only what is new:
//! - **line formats** (Claude Code, Codex CLI, Aider): from the byte offset after the last complete line taken
//!   before; a last line without its newline is left for the next run. A file that shrank, changed device/inode,
//!   or whose first bytes (up to 4 KiB of what was read) no longer hash the same was replaced: it is read again
//!   from the start (what was stored before answers as duplicate).
//! - **whole-file formats** (Gemini CLI, Continue): the tool rewrites the file as the session grows, so a
//!   changed file is read whole and every turn sent again; message ids and content hashes make that idempotent
//!   (only new turns are stored). A file that does not parse (half written) is left for the next run.
//!
//! A file's state is saved only after its turns are stored, so a crash re-reads at most what it had not
//! committed (and the store answers it as duplicate). Parsers never panic on input: a line that is not JSON is a
//! [`Problem`] naming the file and line, a record type they do not know becomes a `[unsupported: …]` placeholder
//! turn counted in the report.

pub mod aider;
pub mod claude_code;
pub mod codex;
pub mod continue_dev;
pub mod gemini_cli;

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
use personkit_store::harvest::{self as state, FileRow};
use personkit_store::ingest::StorageError;
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::{BATCH_TURNS, ImportError, Options, Problem, Sink, SourceConversation};

/// A local AI tool whose transcripts can be harvested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    ClaudeCode,
    Codex,
    GeminiCli,
    Aider,
    Continue,
}

impl Source {
    pub const ALL: [Source; 5] = [
        Source::ClaudeCode,
        Source::Codex,
        Source::GeminiCli,
        Source::Aider,
        Source::Continue,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Source::ClaudeCode => "claude-code",
            Source::Codex => "codex",
            Source::GeminiCli => "gemini-cli",
            Source::Aider => "aider",
            Source::Continue => "continue",
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
        }
    }

    /// Which files of its folder are transcripts.
    fn is_transcript(self, rel: &Path) -> bool {
        let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        match self {
            Source::ClaudeCode => name.ends_with(".jsonl"),
            Source::Codex => name.starts_with("rollout-") && name.ends_with(".jsonl"),
            // `<project hash>/chats/<session>.json` or `.jsonl`.
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
        }
    }

    fn whole_file(self) -> bool {
        matches!(self, Source::GeminiCli | Source::Continue)
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
}

impl Config {
    pub fn new(home: PathBuf) -> Config {
        Config {
            home,
            paths: BTreeMap::new(),
            aider_folders: Vec::new(),
            settle: Duration::from_secs(30),
        }
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
        match s.default_dir() {
            Some(d) => vec![self.home.join(d)],
            None => self.aider_folders.clone(),
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
        progress(Progress {
            source,
            files_done: files.len() as u64,
            files_total: files.len() as u64,
        });
        report.sources.push(sr);
    }
    Ok(report)
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

    pub fn is_empty(&self) -> bool {
        self.turns == 0
    }

    /// Stores what was gathered; `file_ms` (the file's modification time) stands for the time of turns whose
    /// source records none.
    fn store(&mut self, sink: &mut Sink<'_>, file_ms: Option<i64>) -> Result<(), StorageError> {
        for mut c in std::mem::take(&mut self.convs) {
            if c.updated_at_ms.is_none() {
                c.updated_at_ms = file_ms;
            }
            sink.put(&c)?;
        }
        self.turns = 0;
        sink.flush()
    }
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
    let st = match stat(path) {
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
    let res = if source.whole_file() {
        whole_file(sink, sr, source, path, &st, prev, now)
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

fn whole_file(
    sink: &mut Sink<'_>,
    sr: &mut SourceReport,
    source: Source,
    path: &Path,
    st: &Stat,
    prev: Option<FileRow>,
    now: OffsetDateTime,
) -> Result<(), FileError> {
    if st.size > MAX_WHOLE_FILE {
        sr.problems.push(problem(
            path,
            None,
            format!(
                "the file is {} MB, more than a session file can be ({} MB); skipped",
                st.size >> 20,
                MAX_WHOLE_FILE >> 20
            ),
        ));
        return Ok(());
    }
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let hash = hex(&Sha256::digest(&bytes));
    let mut row = prev.clone().unwrap_or_else(|| FileRow {
        source: source.name().into(),
        path: path.display().to_string(),
        meta: "{}".into(),
        ..FileRow::default()
    });
    let same = prev
        .as_ref()
        .is_some_and(|p| p.prefix_hash.as_deref() == Some(hash.as_str()));
    if !same {
        let mut out = Collected::default();
        let mut notes = Notes::default();
        let parsed = match source {
            Source::GeminiCli => gemini_cli::read(path, &bytes, &mut out, &mut notes),
            Source::Continue => continue_dev::read(path, &bytes, &mut out, &mut notes),
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
    state::save_file(sink.connection(), &row)?;
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
    let mut claude = claude_code::Parser;
    let mut codex = codex::Parser;
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
            let what = || format!("line {line_no}");
            notes.record(
                &mut out,
                Some(line_no),
                &what,
                |out, notes| match serde_json::from_str::<Value>(text) {
                    Ok(v) if v.is_object() => match source {
                        Source::ClaudeCode => claude.line(&mut meta, at, v, out, notes),
                        Source::Codex => codex.line(&mut meta, at, v, out, notes),
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
            if out.len() >= BATCH_TURNS {
                checkpoint(sink, &mut out, &mut row, &meta, offset, line_no)?;
                state::save_file(sink.connection(), &row)?;
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
    state::save_file(sink.connection(), &row)?;
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
}

pub fn status(conn: &Connection, config: &Config) -> Result<Vec<SourceStatus>, StorageError> {
    let mut cfg = config.clone();
    cfg.load(conn)?;
    let rows = state::sources(conn)?;
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
        });
    }
    Ok(out)
}
