//! Relay-to-relay sync (docs/sync.md, docs/api.md): `POST /v1/sync/pair` redeems a code of
//! `personkit pair --sync` for a sync token (public, rate limited like `/v1/pair`); `GET /v1/sync/pages` answers
//! this relay's change feed after a cursor and `POST /v1/sync/pages` applies a page the peer pushes — both take a
//! sync token only (device and agent tokens are refused, and a sync token opens nothing else).

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use personkit_store::auth::AuthError;
use personkit_store::sync::{self, Peer};
use personkit_sync::{DEFAULT_PAGE_ITEMS, MAX_PAGE_ITEMS, Source};
use serde::Deserialize;

use super::{PairingBody, bearer, malformed_json, read_body_or_413, read_pairing_body};
use crate::error::AppError;
use crate::state::AppState;

/// Largest pushed page body.
const PAGE_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The sync peer a request was authenticated as.
#[derive(Debug, Clone)]
pub(crate) struct SyncPeer(pub Peer);

fn refused() -> AppError {
    AppError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "missing, unknown or revoked sync token",
        "pair again: `personkit pair --sync` on this relay, then `personkit sync add <url> --code <code>` on the other",
    )
}

pub(super) async fn require_sync_peer(
    State(st): State<AppState>,
    mut req: Request,
    next: Next,
) -> Result<Response, AppError> {
    let token = bearer(req.headers()).ok_or_else(refused)?.to_owned();
    let peer = st
        .read(move |c| sync::authenticate(c, &token))
        .await?
        .ok_or_else(refused)?;
    // No per-token rate limit: a paired relay pages through a whole corpus back to back, and its token is
    // refused the moment the peer is revoked.
    req.extensions_mut().insert(SyncPeer(peer));
    Ok(next.run(req).await)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PairRequest {
    code: String,
    relay_id: String,
    #[serde(default)]
    name: String,
}

pub(super) async fn post_pair(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, AppError> {
    let req: PairRequest = read_pairing_body(
        &headers,
        body,
        st.config.body_timeout,
        PairingBody {
            shape: "{\"code\": string, \"relay_id\": string, \"name\": string}",
            hint: "use `personkit sync add <url> --code <code>`",
        },
    )
    .await?;
    let now = st.clock.now();
    let db = st.db.clone();
    let res = tokio::task::spawn_blocking(move || {
        db.write(|c| {
            let token = sync::redeem_sync_code(c, &req.code, &req.relay_id, &req.name, now)?;
            let id = personkit_store::db::relay_id(c)?;
            Ok::<_, AuthError>((token, id))
        })
    })
    .await
    .map_err(|_| AppError::internal())?;
    match res {
        Ok((token, relay_id)) => {
            tracing::info!("sync peer paired");
            let name = format!("relay {}", relay_id.get(..8).unwrap_or(&relay_id));
            Ok(Json(
                serde_json::json!({"token": token.expose(), "relay_id": relay_id, "name": name}),
            )
            .into_response())
        }
        Err(AuthError::InvalidCode) => match st.pair_limiter.check("pair-failures") {
            Err(wait) => Err(AppError::rate_limited(
                wait,
                "too many wrong pairing codes",
                "check the code `personkit pair --sync` printed",
            )),
            Ok(()) => Err(AppError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_pairing_code",
                "the sync code is wrong, expired or already used",
                "run `personkit pair --sync` on this relay for a fresh code (valid 10 minutes, one use)",
            )),
        },
        Err(AuthError::Db(e)) => Err(e.into()),
        Err(e) => {
            tracing::error!(error = %e, "sync pairing failed");
            Err(AppError::internal())
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PageQuery {
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    limit: Option<String>,
}

pub(super) async fn get_pages(
    State(st): State<AppState>,
    Extension(SyncPeer(_peer)): Extension<SyncPeer>,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, AppError> {
    let bad = |what: &str| {
        AppError::bad_request(
            "invalid_parameter",
            format!("{what} must be a whole number"),
            "pass after=<the page's next> (0 at the start) and limit=1..5000",
        )
    };
    let Ok(Query(q)) = q else {
        return Err(bad("after and limit"));
    };
    let after = match q.after.as_deref() {
        None | Some("") => 0,
        Some(s) => s
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| bad("after"))?,
    };
    let limit = match q.limit.as_deref() {
        None | Some("") => DEFAULT_PAGE_ITEMS,
        Some(s) => s
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_PAGE_ITEMS).contains(n))
            .ok_or_else(|| bad("limit"))?,
    };
    let page = st
        .read(move |c| personkit_sync::page(c, after, limit))
        .await?;
    Ok(Json(page).into_response())
}

#[derive(Debug, Deserialize)]
struct PushedPage {
    relay_id: String,
    items: Vec<serde_json::Value>,
}

pub(super) async fn post_pages(
    State(st): State<AppState>,
    Extension(SyncPeer(peer)): Extension<SyncPeer>,
    body: Body,
) -> Result<Response, AppError> {
    let bytes = read_body_or_413(
        body,
        PAGE_BODY_BYTES,
        st.config.body_timeout,
        "the pushed page is over 64 MB",
        "push smaller pages",
    )
    .await?;
    let page: PushedPage = serde_json::from_slice(&bytes).map_err(|e| {
        if e.classify() == serde_json::error::Category::Data {
            AppError::bad_request(
                "malformed_page",
                "expected a page {\"relay_id\", \"items\": [...]}",
                "update both relays to the same personkit version",
            )
        } else {
            malformed_json(&e)
        }
    })?;
    if page.relay_id != peer.id {
        return Err(AppError::new(
            StatusCode::FORBIDDEN,
            "wrong_peer",
            "the page names another relay than the one this token was issued to",
            "pair that relay on its own: `personkit pair --sync`",
        ));
    }
    if page.items.len() > 4 * MAX_PAGE_ITEMS {
        return Err(AppError::bad_request(
            "page_too_large",
            format!(
                "the page has {} items, over {}",
                page.items.len(),
                4 * MAX_PAGE_ITEMS
            ),
            "push smaller pages",
        ));
    }
    let now = st.clock.now();
    let db = st.db.clone();
    let applied = tokio::task::spawn_blocking(move || {
        db.write(|c| {
            personkit_sync::apply_page(
                c,
                &page.items,
                Source {
                    peer_id: &peer.id,
                    pull_cursor: None,
                },
                now,
            )
        })
    })
    .await
    .map_err(|_| AppError::internal())??;
    if applied.stored > 0 {
        st.sync_notify.notify_one();
    }
    tracing::info!(
        stored = applied.stored,
        unchanged = applied.unchanged,
        rejected = applied.rejected.len(),
        "sync page applied"
    );
    Ok(Json(applied).into_response())
}
