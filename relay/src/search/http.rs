//! `GET /v1/query?q=...&k=10&surface=...&thread=...&role=...&since=...&until=...&entity=...` — the HTTP face of
//! [`super::query`]. Auth is the router's, like every other `/v1` route.

use std::sync::Arc;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{Query, SearchError};
use crate::db::Db;
use crate::embed::SharedEmbedder;

/// What the query route needs from the server state.
#[derive(Debug, Clone)]
pub struct SearchState {
    pub db: Arc<Db>,
    pub embedder: SharedEmbedder,
}

/// Query-string parameters. `thread` and `entity` may be comma-separated lists.
#[derive(Debug, Default, Deserialize)]
pub struct Params {
    pub q: Option<String>,
    pub k: Option<usize>,
    pub surface: Option<String>,
    pub thread: Option<String>,
    pub role: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub entity: Option<String>,
    pub events: Option<bool>,
}

fn error(status: StatusCode, code: &str, message: String, hint: &str) -> Response {
    (
        status,
        Json(personkit_shared::wire::ApiError::new(code, message, hint)),
    )
        .into_response()
}

fn list(s: &Option<String>) -> Vec<String> {
    s.as_deref()
        .map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Builds a [`Query`] from parameters (shared by HTTP and CLI), or says what is wrong.
pub fn build_query(p: &Params) -> Result<Query, SearchError> {
    let text = p.q.clone().unwrap_or_default();
    let mut q = Query::new(text);
    q.k = p.k.unwrap_or(10);
    q.surface = p.surface.clone().filter(|s| !s.is_empty());
    q.threads = list(&p.thread);
    q.role = p.role.clone().filter(|s| !s.is_empty());
    if let Some(r) = &q.role
        && personkit_shared::wire::Role::parse(r).is_none()
    {
        return Err(SearchError::BadRequest(format!(
            "role {r:?} is not one of user, assistant, system, tool"
        )));
    }
    q.since = p.since.as_deref().map(super::normalize_bound).transpose()?;
    q.until = p.until.as_deref().map(super::normalize_bound).transpose()?;
    q.entities = list(&p.entity);
    q.include_events = p.events.unwrap_or(true);
    if q.text.trim().is_empty() && q.entities.is_empty() && q.since.is_none() && q.until.is_none() {
        return Err(SearchError::BadRequest(
            "the query is empty: give q (words), entity ids or a time window".into(),
        ));
    }
    if q.k == 0 || q.k > 1000 {
        return Err(SearchError::BadRequest(
            "k must be between 1 and 1000".into(),
        ));
    }
    Ok(q)
}

/// Runs a query from HTTP parameters on a reader connection (in a blocking thread).
pub async fn handle(state: SearchState, params: Params) -> Response {
    let q = match build_query(&params) {
        Ok(q) => q,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_query",
                e.to_string(),
                "GET /v1/query?q=<words>&k=10 (filters: surface, thread, role, since, until, entity)",
            );
        }
    };
    let result = tokio::task::spawn_blocking(move || {
        state.db.read(|conn| {
            super::query(conn, state.embedder.as_deref(), &q).map_err(QueryFailure::Search)
        })
    })
    .await;
    match result {
        Ok(Ok(r)) => Json(r).into_response(),
        Ok(Err(QueryFailure::Search(SearchError::BadRequest(m)))) => error(
            StatusCode::BAD_REQUEST,
            "bad_query",
            m,
            "GET /v1/query?q=<words>&k=10",
        ),
        Ok(Err(QueryFailure::Search(SearchError::Embed(e)))) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "embedder_unavailable",
            e.to_string(),
            e.hint(),
        ),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "query failed");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "storage_unavailable",
                "the corpus could not be read".into(),
                "retry shortly; if it persists, check the relay's log",
            )
        }
        Err(_) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the query task failed".into(),
            "retry; if it persists, report it",
        ),
    }
}

/// Failure of a query inside the DB closure.
#[derive(Debug, thiserror::Error)]
pub enum QueryFailure {
    #[error(transparent)]
    Search(SearchError),
    #[error(transparent)]
    Db(#[from] crate::db::DbError),
}

/// The embedder of this server process, chosen once from the config (file next to the corpus, or env).
static EMBEDDER: std::sync::OnceLock<SharedEmbedder> = std::sync::OnceLock::new();

/// The process's embedder: built on first use from [`crate::embed::EmbedderConfig::load`] for `db_path`. A
/// configuration that fails to build is logged and treated as `none` (search still answers from FTS).
pub fn process_embedder(db_path: &std::path::Path) -> SharedEmbedder {
    EMBEDDER
        .get_or_init(|| {
            let built = crate::embed::EmbedderConfig::load(Some(db_path)).and_then(|c| {
                let kind = c.kind;
                crate::embed::build(&c).map(|e| (kind, c.source.clone(), e))
            });
            match built {
                Ok((kind, source, e)) => {
                    tracing::info!(embedder = kind.as_str(), %source, model = ?e.as_ref().map(|e| e.model_key()), "search embedder");
                    e
                }
                Err(e) => {
                    tracing::warn!(error = %e, hint = e.hint(), "embedder unavailable; search uses FTS only");
                    None
                }
            }
        })
        .clone()
}

/// Called by `serve` at start: picks the embedder and starts the background worker that embeds pending
/// messages and events (ingest never waits for it). Returns the worker handle (None without an embedder).
pub fn start_background(db_path: &std::path::Path) -> Option<crate::embed::store::Worker> {
    let embedder = process_embedder(db_path)?;
    // Load the in-memory vector indexes now rather than on the first query (seconds at 10^6 vectors).
    let (warm_path, model_key, dim) = (db_path.to_path_buf(), embedder.model_key(), embedder.dim());
    let _ = std::thread::Builder::new()
        .name("personkit-index-warm".into())
        .spawn(move || {
            let t = std::time::Instant::now();
            let Ok(conn) = crate::db::open(&warm_path) else {
                return;
            };
            for kind in [crate::embed::store::Kind::Message, crate::embed::store::Kind::Event] {
                match crate::search::index::with_index(&conn, kind, &model_key, dim, |ix| ix.len()) {
                    Ok(n) => tracing::info!(kind = kind.as_str(), vectors = n, ms = t.elapsed().as_millis() as u64, "vector index loaded"),
                    Err(e) => tracing::warn!(error = %e, "vector index warm-up failed; the first query loads it"),
                }
            }
        });
    let path = db_path.to_path_buf();
    Some(crate::embed::store::spawn_worker(
        move || crate::db::open(&path).map_err(|e| e.to_string()),
        embedder,
        std::time::Duration::from_secs(1),
    ))
}

/// `GET /v1/query` handler for the relay's router (behind the device-token layer).
pub async fn get_query(
    axum::extract::State(state): axum::extract::State<crate::api::AppState>,
    query: Result<axum::extract::Query<Params>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let params = match query {
        Ok(axum::extract::Query(p)) => p,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_query",
                e.body_text(),
                "GET /v1/query?q=<words>&k=10 (k is a number; events is true or false)",
            );
        }
    };
    let db = state.db.clone();
    let path = db.path().to_path_buf();
    let embedder = tokio::task::spawn_blocking(move || process_embedder(&path))
        .await
        .unwrap_or(None);
    handle(SearchState { db, embedder }, params).await
}
