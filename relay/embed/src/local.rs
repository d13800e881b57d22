//! The `local` embedder: a BERT sentence-embedding model (all-MiniLM-L6-v2 by default) on CPU.
//! Mean pooling over the real tokens, then L2 normalisation, as sentence-transformers does for this model.
//!
//! Two engines compute the same function: [`Engine::Packed`] (`crate::encoder`, batches packed without padding;
//! the default wherever the architecture allows) and [`Engine::Candle`] (candle-transformers' `BertModel` on padded
//! batches; used for architectures the packed encoder refuses, and as the reference the packed one is tested and
//! benchmarked against).

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use sha2::{Digest, Sha256};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use super::encoder::{BertConfig, Encoder, Tokens};
use super::{EmbedError, Embedder};

/// Files a model directory must hold.
pub const REQUIRED_FILES: [&str; 3] = ["model.safetensors", "tokenizer.json", "config.json"];

/// Texts per forward pass of the candle engine.
const BATCH: usize = 32;

/// Tokens per forward pass of the packed engine (its matrices then hold a few thousand rows: large enough for the
/// kernels to run at full speed, small enough to keep memory at tens of MB).
const PACKED_TOKENS: usize = 4096;

/// Which implementation runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// `crate::encoder`: packed batches, no padding.
    Packed,
    /// candle-transformers' `BertModel` on padded batches.
    Candle,
}

enum Model {
    Packed(Encoder),
    Candle(Box<BertModel>),
}

/// A loaded local model.
pub struct LocalEmbedder {
    model: Model,
    tokenizer: Tokenizer,
    model_id: String,
    version: String,
    dim: usize,
    dir: PathBuf,
}

impl std::fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("engine", &self.engine())
            .field("model_id", &self.model_id)
            .field("version", &self.version)
            .field("dim", &self.dim)
            .field("dir", &self.dir)
            .finish()
    }
}

fn model_err(dir: &Path, message: impl Into<String>) -> EmbedError {
    EmbedError::Model {
        dir: dir.display().to_string(),
        message: message.into(),
    }
}

/// Checks that `dir` holds a loadable model layout (files present, config parses, dimension supported).
/// Returns the hidden size.
pub fn validate_dir(dir: &Path) -> Result<usize, EmbedError> {
    for f in REQUIRED_FILES {
        if !dir.join(f).is_file() {
            return Err(model_err(dir, format!("missing {f}")));
        }
    }
    let config = read_config(dir)?;
    super::check_dim(config.hidden_size)?;
    Tokenizer::from_file(dir.join("tokenizer.json"))
        .map_err(|e| model_err(dir, format!("tokenizer.json: {e}")))?;
    Ok(config.hidden_size)
}

fn read_config(dir: &Path) -> Result<Config, EmbedError> {
    let text = std::fs::read_to_string(dir.join("config.json"))
        .map_err(|e| model_err(dir, format!("config.json: {e}")))?;
    serde_json::from_str(&text).map_err(|e| model_err(dir, format!("config.json: {e}")))
}

/// sentence-transformers' `max_seq_length` when the folder says it, else the model's position limit.
fn max_seq_len(dir: &Path, config: &Config) -> usize {
    std::fs::read_to_string(dir.join("sentence_bert_config.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("max_seq_length").and_then(|m| m.as_u64()))
        .map(|m| m as usize)
        .unwrap_or(config.max_position_embeddings)
        .min(config.max_position_embeddings)
}

/// A cheap fingerprint of the weights and configuration (size, config, tokenizer, first and last MiB of weights).
fn fingerprint(dir: &Path, weights: &[u8]) -> Result<String, EmbedError> {
    let mut h = Sha256::new();
    h.update((weights.len() as u64).to_le_bytes());
    h.update(&weights[..weights.len().min(1 << 20)]);
    h.update(&weights[weights.len().saturating_sub(1 << 20)..]);
    for f in ["config.json", "tokenizer.json"] {
        let bytes = std::fs::read(dir.join(f)).map_err(|e| model_err(dir, format!("{f}: {e}")))?;
        h.update(&bytes);
    }
    Ok(hex::encode(&h.finalize()[..6]))
}

impl LocalEmbedder {
    /// Loads the model from `dir` with the fastest engine that supports it.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        validate_dir(dir)?;
        let text = std::fs::read_to_string(dir.join("config.json"))
            .map_err(|e| model_err(dir, format!("config.json: {e}")))?;
        let packed = serde_json::from_str::<BertConfig>(&text)
            .map(|c| Encoder::supports(&c))
            .unwrap_or(false);
        Self::load_with(
            dir,
            if packed {
                Engine::Packed
            } else {
                Engine::Candle
            },
        )
    }

    /// Loads the model from `dir` with the given engine.
    pub fn load_with(dir: &Path, engine: Engine) -> Result<Self, EmbedError> {
        let dim = validate_dir(dir)?;
        let config = read_config(dir)?;
        let weights = std::fs::read(dir.join("model.safetensors"))
            .map_err(|e| model_err(dir, format!("model.safetensors: {e}")))?;
        let version = fingerprint(dir, &weights)?;
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| model_err(dir, format!("tokenizer.json: {e}")))?;
        let model = match engine {
            Engine::Packed => {
                // Sequences are packed, never padded (tokenizer.json files often ask for fixed-length padding).
                tokenizer.with_padding(None);
                let text = std::fs::read_to_string(dir.join("config.json"))
                    .map_err(|e| model_err(dir, format!("config.json: {e}")))?;
                let bert: BertConfig = serde_json::from_str(&text)
                    .map_err(|e| model_err(dir, format!("config.json: {e}")))?;
                Model::Packed(
                    Encoder::load(&bert, &weights)
                        .map_err(|e| model_err(dir, format!("weights: {e}")))?,
                )
            }
            Engine::Candle => {
                let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
                    .map_err(|e| model_err(dir, format!("model.safetensors: {e}")))?;
                let model = BertModel::load(vb, &config)
                    .map_err(|e| model_err(dir, format!("weights: {e}")))?;
                let pad_id = tokenizer.token_to_id("[PAD]").unwrap_or(0);
                tokenizer.with_padding(Some(PaddingParams {
                    strategy: PaddingStrategy::BatchLongest,
                    pad_id,
                    pad_token: "[PAD]".into(),
                    ..PaddingParams::default()
                }));
                Model::Candle(Box::new(model))
            }
        };
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_seq_len(dir, &config),
                ..TruncationParams::default()
            }))
            .map_err(|e| model_err(dir, format!("tokenizer truncation: {e}")))?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| n != "model")
            .unwrap_or_else(|| super::config::DEFAULT_MODEL_NAME.to_owned());
        Ok(Self {
            model,
            tokenizer,
            model_id: format!("local:{name}"),
            version,
            dim,
            dir: dir.to_path_buf(),
        })
    }

    /// Tokens per text after truncation, special tokens included (what the model computes over).
    pub fn token_counts(&self, texts: &[&str]) -> Result<Vec<usize>, EmbedError> {
        let enc = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| EmbedError::Inference(e.to_string()))?;
        Ok(enc
            .iter()
            .map(|e| e.get_attention_mask().iter().filter(|&&m| m == 1).count())
            .collect())
    }

    /// The engine in use.
    pub fn engine(&self) -> Engine {
        match self.model {
            Model::Packed(_) => Engine::Packed,
            Model::Candle(_) => Engine::Candle,
        }
    }

    fn embed_packed(&self, encoder: &Encoder, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let inf = |e: &dyn std::fmt::Display| EmbedError::Inference(e.to_string());
        let enc = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| inf(&e))?;
        let tokens: Vec<Tokens> = enc
            .iter()
            .map(|e| Tokens {
                ids: e.get_ids().to_vec(),
                types: e.get_type_ids().to_vec(),
            })
            .collect();
        // Similar lengths together (attention is per sequence, so this only evens out the parallel work), then
        // batches of about PACKED_TOKENS tokens.
        let mut order: Vec<usize> = (0..tokens.len()).collect();
        order.sort_by_key(|&i| tokens[i].ids.len());
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        let mut start = 0;
        while start < order.len() {
            let mut end = start;
            let mut budget = 0;
            while end < order.len()
                && (end == start || budget + tokens[order[end]].ids.len() <= PACKED_TOKENS)
            {
                budget += tokens[order[end]].ids.len();
                end += 1;
            }
            let batch: Vec<Tokens> = order[start..end]
                .iter()
                .map(|&i| tokens[i].clone())
                .collect();
            let vectors = encoder.embed(&batch).map_err(|e| inf(&e))?;
            for (&i, v) in order[start..end].iter().zip(vectors) {
                out[i] = v;
            }
            start = end;
        }
        Ok(out)
    }

    fn embed_candle(&self, model: &BertModel, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // Batch texts of similar length together so little work goes into padding.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(BATCH) {
            let batch: Vec<&str> = chunk.iter().map(|&i| texts[i]).collect();
            for (&i, v) in chunk.iter().zip(self.candle_batch(model, &batch)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    fn candle_batch(&self, model: &BertModel, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let inf = |e: &dyn std::fmt::Display| EmbedError::Inference(e.to_string());
        let enc = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| inf(&e))?;
        let n = enc.len();
        let len = enc.first().map(|e| e.get_ids().len()).unwrap_or(0);
        let mut ids = Vec::with_capacity(n * len);
        let mut types = Vec::with_capacity(n * len);
        let mut mask = Vec::with_capacity(n * len);
        for e in &enc {
            ids.extend_from_slice(e.get_ids());
            types.extend_from_slice(e.get_type_ids());
            mask.extend_from_slice(e.get_attention_mask());
        }
        let dev = &model.device;
        let ids = Tensor::from_vec(ids, (n, len), dev).map_err(|e| inf(&e))?;
        let types = Tensor::from_vec(types, (n, len), dev).map_err(|e| inf(&e))?;
        let mask = Tensor::from_vec(mask, (n, len), dev).map_err(|e| inf(&e))?;
        let out = model
            .forward(&ids, &types, Some(&mask))
            .map_err(|e| inf(&e))?;
        // Mean over real tokens: sum(h * m) / sum(m).
        let pooled = (|| -> candle_core::Result<Vec<Vec<f32>>> {
            let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let summed = out.broadcast_mul(&m)?.sum(1)?;
            let counts = m.sum(1)?.clamp(1e-9, f64::MAX)?;
            summed.broadcast_div(&counts)?.to_vec2::<f32>()
        })()
        .map_err(|e| inf(&e))?;
        Ok(pooled
            .into_iter()
            .map(|mut v| {
                super::l2_normalize(&mut v);
                v
            })
            .collect())
    }
}

impl Embedder for LocalEmbedder {
    fn kind(&self) -> &'static str {
        "local"
    }
    fn model_id(&self) -> &str {
        &self.model_id
    }
    fn model_version(&self) -> &str {
        &self.version
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed_documents(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        match &self.model {
            Model::Packed(encoder) => self.embed_packed(encoder, texts),
            Model::Candle(model) => self.embed_candle(model, texts),
        }
    }
}
