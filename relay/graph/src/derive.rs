//! What a thread, a turn's text or an event certainly says, as proposals of entities and relations — plain values
//! from plain values, no storage. [`run`](crate::run) resolves them to entities and stores them with their source.
//!
//! Without a model, only what is stated is read: a harvested session's project, the surface's product and its
//! maker, model ids written in a turn (`gpt-4o`, `claude-sonnet-4-5`), the hosts of URLs in a turn, and an event's
//! named attributes. A model's extractions would arrive as the same [`Proposals`] with their own confidence.

use serde_json::Value;

use crate::surfaces;
use crate::{Kind, Predicate, display_name, key};

/// The most URLs read from one text, and the most distinct hosts and model ids kept from it.
const MAX_URLS_READ: usize = 200;
const MAX_HOSTS: usize = 20;
const MAX_MODELS: usize = 10;

/// How sure a name found inside free text is (a structured fact is 1).
pub const IN_TEXT: f64 = 0.9;

/// One entity a source supports.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub kind: Kind,
    pub name: String,
    pub confidence: f64,
}

/// A relation between two of [`Proposals::entities`] (by index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub subject: usize,
    pub predicate: Predicate,
    pub object: usize,
}

/// What one source supports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Proposals {
    pub entities: Vec<Found>,
    pub relations: Vec<Link>,
}

impl Proposals {
    /// Adds an entity (once per kind and key); `None` for a name with an empty key.
    pub fn add(&mut self, kind: Kind, name: &str, confidence: f64) -> Option<usize> {
        let name = display_name(name);
        let k = key(kind, &name);
        if k.is_empty() {
            return None;
        }
        if let Some(i) = self
            .entities
            .iter()
            .position(|f| f.kind == kind && key(kind, &f.name) == k)
        {
            return Some(i);
        }
        self.entities.push(Found {
            kind,
            name,
            confidence,
        });
        Some(self.entities.len() - 1)
    }

    /// Adds a relation between two added entities (either missing: nothing).
    pub fn relate(&mut self, subject: Option<usize>, predicate: Predicate, object: Option<usize>) {
        if let (Some(subject), Some(object)) = (subject, object)
            && subject != object
        {
            let l = Link {
                subject,
                predicate,
                object,
            };
            if !self.relations.contains(&l) {
                self.relations.push(l);
            }
        }
    }

    /// Names of the entities, as `kind:name`, for tests and logs of counts.
    pub fn labels(&self) -> Vec<String> {
        self.entities
            .iter()
            .map(|f| format!("{}:{}", f.kind.as_str(), f.name))
            .collect()
    }

    /// Relations as `subject predicate object` names.
    pub fn triples(&self) -> Vec<String> {
        self.relations
            .iter()
            .map(|l| {
                format!(
                    "{} {} {}",
                    self.entities[l.subject].name,
                    l.predicate.as_str(),
                    self.entities[l.object].name
                )
            })
            .collect()
    }
}

/// What is known of a thread besides its turns.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadFacts<'a> {
    pub surface: &'a str,
    /// A harvested session's project (its transcript folder's name).
    pub project: Option<&'a str>,
    /// The repository the session worked in, when known.
    pub repository: Option<&'a str>,
}

/// The product (tool) of a surface and its maker.
fn tool(p: &mut Proposals, surface: &str) -> Option<usize> {
    let product = surfaces::product(surface)?;
    let t = p.add(Kind::Tool, &product.name, 1.0);
    if let Some(maker) = product.maker {
        let o = p.add(Kind::Organisation, maker, 1.0);
        p.relate(t, Predicate::MadeBy, o);
    }
    t
}

/// A thread's own facts: its tool and maker; for a harvested session its project, which uses the tool, and the
/// repository, part of the project.
pub fn from_thread(f: &ThreadFacts<'_>) -> Proposals {
    let mut p = Proposals::default();
    let t = tool(&mut p, f.surface);
    if let Some(project) = f.project {
        let pr = p.add(Kind::Project, project, 1.0);
        p.relate(pr, Predicate::Uses, t);
        if let Some(repo) = f.repository {
            let r = p.add(Kind::Repository, &repo_name(repo), 1.0);
            p.relate(r, Predicate::PartOf, pr);
        }
    }
    p
}

/// A turn's text: the sites its URLs point at and the model ids it names (each model with its maker); with the
/// thread's project, the project mentions them.
pub fn from_text(text: &str, project: Option<&str>) -> Proposals {
    let mut p = Proposals::default();
    let hosts = hosts(text);
    let models = models(text);
    if hosts.is_empty() && models.is_empty() {
        return p;
    }
    let pr = project.and_then(|n| p.add(Kind::Project, n, 1.0));
    for h in &hosts {
        let s = p.add(Kind::Site, h, IN_TEXT);
        p.relate(pr, Predicate::Mentions, s);
    }
    for m in &models {
        let e = p.add(Kind::Model, m, IN_TEXT);
        if let Some(maker) = surfaces::model_maker(m) {
            let o = p.add(Kind::Organisation, maker, 1.0);
            p.relate(e, Predicate::MadeBy, o);
        }
        p.relate(pr, Predicate::Mentions, e);
    }
    p
}

fn attr<'a>(attrs: &'a Value, name: &str) -> Option<&'a str> {
    attrs
        .get(name)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// A repository's name from what a harvester wrote: a path's last part, else as written (`owner/name`).
fn repo_name(repo: &str) -> String {
    let r = repo.trim().trim_end_matches(['/', '\\']);
    if r.starts_with('/') || r.starts_with('~') || r.contains('\\') || r.contains(":\\") {
        r.rsplit(['/', '\\'])
            .find(|s| !s.is_empty())
            .unwrap_or(r)
            .to_owned()
    } else {
        r.trim_end_matches(".git").to_owned()
    }
}

/// An event's named attributes, by its kind: a commit's repository and author (the repository is made by its
/// authors), a session's tool and project, a plan's project, a reading's site. Other kinds say nothing yet.
pub fn from_event(kind: &str, attrs: &Value) -> Proposals {
    let mut p = Proposals::default();
    match kind {
        "git.commit" => {
            let r = attr(attrs, "repo").and_then(|r| p.add(Kind::Repository, &repo_name(r), 1.0));
            let a = attr(attrs, "author").and_then(|a| p.add(Kind::Person, a, 1.0));
            p.relate(r, Predicate::MadeBy, a);
        }
        "session.started" | "session.ended" | "thread.started" => {
            let t = attr(attrs, "surface").and_then(|s| tool(&mut p, s));
            let pr = attr(attrs, "project").and_then(|n| p.add(Kind::Project, n, 1.0));
            p.relate(pr, Predicate::Uses, t);
        }
        "plan.updated" => {
            attr(attrs, "project").and_then(|n| p.add(Kind::Project, n, 1.0));
        }
        "reading.added" => {
            if let Some(h) = attr(attrs, "url").and_then(host_of) {
                p.add(Kind::Site, &h, 1.0);
            }
        }
        _ => {}
    }
    p
}

/// The host of an `http(s)://` URL, lower case, without `www.`; `None` for an address that is no site (an IP
/// address, `localhost`, a name without a dot).
pub fn host_of(url: &str) -> Option<String> {
    let lower = url.trim().to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))?;
    let end = rest
        .find(|c: char| {
            matches!(
                c,
                '/' | '?' | '#' | '"' | '\'' | '<' | '>' | ')' | ']' | '}' | '`'
            ) || c.is_whitespace()
        })
        .unwrap_or(rest.len());
    let authority = &rest[..end];
    let hostport = authority.rsplit('@').next().unwrap_or(authority);
    let host = hostport.split(':').next().unwrap_or(hostport);
    let host = host.trim_end_matches('.');
    let host = host.strip_prefix("www.").unwrap_or(host);
    if host.len() > 253 || !host.contains('.') {
        return None;
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    {
        return None;
    }
    let labels: Vec<&str> = host.split('.').collect();
    if labels.iter().any(|l| l.is_empty() || l.len() > 63) {
        return None;
    }
    let tld = labels.last()?;
    if tld.len() < 2 || !tld.chars().all(|c| c.is_ascii_alphabetic()) {
        return None;
    }
    Some(host.to_owned())
}

/// The distinct hosts of the URLs in `text`, in order of first appearance, at most 20.
pub fn hosts(text: &str) -> Vec<String> {
    let lower = text.to_ascii_lowercase();
    let mut out: Vec<String> = Vec::new();
    let mut from = 0;
    for _ in 0..MAX_URLS_READ {
        let Some(at) = lower[from..].find("http").map(|i| from + i) else {
            break;
        };
        from = at + 4;
        if let Some(h) = host_of(&lower[at..])
            && !out.contains(&h)
        {
            out.push(h);
            if out.len() == MAX_HOSTS {
                break;
            }
        }
    }
    out
}

/// Words after a model family's prefix that make a model id without a digit (`claude-opus`, `deepseek-chat`).
const MODEL_WORDS: &[&str] = &[
    "opus", "sonnet", "haiku", "large", "medium", "small", "mini", "pro", "flash", "nemo", "coder",
    "chat", "reasoner", "instant",
];

/// The distinct model ids written in `text` (`gpt-4o`, `claude-3-5-sonnet`, `gemini-2.5-pro`, `llama-3.1-8b`),
/// lower case, at most 10. A family's prefix must be followed by a version or a size word, so product names such
/// as `gemini-cli` or `claude-code` are not models.
pub fn models(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for raw in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.')) {
        if raw.len() < 4 || raw.len() > 40 {
            continue;
        }
        let token = raw
            .trim_matches(|c| c == '.' || c == '-')
            .to_ascii_lowercase();
        let Some(rest) = surfaces::model_prefix_rest(&token) else {
            continue;
        };
        let ok = rest
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
            && (rest.chars().next().is_some_and(|c| c.is_ascii_digit())
                || MODEL_WORDS.iter().any(|w| rest.starts_with(w)));
        if ok && !out.contains(&token) {
            out.push(token);
            if out.len() == MAX_MODELS {
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_harvested_session_is_about_its_project_and_uses_its_tool() {
        let p = from_thread(&ThreadFacts {
            surface: "harvest:claude-code",
            project: Some("personkit"),
            repository: Some("/home/ada/src/personkit/"),
        });
        assert_eq!(
            p.labels(),
            [
                "tool:Claude Code",
                "organisation:Anthropic",
                "project:personkit",
                "repository:personkit"
            ]
        );
        assert_eq!(
            p.triples(),
            [
                "Claude Code made_by Anthropic",
                "personkit uses Claude Code",
                "personkit part_of personkit"
            ]
        );
        let web = from_thread(&ThreadFacts {
            surface: "browser-ext:chatgpt",
            ..ThreadFacts::default()
        });
        assert_eq!(web.triples(), ["ChatGPT made_by OpenAI"]);
    }

    #[test]
    fn sites_and_models_are_read_from_text() {
        let text = "See https://www.Docs.rs/serde and http://docs.rs/x, (https://github.com/a/b). \
                    Not http://localhost:8080 nor https://127.0.0.1/ nor https://intranet/. \
                    I used gpt-4o and claude-3-5-sonnet, not claude-code or gemini-cli; also deepseek-chat.";
        assert_eq!(hosts(text), ["docs.rs", "github.com"]);
        assert_eq!(
            models(text),
            ["gpt-4o", "claude-3-5-sonnet", "deepseek-chat"]
        );
        let p = from_text(text, Some("atlas"));
        assert!(p.triples().contains(&"atlas mentions docs.rs".to_owned()));
        assert!(p.triples().contains(&"gpt-4o made_by OpenAI".to_owned()));
        assert!(
            p.triples()
                .contains(&"atlas mentions claude-3-5-sonnet".to_owned())
        );
        assert_eq!(
            p.entities
                .iter()
                .find(|f| f.name == "docs.rs")
                .map(|f| f.confidence),
            Some(IN_TEXT)
        );
        assert!(from_text("nothing here", Some("atlas")).entities.is_empty());
        assert_eq!(
            host_of("https://user:pw@Sub.Example.co.uk:443/p"),
            Some("sub.example.co.uk".into())
        );
    }

    #[test]
    fn reading_a_long_text_is_bounded() {
        let many: String = (0..500)
            .map(|i| format!("https://s{i}.example.com "))
            .collect();
        assert_eq!(hosts(&many).len(), MAX_HOSTS);
        let models_text: String = (0..50).map(|i| format!("gpt-{i} ")).collect();
        assert_eq!(models(&models_text).len(), MAX_MODELS);
    }

    #[test]
    fn events_name_what_they_are_about() {
        let c = from_event(
            "git.commit",
            &json!({"repo": "personkit", "repo_path": "/home/ada/src/personkit", "branch": "main",
                    "sha": "abc", "author": "Ada Lovelace", "files": 3, "insertions": 10, "deletions": 2}),
        );
        assert_eq!(c.labels(), ["repository:personkit", "person:Ada Lovelace"]);
        assert_eq!(c.triples(), ["personkit made_by Ada Lovelace"]);
        let s = from_event(
            "session.started",
            &json!({"thread_id": "t1", "surface": "harvest:codex", "project": "atlas"}),
        );
        assert_eq!(
            s.triples(),
            ["Codex CLI made_by OpenAI", "atlas uses Codex CLI"]
        );
        let r = from_event(
            "reading.added",
            &json!({"url": "https://www.example.org/a", "title": "A"}),
        );
        assert_eq!(r.labels(), ["site:example.org"]);
        assert_eq!(
            from_event("plan.updated", &json!({"project": "atlas"})).labels(),
            ["project:atlas"]
        );
        assert!(
            from_event("git.commit", &json!({"repo": 5}))
                .entities
                .is_empty()
        );
        assert!(
            from_event("screenshot.added", &json!({}))
                .entities
                .is_empty()
        );
        assert_eq!(
            repo_name("git@github.com:ada/atlas.git"),
            "git@github.com:ada/atlas"
        );
        assert_eq!(repo_name("ada/atlas"), "ada/atlas");
    }
}
