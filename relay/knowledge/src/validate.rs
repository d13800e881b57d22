//! Mechanical validation of what a model proposed: one of the five kinds, a topic, a position and a reasoning
//! that says why (long enough, not boilerplate), confidence and stability from their lists (medium and stable when
//! absent), tags a list of strings, and sources that are lines of the window. Anything malformed is dropped with
//! its reason — never guessed into shape.

use serde_json::Value;

use crate::prompt::{CONFIDENCE, KINDS, STABILITY};

/// A reasoning shorter than this (characters) does not say why.
pub const MIN_REASONING_CHARS: usize = 25;
/// ... nor one of fewer words.
pub const MIN_REASONING_WORDS: usize = 5;
/// Longest fields an entry may have, in characters (a model's answer shape asks for less; an agent's proposal
/// must keep to these too). Longer is refused, not cut.
pub const MAX_CHARS: [(&str, usize); 4] = [
    ("topic", 200),
    ("position", 1_000),
    ("reasoning", 2_000),
    ("context", 1_000),
];
/// Longest tag.
pub const MAX_TAG_CHARS: usize = 60;

/// Phrases that stand in for a reason without giving one.
const BOILERPLATE: &[&str] = &[
    "it's important",
    "it is important",
    "this is better",
    "it is better",
    "it's better",
    "best practice",
    "makes sense",
    "it depends",
    "good idea",
    "for obvious reasons",
    "because it is good",
    "because it's good",
    "it works better",
    "the user prefers",
    "the user likes",
    "as mentioned",
    "no reason given",
    "not specified",
    "n/a",
];

/// A candidate that passed validation.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub kind: String,
    pub topic: String,
    pub position: String,
    pub reasoning: String,
    pub context: Option<String>,
    pub confidence: String,
    pub stability: String,
    pub tags: Vec<String>,
    /// Window labels, deduplicated, in order.
    pub sources: Vec<u32>,
}

impl Candidate {
    /// The candidate as the judge and the reduce step read it.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "type": self.kind, "topic": self.topic, "position": self.position, "reasoning": self.reasoning,
            "context": self.context.clone().unwrap_or_default(), "confidence": self.confidence,
            "stability": self.stability, "tags": self.tags, "sources": self.sources,
        })
    }
}

/// Validates one proposed entry from a window whose labels are `1..=labels`.
pub fn candidate(v: &Value, labels: u32) -> Result<Candidate, String> {
    let obj = v.as_object().ok_or("not an object")?;
    let text = |k: &str| -> Result<String, String> {
        match obj.get(k) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(squeeze(s)),
            Some(Value::String(_)) | None | Some(Value::Null) => Err(format!("{k} is empty")),
            Some(_) => Err(format!("{k} is not text")),
        }
    };
    let kind = text("type")?.to_ascii_lowercase();
    if !KINDS.contains(&kind.as_str()) {
        return Err(format!("type {kind:?} is not one of {KINDS:?}"));
    }
    for (k, max) in MAX_CHARS {
        let n = obj
            .get(k)
            .and_then(Value::as_str)
            .map_or(0, |s| s.chars().count());
        if n > max {
            return Err(format!("{k} is {n} characters, at most {max}"));
        }
    }
    let topic = text("topic")?;
    let position = text("position")?;
    let reasoning = text("reasoning")?;
    for (k, v) in [
        ("topic", &topic),
        ("position", &position),
        ("reasoning", &reasoning),
    ] {
        repetition_check(k, v)?;
    }
    meta_check(&topic, &position)?;
    boilerplate_check(&reasoning)?;
    let choice = |k: &str, allowed: &[&str], default: &str| -> Result<String, String> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(default.to_owned()),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(default.to_owned()),
            Some(Value::String(s)) => {
                let s = s.trim().to_ascii_lowercase();
                if allowed.contains(&s.as_str()) {
                    Ok(s)
                } else {
                    Err(format!("{k} {s:?} is not one of {allowed:?}"))
                }
            }
            Some(_) => Err(format!("{k} is not text")),
        }
    };
    let confidence = choice("confidence", &CONFIDENCE, "medium")?;
    let stability = choice("stability", &STABILITY, "stable")?;
    let tags = match obj.get("tags") {
        Some(Value::Array(list)) if list.iter().all(Value::is_string) => list
            .iter()
            .filter_map(Value::as_str)
            .map(|t| squeeze(t).to_lowercase())
            .filter(|t| !t.is_empty() && t.chars().count() <= MAX_TAG_CHARS)
            .take(8)
            .collect(),
        _ => Vec::new(),
    };
    let context = match obj.get("context") {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(squeeze(s)),
        _ => None,
    };
    let mut sources = Vec::new();
    match obj.get("sources") {
        Some(Value::Array(list)) => {
            for s in list {
                let n = s
                    .as_u64()
                    .or_else(|| {
                        s.as_str()
                            .and_then(|t| t.trim_matches(['[', ']', ' ']).parse().ok())
                    })
                    .ok_or("a source is not a line label")?;
                if n == 0 || n > u64::from(labels) {
                    return Err(format!("source {n} is not a line of the window"));
                }
                if !sources.contains(&(n as u32)) {
                    sources.push(n as u32);
                }
            }
        }
        _ => return Err("sources is not a list".into()),
    }
    if sources.is_empty() {
        return Err("cites no line".into());
    }
    Ok(Candidate {
        kind,
        topic,
        position,
        reasoning,
        context,
        confidence,
        stability,
        tags,
        sources,
    })
}

fn boilerplate_check(reasoning: &str) -> Result<(), String> {
    let chars = reasoning.chars().count();
    let words = reasoning.split_whitespace().count();
    if chars < MIN_REASONING_CHARS || words < MIN_REASONING_WORDS {
        return Err(format!(
            "reasoning is too short to say why ({chars} characters, {words} words)"
        ));
    }
    // Boilerplate: once the stock phrases are taken out, too few words of substance are left.
    let mut rest = reasoning.to_lowercase();
    let mut found = None;
    for phrase in BOILERPLATE {
        if rest.contains(phrase) {
            found.get_or_insert(*phrase);
            rest = rest.replace(phrase, " ");
        }
    }
    if let Some(phrase) = found {
        let substance = rest
            .split(|c: char| !c.is_alphanumeric() && c != '\'')
            .filter(|w| w.chars().filter(|c| c.is_alphanumeric()).count() >= 4)
            .count();
        if substance < 4 {
            return Err(format!("reasoning is boilerplate ({phrase:?})"));
        }
    }
    Ok(())
}

/// Text that says one thing over and over (a small model's loop) is no entry.
fn repetition_check(field: &str, text: &str) -> Result<(), String> {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    if words.len() < 8 {
        return Ok(());
    }
    let distinct: std::collections::HashSet<&String> = words.iter().collect();
    if distinct.len() * 10 < words.len() * 4 {
        return Err(format!(
            "{field} repeats itself ({} distinct words of {})",
            distinct.len(),
            words.len()
        ));
    }
    Ok(())
}

/// Words that make an entry about the conversation, not about the person.
const META: &[&str] = &[
    "conversation",
    "the conversation",
    "user",
    "the user",
    "assistant",
    "the assistant",
    "chat",
    "this chat",
];

/// An entry whose topic or position is only the conversation or its participants is meta-talk.
fn meta_check(topic: &str, position: &str) -> Result<(), String> {
    for (k, v) in [("topic", topic), ("position", position)] {
        let bare = v
            .trim_matches(|c: char| !c.is_alphanumeric())
            .to_lowercase();
        if META.contains(&bare.as_str()) {
            return Err(format!(
                "{k} is about the conversation, not the person ({v:?})"
            ));
        }
    }
    Ok(())
}

/// Whitespace runs as single spaces, trimmed.
fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn good() -> Value {
        json!({"type": "Standard", "topic": "dependency pinning", "position": "Pin every dependency",
               "reasoning": "Two unpinned upgrades broke production and cost a weekend each",
               "context": "", "confidence": "high", "stability": "durable", "tags": ["Ops"], "sources": [2, "3", 2]})
    }

    #[test]
    fn a_good_entry_passes_normalised() {
        let c = candidate(&good(), 3).unwrap();
        assert_eq!(c.kind, "standard");
        assert_eq!(c.tags, ["ops"]);
        assert_eq!(c.sources, [2, 3]);
        assert_eq!(c.context, None);
    }

    #[test]
    fn defaults_apply_only_to_what_is_missing() {
        let mut v = good();
        v.as_object_mut().unwrap().remove("confidence");
        v["stability"] = Value::Null;
        v["tags"] = json!("ops, infra");
        let c = candidate(&v, 3).unwrap();
        assert_eq!(
            (c.confidence.as_str(), c.stability.as_str()),
            ("medium", "stable")
        );
        assert!(
            c.tags.is_empty(),
            "tags that are not a list of strings become empty"
        );
        let mut bad = good();
        bad["confidence"] = json!("very");
        assert!(candidate(&bad, 3).unwrap_err().contains("confidence"));
    }

    #[test]
    fn malformed_entries_are_dropped_with_their_reason() {
        let cases: [(&str, Value, &str); 8] = [
            ("type", json!("vibe"), "type"),
            ("topic", json!(""), "topic is empty"),
            ("position", json!(7), "position is not text"),
            ("reasoning", json!("It's important."), "too short"),
            (
                "reasoning",
                json!("Honestly this is better, it's important to me."),
                "boilerplate",
            ),
            ("sources", json!([]), "cites no line"),
            ("sources", json!([9]), "not a line"),
            ("sources", json!("2"), "not a list"),
        ];
        for (k, val, want) in cases {
            let mut v = good();
            v[k] = val;
            let err = candidate(&v, 3).unwrap_err();
            assert!(err.contains(want), "{k}: {err}");
        }
        assert!(candidate(&json!([1]), 3).is_err());
        let mut looped = good();
        looped["reasoning"] = json!(
            "The conversation, the conversation, the conversation, the conversation, the topic"
        );
        assert!(
            candidate(&looped, 3)
                .unwrap_err()
                .contains("repeats itself")
        );
        let mut huge = good();
        huge["reasoning"] = json!("because it matters a lot ".repeat(200));
        assert!(
            candidate(&huge, 3)
                .unwrap_err()
                .contains("reasoning is 5000 characters, at most 2000")
        );
        let mut meta = good();
        meta["topic"] = json!("Conversation");
        assert!(
            candidate(&meta, 3)
                .unwrap_err()
                .contains("about the conversation")
        );
        meta["topic"] = json!("dependency pinning");
        meta["position"] = json!("USER");
        assert!(
            candidate(&meta, 3)
                .unwrap_err()
                .contains("position is about")
        );
    }
}
