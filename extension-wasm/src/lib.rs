//! `personkit-extension-wasm` is the wasm-bindgen facade the extension's service worker loads: one line per
//! function of `personkit_shared::capture::api` that the worker calls, and per method of the state it keeps in
//! the instance (`Core`: queue, dedupe set, stats), JSON strings in and out. It holds no logic; everything it exposes
//! is tested natively in `personkit-shared`. It is not used by the relay.

use personkit_shared::capture::api;
use wasm_bindgen::prelude::*;

fn js(e: api::ApiCallError) -> JsError {
    JsError::new(&e.to_string())
}

#[wasm_bindgen(js_name = installRegistry)]
pub fn install_registry(json: &str) -> Result<(), JsError> {
    api::install_registry(json).map_err(js)
}

#[wasm_bindgen(js_name = loadState)]
pub fn load_state(input: &str) -> Result<String, JsError> {
    api::load_state(input).map_err(js)
}

#[wasm_bindgen(js_name = migrateLegacy)]
pub fn migrate_legacy(input: &str) -> Result<String, JsError> {
    api::migrate_legacy(input).map_err(js)
}

#[wasm_bindgen(js_name = pageState)]
pub fn page_state(input: &str) -> Result<String, JsError> {
    api::page_state(input).map_err(js)
}

#[wasm_bindgen(js_name = toggleSkip)]
pub fn toggle_skip(input: &str) -> Result<String, JsError> {
    api::toggle_skip(input).map_err(js)
}

#[wasm_bindgen(js_name = setPatterns)]
pub fn set_patterns(input: &str) -> Result<String, JsError> {
    api::set_patterns(input).map_err(js)
}

#[wasm_bindgen(js_name = pairRequest)]
pub fn pair_request(input: &str) -> Result<String, JsError> {
    api::pair_request(input).map_err(js)
}

#[wasm_bindgen(js_name = pairResponse)]
pub fn pair_response(input: &str) -> Result<String, JsError> {
    api::pair_response(input).map_err(js)
}

#[wasm_bindgen(js_name = applyIntents)]
pub fn apply_intents(input: &str) -> Result<String, JsError> {
    api::apply_intents(input).map_err(js)
}

#[wasm_bindgen(js_name = flushDelayMs)]
pub fn flush_delay_ms(fast: bool) -> u32 {
    u32::try_from(api::flush_delay_ms(fast)).unwrap_or(u32::MAX)
}

/// The capture core's state, kept in this instance while the worker runs (see `api::Core`).
#[wasm_bindgen]
#[derive(Debug)]
pub struct Core(api::Core);

#[wasm_bindgen]
impl Core {
    pub fn load(input: &str) -> Result<Core, JsError> {
        api::Core::load(input).map(Core).map_err(js)
    }

    #[wasm_bindgen(js_name = loadChanges)]
    pub fn load_changes(&mut self) -> Result<String, JsError> {
        self.0.load_changes().map_err(js)
    }

    pub fn capture(&mut self, input: &str, parsed: Option<String>) -> Result<String, JsError> {
        self.0.capture(input, parsed.as_deref()).map_err(js)
    }

    /// Every other call of the state, by name (see `api::Core::call`).
    pub fn call(&mut self, method: &str, input: &str) -> Result<String, JsError> {
        self.0.call(method, input).map_err(js)
    }
}
