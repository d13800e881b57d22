//! Entities a language model finds in turns: people, projects, organisations, places and tools that no certain
//! rule ([`derive`](crate::derive)) can read. The extraction reads the messages after its own cursor in windows of
//! one thread's consecutive turns, scrubs them as the knowledge pipeline does before they leave the machine, asks
//! for names with a kind, the turn they are in and a confidence, and keeps only names written in that turn. What it
//! keeps is a **proposal** (`personkit_store::proposals`): nothing reaches the graph, which agents read, until the
//! user approves the name; later mentions of an approved name are linked as they are found (each a `model`
//! source with its confidence), and a rejected name is dropped. Every call is in the audit log; nothing logged
//! holds a name or a turn's text.

use std::time::{Duration, Instant};

use personkit_knowledge::privacy::Privacy;
use personkit_llm::{ChatModel, Request, Shape};
use personkit_store::Connection;
use personkit_store::clock::fmt_time;
use personkit_store::graph::{self as store, How, MessageRow, SourceKind};
use personkit_store::knowledge as krows;
use personkit_store::proposals::{self, Mention, State};
use serde::Serialize;
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::derive::Proposals;
use crate::run::{Support, apply};
use crate::{GraphError, Kind, display_name, key};

/// The kinds a model may name (the others are read with certainty: repositories, models, sites).
pub const KINDS: [&str; 5] = ["person", "project", "organisation", "place", "tool"];
/// What a model's word for its confidence is stored as.
const CONFIDENCE: [(&str, f64); 3] = [("high", 0.9), ("medium", 0.7), ("low", 0.5)];
/// Most names one call may answer.
const MAX_NAMES: usize = 20;
/// Most characters of one turn a call reads, and of one window.
const TURN_CHARS: usize = 1_200;
const WINDOW_CHARS: usize = 6_000;
/// Most turns in one window.
const WINDOW_TURNS: usize = 12;
/// Messages read ahead per run.
const READ_AHEAD: usize = 400;
/// Tokens an answer may take.
const ANSWER_TOKENS: u32 = 400;

const CURSOR: &str = "extract_cursor";
const LAST_RUN: &str = "extract_last_run";
/// The prompt's version, stored with each audit row.
pub const PROMPT_VERSION: &str = "entities-1";

/// `[graph]` of the settings file: whether `serve` runs the extraction in the background.
///
/// ```toml
/// [graph]
/// extract = true          # off by default: a model reads every new turn
/// extract_calls = 4       # most model calls per background run (one run a minute)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub extract: bool,
    pub extract_calls: usize,
}

/// Bounds of `extract_calls`.
pub const CALLS_RANGE: (usize, usize) = (1, 100);

impl Default for Settings {
    fn default() -> Self {
        Settings {
            extract: false,
            extract_calls: 4,
        }
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    extract: Option<bool>,
    extract_calls: Option<usize>,
}

#[derive(serde::Deserialize)]
struct File {
    graph: Option<toml::Value>,
}

impl Settings {
    /// `[graph]` of the file at `path` (none: the defaults).
    pub fn load(path: Option<&std::path::Path>) -> Result<Settings, GraphError> {
        let mut s = Settings::default();
        let Some(path) = path else { return Ok(s) };
        let bad = |e: String| GraphError::Invalid(format!("{} [graph]: {e}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let file: File = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let Some(section) = file.graph else {
            return Ok(s);
        };
        let section: Section = section
            .try_into()
            .map_err(|e: toml::de::Error| bad(e.to_string()))?;
        s.extract = section.extract.unwrap_or(s.extract);
        if let Some(n) = section.extract_calls {
            s.extract_calls = n.clamp(CALLS_RANGE.0, CALLS_RANGE.1);
        }
        Ok(s)
    }
}

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ExtractReport {
    /// Model calls made.
    pub calls: u64,
    /// Calls whose answer could not be used (the window is skipped; its turns are not read again).
    pub failed: u64,
    /// Turns read.
    pub messages: u64,
    /// Names the model gave that were kept (written in the turn it named, of a known kind).
    pub kept: u64,
    /// Names dropped: not in the turn they were said to be in, an unknown kind, or empty.
    pub dropped: u64,
    /// New proposals waiting for the user.
    pub proposed: u64,
    /// Mentions of names the user approved earlier, linked in the graph.
    pub linked: u64,
    /// The cursor after the run (the highest message pk read).
    pub cursor: i64,
    /// Turns are left for another run.
    pub more: bool,
}

/// Bounds of one run.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most model calls.
    pub calls: usize,
    /// Each call's time limit.
    pub timeout: Duration,
}

fn shape(turns: usize) -> Shape {
    let name = Shape::object([
        ("name", Shape::Text { max_chars: 80 }),
        ("kind", Shape::one_of(KINDS)),
        (
            "turn",
            Shape::Int {
                min: 1,
                max: turns.max(1) as i64,
            },
        ),
        ("confidence", Shape::one_of(["high", "medium", "low"])),
    ]);
    Shape::object([("names", Shape::array(name, MAX_NAMES))])
}

fn system() -> String {
    format!(
        "You find the names of specific things in a conversation between a person and an AI assistant. \
         Name only what is written in the turns: people (by name), projects, organisations (companies, teams, \
         institutions), places (cities, countries, venues) and tools (software, libraries, products). Skip \
         generic words (\"the database\", \"my project\"), pronouns and the AI assistant itself. For each name give \
         its kind ({}), the number of a turn it is written in, and how sure you are (high, medium, low). \
         Answer with JSON only: {{\"names\": [{{\"name\": \"…\", \"kind\": \"…\", \"turn\": 1, \"confidence\": \"…\"}}]}}. \
         An empty list is a good answer when nothing is named.",
        KINDS.join(", ")
    )
}

fn cut(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// Consecutive turns (in pk order) of one thread, at most [`WINDOW_TURNS`] and `max_chars` (a turn counted up to
/// [`TURN_CHARS`]).
fn windows(messages: &[MessageRow], max_chars: usize) -> Vec<&[MessageRow]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = 0;
    for (i, m) in messages.iter().enumerate() {
        let len = m.content.chars().count().min(TURN_CHARS);
        let breaks = i > start
            && (m.thread_id != messages[start].thread_id
                || i - start >= WINDOW_TURNS
                || chars + len > max_chars);
        if breaks {
            out.push(&messages[start..i]);
            start = i;
            chars = 0;
        }
        chars += len;
    }
    if start < messages.len() {
        out.push(&messages[start..]);
    }
    out
}

/// Whether `name` is written in `text` (case and spacing aside, as the graph keys names).
fn written_in(kind: Kind, name: &str, text: &str) -> bool {
    let k = key(kind, name);
    !k.is_empty() && key(kind, text).contains(&k)
}

/// One run: at most `limits.calls` calls over the turns after the cursor. The cursor moves past every window asked
/// about, whether or not its answer was usable, so a turn is read once.
pub fn run(
    conn: &Connection,
    model: &dyn ChatModel,
    knowledge: &personkit_knowledge::Settings,
    limits: Limits,
    now: OffsetDateTime,
) -> Result<ExtractReport, GraphError> {
    let mut report = ExtractReport::default();
    let cursor: i64 = store::state(conn, CURSOR)?
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    report.cursor = cursor;
    let messages = store::messages_after(conn, cursor, READ_AHEAD)?;
    // A window fits the model's context beside the instructions and the answer (about 3 characters a token).
    let room = model
        .context_tokens()
        .saturating_sub(ANSWER_TOKENS as usize + 400)
        .saturating_mul(3)
        .clamp(TURN_CHARS, WINDOW_CHARS);
    let all = windows(&messages, room);
    let key_bytes = personkit_knowledge::pseudonym_key(conn)
        .map_err(|e| GraphError::Invalid(format!("the pseudonym key is unusable: {e}")))?;
    let mut privacy = Privacy::new(
        knowledge.scrub,
        model.endpoint(),
        key_bytes,
        krows::pseudonyms(conn)?,
        knowledge.names,
        knowledge.user_names.clone(),
    )
    .map_err(|e| GraphError::Invalid(format!("the stored pseudonym map is unusable: {e}")))?;
    let run_id = format!("entities-{}", fmt_time(now));
    let mut asked = 0;
    for window in &all {
        if asked >= limits.calls {
            break;
        }
        let turns: Vec<&MessageRow> = window
            .iter()
            .filter(|m| m.role == "user" || m.role == "assistant")
            .filter(|m| !m.content.trim().is_empty())
            .collect();
        if !turns.is_empty() {
            asked += 1;
            one_window(
                conn,
                model,
                &mut privacy,
                &turns,
                limits,
                &run_id,
                now,
                &mut report,
            )?;
        }
        report.messages += window.len() as u64;
        report.cursor = window.last().map_or(report.cursor, |m| m.pk);
        store::set_state(conn, CURSOR, &report.cursor.to_string())?;
    }
    krows::add_pseudonyms(conn, &privacy.new_names, now)?;
    report.more =
        messages.last().is_some_and(|m| m.pk > report.cursor) || messages.len() == READ_AHEAD;
    store::set_state(conn, LAST_RUN, &fmt_time(now))?;
    tracing::info!(
        calls = report.calls,
        failed = report.failed,
        kept = report.kept,
        dropped = report.dropped,
        proposed = report.proposed,
        linked = report.linked,
        "entity extraction"
    );
    Ok(report)
}

#[allow(clippy::too_many_arguments)]
fn one_window(
    conn: &Connection,
    model: &dyn ChatModel,
    privacy: &mut Privacy,
    turns: &[&MessageRow],
    limits: Limits,
    run_id: &str,
    now: OffsetDateTime,
    report: &mut ExtractReport,
) -> Result<(), GraphError> {
    let mut user = String::from("Turns:\n");
    for (i, m) in turns.iter().enumerate() {
        user.push_str(&format!(
            "[{}] {}: {}\n",
            i + 1,
            m.role,
            privacy.outgoing(cut(&m.content, TURN_CHARS))
        ));
    }
    let req = Request {
        system: system(),
        user,
        shape: Some(shape(turns.len())),
        max_tokens: ANSWER_TOKENS,
        timeout: limits.timeout,
    };
    let started = Instant::now();
    // Only the list is required of the answer; each name in it is checked on its own, so one unusable name does
    // not cost the others.
    let answer = personkit_llm::structured_with(model, &req, &|v| {
        if v["names"].is_array() {
            Ok(())
        } else {
            Err("the answer has no \"names\" list".into())
        }
    });
    report.calls += 1;
    let (outcome, error, usage, calls) = match &answer {
        Ok(s) => ("ok", None, s.usage, s.calls),
        Err(e) => ("failed", Some(e.code()), Default::default(), 1),
    };
    let usage: personkit_llm::Usage = usage;
    let mut kept = Vec::new();
    if let Ok(s) = &answer {
        let all = s.value["names"].as_array().map_or(&[][..], Vec::as_slice);
        report.dropped += all.len().saturating_sub(MAX_NAMES) as u64;
        for item in all.iter().take(MAX_NAMES) {
            match checked(item, turns, privacy) {
                Some(k) => kept.push(k),
                None => report.dropped += 1,
            }
        }
    } else {
        report.failed += 1;
    }
    krows::audit(
        conn,
        run_id,
        "call",
        &[],
        &json!({
            "stage": "graph:entities", "model": model.model_id(), "prompt_version": PROMPT_VERSION,
            "endpoint": model.endpoint().map_or_else(|| "in process".to_owned(), personkit_llm::config::shown_url),
            "sent_as": privacy.sent_as(), "replaced": privacy.replaced,
            "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "calls": calls, "ms": started.elapsed().as_millis() as u64,
            "outcome": outcome, "error": error, "turns": turns.len(), "kept": kept.len(),
        }),
        now,
    )?;
    for (kind, name, turn, confidence) in kept {
        let m = turns[turn];
        let k = key(kind, &name);
        let (id, state) = proposals::propose(
            conn,
            &Mention {
                kind: kind.as_str(),
                name: &name,
                key: &k,
                confidence,
                model: model.model_id(),
                message_id: &m.id,
                thread_id: &m.thread_id,
                seen_at: &m.captured_at,
            },
            now,
        )?;
        report.kept += 1;
        match state {
            State::Proposed => {
                if proposals::sources(conn, &id)?.len() == 1 {
                    report.proposed += 1;
                }
            }
            State::Approved => {
                link(conn, kind, &name, confidence, m, now)?;
                report.linked += 1;
            }
            State::Rejected => {}
        }
    }
    Ok(())
}

/// A name the model gave, if it can be used: a known kind and written in the turn it named — or, when that turn
/// does not hold it (small models miscount), in the first turn of the window that does.
fn checked(
    item: &Value,
    turns: &[&MessageRow],
    privacy: &Privacy,
) -> Option<(Kind, String, usize, f64)> {
    let kind = Kind::parse(item["kind"].as_str()?).filter(|k| KINDS.contains(&k.as_str()))?;
    let name = display_name(&privacy.incoming(item["name"].as_str()?));
    let named = item["turn"]
        .as_i64()
        .and_then(|t| usize::try_from(t).ok())
        .and_then(|t| t.checked_sub(1));
    let confidence = CONFIDENCE
        .iter()
        .find(|(w, _)| Some(*w) == item["confidence"].as_str())
        .map(|(_, c)| *c)?;
    let holds = |i: &usize| {
        turns
            .get(*i)
            .is_some_and(|m| written_in(kind, &name, cut(&m.content, TURN_CHARS)))
    };
    let turn = named
        .filter(holds)
        .or_else(|| (0..turns.len()).find(holds))?;
    Some((kind, name, turn, confidence))
}

/// Stores one mention of an approved name in the graph, supported by its message.
fn link(
    conn: &Connection,
    kind: Kind,
    name: &str,
    confidence: f64,
    m: &MessageRow,
    now: OffsetDateTime,
) -> Result<Vec<String>, GraphError> {
    let mut p = Proposals::default();
    p.add(kind, name, confidence);
    apply(
        conn,
        &p,
        &Support {
            kind: SourceKind::Message,
            id: &m.id,
            how: How::Model,
            seen_at: &m.captured_at,
        },
        now,
    )
}

/// Stores an approved name in the graph with each of the given messages as a `model` source. Returns the entity's
/// id, or `None` when there was no message.
fn link_sources(
    conn: &Connection,
    kind: Kind,
    name: &str,
    sources: &[proposals::ProposalSource],
    now: OffsetDateTime,
) -> Result<Option<String>, GraphError> {
    let mut entity = None;
    for s in sources {
        let mut one = Proposals::default();
        one.add(kind, name, s.confidence);
        let ids = apply(
            conn,
            &one,
            &Support {
                kind: SourceKind::Message,
                id: &s.message_id,
                how: How::Model,
                seen_at: &s.seen_at,
            },
            now,
        )?;
        entity = entity.or(ids.into_iter().next());
    }
    Ok(entity)
}

/// The user approves a proposal: its name becomes an entity, supported by every message it was found in. Returns
/// the entity's id.
pub fn approve(conn: &Connection, id: &str, now: OffsetDateTime) -> Result<String, GraphError> {
    let tx = store::begin(conn)?;
    let p = proposals::get(&tx, id)?
        .ok_or_else(|| GraphError::NotFound(format!("no entity proposal {id}")))?;
    let kind = Kind::parse(&p.kind)
        .ok_or_else(|| GraphError::Invalid(format!("proposal {id} has an unknown kind")))?;
    let here = proposals::sources_here(&tx, id)?;
    let entity = link_sources(&tx, kind, &p.name, &here, now)?
        .ok_or_else(|| GraphError::NotFound(format!("proposal {id} has no message left")))?;
    proposals::decide(&tx, id, State::Approved, Some(&entity), now)?;
    tx.commit().map_err(personkit_store::DbError::from)?;
    Ok(entity)
}

/// Links the approved proposals listed for it (`proposals::unsettled`: approved on a sync peer, or a message of
/// one arrived since) with every message of theirs stored here, at most `limit` proposals, and takes each off the
/// list (a message that arrives later lists its proposal again). Returns how many were linked.
pub fn settle(conn: &Connection, now: OffsetDateTime, limit: usize) -> Result<u64, GraphError> {
    let mut linked = 0;
    for id in proposals::unsettled(conn, limit)? {
        let tx = store::begin(conn)?;
        let approved = proposals::get(&tx, &id)?.filter(|p| p.state == State::Approved);
        if let Some((p, kind)) = approved.and_then(|p| Kind::parse(&p.kind).map(|k| (p, k))) {
            let here = proposals::sources_here(&tx, &id)?;
            if let Some(e) = link_sources(&tx, kind, &p.name, &here, now)? {
                if p.entity_id.as_deref() != Some(e.as_str()) {
                    proposals::set_entity(&tx, &id, &e)?;
                }
                linked += 1;
            }
        }
        proposals::settled(&tx, &id)?;
        tx.commit().map_err(personkit_store::DbError::from)?;
    }
    Ok(linked)
}

/// The user rejects a proposal: it is not proposed again, and nothing of it is in the graph.
pub fn reject(conn: &Connection, id: &str, now: OffsetDateTime) -> Result<(), GraphError> {
    let p = proposals::get(conn, id)?
        .ok_or_else(|| GraphError::NotFound(format!("no entity proposal {id}")))?;
    if p.state == State::Approved {
        return Err(GraphError::Invalid(format!(
            "{} was approved and is in the graph: forget the threads it came from, or merge it into another \
             entity",
            p.name
        )));
    }
    proposals::decide(conn, id, State::Rejected, None, now)?;
    Ok(())
}

/// When the extraction last ran, if ever.
pub fn last_run(conn: &Connection) -> Result<Option<String>, GraphError> {
    Ok(store::state(conn, LAST_RUN)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pk: i64, thread: &str, content: &str) -> MessageRow {
        MessageRow {
            pk,
            id: format!("m{pk}"),
            thread_id: thread.into(),
            role: "user".into(),
            content: content.into(),
            captured_at: "2026-11-01T00:00:00.000Z".into(),
        }
    }

    #[test]
    fn windows_hold_one_threads_consecutive_turns_within_bounds() {
        let m = vec![
            row(1, "a", "one"),
            row(2, "a", "two"),
            row(3, "b", "three"),
            row(4, "b", "eightchr"),
            row(5, "b", "x"),
            row(6, "a", "four"),
        ];
        let w: Vec<Vec<i64>> = windows(&m, 10)
            .iter()
            .map(|w| w.iter().map(|r| r.pk).collect())
            .collect();
        assert_eq!(w, vec![vec![1, 2], vec![3], vec![4, 5], vec![6]]);
        let many: Vec<MessageRow> = (1..=WINDOW_TURNS as i64 + 1)
            .map(|i| row(i, "a", "t"))
            .collect();
        assert_eq!(windows(&many, WINDOW_CHARS).len(), 2);
        assert!(windows(&[], WINDOW_CHARS).is_empty());
    }

    #[test]
    fn a_name_counts_only_where_it_is_written() {
        assert!(written_in(
            Kind::Person,
            "Priya Raman",
            "I asked priya  raman about it"
        ));
        assert!(written_in(
            Kind::Tool,
            "tree-sitter",
            "we parse with Tree Sitter"
        ));
        assert!(!written_in(Kind::Person, "Priya", "I asked Sam about it"));
        assert!(!written_in(Kind::Person, "  ", "anything"));
    }
}
