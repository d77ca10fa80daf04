//! Encoding of canonical types into Anthropic bodies: outbound requests, and inbound responses and
//! error bodies.

use serde_json::{Map, Value, json};

use crate::dialect::anthropic::EncodeOptions;
use crate::dialect::anthropic::decode::decode_request_value;
use crate::model::reasoning::{Envelope, Family};
use crate::model::{
    CacheControl, Effort, ErrorInfo, ErrorKind, ImageSource, Message, Part, Passthrough, Request, Response, Role,
    StopReason, ToolChoice, WireDialect,
};

/// The beta flag under which Anthropic accepts `role: "system"` inside `messages`.
const MID_CONVERSATION_SYSTEM_BETA: &str = "mid-conversation-system-";

/// The signature to send upstream for a canonical one: Anthropic's own (raw, or unwrapped from
/// an `anthropic` envelope); `None` for other families' envelopes, which never reach Anthropic.
pub(crate) fn upstream_signature(signature: &str) -> Option<String> {
    match Envelope::of_signature(signature) {
        Some(Envelope { family: Family::Anthropic, data: Some(sig), .. }) if !sig.is_empty() => Some(sig),
        _ => None,
    }
}

/// Anthropic's smallest accepted thinking budget.
const MIN_THINKING_BUDGET: u32 = 1024;
/// Room left for the answer above the thinking budget when `max_tokens` is too small for it.
const ANSWER_HEADROOM: u32 = 1024;

pub(crate) fn cache_control(cache: &CacheControl) -> Value {
    match &cache.ttl {
        Some(ttl) => json!({"type": "ephemeral", "ttl": ttl}),
        None => json!({"type": "ephemeral"}),
    }
}

/// A tool-use `input` as Anthropic requires it: a JSON object. A string holding a JSON object is
/// parsed; anything else is wrapped as `{"raw": ...}` so nothing is lost; `null` is `{}`.
pub(crate) fn input_object(input: &Value) -> Value {
    match input {
        Value::Object(_) => input.clone(),
        Value::Null => Value::Object(Map::new()),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(obj @ Value::Object(_)) => obj,
            _ => json!({"raw": s}),
        },
        other => json!({"raw": other}),
    }
}

pub(crate) fn stop_reason_str(reason: &StopReason) -> &str {
    match reason {
        StopReason::EndTurn => "end_turn",
        StopReason::MaxTokens => "max_tokens",
        StopReason::StopSequence => "stop_sequence",
        StopReason::ToolUse => "tool_use",
        StopReason::Refusal | StopReason::ContentFilter => "refusal",
        StopReason::Other(s) => s,
    }
}

/// The stop reason a client sees: an answer that called tools and "ended its turn" stopped for
/// tool use (OpenAI-style upstreams say `stop` there).
pub(crate) fn effective_stop_reason(reason: Option<&StopReason>, used_tools: bool) -> String {
    match reason {
        None | Some(StopReason::EndTurn) if used_tools => "tool_use".to_owned(),
        None => "end_turn".to_owned(),
        Some(r) => stop_reason_str(r).to_owned(),
    }
}

/// The Anthropic error `type` of a kind. There is no distinct type for an unknown upstream or
/// internal failure: both are `api_error`.
pub(crate) fn error_type(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidRequest => "invalid_request_error",
        ErrorKind::Authentication => "authentication_error",
        ErrorKind::PermissionDenied => "permission_error",
        ErrorKind::NotFound => "not_found_error",
        ErrorKind::RequestTooLarge => "request_too_large",
        ErrorKind::RateLimited => "rate_limit_error",
        ErrorKind::Overloaded => "overloaded_error",
        ErrorKind::Timeout => "timeout_error",
        ErrorKind::Upstream | ErrorKind::Internal => "api_error",
    }
}

pub(crate) fn encode_error(error: &ErrorInfo) -> Value {
    json!({"type": "error", "error": {"type": error_type(error.kind), "message": error.message}})
}

fn image_block(source: &ImageSource, cache: Option<&CacheControl>) -> Value {
    let source = match source {
        ImageSource::Base64 { media_type, data } => json!({"type": "base64", "media_type": media_type, "data": data}),
        ImageSource::Url { url } => json!({"type": "url", "url": url}),
    };
    let mut block = json!({"type": "image", "source": source});
    if let (Some(cache), Value::Object(obj)) = (cache, &mut block) {
        obj.insert("cache_control".into(), cache_control(cache));
    }
    block
}

fn text_block(text: &str, cache: Option<&CacheControl>) -> Value {
    let mut block = json!({"type": "text", "text": text});
    if let (Some(cache), Value::Object(obj)) = (cache, &mut block) {
        obj.insert("cache_control".into(), cache_control(cache));
    }
    block
}

/// A content block of an outbound message, or `None` for what Anthropic would reject: empty text
/// and thinking without a signature.
fn request_block(part: &Part) -> Option<Value> {
    Some(match part {
        Part::Text { text, .. } if text.is_empty() => return None,
        Part::Text { text, cache } => text_block(text, cache.as_ref()),
        Part::Image { source, cache } => image_block(source, cache.as_ref()),
        Part::Thinking { text, signature: Some(signature) } => {
            json!({"type": "thinking", "thinking": text, "signature": upstream_signature(signature)?})
        }
        Part::Thinking { .. } => return None,
        Part::RedactedThinking { data } => json!({"type": "redacted_thinking", "data": data}),
        Part::ToolUse { id, name, input } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": input_object(input)})
        }
        Part::ToolResult { tool_use_id, content, is_error } => {
            let mut block = json!({"type": "tool_result", "tool_use_id": tool_use_id});
            let inner: Vec<Value> = content
                .iter()
                .filter_map(|p| match p {
                    Part::Text { text, .. } if text.is_empty() => None,
                    Part::Text { text, cache } => Some(text_block(text, cache.as_ref())),
                    Part::Image { source, cache } => Some(image_block(source, cache.as_ref())),
                    _ => None,
                })
                .collect();
            if let Value::Object(obj) = &mut block {
                if !inner.is_empty() {
                    obj.insert("content".into(), Value::Array(inner));
                }
                if *is_error {
                    obj.insert("is_error".into(), Value::Bool(true));
                }
            }
            block
        }
    })
}

/// Messages in Anthropic's shape: system hoisted out, tool results as user messages, consecutive
/// messages of one role merged (tool results first), messages left without blocks dropped.
///
/// With `system_in_place` (the client sent Anthropic's mid-conversation-system beta), system
/// messages after the first non-system message stay where they are as `role: "system"` messages.
fn encode_messages(messages: &[Message], system_in_place: bool) -> (Vec<Value>, Vec<Value>) {
    let mut system = Vec::new();
    // (role, tool_result blocks, other blocks)
    let mut turns: Vec<(&'static str, Vec<Value>, Vec<Value>)> = Vec::new();
    for msg in messages {
        let role = match msg.role {
            Role::System if system_in_place && !turns.is_empty() => {
                let blocks: Vec<Value> = msg
                    .content
                    .iter()
                    .filter_map(|p| match p {
                        Part::Text { text, cache } if !text.is_empty() => Some(text_block(text, cache.as_ref())),
                        _ => None,
                    })
                    .collect();
                if !blocks.is_empty() {
                    turns.push(("system", Vec::new(), blocks));
                }
                continue;
            }
            Role::System => {
                for part in &msg.content {
                    match part {
                        Part::Text { text, cache } if !text.is_empty() => system.push(text_block(text, cache.as_ref())),
                        Part::Text { .. } => {}
                        _ => tracing::warn!("anthropic: non-text part of a system message dropped"),
                    }
                }
                continue;
            }
            Role::User | Role::Tool => "user",
            Role::Assistant => "assistant",
        };
        let mut results = Vec::new();
        let mut others = Vec::new();
        for part in &msg.content {
            if let Some(block) = request_block(part) {
                if matches!(part, Part::ToolResult { .. }) { results.push(block) } else { others.push(block) }
            }
        }
        if results.is_empty() && others.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((r, res, oth)) if *r == role && role != "system" => {
                res.extend(results);
                oth.extend(others);
            }
            _ => turns.push((role, results, others)),
        }
    }
    let out = turns
        .into_iter()
        .map(|(role, mut results, others)| {
            results.extend(others);
            json!({"role": role, "content": results})
        })
        .collect();
    (system, out)
}

pub(crate) fn encode_request(req: &Request, upstream_model: &str, opts: &EncodeOptions) -> Value {
    let passthrough = Passthrough::of(req, WireDialect::Anthropic);
    if let Some(pt) = passthrough
        && let Some(body) = verbatim(pt, req, upstream_model, opts)
    {
        return body;
    }
    let system_in_place =
        passthrough.is_some_and(|pt| pt.betas.iter().any(|b| b.starts_with(MID_CONVERSATION_SYSTEM_BETA)));
    let (system, messages) = encode_messages(&req.messages, system_in_place);
    let mut body = Map::new();
    body.insert("model".into(), json!(upstream_model));

    let mut max_tokens = req.params.max_tokens.unwrap_or(opts.default_max_tokens);
    let adaptive = req.thinking.as_ref().is_some_and(|t| t.adaptive);
    let budget = req.thinking.as_ref().filter(|t| !t.adaptive).map(|t| {
        t.budget_tokens.or_else(|| t.effort.map(Effort::budget_tokens)).unwrap_or(Effort::Medium.budget_tokens())
    });
    if let Some(budget) = budget {
        let budget = budget.max(MIN_THINKING_BUDGET);
        // Anthropic requires `budget_tokens < max_tokens`. A client's valid pair is kept as is
        // (Claude Code sends 31999/32000, and raising it could pass the model's output limit).
        if max_tokens <= budget {
            max_tokens = budget.saturating_add(ANSWER_HEADROOM);
        }
        body.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": budget}));
    } else if adaptive {
        body.insert("thinking".into(), json!({"type": "adaptive"}));
    } else {
        if let Some(t) = req.params.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(p) = req.params.top_p {
            body.insert("top_p".into(), json!(p));
        }
        if let Some(k) = req.params.top_k {
            body.insert("top_k".into(), json!(k));
        }
    }
    body.insert("max_tokens".into(), json!(max_tokens));
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert("messages".into(), Value::Array(messages));

    let server_tools = passthrough.map(|pt| pt.tools.as_slice()).unwrap_or_default();
    if !req.tools.is_empty() || !server_tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                let mut tool = Map::new();
                tool.insert("name".into(), json!(t.name));
                if let Some(d) = &t.description {
                    tool.insert("description".into(), json!(d));
                }
                let schema = if t.parameters.is_object() { t.parameters.clone() } else { json!({"type": "object"}) };
                tool.insert("input_schema".into(), schema);
                if let Some(c) = &t.cache {
                    tool.insert("cache_control".into(), cache_control(c));
                }
                Value::Object(tool)
            })
            .chain(server_tools.iter().cloned())
            .collect();
        body.insert("tools".into(), Value::Array(tools));

        let disable_parallel = req.parallel_tool_calls == Some(false);
        let choice = match &req.tool_choice {
            Some(ToolChoice::Auto) => Some(json!({"type": "auto"})),
            Some(ToolChoice::Required) => Some(json!({"type": "any"})),
            Some(ToolChoice::Tool { name }) => Some(json!({"type": "tool", "name": name})),
            Some(ToolChoice::None) => Some(json!({"type": "none"})),
            None if disable_parallel => Some(json!({"type": "auto"})),
            None => None,
        };
        if let Some(mut choice) = choice {
            if let Value::Object(obj) = &mut choice
                && disable_parallel
                && !matches!(req.tool_choice, Some(ToolChoice::None))
            {
                obj.insert("disable_parallel_tool_use".into(), Value::Bool(true));
            }
            body.insert("tool_choice".into(), choice);
        }
    }

    if !req.params.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(req.params.stop));
    }
    if let Some(user) = &req.user {
        body.insert("metadata".into(), json!({"user_id": user}));
    }
    body.insert("stream".into(), Value::Bool(true));
    // What the client sent that Keyhaven does not map (context_management, output_config,
    // mcp_servers, container, ...), verbatim.
    if let Some(pt) = passthrough {
        for (key, value) in &pt.fields {
            body.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    Value::Object(body)
}

/// The client's own body, when the canonical request is still exactly what it decodes to: the
/// model name replaced, `stream: true`, `max_tokens` filled in when missing, and thinking
/// signatures restored (an envelope of another family is dropped with its block, like unsigned
/// thinking). `None` when the engine changed the request since it was decoded.
fn verbatim(pt: &Passthrough, req: &Request, upstream_model: &str, opts: &EncodeOptions) -> Option<Value> {
    let decoded = decode_request_value(&pt.body).ok()?;
    if decoded.without_passthrough() != req.without_passthrough() {
        return None;
    }
    let mut body = pt.body.as_object()?.clone();
    body.insert("model".into(), json!(upstream_model));
    body.insert("stream".into(), Value::Bool(true));
    body.entry("max_tokens").or_insert_with(|| json!(opts.default_max_tokens));
    if let Some(Value::Array(messages)) = body.get_mut("messages") {
        for message in messages.iter_mut() {
            if let Some(Value::Array(blocks)) = message.get_mut("content") {
                blocks.retain_mut(restore_signature);
            }
        }
    }
    Some(Value::Object(body))
}

/// Restores a thinking block's signature in place; false when the block must go.
fn restore_signature(block: &mut Value) -> bool {
    if block.get("type").and_then(Value::as_str) != Some("thinking") {
        return true;
    }
    let Some(signature) = block.get("signature").and_then(Value::as_str) else {
        return false;
    };
    match upstream_signature(signature) {
        Some(sig) => {
            block["signature"] = Value::String(sig);
            true
        }
        None => false,
    }
}

pub(crate) fn encode_response(resp: &Response) -> Value {
    let mut content = Vec::with_capacity(resp.content.len());
    let mut used_tools = false;
    for part in &resp.content {
        match part {
            Part::Text { text, .. } if text.is_empty() => {}
            Part::Text { text, .. } => content.push(json!({"type": "text", "text": text})),
            Part::Thinking { text, signature } => content.push(json!({
                "type": "thinking",
                "thinking": text,
                "signature": signature.as_deref().unwrap_or(""),
            })),
            Part::RedactedThinking { data } => content.push(json!({"type": "redacted_thinking", "data": data})),
            Part::ToolUse { id, name, input } => {
                used_tools = true;
                content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input_object(input)}));
            }
            Part::Image { .. } | Part::ToolResult { .. } => {
                tracing::warn!("anthropic: image or tool result in a response dropped");
            }
        }
    }
    let stop_reason = match (&resp.stop_reason, used_tools) {
        (None, false) => Value::Null,
        (reason, _) => json!(effective_stop_reason(reason.as_ref(), used_tools)),
    };
    json!({
        "id": resp.id,
        "type": "message",
        "role": "assistant",
        "model": resp.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": resp.stop_sequence,
        "usage": {
            "input_tokens": resp.usage.input_tokens,
            "output_tokens": resp.usage.output_tokens,
            "cache_creation_input_tokens": resp.usage.cache_write_tokens,
            "cache_read_input_tokens": resp.usage.cache_read_tokens,
        },
    })
}
