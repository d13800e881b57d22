//! The profile the user writes: who they are and how they want agents to work with them. A Markdown file
//! (`$PERSONKIT_PROFILE`, else `~/.dotperson/profile.md`) the user may edit with any editor or in the dashboard;
//! the file is what agents get. Each text the relay sees is kept as a version of tier `profile` ([`record`]), so
//! edits are diffable like the memory tiers and travel with the corpus.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;
use time::OffsetDateTime;

use personkit_store::Connection;
use personkit_store::memory::{self as rows, NewVersion};

use crate::{MemoryError, VersionHead, tokens};

/// The largest profile read or written.
pub const MAX_BYTES: usize = 64 * 1024;

/// What a new profile starts as (shown in the dashboard's editor while there is none).
pub const TEMPLATE: &str = "# About me\n\n- Name and role:\n- What I work on:\n\n# How I want agents to work with me\n\n- \n";

/// Where the profile is, given the environment as a function.
pub fn locate(env: impl Fn(&str) -> Option<String>) -> PathBuf {
    let env = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(p) = env("PERSONKIT_PROFILE") {
        return PathBuf::from(p);
    }
    env("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
        .join(".dotperson")
        .join("profile.md")
}

/// Where the profile is for this process.
pub fn path() -> PathBuf {
    locate(|k| std::env::var(k).ok())
}

/// The profile as it stands.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Profile {
    pub path: String,
    /// Whether the file exists.
    pub exists: bool,
    /// The file's text (empty when there is none).
    pub body: String,
    pub tokens: usize,
    /// The newest recorded version, if any.
    pub version: Option<VersionHead>,
    /// The file differs from the newest recorded version (it was edited outside personkit since).
    pub unrecorded: bool,
}

fn profile_err(path: &Path, message: impl Into<String>) -> MemoryError {
    MemoryError::Profile {
        path: path.display().to_string(),
        message: message.into(),
    }
}

fn read_file(path: &Path) -> Result<Option<String>, MemoryError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(profile_err(path, e.to_string())),
    };
    if !meta.is_file() {
        return Err(profile_err(path, "not a regular file"));
    }
    if meta.len() > MAX_BYTES as u64 {
        return Err(profile_err(
            path,
            format!("{} bytes; the most read is {MAX_BYTES}", meta.len()),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| profile_err(path, e.to_string()))?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| profile_err(path, "not UTF-8 text"))
}

/// The profile at `path` and its newest recorded version. Reads only (fit for read-only connections).
pub fn current(conn: &Connection, path: &Path) -> Result<Profile, MemoryError> {
    let file = read_file(path)?;
    let latest = rows::latest(conn, "profile")?;
    let body = file.clone().unwrap_or_default();
    Ok(Profile {
        path: path.display().to_string(),
        exists: file.is_some(),
        tokens: tokens(&body),
        unrecorded: file.is_some() && latest.as_ref().is_none_or(|v| v.body != body),
        version: latest.as_ref().map(VersionHead::from),
        body,
    })
}

/// Records the file's text as a new version when it differs from the newest one; answers the profile.
pub fn record(conn: &Connection, path: &Path, now: OffsetDateTime) -> Result<Profile, MemoryError> {
    let p = current(conn, path)?;
    if !p.unrecorded {
        return Ok(p);
    }
    rows::insert(
        conn,
        &NewVersion {
            tier: "profile".into(),
            body: p.body.clone(),
            tokens: p.tokens as u64,
            ..Default::default()
        },
        now,
    )?;
    current(conn, path)
}

/// Checks a profile text someone wants to save.
pub fn check(text: &str) -> Result<(), String> {
    if text.len() > MAX_BYTES {
        return Err(format!(
            "the profile is {} bytes; the most kept is {MAX_BYTES}",
            text.len()
        ));
    }
    if text.chars().any(|c| c == '\0') {
        return Err("the profile holds a NUL character".into());
    }
    Ok(())
}

/// Writes `text` as the profile (folder made 0700, file 0600, replaced atomically) and records it.
pub fn write(
    conn: &Connection,
    path: &Path,
    text: &str,
    now: OffsetDateTime,
) -> Result<Profile, MemoryError> {
    check(text).map_err(|m| profile_err(path, m))?;
    let text = text.replace("\r\n", "\n");
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| profile_err(path, e.to_string()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name()
            .map_or("profile.md".into(), |n| n.to_string_lossy())
    ));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    let mut f = opts
        .open(&tmp)
        .map_err(|e| profile_err(path, e.to_string()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| profile_err(path, e.to_string()))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| profile_err(path, e.to_string()))?;
    record(conn, path, now)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn edits_become_versions_once_each() {
        let dir = tempfile::tempdir().unwrap();
        let conn = personkit_store::db::open(&dir.path().join("c.db")).unwrap();
        let path = dir.path().join("home/.dotperson/profile.md");
        let t = time::macros::datetime!(2026-11-01 10:00 UTC);
        let p = current(&conn, &path).unwrap();
        assert!(!p.exists && p.version.is_none());
        let p = write(&conn, &path, "I write Rust.\r\n", t).unwrap();
        assert_eq!(p.body, "I write Rust.\n");
        assert_eq!(p.version.as_ref().unwrap().number, 1);
        // Unchanged: no new version.
        assert_eq!(record(&conn, &path, t).unwrap().version.unwrap().number, 1);
        // Edited outside personkit: seen, then recorded.
        std::fs::write(&path, "I write Rust and Go.\n").unwrap();
        assert!(current(&conn, &path).unwrap().unrecorded);
        let p = record(&conn, &path, t + time::Duration::minutes(1)).unwrap();
        assert_eq!(p.version.unwrap().number, 2);
        assert!(write(&conn, &path, &"x".repeat(MAX_BYTES + 1), t).is_err());
        assert!(write(&conn, &path, "a\0b", t).is_err());
        assert_eq!(
            locate(|k| (k == "HOME").then(|| "/h".to_owned())),
            PathBuf::from("/h/.dotperson/profile.md")
        );
    }
}
