//! The HTTP API: [`app`] builds the axum router over an [`AppState`]; one module per route group. Every error
//! body is `{"code","message","hint"}` ([`AppError`]).
//!
//! **API boundary:** routes and bodies are the contract in `docs/wire-format.md`; the extension, importers and
//! other relays code against them.

mod events;
mod forget;
mod graph;
mod health;
mod mcp;
pub(crate) mod memory;
mod observations;
mod pair;
mod query;
pub(crate) mod read;
mod reports;
mod sync;

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use personkit_store::auth;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::error::AppError;
use crate::state::{AppState, AuthedDevice};

/// Largest body of any route other than `/v1/observations`.
const SMALL_BODY_BYTES: usize = 16 * 1024;

/// The router: public `/v1/health` and `/v1/pair`; everything else under `/v1` behind a device token; the MCP
/// server at `/mcp` behind a device or agent token and the Origin check.
pub fn app(state: AppState) -> Router {
    let backend = personkit_mcp::Backend::new(
        state.db.clone(),
        state.indexes.clone(),
        state.embedder.clone(),
        state.clock.clone(),
    )
    .with_proposals(personkit_mcp::Proposals::over(
        state.db.clone(),
        crate::jobs::knowledge_settings(state.db.path()),
        state.clock.clone(),
    ))
    .with_memory(state.profile_path.clone(), state.local)
    .with_search(state.search)
    .with_uses(personkit_mcp::Uses::over(state.db.clone()));
    let mcp = Router::new()
        .route_service("/mcp", personkit_mcp::http_service(backend))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            mcp::jsonrpc_front,
        ))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_device,
        ))
        .route_layer(middleware::from_fn_with_state(state.clone(), check_origin));
    let protected = Router::new()
        .route("/v1/observations", post(observations::post_observations))
        .route("/v1/me/capture-health", get(health::get_capture_health))
        .route(
            "/v1/me/capture-reports",
            post(reports::post_capture_reports),
        )
        .route("/v1/query", get(query::get_query))
        .route("/v1/threads", get(read::list_threads))
        .route("/v1/threads/by-url", get(read::get_thread_by_url))
        .route(
            "/v1/threads/{id}",
            get(read::get_thread).delete(forget::delete_thread),
        )
        .route("/v1/messages/{id}", get(read::get_message))
        .route("/v1/changes", get(read::get_changes))
        .route("/v1/today", get(read::get_today))
        .route("/v1/events", get(events::list_events))
        .route("/v1/entities", get(graph::list_entities))
        .route("/v1/entities/{id}", get(graph::get_entity))
        .route("/v1/entities/{id}/neighbours", get(graph::get_neighbours))
        .route("/v1/graph/path", get(graph::get_path))
        .route("/v1/graph/subgraph", get(graph::get_subgraph))
        .route("/v1/graph/candidates", get(graph::get_candidates))
        .route("/v1/graph/build", post(graph::post_build))
        .route("/v1/graph/proposals", get(graph::get_proposals))
        .route(
            "/v1/graph/proposals/{id}/{decision}",
            post(graph::post_decision),
        )
        .route("/v1/me/dashboard-link", post(read::post_dashboard_link))
        .route("/v1/distill/status", get(memory::get_distill_status))
        .route("/v1/distill/{tier}", post(memory::post_distill))
        .route("/v1/context", get(memory::get_context))
        .route(
            "/v1/profile",
            get(memory::get_profile).put(memory::put_profile),
        )
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_device,
        ));
    let sync_routes = Router::new()
        .route(
            "/v1/sync/pages",
            get(sync::get_pages).post(sync::post_pages),
        )
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            sync::require_sync_peer,
        ));
    Router::new()
        .route("/v1/health", get(health::get_health))
        .route("/v1/pair", post(pair::post_pair))
        .route("/v1/sync/pair", post(sync::post_pair))
        .merge(protected)
        .merge(sync_routes)
        .merge(mcp)
        .merge(crate::dashboard::router(state.clone()))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(log_request))
        .layer(cors())
        .layer(middleware::from_fn_with_state(state.clone(), check_host))
        .with_state(state)
}

/// Refuses requests addressed to a name this relay does not answer to (DNS rebinding: a page whose own name
/// now points at 127.0.0.1 sends its name as `Host`). Runs before everything else, CORS preflights included.
async fn check_host(
    State(st): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, AppError> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()));
    match host {
        Some(h) if st.config.host_allowed(&h) => Ok(next.run(req).await),
        _ => Err(AppError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "host_not_allowed",
            "this relay does not answer to that host name",
            "connect to it as 127.0.0.1 or localhost, or start it with --allow-host <name> (or --public-url <url>)",
        )),
    }
}

/// The MCP transport's rule against DNS rebinding and cross-site requests: a request that carries an `Origin`
/// must come from a page of this relay's own host names (loopback, `--allow-host`); MCP clients that are not
/// browsers send none.
async fn check_origin(
    State(st): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, AppError> {
    let Some(origin) = req.headers().get(header::ORIGIN) else {
        return Ok(next.run(req).await);
    };
    let allowed = origin
        .to_str()
        .ok()
        .and_then(|o| {
            o.strip_prefix("http://")
                .or_else(|| o.strip_prefix("https://"))
        })
        .filter(|authority| !authority.contains(['/', '@', '?', '#']))
        .is_some_and(|authority| st.config.host_allowed(authority));
    if allowed {
        Ok(next.run(req).await)
    } else {
        Err(AppError::new(
            StatusCode::FORBIDDEN,
            "origin_not_allowed",
            "requests to /mcp from a web page of another site are refused",
            "connect from an MCP client (which sends no Origin), or from a page served by this relay's own host name",
        ))
    }
}

/// CORS for browser-extension origins only.
fn cors() -> CorsLayer {
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(|origin: &HeaderValue, _| {
            is_extension_origin(origin.as_bytes())
        }))
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
        .expose_headers([header::RETRY_AFTER])
        .max_age(Duration::from_secs(600))
}

/// `chrome-extension://<id>` or `moz-extension://<id>`.
pub fn is_extension_origin(origin: &[u8]) -> bool {
    let rest = origin
        .strip_prefix(b"chrome-extension://")
        .or_else(|| origin.strip_prefix(b"moz-extension://"));
    rest.is_some_and(|id| {
        !id.is_empty() && id.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-')
    })
}

/// Logs method, path (never the query string), status and latency. Never bodies or headers.
async fn log_request(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let start = Instant::now();
    let resp = next.run(req).await;
    let status = resp.status();
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    if status.is_server_error() {
        tracing::warn!(%method, %path, status = status.as_u16(), ms, "request failed");
    } else if status.is_client_error() {
        tracing::info!(%method, %path, status = status.as_u16(), ms, "request rejected");
    } else {
        tracing::debug!(%method, %path, status = status.as_u16(), ms, "request");
    }
    resp
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Auth + per-token rate limit for the protected routes.
async fn require_device(
    State(st): State<AppState>,
    mut req: Request,
    next: Next,
) -> Result<Response, AppError> {
    let token = bearer(req.headers())
        .ok_or_else(AppError::unauthorized)?
        .to_owned();
    let device = st
        .read(move |c| auth::authenticate(c, &token))
        .await?
        .ok_or_else(AppError::unauthorized)?;
    if let Err(wait) = st.limiter.check(&device.id) {
        return Err(AppError::rate_limited(
            wait,
            format!(
                "more than {} requests per second from this device",
                st.config.rate_limit
            ),
            "send larger batches less often",
        ));
    }
    // The MCP tools name an agent's proposals after its token.
    req.extensions_mut()
        .insert(personkit_mcp::Caller(device.name.clone()));
    req.extensions_mut().insert(AuthedDevice(device));
    Ok(next.run(req).await)
}

/// [`read_body`] with its over-the-limit case answered as 413 `body_too_large` with `message` and `hint`.
pub(crate) async fn read_body_or_413(
    body: Body,
    limit: usize,
    timeout: Duration,
    message: impl Into<String>,
    hint: impl Into<String>,
) -> Result<Bytes, AppError> {
    read_body(body, limit, timeout).await.map_err(|e| {
        e.unwrap_or_else(|| {
            AppError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                message,
                hint,
            )
        })
    })
}

/// Read a body up to `limit` bytes within `timeout`; `Err(None)` when it is larger, `Err(Some(..))` on a broken
/// or too slow body.
pub(crate) async fn read_body(
    body: Body,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, Option<AppError>> {
    let Ok(read) = tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await else {
        return Err(Some(AppError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the request body did not arrive within {} s",
                timeout.as_secs()
            ),
            "resend the request",
        )));
    };
    match read {
        Ok(b) => Ok(b),
        Err(e) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
                || e.to_string().contains("length limit");
            if too_large {
                Err(None)
            } else {
                Err(Some(AppError::bad_request(
                    "malformed_body",
                    "the request body could not be read",
                    "resend the request",
                )))
            }
        }
    }
}

/// What a pairing route is redeeming, for its error messages.
pub(crate) struct PairingBody {
    /// The JSON object the route takes, as shown in its errors (`{"code", "device_name"}`).
    pub shape: &'static str,
    /// What to do when the object has the wrong fields.
    pub hint: &'static str,
}

/// Reads and parses the body of a pairing request (`/v1/pair`, `/v1/sync/pair`). Only `application/json` is taken:
/// a web page can send `text/plain` without a CORS preflight, JSON needs one, and the relay grants CORS to
/// extension origins only — so no page can redeem a code it learnt.
pub(crate) async fn read_pairing_body<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
    timeout: Duration,
    what: PairingBody,
) -> Result<T, AppError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(AppError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "a pairing request must be JSON",
            format!("send Content-Type: application/json with {}", what.shape),
        ));
    }
    let bytes = read_body_or_413(
        body,
        SMALL_BODY_BYTES,
        timeout,
        "pairing request too large",
        format!("send {}", what.shape),
    )
    .await?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| malformed_json(&e))?;
    serde_json::from_value(value).map_err(|_| {
        AppError::bad_request(
            "malformed_request",
            format!("expected {}", what.shape),
            what.hint,
        )
    })
}

pub(crate) fn malformed_json(e: &serde_json::Error) -> AppError {
    AppError::bad_request(
        "malformed_json",
        format!(
            "the body is not valid JSON (line {}, column {})",
            e.line(),
            e.column()
        ),
        "send a JSON object with Content-Type: application/json",
    )
}

async fn not_found() -> AppError {
    AppError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route",
        "see docs/wire-format.md for the relay's routes",
    )
}

async fn method_not_allowed() -> AppError {
    AppError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method",
        "see docs/wire-format.md for the relay's routes",
    )
}
