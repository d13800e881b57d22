//! The turn-identity test vectors (`shared/tests/vectors/turn_identity.json`, rule in docs/wire-format.md "Turn
//! identity") as observations to submit and rows to expect, for the relay's tests of the library and of a real
//! relay over HTTP.

use personkit_shared::identity::{OrdinalSource, Path};
use personkit_shared::wire::{Role, build_observation};
use serde::Deserialize;
use serde_json::Value;

use crate::client_info;

/// The surface and conversation every vector is submitted under.
pub const SURFACE: &str = "browser-ext:chatgpt";

#[derive(Debug, Deserialize)]
pub struct Vectors {
    pub about: String,
    pub cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
pub struct Case {
    pub name: String,
    pub explain: String,
    pub submit: Vec<Submit>,
    pub turns: Vec<Expect>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Submit {
    pub path: Path,
    pub role: Role,
    pub content: String,
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub parent: Option<String>,
    #[serde(default)]
    pub ordinal: Option<u32>,
    #[serde(default)]
    pub ordinal_source: Option<OrdinalSource>,
    pub at: String,
    pub expect: String,
}

/// One stored row as the vectors state it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub role: String,
    pub content: String,
    pub path: String,
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub parent: Option<String>,
    pub revision: u32,
    pub current: bool,
}

/// The published vectors.
pub fn load() -> Vectors {
    serde_json::from_str(include_str!(
        "../../../shared/tests/vectors/turn_identity.json"
    ))
    .expect("turn_identity.json parses")
}

impl Case {
    /// The conversation id this case is submitted under (one per case, so cases share a corpus).
    pub fn conversation(&self) -> String {
        format!("vec-{}", self.name)
    }

    pub fn thread_id(&self) -> String {
        crate::thread_id(SURFACE, &self.conversation())
    }

    /// Expected rows, sorted.
    pub fn expected(&self) -> Vec<Expect> {
        let mut v = self.turns.clone();
        v.sort();
        v
    }
}

impl Submit {
    /// The wire item this submission is, as a client on its path sends it (wire v2 fields only where they say
    /// something: the DOM path leaves `path` out, as the extension does).
    pub fn observation(&self, conversation: &str) -> Value {
        let mut obs = build_observation(
            SURFACE,
            conversation,
            self.role,
            &self.content,
            self.ordinal,
            self.key.as_deref(),
            &self.at,
            client_info(),
        );
        obs.turn.path = (self.path != Path::Dom).then_some(self.path);
        obs.turn.parent_key = self.parent.clone();
        obs.turn.ordinal_source = self.ordinal_source;
        serde_json::to_value(obs).expect("observation serializes")
    }
}

/// Stored rows, given as `(role, content, source_path, message_key, parent_key, revision, is_current)`, sorted
/// like [`Case::expected`].
pub fn actual<I>(rows: I) -> Vec<Expect>
where
    I: IntoIterator<
        Item = (
            String,
            String,
            String,
            Option<String>,
            Option<String>,
            u32,
            bool,
        ),
    >,
{
    let mut v: Vec<Expect> = rows
        .into_iter()
        .map(
            |(role, content, path, key, parent, revision, current)| Expect {
                role,
                content,
                path,
                key,
                parent,
                revision,
                current,
            },
        )
        .collect();
    v.sort();
    v
}
