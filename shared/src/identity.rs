//! Turn identity across capture paths: how a turn read from the page (DOM), from the site's own responses
//! (network), from an official export or from a local transcript (harvest) is recognised as the same turn, which
//! rendering is kept, and when new content is a revision. `docs/wire-format.md` ("Turn identity") is the prose
//! version with worked examples; `shared/tests/vectors/turn_identity.json` holds the test vectors that both this
//! module's tests and the relay's run.
//!
//! The rule is one function, [`decide`]: the relay finds the candidates in storage (through [`Lookup`]) and
//! applies the decision; this module never stores anything.

use serde::{Deserialize, Serialize};

use crate::wire::{Observation, Role};

/// How a client read a turn. Its [`Path::rank`] orders renderings: a DOM rendering is the floor, the site's
/// own source text (network) is better, and an official export or a local transcript is at least as good.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Path {
    /// Read from the rendered page.
    Dom,
    /// Read from the site's own responses (streamed reply, conversation JSON), in the page.
    Network,
    /// Read from the site's official export file.
    Export,
    /// Read from a local transcript file (agent tools).
    Harvest,
}

impl Path {
    pub fn as_str(self) -> &'static str {
        match self {
            Path::Dom => "dom",
            Path::Network => "network",
            Path::Export => "export",
            Path::Harvest => "harvest",
        }
    }

    pub fn parse(s: &str) -> Option<Path> {
        match s {
            "dom" => Some(Path::Dom),
            "network" => Some(Path::Network),
            "export" => Some(Path::Export),
            "harvest" => Some(Path::Harvest),
            _ => None,
        }
    }

    /// The highest [`Path::rank`].
    pub const MAX_RANK: u8 = 2;

    /// The source rank: dom 0 < network 1 < export = harvest 2. A rendering of higher rank replaces one of
    /// lower rank of the same turn; never the other way.
    pub fn rank(self) -> u8 {
        match self {
            Path::Dom => 0,
            Path::Network => 1,
            Path::Export | Path::Harvest => 2,
        }
    }

    /// True for the paths that carry the site's source text rather than a rendering of it.
    pub fn is_source(self) -> bool {
        self != Path::Dom
    }

    /// The path of an observation: `turn.path` when sent, else by its surface: `browser-ext:` → dom,
    /// `import:` → export, `harvest:` → harvest (what every wire v1 client meant).
    pub fn of(obs: &Observation) -> Path {
        obs.turn.path.unwrap_or_else(|| {
            if obs.source_surface.starts_with("import:") {
                Path::Export
            } else if obs.source_surface.starts_with("harvest:") {
                Path::Harvest
            } else {
                Path::Dom
            }
        })
    }
}

/// Where a turn's ordinal comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OrdinalSource {
    /// The site numbers the turn itself (ChatGPT's `conversation-turn-N`, a conversation JSON's order): the
    /// number names a slot in the current branch, so new content in the slot is a revision even under a new id.
    Site,
    /// Counted by the client among what it saw (a DOM window): provisional, only good within one path.
    #[default]
    Counted,
}

/// A turn being stored, as the rule sees it.
#[derive(Debug, Clone)]
pub struct Incoming<'a> {
    pub role: Role,
    pub content: &'a str,
    pub content_hash: &'a str,
    pub message_key: Option<&'a str>,
    pub parent_key: Option<&'a str>,
    pub ordinal: Option<u32>,
    pub ordinal_source: OrdinalSource,
    pub path: Path,
}

impl<'a> Incoming<'a> {
    pub fn of(obs: &'a Observation) -> Incoming<'a> {
        Incoming {
            role: obs.turn.role,
            content: &obs.turn.content,
            content_hash: &obs.turn.content_hash,
            message_key: obs.turn.message_key.as_deref(),
            parent_key: obs.turn.parent_key.as_deref(),
            ordinal: obs.turn.ordinal,
            ordinal_source: obs.turn.ordinal_source.unwrap_or_default(),
            path: Path::of(obs),
        }
    }

    /// The turn's position: the slot whose contents are revisions of each other. Positions of DOM turns and of
    /// source-form turns are kept apart (`o:`/`k:` against `b:`/`k:`/`s:`), so a provisional DOM ordinal never
    /// collides with a true one from the network; the two paths meet through identity ([`decide`]), never
    /// through position.
    ///
    /// - DOM: `o:<ordinal>` when the site numbers the turn, else `k:<message_key>`, else `o:<ordinal>`.
    /// - source: `b:<parent_key>` (siblings under one parent — edits and regenerations — are revisions of one
    ///   position), else `k:<message_key>`, else `s:<ordinal>`.
    pub fn position_key(&self) -> Option<String> {
        if self.path.is_source() {
            match (self.parent_key, self.message_key, self.ordinal) {
                (Some(p), _, _) => Some(format!("b:{p}")),
                (None, Some(k), _) => Some(format!("k:{k}")),
                (None, None, Some(o)) => Some(format!("s:{o}")),
                (None, None, None) => None,
            }
        } else {
            match (self.message_key, self.ordinal, self.ordinal_source) {
                (_, Some(o), OrdinalSource::Site) => Some(format!("o:{o}")),
                (Some(k), _, _) => Some(format!("k:{k}")),
                (None, Some(o), _) => Some(format!("o:{o}")),
                (None, None, _) => None,
            }
        }
    }
}

/// A stored turn, as the rule sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub pk: i64,
    pub role: Role,
    pub message_key: Option<String>,
    pub rank: u8,
    pub position_key: Option<String>,
}

/// What storage answers for the rule. Every lookup is within the incoming turn's thread.
pub trait Lookup {
    type Error;
    /// The message whose content hash is `hash`.
    fn by_hash(&mut self, hash: &str) -> Result<Option<Stored>, Self::Error>;
    /// The message a lower-ranked rendering with content hash `hash` was folded into.
    fn by_rendering(&mut self, hash: &str) -> Result<Option<i64>, Self::Error>;
    /// The current message with the site's id `key` (the newest revision if several).
    fn by_key(&mut self, key: &str) -> Result<Option<Stored>, Self::Error>;
    /// A current message of `role` whose [`match_text`] is `text` and whose rank is not `rank` (the oldest if
    /// several).
    fn by_match_text(
        &mut self,
        role: Role,
        text: &str,
        rank: u8,
    ) -> Result<Option<Stored>, Self::Error>;
    /// Whether the thread may hold a turn read by a path of another rank than `rank` (when not, [`match_text`]
    /// has nothing to compare and is not computed). The default answers yes.
    fn has_other_ranks(&mut self, _rank: u8) -> Result<bool, Self::Error> {
        Ok(true)
    }
}

/// What to do with an incoming turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Already stored; nothing changes (`duplicate`). `promote` when the stored row should take the incoming
    /// rank, key and parent (the same text arrived from a better path).
    Duplicate { pk: i64, promote: bool },
    /// A lower-ranked rendering of a stored turn: record it as one of the turn's renderings, keep the stored
    /// content (`duplicate`).
    Fold { pk: i64 },
    /// A higher-ranked rendering of a stored turn: replace the stored content, key, parent, ordinal and position
    /// with the incoming ones, keep the old text's hash as a rendering, no revision (`stored`).
    Upgrade { pk: i64 },
    /// A new turn or a new revision at `position_key` (`stored`), under `repeat_hash` instead of its content hash
    /// when the thread already holds the same text under another id of the same path ([`crate::ids::repeat_hash`]).
    Insert {
        position_key: Option<String>,
        repeat_hash: Option<String>,
    },
}

/// The rule. In order:
/// 1. the same text (content hash) is the same turn — duplicate (promoted if the incoming path ranks higher) —
///    unless both carry ids of the same path and the ids differ: then it is a repeat, stored under
///    [`crate::ids::repeat_hash`] (a duplicate if that is stored already) and decided by the rules below;
/// 2. a text already folded into a turn is that turn — duplicate;
/// 3. the same site id (`message_key`) is the same turn — the higher rank's text is kept (upgrade or fold);
///    at equal rank new text is a revision at the stored turn's position;
/// 4. the same words ([`match_text`]) and role as a turn read by another path is the same turn — upgrade or fold;
/// 5. otherwise a new turn, or a new revision at its position ([`Incoming::position_key`]).
pub fn decide<L: Lookup>(inc: &Incoming<'_>, lookup: &mut L) -> Result<Decision, L::Error> {
    let rank = inc.path.rank();
    let mut repeat_hash = None;
    if let Some(s) = lookup.by_hash(inc.content_hash)? {
        // The same text under another id the same source gave is another turn that says the same: a repeat,
        // recognised again under its own hash.
        match (inc.message_key, s.message_key.as_deref()) {
            (Some(k), Some(stored)) if k != stored && inc.path.is_source() && s.rank == rank => {
                let h = crate::ids::repeat_hash(inc.content, inc.role, k);
                if let Some(r) = lookup.by_hash(&h)? {
                    return Ok(Decision::Duplicate {
                        pk: r.pk,
                        promote: false,
                    });
                }
                repeat_hash = Some(h);
            }
            _ => {
                return Ok(Decision::Duplicate {
                    pk: s.pk,
                    promote: rank > s.rank,
                });
            }
        }
    }
    if let Some(pk) = lookup.by_rendering(inc.content_hash)? {
        return Ok(Decision::Fold { pk });
    }
    if let Some(key) = inc.message_key
        && let Some(s) = lookup.by_key(key)?
        && s.role == inc.role
    {
        return Ok(match rank.cmp(&s.rank) {
            // A repeat's text is another turn's: it never replaces a stored rendering.
            std::cmp::Ordering::Greater if repeat_hash.is_none() => Decision::Upgrade { pk: s.pk },
            std::cmp::Ordering::Greater | std::cmp::Ordering::Less => Decision::Fold { pk: s.pk },
            std::cmp::Ordering::Equal => Decision::Insert {
                position_key: s.position_key.or_else(|| inc.position_key()),
                repeat_hash,
            },
        });
    }
    if lookup.has_other_ranks(rank)?
        && let text = match_text(inc.content)
        && !text.is_empty()
        && let Some(s) = lookup.by_match_text(inc.role, &text, rank)?
        && keys_compatible(inc, &s)
    {
        return Ok(if rank > s.rank && repeat_hash.is_none() {
            Decision::Upgrade { pk: s.pk }
        } else {
            Decision::Fold { pk: s.pk }
        });
    }
    Ok(Decision::Insert {
        position_key: inc.position_key(),
        repeat_hash,
    })
}

/// Two keyed turns with different site ids are different turns, unless one side is a DOM turn (whose key may be
/// a fallback attribute, or a positional key written by an older extension).
fn keys_compatible(inc: &Incoming<'_>, s: &Stored) -> bool {
    match (inc.message_key, s.message_key.as_deref()) {
        (Some(a), Some(b)) if a != b => inc.path == Path::Dom || s.rank == Path::Dom.rank(),
        _ => true,
    }
}

/// The words of a text, for recognising two renderings of one turn: the turn's own lines
/// ([`crate::turn_text::own_lines`]: reasoning, tool and tool-output blocks, a final sources list and placeholder
/// lines left out), URLs dropped, then every maximal run of letters and digits, lower-cased,
/// joined by one space. A DOM rendering and the site's Markdown of the same turn differ in markup (`**`, list
/// markers, fences, link syntax) but not in these words; the source form also names what the page shows as a chip,
/// an image or a collapsed block (an attachment, reasoning the page keeps folded, a block type no parser knows),
/// and an export also what the page does not show as text (tool calls and output, the list of sources).
pub fn match_text(content: &str) -> String {
    let mut words: Vec<String> = Vec::new();
    let lines = crate::turn_text::own_lines(content);
    for token in lines.into_iter().flat_map(str::split_whitespace) {
        let url_at = ["http://", "https://"]
            .iter()
            .filter_map(|p| token.find(p))
            .min();
        let token = url_at.map_or(token, |i| &token[..i]);
        let mut word = String::new();
        for c in token.chars() {
            if c.is_alphanumeric() {
                word.extend(c.to_lowercase());
            } else if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
        }
        if !word.is_empty() {
            words.push(word);
        }
    }
    words.join(" ")
}

/// The hash of a turn's words and role — [`match_text`] under [`crate::ids::content_hash`] — or `None` when the
/// text has no words. Two renderings of one turn (the page's, the site's Markdown, an export's) share it, which is
/// how a forgotten turn is recognised in a rendering it was never stored in.
pub fn words_hash(role: Role, content: &str) -> Option<String> {
    let text = match_text(content);
    (!text.is_empty()).then(|| crate::ids::content_hash(&text, role))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
