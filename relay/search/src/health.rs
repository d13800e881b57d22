//! What `corpus health` reports about search: the configured embedder and how much of the corpus has vectors.

use std::path::Path;

use personkit_embed::{EmbedderConfig, build};
use personkit_store::Connection;
use personkit_store::vectors::{self, Coverage};

/// The configured embedder and its coverage of the corpus.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EmbedHealth {
    /// none | local | openai | vertex
    pub embedder: String,
    /// Where the choice came from (config file, environment, default).
    pub source: String,
    /// `model_id@version`, when an embedder is configured and loads.
    pub model: Option<String>,
    pub dim: Option<usize>,
    /// Rows with a vector from this model, and totals.
    pub coverage: Option<Coverage>,
    /// Why the configured embedder could not be built.
    pub error: Option<String>,
}

/// Builds the configured embedder (as `serve`, `query` and `embed` would) and counts coverage.
pub fn embed_health(conn: &Connection, db_path: Option<&Path>) -> EmbedHealth {
    let mut h = EmbedHealth {
        embedder: "none".into(),
        source: String::new(),
        model: None,
        dim: None,
        coverage: None,
        error: None,
    };
    let cfg = match EmbedderConfig::load(db_path) {
        Ok(c) => c,
        Err(e) => {
            h.error = Some(e.to_string());
            return h;
        }
    };
    h.embedder = cfg.kind.as_str().into();
    h.source = cfg.source.clone();
    match build(&cfg) {
        Ok(Some(e)) => {
            h.model = Some(e.model_key());
            h.dim = Some(e.dim());
            match vectors::coverage(conn, &e.model_key()) {
                Ok(c) => h.coverage = Some(c),
                Err(err) => h.error = Some(err.to_string()),
            }
        }
        Ok(None) => {}
        Err(e) => h.error = Some(format!("{e} ({})", e.hint())),
    }
    h
}
