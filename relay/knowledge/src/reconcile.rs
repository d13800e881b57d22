//! A new entry against what is already known: the same topic with a similar position reinforces the entry that
//! says it (whatever its status — a rejected entry said again stays rejected); the same topic held differently
//! becomes a variant of it, with its context; anything else is new. Never a duplicate.

use std::collections::HashSet;

use personkit_store::knowledge::Entry;

/// Topics whose word sets overlap at least this much (Jaccard) are the same topic.
pub const SAME_TOPIC: f64 = 0.5;
/// Positions whose character-trigram sets overlap at least this much are the same position.
pub const SAME_POSITION: f64 = 0.45;

/// What to do with a new entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    New,
    Reinforces(String),
    VariantOf(String),
}

/// Decides against `known` (entries near the topic, best first).
pub fn decide(topic: &str, position: &str, known: &[Entry]) -> Outcome {
    let t = words(topic);
    let p = trigrams(position);
    let mut variant = None;
    for e in known {
        if jaccard(&t, &words(&e.topic)) < SAME_TOPIC {
            continue;
        }
        if jaccard(&p, &trigrams(&e.position)) >= SAME_POSITION {
            return Outcome::Reinforces(e.id.clone());
        }
        if variant.is_none() {
            // A variant hangs off the entry the others are variants of.
            variant = Some(e.variant_of.clone().unwrap_or_else(|| e.id.clone()));
        }
    }
    variant.map_or(Outcome::New, Outcome::VariantOf)
}

const STOP: &[&str] = &[
    "a", "an", "the", "of", "to", "and", "or", "in", "on", "for", "with", "vs",
];

fn words(s: &str) -> HashSet<String> {
    s.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && !STOP.contains(w))
        .map(stem)
        .collect()
}

/// A word without its plural ending (`dependencies` → `dependency`, `tests` → `test`).
fn stem(w: &str) -> String {
    if let Some(root) = w.strip_suffix("ies").filter(|r| r.len() > 2) {
        format!("{root}y")
    } else if w.len() > 3 && w.ends_with('s') && !w.ends_with("ss") {
        w[..w.len() - 1].to_owned()
    } else {
        w.to_owned()
    }
}

fn trigrams(s: &str) -> HashSet<String> {
    let norm: Vec<char> = s
        .to_lowercase()
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { ' ' })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .collect();
    norm.windows(3).map(|w| w.iter().collect()).collect()
}

fn jaccard(a: &HashSet<String>, b: &HashSet<String>) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let inter = a.intersection(b).count() as f64;
    inter / (a.len() as f64 + b.len() as f64 - inter)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(id: &str, topic: &str, position: &str, variant_of: Option<&str>) -> Entry {
        Entry {
            id: id.into(),
            kind: "standard".into(),
            topic: topic.into(),
            position: position.into(),
            reasoning: String::new(),
            context: None,
            confidence: "high".into(),
            stability: "stable".into(),
            tags: Vec::new(),
            status: "approved".into(),
            origin: "pipeline".into(),
            reason: None,
            model: None,
            prompt_version: None,
            scores: None,
            variant_of: variant_of.map(str::to_owned),
            reinforced: 0,
            sources_forgotten: false,
            created_at: String::new(),
            updated_at: String::new(),
            decided_at: None,
            decided_by: None,
            sources: Vec::new(),
        }
    }

    #[test]
    fn same_topic_similar_position_reinforces_different_position_is_a_variant_else_new() {
        let k = [known(
            "a",
            "Dependency pinning",
            "Pin every dependency to an exact version",
            None,
        )];
        assert_eq!(
            decide(
                "dependency pinning",
                "Pin each dependency to an exact version",
                &k
            ),
            Outcome::Reinforces("a".into())
        );
        assert_eq!(
            decide(
                "pinning dependencies",
                "Let prototypes float on the latest versions",
                &k
            ),
            Outcome::VariantOf("a".into())
        );
        assert_eq!(
            decide("code review", "Review every change", &k),
            Outcome::New
        );
        let with_variant = [known(
            "v",
            "dependency pinning",
            "Float in prototypes",
            Some("a"),
        )];
        assert_eq!(
            decide(
                "dependency pinning",
                "Never pin anything at all, ever",
                &with_variant
            ),
            Outcome::VariantOf("a".into()),
            "a variant of a variant hangs off the root"
        );
    }
}
