//! Streaming: [`EncoderState`] turns canonical stream events into Anthropic SSE events for clients,
//! [`DecoderState`] turns an Anthropic upstream's SSE events into canonical stream events.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::dialect::DecodeError;
use crate::dialect::anthropic::decode::stop_reason;
use crate::dialect::anthropic::encode::{effective_stop_reason, error_type};
use crate::dialect::anthropic::types::{
    ContentBlockDeltaEvent, ContentBlockStartEvent, ContentBlockStopEvent, MessageDeltaEvent, MessageStartEvent,
    StreamInputJson, StreamRedacted, StreamSignature, StreamText, StreamThinking, StreamToolUse, from_value,
};
use crate::dialect::from_json;
use crate::dialect::sse::{SseEvent, write_event};
use crate::model::{StopReason, StreamEvent, Usage};

// ---------------------------------------------------------------------------------------------
// Encoder
// ---------------------------------------------------------------------------------------------

/// An Anthropic SSE event as written to clients; the variant name is also the SSE event name.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutEvent<'a> {
    MessageStart { message: StartMessage<'a> },
    Ping,
    ContentBlockStart { index: u32, content_block: OutBlock<'a> },
    ContentBlockDelta { index: u32, delta: OutDelta<'a> },
    ContentBlockStop { index: u32 },
    MessageDelta { delta: StopDelta<'a>, usage: DeltaUsage },
    MessageStop,
    Error { error: ErrorBody<'a> },
}

impl OutEvent<'_> {
    fn name(&self) -> &'static str {
        match self {
            OutEvent::MessageStart { .. } => "message_start",
            OutEvent::Ping => "ping",
            OutEvent::ContentBlockStart { .. } => "content_block_start",
            OutEvent::ContentBlockDelta { .. } => "content_block_delta",
            OutEvent::ContentBlockStop { .. } => "content_block_stop",
            OutEvent::MessageDelta { .. } => "message_delta",
            OutEvent::MessageStop => "message_stop",
            OutEvent::Error { .. } => "error",
        }
    }
}

#[derive(Debug, Serialize)]
struct StartMessage<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: [(); 0],
    stop_reason: Option<&'a str>,
    stop_sequence: Option<&'a str>,
    usage: StartUsage,
}

#[derive(Debug, Serialize)]
struct StartUsage {
    input_tokens: u64,
    cache_creation_input_tokens: u64,
    cache_read_input_tokens: u64,
    output_tokens: u64,
}

/// Serialises as `{}`.
#[derive(Debug, Serialize)]
struct EmptyObject {}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutBlock<'a> {
    Text { text: &'a str },
    Thinking { thinking: &'a str, signature: &'a str },
    RedactedThinking { data: &'a str },
    ToolUse { id: &'a str, name: &'a str, input: EmptyObject },
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[expect(clippy::enum_variant_names, reason = "the names are Anthropic's delta types")]
enum OutDelta<'a> {
    TextDelta { text: &'a str },
    ThinkingDelta { thinking: &'a str },
    SignatureDelta { signature: &'a str },
    InputJsonDelta { partial_json: &'a str },
}

#[derive(Debug, Serialize)]
struct StopDelta<'a> {
    stop_reason: &'a str,
    stop_sequence: Option<&'a str>,
}

#[derive(Debug, Serialize)]
struct DeltaUsage {
    output_tokens: u64,
    input_tokens: u64,
    cache_creation_input_tokens: u64,
    cache_read_input_tokens: u64,
}

#[derive(Debug, Serialize)]
struct ErrorBody<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: &'a str,
}

fn emit(out: &mut String, event: &OutEvent<'_>) {
    // Serialising these plain structs cannot fail.
    let data = serde_json::to_string(event).unwrap_or_default();
    write_event(out, Some(event.name()), &data);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenKind {
    Text,
    Thinking,
    /// A tool-use block, by canonical tool index.
    Tool(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolState {
    /// Started upstream, but another tool's block is open: arguments are buffered.
    Pending,
    Open,
    Closed,
}

#[derive(Debug)]
struct ToolSlot {
    index: u32,
    id: String,
    name: String,
    state: ToolState,
    /// Arguments received while pending.
    buffered: String,
    /// `ToolCallEnd` arrived while pending.
    ended: bool,
}

/// State of [`crate::dialect::anthropic::StreamEncoder`].
///
/// One content block is open at a time. Tool calls whose fragments arrive while another tool's
/// block is open (interleaved parallel calls) are buffered and written out, in tool order, once
/// the open block closes.
#[derive(Debug)]
pub(crate) struct EncoderState {
    id: String,
    model: String,
    started: bool,
    saw_message_start: bool,
    finished: bool,
    usage: Usage,
    stop: Option<(StopReason, Option<String>)>,
    next_index: u32,
    open: Option<(u32, OpenKind)>,
    tools: Vec<ToolSlot>,
}

impl EncoderState {
    pub(crate) fn new(id: &str, model: &str) -> EncoderState {
        EncoderState {
            id: id.to_owned(),
            model: model.to_owned(),
            started: false,
            saw_message_start: false,
            finished: false,
            usage: Usage::default(),
            stop: None,
            next_index: 0,
            open: None,
            tools: Vec::new(),
        }
    }

    fn ensure_started(&mut self, out: &mut String) {
        if self.started {
            return;
        }
        self.started = true;
        let u = self.usage;
        emit(
            out,
            &OutEvent::MessageStart {
                message: StartMessage {
                    id: &self.id,
                    kind: "message",
                    role: "assistant",
                    model: &self.model,
                    content: [],
                    stop_reason: None,
                    stop_sequence: None,
                    usage: StartUsage {
                        input_tokens: u.input_tokens,
                        cache_creation_input_tokens: u.cache_write_tokens,
                        cache_read_input_tokens: u.cache_read_tokens,
                        output_tokens: u.output_tokens,
                    },
                },
            },
        );
        emit(out, &OutEvent::Ping);
    }

    fn open_block(&mut self, out: &mut String, kind: OpenKind, block: OutBlock<'_>) -> u32 {
        self.close_open(out);
        let index = self.next_index;
        self.next_index += 1;
        emit(out, &OutEvent::ContentBlockStart { index, content_block: block });
        self.open = Some((index, kind));
        index
    }

    fn close_open(&mut self, out: &mut String) {
        if let Some((index, kind)) = self.open.take() {
            emit(out, &OutEvent::ContentBlockStop { index });
            if let OpenKind::Tool(t) = kind
                && let Some(slot) = self.tools.iter_mut().find(|s| s.index == t)
            {
                slot.state = ToolState::Closed;
            }
        }
    }

    fn open_is_tool(&self) -> bool {
        matches!(self.open, Some((_, OpenKind::Tool(_))))
    }

    /// Opens the block of the pending tool with the lowest index and writes its buffered
    /// arguments. If that tool already ended it is closed and the next one follows.
    fn open_tool(&mut self, out: &mut String, pos: usize) {
        let (index, id, name, buffered, ended) = {
            let Some(slot) = self.tools.get_mut(pos) else { return };
            slot.state = ToolState::Open;
            (slot.index, slot.id.clone(), slot.name.clone(), std::mem::take(&mut slot.buffered), slot.ended)
        };
        let block = self.open_block(
            out,
            OpenKind::Tool(index),
            OutBlock::ToolUse { id: &id, name: &name, input: EmptyObject {} },
        );
        if !buffered.is_empty() {
            emit(
                out,
                &OutEvent::ContentBlockDelta {
                    index: block,
                    delta: OutDelta::InputJsonDelta { partial_json: &buffered },
                },
            );
        }
        if ended {
            self.close_open(out);
        }
    }

    /// While no tool block is open, opens pending tools in order (see [`Self::open_tool`]).
    fn activate(&mut self, out: &mut String) {
        while !self.open_is_tool() {
            let next = self
                .tools
                .iter()
                .enumerate()
                .filter(|(_, s)| s.state == ToolState::Pending)
                .min_by_key(|(_, s)| s.index)
                .map(|(pos, _)| pos);
            match next {
                Some(pos) => self.open_tool(out, pos),
                None => return,
            }
        }
    }

    fn delta(&mut self, out: &mut String, kind: OpenKind, delta: OutDelta<'_>) {
        self.ensure_started(out);
        let index = match self.open {
            Some((index, k)) if k == kind => index,
            _ => {
                let block = match kind {
                    OpenKind::Thinking => OutBlock::Thinking { thinking: "", signature: "" },
                    _ => OutBlock::Text { text: "" },
                };
                self.open_block(out, kind, block)
            }
        };
        emit(out, &OutEvent::ContentBlockDelta { index, delta });
    }

    pub(crate) fn encode(&mut self, event: &StreamEvent, out: &mut String) {
        if self.finished {
            return;
        }
        match event {
            StreamEvent::MessageStart { id, model } => {
                self.saw_message_start = true;
                if self.id.is_empty() {
                    self.id.clone_from(id);
                }
                if self.model.is_empty() {
                    self.model.clone_from(model);
                }
            }
            StreamEvent::TextDelta { text } => {
                if !text.is_empty() {
                    self.delta(out, OpenKind::Text, OutDelta::TextDelta { text });
                }
            }
            StreamEvent::ThinkingDelta { text } => {
                if !text.is_empty() {
                    self.delta(out, OpenKind::Thinking, OutDelta::ThinkingDelta { thinking: text });
                }
            }
            StreamEvent::ThinkingSignature { signature } => {
                self.delta(out, OpenKind::Thinking, OutDelta::SignatureDelta { signature });
                self.close_open(out);
            }
            StreamEvent::RedactedThinking { data } => {
                self.ensure_started(out);
                self.open_block(out, OpenKind::Thinking, OutBlock::RedactedThinking { data });
                self.close_open(out);
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                if self.tools.iter().any(|s| s.index == *index) {
                    tracing::warn!(index, "anthropic: duplicate tool call start ignored");
                    return;
                }
                self.ensure_started(out);
                self.tools.push(ToolSlot {
                    index: *index,
                    id: id.clone(),
                    name: name.clone(),
                    state: ToolState::Pending,
                    buffered: String::new(),
                    ended: false,
                });
                self.activate(out);
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                if arguments.is_empty() {
                    return;
                }
                let Some(pos) = self.tools.iter().position(|s| s.index == *index) else {
                    tracing::warn!(index, "anthropic: arguments for an unknown tool call dropped");
                    return;
                };
                match self.tools[pos].state {
                    ToolState::Open => {
                        if let Some((block, _)) = self.open {
                            emit(
                                out,
                                &OutEvent::ContentBlockDelta {
                                    index: block,
                                    delta: OutDelta::InputJsonDelta { partial_json: arguments },
                                },
                            );
                        }
                    }
                    ToolState::Pending => {
                        self.tools[pos].buffered.push_str(arguments);
                        self.activate(out);
                    }
                    ToolState::Closed => {
                        tracing::warn!(index, "anthropic: arguments for an already closed tool call dropped");
                    }
                }
            }
            StreamEvent::ToolCallEnd { index } => {
                let Some(pos) = self.tools.iter().position(|s| s.index == *index) else { return };
                match self.tools[pos].state {
                    ToolState::Open => {
                        self.close_open(out);
                        self.activate(out);
                    }
                    ToolState::Pending => {
                        self.tools[pos].ended = true;
                        self.activate(out);
                    }
                    ToolState::Closed => {}
                }
            }
            StreamEvent::Usage { usage } => self.usage.merge_max(usage),
            StreamEvent::Stop { reason, stop_sequence } => self.stop = Some((reason.clone(), stop_sequence.clone())),
            StreamEvent::Error { error } => {
                if self.saw_message_start {
                    self.ensure_started(out);
                }
                emit(
                    out,
                    &OutEvent::Error { error: ErrorBody { kind: error_type(error.kind), message: &error.message } },
                );
                self.finished = true;
            }
        }
    }

    pub(crate) fn finish(&mut self, out: &mut String) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.ensure_started(out);
        self.close_open(out);
        // Tools still waiting for their turn: everything they got, in order.
        for slot in &mut self.tools {
            if slot.state == ToolState::Pending {
                slot.ended = true;
            }
        }
        self.activate(out);
        self.close_open(out);

        let used_tools = !self.tools.is_empty();
        let reason = effective_stop_reason(self.stop.as_ref().map(|(r, _)| r), used_tools);
        let stop_sequence = self.stop.as_ref().and_then(|(_, s)| s.as_deref());
        let u = self.usage;
        emit(
            out,
            &OutEvent::MessageDelta {
                delta: StopDelta { stop_reason: &reason, stop_sequence },
                usage: DeltaUsage {
                    output_tokens: u.output_tokens,
                    input_tokens: u.input_tokens,
                    cache_creation_input_tokens: u.cache_write_tokens,
                    cache_read_input_tokens: u.cache_read_tokens,
                },
            },
        );
        emit(out, &OutEvent::MessageStop);
    }
}

// ---------------------------------------------------------------------------------------------
// Decoder
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UpstreamBlock {
    Text,
    Thinking,
    RedactedThinking,
    /// A client tool call, by canonical ordinal; `open` until its `content_block_stop`.
    Tool {
        ordinal: u32,
        open: bool,
    },
    /// Server tools and their results, and unknown block types: deltas and stop ignored.
    Skipped,
}

/// State of [`crate::dialect::anthropic::StreamDecoder`].
#[derive(Debug, Default)]
pub(crate) struct DecoderState {
    done: bool,
    /// Upstream block index → what that block is.
    blocks: BTreeMap<u64, UpstreamBlock>,
    next_tool: u32,
    /// The types of the blocks skipped so far (server tools and their results, unknown blocks),
    /// each once, in the order first seen.
    skipped: Vec<String>,
}

impl DecoderState {
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    pub(crate) fn skipped(&self) -> &[String] {
        &self.skipped
    }

    pub(crate) fn decode(&mut self, event: &SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), DecodeError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        let value: Value = from_json(data.as_bytes())?;
        let ty = value.get("type").and_then(Value::as_str).or(event.event.as_deref()).unwrap_or("");
        match ty {
            "message_start" => {
                let ev: MessageStartEvent = from_value(&value, "")?;
                out.push(StreamEvent::MessageStart { id: ev.message.id, model: ev.message.model });
                if let Some(usage) = ev.message.usage {
                    out.push(StreamEvent::Usage { usage: usage.to_model() });
                }
            }
            "content_block_start" => {
                let ev: ContentBlockStartEvent = from_value(&value, "")?;
                self.block_start(ev, out)?;
            }
            "content_block_delta" => {
                let ev: ContentBlockDeltaEvent = from_value(&value, "")?;
                self.block_delta(ev, out)?;
            }
            "content_block_stop" => {
                let ev: ContentBlockStopEvent = from_value(&value, "")?;
                if let Some(UpstreamBlock::Tool { ordinal, open }) = self.blocks.get_mut(&ev.index)
                    && *open
                {
                    *open = false;
                    out.push(StreamEvent::ToolCallEnd { index: *ordinal });
                }
            }
            "message_delta" => {
                let ev: MessageDeltaEvent = from_value(&value, "")?;
                if let Some(reason) = ev.delta.as_ref().and_then(|d| d.stop_reason.as_deref()) {
                    out.push(StreamEvent::Stop {
                        reason: stop_reason(reason),
                        stop_sequence: ev.delta.as_ref().and_then(|d| d.stop_sequence.clone()),
                    });
                }
                if let Some(usage) = ev.usage {
                    out.push(StreamEvent::Usage { usage: usage.to_model() });
                }
            }
            "message_stop" => self.done = true,
            "ping" => {}
            "error" => {
                let error = crate::dialect::error::stream_error(data);
                out.push(StreamEvent::Error { error });
            }
            other => tracing::warn!(event = other, "anthropic: unknown stream event skipped"),
        }
        Ok(())
    }

    fn block_start(&mut self, ev: ContentBlockStartEvent, out: &mut Vec<StreamEvent>) -> Result<(), DecodeError> {
        let path = "content_block";
        let ty = ev.content_block.get("type").and_then(Value::as_str).unwrap_or("");
        let block = match ty {
            "text" => {
                let b: StreamText = from_value(&ev.content_block, path)?;
                if !b.text.is_empty() {
                    out.push(StreamEvent::TextDelta { text: b.text });
                }
                UpstreamBlock::Text
            }
            "thinking" => {
                let b: StreamThinking = from_value(&ev.content_block, path)?;
                if !b.thinking.is_empty() {
                    out.push(StreamEvent::ThinkingDelta { text: b.thinking });
                }
                UpstreamBlock::Thinking
            }
            "redacted_thinking" => {
                let b: StreamRedacted = from_value(&ev.content_block, path)?;
                out.push(StreamEvent::RedactedThinking { data: b.data });
                UpstreamBlock::RedactedThinking
            }
            "tool_use" => {
                let b: StreamToolUse = from_value(&ev.content_block, path)?;
                let ordinal = self.next_tool;
                self.next_tool += 1;
                out.push(StreamEvent::ToolCallStart { index: ordinal, id: b.id, name: b.name });
                // Anthropic starts with `{}` and streams the input; some compatible servers send it whole.
                if let Value::Object(obj) = &b.input
                    && !obj.is_empty()
                {
                    out.push(StreamEvent::ToolCallDelta { index: ordinal, arguments: b.input.to_string() });
                }
                UpstreamBlock::Tool { ordinal, open: true }
            }
            other => {
                tracing::warn!(block_type = other, index = ev.index, "anthropic: unsupported stream block skipped");
                if !self.skipped.iter().any(|s| s == other) {
                    self.skipped.push(other.to_owned());
                }
                UpstreamBlock::Skipped
            }
        };
        self.blocks.insert(ev.index, block);
        Ok(())
    }

    fn block_delta(&mut self, ev: ContentBlockDeltaEvent, out: &mut Vec<StreamEvent>) -> Result<(), DecodeError> {
        let block = self.blocks.get(&ev.index).copied();
        if block == Some(UpstreamBlock::Skipped) {
            return Ok(());
        }
        let path = "delta";
        let ty = ev.delta.get("type").and_then(Value::as_str).unwrap_or("");
        match ty {
            "text_delta" => {
                let d: StreamText = from_value(&ev.delta, path)?;
                if !d.text.is_empty() {
                    out.push(StreamEvent::TextDelta { text: d.text });
                }
            }
            "thinking_delta" => {
                let d: StreamThinking = from_value(&ev.delta, path)?;
                if !d.thinking.is_empty() {
                    out.push(StreamEvent::ThinkingDelta { text: d.thinking });
                }
            }
            "signature_delta" => {
                let d: StreamSignature = from_value(&ev.delta, path)?;
                out.push(StreamEvent::ThinkingSignature { signature: d.signature });
            }
            "input_json_delta" => {
                let d: StreamInputJson = from_value(&ev.delta, path)?;
                match block {
                    Some(UpstreamBlock::Tool { ordinal, open: true }) => {
                        if !d.partial_json.is_empty() {
                            out.push(StreamEvent::ToolCallDelta { index: ordinal, arguments: d.partial_json });
                        }
                    }
                    _ => {
                        tracing::warn!(index = ev.index, "anthropic: input_json_delta outside a tool_use block skipped")
                    }
                }
            }
            "citations_delta" => {}
            other => tracing::warn!(delta_type = other, "anthropic: unknown content delta skipped"),
        }
        Ok(())
    }

    pub(crate) fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        let mut open: Vec<u32> = self
            .blocks
            .values_mut()
            .filter_map(|b| match b {
                UpstreamBlock::Tool { ordinal, open } if *open => {
                    *open = false;
                    Some(*ordinal)
                }
                _ => None,
            })
            .collect();
        open.sort_unstable();
        out.extend(open.into_iter().map(|index| StreamEvent::ToolCallEnd { index }));
    }
}
