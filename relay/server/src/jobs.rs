//! Background jobs of a running relay: the embedding worker (embeds new messages and events on its own
//! connection; ingest never waits for it) and the warm-up of the vector indexes, so the first query does not pay
//! for loading them (seconds at 10^6 vectors).

use std::path::Path;
use std::time::Duration;

use personkit_embed::{EmbedderConfig, SharedEmbedder};
use personkit_search::indexer::{self, Worker};

use crate::state::AppState;

/// The embedder the configuration asks for (config file next to the corpus, or environment), and the line that
/// says which search that gives. One that fails to build is logged and treated as `none`: search still answers
/// from full text.
pub fn configured_embedder(db_path: &Path) -> (SharedEmbedder, String) {
    let config = EmbedderConfig::load(Some(db_path));
    let built = match &config {
        Ok(c) => personkit_embed::build(c),
        Err(e) => Err(personkit_embed::EmbedError::Config(e.to_string())),
    };
    let line = personkit_search::health::summary(config.as_ref().ok(), &built);
    match built {
        Ok(e) => {
            tracing::info!(model = ?e.as_ref().map(|e| e.model_key()), "{line}");
            (e, line)
        }
        Err(e) => {
            tracing::warn!(error = %e, hint = e.hint(), "embedder unavailable; search uses full text only");
            (None, line)
        }
    }
}

/// Starts the index warm-up and the embedding worker of `state` (nothing without an embedder). Returns the
/// worker, to stop at shutdown.
pub fn start(state: &AppState) -> Option<Worker> {
    let embedder = state.embedder.clone()?;
    let path = state.db.path().to_path_buf();
    let (indexes, model_key, dim) = (state.indexes.clone(), embedder.model_key(), embedder.dim());
    let warm_path = path.clone();
    let _ = indexes.warm_in_background(
        move || personkit_store::db::open_read_only(&warm_path).map_err(|e| e.to_string()),
        model_key,
        dim,
    );
    Some(indexer::spawn_worker(
        move || personkit_store::db::open(&path).map_err(|e| e.to_string()),
        embedder,
        state.clock.clone(),
        Duration::from_secs(1),
    ))
}
