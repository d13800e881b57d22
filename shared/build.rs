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
    endpoints();
}

/// `network/endpoints.json` (which of a site's own requests the page-world interceptor tees) as a Rust table,
/// `$OUT_DIR/endpoints.rs`, so the core matches them without parsing JSON at run time. `scripts/build-extension`
/// gives the same file to the page-world script.
fn endpoints() {
    let path = Path::new("network/endpoints.json");
    println!("cargo:rerun-if-changed={}", path.display());
    let text = std::fs::read_to_string(path).expect("reading shared/network/endpoints.json");
    let value: serde_json::Value = serde_json::from_str(&text).expect("endpoints.json is not JSON");
    let mut rows = String::new();
    for e in value["endpoints"]
        .as_array()
        .expect("endpoints.json: endpoints[]")
    {
        let field = |k: &str| {
            e[k].as_str()
                .unwrap_or_else(|| panic!("endpoints.json: {k} missing in {e}"))
        };
        let surface = match field("surface") {
            "chatgpt" => "ChatGpt",
            "claude" => "Claude",
            "gemini" => "Gemini",
            "copilot" => "Copilot",
            "grok" => "Grok",
            "deepseek" => "DeepSeek",
            other => panic!("endpoints.json: no network parser for {other}"),
        };
        let kind = match field("kind") {
            "stream" => "Stream",
            "conversation" => "Conversation",
            other => panic!("endpoints.json: kind {other}"),
        };
        let transport = match field("transport") {
            "fetch" => "Fetch",
            "websocket" => "WebSocket",
            other => panic!("endpoints.json: transport {other}"),
        };
        let method = field("method");
        let p = field("path");
        assert!(
            p.starts_with('/'),
            "endpoints.json: path {p} must start with /"
        );
        rows.push_str(&format!(
            "    Endpoint {{ surface: Surface::{surface}, kind: Kind::{kind}, transport: Transport::{transport}, method: {method:?}, path: {p:?} }},\n"
        ));
    }
    let out = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("endpoints.rs");
    std::fs::write(
        out,
        format!("pub(crate) const ENDPOINTS: &[Endpoint] = &[\n{rows}];\n"),
    )
    .expect("writing endpoints.rs");
}
