//! What `corpus health` reports about search: the configured embedder and how much of the corpus has vectors.

use std::path::Path;

use personkit_embed::scrub::Decision;
use personkit_embed::{EmbedError, EmbedderConfig, EmbedderKind, SharedEmbedder, build};
use personkit_store::Connection;
use personkit_store::vectors::{self, Coverage};

/// The configured embedder and its coverage of the corpus.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EmbedHealth {
    /// `hybrid` (keywords and vectors) or `keywords` (full text only: no embedder, it failed to load, or its
    /// endpoint does not answer).
    pub search: &'static str,
    /// One line saying which search runs and why, as `serve` prints it at start.
    pub summary: String,
    /// none | local | openai | vertex
    pub embedder: String,
    /// Where the choice came from (config file, environment, default).
    pub source: String,
    /// `model_id@version`, when an embedder is configured and loads.
    pub model: Option<String>,
    pub dim: Option<usize>,
    /// Rows with a vector from this model, and totals.
    pub coverage: Option<Coverage>,
    /// What happens to text sent to the embedder (scrubbed of personal details, or not, and why).
    pub scrub: Option<String>,
    /// Why the configured embedder could not be built.
    pub error: Option<String>,
}

/// Builds the configured embedder (as `serve`, `query` and `embed` would) and counts coverage.
pub fn embed_health(conn: &Connection, db_path: Option<&Path>) -> EmbedHealth {
    let mut h = EmbedHealth {
        search: "keywords",
        summary: String::new(),
        embedder: "none".into(),
        source: String::new(),
        model: None,
        dim: None,
        coverage: None,
        scrub: None,
        error: None,
    };
    let cfg = match EmbedderConfig::load(db_path) {
        Ok(c) => c,
        Err(e) => {
            h.summary = summary(None, &Err(EmbedError::Config(e.to_string())));
            h.error = Some(e.to_string());
            return h;
        }
    };
    h.embedder = cfg.kind.as_str().into();
    h.source = cfg.source.clone();
    let built = build(&cfg);
    h.summary = summary(Some(&cfg), &built);
    match built {
        Ok(Some(e)) => {
            h.search = "hybrid";
            h.scrub = Some(Decision::of(cfg.scrub, e.endpoint()).describe(e.endpoint()));
            h.model = Some(e.model_key());
            h.dim = Some(e.dim());
            // An endpoint can be configured right and still be down: asked once, with a fixed text, within the
            // time a search would wait.
            if e.endpoint().is_some()
                && let Err(err) = e.embed_query("personkit health check")
            {
                h.search = "keywords";
                h.summary = format!(
                    "search: keywords only for now (the embedder is failing: {err}; {})",
                    err.hint()
                );
                h.error = Some(format!(
                    "{err} ({}); searches skip the vector signal until it answers",
                    err.hint()
                ));
            }
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

/// One line saying which search a relay or command runs with the embedder `config` asked for (`built` is what
/// building it gave), and what to do when it is keywords only.
pub fn summary(
    config: Option<&EmbedderConfig>,
    built: &Result<SharedEmbedder, EmbedError>,
) -> String {
    match built {
        Ok(Some(e)) => {
            let scrub = match (config, e.endpoint()) {
                (Some(c), Some(url)) => {
                    format!(
                        "; scrub {}",
                        Decision::of(c.scrub, Some(url)).describe(Some(url))
                    )
                }
                _ => String::new(),
            };
            format!(
                "search: hybrid (keywords + {} embeddings, {}{scrub})",
                e.kind(),
                e.model_key()
            )
        }
        Ok(None) => match config {
            Some(c) if c.kind == EmbedderKind::None && c.source != "default" => {
                format!(
                    "search: keywords only (embedder set to none by {})",
                    c.source
                )
            }
            Some(c) => format!(
                "search: keywords only (no embedding model in {}; `personkit model fetch` installs one)",
                c.local_model_dir().display()
            ),
            None => "search: keywords only".into(),
        },
        Err(e) => format!("search: keywords only ({e}; {})", e.hint()),
    }
}
