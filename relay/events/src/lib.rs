//! The events stream's harvesters: what the user *did*, beside what they said. Each [`Source`] reads one kind of
//! local state and writes events through `personkit_store::events` (one content hash per minute bucket, so a
//! re-read writes nothing new):
//!
//! | source | reads | kinds | cadence |
//! |---|---|---|---|
//! | `git` | the repositories the user adds, through the `git` CLI | `git.commit` | 15 min |
//! | `claude-plans` | `~/.claude/plans/*.md`, `TASKS.md`, Claude Code's memory files | `plan.updated`, `tasks.updated`, `memory_file.updated` | 15 min |
//! | `config-state` | AI tools' config files: which models and MCP servers, never keys | `config.state` | 60 min |
//! | `reading-list` | `~/.dotperson/reading-list/inbox.jsonl` | `reading.added` | 15 min |
//! | `screenshots` | a screenshots folder: names, sizes, times (no OCR) | `screenshot.added` | 15 min |
//! | `sessions` | the corpus's own threads | `session.started`, `session.ended`, `thread.started` | 15 min |
//!
//! Every source is off until the user enables it (`personkit events enable <source>`). A pass reads only what is
//! new — per repository the last commit taken, per file its content hash or byte offset, per folder the newest
//! time seen — and saves that only after the events are stored. Text from files and commit messages goes through
//! the capture core's redaction (built-in rules and the user's patterns) and is cut to a size; a line or record
//! that cannot be read is rejected and counted, never a crash. This crate decides what an event is; the store only
//! keeps it.

pub mod config_state;
pub mod files;
pub mod git;
pub mod reading;
pub mod screenshots;
pub mod sessions;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use personkit_shared::capture::Redactor;
use personkit_store::Connection;
use personkit_store::clock::{fmt_time, parse_time};
use personkit_store::events::{self as store, NewEvent, RunCounts};
use serde::Serialize;
use time::OffsetDateTime;

/// A kind of local state the events stream is harvested from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    Git,
    ClaudePlans,
    ConfigState,
    ReadingList,
    Screenshots,
    Sessions,
}

impl Source {
    pub const ALL: [Source; 6] = [
        Source::Git,
        Source::ClaudePlans,
        Source::ConfigState,
        Source::ReadingList,
        Source::Screenshots,
        Source::Sessions,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Source::Git => "git",
            Source::ClaudePlans => "claude-plans",
            Source::ConfigState => "config-state",
            Source::ReadingList => "reading-list",
            Source::Screenshots => "screenshots",
            Source::Sessions => "sessions",
        }
    }

    pub fn parse(s: &str) -> Option<Source> {
        Source::ALL.into_iter().find(|x| x.name() == s)
    }

    /// The `source_surface` of its events (session and thread events carry their thread's surface instead).
    pub fn surface(self) -> String {
        format!("events:{}", self.name())
    }

    /// How often `serve` runs it (the seed's cadences).
    pub fn cadence(self) -> Duration {
        match self {
            Source::ConfigState => Duration::from_secs(60 * 60),
            _ => Duration::from_secs(15 * 60),
        }
    }

    /// What the paths a user adds to it are (`personkit events add-path`), or `None` when it takes none.
    pub fn path_meaning(self) -> Option<&'static str> {
        match self {
            Source::Git => Some("git repositories to read commits from"),
            Source::ClaudePlans => Some("project folders whose TASKS.md and CLAUDE.md are read"),
            Source::ReadingList => Some("the reading list file, instead of the default"),
            Source::Screenshots => Some("the screenshots folder, instead of the default"),
            Source::ConfigState | Source::Sessions => None,
        }
    }
}

/// The environment variables a config reads where it is built (the CLI, `serve`): Claude Code's
/// `CLAUDE_CONFIG_DIR`, Codex CLI's `CODEX_HOME`, `DOTPERSON_SCREENSHOTS_DIR` (the screenshots folder, as the seed
/// names it) and `PERSONKIT_READING_LIST` (the reading list file).
pub const ENV: &[&str] = &[
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "DOTPERSON_SCREENSHOTS_DIR",
    "PERSONKIT_READING_LIST",
];

/// Where to look and how to redact, for one pass.
#[derive(Debug, Clone)]
pub struct Config {
    /// The home folder the default paths are under.
    pub home: PathBuf,
    /// The paths the user added, per source (`event_paths`), plus any given for this pass.
    pub paths: BTreeMap<Source, Vec<PathBuf>>,
    /// The variables of [`ENV`] that were set where the config was built.
    pub env: BTreeMap<String, String>,
    /// The user's redaction patterns (as for imports and transcript harvests).
    pub patterns: Vec<String>,
    /// A session whose last turn is older than this has ended.
    pub session_quiet: Duration,
}

impl Config {
    pub fn new(home: PathBuf) -> Config {
        Config {
            home,
            paths: BTreeMap::new(),
            env: BTreeMap::new(),
            patterns: Vec::new(),
            session_quiet: Duration::from_secs(30 * 60),
        }
    }

    /// `env` filled from `get` (normally `std::env::var_os`) for each of [`ENV`]; empty values are ignored.
    pub fn with_env(mut self, get: impl Fn(&str) -> Option<std::ffi::OsString>) -> Config {
        for k in ENV {
            if let Some(v) = get(k).filter(|v| !v.is_empty()) {
                self.env
                    .insert((*k).to_owned(), v.to_string_lossy().into_owned());
            }
        }
        self
    }

    /// The paths a corpus keeps added to this config; returns the enabled sources.
    pub fn load(&mut self, conn: &Connection) -> Result<Vec<Source>, EventsError> {
        for s in Source::ALL {
            for p in store::paths(conn, s.name())? {
                let p = PathBuf::from(p);
                let list = self.paths.entry(s).or_default();
                if !list.contains(&p) {
                    list.push(p);
                }
            }
        }
        let mut enabled: Vec<Source> = store::sources(conn)?
            .iter()
            .filter(|r| r.enabled)
            .filter_map(|r| Source::parse(&r.name))
            .collect();
        enabled.sort();
        Ok(enabled)
    }

    /// An environment variable of [`ENV`] as a path.
    fn env_path(&self, var: &str) -> Option<PathBuf> {
        self.env
            .get(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }

    /// Claude Code's folder: `CLAUDE_CONFIG_DIR`, else `~/.claude`.
    pub fn claude_dir(&self) -> PathBuf {
        self.env_path("CLAUDE_CONFIG_DIR")
            .unwrap_or_else(|| self.home.join(".claude"))
    }

    /// Codex CLI's folder: `CODEX_HOME`, else `~/.codex`.
    pub fn codex_dir(&self) -> PathBuf {
        self.env_path("CODEX_HOME")
            .unwrap_or_else(|| self.home.join(".codex"))
    }

    fn user_paths(&self, s: Source) -> &[PathBuf] {
        self.paths.get(&s).map_or(&[], Vec::as_slice)
    }

    /// The reading list file: an added path, else `PERSONKIT_READING_LIST`, else
    /// `~/.dotperson/reading-list/inbox.jsonl`.
    pub fn reading_list(&self) -> PathBuf {
        self.user_paths(Source::ReadingList)
            .first()
            .cloned()
            .or_else(|| self.env_path("PERSONKIT_READING_LIST"))
            .unwrap_or_else(|| self.home.join(".dotperson/reading-list/inbox.jsonl"))
    }

    /// The screenshots folder: an added path, else `DOTPERSON_SCREENSHOTS_DIR`, else the system's default
    /// (`~/Desktop` on macOS, `~/Pictures/Screenshots` elsewhere).
    pub fn screenshots_dir(&self) -> PathBuf {
        self.user_paths(Source::Screenshots)
            .first()
            .cloned()
            .or_else(|| self.env_path("DOTPERSON_SCREENSHOTS_DIR"))
            .unwrap_or_else(|| {
                if cfg!(target_os = "macos") {
                    self.home.join("Desktop")
                } else {
                    self.home.join("Pictures/Screenshots")
                }
            })
    }

    /// The places a source reads, for `personkit events sources`.
    pub fn roots(&self, s: Source) -> Vec<PathBuf> {
        match s {
            Source::Git => self.user_paths(s).to_vec(),
            Source::ClaudePlans => {
                let mut v = vec![self.claude_dir(), self.home.join("TASKS.md")];
                v.extend(self.user_paths(s).iter().cloned());
                v
            }
            Source::ConfigState => config_state::files(self)
                .into_iter()
                .map(|(_, p)| p)
                .collect(),
            Source::ReadingList => vec![self.reading_list()],
            Source::Screenshots => vec![self.screenshots_dir()],
            Source::Sessions => Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    #[error("the corpus could not be read or written: {0}")]
    Storage(#[from] personkit_store::DbError),
}

/// What one pass did for one source.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SourceReport {
    pub source: String,
    /// Items with something new: commits, changed files, reading-list lines, screenshots, threads.
    pub read: u64,
    /// Events stored, and those already stored (the same content in the same minute).
    pub stored: u64,
    pub duplicate: u64,
    /// Items that could not be made an event (a line that is not JSON, a file too big), each counted.
    pub rejected: u64,
    /// What went wrong, naming the file, line or repository (never its content).
    pub problems: Vec<String>,
    /// A bound stopped the pass before everything new was read: the next pass goes on.
    pub more: bool,
}

/// What a pass did.
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

/// How far a pass is, for a progress bar.
#[derive(Debug, Clone)]
pub struct Progress {
    pub source: Source,
    pub sources_done: u64,
    pub sources_total: u64,
}

/// One source's pass: the connection, the time, redaction, the report, and the store and cursor calls every
/// source makes.
pub struct Pass<'a> {
    pub conn: &'a Connection,
    pub config: &'a Config,
    pub now: OffsetDateTime,
    pub source: Source,
    pub report: SourceReport,
    redactor: Redactor,
}

impl std::fmt::Debug for Pass<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pass")
            .field("source", &self.source)
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

/// Most bytes of an event's text taken from a file or a message; the rest is cut with a note.
pub const MAX_TEXT: usize = 32 * 1024;

impl<'a> Pass<'a> {
    fn new(conn: &'a Connection, config: &'a Config, now: OffsetDateTime, source: Source) -> Self {
        Pass {
            conn,
            config,
            now,
            source,
            report: SourceReport {
                source: source.name().into(),
                ..SourceReport::default()
            },
            redactor: Redactor::new(&config.patterns).0,
        }
    }

    /// `text` redacted (built-in rules and the user's patterns) and cut to [`MAX_TEXT`] bytes.
    pub fn clean(&self, text: &str) -> String {
        cut(&self.redactor.redact(text), MAX_TEXT)
    }

    /// Stores events (in batches the store takes) and counts what the store did with them.
    pub fn store(&mut self, events: &[NewEvent]) -> Result<(), EventsError> {
        for chunk in events.chunks(500) {
            let got = store::insert_batch(self.conn, chunk, self.now)?;
            self.report.stored += got.stored;
            self.report.duplicate += got.duplicate;
        }
        Ok(())
    }

    /// What this source remembered under `key`, parsed; `None` when nothing (or something unreadable) was.
    pub fn cursor<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, EventsError> {
        Ok(store::cursor(self.conn, self.source.name(), key)?
            .and_then(|s| serde_json::from_str(&s).ok()))
    }

    /// Remembers `state` under `key` (after the events it covers were stored).
    pub fn save_cursor<T: Serialize>(&self, key: &str, state: &T) -> Result<(), EventsError> {
        let json = serde_json::to_string(state).unwrap_or_else(|_| "{}".into());
        store::save_cursor(self.conn, self.source.name(), key, &json, self.now)?;
        Ok(())
    }

    pub fn problem(&mut self, p: impl Into<String>) {
        if self.report.problems.len() < 100 {
            self.report.problems.push(p.into());
        }
    }

    /// A new event of this source (`source_surface` `events:<source>`).
    pub fn event(
        &self,
        kind: &str,
        key: String,
        content: String,
        occurred_at: OffsetDateTime,
        attrs: serde_json::Value,
    ) -> NewEvent {
        NewEvent {
            kind: kind.into(),
            source_surface: self.source.surface(),
            content,
            key,
            occurred_at,
            attrs,
        }
    }
}

/// `s` cut to at most `max` bytes at a character boundary, with a note of how much was left off.
pub fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max.saturating_sub(48);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[cut: {} more bytes]", &s[..end], s.len() - end)
}

/// Lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// A file's modification time, when the OS gives one.
pub fn mtime(meta: &std::fs::Metadata) -> Option<OffsetDateTime> {
    meta.modified().ok().map(OffsetDateTime::from)
}

/// A folder's name, for `attrs.repo` / `attrs.project`.
pub fn dir_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// Runs `sources` once: each reads what is new, stores its events and records its run. A source's own problems
/// (a repository that is gone, a line that is not JSON) are in its report; only a storage error stops the pass.
pub fn run(
    conn: &Connection,
    config: &Config,
    sources: &[Source],
    now: OffsetDateTime,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report, EventsError> {
    let mut report = Report {
        started_at: fmt_time(now),
        sources: Vec::new(),
    };
    for (i, &source) in sources.iter().enumerate() {
        progress(Progress {
            source,
            sources_done: i as u64,
            sources_total: sources.len() as u64,
        });
        let mut pass = Pass::new(conn, config, now, source);
        match source {
            Source::Git => git::run(&mut pass)?,
            Source::ClaudePlans => files::run(&mut pass)?,
            Source::ConfigState => config_state::run(&mut pass)?,
            Source::ReadingList => reading::run(&mut pass)?,
            Source::Screenshots => screenshots::run(&mut pass)?,
            Source::Sessions => sessions::run(&mut pass)?,
        }
        let r = pass.report;
        let first_problem = r.problems.first().map(|p| {
            if r.problems.len() > 1 {
                format!("{p} (and {} more)", r.problems.len() - 1)
            } else {
                p.clone()
            }
        });
        store::record_run(
            conn,
            source.name(),
            now,
            RunCounts {
                read: r.read,
                stored: r.stored,
                duplicate: r.duplicate,
                rejected: r.rejected,
            },
            first_problem.as_deref(),
        )?;
        report.sources.push(r);
    }
    progress(Progress {
        source: sources.last().copied().unwrap_or(Source::Git),
        sources_done: sources.len() as u64,
        sources_total: sources.len() as u64,
    });
    Ok(report)
}

/// The enabled sources whose cadence has passed since their last run (or that never ran), at `now`.
pub fn due(conn: &Connection, now: OffsetDateTime) -> Result<Vec<Source>, EventsError> {
    let mut out = Vec::new();
    for row in store::sources(conn)? {
        let Some(s) = Source::parse(&row.name) else {
            continue;
        };
        if !row.enabled {
            continue;
        }
        let last = row.last_run_at.as_deref().and_then(parse_time);
        if last.is_none_or(|l| now - l >= s.cadence()) {
            out.push(s);
        }
    }
    out.sort();
    Ok(out)
}

/// One source as `personkit events sources` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SourceStatus {
    pub name: String,
    pub enabled: bool,
    pub cadence_minutes: u64,
    /// What it reads (files and folders; the repositories added for `git`).
    pub paths: Vec<String>,
    /// What a path added to it means, when it takes any.
    pub takes_paths: Option<String>,
    pub last_run_at: Option<String>,
    pub last_error: Option<String>,
    pub read: u64,
    pub stored: u64,
    pub duplicate: u64,
    pub rejected: u64,
}

/// Every source with its settings and totals.
pub fn status(conn: &Connection, config: &Config) -> Result<Vec<SourceStatus>, EventsError> {
    let rows = store::sources(conn)?;
    Ok(Source::ALL
        .iter()
        .map(|&s| {
            let row = rows.iter().find(|r| r.name == s.name());
            SourceStatus {
                name: s.name().into(),
                enabled: row.is_some_and(|r| r.enabled),
                cadence_minutes: s.cadence().as_secs() / 60,
                paths: config
                    .roots(s)
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect(),
                takes_paths: s.path_meaning().map(str::to_owned),
                last_run_at: row.and_then(|r| r.last_run_at.clone()),
                last_error: row.and_then(|r| r.last_error.clone()),
                read: row.map_or(0, |r| r.read),
                stored: row.map_or(0, |r| r.stored),
                duplicate: row.map_or(0, |r| r.duplicate),
                rejected: row.map_or(0, |r| r.rejected),
            }
        })
        .collect())
}
