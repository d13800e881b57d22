//! The JSON-RPC front of `/mcp`: a posted JSON body that is not one JSON-RPC 2.0 message (not JSON, not UTF-8,
//! nested too deep, a batch, another `jsonrpc` version, a shape the MCP SDK cannot take) is answered here with
//! a JSON-RPC error (`-32700` parse error, `-32600` invalid request) as a JSON body with status 400 (413 when
//! too large), the rule of `personkit_mcp::jsonrpc`. Everything else reaches the SDK unchanged.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use personkit_mcp::jsonrpc::{self, MAX_MESSAGE_BYTES, Refusal};

use crate::state::AppState;

pub(super) async fn jsonrpc_front(
    State(st): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    if req.method() != Method::POST || !is_json(req.headers()) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match super::read_body(body, MAX_MESSAGE_BYTES, st.config.body_timeout).await {
        Ok(b) => b,
        Err(None) => return refuse(StatusCode::PAYLOAD_TOO_LARGE, &Refusal::too_large()),
        Err(Some(e)) => return e.into_response(),
    };
    let id = match jsonrpc::check(&bytes) {
        Ok(id) => id,
        Err(r) => return refuse(StatusCode::BAD_REQUEST, &r),
    };
    let resp = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    // The SDK answers JSON it cannot read as a message with 415 and a line of text.
    if resp.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return refuse(StatusCode::BAD_REQUEST, &Refusal::unreadable(id));
    }
    resp
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

fn refuse(status: StatusCode, r: &Refusal) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        r.to_json().to_string(),
    )
        .into_response()
}
