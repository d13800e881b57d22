#![allow(clippy::expect_used)] // a build script reports a broken surface file by failing the build
//! Assembles the surface registry from `surfaces/*.json` (one file per surface) and `surfaces/_render.json` (the
//! rendering rules every surface shares) into one compact document, `$OUT_DIR/registry.json`, which the core
//! embeds. Each surface file's `provenance` (which rules are verified against what) is documentation and is left
//! out of the embedded copy, so it costs no wasm bytes. Verified surfaces come first, then experimental ones, each
//! group in file-name order. `scripts/build-extension` reads the same files for the manifest's matches.

use std::path::Path;

fn main() {
    let dir = Path::new("surfaces");
    println!("cargo:rerun-if-changed=surfaces");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("reading shared/surfaces")
        .map(|e| e.expect("listing shared/surfaces").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut render = serde_json::Value::Null;
    let mut surfaces: Vec<(bool, serde_json::Value)> = Vec::new();
    for path in &files {
        println!("cargo:rerun-if-changed={}", path.display());
        let text = std::fs::read_to_string(path).expect("reading a surface file");
        let mut value: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name == "_render.json" {
            if let Some(o) = value.as_object_mut() {
                o.remove("provenance");
            }
            render = value;
            continue;
        }
        let experimental = value["status"] == "experimental";
        if let Some(o) = value.as_object_mut() {
            o.remove("provenance");
        }
        surfaces.push((experimental, value));
    }
    surfaces.sort_by_key(|(experimental, _)| *experimental);
    let doc = serde_json::json!({
        "version": 1,
        "render": render,
        "surfaces": surfaces.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
    });
    let out = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("registry.json");
    std::fs::write(out, doc.to_string()).expect("writing registry.json");
}
