//! The request side of emulation: the tool contract in the system prompt, earlier tool calls and
//! results replayed as text, and the corrective turn of the one retry.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::json;

use crate::model::{Message, Part, Request, Role, ToolChoice, ToolDef};

/// Told after every tool result, so the model goes on with the task in the same contract.
pub const CONTINUATION: &str = "Continue the task using these results. If you need another tool, answer with an \
action block as described in the system prompt; otherwise give your final answer to the user.";

/// The opening line of the contract (tests and logs look for it).
pub const CONTRACT_HEADER: &str = "# Tool use";

/// The tool contract appended to the system prompt.
pub fn contract(tools: &[ToolDef], choice: Option<&ToolChoice>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{CONTRACT_HEADER}\n");
    s.push_str(
        "You can call tools. The client runs them and sends you the results. To call a tool, answer with a \
fenced block tagged `json action` that holds one JSON object with the tool's name and its parameters, \
exactly like this:\n\n```json action\n{\"tool\": \"TOOL_NAME\", \"parameters\": {\"PARAM\": \"VALUE\"}}\n```\n\n\
Rules:\n\
- \"tool\" is one of the tool names below, spelled exactly; \"parameters\" is a JSON object that follows the \
tool's schema.\n\
- Put each call in its own block; several blocks in one answer are run in order.\n\
- After your action blocks, stop and wait: the results arrive in the next user message as \
\"Tool result for NAME (call ID): ...\". Never write tool results yourself.\n\
- You may write a short sentence before a block. Do not use the `json action` tag for anything else.\n\
- You do have these tools: never say that you cannot use tools or run commands.\n",
    );
    match choice {
        Some(ToolChoice::Required) => s.push_str("- In this answer you must call at least one tool.\n"),
        Some(ToolChoice::Tool { name }) => {
            let _ = writeln!(s, "- In this answer you must call the tool `{name}`.");
        }
        Some(ToolChoice::None) => s.push_str("- In this answer do not call any tool; answer in prose.\n"),
        Some(ToolChoice::Auto) | None => {}
    }
    s.push_str("\n## Tools\n");
    for t in tools {
        let _ = write!(s, "\n### {}\n", t.name);
        if let Some(d) = t.description.as_deref().filter(|d| !d.trim().is_empty()) {
            let _ = writeln!(s, "{}", d.trim());
        }
        if !t.parameters.is_null() {
            let schema = serde_json::to_string(&t.parameters).unwrap_or_default();
            let _ = writeln!(s, "Parameters (JSON Schema): {schema}");
        }
    }
    s
}

/// An action block as the model would have written it.
pub fn action_block(name: &str, input: &serde_json::Value) -> String {
    let body = json!({"tool": name, "parameters": input});
    format!("```json action\n{body}\n```")
}

/// The tools to describe: the declared ones, else the names the history used (clients that send
/// `tools` only on the first turn still get the contract).
pub fn effective_tools(req: &Request) -> Vec<ToolDef> {
    if !req.tools.is_empty() {
        return req.tools.clone();
    }
    let mut names: Vec<String> = Vec::new();
    for m in &req.messages {
        for p in &m.content {
            if let Part::ToolUse { name, .. } = p
                && !names.contains(name)
            {
                names.push(name.clone());
            }
        }
    }
    names
        .into_iter()
        .map(|name| ToolDef { name, description: None, parameters: serde_json::Value::Null, cache: None })
        .collect()
}

/// True when the request involves tools at all (declared, or in its history).
pub fn involves_tools(req: &Request) -> bool {
    !req.tools.is_empty()
        || req
            .messages
            .iter()
            .any(|m| m.content.iter().any(|p| matches!(p, Part::ToolUse { .. } | Part::ToolResult { .. })))
}

fn result_text(content: &[Part]) -> (String, Vec<Part>) {
    let mut text = String::new();
    let mut images = Vec::new();
    for p in content {
        match p {
            Part::Text { text: t, .. } => {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(t);
            }
            Part::Image { .. } => images.push(p.clone()),
            _ => {}
        }
    }
    (text, images)
}

/// Merges adjacent text parts of one message (the replay leaves several).
fn merge_text(parts: Vec<Part>) -> Vec<Part> {
    let mut out: Vec<Part> = Vec::new();
    for p in parts {
        match (out.last_mut(), p) {
            (Some(Part::Text { text: a, cache: None }), Part::Text { text: b, cache: None }) => {
                a.push_str("\n\n");
                a.push_str(&b);
            }
            (_, p) => out.push(p),
        }
    }
    out
}

/// Ends the latest (tool results) message with the continuation instruction.
fn close_results(messages: &mut [Message]) {
    if let Some(m) = messages.last_mut() {
        m.content.push(Part::text(CONTINUATION));
        m.content = merge_text(std::mem::take(&mut m.content));
    }
}

/// The request the upstream sees in emulated mode: no native tool fields, the contract in the
/// system prompt, and every earlier tool call and result replayed as text.
pub fn rewrite(req: &Request) -> Request {
    let tools = effective_tools(req);
    let contract = contract(&tools, req.tool_choice.as_ref());
    let mut names: HashMap<String, String> = HashMap::new();
    let mut messages: Vec<Message> = Vec::with_capacity(req.messages.len() + 1);
    let mut last_results = false;
    for m in &req.messages {
        let mut content = Vec::new();
        let mut results: Vec<Part> = Vec::new();
        for p in &m.content {
            match p {
                Part::ToolUse { id, name, input } => {
                    names.insert(id.clone(), name.clone());
                    content.push(Part::text(action_block(name, input)));
                }
                Part::ToolResult { tool_use_id, content: inner, is_error } => {
                    let name = names.get(tool_use_id).map_or("unknown tool", String::as_str);
                    let (text, images) = result_text(inner);
                    let label = if *is_error { "Tool error" } else { "Tool result" };
                    results.push(Part::text(format!("{label} for {name} (call {tool_use_id}):\n{text}")));
                    results.extend(images);
                }
                other => content.push(other.clone()),
            }
        }
        if !results.is_empty() {
            // Results go to the model as one user turn (consecutive result messages merged),
            // ending with the instruction to go on.
            match (last_results, messages.last_mut()) {
                (true, Some(prev)) => prev.content.extend(results),
                _ => messages.push(Message { role: Role::User, content: results }),
            }
            last_results = true;
            if content.iter().any(|p| !matches!(p, Part::Text { text, .. } if text.is_empty())) {
                close_results(&mut messages);
                last_results = false;
                if let Some(prev) = messages.last_mut() {
                    prev.content.extend(content);
                    prev.content = merge_text(std::mem::take(&mut prev.content));
                }
            }
            continue;
        }
        if last_results {
            close_results(&mut messages);
            last_results = false;
        }
        let role = if m.role == Role::Tool { Role::User } else { m.role };
        if content.is_empty() {
            continue;
        }
        let content = if role == Role::Assistant { merge_text(content) } else { content };
        messages.push(Message { role, content });
    }
    if last_results {
        close_results(&mut messages);
    }
    match messages.iter_mut().find(|m| m.role == Role::System) {
        Some(system) => system.content.push(Part::text(contract)),
        None => messages.insert(0, Message::text(Role::System, contract)),
    }
    Request { messages, tools: Vec::new(), tool_choice: None, parallel_tool_calls: None, ..req.clone() }
}

/// The request of the one corrective retry: the emulated request, the model's bad reply, and an
/// instruction that restates the contract.
pub fn corrective(emulated: &Request, reply: &str, reason: &str, tool_names: &[String]) -> Request {
    let mut req = emulated.clone();
    if !reply.trim().is_empty() {
        req.messages.push(Message::text(Role::Assistant, reply.to_owned()));
    }
    let example = tool_names.first().map_or("TOOL_NAME", String::as_str);
    let text = format!(
        "Your previous answer did not follow the tool contract: {reason}. You have these tools: {}. To call one, \
answer with a block exactly like this (and nothing else inside it):\n\n```json action\n{{\"tool\": \"{example}\", \
\"parameters\": {{}}}}\n```\n\nAnswer again now.",
        tool_names.join(", ")
    );
    req.messages.push(Message::text(Role::User, text));
    req
}
