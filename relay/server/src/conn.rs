//! Serving connections: the accept loop behind `serve`. Each connection is HTTP/1.1 (hyper) with a deadline for
//! its request headers, so a client that sends nothing or a trickle of header bytes is dropped; at most
//! `max_connections` are served at once, and one over the cap gets a clear 503 at once instead of holding a file
//! descriptor; the open-file soft limit is raised to the hard limit at start. Errors hyper answers by itself
//! (a malformed request: 400, a URI too long: 414, headers too large: 431) get the `{code, message, hint}` body
//! every other error has.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// How connections are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Connections served at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// Time a client has to send a request's headers (also the longest a kept-alive connection may sit idle).
    pub header_timeout: Duration,
    /// Largest request head (request line and headers), in bytes.
    pub max_header_bytes: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: 512,
            header_timeout: Duration::from_secs(10),
            max_header_bytes: 128 * 1024,
        }
    }
}

/// The longest header deadline (longer ones are cut to it): an hour is already far more than any client needs.
pub const MAX_HEADER_TIMEOUT: Duration = Duration::from_secs(3600);

/// File descriptors kept back from the connection cap for the corpus, its WAL, the embedding job and logs.
const RESERVED_FDS: u64 = 64;

/// Raises the open-file soft limit to the hard limit and returns the connection cap it allows: `wanted`, or less
/// when the limit cannot hold that many sockets beside [`RESERVED_FDS`].
pub fn fit_to_open_file_limit(wanted: usize) -> usize {
    let soft = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-file limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft)
        }
    };
    let fits = usize::try_from(soft.saturating_sub(RESERVED_FDS))
        .unwrap_or(usize::MAX)
        .max(1);
    if fits < wanted {
        tracing::warn!(
            open_file_limit = soft,
            max_connections = fits,
            "the open-file limit allows fewer connections than configured"
        );
    }
    wanted.min(fits)
}

/// How long requests in flight may run once the relay is told to stop (within `serve`'s stop deadline).
const DRAIN: Duration = Duration::from_secs(5);

/// Accepts and serves connections until `shutdown` completes, then lets the open ones finish their requests. With
/// `tls`, every connection is TLS: the handshake has the same deadline as a request's headers, and a client that
/// fails it is dropped without an answer.
pub async fn serve_connections(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut last_accept_error: Option<std::time::Instant> = None;
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors (or a connection reset before accept): log once in a while, back off a
                // little so the loop does not spin, and keep serving the connections already open.
                if last_accept_error.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    tracing::warn!(error = %e, "cannot accept a connection");
                    last_accept_error = Some(std::time::Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            if tls.is_none() {
                refuse_busy(&stream);
            }
            // Dropping the stream closes it now: a refused client never holds a descriptor. (Over TLS a plain
            // answer would not be understood: the client sees the connection closed and retries.)
            continue;
        };
        let service = TowerToHyperService::new(router.clone());
        let watcher = graceful.watcher();
        match tls.clone() {
            None => {
                let conn = watcher.watch(http1_connection(stream, service, limits));
                tokio::spawn(async move {
                    let _ = conn.await;
                    drop(permit);
                });
            }
            Some(acceptor) => {
                tokio::spawn(async move {
                    let deadline = limits.header_timeout.min(MAX_HEADER_TIMEOUT);
                    let stream = match tokio::time::timeout(deadline, acceptor.accept(stream)).await
                    {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    };
                    let _ = watcher
                        .watch(http1_connection(stream, service, limits))
                        .await;
                    drop(permit);
                });
            }
        }
    }
    drop(listener);
    // Requests in flight finish; idle connections close.
    tokio::select! {
        () = graceful.shutdown() => {},
        () = tokio::time::sleep(DRAIN) => {
            tracing::warn!(seconds = DRAIN.as_secs(), "connections still open after shutdown; closing them");
        }
    }
}

/// One HTTP/1.1 connection over `io` (a TCP or TLS stream) with the header deadline and size cap.
fn http1_connection<S>(
    io: S,
    service: TowerToHyperService<Router>,
    limits: ConnLimits,
) -> http1::Connection<TokioIo<ShapedErrors<S>>, TowerToHyperService<Router>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout.min(MAX_HEADER_TIMEOUT))
        .max_header_size(limits.max_header_bytes)
        .keep_alive(true)
        .serve_connection(TokioIo::new(ShapedErrors::new(io)), service)
}

/// A full response with the error shape, for a connection over the cap: written without waiting (a fresh
/// socket's send buffer takes it whole), so refusing costs the accept loop nothing.
fn refuse_busy(stream: &TcpStream) {
    let body = error_body(
        "too_many_connections",
        "the relay is serving as many connections as it allows",
        "retry in a moment; if it persists, something is holding connections open",
    );
    let resp = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(resp.as_bytes());
}

fn error_body(code: &str, message: &str, hint: &str) -> String {
    serde_json::json!({"code": code, "message": message, "hint": hint}).to_string()
}

/// The shaped response for an error hyper answered with an empty body, by its status line.
fn shaped(head: &[u8]) -> Option<Vec<u8>> {
    let line_end = head.windows(2).position(|w| w == b"\r\n")?;
    let status_line = std::str::from_utf8(&head[..line_end]).ok()?;
    let empty = head
        .windows(19)
        .any(|w| w.eq_ignore_ascii_case(b"content-length: 0\r\n"));
    if !empty {
        return None;
    }
    let (code, message, hint) = match status_line.split(' ').nth(1)? {
        "400" => (
            "malformed_request",
            "the request is not valid HTTP/1.1",
            "send a well-formed HTTP/1.1 request",
        ),
        "414" => (
            "uri_too_long",
            "the request URI is too long",
            "send long input in a request body, not the URL",
        ),
        "431" => (
            "headers_too_large",
            "the request headers are too large",
            "send fewer or smaller headers",
        ),
        _ => return None,
    };
    let body = error_body(code, message, hint);
    Some(
        format!(
            "{status_line}\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

/// A connection's stream that rewrites the empty-bodied error responses hyper writes for requests it could not
/// parse ([`shaped`]); everything else passes through untouched. Hyper closes the connection after such a
/// response, so nothing follows the rewritten bytes.
struct ShapedErrors<S> {
    inner: S,
    /// Rewritten bytes not yet written, and how many bytes of hyper's buffer they stand for.
    pending: Option<(Vec<u8>, usize, usize)>,
}

impl<S> ShapedErrors<S> {
    fn new(inner: S) -> Self {
        ShapedErrors {
            inner,
            pending: None,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ShapedErrors<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ShapedErrors<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.pending.is_none()
            && buf.starts_with(b"HTTP/1.1 4")
            && let Some(bytes) = shaped(buf)
        {
            self.pending = Some((bytes, 0, buf.len()));
        }
        let this = &mut *self;
        match &mut this.pending {
            None => Pin::new(&mut this.inner).poll_write(cx, buf),
            Some((bytes, written, stands_for)) => {
                while *written < bytes.len() {
                    match Pin::new(&mut this.inner).poll_write(cx, &bytes[*written..]) {
                        Poll::Ready(Ok(0)) => {
                            return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                        }
                        Poll::Ready(Ok(n)) => *written += n,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Pending => return Poll::Pending,
                    }
                }
                // Report hyper's bytes as written (once), then swallow anything it writes after.
                let n = std::mem::take(stands_for);
                Poll::Ready(Ok(if n > 0 { n } else { buf.len() }))
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn empty_parse_errors_get_the_error_shape() {
        let head =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let out = String::from_utf8(shaped(head).expect("shaped")).expect("utf8");
        assert!(
            out.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{out}"
        );
        let body = out.split("\r\n\r\n").nth(1).expect("body");
        let v: serde_json::Value = serde_json::from_str(body).expect("json");
        assert_eq!(v["code"], "headers_too_large");
        assert!(out.contains(&format!("content-length: {}\r\n", body.len())));
        // Responses with a body (our own) and other statuses pass untouched.
        assert!(shaped(b"HTTP/1.1 431 X\r\ncontent-length: 12\r\n\r\n").is_none());
        assert!(shaped(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").is_none());
    }
}
