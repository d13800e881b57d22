//! `POST /v1/me/capture-reports`: a paired device says which surfaces' adapters no longer read their pages
//! (`adapter_stale`) and which read them again; `GET /v1/me/capture-health` colours those surfaces.

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use personkit_shared::health::{CaptureReports, MAX_REPORTS};
use personkit_shared::wire::ItemResult;
use personkit_store::health;
use serde::Serialize;

use super::{SMALL_BODY_BYTES, malformed_json, read_body_or_413};
use crate::error::AppError;
use crate::state::{AppState, AuthedDevice};

/// The answer: one result per report, in the order sent.
#[derive(Debug, Serialize)]
pub(super) struct ReportsResponse {
    results: Vec<ItemResult>,
}

pub(super) async fn post_capture_reports(
    State(st): State<AppState>,
    Extension(AuthedDevice(device)): Extension<AuthedDevice>,
    body: Body,
) -> Result<Json<ReportsResponse>, AppError> {
    if !device.kind.can_ingest() {
        return Err(AppError::read_only_token(
            "this is an agent token: it may read the corpus but not report on capture",
            "send capture reports with a paired device's token (`personkit pair`)",
        ));
    }
    let bytes = read_body_or_413(
        body,
        SMALL_BODY_BYTES,
        st.config.body_timeout,
        format!("the body is over the limit of {SMALL_BODY_BYTES} bytes"),
        format!("send at most {MAX_REPORTS} reports"),
    )
    .await?;
    let reports: CaptureReports = serde_json::from_slice(&bytes).map_err(|e| {
        if e.classify() == serde_json::error::Category::Data {
            AppError::bad_request(
                "malformed_reports",
                "the body is not {\"reports\": [{surface, stale_since, rule}]}",
                "send {\"reports\": [{\"surface\": \"browser-ext:grok\", \"stale_since\": \"2026-11-22T10:00:00Z\" or null, \"rule\": \"message_roots[0]\"}]} (see docs/wire-format.md)",
            )
        } else {
            malformed_json(&e)
        }
    })?;
    if reports.reports.len() > MAX_REPORTS {
        return Err(AppError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_many_reports",
            format!(
                "the body has {} reports, over the limit of {MAX_REPORTS}",
                reports.reports.len()
            ),
            "send one report per surface",
        ));
    }
    let now = st.clock.now();
    let db = st.db.clone();
    let results = tokio::task::spawn_blocking(move || {
        db.write(|c| health::record_reports(c, &device.id, &reports.reports, now))
    })
    .await
    .map_err(|_| AppError::internal())?
    .map_err(AppError::from)?;
    Ok(Json(ReportsResponse { results }))
}
