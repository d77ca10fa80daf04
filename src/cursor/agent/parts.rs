//! 3.15 builds move parts of the request context into client blobs
//! (`ConversationAction.request_context_parts`, docs/cursor-wire.md §6.2): rules (with the user's
//! `non_file_rules`), skills, subagents and MCP definitions (tools and per-server instructions),
//! each blob one part message, plus a `dynamic_context` that stays inline.
//!
//! [`resolve`] reads each named blob (from `pre_fetched_blobs` or the client's KV store, like the
//! blob-backed prompt) and merges its lists into the action's `RequestContext`, so the rules,
//! skills and instructions reach the prompt exactly as the inline fields do; an entry the inline
//! context holds already is not added twice. The `dynamic_context` fills what the inline context
//! lacks (its environment, the web switches, lists that are empty). A blob that cannot be read or
//! decoded is skipped with a notice for the user; the turn goes on.

use crate::cursor::checkpoint::recovery::Source;
use crate::cursor::protocol::agent::{self, RequestContext, RequestContextPartReferences};

fn push_new<T: PartialEq>(into: &mut Vec<T>, items: Vec<T>) {
    for item in items {
        if !into.contains(&item) {
            into.push(item);
        }
    }
}

/// Fills what `ctx` lacks from the inline `dynamic_context`.
fn fill(ctx: &mut RequestContext, d: RequestContext) {
    if ctx.env.is_none() {
        ctx.env = d.env;
    }
    ctx.web_search_enabled = ctx.web_search_enabled.or(d.web_search_enabled);
    ctx.web_fetch_enabled = ctx.web_fetch_enabled.or(d.web_fetch_enabled);
    push_new(&mut ctx.rules, d.rules);
    push_new(&mut ctx.non_file_rules, d.non_file_rules);
    push_new(&mut ctx.agent_skills, d.agent_skills);
    push_new(&mut ctx.custom_subagents, d.custom_subagents);
    push_new(&mut ctx.tools, d.tools);
    push_new(&mut ctx.mcp_instructions, d.mcp_instructions);
}

async fn part<M: prost::Message + Default>(source: &Source<'_>, id: &[u8], what: &str) -> Result<Option<M>, String> {
    if id.is_empty() {
        return Ok(None);
    }
    let data =
        source.content(id).await.map_err(|e| format!("Keyhaven could not read the {what} from the editor ({e})."))?;
    M::decode(data.as_slice())
        .map(Some)
        .map_err(|e| format!("Keyhaven could not decode the {what} the editor sent ({e})."))
}

/// Merges the parts `refs` names into `ctx`; returns notices for the user.
pub async fn resolve(refs: RequestContextPartReferences, ctx: &mut RequestContext, source: &Source<'_>) -> Vec<String> {
    let mut notices = Vec::new();
    let mut note = |r: Result<(), String>| {
        if let Err(e) = r {
            tracing::warn!(error = %e, "a request context part was skipped");
            notices.push(e);
        }
    };
    note(part::<agent::RequestContextRulesPart>(source, &refs.rules_blob_id, "rules").await.map(|p| {
        if let Some(p) = p {
            push_new(&mut ctx.rules, p.rules);
            push_new(&mut ctx.non_file_rules, p.non_file_rules);
        }
    }));
    note(part::<agent::RequestContextSkillsPart>(source, &refs.skills_blob_id, "skills").await.map(|p| {
        if let Some(p) = p {
            push_new(&mut ctx.agent_skills, p.agent_skills);
        }
    }));
    note(part::<agent::RequestContextSubagentsPart>(source, &refs.subagents_blob_id, "subagents").await.map(|p| {
        if let Some(p) = p {
            push_new(&mut ctx.custom_subagents, p.custom_subagents);
        }
    }));
    note(part::<agent::RequestContextMcpsPart>(source, &refs.mcps_blob_id, "MCP definitions").await.map(|p| {
        if let Some(p) = p {
            push_new(&mut ctx.tools, p.tools);
            push_new(&mut ctx.mcp_instructions, p.mcp_instructions);
        }
    }));
    if let Some(d) = refs.dynamic_context {
        fill(ctx, d);
    }
    notices
}
