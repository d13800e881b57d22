//! `personkit-llm`: language models behind one trait, and structured output from them.
//!
//! Three kinds: `none` (the default: nothing that needs a model runs, and health says so), `openai` (any
//! OpenAI-compatible `/v1/chat/completions` endpoint: Ollama, llama.cpp's server, vLLM, LM Studio, a cloud API) and
//! `local` (a GGUF model run in this process on CPU with candle).
//!
//! A caller describes the answer it wants with a [`Shape`]. An endpoint is asked for JSON under the shape's JSON
//! Schema where it supports that; the in-process model is decoded under the shape, so its answer always parses.
//! Either way [`structured`] checks the answer against the shape, repairs what is mechanically repairable (fences,
//! prose around the JSON, trailing commas) and asks once more before it reports the answer unusable.
//!
//! Every call is bounded: `max_tokens` and a wall-clock timeout per request. Text is sent as given: scrubbing what
//! leaves the machine is the caller's job (`personkit-knowledge`), which uses [`ChatModel::endpoint`] to decide.

pub mod config;
pub mod json;
pub mod local;
pub mod openai;
pub mod shape;
pub mod structured;

pub use config::{LlmConfig, LlmKind, open};
pub use local::{LocalModel, LocalOptions};
pub use openai::OpenAiChat;
pub use shape::Shape;
pub use structured::{Structured, structured, structured_with};

use std::time::Duration;

/// One request to a chat model.
#[derive(Debug, Clone)]
pub struct Request {
    /// The system prompt (instructions).
    pub system: String,
    /// The user message (the material).
    pub user: String,
    /// The JSON answer's shape, when one is wanted.
    pub shape: Option<Shape>,
    /// Upper bound on generated tokens.
    pub max_tokens: u32,
    /// Upper bound on the call's wall-clock time.
    pub timeout: Duration,
}

/// Tokens a call used, as the model counted them (estimated from characters when an endpoint does not say).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, o: Usage) {
        self.prompt_tokens += o.prompt_tokens;
        self.completion_tokens += o.completion_tokens;
    }
}

/// A model's answer.
#[derive(Debug, Clone)]
pub struct Completion {
    pub text: String,
    pub usage: Usage,
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("language model is not configured: {0}")]
    NotConfigured(String),
    #[error("model file {path}: {message}")]
    Model { path: String, message: String },
    #[error("inference failed: {0}")]
    Inference(String),
    #[error("model endpoint {url}: {message}")]
    Http { url: String, message: String },
    /// The endpoint answered with a client error (a bad key, an unknown model or path): asking again will not help.
    #[error("model endpoint {url} refused the request: HTTP {status}: {message}")]
    Refused {
        url: String,
        status: u16,
        message: String,
    },
    #[error("the model did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the answer is not usable JSON of the requested shape: {0}")]
    Unparseable(String),
    #[error("the prompt is {tokens} tokens; the model reads at most {limit}")]
    TooLong { tokens: usize, limit: usize },
    #[error("config: {0}")]
    Config(String),
}

impl LlmError {
    /// A stable code for audit rows and API errors.
    pub fn code(&self) -> &'static str {
        match self {
            LlmError::NotConfigured(_) => "llm_not_configured",
            LlmError::Model { .. } => "llm_model",
            LlmError::Inference(_) => "llm_inference",
            LlmError::Http { .. } => "llm_http",
            LlmError::Refused { .. } => "llm_refused",
            LlmError::Timeout(_) => "llm_timeout",
            LlmError::Unparseable(_) => "llm_unparseable",
            LlmError::TooLong { .. } => "llm_too_long",
            LlmError::Config(_) => "llm_config",
        }
    }

    /// What to do next, for CLI and HTTP errors.
    pub fn hint(&self) -> &'static str {
        match self {
            LlmError::NotConfigured(_) | LlmError::Config(_) => {
                "set [llm] in ~/.dotperson/config.toml (kind = \"openai\" with base_url and model, or kind = \"local\" with model_path)"
            }
            LlmError::Model { .. } => {
                "point [llm] model_path at a GGUF file of a Llama-, Qwen2- or Gemma3-architecture instruct model"
            }
            LlmError::Http { .. } | LlmError::Timeout(_) => {
                "check that the model server is running and reachable, or raise [llm] timeout_ms"
            }
            LlmError::Refused {
                status: 401 | 403, ..
            } => "set [llm] api_key (or PERSONKIT_LLM_API_KEY) to a key this endpoint accepts",
            LlmError::Refused { status: 404, .. } => {
                "check [llm] base_url and model: the endpoint knows no such path or model"
            }
            LlmError::Refused { .. } => {
                "check [llm] base_url and model; the message says what the endpoint did not accept"
            }
            LlmError::TooLong { .. } => {
                "lower [knowledge] window_tokens or use a model with a longer context"
            }
            _ => "try a larger model: small models often fail to follow the answer format",
        }
    }

    /// Whether trying the same request again may succeed (a dropped connection, a busy server).
    pub fn transient(&self) -> bool {
        matches!(self, LlmError::Http { .. } | LlmError::Timeout(_))
    }
}

/// A chat model. Implementations are cheap to share across threads; a call blocks its thread.
pub trait ChatModel: Send + Sync + std::fmt::Debug {
    /// Kind name: `openai`, `local`, or a test double's own.
    fn kind(&self) -> &'static str;
    /// The identity stored with everything the model produced, e.g. `local:SmolLM2-135M-Instruct.Q4_1`.
    fn model_id(&self) -> &str;
    /// Where requests go: a URL, or `None` for a model in this process.
    fn endpoint(&self) -> Option<&str>;
    /// The most tokens a prompt may hold (the caller sizes its windows under it).
    fn context_tokens(&self) -> usize;
    /// One call.
    fn complete(&self, req: &Request) -> Result<Completion, LlmError>;
}

/// Roughly how many tokens `text` is for a model that does not say (four bytes a token, rounded up).
pub fn estimate_tokens(text: &str) -> usize {
    text.len().div_ceil(4)
}
