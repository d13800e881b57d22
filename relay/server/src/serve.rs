//! Running the server: bind (loopback unless told otherwise), announce the address and a pairing code on
//! stdout, serve connections ([`crate::conn`]) until SIGTERM/SIGINT, then shut down gracefully.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Serve HTTPS with this certificate chain and key (PEM files) instead of plain HTTP.
    pub tls: Option<TlsFiles>,
    /// How often the sync job runs a round with the peers this relay calls (it also runs on new data).
    pub sync_interval: std::time::Duration,
    /// Harvest the enabled local AI-tool sources on this schedule (`None`: never).
    pub harvest: Option<jobs::HarvestSchedule>,
    /// Run the enabled event sources on their cadences, looking for due ones on this schedule (`None`: never).
    pub events: Option<jobs::EventsSchedule>,
    /// This machine's offset from UTC (read before any thread starts): the daily knowledge pass runs in local time.
    pub local_offset: time::UtcOffset,
}

/// The PEM files of `serve --tls-cert/--tls-key`.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The certificate chain, leaf first (e.g. Let's Encrypt's `fullchain.pem`).
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// The TLS acceptor of `files`: TLS 1.2 and 1.3 (rustls' safe defaults, ring), HTTP/1.1 by ALPN, no client
/// certificates. Errors name the file and what to do.
pub fn tls_acceptor(files: &TlsFiles) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot read the certificate chain {}: {e}; give a PEM file (e.g. fullchain.pem)",
                files.cert.display()
            )
        })?;
    if certs.is_empty() {
        bail!(
            "{} holds no certificate; give a PEM file with the chain, leaf first (e.g. fullchain.pem)",
            files.cert.display()
        );
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        anyhow::anyhow!(
            "cannot read the private key {}: {e}; give the PEM key that matches the certificate (e.g. privkey.pem)",
            files.key.display()
        )
    })?;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .with_context(|| {
            format!(
                "the key {} does not fit the certificate {}",
                files.key.display(),
                files.cert.display()
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)))
}

/// Resolve `HOST:PORT` and check the loopback rule: a non-loopback address needs TLS (`tls`) or `allow_remote`
/// (a TLS proxy in front).
pub async fn resolve_addr(addr: &str, allow_remote: bool, tls: bool) -> anyhow::Result<SocketAddr> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(addr)
        .await
        .with_context(|| {
            format!("cannot resolve --addr {addr:?}; give HOST:PORT such as 127.0.0.1:8787")
        })?
        .collect();
    let first = *addrs
        .first()
        .with_context(|| format!("--addr {addr:?} resolves to no address"))?;
    if !first.ip().is_loopback() && !tls {
        if !allow_remote {
            bail!(
                "refusing to listen on {first}: it is not a loopback address, and device tokens would cross the \
                 network in clear text. Use 127.0.0.1, serve TLS yourself (--tls-cert/--tls-key), or pass \
                 --allow-remote behind a TLS proxy"
            );
        }
        eprintln!(
            "personkit: WARNING listening on non-loopback {first} without TLS: put a TLS proxy in front of it"
        );
    }
    Ok(first)
}

/// Serve until a shutdown signal. Prints `personkit: listening on http(s)://<addr>` and, when no device is paired,
/// `personkit: pairing code <CODE> (valid until <time>)`.
pub async fn serve(config: ServeConfig) -> anyhow::Result<()> {
    let tls = config.tls.as_ref().map(tls_acceptor).transpose()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let addr = resolve_addr(&config.addr, config.allow_remote, tls.is_some()).await?;
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
    let search = personkit_search::settings::Settings::for_db(&config.db_path)
        .map_err(|e| anyhow::anyhow!("{e}\nhint: {}", e.hint()))?;
    let state = AppState::new(db, config.api.clone(), clock.clone())
        .with_search(search)
        .with_embedder(embedder)
        .with_local(config.local_offset);
    let embed_worker = jobs::start(&state);
    let sync_job = jobs::start_sync(&state, config.sync_interval);
    let harvest_job = match config.harvest.clone() {
        Some(h) => Some(
            jobs::start_harvest(&config.db_path, h, clock.clone())
                .context("cannot start the harvest job")?,
        ),
        None => None,
    };
    let events_job = match config.events.clone() {
        Some(e) => Some(
            jobs::start_events(&config.db_path, e, clock.clone())
                .context("cannot start the events job")?,
        ),
        None => None,
    };
    let knowledge_job = jobs::start_knowledge(&config.db_path, clock.clone(), config.local_offset)
        .context("cannot start the knowledge job")?;
    let memory_job = jobs::start_memory(
        &config.db_path,
        clock.clone(),
        config.local_offset,
        state.memory_busy.clone(),
    )
    .context("cannot start the memory job")?;
    let heat_job = jobs::start_heat(&config.db_path, clock.clone(), jobs::HEAT_TICK)
        .context("cannot start the heat job")?;
    let graph_job = jobs::start_graph(&config.db_path, clock.clone(), GRAPH_INTERVAL)
        .context("cannot start the graph job")?;
    let listener = TcpListener::bind(addr).await.with_context(|| {
        format!("cannot listen on {addr}; is another relay running? try --addr 127.0.0.1:0")
    })?;
    let local = listener.local_addr()?;
    // What `personkit open` makes its sign-in link with: the public URL behind a proxy, else this address.
    let reach = config
        .api
        .public_url
        .clone()
        .unwrap_or_else(|| format!("{scheme}://{local}"));
    if let Err(e) = lock.record(&reach) {
        tracing::warn!(error = %e, "cannot record this relay in the corpus lock file");
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "personkit: {search_line}")?;
    writeln!(out, "personkit: listening on {scheme}://{local}")?;
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
    let db = state.db.clone();
    let stopping = async move {
        shutdown_signal().await;
        // Reads in flight stop at their next check; whatever else still runs gets until the deadline.
        db.interrupt_reads();
        exit_after(STOP_DEADLINE);
    };
    serve_connections(listener, app(state), limits, tls, stopping).await;
    sync_job.abort();
    if let Some(w) = embed_worker {
        tokio::task::spawn_blocking(move || w.stop()).await?;
    }
    if let Some(h) = harvest_job {
        tokio::task::spawn_blocking(move || h.stop()).await?;
    }
    if let Some(e) = events_job {
        tokio::task::spawn_blocking(move || e.stop()).await?;
    }
    if let Some(k) = knowledge_job {
        tokio::task::spawn_blocking(move || k.stop()).await?;
    }
    tokio::task::spawn_blocking(move || memory_job.stop()).await?;
    tokio::task::spawn_blocking(move || heat_job.stop()).await?;
    tokio::task::spawn_blocking(move || graph_job.stop()).await?;
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

/// How long `serve` may take to stop once told to: in-flight requests and jobs get this long, then the process
/// exits anyway. Nothing is lost by that: every acknowledged turn was committed before its answer was sent, and a
/// transaction cut short is rolled back by SQLite when the corpus is next opened.
/// How often `serve` derives the entity graph from new turns.
const GRAPH_INTERVAL: Duration = Duration::from_secs(60);

pub const STOP_DEADLINE: Duration = Duration::from_secs(8);

/// Ends the process `after` from now unless it has ended by itself.
fn exit_after(after: Duration) {
    let spawned = std::thread::Builder::new()
        .name("personkit-stop-deadline".into())
        .spawn(move || {
            std::thread::sleep(after);
            tracing::warn!(
                seconds = after.as_secs(),
                "still stopping after the deadline; exiting now"
            );
            std::process::exit(0);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the stop deadline");
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
