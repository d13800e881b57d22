//! The turn-identity test vectors (docs/wire-format.md, "Turn identity") through the store library: each
//! submission is its own batch on a real SQLite corpus; statuses and the stored rows must be the vectors'.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_store::ingest::{Origin, ingest_batch};
use personkit_store::migrations::MIGRATIONS;
use personkit_store::read::corpus::thread_renderings;
use personkit_store::{Connection, db};
use personkit_testkit::identity::{self, Expect};
use time::macros::datetime;

fn origin() -> Origin {
    Origin {
        device_id: "dev-vec".into(),
    }
}

fn rows(conn: &Connection, thread_id: &str) -> Vec<Expect> {
    identity::actual(
        thread_renderings(conn, thread_id)
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
    )
}

#[test]
fn every_vector_through_the_library() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = db::open(&dir.path().join("c.db")).unwrap();
    let now = datetime!(2026-11-23 12:00:00 UTC);
    let v = identity::load();
    for case in &v.cases {
        for (i, s) in case.submit.iter().enumerate() {
            let item = s.observation(&case.conversation());
            let r = ingest_batch(&mut conn, &origin(), &[item], now).unwrap();
            let status = serde_json::to_value(r.results[0].status).unwrap();
            assert_eq!(
                status,
                s.expect.as_str(),
                "{}: submission {i}: {r:?}",
                case.name
            );
        }
        assert_eq!(
            rows(&conn, &case.thread_id()),
            case.expected(),
            "case {}",
            case.name
        );
    }
    // Every submission again, in one batch per case: nothing changes.
    for case in &v.cases {
        let items: Vec<_> = case
            .submit
            .iter()
            .map(|s| s.observation(&case.conversation()))
            .collect();
        let r = ingest_batch(&mut conn, &origin(), &items, now).unwrap();
        assert_eq!(r.stored, 0, "{}: replay stored something: {r:?}", case.name);
        assert_eq!(
            rows(&conn, &case.thread_id()),
            case.expected(),
            "replay of {}",
            case.name
        );
    }
}

#[test]
fn an_upgrade_keeps_the_message_id_and_leaves_one_searchable_text() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = db::open(&dir.path().join("c.db")).unwrap();
    let now = datetime!(2026-11-23 12:00:00 UTC);
    let case = identity::load()
        .cases
        .into_iter()
        .find(|c| c.name == "dom_then_network_same_id")
        .unwrap();
    let conv = case.conversation();
    let first = ingest_batch(
        &mut conn,
        &origin(),
        &[case.submit[0].observation(&conv)],
        now,
    )
    .unwrap();
    let second = ingest_batch(
        &mut conn,
        &origin(),
        &[case.submit[1].observation(&conv)],
        now,
    )
    .unwrap();
    assert_eq!(first.results[0].message_id, second.results[0].message_id);
    // FTS follows the new text: the row is found once, with the source form's text.
    let found: Vec<String> = conn
        .prepare(
            "SELECT m.content FROM messages_fts f JOIN messages m ON m.pk = f.rowid WHERE messages_fts MATCH 'Canberra'",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(found, ["The capital is **Canberra**.\n\n* chosen in 1908"]);
}

/// A corpus written at schema 9 (before turn identity): a DOM turn keyed the old way and an imported turn. After
/// migrating, the import is an export rendering, the DOM turn a DOM one, and a network rendering upgrades it.
#[test]
fn a_corpus_from_the_previous_schema_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let dom = personkit_testkit::thread_id("browser-ext:chatgpt", "old-conv");
    let imp = personkit_testkit::thread_id("import:chatgpt", "old-conv");
    {
        db::register_sqlite_vec();
        let conn = Connection::open(&path).unwrap();
        for m in MIGRATIONS.iter().filter(|m| m.version <= 9) {
            conn.execute_batch(m.sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 9).unwrap();
        let t = "2026-11-01T10:00:00.000Z";
        for (id, surface) in [(&dom, "browser-ext:chatgpt"), (&imp, "import:chatgpt")] {
            conn.execute(
                "INSERT INTO threads(id, surface, conversation_id, first_seen_at, last_seen_at, origin_device, origin_seq)
                 VALUES (?1, ?2, 'old-conv', ?3, ?3, 'old', 1)",
                (id, surface, t),
            )
            .unwrap();
        }
        let insert = |thread: &str, content: &str, key: &str, seq: i64| {
            let hash = personkit_shared::content_hash(content, personkit_shared::wire::Role::User);
            let id = personkit_shared::message_id(&uuid::Uuid::parse_str(thread).unwrap(), &hash)
                .hyphenated()
                .to_string();
            conn.execute(
                "INSERT INTO messages(id, thread_id, role, content, content_hash, message_key, ordinal, position_key,
                    captured_at, received_at, origin_device, origin_seq)
                 VALUES (?1, ?2, 'user', ?3, ?4, ?5, 0, 'k:' || ?5, ?6, ?6, 'old', ?7)",
                (id, thread, content, hash, key, t, seq),
            )
            .unwrap();
        };
        insert(&dom, "Sort a dict by value", "conversation-turn-1", 2);
        insert(&imp, "An imported question", "imp-1", 3);
    }
    let mut conn = db::open(&path).unwrap();
    let paths = |conn: &Connection, t: &str| -> Vec<String> {
        thread_renderings(conn, t)
            .unwrap()
            .into_iter()
            .map(|r| r.source_path)
            .collect()
    };
    assert_eq!(paths(&conn, &dom), ["dom"]);
    assert_eq!(paths(&conn, &imp), ["export"]);
    // The old DOM key is no proof of a different turn: the network rendering with the site's id upgrades it.
    let case = identity::load()
        .cases
        .into_iter()
        .find(|c| c.name == "older_dom_positional_key_meets_the_site_id")
        .unwrap();
    let now = datetime!(2026-11-23 12:00:00 UTC);
    let r = ingest_batch(
        &mut conn,
        &origin(),
        &[case.submit[1].observation("old-conv")],
        now,
    )
    .unwrap();
    assert_eq!(r.stored, 1, "{r:?}");
    let after = thread_renderings(&conn, &dom).unwrap();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0].content, "Sort a `dict` by value");
    assert_eq!(after[0].source_path, "network");
    assert_eq!(after[0].revision, 1);
    assert_eq!(after[0].folded, 1);
    // The old DOM text resent: a duplicate.
    let old = ingest_batch(
        &mut conn,
        &origin(),
        &[case.submit[0].observation("old-conv")],
        now,
    )
    .unwrap();
    assert_eq!(old.duplicate, 1, "{old:?}");
}

/// A forgotten turn stays forgotten under all its names: the rendering folded into it, the site's id, and a new
/// text under that id.
#[test]
fn forgetting_a_turn_forgets_its_renderings_and_its_site_id() {
    use personkit_store::forget::{Selection, forget};
    let dir = tempfile::tempdir().unwrap();
    let mut conn = db::open(&dir.path().join("c.db")).unwrap();
    let now = datetime!(2026-11-23 12:00:00 UTC);
    let case = identity::load()
        .cases
        .into_iter()
        .find(|c| c.name == "dom_then_network_same_id")
        .unwrap();
    let conv = case.conversation();
    for s in &case.submit[..2] {
        ingest_batch(&mut conn, &origin(), &[s.observation(&conv)], now).unwrap();
    }
    let sel = Selection {
        thread: Some(case.thread_id()),
        ..Selection::default()
    };
    assert_eq!(forget(&mut conn, &sel, now).unwrap().messages, 1);
    let mut edited = case.submit[1].observation(&conv);
    let text = "The capital is **Canberra** (since 1913).";
    edited["turn"]["content"] = text.into();
    edited["turn"]["content_hash"] =
        personkit_shared::content_hash(text, personkit_shared::wire::Role::Assistant).into();
    let items = [
        case.submit[0].observation(&conv),
        case.submit[1].observation(&conv),
        edited,
    ];
    let r = ingest_batch(&mut conn, &origin(), &items, now).unwrap();
    assert_eq!(r.duplicate, 3, "{r:?}");
    assert!(
        thread_renderings(&conn, &case.thread_id())
            .unwrap()
            .is_empty()
    );
}
