//! `personkit sync add|list|revoke|now`: the relays this one syncs with (docs/sync.md). `add` redeems a code of
//! `personkit pair --sync` on the other relay; from then on this relay pulls the peer's new rows and pushes its own
//! (both directions from this side, so the peer need not reach this machine) — in `serve`, continuously, or once
//! with `sync now`.

use anyhow::bail;
use clap::{Args, Subcommand};
use personkit_store::clock::Clock;
use personkit_store::sync as store_sync;

use crate::args::{DbArg, JsonArgs};
use crate::output::{ellipsize, print_json, print_table, progress_bar};

#[derive(Debug, Subcommand)]
pub enum SyncCommand {
    /// Pair with another relay using a code of `personkit pair --sync` there, and sync with it from now on.
    Add(AddArgs),
    /// Every peer: where it is, which way it syncs, when it last synced and its last error.
    List(JsonArgs),
    /// Stop syncing with a peer: its token is refused from its next request, and this relay stops calling it.
    Revoke(RevokeArgs),
    /// Run one sync round with every peer now (pull, then push), with a progress bar.
    Now(JsonArgs),
}

#[derive(Debug, Clone, Args)]
pub struct AddArgs {
    /// The other relay's base URL: https://…, or http:// to a loopback address.
    pub url: String,
    /// The code `personkit pair --sync` printed on the other relay.
    #[arg(long)]
    pub code: String,
    /// How the other relay lists this one [default: "relay <first 8 characters of this relay's id>"].
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub db: DbArg,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct RevokeArgs {
    /// The peer's name or (a unique prefix of) its relay id, as `personkit sync list` shows.
    pub peer: String,
    #[command(flatten)]
    pub db: DbArg,
    #[arg(long)]
    pub json: bool,
}

pub fn run(c: SyncCommand) -> anyhow::Result<()> {
    match c {
        SyncCommand::Add(a) => add(a),
        SyncCommand::List(a) => list(a),
        SyncCommand::Revoke(a) => revoke(a),
        SyncCommand::Now(a) => now(a),
    }
}

fn sync_err(e: personkit_sync::SyncError) -> anyhow::Error {
    anyhow::anyhow!("{}\nhint: {}", e.message, e.hint)
}

fn add(a: AddArgs) -> anyhow::Result<()> {
    let url = personkit_sync::check_url(&a.url).map_err(sync_err)?;
    let conn = a.db.open_existing()?;
    let me = personkit_store::db::relay_id(&conn)?;
    let name = a
        .name
        .clone()
        .unwrap_or_else(|| format!("relay {}", me.get(..8).unwrap_or(&me)));
    let paired = personkit_sync::pair(&url, &a.code, &me, &name).map_err(sync_err)?;
    store_sync::add_outgoing(
        &conn,
        &paired.peer_id,
        &paired.name,
        &url,
        &paired.token,
        Clock::system().now(),
    )?;
    if a.json {
        return print_json(&serde_json::json!({
            "peer_id": paired.peer_id, "name": paired.name, "url": url,
        }));
    }
    println!("paired with {} ({}) at {url}", paired.name, paired.peer_id);
    println!(
        "This relay now pulls its turns and pushes its own, both ways: `personkit serve` does it on new data and \
         every few seconds; `personkit sync now` runs a round at once."
    );
    Ok(())
}

fn list(a: JsonArgs) -> anyhow::Result<()> {
    let conn = a.db.open_read_only()?;
    let peers = store_sync::list_peers(&conn)?;
    if a.json {
        return print_json(&peers);
    }
    if peers.is_empty() {
        println!(
            "No sync peers. Run `personkit pair --sync` on the other relay, then `personkit sync add <its url> --code <code>` here."
        );
        return Ok(());
    }
    let rows: Vec<Vec<String>> = peers
        .iter()
        .map(|p| {
            let way = match (&p.url, p.calls_us) {
                (Some(_), true) => "both (each calls)",
                (Some(_), false) => "both (we call)",
                (None, true) => "both (it calls)",
                (None, false) => "-",
            };
            vec![
                ellipsize(&p.name, 24),
                p.id.get(..8).unwrap_or(&p.id).to_owned(),
                p.url.clone().unwrap_or_else(|| "-".into()),
                way.to_owned(),
                p.last_sync_at.clone().unwrap_or_else(|| "never".into()),
                if p.revoked_at.is_some() {
                    "revoked".to_owned()
                } else {
                    p.last_error
                        .as_deref()
                        .map_or_else(|| "ok".to_owned(), |e| ellipsize(e, 50))
                },
            ]
        })
        .collect();
    print_table(
        &["NAME", "ID", "URL", "SYNCS", "LAST SYNC", "STATUS"],
        &rows,
    )
}

fn revoke(a: RevokeArgs) -> anyhow::Result<()> {
    let conn = a.db.open_existing()?;
    let peer = store_sync::revoke_peer(&conn, &a.peer, Clock::system().now()).map_err(|e| {
        anyhow::anyhow!("{e}\nhint: `personkit sync list` shows the peers' names and ids")
    })?;
    if a.json {
        return print_json(&serde_json::json!({"revoked": peer.id, "name": peer.name}));
    }
    println!(
        "revoked {} ({}): its token is refused from its next request, and this relay no longer calls it",
        peer.name, peer.id
    );
    Ok(())
}

fn now(a: JsonArgs) -> anyhow::Result<()> {
    let mut conn = a.db.open_existing()?;
    if store_sync::outgoing(&conn)?.is_empty() {
        if a.json {
            return print_json(&serde_json::json!({"peers": []}));
        }
        println!(
            "No peer to call. Add one with `personkit sync add <url> --code <code>` (a code of `personkit pair --sync` there)."
        );
        return Ok(());
    }
    let clock = Clock::system();
    let mut bar: Option<(String, &'static str, indicatif::ProgressBar)> = None;
    let reports = personkit_sync::sync_all(&mut conn, &|| clock.now(), &mut |peer, p| {
        let same = bar
            .as_ref()
            .is_some_and(|(n, phase, _)| n == peer && *phase == p.phase);
        if !same {
            if let Some((_, _, b)) = bar.take() {
                b.finish();
            }
            bar = Some((
                peer.to_owned(),
                p.phase,
                progress_bar(p.total, &format!("{} {}", p.phase, ellipsize(peer, 16))),
            ));
        }
        if let Some((_, _, b)) = &bar {
            b.set_length(p.total);
            b.set_position(p.done);
        }
    })
    .map_err(sync_err)?;
    if let Some((_, _, b)) = bar.take() {
        b.finish();
    }
    let failed = reports.iter().filter(|r| r.is_err()).count();
    if a.json {
        let peers: Vec<serde_json::Value> = reports
            .iter()
            .map(|r| match r {
                Ok(r) => serde_json::json!({"ok": true, "report": r}),
                Err(e) => serde_json::json!({"ok": false, "error": e}),
            })
            .collect();
        print_json(&serde_json::json!({"peers": peers}))?;
    } else {
        for r in &reports {
            match r {
                Ok(r) => println!(
                    "{}: pulled {} new or changed ({} already here, {} forgotten here, {} removed, {} rejected); \
                     pushed {} new or changed",
                    r.name,
                    r.pulled.stored,
                    r.pulled.unchanged,
                    r.pulled.forgotten,
                    r.pulled.removed,
                    r.pulled.rejected.len(),
                    r.pushed.stored
                ),
                Err(e) => println!("error: {}\nhint: {}", e.message, e.hint),
            }
        }
    }
    if failed > 0 {
        bail!("{failed} peer(s) failed; `personkit sync list` shows each peer's last error");
    }
    Ok(())
}
