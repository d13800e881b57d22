//! A small Chrome DevTools Protocol client over `--remote-debugging-pipe`: Chromium reads NUL-terminated JSON
//! commands on its fd 3 and writes NUL-terminated JSON replies and events on its fd 4.
//!
//! Synchronous on purpose: one reader thread routes replies (by `id`) to the waiting caller and appends events to
//! a log that callers can wait on with a predicate.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};

type Pending = Arc<Mutex<HashMap<u64, Sender<Value>>>>;

/// Events seen so far, with a condition variable to wait for new ones.
#[derive(Debug, Default)]
struct EventLog {
    events: Mutex<Vec<Value>>,
    changed: Condvar,
}

/// A CDP connection. Cloning is cheap; all clones share the pipe.
#[derive(Clone)]
pub struct Cdp {
    writer: Arc<Mutex<Box<dyn Write + Send>>>,
    next_id: Arc<AtomicU64>,
    pending: Pending,
    events: Arc<EventLog>,
    closed: Arc<Mutex<bool>>,
}

impl std::fmt::Debug for Cdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cdp").finish_non_exhaustive()
    }
}

/// Default time a single CDP command may take.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

impl Cdp {
    /// Starts the reader thread over `reader` (Chromium's fd 4) and writes commands to `writer` (its fd 3).
    pub fn new(reader: impl Read + Send + 'static, writer: impl Write + Send + 'static) -> Cdp {
        let cdp = Cdp {
            writer: Arc::new(Mutex::new(Box::new(writer))),
            next_id: Arc::new(AtomicU64::new(1)),
            pending: Arc::new(Mutex::new(HashMap::new())),
            events: Arc::new(EventLog::default()),
            closed: Arc::new(Mutex::new(false)),
        };
        let pending = cdp.pending.clone();
        let events = cdp.events.clone();
        let closed = cdp.closed.clone();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(reader);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(0, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if buf.last() == Some(&0) {
                    buf.pop();
                }
                let Ok(msg) = serde_json::from_slice::<Value>(&buf) else {
                    continue;
                };
                if let Some(id) = msg.get("id").and_then(Value::as_u64) {
                    let tx = pending.lock().ok().and_then(|mut p| p.remove(&id));
                    if let Some(tx) = tx {
                        let _ = tx.send(msg);
                    }
                } else if let Ok(mut log) = events.events.lock() {
                    log.push(msg);
                    events.changed.notify_all();
                }
            }
            if let Ok(mut c) = closed.lock() {
                *c = true;
            }
            // Wake every waiter: the browser is gone.
            if let Ok(mut p) = pending.lock() {
                p.clear();
            }
            events.changed.notify_all();
        });
        cdp
    }

    /// Sends a command (on the browser target when `session` is None) and waits for its result.
    pub fn call(&self, session: Option<&str>, method: &str, params: Value) -> Result<Value> {
        self.call_timeout(session, method, params, COMMAND_TIMEOUT)
    }

    pub fn call_timeout(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let (tx, rx) = mpsc::channel();
        self.pending
            .lock()
            .map_err(|_| anyhow!("cdp lock poisoned"))?
            .insert(id, tx);
        {
            let mut w = self
                .writer
                .lock()
                .map_err(|_| anyhow!("cdp lock poisoned"))?;
            let mut bytes = serde_json::to_vec(&msg)?;
            bytes.push(0);
            w.write_all(&bytes)
                .and_then(|()| w.flush())
                .with_context(|| format!("CDP write {method}"))?;
        }
        let reply = rx.recv_timeout(timeout).map_err(|_| {
            if let Ok(mut p) = self.pending.lock() {
                p.remove(&id);
            }
            anyhow!("CDP {method}: no reply within {timeout:?} (browser gone or hung)")
        })?;
        if let Some(err) = reply.get("error") {
            bail!("CDP {method} failed: {err}");
        }
        Ok(reply.get("result").cloned().unwrap_or(Value::Null))
    }

    /// Waits until an event satisfying `pred` has been received (including ones received earlier).
    pub fn wait_event(&self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        let mut log = self
            .events
            .events
            .lock()
            .map_err(|_| anyhow!("cdp lock poisoned"))?;
        loop {
            if let Some(ev) = log.iter().find(|e| pred(e)) {
                return Ok(ev.clone());
            }
            if self.closed.lock().map(|c| *c).unwrap_or(true) {
                bail!("browser closed its CDP pipe while waiting for an event");
            }
            let now = Instant::now();
            if now >= deadline {
                bail!("no matching CDP event within {timeout:?}");
            }
            log = self
                .events
                .changed
                .wait_timeout(log, deadline - now)
                .map_err(|_| anyhow!("cdp lock poisoned"))?
                .0;
        }
    }

    /// All events received so far that satisfy `pred`.
    pub fn events_matching(&self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        self.events
            .events
            .lock()
            .map(|log| log.iter().filter(|e| pred(e)).cloned().collect())
            .unwrap_or_default()
    }
}
