//! Running a tier the way every front end does (the CLI, `/v1/distill/{tier}`, the schedule): the settings read
//! from the config file the `[llm]` settings come from, the tier's model opened for the run only.

use std::path::Path;

use time::{OffsetDateTime, UtcOffset};

use personkit_llm::{LlmConfig, LlmError, LlmKind};
use personkit_store::Connection;

use crate::{LastRun, MemoryError, Settings, Tier, distill, short};

/// Everything a run reads from the configuration.
#[derive(Debug, Clone)]
pub struct Configured {
    pub settings: Settings,
    pub knowledge: personkit_knowledge::Settings,
    pub llm: Result<LlmConfig, String>,
}

impl Configured {
    /// The settings for the corpus at `db_path` (its config file, then the environment). A broken `[llm]` is kept
    /// as an error for the tiers that need a model; a broken `[memory]` is an error now.
    pub fn load(db_path: &Path) -> Result<Configured, MemoryError> {
        Self::from_llm(LlmConfig::load(Some(db_path)))
    }

    /// The settings of the file `llm` was read from.
    pub fn from_llm(llm: Result<LlmConfig, LlmError>) -> Result<Configured, MemoryError> {
        let file = llm.as_ref().ok().and_then(|c| c.file.clone());
        let settings = Settings::load(file.as_deref())?;
        let mut knowledge = personkit_knowledge::Settings::load(file.as_deref())
            .map_err(|e| MemoryError::Config(e.to_string()))?;
        if let Ok(c) = &llm {
            knowledge.call_timeout = c.timeout();
        }
        Ok(Configured {
            settings,
            knowledge,
            llm: llm.map_err(|e| e.to_string()),
        })
    }

    /// The `[llm]` settings as `status` takes them.
    pub fn llm_result(&self) -> Result<LlmConfig, LlmError> {
        self.llm.clone().map_err(LlmError::Config)
    }
}

/// Runs `tier` now: short is assembled; mid and long open their model (`[llm]` with `[memory.<tier>.llm]` over it)
/// for this run only.
pub fn run_tier(
    conn: &Connection,
    tier: Tier,
    cfg: &Configured,
    now: OffsetDateTime,
    local: UtcOffset,
    trigger: &str,
) -> Result<LastRun, MemoryError> {
    if tier == Tier::Short {
        return short::run(conn, &cfg.settings, now, local, trigger);
    }
    if !cfg.settings.tier(tier).enabled {
        return Err(MemoryError::Off(format!(
            "the {0} tier is off: set [memory.{0}] enabled = true to run it",
            tier.as_str()
        )));
    }
    let base = cfg
        .llm
        .clone()
        .map_err(|e| MemoryError::Config(format!("[llm]: {e}")))?;
    let llm = cfg.settings.llm_for(tier, &base)?;
    if llm.kind == LlmKind::None {
        return Err(MemoryError::Off(format!(
            "the {} tier needs a language model and none is configured",
            tier.as_str()
        )));
    }
    let Some(model) = personkit_llm::open(&llm)? else {
        return Err(MemoryError::Off("no language model".into()));
    };
    let mut knowledge = cfg.knowledge.clone();
    knowledge.call_timeout = llm.timeout();
    distill::run(
        conn,
        tier,
        &cfg.settings,
        &knowledge,
        model.as_ref(),
        now,
        trigger,
    )
}
