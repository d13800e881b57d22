//! The response budget. Every tool answer is kept within `max_chars` characters of structured JSON (default
//! [`DEFAULT_MAX_CHARS`], about 5,000 tokens; the caller may ask for between [`MIN_MAX_CHARS`] and
//! [`MAX_MAX_CHARS`]). It is enforced by measuring the serialised JSON: long message contents are cut first
//! (each to a share of the budget, the cut marked in the text with how much is left and how to get it), then
//! whole records are left off the end, `truncated` is set and the page's cursor points at the first record left
//! off, so a caller continues where the answer stopped. The short text form is derived from what was kept and
//! is always shorter than it.

use serde::Serialize;

pub const DEFAULT_MAX_CHARS: usize = 20_000;
pub const MIN_MAX_CHARS: usize = 1_000;
pub const MAX_MAX_CHARS: usize = 200_000;

/// The budget a caller asked for, checked.
pub fn chars(asked: Option<u32>) -> Result<usize, String> {
    match asked.map(|n| n as usize) {
        None => Ok(DEFAULT_MAX_CHARS),
        Some(n) if (MIN_MAX_CHARS..=MAX_MAX_CHARS).contains(&n) => Ok(n),
        Some(n) => Err(format!(
            "max_chars {n} is out of range: give between {MIN_MAX_CHARS} and {MAX_MAX_CHARS}, or omit it for {DEFAULT_MAX_CHARS}"
        )),
    }
}

/// Length of `v` as JSON, in characters.
pub fn json_len<T: Serialize + ?Sized>(v: &T) -> usize {
    serde_json::to_string(v).map_or(0, |s| s.chars().count())
}

/// Cuts `text` to `max` characters, ending it with a marker that says how many were left out and `how` to get
/// them. Returns whether it cut.
pub fn cut(text: &mut String, max: usize, how: &str) -> bool {
    let n = text.chars().count();
    if n <= max {
        return false;
    }
    let keep: String = text.chars().take(max).collect();
    *text = format!("{keep}… [cut: {} more characters; {how}]", n - max);
    true
}

/// Keeps the longest prefix of `items` whose JSON fits in `room` characters; returns how many were kept.
pub fn fit<T: Serialize>(items: &[T], room: usize) -> usize {
    let mut used = 2; // []
    for (i, item) in items.iter().enumerate() {
        used += json_len(item) + 1;
        if used > room {
            return i;
        }
    }
    items.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_marks_what_is_left() {
        let mut s = "abcdefghij".to_string();
        assert!(!cut(&mut s, 10, "x"));
        assert!(cut(&mut s, 4, "get_message m1"));
        assert_eq!(s, "abcd… [cut: 6 more characters; get_message m1]");
    }

    #[test]
    fn fit_keeps_a_prefix_within_room() {
        let items = vec!["aaaa".to_string(); 10]; // 6 chars + comma each
        assert_eq!(fit(&items, 1000), 10);
        assert_eq!(fit(&items, 2 + 7 * 3), 3);
        assert_eq!(fit(&items, 3), 0);
        assert!(chars(Some(10)).is_err());
        assert_eq!(chars(None).unwrap_or(0), DEFAULT_MAX_CHARS);
    }
}
