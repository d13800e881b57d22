//! `POST /v1/pair`: redeem a one-time pairing code for a device token. Public, rate limited.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use personkit_store::auth::{self, AuthError};
use serde::Deserialize;

use super::{PairingBody, read_pairing_body};
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
    let req: PairRequest = read_pairing_body(
        &headers,
        body,
        st.config.body_timeout,
        PairingBody {
            shape: "{\"code\": string, \"device_name\": string}",
            hint: "send the pairing code shown by `personkit pair` and a name for this device",
        },
    )
    .await?;
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
