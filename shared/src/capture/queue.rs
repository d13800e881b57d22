//! The delivery queue as a pure state machine. The capture core keeps [`QueueState`] while the worker runs (see
//! `api::Core`, which also tells the worker which items to store or delete after each step), the worker asks [`QueueState::next_batch`] what to send, performs the POST itself and feeds the outcome back through
//! [`QueueState::on_outcome`]. Invariants (property-tested): an item leaves the queue only when the relay
//! answered `stored` or `duplicate` for it, or when it was held (rejected) and then expired, was pushed out of the
//! held list by newer rejections, or was cleared by the user; the queue never holds more than its bound; after a
//! 401 nothing is sent until the user pairs again, and every item is still there.
//!
//! Held items (the relay rejected them: resending them unchanged would not help) live beside the queue, never in
//! it: they do not count toward the delivery bound, so rejections never stop new capture. Each is retried once
//! when the extension's version or the relay (its base, version or advertised limits) differs from the one that
//! rejected it ([`QueueState::maintain`]), expires [`QueueConfig::held_ttl_ms`] after it was held, and the user
//! can clear them all ([`QueueState::clear_held`]).

use serde::{Deserialize, Serialize};

use crate::wire::{ApiError, BatchResponse, ItemStatus, Observation};

/// Limits and timings. `normal()` for real use, `fast()` when the test flag `testFastFlush` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueConfig {
    pub max_items: usize,
    pub max_bytes: usize,
    /// Warn when the queue is this many percent full.
    pub near_full_percent: usize,
    pub batch_items: usize,
    pub batch_bytes: usize,
    pub base_backoff_ms: u64,
    pub max_backoff_ms: u64,
    /// How long the worker waits after an enqueue before it flushes (lets turns of one snapshot share a batch).
    pub flush_delay_ms: u64,
    /// Bound of the held list; the oldest held items make room for newer rejections.
    pub max_held_items: usize,
    pub max_held_bytes: usize,
    /// A held item is dropped this long after it was held.
    pub held_ttl_ms: u64,
}

impl QueueConfig {
    /// [`QueueConfig::fast`] for the end-to-end tests' short delays, else [`QueueConfig::normal`].
    pub fn of(fast: bool) -> QueueConfig {
        if fast {
            QueueConfig::fast()
        } else {
            QueueConfig::normal()
        }
    }

    pub fn normal() -> QueueConfig {
        QueueConfig {
            max_items: 2000,
            max_bytes: 6 * 1024 * 1024,
            near_full_percent: 80,
            batch_items: 100,
            batch_bytes: 1024 * 1024,
            base_backoff_ms: 2_000,
            max_backoff_ms: 5 * 60_000,
            flush_delay_ms: 2_000,
            max_held_items: 200,
            max_held_bytes: 2 * 1024 * 1024,
            held_ttl_ms: 7 * 24 * 3_600_000,
        }
    }

    pub fn fast() -> QueueConfig {
        QueueConfig {
            base_backoff_ms: 200,
            max_backoff_ms: 1_000,
            flush_delay_ms: 300,
            ..QueueConfig::normal()
        }
    }
}

/// One queued observation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuedItem {
    pub id: u64,
    pub surface: String,
    /// The conversation the observation belongs to (unset on items queued by a version that did not record it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
    /// Size of the serialised observation.
    pub bytes: usize,
    pub attempts: u32,
    /// The observation, serialised once when queued (what is POSTed, byte for byte).
    pub json: String,
    /// Set when the relay rejected the item: it then sits in `held` (resending it unchanged would not help).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
    /// When it was held (ms since the epoch). Unset on an item held by a version that did not record it:
    /// [`QueueState::maintain`] dates it then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_at_ms: Option<u64>,
    /// The extension version that held it (unset: an older version that did not record it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_version: Option<String>,
    /// The relay (see [`relay_fingerprint`]) that rejected it, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_relay: Option<String>,
    /// Already sent once more after a hold: a second rejection keeps it held until it expires or is cleared.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retried: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Auth {
    #[default]
    Ok,
    /// The relay answered 401: the token was wiped; nothing is sent until the user pairs again.
    SignInRequired,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastError {
    pub code: String,
    pub message: String,
    pub at_ms: u64,
}

/// Everything the queue knows. Items and held items are kept in id order, which is their queue order (an item
/// that goes back to the queue gets a new id), so the worker can store each item as its own record and load them
/// back in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct QueueState {
    #[serde(default)]
    pub items: Vec<QueuedItem>,
    /// Items the relay rejected, kept aside and not retried.
    #[serde(default)]
    pub held: Vec<QueuedItem>,
    #[serde(default)]
    pub next_id: u64,
    /// Items the relay acknowledged (stored or duplicate), ever.
    #[serde(default)]
    pub sent: u64,
    #[serde(default)]
    pub auth: Auth,
    /// Consecutive failed attempts (drives the backoff).
    #[serde(default)]
    pub failures: u32,
    #[serde(default)]
    pub next_attempt_ms: u64,
    /// Items per batch after a 413 (0: the config's value).
    #[serde(default)]
    pub batch_limit: usize,
    #[serde(default)]
    pub last_error: Option<LastError>,
    /// The extension version last seen by [`QueueState::maintain`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_version: Option<String>,
    /// The relay last seen by [`QueueState::maintain`] (see [`relay_fingerprint`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay: Option<String>,
    /// Held items dropped, ever: expired, pushed out by newer rejections, or cleared by the user.
    #[serde(default)]
    pub held_dropped: u64,
}

/// What identifies the relay's behaviour towards a turn: its base URL plus the `version` and `limits` of its
/// `GET /v1/health` body (other fields, e.g. a clock, are left out so they cannot look like a change). `None`
/// when the body is not a JSON object.
pub fn relay_fingerprint(base: &str, health_body: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(health_body).ok()?;
    let o = v.as_object()?;
    let pick = |k: &str| o.get(k).map_or_else(String::new, |x| x.to_string());
    Some(format!("{base} {} {}", pick("version"), pick("limits")))
}

/// What [`QueueState::maintain`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Maintained {
    /// Held items moved back to the queue for their one retry.
    pub requeued: usize,
    /// Held items dropped because they expired.
    pub expired: usize,
    /// The state changed: persist it.
    pub changed: bool,
}

/// One reason items are held, for the popup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeldReason {
    pub code: String,
    pub message: String,
    pub count: usize,
    /// When the oldest of them was held (ms since the epoch; 0 when unknown).
    pub oldest_ms: u64,
}

/// What the worker should do now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Next {
    /// POST `body` to `/v1/observations`, then report the outcome with these ids.
    Send { ids: Vec<u64>, body: String },
    /// Try again in `ms`.
    Wait { ms: u64 },
    /// Nothing queued.
    Idle,
    /// Items are queued but the user has to pair again.
    SignInRequired,
}

/// The result of one POST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Http {
        status: u16,
        body: String,
        retry_after_s: Option<u64>,
    },
    /// The request did not complete (relay down, connection refused, timeout).
    Network { message: String },
}

/// What an outcome changed, for the worker's side effects and local stats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Applied {
    /// The relay refused the token: delete it from storage.
    pub wipe_token: bool,
    /// Acknowledged (stored or duplicate) per surface.
    pub acknowledged: Vec<(String, usize)>,
    /// Rejected per surface, with the relay's error code.
    pub rejected: Vec<(String, String)>,
    /// When the worker should try again (None: no retry scheduled by this outcome).
    pub retry_in_ms: Option<u64>,
}

/// The result of an enqueue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Enqueued {
    /// Per offered observation: queued (true) or refused because the queue is full (false).
    pub accepted: Vec<bool>,
    pub overflowed: usize,
    pub near_full: bool,
}

impl QueueState {
    /// Items waiting to be delivered (held rejections excluded).
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Items counted toward the bound: the queue only (held items have their own, see [`QueueConfig`]).
    fn total_items(&self) -> usize {
        self.items.len()
    }

    fn total_bytes(&self) -> usize {
        self.items.iter().map(|i| i.bytes).sum::<usize>()
    }

    /// Everything but the items and the held items (the worker stores it as one small record).
    pub fn meta(&self) -> QueueState {
        QueueState {
            items: Vec::new(),
            held: Vec::new(),
            next_id: self.next_id,
            sent: self.sent,
            auth: self.auth,
            failures: self.failures,
            next_attempt_ms: self.next_attempt_ms,
            batch_limit: self.batch_limit,
            last_error: self.last_error.clone(),
            app_version: self.app_version.clone(),
            relay: self.relay.clone(),
            held_dropped: self.held_dropped,
        }
    }

    /// Held items grouped by the relay's error code, most frequent first.
    pub fn held_reasons(&self) -> Vec<HeldReason> {
        let mut out: Vec<HeldReason> = Vec::new();
        for item in &self.held {
            let (code, message) = item
                .error
                .as_ref()
                .map_or(("rejected", ""), |e| (e.code.as_str(), e.message.as_str()));
            let at = item.held_at_ms.unwrap_or(0);
            match out.iter_mut().find(|r| r.code == code) {
                Some(r) => {
                    r.count += 1;
                    r.oldest_ms = r.oldest_ms.min(at);
                }
                None => out.push(HeldReason {
                    code: code.to_owned(),
                    message: message.to_owned(),
                    count: 1,
                    oldest_ms: at,
                }),
            }
        }
        out.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.code.cmp(&b.code)));
        out
    }

    /// The user cleared the held items: all are dropped. Returns how many.
    pub fn clear_held(&mut self) -> usize {
        let n = self.held.len();
        self.held.clear();
        self.held_dropped += n as u64;
        n
    }

    /// Records the extension version and, when known, the relay now in use (`relay`: a [`relay_fingerprint`]);
    /// drops held items older than the configured time; gives each held item held under another version or
    /// relay its one retry (moved back to the end of the queue while the queue has room).
    pub fn maintain(
        &mut self,
        now_ms: u64,
        app_version: &str,
        relay: Option<&str>,
        cfg: &QueueConfig,
    ) -> Maintained {
        let mut out = Maintained::default();
        if self.app_version.as_deref() != Some(app_version) {
            self.app_version = Some(app_version.to_owned());
            out.changed = true;
        }
        if let Some(r) = relay
            && self.relay.as_deref() != Some(r)
        {
            self.relay = Some(r.to_owned());
            out.changed = true;
        }
        let mut bytes = self.total_bytes();
        let mut kept = Vec::with_capacity(self.held.len());
        for mut item in std::mem::take(&mut self.held) {
            let held_at = *item.held_at_ms.get_or_insert_with(|| {
                out.changed = true;
                now_ms
            });
            if now_ms.saturating_sub(held_at) >= cfg.held_ttl_ms {
                out.expired += 1;
                continue;
            }
            let new_version = item.held_version.as_deref() != Some(app_version);
            let new_relay = match (item.held_relay.as_deref(), relay) {
                (Some(then), Some(now)) => then != now,
                _ => false,
            };
            let fits = self.items.len() < cfg.max_items
                && bytes.saturating_add(item.bytes) <= cfg.max_bytes;
            if !item.retried && (new_version || new_relay) && fits {
                bytes += item.bytes;
                item.retried = true;
                // Back at the end of the queue: a new id keeps id order the queue's order.
                self.next_id += 1;
                item.id = self.next_id;
                item.error = None;
                item.held_at_ms = None;
                item.held_version = None;
                item.held_relay = None;
                self.items.push(item);
                out.requeued += 1;
            } else {
                kept.push(item);
            }
        }
        self.held = kept;
        self.held_dropped += out.expired as u64;
        out.changed |= out.expired > 0 || out.requeued > 0;
        if out.requeued > 0 {
            self.next_attempt_ms = self.next_attempt_ms.min(now_ms);
        }
        out
    }

    pub fn near_full(&self, cfg: &QueueConfig) -> bool {
        let pct = cfg.near_full_percent.min(100);
        self.total_items() * 100 >= cfg.max_items * pct
            || self.total_bytes() * 100 >= cfg.max_bytes * pct
    }

    /// Queue observations in order; any that do not fit the bound are refused (nothing queued is dropped).
    pub fn enqueue(&mut self, observations: Vec<Observation>, cfg: &QueueConfig) -> Enqueued {
        let mut accepted = Vec::with_capacity(observations.len());
        let mut bytes = self.total_bytes();
        for observation in observations {
            let Ok(json) = serde_json::to_string(&observation) else {
                accepted.push(false);
                continue;
            };
            let size = json.len();
            if self.total_items() >= cfg.max_items || bytes.saturating_add(size) > cfg.max_bytes {
                accepted.push(false);
                continue;
            }
            bytes += size;
            self.next_id += 1;
            self.items.push(QueuedItem {
                id: self.next_id,
                surface: observation.source_surface.clone(),
                conversation: Some(observation.conversation_id.clone()),
                bytes: size,
                attempts: 0,
                json,
                error: None,
                held_at_ms: None,
                held_version: None,
                held_relay: None,
                retried: false,
            });
            accepted.push(true);
        }
        let overflowed = accepted.iter().filter(|a| !**a).count();
        Enqueued {
            accepted,
            overflowed,
            near_full: self.near_full(cfg),
        }
    }

    /// Drops every queued and held item of `thread_id` (the user forgot the thread: nothing of it is sent again);
    /// returns how many.
    pub fn drop_thread(&mut self, thread_id: &str) -> usize {
        // Items hold their observation as compact JSON (serialised once, when queued), so the field reads exactly so.
        let field = format!("\"thread_id\":\"{thread_id}\"");
        let before = self.items.len() + self.held.len();
        self.items.retain(|i| !i.json.contains(&field));
        self.held.retain(|i| !i.json.contains(&field));
        before - self.items.len() - self.held.len()
    }

    /// What to do at `now_ms`.
    pub fn next_batch(&self, now_ms: u64, cfg: &QueueConfig) -> Next {
        if self.items.is_empty() {
            return Next::Idle;
        }
        if self.auth == Auth::SignInRequired {
            return Next::SignInRequired;
        }
        if now_ms < self.next_attempt_ms {
            return Next::Wait {
                ms: self.next_attempt_ms - now_ms,
            };
        }
        let limit = if self.batch_limit == 0 {
            cfg.batch_items
        } else {
            self.batch_limit.min(cfg.batch_items)
        }
        .max(1);
        let mut ids = Vec::new();
        let mut parts = Vec::new();
        let mut bytes = 0usize;
        for item in &self.items {
            if ids.len() >= limit || (!ids.is_empty() && bytes + item.bytes > cfg.batch_bytes) {
                break;
            }
            bytes += item.json.len() + 1;
            parts.push(item.json.as_str());
            ids.push(item.id);
        }
        if ids.is_empty() {
            return Next::Idle;
        }
        let body = format!("{{\"observations\":[{}]}}", parts.join(","));
        Next::Send { ids, body }
    }

    /// The user paired again: allow sending, right away.
    pub fn on_paired(&mut self) {
        self.auth = Auth::Ok;
        self.failures = 0;
        self.next_attempt_ms = 0;
        self.batch_limit = 0;
        self.last_error = None;
    }

    fn backoff(&mut self, now_ms: u64, cfg: &QueueConfig, at_least_ms: u64) -> u64 {
        self.failures = self.failures.saturating_add(1);
        let exp = self.failures.saturating_sub(1).min(30);
        let ms = cfg
            .base_backoff_ms
            .saturating_mul(1u64 << exp)
            .min(cfg.max_backoff_ms)
            .max(at_least_ms);
        self.next_attempt_ms = now_ms.saturating_add(ms);
        ms
    }

    fn error(&mut self, code: &str, message: impl Into<String>, now_ms: u64) {
        self.last_error = Some(LastError {
            code: code.to_owned(),
            message: message.into(),
            at_ms: now_ms,
        });
    }

    /// Move the items with these ids to the held list with this error; the oldest held items make room when the
    /// held list is over its bound.
    fn hold(
        &mut self,
        ids: &[u64],
        error: &ApiError,
        now_ms: u64,
        cfg: &QueueConfig,
        applied: &mut Applied,
    ) {
        let (held, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.items)
            .into_iter()
            .partition(|i| ids.contains(&i.id));
        self.items = kept;
        for mut item in held {
            applied
                .rejected
                .push((item.surface.clone(), error.code.clone()));
            item.error = Some(error.clone());
            item.held_at_ms = Some(now_ms);
            item.held_version = self.app_version.clone();
            item.held_relay = self.relay.clone();
            self.held.push(item);
        }
        let mut bytes: usize = self.held.iter().map(|h| h.bytes).sum();
        let mut cut = 0;
        while cut < self.held.len()
            && (self.held.len() - cut > cfg.max_held_items || bytes > cfg.max_held_bytes)
        {
            bytes -= self.held[cut].bytes;
            cut += 1;
        }
        self.held.drain(..cut);
        self.held_dropped += cut as u64;
    }

    /// Apply the outcome of POSTing the batch made of `ids`.
    pub fn on_outcome(
        &mut self,
        ids: &[u64],
        outcome: &Outcome,
        now_ms: u64,
        cfg: &QueueConfig,
    ) -> Applied {
        let mut applied = Applied::default();
        for item in self.items.iter_mut().filter(|i| ids.contains(&i.id)) {
            item.attempts = item.attempts.saturating_add(1);
        }
        let (status, body, retry_after_s) = match outcome {
            Outcome::Network { message } => {
                self.error("relay_unreachable", message.clone(), now_ms);
                applied.retry_in_ms = Some(self.backoff(now_ms, cfg, 0));
                return applied;
            }
            Outcome::Http {
                status,
                body,
                retry_after_s,
            } => (*status, body.as_str(), *retry_after_s),
        };
        let api_error = serde_json::from_str::<ApiError>(body).ok();
        let code = |fallback: &str| {
            api_error
                .as_ref()
                .map_or(fallback.to_owned(), |e| e.code.clone())
        };
        let message = |fallback: &str| {
            api_error
                .as_ref()
                .map_or(fallback.to_owned(), |e| e.message.clone())
        };
        match status {
            200 => match serde_json::from_str::<BatchResponse>(body) {
                Ok(resp) => self.apply_batch_response(ids, &resp, now_ms, cfg, &mut applied),
                Err(e) => {
                    self.error(
                        "bad_response",
                        format!("relay answered 200 with an unreadable body: {e}"),
                        now_ms,
                    );
                    applied.retry_in_ms = Some(self.backoff(now_ms, cfg, 0));
                }
            },
            401 => {
                self.auth = Auth::SignInRequired;
                applied.wipe_token = true;
                self.error(
                    &code("unauthorized"),
                    message("the relay no longer accepts this device's token"),
                    now_ms,
                );
            }
            413 | 400 if ids.len() > 1 => {
                // Too big (or unreadable as a whole): send smaller batches, right away.
                self.batch_limit = (ids.len() / 2).max(1);
                self.error(&code("batch_too_large"), message("batch refused"), now_ms);
                self.next_attempt_ms = now_ms;
                applied.retry_in_ms = Some(0);
            }
            413 | 400 => {
                let err = api_error.clone().unwrap_or_else(|| {
                    ApiError::new(
                        "batch_too_large",
                        "the relay refused this item",
                        "see the relay's limits",
                    )
                });
                self.error(&err.code, err.message.clone(), now_ms);
                self.hold(ids, &err, now_ms, cfg, &mut applied);
                self.next_attempt_ms = now_ms;
                applied.retry_in_ms = Some(0);
            }
            429 => {
                let at_least = retry_after_s.unwrap_or(0).saturating_mul(1000);
                self.error(
                    &code("rate_limited"),
                    message("the relay asked to slow down"),
                    now_ms,
                );
                applied.retry_in_ms = Some(self.backoff(now_ms, cfg, at_least));
            }
            _ => {
                self.error(
                    &code("relay_error"),
                    message(&format!("relay answered HTTP {status}")),
                    now_ms,
                );
                applied.retry_in_ms = Some(self.backoff(now_ms, cfg, 0));
            }
        }
        applied
    }

    fn apply_batch_response(
        &mut self,
        ids: &[u64],
        resp: &BatchResponse,
        now_ms: u64,
        cfg: &QueueConfig,
        applied: &mut Applied,
    ) {
        let mut done: Vec<u64> = Vec::new();
        let mut rejected: Vec<(u64, ApiError)> = Vec::new();
        for r in &resp.results {
            let Some(&id) = ids.get(r.index) else {
                continue;
            };
            match r.status {
                ItemStatus::Stored | ItemStatus::Duplicate => done.push(id),
                ItemStatus::Rejected => rejected.push((
                    id,
                    r.error.clone().unwrap_or_else(|| {
                        ApiError::new("rejected", "the relay rejected this item", "")
                    }),
                )),
            }
        }
        let mut acked: Vec<(String, usize)> = Vec::new();
        self.items.retain(|item| {
            if !done.contains(&item.id) {
                return true;
            }
            match acked.iter_mut().find(|(s, _)| *s == item.surface) {
                Some((_, n)) => *n += 1,
                None => acked.push((item.surface.clone(), 1)),
            }
            false
        });
        let acked_count: usize = acked.iter().map(|(_, n)| n).sum();
        self.sent += acked_count as u64;
        applied.acknowledged = acked;
        for (id, err) in &rejected {
            self.hold(&[*id], err, now_ms, cfg, applied);
        }
        self.failures = 0;
        self.next_attempt_ms = now_ms;
        match rejected.first() {
            Some((_, err)) => self.error(&err.code, err.message.clone(), now_ms),
            None => self.last_error = None,
        }
        if !self.items.is_empty() {
            applied.retry_in_ms = Some(0);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::wire::{ClientInfo, ItemResult, Role, build_observation};
    use proptest::prelude::*;

    fn obs(n: usize) -> Observation {
        build_observation(
            "browser-ext:chatgpt",
            "conv",
            Role::User,
            &format!("turn {n}"),
            None,
            None,
            "2026-11-22T10:00:00Z",
            ClientInfo {
                app_version: "t".into(),
                device_id: "d".into(),
            },
        )
    }

    fn send(q: &QueueState, now: u64, cfg: &QueueConfig) -> (Vec<u64>, String) {
        match q.next_batch(now, cfg) {
            Next::Send { ids, body } => (ids, body),
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    fn response(statuses: &[ItemStatus]) -> Outcome {
        let results = statuses
            .iter()
            .enumerate()
            .map(|(index, status)| ItemResult {
                index,
                status: *status,
                message_id: None,
                thread_id: None,
                error: (*status == ItemStatus::Rejected)
                    .then(|| ApiError::new("hash_mismatch", "m", "h")),
            })
            .collect();
        let count = |s| statuses.iter().filter(|x| **x == s).count();
        let resp = BatchResponse {
            stored: count(ItemStatus::Stored),
            duplicate: count(ItemStatus::Duplicate),
            rejected: count(ItemStatus::Rejected),
            results,
        };
        Outcome::Http {
            status: 200,
            body: serde_json::to_string(&resp).unwrap(),
            retry_after_s: None,
        }
    }

    #[test]
    fn body_is_a_valid_batch() {
        let cfg = QueueConfig::normal();
        let mut q = QueueState::default();
        q.enqueue(vec![obs(1), obs(2)], &cfg);
        let (ids, body) = send(&q, 0, &cfg);
        assert_eq!(ids, vec![1, 2]);
        let batch: crate::wire::ObservationBatch = serde_json::from_str(&body).unwrap();
        assert_eq!(batch.observations.len(), 2);
        for o in &batch.observations {
            crate::wire::parse_observation(o).unwrap();
        }
    }

    #[test]
    fn only_stored_and_duplicate_leave_rejected_are_held() {
        let cfg = QueueConfig::normal();
        let mut q = QueueState::default();
        q.enqueue((0..4).map(obs).collect(), &cfg);
        let (ids, _) = send(&q, 0, &cfg);
        // The relay answered for the first three only.
        let out = response(&[
            ItemStatus::Stored,
            ItemStatus::Duplicate,
            ItemStatus::Rejected,
        ]);
        let applied = q.on_outcome(&ids, &out, 10, &cfg);
        assert_eq!(
            applied.acknowledged,
            vec![("browser-ext:chatgpt".to_owned(), 2)]
        );
        assert_eq!(q.sent, 2);
        assert_eq!(q.items.len(), 1);
        assert_eq!(q.items[0].id, 4);
        assert_eq!(q.held.len(), 1);
        assert_eq!(q.held[0].id, 3);
        assert_eq!(applied.retry_in_ms, Some(0));
    }

    #[test]
    fn backoff_grows_and_is_capped_then_resets() {
        let cfg = QueueConfig::fast();
        let mut q = QueueState::default();
        q.enqueue(vec![obs(1)], &cfg);
        let mut now = 0;
        let mut waits = Vec::new();
        for _ in 0..6 {
            let (ids, _) = send(&q, now, &cfg);
            let a = q.on_outcome(
                &ids,
                &Outcome::Network {
                    message: "refused".into(),
                },
                now,
                &cfg,
            );
            let w = a.retry_in_ms.unwrap();
            assert_eq!(q.next_batch(now, &cfg), Next::Wait { ms: w });
            waits.push(w);
            now += w;
        }
        assert_eq!(waits, vec![200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(q.items.len(), 1);
        let (ids, _) = send(&q, now, &cfg);
        q.on_outcome(&ids, &response(&[ItemStatus::Stored]), now, &cfg);
        assert!(q.items.is_empty());
        assert_eq!(q.failures, 0);
        assert_eq!(q.next_batch(now, &cfg), Next::Idle);
    }

    #[test]
    fn unauthorized_wipes_token_keeps_items_and_stops() {
        let cfg = QueueConfig::normal();
        let mut q = QueueState::default();
        q.enqueue(vec![obs(1), obs(2)], &cfg);
        let (ids, _) = send(&q, 0, &cfg);
        let body = r#"{"code":"unauthorized","message":"token revoked","hint":"pair again"}"#;
        let a = q.on_outcome(
            &ids,
            &Outcome::Http {
                status: 401,
                body: body.into(),
                retry_after_s: None,
            },
            5,
            &cfg,
        );
        assert!(a.wipe_token);
        assert_eq!(a.retry_in_ms, None);
        assert_eq!(q.items.len(), 2);
        assert_eq!(q.next_batch(1_000_000, &cfg), Next::SignInRequired);
        assert_eq!(q.last_error.as_ref().unwrap().code, "unauthorized");
        q.on_paired();
        assert!(matches!(q.next_batch(6, &cfg), Next::Send { .. }));
    }

    #[test]
    fn too_large_halves_then_holds_a_single_item() {
        let cfg = QueueConfig::normal();
        let mut q = QueueState::default();
        q.enqueue((0..8).map(obs).collect(), &cfg);
        let big = Outcome::Http {
            status: 413,
            body: String::new(),
            retry_after_s: None,
        };
        let (ids, _) = send(&q, 0, &cfg);
        assert_eq!(ids.len(), 8);
        q.on_outcome(&ids, &big, 0, &cfg);
        let (ids, _) = send(&q, 0, &cfg);
        assert_eq!(ids.len(), 4);
        q.on_outcome(&ids, &big, 0, &cfg);
        q.on_outcome(&send(&q, 0, &cfg).0, &big, 0, &cfg);
        let (ids, _) = send(&q, 0, &cfg);
        assert_eq!(ids.len(), 1);
        q.on_outcome(&ids, &big, 0, &cfg);
        assert_eq!(q.held.len(), 1);
        assert_eq!(q.items.len(), 7);
    }

    #[test]
    fn rate_limit_honours_retry_after() {
        let cfg = QueueConfig::fast();
        let mut q = QueueState::default();
        q.enqueue(vec![obs(1)], &cfg);
        let (ids, _) = send(&q, 0, &cfg);
        let a = q.on_outcome(
            &ids,
            &Outcome::Http {
                status: 429,
                body: String::new(),
                retry_after_s: Some(3),
            },
            0,
            &cfg,
        );
        assert_eq!(a.retry_in_ms, Some(3000));
    }

    #[test]
    fn bound_refuses_new_items_and_warns() {
        let cfg = QueueConfig {
            max_items: 5,
            ..QueueConfig::normal()
        };
        let mut q = QueueState::default();
        let e = q.enqueue((0..3).map(obs).collect(), &cfg);
        assert!(!e.near_full);
        let e = q.enqueue((3..7).map(obs).collect(), &cfg);
        assert_eq!(e.accepted, vec![true, true, false, false]);
        assert_eq!(e.overflowed, 2);
        assert!(e.near_full);
        assert_eq!(q.len(), 5);
    }

    #[test]
    fn state_roundtrips_through_json() {
        let cfg = QueueConfig::normal();
        let mut q = QueueState::default();
        q.enqueue((0..3).map(obs).collect(), &cfg);
        let (ids, _) = send(&q, 0, &cfg);
        q.on_outcome(
            &ids,
            &Outcome::Network {
                message: "x".into(),
            },
            0,
            &cfg,
        );
        let back: QueueState = serde_json::from_str(&serde_json::to_string(&q).unwrap()).unwrap();
        assert_eq!(back, q);
        let empty: QueueState = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, QueueState::default());
    }

    fn reject_all(q: &mut QueueState, now: u64, cfg: &QueueConfig) -> usize {
        let mut n = 0;
        while let Next::Send { ids, .. } = q.next_batch(now, cfg) {
            let st = vec![ItemStatus::Rejected; ids.len()];
            q.on_outcome(&ids, &response(&st), now, cfg);
            n += ids.len();
        }
        n
    }

    /// Regression (hardening issue, item 9): rejected turns counted toward the queue's bound forever, so enough
    /// rejections stopped capture for good.
    #[test]
    fn held_turns_never_block_new_capture() {
        let cfg = QueueConfig {
            max_items: 5,
            max_held_items: 8,
            ..QueueConfig::normal()
        };
        let mut q = QueueState::default();
        q.maintain(0, "1.0", None, &cfg);
        let mut n = 0;
        for round in 0..4 {
            let e = q.enqueue((n..n + 5).map(obs).collect(), &cfg);
            n += 5;
            assert_eq!(e.accepted, vec![true; 5], "round {round}: capture refused");
            assert_eq!(reject_all(&mut q, 10, &cfg), 5);
            assert!(!q.near_full(&cfg), "held items do not fill the queue");
        }
        // The held list keeps its own bound: the oldest rejections made room for the newest.
        assert_eq!(q.held.len(), 8);
        assert_eq!(q.held_dropped, 12);
        assert_eq!(q.held.first().unwrap().id, 13);
        assert_eq!(
            q.held_reasons(),
            vec![HeldReason {
                code: "hash_mismatch".into(),
                message: "m".into(),
                count: 8,
                oldest_ms: 10
            }]
        );
    }

    #[test]
    fn held_turns_expire_after_the_configured_time() {
        let cfg = QueueConfig::normal();
        let mut q = QueueState::default();
        q.maintain(0, "1.0", None, &cfg);
        q.enqueue(vec![obs(1)], &cfg);
        reject_all(&mut q, 1_000, &cfg);
        let day = 24 * 3_600_000;
        let m = q.maintain(1_000 + 7 * day - 1, "1.0", None, &cfg);
        assert_eq!((m.expired, m.requeued, q.held.len()), (0, 0, 1));
        let m = q.maintain(1_000 + 7 * day, "1.0", None, &cfg);
        assert_eq!((m.expired, q.held.len(), q.held_dropped), (1, 0, 1));
        assert!(m.changed);
        // An item held by a version that did not date it is dated now, and expires a week later.
        q.held.push(QueuedItem {
            id: 99,
            surface: "s".into(),
            conversation: None,
            bytes: 1,
            attempts: 1,
            json: "{}".into(),
            error: None,
            held_at_ms: None,
            held_version: Some("1.0".into()),
            held_relay: None,
            retried: true,
        });
        q.maintain(50 * day, "1.0", None, &cfg);
        assert_eq!(q.held[0].held_at_ms, Some(50 * day));
        q.maintain(57 * day, "1.0", None, &cfg);
        assert!(q.held.is_empty());
    }

    #[test]
    fn held_turns_are_retried_once_after_a_new_version_or_relay() {
        let cfg = QueueConfig::normal();
        let relay_a = relay_fingerprint("http://r", r#"{"ok": true, "version": "0.1.0"}"#).unwrap();
        let mut q = QueueState::default();
        q.maintain(0, "1.0", Some(&relay_a), &cfg);
        q.enqueue(vec![obs(1), obs(2)], &cfg);
        reject_all(&mut q, 5, &cfg);
        // Same version, same relay: nothing to retry.
        let m = q.maintain(6, "1.0", Some(&relay_a), &cfg);
        assert_eq!((m.requeued, m.changed), (0, false));
        assert!(matches!(q.next_batch(6, &cfg), Next::Idle));
        // A new extension version: each is sent once more...
        let m = q.maintain(7, "1.1", Some(&relay_a), &cfg);
        assert_eq!(m.requeued, 2);
        assert!(q.held.is_empty());
        let (ids, _) = send(&q, 7, &cfg);
        // Back at the end of the queue, under new ids (id order is queue order).
        assert_eq!(ids, vec![3, 4]);
        // ...and one accepted, the other rejected again: that one stays held, whatever changes next.
        q.on_outcome(
            &ids,
            &response(&[ItemStatus::Stored, ItemStatus::Rejected]),
            8,
            &cfg,
        );
        assert_eq!((q.sent, q.held.len()), (1, 1));
        let relay_b = relay_fingerprint(
            "http://r",
            r#"{"version": "0.1.0", "limits": {"max_content_bytes": 1}}"#,
        )
        .unwrap();
        assert_eq!(q.maintain(9, "1.2", Some(&relay_b), &cfg).requeued, 0);
        assert_eq!(q.held.len(), 1);

        // A relay that changed (its limits here) retries what it rejected, once.
        let mut q = QueueState::default();
        q.maintain(0, "1.0", Some(&relay_a), &cfg);
        q.enqueue(vec![obs(3)], &cfg);
        reject_all(&mut q, 5, &cfg);
        assert_eq!(
            q.maintain(6, "1.0", None, &cfg).requeued,
            0,
            "relay unknown"
        );
        assert_eq!(q.maintain(6, "1.0", Some(&relay_b), &cfg).requeued, 1);
        // Fields other than version and limits do not count as a change.
        assert_eq!(
            relay_fingerprint("http://r", r#"{"version": "0.1.0", "ok": true, "now": 5}"#),
            Some(relay_a)
        );
        assert_eq!(relay_fingerprint("http://r", "<html>"), None);
    }

    #[test]
    fn the_user_clears_held_turns() {
        let cfg = QueueConfig::normal();
        let mut q = QueueState::default();
        q.enqueue(vec![obs(1), obs(2), obs(3)], &cfg);
        let (ids, _) = send(&q, 0, &cfg);
        q.on_outcome(
            &ids,
            &response(&[
                ItemStatus::Rejected,
                ItemStatus::Stored,
                ItemStatus::Rejected,
            ]),
            0,
            &cfg,
        );
        assert_eq!(q.clear_held(), 2);
        assert!(q.held.is_empty() && q.held_reasons().is_empty());
        assert_eq!((q.held_dropped, q.sent), (2, 1));
        assert_eq!(q.clear_held(), 0);
    }

    #[derive(Debug, Clone)]
    enum Step {
        Enqueue(usize),
        Network,
        Status(u16),
        Answer(Vec<u8>),
        Pair,
        Tick(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (1usize..5).prop_map(Step::Enqueue),
            Just(Step::Network),
            prop_oneof![Just(401u16), Just(413), Just(429), Just(500), Just(503)]
                .prop_map(Step::Status),
            proptest::collection::vec(0u8..3, 0..6).prop_map(Step::Answer),
            Just(Step::Pair),
            (0u64..5000).prop_map(Step::Tick),
        ]
    }

    proptest! {
        #[test]
        fn only_acknowledged_items_ever_leave(steps in proptest::collection::vec(step(), 1..60)) {
            let cfg = QueueConfig { max_items: 12, batch_items: 4, max_held_items: 10_000, ..QueueConfig::fast() };
            let mut q = QueueState::default();
            let mut now = 0u64;
            let mut n = 0usize;
            let mut acked: u64 = 0;
            for s in steps {
                let before: Vec<u64> = q.items.iter().map(|i| i.id).chain(q.held.iter().map(|h| h.id)).collect();
                let mut removed_ok: Vec<u64> = Vec::new();
                match s {
                    Step::Enqueue(k) => { q.enqueue((n..n + k).map(obs).collect(), &cfg); n += k; }
                    Step::Pair => q.on_paired(),
                    Step::Tick(ms) => now += ms,
                    other => {
                        let Next::Send { ids, .. } = q.next_batch(now, &cfg) else { continue };
                        let outcome = match other {
                            Step::Network => Outcome::Network { message: "down".into() },
                            Step::Status(st) => Outcome::Http { status: st, body: String::new(), retry_after_s: None },
                            Step::Answer(codes) => {
                                let st: Vec<ItemStatus> = codes.iter().take(ids.len()).map(|c| match c {
                                    0 => ItemStatus::Stored, 1 => ItemStatus::Duplicate, _ => ItemStatus::Rejected,
                                }).collect();
                                for (i, s) in st.iter().enumerate() {
                                    if *s != ItemStatus::Rejected { removed_ok.push(ids[i]); }
                                }
                                response(&st)
                            }
                            _ => unreachable!(),
                        };
                        let a = q.on_outcome(&ids, &outcome, now, &cfg);
                        acked += a.acknowledged.iter().map(|(_, c)| *c as u64).sum::<u64>();
                        if matches!(outcome, Outcome::Http { status: 401, .. }) {
                            prop_assert!(a.wipe_token);
                            let blocked = !matches!(q.next_batch(now + 10_000_000, &cfg), Next::Send { .. });
                            prop_assert!(blocked, "sent after a 401");
                        }
                    }
                }
                let after: Vec<u64> = q.items.iter().map(|i| i.id).chain(q.held.iter().map(|h| h.id)).collect();
                for id in &before {
                    prop_assert!(after.contains(id) || removed_ok.contains(id), "item {} vanished", id);
                }
                prop_assert!(q.items.len() <= cfg.max_items);
                prop_assert_eq!(q.sent, acked);
            }
        }
    }
}
