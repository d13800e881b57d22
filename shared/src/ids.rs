//! Content-derived identifiers. Each derivation lives in exactly one function here; every client (extension,
//! importers, other relays) and the relay call these, and `docs/wire-format.md` publishes their test vectors.

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::wire::Role;

/// Separator between content and role in the content hash (ASCII record separator).
const RECORD_SEPARATOR: u8 = 0x1E;

/// `content_hash` = lowercase hex of sha256(UTF-8 content ‖ 0x1E ‖ UTF-8 role).
pub fn content_hash(content: &str, role: Role) -> String {
    let mut hasher = Sha256::new();
    hasher.update(content.as_bytes());
    hasher.update([RECORD_SEPARATOR]);
    hasher.update(role.as_str().as_bytes());
    hex::encode(hasher.finalize())
}

/// The hash a turn is stored under when its thread already holds the same words under another of the source's
/// ids (a prompt asked twice, "go on" typed again): `content_hash(content ‖ 0x1E ‖ message_key, role)`. It keeps
/// the two turns apart while a resend of either is still recognised.
pub fn repeat_hash(content: &str, role: Role, message_key: &str) -> String {
    let mut c = String::with_capacity(content.len() + message_key.len() + 1);
    c.push_str(content);
    c.push(char::from(RECORD_SEPARATOR));
    c.push_str(message_key);
    content_hash(&c, role)
}

/// The namespace of thread ids: UUIDv5(NAMESPACE_URL, "personkit:thread").
pub fn thread_namespace() -> Uuid {
    Uuid::new_v5(&Uuid::NAMESPACE_URL, b"personkit:thread")
}

/// The namespace of message ids: UUIDv5(NAMESPACE_URL, "personkit:message").
pub fn message_namespace() -> Uuid {
    Uuid::new_v5(&Uuid::NAMESPACE_URL, b"personkit:message")
}

/// `thread_id` = UUIDv5(thread_namespace(), "<source_surface>|<conversation_id>").
pub fn thread_id(source_surface: &str, conversation_id: &str) -> Uuid {
    let name = format!("{source_surface}|{conversation_id}");
    Uuid::new_v5(&thread_namespace(), name.as_bytes())
}

/// A message's content-derived id: UUIDv5(message_namespace(), "<thread_id>|<content_hash>"). Two relays that
/// store the same turn of the same thread give it the same id, which is what relay-to-relay sync relies on.
pub fn message_id(thread_id: &Uuid, content_hash: &str) -> Uuid {
    let name = format!("{}|{content_hash}", thread_id.hyphenated());
    Uuid::new_v5(&message_namespace(), name.as_bytes())
}

/// An event's content hash: lowercase hex of sha256(kind ‖ 0x1E ‖ key ‖ 0x1E ‖ content). `key` is what tells two
/// events with the same words apart (a commit's repository and sha, a file's path, a thread's id); the same hash
/// in the same minute bucket is one event.
pub fn event_content_hash(kind: &str, key: &str, content: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(kind.as_bytes());
    hasher.update([RECORD_SEPARATOR]);
    hasher.update(key.as_bytes());
    hasher.update([RECORD_SEPARATOR]);
    hasher.update(content.as_bytes());
    hex::encode(hasher.finalize())
}

/// The minute bucket of a time in milliseconds since the Unix epoch (whole minutes, rounded down).
pub fn minute_bucket(ms: i64) -> i64 {
    ms.div_euclid(60_000)
}

/// An event's content-derived id: `ev_` and the first 32 hex digits of sha256("<content_hash>|<minute_bucket>"),
/// so two relays that record the same event give it the same id.
pub fn event_id(content_hash: &str, minute_bucket: i64) -> String {
    let d = Sha256::digest(format!("{content_hash}|{minute_bucket}").as_bytes());
    format!("ev_{}", &hex::encode(d)[..32])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Vectors published in docs/wire-format.md, computed independently with Python's hashlib and uuid modules.
    #[test]
    fn content_hash_matches_published_vectors() {
        assert_eq!(
            content_hash("hello", Role::User),
            "0cff74a73463e0849e0ca374bbcc18988bbe376327164dd538c96eaecaabc201"
        );
        assert_eq!(
            content_hash("Hello, world!", Role::Assistant),
            "3cf05d086b4581369d32db72a6bfbd920d74bb84c2c347b05f67d5b4d72cb793"
        );
        assert_eq!(
            content_hash("h\u{e9}llo \u{2713}", Role::User),
            "c3381b22a3b213f340bd44be95f952e7b80d1d1fe5842fd26aca9588d1a08c60"
        );
    }

    #[test]
    fn ids_match_published_vectors() {
        assert_eq!(
            thread_namespace().to_string(),
            "0e97ca4e-21e4-5581-911c-7cfa00950c48"
        );
        assert_eq!(
            message_namespace().to_string(),
            "6973d6f9-bc01-5d21-adb1-7035f5d64f72"
        );
        let thread = thread_id(
            "browser-ext:chatgpt",
            "6750a1b2-0000-4000-8000-000000000001",
        );
        assert_eq!(thread.to_string(), "c0c8ab94-7374-5ca9-b879-da010316dd5d");
        let hash = content_hash("Hello, world!", Role::Assistant);
        assert_eq!(
            message_id(&thread, &hash).to_string(),
            "ef6f8b0e-131a-57f7-b1e2-03f661260f59"
        );
    }

    proptest! {
        #[test]
        fn content_hash_is_stable_and_role_sensitive(content in ".{0,200}") {
            let a = content_hash(&content, Role::User);
            prop_assert_eq!(&a, &content_hash(&content, Role::User));
            prop_assert_ne!(&a, &content_hash(&content, Role::Assistant));
            prop_assert_eq!(a.len(), 64);
            prop_assert!(a.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        }

        #[test]
        fn thread_id_is_stable_and_version_5(surface in "[a-z:-]{1,30}", conv in ".{1,60}") {
            let a = thread_id(&surface, &conv);
            prop_assert_eq!(a, thread_id(&surface, &conv));
            prop_assert_eq!(a.get_version_num(), 5);
        }
    }

    #[test]
    fn event_hashes_tell_kinds_keys_and_minutes_apart() {
        let h = event_content_hash("git.commit", "repo@abc", "fix");
        assert_eq!(h, event_content_hash("git.commit", "repo@abc", "fix"));
        assert_ne!(h, event_content_hash("git.commit", "repo@abd", "fix"));
        assert_ne!(h, event_content_hash("plan.updated", "repo@abc", "fix"));
        // The separator keeps key and content apart.
        assert_ne!(
            event_content_hash("k", "a", "bc"),
            event_content_hash("k", "ab", "c")
        );
        assert_eq!(minute_bucket(59_999), 0);
        assert_eq!(minute_bucket(60_000), 1);
        assert_eq!(minute_bucket(-1), -1);
        assert_ne!(event_id(&h, 1), event_id(&h, 2));
        assert!(event_id(&h, 1).starts_with("ev_") && event_id(&h, 1).len() == 35);
    }
}
