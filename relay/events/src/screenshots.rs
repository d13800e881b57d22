//! `screenshots`: the image files of a screenshots folder (an added path, else `DOTPERSON_SCREENSHOTS_DIR`, else
//! the system's default), as file events only — name, size, time; the image is never opened. One
//! `screenshot.added` event per file: content = its name, attrs `name`, `path`, `size`, `mtime`; `occurred_at` =
//! its modification time.
//!
//! The newest modification time taken is remembered; a pass takes the files at or after it, oldest first, at
//! most [`MAX_FILES`] (files at exactly that time answer as duplicate). On macOS, where the default folder is the
//! Desktop, only files named like screenshots are taken there.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::json;
use time::OffsetDateTime;

use crate::{EventsError, Pass};

/// Most files one pass takes.
pub const MAX_FILES: usize = 1_000;
/// Most folder entries one pass looks at.
const MAX_ENTRIES: usize = 100_000;
const IMAGE: &[&str] = &["png", "jpg", "jpeg", "heic", "gif", "webp", "tiff", "bmp"];

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Cursor {
    /// The newest modification time taken, in milliseconds since the epoch.
    newest_ms: i64,
}

fn ms(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

pub(crate) fn run(pass: &mut Pass<'_>) -> Result<(), EventsError> {
    let dir = pass.config.screenshots_dir();
    let shown = dir.display().to_string();
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    let desktop_default = cfg!(target_os = "macos") && dir == pass.config.home.join("Desktop");
    let cur: Cursor = pass.cursor(&shown)?.unwrap_or_default();
    let mut found: Vec<(i64, String, PathBuf, u64, OffsetDateTime)> = rd
        .filter_map(Result::ok)
        .take(MAX_ENTRIES)
        .filter_map(|e| {
            let p = e.path();
            let ext = p.extension()?.to_str()?.to_ascii_lowercase();
            if !IMAGE.contains(&ext.as_str()) {
                return None;
            }
            let name = p.file_name()?.to_string_lossy().into_owned();
            if desktop_default
                && !(name.starts_with("Screenshot") || name.starts_with("Screen Shot"))
            {
                return None;
            }
            let meta = e.metadata().ok().filter(std::fs::Metadata::is_file)?;
            let at = crate::mtime(&meta)?;
            Some((ms(at), name, p, meta.len(), at))
        })
        .filter(|(m, ..)| *m >= cur.newest_ms)
        .collect();
    found.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    if found.len() > MAX_FILES {
        found.truncate(MAX_FILES);
        pass.report.more = true;
    }
    pass.report.read += found.len() as u64;
    let events: Vec<_> = found
        .iter()
        .map(|(m, name, p, size, at)| {
            let path = p.display().to_string();
            pass.event(
                "screenshot.added",
                format!("{path}|{size}"),
                pass.clean(name),
                *at,
                json!({"name": pass.clean(name), "path": path, "size": size, "mtime": personkit_store::clock::fmt_time(*at), "mtime_ms": m}),
            )
        })
        .collect();
    pass.store(&events)?;
    if let Some(newest) = found.last().map(|f| f.0) {
        pass.save_cursor(&shown, &Cursor { newest_ms: newest })?;
    }
    Ok(())
}
