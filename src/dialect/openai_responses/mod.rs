//! OpenAI Responses (`/v1/responses`), the API Codex CLI requires.
//!
//! Inbound: [`decode_request`], [`encode_response`], [`StreamEncoder`], [`encode_error`].
//! Outbound: [`encode_request`], [`StreamDecoder`], [`decode_error`] (upstreams always stream;
//! `decode::decode_response` is a unit-test helper).
//!
//! Files: `types.rs` (serde wire structs), `decode.rs` / `encode.rs` (whole bodies), `stream.rs`
//! (SSE in both directions), `tests.rs` (fixture-driven tests over
//! `tests/fixtures/openai_responses/`). Everything here is pure: no I/O, no clock, no
//! randomness; decoders never panic.
//!
//! Mapping choices:
//! - `instructions` becomes the first [`model::Role::System`] message; `system` and `developer`
//!   input messages are System messages too. Outbound, a leading System message becomes
//!   `instructions` and later ones `developer` messages, in place.
//! - Input items: `message` items become messages (consecutive assistant output — reasoning,
//!   text, calls — merges into one assistant message; consecutive tool outputs into one
//!   [`model::Role::Tool`] message). `function_call` is a [`model::Part::ToolUse`] with
//!   `call_id` as its id and the `arguments` string parsed (invalid JSON is kept as a string);
//!   `function_call_output` (string or content parts) is a [`model::Part::ToolResult`].
//!   `custom_tool_call` (Codex's free-form `apply_patch`) is kept as a call with input
//!   `{"input": text}` so the history stays paired. `item_reference` is refused; other item
//!   types (server-side tool calls) are skipped with a warning. `input_image` takes an
//!   `http(s)` or `data:` URL; `input_file` only an image sent as a data URL.
//! - Reasoning items: the `summary_text` parts (joined with a blank line; if there are none,
//!   the `reasoning_text` content) are the [`model::Part::Thinking`] text; an `encrypted_content`
//!   that is not already a Keyhaven envelope is wrapped with the item `id` in an
//!   `openai_responses` envelope (`model::reasoning`), which is its `signature`. Clients get
//!   envelopes as `encrypted_content` (a raw Anthropic signature is wrapped in an `anthropic`
//!   one), so every family's reasoning comes back tagged; outbound only `openai_responses`
//!   envelopes become reasoning items, with their own `id` and `encrypted_content`.
//! - A client's unmapped top-level keys and hosted tools (`web_search*`, `file_search`,
//!   `code_interpreter`, `image_generation`, `mcp`) are kept in its [`model::Passthrough`] and
//!   added to a Responses upstream's body (`include` merged); other upstreams never see them.
//!   Anthropic's [`model::Part::RedactedThinking`] travels as a reasoning item without summary
//!   whose `encrypted_content` is [`REDACTED_PREFIX`] + data, and decodes back to redacted
//!   thinking. Outbound, unsigned and redacted thinking is not sent (a Responses upstream cannot
//!   use it).
//! - Tools: `type: "function"` with `name`/`description`/`parameters` at the top level (Chat's
//!   nesting under `function` is tolerated inbound); other tool types (`web_search`, `custom`,
//!   `local_shell`, ...) are skipped with a warning. Outbound tools are sent with
//!   `strict: false` (Responses defaults to strict schemas).
//! - `reasoning.effort` `none` means no thinking, `xhigh` is [`model::Effort::High`]; a
//!   `reasoning` object without effort asks for thinking at the upstream's default. Outbound,
//!   thinking (only when the provider's model may think) sends `reasoning: {effort, summary:
//!   "auto"}` with `include: ["reasoning.encrypted_content"]`; requests are always
//!   `store: false`, `stream: true`.
//! - Dropped toward other dialects: `metadata`, `text` (output format), `include`,
//!   `prompt_cache_key`, `truncation`, `reasoning.summary`; `stop`, `seed`, `top_k` and penalties outbound (Responses has
//!   none of them).
//! - Usage: `input_tokens` includes `input_tokens_details.cached_tokens` (a subset), mapped with
//!   [`model::Usage::from_openai`] and back with [`model::Usage::openai_prompt_tokens`].
//! - Status: a token limit is `status: "incomplete"` with `incomplete_details.reason:
//!   "max_output_tokens"` (content filter likewise); everything else is `completed`.

mod decode;
mod encode;
mod stream;
mod types;

use serde_json::Value;

use crate::dialect::DecodeError;
use crate::model;

pub use stream::{StreamDecoder, StreamEncoder};

/// Marks a reasoning item's `encrypted_content` that carries Anthropic redacted thinking.
pub const REDACTED_PREFIX: &str = "keyhaven-redacted-thinking:";

/// What an inbound request asks beyond the canonical request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestOptions {
    /// `previous_response_id`: the conversation to continue (resolved by `api`).
    pub previous_response_id: Option<String>,
    /// `store` (default true). Keyhaven keeps responses for chaining in memory either way.
    pub store: bool,
    /// The first message of the decoded request came from `instructions` (which, as at OpenAI,
    /// are not carried over to a later turn that names this one as its previous response).
    pub has_instructions: bool,
}

/// Per-provider choices for outbound requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EncodeOptions {
    /// Send `reasoning` (and ask for encrypted reasoning) when the request asks for thinking.
    /// Off for models that do not reason: OpenAI rejects the field for them.
    pub reasoning: bool,
}

/// Decodes an inbound `/v1/responses` body. Unknown fields are ignored; a field of the wrong
/// type is a [`DecodeError::Field`] naming its path (`input[2].call_id`).
pub fn decode_request(body: &[u8]) -> Result<(model::Request, RequestOptions), DecodeError> {
    decode::decode_request(body)
}

/// A complete `response` object for a non-streaming client.
pub fn encode_response(resp: &model::Response) -> Value {
    encode::encode_response(resp)
}

/// The body of an error response: `{"error": {"message", "type", "param": null, "code"}}`.
pub fn encode_error(error: &model::ErrorInfo) -> Value {
    encode::encode_error(error)
}

/// Outbound request body for `upstream_model`. Always `stream: true` and `store: false`.
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
