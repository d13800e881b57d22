//! Owning the corpus through the real binary: `DELETE /v1/threads/{id}` and `personkit forget` against a real
//! relay (with the real local embedding model, so vectors exist to be removed), a replayed extension queue
//! afterwards, `personkit export` following the forget, and `personkit corpus snapshot` / `restore` with a
//! tampered file and an unknown key.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use personkit_shared::wire::Role;
use personkit_testkit::{self as kit, Relay, cli, turn_at};
use serde_json::Value;

const SECRET: &str = "zanzibarquokka";

fn turns(conv: &str, words: &str, title_day: &str) -> Vec<Value> {
    (0..4)
        .map(|i| {
            turn_at(
                "browser-ext:chatgpt",
                conv,
                kit::alternating_role(i),
                &format!("turn {i} about {words}"),
                Some(i as u32),
                None,
                &format!("{title_day}T10:00:0{i}Z"),
            )
        })
        .collect()
}

fn count(db: &Path, sql: &str) -> i64 {
    personkit_store::db::register_sqlite_vec();
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    c.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((
                    p.display().to_string(),
                    std::fs::read_to_string(&p).unwrap(),
                ));
            }
        }
    }
    out
}

#[test]
fn a_deleted_thread_never_comes_back() {
    let (_tmp, db) = kit::temp_db();
    let dir = db.parent().unwrap().to_path_buf();
    std::fs::write(
        dir.join("config.toml"),
        format!(
            "[embedder]\nkind = \"local\"\nmodel_dir = {:?}\n",
            kit::model_dir().display().to_string()
        ),
    )
    .unwrap();
    let relay = Relay::start(&db, &[]);
    let token = relay.pair_printed("own-test");
    let gone = turns("gone", SECRET, "2026-11-20");
    let kept = turns("kept", "sourdough bread", "2026-11-21");
    relay.http.send_batch(&token, &gone);
    relay.http.send_batch(&token, &kept);
    wait_for("8 embedded messages", || {
        count(
            &db,
            "SELECT count(*) FROM search_vec_state WHERE kind = 'message'",
        ) == 8
    });
    let out = dir.join("export");
    let r = cli(&db, &["export", "--out", out.to_str().unwrap(), "--json"]).json();
    assert_eq!(r["written"], 2, "{r}");
    assert!(files(&out).iter().any(|(_, c)| c.contains(SECRET)));

    let id = kit::thread_id("browser-ext:chatgpt", "gone");
    // An agent token may read but not forget; a prefix, a bad id and an unknown id are refused.
    let agent = cli(&db, &["agents", "add", "reader", "--json"]).json();
    let agent_token = agent["token"].as_str().unwrap();
    relay
        .http
        .delete(&format!("/v1/threads/{id}"), Some(agent_token))
        .assert_error(403, "read_only_token");
    relay
        .http
        .delete(&format!("/v1/threads/{id}"), None)
        .assert_error(401, "unauthorized");
    relay
        .http
        .delete(&format!("/v1/threads/{}", &id[..8]), Some(&token))
        .assert_error(404, "not_found");
    relay
        .http
        .delete("/v1/threads/not%20an%20id", Some(&token))
        .assert_error(400, "bad_thread_id");

    let r = relay
        .http
        .delete(&format!("/v1/threads/{id}"), Some(&token));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["forgotten"]["messages"], 4, "{v}");
    assert_eq!(v["forgotten"]["whole_threads"], 1, "{v}");
    relay
        .http
        .delete(&format!("/v1/threads/{id}"), Some(&token))
        .assert_error(404, "not_found");

    // The extension replays its queue: every item is answered on its own, none is stored.
    let replay = relay.http.send_batch(&token, &gone);
    assert_eq!(replay["stored"], 0, "{replay}");
    assert_eq!(kit::statuses(&replay), vec!["duplicate"; 4], "{replay}");
    // A mixed batch: the new turn of the kept thread lands beside the refused replay.
    let mut mixed = gone.clone();
    mixed.push(turn_at(
        "browser-ext:chatgpt",
        "kept",
        Role::User,
        "one more about bread",
        Some(4),
        None,
        "2026-11-21T11:00:00Z",
    ));
    let v = relay.http.send_batch(&token, &mixed);
    assert_eq!(
        (v["stored"].as_u64(), v["duplicate"].as_u64()),
        (Some(1), Some(4)),
        "{v}"
    );

    // Gone from messages, FTS, vectors, the read API and search.
    assert_eq!(
        count(
            &db,
            &format!("SELECT count(*) FROM messages WHERE content LIKE '%{SECRET}%'")
        ),
        0
    );
    assert_eq!(
        count(
            &db,
            &format!("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH '{SECRET}'")
        ),
        0
    );
    assert_eq!(
        count(
            &db,
            &format!("SELECT count(*) FROM threads WHERE id = '{id}'")
        ),
        0
    );
    wait_for("the new turn embedded", || {
        count(
            &db,
            "SELECT count(*) FROM search_vec_state WHERE kind = 'message'",
        ) == 5
    });
    assert_eq!(count(&db, "SELECT count(*) FROM messages_vec_384"), 5);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM search_vec_state s WHERE s.kind = 'message' AND s.pk NOT IN (SELECT pk FROM messages)"
        ),
        0
    );
    relay
        .http
        .get(&format!("/v1/threads/{id}"), Some(&token))
        .assert_error(404, "not_found");
    let q = relay
        .http
        .get(&format!("/v1/query?q={SECRET}"), Some(&token));
    assert_eq!(q.status, 200, "{}", q.body);
    let hits = q.json()["hits"].to_string();
    assert!(!hits.contains(SECRET) && !hits.contains(&id), "{hits}");
    let raw = std::fs::read(&db).unwrap();
    assert!(
        !raw.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
        "content left in the file"
    );

    // The next export removes the thread's file and rewrites the changed one.
    let r = cli(&db, &["export", "--out", out.to_str().unwrap(), "--json"]).json();
    assert_eq!(
        (r["written"].as_u64(), r["removed"].as_u64()),
        (Some(1), Some(1)),
        "{r}"
    );
    assert!(!files(&out).iter().any(|(_, c)| c.contains(SECRET)));

    // `personkit forget` beside the running relay: counts first, refused without --yes when nobody can answer.
    let no = cli(&db, &["forget", "--surface", "browser-ext:chatgpt"]);
    assert!(!no.status.success());
    assert!(
        no.stderr.contains("5 messages") && no.stderr.contains("--yes"),
        "{}",
        no.stderr
    );
    let dry = cli(
        &db,
        &[
            "forget",
            "--surface",
            "browser-ext:chatgpt",
            "--dry-run",
            "--json",
        ],
    )
    .json();
    assert_eq!(dry["matched"]["messages"], 5, "{dry}");
    assert_eq!(count(&db, "SELECT count(*) FROM messages"), 5);
    let done = cli(
        &db,
        &[
            "forget",
            "--surface",
            "browser-ext:chatgpt",
            "--since",
            "2026-11-21T10:00:02Z",
            "--yes",
            "--json",
        ],
    )
    .json();
    assert_eq!(done["forgotten"]["messages"], 3, "{done}");
    assert_eq!(done["forgotten"]["whole_threads"], 0, "{done}");
    let replay = relay.http.send_batch(&token, &kept);
    assert_eq!(kit::statuses(&replay), vec!["duplicate"; 4], "{replay}");
    assert_eq!(count(&db, "SELECT count(*) FROM messages"), 2);
}

#[test]
fn snapshot_and_restore_through_the_cli() {
    let (tmp, db) = kit::temp_db();
    let relay = Relay::start(&db, &[]);
    let token = relay.pair_printed("snap-test");
    relay
        .http
        .send_batch(&token, &turns("one", "snapshots", "2026-11-20"));
    relay
        .http
        .send_batch(&token, &turns("two", "restores", "2026-11-21"));
    drop(relay);
    let snap = tmp.path().join("corpus.snapshot.jsonl");
    let out = cli(
        &db,
        &["corpus", "snapshot", "--out", snap.to_str().unwrap()],
    );
    out.ok();
    assert!(
        out.stderr.contains("made a snapshot signing key"),
        "{}",
        out.stderr
    );
    let key_path = db.parent().unwrap().join(".dotperson/snapshot-signing.key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let public = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("signed with key "))
        .unwrap()
        .to_owned();

    // Restore into an empty corpus, snapshot again: the same bytes.
    let db2 = tmp.path().join("restored.db");
    let r = cli(
        &db2,
        &[
            "corpus",
            "restore",
            snap.to_str().unwrap(),
            "--db",
            db2.to_str().unwrap(),
            "--json",
        ],
    )
    .json();
    assert_eq!(r["key"], public.as_str(), "{r}");
    let snap2 = tmp.path().join("again.jsonl");
    cli(
        &db2,
        &[
            "corpus",
            "snapshot",
            "--out",
            snap2.to_str().unwrap(),
            "--db",
            db2.to_str().unwrap(),
        ],
    )
    .ok();
    assert_eq!(
        std::fs::read(&snap).unwrap(),
        std::fs::read(&snap2).unwrap()
    );
    // Not into a corpus that has rows.
    let again = cli(
        &db2,
        &[
            "corpus",
            "restore",
            snap.to_str().unwrap(),
            "--db",
            db2.to_str().unwrap(),
        ],
    );
    assert!(
        !again.status.success() && again.stderr.contains("not empty"),
        "{}",
        again.stderr
    );

    // One flipped byte: refused, and the target corpus is never created.
    let mut bytes = std::fs::read(&snap).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x04;
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(&bad, &bytes).unwrap();
    let db3 = tmp.path().join("never.db");
    let e = cli(
        &db3,
        &[
            "corpus",
            "restore",
            bad.to_str().unwrap(),
            "--db",
            db3.to_str().unwrap(),
        ],
    );
    assert!(
        !e.status.success() && e.stderr.contains("refused"),
        "{}",
        e.stderr
    );
    assert!(!db3.exists());

    // Another machine (no key of its own) needs --trust with the key the snapshot printed; the refusal says
    // what trusting means and does not hand out the signer's key ready to paste.
    let other = tempfile::tempdir().unwrap();
    let db4 = other.path().join("corpus.db");
    let e = cli(&db4, &["corpus", "restore", snap.to_str().unwrap()]);
    assert!(
        !e.status.success()
            && e.stderr.contains("trust it only if it is your own")
            && !e.stderr.contains(public.as_str()),
        "{}",
        e.stderr
    );
    assert!(!db4.exists());
    cli(
        &db4,
        &[
            "corpus",
            "restore",
            snap.to_str().unwrap(),
            "--trust",
            &public,
        ],
    )
    .ok();
    let h = cli(&db4, &["corpus", "health", "--json"]).json();
    assert!(h.to_string().contains("messages"), "{h}");
    assert_eq!(count(&db4, "SELECT count(*) FROM messages"), 8);
}
