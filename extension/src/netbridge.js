// personkit network bridge: the isolated-world end of the page-world channel (see pageworld.js). At
// document_start it waits for the page-world script's one message carrying a MessagePort, keeps that port and stops
// the message from reaching the page's own listeners; any later such message is ignored. It gathers each teed
// body's bytes, decodes them as UTF-8 and sends the whole body to the worker, which decides everything (whether the
// request is a known endpoint of this page's surface, whether the body's conversation is this page's, parsing,
// redaction, queueing). It holds no site names: the page-world script names the endpoint and the worker checks it.
(() => {
  'use strict';
  if (globalThis.__personkitBridgeLoaded) return;
  globalThis.__personkitBridgeLoaded = true;
  const M = globalThis.personkitMessages;

  const MAX_BODY = 16 * 1024 * 1024; // characters of one body; larger ones are reported, not sent
  const MAX_OPEN = 16; // bodies being gathered at once
  const SOCKET_QUIET_MS = 3000; // a socket's frames so far are sent after this long without a new one
  const RETRY_MS = 1000; // a body read before the page's URL named its conversation is offered again...
  const RETRY_FOR_MS = 60000; // ...for this long

  let port = null;
  const open = new Map(); // id -> {meta, parts, decoder, size, timer, socket}

  function send(msg) {
    return chrome.runtime.sendMessage(msg).catch(() => null);
  }

  async function deliver(meta, body, error, since = Date.now()) {
    const r = await send(M.make.network(location.href, meta.surface, meta.kind, meta.url, meta.method, body, error || null));
    // Offered again while the conversation is not in the URL yet (a new chat names it only once the reply started),
    // and while the worker cannot answer (Firefox's background page may be starting or restarting).
    if ((!r || r.stale || r.waiting) && Date.now() - since < RETRY_FOR_MS) {
      setTimeout(() => deliver(meta, body, error, since), RETRY_MS);
    }
  }

  function flush(id, final, error) {
    const b = open.get(id);
    if (!b) return;
    if (final) open.delete(id);
    clearTimeout(b.timer);
    if (!final && !b.parts.length) return;
    // Decoding and sending a body to the worker (which serialises it) run on the page's main thread, which this
    // world shares: done when the page is idle, so they never compete with the page reading or rendering the reply.
    const go = () => {
      const text = b.parts.map((p) => (typeof p === 'string' ? p : b.decoder.decode(new Uint8Array(p), { stream: true })));
      b.parts = text;
      if (final) text.push(b.decoder.decode());
      const body = text.join('');
      const big = b.size > MAX_BODY;
      deliver(b.meta, big ? '' : body, big ? 'too_large' : error);
    };
    if (typeof requestIdleCallback === 'function') requestIdleCallback(go, { timeout: 2000 });
    else setTimeout(go, 0);
  }

  function onMessage(ev) {
    const d = ev.data;
    if (!d || typeof d !== 'object' || typeof d.id !== 'number') return;
    if (d.start) {
      if (open.size >= MAX_OPEN || open.has(d.id)) return;
      const meta = {
        surface: String(d.surface || '').slice(0, 64),
        kind: String(d.kind || '').slice(0, 32),
        url: String(d.url || '').slice(0, 4096),
        method: String(d.method || '').slice(0, 16),
      };
      open.set(d.id, { meta, parts: [], decoder: new TextDecoder('utf-8'), size: 0, timer: null, socket: d.status === 101 });
      return;
    }
    const b = open.get(d.id);
    if (!b) return;
    if (Array.isArray(d.chunks)) {
      // Kept as bytes: decoded at idle time, in flush.
      for (const c of d.chunks) {
        // Not `instanceof`: in Firefox the buffers come from the page's compartment.
        if (Object.prototype.toString.call(c) !== '[object ArrayBuffer]') continue;
        b.size += c.byteLength;
        if (b.size <= MAX_BODY) b.parts.push(c);
      }
    } else if (typeof d.text === 'string') {
      b.size += d.text.length;
      if (b.size <= MAX_BODY) b.parts.push(d.text);
      if (b.socket) {
        clearTimeout(b.timer);
        b.timer = setTimeout(() => flush(d.id, false), SOCKET_QUIET_MS);
      }
    }
    if (d.end) flush(d.id, true, typeof d.error === 'string' ? d.error.slice(0, 32) : null);
  }

  window.addEventListener(
    'message',
    (ev) => {
      if (port || ev.source !== window || !ev.data || ev.data.personkitPageWorld !== 1) return;
      if (!ev.ports || ev.ports.length !== 1) return;
      ev.stopImmediatePropagation();
      port = ev.ports[0];
      port.onmessage = onMessage;
    },
    true,
  );
})();
