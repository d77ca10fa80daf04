//! Decoding: inbound requests and upstream responses (upstream error bodies:
//! [`crate::dialect::error`]).

use serde::Deserialize;
use serde_json::Value;

use crate::dialect::openai_chat::StreamOptions;
#[cfg(test)]
use crate::dialect::openai_chat::types::ChatCompletion;
use crate::dialect::openai_chat::types::{ChatRequest, Content, InMessage, InPart, InToolCall};
use crate::dialect::{DecodeError, from_json};
use crate::model::reasoning::Envelope;
use crate::model::{
    self, Effort, ImageSource, Message, Part, Passthrough, Role, SamplingParams, StopReason, ThinkingConfig,
    ToolChoice, ToolDef, WireDialect,
};

/// The top-level keys [`ChatRequest`] maps; every other key is kept verbatim in the request's
/// passthrough (`prompt_cache_key`, `service_tier`, `store`, `metadata`, `response_format`,
/// `modalities`, `prediction`, `logprobs`, `safety_identifier`, ...).
const MAPPED_KEYS: [&str; 19] = [
    "model",
    "messages",
    "tools",
    "tool_choice",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "reasoning_effort",
    "stream",
    "stream_options",
    "parallel_tool_calls",
    "user",
    "n",
];

pub(crate) fn decode_request(body: &[u8]) -> Result<(model::Request, StreamOptions), DecodeError> {
    let req: ChatRequest = from_json_strict(body)?;
    let raw: Value = from_json(body)?;
    let mut passthrough = Passthrough::new(WireDialect::OpenaiChat, Value::Null);
    passthrough.fields = Passthrough::unmapped(&raw, &MAPPED_KEYS);
    let raw_tools = raw.get("tools").and_then(Value::as_array);

    if req.model.trim().is_empty() {
        return Err(DecodeError::Invalid("`model` must be a non-empty string".into()));
    }
    if req.messages.is_empty() {
        return Err(DecodeError::Invalid("`messages` must contain at least one message".into()));
    }
    if req.n.is_some_and(|n| n > 1) {
        return Err(DecodeError::Invalid("n > 1 is not supported".into()));
    }

    let messages =
        req.messages.into_iter().enumerate().map(|(i, m)| decode_message(i, m)).collect::<Result<Vec<_>, _>>()?;

    let mut tools = Vec::new();
    for (i, tool) in req.tools.unwrap_or_default().into_iter().enumerate() {
        let kind = tool.kind.as_deref().unwrap_or("function");
        if kind != "function" {
            // `custom` and vendor tool types: kept for a Chat upstream, left out elsewhere.
            tracing::warn!(tool_type = kind, "openai chat: tool type without a canonical counterpart kept aside");
            if let Some(raw) = raw_tools.and_then(|t| t.get(i)) {
                passthrough.tools.push(raw.clone());
            }
            continue;
        }
        let Some(function) = tool.function else {
            return Err(DecodeError::Invalid(format!("tools[{i}]: a function tool needs a `function` object")));
        };
        if function.name.is_empty() {
            return Err(DecodeError::Invalid(format!("tools[{i}]: the function name must not be empty")));
        }
        tools.push(ToolDef {
            name: function.name,
            description: function.description,
            parameters: function
                .parameters
                .filter(|p| !p.is_null())
                .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}})),
            cache: None,
        });
    }

    let tool_choice = match req.tool_choice {
        None | Some(Value::Null) => None,
        Some(v) => Some(decode_tool_choice(&v)?),
    };

    let thinking = match req.reasoning_effort.as_deref() {
        None | Some("none") => None,
        Some(effort) => {
            Some(ThinkingConfig { budget_tokens: None, effort: Some(decode_effort(effort)?), adaptive: false })
        }
    };

    let params = SamplingParams {
        max_tokens: req.max_completion_tokens.or(req.max_tokens),
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        stop: req.stop.map(|s| s.0).unwrap_or_default(),
        seed: req.seed,
        presence_penalty: req.presence_penalty,
        frequency_penalty: req.frequency_penalty,
    };

    let opts = StreamOptions { include_usage: req.stream_options.and_then(|o| o.include_usage).unwrap_or(false) };
    let request = model::Request {
        model: req.model,
        messages,
        tools,
        tool_choice,
        params,
        thinking,
        stream: req.stream.unwrap_or(false),
        parallel_tool_calls: req.parallel_tool_calls,
        user: req.user,
        passthrough: Some(Box::new(passthrough)),
    };
    Ok((request, opts))
}

fn decode_effort(effort: &str) -> Result<Effort, DecodeError> {
    Effort::parse(effort).ok_or_else(|| {
        DecodeError::Invalid(format!(
            "reasoning_effort `{effort}` is not supported (expected minimal, low, medium or high)"
        ))
    })
}

fn decode_tool_choice(v: &Value) -> Result<ToolChoice, DecodeError> {
    match v {
        Value::String(s) => match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            other => Err(DecodeError::Invalid(format!(
                "tool_choice `{other}` is not supported (expected auto, none, required or a function)"
            ))),
        },
        Value::Object(obj) => {
            let kind = obj.get("type").and_then(Value::as_str).unwrap_or("function");
            if kind != "function" {
                return Err(DecodeError::Invalid(format!("tool_choice type `{kind}` is not supported")));
            }
            match obj.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) {
                Some(name) if !name.is_empty() => Ok(ToolChoice::Tool { name: name.to_owned() }),
                _ => Err(DecodeError::Field {
                    path: "tool_choice.function.name".into(),
                    message: "expected a non-empty function name".into(),
                }),
            }
        }
        _ => Err(DecodeError::Field {
            path: "tool_choice".into(),
            message: "expected \"auto\", \"none\", \"required\" or {\"type\": \"function\", ...}".into(),
        }),
    }
}

fn decode_message(i: usize, m: InMessage) -> Result<Message, DecodeError> {
    match m.role.as_str() {
        "system" | "developer" => {
            Ok(Message { role: Role::System, content: decode_content(i, m.content, ContentRole::System)? })
        }
        "user" => Ok(Message { role: Role::User, content: decode_content(i, m.content, ContentRole::User)? }),
        "assistant" => decode_assistant(i, m),
        "tool" | "function" => {
            let id = if m.role == "tool" { m.tool_call_id } else { m.tool_call_id.or(m.name) };
            let Some(tool_use_id) = id.filter(|id| !id.is_empty()) else {
                return Err(DecodeError::Invalid(format!(
                    "messages[{i}]: a `{}` message needs a non-empty `tool_call_id`",
                    m.role
                )));
            };
            let content = decode_content(i, m.content, ContentRole::Tool)?;
            Ok(Message { role: Role::Tool, content: vec![Part::ToolResult { tool_use_id, content, is_error: false }] })
        }
        other => Err(DecodeError::Invalid(format!(
            "messages[{i}]: role `{other}` is not supported (expected system, developer, user, assistant or tool)"
        ))),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ContentRole {
    System,
    User,
    Assistant,
    Tool,
}

fn decode_content(i: usize, content: Option<Content>, role: ContentRole) -> Result<Vec<Part>, DecodeError> {
    match content {
        None => Ok(Vec::new()),
        // An empty assistant string (common next to `tool_calls`) is no content at all.
        Some(Content::Text(text)) if text.is_empty() && role == ContentRole::Assistant => Ok(Vec::new()),
        Some(Content::Text(text)) => Ok(vec![Part::text(text)]),
        Some(Content::Parts(parts)) => {
            let parts = parts.into_iter().enumerate().map(|(j, p)| decode_part(i, j, p, role));
            parts.filter_map(Result::transpose).collect()
        }
    }
}

/// One content part; `None` for a part type without a canonical counterpart (left out).
fn decode_part(i: usize, j: usize, part: InPart, role: ContentRole) -> Result<Option<Part>, DecodeError> {
    let path = format!("messages[{i}].content[{j}]");
    let path = path.as_str();
    Ok(Some(match part.kind.as_str() {
        "text" => match part.text {
            Some(text) => Part::text(text),
            None => {
                return Err(DecodeError::Field {
                    path: format!("{path}.text"),
                    message: "missing field `text`".into(),
                });
            }
        },
        "refusal" if role == ContentRole::Assistant => Part::text(part.refusal.unwrap_or_default()),
        "image_url" if role == ContentRole::User => match part.image_url {
            Some(image) => Part::Image { source: ImageSource::from_url(&image.url), cache: None },
            None => {
                return Err(DecodeError::Field {
                    path: format!("{path}.image_url"),
                    message: "missing field `image_url`".into(),
                });
            }
        },
        "image_url" => {
            return Err(DecodeError::Invalid(format!("{path}: images are only supported in user messages")));
        }
        other => {
            // Audio, files and future part types are left out, never a 400.
            tracing::warn!(
                path,
                part_type = other,
                "openai chat: content part without a canonical counterpart skipped"
            );
            return Ok(None);
        }
    }))
}

fn decode_assistant(i: usize, m: InMessage) -> Result<Message, DecodeError> {
    let mut content = Vec::new();
    if let Some(reasoning) = m.reasoning_content.filter(|r| !r.is_empty()) {
        content.push(Part::Thinking { text: reasoning, signature: Some(Envelope::openai_chat().encode()) });
    }
    content.extend(decode_content(i, m.content, ContentRole::Assistant)?);
    for (j, call) in m.tool_calls.unwrap_or_default().into_iter().enumerate() {
        content.push(
            decode_tool_call(call, None)
                .map_err(|msg| DecodeError::Invalid(format!("messages[{i}].tool_calls[{j}]: {msg}")))?,
        );
    }
    Ok(Message { role: Role::Assistant, content })
}

/// A `tool_calls` entry (request history or upstream response) as a [`Part::ToolUse`].
///
/// A call in a client's history must have an id (its result refers to it). Some local upstreams
/// omit ids in responses; with `fallback_index` the call gets `call_<index>`, as in streams.
fn decode_tool_call(call: InToolCall, fallback_index: Option<usize>) -> Result<Part, String> {
    if let Some(kind) = call.kind.as_deref()
        && kind != "function"
    {
        return Err(format!("tool call type `{kind}` is not supported"));
    }
    let input = match call.function.arguments {
        None | Some(Value::Null) => model::parse_arguments(""),
        Some(Value::String(raw)) => model::parse_arguments(&raw),
        Some(other) => other,
    };
    let id = match (call.id.filter(|id| !id.is_empty()), fallback_index) {
        (Some(id), _) => id,
        (None, Some(index)) => format!("call_{index}"),
        (None, None) => return Err("a tool call needs a non-empty `id`".into()),
    };
    Ok(Part::ToolUse { id, name: call.function.name, input })
}

/// [`from_json`], also rejecting anything but whitespace after the JSON value (`from_json`
/// stops reading at the end of the value).
fn from_json_strict<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, DecodeError> {
    let value = from_json(body)?;
    let mut de = serde_json::Deserializer::from_slice(body);
    serde::de::IgnoredAny::deserialize(&mut de).and_then(|_| de.end()).map_err(|err| DecodeError::Syntax {
        line: err.line(),
        column: err.column(),
        message: err.to_string(),
    })?;
    Ok(value)
}

/// Maps a `finish_reason` onto the canonical stop reason.
pub(crate) fn stop_reason(finish_reason: &str) -> StopReason {
    match finish_reason {
        "stop" => StopReason::EndTurn,
        "length" => StopReason::MaxTokens,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "content_filter" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_owned()),
    }
}

#[cfg(test)]
pub(crate) fn decode_response(body: &[u8]) -> Result<model::Response, DecodeError> {
    let completion: ChatCompletion = from_json_strict(body)?;
    let choice = completion.choices.and_then(|c| c.into_iter().next());

    let mut content = Vec::new();
    let mut stop = None;
    if let Some(choice) = choice {
        stop = choice.finish_reason.as_deref().map(stop_reason);
        if let Some(message) = choice.message {
            if let Some(reasoning) = message.reasoning_content.or(message.reasoning).filter(|r| !r.is_empty()) {
                content.push(Part::Thinking { text: reasoning, signature: Some(Envelope::openai_chat().encode()) });
            }
            match message.content {
                Some(Content::Text(text)) if !text.is_empty() => content.push(Part::text(text)),
                Some(Content::Parts(parts)) => {
                    for part in parts {
                        if let Some(text) = part.text.or(part.refusal).filter(|t| !t.is_empty()) {
                            content.push(Part::text(text));
                        }
                    }
                }
                _ => {}
            }
            if let Some(refusal) = message.refusal.filter(|r| !r.is_empty()) {
                content.push(Part::text(refusal));
                if stop == Some(StopReason::EndTurn) {
                    stop = Some(StopReason::Refusal);
                }
            }
            for (j, call) in message.tool_calls.unwrap_or_default().into_iter().enumerate() {
                content.push(
                    decode_tool_call(call, Some(j))
                        .map_err(|msg| DecodeError::Invalid(format!("choices[0].message.tool_calls[{j}]: {msg}")))?,
                );
            }
        }
    }

    Ok(model::Response {
        id: completion.id.unwrap_or_default(),
        model: completion.model.unwrap_or_default(),
        content,
        stop_reason: stop,
        stop_sequence: None,
        usage: completion.usage.map(|u| u.to_usage()).unwrap_or_default(),
        created_ms: completion.created.unwrap_or(0).saturating_mul(1000),
    })
}
