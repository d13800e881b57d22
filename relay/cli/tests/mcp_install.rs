//! `personkit mcp install|uninstall <client>` against a fixture config file of each client, running the real
//! binary with HOME pointed at a temp folder.
//!
//! The fixtures (`tests/fixtures/mcp_install/`) follow each client's documented format, with other servers and
//! unrelated settings in them: Claude Desktop's `claude_desktop_config.json` (`mcpServers` of command/args/env,
//! plus app settings); Claude Code's `~/.claude.json` (user-scope `mcpServers` with a `type`, per-project
//! `projects.<path>.mcpServers` — one of which is a foreign `personkit` — and app state); Cursor's
//! `~/.cursor/mcp.json` (`mcpServers`, `url` or `command`); VS Code's user `mcp.json` (top-level `servers` with
//! `type: "stdio" | "http"`, and `inputs`; tab-indented); Codex's `~/.codex/config.toml` (`[mcp_servers.<name>]`
//! tables with a nested `env` table, and profiles); Gemini CLI's `~/.gemini/settings.json` (`mcpServers` with
//! `httpUrl`, plus `mcp` and `general` settings).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use personkit_testkit::{Relay, bin, temp_db};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};

/// (client, fixture, key holding the servers, a foreign server in the fixture)
const CLIENTS: &[(&str, &str, &str, &str)] = &[
    (
        "claude-desktop",
        "claude-desktop.json",
        "mcpServers",
        "filesystem",
    ),
    ("claude-code", "claude-code.json", "mcpServers", "sqlite"),
    ("cursor", "cursor.json", "mcpServers", "postgres"),
    ("vscode", "vscode.json", "servers", "playwright"),
    ("codex", "codex.toml", "mcp_servers", "context7"),
    ("gemini", "gemini.json", "mcpServers", "git"),
];

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/mcp_install")
            .join(name),
    )
    .unwrap()
}

fn run(home: &Path, args: &[&str], db: Option<&Path>) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env("HOME", home)
        .env_remove("PERSONKIT_DB")
        .env_remove("CODEX_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .stdin(std::process::Stdio::null());
    if let Some(db) = db {
        cmd.env("PERSONKIT_DB", db);
    }
    cmd.output().unwrap()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn refused(o: &Output, says: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "should have been refused: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(err.contains(says), "stderr should say {says:?}: {err}");
}

/// The file as a JSON value (a TOML file converted).
fn parse(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    if path.extension().is_some_and(|e| e == "toml") {
        serde_json::to_value(text.parse::<toml::Table>().unwrap()).unwrap()
    } else {
        serde_json::from_str(&text).unwrap()
    }
}

fn backups(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".personkit-backup-"))
        .collect();
    v.sort();
    v
}

fn without(mut doc: Value, key: &str, name: &str) -> Value {
    doc[key].as_object_mut().unwrap().remove(name);
    doc
}

fn real_bin() -> String {
    std::fs::canonicalize(bin())
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[test]
fn install_writes_each_clients_entry_keeps_the_rest_and_backs_up() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("elsewhere").join("corpus.db");
    let db_s = db.to_str().unwrap();
    for &(client, fx, key, foreign) in CLIENTS {
        let dir = tmp.path().join(client);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(fx);
        let original = fixture(fx);
        std::fs::write(&path, &original).unwrap();
        let p = path.to_str().unwrap();

        // --print writes nothing and makes no backup.
        let out = ok(&run(
            tmp.path(),
            &[
                "mcp", "install", client, "--config", p, "--db", db_s, "--print",
            ],
            None,
        ));
        assert!(
            out.contains("personkit") && out.contains("mcp"),
            "{client}: {out}"
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            original,
            "{client}: --print wrote"
        );
        assert!(backups(&dir).is_empty(), "{client}: --print backed up");

        let out = ok(&run(
            tmp.path(),
            &["mcp", "install", client, "--config", p, "--db", db_s],
            None,
        ));
        assert!(out.contains("Add this line to your"), "{client}: {out}");
        let doc = parse(&path);
        let ours = &doc[key]["personkit"];
        assert_eq!(ours["command"], json!(real_bin()), "{client}: {doc}");
        assert_eq!(ours["args"], json!(["mcp", "--db", db_s]), "{client}");
        match client {
            "claude-code" | "vscode" => assert_eq!(ours["type"], "stdio", "{client}"),
            _ => assert!(ours.get("type").is_none(), "{client}: {ours}"),
        }
        // Every other key and server is as it was.
        let before = if fx.ends_with(".toml") {
            serde_json::to_value(original.parse::<toml::Table>().unwrap()).unwrap()
        } else {
            serde_json::from_str::<Value>(&original).unwrap()
        };
        assert_eq!(
            without(doc.clone(), key, "personkit"),
            before,
            "{client}: the rest changed"
        );
        // The original text is all still there, in order: nothing was reformatted.
        let now = std::fs::read_to_string(&path).unwrap();
        let mut rest = now.as_str();
        for line in original.lines() {
            let at = rest
                .find(line)
                .unwrap_or_else(|| panic!("{client}: lost {line:?} in:\n{now}"));
            rest = &rest[at + line.len()..];
        }
        let b = backups(&dir);
        assert_eq!(b.len(), 1, "{client}: {b:?}");
        assert_eq!(
            std::fs::read_to_string(&b[0]).unwrap(),
            original,
            "{client}: backup"
        );

        // Twice is once: nothing changes, no second backup.
        let out = ok(&run(
            tmp.path(),
            &["mcp", "install", client, "--config", p, "--db", db_s],
            None,
        ));
        assert!(out.contains("nothing changed"), "{client}: {out}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            now,
            "{client}: second install changed the file"
        );
        assert_eq!(backups(&dir).len(), 1, "{client}");

        // A server of that name that personkit did not write is refused, then replaced with --force.
        let o = run(
            tmp.path(),
            &["mcp", "install", client, "--config", p, "--name", foreign],
            None,
        );
        refused(&o, "did not write");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            now,
            "{client}: a refusal wrote"
        );
        let o = run(
            tmp.path(),
            &["mcp", "uninstall", client, "--config", p, "--name", foreign],
            None,
        );
        refused(&o, "not written by personkit");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            now,
            "{client}: a refusal wrote"
        );

        // Uninstall takes exactly our entry out: the file is the fixture again, byte for byte.
        ok(&run(
            tmp.path(),
            &["mcp", "uninstall", client, "--config", p],
            None,
        ));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            original,
            "{client}: uninstall"
        );
        assert_eq!(backups(&dir).len(), 2, "{client}");

        let o = run(
            tmp.path(),
            &[
                "mcp", "install", client, "--config", p, "--name", foreign, "--force",
            ],
            None,
        );
        ok(&o);
        assert_eq!(
            parse(&path)[key][foreign]["command"],
            json!(real_bin()),
            "{client}: --force"
        );
    }
}

#[test]
fn a_malformed_file_is_refused_and_left_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    for &(client, fx, _, _) in CLIENTS {
        let path = tmp.path().join(format!("{client}-{fx}"));
        let original = fixture(fx);
        // Cut mid-way: an unclosed object / an unterminated table.
        let broken = format!("{}[oops", &original[..original.len() / 2]);
        std::fs::write(&path, &broken).unwrap();
        let o = run(
            tmp.path(),
            &["mcp", "install", client, "--config", path.to_str().unwrap()],
            None,
        );
        refused(&o, "is not valid");
        refused(&o, "changed nothing");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), broken, "{client}");
        assert!(backups(tmp.path()).is_empty(), "{client}");
    }
    // A JSON file whose servers key is not an object is refused too.
    let path = tmp.path().join("odd.json");
    std::fs::write(&path, "{\"mcpServers\": [1]}").unwrap();
    let o = run(
        tmp.path(),
        &[
            "mcp",
            "install",
            "cursor",
            "--config",
            path.to_str().unwrap(),
        ],
        None,
    );
    refused(&o, "not an object of servers");
}

#[test]
fn missing_files_are_created_where_each_client_looks() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let expect = [
        ("claude-code", h.join(".claude.json"), "mcpServers"),
        ("cursor", h.join(".cursor/mcp.json"), "mcpServers"),
        ("codex", h.join(".codex/config.toml"), "mcp_servers"),
        ("gemini", h.join(".gemini/settings.json"), "mcpServers"),
    ];
    for (client, path, key) in &expect {
        let out = ok(&run(h, &["mcp", "install", client], None));
        assert!(out.contains("created it"), "{client}: {out}");
        let doc = parse(path);
        // No --db given: the default corpus, so no --db in the args.
        assert_eq!(
            doc[key]["personkit"]["args"],
            json!(["mcp"]),
            "{client}: {doc}"
        );
        assert_eq!(doc.as_object().unwrap().len(), 1, "{client}: {doc}");
    }
    if cfg!(target_os = "linux") {
        ok(&run(h, &["mcp", "install", "vscode"], None));
        assert_eq!(
            parse(&h.join(".config/Code/User/mcp.json"))["servers"]["personkit"]["type"],
            "stdio"
        );
        ok(&run(h, &["mcp", "install", "claude-desktop"], None));
        assert!(
            parse(&h.join(".config/Claude/claude_desktop_config.json"))["mcpServers"]["personkit"]
                .is_object()
        );
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The tool names a line mentions in backticks.
fn tools_named(line: &str) -> Vec<String> {
    line.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_written_stdio_command_starts_a_server_that_answers() {
    let (dir, db) = temp_db();
    // A relay creates the corpus; the stdio server then reads it on its own.
    drop(Relay::start(&db, &[]));
    let cfg = dir.path().join("mcp.json");
    let out = run(
        dir.path(),
        &[
            "mcp",
            "install",
            "cursor",
            "--config",
            cfg.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
            "--json",
        ],
        None,
    );
    let report: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(report["written"], true);
    let entry = &parse(&cfg)["mcpServers"]["personkit"];
    let command = entry["command"].as_str().unwrap().to_owned();
    let args: Vec<String> = serde_json::from_value(entry["args"].clone()).unwrap();
    let names: Vec<String> = rt().block_on(async {
        let mut cmd = tokio::process::Command::new(&command);
        cmd.args(&args)
            .env("HOME", dir.path())
            .env_remove("PERSONKIT_DB");
        let transport = TokioChildProcess::new(cmd).expect("spawn the written command");
        let client =
            ().serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
                .await
                .unwrap();
        let tools = client.list_all_tools().await.unwrap();
        client.cancel().await.unwrap();
        tools.into_iter().map(|t| t.name.to_string()).collect()
    });
    assert!(names.contains(&"search".to_owned()), "{names:?}");
    // The line for CLAUDE.md / AGENTS.md names only tools the server has.
    let line = report["agent_line"].as_str().unwrap();
    let named = tools_named(line);
    assert!(!named.is_empty(), "{line}");
    for t in &named {
        assert!(
            names.contains(t),
            "the agent line names {t:?}, which the server does not have: {names:?}"
        );
    }
}

#[test]
fn http_writes_the_relays_address_and_an_agent_token_that_works() {
    let (dir, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let cfg = dir.path().join("claude.json");
    let c = cfg.to_str().unwrap();
    // --print makes no token.
    ok(&run(
        dir.path(),
        &[
            "mcp",
            "install",
            "claude-code",
            "--http",
            "--config",
            c,
            "--print",
        ],
        Some(&db),
    ));
    assert!(!cfg.exists());
    let agents = |relay: &Relay| -> usize {
        relay
            .cli_json(&["agents", "list", "--json"])
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(agents(&relay), 0);

    let out = ok(&run(
        dir.path(),
        &["mcp", "install", "claude-code", "--http", "--config", c],
        Some(&db),
    ));
    assert!(out.contains("token sits in"), "{out}");
    let entry = parse(&cfg)["mcpServers"]["personkit"].clone();
    assert_eq!(entry["type"], "http");
    assert_eq!(entry["url"], json!(format!("{}/mcp", relay.base)));
    let auth = entry["headers"]["Authorization"].as_str().unwrap();
    let token = auth.strip_prefix("Bearer ").unwrap().to_owned();
    assert!(token.starts_with("pka_"), "{auth}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&cfg).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode, 0o600,
            "a new file holding a token is the owner's only"
        );
    }
    let list = relay.cli_json(&["agents", "list", "--json"]);
    assert_eq!(list[0]["name"], "claude-code", "{list}");

    // The token in the file opens the relay's /mcp.
    let names: Vec<String> = rt().block_on(async {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", relay.base))
                .auth_header(token.clone()),
        );
        let client =
            ().serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
                .await
                .unwrap();
        let tools = client.list_all_tools().await.unwrap();
        client.cancel().await.unwrap();
        tools.into_iter().map(|t| t.name.to_string()).collect()
    });
    assert!(names.contains(&"search".to_owned()), "{names:?}");

    // Again: the working token is kept, no second agent.
    let out = ok(&run(
        dir.path(),
        &["mcp", "install", "claude-code", "--http", "--config", c],
        Some(&db),
    ));
    assert!(out.contains("nothing changed"), "{out}");
    assert_eq!(agents(&relay), 1);

    // Without a relay to ask and no --url, it says what to do and makes no token.
    let other = dir.path().join("other.json");
    let (_d2, db2) = temp_db();
    drop(Relay::start(&db2, &[]));
    let o = run(
        dir.path(),
        &[
            "mcp",
            "install",
            "cursor",
            "--http",
            "--config",
            other.to_str().unwrap(),
        ],
        Some(&db2),
    );
    refused(&o, "--url");
    assert!(!other.exists());
}

#[test]
fn http_entries_take_each_clients_form() {
    let tmp = tempfile::tempdir().unwrap();
    let url = "https://relay.example/mcp";
    for &(client, fx, _, _) in CLIENTS {
        let path = tmp.path().join(fx);
        let o = run(
            tmp.path(),
            &[
                "mcp",
                "install",
                client,
                "--http",
                "--url",
                url,
                "--print",
                "--json",
                "--config",
                path.to_str().unwrap(),
            ],
            None,
        );
        let v: Value = serde_json::from_str(&ok(&o)).unwrap();
        assert_eq!(v["written"], false, "{client}");
        assert!(!path.exists(), "{client}: --print created the file");
        let e = &v["entry"];
        let bearer = |h: &Value| {
            h["Authorization"]
                .as_str()
                .unwrap()
                .starts_with("Bearer pka_")
        };
        match client {
            "claude-code" | "vscode" => {
                assert_eq!(e["type"], "http", "{client}");
                assert_eq!(e["url"], url, "{client}");
                assert!(bearer(&e["headers"]), "{client}: {e}");
            }
            "cursor" => assert!(e["url"] == url && bearer(&e["headers"]), "{e}"),
            "gemini" => assert!(e["httpUrl"] == url && bearer(&e["headers"]), "{e}"),
            "codex" => assert!(e["url"] == url && bearer(&e["http_headers"]), "{e}"),
            "claude-desktop" => {
                assert_eq!(e["command"], "npx");
                assert!(e["args"].as_array().unwrap().contains(&json!(url)), "{e}");
                assert!(
                    e["env"]["PERSONKIT_AUTH"]
                        .as_str()
                        .unwrap()
                        .starts_with("Bearer pka_"),
                    "{e}"
                );
            }
            _ => unreachable!(),
        }
    }
}

#[cfg(unix)]
#[test]
fn a_symlinked_file_stays_a_link_and_keeps_its_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("dotfiles-mcp.json");
    std::fs::write(&real, fixture("cursor.json")).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).unwrap();
    let link = tmp.path().join("mcp.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    ok(&run(
        tmp.path(),
        &[
            "mcp",
            "install",
            "cursor",
            "--config",
            link.to_str().unwrap(),
        ],
        None,
    ));
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        parse(&real)["mcpServers"]["personkit"]["args"],
        json!(["mcp"])
    );
    assert_eq!(
        std::fs::metadata(&real).unwrap().permissions().mode() & 0o777,
        0o640
    );
}
