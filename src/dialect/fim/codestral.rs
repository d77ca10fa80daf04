//! Mistral Codestral FIM: `POST {base_url}/fim/completions` (base `https://codestral.mistral.ai/v1`
//! or `https://api.mistral.ai/v1`) `{model, prompt, suffix, max_tokens, stop, temperature,
//! stream: true}`; the answer is SSE chat-completion chunks,
//! `{choices: [{delta: {content}, finish_reason}], usage}` (usage on the last chunk), then `[DONE]`.

use serde_json::Value;

use crate::dialect::DecodeError;
use crate::dialect::fim::{common_body, openai_usage, parse, stop_reason};
use crate::model::{FimRequest, StreamEvent};

/// The path under the provider's base URL.
pub const PATH: &str = "/fim/completions";

pub fn encode_request(req: &FimRequest, upstream: &str) -> Value {
    Value::Object(common_body(req, upstream))
}

/// One SSE `data` payload; `[DONE]` yields nothing.
pub fn decode_event(data: &str) -> Result<Vec<StreamEvent>, DecodeError> {
    if data.trim() == "[DONE]" {
        return Ok(Vec::new());
    }
    let value = match parse(data)? {
        Ok(v) => v,
        Err(ev) => return Ok(vec![ev]),
    };
    let mut out = Vec::new();
    for choice in value.get("choices").and_then(Value::as_array).into_iter().flatten() {
        let content = choice
            .get("delta")
            .and_then(|d| d.get("content"))
            .or_else(|| choice.get("message").and_then(|m| m.get("content")));
        if let Some(text) = content.and_then(Value::as_str)
            && !text.is_empty()
        {
            out.push(StreamEvent::TextDelta { text: text.to_owned() });
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            out.push(StreamEvent::Stop { reason: stop_reason(reason), stop_sequence: None });
        }
    }
    if let Some(usage) = value.get("usage").and_then(openai_usage) {
        out.push(StreamEvent::Usage { usage });
    }
    Ok(out)
}
