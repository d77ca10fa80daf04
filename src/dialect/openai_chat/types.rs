//! Serde wire structs of the Chat Completions dialect.
//!
//! Inbound request structs are strict about types (so errors carry a JSON path) but ignore
//! unknown fields. Outbound stream chunks are `Serialize` structs so the field order on the wire is
//! fixed and readable. Upstream stream chunks are read from `serde_json::Value` in `stream.rs`, so
//! a vendor's odd field never drops a whole chunk.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};

use crate::dialect::{TextOrList, text_or_list};
use serde::{Deserialize, Serialize};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Inbound request
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
pub(crate) struct ChatRequest {
    pub model: String,
    pub messages: Vec<InMessage>,
    #[serde(default)]
    pub tools: Option<Vec<InTool>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Not OpenAI's, but vLLM, Ollama and others accept it.
    #[serde(default)]
    pub top_k: Option<u32>,
    #[serde(default)]
    pub stop: Option<StringOrList>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<InStreamOptions>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub n: Option<u32>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct InStreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct InMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
    /// DeepSeek's reasoning, sent back on later turns.
    #[serde(default)]
    pub reasoning_content: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<InToolCall>>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// The tool name of a legacy `function` message (also allowed on other roles; ignored there).
    #[serde(default)]
    pub name: Option<String>,
}

/// Message content: a string or an array of parts. `null` is the absent `Option`.
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

/// One content part. Only the fields of the supported types are read; the type is checked in
/// `decode.rs` so unsupported types get a clear message.
#[derive(Debug, Deserialize)]
pub(crate) struct InPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub image_url: Option<ImageUrl>,
    /// Assistant `refusal` parts.
    #[serde(default)]
    pub refusal: Option<String>,
}

/// `image_url`: normally `{url, detail}`; a bare string is accepted too.
#[derive(Debug)]
pub(crate) struct ImageUrl {
    pub url: String,
}

impl<'de> Deserialize<'de> for ImageUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ImageUrl, D::Error> {
        #[derive(Deserialize)]
        struct Object {
            url: String,
            // `detail` has no canonical counterpart and is dropped.
        }

        struct UrlVisitor;

        impl<'de> Visitor<'de> for UrlVisitor {
            type Value = ImageUrl;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object with a `url` or a URL string")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<ImageUrl, E> {
                Ok(ImageUrl { url: v.to_owned() })
            }

            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<ImageUrl, A::Error> {
                let obj = Object::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(ImageUrl { url: obj.url })
            }
        }

        deserializer.deserialize_any(UrlVisitor)
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct InToolCall {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    pub function: InFunctionCall,
}

#[derive(Debug, Deserialize)]
pub(crate) struct InFunctionCall {
    pub name: String,
    /// A JSON-encoded string per the spec; some clients send an object.
    #[serde(default)]
    pub arguments: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct InTool {
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub function: Option<InFunctionDef>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct InFunctionDef {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub parameters: Option<Value>,
    // `strict` has no canonical counterpart and is dropped.
}

/// `stop`: a string or an array of strings.
#[derive(Debug)]
pub(crate) struct StringOrList(pub Vec<String>);

impl<'de> Deserialize<'de> for StringOrList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<StringOrList, D::Error> {
        Ok(match text_or_list(deserializer, "a string or an array of strings")? {
            TextOrList::Text(s) => StringOrList(vec![s]),
            TextOrList::List(items) => StringOrList(items),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Upstream response
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
#[derive(Debug, Deserialize)]
pub(crate) struct ChatCompletion {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub created: Option<i64>,
    #[serde(default)]
    pub choices: Option<Vec<OutChoice>>,
    #[serde(default)]
    pub usage: Option<WireUsageIn>,
}

#[cfg(test)]
#[derive(Debug, Deserialize)]
pub(crate) struct OutChoice {
    #[serde(default)]
    pub message: Option<OutMessage>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[cfg(test)]
#[derive(Debug, Deserialize)]
pub(crate) struct OutMessage {
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(default)]
    pub reasoning_content: Option<String>,
    /// OpenRouter's name for the same thing.
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub refusal: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<InToolCall>>,
}

/// Usage as upstreams report it, with the vendor variants of the cached-token count.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WireUsageIn {
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    #[serde(default)]
    pub completion_tokens: Option<u64>,
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    pub completion_tokens_details: Option<CompletionDetails>,
    /// DeepSeek.
    #[serde(default)]
    pub prompt_cache_hit_tokens: Option<u64>,
    /// Kimi (Moonshot).
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct PromptDetails {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct CompletionDetails {
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
}

impl WireUsageIn {
    pub fn to_usage(&self) -> crate::model::Usage {
        let cached = self
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
            .or(self.prompt_cache_hit_tokens)
            .or(self.cached_tokens)
            .unwrap_or(0);
        let reasoning = self.completion_tokens_details.as_ref().and_then(|d| d.reasoning_tokens).unwrap_or(0);
        crate::model::Usage::from_openai(
            self.prompt_tokens.unwrap_or(0),
            cached,
            self.completion_tokens.unwrap_or(0),
            reasoning,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Outbound usage and stream chunks
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Serialize)]
pub(crate) struct WireUsageOut {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub prompt_tokens_details: CachedDetails,
    pub completion_tokens_details: ReasoningDetails,
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
    /// `prompt_tokens` is [`crate::model::Usage::openai_prompt_tokens`] and `total_tokens`
    /// [`crate::model::Usage::total_tokens`], computed saturating: the counts come from upstreams
    /// and must not be able to overflow (a panic in debug builds).
    pub fn from_usage(usage: &crate::model::Usage) -> WireUsageOut {
        let prompt =
            usage.input_tokens.saturating_add(usage.cache_read_tokens).saturating_add(usage.cache_write_tokens);
        WireUsageOut {
            prompt_tokens: prompt,
            completion_tokens: usage.output_tokens,
            total_tokens: prompt.saturating_add(usage.output_tokens),
            prompt_tokens_details: CachedDetails { cached_tokens: usage.cache_read_tokens },
            completion_tokens_details: ReasoningDetails { reasoning_tokens: usage.reasoning_tokens },
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct Chunk<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: i64,
    pub model: &'a str,
    pub choices: Vec<ChunkChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<WireUsageOut>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ChunkChoice<'a> {
    pub index: u32,
    pub delta: Delta<'a>,
    /// Always `null`.
    pub logprobs: (),
    pub finish_reason: Option<&'a str>,
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<DeltaToolCall<'a>>>,
}

#[derive(Debug, Serialize)]
pub(crate) struct DeltaToolCall<'a> {
    pub index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: DeltaFunction<'a>,
}

#[derive(Debug, Serialize)]
pub(crate) struct DeltaFunction<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
    pub arguments: &'a str,
}
