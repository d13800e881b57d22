//! Which language model to use, from a TOML file and the environment (environment wins).
//!
//! File: `$PERSONKIT_CONFIG`, else `config.toml` next to the database, else `~/.dotperson/config.toml` (the same
//! file the embedder reads):
//!
//! ```toml
//! [llm]
//! kind = "openai"                      # none | openai | local (default none: nothing that needs a model runs)
//! base_url = "http://127.0.0.1:11434"  # openai: the server (with or without a trailing /v1)
//! model = "qwen2.5:7b-instruct"        # openai: the model name the server knows
//! api_key = "..."                      # openai: sent as a bearer token, never logged
//! model_path = "/path/to/model.gguf"   # local: a GGUF instruct model run in this process
//! timeout_ms = 120000                  # one call's wall-clock bound (1 s – 30 min)
//! max_tokens = 1024                    # most tokens one answer may hold
//! context_tokens = 8192                # most tokens a prompt may hold (default: the model's own, or 8192)
//! threads = 2                          # local: CPU threads
//! ```
//!
//! Environment: `PERSONKIT_LLM` (the kind), `PERSONKIT_LLM_BASE_URL`, `PERSONKIT_LLM_MODEL`,
//! `PERSONKIT_LLM_API_KEY`, `PERSONKIT_LLM_MODEL_PATH`, `PERSONKIT_LLM_TIMEOUT_MS`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::{ChatModel, LlmError};

/// One call's default wall-clock bound.
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// The shortest and longest wall-clock bound a setting may give.
pub const TIMEOUT_RANGE_MS: (u64, u64) = (1_000, 30 * 60 * 1_000);
/// The default bound on one answer's tokens.
pub const DEFAULT_MAX_TOKENS: u32 = 1024;

/// The model kinds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LlmKind {
    /// No model: the knowledge pipeline stays off and health says so.
    #[default]
    None,
    /// An OpenAI-compatible chat endpoint.
    Openai,
    /// A GGUF model run in this process.
    Local,
}

impl LlmKind {
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" | "off" | "" => Some(Self::None),
            "openai" => Some(Self::Openai),
            "local" => Some(Self::Local),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Openai => "openai",
            Self::Local => "local",
        }
    }
}

/// Language-model settings. `Debug` never prints the API key.
#[derive(Clone, Deserialize)]
#[serde(default)]
pub struct LlmConfig {
    #[serde(skip)]
    pub kind: LlmKind,
    #[serde(rename = "kind")]
    kind_raw: Option<String>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key: Option<String>,
    pub model_path: Option<PathBuf>,
    /// One call's wall-clock bound in milliseconds, kept within [`TIMEOUT_RANGE_MS`] by [`LlmConfig::load`].
    pub timeout_ms: u64,
    pub max_tokens: u32,
    pub context_tokens: Option<usize>,
    pub threads: Option<usize>,
    /// Where the settings came from, for `corpus health`.
    #[serde(skip)]
    pub source: String,
    /// The config file read, if any (other sections of it — `[knowledge]` — are read from the same file).
    #[serde(skip)]
    pub file: Option<PathBuf>,
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            kind: LlmKind::None,
            kind_raw: None,
            base_url: None,
            model: None,
            api_key: None,
            model_path: None,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            max_tokens: DEFAULT_MAX_TOKENS,
            context_tokens: None,
            threads: None,
            source: "default".into(),
            file: None,
        }
    }
}

impl std::fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmConfig")
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model_path", &self.model_path)
            .field("timeout_ms", &self.timeout_ms)
            .field("max_tokens", &self.max_tokens)
            .field("context_tokens", &self.context_tokens)
            .field("threads", &self.threads)
            .field("source", &self.source)
            .finish()
    }
}

#[derive(Deserialize, Default)]
struct FileConfig {
    #[serde(default)]
    llm: Option<LlmConfig>,
}

impl LlmConfig {
    /// A config of the given kind with nothing else set.
    pub fn of_kind(kind: LlmKind) -> Self {
        Self {
            kind,
            kind_raw: Some(kind.as_str().into()),
            source: "explicit".into(),
            ..Self::default()
        }
    }

    /// An `openai` config for `model` at `base_url` (tests, benchmarks).
    pub fn openai(base_url: &str, model: &str) -> Self {
        Self {
            base_url: Some(base_url.into()),
            model: Some(model.into()),
            ..Self::of_kind(LlmKind::Openai)
        }
    }

    /// Reads the config file (see the module doc) and applies the environment on top.
    pub fn load(db_path: Option<&Path>) -> Result<Self, LlmError> {
        Self::load_with(db_path, |k| std::env::var(k).ok())
    }

    /// [`LlmConfig::load`] with the environment given as a function (`HOME` included), so tests need not change
    /// the process's own.
    pub fn load_with(
        db_path: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, LlmError> {
        let env = |k: &str| env(k).filter(|v| !v.is_empty());
        let file = personkit_shared::settings_file::locate(db_path, env);
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
        set(&mut cfg.kind_raw, "PERSONKIT_LLM");
        set(&mut cfg.base_url, "PERSONKIT_LLM_BASE_URL");
        set(&mut cfg.model, "PERSONKIT_LLM_MODEL");
        set(&mut cfg.api_key, "PERSONKIT_LLM_API_KEY");
        let mut path = None;
        set(&mut path, "PERSONKIT_LLM_MODEL_PATH");
        let mut timeout = None;
        set(&mut timeout, "PERSONKIT_LLM_TIMEOUT_MS");
        if let Some(p) = path {
            cfg.model_path = Some(PathBuf::from(p));
        }
        if let Some(t) = timeout {
            cfg.timeout_ms = t.trim().parse().map_err(|_| {
                LlmError::Config(format!(
                    "PERSONKIT_LLM_TIMEOUT_MS={t:?} is not a number of milliseconds"
                ))
            })?;
        }
        cfg.timeout_ms = cfg.timeout_ms.clamp(TIMEOUT_RANGE_MS.0, TIMEOUT_RANGE_MS.1);
        if cfg.max_tokens == 0 {
            return Err(LlmError::Config(
                "[llm] max_tokens must be at least 1".into(),
            ));
        }
        cfg.kind = match cfg.kind_raw.as_deref() {
            Some(k) => LlmKind::parse(k).ok_or_else(|| {
                LlmError::Config(format!(
                    "unknown language model kind {k:?}; use none, openai or local"
                ))
            })?,
            None => LlmKind::None,
        };
        cfg.source = personkit_shared::settings_file::describe_source(file.as_deref(), from_env);
        cfg.file = file;
        Ok(cfg)
    }

    fn from_file(path: &Path) -> Result<Self, LlmError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LlmError::Config(format!("cannot read {}: {e}", path.display())))?;
        let parsed: FileConfig = toml::from_str(&text)
            .map_err(|e| LlmError::Config(format!("{}: {e}", path.display())))?;
        Ok(parsed.llm.unwrap_or_default())
    }

    /// This config with some of its keys replaced by `table` (a feature's own model, e.g. `[memory.mid.llm]`):
    /// any of `[llm]`'s keys, the rest kept. Unknown keys are an error naming them.
    pub fn overridden(&self, table: toml::Value) -> Result<Self, LlmError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Overrides {
            kind: Option<String>,
            base_url: Option<String>,
            model: Option<String>,
            api_key: Option<String>,
            model_path: Option<PathBuf>,
            timeout_ms: Option<u64>,
            max_tokens: Option<u32>,
            context_tokens: Option<usize>,
            threads: Option<usize>,
        }
        let o: Overrides = table
            .try_into()
            .map_err(|e| LlmError::Config(format!("model override: {e}")))?;
        let mut cfg = self.clone();
        if let Some(k) = o.kind {
            cfg.kind = LlmKind::parse(&k).ok_or_else(|| {
                LlmError::Config(format!(
                    "unknown language model kind {k:?}; use none, openai or local"
                ))
            })?;
            cfg.kind_raw = Some(k);
        }
        cfg.base_url = o.base_url.or(cfg.base_url);
        cfg.model = o.model.or(cfg.model);
        cfg.api_key = o.api_key.or(cfg.api_key);
        cfg.model_path = o.model_path.or(cfg.model_path);
        cfg.context_tokens = o.context_tokens.or(cfg.context_tokens);
        cfg.threads = o.threads.or(cfg.threads);
        if let Some(t) = o.timeout_ms {
            cfg.timeout_ms = t.clamp(TIMEOUT_RANGE_MS.0, TIMEOUT_RANGE_MS.1);
        }
        if let Some(m) = o.max_tokens {
            if m == 0 {
                return Err(LlmError::Config("max_tokens must be at least 1".into()));
            }
            cfg.max_tokens = m;
        }
        Ok(cfg)
    }

    /// One call's wall-clock bound.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// What is configured, in a line for health: `openai gpt-4o-mini at https://…`, `local SmolLM2… (in process)`,
    /// `none`.
    pub fn describe(&self) -> String {
        match self.kind {
            LlmKind::None => "none".into(),
            LlmKind::Openai => format!(
                "openai {} at {}",
                self.model.as_deref().unwrap_or("(model not set)"),
                self.base_url
                    .as_deref()
                    .map_or_else(|| "(base_url not set)".to_owned(), shown_url)
            ),
            LlmKind::Local => match self.model_path.as_deref().and_then(Path::file_stem) {
                Some(name) => format!("local {} (in process)", name.to_string_lossy()),
                None => "local (model_path not set)".into(),
            },
        }
    }
}

/// Model files smaller than this have their weights expanded to f32 when loaded (see [`crate::LocalOptions`]).
pub const EXPAND_BELOW_BYTES: u64 = 300 * 1024 * 1024;

/// A URL as personkit shows it (health, errors, the audit log): without a `user:password@` part and without a
/// query string or fragment, where keys are sometimes put. Requests still go to the URL as configured.
pub fn shown_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let rest = &rest[..end];
    let host_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(host_end);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if scheme.is_empty() {
        format!("{host}{path}")
    } else {
        format!("{scheme}://{host}{path}")
    }
}

/// The configured model, or `None` for kind `none`.
pub fn open(cfg: &LlmConfig) -> Result<Option<Arc<dyn ChatModel>>, LlmError> {
    match cfg.kind {
        LlmKind::None => Ok(None),
        LlmKind::Openai => Ok(Some(Arc::new(crate::OpenAiChat::new(cfg)?))),
        LlmKind::Local => {
            let Some(path) = cfg.model_path.as_deref() else {
                return Err(LlmError::NotConfigured(
                    "local needs model_path (PERSONKIT_LLM_MODEL_PATH): a GGUF instruct model"
                        .into(),
                ));
            };
            // A small model's weights are expanded to f32 at load: prompt reading is then an order of magnitude
            // faster on CPU, for at most a few GB of memory.
            let small = std::fs::metadata(path).is_ok_and(|m| m.len() < EXPAND_BELOW_BYTES);
            let opts = crate::LocalOptions {
                context_tokens: cfg.context_tokens,
                threads: cfg.threads,
                expand_weights: small,
            };
            Ok(Some(Arc::new(crate::LocalModel::open(path, opts)?)))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    #[test]
    fn shown_urls_keep_no_credentials_or_query() {
        assert_eq!(
            shown_url("https://user:s3cret@api.example.com/v1/chat/completions?key=abc#x"),
            "https://api.example.com/v1/chat/completions"
        );
        assert_eq!(
            shown_url("http://127.0.0.1:11434/v1"),
            "http://127.0.0.1:11434/v1"
        );
        assert_eq!(shown_url("host:1/p?q"), "host:1/p");
        let cfg = LlmConfig::openai("https://k:pw@api.example.com/v1?token=t", "m");
        assert_eq!(cfg.describe(), "openai m at https://api.example.com/v1");
    }

    use super::*;

    #[test]
    fn kinds_parse_and_print_back() {
        for k in [LlmKind::None, LlmKind::Openai, LlmKind::Local] {
            assert_eq!(LlmKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(LlmKind::parse(" OpenAI "), Some(LlmKind::Openai));
        assert_eq!(LlmKind::parse("ollama"), None);
    }

    /// An environment of exactly `vars`, with `HOME` at `home`.
    fn env_of<'a>(
        home: &'a Path,
        vars: &'a [(&'a str, &'a str)],
    ) -> impl Fn(&str) -> Option<String> + 'a {
        move |k: &str| {
            if k == "HOME" {
                return Some(home.display().to_string());
            }
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn nothing_set_means_none_and_no_model() {
        let home = tempfile::tempdir().unwrap();
        let cfg = LlmConfig::load_with(None, env_of(home.path(), &[])).unwrap();
        assert_eq!(cfg.kind, LlmKind::None);
        assert_eq!(cfg.source, "default");
        assert_eq!(cfg.timeout(), Duration::from_millis(DEFAULT_TIMEOUT_MS));
        assert_eq!(cfg.max_tokens, DEFAULT_MAX_TOKENS);
        assert_eq!(cfg.describe(), "none");
        assert!(open(&cfg).unwrap().is_none());
    }

    #[test]
    fn the_file_next_to_the_database_then_the_environment_on_top() {
        let home = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.toml"),
            "[embedder]\nkind = \"none\"\n\n[llm]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:11434\"\n\
             model = \"file-model\"\napi_key = \"sk-from-file\"\ntimeout_ms = 5\nmax_tokens = 256\n\
             context_tokens = 4096\n",
        )
        .unwrap();
        let db = dir.path().join("corpus.db");
        let cfg = LlmConfig::load_with(Some(&db), env_of(home.path(), &[])).unwrap();
        assert_eq!(cfg.kind, LlmKind::Openai);
        assert_eq!(cfg.model.as_deref(), Some("file-model"));
        assert_eq!(cfg.api_key.as_deref(), Some("sk-from-file"));
        assert_eq!(
            cfg.timeout_ms, TIMEOUT_RANGE_MS.0,
            "5 ms is raised to the floor"
        );
        assert_eq!((cfg.max_tokens, cfg.context_tokens), (256, Some(4096)));
        assert!(cfg.source.ends_with("config.toml"), "{}", cfg.source);
        assert_eq!(
            cfg.describe(),
            "openai file-model at http://127.0.0.1:11434"
        );

        let vars = [
            ("PERSONKIT_LLM_MODEL", "env-model"),
            ("PERSONKIT_LLM_API_KEY", "sk-from-env"),
            ("PERSONKIT_LLM_TIMEOUT_MS", "36000000"),
        ];
        let cfg = LlmConfig::load_with(Some(&db), env_of(home.path(), &vars)).unwrap();
        assert_eq!(cfg.model.as_deref(), Some("env-model"));
        assert_eq!(cfg.base_url.as_deref(), Some("http://127.0.0.1:11434"));
        assert_eq!(cfg.api_key.as_deref(), Some("sk-from-env"));
        assert_eq!(
            cfg.timeout_ms, TIMEOUT_RANGE_MS.1,
            "10 hours is cut to 30 minutes"
        );
        assert!(
            cfg.source.ends_with("config.toml + environment"),
            "{}",
            cfg.source
        );
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("sk-from"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");

        // The kind from the environment wins too.
        let vars = [("PERSONKIT_LLM", "none")];
        let cfg = LlmConfig::load_with(Some(&db), env_of(home.path(), &vars)).unwrap();
        assert_eq!(cfg.kind, LlmKind::None);
    }

    #[test]
    fn personkit_config_wins_and_the_home_file_is_the_fallback() {
        let home = tempfile::tempdir().unwrap();
        let dot = home.path().join(".dotperson");
        std::fs::create_dir_all(&dot).unwrap();
        std::fs::write(
            dot.join("config.toml"),
            "[llm]\nkind = \"local\"\nmodel_path = \"/models/SmolLM2-135M-Instruct.Q4_1.gguf\"\nthreads = 2\n",
        )
        .unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let db = elsewhere.path().join("corpus.db");
        let cfg = LlmConfig::load_with(Some(&db), env_of(home.path(), &[])).unwrap();
        assert_eq!(cfg.kind, LlmKind::Local);
        assert_eq!(cfg.threads, Some(2));
        assert_eq!(
            cfg.describe(),
            "local SmolLM2-135M-Instruct.Q4_1 (in process)"
        );

        let explicit = elsewhere.path().join("mine.toml");
        std::fs::write(
            &explicit,
            "[llm]\nkind = \"openai\"\nbase_url = \"http://h\"\nmodel = \"m\"\n",
        )
        .unwrap();
        let vars = [("PERSONKIT_CONFIG", explicit.to_str().unwrap())];
        let cfg = LlmConfig::load_with(Some(&db), env_of(home.path(), &vars)).unwrap();
        assert_eq!(cfg.kind, LlmKind::Openai);
        assert_eq!(cfg.source, explicit.display().to_string());

        let vars = [(
            "PERSONKIT_LLM_MODEL_PATH",
            "/other/gemma-3-270m.Q4_K_M.gguf",
        )];
        let cfg = LlmConfig::load_with(Some(&db), env_of(home.path(), &vars)).unwrap();
        assert_eq!(cfg.describe(), "local gemma-3-270m.Q4_K_M (in process)");
    }

    #[test]
    fn bad_settings_are_config_errors_that_name_what_is_allowed() {
        let home = tempfile::tempdir().unwrap();
        let err = LlmConfig::load_with(None, env_of(home.path(), &[("PERSONKIT_LLM", "ollama")]))
            .unwrap_err();
        assert!(matches!(err, LlmError::Config(_)), "{err:?}");
        assert!(err.to_string().contains("none, openai or local"), "{err}");

        let err = LlmConfig::load_with(
            None,
            env_of(home.path(), &[("PERSONKIT_LLM_TIMEOUT_MS", "two minutes")]),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("PERSONKIT_LLM_TIMEOUT_MS"),
            "{err}"
        );

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "[llm]\nkind = \"gpt\"\n").unwrap();
        let vars = [("PERSONKIT_CONFIG", file.to_str().unwrap())];
        let err = LlmConfig::load_with(None, env_of(home.path(), &vars)).unwrap_err();
        assert!(err.to_string().contains("\"gpt\""), "{err}");

        std::fs::write(&file, "[llm]\ntimeout_ms = \"soon\"\n").unwrap();
        let err = LlmConfig::load_with(None, env_of(home.path(), &vars)).unwrap_err();
        assert!(err.to_string().contains("c.toml"), "{err}");
    }

    #[test]
    fn local_without_a_model_path_says_what_to_set() {
        let err = open(&LlmConfig::of_kind(LlmKind::Local)).unwrap_err();
        assert!(matches!(err, LlmError::NotConfigured(_)), "{err:?}");
        assert!(
            err.to_string().contains("PERSONKIT_LLM_MODEL_PATH"),
            "{err}"
        );
    }
}
