//! Encoding: complete responses and error bodies toward clients, request bodies toward upstreams.

use serde_json::{Map, Value, json};

use crate::dialect::openai_chat::types::WireUsageOut;
use crate::dialect::openai_chat::{EncodeOptions, MaxTokensField};
use crate::model::{self, Effort, ErrorInfo, ErrorKind, Part, Passthrough, Role, StopReason, ToolChoice, WireDialect};

/// Placeholder left in a tool message's text where the tool result had an image (tool messages
/// carry text only; the image follows in a user message).
const IMAGE_PLACEHOLDER: &str = "[image]";

// ---------------------------------------------------------------------------------------------
// Toward clients
// ---------------------------------------------------------------------------------------------

pub(crate) fn encode_response(resp: &model::Response) -> Value {
    let text = model::joined_text(&resp.content, "");
    let reasoning: String = resp
        .content
        .iter()
        .filter_map(|p| match p {
            Part::Thinking { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let tool_calls: Vec<Value> = resp
        .content
        .iter()
        .filter_map(|p| match p {
            Part::ToolUse { id, name, input } => Some(tool_call_json(id, name, input)),
            _ => None,
        })
        .collect();

    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert("content".into(), if text.is_empty() { Value::Null } else { Value::String(text) });
    if !reasoning.is_empty() {
        message.insert("reasoning_content".into(), Value::String(reasoning));
    }
    let has_tools = !tool_calls.is_empty();
    if has_tools {
        message.insert("tool_calls".into(), Value::Array(tool_calls));
    }

    let finish = finish_reason(resp.stop_reason.as_ref(), has_tools);
    json!({
        "id": resp.id,
        "object": "chat.completion",
        "created": created_secs(resp.created_ms),
        "model": resp.model,
        "choices": [{
            "index": 0,
            "message": Value::Object(message),
            "finish_reason": finish,
            "logprobs": null,
        }],
        "usage": WireUsageOut::from_usage(&resp.usage),
    })
}

/// Unix seconds from Unix milliseconds.
pub(crate) fn created_secs(created_ms: i64) -> i64 {
    created_ms.div_euclid(1000)
}

/// The `finish_reason` for a stop reason. An answer with tool calls finishes with `tool_calls`
/// whatever the reason says, unless it was cut off by the token limit. No reason at all is
/// reported as a normal stop.
pub(crate) fn finish_reason(reason: Option<&StopReason>, has_tool_calls: bool) -> String {
    match reason {
        Some(StopReason::MaxTokens) => "length".into(),
        _ if has_tool_calls => "tool_calls".into(),
        None | Some(StopReason::EndTurn | StopReason::StopSequence) => "stop".into(),
        Some(StopReason::ToolUse) => "tool_calls".into(),
        Some(StopReason::ContentFilter | StopReason::Refusal) => "content_filter".into(),
        Some(StopReason::Other(s)) => s.clone(),
    }
}

/// Tool-call arguments as OpenAI's JSON-encoded string. A string input is arguments that were
/// not valid JSON, kept raw (see [`Part::ToolUse`]); it is sent back unchanged.
pub(crate) fn arguments_string(input: &Value) -> String {
    match input {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

fn tool_call_json(id: &str, name: &str, input: &Value) -> Value {
    json!({
        "id": id,
        "type": "function",
        "function": {"name": name, "arguments": arguments_string(input)},
    })
}

/// OpenAI's error `type` for a kind.
pub(crate) fn error_type(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidRequest | ErrorKind::RequestTooLarge => "invalid_request_error",
        ErrorKind::Authentication => "authentication_error",
        ErrorKind::PermissionDenied => "permission_error",
        ErrorKind::NotFound => "not_found_error",
        ErrorKind::RateLimited => "rate_limit_error",
        ErrorKind::Overloaded => "overloaded_error",
        ErrorKind::Timeout => "timeout_error",
        ErrorKind::Upstream | ErrorKind::Internal => "server_error",
    }
}

pub(crate) fn encode_error(error: &ErrorInfo) -> Value {
    json!({
        "error": {
            "message": error.message,
            "type": error_type(error.kind),
            "param": null,
            "code": error.kind.as_str(),
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Toward upstreams
// ---------------------------------------------------------------------------------------------

pub(crate) fn encode_request(req: &model::Request, upstream_model: &str, opts: &EncodeOptions) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(upstream_model));
    body.insert("messages".into(), Value::Array(encode_messages(&req.messages, opts)));

    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                let mut function = Map::new();
                function.insert("name".into(), json!(t.name));
                if let Some(description) = &t.description {
                    function.insert("description".into(), json!(description));
                }
                function.insert("parameters".into(), t.parameters.clone());
                json!({"type": "function", "function": Value::Object(function)})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = &req.tool_choice {
            body.insert("tool_choice".into(), tool_choice_json(choice));
        }
        if let Some(parallel) = req.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), json!(parallel));
        }
    }

    let p = &req.params;
    if let Some(max) = p.max_tokens {
        let field = match opts.max_tokens_field {
            MaxTokensField::MaxTokens => "max_tokens",
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
        };
        body.insert(field.into(), json!(max));
    }
    let floats = [
        ("temperature", p.temperature),
        ("top_p", p.top_p),
        ("presence_penalty", p.presence_penalty),
        ("frequency_penalty", p.frequency_penalty),
    ];
    for (name, value) in floats {
        if let Some(v) = value {
            body.insert(name.into(), json!(v));
        }
    }
    if let Some(seed) = p.seed {
        body.insert("seed".into(), json!(seed));
    }
    if !p.stop.is_empty() {
        body.insert("stop".into(), json!(p.stop));
    }
    if let Some(user) = &req.user {
        body.insert("user".into(), json!(user));
    }
    if opts.reasoning_effort
        && let Some(thinking) = &req.thinking
    {
        let effort = thinking.effort.or(thinking.budget_tokens.map(Effort::from_budget)).unwrap_or(Effort::Medium);
        body.insert("reasoning_effort".into(), json!(effort.as_str()));
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    // A Chat client's own extras (prompt_cache_key, service_tier, response_format, ...) and its
    // non-function tools go to a Chat upstream verbatim; other dialects' extras never do.
    if let Some(pt) = Passthrough::of(req, WireDialect::OpenaiChat) {
        if !pt.tools.is_empty() {
            if let Some(Value::Array(tools)) = body.get_mut("tools") {
                tools.extend(pt.tools.iter().cloned());
            } else {
                body.insert("tools".into(), Value::Array(pt.tools.clone()));
            }
        }
        for (key, value) in &pt.fields {
            body.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    Value::Object(body)
}

fn tool_choice_json(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Tool { name } => json!({"type": "function", "function": {"name": name}}),
    }
}

/// Builds the message list. Tool results become `tool` messages wherever they sit; images in tool
/// results are held back and sent in one user message after the run of tool messages ends
/// (a user message between two tool messages would break the tool-call pairing upstream).
fn encode_messages(messages: &[model::Message], opts: &EncodeOptions) -> Vec<Value> {
    let mut out = Vec::new();
    let mut pending_images: Vec<Value> = Vec::new();

    for message in messages {
        // Tool results come first: in Anthropic-shaped history they share a user message with
        // the user's next words, and they must directly follow the assistant's tool calls.
        for part in &message.content {
            if let Part::ToolResult { tool_use_id, content, is_error } = part {
                out.push(tool_message(tool_use_id, content, *is_error, &mut pending_images));
            }
        }
        let rest: Vec<&Part> = message.content.iter().filter(|p| !matches!(p, Part::ToolResult { .. })).collect();
        let encoded = match message.role {
            Role::System => {
                Some(json!({"role": "system", "content": model::joined_text(rest.iter().copied(), "\n\n")}))
            }
            Role::User | Role::Tool => user_message(&rest),
            Role::Assistant => assistant_message(&rest, opts),
        };
        if let Some(encoded) = encoded {
            flush_images(&mut out, &mut pending_images);
            out.push(encoded);
        }
    }
    flush_images(&mut out, &mut pending_images);
    out
}

fn flush_images(out: &mut Vec<Value>, pending: &mut Vec<Value>) {
    if !pending.is_empty() {
        out.push(json!({"role": "user", "content": std::mem::take(pending)}));
    }
}

fn tool_message(tool_use_id: &str, content: &[Part], is_error: bool, pending_images: &mut Vec<Value>) -> Value {
    let mut pieces = Vec::new();
    let mut images = Vec::new();
    for part in content {
        match part {
            Part::Text { text, .. } => pieces.push(text.as_str()),
            Part::Image { source, .. } => {
                pieces.push(IMAGE_PLACEHOLDER);
                images.push(json!({"type": "image_url", "image_url": {"url": source.to_url()}}));
            }
            _ => {}
        }
    }
    if !images.is_empty() {
        pending_images.push(json!({"type": "text", "text": format!("Image(s) from tool call {tool_use_id}:")}));
        pending_images.extend(images);
    }
    let text = pieces.join("\n");
    let text = match (is_error, text.is_empty()) {
        (true, true) => "Error".to_owned(),
        (true, false) => format!("Error: {text}"),
        (false, _) => text,
    };
    json!({"role": "tool", "tool_call_id": tool_use_id, "content": text})
}

/// A user message from text and image parts; `None` when nothing is left (e.g. the message only
/// held tool results). A single text part is sent as a plain string.
fn user_message(parts: &[&Part]) -> Option<Value> {
    let items: Vec<Value> = parts
        .iter()
        .filter_map(|p| match p {
            Part::Text { text, .. } => Some(json!({"type": "text", "text": text})),
            Part::Image { source, .. } => Some(json!({"type": "image_url", "image_url": {"url": source.to_url()}})),
            _ => None,
        })
        .collect();
    match items.as_slice() {
        [] => None,
        [single] if single.get("type").and_then(Value::as_str) == Some("text") => {
            Some(json!({"role": "user", "content": single.get("text").cloned().unwrap_or(Value::Null)}))
        }
        _ => Some(json!({"role": "user", "content": items})),
    }
}

/// An assistant message; `None` when nothing would be sent (e.g. it only held thinking and
/// reasoning is not sent back): an empty assistant turn reads as a prefill to some vendors.
fn assistant_message(parts: &[&Part], opts: &EncodeOptions) -> Option<Value> {
    let text = model::joined_text(parts.iter().copied(), "");
    let reasoning: String = parts
        .iter()
        .filter_map(|p| match p {
            Part::Thinking { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let tool_calls: Vec<Value> = parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolUse { id, name, input } => Some(tool_call_json(id, name, input)),
            _ => None,
        })
        .collect();

    let send_reasoning = opts.reasoning_content && !reasoning.is_empty();
    if text.is_empty() && tool_calls.is_empty() && !send_reasoning {
        return None;
    }
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    let content = match (text.is_empty(), tool_calls.is_empty()) {
        (false, _) => Value::String(text),
        // Content may only be null next to tool calls.
        (true, false) => Value::Null,
        (true, true) => Value::String(String::new()),
    };
    message.insert("content".into(), content);
    if send_reasoning {
        message.insert("reasoning_content".into(), Value::String(reasoning));
    }
    if !tool_calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(tool_calls));
    }
    Some(Value::Object(message))
}
