//! Small named values a feature keeps beside its rows (`knowledge_state`, `memory_state`, `heat_state`): one key, one text.

use rusqlite::{Connection, OptionalExtension, params};

use crate::db::DbError;

/// The tables of named values (a closed set: the name goes into the statement's text).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Table {
    Knowledge,
    Memory,
    Heat,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Knowledge => "knowledge_state",
            Table::Memory => "memory_state",
            Table::Heat => "heat_state",
        }
    }
}

/// The value of `key`, if any.
pub(crate) fn get(conn: &Connection, table: Table, key: &str) -> Result<Option<String>, DbError> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT value FROM {} WHERE key = ?1",
            table.name()
        ))?
        .query_row([key], |r| r.get(0))
        .optional()?)
}

/// Sets (or, with `None`, removes) the value of `key`.
pub(crate) fn set(
    conn: &Connection,
    table: Table,
    key: &str,
    value: Option<&str>,
) -> Result<(), DbError> {
    let t = table.name();
    match value {
        Some(v) => conn
            .prepare_cached(&format!(
                "INSERT INTO {t} (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = ?2"
            ))?
            .execute(params![key, v])?,
        None => conn
            .prepare_cached(&format!("DELETE FROM {t} WHERE key = ?1"))?
            .execute([key])?,
    };
    Ok(())
}
