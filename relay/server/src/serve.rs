//! Running the server: bind (loopback unless told otherwise), announce the address and a pairing code on
//! stdout, serve connections ([`crate::conn`]) until SIGTERM/SIGINT, then shut down gracefully.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use tokio::net::TcpListener;

use personkit_store::auth;
use personkit_store::clock::{Clock, fmt_time};
use personkit_store::db::ServeLock;
use personkit_store::{Db, DbError};

use crate::config::ApiConfig;
use crate::conn::{ConnLimits, fit_to_open_file_limit, serve_connections};
use crate::state::AppState;
use crate::{app, jobs};

/// Everything `personkit serve` needs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub db_path: PathBuf,
    pub addr: String,
    pub allow_remote: bool,
    pub api: ApiConfig,
    pub conn: ConnLimits,
}

/// Resolve `HOST:PORT` and check the loopback rule: a non-loopback address needs `allow_remote`.
pub async fn resolve_addr(addr: &str, allow_remote: bool) -> anyhow::Result<SocketAddr> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(addr)
        .await
        .with_context(|| {
            format!("cannot resolve --addr {addr:?}; give HOST:PORT such as 127.0.0.1:8787")
        })?
        .collect();
    let first = *addrs
        .first()
        .with_context(|| format!("--addr {addr:?} resolves to no address"))?;
    if !first.ip().is_loopback() {
        if !allow_remote {
            bail!(
                "refusing to listen on {first}: it is not a loopback address, and device tokens would cross the \
                 network in clear text. Use 127.0.0.1, or pass --allow-remote behind a TLS proxy"
            );
        }
        eprintln!(
            "personkit: WARNING listening on non-loopback {first} without TLS: put a TLS proxy in front of it"
        );
    }
    Ok(first)
}

/// Serve until a shutdown signal. Prints `personkit: listening on http://<addr>` and, when no device is paired,
/// `personkit: pairing code <CODE> (valid until <time>)`.
pub async fn serve(config: ServeConfig) -> anyhow::Result<()> {
    let addr = resolve_addr(&config.addr, config.allow_remote).await?;
    ignore_file_size_signal();
    let limits = ConnLimits {
        max_connections: fit_to_open_file_limit(config.conn.max_connections),
        ..config.conn
    };
    // One relay per corpus: a second `serve` on the same file refuses, naming the first.
    let mut lock = ServeLock::acquire(&config.db_path).map_err(|e| match e {
        DbError::InUse { .. } => anyhow::anyhow!("{e}; stop it first, or pass another --db"),
        e => anyhow::anyhow!("{e}"),
    })?;
    let db_path = config.db_path.clone();
    let db = tokio::task::spawn_blocking(move || Db::open(&db_path))
        .await?
        .with_context(|| format!("cannot open the corpus at {}", config.db_path.display()))?;
    let clock = Clock::system();
    let embed_path = config.db_path.clone();
    let (embedder, search_line) =
        tokio::task::spawn_blocking(move || jobs::configured_embedder(&embed_path)).await?;
    let state = AppState::new(db, config.api.clone(), clock.clone()).with_embedder(embedder);
    let embed_worker = jobs::start(&state);
    let listener = TcpListener::bind(addr).await.with_context(|| {
        format!("cannot listen on {addr}; is another relay running? try --addr 127.0.0.1:0")
    })?;
    let local = listener.local_addr()?;
    if let Err(e) = lock.record(&format!("http://{local}")) {
        tracing::warn!(error = %e, "cannot record this relay in the corpus lock file");
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "personkit: {search_line}")?;
    writeln!(out, "personkit: listening on http://{local}")?;
    let now = clock.now();
    let code = state
        .db
        .write(|c| -> Result<_, DbError> {
            if auth::active_device_count(c)? == 0 {
                Ok(Some(auth::create_pairing_code(c, now)?))
            } else {
                Ok(None)
            }
        })
        .context("cannot create a pairing code")?;
    if let Some((code, expires)) = code {
        writeln!(
            out,
            "personkit: pairing code {} (valid until {})",
            code.display(),
            fmt_time(expires)
        )?;
    }
    out.flush()?;
    drop(out);
    tracing::info!(%local, db = %config.db_path.display(), "relay started");
    serve_connections(listener, app(state), limits, shutdown_signal()).await;
    if let Some(w) = embed_worker {
        tokio::task::spawn_blocking(move || w.stop()).await?;
    }
    tracing::info!("relay stopped");
    Ok(())
}

/// A write past the file-size limit (`ulimit -f`) raises SIGXFSZ, whose default action kills the process. With a
/// handler installed the write fails with EFBIG instead, the batch's transaction rolls back and the client gets a
/// 503, keeping its turns.
fn ignore_file_size_signal() {
    #[cfg(unix)]
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(libc::SIGXFSZ)) {
        Ok(mut s) => {
            tokio::spawn(async move {
                while s.recv().await.is_some() {
                    tracing::error!(
                        "a write went past the file-size limit; the batch was not stored"
                    );
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "cannot catch SIGXFSZ"),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown signal received");
}
