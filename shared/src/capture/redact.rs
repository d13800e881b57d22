//! Redaction of secrets before a turn leaves the browser. Built-in patterns cover the secrets people paste into
//! chats (env-style assignments, provider tokens, bearer headers, PEM blocks, cloud keys, JWTs, service-account
//! JSON); the user adds their own regexes, which are compiled by this same engine so that an invalid one is
//! reported in the popup and never reaches the capture path.
//!
//! The engine is `regex-lite` (it keeps the extension's wasm module small): the `regex` crate's syntax, except
//! that `\w`, `\d`, `\s`, `\b` and case-insensitive matching are ASCII-only and `\p{..}` classes and class set
//! operations (`--`, `&&`, `~~`) are refused as invalid.
//!
//! A secret is replaced by a marker `[REDACTED:<kind>]`. Markers are never matched again, and rules are applied
//! until nothing changes, which makes `redact` idempotent (property-tested below).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::OnceLock;

use regex_lite::{Regex, RegexBuilder};
use serde::Serialize;

/// Longest user pattern accepted, in bytes.
pub const MAX_USER_PATTERN_LEN: usize = 1000;
/// Most user patterns accepted.
pub const MAX_USER_PATTERNS: usize = 100;
/// Compiled-size limit of one user pattern (keeps a pathological pattern from eating the worker's memory).
const USER_SIZE_LIMIT: usize = 1 << 20;

/// One redaction rule. When the regex has capture groups, the first group that took part in a match is the
/// secret and the rest of the match (a variable name, a header name) is kept; otherwise the whole match is.
#[derive(Debug)]
struct Rule {
    kind: &'static str,
    re: Regex,
    scope: Option<&'static Scope>,
}

/// Where a built-in rule runs. The regex engine has no literal prefilter and no DFA (to keep the wasm small), so
/// every search is a PikeVM scan: a built-in rule runs only on the lines (or the text) containing one of its
/// literal needles, found with a plain substring search. User patterns run on the whole text.
#[derive(Debug)]
struct Scope {
    /// The rule cannot match unless one of these occurs.
    needles: &'static [&'static str],
    /// Compare needles ignoring ASCII case.
    ci: bool,
    /// The rule matches within one line: run it on each line that holds a needle, not on the whole text.
    lines: bool,
}

const fn scope(needles: &'static [&'static str], ci: bool, lines: bool) -> Scope {
    Scope { needles, ci, lines }
}

static PEM: Scope = scope(&["-----BEGIN "], false, false);
static PEM_KEY: Scope = scope(&["PRIVATE KEY-----"], false, false);
static PRIVATE_KEY: Scope = scope(&["\"private_key"], false, true);
static GITHUB_PAT: Scope = scope(&["github_pat_"], false, true);
static GITHUB: Scope = scope(&["ghp_", "gho_", "ghu_", "ghs_", "ghr_"], false, true);
static OPENAI: Scope = scope(&["sk-"], false, true);
static SLACK: Scope = scope(&["xoxa-", "xoxb-", "xoxp-", "xoxr-", "xoxs-"], false, true);
static AWS: Scope = scope(
    &[
        "AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA",
    ],
    false,
    true,
);
static JWT: Scope = scope(&["eyJ"], false, true);
static AUTHORIZATION: Scope = scope(&["authorization"], true, true);
static BEARER: Scope = scope(&["bearer"], true, true);
static AWS_SECRET: Scope = scope(&["secret"], true, true);
static ENV_UPPER: Scope = scope(
    &[
        "KEY",
        "TOKEN",
        "SECRET",
        "PASS",
        "PWD",
        "CREDENTIAL",
        "AUTH",
    ],
    false,
    true,
);
static ENV_LOWER: Scope = scope(&["key", "secret", "token", "passw"], true, true);

/// The built-in rules, in the order they run.
const BUILTIN: &[(&str, &str, &Scope)] = &[
    // PEM blocks, terminated; then an unterminated private key runs to the end of the text.
    (
        "pem",
        r"-----BEGIN [A-Z0-9 ]{1,64}-----(?s:.)*?-----END [A-Z0-9 ]{1,64}-----",
        &PEM,
    ),
    (
        "pem",
        r"-----BEGIN [A-Z0-9 ]{0,64}PRIVATE KEY-----(?s:.)*",
        &PEM_KEY,
    ),
    // Service-account style JSON.
    (
        "private_key",
        r#""private_key(?:_id)?"\s*:\s*"([^"]+)""#,
        &PRIVATE_KEY,
    ),
    (
        "github_token",
        r"\bgithub_pat_[A-Za-z0-9_]{20,255}",
        &GITHUB_PAT,
    ),
    (
        "github_token",
        r"\bgh[pousr]_[A-Za-z0-9]{20,255}\b",
        &GITHUB,
    ),
    ("openai_key", r"\bsk-[A-Za-z0-9][A-Za-z0-9_-]{15,}", &OPENAI),
    ("slack_token", r"\bxox[abprs]-[A-Za-z0-9-]{10,}", &SLACK),
    (
        "aws_key",
        r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b",
        &AWS,
    ),
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
        &JWT,
    ),
    (
        "bearer",
        r"(?i-u:authorization)\s*:\s*(?i-u:bearer|token|basic)\s+([A-Za-z0-9._~+/=-]{6,})",
        &AUTHORIZATION,
    ),
    (
        "bearer",
        r"\b(?i-u:bearer)\s+([A-Za-z0-9._~+/-]{20,}=*)",
        &BEARER,
    ),
    (
        "aws_secret",
        r#"(?i-u:aws_?secret_?access_?key)["']?\s*[=:]\s*["']?([A-Za-z0-9/+=]{40})"#,
        &AWS_SECRET,
    ),
    // Env-style assignments with an UPPER_CASE name: quoted or unquoted value.
    (
        "env",
        r#"\b(?:[A-Z0-9]+_)*(?:KEY|APIKEY|TOKEN|SECRET|PASSWORD|PASSWD|PWD|PASS|CREDENTIALS?|AUTH)(?:_[A-Z0-9]+)*["']?\s*[=:]\s*(?:"([^"\n]+)"|'([^'\n]+)'|([^\s"'`,;]+))"#,
        &ENV_UPPER,
    ),
    // lower/mixed-case names of the obvious kinds: quoted values, or unquoted values with a digit in them.
    (
        "env",
        r#"\b(?i-u:(?:[a-z0-9]+_)*(?:api_?key|secret(?:_?key)?|access_?token|auth_?token|refresh_?token|token|passw(?:or)?d|client_?secret|private_?key))["']?\s*[=:]\s*(?:"([^"\n]{4,})"|'([^'\n]{4,})'|([A-Za-z0-9_./+=-]*[0-9][A-Za-z0-9_./+=-]*))"#,
        &ENV_LOWER,
    ),
];

fn builtin_rules() -> &'static [Rule] {
    static RULES: OnceLock<Vec<Rule>> = OnceLock::new();
    RULES.get_or_init(|| {
        BUILTIN
            .iter()
            .filter_map(|(kind, p, scope)| {
                Regex::new(p).ok().map(|re| Rule {
                    kind,
                    re,
                    scope: Some(*scope),
                })
            })
            .collect()
    })
}

fn marker_re() -> &'static Option<Regex> {
    static MARKER: OnceLock<Option<Regex>> = OnceLock::new();
    MARKER.get_or_init(|| Regex::new(r"\[REDACTED:[a-z0-9_-]{1,32}\]").ok())
}

/// Why a user pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PatternError {
    /// Position in the user's list (0-based).
    pub index: usize,
    pub pattern: String,
    /// The regex engine's own message.
    pub message: String,
}

/// Compile one user pattern with the engine and limits that redaction uses.
pub fn compile_user_pattern(pattern: &str) -> Result<Regex, String> {
    if pattern.len() > MAX_USER_PATTERN_LEN {
        return Err(format!(
            "pattern is longer than {MAX_USER_PATTERN_LEN} bytes"
        ));
    }
    let re = RegexBuilder::new(pattern)
        .size_limit(USER_SIZE_LIMIT)
        .nest_limit(64)
        .build()
        .map_err(|e| e.to_string())?;
    if re.is_match("") {
        return Err("pattern matches the empty string, so it would match everywhere".to_owned());
    }
    Ok(re)
}

/// Check a list of user patterns; blank lines are ignored. Returns the ones refused, with the reason.
pub fn validate_patterns(patterns: &[String]) -> Vec<PatternError> {
    Redactor::new(patterns).1
}

/// Built-in rules plus the user's valid patterns.
#[derive(Debug)]
pub struct Redactor {
    user: Vec<Regex>,
}

enum Seg {
    Text(String),
    Marker(String),
}

thread_local! {
    static CACHED: RefCell<Option<(Vec<String>, Rc<Redactor>)>> = const { RefCell::new(None) };
}

impl Redactor {
    /// A redactor for these user patterns, compiled once per distinct list (invalid patterns left out, as in
    /// [`Redactor::new`]).
    pub fn cached(patterns: &[String]) -> Rc<Redactor> {
        CACHED.with(|cell| {
            let mut slot = cell.borrow_mut();
            if let Some((p, r)) = slot.as_ref()
                && p.as_slice() == patterns
            {
                return Rc::clone(r);
            }
            let r = Rc::new(Redactor::new(patterns).0);
            *slot = Some((patterns.to_vec(), Rc::clone(&r)));
            r
        })
    }

    /// Compile the user's patterns; invalid ones are left out and returned as errors.
    pub fn new(user_patterns: &[String]) -> (Redactor, Vec<PatternError>) {
        let mut user = Vec::new();
        let mut errors = Vec::new();
        for (index, pattern) in user_patterns.iter().enumerate() {
            if pattern.trim().is_empty() {
                continue;
            }
            if index >= MAX_USER_PATTERNS {
                errors.push(PatternError {
                    index,
                    pattern: pattern.clone(),
                    message: format!("at most {MAX_USER_PATTERNS} patterns are used"),
                });
                continue;
            }
            match compile_user_pattern(pattern) {
                Ok(re) => user.push(re),
                Err(message) => errors.push(PatternError {
                    index,
                    pattern: pattern.clone(),
                    message,
                }),
            }
        }
        (Redactor { user }, errors)
    }

    /// Only the built-in rules.
    pub fn builtin() -> Redactor {
        Redactor { user: Vec::new() }
    }

    /// Replace every secret in `text` by a `[REDACTED:<kind>]` marker. Idempotent.
    pub fn redact(&self, text: &str) -> String {
        let mut segs = split_markers(text);
        let rules = builtin_rules()
            .iter()
            .map(|r| (r.kind, &r.re, r.scope))
            .chain(self.user.iter().map(|re| ("custom", re, None)));
        let rules: Vec<_> = rules.collect();
        loop {
            let mut changed = false;
            for (kind, re, scope) in &rules {
                let mut next = Vec::with_capacity(segs.len());
                for seg in segs {
                    match seg {
                        Seg::Text(t) => changed |= apply_scoped(kind, re, *scope, &t, &mut next),
                        m => next.push(m),
                    }
                }
                segs = next;
            }
            if !changed {
                break;
            }
        }
        let mut out = String::with_capacity(text.len());
        for seg in segs {
            match seg {
                Seg::Text(t) | Seg::Marker(t) => out.push_str(&t),
            }
        }
        out
    }
}

/// Split text into plain segments and the markers already in it.
fn split_markers(text: &str) -> Vec<Seg> {
    let mut segs = Vec::new();
    let mut last = 0;
    if let Some(re) = marker_re().as_ref().filter(|_| text.contains("[REDACTED:")) {
        for m in re.find_iter(text) {
            if m.start() > last {
                segs.push(Seg::Text(text[last..m.start()].to_owned()));
            }
            segs.push(Seg::Marker(m.as_str().to_owned()));
            last = m.end();
        }
    }
    if last < text.len() {
        segs.push(Seg::Text(text[last..].to_owned()));
    }
    segs
}

fn has_needle(text: &str, scope: &Scope) -> bool {
    if scope.ci {
        let hay = text.as_bytes();
        scope.needles.iter().any(|n| {
            let n = n.as_bytes();
            hay.len() >= n.len() && hay.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
        })
    } else {
        scope.needles.iter().any(|n| text.contains(n))
    }
}

/// Append plain text, merging it into a plain segment just before it.
fn push_text(out: &mut Vec<Seg>, text: &str) {
    if text.is_empty() {
        return;
    }
    if let Some(Seg::Text(prev)) = out.last_mut() {
        prev.push_str(text);
    } else {
        out.push(Seg::Text(text.to_owned()));
    }
}

/// Apply one rule to one plain segment, within its scope; returns whether anything was replaced.
fn apply_scoped(
    kind: &str,
    re: &Regex,
    scope: Option<&Scope>,
    text: &str,
    out: &mut Vec<Seg>,
) -> bool {
    let Some(scope) = scope else {
        return apply(kind, re, text, out);
    };
    if !has_needle(text, scope) {
        push_text(out, text);
        return false;
    }
    if !scope.lines {
        return apply(kind, re, text, out);
    }
    let mut changed = false;
    for line in text.split_inclusive('\n') {
        if has_needle(line, scope) {
            changed |= apply(kind, re, line, out);
        } else {
            push_text(out, line);
        }
    }
    changed
}

/// Apply one rule to one plain segment; returns whether anything was replaced.
fn apply(kind: &str, re: &Regex, text: &str, out: &mut Vec<Seg>) -> bool {
    let mut last = 0;
    let mut changed = false;
    for caps in re.captures_iter(text) {
        let Some(whole) = caps.get(0) else { continue };
        let span = (1..caps.len()).find_map(|i| caps.get(i)).unwrap_or(whole);
        if span.start() == span.end() || span.start() < last {
            continue;
        }
        push_text(out, &text[last..span.start()]);
        out.push(Seg::Marker(format!("[REDACTED:{kind}]")));
        last = span.end();
        changed = true;
    }
    push_text(out, &text[last..]);
    changed
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn r(text: &str) -> String {
        Redactor::builtin().redact(text)
    }

    #[test]
    fn every_builtin_rule_compiles() {
        assert_eq!(builtin_rules().len(), BUILTIN.len());
        assert!(marker_re().is_some());
    }

    #[test]
    fn env_style_assignments() {
        assert_eq!(r(r#"API_KEY="abc123def""#), r#"API_KEY="[REDACTED:env]""#);
        assert_eq!(
            r("export API_KEY=abc123def next"),
            "export API_KEY=[REDACTED:env] next"
        );
        assert_eq!(r("DB_PASSWORD='p@ss w0rd'"), "DB_PASSWORD='[REDACTED:env]'");
        assert_eq!(r("GITHUB_TOKEN: xyz987"), "GITHUB_TOKEN: [REDACTED:env]");
        assert_eq!(
            r(r#"{"api_key": "abcd-efgh"}"#),
            r#"{"api_key": "[REDACTED:env]"}"#
        );
        assert_eq!(r("password = hunter2"), "password = [REDACTED:env]");
        // Ordinary code is left alone.
        for code in [
            "tokenizer = AutoTokenizer.from_pretrained(name)",
            "monkey = banana",
            "sort_key = lambda x: x[0]",
            "token = next_token()",
            "KEYBOARD=us",
        ] {
            assert_eq!(r(code), code);
        }
    }

    #[test]
    fn provider_tokens() {
        let cases = [
            (
                "my token ghp_abcdefghijklmnopqrstuvwxyz0123456789 ok",
                "my token [REDACTED:github_token] ok",
            ),
            ("gho_ABCDEFGHIJKLMNOPQRSTUVWXYZ", "[REDACTED:github_token]"),
            (
                "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
                "[REDACTED:github_token]",
            ),
            (
                "key sk-proj-AbCdEfGhIjKlMnOpQrStUv123 end",
                "key [REDACTED:openai_key] end",
            ),
            ("sk-ant-api03-abcdefghijklmnop", "[REDACTED:openai_key]"),
            ("xoxb-1234567890-abcdefghij", "[REDACTED:slack_token]"),
            ("xoxp-1234-5678-abcdefgh", "[REDACTED:slack_token]"),
            ("id AKIAIOSFODNN7EXAMPLE.", "id [REDACTED:aws_key]."),
        ];
        for (input, want) in cases {
            assert_eq!(r(input), want, "{input}");
        }
        // Words that look a little like tokens stay.
        for keep in [
            "sk-learn is a library",
            "ghp_short",
            "xoxb-1",
            "AKIA is a prefix",
        ] {
            assert_eq!(r(keep), keep);
        }
    }

    #[test]
    fn headers_pem_jwt_json() {
        assert_eq!(
            r("curl -H 'Authorization: Bearer abc.def-ghi_123' https://x"),
            "curl -H 'Authorization: Bearer [REDACTED:bearer]' https://x"
        );
        assert_eq!(
            r("authorization: bearer tok123456"),
            "authorization: bearer [REDACTED:bearer]"
        );
        let pem = "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabc\n-----END RSA PRIVATE KEY-----\nafter";
        assert_eq!(r(pem), "before\n[REDACTED:pem]\nafter");
        let cut = "x\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA";
        assert_eq!(r(cut), "x\n[REDACTED:pem]");
        let jwt = "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";
        assert_eq!(r(jwt), "token [REDACTED:jwt]");
        let sa = r#"{"type": "service_account", "private_key_id": "abc123", "private_key": "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"}"#;
        let out = r(sa);
        assert!(!out.contains("MIIE") && !out.contains("abc123"), "{out}");
        assert!(out.contains("service_account"));
    }

    #[test]
    fn user_patterns_and_errors() {
        let pats = vec![
            "ACME-\\d{6}".to_owned(),
            "(unclosed".to_owned(),
            "".to_owned(),
            "a*".to_owned(),
            "[z-a]".to_owned(),
        ];
        let (red, errors) = Redactor::new(&pats);
        assert_eq!(
            red.redact("ticket ACME-123456 done"),
            "ticket [REDACTED:custom] done"
        );
        let idx: Vec<_> = errors.iter().map(|e| e.index).collect();
        assert_eq!(idx, vec![1, 3, 4]);
        assert!(
            errors[0].message.contains("without closing ')'"),
            "{}",
            errors[0].message
        );
        assert!(validate_patterns(&["\\bok\\b".to_owned()]).is_empty());
        assert_eq!(
            validate_patterns(&["x".repeat(MAX_USER_PATTERN_LEN + 1)]).len(),
            1
        );
    }

    /// What a user notices from the engine (documented in extension/README.md and the popup hint): Unicode
    /// classes and class set operations are refused, not silently accepted; `\w`, `\d`, `\b` and `(?i)` are
    /// ASCII-only.
    #[test]
    fn user_patterns_are_ascii_only() {
        for refused in [
            r"\p{L}+",
            r"\P{Greek}",
            r"[\w--\d]",
            r"[a-z&&[^aeiou]]",
            r"[a-z~~[aeiou]]",
        ] {
            assert_eq!(
                validate_patterns(&[refused.to_owned()]).len(),
                1,
                "{refused}"
            );
        }
        let (red, errors) = Redactor::new(&[
            r"id-\w+".to_owned(),
            "(?i)straße".to_owned(),
            r"\d{3}".to_owned(),
        ]);
        assert!(errors.is_empty(), "{errors:?}");
        // The workaround the README gives: spell non-ASCII letters out.
        let (spelled, errors) = Redactor::new(&["id-[a-zà-ÿ]+".to_owned()]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(spelled.redact("id-café!"), "[REDACTED:custom]!");
        // `\w` stops at `é`: the `é` is kept.
        assert_eq!(red.redact("id-café"), "[REDACTED:custom]é");
        // ASCII case folding only: `ß` is not folded to `ss`, the ASCII letters are.
        assert_eq!(red.redact("STRASSE STRAßE"), "STRASSE [REDACTED:custom]");
        // `\d` is `[0-9]`: Arabic-Indic digits stay.
        assert_eq!(red.redact("٣٤٥ 345"), "٣٤٥ [REDACTED:custom]");
    }

    #[test]
    fn a_user_pattern_that_matches_markers_does_not_loop_or_grow() {
        let pats = vec!["\\[".to_owned(), "REDACTED".to_owned(), "[a-z]".to_owned()];
        let (red, errors) = Redactor::new(&pats);
        assert!(errors.is_empty());
        let once = red.redact("API_KEY=abc [x]");
        assert_eq!(red.redact(&once), once);
    }

    fn secret() -> impl Strategy<Value = String> {
        prop_oneof![
            "gh[pousr]_[A-Za-z0-9]{36}",
            "github_pat_[A-Za-z0-9_]{40}",
            "sk-[A-Za-z0-9]{20,40}",
            "xox[abprs]-[0-9]{10}-[a-zA-Z0-9]{12}",
            "AKIA[A-Z0-9]{16}",
            "eyJ[A-Za-z0-9]{10}\\.eyJ[A-Za-z0-9]{10}\\.[A-Za-z0-9]{10}",
        ]
    }

    fn filler() -> impl Strategy<Value = String> {
        "(?s)[ -~\n\u{e9}\u{4e2d}\"'=:_-]{0,40}"
    }

    proptest! {
        #[test]
        fn redaction_is_idempotent(text in "(?s).{0,200}", s in secret(), pre in filler(), post in filler()) {
            let red = Redactor::builtin();
            for t in [text.clone(), format!("{pre} {s} {post}"), format!("API_KEY={s}{pre}"), format!("{pre}PASSWORD=\"{post}\"")] {
                let once = red.redact(&t);
                prop_assert_eq!(red.redact(&once), once.clone());
            }
        }

        #[test]
        fn secrets_never_survive(s in secret(), pre in filler(), post in filler()) {
            let out = r(&format!("{pre} {s} {post}"));
            prop_assert!(!out.contains(&s), "{} survived in {}", s, out);
            let out = r(&format!("{pre}\nexport MY_API_KEY=\"{s}\"\n{post}"));
            prop_assert!(!out.contains(&s), "{} survived in {}", s, out);
        }

        #[test]
        fn idempotent_with_user_patterns(text in "(?s)[ -~\n]{0,120}", pat in "[a-z\\[\\]:A-Z.]{1,4}") {
            let (red, _) = Redactor::new(&[pat]);
            let once = red.redact(&text);
            prop_assert_eq!(red.redact(&once), once.clone());
        }

        #[test]
        fn idempotent_on_adversarial_mixtures(parts in proptest::collection::vec(prop_oneof![
            Just("API_KEY"), Just("="), Just("\""), Just("'"), Just(" "), Just("\n"), Just("sk-"), Just("ghp_"),
            Just("abcdefghijklmnopqrstu"), Just("0123456789"), Just("Bearer "), Just("Authorization: "),
            Just("[REDACTED:env]"), Just("[REDACTED:"), Just("]"), Just("-----BEGIN PRIVATE KEY-----"),
            Just("-----END PRIVATE KEY-----"), Just("eyJ"), Just("."), Just("password"), Just(":"), Just("_"),
            Just("xoxb-"), Just("AKIA"), Just("\"private_key\""),
        ], 0..40)) {
            let text: String = parts.concat();
            let (red, _) = Redactor::new(&["abc".to_owned(), "\\[".to_owned()]);
            for r in [Redactor::builtin(), red] {
                let once = r.redact(&text);
                prop_assert_eq!(r.redact(&once), once.clone(), "input {:?}", text);
            }
        }

        #[test]
        fn text_without_secrets_is_unchanged(words in proptest::collection::vec("[a-z]{1,10}", 0..30)) {
            let t = words.join(" ");
            prop_assert_eq!(r(&t), t);
        }
    }
}
