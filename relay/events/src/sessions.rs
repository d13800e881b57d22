//! `sessions`: the corpus's own threads as events. A harvested agent session (surface `harvest:<tool>`) gives
//! `session.started` at its first turn and `session.ended` at its last once it has been quiet for
//! [`crate::Config::session_quiet`]; attrs `thread_id`, `surface`, `project` (from the transcript file's place,
//! `personkit_import::harvest::project_of`). Any other thread (captured in the browser, imported) gives
//! `thread.started` at its first turn; attrs `thread_id`, `surface`, `title`. Content is the thread's title.
//!
//! A thread gets one start event (a title given later does not make another) and a session one end event per
//! quiet spell. A pass looks at the threads seen since the cursor (kept at most the quiet time back, so a session still going
//! is looked at again until it has ended) and every thread no event names yet, at most
//! [`personkit_store::events::MAX_SPANS`] a pass. Forgetting a thread removes its events
//! (`personkit_store::events`), and a thread that keeps some turns is given fresh ones by the next pass.

use std::collections::BTreeMap;
use std::path::Path;

use personkit_store::clock::{fmt_time, parse_time};
use personkit_store::events::{MAX_SPANS, NewEvent, thread_spans};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::{EventsError, Pass};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Cursor {
    seen_since: Option<String>,
}

const KEY: &str = "threads";

pub(crate) fn run(pass: &mut Pass<'_>) -> Result<(), EventsError> {
    let cur: Cursor = pass.cursor(KEY)?.unwrap_or_default();
    let spans = thread_spans(pass.conn, cur.seen_since.as_deref(), MAX_SPANS)?;
    pass.report.more = spans.len() == MAX_SPANS as usize;
    pass.report.read += spans.len() as u64;
    let harvested: Vec<String> = spans
        .iter()
        .filter(|s| s.surface.starts_with("harvest:"))
        .map(|s| s.thread_id.clone())
        .collect();
    let mut projects: BTreeMap<String, String> = BTreeMap::new();
    for chunk in harvested.chunks(personkit_store::harvest::MAX_THREAD_IDS) {
        for (thread, source, path) in personkit_store::harvest::thread_files(pass.conn, chunk)? {
            if projects.contains_key(&thread) {
                continue;
            }
            if let Some(p) = personkit_import::harvest::project_of(&source, Path::new(&path)) {
                projects.insert(thread, p);
            }
        }
    }
    let quiet_before = pass.now - pass.config.session_quiet;
    let mut events: Vec<NewEvent> = Vec::new();
    for s in &spans {
        let (Some(first), Some(last)) = (parse_time(&s.first_at), parse_time(&s.last_at)) else {
            continue;
        };
        let title = s.title.as_deref().map(|t| pass.clean(t));
        let ev = |kind: &str, at, content: String, attrs| NewEvent {
            kind: kind.into(),
            source_surface: s.surface.clone(),
            content,
            key: s.thread_id.clone(),
            occurred_at: at,
            attrs,
        };
        if let Some(tool) = s.surface.strip_prefix("harvest:") {
            let project = projects.get(&s.thread_id);
            let content = match (&title, project) {
                (Some(t), _) => t.clone(),
                (None, Some(p)) => format!("{tool} session in {p}"),
                (None, None) => format!("{tool} session"),
            };
            let attrs = json!({"thread_id": s.thread_id, "surface": s.surface, "project": project});
            if !s.started {
                events.push(ev("session.started", first, content.clone(), attrs.clone()));
            }
            // A session ends once quiet; resumed and quiet again, it ends again, later.
            let ended_before = s.ended_at.as_deref().and_then(parse_time);
            if last < quiet_before && ended_before.is_none_or(|e| last > e) {
                events.push(ev("session.ended", last, content, attrs));
            }
        } else if !s.started {
            let content = title
                .clone()
                .unwrap_or_else(|| format!("untitled conversation on {}", s.surface));
            events.push(ev(
                "thread.started",
                first,
                content,
                json!({"thread_id": s.thread_id, "surface": s.surface, "title": title}),
            ));
        }
    }
    pass.store(&events)?;
    let newest = spans.iter().map(|s| s.last_seen_at.clone()).max();
    let floor = fmt_time(quiet_before);
    let seen_since = match (newest, cur.seen_since) {
        (Some(n), _) => Some(n.min(floor)),
        (None, old) => old,
    };
    pass.save_cursor(KEY, &Cursor { seen_since })?;
    Ok(())
}
