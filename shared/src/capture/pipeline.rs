//! The capture pipeline, typed. A capture goes through four stages, each a function of its own:
//!
//! 1. [`locate`]: which page the request speaks for (the URL the browser vouches for, its surface, its
//!    conversation) and whether the user captures it;
//! 2. the turns on offer become [`Candidate`]s: a DOM read's turns rendered from the content script's tree
//!    ([`dom_candidates`]), or a network body's parsed turns, once the request is known to be the page's own
//!    ([`network_candidates`]);
//! 3. [`prepare`]: each candidate normalised, cleaned of the page's labels, redacted, built into a wire
//!    observation, checked, and looked up in the dedupe set;
//! 4. [`admit`]: the new ones queued, remembered as seen, and counted in the stats.
//!
//! [`super::api`] is the JSON edge over it: it parses the worker's input into a [`Capture`] and an [`Offered`],
//! and serialises the [`Captured`] answer.

use serde::{Deserialize, Serialize};

use super::core::Core;
use super::dedupe::SeenSet;
use super::normalize::normalize;
use super::policy::{self, CaptureState, RawTurn, SkipList};
use super::queue::QueueConfig;
use super::redact::Redactor;
use super::registry::{Registry, Surface};
use super::settings::Settings;
use crate::wire::{self, ClientInfo, Observation, truncate_bytes};

/// The page a content script's request speaks for, as the browser reports it.
#[derive(Debug, Clone, Copy)]
pub struct PageRequest<'a> {
    /// The sending frame's URL (`sender.url`).
    pub url: &'a str,
    /// The tab's URL, when the sender is the tab's top frame (`sender.tab.url`).
    pub tab_url: Option<&'a str>,
    /// The URL the content script says it is on: only compared with the two above (see
    /// [`policy::vouched_url`]), never used as the page's URL.
    pub claimed_url: Option<&'a str>,
    pub now_ms: u64,
}

/// Where a request's page is.
#[derive(Debug)]
pub enum Located<'r, 'u> {
    /// The browser's record of the sender does not show the page the script claims (yet): nothing is decided.
    Stale,
    /// No registered surface serves this URL.
    Elsewhere,
    /// A surface's page, with its conversation when the URL names one.
    Page {
        /// The URL the browser vouches for.
        url: &'u str,
        surface: &'r Surface,
        conversation_id: Option<String>,
    },
}

/// Stage 1: the page a request speaks for.
pub fn locate<'r, 'u>(registry: &'r Registry, req: &PageRequest<'u>) -> Located<'r, 'u> {
    let day = crate::time::day(millis(req.now_ms));
    let Some(url) = policy::vouched_url(registry, &day, req.url, req.tab_url, req.claimed_url)
    else {
        return Located::Stale;
    };
    match registry.match_url(url, &day) {
        None => Located::Elsewhere,
        Some(m) => Located::Page {
            url,
            surface: m.surface,
            conversation_id: m.conversation_id,
        },
    }
}

/// The thread id of a surface's conversation, hyphenated (the form every caller stores and compares).
pub fn thread_id(surface: &str, conversation_id: &str) -> String {
    crate::ids::thread_id(surface, conversation_id)
        .hyphenated()
        .to_string()
}

pub(super) fn millis(now_ms: u64) -> i64 {
    i64::try_from(now_ms).unwrap_or(i64::MAX)
}

/// One capture request: the page, the user's choices and the capturing client.
#[derive(Debug)]
pub struct Capture<'a> {
    pub page: PageRequest<'a>,
    pub title: Option<&'a str>,
    pub settings: &'a Settings,
    pub skipped: &'a SkipList,
    /// The user's valid redaction patterns.
    pub patterns: &'a [String],
    pub client: ClientInfo,
    pub fast: bool,
}

/// The turns a capture offers.
#[derive(Debug)]
pub enum Offered<'a> {
    /// A content script's read of the page, already checked against the limits ([`policy::parse_turns`]).
    Dom(Vec<RawTurn>),
    /// A body the page itself received.
    Network(&'a NetworkBody, Parsed),
}

/// The network module's answer for a body.
#[derive(Debug)]
pub enum Parsed {
    /// Not parsed yet: the first call only says whether to parse it.
    NotYet,
    /// An answer that is not the network module's shape.
    Invalid,
    Body(ParsedBody),
}

/// A body the page-world script teed, as the worker passes it on: what the page world said about the request
/// (checked here, never trusted), the bridge's note and the network module's error for the body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkBody {
    surface: String,
    kind: String,
    /// The request's URL.
    endpoint: String,
    method: String,
    /// The bridge's note: `too_large`, `aborted`.
    #[serde(default)]
    error: Option<String>,
    /// `parseNetwork`'s error code when it did not parse (`stream_unparsed`, `stream_incomplete`, …).
    #[serde(default)]
    parse_error: Option<String>,
}

/// The network module's answer: the body's conversation and its turns.
#[derive(Debug, Deserialize)]
pub struct ParsedBody {
    conversation_id: Option<String>,
    turns: Vec<ParsedTurn>,
}

/// The part of a `network::NetTurn` a capture uses.
#[derive(Debug, Deserialize)]
struct ParsedTurn {
    message_key: String,
    #[serde(default)]
    parent_key: Option<String>,
    role: wire::Role,
    text: String,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    created_at_ms: Option<i64>,
    #[serde(default)]
    position: Option<u32>,
    #[serde(default)]
    on_current_branch: Option<bool>,
    #[serde(default)]
    hidden: bool,
}

/// What became of a network body.
#[derive(Debug, Default, Serialize)]
pub struct NetworkVerdict {
    /// The endpoint is a known one of the page's surface and, after parsing, its turns went through capture.
    accepted: bool,
    /// The page's URL names no conversation yet: offer the body again once it does.
    waiting: bool,
    /// Why the body was refused: `other_surface`, `unknown_endpoint`, `foreign_conversation`,
    /// `no_conversation_named`, `invalid_parse`.
    refused: Option<String>,
    /// The parser's error code (`stream_unparsed`, `stream_too_large`, `stream_incomplete`).
    unparsed: Option<String>,
    /// Turns in the body.
    turns: usize,
    /// Whether the worker should parse the body (the first call's answer).
    parse: bool,
}

/// What a capture did.
#[derive(Debug, Default, Serialize)]
pub struct Captured {
    /// Why the message was refused (the worker answers `invalid_message`); nothing else is set then.
    pub invalid: Option<String>,
    /// Nothing was queued: the browser's record of the sender does not show the conversation the script read
    /// the turns under (see [`policy::vouched_url`]); the script reads again shortly.
    pub stale: bool,
    pub state: CaptureState,
    /// The queue, the dedupe set or the stats changed (see `changes`): persist them before answering.
    pub changed: bool,
    pub surface: Option<String>,
    pub thread_id: Option<String>,
    /// Turns newly queued.
    pub queued: usize,
    /// Turns already sent from this browser.
    pub already_seen: usize,
    /// Turns with no text left after normalisation, or invalid for the wire format.
    pub dropped_empty: usize,
    pub dropped_invalid: usize,
    /// Turns refused because the queue is full (they stay unseen, so a later read queues them).
    pub overflowed: usize,
    pub near_full: bool,
    pub queue_length: usize,
    /// Set for a network body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkVerdict>,
}

/// One turn about to be normalised, redacted and queued.
#[derive(Debug)]
pub struct Candidate {
    role: wire::Role,
    /// Rendered text (before normalisation and redaction).
    text: String,
    message_key: Option<String>,
    ordinal: Option<u32>,
    site_ordinal: bool,
    parent_key: Option<String>,
    occurred_at: Option<String>,
    network: bool,
}

/// The conversation a capture goes into, once located and captured.
struct Thread<'r> {
    surface: &'r Surface,
    conversation_id: String,
    thread_id: String,
}

/// A capture through every stage, on the core's state.
pub fn capture(core: &mut Core, c: &Capture, offered: Offered) -> Captured {
    let network = matches!(offered, Offered::Network(..));
    let mut out = Captured {
        queue_length: core.queue.len(),
        ..Captured::default()
    };
    let mut verdict = NetworkVerdict::default();
    run(core, c, offered, &mut out, &mut verdict);
    if network {
        out.network = Some(verdict);
    }
    out
}

fn run(
    core: &mut Core,
    c: &Capture,
    offered: Offered,
    out: &mut Captured,
    verdict: &mut NetworkVerdict,
) {
    let registry = Registry::builtin();
    let (url, surface, conversation_id) = match locate(registry, &c.page) {
        Located::Stale => {
            out.stale = true;
            return;
        }
        Located::Elsewhere => return,
        Located::Page {
            url,
            surface,
            conversation_id,
        } => (url, surface, conversation_id),
    };
    out.surface = Some(surface.id.clone());
    let Some(conversation_id) = conversation_id else {
        verdict.waiting = true;
        return;
    };
    let thread = Thread {
        thread_id: thread_id(&surface.id, &conversation_id),
        surface,
        conversation_id,
    };
    out.thread_id = Some(thread.thread_id.clone());
    out.state = policy::capture_state(
        c.settings,
        Some(surface),
        Some(&thread.thread_id),
        c.skipped,
    );
    if out.state != CaptureState::Capturing {
        return;
    }
    let from_network = matches!(offered, Offered::Network(..));
    let candidates = match offered {
        Offered::Dom(turns) => dom_candidates(registry, &surface.id, turns, out),
        Offered::Network(body, parsed) => {
            match network_candidates(body, parsed, url, &thread, verdict) {
                Some(c) => c,
                None => {
                    if let Some(code) = verdict.unparsed.as_deref()
                        && code != "stream_incomplete"
                    {
                        out.changed |= core.stats.on_unparsed(&surface.id, code, c.page.now_ms);
                    }
                    return;
                }
            }
        }
    };
    if !candidates.is_empty() {
        out.changed |= core.stats.on_path(&surface.id, from_network, c.page.now_ms);
    }
    let page_url = registry.page_url(&surface.id, url);
    let fresh = prepare(registry, c, &thread, page_url, candidates, &core.seen, out);
    admit(core, c, &surface.id, fresh, out);
    verdict.accepted = true;
}

/// Stage 2, a DOM read: each turn's text rendered from the content script's tree (a tree that does not render is
/// counted in `dropped_invalid`), and its ordinal read by the surface's rule.
fn dom_candidates(
    registry: &Registry,
    surface: &str,
    turns: Vec<RawTurn>,
    out: &mut Captured,
) -> Vec<Candidate> {
    let mut c = Vec::with_capacity(turns.len());
    for turn in turns {
        let text = match turn.doc.as_deref() {
            Some(doc) => match super::render::render_json(doc) {
                Some(text) => text,
                None => {
                    out.dropped_invalid += 1;
                    continue;
                }
            },
            None => turn.text,
        };
        let ordinal = turn
            .ordinal_raw
            .as_deref()
            .and_then(|raw| registry.ordinal(surface, raw));
        c.push(Candidate {
            role: turn.role,
            text,
            message_key: turn.message_key,
            site_ordinal: ordinal.is_some() && registry.ordinal_is_sites(surface),
            ordinal,
            parent_key: None,
            occurred_at: None,
            network: false,
        });
    }
    c
}

/// Stage 2, a network body: its turns for the page's conversation, or `None` with the reason in `verdict`. The
/// request must be a known endpoint of the page's own surface on the page's own host (`network::endpoints`); the
/// body's conversation must be the page's: the one the body names, or — when it names none — one the request's URL
/// names. Before the body is parsed it only sets `verdict.parse`.
fn network_candidates(
    net: &NetworkBody,
    parsed: Parsed,
    page_url: &str,
    thread: &Thread,
    verdict: &mut NetworkVerdict,
) -> Option<Vec<Candidate>> {
    use crate::network::Surface;
    use crate::network::endpoints::{self, Transport};
    let refuse = |verdict: &mut NetworkVerdict, why: &str| {
        verdict.refused = Some(why.to_owned());
        None
    };
    let Some(s) =
        Surface::from_id(&thread.surface.id).filter(|s| Surface::from_id(&net.surface) == Some(*s))
    else {
        return refuse(verdict, "other_surface");
    };
    let host = page_url
        .strip_prefix("https://")
        .and_then(|r| r.split(['/', '?', '#']).next())
        .unwrap_or("");
    let transport = if net.endpoint.starts_with("wss://") {
        Transport::WebSocket
    } else {
        Transport::Fetch
    };
    match endpoints::endpoint(s, transport, &net.method, &net.endpoint, host) {
        Some(k) if k.as_str() == net.kind => {}
        _ => return refuse(verdict, "unknown_endpoint"),
    }
    if let Some(code) = &net.parse_error {
        // A stream the page aborted is cut short, not a format the parser no longer understands.
        verdict.unparsed = Some(if net.error.as_deref() == Some("aborted") {
            "stream_incomplete".to_owned()
        } else {
            crate::network::short(code)
        });
        return None;
    }
    let body = match parsed {
        Parsed::NotYet => {
            let too_large = net.error.as_deref() == Some("too_large");
            verdict.parse = !too_large;
            if too_large {
                verdict.unparsed = Some("stream_too_large".to_owned());
            }
            return None;
        }
        Parsed::Invalid => return refuse(verdict, "invalid_parse"),
        Parsed::Body(body) => body,
    };
    verdict.turns = body.turns.len();
    match body.conversation_id.as_deref() {
        Some(c) if c == thread.conversation_id => {}
        Some(_) => return refuse(verdict, "foreign_conversation"),
        None => {
            let path = net.endpoint.split('#').next().unwrap_or("");
            let named = path
                .split(['/', '?', '&', '='])
                .any(|seg| seg == thread.conversation_id);
            if !named {
                return refuse(verdict, "no_conversation_named");
            }
        }
    }
    Some(
        body.turns
            .into_iter()
            .filter(|t| !t.hidden && matches!(t.role, wire::Role::User | wire::Role::Assistant))
            .take(policy::MAX_NETWORK_TURNS)
            .map(|t| {
                let mut parts = crate::turn_text::Parts::new(t.role, &t.text);
                parts.reasoning = t.reasoning.as_deref();
                let text = crate::turn_text::render(&parts, crate::turn_text::Style::Page);
                let on_branch = t.on_current_branch == Some(true);
                Candidate {
                    role: t.role,
                    text,
                    message_key: Some(t.message_key),
                    ordinal: t.position.filter(|_| on_branch),
                    site_ordinal: on_branch,
                    parent_key: t.parent_key,
                    occurred_at: t.created_at_ms.map(crate::time::rfc3339),
                    network: true,
                }
            })
            .collect(),
    )
}

/// An observation ready to queue, with its dedupe key.
struct Fresh {
    observation: Observation,
    key: String,
}

/// Stage 3: each candidate as a checked wire observation, unless it is empty after cleaning (`dropped_empty`),
/// invalid for the wire (`dropped_invalid`), or already queued from this browser or earlier in this read
/// (`already_seen`).
fn prepare(
    registry: &Registry,
    c: &Capture,
    thread: &Thread,
    page_url: Option<String>,
    candidates: Vec<Candidate>,
    seen: &SeenSet,
    out: &mut Captured,
) -> Vec<Fresh> {
    let surface = &thread.surface.id;
    let red = Redactor::cached(c.patterns);
    let title = c
        .title
        .map(|t| truncate_bytes(t, policy::MAX_RAW_TITLE_BYTES))
        .map(|t| red.redact(&normalize(&t)))
        .filter(|t| !t.is_empty())
        .map(|t| truncate_bytes(&t, wire::MAX_FIELD_BYTES));
    let captured_at = crate::time::rfc3339(millis(c.page.now_ms));
    let mut fresh: Vec<Fresh> = Vec::new();
    for turn in candidates {
        // A network turn is the site's source text: the DOM strip lines (labels the page renders) do not apply.
        let text = if turn.network {
            red.redact(&normalize(&turn.text))
        } else {
            red.redact(&normalize(
                &registry.strip_lines(surface, &normalize(&turn.text)),
            ))
        };
        if text.trim().is_empty() {
            out.dropped_empty += 1;
            continue;
        }
        let message_key = turn
            .message_key
            .filter(|k| !k.is_empty())
            .map(|k| truncate_bytes(&k, wire::MAX_FIELD_BYTES));
        let mut obs = wire::build_observation(
            surface,
            &thread.conversation_id,
            turn.role,
            &text,
            turn.ordinal,
            message_key.as_deref(),
            &captured_at,
            c.client.clone(),
        );
        obs.url = page_url.clone();
        obs.title = title.clone();
        if turn.ordinal.is_some() && turn.site_ordinal {
            obs.turn.ordinal_source = Some(crate::identity::OrdinalSource::Site);
        }
        if turn.network {
            obs.turn.path = Some(crate::identity::Path::Network);
            obs.turn.parent_key = turn
                .parent_key
                .filter(|k| !k.is_empty())
                .map(|k| truncate_bytes(&k, wire::MAX_FIELD_BYTES));
            obs.turn.occurred_at = turn.occurred_at;
        }
        if wire::validate(&obs).is_err() {
            out.dropped_invalid += 1;
            continue;
        }
        let key = SeenSet::key(
            &thread.thread_id,
            message_key.as_deref(),
            &obs.turn.content_hash,
        );
        if seen.contains(&key) || fresh.iter().any(|f| f.key == key) {
            out.already_seen += 1;
            continue;
        }
        fresh.push(Fresh {
            observation: obs,
            key,
        });
    }
    fresh
}

/// Stage 4: the fresh observations queued as far as the queue takes them; each one queued is remembered as seen
/// (one refused for a full queue is not, so a later read offers it again), and the surface's stats count them.
fn admit(core: &mut Core, c: &Capture, surface: &str, fresh: Vec<Fresh>, out: &mut Captured) {
    let (observations, keys): (Vec<Observation>, Vec<String>) =
        fresh.into_iter().map(|f| (f.observation, f.key)).unzip();
    let enq = core.queue.enqueue(observations, &QueueConfig::of(c.fast));
    for (key, ok) in keys.into_iter().zip(&enq.accepted) {
        if *ok {
            core.seen.insert(key);
            out.queued += 1;
        }
    }
    out.overflowed = enq.overflowed;
    out.near_full = enq.near_full;
    out.queue_length = core.queue.len();
    out.changed |= out.queued > 0;
    out.changed |= core.stats.on_capture(surface, out.queued, out.overflowed);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::wire::Role;

    const PAGE: &str = "https://chatgpt.com/c/0f1e2d3c-aaaa-bbbb-cccc-000000000001";

    fn settings() -> Settings {
        serde_json::from_str(r#"{"enabled": {"browser-ext:chatgpt": true}}"#).unwrap()
    }

    fn request(url: &str) -> PageRequest<'_> {
        PageRequest {
            url,
            tab_url: None,
            claimed_url: None,
            now_ms: 1_790_000_000_000,
        }
    }

    fn capture_on<'a>(settings: &'a Settings, skipped: &'a SkipList) -> Capture<'a> {
        Capture {
            page: request(PAGE),
            title: None,
            settings,
            skipped,
            patterns: &[],
            client: ClientInfo {
                app_version: "0.1.0".into(),
                device_id: "dev".into(),
            },
            fast: true,
        }
    }

    fn turn(role: Role, text: &str) -> RawTurn {
        RawTurn {
            role,
            text: text.to_owned(),
            doc: None,
            message_key: None,
            ordinal_raw: None,
        }
    }

    #[test]
    fn locate_tells_a_conversation_from_a_surface_page_from_elsewhere_from_an_unvouched_claim() {
        let registry = Registry::builtin();
        match locate(registry, &request(PAGE)) {
            Located::Page {
                url,
                surface,
                conversation_id,
            } => {
                assert_eq!(url, PAGE);
                assert_eq!(surface.id, "browser-ext:chatgpt");
                assert_eq!(
                    conversation_id.as_deref(),
                    Some("0f1e2d3c-aaaa-bbbb-cccc-000000000001")
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            locate(registry, &request("https://chatgpt.com/")),
            Located::Page {
                conversation_id: None,
                ..
            }
        ));
        assert!(matches!(
            locate(registry, &request("https://example.com/c/1")),
            Located::Elsewhere
        ));
        let claimed = PageRequest {
            claimed_url: Some("https://chatgpt.com/c/0f1e2d3c-aaaa-bbbb-cccc-000000000002"),
            ..request(PAGE)
        };
        assert!(matches!(locate(registry, &claimed), Located::Stale));
    }

    #[test]
    fn the_stages_run_on_typed_values_and_a_second_read_queues_nothing_new() {
        let (settings, skipped) = (settings(), SkipList::default());
        let c = Capture {
            title: Some("Plans"),
            ..capture_on(&settings, &skipped)
        };
        let read = || {
            Offered::Dom(vec![
                turn(Role::User, "What is a B-tree?"),
                turn(Role::Assistant, "A balanced search tree."),
                turn(Role::User, "What is a B-tree?"),
                turn(Role::Assistant, "   "),
            ])
        };
        let mut core = Core::default();
        let first = capture(&mut core, &c, read());
        assert_eq!(first.state, CaptureState::Capturing);
        assert_eq!(
            (first.queued, first.already_seen, first.dropped_empty),
            (2, 1, 1)
        );
        assert!(first.changed && first.network.is_none());
        assert_eq!(core.queue.len(), 2);
        let second = capture(&mut core, &c, read());
        assert_eq!((second.queued, second.already_seen), (0, 3));
        assert_eq!(core.queue.len(), 2);

        let off = Capture {
            settings: &Settings::default(),
            ..c
        };
        let third = capture(&mut core, &off, read());
        assert_eq!((third.state, third.queued), (CaptureState::Off, 0));
    }

    #[test]
    fn a_body_is_parsed_only_from_a_known_endpoint_and_only_a_parse_of_its_shape_counts() {
        let (settings, skipped) = (settings(), SkipList::default());
        let c = capture_on(&settings, &skipped);
        let body = |endpoint: &str| NetworkBody {
            surface: "chatgpt".into(),
            kind: "stream".into(),
            endpoint: endpoint.into(),
            method: "POST".into(),
            error: None,
            parse_error: None,
        };
        let known = body("https://chatgpt.com/backend-api/f/conversation");
        let mut core = Core::default();
        let ask = capture(&mut core, &c, Offered::Network(&known, Parsed::NotYet));
        let v = ask.network.unwrap();
        assert!(v.parse && v.refused.is_none() && !v.accepted, "{v:?}");
        let bad = capture(&mut core, &c, Offered::Network(&known, Parsed::Invalid));
        assert_eq!(
            bad.network.unwrap().refused.as_deref(),
            Some("invalid_parse")
        );
        let other = body("https://chatgpt.com/backend-api/other");
        let refused = capture(&mut core, &c, Offered::Network(&other, Parsed::NotYet));
        let v = refused.network.unwrap();
        assert_eq!(
            (v.parse, v.refused.as_deref()),
            (false, Some("unknown_endpoint"))
        );
        assert_eq!(core.queue.len(), 0);
    }
}
