//! `POST /v1/pair`: redeem a one-time pairing code for a device token. Public, rate limited.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
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
    body: Body,
) -> Result<Response, AppError> {
    if let Err(wait) = st.pair_limiter.check("pair") {
        return Err(AppError::rate_limited(
            wait,
            "too many pairing attempts",
            "try again",
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
