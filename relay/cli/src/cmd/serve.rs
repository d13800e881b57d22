//! `personkit serve`: run the relay.

use anyhow::{Context, bail};
use clap::Args;
use personkit_server::config::{self, ApiConfig};
use personkit_server::conn::{ConnLimits, MAX_HEADER_TIMEOUT};
use personkit_server::{ServeConfig, TlsFiles, serve};

use crate::args::DbArg;

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "PERSONKIT_ADDR", default_value = config::DEFAULT_ADDR, value_name = "HOST:PORT")]
    pub addr: String,
    /// Allow a non-loopback address without TLS of its own (put a TLS proxy in front of it).
    #[arg(long)]
    pub allow_remote: bool,
    /// Serve HTTPS with this certificate chain (PEM, leaf first, e.g. fullchain.pem); needs --tls-key. A relay
    /// serving TLS may listen on a non-loopback address.
    #[arg(
        long,
        env = "PERSONKIT_TLS_CERT",
        value_name = "PEM",
        requires = "tls_key"
    )]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The certificate's private key (PEM); needs --tls-cert.
    #[arg(
        long,
        env = "PERSONKIT_TLS_KEY",
        value_name = "PEM",
        requires = "tls_cert"
    )]
    pub tls_key: Option<std::path::PathBuf>,
    /// A host name clients may address the relay by, besides localhost, 127.0.0.1 and [::1] (repeatable).
    #[arg(long, value_name = "NAME")]
    pub allow_host: Vec<String>,
    /// The URL clients use to reach this relay through a proxy (e.g. https://relay.example.com/personkit/); its
    /// host name is allowed.
    #[arg(long, env = "PERSONKIT_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,
    /// Most observations per batch.
    #[arg(long, default_value_t = personkit_shared::wire::DEFAULT_MAX_BATCH_ITEMS)]
    pub max_batch_items: usize,
    /// Most bytes per batch body.
    #[arg(long, default_value_t = personkit_shared::wire::DEFAULT_MAX_BATCH_BYTES)]
    pub max_batch_bytes: usize,
    /// Connections served at once (more are answered 503); lowered to what the open-file limit allows.
    #[arg(long, default_value_t = ConnLimits::default().max_connections as u64, value_name = "N",
        value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,
    /// Seconds a client has to send a request's headers (and the longest a kept-alive connection may sit idle).
    #[arg(long, default_value_t = ConnLimits::default().header_timeout.as_secs(), value_name = "SECS",
        value_parser = clap::value_parser!(u64).range(1..=MAX_HEADER_TIMEOUT.as_secs()))]
    pub header_timeout: u64,
    /// Requests per second per device token (burst 4x); 0 disables the limit.
    #[arg(long, default_value_t = config::DEFAULT_RATE_LIMIT, value_name = "REQ_PER_SEC")]
    pub rate_limit: f64,
    /// Seconds between sync rounds with the peers of `personkit sync add` (a round also starts on new data).
    #[arg(long, env = "PERSONKIT_SYNC_INTERVAL", default_value_t = 5, value_name = "SECS",
        value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub sync_interval: u64,
    /// Seconds between harvests of the enabled local AI-tool sources (`personkit harvest list`); 0 turns the
    /// harvest job off.
    #[arg(
        long,
        env = "PERSONKIT_HARVEST_INTERVAL",
        default_value_t = 900,
        value_name = "SECS"
    )]
    pub harvest_interval: u64,
    /// Seconds between looks for event sources whose cadence has passed (`personkit events sources`); 0 turns
    /// the events job off.
    #[arg(
        long,
        env = "PERSONKIT_EVENTS_CHECK",
        default_value_t = 60,
        value_name = "SECS"
    )]
    pub events_check: u64,
    /// The home folder the harvest sources' default paths are under [default: $HOME].
    #[arg(long, env = "PERSONKIT_HARVEST_HOME", value_name = "DIR")]
    pub harvest_home: Option<std::path::PathBuf>,
    /// Redaction patterns for harvested turns, one regex per line [default: ~/.dotperson/redact-patterns.txt
    /// when it exists].
    #[arg(long, env = "PERSONKIT_REDACT_PATTERNS", value_name = "FILE")]
    pub patterns: Option<std::path::PathBuf>,
}

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    if a.max_batch_items == 0 || a.max_batch_bytes == 0 {
        bail!("--max-batch-items and --max-batch-bytes must be at least 1");
    }
    if !(a.rate_limit >= 0.0 && a.rate_limit.is_finite()) {
        bail!("--rate-limit must be a number of requests per second, 0 to disable");
    }
    let mut allowed_hosts = a.allow_host.clone();
    if let Some(url) = &a.public_url {
        let host = url
            .split_once("://")
            .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(""))
            .and_then(config::host_name)
            .with_context(|| {
                format!("--public-url {url:?} is not a URL such as https://relay.example.com/")
            })?;
        let loopback = matches!(host.as_str(), "localhost" | "127.0.0.1" | "[::1]");
        let safe = url.starts_with("https://") || (loopback && url.starts_with("http://"));
        if !safe {
            bail!(
                "--public-url {url:?} must be an https:// URL (sign-in links and device tokens travel over it); \
                 plain http:// is only for a loopback address"
            );
        }
        allowed_hosts.push(host);
    }
    for h in &allowed_hosts {
        if config::host_name(h).as_deref() != Some(h.to_ascii_lowercase().as_str()) {
            bail!(
                "--allow-host {h:?} is not a host name (give the name alone, without scheme or port)"
            );
        }
    }
    let harvest = if a.harvest_interval == 0 {
        None
    } else {
        let c = crate::cmd::harvest::HomeArg {
            home: a.harvest_home.clone(),
        }
        .config()?;
        Some(personkit_server::jobs::HarvestSchedule {
            every: std::time::Duration::from_secs(a.harvest_interval),
            home: c.home,
            patterns: crate::cmd::import::load_patterns(a.patterns.as_deref())?,
            env: c.env,
        })
    };
    let events = if a.events_check == 0 {
        None
    } else {
        let home = crate::cmd::harvest::HomeArg {
            home: a.harvest_home.clone(),
        };
        let c = crate::cmd::events::config(&home, Vec::new())?;
        Some(personkit_server::jobs::EventsSchedule {
            check_every: std::time::Duration::from_secs(a.events_check),
            home: c.home,
            env: c.env,
            patterns: crate::cmd::import::load_patterns(a.patterns.as_deref())?,
        })
    };
    let config = ServeConfig {
        harvest,
        events,
        // Read while this process has one thread: the time crate refuses it later.
        local_offset: time::UtcOffset::current_local_offset().unwrap_or(time::UtcOffset::UTC),
        db_path: a.db.path(),
        addr: a.addr,
        allow_remote: a.allow_remote,
        api: ApiConfig {
            max_batch_items: a.max_batch_items,
            max_batch_bytes: a.max_batch_bytes,
            rate_limit: a.rate_limit,
            rate_burst: (a.rate_limit * 4.0).max(1.0),
            body_timeout: config::DEFAULT_BODY_TIMEOUT,
            allowed_hosts,
            public_url: a
                .public_url
                .as_deref()
                .map(|u| u.trim_end_matches('/').to_owned()),
        },
        tls: match (a.tls_cert, a.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            _ => None,
        },
        conn: ConnLimits {
            max_connections: usize::try_from(a.max_connections).unwrap_or(usize::MAX),
            header_timeout: std::time::Duration::from_secs(a.header_timeout),
            ..ConnLimits::default()
        },
        sync_interval: std::time::Duration::from_secs(a.sync_interval),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(serve(config))
}
