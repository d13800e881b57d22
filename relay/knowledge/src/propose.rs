//! Agents' proposals: an agent may file a note it believes is the user's knowledge, with its reason and the turns
//! it rests on. It lands pending like the pipeline's entries, named after the agent, and only the user approves it.
//! Proposals are rate-limited per agent and validated like the pipeline's candidates; a proposal that says what a
//! known entry says reinforces that entry instead of adding a second one.

use serde::Deserialize;
use serde_json::json;

use personkit_store::Db;
use personkit_store::clock::Clock;
use personkit_store::knowledge::{self as rows, NewEntry};

use crate::reconcile::{self, Outcome};
use crate::{KnowledgeError, Settings, validate};

/// Most sources one proposal cites.
pub const MAX_SOURCES: usize = 20;

/// What an agent sends.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Proposal {
    /// One of reasoning, philosophy, standard, decision, reaction.
    #[serde(rename = "type")]
    pub kind: String,
    /// What it is about, in a few words.
    pub topic: String,
    /// The user's position.
    pub position: String,
    /// Why the user holds it (not boilerplate; at least a sentence).
    pub reasoning: String,
    /// The situation it holds in, if it is not general.
    #[serde(default)]
    pub context: Option<String>,
    #[serde(default)]
    pub confidence: Option<String>,
    #[serde(default)]
    pub stability: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    /// Message ids (from search results) the proposal rests on; at least one.
    pub sources: Vec<String>,
    /// Why the agent proposes it.
    pub reason: String,
}

/// A proposal refused, with a stable code and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
    pub hint: &'static str,
}

/// What became of an accepted proposal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Filed {
    pub id: String,
    /// `pending` (a new entry waiting for the user) or `reinforced` (a known entry said the same).
    pub outcome: String,
}

/// Files `p` for `agent`. `Err(Ok(refusal))` is the agent's to fix; `Err(Err(_))` is the store's.
pub fn propose(
    db: &Db,
    agent: &str,
    p: &Proposal,
    settings: &Settings,
    clock: &Clock,
) -> Result<Filed, Result<Refusal, KnowledgeError>> {
    let refuse = |code, message: String, hint| {
        Err(Ok(Refusal {
            code,
            message,
            hint,
        }))
    };
    if p.reason.trim().chars().count() < 10 {
        return refuse(
            "reason_missing",
            "say why you propose this (reason, at least a sentence)".into(),
            "the user reads your reason when deciding",
        );
    }
    if p.sources.is_empty() || p.sources.len() > MAX_SOURCES {
        return refuse(
            "sources_invalid",
            format!(
                "cite 1 to {MAX_SOURCES} message ids, got {}",
                p.sources.len()
            ),
            "use the message ids search results return",
        );
    }
    let origin = format!("agent:{agent}");
    let now = clock.now();
    let hour_ago = now - time::Duration::hours(1);
    let found = db
        .read(|c| {
            Ok::<_, KnowledgeError>((
                rows::proposed_since(c, &origin, hour_ago)?,
                rows::message_threads(c, &p.sources)?,
            ))
        })
        .map_err(Err)?;
    let (recent, sources) = found;
    if recent >= u64::from(settings.proposals_per_hour) {
        return refuse(
            "rate_limited",
            format!(
                "{recent} proposals in the last hour; the limit is {}",
                settings.proposals_per_hour
            ),
            "propose again later; the user is reviewing what you filed",
        );
    }
    if sources.len() != p.sources.len() {
        let missing: Vec<&String> = p
            .sources
            .iter()
            .filter(|id| !sources.iter().any(|s| &s.message_id == *id))
            .collect();
        return refuse(
            "sources_unknown",
            format!("no stored message has the id(s) {missing:?}"),
            "cite message ids exactly as search or get_thread return them",
        );
    }
    // The pipeline's validation, with the sources already checked.
    let labels: Vec<u32> = (1..=p.sources.len() as u32).collect();
    let as_json = json!({
        "type": p.kind, "topic": p.topic, "position": p.position, "reasoning": p.reasoning,
        "context": p.context, "confidence": p.confidence, "stability": p.stability, "tags": p.tags,
        "sources": labels,
    });
    let c = match validate::candidate(&as_json, p.sources.len() as u32) {
        Ok(c) => c,
        Err(why) => {
            return refuse(
                "proposal_invalid",
                why,
                "type is one of reasoning, philosophy, standard, decision, reaction; topic, position and a real reasoning are required",
            );
        }
    };
    let mut entry = NewEntry {
        kind: c.kind,
        topic: c.topic,
        position: c.position,
        reasoning: c.reasoning,
        context: c.context,
        confidence: c.confidence,
        stability: c.stability,
        tags: c.tags,
        origin: origin.clone(),
        reason: Some(p.reason.trim().chars().take(1_000).collect()),
        sources,
        ..NewEntry::default()
    };
    let run = format!("proposal:{agent}");
    db.write(|conn| {
        let known = rows::near_topic(conn, &entry.topic, 20)?;
        let (id, outcome) = match reconcile::decide(&entry.topic, &entry.position, &known) {
            Outcome::Reinforces(id) => {
                rows::reinforce(conn, &id, &entry.sources, now)?;
                (id, "reinforced")
            }
            Outcome::VariantOf(of) => {
                entry.variant_of = Some(of);
                (rows::insert(conn, &entry, now)?, "pending")
            }
            Outcome::New => (rows::insert(conn, &entry, now)?, "pending"),
        };
        let ids: Vec<String> = entry.sources.iter().map(|s| s.message_id.clone()).collect();
        rows::audit(
            conn,
            &run,
            "proposal",
            &ids,
            &json!({"agent": agent, "entry": id, "topic": entry.topic, "outcome": outcome,
                    "reason": entry.reason}),
            now,
        )?;
        Ok::<_, KnowledgeError>(Filed {
            id,
            outcome: outcome.into(),
        })
    })
    .map_err(Err)
}
