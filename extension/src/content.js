// personkit content script: thin. It asks the worker for this page's adapter (registry data), watches the page
// with a MutationObserver, waits for 600 ms of quiet and for the adapter's streaming markers to clear, reads the
// turns the adapter's selectors describe and sends them to the worker, where the core checks, normalises,
// redacts, hashes, dedupes and queues them. It holds no token and no queue, and no site names or selectors: all
// it knows of a site is its registry entry. It runs in the isolated world: page scripts cannot see its variables
// or call chrome.runtime. Its messages are built by messages.js (loaded before it).
//
// Page-world capture (planned) will talk to this script over window.postMessage; every such message must carry
// `channel`, a random id made per page load below and handed to the page-world script at injection, and is
// validated here before anything reaches the worker. Nothing listens yet.

(() => {
  'use strict';
  if (globalThis.__personkitContentLoaded) return;
  globalThis.__personkitContentLoaded = true;
  const M = globalThis.personkitMessages;

  const QUIET_MS = 600;
  const STREAM_RECHECK_MS = 600;
  const URL_POLL_MS = 500;
  const MAX_DEFER_MS = 5000;
  const STALE_RETRY_MS = 300;
  const MAX_STALE_HELLOS = 100;
  let staleHellos = 0;
  // Reserved for the page-world channel (see header); never sent to the page except to our own injected script.
  const CHANNEL_ID = crypto.randomUUID();
  void CHANNEL_ID;

  let adapter = null; // the registry entry for this surface
  let conversationId = null;
  let state = 'off';
  let lastUrl = location.href;
  let timer = null;
  let helloSeq = 0;
  let sentText = new Map(); // stable id -> text last sent in this conversation
  let lastRead = new Map(); // root -> text, as read by the last snapshot
  let staleRoots = new WeakMap(); // root -> its text when the URL changed (previous conversation's nodes)
  let positions = new WeakMap(); // root -> its position in the thread (ordinal source "position")
  let lastOffset = null; // position of the first root at the last numbering; null before any in this conversation

  function send(msg) {
    return chrome.runtime.sendMessage(msg).catch(() => null);
  }

  // ---- badge -------------------------------------------------------------------------------------------------------

  let badgeHost = null;
  let badgeLabel = null;
  const LABELS = {
    capturing: 'personkit: capturing (click to skip this conversation)',
    skipped: 'personkit: this conversation is skipped (click to resume)',
    paused: 'personkit: paused by the kill switch',
    off: 'personkit: this site is off',
  };

  function ensureBadge() {
    if (!adapter) return;
    if (!badgeHost) {
      badgeHost = document.createElement('div');
      badgeHost.id = 'personkit-badge';
      badgeHost.style.cssText = 'all:initial;position:fixed;right:12px;bottom:12px;z-index:2147483647;';
      const root = badgeHost.attachShadow({ mode: 'open' });
      const style = document.createElement('style');
      style.textContent = `
        button { font: 600 11px/1 system-ui, sans-serif; border: 1px solid #0003; border-radius: 11px;
                 padding: 5px 9px 5px 7px; background: #fff; color: #222; cursor: pointer;
                 box-shadow: 0 1px 4px #0002; display: flex; align-items: center; gap: 5px; opacity: .9; }
        button:hover { opacity: 1; }
        .dot { width: 8px; height: 8px; border-radius: 50%; background: #999; display: inline-block; }
        :host([data-state="capturing"]) .dot { background: #1a9e3a; }
        :host([data-state="skipped"]) .dot { background: #d4a000; }
        :host([data-state="paused"]) .dot { background: #c62828; }
      `;
      const button = document.createElement('button');
      button.type = 'button';
      const dot = document.createElement('span');
      dot.className = 'dot';
      badgeLabel = document.createElement('span');
      button.append(dot, badgeLabel);
      root.append(style, button);
      badgeHost.addEventListener('click', onBadgeClick);
    }
    if (!badgeHost.isConnected) document.documentElement.appendChild(badgeHost);
    if (badgeHost.getAttribute('data-state') !== state) badgeHost.setAttribute('data-state', state);
    const text = state === 'capturing' ? 'PK' : state === 'skipped' ? 'PK skipped' : state === 'paused' ? 'PK paused' : 'PK off';
    if (badgeLabel.textContent !== text) badgeLabel.textContent = text;
    if (badgeHost.title !== LABELS[state]) badgeHost.title = LABELS[state];
  }

  async function onBadgeClick(ev) {
    // Only a real user click may skip or resume: page scripts can dispatch clicks (tests click with trusted input
    // events too, see TESTING.md).
    if (!ev.isTrusted) return;
    if (state !== 'capturing' && state !== 'skipped') return;
    const r = await send(M.make.toggleSkip(location.href));
    if (r && !r.stale && typeof r.state === 'string') {
      state = r.state;
      ensureBadge();
      if (state === 'capturing') schedule();
    }
  }

  // ---- adapter evaluation --------------------------------------------------------------------------------------------

  function safeAll(root, sel) {
    try {
      return Array.from(root.querySelectorAll(sel));
    } catch {
      return [];
    }
  }

  function safeMatches(el, sel) {
    try {
      return el.matches(sel);
    } catch {
      return false;
    }
  }

  function safeOne(el, sel) {
    try {
      return el.querySelector(sel);
    } catch {
      return null;
    }
  }

  function safeClosest(el, sel) {
    try {
      return el.closest(sel);
    } catch {
      return null;
    }
  }

  function messageRoots() {
    for (const sel of adapter.message_roots) {
      const els = safeAll(document, sel);
      if (els.length === 0) continue;
      // Drop roots nested inside another root of the same selector.
      return els.filter((el) => !(el.parentElement && safeClosest(el.parentElement, sel)));
    }
    return [];
  }

  function roleOf(el) {
    for (const rule of adapter.role_rules) {
      const sel = rule.match;
      let hit = false;
      if (rule.on === 'self') hit = safeMatches(el, sel);
      else if (rule.on === 'descendant') hit = !!safeOne(el, sel);
      else if (rule.on === 'self_or_descendant') hit = safeMatches(el, sel) || !!safeOne(el, sel);
      else if (rule.on === 'ancestor') hit = !!safeClosest(el, sel);
      if (hit) return rule.role;
    }
    return null;
  }

  function textRoots(el, role) {
    const sels = (adapter.text_selectors && adapter.text_selectors[role]) || [];
    for (const sel of sels) {
      if (safeMatches(el, sel)) return [el];
      const all = safeAll(el, sel);
      const found = all.filter((n) => !all.some((o) => o !== n && o.contains(n)));
      if (found.length) return found;
    }
    return [el];
  }

  // HTML's own layout; a site's custom block elements come from its registry entry (`block_elements`).
  const HTML_BLOCK = [
    'DIV', 'LI', 'DD', 'DT', 'TR', 'SECTION', 'ARTICLE', 'HEADER', 'FOOTER', 'ASIDE', 'NAV', 'FIGURE', 'FIGCAPTION',
    'DETAILS', 'SUMMARY', 'MAIN', 'FORM', 'FIELDSET', 'ADDRESS', 'CAPTION',
  ];
  let BLOCK = new Set(HTML_BLOCK);
  const PARA = new Set(['P', 'H1', 'H2', 'H3', 'H4', 'H5', 'H6', 'PRE', 'BLOCKQUOTE', 'UL', 'OL', 'DL', 'TABLE', 'HR']);
  const SKIP = new Set(['SCRIPT', 'STYLE', 'TEMPLATE', 'NOSCRIPT', 'svg', 'SVG', 'BUTTON', 'TEXTAREA', 'INPUT', 'SELECT']);

  function isPreformatted(el) {
    if (el.tagName === 'PRE') return true;
    // Sites that keep whitespace by class (registry `preformatted_selectors`), whether or not their CSS loaded.
    if ((adapter.preformatted_selectors || []).some((sel) => safeMatches(el, sel))) return true;
    try {
      const ws = getComputedStyle(el).whiteSpace;
      return ws.startsWith('pre') || ws === 'break-spaces';
    } catch {
      return false;
    }
  }

  /** Rendered text of `node`: block elements on their own lines, paragraphs/lists/pre/tables apart by a blank
   * line, whitespace collapsed outside preformatted elements, strip-selector nodes left out. */
  function textOf(node, strip) {
    let out = '';
    const ensureNewlines = (n) => {
      if (!out) return;
      const have = out.length - out.replace(/\n+$/, '').length;
      if (have < n) out += '\n'.repeat(n - have);
    };
    const walk = (n, pre) => {
      if (n.nodeType === Node.TEXT_NODE) {
        let t = n.data;
        if (!pre) {
          t = t.replace(/[ \t\n\r\f]+/g, ' ');
          if (out === '' || out.endsWith('\n') || out.endsWith(' ')) t = t.replace(/^ /, '');
        }
        out += t;
        return;
      }
      if (n.nodeType !== Node.ELEMENT_NODE) return;
      const el = n;
      if (SKIP.has(el.tagName) || el.hidden) return;
      if (strip.some((s) => safeMatches(el, s))) return;
      if (el.tagName === 'BR') {
        out += '\n';
        return;
      }
      const isPre = pre || isPreformatted(el);
      const para = PARA.has(el.tagName);
      const block = BLOCK.has(el.tagName);
      if (para) ensureNewlines(2);
      else if (block) ensureNewlines(1);
      for (const c of el.childNodes) walk(c, isPre);
      if (para) ensureNewlines(2);
      else if (block) ensureNewlines(1);
    };
    walk(node, isPreformatted(node));
    return out;
  }

  function keyOf(el, role) {
    for (const rule of adapter.message_key || []) {
      let target = null;
      if (rule.closest) target = safeClosest(el, rule.closest);
      else if (rule.selector === ':scope') target = el;
      else target = safeMatches(el, rule.selector) ? el : safeOne(el, rule.selector);
      const v = target && target.getAttribute(rule.attribute);
      if (v) return rule.append_role ? `${v}:${role}` : v;
    }
    return null;
  }

  /** Positions (decimal text, or null) of `els`, the thread's message roots in document order, for surfaces
   * whose ordinal source is "position". A root numbered by an earlier read that is still in the DOM is an anchor:
   * the others are numbered from it, so a virtualised window that drops early turns keeps true positions. Without
   * an anchor (an edit replaced every root), numbering restarts at 0 only if the last numbering began there (the
   * thread's start was on screen); the first read of a conversation assumes the thread is shown from its start.
   * Anchors that disagree (roots reordered or inserted between them) or a window of unknown start give null: the
   * turn is then stored without a position, never under a wrong one. */
  function positionsOf(els) {
    const out = els.map(() => null);
    if (els.length === 0) return out;
    let offset = null;
    for (let i = 0; i < els.length; i++) {
      const p = positions.get(els[i]);
      if (p === undefined) continue;
      if (offset === null) offset = p - i;
      else if (offset !== p - i) return out;
    }
    if (offset === null) {
      if (lastOffset !== null && lastOffset !== 0) return out;
      offset = 0;
    }
    if (offset < 0) return out;
    lastOffset = offset;
    els.forEach((el, i) => {
      positions.set(el, offset + i);
      out[i] = String(offset + i);
    });
    return out;
  }

  function ordinalOf(el) {
    const rule = adapter.ordinal;
    if (!rule || rule.source === 'position') return null;
    const target = rule.selector === ':scope' ? el : safeMatches(el, rule.selector) ? el : safeOne(el, rule.selector);
    return (target && target.getAttribute(rule.attribute)) || null;
  }

  function markers() {
    const found = [];
    for (const sel of adapter.streaming_markers || []) found.push(...safeAll(document, sel));
    return found;
  }

  // ---- snapshot --------------------------------------------------------------------------------------------------------

  function snapshot() {
    const roots = messageRoots();
    const live = markers();
    const turns = [];
    const strip = adapter.strip_selectors || [];
    let lastAssistant = -1;
    const read = [];
    for (const el of roots) {
      // A node still showing what it showed under the previous URL belongs to the previous conversation.
      if (staleRoots.has(el) && staleRoots.get(el) === textRoots(el, roleOf(el)).map((n) => textOf(n, strip)).join('\n\n')) continue;
      const role = roleOf(el);
      if (!role) continue;
      const streamingHere = live.some((m) => el.contains(m) || m.contains(el));
      read.push({ el, role, streamingHere });
      if (role === 'assistant') lastAssistant = read.length - 1;
    }
    lastRead = new Map();
    const byPosition = adapter.ordinal && adapter.ordinal.source === 'position' ? positionsOf(read.map((r) => r.el)) : null;
    read.forEach((r, i) => {
      // While anything streams, the newest assistant turn is not final yet.
      if (r.streamingHere || (live.length > 0 && i === lastAssistant)) return;
      const text = textRoots(r.el, r.role)
        .map((n) => textOf(n, strip))
        .join('\n\n');
      lastRead.set(r.el, text);
      if (!text.trim()) return;
      const key = keyOf(r.el, r.role);
      const id = key || `${r.role}\u001e${text}`;
      if (sentText.get(id) === text) return;
      const ordinal = byPosition ? byPosition[i] : ordinalOf(r.el);
      turns.push({ role: r.role, text, message_key: key, ordinal_raw: ordinal, id });
    });
    return { turns, streaming: live.length > 0 };
  }

  async function settle() {
    timer = null;
    if (!adapter || state !== 'capturing' || !conversationId) return;
    const url = location.href;
    const { turns, streaming } = snapshot();
    if (turns.length > 0) {
      const r = await send(M.make.capture(url, document.title, turns.map(({ id, ...t }) => t)));
      // The browser's record of this frame does not show `url` yet (a same-document navigation in flight): the
      // worker refused the turns; read them again shortly.
      if (r && r.stale) {
        schedule(STALE_RETRY_MS);
        return;
      }
      // Remember what the worker took into the pipeline only (not what it refused because capture was off).
      if (r && !r.error && r.state === 'capturing' && location.href === url) {
        for (const t of turns) sentText.set(t.id, t.text);
        if (sentText.size > 5000) sentText = new Map();
        if (typeof r.state === 'string' && r.state !== state) {
          state = r.state;
          ensureBadge();
        }
      }
    }
    if (streaming) schedule(STREAM_RECHECK_MS);
  }

  // A page that never stops mutating (a clock, an animation) must not starve capture: after MAX_DEFER_MS of
  // continuous postponing the pending read runs anyway (streaming markers still hold back unfinished replies).
  let deferredSince = 0;
  function schedule(ms = QUIET_MS) {
    const now = Date.now();
    if (timer) {
      if (now - deferredSince > MAX_DEFER_MS) return;
      clearTimeout(timer);
    } else {
      deferredSince = now;
    }
    timer = setTimeout(settle, ms);
  }

  // ---- lifecycle -------------------------------------------------------------------------------------------------------

  async function hello() {
    const seq = ++helloSeq;
    const r = await send(M.make.hello(location.href));
    if (seq !== helloSeq || !r || r.error) return;
    if (r.stale) {
      // As in `settle`: ask again once the browser's record of this frame has caught up.
      if (staleHellos++ < MAX_STALE_HELLOS) setTimeout(() => seq === helloSeq && hello(), STALE_RETRY_MS);
      return;
    }
    staleHellos = 0;
    adapter = r.surface || null;
    conversationId = r.conversation_id || null;
    BLOCK = new Set([...HTML_BLOCK, ...((adapter && adapter.block_elements) || []).map((t) => String(t).toUpperCase())]);
    const was = state;
    state = r.state || 'off';
    // Turning capture back on re-reads the whole page: the worker's dedupe set drops what it already has.
    if (state === 'capturing' && was !== 'capturing') sentText = new Map();
    if (!adapter) return;
    ensureBadge();
    if (state === 'capturing') schedule();
  }

  function onNavigate() {
    lastUrl = location.href;
    staleRoots = new WeakMap();
    positions = new WeakMap();
    lastOffset = null;
    for (const [el, text] of lastRead) staleRoots.set(el, text);
    lastRead = new Map();
    sentText = new Map();
    if (timer) clearTimeout(timer);
    timer = null;
    hello();
  }

  const observer = new MutationObserver((records) => {
    if (location.href !== lastUrl) onNavigate();
    if (!adapter) return;
    if (badgeHost && records.every((r) => r.target === badgeHost)) return;
    if (badgeHost && !badgeHost.isConnected) ensureBadge();
    if (state === 'capturing') schedule();
  });
  observer.observe(document.documentElement, { subtree: true, childList: true, characterData: true, attributes: true });

  setInterval(() => {
    if (location.href !== lastUrl) onNavigate();
  }, URL_POLL_MS);
  window.addEventListener('popstate', () => {
    if (location.href !== lastUrl) onNavigate();
  });

  chrome.runtime.onMessage.addListener((msg) => {
    if (msg && msg.type === M.MSG.REFRESH) hello();
  });

  hello();
})();
