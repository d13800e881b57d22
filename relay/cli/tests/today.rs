//! `personkit today` against a real relay process and corpus file: turns sent over HTTP on three sites and
//! several local days (one of them edited, so it has two revisions), and two Claude Code sessions in two project
//! folders read by `personkit harvest --once`; `today --json` at a fixed offset (UTC+05:30) must count exactly
//! what went in — today, this week, per site, per project, and per day over the last 90 days.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use personkit_testkit::{
    Relay, alternating_role, claude_code_line, cli, cli_json, temp_db, turn_at,
};
use serde_json::Value;
use time::{Duration, OffsetDateTime, PrimitiveDateTime, Time, UtcOffset};

const OFFSET: &str = "+05:30";

fn stored(t: OffsetDateTime) -> String {
    personkit_store::clock::fmt_time(t)
}

#[test]
fn today_counts_what_was_ingested_per_site_project_and_day() {
    let (dir, db) = temp_db();
    let relay = Relay::start(&db, &[]);
    let token = relay.pair_printed("laptop");

    let offset = UtcOffset::from_hms(5, 30, 0).unwrap();
    let now = OffsetDateTime::now_utc();
    let date = now.to_offset(offset).date();
    let start = PrimitiveDateTime::new(date, Time::MIDNIGHT).assume_offset(offset);
    // Inside today whatever the time of day; yesterday evening; ten days ago; outside the 90 days.
    let today = start + (now - start) / 2;
    let times = [
        today,
        start - Duration::minutes(30),
        start - Duration::days(10) + Duration::hours(3),
        start - Duration::days(200),
    ];
    let sites = [
        "browser-ext:chatgpt",
        "browser-ext:claude",
        "browser-ext:gemini",
    ];
    // (surface, conversation, ordinal, text, time): per site and time one thread of two turns, the chatgpt
    // answer of today edited once more a second later (a second revision of the same position).
    let mut items = Vec::new();
    let mut sent: Vec<(String, OffsetDateTime)> = Vec::new();
    for (k, s) in sites.iter().enumerate() {
        for (j, t) in times.iter().enumerate().take(k + 2) {
            let conv = format!("c{k}-{j}");
            for i in 0..2u32 {
                let at = *t + Duration::seconds(i64::from(i));
                items.push(turn_at(
                    s,
                    &conv,
                    alternating_role(i as usize),
                    &format!("{s} {conv} turn {i}"),
                    Some(i),
                    None,
                    &stored(at),
                ));
                sent.push(((*s).to_owned(), at));
            }
        }
    }
    items.push(turn_at(
        sites[0],
        "c0-0",
        alternating_role(1),
        "an edited answer",
        Some(1),
        None,
        &stored(today + Duration::seconds(2)),
    ));
    let r = relay.http.send_batch(&token, &items);
    assert_eq!(r["rejected"], 0, "{r}");
    assert_eq!(r["stored"], items.len(), "{r}");

    // Two Claude Code sessions, in projects `orbit` (2 turns) and `kite` (1 turn), read by a harvest pass.
    let home = dir.path().join("home");
    for (project, session, n) in [
        (
            "-home-ada-src-orbit",
            "11111111-1111-4111-8111-111111111111",
            2,
        ),
        (
            "-home-ada-src-kite",
            "22222222-2222-4222-8222-222222222222",
            1,
        ),
    ] {
        let folder = home.join(".claude/projects").join(project);
        std::fs::create_dir_all(&folder).unwrap();
        let lines: Vec<String> = (0..n)
            .map(|i| claude_code_line(session, i, &format!("{project} turn {i}"), &stored(today)))
            .collect();
        std::fs::write(
            folder.join(format!("{session}.jsonl")),
            lines.join("\n") + "\n",
        )
        .unwrap();
    }
    assert!(
        cli(&db, &["harvest", "enable", "claude-code"])
            .status
            .success()
    );
    let home_s = home.display().to_string();
    let pass = cli_json(&db, &["harvest", "--once", "--home", &home_s, "--json"]);
    assert!(pass.to_string().contains("\"stored\":3"), "{pass}");
    sent.extend(std::iter::repeat_n(
        ("harvest:claude-code".to_owned(), today),
        3,
    ));

    let t = relay.cli_json(&["today", "--json", "--utc-offset", OFFSET]);
    assert_eq!(t["utc_offset_minutes"], 330, "{t}");
    assert_eq!(t["date"], date.to_string(), "{t}");

    // What went in, per local day and surface (each position once: the edit is a revision).
    let day_of = |at: OffsetDateTime| at.to_offset(offset).date();
    let mut per_day: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (s, at) in &sent {
        *per_day
            .entry((day_of(*at).to_string(), s.clone()))
            .or_default() += 1;
    }
    let days: Vec<String> = t["chart"]["days"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(days.len(), 90);
    assert_eq!(days.last().unwrap(), &date.to_string());
    let mut charted: BTreeMap<(String, String), u64> = BTreeMap::new();
    for s in t["chart"]["sites"].as_array().unwrap() {
        for (i, n) in s["turns"].as_array().unwrap().iter().enumerate() {
            if n.as_u64().unwrap() > 0 {
                charted.insert(
                    (days[i].clone(), s["surface"].as_str().unwrap().to_owned()),
                    n.as_u64().unwrap(),
                );
            }
        }
    }
    let in_chart: BTreeMap<(String, String), u64> = per_day
        .iter()
        .filter(|((d, _), _)| days.contains(d))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    assert_eq!(charted, in_chart);
    assert!(
        in_chart.len() < per_day.len(),
        "the turns of 200 days ago are not charted"
    );

    // Today and this week, per site.
    let monday = date - Duration::days(i64::from(date.weekday().number_days_from_monday()));
    let span = |from: time::Date| {
        let mut m: BTreeMap<String, u64> = BTreeMap::new();
        for (s, at) in &sent {
            if day_of(*at) >= from && day_of(*at) <= date {
                *m.entry(s.clone()).or_default() += 1;
            }
        }
        m
    };
    let got = |v: &Value| -> BTreeMap<String, u64> {
        v["sites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["surface"].as_str().unwrap().to_owned(),
                    s["turns"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(got(&t["today"]), span(date), "{}", t["today"]);
    assert_eq!(got(&t["week"]), span(monday), "{}", t["week"]);
    let gpt_today = t["today"]["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["surface"] == "browser-ext:chatgpt")
        .unwrap();
    assert_eq!(gpt_today["threads"], 1, "{gpt_today}");

    // Projects today: orbit then kite.
    let projects: Vec<(String, u64, u64)> = t["today"]["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["project"].as_str().unwrap_or("-").to_owned(),
                p["threads"].as_u64().unwrap(),
                p["turns"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        projects,
        vec![("orbit".into(), 1, 2), ("kite".into(), 1, 1)],
        "{}",
        t["today"]
    );
    assert_eq!(t["knowledge_pending"], 0);
    let health: Vec<&str> = t["health"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["surface"].as_str().unwrap())
        .collect();
    for s in sites {
        assert!(health.contains(&s), "{health:?}");
    }

    // The text form says the same.
    let out = relay.cli(&["today", "--utc-offset", OFFSET]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout.contains(&format!("Today ({date}, UTC+05:30)")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("orbit") && out.stdout.contains("kite"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("Last 90 days"), "{}", out.stdout);
    let bad = relay.cli(&["today", "--utc-offset", "east"]);
    assert!(!bad.status.success());
    assert!(bad.stderr.contains("+HH:MM"), "{}", bad.stderr);
}
