//! The popup's traffic light for one surface, from local capture stats combined with the relay's
//! `/v1/me/capture-health`: green ≤ 5 min since the last accepted turn, yellow 5–60 min, red otherwise or when the
//! latest event was an error; off when the user has not turned the surface on.

use serde::{Deserialize, Serialize};

pub const GREEN_MS: u64 = 5 * 60_000;
pub const YELLOW_MS: u64 = 60 * 60_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Light {
    Green,
    Yellow,
    Red,
    Off,
}

/// What is known about one surface. Times are milliseconds since the Unix epoch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthInput {
    pub now_ms: u64,
    pub enabled: bool,
    pub local_accepted_ms: Option<u64>,
    pub local_error_ms: Option<u64>,
    pub relay_accepted_ms: Option<u64>,
    pub relay_error_ms: Option<u64>,
}

pub fn light(h: &HealthInput) -> Light {
    if !h.enabled {
        return Light::Off;
    }
    let accepted = h.local_accepted_ms.max(h.relay_accepted_ms);
    let error = h.local_error_ms.max(h.relay_error_ms);
    match (accepted, error) {
        (_, Some(e)) if accepted.is_none_or(|a| e > a) => Light::Red,
        (Some(a), _) => {
            let age = h.now_ms.saturating_sub(a);
            if age <= GREEN_MS {
                Light::Green
            } else if age <= YELLOW_MS {
                Light::Yellow
            } else {
                Light::Red
            }
        }
        (None, _) => Light::Red,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lights() {
        let now = 10 * YELLOW_MS;
        let base = HealthInput {
            now_ms: now,
            enabled: true,
            ..Default::default()
        };
        assert_eq!(
            light(&HealthInput {
                enabled: false,
                ..base.clone()
            }),
            Light::Off
        );
        assert_eq!(light(&base), Light::Red);
        let at = |ago: u64| Some(now - ago);
        assert_eq!(
            light(&HealthInput {
                local_accepted_ms: at(1000),
                ..base.clone()
            }),
            Light::Green
        );
        assert_eq!(
            light(&HealthInput {
                relay_accepted_ms: at(GREEN_MS + 1),
                ..base.clone()
            }),
            Light::Yellow
        );
        assert_eq!(
            light(&HealthInput {
                relay_accepted_ms: at(YELLOW_MS + 1),
                ..base.clone()
            }),
            Light::Red
        );
        // The newer of local and relay wins.
        let both = HealthInput {
            local_accepted_ms: at(1000),
            relay_accepted_ms: at(YELLOW_MS + 1),
            ..base.clone()
        };
        assert_eq!(light(&both), Light::Green);
        // An error after the last accepted turn is red; an older one is not.
        assert_eq!(
            light(&HealthInput {
                local_error_ms: at(10),
                ..both.clone()
            }),
            Light::Red
        );
        assert_eq!(
            light(&HealthInput {
                relay_error_ms: at(5000),
                ..both
            }),
            Light::Green
        );
    }
}
