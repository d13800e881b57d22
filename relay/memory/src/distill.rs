//! The mid and long tiers: a model distils the tier below.
//!
//! - **mid** summarises the newest short version: recurring themes, decisions, ongoing projects, current
//!   priorities.
//! - **long** integrates the newest mid version into the previous long one: historical facts kept, stale ones
//!   updated, new themes absorbed, what no longer matters dropped.
//!
//! The material is scrubbed on its way to a model off this machine (`personkit_knowledge::privacy`) and names are
//! put back in the answer; the call is in the knowledge audit log (kind `call`, stage `memory:<tier>`). The answer
//! is Markdown, checked (not empty, words in it, not an echo of the instructions) and cut to the tier's budget. A
//! failed call or a refused answer records a `failed` run and leaves the current version in place.

use std::time::Instant;

use serde_json::json;
use time::OffsetDateTime;

use personkit_knowledge::privacy::Privacy;
use personkit_llm::{ChatModel, Request};
use personkit_store::Connection;
use personkit_store::clock::fmt_time;
use personkit_store::knowledge as krows;
use personkit_store::memory::{self as rows, NewVersion, Version};

use crate::{LastRun, MemoryError, Settings, Tier, clear_due, cut_to_budget, record_run, tokens};

/// The prompts' version, stored with every version a model wrote.
pub const PROMPT_VERSION: &str = "memory-v1";

/// Tokens the instructions take beside the material.
const PROMPT_OVERHEAD: usize = 400;

fn mid_system(budget: usize) -> String {
    format!(
        "You keep the mid-term memory an AI assistant loads about one person, called \"the user\". \
         Below is a digest of the user's recent conversations with AI tools and their coding-agent sessions, day \
         by day. Write a concise Markdown summary under these headings: \
         \"## Recurring themes\", \"## Decisions\", \"## Ongoing projects\", \"## Current priorities\". \
         Use only what the digest says; never invent names, dates or facts; leave a heading with \"- none\" when \
         the digest says nothing for it. Write short bullet points. Stay under {} words.",
        budget * 3 / 4
    )
}

fn long_system(budget: usize) -> String {
    format!(
        "You maintain the long-term memory an AI assistant loads about one person, called \"the user\". \
         You get the current long-term memory (it may be empty) and a new mid-term summary. Integrate the summary \
         into the memory: keep historical facts, update facts the summary shows are stale, absorb new themes, and \
         drop what no longer matters. Answer with the whole updated long-term memory in Markdown under these \
         headings: \"## Who the user is and how they work\", \"## Long-running projects\", \
         \"## Decisions and positions\", \"## History\". Use only what the texts say; never invent. Write short \
         bullet points. Stay under {} words.",
        budget * 3 / 4
    )
}

/// An answer made usable: fences removed, trimmed; `Err` says why it is refused.
pub fn check_answer(answer: &str, system: &str) -> Result<String, String> {
    let mut text = answer.trim();
    if let Some(rest) = text.strip_prefix("```") {
        let rest = rest.split_once('\n').map_or("", |(_, r)| r);
        text = rest.trim_end().strip_suffix("```").unwrap_or(rest).trim();
    }
    let words = text
        .split_whitespace()
        .filter(|w| w.chars().any(char::is_alphabetic))
        .count();
    if words < 5 {
        return Err(format!("the answer has {words} words"));
    }
    // An answer that repeats the instructions at length is not a summary.
    let echo = system
        .split(". ")
        .filter(|s| s.len() > 40 && text.contains(s.trim()))
        .count();
    if echo >= 2 {
        return Err("the answer repeats the instructions".into());
    }
    Ok(text.to_owned())
}

struct Material {
    system: String,
    user: String,
    based_on: Vec<String>,
    sources: Vec<String>,
    covers_from: Option<String>,
    covers_to: Option<String>,
}

fn material(conn: &Connection, tier: Tier, budget: usize) -> Result<Material, MemoryError> {
    let need = |t: Tier, run: &str| -> Result<Version, MemoryError> {
        rows::latest(conn, t.as_str())?.ok_or_else(|| {
            MemoryError::Off(format!(
                "there is no {} memory to distil yet: run `personkit distill {run}` first",
                t.as_str()
            ))
        })
    };
    let mut sources = Vec::new();
    match tier {
        Tier::Mid => {
            let short = need(Tier::Short, "short")?;
            sources.extend(rows::sources(conn, &short.id)?);
            Ok(Material {
                system: mid_system(budget),
                user: format!("Digest of recent activity:\n\n{}", short.body),
                based_on: vec![short.id.clone()],
                sources,
                covers_from: short.covers_from.clone(),
                covers_to: short.covers_to.clone(),
            })
        }
        Tier::Long => {
            let mid = need(Tier::Mid, "mid")?;
            let previous = rows::latest(conn, Tier::Long.as_str())?;
            sources.extend(rows::sources(conn, &mid.id)?);
            let mut based_on = vec![mid.id.clone()];
            if let Some(p) = &previous {
                sources.extend(rows::sources(conn, &p.id)?);
                based_on.push(p.id.clone());
            }
            sources.sort();
            sources.dedup();
            let current = previous.as_ref().map_or("(empty)", |p| p.body.as_str());
            Ok(Material {
                system: long_system(budget),
                user: format!(
                    "Current long-term memory:\n\n{current}\n\nNew mid-term summary:\n\n{}",
                    mid.body
                ),
                based_on,
                sources,
                covers_from: previous
                    .as_ref()
                    .and_then(|p| p.covers_from.clone())
                    .or(mid.covers_from.clone()),
                covers_to: mid.covers_to.clone(),
            })
        }
        Tier::Short => Err(MemoryError::Invalid(
            "the short tier is made without a model: use short::run".into(),
        )),
    }
}

/// One run of `tier` (mid or long) with `model`, as of `now`. The knowledge settings say how text is scrubbed.
pub fn run(
    conn: &Connection,
    tier: Tier,
    settings: &Settings,
    knowledge: &personkit_knowledge::Settings,
    model: &dyn ChatModel,
    now: OffsetDateTime,
    trigger: &str,
) -> Result<LastRun, MemoryError> {
    let ts = settings.tier(tier);
    if !ts.enabled {
        return Err(MemoryError::Off(format!(
            "the {0} tier is off ([memory.{0}] enabled = false)",
            tier.as_str()
        )));
    }
    let started = Instant::now();
    let m = material(conn, tier, ts.budget)?;
    let key = personkit_knowledge::pseudonym_key(conn)?;
    let mut privacy = Privacy::new(
        knowledge.scrub,
        model.endpoint(),
        key,
        krows::pseudonyms(conn)?,
        knowledge.names,
        knowledge.user_names.clone(),
    )
    .map_err(|e| MemoryError::Config(format!("the stored pseudonym map is unusable: {e}")))?;
    // The material is cut to what the model reads beside the instructions and the answer.
    let room = model
        .context_tokens()
        .saturating_sub(ts.budget + PROMPT_OVERHEAD + tokens(&m.system))
        .max(200);
    let (user, _) = cut_to_budget(&m.user, room);
    let request = Request {
        system: m.system.clone(),
        user: privacy.outgoing(&user),
        shape: None,
        max_tokens: ts.budget as u32,
        timeout: knowledge.call_timeout,
    };
    let call_started = Instant::now();
    let answer = model.complete(&request);
    let ms = call_started.elapsed().as_millis() as u64;
    let run_id = format!("memory-{}-{}", tier.as_str(), fmt_time(now));
    let checked = match &answer {
        Ok(c) => check_answer(&privacy.incoming(&c.text), &m.system),
        Err(e) => Err(e.to_string()),
    };
    let usage = answer.as_ref().map(|c| c.usage).unwrap_or_default();
    krows::audit(
        conn,
        &run_id,
        "call",
        &[],
        &json!({
            "stage": format!("memory:{}", tier.as_str()), "model": model.model_id(),
            "endpoint": model.endpoint().map_or_else(|| "in process".to_owned(), personkit_llm::config::shown_url),
            "sent_as": privacy.sent_as(), "replaced": privacy.replaced,
            "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "calls": 1, "ms": ms,
            "outcome": if checked.is_ok() { "ok" } else { "failed" },
            "error": checked.as_ref().err(),
        }),
        now,
    )?;
    krows::add_pseudonyms(conn, &privacy.new_names, now)?;
    let body = match checked {
        Ok(text) => text,
        Err(reason) => {
            let current = rows::latest(conn, tier.as_str())?;
            let message = format!(
                "the model's answer was not used ({reason}); {}",
                current.as_ref().map_or_else(
                    || "there is no earlier version".to_owned(),
                    |c| format!("version {} stays in use", c.number)
                )
            );
            let run = LastRun {
                at: fmt_time(now),
                outcome: "failed".into(),
                message: message.clone(),
                version: current.map(|c| c.id),
                tokens: 0,
                elapsed_ms: started.elapsed().as_millis() as u64,
                trigger: trigger.into(),
            };
            record_run(conn, tier, &run)?;
            return Err(match answer {
                Err(e) => MemoryError::Llm(e),
                Ok(_) => MemoryError::Llm(personkit_llm::LlmError::Unparseable(message)),
            });
        }
    };
    let (body, _) = cut_to_budget(&body, ts.budget);
    let n = tokens(&body);
    let v = rows::insert(
        conn,
        &NewVersion {
            tier: tier.as_str().into(),
            body,
            tokens: n as u64,
            model: Some(model.model_id().to_owned()),
            prompt_version: Some(PROMPT_VERSION.into()),
            covers_from: m.covers_from,
            covers_to: m.covers_to,
            based_on: m.based_on,
            sources: m.sources,
        },
        now,
    )?;
    clear_due(conn, tier)?;
    let run = LastRun {
        at: fmt_time(now),
        outcome: "ok".into(),
        message: format!("version {}, {n} tokens", v.number),
        version: Some(v.id),
        tokens: n as u64,
        elapsed_ms: started.elapsed().as_millis() as u64,
        trigger: trigger.into(),
    };
    record_run(conn, tier, &run)?;
    Ok(run)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_unfenced_and_checked() {
        let sys = mid_system(2000);
        assert_eq!(
            check_answer(
                "```markdown\n## Themes\n- the user builds a relay in Rust\n```",
                &sys
            )
            .unwrap(),
            "## Themes\n- the user builds a relay in Rust"
        );
        assert!(check_answer("  ", &sys).is_err());
        assert!(check_answer("## A\n- 1\n- 2", &sys).is_err());
        assert!(check_answer(&sys, &sys).is_err());
    }
}
