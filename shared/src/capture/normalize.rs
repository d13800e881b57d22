//! Turn text normalisation: the same rendered text gives the same string (and so the same content hash) no
//! matter how the page's whitespace was laid out. Site chrome lines are removed by
//! [`crate::capture::Registry::strip_lines`] before this runs.

/// Characters that render as nothing and are dropped.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{200B}' | '\u{200C}' | '\u{200D}' | '\u{2060}' | '\u{FEFF}' | '\u{00AD}'
    )
}

/// Normalise a turn's text:
/// - `\r\n` and `\r` become `\n`; no-break and other Unicode spaces become a plain space; tabs stay (code);
/// - zero-width characters and soft hyphens are dropped;
/// - trailing whitespace of every line is removed;
/// - runs of blank lines become a single blank line; leading and trailing blank lines are removed.
/// - indentation common to every line (page layout, not content) is removed.
///
/// Relative indentation is kept: code blocks need it. The function is idempotent.
pub fn normalize(text: &str) -> String {
    let mut cleaned = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                cleaned.push('\n');
            }
            '\n' | '\t' => cleaned.push(c),
            c if is_invisible(c) => {}
            c if c.is_whitespace() => cleaned.push(' '),
            c if c.is_control() => {}
            c => cleaned.push(c),
        }
    }
    let mut out = String::with_capacity(cleaned.len());
    let mut blank_run = 0usize;
    for line in cleaned.split('\n') {
        let line = line.trim_end();
        if line.is_empty() {
            blank_run += 1;
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
            if blank_run > 0 {
                out.push('\n');
            }
        }
        blank_run = 0;
        out.push_str(line);
    }
    let common = out
        .split('\n')
        .filter(|l| !l.is_empty())
        .map(|l| l.len() - l.trim_start_matches(' ').len())
        .min()
        .unwrap_or(0);
    if common == 0 {
        return out;
    }
    out.split('\n')
        .map(|l| l.get(common..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn examples() {
        assert_eq!(
            normalize("  \n\nHello\u{a0}world  \r\n\r\n\r\n  fn x() {}\t\n\n"),
            "Hello world\n\n  fn x() {}"
        );
        assert_eq!(normalize("    a\n      b\n    c"), "a\n  b\nc");
        assert_eq!(normalize("a\u{200b}b\u{feff}"), "ab");
        assert_eq!(normalize("   \n \t "), "");
        assert_eq!(normalize("x\u{7}y"), "xy");
    }

    proptest! {
        #[test]
        fn idempotent(s in "(?s).{0,300}") {
            let once = normalize(&s);
            prop_assert_eq!(normalize(&once), once.clone());
            prop_assert!(!once.contains("\n\n\n"));
            prop_assert!(!once.contains('\r'));
            prop_assert!(!once.starts_with('\n') && !once.ends_with('\n'));
        }

        #[test]
        fn layout_whitespace_does_not_change_the_result(words in proptest::collection::vec("[a-z]{1,8}", 1..20), pad in "[ \u{a0}]{0,3}") {
            let a = words.join("\n");
            let b = words.iter().map(|w| format!("{w}{pad}")).collect::<Vec<_>>().join("\r\n");
            prop_assert_eq!(normalize(&a), normalize(&b));
        }
    }
}
