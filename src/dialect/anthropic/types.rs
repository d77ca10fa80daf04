//! Serde wire structs of the Anthropic Messages API, for decoding only.
//!
//! Content blocks are kept as [`Value`]s here and decoded one by one (see `decode.rs`), so an
//! unknown block type can be skipped instead of failing the whole body, and a bad field still gets
//! its full JSON path (`messages[0].content[1].type`). Unknown fields are ignored everywhere.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::dialect::DecodeError;

/// A `/v1/messages` request body.
#[derive(Debug, Deserialize)]
pub(crate) struct WireRequest {
    pub model: String,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// A string or an array of text blocks.
    #[serde(default)]
    pub system: Option<Value>,
    pub messages: Vec<WireMessage>,
    /// Kept raw: server tools (`web_search_20250305`, ...) have no `input_schema` and are skipped.
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_choice: Option<WireToolChoice>,
    #[serde(default)]
    pub thinking: Option<WireThinking>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub top_k: Option<u32>,
    #[serde(default)]
    pub stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub metadata: Option<WireMetadata>,
    /// `{"effort": "low" | "medium" | "high" | "max", ...}`; kept raw (only `effort` is read).
    #[serde(default)]
    pub output_config: Option<Value>,
}

/// The top-level request keys [`WireRequest`] maps onto the canonical request; every other key
/// is kept verbatim in the request's passthrough (`output_config` too: only its effort is read).
pub(crate) const MAPPED_KEYS: [&str; 13] = [
    "model",
    "max_tokens",
    "system",
    "messages",
    "tools",
    "tool_choice",
    "thinking",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "stream",
    "metadata",
];

#[derive(Debug, Deserialize)]
pub(crate) struct WireMessage {
    pub role: WireRole,
    /// A string or an array of content blocks.
    pub content: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WireRole {
    User,
    Assistant,
    /// A system message inside `messages` (Claude Code 2.1, beta
    /// `mid-conversation-system-2026-04-07`).
    System,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireMetadata {
    #[serde(default)]
    pub user_id: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireToolChoice {
    #[serde(rename = "type")]
    pub kind: WireToolChoiceKind,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub disable_parallel_tool_use: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WireToolChoiceKind {
    Auto,
    Any,
    Tool,
    None,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireThinking {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub budget_tokens: Option<u32>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireTool {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub input_schema: Value,
    #[serde(default)]
    pub cache_control: Option<WireCacheControl>,
}

/// `{"type": "ephemeral", "ttl": "1h"}`. Any `type` is read as ephemeral, the only one there is.
#[derive(Debug, Deserialize)]
pub(crate) struct WireCacheControl {
    #[serde(default)]
    pub ttl: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct TextBlock {
    pub text: String,
    #[serde(default)]
    pub cache_control: Option<WireCacheControl>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ImageBlock {
    pub source: WireImageSource,
    #[serde(default)]
    pub cache_control: Option<WireCacheControl>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireImageSource {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub media_type: Option<String>,
    #[serde(default)]
    pub data: Option<String>,
    #[serde(default)]
    pub url: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ThinkingBlock {
    #[serde(default)]
    pub thinking: String,
    #[serde(default)]
    pub signature: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct RedactedThinkingBlock {
    pub data: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ToolUseBlock {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub input: Value,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ToolResultBlock {
    pub tool_use_id: String,
    /// A string or an array of text/image blocks.
    #[serde(default)]
    pub content: Option<Value>,
    #[serde(default)]
    pub is_error: Option<bool>,
}

/// A non-streamed `/v1/messages` response (read by the unit tests only: upstreams always stream).
#[cfg(test)]
#[derive(Debug, Deserialize)]
pub(crate) struct WireResponse {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub content: Vec<Value>,
    #[serde(default)]
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub stop_sequence: Option<String>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
}

/// Usage as Anthropic reports it; any field may be missing or `null` (notably in `message_delta`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    pub fn to_model(&self) -> crate::model::Usage {
        crate::model::Usage {
            input_tokens: self.input_tokens.unwrap_or(0),
            output_tokens: self.output_tokens.unwrap_or(0),
            cache_read_tokens: self.cache_read_input_tokens.unwrap_or(0),
            cache_write_tokens: self.cache_creation_input_tokens.unwrap_or(0),
            reasoning_tokens: 0,
        }
    }
}

/// `{"type": "error", "error": {"type": ..., "message": ...}}`, in error bodies and stream events.
#[derive(Debug, Deserialize)]
pub(crate) struct MessageStartEvent {
    pub message: StreamMessage,
}

#[derive(Debug, Deserialize)]
pub(crate) struct StreamMessage {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ContentBlockStartEvent {
    pub index: u64,
    pub content_block: Value,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ContentBlockDeltaEvent {
    pub index: u64,
    pub delta: Value,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ContentBlockStopEvent {
    pub index: u64,
}

#[derive(Debug, Deserialize)]
pub(crate) struct MessageDeltaEvent {
    #[serde(default)]
    pub delta: Option<MessageDeltaBody>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct MessageDeltaBody {
    #[serde(default)]
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub stop_sequence: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct StreamToolUse {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub input: Value,
}

#[derive(Debug, Deserialize)]
pub(crate) struct StreamText {
    #[serde(default)]
    pub text: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct StreamThinking {
    #[serde(default)]
    pub thinking: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct StreamSignature {
    #[serde(default)]
    pub signature: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct StreamRedacted {
    #[serde(default)]
    pub data: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct StreamInputJson {
    #[serde(default)]
    pub partial_json: String,
}

/// Deserialises a part of an already parsed body, reporting the bad field's path under `prefix`.
pub(crate) fn from_value<T: DeserializeOwned>(value: &Value, prefix: &str) -> Result<T, DecodeError> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let mut path = join_path(prefix, &err.path().to_string());
        let message = err.into_inner().to_string();
        // serde reports a missing field at its parent; name the field itself.
        if let Some(name) = message.strip_prefix("missing field `").and_then(|m| m.strip_suffix('`')) {
            path = join_path(&path, name);
        }
        DecodeError::Field { path, message }
    })
}

/// `prefix` + a serde_path_to_error path (`.` is the root).
pub(crate) fn join_path(prefix: &str, inner: &str) -> String {
    if inner == "." || inner.is_empty() {
        if prefix.is_empty() { "$".to_owned() } else { prefix.to_owned() }
    } else if prefix.is_empty() || prefix == "$" {
        inner.to_owned()
    } else if inner.starts_with('[') {
        format!("{prefix}{inner}")
    } else {
        format!("{prefix}.{inner}")
    }
}

/// How serde would name a value's type in an error message.
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("boolean `{b}`"),
        Value::Number(n) => format!("number `{n}`"),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "sequence".to_owned(),
        Value::Object(_) => "map".to_owned(),
    }
}

/// A [`DecodeError::Field`].
pub(crate) fn field_error(path: impl Into<String>, message: impl Into<String>) -> DecodeError {
    DecodeError::Field { path: path.into(), message: message.into() }
}
