//! The knowledge tools: `get_knowledge` reads entries the user **approved** (nothing pending or rejected ever
//! reaches an agent), and `propose_knowledge` files a note an agent believes is the user's knowledge — pending,
//! named after the agent, rate-limited per agent — for the user to decide on. An agent never approves.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use rmcp::RoleServer;
use rmcp::handler::server::common::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, JsonObject};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use personkit_knowledge::Settings;
use personkit_knowledge::propose::{Filed, Proposal, Refusal, propose};
use personkit_store::Db;
use personkit_store::clock::Clock;
use personkit_store::knowledge::{self as rows, Entry, Filter};

use crate::backend::Fail;
use crate::tools::{Personkit, answer, args, fail, input};

/// Who is calling: the server puts the authenticated token's name here for each HTTP request; a stdio session
/// is the local process that started `personkit mcp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller(pub String);

/// Files proposals. The server's writer, or for `personkit mcp` (which reads on a read-only connection) a
/// writer opened on the first proposal.
#[derive(Debug, Clone)]
pub struct Proposals {
    db: Arc<OnceLock<Arc<Db>>>,
    path: PathBuf,
    settings: Settings,
    clock: Clock,
}

impl Proposals {
    /// Over an open writer.
    pub fn over(db: Arc<Db>, settings: Settings, clock: Clock) -> Proposals {
        let path = db.path().to_path_buf();
        let cell = OnceLock::new();
        let _ = cell.set(db);
        Proposals {
            db: Arc::new(cell),
            path,
            settings,
            clock,
        }
    }

    /// Opening a writer on `path` when the first proposal comes.
    pub fn lazy(path: PathBuf, settings: Settings, clock: Clock) -> Proposals {
        Proposals {
            db: Arc::new(OnceLock::new()),
            path,
            settings,
            clock,
        }
    }

    fn file(&self, agent: &str, p: &Proposal) -> Result<Filed, Fail> {
        let db = match self.db.get() {
            Some(db) => db,
            None => {
                let db = Db::open(&self.path).map_err(|e| Fail::Internal(e.to_string()))?;
                self.db.get_or_init(|| Arc::new(db))
            }
        };
        propose(db, agent, p, &self.settings, &self.clock).map_err(|e| match e {
            Ok(Refusal {
                code,
                message,
                hint,
            }) => Fail::Caller(format!("{code}: {message} ({hint})")),
            Err(e) => Fail::Internal(e.to_string()),
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetKnowledgeArgs {
    /// Words to match (topic, position, reasoning, tags); without it, the newest approved entries.
    pub query: Option<String>,
    /// Entries wanted, 1-50 (default 10).
    pub limit: Option<u32>,
}

/// An approved entry as agents see it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KnowledgeEntry {
    pub id: String,
    /// reasoning, philosophy, standard, decision or reaction.
    #[serde(rename = "type")]
    pub kind: String,
    pub topic: String,
    pub position: String,
    pub reasoning: String,
    /// The situation a variant holds in.
    pub context: Option<String>,
    pub confidence: String,
    pub stability: String,
    pub tags: Vec<String>,
    /// The entry this one is a variant of.
    pub variant_of: Option<String>,
    /// Message ids it rests on (for get_message).
    pub sources: Vec<String>,
}

impl From<Entry> for KnowledgeEntry {
    fn from(e: Entry) -> Self {
        KnowledgeEntry {
            id: e.id,
            kind: e.kind,
            topic: e.topic,
            position: e.position,
            reasoning: e.reasoning,
            context: e.context,
            confidence: e.confidence,
            stability: e.stability,
            tags: e.tags,
            variant_of: e.variant_of,
            sources: e.sources.into_iter().map(|s| s.message_id).collect(),
        }
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KnowledgeOutput {
    pub entries: Vec<KnowledgeEntry>,
}

/// Approved entries matching `words` (newest first without words), at most `limit`.
pub(crate) fn approved(
    conn: &personkit_store::Connection,
    words: Option<String>,
    limit: u32,
) -> Result<Vec<KnowledgeEntry>, Fail> {
    let list = rows::entries(
        conn,
        &Filter {
            status: Some("approved".into()),
            words: words.filter(|w| !w.trim().is_empty()),
            limit,
        },
    )
    .map_err(|e| Fail::Internal(e.to_string()))?;
    // The store's filter already holds only approved rows; this is the invariant said twice.
    Ok(list
        .into_iter()
        .filter(|e| e.status == "approved")
        .map(KnowledgeEntry::from)
        .collect())
}

pub(crate) fn entry_line(e: &KnowledgeEntry) -> String {
    let context = e
        .context
        .as_deref()
        .map(|c| format!(" (when: {c})"))
        .unwrap_or_default();
    format!(
        "{} [{} {}, {}] {}: {}{} — because {}",
        &e.id[..8.min(e.id.len())],
        e.kind,
        e.confidence,
        e.stability,
        e.topic,
        e.position,
        context,
        e.reasoning
    )
}

#[tool_router(router = knowledge_router, vis = "pub(crate)")]
impl Personkit {
    /// The user's approved knowledge: their reasoning, standards, decisions and reactions.
    #[tool(
        description = "The user's approved knowledge: positions they hold and why, from their own conversations. Answer as they would.",
        input_schema = input::<GetKnowledgeArgs>(),
        output_schema = schema_for_output::<KnowledgeOutput>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn get_knowledge(
        &self,
        Parameters(raw): Parameters<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let a: GetKnowledgeArgs = args(raw)?;
        let limit = a.limit.unwrap_or(10);
        if !(1..=50).contains(&limit) {
            return Err("limit must be between 1 and 50".into());
        }
        let words = a.query.clone();
        let entries = self
            .backend
            .read(move |conn, _| approved(conn, words, limit))
            .await
            .map_err(|f| fail("get_knowledge", f))?;
        let mut text = format!(
            "{} approved entr{}",
            entries.len(),
            if entries.len() == 1 { "y" } else { "ies" }
        );
        if entries.is_empty() {
            text.push_str(" (the user approves entries in the dashboard's Knowledge page or with `personkit knowledge approve`)");
        }
        for e in &entries {
            text.push('\n');
            text.push_str(&entry_line(e));
        }
        answer(text, &KnowledgeOutput { entries })
    }

    /// Files a pending note for the user to approve or reject.
    #[tool(
        description = "Propose a knowledge entry about the user, citing message ids and your reason. It waits for the user's approval.",
        input_schema = input::<Proposal>(),
        output_schema = schema_for_output::<Filed>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn propose_knowledge(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(raw): Parameters<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let p: Proposal = args(raw)?;
        let Some(proposals) = self.backend.proposals.clone() else {
            return Err("this server does not take proposals".into());
        };
        let agent = ctx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>().cloned())
            .unwrap_or_else(|| Caller("local (stdio)".into()));
        let filed = tokio::task::spawn_blocking(move || proposals.file(&agent.0, &p))
            .await
            .map_err(|e| fail("propose_knowledge", Fail::Internal(e.to_string())))?
            .map_err(|f| fail("propose_knowledge", f))?;
        let text = match filed.outcome.as_str() {
            "reinforced" => format!(
                "a known entry ({}) already says this; your sources were added to it",
                filed.id
            ),
            _ => format!(
                "filed as pending entry {}; the user will approve or reject it",
                filed.id
            ),
        };
        answer(text, &filed)
    }
}
