//! The `openai` chat model against a real HTTP server on loopback that speaks the chat-completions protocol
//! (`personkit_testkit::StandIn`). The server is a stand-in: no real model server or cloud API runs here. What it
//! proves is the client's side: what a request carries, how answers, errors, slow servers and refusals of
//! `response_format` are handled, and that the key never shows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use personkit_llm::{ChatModel, LlmConfig, LlmError, OpenAiChat, Request, Shape, estimate_tokens};
use personkit_testkit::{Reply, Seen, StandIn};
use serde_json::{Value, json};

const KEY: &str = "sk-test-4f9c2b7e1d0a";

fn shape() -> Shape {
    Shape::object([
        ("verdict", Shape::one_of(["keep", "drop"])),
        ("why", Shape::Text { max_chars: 200 }),
    ])
}

fn request(shape: Option<Shape>, timeout: Duration) -> Request {
    Request {
        system: "You judge entries. Answer in JSON.".into(),
        user: "Entry: prefers small pull requests because reviews stay honest.".into(),
        shape,
        max_tokens: 321,
        timeout,
    }
}

fn chat(base: &str) -> OpenAiChat {
    let mut cfg = LlmConfig::openai(base, "judge-model");
    cfg.api_key = Some(KEY.into());
    OpenAiChat::new(&cfg).unwrap()
}

/// A chat-completions answer holding `content`.
fn completion(content: &str, usage: Option<(u64, u64)>) -> Value {
    let mut v = json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
    });
    if let Some((p, c)) = usage {
        v["usage"] = json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c});
    }
    v
}

fn seen(server: &StandIn) -> Vec<Seen> {
    server.seen.lock().unwrap().clone()
}

fn format_of(s: &Seen) -> Option<String> {
    s.body["response_format"]["type"]
        .as_str()
        .map(str::to_owned)
}

#[test]
fn a_request_carries_the_messages_limits_and_strict_schema_and_usage_is_read() {
    let server = StandIn::start_replies(|_, _| {
        Reply::json(
            200,
            &completion(r#"{"verdict":"keep","why":"specific"}"#, Some((42, 7))),
        )
    });
    let model = chat(&server.base);
    let req = request(Some(shape()), Duration::from_secs(10));
    let out = model.complete(&req).unwrap();
    assert_eq!(out.text, r#"{"verdict":"keep","why":"specific"}"#);
    assert_eq!(
        (out.usage.prompt_tokens, out.usage.completion_tokens),
        (42, 7)
    );

    let got = seen(&server);
    assert_eq!(got.len(), 1);
    let s = &got[0];
    assert_eq!(s.method, "POST");
    assert_eq!(s.path, "/v1/chat/completions");
    assert_eq!(
        s.authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(s.body["model"], "judge-model");
    assert_eq!(s.body["max_tokens"], 321);
    assert_eq!(s.body["temperature"], 0);
    let messages = s.body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages[0]["content"], req.system.as_str());
    assert_eq!(messages[1]["role"], "user");
    assert_eq!(messages[1]["content"], req.user.as_str());
    let rf = &s.body["response_format"];
    assert_eq!(rf["type"], "json_schema");
    assert_eq!(rf["json_schema"]["name"], "answer");
    assert_eq!(rf["json_schema"]["strict"], true);
    assert_eq!(rf["json_schema"]["schema"], shape().json_schema());

    assert_eq!(model.kind(), "openai");
    assert_eq!(model.model_id(), "openai:judge-model");
    assert_eq!(
        model.endpoint(),
        Some(format!("{}/v1/chat/completions", server.base).as_str())
    );
    assert_eq!(model.context_tokens(), 8192);
}

#[test]
fn a_base_ending_in_v1_and_a_plain_request_without_usage() {
    let server = StandIn::start_replies(|_, _| Reply::json(200, &completion("plain words", None)));
    let mut cfg = LlmConfig::openai(&format!("{}/v1/", server.base), "m");
    cfg.context_tokens = Some(2048);
    let model = OpenAiChat::new(&cfg).unwrap();
    let req = request(None, Duration::from_secs(10));
    let out = model.complete(&req).unwrap();
    assert_eq!(out.text, "plain words");
    // No usage in the answer: estimated from the text sent and received.
    assert_eq!(
        out.usage.prompt_tokens as usize,
        estimate_tokens(&req.system) + estimate_tokens(&req.user)
    );
    assert_eq!(
        out.usage.completion_tokens as usize,
        estimate_tokens("plain words")
    );
    let got = seen(&server);
    assert_eq!(got[0].path, "/v1/chat/completions");
    assert!(
        got[0].body.get("response_format").is_none(),
        "{}",
        got[0].body
    );
    assert_eq!(got[0].authorization, None);
    assert_eq!(model.context_tokens(), 2048);
}

#[test]
fn a_server_error_is_retried_and_the_call_succeeds() {
    let server = StandIn::start_replies(|n, _| match n {
        0 => Reply::json(500, &json!({"error": {"message": "worker crashed"}})),
        _ => Reply::json(200, &completion("fine", Some((3, 1)))),
    });
    let t = Instant::now();
    let out = chat(&server.base)
        .complete(&request(None, Duration::from_secs(10)))
        .unwrap();
    assert_eq!(out.text, "fine");
    assert_eq!(seen(&server).len(), 2);
    assert!(
        t.elapsed() >= Duration::from_millis(500),
        "backed off first"
    );
}

#[test]
fn a_server_that_keeps_failing_is_tried_three_times_then_reported() {
    let server = StandIn::start_replies(|_, _| Reply::text(503, "overloaded, try later"));
    let err = chat(&server.base)
        .complete(&request(None, Duration::from_secs(20)))
        .unwrap_err();
    assert!(matches!(err, LlmError::Http { .. }), "{err:?}");
    assert!(err.to_string().contains("HTTP 503"), "{err}");
    assert!(err.to_string().contains("overloaded"), "{err}");
    assert!(err.transient());
    assert_eq!(seen(&server).len(), 3);
}

#[test]
fn retry_after_is_honoured() {
    let server = StandIn::start_replies(|n, _| match n {
        0 => Reply::json(429, &json!({"error": {"message": "rate limited"}}))
            .header("Retry-After", "1"),
        _ => Reply::json(200, &completion("after the wait", None)),
    });
    let t = Instant::now();
    let out = chat(&server.base)
        .complete(&request(None, Duration::from_secs(10)))
        .unwrap();
    assert_eq!(out.text, "after the wait");
    assert_eq!(seen(&server).len(), 2);
    // The default first wait is 0.5 s; the server asked for 1 s.
    assert!(t.elapsed() >= Duration::from_secs(1), "{:?}", t.elapsed());
}

#[test]
fn a_refused_json_schema_steps_down_to_json_object_and_stays_there() {
    let server = StandIn::start_replies(|_, s| match format_of(s).as_deref() {
        Some("json_schema") => Reply::json(
            400,
            &json!({"error": {"message": "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."}}),
        ),
        _ => Reply::json(
            200,
            &completion(r#"{"verdict":"drop","why":"vague"}"#, None),
        ),
    });
    let model = chat(&server.base);
    let req = request(Some(shape()), Duration::from_secs(10));
    assert_eq!(model.structured_mode(), "json_schema");
    model.complete(&req).unwrap();
    let got = seen(&server);
    let formats: Vec<_> = got.iter().map(format_of).collect();
    assert_eq!(
        formats,
        [
            Some("json_schema".to_owned()),
            Some("json_object".to_owned())
        ]
    );
    // Without a schema in response_format, the system prompt carries it.
    let system = got[1].body["messages"][0]["content"].as_str().unwrap();
    assert!(system.starts_with(&req.system), "{system}");
    assert!(
        system.contains(&shape().json_schema().to_string()),
        "{system}"
    );

    assert_eq!(model.structured_mode(), "json_object");
    model.complete(&req).unwrap();
    let got = seen(&server);
    assert_eq!(got.len(), 3, "the next call starts at json_object");
    assert_eq!(format_of(&got[2]).as_deref(), Some("json_object"));
}

#[test]
fn a_server_without_any_response_format_is_asked_by_prompt_alone() {
    let server = StandIn::start_replies(|_, s| match format_of(s) {
        Some(_) => Reply::json(422, &json!({"detail": "response_format is not supported"})),
        None => Reply::json(200, &completion(r#"{"verdict":"keep","why":"x"}"#, None)),
    });
    let model = chat(&server.base);
    let req = request(Some(shape()), Duration::from_secs(10));
    model.complete(&req).unwrap();
    model.complete(&req).unwrap();
    let got = seen(&server);
    let formats: Vec<_> = got.iter().map(format_of).collect();
    assert_eq!(
        formats,
        [
            Some("json_schema".to_owned()),
            Some("json_object".to_owned()),
            None,
            None
        ]
    );
    assert_eq!(model.structured_mode(), "prompt");
    let system = got[3].body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("\"enum\":[\"keep\",\"drop\"]"), "{system}");
}

#[test]
fn a_server_refusing_max_tokens_and_temperature_gets_what_it_takes() {
    // Worded as OpenAI's reasoning models word these refusals.
    let server = StandIn::start_replies(|_, s| {
        if s.body.get("max_tokens").is_some() {
            return Reply::json(
                400,
                &json!({"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", "param": "max_tokens"}}),
            );
        }
        if s.body.get("temperature").is_some() {
            return Reply::json(
                400,
                &json!({"error": {"message": "Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) value is supported.", "param": "temperature"}}),
            );
        }
        Reply::json(200, &completion("ok", None))
    });
    let model = chat(&server.base);
    let req = request(Some(shape()), Duration::from_secs(10));
    model.complete(&req).unwrap();
    model.complete(&req).unwrap();
    let got = seen(&server);
    assert_eq!(got.len(), 4, "two refusals, then every call is taken");
    for s in &got[2..] {
        assert_eq!(s.body["max_completion_tokens"], 321);
        assert!(s.body.get("max_tokens").is_none() && s.body.get("temperature").is_none());
        assert_eq!(format_of(s).as_deref(), Some("json_schema"));
    }
}

#[test]
fn another_client_error_is_neither_retried_nor_taken_for_a_format_refusal() {
    let server = StandIn::start_replies(|_, _| {
        Reply::json(
            404,
            &json!({"error": {"message": "model 'judge-model' not found"}}),
        )
    });
    let model = chat(&server.base);
    let err = model
        .complete(&request(Some(shape()), Duration::from_secs(10)))
        .unwrap_err();
    assert!(
        matches!(err, LlmError::Refused { status: 404, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("not found"), "{err}");
    assert!(!err.transient());
    assert!(err.hint().contains("model"), "{}", err.hint());
    assert_eq!(seen(&server).len(), 1);
    assert_eq!(model.structured_mode(), "json_schema");
}

#[test]
fn a_rejected_key_is_not_retried_says_what_to_do_and_never_shows_the_key() {
    // The server quotes the header it got, as some do: the client must cut the key out of what it reports.
    let server = StandIn::start_replies(|_, s| {
        let auth = s.authorization.clone().unwrap_or_default();
        Reply::json(
            401,
            &json!({"error": {"message": format!("Incorrect API key provided: {auth}"), "code": "invalid_api_key"}}),
        )
    });
    let model = chat(&server.base);
    let err = model
        .complete(&request(Some(shape()), Duration::from_secs(10)))
        .unwrap_err();
    assert_eq!(seen(&server).len(), 1, "a 401 is not retried");
    assert!(
        matches!(err, LlmError::Refused { status: 401, .. }),
        "{err:?}"
    );
    assert_eq!(err.code(), "llm_refused");
    assert!(err.hint().contains("api_key"), "{}", err.hint());
    let shown = [
        err.to_string(),
        format!("{err:?}"),
        format!("{model:?}"),
        err.hint().to_owned(),
    ];
    for s in &shown {
        assert!(!s.contains(KEY), "the key leaked: {s}");
    }
    assert!(
        shown[0].contains("Incorrect API key provided: Bearer <redacted>"),
        "{}",
        shown[0]
    );
    assert!(shown[2].contains("<redacted>"), "{}", shown[2]);
}

#[test]
fn a_slow_server_times_out_within_the_bound() {
    let server = StandIn::start_replies(|_, _| {
        Reply::json(200, &completion("too late", None)).after(Duration::from_secs(5))
    });
    let bound = Duration::from_millis(600);
    let t = Instant::now();
    let err = chat(&server.base)
        .complete(&request(None, bound))
        .unwrap_err();
    let took = t.elapsed();
    assert!(matches!(err, LlmError::Timeout(d) if d == bound), "{err:?}");
    assert!(
        took >= bound && took < bound + Duration::from_millis(700),
        "{took:?}"
    );
    assert_eq!(
        seen(&server).len(),
        1,
        "no time was left for another attempt"
    );
}

#[test]
fn no_server_at_all_is_a_transient_http_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let model = chat(&format!("http://127.0.0.1:{port}"));
    let t = Instant::now();
    let err = model
        .complete(&request(None, Duration::from_secs(10)))
        .unwrap_err();
    assert!(matches!(err, LlmError::Http { .. }), "{err:?}");
    assert!(err.transient());
    // Two retries: 0.5 s + 2 s of waiting.
    assert!(
        t.elapsed() >= Duration::from_millis(2500),
        "{:?}",
        t.elapsed()
    );
    assert!(!format!("{err} {err:?}").contains(KEY));
}

#[test]
fn refusals_empty_answers_and_missing_choices_are_inference_errors() {
    let server = StandIn::start_replies(|n, _| match n {
        0 => Reply::json(
            200,
            &json!({"choices": [{"message": {"role": "assistant", "content": null, "refusal": "I can't help with that."}, "finish_reason": "stop"}]}),
        ),
        1 => Reply::json(
            200,
            &json!({"choices": [{"message": {"role": "assistant", "content": ""}, "finish_reason": "length"}]}),
        ),
        2 => Reply::json(200, &json!({"choices": []})),
        3 => Reply::json(200, &json!({"error": {"message": "model is loading"}})),
        _ => Reply::text(200, "<html>proxy login</html>"),
    });
    let model = chat(&server.base);
    let req = request(None, Duration::from_secs(10));
    let mut errors = Vec::new();
    for _ in 0..5 {
        errors.push(model.complete(&req).unwrap_err());
    }
    let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert!(
        matches!(errors[0], LlmError::Inference(_)) && text[0].contains("refused"),
        "{}",
        text[0]
    );
    assert!(
        matches!(errors[1], LlmError::Inference(_))
            && text[1].contains("empty")
            && text[1].contains("length"),
        "{}",
        text[1]
    );
    assert!(
        matches!(errors[2], LlmError::Inference(_)) && text[2].contains("no choices"),
        "{}",
        text[2]
    );
    assert!(
        matches!(errors[3], LlmError::Inference(_)) && text[3].contains("model is loading"),
        "{}",
        text[3]
    );
    assert!(
        matches!(errors[4], LlmError::Http { .. }) && text[4].contains("not a chat completion"),
        "{}",
        text[4]
    );
    assert!(
        !text[4].contains("proxy login"),
        "the body is not quoted: {}",
        text[4]
    );
    assert_eq!(seen(&server).len(), 5, "none of these is retried");
}

#[test]
fn an_oversized_answer_is_refused_not_read() {
    let big = "x".repeat(5 * 1024 * 1024);
    let server = StandIn::start_replies(move |_, _| Reply::json(200, &completion(&big, None)));
    let err = chat(&server.base)
        .complete(&request(None, Duration::from_secs(20)))
        .unwrap_err();
    assert!(err.to_string().contains("larger than 4 MB"), "{err}");
    assert_eq!(seen(&server).len(), 1);
}

#[test]
fn an_incomplete_openai_config_says_what_to_set() {
    let mut cfg = LlmConfig::of_kind(personkit_llm::LlmKind::Openai);
    let err = personkit_llm::open(&cfg).unwrap_err();
    assert!(
        matches!(err, LlmError::NotConfigured(_)) && err.to_string().contains("base_url"),
        "{err}"
    );
    cfg.base_url = Some("http://127.0.0.1:9".into());
    let err = personkit_llm::open(&cfg).unwrap_err();
    assert!(
        matches!(err, LlmError::NotConfigured(_))
            && err.to_string().contains("PERSONKIT_LLM_MODEL"),
        "{err}"
    );
    cfg.model = Some("m".into());
    cfg.base_url = Some("127.0.0.1:9".into());
    let err = personkit_llm::open(&cfg).unwrap_err();
    assert!(
        matches!(err, LlmError::Config(_)) && err.to_string().contains("http://"),
        "{err}"
    );
    cfg.base_url = Some("http://127.0.0.1:9".into());
    let m = personkit_llm::open(&cfg).unwrap().expect("a model");
    assert_eq!((m.kind(), m.model_id()), ("openai", "openai:m"));
    assert_eq!(m.endpoint(), Some("http://127.0.0.1:9/v1/chat/completions"));
}
