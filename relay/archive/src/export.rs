//! An export folder kept in step with the corpus: one file per thread ([`crate::names`], [`crate::render`]) and
//! a manifest, [`MANIFEST`], mapping each thread id to its file and the sha256 of what was written.
//!
//! A run renders the threads the filters select plus every thread the folder already holds, writes a file only
//! when its bytes differ from the manifest's (or the file is missing), moves it when its name changed (a new
//! title), and removes the files of threads the corpus no longer has (forgotten). Filters only choose what is
//! added: what is already in the folder is kept current, so forgotten content leaves it on the next run
//! whatever the filters. Files and the manifest are written to a temporary name and renamed into place, so an
//! interrupted run leaves whole files and a manifest that a rerun corrects.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Write;
use std::path::{Component, Path, PathBuf};

use personkit_store::Connection;
use personkit_store::archive::{self, ExportFilter};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::names;
use crate::render::{self, Format, RENDER_VERSION};

/// The manifest's file name in the export folder.
pub const MANIFEST: &str = ".personkit-export.json";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: String,
    pub render_version: u32,
    pub threads: BTreeMap<String, Entry>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    /// Relative to the folder, `/`-separated.
    pub path: String,
    pub sha256: String,
}

/// What a run did.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Report {
    pub out: String,
    pub format: String,
    /// Threads looked at.
    pub threads: u64,
    pub written: u64,
    pub unchanged: u64,
    pub removed: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{0}")]
    Folder(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Db(#[from] personkit_store::DbError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// A manifest path is only ever relative and inside the folder.
fn safe_rel(p: &str) -> Option<PathBuf> {
    let path = Path::new(p);
    path.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then(|| path.to_path_buf())
}

fn load_manifest(out: &Path, format: Format) -> Result<Option<Manifest>, ExportError> {
    let path = out.join(MANIFEST);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path)(e)),
    };
    let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| {
        ExportError::Folder(format!(
            "{} is not an export manifest ({e}); remove it or export to another folder",
            path.display()
        ))
    })?;
    if m.format != format.name() {
        return Err(ExportError::Folder(format!(
            "{} holds a {} export; export {} to another folder (--out)",
            out.display(),
            m.format,
            format.name()
        )));
    }
    Ok(Some(m))
}

/// Writes `bytes` to `path` through a temporary file in the same folder.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ExportError> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(bytes).map_err(io(&tmp))?;
    drop(f);
    fs::rename(&tmp, path).map_err(io(path))
}

/// Removes a file and then its folders up to `root` while they are empty.
fn remove_file(root: &Path, rel: &Path) -> Result<(), ExportError> {
    let path = root.join(rel);
    match fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&path)(e)),
    }
    let mut dir = path.parent();
    while let Some(d) = dir {
        if d == root || fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
    Ok(())
}

/// Brings the folder `out` up to date with the corpus (see the module docs). `progress(done, total)` is called
/// after each thread.
pub fn export(
    conn: &Connection,
    out: &Path,
    format: Format,
    filter: &ExportFilter,
    mut progress: impl FnMut(u64, u64),
) -> Result<Report, ExportError> {
    fs::create_dir_all(out).map_err(io(out))?;
    let old = load_manifest(out, format)?;
    let mut manifest = Manifest {
        format: format.name().to_owned(),
        render_version: RENDER_VERSION,
        threads: BTreeMap::new(),
    };
    let old_version = old.as_ref().map(|m| m.render_version);
    let mut old_threads = old.map(|m| m.threads).unwrap_or_default();
    let known: Vec<String> = old_threads.keys().cloned().collect();
    let ids = archive::export_thread_ids(conn, filter, &known)?;
    let mut report = Report {
        out: out.display().to_string(),
        format: format.name().to_owned(),
        threads: ids.len() as u64,
        ..Report::default()
    };
    // Paths in use (lower-cased: case-insensitive file systems) → thread id.
    let mut taken: HashMap<String, String> = old_threads
        .iter()
        .map(|(id, e)| (e.path.to_lowercase(), id.clone()))
        .collect();
    for (i, id) in ids.iter().enumerate() {
        let Some(t) = archive::export_thread(conn, id)? else {
            continue;
        };
        let bytes = render::render(&t, format);
        let sha = hex::encode(Sha256::digest(&bytes));
        let mut rel = names::thread_path(
            &t.surface,
            &t.first_seen_at,
            t.title.as_deref(),
            &t.id,
            format.ext(),
        );
        if taken
            .get(&rel.to_lowercase())
            .is_some_and(|other| other != id)
        {
            rel = names::thread_path(&t.surface, &t.first_seen_at, t.title.as_deref(), "", "");
            rel = format!("{}{}.{}", rel.trim_end_matches('.'), t.id, format.ext());
        }
        let prev = old_threads.remove(id);
        let same = prev.as_ref().is_some_and(|p| {
            p.path == rel && p.sha256 == sha && old_version == Some(RENDER_VERSION)
        }) && out.join(&rel).is_file();
        if same {
            report.unchanged += 1;
        } else {
            write_atomic(&out.join(&rel), &bytes)?;
            if let Some(p) = prev.as_ref().filter(|p| p.path != rel)
                && let Some(old_rel) = safe_rel(&p.path)
            {
                taken.remove(&p.path.to_lowercase());
                remove_file(out, &old_rel)?;
            }
            report.written += 1;
        }
        taken.insert(rel.to_lowercase(), id.clone());
        manifest.threads.insert(
            id.clone(),
            Entry {
                path: rel,
                sha256: sha,
            },
        );
        progress(i as u64 + 1, ids.len() as u64);
    }
    // What is left of the old manifest are threads the corpus no longer has.
    for (_, e) in old_threads {
        if let Some(rel) = safe_rel(&e.path) {
            remove_file(out, &rel)?;
        }
        report.removed += 1;
    }
    let mut m = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
    m.push(b'\n');
    write_atomic(&out.join(MANIFEST), &m)?;
    Ok(report)
}
