//! What leaves the machine. Text for a model in this process or on loopback is sent as stored (scrub `auto`);
//! for any other endpoint — or always, with `scrub = "on"` — every call's text is scrubbed first: secrets,
//! e-mail addresses, phone numbers and money amounts become placeholders, and people's names become stable
//! pseudonyms (`Person_XXXX`, from a keyed hash) whose map stays in the corpus, so names in the answer are put
//! back before anything is stored. Only `scrub = "off"`, said explicitly, sends text as stored to a remote model.

use std::collections::BTreeMap;

use personkit_embed::ScrubMode;
use personkit_embed::scrub::Decision;
use personkit_shared::pseudonym::{MapError, Mapping, Options, Pseudonymiser};

/// The scrubbing of one run's calls. `Debug` shows the decision and counts, never the key or the map.
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
    ) -> Result<Privacy, MapError> {
        let known = map
            .into_iter()
            .map(|(pseudonym, real)| Mapping { pseudonym, real });
        Ok(Privacy {
            decision: Decision::of(mode, endpoint),
            pseudonymiser: Pseudonymiser::new(key, known, Options { names, user_names })?,
            replaced: BTreeMap::new(),
            new_names: Vec::new(),
        })
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
        let c = &s.counts;
        for (kind, n) in [
            ("email", c.email),
            ("phone", c.phone),
            ("amount", c.amount),
            ("secret", c.secret),
            ("name", c.name),
        ] {
            if n > 0 {
                *self.replaced.entry(kind.to_owned()).or_default() += n as u64;
            }
        }
        self.new_names
            .extend(s.new.into_iter().map(|m| (m.pseudonym, m.real)));
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

impl std::fmt::Debug for Privacy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Privacy")
            .field("decision", &self.decision)
            .field("replaced", &self.replaced)
            .finish_non_exhaustive()
    }
}
