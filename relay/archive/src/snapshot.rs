//! Signed snapshots (format in `docs/snapshot.md`): a JSONL file of a header line, the corpus's canonical
//! records ([`crate::record`]) and a signature line. The signature is Ed25519 over
//! `personkit-snapshot/1 <sha512 of every byte before the signature line, hex> <record count>`, so one flipped,
//! added, removed or reordered byte anywhere fails verification. [`read_verified`] checks the whole file —
//! signature, trusted key, every record's shape — before the caller writes anything.

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::record::{self, Record};
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use personkit_store::Connection;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha512};

/// The snapshot format's version (header `version`).
pub const VERSION: u32 = 1;
const MAGIC: &str = "personkit-snapshot";

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{0}")]
    Key(String),
    /// The file is not a whole, untouched snapshot.
    #[error("refused: {0}; nothing was written")]
    Invalid(String),
    /// Signed correctly, by a key this relay does not know.
    #[error(
        "refused: the snapshot is signed by a key this relay has not seen (it begins {}…); nothing was written. \
         Trusting a key means taking whatever it signed as your own corpus, so trust it only if it is your own: on \
         the machine that made the snapshot, `personkit corpus snapshot` ends with \"signed with key …\" (the \
         public half of ~/.dotperson/snapshot-signing.key there). If that key begins the same, copy it from that \
         machine and restore with --trust and that key",
        key_prefix(.0)
    )]
    UnknownKey(String),
    #[error(transparent)]
    Dump(#[from] personkit_store::archive::DumpError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The first characters of a public key, enough to compare with one's own, too few to pass as `--trust`.
fn key_prefix(key: &str) -> &str {
    key.get(..16).unwrap_or(key)
}

/// The signing key at `path`, made (32 random bytes, hex, mode 0600) when there is none. `true` when made now.
pub fn load_or_create_key(path: &Path) -> Result<(SigningKey, bool), SnapshotError> {
    if let Some(k) = load_key(path)? {
        return Ok((k, false));
    }
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|e| SnapshotError::Key(format!("no randomness for a signing key: {e}")))?;
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path).map_err(|e| {
        SnapshotError::Key(format!(
            "cannot create the signing key {}: {e}",
            path.display()
        ))
    })?;
    f.write_all(format!("{}\n", hex::encode(seed)).as_bytes())?;
    f.sync_all()?;
    Ok((SigningKey::from_bytes(&seed), true))
}

/// The signing key at `path`, if there is one.
pub fn load_key(path: &Path) -> Result<Option<SigningKey>, SnapshotError> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(SnapshotError::Key(format!(
                "cannot read the signing key {}: {e}",
                path.display()
            )));
        }
    };
    let seed: [u8; 32] = hex::decode(text.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            SnapshotError::Key(format!(
                "{} is not a personkit signing key (64 hex characters); move it away to make a new one",
                path.display()
            ))
        })?;
    Ok(Some(SigningKey::from_bytes(&seed)))
}

/// A public key as printed and passed to `--trust`: 64 lowercase hex characters.
pub fn public_hex(k: &SigningKey) -> String {
    hex::encode(k.verifying_key().as_bytes())
}

/// Parses a `--trust` value.
pub fn parse_public(s: &str) -> Result<VerifyingKey, SnapshotError> {
    let b: [u8; 32] = hex::decode(s.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            SnapshotError::Key(format!(
                "{:?} is not a public key: give the 64 hex characters `personkit corpus snapshot` printed",
                s.chars().take(80).collect::<String>()
            ))
        })?;
    VerifyingKey::from_bytes(&b)
        .map_err(|_| SnapshotError::Key("that public key is not a valid Ed25519 point".into()))
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Header {
    t: String,
    version: u32,
    key: String,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Trailer {
    t: String,
    records: u64,
    sha512: String,
    sig: String,
}

fn signed_message(sha512_hex: &str, records: u64) -> Vec<u8> {
    format!("{MAGIC}/{VERSION} {sha512_hex} {records}").into_bytes()
}

/// What a snapshot holds.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Summary {
    pub records: u64,
    pub bytes: u64,
    /// The signer's public key (hex).
    pub key: String,
    pub sha512: String,
}

/// Writes the corpus's snapshot to `w`, signed with `key`; `progress(records)` every few thousand records.
pub fn write(
    conn: &Connection,
    key: &SigningKey,
    mut w: impl Write,
    mut progress: impl FnMut(u64),
) -> Result<Summary, SnapshotError> {
    let mut hash = Sha512::new();
    let mut bytes = 0u64;
    let mut emit = |line: &[u8], w: &mut dyn Write| -> std::io::Result<()> {
        hash.update(line);
        hash.update(b"\n");
        bytes += line.len() as u64 + 1;
        w.write_all(line)?;
        w.write_all(b"\n")
    };
    let header = serde_json::to_vec(&Header {
        t: MAGIC.into(),
        version: VERSION,
        key: public_hex(key),
    })
    .map_err(|e| SnapshotError::Key(e.to_string()))?;
    emit(&header, &mut w)?;
    let mut records = 0u64;
    record::dump(conn, |line| {
        records += 1;
        if records.is_multiple_of(4096) {
            progress(records);
        }
        emit(line, &mut w)
    })?;
    progress(records);
    let sha = hex::encode(hash.finalize());
    let sig = key.sign(&signed_message(&sha, records));
    let trailer = serde_json::to_vec(&Trailer {
        t: "signature".into(),
        records,
        sha512: sha.clone(),
        sig: hex::encode(sig.to_bytes()),
    })
    .map_err(|e| SnapshotError::Key(e.to_string()))?;
    w.write_all(&trailer)?;
    w.write_all(b"\n")?;
    w.flush()?;
    Ok(Summary {
        records,
        bytes: bytes + trailer.len() as u64 + 1,
        key: public_hex(key),
        sha512: sha,
    })
}

/// A snapshot that passed every check, ready to restore.
#[derive(Debug)]
pub struct Verified {
    pub summary: Summary,
    pub records: Vec<Record>,
}

fn bad(m: impl Into<String>) -> SnapshotError {
    SnapshotError::Invalid(m.into())
}

/// Checks a whole snapshot: layout, hash, signature, that the signer is `trusted`, and every record's shape.
pub fn read_verified(bytes: &[u8], trusted: &[VerifyingKey]) -> Result<Verified, SnapshotError> {
    let Some(body_and_trailer) = bytes.strip_suffix(b"\n") else {
        return Err(bad(
            "the file does not end with a line break: it is cut short",
        ));
    };
    let split = body_and_trailer
        .iter()
        .rposition(|b| *b == b'\n')
        .ok_or_else(|| bad("no signature line: this is not a whole snapshot"))?;
    let (body, trailer_line) = (&bytes[..=split], &body_and_trailer[split + 1..]);
    let trailer: Trailer = serde_json::from_slice(trailer_line).map_err(|_| {
        bad("the last line is not the signature line: the file is cut short or altered")
    })?;
    if trailer.t != "signature"
        || serde_json::to_vec(&trailer).ok().as_deref() != Some(trailer_line)
    {
        return Err(bad("the signature line is altered"));
    }
    let header_end = body
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| bad("no header line"))?;
    let header: Header = serde_json::from_slice(&body[..header_end])
        .map_err(|_| bad("the first line is not a personkit snapshot header"))?;
    if header.t != MAGIC || serde_json::to_vec(&header).ok().as_deref() != Some(&body[..header_end])
    {
        return Err(bad("the header line is altered"));
    }
    if header.version != VERSION {
        return Err(bad(format!(
            "snapshot format version {} is not one this relay reads (it reads {VERSION}); use a matching personkit",
            header.version
        )));
    }
    let sha = hex::encode(Sha512::digest(body));
    if sha != trailer.sha512 {
        return Err(bad(
            "the content does not match its signed hash: the file was altered",
        ));
    }
    let key = parse_public(&header.key).map_err(|_| bad("the header's key is not a public key"))?;
    let sig: [u8; 64] = hex::decode(&trailer.sig)
        .ok()
        .filter(|b| hex::encode(b) == trailer.sig)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| bad("the signature is not 64 bytes of hex"))?;
    key.verify(
        &signed_message(&sha, trailer.records),
        &Signature::from_bytes(&sig),
    )
    .map_err(|_| {
        bad("the signature does not verify: the file was altered or signed by another key")
    })?;
    if !trusted.contains(&key) {
        return Err(SnapshotError::UnknownKey(header.key));
    }
    let lines: Vec<&[u8]> = body[header_end + 1..]
        .strip_suffix(b"\n")
        .unwrap_or(&[])
        .split(|b| *b == b'\n')
        .filter(|_| header_end + 1 < body.len())
        .collect();
    if lines.len() as u64 != trailer.records {
        return Err(bad(format!(
            "{} records where the signature line says {}",
            lines.len(),
            trailer.records
        )));
    }
    let mut records = Vec::with_capacity(lines.len());
    for (i, l) in lines.iter().enumerate() {
        records.push(
            record::parse_record(l).map_err(|m| bad(format!("record on line {}: {m}", i + 2)))?,
        );
    }
    Ok(Verified {
        summary: Summary {
            records: trailer.records,
            bytes: bytes.len() as u64,
            key: header.key,
            sha512: sha,
        },
        records,
    })
}
