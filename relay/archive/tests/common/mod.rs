//! Builds real corpora for the archive tests: observations in the wire format, stored by the store's own ingest.

use std::path::Path;

use personkit_shared::wire::Role;
use personkit_store::Connection;
use personkit_store::ingest::{Origin, ingest_batch};
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
pub struct ThreadSpec {
    pub surface: String,
    pub conversation: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub url: Option<String>,
    pub turns: Vec<TurnSpec>,
}

#[derive(Debug, Deserialize)]
pub struct TurnSpec {
    pub role: Role,
    pub content: String,
    #[serde(default)]
    pub ordinal: Option<u32>,
    #[serde(default)]
    pub message_key: Option<String>,
    /// How the turn was read (`dom`, `network`, …); absent: what the surface implies.
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub parent_key: Option<String>,
    pub captured_at: String,
}

pub fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(1_795_000_000).unwrap()
}

/// A new corpus file at `path` holding `threads`.
pub fn corpus(path: &Path, threads: &[ThreadSpec]) -> Connection {
    personkit_store::db::register_sqlite_vec();
    let mut conn = personkit_store::db::open(path).unwrap();
    add(&mut conn, threads);
    conn
}

pub fn add(conn: &mut Connection, threads: &[ThreadSpec]) {
    let mut items: Vec<Value> = Vec::new();
    for t in threads {
        for x in &t.turns {
            let mut v = personkit_testkit::turn_at(
                &t.surface,
                &t.conversation,
                x.role,
                &x.content,
                x.ordinal,
                x.message_key.as_deref(),
                &x.captured_at,
            );
            if let Some(path) = &x.path {
                v["turn"]["path"] = path.clone().into();
            }
            if let Some(parent) = &x.parent_key {
                v["turn"]["parent_key"] = parent.clone().into();
            }
            if let Some(title) = &t.title {
                v["title"] = title.clone().into();
            }
            if let Some(url) = &t.url {
                v["url"] = url.clone().into();
            }
            items.push(v);
        }
    }
    let origin = Origin {
        device_id: "test-device".into(),
    };
    let r = ingest_batch(conn, &origin, &items, now()).unwrap();
    assert_eq!(r.rejected, 0, "{r:?}");
}
