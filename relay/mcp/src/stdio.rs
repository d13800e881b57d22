//! MCP over stdin/stdout with a thin layer in front of the SDK: every line is checked first ([`jsonrpc::check`]);
//! one that is not a JSON-RPC 2.0 message gets its JSON-RPC error here and the server keeps serving, the others go
//! to the SDK unchanged through an in-memory pipe. The SDK's answers and these errors are written to stdout whole
//! lines at a time. When stdout is gone (the client closed its end), the server stops.

use std::io;

use rmcp::ServiceExt;
use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
    ReadHalf, WriteHalf,
};
use tokio::sync::mpsc;

use crate::jsonrpc::{self, MAX_MESSAGE_BYTES, Refusal};
use crate::{Backend, Personkit};

/// Bytes the in-memory pipe between this layer and the SDK buffers each way.
const PIPE_BYTES: usize = 256 * 1024;

/// Serves MCP over `input` and `output` until the client closes `input` (then the answers still due are written)
/// or `output` stops taking bytes, or `output_closed` says the client closed it.
pub async fn serve_lines<R, W>(
    backend: Backend,
    input: R,
    output: W,
    output_closed: impl std::future::Future<Output = ()>,
) -> Result<(), String>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
    let (from_sdk, to_sdk) = tokio::io::split(ours);
    let (errors_tx, errors_rx) = mpsc::channel::<Vec<u8>>(16);
    let inbound = tokio::spawn(pump_in(input, to_sdk, errors_tx));
    let mut outbound = tokio::spawn(pump_out(from_sdk, errors_rx, output));
    let session = async {
        let service = Personkit::new(backend)
            .serve(tokio::io::split(theirs))
            .await
            .map_err(|e| format!("the MCP client did not start a session: {e}"))?;
        service
            .waiting()
            .await
            .map_err(|e| format!("the MCP session ended with an error: {e}"))?;
        Ok::<(), String>(())
    };
    let ended = tokio::select! {
        r = session => r,
        _ = &mut outbound => {
            inbound.abort();
            return Ok(());
        }
        () = output_closed => {
            inbound.abort();
            outbound.abort();
            return Ok(());
        }
    };
    // The client closed stdin: write what is still due, then stop.
    inbound.abort();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), outbound).await;
    ended
}

/// Reads lines from the client; passes each JSON-RPC 2.0 message to the SDK and answers the rest itself.
async fn pump_in<R: AsyncRead + Unpin>(
    input: R,
    mut to_sdk: WriteHalf<DuplexStream>,
    errors: mpsc::Sender<Vec<u8>>,
) {
    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    let limit = u64::try_from(MAX_MESSAGE_BYTES + 2).unwrap_or(u64::MAX);
    loop {
        line.clear();
        match (&mut reader).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let refusal = if !line.ends_with(b"\n") && line.len() > MAX_MESSAGE_BYTES {
            // The rest of an over-long line is read and dropped.
            let mut rest = Vec::new();
            loop {
                rest.clear();
                match (&mut reader)
                    .take(64 * 1024)
                    .read_until(b'\n', &mut rest)
                    .await
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) if rest.ends_with(b"\n") => break,
                    Ok(_) => {}
                }
            }
            Some(Refusal::too_large())
        } else {
            let msg = line.strip_suffix(b"\n").unwrap_or(&line);
            let msg = msg.strip_suffix(b"\r").unwrap_or(msg);
            if msg.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match jsonrpc::check(msg) {
                Ok(_) => {
                    let mut framed = msg.to_vec();
                    framed.push(b'\n');
                    if to_sdk.write_all(&framed).await.is_err() {
                        break;
                    }
                    None
                }
                Err(r) => Some(r),
            }
        };
        if let Some(r) = refusal
            && errors
                .send(r.to_json().to_string().into_bytes())
                .await
                .is_err()
        {
            break;
        }
    }
    // End of input: the SDK sees it too and ends the session.
    let _ = to_sdk.shutdown().await;
}

/// Writes the SDK's answers and this layer's errors to the client, whole lines at a time. Returns when both
/// sources are done, or with the error of a write the client no longer takes.
async fn pump_out<W: AsyncWrite + Unpin>(
    from_sdk: ReadHalf<DuplexStream>,
    mut errors: mpsc::Receiver<Vec<u8>>,
    mut out: W,
) -> io::Result<()> {
    let mut sdk = BufReader::new(from_sdk);
    // `read_until` keeps what it read when `select!` drops it, so the line is only cleared once written.
    let mut line = Vec::new();
    let (mut sdk_open, mut errors_open) = (true, true);
    while sdk_open || errors_open {
        tokio::select! {
            n = sdk.read_until(b'\n', &mut line), if sdk_open => {
                match n {
                    Ok(0) | Err(_) => sdk_open = false,
                    Ok(_) => {}
                }
                if !line.is_empty() && (line.ends_with(b"\n") || !sdk_open) {
                    out.write_all(&line).await?;
                    out.flush().await?;
                    line.clear();
                }
            }
            e = errors.recv(), if errors_open => match e {
                Some(mut e) => {
                    e.push(b'\n');
                    out.write_all(&e).await?;
                    out.flush().await?;
                }
                None => errors_open = false,
            },
        }
    }
    Ok(())
}

/// Resolves when the process's stdout is a pipe whose reading end the client closed; never otherwise.
pub async fn stdout_closed() {
    #[cfg(target_os = "linux")]
    match tokio::net::unix::pipe::OpenOptions::new().open_sender("/proc/self/fd/1") {
        Ok(pipe) => {
            while let Ok(ready) = pipe.ready(tokio::io::Interest::ERROR).await {
                if ready.is_error() {
                    return;
                }
            }
        }
        // ENXIO: a pipe nobody reads any more.
        Err(e) if e.raw_os_error() == Some(6) => return,
        Err(_) => {}
    }
    std::future::pending::<()>().await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::Value;
    use tokio::io::AsyncBufRead;

    fn backend() -> (tempfile::TempDir, Backend) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        drop(personkit_store::db::open(&path).unwrap());
        let conn = personkit_store::db::open_read_only(&path).unwrap();
        let backend = Backend::new(
            std::sync::Arc::new(crate::SingleReader::new(conn)),
            personkit_search::Indexes::new(),
            None,
            personkit_store::clock::Clock::system(),
        );
        (dir, backend)
    }

    async fn next<R: AsyncBufRead + Unpin>(lines: &mut tokio::io::Lines<R>) -> Value {
        let l = tokio::time::timeout(std::time::Duration::from_secs(10), lines.next_line())
            .await
            .expect("an answer")
            .unwrap()
            .expect("a line");
        serde_json::from_str(&l).unwrap()
    }

    #[tokio::test]
    async fn garbage_lines_get_json_rpc_errors_and_the_server_keeps_serving() {
        let (_dir, backend) = backend();
        let (mut client_in, server_in) = tokio::io::duplex(1 << 20);
        let (server_out, client_out) = tokio::io::duplex(1 << 20);
        let server = tokio::spawn(serve_lines(
            backend,
            server_in,
            server_out,
            std::future::pending(),
        ));
        let mut lines = BufReader::new(client_out).lines();
        client_in.write_all(b"this is not json\n").await.unwrap();
        let e = next(&mut lines).await;
        assert_eq!(
            (e["id"].clone(), e["error"]["code"].clone()),
            (Value::Null, (-32700).into())
        );
        client_in
            .write_all(b"{\"a\":\"\xff\xfe\"}\n")
            .await
            .unwrap();
        assert_eq!(next(&mut lines).await["error"]["code"], -32700);
        client_in
            .write_all(b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]\n")
            .await
            .unwrap();
        assert_eq!(next(&mut lines).await["error"]["code"], -32600);
        client_in
            .write_all(b"{\"jsonrpc\":\"1.0\",\"id\":7,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        let e = next(&mut lines).await;
        assert_eq!(
            (e["id"].clone(), e["error"]["code"].clone()),
            (7.into(), (-32600).into())
        );
        drop(client_in);
        server.await.unwrap().ok();
    }
}
