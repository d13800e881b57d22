//! The user's settings and how a change to them is applied. The worker keeps [`Settings`] in IndexedDB;
//! the popup records every change as an intent (`settingsIntent:<id>` → `{patch, at}`) in `storage.session` before
//! it messages it, and [`apply_intents`] merges recorded intents and the messaged one idempotently: each id is
//! applied once (ids already applied are listed under `settingsApplied`), a patch sets absolute values, and intents
//! apply oldest first, so a retried or late message never puts an older change over a newer one.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::keyed::Keyed;
use super::registry::Registry;

/// The relay a fresh install talks to.
pub const DEFAULT_RELAY: &str = "http://127.0.0.1:8787";
/// Prefix of an intent's key in `storage.session` (the popup writes `settingsIntent:<uuid>`).
pub const INTENT_PREFIX: &str = "settingsIntent:";
/// `storage.session` key of the ids already applied.
pub const APPLIED_KEY: &str = "settingsApplied";
/// How many applied ids are remembered.
pub const MAX_APPLIED: usize = 200;
/// Longest id after the prefix.
const MAX_INTENT_ID: usize = 64;
/// Longest relay URL accepted.
const MAX_RELAY_URL: usize = 512;

/// The settings as the worker stores them (its IndexedDB record `settings`; camelCase: the popup reads them as
/// they are).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Settings {
    /// Origin of the relay to pair with (the token itself is bound to the origin that issued it).
    pub relay_url: String,
    /// Surface id → captured or not. Nothing is captured until the user turns a surface on.
    pub enabled: Keyed<bool>,
    /// Experimental surfaces may capture.
    pub experimental: bool,
    /// Pause all capture.
    pub kill_switch: bool,
    /// Paired at least once (a missing token then means "sign in again", not "not paired").
    pub ever_paired: bool,
    /// Grows with every write; the popup ignores states older than the newest it saw confirmed.
    pub rev: u64,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            relay_url: DEFAULT_RELAY.to_owned(),
            enabled: Keyed::default(),
            experimental: false,
            kill_switch: false,
            ever_paired: false,
            rev: 0,
        }
    }
}

impl Settings {
    /// Stored settings as read back, with anything unusable replaced by its default.
    pub fn sanitised(mut self) -> Settings {
        // Only a display default for the pairing box (the token is bound to the relay that issued it), so a base
        // paired with the plain-http override is kept as it is.
        self.relay_url =
            parse_relay_url(&self.relay_url).map_or_else(|| DEFAULT_RELAY.to_owned(), |r| r.base);
        self
    }

    /// Whether the user turned this surface on.
    pub fn is_enabled(&self, surface: &str) -> bool {
        self.enabled.get(surface).copied().unwrap_or(false)
    }

    /// These settings after a successful pairing with `relay` (an origin).
    pub fn paired_with(&self, relay: &str) -> Settings {
        Settings {
            relay_url: relay.to_owned(),
            ever_paired: true,
            rev: self.rev + 1,
            ..self.clone()
        }
    }
}

/// A change the popup asks for. Every field is an absolute value, so applying a patch twice changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SettingsPatch {
    #[serde(default)]
    pub relay_url: Option<String>,
    #[serde(default)]
    pub experimental: Option<bool>,
    #[serde(default)]
    pub kill_switch: Option<bool>,
    /// Surface id → on/off; ids the registry does not know are ignored.
    #[serde(default)]
    pub enabled: Keyed<bool>,
}

impl SettingsPatch {
    /// `s` with this patch applied; an invalid relay URL refuses the whole patch.
    pub fn apply(&self, s: &Settings, registry: &Registry) -> Result<Settings, String> {
        let mut out = s.clone();
        if let Some(u) = &self.relay_url {
            out.relay_url = relay_base(u, false).map_err(|e| e.to_string())?;
        }
        if let Some(v) = self.experimental {
            out.experimental = v;
        }
        if let Some(v) = self.kill_switch {
            out.kill_switch = v;
        }
        for (id, on) in self.enabled.iter() {
            if registry.get(id).is_some() {
                out.enabled.insert(id.to_owned(), *on);
            }
        }
        Ok(out)
    }
}

/// A relay URL as the user may give it: `http(s)://host[:port][/path]`, the base every API path is appended to
/// (`https://host/personkit` → `https://host/personkit/v1/observations`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayUrl {
    /// `scheme://host[:port][/path]`: scheme and host lower-cased, the default port and trailing slashes left out.
    pub base: String,
    /// `https`, or plain `http` to a loopback host (127.0.0.0/8, ::1, localhost): the token and the turns are
    /// not readable on the network.
    pub protected: bool,
}

/// Why a relay URL is refused (the message is for the user).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayUrlError {
    #[error(
        "`{0}` is not a relay URL (expected e.g. https://relay.example.com or http://127.0.0.1:8787)"
    )]
    Invalid(String),
    #[error(
        "`{0}` uses plain http to a host that is not this computer: the device token and every captured turn would \
         cross the network unencrypted. Use https (or a relay on 127.0.0.1 / localhost)"
    )]
    PlainHttpRemote(String),
}

/// Parses a relay URL. Userinfo, a query or a fragment, and `.`/`..`/empty path segments are refused rather
/// than dropped: a relay URL has no use for them.
pub fn parse_relay_url(u: &str) -> Option<RelayUrl> {
    let u = u.trim();
    if u.len() > MAX_RELAY_URL || u.contains(['?', '#']) {
        return None;
    }
    let (scheme, rest) = u.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => "80",
        "https" => "443",
        _ => return None,
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (addr, after) = v6.split_once(']')?;
            if addr.is_empty()
                || !addr
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() || b":.".contains(&b))
            {
                return None;
            }
            let port = if after.is_empty() {
                ""
            } else {
                after.strip_prefix(':')?
            };
            (format!("[{}]", addr.to_ascii_lowercase()), port.to_owned())
        }
        None => {
            let (h, p) = authority.split_once(':').unwrap_or((authority, ""));
            let ok = !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b))
                && !h.starts_with('.');
            if !ok {
                return None;
            }
            (h.trim_end_matches('.').to_ascii_lowercase(), p.to_owned())
        }
    };
    if host.is_empty() {
        return None;
    }
    let origin = if port.is_empty() || port == default_port {
        format!("{scheme}://{host}")
    } else {
        let n: u16 = port
            .parse()
            .ok()
            .filter(|_| port.bytes().all(|b| b.is_ascii_digit()))?;
        format!("{scheme}://{host}:{n}")
    };
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let segment_ok = |s: &&str| {
        !s.is_empty()
            && *s != "."
            && *s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=:@".contains(&b))
    };
    if !segments.iter().all(segment_ok) {
        return None;
    }
    let base = if segments.is_empty() {
        origin
    } else {
        format!("{origin}/{}", segments.join("/"))
    };
    Some(RelayUrl {
        protected: scheme == "https" || is_loopback_host(&host),
        base,
    })
}

/// `localhost`, an IPv4 address in 127.0.0.0/8 or the IPv6 loopback `[::1]` (the host as [`parse_relay_url`]
/// normalised it).
pub fn is_loopback_host(host: &str) -> bool {
    if host == "localhost" {
        return true;
    }
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6
            .parse::<std::net::Ipv6Addr>()
            .is_ok_and(|a| a.is_loopback());
    }
    host.parse::<std::net::Ipv4Addr>()
        .is_ok_and(|a| a.is_loopback())
}

/// The base of a relay the token may be sent to: `https`, or plain `http` only to a loopback host unless
/// `allow_plain_http` (the user's explicit override).
pub fn relay_base(u: &str, allow_plain_http: bool) -> Result<String, RelayUrlError> {
    let r = parse_relay_url(u).ok_or_else(|| RelayUrlError::Invalid(u.trim().to_owned()))?;
    if !r.protected && !allow_plain_http {
        return Err(RelayUrlError::PlainHttpRemote(r.base));
    }
    Ok(r.base)
}

/// Whether `k` names a recorded intent.
pub fn is_intent_key(k: &str) -> bool {
    k.strip_prefix(INTENT_PREFIX)
        .is_some_and(|id| !id.is_empty() && id.len() <= MAX_INTENT_ID)
}

/// A recorded intent as the popup writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IntentRecord {
    patch: SettingsPatch,
    /// When the popup recorded it (ms since the epoch); intents apply oldest first.
    #[serde(default)]
    at: u64,
}

/// An intent that could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IntentError {
    pub key: String,
    pub message: String,
}

/// What [`apply_intents`] did, for the worker to persist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IntentsApplied {
    pub settings: Settings,
    /// Some intent was processed (tell open tabs to refresh; write `applied`, delete `remove`).
    pub processed: bool,
    /// `settings` changed (persist them).
    pub changed: bool,
    /// The new `settingsApplied` list.
    pub applied: Vec<String>,
    /// Intent keys to delete from `storage.session`.
    pub remove: Vec<String>,
    /// Why the messaged intent (`extra`) could not be applied; its caller reports this.
    pub error: Option<String>,
    /// Recorded intents that could not be applied (they are removed all the same).
    pub ignored: Vec<IntentError>,
}

/// Applies every intent recorded in `session` (the whole `storage.session` area) oldest first, plus `extra`
/// (`key`, raw patch) from a message when it was not recorded, skipping ids already applied. `now_ms` dates
/// `extra`. Settings change (and `rev` grows by one) when at least one patch applied.
pub fn apply_intents(
    settings: &Settings,
    session: &Keyed<&RawValue>,
    extra: Option<(&str, &RawValue)>,
    now_ms: u64,
    registry: &Registry,
) -> IntentsApplied {
    let mut applied: Vec<String> = session
        .get(APPLIED_KEY)
        .and_then(|raw| serde_json::from_str(raw.get()).ok())
        .unwrap_or_default();
    let mut todo: Vec<(String, Result<SettingsPatch, String>, u64)> = session
        .iter()
        .filter(|(k, _)| is_intent_key(k))
        .map(
            |(k, raw)| match serde_json::from_str::<IntentRecord>(raw.get()) {
                Ok(r) => (k.to_owned(), Ok(r.patch), r.at),
                Err(e) => (k.to_owned(), Err(format!("bad intent record: {e}")), 0),
            },
        )
        .collect();
    todo.sort_by_key(|t| t.2);
    let extra_key = extra.map(|(k, _)| k.to_owned());
    let mut extra_error = None;
    if let Some((key, _)) = extra
        && !is_intent_key(key)
    {
        extra_error = Some(format!(
            "`{key}` is not an intent key ({INTENT_PREFIX}<id>)"
        ));
    } else if let Some((key, patch)) = extra
        && !applied.iter().any(|a| a == key)
        && !todo.iter().any(|t| t.0 == key)
    {
        let patch = serde_json::from_str::<SettingsPatch>(patch.get())
            .map_err(|e| format!("bad settings patch: {e}"));
        todo.push((key.to_owned(), patch, now_ms));
    }
    let mut out = IntentsApplied {
        settings: settings.clone(),
        processed: !todo.is_empty(),
        changed: false,
        applied: Vec::new(),
        remove: Vec::new(),
        error: extra_error,
        ignored: Vec::new(),
    };
    for (key, patch, _) in &todo {
        if applied.contains(key) {
            continue;
        }
        match patch
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|p| p.apply(&out.settings, registry))
        {
            Ok(s) => {
                out.settings = s;
                out.changed = true;
            }
            Err(message) if extra_key.as_deref() == Some(key.as_str()) => out.error = Some(message),
            Err(message) => out.ignored.push(IntentError {
                key: key.clone(),
                message,
            }),
        }
        applied.push(key.clone());
    }
    if out.changed {
        out.settings.rev = settings.rev + 1;
    }
    let cut = applied.len().saturating_sub(MAX_APPLIED);
    out.applied = applied.split_off(cut);
    out.remove = todo
        .into_iter()
        .map(|t| t.0)
        .filter(|k| session.contains_key(k))
        .collect();
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    fn session(entries: &[(&str, &str)]) -> Vec<(String, Box<RawValue>)> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), raw(v)))
            .collect()
    }

    fn apply_intents(
        settings: &Settings,
        session: &[(String, Box<RawValue>)],
        extra: Option<(&str, &RawValue)>,
        now_ms: u64,
        registry: &Registry,
    ) -> IntentsApplied {
        let refs = session
            .iter()
            .map(|(k, v)| (k.clone(), v.as_ref()))
            .collect();
        super::apply_intents(settings, &refs, extra, now_ms, registry)
    }

    #[test]
    fn relay_urls() {
        for (u, want) in [
            ("http://127.0.0.1:8787", Some("http://127.0.0.1:8787")),
            ("http://127.0.0.1:8787/", Some("http://127.0.0.1:8787")),
            (" HTTP://LocalHost:80/ ", Some("http://localhost")),
            ("https://relay.example:443", Some("https://relay.example")),
            (
                "https://relay.example:8443",
                Some("https://relay.example:8443"),
            ),
            (
                "https://Host.example/personkit/",
                Some("https://host.example/personkit"),
            ),
            (
                "https://host.example/a/b-c_d~e%20//",
                Some("https://host.example/a/b-c_d~e%20"),
            ),
            ("http://[::1]:8787/", Some("http://[::1]:8787")),
            ("http://[::1]", Some("http://[::1]")),
            ("http://127.0.0.1:8787/some/path?q#f", None),
            ("https://host/a//b", None),
            ("https://host/a/../b", None),
            ("https://host/./b", None),
            ("https://host/a b", None),
            ("ftp://x", None),
            ("http://", None),
            ("http://:80", None),
            ("http://a b", None),
            ("http://user@host", None),
            ("http://host:99999", None),
            ("http://host:+80", None),
            ("not a url", None),
            ("javascript://x", None),
        ] {
            assert_eq!(parse_relay_url(u).map(|r| r.base).as_deref(), want, "{u}");
        }
        assert!(parse_relay_url(&format!("http://{}", "a".repeat(600))).is_none());
    }

    /// Regression (hardening issue, item 11): plain http to a remote relay was accepted without a word.
    #[test]
    fn plain_http_only_to_loopback() {
        for u in [
            "http://127.0.0.1:8787",
            "http://127.4.5.6:1",
            "http://localhost:9",
            "http://[::1]:8787",
            "http://[0:0:0:0:0:0:0:1]",
            "https://relay.example.com",
            "https://192.168.1.10:8787/personkit",
        ] {
            assert!(relay_base(u, false).is_ok(), "{u}");
        }
        for u in [
            "http://relay.example.com:8787",
            "http://192.168.1.10:8787",
            "http://128.0.0.1",
            "http://127.0.0.1.example.com",
            "http://localhost.example.com",
            "http://[::2]",
            "http://[::ffff:127.0.0.1]",
            "http://10.0.0.1/personkit",
        ] {
            let e = relay_base(u, false).unwrap_err();
            assert!(matches!(e, RelayUrlError::PlainHttpRemote(_)), "{u}: {e:?}");
            assert!(e.to_string().contains("unencrypted"), "{e}");
            assert!(relay_base(u, true).is_ok(), "{u} with the override");
        }
        assert!(matches!(
            relay_base("nope", true),
            Err(RelayUrlError::Invalid(_))
        ));
        // A settings patch cannot name a remote plain-http relay (the override is only for pairing).
        let p: SettingsPatch =
            serde_json::from_str(r#"{"relayUrl": "http://relay.example.com"}"#).unwrap();
        assert!(p.apply(&Settings::default(), Registry::builtin()).is_err());
    }

    #[test]
    fn stored_settings_are_sanitised() {
        let s: Settings =
            serde_json::from_str(r#"{"relayUrl": "nonsense", "killSwitch": true}"#).unwrap();
        let s = s.sanitised();
        assert_eq!(s.relay_url, DEFAULT_RELAY);
        assert!(s.kill_switch);
        assert!(!s.is_enabled("browser-ext:chatgpt"));
    }

    #[test]
    fn a_patch_sets_absolute_values_and_ignores_unknown_surfaces() {
        let r = Registry::builtin();
        let p: SettingsPatch = serde_json::from_str(
            r#"{"killSwitch": true, "enabled": {"browser-ext:claude": true, "browser-ext:nope": true}}"#,
        )
        .unwrap();
        let once = p.apply(&Settings::default(), r).unwrap();
        assert!(once.kill_switch && once.is_enabled("browser-ext:claude"));
        assert!(!once.enabled.contains_key("browser-ext:nope"));
        assert_eq!(p.apply(&once, r).unwrap(), once, "idempotent");
        let bad: SettingsPatch =
            serde_json::from_str(r#"{"relayUrl": "ftp://x", "killSwitch": true}"#).unwrap();
        assert!(
            bad.apply(&Settings::default(), r)
                .unwrap_err()
                .contains("ftp://x")
        );
    }

    #[test]
    fn a_misspelt_patch_key_is_an_error_naming_it() {
        let e = serde_json::from_str::<SettingsPatch>(r#"{"killswitch": true}"#).unwrap_err();
        assert!(e.to_string().contains("killswitch"), "{e}");
    }

    #[test]
    fn intents_apply_oldest_first_once_and_are_removed() {
        let r = Registry::builtin();
        let s = session(&[
            (
                "settingsIntent:b",
                r#"{"patch": {"killSwitch": false}, "at": 20}"#,
            ),
            (
                "settingsIntent:a",
                r#"{"patch": {"killSwitch": true}, "at": 10}"#,
            ),
            ("unrelated", "1"),
        ]);
        let out = apply_intents(&Settings::default(), &s, None, 0, r);
        assert!(out.processed && out.changed);
        assert!(!out.settings.kill_switch, "the newer intent wins");
        assert_eq!(out.settings.rev, 1);
        assert_eq!(out.applied, ["settingsIntent:a", "settingsIntent:b"]);
        assert_eq!(out.remove, ["settingsIntent:a", "settingsIntent:b"]);

        // Replayed after being applied (the applied list is in the session): nothing changes.
        let mut again = s.clone();
        again.push((
            APPLIED_KEY.into(),
            raw(&serde_json::to_string(&out.applied).unwrap()),
        ));
        let replay = apply_intents(&out.settings, &again, None, 0, r);
        assert!(replay.processed && !replay.changed);
        assert_eq!(replay.settings, out.settings);

        // The messaged copy of a recorded intent is applied once, not twice.
        let patch = raw(r#"{"killSwitch": true}"#);
        let both = apply_intents(
            &Settings::default(),
            &s,
            Some(("settingsIntent:a", &patch)),
            99,
            r,
        );
        assert_eq!(both.applied.len(), 2);
        assert!(!both.settings.kill_switch);
    }

    #[test]
    fn a_message_without_a_record_is_applied_and_its_error_reported() {
        let r = Registry::builtin();
        let empty = Vec::new();
        assert!(!apply_intents(&Settings::default(), &empty, None, 0, r).processed);
        let patch = raw(r#"{"enabled": {"browser-ext:gemini": true}}"#);
        let out = apply_intents(
            &Settings::default(),
            &empty,
            Some(("settingsIntent:m", &patch)),
            5,
            r,
        );
        assert!(out.changed && out.settings.is_enabled("browser-ext:gemini"));
        assert!(out.remove.is_empty(), "nothing recorded, nothing to delete");
        let bad = raw(r#"{"relayUrl": "nope"}"#);
        let out = apply_intents(
            &Settings::default(),
            &empty,
            Some(("settingsIntent:n", &bad)),
            5,
            r,
        );
        assert!(!out.changed);
        assert!(out.error.unwrap().contains("nope"));
        assert_eq!(
            out.applied,
            ["settingsIntent:n"],
            "a bad intent is not retried"
        );
        let out = apply_intents(&Settings::default(), &empty, Some(("mine", &patch)), 5, r);
        assert!(!out.changed && out.error.unwrap().contains("mine"));
        let typo = raw(r#"{"enabeld": {}}"#);
        let out = apply_intents(
            &Settings::default(),
            &empty,
            Some(("settingsIntent:t", &typo)),
            5,
            r,
        );
        assert!(out.error.unwrap().contains("enabeld"));
    }

    #[test]
    fn bad_records_are_dropped_with_a_reason_and_the_applied_list_is_bounded() {
        let r = Registry::builtin();
        let mut s = session(&[("settingsIntent:x", r#"{"patch": {"kill": true}}"#)]);
        let many: Vec<String> = (0..MAX_APPLIED + 5)
            .map(|i| format!("settingsIntent:{i}"))
            .collect();
        s.push((
            APPLIED_KEY.into(),
            raw(&serde_json::to_string(&many).unwrap()),
        ));
        let out = apply_intents(&Settings::default(), &s, None, 0, r);
        assert!(!out.changed);
        assert_eq!(out.ignored.len(), 1);
        assert!(out.ignored[0].message.contains("kill"));
        assert_eq!(out.remove, ["settingsIntent:x"]);
        assert_eq!(out.applied.len(), MAX_APPLIED);
        assert_eq!(out.applied.last().unwrap(), "settingsIntent:x");
    }

    /// The popup writes intents under the prefix in `messages.js` and the worker writes the applied list under its
    /// own key: both must be the ones this module reads.
    #[test]
    fn the_extension_uses_the_keys_the_core_reads() {
        let messages = include_str!("../../../extension/src/messages.js");
        assert!(messages.contains(&format!("INTENT_PREFIX = '{INTENT_PREFIX}'")));
        let worker = include_str!("../../../extension/src/bg.js");
        assert!(worker.contains(&format!("APPLIED_KEY = '{APPLIED_KEY}'")));
    }

    #[test]
    fn intent_keys() {
        assert!(is_intent_key(
            "settingsIntent:0b6f9d7e-1111-4222-8333-944455556666"
        ));
        assert!(!is_intent_key("settingsIntent:"));
        assert!(!is_intent_key("settingsApplied"));
        assert!(!is_intent_key(&format!(
            "settingsIntent:{}",
            "x".repeat(65)
        )));
    }
}
