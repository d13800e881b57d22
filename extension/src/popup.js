// personkit popup: talks only to the worker (never to the relay, never holds the token). Element ids are test
// hooks documented in TESTING.md.
//
// A user's click is never silently lost. Every settings change is (1) recorded as an intent in storage.session —
// written by the browser even if this page closes right after the click, readable by extension pages and the
// worker only, and applied by the worker on its next start or storage change if the message below never arrives —
// and (2) sent to the worker, which applies it (idempotently: a patch sets absolute values) and replies with the
// settings it persisted. The popup retries a rejected or unanswered message, shows an error if every attempt
// failed, and never lets a periodic render overwrite a control whose change is not yet confirmed (pending
// controls are left alone, and a state older than the newest confirmed settings revision is ignored).

const $ = (id) => document.getElementById(id);
const M = globalThis.personkitMessages;

const SEND_TIMEOUT_MS = 4000;
const WRITE_ATTEMPTS = 4;

function delay(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

/** One message to the worker; rejects on a browser error, on no answer within `timeoutMs`, or on no reply. */
function sendOnce(msg, timeoutMs = SEND_TIMEOUT_MS) {
  let timer = null;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer from the extension's worker within ${timeoutMs} ms`)), timeoutMs);
  });
  return Promise.race([chrome.runtime.sendMessage(msg), timeout])
    .then((r) => {
      // Firefox resolves with undefined when no listener answered (e.g. a background page that was shutting down).
      if (r === undefined) throw new Error('the extension\'s worker did not answer');
      return r;
    })
    .finally(() => clearTimeout(timer));
}

/** `sendOnce` retried with backoff (for idempotent requests only). */
async function send(msg, attempts = 1, timeoutMs = SEND_TIMEOUT_MS) {
  let last = null;
  for (let i = 0; i < attempts; i++) {
    if (i > 0) await delay(250 * 2 ** (i - 1));
    try {
      return await sendOnce(msg, timeoutMs);
    } catch (e) {
      last = e;
      console.warn(`personkit popup: ${msg.type} attempt ${i + 1}/${attempts} failed: ${e && e.message}`);
    }
  }
  throw last || new Error('not sent');
}

let current = null;
/** Newest settings revision the worker confirmed; states carrying an older one are stale. */
let confirmedRev = -1;
/** Control key (`killSwitch`, `experimental`, `enabled:<surface>`) → value the user chose, not yet confirmed. */
const pending = new Map();

function showSettingsError(text) {
  const el = $('settings-error');
  el.hidden = !text;
  el.textContent = text || '';
}

function patchKeys(patch) {
  const keys = [];
  for (const k of ['killSwitch', 'experimental']) if (k in patch) keys.push([k, patch[k]]);
  for (const [id, on] of Object.entries(patch.enabled || {})) keys.push([`enabled:${id}`, on]);
  return keys;
}

function controlFor(key) {
  if (key === 'killSwitch') return $('kill-switch');
  if (key === 'experimental') return $('experimental');
  const id = key.slice('enabled:'.length);
  return document.querySelector(`input[data-surface="${CSS.escape(id)}"]`);
}

function settingValue(settings, key) {
  if (key.startsWith('enabled:')) return !!(settings.enabled || {})[key.slice('enabled:'.length)];
  return !!settings[key];
}

/** Sends one settings change the user made; resolves when the worker confirmed it or every attempt failed. */
async function writeSettings(patch) {
  const id = crypto.randomUUID();
  const keys = patchKeys(patch);
  for (const [k, v] of keys) pending.set(k, { v, id });
  showSettingsError('');
  // The intent and the message both leave in this same task (the click's), so a popup closed right after the
  // click has already handed both to the browser; the worker removes the intent once applied and ignores
  // whichever of the two reaches it second (see the header comment).
  const intentKey = `${M.INTENT_PREFIX}${id}`;
  const recording = chrome.storage.session.set({ [intentKey]: { patch, at: Date.now() } }).then(
    () => true,
    (e) => {
      console.warn('personkit popup: could not record the settings intent', e && e.message);
      return false;
    },
  );
  let reply = null;
  let error = null;
  try {
    reply = await send(M.make.setSettings(patch, intentKey), WRITE_ATTEMPTS);
    if (!reply || reply.error || !reply.settings) throw new Error((reply && reply.error) || 'unexpected reply');
  } catch (e) {
    error = e;
  }
  const recorded = await recording;
  for (const [k] of keys) if (pending.get(k)?.id === id) pending.delete(k);
  if (error) {
    const later = recorded ? ' It is kept and will be applied when the extension wakes up; reopen the popup to check.' : ' Click it again.';
    showSettingsError(`Could not confirm this setting (${error.message}).${later}`);
    for (const [k] of keys) {
      const el = controlFor(k);
      if (el && current) el.checked = settingValue(current.settings, k);
    }
    return;
  }
  if (typeof reply.settings.rev === 'number' && reply.settings.rev >= confirmedRev) {
    confirmedRev = reply.settings.rev;
    if (current) current = { ...current, settings: reply.settings };
  }
  for (const [k] of keys) {
    const el = controlFor(k);
    if (el && !pending.has(k)) el.checked = settingValue(reply.settings, k);
  }
  refresh();
}

/** Sets a checkbox from the worker's state unless the user has an unconfirmed change on it. */
function syncCheckbox(el, key, settings) {
  if (pending.has(key)) return;
  const v = settingValue(settings, key);
  if (el.checked !== v) el.checked = v;
}

function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

function renderPairStatus(s) {
  const el = $('pair-status');
  el.classList.remove('paired', 'signin');
  if (s.signInRequired) {
    setText(el, 'Sign in again: the relay no longer accepts this browser. Enter a new pairing code.');
    el.classList.add('signin');
  } else if (s.paired) {
    setText(el, `Paired with ${s.settings.relayUrl}`);
    el.classList.add('paired');
  } else {
    setText(el, 'Not paired');
  }
}

function renderSurfaces(s) {
  const list = $('surfaces');
  for (const surf of s.surfaces) {
    let li = list.querySelector(`li[data-id="${CSS.escape(surf.id)}"]`);
    if (!li) {
      li = document.createElement('li');
      li.dataset.id = surf.id;
      const dot = document.createElement('span');
      dot.className = 'dot';
      dot.setAttribute('data-health', surf.id);
      const name = document.createElement('label');
      name.className = 'name';
      const box = document.createElement('input');
      box.type = 'checkbox';
      box.setAttribute('data-surface', surf.id);
      box.addEventListener('change', () => {
        writeSettings({ enabled: { [surf.id]: box.checked } });
      });
      name.append(box, ` ${surf.name}`);
      li.append(dot, name);
      if (surf.status === 'experimental') {
        const tag = document.createElement('span');
        tag.className = 'exp';
        tag.textContent = 'experimental';
        li.append(tag);
      }
      list.append(li);
    }
    li.hidden = surf.status === 'experimental' && !s.settings.experimental;
    syncCheckbox(li.querySelector('input[data-surface]'), `enabled:${surf.id}`, s.settings);
    const dot = li.querySelector('[data-health]');
    dot.setAttribute('data-status', surf.light);
    if (surf.reason) dot.setAttribute('data-reason', surf.reason);
    else dot.removeAttribute('data-reason');
    const why =
      surf.reason === 'adapter_stale'
        ? ' — pages show a conversation but no turns are read (the site may have changed)'
        : surf.unparsed
          ? " — the site's responses no longer parse (network path); the page is still read"
          : '';
    dot.title = `${surf.light}: ${surf.accepted} delivered from this browser${why}${surf.rule ? ` (rule ${surf.rule})` : ''}`;
    // Which capture paths work: the page (DOM), the site's own responses (network), or both.
    let paths = li.querySelector('[data-paths]');
    if (surf.paths) {
      if (!paths) {
        paths = document.createElement('span');
        paths.className = 'paths';
        paths.setAttribute('data-paths', surf.id);
        li.append(paths);
      }
      paths.dataset.working = surf.paths;
      if (surf.unparsed) paths.dataset.unparsed = surf.unparsed;
      else delete paths.dataset.unparsed;
      const label = { both: 'page + network', dom: 'page only', network: 'network only', none: '' }[surf.paths] || '';
      paths.textContent = surf.unparsed ? `${label}${label ? ', ' : ''}network unreadable` : label;
      paths.title = surf.unparsed
        ? `The site's responses no longer parse (${surf.unparsed}); turns come from the page only.`
        : 'Capture paths that gave turns in the last 24 hours: the page as shown (DOM) and the site\'s own responses (network).';
    } else if (paths) {
      paths.remove();
    }
  }
}

function renderPatterns(errors) {
  const box = $('patterns-status');
  box.replaceChildren();
  if (!errors || errors.length === 0) {
    const ok = document.createElement('span');
    ok.className = 'ok';
    ok.textContent = current && current.patterns.length ? `${current.patterns.length} pattern(s) active` : '';
    box.append(ok);
    return;
  }
  for (const e of errors) {
    const line = document.createElement('div');
    line.className = 'bad';
    line.textContent = `Invalid (line ${e.index + 1}, not used): ${e.pattern} — ${e.message.split('\n').pop()}`;
    box.append(line);
  }
}

function renderHeld(s) {
  $('held').hidden = !s.held;
  if (!s.held) return;
  setText(
    $('held-explain'),
    `The relay refused these turns. Each is sent once more after the extension or the relay is updated, and dropped ${s.heldDays} days after it was refused.`,
  );
  const list = $('held-reasons');
  const lines = (s.heldReasons || []).map((r) => `${r.count} × ${r.code}${r.message ? `: ${r.message}` : ''}`);
  if (Array.from(list.children, (li) => li.textContent).join('\n') === lines.join('\n')) return;
  list.replaceChildren(
    ...lines.map((text, i) => {
      const li = document.createElement('li');
      li.textContent = text;
      li.dataset.code = s.heldReasons[i].code;
      return li;
    }),
  );
}

/** One line per conversation whose capture is incomplete: what the page showed, what the relay has, and why the
 * rest is missing. */
function incompleteWhy(r) {
  if (r.unreadable) {
    return `${r.surfaceName} · ${r.shown} of ? read · the page shows a conversation its rules do not read (the site may have changed)`;
  }
  const parts = [`${r.surfaceName}`, `${r.captured} of ${r.shown} captured`];
  if (r.waiting) parts.push(`${r.waiting} waiting to be sent`);
  if (r.held) parts.push(`${r.held} refused by the relay (see Delivery)`);
  if (r.unread) parts.push(`${r.unread} not read yet`);
  return parts.join(' · ');
}

function renderIncomplete(s) {
  const rows = s.incomplete || [];
  $('incomplete').hidden = rows.length === 0;
  const list = $('incomplete-list');
  const key = JSON.stringify(rows.map((r) => [r.url, r.title, incompleteWhy(r)]));
  if (list.dataset.key === key) return;
  list.dataset.key = key;
  list.replaceChildren(
    ...rows.map((r) => {
      const li = document.createElement('li');
      li.dataset.surface = r.surface;
      li.dataset.conversation = r.conversationId;
      const a = document.createElement('a');
      a.href = r.url;
      // Many sites title every tab with their own name: then the conversation's id tells rows apart.
      a.textContent =
        r.title && r.title !== r.surfaceName ? r.title : `${r.surfaceName} conversation ${r.conversationId.slice(0, 12)}`;
      a.addEventListener('click', (e) => {
        e.preventDefault();
        if (/^https:\/\//.test(r.url)) chrome.tabs.create({ url: r.url });
      });
      const why = document.createElement('span');
      why.className = 'why';
      why.textContent = incompleteWhy(r);
      li.append(a, why);
      return li;
    }),
  );
}

function render(s) {
  // A state read before the newest confirmed write is stale: keep showing what the worker confirmed.
  const rev = typeof s.settings.rev === 'number' ? s.settings.rev : -1;
  if (rev < confirmedRev && current) s = { ...s, settings: current.settings };
  else confirmedRev = Math.max(confirmedRev, rev);
  current = s;
  renderPairStatus(s);
  const relay = $('relay-url');
  if (document.activeElement !== relay && !relay.dataset.touched) relay.value = s.settings.relayUrl || '';
  syncCheckbox($('kill-switch'), 'killSwitch', s.settings);
  syncCheckbox($('experimental'), 'experimental', s.settings);
  setText($('queue-length'), String(s.queueLength));
  setText($('sent-count'), String(s.sent));
  setText($('held-count'), String(s.held));
  renderHeld(s);
  renderIncomplete(s);
  $('queue-warning').hidden = !s.nearFull;
  const err = $('last-error');
  err.hidden = !s.lastError;
  if (s.lastError) setText(err, `Last delivery problem: ${s.lastError.message} (${s.lastError.code})`);
  renderSurfaces(s);
  const ta = $('patterns');
  if (document.activeElement !== ta && !ta.dataset.touched) {
    ta.value = s.patterns.join('\n');
    renderPatterns(s.patternErrors);
  }
}

let refreshing = false;
async function refresh() {
  if (refreshing) return;
  refreshing = true;
  try {
    const s = await send(M.make.popupState(), 2, 20000);
    if (s && !s.error && s.settings) render(s);
  } catch (e) {
    console.warn('personkit popup: state not available', e && e.message);
  } finally {
    refreshing = false;
  }
}

$('relay-url').addEventListener('input', (e) => {
  e.target.dataset.touched = '1';
});
$('patterns').addEventListener('input', (e) => {
  e.target.dataset.touched = '1';
});

$('pair-button').addEventListener('click', async () => {
  const status = $('pair-status');
  status.classList.remove('paired', 'signin');
  status.textContent = 'Pairing…';
  // Pairing spends a one-time code: it is sent once (no retry), and a failure is shown.
  let r = null;
  try {
    r = await sendOnce(M.make.pair($('relay-url').value.trim(), $('pair-code').value.trim(), $('allow-plain-http').checked), 30000);
  } catch (e) {
    r = { ok: false, error: `Pairing did not complete: ${e.message}` };
  }
  if (r && r.ok) {
    $('pair-code').value = '';
    delete $('relay-url').dataset.touched;
    await refresh();
  } else {
    status.textContent = (r && r.error) || 'Pairing failed';
    status.classList.add('signin');
  }
});

$('clear-held').addEventListener('click', async () => {
  const status = $('held-status');
  status.textContent = '';
  let r = null;
  try {
    // Clearing twice is the same as once: safe to retry.
    r = await send(M.make.clearHeld(), WRITE_ATTEMPTS);
  } catch (e) {
    r = { error: e.message };
  }
  status.textContent = r && r.ok ? `Cleared ${r.cleared} held turn(s).` : `Could not clear (${(r && r.error) || 'no answer'}).`;
  await refresh();
});

$('kill-switch').addEventListener('change', (e) => {
  writeSettings({ killSwitch: e.target.checked });
});
$('experimental').addEventListener('change', (e) => {
  writeSettings({ experimental: e.target.checked });
});

$('save-patterns').addEventListener('click', async () => {
  const lines = $('patterns').value.split('\n');
  let r = null;
  try {
    r = await send(M.make.setPatterns(lines), WRITE_ATTEMPTS);
  } catch (e) {
    r = { error: e.message };
  }
  showSettingsError(r && r.ok ? '' : `Could not save the patterns (${(r && r.error) || 'no answer'}). Click Save again.`);
  if (r && r.ok) {
    delete $('patterns').dataset.touched;
    await refresh();
    renderPatterns(r.errors);
  }
});

// ---- the library -------------------------------------------------------------------------------------------------

/** Opens the library (optionally on a thread) with a one-time sign-in link the worker asks the relay for. */
async function openLibrary(thread) {
  const status = $('library-status');
  status.textContent = '';
  let r = null;
  try {
    r = await sendOnce(M.make.libraryLink(thread || undefined), 20000);
  } catch (e) {
    r = { error: e.message };
  }
  if (!r || !r.url) {
    status.textContent = `Could not open the library (${(r && r.error) || 'no answer'}).`;
    return;
  }
  await chrome.tabs.create({ url: r.url });
}

/** The page of the tab the user is looking at, as the worker last heard of it (see TESTING.md). */
async function currentPage() {
  const [tab] = await chrome.tabs.query({ active: true, lastFocusedWindow: true });
  if (!tab || tab.id == null) return null;
  const key = `tabPage:${tab.id}`;
  const got = await chrome.storage.session.get(key);
  return typeof got[key] === 'string' ? got[key] : null;
}

let threadShown = null;
async function renderLibrary() {
  const paired = !!(current && current.paired);
  $('open-library').disabled = !paired;
  const link = $('open-thread');
  let thread = null;
  if (paired) {
    const page = await currentPage().catch(() => null);
    if (page) {
      const r = await sendOnce(M.make.pageThread(page), 20000).catch(() => null);
      thread = r && r.thread ? r.thread : null;
    }
  }
  // A different conversation (or none) closes a confirmation that was about another one.
  if (!thread || !threadShown || thread.id !== threadShown.id) $('forget-confirm').hidden = true;
  threadShown = thread;
  link.hidden = !thread;
  $('forget-thread').hidden = !thread || !$('forget-confirm').hidden;
  if (thread) {
    link.dataset.thread = thread.id;
    const title = thread.title && thread.title.trim() ? thread.title : 'Untitled';
    link.textContent = `This conversation in the library: ${title} (${thread.turns} turns)`;
  } else {
    delete link.dataset.thread;
  }
}

$('open-library').addEventListener('click', () => openLibrary(null));
$('open-thread').addEventListener('click', (e) => {
  e.preventDefault();
  if (threadShown) openLibrary(threadShown.id);
});

// Forget: the counts first, then a confirmation; the worker deletes the thread on the relay.
$('forget-thread').addEventListener('click', () => {
  if (!threadShown) return;
  const title = threadShown.title && threadShown.title.trim() ? threadShown.title : 'Untitled';
  setText(
    $('forget-question'),
    `Forget “${title}” (${threadShown.turns} turns, every revision) from the library for good? Its text leaves the search index too, and this conversation is no longer captured (click the page's badge to capture it again).`,
  );
  $('forget-confirm').hidden = false;
  $('forget-thread').hidden = true;
  $('forget-no').focus();
});
$('forget-no').addEventListener('click', () => {
  $('forget-confirm').hidden = true;
  $('forget-thread').hidden = !threadShown;
});
$('forget-yes').addEventListener('click', async () => {
  if (!threadShown) return;
  const thread = threadShown;
  const status = $('library-status');
  $('forget-yes').disabled = true;
  let r = null;
  try {
    r = await sendOnce(M.make.forgetThread(thread.id), 30000);
  } catch (e) {
    r = { error: e.message };
  } finally {
    $('forget-yes').disabled = false;
  }
  $('forget-confirm').hidden = true;
  if (!r || r.error) {
    status.textContent = `Could not forget the conversation (${(r && r.error) || 'no answer'}). Nothing was removed.`;
    $('forget-thread').hidden = false;
    return;
  }
  status.textContent = `Forgot ${r.forgotten} turns. The conversation is skipped from now on.`;
  threadShown = null;
  $('open-thread').hidden = true;
  $('forget-thread').hidden = true;
});

let libraryBusy = false;
async function refreshAll() {
  await refresh();
  if (libraryBusy) return;
  libraryBusy = true;
  try {
    await renderLibrary();
  } catch (e) {
    console.warn('personkit popup: library link', e && e.message);
  } finally {
    libraryBusy = false;
  }
}

refreshAll();
setInterval(refreshAll, 2000);
