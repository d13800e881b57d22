//! A counting HTTP pass-through in front of the relay. The extension is paired against the proxy's URL, so the
//! relay can be stopped and restarted (on another port if need be) while the extension keeps one relay URL, and
//! tests can count exactly how many requests the extension made (e.g. "no retry storm after a 401").
//!
//! It forwards bytes unchanged, one request per upstream connection. When the relay is down it closes the client
//! connection without an answer, which the extension sees as a network error — the same as a stopped relay.
//! Started with a path prefix ([`Proxy::start_under`]) it stands for a relay published under a sub-path, as a
//! reverse proxy would: requests under the prefix are forwarded with it removed, any other path gets 404.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;

/// One request that went through (status 0 = relay unreachable).
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub status: u16,
    pub at: Instant,
}

#[derive(Debug)]
pub struct Proxy {
    pub port: u16,
    prefix: String,
    upstream: Arc<AtomicU16>,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    pub fn start(upstream_port: u16) -> Result<Proxy> {
        Proxy::start_under(upstream_port, "")
    }

    /// A proxy publishing the relay under `prefix` (e.g. `/personkit`; empty for the root).
    pub fn start_under(upstream_port: u16, prefix: &str) -> Result<Proxy> {
        let prefix = prefix.trim_end_matches('/').to_owned();
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let upstream = Arc::new(AtomicU16::new(upstream_port));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (up, sn, st, pre) = (upstream.clone(), seen.clone(), stop.clone(), prefix.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((sock, _)) => {
                        let (up, sn, pre) = (up.clone(), sn.clone(), pre.clone());
                        std::thread::spawn(move || {
                            let _ = handle(sock, up.load(Ordering::Relaxed), &sn, &pre);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Ok(Proxy {
            port,
            prefix,
            upstream,
            seen,
            stop,
        })
    }

    /// The relay URL a client is given: `http://127.0.0.1:<port>`, plus `<prefix>/` under a sub-path.
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("http://127.0.0.1:{}", self.port)
        } else {
            format!("http://127.0.0.1:{}{}/", self.port, self.prefix)
        }
    }

    pub fn set_upstream(&self, port: u16) {
        self.upstream.store(port, Ordering::Relaxed);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Requests to `path_prefix` seen since `since`.
    pub fn count_since(&self, path_prefix: &str, since: Instant) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.at >= since && s.path.starts_with(path_prefix))
            .count()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn read_request(sock: &mut TcpStream) -> Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if sock.read(&mut byte)? == 0 {
            return Ok(None);
        }
        buf.push(byte[0]);
        if buf.len() > 64 * 1024 {
            return Ok(None);
        }
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let len = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    sock.read_exact(&mut body)?;
    // Rewrite the request to close the upstream connection after one response.
    let mut out = String::new();
    for (i, line) in head.split("\r\n").enumerate() {
        if line.is_empty() {
            continue;
        }
        if i > 0
            && line
                .split_once(':')
                .is_some_and(|(k, _)| k.eq_ignore_ascii_case("connection"))
        {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    let mut req = out.into_bytes();
    req.extend_from_slice(&body);
    Ok(Some(req))
}

fn handle(
    mut client: TcpStream,
    upstream: u16,
    seen: &Mutex<Vec<Seen>>,
    prefix: &str,
) -> Result<()> {
    client.set_nonblocking(false)?;
    client.set_read_timeout(Some(Duration::from_secs(30)))?;
    let Some(mut req) = read_request(&mut client)? else {
        return Ok(());
    };
    let first = String::from_utf8_lossy(&req[..req.iter().position(|&b| b == b'\r').unwrap_or(0)])
        .to_string();
    let mut parts = first.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let record = |status: u16| {
        if let Ok(mut s) = seen.lock() {
            s.push(Seen {
                method: method.clone(),
                path: path.clone(),
                status,
                at: Instant::now(),
            });
        }
    };
    if !prefix.is_empty() {
        let Some(rest) = path.strip_prefix(prefix).filter(|r| r.starts_with('/')) else {
            record(404);
            client.write_all(
                b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            )?;
            return Ok(());
        };
        // The request line with the prefix removed from its path.
        let line_end = req.iter().position(|&b| b == b'\r').unwrap_or(0);
        let line = format!("{method} {rest} HTTP/1.1");
        req.splice(..line_end, line.into_bytes());
    }
    let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream)) else {
        record(0);
        return Ok(()); // dropping the client socket = network error, like a stopped relay
    };
    up.set_read_timeout(Some(Duration::from_secs(30)))?;
    up.write_all(&req)?;
    let mut resp = Vec::new();
    let _ = up.read_to_end(&mut resp);
    let status = String::from_utf8_lossy(&resp[..resp.len().min(32)])
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    record(status);
    if status == 0 {
        return Ok(());
    }
    client.write_all(&resp)?;
    client.flush()?;
    Ok(())
}
