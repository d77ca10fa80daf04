//! Decoding: inbound requests (input items into canonical messages) and upstream response objects
//! (upstream error bodies: [`crate::dialect::error`]).

#[cfg(test)]
use serde::Deserialize;
use serde_json::Value;

#[cfg(test)]
use crate::dialect::openai_responses::types::WireUsageIn;
use crate::dialect::openai_responses::types::{Content, InItem, InPart, Input, ResponsesRequest};
use crate::dialect::openai_responses::{REDACTED_PREFIX, RequestOptions};
use crate::dialect::{DecodeError, from_json};
use crate::model::reasoning::{Envelope, is_envelope};
use crate::model::{
    self, Effort, ImageSource, Message, Part, Passthrough, Role, SamplingParams, StopReason, ThinkingConfig,
    ToolChoice, ToolDef, WireDialect,
};

/// The top-level keys [`ResponsesRequest`] maps; every other key is kept verbatim in the
/// request's passthrough (`include`, `text`, `metadata`, `prompt_cache_key`, `service_tier`,
/// `truncation`, `safety_identifier`, ...).
const MAPPED_KEYS: [&str; 14] = [
    "model",
    "instructions",
    "input",
    "tools",
    "tool_choice",
    "max_output_tokens",
    "temperature",
    "top_p",
    "reasoning",
    "parallel_tool_calls",
    "stream",
    "store",
    "previous_response_id",
    "user",
];

/// Hosted tools the Responses upstream runs itself (their output needs nothing from the client);
/// they are re-sent to a Responses upstream. Client-run tool types (`custom`, `local_shell`,
/// `computer_use_preview`, ...) are left out: their calls have no canonical form.
fn is_hosted_tool(kind: &str) -> bool {
    kind.starts_with("web_search") || matches!(kind, "file_search" | "code_interpreter" | "image_generation" | "mcp")
}

pub(crate) fn decode_request(body: &[u8]) -> Result<(model::Request, RequestOptions), DecodeError> {
    let req: ResponsesRequest = from_json(body)?;
    let raw: Value = from_json(body)?;
    let mut passthrough = Passthrough::new(WireDialect::OpenaiResponses, Value::Null);
    passthrough.fields = Passthrough::unmapped(&raw, &MAPPED_KEYS);
    if let Some(tools) = raw.get("tools").and_then(Value::as_array) {
        passthrough.tools = tools
            .iter()
            .filter(|t| t.get("type").and_then(Value::as_str).is_some_and(is_hosted_tool))
            .cloned()
            .collect();
    }

    if req.model.trim().is_empty() {
        return Err(DecodeError::Invalid("`model` must be a non-empty string".into()));
    }
    let previous_response_id = req.previous_response_id.filter(|id| !id.is_empty());

    let mut messages = Vec::new();
    let has_instructions = match req.instructions {
        Some(text) if !text.is_empty() => {
            messages.push(Message::text(Role::System, text));
            true
        }
        _ => false,
    };
    match req.input {
        None => {}
        Some(Input::Text(text)) => messages.push(Message::text(Role::User, text)),
        Some(Input::Items(items)) => {
            for (i, item) in items.into_iter().enumerate() {
                decode_item(i, item, &mut messages)?;
            }
        }
    }
    if messages.iter().all(|m| m.role == Role::System) && previous_response_id.is_none() {
        return Err(DecodeError::Invalid("`input` must contain at least one item".into()));
    }

    let mut tools = Vec::new();
    for (i, tool) in req.tools.unwrap_or_default().into_iter().enumerate() {
        if let Some(def) = decode_tool(i, tool)? {
            tools.push(def);
        }
    }

    let tool_choice = match req.tool_choice {
        None | Some(Value::Null) => None,
        Some(v) => Some(decode_tool_choice(&v)?),
    };

    let thinking = match req.reasoning {
        None => None,
        Some(r) => match r.effort.as_deref() {
            Some("none") => None,
            None => Some(ThinkingConfig::default()),
            Some(effort) => {
                Some(ThinkingConfig { budget_tokens: None, effort: Some(decode_effort(effort)?), adaptive: false })
            }
        },
    };

    let params = SamplingParams {
        max_tokens: req.max_output_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        ..SamplingParams::default()
    };
    let opts = RequestOptions { previous_response_id, store: req.store.unwrap_or(true), has_instructions };
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
            "reasoning.effort `{effort}` is not supported (expected none, minimal, low, medium, high or xhigh)"
        ))
    })
}

fn decode_tool(
    i: usize,
    tool: crate::dialect::openai_responses::types::InTool,
) -> Result<Option<ToolDef>, DecodeError> {
    let kind = tool.kind.as_deref().unwrap_or("function");
    if kind != "function" {
        tracing::warn!(tool_type = kind, "responses: tool type without a canonical counterpart skipped");
        return Ok(None);
    }
    // Tolerate Chat Completions' nesting under `function`.
    let nested = tool.function.as_ref().filter(|f| f.is_object());
    let nested_str = |key: &str| nested.and_then(|f| f.get(key)).and_then(Value::as_str).map(str::to_owned);
    let name = tool.name.or_else(|| nested_str("name")).unwrap_or_default();
    if name.is_empty() {
        return Err(DecodeError::Invalid(format!("tools[{i}]: a function tool needs a non-empty `name`")));
    }
    let parameters = tool
        .parameters
        .or_else(|| nested.and_then(|f| f.get("parameters")).cloned())
        .filter(|p| !p.is_null())
        .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
    Ok(Some(ToolDef {
        name,
        description: tool.description.or_else(|| nested_str("description")),
        parameters,
        cache: None,
    }))
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
        Value::Object(obj) => match obj.get("type").and_then(Value::as_str).unwrap_or("function") {
            "function" => {
                let name = obj
                    .get("name")
                    .or_else(|| obj.get("function").and_then(|f| f.get("name")))
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty());
                match name {
                    Some(name) => Ok(ToolChoice::Tool { name: name.to_owned() }),
                    None => Err(DecodeError::Field {
                        path: "tool_choice.name".into(),
                        message: "expected a non-empty function name".into(),
                    }),
                }
            }
            "allowed_tools" => match obj.get("mode").and_then(Value::as_str) {
                Some("required") => Ok(ToolChoice::Required),
                _ => Ok(ToolChoice::Auto),
            },
            other => Err(DecodeError::Invalid(format!("tool_choice type `{other}` is not supported"))),
        },
        _ => Err(DecodeError::Field {
            path: "tool_choice".into(),
            message: "expected \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}".into(),
        }),
    }
}

/// Appends `part` to the last message when it has `role`, else starts a message. Used for
/// assistant output (reasoning, text and calls of one turn) and tool results.
fn push_merged(messages: &mut Vec<Message>, role: Role, part: Part) {
    match messages.last_mut() {
        Some(last) if last.role == role => last.content.push(part),
        _ => messages.push(Message { role, content: vec![part] }),
    }
}

fn required<'a>(value: &'a Option<String>, path: &str, what: &str) -> Result<&'a str, DecodeError> {
    match value.as_deref() {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(DecodeError::Invalid(format!("{path}: {what} needs a non-empty `{}`", path_leaf(path)))),
    }
}

fn path_leaf(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

/// Decodes one input item into `messages`.
fn decode_item(i: usize, item: InItem, messages: &mut Vec<Message>) -> Result<(), DecodeError> {
    let path = format!("input[{i}]");
    let kind = match item.kind.as_deref() {
        Some(kind) => kind.to_owned(),
        None if item.role.is_some() => "message".to_owned(),
        None => return Err(DecodeError::Invalid(format!("{path}: an input item needs a `type`"))),
    };
    match kind.as_str() {
        "message" => {
            let role = match item.role.as_deref() {
                Some("user") => Role::User,
                Some("assistant") => Role::Assistant,
                Some("system" | "developer") => Role::System,
                Some(other) => {
                    return Err(DecodeError::Invalid(format!(
                        "{path}: role `{other}` is not supported (expected user, assistant, system or developer)"
                    )));
                }
                None => return Err(DecodeError::Invalid(format!("{path}: a message needs a `role`"))),
            };
            let content = decode_content(&path, item.content, role)?;
            if role == Role::Assistant {
                for part in content {
                    push_merged(messages, Role::Assistant, part);
                }
            } else {
                messages.push(Message { role, content });
            }
        }
        "function_call" => {
            let id = required(&item.call_id, &format!("{path}.call_id"), "a function call")?.to_owned();
            let name = required(&item.name, &format!("{path}.name"), "a function call")?.to_owned();
            let input = match item.arguments {
                None | Some(Value::Null) => model::parse_arguments(""),
                Some(Value::String(raw)) => model::parse_arguments(&raw),
                Some(other) => other,
            };
            push_merged(messages, Role::Assistant, Part::ToolUse { id, name, input });
        }
        "custom_tool_call" => {
            // Free-form tools (Codex's `apply_patch` on GPT-5): kept as a call whose input is
            // `{"input": text}` so the history stays paired with its output.
            let id = required(&item.call_id, &format!("{path}.call_id"), "a custom tool call")?.to_owned();
            let name = required(&item.name, &format!("{path}.name"), "a custom tool call")?.to_owned();
            let input = serde_json::json!({"input": item.input.unwrap_or_default()});
            push_merged(messages, Role::Assistant, Part::ToolUse { id, name, input });
        }
        "function_call_output" | "custom_tool_call_output" => {
            let tool_use_id = required(&item.call_id, &format!("{path}.call_id"), "a tool output")?.to_owned();
            let content = decode_tool_output(&format!("{path}.output"), item.output)?;
            push_merged(messages, Role::Tool, Part::ToolResult { tool_use_id, content, is_error: false });
        }
        "reasoning" => {
            if let Some(part) =
                decode_reasoning(&path, item.id.as_deref(), item.summary, item.content, item.encrypted_content)?
            {
                push_merged(messages, Role::Assistant, part);
            }
        }
        "item_reference" => {
            return Err(DecodeError::Invalid(format!(
                "{path}: item_reference is not supported (send the items themselves, or use previous_response_id)"
            )));
        }
        other => {
            tracing::warn!(item_type = other, "responses: input item without a canonical counterpart skipped");
        }
    }
    Ok(())
}

/// A `reasoning` item as a canonical part (see the mapping in `mod.rs`). `None` when it carries
/// nothing (no text, no envelope).
pub(crate) fn decode_reasoning(
    path: &str,
    id: Option<&str>,
    summary: Option<Vec<InPart>>,
    content: Option<Content>,
    encrypted: Option<String>,
) -> Result<Option<Part>, DecodeError> {
    let join = |parts: Vec<InPart>, want: &str| -> Result<String, DecodeError> {
        let mut texts = Vec::new();
        for (j, p) in parts.into_iter().enumerate() {
            if p.kind != want {
                tracing::warn!(part_type = %p.kind, "responses: reasoning part skipped");
                continue;
            }
            match p.text {
                Some(t) => texts.push(t),
                None => {
                    return Err(DecodeError::Field {
                        path: format!("{path}[{j}].text"),
                        message: "missing field `text`".into(),
                    });
                }
            }
        }
        Ok(texts.join("\n\n"))
    };
    let mut text = join(summary.unwrap_or_default(), "summary_text")?;
    if text.is_empty() {
        text = match content {
            Some(Content::Parts(parts)) => join(parts, "reasoning_text")?,
            Some(Content::Text(t)) => t,
            None => String::new(),
        };
    }
    let encrypted = encrypted.filter(|e| !e.is_empty());
    if let Some(data) = encrypted.as_deref().and_then(|e| e.strip_prefix(REDACTED_PREFIX)) {
        return Ok(Some(Part::RedactedThinking { data: data.to_owned() }));
    }
    if text.is_empty() && encrypted.is_none() {
        return Ok(None);
    }
    Ok(Some(Part::Thinking { text, signature: encrypted.map(|e| canonical_encrypted(id, &e)) }))
}

/// The canonical signature for an `encrypted_content`: an envelope stays as it is (Keyhaven gave
/// it out); anything else is this family's own reasoning, wrapped with its item id.
pub(crate) fn canonical_encrypted(id: Option<&str>, encrypted: &str) -> String {
    if is_envelope(encrypted) { encrypted.to_owned() } else { Envelope::openai_responses(id, Some(encrypted)).encode() }
}

fn decode_content(path: &str, content: Option<Content>, role: Role) -> Result<Vec<Part>, DecodeError> {
    match content {
        None => Ok(Vec::new()),
        Some(Content::Text(text)) if text.is_empty() && role == Role::Assistant => Ok(Vec::new()),
        Some(Content::Text(text)) => Ok(vec![Part::text(text)]),
        Some(Content::Parts(parts)) => {
            let mut out = Vec::new();
            for (j, part) in parts.into_iter().enumerate() {
                if let Some(p) = decode_part(&format!("{path}.content[{j}]"), part, role)? {
                    out.push(p);
                }
            }
            Ok(out)
        }
    }
}

fn decode_part(path: &str, part: InPart, role: Role) -> Result<Option<Part>, DecodeError> {
    let text_of = |text: Option<String>, field: &str| match text {
        Some(t) => Ok(t),
        None => {
            Err(DecodeError::Field { path: format!("{path}.{field}"), message: format!("missing field `{field}`") })
        }
    };
    match part.kind.as_str() {
        "input_text" | "output_text" | "text" => {
            let text = text_of(part.text, "text")?;
            Ok((role != Role::Assistant || !text.is_empty()).then(|| Part::text(text)))
        }
        "refusal" => Ok(Some(Part::text(text_of(part.refusal, "refusal")?))),
        "input_image" | "input_file" if role == Role::System || role == Role::Assistant => {
            Err(DecodeError::Invalid(format!("{path}: images are only supported in user messages and tool outputs")))
        }
        "input_image" | "input_file" => decode_image(path, part).map(Some),
        other => Err(DecodeError::Invalid(format!("{path}: content part type `{other}` is not supported"))),
    }
}

/// `input_image` (URL or data URL) or an `input_file` whose data is an image.
fn decode_image(path: &str, part: InPart) -> Result<Part, DecodeError> {
    if part.kind == "input_image" {
        return match part.image_url.filter(|u| !u.is_empty()) {
            Some(url) => Ok(Part::Image { source: ImageSource::from_url(&url), cache: None }),
            None if part.file_id.is_some() => {
                Err(DecodeError::Invalid(format!("{path}: images by `file_id` are not supported (send image_url)")))
            }
            None => Err(DecodeError::Field {
                path: format!("{path}.image_url"),
                message: "missing field `image_url`".into(),
            }),
        };
    }
    match part.file_data.as_deref().map(ImageSource::from_url) {
        Some(ImageSource::Base64 { media_type, data }) if media_type.starts_with("image/") => {
            Ok(Part::Image { source: ImageSource::Base64 { media_type, data }, cache: None })
        }
        _ => Err(DecodeError::Invalid(format!("{path}: input_file is only supported for images sent as data URLs"))),
    }
}

fn decode_tool_output(path: &str, output: Option<Content>) -> Result<Vec<Part>, DecodeError> {
    match output {
        None => Ok(Vec::new()),
        Some(Content::Text(text)) if text.is_empty() => Ok(Vec::new()),
        Some(Content::Text(text)) => Ok(vec![Part::text(text)]),
        Some(Content::Parts(parts)) => {
            let mut out = Vec::new();
            for (j, part) in parts.into_iter().enumerate() {
                if let Some(p) = decode_part(&format!("{path}[{j}]"), part, Role::Tool)? {
                    out.push(p);
                }
            }
            Ok(out)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Upstream response objects
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
#[derive(Debug, Deserialize)]
pub(crate) struct WireResponse {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub created_at: Option<Value>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub output: Option<Vec<InItem>>,
    #[serde(default)]
    pub usage: Option<WireUsageIn>,
    #[serde(default)]
    pub incomplete_details: Option<Value>,
}

/// The stop reason of a finished response: `status` and `incomplete_details.reason`.
pub(crate) fn stop_reason(status: Option<&str>, incomplete: Option<&Value>, has_tool_calls: bool) -> StopReason {
    match status {
        Some("incomplete") => match incomplete.and_then(|d| d.get("reason")).and_then(Value::as_str) {
            Some("max_output_tokens") | None => StopReason::MaxTokens,
            Some("content_filter") => StopReason::ContentFilter,
            Some(other) => StopReason::Other(other.to_owned()),
        },
        Some("completed") | None if has_tool_calls => StopReason::ToolUse,
        Some("completed") | None => StopReason::EndTurn,
        Some(other) => StopReason::Other(other.to_owned()),
    }
}

/// The canonical parts of the output items of a response, in order. Items of other types
/// (server-side tool calls) are skipped with a warning.
pub(crate) fn output_parts(items: Vec<InItem>) -> Result<Vec<Part>, DecodeError> {
    let mut parts = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let path = format!("output[{i}]");
        match item.kind.as_deref().unwrap_or("message") {
            "message" => parts.extend(decode_content(&path, item.content, Role::Assistant)?),
            "reasoning" => {
                if let Some(p) =
                    decode_reasoning(&path, item.id.as_deref(), item.summary, item.content, item.encrypted_content)?
                {
                    parts.push(p);
                }
            }
            "function_call" => {
                let input = match item.arguments {
                    None | Some(Value::Null) => model::parse_arguments(""),
                    Some(Value::String(raw)) => model::parse_arguments(&raw),
                    Some(other) => other,
                };
                let id = item.call_id.filter(|c| !c.is_empty()).unwrap_or_else(|| format!("call_{i}"));
                parts.push(Part::ToolUse { id, name: item.name.unwrap_or_default(), input });
            }
            other => {
                tracing::warn!(item_type = other, "responses: output item without a canonical counterpart skipped")
            }
        }
    }
    Ok(parts)
}

/// Unix milliseconds from `created_at` (seconds, integer or float).
#[cfg(test)]
pub(crate) fn created_ms(created_at: Option<&Value>) -> i64 {
    match created_at.and_then(Value::as_f64) {
        Some(secs) if secs.is_finite() => (secs * 1000.0) as i64,
        _ => 0,
    }
}

#[cfg(test)]
pub(crate) fn decode_response(body: &[u8]) -> Result<model::Response, DecodeError> {
    let resp: WireResponse = from_json(body)?;
    let content = output_parts(resp.output.unwrap_or_default())?;
    let has_tools = content.iter().any(|p| matches!(p, Part::ToolUse { .. }));
    Ok(model::Response {
        id: resp.id.unwrap_or_default(),
        model: resp.model.unwrap_or_default(),
        stop_reason: Some(stop_reason(resp.status.as_deref(), resp.incomplete_details.as_ref(), has_tools)),
        stop_sequence: None,
        content,
        usage: resp.usage.map(|u| u.to_usage()).unwrap_or_default(),
        created_ms: created_ms(resp.created_at.as_ref()),
    })
}
