//! `POST /v1/pair`: redeem a one-time pairing code for a device token. Public, rate limited.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use personkit_store::auth::{self, AuthError};
use serde::Deserialize;

use super::{SMALL_BODY_BYTES, malformed_json, read_body};
use crate::error::AppError;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
struct PairRequest {
    code: String,
    #[serde(default)]
    device_name: String,
}

pub(super) async fn post_pair(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, AppError> {
    // A web page can send `text/plain` without a CORS preflight; JSON needs one, and the relay grants CORS to
    // extension origins only.
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
            "send Content-Type: application/json with {\"code\", \"device_name\"}",
        ));
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
        // Only failures are limited: a valid, unexpired code always pairs, however many wrong ones came first
        // (codes have 31^8 values and live 10 minutes, so guessing is hopeless at any rate this allows).
        Err(AuthError::InvalidCode) => match st.pair_limiter.check("pair-failures") {
            Err(wait) => Err(AppError::rate_limited(
                wait,
                "too many wrong pairing codes",
                "check the code `personkit pair` printed",
            )),
            Ok(()) => Err(AppError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_pairing_code",
                "the pairing code is wrong, expired or already used",
                "run `personkit pair` on the relay for a fresh code (valid 10 minutes, one use)",
            )),
        },
        Err(AuthError::Db(e)) => Err(e.into()),
        Err(e) => {
            tracing::error!(error = %e, "pairing failed");
            Err(AppError::internal())
        }
    }
}
