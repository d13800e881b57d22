//! The model-based extraction on a real corpus file: what a model names is filed as a proposal and reaches the
//! graph only when the user approves it; a name not written in the turn it was said to be in is dropped; text for
//! a remote model is scrubbed (the scripted model stands in for a remote endpoint, which cannot run here, and
//! answers from what it was sent); a rejected name is not proposed again; later mentions of an approved name are
//! linked; forgetting removes proposals and links with their turns. Last, one run with the real local model
//! (SmolLM2-135M from PyPI, installed by scripts/setup).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;
use std::time::Duration;

use personkit_graph::extract::{self, Limits};
use personkit_llm::{ChatModel, Completion, LlmError, Request, Usage};
use personkit_shared::wire::Role;
use personkit_store::Connection;
use personkit_store::db;
use personkit_store::forget::{Selection, forget};
use personkit_store::graph as rows;
use personkit_store::ingest::{Origin, ingest_batch};
use personkit_store::knowledge as krows;
use personkit_store::proposals::{self, State};
use personkit_testkit::turn_at;
use serde_json::Value;
use time::macros::datetime;

const S: &str = "browser-ext:claude";

/// Answers each call with what `answer` makes of the request, and keeps what it was sent.
struct Scripted {
    answer: Box<dyn Fn(&Request) -> String + Send + Sync>,
    seen: Mutex<Vec<String>>,
}

impl std::fmt::Debug for Scripted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scripted")
    }
}

impl ChatModel for Scripted {
    fn kind(&self) -> &'static str {
        "scripted"
    }
    fn model_id(&self) -> &str {
        "scripted:test"
    }
    fn endpoint(&self) -> Option<&str> {
        Some("https://api.example.com/v1")
    }
    fn context_tokens(&self) -> usize {
        8_192
    }
    fn complete(&self, req: &Request) -> Result<Completion, LlmError> {
        self.seen.lock().unwrap().push(req.user.clone());
        Ok(Completion {
            text: (self.answer)(req),
            usage: Usage::default(),
        })
    }
}

/// A model that keeps every answer of the model it wraps (printed by the real model's test).
#[derive(Debug)]
struct Recorder<'a> {
    inner: &'a dyn ChatModel,
    answers: Mutex<Vec<String>>,
}

impl ChatModel for Recorder<'_> {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn endpoint(&self) -> Option<&str> {
        self.inner.endpoint()
    }
    fn context_tokens(&self) -> usize {
        self.inner.context_tokens()
    }
    fn complete(&self, req: &Request) -> Result<Completion, LlmError> {
        let c = self.inner.complete(req)?;
        self.answers.lock().unwrap().push(c.text.clone());
        Ok(c)
    }
}

/// The first `Person_…` pseudonym in `text`.
fn pseudonym(text: &str) -> Option<String> {
    let at = text.find("Person_")?;
    Some(
        text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect(),
    )
}

/// Names every pseudonym as a person, Orbit as a project and Lisbon as a place (when written; Lisbon with the
/// wrong turn), and two names that must be dropped: one written nowhere and one of a kind the model may not name.
fn answer(req: &Request) -> String {
    let mut names = Vec::new();
    if let Some(p) = pseudonym(&req.user) {
        names.push(
            serde_json::json!({"name": p, "kind": "person", "turn": 1, "confidence": "high"}),
        );
    }
    if req.user.contains("Orbit") {
        names.push(serde_json::json!({"name": "Orbit", "kind": "project", "turn": 1, "confidence": "medium"}));
    }
    if req.user.contains("Lisbon") {
        // Said to be in turn 1; it is written in turn 2.
        names.push(
            serde_json::json!({"name": "Lisbon", "kind": "place", "turn": 1, "confidence": "low"}),
        );
    }
    names.push(
        serde_json::json!({"name": "Zanzibar", "kind": "place", "turn": 1, "confidence": "high"}),
    );
    names.push(
        serde_json::json!({"name": "example.com", "kind": "site", "turn": 1, "confidence": "high"}),
    );
    format!("Here you go:\n{}", serde_json::json!({ "names": names }))
}

fn corpus() -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let conn = db::open(&dir.path().join("c.db")).unwrap();
    (dir, conn)
}

fn add(conn: &mut Connection, conv: &str, turns: &[(Role, &str, &str)]) {
    let items: Vec<Value> = turns
        .iter()
        .enumerate()
        .map(|(i, (role, text, at))| turn_at(S, conv, *role, text, Some(i as u32), None, at))
        .collect();
    let origin = Origin {
        device_id: "dev".into(),
    };
    ingest_batch(conn, &origin, &items, datetime!(2026-11-23 00:00 UTC)).unwrap();
}

fn people(conn: &Connection) -> Vec<String> {
    rows::find(conn, None, Some("person"), 50)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect()
}

fn limits() -> Limits {
    Limits {
        calls: 10,
        timeout: Duration::from_secs(30),
    }
}

#[test]
fn names_wait_for_the_user_and_go_with_their_turns() {
    let (_d, mut conn) = corpus();
    add(
        &mut conn,
        "c1",
        &[
            (
                Role::User,
                "I met Priya Raman to plan Orbit.",
                "2026-11-20T09:00:00.000Z",
            ),
            (
                Role::Assistant,
                "Good: book the Lisbon office.",
                "2026-11-20T09:01:00.000Z",
            ),
        ],
    );
    let model = Scripted {
        answer: Box::new(answer),
        seen: Mutex::default(),
    };
    let knowledge = personkit_knowledge::Settings::default();
    let now = datetime!(2026-11-23 00:00 UTC);
    let r = extract::run(&conn, &model, &knowledge, limits(), now).unwrap();
    assert_eq!((r.calls, r.failed, r.messages), (1, 0, 2));
    assert_eq!(r.kept, 3, "{r:?}");
    assert_eq!(r.dropped, 2, "the place written nowhere and the site");
    assert_eq!(r.proposed, 3);
    // Scrubbed on the way out: the remote model saw a pseudonym, never the name.
    let sent = model.seen.lock().unwrap()[0].clone();
    assert!(
        !sent.contains("Priya") && sent.contains("Person_"),
        "{sent}"
    );
    let audit = krows::audit_log(&conn, Some("call"), 10).unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].detail["stage"], "graph:entities");
    assert_eq!(audit[0].detail["sent_as"], "scrubbed");
    assert!(!audit[0].detail.to_string().contains("Priya"));
    // Waiting, with the real name put back; nothing in the graph yet.
    let waiting = proposals::list(&conn, State::Proposed, 10).unwrap();
    let names: Vec<(&str, &str)> = waiting
        .iter()
        .map(|p| (p.kind.as_str(), p.name.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("person", "Priya Raman"),
            ("project", "Orbit"),
            ("place", "Lisbon")
        ]
    );
    let lisbon = proposals::sources(&conn, &waiting[2].id).unwrap();
    let second: String = conn
        .query_row(
            "SELECT id FROM messages WHERE content LIKE '%Lisbon%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(lisbon.len(), 1);
    assert_eq!(
        lisbon[0].message_id, second,
        "filed under the turn that holds it"
    );
    assert!(
        people(&conn).is_empty(),
        "nothing reaches the graph unapproved"
    );
    assert!(
        rows::find(&conn, None, Some("project"), 10)
            .unwrap()
            .is_empty()
    );
    // A second run has nothing new to read.
    let again = extract::run(&conn, &model, &knowledge, limits(), now).unwrap();
    assert_eq!((again.calls, again.messages), (0, 0));

    let priya = &waiting[0].id;
    let orbit = &waiting[1].id;
    let entity = extract::approve(&conn, priya, now).unwrap();
    extract::reject(&conn, orbit, now).unwrap();
    assert_eq!(people(&conn), ["Priya Raman"]);
    let info = rows::entity(&conn, &entity).unwrap().unwrap();
    assert_eq!(info.name, "Priya Raman");
    assert!(
        extract::reject(&conn, priya, now).is_err(),
        "an approved name is in the graph"
    );

    // New turns: the approved name is linked as found; the rejected one is not proposed again.
    add(
        &mut conn,
        "c2",
        &[(
            Role::User,
            "Priya Raman says Orbit ships in May.",
            "2026-11-21T09:00:00.000Z",
        )],
    );
    let r = extract::run(&conn, &model, &knowledge, limits(), now).unwrap();
    assert_eq!((r.calls, r.linked, r.proposed), (1, 1, 0), "{r:?}");
    assert_eq!(
        proposals::waiting(&conn).unwrap(),
        1,
        "Lisbon, still undecided"
    );
    assert_eq!(
        proposals::get(&conn, orbit).unwrap().unwrap().state,
        State::Rejected
    );
    let c1 = personkit_testkit::thread_id(S, "c1");
    let c2 = personkit_testkit::thread_id(S, "c2");
    let mut threads = rows::threads_of_entities(&conn, std::slice::from_ref(&entity), 10).unwrap();
    threads.sort();
    let mut want = vec![c1.clone(), c2.clone()];
    want.sort();
    assert_eq!(threads, want);

    // Forgetting c1 keeps what c2 supports; forgetting c2 too leaves nothing of the name anywhere.
    for (thread, left) in [(c1, 1usize), (c2, 0)] {
        forget(
            &mut conn,
            &Selection {
                thread: Some(thread),
                ..Selection::default()
            },
            now,
        )
        .unwrap();
        assert_eq!(people(&conn).len(), left);
    }
    assert!(proposals::get(&conn, priya).unwrap().is_none());
    assert!(proposals::get(&conn, orbit).unwrap().is_none());
    assert!(proposals::get(&conn, &waiting[2].id).unwrap().is_none());
    let n: i64 = conn
        .query_row("SELECT count(*) FROM entity_proposal_sources", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(n, 0);
}

#[test]
fn an_unusable_answer_is_recorded_and_its_turns_are_not_read_again() {
    let (_d, mut conn) = corpus();
    add(
        &mut conn,
        "c1",
        &[(Role::User, "I met Priya Raman.", "2026-11-20T09:00:00.000Z")],
    );
    let model = Scripted {
        answer: Box::new(|_| "I cannot help with that.".into()),
        seen: Mutex::default(),
    };
    let knowledge = personkit_knowledge::Settings::default();
    let now = datetime!(2026-11-23 00:00 UTC);
    let r = extract::run(&conn, &model, &knowledge, limits(), now).unwrap();
    assert_eq!((r.calls, r.failed, r.kept), (1, 1, 0));
    assert_eq!(
        model.seen.lock().unwrap().len(),
        2,
        "asked once more, then given up"
    );
    let audit = krows::audit_log(&conn, Some("call"), 10).unwrap();
    assert_eq!(audit[0].detail["outcome"], "failed");
    let again = extract::run(&conn, &model, &knowledge, limits(), now).unwrap();
    assert_eq!(again.calls, 0);
}

#[test]
fn the_real_local_model_names_only_what_is_written() {
    let (_d, mut conn) = corpus();
    add(
        &mut conn,
        "c1",
        &[
            (
                Role::User,
                "Tomorrow I fly to Berlin to meet Priya Raman from Acme Corporation about the Orbit project.",
                "2026-11-20T09:00:00.000Z",
            ),
            (
                Role::Assistant,
                "Have a good trip. Bring the Orbit roadmap and ask Priya about the Kubernetes migration.",
                "2026-11-20T09:01:00.000Z",
            ),
        ],
    );
    let mut cfg = personkit_llm::LlmConfig::of_kind(personkit_llm::LlmKind::Local);
    cfg.model_path = Some(personkit_testkit::standin::llm_model_path());
    let local = personkit_llm::open(&cfg).unwrap().unwrap();
    let model = Recorder {
        inner: local.as_ref(),
        answers: Mutex::default(),
    };
    let knowledge = personkit_knowledge::Settings::default();
    let now = datetime!(2026-11-23 00:00 UTC);
    let r = extract::run(
        &conn,
        &model,
        &knowledge,
        Limits {
            calls: 1,
            timeout: Duration::from_secs(120),
        },
        now,
    )
    .unwrap();
    assert_eq!((r.calls, r.messages), (1, 2), "{r:?}");
    let audit = krows::audit_log(&conn, Some("call"), 10).unwrap();
    assert_eq!(audit[0].detail["sent_as"], "in_process");
    assert_eq!(audit[0].detail["model"], model.model_id());
    // Whatever the small model said, what was kept is written in the turn it came from, and none of it is in the
    // graph.
    let texts: String = conn
        .prepare("SELECT group_concat(lower(content), ' ') FROM messages")
        .unwrap()
        .query_row([], |r| r.get(0))
        .unwrap();
    for p in proposals::list(&conn, State::Proposed, 50).unwrap() {
        let name = p.name.to_lowercase().replace(['-', '_'], " ");
        assert!(
            texts.contains(&name),
            "{} is not written in the turns",
            p.name
        );
        assert_eq!(p.model, model.model_id());
    }
    assert!(people(&conn).is_empty());
    eprintln!(
        "the local model: {r:?}; it said {:?}",
        model.answers.lock().unwrap()
    );
}
