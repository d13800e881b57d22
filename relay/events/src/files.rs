//! `claude-plans`: plans, task lists and Claude Code's memory files, as whole-file snapshots.
//!
//! - `plan.updated`: `<claude>/plans/*.md` (`<claude>` = `CLAUDE_CONFIG_DIR`, else `~/.claude`);
//! - `tasks.updated`: `~/TASKS.md` and `TASKS.md` in each project folder the user adds;
//! - `memory_file.updated`: Claude Code's memory as its documentation lists it — the user's `<claude>/CLAUDE.md`,
//!   a project's `CLAUDE.md`, `.claude/CLAUDE.md` and `CLAUDE.local.md`, and the notes Claude keeps itself in
//!   `<claude>/projects/<project>/memory/*.md`.
//!
//! Per file the sha256 of its bytes is remembered: an unchanged file is not read again and writes nothing. A
//! changed one becomes an event with its text (at most [`MAX_FILE`] bytes read, redacted, cut to
//! [`crate::MAX_TEXT`]), attrs `path` and `project` (the project folder's name, when there is one),
//! `occurred_at` = its modification time.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::{EventsError, Pass, Source};

/// Most bytes read of one file.
pub const MAX_FILE: u64 = 1024 * 1024;
/// Most files one pass looks at.
pub const MAX_FILES: usize = 2_000;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Cursor {
    sha256: String,
}

/// One file this source reads: its event kind, path and project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub kind: &'static str,
    pub path: PathBuf,
    pub project: Option<String>,
}

/// The `*.md` files directly in `dir`, by name (at most [`MAX_FILES`]).
fn markdown_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .take(MAX_FILES * 4)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md") && p.is_file())
        .collect();
    v.sort();
    v.truncate(MAX_FILES);
    v
}

/// The files of this source that exist, in a stable order.
pub fn candidates(pass_config: &crate::Config) -> Vec<Candidate> {
    let claude = pass_config.claude_dir();
    let mut out = Vec::new();
    for p in markdown_in(&claude.join("plans")) {
        out.push(Candidate {
            kind: "plan.updated",
            path: p,
            project: None,
        });
    }
    out.push(Candidate {
        kind: "tasks.updated",
        path: pass_config.home.join("TASKS.md"),
        project: None,
    });
    out.push(Candidate {
        kind: "memory_file.updated",
        path: claude.join("CLAUDE.md"),
        project: None,
    });
    for dir in pass_config
        .paths
        .get(&Source::ClaudePlans)
        .map_or(&[][..], Vec::as_slice)
    {
        let project = Some(crate::dir_name(dir));
        out.push(Candidate {
            kind: "tasks.updated",
            path: dir.join("TASKS.md"),
            project: project.clone(),
        });
        for rel in ["CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md"] {
            out.push(Candidate {
                kind: "memory_file.updated",
                path: dir.join(rel),
                project: project.clone(),
            });
        }
    }
    // Claude's own notes: `<claude>/projects/<encoded working directory>/memory/*.md`.
    if let Ok(rd) = std::fs::read_dir(claude.join("projects")) {
        let mut dirs: Vec<PathBuf> = rd
            .filter_map(Result::ok)
            .take(10_000)
            .map(|e| e.path().join("memory"))
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        for d in dirs {
            // The folder is named as a transcript's is: the project is what the transcript harvester finds.
            let project = d.parent().and_then(|p| {
                personkit_import::harvest::project_of("claude-code", &p.join("x.jsonl"))
            });
            for p in markdown_in(&d) {
                out.push(Candidate {
                    kind: "memory_file.updated",
                    path: p,
                    project: project.clone(),
                });
            }
        }
    }
    out.retain(|c| c.path.is_file());
    out.truncate(MAX_FILES);
    out
}

pub(crate) fn run(pass: &mut Pass<'_>) -> Result<(), EventsError> {
    let list = candidates(pass.config);
    for c in list {
        read_file(pass, &c)?;
    }
    Ok(())
}

fn read_file(pass: &mut Pass<'_>, c: &Candidate) -> Result<(), EventsError> {
    let shown = c.path.display().to_string();
    let (bytes, meta) = match std::fs::File::open(&c.path).and_then(|f| {
        let meta = f.metadata()?;
        let mut b = Vec::new();
        f.take(MAX_FILE).read_to_end(&mut b)?;
        Ok((b, meta))
    }) {
        Ok(x) => x,
        Err(e) => {
            pass.problem(format!("{shown}: {e}"));
            pass.report.rejected += 1;
            return Ok(());
        }
    };
    let hash = crate::sha256_hex(&bytes);
    let last: Option<Cursor> = pass.cursor(&shown)?;
    if last.is_some_and(|l| l.sha256 == hash) {
        return Ok(());
    }
    pass.report.read += 1;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if meta.len() > MAX_FILE {
        text.push_str(&format!("\n[cut: {} more bytes]", meta.len() - MAX_FILE));
    }
    let at = crate::mtime(&meta).unwrap_or(pass.now);
    let e = pass.event(
        c.kind,
        shown.clone(),
        pass.clean(&text),
        at,
        json!({"path": shown, "project": c.project}),
    );
    pass.store(&[e])?;
    pass.save_cursor(&shown, &Cursor { sha256: hash })?;
    Ok(())
}
