//! Bringing history in: the official exports of ChatGPT, Claude, Grok and DeepSeek, read as a stream, and the
//! transcripts local AI tools keep ([`harvest`]),
//! stored in transactions of whole conversations through `personkit_store::ingest`, after the same normalising and
//! redaction as live capture. `docs/import.md` is the user's side of this crate.
//!
//! The pieces, each reusable by the harvesters of local agent transcripts:
//! - a **source** yields [`SourceConversation`]s: here [`detect`] (zip, folder or JSON file, format told by
//!   content), [`stream`] (one conversation in memory at a time) and [`formats`] (export JSON → the site's turns);
//! - one **sink**, [`Sink`], stores them: [`convert`] (turns → wire observations, redacted, export path, site
//!   ids) and ingest calls of whole conversations (about [`BATCH_TURNS`] turns each) — a conversation is stored
//!   whole or not at all — while counting what happened in a [`Summary`].
//!
//! **Architecture invariant:** an imported turn is stored with the site's own surface, conversation id and
//! message id, so the identity rule (`personkit_shared::identity`) merges it with the same conversation captured
//! live, in either order; importing the same file again stores nothing new.

pub mod claude_projects;
pub mod convert;
pub mod detect;
pub mod formats;
pub mod gemini;
pub mod harvest;
pub mod lechat;
pub mod perplexity;
pub mod stream;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{BufReader, Read};
use std::path::Path;
use std::rc::Rc;

use personkit_shared::capture::Redactor;
use personkit_shared::identity;
use personkit_shared::wire::{ClientInfo, ItemStatus};
use personkit_store::Connection;
use personkit_store::ingest::{self, Origin, StorageError};
use serde::Serialize;
use time::OffsetDateTime;

pub use detect::Format;
pub use formats::SourceConversation;

/// The largest `MyActivity.html` read (whole, in memory); JSON has no bound (it is streamed).
pub const MAX_HTML_BYTES: u64 = 512 * 1_000_000;

/// Why an import could not run (or stopped): the file it concerns and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {file}: {message}")]
    Io { file: String, message: String },
    #[error(
        "{file} is not a readable zip ({message}); the download may be cut short: download the export again"
    )]
    Zip { file: String, message: String },
    #[error("{file}: {why}")]
    Format { file: String, why: String },
    #[error("invalid redaction pattern {pattern:?}: {message}")]
    Pattern { pattern: String, message: String },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl ImportError {
    pub(crate) fn io(path: &Path, e: std::io::Error) -> ImportError {
        ImportError::Io {
            file: path.display().to_string(),
            message: e.to_string(),
        }
    }
}

/// Something that went wrong with part of an input; the rest was imported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub file: String,
    /// The conversation concerned, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// Its place in the file's list (0-based), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    /// Where in the file the JSON broke off (1-based), for a file that is not valid JSON to its end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file)?;
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, ", line {l} column {c}")?,
            (Some(l), None) => write!(f, ", line {l}")?,
            _ => {}
        }
        match (&self.conversation_id, self.index) {
            (Some(id), Some(i)) => write!(f, ", conversation {id} (#{i})")?,
            (Some(id), None) => write!(f, ", conversation {id}")?,
            (None, Some(i)) => write!(f, ", conversation #{i}")?,
            (None, None) => {}
        }
        write!(f, ": {}", self.message)
    }
}

/// One conversations file of the input.
#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    pub file: String,
    /// `None` for an empty list.
    pub format: Option<Format>,
    pub conversations: u64,
}

/// What an import did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub dry_run: bool,
    pub files: Vec<FileReport>,
    /// Conversations read (stored whole, or refused whole — see `conversations_failed`).
    pub conversations: u64,
    /// Conversations that could not be read or stored; each is in `problems`.
    pub conversations_failed: u64,
    /// Messages read from the conversations read (a Gemini activity record without a turn counts as one). Each
    /// is accounted once: handed to storage (`turns`), nothing to keep (`empty`), site chrome (`chrome`) or unreadable
    /// (`messages_unreadable`) — `messages = turns + empty + chrome + messages_unreadable`.
    pub messages: u64,
    /// Turns handed to storage: `turns = stored + duplicate + rejected`.
    pub turns: u64,
    pub stored: u64,
    pub duplicate: u64,
    pub rejected: u64,
    /// Rejected turns per reason (the wire format's codes, e.g. `too_large`).
    pub rejected_by_reason: BTreeMap<String, u64>,
    /// Turns with nothing to keep (empty system roots, empty messages), not sent.
    pub empty: u64,
    /// Messages that are the site's chrome rather than content (ChatGPT's "Thought for 9s" recap), not sent.
    pub chrome: u64,
    /// Messages that could not be read (not an object, no id, not understood), not sent; each conversation
    /// concerned is in `problems`.
    pub messages_unreadable: u64,
    /// The same per reason (`not_an_object`, `no_id`, `not_understood`).
    pub messages_unreadable_by_reason: BTreeMap<String, u64>,
    /// Content types not understood, per type: each turn kept a `[unsupported: …]` placeholder.
    pub unknown_content: BTreeMap<String, u64>,
    pub problems: Vec<Problem>,
}

/// Whole conversations gathered before one ingest call: a transaction per conversation would make each commit
/// (`synchronous=FULL`) cost more than the conversation's rows; one per ~500 turns is what a device's batch
/// costs over HTTP.
pub const BATCH_TURNS: usize = 500;

/// The one write path of imports and harvests: conversations in, redacted observations stored, counted in the
/// summary. A conversation's observations always go into one ingest call (one transaction), never split, so
/// nothing of a conversation is half-stored; small conversations share a call.
pub struct Sink<'c> {
    conn: &'c mut Connection,
    origin: Origin,
    client: ClientInfo,
    redactor: Redactor,
    path: identity::Path,
    dry_run: bool,
    now: OffsetDateTime,
    pending: Vec<personkit_shared::wire::Observation>,
    pub summary: Summary,
}

impl std::fmt::Debug for Sink<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink")
            .field("path", &self.path)
            .field("dry_run", &self.dry_run)
            .finish_non_exhaustive()
    }
}

/// What a [`Sink`] needs to know besides the corpus.
#[derive(Debug, Clone)]
pub struct Options {
    /// Store nothing: every conversation's transaction is rolled back after counting.
    pub dry_run: bool,
    /// The user's redaction patterns (one regex each), applied with the built-in rules.
    pub patterns: Vec<String>,
    /// `export` for imports, `harvest` for harvesters.
    pub path: identity::Path,
    /// Names the client in provenance, e.g. `personkit-import`.
    pub client_name: String,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            dry_run: false,
            patterns: Vec::new(),
            path: identity::Path::Export,
            client_name: "personkit-import".into(),
        }
    }
}

impl<'c> Sink<'c> {
    /// A sink writing to `conn` as this corpus's own origin. Invalid user patterns are refused (the extension
    /// refuses them the same way).
    pub fn new(
        conn: &'c mut Connection,
        opts: &Options,
        now: OffsetDateTime,
    ) -> Result<Sink<'c>, ImportError> {
        let (redactor, errors) = Redactor::new(&opts.patterns);
        if let Some(e) = errors.into_iter().next() {
            return Err(ImportError::Pattern {
                pattern: e.pattern,
                message: e.message,
            });
        }
        let relay = personkit_store::db::relay_id(conn).map_err(StorageError::from)?;
        Ok(Sink {
            conn,
            origin: Origin { device_id: relay },
            client: ClientInfo {
                app_version: env!("CARGO_PKG_VERSION").to_owned(),
                device_id: opts.client_name.clone(),
            },
            redactor,
            path: opts.path,
            dry_run: opts.dry_run,
            now,
            pending: Vec::new(),
            summary: Summary {
                dry_run: opts.dry_run,
                ..Summary::default()
            },
        })
    }

    /// Takes one conversation: its observations are stored together, in the same transaction, at the latest
    /// by [`Sink::flush`]. A storage failure is returned and nothing of the conversations of that transaction is
    /// kept.
    pub fn put(&mut self, conv: &SourceConversation) -> Result<(), StorageError> {
        let c = convert::convert(conv, self.path, &self.redactor, &self.client);
        let s = &mut self.summary;
        s.conversations += 1;
        s.messages += conv.turns.len() as u64 + conv.unreadable_count();
        s.empty += c.empty as u64;
        for u in c.unknown {
            *s.unknown_content.entry(u).or_default() += 1;
        }
        if !self.pending.is_empty() && self.pending.len() + c.observations.len() > BATCH_TURNS {
            self.flush()?;
        }
        self.pending.extend(c.observations);
        if self.pending.len() >= BATCH_TURNS {
            self.flush()?;
        }
        Ok(())
    }

    /// Stores what was taken so far, in one transaction (rolled back in a dry run).
    pub fn flush(&mut self) -> Result<(), StorageError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.pending);
        let answer = if self.dry_run {
            ingest::preview_observations(self.conn, &self.origin, &batch, self.now)?
        } else {
            ingest::ingest_observations(self.conn, &self.origin, &batch, self.now)?
        };
        let s = &mut self.summary;
        s.turns += batch.len() as u64;
        s.stored += answer.stored as u64;
        s.duplicate += answer.duplicate as u64;
        s.rejected += answer.rejected as u64;
        for r in answer
            .results
            .iter()
            .filter(|r| r.status == ItemStatus::Rejected)
        {
            let code = r
                .error
                .as_ref()
                .map(|e| e.code.clone())
                .unwrap_or_else(|| "unknown".into());
            *s.rejected_by_reason.entry(code).or_default() += 1;
        }
        Ok(())
    }

    /// The corpus this sink writes to, for state kept beside the turns (a harvester's file offsets). Call
    /// [`Sink::flush`] first when that state must not run ahead of the turns.
    pub fn connection(&mut self) -> &mut Connection {
        self.conn
    }

    /// Counts a conversation that could not be read.
    pub fn failed(&mut self, p: Problem) {
        self.summary.conversations_failed += 1;
        self.summary.problems.push(p);
    }

    /// Counts messages that could not be read, per reason; `problem` (when given) says where.
    pub fn unreadable(&mut self, reasons: &BTreeMap<String, u64>, problem: Option<Problem>) {
        let s = &mut self.summary;
        for (why, n) in reasons {
            s.messages_unreadable += n;
            *s.messages_unreadable_by_reason
                .entry(why.clone())
                .or_default() += n;
        }
        s.problems.extend(problem);
    }
}

/// How far an import is, for a progress bar.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub conversations: u64,
}

/// A reader that counts the bytes read through it.
struct Counting<R> {
    inner: R,
    n: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let k = self.inner.read(buf)?;
        self.n.set(self.n.get() + k as u64);
        Ok(k)
    }
}

/// Counts the activity records of a file that could not be read, as one problem of the file.
fn report_records(sink: &mut Sink<'_>, file: &str, reasons: &BTreeMap<String, u64>) {
    if reasons.is_empty() {
        return;
    }
    let n: u64 = reasons.values().sum();
    sink.summary.messages += n;
    let problem = Problem {
        file: file.to_owned(),
        conversation_id: None,
        index: None,
        line: None,
        column: None,
        message: format!(
            "{n} activity records could not be read and were skipped ({}); the others were imported",
            formats::describe_unreadable(reasons)
        ),
    };
    sink.unreadable(reasons, Some(problem));
}

/// Reads one Perplexity thread (Markdown, read whole up to [`perplexity::MAX_BYTES`]) and stores it; an exchange
/// without its question is kept and reported.
fn read_perplexity(sink: &mut Sink<'_>, label: &str, reader: impl Read) -> Result<(), ImportError> {
    let problem = |message: String| Problem {
        file: label.to_owned(),
        conversation_id: None,
        index: None,
        line: None,
        column: None,
        message,
    };
    let mut text = String::new();
    let read = reader
        .take(perplexity::MAX_BYTES + 1)
        .read_to_string(&mut text);
    if let Err(e) = read {
        sink.failed(problem(format!("cannot read the file as UTF-8 text ({e})")));
        return Ok(());
    }
    if text.len() as u64 > perplexity::MAX_BYTES {
        sink.failed(problem(format!(
            "a thread over {} MB is not read",
            perplexity::MAX_BYTES / 1_000_000
        )));
        return Ok(());
    }
    let Some(t) = perplexity::thread(&text) else {
        sink.failed(problem("no question or answer in the file".into()));
        return Ok(());
    };
    if !t.without_question.is_empty() {
        let mut p = problem(format!(
            "exchange(s) {:?} have no question heading (`# …`); their answers were imported alone",
            t.without_question
        ));
        p.conversation_id = Some(t.conversation.conversation_id.clone());
        sink.summary.problems.push(p);
    }
    sink.put(&t.conversation)?;
    Ok(())
}

/// Reads one Le Chat `chat-<uuid>.json` (a conversation: the file's list of messages) and stores it. A file that
/// breaks off keeps the messages before the break; a message that cannot be read is counted and reported.
fn read_lechat(
    sink: &mut Sink<'_>,
    label: &str,
    reader: impl std::io::BufRead,
) -> Result<(), ImportError> {
    let mut messages: Vec<Result<serde_json::Value, String>> = Vec::new();
    let mut listed = 0usize;
    let res = stream::walk(reader, stream::Shape::Array, |_, v| {
        listed += 1;
        if messages.len() < lechat::MAX_MESSAGES {
            messages.push(v.map_err(|o| o.describe()));
        }
        Ok::<(), StorageError>(())
    });
    let problem = |message: String, line: Option<usize>, column: Option<usize>| Problem {
        file: label.to_owned(),
        conversation_id: None,
        index: None,
        line,
        column,
        message,
    };
    match res {
        Ok(_) => {}
        Err(stream::WalkError::Stopped(e)) => return Err(ImportError::Storage(e)),
        Err(stream::WalkError::Json {
            message,
            line,
            column,
        }) => sink.summary.problems.push(problem(
            format!(
                "the file is not valid JSON from here on ({message}); the {listed} messages before it were read — the file may be cut short"
            ),
            (line > 0).then_some(line),
            (line > 0).then_some(column),
        )),
    }
    if listed > messages.len() {
        let n = (listed - messages.len()) as u64;
        sink.unreadable(
            &BTreeMap::from([("too_many".to_owned(), n)]),
            Some(problem(
                format!(
                    "only the first {} messages are read; {n} more were skipped",
                    lechat::MAX_MESSAGES
                ),
                None,
                None,
            )),
        );
        sink.summary.messages += n;
    }
    if messages.is_empty() {
        return Ok(());
    }
    match lechat::conversation(label, messages) {
        Ok(conv) => {
            if !conv.unreadable.is_empty() {
                let mut p = problem(
                    format!(
                        "{} of its {} messages could not be read and were skipped ({}); the others were imported",
                        conv.unreadable_count(),
                        conv.unreadable_count() + conv.turns.len() as u64,
                        formats::describe_unreadable(&conv.unreadable)
                    ),
                    None,
                    None,
                );
                p.conversation_id = Some(personkit_shared::wire::quote_safely(
                    &conv.conversation_id,
                    80,
                ));
                sink.unreadable(&conv.unreadable, Some(p));
            }
            sink.put(&conv)?;
        }
        Err(u) => {
            let mut p = problem(u.why, None, None);
            p.conversation_id = u.conversation_id;
            sink.failed(p);
        }
    }
    Ok(())
}

/// Imports every conversations file at `path` (a zip, a folder or a JSON file) into the corpus. Parts that cannot
/// be read are [`Problem`]s in the summary and the rest is imported; an input that cannot be opened at all, or
/// a storage failure, is an error (conversations stored before it stay stored, each whole).
pub fn import_path(
    conn: &mut Connection,
    path: &Path,
    opts: &Options,
    now: OffsetDateTime,
    progress: &mut dyn FnMut(Progress),
) -> Result<Summary, ImportError> {
    let members = detect::members(path)?;
    let bytes_total: u64 = members.iter().map(|m| m.size).sum();
    let mut sink = Sink::new(conn, opts, now)?;
    let mut bytes_before = 0u64;
    for m in &members {
        let Some(format) = m.format else {
            sink.summary.files.push(FileReport {
                file: m.label.clone(),
                format: None,
                conversations: 0,
            });
            continue;
        };
        let before = sink.summary.conversations + sink.summary.conversations_failed;
        let counter = Rc::new(Cell::new(0u64));
        let label = m.label.clone();
        let walked = detect::with_reader(m, |r| {
            let reader = BufReader::with_capacity(
                256 * 1024,
                Counting {
                    inner: r,
                    n: counter.clone(),
                },
            );
            let mut count = 0u64;
            let mut grouper = gemini::Grouper::default();
            // Activity records that hold a prompt but cannot be read, per reason.
            let mut unreadable_records: BTreeMap<String, u64> = BTreeMap::new();
            if format == Format::GeminiHtml {
                // No streaming HTML parser here: the activity page is read whole (Takeout's are megabytes), up to
                // a bound that keeps memory in hand.
                let mut reader = std::io::Read::take(reader, MAX_HTML_BYTES + 1);
                let mut html = String::new();
                let read = std::io::Read::read_to_string(&mut reader, &mut html);
                if read.is_ok() && html.len() as u64 > MAX_HTML_BYTES {
                    sink.summary.problems.push(Problem {
                        file: label.clone(),
                        conversation_id: None,
                        index: None,
                        line: None,
                        column: None,
                        message: format!(
                            "an activity page over {} MB is not read as HTML; choose JSON for My Activity in Takeout and import that",
                            MAX_HTML_BYTES / 1_000_000
                        ),
                    });
                    return Ok((Ok(0), 0));
                }
                if let Err(e) = read {
                    return Ok((
                        Err(stream::WalkError::Json {
                            message: format!("cannot read the page as UTF-8 text ({e})"),
                            line: 0,
                            column: 0,
                        }),
                        0,
                    ));
                }
                for v in gemini::html_records(&html) {
                    count += 1;
                    match grouper.push(&v) {
                        Ok(Some(conv)) => sink.put(&conv).map_err(ImportError::Storage)?,
                        Ok(None) => {}
                        Err(gemini::Skip::NotATurn(_)) => {
                            sink.summary.messages += 1;
                            sink.summary.empty += 1;
                        }
                        Err(gemini::Skip::Unreadable(why)) => {
                            *unreadable_records.entry(why.to_owned()).or_default() += 1;
                        }
                    }
                }
                if let Some(conv) = grouper.finish() {
                    sink.put(&conv).map_err(ImportError::Storage)?;
                }
                report_records(&mut sink, &label, &unreadable_records);
                return Ok((Ok(0), count));
            }
            if format == Format::Perplexity {
                read_perplexity(&mut sink, &label, reader)?;
                return Ok((Ok(0), 0));
            }
            if format == Format::LeChat {
                read_lechat(&mut sink, &label, reader)?;
                return Ok((Ok(0), 0));
            }
            let res = stream::walk(reader, format.shape(), |index, v| {
                count += 1;
                let v = match v {
                    Ok(v) => v,
                    Err(oversize) => {
                        sink.failed(Problem {
                            file: label.clone(),
                            conversation_id: None,
                            index: Some(index),
                            line: None,
                            column: None,
                            message: oversize.describe(),
                        });
                        return Ok(());
                    }
                };
                if format == Format::Gemini {
                    match grouper.push(&v) {
                        Ok(Some(conv)) => sink.put(&conv)?,
                        Ok(None) => {}
                        // Other activity (feedback, settings) carries no turn.
                        Err(gemini::Skip::NotATurn(_)) => {
                            sink.summary.messages += 1;
                            sink.summary.empty += 1;
                        }
                        Err(gemini::Skip::Unreadable(why)) => {
                            *unreadable_records.entry(why.to_owned()).or_default() += 1;
                        }
                    }
                    return Ok(());
                }
                match formats::read(format, &v) {
                    Ok(conv) => {
                        let chrome = formats::chrome_messages(format, &v);
                        sink.summary.chrome += chrome;
                        sink.summary.messages += chrome;
                        drop(v);
                        if !conv.unreadable.is_empty() {
                            let problem = Problem {
                                file: label.clone(),
                                conversation_id: Some(personkit_shared::wire::quote_safely(
                                    &conv.conversation_id,
                                    80,
                                )),
                                index: Some(index),
                                line: None,
                                column: None,
                                message: format!(
                                    "{} of its {} messages could not be read and were skipped ({}); the others were imported",
                                    conv.unreadable_count(),
                                    conv.unreadable_count() + conv.turns.len() as u64,
                                    formats::describe_unreadable(&conv.unreadable)
                                ),
                            };
                            sink.unreadable(&conv.unreadable, Some(problem));
                        }
                        sink.put(&conv)?;
                    }
                    Err(u) => sink.failed(Problem {
                        file: label.clone(),
                        conversation_id: u.conversation_id,
                        index: Some(index),
                        line: None,
                        column: None,
                        message: u.why,
                    }),
                }
                progress(Progress {
                    bytes_done: bytes_before + counter.get(),
                    bytes_total,
                    conversations: sink.summary.conversations + sink.summary.conversations_failed,
                });
                Ok::<(), StorageError>(())
            });
            if let Some(conv) = grouper.finish() {
                sink.put(&conv).map_err(ImportError::Storage)?;
            }
            report_records(&mut sink, &label, &unreadable_records);
            Ok((res, count))
        })?;
        let (res, count) = walked;
        match res {
            Ok(_) => {}
            Err(stream::WalkError::Stopped(e)) => return Err(ImportError::Storage(e)),
            Err(stream::WalkError::Json {
                message,
                line,
                column,
            }) => {
                sink.summary.problems.push(Problem {
                    file: m.label.clone(),
                    conversation_id: None,
                    index: Some(count as usize),
                    line: (line > 0).then_some(line),
                    column: (line > 0).then_some(column),
                    message: format!(
                        "the file is not valid JSON from here on ({message}); the {count} conversations before it were imported — the file may be cut short or still being written"
                    ),
                });
            }
        }
        sink.summary.files.push(FileReport {
            file: m.label.clone(),
            format: Some(format),
            conversations: sink.summary.conversations + sink.summary.conversations_failed - before,
        });
        bytes_before += m.size;
    }
    sink.flush()?;
    Ok(sink.summary)
}
