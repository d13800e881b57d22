//! `DELETE /v1/threads/{id}`: forget a whole thread for good through `personkit_store::forget::forget`, the one
//! forget call (tombstones keep a replayed queue from bringing it back). A paired device's token only: an agent
//! token may read but not change the corpus.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, response::IntoResponse, response::Response};
use personkit_store::forget::{self, ForgetError, Selection};
use personkit_store::read::ReadError;
use serde_json::json;

use crate::error::AppError;
use crate::state::{AppState, AuthedDevice};

const HINT: &str =
    "DELETE /v1/threads/{id} with the thread's full id (GET /v1/threads lists them; docs/api.md)";

enum Outcome {
    Missing,
    Forgot(forget::Counts),
}

/// `DELETE /v1/threads/{id}`.
pub(super) async fn delete_thread(
    State(st): State<AppState>,
    Extension(AuthedDevice(device)): Extension<AuthedDevice>,
    Path(id): Path<String>,
) -> Result<Response, AppError> {
    if !device.kind.can_ingest() {
        return Err(AppError::read_only_token(
            "this is an agent token: it may read the corpus but not forget from it",
            "forget with a paired device's token, `personkit forget`, or the dashboard",
        ));
    }
    let valid =
        !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    if !valid {
        return Err(AppError::bad_request(
            "bad_thread_id",
            format!(
                "{:?} is not a thread id",
                personkit_shared::wire::quote_safely(&id, 40)
            ),
            HINT,
        ));
    }
    let db = st.db.clone();
    let now = st.clock.now();
    let thread = id.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        db.write(|c| -> Result<Outcome, ForgetError> {
            // Exactly this id: a prefix is fine for reading, not for forgetting.
            match personkit_store::read::resolve_thread_id(c, &thread) {
                Ok(full) if full == thread => {}
                Ok(_) | Err(ReadError::NotFound(_)) | Err(ReadError::BadRequest(_)) => {
                    return Ok(Outcome::Missing);
                }
                Err(ReadError::Db(e)) => return Err(ForgetError::Db(e)),
            }
            forget::forget(c, &Selection::thread(&thread), now).map(Outcome::Forgot)
        })
    })
    .await
    .map_err(|_| AppError::internal())?;
    match outcome {
        Ok(Outcome::Forgot(counts)) => {
            tracing::info!(
                messages = counts.messages,
                "forgot a thread through the API"
            );
            st.sync_notify.notify_one();
            Ok(Json(json!({ "thread_id": id, "forgotten": counts })).into_response())
        }
        Ok(Outcome::Missing) => Err(AppError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no thread has id {id:?} (it may have been forgotten already)"),
            HINT,
        )),
        Err(ForgetError::EmptySelection) => Err(AppError::internal()),
        Err(ForgetError::Db(e)) => Err(AppError::from(e)),
    }
}
