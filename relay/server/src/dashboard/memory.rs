//! The Memory page: the profile the user writes for their agents (a form over `personkit_memory::profile`), each
//! memory tier's state (on or off, schedule, model, last run, the current version rendered) with a button that
//! runs it now, and each tier's history (`/memory/{tier}`): every version, any one shown with what changed from
//! the one before. What agents receive is the context `personkit_memory::context` assembles from these.

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Redirect};
use maud::{Markup, html};

use personkit_memory::diff::{self, Line};
use personkit_memory::run::{Configured, run_tier};
use personkit_memory::{MemoryError, Tier, TierStatus, profile};
use personkit_store::memory::{self as rows, Version};
use personkit_store::read::ReadError;

use super::pages::{Page, ctx, layout, time_el};
use super::{PageError, PostedTo, SessionSecret, posted_fields};
use crate::error::AppError;
use crate::routes::read::{Params, run};
use crate::state::AppState;

const HINT: &str = "open Memory from the menu";
const PROFILE_ACTION: &str = "/memory/profile";
const RUN_ACTION: &str = "/memory/run";
/// The profile form at its largest (64 KB of text, percent-encoded).
const PROFILE_FORM_BYTES: usize = profile::MAX_BYTES * 3 + 1024;
/// Versions listed on a tier's history page.
const HISTORY: u32 = 100;

fn read_error(e: MemoryError) -> ReadError {
    match e {
        MemoryError::Db(e) => ReadError::Db(e),
        e => ReadError::BadRequest(e.to_string()),
    }
}

fn tier_title(t: &str) -> &'static str {
    match t {
        "short" => "Short memory — recent days",
        "mid" => "Mid memory — this week",
        "long" => "Long memory",
        _ => "Profile",
    }
}

/// `GET /memory`.
pub(super) async fn page(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    uri: Uri,
) -> Page {
    let p = Params::parse(uri.query(), &["done", "tier"], HINT)?;
    let path = st.db.path().to_path_buf();
    let profile_path = st.profile_path.clone();
    let (cfg, statuses, current, prof) = run(&st, HINT, move |c| {
        let cfg = Configured::load(&path).map_err(read_error)?;
        let statuses = personkit_memory::status(c, &cfg.settings, &cfg.llm_result())?;
        let mut current = Vec::new();
        for t in Tier::ALL {
            current.push(rows::latest(c, t.as_str())?);
        }
        let prof = profile::current(c, &profile_path).map_err(read_error)?;
        Ok((cfg, statuses, current, prof))
    })
    .await?;
    let _ = cfg;
    let now = st.clock.now();
    let ctx = ctx(st, secret);
    let profile_csrf = ctx.csrf(PROFILE_ACTION);
    let body = html! {
        @match (p.get("done").as_deref(), p.get("tier")) {
            (Some("profile"), _) => { p.notice role="status" { "Profile saved. Agents get it first, in every tier of their context." } }
            (Some("ran"), Some(t)) => {
                @if let Some(s) = statuses.iter().find(|s| s.tier.as_str() == t) {
                    @if let Some(r) = &s.last_run {
                        @if r.outcome == "failed" {
                            p.warning role="alert" { (tier_title(&t)) ": " (r.message) }
                        } @else {
                            p.notice role="status" { (tier_title(&t)) ": " (r.message) "." }
                        }
                    }
                }
            }
            _ => {}
        }
        p.intro {
            "What your agents know when they start: the profile you write, and memory distilled from your conversations. "
            "Agents read it with the MCP tool " code { "get_context" } " (tiers 1–4) or " code { "personkit context" } "; every version is kept."
        }
        section aria-labelledby="profile-h" {
            h2 #profile-h { "Profile" }
            p.intro {
                "Who you are and how you want agents to work with you. Saved to " code { (prof.path) } "; you may edit that file with any editor too."
                @if let Some(v) = &prof.version { " Version " (v.number) ", saved " (time_el(&v.created_at, now)) "." }
                @if prof.unrecorded { " The file changed since it was last recorded: saving records it." }
            }
            form.profile method="post" action=(PROFILE_ACTION) {
                input type="hidden" name="csrf" value=(profile_csrf);
                label for="profile-text" { "Your profile (Markdown)" }
                textarea #profile-text name="text" rows="14" placeholder=(profile::TEMPLATE) { (prof.body) }
                div.actions {
                    button type="submit" { "Save profile" }
                    a href="/memory/profile" { "History" }
                }
            }
        }
        @for (s, v) in statuses.iter().zip(current.iter()) {
            (tier_section(&ctx, s, v.as_ref(), now))
        }
    };
    Ok(layout(&ctx, "/memory", "Memory", body))
}

fn tier_section(
    ctx: &super::Ctx,
    s: &TierStatus,
    v: Option<&Version>,
    now: time::OffsetDateTime,
) -> Markup {
    let t = s.tier.as_str();
    let id = format!("{t}-h");
    html! {
        section aria-labelledby=(id) {
            h2 #(id) { (tier_title(t)) }
            dl.facts {
                dt { "State" } dd { @if s.enabled { "on — " (s.schedule) } @else { "off (set [memory." (t) "] enabled = true to turn it on)" } }
                dt { "Budget" } dd { (s.budget) " tokens" }
                dt { "Model" } dd { (s.model) }
                dt { "Last run" } dd {
                    @match &s.last_run {
                        Some(r) => {
                            (time_el(&r.at, now)) " (" (r.trigger) "): "
                            span.outcome.good[r.outcome != "failed"].bad[r.outcome == "failed"] { (r.outcome) }
                            " — " (r.message)
                        }
                        None => { "never" }
                    }
                }
                @if s.due { dt { "Due" } dd { "a thread this tier drew on was forgotten: it runs again " @if t == "short" { "within a minute" } @else { "at its next scheduled time" } } }
                @if s.withdrawn > 0 { dt { "Withdrawn" } dd { (s.withdrawn) " version(s), after their threads were forgotten" } }
            }
            div.actions {
                form method="post" action=(RUN_ACTION) {
                    input type="hidden" name="csrf" value=(ctx.csrf(RUN_ACTION));
                    input type="hidden" name="tier" value=(t);
                    button type="submit" disabled[!s.enabled] { "Run now" }
                }
                a href={"/memory/" (t)} { "History (" (s.versions) ")" }
            }
            @match v {
                Some(v) => {
                    p.turn-head { "Version " (v.number) ", made " (time_el(&v.created_at, now)) @if let Some(m) = &v.model { " by " (m) } ", " (v.tokens) " tokens" }
                    div.md.memory-body { (super::markdown::render(&v.body)) }
                }
                None => { p.empty { "No version yet." @if t != "short" { " It is distilled from the tier below once that has one." } } }
            }
        }
    }
}

/// `GET /memory/{tier}`: every version of a tier; `?v=<id>` shows one with its diff from the one before.
pub(super) async fn history(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    Path(tier): Path<String>,
    uri: Uri,
) -> Page {
    let p = Params::parse(uri.query(), &["v"], HINT)?;
    if !rows::TIERS.contains(&tier.as_str()) {
        return Err(PageError::new(
            StatusCode::NOT_FOUND,
            "Not found",
            "there is no such memory tier",
            "the tiers are short, mid, long and profile",
        ));
    }
    let t2 = tier.clone();
    let chosen = p.get("v");
    let (list, shown) = run(&st, HINT, move |c| {
        let list = rows::versions(c, &t2, HISTORY, None)?;
        let pick = match chosen {
            Some(id) => rows::version(c, &id)?.filter(|v| v.tier == t2),
            None => list.first().cloned(),
        };
        let shown = match pick {
            Some(v) => {
                let prev = rows::previous(c, &v)?;
                Some((v, prev))
            }
            None => None,
        };
        Ok((list, shown))
    })
    .await?;
    let now = st.clock.now();
    let ctx = ctx(st, secret);
    let title = format!("{} — history", tier_title(&tier));
    let body = html! {
        p { a href="/memory" { "← Memory" } }
        @if list.is_empty() { p.empty { "No versions yet." } }
        @else {
            table.versions {
                thead { tr { th { "Version" } th { "Made" } th { "Tokens" } th { "Model" } th { "" } } }
                tbody {
                    @for v in &list {
                        tr aria-current=[shown.as_ref().filter(|(s, _)| s.id == v.id).map(|_| "true")] {
                            td { a href={"/memory/" (tier) "?v=" (v.id)} { "#" (v.number) } }
                            td { (time_el(&v.created_at, now)) }
                            td { (v.tokens) }
                            td { (v.model.as_deref().unwrap_or("—")) }
                            td { @if let Some(w) = &v.withdrawn_at { "withdrawn " (time_el(w, now)) } }
                        }
                    }
                }
            }
        }
        @if let Some((v, prev)) = &shown {
            h2 { "Version " (v.number) }
            @if let Some(w) = &v.withdrawn_at {
                p.warning { "Withdrawn " (time_el(w, now)) ": a thread it drew on was forgotten, so its text is gone." }
            } @else {
                // A withdrawn version's text is gone: there is nothing to compare with, so the text is shown whole.
                @let base = prev.as_ref().filter(|p| p.withdrawn_at.is_none());
                @let d = diff::diff(base.map_or(v.body.as_str(), |p| p.body.as_str()), &v.body);
                p.intro {
                    @match prev {
                        Some(p) if p.withdrawn_at.is_some() => { "Version " (p.number) ", the one before, was withdrawn and its text is gone: this is the whole text." }
                        Some(p) => { "Changes from version " (p.number) ": " (d.added) " lines added, " (d.removed) " removed." }
                        None => { "The first version." }
                    }
                }
                pre.diff {
                    @for l in &d.lines {
                        @match l {
                            Line::Same(t) => { span.same { "  " (t) } "\n" }
                            Line::Added(t) => { ins { "+ " (t) } "\n" }
                            Line::Removed(t) => { del { "- " (t) } "\n" }
                        }
                    }
                }
            }
        }
    };
    Ok(layout(&ctx, "/memory", &title, body))
}

/// `POST /memory/profile` with `text`: saves the profile (file and version).
pub(super) async fn save_profile(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    Extension(to): Extension<PostedTo>,
    body: Body,
) -> Page {
    let ctx = ctx(st.clone(), secret);
    let f = posted_fields(&ctx, &to, body, PROFILE_FORM_BYTES, &["csrf", "text"]).await?;
    let text = f.get("text").unwrap_or_default();
    if let Err(m) = profile::check(&text) {
        return Err(PageError::new(
            StatusCode::BAD_REQUEST,
            "That did not work",
            m,
            "shorten the profile and save again",
        ));
    }
    let (db, path, now) = (st.db.clone(), st.profile_path.clone(), st.clock.now());
    tokio::task::spawn_blocking(move || db.write(|c| profile::write(c, &path, &text, now)))
        .await
        .map_err(|_| PageError::from(AppError::internal()))?
        .map_err(|e| PageError::from(crate::routes::memory::memory_error(e)))?;
    Ok(Redirect::to("/memory?done=profile").into_response())
}

/// `POST /memory/run` with `tier`: runs it now (a model tier can take minutes) and shows the outcome.
pub(super) async fn run_now(
    State(st): State<AppState>,
    Extension(secret): Extension<SessionSecret>,
    Extension(to): Extension<PostedTo>,
    body: Body,
) -> Page {
    let ctx = ctx(st.clone(), secret);
    let f = posted_fields(&ctx, &to, body, super::FORM_BYTES, &["csrf", "tier"]).await?;
    let Some(tier) = f.get("tier").as_deref().and_then(Tier::parse) else {
        return Err(PageError::new(
            StatusCode::BAD_REQUEST,
            "That did not work",
            "the tier is short, mid or long",
            "use the Run now buttons on the Memory page",
        ));
    };
    let Ok(guard) = st.memory_busy.clone().try_lock_owned() else {
        return Err(PageError::new(
            StatusCode::CONFLICT,
            "Busy",
            "a memory tier is being distilled now",
            "wait a moment and reload the Memory page",
        ));
    };
    let (path, now, local) = (st.db.path().to_path_buf(), st.clock.now(), st.local);
    let outcome = tokio::task::spawn_blocking(move || {
        let _guard = guard;
        let cfg = Configured::load(&path)?;
        let conn = personkit_store::db::open(&path)?;
        run_tier(&conn, tier, &cfg, now, local, "manual")
    })
    .await
    .map_err(|_| PageError::from(AppError::internal()))?;
    match outcome {
        Ok(_) => Ok(
            Redirect::to(&format!("/memory?done=ran&tier={0}#{0}-h", tier.as_str()))
                .into_response(),
        ),
        Err(MemoryError::Db(e)) => Err(PageError::from(AppError::from(e))),
        Err(e) => Err(PageError::new(
            StatusCode::CONFLICT,
            "That did not work",
            e.to_string(),
            e.hint(),
        )),
    }
}

/// `GET /memory/profile`: the profile's versions (the form posts to the same path).
pub(super) async fn profile_history(
    state: State<AppState>,
    secret: Extension<SessionSecret>,
    uri: Uri,
) -> Page {
    history(state, secret, Path("profile".to_owned()), uri).await
}
