//! Time in the question. A question that names a date ("on 7 July, 2023", "in January 2024", "in 2023") is
//! about what was said then: messages from that day, month or year form a signal of their own, stronger the
//! more precise the date ([`Mention::weight`]). A question that asks *when* is answered by a turn that says
//! when ("yesterday", "last week", "in May"): among the candidates, such turns form another ([`says_when`]).
//! English only, like the stopword list.

use time::{Date, Duration, Month};

/// How precise a date named in a question is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    Day,
    Month,
    Year,
    /// A month with no year ("in June"): that month of any year.
    MonthOfAnyYear,
}

/// A date named in a question: the days `[from, to)` it covers, or a month of any year.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mention {
    pub precision: Precision,
    from: Date,
    to: Date,
    month: Month,
}

/// The fused weight of the date signal per precision (BENCHMARKS.md, "Time in the question"; chosen on the dev
/// split): a day is nearly decisive, a year barely narrows anything.
impl Mention {
    pub fn weight(&self) -> f64 {
        match self.precision {
            Precision::Day => 0.5,
            Precision::Month => 0.3,
            Precision::Year | Precision::MonthOfAnyYear => 0.1,
        }
    }

    /// Whether a stored time (`YYYY-MM-DD…`) falls in the mention. A day covers the day before and after too:
    /// a date a person names is in their time zone, stored times are UTC.
    pub fn covers(&self, stored: &str) -> bool {
        let Some(day) = stored.get(..10).and_then(parse_iso_day) else {
            return false;
        };
        match self.precision {
            Precision::MonthOfAnyYear => day.month() == self.month,
            _ => self.from <= day && day < self.to,
        }
    }
}

const MONTHS: [(&str, Month); 12] = [
    ("january", Month::January),
    ("february", Month::February),
    ("march", Month::March),
    ("april", Month::April),
    ("may", Month::May),
    ("june", Month::June),
    ("july", Month::July),
    ("august", Month::August),
    ("september", Month::September),
    ("october", Month::October),
    ("november", Month::November),
    ("december", Month::December),
];

fn parse_iso_day(s: &str) -> Option<Date> {
    let y: i32 = s.get(0..4)?.parse().ok()?;
    let m: u8 = s.get(5..7)?.parse().ok()?;
    let d: u8 = s.get(8..10)?.parse().ok()?;
    Date::from_calendar_date(y, Month::try_from(m).ok()?, d).ok()
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Month(Month),
    /// A number of 1–2 digits, with or without an ordinal suffix (`8th`).
    Day(u8),
    Year(i32),
    Word(String),
}

fn lex(question: &str) -> Vec<Tok> {
    crate::text::words(question)
        .into_iter()
        .map(|w| {
            if let Some((_, m)) = MONTHS.iter().find(|(name, _)| *name == w) {
                return Tok::Month(*m);
            }
            let digits = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
            let suffix = &w[digits.len()..];
            let ordinal = suffix.is_empty() || matches!(suffix, "st" | "nd" | "rd" | "th");
            if !digits.is_empty() && ordinal && digits.chars().all(|c| c.is_ascii_digit()) {
                match (digits.len(), suffix.is_empty()) {
                    (1 | 2, _) => {
                        if let Ok(d) = digits.parse::<u8>()
                            && (1..=31).contains(&d)
                        {
                            return Tok::Day(d);
                        }
                    }
                    (4, true) => {
                        if let Ok(y) = digits.parse::<i32>()
                            && (1900..2200).contains(&y)
                        {
                            return Tok::Year(y);
                        }
                    }
                    _ => {}
                }
            }
            Tok::Word(w)
        })
        .collect()
}

fn day_span(y: i32, m: Month, d: u8) -> Option<Mention> {
    let day = Date::from_calendar_date(y, m, d).ok()?;
    Some(Mention {
        precision: Precision::Day,
        from: day.checked_sub(Duration::days(1))?,
        to: day.checked_add(Duration::days(2))?,
        month: m,
    })
}

fn month_span(y: i32, m: Month) -> Option<Mention> {
    let from = Date::from_calendar_date(y, m, 1).ok()?;
    let to = if m == Month::December {
        Date::from_calendar_date(y + 1, Month::January, 1).ok()?
    } else {
        Date::from_calendar_date(y, m.next(), 1).ok()?
    };
    Some(Mention {
        precision: Precision::Month,
        from,
        to,
        month: m,
    })
}

/// The dates a question names: `7 July 2023`, `July 7th, 2023`, `July 2023`, `2023`, and a month alone after
/// `in`/`during`/`of` ("in June"). A day without a year takes the next year named ("between August 11 and
/// August 15 2023"). Numbers that are not next to a month are not dates.
pub fn mentions(question: &str) -> Vec<Mention> {
    let toks = lex(question);
    let mut used = vec![false; toks.len()];
    let mut out = Vec::new();
    // The first year named at or after each token (one pass, so a long question stays linear).
    let mut year_after: Vec<Option<i32>> = vec![None; toks.len() + 1];
    for i in (0..toks.len()).rev() {
        year_after[i] = match toks[i] {
            Tok::Year(y) => Some(y),
            _ => year_after[i + 1],
        };
    }
    for i in 0..toks.len() {
        if used[i] {
            continue;
        }
        // day month [year] | month day [year]
        let (day, month, next) = match (&toks[i], toks.get(i + 1)) {
            (Tok::Day(d), Some(Tok::Month(m))) => (*d, *m, i + 2),
            (Tok::Month(m), Some(Tok::Day(d))) => (*d, *m, i + 2),
            _ => continue,
        };
        let year_next = matches!(toks.get(next), Some(Tok::Year(_)));
        if let Some(m) = year_after[next].and_then(|y| day_span(y, month, day)) {
            used[i] = true;
            used[i + 1] = true;
            if year_next {
                used[next] = true;
            }
            out.push(m);
        }
    }
    for i in 0..toks.len() {
        if used[i] {
            continue;
        }
        match (&toks[i], toks.get(i + 1)) {
            (Tok::Month(m), Some(Tok::Year(y))) if !used[i + 1] => {
                if let Some(mention) = month_span(*y, *m) {
                    used[i] = true;
                    used[i + 1] = true;
                    out.push(mention);
                }
            }
            (Tok::Month(m), _) => {
                let after_preposition = i > 0
                    && matches!(&toks[i - 1], Tok::Word(w) if matches!(w.as_str(), "in" | "during" | "of"));
                if after_preposition {
                    used[i] = true;
                    out.push(Mention {
                        precision: Precision::MonthOfAnyYear,
                        from: Date::MIN,
                        to: Date::MAX,
                        month: *m,
                    });
                }
            }
            _ => {}
        }
    }
    for i in 0..toks.len() {
        if let (false, Tok::Year(y)) = (used[i], &toks[i])
            && let (Some(from), Some(to)) = (
                Date::from_calendar_date(*y, Month::January, 1).ok(),
                Date::from_calendar_date(*y + 1, Month::January, 1).ok(),
            )
        {
            out.push(Mention {
                precision: Precision::Year,
                from,
                to,
                month: Month::January,
            });
        }
    }
    out
}

/// Whether the question asks when something happened ("When did…", "What date / day / month / year…").
pub fn asks_when(question: &str) -> bool {
    let w = crate::text::words(question);
    match w.as_slice() {
        [first, ..] if first == "when" => true,
        [first, second, ..] => {
            first == "what" && matches!(second.as_str(), "date" | "day" | "year" | "month")
        }
        _ => false,
    }
}

/// Whether a turn says when something happened: a relative day or period ("yesterday", "last week", "two years
/// ago"), a weekday, a month or a year.
pub fn says_when(text: &str) -> bool {
    const ALONE: &[&str] = &[
        "yesterday",
        "today",
        "tonight",
        "tomorrow",
        "ago",
        "recently",
        "earlier",
        "weekend",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
    ];
    const AFTER_LAST_NEXT_THIS: &[&str] = &[
        "week", "month", "year", "night", "morning", "summer", "winter", "spring", "fall", "autumn",
    ];
    let w = crate::text::words(text);
    w.iter().enumerate().any(|(i, x)| {
        ALONE.contains(&x.as_str())
            || MONTHS.iter().any(|(m, _)| m == x)
            || (x.len() == 4 && x.parse::<i32>().is_ok_and(|y| (1900..2200).contains(&y)))
            || (AFTER_LAST_NEXT_THIS.contains(&x.as_str())
                && i > 0
                && matches!(w[i - 1].as_str(), "last" | "next" | "this" | "that"))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn covered(q: &str, stored: &str) -> Vec<bool> {
        mentions(q).iter().map(|m| m.covers(stored)).collect()
    }

    #[test]
    fn finds_days_months_years_and_months_alone() {
        let m = mentions("What did Maria plan on the evening of 7 July, 2023?");
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].precision, Precision::Day);
        assert_eq!(
            covered("on 7 July, 2023", "2023-07-07T18:00:00.000Z"),
            [true]
        );
        assert_eq!(
            covered("on 7 July, 2023", "2023-07-08T23:00:00.000Z"),
            [true]
        );
        assert_eq!(
            covered("on 7 July, 2023", "2023-07-09T00:00:00.000Z"),
            [false]
        );
        assert_eq!(
            covered(
                "What book did Tim finish on 8th December, 2023?",
                "2023-12-08"
            ),
            [true]
        );
        assert_eq!(covered("Who came on May 3, 2023?", "2023-05-03"), [true]);
        let m = mentions("Where was John between August 11 and August 15 2023?");
        assert_eq!(m.len(), 2);
        assert!(m.iter().all(|m| m.precision == Precision::Day));
        assert_eq!(covered("Which city in January 2024?", "2024-01-31"), [true]);
        assert_eq!(
            covered("Which city in January 2024?", "2024-02-01"),
            [false]
        );
        assert_eq!(
            covered("What happened in December 2023?", "2023-12-31"),
            [true]
        );
        assert_eq!(covered("What did he do in 2023?", "2023-06-01"), [true]);
        assert_eq!(covered("What did he do in 2023?", "2024-01-01"), [false]);
        assert_eq!(
            covered("Where did she go camping in June?", "2021-06-30"),
            [true]
        );
        assert_eq!(
            mentions("Where did she go camping in June?")[0].precision,
            Precision::MonthOfAnyYear
        );
    }

    #[test]
    fn numbers_and_month_words_alone_are_not_dates() {
        assert!(mentions("How many of the 3 turtles did Nate keep?").is_empty());
        assert!(mentions("Did she like May?").is_empty());
        assert!(mentions("What is 31 times 2?").is_empty());
        // Not a day, but the month is still named.
        let m = mentions("Call me on 30 February, 2023");
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].precision, Precision::Month);
        assert!(mentions("").is_empty());
    }

    #[test]
    fn when_questions_and_turns_that_say_when() {
        assert!(asks_when("When did Melanie paint a sunrise?"));
        assert!(asks_when("what date was the concert"));
        assert!(!asks_when("What did Melanie paint?"));
        assert!(!asks_when(""));
        assert!(says_when("I went to a support group yesterday."));
        assert!(says_when("We moved there last year"));
        assert!(says_when("It opened in March 2021"));
        assert!(!says_when("The year was great and the week too"));
        assert!(!says_when("I love pottery"));
    }
}
