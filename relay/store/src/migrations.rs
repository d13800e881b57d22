//! Append-only numbered migrations (`relay/store/migrations/NNNN_*.sql`), applied in order inside one transaction
//! each and tracked with `PRAGMA user_version`.
//!
//! **Architecture invariant:** a migration that has landed is never edited; schema changes add a new file here.

use rusqlite::Connection;

use crate::db::DbError;

/// One migration: its number (== the `user_version` after it), its name and its SQL.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: u32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// A migration from its number and its file's name (`migrations/<name>.sql`).
macro_rules! migration {
    ($version:literal, $name:literal) => {
        Migration {
            version: $version,
            name: $name,
            sql: include_str!(concat!("../migrations/", $name, ".sql")),
        }
    };
}

/// Every migration, in order. Versions are 1, 2, 3, ... without gaps.
pub const MIGRATIONS: &[Migration] = &[
    migration!(1, "0001_init"),
    migration!(2, "0002_search"),
    migration!(3, "0003_revision_order_index"),
    migration!(4, "0004_search_vec_log"),
    migration!(5, "0005_search_vec_log_pruning"),
    migration!(6, "0006_drop_redundant_position_index"),
    migration!(7, "0007_agent_tokens"),
    migration!(8, "0008_capture_reports"),
    migration!(9, "0009_signin_and_forget"),
];

/// The schema version this build writes.
pub fn latest_version() -> u32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// The schema version of an open corpus.
pub fn current_version(conn: &Connection) -> Result<u32, DbError> {
    Ok(conn.query_row("PRAGMA user_version", [], |r| r.get(0))?)
}

/// Apply every migration the corpus lacks; returns the resulting version. Refuses a corpus written by a newer
/// personkit.
pub fn apply(conn: &mut Connection) -> Result<u32, DbError> {
    let mut version = current_version(conn)?;
    let latest = latest_version();
    if version > latest {
        return Err(DbError::TooNew {
            found: version,
            supported: latest,
        });
    }
    let start = version;
    for m in MIGRATIONS.iter().filter(|m| m.version > start) {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // Another process may have migrated between our read and the lock.
        let now: u32 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if now >= m.version {
            tx.commit()?;
            version = now;
            continue;
        }
        tx.execute_batch(m.sql)
            .map_err(|source| DbError::Migration {
                name: m.name,
                source,
            })?;
        tx.pragma_update(None, "user_version", m.version)?;
        tx.commit()?;
        tracing::info!(migration = m.name, "applied migration");
        version = m.version;
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_dense_and_ordered() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version as usize, i + 1, "{}", m.name);
            assert!(
                m.name.starts_with(&format!("{:04}_", m.version)),
                "{}",
                m.name
            );
        }
    }
}
