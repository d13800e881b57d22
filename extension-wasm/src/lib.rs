//! `personkit-extension-wasm` is the wasm-bindgen facade the extension's service worker loads: one line per
//! function of `personkit_shared::capture::api` that the worker calls, JSON strings in and out. It holds no logic; everything it exposes
//! is tested natively in `personkit-shared`. It is not used by the relay.

use personkit_shared::capture::api;
use wasm_bindgen::prelude::*;

fn js(e: api::ApiCallError) -> JsError {
    JsError::new(&e.to_string())
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

#[wasm_bindgen]
pub fn forgotten(input: &str) -> Result<String, JsError> {
    api::forgotten(input).map_err(js)
}

#[wasm_bindgen(js_name = toggleSkip)]
pub fn toggle_skip(input: &str) -> Result<String, JsError> {
    api::toggle_skip(input).map_err(js)
}

#[wasm_bindgen(js_name = setPatterns)]
pub fn set_patterns(input: &str) -> Result<String, JsError> {
    api::set_patterns(input).map_err(js)
}

#[wasm_bindgen]
pub fn probe(input: &str) -> Result<String, JsError> {
    api::probe(input).map_err(js)
}

#[wasm_bindgen(js_name = captureReports)]
pub fn capture_reports(input: &str) -> Result<String, JsError> {
    api::capture_reports(input).map_err(js)
}

#[wasm_bindgen(js_name = reportsSent)]
pub fn reports_sent(input: &str) -> Result<String, JsError> {
    api::reports_sent(input).map_err(js)
}

#[wasm_bindgen]
pub fn capture(input: &str) -> Result<String, JsError> {
    api::capture(input).map_err(js)
}

#[wasm_bindgen(js_name = nextBatch)]
pub fn next_batch(input: &str) -> Result<String, JsError> {
    api::next_batch(input).map_err(js)
}

#[wasm_bindgen(js_name = onOutcome)]
pub fn on_outcome(input: &str) -> Result<String, JsError> {
    api::on_outcome(input).map_err(js)
}

#[wasm_bindgen(js_name = pairRequest)]
pub fn pair_request(input: &str) -> Result<String, JsError> {
    api::pair_request(input).map_err(js)
}

#[wasm_bindgen(js_name = pairResponse)]
pub fn pair_response(input: &str) -> Result<String, JsError> {
    api::pair_response(input).map_err(js)
}

#[wasm_bindgen(js_name = onPaired)]
pub fn on_paired(input: &str) -> Result<String, JsError> {
    api::on_paired(input).map_err(js)
}

#[wasm_bindgen(js_name = queueSummary)]
pub fn queue_summary(input: &str) -> Result<String, JsError> {
    api::queue_summary(input).map_err(js)
}

#[wasm_bindgen(js_name = popupState)]
pub fn popup_state(input: &str) -> Result<String, JsError> {
    api::popup_state(input).map_err(js)
}

#[wasm_bindgen(js_name = applyIntents)]
pub fn apply_intents(input: &str) -> Result<String, JsError> {
    api::apply_intents(input).map_err(js)
}

#[wasm_bindgen]
pub fn maintain(input: &str) -> Result<String, JsError> {
    api::maintain(input).map_err(js)
}

#[wasm_bindgen(js_name = clearHeld)]
pub fn clear_held(input: &str) -> Result<String, JsError> {
    api::clear_held(input).map_err(js)
}

#[wasm_bindgen(js_name = flushDelayMs)]
pub fn flush_delay_ms(fast: bool) -> u32 {
    u32::try_from(api::flush_delay_ms(fast)).unwrap_or(u32::MAX)
}
