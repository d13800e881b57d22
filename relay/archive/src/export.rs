//! An export folder kept in step with the corpus: one file per thread ([`crate::names`], [`crate::render`]), the
//! approved knowledge ([`crate::knowledge`]), the current version of each memory tier and of the profile
//! ([`crate::memory`]), and a manifest, [`MANIFEST`], mapping each thread id (and the knowledge and memory files)
//! to its file and the sha256 of what was written.
//!
//! A run renders the threads the filters select plus every thread the folder already holds, writes a file only
//! when its bytes differ from the manifest's (or the file is missing), moves it when its name changed (a new
//! title), and removes the files of threads the corpus no longer has (forgotten). Filters only choose what is
//! added: what is already in the folder is kept current, so forgotten content leaves it on the next run
//! whatever the filters. Files and the manifest are written to a temporary name and renamed into place, so an
//! interrupted run leaves whole files and a manifest that a rerun corrects.
//!
//! Nothing under the folder is followed through a symbolic link: a link where a file goes is replaced by the
//! file, a link where a folder goes stops the run with an error naming it (what it points to is not touched),
//! and a file the manifest names behind such a link, or outside the folder, is left in place and reported.

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
    /// The file of the user's approved knowledge ([`crate::knowledge`]), while there is any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knowledge: Option<Entry>,
    /// The file of each memory tier and of the profile ([`crate::memory`]), by tier, while it has a current version.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub memory: BTreeMap<String, Entry>,
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
    /// Files of forgotten threads actually removed (or already gone).
    pub removed: u64,
    /// Files the manifest names that were not removed, with why.
    pub not_removed: Vec<NotRemoved>,
    /// Approved knowledge entries in the folder's knowledge file (0: no file).
    pub knowledge: u64,
    /// Memory files in the folder (one per tier with a current version, the profile's included).
    pub memory: u64,
}

/// A file of the old manifest left in place.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NotRemoved {
    /// As the manifest names it.
    pub path: String,
    pub why: String,
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

/// Makes the folders of `rel` under `root`, one component at a time, refusing any that is a symbolic link (or
/// not a folder) rather than following it.
fn make_dirs(root: &Path, rel: &Path) -> Result<(), ExportError> {
    let mut dir = root.to_path_buf();
    for c in rel.parent().into_iter().flat_map(Path::components) {
        dir.push(c);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(ExportError::Folder(format!(
                    "{} is a symbolic link; the export does not write through links. Remove the link (what it \
                     points to was not touched) or export to another folder (--out)",
                    dir.display()
                )));
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(ExportError::Folder(format!(
                    "{} is in the way of a folder the export needs; move it or export to another folder (--out)",
                    dir.display()
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir(&dir).map_err(io(&dir))?
            }
            Err(e) => return Err(io(&dir)(e)),
        }
    }
    Ok(())
}

/// Whether every folder of `rel` under `root` is a real folder (no link, nothing missing).
fn real_dirs(root: &Path, rel: &Path) -> bool {
    let mut dir = root.to_path_buf();
    rel.parent()
        .into_iter()
        .flat_map(Path::components)
        .all(|c| {
            dir.push(c);
            fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir())
        })
}

/// Whether `path` is a plain file (not a link to one).
fn is_plain_file(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_file())
}

/// Writes `bytes` to `root/rel` through a temporary file in the same folder. The temporary name is made new
/// (whatever stood there, a link included, is removed first), and the rename replaces a link at `rel` itself.
fn write_atomic(root: &Path, rel: &Path, bytes: &[u8]) -> Result<(), ExportError> {
    make_dirs(root, rel)?;
    let path = root.join(rel);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&tmp)(e)),
    }
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(io(&tmp))?;
    f.write_all(bytes).map_err(io(&tmp))?;
    drop(f);
    fs::rename(&tmp, &path).map_err(io(&path))
}

/// Removes the file a manifest entry names and then its folders up to `root` while they are empty. A path
/// outside the folder or behind a symbolic link is left alone: the reason comes back.
fn remove_file(root: &Path, name: &str) -> Result<Result<(), String>, ExportError> {
    let Some(rel) = safe_rel(name) else {
        return Ok(Err(
            "the manifest names a path outside the export folder; left alone".into(),
        ));
    };
    if any_link(root, &rel) {
        return Ok(Err(
            "a folder on its path is a symbolic link; the export does not delete through links"
                .into(),
        ));
    }
    let path = root.join(&rel);
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
    Ok(Ok(()))
}

/// Whether a folder of `rel` under `root` is a symbolic link.
fn any_link(root: &Path, rel: &Path) -> bool {
    let mut dir = root.to_path_buf();
    rel.parent()
        .into_iter()
        .flat_map(Path::components)
        .any(|c| {
            dir.push(c);
            fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink())
        })
}

/// Writes the file of each memory tier with a current version when its bytes changed, and removes the file of a
/// tier that has none any more (withdrawn after a forget); records them in `manifest`.
fn memory_files(
    conn: &Connection,
    out: &Path,
    format: Format,
    mut old: BTreeMap<String, Entry>,
    manifest: &mut Manifest,
    report: &mut Report,
) -> Result<(), ExportError> {
    for tier in crate::memory::tiers() {
        let prev = old.remove(*tier);
        let Some(v) = crate::memory::current(conn, tier)? else {
            if let Some(prev) = prev
                && let Err(why) = remove_file(out, &prev.path)?
            {
                report.not_removed.push(NotRemoved {
                    path: prev.path,
                    why,
                });
            }
            continue;
        };
        let bytes = crate::memory::render(&v, format);
        let sha = hex::encode(Sha256::digest(&bytes));
        let rel = crate::memory::file_name(tier, format);
        let same = prev
            .as_ref()
            .is_some_and(|p| p.path == rel && p.sha256 == sha)
            && real_dirs(out, Path::new(&rel))
            && is_plain_file(&out.join(&rel));
        if !same {
            write_atomic(out, Path::new(&rel), &bytes)?;
        }
        report.memory += 1;
        manifest.memory.insert(
            (*tier).to_owned(),
            Entry {
                path: rel,
                sha256: sha,
            },
        );
    }
    // Tiers this build does not know (a manifest from elsewhere): their files are not ours to keep.
    for (_, e) in old {
        if let Err(why) = remove_file(out, &e.path)? {
            report.not_removed.push(NotRemoved { path: e.path, why });
        }
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
        knowledge: None,
        memory: BTreeMap::new(),
    };
    let old_version = old.as_ref().map(|m| m.render_version);
    let (mut old_threads, old_knowledge, old_memory) = old
        .map(|m| (m.threads, m.knowledge, m.memory))
        .unwrap_or_default();
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
        }) && real_dirs(out, Path::new(&rel))
            && is_plain_file(&out.join(&rel));
        if same {
            report.unchanged += 1;
        } else {
            write_atomic(out, Path::new(&rel), &bytes)?;
            if let Some(p) = prev.as_ref().filter(|p| p.path != rel) {
                taken.remove(&p.path.to_lowercase());
                if let Err(why) = remove_file(out, &p.path)? {
                    report.not_removed.push(NotRemoved {
                        path: p.path.clone(),
                        why,
                    });
                }
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
    let entries = crate::knowledge::approved(conn)?;
    report.knowledge = entries.len() as u64;
    if entries.is_empty() {
        // Nothing approved any more (rejected since, or forgotten with its sources): the file goes.
        if let Some(prev) = old_knowledge
            && let Err(why) = remove_file(out, &prev.path)?
        {
            report.not_removed.push(NotRemoved {
                path: prev.path,
                why,
            });
        }
    } else {
        let paths: BTreeMap<String, String> = manifest
            .threads
            .iter()
            .map(|(id, e)| (id.clone(), e.path.clone()))
            .collect();
        let bytes = crate::knowledge::render(&entries, format, &paths);
        let sha = hex::encode(Sha256::digest(&bytes));
        let rel = crate::knowledge::file_name(format);
        let same = old_knowledge
            .as_ref()
            .is_some_and(|p| p.path == rel && p.sha256 == sha)
            && is_plain_file(&out.join(&rel));
        if !same {
            write_atomic(out, Path::new(&rel), &bytes)?;
        }
        manifest.knowledge = Some(Entry {
            path: rel,
            sha256: sha,
        });
    }
    memory_files(conn, out, format, old_memory, &mut manifest, &mut report)?;
    // What is left of the old manifest are threads the corpus no longer has.
    for (_, e) in old_threads {
        match remove_file(out, &e.path)? {
            Ok(()) => report.removed += 1,
            Err(why) => report.not_removed.push(NotRemoved { path: e.path, why }),
        }
    }
    let mut m = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
    m.push(b'\n');
    write_atomic(out, Path::new(MANIFEST), &m)?;
    Ok(report)
}
