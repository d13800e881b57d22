//! One end-to-end session: fixture server + real relay (behind the counting proxy) + Chromium with the built
//! extension, paired through the popup page. Everything is torn down on drop.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};

use crate::chromium::{Chromium, LaunchOptions, Tab};
use crate::fixtures::{self, Case};
use crate::proxy::Proxy;
use crate::relay::{Relay, StoredMessage};
use crate::server::FixtureServer;

/// How long a case may take to land after its page script finished.
pub const LAND_TIMEOUT: Duration = Duration::from_secs(20);
/// Extra quiet time after everything landed, to catch late duplicates or partials.
pub const SETTLE: Duration = Duration::from_millis(2500);

pub struct Session {
    // Field order = drop order: the browser goes first, then the relay.
    pub browser: Chromium,
    pub proxy: Proxy,
    pub relay: Relay,
    pub server: FixtureServer,
    pub popup: Tab,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("browser", &self.browser)
            .field("relay_port", &self.relay.port)
            .finish()
    }
}

/// JS run in the popup: set an input's value the way a user would (events fire).
const SET_VALUE: &str = r#"(sel, v) => { const el = document.querySelector(sel); if (!el) throw new Error('popup has no ' + sel);
  el.focus(); el.value = v; el.dispatchEvent(new Event('input', {bubbles: true}));
  el.dispatchEvent(new Event('change', {bubbles: true})); return true; }"#;

impl Session {
    /// Starts everything, pairs through the popup and turns on `surfaces` (e.g. `["browser-ext:chatgpt"]`).
    pub fn start(surfaces: &[&str]) -> Result<Session> {
        let ext = crate::dist_dir("chrome")?;
        let relay = Relay::start()?;
        let code = relay.pairing_code.clone().ok_or_else(|| {
            anyhow!("relay started on an empty corpus but printed no `personkit: pairing code` line; log:\n{}", relay.log())
        })?;
        let proxy = Proxy::start(relay.port)?;
        let server = FixtureServer::start()?;
        let browser = Chromium::launch(&LaunchOptions {
            extension: Some(ext),
            fixture_port: server.port,
        })?;
        let popup = browser.open_tab(&browser.extension_url("popup.html")?)?;
        let s = Session {
            browser,
            proxy,
            relay,
            server,
            popup,
        };
        s.popup.wait_for(
            "document.readyState === 'complete' && !!document.querySelector('#pair-button')",
            Duration::from_secs(10),
        )?;
        s.popup
            .eval("chrome.storage.local.set({testFastFlush: true}).then(() => true)")?;
        s.pair(&code)?;
        for surface in surfaces {
            s.set_surface(surface, true)?;
        }
        Ok(s)
    }

    /// Fills relay URL and code in the popup, clicks pair, waits for "Paired".
    pub fn pair(&self, code: &str) -> Result<()> {
        self.popup.reload()?;
        self.popup.eval(&format!(
            "({SET_VALUE})('#relay-url', {})",
            json!(self.proxy.url())
        ))?;
        self.popup
            .eval(&format!("({SET_VALUE})('#pair-code', {})", json!(code)))?;
        self.popup
            .eval("document.querySelector('#pair-button').click(), true")?;
        self.popup
            .wait_for(
                "(document.querySelector('#pair-status')?.textContent || '').includes('Paired')",
                Duration::from_secs(15),
            )
            .with_context(|| {
                format!(
                    "popup never showed \"Paired\" (status: {:?}); relay log:\n{}",
                    self.popup
                        .eval("document.querySelector('#pair-status')?.textContent")
                        .unwrap_or_default(),
                    self.relay.log()
                )
            })?;
        Ok(())
    }

    /// Turns a surface's opt-in toggle on or off through the popup.
    pub fn set_surface(&self, surface: &str, on: bool) -> Result<()> {
        self.popup.reload()?;
        let sel = format!("input[data-surface=\"{surface}\"]");
        self.popup.wait_for(
            &format!("!!document.querySelector({})", json!(sel)),
            Duration::from_secs(10),
        )?;
        self.set_checkbox(&sel, on)
    }

    /// Turns the master kill switch on (capture paused) or off.
    pub fn set_kill_switch(&self, paused: bool) -> Result<()> {
        self.popup.reload()?;
        self.popup.wait_for(
            "!!document.querySelector('#kill-switch')",
            Duration::from_secs(10),
        )?;
        self.set_checkbox("#kill-switch", paused)
    }

    fn set_checkbox(&self, sel: &str, on: bool) -> Result<()> {
        let sel_js = json!(sel);
        self.popup.eval(&format!(
            "(() => {{ const el = document.querySelector({sel_js}); if (el.checked !== {on}) el.click(); return true; }})()"
        ))?;
        // The popup stores the setting asynchronously; wait until a reload shows it.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            std::thread::sleep(Duration::from_millis(300));
            self.popup.reload()?;
            let now = self.popup.wait_for(&format!("document.querySelector({sel_js}) ? [document.querySelector({sel_js}).checked] : null"), Duration::from_secs(5))?;
            if now[0] == json!(on) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("popup setting {sel} did not stick as {on}");
            }
        }
    }

    /// Popup's queue-length text.
    pub fn popup_queue_length(&self) -> Result<String> {
        self.popup.reload()?;
        let v = self.popup.wait_for(
            "document.querySelector('#queue-length')?.textContent ?? ''",
            Duration::from_secs(5),
        )?;
        Ok(v.as_str().unwrap_or_default().to_string())
    }

    /// All messages the relay holds for `surface`.
    pub fn messages(&self, surface: &str) -> Result<Vec<StoredMessage>> {
        self.relay.messages(surface)
    }

    /// Serves the case's page (and its pushState targets) and opens it in a new tab; waits for the page script.
    pub fn open_case(&self, case: &Case) -> Result<Tab> {
        self.serve_case(case);
        let tab = self.browser.open_tab(&case.url())?;
        wait_fixture_done(&tab, case)?;
        Ok(tab)
    }

    pub fn serve_case(&self, case: &Case) {
        self.server.route(&case.expected.path, case.page());
        for p in &case.expected.extra_paths {
            self.server.route(p, case.page());
        }
    }

    /// Runs one case end to end and returns the problems found (empty = pass).
    pub fn check(&self, case: &Case) -> Result<Vec<String>> {
        let surface = case.expected.surface.clone();
        let tab = self.open_case(case)?;
        let expected_turns: usize = case
            .expected
            .conversations
            .iter()
            .map(|c| c.turns.len())
            .sum();
        // Wait until every expected turn is there (or time out), then a quiet period to catch extras.
        let deadline = Instant::now() + LAND_TIMEOUT;
        loop {
            let msgs = self.messages(&surface)?;
            if fixtures::diff(case, &msgs).is_empty() || Instant::now() > deadline {
                break;
            }
            let _ = expected_turns;
            std::thread::sleep(Duration::from_millis(400));
        }
        std::thread::sleep(SETTLE);
        let msgs = self.messages(&surface)?;
        let problems = fixtures::diff(case, &msgs);
        let _ = tab.close();
        Ok(problems)
    }

    /// Evaluates in the extension's service worker (starting a fresh attach each time: workers come and go).
    pub fn worker_eval(&self, expr: &str) -> Result<Value> {
        let w = self.browser.attach_worker()?;
        w.eval(expr)
    }
}

/// Waits for the fixture page's own script to finish (`<html data-fixture-done>`).
pub fn wait_fixture_done(tab: &Tab, case: &Case) -> Result<()> {
    let timeout = Duration::from_millis(case.expected.script_ms + 10_000);
    tab.wait_for(
        "document.documentElement.dataset.fixtureDone === '1'",
        timeout,
    )
    .with_context(|| format!("fixture {} never set data-fixture-done", case.name))?;
    Ok(())
}

impl Tab {
    pub fn reload(&self) -> Result<()> {
        let before = self
            .cdp
            .events_matching(|e| is_load(e, &self.session))
            .len();
        self.call("Page.reload", json!({}))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while self
            .cdp
            .events_matching(|e| is_load(e, &self.session))
            .len()
            <= before
        {
            if Instant::now() > deadline {
                bail!("reload did not finish in 10 s");
            }
            std::thread::sleep(Duration::from_millis(30));
        }
        Ok(())
    }
}

fn is_load(e: &Value, session: &str) -> bool {
    e["method"] == "Page.loadEventFired" && e["sessionId"].as_str() == Some(session)
}
