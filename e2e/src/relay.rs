//! The real relay for the end-to-end tests: a [`personkit_testkit::Relay`] (the one launcher: `personkit serve
//! --addr 127.0.0.1:0` on a corpus in its own temp dir, stdout drained, HOME isolated) plus what the browser tests
//! read back through the CLI (`corpus messages --json`, devices).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use serde_json::Value;

/// A running relay process, killed on drop. The database file outlives restarts (it lives in `dir`).
#[derive(Debug)]
pub struct Relay {
    inner: personkit_testkit::Relay,
    pub port: u16,
    /// The pairing code the first start printed (an empty corpus prints one).
    pub pairing_code: Option<String>,
    pub db: PathBuf,
    dir: tempfile::TempDir,
}

impl Relay {
    pub fn start() -> Result<Relay> {
        Relay::start_with(&[])
    }

    /// Starts with extra `personkit serve` arguments (e.g. `--max-batch-bytes 4096`).
    pub fn start_with(args: &[&str]) -> Result<Relay> {
        let dir = tempfile::Builder::new()
            .prefix("personkit-e2e-relay-")
            .tempdir()?;
        let db = dir.path().join("corpus.db");
        let inner = personkit_testkit::Relay::start(&db, args);
        Ok(Relay {
            port: inner.port(),
            pairing_code: inner.pairing_code_if_printed(),
            inner,
            db,
            dir,
        })
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Everything the relay wrote to stderr across its runs.
    pub fn log(&self) -> String {
        self.inner.stderr()
    }

    /// Stops the process (SIGKILL: the relay only acknowledges durable batches, so this is the harsh case).
    pub fn stop(&mut self) {
        self.inner.kill9();
    }

    /// Starts again on the same port and database.
    pub fn restart(&mut self) -> Result<()> {
        self.inner.restart();
        Ok(())
    }

    /// Runs a CLI subcommand against this relay's database and returns stdout.
    pub fn cli(&self, args: &[&str]) -> Result<String> {
        let out = self.inner.cli(args);
        if !out.status.success() {
            bail!("`personkit {}` failed: {}", args.join(" "), out.stderr);
        }
        Ok(out.stdout)
    }

    /// A fresh pairing code from `personkit pair --json` (the running server accepts it: it checks the DB).
    pub fn new_pairing_code(&self) -> Result<String> {
        let out = self.cli(&["pair", "--json"])?;
        let v: Value = serde_json::from_str(out.trim())
            .with_context(|| format!("pair --json printed {out}"))?;
        v["code"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("pair --json without code: {out}"))
    }

    /// All stored messages of a surface (every revision), from `corpus messages --surface S --json`.
    pub fn messages(&self, surface: &str) -> Result<Vec<StoredMessage>> {
        let out = self.cli(&[
            "corpus",
            "messages",
            "--surface",
            surface,
            "--limit",
            "100000",
            "--json",
        ])?;
        serde_json::from_str(out.trim())
            .with_context(|| format!("corpus messages --json printed: {out}"))
    }

    pub fn devices(&self) -> Result<Vec<Value>> {
        let out = self.cli(&["devices", "list", "--json"])?;
        serde_json::from_str(out.trim())
            .with_context(|| format!("devices list --json printed: {out}"))
    }

    pub fn revoke_all_devices(&self) -> Result<usize> {
        let devices = self.devices()?;
        for d in &devices {
            let id = d["id"]
                .as_str()
                .or_else(|| d["device_id"].as_str())
                .ok_or_else(|| anyhow!("device {d}"))?;
            self.cli(&["devices", "revoke", id])?;
        }
        Ok(devices.len())
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// One row of `corpus messages --json` (contract fields we use).
#[derive(Debug, Clone, Deserialize)]
pub struct StoredMessage {
    pub thread_id: String,
    pub role: String,
    pub content: String,
    #[serde(default)]
    pub message_key: Option<String>,
    #[serde(default)]
    pub ordinal: Option<i64>,
    #[serde(default = "yes")]
    pub is_current: bool,
    #[serde(default)]
    pub parent_key: Option<String>,
    #[serde(default)]
    pub revision: Option<u32>,
    #[serde(default)]
    pub source_path: Option<String>,
}

fn yes() -> bool {
    true
}
