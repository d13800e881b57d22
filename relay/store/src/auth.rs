//! Pairing and device auth. A pairing code is 8 characters from an unambiguous alphabet, valid 10 minutes,
//! usable once, stored only as a hash. Redeeming it creates a device and a random 256-bit bearer token, stored
//! only as its sha256. Revoking a device makes its token fail from the next request on. An agent token
//! ([`create_agent`], `personkit agents add`) is a read-only token for the user's own agents (MCP clients); it
//! is stored, listed and revoked like a device's ([`Kind`]), and may not send turns.
//!
//! **Architecture invariant:** no secret (pairing code, token) is ever stored, logged or `Debug`-printed in the
//! clear; the types holding them print `<redacted>`.

use std::fmt;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::Serialize;
use sha2::{Digest, Sha256};
use time::{Duration, OffsetDateTime};

use crate::clock::fmt_time;
use crate::db::DbError;

/// Characters of a pairing code: no 0/O, 1/I/L.
pub const CODE_ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
pub const CODE_LEN: usize = 8;
pub const CODE_TTL: Duration = Duration::minutes(10);
/// Prefix of device tokens, so a leaked one is recognisable.
pub const TOKEN_PREFIX: &str = "pkt_";
/// Prefix of agent tokens.
pub const AGENT_TOKEN_PREFIX: &str = "pka_";
/// Longest device name kept.
pub const MAX_DEVICE_NAME_CHARS: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("the pairing code is wrong, expired or already used")]
    InvalidCode,
    #[error("no device matches {0:?}")]
    NoSuchDevice(String),
    #[error("{0:?} matches more than one device; give more of the id")]
    AmbiguousDevice(String),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<rusqlite::Error> for AuthError {
    fn from(e: rusqlite::Error) -> Self {
        AuthError::Db(DbError::Sqlite(e))
    }
}

/// A one-time pairing code (normalized: 8 upper-case characters, no dash).
#[derive(Clone, PartialEq, Eq)]
pub struct PairingCode(String);

impl PairingCode {
    /// A code already in normalized form (made by this crate).
    pub(crate) fn from_normalized(code: String) -> PairingCode {
        PairingCode(code)
    }

    /// The code as shown to a person: `XXXX-XXXX`.
    pub fn display(&self) -> String {
        format!("{}-{}", &self.0[..4], &self.0[4..])
    }
}

impl fmt::Debug for PairingCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PairingCode(<redacted>)")
    }
}

/// A device's bearer token. Shown once, to the device that paired.
#[derive(Clone, PartialEq, Eq)]
pub struct DeviceToken(String);

impl DeviceToken {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for DeviceToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DeviceToken(<redacted>)")
    }
}

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A paired device (the extension, an importer): sends turns and reads.
    Device,
    /// An agent token: reads only.
    Agent,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Device => "device",
            Kind::Agent => "agent",
        }
    }

    /// Whether this token may store turns.
    pub fn can_ingest(self) -> bool {
        self == Kind::Device
    }
}

/// A paired device or an agent, as stored (without its token hash).
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct Device {
    pub id: String,
    pub name: String,
    pub kind: Kind,
    pub created_at: String,
    pub last_seen_at: Option<String>,
    pub revoked_at: Option<String>,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("token", &"<redacted>")
            .field("revoked", &self.revoked_at.is_some())
            .finish()
    }
}

/// Lowercase hex sha256 of a secret, the only form secrets are stored in.
pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], DbError> {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf).map_err(|e| {
        DbError::Sqlite(rusqlite::Error::ToSqlConversionFailure(
            format!("no randomness available: {e}").into(),
        ))
    })?;
    Ok(buf)
}

pub(crate) fn random_code() -> Result<String, DbError> {
    let mut code = String::with_capacity(CODE_LEN);
    // Rejection sampling keeps every character equally likely.
    let limit = (256 / CODE_ALPHABET.len() * CODE_ALPHABET.len()) as u8;
    while code.len() < CODE_LEN {
        for b in random_bytes::<16>()? {
            if b < limit && code.len() < CODE_LEN {
                code.push(CODE_ALPHABET[usize::from(b) % CODE_ALPHABET.len()] as char);
            }
        }
    }
    Ok(code)
}

/// Accept a code as typed: any case, with or without the dash or spaces. None if it cannot be a code.
pub fn normalize_code(input: &str) -> Option<String> {
    let code: String = input
        .chars()
        .filter(|c| !matches!(c, '-' | ' '))
        .map(|c| c.to_ascii_uppercase())
        .collect();
    (code.len() == CODE_LEN && code.bytes().all(|b| CODE_ALPHABET.contains(&b))).then_some(code)
}

/// Make a new pairing code valid for [`CODE_TTL`] from `now`. Returns the code and its expiry.
pub fn create_pairing_code(
    conn: &Connection,
    now: OffsetDateTime,
) -> Result<(PairingCode, OffsetDateTime), DbError> {
    let code = random_code()?;
    let expires = now + CODE_TTL;
    conn.execute(
        "INSERT INTO pairing_codes(code_hash, created_at, expires_at) VALUES (?1, ?2, ?3)",
        params![hash_secret(&code), fmt_time(now), fmt_time(expires)],
    )?;
    // Forget long-dead codes.
    conn.execute(
        "DELETE FROM pairing_codes WHERE used_at IS NULL AND expires_at < ?1",
        [fmt_time(now - Duration::days(1))],
    )?;
    Ok((PairingCode(code), expires))
}

/// Redeem a pairing code: marks it used and creates a device with a fresh token, in one transaction.
pub fn redeem_pairing_code(
    conn: &mut Connection,
    code: &str,
    device_name: &str,
    now: OffsetDateTime,
) -> Result<(Device, DeviceToken), AuthError> {
    let code = normalize_code(code).ok_or(AuthError::InvalidCode)?;
    let (device, token) = new_device(Kind::Device, device_name, now)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    insert_device(&tx, &device, &token)?;
    let used = tx.execute(
        "UPDATE pairing_codes SET used_at = ?2, device_id = ?3
         WHERE code_hash = ?1 AND used_at IS NULL AND expires_at > ?2",
        params![hash_secret(&code), fmt_time(now), device.id],
    )?;
    if used != 1 {
        // Dropping the transaction rolls the device back.
        return Err(AuthError::InvalidCode);
    }
    tx.commit()?;
    Ok((device, token))
}

/// A device or agent with a fresh random 256-bit token (not stored yet).
fn new_device(
    kind: Kind,
    name: &str,
    now: OffsetDateTime,
) -> Result<(Device, DeviceToken), DbError> {
    let trimmed = name.trim();
    let name = if trimmed.is_empty() {
        format!("unnamed {}", kind.as_str())
    } else {
        trimmed
            .chars()
            .filter(|c| !c.is_control())
            .take(MAX_DEVICE_NAME_CHARS)
            .collect()
    };
    let prefix = match kind {
        Kind::Device => TOKEN_PREFIX,
        Kind::Agent => AGENT_TOKEN_PREFIX,
    };
    let token = format!("{prefix}{}", hex::encode(random_bytes::<32>()?));
    let device = Device {
        id: uuid::Uuid::new_v4().to_string(),
        name,
        kind,
        created_at: fmt_time(now),
        last_seen_at: None,
        revoked_at: None,
    };
    Ok((device, DeviceToken(token)))
}

fn insert_device(conn: &Connection, device: &Device, token: &DeviceToken) -> Result<(), DbError> {
    conn.execute(
        "INSERT INTO devices(id, name, kind, token_hash, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            device.id,
            device.name,
            device.kind.as_str(),
            hash_secret(token.expose()),
            device.created_at
        ],
    )?;
    Ok(())
}

/// Create an agent: a read-only token for the user's own agents (MCP clients), shown once.
pub fn create_agent(
    conn: &Connection,
    name: &str,
    now: OffsetDateTime,
) -> Result<(Device, DeviceToken), DbError> {
    let (agent, token) = new_device(Kind::Agent, name, now)?;
    insert_device(conn, &agent, &token)?;
    Ok((agent, token))
}

/// The device a bearer token belongs to, if the token is known and not revoked.
pub fn authenticate(conn: &Connection, token: &str) -> Result<Option<Device>, DbError> {
    if !(token.starts_with(TOKEN_PREFIX) || token.starts_with(AGENT_TOKEN_PREFIX))
        || token.len() > 128
    {
        return Ok(None);
    }
    Ok(conn
        .prepare_cached(
            "SELECT id, name, kind, created_at, last_seen_at, revoked_at FROM devices
             WHERE token_hash = ?1 AND revoked_at IS NULL",
        )?
        .query_row([hash_secret(token)], device_row)
        .optional()?)
}

fn device_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Device> {
    let kind: String = r.get(2)?;
    Ok(Device {
        id: r.get(0)?,
        name: r.get(1)?,
        kind: if kind == "agent" {
            Kind::Agent
        } else {
            Kind::Device
        },
        created_at: r.get(3)?,
        last_seen_at: r.get(4)?,
        revoked_at: r.get(5)?,
    })
}

/// Every device ever paired, oldest first.
pub fn list_devices(conn: &Connection) -> Result<Vec<Device>, DbError> {
    let mut stmt = conn.prepare(
        "SELECT id, name, kind, created_at, last_seen_at, revoked_at FROM devices ORDER BY created_at, id",
    )?;
    let rows = stmt
        .query_map([], device_row)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Number of paired devices (not agents) that are not revoked.
pub fn active_device_count(conn: &Connection) -> Result<u64, DbError> {
    Ok(conn.query_row(
        "SELECT count(*) FROM devices WHERE revoked_at IS NULL AND kind = 'device'",
        [],
        |r| r.get(0),
    )?)
}

/// Revoke a device by its id or a unique prefix of it. Revoking twice is harmless.
pub fn revoke_device(
    conn: &Connection,
    id_or_prefix: &str,
    now: OffsetDateTime,
) -> Result<Device, AuthError> {
    let pattern = format!("{}%", id_or_prefix.replace(['%', '_'], ""));
    let matches: Vec<Device> = conn
        .prepare(
            "SELECT id, name, kind, created_at, last_seen_at, revoked_at FROM devices WHERE id LIKE ?1",
        )?
        .query_map([pattern], device_row)?
        .collect::<Result<_, _>>()?;
    let exact = matches.iter().find(|d| d.id == id_or_prefix).cloned();
    let device = match (exact, matches.len()) {
        (Some(d), _) => d,
        (None, 1) => matches
            .into_iter()
            .next()
            .ok_or_else(|| AuthError::NoSuchDevice(id_or_prefix.into()))?,
        (None, 0) => return Err(AuthError::NoSuchDevice(id_or_prefix.to_owned())),
        (None, _) => return Err(AuthError::AmbiguousDevice(id_or_prefix.to_owned())),
    };
    conn.execute(
        "UPDATE devices SET revoked_at = coalesce(revoked_at, ?2) WHERE id = ?1",
        params![device.id, fmt_time(now)],
    )?;
    Ok(conn.query_row(
        "SELECT id, name, kind, created_at, last_seen_at, revoked_at FROM devices WHERE id = ?1",
        [&device.id],
        device_row,
    )?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn corpus() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::db::open(&dir.path().join("c.db")).unwrap();
        (dir, conn)
    }

    const T0: OffsetDateTime = datetime!(2026-11-22 10:00:00 UTC);

    #[test]
    fn codes_are_well_formed_and_normalize() {
        for _ in 0..50 {
            let c = random_code().unwrap();
            assert_eq!(c.len(), CODE_LEN);
            assert_eq!(normalize_code(&c.to_lowercase()), Some(c.clone()));
            let shown = PairingCode(c.clone()).display();
            assert_eq!(normalize_code(&shown), Some(c));
        }
        assert_eq!(
            normalize_code("ABCD-EFG0"),
            None,
            "0 is not in the alphabet"
        );
        assert_eq!(normalize_code("ABC"), None);
    }

    #[test]
    fn a_code_pairs_once_and_the_token_authenticates() {
        let (_d, mut conn) = corpus();
        let (code, expires) = create_pairing_code(&conn, T0).unwrap();
        assert_eq!(expires, T0 + CODE_TTL);
        let stored: String = conn
            .query_row("SELECT code_hash FROM pairing_codes", [], |r| r.get(0))
            .unwrap();
        assert_ne!(stored, code.0, "code is stored hashed");
        let (dev, token) =
            redeem_pairing_code(&mut conn, &code.display().to_lowercase(), "laptop", T0).unwrap();
        assert!(token.expose().starts_with(TOKEN_PREFIX));
        assert_eq!(
            token.expose().len(),
            TOKEN_PREFIX.len() + 64,
            "256-bit token"
        );
        assert_eq!(
            authenticate(&conn, token.expose()).unwrap().map(|d| d.id),
            Some(dev.id.clone())
        );
        assert!(matches!(
            redeem_pairing_code(&mut conn, &code.0, "again", T0),
            Err(AuthError::InvalidCode)
        ));
        assert_eq!(
            list_devices(&conn).unwrap().len(),
            1,
            "the failed redeem left no device"
        );
        let hash: String = conn
            .query_row("SELECT token_hash FROM devices", [], |r| r.get(0))
            .unwrap();
        assert_eq!(hash, hash_secret(token.expose()));
    }

    #[test]
    fn an_expired_code_fails() {
        let (_d, mut conn) = corpus();
        let (code, _) = create_pairing_code(&conn, T0).unwrap();
        let late = T0 + CODE_TTL + Duration::seconds(1);
        assert!(matches!(
            redeem_pairing_code(&mut conn, &code.0, "x", late),
            Err(AuthError::InvalidCode)
        ));
    }

    #[test]
    fn revoking_stops_the_token() {
        let (_d, mut conn) = corpus();
        let (code, _) = create_pairing_code(&conn, T0).unwrap();
        let (dev, token) = redeem_pairing_code(&mut conn, &code.0, "x", T0).unwrap();
        assert!(matches!(
            revoke_device(&conn, "zzzz", T0),
            Err(AuthError::NoSuchDevice(_))
        ));
        let revoked = revoke_device(&conn, &dev.id[..8], T0).unwrap();
        assert_eq!(revoked.id, dev.id);
        assert!(revoked.revoked_at.is_some());
        assert!(authenticate(&conn, token.expose()).unwrap().is_none());
        assert_eq!(active_device_count(&conn).unwrap(), 0);
    }

    #[test]
    fn an_agent_token_authenticates_read_only_and_revokes_like_a_device() {
        let (_d, conn) = corpus();
        let (agent, token) = create_agent(&conn, "  claude\u{7}code ", T0).unwrap();
        assert_eq!(agent.name, "claudecode");
        assert!(token.expose().starts_with(AGENT_TOKEN_PREFIX));
        let found = authenticate(&conn, token.expose()).unwrap().unwrap();
        assert_eq!(found.kind, Kind::Agent);
        assert!(!found.kind.can_ingest());
        assert_eq!(
            active_device_count(&conn).unwrap(),
            0,
            "an agent is not a paired device (serve still prints a pairing code)"
        );
        let hash: String = conn
            .query_row("SELECT token_hash FROM devices", [], |r| r.get(0))
            .unwrap();
        assert_eq!(hash, hash_secret(token.expose()), "stored hashed");
        assert_eq!(list_devices(&conn).unwrap()[0].kind, Kind::Agent);
        revoke_device(&conn, &agent.id, T0).unwrap();
        assert!(authenticate(&conn, token.expose()).unwrap().is_none());
    }

    #[test]
    fn secrets_never_debug_print() {
        let (_d, mut conn) = corpus();
        let (code, _) = create_pairing_code(&conn, T0).unwrap();
        let shown = format!("{code:?}");
        let (dev, token) = redeem_pairing_code(&mut conn, &code.0, "x", T0).unwrap();
        assert!(!shown.contains(&code.0) && shown.contains("<redacted>"));
        let t = format!("{token:?} {dev:?}");
        assert!(
            !t.contains(token.expose()) && t.contains("<redacted>"),
            "{t}"
        );
    }
}
