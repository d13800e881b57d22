//! Throughput of the network parsers (`personkit_shared::network`), natively, per format, against a baseline
//! measured in the same run: `serde_json` parsing the same JSON texts into `serde_json::Value` (for a stream, each
//! event's or line's or frame's JSON, already cut out, which is the least any parser of these formats does —
//! for Gemini the frame and the JSON text inside its envelope —; for a conversation, the whole body). Streams
//! are fed in 16 KiB chunks, as a fetch body arrives.
//! Run: `cargo bench -p personkit-shared --bench netparse` (`BENCH_ROUNDS` sets the rounds, default 7;
//! parser and baseline alternate round by round; the medians and the median per-round ratio are reported;
//! `BENCH_ONLY=<surface>` runs one stream format).

use std::hint::black_box;
use std::time::Instant;

use personkit_shared::network::{self, Surface};
use serde_json::{Value, json};

const TARGET: usize = 1 << 20;

/// A token-sized piece of Markdown with unicode, code and table text, varied by `i`.
fn piece(i: usize) -> String {
    match i % 6 {
        0 => format!("Wort {i} "),
        1 => "über ".to_owned(),
        2 => "`code` ".to_owned(),
        3 => "| a | b |\n".to_owned(),
        4 => "数据 ".to_owned(),
        _ => "✓\n".to_owned(),
    }
}

fn sse(event: Option<&str>, data: &str, out: &mut String) {
    if let Some(e) = event {
        out.push_str("event: ");
        out.push_str(e);
        out.push('\n');
    }
    out.push_str("data: ");
    out.push_str(data);
    out.push_str("\n\n");
}

fn chatgpt_stream() -> String {
    let mut s = String::new();
    sse(Some("delta_encoding"), "\"v1\"", &mut s);
    let add = json!({"p": "", "o": "add", "c": 0, "v": {"conversation_id": "c1", "message": {"id": "m1",
        "author": {"role": "assistant"}, "create_time": 1.0, "content": {"content_type": "text", "parts": [""]},
        "status": "in_progress", "metadata": {"model_slug": "gpt-5"}, "recipient": "all", "channel": "final"}}});
    sse(Some("delta"), &add.to_string(), &mut s);
    sse(
        Some("delta"),
        &json!({"p": "/message/content/parts/0", "o": "append", "v": "Start "}).to_string(),
        &mut s,
    );
    let mut i = 0;
    while s.len() < TARGET {
        sse(Some("delta"), &json!({"v": piece(i)}).to_string(), &mut s);
        i += 1;
    }
    let end =
        json!({"v": [{"p": "/message/status", "o": "replace", "v": "finished_successfully"}]});
    sse(Some("delta"), &end.to_string(), &mut s);
    sse(None, "[DONE]", &mut s);
    s
}

fn claude_stream() -> String {
    let mut s = String::new();
    let start = json!({"type": "message_start", "message": {"id": "x", "uuid": "u1", "parent_uuid": "u0",
        "model": "claude", "role": "assistant"}});
    sse(Some("message_start"), &start.to_string(), &mut s);
    let block = json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}});
    sse(Some("content_block_start"), &block.to_string(), &mut s);
    let mut i = 0;
    while s.len() < TARGET {
        let d = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece(i)}});
        sse(Some("content_block_delta"), &d.to_string(), &mut s);
        i += 1;
    }
    sse(
        Some("content_block_stop"),
        r#"{"type":"content_block_stop","index":0}"#,
        &mut s,
    );
    sse(Some("message_stop"), r#"{"type":"message_stop"}"#, &mut s);
    s
}

fn deepseek_stream() -> String {
    let mut s = String::new();
    sse(
        Some("ready"),
        r#"{"request_message_id":1,"response_message_id":2}"#,
        &mut s,
    );
    let snap = json!({"v": {"response": {"message_id": 2, "parent_id": 1, "role": "ASSISTANT", "status": "WIP",
        "fragments": [{"id": 1, "type": "RESPONSE", "content": ""}]}}});
    sse(None, &snap.to_string(), &mut s);
    sse(
        None,
        &json!({"p": "response/fragments/-1/content", "o": "APPEND", "v": "A"}).to_string(),
        &mut s,
    );
    let mut i = 0;
    while s.len() < TARGET {
        sse(None, &json!({"v": piece(i)}).to_string(), &mut s);
        i += 1;
    }
    sse(
        None,
        r#"{"p":"response/status","o":"SET","v":"FINISHED"}"#,
        &mut s,
    );
    sse(Some("finish"), "{}", &mut s);
    s
}

fn ndjson(lines: impl Iterator<Item = Value>) -> String {
    let mut s = String::new();
    for l in lines {
        s.push_str(&l.to_string());
        s.push('\n');
    }
    s
}

fn copilot_stream() -> String {
    let mut s = ndjson(
        [json!({"event": "startMessage", "messageId": "m1", "conversationId": "c"})].into_iter(),
    );
    let mut i = 0;
    while s.len() < TARGET {
        s.push_str(
            &json!({"event": "appendText", "messageId": "m1", "partId": "0", "text": piece(i)})
                .to_string(),
        );
        s.push('\n');
        i += 1;
    }
    s.push_str(&json!({"event": "done", "messageId": "m1"}).to_string());
    s.push('\n');
    s
}

fn grok_stream() -> String {
    let mut s = ndjson([json!({"result": {"conversation": {"conversationId": "c"}}})].into_iter());
    let mut text = String::new();
    let mut i = 0;
    while s.len() < TARGET {
        let p = piece(i);
        text.push_str(&p);
        s.push_str(
            &json!({"result": {"response": {"token": p, "isThinking": false, "responseId": "r1"}}})
                .to_string(),
        );
        s.push('\n');
        i += 1;
    }
    s.push_str(
        &json!({"result": {"response": {"modelResponse": {"responseId": "r1", "message": text,
        "sender": "ASSISTANT", "parentResponseId": "u1"}}}})
        .to_string(),
    );
    s.push('\n');
    s
}

fn gemini_stream() -> String {
    let mut s = String::from(")]}'\n\n");
    let mut text = String::new();
    let mut i = 0;
    while s.len() < TARGET {
        for _ in 0..12 {
            text.push_str(&piece(i));
            i += 1;
        }
        let mut cand = vec![json!("rc_1"), json!([text])];
        cand.resize(38, Value::Null);
        let inner = json!([null, ["c_1", "r_1"], null, null, [cand]]).to_string();
        let frame = json!([["wrb.fr", null, inner]]).to_string();
        s.push_str(&format!("{}\n{frame}\n", frame.encode_utf16().count() + 2));
    }
    let e = r#"[["e",4,null,null,1]]"#;
    s.push_str(&format!("{}\n{e}\n", e.len() + 2));
    s
}

fn chatgpt_conversation(n: usize) -> String {
    let mut mapping = serde_json::Map::new();
    mapping.insert(
        "root".into(),
        json!({"id": "root", "message": null, "parent": null, "children": ["n0"]}),
    );
    for i in 0..n {
        let text: String = (0..200).map(|k| piece(i + k)).collect();
        let parent = if i == 0 {
            "root".to_owned()
        } else {
            format!("n{}", i - 1)
        };
        mapping.insert(format!("n{i}"), json!({"id": format!("n{i}"), "parent": parent,
            "children": if i + 1 < n { vec![format!("n{}", i + 1)] } else { vec![] },
            "message": {"id": format!("n{i}"), "author": {"role": if i % 2 == 0 {"user"} else {"assistant"}},
                "create_time": 1.0 + i as f64, "content": {"content_type": "text", "parts": [text]},
                "status": "finished_successfully", "metadata": {"model_slug": "gpt-5"}, "recipient": "all"}}));
    }
    json!({"conversation_id": "c", "current_node": format!("n{}", n - 1), "mapping": mapping})
        .to_string()
}

fn claude_conversation(n: usize) -> String {
    let msgs: Vec<Value> = (0..n)
        .map(|i| {
            let text: String = (0..200).map(|k| piece(i + k)).collect();
            json!({"uuid": format!("m{i}"), "sender": if i % 2 == 0 {"human"} else {"assistant"},
                "created_at": "2026-11-20T09:00:00Z",
                "parent_message_uuid": if i == 0 { "00000000-0000-4000-8000-000000000000".to_owned() } else { format!("m{}", i - 1) },
                "content": [{"type": "text", "text": text, "citations": []}]})
        })
        .collect();
    json!({"uuid": "c", "current_leaf_message_uuid": format!("m{}", n - 1), "chat_messages": msgs})
        .to_string()
}

/// The JSON texts inside a stream body, cut out before timing (the baseline's input).
fn json_texts(surface: Surface, body: &str) -> Vec<String> {
    match surface {
        Surface::Copilot | Surface::Grok => body.lines().map(str::to_owned).collect(),
        Surface::Gemini => body
            .lines()
            .skip(1)
            .filter(|l| l.starts_with('['))
            .map(str::to_owned)
            .collect(),
        _ => body
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(str::to_owned)
            .collect(),
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Runs the parser and the baseline alternately, `rounds` times each after one warm-up of both (so a busy
/// machine slows both alike): the median parser time, the median baseline time and the median of the per-round
/// ratios.
fn interleaved(rounds: usize, mut parser: impl FnMut(), mut base: impl FnMut()) -> (f64, f64, f64) {
    parser();
    base();
    let (mut ps, mut bs, mut rs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        parser();
        let p = t.elapsed().as_secs_f64();
        let t = Instant::now();
        base();
        let b = t.elapsed().as_secs_f64();
        ps.push(p);
        bs.push(b);
        rs.push(p / b);
    }
    (median(ps), median(bs), median(rs))
}

fn main() {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    println!(
        "{:<22} {:>9} {:>12} {:>14} {:>8}",
        "format", "bytes", "parser MB/s", "serde_json MB/s", "ratio"
    );
    let streams = [
        (Surface::ChatGpt, chatgpt_stream()),
        (Surface::Claude, claude_stream()),
        (Surface::Gemini, gemini_stream()),
        (Surface::Copilot, copilot_stream()),
        (Surface::Grok, grok_stream()),
        (Surface::DeepSeek, deepseek_stream()),
    ];
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    for (s, body) in &streams {
        if !name(*s).contains(only.as_str()) {
            continue;
        }
        let bytes = body.as_bytes();
        // The body must parse into one turn, or the figure measures an error path.
        let mut p = network::stream_parser(*s);
        let mut n = p.push(bytes).map(|t| t.len()).unwrap_or(0);
        n += p
            .finish()
            .map(|t| t.len())
            .unwrap_or_else(|e| panic!("{}: {e}", s.id()));
        assert!(n >= 1, "{}: no turn", s.id());
        let texts = json_texts(*s, body);
        let (parser, base, ratio) = interleaved(
            rounds,
            || {
                let mut p = network::stream_parser(*s);
                let mut k = 0;
                for c in bytes.chunks(16 * 1024) {
                    k += p.push(c).map(|t| t.len()).unwrap_or(0);
                }
                k += p.finish().map(|t| t.len()).unwrap_or(0);
                black_box(k);
            },
            || {
                for t in &texts {
                    let v = serde_json::from_str::<Value>(t).ok();
                    // Gemini's payload is JSON inside a JSON string: parsing "the bytes" includes the inner text.
                    if *s == Surface::Gemini
                        && let Some(inner) = v
                            .as_ref()
                            .and_then(|v| v.pointer("/0/2"))
                            .and_then(Value::as_str)
                    {
                        black_box(serde_json::from_str::<Value>(inner).ok());
                    }
                    black_box(v);
                }
            },
        );
        report(
            &format!("{} stream", name(*s)),
            bytes.len(),
            parser,
            base,
            ratio,
        );
    }
    for (s, body) in [
        (Surface::ChatGpt, chatgpt_conversation(500)),
        (Surface::Claude, claude_conversation(500)),
    ] {
        if !only.is_empty() {
            continue;
        }
        let bytes = body.as_bytes();
        let turns = network::parse_conversation(s, bytes)
            .map(|c| c.turns.len())
            .unwrap_or(0);
        assert_eq!(turns, 500, "{}", s.id());
        let (parser, base, ratio) = interleaved(
            rounds,
            || {
                black_box(network::parse_conversation(s, bytes).ok());
            },
            || {
                black_box(serde_json::from_slice::<Value>(bytes).ok());
            },
        );
        report(
            &format!("{} conv 500", name(s)),
            bytes.len(),
            parser,
            base,
            ratio,
        );
    }
}

fn name(s: Surface) -> &'static str {
    s.id().trim_start_matches("browser-ext:")
}

fn report(label: &str, bytes: usize, parser: f64, base: f64, ratio: f64) {
    let mb = bytes as f64 / 1e6;
    println!(
        "{label:<22} {bytes:>9} {:>12.1} {:>14.1} {:>7.2}x",
        mb / parser,
        mb / base,
        ratio
    );
}
