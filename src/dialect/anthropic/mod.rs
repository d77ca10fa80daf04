//! Anthropic Messages (`/v1/messages`).
//!
//! Inbound: [`decode_request`], [`encode_response`], [`StreamEncoder`], [`encode_error`].
//! Outbound: [`encode_request`], [`decode_response`], [`StreamDecoder`], [`decode_error`].
//!
//! Files: `types.rs` (serde wire structs), `decode.rs` / `encode.rs` (whole bodies), `stream.rs`
//! (SSE in both directions), `tests.rs` (fixture-driven tests over `tests/fixtures/anthropic/`).
//!
//! Mapping notes:
//! - The top-level `system` (string or text blocks) becomes the first [`model::Role::System`]
//!   message; on the way out every system message's text is hoisted back into `system`.
//! - A user message holding `tool_result` blocks becomes a [`model::Role::Tool`] message with the
//!   results, followed by a user message with the remaining blocks (if any). On the way out tool
//!   messages become user messages, consecutive messages of one role are merged, and tool results
//!   come first.
//! - Thinking without a signature (e.g. DeepSeek's `reasoning_content`) is not sent upstream:
//!   Anthropic rejects it. With thinking enabled, `temperature`/`top_p`/`top_k` are dropped.
//! - Server tools (`web_search_20250305`, ...) and their blocks are skipped with a warning.
//! - Error types: [`model::ErrorKind::Timeout`] is `timeout_error` (HTTP 504 at Anthropic);
//!   `Upstream` and `Internal` are both `api_error`.

mod decode;
mod encode;
mod stream;
mod types;

use serde_json::Value;

use crate::dialect::DecodeError;
use crate::dialect::sse::SseEvent;
use crate::model;

/// Per-provider choices for outbound requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeOptions {
    /// `max_tokens` is required by Anthropic; used when the request has none.
    pub default_max_tokens: u32,
}

impl Default for EncodeOptions {
    fn default() -> EncodeOptions {
        EncodeOptions { default_max_tokens: 8192 }
    }
}

/// Decodes an inbound `/v1/messages` request body. Unknown fields are ignored; a field of the
/// wrong type is a [`DecodeError::Field`] naming its path (`messages[0].content[1].type`).
pub fn decode_request(body: &[u8]) -> Result<model::Request, DecodeError> {
    decode::decode_request(body)
}

/// The non-streamed response body for a client.
pub fn encode_response(resp: &model::Response) -> Value {
    encode::encode_response(resp)
}

/// The body of an error response in this dialect (`{"type":"error","error":{...}}`).
pub fn encode_error(error: &model::ErrorInfo) -> Value {
    encode::encode_error(error)
}

/// Outbound request body for `upstream_model`. Always asks for a stream.
pub fn encode_request(req: &model::Request, upstream_model: &str, opts: &EncodeOptions) -> Value {
    encode::encode_request(req, upstream_model, opts)
}

/// Decodes a non-streamed upstream response. `created_ms` is left at 0 (no clock here).
pub fn decode_response(body: &[u8]) -> Result<model::Response, DecodeError> {
    decode::decode_response(body)
}

/// The error an upstream reported with a non-2xx `status` and `body`: the one reader shared by
/// every dialect ([`crate::dialect::error`]).
pub use crate::dialect::error::decode_error;

/// Turns canonical stream events into Anthropic SSE text (`message_start` ... `message_stop`).
///
/// `message_start` is written lazily, before the first event that produces output (or at
/// [`StreamEncoder::finish`]), so it carries the input usage when the upstream reported it early.
/// The id and model given to [`StreamEncoder::new`] win over those of
/// [`model::StreamEvent::MessageStart`] (used only when empty).
#[derive(Debug)]
pub struct StreamEncoder {
    state: stream::EncoderState,
}

impl StreamEncoder {
    pub fn new(id: &str, model: &str) -> StreamEncoder {
        StreamEncoder { state: stream::EncoderState::new(id, model) }
    }

    /// Appends the SSE events for `event` to `out` (possibly none).
    pub fn encode(&mut self, event: &model::StreamEvent, out: &mut String) {
        self.state.encode(event, out);
    }

    /// Closes the open block, then writes `message_delta` and `message_stop`. Writes nothing
    /// after an error event, or when called twice.
    pub fn finish(&mut self, out: &mut String) {
        self.state.finish(out);
    }
}

/// Turns upstream Anthropic SSE events into canonical stream events.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    state: stream::DecoderState,
}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// Decodes one SSE event. Data that is not JSON, or a known event with a wrong-typed field, is
    /// an error; unknown events and block types are skipped with a warning.
    pub fn decode(&mut self, event: &SseEvent, out: &mut Vec<model::StreamEvent>) -> Result<(), DecodeError> {
        self.state.decode(event, out)
    }

    /// True once `message_stop` was seen.
    pub fn is_done(&self) -> bool {
        self.state.is_done()
    }

    /// Ends tool calls whose block the upstream never closed (a cut-off stream).
    pub fn finish(&mut self, out: &mut Vec<model::StreamEvent>) {
        self.state.finish(out);
    }
}

#[cfg(test)]
mod tests;
