//! The system message of a Cursor conversation, written once on its first turn and kept verbatim
//! afterwards (it is the first transcript message, so the prompt prefix stays stable and provider
//! caches keep hitting; later changes to rules or the custom prompt are not picked up by an
//! existing conversation).
//!
//! Rules by type (docs/cursor-wire.md §6.2): `global` rules (and rules without a type) and the
//! user's `non_file_rules` are pasted; `agent_fetched` rules are listed by description and path
//! for the model to read when one applies; `file_globbed` and `manually_attached` rules belong to
//! the message they apply to (`super::context`). Skills (`agent_skills`) are listed the same way
//! as agent-fetched rules; `mcp_instructions` are pasted per server.
//!
//! [`system_with_blocks`] also says what of the user's own went in (the Calls page's context
//! blocks of the conversation's first run): each pasted rule (`rule`, its path or `user rule`),
//! each rule and skill offered by description (`rule_offered`, `skill_offered`, their path) and
//! each server's MCP instructions (`mcp_instructions`), with the bytes each adds to the prompt.

use crate::cursor::protocol::agent::{CursorRule, RequestContext, RequestContextEnv, cursor_rule_type};
use crate::store::ContextBlock;

fn block(kind: &str, source: &str, text: &str) -> ContextBlock {
    ContextBlock {
        kind: kind.to_owned(),
        source: source.to_owned(),
        bytes: u64::try_from(text.len()).unwrap_or(u64::MAX),
    }
}

/// The system prompt from what the client reported on the conversation's first turn, and the
/// rules, skills and MCP instructions it holds as context blocks.
pub fn system_with_blocks(
    custom: Option<&str>,
    env: &RequestContextEnv,
    workspace: Option<&str>,
    ctx: &RequestContext,
) -> (String, Vec<ContextBlock>) {
    let mut blocks = Vec::new();
    let mut s = String::from(
        "You are a coding agent working in the user's editor. Use the tools to inspect and change the \
         user's workspace: read files before you edit them, keep changes focused, and run commands only when \
         they help. Answer in Markdown.\n",
    );
    match workspace {
        Some(w) => s.push_str(&format!("\nWorkspace root: {w} (relative paths resolve against it).\n")),
        None => s.push_str("\nThe workspace root is unknown; use absolute paths.\n"),
    }
    if !env.os_version.is_empty() {
        s.push_str(&format!("Operating system: {}\n", env.os_version));
    }
    if !env.shell.is_empty() {
        s.push_str(&format!("Shell: {}\n", env.shell));
    }
    let kind = |r: &CursorRule| r.r#type.as_ref().and_then(|t| t.r#type.clone());
    let pasted = ctx.rules.iter().filter(|r| matches!(kind(r), None | Some(cursor_rule_type::Type::Global(_))));
    for rule in ctx.non_file_rules.iter().chain(pasted).filter(|r| !r.content.trim().is_empty()) {
        let (text, source) = if rule.full_path.is_empty() {
            (format!("\nUser rule:\n{}\n", rule.content.trim()), "user rule")
        } else {
            (format!("\nRule ({}):\n{}\n", rule.full_path, rule.content.trim()), rule.full_path.as_str())
        };
        blocks.push(block("rule", source, &text));
        s.push_str(&text);
    }
    let fetched: Vec<String> = ctx
        .rules
        .iter()
        .filter_map(|r| match kind(r) {
            Some(cursor_rule_type::Type::AgentFetched(a)) => {
                let line = format!("- {}: {}\n", r.full_path, a.description.trim());
                blocks.push(block("rule_offered", &r.full_path, &line));
                Some(line)
            }
            _ => None,
        })
        .collect();
    if !fetched.is_empty() {
        s.push_str("\nRules to read with read_file when their description applies to the task:\n");
        fetched.iter().for_each(|l| s.push_str(l));
    }
    let skills: Vec<String> = ctx
        .agent_skills
        .iter()
        .filter(|k| !k.disable_model_invocation && !k.full_path.is_empty())
        .map(|k| {
            let line = format!("- {}: {}\n", k.full_path, k.description.trim());
            blocks.push(block("skill_offered", &k.full_path, &line));
            line
        })
        .collect();
    if !skills.is_empty() {
        s.push_str("\nSkills (read a skill's file with read_file before using it):\n");
        skills.iter().for_each(|l| s.push_str(l));
    }
    for m in ctx.mcp_instructions.iter().filter(|m| !m.instructions.trim().is_empty()) {
        let server = if m.server_name.is_empty() { &m.server_identifier } else { &m.server_name };
        let text = format!("\nInstructions of the MCP server {server}:\n{}\n", m.instructions.trim());
        blocks.push(block("mcp_instructions", server, &text));
        s.push_str(&text);
    }
    if let Some(custom) = custom.map(str::trim).filter(|c| !c.is_empty()) {
        s.push('\n');
        s.push_str(custom);
        s.push('\n');
    }
    (s, blocks)
}

/// The workspace root from the environment: the first workspace path (a `file://` URI or a
/// path), else the process working directory.
pub fn workspace_root(env: &RequestContextEnv) -> Option<String> {
    env.workspace_paths
        .iter()
        .chain(std::iter::once(&env.process_working_directory))
        .map(|p| p.strip_prefix("file://").unwrap_or(p).trim())
        .find(|p| !p.is_empty())
        .map(str::to_owned)
}
