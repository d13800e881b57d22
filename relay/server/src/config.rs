//! Configuration of the server and defaults shared by the CLI: where the corpus lives, where to listen, limits.

use std::path::PathBuf;

use personkit_shared::wire::{DEFAULT_MAX_BATCH_BYTES, DEFAULT_MAX_BATCH_ITEMS};

pub const DEFAULT_ADDR: &str = "127.0.0.1:8787";
/// Requests per second per device token, and the burst allowed above it.
pub const DEFAULT_RATE_LIMIT: f64 = 50.0;
pub const DEFAULT_RATE_BURST: f64 = 200.0;
pub const DEFAULT_BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `~/.dotperson/corpus.db` (or `./.dotperson/corpus.db` when there is no home directory).
pub fn default_db_path() -> PathBuf {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".dotperson").join("corpus.db")
}

/// Limits and rates the HTTP API enforces.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiConfig {
    pub max_batch_items: usize,
    pub max_batch_bytes: usize,
    /// Requests per second per token; 0 disables the limiter.
    pub rate_limit: f64,
    pub rate_burst: f64,
    /// Longest time a client may take to send a request body (slow senders get 408).
    pub body_timeout: std::time::Duration,
    /// Host names (without port) requests may be addressed to, besides the loopback names `localhost`,
    /// `127.0.0.1` and `[::1]`: the relay's public name when it runs behind a proxy. Anything else is refused
    /// (421), so a web page that rebinds its own name to this machine cannot reach the relay.
    pub allowed_hosts: Vec<String>,
    /// The address people and clients reach the relay by when it runs behind a proxy (`--public-url`, e.g.
    /// `https://relay.example.com/personkit`, no trailing slash): sign-in links are made with it.
    pub public_url: Option<String>,
}

/// The host part of a `Host` header value (no port), lowercased; `None` when it is empty or malformed.
pub fn host_name(value: &str) -> Option<String> {
    let v = value.trim();
    let host = if let Some(rest) = v.strip_prefix('[') {
        let end = rest.find(']')?;
        format!("[{}]", &rest[..end])
    } else {
        match v.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h.to_owned(),
            Some(_) => return None,
            None => v.to_owned(),
        }
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    (!host.is_empty()).then_some(host)
}

impl ApiConfig {
    /// The base of links people open (no trailing slash): the public URL when one is configured, else the
    /// address the request came to (`Host`, plain http: without a public URL the relay is reached directly).
    pub fn link_base(&self, host: Option<&str>) -> String {
        match &self.public_url {
            Some(u) => u.trim_end_matches('/').to_owned(),
            None => format!("http://{}", host.unwrap_or("127.0.0.1")),
        }
    }

    /// True when a request addressed to `host` (a `Host` header value) may be answered.
    pub fn host_allowed(&self, host: &str) -> bool {
        let Some(name) = host_name(host) else {
            return false;
        };
        matches!(name.as_str(), "localhost" | "127.0.0.1" | "[::1]")
            || self
                .allowed_hosts
                .iter()
                .any(|h| h.eq_ignore_ascii_case(&name))
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            max_batch_items: DEFAULT_MAX_BATCH_ITEMS,
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            rate_limit: DEFAULT_RATE_LIMIT,
            rate_burst: DEFAULT_RATE_BURST,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            allowed_hosts: Vec::new(),
            public_url: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_names_and_configured_hosts_are_allowed() {
        let mut c = ApiConfig::default();
        for ok in [
            "127.0.0.1:8787",
            "localhost",
            "LOCALHOST:1",
            "[::1]:8787",
            "localhost.",
        ] {
            assert!(c.host_allowed(ok), "{ok}");
        }
        for bad in [
            "",
            "evil.example",
            "evil.example:8787",
            "127.0.0.1.evil.example",
            "localhost:80:80",
            "127.0.0.2:8787",
            "[::1",
            "relay.example.com",
        ] {
            assert!(!c.host_allowed(bad), "{bad}");
        }
        c.allowed_hosts.push("relay.example.com".into());
        assert!(c.host_allowed("Relay.Example.com:443"));
    }
}
