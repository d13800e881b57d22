//! Where the relay's settings file is, and how a setting's origin is named. Every section of it (`[embedder]`,
//! `[llm]`, `[knowledge]`) is read from the one file this finds, so they cannot disagree about which file counts.

use std::path::{Path, PathBuf};

/// The file's name.
pub const FILE_NAME: &str = "config.toml";

/// `$PERSONKIT_CONFIG` when set (whether or not it exists: reading it then says what is wrong), else the first that
/// exists of `config.toml` next to the database and `$HOME/.dotperson/config.toml`. `env` reads a variable (empty
/// counts as unset), so callers and tests need not change the process's environment.
pub fn locate(db_path: Option<&Path>, env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let env = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(explicit) = env("PERSONKIT_CONFIG") {
        return Some(PathBuf::from(explicit));
    }
    let home = env("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    [
        db_path.and_then(Path::parent).map(|d| d.join(FILE_NAME)),
        Some(home.join(".dotperson").join(FILE_NAME)),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.is_file())
}

/// Where settings came from, for health: the file, the environment on top of it, either alone, or `default`.
pub fn describe_source(file: Option<&Path>, from_env: bool) -> String {
    match (file, from_env) {
        (Some(f), true) => format!("{} + environment", f.display()),
        (Some(f), false) => f.display().to_string(),
        (None, true) => "environment".into(),
        (None, false) => "default".into(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn env_of<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn explicit_then_beside_the_database_then_home() {
        let tmp = std::env::temp_dir().join(format!("pk-settings-{}", std::process::id()));
        let (db_dir, home) = (tmp.join("db"), tmp.join("home"));
        std::fs::create_dir_all(home.join(".dotperson")).unwrap();
        std::fs::create_dir_all(&db_dir).unwrap();
        let db = db_dir.join("corpus.db");
        let home_s = home.to_str().unwrap();
        let vars = [("HOME", home_s)];
        assert_eq!(locate(Some(&db), env_of(&vars)), None);
        let home_file = home.join(".dotperson").join(FILE_NAME);
        std::fs::write(&home_file, "").unwrap();
        assert_eq!(locate(Some(&db), env_of(&vars)), Some(home_file.clone()));
        let beside = db_dir.join(FILE_NAME);
        std::fs::write(&beside, "").unwrap();
        assert_eq!(locate(Some(&db), env_of(&vars)), Some(beside));
        assert_eq!(locate(None, env_of(&vars)), Some(home_file));
        let vars = [
            ("HOME", home_s),
            ("PERSONKIT_CONFIG", "/nonexistent/x.toml"),
        ];
        assert_eq!(
            locate(Some(&db), env_of(&vars)),
            Some(PathBuf::from("/nonexistent/x.toml"))
        );
        let vars = [("HOME", home_s), ("PERSONKIT_CONFIG", "")];
        assert_eq!(
            locate(Some(&db), env_of(&vars)),
            Some(db_dir.join(FILE_NAME))
        );
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn sources_are_named() {
        let f = Path::new("a/config.toml");
        assert_eq!(
            describe_source(Some(f), true),
            "a/config.toml + environment"
        );
        assert_eq!(describe_source(Some(f), false), "a/config.toml");
        assert_eq!(describe_source(None, true), "environment");
        assert_eq!(describe_source(None, false), "default");
    }
}
