//! Bulk loading of ready-made messages straight into the tables, for benchmarks that need corpora far larger
//! than ingest could build in their time (10^6 messages with vectors). No validation, no revisions, no
//! signal-layer rows: this is not an ingest path, and the relay never calls it.

use personkit_shared::ids;
use personkit_shared::wire::Role;
use rusqlite::{Connection, params};

use crate::db::DbError;
use crate::vectors::{ModelRef, text_hash, vec_to_blob};

/// One message to load. Its thread is created (with `title`) when it does not exist yet.
#[derive(Debug, Clone)]
pub struct BulkMessage {
    pub surface: String,
    pub conversation_id: String,
    pub title: String,
    pub role: Role,
    pub content: String,
    pub ordinal: u32,
    /// Stored time form; used as occurred, captured and first/last seen time.
    pub at: String,
    /// The message's vector from `model` (see [`load`]).
    pub vector: Option<Vec<f32>>,
}

/// Loads `rows` in one transaction, attributed to origin `origin` with sequence numbers from `first_seq`.
/// Vectors go into the vec0 tables of `model.dim`, the embeddings cache and `search_vec_state`.
pub fn load(
    conn: &mut Connection,
    rows: &[BulkMessage],
    model: Option<ModelRef<'_>>,
    origin: &str,
    first_seq: i64,
    now: &str,
) -> Result<(), DbError> {
    let tx = conn.transaction()?;
    {
        let mut th = tx.prepare_cached(
            "INSERT OR IGNORE INTO threads (id, surface, conversation_id, title, first_seen_at, last_seen_at,
               origin_device, origin_seq) VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7)",
        )?;
        let mut msg = tx.prepare_cached(
            "INSERT INTO messages (id, thread_id, role, content, content_hash, ordinal, position_key,
               occurred_at, captured_at, received_at, origin_device, origin_seq)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'o:' || ?6, ?7, ?7, ?8, ?9, ?10)",
        )?;
        for (i, m) in rows.iter().enumerate() {
            let seq = first_seq + i as i64;
            let tuuid = ids::thread_id(&m.surface, &m.conversation_id);
            let tid = tuuid.hyphenated().to_string();
            th.execute(params![
                tid,
                m.surface,
                m.conversation_id,
                m.title,
                m.at,
                origin,
                seq
            ])?;
            let hash = ids::content_hash(&m.content, m.role);
            let id = ids::message_id(&tuuid, &hash).hyphenated().to_string();
            msg.execute(params![
                id,
                tid,
                m.role.as_str(),
                m.content,
                hash,
                i64::from(m.ordinal),
                m.at,
                now,
                origin,
                seq
            ])?;
            let pk = tx.last_insert_rowid();
            crate::pending::queue(&tx, pk)?;
            if let (Some(v), Some(model)) = (&m.vector, model) {
                let blob = vec_to_blob(v);
                let th_ = text_hash(&m.content);
                tx.prepare_cached(&format!(
                    "INSERT INTO messages_vec_{}(rowid, embedding) VALUES (?1, ?2)",
                    model.dim
                ))?
                .execute(params![pk, blob])?;
                tx.prepare_cached(&format!(
                    "INSERT INTO messages_vbit_{}(rowid, embedding) VALUES (?1, vec_quantize_binary(?2))",
                    model.dim
                ))?
                .execute(params![pk, blob])?;
                tx.prepare_cached(
                    "INSERT OR IGNORE INTO embeddings (text_hash, model_id, model_version, dim, vector, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![th_, model.id, model.version, model.dim as i64, blob, now])?;
                tx.prepare_cached(
                    "INSERT INTO search_vec_state (kind, pk, text_hash, model_key, dim)
                     VALUES ('message', ?1, ?2, ?3, ?4)",
                )?
                .execute(params![pk, th_, model.key(), model.dim as i64])?;
            }
        }
    }
    crate::pending::commit(tx)?;
    Ok(())
}

/// Runs `ANALYZE` and `PRAGMA optimize` (after a bulk load, so the planner knows the tables' sizes).
pub fn analyze(conn: &Connection) -> Result<(), DbError> {
    conn.execute_batch("ANALYZE; PRAGMA optimize;")?;
    Ok(())
}

/// Number of messages (all revisions) in the corpus.
pub fn message_count(conn: &Connection) -> Result<u64, DbError> {
    Ok(conn.query_row("SELECT count(*) FROM messages", [], |r| r.get(0))?)
}

/// Runs diagnostic SQL (dropping an index, changing a pragma) on a benchmark corpus. Only the ingest-costs
/// benchmark calls it, to measure what each part of the schema costs.
pub fn tune_for_diagnostics(conn: &Connection, sql: &str) -> Result<(), DbError> {
    conn.execute_batch(sql)?;
    Ok(())
}

/// One synthetic entity for [`load_graph`]: its kind, display name, and the thread that supports it.
#[derive(Debug, Clone)]
pub struct BulkEntity {
    pub kind: String,
    pub name: String,
    pub thread_id: String,
}

/// One synthetic relation for [`load_graph`], between entities given by their index in the entity list.
#[derive(Debug, Clone)]
pub struct BulkRelation {
    pub subject: usize,
    pub predicate: String,
    pub object: usize,
    pub thread_id: String,
}

/// Replaces the graph with `entities` and `relations` (each with one alias, its lower-cased name, and one
/// certain thread source), in one transaction, straight into the tables: the ids are the ones
/// `crate::graph` gives, so its reads walk the result as they walk a derived graph. Returns the entity ids in
/// order. Relations that repeat a triple or join an entity to itself are left out.
pub fn load_graph(
    conn: &mut Connection,
    entities: &[BulkEntity],
    relations: &[BulkRelation],
    now: &str,
) -> Result<Vec<String>, DbError> {
    let tx = conn.transaction()?;
    for table in [
        "relation_sources",
        "relations",
        "entity_sources",
        "entity_aliases",
        "entity_merge_candidates",
        "entities",
    ] {
        tx.execute(&format!("DELETE FROM {table}"), [])?;
    }
    let mut ids = Vec::with_capacity(entities.len());
    {
        let mut ent = tx.prepare(
            "INSERT INTO entities (id, kind, name, created_at, origin_device, origin_seq)
             VALUES (?1, ?2, ?3, ?4, 'bench', ?5)",
        )?;
        let mut alias = tx.prepare(
            "INSERT INTO entity_aliases (entity_id, alias, created_at, origin_device, origin_seq)
             VALUES (?1, ?2, ?3, 'bench', ?4)",
        )?;
        let mut src = tx.prepare(
            "INSERT INTO entity_sources (entity_id, source_kind, source_id, how, confidence, seen_at, created_at)
             VALUES (?1, 'thread', ?2, 'certain', 1.0, ?3, ?3)",
        )?;
        for (i, e) in entities.iter().enumerate() {
            let key = e.name.to_lowercase();
            let id = crate::graph::entity_id(&e.kind, &key);
            ent.execute(params![id, e.kind, e.name, now, i as i64 + 1])?;
            alias.execute(params![id, key, now, i as i64 + 1])?;
            src.execute(params![id, e.thread_id, now])?;
            ids.push(id);
        }
        let mut rel = tx.prepare(
            "INSERT OR IGNORE INTO relations (id, subject_id, predicate, object_id, valid_from, valid_to,
                 created_at, origin_device, origin_seq)
             VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?5, 'bench', ?6)",
        )?;
        let mut rsrc = tx.prepare(
            "INSERT OR IGNORE INTO relation_sources (relation_id, source_kind, source_id, how, confidence,
                 seen_at, created_at)
             VALUES (?1, 'thread', ?2, 'certain', 1.0, ?3, ?3)",
        )?;
        for (i, r) in relations.iter().enumerate() {
            let (Some(s), Some(o)) = (ids.get(r.subject), ids.get(r.object)) else {
                continue;
            };
            if s == o {
                continue;
            }
            let id = crate::graph::relation_id(s, &r.predicate, o);
            if rel.execute(params![
                id,
                s,
                r.predicate,
                o,
                now,
                (entities.len() + i) as i64 + 1
            ])? == 1
            {
                rsrc.execute(params![id, r.thread_id, now])?;
            }
        }
    }
    tx.commit()?;
    Ok(ids)
}

/// SQLite's own heap in this process (every connection's page cache, statements and sorts): bytes in use now and
/// the most in use since the last reset; `reset` starts a new high-water mark at the current use.
pub fn sqlite_memory(reset: bool) -> (i64, i64) {
    #[allow(unsafe_code)]
    // SAFETY: both calls read (and the second may reset) SQLite's global memory counters; they take no pointers
    // and are safe to call from any thread at any time.
    unsafe {
        (
            rusqlite::ffi::sqlite3_memory_used(),
            rusqlite::ffi::sqlite3_memory_highwater(i32::from(reset)),
        )
    }
}

/// The dashboard benchmark's baselines: the rows a page shows, each fetched with one plain query, so a page's
/// time can be read against the cost of its data. Returns the rows read (to keep the work observable).
pub mod baseline {
    use rusqlite::{Connection, params};

    use crate::db::DbError;

    /// The newest `limit` threads with their title, surface and last activity.
    pub fn thread_list(conn: &Connection, limit: u32) -> Result<usize, DbError> {
        let mut st = conn.prepare_cached(
            "SELECT id, surface, title, url, last_seen_at FROM threads
             ORDER BY last_seen_at DESC, id DESC LIMIT ?1",
        )?;
        let rows = st.query_map([limit], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, String>(4)?,
            ))
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?.len())
    }

    /// The first `limit` current turns of a thread, in order, with their text.
    pub fn thread_turns(conn: &Connection, thread_id: &str, limit: u32) -> Result<usize, DbError> {
        let mut st = conn.prepare_cached(concat!(
            "SELECT id, role, content, COALESCE(occurred_at, captured_at) FROM messages
             WHERE thread_id = ?1 AND is_current = 1 ",
            crate::order::order_by!("messages"),
            " LIMIT ?2",
        ))?;
        let rows = st.query_map(params![thread_id, limit], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?.len())
    }

    /// Every current turn captured in `[from, to)` with its thread, role, time and first `chars` characters:
    /// the rows the short memory digest summarises for that span, read once.
    pub fn span_turns(
        conn: &Connection,
        from: &str,
        to: &str,
        chars: u32,
    ) -> Result<usize, DbError> {
        let mut st = conn.prepare_cached(
            "SELECT thread_id, role, captured_at, substr(content, 1, ?3) FROM messages
             WHERE captured_at >= ?1 AND captured_at < ?2 AND is_current = 1",
        )?;
        let rows = st.query_map(params![from, to, chars], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?.len())
    }

    /// The newest body of each memory tier and of the profile, and the first `knowledge` approved entries: the
    /// rows an agent's context is made of. Returns the characters read.
    pub fn context_rows(conn: &Connection, knowledge: u32) -> Result<usize, DbError> {
        let mut latest = conn.prepare_cached(
            "SELECT body FROM memory_versions WHERE tier = ?1 AND withdrawn_at IS NULL
             ORDER BY created_at DESC, origin_seq DESC, id DESC LIMIT 1",
        )?;
        let mut chars = 0;
        for tier in ["profile", "short", "mid", "long"] {
            let body: Option<String> =
                latest
                    .query_row([tier], |r| r.get(0))
                    .map(Some)
                    .or_else(|e| match e {
                        rusqlite::Error::QueryReturnedNoRows => Ok(None),
                        e => Err(e),
                    })?;
            chars += body.map_or(0, |b| b.len());
        }
        let mut st = conn.prepare_cached(
            "SELECT kind, topic, position FROM knowledge_entries WHERE status = 'approved'
             ORDER BY reinforced DESC, decided_at DESC, id LIMIT ?1",
        )?;
        let rows = st.query_map([knowledge], |r| {
            Ok(r.get::<_, String>(0)?.len()
                + r.get::<_, String>(1)?.len()
                + r.get::<_, String>(2)?.len())
        })?;
        for n in rows {
            chars += n?;
        }
        Ok(chars)
    }

    /// The entities one relation away from `id`, either direction, at most `limit`: ids only, no names, no order.
    pub fn adjacent(conn: &Connection, id: &str, limit: u32) -> Result<Vec<String>, DbError> {
        let mut st = conn.prepare_cached(
            "SELECT object_id FROM relations WHERE subject_id = ?1
             UNION ALL SELECT subject_id FROM relations WHERE object_id = ?1 LIMIT ?2",
        )?;
        let rows = st.query_map(params![id, limit], |r| r.get(0))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// The `limit` best full-text matches of an FTS expression, with their text and thread title.
    pub fn keyword_hits(conn: &Connection, fts: &str, limit: u32) -> Result<usize, DbError> {
        let mut st = conn.prepare_cached(
            "SELECT m.id, m.content, t.title FROM messages_fts
             JOIN messages m ON m.pk = messages_fts.rowid JOIN threads t ON t.id = m.thread_id
             WHERE messages_fts MATCH ?1 AND m.is_current = 1 ORDER BY rank LIMIT ?2",
        )?;
        let rows = st.query_map(params![fts, limit], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
            ))
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?.len())
    }
}
