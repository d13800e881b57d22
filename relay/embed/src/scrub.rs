//! Whether text sent to an embedder is scrubbed of personal details first (`personkit_shared::scrub`: e-mails,
//! phone numbers, money amounts), unless the configuration says `scrub = "off"`. An endpoint on loopback (a model
//! server on this machine) receives the text as stored under `auto`: nothing leaves the machine.

use std::net::IpAddr;

use super::ScrubMode;

/// What happens to text on its way to an embedder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Computed in this process: nothing is sent.
    InProcess,
    /// Sent to a loopback endpoint as stored (scrub `auto`).
    Loopback,
    /// Scrubbed, then sent.
    Scrub,
    /// Sent as stored to a remote endpoint: scrubbing was turned off.
    Off,
}

impl Decision {
    /// The decision for an embedder with `endpoint` (a URL) under `mode`.
    pub fn of(mode: ScrubMode, endpoint: Option<&str>) -> Decision {
        let Some(url) = endpoint else {
            return Decision::InProcess;
        };
        match mode {
            ScrubMode::Off => Decision::Off,
            ScrubMode::On => Decision::Scrub,
            ScrubMode::Auto if is_loopback_url(url) => Decision::Loopback,
            ScrubMode::Auto => Decision::Scrub,
        }
    }

    /// For `corpus health` and the start banner.
    pub fn describe(self, endpoint: Option<&str>) -> String {
        self.describe_replacing(endpoint, "e-mails, phone numbers and amounts")
    }

    /// [`Decision::describe`] for a caller that replaces more (`replaced`: what, in words).
    pub fn describe_replacing(self, endpoint: Option<&str>, replaced: &str) -> String {
        let host = endpoint.map(host_of).unwrap_or_default();
        match self {
            Decision::InProcess => "not needed: the model runs in this process".into(),
            Decision::Loopback => {
                format!("not needed: {host} is on this machine (scrub = \"on\" forces it)")
            }
            Decision::Scrub => format!("on: {replaced} are replaced before text goes to {host}"),
            Decision::Off => format!("OFF: text goes to {host} as stored (scrub = \"off\")"),
        }
    }
}

/// The host part of a URL (`https://host:port/path` → `host:port`).
fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    authority.rsplit_once('@').map_or(authority, |(_, h)| h)
}

/// Whether a URL's host is a loopback address or `localhost`.
pub fn is_loopback_url(url: &str) -> bool {
    let host = host_of(url);
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split_once(']').map_or(v6, |(h, _)| h)
    } else {
        host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                h
            } else {
                host
            }
        })
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_recognised() {
        for url in [
            "http://127.0.0.1:11434/v1/embeddings",
            "http://localhost:8080",
            "http://LOCALHOST./x",
            "http://[::1]:9000/v1",
            "http://127.8.9.10/",
            "http://user:pw@127.0.0.1:1/v1",
        ] {
            assert!(is_loopback_url(url), "{url}");
        }
        for url in [
            "https://api.openai.com/v1/embeddings",
            "https://us-central1-aiplatform.googleapis.com/v1/x",
            "http://192.168.1.10:11434",
            "http://10.0.0.5",
            "http://[2001:db8::1]:80/",
            "http://127.0.0.1.evil.example/",
            "http://localhost@evil.example/",
        ] {
            assert!(!is_loopback_url(url), "{url}");
        }
    }

    #[test]
    fn decisions() {
        let remote = Some("https://api.openai.com/v1/embeddings");
        let local = Some("http://127.0.0.1:1/v1/embeddings");
        assert_eq!(Decision::of(ScrubMode::Auto, None), Decision::InProcess);
        assert_eq!(Decision::of(ScrubMode::Off, None), Decision::InProcess);
        assert_eq!(Decision::of(ScrubMode::Auto, remote), Decision::Scrub);
        assert_eq!(Decision::of(ScrubMode::Auto, local), Decision::Loopback);
        assert_eq!(Decision::of(ScrubMode::On, local), Decision::Scrub);
        assert_eq!(Decision::of(ScrubMode::Off, remote), Decision::Off);
        assert!(Decision::Scrub.describe(remote).contains("api.openai.com"));
    }
}
