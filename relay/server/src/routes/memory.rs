//! Memory over HTTP (docs/api.md "Memory"): `POST /v1/distill/{short,mid,long}` runs a tier now and
//! `GET /v1/distill/status` says where each stands (a device token: running a tier writes); `GET /v1/context`
//! gives an agent its context in tiers (any token); `GET /v1/profile` reads the user's profile and `PUT
//! /v1/profile` replaces it (a device token: an agent may never change it).

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, response::IntoResponse, response::Response};

use personkit_memory::context::{self, Ask};
use personkit_memory::run::{Configured, run_tier};
use personkit_memory::{MemoryError, Tier, profile};

use super::read::Params;
use super::{malformed_json, read_body_or_413};
use crate::error::AppError;
use crate::state::{AppState, AuthedDevice};

const DISTILL_HINT: &str =
    "POST /v1/distill/short, /v1/distill/mid or /v1/distill/long (docs/api.md \"Memory\")";
const CONTEXT_HINT: &str =
    "GET /v1/context?tier=1..4&budget=100..32000&compact=true|false (docs/api.md \"Memory\")";
const PROFILE_HINT: &str = "PUT /v1/profile with {\"text\": \"…Markdown…\"} (at most 64 KB)";

pub(crate) fn memory_error(e: MemoryError) -> AppError {
    let status = match &e {
        MemoryError::Invalid(_) => StatusCode::BAD_REQUEST,
        MemoryError::Off(_) => StatusCode::CONFLICT,
        MemoryError::Config(_) => StatusCode::CONFLICT,
        MemoryError::Profile { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        MemoryError::Llm(l) if l.transient() => StatusCode::BAD_GATEWAY,
        MemoryError::Llm(personkit_llm::LlmError::NotConfigured(_))
        | MemoryError::Llm(personkit_llm::LlmError::Config(_))
        | MemoryError::Llm(personkit_llm::LlmError::Model { .. }) => StatusCode::CONFLICT,
        MemoryError::Llm(_) => StatusCode::BAD_GATEWAY,
        MemoryError::Db(_) => return AppError::storage(),
    };
    AppError::new(status, e.code(), e.to_string(), e.hint())
}

fn device_only(device: &personkit_store::auth::Device, what: &str) -> Result<(), AppError> {
    if device.kind.can_ingest() {
        return Ok(());
    }
    Err(AppError::read_only_token(
        format!("this is an agent token: it may read context but not {what}"),
        "use a paired device's token, the CLI (`personkit distill`, `personkit profile set`) or the dashboard",
    ))
}

/// `POST /v1/distill/{tier}`.
pub(super) async fn post_distill(
    State(st): State<AppState>,
    Extension(AuthedDevice(device)): Extension<AuthedDevice>,
    Path(tier): Path<String>,
) -> Result<Response, AppError> {
    device_only(&device, "run memory tiers")?;
    let Some(tier) = Tier::parse(&tier) else {
        return Err(AppError::new(
            StatusCode::NOT_FOUND,
            "unknown_tier",
            format!(
                "there is no memory tier {:?}",
                personkit_shared::wire::quote_safely(&tier, 20)
            ),
            DISTILL_HINT,
        ));
    };
    let Ok(guard) = st.memory_busy.clone().try_lock_owned() else {
        return Err(AppError::new(
            StatusCode::CONFLICT,
            "distill_running",
            "a memory tier is being distilled now",
            "wait for it to finish (GET /v1/distill/status shows the last run), then try again",
        ));
    };
    let path = st.db.path().to_path_buf();
    let now = st.clock.now();
    let local = st.local;
    let run = tokio::task::spawn_blocking(move || {
        let _guard = guard;
        let cfg = Configured::load(&path)?;
        // A connection of its own: a model call takes long, and the server's writer must stay free for ingest.
        let conn = personkit_store::db::open(&path)?;
        run_tier(&conn, tier, &cfg, now, local, "manual")
    })
    .await
    .map_err(|_| AppError::internal())?
    .map_err(memory_error)?;
    tracing::info!(tier = tier.as_str(), outcome = %run.outcome, tokens = run.tokens, "distilled memory");
    Ok(Json(run).into_response())
}

/// `GET /v1/distill/status`.
pub(super) async fn get_distill_status(
    State(st): State<AppState>,
    Extension(AuthedDevice(device)): Extension<AuthedDevice>,
) -> Result<Response, AppError> {
    device_only(&device, "see how memory is made")?;
    let cfg = Configured::load(st.db.path()).map_err(memory_error)?;
    let list = st
        .read(move |c| personkit_memory::status(c, &cfg.settings, &cfg.llm_result()))
        .await?;
    Ok(Json(serde_json::json!({ "tiers": list })).into_response())
}

/// `GET /v1/context`.
pub(super) async fn get_context(
    State(st): State<AppState>,
    uri: axum::http::Uri,
) -> Result<Response, AppError> {
    let p = Params::parse(uri.query(), &["tier", "budget", "compact"], CONTEXT_HINT)?;
    let bad = |m: &str| AppError::bad_request("bad_query", m.to_owned(), CONTEXT_HINT);
    let tier = match p.get("tier") {
        None => 2,
        Some(t) => t
            .parse::<u8>()
            .map_err(|_| bad("tier must be 1, 2, 3 or 4"))?,
    };
    let budget = match p.get("budget") {
        None => None,
        Some(b) => Some(
            b.parse::<usize>()
                .map_err(|_| bad("budget must be a number of tokens"))?,
        ),
    };
    let compact = match p.get("compact").as_deref() {
        None | Some("true") | Some("1") => true,
        Some("false") | Some("0") => false,
        Some(_) => return Err(bad("compact must be true or false")),
    };
    let ask = Ask::checked(tier, budget, compact).map_err(memory_error)?;
    let (path, now, local) = (st.profile_path.clone(), st.clock.now(), st.local);
    let db = st.db.clone();
    let c = tokio::task::spawn_blocking(move || {
        db.read(|c| context::assemble(c, &ask, &path, now, local))
    })
    .await
    .map_err(|_| AppError::internal())?
    .map_err(memory_error)?;
    Ok(Json(c).into_response())
}

/// `GET /v1/profile`.
pub(super) async fn get_profile(State(st): State<AppState>) -> Result<Response, AppError> {
    let path = st.profile_path.clone();
    let db = st.db.clone();
    let p = tokio::task::spawn_blocking(move || db.read(|c| profile::current(c, &path)))
        .await
        .map_err(|_| AppError::internal())?
        .map_err(memory_error)?;
    Ok(Json(p).into_response())
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileBody {
    text: String,
}

/// `PUT /v1/profile`.
pub(super) async fn put_profile(
    State(st): State<AppState>,
    Extension(AuthedDevice(device)): Extension<AuthedDevice>,
    body: Body,
) -> Result<Response, AppError> {
    device_only(&device, "change the user's profile")?;
    let limit = profile::MAX_BYTES * 2 + 1024;
    let bytes = read_body_or_413(
        body,
        limit,
        st.config.body_timeout,
        format!("the body is over the limit of {limit} bytes"),
        "send a profile of at most 64 KB".to_owned(),
    )
    .await?;
    let b: ProfileBody = serde_json::from_slice(&bytes).map_err(|e| {
        if e.classify() == serde_json::error::Category::Data {
            AppError::bad_request(
                "malformed_profile",
                "the body is not {\"text\": \"…\"}",
                PROFILE_HINT,
            )
        } else {
            malformed_json(&e)
        }
    })?;
    if let Err(m) = profile::check(&b.text) {
        return Err(AppError::bad_request("bad_profile", m, PROFILE_HINT));
    }
    let (path, now) = (st.profile_path.clone(), st.clock.now());
    let db = st.db.clone();
    let p =
        tokio::task::spawn_blocking(move || db.write(|c| profile::write(c, &path, &b.text, now)))
            .await
            .map_err(|_| AppError::internal())?
            .map_err(memory_error)?;
    Ok(Json(p).into_response())
}
