//! The popup's traffic light for one surface: local capture stats combined with the relay's
//! `/v1/me/capture-health` body (parsed here with its wire types), coloured by the one rule in
//! [`crate::health::status`]; off when the user has not turned the surface on.

use serde::{Deserialize, Serialize};

use super::policy::{CaptureState, SkipList, Stats, capture_state};
use super::registry::{self, Registry};
use super::settings::Settings;
use crate::health::{self, CaptureHealth, Status};

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

/// The relay's `GET /v1/me/capture-health` body, or `None` when it is not one (then the relay counts as not
/// reachable).
pub fn parse_relay_health(body: &str) -> Option<CaptureHealth> {
    serde_json::from_str(body).ok()
}

/// How long a surface's pages must keep failing its adapter before its light turns yellow, then red.
pub const STALE_YELLOW_MS: u64 = health::STALE_YELLOW_AFTER_MS as u64;
pub const STALE_RED_MS: u64 = health::STALE_RED_AFTER_MS as u64;
/// The same with the test flag `testFastFlush` (see extension/TESTING.md).
pub const FAST_STALE_YELLOW_MS: u64 = 2_000;
pub const FAST_STALE_RED_MS: u64 = 8_000;

pub use crate::health::ADAPTER_STALE;

/// The light the adapter's own state gives (`None`: it reads pages fine, or has not failed for long).
pub fn stale_light(stale_since_ms: Option<u64>, now_ms: u64, fast: bool) -> Option<Light> {
    let (yellow, red) = if fast {
        (FAST_STALE_YELLOW_MS, FAST_STALE_RED_MS)
    } else {
        (STALE_YELLOW_MS, STALE_RED_MS)
    };
    let age = now_ms.saturating_sub(stale_since_ms?);
    if age >= red {
        Some(Light::Red)
    } else if age >= yellow {
        Some(Light::Yellow)
    } else {
        None
    }
}

/// What this device should tell the relay about each surface's adapter (`POST /v1/me/capture-reports`): the
/// surfaces whose stale state, as the relay should see it, differs from what the relay was last told. A surface
/// counts as stale for the relay once its light says so ([`stale_light`]); `stale_since` is when it started.
pub fn pending_reports(stats: &Stats, now_ms: u64, fast: bool) -> Vec<Pending> {
    stats
        .0
        .iter()
        .filter_map(|(surface, st)| {
            let want = st
                .stale_since_ms
                .filter(|_| stale_light(st.stale_since_ms, now_ms, fast).is_some());
            let mark = st.paths_mark();
            let paths_due = mark.is_some() && mark != st.paths_reported;
            (want != st.stale_reported_ms || paths_due).then(|| Pending {
                surface: surface.to_owned(),
                stale_since_ms: want,
                rule: st.last_rule.clone(),
                paths: mark.map(|m| {
                    let t = |ms: Option<u64>| {
                        ms.and_then(|v| i64::try_from(v).ok())
                            .map(crate::time::rfc3339)
                    };
                    (
                        m,
                        crate::health::PathReport {
                            dom_at: t(st.dom_ms),
                            network_at: t(st.network_ms),
                            unparsed_since: t(st.unparsed_ms),
                            unparsed: st.unparsed.clone(),
                        },
                    )
                }),
            })
        })
        .collect()
}

/// One surface's report due to the relay, with the paths' mark it carries (see
/// [`crate::capture::policy::SurfaceStats::paths_mark`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub surface: String,
    pub stale_since_ms: Option<u64>,
    pub rule: Option<String>,
    pub paths: Option<(u64, crate::health::PathReport)>,
}

/// One row of the popup's site list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SurfaceRow {
    pub id: String,
    pub name: String,
    pub status: registry::Status,
    /// The user turned it on.
    pub enabled: bool,
    pub light: Light,
    /// Turns this browser queued / got acknowledged.
    pub captured: u64,
    pub accepted: u64,
    /// Turns the relay stored in the last 24 hours (`None`: the relay did not say).
    pub turns_24h: Option<u64>,
    /// Why the light is not green when the cause is known here: `adapter_stale`.
    pub reason: Option<String>,
    /// The message-root rule that matched at the last read (debugging).
    pub rule: Option<String>,
    /// Which capture paths work: `dom`, `network`, `both` or `none` (`None`: this surface has no network path).
    pub paths: Option<String>,
    /// `stream_unparsed` (or `stream_too_large`) while the site's responses fail to parse.
    pub unparsed: Option<String>,
}

/// The site list with each surface's light at `now_ms`: this browser's stats and the relay's view, the newer of
/// each time winning.
pub fn surface_rows(
    registry: &Registry,
    settings: &Settings,
    stats: &Stats,
    relay: Option<&CaptureHealth>,
    now_ms: u64,
    fast: bool,
) -> Vec<SurfaceRow> {
    let none = SkipList::default();
    registry
        .surfaces()
        .map(|s| {
            let local = stats.get(&s.id).cloned().unwrap_or_default();
            let r = relay.and_then(|h| h.surfaces.iter().find(|x| x.surface == s.id));
            let at = |t: Option<&str>| {
                t.and_then(crate::time::parse_rfc3339)
                    .and_then(|v| u64::try_from(v).ok())
            };
            let light = light(&HealthInput {
                now_ms,
                enabled: capture_state(settings, Some(s), None, &none) != CaptureState::Off,
                local_accepted_ms: local.last_accepted_ms,
                local_error_ms: local.last_error_ms,
                relay_accepted_ms: r.and_then(|r| at(r.last_accepted_at.as_deref())),
                relay_error_ms: r.and_then(|r| at(r.last_error.as_ref().map(|e| e.at.as_str()))),
            });
            let stale =
                stale_light(local.stale_since_ms, now_ms, fast).filter(|_| light != Light::Off);
            let light = match (light, stale) {
                (_, Some(Light::Red)) => Light::Red,
                (Light::Green, Some(Light::Yellow)) => Light::Yellow,
                (l, _) => l,
            };
            let rp = r.and_then(|r| r.paths.as_ref());
            let newest =
                |a: Option<u64>, b: Option<u64>| a.max(b).and_then(|v| i64::try_from(v).ok());
            let dom = newest(local.dom_ms, rp.and_then(|p| at(p.dom_at.as_deref())));
            let network = newest(
                local.network_ms,
                rp.and_then(|p| at(p.network_at.as_deref())),
            );
            let unparsed_ms = newest(
                local.unparsed_ms,
                rp.and_then(|p| at(p.unparsed_since.as_deref())),
            );
            let unparsed = local
                .unparsed
                .clone()
                .or_else(|| rp.and_then(|p| p.unparsed.clone()))
                .filter(|_| unparsed_ms.is_some_and(|u| network.is_none_or(|n| u >= n)));
            let has_network = crate::network::Surface::from_id(&s.id).is_some();
            let paths = has_network.then(|| {
                crate::health::working_paths(dom, network, unparsed_ms, now_ms as i64).to_owned()
            });
            SurfaceRow {
                paths,
                reason: stale.map(|_| ADAPTER_STALE.to_owned()).or_else(|| {
                    unparsed
                        .as_ref()
                        .map(|_| crate::health::STREAM_UNPARSED.to_owned())
                }),
                unparsed,
                rule: local.last_rule.clone(),
                id: s.id.clone(),
                name: s.name.clone(),
                status: s.status,
                enabled: settings.is_enabled(&s.id),
                light,
                captured: local.captured,
                accepted: local.accepted,
                turns_24h: r.map(|r| r.turns_24h),
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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

    #[test]
    fn rows_combine_local_stats_with_the_relay_body() {
        let now = crate::time::parse_rfc3339("2026-11-22T10:00:00.000Z").unwrap() as u64;
        let body = r#"{"generated_at":"2026-11-22T10:00:00.000Z","surfaces":[
            {"surface":"browser-ext:claude","status":"green","last_accepted_at":"2026-11-22T09:58:00.000Z",
             "turns_24h":7,"threads_24h":2,"last_error":null},
            {"surface":"browser-ext:gemini","status":"red","last_accepted_at":"2026-11-22T09:58:00.000Z",
             "turns_24h":1,"threads_24h":1,
             "last_error":{"code":"bad_role","message":"m","at":"2026-11-22T09:59:00.000Z"}}]}"#;
        let relay = parse_relay_health(body).unwrap();
        let settings = Settings {
            enabled: [
                "browser-ext:claude",
                "browser-ext:gemini",
                "browser-ext:chatgpt",
            ]
            .iter()
            .map(|s| (s.to_string(), true))
            .collect(),
            ..Settings::default()
        };
        let mut stats = Stats::default();
        stats.on_capture("browser-ext:chatgpt", 3, 0);
        let rows = surface_rows(
            Registry::builtin(),
            &settings,
            &stats,
            Some(&relay),
            now,
            false,
        );
        let row = |id: &str| rows.iter().find(|r| r.id == id).unwrap();
        assert_eq!(row("browser-ext:claude").light, Light::Green);
        assert_eq!(row("browser-ext:claude").turns_24h, Some(7));
        assert_eq!(
            row("browser-ext:gemini").light,
            Light::Red,
            "relay error after its last accept"
        );
        assert_eq!(
            row("browser-ext:chatgpt").light,
            Light::Red,
            "captured but never accepted"
        );
        assert_eq!(row("browser-ext:chatgpt").captured, 3);
        assert_eq!(row("browser-ext:chatgpt").turns_24h, None);
        assert_eq!(row("browser-ext:copilot").light, Light::Off);
        assert!(!row("browser-ext:copilot").enabled);
        // Without the relay's view, the local one decides.
        let rows = surface_rows(Registry::builtin(), &settings, &stats, None, now, false);
        assert_eq!(
            rows.iter()
                .find(|r| r.id == "browser-ext:claude")
                .unwrap()
                .light,
            Light::Red
        );
    }

    #[test]
    fn a_body_that_is_not_the_wire_type_is_no_relay_view() {
        assert!(
            parse_relay_health(r#"{"surfaces": []}"#).is_none(),
            "generated_at missing"
        );
        assert!(parse_relay_health("<html>").is_none());
        assert!(parse_relay_health(r#"{"generated_at":"x","surfaces":[]}"#).is_some());
    }
}
