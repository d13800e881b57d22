// personkit service worker (Chrome) / background script (Firefox).
//
// The only place the WASM capture core runs (page CSPs block WebAssembly in content scripts). This file does what
// must be JS: it reads messages, the clock and storage, makes the HTTP requests and sets timers; every decision
// (capture policy, message limits, skip list, stats, settings merge, delivery, health lights) is a core call.
// Every listener is registered at the top level and awaits the one `ready` promise. Nothing that matters lives
// only in a global: the core keeps the queue, the dedupe set and local stats in its wasm instance, loaded once from
// the extension origin's IndexedDB at start, and every call that changes them answers with the records it changed,
// which are written there (with settings and skipped threads) before any reply, so a worker that is killed and
// restarted loses nothing. A call costs the same whether 10 or 20,000 turns are remembered. The
// relay token never leaves this context and is sent only to the relay it was issued by: it is kept, with that
// relay's base URL, in the same origin's IndexedDB. Nothing is kept in (or, after the one migration below, read
// from) storage.local, which content scripts (and so a compromised renderer) can read and write in Firefox.

import initCore, * as core from './wasm/personkit_core.js';
import initNet, * as netcore from './wasm/personkit_net.js';
import './messages.js';

const M = globalThis.personkitMessages;
const APP_VERSION = chrome.runtime.getManifest().version;
const EXTENSION_ORIGIN = chrome.runtime.getURL('');
const FETCH_TIMEOUT_MS = 15000;
const ALARM = 'personkit-flush';
/** storage.session key of the test flag for fast queue timings (see TESTING.md). */
const FAST_KEY = 'testFastFlush';

/** In-memory mirror of the worker's state and of the token record, both in the extension origin's IndexedDB;
 * this worker is their only writer. `core` holds the queue, the dedupe set and the stats (the wasm `Core`).
 * `fast` mirrors the test flag `testFastFlush` in storage.session. */
const S = {
  settings: null,
  token: null,
  tokenRelay: null, // the relay origin the token was issued by; the token is sent nowhere else
  deviceId: null,
  core: null,
  skipped: [],
  patterns: [],
  activePatterns: [],
  fast: false,
};

// ---- the extension origin's IndexedDB: the token and the worker's state ------------------------------------------
//
// Content scripts run with the page's origin for IndexedDB, so they (and a compromised renderer hosting them)
// cannot open these databases; storage.local, by contrast, is readable and writable from content scripts in
// Firefox. IndexedDB is persistent (unlike storage.session) and exists in Chromium's service worker and Firefox's
// background page. The token record binds the token to the relay that issued it.

const SECRETS_DB = 'personkit-secrets';
const SECRETS_STORE = 'secrets';
const TOKEN_KEY = 'deviceToken';
// One record per key of S that is persisted (settings, deviceId, skipped, patterns, activePatterns); the core's
// state as `queueMeta`, `held`, `stats`, one record per queued item (key [ITEM, id]) and one per remembered turn
// (key [SEEN, dedupe key] → its sequence number); MIGRATED_KEY once the state of an older version was moved out of
// storage.local. An older version kept the whole queue and dedupe set as the records `queue` and `seen`: the core
// loads them once and they are rewritten as records.
const STATE_DB = 'personkit-state';
const STATE_STORE = 'state';
const MIGRATED_KEY = 'migratedFromStorageLocal';
const ITEM = 'q';
const SEEN = 's';

function idb(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error || new Error('IndexedDB request failed'));
  });
}

const dbs = new Map();
/** The database `name` (one object store, `store`), opened once per worker. */
function openDb(name, store) {
  if (!dbs.has(name)) {
    const req = indexedDB.open(name, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(store);
    const opened = idb(req).then(
      (db) => {
        // Another context (a test, a newer version) asking to delete or upgrade it: let go, reopen on next use.
        db.onversionchange = () => {
          db.close();
          dbs.delete(name);
        };
        return db;
      },
      (e) => {
        dbs.delete(name);
        throw e;
      },
    );
    dbs.set(name, opened);
  }
  return dbs.get(name);
}

async function dbTx(name, store, mode, durability, fn) {
  const db = await openDb(name, store);
  return new Promise((resolve, reject) => {
    const tx = db.transaction(store, mode, { durability });
    let out;
    Promise.resolve(fn(tx.objectStore(store))).then((v) => {
      out = v;
    }, reject);
    tx.oncomplete = () => resolve(out);
    tx.onerror = () => reject(tx.error || new Error('IndexedDB transaction failed'));
    tx.onabort = () => reject(tx.error || new Error('IndexedDB transaction aborted'));
  });
}

async function loadTokenRecord() {
  const rec = await dbTx(SECRETS_DB, SECRETS_STORE, 'readonly', 'strict', (st) => idb(st.get(TOKEN_KEY)));
  return rec && typeof rec.token === 'string' ? rec : null;
}

/** Writes (or, with `null`, deletes) the token record; resolves once the transaction is durable. */
async function saveTokenRecord(rec) {
  await dbTx(SECRETS_DB, SECRETS_STORE, 'readwrite', 'strict', (st) => (rec ? st.put(rec, TOKEN_KEY) : st.delete(TOKEN_KEY)));
}

/** Every state record: `{records: {key: value}, items: [item], seenKeys: [key], seenSeqs: [seq]}`. */
async function readState() {
  return dbTx(STATE_DB, STATE_STORE, 'readonly', 'default', async (st) => {
    const [keys, values] = await Promise.all([idb(st.getAllKeys()), idb(st.getAll())]);
    const out = { records: {}, items: [], seenKeys: [], seenSeqs: [] };
    keys.forEach((k, i) => {
      if (!Array.isArray(k)) out.records[k] = values[i];
      else if (k[0] === ITEM) out.items.push(values[i]);
      else if (k[0] === SEEN) {
        out.seenKeys.push(k[1]);
        out.seenSeqs.push(values[i]);
      }
    });
    return out;
  });
}

/** Whether a core call's `changes` name any record. */
function hasChanges(c) {
  return !!(c.seen_put.length || c.seen_delete.length || c.items_put.length || c.items_delete.length || c.held || c.queue_meta || c.stats);
}

/** Writes a core call's `changes`, plus `extra` records of S and the deletion of `remove` keys, in one
 * transaction; resolves once it committed. */
async function writeChanges(c, extra = {}, remove = []) {
  if (!hasChanges(c) && !Object.keys(extra).length && !remove.length) return;
  await dbTx(STATE_DB, STATE_STORE, 'readwrite', 'default', (st) => {
    // Deletions first: a key forgotten and seen again within one call is stored anew.
    for (const k of c.seen_delete) st.delete([SEEN, k]);
    for (const [k, seq] of c.seen_put) st.put(seq, [SEEN, k]);
    for (const item of c.items_put) st.put(item, [ITEM, item.id]);
    for (const id of c.items_delete) st.delete([ITEM, id]);
    if (c.held) st.put(c.held, 'held');
    if (c.queue_meta) st.put(c.queue_meta, 'queueMeta');
    if (c.stats) st.put(c.stats, 'stats');
    for (const [k, v] of Object.entries(extra)) st.put(v, k);
    for (const k of remove) st.delete(k);
  });
}

/** The core, loaded from what readState read (linear in the records); an older version's whole-state records are
 * rewritten as records, in one transaction that also deletes them. */
async function loadCore(state) {
  const r = state.records;
  const c = core.Core.load(
    JSON.stringify({
      queue_meta: r.queueMeta,
      items: state.items,
      held: r.held,
      seen_keys: state.seenKeys,
      seen_seqs: state.seenSeqs,
      stats: r.stats,
      legacy_queue: r.queue,
      legacy_seen: r.seen,
    }),
  );
  const l = JSON.parse(c.loadChanges());
  await writeChanges(l.changes, {}, l.rewrite ? ['queue', 'seen'] : []);
  return c;
}

/** Writes these records in one transaction; resolves once it committed. */
async function writeState(records) {
  await dbTx(STATE_DB, STATE_STORE, 'readwrite', 'default', (st) => {
    for (const [k, v] of Object.entries(records)) st.put(v, k);
  });
}

/** The worker's state; on the first start after an upgrade, moved out of storage.local once. The core decides
 * what is taken from there: never a token nor a relay URL (see `migrateLegacy`). */
async function loadOrMigrateState(tokenRelay) {
  const state = await readState();
  if (state.records[MIGRATED_KEY]) return state;
  const legacy = await chrome.storage.local.get(null);
  const m = json(core.migrateLegacy, { local: legacy, token_relay: tokenRelay });
  if (m.refused.length) console.warn(`personkit: not taken from storage.local: ${m.refused.join(', ')}`);
  const moved = { ...m.state, [MIGRATED_KEY]: { at: Date.now() } };
  await writeState(moved);
  if (m.remove.length) await chrome.storage.local.remove(m.remove);
  return { records: moved, items: [], seenKeys: [], seenSeqs: [] };
}

// Close storage.local to content scripts, and so to a compromised renderer, where the browser allows it (Chromium
// does; Firefox supports access levels only for storage.session and refuses). Nothing is kept there any more, but
// a closed area cannot be used to plant data for a later version either. Content scripts never use storage.
if (chrome.storage.local.setAccessLevel) {
  chrome.storage.local.setAccessLevel({ accessLevel: 'TRUSTED_CONTEXTS' }).catch(() => {});
}

const ready = (async () => {
  await initCore({ module_or_path: chrome.runtime.getURL('wasm/personkit_core_bg.wasm') });
  // The site rules are data shipped beside the module (scripts/build-extension): installed once, before any call.
  const registry = await fetch(chrome.runtime.getURL('registry.json'));
  core.installRegistry(await registry.text());
  const rec = await loadTokenRecord();
  const state = await loadOrMigrateState(rec ? rec.relay : null);
  const stored = state.records;
  const loaded = json(core.loadState, {
    settings: stored.settings,
    skipped: stored.skipped,
    patterns: stored.patterns,
    active_patterns: stored.activePatterns,
  });
  S.settings = loaded.settings;
  S.skipped = loaded.skipped;
  S.patterns = loaded.patterns;
  S.activePatterns = loaded.active_patterns;
  S.token = rec ? rec.token : null;
  S.tokenRelay = rec ? rec.relay : null;
  S.deviceId = typeof stored.deviceId === 'string' ? stored.deviceId : crypto.randomUUID();
  S.core = await loadCore(state);
  const session = await chrome.storage.session.get(FAST_KEY).catch(() => ({}));
  S.fast = session[FAST_KEY] === true;
  if (stored.deviceId !== S.deviceId) await persist(['deviceId']);
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
  await writeState(out);
}

function json(fn, input) {
  return JSON.parse(fn(JSON.stringify(input)));
}

/** A call of the core's state object (the wasm `Core`): `method` with `input` as JSON. */
function coreCall(method, input) {
  return JSON.parse(S.core.call(method, JSON.stringify(input)));
}

/** What the core needs to judge a content script's page: the browser's record of the sender (the page, and so
 * the conversation, is only ever taken from it), the URL the script claims (only compared with that record), the
 * time, and the user's choices. */
function pageInput(sender, msg) {
  return { ...M.senderPage(sender), claimed_url: msg.url, now_ms: Date.now(), settings: S.settings, skipped: S.skipped };
}

// ---- content-script requests -----------------------------------------------------------------------------------

function hello(sender, msg) {
  const p = json(core.pageState, pageInput(sender, msg));
  if (p.stale) return { stale: true, surface: null, state: 'off' };
  if (!p.surface) return { surface: null, state: 'off' };
  return p;
}

/** Persists what a core `capture` call changed (queue items, dedupe keys, stats); inside `exclusive`. */
async function keepCaptured(r) {
  if (r.invalid) return r;
  await writeChanges(r.changes);
  return r;
}

async function captureTurns(sender, msg) {
  const out = await exclusive(async () => {
    const r = coreCall('capture', {
      ...pageInput(sender, msg),
      title: msg.title,
      turns: msg.turns,
      patterns: S.activePatterns,
      device_id: S.deviceId,
      app_version: APP_VERSION,
      fast: S.fast,
    });
    return keepCaptured(r);
  });
  if (out.invalid) {
    console.warn('personkit: refused a capture message:', out.invalid);
    return { error: M.ERR.INVALID };
  }
  if (out.stale) return { queued: 0, stale: true, state: out.state };
  if (out.queued > 0) scheduleFlush(core.flushDelayMs(S.fast));
  if (out.state !== 'capturing') return { queued: 0, state: out.state };
  return { queued: out.queued, already_seen: out.already_seen, near_full: out.near_full, state: out.state };
}

/** The network parsers: a second wasm module, instantiated when the first body arrives. */
let netReady = null;
function netParsers() {
  if (!netReady) {
    netReady = initNet({ module_or_path: chrome.runtime.getURL('wasm/personkit_net_bg.wasm') }).catch((e) => {
      netReady = null;
      throw e;
    });
  }
  return netReady;
}

/** A body the page itself received (the page-world script teed it, netbridge.js sent it). The core checks the
 * request against the page's surface and its known endpoints first; only then is the body parsed, and the core
 * queues its turns as `path: "network"` items of the page's conversation, or says why not. */
async function captureNetwork(sender, msg) {
  const base = () => ({
    ...pageInput(sender, msg),
    title: null,
    turns: [],
    patterns: S.activePatterns,
    device_id: S.deviceId,
    app_version: APP_VERSION,
    fast: S.fast,
  });
  const network = { surface: msg.surface, kind: msg.kind, endpoint: msg.endpoint, method: msg.method, error: msg.error || null };
  const first = await exclusive(async () => keepCaptured(coreCall('capture', { ...base(), network })));
  if (first.invalid) return { error: M.ERR.INVALID };
  if (first.stale) return { stale: true };
  const v0 = first.network || {};
  if (v0.waiting) return { waiting: true };
  let parsed = null;
  if (v0.parse) {
    await netParsers();
    const p = JSON.parse(netcore.parseNetwork(msg.surface, msg.kind, msg.body));
    if (p.ok) parsed = JSON.stringify({ conversation_id: p.ok.conversation_id, turns: p.ok.turns });
    else network.parse_error = p.error ? String(p.error.code) : 'stream_unparsed';
  } else if (!v0.unparsed) {
    return { refused: v0.refused || first.state };
  }
  const out = await exclusive(async () => {
    // The parser's answer is the core's second argument.
    const r = JSON.parse(S.core.capture(JSON.stringify({ ...base(), network }), parsed));
    return keepCaptured(r);
  });
  if (out.invalid) {
    console.warn('personkit: refused a network body:', out.invalid);
    return { error: M.ERR.INVALID };
  }
  if (out.queued > 0) scheduleFlush(core.flushDelayMs(S.fast));
  const v = out.network || {};
  // Which paths work (and a body that no longer parses) reach the relay's capture health with the next report.
  if (out.changed) reportAdapters().catch(() => {});
  return { queued: out.queued, turns: v.turns, refused: v.refused || null, unparsed: v.unparsed || null, waiting: !!v.waiting };
}

/** A content script's report of its last read (turns found or not): the core decides whether the surface's adapter
 * has gone stale (`adapter_stale`). */
async function probePage(sender, msg) {
  const out = await exclusive(async () => {
    const { skipped, ...page } = pageInput(sender, msg);
    void skipped;
    const r = coreCall('probe', {
      ...page,
      probe: msg.probe,
      title: msg.title ?? undefined,
      fast: S.fast,
    });
    await writeChanges(r.changes);
    return r;
  });
  reportAdapters().catch((e) => console.warn('personkit: adapter report failed', e && e.message));
  return { reason: out.reason || null };
}

/** Tells the relay which surfaces' adapters went stale, or read pages again, since it was last told (the core
 * decides what; `POST /v1/me/capture-reports`), so its capture health says `adapter_stale` too. */
let reporting = null;
function reportAdapters() {
  if (!reporting) reporting = sendAdapterReports().finally(() => { reporting = null; });
  return reporting;
}

async function sendAdapterReports() {
  await ready;
  if (!S.token) return;
  const r = coreCall('captureReports', { now_ms: Date.now(), fast: S.fast });
  if (!r.body) return;
  let res;
  try {
    res = await fetchWithTimeout(`${relayBase()}/v1/me/capture-reports`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${S.token}` },
      body: r.body,
    });
  } catch {
    return; // not reachable: told at the next read, popup refresh or alarm
  }
  if (!res.ok) return;
  await exclusive(async () => {
    const m = coreCall('reportsSent', { sent: r.sent });
    await writeChanges(m.changes);
  });
}

async function toggleSkip(sender, msg) {
  return exclusive(async () => {
    const r = json(core.toggleSkip, pageInput(sender, msg));
    if (r.changed) {
      S.skipped = r.skipped;
      await persist(['skipped']);
    }
    return r.stale ? { stale: true, state: r.state } : { state: r.state };
  });
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
  return S.tokenRelay || S.settings.relayUrl;
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
    return { status: res.status, body: text, retry_after: res.headers.get('Retry-After') };
  } catch (e) {
    return { status: 0, error: `relay not reachable: ${String((e && e.message) || e).slice(0, 200)}` };
  }
}

// Held turns (the relay rejected them) get one retry when the extension's version or the relay changed; the
// relay is looked at (`GET /v1/health`, no token) at most every RELAY_CHECK_MS while delivering.
const RELAY_CHECK_MS = 10 * 60 * 1000;
let relayCheckedAt = 0;

/** Runs the core's upkeep of held turns; `relayHealth` is the relay's /v1/health body, or null. Inside `exclusive`. */
async function maintainQueue(relayHealthBody) {
  const r = coreCall('maintain', {
    now_ms: Date.now(),
    app_version: APP_VERSION,
    relay: relayHealthBody == null ? undefined : relayBase(),
    relay_health: relayHealthBody == null ? undefined : relayHealthBody,
    fast: S.fast,
  });
  await writeChanges(r.changes);
  return r;
}

async function checkRelay() {
  if (Date.now() - relayCheckedAt < RELAY_CHECK_MS) return;
  relayCheckedAt = Date.now();
  let body = null;
  try {
    const res = await fetchWithTimeout(`${relayBase()}/v1/health`, {});
    if (res.ok) body = await res.text();
  } catch {
    body = null;
  }
  if (body != null) await exclusive(() => maintainQueue(body));
}

async function flush() {
  await ready;
  if (flushing) return;
  flushing = true;
  try {
    if (S.token) await checkRelay();
    for (let round = 0; round < 100; round++) {
      const token = S.token;
      if (!token) return; // not paired (or signed out after a 401): keep everything until pairing
      const next = coreCall('nextBatch', { now_ms: Date.now(), fast: S.fast });
      if (next.action === 'idle' || next.action === 'sign_in_required') return;
      if (next.action === 'wait') {
        scheduleFlush(next.ms);
        return;
      }
      const outcome = await post(next.body, token);
      const res = await exclusive(async () => {
        const r = coreCall('onOutcome', {
          ids: next.ids,
          ...outcome,
          now_ms: Date.now(),
          fast: S.fast,
        });
        if (r.applied.wipe_token) {
          // A failed delete only costs one more 401 after a restart; the queue outcome must still be recorded.
          await saveTokenRecord(null).catch((e) => console.error('personkit: could not delete the token', e && e.message));
          S.token = null;
          S.tokenRelay = null;
        }
        await writeChanges(r.changes);
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
  return coreCall('queueSummary', { fast: S.fast });
}

/** The relay's capture-health body as received (the core parses it), or null when there is none to read. */
async function relayHealth() {
  if (!S.token) return null;
  try {
    const res = await fetchWithTimeout(`${relayBase()}/v1/me/capture-health`, {
      headers: { Authorization: `Bearer ${S.token}` },
    });
    return res.ok ? await res.text() : null;
  } catch {
    return null;
  }
}

async function popupState() {
  await reportAdapters().catch(() => {});
  const relay = await relayHealth();
  return coreCall('popupState', {
    now_ms: Date.now(),
    settings: S.settings,
    fast: S.fast,
    patterns: S.patterns,
    paired: !!S.token,
    relay_health: relay,
  });
}

// Settings intents (see popup.js and the core's `settings` module): the popup records each change in
// storage.session (extension pages and this worker only; content scripts cannot read or write it) before
// messaging it, so a change whose message is lost (popup closed at once, worker waking up) is still applied
// here: on the message, on the storage change, or on the next start. The core merges them idempotently.
const APPLIED_KEY = 'settingsApplied';

/** Applies every recorded intent, plus `extra` ({key, patch}) from a message; persists; removes the applied
 * intents. Runs inside `exclusive`. Resolves to whether any intent was processed. */
async function applyIntents(extra) {
  let session = {};
  try {
    session = await chrome.storage.session.get(null);
  } catch (e) {
    console.warn('personkit: storage.session unavailable', e && e.message);
  }
  const r = json(core.applyIntents, {
    settings: S.settings,
    session,
    intent: extra ? extra.key : undefined,
    patch: extra ? extra.patch : undefined,
    now_ms: Date.now(),
  });
  for (const i of r.ignored) console.warn(`personkit: settings intent ${i.key} not applied: ${i.message}`);
  if (!r.processed) {
    if (r.error) throw new Error(r.error);
    return false;
  }
  if (r.changed) {
    S.settings = r.settings;
    await persist(['settings']);
  }
  try {
    await chrome.storage.session.set({ [APPLIED_KEY]: r.applied });
    await chrome.storage.session.remove(r.remove);
  } catch (e) {
    console.warn('personkit: could not clear applied settings intents', e && e.message);
  }
  if (r.error) throw new Error(r.error);
  return true;
}

async function setSettings(msg) {
  const changed = await exclusive(() => applyIntents({ key: msg.intent, patch: msg.patch }));
  if (changed) broadcast();
  return { ok: true, settings: S.settings };
}

async function setPatterns(msg) {
  return exclusive(async () => {
    const r = json(core.setPatterns, { patterns: msg.patterns });
    S.patterns = r.patterns;
    // Only patterns the core compiled reach the capture path.
    S.activePatterns = r.active;
    await persist(['patterns', 'activePatterns']);
    return { ok: true, errors: r.errors };
  });
}

async function pair(msg) {
  const req = json(core.pairRequest, {
    relay_url: msg.relayUrl,
    code: msg.code,
    settings: S.settings,
    user_agent: navigator.userAgent,
    allow_plain_http: msg.allowPlainHttp === true,
  });
  if (req.error) return { ok: false, error: req.error };
  const base = req.relay;
  let res;
  try {
    res = await fetchWithTimeout(`${base}/v1/pair`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: req.body,
    });
  } catch (e) {
    return { ok: false, error: `Relay not reachable at ${base}: is \`personkit serve\` running?` };
  }
  const text = await res.text().catch(() => '');
  const answer = json(core.pairResponse, { status: res.status, body: text });
  if (answer.error) return { ok: false, error: answer.error };
  await exclusive(async () => {
    await saveTokenRecord({ token: answer.token, relay: base });
    S.token = answer.token;
    S.tokenRelay = base;
    relayCheckedAt = 0;
    const r = coreCall('onPaired', { settings: S.settings, relay: base });
    S.settings = r.settings;
    await writeChanges(r.changes, { settings: S.settings });
  });
  scheduleFlush(0);
  return { ok: true };
}

async function clearHeld() {
  return exclusive(async () => {
    const r = coreCall('clearHeld', {});
    await writeChanges(r.changes);
    return { ok: true, cleared: r.cleared };
  });
}

async function debugInfo() {
  await ready;
  const q = queueSummary();
  return { queueLength: q.queue_length, sent: q.sent, held: q.held, lastError: q.last_error, paired: !!S.token };
}

// Test hook (see TESTING.md): `await globalThis.__personkitDebug()` in the worker.
globalThis.__personkitDebug = debugInfo;

// Benchmark hook (see TESTING.md): the same 4 KB turn as `shared/benches/capture_turn.rs`, through the same
// `capture` entry point, on a fresh core of its own (nothing is queued in the worker's, nothing is persisted).
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
  const fresh = core.Core.load('{}');
  const t0 = performance.now();
  let sink = 0;
  texts.forEach((text, i) => {
    const input = JSON.stringify({
      url: 'https://chatgpt.com/c/bench',
      turns: [{ role: 'assistant', text, message_key: `k${i}` }],
      device_id: 'bench',
      app_version: 'bench',
      now_ms: 1795341600000,
      settings: { enabled: { 'browser-ext:chatgpt': true } },
    });
    sink += fresh.capture(input).length;
  });
  const us = ((performance.now() - t0) * 1000) / n;
  fresh.free();
  return { n, usPerTurn: us, sink };
};

// Benchmark hook for the cost of capture as the state grows (`e2e/benches/capture_state.rs`; TESTING.md). Only with
// the test flag `testFastFlush` set: `fill` replaces the worker's stored queue and dedupe set with `queued` captured
// turns of another conversation and `remembered` dedupe keys, then loads the core from storage as a starting worker
// does (and answers how long that took); `capture` then captures one 4 KB turn through the worker's own path (core
// call and persistence) and answers its milliseconds.
const BENCH_PAGE = 'https://chatgpt.com/c/bench';
globalThis.__personkitBenchState = {
  async fill(remembered, queued) {
    await ready;
    if (!S.fast) throw new Error('bench hook: set the test flag testFastFlush first');
    S.settings = { ...S.settings, enabled: { ...S.settings.enabled, 'browser-ext:chatgpt': true } };
    return exclusive(async () => {
      const turns = Array.from({ length: queued }, (_, i) => ({ role: 'assistant', text: benchTurn(1e6 + i), message_key: `q${i}` }));
      const scratch = core.Core.load('{}');
      const r = JSON.parse(
        scratch.capture(
          JSON.stringify({ url: `${BENCH_PAGE}-queued`, turns, device_id: S.deviceId, app_version: APP_VERSION, now_ms: Date.now(), settings: S.settings }),
        ),
      );
      scratch.free();
      const old = await readState();
      await dbTx(STATE_DB, STATE_STORE, 'readwrite', 'default', (st) => {
        for (const item of old.items) st.delete([ITEM, item.id]);
        for (const k of old.seenKeys) st.delete([SEEN, k]);
        for (const item of r.changes.items_put) st.put(item, [ITEM, item.id]);
        for (let i = 0; i < remembered; i++) st.put(i, [SEEN, (0x10000000000 + i * 7919).toString(16).padStart(20, '0')]);
        st.put(r.changes.queue_meta || {}, 'queueMeta');
        st.put([], 'held');
      });
      const t0 = performance.now();
      const next = await loadCore(await readState());
      const loadMs = performance.now() - t0;
      S.core.free();
      S.core = next;
      return { queued: queueSummary().queue_length, loadMs };
    });
  },
  async capture(i) {
    const sender = { url: BENCH_PAGE, frameId: 0, tab: { url: BENCH_PAGE } };
    const msg = { type: M.MSG.CAPTURE, url: BENCH_PAGE, turns: [{ role: 'assistant', text: benchTurn(i), message_key: `b${i}` }] };
    const t0 = performance.now();
    const out = await captureTurns(sender, msg);
    const ms = performance.now() - t0;
    if (out.queued !== 1) throw new Error(`bench hook: the turn was not queued: ${JSON.stringify(out)}`);
    return ms;
  },
};

function broadcast() {
  chrome.tabs.query({}).then(
    (tabs) => {
      for (const t of tabs) {
        if (t.id != null) chrome.tabs.sendMessage(t.id, M.make.refresh()).catch(() => {});
      }
    },
    () => {},
  );
}

// ---- the library (the relay's dashboard) ------------------------------------------------------------------------

/** `storage.session` key of the page a tab's top frame last showed, as the browser reported it with a content
 * script's message; the popup reads it (content scripts cannot) to offer the library's copy of that conversation. */
const TAB_PAGE_PREFIX = 'tabPage:';

function rememberTabPage(sender) {
  if (!sender.tab || sender.tab.id == null || sender.frameId !== 0) return;
  const url = M.senderPage(sender).tab_url;
  if (url) chrome.storage.session.set({ [`${TAB_PAGE_PREFIX}${sender.tab.id}`]: url }).catch(() => {});
}

/** A relay read or the sign-in link, with the device token; the token never leaves this worker (the popup gets
 * the relay's answer only). */
async function relayJson(path, init) {
  await ready;
  if (!S.token) return { error: 'not paired: pair with the relay first' };
  let res;
  try {
    res = await fetchWithTimeout(`${relayBase()}${path}`, {
      ...init,
      headers: { ...(init && init.headers), Authorization: `Bearer ${S.token}` },
    });
  } catch (e) {
    return { error: `relay not reachable: ${String((e && e.message) || e).slice(0, 200)}` };
  }
  let body = null;
  try {
    body = await res.json();
  } catch {
    body = null;
  }
  return { status: res.status, body };
}

/** A one-time dashboard sign-in link (`POST /v1/me/dashboard-link`), optionally landing on a thread. */
async function libraryLink(msg) {
  const r = await relayJson('/v1/me/dashboard-link', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(msg.thread ? { thread: msg.thread } : {}),
  });
  if (r.error) return { error: r.error };
  const url = r.body && typeof r.body.url === 'string' ? r.body.url : '';
  if (r.status !== 200 || !/^https?:\/\//.test(url)) {
    return { error: (r.body && r.body.message) || `the relay answered ${r.status}` };
  }
  return { url };
}

/** The captured thread of a conversation page (`GET /v1/threads/by-url`), or `{thread: null}`. */
async function pageThread(msg) {
  const r = await relayJson(`/v1/threads/by-url?url=${encodeURIComponent(msg.url)}`, {});
  if (r.error) return { error: r.error };
  if (r.status !== 200 || !r.body || !r.body.thread) return { thread: null };
  const t = r.body.thread;
  return { thread: { id: t.id, title: t.title, turns: t.turns, completeness: t.completeness } };
}

/** Forgets a captured thread for good (`DELETE /v1/threads/{id}`), then drops what of it still waits in the queue
 * and skips the conversation from then on (the core decides both), so the open page does not capture it again. */
async function forgetThread(msg) {
  const r = await relayJson(`/v1/threads/${encodeURIComponent(msg.thread)}`, { method: 'DELETE' });
  if (r.error) return { error: r.error };
  if (r.status !== 200 && r.status !== 404) {
    return { error: (r.body && r.body.message) || `the relay answered ${r.status}` };
  }
  const out = await exclusive(async () => {
    const f = coreCall('forgotten', { thread_id: msg.thread, skipped: S.skipped });
    if (f.changed) {
      S.skipped = f.skipped;
      await writeChanges(f.changes, { skipped: S.skipped });
    }
    return f;
  });
  broadcast();
  const messages = r.status === 200 && r.body && r.body.forgotten ? r.body.forgotten.messages : 0;
  return { forgotten: messages, dropped: out.dropped };
}

// ---- listeners (top level, all awaiting `ready`) -----------------------------------------------------------------

async function handle(raw, sender) {
  await ready;
  const from = M.senderKind(sender, chrome.runtime.id, EXTENSION_ORIGIN);
  if (!from) return { error: M.ERR.FORBIDDEN };
  const { msg, error } = M.check(from, raw);
  if (error) return { error };
  switch (msg.type) {
    case M.MSG.HELLO:
      rememberTabPage(sender);
      return hello(sender, msg);
    case M.MSG.CAPTURE:
      rememberTabPage(sender);
      return captureTurns(sender, msg);
    case M.MSG.PROBE:
      return probePage(sender, msg);
    case M.MSG.TOGGLE_SKIP:
      return toggleSkip(sender, msg);
    case M.MSG.NETWORK:
      return captureNetwork(sender, msg);
    case M.MSG.POPUP_STATE:
      return popupState();
    case M.MSG.SET_SETTINGS:
      return setSettings(msg);
    case M.MSG.SET_PATTERNS:
      return setPatterns(msg);
    case M.MSG.PAIR:
      return pair(msg);
    case M.MSG.CLEAR_HELD:
      return clearHeld();
    case M.MSG.DEBUG:
      return debugInfo();
    case M.MSG.FLUSH:
      scheduleFlush(0);
      return { ok: true };
    case M.MSG.LIBRARY_LINK:
      return libraryLink(msg);
    case M.MSG.PAGE_THREAD:
      return pageThread(msg);
    case M.MSG.FORGET_THREAD:
      return forgetThread(msg);
    default:
      return { error: M.ERR.UNKNOWN };
  }
}

chrome.runtime.onMessage.addListener((msg, sender, sendResponse) => {
  handle(msg, sender).then(sendResponse, (e) => sendResponse({ error: String((e && e.message) || e) }));
  return true;
});

chrome.storage.onChanged.addListener((changes, area) => {
  if (area !== 'session') return;
  if (Object.entries(changes).some(([k, c]) => k.startsWith(M.INTENT_PREFIX) && c.newValue !== undefined)) {
    ready.then(() => exclusive(() => applyIntents(null))).then((changed) => changed && broadcast(), (e) => console.warn('personkit: settings intent', e && e.message));
  }
  if (FAST_KEY in changes) {
    ready.then(() => {
      S.fast = changes[FAST_KEY].newValue === true;
      if (S.fast) scheduleFlush(0);
    });
  }
});

chrome.tabs.onRemoved.addListener((tabId) => {
  chrome.storage.session.remove(`${TAB_PAGE_PREFIX}${tabId}`).catch(() => {});
});

chrome.alarms.onAlarm.addListener((alarm) => {
  if (alarm.name !== ALARM) return;
  ready
    .then(() => exclusive(() => maintainQueue(null)))
    .catch((e) => console.warn('personkit: held turns upkeep', e && e.message))
    .then(() => scheduleFlush(0))
    .then(() => reportAdapters())
    .catch((e) => console.warn('personkit: adapter report failed', e && e.message));
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
    exclusive(() => maintainQueue(null)).then(
      (r) => r.requeued > 0 && scheduleFlush(0),
      (e) => console.warn('personkit: held turns upkeep', e && e.message),
    );
    chrome.alarms.get(ALARM).then((a) => a || chrome.alarms.create(ALARM, { periodInMinutes: 1 }));
    if (queueSummary().queue_length > 0) scheduleFlush(core.flushDelayMs(S.fast));
  },
  (e) => console.error('personkit: core failed to start', e && e.message),
);
