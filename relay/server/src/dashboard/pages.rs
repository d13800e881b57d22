//! The dashboard's pages: Overview, Threads, Thread (with Export and Forget), Search, Devices, Privacy (Knowledge
//! is in `knowledge.rs`). Each
//! handler reads through `personkit_store::read` / `personkit_search::query` and renders with maud, which
//! escapes every value it is given.

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::{DOCTYPE, Markup, html};
use personkit_search::params::{Params as SearchParams, build_query_with};
use personkit_search::{QueryResult, SearchError};
use personkit_store::auth::{self, AuthError};
use personkit_store::budget::{Budget, READ_BUDGET};
use personkit_store::clock::{fmt_time, parse_time};
use personkit_store::forget::{self, ForgetError, Selection};
use personkit_store::read::{self, ReadError, ThreadFilter, compact};
use time::OffsetDateTime;

use super::{Ctx, PageError, PostedTo, SessionSecret, markdown, posted_form};
use crate::error::AppError;
use crate::routes::read::{Params, run};
use crate::state::AppState;

pub(super) type Page = Result<Response, PageError>;

const NAV: [(&str, &str); 9] = [
    ("/", "Overview"),
    ("/today", "Today"),
    ("/threads", "Threads"),
    ("/search", "Search"),
    ("/entities", "Entities"),
    ("/knowledge", "Knowledge"),
    ("/memory", "Memory"),
    ("/devices", "Devices"),
    ("/privacy", "Privacy"),
];

/// Turns per thread page.
const TURNS_PER_PAGE: u32 = 100;
/// Entities a thread page links.
const THREAD_ENTITIES: usize = 30;
/// Threads per list page.
const THREADS_PER_PAGE: u32 = 50;

pub(super) fn layout(ctx: &Ctx, current: &str, title: &str, body: Markup) -> Response {
    let csrf = ctx.csrf("/signout");
    let doc = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                title { (title) " · personkit" }
                link rel="stylesheet" href="/assets/app.css";
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    span.brand { "personkit" }
                    nav aria-label="Main" {
                        ul {
                            @for (href, label) in NAV {
                                li {
                                    @if href == current {
                                        a href=(href) aria-current="page" { (label) }
                                    } @else {
                                        a href=(href) { (label) }
                                    }
                                }
                            }
                        }
                    }
                    form.signout method="post" action="/signout" {
                        input type="hidden" name="csrf" value=(csrf);
                        button type="submit" { "Sign out" }
                    }
                }
                main #main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    };
    Html(doc.into_string()).into_response()
}

pub(super) fn ctx(st: AppState, secret: SessionSecret) -> Ctx {
    Ctx { st, secret }
}

/// `browser-ext:chatgpt` → `chatgpt`.
pub(super) fn site_name(surface: &str) -> &str {
    surface.split_once(':').map_or(surface, |(_, s)| s)
}

/// A stored time as people read it: `2026-11-22 09:01 UTC`.
pub(super) fn when(t: &str) -> String {
    format!("{} UTC", compact::minute(t))
}

fn ago(t: &str, now: OffsetDateTime) -> String {
    let Some(at) = parse_time(t) else {
        return String::new();
    };
    let s = (now - at).whole_seconds().max(0);
    match s {
        0..60 => "just now".into(),
        60..3600 => format!("{} min ago", s / 60),
        3600..172_800 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86_400),
    }
}

pub(super) fn time_el(t: &str, now: OffsetDateTime) -> Markup {
    html! { time datetime=(t) title=(when(t)) { (ago(t, now)) } }
}

fn bytes(n: u64) -> String {
    match n {
        0..1024 => format!("{n} B"),
        1024..1_048_576 => format!("{:.1} KiB", n as f64 / 1024.0),
        1_048_576..1_073_741_824 => format!("{:.1} MiB", n as f64 / 1_048_576.0),
        _ => format!("{:.2} GiB", n as f64 / 1_073_741_824.0),
    }
}

/// A date the user picked as an exclusive upper bound: a plain date means "through the end of that day".
fn until_bound(p: &Params, now: OffsetDateTime, hint: &str) -> Result<Option<String>, AppError> {
    match p.get("until") {
        Some(d) if d.len() == 10 => {
            let start = p.time("until", now, hint)?;
            Ok(start
                .as_deref()
                .and_then(parse_time)
                .map(|t| fmt_time(t + time::Duration::days(1))))
        }
        _ => p.time("until", now, hint),
    }
}

fn notice(p: &Params) -> Markup {
    html! {
        @if let Some(n) = p.get("forgot") {
            p.notice role="status" { "Forgotten: " (n.parse::<u64>().unwrap_or(0)) " messages. They are gone from every page, from search, and will not come back." }
        }
    }
}

pub(super) fn light(status: read::StatusName) -> Markup {
    let (class, label) = match status {
        read::StatusName::Green => ("green", "green"),
        read::StatusName::Yellow => ("yellow", "yellow"),
        read::StatusName::Red => ("red", "red"),
    };
    html! { span class={"light " (class)} { span.dot aria-hidden="true" {} (label) } }
}

// ---------------------------------------------------------------------------------------------------------------
// Overview

/// A harvest retention warning as the harvest pass saved it (`personkit_import::harvest::retention::Warning`).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct ToolWarning {
    source: String,
    level: String,
    message: String,
    fix: String,
}

pub(super) async fn overview(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
) -> Page {
    let now = st.clock.now();
    let key = st.embedder.as_ref().map(|e| e.model_key());
    let key2 = key.clone();
    let (surfaces, counts, coverage, tools) = run(&st, "reload the page", move |c| {
        let s = read::surface_states(c, now)?;
        let n = read::counts(c, now)?;
        let cov = match &key2 {
            Some(k) => Some(personkit_store::vectors::coverage(c, k)?),
            None => None,
        };
        let warnings: Vec<(String, Vec<ToolWarning>)> = personkit_store::harvest::warnings(c)?
            .into_iter()
            .map(|(name, json)| (name, serde_json::from_str(&json).unwrap_or_default()))
            .collect();
        let only = personkit_store::harvest::only_copies(c)?.len();
        let knowledge = personkit_store::knowledge::counts(c)?;
        Ok::<_, ReadError>((s, n, cov, (warnings, only, knowledge)))
    })
    .await?;
    let (tool_warnings, only_copies, knowledge) = tools;
    let size = personkit_store::db::size_on_disk(st.db.path());
    let ctx = ctx(st, secret);
    Ok(layout(
        &ctx,
        "/",
        "Overview",
        html! {
            p.today-link { a href="/today" { "Today" } ": what was captured today and this week, per site and per project, and the last 90 days." }
            section aria-labelledby="capture" {
                h2 #capture { "Capture, per site" }
                @if surfaces.is_empty() {
                    p.empty { "Nothing captured yet. Pair the extension (Devices → Pair a new device) and chat on a supported site." }
                } @else {
                    table {
                        thead { tr {
                            th scope="col" { "Site" } th scope="col" { "State" } th scope="col" { "Last capture" }
                            th scope="col" { "Turns 24 h" } th scope="col" { "Threads 24 h" } th scope="col" { "Why" }
                        } }
                        tbody {
                            @for s in &surfaces {
                                tr {
                                    th scope="row" title=(s.surface) { (site_name(&s.surface)) }
                                    td { (light(s.status)) }
                                    td { @if let Some(t) = &s.last_accepted_at { (time_el(t, now)) } @else { "never" } }
                                    td.num { (s.turns_24h) }
                                    td.num { (s.threads_24h) }
                                    td {
                                        (s.reason)
                                        @if let (Some(code), Some(msg)) = (&s.last_error_code, &s.last_error_message) {
                                            br; span.error { "Last error: " code { (code) } " — " (msg)
                                                @if let Some(at) = &s.last_error_at { " (" (time_el(at, now)) ")" } }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if tool_warnings.iter().any(|(_, w)| !w.is_empty()) || only_copies > 0 {
                section aria-labelledby="tools" {
                    h2 #tools { "Local AI tools" }
                    @for (_, ws) in &tool_warnings {
                        @for w in ws {
                            p class={"warning " (w.level)} role="alert" {
                                strong { (w.source) ": " } (w.message) br; span.hint { "What to do: " (w.fix) }
                            }
                        }
                    }
                    @if only_copies > 0 {
                        p.notice { (only_copies) " conversation" @if only_copies != 1 { "s" } " whose transcript files their tool deleted: this corpus holds the only copy (marked on each thread)." }
                    }
                }
            }
            section aria-labelledby="corpus" {
                h2 #corpus { "Corpus" }
                dl.facts {
                    dt { "Threads" } dd { (counts.threads) }
                    dt { "Turns" } dd { (counts.turns) }
                    dt { "Stored contents (revisions included)" } dd { (counts.messages) }
                    dt { "Storage" } dd { (bytes(size)) }
                    dt { "Knowledge" } dd {
                        a href="/knowledge" { (knowledge.pending) " waiting for your approval" }
                        ", " (knowledge.approved) " approved"
                    }
                    dt { "Search" } dd {
                        @match (&key, &coverage) {
                            (Some(k), Some(c)) => {
                                "hybrid (keywords and meaning), model " code { (k) } ": "
                                (c.messages_embedded.min(c.messages_total)) " of " (c.messages_total) " messages embedded"
                                @if c.pending() > 0 { ", " (c.pending()) " waiting" }
                            }
                            _ => { "keywords only (no embedder configured; see README → Search)" }
                        }
                    }
                }
            }
        },
    ))
}

// ---------------------------------------------------------------------------------------------------------------
// Threads

const THREADS_HINT: &str = "pick a site and dates in the form, or clear the filters";

async fn site_names(st: &AppState) -> Result<Vec<String>, PageError> {
    Ok(run(st, "reload the page", move |c| Ok(read::surface_names(c)?)).await?)
}

fn site_select(sites: &[String], chosen: Option<&str>) -> Markup {
    html! {
        label for="site" { "Site" }
        select #site name="site" {
            option value="" { "All sites" }
            @for s in sites {
                option value=(s) selected[chosen == Some(s.as_str())] { (site_name(s)) }
            }
        }
    }
}

/// The heat filter beside the site filter: how much a thread was used lately (`personkit_heat`).
fn tier_select(chosen: Option<personkit_heat::Tier>) -> Markup {
    html! {
        label for="tier" { "Use" }
        select #tier name="tier" title="how much you used the thread lately: opened, read by an agent, new turns" {
            option value="" { "Any" }
            @for t in personkit_heat::Tier::ALL {
                option value=(t.as_str()) selected[chosen == Some(t)] { (t.as_str()) }
            }
        }
    }
}

pub(super) async fn threads(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    uri: Uri,
) -> Page {
    let p = Params::parse(
        uri.query(),
        &[
            "site", "tier", "since", "until", "words", "cursor", "forgot",
        ],
        THREADS_HINT,
    )?;
    let now = st.clock.now();
    let tier = p.tier(THREADS_HINT)?;
    let filter = ThreadFilter {
        surface: p.get("site"),
        since: p.time("since", now, THREADS_HINT)?,
        until: until_bound(&p, now, THREADS_HINT)?,
        words: p.get("words"),
        tier,
    };
    let cursor = p.get("cursor");
    let list = run(&st, THREADS_HINT, move |c| {
        read::list_threads(c, &filter, THREADS_PER_PAGE, cursor.as_deref())
    })
    .await?;
    let sites = site_names(&st).await?;
    let next = list.page.next_cursor.as_ref().map(|c| {
        let mut q: Vec<(String, String)> = ["site", "tier", "since", "until", "words"]
            .iter()
            .filter_map(|k| p.get(k).map(|v| ((*k).to_owned(), v)))
            .collect();
        q.push(("cursor".into(), c.clone()));
        format!("/threads?{}", encode_query(&q))
    });
    let ctx = ctx(st, secret);
    Ok(layout(
        &ctx,
        "/threads",
        "Threads",
        html! {
            (notice(&p))
            form.filters method="get" action="/threads" role="search" {
                div { (site_select(&sites, p.get("site").as_deref())) }
                div { (tier_select(tier)) }
                div { label for="since" { "From" } input #since type="date" name="since" value=[p.get("since")]; }
                div { label for="until" { "Through" } input #until type="date" name="until" value=[p.get("until")]; }
                div { label for="words" { "Words" } input #words type="search" name="words" value=[p.get("words")] placeholder="in the title or one turn"; }
                div.buttons { button type="submit" { "Filter" } a href="/threads" { "Clear" } }
            }
            p.count { (list.page.total) " threads" }
            @if list.threads.is_empty() {
                p.empty { "No thread matches." }
            } @else {
                table.threads {
                    thead { tr { th scope="col" { "Title" } th scope="col" { "Site" } th scope="col" { "Turns" } th scope="col" { "Complete?" } th scope="col" { "Last activity" } } }
                    tbody {
                        @for t in &list.threads {
                            tr {
                                td.title { a href={"/threads/" (t.id)} { (t.title.as_deref().filter(|s| !s.trim().is_empty()).unwrap_or("Untitled")) } }
                                td title=(t.surface) { (site_name(&t.surface)) }
                                td.num { (t.turns) }
                                td { (completeness(&t.completeness, now)) }
                                td.when { (time_el(&t.last_seen_at, now)) }
                            }
                        }
                    }
                }
            }
            @if let Some(href) = next { p.pager { a href=(href) rel="next" { "Older threads →" } } }
        },
    ))
}

/// A thread's completeness as a short label with its explanation in `title` (see `read::Completeness`).
fn completeness(c: &read::Completeness, now: OffsetDateTime) -> Markup {
    let (class, label, why) = match c.state {
        read::CompletenessState::Complete => (
            "complete",
            "complete".to_owned(),
            "every turn the site numbered, up to the newest, was captured".to_owned(),
        ),
        read::CompletenessState::Gaps => (
            "gaps",
            format!("{} missing", c.missing),
            format!(
                "the site numbered {} turn(s) up to the newest that no capture delivered (scrolled past, or the tab closed while they loaded); open the conversation again to fill them",
                c.missing
            ),
        ),
        read::CompletenessState::Unknown => (
            "unknown",
            "not checked".to_owned(),
            "this site does not number its turns, so gaps cannot be seen".to_owned(),
        ),
    };
    html! {
        span class={"completeness " (class)} title=(why) { (label) }
        @if let Some(since) = &c.adapter_stale_since {
            br; span.completeness.gaps title="the extension reported that it no longer reads this site's pages; turns since then may be missing" {
                "site not read since " (ago(since, now))
            }
        }
    }
}

pub(super) fn encode_query(pairs: &[(String, String)]) -> String {
    fn enc(s: &str) -> String {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    }
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

// ---------------------------------------------------------------------------------------------------------------
// Thread

const THREAD_HINT: &str = "open the thread from the Threads page";

fn original_link(url: Option<&str>) -> Option<&str> {
    url.filter(|u| u.starts_with("https://") || u.starts_with("http://"))
}

pub(super) async fn thread(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    Path(id): Path<String>,
    uri: Uri,
) -> Page {
    let p = Params::parse(uri.query(), &["cursor", "from"], THREAD_HINT)?;
    let cursor = p.get("cursor");
    // `from=search` marks a search hit opened; it counts as a use like any other opening.
    match p.get("from").as_deref() {
        None | Some("search") => {}
        Some(other) => {
            return Err(PageError::new(
                StatusCode::BAD_REQUEST,
                "That did not work",
                format!("from={other:?} is not a place a thread is opened from"),
                "open the thread from the Threads or Search page",
            ));
        }
    }
    let opened = cursor.is_none();
    let (d, only_copy, graph) = run(&st, THREAD_HINT, move |c| {
        let d = read::get_thread(c, &id, false, TURNS_PER_PAGE, cursor.as_deref())?;
        let only = personkit_store::harvest::only_copy(c, &d.thread.id)?;
        let graph = personkit_store::graph::thread_subgraph(c, &d.thread.id, THREAD_ENTITIES)?;
        Ok::<_, ReadError>((d, only, graph))
    })
    .await?;
    let now = st.clock.now();
    // Opening a thread is a use of it (heat); its further pages are the same use.
    if opened {
        let (db, thread_id) = (st.db.clone(), d.thread.id.clone());
        let counted = tokio::task::spawn_blocking(move || {
            db.write(|c| personkit_heat::record_access(c, "thread", &thread_id, now))
        })
        .await;
        if !matches!(counted, Ok(Ok(()))) {
            tracing::warn!("an opened thread was not counted as a use");
        }
    }
    let t = &d.thread;
    let title = t
        .title
        .clone()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "Untitled".into());
    let ctx = ctx(st, secret);
    Ok(layout(
        &ctx,
        "/threads",
        &title,
        html! {
            p.meta {
                span title=(t.surface) { (site_name(&t.surface)) } " · " (t.turns) " turns · last activity " (time_el(&t.last_seen_at, now))
                " · first seen " (when(&t.first_seen_at))
                " · " (completeness(&t.completeness, now))
            }
            (super::entities::thread_entities(&graph))
            @if let Some(o) = &only_copy {
                p.notice.skipped role="note" {
                    strong { "Only copy." } " " (site_name(&t.surface)) " deleted its transcript file (" (when(&o.gone_at)) "); this corpus holds the only copy of this conversation."
                }
            }
            p.actions {
                @if let Some(u) = original_link(t.url.as_deref()) {
                    a href=(u) rel="noopener noreferrer" { "Open the original conversation" } " "
                }
                a.button href={"/threads/" (t.id) "/export.md"} download { "Export as Markdown" } " "
                a.button.danger href={"/threads/" (t.id) "/forget"} { "Forget…" }
            }
            ol.turns start=(d.turns.first().map_or(1, |t| t.index)) {
                @for turn in &d.turns {
                    li class={"turn " (turn.role)} id={"turn-" (turn.id)} {
                        div.turn-head {
                            span.role { (turn.role) }
                            " " time datetime=(turn.time) { (when(&turn.time)) }
                            @if turn.revision > 1 || !turn.revisions.is_empty() { " · revision " (turn.revision) }
                        }
                        (markdown::render(&turn.content))
                        @if !turn.revisions.is_empty() {
                            details.revisions {
                                summary { (turn.revisions.len()) " other revision" @if turn.revisions.len() > 1 { "s" } " at this place (edits, regenerations)" }
                                @for r in &turn.revisions {
                                    section.revision {
                                        h3 { "Revision " (r.revision) ", captured " (when(&r.captured_at)) }
                                        (markdown::render(&r.content))
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if let Some(c) = &d.page.next_cursor {
                p.pager { a href={"/threads/" (t.id) "?cursor=" (c)} rel="next" { "Next turns →" } }
            }
        },
    ))
}

/// The thread as `personkit export --format markdown` writes it (the same renderer and file name).
pub(super) async fn export_markdown(State(st): State<AppState>, Path(id): Path<String>) -> Page {
    let t = run(&st, THREAD_HINT, move |c| {
        // The read layer resolves a short id prefix; the export reads by the full id.
        let full = read::get_thread(c, &id, false, 1, None)?.thread.id;
        personkit_store::archive::export_thread(c, &full)?
            .ok_or_else(|| ReadError::NotFound(format!("no thread {full}")))
    })
    .await?;
    let format = personkit_archive::render::Format::Markdown;
    let path = personkit_archive::names::thread_path(
        &t.surface,
        &t.first_seen_at,
        t.title.as_deref(),
        &t.id,
        format.ext(),
    );
    let name = path.rsplit('/').next().unwrap_or(&path).replace('"', "");
    let mut resp = personkit_archive::render::render(&t, format).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/markdown; charset=utf-8"),
    );
    // The name may hold any Unicode letter: an ASCII fallback plus the RFC 6266 `filename*` form.
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let encoded: String = name
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    if let Ok(v) = HeaderValue::from_str(&format!(
        "attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}"
    )) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(resp)
}

// ---------------------------------------------------------------------------------------------------------------
// Forget

fn forget_error(e: ForgetError) -> PageError {
    match e {
        ForgetError::EmptySelection => PageError::new(
            StatusCode::BAD_REQUEST,
            "Nothing to forget",
            e.to_string(),
            "pick a site or dates on the Privacy page",
        ),
        ForgetError::Db(d) => PageError::from(AppError::from(d)),
    }
}

async fn preview(st: &AppState, sel: Selection) -> Result<forget::Counts, PageError> {
    let db = st.db.clone();
    tokio::task::spawn_blocking(move || db.read(|c| forget::preview(c, &sel)))
        .await
        .map_err(|_| PageError::from(AppError::internal()))?
        .map_err(forget_error)
}

async fn do_forget(st: &AppState, sel: Selection) -> Result<forget::Counts, PageError> {
    let db = st.db.clone();
    let now = st.clock.now();
    let counts = tokio::task::spawn_blocking(move || db.write(|c| forget::forget(c, &sel, now)))
        .await
        .map_err(|_| PageError::from(AppError::internal()))?
        .map_err(forget_error)?;
    tracing::info!(
        messages = counts.messages,
        threads = counts.threads,
        "forgot messages from the dashboard"
    );
    Ok(counts)
}

fn confirm_form(
    ctx: &Ctx,
    action: &str,
    hidden: &[(&str, String)],
    counts: forget::Counts,
    cancel: &str,
) -> Markup {
    let csrf = ctx.csrf(action);
    html! {
        @if counts.messages == 0 {
            p.empty { "Nothing matches: there is nothing to forget." }
            p { a href=(cancel) { "Back" } }
        } @else {
            p.warning {
                "This forgets " strong { (counts.messages) " messages" } " (revisions included) in "
                strong { (counts.threads) " threads" } "; " (counts.whole_threads) " of the threads go entirely. "
                "Their text leaves the corpus, the search index and the vectors, and the same turns will not be stored again if the extension or an import sends them. This cannot be undone."
            }
            form method="post" action=(action) {
                input type="hidden" name="csrf" value=(csrf);
                @for (k, v) in hidden { input type="hidden" name=(k) value=(v); }
                input type="hidden" name="confirm" value=(counts.messages);
                button.danger type="submit" { "Forget " (counts.messages) " messages" }
                " " a href=(cancel) { "Cancel" }
            }
        }
    }
}

pub(super) async fn forget_thread_confirm(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    Path(id): Path<String>,
) -> Page {
    let d = run(&st, THREAD_HINT, move |c| {
        read::get_thread(c, &id, true, 1, None)
    })
    .await?;
    let counts = preview(&st, Selection::thread(&d.thread.id)).await?;
    let ctx = ctx(st, secret);
    let title = d.thread.title.clone().unwrap_or_else(|| "Untitled".into());
    let back = format!("/threads/{}", d.thread.id);
    Ok(layout(
        &ctx,
        "/threads",
        "Forget this thread?",
        html! {
            p { "Thread: " strong { (title) } " (" (site_name(&d.thread.surface)) ", " (d.thread.turns) " turns)" }
            (confirm_form(&ctx, &format!("/threads/{}/forget", d.thread.id), &[], counts, &back))
        },
    ))
}

pub(super) async fn forget_thread(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    Extension(to): Extension<PostedTo>,
    Path(id): Path<String>,
    body: Body,
) -> Page {
    let ctx = ctx(st.clone(), secret);
    posted_form(&ctx, &to, body).await?;
    let id = run(&st, THREAD_HINT, move |c| read::resolve_thread_id(c, &id)).await?;
    let counts = do_forget(&st, Selection::thread(&id)).await?;
    Ok(Redirect::to(&format!("/threads?forgot={}", counts.messages)).into_response())
}

const PRIVACY_HINT: &str = "pick a site and/or dates on the Privacy page";

fn range_selection(p: &Params, now: OffsetDateTime) -> Result<Selection, PageError> {
    Ok(Selection {
        thread: None,
        surface: p.get("site"),
        since: p.time("since", now, PRIVACY_HINT)?,
        until: until_bound(p, now, PRIVACY_HINT)?,
    })
}

pub(super) async fn forget_range_confirm(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    uri: Uri,
) -> Page {
    let p = Params::parse(uri.query(), &["site", "since", "until"], PRIVACY_HINT)?;
    let sel = range_selection(&p, st.clock.now())?;
    let counts = preview(&st, sel).await?;
    let ctx = ctx(st, secret);
    let hidden: Vec<(&str, String)> = ["site", "since", "until"]
        .into_iter()
        .filter_map(|k| p.get(k).map(|v| (k, v)))
        .collect();
    Ok(layout(
        &ctx,
        "/privacy",
        "Forget these turns?",
        html! {
            p {
                "Turns from " strong { (p.get("site").as_deref().map_or("every site", site_name)) }
                @if let Some(s) = p.get("since") { ", from " strong { (s) } }
                @if let Some(u) = p.get("until") { ", through " strong { (u) } }
                "."
            }
            (confirm_form(&ctx, "/privacy/forget", &hidden, counts, "/privacy"))
        },
    ))
}

pub(super) async fn forget_range(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    Extension(to): Extension<PostedTo>,
    body: Body,
) -> Page {
    let ctx = ctx(st.clone(), secret);
    let p = posted_form(&ctx, &to, body).await?;
    let sel = range_selection(&p, st.clock.now())?;
    let counts = do_forget(&st, sel).await?;
    Ok(Redirect::to(&format!("/privacy?forgot={}", counts.messages)).into_response())
}

// ---------------------------------------------------------------------------------------------------------------
// Search

const SEARCH_HINT: &str = "type some words; filters are optional";

/// A snippet with `**matched**` words as `<mark>`: every part escaped, only the marks are markup.
fn snippet(s: &str) -> Markup {
    html! {
        @for (i, part) in s.split("**").enumerate() {
            @if i % 2 == 1 { mark { (part) } } @else { (part) }
        }
    }
}

fn why(hit: &personkit_search::Hit) -> String {
    hit.signals
        .iter()
        .map(|(sig, r)| match sig.as_str() {
            "fts" => format!("its words (keyword rank {})", r.rank),
            "vector" => format!("its meaning (similarity {:.2}, rank {})", r.score, r.rank),
            "entity" => format!("a named entity (rank {})", r.rank),
            "recency" => format!("recency (rank {})", r.rank),
            "date" => "the date asked about".to_owned(),
            "when" => "saying when (the question asks when)".to_owned(),
            "knowledge" => format!("your approved knowledge, which cites it (rank {})", r.rank),
            other => format!("{other} (rank {})", r.rank),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) async fn search(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    uri: Uri,
) -> Page {
    let p = Params::parse(
        uri.query(),
        &["q", "site", "since", "until", "role"],
        SEARCH_HINT,
    )?;
    let now = st.clock.now();
    let q = p.get("q");
    let result: Option<QueryResult> = match &q {
        None => None,
        Some(text) => {
            let params = SearchParams {
                q: Some(text.clone()),
                k: Some(20),
                surface: p.get("site"),
                role: p.get("role"),
                since: p.get("since"),
                until: until_bound(&p, now, SEARCH_HINT)?,
                events: Some(false),
                ..SearchParams::default()
            };
            let query = build_query_with(&params, now, &st.search).map_err(|e| {
                PageError::new(
                    StatusCode::BAD_REQUEST,
                    "That did not work",
                    e.to_string(),
                    SEARCH_HINT,
                )
            })?;
            let (db, indexes, embedder) = (st.db.clone(), st.indexes.clone(), st.embedder.clone());
            let budget = Budget::new(READ_BUDGET);
            let _stop_if_gone = budget.cancel_on_drop();
            let r = tokio::task::spawn_blocking(move || {
                db.read_within(&budget, |conn| {
                    personkit_search::query(conn, &indexes, embedder.as_deref(), &query)
                        .map_err(SearchFailure::Search)
                })
            })
            .await
            .map_err(|_| PageError::from(AppError::internal()))?;
            match r {
                Ok(r) => Some(r),
                Err(SearchFailure::Search(SearchError::BadRequest(m))) => {
                    return Err(PageError::new(
                        StatusCode::BAD_REQUEST,
                        "That did not work",
                        m,
                        SEARCH_HINT,
                    ));
                }
                Err(SearchFailure::Search(e)) if AppError::search_bound(&e).is_some() => {
                    let a = AppError::search_bound(&e).unwrap_or_else(AppError::internal);
                    return Err(PageError::new(
                        a.status,
                        "That did not work",
                        a.body.message,
                        a.body.hint,
                    ));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "dashboard search failed");
                    return Err(PageError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "The relay could not answer",
                        "the search failed",
                        "retry; if the embedder is remote, check it is reachable",
                    ));
                }
            }
        }
    };
    let sites = site_names(&st).await?;
    let role = p.get("role");
    let ctx = ctx(st, secret);
    Ok(layout(
        &ctx,
        "/search",
        "Search",
        html! {
            form.filters method="get" action="/search" role="search" {
                div.grow { label for="q" { "Search for" } input #q type="search" name="q" value=[q.as_deref()] autofocus; }
                div { (site_select(&sites, p.get("site").as_deref())) }
                div { label for="role" { "Said by" }
                    select #role name="role" {
                        option value="" { "Anyone" }
                        option value="user" selected[role.as_deref() == Some("user")] { "Me" }
                        option value="assistant" selected[role.as_deref() == Some("assistant")] { "The assistant" }
                    }
                }
                div { label for="since" { "From" } input #since type="date" name="since" value=[p.get("since")]; }
                div { label for="until" { "Through" } input #until type="date" name="until" value=[p.get("until")]; }
                div.buttons { button type="submit" { "Search" } }
            }
            @if let Some(r) = &result {
                p.count {
                    (r.hits.len()) " results · "
                    @if r.signals_used.iter().any(|s| s.as_str() == "vector") { "by keywords and meaning" }
                    @else if !r.signals_skipped.is_empty() { "by keywords only" }
                    @else { "by keywords (no embedder configured)" }
                }
                @for sk in &r.signals_skipped {
                    p.notice.skipped role="status" { "Meaning was not searched: " (sk.reason) ". " (sk.hint) "." }
                }
                @if !r.knowledge.is_empty() {
                    section.knowledge-matches aria-labelledby="km-h" {
                        h2 #km-h { "Your approved knowledge" }
                        ul {
                            @for k in &r.knowledge {
                                li {
                                    a href={"/knowledge/" (k.id)} { (k.topic) }
                                    " — " (k.position)
                                    span.meta { " · " (k.kind) " · cites " (k.sources.len()) @if k.sources.len() == 1 { " turn" } @else { " turns" } }
                                }
                            }
                        }
                    }
                }
                @if r.hits.is_empty() { p.empty { "Nothing matches." } }
                ol.hits {
                    @for h in &r.hits {
                        li.hit {
                            @let thread = h.row.thread_id.clone().unwrap_or_default();
                            h2 { a href={"/threads/" (thread) "?from=search#turn-" (h.row.id)} {
                                (h.row.thread_title.as_deref().filter(|s| !s.trim().is_empty()).unwrap_or("Untitled"))
                            } }
                            p.meta {
                                (site_name(&h.row.surface))
                                @if let Some(role) = &h.row.role { " · " (role) }
                                @if let Some(t) = &h.row.occurred_at { " · " (when(t)) }
                            }
                            p.snippet { (snippet(&h.snippet)) }
                            p.why { "Matched by " (why(h)) "." }
                        }
                    }
                }
            }
        },
    ))
}

#[derive(Debug, thiserror::Error)]
enum SearchFailure {
    #[error(transparent)]
    Search(SearchError),
    #[error(transparent)]
    Db(#[from] personkit_store::DbError),
}

// ---------------------------------------------------------------------------------------------------------------
// Devices

pub(super) async fn devices(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
) -> Page {
    let list = st.read(auth::list_devices).await?;
    let now = st.clock.now();
    let ctx = ctx(st, secret);
    let pair_csrf = ctx.csrf("/devices/pair");
    Ok(layout(
        &ctx,
        "/devices",
        "Devices",
        html! {
            p { "Browsers and tools that may send turns to this relay (devices), and agents that may only read (agent tokens). Tokens are stored hashed and never shown here." }
            @if list.is_empty() {
                p.empty { "Nothing is paired yet." }
            } @else {
                table {
                    thead { tr { th scope="col" { "Name" } th scope="col" { "Kind" } th scope="col" { "Paired" } th scope="col" { "Last seen" } th scope="col" { "State" } th scope="col" { span.visually-hidden { "Action" } } } }
                    tbody {
                        @for d in &list {
                            tr {
                                th scope="row" { (d.name) br; code.id { (compact::short(&d.id)) } }
                                td { (d.kind.as_str()) }
                                td { (when(&d.created_at)) }
                                td { @if let Some(t) = &d.last_seen_at { (time_el(t, now)) } @else { "never" } }
                                td { @if let Some(t) = &d.revoked_at { "revoked " (when(t)) } @else { "active" } }
                                td {
                                    @if d.revoked_at.is_none() {
                                        @let revoke = format!("/devices/{}/revoke", d.id);
                                        form method="post" action=(revoke) {
                                            input type="hidden" name="csrf" value=(ctx.csrf(&revoke));
                                            button.danger type="submit" aria-label={"Revoke " (d.name)} { "Revoke" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            h2 { "Pair a new device" }
            p { "Makes a one-time code to enter in the extension's popup (valid 10 minutes)." }
            form method="post" action="/devices/pair" {
                input type="hidden" name="csrf" value=(pair_csrf);
                button type="submit" { "Pair a new device" }
            }
        },
    ))
}

pub(super) async fn pair_device(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    Extension(to): Extension<PostedTo>,
    body: Body,
) -> Page {
    let ctx = ctx(st.clone(), secret);
    posted_form(&ctx, &to, body).await?;
    let now = st.clock.now();
    let db = st.db.clone();
    let (code, expires) =
        tokio::task::spawn_blocking(move || db.write(|c| auth::create_pairing_code(c, now)))
            .await
            .map_err(|_| PageError::from(AppError::internal()))?
            .map_err(|e| PageError::from(AppError::from(e)))?;
    Ok(layout(
        &ctx,
        "/devices",
        "Pairing code",
        html! {
            p { "Enter this code in the extension's popup (or another client's pairing step):" }
            p.code { (code.display()) }
            p { "It works once, until " (when(&fmt_time(expires))) "." }
            p { a href="/devices" { "Back to devices" } }
        },
    ))
}

pub(super) async fn revoke_device(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    Extension(to): Extension<PostedTo>,
    Path(id): Path<String>,
    body: Body,
) -> Page {
    let ctx = ctx(st.clone(), secret);
    posted_form(&ctx, &to, body).await?;
    let now = st.clock.now();
    let db = st.db.clone();
    let r = tokio::task::spawn_blocking(move || db.write(|c| auth::revoke_device(c, &id, now)))
        .await
        .map_err(|_| PageError::from(AppError::internal()))?;
    match r {
        Ok(_) => Ok(Redirect::to("/devices").into_response()),
        Err(AuthError::Db(e)) => Err(PageError::from(AppError::from(e))),
        Err(e) => Err(PageError::new(
            StatusCode::NOT_FOUND,
            "Not found",
            e.to_string(),
            "go back to Devices",
        )),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Privacy

pub(super) async fn privacy(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    uri: Uri,
) -> Page {
    let p = Params::parse(uri.query(), &["forgot"], PRIVACY_HINT)?;
    let sites = site_names(&st).await?;
    let path = st.db.path().display().to_string();
    let size = personkit_store::db::size_on_disk(st.db.path());
    let embedder = st.embedder.as_ref().map(|e| e.model_key());
    let audit = super::knowledge::audit_section(&st).await?;
    let ctx = ctx(st, secret);
    Ok(layout(
        &ctx,
        "/privacy",
        "Privacy",
        html! {
            (notice(&p))
            section aria-labelledby="forget" {
                h2 #forget { "Forget by site or dates" }
                p { "See how much would go first; nothing is removed until you confirm on the next page." }
                form.filters method="get" action="/privacy/forget" {
                    div { (site_select(&sites, None)) }
                    div { label for="since" { "From" } input #since type="date" name="since"; }
                    div { label for="until" { "Through" } input #until type="date" name="until"; }
                    div.buttons { button type="submit" { "Count what would be forgotten" } }
                }
            }
            section aria-labelledby="redacted" {
                h2 #redacted { "What is redacted before a turn leaves the browser" }
                ul {
                    li { "Secrets people paste into chats: environment-style assignments (" code { "API_KEY=…" } "), provider tokens and keys (OpenAI, Anthropic, GitHub, Slack, cloud keys), bearer headers, PEM private keys, JSON Web Tokens and service-account JSON." }
                    li { "Your own patterns, added in the extension's popup." }
                    li { "Each is replaced by a marker such as " code { "[REDACTED:openai_key]" } " in the extension, before the turn is queued; the relay never sees the secret." }
                    li { "When the embedder is a remote service, e-mail addresses, phone numbers and amounts are also scrubbed from the text sent to it." }
                    li { "When the knowledge pipeline's language model is off this machine, the text it reads is scrubbed first (secrets, e-mail addresses, phone numbers, amounts, and people's names as pseudonyms), unless " code { "scrub = \"off\"" } " is set. The log below says how each call was sent." }
                }
            }
            (audit)
            section aria-labelledby="where" {
                h2 #where { "Where your corpus lives" }
                dl.facts {
                    dt { "Corpus file" } dd { code { (path) } " (" (bytes(size)) ", readable by your user only)" }
                    dt { "Relay" } dd { "Listens on this machine only (loopback) unless started with " code { "--allow-remote" } "." }
                    dt { "Embeddings" } dd {
                        @if let Some(k) = &embedder { "computed by " code { (k) } } @else { "none (keyword search only)" }
                    }
                    dt { "Forgetting" } dd { "Removes the text from the corpus file (freed pages are zeroed), the search index and the vectors, and keeps only the forgotten turns' ids so they are not stored again." }
                }
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_mark_only_the_matches() {
        let s = snippet("a **<b>x</b>** c").into_string();
        assert_eq!(s, "a <mark>&lt;b&gt;x&lt;/b&gt;</mark> c");
    }
}
