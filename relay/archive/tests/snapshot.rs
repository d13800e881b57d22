//! Snapshots: snapshot → restore into an empty corpus → snapshot gives the same bytes; any change to the file
//! (a flipped byte anywhere, a cut, reordered lines) or an unknown signer is refused before anything is written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use personkit_archive::snapshot::{self, SnapshotError, read_verified};
use personkit_store::Connection;
use personkit_store::{archive, graph, memory, proposals};
use serde_json::json;

fn sample(conn_path: &std::path::Path) -> Connection {
    let threads: Vec<common::ThreadSpec> = serde_json::from_value(json!([
        {"surface": "browser-ext:chatgpt", "conversation": "s1", "title": "Snapshot «one»", "url": "https://chatgpt.com/c/s1",
         "turns": [
            {"role": "user", "content": "hello\nwith \"quotes\" and \\ and \u{1F600}", "ordinal": 0, "captured_at": "2026-11-20T09:00:00Z"},
            {"role": "assistant", "content": "answer one", "ordinal": 1, "captured_at": "2026-11-20T09:00:05Z"},
            {"role": "assistant", "content": "answer two (regenerated)", "ordinal": 1, "captured_at": "2026-11-20T09:02:05Z"},
            {"role": "user", "content": "keyed", "message_key": "m-9", "captured_at": "2026-11-20T09:03:00Z"},
            {"role": "assistant", "content": "The capital is Canberra.", "message_key": "m-10", "ordinal": 3, "captured_at": "2026-11-20T09:03:05Z"},
            {"role": "assistant", "content": "The capital is **Canberra**.", "message_key": "m-10", "parent_key": "m-9", "path": "network", "ordinal": 3, "captured_at": "2026-11-20T09:03:06Z"}
         ]},
        {"surface": "browser-ext:claude", "conversation": "s2", "turns": [
            {"role": "user", "content": "to be forgotten", "ordinal": 0, "captured_at": "2026-11-21T09:00:00Z"},
            {"role": "assistant", "content": "stays", "ordinal": 1, "captured_at": "2026-11-21T09:00:01Z"}
         ]}
    ]))
    .unwrap();
    let mut conn = common::corpus(conn_path, &threads);
    // Memory versions travel: a short one that drew on both threads (withdrawn by the forget below), a mid one
    // made from it that drew on the first only, and a profile version.
    let t1 = personkit_shared::ids::thread_id("browser-ext:chatgpt", "s1").to_string();
    let t1_for_graph = t1.clone();
    let t = personkit_shared::ids::thread_id("browser-ext:claude", "s2").to_string();
    let made = common::now() - time::Duration::days(1);
    let short = memory::insert(
        &conn,
        &memory::NewVersion {
            tier: "short".into(),
            body: "## Friday\n- Snapshot «one»: hello\n- to be forgotten".into(),
            tokens: 12,
            covers_from: Some("2026-11-20T00:00:00.000Z".into()),
            covers_to: Some("2026-11-22T00:00:00.000Z".into()),
            sources: vec![t1.clone(), t.clone()],
            ..Default::default()
        },
        made,
    )
    .unwrap();
    memory::insert(
        &conn,
        &memory::NewVersion {
            tier: "mid".into(),
            body: "Planning a trip to Canberra.".into(),
            tokens: 6,
            model: Some("qwen2.5:7b".into()),
            prompt_version: Some("mid-1".into()),
            based_on: vec![short.id.clone()],
            sources: vec![t1],
            ..Default::default()
        },
        made + time::Duration::hours(1),
    )
    .unwrap();
    memory::insert(
        &conn,
        &memory::NewVersion {
            tier: "profile".into(),
            body: "I write Rust and prefer short answers.".into(),
            tokens: 9,
            ..Default::default()
        },
        made,
    )
    .unwrap();
    // The graph travels with its links' sources, a dismissed merge, and a name a model proposed that the user
    // rejected (with the turn it was found in).
    let m1: String = conn
        .query_row(
            "SELECT id FROM messages WHERE content = 'answer one'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let now = common::now();
    let src = graph::Source {
        kind: graph::SourceKind::Message,
        id: m1.clone(),
        how: graph::How::Model,
        confidence: 0.7,
        seen_at: "2026-11-20T09:00:05.000Z".into(),
    };
    let ada = graph::upsert_entity(&conn, "person", "Ada", "ada", now).unwrap();
    let adah = graph::upsert_entity(&conn, "person", "Adah", "adah", now).unwrap();
    for e in [&ada, &adah] {
        graph::add_entity_source(&conn, e, &src, now).unwrap();
    }
    graph::add_relation(&conn, &ada, "about", &adah, &src, now).unwrap();
    let r = |id: &str, name: &str| graph::EntityRef {
        id: id.to_owned(),
        kind: "person".into(),
        name: name.into(),
    };
    graph::propose_merge(
        &conn,
        &r(&ada, "Ada"),
        &r(&adah, "Adah"),
        0.4285714285714286,
        now,
    )
    .unwrap();
    graph::dismiss(&conn, &ada, &adah, now).unwrap();
    let (proposal, _) = proposals::propose(
        &conn,
        &proposals::Mention {
            kind: "place",
            name: "Canberra",
            key: "canberra",
            confidence: 0.9,
            model: "qwen2.5:7b",
            message_id: &m1,
            thread_id: &t1_for_graph,
            seen_at: "2026-11-20T09:00:05.000Z",
        },
        now,
    )
    .unwrap();
    proposals::decide(&conn, &proposal, proposals::State::Rejected, None, now).unwrap();
    // A tombstone travels too.
    personkit_store::forget::forget(
        &mut conn,
        &personkit_store::forget::Selection {
            thread: Some(t),
            since: None,
            until: Some("2026-11-21T09:00:00.500Z".into()),
            surface: None,
        },
        common::now(),
    )
    .unwrap();
    conn
}

fn snap(conn: &Connection, key: &ed25519_dalek::SigningKey) -> Vec<u8> {
    let mut out = Vec::new();
    snapshot::write(conn, key, &mut out, |_| {}).unwrap();
    out
}

fn key(seed: u8) -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[seed; 32])
}

#[test]
fn snapshot_restore_snapshot_is_byte_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let conn = sample(&tmp.path().join("a.db"));
    let k = key(7);
    let first = snap(&conn, &k);
    let text = String::from_utf8(first.clone()).unwrap();
    assert!(
        text.contains("\"t\":\"forgotten_messages\""),
        "tombstones travel"
    );
    assert!(
        !text.contains("to be forgotten"),
        "forgotten content does not"
    );
    assert!(
        text.contains("answer one") && text.contains("answer two"),
        "every revision"
    );
    assert!(
        text.contains("\"t\":\"message_renderings\"")
            && text.contains("The capital is **Canberra**.")
            && text.contains("\"source_path\":\"network\""),
        "a turn upgraded from its DOM rendering travels with its source form and the folded rendering's hash"
    );
    assert!(
        text.contains("\"t\":\"memory_versions\"")
            && text.contains("\"t\":\"memory_sources\"")
            && text.contains("I write Rust and prefer short answers.")
            && text.contains("Planning a trip to Canberra."),
        "memory versions travel with their sources, the profile's too"
    );
    assert!(
        !text.contains("\"t\":\"memory_state\""),
        "a tier's run state is this machine's"
    );
    assert!(
        !text.contains("- to be forgotten"),
        "a version that drew on a forgotten thread travels withdrawn"
    );
    // Deterministic: the same corpus twice gives the same bytes.
    assert_eq!(first, snap(&conn, &k));

    let v = read_verified(&first, &[k.verifying_key()]).unwrap();
    let mut restored = personkit_store::db::open(&tmp.path().join("b.db")).unwrap();
    archive::restore(&mut restored, &v.records, 2, |_| {}).unwrap();
    let second = snap(&restored, &k);
    assert_eq!(String::from_utf8(second).unwrap(), text);

    // The restored corpus is searchable (FTS filled) and refuses a second restore.
    let hits: u64 = restored
        .query_row(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'regenerated'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(hits, 1);
    // Memory reads back as it was: the withdrawn short version, the current mid one and the profile.
    assert!(memory::latest(&restored, "short").unwrap().is_none());
    let short = memory::versions(&restored, "short", 10, None).unwrap();
    assert_eq!(short.len(), 1);
    assert!(short[0].withdrawn_at.is_some() && short[0].body.is_empty());
    assert_eq!(memory::sources(&restored, &short[0].id).unwrap().len(), 2);
    let mid = memory::latest(&restored, "mid").unwrap().unwrap();
    assert_eq!(mid.based_on, vec![short[0].id.clone()]);
    assert_eq!(mid.model.as_deref(), Some("qwen2.5:7b"));
    assert_eq!(
        memory::latest(&restored, "profile").unwrap().unwrap().body,
        "I write Rust and prefer short answers."
    );
    // The graph came back with its sources, so forgetting the turn that alone supported two people and their
    // relation removes them (and the rejected proposal found in it) on the restored corpus too.
    for t in [
        "entity_sources",
        "relation_sources",
        "entity_merge_candidates",
        "entity_proposals",
        "entity_proposal_sources",
    ] {
        assert!(text.contains(&format!("\"t\":\"{t}\"")), "{t} travels");
    }
    let count = |c: &Connection, table: &str| -> i64 {
        c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(count(&restored, "entities"), 2);
    assert_eq!(
        proposals::list(&restored, proposals::State::Rejected, 10).unwrap()[0].name,
        "Canberra"
    );
    let mut scratch = personkit_store::db::open(&tmp.path().join("c.db")).unwrap();
    archive::restore(&mut scratch, &v.records, 2, |_| {}).unwrap();
    personkit_store::forget::forget(
        &mut scratch,
        &personkit_store::forget::Selection {
            thread: Some(personkit_shared::ids::thread_id("browser-ext:chatgpt", "s1").to_string()),
            ..Default::default()
        },
        common::now(),
    )
    .unwrap();
    for table in [
        "entities",
        "relations",
        "entity_sources",
        "entity_proposals",
    ] {
        assert_eq!(count(&scratch, table), 0, "{table} after the forget");
    }
    let e = archive::restore(&mut restored, &v.records, 2, |_| {}).unwrap_err();
    assert!(e.to_string().contains("not empty"), "{e}");
}

fn refused(bytes: &[u8], trusted: &[ed25519_dalek::VerifyingKey]) -> String {
    match read_verified(bytes, trusted) {
        Ok(_) => panic!("a changed snapshot was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn any_change_to_the_file_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let conn = sample(&tmp.path().join("a.db"));
    let k = key(9);
    let good = snap(&conn, &k);
    let trusted = [k.verifying_key()];
    read_verified(&good, &trusted).unwrap();

    // One flipped bit at many places: the header, records, the signature line, the final line break.
    let n = good.len();
    let mut positions: Vec<usize> = vec![
        0,
        5,
        20,
        n / 3,
        n / 2,
        2 * n / 3,
        n - 80,
        n - 30,
        n - 2,
        n - 1,
    ];
    positions.extend((0..n).step_by(n / 40 + 1));
    for p in positions {
        for bit in [0x01u8, 0x20, 0x80] {
            let mut b = good.clone();
            b[p] ^= bit;
            let e = refused(&b, &trusted);
            assert!(e.contains("refused"), "byte {p} bit {bit:#x}: {e}");
        }
    }
    // Cut short anywhere, or a byte added.
    for cut in [1, 2, 50, n / 2, n - 1] {
        refused(&good[..n - cut], &trusted);
    }
    let mut longer = good.clone();
    longer.extend_from_slice(b"{\"t\":\"threads\"}\n");
    refused(&longer, &trusted);
    // Two records swapped.
    let lines: Vec<&[u8]> = good.split_inclusive(|b| *b == b'\n').collect();
    let mut swapped = lines.clone();
    swapped.swap(2, 3);
    assert_ne!(swapped.concat(), good);
    refused(&swapped.concat(), &trusted);
    // A record removed (and the count in the signature line left as it was).
    let mut fewer = lines.clone();
    fewer.remove(3);
    refused(&fewer.concat(), &trusted);
}

#[test]
fn an_unknown_signer_needs_trust() {
    let tmp = tempfile::tempdir().unwrap();
    let conn = sample(&tmp.path().join("a.db"));
    let theirs = key(1);
    let ours = key(2);
    let b = snap(&conn, &theirs);
    match read_verified(&b, &[ours.verifying_key()]) {
        Err(e @ SnapshotError::UnknownKey(_)) => {
            let SnapshotError::UnknownKey(k) = &e else {
                unreachable!()
            };
            assert_eq!(*k, snapshot::public_hex(&theirs));
            // The message says what trusting means and where one's own key is shown, and hands out no
            // paste-ready key: the signer's key could be anyone's.
            let msg = e.to_string();
            assert!(!msg.contains(k.as_str()), "{msg}");
            assert!(msg.contains(&k[..16]), "{msg}");
            assert!(msg.contains("trust it only if it is your own"), "{msg}");
            assert!(msg.contains("personkit corpus snapshot"), "{msg}");
        }
        other => panic!("expected an unknown key, got {other:?}"),
    }
    read_verified(&b, &[ours.verifying_key(), theirs.verifying_key()]).unwrap();
    // A file re-signed by another key with the header's key left alone does not verify.
    let text = String::from_utf8(b.clone()).unwrap();
    let forged = snap(&conn, &ours);
    let forged_trailer = String::from_utf8(forged)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .to_owned();
    let mut mixed: Vec<&str> = text.lines().collect();
    *mixed.last_mut().unwrap() = &forged_trailer;
    let mixed = format!("{}\n", mixed.join("\n"));
    refused(
        mixed.as_bytes(),
        &[ours.verifying_key(), theirs.verifying_key()],
    );
}

#[test]
fn a_signing_key_is_made_once_with_mode_0600() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("conf/snapshot-signing.key");
    let (k1, made) = snapshot::load_or_create_key(&p).unwrap();
    assert!(made);
    let (k2, made) = snapshot::load_or_create_key(&p).unwrap();
    assert!(!made);
    assert_eq!(k1.to_bytes(), k2.to_bytes());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    std::fs::write(&p, "not a key").unwrap();
    assert!(snapshot::load_or_create_key(&p).is_err());
}
