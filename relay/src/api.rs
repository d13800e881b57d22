//! The HTTP API: [`app`] builds the axum router over an [`AppState`]. Every error body is
//! `{"code","message","hint"}` ([`AppError`]); storage failures are 503 with nothing acknowledged.
//!
//! **API boundary:** routes and bodies are the contract in `docs/wire-format.md`; the extension, importers and
//! other relays code against them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use personkit_shared::wire::{ApiError, BatchResponse};
use serde::Deserialize;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::auth::{self, AuthError, Device};
use crate::clock::{Clock, fmt_time};
use crate::config::ApiConfig;
use crate::db::{Db, DbError};
use crate::health;
use crate::ingest::{self, Origin, StorageError};
use crate::ratelimit::RateLimiter;

/// Largest body of any route other than `/v1/observations`.
const SMALL_BODY_BYTES: usize = 16 * 1024;
/// Pairing attempts allowed per second (all clients together), and their burst.
const PAIR_RATE: f64 = 2.0;
const PAIR_BURST: f64 = 20.0;

/// Shared state of the server. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    pub db: Arc<Db>,
    pub clock: Clock,
    pub config: Arc<ApiConfig>,
    limiter: Arc<RateLimiter>,
    pair_limiter: Arc<RateLimiter>,
}

impl AppState {
    pub fn new(db: Db, config: ApiConfig, clock: Clock) -> AppState {
        AppState {
            db: Arc::new(db),
            clock,
            limiter: Arc::new(RateLimiter::new(config.rate_limit, config.rate_burst)),
            pair_limiter: Arc::new(RateLimiter::new(PAIR_RATE, PAIR_BURST)),
            config: Arc::new(config),
        }
    }

    /// Run a closure on a reader connection on a blocking thread.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> Result<T, DbError> + Send + 'static,
    ) -> Result<T, AppError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || db.read(f))
            .await
            .map_err(|_| AppError::internal())?
            .map_err(AppError::from)
    }
}

/// The device a request was authenticated as; handlers behind auth take `Extension<AuthedDevice>`.
#[derive(Debug, Clone)]
pub struct AuthedDevice(pub Device);

/// An error response: status + `{code, message, hint}` (+ `Retry-After` when set). Never carries internals.
#[derive(Debug, Clone)]
pub struct AppError {
    pub status: StatusCode,
    pub body: ApiError,
    pub retry_after_secs: Option<u64>,
}

impl AppError {
    pub fn new(
        status: StatusCode,
        code: &str,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> AppError {
        AppError {
            status,
            body: ApiError::new(code, message, hint),
            retry_after_secs: None,
        }
    }

    pub fn unauthorized() -> AppError {
        AppError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing, unknown or revoked device token",
            "pair again: run `personkit pair` on the relay and enter the code in the extension",
        )
    }

    pub fn storage() -> AppError {
        AppError {
            retry_after_secs: Some(5),
            ..AppError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "storage_unavailable",
                "the corpus could not be written; nothing of this request was stored",
                "keep the items and retry later; check the relay's log and disk space",
            )
        }
    }

    pub fn internal() -> AppError {
        AppError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the relay failed while handling the request; nothing was stored",
            "retry; if it persists, check the relay's log",
        )
    }

    pub fn bad_request(
        code: &str,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> AppError {
        AppError::new(StatusCode::BAD_REQUEST, code, message, hint)
    }

    fn too_large(message: impl Into<String>, max_items: usize, max_bytes: usize) -> AppError {
        AppError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "batch_too_large",
            message,
            format!(
                "send at most {max_items} observations and {max_bytes} bytes per request; split the batch"
            ),
        )
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, Json(self.body)).into_response();
        if let Some(secs) = self.retry_after_secs
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        resp
    }
}

impl From<DbError> for AppError {
    fn from(e: DbError) -> AppError {
        tracing::error!(error = %e, "storage error");
        AppError::storage()
    }
}

impl From<StorageError> for AppError {
    fn from(e: StorageError) -> AppError {
        tracing::error!(error = %e, "storage error during ingest");
        AppError::storage()
    }
}

/// The router: public `/v1/health` and `/v1/pair`; everything else under `/v1` behind a device token.
pub fn app(state: AppState) -> Router {
    let protected = Router::new()
        .route("/v1/observations", post(post_observations))
        .route("/v1/me/capture-health", get(get_capture_health))
        .route("/v1/query", get(crate::search::http::get_query))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_device,
        ));
    Router::new()
        .route("/v1/health", get(get_health))
        .route("/v1/pair", post(post_pair))
        .merge(protected)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(log_request))
        .layer(cors())
        .with_state(state)
}

/// CORS for browser-extension origins only.
fn cors() -> CorsLayer {
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(|origin: &HeaderValue, _| {
            is_extension_origin(origin.as_bytes())
        }))
        .allow_methods([Method::GET, Method::POST])
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
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        return Err(AppError {
            retry_after_secs: Some(secs),
            ..AppError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "more than {} requests per second from this device",
                    st.config.rate_limit
                ),
                format!("wait {secs} s (Retry-After) and send larger batches less often"),
            )
        });
    }
    req.extensions_mut().insert(AuthedDevice(device));
    Ok(next.run(req).await)
}

/// Read a body up to `limit` bytes within `timeout`; `Err(None)` when it is larger, `Err(Some(..))` on a broken
/// or too slow body.
async fn read_body(body: Body, limit: usize, timeout: Duration) -> Result<Bytes, Option<AppError>> {
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

fn malformed_json(e: &serde_json::Error) -> AppError {
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

async fn get_health() -> Json<serde_json::Value> {
    Json(serde_json::json!({"ok": true, "version": env!("CARGO_PKG_VERSION")}))
}

#[derive(Debug, Deserialize)]
struct PairRequest {
    code: String,
    #[serde(default)]
    device_name: String,
}

async fn post_pair(State(st): State<AppState>, body: Body) -> Result<Response, AppError> {
    if let Err(wait) = st.pair_limiter.check("pair") {
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        return Err(AppError {
            retry_after_secs: Some(secs),
            ..AppError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "too many pairing attempts",
                format!("wait {secs} s and try again"),
            )
        });
    }
    let bytes = read_body(body, SMALL_BODY_BYTES, st.config.body_timeout)
        .await
        .map_err(|e| {
            e.unwrap_or_else(|| {
                AppError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    "pairing request too large",
                    "send {\"code\", \"device_name\"}",
                )
            })
        })?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| malformed_json(&e))?;
    let req: PairRequest = serde_json::from_value(value).map_err(|_| {
        AppError::bad_request(
            "malformed_request",
            "expected {\"code\": string, \"device_name\": string}",
            "send the pairing code shown by `personkit pair` and a name for this device",
        )
    })?;
    let now = st.clock.now();
    let db = st.db.clone();
    let res = tokio::task::spawn_blocking(move || {
        db.write(|c| auth::redeem_pairing_code(c, &req.code, &req.device_name, now))
    })
    .await
    .map_err(|_| AppError::internal())?;
    match res {
        Ok((device, token)) => {
            tracing::info!(device_id = %device.id, "device paired");
            Ok(
                Json(serde_json::json!({"token": token.expose(), "device_id": device.id}))
                    .into_response(),
            )
        }
        Err(AuthError::InvalidCode) => Err(AppError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_pairing_code",
            "the pairing code is wrong, expired or already used",
            "run `personkit pair` on the relay for a fresh code (valid 10 minutes, one use)",
        )),
        Err(AuthError::Db(e)) => Err(e.into()),
        Err(e) => {
            tracing::error!(error = %e, "pairing failed");
            Err(AppError::internal())
        }
    }
}

async fn post_observations(
    State(st): State<AppState>,
    Extension(AuthedDevice(device)): Extension<AuthedDevice>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<BatchResponse>, AppError> {
    let (max_items, max_bytes) = (st.config.max_batch_items, st.config.max_batch_bytes);
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > max_bytes) {
        return Err(AppError::too_large(
            format!(
                "the body is {} bytes, over the limit of {max_bytes}",
                declared.unwrap_or(0)
            ),
            max_items,
            max_bytes,
        ));
    }
    let bytes = read_body(body, max_bytes, st.config.body_timeout)
        .await
        .map_err(|e| {
            e.unwrap_or_else(|| {
                AppError::too_large(
                    format!("the body is over the limit of {max_bytes} bytes"),
                    max_items,
                    max_bytes,
                )
            })
        })?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| malformed_json(&e))?;
    let items = match value {
        serde_json::Value::Object(mut map) => match map.remove("observations") {
            Some(serde_json::Value::Array(items)) => items,
            _ => return Err(malformed_batch()),
        },
        _ => return Err(malformed_batch()),
    };
    if items.len() > max_items {
        return Err(AppError::too_large(
            format!(
                "the batch has {} observations, over the limit of {max_items}",
                items.len()
            ),
            max_items,
            max_bytes,
        ));
    }
    let now = st.clock.now();
    let origin = Origin {
        device_id: device.id.clone(),
    };
    let db = st.db.clone();
    let resp = tokio::task::spawn_blocking(move || {
        db.write(|c| {
            let resp = ingest::ingest_batch(c, &origin, &items, now)?;
            Ok::<_, StorageError>(resp)
        })
    })
    .await
    .map_err(|_| AppError::internal())?;
    let resp = match resp {
        Ok(r) => r,
        Err(e) => return Err(e.into()),
    };
    tracing::info!(
        device_id = %device.id,
        stored = resp.stored,
        duplicate = resp.duplicate,
        rejected = resp.rejected,
        "batch ingested"
    );
    Ok(Json(resp))
}

fn malformed_batch() -> AppError {
    AppError::bad_request(
        "malformed_batch",
        "expected a JSON object {\"observations\": [...]}",
        "wrap the items in {\"observations\": [...]} (see docs/wire-format.md)",
    )
}

async fn get_capture_health(
    State(st): State<AppState>,
) -> Result<Json<health::CaptureHealth>, AppError> {
    let now = st.clock.now();
    Ok(Json(
        st.read(move |c| health::capture_health(c, now)).await?,
    ))
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

/// Stored form of the current time (for handlers added by other modules).
pub fn now_string(st: &AppState) -> String {
    fmt_time(st.clock.now())
}
