//! `personkit-extension-wasm-net` is the second wasm module of the extension: the network parsers of
//! `personkit_shared::network`, which read what a chat site's own page receives (its streamed replies and the
//! conversation JSON it loads). It is a module of its own because the parsers (about 45 KB gzip) do not fit the
//! capture core's 200 KB budget beside everything else; the worker loads it only when the first body arrives.
//! One line per function, no logic; everything here is tested natively in `personkit-shared`.

use wasm_bindgen::prelude::*;

/// `surface` (`browser-ext:chatgpt` or `chatgpt`), `kind` (`stream` or `conversation`) and the whole body →
/// `{"ok": {conversation_id, turns, unknown}}` or `{"error": {code, message}}` (JSON text).
#[wasm_bindgen(js_name = parseNetwork)]
pub fn parse_network(surface: &str, kind: &str, body: &str) -> String {
    personkit_shared::network::parse_network_json(surface, kind, body.as_bytes())
}
