//! The popup's traffic light for one surface: local capture stats combined with the relay's
//! `/v1/me/capture-health`, coloured by the one rule in [`crate::health::status`]; off when the user has not
//! turned the surface on.

use serde::{Deserialize, Serialize};

use crate::health::{self, Status};

#[cfg(test)]
const GREEN_MS: u64 = health::GREEN_WITHIN_MS as u64;
#[cfg(test)]
const YELLOW_MS: u64 = health::YELLOW_WITHIN_MS as u64;

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
    let ms = |t: Option<u64>| t.map(|t| i64::try_from(t).unwrap_or(i64::MAX));
    let accepted = ms(h.local_accepted_ms.max(h.relay_accepted_ms));
    let error = ms(h.local_error_ms.max(h.relay_error_ms));
    match health::status(accepted, error, ms(Some(h.now_ms)).unwrap_or(0)) {
        Status::Green => Light::Green,
        Status::Yellow => Light::Yellow,
        Status::Red => Light::Red,
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
                ..both.clone()
            }),
            Light::Green
        );
        // The relay's rule: an error at the very instant of the last accepted turn is red too.
        assert_eq!(
            light(&HealthInput {
                local_error_ms: at(1000),
                ..both
            }),
            Light::Red
        );
    }
}
