//! Encoding: response objects and error bodies toward clients, request bodies toward upstreams.
//! The output-item builders here are shared with the stream encoder, so a streamed answer's
//! `response.completed` and a non-streamed answer have exactly the same shape.

use serde_json::{Map, Value, json};

use crate::dialect::openai_responses::types::WireUsageOut;
use crate::dialect::openai_responses::{EncodeOptions, REDACTED_PREFIX};
use crate::model::reasoning::{Envelope, Family, is_envelope};
use crate::model::{
    self, Effort, ErrorInfo, ErrorKind, Part, Passthrough, Role, StopReason, ToolChoice, Usage, WireDialect,
};

// ---------------------------------------------------------------------------------------------
// Output items and response objects (shared with the stream encoder)
// ---------------------------------------------------------------------------------------------

/// The id of the `n`th output item of kind `prefix` (`msg`, `rs`, `fc`) in response `resp_id`.
pub(crate) fn item_id(resp_id: &str, prefix: &str, n: usize) -> String {
    format!("{prefix}_{}_{n}", resp_id.strip_prefix("resp_").unwrap_or(resp_id))
}

pub(crate) fn output_text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

pub(crate) fn message_item(id: &str, status: &str, text: Option<&str>) -> Value {
    let content = match text {
        Some(text) => vec![output_text_part(text)],
        None => Vec::new(),
    };
    json!({"id": id, "type": "message", "status": status, "role": "assistant", "content": content})
}

/// The `encrypted_content` a client gets for a canonical signature: envelopes as they are, and a
/// raw (Anthropic) signature wrapped, so it comes back tagged with its family.
pub(crate) fn client_encrypted(signature: &str) -> String {
    if is_envelope(signature) { signature.to_owned() } else { Envelope::anthropic(signature).encode() }
}

/// A reasoning item: the thinking text as one summary part, the envelope as `encrypted_content`.
pub(crate) fn reasoning_item(id: &str, text: &str, encrypted: Option<&str>) -> Value {
    let summary = if text.is_empty() { Vec::new() } else { vec![json!({"type": "summary_text", "text": text})] };
    let mut item = json!({"id": id, "type": "reasoning", "summary": summary});
    if let (Some(enc), Value::Object(obj)) = (encrypted, &mut item) {
        obj.insert("encrypted_content".into(), json!(enc));
    }
    item
}

pub(crate) fn function_call_item(id: &str, status: &str, call_id: &str, name: &str, arguments: &str) -> Value {
    json!({"id": id, "type": "function_call", "status": status, "call_id": call_id, "name": name, "arguments": arguments})
}

/// Tool-call arguments as the JSON-encoded string Responses wants (never an object). A string
/// input is arguments that were not valid JSON, kept raw; it is sent back unchanged.
pub(crate) fn arguments_string(input: &Value) -> String {
    match input {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

/// `status` and `incomplete_details.reason` for a stop reason.
pub(crate) fn status_of(reason: Option<&StopReason>) -> (&'static str, Option<&'static str>) {
    match reason {
        Some(StopReason::MaxTokens) => ("incomplete", Some("max_output_tokens")),
        Some(StopReason::ContentFilter) => ("incomplete", Some("content_filter")),
        _ => ("completed", None),
    }
}

/// What a response object says besides its output.
pub(crate) struct ResponseHead<'a> {
    pub id: &'a str,
    pub model: &'a str,
    pub created_at: i64,
    pub status: &'a str,
    pub incomplete: Option<&'a str>,
    pub error: Option<&'a ErrorInfo>,
    pub usage: Option<&'a Usage>,
}

pub(crate) fn response_object(head: &ResponseHead<'_>, output: Vec<Value>) -> Value {
    json!({
        "id": head.id,
        "object": "response",
        "created_at": head.created_at,
        "status": head.status,
        "error": head.error.map(|e| json!({"code": error_code(e.kind), "message": e.message})),
        "incomplete_details": head.incomplete.map(|reason| json!({"reason": reason})),
        "model": head.model,
        "output": output,
        "parallel_tool_calls": true,
        "usage": head.usage.map(WireUsageOut::from_usage),
    })
}

/// Unix seconds from Unix milliseconds.
pub(crate) fn created_secs(created_ms: i64) -> i64 {
    created_ms.div_euclid(1000)
}

/// Numbers output items per kind, for their ids.
pub(crate) struct ItemIds<'a> {
    resp_id: &'a str,
    msg: usize,
    rs: usize,
    fc: usize,
}

impl<'a> ItemIds<'a> {
    pub(crate) fn new(resp_id: &'a str) -> ItemIds<'a> {
        ItemIds { resp_id, msg: 0, rs: 0, fc: 0 }
    }

    pub(crate) fn next(&mut self, prefix: &'static str) -> String {
        let counter = match prefix {
            "msg" => &mut self.msg,
            "rs" => &mut self.rs,
            _ => &mut self.fc,
        };
        let n = *counter;
        *counter += 1;
        item_id(self.resp_id, prefix, n)
    }
}

pub(crate) fn encode_response(resp: &model::Response) -> Value {
    let mut output = Vec::new();
    let mut text = String::new();
    let mut ids = ItemIds::new(&resp.id);
    let flush = |text: &mut String, output: &mut Vec<Value>, ids: &mut ItemIds<'_>| {
        if !text.is_empty() {
            output.push(message_item(&ids.next("msg"), "completed", Some(text)));
            text.clear();
        }
    };
    for part in &resp.content {
        match part {
            Part::Text { text: t, .. } => text.push_str(t),
            Part::Thinking { text: t, signature } => {
                flush(&mut text, &mut output, &mut ids);
                let encrypted = signature.as_deref().map(client_encrypted);
                output.push(reasoning_item(&ids.next("rs"), t, encrypted.as_deref()));
            }
            Part::RedactedThinking { data } => {
                flush(&mut text, &mut output, &mut ids);
                output.push(reasoning_item(&ids.next("rs"), "", Some(&format!("{REDACTED_PREFIX}{data}"))));
            }
            Part::ToolUse { id: call_id, name, input } => {
                flush(&mut text, &mut output, &mut ids);
                output.push(function_call_item(&ids.next("fc"), "completed", call_id, name, &arguments_string(input)));
            }
            Part::Image { .. } | Part::ToolResult { .. } => {}
        }
    }
    flush(&mut text, &mut output, &mut ids);
    let (status, incomplete) = status_of(resp.stop_reason.as_ref());
    let head = ResponseHead {
        id: &resp.id,
        model: &resp.model,
        created_at: created_secs(resp.created_ms),
        status,
        incomplete,
        error: None,
        usage: Some(&resp.usage),
    };
    response_object(&head, output)
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

/// The `code` used in `response.error` and `error` events. Rate limits and overload use the codes
/// OpenAI itself sends, so clients (Codex) recognise them and back off.
pub(crate) fn error_code(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::RateLimited => "rate_limit_exceeded",
        ErrorKind::Overloaded => "server_is_overloaded",
        ErrorKind::Upstream | ErrorKind::Internal => "server_error",
        other => other.as_str(),
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
    let (instructions, rest) = match req.messages.split_first() {
        Some((first, rest)) if first.role == Role::System => (Some(model::joined_text(&first.content, "\n\n")), rest),
        _ => (None, req.messages.as_slice()),
    };
    if let Some(instructions) = instructions.filter(|i| !i.is_empty()) {
        body.insert("instructions".into(), json!(instructions));
    }
    body.insert("input".into(), Value::Array(encode_input(rest)));

    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                let mut tool = Map::new();
                tool.insert("type".into(), json!("function"));
                tool.insert("name".into(), json!(t.name));
                if let Some(description) = &t.description {
                    tool.insert("description".into(), json!(description));
                }
                tool.insert("parameters".into(), t.parameters.clone());
                // Responses defaults to strict schemas, which most clients' schemas are not.
                tool.insert("strict".into(), json!(false));
                Value::Object(tool)
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
        body.insert("max_output_tokens".into(), json!(max));
    }
    if let Some(t) = p.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(t) = p.top_p {
        body.insert("top_p".into(), json!(t));
    }
    if opts.reasoning
        && let Some(thinking) = &req.thinking
    {
        let mut reasoning = Map::new();
        if let Some(effort) = thinking.effort.or(thinking.budget_tokens.map(Effort::from_budget)) {
            reasoning.insert("effort".into(), json!(effort.as_str()));
        }
        reasoning.insert("summary".into(), json!("auto"));
        body.insert("reasoning".into(), Value::Object(reasoning));
        // Nothing is stored upstream, so reasoning must come back encrypted to be sent again.
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    if let Some(user) = &req.user {
        body.insert("user".into(), json!(user));
    }
    body.insert("store".into(), json!(false));
    body.insert("stream".into(), json!(true));
    // A Responses client's own extras (include, text, prompt_cache_key, service_tier, ...) and its
    // hosted tools go to a Responses upstream verbatim; other dialects' extras never do.
    if let Some(pt) = Passthrough::of(req, WireDialect::OpenaiResponses) {
        if !pt.tools.is_empty() {
            if let Some(Value::Array(tools)) = body.get_mut("tools") {
                tools.extend(pt.tools.iter().cloned());
            } else {
                body.insert("tools".into(), Value::Array(pt.tools.clone()));
            }
        }
        for (key, value) in &pt.fields {
            match (key.as_str(), body.get_mut(key)) {
                // Both asked for: the union, Keyhaven's first.
                ("include", Some(Value::Array(ours))) => {
                    for item in value.as_array().into_iter().flatten() {
                        if !ours.contains(item) {
                            ours.push(item.clone());
                        }
                    }
                }
                (_, Some(_)) => {}
                (_, None) => {
                    body.insert(key.clone(), value.clone());
                }
            }
        }
    }
    Value::Object(body)
}

fn tool_choice_json(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Tool { name } => json!({"type": "function", "name": name}),
    }
}

fn input_content(parts: &[&Part]) -> Vec<Value> {
    parts
        .iter()
        .filter_map(|p| match p {
            Part::Text { text, .. } => Some(json!({"type": "input_text", "text": text})),
            Part::Image { source, .. } => Some(json!({"type": "input_image", "image_url": source.to_url()})),
            _ => None,
        })
        .collect()
}

/// The input items for the conversation (after the instructions).
fn encode_input(messages: &[model::Message]) -> Vec<Value> {
    let mut out = Vec::new();
    for message in messages {
        // Tool results first: in Anthropic-shaped history they share a message with the user's
        // next words, and they must follow the calls.
        for part in &message.content {
            if let Part::ToolResult { tool_use_id, content, is_error } = part {
                out.push(tool_output_item(tool_use_id, content, *is_error));
            }
        }
        let rest: Vec<&Part> = message.content.iter().filter(|p| !matches!(p, Part::ToolResult { .. })).collect();
        match message.role {
            Role::System => {
                let text = model::joined_text(&message.content, "\n\n");
                if !text.is_empty() {
                    out.push(json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": text}]}));
                }
            }
            Role::User | Role::Tool => {
                let content = input_content(&rest);
                if !content.is_empty() {
                    out.push(json!({"type": "message", "role": "user", "content": content}));
                }
            }
            Role::Assistant => encode_assistant(&rest, &mut out),
        }
    }
    out
}

/// Assistant parts in order: text runs become `message` items, signed thinking `reasoning` items
/// (unsigned or redacted thinking is not sent: Responses upstreams cannot use it), tool uses
/// `function_call` items.
fn encode_assistant(parts: &[&Part], out: &mut Vec<Value>) {
    let mut text = String::new();
    let flush = |text: &mut String, out: &mut Vec<Value>| {
        if !text.is_empty() {
            out.push(
                json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}),
            );
            text.clear();
        }
    };
    for part in parts {
        match part {
            Part::Text { text: t, .. } => text.push_str(t),
            Part::Thinking { text: t, signature: Some(signature) } => {
                // Only this family's own reasoning goes back, with its own id and ciphertext.
                let Some(Envelope { family: Family::OpenaiResponses, id, data: Some(encrypted) }) =
                    Envelope::of_signature(signature)
                else {
                    continue;
                };
                flush(&mut text, out);
                let summary = if t.is_empty() { Vec::new() } else { vec![json!({"type": "summary_text", "text": t})] };
                let mut item = json!({"type": "reasoning", "summary": summary, "encrypted_content": encrypted});
                if let (Some(id), Value::Object(obj)) = (id, &mut item) {
                    obj.insert("id".into(), json!(id));
                }
                out.push(item);
            }
            Part::ToolUse { id, name, input } => {
                flush(&mut text, out);
                out.push(
                    json!({"type": "function_call", "call_id": id, "name": name, "arguments": arguments_string(input)}),
                );
            }
            Part::Thinking { signature: None, .. } | Part::RedactedThinking { .. } => {}
            Part::Image { .. } | Part::ToolResult { .. } => {}
        }
    }
    flush(&mut text, out);
}

fn tool_output_item(call_id: &str, content: &[Part], is_error: bool) -> Value {
    let has_images = content.iter().any(|p| matches!(p, Part::Image { .. }));
    let prefix = if is_error { "Error: " } else { "" };
    let output = if has_images {
        let mut parts = Vec::new();
        if is_error {
            parts.push(json!({"type": "input_text", "text": "Error:"}));
        }
        parts.extend(input_content(&content.iter().collect::<Vec<_>>()));
        Value::Array(parts)
    } else {
        let text = model::joined_text(content, "\n");
        match (is_error, text.is_empty()) {
            (true, true) => json!("Error"),
            _ => json!(format!("{prefix}{text}")),
        }
    };
    json!({"type": "function_call_output", "call_id": call_id, "output": output})
}
