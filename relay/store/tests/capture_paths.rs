//! Capture health per path: which paths (DOM, network) gave a surface turns, read from the corpus, and a device's
//! `stream_unparsed` report (docs/wire-format.md "Capture health").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_shared::health::{CaptureReport, PathReport};
use personkit_shared::identity::Path;
use personkit_shared::wire::{ClientInfo, ItemStatus, Role, build_observation};
use personkit_store::db;
use personkit_store::health::{SurfaceHealth, capture_health, record_reports};
use personkit_store::ingest::{Origin, ingest_batch};
use time::OffsetDateTime;
use time::macros::datetime;

const CHATGPT: &str = "browser-ext:chatgpt";

fn item(text: &str, path: Option<Path>) -> serde_json::Value {
    let mut obs = build_observation(
        CHATGPT,
        "c-1",
        Role::Assistant,
        text,
        None,
        Some("m-2"),
        "2026-11-23T12:00:00Z",
        ClientInfo {
            app_version: "0.1.0".into(),
            device_id: "dev".into(),
        },
    );
    obs.turn.path = path;
    serde_json::to_value(obs).unwrap()
}

fn chatgpt(conn: &personkit_store::Connection, now: OffsetDateTime) -> SurfaceHealth {
    capture_health(conn, now)
        .unwrap()
        .surfaces
        .into_iter()
        .find(|s| s.surface == CHATGPT)
        .unwrap()
}

#[test]
fn paths_follow_what_each_path_delivered_and_unparsed_reports() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = db::open(&dir.path().join("c.db")).unwrap();
    let origin = Origin {
        device_id: "dev".into(),
    };
    let t0 = datetime!(2026-11-23 12:00:00 UTC);

    // The DOM path alone.
    ingest_batch(&mut conn, &origin, &[item("Rendered answer", None)], t0).unwrap();
    let h = chatgpt(&conn, t0);
    let p = h.paths.clone().unwrap();
    assert_eq!(p.working, "dom", "{h:?}");
    assert!(p.network_at.is_none());

    // The network path upgrades the same turn: both paths delivered.
    let t1 = t0 + time::Duration::seconds(5);
    let r = ingest_batch(
        &mut conn,
        &origin,
        &[item("Source **answer**", Some(Path::Network))],
        t1,
    )
    .unwrap();
    assert_eq!(r.results[0].status, ItemStatus::Stored, "{r:?}");
    let p = chatgpt(&conn, t1).paths.unwrap();
    assert_eq!(p.working, "both", "{p:?}");
    assert!(p.dom_at.is_some() && p.network_at.is_some(), "{p:?}");

    // A device reports that the site's responses no longer parse, after the last network turn.
    let t2 = t1 + time::Duration::minutes(1);
    let report = |code: &str, since: &str| CaptureReport {
        surface: CHATGPT.into(),
        stale_since: None,
        rule: None,
        paths: Some(PathReport {
            dom_at: Some(since.into()),
            network_at: None,
            unparsed_since: Some(since.into()),
            unparsed: Some(code.into()),
        }),
    };
    let res = record_reports(
        &mut conn,
        "dev",
        &[
            report("stream_unparsed", "2026-11-23T12:01:00Z"),
            report("no_such_code", "2026-11-23T12:01:00Z"),
        ],
        t2,
    )
    .unwrap();
    assert_eq!(res[0].status, ItemStatus::Stored);
    assert_eq!(res[1].status, ItemStatus::Rejected);
    let h = chatgpt(&conn, t2);
    let p = h.paths.clone().unwrap();
    assert_eq!(p.working, "dom", "{h:?}");
    assert_eq!(p.unparsed.as_deref(), Some("stream_unparsed"));
    assert_eq!(h.reason.as_deref(), Some("stream_unparsed"));
    assert_ne!(h.status, personkit_shared::health::Status::Green);

    // A newer network turn: the network path works again.
    let t3 = t2 + time::Duration::minutes(1);
    ingest_batch(
        &mut conn,
        &origin,
        &[item("Another **source** answer", Some(Path::Network))],
        t3,
    )
    .unwrap();
    let h = chatgpt(&conn, t3);
    let p = h.paths.clone().unwrap();
    assert_eq!(p.working, "both", "{h:?}");
    assert!(p.unparsed.is_none());
    assert_eq!(h.reason, None);
}

/// An imported export lands in the corpus but says nothing about live capture: it leaves the surface's capture
/// health as it was (no accepted time, no green light), while a live capture after it does count.
#[test]
fn an_imported_export_does_not_make_live_capture_look_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = db::open(&dir.path().join("c.db")).unwrap();
    let origin = Origin {
        device_id: "dev".into(),
    };
    let t0 = datetime!(2026-11-23 12:00:00 UTC);
    let r = ingest_batch(
        &mut conn,
        &origin,
        &[item("From the official export", Some(Path::Export))],
        t0,
    )
    .unwrap();
    assert_eq!(r.results[0].status, ItemStatus::Stored);
    let before = capture_health(&conn, t0)
        .unwrap()
        .surfaces
        .into_iter()
        .find(|s| s.surface == CHATGPT);
    assert!(
        before.as_ref().is_none_or(|h| h.last_accepted_at.is_none()),
        "{before:?}"
    );
    ingest_batch(&mut conn, &origin, &[item("Captured live", None)], t0).unwrap();
    let after = chatgpt(&conn, t0);
    assert!(after.last_accepted_at.is_some(), "{after:?}");
}
