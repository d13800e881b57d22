//! Test support for the relay's tests, the end-to-end tests and the benchmarks. [`Relay`] is the one launcher of
//! a real relay: it starts the REAL `personkit` binary on an ephemeral loopback port with a temp database and its
//! own HOME, drains its stdout in a thread (so the relay never blocks on a full pipe), reads the port and pairing
//! code from its start-up lines, and can kill, stop and restart it. [`Http`] talks to it with a small blocking
//! client (ureq); [`cli`] runs its CLI on the same corpus. Also: turn builders ([`turn`], [`turn_at`]), a seeded
//! [`Rng`], the test embedding model ([`model_dir`]) and language model ([`llm_model_path`]) and a stand-in for cloud HTTP APIs ([`standin`]).
//!
//! Nothing here is a mock of the relay: every test talks to a real process over a real socket and a real SQLite
//! file. Every wait is bounded: a relay that does not print its listening line, a request that does not answer
//! and a CLI call that does not exit fail the test with the relay's output instead of hanging it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod identity;
pub mod standin;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use personkit_shared::wire::{ClientInfo, Role, build_observation};
use serde_json::{Value, json};

/// How long the relay may take to print its listening line (a loaded 2-core machine, a debug build).
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one HTTP request may take.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a kept-alive connection may sit idle and still be reused (under the relay's 10 s header timeout).
pub const IDLE_REUSE: Duration = Duration::from_secs(4);
/// How long one CLI call may take.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// The current UTC time as RFC 3339 (`YYYY-MM-DDTHH:MM:SSZ`), without a date library.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    rfc3339(secs)
}

/// Seconds since the epoch → RFC 3339 UTC (civil-from-days, proleptic Gregorian).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The `personkit` binary under test: `PERSONKIT_BIN` when set, else the one cargo built next to the running
/// test or bench executable (`target/<profile>/personkit`, a sibling of `target/<profile>/deps/`). Integration
/// tests of the crate that defines the binary always find a fresh one there; other crates' tests and benches
/// call [`build_bin`] first or set `PERSONKIT_BIN`.
pub fn bin() -> PathBuf {
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("PERSONKIT_BIN").filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        let exe = std::env::current_exe().expect("the test's own path");
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("a test executable lives in target/<profile>/deps");
        let p = profile_dir.join("personkit");
        assert!(
            p.is_file(),
            "relay binary {} not found: run `cargo build -p personkit-cli --bin personkit` (or set PERSONKIT_BIN)",
            p.display()
        );
        p
    })
    .clone()
}

/// The cargo target directory the running test or bench binary was built into (`target` when it cannot tell).
pub fn target_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.ancestors()
                .find(|p| {
                    p.file_name()
                        .is_some_and(|n| n == "debug" || n == "release")
                })
                .and_then(Path::parent)
                .map(Path::to_path_buf)
        })
        .unwrap_or_else(|| PathBuf::from("target"))
}

/// Builds the `personkit` binary with cargo (release when `release`) and points [`bin`] at it, unless
/// `PERSONKIT_BIN` is set. For benchmarks, which must not measure a stale binary.
pub fn build_bin(release: bool) -> PathBuf {
    if let Some(p) = std::env::var_os("PERSONKIT_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "--quiet",
        "-p",
        "personkit-cli",
        "--bin",
        "personkit",
    ]);
    if release {
        cmd.arg("--release");
    }
    let st = cmd.status().expect("run cargo build");
    assert!(st.success(), "cargo build of the personkit binary failed");
    let p = target_dir()
        .join(if release { "release" } else { "debug" })
        .join("personkit");
    // Relays started from now on run this build (unless one was chosen already).
    BIN.get_or_init(|| p.clone()).clone()
}

/// The binary relays and CLI calls run, once chosen by [`bin`] or [`build_bin`].
static BIN: OnceLock<PathBuf> = OnceLock::new();

static SPAWNED: AtomicUsize = AtomicUsize::new(0);

/// Lines the relay printed on stdout, collected by a reader thread.
#[derive(Debug, Default)]
struct Lines {
    lines: Vec<String>,
    closed: bool,
}

/// A running `personkit serve` process. Killed (SIGKILL) and reaped on drop. Its HOME is the corpus's folder,
/// so no user configuration leaks in.
#[derive(Debug)]
pub struct Relay {
    child: Arc<Mutex<Child>>,
    pid: u32,
    /// `http://127.0.0.1:<port>` as printed by the relay.
    pub base: String,
    pub db: PathBuf,
    extra: Vec<String>,
    env: Vec<(String, String)>,
    launcher: Vec<String>,
    /// stderr of every run so far, oldest first.
    stderr_paths: Vec<PathBuf>,
    stdout: Arc<(Mutex<Lines>, Condvar)>,
    pub http: Http,
}

impl Relay {
    /// `personkit serve --addr 127.0.0.1:0 --db <db> <extra...>`; waits for the listening line.
    pub fn start(db: &Path, extra: &[&str]) -> Relay {
        Relay::start_env(db, extra, &[])
    }

    /// [`Relay::start`] with extra environment variables (e.g. `PERSONKIT_EMBEDDER`).
    pub fn start_env(db: &Path, extra: &[&str], env: &[(&str, &str)]) -> Relay {
        Relay::start_under(db, extra, env, &[])
    }

    /// [`Relay::start_env`] run through a launcher command, e.g. `["prlimit", "--nofile=128"]`.
    pub fn start_under(
        db: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
        launcher: &[&str],
    ) -> Relay {
        let owned = |v: &[&str]| -> Vec<String> { v.iter().map(|s| (*s).to_owned()).collect() };
        let (extra, launcher) = (owned(extra), owned(launcher));
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let (child, stdout, stderr_path) = spawn_serve(db, "127.0.0.1:0", &extra, &env, &launcher);
        let mut relay = Relay {
            pid: child.id(),
            child: Arc::new(Mutex::new(child)),
            base: String::new(),
            db: db.to_path_buf(),
            extra,
            env,
            launcher,
            stderr_paths: vec![stderr_path],
            stdout,
            http: Http::new(""),
        };
        relay.await_listening();
        relay
    }

    fn await_listening(&mut self) {
        let line = self
            .wait_line("personkit: listening on ", START_TIMEOUT)
            .unwrap_or_else(|| self.fail("no `personkit: listening on` line"));
        let base = line["personkit: listening on ".len()..].trim().to_owned();
        assert!(
            base.starts_with("http://127.0.0.1:") || base.starts_with("https://127.0.0.1:"),
            "relay must bind loopback by default, printed {line:?}"
        );
        self.http = Http::new(&base);
        self.base = base;
    }

    /// The port the relay listens on.
    pub fn port(&self) -> u16 {
        self.base
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| self.fail("no port in the listening address"))
    }

    /// SIGKILL the relay, then start it again on the same port, corpus and arguments (retrying briefly while the
    /// kernel releases the port).
    pub fn restart(&mut self) {
        self.kill9();
        let addr = format!("127.0.0.1:{}", self.port());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (child, stdout, stderr_path) =
                spawn_serve(&self.db, &addr, &self.extra, &self.env, &self.launcher);
            self.pid = child.id();
            self.child = Arc::new(Mutex::new(child));
            self.stdout = stdout;
            self.stderr_paths.push(stderr_path);
            if self
                .wait_line("personkit: listening on ", START_TIMEOUT)
                .is_some()
            {
                break;
            }
            if Instant::now() >= deadline {
                self.fail("the relay did not restart on its port");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        self.await_listening();
    }

    /// The pairing code `serve` printed at start (it does so when no device is paired).
    pub fn printed_pairing_code(&self) -> String {
        let line = self
            .wait_line("personkit: pairing code ", START_TIMEOUT)
            .unwrap_or_else(|| self.fail("no `personkit: pairing code` line"));
        parse_code(&line["personkit: pairing code ".len()..])
    }

    /// The pairing code of this run's start-up lines, if it printed one (it prints it right after the listening
    /// line, so a short wait tells).
    pub fn pairing_code_if_printed(&self) -> Option<String> {
        self.wait_line("personkit: pairing code ", Duration::from_secs(2))
            .map(|line| parse_code(&line["personkit: pairing code ".len()..]))
    }

    /// Pair a device with the code `serve` printed; returns the bearer token.
    pub fn pair_printed(&self, device_name: &str) -> String {
        let code = self.printed_pairing_code();
        self.pair_with(&code, device_name)
    }

    /// `POST /v1/pair`; asserts 200 and returns the token.
    pub fn pair_with(&self, code: &str, device_name: &str) -> String {
        let r = self.http.post_json(
            "/v1/pair",
            None,
            &json!({"code": code, "device_name": device_name}),
        );
        assert_eq!(r.status, 200, "pairing failed: {}", r.body);
        let v = r.json();
        let token = v["token"]
            .as_str()
            .expect("token in pair response")
            .to_owned();
        assert!(
            token.len() >= 32,
            "token too short for 256 bits: {} chars",
            token.len()
        );
        token
    }

    /// Wait up to `timeout` for a stdout line of the current run starting with `prefix`.
    pub fn wait_line(&self, prefix: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let (m, cv) = &*self.stdout;
        let mut g = m.lock().unwrap();
        loop {
            if let Some(l) = g.lines.iter().find(|l| l.starts_with(prefix)) {
                return Some(l.clone());
            }
            let now = Instant::now();
            if g.closed || now >= deadline {
                return None;
            }
            g = cv.wait_timeout(g, deadline - now).unwrap().0;
        }
    }

    /// Everything the current run printed on stdout so far.
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout.0.lock().unwrap().lines.clone()
    }

    /// Everything logged on stderr so far, across restarts.
    pub fn stderr(&self) -> String {
        self.stderr_paths
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Panic with the relay's output attached.
    pub fn fail(&self, what: &str) -> ! {
        panic!(
            "{what}\n--- relay stdout ---\n{}\n--- relay stderr ---\n{}",
            self.stdout_lines().join("\n"),
            self.stderr()
        )
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// A handle that can SIGKILL the relay from another thread.
    pub fn killer(&self) -> Killer {
        Killer(Arc::clone(&self.child))
    }

    /// SIGKILL the relay and reap it.
    pub fn kill9(&self) {
        let mut c = self.child.lock().unwrap();
        let _ = c.kill();
        let _ = c.wait();
    }

    /// Send SIGTERM (through `kill(1)`, to keep the harness free of unsafe code) and wait up to `timeout` for the
    /// process to exit; returns its status, or None if it is still running.
    pub fn sigterm_and_wait(&self, timeout: Duration) -> Option<ExitStatus> {
        let sent = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .expect("run kill(1)");
        assert!(sent.success(), "kill -TERM {} failed", self.pid);
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.try_exit() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Has the process exited (without blocking)?
    pub fn try_exit(&self) -> Option<ExitStatus> {
        self.child.lock().unwrap().try_wait().ok().flatten()
    }

    /// Run the CLI against this relay's database.
    pub fn cli(&self, args: &[&str]) -> CliOutput {
        cli(&self.db, args)
    }

    /// Run the CLI with `--json`, assert success and parse stdout.
    pub fn cli_json(&self, args: &[&str]) -> Value {
        cli_json(&self.db, args)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Ok(mut c) = self.child.lock() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

type StdoutLines = Arc<(Mutex<Lines>, Condvar)>;

/// Starts `personkit serve` with HOME set to the corpus's folder, stdout drained into shared lines, stderr into a
/// file beside the corpus.
fn spawn_serve(
    db: &Path,
    addr: &str,
    extra: &[String],
    env: &[(String, String)],
    launcher: &[String],
) -> (Child, StdoutLines, PathBuf) {
    let dir = db.parent().expect("db has a parent dir").to_path_buf();
    let n = SPAWNED.fetch_add(1, Ordering::SeqCst);
    let stderr_path = dir.join(format!("relay-{}-{n}.stderr", std::process::id()));
    let stderr = std::fs::File::create(&stderr_path).expect("create stderr log");
    let bin = bin();
    let mut cmd = match launcher.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(&bin);
            c
        }
        None => Command::new(&bin),
    };
    let mut child = cmd
        .arg("serve")
        .arg("--addr")
        .arg(addr)
        .arg("--db")
        .arg(db)
        .args(extra)
        .env("HOME", &dir)
        .env_remove("PERSONKIT_DB")
        .env_remove("PERSONKIT_ADDR")
        .env_remove("PERSONKIT_PROFILE")
        .envs(TOOL_ENV.iter().map(|k| (k, "")))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {} serve: {e}", bin.display()));
    let out = child.stdout.take().expect("piped stdout");
    let stdout: StdoutLines = Arc::default();
    let sink = Arc::clone(&stdout);
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let (m, cv) = &*sink;
            m.lock().unwrap().lines.push(line);
            cv.notify_all();
        }
        let (m, cv) = &*sink;
        m.lock().unwrap().closed = true;
        cv.notify_all();
    });
    (child, stdout, stderr_path)
}

/// Can SIGKILL a relay from another thread.
#[derive(Debug, Clone)]
pub struct Killer(Arc<Mutex<Child>>);

impl Killer {
    pub fn kill9(&self) {
        let mut c = self.0.lock().unwrap();
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// `XXXX-XXXX (valid until ...)` → `XXXX-XXXX`.
pub fn parse_code(rest: &str) -> String {
    rest.split_whitespace()
        .next()
        .expect("a code after the prefix")
        .to_owned()
}

/// A response: status, headers (lowercase names) and body.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {} body is not JSON ({e}): {:?}",
                self.status, self.body
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Assert an error response: the status and a JSON body `{code, message, hint}` with the given code.
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(
            self.status, status,
            "expected {status} {code}, got body {}",
            self.body
        );
        let v = self.json();
        assert_eq!(v["code"], code, "error body {v}");
        for field in ["message", "hint"] {
            let s = v[field].as_str().unwrap_or_default();
            assert!(!s.is_empty(), "error body lacks a non-empty {field}: {v}");
        }
    }
}

/// A small blocking HTTP client with a keep-alive connection pool.
#[derive(Debug, Clone)]
pub struct Http {
    agent: ureq::Agent,
    pub base: String,
}

impl Http {
    pub fn new(base: &str) -> Http {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(HTTP_TIMEOUT))
            .no_delay(true)
            // The relay closes a kept-alive connection idle for its header timeout (10 s); one idle longer than
            // this is not reused, so a request never meets a socket the relay is closing.
            .max_idle_age(IDLE_REUSE)
            .build()
            .new_agent();
        Http {
            agent,
            base: base.to_owned(),
        }
    }

    pub fn try_get(&self, path: &str, token: Option<&str>) -> Result<Resp, String> {
        let mut req = self.agent.get(format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        finish(req.call())
    }

    pub fn get(&self, path: &str, token: Option<&str>) -> Resp {
        self.try_get(path, token)
            .unwrap_or_else(|e| panic!("GET {path} failed: {e}"))
    }

    pub fn delete(&self, path: &str, token: Option<&str>) -> Resp {
        let mut req = self.agent.delete(format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        finish(req.call()).unwrap_or_else(|e| panic!("DELETE {path} failed: {e}"))
    }

    /// GET with extra headers (e.g. Origin for CORS checks).
    pub fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        let mut req = self.agent.get(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        finish(req.call()).unwrap_or_else(|e| panic!("GET {path} failed: {e}"))
    }

    pub fn try_post(&self, path: &str, token: Option<&str>, body: &[u8]) -> Result<Resp, String> {
        let mut req = self
            .agent
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json");
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        finish(req.send(body))
    }

    /// POST with extra headers (e.g. Origin, Authorization) and a JSON body.
    pub fn post_with(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        let mut req = self
            .agent
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        finish(req.send(body)).unwrap_or_else(|e| panic!("POST {path} failed: {e}"))
    }

    pub fn post(&self, path: &str, token: Option<&str>, body: &[u8]) -> Resp {
        self.try_post(path, token, body)
            .unwrap_or_else(|e| panic!("POST {path} failed: {e}"))
    }

    pub fn put_json(&self, path: &str, token: Option<&str>, body: &Value) -> Resp {
        let mut req = self
            .agent
            .put(format!("{}{path}", self.base))
            .header("content-type", "application/json");
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        finish(req.send(body.to_string().as_bytes()))
            .unwrap_or_else(|e| panic!("PUT {path} failed: {e}"))
    }

    pub fn post_json(&self, path: &str, token: Option<&str>, body: &Value) -> Resp {
        self.post(path, token, body.to_string().as_bytes())
    }

    /// `POST /v1/observations` with the given items; asserts 200 and returns the parsed `BatchResponse`.
    pub fn send_batch(&self, token: &str, items: &[Value]) -> Value {
        let r = self.post_json("/v1/observations", Some(token), &batch(items));
        assert_eq!(r.status, 200, "batch refused: {}", r.body);
        let v = r.json();
        check_batch_response(&v, items.len());
        v
    }
}

fn finish(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<Resp, String> {
    let mut resp = r.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                v.to_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let body = resp
        .body_mut()
        .read_to_string()
        .map_err(|e| e.to_string())?;
    Ok(Resp {
        status,
        headers,
        body,
    })
}

/// Structural checks every `BatchResponse` must pass: counts add up and match the per-item statuses, results are
/// in order and complete.
pub fn check_batch_response(v: &Value, n: usize) {
    let results = v["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results: {v}"));
    assert_eq!(results.len(), n, "one result per item: {v}");
    let mut counts = [0usize; 3];
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["index"], i, "results in order: {v}");
        match r["status"].as_str() {
            Some("stored") => counts[0] += 1,
            Some("duplicate") => counts[1] += 1,
            Some("rejected") => {
                counts[2] += 1;
                let e = &r["error"];
                assert!(
                    e["code"].is_string() && e["message"].is_string() && e["hint"].is_string(),
                    "a rejection carries {{code, message, hint}}: {r}"
                );
            }
            other => panic!("unknown item status {other:?} in {v}"),
        }
    }
    assert_eq!(v["stored"], counts[0], "stored count: {v}");
    assert_eq!(v["duplicate"], counts[1], "duplicate count: {v}");
    assert_eq!(v["rejected"], counts[2], "rejected count: {v}");
}

/// Statuses of a batch response, in order.
pub fn statuses(v: &Value) -> Vec<String> {
    v["results"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| r["status"].as_str().unwrap_or("?").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// `{"observations": items}`.
pub fn batch(items: &[Value]) -> Value {
    json!({ "observations": items })
}

pub fn client_info() -> ClientInfo {
    ClientInfo {
        app_version: "0.1.0-test".into(),
        device_id: "test-device".into(),
    }
}

/// A valid thread_turn built with the shared crate's one hash and id functions.
pub fn turn(surface: &str, conv: &str, role: Role, content: &str, ordinal: Option<u32>) -> Value {
    turn_at(surface, conv, role, content, ordinal, None, &now_rfc3339())
}

/// Runs `git <args>` in `repo` as the test's author (Ada Lovelace) at `when` (author and committer date), with no
/// system or user git configuration; panics with git's own message when it fails.
pub fn git(repo: &Path, args: &[&str], when: &str) {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Ada Lovelace")
        .env("GIT_AUTHOR_EMAIL", "ada@example.org")
        .env("GIT_COMMITTER_NAME", "Ada Lovelace")
        .env("GIT_COMMITTER_EMAIL", "ada@example.org")
        .env("GIT_AUTHOR_DATE", when)
        .env("GIT_COMMITTER_DATE", when)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap_or_else(|e| panic!("run git: {e}"));
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One line of a Claude Code transcript (`~/.claude/projects/<encoded cwd>/<session>.jsonl`): turn `i` of
/// `session`, the user's for even `i` (plain text content), the assistant's for odd (a text block), each naming
/// the one before as its parent.
pub fn claude_code_line(session: &str, i: usize, text: &str, at: &str) -> String {
    let id = |n: usize| format!("{n:08x}-0000-4000-8000-{n:012x}");
    let parent = if i == 0 {
        Value::Null
    } else {
        Value::String(id(i))
    };
    let (kind, message) = if i.is_multiple_of(2) {
        ("user", json!({"role": "user", "content": text}))
    } else {
        (
            "assistant",
            json!({"role": "assistant", "content": [{"type": "text", "text": text}]}),
        )
    };
    json!({"parentUuid": parent, "isSidechain": false, "sessionId": session, "type": kind,
        "message": message, "uuid": id(i + 1), "timestamp": at})
    .to_string()
}

/// A valid thread_turn with every optional part chosen.
pub fn turn_at(
    surface: &str,
    conv: &str,
    role: Role,
    content: &str,
    ordinal: Option<u32>,
    message_key: Option<&str>,
    captured_at: &str,
) -> Value {
    let obs = build_observation(
        surface,
        conv,
        role,
        content,
        ordinal,
        message_key,
        captured_at,
        client_info(),
    );
    serde_json::to_value(obs).expect("observation serializes")
}

/// User for even `i`, assistant for odd: a conversation's turns in order.
pub fn alternating_role(i: usize) -> Role {
    if i.is_multiple_of(2) {
        Role::User
    } else {
        Role::Assistant
    }
}

/// The thread id the shared crate derives.
pub fn thread_id(surface: &str, conv: &str) -> String {
    personkit_shared::ids::thread_id(surface, conv)
        .hyphenated()
        .to_string()
}

/// Output of one CLI call.
#[derive(Debug)]
pub struct CliOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl CliOutput {
    pub fn ok(&self) -> &CliOutput {
        assert!(
            self.status.success(),
            "CLI failed ({}):\nstdout: {}\nstderr: {}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }

    pub fn json(&self) -> Value {
        self.ok();
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "CLI --json stdout is not one JSON document ({e}):\n{}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }
}

/// The variables AI tools read to move their files (`personkit_import::harvest::ENV`, which the harvest tests check
/// this against), set empty (which the harvester ignores) so a developer's own settings do not reach a test's
/// harvest.
pub const TOOL_ENV: &[&str] = &[
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "QWEN_RUNTIME_DIR",
    "GROK_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "OPENCODE_DB",
    "GOOSE_PATH_ROOT",
    "CURSOR_CONFIG_DIR",
];

/// Run `personkit <args>` with `PERSONKIT_DB=<db>`, bounded by [`CLI_TIMEOUT`].
pub fn cli(db: &Path, args: &[&str]) -> CliOutput {
    let dir = db.parent().expect("db has a parent dir");
    let mut child = Command::new(bin())
        .args(args)
        .env("PERSONKIT_DB", db)
        .env("HOME", dir)
        .env_remove("PERSONKIT_ADDR")
        .env_remove("PERSONKIT_PROFILE")
        .envs(TOOL_ENV.iter().map(|k| (k, "")))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn personkit CLI");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + CLI_TIMEOUT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait CLI") {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`personkit {}` did not exit within {CLI_TIMEOUT:?}",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    CliOutput {
        status,
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
    }
}

pub fn cli_json(db: &Path, args: &[&str]) -> Value {
    cli(db, args).json()
}

/// One message as the canonical dump compares it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DumpRow {
    pub id: String,
    pub thread_id: String,
    pub role: String,
    pub content_hash: String,
    pub is_current: bool,
}

/// `personkit corpus messages --surface <s> --json` as canonical rows (sorted), every revision included.
pub fn dump_surface(db: &Path, surface: &str) -> Vec<DumpRow> {
    let v = cli_json(
        db,
        &[
            "corpus",
            "messages",
            "--surface",
            surface,
            "--limit",
            "1000000",
            "--json",
        ],
    );
    let arr = v
        .as_array()
        .unwrap_or_else(|| panic!("corpus messages --json must print an array, got {v}"));
    let mut rows: Vec<DumpRow> = arr.iter().map(dump_row).collect();
    rows.sort();
    rows
}

pub fn dump_row(m: &Value) -> DumpRow {
    let s = |k: &str| {
        m[k].as_str()
            .unwrap_or_else(|| panic!("message lacks string {k}: {m}"))
            .to_owned()
    };
    let is_current = match &m["is_current"] {
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_i64() == Some(1),
        other => panic!("message lacks is_current ({other}): {m}"),
    };
    DumpRow {
        id: s("id"),
        thread_id: s("thread_id"),
        role: s("role"),
        content_hash: s("content_hash"),
        is_current,
    }
}

/// A small deterministic PRNG (splitmix64) so that random schedules are reproducible from a printed seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (hi exclusive, hi > lo).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Approximately standard normal (a scaled sum of four uniforms).
    pub fn gauss(&mut self) -> f32 {
        let s: f64 = (0..4)
            .map(|_| (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
            .sum();
        ((s - 2.0) * 1.732) as f32
    }

    /// A unit-length vector of `dim` normal components.
    pub fn unit_vector(&mut self, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dim).map(|_| self.gauss()).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }
}

/// A fresh temp dir holding `corpus.db`.
pub fn temp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("personkit-test-")
        .tempdir()
        .expect("temp dir");
    let db = dir.path().join("corpus.db");
    (dir, db)
}

pub use standin::{
    Reply, Seen, StandIn, chat, fake_vector, llm_model_path, model_dir, non_loopback_ip,
};

/// The workspace's root folder (where `Cargo.toml`, `.venv` and `target/` are).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Reads a fixture file under `dir` (relative to the workspace root), with the path in the panic message.
pub fn fixture(dir: &str, name: &str) -> String {
    let p = workspace_root().join(dir).join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("fixture {}: {e}", p.display()))
}

/// This process's peak resident memory (`VmHWM`), in KiB (0 where `/proc` does not tell).
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// Resets the peak [`peak_rss_kib`] reports to the current resident memory, so one phase can be measured alone.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}
