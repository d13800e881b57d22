//! `personkit-mcp`: the relay's MCP server, so the user's own agents (Claude Desktop, Claude Code, any MCP
//! client) can use the history. Tools ([`tools`]): `search` (the hybrid query of `personkit-search`),
//! `list_threads`, `get_thread`, `get_message` (the read layer of `personkit_store::read`), `corpus_health`, and
//! the entity graph's `entity` and `related` ([`graph`]), the knowledge tools ([`knowledge`]): `get_knowledge` (approved entries only) and `propose_knowledge`. Every
//! tool but `propose_knowledge` is read-only; that one files a pending entry the user decides on, never more. Answers carry structured content with an output
//! schema and a short text form, and stay within a character budget ([`budget`]).
//!
//! Two transports over one handler: stdio ([`serve_stdio`], run by `personkit mcp` on a read-only connection)
//! and Streamable HTTP ([`http_service`], a tower service that `personkit-server` mounts at `/mcp` behind its
//! token, Host and Origin checks). On both, a message that is not one JSON-RPC 2.0 message is answered with a
//! JSON-RPC error before the SDK sees it ([`jsonrpc::check`]; over HTTP the server calls it). The HTTP side is
//! stateless (no sessions): clients of the current protocol revision send every request on its own, and clients
//! of the previous one still get their `initialize` answered.
//!
//! It holds no SQL (it calls `personkit-store`), no ranking (it calls `personkit-search`) and no HTTP routing.

pub mod backend;
pub mod budget;
pub mod graph;
pub mod jsonrpc;
pub mod knowledge;
pub mod memory;
pub mod stdio;
pub mod tools;

use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

pub use backend::{Backend, ReadAccess, SingleReader, Uses};
pub use knowledge::{Caller, Proposals};
pub use tools::Personkit;

/// The HTTP service type `personkit-server` mounts.
pub type HttpService = StreamableHttpService<Personkit, LocalSessionManager>;

/// Serves MCP over stdin/stdout until the client closes stdin, or closes stdout (stops reading answers). Lines
/// that are not JSON-RPC 2.0 messages are answered with JSON-RPC errors ([`stdio`]). Logs go to stderr only.
pub async fn serve_stdio(backend: Backend) -> Result<(), String> {
    let (input, output) = rmcp::transport::stdio_pipes();
    stdio::serve_lines(backend, input, output, stdio::stdout_closed()).await
}

/// The Streamable HTTP service over `backend`: stateless, JSON answers. Host and Origin are checked by the
/// server that mounts it (one rule for every route), so the SDK's own Host list is turned off here.
pub fn http_service(backend: Backend) -> HttpService {
    let backend = Arc::new(backend);
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(jsonrpc::MAX_MESSAGE_BYTES)
        .with_sse_keep_alive(None)
        .disable_allowed_hosts();
    StreamableHttpService::new(
        move || Ok(Personkit::new((*backend).clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}
