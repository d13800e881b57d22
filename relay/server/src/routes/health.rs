//! `GET /v1/health` (public: is the relay up, which version) and `GET /v1/me/capture-health` (per-surface traffic
//! lights for the paired device's popup).

use axum::Json;
use axum::extract::State;
use personkit_store::health::{self, CaptureHealth};

use crate::error::AppError;
use crate::state::AppState;

/// `{ok, version, limits}`: the limits are what this relay accepts per batch and per turn, so a client that
/// had a turn rejected can tell when retrying it may now succeed.
pub(super) async fn get_health(State(st): State<AppState>) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "ok": true,
        "version": env!("CARGO_PKG_VERSION"),
        "limits": {
            "max_batch_items": st.config.max_batch_items,
            "max_batch_bytes": st.config.max_batch_bytes,
            "max_content_bytes": personkit_shared::wire::MAX_CONTENT_BYTES,
        },
    }))
}

pub(super) async fn get_capture_health(
    State(st): State<AppState>,
) -> Result<Json<CaptureHealth>, AppError> {
    let now = st.clock.now();
    Ok(Json(
        st.read(move |c| health::capture_health(c, now)).await?,
    ))
}
