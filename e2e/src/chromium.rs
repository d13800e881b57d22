//! Launching the real Chromium binary with the built extension and talking to it over CDP.
//!
//! Each [`Chromium`] gets a fresh HOME and user-data-dir (Chromium writes under `$HOME/.config` even with
//! `--user-data-dir`), maps the chat sites' host names onto the local TLS fixture server, and is killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use base64_lite::decode as b64decode;
use command_fds::{CommandFdExt, FdMapping};
use serde_json::{Value, json};

use crate::cdp::Cdp;

/// Where Debian's `chromium` package puts the real binary (the `chromium` on PATH is a wrapper script).
pub const CHROMIUM_BIN: &str = "/usr/lib/chromium/chromium";

/// A running Chromium, killed (and its profile removed) on drop.
pub struct Chromium {
    child: Child,
    pub cdp: Cdp,
    _home: tempfile::TempDir,
    pub extension_id: Option<String>,
}

impl std::fmt::Debug for Chromium {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chromium")
            .field("pid", &self.child.id())
            .field("extension_id", &self.extension_id)
            .finish()
    }
}

/// Options for one launch.
#[derive(Debug, Clone, Default)]
pub struct LaunchOptions {
    /// Unpacked extension directory (`dist/chrome`), or none for a plain browser.
    pub extension: Option<PathBuf>,
    /// Port of the TLS fixture server that the site host names are mapped onto.
    pub fixture_port: u16,
}

impl Chromium {
    pub fn launch(opts: &LaunchOptions) -> Result<Chromium> {
        if !Path::new(CHROMIUM_BIN).exists() {
            bail!(
                "{CHROMIUM_BIN} not found: install Debian's `chromium` package (scripts/setup does)"
            );
        }
        let home = tempfile::Builder::new()
            .prefix("personkit-e2e-chromium-")
            .tempdir()?;
        let profile = home.path().join("profile");
        std::fs::create_dir_all(&profile)?;
        let port = opts.fixture_port;
        let rules = crate::SITE_HOSTS
            .iter()
            .map(|h| format!("MAP {h} 127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut args: Vec<String> = vec![
            "--headless=new".into(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--no-default-browser-check".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--remote-debugging-pipe".into(),
            format!("--user-data-dir={}", profile.display()),
            format!("--host-resolver-rules={rules}"),
            "--ignore-certificate-errors".into(),
            format!("--ip-address-space-overrides=127.0.0.1:{port}=public"),
            "--window-size=1280,900".into(),
            // Tabs opened by the tests are background tabs; their timers must run at page speed.
            "--disable-background-timer-throttling".into(),
            "--disable-renderer-backgrounding".into(),
            "--disable-backgrounding-occluded-windows".into(),
        ];
        if let Some(ext) = &opts.extension {
            let ext = ext
                .canonicalize()
                .with_context(|| format!("extension dir {}", ext.display()))?;
            args.push(format!("--disable-extensions-except={}", ext.display()));
            args.push(format!("--load-extension={}", ext.display()));
        }
        args.push("about:blank".into());

        let (their_in, our_out) = std::io::pipe()?; // Chromium reads commands on fd 3
        let (our_in, their_out) = std::io::pipe()?; // Chromium writes replies on fd 4
        let log = std::fs::File::create(home.path().join("chromium.log"))?;
        let mut cmd = Command::new(CHROMIUM_BIN);
        cmd.args(&args)
            .env("HOME", home.path())
            .env_remove("DISPLAY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        cmd.fd_mappings(vec![
            FdMapping {
                parent_fd: their_in.into(),
                child_fd: 3,
            },
            FdMapping {
                parent_fd: their_out.into(),
                child_fd: 4,
            },
        ])
        .map_err(|e| anyhow!("fd mapping: {e:?}"))?;
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning {CHROMIUM_BIN}"))?;
        drop(cmd); // closes our copies of the child's pipe ends
        let cdp = Cdp::new(our_in, our_out);
        let mut browser = Chromium {
            child,
            cdp,
            _home: home,
            extension_id: None,
        };
        browser
            .cdp
            .call(None, "Browser.getVersion", json!({}))
            .with_context(|| {
                format!(
                    "Chromium did not answer on the CDP pipe; log:\n{}",
                    browser.log_tail()
                )
            })?;
        browser
            .cdp
            .call(None, "Target.setDiscoverTargets", json!({"discover": true}))?;
        if opts.extension.is_some() {
            browser.extension_id = Some(browser.wait_extension_id(Duration::from_secs(20))?);
        }
        Ok(browser)
    }

    /// The last lines of Chromium's stderr, for failure messages.
    pub fn log_tail(&self) -> String {
        let text =
            std::fs::read_to_string(self._home.path().join("chromium.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    pub fn home(&self) -> &Path {
        self._home.path()
    }

    /// Finds the extension id from its service worker target.
    fn wait_extension_id(&self, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(t) = self.extension_worker_target()? {
                let url = t["url"].as_str().unwrap_or_default();
                if let Some(rest) = url.strip_prefix("chrome-extension://") {
                    return Ok(rest.split('/').next().unwrap_or_default().to_string());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "the extension's service worker did not start within {timeout:?}: is dist/chrome a loadable MV3 \
                     extension? Chromium log:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The extension's service worker target, if it is running.
    pub fn extension_worker_target(&self) -> Result<Option<Value>> {
        let targets = self.cdp.call(None, "Target.getTargets", json!({}))?;
        Ok(targets["targetInfos"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| {
                t["type"] == "service_worker"
                    && t["url"]
                        .as_str()
                        .is_some_and(|u| u.starts_with("chrome-extension://"))
            })
            .cloned())
    }

    /// Opens a new tab at `url` and attaches to it.
    pub fn open_tab(&self, url: &str) -> Result<Tab> {
        let created = self
            .cdp
            .call(None, "Target.createTarget", json!({"url": "about:blank"}))?;
        let target_id = created["targetId"]
            .as_str()
            .ok_or_else(|| anyhow!("no targetId"))?
            .to_string();
        let tab = self.attach(target_id)?;
        tab.call("Page.enable", json!({}))?;
        tab.call("Runtime.enable", json!({}))?;
        if url != "about:blank" {
            tab.navigate(url)?;
        }
        Ok(tab)
    }

    /// A flat CDP session on target `target_id`.
    fn attach(&self, target_id: String) -> Result<Tab> {
        let attached = self.cdp.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target_id, "flatten": true}),
        )?;
        let session = attached["sessionId"]
            .as_str()
            .ok_or_else(|| anyhow!("no sessionId"))?
            .to_string();
        Ok(Tab {
            cdp: self.cdp.clone(),
            session,
            target_id,
        })
    }

    /// Attaches to the extension's service worker (starting it if needed is the caller's business).
    pub fn attach_worker(&self) -> Result<Tab> {
        let t = self
            .extension_worker_target()?
            .ok_or_else(|| anyhow!("extension service worker is not running"))?;
        let target_id = t["targetId"].as_str().unwrap_or_default().to_string();
        let tab = self.attach(target_id)?;
        tab.call("Runtime.enable", json!({}))?;
        Ok(tab)
    }

    /// The extension's `chrome-extension://<id>/<path>` URL.
    pub fn extension_url(&self, path: &str) -> Result<String> {
        let id = self
            .extension_id
            .as_deref()
            .ok_or_else(|| anyhow!("no extension loaded"))?;
        Ok(format!("chrome-extension://{id}/{path}"))
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self
            .cdp
            .call_timeout(None, "Browser.close", json!({}), Duration::from_secs(3));
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One attached page, popup or worker.
#[derive(Debug, Clone)]
pub struct Tab {
    pub cdp: Cdp,
    pub session: String,
    pub target_id: String,
}

impl Tab {
    pub fn call(&self, method: &str, params: Value) -> Result<Value> {
        self.cdp.call(Some(&self.session), method, params)
    }

    /// Navigates and waits for the load event of the document this navigation committed. A load event counted
    /// from before the call is not enough: the previous page's own load (after a form post or a redirect) can
    /// still be in flight and would end the wait while the new document is half parsed.
    pub fn navigate(&self, url: &str) -> Result<()> {
        let r = self.call("Page.navigate", json!({"url": url}))?;
        if let Some(err) = r.get("errorText").and_then(Value::as_str) {
            bail!("navigating to {url}: {err}");
        }
        // A same-document navigation (a fragment) has no loader and fires no load event.
        let Some(loader) = r
            .get("loaderId")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return Ok(());
        };
        self.wait_committed_and_loaded(0, Duration::from_secs(20), |frame| {
            frame["loaderId"].as_str() == Some(loader.as_str())
        })
        .with_context(|| format!("{url} did not finish loading"))
    }

    /// Waits, among this tab's events from index `from` on, for a main-frame commit (`Page.frameNavigated`)
    /// whose frame satisfies `is_ours`, followed by a load event.
    pub(crate) fn wait_committed_and_loaded(
        &self,
        from: usize,
        timeout: Duration,
        is_ours: impl Fn(&Value) -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let events = self.page_events();
            let committed = events.iter().skip(from).position(|e| {
                e["method"] == "Page.frameNavigated"
                    && e["params"]["frame"].get("parentId").is_none()
                    && is_ours(&e["params"]["frame"])
            });
            if let Some(at) = committed {
                if events[from + at..]
                    .iter()
                    .any(|e| e["method"] == "Page.loadEventFired")
                {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!("no committed and loaded document in {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// This tab's load and commit events, in the order they arrived.
    pub(crate) fn page_events(&self) -> Vec<Value> {
        self.cdp.events_matching(|e| {
            e["sessionId"].as_str() == Some(self.session.as_str())
                && (e["method"] == "Page.loadEventFired" || e["method"] == "Page.frameNavigated")
        })
    }

    /// Evaluates an expression (promises awaited) and returns its JSON value.
    pub fn eval(&self, expr: &str) -> Result<Value> {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true, "userGesture": true}),
        )?;
        if let Some(ex) = r.get("exceptionDetails") {
            let desc = ex["exception"]["description"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| ex.to_string());
            bail!(
                "evaluating `{}`: {desc}",
                expr.chars().take(120).collect::<String>()
            );
        }
        Ok(r["result"]["value"].clone())
    }

    /// Evaluates an expression (promises awaited) in one execution context of this target (e.g. a content
    /// script's isolated world, see [`Tab::isolated_world`]) and returns its JSON value.
    pub fn eval_in(&self, context_id: i64, expr: &str) -> Result<Value> {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "contextId": context_id, "returnByValue": true, "awaitPromise": true}),
        )?;
        if let Some(ex) = r.get("exceptionDetails") {
            bail!(
                "evaluating in context {context_id}: {}",
                ex["exception"]["description"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| ex.to_string())
            );
        }
        Ok(r["result"]["value"].clone())
    }

    /// The newest isolated world of extension `extension_id` in this page (its content script's context), as
    /// reported by `Runtime.executionContextCreated` (the tab has `Runtime` enabled since it was opened).
    pub fn isolated_world(&self, extension_id: &str, timeout: Duration) -> Result<i64> {
        let origin = format!("chrome-extension://{extension_id}");
        let deadline = Instant::now() + timeout;
        loop {
            let found = self.cdp.events_matching(|e| {
                e["method"] == "Runtime.executionContextCreated"
                    && e["sessionId"].as_str() == Some(self.session.as_str())
                    && e["params"]["context"]["auxData"]["type"] == "isolated"
                    && e["params"]["context"]["origin"].as_str() == Some(origin.as_str())
            });
            if let Some(id) = found
                .last()
                .and_then(|e| e["params"]["context"]["id"].as_i64())
            {
                return Ok(id);
            }
            if Instant::now() > deadline {
                bail!("no isolated world of {origin} appeared in this page within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Polls `expr` until it is truthy; returns its value.
    pub fn wait_for(&self, expr: &str, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.eval(expr).unwrap_or(Value::Null);
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return Ok(v);
            }
            if Instant::now() > deadline {
                bail!("timed out after {timeout:?} waiting for `{expr}`");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// PNG screenshot of the viewport.
    pub fn screenshot(&self) -> Result<Vec<u8>> {
        self.capture(json!({"format": "png"}))
    }

    /// PNG screenshot of the whole page, up to `max_height` CSS pixels tall.
    pub fn screenshot_full_page(&self, max_height: f64) -> Result<Vec<u8>> {
        self.call("Page.bringToFront", json!({}))?;
        let m = self.call("Page.getLayoutMetrics", json!({}))?;
        let w = m["cssContentSize"]["width"].as_f64().unwrap_or(1280.0);
        let h = m["cssContentSize"]["height"]
            .as_f64()
            .unwrap_or(900.0)
            .min(max_height);
        self.capture(json!({"format": "png", "captureBeyondViewport": true,
                            "clip": {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}}))
    }

    fn capture(&self, params: Value) -> Result<Vec<u8>> {
        // A background tab produces no frames in headless mode: bring it to the front first.
        self.call("Page.bringToFront", json!({}))?;
        let r = self.call("Page.captureScreenshot", params)?;
        let data = r["data"]
            .as_str()
            .ok_or_else(|| anyhow!("no screenshot data"))?;
        b64decode(data).ok_or_else(|| anyhow!("bad base64 in screenshot"))
    }

    pub fn close(&self) -> Result<()> {
        self.cdp.call(
            None,
            "Target.closeTarget",
            json!({"targetId": self.target_id}),
        )?;
        Ok(())
    }
}

/// A dependency-free base64 decoder (standard alphabet) for screenshots.
mod base64_lite {
    pub fn decode(s: &str) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(s.len() * 3 / 4);
        let mut acc: u32 = 0;
        let mut bits = 0;
        for c in s.bytes() {
            let v = match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'+' => 62,
                b'/' => 63,
                b'=' | b'\n' | b'\r' => continue,
                _ => return None,
            };
            acc = (acc << 6) | u32::from(v);
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
                acc &= (1 << bits) - 1;
            }
        }
        Some(out)
    }
}
