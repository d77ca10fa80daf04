//! Ollama FIM: `POST {base_url}/api/generate` `{model, prompt, suffix, stream: true,
//! options: {num_predict, stop, temperature}}`. `raw` is left unset (false): the model's own
//! template is what places `suffix` around the prompt (with `raw: true` Ollama skips the template
//! and the suffix with it). The answer is one JSON object per line:
//! `{response, done: false}` …, then `{done: true, done_reason, prompt_eval_count, eval_count}`;
//! a failure is `{error}`.

use serde_json::{Map, Value, json};

use crate::dialect::DecodeError;
use crate::dialect::fim::{parse, stop_reason};
use crate::model::{FimRequest, StreamEvent, Usage};

/// The path under the provider's base URL (the server root, e.g. `http://127.0.0.1:11434`).
pub const PATH: &str = "/api/generate";

pub fn encode_request(req: &FimRequest, upstream: &str) -> Value {
    let mut options = Map::new();
    options.insert("num_predict".into(), json!(req.max_tokens));
    if !req.stop.is_empty() {
        options.insert("stop".into(), json!(req.stop));
    }
    if let Some(t) = req.temperature {
        options.insert("temperature".into(), json!(t));
    }
    json!({
        "model": upstream,
        "prompt": req.prompt,
        "suffix": req.suffix,
        "stream": true,
        "options": options,
    })
}

/// One line of the answer; blank lines yield nothing.
pub fn decode_line(line: &str) -> Result<Vec<StreamEvent>, DecodeError> {
    if line.trim().is_empty() {
        return Ok(Vec::new());
    }
    let value = match parse(line)? {
        Ok(v) => v,
        Err(ev) => return Ok(vec![ev]),
    };
    let mut out = Vec::new();
    if let Some(text) = value.get("response").and_then(Value::as_str)
        && !text.is_empty()
    {
        out.push(StreamEvent::TextDelta { text: text.to_owned() });
    }
    if value.get("done").and_then(Value::as_bool) == Some(true) {
        let input = value.get("prompt_eval_count").and_then(Value::as_u64).unwrap_or(0);
        let output = value.get("eval_count").and_then(Value::as_u64).unwrap_or(0);
        out.push(StreamEvent::Usage {
            usage: Usage { input_tokens: input, output_tokens: output, ..Usage::default() },
        });
        let reason = value.get("done_reason").and_then(Value::as_str).unwrap_or("stop");
        out.push(StreamEvent::Stop { reason: stop_reason(reason), stop_sequence: None });
    }
    Ok(out)
}
