//! The `openai` chat model: any OpenAI-compatible `POST {base_url}/v1/chat/completions` (OpenAI, Ollama,
//! llama.cpp's server, vLLM, LM Studio).
//!
//! A request is `{model, messages: [system, user], max_tokens, temperature: 0}`. With a shape it also asks for
//! JSON under the shape's schema (`response_format: {type: "json_schema", …, strict: true}`). Servers that refuse
//! that (HTTP 400/422 naming `response_format` or `json_schema`) are asked for `{type: "json_object"}`, then for no
//! format at all, with the schema written into the system prompt instead; the model remembers the step down for
//! its later calls. The caller checks every answer against the shape either way. Likewise a server that refuses
//! `max_tokens` (asking for `max_completion_tokens`) or a temperature of 0, as OpenAI's reasoning models do, gets
//! the request it takes from then on.
//!
//! A call never outlives [`Request::timeout`]: retries of a transient failure (no connection, 429, 5xx; at most
//! two, after 0.5 s and 2 s or the server's `Retry-After` up to 10 s) happen only while time is left. Other 4xx
//! answers are [`LlmError::Refused`] at once. The API key goes only into the `Authorization` header: `Debug`,
//! errors and their quoted answer bodies never hold it.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::{ChatModel, Completion, LlmConfig, LlmError, Request, Usage, estimate_tokens};

/// The prompt size assumed when the config does not say.
pub const DEFAULT_CONTEXT_TOKENS: usize = 8192;
/// Most bytes of an answer read.
const MAX_ANSWER_BYTES: u64 = 4 * 1024 * 1024;
/// Most bytes of an error answer read (only its start is quoted).
const MAX_ERROR_BYTES: u64 = 64 * 1024;
/// Characters of an error answer quoted in a message.
const QUOTE_CHARS: usize = 300;
/// The waits before the second and the third attempt after a transient failure.
const BACKOFF: [Duration; 2] = [Duration::from_millis(500), Duration::from_secs(2)];
/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);
/// Less time than this left before the deadline is not worth another attempt.
const MIN_ATTEMPT: Duration = Duration::from_millis(250);

/// Request parameters a server refused, as bits: newer OpenAI models take `max_completion_tokens` instead of
/// `max_tokens`, and only their default temperature.
const USE_MAX_COMPLETION_TOKENS: u8 = 1;
const OMIT_TEMPERATURE: u8 = 2;

/// How a JSON answer is asked for, from the most to the least the server must support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Format {
    /// `response_format: {type: "json_schema", json_schema: {name, schema, strict: true}}`.
    Schema,
    /// `response_format: {type: "json_object"}`, the schema in the system prompt.
    JsonObject,
    /// No `response_format`, the schema in the system prompt.
    Prompt,
}

impl Format {
    fn from_u8(v: u8) -> Format {
        match v {
            0 => Format::Schema,
            1 => Format::JsonObject,
            _ => Format::Prompt,
        }
    }

    fn next(self) -> Option<Format> {
        match self {
            Format::Schema => Some(Format::JsonObject),
            Format::JsonObject => Some(Format::Prompt),
            Format::Prompt => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Format::Schema => "json_schema",
            Format::JsonObject => "json_object",
            Format::Prompt => "prompt",
        }
    }
}

/// A configured chat endpoint. Cheap to share across threads; `Debug` never prints the key.
pub struct OpenAiChat {
    agent: ureq::Agent,
    url: String,
    /// `url` as health, errors and the audit log show it ([`crate::config::shown_url`]).
    shown: String,
    model: String,
    model_id: String,
    api_key: Option<String>,
    context_tokens: usize,
    /// The [`Format`] structured requests start with (only ever steps down).
    format: AtomicU8,
    /// The refused-parameter bits requests are built with (only ever gains bits).
    params: AtomicU8,
}

impl std::fmt::Debug for OpenAiChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiChat")
            .field("url", &self.shown)
            .field("model", &self.model)
            .field("context_tokens", &self.context_tokens)
            .field("format", &self.format().as_str())
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Why one attempt failed, and what the call does about it.
enum Failure {
    /// Worth another attempt (after the server's `Retry-After`, when it gave one).
    Transient(LlmError, Option<Duration>),
    /// The server does not take the `response_format` sent.
    FormatRefused(LlmError),
    /// The server does not take a parameter sent (one of the refused-parameter bits).
    ParamRefused(u8),
    /// Final.
    Fatal(LlmError),
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<AnswerUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    message: Option<Message>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    refusal: Option<String>,
}

#[derive(Deserialize)]
struct AnswerUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

impl OpenAiChat {
    /// The endpoint `cfg` names (`base_url` with or without a trailing `/v1`, `model`, optional `api_key` and
    /// `context_tokens`).
    pub fn new(cfg: &LlmConfig) -> Result<Self, LlmError> {
        let base = cfg
            .base_url
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty());
        let base = base.ok_or_else(|| {
            LlmError::NotConfigured(
                "openai needs base_url (PERSONKIT_LLM_BASE_URL), e.g. http://127.0.0.1:11434"
                    .into(),
            )
        })?;
        let model = cfg
            .model
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty());
        let model = model.ok_or_else(|| {
            LlmError::NotConfigured(
                "openai needs model (PERSONKIT_LLM_MODEL): the model name the server knows".into(),
            )
        })?;
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(LlmError::Config(format!(
                "base_url {base:?} must start with http:// or https://"
            )));
        }
        let base = base.trim_end_matches('/');
        let url = if base.ends_with("/v1") {
            format!("{base}/chat/completions")
        } else {
            format!("{base}/v1/chat/completions")
        };
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        Ok(Self {
            agent,
            shown: crate::config::shown_url(&url),
            url,
            model: model.to_owned(),
            model_id: format!("openai:{model}"),
            api_key: cfg.api_key.clone().filter(|k| !k.is_empty()),
            context_tokens: cfg.context_tokens.unwrap_or(DEFAULT_CONTEXT_TOKENS),
            format: AtomicU8::new(Format::Schema as u8),
            params: AtomicU8::new(0),
        })
    }

    fn format(&self) -> Format {
        Format::from_u8(self.format.load(Ordering::Relaxed))
    }

    /// How structured requests are asked for now: `json_schema`, `json_object` or `prompt` (for health).
    pub fn structured_mode(&self) -> &'static str {
        self.format().as_str()
    }

    /// Structured requests start at `to` from now on (never steps back up).
    fn step_down(&self, to: Format) {
        self.format.fetch_max(to as u8, Ordering::Relaxed);
    }

    fn body(&self, req: &Request, format: Option<Format>, params: u8) -> Value {
        let mut system = req.system.clone();
        if let (Some(shape), Some(Format::JsonObject | Format::Prompt)) = (&req.shape, format) {
            system.push_str(
                "\n\nAnswer with one JSON value and nothing else. It must match this JSON Schema:\n",
            );
            system.push_str(&shape.json_schema().to_string());
        }
        let mut body = json!({
            "model": self.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": req.user},
            ],
            "stream": false,
        });
        if let Some(map) = body.as_object_mut() {
            let limit = if params & USE_MAX_COMPLETION_TOKENS != 0 {
                "max_completion_tokens"
            } else {
                "max_tokens"
            };
            map.insert(limit.into(), req.max_tokens.into());
            if params & OMIT_TEMPERATURE == 0 {
                map.insert("temperature".into(), 0.into());
            }
        }
        let response_format = match (&req.shape, format) {
            (Some(shape), Some(Format::Schema)) => Some(json!({
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": shape.json_schema(), "strict": true},
            })),
            (Some(_), Some(Format::JsonObject)) => Some(json!({"type": "json_object"})),
            _ => None,
        };
        if let (Some(rf), Some(map)) = (response_format, body.as_object_mut()) {
            map.insert("response_format".into(), rf);
        }
        body
    }

    /// `text` with the API key cut out, at most [`QUOTE_CHARS`] characters.
    fn quote(&self, text: &str) -> String {
        let text = match &self.api_key {
            Some(k) => text.replace(k.as_str(), "<redacted>"),
            None => text.to_owned(),
        };
        let text = text.trim();
        let mut out: String = text.chars().take(QUOTE_CHARS).collect();
        if out.len() < text.len() {
            out.push('…');
        }
        out
    }

    fn http(&self, message: String) -> LlmError {
        LlmError::Http {
            url: self.shown.clone(),
            message,
        }
    }

    /// A transport error as a failure: no answer within the time is [`LlmError::Timeout`]; a lost connection is
    /// worth another attempt.
    fn transport(&self, e: ureq::Error, timeout: Duration) -> Failure {
        let timed_out = match &e {
            ureq::Error::Timeout(_) => true,
            ureq::Error::Io(io) => matches!(
                io.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ),
            _ => false,
        };
        if timed_out {
            return Failure::Transient(LlmError::Timeout(timeout), None);
        }
        let message = self.quote(&e.to_string());
        match e {
            ureq::Error::BodyExceedsLimit(_) => Failure::Fatal(self.http(format!(
                "the answer is larger than {} MB",
                MAX_ANSWER_BYTES / (1024 * 1024)
            ))),
            ureq::Error::Io(_)
            | ureq::Error::ConnectionFailed
            | ureq::Error::HostNotFound
            | ureq::Error::Protocol(_)
            | ureq::Error::BodyStalled => Failure::Transient(self.http(message), None),
            _ => Failure::Fatal(self.http(message)),
        }
    }

    /// One HTTP exchange with at most `left` to spend; the answer's body on a 2xx.
    fn attempt(
        &self,
        body: &Value,
        left: Duration,
        timeout: Duration,
        sent_format: bool,
        params: u8,
    ) -> Result<String, Failure> {
        let mut req = self
            .agent
            .post(&self.url)
            .config()
            .timeout_global(Some(left))
            .build()
            .header("Content-Type", "application/json");
        if let Some(key) = &self.api_key {
            req = req.header("Authorization", &format!("Bearer {key}"));
        }
        let mut resp = req
            .send_json(body)
            .map_err(|e| self.transport(e, timeout))?;
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            return resp
                .body_mut()
                .with_config()
                .limit(MAX_ANSWER_BYTES)
                .read_to_string()
                .map_err(|e| self.transport(e, timeout));
        }
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
        let text = resp
            .body_mut()
            .with_config()
            .limit(MAX_ERROR_BYTES)
            .lossy_utf8(true)
            .read_to_string()
            .unwrap_or_default();
        let quoted = self.quote(&text);
        if status == 429 || status >= 500 {
            return Err(Failure::Transient(
                self.http(format!("HTTP {status}: {quoted}")),
                retry_after,
            ));
        }
        let refused = LlmError::Refused {
            url: self.shown.clone(),
            status,
            message: quoted,
        };
        let lower = text.to_ascii_lowercase();
        if sent_format
            && matches!(status, 400 | 422)
            && (lower.contains("response_format") || lower.contains("json_schema"))
        {
            return Err(Failure::FormatRefused(refused));
        }
        if status == 400 {
            if params & USE_MAX_COMPLETION_TOKENS == 0 && lower.contains("max_completion_tokens") {
                return Err(Failure::ParamRefused(USE_MAX_COMPLETION_TOKENS));
            }
            if params & OMIT_TEMPERATURE == 0 && lower.contains("temperature") {
                return Err(Failure::ParamRefused(OMIT_TEMPERATURE));
            }
        }
        Err(Failure::Fatal(refused))
    }

    /// The completion in a 2xx answer's body.
    fn read_answer(&self, text: &str, req: &Request) -> Result<Completion, LlmError> {
        // The body is not quoted: it may hold the model's words about the material.
        let answer: Answer = serde_json::from_str(text)
            .map_err(|e| self.http(format!("the answer is not a chat completion: {e}")))?;
        let Some(choice) = answer.choices.into_iter().next() else {
            let why = match &answer.error {
                Some(err) => format!(
                    "the endpoint answered with an error: {}",
                    self.quote(&err.to_string())
                ),
                None => "the answer has no choices".to_owned(),
            };
            return Err(LlmError::Inference(why));
        };
        let finish = choice.finish_reason.unwrap_or_else(|| "none given".into());
        let message = choice.message.ok_or_else(|| {
            LlmError::Inference(format!(
                "the answer has no message (finish_reason: {finish})"
            ))
        })?;
        if let Some(refusal) = message.refusal.filter(|r| !r.trim().is_empty()) {
            return Err(LlmError::Inference(format!(
                "the model refused: {}",
                self.quote(&refusal)
            )));
        }
        let content = match message.content {
            Some(Value::String(s)) => s,
            // Some servers send content as parts: `[{type: "text", text}, …]`.
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
            _ => String::new(),
        };
        if content.trim().is_empty() {
            return Err(LlmError::Inference(format!(
                "the model's answer is empty (finish_reason: {finish})"
            )));
        }
        let counted = answer.usage.unwrap_or(AnswerUsage {
            prompt_tokens: None,
            completion_tokens: None,
        });
        let usage = Usage {
            prompt_tokens: counted.prompt_tokens.unwrap_or_else(|| {
                (estimate_tokens(&req.system) + estimate_tokens(&req.user)) as u64
            }),
            completion_tokens: counted
                .completion_tokens
                .unwrap_or_else(|| estimate_tokens(&content) as u64),
        };
        Ok(Completion {
            text: content,
            usage,
        })
    }
}

impl ChatModel for OpenAiChat {
    fn kind(&self) -> &'static str {
        "openai"
    }

    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn endpoint(&self) -> Option<&str> {
        Some(&self.shown)
    }

    fn context_tokens(&self) -> usize {
        self.context_tokens
    }

    fn complete(&self, req: &Request) -> Result<Completion, LlmError> {
        let deadline = Instant::now() + req.timeout;
        let mut retries = 0;
        // This call's own step-downs, so it makes progress whatever other calls do.
        let mut at_least = Format::Schema;
        let mut params = 0;
        loop {
            let format = req.shape.as_ref().map(|_| self.format().max(at_least));
            let params_now = self.params.load(Ordering::Relaxed) | params;
            let body = self.body(req, format, params_now);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(LlmError::Timeout(req.timeout));
            }
            let sent_format = matches!(format, Some(Format::Schema | Format::JsonObject));
            match self.attempt(&body, left, req.timeout, sent_format, params_now) {
                Ok(text) => return self.read_answer(&text, req),
                Err(Failure::FormatRefused(e)) => match format.and_then(Format::next) {
                    Some(next) => {
                        self.step_down(next);
                        at_least = next;
                    }
                    None => return Err(e),
                },
                // Each refusal names a bit not yet set, so this happens at most twice a call.
                Err(Failure::ParamRefused(bit)) => {
                    self.params.fetch_or(bit, Ordering::Relaxed);
                    params |= bit;
                }
                Err(Failure::Transient(e, retry_after)) => {
                    let Some(backoff) = BACKOFF.get(retries) else {
                        return Err(e);
                    };
                    let wait = retry_after.unwrap_or(*backoff);
                    if Instant::now() + wait + MIN_ATTEMPT > deadline {
                        return Err(e);
                    }
                    std::thread::sleep(wait);
                    retries += 1;
                }
                Err(Failure::Fatal(e)) => return Err(e),
            }
        }
    }
}
