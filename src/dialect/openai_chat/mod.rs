//! OpenAI Chat Completions (`/v1/chat/completions`), also spoken by every OpenAI-compatible vendor
//! (DeepSeek, Kimi, Qwen/DashScope, OpenRouter, Ollama, vLLM, LM Studio).
//!
//! Inbound: [`decode_request`], [`encode_response`], [`StreamEncoder`], [`encode_error`].
//! Outbound: [`encode_request`], [`StreamDecoder`], [`decode_error`] (upstreams always stream;
//! `decode::decode_response` is a unit-test helper).
//!
//! Vendor dialects handled here:
//! - DeepSeek's `reasoning_content` (requests, responses, stream deltas) and its
//!   `prompt_cache_hit_tokens` usage field; OpenRouter's `delta.reasoning`; Kimi's top-level
//!   `usage.cached_tokens`.
//! - Vendors that put every streamed tool call at `index` 0 and tell them apart only by `id`.
//!
//! Everything here is pure: no I/O, no clock, no randomness. Decoders never panic.
//!
//! Mapping choices worth knowing:
//! - Inbound, a legacy `function` message is a tool result whose id is its `name`; assistant
//!   `refusal` parts are text; `image_url.detail` and `tools[].function.strict` are dropped;
//!   `reasoning_effort: "none"` means no thinking and `"xhigh"` is [`model::Effort::High`];
//!   `max_completion_tokens` wins over `max_tokens`; `top_k` (vLLM, Ollama) is read.
//! - Outbound, system text parts are joined with a blank line, assistant text parts with nothing;
//!   `tool_choice` and `parallel_tool_calls` are sent only with tools; `top_k` is never sent
//!   (OpenAI rejects it); an assistant turn with nothing to send (only thinking) is left out.
//!   Tool results become `tool` messages right where they appear; images from tool results
//!   follow in one user message after the run of tool messages.
//! - Outbound, a thinking request without effort or budget asks for `medium`.
//! - Streamed or whole reasoning closes with the `openai_chat` envelope as its signature
//!   (`model::reasoning`); inbound `reasoning_content` is tagged the same way.
//! - Unmapped top-level keys (`prompt_cache_key`, `service_tier`, `store`, `metadata`,
//!   `response_format`, `modalities`, `prediction`, `logprobs`, ...) and non-function tools are
//!   kept in the request's [`model::Passthrough`] and sent only to a Chat upstream; unknown
//!   content part types (audio, files) are skipped, never refused.
//! - The stream encoder always sends the usage chunk when asked for it (zeros if no usage was
//!   seen), except after an error.

mod decode;
mod encode;
mod stream;
mod types;

use serde_json::Value;

use crate::dialect::DecodeError;
use crate::model;

pub use stream::{StreamDecoder, StreamEncoder};

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
    /// Send `reasoning_effort` when the request asks for thinking (OpenAI's reasoning models and
    /// vendors that copy the knob). Off by default: many compatible vendors reject the field.
    pub reasoning_effort: bool,
}

/// Decodes an inbound `/v1/chat/completions` body into the canonical request.
///
/// Fails with [`DecodeError::Field`] (with the JSON path) for wrong types, and with
/// [`DecodeError::Invalid`] for content this gateway cannot represent (`n > 1`, audio or file
/// parts, an empty `messages` array, ...). Unknown fields are ignored.
pub fn decode_request(body: &[u8]) -> Result<(model::Request, StreamOptions), DecodeError> {
    decode::decode_request(body)
}

/// A complete `chat.completion` body for a non-streaming client.
pub fn encode_response(resp: &model::Response) -> Value {
    encode::encode_response(resp)
}

/// The body of an error response in this dialect:
/// `{"error": {"message", "type", "param": null, "code"}}`.
pub fn encode_error(error: &model::ErrorInfo) -> Value {
    encode::encode_error(error)
}

/// Outbound request body for `upstream_model`. Always asks for a stream with usage.
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

#[cfg(test)]
mod tests;
