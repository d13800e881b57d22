//! Which embedder to use, from a TOML file and the environment (environment wins).
//!
//! File: `$PERSONKIT_CONFIG`, else `config.toml` next to the database, else `~/.dotperson/config.toml`:
//!
//! ```toml
//! [embedder]
//! kind = "local"                 # none | local | openai | vertex
//! model_dir = "/path/to/all-MiniLM-L6-v2"
//! # openai: base_url = "http://127.0.0.1:11434", model = "nomic-embed-text", dim = 768, api_key = "..."
//! # vertex: project = "my-proj", location = "us-central1", token = "...", model = "text-embedding-005"
//! scrub = "auto"                 # auto | on | off: replace e-mails, phone numbers and amounts in text sent to a
//!                                # remote embedder (auto: whenever the endpoint is not on loopback)
//! ```
//!
//! Environment: `PERSONKIT_EMBEDDER`, `PERSONKIT_MODEL_DIR`, `PERSONKIT_OPENAI_BASE_URL`, `PERSONKIT_OPENAI_MODEL`,
//! `PERSONKIT_OPENAI_DIM`, `PERSONKIT_OPENAI_API_KEY` (or `OPENAI_API_KEY`), `PERSONKIT_VERTEX_PROJECT`,
//! `PERSONKIT_VERTEX_LOCATION`, `PERSONKIT_VERTEX_TOKEN`, `PERSONKIT_VERTEX_ENDPOINT` (a base URL replacing
//! `https://<location>-aiplatform.googleapis.com`), `PERSONKIT_EMBED_SCRUB` (auto | on | off). Without any setting the kind is `local` when the default model
//! directory `~/.dotperson/models/all-MiniLM-L6-v2` exists and `none` otherwise.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::EmbedError;

/// The embedder kinds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbedderKind {
    #[default]
    None,
    Local,
    Openai,
    Vertex,
}

impl EmbedderKind {
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" | "off" | "" => Some(Self::None),
            "local" => Some(Self::Local),
            "openai" => Some(Self::Openai),
            "vertex" => Some(Self::Vertex),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Local => "local",
            Self::Openai => "openai",
            Self::Vertex => "vertex",
        }
    }
}

/// Whether text sent to an embedder is scrubbed of personal details first (`personkit_shared::scrub`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ScrubMode {
    /// Scrub when the endpoint is not on loopback (the default).
    #[default]
    Auto,
    /// Always scrub what is sent to an endpoint.
    On,
    /// Never scrub: the user said so explicitly.
    Off,
}

impl ScrubMode {
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Some(Self::Auto),
            "on" | "true" | "yes" => Some(Self::On),
            "off" | "false" | "no" => Some(Self::Off),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::On => "on",
            Self::Off => "off",
        }
    }
}

/// The default local model's folder name under `~/.dotperson/models/`.
pub const DEFAULT_MODEL_NAME: &str = "all-MiniLM-L6-v2";

/// Embedder settings. `Debug` never prints the API key or token.
#[derive(Clone, Default, Deserialize)]
#[serde(default)]
pub struct EmbedderConfig {
    #[serde(skip)]
    pub kind: EmbedderKind,
    #[serde(rename = "kind")]
    kind_raw: Option<String>,
    pub model_dir: Option<PathBuf>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub dim: Option<usize>,
    pub api_key: Option<String>,
    pub project: Option<String>,
    pub location: Option<String>,
    pub token: Option<String>,
    pub endpoint: Option<String>,
    /// How long a search waits for its query's embedding from an endpoint, in milliseconds (default
    /// [`crate::QUERY_TIMEOUT`], kept within 100 ms – 60 s); past it the search answers from its other signals.
    pub query_timeout_ms: Option<u64>,
    #[serde(skip)]
    pub scrub: ScrubMode,
    #[serde(rename = "scrub")]
    scrub_raw: Option<String>,
    /// Where the settings came from, for `corpus health`.
    #[serde(skip)]
    pub source: String,
}

impl std::fmt::Debug for EmbedderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redact = |o: &Option<String>| o.as_ref().map(|_| "<redacted>");
        f.debug_struct("EmbedderConfig")
            .field("kind", &self.kind)
            .field("model_dir", &self.model_dir)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("dim", &self.dim)
            .field("api_key", &redact(&self.api_key))
            .field("project", &self.project)
            .field("location", &self.location)
            .field("token", &redact(&self.token))
            .field("endpoint", &self.endpoint)
            .field("query_timeout_ms", &self.query_timeout_ms)
            .field("scrub", &self.scrub)
            .field("source", &self.source)
            .finish()
    }
}

#[derive(Deserialize, Default)]
struct FileConfig {
    #[serde(default)]
    embedder: Option<EmbedderConfig>,
}

/// `~/.dotperson`.
pub fn dotperson_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
        .join(".dotperson")
}

/// `~/.dotperson/models/all-MiniLM-L6-v2`.
pub fn default_model_dir() -> PathBuf {
    dotperson_dir().join("models").join(DEFAULT_MODEL_NAME)
}

impl EmbedderConfig {
    /// A config of the given kind with nothing else set.
    pub fn of_kind(kind: EmbedderKind) -> Self {
        Self {
            kind,
            source: "explicit".into(),
            ..Self::default()
        }
    }

    /// Reads the config file (see the module doc) and applies the environment on top.
    pub fn load(db_path: Option<&Path>) -> Result<Self, EmbedError> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let file = personkit_shared::settings_file::locate(db_path, |k| std::env::var(k).ok());
        let mut cfg = match &file {
            Some(path) => Self::from_file(path)?,
            None => Self::default(),
        };
        let mut from_env = false;
        let mut set = |slot: &mut Option<String>, key: &str| {
            if let Some(v) = env(key) {
                *slot = Some(v);
                from_env = true;
            }
        };
        set(&mut cfg.kind_raw, "PERSONKIT_EMBEDDER");
        set(&mut cfg.base_url, "PERSONKIT_OPENAI_BASE_URL");
        set(&mut cfg.api_key, "OPENAI_API_KEY");
        set(&mut cfg.api_key, "PERSONKIT_OPENAI_API_KEY");
        set(&mut cfg.project, "PERSONKIT_VERTEX_PROJECT");
        set(&mut cfg.location, "PERSONKIT_VERTEX_LOCATION");
        set(&mut cfg.token, "PERSONKIT_VERTEX_TOKEN");
        set(&mut cfg.endpoint, "PERSONKIT_VERTEX_ENDPOINT");
        set(&mut cfg.scrub_raw, "PERSONKIT_EMBED_SCRUB");
        let mut model = None;
        set(&mut model, "PERSONKIT_OPENAI_MODEL");
        if model.is_some() {
            cfg.model = model;
        }
        if let Some(d) = env("PERSONKIT_MODEL_DIR") {
            cfg.model_dir = Some(PathBuf::from(d));
            from_env = true;
        }
        if let Some(d) = env("PERSONKIT_OPENAI_DIM") {
            cfg.dim = Some(d.parse().map_err(|_| {
                EmbedError::Config(format!("PERSONKIT_OPENAI_DIM={d:?} is not a number"))
            })?);
            from_env = true;
        }
        cfg.kind = match cfg.kind_raw.as_deref() {
            Some(k) => EmbedderKind::parse(k).ok_or_else(|| {
                EmbedError::Config(format!(
                    "unknown embedder kind {k:?}; use none, local, openai or vertex"
                ))
            })?,
            None if cfg.model_dir.is_some()
                || default_model_dir().join("model.safetensors").is_file() =>
            {
                EmbedderKind::Local
            }
            None => EmbedderKind::None,
        };
        cfg.scrub = match cfg.scrub_raw.as_deref() {
            Some(s) => ScrubMode::parse(s).ok_or_else(|| {
                EmbedError::Config(format!("unknown scrub setting {s:?}; use auto, on or off"))
            })?,
            None => ScrubMode::Auto,
        };
        cfg.source = personkit_shared::settings_file::describe_source(file.as_deref(), from_env);
        Ok(cfg)
    }

    fn from_file(path: &Path) -> Result<Self, EmbedError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| EmbedError::Config(format!("cannot read {}: {e}", path.display())))?;
        let parsed: FileConfig = toml::from_str(&text)
            .map_err(|e| EmbedError::Config(format!("{}: {e}", path.display())))?;
        Ok(parsed.embedder.unwrap_or_default())
    }

    /// How long a search waits for its query's embedding ([`EmbedderConfig::query_timeout_ms`]).
    pub fn query_timeout(&self) -> std::time::Duration {
        self.query_timeout_ms
            .map(|ms| std::time::Duration::from_millis(ms.clamp(100, 60_000)))
            .unwrap_or(crate::QUERY_TIMEOUT)
    }

    /// The local model directory (configured, or the default one).
    pub fn local_model_dir(&self) -> PathBuf {
        self.model_dir.clone().unwrap_or_else(default_model_dir)
    }

    /// Sets the kind explicitly (tests, benchmarks).
    pub fn with_kind(mut self, kind: EmbedderKind) -> Self {
        self.kind = kind;
        self.kind_raw = Some(kind.as_str().into());
        self
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_secrets() {
        let cfg = EmbedderConfig {
            api_key: Some("sk-secret".into()),
            token: Some("ya29.secret".into()),
            ..EmbedderConfig::of_kind(EmbedderKind::Openai)
        };
        let s = format!("{cfg:?}");
        assert!(!s.contains("secret"), "{s}");
        assert!(s.contains("<redacted>"));
    }

    #[test]
    fn file_config_parses() {
        let parsed: FileConfig = toml::from_str(
            "[embedder]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\nmodel = \"m\"\ndim = 768\n",
        )
        .expect("parses");
        let e = parsed.embedder.expect("has embedder");
        assert_eq!(e.kind_raw.as_deref(), Some("openai"));
        assert_eq!(e.dim, Some(768));
    }
}
