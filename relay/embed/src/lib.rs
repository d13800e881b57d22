//! `personkit-embed`: text embedders behind one trait, and the configuration that picks one.
//!
//! Four kinds: `none` (search falls back to FTS, entities and recency), `local` (a BERT sentence-embedding model
//! such as all-MiniLM-L6-v2 run in-process on CPU (`encoder`, or candle for other architectures), from a directory holding `model.safetensors`,
//! `tokenizer.json` and `config.json`), `openai` (any OpenAI-compatible `/v1/embeddings` endpoint) and `vertex`
//! (Google Vertex AI `text-embedding-005`). The same [`EmbedderConfig`] serves `serve`, `corpus query` and
//! `corpus embed`: it is read from a TOML file and environment variables (see [`EmbedderConfig::load`]).
//!
//! No SQL and no corpus: vectors are kept by `personkit-store`, and the job that embeds pending rows is
//! `personkit_search::indexer`.

pub mod config;
pub mod encoder;
pub mod local;
pub mod openai;
pub mod scrub;
pub mod vertex;

use std::sync::Arc;

pub use config::{EmbedderConfig, EmbedderKind, ScrubMode};

/// How long a search waits for its query text's embedding from an endpoint before it answers from its other
/// signals (documents are embedded in the background, with a longer bound).
pub const QUERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(8);

/// Dimensions the corpus has vector tables for.
pub const SUPPORTED_DIMS: [usize; 2] = [384, 768];

/// Why embedding failed.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("embedder is not configured: {0}")]
    NotConfigured(String),
    #[error("model directory {dir}: {message}")]
    Model { dir: String, message: String },
    #[error("embedding inference failed: {0}")]
    Inference(String),
    #[error("embedding endpoint {url}: {message}")]
    Http { url: String, message: String },
    #[error("embedding endpoint returned {got} vectors for {want} texts")]
    CountMismatch { want: usize, got: usize },
    #[error("embedder returned a {got}-dimensional vector, expected {want}")]
    WrongDim { want: usize, got: usize },
    #[error(
        "{0}-dimensional vectors are not supported: the corpus has vector tables for 384 and 768 dimensions only"
    )]
    UnsupportedDim(usize),
    #[error("config: {0}")]
    Config(String),
}

impl EmbedError {
    /// What to do next, for CLI and HTTP errors.
    pub fn hint(&self) -> &'static str {
        match self {
            EmbedError::NotConfigured(_) | EmbedError::Config(_) => {
                "set [embedder] in ~/.dotperson/config.toml or PERSONKIT_EMBEDDER=none|local|openai|vertex"
            }
            EmbedError::Model { .. } => {
                "run `personkit model fetch --from-dir DIR` with a folder holding model.safetensors, tokenizer.json and config.json"
            }
            EmbedError::UnsupportedDim(_) | EmbedError::WrongDim { .. } => {
                "configure a model with 384 or 768 dimensions (e.g. all-MiniLM-L6-v2 or text-embedding-005)"
            }
            _ => "check the embedder's configuration and that its endpoint is reachable",
        }
    }
}

/// Turns texts into unit-length vectors. Implementations are cheap to share across threads.
pub trait Embedder: Send + Sync + std::fmt::Debug {
    /// Kind name: `local`, `openai`, `vertex`.
    fn kind(&self) -> &'static str;
    /// Model identity stored with every vector, e.g. `local:all-MiniLM-L6-v2`.
    fn model_id(&self) -> &str;
    /// Model version stored with every vector (for `local`, a digest of the weights).
    fn model_version(&self) -> &str;
    /// Output dimension (384 or 768).
    fn dim(&self) -> usize;
    /// Embeds documents (texts to be found).
    fn embed_documents(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// Embeds a query. Models with asymmetric prompts override this.
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let mut v = self.embed_documents(&[text])?;
        v.pop().ok_or(EmbedError::CountMismatch { want: 1, got: 0 })
    }
    /// The endpoint texts are sent to, for embedders that send them anywhere (`None`: computed in this process).
    fn endpoint(&self) -> Option<&str> {
        None
    }
    /// Whether a message's vector is computed from the message followed by the one before it in its thread (a
    /// reply then carries what it answers). The indexer reads it; [`build`] turns it on for every embedder.
    fn previous_turn_context(&self) -> bool {
        false
    }
    /// `model_id@model_version`: the key under which vectors are cached.
    fn model_key(&self) -> String {
        format!("{}@{}", self.model_id(), self.model_version())
    }
}

/// A shared embedder handle; `None` means the `none` kind.
pub type SharedEmbedder = Option<Arc<dyn Embedder>>;

/// Builds the embedder a configuration asks for (`Ok(None)` for `none`). An embedder that sends text off this
/// machine has its text scrubbed unless the configuration turns scrubbing off ([`Built`]).
pub fn build(config: &EmbedderConfig) -> Result<SharedEmbedder, EmbedError> {
    let e: Arc<dyn Embedder> = match config.kind {
        EmbedderKind::None => return Ok(None),
        EmbedderKind::Local => Arc::new(local::LocalEmbedder::load(&config.local_model_dir())?),
        EmbedderKind::Openai => Arc::new(openai::OpenAiEmbedder::new(config)?),
        EmbedderKind::Vertex => Arc::new(vertex::VertexEmbedder::new(config)?),
    };
    check_dim(e.dim())?;
    let scrub = scrub::Decision::of(config.scrub, e.endpoint()) == scrub::Decision::Scrub;
    Ok(Some(Arc::new(Built::new(e, scrub))))
}

/// What [`build`] hands out: the provider with the two choices made around it. Text sent off the machine is
/// scrubbed first when `scrub` (`personkit_shared::scrub`), and message vectors are computed with the previous turn
/// as context ([`Embedder::previous_turn_context`]; on LoCoMo's dev split it lifts the vector signal's recall@5 from
/// 0.453 to 0.505 and the hybrid's from 0.610 to 0.635, BENCHMARKS.md). Both change what a vector is of, so the
/// model version names them (`+scrubbed`, `+prev3`): changing either re-embeds a corpus instead of mixing vectors.
/// (`+prev` found the previous turn by comparing slot names as text; `+prev2` by ordinal, else by row number; `+prev3`
/// by the thread's turn order, `personkit_store::order`.)
#[derive(Debug)]
pub struct Built {
    inner: Arc<dyn Embedder>,
    version: String,
    scrub: bool,
}

impl Built {
    pub fn new(inner: Arc<dyn Embedder>, scrub: bool) -> Self {
        let version = format!(
            "{}{}+prev3",
            inner.model_version(),
            if scrub { "+scrubbed" } else { "" }
        );
        Self {
            inner,
            version,
            scrub,
        }
    }

    fn clean<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        if self.scrub {
            personkit_shared::scrub::scrub_personal(text).into()
        } else {
            text.into()
        }
    }
}

impl Embedder for Built {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn model_version(&self) -> &str {
        &self.version
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn endpoint(&self) -> Option<&str> {
        self.inner.endpoint()
    }
    fn previous_turn_context(&self) -> bool {
        true
    }
    fn embed_documents(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let clean: Vec<std::borrow::Cow<'_, str>> = texts.iter().map(|t| self.clean(t)).collect();
        let refs: Vec<&str> = clean.iter().map(|t| t.as_ref()).collect();
        self.inner.embed_documents(&refs)
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.inner.embed_query(&self.clean(text))
    }
}

/// Rejects dimensions without a vector table.
pub fn check_dim(dim: usize) -> Result<(), EmbedError> {
    if SUPPORTED_DIMS.contains(&dim) {
        Ok(())
    } else {
        Err(EmbedError::UnsupportedDim(dim))
    }
}

/// Scales a vector to unit length in place (a zero vector stays zero).
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in v.iter_mut() {
            *x /= norm;
        }
    }
}

/// Checks a batch answer from a remote embedder: count, dimension, then normalises.
fn finish_batch(
    want: usize,
    dim: usize,
    mut vectors: Vec<Vec<f32>>,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    if vectors.len() != want {
        return Err(EmbedError::CountMismatch {
            want,
            got: vectors.len(),
        });
    }
    for v in vectors.iter_mut() {
        if v.len() != dim {
            return Err(EmbedError::WrongDim {
                want: dim,
                got: v.len(),
            });
        }
        l2_normalize(v);
    }
    Ok(vectors)
}
