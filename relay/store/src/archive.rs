//! The rows that leave the corpus and come back: what `personkit export` renders (threads with every stored
//! revision, [`export_threads`]) and the rows a snapshot holds ([`dump_rows`] reads them in canonical order,
//! [`restore`] puts them back into an empty corpus). The snapshot record format — how a row is written as a line
//! and read back — is `personkit_archive::record`'s; this module reads and writes rows only.
//!
//! Rows are ordered by each table's key, tables in [`TABLES`] order, so the same corpus always gives the same
//! rows. Local rowids (`messages.pk`, `events.pk`), vectors, devices, tokens and capture health do not travel:
//! the first three are re-derived (FTS by trigger, vectors by the embedding job), the others belong to one relay.
//! Memory versions and the threads they drew on travel; memory's run state (`memory_state`: last runs, tiers due)
//! is the machine's own. The graph travels with every link's sources (so a forget after a restore still removes
//! what only the forgotten turns supported), the user's merge decisions and the names a model proposed with the
//! user's decisions on them; the derivation's and extraction's cursors (`graph_state`, `graph_redo`) do not: a
//! restored corpus is read again from its first turn.

pub use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, TransactionBehavior, params};
use serde::Serialize;

use crate::db::DbError;

/// One table of a snapshot: its name, columns in record order, the key it is ordered by, and which columns
/// are blobs.
#[derive(Debug)]
pub struct TableSpec {
    pub name: &'static str,
    pub columns: &'static [&'static str],
    pub order_by: &'static str,
    pub blob_columns: &'static [&'static str],
    /// Columns holding reals (any other number is an integer).
    pub real_columns: &'static [&'static str],
    /// Columns added after the format's first release, at the end of `columns`: a record written before one was
    /// added lacks it and restores it as NULL.
    pub added_columns: &'static [&'static str],
    /// The query that dumps the rows, when a plain `SELECT columns FROM name ORDER BY key` would leak a local
    /// rowid: it must yield `columns` in order.
    pub dump_sql: Option<&'static str>,
    /// The statement that restores one record, paired with `dump_sql` (turns the travelling id back into the
    /// local rowid).
    pub insert_sql: Option<&'static str>,
}

impl TableSpec {
    /// The query that reads the table's records, `columns` in order, in canonical order.
    pub fn select_statement(&self) -> String {
        match self.dump_sql {
            Some(sql) => sql.to_owned(),
            None => format!(
                "SELECT {} FROM {} ORDER BY {}",
                self.columns.join(", "),
                self.name,
                self.order_by
            ),
        }
    }

    /// The statement that inserts one record (`?1`… in `columns` order).
    pub fn insert_statement(&self) -> String {
        match self.insert_sql {
            Some(sql) => sql.to_owned(),
            None => format!(
                "INSERT INTO {} ({}) VALUES ({})",
                self.name,
                self.columns.join(", "),
                (1..=self.columns.len())
                    .map(|i| format!("?{i}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// Every table a snapshot carries, in the order records appear (parents before the rows that refer to them).
pub const TABLES: &[TableSpec] = &[
    TableSpec {
        name: "origin_seqs",
        columns: &["origin", "last_seq"],
        order_by: "origin",
        blob_columns: &[],
        real_columns: &[],
        added_columns: &[],
        dump_sql: None,
        insert_sql: None,
    },
    TableSpec {
        name: "provenance",
        columns: &[
            "id",
            "captured_at",
            "origin_device",
            "client_device_id",
            "app_version",
            "signed_by",
            "signature",
        ],
        order_by: "id",
        blob_columns: &["signature"],
        real_columns: &[],
        added_columns: &[],
        dump_sql: None,
        insert_sql: None,
    },
    TableSpec {
        name: "entities",
        columns: &[
            "id",
            "kind",
            "name",
            "attrs",
            "created_at",
            "provenance_id",
            "origin_device",
            "origin_seq",
        ],
        order_by: "id",
        blob_columns: &[],
        real_columns: &[],
        added_columns: &[],
        dump_sql: None,
        insert_sql: None,
    },
    TableSpec {
        name: "entity_aliases",
        columns: &[
            "entity_id",
            "alias",
            "created_at",
            "origin_device",
            "origin_seq",
        ],
        order_by: "entity_id, alias",
        blob_columns: &[],
        real_columns: &[],
        added_columns: &[],
        dump_sql: None,
        insert_sql: None,
    },
    TableSpec {
        name: "relations",
        columns: &[
            "id",
            "subject_id",
            "predicate",
            "object_id",
            "valid_from",
            "valid_to",
            "attrs",
            "created_at",
            "provenance_id",
            "origin_device",
            "origin_seq",
        ],
        order_by: "id",
        blob_columns: &[],
        real_columns: &[],
        added_columns: &[],
        dump_sql: None,
        insert_sql: None,
    },
    TableSpec {
        name: "entity_sources",
        columns: &[
            "entity_id",
            "source_kind",
            "source_id",
            "how",
            "confidence",
            "seen_at",
            "created_at",
        ],
        order_by: "entity_id, source_kind, source_id",
        blob_columns: &[],
        real_columns: &["confidence"],
        added_columns: &[],
        dump_sql: None,
        insert_sql: None,
    },
    TableSpec {
        name: "relation_sources",
        columns: &[
            "relation_id",
            "source_kind",
            "source_id",
            "how",
            "confidence",
            "seen_at",
            "created_at",
        ],
        order_by: "relation_id, source_kind, source_id",
        blob_columns: &[],
        real_columns: &["confidence"],
        added_columns: &[],
        dump_sql: None,
        insert_sql: None,
    },
    TableSpec {
        name: "entity_merge_candidates",
        columns: &[
            "a",
            "b",
            "kind",
            "a_name",
            "b_name",
            "similarity",
            "state",
            "created_at",
            "decided_at",
            "kept",
        ],
        order_by: "a, b",
        blob_columns: &[],
        real_columns: &["similarity"],
        added_columns: &["kept"],
        dump_sql: None,
        insert_sql: None,
    },
    TableSpec {
        name: "entity_proposals",
        columns: &[
            "id",
            "kind",
            "name",
            "key",
            "confidence",
            "model",
            "state",
            "entity_id",
            "created_at",
            "decided_at",
        ],
        order_by: "id",
        blob_columns: &[],
        real_columns: &["confidence"],
        added_columns: &[],
        dump_sql: None,
        insert_sql: None,
    },
    TableSpec {
        name: "entity_proposal_sources",
        columns: &[
            "proposal_id",
            "message_id",
            "thread_id",
            "confidence",
            "seen_at",
        ],
        order_by: "proposal_id, message_id",
        blob_columns: &[],
        real_columns: &["confidence"],
        added_columns: &[],
        dump_sql: None,
        insert_sql: None,
    },
    TableSpec {
        name: "events",
        columns: &[
            "id",
            "kind",
            "source_surface",
            "content",
            "content_hash",
            "minute_bucket",
            "occurred_at",
            "captured_at",
            "attrs",
            "provenance_id",
            "origin_device",
            "origin_seq",
        ],
        order_by: "id",
        blob_columns: &[],
        real_columns: &[],
        added_columns: &[],
        dump_sql: None,
        insert_sql: None,
    },
    TableSpec {
        name: "threads",
        columns: &[
            "id",
            "surface",
            "conversation_id",
            "title",
            "url",
            "first_seen_at",
            "last_seen_at",
            "origin_device",
            "origin_seq",
        ],
        order_by: "id",
        blob_columns: &[],
        real_columns: &[],
        added_columns: &[],
        dump_sql: None,
        insert_sql: None,
    },
    TableSpec {
        name: "messages",
        columns: &[
            "id",
            "thread_id",
            "role",
            "content",
            "content_hash",
            "message_key",
            "ordinal",
            "position_key",
            "revision",
            "is_current",
            "occurred_at",
            "captured_at",
            "received_at",
            "tool_calls",
            "provenance_id",
            "origin_device",
            "origin_seq",
            "source_path",
            "source_rank",
            "parent_key",
        ],
        order_by: "id",
        blob_columns: &[],
        real_columns: &[],
        added_columns: &[],
        dump_sql: None,
        insert_sql: None,
    },
    TableSpec {
        name: "message_renderings",
        columns: &[
            "thread_id",
            "content_hash",
            "message_id",
            "source_path",
            "folded_at",
        ],
        order_by: "thread_id, content_hash",
        blob_columns: &[],
        real_columns: &[],
        added_columns: &[],
        dump_sql: Some(
            "SELECT r.thread_id, r.content_hash, m.id, r.source_path, r.folded_at
             FROM message_renderings r JOIN messages m ON m.pk = r.message_pk
             ORDER BY r.thread_id, r.content_hash",
        ),
        insert_sql: Some(
            "INSERT INTO message_renderings (thread_id, content_hash, message_pk, source_path, folded_at)
             VALUES (?1, ?2, (SELECT pk FROM messages WHERE id = ?3), ?4, ?5)",
        ),
    },
    TableSpec {
        name: "forgotten_messages",
        columns: &["id", "thread_id", "forgotten_at"],
        order_by: "id",
        blob_columns: &[],
        real_columns: &[],
        added_columns: &[],
        dump_sql: None,
        insert_sql: None,
    },
    TableSpec {
        name: "memory_versions",
        columns: &[
            "id",
            "tier",
            "created_at",
            "body",
            "tokens",
            "model",
            "prompt_version",
            "covers_from",
            "covers_to",
            "based_on",
            "withdrawn_at",
            "origin_device",
            "origin_seq",
        ],
        order_by: "id",
        blob_columns: &[],
        real_columns: &[],
        added_columns: &[],
        dump_sql: None,
        insert_sql: None,
    },
    TableSpec {
        name: "memory_sources",
        columns: &["version_id", "thread_id"],
        order_by: "version_id, thread_id",
        blob_columns: &[],
        real_columns: &[],
        added_columns: &[],
        dump_sql: None,
        insert_sql: None,
    },
];

/// Rows per table, in [`TABLES`] order.
pub fn table_counts(conn: &Connection) -> Result<Vec<(&'static str, u64)>, DbError> {
    TABLES
        .iter()
        .map(|t| {
            let n: u64 = conn.query_row(&format!("SELECT count(*) FROM {}", t.name), [], |r| {
                r.get(0)
            })?;
            Ok((t.name, n))
        })
        .collect()
}

/// Calls `each` with every snapshot row — its table and its values in [`TableSpec::columns`] order — in
/// canonical order.
pub fn dump_rows(
    conn: &Connection,
    mut each: impl FnMut(&TableSpec, &[ValueRef<'_>]) -> std::io::Result<()>,
) -> Result<(), DumpError> {
    for t in TABLES {
        let mut stmt = conn.prepare(&t.select_statement())?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let values = (0..t.columns.len())
                .map(|i| r.get_ref(i))
                .collect::<Result<Vec<_>, _>>()?;
            each(t, &values).map_err(DumpError::Io)?;
        }
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("writing the snapshot: {0}")]
    Io(std::io::Error),
}

impl From<rusqlite::Error> for DumpError {
    fn from(e: rusqlite::Error) -> Self {
        DumpError::Db(DbError::Sqlite(e))
    }
}

/// A snapshot row to insert: its table (an index into [`TABLES`]) and its values in [`TableSpec::columns`]
/// order. `personkit_archive::record::Record` is the one a verified snapshot gives.
pub trait SnapshotRow {
    fn table(&self) -> usize;
    fn values(&self) -> &[Value];
}

/// Whether the corpus holds anything a restore would collide with (any row of a snapshot table).
pub fn is_empty(conn: &Connection) -> Result<bool, DbError> {
    Ok(table_counts(conn)?.iter().all(|(_, n)| *n == 0))
}

#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("the corpus is not empty ({0}); restore into a new corpus file (--db)")]
    NotEmpty(String),
    #[error("record {line}: {message}")]
    Row { line: usize, message: String },
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<rusqlite::Error> for RestoreError {
    fn from(e: rusqlite::Error) -> Self {
        RestoreError::Db(DbError::Sqlite(e))
    }
}

/// Inserts already-verified records into an empty corpus in one transaction: any failure (a constraint, a
/// duplicate) rolls everything back. `first_line` numbers the records in messages. Calls `progress` with the
/// count done every so often.
pub fn restore<R: SnapshotRow>(
    conn: &mut Connection,
    records: &[R],
    first_line: usize,
    mut progress: impl FnMut(u64),
) -> Result<(), RestoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let counts = table_counts(&tx)?;
    let filled: Vec<String> = counts
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(t, n)| format!("{n} {t}"))
        .collect();
    if !filled.is_empty() {
        return Err(RestoreError::NotEmpty(filled.join(", ")));
    }
    insert(&tx, records, first_line, &mut progress)?;
    crate::pending::commit(tx)?;
    progress(records.len() as u64);
    Ok(())
}

fn insert<R: SnapshotRow>(
    tx: &Connection,
    records: &[R],
    first_line: usize,
    progress: &mut impl FnMut(u64),
) -> Result<(), RestoreError> {
    let sqls: Vec<String> = TABLES.iter().map(TableSpec::insert_statement).collect();
    for (i, r) in records.iter().enumerate() {
        let Some(sql) = sqls.get(r.table()) else {
            return Err(RestoreError::Row {
                line: first_line + i,
                message: "unknown table".into(),
            });
        };
        let mut stmt = tx.prepare_cached(sql)?;
        stmt.execute(rusqlite::params_from_iter(r.values().iter()))
            .map_err(|e| RestoreError::Row {
                line: first_line + i,
                message: e.to_string(),
            })?;
        if TABLES[r.table()].name == "messages" {
            crate::pending::queue(tx, tx.last_insert_rowid())?;
        }
        if i % 4096 == 0 {
            progress(i as u64);
        }
    }
    Ok(())
}

/// Inserts records in one transaction with no checks (the benchmarks' baseline for a restore's writes).
pub fn insert_plain<R: SnapshotRow>(
    conn: &mut Connection,
    records: &[R],
) -> Result<(), RestoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    insert(&tx, records, 0, &mut |_| {})?;
    crate::pending::commit(tx)?;
    Ok(())
}

/// Which threads an export renders.
#[derive(Debug, Clone, Default)]
pub struct ExportFilter {
    pub surface: Option<String>,
    /// Inclusive lower bound on the thread's last activity (stored time form).
    pub since: Option<String>,
    /// Full thread ids; when given, only these.
    pub threads: Vec<String>,
}

/// A thread with every stored message, as an export renders it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportThread {
    pub id: String,
    pub surface: String,
    pub conversation_id: String,
    pub title: Option<String>,
    pub url: Option<String>,
    pub first_seen_at: String,
    pub last_seen_at: String,
    /// Current turns in reading order, each with its other revisions.
    pub turns: Vec<ExportTurn>,
    /// Stored messages, revisions included.
    pub messages: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportTurn {
    pub id: String,
    pub role: String,
    pub content: String,
    /// `occurred_at` when the surface reported it, else `captured_at`.
    pub time: String,
    pub revision: u32,
    /// Other contents at this position (edits, regenerations), by revision.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<ExportRevision>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportRevision {
    pub id: String,
    pub revision: u32,
    pub captured_at: String,
    pub content: String,
}

/// Ids of the threads matching `filter`, plus those of `also` that still exist, sorted.
pub fn export_thread_ids(
    conn: &Connection,
    filter: &ExportFilter,
    also: &[String],
) -> Result<Vec<String>, DbError> {
    let mut ids: Vec<String> = if filter.threads.is_empty() {
        conn.prepare(
            "SELECT id FROM threads WHERE (?1 IS NULL OR surface = ?1) AND (?2 IS NULL OR last_seen_at >= ?2)",
        )?
        .query_map(params![filter.surface, filter.since], |r| r.get(0))?
        .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    let mut exists = conn.prepare_cached(
        "SELECT 1 FROM threads WHERE id = ?1 AND (?2 IS NULL OR surface = ?2) AND (?3 IS NULL OR last_seen_at >= ?3)",
    )?;
    for t in &filter.threads {
        if exists.exists(params![t, filter.surface, filter.since])? {
            ids.push(t.clone());
        }
    }
    let mut any = conn.prepare_cached("SELECT 1 FROM threads WHERE id = ?1")?;
    for t in also {
        if any.exists([t])? {
            ids.push(t.clone());
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// One thread with all its messages: its current turns as the read layer gives them, in turn order
/// ([`crate::read::turns_in_order`], [`crate::order`]), each with its other revisions. `None` when the thread does
/// not exist.
pub fn export_thread(conn: &Connection, id: &str) -> Result<Option<ExportThread>, DbError> {
    let mut t = conn.prepare_cached(
        "SELECT id, surface, conversation_id, title, url, first_seen_at, last_seen_at FROM threads WHERE id = ?1",
    )?;
    let mut rows = t.query([id])?;
    let Some(r) = rows.next()? else {
        return Ok(None);
    };
    let mut thread = ExportThread {
        id: r.get(0)?,
        surface: r.get(1)?,
        conversation_id: r.get(2)?,
        title: r.get(3)?,
        url: r.get(4)?,
        first_seen_at: r.get(5)?,
        last_seen_at: r.get(6)?,
        turns: Vec::new(),
        messages: 0,
    };
    drop(rows);
    thread.messages = conn
        .prepare_cached("SELECT count(*) FROM messages WHERE thread_id = ?1")?
        .query_row([id], |r| r.get(0))?;
    thread.turns = crate::read::turns_in_order(conn, id, false, -1, 1)?
        .into_iter()
        .map(|t| ExportTurn {
            id: t.id,
            role: t.role,
            content: t.content,
            time: t.time,
            revision: t.revision,
            revisions: t
                .revisions
                .into_iter()
                .map(|r| ExportRevision {
                    id: r.id,
                    revision: r.revision,
                    captured_at: r.captured_at,
                    content: r.content,
                })
                .collect(),
        })
        .collect();
    Ok(Some(thread))
}

/// Every row of `table` as plain values (benchmarks' baseline: the same rows read without any rendering).
pub fn read_plain(conn: &Connection, table: &str) -> Result<Vec<Vec<Value>>, DbError> {
    let spec = TABLES
        .iter()
        .find(|t| t.name == table)
        .ok_or_else(|| DbError::Sqlite(rusqlite::Error::InvalidColumnName(table.to_owned())))?;
    let mut stmt = conn.prepare(&spec.select_statement())?;
    let n = spec.columns.len();
    let rows = stmt
        .query_map([], |r| (0..n).map(|i| r.get::<_, Value>(i)).collect())?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}
