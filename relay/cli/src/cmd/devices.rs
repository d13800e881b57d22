//! `personkit pair` and `personkit devices list|revoke`: pairing codes and the devices they created.

use clap::{Args, Subcommand};
use personkit_store::auth;
use personkit_store::clock::{Clock, fmt_time};

use crate::args::{DbArg, JsonArgs};
use crate::output::{ellipsize, print_json, print_table};

#[derive(Debug, Subcommand)]
pub enum DevicesCommand {
    /// Every paired device, with its status.
    List(JsonArgs),
    /// Revoke a device: its token stops working at once.
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
    print_table(&["id", "name", "paired", "last seen", "status"], &rows)
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
