//! Decoding of Anthropic bodies into canonical types: inbound requests and upstream responses
//! (upstream error bodies: [`crate::dialect::error`]).

use serde_json::{Map, Value};

use crate::dialect::DecodeError;
use crate::dialect::anthropic::types::{
    ImageBlock, MAPPED_KEYS, RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock,
    WireCacheControl, WireRequest, WireRole, WireThinking, WireTool, WireToolChoice, WireToolChoiceKind, describe,
    field_error, from_value,
};
use crate::dialect::from_json;
use crate::model::{
    CacheControl, Effort, ImageSource, Message, Part, Passthrough, Request, Role, SamplingParams, StopReason,
    ThinkingConfig, ToolChoice, ToolDef, WireDialect,
};

/// Where a content block appears; decides which block types are allowed and what happens to
/// unknown ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    /// A request message: unknown blocks with obvious text become text.
    Message,
    /// Inside a `tool_result`: text and images only.
    ToolResult,
    /// An upstream response: unknown blocks (server tools) are skipped.
    #[cfg_attr(not(test), expect(dead_code, reason = "whole responses are decoded by unit tests only"))]
    Response,
}

pub(crate) fn decode_request(body: &[u8]) -> Result<Request, DecodeError> {
    let wire: WireRequest = from_json(body)?;
    let raw: Value = from_json(body)?;
    decode_wire(wire, raw)
}

/// Decodes an already parsed body (the encoder's check that a passthrough body still matches the
/// canonical request).
pub(crate) fn decode_request_value(raw: &Value) -> Result<Request, DecodeError> {
    let wire: WireRequest = from_value(raw, "")?;
    decode_wire(wire, raw.clone())
}

fn decode_wire(wire: WireRequest, raw: Value) -> Result<Request, DecodeError> {
    if wire.model.trim().is_empty() {
        return Err(DecodeError::Invalid("`model` must not be empty".into()));
    }
    if wire.messages.is_empty() {
        return Err(DecodeError::Invalid("`messages` must contain at least one message".into()));
    }

    let mut messages = Vec::with_capacity(wire.messages.len() + 1);
    if let Some(system) = &wire.system {
        let parts = decode_system(system)?;
        if !parts.is_empty() {
            messages.push(Message { role: Role::System, content: parts });
        }
    }
    for (i, msg) in wire.messages.iter().enumerate() {
        let path = format!("messages[{i}].content");
        let parts = decode_content(&msg.content, &path, Context::Message)?;
        match msg.role {
            WireRole::System => {
                // Text only; anything else in a system message has no meaning to carry.
                let text: Vec<Part> = parts.into_iter().filter(|p| matches!(p, Part::Text { .. })).collect();
                if !text.is_empty() {
                    messages.push(Message { role: Role::System, content: text });
                }
            }
            WireRole::Assistant => {
                if let Some(pos) = parts.iter().position(|p| matches!(p, Part::ToolResult { .. })) {
                    return Err(field_error(
                        format!("{path}[{pos}].type"),
                        "tool_result blocks are only allowed in user messages",
                    ));
                }
                messages.push(Message { role: Role::Assistant, content: parts });
            }
            WireRole::User => {
                let (results, rest): (Vec<Part>, Vec<Part>) =
                    parts.into_iter().partition(|p| matches!(p, Part::ToolResult { .. }));
                if results.is_empty() {
                    messages.push(Message { role: Role::User, content: rest });
                } else {
                    messages.push(Message { role: Role::Tool, content: results });
                    if !rest.is_empty() {
                        messages.push(Message { role: Role::User, content: rest });
                    }
                }
            }
        }
    }

    let mut passthrough = Passthrough::new(WireDialect::Anthropic, raw);
    passthrough.fields = Passthrough::unmapped(&passthrough.body, &MAPPED_KEYS);
    let mut tools = Vec::new();
    for (i, tool) in wire.tools.iter().flatten().enumerate() {
        match decode_tool(tool, i)? {
            Some(tool) => tools.push(tool),
            None => passthrough.tools.push(tool.clone()),
        }
    }
    let effort = wire
        .output_config
        .as_ref()
        .and_then(|c| c.get("effort"))
        .and_then(Value::as_str)
        .and_then(Effort::parse_anthropic);

    let (tool_choice, parallel_tool_calls) = match &wire.tool_choice {
        Some(choice) => decode_tool_choice(choice)?,
        None => (None, None),
    };

    Ok(Request {
        model: wire.model,
        messages,
        tools,
        tool_choice,
        params: SamplingParams {
            max_tokens: wire.max_tokens,
            temperature: wire.temperature,
            top_p: wire.top_p,
            top_k: wire.top_k,
            stop: wire.stop_sequences.unwrap_or_default(),
            ..SamplingParams::default()
        },
        thinking: wire.thinking.as_ref().and_then(|t| decode_thinking(t, effort)),
        stream: wire.stream.unwrap_or(false),
        parallel_tool_calls,
        user: wire.metadata.and_then(|m| m.user_id),
        passthrough: Some(Box::new(passthrough)),
    })
}

fn decode_system(system: &Value) -> Result<Vec<Part>, DecodeError> {
    match system {
        Value::String(s) if s.is_empty() => Ok(Vec::new()),
        Value::String(s) => Ok(vec![Part::text(s.clone())]),
        Value::Array(blocks) => {
            let mut parts = Vec::with_capacity(blocks.len());
            for (i, block) in blocks.iter().enumerate() {
                let path = format!("system[{i}]");
                let ty = block_type(block, &path)?;
                if ty != "text" {
                    tracing::warn!(path, block_type = ty, "anthropic: non-text system block skipped");
                    continue;
                }
                let text: TextBlock = from_value(block, &path)?;
                parts.push(Part::Text { text: text.text, cache: text.cache_control.map(cache) });
            }
            Ok(parts)
        }
        Value::Null => Ok(Vec::new()),
        other => Err(field_error(
            "system",
            format!("invalid type: {}, expected a string or an array of text blocks", describe(other)),
        )),
    }
}

/// A message's `content`: a string or an array of blocks.
fn decode_content(content: &Value, path: &str, ctx: Context) -> Result<Vec<Part>, DecodeError> {
    match content {
        Value::String(s) => Ok(vec![Part::text(s.clone())]),
        Value::Array(blocks) => {
            let mut parts = Vec::with_capacity(blocks.len());
            for (i, block) in blocks.iter().enumerate() {
                if let Some(part) = decode_block(block, &format!("{path}[{i}]"), ctx)? {
                    parts.push(part);
                }
            }
            Ok(parts)
        }
        other => Err(field_error(
            path,
            format!("invalid type: {}, expected a string or an array of content blocks", describe(other)),
        )),
    }
}

/// The `type` of a content block at `path`.
fn block_type<'a>(block: &'a Value, path: &str) -> Result<&'a str, DecodeError> {
    let Some(obj) = block.as_object() else {
        return Err(field_error(path, format!("invalid type: {}, expected a content block", describe(block))));
    };
    match obj.get("type") {
        Some(Value::String(s)) => Ok(s),
        Some(other) => {
            Err(field_error(format!("{path}.type"), format!("invalid type: {}, expected a string", describe(other))))
        }
        None => Err(field_error(format!("{path}.type"), "missing field `type`")),
    }
}

fn decode_block(block: &Value, path: &str, ctx: Context) -> Result<Option<Part>, DecodeError> {
    let ty = block_type(block, path)?;
    let part = match (ty, ctx) {
        ("text", _) => {
            let b: TextBlock = from_value(block, path)?;
            Part::Text { text: b.text, cache: b.cache_control.map(cache) }
        }
        ("image", _) => {
            let b: ImageBlock = from_value(block, path)?;
            let src_path = format!("{path}.source");
            let source = match b.source.kind.as_str() {
                "base64" => ImageSource::Base64 {
                    media_type: b
                        .source
                        .media_type
                        .ok_or_else(|| field_error(format!("{src_path}.media_type"), "missing field `media_type`"))?,
                    data: b
                        .source
                        .data
                        .ok_or_else(|| field_error(format!("{src_path}.data"), "missing field `data`"))?,
                },
                "url" => ImageSource::Url {
                    url: b.source.url.ok_or_else(|| field_error(format!("{src_path}.url"), "missing field `url`"))?,
                },
                other => {
                    tracing::warn!(path, source = other, "anthropic: image source type not supported, block skipped");
                    return Ok(None);
                }
            };
            Part::Image { source, cache: b.cache_control.map(cache) }
        }
        ("thinking", Context::Message | Context::Response) => {
            let b: ThinkingBlock = from_value(block, path)?;
            Part::Thinking { text: b.thinking, signature: b.signature.filter(|s| !s.is_empty()) }
        }
        ("redacted_thinking", Context::Message | Context::Response) => {
            let b: RedactedThinkingBlock = from_value(block, path)?;
            Part::RedactedThinking { data: b.data }
        }
        ("tool_use", Context::Message | Context::Response) => {
            let b: ToolUseBlock = from_value(block, path)?;
            let input = if b.input.is_null() { Value::Object(Map::new()) } else { b.input };
            Part::ToolUse { id: b.id, name: b.name, input }
        }
        ("tool_result", Context::Message) => {
            let b: ToolResultBlock = from_value(block, path)?;
            let content = match &b.content {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::String(s)) if s.is_empty() => Vec::new(),
                Some(content) => decode_content(content, &format!("{path}.content"), Context::ToolResult)?,
            };
            Part::ToolResult { tool_use_id: b.tool_use_id, content, is_error: b.is_error.unwrap_or(false) }
        }
        (_, Context::Message | Context::ToolResult) => match block.as_object().and_then(obvious_text) {
            Some(text) => {
                tracing::warn!(path, block_type = ty, "anthropic: unsupported content block converted to text");
                Part::text(text)
            }
            None => {
                tracing::warn!(path, block_type = ty, "anthropic: unsupported content block skipped");
                return Ok(None);
            }
        },
        (_, Context::Response) => {
            tracing::warn!(path, block_type = ty, "anthropic: unsupported response block skipped");
            return Ok(None);
        }
    };
    Ok(Some(part))
}

/// The text a block of an unknown type obviously carries: its `text`, a plain-text document
/// `source`, or the text blocks of its `content` (search results, content documents).
fn obvious_text(obj: &Map<String, Value>) -> Option<String> {
    if let Some(Value::String(text)) = obj.get("text") {
        return Some(text.clone()).filter(|t| !t.is_empty());
    }
    if let Some(Value::Object(source)) = obj.get("source") {
        match (source.get("type").and_then(Value::as_str), source.get("data"), source.get("content")) {
            (Some("text"), Some(Value::String(data)), _) => return Some(data.clone()).filter(|t| !t.is_empty()),
            (Some("content"), _, Some(content)) => return texts_of(content),
            _ => {}
        }
    }
    obj.get("content").and_then(texts_of)
}

/// A string, or the `text` of each block of an array joined by newlines.
fn texts_of(content: &Value) -> Option<String> {
    let text = match content {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .filter_map(|item| item.get("text").and_then(Value::as_str))
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => return None,
    };
    Some(text).filter(|t| !t.is_empty())
}

fn cache(control: WireCacheControl) -> CacheControl {
    CacheControl { ttl: control.ttl }
}

fn decode_tool(tool: &Value, i: usize) -> Result<Option<ToolDef>, DecodeError> {
    let path = format!("tools[{i}]");
    let server_type = tool.get("type").and_then(Value::as_str).filter(|t| *t != "custom");
    if tool.get("input_schema").is_none()
        && let Some(ty) = server_type
    {
        tracing::warn!(tool_type = ty, "anthropic: server tool not supported, skipped");
        return Ok(None);
    }
    let wire: WireTool = from_value(tool, &path)?;
    Ok(Some(ToolDef {
        name: wire.name,
        description: wire.description,
        parameters: wire.input_schema,
        cache: wire.cache_control.map(cache),
    }))
}

fn decode_tool_choice(choice: &WireToolChoice) -> Result<(Option<ToolChoice>, Option<bool>), DecodeError> {
    let tc = match choice.kind {
        WireToolChoiceKind::Auto => ToolChoice::Auto,
        WireToolChoiceKind::Any => ToolChoice::Required,
        WireToolChoiceKind::None => ToolChoice::None,
        WireToolChoiceKind::Tool => match &choice.name {
            Some(name) if !name.is_empty() => ToolChoice::Tool { name: name.clone() },
            _ => return Err(field_error("tool_choice.name", "missing field `name`")),
        },
    };
    let parallel = (choice.disable_parallel_tool_use == Some(true)).then_some(false);
    Ok((Some(tc), parallel))
}

/// `thinking` with `output_config.effort`: `enabled` keeps its budget, `adaptive` is marked as
/// such, and either carries the effort when the client gave one (adaptive without one is medium).
fn decode_thinking(thinking: &WireThinking, effort: Option<Effort>) -> Option<ThinkingConfig> {
    match (thinking.kind.as_str(), thinking.budget_tokens) {
        ("disabled", _) => None,
        ("enabled", Some(budget)) => Some(ThinkingConfig { budget_tokens: Some(budget), effort, adaptive: false }),
        ("adaptive", _) => {
            Some(ThinkingConfig { budget_tokens: None, effort: Some(effort.unwrap_or(Effort::Medium)), adaptive: true })
        }
        _ => Some(ThinkingConfig {
            budget_tokens: None,
            effort: Some(effort.unwrap_or(Effort::Medium)),
            adaptive: false,
        }),
    }
}

pub(crate) fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" => StopReason::EndTurn,
        "max_tokens" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "tool_use" => StopReason::ToolUse,
        "refusal" => StopReason::Refusal,
        other => StopReason::Other(other.to_owned()),
    }
}

#[cfg(test)]
use crate::dialect::anthropic::types::WireResponse;
#[cfg(test)]
use crate::model::Response;

#[cfg(test)]
pub(crate) fn decode_response(body: &[u8]) -> Result<Response, DecodeError> {
    let wire: WireResponse = from_json(body)?;
    let mut content = Vec::with_capacity(wire.content.len());
    for (i, block) in wire.content.iter().enumerate() {
        if let Some(part) = decode_block(block, &format!("content[{i}]"), Context::Response)? {
            content.push(part);
        }
    }
    Ok(Response {
        id: wire.id,
        model: wire.model,
        content,
        stop_reason: wire.stop_reason.as_deref().map(stop_reason),
        stop_sequence: wire.stop_sequence,
        usage: wire.usage.map(|u| u.to_model()).unwrap_or_default(),
        created_ms: 0,
    })
}
