//! `reading-list`: `~/.dotperson/reading-list/inbox.jsonl`, one JSON object a line (`url`, `title`, `added_at`,
//! …): one `reading.added` event per line, content = title and address (redacted), attrs `url`, `title`, `site`
//! (the address's host); `occurred_at` = `added_at` (RFC 3339 or milliseconds since the epoch), else the file's
//! modification time.
//!
//! The file grows at its end: a pass reads from the byte offset after the last complete line it took (at most
//! [`MAX_READ`] bytes a pass); a line without its newline waits for the next pass. A file that shrank or whose
//! first bytes changed was replaced and is read from the start (what was stored answers as duplicate). A line
//! that is not a JSON object with an http(s) `url` is rejected, counted and named by its line number.

use std::io::{Read, Seek, SeekFrom};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::{EventsError, Pass};

/// Most bytes read from the file in one pass.
pub const MAX_READ: u64 = 4 * 1024 * 1024;
/// Most bytes of one line; a longer line is rejected.
pub const MAX_LINE: usize = 64 * 1024;
const PREFIX: u64 = 4096;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Cursor {
    offset: u64,
    lines: u64,
    prefix_sha256: String,
}

fn prefix_hash(f: &mut std::fs::File, n: u64) -> std::io::Result<String> {
    f.seek(SeekFrom::Start(0))?;
    let mut b = Vec::new();
    f.take(n).read_to_end(&mut b)?;
    Ok(crate::sha256_hex(&b))
}

/// A time as a reading list gives it: RFC 3339, or milliseconds since the epoch.
fn time_of(v: Option<&Value>) -> Option<OffsetDateTime> {
    match v? {
        Value::String(s) => {
            OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
        }
        Value::Number(n) => {
            OffsetDateTime::from_unix_timestamp_nanos(i128::from(n.as_i64()?) * 1_000_000).ok()
        }
        _ => None,
    }
}

/// The host of an http(s) address.
fn site(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let host = rest.split(['/', '?', '#']).next()?;
    let host = host.rsplit('@').next()?;
    let host = host.split(':').next()?;
    (!host.is_empty()).then_some(host)
}

pub(crate) fn run(pass: &mut Pass<'_>) -> Result<(), EventsError> {
    let path = pass.config.reading_list();
    let shown = path.display().to_string();
    let Ok(mut f) = std::fs::File::open(&path) else {
        return Ok(());
    };
    let meta = match f.metadata() {
        Ok(m) => m,
        Err(e) => {
            pass.problem(format!("{shown}: {e}"));
            return Ok(());
        }
    };
    let mut cur: Cursor = pass.cursor(&shown)?.unwrap_or_default();
    let same_start = cur.offset > 0
        && meta.len() >= cur.offset
        && prefix_hash(&mut f, cur.offset.min(PREFIX)).is_ok_and(|h| h == cur.prefix_sha256);
    if !same_start {
        cur = Cursor::default();
    }
    if meta.len() == cur.offset {
        return Ok(());
    }
    let mut buf = Vec::new();
    let read = f
        .seek(SeekFrom::Start(cur.offset))
        .and_then(|_| (&mut f).take(MAX_READ).read_to_end(&mut buf));
    if let Err(e) = read {
        pass.problem(format!("{shown}: {e}"));
        return Ok(());
    }
    // Only complete lines; a last line without its newline waits.
    let Some(end) = buf.iter().rposition(|b| *b == b'\n').map(|i| i + 1) else {
        pass.report.more |= meta.len() - cur.offset >= MAX_READ;
        return Ok(());
    };
    pass.report.more |= cur.offset + (end as u64) < meta.len();
    let mtime = crate::mtime(&meta).unwrap_or(pass.now);
    let mut events = Vec::new();
    // `end` is after a newline: every piece before it is a whole line.
    for line in buf[..end - 1].split(|b| *b == b'\n') {
        cur.lines += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        pass.report.read += 1;
        let n = cur.lines;
        let parsed = (line.len() <= MAX_LINE)
            .then(|| serde_json::from_slice::<Value>(line).ok())
            .flatten();
        let Some(obj) = parsed.filter(Value::is_object) else {
            pass.report.rejected += 1;
            pass.problem(format!("{shown} line {n}: not a JSON object"));
            continue;
        };
        let Some(url) = obj
            .get("url")
            .and_then(Value::as_str)
            .filter(|u| site(u).is_some())
        else {
            pass.report.rejected += 1;
            pass.problem(format!("{shown} line {n}: no http(s) url"));
            continue;
        };
        let url = pass.clean(url);
        let title = obj
            .get("title")
            .and_then(Value::as_str)
            .map(|t| pass.clean(t.trim()))
            .filter(|t| !t.is_empty());
        let at = time_of(obj.get("added_at")).unwrap_or(mtime);
        let content = match &title {
            Some(t) => format!("{t}\n{url}"),
            None => url.clone(),
        };
        events.push(pass.event(
            "reading.added",
            url.clone(),
            content,
            at,
            json!({"url": url, "title": title, "site": site(&url)}),
        ));
    }
    pass.store(&events)?;
    cur.offset += end as u64;
    cur.prefix_sha256 = prefix_hash(&mut f, cur.offset.min(PREFIX)).unwrap_or_default();
    pass.save_cursor(&shown, &cur)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_and_times_as_a_reading_list_gives_them() {
        assert_eq!(
            site("https://user@example.org:8080/a?b"),
            Some("example.org")
        );
        assert_eq!(site("ftp://example.org"), None);
        assert_eq!(site("https://"), None);
        assert!(time_of(Some(&json!("2026-11-28T10:00:00Z"))).is_some());
        assert!(time_of(Some(&json!(1_764_324_000_000_i64))).is_some());
        assert!(time_of(Some(&json!("yesterday"))).is_none());
    }
}
