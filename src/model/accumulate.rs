//! Folds a stream of [`StreamEvent`]s into a complete [`Response`].
//!
//! Used to answer non-streaming clients from a streamed upstream, and to keep the usage and a
//! response summary of every streamed call for its record.

use crate::model::{ErrorInfo, Part, Response, StopReason, StreamEvent, Usage};

#[derive(Debug, Default)]
pub struct Accumulator {
    id: String,
    model: String,
    content: Vec<Part>,
    /// Position in `content` of each tool call, by tool index.
    tools: Vec<(u32, usize)>,
    /// Raw argument text of each tool call, by tool index.
    arguments: Vec<(u32, String)>,
    stop_reason: Option<StopReason>,
    stop_sequence: Option<String>,
    usage: Usage,
    saw_usage: bool,
    error: Option<ErrorInfo>,
    output_chars: u64,
}

impl Accumulator {
    pub fn new() -> Accumulator {
        Accumulator::default()
    }

    pub fn push(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::MessageStart { id, model } => {
                self.id.clone_from(id);
                self.model.clone_from(model);
            }
            StreamEvent::TextDelta { text } => {
                self.output_chars += text.len() as u64;
                match self.content.last_mut() {
                    Some(Part::Text { text: t, .. }) => t.push_str(text),
                    _ => self.content.push(Part::text(text.clone())),
                }
            }
            StreamEvent::ThinkingDelta { text } => {
                self.output_chars += text.len() as u64;
                match self.content.last_mut() {
                    Some(Part::Thinking { text: t, signature: None }) => t.push_str(text),
                    _ => self.content.push(Part::Thinking { text: text.clone(), signature: None }),
                }
            }
            StreamEvent::ThinkingSignature { signature } => match self.content.last_mut() {
                Some(Part::Thinking { signature: s @ None, .. }) => *s = Some(signature.clone()),
                _ => self.content.push(Part::Thinking { text: String::new(), signature: Some(signature.clone()) }),
            },
            StreamEvent::RedactedThinking { data } => {
                self.content.push(Part::RedactedThinking { data: data.clone() });
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                if self.tools.iter().any(|(i, _)| i == index) {
                    return;
                }
                self.tools.push((*index, self.content.len()));
                self.arguments.push((*index, String::new()));
                self.content.push(Part::ToolUse { id: id.clone(), name: name.clone(), input: serde_json::Value::Null });
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                self.output_chars += arguments.len() as u64;
                if let Some((_, buf)) = self.arguments.iter_mut().find(|(i, _)| i == index) {
                    buf.push_str(arguments);
                }
            }
            StreamEvent::ToolCallEnd { .. } => {}
            StreamEvent::Usage { usage } => {
                self.saw_usage = true;
                self.usage.merge_max(usage);
            }
            StreamEvent::Stop { reason, stop_sequence } => {
                self.stop_reason = Some(reason.clone());
                self.stop_sequence.clone_from(stop_sequence);
            }
            StreamEvent::Error { error } => self.error = Some(error.clone()),
        }
    }

    /// True once the provider reported any usage.
    pub fn saw_usage(&self) -> bool {
        self.saw_usage
    }

    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// A rough output-token estimate (4 characters a token) for streams that ended without usage.
    pub fn estimated_output_tokens(&self) -> u64 {
        self.output_chars.div_ceil(4)
    }

    pub fn error(&self) -> Option<&ErrorInfo> {
        self.error.as_ref()
    }

    pub fn stop_reason(&self) -> Option<&StopReason> {
        self.stop_reason.as_ref()
    }

    /// The response so far. Tool arguments are parsed as JSON; text that is not JSON is kept as a
    /// JSON string (see [`Part::ToolUse`]). `created_ms` is the caller's clock.
    pub fn finish(mut self, created_ms: i64) -> Response {
        for (index, pos) in &self.tools {
            let raw =
                self.arguments.iter_mut().find(|(i, _)| i == index).map(|(_, s)| std::mem::take(s)).unwrap_or_default();
            if let Some(Part::ToolUse { input, .. }) = self.content.get_mut(*pos) {
                *input = parse_arguments(&raw);
            }
        }
        Response {
            id: self.id,
            model: self.model,
            content: self.content,
            stop_reason: self.stop_reason,
            stop_sequence: self.stop_sequence,
            usage: self.usage,
            created_ms,
        }
    }
}

/// Parses tool-call argument text: empty means `{}`, invalid JSON is kept as a string.
pub fn parse_arguments(raw: &str) -> serde_json::Value {
    if raw.trim().is_empty() {
        return serde_json::Value::Object(Default::default());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.to_owned()))
}
