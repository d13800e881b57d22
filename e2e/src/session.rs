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
        Session::start_with(&[], surfaces)
    }

    /// [`Session::start`] with extra `personkit serve` arguments for the relay.
    pub fn start_with(relay_args: &[&str], surfaces: &[&str]) -> Result<Session> {
        Session::start_full(relay_args, "", surfaces)
    }

    /// [`Session::start_with`] with the relay published under a sub-path `prefix` (e.g. `/personkit`) by the proxy
    /// the extension pairs against.
    pub fn start_full(relay_args: &[&str], prefix: &str, surfaces: &[&str]) -> Result<Session> {
        let s = Session::start_unpaired(relay_args, prefix)?;
        let code = s.relay.pairing_code.clone().ok_or_else(|| {
            anyhow!("relay started on an empty corpus but printed no `personkit: pairing code` line; log:\n{}", s.relay.log())
        })?;
        s.pair(&code)?;
        for surface in surfaces {
            s.set_surface(surface, true)?;
        }
        Ok(s)
    }

    /// The relay, its counting proxy, the fixture server and Chromium with the extension's popup open (fast
    /// delivery timings on), not yet paired.
    pub fn start_unpaired(relay_args: &[&str], prefix: &str) -> Result<Session> {
        let ext = crate::dist_dir("chrome")?;
        let relay = Relay::start_with(relay_args)?;
        let proxy = Proxy::start_under(relay.port, prefix)?;
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
            .eval("chrome.storage.session.set({testFastFlush: true}).then(() => true)")?;
        Ok(s)
    }

    /// Fills relay URL (the proxy's) and code in the popup, clicks pair, waits for "Paired".
    pub fn pair(&self, code: &str) -> Result<()> {
        self.pair_at(&self.proxy.url(), code)
    }

    /// Pairs through the popup with the relay at `relay_url`.
    pub fn pair_at(&self, relay_url: &str, code: &str) -> Result<()> {
        self.popup.reload()?;
        self.popup.eval(&format!(
            "({SET_VALUE})('#relay-url', {})",
            json!(relay_url)
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

    /// Turns the popup's "Experimental surfaces" flag on or off.
    pub fn set_experimental(&self, on: bool) -> Result<()> {
        self.popup.reload()?;
        self.wait_popup_rendered()?;
        self.set_checkbox("#experimental", on)
    }

    /// Turns the master kill switch on (capture paused) or off.
    pub fn set_kill_switch(&self, paused: bool) -> Result<()> {
        self.popup.reload()?;
        self.wait_popup_rendered()?;
        self.set_checkbox("#kill-switch", paused)
    }

    fn set_checkbox(&self, sel: &str, on: bool) -> Result<()> {
        let sel_js = json!(sel);
        self.popup.eval(&format!(
            "(() => {{ const el = document.querySelector({sel_js}); if (el.checked !== {on}) el.click(); return true; }})()"
        ))?;
        // The popup stores the setting asynchronously; wait until a reload shows it.
        let deadline = Instant::now() + Duration::from_secs(8);
        loop {
            std::thread::sleep(Duration::from_millis(1000));
            self.popup.reload()?;
            self.wait_popup_rendered()?;
            let now = self.popup.wait_for(&format!("document.querySelector({sel_js}) ? [document.querySelector({sel_js}).checked] : null"), Duration::from_secs(5))?;
            if now[0] == json!(on) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("popup setting {sel} did not stick as {on}");
            }
        }
    }

    /// Waits until the popup has rendered the worker's state once (its site list is built from it; before that
    /// the static page shows defaults).
    pub fn wait_popup_rendered(&self) -> Result<()> {
        self.popup.wait_for(
            "!!document.querySelector('[data-health]')",
            Duration::from_secs(10),
        )?;
        Ok(())
    }

    /// Popup's queue-length text.
    pub fn popup_queue_length(&self) -> Result<String> {
        self.popup.reload()?;
        // The static page says 0 until the worker answered: wait for the first render (it builds the site list).
        let v = self.popup.wait_for(
            "document.querySelector('[data-health]') ? document.querySelector('#queue-length')?.textContent ?? '' : ''",
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
        // The server routes by path; a case's path may carry a query (a site that keeps the id there).
        let path = case.expected.path.split('?').next().unwrap_or("/");
        self.server.route(path, case.page());
        for p in &case.expected.extra_paths {
            self.server.route(p, case.page());
        }
    }

    /// Runs one case end to end and returns the problems found (empty = pass).
    pub fn check(&self, case: &Case) -> Result<Vec<String>> {
        let surface = case.expected.surface.clone();
        let tab = self.open_case(case)?;
        // Wait until every expected turn is there (or time out), then a quiet period to catch extras.
        self.wait_landed(case, LAND_TIMEOUT)?;
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

    /// The relay's `GET /v1/me/capture-health` body, asked with the device token the extension holds (read from
    /// the extension origin's IndexedDB in the worker, a trusted context).
    pub fn relay_capture_health(&self) -> Result<Value> {
        self.relay_get("/v1/me/capture-health")
    }

    /// A relay `GET` of `path` (e.g. `/v1/threads`) with the device token the extension holds, as JSON.
    pub fn relay_get(&self, path: &str) -> Result<Value> {
        let rec = self.worker_eval(crate::READ_TOKEN_RECORD)?;
        let token = rec["token"]
            .as_str()
            .ok_or_else(|| anyhow!("the extension holds no device token: {rec}"))?;
        let r = crate::http::request(
            "GET",
            &format!("{}{path}", self.proxy.url()),
            None,
            Some(token),
            Duration::from_secs(10),
        )?;
        r.json()
    }
}

impl Session {
    /// Loads a single case from a fixture directory outside the per-surface lists (e.g. `scenarios/...`).
    pub fn scenario_case(name: &str) -> Result<Case> {
        let dir = crate::fixtures_dir().join(name);
        let text = std::fs::read_to_string(dir.join("expected.json"))
            .with_context(|| format!("fixture {name}"))?;
        let expected =
            serde_json::from_str(&text).with_context(|| format!("parsing {name}/expected.json"))?;
        Ok(Case {
            name: name.to_string(),
            dir,
            expected,
        })
    }

    /// The in-page badge's `data-state` (`capturing|skipped|paused|off`), or None when there is no badge.
    pub fn badge_state(tab: &Tab) -> Result<Option<String>> {
        let v = tab.eval("document.querySelector('#personkit-badge')?.dataset.state ?? null")?;
        Ok(v.as_str().map(str::to_string))
    }

    /// Clicks the badge with a real (trusted) mouse click at its position.
    pub fn click_badge(tab: &Tab) -> Result<()> {
        let r = tab.wait_for(
            "(() => { const b = document.querySelector('#personkit-badge'); if (!b) return null; \
             b.scrollIntoView({block: 'nearest'}); const r = b.getBoundingClientRect(); \
             return r.width > 0 ? [r.x + r.width / 2, r.y + r.height / 2] : null; })()",
            Duration::from_secs(10),
        )?;
        let (x, y) = (r[0].as_f64().unwrap_or(0.0), r[1].as_f64().unwrap_or(0.0));
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            tab.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            )?;
        }
        Ok(())
    }

    /// Queue length as the popup shows it (the first number in `#queue-length`).
    pub fn queue_len(&self) -> Result<u64> {
        let text = self.popup_queue_length()?;
        let digits: String = text
            .chars()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(char::is_ascii_digit)
            .collect();
        digits
            .parse()
            .with_context(|| format!("no number in #queue-length {text:?}"))
    }

    /// Terminates the extension's service worker through CDP and waits until its target is gone.
    pub fn terminate_worker(&self) -> Result<()> {
        let t = self
            .browser
            .extension_worker_target()?
            .ok_or_else(|| anyhow!("worker not running"))?;
        let id = t["targetId"].as_str().unwrap_or_default().to_string();
        self.browser
            .cdp
            .call(None, "Target.closeTarget", json!({"targetId": id}))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let still = self.browser.extension_worker_target()?;
            if still
                .as_ref()
                .is_none_or(|t| t["targetId"].as_str() != Some(id.as_str()))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("service worker {id} still running 10 s after Target.closeTarget");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `problems` of a case is empty (or times out) and returns the last problems.
    pub fn wait_landed(&self, case: &Case, timeout: Duration) -> Result<Vec<String>> {
        let deadline = Instant::now() + timeout;
        loop {
            let problems = fixtures::diff(case, &self.messages(&case.expected.surface)?);
            if problems.is_empty() || Instant::now() > deadline {
                return Ok(problems);
            }
            std::thread::sleep(Duration::from_millis(400));
        }
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
    /// Reloads and waits for the reloaded document's load event.
    pub fn reload(&self) -> Result<()> {
        let from = self.page_events().len();
        self.call("Page.reload", json!({}))?;
        self.wait_committed_and_loaded(from, Duration::from_secs(10), |_| true)
            .context("reload did not finish")
    }
}

impl Tab {
    /// Reloads the page every second until `expr` is truthy (for pages that render their state once on load).
    pub fn wait_for_reload(&self, expr: &str, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            self.reload()?;
            if let Ok(v) = self.wait_for(expr, Duration::from_millis(1000)) {
                return Ok(v);
            }
            if Instant::now() > deadline {
                bail!("timed out after {timeout:?} waiting (with reloads) for `{expr}`");
            }
        }
    }
}
