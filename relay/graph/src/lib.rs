//! `personkit-graph` is the entity graph's rules: which kinds of entity and which relations exist ([`Kind`],
//! [`Predicate`]), how a name becomes the key aliases are matched by ([`key`]), what a thread or an event certainly
//! says without a model ([`derive`]), the incremental pass that writes it ([`run`]), and which entities look like
//! one another ([`similar`]). It also assembles the one view of an entity every front end shows ([`view`]).
//!
//! It is not storage (the rows and every query are `personkit_store::graph`'s) and it runs no model: a link a model
//! extracts later arrives as the same [`derive::Proposals`] with `How::Model` and its confidence.
//!
//! **Invariant:** merge candidates are proposed only; two entities become one only on the user's word
//! ([`view::merge`], called from the CLI, the HTTP API or the dashboard).

pub mod derive;
pub mod extract;
pub mod run;
pub mod similar;
pub mod surfaces;
pub mod view;

use personkit_store::DbError;
use serde::Serialize;

/// Why a graph call failed.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
}

impl GraphError {
    /// A stable code for API errors.
    pub fn code(&self) -> &'static str {
        match self {
            GraphError::Db(DbError::Invalid(_)) | GraphError::Invalid(_) => "invalid_argument",
            GraphError::Db(_) => "storage",
            GraphError::NotFound(_) => "entity_not_found",
        }
    }

    /// What to do next.
    pub fn hint(&self) -> &'static str {
        match self {
            GraphError::Db(DbError::Invalid(_)) | GraphError::Invalid(_) => {
                "depth is 1 or 2 for neighbours and 1 to 4 for a path; kinds are person, project, repository, tool, model, organisation, place, site"
            }
            GraphError::Db(_) => "check the corpus with `personkit corpus health`",
            GraphError::NotFound(_) => {
                "list entities with `personkit graph list --json` (or GET /v1/entities?q=), and build the graph with `personkit graph build`"
            }
        }
    }
}

/// The kinds of entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Person,
    Project,
    Repository,
    Tool,
    Model,
    Organisation,
    Place,
    Site,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::Person,
        Kind::Project,
        Kind::Repository,
        Kind::Tool,
        Kind::Model,
        Kind::Organisation,
        Kind::Place,
        Kind::Site,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Person => "person",
            Kind::Project => "project",
            Kind::Repository => "repository",
            Kind::Tool => "tool",
            Kind::Model => "model",
            Kind::Organisation => "organisation",
            Kind::Place => "place",
            Kind::Site => "site",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Whether names of this kind are free text a person writes in more than one way (so look-alikes are worth
    /// proposing as merges); hosts and model ids are exact.
    pub fn has_loose_names(self) -> bool {
        !matches!(self, Kind::Site | Kind::Model)
    }
}

/// The relation types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Predicate {
    /// A project or tool uses a tool, model or site.
    Uses,
    /// Something is about a project or a person.
    About,
    /// A tool, model or repository is made by an organisation or a person.
    MadeBy,
    /// A project's work mentions a site or a model.
    Mentions,
    /// A repository is part of a project; a place of a place.
    PartOf,
}

impl Predicate {
    pub fn as_str(self) -> &'static str {
        match self {
            Predicate::Uses => "uses",
            Predicate::About => "about",
            Predicate::MadeBy => "made_by",
            Predicate::Mentions => "mentions",
            Predicate::PartOf => "part_of",
        }
    }
}

/// The key a name is matched by: lower case, `-` and `_` read as spaces, runs of white space as one space, no
/// surrounding spaces or trailing punctuation. Hosts (kind `site`) keep their dashes. "Claude Code",
/// "claude-code" and " claude  code " share a key.
pub fn key(kind: Kind, name: &str) -> String {
    let lower = name.trim().to_lowercase();
    let spaced: String = if kind == Kind::Site {
        lower
    } else {
        lower
            .chars()
            .map(|c| if c == '-' || c == '_' { ' ' } else { c })
            .collect()
    };
    let mut out = spaced.split_whitespace().collect::<Vec<_>>().join(" ");
    while out.ends_with(['.', ',', ';', ':', '!', '?']) {
        out.pop();
    }
    out
}

/// The name an entity is shown by: surrounding and repeated white space removed, at most 120 characters.
pub fn display_name(name: &str) -> String {
    name.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(120)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_written_differently_share_a_key() {
        assert_eq!(key(Kind::Tool, "Claude Code"), "claude code");
        assert_eq!(key(Kind::Tool, "claude-code"), "claude code");
        assert_eq!(key(Kind::Tool, "  claude   code. "), "claude code");
        assert_eq!(key(Kind::Project, "my_app"), "my app");
        assert_eq!(key(Kind::Site, "docs-rs.example"), "docs-rs.example");
        assert_ne!(key(Kind::Tool, "Claude"), key(Kind::Tool, "Claude Code"));
        assert_eq!(display_name("  Priya \n Shah "), "Priya Shah");
        assert_eq!(Kind::parse("organisation"), Some(Kind::Organisation));
        assert_eq!(Kind::parse("org"), None);
    }
}
