//! The tools: arguments (JSON Schema from the types; unknown keys refused), structured outputs (with output
//! schemas) and the short text form of each. Bad arguments are answered as tool errors (`isError`) whose text
//! says what was wrong and what to send, so a model can correct itself; nothing a caller sends reaches a panic.

use std::sync::Arc;

use personkit_search::params::{Params, build_query_with};
use personkit_search::{SearchError, normalize_bound};
use personkit_store::read::{
    self, MessageDetail, PageInfo, ReadError, ThreadSummary, Turn, compact,
};
use rmcp::handler::server::common::{schema_for_empty_input, schema_for_input, schema_for_output};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, JsonObject, ServerCapabilities, ServerConfig,
};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::backend::{Backend, Fail};
use crate::budget;

/// `full` (every field) or `compact` (one line per record, full ids beside).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Full,
    Compact,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// Words or a question.
    pub query: String,
    /// Hits wanted, 1-50 (default 10).
    pub k: Option<u32>,
    /// Only this surface, e.g. browser-ext:chatgpt.
    pub surface: Option<String>,
    /// Only this thread (id or 8+ character prefix).
    pub thread: Option<String>,
    /// Only this role: user, assistant, system or tool.
    pub role: Option<String>,
    /// From this time: RFC 3339, YYYY-MM-DD, or a span back from now (7d, 12h).
    pub since: Option<String>,
    /// Before this time (same forms).
    pub until: Option<String>,
    pub format: Option<Format>,
    /// Answer size cap in characters (1000-200000, default 20000).
    pub max_chars: Option<u32>,
    /// Also return the user's approved knowledge entries matching the query (at most 5).
    pub knowledge: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListThreadsArgs {
    /// Only this surface, e.g. browser-ext:claude.
    pub surface: Option<String>,
    /// Last activity from this time: RFC 3339, YYYY-MM-DD, or a span (7d).
    pub since: Option<String>,
    /// Last activity before this time.
    pub until: Option<String>,
    /// Words that must all occur in the title or in one turn.
    pub words: Option<String>,
    /// hot, warm or cold: how much the user used the thread lately (opened, read by an agent, new turns).
    pub tier: Option<String>,
    /// Threads per page, 1-200 (default 20).
    pub limit: Option<u32>,
    /// next_cursor of the previous page.
    pub cursor: Option<String>,
    pub format: Option<Format>,
    /// Answer size cap in characters (1000-200000, default 20000).
    pub max_chars: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetThreadArgs {
    /// Thread id or 8+ character prefix.
    pub thread_id: String,
    /// Only the current revision of each turn (default false: edits and regenerations too).
    pub current_only: Option<bool>,
    /// Turns per page, 1-200 (default 50).
    pub limit: Option<u32>,
    /// next_cursor of the previous page.
    pub cursor: Option<String>,
    pub format: Option<Format>,
    /// Answer size cap in characters (1000-200000, default 20000).
    pub max_chars: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetMessageArgs {
    /// Message id or 8+ character prefix.
    pub message_id: String,
    /// Start the content at this character (to continue a cut one).
    pub offset: Option<u64>,
    /// Answer size cap in characters (1000-200000, default 20000).
    pub max_chars: Option<u32>,
}

/// One search hit.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SearchHit {
    pub message_id: String,
    /// `message` or `event`.
    pub kind: String,
    pub thread_id: Option<String>,
    pub thread_title: Option<String>,
    pub surface: String,
    pub role: Option<String>,
    pub time: Option<String>,
    /// Matched words wrapped in `**`.
    pub snippet: String,
    /// Signals that found it: fts, vector, entity, recency.
    pub matched_via: Vec<String>,
    pub score: f64,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SkippedSignal {
    pub signal: String,
    pub code: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SearchOutput {
    pub query: String,
    /// Embedding model of the vector signal, when one ran.
    pub model: Option<String>,
    pub signals_used: Vec<String>,
    /// Signals that could not run (e.g. `vector` when the embedder fails), with why: the hits come from the
    /// others.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub signals_skipped: Vec<SkippedSignal>,
    /// Hits, best first (full format).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hits: Option<Vec<SearchHit>>,
    /// One line per hit (compact format).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compact: Option<compact::Compact>,
    /// Hits were left off to stay within max_chars.
    pub truncated: bool,
    /// Approved knowledge entries matching the query (when asked for with `knowledge: true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub knowledge: Option<Vec<crate::knowledge::KnowledgeEntry>>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ThreadsOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<Vec<ThreadSummary>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compact: Option<compact::Compact>,
    pub page: PageInfo,
    /// Records were left off (or contents cut) to stay within max_chars; next_cursor continues.
    pub truncated: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ThreadOutput {
    pub thread: ThreadSummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turns: Option<Vec<Turn>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compact: Option<compact::Compact>,
    pub page: PageInfo,
    pub truncated: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct MessageOutput {
    pub message: MessageDetail,
    /// Length of the whole content in characters.
    pub content_chars: u64,
    /// Where `message.content` starts in the whole content.
    pub offset: u64,
    /// The content goes on past what is shown; call again with the offset the cut marker gives.
    pub truncated: bool,
}

/// What `corpus_health` answers: the store's one health report, the same figures `personkit corpus health` shows.
pub type HealthOutput = read::corpus::HealthReport;

pub(crate) fn args<T: DeserializeOwned>(raw: JsonObject) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::Object(raw))
        .map_err(|e| format!("bad arguments: {e}. See the tool's input schema."))
}

pub(crate) fn input<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    schema_for_input::<T>().unwrap_or_else(|_| schema_for_empty_input())
}

pub(crate) fn answer<T: Serialize>(text: String, out: &T) -> Result<CallToolResult, String> {
    let value =
        serde_json::to_value(out).map_err(|e| format!("the answer could not be encoded: {e}"))?;
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(value);
    Ok(r)
}

pub(crate) fn fail(tool: &str, f: Fail) -> String {
    match f {
        Fail::Caller(m) => m,
        Fail::Internal(m) => {
            tracing::warn!(tool, error = %m, "MCP tool failed");
            "the corpus could not be read; retry shortly (the relay's log says why)".into()
        }
    }
}

impl From<ReadError> for Fail {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::BadRequest(m) | ReadError::NotFound(m) => Fail::Caller(m),
            ReadError::Db(e) if e.is_interrupted() => Fail::Caller(
                "the read did not finish in time; ask for less (a filter, a smaller limit)".into(),
            ),
            ReadError::Db(e) => Fail::Internal(e.to_string()),
        }
    }
}

fn bound(s: Option<&str>, now: time::OffsetDateTime, name: &str) -> Result<Option<String>, Fail> {
    s.filter(|s| !s.trim().is_empty())
        .map(|s| normalize_bound(s.trim(), now).map_err(|e| Fail::Caller(format!("{name}: {e}"))))
        .transpose()
}

/// The MCP server: one per stdio session or HTTP request, over a shared [`Backend`].
#[derive(Debug, Clone)]
pub struct Personkit {
    pub(crate) backend: Backend,
    tool_router: ToolRouter<Personkit>,
}

/// Most hits one search returns.
pub const MAX_K: u32 = 50;

#[tool_router]
impl Personkit {
    pub fn new(backend: Backend) -> Personkit {
        Personkit {
            backend,
            tool_router: Self::tool_router()
                + Self::knowledge_router()
                + Self::memory_router()
                + Self::graph_router(),
        }
    }

    /// Hybrid search (words + meaning + time) over the user's captured AI conversations.
    #[tool(
        description = "Search the user's past AI conversations (words and meaning). Hits carry ids for get_thread/get_message.",
        input_schema = input::<SearchArgs>(),
        output_schema = schema_for_output::<SearchOutput>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn search(
        &self,
        Parameters(raw): Parameters<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let a: SearchArgs = args(raw)?;
        let max = budget::chars(a.max_chars)?;
        let k = a.k.unwrap_or(10);
        if !(1..=MAX_K).contains(&k) {
            return Err(format!("k must be between 1 and {MAX_K}"));
        }
        if a.query.trim().is_empty() {
            return Err("query is empty: give words or a question".into());
        }
        let format = a.format.unwrap_or_default();
        let with_knowledge = a.knowledge.unwrap_or(false);
        let words = a.query.clone();
        let (out, knowledge) = self
            .backend
            .read(move |conn, b| {
                let thread = a
                    .thread
                    .as_deref()
                    .filter(|t| !t.trim().is_empty())
                    .map(|t| read::resolve_thread_id(conn, t))
                    .transpose()?;
                let params = Params {
                    q: Some(a.query.clone()),
                    k: Some(k as usize),
                    surface: a.surface.clone(),
                    thread,
                    role: a.role.clone(),
                    since: a.since.clone(),
                    until: a.until.clone(),
                    entity: None,
                    events: None,
                    fusion: None,
                };
                let q = build_query_with(&params, b.clock.now(), &b.search).map_err(search_fail)?;
                let out = personkit_search::query(conn, &b.indexes, b.embedder.as_deref(), &q)
                    .map_err(search_fail)?;
                let knowledge = with_knowledge
                    .then(|| crate::knowledge::approved(conn, Some(words), 5))
                    .transpose()?;
                Ok((out, knowledge))
            })
            .await
            .map_err(|f| fail("search", f))?;
        let hits: Vec<SearchHit> = out
            .hits
            .iter()
            .map(|h| SearchHit {
                message_id: h.row.id.clone(),
                kind: h.kind.to_owned(),
                thread_id: h.row.thread_id.clone(),
                thread_title: h.row.thread_title.clone(),
                surface: h.row.surface.clone(),
                role: h.row.role.clone(),
                time: h.row.occurred_at.clone(),
                snippet: h.snippet.clone(),
                matched_via: h
                    .matched_via
                    .iter()
                    .map(|s| s.as_str().to_owned())
                    .collect(),
                score: h.score,
            })
            .collect();
        let room = max.saturating_sub(300 + budget::json_len(&out.query));
        let lines_all: Vec<String> = hits.iter().map(hit_line).collect();
        let kept = match format {
            Format::Full => budget::fit(&hits, room),
            Format::Compact => budget::fit(&lines_all, room / 2),
        };
        let truncated = kept < hits.len();
        let lines: Vec<String> = lines_all[..kept].to_vec();
        let ids: Vec<String> = hits[..kept].iter().map(|h| h.message_id.clone()).collect();
        let mut text = format!(
            "{} hit{} for {:?} (signals: {}){}",
            kept,
            if kept == 1 { "" } else { "s" },
            out.query,
            out.signals_used
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            if truncated {
                "; more left off to fit max_chars (lower k or use format=compact)"
            } else {
                ""
            }
        );
        for sk in &out.signals_skipped {
            text.push_str(&format!(
                "\n(the {} signal was skipped: {}; these hits come from the other signals)",
                sk.signal.as_str(),
                sk.reason
            ));
        }
        for l in &lines {
            text.push('\n');
            text.push_str(l);
        }
        if let Some(k) = &knowledge {
            text.push_str(&format!("\n{} approved knowledge entries:", k.len()));
            for e in k {
                text.push('\n');
                text.push_str(&crate::knowledge::entry_line(e));
            }
        }
        let result = SearchOutput {
            query: out.query,
            model: out.model,
            signals_skipped: out
                .signals_skipped
                .iter()
                .map(|s| SkippedSignal {
                    signal: s.signal.as_str().to_owned(),
                    code: s.code.to_owned(),
                    reason: s.reason.clone(),
                })
                .collect(),
            signals_used: out
                .signals_used
                .iter()
                .map(|s| s.as_str().to_owned())
                .collect(),
            hits: (format == Format::Full).then(|| hits[..kept].to_vec()),
            compact: (format == Format::Compact).then_some(compact::Compact {
                total: kept as u64,
                limit: k,
                has_more: truncated,
                next_cursor: None,
                lines,
                ids,
            }),
            truncated,
            knowledge,
        };
        answer(text, &result)
    }

    /// Recent threads, newest activity first, with filters and a cursor.
    #[tool(
        description = "List the user's captured conversations, most recent activity first (filters, cursor paging).",
        input_schema = input::<ListThreadsArgs>(),
        output_schema = schema_for_output::<ThreadsOutput>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_threads(
        &self,
        Parameters(raw): Parameters<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let a: ListThreadsArgs = args(raw)?;
        let max = budget::chars(a.max_chars)?;
        let format = a.format.unwrap_or_default();
        let mut list = self
            .backend
            .read(move |conn, b| {
                let now = b.clock.now();
                let filter = read::ThreadFilter {
                    surface: a.surface.filter(|s| !s.is_empty()),
                    since: bound(a.since.as_deref(), now, "since")?,
                    until: bound(a.until.as_deref(), now, "until")?,
                    words: a.words,
                    tier: a
                        .tier
                        .as_deref()
                        .map(str::trim)
                        .filter(|t| !t.is_empty())
                        .map(|t| {
                            personkit_heat::Tier::parse(t).ok_or_else(|| {
                                Fail::Caller(format!(
                                    "tier: {:?} is not a tier; use hot, warm or cold",
                                    personkit_shared::wire::quote_safely(t, 40)
                                ))
                            })
                        })
                        .transpose()?,
                };
                Ok(read::list_threads(
                    conn,
                    &filter,
                    a.limit.unwrap_or(20),
                    a.cursor.as_deref(),
                )?)
            })
            .await
            .map_err(|f| fail("list_threads", f))?;
        let all_lines = compact::threads(&list);
        let kept = match format {
            Format::Full => budget::fit(&list.threads, max.saturating_sub(400)),
            Format::Compact => budget::fit(&all_lines.lines, max.saturating_sub(400) / 2),
        };
        let truncated = kept < list.threads.len();
        if truncated {
            list.threads.truncate(kept);
            list.page.has_more = true;
            list.page.next_cursor = list
                .threads
                .last()
                .map(|t| format!("{}/{}", t.last_seen_at, t.id));
        }
        let c = compact::threads(&list);
        let mut text = format!(
            "{} of {} threads{}",
            list.threads.len(),
            list.page.total,
            match &list.page.next_cursor {
                Some(cur) => format!(" (more: cursor={cur})"),
                None => String::new(),
            }
        );
        for l in &c.lines {
            text.push('\n');
            text.push_str(l);
        }
        let out = ThreadsOutput {
            page: list.page.clone(),
            compact: (format == Format::Compact).then_some(c),
            threads: (format == Format::Full).then_some(list.threads),
            truncated,
        };
        answer(text, &out)
    }

    /// A thread's turns in order, paged.
    #[tool(
        description = "Read one conversation's turns in order (paged), with edits/regenerations unless current_only.",
        input_schema = input::<GetThreadArgs>(),
        output_schema = schema_for_output::<ThreadOutput>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn get_thread(
        &self,
        Parameters(raw): Parameters<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let a: GetThreadArgs = args(raw)?;
        let max = budget::chars(a.max_chars)?;
        let format = a.format.unwrap_or_default();
        let mut d = self
            .backend
            .read(move |conn, _| {
                Ok(read::get_thread(
                    conn,
                    &a.thread_id,
                    a.current_only.unwrap_or(false),
                    a.limit.unwrap_or(50),
                    a.cursor.as_deref(),
                )?)
            })
            .await
            .map_err(|f| fail("get_thread", f))?;
        if let Some(u) = &self.backend.uses {
            u.read("thread", d.thread.id.clone(), self.backend.clock.now())
                .await;
        }
        // Long contents are cut to a share of the budget first (at least 1000 characters each).
        let per_turn = (max / 4).max(1_000);
        let mut cut_any = false;
        for t in &mut d.turns {
            cut_any |= budget::cut(
                &mut t.content,
                per_turn,
                &format!("get_message {} for all of it", t.id),
            );
            for r in &mut t.revisions {
                cut_any |= budget::cut(
                    &mut r.content,
                    per_turn / 4,
                    &format!("get_message {} for all of it", r.id),
                );
            }
        }
        let room = max.saturating_sub(budget::json_len(&d.thread) + 300);
        let kept = match format {
            Format::Full => budget::fit(&d.turns, room),
            Format::Compact => budget::fit(&compact::turns(&d, 300).lines, room / 2),
        }
        .max(1)
        .min(d.turns.len());
        let dropped = kept < d.turns.len();
        if dropped {
            d.page.has_more = true;
            d.page.next_cursor = d.turns.get(kept).map(|t| t.index.to_string());
            d.turns.truncate(kept);
        }
        let c = compact::turns(&d, 300);
        let mut text = format!(
            "{} \"{}\" {} turns{}",
            d.thread.surface,
            d.thread.title.as_deref().unwrap_or("untitled"),
            d.thread.turns,
            match &d.page.next_cursor {
                Some(cur) => format!(
                    " (showing {}-{}; more: cursor={cur})",
                    d.turns.first().map_or(0, |t| t.index),
                    d.turns.last().map_or(0, |t| t.index)
                ),
                None => String::new(),
            }
        );
        if let Some(u) = &d.thread.url {
            text.push_str(&format!("\nsource: {u}"));
        }
        for l in &c.lines {
            text.push('\n');
            text.push_str(l);
        }
        let out = ThreadOutput {
            page: d.page.clone(),
            compact: (format == Format::Compact).then_some(c),
            turns: (format == Format::Full).then_some(d.turns),
            thread: d.thread,
            truncated: dropped || cut_any,
        };
        answer(text, &out)
    }

    /// One message in full (any revision), continuing at an offset.
    #[tool(
        description = "Read one message in full (any revision), by id or 8+ character prefix.",
        input_schema = input::<GetMessageArgs>(),
        output_schema = schema_for_output::<MessageOutput>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn get_message(
        &self,
        Parameters(raw): Parameters<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let a: GetMessageArgs = args(raw)?;
        let max = budget::chars(a.max_chars)?;
        let id = a.message_id.clone();
        let mut m = self
            .backend
            .read(move |conn, _| Ok(read::get_message(conn, &id)?))
            .await
            .map_err(|f| fail("get_message", f))?;
        let total = m.content.chars().count() as u64;
        let offset = a.offset.unwrap_or(0);
        if offset > total {
            return Err(format!(
                "offset {offset} is past the end of the message ({total} characters)"
            ));
        }
        m.content = m.content.chars().skip(offset as usize).collect();
        let room = max
            .saturating_sub(budget::json_len(&m) - budget::json_len(&m.content) + 200)
            .max(200);
        let shown_before = m.content.chars().count() as u64;
        let truncated = budget::cut(
            &mut m.content,
            room,
            &format!(
                "call get_message again with offset {}",
                offset + room as u64
            ),
        );
        let shown = if truncated { room as u64 } else { shown_before };
        let text = format!(
            "{} {} {} in \"{}\" (revision {}{}), characters {}-{} of {}:\n{}",
            m.id,
            m.role,
            compact::minute(m.occurred_at.as_deref().unwrap_or(&m.captured_at)),
            m.thread_title.as_deref().unwrap_or("untitled"),
            m.revision,
            if m.is_current {
                ", current"
            } else {
                ", earlier"
            },
            offset,
            offset + shown,
            total,
            m.content
        );
        answer(
            text,
            &MessageOutput {
                message: m,
                content_chars: total,
                offset,
                truncated,
            },
        )
    }

    /// Per-surface capture health, counts, embedding state, schema version.
    #[tool(
        description = "Is capture working? Per-surface green/yellow/red with reasons, counts, embedding state, schema version.",
        output_schema = schema_for_output::<HealthOutput>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn corpus_health(&self) -> Result<CallToolResult, String> {
        let out = self
            .backend
            .read(|conn, b| {
                let model = b.embedder.as_ref().map(|e| (e.model_key(), e.dim() as u64));
                read::corpus::health_report(
                    conn,
                    b.clock.now(),
                    model
                        .as_ref()
                        .map(|(model_key, dim)| read::corpus::Embedder {
                            model_key,
                            dim: *dim,
                        }),
                )
                .map_err(|e| Fail::Internal(e.to_string()))
            })
            .await
            .map_err(|f| fail("corpus_health", f))?;
        let mut text = format!(
            "schema v{}; {} threads, {} turns ({} stored contents); embeddings: {}",
            out.schema_version,
            out.counts.threads,
            out.counts.turns,
            out.counts.messages,
            match &out.embedding.model {
                Some(m) => format!(
                    "{m}, {} of {} messages, {} pending",
                    out.embedding.messages_embedded,
                    out.embedding.messages_total,
                    out.embedding.pending
                ),
                None => "none configured (search uses words and time)".into(),
            }
        );
        if out.surfaces.is_empty() {
            text.push_str("\nno surface has sent anything yet");
        }
        for s in &out.surfaces {
            text.push_str(&format!(
                "\n{} {:?}: {}; {} threads, {} turns ({} in 24 h)",
                s.surface, s.status, s.reason, s.threads, s.turns, s.turns_24h
            ));
        }
        answer(text, &out)
    }
}

fn search_fail(e: SearchError) -> Fail {
    match e {
        SearchError::BadRequest(m) => Fail::Caller(m),
        SearchError::Embed(e) => Fail::Caller(format!("the embedder failed: {e} ({})", e.hint())),
        SearchError::Db(e) => Fail::Internal(e.to_string()),
        e @ (SearchError::TooLarge(_) | SearchError::Interrupted) => Fail::Caller(format!(
            "{e} ({}: {})",
            e.code(),
            e.caller_hint().unwrap_or_default()
        )),
    }
}

/// `<id> <time> <surface> <role> "<thread title>" [signals]: <snippet>`.
fn hit_line(h: &SearchHit) -> String {
    format!(
        "{} {} {} {} \"{}\" [{}]: {}",
        compact::short(&h.message_id),
        h.time.as_deref().map(compact::minute).unwrap_or_default(),
        h.surface,
        h.role.as_deref().unwrap_or("event"),
        compact::one_line(h.thread_title.as_deref().unwrap_or("untitled"), 60),
        h.matched_via.join("+"),
        compact::one_line(&h.snippet, 240)
    )
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Personkit {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("personkit", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "The user's own history of AI conversations (ChatGPT, Claude, Gemini, ... and local agents). \
                 Call get_context first in a session for who the user is and what they have been doing. \
                 Use search to find what was said, get_thread/get_message to read it, list_threads to browse, \
                 corpus_health to check capture, get_knowledge for the positions the user approved, \
                 entity for everything about a person, project, tool or site and related for what it connects to. \
                 propose_knowledge files a note for the user to approve; nothing else writes.",
            )
    }
}
