//! The current version of each memory tier and of the user's profile as one file each, in `memory/` at the top of
//! an export folder (`memory/short.md`, `memory/mid.md`, `memory/long.md`, `memory/profile.md`, or `.json`). A
//! withdrawn version (one that drew on a thread since forgotten) is never current, so it never reaches the folder;
//! a tier with no current version has no file.
//!
//! Markdown: a small YAML front-matter (tier, version number, id, creation time, model), a `#` title, then the
//! version's body as it was written. JSON: the version as the store lists it.

use personkit_store::Connection;
use personkit_store::memory::{self as rows, TIERS, Version};
use serde::Serialize;

use crate::render::{Format, RENDER_VERSION, q};

/// The tiers that have a file when they have a current version, in file order.
pub fn tiers() -> &'static [&'static str] {
    &TIERS
}

/// The file's name in the folder (relative, `/`-separated) for `tier` and `format`.
pub fn file_name(tier: &str, format: Format) -> String {
    format!("memory/{tier}.{}", format.ext())
}

/// The current version of `tier`, if it has one.
pub fn current(conn: &Connection, tier: &str) -> Result<Option<Version>, personkit_store::DbError> {
    rows::latest(conn, tier)
}

/// The file's bytes.
pub fn render(v: &Version, format: Format) -> Vec<u8> {
    match format {
        Format::Markdown => markdown(v).into_bytes(),
        Format::Json => json(v),
    }
}

fn title(tier: &str) -> &'static str {
    match tier {
        "short" => "Short memory",
        "mid" => "Mid memory",
        "long" => "Long memory",
        "profile" => "Profile",
        _ => "Memory",
    }
}

fn markdown(v: &Version) -> String {
    let mut out = String::new();
    out.push_str("---\n");
    out.push_str(&format!("tier: {}\n", q(&v.tier)));
    out.push_str(&format!("version: {}\n", v.number));
    out.push_str(&format!("id: {}\n", q(&v.id)));
    out.push_str(&format!("created_at: {}\n", q(&v.created_at)));
    match &v.model {
        Some(m) => out.push_str(&format!("model: {}\n", q(m))),
        None => out.push_str("model: null\n"),
    }
    out.push_str("---\n\n");
    out.push_str(&format!("# {}\n\n", title(&v.tier)));
    let body = v.body.trim_end();
    if !body.is_empty() {
        out.push_str(body);
        out.push('\n');
    }
    out
}

#[derive(Serialize)]
struct JsonFile<'a> {
    format: &'static str,
    version: u32,
    memory: &'a Version,
}

fn json(v: &Version) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(&JsonFile {
        format: "personkit-memory",
        version: RENDER_VERSION,
        memory: v,
    })
    .unwrap_or_default();
    out.push(b'\n');
    out
}
