//! `GET /v1/query?q=...&k=10&surface=...&thread=...&role=...&since=...&until=...&entity=...`: the hybrid search of
//! [`personkit_search::query`] over the state's embedder and vector indexes. Behind the device token like every
//! other `/v1` route.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query as QueryString, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use personkit_search::SearchError;
use personkit_search::params::{Params, build_query_with};
use personkit_store::DbError;
use personkit_store::budget::{Budget, READ_BUDGET};

use crate::error::AppError;
use crate::state::AppState;

const HINT: &str =
    "GET /v1/query?q=<words>&k=10 (filters: surface, thread, role, since, until, entity)";

/// Failure of a query inside the reader closure.
#[derive(Debug, thiserror::Error)]
enum QueryFailure {
    #[error(transparent)]
    Search(SearchError),
    #[error(transparent)]
    Db(#[from] DbError),
}

pub(super) async fn get_query(
    State(st): State<AppState>,
    query: Result<QueryString<Params>, QueryRejection>,
) -> Response {
    let params = match query {
        Ok(QueryString(p)) => p,
        Err(e) => {
            return AppError::bad_request(
                "bad_query",
                e.body_text(),
                "GET /v1/query?q=<words>&k=10 (k is a number; events is true or false)",
            )
            .into_response();
        }
    };
    let q = match build_query_with(&params, st.clock.now(), &st.search) {
        Ok(q) => q,
        Err(e) => return AppError::bad_request("bad_query", e.to_string(), HINT).into_response(),
    };
    let (db, indexes, embedder) = (st.db.clone(), st.indexes.clone(), st.embedder.clone());
    // The read stops when its time is up, and when this future is dropped because the client went away.
    let budget = Budget::new(READ_BUDGET);
    let _stop_if_gone = budget.cancel_on_drop();
    let result = tokio::task::spawn_blocking(move || {
        db.read_within(&budget, |conn| {
            personkit_search::query(conn, &indexes, embedder.as_deref(), &q)
                .map_err(QueryFailure::Search)
        })
    })
    .await;
    match result {
        Ok(Ok(r)) => Json(r).into_response(),
        Ok(Err(QueryFailure::Search(SearchError::BadRequest(m)))) => {
            AppError::bad_request("bad_query", m, HINT).into_response()
        }
        Ok(Err(QueryFailure::Search(e))) if AppError::search_bound(&e).is_some() => {
            AppError::search_bound(&e)
                .unwrap_or_else(AppError::internal)
                .into_response()
        }
        Ok(Err(QueryFailure::Search(SearchError::Embed(e)))) => AppError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "embedder_unavailable",
            e.to_string(),
            e.hint(),
        )
        .into_response(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "query failed");
            AppError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "storage_unavailable",
                "the corpus could not be read",
                "retry shortly; if it persists, check the relay's log",
            )
            .into_response()
        }
        Err(_) => AppError::internal().into_response(),
    }
}
