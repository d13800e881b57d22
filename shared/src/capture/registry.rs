//! The surface registry: one JSON file per chat surface (`shared/surfaces/<name>.json`) plus the rendering rules
//! they share (`shared/surfaces/_render.json`), assembled into one document by `shared/build.rs`. Native builds
//! (the relay, tests) embed that document; the extension's wasm module does not: `scripts/build-extension` ships
//! it beside the module as `registry.json` and the worker installs it at start ([`Registry::install`]), so site
//! rules cost the module no bytes. Adding a surface or fixing a redesigned site is a data change.
//!
//! **API boundary:** the JSON shape below is read by the extension's content script (selectors, rules, page layout:
//! preformatted selectors and block elements) and by this module (hosts, conversation patterns, strip lines,
//! ordinal pattern). The content script holds no site names or selectors of its own.

use std::sync::OnceLock;

use regex_lite::Regex;
use serde::{Deserialize, Serialize};

use crate::wire::Role;

/// The registry document as `shared/build.rs` assembled it (embedded in native builds only).
#[cfg(not(target_arch = "wasm32"))]
pub const REGISTRY_JSON: &str = include_str!(concat!(env!("OUT_DIR"), "/registry.json"));

static REGISTRY: OnceLock<Registry> = OnceLock::new();

/// Where the surface files live, for checks that read them as written (with their `provenance`).
#[cfg(test)]
pub(crate) const SURFACES_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/surfaces");

/// Whether a surface is on the main list or behind the popup's "Experimental surfaces" flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Verified,
    Experimental,
}

/// What to use as conversation id when no pattern matches the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ConversationFallback {
    /// Capture nothing until the URL names a conversation (e.g. a new chat before its first reply).
    #[default]
    None,
    /// One thread per calendar day (UTC), for single-thread surfaces such as Pi.
    Day,
    /// The whole path, for surfaces whose URL has no id but is stable per conversation.
    Path,
}

/// Where a role rule's selector is tested, relative to a message root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleScope {
    #[serde(rename = "self")]
    SelfOnly,
    Descendant,
    SelfOrDescendant,
    Ancestor,
}

/// The first rule whose selector matches decides a turn's role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleRule {
    #[serde(rename = "match")]
    pub selector: String,
    pub on: RuleScope,
    pub role: Role,
}

/// Ranked selectors of the element holding a turn's text, per role; an empty list means the root itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TextSelectors {
    #[serde(default)]
    pub user: Vec<String>,
    #[serde(default)]
    pub assistant: Vec<String>,
}

/// Where a turn's stable key is read: an attribute of the root (`:scope`), of a descendant, or of an ancestor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closest: Option<String>,
    pub attribute: String,
    /// Append `:<role>` (when one element holds both turns of an exchange).
    #[serde(default)]
    pub append_role: bool,
}

/// Where the raw text of a turn's ordinal comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OrdinalSource {
    /// An attribute the site puts on the turn (`selector`, `attribute`), e.g. `conversation-turn-3`.
    #[default]
    Attribute,
    /// The turn's index among the message roots, as decimal text, counted by the content script from the first
    /// turn and carried across DOM changes by roots it numbered before (anchors), so a virtualised window keeps
    /// true positions. For sites whose turns have no stable key: an edit at a position becomes a revision.
    Position,
}

/// How a turn's ordinal is read: a raw text (an attribute value, or the position for `source: position`), a
/// regex whose first group is a number, and an offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrdinalRule {
    #[serde(default, skip_serializing_if = "is_attribute")]
    pub source: OrdinalSource,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub selector: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub attribute: String,
    pub pattern: String,
    #[serde(default)]
    pub offset: i64,
}

/// The full description of one chat surface, as written in the registry. The content script reads the selector
/// fields; the core reads hosts, conversation patterns, strip lines and the ordinal rule (see [`Surface`]). The
/// wasm build parses only the core's part (less code to ship); the test suite checks every entry against this
/// full, strict shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SurfaceSpec {
    pub id: String,
    pub name: String,
    pub status: Status,
    /// `example.com` (exactly that host) or `*.example.com` (any subdomain, and the host itself), optionally
    /// followed by a path the surface lives under on that host only (`x.com/i/grok`: that path and below).
    pub hosts: Vec<String>,
    /// Path prefixes the surface lives under on its hosts (e.g. `/chat/` on a host that serves other things);
    /// empty: the whole host.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Regexes on the URL path; the first capture group of the first match is the conversation id.
    pub conversation_patterns: Vec<String>,
    /// A query parameter holding the conversation id, for sites that keep it there (tried after the patterns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_query: Option<String>,
    #[serde(default)]
    pub conversation_fallback: ConversationFallback,
    /// Ranked CSS selectors of message roots: the first one that finds any element wins.
    pub message_roots: Vec<String>,
    /// Lists the site renders bottom-up (`flex-direction: column-reverse`), whose DOM order is newest first: the
    /// roots inside are read row by row from the list's end, each row's roots in their own order.
    #[serde(default)]
    pub newest_first: Vec<String>,
    pub role_rules: Vec<RoleRule>,
    #[serde(default)]
    pub text_selectors: TextSelectors,
    /// CSS selectors of nodes inside a turn that are not message content.
    #[serde(default)]
    pub strip_selectors: Vec<String>,
    /// Regexes of whole lines that are site chrome (screen-reader labels, "Copy code"), removed by the core.
    #[serde(default)]
    pub strip_lines: Vec<String>,
    /// CSS selectors whose presence means a reply is still streaming.
    #[serde(default)]
    pub streaming_markers: Vec<String>,
    /// CSS selectors of elements whose text keeps its line breaks and spaces (as `white-space: pre*` does), for
    /// sites that style them by class.
    #[serde(default)]
    pub preformatted_selectors: Vec<String>,
    /// Tag names of the site's own (custom) elements that lay out as blocks: text inside each starts on a new line,
    /// like HTML's `div`.
    #[serde(default)]
    pub block_elements: Vec<String>,
    /// CSS selectors of code blocks shown without a `<pre>` (a read-only editor widget, one element per line):
    /// each becomes one fenced block, its block-level children its lines.
    #[serde(default)]
    pub code_blocks: Vec<String>,
    #[serde(default)]
    pub message_key: Vec<KeyRule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinal: Option<OrdinalRule>,
    /// Citation chips inside a turn: rendered as their URL only (the chip's label is not content).
    #[serde(default)]
    pub citation_selectors: Vec<String>,
    /// Attachments shown in a turn: rendered as `[file: name]`.
    #[serde(default)]
    pub attachment_selectors: Vec<String>,
    /// Reasoning ("thinking") panels inside a turn: kept apart from the answer, as a marked block before it.
    #[serde(default)]
    pub reasoning_selectors: Vec<String>,
    /// Who gave the answer (a side and model, e.g. in a two-answer battle): a `[label]` first line.
    #[serde(default)]
    pub label_selectors: Vec<String>,
    /// Artifacts or canvases a turn produced, rendered apart from the message body but captured with it.
    #[serde(default)]
    pub artifact_selectors: Vec<String>,
    /// Selectors that find the conversation's content area (used to tell "no turns found" apart from "nothing
    /// shown yet"): when text is present here but no turn is read for a while, the adapter is stale.
    #[serde(default)]
    pub content_area: Vec<String>,
    /// Which rules are verified against what (documentation; not embedded in the build).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
}

/// What a surface's rules were checked against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// Sources of the selectors (public tools, the site's markup as seen in saved pages, structure only).
    pub verified_against: String,
    /// Which rules were checked against which real markup (a saved page of the live site, a live probe, or
    /// selectors a maintained tool measured on it), and when.
    #[serde(default)]
    pub checked: Vec<Checked>,
    /// What was looked for and not found, when no real markup of the site could be checked against.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub not_found: String,
    /// Rules that are structural guesses (ranked fallbacks) rather than verified.
    #[serde(default)]
    pub unverified: Vec<String>,
    #[serde(default)]
    pub notes: String,
}

/// One check of a surface's rules against real markup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checked {
    /// The surface file's fields the check covers (`message_roots`, `text_selectors`, …).
    pub rules: Vec<String>,
    /// What the rules were checked against: the kind of evidence and where it is.
    pub against: String,
    /// When that markup was seen on the live site: `YYYY`, `YYYY-MM` or `YYYY-MM-DD`.
    pub date: String,
}

impl SurfaceSpec {
    /// Problems the JSON shape cannot express, one message each (the content script would misread the page).
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let roles: Vec<Role> = self.role_rules.iter().map(|r| r.role).collect();
        if !roles.contains(&Role::User) || !roles.contains(&Role::Assistant) {
            out.push("role_rules must name both user and assistant".to_owned());
        }
        if self.streaming_markers.is_empty() {
            out.push("needs a streaming marker".to_owned());
        }
        for k in &self.message_key {
            if k.selector.is_some() == k.closest.is_some() {
                out.push(format!(
                    "key rule on `{}` needs selector xor closest",
                    k.attribute
                ));
            }
        }
        for t in &self.block_elements {
            // A custom element's name (HTML: lowercase, starts with a letter, contains a hyphen) or an HTML one.
            let ok = t.starts_with(|c: char| c.is_ascii_lowercase())
                && t.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !ok {
                out.push(format!("block element `{t}` is not a lowercase tag name"));
            }
        }
        let selectors = self
            .message_roots
            .iter()
            .chain(&self.strip_selectors)
            .chain(&self.streaming_markers)
            .chain(&self.preformatted_selectors)
            .chain(&self.citation_selectors)
            .chain(&self.attachment_selectors)
            .chain(&self.reasoning_selectors)
            .chain(&self.label_selectors)
            .chain(&self.artifact_selectors)
            .chain(&self.content_area);
        for sel in selectors {
            if sel.trim().is_empty() {
                out.push("empty selector".to_owned());
            }
        }
        out
    }
}

/// The part of a surface the core itself uses, plus the entry's JSON text for the content script.
#[derive(Debug, Clone, Deserialize)]
pub struct Surface {
    pub id: String,
    pub name: String,
    pub status: Status,
    pub hosts: Vec<String>,
    #[serde(default)]
    pub paths: Vec<String>,
    pub conversation_patterns: Vec<String>,
    #[serde(default)]
    pub conversation_query: Option<String>,
    #[serde(default)]
    pub conversation_fallback: ConversationFallback,
    pub message_roots: Vec<String>,
    pub role_rules: Vec<serde::de::IgnoredAny>,
    #[serde(default)]
    pub strip_lines: Vec<String>,
    #[serde(default)]
    pub ordinal: Option<OrdinalRule>,
    /// The registry entry, verbatim JSON.
    #[serde(skip)]
    pub raw: String,
}

/// Errors found while loading a registry document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("registry is not valid JSON of the expected shape: {0}")]
    Malformed(String),
    #[error("surface {surface}: {problem}")]
    Invalid { surface: String, problem: String },
    #[error("a registry is already in use: it is installed once, before the first call")]
    AlreadyInstalled,
}

#[derive(Debug, Deserialize)]
struct Document<'a> {
    version: u32,
    #[serde(borrow, default)]
    render: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow)]
    surfaces: Vec<&'a serde_json::value::RawValue>,
}

/// A surface with its regexes compiled.
#[derive(Debug)]
struct Compiled {
    surface: Surface,
    conversation: Vec<Regex>,
    strip_lines: Vec<Regex>,
    ordinal: Option<Regex>,
}

/// The loaded, checked registry.
#[derive(Debug)]
pub struct Registry {
    surfaces: Vec<Compiled>,
    /// The rendering rules every surface shares (math, code languages, citation URLs), verbatim JSON.
    render: String,
}

/// The registry's answer for a page URL.
#[derive(Debug, Clone)]
pub struct UrlMatch<'a> {
    pub surface: &'a Surface,
    /// `None` when the URL names no conversation yet (nothing is captured until it does).
    pub conversation_id: Option<String>,
}

impl Registry {
    /// The registry this build runs with, parsed and checked once: the installed document if one was installed
    /// before first use, else (natively) the embedded one. The extension's module embeds none: until the worker
    /// installs one, it knows no surface and captures nothing.
    pub fn builtin() -> &'static Registry {
        REGISTRY.get_or_init(|| {
            #[cfg(not(target_arch = "wasm32"))]
            if let Ok(r) = Registry::parse(REGISTRY_JSON) {
                return r;
            }
            // The embedded document is checked by the test suite; an empty registry keeps a broken build harmless.
            Registry {
                surfaces: Vec::new(),
                render: "null".to_owned(),
            }
        })
    }

    /// Installs `json` as the registry [`Registry::builtin`] answers with. Only before its first use, once: a
    /// registry never changes under a running core (the worker installs the one shipped with it at start).
    pub fn install(json: &str) -> Result<(), RegistryError> {
        let registry = Registry::parse(json)?;
        REGISTRY
            .set(registry)
            .map_err(|_| RegistryError::AlreadyInstalled)
    }

    /// Parse and check a registry document.
    pub fn parse(json: &str) -> Result<Registry, RegistryError> {
        let malformed = |e: serde_json::Error| RegistryError::Malformed(e.to_string());
        let doc: Document = serde_json::from_str(json).map_err(malformed)?;
        if doc.version != 1 {
            return Err(RegistryError::Malformed(format!(
                "unknown version {}",
                doc.version
            )));
        }
        let mut surfaces = Vec::with_capacity(doc.surfaces.len());
        for raw in doc.surfaces {
            let mut surface: Surface = serde_json::from_str(raw.get()).map_err(malformed)?;
            surface.raw = raw.get().to_owned();
            surfaces.push(compile(surface)?);
        }
        for (i, a) in surfaces.iter().enumerate() {
            if surfaces[..i].iter().any(|b| b.surface.id == a.surface.id) {
                return Err(invalid(&a.surface.id, "duplicate surface id"));
            }
        }
        let render = doc.render.map_or("null", |r| r.get()).to_owned();
        Ok(Registry { surfaces, render })
    }

    /// The shared rendering rules, verbatim JSON (`null` when the document has none).
    pub fn render_rules(&self) -> &str {
        &self.render
    }

    pub fn surfaces(&self) -> impl Iterator<Item = &Surface> {
        self.surfaces.iter().map(|c| &c.surface)
    }

    pub fn get(&self, id: &str) -> Option<&Surface> {
        self.compiled(id).map(|c| &c.surface)
    }

    fn compiled(&self, id: &str) -> Option<&Compiled> {
        self.surfaces.iter().find(|c| c.surface.id == id)
    }

    /// Which surface a page URL belongs to, and which conversation it shows. `day` is today's UTC date
    /// (`YYYY-MM-DD`), used only by surfaces with the `day` fallback.
    pub fn match_url(&self, url: &str, day: &str) -> Option<UrlMatch<'_>> {
        let parts = parse_url(url)?;
        if parts.scheme != "https" {
            return None;
        }
        let compiled = self.surfaces.iter().find(|c| {
            c.surface
                .hosts
                .iter()
                .any(|h| host_entry_matches(h, &parts.host, parts.path))
                && (c.surface.paths.is_empty()
                    || c.surface
                        .paths
                        .iter()
                        .any(|p| parts.path.starts_with(p.as_str())))
        })?;
        let from_query = || {
            let name = compiled.surface.conversation_query.as_deref()?;
            conversation_param(url, name).map(str::to_owned)
        };
        let from_pattern = compiled
            .conversation
            .iter()
            .find_map(|re| re.captures(parts.path))
            .and_then(|caps| caps.get(1).map(|m| m.as_str().to_owned()))
            .filter(|id| !id.is_empty())
            .or_else(from_query);
        let conversation_id =
            from_pattern.or_else(|| match compiled.surface.conversation_fallback {
                ConversationFallback::None => None,
                ConversationFallback::Day if !day.is_empty() => Some(format!("day-{day}")),
                ConversationFallback::Day => None,
                ConversationFallback::Path => Some(parts.path.to_owned()),
            });
        Some(UrlMatch {
            surface: &compiled.surface,
            conversation_id,
        })
    }

    /// Remove the surface's chrome lines (screen-reader labels, code-block headers) from normalised text.
    pub fn strip_lines(&self, surface_id: &str, text: &str) -> String {
        let Some(c) = self.compiled(surface_id) else {
            return text.to_owned();
        };
        if c.strip_lines.is_empty() {
            return text.to_owned();
        }
        text.split('\n')
            .filter(|line| !c.strip_lines.iter().any(|re| re.is_match(line.trim())))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Whether a surface's ordinals are the site's own numbering of its turns (an attribute the site writes, such
    /// as `conversation-turn-N`) rather than counted by the content script among the turns on screen.
    pub fn ordinal_is_sites(&self, surface_id: &str) -> bool {
        self.compiled(surface_id)
            .and_then(|c| c.surface.ordinal.as_ref())
            .is_some_and(|rule| rule.source == OrdinalSource::Attribute)
    }

    /// The ordinal a turn's ordinal attribute value denotes, if the surface has an ordinal rule and it matches.
    pub fn ordinal(&self, surface_id: &str, raw: &str) -> Option<u32> {
        let c = self.compiled(surface_id)?;
        let rule = c.surface.ordinal.as_ref()?;
        let n: i64 = c
            .ordinal
            .as_ref()?
            .captures(raw)?
            .get(1)?
            .as_str()
            .parse()
            .ok()?;
        u32::try_from(n.checked_add(rule.offset)?).ok()
    }

    /// `https://` match patterns for the manifest's content scripts, one per host pattern.
    pub fn match_patterns(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in self.surfaces() {
            for h in &s.hosts {
                if h.contains('/') {
                    // A host entry with its own path: that path, its query strings and below.
                    out.push(format!("https://{h}*"));
                    continue;
                }
                if s.paths.is_empty() {
                    out.push(format!("https://{h}/*"));
                }
                for p in &s.paths {
                    out.push(format!("https://{h}{p}*"));
                }
            }
        }
        out
    }
}

fn is_attribute(s: &OrdinalSource) -> bool {
    *s == OrdinalSource::Attribute
}

fn invalid(surface: &str, problem: impl Into<String>) -> RegistryError {
    RegistryError::Invalid {
        surface: surface.to_owned(),
        problem: problem.into(),
    }
}

fn compile(surface: Surface) -> Result<Compiled, RegistryError> {
    let id = surface.id.clone();
    if !crate::wire::is_valid_surface(&id) || !id.starts_with("browser-ext:") {
        return Err(invalid(&id, "id must be browser-ext:<name>"));
    }
    if surface.hosts.is_empty() {
        return Err(invalid(&id, "no hosts"));
    }
    for h in &surface.hosts {
        let (host, path) = split_host_entry(h);
        let bare = host.strip_prefix("*.").unwrap_or(host);
        let ok = !bare.is_empty()
            && bare
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-'))
            && path.is_none_or(|p| {
                p.len() > 1
                    && !p.ends_with('/')
                    && p.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.')
                    })
            });
        if !ok {
            return Err(invalid(&id, format!("bad host pattern `{h}`")));
        }
    }
    if surface.message_roots.is_empty() || surface.role_rules.is_empty() {
        return Err(invalid(&id, "needs message_roots and role_rules"));
    }
    let re = |p: &str| Regex::new(p).map_err(|e| invalid(&id, format!("bad regex `{p}`: {e}")));
    let conversation = surface
        .conversation_patterns
        .iter()
        .map(|p| re(p))
        .collect::<Result<Vec<_>, _>>()?;
    for (p, r) in surface.conversation_patterns.iter().zip(&conversation) {
        if r.captures_len() < 2 {
            return Err(invalid(
                &id,
                format!("conversation pattern `{p}` has no capture group"),
            ));
        }
    }
    let strip_lines = surface
        .strip_lines
        .iter()
        .map(|p| re(p))
        .collect::<Result<Vec<_>, _>>()?;
    let ordinal = match &surface.ordinal {
        Some(rule) => {
            if rule.source == OrdinalSource::Attribute
                && (rule.selector.is_empty() || rule.attribute.is_empty())
            {
                return Err(invalid(
                    &id,
                    "an attribute ordinal needs selector and attribute",
                ));
            }
            let r = re(&rule.pattern)?;
            if r.captures_len() < 2 {
                return Err(invalid(&id, "ordinal pattern has no capture group"));
            }
            Some(r)
        }
        None => None,
    };
    Ok(Compiled {
        surface,
        conversation,
        strip_lines,
        ordinal,
    })
}

/// A host entry's host pattern and its path, if it has one (`x.com/i/grok` → `x.com`, `/i/grok`).
fn split_host_entry(entry: &str) -> (&str, Option<&str>) {
    match entry.find('/') {
        Some(i) => (&entry[..i], Some(&entry[i..])),
        None => (entry, None),
    }
}

/// Whether a page at `host` and `path` is under a host entry: the host matches, and the path is the entry's path
/// or below it (`/i/grok`, `/i/grok/share/x`; not `/i/grokking`).
fn host_entry_matches(entry: &str, host: &str, path: &str) -> bool {
    let (pattern, prefix) = split_host_entry(entry);
    host_matches(pattern, host)
        && prefix.is_none_or(|p| {
            path.strip_prefix(p)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
}

fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(base) => {
            host == base
                || (host.len() > base.len()
                    && host.ends_with(base)
                    && host.as_bytes()[host.len() - base.len() - 1] == b'.')
        }
        None => host == pattern,
    }
}

/// The parts of an absolute URL that the registry looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlParts<'a> {
    pub scheme: String,
    /// Lowercase, without port and userinfo.
    pub host: String,
    /// The path, starting with `/` (or `/` when empty), without query and fragment.
    pub path: &'a str,
}

/// A small absolute-URL splitter (no url crate, to keep the wasm small).
pub fn parse_url(url: &str) -> Option<UrlParts<'_>> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme.is_empty()
        || !scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    {
        return None;
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host_port,
    };
    if host.is_empty() {
        return None;
    }
    let after = &rest[authority_end..];
    let path_end = after.find(['?', '#']).unwrap_or(after.len());
    let path = &after[..path_end];
    Some(UrlParts {
        scheme: scheme.to_ascii_lowercase(),
        host: host.trim_end_matches('.').to_ascii_lowercase(),
        path: if path.is_empty() { "/" } else { path },
    })
}

/// The value of query parameter `name` in `url` when it is a plausible conversation id (1–128 ASCII letters, digits,
/// `-` or `_`).
fn conversation_param<'a>(url: &'a str, name: &str) -> Option<&'a str> {
    let query = url.split_once('?')?.1;
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
        .filter(|v| {
            !v.is_empty()
                && v.len() <= 128
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The URL as sent to the relay: scheme, host and path only (query strings and fragments can carry secrets).
pub fn clean_url(url: &str) -> Option<String> {
    let p = parse_url(url)?;
    Some(format!("{}://{}{}", p.scheme, p.host, p.path))
}

impl Registry {
    /// The URL of a conversation page as the relay keeps it: [`clean_url`], plus the one query parameter that
    /// names the conversation on a surface that keeps it there (`?conversation=<id>` on x.com's Grok), so the link
    /// still opens that conversation. Nothing else of the query or fragment is kept.
    pub fn page_url(&self, surface_id: &str, url: &str) -> Option<String> {
        let base = clean_url(url)?;
        let Some(name) = self
            .get(surface_id)
            .and_then(|s| s.conversation_query.as_deref())
        else {
            return Some(base);
        };
        Some(match conversation_param(url, name) {
            Some(id) => format!("{base}?{name}={id}"),
            None => base,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn embedded_registry_parses_and_has_the_four_verified_surfaces() {
        let r = Registry::parse(REGISTRY_JSON).unwrap();
        let ids: Vec<_> = r.surfaces().map(|s| s.id.as_str()).collect();
        for id in [
            "browser-ext:chatgpt",
            "browser-ext:claude",
            "browser-ext:gemini",
            "browser-ext:copilot",
        ] {
            assert!(ids.contains(&id), "{id} missing");
        }
        assert_eq!(Registry::builtin().surfaces().count(), ids.len());
    }

    /// Every surface file as written: the full strict shape, no problems, a provenance saying what its rules are
    /// verified against; and the embedded copy is the same entry without the provenance.
    #[test]
    fn every_surface_file_has_the_full_strict_shape_and_a_provenance() {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(SURFACES_DIR).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            if !name.ends_with(".json") || name.starts_with('_') {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let spec: SurfaceSpec =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                format!("browser-ext:{}", name.trim_end_matches(".json")),
                spec.id,
                "{name}: file name and id differ"
            );
            assert_eq!(spec.problems(), Vec::<String>::new(), "{}", spec.id);
            let prov = spec
                .provenance
                .clone()
                .unwrap_or_else(|| panic!("{name}: no provenance"));
            assert!(
                !prov.verified_against.trim().is_empty(),
                "{name}: provenance says nothing"
            );
            let core = Registry::builtin().get(&spec.id).unwrap();
            let back: SurfaceSpec = serde_json::from_str(&core.raw).unwrap();
            assert_eq!(back.provenance, None, "{name}: provenance was embedded");
            assert_eq!(
                back,
                SurfaceSpec {
                    provenance: None,
                    ..spec
                }
            );
            names.push(name);
        }
        assert_eq!(names.len(), Registry::builtin().surfaces().count());
    }

    /// A registry is installed once, before first use, and only a valid document: a malformed one is refused
    /// whole, and none replaces the registry a running core already answers with.
    #[test]
    fn a_registry_installs_only_before_first_use_and_only_when_valid() {
        assert!(matches!(
            Registry::install("{\"version\": 1, \"surfaces\": ["),
            Err(RegistryError::Malformed(_))
        ));
        let before = Registry::builtin().surfaces().count();
        assert_eq!(
            Registry::install(REGISTRY_JSON),
            Err(RegistryError::AlreadyInstalled)
        );
        assert_eq!(Registry::builtin().surfaces().count(), before);
    }

    /// The surfaces whose rules were built from structure say which real markup each rule was checked against and
    /// when, or what was looked for and not found; every check names fields the file has and a real date.
    #[test]
    fn every_surface_built_from_structure_says_what_real_markup_its_rules_were_checked_against() {
        let date = Regex::new(r"^20\d\d(-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?)?$").unwrap();
        let named = ["poe", "huggingchat", "pi", "lmarena"];
        let mut seen = 0;
        for entry in std::fs::read_dir(SURFACES_DIR).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
            if path.extension().is_none_or(|e| e != "json") || name.starts_with('_') {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let spec: SurfaceSpec = serde_json::from_str(&text).unwrap();
            let fields: serde_json::Value = serde_json::from_str(&text).unwrap();
            let prov = spec.provenance.clone().unwrap();
            for c in &prov.checked {
                assert!(date.is_match(&c.date), "{name}: check date {:?}", c.date);
                assert!(
                    !c.against.trim().is_empty(),
                    "{name}: a check against nothing"
                );
                assert!(!c.rules.is_empty(), "{name}: a check of no rule");
                for r in &c.rules {
                    assert!(
                        fields.get(r).is_some(),
                        "{name}: check names {r}, not a field of the file"
                    );
                }
            }
            if spec.status == Status::Experimental || named.contains(&name.as_str()) {
                seen += 1;
                assert!(
                    !prov.checked.is_empty() || !prov.not_found.trim().is_empty(),
                    "{name}: says neither what real markup its rules were checked against nor what was not found"
                );
            }
        }
        assert!(seen >= 13, "{seen}");
    }

    /// Site markup knowledge the content script applies is data: a spec's problems are found, and the page
    /// layout fields round-trip.
    #[test]
    fn spec_problems_are_reported_and_layout_fields_are_data() {
        let spec = |extra: &str| -> SurfaceSpec {
            serde_json::from_str(&format!(
                r#"{{"id":"browser-ext:x","name":"X","status":"verified","hosts":["x.com"],"conversation_patterns":["^/c/(\\w+)"],
                "message_roots":["div"],"role_rules":[{{"match":".u","on":"self","role":"user"}},{{"match":".a","on":"self","role":"assistant"}}],
                "streaming_markers":[".busy"]{extra}}}"#
            ))
            .unwrap()
        };
        let good = spec(
            r#","block_elements":["chat-turn","x-msg2"],"preformatted_selectors":[".keep-ws"]"#,
        );
        assert!(good.problems().is_empty(), "{:?}", good.problems());
        assert_eq!(good.block_elements, ["chat-turn", "x-msg2"]);
        assert_eq!(good.preformatted_selectors, [".keep-ws"]);
        let bad = spec(
            r#","block_elements":["Chat-Turn","x y"],"preformatted_selectors":[" "],"message_key":[{"attribute":"id"}]"#,
        );
        let p = bad.problems();
        assert_eq!(p.len(), 4, "{p:?}");
        assert!(p.iter().any(|m| m.contains("Chat-Turn")) && p.iter().any(|m| m.contains("`x y`")));
        assert!(p.iter().any(|m| m.contains("selector xor closest")));
        let e = serde_json::from_str::<SurfaceSpec>(r#"{"id":"browser-ext:x","blockElements":[]}"#)
            .unwrap_err();
        assert!(e.to_string().contains("blockElements"), "{e}");
        // The embedded registry describes Gemini's custom elements as data, not as code in the content script.
        let doc: serde_json::Value = serde_json::from_str(REGISTRY_JSON).unwrap();
        let gemini = doc["surfaces"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == "browser-ext:gemini")
            .unwrap();
        assert!(
            gemini["block_elements"]
                .as_array()
                .unwrap()
                .contains(&"model-response".into())
        );
    }

    #[test]
    fn conversation_ids_from_paths() {
        let r = Registry::builtin();
        let cases = [
            (
                "https://chatgpt.com/c/6750a1b2-0000-4000-8000-000000000001",
                "browser-ext:chatgpt",
                Some("6750a1b2-0000-4000-8000-000000000001"),
            ),
            (
                "https://chatgpt.com/g/g-abc-my-gpt/c/abc-123?model=x",
                "browser-ext:chatgpt",
                Some("abc-123"),
            ),
            (
                "https://chat.openai.com/share/xyz#frag",
                "browser-ext:chatgpt",
                Some("xyz"),
            ),
            ("https://chatgpt.com/", "browser-ext:chatgpt", None),
            (
                "https://chatgpt.com/?temporary-chat=true",
                "browser-ext:chatgpt",
                None,
            ),
            (
                "https://claude.ai/chat/0b6f9d7e-1111-4222-8333-944455556666",
                "browser-ext:claude",
                Some("0b6f9d7e-1111-4222-8333-944455556666"),
            ),
            (
                "https://gemini.google.com/app/a1b2c3d4e5",
                "browser-ext:gemini",
                Some("a1b2c3d4e5"),
            ),
            (
                "https://gemini.google.com/u/1/app/ffee00",
                "browser-ext:gemini",
                Some("ffee00"),
            ),
            (
                "https://gemini.google.com/gem/coding-partner/0a0b0c",
                "browser-ext:gemini",
                Some("0a0b0c"),
            ),
            (
                "https://copilot.microsoft.com/chats/AbC123xyz",
                "browser-ext:copilot",
                Some("AbC123xyz"),
            ),
            (
                "https://WWW.Copilot.com:443/chats/q1",
                "browser-ext:copilot",
                Some("q1"),
            ),
        ];
        for (url, surface, conv) in cases {
            let m = r
                .match_url(url, "2026-11-22")
                .unwrap_or_else(|| panic!("{url} unmatched"));
            assert_eq!(m.surface.id, surface, "{url}");
            assert_eq!(m.conversation_id.as_deref(), conv, "{url}");
        }
    }

    #[test]
    fn grok_inside_x_is_matched_under_its_path_only_with_the_conversation_from_the_query() {
        let r = Registry::builtin();
        let conv = |url: &str| {
            r.match_url(url, "2026-01-01")
                .map(|m| (m.surface.id.clone(), m.conversation_id))
        };
        let grok = |c: Option<&str>| Some(("browser-ext:grok".to_owned(), c.map(str::to_owned)));
        assert_eq!(
            conv("https://x.com/i/grok?conversation=1928089597025693987"),
            grok(Some("1928089597025693987"))
        );
        assert_eq!(
            conv("https://x.com/i/grok?focus=1&conversation=1928089597025693987#top"),
            grok(Some("1928089597025693987"))
        );
        assert_eq!(
            conv("https://twitter.com/i/grok/share/DR88yKZT1Hd3IQjQH3k7I6Xxj"),
            grok(Some("DR88yKZT1Hd3IQjQH3k7I6Xxj"))
        );
        // A new chat names no conversation yet; the rest of X is not Grok.
        assert_eq!(conv("https://x.com/i/grok"), grok(None));
        for other in [
            "https://x.com/home",
            "https://x.com/i/grokking?conversation=1",
            "https://x.com/elonmusk/status/1",
            "https://x.com/i/bookmarks",
            "https://notx.com/i/grok?conversation=1",
        ] {
            assert_eq!(conv(other), None, "{other}");
        }
        // The stored URL keeps the one parameter that names the conversation, and nothing else of the query.
        assert_eq!(
            r.page_url(
                "browser-ext:grok",
                "https://x.com/i/grok?focus=1&conversation=1928089597025693987&t=secret#x"
            )
            .as_deref(),
            Some("https://x.com/i/grok?conversation=1928089597025693987")
        );
        assert_eq!(
            r.page_url("browser-ext:grok", "https://grok.com/c/abc?t=secret")
                .as_deref(),
            Some("https://grok.com/c/abc")
        );
        let patterns = r.match_patterns();
        assert!(
            patterns.contains(&"https://x.com/i/grok*".to_owned()),
            "{patterns:?}"
        );
        assert!(
            !patterns.iter().any(|p| p.starts_with("https://x.com/*")),
            "{patterns:?}"
        );
    }

    #[test]
    fn host_entries_with_a_path_are_checked() {
        for bad in [
            "x.com/",
            "x.com/i grok",
            "x.com/i/grok/",
            "/i/grok",
            "x.com/i?q",
        ] {
            let doc = format!(
                r#"{{"version":1,"surfaces":[{{"id":"browser-ext:x","name":"X","status":"verified","hosts":["{bad}"],
                "conversation_patterns":["^/c/(\\w+)"],"message_roots":["div"],"role_rules":[{{"match":"div","on":"self","role":"user"}}]}}]}}"#
            );
            assert!(Registry::parse(&doc).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn foreign_and_lookalike_hosts_do_not_match() {
        let r = Registry::builtin();
        for url in [
            "https://127.0.0.1:8443/c/abc",
            "https://evilchatgpt.com/c/abc",
            "https://chatgpt.com.evil.net/c/abc",
            "http://chatgpt.com/c/abc",
            "https://claude.ai@evil.net/chat/abc",
            "not a url",
        ] {
            assert!(r.match_url(url, "").is_none(), "{url}");
        }
    }

    #[test]
    fn wildcard_hosts_and_fallbacks() {
        assert!(host_matches("*.example.com", "a.example.com"));
        assert!(host_matches("*.example.com", "example.com"));
        assert!(!host_matches("*.example.com", "badexample.com"));
        let doc = r#"{"version":1,"surfaces":[{"id":"browser-ext:pi","name":"Pi","status":"experimental",
            "hosts":["*.pi.ai"],"conversation_patterns":["^/c/(\\w+)"],"conversation_fallback":"day",
            "message_roots":["[data-role]"],"role_rules":[{"match":"[data-role=user]","on":"self","role":"user"}]}]}"#;
        let r = Registry::parse(doc).unwrap();
        let m = r.match_url("https://pi.ai/talk", "2026-11-22").unwrap();
        assert_eq!(m.conversation_id.as_deref(), Some("day-2026-11-22"));
        assert_eq!(
            r.match_url("https://x.pi.ai/c/abc", "")
                .unwrap()
                .conversation_id
                .as_deref(),
            Some("abc")
        );
    }

    #[test]
    fn bad_documents_are_refused_with_the_reason() {
        let base = |extra: &str| {
            format!(
                r#"{{"version":1,"surfaces":[{{"id":"browser-ext:x","name":"X","status":"verified","hosts":["x.com"],
                "conversation_patterns":["{extra}"],"message_roots":["div"],"role_rules":[{{"match":"div","on":"self","role":"user"}}]}}]}}"#
            )
        };
        assert!(Registry::parse(&base("^/c/(\\\\w+)")).is_ok());
        assert!(matches!(
            Registry::parse(&base("^/c/(")),
            Err(RegistryError::Invalid { .. })
        ));
        assert!(matches!(
            Registry::parse(&base("^/c/\\\\w+")),
            Err(RegistryError::Invalid { .. })
        ));
        assert!(matches!(
            Registry::parse("{}"),
            Err(RegistryError::Malformed(_))
        ));
    }

    #[test]
    fn strip_lines_and_ordinals() {
        let r = Registry::builtin();
        let text = "ChatGPT said:\nHello\nCopy code\nprint(1)";
        assert_eq!(
            r.strip_lines("browser-ext:chatgpt", text),
            "Hello\nprint(1)"
        );
        assert_eq!(
            r.ordinal("browser-ext:chatgpt", "conversation-turn-3"),
            Some(2)
        );
        assert_eq!(
            r.ordinal("browser-ext:chatgpt", "conversation-turn-0"),
            None
        );
        assert_eq!(r.ordinal("browser-ext:gemini", "conversation-turn-3"), None);
        // Position ordinals: the content script's decimal index, exactly.
        assert_eq!(r.ordinal("browser-ext:claude", "3"), Some(3));
        assert_eq!(r.ordinal("browser-ext:claude", "0"), Some(0));
        assert_eq!(r.ordinal("browser-ext:claude", "conversation-turn-3"), None);
        assert_eq!(r.ordinal("browser-ext:copilot", "7"), Some(7));
        assert_eq!(r.ordinal("browser-ext:copilot", "-1"), None);
        let c = &r.get("browser-ext:claude").unwrap().ordinal;
        assert_eq!(c.as_ref().map(|o| o.source), Some(OrdinalSource::Position));
    }

    #[test]
    fn ordinal_rules_are_checked() {
        let doc = |ordinal: &str| {
            format!(
                r#"{{"version":1,"surfaces":[{{"id":"browser-ext:x","name":"X","status":"verified","hosts":["x.com"],
                "conversation_patterns":["^/c/(\\w+)"],"message_roots":["div"],
                "role_rules":[{{"match":"div","on":"self","role":"user"}}],"ordinal":{ordinal}}}]}}"#
            )
        };
        assert!(Registry::parse(&doc(r#"{"source":"position","pattern":"^(\\d+)$"}"#)).is_ok());
        assert!(Registry::parse(&doc(r#"{"pattern":"^(\\d+)$"}"#)).is_err());
        assert!(Registry::parse(&doc(r#"{"source":"position","pattern":"^\\d+$"}"#)).is_err());
        assert!(Registry::parse(&doc(r#"{"source":"sideways","pattern":"^(\\d+)$"}"#)).is_err());
    }

    #[test]
    fn clean_url_drops_query_and_fragment() {
        assert_eq!(
            clean_url("https://ChatGPT.com/c/abc?token=secret#x").as_deref(),
            Some("https://chatgpt.com/c/abc")
        );
    }
}
