//! `git`: the commits of the repositories the user adds (`personkit events add-path git <repo>`), read with the
//! `git` CLI in a machine format — one `git.commit` event per commit, oldest first.
//!
//! Per repository the branch and the last commit taken are remembered. The next pass reads `<last>..HEAD`; when
//! the last commit is no longer an ancestor of HEAD (a rebase, another branch checked out) the history is read
//! from the start again and what was stored answers as duplicate. At most [`MAX_COMMITS`] commits a pass per
//! repository: the rest waits for the next pass.
//!
//! Event: content = the commit message (redacted, cut); attrs `repo` (the folder's name), `repo_path`, `branch`,
//! `sha`, `author` (the name only, never the e-mail), `files` (at most [`MAX_FILES`] paths), `insertions`,
//! `deletions`; `occurred_at` = the commit time.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};
use serde_json::json;
use time::OffsetDateTime;

use crate::{EventsError, Pass};

/// Most commits one pass takes from one repository.
pub const MAX_COMMITS: usize = 1_000;
/// Most file paths kept in one commit's attrs.
pub const MAX_FILES: usize = 200;
/// Most bytes of one commit record read (message and file list); a longer one is cut.
const MAX_RECORD: usize = 1024 * 1024;

/// What a repository's cursor holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
struct Cursor {
    branch: String,
    sha: String,
}

/// One commit as `git log` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub sha: String,
    pub author: String,
    pub time: i64,
    pub message: String,
    pub files: Vec<String>,
    pub insertions: u64,
    pub deletions: u64,
}

const FORMAT: &str = "--format=%x1e%H%x1f%an%x1f%ct%x1f%B%x1d";

fn git(repo: &Path) -> Command {
    let mut c = Command::new("git");
    c.arg("-C")
        .arg(repo)
        .args(["-c", "core.quotepath=off", "-c", "log.showSignature=false"])
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::null());
    c
}

/// The trimmed standard output of a git command that succeeded, else its first error line.
fn git_out(repo: &Path, args: &[&str]) -> Result<String, String> {
    let out = git(repo)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git ({e}): install git or disable the git source"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(err.lines().next().unwrap_or("git failed").to_owned())
    }
}

/// The commit HEAD names, or `None` in a repository without commits yet.
fn head(repo: &Path) -> Result<Option<String>, String> {
    let out = git(repo)
        .args(["rev-parse", "--verify", "--quiet", "HEAD"])
        .output()
        .map_err(|e| format!("cannot run git ({e}): install git or disable the git source"))?;
    if out.status.success() {
        return Ok(Some(String::from_utf8_lossy(&out.stdout).trim().to_owned()));
    }
    // `--quiet` says nothing when HEAD names no commit; anything said is a real error (not a repository).
    let err = String::from_utf8_lossy(&out.stderr);
    match err.lines().next() {
        None => Ok(None),
        Some(line) => Err(line.to_owned()),
    }
}

/// Parses one record of [`FORMAT`] followed by `--numstat` lines.
pub fn parse_record(rec: &str) -> Option<Commit> {
    let (head, stats) = rec.split_once('\x1d')?;
    let mut f = head.splitn(4, '\x1f');
    let sha = f.next()?.trim().to_owned();
    let author = f.next()?.to_owned();
    let time = f.next()?.trim().parse().ok()?;
    let message = f.next()?.trim().to_owned();
    if sha.len() < 40 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut c = Commit {
        sha,
        author,
        time,
        message,
        files: Vec::new(),
        insertions: 0,
        deletions: 0,
    };
    for line in stats.lines() {
        let mut p = line.splitn(3, '\t');
        let (Some(ins), Some(del), Some(path)) = (p.next(), p.next(), p.next()) else {
            continue;
        };
        // Binary files count `-` lines.
        c.insertions += ins.parse::<u64>().unwrap_or(0);
        c.deletions += del.parse::<u64>().unwrap_or(0);
        if c.files.len() < MAX_FILES {
            c.files.push(path.to_owned());
        }
    }
    Some(c)
}

/// What [`commits`] read.
#[derive(Debug, Clone, Default)]
pub struct Read {
    /// Oldest first.
    pub commits: Vec<Commit>,
    /// A bound stopped the reading: more commits follow.
    pub more: bool,
    /// Records that could not be read as a commit.
    pub unreadable: u64,
}

/// The commits of `range` in `repo`, oldest first, at most `max`.
pub fn commits(repo: &Path, range: &str, max: usize) -> Result<Read, String> {
    let mut child = git(repo)
        .args([
            "log",
            "--reverse",
            "--no-color",
            "--numstat",
            FORMAT,
            range,
            "--",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run git ({e}): install git or disable the git source"))?;
    let Some(stdout) = child.stdout.take() else {
        return Err("git gave no output".into());
    };
    let mut reader = BufReader::new(stdout);
    let mut out = Vec::new();
    let mut more = false;
    let mut unreadable = 0;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = std::io::Read::take(&mut reader, MAX_RECORD as u64)
            .read_until(0x1e, &mut buf)
            .map_err(|e| format!("reading git's output: {e}"))?;
        if n == 0 {
            break;
        }
        if buf.last() == Some(&0x1e) {
            buf.pop();
        } else if n == MAX_RECORD {
            // A record over the bound: what was read of it is taken, the rest skipped up to the next one.
            skip_past(&mut reader, 0x1e).map_err(|e| format!("reading git's output: {e}"))?;
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if out.len() == max {
            more = true;
            break;
        }
        match parse_record(&String::from_utf8_lossy(&buf)) {
            Some(c) => out.push(c),
            None => unreadable += 1,
        }
    }
    if more {
        let _ = child.kill();
    }
    let status = child.wait().map_err(|e| format!("git: {e}"))?;
    if !more && !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.by_ref().take(4096).read_to_string(&mut err);
        }
        return Err(err.lines().next().unwrap_or("git log failed").to_owned());
    }
    Ok(Read {
        commits: out,
        more,
        unreadable,
    })
}

/// Reads and drops bytes up to and including `sep` (or to the end), holding no more than the reader's buffer.
fn skip_past(r: &mut impl BufRead, sep: u8) -> std::io::Result<()> {
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|b| *b == sep) {
            Some(i) => {
                r.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                r.consume(n);
            }
        }
    }
}

pub(crate) fn run(pass: &mut Pass<'_>) -> Result<(), EventsError> {
    let repos: Vec<PathBuf> = pass
        .config
        .paths
        .get(&pass.source)
        .cloned()
        .unwrap_or_default();
    if repos.is_empty() {
        pass.problem("no repository added: `personkit events add-path git <repo>`");
    }
    for repo in repos {
        read_repo(pass, &repo)?;
    }
    Ok(())
}

fn read_repo(pass: &mut Pass<'_>, repo: &Path) -> Result<(), EventsError> {
    let shown = repo.display().to_string();
    if !repo.is_dir() {
        pass.problem(format!("{shown}: not found"));
        return Ok(());
    }
    let head = match head(repo) {
        Ok(Some(h)) => h,
        Ok(None) => return Ok(()),
        Err(e) => {
            pass.problem(format!("{shown}: {e}"));
            return Ok(());
        }
    };
    let branch =
        git_out(repo, &["rev-parse", "--abbrev-ref", "HEAD"]).unwrap_or_else(|_| "HEAD".into());
    let key = shown.clone();
    let last: Option<Cursor> = pass.cursor(&key)?;
    let range = match &last {
        Some(c) if c.sha == head => return Ok(()),
        Some(c)
            if git(repo)
                .args(["merge-base", "--is-ancestor", &c.sha, "HEAD"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()) =>
        {
            format!("{}..HEAD", c.sha)
        }
        _ => "HEAD".to_owned(),
    };
    let Read {
        commits: list,
        more,
        unreadable,
    } = match commits(repo, &range, MAX_COMMITS) {
        Ok(x) => x,
        Err(e) => {
            pass.problem(format!("{shown}: {e}"));
            return Ok(());
        }
    };
    pass.report.more |= more;
    if unreadable > 0 {
        pass.report.rejected += unreadable;
        pass.problem(format!(
            "{shown}: {unreadable} commit record(s) git gave could not be read"
        ));
    }
    pass.report.read += list.len() as u64;
    let name = crate::dir_name(repo);
    for chunk in list.chunks(500) {
        let events: Vec<_> = chunk
            .iter()
            .map(|c| {
                let at = OffsetDateTime::from_unix_timestamp(c.time).unwrap_or(pass.now);
                pass.event(
                    "git.commit",
                    format!("{shown}@{}", c.sha),
                    pass.clean(&c.message),
                    at,
                    json!({
                        "repo": name,
                        "repo_path": shown,
                        "branch": branch,
                        "sha": c.sha,
                        "author": pass.clean(&c.author),
                        "files": c.files,
                        "insertions": c.insertions,
                        "deletions": c.deletions,
                    }),
                )
            })
            .collect();
        pass.store(&events)?;
        if let Some(c) = chunk.last() {
            pass.save_cursor(
                &key,
                &Cursor {
                    branch: branch.clone(),
                    sha: c.sha.clone(),
                },
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_message_author_and_line_counts() {
        let sha = "a".repeat(40);
        let rec = format!(
            "{sha}\x1fAda Lovelace\x1f1764325200\x1fFix the parser\n\nLonger body.\n\x1d\n\n3\t1\tsrc/a.rs\n-\t-\tlogo.png\n10\t0\tREADME.md\n"
        );
        let c = parse_record(&rec).unwrap();
        assert_eq!(c.author, "Ada Lovelace");
        assert_eq!(c.message, "Fix the parser\n\nLonger body.");
        assert_eq!(c.files, ["src/a.rs", "logo.png", "README.md"]);
        assert_eq!((c.insertions, c.deletions), (13, 1));
        assert_eq!(c.time, 1_764_325_200);
        assert!(parse_record("not a record").is_none());
        assert!(parse_record("xyz\x1fa\x1f1\x1fm\x1d").is_none());
    }
}
