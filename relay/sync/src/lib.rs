//! `personkit-sync`: the relay-to-relay sync client (docs/sync.md). [`pair`] redeems a peer's one-time code
//! (`personkit pair --sync` on the peer) for a token; [`sync_peer`] runs one round with a peer: pull its pages after
//! this relay's cursor and apply each in one transaction ([`apply_page`], which moves the cursor with the
//! commit), then push this relay's own pages after the peer's acknowledged cursor. The relay that
//! ran `sync add` does both directions, so a peer that cannot reach it (a laptop behind NAT) still gets its turns.
//!
//! **Architecture invariant:** peers are reached over https, or plain http to a loopback address only
//! ([`check_url`]); tokens never appear in logs or errors; a peer's answer is read with a size limit and each item
//! is checked ([`pages`]) before anything is written.

use std::time::{Duration, Instant};

pub mod pages;

pub use pages::{
    Applied, DEFAULT_PAGE_ITEMS, MAX_PAGE_ITEMS, PAGE_CONTENT_BYTES, Page, PageStore, Rejection,
    Source, apply_page, page,
};

use personkit_shared::wire::quote_safely;
use personkit_store::Connection;
use personkit_store::sync::{self, Outgoing, SyncToken};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// Largest page body read from a peer.
pub const MAX_PAGE_BODY: u64 = 64 * 1024 * 1024;
/// Entries asked for per page.
pub const PAGE_ITEMS: usize = DEFAULT_PAGE_ITEMS;
/// Most pages one round pulls and pushes together. A round that reaches it stops with a `round_limit` error
/// (the peer's status in `sync list`) and the next round goes on from the cursor.
pub const MAX_PAGES_PER_ROUND: u32 = 10_000;
/// Most pulled pages per round that hold no item yet say more follows. A relay's page holds at least one item
/// unless its rows went between listing and reading them, so more than a few is a peer walking its cursor one
/// step at a time: the round stops with an `empty_pages` error.
pub const MAX_EMPTY_PAGES_PER_ROUND: u32 = 8;
/// Longest wall time of one round, requests included (each request's timeout is cut to what is left). A round
/// that reaches it stops with a `round_limit` error and the next round goes on from the cursor.
pub const MAX_ROUND_TIME: Duration = Duration::from_secs(10 * 60);
/// Longest single request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

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
            format!("{:?} is not a relay URL", quote(url)),
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

/// A peer's or a user's text, made safe to show in an error.
fn quote(s: &str) -> String {
    quote_safely(s, 200)
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host == "::1"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| a.is_loopback())
}

/// The HTTP client of every call to a peer. It follows no redirect: a hop would bypass [`check_url`] (a peer could
/// send this relay to a plain-http host and have its answer applied); a redirect answer is an error instead.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(REQUEST_TIMEOUT))
        .timeout_connect(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .max_redirects(0)
        // A relay closes a kept-alive connection idle for its header timeout (10 s by default): one idle longer
        // than this is not reused, so a request is not sent into a socket the peer is closing.
        .max_idle_age(Duration::from_secs(4))
        .build()
        .into()
}

/// The error for an answer other than 200: a redirect says it is not followed, else the peer's own error.
fn answer_error(resp: &ureq::http::Response<ureq::Body>, status: u16, body: &[u8]) -> SyncError {
    if (300..400).contains(&status) {
        let to = resp
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map_or_else(|| "elsewhere".to_owned(), |l| format!("to {:?}", quote(l)));
        return SyncError::new(
            "redirect_refused",
            format!(
                "the peer answered HTTP {status}, a redirect {to}; sync follows no redirects and stored nothing of it"
            ),
            "give `personkit sync add` the relay's own URL (https://…, or http:// to a loopback address), not one that redirects",
        );
    }
    peer_error(status, body)
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
            code: quote(&e.code),
            message: format!("the peer answered {status}: {}", quote(&e.message)),
            hint: quote(&e.hint),
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
        return Err(answer_error(&resp, status, &bytes));
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

/// How much one round may do.
#[derive(Debug, Clone, Copy)]
struct Limits {
    pages: u32,
    empty_pages: u32,
    time: Duration,
}

const LIMITS: Limits = Limits {
    pages: MAX_PAGES_PER_ROUND,
    empty_pages: MAX_EMPTY_PAGES_PER_ROUND,
    time: MAX_ROUND_TIME,
};

/// What a round has used of its [`Limits`].
struct Budget {
    limits: Limits,
    started: Instant,
    pages: u32,
    empty_pages: u32,
}

impl Budget {
    fn new(limits: Limits) -> Budget {
        Budget {
            limits,
            started: Instant::now(),
            pages: 0,
            empty_pages: 0,
        }
    }

    fn time_left(&self) -> Duration {
        self.limits.time.saturating_sub(self.started.elapsed())
    }

    fn out_of_time(&self) -> SyncError {
        self.stopped(format!(
            "the round stopped after {} s ({} pages)",
            self.limits.time.as_secs(),
            self.pages
        ))
    }

    /// A request that failed: when the round's time ran out meanwhile (its timeout was cut to it), that is why.
    fn failed(&self, e: SyncError) -> SyncError {
        if self.time_left().is_zero() {
            self.out_of_time()
        } else {
            e
        }
    }

    /// Before a request: the timeout it gets, or the error that ends the round.
    fn next_request(&self) -> Result<Duration, SyncError> {
        let left = self.time_left();
        if left.is_zero() {
            return Err(self.out_of_time());
        }
        if self.pages >= self.limits.pages {
            return Err(self.stopped(format!(
                "the round stopped after {} pages",
                self.limits.pages
            )));
        }
        Ok(left.min(REQUEST_TIMEOUT))
    }

    fn stopped(&self, what: String) -> SyncError {
        SyncError::new(
            "round_limit",
            format!("{what}, the most one round does; what arrived until then is stored"),
            "the next round goes on from where this one stopped; if this repeats with little arriving, check the peer",
        )
    }

    fn page_done(&mut self, pulled_empty_with_more: bool) -> Result<(), SyncError> {
        self.pages += 1;
        if pulled_empty_with_more {
            self.empty_pages += 1;
            if self.empty_pages > self.limits.empty_pages {
                return Err(SyncError::new(
                    "empty_pages",
                    format!(
                        "the peer answered {} pages with no items that each said more follows; the round stopped",
                        self.empty_pages
                    ),
                    "a relay's pages hold items; update the peer to the same personkit version, or revoke it if it is not yours",
                ));
            }
        }
        Ok(())
    }
}

/// One round with `peer`: pull, then push. `now` gives the time of each commit. A failure keeps what was
/// committed (cursors included) and is recorded as the peer's last error. A round is bounded
/// ([`MAX_PAGES_PER_ROUND`], [`MAX_EMPTY_PAGES_PER_ROUND`], [`MAX_ROUND_TIME`]).
pub fn sync_peer(
    conn: &mut Connection,
    peer: &Outgoing,
    now: &dyn Fn() -> OffsetDateTime,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report, SyncError> {
    sync_peer_within(conn, peer, now, progress, LIMITS)
}

fn sync_peer_within(
    conn: &mut Connection,
    peer: &Outgoing,
    now: &dyn Fn() -> OffsetDateTime,
    progress: &mut dyn FnMut(Progress),
    limits: Limits,
) -> Result<Report, SyncError> {
    let result = round(conn, peer, now, progress, &mut Budget::new(limits));
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
    budget: &mut Budget,
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
    loop {
        let timeout = budget.next_request()?;
        let target = format!("{base}/v1/sync/pages?after={cursor}&limit={PAGE_ITEMS}");
        let mut resp = agent
            .get(&target)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Authorization", &auth)
            .call()
            .map_err(|e| budget.failed(unreachable(&base, &e)))?;
        let status = resp.status().as_u16();
        let bytes = read_body(&mut resp, &base).map_err(|e| budget.failed(e))?;
        if status != 200 {
            return Err(answer_error(&resp, status, &bytes));
        }
        let page: Page = serde_json::from_slice(&bytes).map_err(|e| {
            SyncError::new(
                "bad_page",
                format!("the peer's page does not parse: {}", quote(&e.to_string())),
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
        let applied = apply_page(
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
        budget.page_done(n == 0 && page.more)?;
        if !page.more {
            break;
        }
    }
    // Push.
    let mut cursor = sync::push_cursor(conn, &out.peer.id)?;
    let mut done = 0u64;
    loop {
        let page = page(conn, cursor, PAGE_ITEMS)?;
        if page.next == cursor {
            break;
        }
        let timeout = budget.next_request()?;
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
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .send(&body[..])
            .map_err(|e| budget.failed(unreachable(&base, &e)))?;
        let status = resp.status().as_u16();
        let bytes = read_body(&mut resp, &base).map_err(|e| budget.failed(e))?;
        if status != 200 {
            return Err(answer_error(&resp, status, &bytes));
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
        budget.page_done(false)?;
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
                .map(|(i, v)| Rejection {
                    index: v
                        .get("index")
                        .and_then(serde_json::Value::as_u64)
                        .unwrap_or(i as u64) as usize,
                    code: "rejected_by_peer",
                    message: v
                        .get("code")
                        .and_then(serde_json::Value::as_str)
                        .map(quote)
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
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    type Answer = (u16, Vec<(&'static str, String)>, String);

    /// A small HTTP/1.1 server on a loopback port standing in for a peer: `answer(n, path)` answers its n-th
    /// request (from 0); one connection per request. Returns its base URL and the paths it was asked for.
    fn fake_peer(
        answer: impl Fn(usize, &str) -> Answer + Send + 'static,
    ) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let path = line.split(' ').nth(1).unwrap_or("").to_owned();
                let mut length = 0usize;
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    if let Some((k, v)) = h.split_once(':')
                        && k.eq_ignore_ascii_case("content-length")
                    {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let n = {
                    let mut l = log.lock().unwrap();
                    l.push(path.clone());
                    l.len() - 1
                };
                let (status, headers, body) = answer(n, &path);
                let mut out = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
                    body.len()
                );
                for (k, v) in headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("\r\n");
                out.push_str(&body);
                let _ = stream.write_all(out.as_bytes());
            }
        });
        (base, asked)
    }

    fn now() -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    /// An empty corpus that calls the peer `peer_id` at `url`.
    fn corpus_calling(peer_id: &str, url: &str) -> (tempfile::TempDir, Connection, Outgoing) {
        let dir = tempfile::tempdir().unwrap();
        let conn = personkit_store::db::open(&dir.path().join("corpus.db")).unwrap();
        sync::add_outgoing(
            &conn,
            peer_id,
            "peer",
            url,
            &SyncToken::new("pks_test".into()),
            now(),
        )
        .unwrap();
        let out = sync::outgoing(&conn).unwrap().remove(0);
        (dir, conn, out)
    }

    fn peer_status(conn: &Connection) -> (i64, Option<String>) {
        let p = sync::list_peers(conn).unwrap().remove(0);
        (p.pull_cursor, p.last_error)
    }

    fn messages(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM messages", [], |r| r.get(0))
            .unwrap()
    }

    /// A page of `relay_id` carrying one turn.
    fn page_with_a_turn(relay_id: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let mut other = personkit_store::db::open(&dir.path().join("other.db")).unwrap();
        let turn = personkit_shared::wire::build_observation(
            "browser-ext:chatgpt",
            "injected",
            personkit_shared::wire::Role::User,
            "an injected turn",
            Some(0),
            None,
            "2026-11-20T09:00:00Z",
            personkit_shared::wire::ClientInfo {
                app_version: "0.1.0".into(),
                device_id: "ext".into(),
            },
        );
        personkit_store::ingest::ingest_observations(
            &mut other,
            &personkit_store::ingest::Origin {
                device_id: "dev".into(),
            },
            &[turn],
            now(),
        )
        .unwrap();
        let mut page = page(&other, 0, PAGE_ITEMS).unwrap();
        page.relay_id = relay_id.into();
        serde_json::to_string(&page).unwrap()
    }

    fn after(path: &str) -> i64 {
        path.split(['?', '&'])
            .find_map(|p| p.strip_prefix("after="))
            .unwrap()
            .parse()
            .unwrap()
    }

    #[test]
    fn a_redirect_to_another_host_is_not_followed_and_nothing_is_applied() {
        let page = page_with_a_turn("peer-r");
        let (foreign, foreign_asked) = fake_peer(move |_, _| (200, vec![], page.clone()));
        let (peer, _) = fake_peer(move |_, path| {
            (
                302,
                vec![("Location", format!("{foreign}{path}"))],
                String::new(),
            )
        });
        let (_dir, mut conn, out) = corpus_calling("peer-r", &peer);
        let e = sync_peer(&mut conn, &out, &now, &mut |_| {}).unwrap_err();
        assert_eq!(e.code, "redirect_refused", "{e:?}");
        assert!(e.message.contains("302"), "{e:?}");
        assert!(foreign_asked.lock().unwrap().is_empty(), "not followed");
        assert_eq!(messages(&conn), 0, "nothing applied");
        let (cursor, error) = peer_status(&conn);
        assert_eq!(cursor, 0);
        assert!(error.unwrap().contains("redirect_refused"));
    }

    #[test]
    fn a_peer_answering_endless_empty_pages_is_stopped_with_an_error() {
        let (peer, asked) = fake_peer(|n, path| {
            if n >= 200 {
                return (503, vec![], String::new());
            }
            let body = serde_json::json!({"relay_id": "peer-e", "next": after(path) + 1, "more": true,
                "remaining": 1, "items": []});
            (200, vec![], body.to_string())
        });
        let (_dir, mut conn, out) = corpus_calling("peer-e", &peer);
        let e = sync_peer(&mut conn, &out, &now, &mut |_| {}).unwrap_err();
        assert_eq!(e.code, "empty_pages", "{e:?}");
        let allowed = MAX_EMPTY_PAGES_PER_ROUND as usize + 1;
        assert_eq!(asked.lock().unwrap().len(), allowed);
        let (cursor, error) = peer_status(&conn);
        assert_eq!(cursor, allowed as i64, "what was applied keeps its cursor");
        assert!(
            error.unwrap().contains("empty_pages"),
            "not ok in sync list"
        );
        // The next round goes on from the cursor.
        let out = sync::outgoing(&conn).unwrap().remove(0);
        sync_peer(&mut conn, &out, &now, &mut |_| {}).unwrap_err();
        assert_eq!(after(&asked.lock().unwrap()[allowed]), allowed as i64);
    }

    /// A peer that always has one more page of one valid tombstone, after `delay`.
    fn endless_peer(relay_id: &'static str, delay: Duration) -> (String, Arc<Mutex<Vec<String>>>) {
        let served = Arc::new(AtomicUsize::new(0));
        fake_peer(move |_, path| {
            std::thread::sleep(delay);
            let n = served.fetch_add(1, Ordering::SeqCst);
            let item = serde_json::json!({"kind": "tombstone", "id": format!("00000000-0000-5000-8000-{n:012x}"),
                "thread_id": "11111111-1111-5111-8111-111111111111", "forgotten_at": "2026-11-22T10:00:00.000Z"});
            let body = serde_json::json!({"relay_id": relay_id, "next": after(path) + 1, "more": true,
                "remaining": 1, "items": [item]});
            (200, vec![], body.to_string())
        })
    }

    #[test]
    fn a_round_stops_at_its_page_and_time_bounds_and_says_so() {
        let (peer, asked) = endless_peer("peer-p", Duration::ZERO);
        let (_dir, mut conn, out) = corpus_calling("peer-p", &peer);
        let few = Limits { pages: 5, ..LIMITS };
        let e = sync_peer_within(&mut conn, &out, &now, &mut |_| {}, few).unwrap_err();
        assert_eq!(e.code, "round_limit", "{e:?}");
        assert!(e.message.contains("5 pages"), "{e:?}");
        assert_eq!(asked.lock().unwrap().len(), 5);
        let (cursor, error) = peer_status(&conn);
        assert_eq!(cursor, 5);
        assert!(error.unwrap().contains("round_limit"));

        let (peer, _) = endless_peer("peer-t", Duration::from_millis(100));
        let (_dir, mut conn, out) = corpus_calling("peer-t", &peer);
        let short = Limits {
            time: Duration::from_secs(1),
            ..LIMITS
        };
        let t = Instant::now();
        let e = sync_peer_within(&mut conn, &out, &now, &mut |_| {}, short).unwrap_err();
        assert_eq!(e.code, "round_limit", "{e:?}");
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert!(peer_status(&conn).0 > 0, "pages before the bound were kept");
    }

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
