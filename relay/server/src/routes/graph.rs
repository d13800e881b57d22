//! The entity graph's HTTP reads (`docs/api.md`): `GET /v1/entities?q=&kind=&limit=`, `GET /v1/entities/{id}`,
//! `GET /v1/entities/{id}/neighbours?depth=`, `GET /v1/graph/path?from=&to=&depth=`, `GET /v1/graph/candidates`,
//! `POST /v1/graph/build` (one derivation pass now), and the names a model found: `GET /v1/graph/proposals`,
//! `POST /v1/graph/proposals/{id}/approve|reject` (device tokens only). Everything goes through `personkit_graph::view`, as the
//! CLI, MCP and the dashboard do.

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use personkit_graph::{GraphError, extract, run as derivation, view};
use personkit_store::Connection;
use personkit_store::graph as rows;
use personkit_store::proposals;
use serde_json::json;

use super::read::Params;
use crate::error::AppError;
use crate::state::{AppState, AuthedDevice};

const ENTITIES_HINT: &str = "GET /v1/entities?q=<part of a name>&kind=<person|project|repository|tool|model|organisation|place|site>&limit=<1-1000> (docs/api.md)";
const ENTITY_HINT: &str =
    "GET /v1/entities/{id}?threads=<1-1000>; find ids with GET /v1/entities?q= (docs/api.md)";
const NEIGHBOURS_HINT: &str = "GET /v1/entities/{id}/neighbours?depth=<1 or 2> (docs/api.md)";
const PATH_HINT: &str =
    "GET /v1/graph/path?from=<entity id>&to=<entity id>&depth=<1-4> (docs/api.md)";
const SUBGRAPH_HINT: &str = "GET /v1/graph/subgraph?thread=<thread id> or ?day=<YYYY-MM-DD>, with limit=<1-1000> (docs/api.md)";
const CANDIDATES_HINT: &str =
    "GET /v1/graph/candidates?state=<proposed|merged|dismissed>&limit=<1-1000> (docs/api.md)";

fn graph_error(e: GraphError, hint: &str) -> AppError {
    match e {
        GraphError::Db(personkit_store::DbError::Invalid(m)) | GraphError::Invalid(m) => {
            AppError::bad_request("bad_query", m, hint.to_owned())
        }
        GraphError::NotFound(m) => AppError::new(StatusCode::NOT_FOUND, "not_found", m, e_hint()),
        GraphError::Db(e) => {
            tracing::warn!(error = %e, "graph read failed");
            AppError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "storage_unavailable",
                "the corpus could not be read",
                "retry shortly; if it persists, check the relay's log",
            )
        }
    }
}

fn e_hint() -> &'static str {
    "find entities with GET /v1/entities?q=; the graph is built in the background (POST /v1/graph/build runs a pass now)"
}

async fn read<T: Send + 'static>(
    st: &AppState,
    hint: &'static str,
    f: impl FnOnce(&Connection) -> Result<T, GraphError> + Send + 'static,
) -> Result<T, AppError> {
    let db = st.db.clone();
    match tokio::task::spawn_blocking(move || db.read(f)).await {
        Ok(r) => r.map_err(|e| graph_error(e, hint)),
        Err(_) => Err(AppError::internal()),
    }
}

fn number<T: std::str::FromStr + PartialOrd>(
    p: &Params,
    name: &str,
    default: T,
    range: std::ops::RangeInclusive<T>,
    hint: &str,
) -> Result<T, AppError> {
    match p.get(name) {
        None => Ok(default),
        Some(v) => v
            .parse::<T>()
            .ok()
            .filter(|n| range.contains(n))
            .ok_or_else(|| {
                AppError::bad_request(
                    "bad_query",
                    format!(
                        "{name} {:?} is out of range",
                        personkit_shared::wire::quote_safely(&v, 40)
                    ),
                    hint.to_owned(),
                )
            }),
    }
}

pub(super) async fn list_entities(
    State(st): State<AppState>,
    uri: axum::http::Uri,
) -> Result<Response, AppError> {
    let p = Params::parse(uri.query(), &["q", "kind", "limit"], ENTITIES_HINT)?;
    let limit = number(&p, "limit", 50usize, 1..=rows::MAX_LIST, ENTITIES_HINT)?;
    let (q, kind) = (p.get("q"), p.get("kind"));
    if q.as_ref().is_some_and(|q| q.chars().count() > 200) {
        return Err(AppError::bad_request(
            "bad_query",
            "q is longer than 200 characters",
            ENTITIES_HINT,
        ));
    }
    let found = read(&st, ENTITIES_HINT, move |c| {
        view::search(c, q.as_deref(), kind.as_deref(), limit)
    })
    .await?;
    Ok(Json(json!({ "entities": found })).into_response())
}

pub(super) async fn get_entity(
    State(st): State<AppState>,
    Path(id): Path<String>,
    uri: axum::http::Uri,
) -> Result<Response, AppError> {
    let p = Params::parse(uri.query(), &["threads"], ENTITY_HINT)?;
    let threads = number(&p, "threads", 20usize, 1..=rows::MAX_LIST, ENTITY_HINT)?;
    let v = read(&st, ENTITY_HINT, move |c| view::view(c, &id, threads)).await?;
    Ok(Json(v).into_response())
}

pub(super) async fn get_neighbours(
    State(st): State<AppState>,
    Path(id): Path<String>,
    uri: axum::http::Uri,
) -> Result<Response, AppError> {
    let p = Params::parse(uri.query(), &["depth"], NEIGHBOURS_HINT)?;
    let depth = number(
        &p,
        "depth",
        1u32,
        1..=rows::MAX_NEIGHBOUR_DEPTH,
        NEIGHBOURS_HINT,
    )?;
    let g = read(&st, NEIGHBOURS_HINT, move |c| {
        view::neighbours(c, &id, depth)
    })
    .await?;
    Ok(Json(g).into_response())
}

pub(super) async fn get_path(
    State(st): State<AppState>,
    uri: axum::http::Uri,
) -> Result<Response, AppError> {
    let p = Params::parse(uri.query(), &["from", "to", "depth"], PATH_HINT)?;
    let depth = number(
        &p,
        "depth",
        rows::MAX_PATH_DEPTH,
        1..=rows::MAX_PATH_DEPTH,
        PATH_HINT,
    )?;
    let (Some(from), Some(to)) = (p.get("from"), p.get("to")) else {
        return Err(AppError::bad_request(
            "bad_query",
            "a path needs from and to (entity ids)",
            PATH_HINT,
        ));
    };
    let (f, t) = (from.clone(), to.clone());
    let path = read(&st, PATH_HINT, move |c| view::path(c, &f, &t, depth)).await?;
    Ok(Json(json!({ "from": from, "to": to, "depth": depth, "path": path })).into_response())
}

pub(super) async fn get_subgraph(
    State(st): State<AppState>,
    uri: axum::http::Uri,
) -> Result<Response, AppError> {
    let p = Params::parse(uri.query(), &["thread", "day", "limit"], SUBGRAPH_HINT)?;
    let limit = number(&p, "limit", 200usize, 1..=rows::MAX_LIST, SUBGRAPH_HINT)?;
    let g = match (p.get("thread"), p.get("day")) {
        (Some(t), None) => {
            read(&st, SUBGRAPH_HINT, move |c| {
                view::thread_subgraph(c, &t, limit)
            })
            .await?
        }
        (None, Some(d)) => {
            read(&st, SUBGRAPH_HINT, move |c| {
                view::day_subgraph(c, &d, limit)
            })
            .await?
        }
        _ => {
            return Err(AppError::bad_request(
                "bad_query",
                "give either thread or day",
                SUBGRAPH_HINT,
            ));
        }
    };
    Ok(Json(g).into_response())
}

pub(super) async fn get_candidates(
    State(st): State<AppState>,
    uri: axum::http::Uri,
) -> Result<Response, AppError> {
    let p = Params::parse(uri.query(), &["state", "limit"], CANDIDATES_HINT)?;
    let limit = number(&p, "limit", 50usize, 1..=rows::MAX_LIST, CANDIDATES_HINT)?;
    let state = p.get("state").unwrap_or_else(|| "proposed".into());
    if !["proposed", "merged", "dismissed"].contains(&state.as_str()) {
        return Err(AppError::bad_request(
            "bad_query",
            "state must be proposed, merged or dismissed",
            CANDIDATES_HINT,
        ));
    }
    let list = read(&st, CANDIDATES_HINT, move |c| {
        Ok(rows::candidates(c, &state, limit)?)
    })
    .await?;
    Ok(Json(json!({ "candidates": list })).into_response())
}

pub(super) async fn post_build(
    State(st): State<AppState>,
    Extension(AuthedDevice(device)): Extension<AuthedDevice>,
) -> Result<Response, AppError> {
    if !device.kind.can_ingest() {
        return Err(AppError::read_only_token(
            "this is an agent token: it may read the graph but not build it",
            "use a paired device's token, or `personkit graph build`",
        ));
    }
    let db = st.db.clone();
    let now = st.clock.now();
    let r = tokio::task::spawn_blocking(move || {
        db.write(|c| derivation::build(c, now, derivation::BATCH, 1_000))
    })
    .await
    .map_err(|_| AppError::internal())?
    .map_err(|e| graph_error(e, "POST /v1/graph/build (docs/api.md)"))?;
    Ok(Json(r).into_response())
}

const PROPOSALS_HINT: &str =
    "GET /v1/graph/proposals?state=<proposed|approved|rejected>&limit=<1-1000> (docs/api.md)";

fn device_only(device: &personkit_store::auth::Device, what: &str) -> Result<(), AppError> {
    if device.kind.can_ingest() {
        Ok(())
    } else {
        Err(AppError::read_only_token(
            format!(
                "this is an agent token: names a model found wait for the user, and {what} is theirs"
            ),
            "use a paired device's token, the dashboard, or `personkit graph proposals`",
        ))
    }
}

/// Names the model found, waiting for the user (device tokens only: an agent never sees unapproved model output).
pub(super) async fn get_proposals(
    State(st): State<AppState>,
    Extension(AuthedDevice(device)): Extension<AuthedDevice>,
    uri: axum::http::Uri,
) -> Result<Response, AppError> {
    device_only(&device, "reading them")?;
    let p = Params::parse(uri.query(), &["state", "limit"], PROPOSALS_HINT)?;
    let limit = number(
        &p,
        "limit",
        50usize,
        1..=proposals::MAX_LIST,
        PROPOSALS_HINT,
    )?;
    let state = match p.get("state") {
        None => proposals::State::Proposed,
        Some(s) => proposals::State::parse(&s).ok_or_else(|| {
            AppError::bad_request(
                "bad_query",
                "state must be proposed, approved or rejected",
                PROPOSALS_HINT,
            )
        })?,
    };
    let list = read(&st, PROPOSALS_HINT, move |c| {
        Ok(proposals::list(c, state, limit)?)
    })
    .await?;
    Ok(Json(json!({ "proposals": list })).into_response())
}

/// `POST /v1/graph/proposals/{id}/approve` and `…/reject`.
pub(super) async fn post_decision(
    State(st): State<AppState>,
    Extension(AuthedDevice(device)): Extension<AuthedDevice>,
    Path((id, decision)): Path<(String, String)>,
) -> Result<Response, AppError> {
    device_only(&device, "deciding on them")?;
    let approve = match decision.as_str() {
        "approve" => true,
        "reject" => false,
        _ => {
            return Err(AppError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such decision",
                "POST /v1/graph/proposals/{id}/approve or …/reject (docs/api.md)",
            ));
        }
    };
    let db = st.db.clone();
    let now = st.clock.now();
    let entity = tokio::task::spawn_blocking(move || {
        db.write(|c| {
            if approve {
                extract::approve(c, &id, now).map(Some)
            } else {
                extract::reject(c, &id, now).map(|()| None)
            }
        })
    })
    .await
    .map_err(|_| AppError::internal())?
    .map_err(|e| graph_error(e, PROPOSALS_HINT))?;
    Ok(Json(json!({
        "state": if approve { "approved" } else { "rejected" },
        "entity_id": entity,
    }))
    .into_response())
}
