//! One pass of the pipeline over the turns stored since the last: pull, window, extract (map-reduce above what
//! one call reads), judge fail-closed, validate, reconcile, store as pending — with an audit row for every call
//! and every decision. The pull cursor moves past a thread only when the thread is done, so a pass stopped half-way
//! (or a model server that went away) resumes where it stopped.

use std::time::Instant;

use serde::Serialize;
use serde_json::{Value, json};

use personkit_llm::{ChatModel, LlmError, Request, Usage, structured, structured_with};
use personkit_store::Db;
use personkit_store::clock::Clock;
use personkit_store::knowledge::{self as rows, NewEntry, Source};

use crate::privacy::Privacy;
use crate::prompt::{self, MAX_ENTRIES, PROMPT_VERSION, REDUCE_GROUP};
use crate::reconcile::{self, Outcome};
use crate::validate::{self, Candidate};
use crate::window::{self, Window};
use crate::{KnowledgeError, Settings};

/// A caller's own check of an answer (in place of its shape's).
type Check<'a> = &'a dyn Fn(&Value) -> Result<(), String>;

/// Tokens the instructions and the answer format take beside the material.
const PROMPT_OVERHEAD: usize = 700;

/// The check of an extraction or reduce answer: a list of entries, each validated on its own afterwards (one bad
/// entry is dropped, not the answer).
fn has_entries(v: &Value) -> Result<(), String> {
    v.get("entries")
        .and_then(Value::as_array)
        .map(|_| ())
        .ok_or_else(|| "no \"entries\" list".to_owned())
}

/// What a pass did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub run_id: String,
    pub model: String,
    /// How text left this process: `in_process`, `loopback`, `scrubbed`, `unscrubbed`.
    pub sent_as: String,
    pub turns: u64,
    pub threads: u64,
    pub windows: u64,
    /// Windows read in parts (map-reduce).
    pub split_windows: u64,
    pub calls: u64,
    pub usage: Usage,
    pub candidates: u64,
    pub dropped_invalid: u64,
    pub dropped_over_cap: u64,
    pub dropped_by_judge: u64,
    /// Batches dropped because the judge failed (fail-closed).
    pub judge_failures: u64,
    /// Windows whose extraction failed.
    pub extract_failures: u64,
    pub new_entries: u64,
    pub reinforced: u64,
    pub variants: u64,
    /// Entries kept per window, in window order.
    pub kept_per_window: Vec<u64>,
    /// Replacements made before sending, by kind.
    pub replaced: std::collections::BTreeMap<String, u64>,
    pub elapsed_ms: u64,
    /// Set when the pass stopped early (the model went away): the rest is read next time.
    pub stopped: Option<String>,
}

/// Progress for a CLI bar: windows done of windows known so far.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub windows_done: u64,
    pub threads_done: u64,
    pub threads: u64,
}

struct Pass<'a> {
    db: &'a Db,
    model: &'a dyn ChatModel,
    settings: &'a Settings,
    clock: &'a Clock,
    privacy: Privacy,
    report: Report,
    budget: usize,
}

/// Runs one pass. Errors are the store's; a model's failures are counted, audited and alerted, not returned.
pub fn run_once(
    db: &Db,
    model: &dyn ChatModel,
    settings: &Settings,
    clock: &Clock,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report, KnowledgeError> {
    let started = Instant::now();
    let run_id = uuid::Uuid::new_v4().to_string();
    let (cursor, key, map) = db.write(|c| {
        let cursor = rows::state(c, "cursor")?
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0);
        let key = crate::pseudonym_key(c)?;
        Ok::<_, KnowledgeError>((cursor, key, rows::pseudonyms(c)?))
    })?;
    let privacy = Privacy::new(
        settings.scrub,
        model.endpoint(),
        key,
        map,
        settings.names,
        settings.user_names.clone(),
    )
    .map_err(|e| KnowledgeError::Config(format!("the stored pseudonym map is unusable: {e}")))?;
    let budget = settings
        .window_tokens
        .min(
            model
                .context_tokens()
                .saturating_sub(settings.max_tokens as usize + PROMPT_OVERHEAD),
        )
        .max(200);
    let mut pass = Pass {
        db,
        model,
        settings,
        clock,
        report: Report {
            run_id: run_id.clone(),
            model: model.model_id().to_owned(),
            sent_as: privacy.sent_as().to_owned(),
            ..Report::default()
        },
        privacy,
        budget,
    };
    let turns = db.read(|c| rows::turns_after(c, cursor, settings.max_turns_per_run))?;
    pass.report.turns = turns.len() as u64;
    let last_pk = turns.last().map(|t| t.pk);
    // Threads in the order of their first new turn.
    let mut threads: Vec<(String, i64, Vec<rows::Turn>)> = Vec::new();
    for t in turns {
        match threads.iter_mut().find(|(id, _, _)| *id == t.thread_id) {
            Some((_, _, list)) => list.push(t),
            None => threads.push((t.thread_id.clone(), t.pk, vec![t])),
        }
    }
    pass.report.threads = threads.len() as u64;
    let n_threads = threads.len() as u64;
    for i in 0..threads.len() {
        let turns = std::mem::take(&mut threads[i].2);
        for w in window::windows(turns, pass.budget) {
            if !w.has_user() {
                continue;
            }
            let stop = pass.window(&w)?;
            progress(Progress {
                windows_done: pass.report.windows,
                threads_done: i as u64,
                threads: n_threads,
            });
            if let Some(why) = stop {
                pass.report.stopped = Some(why);
                break;
            }
        }
        if pass.report.stopped.is_some() {
            break;
        }
        // Every turn before the next thread's first new turn is read.
        let next = threads
            .get(i + 1)
            .map(|(_, first, _)| first - 1)
            .or(last_pk);
        if let Some(next) = next {
            let at = next.max(cursor);
            db.write(|c| rows::set_state(c, "cursor", Some(&at.to_string())))?;
        }
        progress(Progress {
            windows_done: pass.report.windows,
            threads_done: i as u64 + 1,
            threads: n_threads,
        });
    }
    pass.finish(started)
}

impl Pass<'_> {
    fn now(&self) -> time::OffsetDateTime {
        self.clock.now()
    }

    fn audit(&self, kind: &str, messages: &[String], detail: Value) -> Result<(), KnowledgeError> {
        let now = self.now();
        let run = self.report.run_id.clone();
        self.db
            .write(|c| rows::audit(c, &run, kind, messages, &detail, now))?;
        Ok(())
    }

    fn request(&mut self, system: &str, user: String, shape: personkit_llm::Shape) -> Request {
        Request {
            system: system.to_owned(),
            user: self.privacy.outgoing(&user),
            shape: Some(shape),
            max_tokens: self.settings.max_tokens,
            timeout: self.settings.call_timeout,
        }
    }

    /// One call, audited. `check` replaces the shape's own check when given.
    fn call(
        &mut self,
        stage: &str,
        req: &Request,
        messages: &[String],
        check: Option<Check<'_>>,
    ) -> Result<Result<Value, LlmError>, KnowledgeError> {
        let started = Instant::now();
        let out = match check {
            Some(check) => structured_with(self.model, req, check),
            None => structured(self.model, req),
        };
        let ms = started.elapsed().as_millis() as u64;
        let (outcome, usage, calls) = match &out {
            Ok(s) => ("ok".to_owned(), s.usage, s.calls),
            Err(e) => (e.code().to_owned(), Usage::default(), 1),
        };
        self.report.calls += u64::from(calls);
        self.report.usage += usage;
        self.audit(
            "call",
            messages,
            json!({
                "stage": stage, "model": self.model.model_id(),
                "endpoint": self.model.endpoint().unwrap_or("in process"),
                "sent_as": self.privacy.sent_as(), "replaced": self.privacy.replaced,
                "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                "calls": calls, "ms": ms, "outcome": outcome,
                "error": out.as_ref().err().map(ToString::to_string),
            }),
        )?;
        Ok(out.map(|s| s.value))
    }

    fn alert(&self, message: String, hint: &str) -> Result<(), KnowledgeError> {
        let now = self.now();
        let body = json!({"at": personkit_store::clock::fmt_time(now), "run_id": self.report.run_id,
                          "message": message, "hint": hint});
        self.db
            .write(|c| rows::set_state(c, "alert", Some(&body.to_string())))?;
        self.audit("alert", &[], body)
    }

    /// Extracts from `part` (labels are the window's), validating each entry. `None`: the call failed.
    fn extract(
        &mut self,
        part: &Window,
        labels: u32,
        which: Option<(usize, usize)>,
        ids: &[String],
    ) -> Result<Result<Vec<Candidate>, LlmError>, KnowledgeError> {
        let req = self.request(
            prompt::EXTRACT_SYSTEM,
            prompt::extract_user(&part.text(), which),
            prompt::entries_shape(labels),
        );
        let value = match self.call("extract", &req, ids, Some(&has_entries))? {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        self.candidates(&value, labels, ids).map(Ok)
    }

    fn candidates(
        &mut self,
        value: &Value,
        labels: u32,
        ids: &[String],
    ) -> Result<Vec<Candidate>, KnowledgeError> {
        let mut out = Vec::new();
        for raw in value
            .get("entries")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.report.candidates += 1;
            match validate::candidate(raw, labels) {
                Ok(c) => out.push(c),
                Err(why) => {
                    self.report.dropped_invalid += 1;
                    self.decision(ids, raw, "dropped", &format!("validation: {why}"))?;
                }
            }
        }
        Ok(out)
    }

    fn decision(
        &self,
        ids: &[String],
        raw: &Value,
        action: &str,
        why: &str,
    ) -> Result<(), KnowledgeError> {
        let topic = raw.get("topic").and_then(Value::as_str).unwrap_or("");
        self.audit(
            "decision",
            ids,
            json!({"topic": self.privacy.incoming(&window::clip(topic, 120)), "action": action,
                   "why": why, "outcome": action}),
        )
    }

    /// One window. `Some(reason)` stops the pass (the model is not answering).
    fn window(&mut self, w: &Window) -> Result<Option<String>, KnowledgeError> {
        self.report.windows += 1;
        let ids = w.message_ids();
        let labels = w.lines.len() as u32;
        let mut candidates = Vec::new();
        let parts = if w.tokens() <= self.budget {
            vec![w.clone()]
        } else {
            self.report.split_windows += 1;
            w.parts(self.budget)
        };
        let n = parts.len();
        for (i, part) in parts.iter().enumerate() {
            let which = (n > 1).then_some((i + 1, n));
            match self.extract(part, labels, which, &ids)? {
                Ok(found) => candidates.extend(found),
                Err(e) => {
                    self.report.extract_failures += 1;
                    // An answer this window's call could not use is the window's; anything else (the server is
                    // gone, refuses us, or is not configured) would fail every window: stop and retry next time.
                    let stop = !matches!(
                        e,
                        LlmError::Unparseable(_)
                            | LlmError::TooLong { .. }
                            | LlmError::Inference(_)
                    );
                    self.alert(format!("extraction failed: {e}"), e.hint())?;
                    self.report.kept_per_window.push(0);
                    return Ok(stop.then(|| e.to_string()));
                }
            }
        }
        if n > 1 && candidates.len() > MAX_ENTRIES {
            candidates = match self.reduce(candidates, labels, &ids)? {
                Ok(c) => c,
                Err(e) => {
                    self.report.extract_failures += 1;
                    self.alert(
                        format!("reducing a long window's candidates failed: {e}"),
                        e.hint(),
                    )?;
                    self.report.kept_per_window.push(0);
                    return Ok(None);
                }
            };
        }
        if candidates.len() > MAX_ENTRIES {
            for c in candidates.drain(MAX_ENTRIES..) {
                self.report.dropped_over_cap += 1;
                self.decision(
                    &ids,
                    &c.to_json(),
                    "dropped",
                    "cap: over 8 entries in one window",
                )?;
            }
        }
        if candidates.is_empty() {
            self.report.kept_per_window.push(0);
            return Ok(None);
        }
        let kept = self.judge(w, candidates, &ids)?;
        let n_kept = kept.len() as u64;
        self.store(w, kept, &ids)?;
        self.report.kept_per_window.push(n_kept);
        Ok(None)
    }

    /// Merges many candidates into at most [`MAX_ENTRIES`], in groups of [`REDUCE_GROUP`] first when there are more.
    fn reduce(
        &mut self,
        mut candidates: Vec<Candidate>,
        labels: u32,
        ids: &[String],
    ) -> Result<Result<Vec<Candidate>, LlmError>, KnowledgeError> {
        while candidates.len() > MAX_ENTRIES {
            let groups: Vec<Vec<Candidate>> = candidates
                .chunks(REDUCE_GROUP)
                .map(<[Candidate]>::to_vec)
                .collect();
            let single = groups.len() == 1;
            let mut next = Vec::new();
            for g in groups {
                let list: Vec<Value> = g.iter().map(Candidate::to_json).collect();
                let req = self.request(
                    prompt::REDUCE_SYSTEM,
                    prompt::reduce_user(&list),
                    prompt::entries_shape(labels),
                );
                let value = match self.call("reduce", &req, ids, Some(&has_entries))? {
                    Ok(v) => v,
                    Err(e) => return Ok(Err(e)),
                };
                next.extend(self.candidates(&value, labels, ids)?);
            }
            if single || next.len() >= candidates.len() {
                // One group reduced (or a reduce that did not shrink): what is over the cap is cut below.
                candidates = next;
                break;
            }
            candidates = next;
        }
        Ok(Ok(candidates))
    }

    /// The judge: one call for the window's candidates; all three answers true or the candidate goes. Fail-closed:
    /// an error or an unusable answer (after the one retry) drops the whole batch and raises an alert.
    fn judge(
        &mut self,
        w: &Window,
        candidates: Vec<Candidate>,
        ids: &[String],
    ) -> Result<Vec<(Candidate, Value)>, KnowledgeError> {
        let material = if w.tokens() <= self.budget {
            w.text()
        } else {
            // A long window: the judge reads the lines the candidates cite.
            let mut cited: Vec<u32> = candidates.iter().flat_map(|c| c.sources.clone()).collect();
            cited.sort_unstable();
            cited.dedup();
            cited
                .iter()
                .filter_map(|l| w.line(*l))
                .map(|l| format!("{}\n", l.render()))
                .collect()
        };
        let list: Vec<Value> = candidates.iter().map(Candidate::to_json).collect();
        let req = self.request(
            prompt::JUDGE_SYSTEM,
            prompt::judge_user(&material, &list),
            prompt::verdicts_shape(list.len()),
        );
        let verdicts = match self.call("judge", &req, ids, None)? {
            Ok(v) => v,
            Err(e) => {
                self.report.judge_failures += 1;
                for c in &candidates {
                    self.report.dropped_by_judge += 1;
                    self.decision(
                        ids,
                        &c.to_json(),
                        "dropped",
                        "judge failed: batch dropped (fail-closed)",
                    )?;
                }
                self.alert(
                    format!("the judge failed ({e}); {} candidate entries were dropped", candidates.len()),
                    "check the model (`personkit corpus health`); a larger model follows the answer format better",
                )?;
                return Ok(Vec::new());
            }
        };
        let mut kept = Vec::new();
        for (i, c) in candidates.into_iter().enumerate() {
            // One verdict per candidate, in order (the shape asks for exactly as many as there are candidates).
            let v = verdicts
                .get("verdicts")
                .and_then(Value::as_array)
                .and_then(|list| list.get(i));
            let get = |k: &str| v.and_then(|v| v.get(k)).and_then(Value::as_bool);
            let (keep, grounded, distinctive) = (get("keep"), get("grounded"), get("distinctive"));
            let failed: Vec<&str> = [
                ("keep", keep),
                ("grounded", grounded),
                ("distinctive", distinctive),
            ]
            .into_iter()
            .filter(|(_, b)| *b != Some(true))
            .map(|(k, _)| k)
            .collect();
            if failed.is_empty() {
                let scores = json!({"keep": true, "grounded": true, "distinctive": true,
                                    "judge": self.model.model_id()});
                kept.push((c, scores));
            } else {
                self.report.dropped_by_judge += 1;
                let why = if v.is_none() {
                    "judge: no verdict".to_owned()
                } else {
                    format!("judge: not {}", failed.join(", not "))
                };
                self.decision(ids, &c.to_json(), "dropped", &why)?;
            }
        }
        Ok(kept)
    }

    /// Re-identifies, reconciles and stores what the judge kept.
    fn store(
        &mut self,
        w: &Window,
        kept: Vec<(Candidate, Value)>,
        ids: &[String],
    ) -> Result<(), KnowledgeError> {
        for (c, scores) in kept {
            let back = |s: &str| self.privacy.incoming(s);
            let sources: Vec<Source> = c
                .sources
                .iter()
                .filter_map(|l| w.line(*l))
                .map(|l| Source {
                    message_id: l.message_id.clone(),
                    thread_id: l.thread_id.clone(),
                })
                .collect();
            let mut entry = NewEntry {
                kind: c.kind.clone(),
                topic: back(&c.topic),
                position: back(&c.position),
                reasoning: back(&c.reasoning),
                context: c.context.as_deref().map(back),
                confidence: c.confidence.clone(),
                stability: c.stability.clone(),
                tags: c.tags.iter().map(|t| back(t)).collect(),
                origin: "pipeline".into(),
                model: Some(self.model.model_id().to_owned()),
                prompt_version: Some(PROMPT_VERSION.into()),
                scores: Some(scores),
                sources,
                ..NewEntry::default()
            };
            let now = self.now();
            let (action, id) = self.db.write(|conn| {
                let known = rows::near_topic(conn, &entry.topic, 20)?;
                Ok::<_, KnowledgeError>(
                    match reconcile::decide(&entry.topic, &entry.position, &known) {
                        Outcome::Reinforces(id) => {
                            rows::reinforce(conn, &id, &entry.sources, now)?;
                            ("reinforced", id)
                        }
                        Outcome::VariantOf(of) => {
                            entry.variant_of = Some(of);
                            ("variant", rows::insert(conn, &entry, now)?)
                        }
                        Outcome::New => ("new", rows::insert(conn, &entry, now)?),
                    },
                )
            })?;
            match action {
                "reinforced" => self.report.reinforced += 1,
                "variant" => self.report.variants += 1,
                _ => self.report.new_entries += 1,
            }
            self.audit(
                "decision",
                ids,
                json!({"topic": entry.topic, "action": action, "entry": id, "why": "kept by the judge",
                       "outcome": "kept"}),
            )?;
        }
        Ok(())
    }

    fn finish(mut self, started: Instant) -> Result<Report, KnowledgeError> {
        self.report.elapsed_ms = started.elapsed().as_millis() as u64;
        self.report.replaced = self.privacy.replaced.clone();
        let now = self.now();
        let names = std::mem::take(&mut self.privacy.new_names);
        let failures = self.report.judge_failures + self.report.extract_failures;
        let summary = serde_json::to_value(&self.report).unwrap_or(Value::Null);
        let run = self.report.run_id.clone();
        self.db.write(|c| {
            rows::add_pseudonyms(c, &names, now)?;
            rows::audit(c, &run, "run", &[], &summary, now)?;
            rows::set_state(c, "last_run", Some(&summary.to_string()))?;
            if failures == 0 && self.report.windows > 0 {
                rows::set_state(c, "alert", None)?;
            }
            Ok::<_, KnowledgeError>(())
        })?;
        Ok(self.report)
    }
}
