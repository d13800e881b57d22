// personkit content script: thin. It asks the worker for this page's adapter (registry data), watches the page
// with a MutationObserver, waits for 600 ms of quiet and for the adapter's streaming markers to clear, reads the
// turns the adapter's selectors describe and sends them to the worker, where the core checks, normalises,
// redacts, hashes, dedupes and queues them. It holds no token and no queue, and no site names or selectors: all
// it knows of a site is its registry entry. It runs in the isolated world: page scripts cannot see its variables
// or call chrome.runtime. Its messages are built by messages.js (loaded before it).
//
// The network path (the site's own responses) does not pass through this script: pageworld.js and netbridge.js.

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
  let shownIds = new Map(); // stable id -> text of every complete turn this conversation has shown
  let health = null; // 'adapter_stale' when the core says this surface's pages are no longer read
  let rule = null; // rank of the message_roots rule that matched at the last read
  let readCount = 0; // turns (roots with a role) the last read found
  let lastProbe = '';
  let lastProbeAt = 0;
  const PROBE_EVERY_MS = 20000;
  const TEXT_PRESENT_CHARS = 200;

  /** Turns of this conversation captured (taken by the worker) with the text they show now. */
  function capturedCount() {
    let n = 0;
    for (const [id, text] of shownIds) if (sentText.get(id) === text) n++;
    return n;
  }

  function send(msg) {
    return chrome.runtime.sendMessage(msg).catch(() => null);
  }

  // ---- badge -------------------------------------------------------------------------------------------------------

  let badgeHost = null;
  let badgeLabel = null;
  const LABELS = {
    capturing: 'personkit: capturing (click to skip this conversation)',
    unread: 'personkit: this page shows a conversation, but its turns are not read (the site may have changed; click to skip)',
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
        :host([data-state="capturing"][data-health]) .dot { background: #e08a00; }
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
    const counts = shownIds.size > 0 ? ` ${capturedCount()}/${shownIds.size}` : '';
    const warn = health === 'adapter_stale' ? ' ! no turns read' : '';
    // This page's read found conversation text but no turn (or one role only): the total is unknown.
    const unread = state === 'capturing' && health === 'unread';
    const text = unread
      ? `PK ${readCount} of ? read`
      : state === 'capturing' ? `PK${counts}${warn}` : state === 'skipped' ? 'PK skipped' : state === 'paused' ? 'PK paused' : 'PK off';
    badgeHost.setAttribute('data-captured', String(capturedCount()));
    badgeHost.setAttribute('data-shown', String(shownIds.size));
    if (health) badgeHost.setAttribute('data-health', health);
    else badgeHost.removeAttribute('data-health');
    if (rule !== null) badgeHost.setAttribute('data-rule', `message_roots[${rule}]`);
    if (badgeLabel.textContent !== text) badgeLabel.textContent = text;
    const title = unread ? LABELS.unread : LABELS[state];
    if (badgeHost.title !== title) badgeHost.title = title;
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
    rule = null;
    for (const [rank, sel] of adapter.message_roots.entries()) {
      const els = safeAll(document, sel);
      if (els.length === 0) continue;
      rule = rank;
      // Drop roots nested inside another root of the same selector.
      return inReadingOrder(els.filter((el) => !(el.parentElement && safeClosest(el.parentElement, sel))));
    }
    return [];
  }

  /** `els` in the order the thread reads: inside a list the site renders bottom-up (registry `newest_first`), its
   * rows from the last to the first, the roots within one row (two answers side by side) in their own order. */
  function inReadingOrder(els) {
    const lists = adapter.newest_first || [];
    if (lists.length === 0) return els;
    const rowOf = (el) => {
      for (const sel of lists) {
        const list = safeClosest(el, sel);
        if (!list) continue;
        let row = el;
        while (row.parentElement && row.parentElement !== list) row = row.parentElement;
        return row;
      }
      return null;
    };
    const groups = [];
    for (const el of els) {
      const row = rowOf(el);
      const last = groups[groups.length - 1];
      if (row && last && last.row === row) last.els.push(el);
      else groups.push({ row, els: [el] });
    }
    // Only rows of a newest-first list move; anything outside one keeps its place before or after them.
    const rows = groups.filter((g) => g.row);
    const reversed = rows.slice().reverse();
    let k = 0;
    return groups.flatMap((g) => (g.row ? reversed[k++].els : g.els));
  }

  /** Whether the page shows conversation text: the surface's content area holds more than a few words. */
  function textPresent() {
    for (const sel of adapter.content_area || ['main']) {
      const el = safeOne(document, sel);
      if (!el) continue;
      const t = (el.innerText || el.textContent || '').replace(/\s+/g, ' ').trim();
      return t.length >= TEXT_PRESENT_CHARS;
    }
    return false;
  }

  /** Tells the worker what the last read found (also when it found nothing), at most every 20 s unless it
   * changed; the core decides whether the surface's adapter has gone stale. */
  async function sendProbe(read) {
    readCount = read.users + read.assistants;
    const probe = {
      text_present: textPresent(),
      roots: read.roots,
      users: read.users,
      assistants: read.assistants,
      rank: rule,
    };
    // How many complete turns this conversation has shown, and how many of them the worker took: the popup lists
    // conversations where the two differ.
    if (state === 'capturing') {
      probe.shown = shownIds.size;
      probe.sent = capturedCount();
    }
    const key = JSON.stringify(probe);
    const now = Date.now();
    if (key === lastProbe && now - lastProbeAt < PROBE_EVERY_MS) return;
    lastProbe = key;
    lastProbeAt = now;
    const r = await send(M.make.probe(location.href, probe, state === 'capturing' ? document.title.slice(0, 300) : null));
    const h = r && !r.error && typeof r.reason === 'string' ? r.reason : null;
    if (h !== health) {
      health = h;
      ensureBadge();
    }
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
    'DIV', 'DD', 'DT', 'SECTION', 'ARTICLE', 'HEADER', 'FOOTER', 'ASIDE', 'NAV', 'FIGURE', 'FIGCAPTION',
    'DETAILS', 'SUMMARY', 'MAIN', 'FORM', 'FIELDSET', 'ADDRESS', 'CAPTION', 'DL',
  ];
  let BLOCK = new Set(HTML_BLOCK);
  const SKIP = new Set(['SCRIPT', 'STYLE', 'TEMPLATE', 'NOSCRIPT', 'svg', 'SVG', 'BUTTON', 'TEXTAREA', 'INPUT', 'SELECT']);
  const HEADING = { H1: 1, H2: 2, H3: 3, H4: 4, H5: 5, H6: 6 };
  const TABLE_PART = new Set(['THEAD', 'TBODY', 'TFOOT', 'COLGROUP']);
  const MAX_DOC_DEPTH = 80;
  let render = {}; // the registry's shared rendering rules (maths, code languages, citation URLs)

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

  const anyMatch = (el, sels) => (sels || []).some((s) => safeMatches(el, s));

  /** The text under `el` as written (code blocks, formulas without a source), leaving out what `strip` names;
   * with `lines`, each block-level element inside ends a line (an editor widget's one element per line). */
  function rawText(el, strip, lines = false) {
    let out = '';
    const walk = (n) => {
      if (n.nodeType === Node.TEXT_NODE) {
        out += n.data;
        return;
      }
      if (n.nodeType !== Node.ELEMENT_NODE) return;
      if (SKIP.has(n.tagName) || n.hidden || strip.some((s) => safeMatches(n, s))) return;
      if (n.tagName === 'BR') out += '\n';
      for (const c of n.childNodes) walk(c);
      if (lines && n !== el && BLOCK.has(n.tagName) && out !== '' && !out.endsWith('\n')) out += '\n';
    };
    walk(el);
    return out;
  }

  /** One formula: its TeX source when the page carries it (an annotation, a data attribute), else its text. */
  function mathNode(el) {
    const attrs = {};
    let tex = '';
    for (const a of render.tex_attributes || []) {
      const holder = el.hasAttribute(a) ? el : safeOne(el, `[${a}]`);
      if (holder && holder.getAttribute(a)) {
        tex = holder.getAttribute(a);
        break;
      }
    }
    if (!tex) {
      for (const sel of render.tex_sources || []) {
        const src = safeOne(el, sel);
        if (src && src.textContent.trim()) {
          tex = src.textContent;
          break;
        }
      }
    }
    if (anyMatch(el, render.display_math) || (render.display_math || []).some((s) => !!safeOne(el, s))) attrs.d = '1';
    if (tex) {
      attrs.tex = tex.trim();
      return ['m', attrs];
    }
    // No source: the MathML's text if there is some (the picture beside it is aria-hidden), else what shows.
    const mathml = el.tagName.toLowerCase() === 'math' ? el : safeOne(el, 'math');
    return ['m', attrs, (mathml || el).textContent];
  }

  function codeLanguage(pre) {
    const code = safeOne(pre, 'code') || pre;
    for (const el of [code, pre]) {
      for (const a of render.code_language_attributes || []) if (el.getAttribute(a)) return el.getAttribute(a);
    }
    let re = null;
    try {
      re = render.code_language_class ? new RegExp(render.code_language_class) : null;
    } catch {
      re = null;
    }
    if (re) {
      // The language class may sit on the block's wrapper (`div.language-go > pre`).
      for (const el of [code, pre, pre.parentElement]) {
        if (!el) continue;
        for (const c of el.classList) {
          const m = re.exec(c);
          if (m) return m[1];
        }
      }
    }
    return '';
  }

  function urlOf(el) {
    for (const a of render.citation_url_attributes || []) {
      const holder = el.hasAttribute(a) ? el : safeOne(el, `[${a}]`);
      if (!holder) continue;
      const v = a === 'href' && holder.href ? String(holder.href) : holder.getAttribute(a);
      if (v && /^https?:\/\//.test(v)) return v;
    }
    return '';
  }

  function fileName(el) {
    for (const a of render.attachment_name_attributes || []) {
      const holder = el.hasAttribute(a) ? el : safeOne(el, `[${a}]`);
      if (holder && holder.getAttribute(a)) return holder.getAttribute(a);
    }
    return el.textContent.replace(/\s+/g, ' ').trim();
  }

  /** The render tree of `node` (the core's vocabulary, see shared/src/capture/render.rs): the page's structure
   * without its styling, strip-selector nodes left out; the core turns it into text. */
  function docOf(node, strip) {
    const walk = (n, depth) => {
      if (n.nodeType === Node.TEXT_NODE) return [n.data];
      if (n.nodeType !== Node.ELEMENT_NODE) return [];
      const el = n;
      if (SKIP.has(el.tagName) || el.hidden) return [];
      if (strip.some((s) => safeMatches(el, s))) return [];
      if (depth > MAX_DOC_DEPTH) return [el.textContent];
      const kids = () => {
        const out = [];
        for (const c of el.childNodes) {
          for (const k of walk(c, depth + 1)) {
            if (typeof k === 'string' && typeof out[out.length - 1] === 'string') out[out.length - 1] += k;
            else out.push(k);
          }
        }
        return out;
      };
      const tag = el.tagName;
      if (anyMatch(el, adapter.citation_selectors)) {
        const href = urlOf(el);
        return href ? [['cite', { href }]] : [];
      }
      if (anyMatch(el, adapter.attachment_selectors)) return [['file', { name: fileName(el) }]];
      if (anyMatch(el, render.math_containers)) return [mathNode(el)];
      if (tag === 'IMG') {
        const alt = el.getAttribute('alt') || el.getAttribute('aria-label') || el.getAttribute('title') || '';
        return [['img', { alt }]];
      }
      if (tag === 'BR') return [['br']];
      if (tag === 'HR') return [['hr']];
      const editor = tag !== 'PRE' && anyMatch(el, adapter.code_blocks);
      if (tag === 'PRE' || editor) {
        const lang = codeLanguage(el);
        const code = rawText(el, strip, editor);
        return [lang ? ['pre', { lang }, code] : ['pre', code]];
      }
      if (tag === 'CODE') return [['code', rawText(el, strip)]];
      if (tag === 'TABLE') return [['table', ...kids()]];
      if (TABLE_PART.has(tag)) return kids();
      if (tag === 'TR') return [['tr', ...kids()]];
      if (tag === 'TD' || tag === 'TH') return [[tag.toLowerCase(), ...kids()]];
      if (tag === 'UL') return [['ul', ...kids()]];
      if (tag === 'OL') return [['ol', { s: el.getAttribute('start') || '1' }, ...kids()]];
      // Block-level elements styled to keep their whitespace (a user's message in a `p.whitespace-pre-wrap`).
      const body = () => (isPreformatted(el) ? [['ws', ...kids()]] : kids());
      if (tag === 'LI') return [['li', ...body()]];
      if (tag === 'P') return [['p', ...body()]];
      if (HEADING[tag]) return [['h', { l: String(HEADING[tag]) }, ...kids()]];
      if (tag === 'BLOCKQUOTE') return [['q', ...body()]];
      if (tag === 'A' && el.getAttribute('href')) return [['a', { href: String(el.href || '') }, ...kids()]];
      if (isPreformatted(el)) return [['ws', ...kids()]];
      if (BLOCK.has(tag)) return [['b', ...kids()]];
      return kids();
    };
    return ['b', ...walk(node, 0)];
  }

  /** Whether a tree shows anything: text that is not only whitespace, or a placeholder (image, file, formula). */
  function hasContent(tree) {
    if (typeof tree === 'string') return tree.trim() !== '';
    if (!Array.isArray(tree)) return false;
    if (['img', 'file', 'm', 'cite'].includes(tree[0])) return true;
    return tree.slice(1).some(hasContent);
  }

  /** A turn's tree: who answered (label), its reasoning panel, its body, the artifacts it made. */
  function turnDoc(el, role, strip) {
    const extra = [
      ...(adapter.label_selectors || []),
      ...(adapter.reasoning_selectors || []),
      ...(adapter.artifact_selectors || []),
    ];
    const inner = [...strip, ...extra];
    const parts = [];
    const found = (sels) => {
      const out = [];
      for (const sel of sels || []) {
        if (safeMatches(el, sel)) continue;
        for (const n of safeAll(el, sel)) if (!out.some((o) => o.contains(n))) out.push(n);
      }
      return out;
    };
    // Labels are ranked: the first selector that finds one names the turn (its text without stripped chrome).
    for (const sel of adapter.label_selectors || []) {
      const n = safeMatches(el, sel) ? null : safeOne(el, sel);
      if (n) {
        parts.push(['lbl', rawText(n, strip)]);
        break;
      }
    }
    for (const n of found(adapter.reasoning_selectors)) parts.push(['think', docOf(n, strip)]);
    for (const n of textRoots(el, role)) parts.push(['p', docOf(n, inner)]);
    for (const n of found(adapter.artifact_selectors)) parts.push(['p', docOf(n, strip)]);
    return ['b', ...parts];
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
    let lastUser = -1;
    const read = [];
    const counts = { roots: roots.length, users: 0, assistants: 0 };
    for (const el of roots) {
      // A node still showing what it showed under the previous URL belongs to the previous conversation.
      if (staleRoots.has(el) && staleRoots.get(el) === JSON.stringify(turnDoc(el, roleOf(el), strip))) continue;
      const role = roleOf(el);
      if (!role) continue;
      if (role === 'user') counts.users++;
      else counts.assistants++;
      const streamingHere = live.some((m) => el.contains(m) || m.contains(el));
      read.push({ el, role, streamingHere });
      if (role === 'user') lastUser = read.length - 1;
    }
    lastRead = new Map();
    const byPosition = adapter.ordinal && adapter.ordinal.source === 'position' ? positionsOf(read.map((r) => r.el)) : null;
    read.forEach((r, i) => {
      // While anything streams, the answers to the newest prompt are not final yet (a battle page streams two
      // side by side: neither is the last turn on its own).
      if (r.streamingHere || (live.length > 0 && r.role === 'assistant' && i > lastUser)) return;
      const tree = turnDoc(r.el, r.role, strip);
      const text = JSON.stringify(tree);
      lastRead.set(r.el, text);
      if (!hasContent(tree)) return;
      const key = keyOf(r.el, r.role);
      const id = key || `${r.role}\u001e${text}`;
      shownIds.set(id, text);
      if (shownIds.size > 5000) shownIds = new Map();
      if (sentText.get(id) === text) return;
      const ordinal = byPosition ? byPosition[i] : ordinalOf(r.el);
      turns.push({ role: r.role, doc: text, message_key: key, ordinal_raw: ordinal, id, text });
    });
    return { turns, streaming: live.length > 0, counts };
  }

  async function settle() {
    timer = null;
    if (!adapter || state !== 'capturing' || !conversationId) return;
    const url = location.href;
    const { turns, streaming, counts } = snapshot();
    if (turns.length > 0) {
      const r = await send(M.make.capture(url, document.title, turns.map(({ id, text, ...t }) => t)));
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
        ensureBadge();
        if (typeof r.state === 'string' && r.state !== state) {
          state = r.state;
          ensureBadge();
        }
      }
    }
    // After the capture, so that the counts include what the worker just took.
    sendProbe(counts);
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
    render = (r.surface && r.render) || {};
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
    shownIds = new Map();
    lastProbe = '';
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
    // A page that stopped changing is still read now and then, so a stale adapter shows without new mutations.
    else if (adapter && state === 'capturing' && conversationId && !timer && Date.now() - lastProbeAt > PROBE_EVERY_MS) schedule();
  }, URL_POLL_MS);
  window.addEventListener('popstate', () => {
    if (location.href !== lastUrl) onNavigate();
  });

  chrome.runtime.onMessage.addListener((msg) => {
    if (msg && msg.type === M.MSG.REFRESH) hello();
  });

  hello();
})();
