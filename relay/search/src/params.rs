//! A query as people and programs give it: `q`, `k` and filters as strings (the query string of
//! `GET /v1/query`, the flags of `personkit corpus query`), checked and turned into a [`Query`].

use serde::Deserialize;
use time::OffsetDateTime;

use crate::settings::Settings;
use crate::{Fusion, Query, SearchError, normalize_bound};

/// Query parameters. `thread` and `entity` may be comma-separated lists.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct Params {
    pub q: Option<String>,
    pub k: Option<usize>,
    pub surface: Option<String>,
    pub thread: Option<String>,
    pub role: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub entity: Option<String>,
    pub events: Option<bool>,
    /// `convex` or `rrf`; absent: the settings' choice ([`crate::settings::Settings`]).
    pub fusion: Option<String>,
}

fn list(s: &Option<String>) -> Vec<String> {
    s.as_deref()
        .map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Builds a [`Query`] from parameters with the default settings, or says what is wrong.
pub fn build_query(p: &Params, now: OffsetDateTime) -> Result<Query, SearchError> {
    build_query_with(p, now, &Settings::default())
}

/// Builds a [`Query`] from parameters, or says what is wrong. Spans (`7d`) count back from `now`; what the
/// parameters leave open comes from `settings`.
pub fn build_query_with(
    p: &Params,
    now: OffsetDateTime,
    settings: &Settings,
) -> Result<Query, SearchError> {
    let text = p.q.clone().unwrap_or_default();
    let mut q = Query::new(text);
    q.k = p.k.unwrap_or(10);
    q.surface = p.surface.clone().filter(|s| !s.is_empty());
    q.threads = list(&p.thread);
    q.role = p.role.clone().filter(|s| !s.is_empty());
    if let Some(r) = &q.role
        && personkit_shared::wire::Role::parse(r).is_none()
    {
        return Err(SearchError::BadRequest(format!(
            "role {r:?} is not one of user, assistant, system, tool"
        )));
    }
    q.since = p
        .since
        .as_deref()
        .map(|s| normalize_bound(s, now))
        .transpose()?;
    q.until = p
        .until
        .as_deref()
        .map(|s| normalize_bound(s, now))
        .transpose()?;
    q.entities = list(&p.entity);
    q.include_events = p.events.unwrap_or(true);
    q.fusion = match p.fusion.as_deref().filter(|f| !f.trim().is_empty()) {
        None => settings.fusion,
        Some(f) => Fusion::parse(f).ok_or_else(|| {
            SearchError::BadRequest(format!("fusion {f:?} is not one of convex, rrf"))
        })?,
    };
    if q.text.trim().is_empty() && q.entities.is_empty() && q.since.is_none() && q.until.is_none() {
        return Err(SearchError::BadRequest(
            "the query is empty: give q (words), entity ids or a time window".into(),
        ));
    }
    if q.k == 0 || q.k > 1000 {
        return Err(SearchError::BadRequest(
            "k must be between 1 and 1000".into(),
        ));
    }
    Ok(q)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn params(fusion: Option<&str>) -> Params {
        Params {
            q: Some("words".into()),
            fusion: fusion.map(str::to_owned),
            ..Params::default()
        }
    }

    #[test]
    fn the_query_names_its_fusion_or_the_settings_do() {
        let now = OffsetDateTime::UNIX_EPOCH;
        let rrf = Settings {
            fusion: Fusion::Rrf,
        };
        assert_eq!(
            build_query(&params(None), now).unwrap().fusion,
            Fusion::Convex
        );
        assert_eq!(
            build_query_with(&params(None), now, &rrf).unwrap().fusion,
            Fusion::Rrf
        );
        assert_eq!(
            build_query_with(&params(Some("")), now, &rrf)
                .unwrap()
                .fusion,
            Fusion::Rrf
        );
        assert_eq!(
            build_query_with(&params(Some("convex")), now, &rrf)
                .unwrap()
                .fusion,
            Fusion::Convex
        );
        assert_eq!(
            build_query(&params(Some(" Rrf ")), now).unwrap().fusion,
            Fusion::Rrf
        );
        let e = build_query(&params(Some("borda")), now).unwrap_err();
        assert!(
            matches!(e, SearchError::BadRequest(ref m) if m.contains("borda")),
            "{e}"
        );
    }
}
