//! Scrubbing of personal details from text that is about to leave the machine for a service the user does not run
//! (a cloud embedding API). Secret redaction (`capture::redact`) already ran when the text was captured; this goes
//! further and replaces what identifies or describes a person but is not a secret:
//!
//! - e-mail addresses → `[EMAIL]`;
//! - money amounts (a currency symbol or code with a number, either order; `k`/`m`/`bn` suffixes) → `[AMOUNT]`;
//! - phone-like numbers: 10 to 15 digits, optionally after `+`, grouped by single spaces, dots, dashes or
//!   parentheses → `[PHONE]`. A leading ISO date (`2024-05-01 …`) is not a phone number.
//!
//! The stored corpus keeps the text as captured; only the copy that is sent is scrubbed.

use regex_lite::Regex;
use std::sync::OnceLock;

/// The placeholders [`scrub_personal`] writes.
pub const EMAIL: &str = "[EMAIL]";
pub const PHONE: &str = "[PHONE]";
pub const AMOUNT: &str = "[AMOUNT]";

struct Rules {
    email: Regex,
    amount: Regex,
    phone: Regex,
    iso_date: Regex,
}

fn rules() -> &'static Rules {
    static RULES: OnceLock<Rules> = OnceLock::new();
    RULES.get_or_init(|| {
        let number = r"\d(?:[\d,.]*\d)?(?:\s?(?:k|K|m|M|bn|BN|million|billion|thousand)\b)?";
        let codes = r"(?:USD|EUR|GBP|JPY|CNY|CHF|CAD|AUD|INR|RUB|BRL|SEK|NOK|DKK|PLN)";
        let symbols = r"[$€£¥₹₽₩]";
        let amount = format!(
            r"(?:{symbols}\s?{number})|(?:\b{codes}\s?{number})|(?:{number}\s?(?:{symbols}|{codes}\b|(?:dollars?|euros?|pounds?|yen)\b))"
        );
        #[allow(clippy::expect_used)] // constant patterns, covered by tests
        Rules {
            email: Regex::new(r#"[^\s@<>()\[\]{},;:"'`]+@[^\s@<>()\[\]{},;:"'`.]+(?:\.[^\s@<>()\[\]{},;:"'`.]+)*\.[A-Za-z]{2,}"#)
                .expect("email pattern"),
            amount: Regex::new(&amount).expect("amount pattern"),
            phone: Regex::new(r"\+?\(?\d(?:[ .()\-]?\(?\d\)?)+").expect("phone pattern"),
            iso_date: Regex::new(r"^\d{4}-\d{2}-\d{2}").expect("date pattern"),
        }
    })
}

/// `text` with e-mail addresses, money amounts and phone-like numbers replaced by placeholders.
pub fn scrub_personal(text: &str) -> String {
    let r = rules();
    let text = r.email.replace_all(text, EMAIL);
    let text = r.amount.replace_all(&text, AMOUNT);
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for m in r.phone.find_iter(&text) {
        let s = m.as_str();
        let digits = s.bytes().filter(u8::is_ascii_digit).count();
        // Part of a longer alphanumeric token (an id, a hash) is not a phone number.
        let glued = text[..m.start()]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric())
            || text[m.end()..]
                .chars()
                .next()
                .is_some_and(|c| c.is_alphanumeric());
        if (10..=15).contains(&digits) && !glued && !r.iso_date.is_match(s) {
            out.push_str(&text[last..m.start()]);
            out.push_str(PHONE);
            last = m.end();
        }
    }
    out.push_str(&text[last..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrubs_what_it_names_and_keeps_the_rest() {
        let cases: &[(&str, &str)] = &[
            (
                "mail alice.smith+tag@mail.example.co.uk now",
                "mail [EMAIL] now",
            ),
            ("call +1 415 555 2671 today", "call [PHONE] today"),
            ("call (415) 555-2671", "call [PHONE]"),
            ("phone 030.1234.5678", "phone [PHONE]"),
            ("+44 20 7946 0958 is the office", "[PHONE] is the office"),
            ("it cost $1,250.00 in total", "it cost [AMOUNT] in total"),
            (
                "a €12 lunch and 40 EUR dinner",
                "a [AMOUNT] lunch and [AMOUNT] dinner",
            ),
            ("raised USD 2.5m last year", "raised [AMOUNT] last year"),
            ("salary 85k dollars", "salary [AMOUNT]"),
            ("£3bn deal", "[AMOUNT] deal"),
            // Not personal details: short numbers, versions, dates and times, ids, long digit runs.
            ("Postgres 16 on port 5432", "Postgres 16 on port 5432"),
            ("version 1.2.3 shipped", "version 1.2.3 shipped"),
            ("on 2024-05-01 13:56 we met", "on 2024-05-01 13:56 we met"),
            ("order a1b2c3d4e5f6 arrived", "order a1b2c3d4e5f6 arrived"),
            ("id 12345678901234567890 ok", "id 12345678901234567890 ok"),
            ("in 2023 we had 120 people", "in 2023 we had 120 people"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(scrub_personal(input), *want, "input {input:?}");
        }
    }

    #[test]
    fn unicode_text_around_matches_survives() {
        assert_eq!(
            scrub_personal("Grüße an jörg@example.de — Tel. +49 30 1234 5678, Preis 9,99 €"),
            "Grüße an [EMAIL] — Tel. [PHONE], Preis [AMOUNT]"
        );
    }
}
