//! Screenshots a test takes of the pages it drives: one folder per run under the target directory, each page in
//! the light and the dark colour scheme.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::json;

use crate::chromium::Tab;

/// This run's folder, `<target dir>/e2e-screenshots/<prefix>-<unix time>` (made if missing).
pub fn run_dir(prefix: &str) -> Result<PathBuf> {
    let target = personkit_testkit::target_dir();
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let dir = target
        .join("e2e-screenshots")
        .join(format!("{prefix}-{secs}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("making {}", dir.display()))?;
    Ok(dir)
}

/// The whole page (up to 4000 px tall) as `<name>-light.png` and `<name>-dark.png` in `dir`.
pub fn shoot(tab: &Tab, dir: &Path, name: &str) -> Result<()> {
    for scheme in ["light", "dark"] {
        tab.call(
            "Emulation.setEmulatedMedia",
            json!({"features": [{"name": "prefers-color-scheme", "value": scheme}]}),
        )?;
        let png = tab.screenshot_full_page(4000.0)?;
        let path = dir.join(format!("{name}-{scheme}.png"));
        std::fs::write(&path, png).with_context(|| format!("writing {}", path.display()))?;
    }
    tab.call("Emulation.setEmulatedMedia", json!({"features": []}))?;
    Ok(())
}
