//! One-time dashboard sign-in links. `personkit open` (or `POST /v1/me/dashboard-link` with a device token) makes
//! a random 256-bit secret valid for [`LINK_TTL`]; the relay's `/signin` redeems it once, in one statement, and
//! opens a dashboard session. Only the secret's sha256 is stored.

use std::fmt;

use rusqlite::{Connection, params};
use time::{Duration, OffsetDateTime};

use crate::auth::hash_secret;
use crate::clock::fmt_time;
use crate::db::DbError;

/// How long a sign-in link works.
pub const LINK_TTL: Duration = Duration::minutes(5);

/// The secret of a sign-in link. Prints `<redacted>` in `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct LinkSecret(String);

impl LinkSecret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for LinkSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LinkSecret(<redacted>)")
    }
}

/// A new link secret valid until the returned time. Also forgets links that died more than a day ago.
pub fn create_link(
    conn: &Connection,
    now: OffsetDateTime,
) -> Result<(LinkSecret, OffsetDateTime), DbError> {
    let mut buf = [0u8; 32];
    getrandom::fill(&mut buf).map_err(|e| {
        DbError::Sqlite(rusqlite::Error::ToSqlConversionFailure(
            format!("no randomness available: {e}").into(),
        ))
    })?;
    let secret = hex::encode(buf);
    let expires = now + LINK_TTL;
    conn.execute(
        "INSERT INTO signin_links (secret_hash, created_at, expires_at) VALUES (?1, ?2, ?3)",
        params![hash_secret(&secret), fmt_time(now), fmt_time(expires)],
    )?;
    conn.execute(
        "DELETE FROM signin_links WHERE expires_at < ?1",
        [fmt_time(now - Duration::days(1))],
    )?;
    Ok((LinkSecret(secret), expires))
}

/// Uses a link: true once, for an unexpired link; false for an unknown, expired or already used one.
pub fn redeem_link(conn: &Connection, secret: &str, now: OffsetDateTime) -> Result<bool, DbError> {
    if secret.len() != 64 || !secret.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(false);
    }
    let now = fmt_time(now);
    let used = conn.execute(
        "UPDATE signin_links SET used_at = ?2 WHERE secret_hash = ?1 AND used_at IS NULL AND expires_at > ?2",
        params![hash_secret(secret), now],
    )?;
    Ok(used == 1)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn a_link_works_once_and_not_after_it_expires() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::db::open(&dir.path().join("c.db")).unwrap();
        let t0 = datetime!(2026-11-22 10:00:00 UTC);
        let (a, _) = create_link(&conn, t0).unwrap();
        assert!(redeem_link(&conn, a.expose(), t0).unwrap());
        assert!(!redeem_link(&conn, a.expose(), t0).unwrap(), "reused");
        let (b, exp) = create_link(&conn, t0).unwrap();
        assert!(!redeem_link(&conn, b.expose(), exp).unwrap(), "expired");
        assert!(!redeem_link(&conn, "nope", t0).unwrap());
        assert_eq!(format!("{a:?}"), "LinkSecret(<redacted>)");
    }
}
