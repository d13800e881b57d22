//! `get_context`: what an agent should know at the start of a session, in tiers (the profile the user wrote; then
//! their short and mid memory and approved knowledge; then long memory; then today's open threads), within a
//! token budget. Read-only: the profile is the user's to write (dashboard, CLI), never an agent's.

use rmcp::handler::server::common::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, JsonObject};
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;

use personkit_memory::MemoryError;
use personkit_memory::context::{self, Ask, Context};

use crate::backend::Fail;
use crate::tools::{Personkit, answer, args, fail, input};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetContextArgs {
    /// 1: the user's profile; 2 (default): + recent and weekly memory and approved knowledge; 3: + long-term
    /// memory; 4: + today's open threads.
    pub tier: Option<u8>,
    /// Most tokens to return, 100-32000 (default by tier: 1500, 6000, 8000, 10000).
    pub budget: Option<u32>,
    /// Compact text (default true); false keeps blank lines and each knowledge entry's reasoning.
    pub compact: Option<bool>,
}

fn memory_fail(e: MemoryError) -> Fail {
    match e {
        MemoryError::Invalid(m) => Fail::Caller(m),
        MemoryError::Profile { path, message } => {
            Fail::Caller(format!("the profile file {path} cannot be read: {message}"))
        }
        e => Fail::Internal(e.to_string()),
    }
}

#[tool_router(router = memory_router, vis = "pub(crate)")]
impl Personkit {
    /// The user's context for this session, in tiers, within a budget.
    #[tool(
        description = "Start here: who the user is, what they did lately, what they decided. Tiers 1-4 (default 2), within a token budget.",
        input_schema = input::<GetContextArgs>(),
        output_schema = schema_for_output::<Context>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn get_context(
        &self,
        Parameters(raw): Parameters<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let a: GetContextArgs = args(raw)?;
        let ask = Ask::checked(
            a.tier.unwrap_or(2),
            a.budget.map(|b| b as usize),
            a.compact.unwrap_or(true),
        )
        .map_err(|e| fail("get_context", memory_fail(e)))?;
        let c = self
            .backend
            .read(move |conn, b| {
                context::assemble(conn, &ask, &b.profile_path, b.clock.now(), b.local)
                    .map_err(memory_fail)
            })
            .await
            .map_err(|f| fail("get_context", f))?;
        let text = if c.text.is_empty() {
            "nothing yet: the user has written no profile and no memory has been distilled"
                .to_owned()
        } else {
            c.text.clone()
        };
        answer(text, &c)
    }
}
