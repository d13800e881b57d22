//! Relay-to-relay sync through the real binary: real `personkit serve` processes on ports chosen at run time,
//! paired with `personkit pair --sync` / `personkit sync add`, syncing continuously and with `sync now`.
//!
//! - two relays: a turn captured through A is searchable on B within 10 s; a forget on B reaches A (messages, full
//!   text, vectors) and a replay of the forgotten turn to A is answered `duplicate` and not stored; a revoked peer
//!   is refused at once; plain http to a non-loopback peer is refused.
//! - two relays: commits harvested from a real git repository on A, and a merge of two people the user made in
//!   A's graph, reach B: its events list has the commits and its own graph pass folds the two as A did.
//! - the property: three relays in a chain (A–B, B–C), a seeded random interleaving of captures, forgets, replays,
//!   `sync now`, restarts and SIGKILLs while `serve` syncs in the background; at the end every corpus gives the
//!   same canonical dump and no forgotten turn exists anywhere (messages, full-text index, vectors). The seed is
//!   printed on failure; `PERSONKIT_SYNC_SEED` replays one, `PERSONKIT_SYNC_STEPS` runs more steps (default 30).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use personkit_testkit::{self as kit, Relay, turn_at};
use serde_json::Value;

const SURFACE: &str = "browser-ext:chatgpt";

fn conn(db: &Path) -> rusqlite::Connection {
    personkit_store::db::register_sqlite_vec();
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    c.busy_timeout(Duration::from_secs(10)).unwrap();
    c
}

fn count(db: &Path, sql: &str, p: &str) -> i64 {
    conn(db).query_row(sql, [p], |r| r.get(0)).unwrap()
}

/// Rows of any vector table whose message is gone.
fn orphan_vectors(db: &Path) -> i64 {
    let c = conn(db);
    let mut n = 0;
    for t in ["messages_vec_384", "messages_vec_768"] {
        n += c
            .query_row(
                &format!("SELECT count(*) FROM {t} WHERE rowid NOT IN (SELECT pk FROM messages)"),
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap();
    }
    n
}

fn fts_hits(db: &Path, word: &str) -> i64 {
    count(
        db,
        "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?1",
        &format!("\"{word}\""),
    )
}

fn dump(db: &Path) -> String {
    personkit_store::sync::canonical_dump(&conn(db)).unwrap()
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    t.elapsed()
}

fn hits(relay: &Relay, token: &str, word: &str) -> usize {
    let r = relay.http.get(&format!("/v1/query?q={word}"), Some(token));
    assert_eq!(r.status, 200, "{}", r.body);
    // Hits by the words themselves (a relay with an embedder also answers near meanings).
    r.json()["hits"].as_array().map_or(0, |h| {
        h.iter()
            .filter(|h| {
                h["matched_via"]
                    .as_array()
                    .is_some_and(|v| v.iter().any(|s| s == "fts"))
            })
            .count()
    })
}

fn turns(conv: &str, word: &str, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            turn_at(
                SURFACE,
                conv,
                kit::alternating_role(i),
                &format!("turn {i} of {conv} about {word}"),
                Some(i as u32),
                None,
                &format!("2026-11-2{}T10:00:0{i}Z", i % 3),
            )
        })
        .collect()
}

/// The names `graph list --kind person` gives, sorted.
fn people(relay: &Relay) -> Vec<String> {
    let mut v: Vec<String> = relay
        .cli_json(&["graph", "list", "--kind", "person", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn commits_harvested_on_one_relay_and_a_merge_made_there_reach_the_others_graph() {
    let (ta, db_a) = kit::temp_db();
    let (_tb, db_b) = kit::temp_db();
    let a = Relay::start(&db_a, &["--sync-interval", "2"]);
    let b = Relay::start(&db_b, &["--sync-interval", "2"]);
    link(&a, &b);
    // A real repository, two commits by two spellings of one person.
    let repo = ta.path().join("orbit");
    std::fs::create_dir(&repo).unwrap();
    kit::git(&repo, &["init", "-q", "-b", "main"], "2026-11-20T10:00:00Z");
    for (i, (file, author)) in [("a.txt", "Ana Silva"), ("b.txt", "Ana M. Silva")]
        .iter()
        .enumerate()
    {
        std::fs::write(repo.join(file), "one\n").unwrap();
        kit::git(&repo, &["add", file], "2026-11-20T10:00:00Z");
        let when = format!("2026-11-2{}T10:00:00Z", i + 1);
        let who = format!("{author} <ana@example.org>");
        kit::git(
            &repo,
            &[
                "commit",
                "-q",
                "-m",
                &format!("change {i}"),
                "--author",
                &who,
            ],
            &when,
        );
    }
    a.cli(&["events", "enable", "git"]).ok();
    a.cli(&["events", "add-path", "git", repo.to_str().unwrap()])
        .ok();
    let harvested = a.cli_json(&["events", "harvest", "--json"]);
    assert_eq!(harvested["sources"][0]["stored"], 2, "{harvested}");
    a.cli_json(&["graph", "build", "--json"]);
    assert_eq!(people(&a), ["Ana M. Silva", "Ana Silva"]);
    let merged = a.cli_json(&["graph", "merge", "Ana Silva", "Ana M. Silva", "--json"]);
    assert_eq!(merged["state"], "merged", "{merged}");
    assert_eq!(people(&a), ["Ana Silva"]);

    // B gets the commits and the decision; its own graph pass derives both people and folds them as A did.
    wait_for("A's commits on B", Duration::from_secs(30), || {
        let l = b.cli_json(&["events", "list", "--kind", "git.commit", "--json"]);
        l["events"].as_array().is_some_and(|e| e.len() == 2)
    });
    wait_for("the merge in B's graph", Duration::from_secs(30), || {
        b.cli_json(&["graph", "build", "--json"]);
        people(&b) == ["Ana Silva"]
    });
    let merged_on_b = b.cli_json(&["graph", "candidates", "--state", "merged", "--json"]);
    assert_eq!(
        merged_on_b.as_array().map(Vec::len),
        Some(1),
        "{merged_on_b}"
    );
    let ana = b.cli_json(&["entity", "Ana M. Silva", "--json"]);
    assert_eq!(
        ana["entity"]["name"], "Ana Silva",
        "the folded name finds the kept entity: {ana}"
    );
}

/// `personkit pair --sync` on `to`, `personkit sync add` on `from`.
fn link(from: &Relay, to: &Relay) -> Value {
    let code = to.cli_json(&["pair", "--sync", "--json"])["code"]
        .as_str()
        .unwrap()
        .to_owned();
    from.cli_json(&["sync", "add", &to.base, "--code", &code, "--json"])
}

fn with_model(db: &Path) {
    std::fs::write(
        db.parent().unwrap().join("config.toml"),
        format!(
            "[embedder]\nkind = \"local\"\nmodel_dir = {:?}\n",
            kit::model_dir().display().to_string()
        ),
    )
    .unwrap();
}

#[test]
fn two_relays_sync_both_ways_forget_everywhere_and_revoke_at_once() {
    let (_ta, db_a) = kit::temp_db();
    let (_tb, db_b) = kit::temp_db();
    with_model(&db_a);
    let a = Relay::start(&db_a, &["--sync-interval", "5"]);
    let b = Relay::start(&db_b, &["--sync-interval", "5"]);
    let tok_a = a.pair_printed("laptop browser");
    let tok_b = b.pair_printed("vps browser");

    // Plain http to a machine elsewhere is refused before anything is sent.
    let refused = a.cli(&[
        "sync",
        "add",
        "http://192.0.2.7:8787",
        "--code",
        "ABCD-EFGH",
    ]);
    assert!(!refused.status.success());
    assert!(refused.stderr.contains("plain http"), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("https://"),
        "hint names https: {}",
        refused.stderr
    );
    // A wrong code is refused with the error shape's hint.
    let wrong = a.cli(&["sync", "add", &b.base, "--code", "ABCD-EFGH"]);
    assert!(!wrong.status.success());
    assert!(wrong.stderr.contains("pair --sync"), "{}", wrong.stderr);

    let added = link(&a, &b);
    let b_id = added["peer_id"].as_str().unwrap().to_owned();
    let peers_b = b.cli_json(&["sync", "list", "--json"]);
    assert_eq!(peers_b.as_array().unwrap().len(), 1, "{peers_b}");
    assert_eq!(peers_b[0]["calls_us"], true);
    let a_id = peers_b[0]["id"].as_str().unwrap().to_owned();
    assert!(
        !peers_b.to_string().contains("pks_"),
        "no token in listings: {peers_b}"
    );

    // Captured through A, searchable on B within 10 s, while `serve` syncs.
    let t0 = Instant::now();
    a.http.send_batch(&tok_a, &turns("from-a", "quokkasync", 4));
    let took = wait_for("A's turns searchable on B", Duration::from_secs(10), || {
        hits(&b, &tok_b, "quokkasync") == 4
    });
    eprintln!("A -> B searchable after {:?}", t0.elapsed().max(took));

    // And the other way: captured through B, on A within 10 s (A pulls; B cannot call A).
    b.http.send_batch(&tok_b, &turns("from-b", "wombatsync", 3));
    wait_for("B's turns searchable on A", Duration::from_secs(10), || {
        hits(&a, &tok_a, "wombatsync") == 3
    });
    // The embedder on A embeds what arrived by sync too.
    wait_for("7 vectors on A", Duration::from_secs(120), || {
        count(
            &db_a,
            "SELECT count(*) FROM search_vec_state WHERE kind = ?1",
            "message",
        ) == 7
    });

    // Forget on B: gone on A — messages, full text, vectors — and the replay to A is a duplicate.
    let tid = kit::thread_id(SURFACE, "from-a");
    let r = b.http.delete(&format!("/v1/threads/{tid}"), Some(&tok_b));
    assert_eq!(r.status, 200, "{}", r.body);
    wait_for(
        "the forget on B reaching A",
        Duration::from_secs(10),
        || {
            count(
                &db_a,
                "SELECT count(*) FROM messages WHERE thread_id = ?1",
                &tid,
            ) == 0
        },
    );
    assert_eq!(
        fts_hits(&db_a, "quokkasync"),
        0,
        "forgotten words left A's full-text index"
    );
    assert_eq!(
        orphan_vectors(&db_a),
        0,
        "vectors of forgotten turns left on A"
    );
    assert_eq!(
        count(&db_a, "SELECT count(*) FROM threads WHERE id = ?1", &tid),
        0
    );
    let replay = a.http.send_batch(&tok_a, &turns("from-a", "quokkasync", 4));
    assert_eq!(kit::statuses(&replay), vec!["duplicate"; 4], "{replay}");
    assert_eq!(
        count(
            &db_a,
            "SELECT count(*) FROM messages WHERE thread_id = ?1",
            &tid
        ),
        0
    );
    assert_eq!(hits(&a, &tok_a, "quokkasync"), 0);
    // Nor does a round bring it back to B.
    let now = a.cli_json(&["sync", "now", "--json"]);
    assert_eq!(now["peers"][0]["ok"], true, "{now}");
    assert_eq!(
        count(
            &db_b,
            "SELECT count(*) FROM messages WHERE thread_id = ?1",
            &tid
        ),
        0
    );
    assert_eq!(
        dump(&db_a),
        dump(&db_b),
        "the two corpora differ after a round"
    );

    // Revoke A on B: A's token is refused on its next request; nothing more crosses.
    let rv = b.cli_json(&["sync", "revoke", &a_id[..8], "--json"]);
    assert_eq!(rv["revoked"], a_id.as_str());
    a.http
        .send_batch(&tok_a, &turns("after-revoke", "platypussync", 2));
    let out = a.cli(&["sync", "now", "--json"]);
    assert!(!out.status.success(), "a round with a revoked peer fails");
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["peers"][0]["ok"], false, "{v}");
    assert_eq!(v["peers"][0]["error"]["code"], "unauthorized", "{v}");
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(
        hits(&b, &tok_b, "platypussync"),
        0,
        "a revoked peer's turns still arrive"
    );
    let listed = a.cli_json(&["sync", "list", "--json"]);
    assert_eq!(listed[0]["id"], b_id.as_str());
    assert!(
        listed[0]["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("unauthorized"),
        "{listed}"
    );
    // Tokens and contents stay out of the logs.
    for r in [&a, &b] {
        let log = r.stderr();
        assert!(
            !log.contains("pks_") && !log.contains("quokkasync"),
            "{log}"
        );
    }
}

/// A loopback listener standing in for a peer relay: it pairs (any code gets a sync token) and answers every other
/// request with a 302 to the same path on `to`.
fn redirecting_peer(to: String) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let path = line.split(' ').nth(1).unwrap_or("/").to_owned();
            let mut len = 0usize;
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
                if let Some((k, v)) = h.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            std::io::Read::read_exact(&mut reader, &mut vec![0; len]).ok();
            let answer = if path == "/v1/sync/pair" {
                let body = serde_json::json!({"token": "pks_stand_in", "relay_id": "stand-in-peer",
                    "name": "stand-in"})
                .to_string();
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{body}",
                    body.len()
                )
            } else {
                format!(
                    "HTTP/1.1 302 Found\r\nLocation: {to}{path}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
            };
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    base
}

/// A page of the relay `relay_id` carrying one turn with `word`.
fn page_with_a_turn(relay_id: &str, word: &str) -> Value {
    let (_t, db) = kit::temp_db();
    let mut c = personkit_store::db::open(&db).unwrap();
    let turn = turn_at(
        SURFACE,
        "injected",
        kit::alternating_role(0),
        &format!("an injected turn {word}"),
        Some(0),
        None,
        "2026-11-20T09:00:00Z",
    );
    personkit_store::ingest::ingest_observations(
        &mut c,
        &personkit_store::ingest::Origin {
            device_id: "dev".into(),
        },
        &[serde_json::from_value(turn).unwrap()],
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    let mut page = serde_json::to_value(personkit_sync::page(&c, 0, 1000).unwrap()).unwrap();
    page["relay_id"] = relay_id.into();
    page
}

#[test]
fn a_peer_redirecting_its_pages_elsewhere_is_not_followed_and_shows_an_error() {
    // The listener the redirect points at stands in for a plain-http host elsewhere (tests use loopback only); it
    // serves a valid page with a turn, which must not land.
    let page = page_with_a_turn("stand-in-peer", "kiwiredirect");
    let foreign = kit::StandIn::start(move |_, _| (200, page.clone()));
    let peer = redirecting_peer(foreign.base.clone());
    let (_t, db) = kit::temp_db();
    let a = Relay::start(&db, &["--sync-interval", "3600"]);
    let added = a.cli_json(&["sync", "add", &peer, "--code", "ABCD-EFGH", "--json"]);
    assert_eq!(added["peer_id"], "stand-in-peer", "{added}");

    let out = a.cli(&["sync", "now", "--json"]);
    assert!(
        !out.status.success(),
        "a round with a redirecting peer fails"
    );
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["peers"][0]["ok"], false, "{v}");
    assert_eq!(v["peers"][0]["error"]["code"], "redirect_refused", "{v}");
    assert!(
        foreign.seen.lock().unwrap().is_empty(),
        "the redirect was followed"
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM messages WHERE content LIKE ?1",
            "%kiwiredirect%"
        ),
        0,
        "the page behind the redirect was applied"
    );
    let listed = a.cli_json(&["sync", "list", "--json"]);
    assert!(
        listed[0]["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("redirect_refused"),
        "{listed}"
    );
    let table = a.cli(&["sync", "list"]);
    assert!(
        table.stdout.contains("redirect_refused"),
        "{}",
        table.stdout
    );
}

// ---------------------------------------------------------------------------------------------------------------
// The property.

struct Node {
    relay: Relay,
    _tmp: tempfile::TempDir,
    token: String,
    up: bool,
}

#[derive(Debug)]
enum Step {
    Capture {
        node: usize,
        conv: usize,
        revise: bool,
    },
    Forget {
        node: usize,
        conv: usize,
    },
    Replay {
        node: usize,
    },
    SyncNow {
        node: usize,
    },
    Restart {
        node: usize,
    },
    Kill {
        node: usize,
    },
    Start {
        node: usize,
    },
    Pause,
}

fn pick(rng: &mut kit::Rng) -> Step {
    let node = rng.below(3);
    match rng.below(20) {
        0..=6 => Step::Capture {
            node,
            conv: rng.below(4),
            revise: rng.below(4) == 0,
        },
        7..=9 => Step::Forget {
            node,
            conv: rng.below(4),
        },
        10 => Step::Replay { node },
        11..=14 => Step::SyncNow { node },
        15 => Step::Restart { node },
        16 => Step::Kill { node },
        17 => Step::Start { node },
        _ => Step::Pause,
    }
}

/// A word only one capture uses, so the full-text index can be asked for it.
fn word(n: u64) -> String {
    let mut s = String::from("zq");
    let mut n = n;
    loop {
        s.push((b'a' + (n % 26) as u8) as char);
        n /= 26;
        if n == 0 {
            break;
        }
    }
    s
}

#[test]
fn three_relays_converge_under_random_interleavings() {
    let seed: u64 = std::env::var("PERSONKIT_SYNC_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(7)
        });
    let steps: usize = std::env::var("PERSONKIT_SYNC_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    eprintln!("sync property: seed {seed}, {steps} steps (PERSONKIT_SYNC_SEED={seed} replays it)");
    let result = std::panic::catch_unwind(|| run_property(seed, steps));
    if let Err(e) = result {
        eprintln!("sync property FAILED with seed {seed}: rerun with PERSONKIT_SYNC_SEED={seed}");
        std::panic::resume_unwind(e);
    }
}

fn run_property(seed: u64, steps: usize) {
    let mut rng = kit::Rng::new(seed);
    let mut nodes: Vec<Node> = (0..3)
        .map(|i| {
            let (tmp, db) = kit::temp_db();
            if i == 2 {
                with_model(&db);
            }
            let relay = Relay::start(&db, &["--sync-interval", "1"]);
            let token = relay.pair_printed(&format!("browser {i}"));
            Node {
                relay,
                _tmp: tmp,
                token,
                up: true,
            }
        })
        .collect();
    // A chain: what C captures reaches A only through B.
    link(&nodes[0].relay, &nodes[1].relay);
    link(&nodes[1].relay, &nodes[2].relay);

    let mut n_word = 0u64;
    // Every turn ever sent (for replays), and per conversation the ordinal to write next.
    let mut sent: Vec<(usize, Value)> = Vec::new();
    let mut next_ord = [0u32; 4];
    // Message ids and words forgotten somewhere.
    let mut forgotten_ids: BTreeSet<String> = BTreeSet::new();
    let mut forgotten_words: BTreeSet<String> = BTreeSet::new();
    let mut words_of: std::collections::HashMap<String, String> = Default::default();

    for i in 0..steps {
        let step = pick(&mut rng);
        eprintln!("step {i}: {step:?}");
        match step {
            Step::Capture { node, conv, revise } => {
                if !nodes[node].up {
                    continue;
                }
                let ord = if revise && next_ord[conv] > 0 {
                    next_ord[conv] - 1
                } else {
                    next_ord[conv] += 1;
                    next_ord[conv] - 1
                };
                n_word += 1;
                let w = word(n_word);
                let content = format!("turn {ord} says {w}");
                let role = kit::alternating_role(ord as usize);
                let item = turn_at(
                    SURFACE,
                    &format!("conv-{conv}"),
                    role,
                    &content,
                    Some(ord),
                    None,
                    &format!(
                        "2026-11-20T10:{:02}:{:02}.000Z",
                        (n_word / 60) % 60,
                        n_word % 60
                    ),
                );
                let tid = kit::thread_id(SURFACE, &format!("conv-{conv}"));
                let hash = personkit_shared::ids::content_hash(&content, role);
                let mid = personkit_shared::ids::message_id(&uuid_of(&tid), &hash)
                    .hyphenated()
                    .to_string();
                words_of.insert(mid, w);
                nodes[node]
                    .relay
                    .http
                    .send_batch(&nodes[node].token, std::slice::from_ref(&item));
                sent.push((conv, item));
            }
            Step::Forget { node, conv } => {
                if !nodes[node].up {
                    continue;
                }
                let tid = kit::thread_id(SURFACE, &format!("conv-{conv}"));
                let ids: Vec<String> = {
                    let c = conn(&nodes[node].relay.db);
                    let mut st = c
                        .prepare("SELECT id FROM messages WHERE thread_id = ?1")
                        .unwrap();
                    st.query_map([&tid], |r| r.get(0))
                        .unwrap()
                        .map(Result::unwrap)
                        .collect()
                };
                let r = nodes[node]
                    .relay
                    .http
                    .delete(&format!("/v1/threads/{tid}"), Some(&nodes[node].token));
                assert!(r.status == 200 || r.status == 404, "{}", r.body);
                for id in ids {
                    if let Some(w) = words_of.get(&id) {
                        forgotten_words.insert(w.clone());
                    }
                    forgotten_ids.insert(id);
                }
            }
            Step::Replay { node } => {
                if !nodes[node].up || sent.is_empty() {
                    continue;
                }
                let (_, item) = &sent[rng.below(sent.len())];
                nodes[node]
                    .relay
                    .http
                    .send_batch(&nodes[node].token, std::slice::from_ref(item));
            }
            Step::SyncNow { node } => {
                if nodes[node].up {
                    // A peer may be down: the round fails for it and keeps what it committed.
                    let _ = nodes[node].relay.cli(&["sync", "now", "--json"]);
                }
            }
            Step::Restart { node } => {
                nodes[node].relay.restart();
                nodes[node].up = true;
            }
            Step::Kill { node } => {
                nodes[node].relay.kill9();
                nodes[node].up = false;
            }
            Step::Start { node } => {
                if !nodes[node].up {
                    nodes[node].relay.restart();
                    nodes[node].up = true;
                }
            }
            Step::Pause => std::thread::sleep(Duration::from_millis(300)),
        }
    }

    // Settle: everyone up, rounds until the dumps agree.
    for n in &mut nodes {
        if !n.up {
            n.relay.restart();
            n.up = true;
        }
    }
    let t = Instant::now();
    let dumps = loop {
        for n in &nodes {
            n.relay.cli(&["sync", "now", "--json"]).ok();
        }
        let d: Vec<String> = nodes.iter().map(|n| dump(&n.relay.db)).collect();
        if d[0] == d[1] && d[1] == d[2] {
            break d;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "corpora did not converge (seed {seed}):\nA:\n{}\nB:\n{}\nC:\n{}",
            d[0],
            d[1],
            d[2]
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!(
        "converged: {} dump lines, {} forgotten ids",
        dumps[0].lines().count(),
        forgotten_ids.len()
    );
    // Nothing forgotten anywhere: not as a message, not in the full-text index, not as a vector.
    let c_db = nodes[2].relay.db.clone();
    wait_for("C's embedder to settle", Duration::from_secs(120), || {
        count(
            &c_db,
            "SELECT count(*) FROM messages WHERE is_current = 1
                AND pk NOT IN (SELECT pk FROM search_vec_state WHERE kind = ?1)",
            "message",
        ) == 0
    });
    for n in &nodes {
        let db = &n.relay.db;
        for id in &forgotten_ids {
            assert_eq!(
                count(db, "SELECT count(*) FROM messages WHERE id = ?1", id),
                0,
                "forgotten message {id} exists (seed {seed})"
            );
            assert_eq!(
                count(
                    db,
                    "SELECT count(*) FROM forgotten_messages WHERE id = ?1",
                    id
                ),
                1,
                "no tombstone for {id} (seed {seed})"
            );
        }
        for w in &forgotten_words {
            assert_eq!(
                fts_hits(db, w),
                0,
                "forgotten word {w} in the full-text index (seed {seed})"
            );
        }
        assert_eq!(
            orphan_vectors(db),
            0,
            "vectors of gone messages (seed {seed})"
        );
    }
}

fn uuid_of(s: &str) -> uuid::Uuid {
    uuid::Uuid::parse_str(s).unwrap()
}
