// personkit page-world script: runs in the page's own JavaScript world ("world": "MAIN") at document_start, before
// any of the page's scripts, on the surfaces whose network formats the core parses. It tees the responses the page
// itself requests from the site's known endpoints (the table below, written in by scripts/build-extension from
// shared/network/endpoints.json) and forwards their bytes to the extension's isolated content script
// (netbridge.js), which hands them to the worker. It makes no request of its own, reads no cookie and no request
// header, and never changes what the page gets: the page receives the original Response object (we read a clone,
// whose body is a tee of the same stream, so the page's chunks arrive when they would have), the original
// WebSocket with its own events. Every step of ours is inside try/catch and falls back to the untouched original.
//
// The channel: a MessageChannel made here. Its second port is posted to the window once, now; netbridge.js
// (isolated world, registered at document_start too) takes the first such message and stops it from reaching page
// listeners. Messages are tasks, so that first message reaches it before any page script can post one. The first
// port stays in this closure: page scripts cannot post on it. See extension/README.md "Page-world capture" for
// what a hostile page can still do and why it cannot reach another conversation or surface.
(() => {
  'use strict';
  const ENDPOINTS = /*ENDPOINTS*/[];
  const MAX_BODY = 16 * 1024 * 1024; // bytes of one body we forward; beyond, the rest is dropped and said so
  const host = location.hostname;
  const mine = ENDPOINTS.filter((e) => e.hosts.includes(host));
  if (!mine.length) return;

  // Originals, taken before any page script runs.
  const origFetch = window.fetch;
  const OrigWebSocket = window.WebSocket;
  const OrigXHR = window.XMLHttpRequest;
  const xhrOpen = OrigXHR && OrigXHR.prototype.open;
  const xhrSend = OrigXHR && OrigXHR.prototype.send;
  const addListener = EventTarget.prototype.addEventListener;
  const cloneResponse = Response.prototype.clone;
  const getReader = ReadableStream.prototype.getReader;
  const readChunk = ReadableStreamDefaultReader.prototype.read;
  const postPort = MessagePort.prototype.postMessage;
  const URLCtor = URL;
  const { apply } = Reflect;

  const channel = new MessageChannel();
  const port = channel.port1;
  window.postMessage({ personkitPageWorld: 1 }, location.origin, [channel.port2]);

  let nextId = 1;
  function send(msg, transfer) {
    try {
      apply(postPort, port, transfer ? [msg, transfer] : [msg]);
    } catch {
      /* the bridge is gone: nothing to do */
    }
  }

  function segMatch(pattern, path) {
    const p = pattern.split('/');
    const s = path.split('/');
    if (p.length !== s.length) return false;
    for (let i = 0; i < p.length; i++) {
      if (p[i] === '*' ? s[i] === '' : p[i] !== s[i]) return false;
    }
    return true;
  }

  /** The endpoint a request is, or null: same host as the page, https/wss, a known path and method. */
  function match(transport, method, rawUrl) {
    let u;
    try {
      u = new URLCtor(String(rawUrl), location.href);
    } catch {
      return null;
    }
    if (u.hostname !== host) return null;
    if (transport === 'websocket' ? u.protocol !== 'wss:' : u.protocol !== 'https:') return null;
    const m = String(method || 'GET').toUpperCase();
    const e = mine.find((x) => x.transport === transport && x.method === m && segMatch(x.path, u.pathname));
    return e ? { surface: e.surface, kind: e.kind, url: u.href, method: m } : null;
  }

  // The clone's chunks are its own (a byte stream's tee gives the second branch copies), so they are kept as they
  // come and handed over once, transferred, when the body ends: one message per body rather than per chunk keeps
  // the page's main thread (which the isolated world shares) free while the reply streams in.
  async function pump(id, body) {
    const reader = apply(getReader, body, []);
    const chunks = [];
    let total = 0;
    try {
      for (;;) {
        const { done, value } = await apply(readChunk, reader, []);
        if (done) break;
        if (!(value instanceof Uint8Array)) continue;
        total += value.byteLength;
        if (total > MAX_BODY) {
          send({ id, end: true, error: 'too_large' });
          return;
        }
        chunks.push(value.byteOffset === 0 && value.byteLength === value.buffer.byteLength ? value.buffer : value.slice().buffer);
      }
      send({ id, chunks, end: true }, chunks);
    } catch {
      send({ id, chunks, end: true, error: 'aborted' }, chunks);
    }
  }

  function teeResponse(ep, res) {
    try {
      if (!res || !res.ok || !res.body) return;
      const copy = apply(cloneResponse, res, []);
      const id = nextId++;
      send({ id, start: true, ...ep, status: res.status });
      pump(id, copy.body);
    } catch {
      /* never the page's problem */
    }
  }

  if (typeof origFetch === 'function') {
    const wrapped = function fetch(input, init) {
      const p = apply(origFetch, this, arguments);
      try {
        let url;
        let method;
        if (input instanceof Request) {
          url = input.url;
          method = init && init.method ? init.method : input.method;
        } else {
          url = input;
          method = init && init.method;
        }
        const ep = match('fetch', method, url);
        if (ep) {
          p.then((res) => teeResponse(ep, res), () => {});
        }
      } catch {
        /* fall through: the page gets its promise untouched */
      }
      return p;
    };
    try {
      Object.defineProperty(window, 'fetch', { value: wrapped, writable: true, configurable: true, enumerable: true });
    } catch {
      /* leave fetch alone */
    }
  }

  if (OrigXHR && xhrOpen && xhrSend) {
    const pending = new WeakMap();
    try {
      OrigXHR.prototype.open = function open(method, url) {
        try {
          const ep = match('fetch', method, url);
          if (ep) pending.set(this, ep);
          else pending.delete(this);
        } catch {
          /* ignore */
        }
        return apply(xhrOpen, this, arguments);
      };
      OrigXHR.prototype.send = function send_() {
        try {
          const ep = pending.get(this);
          if (ep) {
            const xhr = this;
            apply(addListener, xhr, [
              'loadend',
              () => {
                try {
                  if (xhr.status < 200 || xhr.status > 299) return;
                  if (xhr.responseType !== '' && xhr.responseType !== 'text') return;
                  const text = xhr.responseText;
                  if (typeof text !== 'string' || text.length > MAX_BODY) return;
                  const id = nextId++;
                  send({ id, start: true, ...ep, status: xhr.status });
                  send({ id, text });
                  send({ id, end: true });
                } catch {
                  /* ignore */
                }
              },
            ]);
          }
        } catch {
          /* ignore */
        }
        return apply(xhrSend, this, arguments);
      };
    } catch {
      /* leave XHR alone */
    }
  }

  if (typeof OrigWebSocket === 'function') {
    const Wrapped = function WebSocket(url, protocols) {
      const ws = arguments.length > 1 ? new OrigWebSocket(url, protocols) : new OrigWebSocket(url);
      try {
        const ep = match('websocket', 'GET', url);
        if (ep) {
          const id = nextId++;
          send({ id, start: true, ...ep, status: 101 });
          apply(addListener, ws, [
            'message',
            (ev) => {
              try {
                if (typeof ev.data === 'string') send({ id, text: `${ev.data}\n` });
              } catch {
                /* ignore */
              }
            },
          ]);
          apply(addListener, ws, ['close', () => send({ id, end: true })]);
        }
      } catch {
        /* the page keeps its socket */
      }
      return ws;
    };
    try {
      Wrapped.prototype = OrigWebSocket.prototype;
      for (const k of ['CONNECTING', 'OPEN', 'CLOSING', 'CLOSED']) Wrapped[k] = OrigWebSocket[k];
      Object.defineProperty(window, 'WebSocket', { value: Wrapped, writable: true, configurable: true, enumerable: false });
    } catch {
      /* leave WebSocket alone */
    }
  }
})();
