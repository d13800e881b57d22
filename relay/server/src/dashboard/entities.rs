//! The Entities pages: a list with a name filter and a kind choice, and an entity's page — its kind, aliases and
//! span, its related entities (each a link), its threads, events if any, and a timeline of its sources per day
//! (an inline SVG, numbers again in a table) — all from `personkit_graph::view`, as the CLI, the API and MCP. The
//! thread page links the entities the thread supports.

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Redirect};
use maud::{Markup, html};
use personkit_graph::view::{self, EntityView};
use personkit_graph::{GraphError, Kind};
use personkit_store::graph::{Day, Subgraph};
use personkit_store::proposals::{self, Proposal};
use personkit_store::read::ReadError;

use super::pages::{Page, ctx, encode_query, layout, site_name, time_el, when};
use super::{PageError, PostedTo, SessionSecret, decision_button, posted_decision};
use crate::error::AppError;
use crate::routes::read::{Params, run};
use crate::state::AppState;

const LIST_HINT: &str = "/entities?q=<part of a name>&kind=<a kind>";
const ENTITY_HINT: &str = "open an entity from /entities";
/// Entities a list page shows.
const LIST_LIMIT: usize = 200;
/// Names a model found that the list page shows for a decision.
const PROPOSALS_SHOWN: usize = 50;
/// Where every approve and reject button of the list page posts (one CSRF token per page render serves them all).
const DECIDE: &str = "/entities/proposals/decide";
/// Threads an entity page lists.
const PAGE_THREADS: usize = 50;

/// The timeline's drawing box (SVG units).
const W: f64 = 900.0;
const H: f64 = 120.0;
const BOTTOM: f64 = 22.0;

fn read_error(e: GraphError) -> ReadError {
    match e {
        GraphError::NotFound(m) => ReadError::NotFound(m),
        GraphError::Invalid(m) | GraphError::Db(personkit_store::DbError::Invalid(m)) => {
            ReadError::BadRequest(m)
        }
        GraphError::Db(e) => ReadError::Db(e),
    }
}

/// `GET /entities`.
pub(super) async fn list(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    uri: Uri,
) -> Page {
    let p = Params::parse(uri.query(), &["q", "kind", "done", "name"], LIST_HINT)?;
    let (q, kind) = (p.get("q"), p.get("kind"));
    let (q2, k2) = (q.clone(), kind.clone());
    let (found, waiting) = run(&st, LIST_HINT, move |c| {
        let found =
            view::search(c, q2.as_deref(), k2.as_deref(), LIST_LIMIT).map_err(read_error)?;
        let waiting = proposals::list(c, proposals::State::Proposed, PROPOSALS_SHOWN)?;
        Ok((found, waiting))
    })
    .await?;
    let done = match (p.get("done").as_deref(), p.get("name")) {
        (Some("approved"), Some(n)) => Some(format!(
            "Approved: {n} is now an entity, linked to the turns it was found in."
        )),
        (Some("rejected"), Some(n)) => Some(format!("Rejected: {n} will not be proposed again.")),
        _ => None,
    };
    let ctx = ctx(st, secret);
    let csrf = ctx.csrf(DECIDE);
    Ok(layout(
        &ctx,
        "/entities",
        "Entities",
        html! {
            p.intro { "People, projects, tools, models, organisations and sites your conversations and work involve, found without a model from what is certain: a session's project, the tool and its maker, model ids and linked sites — and, once you approve them, the names a language model found in your turns." }
            @if let Some(d) = &done { p.notice role="status" { (d) } }
            @if !waiting.is_empty() {
                (proposals_section(&csrf, &waiting))
                h2 #all-h { "All entities" }
            }
            form.filters method="get" action="/entities" role="search" {
                div { label for="q" { "Name" } input #q type="search" name="q" value=[q.as_deref()] placeholder="part of a name or alias"; }
                div {
                    label for="kind" { "Kind" }
                    select #kind name="kind" {
                        option value="" { "any" }
                        @for k in Kind::ALL {
                            option value=(k.as_str()) selected[kind.as_deref() == Some(k.as_str())] { (k.as_str()) }
                        }
                    }
                }
                div.buttons { button type="submit" { "Filter" } a href="/entities" { "Clear" } }
            }
            @if found.is_empty() {
                p.empty { "No entity matches. The relay derives them from new turns every minute; " code { "personkit graph build" } " does it now." }
            } @else {
                p.count { (found.len()) @if found.len() == LIST_LIMIT { "+" } " entities" }
                table.entities {
                    thead { tr { th scope="col" { "Name" } th scope="col" { "Kind" } } }
                    tbody {
                        @for e in &found {
                            tr { td.title { a href={"/entities/" (e.id)} { (e.name) } } td { (e.kind) } }
                        }
                    }
                }
            }
        },
    ))
}

/// The names a model found, each with its kind, confidence and where it was found, and Approve / Reject buttons.
fn proposals_section(csrf: &str, waiting: &[Proposal]) -> Markup {
    html! {
        section #proposals aria-labelledby="proposals-h" {
            h2 #proposals-h { "Names a model found, waiting for you (" (waiting.len()) @if waiting.len() == PROPOSALS_SHOWN { "+" } ")" }
            p.intro { "Nothing here is in the graph or visible to your agents until you approve it. Each name was written in the turns it was found in." }
            table.entities.proposals {
                thead { tr { th scope="col" { "Name" } th scope="col" { "Kind" } th scope="col" { "Confidence" } th scope="col" { "Found in" } th scope="col" { span.visually-hidden { "Decision" } } } }
                tbody {
                    @for p in waiting {
                        tr data-proposal=(p.id) {
                            td.title { (p.name) }
                            td { (p.kind) }
                            td { (format!("{:.1}", p.confidence)) }
                            td { (p.messages) @if p.messages == 1 { " turn" } @else { " turns" } ", " (p.threads) @if p.threads == 1 { " thread" } @else { " threads" } }
                            td.actions {
                                (decision_button(DECIDE, csrf, "proposal", &p.id, true, &p.name))
                                (decision_button(DECIDE, csrf, "proposal", &p.id, false, &p.name))
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `POST /entities/proposals/decide`: approves or rejects one name a model found, then back to the list.
pub(super) async fn decide(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    Extension(to): Extension<PostedTo>,
    body: Body,
) -> Page {
    let ctx = ctx(st.clone(), secret);
    let (approve, id) = posted_decision(&ctx, &to, body, "proposal", "Entities").await?;
    let now = st.clock.now();
    let db = st.db.clone();
    let name = tokio::task::spawn_blocking(move || {
        db.write(|c| {
            let Some(p) = proposals::get(c, &id)? else {
                return Ok(None);
            };
            if approve {
                personkit_graph::extract::approve(c, &id, now)?;
            } else {
                personkit_graph::extract::reject(c, &id, now)?;
            }
            Ok::<_, GraphError>(Some(p.name))
        })
    })
    .await
    .map_err(|_| PageError::from(AppError::internal()))?
    .map_err(|e| match e {
        GraphError::Invalid(m) | GraphError::Db(personkit_store::DbError::Invalid(m)) => {
            PageError::new(
                StatusCode::BAD_REQUEST,
                "That did not work",
                m,
                "reload Entities",
            )
        }
        GraphError::NotFound(m) => {
            PageError::new(StatusCode::NOT_FOUND, "Not found", m, "reload Entities")
        }
        GraphError::Db(e) => PageError::from(AppError::from(e)),
    })?;
    let Some(name) = name else {
        return Err(PageError::new(
            StatusCode::NOT_FOUND,
            "Not found",
            "there is no such proposal",
            "it may have gone when its turns were forgotten; reload Entities",
        ));
    };
    let done = if approve { "approved" } else { "rejected" };
    tracing::info!(
        decision = done,
        "entity proposal decided from the dashboard"
    );
    let q = encode_query(&[
        ("done".to_owned(), done.to_owned()),
        ("name".to_owned(), name),
    ]);
    Ok(Redirect::to(&format!("/entities?{q}")).into_response())
}

/// `GET /entities/{id}`.
pub(super) async fn page(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    Path(id): Path<String>,
) -> Page {
    let v = run(&st, ENTITY_HINT, move |c| {
        view::view(c, &id, PAGE_THREADS).map_err(read_error)
    })
    .await?;
    let now = st.clock.now();
    // Viewing an entity is a use of it (heat).
    let (db, entity_id) = (st.db.clone(), v.entity.id.clone());
    let counted = tokio::task::spawn_blocking(move || {
        db.write(|c| personkit_heat::record_access(c, "entity", &entity_id, now))
    })
    .await;
    if !matches!(counted, Ok(Ok(()))) {
        tracing::warn!("a viewed entity was not counted as a use");
    }
    let title = v.entity.name.clone();
    let ctx = ctx(st, secret);
    Ok(layout(&ctx, "/entities", &title, render(&v, now)))
}

fn span(v: &EntityView) -> String {
    let day = |t: &Option<String>| t.as_deref().map(|t| t.get(..10).unwrap_or(t).to_owned());
    match (day(&v.entity.first_seen), day(&v.entity.last_seen)) {
        (Some(a), Some(b)) if a == b => format!("seen on {a}"),
        (Some(a), Some(b)) => format!("seen {a} to {b}"),
        _ => "not seen in any source".into(),
    }
}

fn render(v: &EntityView, now: time::OffsetDateTime) -> Markup {
    let e = &v.entity;
    html! {
        p.meta #entity-head data-kind=(e.kind) data-threads=(v.thread_count) {
            span.kind { (e.kind) } " · " (span(v)) " · " (v.thread_count) @if v.thread_count == 1 { " thread" } @else { " threads" }
            @if !e.aliases.is_empty() { " · also " (e.aliases.join(", ")) }
        }
        section aria-labelledby="related-h" {
            h2 #related-h { "Related" }
            @if v.relations.is_empty() {
                p.empty { "No relation yet." }
            } @else {
                table.relations {
                    thead { tr { th scope="col" { "Relation" } th scope="col" { "Entity" } th scope="col" { "Kind" } th scope="col" { "From" } th scope="col" { "To" } } }
                    tbody {
                        @for r in &v.relations {
                            @let (other, predicate) = view::other_end(r, &e.id);
                            tr data-predicate=(r.predicate) {
                                td { (predicate.replace('_', " ")) }
                                td.title { a href={"/entities/" (other.id)} { (other.name) } }
                                td { (other.kind) }
                                td.when { @if let Some(t) = &r.valid_from { (when(t)) } }
                                td.when { @if let Some(t) = &r.valid_to { (when(t)) } }
                            }
                        }
                    }
                }
            }
        }
        section aria-labelledby="timeline-h" {
            h2 #timeline-h { "Timeline" }
            @if v.timeline.is_empty() {
                p.empty { "Nothing dated." }
            } @else {
                (timeline(&v.timeline))
                details.numbers {
                    summary { "The numbers" }
                    table {
                        thead { tr { th scope="col" { "Day (UTC)" } th scope="col" { "Sources" } } }
                        tbody { @for d in &v.timeline { tr { td { (d.day) } td.num { (d.sources) } } } }
                    }
                }
            }
        }
        section aria-labelledby="threads-h" {
            h2 #threads-h { "Threads" }
            @if v.threads.is_empty() {
                p.empty { "No thread." }
            } @else {
                table.threads {
                    thead { tr { th scope="col" { "Title" } th scope="col" { "Site" } th scope="col" { "Last activity" } } }
                    tbody {
                        @for t in &v.threads {
                            tr {
                                td.title { a href={"/threads/" (t.thread_id)} { (t.title.as_deref().filter(|s| !s.trim().is_empty()).unwrap_or("Untitled")) } }
                                td title=(t.surface) { (site_name(&t.surface)) }
                                td.when { (time_el(&t.last_seen_at, now)) }
                            }
                        }
                    }
                }
                @if v.thread_count > v.threads.len() as u64 {
                    p.count { "The newest " (v.threads.len()) " of " (v.thread_count) "." }
                }
            }
        }
        @if !v.events.is_empty() {
            section aria-labelledby="events-h" {
                h2 #events-h { "Events" }
                table.events {
                    thead { tr { th scope="col" { "What" } th scope="col" { "From" } th scope="col" { "When" } } }
                    tbody {
                        @for ev in &v.events {
                            tr { td { (ev.kind) } td { (site_name(&ev.source_surface)) } td.when { (time_el(&ev.occurred_at, now)) } }
                        }
                    }
                }
            }
        }
        p.hint { "Two entities that are one? " code { "personkit graph candidates" } " lists look-alikes; " code { "personkit graph merge KEEP GONE" } " joins them." }
    }
}

/// A bar per day with sources, oldest on the left.
fn timeline(days: &[Day]) -> Markup {
    let mut days: Vec<&Day> = days.iter().collect();
    days.reverse();
    let max = days.iter().map(|d| d.sources).max().unwrap_or(1).max(1) as f64;
    let slot = W / days.len().max(1) as f64;
    let bar = (slot * 0.7).clamp(2.0, 40.0);
    let plot = H - BOTTOM - 6.0;
    let label_every = days.len().div_ceil(8).max(1);
    html! {
        svg.chart.timeline viewBox={"0 0 " (W) " " (H)} role="img" aria-labelledby="timeline-h" {
            line.base x1="0" x2=(W) y1=(H - BOTTOM) y2=(H - BOTTOM) {}
            @for (i, d) in days.iter().enumerate() {
                @let h = (d.sources as f64 / max * plot).max(1.0);
                @let x = i as f64 * slot + (slot - bar) / 2.0;
                g.day data-day=(d.day) data-sources=(d.sources) {
                    title { (d.day) ": " (d.sources) }
                    rect.site-0 x=(format!("{x:.1}")) y=(format!("{:.1}", H - BOTTOM - h)) width=(format!("{bar:.1}")) height=(format!("{h:.1}")) {}
                    @if i % label_every == 0 {
                        text x=(format!("{:.1}", x + bar / 2.0)) y=(H - 6.0) text-anchor="middle" { (d.day.get(5..).unwrap_or(&d.day)) }
                    }
                }
            }
        }
    }
}

/// The entities a thread supports, as links (for the thread page).
pub(super) fn thread_entities(g: &Subgraph) -> Markup {
    let mut list: Vec<_> = g.entities.iter().map(|r| &r.entity).collect();
    list.sort_by(|a, b| a.kind.cmp(&b.kind).then(a.name.cmp(&b.name)));
    html! {
        @if !list.is_empty() {
            p.meta.entities #thread-entities {
                "About: "
                @for (i, e) in list.iter().enumerate() {
                    @if i > 0 { ", " }
                    a href={"/entities/" (e.id)} title=(e.kind) { (e.name) }
                }
                @if g.truncated { " …" }
            }
        }
    }
}
