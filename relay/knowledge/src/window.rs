//! Windows: the slices of conversation one extraction call reads. Each thread is windowed on its own; a stretch
//! longer than the budget is cut at its largest time gap, again and again, until each piece fits or is a few turns
//! long; a short piece still over budget loses its oldest lines that are not the user's (the user's own words are
//! never dropped); what is still too long is read in parts and the parts' candidates are reduced (map-reduce).
//! Every line carries a label (`[3]`) the model cites and the user's lines say they are the user's.

use personkit_llm::estimate_tokens;
use personkit_store::knowledge::Turn;

/// Fewest turns a time-gap cut leaves on a side: below this a piece is trimmed rather than cut again.
const MIN_TURNS: usize = 4;
/// Characters of a non-user turn a window keeps (the answer's gist; the user's lines are kept whole).
const OTHER_CHARS: usize = 1_200;

/// One line of a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The label the model cites (1-based, unique in the window).
    pub label: u32,
    pub message_id: String,
    pub thread_id: String,
    pub user: bool,
    pub text: String,
    pub at: String,
}

impl Line {
    /// The line as the model reads it.
    pub fn render(&self) -> String {
        let who = if self.user {
            "USER (the person)"
        } else {
            "ASSISTANT"
        };
        format!("[{}] {who}: {}", self.label, self.text)
    }

    fn cost(&self) -> usize {
        estimate_tokens(&self.render()) + 1
    }
}

/// A slice of one thread, ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub thread_id: String,
    pub lines: Vec<Line>,
    /// Non-user lines dropped to fit.
    pub trimmed: usize,
}

impl Window {
    /// The material as the model reads it.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for l in &self.lines {
            s.push_str(&l.render());
            s.push('\n');
        }
        s
    }

    pub fn tokens(&self) -> usize {
        self.lines.iter().map(Line::cost).sum()
    }

    pub fn message_ids(&self) -> Vec<String> {
        self.lines.iter().map(|l| l.message_id.clone()).collect()
    }

    /// The line with `label`.
    pub fn line(&self, label: u32) -> Option<&Line> {
        self.lines.iter().find(|l| l.label == label)
    }

    /// Whether the user says anything in it (a window without the user's words has nothing of theirs to learn).
    pub fn has_user(&self) -> bool {
        self.lines.iter().any(|l| l.user)
    }

    /// The window cut into consecutive parts of at most `budget` tokens each (the map step), labels kept. A single
    /// line over the budget is a part of its own: the model is then asked for what it can read.
    pub fn parts(&self, budget: usize) -> Vec<Window> {
        let mut parts = Vec::new();
        let mut cur: Vec<Line> = Vec::new();
        let mut cost = 0;
        for l in &self.lines {
            let c = l.cost();
            if !cur.is_empty() && cost + c > budget {
                parts.push(self.with(std::mem::take(&mut cur)));
                cost = 0;
            }
            cost += c;
            cur.push(l.clone());
        }
        if !cur.is_empty() {
            parts.push(self.with(cur));
        }
        parts
    }

    fn with(&self, lines: Vec<Line>) -> Window {
        Window {
            thread_id: self.thread_id.clone(),
            lines,
            trimmed: 0,
        }
    }
}

/// The windows of one thread's turns (any order; they are sorted by time, then row) under `budget` tokens each.
/// Turns with no text are left out; the labels run 1.. within each window.
pub fn windows(mut turns: Vec<Turn>, budget: usize) -> Vec<Window> {
    turns.retain(|t| !t.text.trim().is_empty() && matches!(t.role.as_str(), "user" | "assistant"));
    turns.sort_by(|a, b| a.at.cmp(&b.at).then(a.pk.cmp(&b.pk)));
    let Some(first) = turns.first() else {
        return Vec::new();
    };
    let thread_id = first.thread_id.clone();
    let lines: Vec<Line> = turns
        .into_iter()
        .map(|t| {
            let user = t.role == "user";
            let text = if user {
                t.text
            } else {
                clip(&t.text, OTHER_CHARS)
            };
            Line {
                label: 0,
                message_id: t.id,
                thread_id: t.thread_id,
                user,
                text: text.trim().to_owned(),
                at: t.at,
            }
        })
        .collect();
    let mut out = Vec::new();
    cut(lines, budget, &mut out);
    out.into_iter()
        .map(|(mut lines, trimmed)| {
            for (i, l) in lines.iter_mut().enumerate() {
                l.label = i as u32 + 1;
            }
            Window {
                thread_id: thread_id.clone(),
                lines,
                trimmed,
            }
        })
        .collect()
}

fn cost(lines: &[Line]) -> usize {
    lines.iter().map(Line::cost).sum()
}

fn cut(lines: Vec<Line>, budget: usize, out: &mut Vec<(Vec<Line>, usize)>) {
    if cost(&lines) <= budget {
        out.push((lines, 0));
        return;
    }
    if lines.len() >= 2 * MIN_TURNS {
        // The largest gap with at least MIN_TURNS on each side; equal gaps (or no times) cut nearest the middle.
        let mid = lines.len() / 2;
        let at = (MIN_TURNS..=lines.len() - MIN_TURNS)
            .max_by_key(|&i| {
                (
                    gap_seconds(&lines[i - 1].at, &lines[i].at),
                    usize::MAX - i.abs_diff(mid),
                )
            })
            .unwrap_or(mid);
        let mut left = lines;
        let right = left.split_off(at);
        cut(left, budget, out);
        cut(right, budget, out);
        return;
    }
    // A short piece over budget: drop the oldest lines that are not the user's until it fits.
    let mut lines = lines;
    let mut trimmed = 0;
    while cost(&lines) > budget {
        let Some(i) = lines.iter().position(|l| !l.user) else {
            break;
        };
        lines.remove(i);
        trimmed += 1;
    }
    out.push((lines, trimmed));
}

/// Seconds from `a` to `b` (stored UTC times); 0 when either does not parse or `b` is not later.
fn gap_seconds(a: &str, b: &str) -> i64 {
    let parse = |s: &str| {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
    };
    match (parse(a), parse(b)) {
        (Some(a), Some(b)) => (b - a).whole_seconds().max(0),
        _ => 0,
    }
}

/// `text` cut to at most `max` characters, on a character boundary, with an ellipsis when cut.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((i, _)) => format!("{}…", &text[..i]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(pk: i64, role: &str, text: &str, at: &str) -> Turn {
        Turn {
            pk,
            id: format!("m{pk}"),
            thread_id: "t".into(),
            surface: "chatgpt".into(),
            role: role.into(),
            text: text.into(),
            at: at.into(),
        }
    }

    fn at(minutes: i64) -> String {
        let t = time::OffsetDateTime::UNIX_EPOCH + time::Duration::minutes(minutes);
        t.format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default()
    }

    #[test]
    fn a_short_thread_is_one_window_with_labels_and_the_users_lines_marked() {
        let w = windows(
            vec![
                turn(2, "assistant", "Use a queue.", &at(1)),
                turn(1, "user", "How do I decouple these?", &at(0)),
                turn(3, "tool", "ignored", &at(2)),
            ],
            1_000,
        );
        assert_eq!(w.len(), 1);
        assert_eq!(
            w[0].text(),
            "[1] USER (the person): How do I decouple these?\n[2] ASSISTANT: Use a queue.\n"
        );
        assert!(w[0].has_user());
    }

    #[test]
    fn a_long_stretch_is_cut_at_its_largest_time_gap() {
        let long = "word ".repeat(40);
        let mut turns = Vec::new();
        // Two sessions of 8 turns each, an hour apart, small gaps inside.
        for i in 0..16i64 {
            let minute = if i < 8 { i } else { 60 + i };
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            turns.push(turn(i + 1, role, &long, &at(minute)));
        }
        let total: usize = windows(turns.clone(), usize::MAX)[0].tokens();
        let w = windows(turns, total / 2 + 10);
        assert_eq!(w.len(), 2, "cut once, at the hour's gap");
        assert_eq!(w[0].lines.last().map(|l| l.message_id.as_str()), Some("m8"));
        assert_eq!(w[1].lines[0].label, 1, "labels restart in each window");
    }

    #[test]
    fn trimming_drops_the_oldest_answers_first_and_never_the_users_words() {
        let turns = vec![
            turn(1, "assistant", &"old answer ".repeat(50), &at(0)),
            turn(
                2,
                "user",
                "I always pin dependencies because upgrades broke prod twice",
                &at(1),
            ),
            turn(3, "assistant", &"newer answer ".repeat(50), &at(2)),
        ];
        let w = windows(turns, 200);
        assert_eq!(w.len(), 1);
        let ids: Vec<&str> = w[0].lines.iter().map(|l| l.message_id.as_str()).collect();
        assert_eq!(ids, ["m2", "m3"]);
        assert_eq!(w[0].trimmed, 1);
        let only_user = windows(vec![turn(1, "user", &"mine ".repeat(400), &at(0))], 50);
        assert_eq!(
            only_user[0].lines.len(),
            1,
            "the user's words stay even over budget"
        );
        assert!(only_user[0].tokens() > 50);
        assert!(only_user[0].parts(50).len() == 1);
    }

    #[test]
    fn parts_cover_every_line_once_under_the_budget() {
        let turns: Vec<Turn> = (0..20)
            .map(|i| {
                turn(
                    i + 1,
                    "user",
                    &format!("point {i} {}", "x ".repeat(30)),
                    &at(0),
                )
            })
            .collect();
        let w = &windows(turns, usize::MAX)[0];
        let parts = w.parts(100);
        assert!(parts.len() > 1);
        let labels: Vec<u32> = parts
            .iter()
            .flat_map(|p| p.lines.iter().map(|l| l.label))
            .collect();
        assert_eq!(labels, (1..=20).collect::<Vec<_>>());
        assert!(
            parts
                .iter()
                .all(|p| p.tokens() <= 100 || p.lines.len() == 1)
        );
    }

    #[test]
    fn clip_is_char_safe() {
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip("hi", 5), "hi");
    }
}
