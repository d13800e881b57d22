// personkit service worker (Chrome) / background script (Firefox).
//
// The only place the WASM capture core runs (page CSPs block WebAssembly in content scripts). Every listener is
// registered at the top level and awaits the one `ready` promise. Nothing that matters lives only in a global:
// the queue, the dedupe set, settings, skipped threads and local stats are written to storage.local before any
// reply, so a worker that is killed and restarted loses nothing. The relay token never leaves this context and
// is sent only to the relay origin it was issued by: it is kept, with that origin, in the extension origin's
// IndexedDB (see `secrets` below), never in storage.local, which content scripts (and so a compromised renderer)
// can read and write.

import initCore, * as core from './wasm/personkit_core.js';

const APP_VERSION = chrome.runtime.getManifest().version;
const DEFAULT_RELAY = 'http://127.0.0.1:8787';
const EXTENSION_ORIGIN = chrome.runtime.getURL('');
const MAX_TURNS_PER_MESSAGE = 500;
const MAX_TEXT_CHARS = 600 * 1024;
const MAX_SKIPPED = 5000;
const FETCH_TIMEOUT_MS = 15000;
const ALARM = 'personkit-flush';

/** In-memory mirror of storage.local (and of the token record in IndexedDB); this worker is the only writer of
 * every key except testFastFlush. */
const S = {
  settings: null,
  token: null,
  tokenRelay: null, // the relay origin the token was issued by; the token is sent nowhere else
  deviceId: null,
  queue: {},
  seen: {},
  skipped: [],
  stats: {},
  patterns: [],
  activePatterns: [],
  fast: false,
  surfaces: [],
};

function defaultSettings() {
  return { relayUrl: DEFAULT_RELAY, enabled: {}, experimental: false, killSwitch: false, rev: 0 };
}

// ---- secrets: the device token in the extension origin's IndexedDB ---------------------------------------------
//
// Content scripts run with the page's origin for IndexedDB, so they (and a compromised renderer hosting them)
// cannot open this database; storage.local, by contrast, is readable and writable from every content script. It
// is persistent (unlike storage.session) and exists in Chromium's service worker and Firefox's background page.
// The record binds the token to the relay origin that issued it, so a tampered `settings.relayUrl` in
// storage.local cannot redirect the token anywhere else.

const SECRETS_DB = 'personkit-secrets';
const SECRETS_STORE = 'secrets';
const TOKEN_KEY = 'deviceToken';

function idb(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error || new Error('IndexedDB request failed'));
  });
}

let secretsDb = null;
function openSecrets() {
  if (!secretsDb) {
    const req = indexedDB.open(SECRETS_DB, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(SECRETS_STORE);
    secretsDb = idb(req).catch((e) => {
      secretsDb = null;
      throw e;
    });
  }
  return secretsDb;
}

async function secretsTx(mode, fn) {
  const db = await openSecrets();
  return new Promise((resolve, reject) => {
    const tx = db.transaction(SECRETS_STORE, mode, { durability: 'strict' });
    let out;
    Promise.resolve(fn(tx.objectStore(SECRETS_STORE))).then((v) => {
      out = v;
    }, reject);
    tx.oncomplete = () => resolve(out);
    tx.onerror = () => reject(tx.error || new Error('IndexedDB transaction failed'));
    tx.onabort = () => reject(tx.error || new Error('IndexedDB transaction aborted'));
  });
}

async function loadTokenRecord() {
  const rec = await secretsTx('readonly', (st) => idb(st.get(TOKEN_KEY)));
  return rec && typeof rec.token === 'string' ? rec : null;
}

/** Writes (or, with `null`, deletes) the token record; resolves once the transaction is durable. */
async function saveTokenRecord(rec) {
  await secretsTx('readwrite', (st) => (rec ? st.put(rec, TOKEN_KEY) : st.delete(TOKEN_KEY)));
}

// Close storage.local (queue, settings, skip list) to content scripts, and so to a compromised renderer, where the
// browser allows it (Chromium does; Firefox supports access levels only for storage.session and refuses). Content
// scripts never use storage; the worker and the popup are trusted contexts.
if (chrome.storage.local.setAccessLevel) {
  chrome.storage.local.setAccessLevel({ accessLevel: 'TRUSTED_CONTEXTS' }).catch(() => {});
}

const ready = (async () => {
  await initCore({ module_or_path: chrome.runtime.getURL('wasm/personkit_core_bg.wasm') });
  const stored = await chrome.storage.local.get(null);
  S.settings = { ...defaultSettings(), ...(stored.settings || {}) };
  const legacy = typeof stored.token === 'string' ? { token: stored.token, relay: validRelayUrl(S.settings.relayUrl) || DEFAULT_RELAY } : null;
  let rec = null;
  try {
    rec = await loadTokenRecord();
    if (legacy) {
      // Upgrade from a version that kept the token in storage.local: move it, then delete it there.
      if (!rec) {
        rec = legacy;
        await saveTokenRecord(rec);
      }
      await chrome.storage.local.remove('token');
    }
  } catch (e) {
    // IndexedDB unavailable: keep working with a legacy token (left where it is) rather than not at all.
    console.error('personkit: the token store is not available', e && e.message);
    rec = rec || legacy;
  }
  S.token = rec ? rec.token : null;
  S.tokenRelay = rec ? rec.relay : null;
  S.deviceId = stored.deviceId || crypto.randomUUID();
  S.queue = stored.queue || {};
  S.seen = stored.seen || {};
  S.skipped = Array.isArray(stored.skipped) ? stored.skipped : [];
  S.stats = stored.stats || {};
  S.patterns = Array.isArray(stored.patterns) ? stored.patterns : [];
  S.activePatterns = Array.isArray(stored.activePatterns) ? stored.activePatterns : [];
  S.fast = stored.testFastFlush === true;
  S.surfaces = JSON.parse(core.surfaces());
  if (!stored.deviceId) await chrome.storage.local.set({ deviceId: S.deviceId });
})();

// One mutation of S at a time: capture, outcomes, settings and pairing interleave on await points otherwise.
let chain = Promise.resolve();
function exclusive(fn) {
  const run = chain.then(fn);
  chain = run.catch(() => {});
  return run;
}

async function persist(keys) {
  const out = {};
  for (const k of keys) out[k] = S[k];
  await chrome.storage.local.set(out);
}

function json(fn, input) {
  return JSON.parse(fn(JSON.stringify(input)));
}

function today() {
  return new Date().toISOString().slice(0, 10);
}

function surfaceInfo(id) {
  return S.surfaces.find((s) => s.id === id) || null;
}

function captureState(surfaceId, threadId) {
  const info = surfaceInfo(surfaceId);
  if (!info) return 'off';
  if (!S.settings.enabled[surfaceId]) return 'off';
  if (info.status === 'experimental' && !S.settings.experimental) return 'off';
  if (S.settings.killSwitch) return 'paused';
  if (threadId && S.skipped.includes(threadId)) return 'skipped';
  return 'capturing';
}

/** The URL a content script speaks for: the browser's own record of the sending frame decides the origin; the
 * path may come from the script (a same-document navigation can be newer than the sender record). */
function senderPageUrl(sender, claimed) {
  const real = sender.url || (sender.tab && sender.tab.url) || '';
  if (typeof claimed !== 'string' || claimed.length > 4096) return real;
  try {
    const a = new URL(real);
    const b = new URL(claimed);
    return a.origin === b.origin ? b.href : real;
  } catch {
    return real;
  }
}

function adapterFor(url) {
  return json(core.adapterForUrl, { url, day: today() });
}

function isFromExtensionPage(sender) {
  return sender.id === chrome.runtime.id && typeof sender.url === 'string' && sender.url.startsWith(EXTENSION_ORIGIN);
}

function isFromContentScript(sender) {
  return sender.id === chrome.runtime.id && !!sender.tab && !isFromExtensionPage(sender);
}

// ---- validation of content-script messages --------------------------------------------------------------------

function validTurns(turns) {
  if (!Array.isArray(turns) || turns.length > MAX_TURNS_PER_MESSAGE) return null;
  const out = [];
  for (const t of turns) {
    if (!t || typeof t !== 'object') return null;
    if (t.role !== 'user' && t.role !== 'assistant') return null;
    if (typeof t.text !== 'string' || t.text.length > MAX_TEXT_CHARS) return null;
    const key = t.message_key == null ? null : t.message_key;
    if (key !== null && (typeof key !== 'string' || key.length > 2048)) return null;
    const ord = t.ordinal_raw == null ? null : t.ordinal_raw;
    if (ord !== null && (typeof ord !== 'string' || ord.length > 256)) return null;
    out.push({ role: t.role, text: t.text, message_key: key, ordinal_raw: ord });
  }
  return out;
}

// ---- content-script requests -----------------------------------------------------------------------------------

function hello(sender, msg) {
  const url = senderPageUrl(sender, msg.url);
  const a = adapterFor(url);
  if (!a.surface) return { surface: null, state: 'off' };
  return {
    surface: a.surface,
    conversation_id: a.conversation_id,
    thread_id: a.thread_id,
    state: captureState(a.surface.id, a.thread_id),
  };
}

async function captureTurns(sender, msg) {
  const turns = validTurns(msg.turns);
  if (!turns) return { error: 'invalid_message' };
  const url = senderPageUrl(sender, msg.url);
  const a = adapterFor(url);
  if (!a.surface || !a.thread_id) return { queued: 0, state: 'off' };
  const state = captureState(a.surface.id, a.thread_id);
  if (state !== 'capturing') return { queued: 0, state };
  const title = typeof msg.title === 'string' ? msg.title.slice(0, 2048) : null;
  const out = await exclusive(async () => {
    const r = json(core.capture, {
      url,
      title,
      day: today(),
      turns,
      patterns: S.activePatterns,
      device_id: S.deviceId,
      app_version: APP_VERSION,
      captured_at: new Date().toISOString(),
      queue: S.queue,
      seen: S.seen,
      fast: S.fast,
    });
    S.queue = r.queue;
    S.seen = r.seen;
    if (r.queued > 0 || r.overflowed > 0) {
      const st = stat(a.surface.id);
      st.captured = (st.captured || 0) + r.queued;
      if (r.overflowed > 0) st.overflowed = (st.overflowed || 0) + r.overflowed;
      await persist(['queue', 'seen', 'stats']);
    }
    return r;
  });
  if (out.queued > 0) scheduleFlush(core.flushDelayMs(S.fast));
  return { queued: out.queued, already_seen: out.already_seen, near_full: out.near_full, state };
}

async function toggleSkip(sender, msg) {
  const url = senderPageUrl(sender, msg.url);
  const a = adapterFor(url);
  if (!a.surface || !a.thread_id) return { state: a.surface ? captureState(a.surface.id, null) : 'off' };
  await exclusive(async () => {
    const i = S.skipped.indexOf(a.thread_id);
    if (i >= 0) S.skipped.splice(i, 1);
    else {
      S.skipped.push(a.thread_id);
      if (S.skipped.length > MAX_SKIPPED) S.skipped.splice(0, S.skipped.length - MAX_SKIPPED);
    }
    await persist(['skipped']);
  });
  return { state: captureState(a.surface.id, a.thread_id) };
}

function stat(surface) {
  if (!S.stats[surface]) S.stats[surface] = {};
  return S.stats[surface];
}

// ---- delivery ----------------------------------------------------------------------------------------------------

let flushTimer = null;
let flushDue = Infinity;
let flushing = false;

function scheduleFlush(ms) {
  const due = Date.now() + Math.max(0, ms);
  if (flushTimer && due >= flushDue) return;
  if (flushTimer) clearTimeout(flushTimer);
  flushDue = due;
  flushTimer = setTimeout(() => {
    flushTimer = null;
    flushDue = Infinity;
    flush().catch((e) => console.warn('personkit: flush failed', e && e.message));
  }, Math.max(0, ms));
}

/** Where the token goes: only ever the relay origin that issued it. */
function relayBase() {
  return String(S.tokenRelay || S.settings.relayUrl || DEFAULT_RELAY).replace(/\/+$/, '');
}

async function fetchWithTimeout(url, init) {
  const ctl = new AbortController();
  const t = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
  try {
    return await fetch(url, { ...init, signal: ctl.signal, credentials: 'omit', cache: 'no-store' });
  } finally {
    clearTimeout(t);
  }
}

async function post(body, token) {
  try {
    const res = await fetchWithTimeout(`${relayBase()}/v1/observations`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
      body,
    });
    const text = await res.text();
    const ra = Number.parseInt(res.headers.get('Retry-After') || '', 10);
    return { status: res.status, body: text, retry_after_s: Number.isFinite(ra) && ra >= 0 ? ra : null };
  } catch (e) {
    return { status: 0, error: `relay not reachable: ${String((e && e.message) || e).slice(0, 200)}` };
  }
}

async function flush() {
  await ready;
  if (flushing) return;
  flushing = true;
  try {
    for (let round = 0; round < 100; round++) {
      const token = S.token;
      if (!token) return; // not paired (or signed out after a 401): keep everything until pairing
      const next = json(core.nextBatch, { queue: S.queue, now_ms: Date.now(), fast: S.fast });
      if (next.action === 'idle' || next.action === 'sign_in_required') return;
      if (next.action === 'wait') {
        scheduleFlush(next.ms);
        return;
      }
      const outcome = await post(next.body, token);
      const res = await exclusive(async () => {
        const r = json(core.onOutcome, { queue: S.queue, ids: next.ids, ...outcome, now_ms: Date.now(), fast: S.fast });
        S.queue = r.queue;
        const now = Date.now();
        for (const [surface, n] of r.applied.acknowledged) {
          const st = stat(surface);
          st.lastAcceptedMs = now;
          st.accepted = (st.accepted || 0) + n;
        }
        for (const [surface, code] of r.applied.rejected) {
          const st = stat(surface);
          st.lastErrorMs = now;
          st.lastError = code;
        }
        if (r.applied.wipe_token) {
          // A failed delete only costs one more 401 after a restart; the queue outcome must still be recorded.
          await saveTokenRecord(null).catch((e) => console.error('personkit: could not delete the token', e && e.message));
          S.token = null;
          S.tokenRelay = null;
        }
        await persist(['queue', 'stats']);
        return r;
      });
      const retry = res.applied.retry_in_ms;
      if (retry == null) return;
      if (retry > 0) {
        scheduleFlush(retry);
        return;
      }
    }
  } finally {
    flushing = false;
  }
}

// ---- popup requests ------------------------------------------------------------------------------------------------

function queueSummary() {
  return json(core.queueSummary, { queue: S.queue, fast: S.fast });
}

async function relayHealth() {
  if (!S.token) return null;
  try {
    const res = await fetchWithTimeout(`${relayBase()}/v1/me/capture-health`, {
      headers: { Authorization: `Bearer ${S.token}` },
    });
    if (!res.ok) return null;
    const body = await res.json();
    return Array.isArray(body.surfaces) ? body.surfaces : null;
  } catch {
    return null;
  }
}

function ms(t) {
  const v = typeof t === 'string' ? Date.parse(t) : NaN;
  return Number.isFinite(v) ? v : null;
}

async function popupState() {
  const relay = await relayHealth();
  const q = queueSummary();
  const now = Date.now();
  const surfaces = S.surfaces.map((s) => {
    const st = S.stats[s.id] || {};
    const r = (relay || []).find((x) => x && x.surface === s.id) || null;
    const relayError = r && r.last_error ? ms(r.last_error.at) : null;
    const light = json(core.healthLight, {
      now_ms: now,
      enabled: captureState(s.id, null) !== 'off',
      local_accepted_ms: st.lastAcceptedMs || null,
      local_error_ms: st.lastErrorMs || null,
      relay_accepted_ms: r ? ms(r.last_accepted_at) : null,
      relay_error_ms: relayError,
    });
    return {
      id: s.id,
      name: s.name,
      status: s.status,
      enabled: !!S.settings.enabled[s.id],
      light,
      captured: st.captured || 0,
      accepted: st.accepted || 0,
      turns_24h: r ? r.turns_24h : null,
    };
  });
  return {
    settings: S.settings,
    paired: !!S.token,
    signInRequired: q.sign_in_required || (!S.token && !!S.settings.everPaired),
    queueLength: q.queue_length,
    held: q.held,
    sent: q.sent,
    nearFull: q.near_full,
    lastError: q.last_error,
    relayReachable: relay !== null,
    patterns: S.patterns,
    patternErrors: json(core.validatePatterns, S.patterns),
    surfaces,
  };
}

function validRelayUrl(u) {
  if (typeof u !== 'string' || u.length > 512) return null;
  try {
    const url = new URL(u);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') return null;
    return url.origin;
  } catch {
    return null;
  }
}

/** `patch` applied to `s` (absolute values, so applying a patch twice changes nothing); throws on a bad URL. */
function patchedSettings(s, patch) {
  const out = { ...s, enabled: { ...s.enabled } };
  if ('relayUrl' in patch) {
    const u = validRelayUrl(patch.relayUrl);
    if (!u) throw new Error('invalid relay URL');
    out.relayUrl = u;
  }
  for (const k of ['experimental', 'killSwitch']) if (k in patch) out[k] = patch[k] === true;
  if (patch.enabled && typeof patch.enabled === 'object') {
    for (const [id, on] of Object.entries(patch.enabled)) if (surfaceInfo(id)) out.enabled[id] = on === true;
  }
  return out;
}

// Settings intents (see popup.js): the popup records each change in storage.session (extension pages and this
// worker only; content scripts cannot read or write it) before messaging it, so a change whose message is lost
// (popup closed at once, worker waking up) is still applied here: on the message, on the storage change, or on
// the next start. Ids already applied are remembered (storage.session `settingsApplied`), so a retried message or
// a late duplicate never reapplies an older change over a newer one.
const INTENT_PREFIX = 'settingsIntent:';
const APPLIED_KEY = 'settingsApplied';
const MAX_APPLIED = 200;

function validIntentKey(k) {
  return typeof k === 'string' && k.startsWith(INTENT_PREFIX) && k.length <= INTENT_PREFIX.length + 64;
}

/** Applies every recorded intent (oldest first), plus `extra` ({key, patch}) from a message if it was not
 * recorded; persists once; removes the applied intents. Runs inside `exclusive`. */
async function applyIntents(extra) {
  let session = {};
  try {
    session = await chrome.storage.session.get(null);
  } catch (e) {
    console.warn('personkit: storage.session unavailable', e && e.message);
  }
  const applied = Array.isArray(session[APPLIED_KEY]) ? session[APPLIED_KEY] : [];
  const todo = Object.entries(session)
    .filter(([k, v]) => validIntentKey(k) && v && typeof v === 'object' && v.patch && typeof v.patch === 'object')
    .map(([k, v]) => ({ key: k, patch: v.patch, at: Number(v.at) || 0 }))
    .sort((a, b) => a.at - b.at);
  if (extra && !applied.includes(extra.key) && !todo.some((t) => t.key === extra.key)) todo.push({ ...extra, at: Date.now() });
  if (todo.length === 0) return false;
  let s = S.settings;
  let bad = null;
  for (const t of todo) {
    if (applied.includes(t.key)) continue;
    try {
      s = patchedSettings(s, t.patch);
    } catch (e) {
      if (extra && t.key === extra.key) bad = e;
    }
    applied.push(t.key);
  }
  if (s !== S.settings) {
    S.settings = { ...s, rev: (S.settings.rev || 0) + 1 };
    await persist(['settings']);
  }
  try {
    await chrome.storage.session.set({ [APPLIED_KEY]: applied.slice(-MAX_APPLIED) });
    await chrome.storage.session.remove(todo.map((t) => t.key).filter((k) => k in session));
  } catch (e) {
    console.warn('personkit: could not clear applied settings intents', e && e.message);
  }
  if (bad) throw bad;
  return true;
}

async function setSettings(patch, intent) {
  if (!patch || typeof patch !== 'object') return { error: 'invalid_message' };
  const key = validIntentKey(intent) ? intent : `${INTENT_PREFIX}${crypto.randomUUID()}`;
  const changed = await exclusive(() => applyIntents({ key, patch }));
  if (changed) broadcast();
  return { ok: true, settings: S.settings };
}

async function setPatterns(patterns) {
  if (!Array.isArray(patterns) || patterns.length > 200 || !patterns.every((p) => typeof p === 'string')) {
    return { error: 'invalid_message' };
  }
  const lines = patterns.map((p) => p.trim()).filter((p) => p.length > 0);
  const errors = json(core.validatePatterns, lines);
  const bad = new Set(errors.map((e) => e.index));
  await exclusive(async () => {
    S.patterns = lines;
    // Only patterns the core compiled reach the capture path.
    S.activePatterns = lines.filter((_, i) => !bad.has(i));
    await persist(['patterns', 'activePatterns']);
  });
  return { ok: true, errors };
}

async function pair(msg) {
  const base = validRelayUrl(msg.relayUrl || S.settings.relayUrl);
  const code = typeof msg.code === 'string' ? msg.code.trim() : '';
  if (!base) return { ok: false, error: 'Enter the relay URL, e.g. http://127.0.0.1:8787' };
  if (!code || code.length > 64) return { ok: false, error: 'Enter the pairing code that `personkit pair` printed' };
  let res;
  try {
    res = await fetchWithTimeout(`${base}/v1/pair`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ code, device_name: `browser ${navigator.userAgent.includes('Firefox') ? 'Firefox' : 'Chromium'}` }),
    });
  } catch (e) {
    return { ok: false, error: `Relay not reachable at ${base}: is \`personkit serve\` running?` };
  }
  let body = null;
  try {
    body = await res.json();
  } catch {
    body = null;
  }
  if (!res.ok || !body || typeof body.token !== 'string') {
    const why = body && body.message ? body.message : `HTTP ${res.status}`;
    const hint = body && body.hint ? ` ${body.hint}` : '';
    return { ok: false, error: `Pairing failed: ${why}.${hint}` };
  }
  await exclusive(async () => {
    await saveTokenRecord({ token: body.token, relay: base });
    S.token = body.token;
    S.tokenRelay = base;
    S.settings = { ...S.settings, relayUrl: base, everPaired: true, rev: (S.settings.rev || 0) + 1 };
    S.queue = json(core.onPaired, { queue: S.queue });
    await persist(['settings', 'queue']);
  });
  scheduleFlush(0);
  return { ok: true };
}

async function debugInfo() {
  await ready;
  const q = queueSummary();
  return { queueLength: q.queue_length, sent: q.sent, held: q.held, lastError: q.last_error, paired: !!S.token };
}

// Test hook (see TESTING.md): `await globalThis.__personkitDebug()` in the worker.
globalThis.__personkitDebug = debugInfo;

// Benchmark hook (see TESTING.md): the same 4 KB turn as `shared/benches/capture_turn.rs`, through the same
// `capture` entry point, with fresh state (nothing is queued or persisted).
function benchTurn(i) {
  let s = `Turn ${i}: here is how I set up the service.\n\n`;
  while (s.length < 4096 - 200) {
    s += 'The deployment reads its settings from the environment and retries with backoff.\n';
    s += '    fn main() { let x = compute(42); println!("{x}"); }\n';
    s += '- first item of a list\n- second item with `inline code`\n';
  }
  s += 'export API_KEY="sk-proj-abcdefghijklmnopqrstuvwx"\n';
  return s.slice(0, 4096);
}

globalThis.__personkitBench = async (n = 300) => {
  await ready;
  const texts = Array.from({ length: n }, (_, i) => benchTurn(i));
  const t0 = performance.now();
  let sink = 0;
  texts.forEach((text, i) => {
    const input = JSON.stringify({
      url: 'https://chatgpt.com/c/bench',
      turns: [{ role: 'assistant', text, message_key: `k${i}` }],
      device_id: 'bench',
      app_version: 'bench',
      captured_at: '2026-11-22T10:00:00Z',
    });
    sink += core.capture(input).length;
  });
  const us = ((performance.now() - t0) * 1000) / n;
  return { n, usPerTurn: us, sink };
};

function broadcast() {
  chrome.tabs.query({}).then(
    (tabs) => {
      for (const t of tabs) {
        if (t.id != null) chrome.tabs.sendMessage(t.id, { type: 'refresh' }).catch(() => {});
      }
    },
    () => {},
  );
}

// ---- listeners (top level, all awaiting `ready`) -----------------------------------------------------------------

async function handle(msg, sender) {
  await ready;
  if (!msg || typeof msg !== 'object' || typeof msg.type !== 'string') return { error: 'invalid_message' };
  if (isFromContentScript(sender)) {
    switch (msg.type) {
      case 'hello':
        return hello(sender, msg);
      case 'capture':
        return captureTurns(sender, msg);
      case 'toggleSkip':
        return toggleSkip(sender, msg);
      default:
        return { error: 'unknown_message' };
    }
  }
  if (isFromExtensionPage(sender)) {
    switch (msg.type) {
      case 'popupState':
        return popupState();
      case 'setSettings':
        return setSettings(msg.patch, msg.intent);
      case 'setPatterns':
        return setPatterns(msg.patterns);
      case 'pair':
        return pair(msg);
      case 'debug':
        return debugInfo();
      case 'flush':
        scheduleFlush(0);
        return { ok: true };
      default:
        return { error: 'unknown_message' };
    }
  }
  return { error: 'forbidden' };
}

chrome.runtime.onMessage.addListener((msg, sender, sendResponse) => {
  handle(msg, sender).then(sendResponse, (e) => sendResponse({ error: String((e && e.message) || e) }));
  return true;
});

chrome.storage.onChanged.addListener((changes, area) => {
  if (area === 'session') {
    if (Object.entries(changes).some(([k, c]) => validIntentKey(k) && c.newValue !== undefined)) {
      ready.then(() => exclusive(() => applyIntents(null))).then((changed) => changed && broadcast(), (e) => console.warn('personkit: settings intent', e && e.message));
    }
    return;
  }
  if (area !== 'local') return;
  ready.then(() => {
    if ('testFastFlush' in changes) {
      S.fast = changes.testFastFlush.newValue === true;
      if (S.fast) scheduleFlush(0);
    }
  });
});

chrome.alarms.onAlarm.addListener((alarm) => {
  if (alarm.name === ALARM) ready.then(() => scheduleFlush(0));
});

chrome.runtime.onInstalled.addListener(() => {
  ready.then(() => chrome.alarms.create(ALARM, { periodInMinutes: 1 }));
});

chrome.runtime.onStartup.addListener(() => {
  ready.then(() => scheduleFlush(0));
});

// A restarted worker resumes delivery of whatever was persisted, and applies settings changes whose message
// never arrived.
ready.then(
  () => {
    exclusive(() => applyIntents(null)).then((changed) => changed && broadcast(), (e) => console.warn('personkit: settings intent', e && e.message));
    chrome.alarms.get(ALARM).then((a) => a || chrome.alarms.create(ALARM, { periodInMinutes: 1 }));
    if (queueSummary().queue_length > 0) scheduleFlush(core.flushDelayMs(S.fast));
  },
  (e) => console.error('personkit: core failed to start', e && e.message),
);
