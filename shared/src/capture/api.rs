//! The capture core's JSON-in/JSON-out entry points: everything the extension's worker decides. `extension-wasm`
//! wraps each in a one-line wasm-bindgen function; the worker reads the page's messages, the clock and storage,
//! and performs the HTTP requests.
//!
//! The state that grows with the user's history — the delivery queue, the dedupe set, the local stats — lives in
//! a [`Core`], which the worker loads once from its IndexedDB records when it starts and keeps for as long as it
//! runs; each call that changes it answers with `changes`, the records to store or delete, so a call costs the
//! same with 20,000 remembered turns as with none. The user's settings, skip list and patterns are small and go
//! in with each call; the worker keeps them in IndexedDB too.
//!
//! Each function reads one input object whose keys are listed in its doc comment; a key it does not know is an
//! error naming that key (a misspelt key never silently becomes 0 or empty).
//!
//! **API boundary:** the JSON shapes of these inputs and outputs are the contract with `extension/src/bg.js`.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::core::{Records, stored};
use super::dedupe::SeenWire;
use super::health::{self, SurfaceRow};
use super::keyed::Keyed;
use super::pipeline::{
    self, Capture, Captured, Located, NetworkBody, Offered, PageRequest, Parsed, ParsedBody,
    locate, millis,
};
use super::policy::{self, CaptureState, SkipList, Stats};
use super::queue::{Applied, HeldReason, Next, Outcome, QueueConfig, QueueState};
use super::redact::{PatternError, Redactor};
use super::registry::{self, Registry};
use super::settings::{self, Settings};
use crate::wire::{self, ClientInfo};

/// Bad input to an API function (a bug in the caller or a refused request, never a panic).
#[derive(Debug, thiserror::Error)]
pub enum ApiCallError {
    #[error("bad input JSON: {0}")]
    BadInput(#[from] serde_json::Error),
    #[error("{0}")]
    Refused(String),
}

type Result<T> = std::result::Result<T, ApiCallError>;

fn to_json<T: Serialize>(v: &T) -> Result<String> {
    Ok(serde_json::to_string(v)?)
}

/// Most redaction patterns the popup may save at once.
pub const MAX_PATTERN_LINES: usize = 200;

fn parse<'a, T: Deserialize<'a>>(input: &'a str) -> Result<T> {
    Ok(serde_json::from_str(input)?)
}

/// The input of the delivery, stats, pairing, pattern and forget calls: one type for all of them, because every
/// serde-derived input type costs the wasm build a deserializer of its own (BENCHMARKS.md, WASM size). A key no call
/// knows is still an error naming it; each call takes the fields it reads and requires its own with [`need`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Call<'a> {
    settings: Settings,
    skipped: SkipList,
    now_ms: Option<u64>,
    fast: bool,
    ids: Option<Vec<u64>>,
    /// HTTP status of a delivery or pairing answer (0: no answer).
    status: Option<u16>,
    body: String,
    retry_after: Option<String>,
    error: String,
    relay: Option<String>,
    relay_health: Option<String>,
    app_version: Option<String>,
    thread_id: Option<String>,
    sent: Option<Vec<SentReport>>,
    patterns: Option<Vec<String>>,
    text: Option<String>,
    relay_url: String,
    code: Option<String>,
    user_agent: String,
    allow_plain_http: bool,
    url: Option<String>,
    tab_url: Option<String>,
    claimed_url: Option<String>,
    probe: Option<policy::Probe>,
    title: Option<String>,
    /// A device token is held.
    paired: Option<bool>,
    /// The whole `storage.local` area as read (the one-time migration).
    #[serde(borrow)]
    local: Keyed<&'a RawValue>,
    /// The relay base of the token record in the extension origin's IndexedDB, if there is one.
    token_relay: Option<String>,
    /// The whole `storage.session` area (settings intents).
    #[serde(borrow)]
    session: Keyed<&'a RawValue>,
    /// The key of a messaged intent, with its patch.
    intent: Option<String>,
    #[serde(borrow)]
    patch: Option<&'a RawValue>,
    /// What [`Core::load`] reads, as the worker stored it (see there).
    #[serde(borrow)]
    queue_meta: Option<&'a RawValue>,
    #[serde(borrow)]
    items: Vec<&'a RawValue>,
    #[serde(borrow)]
    held: Option<&'a RawValue>,
    /// The dedupe keys and their sequence numbers (two lists of the same length).
    seen_keys: Vec<String>,
    seen_seqs: Vec<u64>,
    #[serde(borrow)]
    stats: Option<&'a RawValue>,
    #[serde(borrow)]
    legacy_queue: Option<&'a RawValue>,
    #[serde(borrow)]
    legacy_seen: Option<&'a RawValue>,
}

/// A field the call cannot do without.
fn need<T>(v: Option<T>, name: &str) -> Result<T> {
    v.ok_or_else(|| ApiCallError::Refused(format!("bad input JSON: missing field `{name}`")))
}

pub use super::core::{Changes, Core};

/// `{...out, "changes": changes}` from `out`, a serialised object.
fn with_changes(mut out: String, changes: &Changes) -> Result<String> {
    if out.pop() != Some('}') {
        return Err(ApiCallError::Refused("an output is not an object".into()));
    }
    if out.len() > 1 {
        out.push(',');
    }
    out.push_str("\"changes\":");
    out.push_str(&to_json(changes)?);
    out.push('}');
    Ok(out)
}

impl Core {
    /// `{queue_meta, items, held, seen_keys, seen_seqs, stats, legacy_queue, legacy_seen}` as the worker read them
    /// → the core (see [`Core::from_records`]): the dedupe keys and their sequence numbers come as two lists of the
    /// same length; `legacy_queue` and `legacy_seen` are an older version's whole-state records.
    pub fn load(input: &str) -> Result<Core> {
        let i: Call = parse(input)?;
        Ok(Core::from_records(Records {
            queue_meta: i.queue_meta,
            items: i.items,
            held: i.held,
            seen: i.seen_keys.into_iter().zip(i.seen_seqs).collect(),
            stats: i.stats,
            legacy_queue: i.legacy_queue,
            legacy_seen: i.legacy_seen,
        })?)
    }

    /// `{rewrite, changes}`: what the worker should write after [`Core::load`] (see [`Core::take_load_changes`]);
    /// `rewrite` when every record is rewritten (the worker deletes the older version's records in the same
    /// transaction).
    pub fn load_changes(&mut self) -> Result<String> {
        #[derive(Serialize)]
        struct LoadChanges {
            rewrite: bool,
            changes: Changes,
        }
        let changes = self.take_load_changes();
        to_json(&LoadChanges {
            rewrite: changes.is_rewrite(),
            changes,
        })
    }

    /// A call of the state by the worker's name for it (what the wasm facade exposes as one method: every exported
    /// method costs the module its own glue): `capture` (a DOM read; a network body with its parsed answer goes
    /// through [`Core::capture`]), `probe`, `captureReports`, `reportsSent`, `forgotten`, `nextBatch`,
    /// `onOutcome`, `onPaired`, `queueSummary`, `popupState`, `maintain`, `clearHeld`.
    pub fn call(&mut self, method: &str, input: &str) -> Result<String> {
        match method {
            "capture" => self.capture(input, None),
            "probe" => self.probe(input),
            "captureReports" => self.capture_reports(input),
            "reportsSent" => self.reports_sent(input),
            "forgotten" => self.forgotten(input),
            "nextBatch" => self.next_batch(input),
            "onOutcome" => self.on_outcome(input),
            "onPaired" => self.on_paired(input),
            "queueSummary" => self.queue_summary(input),
            "popupState" => self.popup_state(input),
            "maintain" => self.maintain(input),
            "clearHeld" => self.clear_held(input),
            _ => Err(ApiCallError::Refused(format!(
                "no core call {}",
                crate::wire::quote_safely(method, 40)
            ))),
        }
    }

    /// Runs a call that may change the state and answers its output (a JSON object) with the `changes` key
    /// added. (Joined as text: serde's `flatten` would cost the wasm build a second serialiser per output type.)
    fn changing<T: Serialize>(&mut self, f: impl FnOnce(&mut Core) -> Result<T>) -> Result<String> {
        let before = self.before()?;
        let out = to_json(&f(self)?)?;
        let changes = self.changes(before)?;
        with_changes(out, &changes)
    }
}

/// Installs the registry document the extension ships beside its module (see [`Registry::install`]); the worker
/// calls it once, before anything else.
pub fn install_registry(json: &str) -> Result<()> {
    Registry::install(json).map_err(|e| ApiCallError::Refused(e.to_string()))
}

/// Every registered surface's registry entry, verbatim, as a JSON array.
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

/// What the worker's IndexedDB records held, each key as stored (absent on a fresh install, perhaps written by an
/// older version).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadInput<'a> {
    #[serde(borrow, default)]
    settings: Option<&'a RawValue>,
    #[serde(borrow, default)]
    skipped: Option<&'a RawValue>,
    #[serde(borrow, default)]
    patterns: Option<&'a RawValue>,
    #[serde(borrow, default)]
    active_patterns: Option<&'a RawValue>,
}

#[derive(Debug, Serialize)]
struct Loaded {
    settings: Settings,
    skipped: SkipList,
    patterns: Vec<String>,
    active_patterns: Vec<String>,
}

/// `{settings, skipped, patterns, active_patterns}` as read from storage →
/// the same keys with defaults for anything missing or unusable.
pub fn load_state(input: &str) -> Result<String> {
    let i: LoadInput = parse(input)?;
    to_json(&Loaded {
        settings: stored::<Settings>(i.settings).sanitised(),
        skipped: stored(i.skipped),
        patterns: stored(i.patterns),
        active_patterns: stored(i.active_patterns),
    })
}

/// The inputs of a content script's request: the page it speaks for and the user's choices (read from a
/// [`Call`]).
#[derive(Debug)]
struct PageInput {
    /// The sending frame's URL as the browser reports it (`sender.url`).
    url: String,
    /// The tab's URL as the browser reports it, when the sender is the tab's top frame (`sender.tab.url`).
    tab_url: Option<String>,
    /// The URL the content script says it is on: only compared with the two above (see
    /// [`policy::vouched_url`]), never used as the page's URL.
    claimed_url: Option<String>,
    now_ms: u64,
    settings: Settings,
    skipped: SkipList,
}

impl PageInput {
    /// `{url, tab_url, claimed_url, now_ms, settings, skipped}`.
    fn parse(input: &str) -> Result<PageInput> {
        let i: Call = parse(input)?;
        Ok(PageInput {
            url: need(i.url, "url")?,
            tab_url: i.tab_url,
            claimed_url: i.claimed_url,
            now_ms: need(i.now_ms, "now_ms")?,
            settings: i.settings,
            skipped: i.skipped,
        })
    }
}

/// The page's surface, conversation and thread, and whether it is captured.
#[derive(Debug, Serialize)]
struct PageState<'a> {
    /// The browser's record of the sender does not show the page the script claims (yet): nothing was decided;
    /// the script asks again shortly.
    stale: bool,
    /// The registry entry, verbatim (the content script reads its selectors).
    surface: Option<&'a RawValue>,
    /// The rendering rules every surface shares, verbatim (with `surface` only).
    render: Option<&'a RawValue>,
    conversation_id: Option<String>,
    thread_id: Option<String>,
    state: CaptureState,
}

impl PageInput {
    fn request(&self) -> PageRequest<'_> {
        PageRequest {
            url: &self.url,
            tab_url: self.tab_url.as_deref(),
            claimed_url: self.claimed_url.as_deref(),
            now_ms: self.now_ms,
        }
    }
}

fn page<'r>(
    registry: &'r Registry,
    i: &PageInput,
) -> (Option<&'r registry::Surface>, PageState<'r>) {
    let (surface, conversation_id) = match locate(registry, &i.request()) {
        Located::Stale => {
            return (
                None,
                PageState {
                    stale: true,
                    surface: None,
                    render: None,
                    conversation_id: None,
                    thread_id: None,
                    state: CaptureState::Off,
                },
            );
        }
        Located::Elsewhere => (None, None),
        Located::Page {
            surface,
            conversation_id,
            ..
        } => (Some(surface), conversation_id),
    };
    let thread_id = surface
        .zip(conversation_id.as_deref())
        .map(|(s, c)| pipeline::thread_id(&s.id, c));
    let state = policy::capture_state(&i.settings, surface, thread_id.as_deref(), &i.skipped);
    let raw = surface.and_then(|s| serde_json::from_str::<&RawValue>(&s.raw).ok());
    let render = raw.and_then(|_| serde_json::from_str::<&RawValue>(registry.render_rules()).ok());
    (
        surface,
        PageState {
            stale: false,
            surface: raw,
            render,
            conversation_id,
            thread_id,
            state,
        },
    )
}

/// `{url, tab_url, claimed_url, now_ms, settings, skipped}` → `{stale, surface: <registry entry>|null,
/// conversation_id, thread_id, state}` (`state`: `capturing | skipped | paused | off`; `stale`: see
/// [`policy::vouched_url`]).
pub fn page_state(input: &str) -> Result<String> {
    let i = PageInput::parse(input)?;
    to_json(&page(Registry::builtin(), &i).1)
}

#[derive(Debug, Serialize)]
struct ProbeOutput {
    /// The stats changed (see `changes`).
    changed: bool,
    /// `adapter_stale` when the surface's pages have failed its adapter for long enough to show (yellow or red);
    /// else `unread` when this read found conversation text but no turn (or turns of one role only).
    reason: Option<&'static str>,
}

impl Core {
    /// `{url, tab_url, claimed_url, now_ms, settings, probe: {text_present, roots, users, assistants, rank,
    /// shown?, sent?}, title?, fast}` → `{changed, reason, changes}`. Only a page that names a conversation of
    /// a surface the user captures counts; a read that finds conversation text but no turns (or one role only) starts
    /// the surface's stale period, a read with turns ends it. `shown`/`sent` are recorded for the conversation (the
    /// popup's list of incomplete captures).
    pub fn probe(&mut self, input: &str) -> Result<String> {
        let mut i: Call = parse(input)?;
        self.changing(|core| core.probe_stats(&mut i))
    }

    fn probe_stats(&mut self, i: &mut Call) -> Result<ProbeOutput> {
        let (url, now_ms, probe) = (
            need(i.url.take(), "url")?,
            need(i.now_ms, "now_ms")?,
            need(i.probe, "probe")?,
        );
        let registry = Registry::builtin();
        let request = PageRequest {
            url: &url,
            tab_url: i.tab_url.as_deref(),
            claimed_url: i.claimed_url.as_deref(),
            now_ms,
        };
        // Only a conversation's page of a surface the user captures counts.
        let matched = match locate(registry, &request) {
            Located::Page {
                url,
                surface,
                conversation_id: Some(conversation),
            } if policy::capture_state(&i.settings, Some(surface), None, &SkipList::default())
                != CaptureState::Off =>
            {
                Some((url, surface.id.as_str(), conversation))
            }
            _ => None,
        };
        let surface = matched.as_ref().map(|m| m.1);
        let mut changed = surface.is_some_and(|s| self.stats.on_probe(s, &probe, now_ms));
        let counts = probe
            .shown
            .zip(probe.sent)
            .map(|(shown, sent)| super::progress::PageCounts {
                shown,
                sent,
                unreadable: probe.broken(),
            });
        if let (Some((page, s, conversation)), Some(counts)) = (&matched, counts)
            && let Some(url) = registry.page_url(s, page)
        {
            let title = i.title.as_deref().unwrap_or("");
            changed |= self
                .stats
                .on_progress(s, conversation, &url, title, counts, now_ms);
        }
        let stale = surface
            .and_then(|s| self.stats.get(s))
            .and_then(|st| health::stale_light(st.stale_since_ms, now_ms, i.fast))
            .map(|_| health::ADAPTER_STALE);
        // Before the stale period shows, this page's own failed read is said at once.
        let reason = stale
            .or_else(|| (surface.is_some() && probe.broken()).then_some(crate::health::UNREAD));
        Ok(ProbeOutput { changed, reason })
    }
}

/// One report as the worker hands it back to [`reports_sent`].
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SentReport {
    surface: String,
    stale_since_ms: Option<u64>,
    /// The paths' mark the report carried.
    #[serde(default)]
    paths: Option<u64>,
}

#[derive(Debug, Serialize)]
struct ReportsOutput {
    /// The `POST /v1/me/capture-reports` body, or `null` when the relay already knows everything.
    body: Option<String>,
    /// What to hand to [`reports_sent`] once the relay answered 2xx.
    sent: Vec<SentReport>,
}

impl Core {
    /// `{now_ms, fast}` → `{body, sent}`: what the relay should be told about surfaces whose adapter went stale
    /// (or reads pages again) since it was last told (see [`health::pending_reports`]).
    pub fn capture_reports(&self, input: &str) -> Result<String> {
        let i: Call = parse(input)?;
        let now_ms = need(i.now_ms, "now_ms")?;
        let pending = health::pending_reports(&self.stats, now_ms, i.fast);
        if pending.is_empty() {
            return to_json(&ReportsOutput {
                body: None,
                sent: Vec::new(),
            });
        }
        let reports = pending
            .iter()
            .map(|p| crate::health::CaptureReport {
                surface: p.surface.clone(),
                stale_since: p.stale_since_ms.map(|ms| crate::time::rfc3339(millis(ms))),
                rule: p.rule.clone(),
                paths: p.paths.as_ref().map(|(_, r)| r.clone()),
            })
            .collect();
        let body = to_json(&crate::health::CaptureReports { reports })?;
        to_json(&ReportsOutput {
            body: Some(body),
            sent: pending
                .into_iter()
                .map(|p| SentReport {
                    surface: p.surface,
                    stale_since_ms: p.stale_since_ms,
                    paths: p.paths.map(|(m, _)| m),
                })
                .collect(),
        })
    }
}

#[derive(Debug, Serialize)]
struct StatsChanged {
    /// The stats changed (see `changes`).
    changed: bool,
}

impl Core {
    /// `{sent}` → `{changed, changes}`: the relay accepted the reports of [`Core::capture_reports`].
    pub fn reports_sent(&mut self, input: &str) -> Result<String> {
        let mut i: Call = parse(input)?;
        let sent = need(i.sent.take(), "sent")?;
        self.changing(|core| {
            let mut changed = false;
            for r in &sent {
                changed |= core
                    .stats
                    .mark_reported(&r.surface, r.stale_since_ms, r.paths);
            }
            Ok(StatsChanged { changed })
        })
    }
}

#[derive(Debug, Serialize)]
struct Toggled {
    /// Nothing was changed: see [`PageState::stale`].
    stale: bool,
    state: CaptureState,
    skipped: SkipList,
    /// `skipped` changed: persist it.
    changed: bool,
}

/// The badge was clicked: `{url, tab_url, claimed_url, now_ms, settings, skipped}` → `{stale, state, skipped,
/// changed}`. Skips the page's conversation, or resumes it when it was skipped; a page without a conversation
/// (or a stale one) changes nothing.
pub fn toggle_skip(input: &str) -> Result<String> {
    let mut i = PageInput::parse(input)?;
    let (surface, p) = page(Registry::builtin(), &i);
    let Some(thread_id) = p.thread_id.filter(|_| surface.is_some()) else {
        return to_json(&Toggled {
            stale: p.stale,
            state: policy::capture_state(&i.settings, surface, None, &i.skipped),
            skipped: i.skipped,
            changed: false,
        });
    };
    i.skipped.toggle(&thread_id);
    to_json(&Toggled {
        stale: false,
        state: policy::capture_state(&i.settings, surface, Some(&thread_id), &i.skipped),
        skipped: i.skipped,
        changed: true,
    })
}

#[derive(Debug, Serialize)]
struct ForgottenOutput {
    skipped: SkipList,
    /// Queued or held items of the thread that were dropped.
    dropped: usize,
    changed: bool,
}

impl Core {
    /// The relay forgot a thread at the user's request: `{thread_id, skipped}` → `{skipped, dropped, changed,
    /// changes}`. Nothing of the thread still waiting here is sent, and the conversation is skipped from now on (the
    /// badge resumes it), so what the page still shows is not captured again.
    pub fn forgotten(&mut self, input: &str) -> Result<String> {
        let mut i: Call = parse(input)?;
        let thread_id = need(i.thread_id.take(), "thread_id")?;
        let hyphenated = thread_id.len() == 36
            && thread_id.bytes().enumerate().all(|(n, b)| {
                if matches!(n, 8 | 13 | 18 | 23) {
                    b == b'-'
                } else {
                    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
                }
            });
        if !hyphenated {
            return Err(ApiCallError::Refused(format!(
                "thread_id {} is not a thread id",
                crate::wire::quote_safely(&thread_id, 60)
            )));
        }
        self.changing(|core| {
            let dropped = core.queue.drop_thread(&thread_id);
            let skipped = i.skipped.skip(&thread_id);
            Ok(ForgottenOutput {
                skipped: i.skipped,
                dropped,
                changed: dropped > 0 || skipped,
            })
        })
    }
}

/// `["regex", ...]` → `[{index, pattern, message}]` of the invalid ones.
pub fn validate_patterns(input: &str) -> Result<String> {
    let patterns: Vec<String> = parse(input)?;
    to_json(&Redactor::new(&patterns).1)
}

#[derive(Debug, Serialize)]
struct PatternsOutput {
    /// The non-empty lines, trimmed (stored as `patterns`).
    patterns: Vec<String>,
    /// The lines the core compiled (stored as `activePatterns`: only these reach the capture path).
    active: Vec<String>,
    errors: Vec<PatternError>,
}

/// The popup saved its redaction box: `{patterns: [line, ...]}` → `{patterns, active, errors}`.
pub fn set_patterns(input: &str) -> Result<String> {
    let i: Call = parse(input)?;
    let patterns = need(i.patterns, "patterns")?;
    if patterns.len() > MAX_PATTERN_LINES {
        return Err(ApiCallError::Refused(format!(
            "{} pattern lines, more than {MAX_PATTERN_LINES}",
            patterns.len()
        )));
    }
    to_json(&compile_patterns(&patterns))
}

/// The non-empty lines, trimmed, and those of them the core's regex engine compiles.
fn compile_patterns(lines: &[String]) -> PatternsOutput {
    let patterns: Vec<String> = lines
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    let errors = Redactor::new(&patterns).1;
    let active = patterns
        .iter()
        .enumerate()
        .filter(|(n, _)| !errors.iter().any(|e| e.index == *n))
        .map(|(_, p)| p.clone())
        .collect();
    PatternsOutput {
        patterns,
        active,
        errors,
    }
}

/// The `storage.local` keys an older version kept the worker's state (and, before that, the token) under.
const LEGACY_KEYS: [&str; 10] = [
    "settings",
    "deviceId",
    "queue",
    "seen",
    "skipped",
    "stats",
    "patterns",
    "activePatterns",
    "token",
    "testFastFlush",
];

/// The worker's state as an older version kept it: one record per key, the whole queue and the whole dedupe set
/// among them (which [`Core::load`] takes as `legacy_queue` and `legacy_seen`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WorkerState {
    settings: Settings,
    #[serde(skip_serializing_if = "Option::is_none")]
    device_id: Option<String>,
    queue: QueueState,
    seen: SeenWire,
    skipped: SkipList,
    stats: Stats,
    patterns: Vec<String>,
    active_patterns: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Migrated {
    state: WorkerState,
    /// `storage.local` keys to delete once `state` is written.
    remove: Vec<String>,
    /// What was found but not taken, for the log.
    refused: Vec<&'static str>,
}

/// The one move of the worker's state out of `storage.local` (which content scripts can write in Firefox) into
/// the extension origin's IndexedDB: `{local, token_relay}` → `{state: {settings, deviceId, queue, seen, skipped,
/// stats, patterns, activePatterns}, remove, refused}`. Nothing that decides where data goes is taken from
/// `local`: not a `token` (an older version's; the user pairs again) and not `settings.relayUrl` (the relay of
/// the IndexedDB token record, else the default, takes its place). Redaction patterns are compiled again rather
/// than trusted as active.
pub fn migrate_legacy(input: &str) -> Result<String> {
    let i: Call = parse(input)?;
    let raw = |k: &str| i.local.get(k).copied();
    let mut refused = Vec::new();
    let mut settings = stored::<Settings>(raw("settings"));
    if raw("settings").is_some_and(|s| s.get().contains("\"relayUrl\"")) {
        refused.push("settings.relayUrl");
    }
    settings.relay_url = i
        .token_relay
        .as_deref()
        .and_then(settings::parse_relay_url)
        .map_or_else(|| settings::DEFAULT_RELAY.to_owned(), |r| r.base);
    if raw("token").is_some() {
        refused.push("token");
        // It was paired: say "sign in again" rather than "not paired".
        settings.ever_paired = true;
    }
    let device_id = stored::<String>(raw("deviceId"));
    let lines: Vec<String> = stored(raw("patterns"));
    let compiled = compile_patterns(&lines[..lines.len().min(MAX_PATTERN_LINES)]);
    let remove = LEGACY_KEYS
        .iter()
        .filter(|k| i.local.contains_key(k))
        .map(|k| (*k).to_owned())
        .collect();
    to_json(&Migrated {
        state: WorkerState {
            settings,
            device_id: Some(device_id).filter(|d| !d.is_empty() && d.len() <= 64),
            queue: stored(raw("queue")),
            seen: stored(raw("seen")),
            skipped: stored(raw("skipped")),
            stats: stored(raw("stats")),
            patterns: compiled.patterns,
            active_patterns: compiled.active,
        },
        remove,
        refused,
    })
}

/// `{text, patterns}` → the redacted text (as a JSON string).
pub fn redact(input: &str) -> Result<String> {
    let i: Call = parse(input)?;
    let text = need(i.text, "text")?;
    let patterns = i.patterns.unwrap_or_default();
    to_json(&Redactor::cached(&patterns).redact(&text))
}

pub use policy::RawTurn;

/// A content script's snapshot of turns and everything needed to queue it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaptureInput<'a> {
    /// The sending frame's URL as the browser reports it; `tab_url` and `claimed_url` as in [`PageRequest`].
    url: String,
    #[serde(default)]
    tab_url: Option<String>,
    #[serde(default)]
    claimed_url: Option<String>,
    #[serde(default)]
    title: Option<String>,
    /// As the content script sent them: checked here against the limits in [`policy`].
    #[serde(borrow)]
    turns: &'a RawValue,
    /// The capture time.
    now_ms: u64,
    #[serde(default)]
    settings: Settings,
    #[serde(default)]
    skipped: SkipList,
    /// The user's valid redaction patterns.
    #[serde(default)]
    patterns: Vec<String>,
    device_id: String,
    app_version: String,
    #[serde(default)]
    fast: bool,
    /// Set for a body the page itself received (then `turns` is `[]`).
    #[serde(default)]
    network: Option<NetworkBody>,
}

impl Core {
    /// A content script's snapshot: `{url, tab_url, claimed_url, title, turns: [{role, text, message_key,
    /// ordinal_raw}], now_ms, settings, skipped, patterns, device_id, app_version, fast}` →
    /// `{invalid, stale, state, changed, surface, thread_id, queued, already_seen, dropped_empty, dropped_invalid,
    /// overflowed, near_full, queue_length, changes}`. Checks the turns, then runs the capture pipeline
    /// ([`pipeline::capture`]).
    ///
    /// A body the page itself received: the same input with `network` set and `turns: []`, and `parsed`, the network
    /// module's answer for the body (`{conversation_id, turns}`) when it parsed. Called twice by the worker: without
    /// `parsed` it only says whether to parse the body (`network.parse`: a known endpoint of the page's own
    /// surface); with it, the turns go through the same capture as a DOM read, as `path: "network"` items, into the
    /// page's conversation only.
    pub fn capture(&mut self, input: &str, parsed: Option<&str>) -> Result<String> {
        let input: CaptureInput = parse(input)?;
        let offered = match &input.network {
            None => match policy::parse_turns(input.turns.get()) {
                Ok(turns) => Offered::Dom(turns),
                Err(e) => {
                    return self.changing(|core| {
                        Ok(Captured {
                            invalid: Some(e),
                            queue_length: core.queue.len(),
                            ..Captured::default()
                        })
                    });
                }
            },
            Some(net) => Offered::Network(
                net,
                match parsed.map(serde_json::from_str::<ParsedBody>) {
                    None => Parsed::NotYet,
                    Some(Ok(body)) => Parsed::Body(body),
                    Some(Err(_)) => Parsed::Invalid,
                },
            ),
        };
        let request = Capture {
            page: PageRequest {
                url: &input.url,
                tab_url: input.tab_url.as_deref(),
                claimed_url: input.claimed_url.as_deref(),
                now_ms: input.now_ms,
            },
            title: input.title.as_deref(),
            settings: &input.settings,
            skipped: &input.skipped,
            patterns: &input.patterns,
            client: ClientInfo {
                app_version: input.app_version.clone(),
                device_id: input.device_id.clone(),
            },
            fast: input.fast,
        };
        self.changing(|core| Ok(pipeline::capture(core, &request, offered)))
    }
}

impl Core {
    /// `{now_ms, fast}` → `{action: send, ids, body} | {action: wait, ms} | {action: idle} | {action: sign_in_required}`.
    pub fn next_batch(&self, input: &str) -> Result<String> {
        let i: Call = parse(input)?;
        let now_ms = need(i.now_ms, "now_ms")?;
        let next: Next = self.queue.next_batch(now_ms, &QueueConfig::of(i.fast));
        to_json(&next)
    }
}

#[derive(Debug, Serialize)]
struct OutcomeOutput {
    applied: Applied,
    queue_length: usize,
}

impl Core {
    /// `{ids, status, body, retry_after, error, now_ms, fast}` (status 0: the request did not complete) →
    /// `{applied: {wipe_token, acknowledged, rejected, retry_in_ms}, queue_length, changes}`.
    pub fn on_outcome(&mut self, input: &str) -> Result<String> {
        let mut i: Call = parse(input)?;
        let now_ms = need(i.now_ms, "now_ms")?;
        let status = need(i.status, "status")?;
        let ids = need(i.ids.take(), "ids")?;
        let outcome = if status == 0 {
            Outcome::Network {
                message: std::mem::take(&mut i.error),
            }
        } else {
            Outcome::Http {
                status,
                body: std::mem::take(&mut i.body),
                retry_after_s: i.retry_after.as_deref().and_then(|h| h.trim().parse().ok()),
            }
        };
        self.changing(|core| {
            let applied = core
                .queue
                .on_outcome(&ids, &outcome, now_ms, &QueueConfig::of(i.fast));
            core.stats.on_outcome(&applied, now_ms);
            Ok(OutcomeOutput {
                applied,
                queue_length: core.queue.len(),
            })
        })
    }
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum PairRequest {
    Send { relay: String, body: String },
    Refused { error: String },
}

#[derive(Debug, Serialize)]
struct PairBody<'a> {
    code: &'a str,
    device_name: &'a str,
}

/// The popup's Pair button: `{relay_url, code, settings, user_agent, allow_plain_http}` → `{relay, body}` (the
/// relay base to POST `/v1/pair` under, and the body to send) or `{error}` for the user. The relay must be
/// `https`, or plain `http` on a loopback host, unless `allow_plain_http`.
pub fn pair_request(input: &str) -> Result<String> {
    let i: Call = parse(input)?;
    let code = need(i.code.as_deref(), "code")?;
    let typed = i.relay_url.trim();
    let relay = settings::relay_base(
        if typed.is_empty() {
            &i.settings.relay_url
        } else {
            typed
        },
        i.allow_plain_http,
    );
    let code = code.trim();
    to_json(&match relay {
        Err(e) => PairRequest::Refused {
            error: e.to_string(),
        },
        Ok(_) if code.is_empty() || code.len() > 64 => PairRequest::Refused {
            error: "Enter the pairing code that `personkit pair` printed".to_owned(),
        },
        Ok(relay) => PairRequest::Send {
            relay,
            body: to_json(&PairBody {
                code,
                device_name: if i.user_agent.contains("Firefox") {
                    "browser Firefox"
                } else {
                    "browser Chromium"
                },
            })?,
        },
    })
}

/// The part of the relay's pairing answer the extension keeps.
#[derive(Debug, Deserialize)]
struct Token {
    token: String,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum PairResult {
    Paired { token: String },
    Failed { error: String },
}

/// The relay answered `/v1/pair`: `{status, body}` → `{token}`, or `{error}` for the user (the relay's
/// `{code, message, hint}` when it sent one).
pub fn pair_response(input: &str) -> Result<String> {
    let i: Call = parse(input)?;
    let status = need(i.status, "status")?;
    if (200..300).contains(&status)
        && let Ok(t) = serde_json::from_str::<Token>(&i.body)
    {
        return to_json(&PairResult::Paired { token: t.token });
    }
    let error = match serde_json::from_str::<wire::ApiError>(&i.body) {
        Ok(e) => format!("Pairing failed: {}. {}", e.message, e.hint),
        Err(_) => format!("Pairing failed: HTTP {}.", status),
    };
    to_json(&PairResult::Failed { error })
}

#[derive(Debug, Serialize)]
struct Paired {
    settings: Settings,
}

impl Core {
    /// `{settings, relay}` → `{settings, changes}` after a successful pairing with `relay`: sending is allowed
    /// again, right away, and the settings name that relay.
    pub fn on_paired(&mut self, input: &str) -> Result<String> {
        let mut i: Call = parse(input)?;
        let relay_in = need(i.relay.take(), "relay")?;
        let relay = settings::parse_relay_url(&relay_in)
            .ok_or_else(|| ApiCallError::Refused(format!("`{}` is not a relay URL", relay_in)))?
            .base;
        self.changing(|core| {
            core.queue.on_paired();
            Ok(Paired {
                settings: i.settings.paired_with(&relay),
            })
        })
    }
}

#[derive(Debug, Serialize)]
struct QueueSummary {
    queue_length: usize,
    held: usize,
    held_reasons: Vec<HeldReason>,
    held_dropped: u64,
    sent: u64,
    near_full: bool,
    sign_in_required: bool,
    last_error: Option<super::queue::LastError>,
}

fn summary(q: &QueueState, fast: bool) -> QueueSummary {
    QueueSummary {
        queue_length: q.len(),
        held: q.held.len(),
        held_reasons: q.held_reasons(),
        held_dropped: q.held_dropped,
        sent: q.sent,
        near_full: q.near_full(&QueueConfig::of(fast)),
        sign_in_required: q.auth == super::queue::Auth::SignInRequired,
        last_error: q.last_error.clone(),
    }
}

impl Core {
    /// `{fast}` → `{queue_length, held, held_reasons: [{code, message, count, oldest_ms}], held_dropped, sent,
    /// near_full, sign_in_required, last_error}`.
    pub fn queue_summary(&self, input: &str) -> Result<String> {
        let i: Call = parse(input)?;
        to_json(&summary(&self.queue, i.fast))
    }
}

/// What the popup shows (camelCase: popup.js reads it as it is).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PopupState {
    settings: Settings,
    paired: bool,
    sign_in_required: bool,
    queue_length: usize,
    held: usize,
    held_reasons: Vec<HeldReason>,
    held_dropped: u64,
    /// Days a held turn is kept before it is dropped.
    held_days: u64,
    sent: u64,
    near_full: bool,
    last_error: Option<super::queue::LastError>,
    relay_reachable: bool,
    patterns: Vec<String>,
    pattern_errors: Vec<PatternError>,
    surfaces: Vec<SurfaceRow>,
    /// Conversations whose capture is incomplete (see [`super::progress::incomplete`]).
    incomplete: Vec<super::progress::IncompleteRow>,
}

impl Core {
    /// `{now_ms, settings, fast, patterns, paired, relay_health}` → the popup's state: settings, pairing
    /// (`signInRequired` after a 401, or once paired and the token is gone), the queue's counts, the pattern errors,
    /// and one row per surface with its traffic light (see [`health::surface_rows`]).
    pub fn popup_state(&self, input: &str) -> Result<String> {
        let i: Call = parse(input)?;
        let (now_ms, paired) = (need(i.now_ms, "now_ms")?, need(i.paired, "paired")?);
        let patterns = i.patterns.unwrap_or_default();
        let relay = i
            .relay_health
            .as_deref()
            .and_then(health::parse_relay_health);
        let q = summary(&self.queue, i.fast);
        to_json(&PopupState {
            paired,
            sign_in_required: q.sign_in_required || (!paired && i.settings.ever_paired),
            queue_length: q.queue_length,
            held: q.held,
            held_reasons: q.held_reasons,
            held_dropped: q.held_dropped,
            held_days: QueueConfig::of(i.fast).held_ttl_ms / (24 * 3_600_000),
            sent: q.sent,
            near_full: q.near_full,
            last_error: q.last_error,
            relay_reachable: relay.is_some(),
            pattern_errors: Redactor::new(&patterns).1,
            incomplete: super::progress::incomplete(Registry::builtin(), &self.stats, &self.queue),
            surfaces: health::surface_rows(
                Registry::builtin(),
                &i.settings,
                &self.stats,
                relay.as_ref(),
                now_ms,
                i.fast,
            ),
            patterns,
            settings: i.settings,
        })
    }
}

#[derive(Debug, Serialize)]
struct MaintainOutput {
    /// Held items sent back to the queue for their one retry.
    requeued: usize,
    expired: usize,
    /// The queue changed (see `changes`).
    changed: bool,
}

impl Core {
    /// Upkeep of the held items: `{now_ms, app_version, relay, relay_health, fast}` →
    /// `{requeued, expired, changed, changes}`. Drops held items past their time and gives those held under another
    /// extension version or another relay (base, version or limits) their one retry; see
    /// [`QueueState::maintain`].
    pub fn maintain(&mut self, input: &str) -> Result<String> {
        let mut i: Call = parse(input)?;
        let now_ms = need(i.now_ms, "now_ms")?;
        let app_version = need(i.app_version.take(), "app_version")?;
        let relay = i
            .relay
            .as_deref()
            .zip(i.relay_health.as_deref())
            .and_then(|(base, body)| super::queue::relay_fingerprint(base, body));
        self.changing(|core| {
            let m = core.queue.maintain(
                now_ms,
                &app_version,
                relay.as_deref(),
                &QueueConfig::of(i.fast),
            );
            Ok(MaintainOutput {
                requeued: m.requeued,
                expired: m.expired,
                changed: m.changed,
            })
        })
    }
}

#[derive(Debug, Serialize)]
struct ClearHeldOutput {
    cleared: usize,
}

impl Core {
    /// The popup's "Clear held" button: `{}` → `{cleared, changes}` with every held item dropped.
    pub fn clear_held(&mut self, input: &str) -> Result<String> {
        let _: Call = parse(input)?;
        self.changing(|core| {
            Ok(ClearHeldOutput {
                cleared: core.queue.clear_held(),
            })
        })
    }
}

/// `{settings, session, intent, patch, now_ms}` → `{settings, processed, changed, applied, remove, error,
/// ignored}`: every intent recorded in `session` and the messaged one applied once, oldest first (see
/// [`settings::apply_intents`]). Persist `settings` when `changed`; write `applied` as `settingsApplied` and
/// delete `remove` when `processed`; report `error` to the sender of the message.
pub fn apply_intents(input: &str) -> Result<String> {
    let i: Call = parse(input)?;
    let now_ms = need(i.now_ms, "now_ms")?;
    let extra = match (&i.intent, i.patch) {
        (Some(k), Some(p)) => Some((k.as_str(), p)),
        (None, None) => None,
        _ => {
            return Err(ApiCallError::Refused(
                "`intent` and `patch` come together".into(),
            ));
        }
    };
    to_json(&settings::apply_intents(
        &i.settings,
        &i.session,
        extra,
        now_ms,
        Registry::builtin(),
    ))
}

/// The flush delay (ms) the worker waits after an enqueue.
pub fn flush_delay_ms(fast: bool) -> u64 {
    QueueConfig::of(fast).flush_delay_ms
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// 2026-11-22T10:00:00.000Z.
    const NOW: u64 = 1_795_341_600_000;

    fn call(f: fn(&str) -> Result<String>, v: Value) -> Value {
        serde_json::from_str(&f(&v.to_string()).unwrap()).unwrap()
    }

    /// A [`Core`] call in one JSON object, the state in and out beside the call's own keys: the core is loaded from
    /// the input's `queue`, `seen` and `stats` (as an older version's whole-state records, which also checks that
    /// loading them keeps everything), and the output carries the state after the call under the same keys.
    fn stateful(input: &str, f: impl FnOnce(&mut Core, &str) -> Result<String>) -> Result<String> {
        let mut v: Value = serde_json::from_str(input)?;
        let mut take = |k: &str| {
            v.as_object_mut()
                .and_then(|o| o.remove(k))
                .unwrap_or(json!({}))
        };
        let (queue, seen, stats) = (take("queue"), take("seen"), take("stats"));
        let mut core = Core::load(
            &json!({"legacy_queue": queue, "legacy_seen": seen, "stats": stats}).to_string(),
        )?;
        let mut out: Value = serde_json::from_str(&f(&mut core, &v.to_string())?)?;
        if let Some(o) = out.as_object_mut() {
            o.insert("queue".into(), serde_json::to_value(&core.queue)?);
            o.insert(
                "seen".into(),
                json!({"capacity": 20_000, "keys": core.seen.keys().collect::<Vec<_>>()}),
            );
            o.insert("stats".into(), serde_json::to_value(&core.stats)?);
        }
        Ok(out.to_string())
    }

    fn capture(input: &str) -> Result<String> {
        stateful(input, |c, i| c.capture(i, None))
    }
    fn next_batch(input: &str) -> Result<String> {
        stateful(input, |c, i| c.next_batch(i))
    }
    fn on_outcome(input: &str) -> Result<String> {
        stateful(input, |c, i| c.on_outcome(i))
    }
    fn on_paired(input: &str) -> Result<String> {
        stateful(input, |c, i| c.on_paired(i))
    }
    fn queue_summary(input: &str) -> Result<String> {
        stateful(input, |c, i| c.queue_summary(i))
    }
    fn popup_state(input: &str) -> Result<String> {
        stateful(input, |c, i| c.popup_state(i))
    }
    fn maintain(input: &str) -> Result<String> {
        stateful(input, |c, i| c.maintain(i))
    }
    fn clear_held(input: &str) -> Result<String> {
        stateful(input, |c, i| c.clear_held(i))
    }
    fn forgotten(input: &str) -> Result<String> {
        stateful(input, |c, i| c.forgotten(i))
    }
    fn probe(input: &str) -> Result<String> {
        stateful(input, |c, i| c.probe(i))
    }
    fn capture_reports(input: &str) -> Result<String> {
        stateful(input, |c, i| c.capture_reports(i))
    }
    fn reports_sent(input: &str) -> Result<String> {
        stateful(input, |c, i| c.reports_sent(i))
    }

    fn chatgpt_on() -> Value {
        json!({"enabled": {"browser-ext:chatgpt": true}})
    }

    fn snapshot(turns: Value, queue: Value, seen: Value) -> Value {
        json!({
            "url": "https://chatgpt.com/c/abc-1?x=secret",
            "title": "My chat",
            "turns": turns,
            "patterns": ["ACME-\\d+", "(bad"],
            "device_id": "dev-1",
            "app_version": "0.1.0",
            "now_ms": NOW,
            "settings": chatgpt_on(),
            "queue": queue,
            "seen": seen,
        })
    }

    /// A network body as the worker passes it: `parsed` is what `network::parse_network_json` answered.
    fn net_call(
        url: &str,
        surface: &str,
        endpoint: &str,
        method: &str,
        body: Option<&[u8]>,
    ) -> Value {
        let mut input = snapshot(json!([]), json!({}), json!({}));
        input["url"] = json!(url);
        input["network"] = json!({"surface": surface, "kind": if method == "GET" { "conversation" } else { "stream" },
            "endpoint": endpoint, "method": method});
        let mut ok = None;
        if let Some(b) = body {
            let kind = if method == "GET" {
                "conversation"
            } else {
                "stream"
            };
            let parsed: Value =
                serde_json::from_str(&crate::network::parse_network_json(surface, kind, b))
                    .unwrap();
            if parsed["ok"].is_object() {
                ok = Some(parsed["ok"].to_string());
            } else {
                input["network"]["parse_error"] = parsed["error"]["code"].clone();
            }
        }
        let out = stateful(&input.to_string(), |c, i| c.capture(i, ok.as_deref())).unwrap();
        serde_json::from_str(&out).unwrap()
    }

    const NET: &str = "../shared/tests/fixtures/network";

    fn stream_answer() -> Vec<u8> {
        std::fs::read(format!(
            "{}/{NET}/chatgpt/stream-answer/stream.sse",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    #[test]
    fn network_body_lands_only_in_the_pages_conversation_from_a_known_endpoint() {
        let cid = "6740a3f2-1c9e-8001-b2a4-3f0e8d7c1a55";
        let page = format!("https://chatgpt.com/c/{cid}");
        let ep = "https://chatgpt.com/backend-api/f/conversation";
        let body = stream_answer();
        // First call: only whether to parse.
        let first = net_call(&page, "chatgpt", ep, "POST", None);
        assert_eq!(first["network"]["parse"], true, "{first}");
        assert_eq!(first["queued"], 0);
        // Parsed: both turns queued as network-path items with the site's ids.
        let out = net_call(&page, "chatgpt", ep, "POST", Some(&body));
        assert_eq!(out["queued"], 2, "{out}");
        let item: Value =
            serde_json::from_str(out["queue"]["items"][1]["json"].as_str().unwrap()).unwrap();
        assert_eq!(item["turn"]["path"], "network");
        assert_eq!(
            item["turn"]["message_key"],
            "a1b2c3d4-0002-4000-8000-000000000002"
        );
        assert_eq!(
            item["turn"]["parent_key"],
            "a1b2c3d4-0001-4000-8000-000000000001"
        );
        assert_eq!(item["conversation_id"], cid);
        wire::parse_observation(&item).unwrap();
        assert!(
            out["stats"]["browser-ext:chatgpt"]["networkMs"].is_number(),
            "{out}"
        );

        // Another conversation's page: the body names its own, refused.
        let other = net_call(
            "https://chatgpt.com/c/0b7d2e94",
            "chatgpt",
            ep,
            "POST",
            Some(&body),
        );
        assert_eq!(
            other["network"]["refused"], "foreign_conversation",
            "{other}"
        );
        assert_eq!(other["queued"], 0);
        // No conversation in the URL yet: wait.
        let new_chat = net_call("https://chatgpt.com/", "chatgpt", ep, "POST", Some(&body));
        assert_eq!(new_chat["network"]["waiting"], true, "{new_chat}");
        // Unknown endpoint, another host, another surface's claim.
        for (surface, endpoint) in [
            ("chatgpt", "https://chatgpt.com/backend-api/other"),
            ("chatgpt", "https://evil.example/backend-api/f/conversation"),
            ("claude", ep),
        ] {
            let r = net_call(&page, surface, endpoint, "POST", Some(&body));
            assert_eq!(r["queued"], 0, "{r}");
            assert!(r["network"]["refused"].is_string(), "{r}");
        }
        // A body the parser does not understand: recorded for the surface, nothing queued.
        let bad = net_call(
            &page,
            "chatgpt",
            ep,
            "POST",
            Some(b"event: delta\ndata: <html>\n\n"),
        );
        assert_eq!(bad["network"]["unparsed"], "stream_unparsed", "{bad}");
        assert_eq!(
            bad["stats"]["browser-ext:chatgpt"]["unparsed"],
            "stream_unparsed"
        );
        assert_eq!(bad["changed"], true);
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
        assert_eq!(out["state"], "capturing");
        assert_eq!(out["queued"], 2);
        assert_eq!(out["dropped_empty"], 1);
        assert_eq!(out["queue_length"], 2);
        assert_eq!(out["changed"], true);
        assert_eq!(out["stats"]["browser-ext:chatgpt"]["captured"], 2);
        let items = out["queue"]["items"].as_array().unwrap();
        let first: Value = serde_json::from_str(items[0]["json"].as_str().unwrap()).unwrap();
        let first = &first;
        assert_eq!(
            first["turn"]["content"],
            "Here is my key API_KEY=[REDACTED:env] and [REDACTED:custom]"
        );
        assert_eq!(first["turn"]["ordinal"], 0);
        // ChatGPT numbers its turns itself (`conversation-turn-N`): the ordinal names a slot (wire v2).
        assert_eq!(first["turn"]["ordinal_source"], "site");
        assert_eq!(first["turn"]["message_key"], "m1");
        assert_eq!(first["url"], "https://chatgpt.com/c/abc-1");
        assert_eq!(first["source_surface"], "browser-ext:chatgpt");
        assert_eq!(first["conversation_id"], "abc-1");
        assert_eq!(first["turn"]["captured_at"], "2026-11-22T10:00:00.000Z");
        // The one hash and thread-id functions were used: the relay's validation accepts the item.
        wire::parse_observation(first).unwrap();
        let second: Value = serde_json::from_str(items[1]["json"].as_str().unwrap()).unwrap();
        assert_eq!(second["turn"]["content"], "Noted.");
        // No ordinal, no ordinal source; the path is never sent by the DOM path (the surface implies it).
        assert!(second["turn"].get("ordinal_source").is_none());
        assert!(second["turn"].get("path").is_none());

        // Same snapshot again, with the persisted state (stats included): nothing new.
        let mut same = snapshot(turns, out["queue"].clone(), out["seen"].clone());
        same["stats"] = out["stats"].clone();
        let again = call(capture, same);
        assert_eq!(again["queued"], 0);
        assert_eq!(again["already_seen"], 2);
        assert_eq!(again["queue_length"], 2);
        assert_eq!(again["changed"], false);
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
        let out = call(capture, input.clone());
        assert_eq!(out["queued"], 0);
        assert_eq!(out["state"], "off");
        input["url"] = json!("https://evil.example/c/abc");
        let out = call(capture, input);
        assert_eq!(out["queued"], 0);
        assert_eq!(out["surface"], Value::Null);
    }

    /// Regression (hardening issue, item 12): a `capture` naming `https://chatgpt.com/c/someone-else`, sent from
    /// a tab at `/c/mine`, was queued into that other conversation's thread. The conversation now comes only from
    /// the browser's record of the sender; a claim that disagrees queues nothing.
    #[test]
    fn the_conversation_comes_from_the_browser_record_never_from_the_message() {
        let mut input = snapshot(
            json!([{"role": "user", "text": "hi"}]),
            json!({}),
            json!({}),
        );
        let thread = |c: &str| crate::ids::thread_id("browser-ext:chatgpt", c).to_string();
        input["url"] = json!("https://chatgpt.com/c/mine");
        for claim in [
            "https://chatgpt.com/c/someone-else",
            "https://claude.ai/chat/someone-else",
            "https://chatgpt.com/",
            "not a url",
        ] {
            input["claimed_url"] = json!(claim);
            let out = call(capture, input.clone());
            assert_eq!(
                (out["stale"].as_bool(), out["queued"].as_u64()),
                (Some(true), Some(0)),
                "{claim}"
            );
            assert_eq!(out["thread_id"], Value::Null);
            assert_eq!(out["changed"], false);
            for f in [page_state, toggle_skip] {
                let p = call(
                    f,
                    json!({"url": "https://chatgpt.com/c/mine", "claimed_url": claim, "now_ms": NOW,
                           "settings": chatgpt_on()}),
                );
                assert_eq!(p["stale"], true, "{claim}: {p}");
                assert_ne!(p["thread_id"], json!(thread("someone-else")));
                if let Some(skipped) = p.get("skipped") {
                    assert_eq!(skipped, &json!([]));
                }
            }
        }
        // The claim agrees with the frame: the frame's URL is the page (query and fragment still dropped).
        input["claimed_url"] = json!("https://chatgpt.com/c/mine#x");
        let out = call(capture, input.clone());
        assert_eq!(
            (out["stale"].as_bool(), out["queued"].as_u64()),
            (Some(false), Some(1))
        );
        assert_eq!(out["thread_id"], json!(thread("mine")));
        // The frame's record lags a same-document navigation the tab's record already shows: the tab's is used.
        input["url"] = json!("https://chatgpt.com/c/before");
        input["tab_url"] = json!("https://chatgpt.com/c/mine");
        input["turns"] = json!([{"role": "user", "text": "after the navigation"}]);
        let out = call(capture, input.clone());
        assert_eq!(out["thread_id"], json!(thread("mine")));
        assert_eq!(out["queued"], 1);
        let body = call(next_batch, json!({"queue": out["queue"], "now_ms": NOW}))["body"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(body.contains("https://chatgpt.com/c/mine\""), "{body}");
        assert!(!body.contains("/c/before"), "{body}");
    }

    /// A redesigned site: the conversation's text is on screen but the adapter reads no turn (or one role only);
    /// after a while the surface's light turns yellow, then red, with the reason `adapter_stale`; a good read
    /// clears it. Pages without a conversation, or of a surface the user does not capture, count for nothing.
    #[test]
    fn a_page_the_adapter_cannot_read_turns_the_surface_stale() {
        let url = "https://grok.com/c/abc123";
        let on = json!({"enabled": {"browser-ext:grok": true}});
        let probe = |stats: &Value, now: u64, p: Value, settings: &Value, url: &str| {
            call(
                probe,
                json!({"url": url, "now_ms": now, "settings": settings, "stats": stats, "probe": p}),
            )
        };
        let broken = json!({"text_present": true, "roots": 0, "users": 0, "assistants": 0});
        let one_role =
            json!({"text_present": true, "roots": 4, "users": 4, "assistants": 0, "rank": 1});
        let good =
            json!({"text_present": true, "roots": 4, "users": 2, "assistants": 2, "rank": 0});
        let nothing_shown = json!({"text_present": false, "roots": 0, "users": 0, "assistants": 0});
        // Not counted: a page of no conversation, a surface that is off, a page without text.
        for (u, settings, p) in [
            ("https://grok.com/", &on, &broken),
            (url, &json!({}), &broken),
            (url, &on, &nothing_shown),
        ] {
            let out = probe(&json!({}), NOW, p.clone(), settings, u);
            assert!(
                out["stats"]["browser-ext:grok"]["staleSinceMs"].is_null(),
                "{u} {p}"
            );
            assert!(out["reason"].is_null(), "{u} {p}");
        }
        // The page's own failed read is said at once ("0 of ? read"); the surface is not stale yet.
        let out = probe(&json!({}), NOW, broken.clone(), &on, url);
        assert_eq!(
            (out["changed"].as_bool(), out["reason"].as_str()),
            (Some(true), Some(crate::health::UNREAD))
        );
        let stats = out["stats"].clone();
        let minutes = |m: u64| NOW + m * 60_000;
        let out = probe(&stats, minutes(3), one_role, &on, url);
        assert_eq!(out["reason"], "adapter_stale");
        assert_eq!(out["stats"]["browser-ext:grok"]["staleSinceMs"], NOW);
        assert_eq!(
            out["stats"]["browser-ext:grok"]["lastRule"],
            "message_roots[1]"
        );
        let light_at = |stats: &Value, now: u64| {
            let p = call(
                popup_state,
                json!({"now_ms": now, "settings": on, "stats": stats, "paired": true}),
            );
            let row = p["surfaces"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["id"] == "browser-ext:grok")
                .unwrap()
                .clone();
            (
                row["light"].as_str().unwrap().to_owned(),
                row["reason"].as_str().map(str::to_owned),
            )
        };
        let mut fresh = out["stats"].clone();
        // A turn accepted a moment ago would be green; the stale adapter overrides it.
        fresh["browser-ext:grok"]["lastAcceptedMs"] = json!(minutes(3));
        assert_eq!(
            light_at(&fresh, minutes(3)),
            ("yellow".into(), Some("adapter_stale".into()))
        );
        assert_eq!(
            light_at(&fresh, minutes(11)),
            ("red".into(), Some("adapter_stale".into()))
        );
        let healed = probe(&fresh, minutes(12), good, &on, url);
        assert!(healed["stats"]["browser-ext:grok"]["staleSinceMs"].is_null());
        assert_eq!(healed["reason"], Value::Null);
        fresh = healed["stats"].clone();
        fresh["browser-ext:grok"]["lastAcceptedMs"] = json!(minutes(12));
        assert_eq!(light_at(&fresh, minutes(12)), ("green".into(), None));
    }

    /// The relay hears of a stale adapter once the light says so, once; then of the heal, once.
    #[test]
    fn the_relay_is_told_when_an_adapter_goes_stale_and_when_it_reads_again() {
        let stats = json!({"browser-ext:grok": {"captured": 0, "overflowed": 0, "accepted": 0,
            "staleSinceMs": NOW, "lastRule": "message_roots[1]"}});
        let reports =
            |stats: &Value, now: u64| call(capture_reports, json!({"now_ms": now, "stats": stats}));
        let early = reports(&stats, NOW + 60_000);
        assert_eq!(early["body"], Value::Null, "not yet yellow: {early}");
        let due = reports(&stats, NOW + 3 * 60_000);
        let body: Value = serde_json::from_str(due["body"].as_str().unwrap()).unwrap();
        assert_eq!(
            body,
            json!({"reports": [{"surface": "browser-ext:grok",
                "stale_since": crate::time::rfc3339(NOW as i64), "rule": "message_roots[1]"}]})
        );
        let sent = call(reports_sent, json!({"stats": stats, "sent": due["sent"]}));
        assert_eq!(sent["changed"], true);
        let told = sent["stats"].clone();
        assert_eq!(told["browser-ext:grok"]["staleReportedMs"], NOW);
        assert_eq!(
            reports(&told, NOW + 4 * 60_000)["body"],
            Value::Null,
            "told once"
        );
        let mut healed = told.clone();
        healed["browser-ext:grok"]
            .as_object_mut()
            .unwrap()
            .remove("staleSinceMs");
        let clear = reports(&healed, NOW + 5 * 60_000);
        let body: Value = serde_json::from_str(clear["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["reports"][0]["stale_since"], Value::Null);
        let after = call(
            reports_sent,
            json!({"stats": healed, "sent": clear["sent"]}),
        );
        assert!(after["stats"]["browser-ext:grok"]["staleReportedMs"].is_null());
        assert_eq!(
            reports(&after["stats"], NOW + 6 * 60_000)["body"],
            Value::Null
        );
    }

    #[test]
    fn capture_follows_the_policy() {
        let turns = json!([{"role": "user", "text": "hi"}]);
        let mut input = snapshot(turns, json!({}), json!({}));
        input["settings"] = json!({});
        let off = call(capture, input.clone());
        assert_eq!(
            (off["state"].as_str(), off["queued"].as_u64()),
            (Some("off"), Some(0))
        );
        assert_eq!(off["changed"], false);
        input["settings"] = json!({"enabled": {"browser-ext:chatgpt": true}, "killSwitch": true});
        assert_eq!(call(capture, input.clone())["state"], "paused");
        input["settings"] = chatgpt_on();
        let page = call(
            page_state,
            json!({"url": input["url"], "now_ms": NOW, "settings": chatgpt_on()}),
        );
        input["skipped"] = json!([page["thread_id"]]);
        let skipped = call(capture, input.clone());
        assert_eq!(
            (skipped["state"].as_str(), skipped["queued"].as_u64()),
            (Some("skipped"), Some(0))
        );
        input["skipped"] = json!(["another-thread"]);
        assert_eq!(call(capture, input)["queued"], 1);
    }

    #[test]
    fn capture_refuses_turns_beyond_the_limits_and_changes_nothing() {
        let queued = call(
            capture,
            snapshot(
                json!([{"role": "user", "text": "kept"}]),
                json!({}),
                json!({}),
            ),
        );
        let too_long = "x".repeat(policy::MAX_RAW_TEXT_BYTES + 1);
        for (turns, why) in [
            (json!([{"role": "user", "text": too_long}]), "text"),
            (json!([{"role": "moderator", "text": "x"}]), "moderator"),
            (json!([{"role": "user", "text": "x", "extra": 1}]), "extra"),
            (json!("not a list"), "turns"),
        ] {
            let out = call(
                capture,
                snapshot(turns, queued["queue"].clone(), queued["seen"].clone()),
            );
            let invalid = out["invalid"]
                .as_str()
                .unwrap_or_else(|| panic!("{why}: accepted"));
            assert!(invalid.contains(why), "{invalid}");
            assert_eq!(out["queued"], 0);
            assert_eq!(out["changed"], false);
            assert_eq!(out["queue"], queued["queue"]);
        }
    }

    #[test]
    fn a_forgotten_thread_leaves_the_queue_and_is_skipped_from_then_on() {
        let turns =
            json!([{"role": "user", "text": "forget me"}, {"role": "assistant", "text": "gone"}]);
        let a = call(capture, snapshot(turns.clone(), json!({}), json!({})));
        let mut other = snapshot(turns, a["queue"].clone(), json!({}));
        other["url"] = json!("https://chatgpt.com/c/keep-2");
        let b = call(capture, other);
        assert_eq!(b["queue"]["items"].as_array().unwrap().len(), 4);
        let forget = crate::ids::thread_id("browser-ext:chatgpt", "abc-1").to_string();
        let out = call(
            forgotten,
            json!({"thread_id": forget, "queue": b["queue"], "skipped": []}),
        );
        assert_eq!(out["dropped"], 2);
        assert_eq!(out["changed"], true);
        assert_eq!(out["skipped"], json!([forget]));
        let left = out["queue"]["items"].as_array().unwrap();
        assert_eq!(left.len(), 2);
        assert!(
            left.iter().all(|i| i["conversation"] == "keep-2"),
            "{left:?}"
        );
        // The conversation's page is skipped from then on.
        let page = call(
            page_state,
            json!({"url": "https://chatgpt.com/c/abc-1", "now_ms": NOW, "settings": chatgpt_on(),
                   "skipped": out["skipped"]}),
        );
        assert_eq!(page["state"], "skipped");
        // Again: nothing left to drop, already skipped.
        let again = call(
            forgotten,
            json!({"thread_id": forget, "queue": out["queue"], "skipped": out["skipped"]}),
        );
        assert_eq!(
            (again["dropped"].as_u64(), again["changed"].as_bool()),
            (Some(0), Some(false))
        );
        assert!(forgotten(&json!({"thread_id": "../etc", "queue": {}}).to_string()).is_err());
    }

    #[test]
    fn page_state_and_the_skip_toggle() {
        let url = "https://claude.ai/chat/abc";
        let settings = json!({"enabled": {"browser-ext:claude": true}});
        let a = call(
            page_state,
            json!({"url": url, "now_ms": NOW, "settings": settings}),
        );
        assert_eq!(a["surface"]["id"], "browser-ext:claude");
        assert_eq!(a["conversation_id"], "abc");
        assert_eq!(
            a["thread_id"],
            crate::ids::thread_id("browser-ext:claude", "abc").to_string()
        );
        assert_eq!(a["state"], "capturing");
        assert!(
            !a["surface"]["streaming_markers"]
                .as_array()
                .unwrap()
                .is_empty()
        );
        let skip = call(
            toggle_skip,
            json!({"url": url, "now_ms": NOW, "settings": settings}),
        );
        assert_eq!(
            (skip["state"].as_str(), skip["changed"].as_bool()),
            (Some("skipped"), Some(true))
        );
        assert_eq!(skip["skipped"], json!([a["thread_id"]]));
        let other = call(
            page_state,
            json!({"url": "https://claude.ai/chat/def", "now_ms": NOW, "settings": settings,
            "skipped": skip["skipped"]}),
        );
        assert_eq!(
            other["state"], "capturing",
            "only the skipped conversation is skipped"
        );
        let resume = call(
            toggle_skip,
            json!({"url": url, "now_ms": NOW, "settings": settings, "skipped": skip["skipped"]}),
        );
        assert_eq!(resume["state"], "capturing");
        assert_eq!(resume["skipped"], json!([]));
        let no_conv = call(
            toggle_skip,
            json!({"url": "https://claude.ai/new", "now_ms": NOW, "settings": settings}),
        );
        assert_eq!(
            (no_conv["state"].as_str(), no_conv["changed"].as_bool()),
            (Some("capturing"), Some(false))
        );
        let none = call(
            page_state,
            json!({"url": "https://example.com/", "now_ms": NOW}),
        );
        assert_eq!(none["surface"], Value::Null);
        assert_eq!(none["state"], "off");
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
            json!({"queue": out["queue"], "stats": out["stats"], "ids": next["ids"], "now_ms": 2, "status": 200,
                   "body": resp.to_string()}),
        );
        assert_eq!(done["queue_length"], 0);
        assert_eq!(done["applied"]["acknowledged"][0][0], "browser-ext:chatgpt");
        let st = &done["stats"]["browser-ext:chatgpt"];
        assert_eq!(
            (st["captured"].as_u64(), st["accepted"].as_u64()),
            (Some(1), Some(1))
        );
        assert_eq!(st["lastAcceptedMs"], 2);
        // A 429 with Retry-After (delay-seconds) waits that long; an HTTP-date form is not used.
        let next = call(next_batch, json!({"queue": out["queue"], "now_ms": 10}));
        let busy = |retry_after: Value| {
            call(
                on_outcome,
                json!({"queue": out["queue"], "ids": next["ids"], "now_ms": 10, "status": 429,
                "body": "", "retry_after": retry_after}),
            )["applied"]["retry_in_ms"]
                .clone()
        };
        assert_eq!(busy(json!(" 7 ")), json!(7000));
        assert_ne!(busy(json!("Wed, 21 Oct 2026 07:28:00 GMT")), json!(7000));
        assert_eq!(busy(json!(null)), busy(json!("soon")));
        let s = call(queue_summary, json!({"queue": done["queue"]}));
        assert_eq!(s["sent"], 1);
        assert_eq!(
            call(next_batch, json!({"queue": done["queue"], "now_ms": 3}))["action"],
            "idle"
        );
    }

    /// Held turns through the entry points the worker and the popup use: shown with their reason, retried once
    /// after a new version, cleared by the user.
    #[test]
    fn held_turns_through_the_api() {
        let out = call(
            capture,
            snapshot(
                json!([{"role": "user", "text": "one"}, {"role": "user", "text": "two"}]),
                json!({}),
                json!({}),
            ),
        );
        let m = call(
            maintain,
            json!({"queue": out["queue"], "now_ms": 1, "app_version": "0.1.0"}),
        );
        let next = call(next_batch, json!({"queue": m["queue"], "now_ms": 2}));
        let resp = json!({"stored": 0, "duplicate": 0, "rejected": 2, "results": [
            {"index": 0, "status": "rejected", "error": {"code": "content_too_large", "message": "content is 9 bytes, over the limit of 1", "hint": "h"}},
            {"index": 1, "status": "rejected", "error": {"code": "content_too_large", "message": "content is 9 bytes, over the limit of 1", "hint": "h"}}]});
        let done = call(
            on_outcome,
            json!({"queue": m["queue"], "ids": next["ids"], "now_ms": 3, "status": 200, "body": resp.to_string()}),
        );
        let s = call(
            popup_state,
            json!({"now_ms": 4, "paired": true, "queue": done["queue"]}),
        );
        assert_eq!(
            (s["held"].as_u64(), s["queueLength"].as_u64()),
            (Some(2), Some(0))
        );
        assert_eq!(s["heldReasons"][0]["code"], "content_too_large");
        assert_eq!(s["heldReasons"][0]["count"], 2);
        assert!(
            s["heldReasons"][0]["message"]
                .as_str()
                .unwrap()
                .contains("limit")
        );
        assert_eq!(s["heldDays"], 7);
        let again = call(
            maintain,
            json!({"queue": done["queue"], "now_ms": 5, "app_version": "0.1.0",
                   "relay": "http://127.0.0.1:1", "relay_health": r#"{"version": "1"}"#}),
        );
        assert_eq!(
            (again["requeued"].as_u64(), again["changed"].as_bool()),
            (Some(0), Some(true))
        );
        let upgraded = call(
            maintain,
            json!({"queue": again["queue"], "now_ms": 6, "app_version": "0.2.0"}),
        );
        assert_eq!(upgraded["requeued"], 2);
        assert_eq!(
            call(queue_summary, json!({"queue": upgraded["queue"]}))["queue_length"],
            2
        );
        let cleared = call(clear_held, json!({"queue": done["queue"]}));
        assert_eq!(cleared["cleared"], 2);
        let s = call(queue_summary, json!({"queue": cleared["queue"]}));
        assert_eq!(
            (s["held"].as_u64(), s["held_dropped"].as_u64()),
            (Some(0), Some(2))
        );
    }

    #[test]
    fn patterns_redaction_and_registry() {
        let errs = call(validate_patterns, json!(["ok", "(bad", "[z-a]"]));
        assert_eq!(errs.as_array().unwrap().len(), 2);
        assert_eq!(errs[0]["index"], 1);
        let saved = call(
            set_patterns,
            json!({"patterns": ["  ok ", "", "(bad", "ACME-\\d+"]}),
        );
        assert_eq!(saved["patterns"], json!(["ok", "(bad", "ACME-\\d+"]));
        assert_eq!(saved["active"], json!(["ok", "ACME-\\d+"]));
        assert_eq!(saved["errors"][0]["index"], 1);
        let many: Vec<String> = (0..=MAX_PATTERN_LINES).map(|i| format!("p{i}")).collect();
        let e = set_patterns(&json!({"patterns": many}).to_string()).unwrap_err();
        assert!(e.to_string().contains("pattern lines"), "{e}");
        assert_eq!(
            call(redact, json!({"text": "sk-abcdefghijklmnop1234"})),
            json!("[REDACTED:openai_key]")
        );
        let s: Vec<Value> = serde_json::from_str(&surfaces().unwrap()).unwrap();
        assert!(s.len() >= 4);
        assert!(match_patterns().unwrap().contains("https://chatgpt.com/*"));
    }

    #[test]
    fn popup_state_reads_the_relay_body_with_the_wire_types() {
        let health = json!({"generated_at": "2026-11-22T10:00:00.000Z", "surfaces": [
            {"surface": "browser-ext:chatgpt", "status": "green", "last_accepted_at": "2026-11-22T09:59:00.000Z",
             "turns_24h": 4, "threads_24h": 1, "last_error": null}]});
        let base = json!({"now_ms": NOW, "settings": chatgpt_on(), "paired": true,
            "patterns": ["ok", "(bad"], "relay_health": health.to_string()});
        let s = call(popup_state, base.clone());
        assert_eq!(s["relayReachable"], true);
        assert_eq!(s["signInRequired"], false);
        assert_eq!(s["queueLength"], 0);
        assert_eq!(s["patternErrors"][0]["index"], 1);
        assert_eq!(s["settings"]["enabled"]["browser-ext:chatgpt"], true);
        let row = |s: &Value, id: &str| {
            s["surfaces"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["id"] == id)
                .unwrap()
                .clone()
        };
        let chatgpt = row(&s, "browser-ext:chatgpt");
        assert_eq!(
            (chatgpt["light"].as_str(), chatgpt["turns_24h"].as_u64()),
            (Some("green"), Some(4))
        );
        assert_eq!(chatgpt["enabled"], true);
        assert_eq!(row(&s, "browser-ext:claude")["light"], "off");
        // A body that is not the relay's wire type is no relay view: the light falls back to local stats.
        let mut bad = base.clone();
        bad["relay_health"] = json!(r#"{"surfaces": "nope"}"#);
        let s = call(popup_state, bad);
        assert_eq!(s["relayReachable"], false);
        assert_eq!(row(&s, "browser-ext:chatgpt")["light"], "red");
        // Paired once, token gone: sign in again.
        let mut gone = base;
        gone["paired"] = json!(false);
        gone["settings"]["everPaired"] = json!(true);
        assert_eq!(call(popup_state, gone)["signInRequired"], true);
        assert_eq!(
            call(popup_state, json!({"now_ms": 1, "paired": false}))["signInRequired"],
            false
        );
    }

    #[test]
    fn state_loaded_from_storage_gets_defaults() {
        let fresh = call(load_state, json!({}));
        assert_eq!(fresh["settings"]["relayUrl"], settings::DEFAULT_RELAY);
        assert_eq!(fresh["settings"]["rev"], 0);
        assert_eq!(fresh["skipped"], json!([]));
        let odd = call(
            load_state,
            json!({"settings": {"relayUrl": "http://127.0.0.1:9/x", "rev": 4},
            "skipped": "nope", "patterns": ["a"], "active_patterns": null}),
        );
        assert_eq!(odd["settings"]["relayUrl"], "http://127.0.0.1:9/x");
        assert_eq!(odd["settings"]["rev"], 4);
        assert_eq!(odd["skipped"], json!([]));
        assert_eq!(odd["patterns"], json!(["a"]));
        assert_eq!(odd["active_patterns"], json!([]));
    }

    /// The worker's IndexedDB records as a model: what each call's `changes` says, applied as the worker applies
    /// it (deletions first, then writes), and read back as the worker hands it to [`Core::load`] at start.
    #[derive(Default)]
    struct Records {
        items: std::collections::BTreeMap<u64, Value>,
        seen: std::collections::BTreeMap<String, u64>,
        held: Option<Value>,
        meta: Option<Value>,
        stats: Option<Value>,
    }

    impl Records {
        fn apply(&mut self, out: &str) -> Value {
            let out: Value = serde_json::from_str(out).unwrap();
            let c = &out["changes"];
            for k in c["seen_delete"].as_array().unwrap() {
                self.seen.remove(k.as_str().unwrap());
            }
            for id in c["items_delete"].as_array().unwrap() {
                self.items.remove(&id.as_u64().unwrap());
            }
            for r in c["seen_put"].as_array().unwrap() {
                self.seen
                    .insert(r[0].as_str().unwrap().to_owned(), r[1].as_u64().unwrap());
            }
            for item in c["items_put"].as_array().unwrap() {
                self.items
                    .insert(item["id"].as_u64().unwrap(), item.clone());
            }
            for (field, slot) in [
                ("held", &mut self.held),
                ("queue_meta", &mut self.meta),
                ("stats", &mut self.stats),
            ] {
                if !c[field].is_null() {
                    *slot = Some(c[field].clone());
                }
            }
            out
        }

        fn load(&self) -> Core {
            let mut items: Vec<&Value> = self.items.values().collect();
            // IndexedDB hands records back in key order; the core must not depend on it.
            items.reverse();
            let input = json!({
                "queue_meta": self.meta, "items": items, "held": self.held, "stats": self.stats,
                "seen_keys": self.seen.keys().collect::<Vec<_>>(),
                "seen_seqs": self.seen.values().collect::<Vec<_>>(),
            });
            Core::load(&input.to_string()).unwrap()
        }
    }

    fn same_state(a: &Core, b: &Core) {
        assert_eq!(a.queue, b.queue);
        assert_eq!(a.seen, b.seen);
        assert_eq!(a.stats, b.stats);
    }

    /// A worker killed after any call and loaded again from its records has the state it had: every call's
    /// `changes` carry everything that call changed (queue items, held items, dedupe keys, stats, counters).
    #[test]
    fn the_records_of_every_calls_changes_load_back_as_the_same_state() {
        let mut core = Core::default();
        let mut db = Records::default();
        let capture = |core: &mut Core, db: &mut Records, n: usize, key: &str| {
            let turns: Vec<Value> = (0..n)
                .map(|i| json!({"role": "user", "text": format!("turn {key} {i}"), "message_key": format!("{key}{i}")}))
                .collect();
            let input = snapshot(json!(turns), json!(null), json!(null));
            let mut input = input.as_object().unwrap().clone();
            input.remove("queue");
            input.remove("seen");
            db.apply(
                &core
                    .capture(&Value::Object(input).to_string(), None)
                    .unwrap(),
            )
        };
        let out = capture(&mut core, &mut db, 3, "a");
        assert_eq!(out["queued"], 3);
        same_state(&db.load(), &core);
        // The same turns again: nothing queued, nothing to write.
        let again = capture(&mut core, &mut db, 3, "a");
        assert_eq!(again["already_seen"], 3);
        assert_eq!(again["changes"]["items_put"], json!([]));
        assert_eq!(again["changes"]["seen_put"], json!([]));
        capture(&mut core, &mut db, 4, "b");
        same_state(&db.load(), &core);
        // A batch: two stored, one rejected (held), one left for later; attempts counted.
        let next: Value =
            serde_json::from_str(&core.next_batch(r#"{"now_ms": 1}"#).unwrap()).unwrap();
        let ids: Vec<u64> = next["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap())
            .collect();
        let results: Vec<Value> = ids
            .iter()
            .enumerate()
            .map(|(n, _)| json!({"index": n, "status": if n == 2 { "rejected" } else { "stored" },
                "error": if n == 2 { json!({"code": "too_big", "message": "m", "hint": "h"}) } else { json!(null) }}))
            .collect();
        let body =
            json!({"stored": ids.len() - 1, "duplicate": 0, "rejected": 1, "results": results})
                .to_string();
        let o = db.apply(
            &core
                .on_outcome(
                    &json!({"ids": ids, "status": 200, "body": body, "now_ms": 2}).to_string(),
                )
                .unwrap(),
        );
        assert_eq!((core.queue.len(), core.queue.held.len()), (0, 1), "{o}");
        same_state(&db.load(), &core);
        // The relay is down: the attempt is counted on each item, and the backoff is kept.
        capture(&mut core, &mut db, 2, "c");
        let next: Value =
            serde_json::from_str(&core.next_batch(r#"{"now_ms": 3}"#).unwrap()).unwrap();
        db.apply(
            &core
                .on_outcome(
                    &json!({"ids": next["ids"], "status": 0, "error": "down", "now_ms": 3})
                        .to_string(),
                )
                .unwrap(),
        );
        assert_eq!(core.queue.items[0].attempts, 1);
        same_state(&db.load(), &core);
        // A new version gives the held item its one retry (a new id, at the end of the queue).
        let m = db.apply(
            &core
                .maintain(r#"{"now_ms": 4, "app_version": "9.9"}"#)
                .unwrap(),
        );
        assert_eq!(m["requeued"], 1, "{m}");
        same_state(&db.load(), &core);
        // Stats of a probe; forgetting a thread; clearing held items; pairing again.
        let chat = "https://chatgpt.com/c/abc-1";
        db.apply(
            &core
                .probe(
                    &json!({"url": chat, "now_ms": 5, "settings": chatgpt_on(),
                    "probe": {"text_present": true, "roots": 0, "users": 0, "assistants": 0}})
                    .to_string(),
                )
                .unwrap(),
        );
        same_state(&db.load(), &core);
        let thread = crate::ids::thread_id("browser-ext:chatgpt", "abc-1")
            .hyphenated()
            .to_string();
        let f = db.apply(
            &core
                .forgotten(&json!({"thread_id": thread}).to_string())
                .unwrap(),
        );
        assert!(f["dropped"].as_u64().unwrap() > 0, "{f}");
        assert_eq!(core.queue.len(), 0);
        db.apply(&core.clear_held("{}").unwrap());
        db.apply(
            &core
                .on_paired(r#"{"relay": "http://127.0.0.1:1"}"#)
                .unwrap(),
        );
        same_state(&db.load(), &core);
        assert!(db.items.is_empty());
    }

    /// A capture with a full dedupe set and a long queue writes what it added, not the state: its cost does not
    /// grow with the user's history.
    #[test]
    fn a_capture_changes_one_item_and_one_key_whatever_the_state() {
        // Newest first, as no store would hand them over.
        let keys: Vec<String> = (0..20_000u64).rev().map(|i| format!("{i:020x}")).collect();
        let seqs: Vec<u64> = (0..20_000u64).rev().collect();
        let mut core =
            Core::load(&json!({"seen_keys": keys, "seen_seqs": seqs}).to_string()).unwrap();
        assert_eq!(core.seen.len(), 20_000);
        for n in 0..3 {
            let mut input = snapshot(
                json!([{"role": "user", "text": format!("t{n}")}]),
                json!(null),
                json!(null),
            );
            input.as_object_mut().unwrap().remove("queue");
            input.as_object_mut().unwrap().remove("seen");
            let out: Value =
                serde_json::from_str(&core.capture(&input.to_string(), None).unwrap()).unwrap();
            let c = &out["changes"];
            assert_eq!(out["queued"], 1);
            assert_eq!(c["items_put"].as_array().unwrap().len(), 1);
            assert_eq!(c["seen_put"].as_array().unwrap().len(), 1);
            // The set is full: the oldest key goes.
            assert_eq!(c["seen_delete"], json!([format!("{n:020x}")]));
            assert!(c["held"].is_null());
        }
        assert_eq!(core.seen.len(), 20_000);
    }

    /// A damaged record costs that record only; an older version's whole-state records load and are rewritten.
    #[test]
    fn loading_skips_damaged_records_and_rewrites_an_older_versions_state() {
        let mut core = Core::default();
        let mut input = snapshot(
            json!([{"role": "user", "text": "hello"}]),
            json!(null),
            json!(null),
        );
        input.as_object_mut().unwrap().remove("queue");
        input.as_object_mut().unwrap().remove("seen");
        core.capture(&input.to_string(), None).unwrap();
        let item = serde_json::to_value(&core.queue.items[0]).unwrap();
        let loaded = Core::load(
            &json!({"items": [item, {"id": "x"}, 3], "seen_keys": ["k", "j"], "seen_seqs": [7, 9], "stats": [],
                "held": {"no": 1}, "queue_meta": {"next_id": 1}})
            .to_string(),
        )
        .unwrap();
        assert_eq!(loaded.queue.items.len(), 1);
        assert_eq!(loaded.seen.keys().collect::<Vec<_>>(), ["k", "j"]);
        assert_eq!(
            loaded.queue.next_id,
            item["id"].as_u64().unwrap(),
            "new ids stay above stored ones"
        );
        let mut old = Core::load(
            &json!({"legacy_queue": serde_json::to_value(&core.queue).unwrap(),
                "legacy_seen": {"capacity": 20_000, "keys": core.seen.keys().collect::<Vec<_>>()}})
            .to_string(),
        )
        .unwrap();
        assert_eq!(old.queue, core.queue);
        let l: Value = serde_json::from_str(&old.load_changes().unwrap()).unwrap();
        assert_eq!(l["rewrite"], true);
        let mut db = Records::default();
        db.apply(&l.to_string());
        same_state(&db.load(), &old);
        assert!(Core::load("3").is_err());
        assert!(
            Core::load(r#"{"queue": {}}"#).is_err(),
            "an unknown key is an error"
        );
    }

    /// Regression (hardening issue, item 10): the worker adopted a `token` found in `storage.local` and bound it
    /// to `settings.relayUrl` from the same area, which content scripts can write in Firefox. The one migration
    /// out of that area takes the user's data and nothing that decides where it is sent.
    #[test]
    fn the_migration_takes_no_token_and_no_relay_from_storage_local() {
        let captured = call(
            capture,
            snapshot(
                json!([{"role": "user", "text": "queued before the upgrade"}]),
                json!({}),
                json!({}),
            ),
        );
        let local = json!({
            "token": "planted-token",
            "settings": {"relayUrl": "https://attacker.example", "enabled": {"browser-ext:claude": true},
                         "killSwitch": true, "rev": 7},
            "deviceId": "dev-42",
            "queue": captured["queue"],
            "seen": captured["seen"],
            "skipped": ["t-1"],
            "stats": captured["stats"],
            "patterns": ["ACME-\\d+", "(bad"],
            "activePatterns": ["(bad", ".*"],
            "testFastFlush": true,
            "unrelated": 1,
        });
        let m = call(
            migrate_legacy,
            json!({"local": local, "token_relay": "http://127.0.0.1:8787"}),
        );
        let st = &m["state"];
        assert_eq!(st["settings"]["relayUrl"], "http://127.0.0.1:8787");
        assert!(!m.to_string().contains("attacker"), "{m}");
        assert!(!m.to_string().contains("planted-token"), "{m}");
        assert_eq!(m["refused"], json!(["settings.relayUrl", "token"]));
        assert_eq!(st["settings"]["everPaired"], true);
        assert_eq!(st["settings"]["killSwitch"], true);
        assert_eq!(st["settings"]["enabled"]["browser-ext:claude"], true);
        assert_eq!(st["deviceId"], "dev-42");
        assert_eq!(st["queue"], captured["queue"]);
        assert_eq!(st["seen"], captured["seen"]);
        assert_eq!(st["skipped"], json!(["t-1"]));
        assert_eq!(st["patterns"], json!(["ACME-\\d+", "(bad"]));
        assert_eq!(
            st["activePatterns"],
            json!(["ACME-\\d+"]),
            "compiled again, not trusted"
        );
        let mut remove: Vec<String> = serde_json::from_value(m["remove"].clone()).unwrap();
        remove.sort();
        assert_eq!(
            remove,
            [
                "activePatterns",
                "deviceId",
                "patterns",
                "queue",
                "seen",
                "settings",
                "skipped",
                "stats",
                "testFastFlush",
                "token"
            ]
        );
        // No token record in IndexedDB: the default relay, never the one in storage.local.
        let m = call(migrate_legacy, json!({"local": local}));
        assert_eq!(m["state"]["settings"]["relayUrl"], settings::DEFAULT_RELAY);
        // A fresh install: defaults, nothing to remove.
        let fresh = call(migrate_legacy, json!({}));
        assert_eq!(fresh["remove"], json!([]));
        assert_eq!(fresh["state"]["settings"]["everPaired"], false);
        assert_eq!(fresh["state"].get("deviceId"), None);
    }

    #[test]
    fn pairing_checks_its_input_and_updates_settings_and_queue() {
        let ok = call(
            pair_request,
            json!({"relay_url": " http://127.0.0.1:8787/ ", "code": " ABCD-EFGH ",
                   "user_agent": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"}),
        );
        assert_eq!(ok["relay"], "http://127.0.0.1:8787");
        let body: Value = serde_json::from_str(ok["body"].as_str().unwrap()).unwrap();
        assert_eq!(
            body,
            json!({"code": "ABCD-EFGH", "device_name": "browser Firefox"})
        );
        let from_settings = call(
            pair_request,
            json!({"code": "x", "settings": {"relayUrl": "http://localhost:9"}}),
        );
        assert_eq!(from_settings["relay"], "http://localhost:9");
        assert!(
            call(pair_request, json!({"relay_url": "ftp://x", "code": "x"}))["error"]
                .as_str()
                .unwrap()
                .contains("relay URL")
        );
        assert!(
            call(pair_request, json!({"code": "  "}))["error"]
                .as_str()
                .unwrap()
                .contains("pairing code")
        );
        let paired = call(
            on_paired,
            json!({"queue": {"auth": "sign_in_required"}, "settings": {"rev": 2},
            "relay": "http://127.0.0.1:8787"}),
        );
        assert_eq!(paired["queue"]["auth"], "ok");
        assert_eq!(paired["settings"]["everPaired"], true);
        assert_eq!(paired["settings"]["rev"], 3);
        assert_eq!(paired["settings"]["relayUrl"], "http://127.0.0.1:8787");
        assert!(on_paired(&json!({"relay": "nope"}).to_string()).is_err());
        let sub = call(
            on_paired,
            json!({"relay": "https://host.example/personkit"}),
        );
        assert_eq!(
            sub["settings"]["relayUrl"],
            "https://host.example/personkit"
        );
        let answer =
            |status: u16, body: &str| call(pair_response, json!({"status": status, "body": body}));
        assert_eq!(
            answer(200, r#"{"token": "t0k", "device_id": "d"}"#),
            json!({"token": "t0k"})
        );
        let refused = answer(
            400,
            r#"{"code": "invalid_code", "message": "that code is unknown", "hint": "run personkit pair again"}"#,
        );
        assert_eq!(
            refused["error"],
            "Pairing failed: that code is unknown. run personkit pair again"
        );
        assert_eq!(answer(502, "<html>")["error"], "Pairing failed: HTTP 502.");
        assert_eq!(
            answer(200, "{}")["error"],
            "Pairing failed: HTTP 200.",
            "a 2xx without a token is not a pairing"
        );
    }

    /// Regression (hardening issue, item 11): pairing accepted `http://relay.example.com:8787`, so the token
    /// would have crossed the network in clear text; a relay under a sub-path keeps its path.
    #[test]
    fn pairing_refuses_plain_http_to_a_remote_relay_and_keeps_a_sub_path() {
        let req = |url: &str, allow: bool| {
            call(
                pair_request,
                json!({"relay_url": url, "code": "ABCD-EFGH", "allow_plain_http": allow}),
            )
        };
        let refused = req("http://relay.example.com:8787", false);
        assert_eq!(refused["relay"], Value::Null);
        let error = refused["error"].as_str().unwrap();
        assert!(
            error.contains("unencrypted") && error.contains("https"),
            "{error}"
        );
        assert_eq!(
            req("http://relay.example.com:8787", true)["relay"],
            "http://relay.example.com:8787",
            "the explicit override"
        );
        assert_eq!(
            req("https://relay.example.com/personkit/", false)["relay"],
            "https://relay.example.com/personkit"
        );
        assert_eq!(
            req("http://localhost:8787", false)["relay"],
            "http://localhost:8787"
        );
        // The stored default is checked the same way when the box is left empty.
        let from_settings = call(
            pair_request,
            json!({"code": "x", "settings": {"relayUrl": "http://10.1.2.3:8787"}}),
        );
        assert!(
            from_settings["error"]
                .as_str()
                .unwrap()
                .contains("unencrypted")
        );
    }

    #[test]
    fn settings_intents_through_the_api() {
        let out = call(
            apply_intents,
            json!({"now_ms": 5, "settings": {"rev": 1},
            "session": {"settingsIntent:a": {"patch": {"killSwitch": true}, "at": 1}, "other": [1]},
            "intent": "settingsIntent:b", "patch": {"enabled": {"browser-ext:copilot": true}}}),
        );
        assert_eq!(out["changed"], true);
        assert_eq!(out["settings"]["killSwitch"], true);
        assert_eq!(out["settings"]["enabled"]["browser-ext:copilot"], true);
        assert_eq!(out["settings"]["rev"], 2);
        assert_eq!(
            out["applied"],
            json!(["settingsIntent:a", "settingsIntent:b"])
        );
        assert_eq!(out["remove"], json!(["settingsIntent:a"]));
        assert_eq!(out["error"], Value::Null);
        assert!(
            apply_intents(&json!({"now_ms": 1, "intent": "settingsIntent:c"}).to_string()).is_err()
        );
    }

    type Entry = fn(&str) -> Result<String>;

    /// Every entry point refuses a key it does not know, and says which.
    #[test]
    fn a_misspelt_key_is_an_error_naming_it() {
        let cases: [(Entry, Value); 17] = [
            (migrate_legacy, json!({"local": {}})),
            (
                maintain,
                json!({"now_ms": 1, "app_version": "1", "relay": "http://127.0.0.1:1", "relay_health": "{}"}),
            ),
            (clear_held, json!({})),
            (load_state, json!({})),
            (
                page_state,
                json!({"url": "https://chatgpt.com/c/a", "now_ms": 1}),
            ),
            (
                toggle_skip,
                json!({"url": "https://chatgpt.com/c/a", "now_ms": 1}),
            ),
            (set_patterns, json!({"patterns": []})),
            (redact, json!({"text": "x"})),
            (capture, snapshot(json!([]), json!({}), json!({}))),
            (next_batch, json!({"now_ms": 1})),
            (on_outcome, json!({"ids": [], "status": 0, "now_ms": 1})),
            (pair_request, json!({"code": "x"})),
            (pair_response, json!({"status": 200})),
            (on_paired, json!({"relay": "http://127.0.0.1:1"})),
            (queue_summary, json!({})),
            (popup_state, json!({"now_ms": 1, "paired": false})),
            (apply_intents, json!({"now_ms": 1})),
        ];
        for (f, good) in &cases {
            f(&good.to_string()).unwrap_or_else(|e| panic!("{good}: {e}"));
            let mut bad = good.clone();
            bad["naw_ms"] = json!(1);
            let e = f(&bad.to_string()).unwrap_err().to_string();
            assert!(e.contains("unknown field `naw_ms`"), "{good}: {e}");
        }
        // A misspelt required key is named as missing too, rather than read as 0.
        let e = next_batch(r#"{"nowms": 1}"#).unwrap_err().to_string();
        assert!(e.contains("nowms"), "{e}");
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(capture("{").is_err());
        assert!(next_batch("3").is_err());
    }
}
