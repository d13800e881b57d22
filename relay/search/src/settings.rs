//! `[search]` of the settings file: how a query's ranked lists are fused when the query does not say.
//!
//! ```toml
//! [search]
//! fusion = "rrf"   # or "convex" (the default)
//! ```
//!
//! A query's own `fusion` parameter (`GET /v1/query?fusion=rrf`, `personkit corpus query --fusion rrf`) wins over
//! the file.

use std::path::Path;

use serde::Deserialize;

use crate::Fusion;

/// Search settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// The fusion a query uses when it names none.
    pub fusion: Fusion,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            fusion: Fusion::Convex,
        }
    }
}

/// A settings file that cannot be used, with the file and the key named.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub String);

impl SettingsError {
    pub fn hint(&self) -> &'static str {
        "fix or remove [search] in the settings file: fusion = \"convex\" or \"rrf\" (README, \"Using the corpus\")"
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    fusion: Option<String>,
}

#[derive(Deserialize)]
struct File {
    search: Option<toml::Value>,
}

impl Fusion {
    /// `convex` or `rrf` (any case).
    pub fn parse(s: &str) -> Option<Fusion> {
        match s.trim().to_ascii_lowercase().as_str() {
            "convex" => Some(Fusion::Convex),
            "rrf" => Some(Fusion::Rrf),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Fusion::Convex => "convex",
            Fusion::Rrf => "rrf",
        }
    }
}

impl Settings {
    /// `[search]` of the settings file that belongs to the corpus at `db_path`
    /// ([`personkit_shared::settings_file::locate`]), over the defaults.
    pub fn for_db(db_path: &Path) -> Result<Settings, SettingsError> {
        let file =
            personkit_shared::settings_file::locate(Some(db_path), |k| std::env::var(k).ok());
        Settings::load(file.as_deref())
    }

    /// `[search]` of the file at `path` (none: the defaults).
    pub fn load(path: Option<&Path>) -> Result<Settings, SettingsError> {
        let mut s = Settings::default();
        let Some(path) = path else { return Ok(s) };
        let text = std::fs::read_to_string(path)
            .map_err(|e| SettingsError(format!("cannot read {}: {e}", path.display())))?;
        let file: File =
            toml::from_str(&text).map_err(|e| SettingsError(format!("{}: {e}", path.display())))?;
        let Some(section) = file.search else {
            return Ok(s);
        };
        let section: Section = section
            .try_into()
            .map_err(|e| SettingsError(format!("{} [search]: {e}", path.display())))?;
        if let Some(f) = section.fusion {
            s.fusion = Fusion::parse(&f).ok_or_else(|| {
                SettingsError(format!(
                    "{} [search] fusion = {f:?}: use \"convex\" or \"rrf\"",
                    path.display()
                ))
            })?;
        }
        Ok(s)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Settings, SettingsError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, text).unwrap();
        Settings::load(Some(&path))
    }

    #[test]
    fn the_file_chooses_the_fusion_and_says_what_is_wrong() {
        assert_eq!(Settings::load(None).unwrap().fusion, Fusion::Convex);
        assert_eq!(
            load("[llm]\nkind = \"off\"\n").unwrap().fusion,
            Fusion::Convex
        );
        assert_eq!(
            load("[search]\nfusion = \"RRF\"\n").unwrap().fusion,
            Fusion::Rrf
        );
        assert_eq!(
            load("[search]\nfusion = \"convex\"\n").unwrap().fusion,
            Fusion::Convex
        );
        let e = load("[search]\nfusion = \"borda\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("borda") && e.contains("rrf"), "{e}");
        let e = load("[search]\nfuson = \"rrf\"\n").unwrap_err().to_string();
        assert!(e.contains("fuson"), "{e}");
        let e = load("[search]\nfusion = 3\n").unwrap_err().to_string();
        assert!(e.contains("[search]"), "{e}");
    }
}
