//! The dashboard at the relay's root: server-rendered HTML (maud) with no JavaScript at all — every page is a
//! plain document, every action a form — over the same read layer (`personkit_store::read`), search
//! (`personkit_search::query`), forget call (`personkit_store::forget`) and knowledge rows
//! (`personkit_store::knowledge`, the Knowledge page where entries are approved) the API, CLI and MCP use.
//!
//! Sign-in: `personkit open` or `POST /v1/me/dashboard-link` makes a one-time link (`/signin?t=…`, stored hashed,
//! 5 minutes); using it opens a session, kept in the corpus (hashed, `personkit_store::signin`) so it outlives a
//! relay restart, and sets an HttpOnly, SameSite=Strict cookie. Sessions expire after [`SESSION_TTL`] and end on
//! sign-out.
//!
//! **Architecture invariant:** dashboard pages are authenticated by the session cookie only; a bearer token
//! (device or agent) is never looked at here, and `/v1` never looks at the cookie. Every state-changing form is
//! a POST that must carry a one-time CSRF token minted for this session and this form's action ([`Sessions`]),
//! and must not come from another origin (`Origin`, `Sec-Fetch-Site`). Responses forbid framing, scripts and
//! outside resources (CSP).

mod entities;
mod knowledge;
mod markdown;
mod memory;
mod pages;
mod today;

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use maud::{DOCTYPE, Markup, html};
use personkit_store::auth::hash_secret;
use personkit_store::signin;
use time::{Duration, OffsetDateTime};

use crate::error::AppError;
use crate::state::AppState;

/// How long a dashboard session lasts from sign-in.
pub const SESSION_TTL: Duration = signin::SESSION_TTL;
/// How long a form's CSRF token stays usable.
const CSRF_TTL: Duration = Duration::hours(2);
/// Sessions whose unused CSRF tokens are kept; minting for one more drops the tokens of the least recently used.
const MAX_CSRF_SESSIONS: usize = signin::MAX_SESSIONS;
/// Unused CSRF tokens kept per session; minting beyond this drops the oldest.
const MAX_CSRF: usize = 64;
/// Largest form body.
const FORM_BYTES: usize = 8 * 1024;

/// The unused CSRF tokens of open dashboard sessions, by the sha256 of the session's cookie secret. The sessions
/// themselves are in the corpus (`personkit_store::signin`); the tokens are kept in memory only, so a form shown
/// before a relay restart is refused after it and works again once its page is reloaded.
#[derive(Default)]
pub struct Sessions {
    inner: Mutex<HashMap<String, FormTokens>>,
}

#[derive(Default)]
struct FormTokens {
    /// When a token was last minted for this session.
    used: Option<OffsetDateTime>,
    tokens: Vec<FormToken>,
}

/// One unused CSRF token: its sha256, the form action (path) it was minted for, and when it stops working.
struct FormToken {
    hash: String,
    action: String,
    expires: OffsetDateTime,
}

impl fmt::Debug for Sessions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sessions(<redacted>)")
    }
}

fn random_hex() -> Option<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).ok()?;
    Some(hex::encode(b))
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, FormTokens>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Drops the tokens of a session that ended.
    fn end(&self, secret: &str) {
        self.lock().remove(&hash_secret(secret));
    }

    /// A fresh one-time CSRF token for the form of this session that posts to `action` (a path such as
    /// `/devices/pair`); it is refused on any other form.
    fn mint_csrf(&self, secret: &str, action: &str, now: OffsetDateTime) -> String {
        let token = random_hex().unwrap_or_default();
        let key = hash_secret(secret);
        let mut m = self.lock();
        if !m.contains_key(&key)
            && m.len() >= MAX_CSRF_SESSIONS
            && let Some(stale) = m.iter().min_by_key(|(_, t)| t.used).map(|(k, _)| k.clone())
        {
            m.remove(&stale);
        }
        let s = m.entry(key).or_default();
        s.used = Some(now);
        s.tokens.retain(|t| t.expires > now);
        if s.tokens.len() >= MAX_CSRF {
            s.tokens.remove(0);
        }
        s.tokens.push(FormToken {
            hash: hash_secret(&token),
            action: action.to_owned(),
            expires: now + CSRF_TTL,
        });
        token
    }

    /// Uses a CSRF token: true once, for a token minted for this session and this form action, not expired.
    fn consume_csrf(&self, secret: &str, action: &str, token: &str, now: OffsetDateTime) -> bool {
        let mut m = self.lock();
        let Some(s) = m.get_mut(&hash_secret(secret)) else {
            return false;
        };
        let h = hash_secret(token);
        match s
            .tokens
            .iter()
            .position(|t| t.hash == h && t.action == action && t.expires > now)
        {
            Some(i) => {
                s.tokens.remove(i);
                true
            }
            None => false,
        }
    }
}

/// The signed-in session of a dashboard request (its cookie secret).
#[derive(Clone)]
pub(crate) struct SessionSecret(String);

impl fmt::Debug for SessionSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionSecret(<redacted>)")
    }
}

/// The session cookie's name: per port, since browsers share cookies between ports of one host and two relays
/// on one machine must not overwrite each other's sessions.
fn cookie_name(headers: &HeaderMap) -> String {
    let port = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.rsplit_once(':'))
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or("80");
    format!("personkit_session_{port}")
}

fn session_cookie(headers: &HeaderMap) -> Option<String> {
    let name = cookie_name(headers);
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The path a dashboard request was sent to: a posted form's action, which its CSRF token must have been minted
/// for.
#[derive(Clone, Debug)]
pub(crate) struct PostedTo(pub(crate) String);

/// What a page handler knows about its request.
pub(crate) struct Ctx {
    pub(crate) st: AppState,
    pub(crate) secret: SessionSecret,
}

impl Ctx {
    /// A one-time token for the form on the page being rendered that posts to `action` (the path as written in
    /// the form's `action`, before any public-URL prefix).
    pub(crate) fn csrf(&self, action: &str) -> String {
        self.st
            .sessions
            .mint_csrf(&self.secret.0, action, self.st.clock.now())
    }
}

/// The dashboard's routes: pages behind the session, `/signin` and the stylesheet in front of it.
pub fn router(state: AppState) -> Router<AppState> {
    let pages = Router::new()
        .route("/", get(pages::overview))
        .route("/today", get(today::page))
        .route("/threads", get(pages::threads))
        .route("/threads/{id}", get(pages::thread))
        .route("/threads/{id}/export.md", get(pages::export_markdown))
        .route(
            "/threads/{id}/forget",
            get(pages::forget_thread_confirm).post(pages::forget_thread),
        )
        .route("/search", get(pages::search))
        .route("/entities", get(entities::list))
        .route("/entities/proposals/decide", post(entities::decide))
        .route("/entities/{id}", get(entities::page))
        .route("/knowledge", get(knowledge::list))
        .route("/knowledge/decide", post(knowledge::decide))
        .route("/knowledge/{id}", get(knowledge::show))
        .route("/knowledge/{id}/edit", post(knowledge::edit))
        .route("/memory", get(memory::page))
        .route(
            "/memory/profile",
            post(memory::save_profile).get(memory::profile_history),
        )
        .route("/memory/run", post(memory::run_now))
        .route("/memory/{tier}", get(memory::history))
        .route("/devices", get(pages::devices))
        .route("/devices/pair", post(pages::pair_device))
        .route("/devices/{id}/revoke", post(pages::revoke_device))
        .route("/privacy", get(pages::privacy))
        .route(
            "/privacy/forget",
            get(pages::forget_range_confirm).post(pages::forget_range),
        )
        .route("/signout", post(signout))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_session,
        ));
    Router::new()
        .route("/signin", get(signin))
        .route("/assets/app.css", get(stylesheet))
        .merge(pages)
        .layer(middleware::from_fn_with_state(state, under_public_path))
        .layer(middleware::from_fn(page_headers))
}

/// The path part of the relay's public URL (`/personkit` for `https://host/personkit`), or "" at the root.
fn public_path(st: &AppState) -> String {
    let Some(url) = st.config.public_url.as_deref() else {
        return String::new();
    };
    let after_scheme = url.split_once("://").map_or(url, |(_, r)| r);
    match after_scheme.find('/') {
        Some(i) => after_scheme[i..].trim_end_matches('/').to_owned(),
        None => String::new(),
    }
}

/// Behind a proxy that publishes the relay under a sub-path (`--public-url https://host/personkit`, the proxy
/// removing the prefix), the pages' own links (`href="/…"`, `action="/…"`, redirects) get the prefix, so every
/// link stays under it. Only attribute values the pages write start with `="/`: maud escapes the quotes of any
/// text it is given, so captured content cannot be rewritten into a link.
async fn under_public_path(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let prefix = public_path(&st);
    let resp = next.run(req).await;
    if prefix.is_empty() {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    if let Some(loc) = parts
        .headers
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        && loc.starts_with('/')
        && let Ok(v) = HeaderValue::from_str(&format!("{prefix}{loc}"))
    {
        parts.headers.insert(header::LOCATION, v);
    }
    let html = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if !html {
        return Response::from_parts(parts, body);
    }
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return PageError::from(AppError::internal()).into_response();
    };
    let text = String::from_utf8_lossy(&bytes)
        .replace("href=\"/", &format!("href=\"{prefix}/"))
        .replace("action=\"/", &format!("action=\"{prefix}/"));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(text))
}

/// Headers of every dashboard response: no framing, no scripts, nothing from elsewhere, nothing cached, no
/// referrer to other sites (sign-in links carry a secret in their query). Not `no-referrer`: with it, Chromium
/// sends `Origin: null` on the pages' own form posts, which the same-origin check must refuse.
async fn page_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    let set = |h: &mut HeaderMap, k: header::HeaderName, v: &'static str| {
        h.insert(k, HeaderValue::from_static(v));
    };
    set(
        h,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'",
    );
    set(h, header::X_FRAME_OPTIONS, "DENY");
    set(h, header::REFERRER_POLICY, "same-origin");
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    if !h.contains_key(header::CACHE_CONTROL) {
        set(h, header::CACHE_CONTROL, "no-store");
    }
    resp
}

/// A dashboard error: an HTML page with the status, what went wrong and what to do.
pub(crate) struct PageError {
    status: StatusCode,
    title: &'static str,
    message: String,
    hint: String,
}

impl PageError {
    pub(crate) fn new(
        status: StatusCode,
        title: &'static str,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> PageError {
        PageError {
            status,
            title,
            message: message.into(),
            hint: hint.into(),
        }
    }
}

impl From<AppError> for PageError {
    fn from(e: AppError) -> PageError {
        let title = match e.status {
            StatusCode::NOT_FOUND => "Not found",
            StatusCode::BAD_REQUEST => "That did not work",
            _ => "The relay could not answer",
        };
        PageError::new(e.status, title, e.body.message, e.body.hint)
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let body = bare_page(
            self.title,
            html! {
                p { (self.message) }
                p.hint { (self.hint) }
                p { a href="/" { "Back to the overview" } }
            },
        );
        (self.status, Html(body.into_string())).into_response()
    }
}

/// A page without navigation (errors, sign-in, signed out).
pub(crate) fn bare_page(title: &str, body: Markup) -> Markup {
    html! {
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
                main #main .narrow {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

fn signed_out(status: StatusCode) -> Response {
    let body = bare_page(
        "Sign in to your library",
        html! {
            p { "This page needs a dashboard session. On the machine the relay runs on, run:" }
            pre { code { "personkit open" } }
            p { "It prints (and opens) a one-time sign-in link. In the extension, the popup's "
                strong { "Open library" } " does the same." }
            p.hint { "A device token does not open the dashboard, and a sign-in link works once, for 5 minutes." }
        },
    );
    (status, Html(body.into_string())).into_response()
}

/// Lets a request through only with a live session cookie; for anything but GET/HEAD, also only from this
/// relay's own pages (a cross-site form post carries another `Origin`, or `Sec-Fetch-Site: cross-site`).
async fn require_session(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let now = st.clock.now();
    let safe = matches!(*req.method(), Method::GET | Method::HEAD);
    if !safe && !same_origin(req.headers(), st.config.public_url.as_deref()) {
        return PageError::new(
            StatusCode::FORBIDDEN,
            "Refused",
            "this form was sent from another site",
            "use the dashboard's own pages",
        )
        .into_response();
    }
    let secret = match session_cookie(req.headers()) {
        Some(s) => {
            let probe = s.clone();
            match st
                .read(move |c| signin::session_is_open(c, &probe, now))
                .await
            {
                Ok(true) => Some(s),
                Ok(false) => None,
                Err(e) => return PageError::from(e).into_response(),
            }
        }
        None => None,
    };
    let Some(secret) = secret else {
        return signed_out(if safe {
            StatusCode::UNAUTHORIZED
        } else {
            StatusCode::FORBIDDEN
        });
    };
    let action = req.uri().path().to_owned();
    req.extensions_mut().insert(SessionSecret(secret));
    req.extensions_mut().insert(PostedTo(action));
    next.run(req).await
}

/// True when a state-changing request comes from this relay's own origin, as far as the browser says: the
/// address it was sent to (`Host`), or the origin of the relay's public URL (a proxy may rewrite `Host`).
fn same_origin(headers: &HeaderMap, public_url: Option<&str>) -> bool {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    if let Some(origin) = headers.get(header::ORIGIN) {
        let public_origin = public_url.map(|u| {
            let (scheme, rest) = u.split_once("://").unwrap_or(("", u));
            format!("{scheme}://{}", rest.split('/').next().unwrap_or(""))
        });
        let ok = match (origin.to_str().ok(), host) {
            (Some(o), _) if public_origin.as_deref() == Some(o) => true,
            (Some(o), Some(h)) => {
                o.strip_prefix("http://")
                    .or_else(|| o.strip_prefix("https://"))
                    == Some(h)
            }
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    match headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        None | Some("same-origin") => true,
        Some(_) => false,
    }
}

/// The fields of a form posted to `to`, after its CSRF token was checked (minted for this session and this
/// form's action) and used up.
pub(crate) async fn posted_form(
    ctx: &Ctx,
    to: &PostedTo,
    body: Body,
) -> Result<crate::routes::read::Params, PageError> {
    posted_fields(
        ctx,
        to,
        body,
        FORM_BYTES,
        &["csrf", "site", "since", "until", "confirm"],
    )
    .await
}

/// An Approve or Reject button of a page's list: a session form posting to `action` its CSRF token, the item's id
/// under `field` and the decision; `what` names the item for a screen reader.
pub(crate) fn decision_button(
    action: &str,
    csrf: &str,
    field: &str,
    id: &str,
    approve: bool,
    what: &str,
) -> Markup {
    let (decision, label, class) = if approve {
        ("approve", "Approve", "approve")
    } else {
        ("reject", "Reject", "danger")
    };
    html! {
        form.inline method="post" action=(action) {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name=(field) value=(id);
            input type="hidden" name="decision" value=(decision);
            button class=(class) type="submit" aria-label={(label) ": " (what)} { (label) }
        }
    }
}

/// Reads what a [`decision_button`] posted: whether it approves, and the item's id (`field`). Any other decision
/// is a 400 that points at the buttons of `page`.
pub(crate) async fn posted_decision(
    ctx: &Ctx,
    to: &PostedTo,
    body: Body,
    field: &'static str,
    page: &str,
) -> Result<(bool, String), PageError> {
    let f = posted_fields(ctx, to, body, FORM_BYTES, &["csrf", field, "decision"]).await?;
    let approve = match f.get("decision").as_deref() {
        Some("approve") => true,
        Some("reject") => false,
        _ => {
            return Err(PageError::new(
                StatusCode::BAD_REQUEST,
                "That did not work",
                "the decision is approve or reject",
                format!("use the buttons on the {page} page"),
            ));
        }
    };
    Ok((approve, f.get(field).unwrap_or_default()))
}

/// [`posted_form`] for a form with other fields (`allowed`, `csrf` among them) and a body of up to `max_bytes`.
pub(crate) async fn posted_fields(
    ctx: &Ctx,
    to: &PostedTo,
    body: Body,
    max_bytes: usize,
    allowed: &[&str],
) -> Result<crate::routes::read::Params, PageError> {
    let bytes = axum::body::to_bytes(body, max_bytes).await.map_err(|_| {
        PageError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "That did not work",
            "the form was too large",
            "go back and try again",
        )
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let pairs = crate::routes::read::form_urlencoded(&text);
    let token = pairs
        .iter()
        .find(|(k, _)| k == "csrf")
        .map(|(_, v)| v.as_str())
        .unwrap_or("");
    if !ctx
        .st
        .sessions
        .consume_csrf(&ctx.secret.0, &to.0, token, ctx.st.clock.now())
    {
        return Err(PageError::new(
            StatusCode::FORBIDDEN,
            "Refused",
            "this form has expired or was already sent",
            "reload the page and send the form again",
        ));
    }
    crate::routes::read::Params::parse(Some(&text), allowed, "use the dashboard's own forms")
        .map_err(PageError::from)
}

/// `GET /signin?t=<secret>`: uses a one-time link and opens a session. The answer is a page that moves on to
/// the overview itself, so the first page is a same-site navigation and gets the SameSite=Strict cookie even
/// when the link was opened from another application or site.
async fn signin(State(st): State<AppState>, headers: HeaderMap, uri: axum::http::Uri) -> Response {
    let query = crate::routes::read::form_urlencoded(uri.query().unwrap_or(""));
    let secret = query
        .iter()
        .find(|(k, _)| k == "t")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let next = landing(
        query
            .iter()
            .find(|(k, _)| k == "next")
            .map(|(_, v)| v.as_str()),
    );
    let now = st.clock.now();
    let db = st.db.clone();
    let opened = tokio::task::spawn_blocking(move || {
        db.write(|c| {
            if signin::redeem_link(c, &secret, now)? {
                signin::open_session(c, now).map(Some)
            } else {
                Ok::<_, personkit_store::DbError>(None)
            }
        })
    })
    .await;
    let session = match opened {
        Ok(Ok(Some(session))) => session,
        Ok(Ok(None)) => {
            return (
                StatusCode::UNAUTHORIZED,
                Html(bare_page(
                    "This sign-in link does not work",
                    html! {
                        p { "It has expired (links last 5 minutes) or was already used (each works once)." }
                        p { "Run " code { "personkit open" } " again for a new one." }
                    },
                ).into_string()),
            )
                .into_response();
        }
        _ => return PageError::from(AppError::storage()).into_response(),
    };
    let cookie = format!(
        "{}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        cookie_name(&headers),
        session.expose(),
        SESSION_TTL.whole_seconds()
    );
    let mut resp = (
        StatusCode::OK,
        Html(html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta http-equiv="refresh" content={"0; url=" (next)};
                    title { "Signed in · personkit" }
                    link rel="stylesheet" href="assets/app.css";
                }
                body { main .narrow { h1 { "Signed in" } p { a href=(next) { "Open your library" } } } }
            }
        }.into_string()),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

/// Where a sign-in link lands, relative to `/signin` (so it stays under a proxy's sub-path): the overview, or
/// `threads/<id>` when the link names a thread (the extension's link to the conversation in the current tab).
/// Anything else is ignored, so a link cannot send the browser elsewhere.
fn landing(next: Option<&str>) -> String {
    match next.and_then(|n| n.strip_prefix("threads/")) {
        Some(id)
            if (8..=36).contains(&id.len())
                && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') =>
        {
            format!("./threads/{id}")
        }
        _ => "./".to_owned(),
    }
}

/// `POST /signout`: ends the session and clears the cookie.
async fn signout(
    State(st): State<AppState>,
    axum::Extension(secret): axum::Extension<SessionSecret>,
    axum::Extension(to): axum::Extension<PostedTo>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let ctx = Ctx {
        st: st.clone(),
        secret,
    };
    if let Err(e) = posted_form(&ctx, &to, body).await {
        return e.into_response();
    }
    let db = st.db.clone();
    let ended = ctx.secret.0.clone();
    match tokio::task::spawn_blocking(move || db.write(|c| signin::end_session(c, &ended))).await {
        Ok(Ok(())) => {}
        _ => return PageError::from(AppError::storage()).into_response(),
    }
    st.sessions.end(&ctx.secret.0);
    let mut resp = (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, HeaderValue::from_static("/"))],
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0",
        cookie_name(&headers)
    )) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        include_str!("app.css"),
    )
        .into_response()
}
