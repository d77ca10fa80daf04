//! OpenAI-compatible legacy completions with a suffix: `POST {base_url}/completions`
//! `{model, prompt, suffix, max_tokens, stop, temperature, stream: true,
//! stream_options: {include_usage: true}}`; the answer is SSE whose `data` is
//! `{choices: [{text, index, finish_reason}], usage}` and ends with `[DONE]`. DeepSeek serves it
//! at `https://api.deepseek.com/beta/completions`, vLLM and LM Studio at `/v1/completions`.

use serde_json::{Value, json};

use crate::dialect::DecodeError;
use crate::dialect::fim::{common_body, openai_usage, parse, stop_reason};
use crate::model::{FimRequest, StreamEvent};

/// The path under the provider's base URL.
pub const PATH: &str = "/completions";

pub fn encode_request(req: &FimRequest, upstream: &str) -> Value {
    let mut body = common_body(req, upstream);
    body.insert("stream_options".into(), json!({"include_usage": true}));
    Value::Object(body)
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
        if let Some(text) = choice.get("text").and_then(Value::as_str)
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
