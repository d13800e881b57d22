//! [`AppError`]: every error the HTTP API answers, as a status and `{code, message, hint}`. Storage failures are
//! 503 with nothing acknowledged.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use personkit_shared::wire::ApiError;
use personkit_store::DbError;
use personkit_store::ingest::StorageError;

/// An error response: status + `{code, message, hint}` (+ `Retry-After` when set). Never carries internals.
#[derive(Debug, Clone)]
pub struct AppError {
    pub status: StatusCode,
    pub body: ApiError,
    pub retry_after_secs: Option<u64>,
}

impl AppError {
    /// A search refused for its size (400) or stopped for its cost (422), with the search's own hint; `None`
    /// for the other search errors, which each caller words itself.
    pub fn search_bound(e: &personkit_search::SearchError) -> Option<AppError> {
        let status = match e {
            personkit_search::SearchError::TooLarge(_) => StatusCode::BAD_REQUEST,
            personkit_search::SearchError::Interrupted => StatusCode::UNPROCESSABLE_ENTITY,
            _ => return None,
        };
        Some(AppError::new(
            status,
            e.code(),
            e.to_string(),
            e.caller_hint().unwrap_or_default(),
        ))
    }

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

    /// 429 with `Retry-After`: the caller may try again after `wait`; `then` says what else to do.
    pub fn rate_limited(
        wait: std::time::Duration,
        message: impl Into<String>,
        then: &str,
    ) -> AppError {
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        AppError {
            retry_after_secs: Some(secs),
            ..AppError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                message,
                format!("wait {secs} s (Retry-After) and {then}"),
            )
        }
    }

    /// 403 for a read-only (agent) token on a route that needs a device: `message` says what it may not do.
    pub fn read_only_token(message: impl Into<String>, hint: impl Into<String>) -> AppError {
        AppError::new(StatusCode::FORBIDDEN, "read_only_token", message, hint)
    }

    pub fn bad_request(
        code: &str,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> AppError {
        AppError::new(StatusCode::BAD_REQUEST, code, message, hint)
    }

    pub(crate) fn too_large(
        message: impl Into<String>,
        max_items: usize,
        max_bytes: usize,
    ) -> AppError {
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
        // An error may answer before the request's body was read (a refused token, a rate limit); the connection
        // then closes once the answer is sent. Saying so keeps a client from reusing a socket the relay is
        // closing and seeing its next request cut off.
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
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
