//! Scrubbing and pseudonymisation of text before it reaches a language model that is not in this process or on
//! loopback. [`Pseudonymiser::pseudonymise`] runs, in this order:
//!
//! 1. secret redaction with `capture::redact`'s built-in rules (`[REDACTED:<kind>]`);
//! 2. [`crate::scrub::scrub_personal`]: e-mails, 10–15-digit phone runs and money amounts (`[EMAIL]`, `[PHONE]`,
//!    `[AMOUNT]`);
//! 3. unless [`Options::names`] is off, people's names → `Person_XXXX`, where `XXXX` is the first 4 upper-case hex
//!    digits of HMAC-SHA256(key, normalised name). The key (32 bytes) stays with the relay, so the pseudonym of a
//!    guessed name cannot be computed elsewhere. The same name always gets the same pseudonym: the map
//!    (pseudonym → real name) is loaded from the store, and what a call adds comes back in [`Scrubbed::new`] for
//!    the caller to store. A pseudonym already taken by a different name is extended by further hex digits
//!    (`Person_A3F2` → `Person_A3F21`).
//!
//! [`Pseudonymiser::reidentify`] turns every pseudonym the map knows back into the real name, in what a model
//! answered.
//!
//! # Names (deterministic, no model)
//!
//! A name is found by any of these rules; a name is a word or a run of words separated by spaces (not a line
//! break), each capitalised (upper-case first letter, a lower-case letter after it: `Ana`, `McDonald`, `O'Brien`,
//! `José`; not `API`):
//!
//! - **configured names** ([`Options::user_names`]: the user's own name, contacts) are matched first and win any
//!   overlap. They match whatever their case (`ana garcía` too), except a one-word name that is also a common word
//!   (`Will`, `May`, see below), which must be capitalised. Each word of a configured name of several words also
//!   counts on its own when capitalised (`García` alone);
//! - **titles**: `Mr`, `Mrs`, `Ms`, `Miss`, `Mx`, `Dr`, `Prof`, … (optionally with a dot) before a capitalised word
//!   and up to two more (`Dr. Ana García`); the title stays, the name is replaced;
//! - **relations**: `my|our|his|her|their` [`best|old|…`] `friend|colleague|boss|wife|husband|…` before a
//!   capitalised word (`my wife, Rose`);
//! - **given names**: a capitalised word in the built-in list (`pseudonym/given_names.txt`, a few hundred common
//!   given names in English, Spanish, Portuguese, French, German, Italian, Indian languages, Chinese pinyin,
//!   Japanese and Arabic, with and without accents), optionally followed by up to two capitalised surnames (with
//!   particles between: `Ana de la Cruz`); a common East Asian surname just before a given name is taken too
//!   (`Wang Wei`).
//!
//! False positives are kept down by two lists. A given name that is also a common word, month, place, product or
//! language (`pseudonym/ambiguous_names.txt`: `Will`, `May`, `Mark`, `Grace`, `June`, `Rose`, `Bill`, `Ruby`,
//! `Claude`, …) counts only when a surname follows (`Will Smith`; at a sentence start the surname must not itself
//! be a given name: "Will Ana come?" is Ana alone) or after a title or relation (`Dr May`, `my friend Bill`); on
//! its own it is left alone, so "May I…", "Will this work" and "Ruby is slow" stay as they are (and so does the
//! bare first name of someone called Grace: the price of that rule). Words in `pseudonym/stop_words.txt`
//! (weekdays, months, function words, greetings, tech terms: `Monday`, `The`, `Rust`, `GitHub`) are never part of
//! a name. A word glued to a digit or `_` (`Ana2`, `mark_done`) is an identifier, not a name (configured names
//! excepted).
//!
//! # One person, one pseudonym
//!
//! A full name's pseudonym is keyed on the whole name (lower-cased, single-spaced). A word found on its own
//! (`Ana`, or `García` after `Ana García` was seen) takes the pseudonym of the full name it is part of, looked up
//! in this order, and only when exactly one candidate fits:
//! 1. full names found in the same text (any of their words);
//! 2. configured full names (any of their words);
//! 3. if the word itself is not already mapped: full names in the map whose first word it is;
//!
//! otherwise it gets its own pseudonym. So "Ana García … Ana … García" is one pseudonym throughout, and
//! re-identification writes the full name back where the text had only the first name. With two Anas in view,
//! a bare "Ana" is kept apart from both.
//!
//! Collisions depend on the map: a name's pseudonym is the shortest prefix not taken by another name in the map
//! when the name is first seen, so two instances agree as long as they start from the same map (and the caller
//! stores [`Scrubbed::new`]).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::capture::redact::Redactor;
use crate::scrub;

/// Length of the secret key, in bytes.
pub const KEY_LEN: usize = 32;
/// What every pseudonym starts with.
pub const PREFIX: &str = "Person_";
/// Fewest hex digits in a pseudonym.
pub const MIN_HEX: usize = 4;
/// Most hex digits in a pseudonym (the whole HMAC).
pub const MAX_HEX: usize = 64;

const SECRET_MARK: &str = "[REDACTED:";

/// What to replace besides secrets, e-mails, phones and amounts (which are always replaced).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Options {
    /// Pseudonymise people's names (on by default; the user may turn it off).
    pub names: bool,
    /// Names the user configured: their own name, contacts. Always treated as names.
    pub user_names: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            names: true,
            user_names: Vec::new(),
        }
    }
}

/// One entry of the pseudonym map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    /// `Person_` and 4 to 64 upper-case hex digits.
    pub pseudonym: String,
    /// The name as first seen (or as configured), words separated by single spaces.
    pub real: String,
}

/// How many of each kind one call replaced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub email: usize,
    pub phone: usize,
    pub amount: usize,
    pub secret: usize,
    pub name: usize,
}

impl Counts {
    pub fn total(&self) -> usize {
        self.email + self.phone + self.amount + self.secret + self.name
    }
}

/// The text to send, what was replaced, and the map entries this call created (to be stored by the caller).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scrubbed {
    pub text: String,
    pub counts: Counts,
    pub new: Vec<Mapping>,
}

/// Why a loaded map was refused. Names are not repeated in the message (it may reach a log).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    #[error(
        "pseudonym map entry {index}: {pseudonym:?} is not `Person_` and 4 to 64 upper-case hex digits"
    )]
    BadPseudonym { index: usize, pseudonym: String },
    #[error("pseudonym map entry {index}: the real name has no letters")]
    EmptyName { index: usize },
    #[error("pseudonym map entry {index}: {pseudonym} is already mapped to a different name")]
    DuplicatePseudonym { index: usize, pseudonym: String },
    #[error("pseudonym map entry {index}: its name already has the pseudonym {existing}")]
    DuplicateName { index: usize, existing: String },
}

/// Whether `s` has the form of a pseudonym: `Person_` and 4 to 64 upper-case hex digits.
pub fn is_pseudonym(s: &str) -> bool {
    s.strip_prefix(PREFIX).is_some_and(|hex| {
        (MIN_HEX..=MAX_HEX).contains(&hex.len())
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
    })
}

struct Configured {
    /// Lower-cased words.
    words: Vec<String>,
    key: String,
    real: String,
    /// Matches in any case (false for a one-word name that is also a common word).
    any_case: bool,
}

/// Scrubs and pseudonymises text, and re-identifies what comes back. Holds the key and the map; `Debug` shows
/// neither.
pub struct Pseudonymiser {
    key: [u8; KEY_LEN],
    names: bool,
    /// pseudonym → real name.
    by_pseudonym: HashMap<String, String>,
    /// normalised real name → pseudonym.
    by_key: HashMap<String, String>,
    /// first word of a mapped name of several words → those names' keys.
    by_first: HashMap<String, Vec<String>>,
    configured: Vec<Configured>,
    configured_by_first: HashMap<String, Vec<usize>>,
    /// each word of a configured name of several words → those names.
    configured_parts: HashMap<String, Vec<usize>>,
}

impl fmt::Debug for Pseudonymiser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pseudonymiser")
            .field("key", &"<redacted>")
            .field("names", &self.names)
            .field("mappings", &self.by_pseudonym.len())
            .field("configured", &self.configured.len())
            .finish()
    }
}

impl Pseudonymiser {
    /// A pseudonymiser with this key, the map loaded from the store, and the user's options. A malformed or
    /// contradictory map is refused (re-identifying with it could put the wrong name into an answer).
    pub fn new(
        key: [u8; KEY_LEN],
        known: impl IntoIterator<Item = Mapping>,
        options: Options,
    ) -> Result<Pseudonymiser, MapError> {
        let mut p = Pseudonymiser {
            key,
            names: options.names,
            by_pseudonym: HashMap::new(),
            by_key: HashMap::new(),
            by_first: HashMap::new(),
            configured: Vec::new(),
            configured_by_first: HashMap::new(),
            configured_parts: HashMap::new(),
        };
        for (index, m) in known.into_iter().enumerate() {
            if !is_pseudonym(&m.pseudonym) {
                return Err(MapError::BadPseudonym {
                    index,
                    pseudonym: m.pseudonym,
                });
            }
            let words = name_words(&m.real);
            if words.is_empty() {
                return Err(MapError::EmptyName { index });
            }
            let key = join_norm(&words);
            if let Some(existing) = p.by_pseudonym.get(&m.pseudonym) {
                if normalise(existing) == key {
                    continue;
                }
                return Err(MapError::DuplicatePseudonym {
                    index,
                    pseudonym: m.pseudonym,
                });
            }
            if let Some(existing) = p.by_key.get(&key) {
                return Err(MapError::DuplicateName {
                    index,
                    existing: existing.clone(),
                });
            }
            p.insert(m.pseudonym, key, m.real);
        }
        let lex = lexicon();
        for name in &options.user_names {
            let words = name_words(name);
            if words.is_empty() {
                continue;
            }
            let key = join_norm(&words);
            if p.configured.iter().any(|c| c.key == key) {
                continue;
            }
            let real = words
                .iter()
                .map(|(w, _)| w.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            let norms: Vec<String> = words.into_iter().map(|(_, n)| n).collect();
            let any_case =
                !(norms.len() == 1 && (lex.is_ambiguous(&norms[0]) || lex.is_stop(&norms[0])));
            let idx = p.configured.len();
            p.configured_by_first
                .entry(norms[0].clone())
                .or_default()
                .push(idx);
            if norms.len() > 1 {
                for w in &norms {
                    if counts_alone(w) {
                        let list = p.configured_parts.entry(w.clone()).or_default();
                        if !list.contains(&idx) {
                            list.push(idx);
                        }
                    }
                }
            }
            p.configured.push(Configured {
                words: norms,
                key,
                real,
                any_case,
            });
        }
        Ok(p)
    }

    /// How many names the map holds.
    pub fn mapping_count(&self) -> usize {
        self.by_pseudonym.len()
    }

    /// Secrets, e-mails, phones, amounts and (unless turned off) names replaced; see the module docs.
    pub fn pseudonymise(&mut self, text: &str) -> Scrubbed {
        let mut counts = Counts::default();
        let redacted = Redactor::builtin().redact(text);
        counts.secret = grown(text, &redacted, SECRET_MARK);
        let personal = scrub::scrub_personal(&redacted);
        counts.email = grown(&redacted, &personal, scrub::EMAIL);
        counts.phone = grown(&redacted, &personal, scrub::PHONE);
        counts.amount = grown(&redacted, &personal, scrub::AMOUNT);
        let mut new = Vec::new();
        let text = if self.names {
            let (text, n) = self.replace_names(&personal, &mut new);
            counts.name = n;
            text
        } else {
            personal
        };
        Scrubbed { text, counts, new }
    }

    /// `text` with every pseudonym the map knows replaced by its real name. Hex digits may be in either case; a
    /// pseudonym followed by more hex digits (`Person_A3F2ed`) is read as the longest one the map knows. Unknown
    /// pseudonyms stay as they are, and so does one glued to a preceding letter (`xPerson_A3F2`), where
    /// `pseudonymise` never writes one.
    pub fn reidentify(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut last = 0;
        let mut from = 0;
        while let Some(pos) = text[from..].find(PREFIX) {
            let at = from + pos;
            let hex_start = at + PREFIX.len();
            from = hex_start;
            let boundary = text[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !is_word_char(c));
            if !boundary {
                continue;
            }
            let hex_len = text[hex_start..]
                .bytes()
                .take(MAX_HEX)
                .take_while(u8::is_ascii_hexdigit)
                .count();
            let found = (MIN_HEX..=hex_len).rev().find_map(|len| {
                let p = format!(
                    "{PREFIX}{}",
                    text[hex_start..hex_start + len].to_ascii_uppercase()
                );
                self.by_pseudonym.get(&p).map(|real| (len, real))
            });
            if let Some((len, real)) = found {
                out.push_str(&text[last..at]);
                out.push_str(real);
                last = hex_start + len;
                from = last;
            }
        }
        out.push_str(&text[last..]);
        out
    }

    fn insert(&mut self, pseudonym: String, key: String, real: String) {
        if let Some((first, _)) = key.split_once(' ') {
            self.by_first
                .entry(first.to_owned())
                .or_default()
                .push(key.clone());
        }
        self.by_key.insert(key, pseudonym.clone());
        self.by_pseudonym.insert(pseudonym, real);
    }

    /// The pseudonym of a normalised name, creating it (and recording it in `new`) when the map lacks it.
    fn assign(&mut self, key: &str, real: &str, new: &mut Vec<Mapping>) -> String {
        if let Some(p) = self.by_key.get(key) {
            return p.clone();
        }
        let hex = hex::encode_upper(hmac_sha256(&self.key, key.as_bytes()));
        // `by_key` lacks this name, so a taken pseudonym belongs to another name: take one more digit.
        let pseudonym = (MIN_HEX..=MAX_HEX)
            .map(|len| format!("{PREFIX}{}", &hex[..len]))
            .find(|p| !self.by_pseudonym.contains_key(p))
            .or_else(|| {
                // Every prefix taken means a full HMAC collision; derive further full-length candidates.
                (1u64..).find_map(|n| {
                    let mut msg = key.as_bytes().to_vec();
                    msg.push(0);
                    msg.extend_from_slice(&n.to_be_bytes());
                    let p = format!(
                        "{PREFIX}{}",
                        hex::encode_upper(hmac_sha256(&self.key, &msg))
                    );
                    (!self.by_pseudonym.contains_key(&p)).then_some(p)
                })
            })
            .unwrap_or_else(|| format!("{PREFIX}{hex}"));
        self.insert(pseudonym.clone(), key.to_owned(), real.to_owned());
        new.push(Mapping {
            pseudonym: pseudonym.clone(),
            real: real.to_owned(),
        });
        pseudonym
    }

    fn replace_names(&mut self, text: &str, new: &mut Vec<Mapping>) -> (String, usize) {
        let toks = tokenize(text);
        let spans = self.detect(text, &toks);
        if spans.is_empty() {
            return (text.to_owned(), 0);
        }
        // Full names in this text: key → real, and each of their words → keys.
        let mut full_real: HashMap<String, String> = HashMap::new();
        let mut full_parts: HashMap<String, HashSet<String>> = HashMap::new();
        let mut resolved: Vec<(String, String)> = Vec::with_capacity(spans.len());
        for s in &spans {
            if s.last > s.first {
                let (key, real) = self.span_name(text, &toks, s);
                for t in &toks[s.first..=s.last] {
                    if counts_alone(&t.norm) {
                        full_parts
                            .entry(t.norm.clone())
                            .or_default()
                            .insert(key.clone());
                    }
                }
                full_real.entry(key.clone()).or_insert(real);
            }
        }
        for s in &spans {
            if s.last > s.first || s.configured.is_some() {
                resolved.push(self.span_name(text, &toks, s));
                continue;
            }
            let t = &toks[s.first];
            let w = &t.norm;
            let surface = &text[t.start..t.end];
            let name = if let Some(key) = full_parts.get(w).and_then(only) {
                let real = full_real.get(&key).cloned().unwrap_or_default();
                (key, real)
            } else if let Some(c) = self
                .configured_parts
                .get(w)
                .and_then(|list| (list.len() == 1).then(|| &self.configured[list[0]]))
            {
                (c.key.clone(), c.real.clone())
            } else if let Some(key) = (!self.by_key.contains_key(w))
                .then(|| self.by_first.get(w))
                .flatten()
                .and_then(|keys| (keys.len() == 1).then(|| keys[0].clone()))
            {
                let real = self
                    .by_key
                    .get(&key)
                    .and_then(|p| self.by_pseudonym.get(p))
                    .cloned()
                    .unwrap_or_default();
                (key, real)
            } else {
                (w.clone(), surface.to_owned())
            };
            resolved.push(name);
        }
        let mut out = String::with_capacity(text.len());
        let mut last = 0;
        for (s, (key, real)) in spans.iter().zip(&resolved) {
            let p = self.assign(key, real, new);
            out.push_str(&text[last..toks[s.first].start]);
            out.push_str(&p);
            last = toks[s.last].end;
        }
        out.push_str(&text[last..]);
        (out, spans.len())
    }

    /// A span's own key and real name (the configured spelling for a configured name).
    fn span_name(&self, text: &str, toks: &[Tok], s: &Span) -> (String, String) {
        if let Some(c) = s.configured.map(|i| &self.configured[i]) {
            return (c.key.clone(), c.real.clone());
        }
        let span = &toks[s.first..=s.last];
        let key = span
            .iter()
            .map(|t| t.norm.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let real = span
            .iter()
            .map(|t| &text[t.start..t.end])
            .collect::<Vec<_>>()
            .join(" ");
        (key, real)
    }

    /// Every name in the text, as token ranges, in text order and not overlapping.
    fn detect(&self, text: &str, toks: &[Tok]) -> Vec<Span> {
        let lex = lexicon();
        let n = toks.len();
        let mut taken = vec![false; n];
        let mut spans = Vec::new();
        let gap = |a: usize, b: usize| &text[toks[a].after..toks[b].start];

        // 1. Configured names, leftmost-longest.
        let mut i = 0;
        while i < n {
            let mut best: Option<(usize, usize)> = None;
            for &c in self
                .configured_by_first
                .get(&toks[i].norm)
                .into_iter()
                .flatten()
            {
                let cfg = &self.configured[c];
                let len = cfg.words.len();
                if i + len > n || (!cfg.any_case && !toks[i].cap) {
                    continue;
                }
                let fits = (1..len).all(|k| {
                    toks[i + k].norm == cfg.words[k]
                        && !toks[i + k - 1].possessive
                        && is_space_gap(gap(i + k - 1, i + k))
                });
                if fits && best.is_none_or(|(l, _)| len > l) {
                    best = Some((len, c));
                }
            }
            if let Some((len, c)) = best {
                taken[i..i + len].iter_mut().for_each(|t| *t = true);
                spans.push(Span {
                    first: i,
                    last: i + len - 1,
                    rule: Rule::Configured,
                    configured: Some(c),
                });
                i += len;
            } else {
                i += 1;
            }
        }

        // 2. Titles, relations and given names; the longest wins an overlap.
        let word = |i: usize| &text[toks[i].start..toks[i].end];
        let is_title = |i: usize| TITLES.contains(&word(i));
        let can_start = |i: usize| {
            let t = &toks[i];
            !taken[i] && t.cap && !t.glued && !lex.is_stop(&t.norm) && !is_title(i)
        };
        let extend = |start: usize, allow_given: bool| -> usize {
            let mut last = start;
            for _ in 0..2 {
                if toks[last].possessive {
                    break;
                }
                let mut k = last + 1;
                let mut particles = 0;
                while k < n
                    && particles < 2
                    && !taken[k]
                    && PARTICLES.contains(&word(k))
                    && !toks[k].possessive
                    && is_inline_gap(gap(k - 1, k))
                {
                    k += 1;
                    particles += 1;
                }
                if k >= n || !is_inline_gap(gap(k - 1, k)) || !can_start(k) {
                    break;
                }
                let norm = &toks[k].norm;
                if lex.is_ambiguous(norm) || (!allow_given && lex.is_given(norm)) {
                    break;
                }
                last = k;
            }
            last
        };
        let mut cands: Vec<Span> = Vec::new();
        for i in 0..n {
            if taken[i] {
                continue;
            }
            let t = &toks[i];
            if is_title(i)
                && !t.possessive
                && i + 1 < n
                && is_title_gap(gap(i, i + 1))
                && can_start(i + 1)
            {
                cands.push(Span::new(i + 1, extend(i + 1, true), Rule::Title));
            }
            if POSSESSORS.contains(&t.norm.as_str()) && !t.possessive {
                let mut j = i + 1;
                if j < n
                    && !taken[j]
                    && MODIFIERS.contains(&toks[j].norm.as_str())
                    && is_inline_gap(gap(i, j))
                {
                    j += 1;
                }
                if j + 1 < n
                    && !taken[j]
                    && RELATIONS.contains(&toks[j].norm.as_str())
                    && !toks[j].possessive
                    && is_inline_gap(gap(j - 1, j))
                    && is_relation_gap(gap(j, j + 1))
                    && can_start(j + 1)
                {
                    cands.push(Span::new(j + 1, extend(j + 1, true), Rule::Relation));
                }
            }
            if can_start(i) {
                let (given, ambiguous) = lex.classify(word(i), &t.norm);
                if given {
                    let last = extend(i, true);
                    cands.push(Span::new(i, last, Rule::Given));
                } else if ambiguous {
                    let last = extend(i, !sentence_start(text, toks[i].start));
                    if last > i {
                        cands.push(Span::new(i, last, Rule::Given));
                    }
                }
            }
        }
        cands.sort_by_key(|s| (s.first, std::cmp::Reverse(s.last), s.rule));
        for mut s in cands {
            if taken[s.first..=s.last].iter().any(|t| *t) {
                continue;
            }
            // A common East Asian surname written before the given name.
            if s.rule == Rule::Given
                && s.first > 0
                && !taken[s.first - 1]
                && toks[s.first - 1].cap
                && !toks[s.first - 1].glued
                && !toks[s.first - 1].possessive
                && SURNAMES_FIRST.contains(&word(s.first - 1))
                && is_inline_gap(gap(s.first - 1, s.first))
            {
                s.first -= 1;
            }
            taken[s.first..=s.last].iter_mut().for_each(|t| *t = true);
            spans.push(s);
        }

        // 3. A word of a name found above, or of a configured name, on its own.
        let mut parts: HashSet<&str> = self.configured_parts.keys().map(String::as_str).collect();
        for s in &spans {
            if s.last > s.first || matches!(s.rule, Rule::Title | Rule::Relation) {
                parts.extend(
                    toks[s.first..=s.last]
                        .iter()
                        .map(|t| t.norm.as_str())
                        .filter(|w| counts_alone(w)),
                );
            }
        }
        let mut alone = Vec::new();
        for i in 0..n {
            let t = &toks[i];
            if !taken[i] && t.cap && !t.glued && !is_title(i) && parts.contains(t.norm.as_str()) {
                alone.push(Span::new(i, i, Rule::Part));
            }
        }
        spans.extend(alone);
        spans.sort_by_key(|s| s.first);
        spans
    }
}

/// The one element of a set, if it has exactly one.
fn only(set: &HashSet<String>) -> Option<String> {
    (set.len() == 1)
        .then(|| set.iter().next().cloned())
        .flatten()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rule {
    Configured,
    Title,
    Relation,
    Given,
    Part,
}

#[derive(Debug)]
struct Span {
    /// Token indexes, inclusive.
    first: usize,
    last: usize,
    rule: Rule,
    configured: Option<usize>,
}

impl Span {
    fn new(first: usize, last: usize, rule: Rule) -> Span {
        Span {
            first,
            last,
            rule,
            configured: None,
        }
    }
}

/// How often `needle` occurs in `after` beyond its occurrences in `before`.
fn grown(before: &str, after: &str, needle: &str) -> usize {
    after
        .matches(needle)
        .count()
        .saturating_sub(before.matches(needle).count())
}

/// HMAC-SHA256 (RFC 2104) over the `sha2` crate.
fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(msg);
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner);
    outer.finalize().into()
}

// ---- words ----

#[derive(Debug)]
struct Tok {
    /// Byte range of the name part (a possessive `'s` excluded).
    start: usize,
    end: usize,
    /// End of the whole word, `'s` included.
    after: usize,
    norm: String,
    cap: bool,
    possessive: bool,
    /// Touches a digit or `_`: part of an identifier.
    glued: bool,
}

fn is_word_char(c: char) -> bool {
    c.is_alphabetic() || is_combining(c)
}

fn is_joiner(c: char) -> bool {
    matches!(c, '\'' | '\u{2019}' | '-')
}

fn is_glue(c: char) -> bool {
    c.is_ascii_digit() || c == '_'
}

/// Words: letters (and combining accents), with `'`, `’` or `-` inside (`O'Brien`, `Jean-Pierre`).
fn tokenize(text: &str) -> Vec<Tok> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !is_word_char(chars[i].1) {
            i += 1;
            continue;
        }
        let mut e = i + 1;
        while e < chars.len() {
            if is_word_char(chars[e].1) {
                e += 1;
            } else if is_joiner(chars[e].1) && chars.get(e + 1).is_some_and(|c| is_word_char(c.1)) {
                e += 2;
            } else {
                break;
            }
        }
        let start = chars[i].0;
        let after = chars.get(e).map_or(text.len(), |c| c.0);
        let whole = &text[start..after];
        let stem = whole
            .strip_suffix("'s")
            .or_else(|| whole.strip_suffix("\u{2019}s"))
            .filter(|s| !s.is_empty());
        let (end, possessive) = match stem {
            Some(s) => (start + s.len(), true),
            None => (after, false),
        };
        let name = &text[start..end];
        let glued =
            (i > 0 && is_glue(chars[i - 1].1)) || chars.get(e).is_some_and(|c| is_glue(c.1));
        out.push(Tok {
            start,
            end,
            after,
            norm: name.to_lowercase(),
            cap: is_capitalised(name),
            possessive,
            glued,
        });
        i = e;
    }
    out
}

/// Upper-case first letter, then not upper-case, and some lower-case letter: `Ana`, `McDonald`, `O'Brien`.
fn is_capitalised(w: &str) -> bool {
    let mut cs = w.chars();
    match (cs.next(), cs.next()) {
        (Some(a), Some(b)) => {
            a.is_uppercase() && !b.is_uppercase() && w.chars().any(char::is_lowercase)
        }
        _ => false,
    }
}

/// A name's words: (as written, lower-cased).
fn name_words(name: &str) -> Vec<(String, String)> {
    tokenize(name)
        .into_iter()
        .map(|t| (name[t.start..t.end].to_owned(), t.norm))
        .collect()
}

fn join_norm(words: &[(String, String)]) -> String {
    words
        .iter()
        .map(|(_, n)| n.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

fn normalise(name: &str) -> String {
    join_norm(&name_words(name))
}

/// Whether a word of a full name may stand for the full name on its own.
fn counts_alone(norm: &str) -> bool {
    let lex = lexicon();
    norm.chars().count() >= 2
        && !PARTICLES.contains(&norm)
        && !lex.is_ambiguous(norm)
        && !lex.is_stop(norm)
}

fn is_inline_gap(g: &str) -> bool {
    !g.is_empty() && g.chars().all(|c| matches!(c, ' ' | '\t' | '\u{a0}'))
}

fn is_space_gap(g: &str) -> bool {
    !g.is_empty() && g.chars().all(char::is_whitespace)
}

fn is_title_gap(g: &str) -> bool {
    is_inline_gap(g.strip_prefix('.').unwrap_or(g))
}

fn is_relation_gap(g: &str) -> bool {
    is_inline_gap(g.strip_prefix(',').unwrap_or(g))
}

/// Whether the word at byte `start` opens a sentence, a line or the text.
fn sentence_start(text: &str, start: usize) -> bool {
    let before = &text[..start];
    let trimmed = before.trim_end();
    trimmed.is_empty()
        || before[trimmed.len()..].contains('\n')
        || trimmed.ends_with([
            '.', '!', '?', ':', '"', '\u{201c}', '(', '*', '#', '>', '-', '\u{2022}',
        ])
}

// ---- lexicon ----

const TITLES: &[&str] = &[
    "Mr",
    "Mrs",
    "Ms",
    "Miss",
    "Mx",
    "Dr",
    "Prof",
    "Professor",
    "Doctor",
    "Sir",
    "Dame",
    "Lady",
    "Lord",
    "Mme",
    "Mlle",
    "Madame",
    "Monsieur",
    "Herr",
    "Frau",
    "Sr",
    "Sra",
    "Srta",
    "Señor",
    "Señora",
    "Señorita",
    "Doña",
    "Dott",
    "Dra",
];

const POSSESSORS: &[&str] = &["my", "our", "his", "her", "their"];

const MODIFIERS: &[&str] = &[
    "best", "good", "old", "close", "dear", "little", "big", "older", "younger", "elder", "new",
    "former", "late",
];

const RELATIONS: &[&str] = &[
    "friend",
    "boyfriend",
    "girlfriend",
    "partner",
    "wife",
    "husband",
    "fiancé",
    "fiancée",
    "fiance",
    "fiancee",
    "spouse",
    "ex",
    "colleague",
    "coworker",
    "co-worker",
    "workmate",
    "boss",
    "manager",
    "supervisor",
    "mentor",
    "mentee",
    "teammate",
    "assistant",
    "client",
    "customer",
    "landlord",
    "landlady",
    "tenant",
    "neighbour",
    "neighbor",
    "roommate",
    "flatmate",
    "housemate",
    "mother",
    "father",
    "mom",
    "mum",
    "dad",
    "mama",
    "papa",
    "parent",
    "son",
    "daughter",
    "brother",
    "sister",
    "sibling",
    "cousin",
    "uncle",
    "aunt",
    "auntie",
    "nephew",
    "niece",
    "grandmother",
    "grandfather",
    "grandma",
    "grandpa",
    "granny",
    "child",
    "kid",
    "baby",
    "teacher",
    "tutor",
    "student",
    "doctor",
    "therapist",
    "dentist",
    "lawyer",
    "accountant",
    "coach",
    "trainer",
    "nanny",
    "babysitter",
];

const PARTICLES: &[&str] = &[
    "de", "del", "della", "da", "das", "dos", "di", "du", "van", "von", "der", "den", "la", "le",
    "bin", "ibn", "al", "el", "ten", "ter",
];

/// Common Chinese, Japanese, Korean and Vietnamese surnames, taken when written just before a given name.
const SURNAMES_FIRST: &[&str] = &[
    "Wang",
    "Li",
    "Zhang",
    "Liu",
    "Chen",
    "Yang",
    "Huang",
    "Zhao",
    "Wu",
    "Zhou",
    "Xu",
    "Sun",
    "Zhu",
    "Hu",
    "Guo",
    "Lin",
    "Gao",
    "Luo",
    "Zheng",
    "Liang",
    "Xie",
    "Song",
    "Tang",
    "Han",
    "Feng",
    "Deng",
    "Cao",
    "Peng",
    "Zeng",
    "Xiao",
    "Tian",
    "Dong",
    "Pan",
    "Yuan",
    "Cai",
    "Jiang",
    "Yu",
    "Du",
    "Ye",
    "Cheng",
    "Wei",
    "Su",
    "Lu",
    "Ding",
    "Ren",
    "Shen",
    "Yao",
    "Jin",
    "Tan",
    "Sato",
    "Suzuki",
    "Takahashi",
    "Tanaka",
    "Watanabe",
    "Ito",
    "Yamamoto",
    "Nakamura",
    "Kobayashi",
    "Kato",
    "Yoshida",
    "Yamada",
    "Sasaki",
    "Yamaguchi",
    "Matsumoto",
    "Inoue",
    "Kimura",
    "Hayashi",
    "Shimizu",
    "Saito",
    "Kim",
    "Lee",
    "Park",
    "Choi",
    "Jung",
    "Kang",
    "Cho",
    "Yoon",
    "Jang",
    "Lim",
    "Nguyen",
    "Tran",
    "Pham",
    "Hoang",
    "Phan",
    "Vu",
    "Dang",
    "Bui",
    "Ngo",
    "Duong",
];

struct Lexicon {
    given: HashSet<String>,
    ambiguous: HashSet<String>,
    stop: HashSet<String>,
}

/// Whether a lower-cased word is in a list: as written, or without combining accents (a decomposed `José` is
/// `Jose` and U+0301; the lists hold composed and unaccented spellings).
fn listed(set: &HashSet<String>, norm: &str) -> bool {
    set.contains(norm)
        || (norm.chars().any(is_combining)
            && set.contains(
                &norm
                    .chars()
                    .filter(|c| !is_combining(*c))
                    .collect::<String>(),
            ))
}

fn is_combining(c: char) -> bool {
    ('\u{300}'..='\u{36f}').contains(&c)
}

impl Lexicon {
    fn is_given(&self, norm: &str) -> bool {
        listed(&self.given, norm)
    }

    fn is_ambiguous(&self, norm: &str) -> bool {
        listed(&self.ambiguous, norm)
    }

    fn is_stop(&self, norm: &str) -> bool {
        listed(&self.stop, norm)
    }

    /// (a given name, a given name that is also a common word) for a word as written and lower-cased. A
    /// hyphenated name whose parts are all capitalised and whose first part is a given name (`Jean-Luc`,
    /// `Marie-Claire`, not `Mark-up`) is a given name.
    fn classify(&self, word: &str, norm: &str) -> (bool, bool) {
        if self.is_ambiguous(norm) {
            return (false, true);
        }
        if self.is_given(norm) {
            return (true, false);
        }
        let first = norm.split('-').next().unwrap_or(norm);
        (
            norm.contains('-')
                && word.split('-').all(is_capitalised)
                && (self.is_given(first) || self.is_ambiguous(first)),
            false,
        )
    }
}

fn lexicon() -> &'static Lexicon {
    static LEX: OnceLock<Lexicon> = OnceLock::new();
    LEX.get_or_init(|| Lexicon {
        given: list(include_str!("pseudonym/given_names.txt")),
        ambiguous: list(include_str!("pseudonym/ambiguous_names.txt")),
        stop: list(include_str!("pseudonym/stop_words.txt")),
    })
}

/// Whitespace-separated words, `#` lines skipped, lower-cased.
fn list(data: &str) -> HashSet<String> {
    data.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(str::split_whitespace)
        .map(str::to_lowercase)
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: [u8; KEY_LEN] = {
        let mut k = [0u8; KEY_LEN];
        let mut i = 0;
        while i < KEY_LEN {
            k[i] = i as u8;
            i += 1;
        }
        k
    };

    fn with_names(names: &[&str]) -> Pseudonymiser {
        let options = Options {
            names: true,
            user_names: names.iter().map(|s| (*s).to_owned()).collect(),
        };
        Pseudonymiser::new(KEY, Vec::new(), options).unwrap()
    }

    fn plain() -> Pseudonymiser {
        with_names(&[])
    }

    /// The pseudonyms in a text, in order.
    fn pseudonyms(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find(PREFIX) {
            let hex: String = rest[at + PREFIX.len()..]
                .chars()
                .take_while(|c| c.is_ascii_hexdigit())
                .collect();
            out.push(format!("{PREFIX}{hex}"));
            rest = &rest[at + PREFIX.len()..];
        }
        out
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        assert_eq!(
            hex::encode(hmac_sha256(&[0x0b; 20], b"Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex::encode(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // A key longer than the block is hashed first (RFC 4231 case 6).
        assert_eq!(
            hex::encode(hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn the_pseudonym_is_the_keyed_hash_of_the_normalised_name() {
        // Computed independently: HMAC-SHA256(key = bytes 0..32, "ana garcía"), upper-case hex, first 4 digits.
        let out = plain().pseudonymise("Met Ana García today.");
        assert_eq!(out.text, "Met Person_7FA3 today.");
        assert_eq!(
            out.new,
            vec![Mapping {
                pseudonym: "Person_7FA3".into(),
                real: "Ana García".into()
            }]
        );
        // Spacing does not change the name, nor case for a configured name.
        assert_eq!(plain().pseudonymise("Ana   García").text, "Person_7FA3");
        let mut p = with_names(&["ana garcía"]);
        assert_eq!(p.pseudonymise("ANA GARCÍA").text, "Person_7FA3");
    }

    #[test]
    fn every_kind_is_replaced_and_counted() {
        let mut p = with_names(&["Zebedee Quarrington"]);
        let text = "Hi, I'm Zebedee Quarrington. Mail ana.garcia@example.com or call +34 612 345 678; \
                    rent is €1,200. export OPENAI_API_KEY=sk-proj-AbCdEfGhIjKlMnOpQrSt123 then ask Dr Okonkwo \
                    and my colleague Priyanka.";
        let out = p.pseudonymise(text);
        for gone in [
            "Zebedee",
            "Quarrington",
            "ana.garcia",
            "612",
            "1,200",
            "sk-proj",
            "Okonkwo",
            "Priyanka",
        ] {
            assert!(!out.text.contains(gone), "{gone} survived: {}", out.text);
        }
        assert_eq!(
            out.counts,
            Counts {
                email: 1,
                phone: 1,
                amount: 1,
                secret: 1,
                name: 3
            },
            "{}",
            out.text
        );
        assert!(out.text.contains("Dr Person_"), "{}", out.text);
        assert!(out.text.contains("my colleague Person_"), "{}", out.text);
        assert_eq!(out.new.len(), 3);
        assert_eq!(
            p.reidentify(&out.text)
                .matches("Zebedee Quarrington")
                .count(),
            1
        );
    }

    #[test]
    fn names_off_keeps_names_and_scrubs_the_rest() {
        let options = Options {
            names: false,
            user_names: vec!["Ana García".into()],
        };
        let mut p = Pseudonymiser::new(KEY, Vec::new(), options).unwrap();
        let out = p.pseudonymise("Ana García, ana@example.com, Dr Smith");
        assert_eq!(out.text, "Ana García, [EMAIL], Dr Smith");
        assert_eq!(out.counts.name, 0);
        assert_eq!(out.counts.email, 1);
        assert!(out.new.is_empty());
    }

    #[test]
    fn consistent_across_calls_and_instances() {
        let mut a = plain();
        let first = a.pseudonymise("Lucía Fernández wrote to Kenji Watanabe.");
        let again = a.pseudonymise("Kenji Watanabe answered Lucía Fernández.");
        assert!(again.new.is_empty(), "already mapped: {:?}", again.new);
        let p1 = pseudonyms(&first.text);
        let p2 = pseudonyms(&again.text);
        assert_eq!(p1.len(), 2);
        assert_ne!(p1[0], p1[1]);
        assert_eq!(p1, vec![p2[1].clone(), p2[0].clone()]);
        // Another instance with the same key and the stored map; and one starting empty.
        let mut b = Pseudonymiser::new(KEY, first.new.clone(), Options::default()).unwrap();
        let mut c = plain();
        for q in [&mut b, &mut c] {
            assert_eq!(
                q.pseudonymise("Kenji Watanabe answered Lucía Fernández.")
                    .text,
                again.text
            );
        }
        assert_eq!(
            b.reidentify(&again.text),
            "Kenji Watanabe answered Lucía Fernández."
        );
    }

    #[test]
    fn a_different_key_gives_different_pseudonyms() {
        let text = "Olivia Brown, Mohammed Haddad, Priya Sharma, Haruto Sato, François Dubois";
        let a = plain().pseudonymise(text).text;
        let mut other = KEY;
        other[0] ^= 1;
        let b = Pseudonymiser::new(other, Vec::new(), Options::default())
            .unwrap()
            .pseudonymise(text)
            .text;
        let (pa, pb) = (pseudonyms(&a), pseudonyms(&b));
        assert_eq!(pa.len(), 5, "{a}");
        assert_eq!(pb.len(), 5, "{b}");
        for (x, y) in pa.iter().zip(&pb) {
            assert_ne!(x, y);
        }
    }

    /// Two names whose pseudonyms share the first 4 hex digits under `KEY`, found by search.
    fn colliding_names() -> (String, String) {
        let mut seen: HashMap<String, String> = HashMap::new();
        for i in 0u32.. {
            let mut name = String::from("Q");
            let mut n = i;
            for _ in 0..4 {
                name.push(char::from(b'a' + (n % 26) as u8));
                n /= 26;
            }
            let prefix = hex::encode_upper(hmac_sha256(&KEY, name.to_lowercase().as_bytes()))[..4]
                .to_owned();
            if let Some(other) = seen.get(&prefix) {
                return (other.clone(), name);
            }
            seen.insert(prefix, name);
        }
        unreachable!()
    }

    #[test]
    fn a_collision_takes_more_digits() {
        let (x, y) = colliding_names();
        let mut p = with_names(&[&x, &y]);
        let out = p.pseudonymise(&format!("{x} met {y}."));
        let ps = pseudonyms(&out.text);
        assert_eq!(ps.len(), 2, "{}", out.text);
        assert_eq!(ps[0].len(), PREFIX.len() + 4);
        assert_eq!(ps[1].len(), PREFIX.len() + 5);
        assert!(ps[1].starts_with(&ps[0]));
        assert_eq!(p.reidentify(&out.text), format!("{x} met {y}."));
        // The map decides: with the second name stored first, it keeps the short one.
        let stored = vec![Mapping {
            pseudonym: ps[0].clone(),
            real: y.clone(),
        }];
        let options = Options {
            names: true,
            user_names: vec![x.clone(), y.clone()],
        };
        let mut q = Pseudonymiser::new(KEY, stored, options).unwrap();
        let out = q.pseudonymise(&format!("{x} and {y}"));
        let x5 = &hex::encode_upper(hmac_sha256(&KEY, x.to_lowercase().as_bytes()))[..5];
        assert_eq!(out.text, format!("{PREFIX}{x5} and {}", ps[0]));
        assert_eq!(q.reidentify(&out.text), format!("{x} and {y}"));
    }

    #[test]
    fn reidentify_restores_known_and_keeps_unknown() {
        let mut p = plain();
        let out = p.pseudonymise("Sofia Rossi and Arjun Mehta");
        let ps = pseudonyms(&out.text);
        let answer = format!(
            "{} prefers tea; {}'s plan; {} too; Person_0000 is unknown; x{} is glued; Person_AB",
            ps[0],
            ps[1],
            ps[0].to_lowercase().replace("person_", "Person_"),
            ps[1]
        );
        assert_eq!(
            p.reidentify(&answer),
            format!(
                "Sofia Rossi prefers tea; Arjun Mehta's plan; Sofia Rossi too; Person_0000 is unknown; x{} is glued; Person_AB",
                ps[1]
            )
        );
        // After a digit or a non-letter symbol, as `pseudonymise` may write it (found by the property test below).
        let mut q = with_names(&["Ana"]);
        for text in ["id1Ana", "²Ana\u{e000}", "x_Ana"] {
            let out = q.pseudonymise(text);
            assert!(!out.text.contains("Ana"), "{text:?} → {:?}", out.text);
            assert_eq!(q.reidentify(&out.text), text);
        }
        // A pseudonym followed by more hex letters is read as the longest known one.
        assert_eq!(p.reidentify(&format!("{}ed it", ps[0])), "Sofia Rossied it");
    }

    #[test]
    fn common_words_and_sentence_starts_are_not_names() {
        for text in [
            "May I ask something?",
            "Will this work on Monday?",
            "Rust is great, and so is Python.",
            "In June we ship; in April we plan.",
            "Mark the task as done. Grace period ends Friday.",
            "Bill me later. Rose by 3%.",
            "Claude wrote the code and Ruby ran it.",
            "The GitHub Actions run failed on Tuesday.",
            "Will Ana come?",
            "let's call mark_done() and ana2 later",
            "Mark-up is fine.",
        ] {
            let out = plain().pseudonymise(text);
            let kept: String = if text == "Will Ana come?" {
                "Will Person_".into()
            } else {
                text.into()
            };
            assert!(out.text.starts_with(&kept), "{text:?} → {:?}", out.text);
            if text != "Will Ana come?" {
                assert_eq!(out.counts.name, 0, "{text:?} → {:?}", out.text);
            }
        }
    }

    #[test]
    fn common_words_count_with_a_surname_title_or_relation() {
        for (text, name) in [
            ("I watched Will Smith yesterday", "Will Smith"),
            ("ask Dr May about it", "May"),
            ("Dr. Grace Hopper wrote it", "Grace Hopper"),
            ("my wife, Rose, agrees", "Rose"),
            ("my best friend Bill said so", "Bill"),
            ("Mrs Okafor called", "Okafor"),
            ("we met Grace Kelly there", "Grace Kelly"),
        ] {
            let mut p = plain();
            let out = p.pseudonymise(text);
            assert!(!out.text.contains(name), "{text:?} → {:?}", out.text);
            assert_eq!(out.counts.name, 1, "{text:?} → {:?}", out.text);
            assert_eq!(p.reidentify(&out.text), text);
        }
    }

    #[test]
    fn accented_and_international_names() {
        for (text, gone) in [
            ("José Martínez llamó", vec!["José", "Martínez"]),
            ("Zoë and Björn Müller came", vec!["Zoë", "Björn", "Müller"]),
            (
                "Françoise Lefèvre et Jean-Luc Picard",
                vec!["Françoise", "Lefèvre", "Jean-Luc", "Picard"],
            ),
            ("Ana de la Cruz firmó", vec!["Ana de la Cruz"]),
            (
                "Wang Wei and Tanaka Yuki",
                vec!["Wang", "Wei", "Tanaka", "Yuki"],
            ),
            (
                "Fatima Al-Sayed, Aarav Patel and Siobhan O'Brien's friend",
                vec!["Fatima", "Sayed", "Aarav", "Patel", "Siobhan", "O'Brien"],
            ),
            // Decomposed accents (e + U+0301) stay inside the word.
            (
                "Jose\u{301} Pe\u{301}rez",
                vec!["Jose\u{301}", "Pe\u{301}rez"],
            ),
        ] {
            let mut p = plain();
            let out = p.pseudonymise(text);
            for g in gone {
                assert!(!out.text.contains(g), "{g} in {text:?} → {:?}", out.text);
            }
            assert_eq!(p.reidentify(&out.text), text);
        }
        // A configured accented name matches in any case.
        let mut p = with_names(&["Ana García"]);
        let out = p.pseudonymise("ana garcía y ANA GARCÍA");
        assert_eq!(pseudonyms(&out.text).len(), 2);
        assert_eq!(p.reidentify(&out.text), "Ana García y Ana García");
    }

    #[test]
    fn parts_of_a_name_share_its_pseudonym() {
        let mut p = plain();
        let out = p.pseudonymise("Ana García called. Later Ana said García's plan works.");
        let ps = pseudonyms(&out.text);
        assert_eq!(ps.len(), 3, "{}", out.text);
        assert!(ps.iter().all(|x| *x == ps[0]), "{}", out.text);
        assert_eq!(out.new.len(), 1);
        // A configured full name lends its pseudonym to its parts even when only a part is in the text.
        let mut q = with_names(&["Ana García"]);
        let full = q.pseudonymise("Ana García").text;
        assert_eq!(
            q.pseudonymise("Ana said so").text,
            format!("{full} said so")
        );
        assert_eq!(q.pseudonymise("ask García").text, format!("ask {full}"));
        // A bare first name shared by two full names in view is kept apart from both.
        let mut r = plain();
        let out = r.pseudonymise("Ana García and Ana López met; Ana left.");
        let ps = pseudonyms(&out.text);
        assert_eq!(ps.len(), 3, "{}", out.text);
        assert!(
            ps[0] != ps[1] && ps[2] != ps[0] && ps[2] != ps[1],
            "{}",
            out.text
        );
        // Across calls, the stored full name is found again by its first word.
        let mut s = plain();
        let full = s.pseudonymise("Ana García").text;
        assert_eq!(s.pseudonymise("Ana again").text, format!("{full} again"));
        // A surname after a title is linked to the full name in the same text.
        let out = plain().pseudonymise("John Okafor spoke; Dr Okafor agreed.");
        let ps = pseudonyms(&out.text);
        assert_eq!(ps.len(), 2);
        assert_eq!(ps[0], ps[1], "{}", out.text);
    }

    #[test]
    fn possessives_and_identifiers() {
        let mut p = plain();
        let out = p.pseudonymise("Olivia's laptop, olivia_config and Person_ABCD stay");
        assert!(out.text.starts_with("Person_"), "{}", out.text);
        assert!(
            out.text
                .contains("'s laptop, olivia_config and Person_ABCD stay"),
            "{}",
            out.text
        );
        assert_eq!(
            p.reidentify(&out.text),
            "Olivia's laptop, olivia_config and Person_ABCD stay"
        );
    }

    #[test]
    fn a_bad_map_is_refused() {
        let m = |p: &str, r: &str| Mapping {
            pseudonym: p.into(),
            real: r.into(),
        };
        let cases = [
            (vec![m("Person_abcd", "Ana")], "not `Person_`"),
            (vec![m("Person_ABC", "Ana")], "not `Person_`"),
            (vec![m("Human_ABCD", "Ana")], "not `Person_`"),
            (vec![m("Person_ABCD", "  123 ")], "no letters"),
            (
                vec![m("Person_ABCD", "Ana"), m("Person_ABCD", "Bob")],
                "already mapped",
            ),
            (
                vec![m("Person_ABCD", "Ana"), m("Person_ABCE", "ana")],
                "already has",
            ),
        ];
        for (map, want) in cases {
            let err = Pseudonymiser::new(KEY, map, Options::default()).unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
            assert!(
                !err.to_string().contains("Bob"),
                "names stay out of errors: {err}"
            );
        }
        // The same entry twice is fine.
        let p = Pseudonymiser::new(
            KEY,
            vec![m("Person_ABCD", "Ana"), m("Person_ABCD", "ANA")],
            Options::default(),
        )
        .unwrap();
        assert_eq!(p.mapping_count(), 1);
        assert!(!format!("{p:?}").contains("Ana"));
    }

    #[test]
    fn the_word_lists_are_sound() {
        let lex = lexicon();
        assert!(lex.given.len() >= 600, "{}", lex.given.len());
        assert!(lex.ambiguous.len() >= 100, "{}", lex.ambiguous.len());
        for w in [
            "josé",
            "müller",
            "françoise",
            "zoë",
            "joão",
            "mohammed",
            "priya",
            "wei",
            "haruto",
        ] {
            assert!(
                lex.given.contains(w) || lex.stop.contains(w) || w == "müller",
                "{w}"
            );
        }
        for set in [&lex.given, &lex.ambiguous, &lex.stop] {
            for w in set {
                assert_eq!(tokenize(w).len(), 1, "{w:?} is not one word");
                assert!(
                    !lex.given.contains(w) || !lex.stop.contains(w),
                    "{w} is both a name and a stop word"
                );
            }
        }
    }

    #[test]
    fn chat_like_text() {
        let cases: &[(&str, &[&str], &[&str])] = &[
            (
                "Can you help me write an email to Sarah Johnson about the Q3 report? She works with my boss Tom.",
                &["Sarah", "Johnson", "Tom"],
                &["Can you help", "Q3 report? She works with my boss Person_"],
            ),
            (
                "I told Dr. Patel that May is too early. Will Kevin join? Monday works for Priya and me.",
                &["Patel", "Kevin", "Priya"],
                &[
                    "Dr. Person_",
                    "that May is",
                    ". Will Person_",
                    "Monday works",
                ],
            ),
            (
                "Here's the plan:\n- Ana García reviews the PR\n- Mark merges\nThanks, Jorge",
                &["Ana", "García", "Jorge"],
                &["Here's the plan:", "- Mark merges", "Thanks, Person_"],
            ),
            (
                "The Docker container uses Python 3.12 and Node; Claude Code suggested React. Adam Smith's book.",
                &["Adam", "Smith"],
                &[
                    "The Docker container uses Python 3.12 and Node; Claude Code suggested React.",
                    "'s book.",
                ],
            ),
            (
                "Albert Einstein and Marie Curie met in Brussels. Lisa from HR called about Einstein.",
                &["Albert", "Einstein", "Marie", "Curie", "Lisa"],
                &["met in Brussels", "from HR called about Person_"],
            ),
        ];
        for (text, gone, kept) in cases {
            let mut p = plain();
            let out = p.pseudonymise(text);
            for g in *gone {
                assert!(!out.text.contains(g), "{g} in {:?}", out.text);
            }
            for k in *kept {
                assert!(out.text.contains(k), "{k:?} not in {:?}", out.text);
            }
            let back = p.reidentify(&out.text);
            for g in *gone {
                assert!(back.contains(g), "{g} not back in {back:?}");
            }
        }
    }

    const VOCAB: &[&str] = &[
        "we", "met", "at", "the", "office", "and", "talked", "about", "plans", "for", "it", "was",
        "fine", "then", "left", "coffee", "report", "draft", "numbers", "because", "said", "that",
        ".", ",",
    ];

    fn name_part() -> impl Strategy<Value = String> {
        prop_oneof![
            "[A-Z][a-z]{3,8}",
            "[A-ZÁÉÓÜÇ][a-záéíóúñüçè]{3,8}",
            proptest::sample::select(vec![
                "Ana", "García", "Will", "Smith", "Kenji", "Zoë", "Müller", "O'Brien", "Jean-Luc",
                "Priya"
            ])
            .prop_map(str::to_owned),
        ]
    }

    /// 1–3 configured names, no word shared between them or with the filler vocabulary.
    fn configured() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::vec(proptest::collection::vec(name_part(), 1..=3), 1..=3)
            .prop_filter_map("distinct words", |names| {
                let mut seen = HashSet::new();
                for w in names.iter().flatten() {
                    let w = w.to_lowercase();
                    if VOCAB.contains(&w.as_str()) || !seen.insert(w) {
                        return None;
                    }
                }
                Some(names.into_iter().map(|n| n.join(" ")).collect())
            })
    }

    fn sep() -> impl Strategy<Value = &'static str> {
        proptest::sample::select(vec![" ", "\n", ", ", ". ", " (", ") ", " \"", "\" ", "; "])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn no_configured_name_survives(
            names in configured(),
            pre in "(?s).{0,40}",
            post in "(?s).{0,40}",
            s1 in sep(),
            s2 in sep(),
            which in 0usize..3,
        ) {
            let name = &names[which % names.len()];
            let text = format!("{pre}{s1}{name}{s2}{post}");
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let out = with_names(&refs).pseudonymise(&text);
            prop_assert!(!out.text.contains(name.as_str()), "{:?} survived in {:?} → {:?}", name, text, out.text);
        }

        #[test]
        fn reidentify_restores_what_pseudonymise_replaced(
            names in configured(),
            items in proptest::collection::vec(prop_oneof![
                3 => proptest::sample::select(VOCAB.to_vec()).prop_map(|w| (Some(w), 0usize)),
                1 => (0usize..3).prop_map(|i| (None, i)),
            ], 0..30),
        ) {
            let text = items
                .iter()
                .map(|(w, i)| w.map_or_else(|| names[i % names.len()].clone(), str::to_owned))
                .collect::<Vec<_>>()
                .join(" ");
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let mut p = with_names(&refs);
            let out = p.pseudonymise(&text);
            for n in &names {
                prop_assert!(!out.text.contains(n.as_str()), "{:?} in {:?}", n, out.text);
            }
            prop_assert_eq!(p.reidentify(&out.text), text.clone());
            // Another instance from the stored map gives the same text and reads it back the same.
            let options = Options { names: true, user_names: names.clone() };
            let mut q = Pseudonymiser::new(KEY, out.new.clone(), options).unwrap();
            let again = q.pseudonymise(&text);
            prop_assert_eq!(&again.text, &out.text);
            prop_assert!(again.new.is_empty());
            prop_assert_eq!(q.reidentify(&out.text), text);
        }

        #[test]
        fn pseudonymising_twice_changes_nothing_more(text in "(?s)[ -~\n\u{e9}\u{fc}A-Z]{0,120}", names in configured()) {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let mut p = with_names(&refs);
            let once = p.pseudonymise(&text).text;
            let twice = p.pseudonymise(&once);
            prop_assert_eq!(&twice.text, &once);
        }

        #[test]
        fn every_new_pseudonym_reads_back(text in "(?s)(.|[A-Z][a-z]{2,6}|Ana|Dr |my friend ){0,60}") {
            let mut p = plain();
            let out = p.pseudonymise(&text);
            prop_assert!(out.counts.name >= out.new.len());
            let back = p.reidentify(&out.text);
            for m in &out.new {
                prop_assert!(is_pseudonym(&m.pseudonym), "{:?}", m);
                prop_assert!(!back.contains(m.pseudonym.as_str()), "{:?} left in {:?}", m, back);
            }
        }
    }
}
