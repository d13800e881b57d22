//! The TLS fixture server: serves fixture pages at the chat sites' real URL paths on an ephemeral 127.0.0.1
//! port, with a self-signed certificate whose SAN names the sites' hosts. The browser maps those host names onto
//! this port, so pages load as `https://chatgpt.com/c/<id>` and the extension's content scripts see the real
//! origin. Pages get a strict CSP like the real sites (no `wasm-unsafe-eval`).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// One request the server saw (host header and path), for tests that want to know a page was fetched.
#[derive(Debug, Clone)]
pub struct Hit {
    pub host: String,
    pub path: String,
    pub status: u16,
}

#[derive(Debug, Default)]
struct State {
    /// URL path (without query) → file to serve.
    routes: HashMap<String, PathBuf>,
    hits: Vec<Hit>,
}

/// The running server; stops accepting when dropped (the accept thread notices the stop flag).
#[derive(Debug)]
pub struct FixtureServer {
    pub port: u16,
    state: Arc<Mutex<State>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl FixtureServer {
    /// Starts the server; `/__e2e/<file>` serves `e2e/fixtures/_lib/<file>` for every host.
    pub fn start() -> Result<FixtureServer> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut names: Vec<String> = crate::SITE_HOSTS.iter().map(|s| s.to_string()).collect();
        names.push("localhost".into());
        let key = rcgen::KeyPair::generate().map_err(|e| anyhow!("keygen: {e}"))?;
        let mut params =
            rcgen::CertificateParams::new(names).map_err(|e| anyhow!("cert params: {e}"))?;
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress(std::net::IpAddr::from([
                127, 0, 0, 1,
            ])));
        let cert = params
            .self_signed(&key)
            .map_err(|e| anyhow!("self-sign: {e}"))?;
        let cert_der: CertificateDer<'static> = cert.der().clone();
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![cert_der], key_der)
            .context("TLS config")?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);

        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (st, stp) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stp.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((sock, _)) => {
                        let (config, st) = (config.clone(), st.clone());
                        std::thread::spawn(move || {
                            let _ = serve_conn(sock, config, st);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Ok(FixtureServer { port, state, stop })
    }

    /// Serves `file` at `path` (any host).
    pub fn route(&self, path: &str, file: PathBuf) {
        if let Ok(mut s) = self.state.lock() {
            s.routes.insert(path.to_string(), file);
        }
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.state
            .lock()
            .map(|s| s.hits.clone())
            .unwrap_or_default()
    }
}

impl Drop for FixtureServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

fn serve_conn(
    sock: TcpStream,
    config: Arc<rustls::ServerConfig>,
    state: Arc<Mutex<State>>,
) -> Result<()> {
    sock.set_nonblocking(false)?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    let conn = rustls::ServerConnection::new(config)?;
    let mut tls = rustls::StreamOwned::new(conn, sock);
    // Keep-alive loop: one request after another on the same connection.
    loop {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if tls.read(&mut byte)? == 0 {
                return Ok(());
            }
            head.push(byte[0]);
            if head.len() > 64 * 1024 {
                return Ok(());
            }
        }
        let text = String::from_utf8_lossy(&head).to_string();
        let mut lines = text.lines();
        let request_line = lines.next().unwrap_or_default();
        let target = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("/")
            .to_string();
        let mut host = String::new();
        let mut content_length = 0usize;
        let mut ws_key = None;
        for l in lines {
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("sec-websocket-key") {
                    ws_key = Some(v.trim().to_string());
                } else if k.eq_ignore_ascii_case("host") {
                    host = v.trim().to_string();
                } else if k.eq_ignore_ascii_case("content-length") {
                    content_length = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0u8; content_length];
        tls.read_exact(&mut body)?;
        let path = target.split(['?', '#']).next().unwrap_or("/").to_string();
        let file = if let Some(lib) = path.strip_prefix("/__e2e/") {
            if lib.contains("..") {
                None
            } else {
                Some(crate::fixtures_dir().join("_lib").join(lib))
            }
        } else {
            state.lock().ok().and_then(|s| s.routes.get(&path).cloned())
        };
        if let Some(key) = ws_key {
            let status = if file.is_some() { 101 } else { 404 };
            if let Ok(mut s) = state.lock() {
                s.hits.push(Hit { host, path, status });
            }
            return match file {
                Some(f) => serve_socket(&mut tls, &key, &f),
                None => {
                    tls.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
                    Ok(())
                }
            };
        }
        let file_ext = file
            .as_ref()
            .and_then(|f| f.extension())
            .and_then(|e| e.to_str())
            .map(str::to_owned);
        let (status, ctype, content) =
            match file.and_then(|f| std::fs::read(&f).ok().map(|c| (f, c))) {
                Some((f, c)) => {
                    let ctype = match f.extension().and_then(|e| e.to_str()) {
                        Some("js") => "text/javascript; charset=utf-8",
                        Some("css") => "text/css; charset=utf-8",
                        // Site responses for the page-world interceptor's cases (shared/tests/fixtures/network).
                        Some("sse" | "cut") => "text/event-stream; charset=utf-8",
                        Some("json") => "application/json",
                        Some("ndjson") => "application/x-ndjson",
                        Some("bin") => "application/json+protobuf",
                        _ => "text/html; charset=utf-8",
                    };
                    (200u16, ctype, c)
                }
                None => (404, "text/plain", b"not found".to_vec()),
            };
        if let Ok(mut s) = state.lock() {
            s.hits.push(Hit { host, path, status });
        }
        let reason = if status == 200 { "OK" } else { "Not Found" };
        // A `.cut` stream is a connection lost mid-reply: the header promises twice the bytes, the server sends
        // the file and closes.
        let cut = file_ext.as_deref() == Some("cut");
        let promised = if cut {
            content.len() * 2
        } else {
            content.len()
        };
        let header = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\
             Content-Security-Policy: default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' \
             'unsafe-inline'; img-src 'self' data:\r\nConnection: keep-alive\r\n\r\n",
            promised
        );
        tls.write_all(header.as_bytes())?;
        // A site's streamed reply (`.sse`) goes out in 16 KiB writes, each flushed, so the page reads it in chunks
        // as it would from the site.
        if ctype.starts_with("text/event-stream") {
            for piece in content.chunks(16 * 1024) {
                tls.write_all(piece)?;
                tls.flush()?;
            }
        } else {
            tls.write_all(&content)?;
        }
        tls.flush()?;
        if cut {
            tls.conn.send_close_notify();
            let _ = tls.flush();
            return Ok(());
        }
    }
}

/// A site's WebSocket (RFC 6455) answered from a file: after the handshake and the page's first message (its
/// prompt), each non-empty line of `file` goes out as one text frame, then a close frame.
fn serve_socket(tls: &mut (impl Read + Write), key: &str, file: &Path) -> Result<()> {
    let lines = std::fs::read_to_string(file)?;
    let accept = {
        let d = ring::digest::digest(
            &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
            format!("{key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11").as_bytes(),
        );
        base64(d.as_ref())
    };
    tls.write_all(
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {accept}\r\n\r\n"
        )
        .as_bytes(),
    )?;
    tls.flush()?;
    // The page's first frame (client frames are masked): read and dropped.
    let mut head = [0u8; 2];
    tls.read_exact(&mut head)?;
    let len = match head[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            tls.read_exact(&mut b)?;
            u64::from(u16::from_be_bytes(b))
        }
        127 => {
            let mut b = [0u8; 8];
            tls.read_exact(&mut b)?;
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    };
    let mask = if head[1] & 0x80 != 0 { 4 } else { 0 };
    std::io::copy(
        &mut Read::by_ref(tls).take(len + mask),
        &mut std::io::sink(),
    )?;
    for line in lines.lines().filter(|l| !l.trim().is_empty()) {
        let mut frame = vec![0x81u8];
        match line.len() {
            n if n < 126 => frame.push(n as u8),
            n if n <= 0xffff => {
                frame.push(126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(line.as_bytes());
        tls.write_all(&frame)?;
        tls.flush()?;
        std::thread::sleep(Duration::from_millis(20));
    }
    tls.write_all(&[0x88, 0x02, 0x03, 0xe8])?;
    tls.flush()?;
    Ok(())
}

/// Standard base64 with padding (the handshake's accept value).
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A self-signed certificate for `localhost` and 127.0.0.1 written as PEM files under `dir` (for a relay serving
/// TLS itself): `(cert.pem, key.pem)`.
pub fn self_signed_pem(dir: &std::path::Path) -> Result<(PathBuf, PathBuf)> {
    let key = rcgen::KeyPair::generate().map_err(|e| anyhow!("keygen: {e}"))?;
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .map_err(|e| anyhow!("cert params: {e}"))?;
    params
        .subject_alt_names
        .push(rcgen::SanType::IpAddress(std::net::IpAddr::from([
            127, 0, 0, 1,
        ])));
    let cert = params
        .self_signed(&key)
        .map_err(|e| anyhow!("self-sign: {e}"))?;
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.pem())?;
    std::fs::write(&key_path, key.serialize_pem())?;
    Ok((cert_path, key_path))
}

#[cfg(test)]
mod tests {
    #[test]
    fn websocket_accept_is_rfc_6455s_example() {
        let d = ring::digest::digest(
            &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
            b"dGhlIHNhbXBsZSBub25jZQ==258EAFA5-E914-47DA-95CA-C5AB0DC85B11",
        );
        assert_eq!(super::base64(d.as_ref()), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert_eq!(super::base64(b"ab"), "YWI=");
        assert_eq!(super::base64(b"a"), "YQ==");
    }
}
