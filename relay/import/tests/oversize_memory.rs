//! A small zip can hold a gigantic JSON string in a field the importer ignores. The string must be refused while
//! it is read: the conversation holding it is a problem, the rest imported, and the process's peak memory stays
//! far below the string's size. Alone in its own test binary so the peak measured is this test's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use personkit_import::{Options, import_path};
use time::OffsetDateTime;

/// The process's peak resident memory (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    let kb: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

#[cfg(target_os = "linux")]
#[test]
fn a_300_mb_ignored_field_in_a_zip_is_refused_while_reading_with_bounded_memory() {
    const HUGE: usize = 300 * 1024 * 1024;
    let tmp = tempfile::tempdir().unwrap();
    let zip_path = tmp.path().join("export.zip");
    {
        // The field is streamed into the zip; neither the test nor the importer may hold it whole.
        let mut z = zip::ZipWriter::new(std::fs::File::create(&zip_path).unwrap());
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .large_file(true);
        z.start_file("conversations.json", opts).unwrap();
        z.write_all(
            br#"[{"uuid":"c-huge","name":"huge","chat_messages":[{"uuid":"m1","sender":"human","created_at":"2025-01-01T00:00:00Z","content":[{"type":"text","text":"hello"}],"text":""#,
        )
        .unwrap();
        let chunk = vec![b'a'; 1024 * 1024];
        for _ in 0..HUGE / chunk.len() {
            z.write_all(&chunk).unwrap();
        }
        z.write_all(
            br#""}]},{"uuid":"c-fine","name":"fine","chat_messages":[{"uuid":"m2","sender":"human","created_at":"2025-01-01T00:00:00Z","text":"still here"}]}]"#,
        )
        .unwrap();
        z.finish().unwrap();
    }
    let before = peak_rss();
    assert!(
        before < 100 * 1024 * 1024,
        "the test starts at {before} bytes"
    );
    let mut conn = personkit_store::db::open(&tmp.path().join("corpus.db")).unwrap();
    let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    let s = import_path(&mut conn, &zip_path, &Options::default(), now, &mut |_| {}).unwrap();
    let peak = peak_rss();
    assert!(
        peak < 200 * 1024 * 1024,
        "peak memory {} MB while reading a {} MB field",
        peak / (1024 * 1024),
        HUGE / (1024 * 1024)
    );
    // The conversation holding the field is a problem saying what, which limit and what to do; the other is
    // imported.
    assert_eq!((s.conversations, s.conversations_failed), (1, 1), "{s:#?}");
    assert_eq!(s.stored, 1, "{s:#?}");
    let p = &s.problems[0];
    assert_eq!(p.index, Some(0), "{p}");
    assert!(
        p.message.contains(&format!("{HUGE} bytes"))
            && p.message.contains("8 MB")
            && p.message.contains("import it again"),
        "{p}"
    );
}
