//! Reading and driving a dashboard page in a [`Tab`]: its text, a JSON value computed in it, and a click that
//! waits for the next document.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::chromium::Tab;

/// The page's visible text (`document.body.innerText`).
pub fn text_of(tab: &Tab) -> String {
    tab.eval("document.body.innerText")
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The value of the JS expression `expr`, carried as JSON; `null` when it throws or cannot be carried (a test's
/// assertion then shows `null`).
pub fn eval_json(tab: &Tab, expr: &str) -> Value {
    tab.eval(&format!("JSON.stringify({expr})"))
        .ok()
        .and_then(|v| v.as_str().and_then(|s| serde_json::from_str(s).ok()))
        .unwrap_or(Value::Null)
}

/// Clicks the first element matching `selector` (a link, or a button that submits its form) and waits, up to
/// `timeout`, for a new document that has loaded and for which the JS condition `then` holds. A marker set on the
/// current document tells the new one apart, so `then` may be true of both.
pub fn click_and_wait(tab: &Tab, selector: &str, then: &str, timeout: Duration) -> Result<()> {
    let sel = serde_json::to_string(selector)?;
    let clicked = tab.eval(&format!(
        "(() => {{ const e = document.querySelector({sel}); if (!e || e.disabled) return false; window.__left = false; e.click(); return true; }})()"
    ))?;
    if clicked != Value::Bool(true) {
        bail!("nothing to click at {selector}: {}", text_of(tab));
    }
    tab.wait_for(
        &format!("window.__left === undefined && document.readyState === 'complete' && ({then})"),
        timeout,
    )
    .with_context(|| format!("after clicking {selector}: {}", text_of(tab)))?;
    Ok(())
}
