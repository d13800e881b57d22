//! The conventions every subcommand shares: `--db PATH` (env `PERSONKIT_DB`, default `~/.dotperson/corpus.db`)
//! for the corpus, and `--json` for one JSON document on stdout instead of a table.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use personkit_store::Connection;

#[derive(Debug, Clone, Args)]
pub struct DbArg {
    /// Corpus file [default: ~/.dotperson/corpus.db]
    #[arg(long, env = "PERSONKIT_DB", value_name = "PATH")]
    pub db: Option<PathBuf>,
}

impl DbArg {
    pub fn path(&self) -> PathBuf {
        self.db
            .clone()
            .unwrap_or_else(personkit_server::config::default_db_path)
    }

    /// Open an existing corpus (migrating it if needed); a clear error when there is none at the path.
    pub fn open_existing(&self) -> anyhow::Result<Connection> {
        let path = self.path();
        if !path.exists() {
            bail!(
                "no corpus at {}; start the relay with `personkit serve`, or pass --db PATH / set PERSONKIT_DB",
                path.display()
            );
        }
        self.open()
    }

    /// Open (creating and migrating if needed) the corpus.
    pub fn open(&self) -> anyhow::Result<Connection> {
        let path = self.path();
        personkit_store::db::open(&path).with_context(|| {
            format!(
                "cannot open the corpus at {} (pass --db PATH or set PERSONKIT_DB)",
                path.display()
            )
        })
    }
}

#[derive(Debug, Clone, Args)]
pub struct JsonArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}
