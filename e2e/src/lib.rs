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
pub mod generated;
pub mod http;
pub mod page;
pub mod proxy;
pub mod relay;
pub mod screenshots;
pub mod server;
pub mod session;

/// A JS expression: an async function of a key that resolves to the worker's state record under that key
/// (`settings`, `queue`, `skipped`, ...) from the extension origin's IndexedDB (see extension/TESTING.md), or
/// null. Evaluate it from an extension page or the worker: `format!("{READ_STATE}('settings')")`. It opens the
/// database with the worker's schema, so reading first cannot leave it without its store.
/// The device token record (`{token, relay}`) from the extension origin's IndexedDB; evaluate it in the worker or
/// an extension page.
pub const READ_TOKEN_RECORD: &str = r#"(async () => {
  const db = await new Promise((res, rej) => { const r = indexedDB.open('personkit-secrets'); r.onsuccess = () => res(r.result); r.onerror = () => rej(r.error); });
  if (!db.objectStoreNames.contains('secrets')) { db.close(); return null; }
  const rec = await new Promise((res, rej) => { const q = db.transaction('secrets').objectStore('secrets').get('deviceToken'); q.onsuccess = () => res(q.result); q.onerror = () => rej(q.error); });
  db.close();
  return rec || null;
})()"#;

pub const READ_STATE: &str = r#"(async (key) => {
  const db = await new Promise((res, rej) => { const r = indexedDB.open('personkit-state', 1);
    r.onupgradeneeded = () => r.result.createObjectStore('state'); r.onsuccess = () => res(r.result); r.onerror = () => rej(r.error); });
  const v = await new Promise((res, rej) => { const q = db.transaction('state').objectStore('state').get(key);
    q.onsuccess = () => res(q.result); q.onerror = () => rej(q.error); });
  db.close();
  return v === undefined ? null : v;
})"#;

/// Host names of the chat sites that the browser maps onto the fixture server.
pub const SITE_HOSTS: &[&str] = &[
    "chatgpt.com",
    "claude.ai",
    "gemini.google.com",
    "copilot.microsoft.com",
    "www.copilot.com",
    "grok.com",
    "x.com",
    "www.meta.ai",
    "www.perplexity.ai",
    "chat.mistral.ai",
    "huggingface.co",
    "poe.com",
    "pi.ai",
    "lmarena.ai",
    "arena.ai",
    "www.kimi.com",
    "chat.deepseek.com",
    "chat.qwen.ai",
    "www.doubao.com",
    "chatglm.cn",
    "chat.z.ai",
    "yiyan.baidu.com",
    "www.wanzhi.com",
    "hailuoai.com",
    "chat.sensetime.com",
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
