//! Inputs that are not what they should be: a cut zip, a damaged zip member, a JSON file cut short, a file of
//! the wrong shape, an oversize turn, a broken conversation among good ones, a bad redaction pattern. Each gives
//! a message naming the file (and the conversation or line); everything else is imported, and nothing of a
//! conversation is half-stored.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};

use personkit_import::{ImportError, Options, Summary, import_path};
use serde_json::{Value, json};
use time::OffsetDateTime;

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

fn chatgpt_fixture() -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/chatgpt/branches/conversations.json"),
    )
    .unwrap()
}

fn import(db: &Path, input: &Path) -> Result<Summary, ImportError> {
    let mut conn = personkit_store::db::open(db).unwrap();
    import_path(&mut conn, input, &Options::default(), now(), &mut |_| {})
}

fn count(db: &Path, sql: &str) -> i64 {
    let conn = personkit_store::db::open_read_only(db).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn zip_bytes(name: &str, data: &[u8]) -> Vec<u8> {
    let mut buf = std::io::Cursor::new(Vec::new());
    {
        let mut z = zip::ZipWriter::new(&mut buf);
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        z.start_file(name, opts).unwrap();
        z.write_all(data).unwrap();
        z.finish().unwrap();
    }
    buf.into_inner()
}

struct Tmp {
    _dir: tempfile::TempDir,
    db: PathBuf,
    root: PathBuf,
}

fn tmp() -> Tmp {
    let dir = tempfile::tempdir().unwrap();
    Tmp {
        db: dir.path().join("corpus.db"),
        root: dir.path().to_path_buf(),
        _dir: dir,
    }
}

fn simple_conv(id: &str, texts: &[&str]) -> Value {
    let mut mapping = serde_json::Map::new();
    mapping.insert(
        "root".into(),
        json!({"id": "root", "message": null, "parent": null, "children": ["n0"]}),
    );
    for (i, t) in texts.iter().enumerate() {
        let id_ = format!("{id}-n{i}");
        let parent = if i == 0 {
            "root".to_owned()
        } else {
            format!("{id}-n{}", i - 1)
        };
        mapping.insert(
            id_.clone(),
            json!({"id": id_, "parent": parent, "children": [format!("{id}-n{}", i + 1)],
              "message": {"id": id_, "author": {"role": if i % 2 == 0 {"user"} else {"assistant"}},
                          "create_time": 1_700_000_000.0 + i as f64,
                          "content": {"content_type": "text", "parts": [t]}, "recipient": "all"}}),
        );
    }
    json!({"id": id, "title": id, "create_time": 1_700_000_000.0, "update_time": 1_700_000_100.0,
           "current_node": format!("{id}-n{}", texts.len() - 1), "mapping": mapping})
}

#[test]
fn a_cut_zip_is_refused_with_the_file_and_what_to_do() {
    let t = tmp();
    let full = zip_bytes("conversations.json", &chatgpt_fixture());
    let cut = t.root.join("export.zip");
    std::fs::write(&cut, &full[..full.len() / 2]).unwrap();
    let err = import(&t.db, &cut).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ImportError::Zip { .. }), "{err:?}");
    assert!(
        msg.contains("export.zip") && msg.contains("download the export again"),
        "{msg}"
    );
    assert_eq!(count(&t.db, "SELECT count(*) FROM messages"), 0);
}

#[test]
fn a_damaged_zip_member_keeps_the_conversations_before_the_damage() {
    let t = tmp();
    // Stored (not deflated) so a flipped byte lands in the JSON text itself and the checksum catches it.
    let data = serde_json::to_vec(&json!([
        simple_conv("c-one", &["first question", "first answer"]),
        simple_conv("c-two", &["second question", "second answer"]),
    ]))
    .unwrap();
    let mut buf = std::io::Cursor::new(Vec::new());
    {
        let mut z = zip::ZipWriter::new(&mut buf);
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        z.start_file("conversations.json", opts).unwrap();
        z.write_all(&data).unwrap();
        z.finish().unwrap();
    }
    let mut bytes = buf.into_inner();
    let at = bytes
        .windows(b"second answer".len())
        .position(|w| w == b"second answer")
        .unwrap();
    bytes[at] = b'S';
    let p = t.root.join("export.zip");
    std::fs::write(&p, &bytes).unwrap();
    let s = import(&t.db, &p).unwrap();
    assert_eq!(s.problems.len(), 1, "{s:?}");
    assert!(
        s.problems[0].file.contains("export.zip!conversations.json"),
        "{s:?}"
    );
    // Whatever the reader delivered before the checksum failed, no conversation is half-stored.
    let per_thread: i64 = count(
        &t.db,
        "SELECT count(*) FROM (SELECT thread_id, count(*) n FROM messages GROUP BY thread_id HAVING n <> 2)",
    );
    assert_eq!(per_thread, 0);
}

#[test]
fn a_json_file_cut_short_names_the_line_and_keeps_what_came_before() {
    let t = tmp();
    let text = serde_json::to_string_pretty(&json!([
        simple_conv("c-one", &["q1", "a1"]),
        simple_conv("c-two", &["q2", "a2"]),
    ]))
    .unwrap();
    let cut = &text[..text.len() - 200];
    let p = t.root.join("conversations.json");
    std::fs::write(&p, cut).unwrap();
    let s = import(&t.db, &p).unwrap();
    assert_eq!(s.conversations, 1, "{s:?}");
    assert_eq!(s.stored, 2, "{s:?}");
    let pr = &s.problems[0];
    assert_eq!(pr.index, Some(1), "{pr:?}");
    assert!(pr.line.unwrap() > 10, "{pr:?}");
    assert!(pr.to_string().contains("conversations.json, line "), "{pr}");
    assert_eq!(count(&t.db, "SELECT count(*) FROM messages"), 2);
}

#[test]
fn files_of_the_wrong_shape_are_refused_by_content() {
    let t = tmp();
    for (name, body, says) in [
        (
            "conversations.json",
            &b"{\"foo\": 1}"[..],
            "not a Grok export",
        ),
        (
            "conversations.json",
            b"[{\"foo\": 1}]",
            "not of ChatGPT, Claude or DeepSeek",
        ),
        ("conversations.json", b"hello", "not JSON"),
        ("conversations.json", b"", "empty"),
        (
            "one.json",
            b"{\"mapping\": {}, \"id\": \"x\"}",
            "wrap it in [ ]",
        ),
    ] {
        let p = t.root.join(name);
        std::fs::write(&p, body).unwrap();
        let err = import(&t.db, &p).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(name) && msg.contains(says), "{msg}");
    }
    let empty_dir = t.root.join("empty");
    std::fs::create_dir(&empty_dir).unwrap();
    let msg = import(&t.db, &empty_dir).unwrap_err().to_string();
    assert!(msg.contains("no conversations.json"), "{msg}");
}

#[test]
fn a_broken_conversation_or_an_oversize_turn_leaves_the_rest_imported() {
    let t = tmp();
    let huge = "x".repeat(personkit_shared::wire::MAX_CONTENT_BYTES + 10);
    let mut broken = simple_conv("c-broken", &["q", "a"]);
    broken["mapping"] = json!(["not", "a", "tree"]);
    let p = t.root.join("conversations.json");
    std::fs::write(
        &p,
        serde_json::to_vec(&json!([
            simple_conv("c-good", &["hello", "hi"]),
            broken,
            7,
            simple_conv("c-big", &["small question", &huge]),
        ]))
        .unwrap(),
    )
    .unwrap();
    let s = import(&t.db, &p).unwrap();
    assert_eq!(s.conversations, 2, "{s:?}");
    assert_eq!(s.conversations_failed, 2, "{s:?}");
    let ids: Vec<_> = s
        .problems
        .iter()
        .map(|p| (p.conversation_id.clone(), p.index))
        .collect();
    assert_eq!(ids, [(Some("c-broken".into()), Some(1)), (None, Some(2))]);
    assert_eq!(s.rejected, 1, "{s:?}");
    assert_eq!(s.rejected_by_reason.get("too_large"), Some(&1), "{s:?}");
    assert_eq!(s.stored, 3, "{s:?}");
}

#[test]
fn an_invalid_redaction_pattern_is_refused_before_anything_is_stored() {
    let t = tmp();
    let p = t.root.join("conversations.json");
    std::fs::write(&p, chatgpt_fixture()).unwrap();
    let mut conn = personkit_store::db::open(&t.db).unwrap();
    let opts = Options {
        patterns: vec!["(unclosed".into()],
        ..Options::default()
    };
    let err = import_path(&mut conn, &p, &opts, now(), &mut |_| {}).unwrap_err();
    assert!(matches!(err, ImportError::Pattern { .. }), "{err:?}");
    drop(conn);
    assert_eq!(count(&t.db, "SELECT count(*) FROM messages"), 0);
}

#[test]
fn conversations_larger_and_smaller_than_a_batch_are_each_stored_whole() {
    let t = tmp();
    let long: Vec<String> = (0..(personkit_import::BATCH_TURNS + 100))
        .map(|i| format!("turn number {i}"))
        .collect();
    let long: Vec<&str> = long.iter().map(String::as_str).collect();
    let mut convs = vec![simple_conv("c-first", &["a", "b"])];
    convs.push(simple_conv("c-long", &long));
    for i in 0..300 {
        convs.push(simple_conv(&format!("c-small-{i}"), &["q", "r"]));
    }
    let p = t.root.join("conversations.json");
    std::fs::write(&p, serde_json::to_vec(&convs).unwrap()).unwrap();
    let s = import(&t.db, &p).unwrap();
    assert_eq!(s.conversations, 302, "{s:?}");
    assert_eq!(s.stored as usize, 2 + long.len() + 600, "{s:?}");
    assert_eq!(
        count(
            &t.db,
            "SELECT count(*) FROM messages WHERE thread_id IN (SELECT id FROM threads WHERE conversation_id = 'c-long')"
        ),
        long.len() as i64
    );
    assert_eq!(count(&t.db, "SELECT count(*) FROM threads"), 302);
}

/// Imports `data` as the file `name` into a fresh corpus.
fn import_file(name: &str, data: &Value) -> (Summary, Tmp) {
    let t = tmp();
    let file = t.root.join(name);
    std::fs::write(&file, serde_json::to_vec(data).unwrap()).unwrap();
    (import(&t.db, &file).unwrap(), t)
}

#[test]
fn malformed_messages_are_counted_and_reported_in_every_format() {
    let junk =
        || json!([1, null, {"uuid": 5, "id": 5, "_id": 5, "sender": [], "text": {}, "content": 7}]);
    // Claude: a conversation of nothing but junk, and one with a good message beside junk.
    let claude = json!([
        {"uuid": "c-bad", "name": "bad", "chat_messages": junk()},
        {"uuid": "c-ok", "name": "ok", "chat_messages": [
            1,
            {"uuid": "m1", "sender": "human", "text": "hello there", "created_at": "2025-01-01T00:00:00Z"},
            {"sender": "assistant", "text": "no id"}
        ]}
    ]);
    // ChatGPT: nodes that are not objects, a message that is not one, a message without an id.
    let chatgpt = json!([
        {"id": "g-bad", "title": "bad", "mapping": {
            "root": {"id": "root", "message": null, "children": ["a"]},
            "a": 1, "b": {"message": "text"}, "c": {"message": {"author": {"role": "user"}}}
        }},
        {"id": "g-ok", "title": "ok", "mapping": {
            "root": {"id": "root", "message": null, "children": ["m"]},
            "m": {"id": "m", "parent": "root", "children": [], "message": {"id": "m", "author": {"role": "user"},
                "content": {"content_type": "text", "parts": ["hi"]}, "create_time": 1700000000.0}},
            "x": null
        }}
    ]);
    // Grok: responses that are not objects or have no id.
    let grok = json!({"conversations": [
        {"conversation": {"id": "k-bad", "title": "bad"}, "responses": junk()},
        {"conversation": {"id": "k-ok", "title": "ok"}, "responses": [
            {"response": {"_id": "r1", "message": "hi", "sender": "human"}},
            {"response": null}
        ]}
    ]});
    // DeepSeek: nodes that are not objects, a message that is not one.
    let deepseek = json!([
        {"id": "d-bad", "title": "bad", "inserted_at": "2025-01-20T10:00:00Z", "mapping": {"root": {"id": "root", "children": []}, "1": 1, "2": {"message": [3]}}},
        {"id": "d-ok", "title": "ok", "inserted_at": "2025-01-20T10:00:00Z", "mapping": {
            "root": {"id": "root", "children": ["1"]},
            "1": {"id": "1", "parent": "root", "children": [], "message": {"inserted_at": "2025-01-20T10:00:00Z",
                "fragments": [{"type": "REQUEST", "content": "hi"}]}},
            "2": null
        }}
    ]);
    for (name, data, bad, ok) in [
        ("conversations.json", claude, "c-bad", "c-ok"),
        ("conversations.json", chatgpt, "g-bad", "g-ok"),
        ("prod-grok-backend.json", grok, "k-bad", "k-ok"),
        ("conversations.json", deepseek, "d-bad", "d-ok"),
    ] {
        let (s, t) = import_file(name, &data);
        // The conversation with nothing readable is a failed one, named in the problems.
        assert_eq!(
            (s.conversations, s.conversations_failed),
            (1, 1),
            "{ok}: {s:#?}"
        );
        let p_bad = s
            .problems
            .iter()
            .find(|p| p.conversation_id.as_deref() == Some(bad))
            .unwrap_or_else(|| panic!("{bad} not in problems: {s:#?}"));
        assert!(p_bad.message.contains("none of its"), "{p_bad}");
        // The other is imported, its unreadable messages counted per reason and named in the problems.
        let p_ok = s
            .problems
            .iter()
            .find(|p| p.conversation_id.as_deref() == Some(ok))
            .unwrap_or_else(|| panic!("{ok} not in problems: {s:#?}"));
        assert!(p_ok.message.contains("could not be read"), "{p_ok}");
        assert!(s.messages_unreadable >= 1, "{ok}: {s:#?}");
        assert_eq!(
            s.messages_unreadable,
            s.messages_unreadable_by_reason.values().sum::<u64>()
        );
        assert_eq!(s.stored, 1, "{ok}: {s:#?}");
        assert_eq!(count(&t.db, "SELECT count(*) FROM messages"), 1);
    }

    // Gemini: an activity record that is not an object, and a prompt without a time, beside a good prompt.
    let gemini = json!([
        1,
        {"header": "Gemini Apps", "title": "Prompted lost", "time": 3},
        {"header": "Gemini Apps", "title": "Prompted kept", "time": "2025-05-02T10:00:00.000Z",
            "safeHtmlItem": [{"html": "<p>yes</p>"}]},
        {"header": "Gemini Apps", "title": "Gave feedback: Good response", "time": "2025-05-02T09:55:00.000Z"}
    ]);
    let (s, _t) = import_file("MyActivity.json", &gemini);
    assert_eq!(s.messages_unreadable, 2, "{s:#?}");
    assert_eq!(s.messages_unreadable_by_reason["not_an_object"], 1);
    assert_eq!(
        s.empty, 1,
        "feedback is other activity, not an unreadable record"
    );
    assert!(
        s.problems
            .iter()
            .any(|p| p.message.contains("2 activity records could not be read")),
        "{s:#?}"
    );
    assert_eq!(s.stored, 2);
}

/// Every message read is stored, a duplicate, rejected, or counted apart with its reason.
fn accounted(s: &Summary) {
    assert_eq!(
        s.messages,
        s.turns + s.empty + s.chrome + s.messages_unreadable,
        "{s:#?}"
    );
    assert_eq!(s.turns, s.stored + s.duplicate + s.rejected, "{s:#?}");
}

#[test]
fn le_chat_files_that_are_cut_garbage_or_hold_bad_messages_leave_the_others_imported() {
    let msg = |chat: &str, id: &str, role: &str, text: &str, at: &str| {
        json!({"id": id, "version": 0, "chatId": chat, "role": role, "content": text, "contentChunks": null,
            "createdAt": at, "files": []})
    };
    let good = json!([
        msg(
            "aaaaaaaa-1",
            "m1",
            "user",
            "Bonjour",
            "2025-10-20T09:00:00Z"
        ),
        msg(
            "aaaaaaaa-1",
            "m2",
            "assistant",
            "Salut !",
            "2025-10-20T09:00:01Z"
        ),
    ]);
    // Cut inside its second message: the first is kept.
    let cut = serde_json::to_string(&json!([
        msg(
            "bbbbbbbb-2",
            "m1",
            "user",
            "Premier message",
            "2025-10-20T09:00:00Z"
        ),
        msg(
            "bbbbbbbb-2",
            "m2",
            "assistant",
            "Perdu",
            "2025-10-20T09:00:01Z"
        ),
    ]))
    .unwrap();
    let cut = &cut[..cut.len() - 30];
    // Junk beside a good message: not an object, no id, a role nobody knows.
    let junk = json!([
        1,
        {"chatId": "cccccccc-3", "role": "user", "content": "sans id"},
        msg("cccccccc-3", "m0", "moderator", "?", "2025-10-20T09:00:00Z"),
        msg("cccccccc-3", "m1", "user", "Je reste", "2025-10-20T09:00:01Z"),
    ]);
    let t = tmp();
    let z = t.root.join("lechat-export.zip");
    {
        let f = std::fs::File::create(&z).unwrap();
        let mut w = zip::ZipWriter::new(f);
        let opts = zip::write::SimpleFileOptions::default();
        for (name, data) in [
            ("chat-aaaaaaaa-1.json", serde_json::to_vec(&good).unwrap()),
            ("chat-bbbbbbbb-2.json", cut.as_bytes().to_vec()),
            ("chat-dddddddd-4.json", b"this is not JSON".to_vec()),
            ("chat-cccccccc-3.json", serde_json::to_vec(&junk).unwrap()),
            ("chat-aaaaaaaa-1-files/notes.txt", b"attachment".to_vec()),
        ] {
            w.start_file(name, opts).unwrap();
            w.write_all(&data).unwrap();
        }
        w.finish().unwrap();
    }
    let s = import(&t.db, &z).unwrap();
    accounted(&s);
    assert_eq!(s.files.len(), 4, "{s:#?}");
    assert_eq!((s.conversations, s.stored), (3, 4), "{s:#?}");
    assert_eq!(s.messages_unreadable, 3, "{s:#?}");
    for (file, what) in [
        ("chat-bbbbbbbb-2.json", "not valid JSON"),
        ("chat-dddddddd-4.json", "not valid JSON"),
        (
            "chat-cccccccc-3.json",
            "3 of its 4 messages could not be read",
        ),
    ] {
        assert!(
            s.problems
                .iter()
                .any(|p| p.file.ends_with(file) && p.message.contains(what)),
            "{file}: {s:#?}"
        );
    }
    // Again: nothing new.
    let again = import(&t.db, &z).unwrap();
    assert_eq!((again.stored, again.duplicate), (0, 4), "{again:#?}");
}
