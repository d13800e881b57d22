//! Firefox ESR driven over WebDriver (geckodriver), with the extension installed as a temporary add-on
//! (`POST /session/<id>/moz/addon/install`) and the chat sites' host names resolved to 127.0.0.1 with the pref
//! `network.dns.forceResolve`. Because that pref maps names but not ports, pages are loaded as
//! `https://chatgpt.com:<fixture port>/...` (match patterns without a port match any port).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};

use crate::http;

pub const FIREFOX_BIN: &str = "/usr/bin/firefox-esr";
/// The extension's internal UUID we pin through `extensions.webextensions.uuids`, so the popup URL is known.
pub const EXTENSION_UUID: &str = "5f1c3a2e-8d4b-4e6f-9a1b-2c3d4e5f6a7b";

/// geckodriver: env `GECKODRIVER`, then PATH, then `~/.cargo/bin/geckodriver`.
pub fn geckodriver_bin() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("GECKODRIVER") {
        return Ok(PathBuf::from(p));
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join("geckodriver");
            if p.exists() {
                return Ok(p);
            }
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        let p = Path::new(&home).join(".cargo/bin/geckodriver");
        if p.exists() {
            return Ok(p);
        }
    }
    bail!(
        "geckodriver not found: run scripts/setup (it runs `cargo install geckodriver`) or set GECKODRIVER"
    )
}

/// A geckodriver + Firefox session; both are ended on drop.
pub struct Firefox {
    driver: Child,
    base: String,
    pub session: String,
    _home: tempfile::TempDir,
}

impl std::fmt::Debug for Firefox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Firefox")
            .field("session", &self.session)
            .finish()
    }
}

/// The built Firefox extension (`dist/firefox`) and its gecko id.
pub fn built_addon() -> Result<(PathBuf, String)> {
    let dist = crate::dist_dir("firefox")?;
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(dist.join("manifest.json"))?)?;
    let id = manifest["browser_specific_settings"]["gecko"]["id"]
        .as_str()
        .ok_or_else(|| {
            anyhow!("dist/firefox/manifest.json has no browser_specific_settings.gecko.id")
        })?
        .to_string();
    Ok((dist, id))
}

impl Firefox {
    /// Firefox with the built extension installed as a temporary add-on.
    pub fn with_extension() -> Result<Firefox> {
        let (dist, id) = built_addon()?;
        let ff = Firefox::launch(&id)?;
        let installed = ff.install_addon(&dist)?;
        if installed != id {
            bail!("installed add-on id {installed}, manifest says {id}");
        }
        Ok(ff)
    }

    /// Sets a form field in the current page as a person typing would (input and change events).
    pub fn set_value(&self, sel: &str, value: &str) -> Result<()> {
        self.exec(&format!(
            "const el = document.querySelector({}); el.focus(); el.value = {}; \
             el.dispatchEvent(new Event('input', {{bubbles: true}})); el.dispatchEvent(new Event('change', {{bubbles: true}})); return true;",
            json!(sel),
            json!(value)
        ))?;
        Ok(())
    }

    /// Pairs through the popup with the relay at `relay_url` using `code` (fast flush on, for tests), and waits
    /// until the popup says `Paired` followed by `status_prefix`'s rest (e.g. `Paired with https://`).
    pub fn pair_in_popup(&self, relay_url: &str, code: &str, status_prefix: &str) -> Result<()> {
        self.open_extension_page(&self.popup_url())?;
        self.wait_for(
            "return !!document.querySelector('#pair-button')",
            Duration::from_secs(15),
        )?;
        self.exec_async("const done = arguments[arguments.length - 1]; browser.storage.session.set({testFastFlush: true}).then(() => done(true));")?;
        self.set_value("#relay-url", relay_url)?;
        self.set_value("#pair-code", code)?;
        self.exec("document.querySelector('#pair-button').click(); return true;")?;
        self.wait_for(
            &format!(
                "return (document.querySelector('#pair-status')?.textContent || '').includes({})",
                json!(status_prefix)
            ),
            Duration::from_secs(20),
        )?;
        Ok(())
    }

    /// Turns `surface` on in the open popup (one click; it must have been off) and gives the worker a moment.
    pub fn enable_surface(&self, surface: &str) -> Result<()> {
        let sel = json!(format!("input[data-surface=\"{surface}\"]"));
        self.wait_for(
            &format!("return document.querySelector({sel}) ? true : null"),
            Duration::from_secs(10),
        )?;
        let was = self.exec(&format!(
            "const el = document.querySelector({sel}); const was = el.checked; el.click(); return was;"
        ))?;
        if was != json!(false) {
            bail!("{surface} was already on");
        }
        std::thread::sleep(Duration::from_millis(1500));
        Ok(())
    }

    /// Starts Firefox headless; `addon_id` is the gecko id from the manifest (to pin its UUID).
    pub fn launch(addon_id: &str) -> Result<Firefox> {
        Firefox::launch_with_prefs(addon_id, &json!({}))
    }

    /// As [`Firefox::launch`], with extra preferences (an object of pref name → value) on top of the defaults,
    /// e.g. `{"extensions.background.idle.timeout": 1000}` to make the event page suspend after 1 s idle.
    pub fn launch_with_prefs(addon_id: &str, extra_prefs: &Value) -> Result<Firefox> {
        if !Path::new(FIREFOX_BIN).exists() {
            bail!("{FIREFOX_BIN} not found: install Debian's `firefox-esr` (scripts/setup does)");
        }
        let bin = geckodriver_bin()?;
        let home = tempfile::Builder::new()
            .prefix("personkit-e2e-firefox-")
            .tempdir()?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log = std::fs::File::create(home.path().join("geckodriver.log"))?;
        let driver = Command::new(&bin)
            .args([
                "--port",
                &port.to_string(),
                "--host",
                "127.0.0.1",
                "--allow-system-access",
            ])
            .env("HOME", home.path())
            .env("TMPDIR", home.path())
            .env_remove("DISPLAY")
            .env("MOZ_HEADLESS", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("spawning {}", bin.display()))?;
        let base = format!("http://127.0.0.1:{port}");
        let mut ff = Firefox {
            driver,
            base,
            session: String::new(),
            _home: home,
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while http::request(
            "GET",
            &format!("{}/status", ff.base),
            None,
            None,
            Duration::from_secs(2),
        )
        .is_err()
        {
            if Instant::now() > deadline {
                bail!("geckodriver did not come up; log:\n{}", ff.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let uuids = json!({ addon_id: EXTENSION_UUID }).to_string();
        let mut prefs = json!({
            "network.dns.forceResolve": "127.0.0.1",
            "network.proxy.type": 0,
            "extensions.webextensions.uuids": uuids,
            "browser.shell.checkDefaultBrowser": false,
            "datareporting.policy.dataSubmissionEnabled": false,
            "app.update.enabled": false,
            "network.dns.disableIPv6": true,
            // The extension's console (worker and content scripts) goes to Firefox's stdout, i.e. `log()`.
            "devtools.console.stdout.chrome": true,
            "devtools.console.stdout.content": true
        });
        if let (Some(base), Some(extra)) = (prefs.as_object_mut(), extra_prefs.as_object()) {
            for (k, v) in extra {
                base.insert(k.clone(), v.clone());
            }
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "firefox",
            "acceptInsecureCerts": true,
            "moz:firefoxOptions": {
                "binary": FIREFOX_BIN,
                "args": ["-headless"],
                "prefs": prefs
            }
        }}});
        let r = ff.post_raw("/session", &caps, Duration::from_secs(60))?;
        ff.session = r["value"]["sessionId"]
            .as_str()
            .ok_or_else(|| anyhow!("no session id from geckodriver: {r}; log:\n{}", ff.log()))?
            .to_string();
        Ok(ff)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self._home.path().join("geckodriver.log")).unwrap_or_default()
    }

    fn post_raw(&self, path: &str, body: &Value, timeout: Duration) -> Result<Value> {
        let r = http::request(
            "POST",
            &format!("{}{path}", self.base),
            Some(body),
            None,
            timeout,
        )?;
        let v = r.json()?;
        if r.status != 200 {
            bail!("geckodriver POST {path} → {}: {}", r.status, v);
        }
        Ok(v)
    }

    fn post(&self, path: &str, body: &Value) -> Result<Value> {
        self.post_raw(
            &format!("/session/{}{path}", self.session),
            body,
            Duration::from_secs(60),
        )
    }

    /// Installs the unpacked extension directory as a temporary add-on; returns its id.
    pub fn install_addon(&self, dir: &Path) -> Result<String> {
        let dir = dir.canonicalize()?;
        let r = self.post(
            "/moz/addon/install",
            &json!({"path": dir, "temporary": true}),
        )?;
        Ok(r["value"].as_str().unwrap_or_default().to_string())
    }

    pub fn navigate(&self, url: &str) -> Result<()> {
        self.post("/url", &json!({"url": url}))?;
        Ok(())
    }

    /// Runs `script` (a function body; use `return`) in the current page.
    pub fn exec(&self, script: &str) -> Result<Value> {
        Ok(self.post("/execute/sync", &json!({"script": script, "args": []}))?["value"].clone())
    }

    /// Runs an async script: the body gets `done` as `arguments[arguments.length - 1]`.
    pub fn exec_async(&self, script: &str) -> Result<Value> {
        Ok(self.post("/execute/async", &json!({"script": script, "args": []}))?["value"].clone())
    }

    pub fn wait_for(&self, script: &str, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.exec(script).unwrap_or(Value::Null);
            if !(v.is_null() || v == json!(false) || v == json!("")) {
                return Ok(v);
            }
            if Instant::now() > deadline {
                bail!("Firefox: timed out after {timeout:?} waiting for `{script}`");
            }
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    /// Opens an extension page in the current tab. WebDriver refuses to navigate to `moz-extension:` URLs, so
    /// the load is started from the chrome context with the system principal (as a user opening it would).
    ///
    /// Returns once a NEW document has loaded: the outgoing document may have the same URL (the popup reopened)
    /// and is `complete` too, and under load it stays on screen for a while after the load starts. A test that
    /// clicked in it clicked in a page being torn down, whose runtime message Firefox dropped with it — that was
    /// the "lost popup toggle" of the Firefox e2e run. Documents are told apart by `performance.timeOrigin`.
    pub fn open_extension_page(&self, url: &str) -> Result<()> {
        let before = self
            .exec("return String(performance.timeOrigin)")
            .unwrap_or(Value::Null);
        self.post("/moz/context", &json!({"context": "chrome"}))?;
        let r = self.exec(&format!(
            "const win = Services.wm.getMostRecentWindow('navigator:browser'); \
             win.gBrowser.selectedBrowser.loadURI(Services.io.newURI({}), \
             {{triggeringPrincipal: Services.scriptSecurityManager.getSystemPrincipal()}}); return true;",
            json!(url)
        ));
        self.post("/moz/context", &json!({"context": "content"}))?;
        r?;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let here = self
                .exec("return [location.href + ' ' + document.readyState, String(performance.timeOrigin)]")
                .unwrap_or_default();
            let new_document = !before.is_string() || here[1] != before;
            if new_document
                && here[0]
                    .as_str()
                    .is_some_and(|h| h.starts_with(url) && h.ends_with("complete"))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{url} did not load in Firefox (at {here})");
            }
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    pub fn popup_url(&self) -> String {
        format!("moz-extension://{EXTENSION_UUID}/popup.html")
    }
}

impl Drop for Firefox {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = http::request(
                "DELETE",
                &format!("{}/session/{}", self.base, self.session),
                None,
                None,
                Duration::from_secs(10),
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
