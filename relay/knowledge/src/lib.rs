//! `personkit-knowledge`: from transcripts to knowledge the user approves.
//!
//! A pass ([`run::run_once`]; daily at `[knowledge] hour`, 22:00 local by default, or `personkit knowledge run
//! --once`) pulls the turns stored since the last pass from the signal layer (`persona_observations`), cuts each
//! thread into windows ([`window`]), scrubs what leaves the machine ([`privacy`]), asks the configured model
//! (`personkit-llm`) for at most eight entries per window under the rubric ([`prompt`]), has every candidate
//! judged (keep, grounded, distinctive — all three, fail-closed), validates them mechanically ([`validate`]),
//! reconciles them with what is known ([`reconcile`]: reinforce, variant, or new) and stores them **pending**.
//! Agents may propose entries too ([`propose`]), never approve them. Only approved entries reach agents and
//! exports; every model call and decision is in the audit log.
//!
//! **Invariant:** nothing a model produced is readable by an agent before the user approved it: the store's
//! readers for agents filter on `status = 'approved'`, and this crate never writes any other status.
//! **Invariant:** text for a model outside this process or loopback is scrubbed unless `scrub = "off"` was set.

pub mod decisions;
pub mod privacy;
pub mod prompt;
pub mod propose;
pub mod reconcile;
pub mod run;
pub mod validate;
pub mod window;

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use personkit_embed::ScrubMode;
use personkit_store::Connection;
use personkit_store::DbError;
use personkit_store::knowledge as rows;

pub use run::{Progress, Report, run_once};

/// Why a pass or a proposal could not be made.
#[derive(Debug, thiserror::Error)]
pub enum KnowledgeError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("config: {0}")]
    Config(String),
}

impl KnowledgeError {
    pub fn hint(&self) -> &'static str {
        match self {
            KnowledgeError::Db(_) => "check the corpus with `personkit corpus health`",
            KnowledgeError::Config(_) => {
                "fix [knowledge] in ~/.dotperson/config.toml (hour, window_tokens, scrub = auto|on|off, names, user_names)"
            }
        }
    }
}

/// The pipeline's settings (`[knowledge]` in the config file).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Local hour of the daily pass.
    pub hour: u8,
    /// Most tokens of conversation one extraction call reads (further bounded by the model's context).
    pub window_tokens: usize,
    pub scrub: ScrubMode,
    /// Pseudonymise people's names in scrubbed text.
    pub names: bool,
    /// Names always treated as people's (the user's own, contacts).
    pub user_names: Vec<String>,
    /// Most turns one pass reads (the rest waits for the next).
    pub max_turns_per_run: u32,
    /// Most tokens a model may write per call.
    pub max_tokens: u32,
    /// Longest a call may take.
    pub call_timeout: Duration,
    /// Most proposals one agent may file per hour.
    pub proposals_per_hour: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            hour: 22,
            window_tokens: 3_000,
            scrub: ScrubMode::Auto,
            names: true,
            user_names: Vec::new(),
            max_turns_per_run: 5_000,
            max_tokens: 1_024,
            call_timeout: Duration::from_secs(300),
            proposals_per_hour: 20,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Section {
    hour: Option<u8>,
    window_tokens: Option<usize>,
    scrub: Option<String>,
    names: Option<bool>,
    user_names: Option<Vec<String>>,
    max_turns_per_run: Option<u32>,
    proposals_per_hour: Option<u32>,
}

#[derive(Deserialize, Default)]
struct File {
    #[serde(default)]
    knowledge: Option<toml::Value>,
}

impl Settings {
    /// `[knowledge]` from the config file at `path` (if any), over the defaults.
    pub fn load(path: Option<&Path>) -> Result<Settings, KnowledgeError> {
        let mut s = Settings::default();
        let Some(path) = path else { return Ok(s) };
        let text = std::fs::read_to_string(path)
            .map_err(|e| KnowledgeError::Config(format!("cannot read {}: {e}", path.display())))?;
        let file: File = toml::from_str(&text)
            .map_err(|e| KnowledgeError::Config(format!("{}: {e}", path.display())))?;
        let Some(section) = file.knowledge else {
            return Ok(s);
        };
        let k: Section = section
            .try_into()
            .map_err(|e| KnowledgeError::Config(format!("{} [knowledge]: {e}", path.display())))?;
        if let Some(h) = k.hour {
            if h > 23 {
                return Err(KnowledgeError::Config(format!("hour = {h}: use 0 to 23")));
            }
            s.hour = h;
        }
        if let Some(w) = k.window_tokens {
            s.window_tokens = w.clamp(300, 100_000);
        }
        if let Some(m) = k.scrub {
            s.scrub = ScrubMode::parse(&m).ok_or_else(|| {
                KnowledgeError::Config(format!("scrub = {m:?}: use auto, on or off"))
            })?;
        }
        s.names = k.names.unwrap_or(s.names);
        s.user_names = k.user_names.unwrap_or_default();
        if let Some(n) = k.max_turns_per_run {
            s.max_turns_per_run = n.clamp(1, 100_000);
        }
        if let Some(n) = k.proposals_per_hour {
            s.proposals_per_hour = n.min(1_000);
        }
        Ok(s)
    }
}

/// The key of the pseudonyms, made once per corpus and kept in it (never sent, never exported).
pub fn pseudonym_key(conn: &Connection) -> Result<[u8; 32], DbError> {
    if let Some(key) = rows::state(conn, "pseudonym_key")?.and_then(|hex| decode_key(&hex)) {
        return Ok(key);
    }
    let mut key = [0u8; 32];
    getrandom::fill(&mut key)
        .map_err(|e| DbError::Invalid(format!("no randomness for the pseudonym key: {e}")))?;
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    rows::set_state(conn, "pseudonym_key", Some(&hex))?;
    Ok(key)
}

fn decode_key(hex: &str) -> Option<[u8; 32]> {
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
        })
        .collect::<Option<_>>()?;
    bytes.try_into().ok()
}

/// What `corpus health` and the dashboard say about the pipeline.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Health {
    /// `on` with a model configured; `off` (the default) without one.
    pub pipeline: &'static str,
    /// The configured model (`describe` of the `[llm]` settings), or why there is none.
    pub model: String,
    /// What happens to text on its way to the model.
    pub scrubbing: String,
    /// Local hour of the daily pass.
    pub hour: u8,
    pub entries: rows::Counts,
    /// The last pass's report.
    pub last_run: Option<serde_json::Value>,
    /// The open alert (a judge that failed and dropped a batch, a model that did not answer).
    pub alert: Option<serde_json::Value>,
}

/// The pipeline's health under `llm` (loaded by the caller; `Err` is a broken configuration, shown as such).
pub fn health(
    conn: &Connection,
    llm: &Result<personkit_llm::LlmConfig, personkit_llm::LlmError>,
) -> Result<Health, DbError> {
    let json = |k: &str| -> Result<Option<serde_json::Value>, DbError> {
        Ok(rows::state(conn, k)?.and_then(|s| serde_json::from_str(&s).ok()))
    };
    let (pipeline, model, settings, endpoint) = match llm {
        Ok(c) if c.kind != personkit_llm::LlmKind::None => (
            "on",
            c.describe(),
            Settings::load(c.file.as_deref()).unwrap_or_default(),
            match c.kind {
                personkit_llm::LlmKind::Openai => c.base_url.clone(),
                _ => None,
            },
        ),
        Ok(_) => (
            "off",
            "none configured: set [llm] in the config file to turn the knowledge pipeline on"
                .to_owned(),
            Settings::default(),
            None,
        ),
        Err(e) => (
            "off",
            format!("configuration error: {e}"),
            Settings::default(),
            None,
        ),
    };
    let decision = personkit_embed::scrub::Decision::of(settings.scrub, endpoint.as_deref());
    Ok(Health {
        pipeline,
        model,
        scrubbing: decision.describe_replacing(
            endpoint.as_deref(),
            if settings.names {
                "secrets, e-mails, phone numbers, amounts and people's names"
            } else {
                "secrets, e-mails, phone numbers and amounts"
            },
        ),
        hour: settings.hour,
        entries: rows::counts(conn)?,
        last_run: json("last_run")?,
        alert: json("alert")?,
    })
}
