//! `personkit-e2e` is the real-browser end-to-end test harness for the personkit extension: a TLS fixture server
//! that serves hand-written copies of the chat sites' pages under their real origins, the real Chromium binary
//! driven over the DevTools protocol on `--remote-debugging-pipe` (our own small client, no npm), Firefox ESR
//! driven over WebDriver (geckodriver), and the real `personkit` relay process on an ephemeral port with a temp
//! corpus. Tests live in `e2e/tests/`; fixtures in `e2e/fixtures/<surface>/<case>/`.
//!
//! It is not a unit-test helper for the core (that is tested natively in `shared/`), and it mocks nothing but
//! the chat sites themselves, which cannot be reached from here: the fixture pages stand in for them.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

pub mod cdp;
pub mod chromium;
pub mod firefox;
pub mod fixtures;
pub mod http;
pub mod proxy;
pub mod relay;
pub mod server;
pub mod session;

/// Host names of the chat sites that the browser maps onto the fixture server.
pub const SITE_HOSTS: &[&str] = &[
    "chatgpt.com",
    "claude.ai",
    "gemini.google.com",
    "copilot.microsoft.com",
    "www.copilot.com",
];

/// The workspace root (parent of this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `e2e/fixtures`.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// The built, unpacked extension for `browser` ("chrome" or "firefox"). Fails loudly when it is missing: the e2e
/// suite never skips silently.
pub fn dist_dir(browser: &str) -> Result<PathBuf> {
    let dir = workspace_root().join("dist").join(browser);
    if !dir.join("manifest.json").exists() {
        bail!(
            "{} has no manifest.json: build the extension first with `scripts/build-extension` (scripts/test does \
             this before the e2e tests)",
            dir.display()
        );
    }
    Ok(dir)
}
