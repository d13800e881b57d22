//! File names an export writes: `<surface>/<YYYY>/<title>-<short id>.<ext>`, the same for the same thread on
//! every run and safe on Linux, macOS and Windows: Unicode NFC (macOS file systems decompose, others do not; one
//! form keeps names stable), no characters Windows refuses (`<>:"/\|?*`, controls), no trailing dots or spaces,
//! no reserved device names (`CON`, `NUL`, `COM1`, …), no leading dot (hidden files), and at most
//! [`MAX_TITLE_BYTES`] bytes of title so the whole name stays well under the common 255-byte limit.

use unicode_normalization::UnicodeNormalization;

/// Most bytes of a thread title kept in a file name.
pub const MAX_TITLE_BYTES: usize = 80;
/// Characters of the thread id that end a file name.
pub const SHORT_ID: usize = 8;

const RESERVED: &[&str] = &[
    "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
    "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
];

/// One path component made safe; `fallback` when nothing is left.
pub fn component(raw: &str, max_bytes: usize, fallback: &str) -> String {
    let mut out = String::new();
    let mut space = false;
    for c in raw.nfc() {
        let bad = c.is_control()
            || matches!(c, '<' | '>' | ':' | '"' | '/' | '\\' | '|' | '?' | '*')
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}');
        if bad || c.is_whitespace() {
            space = !out.is_empty();
            continue;
        }
        if space {
            if out.len() + 1 > max_bytes {
                break;
            }
            out.push(' ');
            space = false;
        }
        if out.len() + c.len_utf8() > max_bytes {
            break;
        }
        out.push(c);
    }
    let trimmed = out
        .trim_start_matches(['.', ' '])
        .trim_end_matches(['.', ' '])
        .to_owned();
    if trimmed.is_empty() {
        return fallback.to_owned();
    }
    let stem = trimmed.split('.').next().unwrap_or("");
    if RESERVED.iter().any(|r| r.eq_ignore_ascii_case(stem)) {
        return format!("_{trimmed}");
    }
    trimmed
}

/// The relative path (with `/` separators) of a thread's file.
pub fn thread_path(
    surface: &str,
    first_seen_at: &str,
    title: Option<&str>,
    id: &str,
    ext: &str,
) -> String {
    let surface = component(&surface.replace(':', "-"), 60, "unknown");
    let year: String = first_seen_at.chars().take(4).collect();
    let year = if year.len() == 4 && year.bytes().all(|b| b.is_ascii_digit()) {
        year
    } else {
        "0000".to_owned()
    };
    let title = component(title.unwrap_or(""), MAX_TITLE_BYTES, "untitled");
    let short: String = id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(SHORT_ID)
        .collect();
    format!("{surface}/{year}/{title}-{short}.{ext}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_safe_everywhere() {
        let cases: &[(&str, &str)] = &[
            ("Plan: Q3/Q4 <draft>?", "Plan Q3 Q4 draft"),
            ("  ..hidden.. ", "hidden"),
            ("CON", "_CON"),
            ("nul.txt", "_nul.txt"),
            ("Console", "Console"),
            ("e\u{301}te\u{301}", "\u{e9}t\u{e9}"),
            ("a\u{0}b\tc\u{202e}d", "a b c d"),
            ("", "untitled"),
            ("???", "untitled"),
            ("trailing. . .", "trailing"),
        ];
        for (raw, want) in cases {
            assert_eq!(
                component(raw, MAX_TITLE_BYTES, "untitled"),
                *want,
                "{raw:?}"
            );
        }
    }

    #[test]
    fn long_titles_are_cut_on_a_character_boundary() {
        let t = "日本語".repeat(40);
        let c = component(&t, MAX_TITLE_BYTES, "x");
        assert!(
            c.len() <= MAX_TITLE_BYTES && c.len() > MAX_TITLE_BYTES - 4,
            "{}",
            c.len()
        );
        assert!(t.starts_with(&c));
    }

    #[test]
    fn a_thread_path_has_surface_year_title_and_short_id() {
        let p = thread_path(
            "browser-ext:chatgpt",
            "2026-11-22T10:00:00.000Z",
            Some("Über: Pläne"),
            "0a1b2c3d-4e5f-6789-abcd-ef0123456789",
            "md",
        );
        assert_eq!(p, "browser-ext-chatgpt/2026/Über Pläne-0a1b2c3d.md");
    }
}
