// personkit messages: the one definition of every message between the content script, the worker and the popup
// (types, constructors, and the shape check the worker applies to everything it receives). A classic script, so
// that content scripts (listed before content.js in the manifest), the popup (a <script> before popup.js) and the
// worker (`import './messages.js'`) all load this same file; it sets `globalThis.personkitMessages` in its own
// context only (a content script's isolated world is not the page's), always anew, never reusing a value found there.
//
// What a message carries beyond its shape (turns, settings patches, patterns) is checked by the capture core.

(function (g) {
  'use strict';

  const MSG = Object.freeze({
    // content script → worker
    HELLO: 'hello',
    CAPTURE: 'capture',
    PROBE: 'probe',
    TOGGLE_SKIP: 'toggleSkip',
    NETWORK: 'network',
    // worker → content script
    REFRESH: 'refresh',
    // popup → worker
    POPUP_STATE: 'popupState',
    SET_SETTINGS: 'setSettings',
    SET_PATTERNS: 'setPatterns',
    PAIR: 'pair',
    CLEAR_HELD: 'clearHeld',
    DEBUG: 'debug',
    FLUSH: 'flush',
    LIBRARY_LINK: 'libraryLink',
    PAGE_THREAD: 'pageThread',
    FORGET_THREAD: 'forgetThread',
  });

  /** Error codes of a refused message (`{error: <code>}` replies). */
  const ERR = Object.freeze({ INVALID: 'invalid_message', UNKNOWN: 'unknown_message', FORBIDDEN: 'forbidden' });

  /** `storage.session` key prefix of a recorded settings change (the core checks the same prefix). */
  const INTENT_PREFIX = 'settingsIntent:';

  const MAX_URL = 4096;
  const MAX_BODY = 16 * 1024 * 1024;

  const isString = (max) => (v) => typeof v === 'string' && v.length <= max;
  const isObject = (v) => !!v && typeof v === 'object' && !Array.isArray(v);
  const optional = (check) => (v) => v === undefined || v === null || check(v);

  /** Who may send each type, and the check of each of its fields (every field listed; no other is accepted). A
   * content script's `url` is the page it read: the worker never takes the conversation from it (see
   * `senderPage`); a `url` that disagrees with the browser's record gets a `stale` reply and nothing else. */
  const SHAPES = Object.freeze({
    [MSG.HELLO]: { from: 'content', fields: { url: isString(MAX_URL) } },
    [MSG.CAPTURE]: {
      from: 'content',
      fields: { url: isString(MAX_URL), title: optional((v) => typeof v === 'string'), turns: Array.isArray },
    },
    [MSG.PROBE]: {
      from: 'content',
      fields: { url: isString(MAX_URL), probe: isObject, title: optional(isString(1024)) },
    },
    [MSG.TOGGLE_SKIP]: { from: 'content', fields: { url: isString(MAX_URL) } },
    // A body the page itself received, as the page-world script teed it (netbridge.js). Everything but the shape is
    // checked by the core: the endpoint against the surface's table, the body's conversation against the page's.
    [MSG.NETWORK]: {
      from: 'content',
      fields: {
        url: isString(MAX_URL),
        surface: isString(64),
        kind: isString(32),
        endpoint: isString(MAX_URL),
        method: isString(16),
        body: isString(MAX_BODY),
        error: optional(isString(32)),
      },
    },
    [MSG.REFRESH]: { from: 'worker', fields: {} },
    [MSG.POPUP_STATE]: { from: 'popup', fields: {} },
    [MSG.SET_SETTINGS]: { from: 'popup', fields: { patch: isObject, intent: isString(256) } },
    [MSG.SET_PATTERNS]: {
      from: 'popup',
      fields: { patterns: (v) => Array.isArray(v) && v.every((p) => typeof p === 'string') },
    },
    [MSG.PAIR]: {
      from: 'popup',
      fields: { relayUrl: isString(1024), code: isString(1024), allowPlainHttp: optional((v) => typeof v === 'boolean') },
    },
    [MSG.CLEAR_HELD]: { from: 'popup', fields: {} },
    [MSG.DEBUG]: { from: 'popup', fields: {} },
    [MSG.FLUSH]: { from: 'popup', fields: {} },
    [MSG.LIBRARY_LINK]: { from: 'popup', fields: { thread: optional(isString(64)) } },
    [MSG.PAGE_THREAD]: { from: 'popup', fields: { url: isString(MAX_URL) } },
    [MSG.FORGET_THREAD]: { from: 'popup', fields: { thread: isString(64) } },
  });

  /** `{msg}` with a copy of `raw`'s fields if it is a well-formed message that a `from` (`content`, `worker`,
   * `popup`) sender may send, else `{error}` with the reason's code. */
  function check(from, raw) {
    if (!isObject(raw) || typeof raw.type !== 'string') return { error: ERR.INVALID };
    const shape = Object.prototype.hasOwnProperty.call(SHAPES, raw.type) ? SHAPES[raw.type] : null;
    if (!shape || shape.from !== from) return { error: ERR.UNKNOWN };
    const msg = { type: raw.type };
    for (const k of Object.keys(raw)) {
      if (k !== 'type' && !Object.prototype.hasOwnProperty.call(shape.fields, k)) return { error: ERR.INVALID };
    }
    for (const [k, ok] of Object.entries(shape.fields)) {
      if (!ok(raw[k])) return { error: ERR.INVALID };
      if (raw[k] !== undefined) msg[k] = raw[k];
    }
    return { msg };
  }

  /** Which kind of sender the worker is hearing from, by the browser's own record of it: `popup` (an extension
   * page), `content` (a content script in a tab), or null (anything else, refused). */
  function senderKind(sender, runtimeId, extensionOrigin) {
    if (!sender || sender.id !== runtimeId) return null;
    if (typeof sender.url === 'string' && sender.url.startsWith(extensionOrigin)) return 'popup';
    return sender.tab ? 'content' : null;
  }

  /** The browser's own record of the page a content script's message comes from: the sending frame's URL and,
   * when that frame is the tab's top frame, the tab's URL. Only these can become the page (and so the
   * conversation) a message speaks for; the `url` a content script sends is only compared with them, by the core. */
  function senderPage(sender) {
    const url = typeof sender.url === 'string' ? sender.url : '';
    const tab = sender.frameId === 0 && sender.tab && typeof sender.tab.url === 'string' ? sender.tab.url : undefined;
    return { url: url || tab || '', tab_url: tab };
  }

  const make = Object.freeze({
    hello: (url) => ({ type: MSG.HELLO, url }),
    capture: (url, title, turns) => ({ type: MSG.CAPTURE, url, title, turns }),
    probe: (url, probe, title) => ({ type: MSG.PROBE, url, probe, title }),
    toggleSkip: (url) => ({ type: MSG.TOGGLE_SKIP, url }),
    network: (url, surface, kind, endpoint, method, body, error) => ({
      type: MSG.NETWORK,
      url,
      surface,
      kind,
      endpoint,
      method,
      body,
      error,
    }),
    refresh: () => ({ type: MSG.REFRESH }),
    popupState: () => ({ type: MSG.POPUP_STATE }),
    setSettings: (patch, intent) => ({ type: MSG.SET_SETTINGS, patch, intent }),
    setPatterns: (patterns) => ({ type: MSG.SET_PATTERNS, patterns }),
    pair: (relayUrl, code, allowPlainHttp) => ({ type: MSG.PAIR, relayUrl, code, allowPlainHttp }),
    clearHeld: () => ({ type: MSG.CLEAR_HELD }),
    debug: () => ({ type: MSG.DEBUG }),
    flush: () => ({ type: MSG.FLUSH }),
    libraryLink: (thread) => ({ type: MSG.LIBRARY_LINK, thread }),
    pageThread: (url) => ({ type: MSG.PAGE_THREAD, url }),
    forgetThread: (thread) => ({ type: MSG.FORGET_THREAD, thread }),
  });

  g.personkitMessages = Object.freeze({ MSG, ERR, INTENT_PREFIX, make, check, senderKind, senderPage });
})(globalThis);
