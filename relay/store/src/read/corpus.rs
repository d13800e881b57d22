//! Corpus-wide reads: the health report (the same figures for `personkit corpus health` and the MCP tool
//! `corpus_health`), the per-surface roll-up of a window (`corpus surfaces`, coloured by the one capture-health
//! rule), recent messages, all-words keyword search, and a thread's stored renderings.

use std::path::Path;

use rusqlite::{Connection, params};
use schemars::JsonSchema;
use serde::Serialize;
use time::OffsetDateTime;

use super::{Counts, StatusName, SurfaceState, counts, surface_states};
use crate::clock::fmt_time;
use crate::db::{DbError, size_on_disk};
use crate::health::capture_health;
use crate::vectors;

/// Tables whose row counts `corpus health` shows as storage detail, in display order.
pub const COUNTED_TABLES: &[&str] = &[
    "threads",
    "messages",
    "persona_observations",
    "events",
    "entities",
    "entity_aliases",
    "relations",
    "provenance",
    "embeddings",
    "messages_vec_384",
    "messages_vec_768",
    "events_vec_384",
    "events_vec_768",
    "devices",
    "pairing_codes",
    "ingest_errors",
];

/// The configured embedder as the health report names it.
#[derive(Debug, Clone, Copy)]
pub struct Embedder<'a> {
    /// `model_id@version`.
    pub model_key: &'a str,
    pub dim: u64,
}

/// How far the configured embedder has got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct EmbeddingState {
    /// `model_id@version` of the configured embedder; none: search uses words, entities and time only.
    pub model: Option<String>,
    pub dim: Option<u64>,
    pub messages_total: u64,
    pub messages_embedded: u64,
    /// Messages and events still waiting for a vector.
    pub pending: u64,
}

/// Is capture working, and what does the corpus hold: what every health reader shows.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct HealthReport {
    pub schema_version: u32,
    pub counts: Counts,
    /// Capture state per surface: green/yellow/red and why.
    pub surfaces: Vec<SurfaceState>,
    pub embedding: EmbeddingState,
}

/// The health report at `now`, with the embedding progress of `embedder` (none configured: nothing embedded).
pub fn health_report(
    conn: &Connection,
    now: OffsetDateTime,
    embedder: Option<Embedder<'_>>,
) -> Result<HealthReport, DbError> {
    let counts = counts(conn, now)?;
    let surfaces = surface_states(conn, now)?;
    let embedding = match embedder {
        Some(e) => {
            let c = vectors::coverage(conn, e.model_key)?;
            EmbeddingState {
                model: Some(e.model_key.to_owned()),
                dim: Some(e.dim),
                messages_total: c.messages_total,
                messages_embedded: c.messages_embedded,
                pending: c.pending(),
            }
        }
        None => EmbeddingState {
            model: None,
            dim: None,
            messages_total: counts.messages,
            messages_embedded: 0,
            pending: 0,
        },
    };
    Ok(HealthReport {
        schema_version: counts.schema_version,
        counts,
        surfaces,
        embedding,
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct TableCount {
    pub table: String,
    pub rows: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct EmbeddingModel {
    pub model_id: String,
    pub model_version: String,
    pub dim: u64,
    pub rows: u64,
}

/// Where the corpus is and how its storage is used: what `corpus health` shows beside the [`HealthReport`].
#[derive(Debug, Clone, Serialize)]
pub struct Storage {
    pub path: String,
    pub size_bytes: u64,
    pub relay_id: String,
    pub tables: Vec<TableCount>,
    /// Stored vectors by model, whichever models made them.
    pub embedding_models: Vec<EmbeddingModel>,
}

pub fn storage(conn: &Connection, path: &Path) -> Result<Storage, DbError> {
    let mut tables = Vec::new();
    for t in COUNTED_TABLES {
        let rows: u64 = conn.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))?;
        tables.push(TableCount {
            table: (*t).to_owned(),
            rows,
        });
    }
    let mut stmt = conn.prepare(
        "SELECT model_id, model_version, dim, count(*) FROM embeddings
         GROUP BY model_id, model_version, dim ORDER BY model_id, model_version",
    )?;
    let embedding_models = stmt
        .query_map([], |r| {
            Ok(EmbeddingModel {
                model_id: r.get(0)?,
                model_version: r.get(1)?,
                dim: r.get(2)?,
                rows: r.get(3)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Storage {
        path: path.display().to_string(),
        size_bytes: size_on_disk(path),
        relay_id: crate::db::relay_id(conn)?,
        tables,
        embedding_models,
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct SurfaceSummary {
    pub surface: String,
    /// Threads whose last turn was captured within the window.
    pub threads: u64,
    /// Messages (all revisions) captured within the window.
    pub messages: u64,
    pub last_captured_at: Option<String>,
    pub last_accepted_at: Option<String>,
    /// The surface's capture light now, by the one rule ([`personkit_shared::health::assess`]), as the
    /// extension's popup and the dashboard show it.
    pub status: StatusName,
    /// The reason code when a stale adapter or unparsed responses made the colour (`adapter_stale`, …).
    pub reason_code: Option<String>,
    /// Why the light has its colour, in words.
    pub reason: String,
}

/// The roll-up [`surfaces`] reads. The messages since a time are counted by surface in one pass over the recent end
/// of the capture-time index (`messages_captured`), never by reading each thread whole.
const SURFACES: &str =
    "WITH surf AS (SELECT surface FROM threads UNION SELECT surface FROM surface_stats
                   UNION SELECT surface FROM capture_reports),
     recent AS (SELECT t.surface, count(*) AS n FROM messages m INDEXED BY messages_captured
                JOIN threads t ON t.id = m.thread_id WHERE m.captured_at >= ?1 GROUP BY t.surface)
     SELECT surf.surface,
        (SELECT count(*) FROM threads t WHERE t.surface = surf.surface AND t.last_seen_at >= ?1),
        coalesce(recent.n, 0),
        (SELECT max(t.last_seen_at) FROM threads t WHERE t.surface = surf.surface)
     FROM surf LEFT JOIN recent ON recent.surface = surf.surface
     ORDER BY surf.surface";

/// Per-surface roll-up of threads active since `since`, each coloured as capture health colours it now.
pub fn surfaces(
    conn: &Connection,
    since: OffsetDateTime,
    now: OffsetDateTime,
) -> Result<Vec<SurfaceSummary>, DbError> {
    let health = capture_health(conn, now)?;
    let now_ms = (now.unix_timestamp_nanos() / 1_000_000) as i64;
    let since = fmt_time(since);
    let mut stmt = conn.prepare(SURFACES)?;
    let rows = stmt
        .query_map([since], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<Result<Vec<(String, u64, u64, Option<String>)>, _>>()?;
    let mut out = Vec::with_capacity(rows.len());
    for (surface, threads, messages, last_captured_at) in rows {
        let light = health.surfaces.iter().find(|h| h.surface == surface);
        out.push(SurfaceSummary {
            threads,
            messages,
            last_captured_at,
            last_accepted_at: light.and_then(|h| h.last_accepted_at.clone()),
            status: light.map_or(StatusName::Red, |h| h.status.into()),
            reason_code: light.and_then(|h| h.reason.clone()),
            reason: light.map_or_else(
                || "no turn has been accepted from this surface yet".to_owned(),
                |h| personkit_shared::health::explain(h, now_ms),
            ),
            surface,
        });
    }
    Ok(out)
}

/// One message as `corpus messages --json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct MessageRow {
    pub id: String,
    pub thread_id: String,
    pub surface: String,
    pub role: String,
    pub content: String,
    pub content_hash: String,
    pub message_key: Option<String>,
    pub ordinal: Option<u32>,
    pub occurred_at: Option<String>,
    pub captured_at: String,
    pub revision: u32,
    pub is_current: bool,
    /// The site's id of the turn this one answers or follows (its branch parent), where known.
    pub parent_key: Option<String>,
    /// How the stored rendering was read: `dom`, `network`, `export` or `harvest`.
    pub source_path: String,
}

/// Messages, newest capture first, optionally of one surface; one thread's messages (every revision) in turn
/// order ([`crate::order`]).
pub fn messages(
    conn: &Connection,
    surface: Option<&str>,
    thread: Option<&str>,
    limit: u32,
) -> Result<Vec<MessageRow>, DbError> {
    // One thread's turns are read by the thread and sorted (a thread is small); otherwise the newest come from
    // the end of the capture-time index, read until `limit` rows pass the surface filter.
    let (by, order) = if thread.is_some() {
        ("m.thread_id = ?2", crate::order::order_by!("m"))
    } else {
        ("?2 IS NULL", "ORDER BY m.captured_at DESC, m.pk DESC")
    };
    let mut stmt = conn.prepare(&format!(
        "SELECT m.id, m.thread_id, t.surface, m.role, m.content, m.content_hash, m.message_key, m.ordinal,
            m.occurred_at, m.captured_at, m.revision, m.is_current, m.parent_key, m.source_path
         FROM messages m JOIN threads t ON t.id = m.thread_id
         WHERE (?1 IS NULL OR t.surface = ?1) AND {by}
         {order} LIMIT ?3"
    ))?;
    let rows = stmt
        .query_map(params![surface, thread, limit], |r| {
            Ok(MessageRow {
                id: r.get(0)?,
                thread_id: r.get(1)?,
                surface: r.get(2)?,
                role: r.get(3)?,
                content: r.get(4)?,
                content_hash: r.get(5)?,
                message_key: r.get(6)?,
                ordinal: r.get(7)?,
                occurred_at: r.get(8)?,
                captured_at: r.get(9)?,
                revision: r.get(10)?,
                is_current: r.get(11)?,
                parent_key: r.get(12)?,
                source_path: r.get(13)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

#[derive(Debug, Clone, Serialize)]
pub struct SearchHit {
    pub message_id: String,
    pub thread_id: String,
    pub surface: String,
    pub role: String,
    pub captured_at: String,
    pub snippet: String,
    /// FTS5 bm25 (lower is better).
    pub score: f64,
}

/// Turn user words into an FTS5 query that matches all of them, with no FTS syntax (every word quoted).
pub fn fts_query(words: &str) -> Option<String> {
    let terms: Vec<String> = words
        .split_whitespace()
        .map(|w| w.replace('"', "\"\""))
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .map(|w| format!("\"{w}\""))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" "))
}

/// Keyword search over current messages with FTS5 BM25, best first.
pub fn search(conn: &Connection, words: &str, limit: u32) -> Result<Vec<SearchHit>, DbError> {
    crate::budget::check_query_text(words)
        .map_err(|e| DbError::Invalid(format!("{e}; {}", e.hint())))?;
    let Some(query) = fts_query(words) else {
        return Ok(Vec::new());
    };
    let mut stmt = conn.prepare(
        "SELECT m.id, m.thread_id, t.surface, m.role, m.captured_at,
            snippet(messages_fts, 0, '[', ']', '…', 16), bm25(messages_fts) AS score
         FROM messages_fts JOIN messages m ON m.pk = messages_fts.rowid JOIN threads t ON t.id = m.thread_id
         WHERE messages_fts MATCH ?1 AND m.is_current = 1
         ORDER BY score LIMIT ?2",
    )?;
    let rows = stmt
        .query_map(params![query, limit], |r| {
            Ok(SearchHit {
                message_id: r.get(0)?,
                thread_id: r.get(1)?,
                surface: r.get(2)?,
                role: r.get(3)?,
                captured_at: r.get(4)?,
                snippet: r.get(5)?,
                score: r.get(6)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::ingest::{Origin, ingest_observations};
    use personkit_shared::health::Status;
    use personkit_shared::wire::{ClientInfo, Role, build_observation};
    use proptest::prelude::*;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-22 10:00:00 UTC);

    /// The surfaces roll-up counts recent turns from the capture-time index, not by reading every thread whole.
    #[test]
    fn the_surfaces_roll_up_reads_only_recent_turns() {
        let (_d, conn) = filled();
        let steps: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {SURFACES}"))
            .unwrap()
            .query_map(["2026-11-22T00:00:00.000Z"], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let plan = steps.join(" | ");
        assert!(
            plan.contains("SEARCH m USING INDEX messages_captured (captured_at>?)"),
            "plan: {plan}"
        );
    }

    fn filled() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = crate::db::open(&dir.path().join("c.db")).unwrap();
        let client = ClientInfo {
            app_version: "0.1.0".into(),
            device_id: "ext".into(),
        };
        let turns = [
            (
                "browser-ext:chatgpt",
                "a",
                "the borrow checker rejects this",
                "2026-11-22T09:00:00Z",
            ),
            (
                "browser-ext:chatgpt",
                "a",
                "use a reference with a shorter lifetime",
                "2026-11-22T09:01:00Z",
            ),
            (
                "browser-ext:claude",
                "b",
                "a recipe for lentil soup",
                "2026-11-01T09:00:00Z",
            ),
        ];
        let obs: Vec<_> = turns
            .iter()
            .enumerate()
            .map(|(i, (s, c, text, at))| {
                build_observation(
                    s,
                    c,
                    Role::User,
                    text,
                    Some(i as u32),
                    None,
                    at,
                    client.clone(),
                )
            })
            .collect();
        let origin = Origin {
            device_id: "d".into(),
        };
        ingest_observations(&mut conn, &origin, &obs, NOW).unwrap();
        (dir, conn)
    }

    #[test]
    fn surfaces_roll_up_the_window() {
        let (_d, conn) = filled();
        let rows = surfaces(&conn, NOW - time::Duration::days(7), NOW).unwrap();
        let by: Vec<(&str, u64, u64)> = rows
            .iter()
            .map(|r| (r.surface.as_str(), r.threads, r.messages))
            .collect();
        assert_eq!(
            by,
            vec![("browser-ext:chatgpt", 1, 2), ("browser-ext:claude", 0, 0)]
        );
        assert_eq!(rows[0].status, StatusName::Green);
    }

    /// `corpus surfaces` colours a surface by the one capture-health rule: a device's stale-adapter report turns
    /// a surface that captured a minute ago yellow with the reason `adapter_stale`, as the popup and the dashboard
    /// show it.
    #[test]
    fn the_roll_up_shows_a_stale_adapter_like_the_popup() {
        let (_d, mut conn) = filled();
        let now = datetime!(2026-11-22 09:02:00 UTC);
        let week = now - time::Duration::days(7);
        let before = surfaces(&conn, week, now).unwrap();
        assert_eq!(before[0].status, StatusName::Green, "{before:?}");
        assert_eq!(before[0].reason_code, None);
        let report = personkit_shared::health::CaptureReport {
            surface: "browser-ext:chatgpt".into(),
            stale_since: Some("2026-11-22T08:59:00Z".into()),
            rule: None,
            paths: None,
        };
        let unseen = personkit_shared::health::CaptureReport {
            surface: "browser-ext:grok".into(),
            ..report.clone()
        };
        crate::health::record_reports(&mut conn, "ext", &[report, unseen], now).unwrap();
        let rows = surfaces(&conn, week, now).unwrap();
        let health = capture_health(&conn, now).unwrap();
        let states = surface_states(&conn, now).unwrap();
        assert_eq!(rows[0].status, StatusName::Yellow, "{rows:?}");
        assert_eq!(rows[0].reason_code.as_deref(), Some("adapter_stale"));
        assert!(
            rows[0].reason.contains("yield no turns"),
            "{}",
            rows[0].reason
        );
        assert_eq!(Status::from(rows[0].status), health.surfaces[0].status);
        assert_eq!(
            rows[0].reason, states[0].reason,
            "one sentence for the CLI, dashboard and MCP"
        );
        assert_eq!(rows[0].reason_code, states[0].reason_code);
        // A surface known only from a device's report is listed too, as capture health lists it.
        let grok = rows.iter().find(|r| r.surface == "browser-ext:grok");
        assert_eq!(
            grok.map(|r| (r.threads, r.status)),
            Some((0, StatusName::Red)),
            "{rows:?}"
        );
        assert_eq!(
            grok.and_then(|r| r.reason_code.as_deref()),
            Some("adapter_stale")
        );
    }

    #[test]
    fn messages_filter_and_order_newest_first() {
        let (_d, conn) = filled();
        let all = messages(&conn, None, None, 10).unwrap();
        assert_eq!(all.len(), 3);
        let chat = messages(&conn, Some("browser-ext:chatgpt"), None, 10).unwrap();
        assert_eq!(chat.len(), 2);
        assert_eq!(chat[0].content, "use a reference with a shorter lifetime");
        let one = messages(&conn, Some("browser-ext:chatgpt"), None, 1).unwrap();
        assert_eq!(one.len(), 1);
        let thread = messages(&conn, None, Some(&all[2].thread_id), 10).unwrap();
        assert!(thread.iter().all(|m| m.thread_id == all[2].thread_id));
    }

    #[test]
    fn search_finds_stemmed_words() {
        let (_d, conn) = filled();
        let hits = search(&conn, "borrowing checkers", 5).unwrap();
        assert_eq!(hits.len(), 1, "porter stemming: {hits:?}");
        assert!(hits[0].snippet.contains("[borrow]"), "{}", hits[0].snippet);
        assert!(
            search(&conn, "soup borrow", 5).unwrap().is_empty(),
            "all words must occur"
        );
        let h = health_report(&conn, NOW, None).unwrap();
        assert_eq!(h.counts.turns, 3);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Whatever a person types, search answers (possibly nothing) instead of an FTS syntax error.
        #[test]
        fn any_words_are_a_valid_query(words in "\\PC{0,40}") {
            let (_d, conn) = filled();
            prop_assert!(search(&conn, &words, 5).is_ok());
        }
    }

    #[test]
    fn fts_query_quotes_every_word() {
        assert_eq!(
            fts_query("rust  borrow"),
            Some("\"rust\" \"borrow\"".into())
        );
        assert_eq!(
            fts_query("NOT a\"b OR"),
            Some("\"NOT\" \"a\"\"b\" \"OR\"".into())
        );
        assert_eq!(fts_query("  - * "), None);
    }
}

/// One stored turn of a thread with how it was read (`corpus` debugging, the turn-identity tests).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RenderingRow {
    pub role: String,
    pub content: String,
    /// `dom`, `network`, `export` or `harvest`.
    pub source_path: String,
    pub message_key: Option<String>,
    pub parent_key: Option<String>,
    pub revision: u32,
    pub is_current: bool,
    /// Lower-ranked renderings folded into this turn.
    pub folded: u32,
}

/// Every stored turn of thread `thread_id` (current or not), in storage order.
pub fn thread_renderings(conn: &Connection, thread_id: &str) -> Result<Vec<RenderingRow>, DbError> {
    let mut stmt = conn.prepare(
        "SELECT m.role, m.content, m.source_path, m.message_key, m.parent_key, m.revision, m.is_current,
            (SELECT count(*) FROM message_renderings r WHERE r.message_pk = m.pk)
         FROM messages m WHERE m.thread_id = ?1 ORDER BY m.pk",
    )?;
    let rows = stmt
        .query_map([thread_id], |r| {
            Ok(RenderingRow {
                role: r.get(0)?,
                content: r.get(1)?,
                source_path: r.get(2)?,
                message_key: r.get(3)?,
                parent_key: r.get(4)?,
                revision: r.get(5)?,
                is_current: r.get::<_, i64>(6)? == 1,
                folded: r.get(7)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}
