//! Timestamps between milliseconds since the Unix epoch and the RFC 3339 text the wire format carries, without a
//! date library (this crate builds for wasm and stays small). UTC only on output; any offset on input.

/// `2026-11-22T10:00:00.000Z` for `ms` (the form JS's `Date.prototype.toISOString` gives and the relay stores).
pub fn rfc3339(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let of_day = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        of_day / 3_600_000,
        of_day / 60_000 % 60,
        of_day / 1000 % 60,
        of_day % 1000
    )
}

/// The UTC date of `ms`, `YYYY-MM-DD`.
pub fn day(ms: i64) -> String {
    let (y, m, d) = civil_from_days(ms.div_euclid(86_400_000));
    format!("{y:04}-{m:02}-{d:02}")
}

/// Milliseconds since the epoch of an RFC 3339 timestamp (`YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`); digits past
/// the millisecond are dropped. `None` for anything else.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    if !crate::wire::looks_like_rfc3339(s) {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut frac_ms = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        let digits = &frac[..n.min(3)];
        frac_ms = digits.parse::<i64>().ok()? * 10_i64.pow(3 - digits.len() as u32);
        rest = &frac[n..];
    }
    let offset_min = match rest.as_bytes() {
        [b'Z' | b'z'] => 0,
        [sign, ..] => {
            let (oh, om) = (num(s.len() - 5..s.len() - 3)?, num(s.len() - 2..s.len())?);
            if oh > 23 || om > 59 {
                return None;
            }
            let m = oh * 60 + om;
            if *sign == b'-' { -m } else { m }
        }
        [] => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset_min * 60;
    Some(secs * 1000 + frac_ms)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (eras of 400 years, years starting in March).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let month_from_march = (m + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + d - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let d = day_of_year - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = year_of_era + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        // 2026-11-22T10:00:00Z = 1_795_341_600 s (20_414 days after the epoch, plus 10 h).
        assert_eq!(rfc3339(1_795_341_600_123), "2026-11-22T10:00:00.123Z");
        assert_eq!(day(1_795_341_600_123), "2026-11-22");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(
            parse_rfc3339("2026-11-22T10:00:00.123Z"),
            Some(1_795_341_600_123)
        );
        assert_eq!(
            parse_rfc3339("2026-11-22T10:00:00Z"),
            Some(1_795_341_600_000)
        );
        assert_eq!(
            parse_rfc3339("2026-11-22T10:00:00.1234567Z"),
            Some(1_795_341_600_123)
        );
        assert_eq!(
            parse_rfc3339("2026-11-22T10:00:00.5Z"),
            Some(1_795_341_600_500)
        );
        assert_eq!(
            parse_rfc3339("2026-11-22T11:30:00+01:30"),
            Some(1_795_341_600_000)
        );
        assert_eq!(
            parse_rfc3339("2026-11-22T08:00:00-02:00"),
            Some(1_795_341_600_000)
        );
    }

    #[test]
    fn malformed_timestamps_are_none() {
        for s in [
            "",
            "2026-11-22",
            "2026-13-01T00:00:00Z",
            "2026-11-00T00:00:00Z",
            "2026-11-22T24:00:00Z",
            "2026-11-22T10:00:00",
            "2026-11-22T10:00:00+25:00",
            "2026-11-22T10:00:00.Z",
            "yesterday at noon, roughly",
        ] {
            assert_eq!(parse_rfc3339(s), None, "{s}");
        }
    }

    proptest! {
        #[test]
        fn formatting_and_parsing_round_trip(ms in -62_000_000_000_000_i64..253_000_000_000_000) {
            let s = rfc3339(ms);
            prop_assert_eq!(parse_rfc3339(&s), Some(ms), "{}", s);
            prop_assert_eq!(&s[..10], day(ms));
        }
    }
}
