//! `personkit pair`, `personkit devices list|revoke` and `personkit agents add|list|revoke`: pairing codes, the
//! devices they created, and read-only agent tokens. Agents are rows of the same table: `devices` shows both
//! kinds, `agents list|revoke` the same listing and revocation narrowed to agents (and revoke by name too).

use clap::{Args, Subcommand};
use personkit_store::auth::{self, Device, Kind};
use personkit_store::clock::{Clock, fmt_time};

use crate::args::{DbArg, JsonArgs};
use crate::output::{ellipsize, print_json, print_table};

#[derive(Debug, Subcommand)]
pub enum DevicesCommand {
    /// Every paired device and agent token, with its status.
    List(JsonArgs),
    /// Revoke a device or agent: its token stops working at once.
    Revoke(RevokeArgs),
}

#[derive(Debug, Clone, Args)]
pub struct PairArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Print `{"code": ..., "expires_at": ...}`.
    #[arg(long)]
    pub json: bool,
    /// A code for another relay to sync with this one (`personkit sync add <this relay's url> --code <code>`
    /// there), instead of one for a device.
    #[arg(long)]
    pub sync: bool,
}

#[derive(Debug, Clone, Args)]
pub struct RevokeArgs {
    /// Device id (or a unique prefix of it), as `personkit devices list` shows.
    pub id: String,
    #[command(flatten)]
    pub db: DbArg,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct AgentRevokeArgs {
    /// The agent's name (as given to `personkit agents add`), or its id or a unique prefix of it.
    pub agent: String,
    #[command(flatten)]
    pub db: DbArg,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct AgentAddArgs {
    /// A name to recognise the agent by, e.g. claude-code.
    pub name: String,
    #[command(flatten)]
    pub db: DbArg,
    /// Print `{"id", "name", "kind", "token", "created_at", "mcp_url"}` (`mcp_url` null when no relay serves the
    /// corpus).
    #[arg(long)]
    pub json: bool,
}

pub fn add_agent(a: AgentAddArgs) -> anyhow::Result<()> {
    let conn = a.db.open_existing()?;
    let (agent, token) = auth::create_agent(&conn, &a.name, Clock::system().now())?;
    // The MCP address of the relay serving this corpus, as it recorded it (its public URL or the address it
    // listens on); unknown when no relay serves it now.
    let mcp_url = crate::cmd::open::running_relay(&a.db.path())
        .map(|base| format!("{}/mcp", base.trim_end_matches('/')));
    if a.json {
        return print_json(&serde_json::json!({
            "id": agent.id, "name": agent.name, "kind": agent.kind, "token": token.expose(),
            "created_at": agent.created_at, "mcp_url": mcp_url,
        }));
    }
    println!(
        "agent {} ({}) added. Its read-only token, shown only now:\n\n    {}\n",
        agent.name,
        agent.id,
        token.expose()
    );
    match &mcp_url {
        Some(url) => println!(
            "Give it to your MCP client as `Authorization: Bearer <token>` for {url} (see README)."
        ),
        None => println!(
            "Give it to your MCP client as `Authorization: Bearer <token>` for the relay's /mcp (see README).\n\
             No relay is serving this corpus now: `personkit serve` prints the address it listens on \
             (\"listening on http://HOST:PORT\"); the MCP address is that address followed by /mcp."
        ),
    }
    println!(
        "It can search and read the corpus, not add to it. Revoke it with `personkit agents revoke {}`.",
        &agent.id[..8.min(agent.id.len())]
    );
    Ok(())
}

pub fn pair(a: PairArgs) -> anyhow::Result<()> {
    let conn = a.db.open_existing()?;
    if a.sync {
        let (code, expires) =
            personkit_store::sync::create_sync_code(&conn, Clock::system().now())?;
        if a.json {
            return print_json(
                &serde_json::json!({"code": code.display(), "expires_at": fmt_time(expires), "kind": "sync"}),
            );
        }
        println!(
            "sync code {} (valid until {})",
            code.display(),
            fmt_time(expires)
        );
        println!(
            "On the other relay run `personkit sync add <this relay's URL> --code {}`; it works once, while this relay runs.",
            code.display()
        );
        return Ok(());
    }
    let (code, expires) = auth::create_pairing_code(&conn, Clock::system().now())?;
    if a.json {
        print_json(&serde_json::json!({"code": code.display(), "expires_at": fmt_time(expires)}))
    } else {
        println!(
            "pairing code {} (valid until {})",
            code.display(),
            fmt_time(expires)
        );
        println!(
            "Enter it in the personkit extension's popup; it works once, while the relay runs."
        );
        Ok(())
    }
}

pub fn list(a: JsonArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let devices = auth::list_devices(&conn)?;
    if a.json {
        return print_json(&devices);
    }
    if devices.is_empty() {
        println!("No devices paired. Run `personkit pair` and enter the code in the extension.");
        return Ok(());
    }
    print_devices(&devices)
}

/// `personkit agents list`: the agent tokens only, in the shape of `devices list`.
pub fn list_agents(a: JsonArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let agents: Vec<Device> = auth::list_devices(&conn)?
        .into_iter()
        .filter(|d| d.kind == Kind::Agent)
        .collect();
    if a.json {
        return print_json(&agents);
    }
    if agents.is_empty() {
        println!("No agent tokens. Make one with `personkit agents add NAME` (e.g. claude-code).");
        return Ok(());
    }
    print_devices(&agents)
}

fn print_devices(devices: &[Device]) -> anyhow::Result<()> {
    let rows: Vec<Vec<String>> = devices
        .iter()
        .map(|d| {
            vec![
                d.id.clone(),
                d.kind.as_str().to_owned(),
                ellipsize(&d.name, 40),
                d.created_at.clone(),
                d.last_seen_at.clone().unwrap_or_else(|| "-".into()),
                if d.revoked_at.is_some() {
                    "revoked".into()
                } else {
                    "active".into()
                },
            ]
        })
        .collect();
    print_table(
        &["id", "kind", "name", "paired", "last seen", "status"],
        &rows,
    )
}

/// Which agent `name_or_id` means: an exact id, else the active agents of that exact name (exactly one), else
/// an agent id prefix (exactly one). Never a device: `agents revoke` cannot cut off a browser.
fn resolve_agent<'a>(agents: &'a [Device], name_or_id: &str) -> anyhow::Result<&'a Device> {
    let wanted = name_or_id.trim();
    if wanted.is_empty() {
        anyhow::bail!("give the agent's name or id; see `personkit agents list`");
    }
    if let Some(d) = agents.iter().find(|d| d.id == wanted) {
        return Ok(d);
    }
    let describe = |ds: &[&Device]| {
        ds.iter()
            .map(|d| format!("{} ({})", d.id, d.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let named: Vec<&Device> = agents
        .iter()
        .filter(|d| d.name == wanted && d.revoked_at.is_none())
        .collect();
    match named.len() {
        1 => return Ok(named[0]),
        0 => {}
        _ => anyhow::bail!(
            "{} active agents are named {wanted:?}: {}; revoke one by its id",
            named.len(),
            describe(&named)
        ),
    }
    let prefixed: Vec<&Device> = agents.iter().filter(|d| d.id.starts_with(wanted)).collect();
    match prefixed.len() {
        1 => Ok(prefixed[0]),
        0 => {
            let revoked_named = agents.iter().any(|d| d.name == wanted);
            if revoked_named {
                anyhow::bail!(
                    "the agent {wanted:?} is already revoked; see `personkit agents list`"
                )
            }
            anyhow::bail!(
                "no agent has the name or id {wanted:?}; see `personkit agents list` (devices are revoked with `personkit devices revoke`)"
            )
        }
        _ => anyhow::bail!(
            "{wanted:?} is the start of several agent ids: {}; give more of the id",
            describe(&prefixed)
        ),
    }
}

/// `personkit agents revoke NAME|ID`: revokes one agent token, found by name or id among the agents only.
pub fn revoke_agent(a: AgentRevokeArgs) -> anyhow::Result<()> {
    let conn = a.db.open_existing()?;
    let agents: Vec<Device> = auth::list_devices(&conn)?
        .into_iter()
        .filter(|d| d.kind == Kind::Agent)
        .collect();
    let id = resolve_agent(&agents, &a.agent)?.id.clone();
    let agent = auth::revoke_device(&conn, &id, Clock::system().now())
        .map_err(|e| anyhow::anyhow!("{e}; see `personkit agents list`"))?;
    if a.json {
        print_json(&agent)
    } else {
        println!(
            "revoked agent {} ({}); its token no longer works",
            agent.name, agent.id
        );
        Ok(())
    }
}

pub fn revoke(a: RevokeArgs) -> anyhow::Result<()> {
    let conn = a.db.open_existing()?;
    let device = auth::revoke_device(&conn, &a.id, Clock::system().now())
        .map_err(|e| anyhow::anyhow!("{e}; see `personkit devices list`"))?;
    if a.json {
        print_json(&device)
    } else {
        println!(
            "revoked {} {} ({}); its token no longer works",
            device.kind.as_str(),
            device.id,
            device.name
        );
        Ok(())
    }
}
