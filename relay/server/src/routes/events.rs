//! `GET /v1/events` (docs/api.md): the events stream, newest first, through `personkit_store::events` — bounded
//! (at most 500 a page, a cursor to go on), filtered by kind (or a `prefix.*`), source surface, thread and time.
//! Device and agent tokens may read it.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use personkit_store::DbError;
use personkit_store::events::{self, Filter};
use personkit_store::read::ReadError;

use super::read::{Params, run};
use crate::error::AppError;
use crate::state::AppState;

const HINT: &str =
    "GET /v1/events?kind=git.commit&source=&thread=&since=7d&until=&limit=50&cursor= (docs/api.md)";
const DEFAULT_LIMIT: u32 = 50;

/// `GET /v1/events`.
pub(super) async fn list_events(
    State(st): State<AppState>,
    uri: axum::http::Uri,
) -> Result<Response, AppError> {
    let p = Params::parse(
        uri.query(),
        &[
            "kind", "source", "thread", "since", "until", "limit", "cursor",
        ],
        HINT,
    )?;
    let now = st.clock.now();
    let limit = match p.get("limit") {
        None => DEFAULT_LIMIT,
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=events::MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                AppError::bad_request(
                    "bad_query",
                    format!("limit must be a number from 1 to {}", events::MAX_LIMIT),
                    HINT,
                )
            })?,
    };
    if let Some(k) = p.get("kind")
        && (k.len() > 100 || k.chars().any(char::is_control))
    {
        return Err(AppError::bad_request(
            "bad_query",
            "kind must be an event kind such as git.commit, or a prefix such as session.*",
            HINT,
        ));
    }
    let filter = Filter {
        kind: p.get("kind"),
        source_surface: p.get("source"),
        thread: p.get("thread"),
        since: p.time("since", now, HINT)?,
        until: p.time("until", now, HINT)?,
        before: p.get("cursor"),
        limit,
    };
    let page = run(&st, HINT, move |c| {
        events::list(c, &filter).map_err(|e| match e {
            DbError::Invalid(m) => ReadError::BadRequest(m),
            e => ReadError::Db(e),
        })
    })
    .await?;
    Ok(Json(page).into_response())
}
