//! The capture core of the browser extension, in plain Rust: the surface registry (data, not code), the capture
//! policy (settings, kill switch, skip list, message limits) and the settings-intent merge, turn normalisation,
//! redaction of secrets, the dedupe set of what this browser already queued, the delivery queue's state machine,
//! local stats and the popup's traffic lights. It is pure: no DOM, no storage, no network, no clock. The extension's JS reads the
//! page and the clock, persists the serialisable state this module hands back, and performs the HTTP requests
//! whose outcome it feeds back in. `extension-wasm` exposes [`api`] to JS as JSON-string one-liners; [`api`] is only the
//! JSON edge over the typed state ([`core`]) and the typed capture pipeline ([`pipeline`]).

pub mod api;
pub mod core;
pub mod dedupe;
pub mod health;
pub mod keyed;
pub mod normalize;
pub mod pipeline;
pub mod policy;
pub mod progress;
pub mod queue;
pub mod redact;
pub mod registry;
pub mod render;
pub mod settings;

pub use dedupe::SeenSet;
pub use queue::{QueueConfig, QueueState};
pub use redact::{PatternError, Redactor};
pub use registry::{Registry, Surface};
