//! The user's decisions, from any front end (the CLI, the dashboard): each changes the entry and writes its audit
//! row in one transaction, so the audit log cannot miss a decision or record one that did not happen.

use personkit_store::Connection;
use personkit_store::DbError;
use personkit_store::knowledge::{self as rows, Edit, Entry};

use crate::prompt::{CONFIDENCE, STABILITY};
use crate::validate::{MAX_CHARS, MAX_TAG_CHARS};

/// Most tags an entry keeps.
pub const MAX_TAGS: usize = 8;
use serde_json::json;
use time::OffsetDateTime;

/// Sets entry `id` to `status` (`approved`, `rejected` or `pending`), decided by `by` (`cli`, `dashboard`), and
/// audits it. Returns the entry as it was before; `None` when there is no such entry (nothing is written).
pub fn decide(
    conn: &Connection,
    id: &str,
    status: &str,
    by: &str,
    now: OffsetDateTime,
) -> Result<Option<Entry>, DbError> {
    let tx = conn.unchecked_transaction()?;
    let Some(before) = rows::entry(&tx, id)? else {
        return Ok(None);
    };
    rows::decide(&tx, id, status, by, now)?;
    rows::audit(
        &tx,
        by,
        "approval",
        &[],
        &json!({"entry": id, "status": status, "by": by, "outcome": status}),
        now,
    )?;
    tx.commit()?;
    Ok(Some(before))
}

/// What is wrong with an edit, in words for the person who made it: an empty topic, position or reasoning, a field
/// over its bound ([`MAX_CHARS`]), too many or too long tags, a confidence or stability that is not one of ours.
pub fn check_edit(e: &Edit) -> Result<(), String> {
    let fields = [
        ("topic", &e.topic),
        ("position", &e.position),
        ("reasoning", &e.reasoning),
        ("context", &e.context),
    ];
    for (k, v) in fields {
        let Some(v) = v else { continue };
        let max = MAX_CHARS
            .iter()
            .find(|(f, _)| *f == k)
            .map_or(1_000, |(_, m)| *m);
        let n = v.trim().chars().count();
        if n == 0 && k != "context" {
            return Err(format!("the {k} cannot be empty"));
        }
        if n > max {
            return Err(format!("the {k} is {n} characters; at most {max}"));
        }
    }
    if let Some(tags) = &e.tags {
        if tags.len() > MAX_TAGS {
            return Err(format!("{} tags; at most {MAX_TAGS}", tags.len()));
        }
        if let Some(t) = tags.iter().find(|t| t.chars().count() > MAX_TAG_CHARS) {
            return Err(format!(
                "the tag {t:?} is longer than {MAX_TAG_CHARS} characters"
            ));
        }
    }
    if let Some(c) = &e.confidence
        && !CONFIDENCE.contains(&c.as_str())
    {
        return Err(format!("confidence is one of {}", CONFIDENCE.join(", ")));
    }
    if let Some(s) = &e.stability
        && !STABILITY.contains(&s.as_str())
    {
        return Err(format!("stability is one of {}", STABILITY.join(", ")));
    }
    Ok(())
}

/// The fields `edit` changes in `e` (names only: the audit log keeps no text of an edit).
pub fn changed(e: &Entry, edit: &Edit) -> Vec<&'static str> {
    let mut out = Vec::new();
    let differs = |new: &Option<String>, old: &str| new.as_deref().is_some_and(|n| n != old);
    if differs(&edit.topic, &e.topic) {
        out.push("topic");
    }
    if differs(&edit.position, &e.position) {
        out.push("position");
    }
    if differs(&edit.reasoning, &e.reasoning) {
        out.push("reasoning");
    }
    if differs(&edit.context, e.context.as_deref().unwrap_or("")) {
        out.push("context");
    }
    if differs(&edit.confidence, &e.confidence) {
        out.push("confidence");
    }
    if differs(&edit.stability, &e.stability) {
        out.push("stability");
    }
    if edit.tags.as_ref().is_some_and(|t| *t != e.tags) {
        out.push("tags");
    }
    out
}

/// Applies a checked edit ([`check_edit`]) made by `by` and audits which fields changed (not their text). Returns
/// the changed fields (empty: nothing to do, nothing written); `None` when there is no such entry.
pub fn edit(
    conn: &Connection,
    id: &str,
    edit: &Edit,
    by: &str,
    now: OffsetDateTime,
) -> Result<Option<Vec<&'static str>>, DbError> {
    let tx = conn.unchecked_transaction()?;
    let Some(before) = rows::entry(&tx, id)? else {
        return Ok(None);
    };
    let fields = changed(&before, edit);
    if fields.is_empty() {
        return Ok(Some(fields));
    }
    rows::edit(&tx, id, edit, now)?;
    rows::audit(
        &tx,
        by,
        "approval",
        &[],
        &json!({"entry": id, "edited": fields, "by": by, "outcome": "edited"}),
        now,
    )?;
    tx.commit()?;
    Ok(Some(fields))
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
