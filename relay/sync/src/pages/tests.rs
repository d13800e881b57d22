#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use personkit_shared::identity::Path;
use personkit_shared::wire::{ClientInfo, Observation, build_observation};
use personkit_store::clock::fmt_time;
use personkit_store::forget::{Selection, forget};
use personkit_store::ingest::{Origin, ingest_observations};
use personkit_store::sync::canonical_dump;
use time::macros::datetime;

const NOW: OffsetDateTime = datetime!(2026-11-22 10:00:00 UTC);
/// `NOW` in the stored form, for merges run through the in-memory storage.
const AT: &str = "2026-11-22T10:00:00.000Z";

fn obs(conv: &str, text: &str, ord: u32, at: &str) -> Observation {
    let client = ClientInfo {
        app_version: "0.1.0".into(),
        device_id: "ext".into(),
    };
    let role = if ord.is_multiple_of(2) {
        Role::User
    } else {
        Role::Assistant
    };
    build_observation(
        "browser-ext:chatgpt",
        conv,
        role,
        text,
        Some(ord),
        None,
        at,
        client,
    )
}

fn corpus(name: &str) -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let conn = personkit_store::db::open(&dir.path().join(format!("{name}.db"))).unwrap();
    (dir, conn)
}

fn all_pages(conn: &Connection) -> Vec<Value> {
    let mut items = Vec::new();
    let mut after = 0;
    loop {
        let p = page(conn, after, 2).unwrap();
        items.extend(p.items);
        after = p.next;
        if !p.more {
            return items;
        }
    }
}

fn source() -> Source<'static> {
    Source {
        peer_id: "peer",
        pull_cursor: None,
    }
}

#[test]
fn pages_applied_twice_in_any_order_give_the_same_corpus_and_tombstones_win() {
    let (_d1, mut a) = corpus("a");
    let origin = Origin {
        device_id: "dev".into(),
    };
    let batch = vec![
        obs("x", "hello there", 0, "2026-11-20T09:00:00Z"),
        obs("x", "first answer", 1, "2026-11-20T09:01:00Z"),
        obs("x", "second answer", 1, "2026-11-21T09:01:00Z"),
        obs("y", "other thread", 0, "2026-11-20T09:00:00Z"),
    ];
    ingest_observations(&mut a, &origin, &batch, NOW).unwrap();
    let items = all_pages(&a);
    let (_d2, mut b) = corpus("b");
    let mut reversed = items.clone();
    reversed.reverse();
    // Threads must come with their messages: a reversed list still carries every thread.
    let r = apply_page(&mut b, &reversed, source(), NOW).unwrap();
    assert!(r.rejected.is_empty(), "{:?}", r.rejected);
    let again = apply_page(&mut b, &items, source(), NOW).unwrap();
    assert_eq!(again.stored, 0, "{again:?}");
    assert_eq!(canonical_dump(&a).unwrap(), canonical_dump(&b).unwrap());

    forget(&mut a, &Selection::thread(&batch[0].thread_id), NOW).unwrap();
    // B still sends the thread's messages; A's tombstones keep them out, and B applying A's feed forgets them.
    let from_b = all_pages(&b);
    let r = apply_page(&mut a, &from_b, source(), NOW).unwrap();
    assert_eq!(r.forgotten, 3, "{r:?}");
    apply_page(&mut b, &all_pages(&a), source(), NOW).unwrap();
    assert_eq!(canonical_dump(&a).unwrap(), canonical_dump(&b).unwrap());
    let left: i64 = b
        .query_row(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'answer'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0);
}

#[test]
fn hostile_items_are_rejected_one_by_one_and_the_rest_lands() {
    let (_d1, mut a) = corpus("a");
    let origin = Origin {
        device_id: "dev".into(),
    };
    ingest_observations(
        &mut a,
        &origin,
        &[obs("x", "good turn", 0, "2026-11-20T09:00:00Z")],
        NOW,
    )
    .unwrap();
    let good = all_pages(&a);
    let msg = good
        .iter()
        .find(|v| v["kind"] == "message")
        .unwrap()
        .clone();
    let thread = good.iter().find(|v| v["kind"] == "thread").unwrap().clone();
    let mut tampered = msg.clone();
    tampered["content"] = "changed text".into();
    let mut wrong_id = msg.clone();
    wrong_id["id"] = "00000000-0000-5000-8000-000000000000".into();
    let mut wrong_thread = thread.clone();
    wrong_thread["conversation_id"] = "other".into();
    let mut huge = msg.clone();
    huge["content"] = "x".repeat(MAX_CONTENT_BYTES + 1).into();
    let mut bad_time = msg.clone();
    bad_time["captured_at"] = "yesterday".into();
    let mut bad_rank = msg.clone();
    bad_rank["source_rank"] = 9.into();
    let mut orphan = msg.clone();
    orphan["thread_id"] = "11111111-1111-5111-8111-111111111111".into();
    let hostile = vec![
        serde_json::json!(42),
        serde_json::json!({"kind": "message"}),
        serde_json::json!({"kind": "bomb"}),
        tampered,
        wrong_id,
        wrong_thread,
        huge,
        bad_time,
        bad_rank,
        orphan,
        serde_json::json!({"kind": "tombstone", "id": "", "thread_id": "x", "forgotten_at": "z"}),
        thread,
        msg,
    ];
    let (_d2, mut b) = corpus("b");
    let r = apply_page(&mut b, &hostile, source(), NOW).unwrap();
    let codes: Vec<&str> = r.rejected.iter().map(|x| x.code).collect();
    assert_eq!(
        codes,
        vec![
            "unknown_kind",
            "malformed_item",
            "unknown_kind",
            "hash_mismatch",
            "id_mismatch",
            "id_mismatch",
            "invalid_content",
            "invalid_time",
            "invalid_path",
            "id_mismatch",
            "invalid_tombstone"
        ],
        "{r:?}"
    );
    assert_eq!(r.stored, 1, "the valid message beside them lands: {r:?}");
    assert_eq!(canonical_dump(&a).unwrap(), canonical_dump(&b).unwrap());
}

fn message_id(conn: &Connection, thread: &str) -> String {
    conn.query_row(
        "SELECT id FROM messages WHERE thread_id = ?1",
        [thread],
        |r| r.get(0),
    )
    .unwrap()
}

#[test]
fn a_tombstone_naming_another_thread_is_rejected_and_removes_nothing() {
    let (_d, mut a) = corpus("a");
    let origin = Origin {
        device_id: "dev".into(),
    };
    let batch = vec![
        obs("x", "keep this turn", 0, "2026-11-20T09:00:00Z"),
        obs("y", "other thread", 0, "2026-11-20T09:00:00Z"),
    ];
    ingest_observations(&mut a, &origin, &batch, NOW).unwrap();
    let (tx, ty) = (&batch[0].thread_id, &batch[1].thread_id);
    let victim = message_id(&a, tx);
    let at = fmt_time(NOW);
    let hash = "a".repeat(64);
    let tomb = |id: String, thread: &str| serde_json::json!({"kind": "tombstone", "id": id, "thread_id": thread, "forgotten_at": at});
    let page = vec![
        // The id of a message of x, said to be of y.
        tomb(victim.clone(), ty),
        // Prefixed ids name their own thread, which must be the tombstone's.
        tomb(format!("key:{tx}|site-1"), ty),
        tomb(format!("words:{tx}|user|{hash}"), ty),
        tomb("not-an-id".into(), ty),
        tomb(victim.to_uppercase(), tx),
        // Beside them, well-formed tombstones of y land.
        tomb(format!("key:{ty}|site-2"), ty),
        tomb(format!("words:{ty}|user|{hash}"), ty),
    ];
    let r = apply_page(&mut a, &page, source(), NOW).unwrap();
    let codes: Vec<(usize, &str)> = r.rejected.iter().map(|x| (x.index, x.code)).collect();
    assert_eq!(
        codes,
        vec![
            (1, "tombstone_thread_mismatch"),
            (2, "tombstone_thread_mismatch"),
            (3, "invalid_tombstone"),
            (4, "invalid_tombstone"),
            (0, "tombstone_thread_mismatch"),
        ],
        "{r:?}"
    );
    assert_eq!((r.removed, r.stored), (0, 2), "{r:?}");
    assert_eq!(message_id(&a, tx), victim, "the turn of x stays");
    let tombs: Vec<String> = a
        .prepare("SELECT id FROM forgotten_messages ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        tombs,
        vec![
            format!("key:{ty}|site-2"),
            format!("words:{ty}|user|{hash}")
        ]
    );
    // The same id with its own thread removes it.
    let r = apply_page(&mut a, &[tomb(victim.clone(), tx)], source(), NOW).unwrap();
    assert_eq!((r.removed, r.rejected.len()), (1, 0), "{r:?}");
    // And a tombstone of it naming another thread is refused, as the message's own one stays.
    let r = apply_page(&mut a, &[tomb(victim, ty)], source(), NOW).unwrap();
    assert_eq!(r.rejected[0].code, "tombstone_thread_mismatch", "{r:?}");

    // A message new here, with a tombstone of its id naming another thread in the same page: the message lands.
    let (_d2, mut b) = corpus("b");
    let mut items = all_pages(&a);
    let msg = items
        .iter()
        .find(|v| v["kind"] == "message")
        .unwrap()
        .clone();
    let id = msg["id"].as_str().unwrap().to_owned();
    items.insert(0, tomb(id.clone(), tx));
    let r = apply_page(&mut b, &items, source(), NOW).unwrap();
    assert_eq!(r.rejected[0].code, "tombstone_thread_mismatch", "{r:?}");
    assert_eq!(message_id(&b, ty), id);
}

#[test]
fn a_replayed_page_counts_as_unchanged_where_this_relay_saw_the_thread_later() {
    let origin = Origin {
        device_id: "dev".into(),
    };
    let (_d1, mut a) = corpus("a");
    let mut early = obs("x", "hello there", 0, "2026-11-20T09:00:00Z");
    early.title = Some("Old title".into());
    ingest_observations(
        &mut a,
        &origin,
        &[
            early.clone(),
            obs("x", "an answer", 1, "2026-11-20T09:01:00Z"),
            obs("z", "to forget", 0, "2026-11-20T09:00:00Z"),
        ],
        NOW,
    )
    .unwrap();
    let z = obs("z", "to forget", 0, "2026-11-20T09:00:00Z").thread_id;
    forget(&mut a, &Selection::thread(&z), NOW).unwrap();
    let (_d2, mut b) = corpus("b");
    let mut late = obs("x", "a later question", 2, "2026-11-21T09:00:00Z");
    late.title = Some("New title".into());
    ingest_observations(&mut b, &origin, &[late], NOW).unwrap();
    let page = all_pages(&a);
    assert!(page.iter().any(|v| v["kind"] == "tombstone"), "{page:?}");
    let first = apply_page(&mut b, &page, source(), NOW).unwrap();
    assert!(first.stored > 0 && first.rejected.is_empty(), "{first:?}");
    let dump = canonical_dump(&b).unwrap();
    let again = apply_page(&mut b, &page, source(), NOW).unwrap();
    assert_eq!(again.stored, 0, "{again:?}");
    assert!(again.unchanged >= 3, "messages and tombstones: {again:?}");
    assert_eq!(canonical_dump(&b).unwrap(), dump);
}

#[test]
fn a_pulled_page_moves_the_cursor_with_its_commit() {
    let (_d, mut b) = corpus("b");
    let token = personkit_store::sync::SyncToken::new("pks_x".into());
    personkit_store::sync::add_outgoing(&b, "relay-a", "laptop", "http://127.0.0.1:1", &token, NOW)
        .unwrap();
    let r = apply_page(
        &mut b,
        &[],
        Source {
            peer_id: "relay-a",
            pull_cursor: Some(17),
        },
        NOW,
    )
    .unwrap();
    assert_eq!(r, Applied::default());
    assert_eq!(
        personkit_store::sync::list_peers(&b).unwrap()[0].pull_cursor,
        17
    );
}

fn rendered(base: &Observation, path: Path, key: Option<&str>, text: &str) -> Observation {
    let mut o = base.clone();
    o.turn.path = Some(path);
    o.turn.message_key = key.map(str::to_owned);
    o.turn.content = text.to_owned();
    o.turn.content_hash = ids::content_hash(text, o.turn.role);
    o
}

fn count(conn: &Connection, sql: &str) -> u64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn a_sync_peer_cannot_bring_back_a_forgotten_turn_in_another_rendering() {
    let src = source();
    let origin = Origin {
        device_id: "d".into(),
    };
    let (_da, mut a) = corpus("a");
    let dom = obs("k", "The capital is Canberra", 1, "2026-11-22T09:00:00Z");
    ingest_observations(&mut a, &origin, std::slice::from_ref(&dom), NOW).unwrap();
    forget(&mut a, &Selection::thread(&dom.thread_id), NOW).unwrap();
    // Relay B only ever saw the site's Markdown of the same turn.
    let (_db, mut b) = corpus("b");
    let net = rendered(
        &dom,
        Path::Network,
        Some("m1"),
        "The capital is **Canberra**",
    );
    ingest_observations(&mut b, &origin, &[net], NOW).unwrap();
    let canberra = "SELECT count(*) FROM messages WHERE content LIKE '%Canberra%'";
    let from_b = page(&b, 0, 1000).unwrap();
    let r = apply_page(&mut a, &from_b.items, src, NOW).unwrap();
    assert_eq!(r.forgotten, 1, "{r:?}");
    assert_eq!(count(&a, canberra), 0);
    // A's tombstones reach B and remove its rendering.
    let from_a = page(&a, 0, 1000).unwrap();
    let r = apply_page(&mut b, &from_a.items, src, NOW).unwrap();
    assert_eq!(r.removed, 1, "{r:?}");
    assert_eq!(count(&b, canberra), 0);
}

#[test]
fn page_items_carry_exactly_the_fields_of_the_wire_format() {
    let (_d, mut a) = corpus("a");
    let origin = Origin {
        device_id: "dev".into(),
    };
    let batch = [obs("x", "hello there", 0, "2026-11-20T09:00:00Z")];
    ingest_observations(&mut a, &origin, &batch, NOW).unwrap();
    forget(&mut a, &Selection::thread(&batch[0].thread_id), NOW).unwrap();
    ingest_observations(
        &mut a,
        &origin,
        &[obs("y", "a kept turn", 0, "2026-11-20T09:00:00Z")],
        NOW,
    )
    .unwrap();
    let keys = |kind: &str| -> Vec<String> {
        let items = all_pages(&a);
        let item = items.iter().find(|v| v["kind"] == kind).unwrap();
        item.as_object().unwrap().keys().cloned().collect()
    };
    let sorted = |mut v: Vec<&str>| {
        v.sort_unstable();
        v.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    assert_eq!(
        keys("thread"),
        sorted(vec![
            "kind",
            "id",
            "surface",
            "conversation_id",
            "title",
            "url",
            "first_seen_at",
            "last_seen_at",
            "origin_device",
            "origin_seq"
        ])
    );
    assert_eq!(
        keys("message"),
        sorted(vec![
            "kind",
            "id",
            "thread_id",
            "role",
            "content",
            "content_hash",
            "message_key",
            "ordinal",
            "position_key",
            "occurred_at",
            "captured_at",
            "tool_calls",
            "source_path",
            "source_rank",
            "parent_key",
            "origin_device",
            "origin_seq",
            "provenance",
            "renderings"
        ])
    );
    assert_eq!(
        keys("tombstone"),
        sorted(vec!["kind", "id", "thread_id", "forgotten_at"])
    );
    personkit_store::memory::insert(
        &a,
        &personkit_store::memory::NewVersion {
            tier: "short".into(),
            body: "- a kept turn".into(),
            sources: vec![batch[0].thread_id.clone()],
            ..Default::default()
        },
        NOW,
    )
    .unwrap();
    assert_eq!(
        keys("memory"),
        sorted(vec![
            "kind",
            "id",
            "tier",
            "created_at",
            "body",
            "tokens",
            "model",
            "prompt_version",
            "covers_from",
            "covers_to",
            "based_on",
            "withdrawn_at",
            "origin_device",
            "origin_seq",
            "sources"
        ])
    );
}

// ---------------------------------------------------------------------------------------------------------------
// The merge rules on their own, and through a storage that is not SQLite.

fn thread_row(title: Option<&str>, first: &str, last: &str, origin: (&str, i64)) -> ThreadRow {
    ThreadRow {
        id: "t".into(),
        surface: "browser-ext:chatgpt".into(),
        conversation_id: "c".into(),
        title: title.map(str::to_owned),
        url: None,
        first_seen_at: first.into(),
        last_seen_at: last.into(),
        origin_device: origin.0.into(),
        origin_seq: origin.1,
    }
}

#[test]
fn merging_threads_keeps_the_later_title_and_the_widest_times_in_any_order() {
    let early = thread_row(Some("Old"), "2026-01-01", "2026-01-02", ("b", 1));
    let late = thread_row(Some("New"), "2026-01-03", "2026-01-04", ("a", 9));
    let untitled = thread_row(None, "2025-12-31", "2026-01-05", ("c", 0));
    let fold = |rows: &[&ThreadRow]| {
        let mut acc = rows[0].clone();
        for r in &rows[1..] {
            if let Some(m) = merge_thread(&acc, r) {
                acc = m;
            }
        }
        acc
    };
    let one = fold(&[&early, &late, &untitled]);
    assert_eq!(one, fold(&[&untitled, &late, &early]));
    assert_eq!(one, fold(&[&late, &untitled, &early]));
    assert_eq!(
        one.title.as_deref(),
        Some("New"),
        "a missing title never wins"
    );
    assert_eq!(
        (one.first_seen_at.as_str(), one.last_seen_at.as_str()),
        ("2025-12-31", "2026-01-05")
    );
    assert_eq!((one.origin_device.as_str(), one.origin_seq), ("a", 9));
    assert_eq!(
        merge_thread(&one, &early),
        None,
        "nothing new, nothing written"
    );
}

#[test]
fn merging_facts_keeps_the_earliest_capture_and_the_first_known_time() {
    let facts = |at: &str, occ: Option<&str>, dev: &str| TurnFacts {
        captured_at: at.into(),
        occurred_at: occ.map(str::to_owned),
        origin_device: dev.into(),
        origin_seq: 0,
    };
    let here = facts("2026-01-02", None, "b");
    let theirs = facts("2026-01-01", Some("2025-12-31"), "a");
    let m = merge_facts(&here, &theirs).unwrap();
    assert_eq!(m, facts("2026-01-01", Some("2025-12-31"), "a"));
    assert_eq!(merge_facts(&m, &here), None);
    assert_eq!(merge_facts(&m, &theirs), None);
}

/// An in-memory storage: rows in plain collections, every write logged. It stands in for SQLite to show that
/// every decision is the rules' (the store only answers and writes).
#[derive(Default)]
struct Memory {
    threads: HashMap<String, ThreadRow>,
    /// Index + 1 is the row number; `None` once removed.
    messages: Vec<Option<MessageRow>>,
    renderings: Vec<(String, String, i64)>,
    tombstones: HashMap<String, TombstoneRow>,
    versions: HashMap<String, MemoryRow>,
    due: BTreeSet<String>,
    events: HashMap<String, EventSyncRow>,
    merges: HashMap<(String, String), MergeRow>,
    proposals: HashMap<String, ProposalRow>,
    settle: BTreeSet<String>,
    writes: Vec<String>,
}

impl Memory {
    fn live(&self) -> impl Iterator<Item = (i64, &MessageRow)> {
        self.messages
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.as_ref().map(|m| (i as i64 + 1, m)))
    }
    fn turn(pk: i64, m: &MessageRow) -> StoredTurn {
        StoredTurn {
            pk,
            content_hash: m.content_hash.clone(),
            source_rank: m.source_rank,
            message_key: m.message_key.clone(),
            parent_key: m.parent_key.clone(),
            ordinal: m.ordinal,
            position_key: m.position_key.clone(),
            occurred_at: m.occurred_at.clone(),
            captured_at: m.captured_at.clone(),
            tool_calls: m.tool_calls.clone(),
            origin_device: m.origin_device.clone(),
            origin_seq: m.origin_seq,
        }
    }
    fn row(&mut self, pk: i64) -> &mut MessageRow {
        self.messages[(pk - 1) as usize].as_mut().unwrap()
    }
}

impl PageStore for Memory {
    type Error = std::convert::Infallible;
    fn head(&mut self) -> Result<i64, Self::Error> {
        Ok(self.writes.len() as i64)
    }
    fn thread(&mut self, id: &str) -> Result<Option<ThreadRow>, Self::Error> {
        Ok(self.threads.get(id).cloned())
    }
    fn insert_thread(&mut self, t: &ThreadRow) -> Result<(), Self::Error> {
        self.writes.push(format!("insert_thread {}", t.id));
        self.threads.insert(t.id.clone(), t.clone());
        Ok(())
    }
    fn update_thread(&mut self, t: &ThreadRow) -> Result<(), Self::Error> {
        self.writes.push(format!("update_thread {}", t.id));
        self.threads.insert(t.id.clone(), t.clone());
        Ok(())
    }
    fn turn_is_forgotten(&mut self, t: &Arriving<'_>) -> Result<bool, Self::Error> {
        Ok(self.tombstones.contains_key(t.message_id))
    }
    fn is_forgotten(&mut self, id: &str) -> Result<bool, Self::Error> {
        Ok(self.tombstones.contains_key(id))
    }
    fn stored_turn(
        &mut self,
        id: &str,
        thread_id: &str,
        hash: &str,
    ) -> Result<Option<StoredTurn>, Self::Error> {
        let by_id = self.live().find(|(_, m)| m.id == id);
        let by_hash = || {
            self.live()
                .find(|(_, m)| m.thread_id == thread_id && m.content_hash == hash)
        };
        let by_rendering = || {
            self.renderings
                .iter()
                .find(|(t, h, _)| t == thread_id && h == hash)
                .and_then(|(_, _, pk)| self.live().find(|(p, _)| p == pk))
        };
        Ok(by_id
            .or_else(by_hash)
            .or_else(by_rendering)
            .map(|(pk, m)| Memory::turn(pk, m)))
    }
    fn replace_text(&mut self, pk: i64, m: &MessageRow) -> Result<(), Self::Error> {
        self.writes.push(format!("replace_text {pk}"));
        let old = self.row(pk).clone();
        self.renderings
            .push((old.thread_id.clone(), old.content_hash.clone(), pk));
        *self.row(pk) = MessageRow {
            id: old.id,
            captured_at: old.captured_at,
            origin_device: old.origin_device,
            origin_seq: old.origin_seq,
            provenance: old.provenance,
            renderings: Vec::new(),
            ..m.clone()
        };
        Ok(())
    }
    fn add_rendering(
        &mut self,
        thread_id: &str,
        hash: &str,
        pk: i64,
        _path: &str,
    ) -> Result<bool, Self::Error> {
        if self
            .renderings
            .iter()
            .any(|(t, h, _)| t == thread_id && h == hash)
        {
            return Ok(false);
        }
        self.writes.push(format!("add_rendering {pk}"));
        self.renderings
            .push((thread_id.to_owned(), hash.to_owned(), pk));
        Ok(true)
    }
    fn insert_message(&mut self, m: &MessageRow) -> Result<i64, Self::Error> {
        self.writes.push(format!("insert_message {}", m.id));
        self.messages.push(Some(MessageRow {
            renderings: Vec::new(),
            ..m.clone()
        }));
        Ok(self.messages.len() as i64)
    }
    fn set_facts(&mut self, pk: i64, f: &TurnFacts) -> Result<(), Self::Error> {
        self.writes.push(format!("set_facts {pk}"));
        let row = self.row(pk);
        row.captured_at = f.captured_at.clone();
        row.occurred_at = f.occurred_at.clone();
        row.origin_device = f.origin_device.clone();
        row.origin_seq = f.origin_seq;
        Ok(())
    }
    fn number_revisions(&mut self, _thread: &str, _pos: &str) -> Result<(), Self::Error> {
        Ok(())
    }
    fn known_in_other_thread(&mut self, id: &str, thread_id: &str) -> Result<bool, Self::Error> {
        Ok(self
            .live()
            .any(|(_, m)| m.id == id && m.thread_id != thread_id)
            || self
                .tombstones
                .get(id)
                .is_some_and(|t| t.thread_id != thread_id))
    }
    fn tombstone(&mut self, id: &str) -> Result<Option<TombstoneRow>, Self::Error> {
        Ok(self.tombstones.get(id).cloned())
    }
    fn put_tombstone(&mut self, t: &TombstoneRow) -> Result<(), Self::Error> {
        self.writes.push(format!("put_tombstone {}", t.id));
        self.tombstones.insert(t.id.clone(), t.clone());
        Ok(())
    }
    fn remove_named(&mut self, named: &[(String, String)]) -> Result<u64, Self::Error> {
        let mut removed = 0;
        for slot in &mut self.messages {
            if slot
                .as_ref()
                .is_some_and(|m| named.iter().any(|(id, t)| *id == m.id && *t == m.thread_id))
            {
                *slot = None;
                removed += 1;
            }
        }
        Ok(removed)
    }
    fn set_pull_cursor(&mut self, _peer: &str, _cursor: i64) -> Result<(), Self::Error> {
        Ok(())
    }
    fn skip_push_cursor(&mut self, _peer: &str, _head: i64) -> Result<(), Self::Error> {
        Ok(())
    }
    fn memory_version(&mut self, id: &str) -> Result<Option<StoredVersion>, Self::Error> {
        Ok(self.versions.get(id).map(|v| StoredVersion {
            tier: v.tier.clone(),
            withdrawn_at: v.withdrawn_at.clone(),
        }))
    }
    fn insert_memory_version(&mut self, v: &MemoryRow) -> Result<(), Self::Error> {
        self.writes.push(format!("insert_memory_version {}", v.id));
        self.versions.insert(v.id.clone(), v.clone());
        Ok(())
    }
    fn withdraw_memory_version(&mut self, id: &str, at: &str) -> Result<(), Self::Error> {
        self.writes.push(format!("withdraw_memory_version {id}"));
        if let Some(v) = self.versions.get_mut(id) {
            v.body.clear();
            v.withdrawn_at = Some(at.to_owned());
        }
        Ok(())
    }
    fn forgotten_since(&mut self, threads: &[String], at: &str) -> Result<bool, Self::Error> {
        Ok(self
            .tombstones
            .values()
            .any(|t| threads.contains(&t.thread_id) && t.forgotten_at.as_str() >= at))
    }
    fn mark_memory_due(&mut self, tier: &str) -> Result<(), Self::Error> {
        self.writes.push(format!("mark_memory_due {tier}"));
        self.due.insert(tier.to_owned());
        Ok(())
    }
    fn event_stored(&mut self, id: &str, hash: &str, bucket: i64) -> Result<bool, Self::Error> {
        Ok(self.events.contains_key(id)
            || self
                .events
                .values()
                .any(|e| e.content_hash == hash && e.minute_bucket == bucket))
    }
    fn insert_event(&mut self, e: &EventSyncRow) -> Result<(), Self::Error> {
        self.writes.push(format!("insert_event {}", e.id));
        self.events.insert(e.id.clone(), e.clone());
        Ok(())
    }
    fn merge_decision(&mut self, a: &str, b: &str) -> Result<Option<MergeRow>, Self::Error> {
        Ok(self.merges.get(&(a.to_owned(), b.to_owned())).cloned())
    }
    fn put_merge_decision(&mut self, m: &MergeRow) -> Result<(), Self::Error> {
        self.writes
            .push(format!("put_merge_decision {}|{}", m.a, m.b));
        self.merges.insert((m.a.clone(), m.b.clone()), m.clone());
        Ok(())
    }
    fn proposal(
        &mut self,
        id: &str,
        messages: &[&str],
    ) -> Result<Option<(ProposalRow, u64)>, Self::Error> {
        Ok(self.proposals.get(id).map(|p| {
            let all = p.sources.len() as u64;
            let mut row = p.clone();
            row.sources
                .retain(|s| messages.contains(&s.message_id.as_str()));
            (row, all)
        }))
    }
    fn put_proposal(&mut self, p: &ProposalRow) -> Result<(), Self::Error> {
        self.writes.push(format!("put_proposal {}", p.id));
        let entry = self
            .proposals
            .entry(p.id.clone())
            .or_insert_with(|| ProposalRow {
                sources: Vec::new(),
                ..p.clone()
            });
        entry.state = p.state.clone();
        entry.confidence = p.confidence;
        entry.decided_at = p.decided_at.clone();
        for s in &p.sources {
            match entry
                .sources
                .iter_mut()
                .find(|x| x.message_id == s.message_id)
            {
                Some(x) => x.confidence = x.confidence.max(s.confidence),
                None => entry.sources.push(s.clone()),
            }
        }
        entry
            .sources
            .sort_by(|x, y| x.message_id.cmp(&y.message_id));
        Ok(())
    }
    fn settle_proposal(&mut self, id: &str) -> Result<(), Self::Error> {
        self.settle.insert(id.to_owned());
        Ok(())
    }
    fn settle_proposals_of(&mut self, message_id: &str) -> Result<(), Self::Error> {
        let ids: Vec<String> = self
            .proposals
            .values()
            .filter(|p| {
                p.state == "approved" && p.sources.iter().any(|s| s.message_id == message_id)
            })
            .map(|p| p.id.clone())
            .collect();
        self.settle.extend(ids);
        Ok(())
    }
}

/// One turn of thread `c` as a page item: `text` read by `path`, captured at `at`; with `folded`, a DOM text
/// first stored for the turn (which keeps that text's id) and folded under it, as a peer that saw both sends it.
fn turn_item(text: &str, path: Path, at: &str, folded: Option<&str>) -> Value {
    let surface = "browser-ext:chatgpt";
    let thread = ids::thread_id(surface, "c");
    let hash = ids::content_hash(text, Role::Assistant);
    let first = folded.map(|f| ids::content_hash(f, Role::Assistant));
    let renderings: Vec<Value> = first
        .iter()
        .map(|h| serde_json::json!({"content_hash": h, "source_path": "dom"}))
        .collect();
    let id = ids::message_id(&thread, first.as_deref().unwrap_or(&hash));
    serde_json::json!({
        "kind": "message", "id": id.hyphenated().to_string(),
        "thread_id": thread.hyphenated().to_string(), "role": "assistant", "content": text,
        "content_hash": hash, "message_key": "m1", "ordinal": 1, "position_key": "k:m1",
        "occurred_at": null, "captured_at": at, "tool_calls": null, "source_path": path.as_str(),
        "source_rank": path.rank(), "parent_key": null, "origin_device": "dev", "origin_seq": 0,
        "provenance": null, "renderings": renderings,
    })
}

fn thread_item(title: &str, at: &str) -> Value {
    let surface = "browser-ext:chatgpt";
    serde_json::json!({
        "kind": "thread", "id": ids::thread_id(surface, "c").hyphenated().to_string(),
        "surface": surface, "conversation_id": "c", "title": title, "url": null,
        "first_seen_at": at, "last_seen_at": at, "origin_device": "dev", "origin_seq": 0,
    })
}

#[test]
fn the_merge_rules_run_through_the_page_store_trait_and_converge_in_any_order() {
    let dom_at = "2026-11-20T09:00:00.000Z";
    let net_at = "2026-11-21T09:00:00.000Z";
    let pages = [
        vec![
            thread_item("First", dom_at),
            turn_item("The capital is Canberra", Path::Dom, dom_at, None),
        ],
        vec![
            thread_item("Second", net_at),
            turn_item(
                "The capital is **Canberra**",
                Path::Network,
                net_at,
                Some("The capital is Canberra"),
            ),
        ],
    ];
    let apply_all = |order: &[usize]| {
        let mut mem = Memory::default();
        for &i in order {
            let applied = merge_page(&mut mem, check_items(&pages[i]), source(), AT).unwrap();
            assert!(applied.rejected.is_empty(), "{applied:?}");
        }
        mem
    };
    let forward = apply_all(&[0, 1]);
    let backward = apply_all(&[1, 0]);
    for mem in [&forward, &backward] {
        let kept: Vec<&MessageRow> = mem.live().map(|(_, m)| m).collect();
        assert_eq!(kept.len(), 1, "one turn, two renderings");
        // The network rendering ranks higher: it is kept, the DOM one folded under it, whatever came first.
        assert_eq!(kept[0].content, "The capital is **Canberra**");
        assert_eq!(kept[0].captured_at, dom_at, "the earliest capture");
        assert_eq!(mem.renderings.len(), 1);
        assert_eq!(
            mem.threads.values().next().unwrap().title.as_deref(),
            Some("Second")
        );
    }
    // The rules decided differently per order and the storage only did as told.
    assert!(forward.writes.iter().any(|w| w.starts_with("replace_text")));
    assert!(
        !backward
            .writes
            .iter()
            .any(|w| w.starts_with("replace_text"))
    );
    assert!(
        backward
            .writes
            .iter()
            .any(|w| w.starts_with("add_rendering"))
    );
    // A page seen again writes nothing.
    let mut again = apply_all(&[0, 1]);
    let before = again.writes.len();
    let applied = merge_page(&mut again, check_items(&pages[1]), source(), AT).unwrap();
    assert_eq!((applied.stored, applied.unchanged), (0, 1), "{applied:?}");
    assert_eq!(again.writes.len(), before, "{:?}", &again.writes[before..]);
}

#[test]
fn a_tombstone_through_the_trait_keeps_the_earliest_time_and_blocks_the_turn() {
    let at = "2026-11-20T09:00:00.000Z";
    let item = turn_item("The capital is Canberra", Path::Dom, at, None);
    let tomb = |when: &str| {
        serde_json::json!({"kind": "tombstone", "id": item["id"], "thread_id": item["thread_id"],
            "forgotten_at": when})
    };
    let mut mem = Memory::default();
    let first = merge_page(
        &mut mem,
        check_items(&[thread_item("T", at), item.clone()]),
        source(),
        AT,
    )
    .unwrap();
    assert_eq!(first.stored, 1);
    let r = merge_page(
        &mut mem,
        check_items(&[tomb("2026-11-23T00:00:00.000Z")]),
        source(),
        AT,
    )
    .unwrap();
    assert_eq!((r.stored, r.removed), (1, 1), "{r:?}");
    let r = merge_page(
        &mut mem,
        check_items(&[tomb("2026-11-22T00:00:00.000Z")]),
        source(),
        AT,
    )
    .unwrap();
    assert_eq!(r.stored, 1, "an earlier time wins: {r:?}");
    let r = merge_page(
        &mut mem,
        check_items(&[tomb("2026-11-24T00:00:00.000Z")]),
        source(),
        AT,
    )
    .unwrap();
    assert_eq!(
        (r.stored, r.unchanged),
        (0, 1),
        "a later time changes nothing: {r:?}"
    );
    let id = item["id"].as_str().unwrap();
    assert_eq!(mem.tombstones[id].forgotten_at, "2026-11-22T00:00:00.000Z");
    let r = merge_page(
        &mut mem,
        check_items(std::slice::from_ref(&item)),
        source(),
        AT,
    )
    .unwrap();
    assert_eq!(r.forgotten, 1, "the turn stays forgotten: {r:?}");
    assert_eq!(mem.live().count(), 0);
}

/// A memory version of `tier` as a page item, made at `at` by `origin` from `body`, drawing on `sources`.
fn memory_item(tier: &str, body: &str, at: &str, sources: &[&str]) -> Value {
    let id = personkit_store::memory::version_id(tier, at, "relay-a", body);
    serde_json::json!({
        "kind": "memory", "id": id, "tier": tier, "created_at": at, "body": body, "tokens": 3,
        "model": null, "prompt_version": null, "covers_from": null, "covers_to": null, "based_on": [],
        "withdrawn_at": null, "origin_device": "relay-a", "origin_seq": 7, "sources": sources,
    })
}

fn thread_of(conv: &str) -> String {
    ids::thread_id("browser-ext:chatgpt", conv)
        .hyphenated()
        .to_string()
}

#[test]
fn a_memory_version_gains_a_withdrawal_in_any_order_and_keeps_the_earliest_time() {
    let made = "2026-11-20T03:00:00.000Z";
    let item = memory_item("short", "## Friday\n- planning", made, &[&thread_of("x")]);
    let withdrawn = |at: &str| {
        let mut w = item.clone();
        w["body"] = "".into();
        w["withdrawn_at"] = at.into();
        w
    };
    let (early, late) = ("2026-11-21T00:00:00.000Z", "2026-11-22T00:00:00.000Z");
    let pages = [
        vec![item.clone()],
        vec![withdrawn(late)],
        vec![withdrawn(early)],
    ];
    let orders: [[usize; 3]; 6] = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders {
        let mut mem = Memory::default();
        for i in order {
            let r = merge_page(&mut mem, check_items(&pages[i]), source(), AT).unwrap();
            assert!(r.rejected.is_empty(), "{r:?}");
        }
        let v = &mem.versions[item["id"].as_str().unwrap()];
        assert_eq!(v.withdrawn_at.as_deref(), Some(early), "{order:?}");
        assert_eq!(v.body, "", "never un-withdrawn: {order:?}");
        // A version that was current here and is withdrawn by a peer puts its tier up for a run.
        assert_eq!(mem.due.contains("short"), order[0] == 0, "{order:?}");
    }
    // Seen again, nothing is written.
    let mut mem = Memory::default();
    for p in &pages {
        merge_page(&mut mem, check_items(p), source(), AT).unwrap();
    }
    let before = mem.writes.len();
    let r = merge_page(&mut mem, check_items(&pages[0]), source(), AT).unwrap();
    assert_eq!((r.stored, r.unchanged), (0, 1), "{r:?}");
    assert_eq!(mem.writes.len(), before);
    assert_eq!(merge_withdrawal(Some(early), Some(late)), None);
    assert_eq!(merge_withdrawal(None, None), None);
    assert_eq!(merge_withdrawal(Some(late), None), None);
}

#[test]
fn a_memory_version_of_a_thread_forgotten_here_since_it_was_made_arrives_withdrawn() {
    let thread = thread_of("x");
    let mut mem = Memory::default();
    mem.tombstones.insert(
        "m1".into(),
        TombstoneRow {
            id: "m1".into(),
            thread_id: thread.clone(),
            forgotten_at: "2026-11-21T00:00:00.000Z".into(),
        },
    );
    let before = memory_item(
        "short",
        "mentions x",
        "2026-11-20T03:00:00.000Z",
        &[&thread],
    );
    let after = memory_item(
        "short",
        "made later",
        "2026-11-22T03:00:00.000Z",
        &[&thread],
    );
    let other = memory_item(
        "mid",
        "other thread",
        "2026-11-20T03:30:00.000Z",
        &[&thread_of("y")],
    );
    let r = merge_page(
        &mut mem,
        check_items(&[before.clone(), after.clone(), other.clone()]),
        source(),
        AT,
    )
    .unwrap();
    assert_eq!(r.stored, 3, "{r:?}");
    let got = |item: &Value| mem.versions[item["id"].as_str().unwrap()].clone();
    let b = got(&before);
    assert_eq!((b.body.as_str(), b.withdrawn_at.as_deref()), ("", Some(AT)));
    assert_eq!(b.sources, vec![thread.clone()], "its sources are kept");
    assert!(got(&after).withdrawn_at.is_none(), "made after the forget");
    assert!(got(&other).withdrawn_at.is_none());
    assert_eq!(mem.due.iter().collect::<Vec<_>>(), vec!["short"]);
}

#[test]
fn hostile_memory_items_are_rejected_one_by_one_and_the_rest_lands() {
    let at = "2026-11-20T03:00:00.000Z";
    let good = memory_item("long", "who they are", at, &[&thread_of("x")]);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut v = good.clone();
        f(&mut v);
        v
    };
    let big = "x".repeat(MAX_MEMORY_BODY_BYTES + 1);
    let big_id = personkit_store::memory::version_id("long", at, "relay-a", &big);
    let many: Vec<String> = (0..=MAX_MEMORY_SOURCES)
        .map(|i| thread_of(&i.to_string()))
        .collect();
    let items = vec![
        with(&|v| v["tier"] = "weekly".into()),
        with(&|v| v["body"] = "changed".into()),
        with(&|v| {
            v["body"] = big.clone().into();
            v["id"] = big_id.clone().into();
        }),
        with(&|v| v["created_at"] = "2026-11-20 03:00".into()),
        with(&|v| v["withdrawn_at"] = at.into()),
        with(&|v| v["id"] = "ABC".into()),
        with(&|v| v["sources"] = serde_json::json!(["not-a-thread"])),
        with(&|v| v["sources"] = serde_json::json!(many)),
        with(&|v| v["based_on"] = serde_json::json!(["x"])),
        with(&|v| v["tokens"] = (-1).into()),
        with(&|v| v["extra"] = 1.into()),
        good.clone(),
    ];
    let mut mem = Memory::default();
    let r = merge_page(&mut mem, check_items(&items), source(), AT).unwrap();
    let codes: Vec<&str> = r.rejected.iter().map(|x| x.code).collect();
    assert_eq!(
        codes,
        vec![
            "invalid_memory",
            "id_mismatch",
            "invalid_content",
            "invalid_time",
            "invalid_memory",
            "invalid_memory",
            "invalid_memory",
            "invalid_memory",
            "invalid_memory",
            "invalid_memory",
            "malformed_item",
        ],
        "{r:?}"
    );
    assert_eq!(r.stored, 1, "{r:?}");
    assert_eq!(mem.versions.len(), 1);
    // A known id with another tier is refused, not merged.
    let mut other_tier = good.clone();
    other_tier["tier"] = "mid".into();
    other_tier["body"] = "".into();
    other_tier["withdrawn_at"] = at.into();
    let r = merge_page(&mut mem, check_items(&[other_tier]), source(), AT).unwrap();
    assert_eq!(r.rejected[0].code, "id_mismatch", "{r:?}");
    assert!(mem.versions.values().all(|v| v.withdrawn_at.is_none()));
}

#[test]
fn memory_versions_travel_and_forgetting_on_one_relay_withdraws_them_on_the_other() {
    let (_d1, mut a) = corpus("a");
    let origin = Origin {
        device_id: "dev".into(),
    };
    let batch = vec![
        obs("x", "a secret plan", 0, "2026-11-20T09:00:00Z"),
        obs("y", "an open plan", 0, "2026-11-20T09:00:00Z"),
    ];
    ingest_observations(&mut a, &origin, &batch, NOW).unwrap();
    let (tx, ty) = (batch[0].thread_id.clone(), batch[1].thread_id.clone());
    let made = NOW - time::Duration::days(1);
    let version = |tier: &str, body: &str, sources: &[&str]| personkit_store::memory::NewVersion {
        tier: tier.into(),
        body: body.into(),
        tokens: 4,
        sources: sources.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let short = personkit_store::memory::insert(
        &a,
        &version("short", "- a secret plan\n- an open plan", &[&tx, &ty]),
        made,
    )
    .unwrap();
    let profile =
        personkit_store::memory::insert(&a, &version("profile", "I write Rust.", &[]), made)
            .unwrap();
    let (_d2, mut b) = corpus("b");
    let r = apply_page(&mut b, &all_pages(&a), source(), NOW).unwrap();
    assert!(r.rejected.is_empty(), "{r:?}");
    assert_eq!(canonical_dump(&a).unwrap(), canonical_dump(&b).unwrap());
    let on_b = personkit_store::memory::version(&b, &short.id)
        .unwrap()
        .unwrap();
    assert_eq!(on_b.body, short.body);
    assert_eq!(
        personkit_store::memory::sources(&b, &short.id)
            .unwrap()
            .len(),
        2
    );
    assert!(
        personkit_store::memory::version(&b, &profile.id)
            .unwrap()
            .is_some()
    );

    forget(&mut a, &Selection::thread(&tx), NOW).unwrap();
    let on_a = personkit_store::memory::version(&a, &short.id)
        .unwrap()
        .unwrap();
    assert!(on_a.withdrawn_at.is_some() && on_a.body.is_empty());
    apply_page(&mut b, &all_pages(&a), source(), NOW).unwrap();
    let on_b = personkit_store::memory::version(&b, &short.id)
        .unwrap()
        .unwrap();
    assert_eq!(on_b.body, "", "withdrawn on B too");
    assert_eq!(on_b.withdrawn_at, on_a.withdrawn_at);
    assert!(
        personkit_store::memory::state(&b, "due:short")
            .unwrap()
            .is_some()
    );
    assert_eq!(
        personkit_store::memory::version(&b, &profile.id)
            .unwrap()
            .unwrap()
            .body,
        "I write Rust.",
        "a version that did not draw on the thread stays"
    );
    // B's pages back to A change nothing there: the two agree.
    apply_page(&mut a, &all_pages(&b), source(), NOW).unwrap();
    assert_eq!(canonical_dump(&a).unwrap(), canonical_dump(&b).unwrap());
    let words: i64 = b
        .query_row(
            "SELECT count(*) FROM memory_versions WHERE body LIKE '%secret%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(words, 0);
}

const E1: &str = "0123456789abcdef0123456789abcdef";
const E2: &str = "fedcba9876543210fedcba9876543210";

fn merge_item(state: &str, kept: Option<&str>, decided: &str) -> Value {
    serde_json::json!({
        "kind": "merge", "a": E1, "b": E2, "entity_kind": "person", "similarity": 0.62, "state": state,
        "kept": kept,
        "created_at": "2026-11-20T08:00:00.000Z", "decided_at": decided,
    })
}

fn proposal_item(state: &str, decided: Option<&str>, confidence: f64, messages: &[&str]) -> Value {
    let sources: Vec<Value> = messages
        .iter()
        .map(|m| {
            serde_json::json!({"message_id": thread_of(m), "thread_id": thread_of("t"), "confidence": confidence,
                "seen_at": "2026-11-20T09:00:00.000Z"})
        })
        .collect();
    serde_json::json!({
        "kind": "proposal", "id": personkit_store::proposals::proposal_id("person", "priya"),
        "entity_kind": "person", "name": "Priya", "key": "priya", "confidence": confidence,
        "model": "scripted:test", "state": state, "created_at": "2026-11-20T09:00:00.000Z",
        "decided_at": decided, "sources": sources,
    })
}

fn event_item(attrs: Value) -> Value {
    let hash = ids::event_content_hash("git.commit", "repo|a1", "fix the parser");
    let at = "2026-11-20T09:00:30.000Z";
    let bucket = ids::minute_bucket(
        i64::try_from(
            personkit_store::clock::parse_time(at)
                .unwrap()
                .unix_timestamp_nanos()
                / 1_000_000,
        )
        .unwrap(),
    );
    serde_json::json!({
        "kind": "event", "id": ids::event_id(&hash, bucket), "event_kind": "git.commit",
        "source_surface": "events:git", "content": "fix the parser", "content_hash": hash,
        "minute_bucket": bucket, "occurred_at": at, "captured_at": "2026-11-20T09:05:00.000Z", "attrs": attrs,
        "origin_device": "relay-a", "origin_seq": 7,
    })
}

/// Every order of three items.
fn orders<T: Clone>(items: &[T; 3]) -> Vec<Vec<T>> {
    [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ]
    .iter()
    .map(|o| o.iter().map(|&i| items[i].clone()).collect())
    .collect()
}

#[test]
fn merge_decisions_and_proposals_converge_in_any_order_and_a_decision_made_is_never_undone() {
    let merges = [
        merge_item("dismissed", None, "2026-11-21T08:00:00.000Z"),
        merge_item("merged", Some(E2), "2026-11-22T08:00:00.000Z"),
        merge_item("merged", Some(E1), "2026-11-23T08:00:00.000Z"),
    ];
    let proposals = [
        proposal_item("proposed", None, 0.5, &["m1"]),
        proposal_item("approved", Some("2026-11-22T08:00:00.000Z"), 0.7, &["m2"]),
        proposal_item(
            "rejected",
            Some("2026-11-21T08:00:00.000Z"),
            0.9,
            &["m1", "m3"],
        ),
    ];
    let mut finals = BTreeSet::new();
    for (ms, ps) in orders(&merges).into_iter().zip(orders(&proposals)) {
        let mut mem = Memory::default();
        for item in ms.iter().chain(ps.iter()) {
            let r = merge_page(
                &mut mem,
                check_items(std::slice::from_ref(item)),
                source(),
                AT,
            )
            .unwrap();
            assert!(r.rejected.is_empty(), "{r:?}");
        }
        let m = mem.merges.values().next().unwrap().clone();
        let p = mem.proposals.values().next().unwrap().clone();
        // Merged beats dismissed; of two merges the smaller kept id and the earlier time stay.
        assert_eq!(
            (m.state.as_str(), m.kept.as_deref(), m.decided_at.as_deref()),
            ("merged", Some(E1), Some("2026-11-22T08:00:00.000Z"))
        );
        // Approved beats rejected; every message and the highest confidence stay.
        assert_eq!(p.state, "approved");
        assert_eq!(p.decided_at.as_deref(), Some("2026-11-22T08:00:00.000Z"));
        assert_eq!(p.confidence, 0.9);
        assert_eq!(p.sources.len(), 3);
        assert!(
            mem.settle.contains(&p.id),
            "an approval is listed for the graph"
        );
        finals.insert(format!("{m:?} {p:?}"));
    }
    assert_eq!(finals.len(), 1, "{finals:?}");
}

#[test]
fn a_proposal_of_forgotten_turns_is_not_stored_and_events_arrive_once() {
    let mut mem = Memory::default();
    let forgotten = thread_of("m1");
    mem.tombstones.insert(
        forgotten.clone(),
        TombstoneRow {
            id: forgotten,
            thread_id: thread_of("t"),
            forgotten_at: "2026-11-21T00:00:00.000Z".into(),
        },
    );
    let r = merge_page(
        &mut mem,
        check_items(&[proposal_item(
            "approved",
            Some("2026-11-22T08:00:00.000Z"),
            0.7,
            &["m1"],
        )]),
        source(),
        AT,
    )
    .unwrap();
    assert_eq!((r.forgotten, r.stored), (1, 0), "{r:?}");
    assert!(mem.proposals.is_empty() && mem.settle.is_empty());
    // With one more message, the proposal lands without the forgotten one.
    merge_page(
        &mut mem,
        check_items(&[proposal_item("proposed", None, 0.7, &["m1", "m2"])]),
        source(),
        AT,
    )
    .unwrap();
    let p = mem.proposals.values().next().unwrap();
    assert_eq!(p.sources.len(), 1);
    assert_eq!(p.sources[0].message_id, thread_of("m2"));
    let ev = event_item(serde_json::json!({"repo": "/src/personkit", "author": "Ana"}));
    let r = merge_page(&mut mem, check_items(&[ev.clone(), ev]), source(), AT).unwrap();
    assert_eq!((r.stored, r.unchanged), (1, 1), "{r:?}");
}

#[test]
fn hostile_event_merge_and_proposal_items_are_rejected_one_by_one_and_the_rest_lands() {
    let ev = event_item(serde_json::json!({"repo": "/src/personkit"}));
    let with = |good: &Value, f: &dyn Fn(&mut Value)| {
        let mut v = good.clone();
        f(&mut v);
        v
    };
    let merge = merge_item("merged", Some(E1), "2026-11-22T08:00:00.000Z");
    let prop = proposal_item("proposed", None, 0.5, &["m1"]);
    let items = vec![
        with(&ev, &|v| v["content_hash"] = "ABC".into()),
        with(&ev, &|v| v["minute_bucket"] = 1.into()),
        with(&ev, &|v| {
            v["attrs"] = serde_json::json!({"thread_id": thread_of("t")})
        }),
        with(&ev, &|v| v["content"] = "x".repeat(70_000).into()),
        with(&ev, &|v| v["occurred_at"] = "yesterday".into()),
        with(&ev, &|v| v["attrs"] = "not an object".into()),
        with(&merge, &|v| v["kept"] = E2.replace('f', "0").into()),
        with(&merge, &|v| v["state"] = "proposed".into()),
        with(&merge, &|v| {
            v["a"] = E2.into();
            v["b"] = E1.into();
        }),
        with(&merge, &|v| v["similarity"] = 7.into()),
        with(&merge, &|v| v["a_name"] = "Ana Silva".into()),
        with(&prop, &|v| v["key"] = "someone else".into()),
        with(&prop, &|v| v["state"] = "approved".into()),
        with(&prop, &|v| v["sources"] = serde_json::json!([])),
        with(&prop, &|v| v["confidence"] = 1.5.into()),
        with(&prop, &|v| v["sources"][0]["message_id"] = "m1".into()),
        ev.clone(),
        merge.clone(),
        prop.clone(),
    ];
    let mut mem = Memory::default();
    let r = merge_page(&mut mem, check_items(&items), source(), AT).unwrap();
    let codes: Vec<&str> = r.rejected.iter().map(|x| x.code).collect();
    assert_eq!(
        codes,
        vec![
            "id_mismatch",
            "id_mismatch",
            "invalid_event",
            "invalid_content",
            "invalid_time",
            "malformed_item",
            "invalid_merge",
            "invalid_merge",
            "invalid_merge",
            "invalid_merge",
            "malformed_item",
            "id_mismatch",
            "invalid_proposal",
            "invalid_proposal",
            "invalid_proposal",
            "invalid_proposal",
        ],
        "{r:?}"
    );
    assert_eq!(r.stored, 3, "{r:?}");
    assert_eq!(
        (mem.events.len(), mem.merges.len(), mem.proposals.len()),
        (1, 1, 1)
    );
}
