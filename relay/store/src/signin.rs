//! One-time dashboard sign-in links. `personkit open` (or `POST /v1/me/dashboard-link` with a device token) makes
//! a random 256-bit secret valid for [`LINK_TTL`]; the relay's `/signin` redeems it once, in one statement, and
//! opens a dashboard session ([`open_session`]), kept in the corpus so it outlives a relay restart. Only the
//! sha256 of a link's or a session's secret is stored.

use std::fmt;

use rusqlite::{Connection, OptionalExtension, params};
use time::{Duration, OffsetDateTime};

use crate::auth::hash_secret;
use crate::clock::fmt_time;
use crate::db::DbError;

/// How long a sign-in link works.
pub const LINK_TTL: Duration = Duration::minutes(5);
/// How long a dashboard session lasts from sign-in.
pub const SESSION_TTL: Duration = Duration::hours(12);
/// Open dashboard sessions kept; signing in beyond this ends the oldest.
pub const MAX_SESSIONS: usize = 32;

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
    let secret = random_secret()?;
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

/// 256 random bits as 64 hex digits.
fn random_secret() -> Result<String, DbError> {
    let mut buf = [0u8; 32];
    getrandom::fill(&mut buf).map_err(|e| {
        DbError::Sqlite(rusqlite::Error::ToSqlConversionFailure(
            format!("no randomness available: {e}").into(),
        ))
    })?;
    Ok(hex::encode(buf))
}

fn is_secret(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Uses a link: true once, for an unexpired link; false for an unknown, expired or already used one.
pub fn redeem_link(conn: &Connection, secret: &str, now: OffsetDateTime) -> Result<bool, DbError> {
    if !is_secret(secret) {
        return Ok(false);
    }
    let now = fmt_time(now);
    let used = conn.execute(
        "UPDATE signin_links SET used_at = ?2 WHERE secret_hash = ?1 AND used_at IS NULL AND expires_at > ?2",
        params![hash_secret(secret), now],
    )?;
    Ok(used == 1)
}

/// The secret of a dashboard session (the cookie's value). Prints `<redacted>` in `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionSecret(String);

impl SessionSecret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SessionSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionSecret(<redacted>)")
    }
}

/// Opens a dashboard session lasting [`SESSION_TTL`]. Drops expired sessions, and the oldest ones beyond
/// [`MAX_SESSIONS`].
pub fn open_session(conn: &Connection, now: OffsetDateTime) -> Result<SessionSecret, DbError> {
    let secret = random_secret()?;
    let tx = conn.unchecked_transaction()?;
    tx.execute(
        "DELETE FROM dashboard_sessions WHERE expires_at <= ?1",
        [fmt_time(now)],
    )?;
    let keep = i64::try_from(MAX_SESSIONS.saturating_sub(1)).unwrap_or(i64::MAX);
    tx.execute(
        "DELETE FROM dashboard_sessions WHERE secret_hash NOT IN \
         (SELECT secret_hash FROM dashboard_sessions ORDER BY created_at DESC, secret_hash LIMIT ?1)",
        [keep],
    )?;
    tx.execute(
        "INSERT INTO dashboard_sessions (secret_hash, created_at, expires_at) VALUES (?1, ?2, ?3)",
        params![
            hash_secret(&secret),
            fmt_time(now),
            fmt_time(now + SESSION_TTL)
        ],
    )?;
    tx.commit()?;
    Ok(SessionSecret(secret))
}

/// True when `secret` is the cookie of an open, unexpired dashboard session.
pub fn session_is_open(
    conn: &Connection,
    secret: &str,
    now: OffsetDateTime,
) -> Result<bool, DbError> {
    if !is_secret(secret) {
        return Ok(false);
    }
    Ok(conn
        .query_row(
            "SELECT 1 FROM dashboard_sessions WHERE secret_hash = ?1 AND expires_at > ?2",
            params![hash_secret(secret), fmt_time(now)],
            |_| Ok(()),
        )
        .optional()?
        .is_some())
}

/// Ends a dashboard session (signing out). Ending an unknown one does nothing.
pub fn end_session(conn: &Connection, secret: &str) -> Result<(), DbError> {
    conn.execute(
        "DELETE FROM dashboard_sessions WHERE secret_hash = ?1",
        [hash_secret(secret)],
    )?;
    Ok(())
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

    #[test]
    fn a_session_lasts_its_ttl_survives_reopening_and_ends_on_sign_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let t0 = datetime!(2026-11-22 10:00:00 UTC);
        let s = open_session(&crate::db::open(&path).unwrap(), t0).unwrap();
        assert_eq!(format!("{s:?}"), "SessionSecret(<redacted>)");
        // A new connection (a restarted relay) knows it.
        let conn = crate::db::open(&path).unwrap();
        assert!(session_is_open(&conn, s.expose(), t0).unwrap());
        assert!(
            !session_is_open(&conn, s.expose(), t0 + SESSION_TTL).unwrap(),
            "expired"
        );
        assert!(!session_is_open(&conn, "nope", t0).unwrap());
        end_session(&conn, s.expose()).unwrap();
        assert!(
            !session_is_open(&conn, s.expose(), t0).unwrap(),
            "signed out"
        );
        // Beyond the bound, the oldest go.
        let first = open_session(&conn, t0).unwrap();
        for i in 1..=MAX_SESSIONS {
            open_session(&conn, t0 + Duration::seconds(i as i64)).unwrap();
        }
        assert!(!session_is_open(&conn, first.expose(), t0).unwrap());
        let n: i64 = conn
            .query_row("SELECT count(*) FROM dashboard_sessions", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n as usize, MAX_SESSIONS);
    }
}
