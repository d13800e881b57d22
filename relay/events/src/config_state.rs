//! `config-state`: which AI tools are configured, with which model and which MCP servers — never a key, a token,
//! an environment value, a command line or a URL. One `config.state` event per tool whose summary changed since
//! the last pass: content = one line ("claude-code: model opus; MCP servers: github, linear"), attrs `tool`,
//! `path`, `model`, `mcp_servers` (names, sorted, at most [`MAX_SERVERS`]); `occurred_at` = the file's
//! modification time.
//!
//! The files (the tools' documented places): Claude Code `<claude>/settings.json` (`model`) and `~/.claude.json`
//! (`mcpServers`, also per project under `projects`), Claude Desktop `claude_desktop_config.json`, Cursor
//! `~/.cursor/mcp.json`, Gemini CLI `~/.gemini/settings.json`, Codex CLI `<codex>/config.toml` (`model`,
//! `[mcp_servers.<name>]`). Only names are taken from them, and those go through redaction too.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{Config, EventsError, Pass};

/// Most bytes read of one config file (`~/.claude.json` keeps per-project history and grows).
pub const MAX_FILE: u64 = 16 * 1024 * 1024;
/// Most MCP server names kept per tool.
pub const MAX_SERVERS: usize = 100;

/// The config files looked at, as (tool, path).
pub fn files(c: &Config) -> Vec<(&'static str, PathBuf)> {
    let claude = c.claude_dir();
    let desktop = if cfg!(target_os = "macos") {
        c.home
            .join("Library/Application Support/Claude/claude_desktop_config.json")
    } else if cfg!(windows) {
        c.home
            .join("AppData/Roaming/Claude/claude_desktop_config.json")
    } else {
        c.home.join(".config/Claude/claude_desktop_config.json")
    };
    vec![
        ("claude-code", claude.join("settings.json")),
        ("claude-code-mcp", c.home.join(".claude.json")),
        ("claude-desktop", desktop),
        ("cursor", c.home.join(".cursor/mcp.json")),
        ("gemini-cli", c.home.join(".gemini/settings.json")),
        ("codex", c.codex_dir().join("config.toml")),
    ]
}

/// What one tool's file says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub model: Option<String>,
    pub mcp_servers: Vec<String>,
}

fn names(v: Option<&Value>, into: &mut BTreeSet<String>) {
    if let Some(Value::Object(m)) = v {
        into.extend(m.keys().take(MAX_SERVERS).cloned());
    }
}

/// A model name as a setting gives it: a short word of letters, digits and `-._:/@`, else nothing (a value that
/// looks like anything else is not copied).
fn model_name(v: Option<&Value>) -> Option<String> {
    let s = match v? {
        Value::String(s) => s.as_str(),
        Value::Object(m) => m.get("name")?.as_str()?,
        _ => return None,
    };
    let ok = !s.is_empty()
        && s.len() <= 80
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._:/@[]".contains(c));
    ok.then(|| s.to_owned())
}

/// The summary of a JSON config file.
pub fn summarise_json(tool: &str, v: &Value) -> Summary {
    let mut servers = BTreeSet::new();
    names(v.get("mcpServers"), &mut servers);
    if tool == "claude-code-mcp"
        && let Some(Value::Object(projects)) = v.get("projects")
    {
        for p in projects.values().take(10_000) {
            names(p.get("mcpServers"), &mut servers);
        }
    }
    Summary {
        model: model_name(v.get("model")),
        mcp_servers: servers.into_iter().take(MAX_SERVERS).collect(),
    }
}

/// The summary of Codex CLI's `config.toml`: a top-level `model = "…"` and the `[mcp_servers.<name>]` tables
/// (read line by line; nothing else of the file is looked at).
pub fn summarise_codex_toml(text: &str) -> Summary {
    let mut model = None;
    let mut servers = BTreeSet::new();
    let mut top = true;
    for line in text.lines().take(100_000) {
        let l = line.trim();
        if let Some(h) = l.strip_prefix('[') {
            top = false;
            let h = h.trim_start_matches('[').trim_end_matches(']').trim();
            if let Some(name) = h.strip_prefix("mcp_servers.") {
                let name = name.split('.').next().unwrap_or("").trim_matches('"');
                if !name.is_empty() {
                    servers.insert(name.to_owned());
                }
            }
            continue;
        }
        if top
            && let Some((k, v)) = l.split_once('=')
            && k.trim() == "model"
        {
            let v = v.trim().trim_matches('"').trim_matches('\'');
            model = model_name(Some(&Value::String(v.to_owned())));
        }
    }
    Summary {
        model,
        mcp_servers: servers.into_iter().take(MAX_SERVERS).collect(),
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Cursor {
    summary: Summary,
}

pub(crate) fn run(pass: &mut Pass<'_>) -> Result<(), EventsError> {
    for (tool, path) in files(pass.config) {
        let shown = path.display().to_string();
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.len() > MAX_FILE {
            pass.problem(format!("{shown}: more than {MAX_FILE} bytes, not read"));
            pass.report.rejected += 1;
            continue;
        }
        let mut text = String::new();
        if let Err(e) =
            std::fs::File::open(&path).and_then(|f| f.take(MAX_FILE).read_to_string(&mut text))
        {
            pass.problem(format!("{shown}: {e}"));
            pass.report.rejected += 1;
            continue;
        }
        let summary = if tool == "codex" {
            summarise_codex_toml(&text)
        } else {
            match serde_json::from_str::<Value>(&text) {
                Ok(v) => summarise_json(tool, &v),
                Err(e) => {
                    pass.problem(format!("{shown}: not JSON ({e})"));
                    pass.report.rejected += 1;
                    continue;
                }
            }
        };
        let summary = Summary {
            model: summary.model.map(|m| pass.clean(&m)),
            mcp_servers: summary.mcp_servers.iter().map(|s| pass.clean(s)).collect(),
        };
        let last: Option<Cursor> = pass.cursor(tool)?;
        if last.is_some_and(|l| l.summary == summary) {
            continue;
        }
        pass.report.read += 1;
        let servers = if summary.mcp_servers.is_empty() {
            "none".to_owned()
        } else {
            summary.mcp_servers.join(", ")
        };
        let content = format!(
            "{tool}: model {}; MCP servers: {servers}",
            summary.model.as_deref().unwrap_or("not set")
        );
        let at = crate::mtime(&meta).unwrap_or(pass.now);
        let e = pass.event(
            "config.state",
            tool.to_owned(),
            content,
            at,
            json!({"tool": tool, "path": shown, "model": summary.model, "mcp_servers": summary.mcp_servers}),
        );
        pass.store(&[e])?;
        pass.save_cursor(tool, &Cursor { summary })?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_names_leave_a_config_file() {
        let v = json!({
            "model": "opus",
            "env": {"ANTHROPIC_API_KEY": "sk-ant-secret"},
            "mcpServers": {"github": {"command": "gh-mcp", "env": {"TOKEN": "ghp_secret"}}},
            "projects": {"/src/kite": {"mcpServers": {"linear": {"url": "https://x/?key=secret"}}}}
        });
        let s = summarise_json("claude-code-mcp", &v);
        assert_eq!(s.model.as_deref(), Some("opus"));
        assert_eq!(s.mcp_servers, ["github", "linear"]);
        let text = serde_json::to_string(&s).unwrap();
        assert!(!text.contains("secret"), "{text}");
        // A model value that is not a plain name is not copied.
        assert_eq!(model_name(Some(&json!("sk-ant-api03 with spaces"))), None);
    }

    #[test]
    fn codex_toml_gives_its_model_and_server_tables() {
        let t = "model = \"gpt-5-codex\"\napi_key = \"sk-secret\"\n\n[mcp_servers.docs]\ncommand = \"npx\"\n[mcp_servers.\"sentry\".env]\nTOKEN = \"x\"\n[profiles.fast]\nmodel = \"o4-mini\"\n";
        let s = summarise_codex_toml(t);
        assert_eq!(s.model.as_deref(), Some("gpt-5-codex"));
        assert_eq!(s.mcp_servers, ["docs", "sentry"]);
    }
}
