//! Canonical types every dialect and provider converts to and from (the hub of hub-and-spoke).
//!
//! Invariants: no I/O, no async runtime, no clock, no randomness. Ids and timestamps are passed in,
//! so every conversion is deterministic. Reasoning envelopes (thinking signatures, redacted
//! thinking, `reasoning_content`) are kept verbatim, and [`Usage`] fields are disjoint.

mod accumulate;
mod call;
mod conversation;
mod fim;
mod passthrough;
pub mod reasoning;
mod usage;

pub use accumulate::{Accumulator, parse_arguments};
pub use call::{AlertLevel, BudgetAlert, CallFinish, CallStart, CallStatus, CostSource, ReasoningRecord, SpendRow};
pub use conversation::{Entry, RunFinish, RunRecord, RunStart, RunStatus, StoredMessage, ToolRoundRecord};
pub use fim::FimRequest;
pub use passthrough::{Passthrough, WireDialect};
pub use usage::Usage;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One inference request, whatever dialect it arrived in.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Request {
    /// The model name as the client asked for it (an alias, display name or id).
    pub model: String,
    /// The conversation. System prompts are [`Role::System`] messages (Anthropic's top-level
    /// `system` becomes the first message; encoders hoist them back).
    pub messages: Vec<Message>,
    pub tools: Vec<ToolDef>,
    pub tool_choice: Option<ToolChoice>,
    pub params: SamplingParams,
    pub thinking: Option<ThinkingConfig>,
    /// Whether the client wants a streamed answer.
    pub stream: bool,
    pub parallel_tool_calls: Option<bool>,
    /// An opaque end-user id from the client (`user` / `metadata.user_id`).
    pub user: Option<String>,
    /// What the inbound decoder did not map, tagged with its dialect: re-emitted only by the
    /// encoder of that same dialect (see [`Passthrough`]). `None` for requests built in-process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passthrough: Option<Box<Passthrough>>,
}

impl Request {
    /// The request without its [`Passthrough`] (for comparing what the canonical fields say).
    pub fn without_passthrough(&self) -> Request {
        Request { passthrough: None, ..self.clone() }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SamplingParams {
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub stop: Vec<String>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
}

/// Extended thinking / reasoning. Anthropic speaks in a token budget, OpenAI in an effort level;
/// each encoder maps whichever it gets onto its own knob.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ThinkingConfig {
    pub budget_tokens: Option<u32>,
    pub effort: Option<Effort>,
    /// Anthropic's `{"type": "adaptive"}`: the model decides how much to think (with
    /// `output_config.effort` as the guide, carried in `effort`).
    #[serde(default)]
    pub adaptive: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effort {
    Minimal,
    Low,
    Medium,
    High,
    /// Anthropic's `max` effort. OpenAI dialects send it as `high`, the top every vendor accepts.
    Max,
}

impl Effort {
    /// The OpenAI name (`max` is sent as `high`).
    pub fn as_str(self) -> &'static str {
        match self {
            Effort::Minimal => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High | Effort::Max => "high",
        }
    }

    /// Anthropic's `output_config.effort` name (`low`, `medium`, `high`, `max`; minimal is low).
    pub fn anthropic_str(self) -> &'static str {
        match self {
            Effort::Minimal | Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
            Effort::Max => "max",
        }
    }

    /// Anthropic's `output_config.effort` names; unknown names are `None`.
    pub fn parse_anthropic(name: &str) -> Option<Effort> {
        Some(match name {
            "low" => Effort::Low,
            "medium" => Effort::Medium,
            "high" => Effort::High,
            "max" | "xhigh" => Effort::Max,
            "minimal" => Effort::Minimal,
            _ => return None,
        })
    }

    /// OpenAI's effort names (`minimal`, `low`, `medium`, `high`; `xhigh` maps to high, the top of
    /// the canonical scale). `none` and unknown names are `None`; callers decide what they mean.
    pub fn parse(name: &str) -> Option<Effort> {
        Some(match name {
            "minimal" => Effort::Minimal,
            "low" => Effort::Low,
            "medium" => Effort::Medium,
            "high" | "xhigh" => Effort::High,
            _ => return None,
        })
    }

    /// The Anthropic thinking budget used when only an effort level is known.
    pub fn budget_tokens(self) -> u32 {
        match self {
            Effort::Minimal => 1024,
            Effort::Low => 2048,
            Effort::Medium => 8192,
            Effort::High => 24576,
            Effort::Max => 31999,
        }
    }

    /// The effort level used when only an Anthropic budget is known.
    pub fn from_budget(budget: u32) -> Effort {
        match budget {
            0..=1024 => Effort::Minimal,
            1025..=4096 => Effort::Low,
            4097..=16384 => Effort::Medium,
            _ => Effort::High,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    /// Results of tool calls. Content is [`Part::ToolResult`].
    Tool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Part>,
}

impl Message {
    pub fn text(role: Role, text: impl Into<String>) -> Message {
        Message { role, content: vec![Part::text(text)] }
    }

    /// The text parts joined with `sep` (other parts skipped).
    pub fn joined_text(&self, sep: &str) -> String {
        joined_text(&self.content, sep)
    }
}

/// The text parts of `parts` joined with `sep` (other parts skipped).
pub fn joined_text<'a>(parts: impl IntoIterator<Item = &'a Part>, sep: &str) -> String {
    parts
        .into_iter()
        .filter_map(|p| match p {
            Part::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(sep)
}

/// Anthropic prompt-cache breakpoint. Other dialects ignore it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CacheControl {
    /// `None` is the provider default (5 minutes at Anthropic); otherwise e.g. `"1h"`.
    pub ttl: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    Text {
        text: String,
        cache: Option<CacheControl>,
    },
    Image {
        source: ImageSource,
        cache: Option<CacheControl>,
    },
    /// Visible reasoning. `signature` is Anthropic's opaque envelope, kept verbatim; reasoning from
    /// OpenAI-compatible vendors (`reasoning_content`) has none.
    Thinking {
        text: String,
        signature: Option<String>,
    },
    /// Anthropic's encrypted reasoning, passed back untouched.
    RedactedThinking {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        /// The arguments. Normally a JSON object; when a model produced arguments that are not
        /// valid JSON, the raw text is kept as a JSON string so nothing is lost.
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        /// Text and image parts only.
        content: Vec<Part>,
        is_error: bool,
    },
}

impl Part {
    pub fn text(text: impl Into<String>) -> Part {
        Part::Text { text: text.into(), cache: None }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ImageSource {
    /// An `http(s):` URL (or a `data:` URL that could not be split).
    Url {
        url: String,
    },
    Base64 {
        media_type: String,
        data: String,
    },
}

impl ImageSource {
    /// Splits a `data:<media>;base64,<data>` URL; any other URL stays a URL.
    pub fn from_url(url: &str) -> ImageSource {
        if let Some(rest) = url.strip_prefix("data:")
            && let Some((meta, data)) = rest.split_once(',')
            && let Some(media_type) = meta.strip_suffix(";base64")
        {
            return ImageSource::Base64 { media_type: media_type.to_owned(), data: data.to_owned() };
        }
        ImageSource::Url { url: url.to_owned() }
    }

    /// The URL form (`data:` URL for inline images).
    pub fn to_url(&self) -> String {
        match self {
            ImageSource::Url { url } => url.clone(),
            ImageSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments.
    pub parameters: Value,
    pub cache: Option<CacheControl>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolChoice {
    Auto,
    None,
    /// The model must call some tool.
    Required,
    /// The model must call this tool.
    Tool {
        name: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    StopSequence,
    ToolUse,
    ContentFilter,
    Refusal,
    /// A reason this build does not know, kept verbatim.
    Other(String),
}

/// A complete (non-streamed) answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Response {
    pub id: String,
    /// The model that answered, as the client should see it.
    pub model: String,
    /// Assistant content: text, thinking, redacted thinking and tool uses.
    pub content: Vec<Part>,
    pub stop_reason: Option<StopReason>,
    pub stop_sequence: Option<String>,
    pub usage: Usage,
    /// Unix milliseconds; used by dialects that carry a creation time.
    pub created_ms: i64,
}

/// One event of a streamed answer. Dialect decoders produce these from upstream chunks (a chunk may
/// map to none or several); dialect encoders turn them into the client's chunks.
///
/// Tool calls are numbered by `index`, their order among the tool calls of this answer (0, 1, ...),
/// whatever block index the upstream used. Text and thinking are not indexed: a change of kind
/// closes the previous block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    MessageStart {
        id: String,
        model: String,
    },
    TextDelta {
        text: String,
    },
    ThinkingDelta {
        text: String,
    },
    /// Closes the current thinking block with its signature.
    ThinkingSignature {
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
    ToolCallStart {
        index: u32,
        id: String,
        name: String,
    },
    ToolCallDelta {
        index: u32,
        arguments: String,
    },
    ToolCallEnd {
        index: u32,
    },
    /// Usage known so far. Values are totals, not increments; merge with [`Usage::merge_max`].
    Usage {
        usage: Usage,
    },
    Stop {
        reason: StopReason,
        stop_sequence: Option<String>,
    },
    /// A terminal error inside an already started stream.
    Error {
        error: ErrorInfo,
    },
}

/// An error as a dialect reports it, normalised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    pub kind: ErrorKind,
    pub message: String,
}

/// The kinds of error every dialect can express. `api` maps each to an HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    InvalidRequest,
    Authentication,
    PermissionDenied,
    NotFound,
    RequestTooLarge,
    RateLimited,
    Overloaded,
    Timeout,
    /// Any other upstream failure.
    Upstream,
    Internal,
}

impl ErrorKind {
    /// Every kind, for exhaustive tests of the encoders.
    pub const ALL: [ErrorKind; 10] = [
        ErrorKind::InvalidRequest,
        ErrorKind::Authentication,
        ErrorKind::PermissionDenied,
        ErrorKind::NotFound,
        ErrorKind::RequestTooLarge,
        ErrorKind::RateLimited,
        ErrorKind::Overloaded,
        ErrorKind::Timeout,
        ErrorKind::Upstream,
        ErrorKind::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::Authentication => "authentication",
            ErrorKind::PermissionDenied => "permission_denied",
            ErrorKind::NotFound => "not_found",
            ErrorKind::RequestTooLarge => "request_too_large",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Upstream => "upstream",
            ErrorKind::Internal => "internal",
        }
    }

    /// The kind an upstream HTTP status stands for.
    pub fn from_status(status: u16) -> ErrorKind {
        match status {
            400 | 422 => ErrorKind::InvalidRequest,
            401 => ErrorKind::Authentication,
            403 => ErrorKind::PermissionDenied,
            404 => ErrorKind::NotFound,
            408 | 504 => ErrorKind::Timeout,
            413 => ErrorKind::RequestTooLarge,
            429 => ErrorKind::RateLimited,
            503 | 529 => ErrorKind::Overloaded,
            _ => ErrorKind::Upstream,
        }
    }
}

#[cfg(test)]
mod tests;
