//! `entity` (everything about one entity: kind, aliases, relations, threads, events, last seen) and `related` (the
//! entities within one or two relations of it), read from the entity graph through `personkit_graph::view`, the
//! same calls the CLI, the HTTP API and the dashboard make. Both answers stay within `max_chars`.

use personkit_graph::GraphError;
use personkit_graph::view::{self, EntityView};
use personkit_store::graph::{EntityInfo, Subgraph};
use rmcp::handler::server::common::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, JsonObject};
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::backend::Fail;
use crate::budget;
use crate::tools::{Personkit, answer, args, fail, input};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EntityArgs {
    /// The entity's name, an alias (any spelling: "claude code" finds "Claude Code") or its id.
    pub name: String,
    /// Threads to list, 1-50 (default 10).
    pub threads: Option<u32>,
    /// Answer size cap in characters (1000-200000, default 20000).
    pub max_chars: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RelatedArgs {
    /// The entity's name, an alias or its id.
    pub name: String,
    /// 1 (default): directly related; 2: also what those relate to.
    pub depth: Option<u32>,
    /// Answer size cap in characters (1000-200000, default 20000).
    pub max_chars: Option<u32>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct EntityOutput {
    pub view: EntityView,
    /// Threads, relations, events or days were left off to stay within max_chars.
    pub truncated: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RelatedOutput {
    pub entity: EntityInfo,
    pub graph: Subgraph,
    /// Relations were left off to stay within max_chars (or the walk's bounds cut it: `graph.truncated`).
    pub truncated: bool,
}

fn graph_fail(e: GraphError) -> Fail {
    match e {
        GraphError::Db(e) if e.is_interrupted() => {
            Fail::Caller("the read did not finish in time; ask for less (depth 1)".into())
        }
        GraphError::Db(personkit_store::DbError::Invalid(m))
        | GraphError::Invalid(m)
        | GraphError::NotFound(m) => Fail::Caller(format!("{m} ({})", hint_of_caller())),
        GraphError::Db(e) => Fail::Internal(e.to_string()),
    }
}

fn hint_of_caller() -> &'static str {
    "give a name, alias or id of a person, project, repository, tool, model, organisation, place or site; search finds names in conversations"
}

/// Drops the last element of the longest list until the whole answer fits.
fn fit_view(v: &mut EntityView, max: usize) -> bool {
    let mut cut = false;
    while budget::json_len(v) + 40 > max {
        let lists = [
            v.threads.len(),
            v.relations.len(),
            v.events.len(),
            v.timeline.len(),
        ];
        match lists.iter().enumerate().max_by_key(|(_, n)| **n) {
            Some((_, 0)) | None => break,
            Some((0, _)) => drop(v.threads.pop()),
            Some((1, _)) => drop(v.relations.pop()),
            Some((2, _)) => drop(v.events.pop()),
            Some(_) => drop(v.timeline.pop()),
        }
        cut = true;
    }
    cut
}

#[tool_router(router = graph_router, vis = "pub(crate)")]
impl Personkit {
    /// Everything about one entity, compact.
    #[tool(
        description = "Everything about a person, project, tool, model or site in the user's work: aliases, relations, threads, events, last seen.",
        input_schema = input::<EntityArgs>(),
        output_schema = schema_for_output::<EntityOutput>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn entity(
        &self,
        Parameters(raw): Parameters<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let a: EntityArgs = args(raw)?;
        let max = budget::chars(a.max_chars)?;
        let threads = match a.threads {
            None => 10,
            Some(n @ 1..=50) => n as usize,
            Some(n) => return Err(format!("threads {n} is out of range: give 1 to 50")),
        };
        let name = a.name;
        let mut v = self
            .backend
            .read(move |conn, _| {
                let e = view::lookup(conn, &name).map_err(graph_fail)?;
                view::view(conn, &e.id, threads).map_err(graph_fail)
            })
            .await
            .map_err(|f| fail("entity", f))?;
        if let Some(u) = &self.backend.uses {
            u.read("entity", v.entity.id.clone(), self.backend.clock.now())
                .await;
        }
        let truncated = fit_view(&mut v, max.saturating_sub(max / 3));
        let text = view::compact(&v, max / 3);
        answer(text, &EntityOutput { view: v, truncated })
    }

    /// The entities related to one.
    #[tool(
        description = "Entities related to one (depth 1 or 2): typed relations (uses, about, made_by, mentions, part_of) with validity.",
        input_schema = input::<RelatedArgs>(),
        output_schema = schema_for_output::<RelatedOutput>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn related(
        &self,
        Parameters(raw): Parameters<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let a: RelatedArgs = args(raw)?;
        let max = budget::chars(a.max_chars)?;
        let depth = match a.depth {
            None => 1,
            Some(d @ 1..=2) => d,
            Some(d) => return Err(format!("depth {d} is out of range: give 1 or 2")),
        };
        let name = a.name;
        let (entity, mut graph) = self
            .backend
            .read(move |conn, _| {
                let e = view::lookup(conn, &name).map_err(graph_fail)?;
                let g = view::neighbours(conn, &e.id, depth).map_err(graph_fail)?;
                Ok((e, g))
            })
            .await
            .map_err(|f| fail("related", f))?;
        let room = max.saturating_sub(max / 3);
        let mut truncated = false;
        while budget::json_len(&graph) + budget::json_len(&entity) + 40 > room
            && (!graph.edges.is_empty() || !graph.entities.is_empty())
        {
            if graph.edges.len() >= graph.entities.len() {
                graph.edges.pop();
            } else {
                graph.entities.pop();
            }
            truncated = true;
        }
        let text = view::compact_neighbours(&entity, &graph, max / 3);
        answer(
            text,
            &RelatedOutput {
                entity,
                graph,
                truncated,
            },
        )
    }
}
