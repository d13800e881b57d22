//! Finding the JSON in what a model wrote. Small models wrap it in prose or Markdown fences and leave trailing
//! commas; this takes the first complete JSON object or list in the text, mends those mechanical slips, and
//! parses it. Anything it cannot mend is `None` — never a guess at what the model meant.

use serde_json::Value;

/// Longest text searched for JSON.
const MAX_INPUT: usize = 1 << 20;

/// The first JSON object or list in `text`, parsed, with trailing commas removed. `None` when there is none.
pub fn find_json(text: &str) -> Option<Value> {
    let text = &text[..floor_boundary(text, MAX_INPUT)];
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(off) = text[from..].find(['{', '[']) {
        let start = from + off;
        if let Some(end) = balanced_end(bytes, start) {
            let candidate = &text[start..end];
            if let Ok(v) = serde_json::from_str::<Value>(candidate) {
                return Some(v);
            }
            if let Ok(v) = serde_json::from_str::<Value>(&without_trailing_commas(candidate)) {
                return Some(v);
            }
        }
        from = start + 1;
    }
    None
}

fn floor_boundary(s: &str, max: usize) -> usize {
    if s.len() <= max {
        return s.len();
    }
    let mut i = max;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The end (exclusive) of the bracketed value opening at `start`, skipping strings; `None` if it never closes.
fn balanced_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate().skip(start) {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// `text` with every comma that is followed (after whitespace) by `}` or `]` removed, outside strings.
fn without_trailing_commas(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else if c == ',' {
            let next = bytes[i + 1..].iter().find(|b| !b.is_ascii_whitespace());
            if matches!(next, Some(b'}' | b']')) {
                continue;
            }
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_is_found_in_fences_prose_and_with_trailing_commas() {
        let cases = [
            ("{\"a\": 1}", json!({"a": 1})),
            (
                "Sure! Here it is:\n```json\n{\"a\": [1, 2,],}\n```\nHope that helps.",
                json!({"a": [1, 2]}),
            ),
            (
                "[{\"k\": \"a } in a string, ]\"}]",
                json!([{"k": "a } in a string, ]"}]),
            ),
            ("noise {not json} then {\"b\": true}", json!({"b": true})),
            (
                "{\"s\": \"quote \\\" inside\"}",
                json!({"s": "quote \" inside"}),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(find_json(text), Some(want), "{text}");
        }
    }

    #[test]
    fn what_cannot_be_mended_is_none() {
        for text in ["", "no json here", "{\"a\": 1", "{\"a\": }", "]["] {
            assert_eq!(find_json(text), None, "{text}");
        }
    }
}
