//! Query text handling: terms for FTS5 (stopwords dropped, each term quoted, OR-ed) and snippets with the
//! matched words marked.

/// English function words that carry no topic. Dropped from FTS queries (BM25 gives them little weight anyway,
/// but with OR semantics they make every turn a candidate and push real matches out of the candidate window).
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "before", "being", "both", "but", "by", "can", "could", "did", "do", "does", "doing",
    "done", "during", "each", "for", "from", "had", "has", "have", "having", "he", "her", "here",
    "hers", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "might",
    "more", "most", "my", "no", "nor", "not", "of", "on", "or", "other", "our", "ours", "out",
    "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their",
    "theirs", "them", "then", "there", "these", "they", "this", "those", "to", "too", "under",
    "until", "up", "us", "very", "was", "we", "were", "what", "when", "where", "which", "while",
    "who", "whom", "why", "will", "with", "would", "you", "your", "yours", "s", "t", "d", "ll",
    "m", "re", "ve",
];

/// Lowercased word tokens of `text` (letters and digits), in order, with duplicates.
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Content terms of a query: words minus stopwords, deduplicated, in order. Falls back to all words when every
/// word is a stopword.
pub fn query_terms(text: &str) -> Vec<String> {
    let all = words(text);
    let mut seen = std::collections::HashSet::new();
    let content: Vec<String> = all
        .iter()
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .filter(|w| seen.insert((*w).clone()))
        .cloned()
        .collect();
    if content.is_empty() {
        let mut seen = std::collections::HashSet::new();
        all.into_iter().filter(|w| seen.insert(w.clone())).collect()
    } else {
        content
    }
}

/// An FTS5 MATCH expression: every term quoted (so no query syntax leaks through) and OR-ed. `None` when the
/// query has no words.
pub fn fts_match(terms: &[String]) -> Option<String> {
    if terms.is_empty() {
        return None;
    }
    Some(
        terms
            .iter()
            .map(|t| format!("\"{}\"", t.replace('"', "")))
            .collect::<Vec<_>>()
            .join(" OR "),
    )
}

/// A phrase OR-expression for entity names and aliases.
pub fn fts_phrases(names: &[String]) -> Option<String> {
    let parts: Vec<String> = names
        .iter()
        .map(|n| words(n).join(" "))
        .filter(|n| !n.is_empty())
        .map(|n| format!("\"{n}\""))
        .collect();
    if parts.is_empty() {
        None
    } else {
        Some(parts.join(" OR "))
    }
}

/// Crude English stem for matching snippets against porter-stemmed FTS hits: a shared prefix of the term.
fn stem(t: &str) -> &str {
    let n = t.chars().count();
    if n <= 4 {
        return t;
    }
    let keep = n.saturating_sub(if n > 6 { 3 } else { 1 });
    let idx = t
        .char_indices()
        .nth(keep)
        .map(|(i, _)| i)
        .unwrap_or(t.len());
    &t[..idx]
}

/// A window of `content` of about `width` characters around the first matched term, with every word that
/// starts like a query term wrapped as `open`word`close`. Whitespace is collapsed.
pub fn snippet(content: &str, terms: &[String], width: usize, open: &str, close: &str) -> String {
    let flat: String = content.split_whitespace().collect::<Vec<_>>().join(" ");
    let stems: Vec<String> = terms.iter().map(|t| stem(t).to_owned()).collect();
    let is_match = |w: &str| {
        let lw = w.to_lowercase();
        !lw.is_empty() && stems.iter().any(|s| lw.starts_with(s.as_str()))
    };
    // Word spans (byte offsets) of alphanumeric runs.
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in flat.char_indices() {
        match (c.is_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                spans.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        spans.push((s, flat.len()));
    }
    let first = spans
        .iter()
        .find(|(s, e)| is_match(&flat[*s..*e]))
        .map(|(s, _)| *s)
        .unwrap_or(0);
    // Window start: back off a third of the width, to a char boundary.
    let chars: Vec<(usize, char)> = flat.char_indices().collect();
    let first_ci = chars.iter().position(|(b, _)| *b >= first).unwrap_or(0);
    let from_ci = first_ci.saturating_sub(width / 3);
    let to_ci = (from_ci + width).min(chars.len());
    let from = chars.get(from_ci).map(|c| c.0).unwrap_or(0);
    let to = chars.get(to_ci).map(|c| c.0).unwrap_or(flat.len());
    let mut out = String::new();
    if from > 0 {
        out.push('…');
    }
    let mut pos = from;
    for (s, e) in spans.iter().filter(|(s, e)| *s >= from && *e <= to) {
        if is_match(&flat[*s..*e]) {
            out.push_str(&flat[pos..*s]);
            out.push_str(open);
            out.push_str(&flat[*s..*e]);
            out.push_str(close);
            pos = *e;
        }
    }
    out.push_str(&flat[pos..to]);
    if to < flat.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn terms_drop_stopwords_and_quote() {
        let t = query_terms("What did Caroline say about the \"Postgres\" migration?");
        assert_eq!(t, vec!["caroline", "say", "postgres", "migration"]);
        assert_eq!(
            fts_match(&t).as_deref(),
            Some("\"caroline\" OR \"say\" OR \"postgres\" OR \"migration\"")
        );
        assert_eq!(query_terms("what is it"), vec!["what", "is", "it"]);
        assert_eq!(fts_match(&[]), None);
    }

    #[test]
    fn snippet_marks_matches() {
        let s = snippet(
            "We talked about migrating Postgres to version 16 last month.",
            &["postgres".into()],
            40,
            "[",
            "]",
        );
        assert!(s.contains("[Postgres]"), "{s}");
    }
}
