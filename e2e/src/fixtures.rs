//! Data-driven fixture cases: `e2e/fixtures/<surface>/<case>/{page.html, expected.json}`.
//!
//! `expected.json` states the surface, the URL path the page is served at, the conversations the page shows and
//! the turns (role + text after the extension's normalisation and redaction) that must land in the corpus, plus
//! strings that must never land (streaming partials, site chrome, raw secrets). [`diff`] compares what the relay
//! stored against it and returns every difference, so one run reports all failures of a case.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::relay::StoredMessage;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedTurn {
    pub role: String,
    pub text: String,
    /// Compare byte for byte instead of with whitespace runs collapsed.
    #[serde(default)]
    pub exact: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conversation {
    /// The site's conversation id (the thread id is derived from it with `personkit_shared::thread_id`).
    pub id: String,
    /// The turns that must be current, in order, each stored exactly once.
    pub turns: Vec<ExpectedTurn>,
    /// Earlier versions of edited/regenerated turns: may be stored (at most once, never as current).
    #[serde(default)]
    pub superseded: Vec<ExpectedTurn>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expected {
    pub surface: String,
    /// Host the page is loaded from (one of [`crate::SITE_HOSTS`]).
    pub host: String,
    /// Path the page is served at (and loaded from).
    pub path: String,
    /// Further paths the page reaches by `history.pushState` (served too, in case of a reload).
    #[serde(default)]
    pub extra_paths: Vec<String>,
    pub description: String,
    pub conversations: Vec<Conversation>,
    /// Substrings that no stored message of this case may contain.
    #[serde(default)]
    pub must_not_contain: Vec<String>,
    /// Longest time the page's own script runs before it sets `data-fixture-done` (ms).
    #[serde(default = "default_script_ms")]
    pub script_ms: u64,
    /// The extension is known to get this case wrong: the test fails if it starts passing.
    #[serde(default)]
    pub known_failure: bool,
    #[serde(default)]
    pub known_failure_reason: Option<String>,
}

fn default_script_ms() -> u64 {
    2_000
}

/// One fixture directory.
#[derive(Debug, Clone)]
pub struct Case {
    /// `<surface>/<case>`, e.g. `chatgpt/short`.
    pub name: String,
    pub dir: PathBuf,
    pub expected: Expected,
}

impl Case {
    pub fn page(&self) -> PathBuf {
        self.dir.join("page.html")
    }

    /// The site URL of the page.
    pub fn url(&self) -> String {
        format!("https://{}{}", self.expected.host, self.expected.path)
    }

    /// Thread ids of the case's conversations.
    pub fn thread_ids(&self) -> Vec<String> {
        self.expected
            .conversations
            .iter()
            .flat_map(|c| conversation_ids(&c.id))
            .map(|id| personkit_shared::thread_id(&self.expected.surface, &id).to_string())
            .collect()
    }
}

/// The ids a conversation may be stored under: its own, and for a day's conversation (`day-YYYY-MM-DD`, filled in
/// from `{today}` when the fixtures were read) the next day's too, since a run that crosses midnight UTC captures
/// under the new day.
fn conversation_ids(id: &str) -> Vec<String> {
    let next = id
        .strip_prefix("day-")
        .and_then(|d| personkit_shared::time::parse_rfc3339(&format!("{d}T00:00:00Z")))
        .map(|ms| format!("day-{}", personkit_shared::time::day(ms + 86_400_000)));
    std::iter::once(id.to_owned()).chain(next).collect()
}

/// Every case of one surface directory (`chatgpt`, ...), sorted by name.
pub fn cases(surface_dir: &str) -> Result<Vec<Case>> {
    let root = crate::fixtures_dir().join(surface_dir);
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&root).with_context(|| format!("reading {}", root.display()))? {
        let dir = entry?.path();
        if !dir.join("expected.json").exists() {
            continue;
        }
        out.push(load(&dir, surface_dir)?);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn load(dir: &Path, surface_dir: &str) -> Result<Case> {
    let path = dir.join("expected.json");
    // `{today}`: the UTC date, for surfaces whose conversation is the day (Pi's single running thread).
    let today = personkit_shared::time::day(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
    );
    let text = std::fs::read_to_string(&path)?.replace("{today}", &today);
    let expected: Expected =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let name = format!(
        "{surface_dir}/{}",
        dir.file_name().and_then(|n| n.to_str()).unwrap_or_default()
    );
    Ok(Case {
        name,
        dir: dir.to_path_buf(),
        expected,
    })
}

/// Whitespace runs collapsed to one space, trimmed: layout whitespace is the extension's business.
pub fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn same(expected: &ExpectedTurn, role: &str, content: &str) -> bool {
    expected.role == role
        && if expected.exact {
            expected.text == content
        } else {
            squash(&expected.text) == squash(content)
        }
}

/// A message for a problem line: squashed and cut, or whole and escaped with `E2E_VERBOSE=1` (to see layout).
fn short(s: &str) -> String {
    if std::env::var_os("E2E_VERBOSE").is_some() {
        return format!("{s:?}");
    }
    let s = squash(s);
    if s.chars().count() > 160 {
        format!("{}…", s.chars().take(160).collect::<String>())
    } else {
        s
    }
}

/// Compares the stored messages of this case's threads with `expected.json`; returns every problem found.
/// `surface_messages` are all messages the relay holds for the surface.
pub fn diff(case: &Case, surface_messages: &[StoredMessage]) -> Vec<String> {
    let mut problems = Vec::new();
    let e = &case.expected;
    for conv in &e.conversations {
        let tids: Vec<String> = conversation_ids(&conv.id)
            .iter()
            .map(|id| personkit_shared::thread_id(&e.surface, id).to_string())
            .collect();
        let stored: Vec<&StoredMessage> = surface_messages
            .iter()
            .filter(|m| tids.contains(&m.thread_id))
            .collect();
        let mut used = vec![false; stored.len()];
        for (i, t) in conv.turns.iter().enumerate() {
            let hits: Vec<usize> = (0..stored.len())
                .filter(|&k| same(t, &stored[k].role, &stored[k].content))
                .collect();
            match hits.as_slice() {
                [] => problems.push(format!(
                    "conversation {}: expected turn {i} ({}) never landed: {:?}",
                    conv.id,
                    t.role,
                    short(&t.text)
                )),
                [k] => {
                    used[*k] = true;
                    if !stored[*k].is_current {
                        problems.push(format!(
                            "conversation {}: turn {i} landed but is not current",
                            conv.id
                        ));
                    }
                }
                many => {
                    for &k in many {
                        used[k] = true;
                    }
                    problems.push(format!(
                        "conversation {}: turn {i} ({}) landed {} times (must be exactly once)",
                        conv.id,
                        t.role,
                        many.len()
                    ));
                }
            }
        }
        for s in &conv.superseded {
            let hits: Vec<usize> = (0..stored.len())
                .filter(|&k| same(s, &stored[k].role, &stored[k].content))
                .collect();
            for &k in &hits {
                used[k] = true;
                if stored[k].is_current {
                    problems.push(format!(
                        "conversation {}: superseded version {:?} is still marked current",
                        conv.id,
                        short(&s.text)
                    ));
                }
            }
            if hits.len() > 1 {
                problems.push(format!(
                    "conversation {}: superseded version stored {} times",
                    conv.id,
                    hits.len()
                ));
            }
        }
        for (k, m) in stored.iter().enumerate() {
            if !used[k] {
                problems.push(format!(
                    "conversation {}: unexpected stored {} message (current={}): {:?}",
                    conv.id,
                    m.role,
                    m.is_current,
                    short(&m.content)
                ));
            }
        }
        // Order: when the relay knows ordinals, current turns must come in the expected order.
        let mut current: Vec<&StoredMessage> =
            stored.iter().copied().filter(|m| m.is_current).collect();
        if current.iter().all(|m| m.ordinal.is_some()) && current.len() == conv.turns.len() {
            current.sort_by_key(|m| m.ordinal);
            let in_order = current
                .iter()
                .zip(&conv.turns)
                .all(|(m, t)| same(t, &m.role, &m.content));
            if !in_order {
                problems.push(format!(
                    "conversation {}: current turns are stored in a different order (by ordinal): {:?}",
                    conv.id,
                    current.iter().map(|m| format!("{}:{}", m.role, short(&m.content))).collect::<Vec<_>>()
                ));
            }
        }
    }
    let threads = case.thread_ids();
    for m in surface_messages
        .iter()
        .filter(|m| threads.contains(&m.thread_id))
    {
        for bad in &e.must_not_contain {
            if m.content.contains(bad.as_str()) {
                problems.push(format!(
                    "a stored {} message contains forbidden text {bad:?}",
                    m.role
                ));
            }
        }
    }
    problems
}

/// Messages of the surface that belong to none of `known_threads` (e.g. captured under a wrong conversation id).
pub fn strays<'a>(
    surface_messages: &'a [StoredMessage],
    known_threads: &[String],
) -> Vec<&'a StoredMessage> {
    surface_messages
        .iter()
        .filter(|m| !known_threads.contains(&m.thread_id))
        .collect()
}

/// Count of stored messages per thread, for summaries.
pub fn per_thread(surface_messages: &[StoredMessage]) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for s in surface_messages {
        *m.entry(s.thread_id.clone()).or_insert(0) += 1;
    }
    m
}
