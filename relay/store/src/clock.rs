//! Time: the one clock the relay reads (system, or manual in tests) and the one text form times are stored in.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{Duration, OffsetDateTime, UtcOffset};

/// Where "now" comes from. `Clock::system()` in the server; `Clock::manual(..)` in tests, which can advance it.
#[derive(Debug, Clone)]
pub struct Clock {
    /// Milliseconds added to the system time (system clock) or the fixed time in ms since the epoch (manual).
    manual_ms: Option<Arc<AtomicI64>>,
}

impl Clock {
    pub fn system() -> Clock {
        Clock { manual_ms: None }
    }

    /// A clock that stands still at `start` until advanced.
    pub fn manual(start: OffsetDateTime) -> Clock {
        let ms = (start.unix_timestamp_nanos() / 1_000_000) as i64;
        Clock {
            manual_ms: Some(Arc::new(AtomicI64::new(ms))),
        }
    }

    pub fn now(&self) -> OffsetDateTime {
        match &self.manual_ms {
            None => OffsetDateTime::now_utc(),
            Some(ms) => {
                let ms = ms.load(Ordering::SeqCst);
                OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
                    .unwrap_or(OffsetDateTime::UNIX_EPOCH)
            }
        }
    }

    /// Move a manual clock forward (no effect on the system clock).
    pub fn advance(&self, by: Duration) {
        if let Some(ms) = &self.manual_ms {
            ms.fetch_add(by.whole_milliseconds() as i64, Ordering::SeqCst);
        }
    }
}

/// The earliest and latest times the stored form can hold (four-digit years).
pub const EARLIEST: &str = "0000-01-01T00:00:00.000Z";
pub const LATEST: &str = "9999-12-31T23:59:59.999Z";

/// The stored form of `t` — UTC, millisecond precision, fixed width (`2026-11-22T10:00:00.000Z`), so that text
/// order is time order — or `None` when `t` in UTC falls outside years 0000–9999 (an offset can push a valid
/// local time past either end).
pub fn stored_form(t: OffsetDateTime) -> Option<String> {
    let t = t.checked_to_offset(UtcOffset::UTC)?;
    if !(0..=9999).contains(&t.year()) {
        return None;
    }
    let fmt =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    t.format(fmt).ok()
}

/// The stored form of a time the relay computed itself (now, now ± a bounded span). Never panics: a time outside
/// the stored range is clamped to its nearest end.
pub fn fmt_time(t: OffsetDateTime) -> String {
    stored_form(t).unwrap_or_else(|| {
        // Comparison is on the instant, whatever the offsets.
        let end = if t < time::macros::datetime!(0000-01-01 00:00 UTC) {
            EARLIEST
        } else {
            LATEST
        };
        end.to_owned()
    })
}

/// Parse an RFC 3339 time as the wire format allows it (`T`/`t`/space separator, `Z`/`z` or an offset).
pub fn parse_time(s: &str) -> Option<OffsetDateTime> {
    let mut normalized: Vec<u8> = s.as_bytes().to_vec();
    if normalized.len() > 10 && matches!(normalized[10], b't' | b' ') {
        normalized[10] = b'T';
    }
    if let Some(last) = normalized.last_mut()
        && *last == b'z'
    {
        *last = b'Z';
    }
    let normalized = String::from_utf8(normalized).ok()?;
    OffsetDateTime::parse(&normalized, &Rfc3339).ok()
}

/// Parse a stored or wire time and re-format it in the stored form; `None` when it is not RFC 3339 or falls
/// outside the stored range.
pub fn normalize_time(s: &str) -> Option<String> {
    parse_time(s).and_then(stored_form)
}

/// The longest span [`parse_span`] accepts: 10,000 years, more than any corpus holds.
pub const MAX_SPAN_DAYS: i64 = 3_652_500;

/// Parse a span such as `30s`, `15m`, `7d`, `2w` or `12h`, at most [`MAX_SPAN_DAYS`]. `None` for anything else,
/// including numbers too large to mean a time.
pub fn parse_span(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = s.split_at(split);
    let n: i64 = n.parse().ok()?;
    let secs_per = match unit {
        "s" => 1,
        "m" | "min" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return None,
    };
    let secs = n.checked_mul(secs_per)?;
    (secs <= MAX_SPAN_DAYS * 86_400).then(|| Duration::seconds(secs))
}

/// `now - span` when that is a time the stored form can hold.
pub fn back_from(now: OffsetDateTime, span: Duration) -> Option<OffsetDateTime> {
    now.checked_sub(span).filter(|t| stored_form(*t).is_some())
}

/// What [`parse_span`] and time bounds accept, for error messages.
pub const SPAN_HELP: &str =
    "a span back from now such as 30s, 15m, 12h, 7d or 4w (at most 10,000 years)";

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn stored_form_is_fixed_width_utc() {
        assert_eq!(
            fmt_time(datetime!(2026-11-22 10:00:00 UTC)),
            "2026-11-22T10:00:00.000Z"
        );
        assert_eq!(
            fmt_time(datetime!(2026-11-22 10:00:00.123456 +01:00)),
            "2026-11-22T09:00:00.123Z"
        );
    }

    #[test]
    fn parses_wire_variants() {
        for (input, want) in [
            ("2026-11-22T10:00:00Z", "2026-11-22T10:00:00.000Z"),
            ("2026-11-22t10:00:00z", "2026-11-22T10:00:00.000Z"),
            ("2026-11-22 10:00:00.5-05:30", "2026-11-22T15:30:00.500Z"),
        ] {
            assert_eq!(normalize_time(input).as_deref(), Some(want), "{input}");
        }
        assert_eq!(normalize_time("2026-13-40T10:00:00Z"), None);
    }

    #[test]
    fn spans() {
        assert_eq!(parse_span("7d"), Some(Duration::days(7)));
        assert_eq!(parse_span("15m"), Some(Duration::minutes(15)));
        assert_eq!(parse_span("7"), None);
        assert_eq!(parse_span("d"), None);
        // Too large to mean a time: refused, never a panic.
        for huge in [
            "99999999d",
            "9223372036854775807d",
            "999999999999w",
            "99999999999999999999s",
        ] {
            assert_eq!(parse_span(huge), None, "{huge}");
        }
        assert_eq!(parse_span("3652500d"), Some(Duration::days(MAX_SPAN_DAYS)));
        let now = datetime!(2026-11-22 10:00:00 UTC);
        assert_eq!(
            back_from(now, Duration::days(MAX_SPAN_DAYS)),
            None,
            "before year 0"
        );
        assert_eq!(
            back_from(now, Duration::days(1)),
            Some(datetime!(2026-11-21 10:00:00 UTC))
        );
    }

    #[test]
    fn times_outside_the_stored_range_are_refused_not_panicked_on() {
        // A valid local time whose UTC form is in year 10000, or year -1.
        assert_eq!(normalize_time("9999-12-31T23:59:59-23:59"), None);
        assert_eq!(normalize_time("0000-01-01T00:00:00+23:59"), None);
        // The ends themselves are fine and fixed width.
        assert_eq!(
            normalize_time("9999-12-31T23:59:59.999Z").as_deref(),
            Some(LATEST)
        );
        assert_eq!(
            normalize_time("0000-01-01T00:00:00Z").as_deref(),
            Some(EARLIEST)
        );
        // Times the relay computes are clamped instead.
        assert_eq!(fmt_time(datetime!(-0001-06-01 00:00:00 UTC)), EARLIEST);
    }

    #[test]
    fn manual_clock_advances() {
        let c = Clock::manual(datetime!(2026-11-22 10:00:00 UTC));
        c.advance(Duration::minutes(6));
        assert_eq!(fmt_time(c.now()), "2026-11-22T10:06:00.000Z");
    }
}
