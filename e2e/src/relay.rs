//! The real relay: the `personkit` binary started as `serve --addr 127.0.0.1:0 --db <tmp>`, its start-up lines
//! parsed (contract: `personkit: listening on http://<ip>:<port>`, `personkit: pairing code <CODE> (...)`), and the
//! CLI used to read the corpus back (`corpus messages --json`) and to revoke devices.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use serde_json::Value;

/// The `personkit` binary: env `PERSONKIT_BIN`, else `<workspace>/target/debug/personkit`.
pub fn personkit_bin() -> Result<PathBuf> {
    let p = match std::env::var_os("PERSONKIT_BIN") {
        Some(p) => PathBuf::from(p),
        None => crate::workspace_root().join("target/debug/personkit"),
    };
    if !p.exists() {
        bail!(
            "relay binary {} not found: build it with `cargo build -p personkit-relay --bin personkit` or set \
             PERSONKIT_BIN (scripts/test does both)",
            p.display()
        );
    }
    Ok(p)
}

/// A running relay process, killed on drop. The database file outlives restarts (it lives in `dir`).
#[derive(Debug)]
pub struct Relay {
    child: Option<Child>,
    pub port: u16,
    pub pairing_code: Option<String>,
    pub db: PathBuf,
    dir: tempfile::TempDir,
    bin: PathBuf,
    starts: u32,
}

impl Relay {
    pub fn start() -> Result<Relay> {
        let dir = tempfile::Builder::new()
            .prefix("personkit-e2e-relay-")
            .tempdir()?;
        let db = dir.path().join("corpus.db");
        let mut r = Relay {
            child: None,
            port: 0,
            pairing_code: None,
            db,
            dir,
            bin: personkit_bin()?,
            starts: 0,
        };
        r.spawn("127.0.0.1:0")?;
        Ok(r)
    }

    fn spawn(&mut self, addr: &str) -> Result<()> {
        self.starts += 1;
        let log =
            std::fs::File::create(self.dir.path().join(format!("relay-{}.log", self.starts)))?;
        let mut child = Command::new(&self.bin)
            .args(["serve", "--addr", addr, "--db"])
            .arg(&self.db)
            .env("HOME", self.dir.path())
            .env_remove("PERSONKIT_DB")
            .env_remove("PERSONKIT_ADDR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("spawning {}", self.bin.display()))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        self.child = Some(child);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    // Keep draining so the relay never blocks on a full pipe.
                    continue;
                }
            }
        });
        let mut port = None;
        let mut code = None;
        // The pairing code (when printed) comes right after or before the listening line; read both with a bound.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            let wait = if port.is_some() {
                Duration::from_millis(700)
            } else {
                Duration::from_secs(1)
            };
            match rx.recv_timeout(wait) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix("personkit: listening on http://") {
                        port = rest
                            .rsplit(':')
                            .next()
                            .and_then(|p| p.trim().parse::<u16>().ok());
                    } else if let Some(rest) = line.strip_prefix("personkit: pairing code ") {
                        code = rest.split_whitespace().next().map(str::to_string);
                    }
                    if port.is_some() && code.is_some() {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) if port.is_some() => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        self.port = port.ok_or_else(|| {
            anyhow!(
                "relay did not print `personkit: listening on http://...` within 20 s; log:\n{}",
                self.log()
            )
        })?;
        self.pairing_code = code;
        Ok(())
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Everything the relay wrote to stderr across its runs.
    pub fn log(&self) -> String {
        (1..=self.starts)
            .map(|i| {
                std::fs::read_to_string(self.dir.path().join(format!("relay-{i}.log")))
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Stops the process (SIGKILL: the relay only acknowledges durable batches, so this is the harsh case).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts again on the same port and database.
    pub fn restart(&mut self) -> Result<()> {
        self.stop();
        let addr = format!("127.0.0.1:{}", self.port);
        // The port was just released; retry briefly in case the kernel is slow to let go.
        let mut last = None;
        for _ in 0..20 {
            match self.spawn(&addr) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    last = Some(e);
                    std::thread::sleep(Duration::from_millis(250));
                }
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("restart failed")))
    }

    /// Runs a CLI subcommand against this relay's database and returns stdout.
    pub fn cli(&self, args: &[&str]) -> Result<String> {
        cli(&self.bin, &self.db, self.dir.path(), args)
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

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

fn cli(bin: &Path, db: &Path, home: &Path, args: &[&str]) -> Result<String> {
    let mut child = Command::new(bin)
        .args(args)
        .arg("--db")
        .arg(db)
        .env("HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // Drain both pipes in threads so a large answer cannot block the child; bound the wait.
    let mut so = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let mut se = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut so, &mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut se, &mut v);
        v
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("`personkit {}` did not finish in 30 s", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    if !status.success() {
        bail!(
            "`personkit {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&stderr)
        );
    }
    Ok(String::from_utf8_lossy(&stdout).to_string())
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
}

fn yes() -> bool {
    true
}
