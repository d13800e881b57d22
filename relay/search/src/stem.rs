//! The words FTS5 indexes, computed in Rust: the `porter unicode61` tokenizer of `messages_fts` (runs of letters
//! and digits, lowercased, diacritics removed, then the Porter stemmer as SQLite's FTS5 implements it). The
//! turn-pair rescoring ([`crate::pair`]) counts query words in texts that FTS5 did not score together, so it must
//! split and stem them the way FTS5 does; `tokens_match_fts5` checks that against SQLite.

use unicode_normalization::UnicodeNormalization;

/// FTS5 leaves tokens longer than this (bytes) unstemmed.
const MAX_STEMMED: usize = 64;

/// The indexed terms of `text`, in order, with duplicates.
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if c.is_alphanumeric() {
            word.push(c);
        } else if !word.is_empty() {
            out.push(term(&word));
            word.clear();
        }
    }
    if !word.is_empty() {
        out.push(term(&word));
    }
    out
}

/// One word as FTS5 stores it: lowercased, without diacritics, stemmed.
pub fn term(word: &str) -> String {
    let folded: String = if word.is_ascii() {
        word.to_ascii_lowercase()
    } else {
        word.nfd()
            .filter(|c| !unicode_normalization::char::is_combining_mark(*c))
            .flat_map(char::to_lowercase)
            .collect()
    };
    porter(&folded)
}

/// The Porter stemmer (M. F. Porter, 1980) with the two changes of its C reference that SQLite's FTS5 also makes
/// (`bli` → `ble`, `logi` → `log` in step 2). Works on bytes: non-ASCII bytes count as consonants, and every
/// suffix it removes is ASCII, so the result stays valid UTF-8. Words shorter than 3 bytes or longer than 64
/// are left alone.
pub fn porter(word: &str) -> String {
    if word.len() < 3 || word.len() > MAX_STEMMED {
        return word.to_owned();
    }
    let mut w = word.as_bytes().to_vec();
    step1a(&mut w);
    step1b(&mut w);
    step1c(&mut w);
    step2(&mut w);
    step3(&mut w);
    step4(&mut w);
    step5(&mut w);
    String::from_utf8(w).unwrap_or_else(|_| word.to_owned())
}

fn is_consonant(w: &[u8], i: usize) -> bool {
    match w[i] {
        b'a' | b'e' | b'i' | b'o' | b'u' => false,
        b'y' => i == 0 || !is_consonant(w, i - 1),
        _ => true,
    }
}

/// Porter's m: the number of vowel-consonant sequences in `w`.
fn measure(w: &[u8]) -> usize {
    let mut m = 0;
    let mut i = 0;
    while i < w.len() && is_consonant(w, i) {
        i += 1;
    }
    while i < w.len() {
        while i < w.len() && !is_consonant(w, i) {
            i += 1;
        }
        if i == w.len() {
            break;
        }
        while i < w.len() && is_consonant(w, i) {
            i += 1;
        }
        m += 1;
    }
    m
}

fn has_vowel(w: &[u8]) -> bool {
    (0..w.len()).any(|i| !is_consonant(w, i))
}

fn double_consonant(w: &[u8]) -> bool {
    let n = w.len();
    n >= 2 && w[n - 1] == w[n - 2] && is_consonant(w, n - 1)
}

/// Ends consonant-vowel-consonant, the last not `w`, `x` or `y`.
fn cvc(w: &[u8]) -> bool {
    let n = w.len();
    n >= 3
        && is_consonant(w, n - 1)
        && !is_consonant(w, n - 2)
        && is_consonant(w, n - 3)
        && !matches!(w[n - 1], b'w' | b'x' | b'y')
}

/// The stem left after removing `suffix`, when `w` ends with it and is longer.
fn stem_of<'a>(w: &'a [u8], suffix: &str) -> Option<&'a [u8]> {
    let s = suffix.as_bytes();
    (w.len() > s.len() && w.ends_with(s)).then(|| &w[..w.len() - s.len()])
}

fn replace(w: &mut Vec<u8>, suffix_len: usize, with: &str) {
    w.truncate(w.len() - suffix_len);
    w.extend_from_slice(with.as_bytes());
}

fn step1a(w: &mut Vec<u8>) {
    if w.last() != Some(&b's') {
        return;
    }
    if w.ends_with(b"sses") || w.ends_with(b"ies") {
        w.truncate(w.len() - 2);
    } else if w.len() >= 2 && w[w.len() - 2] != b's' {
        w.pop();
    }
}

fn step1b(w: &mut Vec<u8>) {
    if let Some(stem) = stem_of(w, "eed") {
        if measure(stem) > 0 {
            w.pop();
        }
        return;
    }
    let cut = ["ed", "ing"]
        .into_iter()
        .find(|s| stem_of(w, s).is_some_and(has_vowel));
    let Some(cut) = cut else { return };
    w.truncate(w.len() - cut.len());
    if w.ends_with(b"at") || w.ends_with(b"bl") || w.ends_with(b"iz") {
        w.push(b'e');
    } else if double_consonant(w) && !matches!(w[w.len() - 1], b'l' | b's' | b'z') {
        w.pop();
    } else if measure(w) == 1 && cvc(w) {
        w.push(b'e');
    }
}

fn step1c(w: &mut [u8]) {
    let n = w.len();
    if w[n - 1] == b'y' && has_vowel(&w[..n - 1]) {
        w[n - 1] = b'i';
    }
}

/// Replaces the first listed suffix `w` ends with (and is longer than) when the stem before it has m > `min_m`;
/// later suffixes are not tried once one matched. (The C reference and SQLite first pick a group of rules by the
/// word's second-to-last letter; two suffixes that both end a word share that letter, so the first match over
/// the whole ordered list is the same rule.)
fn first_rule(w: &mut Vec<u8>, rules: &[(&str, &str)], min_m: usize) {
    for (suffix, with) in rules {
        if let Some(stem) = stem_of(w, suffix) {
            if measure(stem) > min_m {
                replace(w, suffix.len(), with);
            }
            return;
        }
    }
}

fn step2(w: &mut Vec<u8>) {
    const RULES: &[(&str, &str)] = &[
        ("ational", "ate"),
        ("tional", "tion"),
        ("enci", "ence"),
        ("anci", "ance"),
        ("izer", "ize"),
        ("logi", "log"),
        ("bli", "ble"),
        ("alli", "al"),
        ("entli", "ent"),
        ("eli", "e"),
        ("ousli", "ous"),
        ("ization", "ize"),
        ("ation", "ate"),
        ("ator", "ate"),
        ("alism", "al"),
        ("iveness", "ive"),
        ("fulness", "ful"),
        ("ousness", "ous"),
        ("aliti", "al"),
        ("iviti", "ive"),
        ("biliti", "ble"),
    ];
    first_rule(w, RULES, 0);
}

fn step3(w: &mut Vec<u8>) {
    const RULES: &[(&str, &str)] = &[
        ("icate", "ic"),
        ("ative", ""),
        ("alize", "al"),
        ("iciti", "ic"),
        ("ical", "ic"),
        ("ful", ""),
        ("ness", ""),
    ];
    first_rule(w, RULES, 0);
}

fn step4(w: &mut Vec<u8>) {
    const SUFFIXES: &[&str] = &[
        "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion",
        "ou", "ism", "ate", "iti", "ous", "ive", "ize",
    ];
    // "ion" needs the stem to end in s or t as well; the rest only m > 1.
    for suffix in SUFFIXES {
        if let Some(stem) = stem_of(w, suffix) {
            let ok =
                measure(stem) > 1 && (*suffix != "ion" || matches!(stem.last(), Some(b's' | b't')));
            if ok {
                w.truncate(stem.len());
            }
            return;
        }
    }
}

fn step5(w: &mut Vec<u8>) {
    if let Some(stem) = stem_of(w, "e") {
        let m = measure(stem);
        if m > 1 || (m == 1 && !cvc(stem)) {
            w.pop();
        }
    }
    if w.len() > 1 && w.ends_with(b"ll") && measure(w) > 1 {
        w.pop();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn porter_examples_of_the_paper() {
        for (w, s) in [
            ("caresses", "caress"),
            ("ponies", "poni"),
            ("cats", "cat"),
            ("feed", "feed"),
            ("agreed", "agre"),
            ("plastered", "plaster"),
            ("motoring", "motor"),
            ("sing", "sing"),
            ("conflated", "conflat"),
            ("troubled", "troubl"),
            ("sized", "size"),
            ("hopping", "hop"),
            ("falling", "fall"),
            ("filing", "file"),
            ("happy", "happi"),
            ("relational", "relat"),
            ("conditional", "condit"),
            ("generalization", "gener"),
            ("electrical", "electr"),
            ("adoption", "adopt"),
            ("controll", "control"),
            ("roll", "roll"),
            ("tournaments", "tournament"),
        ] {
            assert_eq!(porter(w), s, "{w}");
        }
    }

    #[test]
    fn tokens_fold_case_and_diacritics() {
        assert_eq!(
            tokens("Café RUNNING, naïve—2023!"),
            ["cafe", "run", "naiv", "2023"]
        );
        assert!(tokens(" ,. ").is_empty());
    }

    /// Every word of a varied English text gets the term FTS5's `porter unicode61` stores for it.
    #[test]
    fn tokens_match_fts5() {
        let text = include_str!("../../../ARCHITECTURE.md");
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61');
             CREATE VIRTUAL TABLE v USING fts5vocab(t, instance);",
        )
        .unwrap();
        let mut words: Vec<&str> = text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        words.extend([
            "generously",
            "happiness",
            "relational",
            "agreement",
            "hopeful",
            "triplicate",
            "formality",
            "sensibility",
            "vietnamization",
            "predication",
            "operator",
            "feudalism",
            "decisiveness",
            "callousness",
            "sensitivity",
            "electricity",
            "hopefulness",
            "goodness",
            "revival",
            "allowance",
            "inference",
            "airliner",
            "gyroscopic",
            "adjustable",
            "defensible",
            "irritant",
            "replacement",
            "adjustment",
            "dependent",
            "homologou",
            "communism",
            "activate",
            "angulariti",
            "homologous",
            "effective",
            "bowdlerize",
            "probate",
            "cease",
            "controlling",
            "rolling",
            "analogi",
            "skies",
            "dying",
            "lying",
            "sky",
            "news",
            "yes",
            "eyes",
            "ties",
            "Ünïcödé",
            "x",
            "an",
        ]);
        words.sort_unstable();
        words.dedup();
        for (i, w) in words.iter().enumerate() {
            conn.execute(
                "INSERT INTO t(rowid, x) VALUES (?1, ?2)",
                rusqlite::params![i as i64 + 1, w],
            )
            .unwrap();
        }
        let mut stmt = conn
            .prepare("SELECT doc, term FROM v ORDER BY doc")
            .unwrap();
        let stored: Vec<(i64, String)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(stored.len(), words.len());
        let wrong: Vec<String> = stored
            .iter()
            .filter(|(doc, term)| tokens(words[*doc as usize - 1]) != [term.clone()])
            .map(|(doc, term)| {
                format!(
                    "{} → ours {:?}, FTS5 {term}",
                    words[*doc as usize - 1],
                    tokens(words[*doc as usize - 1])
                )
            })
            .collect();
        assert!(
            wrong.is_empty(),
            "{} of {} differ: {wrong:#?}",
            wrong.len(),
            words.len()
        );
    }
}
