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

/// The stored form of a time: UTC, millisecond precision, fixed width (`2026-11-22T10:00:00.000Z`), so that
/// text order is time order.
pub fn fmt_time(t: OffsetDateTime) -> String {
    let t = t.to_offset(UtcOffset::UTC);
    let fmt =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    t.format(fmt)
        .unwrap_or_else(|_| "1970-01-01T00:00:00.000Z".to_owned())
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

/// Parse a stored or wire time and re-format it in the stored form.
pub fn normalize_time(s: &str) -> Option<String> {
    parse_time(s).map(fmt_time)
}

/// Parse a span such as `30s`, `15m`, `7d`, `2w` or `12h`.
pub fn parse_span(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = s.split_at(split);
    let n: i64 = n.parse().ok()?;
    match unit {
        "s" => Some(Duration::seconds(n)),
        "m" | "min" => Some(Duration::minutes(n)),
        "h" => Some(Duration::hours(n)),
        "d" => Some(Duration::days(n)),
        "w" => Some(Duration::weeks(n)),
        _ => None,
    }
}

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
    }

    #[test]
    fn manual_clock_advances() {
        let c = Clock::manual(datetime!(2026-11-22 10:00:00 UTC));
        c.advance(Duration::minutes(6));
        assert_eq!(fmt_time(c.now()), "2026-11-22T10:06:00.000Z");
    }
}
