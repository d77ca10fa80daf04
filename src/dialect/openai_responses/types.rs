//! Serde wire structs of the Responses dialect.
//!
//! Inbound request structs are strict about types (so errors carry a JSON path) but ignore
//! unknown fields (Codex sends `include`, `prompt_cache_key`, `text`, ...). Input items are one
//! struct with every field optional; `decode.rs` checks what each item `type` needs, so a missing
//! field gets a message naming the item. Upstream stream events are read from
//! `serde_json::Value` in `stream.rs`, so one odd field never drops a whole event.

use serde::Deserializer;

use crate::dialect::{TextOrList, text_or_list};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::Usage;

// ---------------------------------------------------------------------------------------------
// Inbound request
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
pub(crate) struct ResponsesRequest {
    pub model: String,
    #[serde(default)]
    pub instructions: Option<String>,
    #[serde(default)]
    pub input: Option<Input>,
    #[serde(default)]
    pub tools: Option<Vec<InTool>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub reasoning: Option<InReasoning>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub store: Option<bool>,
    #[serde(default)]
    pub previous_response_id: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    /// Read for its type only: the canonical request has no metadata.
    #[serde(default)]
    #[expect(dead_code, reason = "type-checked, then dropped: no canonical counterpart")]
    pub metadata: Option<std::collections::BTreeMap<String, Value>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct InReasoning {
    #[serde(default)]
    pub effort: Option<String>,
    /// `auto`, `concise`, `detailed`: how much summary the client wants. Outbound Keyhaven always
    /// asks for `auto`.
    #[serde(default)]
    #[expect(dead_code, reason = "type-checked, then dropped: summaries are always requested upstream")]
    pub summary: Option<String>,
}

/// `input`: a string (one user message) or an array of items.
#[derive(Debug)]
pub(crate) enum Input {
    Text(String),
    Items(Vec<InItem>),
}

impl<'de> Deserialize<'de> for Input {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Input, D::Error> {
        Ok(match text_or_list(deserializer, "a string or an array of input items")? {
            TextOrList::Text(s) => Input::Text(s),
            TextOrList::List(items) => Input::Items(items),
        })
    }
}

/// One input item of any type. Which fields are required depends on `type` (checked in
/// `decode.rs`); an item without `type` but with a `role` is a message ("easy input message").
#[derive(Debug, Deserialize)]
pub(crate) struct InItem {
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// The item id (kept for reasoning items: a Responses upstream wants its own id back).
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub role: Option<String>,
    /// Message content, or the reasoning text of a `reasoning` item.
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(default)]
    pub call_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// A JSON-encoded string per the spec; an object is tolerated.
    #[serde(default)]
    pub arguments: Option<Value>,
    /// `custom_tool_call` input (free text).
    #[serde(default)]
    pub input: Option<String>,
    /// `function_call_output` / `custom_tool_call_output`: a string or content parts.
    #[serde(default)]
    pub output: Option<Content>,
    #[serde(default)]
    pub summary: Option<Vec<InPart>>,
    #[serde(default)]
    pub encrypted_content: Option<String>,
}

/// Message content or tool output: a string or an array of parts. `null` is the absent `Option`.
#[derive(Debug)]
pub(crate) enum Content {
    Text(String),
    Parts(Vec<InPart>),
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Content, D::Error> {
        Ok(match text_or_list(deserializer, "a string or an array of content parts")? {
            TextOrList::Text(s) => Content::Text(s),
            TextOrList::List(items) => Content::Parts(items),
        })
    }
}

/// One content part (`input_text`, `output_text`, `input_image`, `input_file`, `refusal`,
/// `summary_text`, `reasoning_text`). The type is checked in `decode.rs`.
#[derive(Debug, Deserialize)]
pub(crate) struct InPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub refusal: Option<String>,
    /// `input_image`: an `http(s)` or `data:` URL.
    #[serde(default)]
    pub image_url: Option<String>,
    #[serde(default)]
    pub file_id: Option<String>,
    /// `input_file`: a `data:` URL.
    #[serde(default)]
    pub file_data: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct InTool {
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub parameters: Option<Value>,
    /// Chat Completions' nesting, sent by some clients to this endpoint by mistake.
    #[serde(default)]
    pub function: Option<Value>,
}

// ---------------------------------------------------------------------------------------------
// Usage
// ---------------------------------------------------------------------------------------------

/// Usage as Responses reports it: `input_tokens` INCLUDES `input_tokens_details.cached_tokens`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WireUsageIn {
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub input_tokens_details: Option<InputDetails>,
    #[serde(default)]
    pub output_tokens_details: Option<OutputDetails>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct InputDetails {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct OutputDetails {
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
}

impl WireUsageIn {
    pub fn to_usage(&self) -> Usage {
        Usage::from_openai(
            self.input_tokens.unwrap_or(0),
            self.input_tokens_details.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0),
            self.output_tokens.unwrap_or(0),
            self.output_tokens_details.as_ref().and_then(|d| d.reasoning_tokens).unwrap_or(0),
        )
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct WireUsageOut {
    pub input_tokens: u64,
    pub input_tokens_details: CachedDetails,
    pub output_tokens: u64,
    pub output_tokens_details: ReasoningDetails,
    pub total_tokens: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct CachedDetails {
    pub cached_tokens: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct ReasoningDetails {
    pub reasoning_tokens: u64,
}

impl WireUsageOut {
    /// `input_tokens` is [`Usage::openai_prompt_tokens`] (cached tokens included, saturating);
    /// `cached_tokens` is the cache reads, a subset of it.
    pub fn from_usage(usage: &Usage) -> WireUsageOut {
        let input = usage.openai_prompt_tokens();
        WireUsageOut {
            input_tokens: input,
            input_tokens_details: CachedDetails { cached_tokens: usage.cache_read_tokens },
            output_tokens: usage.output_tokens,
            output_tokens_details: ReasoningDetails { reasoning_tokens: usage.reasoning_tokens },
            total_tokens: input.saturating_add(usage.output_tokens),
        }
    }
}
