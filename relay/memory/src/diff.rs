//! Line diffs between two versions, for `personkit memory diff` and the dashboard. A longest-common-subsequence
//! table over lines, bounded: texts longer than [`MAX_LINES`] lines are compared on their first lines only, and
//! the result says so.

use serde::Serialize;

/// Most lines of each side compared.
pub const MAX_LINES: usize = 2_000;

/// One line of a diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "op", content = "line", rename_all = "lowercase")]
pub enum Line {
    Same(String),
    Added(String),
    Removed(String),
}

/// A diff of `old` to `new`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Diff {
    pub lines: Vec<Line>,
    pub added: usize,
    pub removed: usize,
    /// Some lines past [`MAX_LINES`] were not compared.
    pub truncated: bool,
}

/// The line diff of `old` to `new`.
pub fn diff(old: &str, new: &str) -> Diff {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let truncated = a.len() > MAX_LINES || b.len() > MAX_LINES;
    let a = &a[..a.len().min(MAX_LINES)];
    let b = &b[..b.len().min(MAX_LINES)];
    let (n, m) = (a.len(), b.len());
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![0u16; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[at(i, j)] = if a[i] == b[j] {
                lcs[at(i + 1, j + 1)] + 1
            } else {
                lcs[at(i + 1, j)].max(lcs[at(i, j + 1)])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut lines = Vec::new();
    let (mut added, mut removed) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            lines.push(Line::Same(a[i].to_owned()));
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[at(i, j + 1)] >= lcs[at(i + 1, j)]) {
            lines.push(Line::Added(b[j].to_owned()));
            added += 1;
            j += 1;
        } else {
            lines.push(Line::Removed(a[i].to_owned()));
            removed += 1;
            i += 1;
        }
    }
    Diff {
        lines,
        added,
        removed,
        truncated,
    }
}

impl Diff {
    /// The unified-style text: `+` added, `-` removed, two spaces for the same.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for l in &self.lines {
            let (mark, text) = match l {
                Line::Same(t) => (' ', t),
                Line::Added(t) => ('+', t),
                Line::Removed(t) => ('-', t),
            };
            out.push(mark);
            out.push(' ');
            out.push_str(text);
            out.push('\n');
        }
        if self.truncated {
            out.push_str(&format!(
                "(only the first {MAX_LINES} lines were compared)\n"
            ));
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn diffs_rebuild_both_sides() {
        let old = "a\nb\nc\nd\n";
        let new = "a\nc\nd\ne\n";
        let d = diff(old, new);
        assert_eq!((d.added, d.removed), (1, 1));
        let back_old: Vec<&str> = d
            .lines
            .iter()
            .filter_map(|l| match l {
                Line::Same(t) | Line::Removed(t) => Some(t.as_str()),
                Line::Added(_) => None,
            })
            .collect();
        let back_new: Vec<&str> = d
            .lines
            .iter()
            .filter_map(|l| match l {
                Line::Same(t) | Line::Added(t) => Some(t.as_str()),
                Line::Removed(_) => None,
            })
            .collect();
        assert_eq!(back_old.join("\n"), old.trim_end());
        assert_eq!(back_new.join("\n"), new.trim_end());
        assert!(d.render().contains("- b\n") && d.render().contains("+ e\n"));
        assert_eq!(diff("", "").lines.len(), 0);
    }
}
