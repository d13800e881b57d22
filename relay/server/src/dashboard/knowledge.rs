//! The Knowledge page: the entries the pipeline drew from the turns and the notes agents proposed, by status
//! (pending first), each with who proposed it and why, its scores and its sources one click away; approve, reject
//! and edit as session-bound forms. And the knowledge audit log the Privacy page shows: every model call (where
//! the text went, scrubbed or not, what was replaced) and every decision (kept, dropped, why).
//!
//! Rows are read and written through `personkit_store::knowledge`; the pipeline's state (model, scrubbing, open
//! alert) comes from `personkit_knowledge::health`, the same call `corpus health` prints. The pseudonym map is
//! never read here.

use std::collections::HashMap;

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Redirect};
use maud::{Markup, html};
use personkit_knowledge::Health;
use personkit_knowledge::prompt::{CONFIDENCE, STABILITY};
use personkit_store::DbError;
use personkit_store::knowledge::{self as rows, AuditRow, Counts, Edit, Entry, Filter};
use personkit_store::read::{self, ReadError, compact};
use serde_json::Value;
use time::OffsetDateTime;

use super::pages::{Page, ctx, encode_query, layout, site_name, time_el, when};
use super::{
    Ctx, PageError, PostedTo, SessionSecret, decision_button, posted_decision, posted_fields,
};
use crate::error::AppError;
use crate::routes::read::{Params, run};
use crate::state::AppState;

const HINT: &str = "open Knowledge from the menu and pick a tab";
/// Entries shown per tab (newest first); words narrow the list.
const PER_PAGE: u32 = 100;
/// Sources shown with their text per entry; the rest are plain links.
const SOURCES_SHOWN: usize = 6;
/// Characters of a source turn shown beside its link.
const EXCERPT_CHARS: usize = 220;
/// Audit rows the Privacy page shows.
pub(super) const AUDIT_ROWS: u32 = 100;
/// Largest edit form (four text fields at their longest, percent-encoded).
const EDIT_FORM_BYTES: usize = 64 * 1024;

const TABS: [(&str, &str); 3] = [
    ("pending", "Pending"),
    ("approved", "Approved"),
    ("rejected", "Rejected"),
];

/// What a source turn shows beside its link.
struct SourceView {
    thread_title: String,
    surface: String,
    role: String,
    at: String,
    excerpt: String,
}

/// The pipeline's health under the relay's `[llm]` settings (read from the config file on each request, so the
/// page says what a pass would use now).
fn health(
    conn: &personkit_store::Connection,
    db_path: &std::path::Path,
) -> Result<Health, DbError> {
    personkit_knowledge::health(conn, &personkit_llm::LlmConfig::load(Some(db_path)))
}

/// `1 window`, `2 windows`; `many` is the plural when it is not `one` + "s".
fn count(n: u64, one: &str, many: Option<&str>) -> String {
    match (n, many) {
        (1, _) => format!("1 {one}"),
        (_, Some(m)) => format!("{n} {m}"),
        (_, None) => format!("{n} {one}s"),
    }
}

fn excerpt(s: &str) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= EXCERPT_CHARS {
        flat
    } else {
        let cut: String = flat.chars().take(EXCERPT_CHARS).collect();
        format!("{}…", cut.trim_end())
    }
}

/// The shown sources of `entries`, by message id.
fn source_views(
    conn: &personkit_store::Connection,
    entries: &[Entry],
) -> Result<HashMap<String, SourceView>, ReadError> {
    let mut out = HashMap::new();
    for s in entries
        .iter()
        .flat_map(|e| e.sources.iter().take(SOURCES_SHOWN))
    {
        if out.contains_key(&s.message_id) {
            continue;
        }
        match read::get_message(conn, &s.message_id) {
            Ok(m) => {
                out.insert(
                    s.message_id.clone(),
                    SourceView {
                        thread_title: m
                            .thread_title
                            .filter(|t| !t.trim().is_empty())
                            .unwrap_or_else(|| "Untitled".into()),
                        surface: m.surface,
                        role: m.role,
                        at: m.occurred_at.unwrap_or(m.captured_at),
                        excerpt: excerpt(&m.content),
                    },
                );
            }
            Err(ReadError::NotFound(_) | ReadError::BadRequest(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------------------------
// Pieces

/// An entry's sources, the shown ones oldest first (the store keeps them by id), then the rest.
fn in_time_order<'a>(e: &'a Entry, views: &HashMap<String, SourceView>) -> Vec<&'a rows::Source> {
    let (mut shown, rest): (Vec<_>, Vec<_>) = e
        .sources
        .iter()
        .enumerate()
        .partition(|(i, s)| *i < SOURCES_SHOWN && views.contains_key(&s.message_id));
    shown.sort_by(|(_, a), (_, b)| {
        let at = |s: &rows::Source| views.get(&s.message_id).map(|v| v.at.clone());
        at(a).cmp(&at(b))
    });
    shown.into_iter().chain(rest).map(|(_, s)| s).collect()
}

/// Who filed an entry: the pipeline (with its model) or an agent (with its device or token name).
fn proposer(e: &Entry) -> Markup {
    html! {
        @if let Some(agent) = e.origin.strip_prefix("agent:") {
            span.by { "Proposed by the agent " strong.agent { (agent) } }
            @if let Some(r) = e.reason.as_deref().filter(|r| !r.trim().is_empty()) {
                blockquote.reason { span.label { "Its reason: " } (r) }
            }
        } @else {
            span.by { "Drawn from your turns by the knowledge pipeline" }
        }
    }
}

/// The judge's scores as words: `keep ✓ · grounded ✓ · distinctive ✓ (judged by …)`.
fn scores(v: &Value) -> Markup {
    let Some(obj) = v.as_object() else {
        return html! {};
    };
    let judge = obj.get("judge").and_then(Value::as_str);
    html! {
        span.scores {
            @for (i, (k, val)) in obj.iter().filter(|(k, _)| k.as_str() != "judge").enumerate() {
                @if i > 0 { " · " }
                (k) " "
                @match val {
                    Value::Bool(true) => span.yes { "yes" },
                    Value::Bool(false) => span.no { "no" },
                    Value::String(s) => (s),
                    other => (other.to_string()),
                }
            }
            @if let Some(j) = judge { " (judged by " code { (j) } ")" }
        }
    }
}

/// The form path every approve and reject button posts to. One CSRF token, minted per page render, serves all
/// of a page's buttons (the first one used spends it, and the page it leads to has a fresh one): a token per
/// button would run past the tokens a session keeps on a long list.
const DECIDE: &str = "/knowledge/decide";

/// One entry as a card: what it says, who proposed it, how it was rated, where it comes from, and its actions.
fn entry_card(
    csrf: &str,
    e: &Entry,
    sources: &HashMap<String, SourceView>,
    now: OffsetDateTime,
    on_own_page: bool,
) -> Markup {
    html! {
        article.entry id={"entry-" (e.id)} data-status=(e.status) {
            header.entry-head {
                span class={"kind " (e.kind)} { (e.kind) }
                h2 {
                    @if on_own_page { (e.topic) } @else { a href={"/knowledge/" (e.id)} { (e.topic) } }
                }
                span class={"status " (e.status)} { (e.status) }
            }
            p.position { (e.position) }
            p.reasoning { span.label { "Why: " } (e.reasoning) }
            @if let Some(c) = e.context.as_deref().filter(|c| !c.trim().is_empty()) {
                p.context { span.label { "Holds when: " } (c) }
            }
            dl.facts.entry-facts {
                dt { "Confidence" } dd { (e.confidence) }
                dt { "Stability" } dd { (e.stability) }
                @if !e.tags.is_empty() {
                    dt { "Tags" } dd { ul.tags { @for t in &e.tags { li { (t) } } } }
                }
                dt { "From" } dd { (proposer(e)) }
                @if e.model.is_some() || e.prompt_version.is_some() {
                    dt { "Model" } dd {
                        code { (e.model.as_deref().unwrap_or("-")) }
                        " · prompt " code { (e.prompt_version.as_deref().unwrap_or("-")) }
                    }
                }
                @if let Some(s) = &e.scores { dt { "Scores" } dd { (scores(s)) } }
                @if let Some(v) = &e.variant_of {
                    dt { "Variant of" } dd { a href={"/knowledge/" (v)} { "entry " code { (compact::short(v)) } } " (the same topic, held in another context)" }
                }
                @if e.reinforced > 0 {
                    dt { "Said again" } dd { (e.reinforced) " time" @if e.reinforced != 1 { "s" } " in later conversations" }
                }
                dt { "Filed" } dd {
                    (time_el(&e.created_at, now))
                    @if let Some(d) = &e.decided_at {
                        " · " (e.status) " " (time_el(d, now))
                        @if let Some(by) = &e.decided_by { " (" (by) ")" }
                    }
                }
            }
            @if e.sources_forgotten {
                p.notice.skipped { "Some of its sources were forgotten; the ones left are below." }
            }
            section.sources aria-label="Sources" {
                h3 { "Sources (" (e.sources.len()) ")" }
                @if e.sources.is_empty() {
                    p.empty { "None left: every turn it was drawn from was forgotten." }
                }
                ol {
                    @for (i, s) in in_time_order(e, sources).into_iter().enumerate() {
                        @let href = format!("/threads/{}#turn-{}", s.thread_id, s.message_id);
                        @if let (true, Some(v)) = (i < SOURCES_SHOWN, sources.get(&s.message_id)) {
                            li.source {
                                a href=(href) { (v.thread_title) }
                                span.meta { " · " (site_name(&v.surface)) " · " (v.role) " · " (when(&v.at)) }
                                blockquote { (v.excerpt) }
                            }
                        } @else {
                            li.source { a href=(href) { "turn " code { (compact::short(&s.message_id)) } } }
                        }
                    }
                }
            }
            div.actions {
                @if e.status != "approved" { (decision_button(DECIDE, csrf, "entry", &e.id, true, &e.topic)) }
                @if e.status != "rejected" { (decision_button(DECIDE, csrf, "entry", &e.id, false, &e.topic)) }
                @if !on_own_page { a.button href={"/knowledge/" (e.id) "#edit"} { "Edit…" } }
            }
        }
    }
}

/// What the page says about the pipeline: off (and how to turn it on), an open alert (and what to do), or on.
fn health_notice(h: &Health) -> Markup {
    html! {
        @if h.pipeline != "on" {
            div.notice.skipped.pipeline-off role="status" {
                p { strong { "The knowledge pipeline is off." } " Language model: " (h.model) "." }
                p.hint {
                    "What to do: set " code { "[llm]" } " in " code { "~/.dotperson/config.toml" }
                    " (" code { "kind = \"openai\"" } " with " code { "base_url" } " and " code { "model" }
                    ", or " code { "kind = \"local\"" } " with " code { "model_path" } "), restart "
                    code { "personkit serve" } ", and run " code { "personkit knowledge run --once" }
                    " for a first pass (README → Knowledge you approve). Agents' proposals still arrive here."
                }
            }
        }
        @if let Some(a) = &h.alert {
            div.warning.alert role="alert" {
                p {
                    strong { "Alert: " }
                    (a["message"].as_str().unwrap_or("the last pass failed"))
                    @if let Some(at) = a["at"].as_str() { " (" (when(at)) ")" }
                }
                p.hint {
                    "What to do: " (a["hint"].as_str().unwrap_or("check the model, then run `personkit knowledge run --once`"))
                    ". The calls and drops are in " a href="/privacy#knowledge-audit" { "the audit log" } "."
                }
            }
        }
        @if h.pipeline == "on" {
            p.meta.pipeline-on {
                "Pipeline on: " code { (h.model) } ", a pass daily at " (format!("{:02}:00", h.hour)) "; scrubbing "
                (h.scrubbing) "."
                @if let Some(r) = &h.last_run {
                    @let n = |k: &str| r[k].as_u64().unwrap_or(0);
                    " Last pass: " (count(n("turns"), "turn", None)) ", " (count(n("windows"), "window", None)) ", "
                    (count(n("new_entries"), "new entry", Some("new entries"))) "."
                }
            }
        }
    }
}

fn tabs(current: &str, counts: Counts, q: Option<&str>) -> Markup {
    let n = |s: &str| match s {
        "pending" => counts.pending,
        "approved" => counts.approved,
        _ => counts.rejected,
    };
    let href = |status: &str| {
        let mut pairs = vec![("status".to_owned(), status.to_owned())];
        if let Some(q) = q {
            pairs.push(("q".to_owned(), q.to_owned()));
        }
        format!("/knowledge?{}", encode_query(&pairs))
    };
    html! {
        nav.tabs aria-label="Status" {
            ul {
                @for (status, label) in TABS {
                    @let href = href(status);
                    li {
                        @if status == current {
                            a href=(href) aria-current="page" { (label) " " span.n { (n(status)) } }
                        } @else {
                            a href=(href) { (label) " " span.n { (n(status)) } }
                        }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Handlers

/// `GET /knowledge?status=pending|approved|rejected&q=words`.
pub(super) async fn list(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    uri: Uri,
) -> Page {
    let p = Params::parse(uri.query(), &["status", "q", "done", "entry"], HINT)?;
    let status = p.get("status").unwrap_or_else(|| "pending".into());
    if !TABS.iter().any(|(s, _)| *s == status) {
        return Err(PageError::new(
            StatusCode::BAD_REQUEST,
            "That did not work",
            format!("there is no {status:?} tab"),
            "use pending, approved or rejected",
        ));
    }
    let q = p.get("q").filter(|q| !q.trim().is_empty());
    let done_entry = p.get("entry");
    let path = st.db.path().to_path_buf();
    let (status2, q2) = (status.clone(), q.clone());
    let (health, list, sources, done_topic) = run(&st, HINT, move |c| {
        let h = health(c, &path)?;
        let list = rows::entries(
            c,
            &Filter {
                status: Some(status2),
                words: q2,
                limit: PER_PAGE + 1,
            },
        )?;
        let sources = source_views(c, &list)?;
        let done_topic = match done_entry {
            Some(id) => rows::entry(c, &id)?.map(|e| e.topic),
            None => None,
        };
        Ok((h, list, sources, done_topic))
    })
    .await?;
    let now = st.clock.now();
    let more = list.len() > PER_PAGE as usize;
    let shown = &list[..list.len().min(PER_PAGE as usize)];
    let ctx = ctx(st, secret);
    let csrf = ctx.csrf(DECIDE);
    Ok(layout(
        &ctx,
        "/knowledge",
        "Knowledge",
        html! {
            @if let (Some(done), Some(topic)) = (p.get("done"), &done_topic) {
                p.notice role="status" {
                    @match done.as_str() {
                        "approved" => { "Approved: “" (topic) "”. Your agents can read it now (MCP " code { "get_knowledge" } ", exports)." }
                        "rejected" => { "Rejected: “" (topic) "”. It stays in the Rejected tab, so the same words said again do not come back as new." }
                        _ => { "Saved: “" (topic) "”." }
                    }
                }
            }
            (health_notice(&health))
            p.intro { "What your conversations show about how you think, and notes your agents proposed. Nothing here reaches an agent or an export until you approve it." }
            (tabs(&status, health.entries, q.as_deref()))
            form.filters method="get" action="/knowledge" role="search" {
                input type="hidden" name="status" value=(status);
                div.grow { label for="q" { "Words" } input #q type="search" name="q" value=[q.as_deref()] placeholder="in the topic, position, reasoning or tags"; }
                div.buttons { button type="submit" { "Find" } @if q.is_some() { a href={"/knowledge?status=" (status)} { "Clear" } } }
            }
            @if shown.is_empty() {
                p.empty {
                    @match (status.as_str(), q.is_some()) {
                        (_, true) => { "No " (status) " entry matches." }
                        ("pending", _) => { "Nothing waits for you." @if health.pipeline != "on" { " The pipeline is off (see above); agents' proposals would land here." } }
                        _ => { "No " (status) " entries." }
                    }
                }
            }
            @for e in shown { (entry_card(&csrf, e, &sources, now, false)) }
            @if more {
                p.count { "Showing the newest " (PER_PAGE) "; narrow with words, or list them all with " code { "personkit knowledge list --status " (status) " --limit 500" } "." }
            }
        },
    ))
}

async fn load_entry(
    st: &AppState,
    id: String,
) -> Result<(Entry, HashMap<String, SourceView>), PageError> {
    let found = run(st, HINT, move |c| {
        let e = rows::entry(c, &id)?
            .ok_or_else(|| ReadError::NotFound(format!("no knowledge entry {id}")))?;
        let s = source_views(c, std::slice::from_ref(&e))?;
        Ok((e, s))
    })
    .await;
    found.map_err(|e| {
        if e.status == StatusCode::NOT_FOUND {
            PageError::new(
                StatusCode::NOT_FOUND,
                "Not found",
                e.body.message,
                "it may have been removed when its turns were forgotten; open Knowledge from the menu",
            )
        } else {
            PageError::from(e)
        }
    })
}

/// The submitted (or stored) words of the edit form.
struct Draft {
    topic: String,
    position: String,
    reasoning: String,
    context: String,
    tags: String,
    confidence: String,
    stability: String,
}

impl Draft {
    fn of(e: &Entry) -> Draft {
        Draft {
            topic: e.topic.clone(),
            position: e.position.clone(),
            reasoning: e.reasoning.clone(),
            context: e.context.clone().unwrap_or_default(),
            tags: e.tags.join(", "),
            confidence: e.confidence.clone(),
            stability: e.stability.clone(),
        }
    }

    /// The edit this draft makes, or what is wrong with it.
    fn check(&self) -> Result<Edit, String> {
        let tags: Vec<String> = self
            .tags
            .split(',')
            .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|t| !t.is_empty())
            .collect();
        let trim = |s: &String| s.trim().to_owned();
        let edit = Edit {
            topic: Some(trim(&self.topic)),
            position: Some(trim(&self.position)),
            reasoning: Some(trim(&self.reasoning)),
            context: Some(trim(&self.context)),
            confidence: Some(self.confidence.clone()),
            stability: Some(self.stability.clone()),
            tags: Some(tags),
        };
        personkit_knowledge::decisions::check_edit(&edit)?;
        Ok(edit)
    }
}

fn entry_page(
    ctx: &Ctx,
    e: &Entry,
    sources: &HashMap<String, SourceView>,
    draft: &Draft,
    problem: Option<&str>,
    done: bool,
    now: OffsetDateTime,
) -> axum::response::Response {
    let action = format!("/knowledge/{}/edit", e.id);
    let csrf = ctx.csrf(&action);
    let select = |name: &str, options: &[&str], chosen: &str| {
        html! {
            select id=(name) name=(name) {
                @for o in options { option value=(o) selected[*o == chosen] { (o) } }
            }
        }
    };
    layout(
        ctx,
        "/knowledge",
        &e.topic,
        html! {
            p.meta { a href={"/knowledge?status=" (e.status)} { "← " (e.status) " entries" } }
            (entry_card(&ctx.csrf(DECIDE), e, sources, now, true))
            section #edit aria-labelledby="edit-h" {
                h2 #edit-h { "Edit" }
                p.hint { "Correct the words; the entry keeps its status, sources and scores." }
                @if done { p.notice role="status" { "Saved." } }
                @if let Some(p) = problem { p.warning role="alert" { "Not saved: " (p) "." } }
                form.edit method="post" action=(action) {
                    input type="hidden" name="csrf" value=(csrf);
                    label for="topic" { "Topic" }
                    input #topic type="text" name="topic" value=(draft.topic) required maxlength="200";
                    label for="position" { "Position" }
                    textarea #position name="position" rows="3" required maxlength="1000" { (draft.position) }
                    label for="reasoning" { "Reasoning (why)" }
                    textarea #reasoning name="reasoning" rows="5" required maxlength="2000" { (draft.reasoning) }
                    label for="context" { "Context it holds in (empty: in general)" }
                    textarea #context name="context" rows="2" maxlength="1000" { (draft.context) }
                    label for="tags" { "Tags (comma-separated)" }
                    input #tags type="text" name="tags" value=(draft.tags);
                    div.row {
                        div { label for="confidence" { "Confidence" } (select("confidence", &CONFIDENCE, &draft.confidence)) }
                        div { label for="stability" { "Stability" } (select("stability", &STABILITY, &draft.stability)) }
                    }
                    div.buttons { button type="submit" { "Save" } " " a href={"/knowledge/" (e.id)} { "Cancel" } }
                }
            }
        },
    )
}

/// `GET /knowledge/{id}`: one entry with its edit form.
pub(super) async fn show(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    Path(id): Path<String>,
    uri: Uri,
) -> Page {
    let p = Params::parse(uri.query(), &["done"], HINT)?;
    let (e, sources) = load_entry(&st, id).await?;
    let now = st.clock.now();
    let ctx = ctx(st, secret);
    let draft = Draft::of(&e);
    Ok(entry_page(
        &ctx,
        &e,
        &sources,
        &draft,
        None,
        p.get("done").is_some(),
        now,
    ))
}

/// `POST /knowledge/{id}/edit`: saves the corrected words (a mistake shows the form again with what was sent).
pub(super) async fn edit(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    Extension(to): Extension<PostedTo>,
    Path(id): Path<String>,
    body: Body,
) -> Page {
    let ctx = ctx(st.clone(), secret);
    let f = posted_fields(
        &ctx,
        &to,
        body,
        EDIT_FORM_BYTES,
        &[
            "csrf",
            "topic",
            "position",
            "reasoning",
            "context",
            "tags",
            "confidence",
            "stability",
        ],
    )
    .await?;
    let (e, sources) = load_entry(&st, id).await?;
    let field = |k: &str| f.get(k).unwrap_or_default();
    let draft = Draft {
        topic: field("topic"),
        position: field("position"),
        reasoning: field("reasoning"),
        context: field("context"),
        tags: field("tags"),
        confidence: f.get("confidence").unwrap_or_else(|| e.confidence.clone()),
        stability: f.get("stability").unwrap_or_else(|| e.stability.clone()),
    };
    let now = st.clock.now();
    let edit = match draft.check() {
        Ok(edit) => edit,
        Err(problem) => {
            let mut resp = entry_page(&ctx, &e, &sources, &draft, Some(&problem), false, now);
            *resp.status_mut() = StatusCode::BAD_REQUEST;
            return Ok(resp);
        }
    };
    let db = st.db.clone();
    let entry_id = e.id.clone();
    tokio::task::spawn_blocking(move || {
        db.write(|c| personkit_knowledge::decisions::edit(c, &entry_id, &edit, "dashboard", now))
    })
    .await
    .map_err(|_| PageError::from(AppError::internal()))?
    .map_err(|e| PageError::from(AppError::from(e)))?;
    Ok(Redirect::to(&format!("/knowledge/{}?done=edited#edit", e.id)).into_response())
}

/// `POST /knowledge/decide` with `entry` and `decision` (`approve` or `reject`): records the user's decision (and
/// an audit row) and goes back to the tab the entry was on.
pub(super) async fn decide(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    Extension(to): Extension<PostedTo>,
    body: Body,
) -> Page {
    let ctx = ctx(st.clone(), secret);
    let (approve, id) = posted_decision(&ctx, &to, body, "entry", "Knowledge").await?;
    let status = if approve { "approved" } else { "rejected" };
    let now = st.clock.now();
    let db = st.db.clone();
    let before = tokio::task::spawn_blocking(move || {
        db.write(|c| personkit_knowledge::decisions::decide(c, &id, status, "dashboard", now))
    })
    .await
    .map_err(|_| PageError::from(AppError::internal()))?
    .map_err(|e| PageError::from(AppError::from(e)))?;
    let Some(e) = before else {
        return Err(PageError::new(
            StatusCode::NOT_FOUND,
            "Not found",
            "there is no such knowledge entry",
            "it may have been removed when its turns were forgotten; reload Knowledge",
        ));
    };
    tracing::info!(status, "knowledge entry decided from the dashboard");
    let q = encode_query(&[
        ("status".to_owned(), e.status.clone()),
        ("done".to_owned(), status.to_owned()),
        ("entry".to_owned(), e.id.clone()),
    ]);
    Ok(Redirect::to(&format!("/knowledge?{q}")).into_response())
}

// ---------------------------------------------------------------------------------------------------------------
// The audit log on the Privacy page

/// The Privacy page's knowledge section: the model and scrubbing in force and the newest audit rows.
pub(super) async fn audit_section(st: &AppState) -> Result<Markup, PageError> {
    let path = st.db.path().to_path_buf();
    let (h, log) = run(st, "reload the page", move |c| {
        Ok((health(c, &path)?, rows::audit_log(c, None, AUDIT_ROWS + 1)?))
    })
    .await?;
    let now = st.clock.now();
    let more = log.len() > AUDIT_ROWS as usize;
    let shown = &log[..log.len().min(AUDIT_ROWS as usize)];
    Ok(html! {
        section #knowledge-audit aria-labelledby="audit-h" {
            h2 #audit-h { "Knowledge: what was sent to a model, and what was kept" }
            dl.facts {
                dt { "Language model" } dd { @if h.pipeline == "on" { code { (h.model) } } @else { "none: the knowledge pipeline is off (" (h.model) ")" } }
                @if h.pipeline == "on" { dt { "Scrubbing" } dd { (h.scrubbing) } }
                dt { "Entries" } dd { a href="/knowledge" { (h.entries.pending) " pending" } ", " (h.entries.approved) " approved, " (h.entries.rejected) " rejected" }
            }
            p { "Every model call (where the text went, whether it was scrubbed and what was replaced) and every decision (kept, dropped and why; your approvals and edits; agents' proposals), newest first. The map of pseudonyms to names stays in the corpus and is never shown or sent." }
            @if shown.is_empty() {
                p.empty { "Nothing yet: no pass has run and no agent has proposed anything." }
            } @else {
                table.audit {
                    thead { tr { th scope="col" { "When" } th scope="col" { "What" } th scope="col" { "Detail" } th scope="col" { "Outcome" } } }
                    tbody {
                        @for r in shown { (audit_row(r, now)) }
                    }
                }
                @if more {
                    p.count { "The newest " (AUDIT_ROWS) " rows. All of them: " code { "personkit knowledge audit --limit 1000" } " (or " code { "--kind call" } ", " code { "decision" } ", " code { "alert" } "…)." }
                }
            }
        }
    })
}

/// How text left for a model, in words.
fn sent_as(s: &str) -> &'static str {
    match s {
        "scrubbed" => "scrubbed",
        "unscrubbed" => "not scrubbed (scrub = \"off\")",
        "loopback" => "as stored, to a server on this machine",
        "in_process" => "as stored, in process (nothing left the relay)",
        _ => "unknown",
    }
}

/// `{"email": 2, "name": 1}` → `2 email, 1 name`.
fn replaced(v: &Value) -> String {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, n)| n.as_u64().filter(|n| *n > 0).map(|n| format!("{n} {k}")))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

fn audit_row(r: &AuditRow, now: OffsetDateTime) -> Markup {
    let d = &r.detail;
    let s = |k: &str| d[k].as_str().unwrap_or("");
    let n = |k: &str| d[k].as_u64().unwrap_or(0);
    let outcome = match (r.kind.as_str(), d["stopped"].as_str()) {
        ("run", Some(_)) => "stopped early",
        ("run", None) => "done",
        _ => s("outcome"),
    };
    let class = match outcome {
        "ok" | "kept" | "approved" | "pending" | "edited" | "reinforced" | "done" => "good",
        "dropped" | "rejected" => "bad",
        _ if r.kind == "alert" => "bad",
        _ => "",
    };
    html! {
        tr data-kind=(r.kind) {
            td.when { (time_el(&r.at, now)) }
            td {
                @match r.kind.as_str() {
                    "call" => { "Model call (" (s("stage")) ")" }
                    "decision" => { "Decision" }
                    "run" => { "Pass" }
                    "alert" => { "Alert" }
                    "approval" => { "Your decision" }
                    "proposal" => { "Agent proposal" }
                    other => { (other) }
                }
                @if !r.messages.is_empty() { br; span.meta { (r.messages.len()) " turn" @if r.messages.len() != 1 { "s" } } }
            }
            td.detail {
                @if d["forgotten"].as_bool() == Some(true) {
                    span.meta { "Details removed: the turns it spoke about were forgotten." }
                } @else {
                    @match r.kind.as_str() {
                        "call" => {
                            "To " code { (s("model")) } " at " code { (s("endpoint")) } "; text sent " strong { (sent_as(s("sent_as"))) }
                            @let rep = replaced(&d["replaced"]);
                            @if !rep.is_empty() { " (replaced so far this pass: " (rep) ")" }
                            "; " (n("prompt_tokens")) " + " (n("completion_tokens")) " tokens, " (n("ms")) " ms"
                            @if let Some(e) = d["error"].as_str() { br; span.error { (e) } }
                        }
                        "decision" => {
                            (s("action")) ": “" (s("topic")) "” — " (s("why"))
                            @if let Some(id) = d["entry"].as_str() { " · " a href={"/knowledge/" (id)} { "entry" } }
                        }
                        "run" => {
                            (count(n("turns"), "turn", None)) ", " (count(n("windows"), "window", None)) ", "
                            (count(n("calls"), "call", None)) " to " code { (s("model")) }
                            ", text sent " (sent_as(s("sent_as"))) "; " (count(n("candidates"), "candidate", None)) ": " (n("new_entries")) " new, "
                            (n("reinforced")) " reinforced, " (n("variants")) " variants; dropped " (n("dropped_invalid")) " invalid, "
                            (n("dropped_over_cap")) " over the cap, " (n("dropped_by_judge")) " by the judge"
                            @let rep = replaced(&d["replaced"]);
                            @if !rep.is_empty() { "; replaced " (rep) }
                            @if let Some(why) = d["stopped"].as_str() { br; span.error { "Stopped early: " (why) } }
                        }
                        "alert" => { (s("message")) @if !s("hint").is_empty() { br; span.hint { "What to do: " (s("hint")) } } }
                        "approval" => {
                            @if let Some(fields) = d["edited"].as_array() {
                                "Edited " (fields.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
                            } @else {
                                (s("status"))
                            }
                            " by " (s("by"))
                            @if let Some(id) = d["entry"].as_str() { " · " a href={"/knowledge/" (id)} { "entry " code { (compact::short(id)) } } }
                        }
                        "proposal" => {
                            "The agent " strong { (s("agent")) } " proposed “" (s("topic")) "”"
                            @if let Some(reason) = d["reason"].as_str() { " — its reason: " (reason) }
                            @if let Some(id) = d["entry"].as_str() { " · " a href={"/knowledge/" (id)} { "entry" } }
                        }
                        _ => {}
                    }
                }
            }
            td { span class={"outcome " (class)} { (outcome) } }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_edit_needs_words_within_bounds() {
        let ok = Draft {
            topic: "release timing".into(),
            position: "Never ship on a Friday".into(),
            reasoning: "A Friday release once cost a weekend of rollbacks".into(),
            context: String::new(),
            tags: " releases , Ops  team,".into(),
            confidence: "high".into(),
            stability: "durable".into(),
        };
        let edit = ok.check().unwrap();
        assert_eq!(edit.tags.unwrap(), vec!["releases", "Ops team"]);
        let empty = Draft {
            topic: "  ".into(),
            ..clone(&ok)
        };
        assert!(empty.check().unwrap_err().contains("topic"));
        let long = Draft {
            reasoning: "x".repeat(2_001),
            ..clone(&ok)
        };
        assert!(long.check().unwrap_err().contains("at most 2000"));
        let odd = Draft {
            confidence: "total".into(),
            ..clone(&ok)
        };
        assert!(odd.check().is_err());
        let many = Draft {
            tags: "a,b,c,d,e,f,g,h,i".into(),
            ..clone(&ok)
        };
        assert!(many.check().unwrap_err().contains("at most 8"));
    }

    fn clone(d: &Draft) -> Draft {
        Draft {
            topic: d.topic.clone(),
            position: d.position.clone(),
            reasoning: d.reasoning.clone(),
            context: d.context.clone(),
            tags: d.tags.clone(),
            confidence: d.confidence.clone(),
            stability: d.stability.clone(),
        }
    }

    #[test]
    fn audit_rows_say_where_text_went_and_never_print_raw_detail() {
        let now = OffsetDateTime::now_utc();
        let row = |kind: &str, detail: Value| AuditRow {
            id: 1,
            at: "2026-11-27T22:00:00.000Z".into(),
            run_id: "r".into(),
            kind: kind.into(),
            messages: vec!["m1".into()],
            detail,
        };
        let call = audit_row(
            &row(
                "call",
                json!({"stage": "extract", "model": "openai:stand-in", "endpoint": "https://api.example/v1",
                       "sent_as": "scrubbed", "replaced": {"email": 2, "name": 1, "phone": 0},
                       "prompt_tokens": 50, "completion_tokens": 20, "ms": 12, "outcome": "ok"}),
            ),
            now,
        )
        .into_string();
        assert!(
            call.contains("https://api.example/v1") && call.contains("scrubbed"),
            "{call}"
        );
        assert!(
            call.contains("2 email, 1 name") && !call.contains("0 phone"),
            "{call}"
        );
        let forgotten = audit_row(
            &row("decision", json!({"forgotten": true, "outcome": "kept"})),
            now,
        )
        .into_string();
        assert!(forgotten.contains("Details removed"), "{forgotten}");
        let unknown =
            audit_row(&row("other", json!({"secret": "sk-should-not-show"})), now).into_string();
        assert!(!unknown.contains("sk-should-not-show"), "{unknown}");
    }
}
