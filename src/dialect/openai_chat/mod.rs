//! OpenAI Chat Completions (`/v1/chat/completions`), also spoken by every OpenAI-compatible vendor
//! (DeepSeek, Kimi, Qwen/DashScope, OpenRouter, Ollama, vLLM, LM Studio).
//!
//! Inbound: [`decode_request`], [`encode_response`], [`StreamEncoder`], [`encode_error`].
//! Outbound: [`encode_request`], [`decode_response`], [`StreamDecoder`], [`decode_error`].

use serde_json::Value;

use crate::dialect::DecodeError;
use crate::dialect::sse::SseEvent;
use crate::model;

/// What an inbound request asks of the stream beyond the canonical request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamOptions {
    /// `stream_options.include_usage`: send a final chunk with usage and no choices.
    pub include_usage: bool,
}

/// Which field carries the output limit upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxTokensField {
    /// `max_tokens`, understood by every OpenAI-compatible vendor.
    #[default]
    MaxTokens,
    /// `max_completion_tokens`, required by OpenAI's reasoning models.
    MaxCompletionTokens,
}

/// Per-provider choices for outbound requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EncodeOptions {
    /// Send assistant reasoning back as `reasoning_content` (DeepSeek and similar require it on
    /// the next turn when thinking and tools are combined; OpenAI itself does not accept it).
    pub reasoning_content: bool,
    pub max_tokens_field: MaxTokensField,
}

pub fn decode_request(body: &[u8]) -> Result<(model::Request, StreamOptions), DecodeError> {
    let _ = body;
    unimplemented!()
}

pub fn encode_response(resp: &model::Response) -> Value {
    let _ = resp;
    unimplemented!()
}

/// The body of an error response in this dialect.
pub fn encode_error(error: &model::ErrorInfo) -> Value {
    let _ = error;
    unimplemented!()
}

/// Outbound request body for `upstream_model`. Always asks for a stream with usage.
pub fn encode_request(req: &model::Request, upstream_model: &str, opts: &EncodeOptions) -> Value {
    let _ = (req, upstream_model, opts);
    unimplemented!()
}

pub fn decode_response(body: &[u8]) -> Result<model::Response, DecodeError> {
    let _ = body;
    unimplemented!()
}

/// The error an upstream reported with a non-2xx `status` and `body` (any body, even not JSON).
pub fn decode_error(status: u16, body: &[u8]) -> model::ErrorInfo {
    let _ = (status, body);
    unimplemented!()
}

/// Turns canonical stream events into `chat.completion.chunk` SSE text.
#[derive(Debug)]
pub struct StreamEncoder {}

impl StreamEncoder {
    pub fn new(id: &str, model: &str, created_ms: i64, opts: StreamOptions) -> StreamEncoder {
        let _ = (id, model, created_ms, opts);
        unimplemented!()
    }

    /// Appends the SSE text for `event` to `out` (possibly nothing).
    pub fn encode(&mut self, event: &model::StreamEvent, out: &mut String) {
        let _ = (event, out);
        unimplemented!()
    }

    /// Appends whatever ends the stream (`data: [DONE]`).
    pub fn finish(&mut self, out: &mut String) {
        let _ = out;
        unimplemented!()
    }
}

/// Turns upstream `chat.completion.chunk` events into canonical stream events.
#[derive(Debug, Default)]
pub struct StreamDecoder {}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// Decodes one upstream event (a chunk may map to none or several events). An `error` object
    /// in the stream becomes [`model::StreamEvent::Error`]. Returns an error only for data that is
    /// not JSON.
    pub fn decode(&mut self, event: &SseEvent, out: &mut Vec<model::StreamEvent>) -> Result<(), DecodeError> {
        let _ = (event, out);
        unimplemented!()
    }

    /// True once `data: [DONE]` was seen.
    pub fn is_done(&self) -> bool {
        unimplemented!()
    }

    /// Closes whatever is still open when the upstream stream ends.
    pub fn finish(&mut self, out: &mut Vec<model::StreamEvent>) {
        let _ = out;
        unimplemented!()
    }
}
