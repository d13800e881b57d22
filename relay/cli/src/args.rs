//! The conventions every subcommand shares: `--db PATH` (env `PERSONKIT_DB`, default `~/.dotperson/corpus.db`)
//! for the corpus, and `--json` for one JSON document on stdout instead of a table.

use std::path::PathBuf;

use anyhow::Context;
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

    /// Open an existing corpus for writing (migrating it if needed); a clear error when there is none at the
    /// path or the file is not a corpus.
    pub fn open_existing(&self) -> anyhow::Result<Connection> {
        let path = self.path();
        personkit_store::db::open_existing(&path).map_err(|e| open_error(&path, e))
    }

    /// Open an existing corpus for reading only (see `personkit_store::db::open_read_only`): read commands
    /// never create, migrate or write, so they work beside a running relay and on read-only files.
    pub fn open_read_only(&self) -> anyhow::Result<Connection> {
        let path = self.path();
        personkit_store::db::open_read_only(&path).map_err(|e| open_error(&path, e))
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

fn open_error(path: &std::path::Path, e: personkit_store::DbError) -> anyhow::Error {
    match e {
        personkit_store::DbError::Missing(_) => anyhow::anyhow!(
            "no corpus at {}; start the relay with `personkit serve` (it creates one), or pass --db PATH / set PERSONKIT_DB",
            path.display()
        ),
        e => anyhow::anyhow!("cannot open the corpus at {}: {e}", path.display()),
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
