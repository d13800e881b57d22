//! `personkit-sync`: the relay-to-relay sync client (docs/sync.md). [`pair`] redeems a peer's one-time code
//! (`personkit pair --sync` on the peer) for a token; [`sync_peer`] runs one round with a peer: pull its pages after
//! this relay's cursor and apply each in one transaction (`personkit_store::sync::apply_page`, which moves the
//! cursor with the commit), then push this relay's own pages after the peer's acknowledged cursor. The relay that
//! ran `sync add` does both directions, so a peer that cannot reach it (a laptop behind NAT) still gets its turns.
//!
//! **Architecture invariant:** peers are reached over https, or plain http to a loopback address only
//! ([`check_url`]); tokens never appear in logs or errors; a peer's answer is read with a size limit and each item
//! is checked by the store before anything is written.

use std::time::Duration;

use personkit_store::Connection;
use personkit_store::sync::{self, Applied, Outgoing, Page, Source, SyncToken};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// Largest page body read from a peer.
pub const MAX_PAGE_BODY: u64 = 64 * 1024 * 1024;
/// Entries asked for per page.
pub const PAGE_ITEMS: usize = sync::DEFAULT_PAGE_ITEMS;
/// Most pages one round pulls or pushes (a round that has more stops and the next round goes on).
const MAX_PAGES_PER_ROUND: usize = 100_000;

/// A sync failure, in the `{code, message, hint}` shape of every personkit error.
#[derive(Debug, Clone, thiserror::Error, Serialize)]
#[error("{message} (hint: {hint})")]
pub struct SyncError {
    pub code: String,
    pub message: String,
    pub hint: String,
}

impl SyncError {
    pub fn new(code: &str, message: impl Into<String>, hint: impl Into<String>) -> SyncError {
        SyncError {
            code: code.to_owned(),
            message: message.into(),
            hint: hint.into(),
        }
    }
}

impl From<personkit_store::DbError> for SyncError {
    fn from(e: personkit_store::DbError) -> Self {
        SyncError::new(
            "storage",
            format!("the corpus failed: {e}"),
            "check the disk and run `personkit corpus health`; the round resumes from the last committed page",
        )
    }
}

/// A peer's base URL, checked: `https://…`, or `http://` to a loopback host only. Returned without a trailing
/// slash.
pub fn check_url(url: &str) -> Result<String, SyncError> {
    let url = url.trim().trim_end_matches('/');
    let bad = || {
        SyncError::new(
            "invalid_url",
            format!("{:?} is not a relay URL", personkit_shared_quote(url)),
            "give the peer's base URL, e.g. https://relay.example.com or http://127.0.0.1:8787",
        )
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(bad)?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() || authority.contains('@') || url.contains(['?', '#']) {
        return Err(bad());
    }
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        authority.split(':').next().unwrap_or("")
    };
    match scheme.to_ascii_lowercase().as_str() {
        "https" => Ok(url.to_owned()),
        "http" if is_loopback(host) => Ok(url.to_owned()),
        "http" => Err(SyncError::new(
            "plain_http_refused",
            format!(
                "refusing plain http to {host}: sync tokens and your conversations would cross the network in clear text"
            ),
            "serve the peer over TLS (`personkit serve --tls-cert/--tls-key`, or a TLS proxy with --public-url) and use its https:// URL",
        )),
        _ => Err(bad()),
    }
}

fn personkit_shared_quote(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(200).collect()
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host == "::1"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| a.is_loopback())
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(120)))
        .timeout_connect(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .into()
}

/// An error answer of a peer (`{code, message, hint}`), or a made-up one for a body that is not that shape.
fn peer_error(status: u16, body: &[u8]) -> SyncError {
    #[derive(Deserialize)]
    struct E {
        code: String,
        message: String,
        #[serde(default)]
        hint: String,
    }
    match serde_json::from_slice::<E>(body) {
        Ok(e) => SyncError {
            code: personkit_shared_quote(&e.code),
            message: format!(
                "the peer answered {status}: {}",
                personkit_shared_quote(&e.message)
            ),
            hint: personkit_shared_quote(&e.hint),
        },
        Err(_) => SyncError::new(
            "peer_error",
            format!("the peer answered HTTP {status}"),
            "check that the URL is a personkit relay and that it is running",
        ),
    }
}

fn unreachable(url: &str, e: &ureq::Error) -> SyncError {
    SyncError::new(
        "peer_unreachable",
        format!("cannot reach {url}: {e}"),
        "check that the peer relay runs (`personkit serve`) and that this machine can reach its URL",
    )
}

fn read_body(resp: &mut ureq::http::Response<ureq::Body>, url: &str) -> Result<Vec<u8>, SyncError> {
    resp.body_mut()
        .with_config()
        .limit(MAX_PAGE_BODY)
        .read_to_vec()
        .map_err(|e| {
            SyncError::new(
                "bad_page",
                format!("cannot read the answer of {url}: {e}"),
                "the peer sent more than 64 MB or broke off; try again, and update both relays to the same version",
            )
        })
}

/// What pairing gave: the peer's relay id and name, and the token to call it with.
#[derive(Debug, Clone)]
pub struct Paired {
    pub peer_id: String,
    pub name: String,
    pub token: SyncToken,
}

/// Redeem the peer's one-time sync code: the peer records this relay (`relay_id`, `name`) and answers a token.
pub fn pair(url: &str, code: &str, relay_id: &str, name: &str) -> Result<Paired, SyncError> {
    let base = check_url(url)?;
    let target = format!("{base}/v1/sync/pair");
    let body = serde_json::json!({"code": code, "relay_id": relay_id, "name": name});
    let mut resp = agent()
        .post(&target)
        .header("Content-Type", "application/json")
        .send(body.to_string().as_bytes())
        .map_err(|e| unreachable(&base, &e))?;
    let status = resp.status().as_u16();
    let bytes = read_body(&mut resp, &base)?;
    if status != 200 {
        return Err(peer_error(status, &bytes));
    }
    #[derive(Deserialize)]
    struct Answer {
        token: String,
        relay_id: String,
        name: String,
    }
    let a: Answer = serde_json::from_slice(&bytes).map_err(|_| {
        SyncError::new(
            "bad_answer",
            "the peer's pairing answer is not {token, relay_id, name}",
            "update both relays to the same personkit version",
        )
    })?;
    if !a.token.starts_with(sync::SYNC_TOKEN_PREFIX) || a.relay_id.is_empty() {
        return Err(SyncError::new(
            "bad_answer",
            "the peer's pairing answer holds no sync token",
            "update both relays to the same personkit version",
        ));
    }
    if a.relay_id == relay_id {
        return Err(SyncError::new(
            "same_relay",
            "that URL is this relay itself",
            "give the URL of the other relay",
        ));
    }
    Ok(Paired {
        peer_id: a.relay_id,
        name: a.name,
        token: SyncToken::new(a.token),
    })
}

/// Where a round is, for progress bars.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Progress {
    /// `pull` or `push`.
    pub phase: &'static str,
    /// Entries handled so far in this phase.
    pub done: u64,
    /// Entries handled plus those still to go, as last known.
    pub total: u64,
}

/// What one round with one peer did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub peer_id: String,
    pub name: String,
    pub pulled_pages: u64,
    pub pulled: Applied,
    pub pushed_pages: u64,
    pub pushed: Applied,
}

/// One round with `peer`: pull, then push. `now` gives the time of each commit. A failure keeps what was
/// committed (cursors included) and is recorded as the peer's last error.
pub fn sync_peer(
    conn: &mut Connection,
    peer: &Outgoing,
    now: &dyn Fn() -> OffsetDateTime,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report, SyncError> {
    let result = round(conn, peer, now, progress);
    let error = result
        .as_ref()
        .err()
        .map(|e| format!("{}: {}", e.code, e.message));
    sync::record_result(conn, &peer.peer.id, error.as_deref(), now())?;
    result
}

fn round(
    conn: &mut Connection,
    out: &Outgoing,
    now: &dyn Fn() -> OffsetDateTime,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report, SyncError> {
    let base = check_url(out.peer.url.as_deref().unwrap_or_default())?;
    let agent = agent();
    let auth = format!("Bearer {}", out.token.expose());
    let mut report = Report {
        peer_id: out.peer.id.clone(),
        name: out.peer.name.clone(),
        ..Report::default()
    };
    // Pull.
    let mut cursor = out.peer.pull_cursor;
    let mut done = 0u64;
    for _ in 0..MAX_PAGES_PER_ROUND {
        let target = format!("{base}/v1/sync/pages?after={cursor}&limit={PAGE_ITEMS}");
        let mut resp = agent
            .get(&target)
            .header("Authorization", &auth)
            .call()
            .map_err(|e| unreachable(&base, &e))?;
        let status = resp.status().as_u16();
        let bytes = read_body(&mut resp, &base)?;
        if status != 200 {
            return Err(peer_error(status, &bytes));
        }
        let page: Page = serde_json::from_slice(&bytes).map_err(|e| {
            SyncError::new(
                "bad_page",
                format!(
                    "the peer's page does not parse: {}",
                    personkit_shared_quote(&e.to_string())
                ),
                "update both relays to the same personkit version; nothing of this page was stored",
            )
        })?;
        if page.relay_id != out.peer.id {
            return Err(SyncError::new(
                "wrong_peer",
                "the relay at that URL is not the peer that was paired",
                "run `personkit sync revoke` for this peer and `personkit sync add` with a fresh code",
            ));
        }
        if page.next < cursor || (page.next == cursor && page.more) {
            return Err(SyncError::new(
                "bad_page",
                "the peer's page does not move its cursor forward",
                "update both relays to the same personkit version",
            ));
        }
        let n = page.items.len() as u64;
        let applied = sync::apply_page(
            conn,
            &page.items,
            Source {
                peer_id: &out.peer.id,
                pull_cursor: Some(page.next),
            },
            now(),
        )?;
        if !applied.rejected.is_empty() {
            tracing::warn!(peer = %out.peer.id, rejected = applied.rejected.len(), "peer sent items that were rejected");
        }
        report.pulled.add(applied);
        report.pulled_pages += 1;
        done += n;
        cursor = page.next;
        progress(Progress {
            phase: "pull",
            done,
            total: done + page.remaining.max(0) as u64,
        });
        if !page.more {
            break;
        }
    }
    // Push.
    let mut cursor = sync::push_cursor(conn, &out.peer.id)?;
    let mut done = 0u64;
    for _ in 0..MAX_PAGES_PER_ROUND {
        let page = sync::page(conn, cursor, PAGE_ITEMS)?;
        if page.next == cursor {
            break;
        }
        let target = format!("{base}/v1/sync/pages");
        let body = serde_json::to_vec(&page).map_err(|e| {
            SyncError::new(
                "internal",
                format!("cannot write a page: {e}"),
                "report this",
            )
        })?;
        let mut resp = agent
            .post(&target)
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .send(&body[..])
            .map_err(|e| unreachable(&base, &e))?;
        let status = resp.status().as_u16();
        let bytes = read_body(&mut resp, &base)?;
        if status != 200 {
            return Err(peer_error(status, &bytes));
        }
        let applied: Applied = serde_json::from_slice::<AppliedAnswer>(&bytes)
            .map(AppliedAnswer::into_applied)
            .map_err(|_| {
                SyncError::new(
                    "bad_answer",
                    "the peer's answer to a pushed page does not parse",
                    "update both relays to the same personkit version",
                )
            })?;
        sync::set_push_cursor(conn, &out.peer.id, page.next)?;
        report.pushed.add(applied);
        report.pushed_pages += 1;
        done += page.items.len() as u64;
        cursor = page.next;
        progress(Progress {
            phase: "push",
            done,
            total: done + page.remaining.max(0) as u64,
        });
        if !page.more {
            break;
        }
    }
    Ok(report)
}

/// The counts a peer answers for a pushed page (its rejections by code only).
#[derive(Debug, Deserialize)]
struct AppliedAnswer {
    stored: u64,
    unchanged: u64,
    forgotten: u64,
    removed: u64,
    #[serde(default)]
    rejected: Vec<serde_json::Value>,
}

impl AppliedAnswer {
    fn into_applied(self) -> Applied {
        Applied {
            stored: self.stored,
            unchanged: self.unchanged,
            forgotten: self.forgotten,
            removed: self.removed,
            rejected: self
                .rejected
                .iter()
                .enumerate()
                .map(|(i, v)| sync::Rejection {
                    index: v
                        .get("index")
                        .and_then(serde_json::Value::as_u64)
                        .unwrap_or(i as u64) as usize,
                    code: "rejected_by_peer",
                    message: v
                        .get("code")
                        .and_then(serde_json::Value::as_str)
                        .map(personkit_shared_quote)
                        .unwrap_or_default(),
                })
                .collect(),
        }
    }
}

/// One round with every peer this relay calls; a peer that fails does not stop the others.
pub fn sync_all(
    conn: &mut Connection,
    now: &dyn Fn() -> OffsetDateTime,
    progress: &mut dyn FnMut(&str, Progress),
) -> Result<Vec<Result<Report, SyncError>>, SyncError> {
    let peers = sync::outgoing(conn)?;
    let mut out = Vec::with_capacity(peers.len());
    for p in &peers {
        let name = p.peer.name.clone();
        out.push(sync_peer(conn, p, now, &mut |pr| progress(&name, pr)));
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_only_to_loopback() {
        assert!(check_url("http://127.0.0.1:8787/").is_ok());
        assert!(check_url("http://localhost:1").is_ok());
        assert!(check_url("http://[::1]:9").is_ok());
        assert!(check_url("https://relay.example.com").is_ok());
        let e = check_url("http://relay.example.com").unwrap_err();
        assert_eq!(e.code, "plain_http_refused");
        assert_eq!(
            check_url("http://192.168.1.2:8787").unwrap_err().code,
            "plain_http_refused"
        );
        assert_eq!(
            check_url("http://127.0.0.1.evil.com").unwrap_err().code,
            "plain_http_refused"
        );
        assert_eq!(
            check_url("http://user@127.0.0.1").unwrap_err().code,
            "invalid_url"
        );
        assert_eq!(check_url("ftp://x").unwrap_err().code, "invalid_url");
    }
}
