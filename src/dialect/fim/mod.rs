//! Fill-in-the-middle wire codecs, one per dialect, for Cursor Tab's FIM models: each encodes a
//! [`FimRequest`] for its endpoint and decodes its streamed answer into canonical
//! [`StreamEvent`]s (`TextDelta`, `Usage`, `Stop`, `Error`).
//!
//! - [`completions`]: OpenAI-compatible legacy completions, `POST {base}/completions` with
//!   `prompt` + `suffix`, SSE `choices[].text` (DeepSeek's `/beta/completions`, vLLM, LM Studio).
//! - [`codestral`]: Mistral's `POST {base}/fim/completions`, SSE chat-completion chunks
//!   (`choices[].delta.content`).
//! - [`ollama`]: `POST {base}/api/generate` with `suffix`, newline-delimited JSON objects.
//!
//! Pure like every dialect: no I/O, never panics on input.

pub mod codestral;
pub mod completions;
pub mod ollama;

use serde_json::{Map, Value, json};

use crate::dialect::DecodeError;
use crate::model::{FimRequest, StopReason, StreamEvent, Usage};

/// The fields the SSE dialects share: model, prompt, suffix, max_tokens, stop (when any),
/// temperature (when set), `stream: true`.
fn common_body(req: &FimRequest, upstream: &str) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(upstream));
    body.insert("prompt".into(), json!(req.prompt));
    body.insert("suffix".into(), json!(req.suffix));
    body.insert("max_tokens".into(), json!(req.max_tokens));
    if !req.stop.is_empty() {
        body.insert("stop".into(), json!(req.stop));
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    body.insert("stream".into(), json!(true));
    body
}

/// A finish reason as the OpenAI-style dialects (and Ollama's `done_reason`) name it.
fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "stop" | "eos" => StopReason::EndTurn,
        "length" | "max_tokens" | "model_length" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_owned()),
    }
}

/// Parses one JSON payload; an error object in any vendor's shape becomes a stream error event.
fn parse(data: &str) -> Result<Result<Value, StreamEvent>, DecodeError> {
    let value: Value = crate::dialect::from_json(data.as_bytes())?;
    match crate::dialect::error::from_value(&value, None) {
        Some(error) if value.get("error").is_some() || value.get("object").and_then(Value::as_str) == Some("error") => {
            Ok(Err(StreamEvent::Error { error }))
        }
        _ => Ok(Ok(value)),
    }
}

/// OpenAI-style `usage` (`prompt_tokens` includes cached tokens; DeepSeek names them
/// `prompt_cache_hit_tokens`).
fn openai_usage(u: &Value) -> Option<Usage> {
    let prompt = u.get("prompt_tokens").and_then(Value::as_u64)?;
    let completion = u.get("completion_tokens").and_then(Value::as_u64).unwrap_or(0);
    let cached = u
        .get("prompt_tokens_details")
        .and_then(|d| d.get("cached_tokens"))
        .and_then(Value::as_u64)
        .or_else(|| u.get("prompt_cache_hit_tokens").and_then(Value::as_u64))
        .unwrap_or(0);
    Some(Usage::from_openai(prompt, cached, completion, 0))
}

#[cfg(test)]
mod tests;
