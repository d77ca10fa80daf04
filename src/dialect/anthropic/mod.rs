//! Anthropic Messages (`/v1/messages`).
//!
//! Inbound: [`decode_request`], [`encode_response`], [`StreamEncoder`], [`encode_error`].
//! Outbound: [`encode_request`], [`StreamDecoder`], [`decode_error`] (upstreams always stream;
//! `decode::decode_response` is a unit-test helper).
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
//! - `role: "system"` inside `messages` is a System message at its position; outbound it stays
//!   in place only when the client sent the `mid-conversation-system-*` beta, else it is hoisted.
//! - `thinking` `adaptive` is [`model::ThinkingConfig::adaptive`]; `output_config.effort` is its
//!   effort (also for `enabled`).
//! - The request's [`model::Passthrough`] keeps the body, the unmapped top-level keys and the
//!   server tools (`web_search_*`, `web_fetch_*`, `code_execution_*`, `bash_*`, ...). Outbound,
//!   the client's own body is sent verbatim while the canonical request still equals its
//!   decoding; otherwise the canonical request is encoded and the unmapped keys and server tools
//!   are added back. Thinking signatures follow `model::reasoning` (foreign envelopes dropped).
//! - Server tool blocks in responses are skipped with a warning.
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

/// The engine always streams from upstreams, so it never decodes a whole response body; this
/// decoder exists for the unit tests of this dialect only (behaviour tests read what a client
/// received with their own hand-written reader).
#[cfg(test)]
use decode::decode_response;

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

    /// The types of the content blocks skipped so far, each once in the order first seen: server
    /// tool calls and their results (`server_tool_use`, `web_search_tool_result`,
    /// `web_fetch_tool_result`, `code_execution_tool_result`, `mcp_tool_use`, ...) and unknown
    /// blocks. The canonical model has no form for them; the answer's text around them is kept.
    pub fn skipped(&self) -> &[String] {
        self.state.skipped()
    }
}

#[cfg(test)]
mod tests;
