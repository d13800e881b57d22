//! `personkit open`: a one-time sign-in link to the dashboard of the relay serving this corpus, printed and
//! opened in the browser where there is one.

use anyhow::Context;
use clap::Args;
use personkit_store::clock::{Clock, fmt_time};
use personkit_store::{DbError, signin};

use crate::args::DbArg;
use crate::output::print_json;

#[derive(Debug, Clone, Args)]
pub struct OpenArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// The relay's address as the browser reaches it [default: the address the running relay recorded]
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Print the link only; do not start a browser.
    #[arg(long)]
    pub no_browser: bool,
    /// Print `{"url": ..., "expires_at": ...}` (implies --no-browser).
    #[arg(long)]
    pub json: bool,
}

/// The address of the relay serving `corpus`, from its lock file; `None` when no relay serves it.
pub(crate) fn running_relay(corpus: &std::path::Path) -> Option<String> {
    match personkit_store::db::ServeLock::acquire(corpus) {
        Err(DbError::InUse { addr, .. }) if addr.starts_with("http") => Some(addr),
        _ => None,
    }
}

pub fn run(a: OpenArgs) -> anyhow::Result<()> {
    let path = a.db.path();
    let base = match a.url.clone().or_else(|| running_relay(&path)) {
        Some(u) => u.trim_end_matches('/').to_owned(),
        None => anyhow::bail!(
            "no relay is serving {}; start it with `personkit serve` (or pass --url http://HOST:PORT)",
            path.display()
        ),
    };
    let conn = a.db.open_existing()?;
    let (secret, expires) =
        signin::create_link(&conn, Clock::system().now()).context("cannot make a sign-in link")?;
    let url = format!("{base}/signin?t={}", secret.expose());
    if a.json {
        return print_json(&serde_json::json!({"url": url, "expires_at": fmt_time(expires)}));
    }
    println!("{url}");
    eprintln!(
        "This link signs one browser in to your library; it works once, until {}.",
        fmt_time(expires)
    );
    let graphical =
        std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    if !a.no_browser && graphical {
        let opened = std::process::Command::new("xdg-open")
            .arg(&url)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if opened.is_err() {
            eprintln!("(could not start a browser: open the link yourself)");
        }
    }
    Ok(())
}
