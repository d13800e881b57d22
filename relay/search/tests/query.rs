//! Data-driven checks of `corpus_query` on a real SQLite corpus (`search_fixtures/query_cases.json`): fusion
//! order (a hit found by two signals outranks one found by one), filters (surface, thread, role, since, until),
//! `matched_via`, entity aliases, recency, events, and the embedding store (text-hash cache, model change).
//!
//! The vector signal here uses a tiny deterministic "concept" embedder written for this test, a stand-in for a
//! real model so that each case has one right answer; the real model is exercised in `search_embedders.rs` and
//! `search_http.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use personkit_embed::{EmbedError, Embedder};
use personkit_search::indexer::{self, Cursor, EmbedRun};
use personkit_search::{self as search, Indexes, Query, Signal};
use personkit_shared::wire::{ClientInfo, Role, build_observation};
use personkit_store::clock::Clock;
use personkit_store::ingest::{Origin, ingest_observations};
use personkit_store::vectors;
use serde_json::Value;

/// Stand-in embedder: words map to concept dimensions; a text's vector is the normalised sum.
#[derive(Debug)]
struct ConceptEmbedder {
    version: &'static str,
    calls: AtomicUsize,
}

const CONCEPTS: &[(&[&str], usize)] = &[
    (
        &[
            "postgres",
            "postgresql",
            "pg_upgrade",
            "database",
            "clusters",
            "sql",
        ],
        0,
    ),
    (
        &[
            "car",
            "automobile",
            "vehicle",
            "brake",
            "brakes",
            "braking",
            "rattle",
            "rattling",
            "insurance",
        ],
        1,
    ),
    (
        &[
            "vegetables",
            "garden",
            "shade",
            "grow",
            "lettuce",
            "spinach",
            "kale",
        ],
        2,
    ),
    (&["migrate", "migration", "upgrade"], 3),
];

impl Embedder for ConceptEmbedder {
    fn kind(&self) -> &'static str {
        "local"
    }
    fn model_id(&self) -> &str {
        "test:concepts"
    }
    fn model_version(&self) -> &str {
        self.version
    }
    fn dim(&self) -> usize {
        384
    }
    fn embed_documents(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.calls.fetch_add(texts.len(), Ordering::SeqCst);
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0f32; 384];
                v[383] = 0.05; // every text shares a little, so no vector is zero
                for w in t
                    .to_lowercase()
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                {
                    for (words, dim) in CONCEPTS {
                        if words.contains(&w) {
                            v[*dim] += 1.0;
                        }
                    }
                }
                personkit_embed::l2_normalize(&mut v);
                v
            })
            .collect())
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    conn: rusqlite::Connection,
    /// fixture key -> (kind, id)
    ids: HashMap<String, String>,
    cases: Vec<Value>,
}

fn load() -> Fixture {
    let spec: Value =
        serde_json::from_str(include_str!("fixtures/query_cases.json")).expect("fixture parses");
    let dir = tempfile::tempdir().unwrap();
    let mut conn = personkit_store::db::open(&dir.path().join("corpus.db")).unwrap();
    let mut ids = HashMap::new();
    let client = ClientInfo {
        app_version: "test".into(),
        device_id: "test-device".into(),
    };
    let mut obs = Vec::new();
    for (i, m) in spec["corpus"].as_array().unwrap().iter().enumerate() {
        let role = Role::parse(m["role"].as_str().unwrap()).unwrap();
        let mut o = build_observation(
            m["surface"].as_str().unwrap(),
            m["conv"].as_str().unwrap(),
            role,
            m["text"].as_str().unwrap(),
            Some(i as u32),
            None,
            m["at"].as_str().unwrap(),
            client.clone(),
        );
        o.turn.occurred_at = Some(m["at"].as_str().unwrap().into());
        o.title = Some(format!("thread {}", m["conv"].as_str().unwrap()));
        let tid = uuid::Uuid::parse_str(&o.thread_id).unwrap();
        let mid = personkit_shared::ids::message_id(&tid, &o.turn.content_hash);
        ids.insert(
            m["key"].as_str().unwrap().to_owned(),
            mid.hyphenated().to_string(),
        );
        obs.push(o);
    }
    let origin = Origin {
        device_id: "test-device".into(),
    };
    let r = ingest_observations(&mut conn, &origin, &obs, time::OffsetDateTime::now_utc()).unwrap();
    assert_eq!(r.stored, obs.len(), "{r:?}");
    for (i, e) in spec["events"].as_array().unwrap().iter().enumerate() {
        let id = format!("event-{i}");
        conn.execute(
            "INSERT INTO events (id, kind, source_surface, content, content_hash, minute_bucket, occurred_at,
               captured_at, origin_device, origin_seq) VALUES (?1, 'note', ?2, ?3, ?4, 0, ?5, ?5, 'test', ?6)",
            rusqlite::params![
                id,
                e["surface"].as_str().unwrap(),
                e["text"].as_str().unwrap(),
                format!("h{i}"),
                personkit_store::clock::normalize_time(e["at"].as_str().unwrap()).unwrap(),
                i as i64
            ],
        )
        .unwrap();
        ids.insert(e["key"].as_str().unwrap().to_owned(), id);
    }
    for (i, e) in spec["entities"].as_array().unwrap().iter().enumerate() {
        conn.execute(
            "INSERT INTO entities (id, kind, name, created_at, origin_device, origin_seq)
             VALUES (?1, ?2, ?3, '2026-01-01T00:00:00.000Z', 'test', ?4)",
            rusqlite::params![
                e["id"].as_str(),
                e["kind"].as_str(),
                e["name"].as_str(),
                i as i64
            ],
        )
        .unwrap();
        // The threads the entity appears in, as the graph's derivation records them.
        for t in e["threads"].as_array().unwrap() {
            let tid =
                personkit_shared::ids::thread_id(t[0].as_str().unwrap(), t[1].as_str().unwrap());
            conn.execute(
                "INSERT INTO entity_sources (entity_id, source_kind, source_id, how, confidence, seen_at, created_at)
                 VALUES (?1, 'thread', ?2, 'certain', 1.0, '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z')",
                rusqlite::params![e["id"].as_str(), tid.hyphenated().to_string()],
            )
            .unwrap();
        }
        for (j, a) in e["aliases"].as_array().unwrap().iter().enumerate() {
            conn.execute(
                "INSERT INTO entity_aliases (entity_id, alias, created_at, origin_device, origin_seq)
                 VALUES (?1, ?2, '2026-01-01T00:00:00.000Z', 'test', ?3)",
                rusqlite::params![e["id"].as_str(), a.as_str(), (100 + j) as i64],
            )
            .unwrap();
        }
    }
    Fixture {
        _dir: dir,
        conn,
        ids,
        cases: spec["cases"].as_array().unwrap().clone(),
    }
}

fn embed_all(conn: &mut rusqlite::Connection, e: &dyn Embedder) -> EmbedRun {
    let mut cursor = Cursor::default();
    indexer::embed_pending(
        conn,
        e,
        &Clock::system(),
        &mut cursor,
        u64::MAX,
        4,
        None,
        |_| {},
    )
    .unwrap()
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|x| x.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

fn check(f: &Fixture, e: &dyn Embedder, case: &Value) {
    let name = case["name"].as_str().unwrap();
    let mut q = Query::new(case["q"].as_str().unwrap());
    q.k = 10;
    q.surface = case["surface"].as_str().map(str::to_owned);
    q.role = case["role"].as_str().map(str::to_owned);
    q.since = case["since"]
        .as_str()
        .map(|s| search::normalize_bound(s, time::OffsetDateTime::now_utc()).unwrap());
    q.until = case["until"]
        .as_str()
        .map(|s| search::normalize_bound(s, time::OffsetDateTime::now_utc()).unwrap());
    if let Some(e) = case["entity"].as_str() {
        q.entities = vec![e.to_owned()];
    }
    if let Some(tc) = case["thread_conv"].as_array() {
        let tid =
            personkit_shared::ids::thread_id(tc[0].as_str().unwrap(), tc[1].as_str().unwrap());
        q.threads = vec![tid.hyphenated().to_string()];
    }
    let r = search::query(&f.conn, &Indexes::new(), Some(e), &q).unwrap();
    let key_of: HashMap<&str, &str> = f
        .ids
        .iter()
        .map(|(k, v)| (v.as_str(), k.as_str()))
        .collect();
    let got: Vec<&str> = r
        .hits
        .iter()
        .map(|h| *key_of.get(h.row.id.as_str()).unwrap_or(&"?"))
        .collect();
    let ctx = format!(
        "case {name}: hits {got:?} via {:?}",
        r.hits.iter().map(|h| &h.matched_via).collect::<Vec<_>>()
    );
    let sig = |s: &str| match s {
        "fts" => Signal::Fts,
        "vector" => Signal::Vector,
        "entity" => Signal::Entity,
        "recency" => Signal::Recency,
        _ => panic!("unknown signal {s}"),
    };
    if let Some(top) = case["top"].as_str() {
        assert_eq!(got.first().copied(), Some(top), "{ctx}");
    }
    if !case["top_in"].is_null() {
        assert!(
            strs(&case["top_in"])
                .iter()
                .any(|t| got.first() == Some(&t.as_str())),
            "{ctx}"
        );
    }
    if !case["top_via"].is_null() {
        let want: Vec<Signal> = strs(&case["top_via"]).iter().map(|s| sig(s)).collect();
        assert_eq!(r.hits[0].matched_via, want, "{ctx}");
        // Per-signal ranks are reported for exactly the signals in matched_via.
        assert_eq!(
            r.hits[0].signals.keys().copied().collect::<Vec<_>>(),
            want,
            "{ctx}"
        );
    }
    if !case["only"].is_null() {
        let allowed = strs(&case["only"]);
        assert!(!got.is_empty(), "{ctx}");
        assert!(got.iter().all(|g| allowed.iter().any(|a| a == g)), "{ctx}");
    }
    for a in strs(&case["absent"]) {
        assert!(
            !got.contains(&a.as_str()),
            "{a} must be filtered out; {ctx}"
        );
    }
    if let Some(pairs) = case["before"].as_array() {
        for p in pairs {
            let (a, b) = (p[0].as_str().unwrap(), p[1].as_str().unwrap());
            let pa = got
                .iter()
                .position(|g| *g == a)
                .unwrap_or_else(|| panic!("{a} missing; {ctx}"));
            if let Some(pb) = got.iter().position(|g| *g == b) {
                assert!(pa < pb, "{a} must rank before {b}; {ctx}");
            }
        }
    }
    if case["all_two_signal_before_one_signal"].as_bool() == Some(true) {
        let n: Vec<usize> = r.hits.iter().map(|h| h.matched_via.len()).collect();
        let last_two = n.iter().rposition(|&x| x >= 2).unwrap_or(0);
        let first_one = n.iter().position(|&x| x == 1).unwrap_or(usize::MAX);
        assert!(last_two < first_one, "signal counts {n:?}; {ctx}");
    }
    if let Some(m) = case["via_contains"].as_object() {
        for (k, s) in m {
            let h = r
                .hits
                .iter()
                .find(|h| key_of.get(h.row.id.as_str()) == Some(&k.as_str()))
                .unwrap_or_else(|| panic!("{k} missing; {ctx}"));
            assert!(
                h.matched_via.contains(&sig(s.as_str().unwrap())),
                "{k} via {s}; {ctx}"
            );
        }
    }
    if let Some(kind) = case["kind_of_top"].as_str() {
        assert_eq!(r.hits[0].kind, kind, "{ctx}");
    }
    // Every hit carries a snippet and consistent metadata.
    for h in &r.hits {
        assert!(!h.snippet.is_empty(), "{ctx}");
        assert!(!h.matched_via.is_empty(), "{ctx}");
        if h.kind == "message" {
            assert!(h.row.thread_id.is_some() && h.row.role.is_some(), "{ctx}");
        }
    }
}

#[test]
fn query_cases() {
    let mut f = load();
    let e = ConceptEmbedder {
        version: "1",
        calls: AtomicUsize::new(0),
    };
    let run = embed_all(&mut f.conn, &e);
    assert!(run.finished);
    assert_eq!(run.rows, 7, "6 messages + 1 event");
    for case in f.cases.clone() {
        check(&f, &e, &case);
    }
}

#[test]
fn fts_only_without_embedder_and_readable_output() {
    let f = load();
    let r = search::query(&f.conn, &Indexes::new(), None, &Query::new("brake pads")).unwrap();
    assert_eq!(r.model, None);
    assert_eq!(r.signals_used, vec![Signal::Fts]);
    assert_eq!(r.hits[0].row.id, f.ids["car_a"]);
    let text = personkit_cli::output::human(&r, false);
    assert!(text.contains("browser-ext:claude"), "{text}");
    assert!(text.contains("2026-11-01 09:01"), "{text}");
    assert!(text.contains("thread car"), "{text}");
    assert!(
        text.contains("[brake]") && text.contains("[pads]"),
        "{text}"
    );
    assert!(text.contains("matched: words #1"), "{text}");
}

#[test]
fn embeddings_are_cached_by_text_and_model() {
    let mut f = load();
    let v1 = ConceptEmbedder {
        version: "1",
        calls: AtomicUsize::new(0),
    };
    embed_all(&mut f.conn, &v1);
    assert_eq!(v1.calls.load(Ordering::SeqCst), 7);
    // Nothing pending: a second run computes nothing.
    let again = embed_all(&mut f.conn, &v1);
    assert_eq!((again.rows, again.computed), (0, 0));
    assert_eq!(
        vectors::coverage(&f.conn, &v1.model_key())
            .unwrap()
            .pending(),
        0
    );
    // Identical content in another thread reuses the cached vector.
    let o = build_observation(
        "browser-ext:chatgpt",
        "other",
        Role::User,
        "Which vegetables grow well in shade?",
        Some(0),
        None,
        "2026-11-10T00:00:00Z",
        ClientInfo {
            app_version: "t".into(),
            device_id: "d".into(),
        },
    );
    ingest_observations(
        &mut f.conn,
        &Origin {
            device_id: "test-device".into(),
        },
        &[o],
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    let run = embed_all(&mut f.conn, &v1);
    assert_eq!(
        (run.rows, run.computed),
        (1, 0),
        "same text, same model: no new inference"
    );
    // A model change re-embeds every row (8 texts, 7 distinct), and only those of the old model.
    let v2 = ConceptEmbedder {
        version: "2",
        calls: AtomicUsize::new(0),
    };
    assert_eq!(
        vectors::coverage(&f.conn, &v2.model_key())
            .unwrap()
            .pending(),
        8
    );
    let run = embed_all(&mut f.conn, &v2);
    assert_eq!(run.rows, 8);
    assert_eq!(v2.calls.load(Ordering::SeqCst), 7);
    // Switching back finds every vector of version 1 in the cache.
    let run = embed_all(&mut f.conn, &v1);
    assert_eq!((run.rows, run.computed), (8, 0));
    // Vectors of another model are never used by a query of this one.
    let r = search::query(&f.conn, &Indexes::new(), Some(&v2), &Query::new("vehicle")).unwrap();
    assert!(
        r.hits
            .iter()
            .all(|h| !h.matched_via.contains(&Signal::Vector)),
        "stale vectors used"
    );
}

#[test]
fn unsupported_dimension_is_rejected() {
    #[derive(Debug)]
    struct Odd;
    impl Embedder for Odd {
        fn kind(&self) -> &'static str {
            "openai"
        }
        fn model_id(&self) -> &str {
            "odd"
        }
        fn model_version(&self) -> &str {
            "1"
        }
        fn dim(&self) -> usize {
            512
        }
        fn embed_documents(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            Ok(texts.iter().map(|_| vec![0.1; 512]).collect())
        }
    }
    let mut f = load();
    let mut cursor = Cursor::default();
    let err = indexer::embed_pending(
        &mut f.conn,
        &Odd,
        &Clock::system(),
        &mut cursor,
        10,
        4,
        None,
        |_| {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("512-dimensional"), "{err}");
}

/// An embedder that records the texts it is given.
#[derive(Debug, Default)]
struct Recording {
    context: bool,
    texts: std::sync::Mutex<Vec<String>>,
}

impl Embedder for Recording {
    fn kind(&self) -> &'static str {
        "local"
    }
    fn model_id(&self) -> &str {
        "test:recording"
    }
    fn model_version(&self) -> &str {
        if self.context { "1+prev" } else { "1" }
    }
    fn dim(&self) -> usize {
        384
    }
    fn previous_turn_context(&self) -> bool {
        self.context
    }
    fn embed_documents(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.texts
            .lock()
            .unwrap()
            .extend(texts.iter().map(|t| t.to_string()));
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.01f32; 384];
                v[t.len() % 384] = 1.0;
                personkit_embed::l2_normalize(&mut v);
                v
            })
            .collect())
    }
}

/// With previous-turn context a reply's vector text is the reply followed by the turn before it in its own thread
/// (by position, whatever the arrival order); the first turn of a thread, and every turn without it, is alone.
#[test]
fn previous_turn_goes_into_the_vector_text() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = personkit_store::db::open(&dir.path().join("corpus.db")).unwrap();
    let client = ClientInfo {
        app_version: "test".into(),
        device_id: "test-device".into(),
    };
    let at = "2026-05-01T10:00:00Z";
    let o = |conv: &str, role: Role, text: &str, ordinal: u32| {
        build_observation(
            "browser-ext:claude",
            conv,
            role,
            text,
            Some(ordinal),
            None,
            at,
            client.clone(),
        )
    };
    // The reply arrives before the question it answers; another thread sits in between.
    let obs = vec![
        o("a", Role::Assistant, "Use a very hot oven.", 1),
        o("b", Role::User, "Unrelated question.", 0),
        o("a", Role::User, "How do I bake bread?", 0),
    ];
    let origin = Origin {
        device_id: "test-device".into(),
    };
    ingest_observations(&mut conn, &origin, &obs, time::OffsetDateTime::now_utc()).unwrap();
    for context in [true, false] {
        let e = Recording {
            context,
            ..Recording::default()
        };
        embed_all(&mut conn, &e);
        let mut texts = e.texts.lock().unwrap().clone();
        texts.sort();
        let reply = if context {
            "Use a very hot oven.\n\n(after: How do I bake bread?)"
        } else {
            "Use a very hot oven."
        };
        assert_eq!(
            texts,
            vec!["How do I bake bread?", "Unrelated question.", reply],
            "context {context}"
        );
    }
}

/// The previous turn is found by the thread's order, not by comparing slot names as text (`o:10` sorts before
/// `o:9`): in a thread of twelve turns the eleventh follows the tenth.
#[test]
fn previous_turn_follows_the_thread_order_past_ten_turns() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = personkit_store::db::open(&dir.path().join("corpus.db")).unwrap();
    let client = ClientInfo {
        app_version: "test".into(),
        device_id: "test-device".into(),
    };
    let obs: Vec<_> = (0..12u32)
        .map(|i| {
            build_observation(
                "browser-ext:chatgpt",
                "long",
                if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                },
                &format!("turn number {i}"),
                Some(i),
                None,
                "2026-05-01T10:00:00Z",
                client.clone(),
            )
        })
        .collect();
    let origin = Origin {
        device_id: "test-device".into(),
    };
    ingest_observations(&mut conn, &origin, &obs, time::OffsetDateTime::now_utc()).unwrap();
    let e = Recording {
        context: true,
        ..Recording::default()
    };
    embed_all(&mut conn, &e);
    let texts = e.texts.lock().unwrap().clone();
    for i in 1..12 {
        let want = format!("turn number {i}\n\n(after: turn number {})", i - 1);
        assert!(texts.contains(&want), "{want:?} in {texts:#?}");
    }
    assert!(texts.contains(&"turn number 0".to_owned()));
}

/// With `context`, the turn right after a match joins the results (the answer to a matching question), marked as
/// found through its context, below the match itself; without it, only the match.
#[test]
fn the_turn_after_a_match_gains_its_share() {
    let (_dir, conn) = claude_corpus(&[
        ("a", Role::User, "How do I bake sourdough bread?", 0),
        (
            "a",
            Role::Assistant,
            "Use a very hot oven and a lidded pot.",
            1,
        ),
        ("a", Role::User, "Thanks!", 2),
        ("b", Role::User, "Best hiking boots?", 0),
    ]);
    let run = |context: f64| {
        let mut q = Query::new("sourdough bread");
        q.weights = search::Weights::FTS_ONLY;
        q.context = context;
        q.turn_before = 0.0;
        q.turn_after = 0.0;
        search::query(&conn, &Indexes::new(), None, &q).unwrap()
    };
    let without = run(0.0);
    assert_eq!(without.hits.len(), 1);
    let with = run(0.3);
    let contents: Vec<_> = with.hits.iter().map(|h| h.row.content.as_str()).collect();
    assert_eq!(
        contents,
        [
            "How do I bake sourdough bread?",
            "Use a very hot oven and a lidded pot."
        ]
    );
    assert_eq!(with.hits[1].matched_via, vec![Signal::Context]);
    assert!((with.hits[1].score - 0.3 * with.hits[0].score).abs() < 1e-9);
    // A filter applies to what context brings in too.
    let mut q = Query::new("sourdough bread");
    q.weights = search::Weights::FTS_ONLY;
    q.context = 0.3;
    q.turn_before = 0.0;
    q.turn_after = 0.0;
    q.role = Some("user".into());
    let r = search::query(&conn, &Indexes::new(), None, &q).unwrap();
    assert_eq!(r.hits.len(), 1, "{:?}", r.hits);
}

/// With `neighbour`, the reply to a matching turn enters the full-text signal itself with that share of the
/// match's score (so fusion sees it as a full-text hit); a filter still applies to it.
#[test]
fn the_reply_to_a_match_gains_a_share_of_its_full_text_score() {
    let (_dir, conn) = claude_corpus(&[
        ("a", Role::User, "Which glaze suits stoneware mugs?", 0),
        ("a", Role::Assistant, "A celadon, fired to cone six.", 1),
        ("b", Role::User, "Anything on stoneware?", 0),
    ]);
    let run = |neighbour: f64, role: Option<&str>| {
        let mut q = Query::new("glaze stoneware");
        q.weights = search::Weights::FTS_ONLY;
        q.neighbour = neighbour;
        q.turn_before = 0.0;
        q.turn_after = 0.0;
        q.role = role.map(str::to_owned);
        search::query(&conn, &Indexes::new(), None, &q).unwrap()
    };
    let contents = |r: &search::QueryResult| -> Vec<String> {
        r.hits.iter().map(|h| h.row.content.clone()).collect()
    };
    let without = run(0.0, None);
    assert!(!contents(&without).iter().any(|c| c.contains("celadon")));
    let with = run(0.5, None);
    let got = contents(&with);
    let q = got.iter().position(|c| c.contains("glaze")).unwrap();
    let a = got.iter().position(|c| c.contains("celadon")).unwrap();
    assert!(q < a, "{got:?}");
    assert_eq!(with.hits[a].matched_via, vec![Signal::Fts]);
    // Only the turn right after a match gains: the other thread's only turn has no reply.
    assert_eq!(got.len(), 3, "{got:?}");
    let r = run(0.5, Some("user"));
    assert!(!contents(&r).iter().any(|c| c.contains("celadon")));
}

/// With `prf`, words the best full-text hits share (and the query lacks) find turns that share none of the
/// query's words.
#[test]
fn feedback_finds_turns_through_the_words_of_the_best_hits() {
    let (_dir, conn) = claude_corpus(&[
        (
            "c0",
            Role::User,
            "My kayak trip on the fjord: paddling past the glacier at dawn",
            0,
        ),
        ("c1", Role::User, "Kayak rental near the fjord was cheap", 0),
        (
            "c2",
            Role::User,
            "Paddling against the glacier wind took hours",
            0,
        ),
        ("c3", Role::User, "Quarterly budget spreadsheet review", 0),
        ("c4", Role::User, "The budget meeting moved to Thursday", 0),
    ]);
    let run = |prf: f64| {
        let mut q = Query::new("kayak");
        q.weights = search::Weights::FTS_ONLY;
        q.prf = prf;
        let r = search::query(&conn, &Indexes::new(), None, &q).unwrap();
        r.hits
            .iter()
            .map(|h| h.row.content.clone())
            .collect::<Vec<_>>()
    };
    let without = run(0.0);
    assert_eq!(without.len(), 2, "{without:?}");
    let with = run(0.3);
    assert!(
        with[..2]
            .iter()
            .all(|c| c.contains("Kayak") || c.contains("kayak"))
    );
    assert!(with.iter().any(|c| c.starts_with("Paddling")), "{with:?}");
    assert!(!with.iter().any(|c| c.contains("budget")), "{with:?}");
}

/// A corpus holding these Claude turns (conversation, role, text, ordinal), all captured at one time.
/// The shipped full-text signal scores a reply together with the turn it answers: an answer that repeats none
/// of the question's words is found, as a full-text hit, below the question; with the pairs off it is not; a
/// filter still applies to it; and a reply is not credited with words of another thread.
#[test]
fn a_reply_is_found_through_the_turn_it_answers() {
    let (_dir, conn) = claude_corpus(&[
        ("a", Role::User, "How long have you kept the turtles?", 0),
        (
            "a",
            Role::Assistant,
            "Three years now, and they still make me smile.",
            1,
        ),
        ("b", Role::User, "Turtles need a lamp for warmth.", 0),
        ("b", Role::Assistant, "Also a filter for the tank water.", 1),
        ("c", Role::User, "Nothing about reptiles here.", 0),
        ("c", Role::Assistant, "Three years of piano lessons.", 1),
    ]);
    let run = |before: f64, after: f64, role: Option<&str>| {
        let mut q = Query::new("how long kept turtles");
        q.weights = search::Weights::FTS_ONLY;
        q.turn_before = before;
        q.turn_after = after;
        q.role = role.map(str::to_owned);
        search::query(&conn, &Indexes::new(), None, &q).unwrap()
    };
    let contents = |r: &search::QueryResult| -> Vec<String> {
        r.hits.iter().map(|h| h.row.content.clone()).collect()
    };
    let alone = contents(&run(0.0, 0.0, None));
    assert!(
        !alone.iter().any(|c| c.starts_with("Three years now")),
        "{alone:?}"
    );
    let with = run(search::TURN_BEFORE, search::TURN_AFTER, None);
    let got = contents(&with);
    let question = got
        .iter()
        .position(|c| c.contains("kept the turtles"))
        .unwrap();
    let answer = got
        .iter()
        .position(|c| c.starts_with("Three years now"))
        .unwrap_or_else(|| panic!("the answer is found: {got:?}"));
    assert!(question < answer, "{got:?}");
    assert_eq!(with.hits[answer].matched_via, vec![Signal::Fts]);
    assert!(!got.iter().any(|c| c.contains("piano")), "{got:?}");
    // The turn after the tank question does not match "turtles" itself but follows a turn that does.
    assert!(got.iter().any(|c| c.contains("tank water")), "{got:?}");
    let users = contents(&run(search::TURN_BEFORE, search::TURN_AFTER, Some("user")));
    assert!(
        !users.iter().any(|c| c.starts_with("Three years")),
        "{users:?}"
    );
    // A pasted paragraph (more distinct words than pairs are scored for, with dates and numbers mixed in, within
    // the query bound) is searched with the plain full-text scores: the same hits as with pairs off, and no error.
    let mut long: String = (0..100).map(|i| format!("w{i} 1 may ")).collect();
    long.push_str("kept turtles 2023");
    let wall = |before: f64| {
        let mut q = Query::new(long.clone());
        q.weights = search::Weights::FTS_ONLY;
        q.turn_before = before;
        search::query(&conn, &Indexes::new(), None, &q).unwrap()
    };
    assert!(!wall(search::TURN_BEFORE).hits.is_empty());
    assert_eq!(contents(&wall(search::TURN_BEFORE)), contents(&wall(0.0)));
    // A wall of thousands of words is refused before it reaches SQLite, naming the limit.
    let huge: String = (0..5000).map(|i| format!("w{i} ")).collect();
    let err = search::query(&conn, &Indexes::new(), None, &Query::new(huge)).unwrap_err();
    assert!(matches!(err, search::SearchError::TooLarge(_)), "{err}");
    assert!(err.to_string().contains("the limit is"), "{err}");
}

/// A date named in the question lifts the messages from that date; a question asking when lifts the candidates
/// that say when. Off, the better word match wins.
#[test]
fn dates_and_when_questions_use_the_time_of_the_turns() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = personkit_store::db::open(&dir.path().join("corpus.db")).unwrap();
    let client = ClientInfo {
        app_version: "test".into(),
        device_id: "test-device".into(),
    };
    let turns = [
        (
            "spring",
            "I baked bread, bread and more bread with the kids",
            "2023-05-03T18:00:00.000Z",
        ),
        ("summer", "Baked a peach pie", "2023-07-09T18:00:00.000Z"),
        (
            "autumn",
            "The kids and I baked cookies yesterday, then we cleaned the kitchen, walked the dog and read until late",
            "2023-10-01T18:00:00.000Z",
        ),
    ];
    let obs: Vec<_> = turns
        .iter()
        .map(|(conv, text, at)| {
            let mut o = build_observation(
                "browser-ext:claude",
                conv,
                Role::User,
                text,
                Some(0),
                None,
                "2026-05-01T10:00:00Z",
                client.clone(),
            );
            o.turn.occurred_at = Some((*at).into());
            o
        })
        .collect();
    let origin = Origin {
        device_id: "test-device".into(),
    };
    ingest_observations(&mut conn, &origin, &obs, time::OffsetDateTime::now_utc()).unwrap();
    let first = |text: &str, dates: f64, when: f64| {
        let mut q = Query::new(text);
        q.dates = dates;
        q.when = when;
        let r = search::query(&conn, &Indexes::new(), None, &q).unwrap();
        (r.hits[0].row.content.clone(), r.hits[0].matched_via.clone())
    };
    let (top, via) = first("What did the kids bake on 9 July, 2023?", 1.0, 0.0);
    assert!(top.contains("peach"), "{top}");
    assert!(via.contains(&Signal::Date), "{via:?}");
    let (top, _) = first("What did the kids bake on 9 July, 2023?", 0.0, 0.0);
    assert!(!top.contains("peach"), "{top}");
    let (top, _) = first("What did we bake in July 2023?", 1.0, 0.0);
    assert!(top.contains("peach"), "{top}");
    let (top, via) = first("When did the kids bake?", 0.0, search::WHEN);
    assert!(top.contains("yesterday"), "{top}");
    assert!(via.contains(&Signal::When), "{via:?}");
    let (top, _) = first("When did the kids bake?", 0.0, 0.0);
    assert!(!top.contains("yesterday"), "{top}");
}

fn claude_corpus(turns: &[(&str, Role, &str, u32)]) -> (tempfile::TempDir, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = personkit_store::db::open(&dir.path().join("corpus.db")).unwrap();
    let client = ClientInfo {
        app_version: "test".into(),
        device_id: "test-device".into(),
    };
    let obs: Vec<_> = turns
        .iter()
        .map(|(conv, role, text, ordinal)| {
            build_observation(
                "browser-ext:claude",
                conv,
                *role,
                text,
                Some(*ordinal),
                None,
                "2026-05-01T10:00:00Z",
                client.clone(),
            )
        })
        .collect();
    let origin = Origin {
        device_id: "test-device".into(),
    };
    ingest_observations(&mut conn, &origin, &obs, time::OffsetDateTime::now_utc()).unwrap();
    (dir, conn)
}

/// An embedder that fails answers from the other signals: the result and every hit say the vector signal was
/// skipped and why, and the CLI's text says so too.
#[test]
fn a_failing_embedder_skips_the_vector_signal() {
    #[derive(Debug)]
    struct Down;
    impl Embedder for Down {
        fn kind(&self) -> &'static str {
            "openai"
        }
        fn model_id(&self) -> &str {
            "openai:down"
        }
        fn model_version(&self) -> &str {
            "1"
        }
        fn dim(&self) -> usize {
            384
        }
        fn embed_documents(
            &self,
            _: &[&str],
        ) -> Result<Vec<Vec<f32>>, personkit_embed::EmbedError> {
            Err(personkit_embed::EmbedError::Http {
                url: "http://127.0.0.1:9/v1/embeddings".into(),
                message: "connection refused".into(),
            })
        }
    }
    let f = load();
    let r = search::query(
        &f.conn,
        &Indexes::new(),
        Some(&Down),
        &Query::new("brake pads"),
    )
    .unwrap();
    assert_eq!(r.model, None);
    assert_eq!(r.signals_used, vec![Signal::Fts]);
    assert_eq!(r.signals_skipped.len(), 1);
    assert_eq!(r.signals_skipped[0].signal, Signal::Vector);
    assert!(r.signals_skipped[0].reason.contains("connection refused"));
    assert_eq!(r.hits[0].row.id, f.ids["car_a"]);
    assert!(
        r.hits
            .iter()
            .all(|h| h.skipped.len() == 1 && h.matched_via == vec![Signal::Fts])
    );
    let text = personkit_cli::output::human(&r, false);
    assert!(
        text.starts_with("(the vector signal was skipped: "),
        "{text}"
    );
}

/// Approved knowledge is a signal of its own: the words match an entry, and the messages it cites come back
/// found "via knowledge" even when their own words do not match; pending and rejected entries never count, and a
/// filter keeps out entries whose sources are all outside it.
#[test]
fn approved_knowledge_finds_the_messages_it_cites() {
    use personkit_store::knowledge::{self as rows, NewEntry, Source};
    let (_dir, conn) = claude_corpus(&[
        (
            "bikes",
            Role::User,
            "I ride the steel frame to work every day, rain or shine.",
            0,
        ),
        (
            "bikes",
            Role::Assistant,
            "That sounds like a sturdy habit.",
            1,
        ),
        ("pans", Role::User, "Cast iron pans go in the oven too.", 0),
    ]);
    let id_of = |needle: &str| -> (String, String) {
        conn.query_row(
            "SELECT id, thread_id FROM messages WHERE content LIKE ?1",
            [format!("%{needle}%")],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    };
    let (bike, bike_thread) = id_of("steel frame");
    let now = time::OffsetDateTime::now_utc();
    let entry = |topic: &str, position: &str| NewEntry {
        kind: "standard".into(),
        topic: topic.into(),
        position: position.into(),
        reasoning: "Aluminium frames crack on potholed commutes; steel bends and can be repaired."
            .into(),
        confidence: "high".into(),
        stability: "durable".into(),
        origin: "pipeline".into(),
        sources: vec![Source {
            message_id: bike.clone(),
            thread_id: bike_thread.clone(),
        }],
        ..NewEntry::default()
    };
    let id = rows::insert(
        &conn,
        &entry("bicycle frames", "Steel over aluminium for a daily bike"),
        now,
    )
    .unwrap();
    let ask = |text: &str, surface: Option<&str>| {
        let mut q = Query::new(text);
        q.surface = surface.map(str::to_owned);
        search::query(&conn, &Indexes::new(), None, &q).unwrap()
    };
    // Pending: the entry is invisible and nothing is found through it.
    let r = ask("aluminium potholed", None);
    assert!(r.knowledge.is_empty(), "{:?}", r.knowledge);
    assert!(r.hits.is_empty(), "{:?}", r.hits);
    rows::decide(&conn, &id, "approved", "test", now).unwrap();
    let r = ask("aluminium potholed", None);
    assert_eq!(r.knowledge.len(), 1);
    assert_eq!(r.knowledge[0].id, id);
    assert_eq!(r.knowledge[0].sources, vec![bike.clone()]);
    assert_eq!(r.hits.len(), 1, "{:?}", r.hits);
    assert_eq!(r.hits[0].row.id, bike);
    assert_eq!(r.hits[0].matched_via, vec![Signal::Knowledge]);
    assert!(r.signals_used.contains(&Signal::Knowledge));
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(
        json["hits"][0]["matched_via"],
        serde_json::json!(["knowledge"])
    );
    assert_eq!(json["knowledge"][0]["type"], "standard");
    // Words in the message too: found by both signals.
    let r = ask("steel aluminium", None);
    assert_eq!(r.hits[0].row.id, bike);
    assert_eq!(r.hits[0].matched_via, vec![Signal::Fts, Signal::Knowledge]);
    // The CLI's listing names the entry and why the message matched.
    let text = personkit_cli::output::human(&r, false);
    assert!(text.contains("Your approved knowledge:"), "{text}");
    assert!(
        text.contains("[standard] bicycle frames: Steel over aluminium"),
        "{text}"
    );
    assert!(text.contains("cited by your knowledge #1"), "{text}");
    // A filter the sources are outside of keeps the entry out.
    let r = ask("aluminium potholed", Some("browser-ext:chatgpt"));
    assert!(r.knowledge.is_empty() && r.hits.is_empty(), "{r:?}");
    // Weight 0 turns the signal off.
    let mut q = Query::new("aluminium potholed");
    q.knowledge = 0.0;
    let r = search::query(&conn, &Indexes::new(), None, &q).unwrap();
    assert!(r.knowledge.is_empty() && r.hits.is_empty());
    // Rejected: gone again.
    rows::decide(&conn, &id, "rejected", "test", now).unwrap();
    let r = ask("aluminium potholed", None);
    assert!(r.knowledge.is_empty() && r.hits.is_empty(), "{r:?}");
}
