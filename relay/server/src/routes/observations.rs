//! `POST /v1/observations`: a batch of observations from a paired device, stored in one transaction, answered
//! per item. A 200 is sent only after the commit.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::{Extension, Json};
use personkit_shared::wire::{BatchResponse, ItemStatus};
use personkit_store::ingest::{self, Origin, RawItem};
use serde::Deserialize;
use serde_json::value::RawValue;

/// A batch body with its items as borrowed JSON text.
#[derive(Deserialize)]
struct Batch<'a> {
    #[serde(borrow)]
    observations: Vec<&'a RawValue>,
}

use super::{malformed_json, read_body};
use crate::error::AppError;
use crate::state::{AppState, AuthedDevice};

pub(super) async fn post_observations(
    State(st): State<AppState>,
    Extension(AuthedDevice(device)): Extension<AuthedDevice>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<BatchResponse>, AppError> {
    if !device.kind.can_ingest() {
        return Err(AppError::read_only_token(
            "this is an agent token: it may read the corpus but not add to it",
            "send turns with a paired device's token (`personkit pair`)",
        ));
    }
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
    let now = st.clock.now();
    let origin = Origin {
        device_id: device.id.clone(),
    };
    let db = st.db.clone();
    // Parsing and storing run on a blocking thread. Each item stays JSON text borrowed from the body, parsed once
    // into its observation by ingest, so one bad item is rejected on its own.
    let resp = tokio::task::spawn_blocking(move || -> Result<BatchResponse, AppError> {
        let items = match serde_json::from_slice::<Batch<'_>>(&bytes) {
            Ok(b) => b.observations,
            Err(e) if e.classify() == serde_json::error::Category::Data => {
                return Err(malformed_batch());
            }
            Err(e) => return Err(malformed_json(&e)),
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
        let items: Vec<RawItem<'_>> = items.iter().map(|r| RawItem::Json(r.get())).collect();
        let resp = db.write(|c| ingest::ingest_items(c, &origin, &items, now))?;
        // A new turn is a use of its thread (heat): one access per thread the batch added to, after the batch
        // committed. Not counting it is logged and never fails the batch, which is stored.
        let mut threads: Vec<String> = resp
            .results
            .iter()
            .filter(|r| r.status == ItemStatus::Stored)
            .filter_map(|r| r.thread_id.clone())
            .collect();
        threads.sort_unstable();
        threads.dedup();
        if let Err(e) = db.write(|c| personkit_heat::record_thread_accesses(c, &threads, now)) {
            tracing::warn!(error = %e, "new turns were not counted as uses");
        }
        Ok(resp)
    })
    .await
    .map_err(|_| AppError::internal())??;
    if resp.stored > 0 {
        st.sync_notify.notify_one();
    }
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
