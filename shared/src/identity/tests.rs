//! The rule against the published test vectors, on an in-memory store that applies each [`Decision`] the way
//! the relay's SQL does (the relay runs the same vectors against SQLite).

use std::convert::Infallible;

use super::*;

/// One stored row of the in-memory model.
#[derive(Debug, Clone)]
struct Row {
    pk: i64,
    role: Role,
    content: String,
    hash: String,
    key: Option<String>,
    parent: Option<String>,
    path: Path,
    position: Option<String>,
    ordinal: Option<u32>,
    at: String,
    revision: u32,
    current: bool,
}

#[derive(Default)]
struct Model {
    rows: Vec<Row>,
    /// (folded content hash, pk)
    renderings: Vec<(String, i64)>,
}

impl Model {
    fn stored(r: &Row) -> Stored {
        Stored {
            pk: r.pk,
            role: r.role,
            message_key: r.key.clone(),
            rank: r.path.rank(),
            position_key: r.position.clone(),
        }
    }

    /// The relay's `renumber_revisions`: the newest revision of a position is current unless the position hangs
    /// under a turn off the shown branch; turns whose state changes take the turns under them along.
    fn renumber(&mut self, position: &Option<String>) {
        let Some(p) = position else { return };
        let shown = match p.strip_prefix("b:") {
            Some(parent) => self.key_shown(parent),
            None => true,
        };
        let mut todo = self.settle(p, shown);
        while let Some((key, shown)) = todo.pop() {
            let more = self.settle(&format!("b:{key}"), shown);
            todo.extend(more);
        }
    }

    fn key_shown(&self, key: &str) -> bool {
        let mut rows = self
            .rows
            .iter()
            .filter(|r| r.key.as_deref() == Some(key))
            .peekable();
        rows.peek().is_none() || rows.any(|r| r.current)
    }

    fn settle(&mut self, p: &str, shown: bool) -> Vec<(String, bool)> {
        let mut at: Vec<(String, bool, String, i64)> = self
            .rows
            .iter()
            .filter(|r| r.position.as_deref() == Some(p))
            .map(|r| (r.at.clone(), r.ordinal.is_some(), r.hash.clone(), r.pk))
            .collect();
        at.sort();
        let n = at.len();
        let mut changed = Vec::new();
        for (i, (_, _, _, pk)) in at.into_iter().enumerate() {
            let r = self.rows.iter_mut().find(|r| r.pk == pk).unwrap();
            if n > 1 {
                r.revision = i as u32 + 1;
            }
            let current = shown && i + 1 == n;
            if r.current != current
                && let Some(k) = &r.key
            {
                changed.push((k.clone(), current));
            }
            r.current = current;
        }
        changed
    }
}

impl Lookup for Model {
    type Error = Infallible;
    fn by_hash(&mut self, hash: &str) -> Result<Option<Stored>, Infallible> {
        Ok(self.rows.iter().find(|r| r.hash == hash).map(Self::stored))
    }
    fn by_rendering(&mut self, hash: &str) -> Result<Option<i64>, Infallible> {
        Ok(self
            .renderings
            .iter()
            .find(|(h, _)| h == hash)
            .map(|(_, pk)| *pk))
    }
    fn by_key(&mut self, key: &str) -> Result<Option<Stored>, Infallible> {
        let mut hits: Vec<&Row> = self
            .rows
            .iter()
            .filter(|r| r.key.as_deref() == Some(key))
            .collect();
        hits.sort_by_key(|r| (r.current, r.revision));
        Ok(hits.last().map(|r| Self::stored(r)))
    }
    fn by_match_text(
        &mut self,
        role: Role,
        text: &str,
        rank: u8,
    ) -> Result<Option<Stored>, Infallible> {
        Ok(self
            .rows
            .iter()
            .find(|r| {
                r.current
                    && r.role == role
                    && r.path.rank() != rank
                    && match_text(&r.content) == text
            })
            .map(Self::stored))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Submit {
    path: Path,
    role: Role,
    content: String,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    parent: Option<String>,
    #[serde(default)]
    ordinal: Option<u32>,
    #[serde(default)]
    ordinal_source: Option<OrdinalSource>,
    at: String,
    expect: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(deny_unknown_fields)]
struct Expect {
    role: Role,
    content: String,
    path: Path,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    parent: Option<String>,
    revision: u32,
    current: bool,
}

impl PartialOrd for Role {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Role {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}
impl PartialOrd for Path {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Path {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

#[derive(Debug, Deserialize)]
struct Case {
    name: String,
    #[allow(dead_code)]
    explain: String,
    submit: Vec<Submit>,
    turns: Vec<Expect>,
}

#[derive(Debug, Deserialize)]
struct Vectors {
    #[allow(dead_code)]
    about: String,
    cases: Vec<Case>,
}

fn run(case: &Case) -> Vec<Expect> {
    let mut m = Model::default();
    for (i, s) in case.submit.iter().enumerate() {
        let hash = crate::ids::content_hash(&s.content, s.role);
        let inc = Incoming {
            role: s.role,
            content: &s.content,
            content_hash: &hash,
            message_key: s.key.as_deref(),
            parent_key: s.parent.as_deref(),
            ordinal: s.ordinal,
            ordinal_source: s.ordinal_source.unwrap_or_default(),
            path: s.path,
        };
        let d = decide(&inc, &mut m).unwrap();
        let status = match &d {
            Decision::Duplicate { .. } | Decision::Fold { .. } => "duplicate",
            Decision::Upgrade { .. } | Decision::Insert { .. } => "stored",
        };
        assert_eq!(
            status, s.expect,
            "{}: submission {i} decided {d:?}",
            case.name
        );
        match d {
            Decision::Insert {
                position_key,
                repeat_hash,
            } => {
                let pk = m.rows.len() as i64 + 1;
                m.rows.push(Row {
                    pk,
                    role: s.role,
                    content: s.content.clone(),
                    hash: repeat_hash.clone().unwrap_or(hash),
                    key: s.key.clone(),
                    parent: s.parent.clone(),
                    path: s.path,
                    position: position_key.clone(),
                    ordinal: s.ordinal,
                    at: s.at.clone(),
                    revision: 1,
                    current: true,
                });
                m.renumber(&position_key);
            }
            Decision::Fold { pk } => m.renderings.push((hash, pk)),
            Decision::Duplicate { promote: false, .. } => {}
            Decision::Duplicate { pk, promote: true } | Decision::Upgrade { pk } => {
                let upgrade = matches!(d, Decision::Upgrade { .. });
                let pos = inc.position_key();
                let r = m.rows.iter_mut().find(|r| r.pk == pk).unwrap();
                let old_pos = r.position.clone();
                if upgrade {
                    m.renderings.push((r.hash.clone(), pk));
                    r.content = s.content.clone();
                    r.hash = hash;
                }
                r.key = s.key.clone().or(r.key.take());
                r.parent = s.parent.clone().or(r.parent.take());
                r.path = s.path;
                r.ordinal = s.ordinal.or(r.ordinal);
                r.position = pos.clone().or(old_pos.clone());
                m.renumber(&old_pos);
                m.renumber(&pos);
            }
        }
    }
    let mut out: Vec<Expect> = m
        .rows
        .into_iter()
        .map(|r| Expect {
            role: r.role,
            content: r.content,
            path: r.path,
            key: r.key,
            parent: r.parent,
            revision: r.revision,
            current: r.current,
        })
        .collect();
    out.sort();
    out
}

#[test]
fn the_rule_yields_the_published_vectors() {
    let v: Vectors =
        serde_json::from_str(include_str!("../../tests/vectors/turn_identity.json")).unwrap();
    assert!(v.cases.len() >= 10);
    for case in &v.cases {
        let mut want = case.turns.clone();
        want.sort();
        assert_eq!(run(case), want, "case {}", case.name);
    }
}

#[test]
fn match_text_ignores_markup_and_urls() {
    assert_eq!(
        match_text("The **capital** is `Canberra`."),
        "the capital is canberra"
    );
    assert_eq!(
        match_text("See [docs](https://example.com/a_b) and https://x.y/z."),
        "see docs and"
    );
    assert_eq!(match_text("- one\n* two\n1. three"), "one two 1 three");
    assert_eq!(match_text("Ünïcode ÄB"), "ünïcode äb");
    assert_eq!(match_text("**"), "");
}

#[test]
fn match_text_ignores_what_the_page_shows_as_other_than_text() {
    let dom = "Roter Staub am Stahl\nZeit frisst leise das Metall";
    for source in [
        "[reasoning]\nFive-seven-five.\n[/reasoning]\n\nRoter Staub am **Stahl**\nZeit frisst leise das Metall",
        "Roter Staub am Stahl\nZeit frisst leise das Metall\n\n[unsupported: block:hologram]",
        "[image]\nRoter Staub am Stahl\n[file: notes.txt]\nZeit frisst leise das Metall",
        "[image: a rusty bolt]\n\nRoter Staub am Stahl\nZeit frisst leise das Metall\n[audio/video]",
    ] {
        assert_eq!(match_text(source), match_text(dom), "{source:?}");
    }
    // Brackets inside a line, or a line that merely starts like a marker, are words.
    assert_ne!(
        match_text("[file: notes.txt] is attached"),
        match_text("is attached")
    );
    assert_ne!(match_text("[draft]\nHello"), match_text("Hello"));
    assert_eq!(match_text("[image]"), "");
}

#[test]
fn positions_of_dom_and_source_turns_never_share_a_namespace() {
    let inc = |path, key, parent, ordinal, src| Incoming {
        role: Role::User,
        content: "x",
        content_hash: "h",
        message_key: key,
        parent_key: parent,
        ordinal,
        ordinal_source: src,
        path,
    };
    use OrdinalSource::*;
    assert_eq!(
        inc(Path::Dom, Some("m"), None, Some(3), Site)
            .position_key()
            .as_deref(),
        Some("o:3")
    );
    assert_eq!(
        inc(Path::Dom, Some("m"), None, Some(3), Counted)
            .position_key()
            .as_deref(),
        Some("k:m")
    );
    assert_eq!(
        inc(Path::Dom, None, None, Some(3), Counted)
            .position_key()
            .as_deref(),
        Some("o:3")
    );
    assert_eq!(
        inc(Path::Dom, None, None, None, Counted).position_key(),
        None
    );
    assert_eq!(
        inc(Path::Network, Some("m"), Some("p"), Some(3), Site)
            .position_key()
            .as_deref(),
        Some("b:p")
    );
    assert_eq!(
        inc(Path::Export, Some("m"), None, Some(3), Site)
            .position_key()
            .as_deref(),
        Some("k:m")
    );
    assert_eq!(
        inc(Path::Harvest, None, None, Some(3), Site)
            .position_key()
            .as_deref(),
        Some("s:3")
    );
}

#[test]
fn max_rank_bounds_every_path() {
    let all = [Path::Dom, Path::Network, Path::Export, Path::Harvest];
    assert!(all.iter().all(|p| p.rank() <= Path::MAX_RANK));
    assert!(all.iter().any(|p| p.rank() == Path::MAX_RANK));
}
