//! The turn-identity test vectors (docs/wire-format.md, "Turn identity") through a REAL relay over HTTP: every
//! submission is POSTed as its own batch with a paired device token, as the extension's DOM and network paths
//! and an importer would send it; the answers must be the vectors' statuses, the read API must show one turn per
//! expected current turn, and the corpus file must hold exactly the expected rows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_store::read::corpus::thread_renderings;
use personkit_testkit::identity;
use personkit_testkit::*;

#[test]
fn every_vector_through_a_real_relay() {
    let (_dir, db) = temp_db();
    let relay = Relay::start(&db, &["--rate-limit", "0"]);
    let token = relay.pair_printed("vectors");
    let v = identity::load();
    for case in &v.cases {
        for (i, s) in case.submit.iter().enumerate() {
            let r = relay
                .http
                .send_batch(&token, &[s.observation(&case.conversation())]);
            assert_eq!(
                statuses(&r),
                [s.expect.as_str()],
                "{}: submission {i}: {r}",
                case.name
            );
        }
        // The read API: the current turns, each once, with the older revisions beside them.
        let thread = relay
            .http
            .get(&format!("/v1/threads/{}", case.thread_id()), Some(&token));
        assert_eq!(thread.status, 200, "{}", thread.body);
        let t = thread.json();
        let mut shown: Vec<String> = t["turns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["content"].as_str().unwrap().to_owned())
            .collect();
        shown.sort();
        let mut current: Vec<String> = case
            .expected()
            .into_iter()
            .filter(|e| e.current)
            .map(|e| e.content)
            .collect();
        current.sort();
        assert_eq!(shown, current, "{}: {t}", case.name);
    }
    // The corpus file, read while the relay runs: every row as the vectors say.
    let conn = personkit_store::db::open_read_only(&db).unwrap();
    for case in &v.cases {
        let rows = identity::actual(
            thread_renderings(&conn, &case.thread_id())
                .unwrap()
                .into_iter()
                .map(|r| {
                    (
                        r.role,
                        r.content,
                        r.source_path,
                        r.message_key,
                        r.parent_key,
                        r.revision,
                        r.is_current,
                    )
                }),
        );
        assert_eq!(rows, case.expected(), "case {}", case.name);
    }
}

/// A relay keeps accepting wire v1 items: the documented example, and a v1 item of an import surface (an export
/// rendering by its surface), land as before.
#[test]
fn wire_v1_items_still_land() {
    let (_dir, db) = temp_db();
    let relay = Relay::start(&db, &["--rate-limit", "0"]);
    let token = relay.pair_printed("v1 client");
    let one = turn_at(
        "import:chatgpt",
        "v1-conv",
        personkit_shared::wire::Role::User,
        "an old client's turn",
        Some(0),
        Some("k1"),
        "2026-11-22T10:00:00Z",
    );
    assert!(one["turn"].get("path").is_none());
    let r = relay.http.send_batch(&token, std::slice::from_ref(&one));
    assert_eq!(statuses(&r), ["stored"], "{r}");
    let r = relay.http.send_batch(&token, &[one]);
    assert_eq!(statuses(&r), ["duplicate"], "{r}");
    let conn = personkit_store::db::open_read_only(&db).unwrap();
    let rows = thread_renderings(&conn, &thread_id("import:chatgpt", "v1-conv")).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].source_path, "export");
}
