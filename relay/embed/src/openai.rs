//! The `openai` embedder: any OpenAI-compatible `POST {base_url}/v1/embeddings` (OpenAI, Ollama, LM Studio, vLLM).
//! Request `{"model", "input": [...]}`; answer `{"data": [{"index", "embedding": [...]}]}`.

use std::time::Duration;

use serde::Deserialize;

use super::{EmbedError, Embedder, EmbedderConfig};

/// Texts per request.
const BATCH: usize = 64;

/// A configured endpoint. `Debug` never prints the key.
pub struct OpenAiEmbedder {
    agent: ureq::Agent,
    /// For the one text of a search: a person is waiting, so it gives up sooner.
    query_agent: ureq::Agent,
    url: String,
    model: String,
    model_id: String,
    dim: usize,
    api_key: Option<String>,
}

impl std::fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("dim", &self.dim)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

#[derive(Deserialize)]
struct Answer {
    data: Vec<Item>,
}
#[derive(Deserialize)]
struct Item {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

/// An HTTP agent with bounded timeouts that reports non-2xx statuses as answers, not errors.
pub(crate) fn agent() -> ureq::Agent {
    agent_within(Duration::from_secs(120))
}

/// The agent for a search's query text: a search answers from its other signals when `timeout` runs out
/// ([`EmbedderConfig::query_timeout`]).
pub(crate) fn query_agent(timeout: Duration) -> ureq::Agent {
    agent_within(timeout)
}

fn agent_within(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into()
}

/// Posts JSON and decodes a JSON answer, turning failures into [`EmbedError::Http`] (never echoing secrets).
pub(crate) fn post_json<T: serde::de::DeserializeOwned>(
    agent: &ureq::Agent,
    url: &str,
    bearer: Option<&str>,
    body: &serde_json::Value,
) -> Result<T, EmbedError> {
    let err = |message: String| EmbedError::Http {
        url: url.to_owned(),
        message,
    };
    let mut req = agent.post(url).header("Content-Type", "application/json");
    if let Some(t) = bearer {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut resp = req.send_json(body).map_err(|e| err(e.to_string()))?;
    let status = resp.status().as_u16();
    if !(200..300).contains(&status) {
        let text = resp
            .body_mut()
            .read_to_string()
            .unwrap_or_default()
            .chars()
            .take(300)
            .collect::<String>();
        return Err(err(format!("HTTP {status}: {text}")));
    }
    resp.body_mut()
        .with_config()
        .limit(256 * 1024 * 1024)
        .read_json::<T>()
        .map_err(|e| err(format!("unexpected answer: {e}")))
}

impl OpenAiEmbedder {
    pub fn new(config: &EmbedderConfig) -> Result<Self, EmbedError> {
        let base = config.base_url.clone().ok_or_else(|| {
            EmbedError::NotConfigured("openai needs base_url (PERSONKIT_OPENAI_BASE_URL)".into())
        })?;
        let model = config.model.clone().ok_or_else(|| {
            EmbedError::NotConfigured("openai needs model (PERSONKIT_OPENAI_MODEL)".into())
        })?;
        let dim = config.dim.ok_or_else(|| {
            EmbedError::NotConfigured("openai needs dim (PERSONKIT_OPENAI_DIM): 384 or 768".into())
        })?;
        super::check_dim(dim)?;
        let base = base.trim_end_matches('/');
        let url = if base.ends_with("/v1") {
            format!("{base}/embeddings")
        } else {
            format!("{base}/v1/embeddings")
        };
        Ok(Self {
            agent: agent(),
            query_agent: query_agent(config.query_timeout()),
            model_id: format!("openai:{model}"),
            url,
            model,
            dim,
            api_key: config.api_key.clone(),
        })
    }
}

impl Embedder for OpenAiEmbedder {
    fn kind(&self) -> &'static str {
        "openai"
    }
    fn endpoint(&self) -> Option<&str> {
        Some(&self.url)
    }
    fn model_id(&self) -> &str {
        &self.model_id
    }
    fn model_version(&self) -> &str {
        "1"
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed_documents(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.call(&self.agent, texts)
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let mut v = self.call(&self.query_agent, &[text])?;
        v.pop().ok_or(EmbedError::CountMismatch { want: 1, got: 0 })
    }
}

impl OpenAiEmbedder {
    fn call(&self, agent: &ureq::Agent, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(BATCH) {
            let body = serde_json::json!({"model": self.model, "input": chunk, "encoding_format": "float"});
            let mut answer: Answer = post_json(agent, &self.url, self.api_key.as_deref(), &body)?;
            answer.data.sort_by_key(|i| i.index.unwrap_or(0));
            let vectors = answer.data.into_iter().map(|i| i.embedding).collect();
            out.extend(super::finish_batch(chunk.len(), self.dim, vectors)?);
        }
        Ok(out)
    }
}
