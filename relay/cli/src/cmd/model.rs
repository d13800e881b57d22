//! `personkit model fetch`: install the local embedding model.

use std::path::PathBuf;

use anyhow::{Context, anyhow};
use personkit_embed as embed;

/// `personkit model fetch`.
#[derive(Debug, clap::Args)]
pub struct ModelFetchArgs {
    /// Take the model from this directory (model.safetensors, tokenizer.json, config.json) instead of the hub.
    #[arg(long)]
    pub from_dir: Option<PathBuf>,
    /// Install into this directory (default ~/.dotperson/models/all-MiniLM-L6-v2).
    #[arg(long)]
    pub to: Option<PathBuf>,
}

/// Where the default model comes from on a machine with internet.
pub const HUB_URL: &str =
    "https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2/resolve/main";

pub fn run_model_fetch(a: &ModelFetchArgs) -> anyhow::Result<()> {
    let to =
        a.to.clone()
            .unwrap_or_else(embed::config::default_model_dir);
    std::fs::create_dir_all(&to).with_context(|| format!("cannot create {}", to.display()))?;
    match &a.from_dir {
        Some(src) => {
            embed::local::validate_dir(src).map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))?;
            if src.canonicalize().ok() != to.canonicalize().ok() {
                for f in embed::local::REQUIRED_FILES
                    .iter()
                    .chain(["sentence_bert_config.json"].iter())
                {
                    let from = src.join(f);
                    if from.is_file() {
                        std::fs::copy(&from, to.join(f)).with_context(|| {
                            format!("cannot copy {} to {}", from.display(), to.display())
                        })?;
                    }
                }
            }
        }
        None => {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .timeout_global(Some(std::time::Duration::from_secs(30)))
                .build()
                .into();
            for f in embed::local::REQUIRED_FILES {
                let url = format!("{HUB_URL}/{f}");
                let mut resp = agent.get(&url).call().map_err(|e| {
                    anyhow!(
                        "cannot download {url}: {e}\nhint: without internet access, copy the model folder here and run `personkit model fetch --from-dir DIR`"
                    )
                })?;
                let mut file = std::fs::File::create(to.join(f))?;
                std::io::copy(
                    &mut resp.body_mut().with_config().limit(1 << 30).reader(),
                    &mut file,
                )?;
            }
        }
    }
    let dim = embed::local::validate_dir(&to).map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))?;
    let model =
        embed::local::LocalEmbedder::load(&to).map_err(|e| anyhow!("{e}\nhint: {}", e.hint()))?;
    println!(
        "model ready: {} ({dim}-d, {}) in {}\nuse it with PERSONKIT_EMBEDDER=local (the default when this folder exists)",
        embed::Embedder::model_id(&model),
        embed::Embedder::model_version(&model),
        to.display()
    );
    Ok(())
}
