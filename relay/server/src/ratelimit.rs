//! A token-bucket rate limiter keyed by device (or any string). In memory: a restart refills every bucket.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Buckets kept before idle ones are swept.
const SWEEP_ABOVE: usize = 10_000;

impl RateLimiter {
    /// `rate` requests per second with bursts up to `burst`; `rate <= 0` allows everything.
    pub fn new(rate: f64, burst: f64) -> RateLimiter {
        RateLimiter {
            rate,
            burst: burst.max(1.0),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.rate > 0.0
    }

    /// Take one request for `key` at `now`; `Err(wait)` says how long until one would be allowed.
    pub fn check_at(&self, key: &str, now: Instant) -> Result<(), Duration> {
        if !self.is_enabled() {
            return Ok(());
        }
        let Ok(mut buckets) = self.buckets.lock() else {
            return Ok(());
        };
        if buckets.len() > SWEEP_ABOVE {
            let full_after = Duration::from_secs_f64(self.burst / self.rate);
            buckets.retain(|_, b| now.saturating_duration_since(b.at) < full_after);
        }
        let b = buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.rate).min(self.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / self.rate))
        }
    }

    pub fn check(&self, key: &str) -> Result<(), Duration> {
        self.check_at(key, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refill() {
        let l = RateLimiter::new(10.0, 3.0);
        let t = Instant::now();
        for _ in 0..3 {
            assert!(l.check_at("a", t).is_ok());
        }
        let wait = l.check_at("a", t).err();
        assert!(
            wait.is_some_and(|w| w > Duration::ZERO && w <= Duration::from_millis(100)),
            "{wait:?}"
        );
        assert!(l.check_at("b", t).is_ok(), "buckets are per key");
        assert!(
            l.check_at("a", t + Duration::from_millis(100)).is_ok(),
            "refilled"
        );
    }

    #[test]
    fn zero_rate_disables() {
        let l = RateLimiter::new(0.0, 0.0);
        let t = Instant::now();
        for _ in 0..1000 {
            assert!(l.check_at("a", t).is_ok());
        }
    }
}
