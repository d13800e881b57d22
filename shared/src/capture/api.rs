//! The capture core's JSON-in/JSON-out entry points. `extension-wasm` wraps each in a one-line wasm-bindgen
//! function; the worker keeps the returned state objects in `storage.local`.
//!
//! **API boundary:** the JSON shapes of these inputs and outputs are the contract with `extension/bg.js`.

use std::cell::RefCell;
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use super::dedupe::SeenSet;
use super::health::{self, HealthInput};
use super::normalize::normalize;
use super::queue::{Applied, Next, Outcome, QueueConfig, QueueState};
use super::redact::{PatternError, Redactor};
use super::registry::{self, Registry};
use crate::wire::{self, ClientInfo, Role};

/// Bad input to an API function (a bug in the caller, never user data).
#[derive(Debug, thiserror::Error)]
pub enum ApiCallError {
    #[error("bad input JSON: {0}")]
    BadInput(#[from] serde_json::Error),
}

type Result<T> = std::result::Result<T, ApiCallError>;

fn to_json<T: Serialize>(v: &T) -> Result<String> {
    Ok(serde_json::to_string(v)?)
}

fn config(fast: bool) -> QueueConfig {
    if fast {
        QueueConfig::fast()
    } else {
        QueueConfig::normal()
    }
}

thread_local! {
    static REDACTOR: RefCell<Option<(Vec<String>, Rc<Redactor>)>> = const { RefCell::new(None) };
}

/// A redactor for these user patterns, compiled once per distinct list.
fn redactor(patterns: &[String]) -> Rc<Redactor> {
    REDACTOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if let Some((p, r)) = slot.as_ref()
            && p.as_slice() == patterns
        {
            return Rc::clone(r);
        }
        let r = Rc::new(Redactor::new(patterns).0);
        *slot = Some((patterns.to_vec(), Rc::clone(&r)));
        r
    })
}

/// Every entry point's input: one JSON object of which each function reads the fields its doc comment names.
/// (One input type means one deserializer in the wasm, which keeps it small.)
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Call {
    /// A page URL as the browser reports it for the sending tab (never as the page claims).
    url: String,
    /// Today's UTC date, `YYYY-MM-DD`.
    day: String,
    title: Option<String>,
    text: String,
    patterns: Vec<String>,
    turns: Vec<RawTurn>,
    device_id: String,
    app_version: String,
    /// RFC 3339 capture time.
    captured_at: String,
    queue: QueueState,
    seen: SeenSet,
    fast: bool,
    now_ms: u64,
    ids: Vec<u64>,
    /// HTTP status of a POST, or 0 when the request did not complete (then `error` says why).
    status: u16,
    body: String,
    retry_after_s: Option<u64>,
    error: String,
    enabled: bool,
    local_accepted_ms: Option<u64>,
    local_error_ms: Option<u64>,
    relay_accepted_ms: Option<u64>,
    relay_error_ms: Option<u64>,
}

fn call(input: &str) -> Result<Call> {
    Ok(serde_json::from_str(input)?)
}

/// Every registered surface's registry entry, verbatim, as a JSON array (the popup reads id, name, status).
pub fn surfaces() -> Result<String> {
    let entries: Vec<&str> = Registry::builtin()
        .surfaces()
        .map(|s| s.raw.as_str())
        .collect();
    Ok(format!("[{}]", entries.join(",")))
}

/// Content-script match patterns for the manifest (`scripts/build-extension` derives the same list from the JSON).
pub fn match_patterns() -> Result<String> {
    to_json(&Registry::builtin().match_patterns())
}

#[derive(Debug, Serialize)]
struct AdapterOutput {
    /// The registry entry, verbatim.
    surface: Option<Box<serde_json::value::RawValue>>,
    conversation_id: Option<String>,
    thread_id: Option<String>,
}

/// `{url, day}` → `{surface: <registry entry>|null, conversation_id, thread_id}`.
pub fn adapter_for_url(input: &str) -> Result<String> {
    let input = call(input)?;
    let m = Registry::builtin().match_url(&input.url, &input.day);
    let out = match m {
        Some(m) => AdapterOutput {
            thread_id: m.conversation_id.as_deref().map(|c| {
                crate::ids::thread_id(&m.surface.id, c)
                    .hyphenated()
                    .to_string()
            }),
            surface: serde_json::value::RawValue::from_string(m.surface.raw.clone()).ok(),
            conversation_id: m.conversation_id,
        },
        None => AdapterOutput {
            surface: None,
            conversation_id: None,
            thread_id: None,
        },
    };
    to_json(&out)
}

/// `["regex", ...]` → `[{index, pattern, message}]` of the invalid ones.
pub fn validate_patterns(input: &str) -> Result<String> {
    let patterns: Vec<String> = serde_json::from_str(input)?;
    let errors: Vec<PatternError> = Redactor::new(&patterns).1;
    to_json(&errors)
}

/// `{text, patterns}` → the redacted text (as a JSON string).
pub fn redact(input: &str) -> Result<String> {
    let input = call(input)?;
    to_json(&redactor(&input.patterns).redact(&input.text))
}

/// One turn as the content script read it from the page.
#[derive(Debug, Clone, Deserialize)]
pub struct RawTurn {
    pub role: Role,
    pub text: String,
    #[serde(default)]
    pub message_key: Option<String>,
    /// The raw value of the surface's ordinal attribute, if the surface has an ordinal rule.
    #[serde(default)]
    pub ordinal_raw: Option<String>,
}

#[derive(Debug, Serialize, Default)]
struct CaptureOutput {
    queue: QueueState,
    seen: SeenSet,
    surface: Option<String>,
    thread_id: Option<String>,
    /// Turns newly queued.
    queued: usize,
    /// Turns already sent from this browser.
    already_seen: usize,
    /// Turns with no text left after normalisation, or invalid for the wire format.
    dropped_empty: usize,
    dropped_invalid: usize,
    /// Turns refused because the queue is full (they stay unseen, so a later read queues them).
    overflowed: usize,
    near_full: bool,
    queue_length: usize,
}

/// Normalise, redact, hash, dedupe and queue one snapshot of turns. See [`CaptureInput`] and [`CaptureOutput`].
pub fn capture(input: &str) -> Result<String> {
    to_json(&capture_inner(call(input)?))
}

fn capture_inner(input: Call) -> CaptureOutput {
    let cfg = config(input.fast);
    let mut out = CaptureOutput {
        queue: input.queue,
        seen: input.seen,
        ..CaptureOutput::default()
    };
    let registry = Registry::builtin();
    let Some(m) = registry.match_url(&input.url, &input.day) else {
        out.queue_length = out.queue.len();
        return out;
    };
    let surface = m.surface.id.clone();
    out.surface = Some(surface.clone());
    let Some(conversation_id) = m.conversation_id else {
        out.queue_length = out.queue.len();
        return out;
    };
    let thread_id = crate::ids::thread_id(&surface, &conversation_id)
        .hyphenated()
        .to_string();
    out.thread_id = Some(thread_id.clone());
    let red = redactor(&input.patterns);
    let url = registry::clean_url(&input.url);
    let title = input
        .title
        .as_deref()
        .map(|t| red.redact(&normalize(t)))
        .filter(|t| !t.is_empty())
        .map(|t| truncate_bytes(&t, wire::MAX_FIELD_BYTES));
    let client = ClientInfo {
        app_version: input.app_version,
        device_id: input.device_id,
    };
    let mut fresh = Vec::new();
    let mut keys = Vec::new();
    let mut in_snapshot: Vec<String> = Vec::new();
    for turn in input.turns {
        let text = red.redact(&normalize(
            &registry.strip_lines(&surface, &normalize(&turn.text)),
        ));
        if text.trim().is_empty() {
            out.dropped_empty += 1;
            continue;
        }
        let ordinal = turn
            .ordinal_raw
            .as_deref()
            .and_then(|raw| registry.ordinal(&surface, raw));
        let message_key = turn
            .message_key
            .filter(|k| !k.is_empty())
            .map(|k| truncate_bytes(&k, wire::MAX_FIELD_BYTES));
        let mut obs = wire::build_observation(
            &surface,
            &conversation_id,
            turn.role,
            &text,
            ordinal,
            message_key.as_deref(),
            &input.captured_at,
            client.clone(),
        );
        obs.url = url.clone();
        obs.title = title.clone();
        if wire::validate(&obs).is_err() {
            out.dropped_invalid += 1;
            continue;
        }
        let key = SeenSet::key(&thread_id, message_key.as_deref(), &obs.turn.content_hash);
        if out.seen.contains(&key) || in_snapshot.contains(&key) {
            out.already_seen += 1;
            continue;
        }
        in_snapshot.push(key.clone());
        fresh.push(obs);
        keys.push(key);
    }
    let enq = out.queue.enqueue(fresh, &cfg);
    for (key, ok) in keys.into_iter().zip(&enq.accepted) {
        if *ok {
            out.seen.insert(key);
            out.queued += 1;
        }
    }
    out.overflowed = enq.overflowed;
    out.near_full = enq.near_full;
    out.queue_length = out.queue.len();
    out
}

fn truncate_bytes(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// `{queue, now_ms, fast}` → `{action: send, ids, body} | {action: wait, ms} | {action: idle} | {action: sign_in_required}`.
pub fn next_batch(input: &str) -> Result<String> {
    let input = call(input)?;
    let next: Next = input.queue.next_batch(input.now_ms, &config(input.fast));
    to_json(&next)
}

#[derive(Debug, Serialize)]
struct OutcomeOutput {
    queue: QueueState,
    applied: Applied,
    queue_length: usize,
}

/// `{queue, ids, status, body, retry_after_s, error, now_ms, fast}` (status 0: the request did not complete)
/// → `{queue, applied: {wipe_token, acknowledged, rejected, retry_in_ms}, queue_length}`.
pub fn on_outcome(input: &str) -> Result<String> {
    let mut input = call(input)?;
    let outcome = if input.status == 0 {
        Outcome::Network {
            message: std::mem::take(&mut input.error),
        }
    } else {
        Outcome::Http {
            status: input.status,
            body: std::mem::take(&mut input.body),
            retry_after_s: input.retry_after_s,
        }
    };
    let applied = input
        .queue
        .on_outcome(&input.ids, &outcome, input.now_ms, &config(input.fast));
    let queue_length = input.queue.len();
    to_json(&OutcomeOutput {
        queue: input.queue,
        applied,
        queue_length,
    })
}

/// `{queue}` → the queue after a successful pairing (sending allowed again, right away).
pub fn on_paired(input: &str) -> Result<String> {
    let mut input = call(input)?;
    input.queue.on_paired();
    to_json(&input.queue)
}

#[derive(Debug, Serialize)]
struct QueueSummary {
    queue_length: usize,
    held: usize,
    sent: u64,
    near_full: bool,
    sign_in_required: bool,
    last_error: Option<super::queue::LastError>,
}

/// `{queue, fast}` → `{queue_length, held, sent, near_full, sign_in_required, last_error}`.
pub fn queue_summary(input: &str) -> Result<String> {
    let input = call(input)?;
    let q = &input.queue;
    to_json(&QueueSummary {
        queue_length: q.len(),
        held: q.held.len(),
        sent: q.sent,
        near_full: q.near_full(&config(input.fast)),
        sign_in_required: q.auth == super::queue::Auth::SignInRequired,
        last_error: q.last_error.clone(),
    })
}

/// `{now_ms, enabled, local_accepted_ms, local_error_ms, relay_accepted_ms, relay_error_ms}` → `"green"|...`.
pub fn health_light(input: &str) -> Result<String> {
    let c = call(input)?;
    to_json(&health::light(&HealthInput {
        now_ms: c.now_ms,
        enabled: c.enabled,
        local_accepted_ms: c.local_accepted_ms,
        local_error_ms: c.local_error_ms,
        relay_accepted_ms: c.relay_accepted_ms,
        relay_error_ms: c.relay_error_ms,
    }))
}

/// The flush delay (ms) the worker waits after an enqueue.
pub fn flush_delay_ms(fast: bool) -> u64 {
    config(fast).flush_delay_ms
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn call(f: fn(&str) -> Result<String>, v: Value) -> Value {
        serde_json::from_str(&f(&v.to_string()).unwrap()).unwrap()
    }

    fn snapshot(turns: Value, queue: Value, seen: Value) -> Value {
        json!({
            "url": "https://chatgpt.com/c/abc-1?x=secret",
            "title": "My chat",
            "turns": turns,
            "patterns": ["ACME-\\d+", "(bad"],
            "device_id": "dev-1",
            "app_version": "0.1.0",
            "captured_at": "2026-11-22T10:00:00.000Z",
            "queue": queue,
            "seen": seen,
        })
    }

    #[test]
    fn capture_normalises_redacts_hashes_and_dedupes() {
        let turns = json!([
            {"role": "user", "text": "You said:\n  Here is my key API_KEY=abc123 and ACME-42  \n\n\n", "message_key": "m1",
             "ordinal_raw": "conversation-turn-1"},
            {"role": "assistant", "text": "ChatGPT said:\nNoted.", "message_key": "m2"},
            {"role": "assistant", "text": "  \n Copy code \n"},
        ]);
        let out = call(capture, snapshot(turns.clone(), json!({}), json!({})));
        assert_eq!(out["queued"], 2);
        assert_eq!(out["dropped_empty"], 1);
        assert_eq!(out["queue_length"], 2);
        let items = out["queue"]["items"].as_array().unwrap();
        let first: Value = serde_json::from_str(items[0]["json"].as_str().unwrap()).unwrap();
        let first = &first;
        assert_eq!(
            first["turn"]["content"],
            "Here is my key API_KEY=[REDACTED:env] and [REDACTED:custom]"
        );
        assert_eq!(first["turn"]["ordinal"], 0);
        assert_eq!(first["turn"]["message_key"], "m1");
        assert_eq!(first["url"], "https://chatgpt.com/c/abc-1");
        assert_eq!(first["source_surface"], "browser-ext:chatgpt");
        assert_eq!(first["conversation_id"], "abc-1");
        // The one hash and thread-id functions were used: the relay's validation accepts the item.
        wire::parse_observation(first).unwrap();
        let second: Value = serde_json::from_str(items[1]["json"].as_str().unwrap()).unwrap();
        assert_eq!(second["turn"]["content"], "Noted.");

        // Same snapshot again, with the persisted state: nothing new.
        let again = call(
            capture,
            snapshot(turns, out["queue"].clone(), out["seen"].clone()),
        );
        assert_eq!(again["queued"], 0);
        assert_eq!(again["already_seen"], 2);
        assert_eq!(again["queue_length"], 2);
        // An edited turn at the same key is new content: queued.
        let edited = json!([{"role": "assistant", "text": "Noted, changed.", "message_key": "m2"}]);
        let e = call(
            capture,
            snapshot(edited, again["queue"].clone(), again["seen"].clone()),
        );
        assert_eq!(e["queued"], 1);
    }

    #[test]
    fn capture_without_conversation_or_foreign_url_queues_nothing() {
        let mut input = snapshot(
            json!([{"role": "user", "text": "hi"}]),
            json!({}),
            json!({}),
        );
        input["url"] = json!("https://chatgpt.com/");
        assert_eq!(call(capture, input.clone())["queued"], 0);
        input["url"] = json!("https://evil.example/c/abc");
        let out = call(capture, input);
        assert_eq!(out["queued"], 0);
        assert_eq!(out["surface"], Value::Null);
    }

    #[test]
    fn queue_round_trip_through_the_api() {
        let out = call(
            capture,
            snapshot(
                json!([{"role": "user", "text": "hello"}]),
                json!({}),
                json!({}),
            ),
        );
        let next = call(next_batch, json!({"queue": out["queue"], "now_ms": 1}));
        assert_eq!(next["action"], "send");
        let body: Value = serde_json::from_str(next["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["observations"].as_array().unwrap().len(), 1);
        let resp = json!({"stored": 1, "duplicate": 0, "rejected": 0, "results": [{"index": 0, "status": "stored"}]});
        let done = call(
            on_outcome,
            json!({"queue": out["queue"], "ids": next["ids"], "now_ms": 2, "status": 200, "body": resp.to_string()}),
        );
        assert_eq!(done["queue_length"], 0);
        assert_eq!(done["applied"]["acknowledged"][0][0], "browser-ext:chatgpt");
        let s = call(queue_summary, json!({"queue": done["queue"]}));
        assert_eq!(s["sent"], 1);
        assert_eq!(
            call(next_batch, json!({"queue": done["queue"], "now_ms": 3}))["action"],
            "idle"
        );
    }

    #[test]
    fn adapter_and_patterns_and_health() {
        let a = call(
            adapter_for_url,
            json!({"url": "https://claude.ai/chat/abc"}),
        );
        assert_eq!(a["surface"]["id"], "browser-ext:claude");
        assert_eq!(a["conversation_id"], "abc");
        assert_eq!(
            a["thread_id"],
            crate::ids::thread_id("browser-ext:claude", "abc").to_string()
        );
        assert!(
            !a["surface"]["streaming_markers"]
                .as_array()
                .unwrap()
                .is_empty()
        );
        let none = call(adapter_for_url, json!({"url": "https://example.com/"}));
        assert_eq!(none["surface"], Value::Null);
        let errs = call(validate_patterns, json!(["ok", "(bad", "[z-a]"]));
        assert_eq!(errs.as_array().unwrap().len(), 2);
        assert_eq!(errs[0]["index"], 1);
        assert_eq!(
            call(health_light, json!({"now_ms": 10, "enabled": false})),
            json!("off")
        );
        assert_eq!(
            call(redact, json!({"text": "sk-abcdefghijklmnop1234"})),
            json!("[REDACTED:openai_key]")
        );
        let s: Vec<Value> = serde_json::from_str(&surfaces().unwrap()).unwrap();
        assert!(s.len() >= 4);
        assert!(match_patterns().unwrap().contains("https://chatgpt.com/*"));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(capture("{").is_err());
        assert!(next_batch("3").is_err());
    }
}
