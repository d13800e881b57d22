//! The `vertex` embedder: Google Vertex AI `text-embedding-005` (768-d) through
//! `POST {endpoint}/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:predict` with
//! `{"instances": [{"content", "task_type"}]}`; answer `{"predictions": [{"embeddings": {"values": [...]}}]}`.
//! The token is an OAuth access token (e.g. from `gcloud auth print-access-token`).

use serde::Deserialize;

use super::openai::{agent, post_json, query_agent};
use super::{EmbedError, Embedder, EmbedderConfig};

/// Vertex accepts up to 250 instances per request; keep well below the token limit.
const BATCH: usize = 32;
const DIM: usize = 768;

/// A configured Vertex model. `Debug` never prints the token.
pub struct VertexEmbedder {
    agent: ureq::Agent,
    /// For a search's query text ([`crate::QUERY_TIMEOUT`]).
    query_agent: ureq::Agent,
    url: String,
    model_id: String,
    token: String,
}

impl std::fmt::Debug for VertexEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VertexEmbedder")
            .field("url", &self.url)
            .field("token", &"<redacted>")
            .finish()
    }
}

#[derive(Deserialize)]
struct Answer {
    predictions: Vec<Prediction>,
}
#[derive(Deserialize)]
struct Prediction {
    embeddings: Values,
}
#[derive(Deserialize)]
struct Values {
    values: Vec<f32>,
}

impl VertexEmbedder {
    pub fn new(config: &EmbedderConfig) -> Result<Self, EmbedError> {
        let project = config.project.clone().ok_or_else(|| {
            EmbedError::NotConfigured("vertex needs project (PERSONKIT_VERTEX_PROJECT)".into())
        })?;
        let token = config.token.clone().ok_or_else(|| {
            EmbedError::NotConfigured("vertex needs token (PERSONKIT_VERTEX_TOKEN)".into())
        })?;
        let location = config
            .location
            .clone()
            .unwrap_or_else(|| "us-central1".into());
        let model = config
            .model
            .clone()
            .unwrap_or_else(|| "text-embedding-005".into());
        if let Some(d) = config.dim
            && d != DIM
        {
            return Err(EmbedError::WrongDim { want: DIM, got: d });
        }
        let endpoint = config
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("https://{location}-aiplatform.googleapis.com"));
        let url = format!(
            "{}/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:predict",
            endpoint.trim_end_matches('/')
        );
        Ok(Self {
            agent: agent(),
            query_agent: query_agent(config.query_timeout()),
            url,
            model_id: format!("vertex:{model}"),
            token,
        })
    }

    fn call(
        &self,
        agent: &ureq::Agent,
        texts: &[&str],
        task: &str,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(BATCH) {
            let instances: Vec<_> = chunk
                .iter()
                .map(|t| serde_json::json!({"content": t, "task_type": task}))
                .collect();
            let body = serde_json::json!({"instances": instances});
            let answer: Answer = post_json(agent, &self.url, Some(&self.token), &body)?;
            let vectors = answer
                .predictions
                .into_iter()
                .map(|p| p.embeddings.values)
                .collect();
            out.extend(super::finish_batch(chunk.len(), DIM, vectors)?);
        }
        Ok(out)
    }
}

impl Embedder for VertexEmbedder {
    fn kind(&self) -> &'static str {
        "vertex"
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
        DIM
    }
    fn embed_documents(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.call(&self.agent, texts, "RETRIEVAL_DOCUMENT")
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let mut v = self.call(&self.query_agent, &[text], "RETRIEVAL_QUERY")?;
        v.pop().ok_or(EmbedError::CountMismatch { want: 1, got: 0 })
    }
}
