//! The user's decisions, from any front end (the CLI, the dashboard): each changes the entry and writes its audit
//! row in one transaction, so the audit log cannot miss a decision or record one that did not happen.

use personkit_store::Connection;
use personkit_store::DbError;
use personkit_store::knowledge as rows;
use serde_json::json;
use time::OffsetDateTime;

/// Sets entry `id` to `status` (`approved`, `rejected` or `pending`), decided by `by` (`cli`, `dashboard`), and
/// audits it. False when there is no such entry (nothing is written).
pub fn decide(
    conn: &Connection,
    id: &str,
    status: &str,
    by: &str,
    now: OffsetDateTime,
) -> Result<bool, DbError> {
    let tx = conn.unchecked_transaction()?;
    if !rows::decide(&tx, id, status, by, now)? {
        return Ok(false);
    }
    rows::audit(
        &tx,
        by,
        "approval",
        &[],
        &json!({"entry": id, "status": status, "by": by, "outcome": status}),
        now,
    )?;
    tx.commit()?;
    Ok(true)
}

/// Closes the open alert (a clean pass closes it too), audited with who dismissed it. False when none was open.
pub fn dismiss_alert(conn: &Connection, by: &str, now: OffsetDateTime) -> Result<bool, DbError> {
    let tx = conn.unchecked_transaction()?;
    let Some(open) = rows::state(&tx, "alert")? else {
        return Ok(false);
    };
    rows::set_state(&tx, "alert", None)?;
    let was: serde_json::Value = serde_json::from_str(&open).unwrap_or(serde_json::Value::Null);
    rows::audit(
        &tx,
        by,
        "alert",
        &[],
        &json!({"dismissed": true, "by": by, "outcome": "dismissed", "alert": was}),
        now,
    )?;
    tx.commit()?;
    Ok(true)
}
