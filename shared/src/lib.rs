//! `personkit-shared` is the plain-Rust core that both the relay and the browser extension use: the wire format (v2,
//! which accepts v1 items; `docs/wire-format.md`), the one function that computes a turn's content hash, the one
//! function that derives a thread id, and the validation rules that every client and the relay apply to an observation;
//! the extension's capture core (`capture`); and the parsers of what the chat sites' pages receive over the network
//! (`network`).
//! How a turn's parts become its text, and how that text is read back, is written once, in `turn_text`.
//! What is taken out of text before it leaves the machine: `scrub` (e-mails, phones, amounts) and `pseudonym`
//! (those plus secrets, and people's names as keyed `Person_XXXX` pseudonyms, read back by `reidentify`).
//!
//! Where the relay's settings file is, for every crate that reads a section of it: `settings_file`.
//!
//! It is not a server and not a browser binding: no tokio, no SQL, no JS types. It must build for
//! `wasm32-unknown-unknown` (`cargo check -p personkit-shared --target wasm32-unknown-unknown` runs in CI).

pub mod capture;
pub mod health;
pub mod identity;
pub mod ids;
pub mod network;
pub mod pseudonym;
pub mod scrub;
pub mod settings_file;
pub mod time;
pub mod turn_text;
pub mod wire;

pub use ids::{content_hash, message_id, thread_id};
