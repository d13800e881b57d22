//! The in-process model: a GGUF file (Llama or Qwen2 architecture, byte-level BPE tokenizer) run on CPU with
//! candle's quantized models. The tokenizer and the chat template come from the file's own metadata, so one file
//! is all it needs.
//!
//! Decoding is greedy (the same request gives the same answer). With a shape the answer is decoded under it
//! (the `decode` module): it always parses and passes [`crate::Shape::check`]. Every call starts from an empty KV
//! cache, is bounded by `max_tokens` and its timeout (checked after every forward pass), and a prompt that does
//! not fit the context beside `max_tokens` is refused, never cut.
//!
//! Speed: candle 0.11 has no vectorised kernel for some quantisations (Q4_1, the test model's, among them), so
//! those run scalar, at about the same cost per token for prompt and answer. [`LocalOptions::expand_weights`]
//! stores the weights as f32 instead (4 bytes a parameter), and prompt reading runs as vectorised matrix products,
//! several times faster. candle's CPU pool synchronises its threads at every product; on a machine already busy
//! `CANDLE_NUM_THREADS=1` can be faster.

mod decode;
mod gguf;

use std::fs::File;
use std::io::{BufReader, Cursor};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{Device, Tensor};
use candle_transformers::models::{quantized_llama, quantized_qwen2};

use crate::{ChatModel, Completion, LlmError, Request, Usage};
use decode::{Deadline, LogitSource};
use gguf::{GgufVocab, Meta, Template};

/// Context cap when the caller sets none: a window this long is what a CPU reads in reasonable time.
pub const DEFAULT_CONTEXT_TOKENS: usize = 4096;

/// The longest context candle's quantized Llama supports (its rotary tables stop there).
const LLAMA_MAX_CONTEXT: usize = quantized_llama::MAX_SEQ_LEN;

/// Prompt tokens per forward pass: bounds the attention scores' memory (heads × chunk × context floats).
const PREFILL_CHUNK: usize = 256;

/// How a local model is run.
#[derive(Default, Clone, Debug)]
pub struct LocalOptions {
    /// Upper bound on the context (prompt plus answer); the model's own `<arch>.context_length` and
    /// [`DEFAULT_CONTEXT_TOKENS`] apply when lower or unset.
    pub context_tokens: Option<usize>,
    /// CPU threads. candle sizes its CPU pool once per process, from `CANDLE_NUM_THREADS` (else
    /// `RAYON_NUM_THREADS`, else the physical cores) at first use; a value here must match that variable, so a
    /// binary that takes the setting exports the variable before loading any model.
    pub threads: Option<usize>,
    /// Expand the quantised weights to f32 at load (4 bytes a parameter: ~0.6 GB for a 135M model). Prompt
    /// reading then runs as vectorised matrix products, an order of magnitude faster on CPU where candle has no
    /// vectorised kernel for the file's quantisation; generation stays about as fast. For small models.
    pub expand_weights: bool,
}

enum Weights {
    Llama(quantized_llama::ModelWeights),
    Qwen2(quantized_qwen2::ModelWeights),
}

impl Weights {
    fn forward(&mut self, input: &Tensor, pos: usize) -> candle_core::Result<Tensor> {
        match self {
            Weights::Llama(m) => m.forward(input, pos),
            Weights::Qwen2(m) => m.forward(input, pos),
        }
    }

    fn clear(&mut self) {
        match self {
            Weights::Llama(m) => m.clear_kv_cache(),
            Weights::Qwen2(m) => m.clear_kv_cache(),
        }
    }
}

/// A GGUF model in this process. Calls are served one at a time (the model's KV cache is its state); a call
/// waiting for another counts that wait against its own timeout.
pub struct LocalModel {
    model_id: String,
    path: PathBuf,
    context_tokens: usize,
    vocab: GgufVocab,
    template: Template,
    weights: Mutex<Weights>,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel")
            .field("model_id", &self.model_id)
            .field("path", &self.path)
            .field("context_tokens", &self.context_tokens)
            .finish_non_exhaustive()
    }
}

fn model_err(path: &Path, message: impl Into<String>) -> LlmError {
    LlmError::Model {
        path: path.display().to_string(),
        message: message.into(),
    }
}

fn inference(e: candle_core::Error) -> LlmError {
    LlmError::Inference(e.to_string())
}

impl LocalModel {
    /// Loads the model, its tokenizer and its chat template from one GGUF file. Anything missing or unsupported
    /// is a [`LlmError::Model`] naming the file.
    pub fn open(path: &Path, opts: LocalOptions) -> Result<LocalModel, LlmError> {
        if let Some(n) = opts.threads {
            let set = std::env::var("CANDLE_NUM_THREADS").ok();
            if set.as_deref() != Some(n.to_string().as_str()) {
                return Err(LlmError::Config(format!(
                    "threads = {n}: candle sizes its CPU pool once per process from CANDLE_NUM_THREADS, which is \
                     {}; set CANDLE_NUM_THREADS={n} before starting",
                    set.as_deref().unwrap_or("unset")
                )));
            }
        }
        let file = File::open(path).map_err(|e| model_err(path, e.to_string()))?;
        let mut reader = BufReader::new(file);
        let content = gguf_file::Content::read(&mut reader)
            .map_err(|e| model_err(path, format!("not a readable GGUF file: {e}")))?;
        let meta = Meta(&content);
        let arch = meta
            .string("general.architecture")
            .map_err(|m| model_err(path, m))?;
        let (arch_max, is_llama) = match arch.as_str() {
            "llama" => (LLAMA_MAX_CONTEXT, true),
            "qwen2" => (usize::MAX, false),
            other => {
                return Err(model_err(
                    path,
                    format!("architecture `{other}` is not supported (llama, qwen2)"),
                ));
            }
        };
        let trained = meta
            .count(&format!("{arch}.context_length"))
            .map_err(|m| model_err(path, m))?;
        let context_tokens = trained
            .min(opts.context_tokens.unwrap_or(DEFAULT_CONTEXT_TOKENS))
            .min(arch_max);
        let vocab = GgufVocab::from_meta(&meta).map_err(|m| model_err(path, m))?;
        let template_text = meta
            .string("tokenizer.chat_template")
            .map_err(|m| model_err(path, m))?;
        let template = Template::detect(&template_text, &vocab).map_err(|m| model_err(path, m))?;
        let weights = if opts.expand_weights {
            let (content, mut expanded) = expand(content, &mut reader)
                .map_err(|e| model_err(path, format!("weights: {e}")))?;
            load(is_llama, content, &mut expanded)
        } else {
            load(is_llama, content, &mut reader)
        }
        .map_err(|e| model_err(path, format!("weights: {e}")))?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into());
        Ok(LocalModel {
            model_id: format!("local:{stem}"),
            path: path.to_owned(),
            context_tokens,
            vocab,
            template,
            weights: Mutex::new(weights),
        })
    }

    /// Prompt tokens for a request, as the model will read them.
    pub fn prompt_tokens(&self, req: &Request) -> Result<usize, LlmError> {
        Ok(self
            .template
            .prompt(&self.vocab, &req.system, &req.user)?
            .len())
    }

    /// The model, waiting for a call in progress at most until `deadline`.
    fn lock(&self, deadline: Deadline) -> Result<MutexGuard<'_, Weights>, LlmError> {
        loop {
            match self.weights.try_lock() {
                Ok(g) => return Ok(g),
                // The cache is cleared at every call's start: a call that panicked leaves nothing behind.
                Err(TryLockError::Poisoned(p)) => return Ok(p.into_inner()),
                Err(TryLockError::WouldBlock) => {
                    deadline.check()?;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
}

fn load<R: std::io::Read + std::io::Seek>(
    is_llama: bool,
    content: gguf_file::Content,
    reader: &mut R,
) -> candle_core::Result<Weights> {
    if is_llama {
        quantized_llama::ModelWeights::from_gguf(content, reader, &Device::Cpu).map(Weights::Llama)
    } else {
        quantized_qwen2::ModelWeights::from_gguf(content, reader, &Device::Cpu).map(Weights::Qwen2)
    }
}

/// The same model with every tensor stored as f32, as an in-memory GGUF file: candle multiplies f32 weights with
/// its vectorised matrix product instead of a quantised dot product per row.
fn expand<R: std::io::Read + std::io::Seek>(
    content: gguf_file::Content,
    reader: &mut R,
) -> candle_core::Result<(gguf_file::Content, Cursor<Vec<u8>>)> {
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors = Vec::with_capacity(names.len());
    for name in names {
        let q = content.tensor(reader, name, &Device::Cpu)?;
        let f = q.dequantize(&Device::Cpu)?;
        tensors.push((name.as_str(), QTensor::quantize(&f, GgmlDType::F32)?));
    }
    let metadata: Vec<(&str, &gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let mut file = Cursor::new(Vec::new());
    gguf_file::write(&mut file, &metadata, &refs)?;
    drop(refs);
    drop(tensors);
    file.set_position(0);
    let expanded = gguf_file::Content::read(&mut file)?;
    Ok((expanded, file))
}

/// One call's view of the model: position in a fresh KV cache, chunked prompt reading, bounded by the context.
struct Session<'a> {
    weights: &'a mut Weights,
    pos: usize,
    limit: usize,
    deadline: Deadline,
}

impl LogitSource for Session<'_> {
    fn feed(&mut self, tokens: &[u32]) -> Result<Vec<f32>, LlmError> {
        if tokens.is_empty() {
            return Err(LlmError::Inference("nothing to read".into()));
        }
        if self.pos + tokens.len() > self.limit {
            return Err(LlmError::TooLong {
                tokens: self.pos + tokens.len(),
                limit: self.limit,
            });
        }
        let mut last = None;
        for chunk in tokens.chunks(PREFILL_CHUNK) {
            self.deadline.check()?;
            let input = Tensor::new(chunk, &Device::Cpu)
                .and_then(|t| t.unsqueeze(0))
                .map_err(inference)?;
            last = Some(self.weights.forward(&input, self.pos).map_err(inference)?);
            self.pos += chunk.len();
        }
        let logits = last.ok_or_else(|| LlmError::Inference("nothing to read".into()))?;
        logits
            .squeeze(0)
            .and_then(|l| l.to_dtype(candle_core::DType::F32))
            .and_then(|l| l.to_vec1::<f32>())
            .map_err(inference)
    }
}

impl ChatModel for LocalModel {
    fn kind(&self) -> &'static str {
        "local"
    }

    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn endpoint(&self) -> Option<&str> {
        None
    }

    fn context_tokens(&self) -> usize {
        self.context_tokens
    }

    fn complete(&self, req: &Request) -> Result<Completion, LlmError> {
        let deadline = Deadline::after(req.timeout);
        let prompt = self.template.prompt(&self.vocab, &req.system, &req.user)?;
        let max_tokens = req.max_tokens as usize;
        let limit = self.context_tokens.saturating_sub(max_tokens);
        if prompt.len() > limit {
            return Err(LlmError::TooLong {
                tokens: prompt.len(),
                limit,
            });
        }
        let mut weights = self.lock(deadline)?;
        weights.clear();
        let mut session = Session {
            weights: &mut weights,
            pos: 0,
            limit: self.context_tokens,
            deadline,
        };
        let end_of_turn = self.template.end_of_turn();
        let eos = self.vocab.eos;
        let decoded = match &req.shape {
            Some(shape) => decode::shaped(
                &mut session,
                &self.vocab,
                &prompt,
                shape,
                max_tokens,
                deadline,
            ),
            None => decode::plain(
                &mut session,
                &self.vocab,
                &prompt,
                max_tokens,
                |id| id == end_of_turn || Some(id) == eos,
                deadline,
            ),
        };
        // Free the cache's memory now rather than at the next call.
        session.weights.clear();
        let decoded = decoded?;
        Ok(Completion {
            text: decoded.text,
            usage: Usage {
                prompt_tokens: prompt.len() as u64,
                completion_tokens: decoded.tokens as u64,
            },
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_a_model_is_a_model_error_naming_it() {
        let dir = std::env::temp_dir().join(format!("personkit-llm-local-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases: [(&str, &[u8]); 3] = [
            ("empty.gguf", b""),
            (
                "text.gguf",
                b"this is not a model file at all, just some words",
            ),
            (
                "header.gguf",
                b"GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff",
            ),
        ];
        for (name, bytes) in cases {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            match LocalModel::open(&p, LocalOptions::default()) {
                Err(LlmError::Model { path, .. }) => assert!(path.ends_with(name)),
                other => panic!("{name}: {other:?}"),
            }
        }
        let missing = dir.join("missing.gguf");
        assert!(matches!(
            LocalModel::open(&missing, LocalOptions::default()),
            Err(LlmError::Model { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
