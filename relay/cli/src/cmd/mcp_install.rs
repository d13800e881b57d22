//! `personkit mcp install|uninstall <client>`: writes (or removes) the registration of the personkit MCP server in
//! an MCP client's own config file — Claude Desktop, Claude Code (user scope), Cursor, VS Code (user `mcp.json`,
//! its `servers` key), Codex (`config.toml`) and Gemini CLI.
//!
//! The edit is careful with a file the user owns: it is parsed first (a malformed file is an error and nothing is
//! touched); only our one entry changes — the rest of the text is kept byte for byte, by splicing the entry into
//! the original text rather than re-serialising it, and the result is parsed again and compared with the original
//! plus our entry before anything is written; the original is copied beside it (`<file>.personkit-backup-<UTC
//! time>`); the new text goes to a temp file in the same folder that is renamed over the old one, with the old
//! file's permissions. An entry of the same name that personkit did not write (its command is not a `personkit`
//! binary and it carries no personkit agent token) is left alone unless `--force`.

use std::fs;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use clap::{Args, ValueEnum};
use personkit_store::auth;
use personkit_store::clock::Clock;
use serde_json::{Map, Value, json};

use crate::args::DbArg;
use crate::output::print_json;

/// Config files larger than this are refused rather than read (Claude Code's `~/.claude.json` is the largest one
/// in practice, a few MB).
const MAX_CONFIG_BYTES: u64 = 64 * 1024 * 1024;

/// Stands for the agent token in `--print --http` output: printing must not create one.
const TOKEN_PLACEHOLDER: &str = "pka_<made when you run this without --print>";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Client {
    ClaudeDesktop,
    ClaudeCode,
    Cursor,
    Vscode,
    Codex,
    Gemini,
}

impl Client {
    fn label(self) -> &'static str {
        match self {
            Client::ClaudeDesktop => "Claude Desktop",
            Client::ClaudeCode => "Claude Code",
            Client::Cursor => "Cursor",
            Client::Vscode => "VS Code",
            Client::Codex => "Codex",
            Client::Gemini => "Gemini CLI",
        }
    }

    /// The name of the agent token `--http` makes (as `personkit agents add NAME` would).
    fn slug(self) -> &'static str {
        match self {
            Client::ClaudeDesktop => "claude-desktop",
            Client::ClaudeCode => "claude-code",
            Client::Cursor => "cursor",
            Client::Vscode => "vscode",
            Client::Codex => "codex",
            Client::Gemini => "gemini",
        }
    }

    /// The key holding the servers: VS Code's `mcp.json` says `servers`, Codex `[mcp_servers.NAME]`, the rest
    /// `mcpServers`.
    fn servers_key(self) -> &'static str {
        match self {
            Client::Vscode => "servers",
            Client::Codex => "mcp_servers",
            _ => "mcpServers",
        }
    }

    /// The instructions file the client's agent reads.
    fn instructions_file(self) -> &'static str {
        match self {
            Client::ClaudeDesktop | Client::ClaudeCode => "CLAUDE.md",
            Client::Gemini => "GEMINI.md",
            Client::Codex | Client::Cursor | Client::Vscode => "AGENTS.md",
        }
    }

    /// Where the client keeps its user-wide MCP servers.
    fn default_path(self) -> anyhow::Result<PathBuf> {
        let home = home_dir()?;
        Ok(match self {
            Client::ClaudeDesktop => config_dir(&home)
                .join("Claude")
                .join("claude_desktop_config.json"),
            Client::ClaudeCode => home.join(".claude.json"),
            Client::Cursor => home.join(".cursor").join("mcp.json"),
            Client::Vscode => config_dir(&home).join("Code").join("User").join("mcp.json"),
            Client::Codex => std::env::var_os("CODEX_HOME")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join(".codex"))
                .join("config.toml"),
            Client::Gemini => home.join(".gemini").join("settings.json"),
        })
    }
}

fn home_dir() -> anyhow::Result<PathBuf> {
    let var = if cfg!(windows) { "USERPROFILE" } else { "HOME" };
    std::env::var_os(var)
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| {
            anyhow!(
                "{var} is not set, so the client's config file cannot be found; pass --config PATH"
            )
        })
}

/// The per-user application config folder: `~/Library/Application Support` on macOS, `%APPDATA%` on Windows,
/// `$XDG_CONFIG_HOME` (default `~/.config`) elsewhere.
fn config_dir(home: &Path) -> PathBuf {
    if cfg!(target_os = "macos") {
        home.join("Library").join("Application Support")
    } else if cfg!(windows) {
        std::env::var_os("APPDATA")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join("AppData").join("Roaming"))
    } else {
        std::env::var_os("XDG_CONFIG_HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".config"))
    }
}

#[derive(Debug, Clone, Args)]
pub struct InstallArgs {
    /// The MCP client to register personkit with.
    #[arg(value_enum)]
    pub client: Client,
    /// Register the running relay's `/mcp` over HTTP with a new read-only agent token named after the client
    /// (the token is written into the client's config file), instead of `personkit mcp` over stdio.
    #[arg(long)]
    pub http: bool,
    /// With --http: the relay's MCP address [default: the /mcp of the relay serving this corpus now].
    #[arg(long, requires = "http", value_name = "URL")]
    pub url: Option<String>,
    /// Print what would be written, and write nothing (and make no token).
    #[arg(long)]
    pub print: bool,
    /// The client's config file [default: where the client keeps it for this user].
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The server's name in the client.
    #[arg(long, default_value = "personkit")]
    pub name: String,
    /// Replace an entry of that name that personkit did not write.
    #[arg(long)]
    pub force: bool,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub db: DbArg,
}

#[derive(Debug, Clone, Args)]
pub struct UninstallArgs {
    /// The MCP client to remove personkit from.
    #[arg(value_enum)]
    pub client: Client,
    /// Print what would be removed, and write nothing.
    #[arg(long)]
    pub print: bool,
    /// The client's config file [default: where the client keeps it for this user].
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The server's name in the client.
    #[arg(long, default_value = "personkit")]
    pub name: String,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// The line for CLAUDE.md / AGENTS.md / GEMINI.md. It names only tools the personkit MCP server has (the
/// install test checks them against `tools/list`).
pub fn agent_line(server: &str) -> String {
    format!(
        "At the start of a session call the {server} MCP tool `get_context` (who I am, what I did this week, what I \
         decided); when my past work matters, `search` for earlier conversations, decisions and what was tried \
         before (`get_thread` reads one in full), and `get_knowledge` for the positions I have approved, before you \
         assume what I prefer."
    )
}

enum Transport {
    Stdio { command: String, args: Vec<String> },
    Http { url: String, token: String },
}

/// The entry as the client reads it.
fn entry(client: Client, t: &Transport) -> Value {
    match t {
        Transport::Stdio { command, args } => match client {
            Client::ClaudeCode | Client::Vscode => {
                json!({"type": "stdio", "command": command, "args": args})
            }
            _ => json!({"command": command, "args": args}),
        },
        Transport::Http { url, token } => {
            let bearer = format!("Bearer {token}");
            match client {
                // Claude Desktop's file takes commands only: the `mcp-remote` bridge carries HTTP, the header
                // coming from the env so that the space in it survives argument handling.
                Client::ClaudeDesktop => json!({
                    "command": "npx",
                    "args": ["-y", "mcp-remote", url, "--header", "Authorization:${PERSONKIT_AUTH}"],
                    "env": {"PERSONKIT_AUTH": bearer},
                }),
                Client::ClaudeCode | Client::Vscode => {
                    json!({"type": "http", "url": url, "headers": {"Authorization": bearer}})
                }
                Client::Cursor => json!({"url": url, "headers": {"Authorization": bearer}}),
                // Gemini CLI: `httpUrl` is Streamable HTTP (`url` would be SSE).
                Client::Gemini => json!({"httpUrl": url, "headers": {"Authorization": bearer}}),
                Client::Codex => json!({"url": url, "http_headers": {"Authorization": bearer}}),
            }
        }
    }
}

/// Whether personkit wrote this entry: its command is a `personkit` binary, or it carries a personkit agent
/// token.
fn is_ours(entry: &Value) -> bool {
    let command_is_personkit = entry
        .get("command")
        .and_then(Value::as_str)
        .and_then(|c| {
            Path::new(c)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
        })
        .is_some_and(|stem| stem == "personkit");
    command_is_personkit || agent_token_in(entry).is_some()
}

/// The personkit agent token an entry carries, if any (in a header or an env value).
fn agent_token_in(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => {
            let at = s.find(auth::AGENT_TOKEN_PREFIX)?;
            let rest = &s[at..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                .unwrap_or(rest.len());
            s[..at]
                .trim_end()
                .ends_with("Bearer")
                .then(|| rest[..end].to_owned())
        }
        Value::Array(a) => a.iter().find_map(agent_token_in),
        Value::Object(o) => o.values().find_map(agent_token_in),
        _ => None,
    }
}

/// A config file as read: its text (empty when missing), its format, and where it really is.
struct ConfigFile {
    /// The path the user sees.
    path: PathBuf,
    /// Where the bytes are: `path` with symlinks resolved (a dotfile manager's link stays a link).
    target: PathBuf,
    existed: bool,
    text: String,
    format: Format,
}

#[derive(Clone, Copy, PartialEq)]
enum Format {
    Json,
    Toml,
}

impl ConfigFile {
    fn read(client: Client, path: PathBuf) -> anyhow::Result<ConfigFile> {
        let format = if client == Client::Codex {
            Format::Toml
        } else {
            Format::Json
        };
        let (target, existed, text) = match fs::metadata(&path) {
            Ok(meta) => {
                if meta.is_dir() {
                    bail!("{} is a folder, not a config file", path.display());
                }
                if meta.len() > MAX_CONFIG_BYTES {
                    bail!(
                        "{} is {} bytes, larger than any MCP client's config ({} at most); personkit changed nothing",
                        path.display(),
                        meta.len(),
                        MAX_CONFIG_BYTES
                    );
                }
                let target = fs::canonicalize(&path)
                    .with_context(|| format!("cannot resolve {}", path.display()))?;
                let bytes =
                    fs::read(&target).with_context(|| format!("cannot read {}", path.display()))?;
                let text = String::from_utf8(bytes).map_err(|_| {
                    anyhow!(
                        "{} is not UTF-8 text; personkit changed nothing. Fix or move the file and run again",
                        path.display()
                    )
                })?;
                (target, true, text)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                (path.clone(), false, String::new())
            }
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        Ok(ConfigFile {
            path,
            target,
            existed,
            text,
            format,
        })
    }

    fn malformed(&self, what: &str, e: impl std::fmt::Display) -> anyhow::Error {
        anyhow!(
            "{} is not valid {what}: {e}\npersonkit changed nothing. Fix the file (or move it away) and run again{}",
            self.path.display(),
            if self.format == Format::Json && (self.text.contains("//") || self.text.contains("/*"))
            {
                "; if it holds comments (JSONC), personkit does not rewrite it: add the entry by hand, as \
                 `--print` shows it"
            } else {
                ""
            }
        )
    }

    /// The whole document as a JSON value (a TOML document converted), `{}` for a missing or blank file.
    fn parse(&self) -> anyhow::Result<Value> {
        if self.text.trim().is_empty() {
            return Ok(Value::Object(Map::new()));
        }
        match self.format {
            Format::Json => {
                let v: Value =
                    serde_json::from_str(&self.text).map_err(|e| self.malformed("JSON", e))?;
                if !v.is_object() {
                    return Err(self.malformed("config JSON", "the top level is not an object"));
                }
                Ok(v)
            }
            Format::Toml => {
                let t: toml::Table = self.text.parse().map_err(|e| self.malformed("TOML", e))?;
                serde_json::to_value(t).map_err(|e| self.malformed("TOML", e))
            }
        }
    }
}

/// The servers object of a parsed document, when there is one.
fn servers<'a>(
    doc: &'a Value,
    client: Client,
    file: &ConfigFile,
) -> anyhow::Result<Option<&'a Map<String, Value>>> {
    match doc.get(client.servers_key()) {
        None => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(_) => Err(file.malformed(
            "config",
            format_args!("`{}` is not an object of servers", client.servers_key()),
        )),
    }
}

/// The client's config file (`config`, else its default place), parsed, and the entry named `name` in it.
fn open_config(
    client: Client,
    config: Option<&Path>,
    name: &str,
) -> anyhow::Result<(ConfigFile, Value, Option<Value>)> {
    check_name(name)?;
    let path = match config {
        Some(p) => p.to_path_buf(),
        None => client.default_path()?,
    };
    let file = ConfigFile::read(client, path)?;
    let doc = file.parse()?;
    let existing = servers(&doc, client, &file)?
        .and_then(|s| s.get(name))
        .cloned();
    Ok((file, doc, existing))
}

pub fn install(a: InstallArgs) -> anyhow::Result<()> {
    let (file, doc, existing) = open_config(a.client, a.config.as_deref(), &a.name)?;
    if let Some(old) = &existing
        && !is_ours(old)
        && !a.force
    {
        bail!(
            "{} already has an MCP server named {:?} that personkit did not write ({}); personkit changed nothing. \
             Pick another name with --name, or replace it with --force",
            file.path.display(),
            a.name,
            describe(old)
        );
    }

    let db_path = a.db.path();
    let mut made_token: Option<(String, String)> = None; // (agent id, token)
    let transport = if a.http {
        let url = match &a.url {
            Some(u) => u.clone(),
            None => crate::cmd::open::running_relay(&db_path)
                .map(|base| format!("{}/mcp", base.trim_end_matches('/')))
                .ok_or_else(|| {
                    anyhow!(
                        "no relay is serving the corpus at {} now, so its MCP address is unknown: start \
                         `personkit serve`, or pass --url https://HOST/mcp",
                        db_path.display()
                    )
                })?,
        };
        // An entry we wrote before with a token that still works is kept as it is: no second token.
        let reuse = existing
            .as_ref()
            .filter(|old| is_ours(old))
            .and_then(agent_token_in)
            .filter(|tok| !a.print && token_is_active(&a.db, tok));
        let token = match reuse {
            Some(tok) => tok,
            None if a.print => TOKEN_PLACEHOLDER.to_owned(),
            None => {
                // Check the edit with a stand-in token first, so that a file we cannot edit costs no token.
                let trial = entry(
                    a.client,
                    &Transport::Http {
                        url: url.clone(),
                        token: TOKEN_PLACEHOLDER.to_owned(),
                    },
                );
                upsert(&file, &doc, a.client, &a.name, &trial)?;
                let conn = a.db.open_existing()?;
                let (agent, token) =
                    auth::create_agent(&conn, a.client.slug(), Clock::system().now())?;
                made_token = Some((agent.id, token.expose().to_owned()));
                token.expose().to_owned()
            }
        };
        Transport::Http { url, token }
    } else {
        let exe = std::env::current_exe()
            .context("cannot find the path of the running personkit binary")?;
        let exe = fs::canonicalize(&exe).unwrap_or(exe);
        let mut args = vec!["mcp".to_owned()];
        if let Some(db) = &a.db.db
            && *db != personkit_server::config::default_db_path()
        {
            let abs = std::path::absolute(db).unwrap_or_else(|_| db.clone());
            args.push("--db".to_owned());
            args.push(abs.to_string_lossy().into_owned());
        }
        Transport::Stdio {
            command: exe.to_string_lossy().into_owned(),
            args,
        }
    };
    let new_entry = entry(a.client, &transport);
    let unchanged = existing.as_ref() == Some(&new_entry);
    let new_text = if unchanged {
        file.text.clone()
    } else {
        upsert(&file, &doc, a.client, &a.name, &new_entry)?
    };
    let snippet = snippet(a.client, &a.name, &new_entry)?;
    let line = agent_line(&a.name);
    let transport_name = if a.http { "http" } else { "stdio" };

    let mut backup = None;
    if !a.print && !unchanged {
        let written = (|| -> anyhow::Result<Option<PathBuf>> {
            let b = back_up(&file)?;
            write_atomic(&file, &new_text, a.http)?;
            Ok(b)
        })();
        match written {
            Ok(b) => backup = b,
            Err(e) => {
                // The token would sit nowhere: take it back.
                if let Some((id, _)) = &made_token
                    && let Ok(conn) = a.db.open_existing()
                {
                    let _ = auth::revoke_device(&conn, id, Clock::system().now());
                }
                return Err(e);
            }
        }
    }

    if a.json {
        return print_json(&json!({
            "client": a.client.slug(),
            "path": file.path,
            "name": a.name,
            "transport": transport_name,
            "entry": new_entry,
            "written": !a.print && !unchanged,
            "unchanged": unchanged,
            "backup": backup,
            "token_in_file": a.http && !a.print,
            "agent_line": line,
            "instructions_file": a.client.instructions_file(),
        }));
    }
    if a.print {
        println!(
            "Would write to {} ({}, {transport_name}){}:\n\n{snippet}",
            file.path.display(),
            a.client.label(),
            if unchanged {
                " — it is already there, nothing would change"
            } else {
                ""
            }
        );
        if a.http {
            println!(
                "(run without --print to make the agent token; it is then written into that file)"
            );
        }
        return Ok(());
    }
    if unchanged {
        println!(
            "{} already has personkit as {:?} in {}; nothing changed.",
            a.client.label(),
            a.name,
            file.path.display()
        );
    } else {
        println!(
            "Registered personkit as {:?} in {} ({}), over {transport_name}:\n\n{snippet}",
            a.name,
            a.client.label(),
            file.path.display()
        );
        match &backup {
            Some(b) => println!("The previous file is saved as {}.", b.display()),
            None => println!("The file did not exist; personkit created it."),
        }
        println!(
            "Restart {} (or reload its MCP servers) to pick it up.",
            a.client.label()
        );
    }
    if a.http {
        println!(
            "\nThe agent token sits in {} in plain text: anyone who can read that file can search your corpus. \
             Revoke it with `personkit agents revoke {}`.",
            file.path.display(),
            a.client.slug()
        );
    }
    println!(
        "\nAdd this line to your {} so the agent knows when to call personkit:\n\n{line}",
        a.client.instructions_file()
    );
    Ok(())
}

pub fn uninstall(a: UninstallArgs) -> anyhow::Result<()> {
    let (file, doc, existing) = open_config(a.client, a.config.as_deref(), &a.name)?;
    let Some(old) = existing else {
        if a.json {
            return print_json(
                &json!({"client": a.client.slug(), "path": file.path, "name": a.name, "removed": false}),
            );
        }
        println!(
            "{} has no MCP server named {:?}; nothing changed.",
            file.path.display(),
            a.name
        );
        return Ok(());
    };
    if !is_ours(&old) {
        bail!(
            "the MCP server {:?} in {} was not written by personkit ({}); personkit leaves it alone. Remove it by hand",
            a.name,
            file.path.display(),
            describe(&old)
        );
    }
    let new_text = remove(&file, &doc, a.client, &a.name)?;
    let mut backup = None;
    if !a.print {
        backup = back_up(&file)?;
        write_atomic(&file, &new_text, false)?;
    }
    let token = agent_token_in(&old);
    if a.json {
        return print_json(&json!({
            "client": a.client.slug(), "path": file.path, "name": a.name, "removed": !a.print,
            "entry": old, "backup": backup,
        }));
    }
    if a.print {
        println!(
            "Would remove {:?} from {}:\n\n{}",
            a.name,
            file.path.display(),
            snippet(a.client, &a.name, &old)?
        );
        return Ok(());
    }
    println!("Removed {:?} from {}.", a.name, file.path.display());
    if let Some(b) = backup {
        println!("The previous file is saved as {}.", b.display());
    }
    if token.is_some() {
        println!(
            "Its agent token still works until you revoke it: `personkit agents revoke {}`.",
            a.client.slug()
        );
    }
    Ok(())
}

fn check_name(name: &str) -> anyhow::Result<()> {
    if name.is_empty() || name.len() > 64 || name.chars().any(|c| c.is_control()) {
        bail!("--name must be 1 to 64 characters without control characters");
    }
    Ok(())
}

fn token_is_active(db: &DbArg, token: &str) -> bool {
    db.open_read_only()
        .ok()
        .and_then(|conn| auth::authenticate(&conn, token).ok().flatten())
        .is_some_and(|d| d.kind == auth::Kind::Agent)
}

/// A short description of an entry that names no secret.
fn describe(entry: &Value) -> String {
    if let Some(c) = entry.get("command").and_then(Value::as_str) {
        format!("command {c:?}")
    } else if let Some(u) = ["url", "httpUrl", "serverUrl"]
        .iter()
        .find_map(|k| entry.get(*k).and_then(Value::as_str))
    {
        format!("url {u:?}")
    } else {
        "no command or url".to_owned()
    }
}

/// The entry as it appears in the file, for the user to read (the token included: it is what gets written).
fn snippet(client: Client, name: &str, entry: &Value) -> anyhow::Result<String> {
    let mut servers = Map::new();
    servers.insert(name.to_owned(), entry.clone());
    let mut doc = Map::new();
    doc.insert(client.servers_key().to_owned(), Value::Object(servers));
    Ok(match client {
        Client::Codex => toml::to_string(&doc).context("cannot render the TOML entry")?,
        _ => serde_json::to_string_pretty(&doc)?,
    })
}

/// The file's text with our entry set, checked: it parses to the original document plus exactly our entry.
fn upsert(
    file: &ConfigFile,
    doc: &Value,
    client: Client,
    name: &str,
    entry: &Value,
) -> anyhow::Result<String> {
    let new_text = match file.format {
        Format::Json => json_upsert(&file.text, client.servers_key(), name, entry),
        Format::Toml => toml_upsert(&file.text, doc, name, entry)?,
    };
    let mut expected = doc.clone();
    if let Some(obj) = expected.as_object_mut() {
        let servers = obj
            .entry(client.servers_key().to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(s) = servers.as_object_mut() {
            s.insert(name.to_owned(), entry.clone());
        }
    }
    verify(file, &new_text, &expected)?;
    Ok(new_text)
}

/// The file's text without our entry, checked likewise.
fn remove(file: &ConfigFile, doc: &Value, client: Client, name: &str) -> anyhow::Result<String> {
    let new_text = match file.format {
        Format::Json => json_remove(&file.text, client.servers_key(), name),
        Format::Toml => toml_remove(&file.text, name),
    };
    let mut expected = doc.clone();
    if let Some(s) = expected
        .get_mut(client.servers_key())
        .and_then(Value::as_object_mut)
    {
        s.remove(name);
    }
    verify(file, &new_text, &expected)?;
    Ok(new_text)
}

fn verify(file: &ConfigFile, new_text: &str, expected: &Value) -> anyhow::Result<()> {
    let reparsed = ConfigFile {
        path: file.path.clone(),
        target: file.target.clone(),
        existed: true,
        text: new_text.to_owned(),
        format: file.format,
    }
    .parse()
    .ok();
    let mut expected = expected.clone();
    // A TOML `[mcp_servers.x]` table removed whole takes an otherwise empty `mcp_servers` with it.
    if let (Some(got), Some(obj)) = (&reparsed, expected.as_object_mut())
        && got.get("mcp_servers").is_none()
        && obj
            .get("mcp_servers")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
        && file.format == Format::Toml
    {
        obj.remove("mcp_servers");
    }
    if reparsed.as_ref() != Some(&expected) {
        bail!(
            "personkit could not edit {} safely (its layout is one this command does not handle); it changed \
             nothing. Add the entry by hand, as `--print` shows it",
            file.path.display()
        );
    }
    Ok(())
}

// ---- JSON: splice into the original text ----

struct Member {
    key: String,
    /// From the key's opening quote to the value's end.
    span: Range<usize>,
    value: Range<usize>,
}

/// The members of the object whose `{` is at `open` (in valid JSON), and the index of its `}`.
fn members(text: &str, open: usize) -> (Vec<Member>, usize) {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = skip_ws(b, open + 1);
    loop {
        if i >= b.len() || b[i] == b'}' {
            return (out, i.min(b.len().saturating_sub(1)));
        }
        if b[i] == b',' {
            i = skip_ws(b, i + 1);
            continue;
        }
        let key_start = i;
        let key_end = scan_value(b, i);
        let key = serde_json::from_str::<String>(&text[key_start..key_end]).unwrap_or_default();
        i = skip_ws(b, key_end);
        i = skip_ws(b, i + 1); // the ':'
        let v_start = i;
        let v_end = scan_value(b, i);
        out.push(Member {
            key,
            span: key_start..v_end,
            value: v_start..v_end,
        });
        i = skip_ws(b, v_end);
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\r' | b'\n') {
        i += 1;
    }
    i
}

/// The end of the value starting at `i` (valid JSON assumed).
fn scan_value(b: &[u8], i: usize) -> usize {
    match b.get(i) {
        Some(b'"') => {
            let mut j = i + 1;
            while j < b.len() {
                match b[j] {
                    b'\\' => j += 2,
                    b'"' => return j + 1,
                    _ => j += 1,
                }
            }
            b.len()
        }
        Some(b'{') | Some(b'[') => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = scan_value(b, j);
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return j + 1;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            b.len()
        }
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n')
            {
                j += 1;
            }
            j
        }
    }
}

/// The whitespace before `pos` on its line, when only whitespace precedes it there.
fn line_indent(text: &str, pos: usize) -> Option<&str> {
    let start = text[..pos].rfind('\n').map(|n| n + 1)?;
    let ind = &text[start..pos];
    ind.chars().all(|c| c == ' ' || c == '\t').then_some(ind)
}

/// The file's indentation unit and whether it is laid out on lines at all.
struct Layout {
    pretty: bool,
    unit: String,
}

fn layout(text: &str, top_open: usize) -> Layout {
    let (m, _) = members(text, top_open);
    match m.first() {
        None => Layout {
            pretty: true,
            unit: "  ".to_owned(),
        },
        Some(first) => match line_indent(text, first.span.start) {
            Some(ind) if !ind.is_empty() => Layout {
                pretty: true,
                unit: ind.to_owned(),
            },
            _ => Layout {
                pretty: false,
                unit: String::new(),
            },
        },
    }
}

fn render(v: &Value, lay: &Layout, indent: &str) -> String {
    if !lay.pretty {
        return v.to_string();
    }
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(lay.unit.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    if serde::Serialize::serialize(v, &mut ser).is_err() {
        return v.to_string();
    }
    String::from_utf8_lossy(&buf).replace('\n', &format!("\n{indent}"))
}

fn key_json(k: &str) -> String {
    Value::String(k.to_owned()).to_string()
}

/// Insert `"key": value` into the object at `open` (members `m`, closing brace at `close`).
fn insert_member(
    text: &str,
    open: usize,
    m: &[Member],
    close: usize,
    key: &str,
    v: &Value,
    lay: &Layout,
) -> String {
    let parent = line_indent(text, object_line_start(text, open))
        .unwrap_or("")
        .to_owned();
    let ind = match m.last() {
        Some(last) => line_indent(text, last.span.start)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{parent}{}", lay.unit)),
        None => format!("{parent}{}", lay.unit),
    };
    let rendered = render(v, lay, &ind);
    let mut out = String::with_capacity(text.len() + rendered.len() + 64);
    match m.last() {
        Some(last) => {
            out.push_str(&text[..last.value.end]);
            if lay.pretty {
                out.push_str(&format!(",\n{ind}{}: {rendered}", key_json(key)));
            } else {
                out.push_str(&format!(",{}:{rendered}", key_json(key)));
            }
            out.push_str(&text[last.value.end..]);
        }
        None => {
            out.push_str(&text[..open + 1]);
            if lay.pretty {
                out.push_str(&format!("\n{ind}{}: {rendered}\n{parent}", key_json(key)));
            } else {
                out.push_str(&format!("{}:{rendered}", key_json(key)));
            }
            out.push_str(&text[close..]);
        }
    }
    out
}

/// Where the line that holds an object's opening brace starts its content: the member key for a nested object,
/// the brace itself for the top level.
fn object_line_start(text: &str, open: usize) -> usize {
    let line_start = text[..open].rfind('\n').map(|n| n + 1).unwrap_or(0);
    text[line_start..open]
        .find(|c: char| c != ' ' && c != '\t')
        .map(|o| line_start + o)
        .unwrap_or(open)
}

fn top_open(text: &str) -> Option<usize> {
    text.find('{')
}

fn json_upsert(text: &str, servers_key: &str, name: &str, entry: &Value) -> String {
    let base = if text.trim().is_empty() { "{}\n" } else { text };
    let Some(open) = top_open(base) else {
        return base.to_owned();
    };
    let lay = layout(base, open);
    let (top, close) = members(base, open);
    match top.iter().find(|m| m.key == servers_key) {
        Some(s) if base.as_bytes().get(s.value.start) == Some(&b'{') => {
            let (inner, inner_close) = members(base, s.value.start);
            match inner.iter().find(|m| m.key == name) {
                Some(ours) => {
                    let ind = line_indent(base, ours.span.start).unwrap_or("").to_owned();
                    format!(
                        "{}{}{}",
                        &base[..ours.value.start],
                        render(entry, &lay, &ind),
                        &base[ours.value.end..]
                    )
                }
                None => insert_member(base, s.value.start, &inner, inner_close, name, entry, &lay),
            }
        }
        // Not an object: the caller refused it already; the check after the splice would catch it too.
        Some(_) => base.to_owned(),
        None => {
            let mut servers = Map::new();
            servers.insert(name.to_owned(), entry.clone());
            insert_member(
                base,
                open,
                &top,
                close,
                servers_key,
                &Value::Object(servers),
                &lay,
            )
        }
    }
}

fn json_remove(text: &str, servers_key: &str, name: &str) -> String {
    let Some(open) = top_open(text) else {
        return text.to_owned();
    };
    let (top, _) = members(text, open);
    let Some(s) = top.iter().find(|m| m.key == servers_key) else {
        return text.to_owned();
    };
    let (inner, close) = members(text, s.value.start);
    let Some(k) = inner.iter().position(|m| m.key == name) else {
        return text.to_owned();
    };
    let cut = if inner.len() == 1 {
        s.value.start + 1..close
    } else if k > 0 {
        inner[k - 1].value.end..inner[k].value.end
    } else {
        inner[0].span.start..inner[1].span.start
    };
    format!("{}{}", &text[..cut.start], &text[cut.end..])
}

// ---- TOML (Codex): replace or append the `[mcp_servers.NAME]` tables as text ----

/// The key path of a table header line (`[a.b]`, `[a."b c"]`), or None when the line is not one.
fn header_path(line: &str) -> Option<Vec<String>> {
    let t = line.trim();
    if !t.starts_with('[') || t.starts_with("[[") {
        return None;
    }
    let table: toml::Table = t.parse().ok()?;
    let mut path = Vec::new();
    let mut cur = &table;
    loop {
        if cur.len() != 1 {
            break;
        }
        let (k, v) = cur.iter().next()?;
        path.push(k.clone());
        match v.as_table() {
            Some(next) => cur = next,
            None => return None,
        }
    }
    (!path.is_empty()).then_some(path)
}

/// Byte ranges of the sections that belong to `[mcp_servers.NAME]` (its header through the line before the
/// next header, trailing blank and comment lines left to what follows).
fn toml_sections(text: &str, name: &str) -> Vec<Range<usize>> {
    let mut headers: Vec<(usize, bool)> = Vec::new();
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        let t = line.trim_start();
        if t.starts_with('[') {
            let ours = header_path(line)
                .is_some_and(|p| p.len() >= 2 && p[0] == "mcp_servers" && p[1] == name);
            headers.push((pos, ours));
        }
        pos += line.len();
    }
    let mut out = Vec::new();
    for (i, &(start, ours)) in headers.iter().enumerate() {
        if !ours {
            continue;
        }
        let mut end = headers.get(i + 1).map(|h| h.0).unwrap_or(text.len());
        // Leave the blank and comment lines just before the next header with it.
        while end > start {
            let body = &text[start..end];
            let trimmed = body.strip_suffix('\n').unwrap_or(body);
            let last_start = trimmed.rfind('\n').map(|n| n + 1).unwrap_or(0);
            let last = trimmed[last_start..].trim();
            if last_start > 0 && (last.is_empty() || last.starts_with('#')) {
                end = start + last_start;
            } else {
                break;
            }
        }
        out.push(start..end);
    }
    out
}

fn toml_upsert(text: &str, doc: &Value, name: &str, entry: &Value) -> anyhow::Result<String> {
    let mut servers = Map::new();
    servers.insert(name.to_owned(), entry.clone());
    let mut d = Map::new();
    d.insert("mcp_servers".to_owned(), Value::Object(servers));
    let rendered = toml::to_string(&d).context("cannot render the TOML entry")?;
    let sections = toml_sections(text, name);
    if sections.is_empty() {
        if doc.get("mcp_servers").and_then(|s| s.get(name)).is_some() {
            bail!(
                "the server {name:?} is written inline (not as an `[mcp_servers.{name}]` table); personkit changed \
                 nothing. Remove it by hand, then run this again"
            );
        }
        let mut out = text.to_owned();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        if !out.trim().is_empty() {
            out.push('\n');
        }
        out.push_str(&rendered);
        return Ok(out);
    }
    let mut out = String::with_capacity(text.len() + rendered.len());
    let mut last = 0;
    for (i, r) in sections.iter().enumerate() {
        // The blank lines between two of our tables go with them.
        if i == 0 || !text[last..r.start].trim().is_empty() {
            out.push_str(&text[last..r.start]);
        }
        if i == 0 {
            // The blank lines that followed the old table stay in the text after it.
            out.push_str(&rendered);
        }
        last = r.end;
    }
    out.push_str(&text[last..]);
    Ok(out)
}

fn toml_remove(text: &str, name: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (i, r) in toml_sections(text, name).into_iter().enumerate() {
        if i == 0 || !text[last..r.start].trim().is_empty() {
            out.push_str(&text[last..r.start]);
        }
        last = r.end;
    }
    out.push_str(&text[last..]);
    // A table appended at the end came with a blank line before it (see `toml_upsert`): take that too.
    if last == text.len() && last > 0 && out.ends_with("\n\n") {
        out.pop();
    }
    out
}

// ---- Writing ----

/// Copy the file beside itself as `<file>.personkit-backup-<UTC time>`; None when there was no file.
fn back_up(file: &ConfigFile) -> anyhow::Result<Option<PathBuf>> {
    if !file.existed {
        return Ok(None);
    }
    let now = time::OffsetDateTime::now_utc();
    let stamp = format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    );
    let base = format!("{}.personkit-backup-{stamp}", file.target.display());
    let mut candidate = PathBuf::from(&base);
    let mut n = 2;
    while candidate.exists() {
        candidate = PathBuf::from(format!("{base}-{n}"));
        n += 1;
    }
    fs::copy(&file.target, &candidate).with_context(|| {
        format!(
            "cannot back up {} (nothing was changed)",
            file.path.display()
        )
    })?;
    Ok(Some(candidate))
}

/// Write through a temp file in the same folder renamed over the target, keeping the old file's permissions (a
/// new file holding a token is readable by its owner only).
fn write_atomic(file: &ConfigFile, text: &str, secret: bool) -> anyhow::Result<()> {
    let target = &file.target;
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the folder {}", dir.display()))?;
    let file_name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config".to_owned());
    let tmp = dir.join(format!(".{file_name}.personkit-tmp-{}", std::process::id()));
    let result = (|| -> anyhow::Result<()> {
        let mut opts = fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        if secret && !file.existed {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts
            .open(&tmp)
            .with_context(|| format!("cannot write in {}", dir.display()))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        if file.existed {
            let perms = fs::metadata(target)?.permissions();
            fs::set_permissions(&tmp, perms)?;
        }
        fs::rename(&tmp, target)
            .with_context(|| format!("cannot replace {}", file.path.display()))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn json_splice_keeps_the_rest_byte_for_byte() {
        let text = "{\n  \"theme\": \"dark\",\n  \"mcpServers\": {\n    \"other\": {\"command\": \"x\"}\n  },\n  \"z\": [1, 2]\n}\n";
        let e = json!({"command": "/bin/personkit", "args": ["mcp"]});
        let out = json_upsert(text, "mcpServers", "personkit", &e);
        assert!(out.starts_with("{\n  \"theme\": \"dark\",\n  \"mcpServers\": {\n    \"other\": {\"command\": \"x\"},\n    \"personkit\": {\n      \"args\""), "{out}");
        assert!(out.ends_with("\n  },\n  \"z\": [1, 2]\n}\n"), "{out}");
        let back = json_remove(&out, "mcpServers", "personkit");
        assert_eq!(back, text);
    }

    #[test]
    fn json_splice_into_minified_and_empty_files() {
        let e = json!({"command": "p"});
        let out = json_upsert("{\"a\":1}", "servers", "pk", &e);
        assert_eq!(out, "{\"a\":1,\"servers\":{\"pk\":{\"command\":\"p\"}}}");
        let out = json_upsert("", "mcpServers", "pk", &e);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v, json!({"mcpServers": {"pk": {"command": "p"}}}));
        let out = json_upsert("{\"mcpServers\": {}}", "mcpServers", "pk", &e);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v, json!({"mcpServers": {"pk": {"command": "p"}}}));
    }

    #[test]
    fn toml_sections_are_replaced_in_place() {
        let text = "model = \"o3\"\n\n[mcp_servers.personkit]\ncommand = \"old\"\n\n[mcp_servers.personkit.env]\nA = \"1\"\n\n# next\n[profiles.x]\nk = 1\n";
        let e = json!({"command": "new", "args": ["mcp"]});
        let doc: Value = serde_json::to_value(text.parse::<toml::Table>().unwrap()).unwrap();
        let out = toml_upsert(text, &doc, "personkit", &e).unwrap();
        assert!(out.starts_with("model = \"o3\"\n\n[mcp_servers.personkit]\nargs = [\"mcp\"]\ncommand = \"new\"\n\n# next"), "{out}");
        assert!(out.ends_with("\n\n# next\n[profiles.x]\nk = 1\n"), "{out}");
        assert!(!out.contains("old"));
        assert!(!toml_remove(&out, "personkit").contains("mcp_servers"));
    }

    #[test]
    fn ours_is_recognised_by_command_or_agent_token() {
        assert!(is_ours(
            &json!({"command": "/usr/local/bin/personkit", "args": ["mcp"]})
        ));
        assert!(is_ours(
            &json!({"url": "http://h/mcp", "headers": {"Authorization": "Bearer pka_abc"}})
        ));
        assert!(!is_ours(
            &json!({"command": "npx", "args": ["other-server"]})
        ));
        assert!(!is_ours(
            &json!({"url": "http://h/mcp", "headers": {"Authorization": "Bearer sk_abc"}})
        ));
    }
}
