//! Reading another program's SQLite file through a private copy (`personkit_store::foreign`): committed content
//! still in the `-wal` is seen, nothing is written beside the original, a column the table lacks reads as NULL, a
//! key prefix selects exactly the keys that start with it, limits hold, and a file that is not a database or is
//! too large is an error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_store::foreign::{Cell, ForeignDb, ForeignError, Select};
use rusqlite::Connection;

fn files_in(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_copy_sees_the_wal_and_leaves_the_original_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tool.db");
    let w = Connection::open(&path).unwrap();
    w.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
         CREATE TABLE kv (key TEXT UNIQUE, value BLOB);
         INSERT INTO kv VALUES ('composerData:a', '{\"n\":1}'), ('composerData:b', x'7b7d'),
                               ('composerDataX', 'near miss'), ('bubbleId:a:1', 'one'), ('composerData;', 'after');",
    )
    .unwrap();
    let before = files_in(dir.path());
    assert!(before.contains(&"tool.db-wal".to_owned()));
    let db = ForeignDb::open_copy(&path, 1 << 30).unwrap();
    let rows = db
        .rows(&Select {
            table: "kv",
            columns: &["key", "value", "missing"],
            prefix: Some(("key", "composerData:")),
            order: &["key"],
            limit: 10,
            ..Select::default()
        })
        .unwrap();
    let keys: Vec<&str> = rows.iter().map(|r| r[0].text().unwrap()).collect();
    assert_eq!(keys, ["composerData:a", "composerData:b"]);
    assert_eq!(rows[0][1].text(), Some("{\"n\":1}"));
    assert_eq!(rows[1][1], Cell::Blob(b"{}".to_vec()));
    assert_eq!(rows[1][1].text(), Some("{}"), "a UTF-8 blob reads as text");
    assert_eq!(
        rows[0][2],
        Cell::Null,
        "a column the table lacks reads as NULL"
    );
    // Limits hold; an equality filter; a table that is not there has no rows.
    let one = db
        .rows(&Select {
            table: "kv",
            columns: &["value"],
            eq: Some(("key", "bubbleId:a:1")),
            limit: 1,
            ..Select::default()
        })
        .unwrap();
    assert_eq!(one, vec![vec![Cell::Text("one".into())]]);
    let limited = db
        .rows(&Select {
            table: "kv",
            columns: &["key"],
            limit: 2,
            ..Select::default()
        })
        .unwrap();
    assert_eq!(limited.len(), 2);
    assert!(!db.has_table("nothing").unwrap());
    assert!(
        db.rows(&Select {
            table: "nothing",
            columns: &["a"],
            eq: Some(("a", "b")),
            limit: 5,
            ..Select::default()
        })
        .unwrap()
        .is_empty()
    );
    drop(db);
    // Nothing was written beside the original (no -shm of ours, no checkpoint): the same files, the WAL unmerged.
    assert_eq!(files_in(dir.path()), before);
    drop(w);
}

#[test]
fn a_file_that_is_not_a_database_or_is_too_large_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.db");
    std::fs::write(
        &text,
        "just some text, long enough to have a header's worth of bytes in it..........",
    )
    .unwrap();
    assert!(matches!(
        ForeignDb::open_copy(&text, 1 << 30),
        Err(ForeignError::Sql(_))
    ));
    let real = dir.path().join("real.db");
    Connection::open(&real)
        .unwrap()
        .execute_batch("CREATE TABLE t (a); INSERT INTO t VALUES (zeroblob(100000));")
        .unwrap();
    assert!(matches!(
        ForeignDb::open_copy(&real, 1000),
        Err(ForeignError::TooLarge { .. })
    ));
    assert!(matches!(
        ForeignDb::open_copy(&dir.path().join("absent.db"), 1 << 30),
        Err(ForeignError::Copy(_))
    ));
}
