//! `personkit pair`, `personkit devices list|revoke` and `personkit agents add`: pairing codes, the devices they
//! created, and read-only agent tokens (listed and revoked with the devices).

use clap::{Args, Subcommand};
use personkit_store::auth;
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
pub struct AgentAddArgs {
    /// A name to recognise the agent by, e.g. claude-code.
    pub name: String,
    #[command(flatten)]
    pub db: DbArg,
    /// Print `{"id", "name", "kind", "token", "created_at"}`.
    #[arg(long)]
    pub json: bool,
}

pub fn add_agent(a: AgentAddArgs) -> anyhow::Result<()> {
    let conn = a.db.open_existing()?;
    let (agent, token) = auth::create_agent(&conn, &a.name, Clock::system().now())?;
    if a.json {
        return print_json(&serde_json::json!({
            "id": agent.id, "name": agent.name, "kind": agent.kind, "token": token.expose(),
            "created_at": agent.created_at,
        }));
    }
    println!(
        "agent {} ({}) added. Its read-only token, shown only now:\n\n    {}\n",
        agent.name,
        agent.id,
        token.expose()
    );
    println!(
        "Give it to your MCP client as `Authorization: Bearer <token>` for http://127.0.0.1:8787/mcp (see README).\n\
         It can search and read the corpus, not add to it. Revoke it with `personkit devices revoke {}`.",
        &agent.id[..8.min(agent.id.len())]
    );
    Ok(())
}

pub fn pair(a: PairArgs) -> anyhow::Result<()> {
    let conn = a.db.open_existing()?;
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

pub fn revoke(a: RevokeArgs) -> anyhow::Result<()> {
    let conn = a.db.open_existing()?;
    let device = auth::revoke_device(&conn, &a.id, Clock::system().now())
        .map_err(|e| anyhow::anyhow!("{e}; see `personkit devices list`"))?;
    if a.json {
        print_json(&device)
    } else {
        println!(
            "revoked device {} ({}); its token no longer works",
            device.id, device.name
        );
        Ok(())
    }
}
