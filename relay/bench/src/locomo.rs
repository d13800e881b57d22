//! Loader for the LoCoMo conversational-memory data set (`locomo-dev.json`): conversations of dated sessions
//! and questions whose evidence are dialog ids (`D3:7` = session 3, turn 7). Each session becomes one thread of
//! surface `import:locomo`; each turn one message whose content is `"<speaker>: <text>"`, followed by
//! `[shared a photo: <caption>]` when the turn shared an image (the caption is the only text the data set has for
//! it), dated from its session.

use std::collections::HashMap;

use personkit_shared::ids;
use personkit_shared::wire::{self, ClientInfo, Observation, Role};
use serde::Deserialize;

/// The bench surface.
pub const SURFACE: &str = "import:locomo";

/// What text goes into a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextMode {
    /// `speaker: text` only (what the published reference figures index).
    Plain,
    /// `speaker: text [shared a photo: caption]`.
    WithCaptions,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Sample {
    pub sample_id: String,
    pub conversation: serde_json::Map<String, serde_json::Value>,
    pub qa: Vec<Qa>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Qa {
    pub question: String,
    #[serde(default)]
    pub evidence: Vec<String>,
    pub category: u8,
}

#[derive(Debug, Clone, Deserialize)]
struct RawTurn {
    speaker: String,
    dia_id: String,
    text: String,
    #[serde(default)]
    blip_caption: Option<String>,
}

/// One turn, ready to ingest.
#[derive(Debug, Clone)]
pub struct Turn {
    pub dia_id: String,
    pub role: Role,
    pub content: String,
    pub ordinal: u32,
}

/// One session = one thread.
#[derive(Debug, Clone)]
pub struct Session {
    pub conversation_id: String,
    pub thread_id: String,
    pub title: String,
    pub occurred_at: String,
    pub turns: Vec<Turn>,
}

/// One conversation with its sessions and questions.
#[derive(Debug, Clone)]
pub struct Conversation {
    pub sample_id: String,
    pub sessions: Vec<Session>,
    pub qa: Vec<Qa>,
}

impl Conversation {
    /// The people who speak in the conversation (each turn's `"<speaker>: "` prefix), in order of first turn.
    pub fn speakers(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in self.sessions.iter().flat_map(|s| &s.turns) {
            if let Some((name, _)) = t.content.split_once(": ")
                && !out.iter().any(|n| n == name)
            {
                out.push(name.to_owned());
            }
        }
        out
    }

    pub fn thread_ids(&self) -> Vec<String> {
        self.sessions.iter().map(|s| s.thread_id.clone()).collect()
    }

    /// dia_id -> message id (as the relay computes it).
    pub fn message_ids(&self) -> HashMap<String, String> {
        let mut out = HashMap::new();
        for s in &self.sessions {
            let Ok(tid) = uuid::Uuid::parse_str(&s.thread_id) else {
                continue;
            };
            for t in &s.turns {
                let h = ids::content_hash(&t.content, t.role);
                out.insert(
                    t.dia_id.clone(),
                    ids::message_id(&tid, &h).hyphenated().to_string(),
                );
            }
        }
        out
    }
}

/// Dialog ids in an evidence string (some entries hold several, e.g. `"D8:6; D9:17"`).
pub fn evidence_ids(evidence: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for e in evidence {
        for part in e.split(|c: char| c == ';' || c == ',' || c.is_whitespace()) {
            let p = part.trim();
            if p.starts_with('D') && p.contains(':') {
                out.push(p.to_owned());
            }
        }
    }
    out
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// Parses LoCoMo's `"1:56 pm on 8 May, 2023"` into `2023-05-08T13:56:00.000Z` (times taken as UTC).
pub fn parse_date(s: &str) -> Option<String> {
    let (clock, date) = s.split_once(" on ")?;
    let clock = clock.trim().to_lowercase();
    let (hm, ampm) = clock.split_once(' ')?;
    let (h, m) = hm.split_once(':')?;
    let mut h: u32 = h.parse().ok()?;
    let m: u32 = m.parse().ok()?;
    match ampm {
        "pm" if h != 12 => h += 12,
        "am" if h == 12 => h = 0,
        _ => {}
    }
    let date = date.replace(',', " ");
    let parts: Vec<&str> = date.split_whitespace().collect();
    let [day, month, year] = parts.as_slice() else {
        return None;
    };
    let day: u32 = day.parse().ok()?;
    let month = MONTHS
        .iter()
        .position(|mm| mm.starts_with(&month.to_lowercase()))?
        + 1;
    let year: i32 = year.parse().ok()?;
    Some(format!(
        "{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:00.000Z"
    ))
}

/// Loads and converts the data set.
pub fn load(path: &std::path::Path, mode: TextMode) -> anyhow::Result<Vec<Conversation>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let samples: Vec<Sample> = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{} is not a LoCoMo JSON array: {e}", path.display()))?;
    samples.into_iter().map(|s| convert(s, mode)).collect()
}

fn convert(s: Sample, mode: TextMode) -> anyhow::Result<Conversation> {
    let c = &s.conversation;
    let speaker_a = c
        .get("speaker_a")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_owned();
    let mut numbers: Vec<u32> = c
        .keys()
        .filter_map(|k| k.strip_prefix("session_"))
        .filter_map(|n| n.parse().ok())
        .collect();
    numbers.sort_unstable();
    let mut sessions = Vec::new();
    for n in numbers {
        let Some(turns) = c.get(&format!("session_{n}")).and_then(|v| v.as_array()) else {
            continue;
        };
        if turns.is_empty() {
            continue;
        }
        let date_raw = c
            .get(&format!("session_{n}_date_time"))
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        let occurred_at = parse_date(date_raw).ok_or_else(|| {
            anyhow::anyhow!("{} session {n}: unreadable date {date_raw:?}", s.sample_id)
        })?;
        let conversation_id = format!("{}/session_{n}", s.sample_id);
        let thread_id = ids::thread_id(SURFACE, &conversation_id)
            .hyphenated()
            .to_string();
        let mut out = Vec::new();
        for (i, t) in turns.iter().enumerate() {
            let t: RawTurn = serde_json::from_value(t.clone())?;
            let role = if t.speaker == speaker_a {
                Role::User
            } else {
                Role::Assistant
            };
            let mut content = format!("{}: {}", t.speaker, t.text.trim());
            if mode == TextMode::WithCaptions
                && let Some(cap) = t.blip_caption.as_deref().filter(|c| !c.trim().is_empty())
            {
                content.push_str(&format!(" [shared a photo: {}]", cap.trim()));
            }
            out.push(Turn {
                dia_id: t.dia_id,
                role,
                content,
                ordinal: i as u32,
            });
        }
        sessions.push(Session {
            conversation_id,
            thread_id,
            title: format!("LoCoMo {} session {n} ({date_raw})", s.sample_id),
            occurred_at,
            turns: out,
        });
    }
    Ok(Conversation {
        sample_id: s.sample_id,
        sessions,
        qa: s.qa,
    })
}

/// Wire observations for a session (one per turn).
pub fn observations(session: &Session) -> Vec<Observation> {
    session
        .turns
        .iter()
        .map(|t| {
            let mut o = wire::build_observation(
                SURFACE,
                &session.conversation_id,
                t.role,
                &t.content,
                Some(t.ordinal),
                Some(&t.dia_id),
                &session.occurred_at,
                ClientInfo {
                    app_version: concat!("personkit-bench/", env!("CARGO_PKG_VERSION")).into(),
                    device_id: "bench-locomo".into(),
                },
            );
            o.title = Some(session.title.clone());
            o.turn.occurred_at = Some(session.occurred_at.clone());
            o
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn dates_parse() {
        assert_eq!(
            parse_date("1:56 pm on 8 May, 2023").as_deref(),
            Some("2023-05-08T13:56:00.000Z")
        );
        assert_eq!(
            parse_date("12:09 am on 13 September, 2023").as_deref(),
            Some("2023-09-13T00:09:00.000Z")
        );
        assert_eq!(parse_date("nonsense"), None);
    }

    #[test]
    fn evidence_splits() {
        assert_eq!(
            evidence_ids(&["D8:6; D9:17".into(), "D1:3".into()]),
            vec!["D8:6", "D9:17", "D1:3"]
        );
    }
}
