//! Streaming: [`StreamEncoder`] writes `chat.completion.chunk` SSE toward clients,
//! [`StreamDecoder`] reads upstream chunks into canonical [`StreamEvent`]s.

use serde_json::Value;

use crate::dialect::DecodeError;
use crate::dialect::openai_chat::StreamOptions;
use crate::dialect::openai_chat::decode::stop_reason;
use crate::dialect::openai_chat::encode::{created_secs, encode_error, finish_reason};
use crate::dialect::openai_chat::types::{
    Chunk, ChunkChoice, Delta, DeltaFunction, DeltaToolCall, WireUsageIn, WireUsageOut,
};
use crate::dialect::sse::{SseEvent, write_event};
use crate::model::{StreamEvent, Usage};

// ---------------------------------------------------------------------------------------------
// Encoder
// ---------------------------------------------------------------------------------------------

/// Turns canonical stream events into `chat.completion.chunk` SSE text.
///
/// The first chunk carries `delta.role`; it is written on `MessageStart`, or before the first
/// chunk with content when `MessageStart` never came. After an `Error` event only
/// [`StreamEncoder::finish`]'s `data: [DONE]` follows.
#[derive(Debug)]
pub struct StreamEncoder {
    id: String,
    model: String,
    created: i64,
    opts: StreamOptions,
    started: bool,
    saw_tool_call: bool,
    usage: Option<Usage>,
    errored: bool,
    finished: bool,
}

impl StreamEncoder {
    pub fn new(id: &str, model: &str, created_ms: i64, opts: StreamOptions) -> StreamEncoder {
        StreamEncoder {
            id: id.to_owned(),
            model: model.to_owned(),
            created: created_secs(created_ms),
            opts,
            started: false,
            saw_tool_call: false,
            usage: None,
            errored: false,
            finished: false,
        }
    }

    /// Appends the SSE text for `event` to `out` (possibly nothing).
    pub fn encode(&mut self, event: &StreamEvent, out: &mut String) {
        if self.errored || self.finished {
            return;
        }
        match event {
            StreamEvent::MessageStart { .. } => self.ensure_started(out),
            StreamEvent::TextDelta { text } if !text.is_empty() => {
                self.ensure_started(out);
                self.write_delta(out, Delta { content: Some(text), ..Delta::default() }, None);
            }
            StreamEvent::ThinkingDelta { text } if !text.is_empty() => {
                self.ensure_started(out);
                self.write_delta(out, Delta { reasoning_content: Some(text), ..Delta::default() }, None);
            }
            StreamEvent::TextDelta { .. }
            | StreamEvent::ThinkingDelta { .. }
            | StreamEvent::ThinkingSignature { .. }
            | StreamEvent::RedactedThinking { .. }
            | StreamEvent::ToolCallEnd { .. } => {}
            StreamEvent::ToolCallStart { index, id, name } => {
                self.ensure_started(out);
                self.saw_tool_call = true;
                let call = DeltaToolCall {
                    index: *index,
                    id: Some(id),
                    kind: Some("function"),
                    function: DeltaFunction { name: Some(name), arguments: "" },
                };
                self.write_delta(out, Delta { tool_calls: Some(vec![call]), ..Delta::default() }, None);
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                if arguments.is_empty() {
                    return;
                }
                self.ensure_started(out);
                let call = DeltaToolCall {
                    index: *index,
                    id: None,
                    kind: None,
                    function: DeltaFunction { name: None, arguments },
                };
                self.write_delta(out, Delta { tool_calls: Some(vec![call]), ..Delta::default() }, None);
            }
            StreamEvent::Usage { usage } => match &mut self.usage {
                Some(known) => known.merge_max(usage),
                None => self.usage = Some(*usage),
            },
            StreamEvent::Stop { reason, .. } => {
                self.ensure_started(out);
                let finish = finish_reason(Some(reason), self.saw_tool_call);
                self.write_delta(out, Delta::default(), Some(&finish));
            }
            StreamEvent::Error { error } => {
                self.errored = true;
                write_event(out, None, &encode_error(error).to_string());
            }
        }
    }

    /// Appends whatever ends the stream: the usage chunk when the client asked for it (and no
    /// error ended the stream), then `data: [DONE]`. Calling it again writes nothing.
    pub fn finish(&mut self, out: &mut String) {
        if self.finished {
            return;
        }
        self.finished = true;
        if self.opts.include_usage && !self.errored {
            let usage = self.usage.unwrap_or_default();
            let chunk = Chunk {
                id: &self.id,
                object: "chat.completion.chunk",
                created: self.created,
                model: &self.model,
                choices: Vec::new(),
                usage: Some(WireUsageOut::from_usage(&usage)),
            };
            write_chunk(out, &chunk);
        }
        write_event(out, None, "[DONE]");
    }

    fn ensure_started(&mut self, out: &mut String) {
        if !self.started {
            self.started = true;
            self.write_delta(out, Delta { role: Some("assistant"), content: Some(""), ..Delta::default() }, None);
        }
    }

    fn write_delta(&self, out: &mut String, delta: Delta<'_>, finish: Option<&str>) {
        let chunk = Chunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            choices: vec![ChunkChoice { index: 0, delta, logprobs: (), finish_reason: finish }],
            usage: None,
        };
        write_chunk(out, &chunk);
    }
}

fn write_chunk(out: &mut String, chunk: &Chunk<'_>) {
    match serde_json::to_string(chunk) {
        Ok(json) => write_event(out, None, &json),
        // Serialising these plain structs cannot fail; never panic on the wire path anyway.
        Err(err) => tracing::warn!(%err, "could not serialise a chat.completion.chunk"),
    }
}

// ---------------------------------------------------------------------------------------------
// Decoder
// ---------------------------------------------------------------------------------------------

/// One streamed tool call, as the upstream numbers it and as the canonical stream does.
#[derive(Debug)]
struct ToolSlot {
    /// The upstream `index`, if it sent one.
    upstream_index: Option<u64>,
    /// The id the upstream gave it (`None` when it sent none and one was made up).
    upstream_id: Option<String>,
    /// The canonical index: order of first appearance.
    index: u32,
    open: bool,
}

/// Turns upstream `chat.completion.chunk` events into canonical stream events.
///
/// Tool calls are renumbered by order of first appearance. A call is new when its upstream
/// `index` was not seen before, or when it repeats the index of the current call with a different
/// non-empty `id` (vendors that put every call at index 0).
#[derive(Debug, Default)]
pub struct StreamDecoder {
    done: bool,
    started: bool,
    stopped: bool,
    tools: Vec<ToolSlot>,
}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// Decodes one upstream event (a chunk may map to none or several events). An `error` object
    /// in the stream becomes [`StreamEvent::Error`]. Returns an error only for data that is
    /// not JSON.
    pub fn decode(&mut self, event: &SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), DecodeError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let value: Value = serde_json::from_str(data).map_err(|err| DecodeError::Syntax {
            line: err.line(),
            column: err.column(),
            message: err.to_string(),
        })?;
        if self.done {
            tracing::warn!("chat completion chunk after [DONE] skipped");
            return Ok(());
        }
        let Some(obj) = value.as_object() else {
            tracing::warn!("chat completion chunk that is not an object skipped");
            return Ok(());
        };

        // `event: error` (some proxies) may carry just `{"message": ...}`.
        if obj.get("error").is_some_and(|e| !e.is_null()) || event.event.as_deref() == Some("error") {
            let error = crate::dialect::error::stream_error(data);
            out.push(StreamEvent::Error { error });
            return Ok(());
        }

        if !self.started
            && let Some(id) = obj.get("id").and_then(Value::as_str)
        {
            self.started = true;
            let model = obj.get("model").and_then(Value::as_str).unwrap_or_default();
            out.push(StreamEvent::MessageStart { id: id.to_owned(), model: model.to_owned() });
        }

        match obj.get("choices") {
            Some(Value::Array(choices)) => {
                for choice in choices {
                    let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
                    if index != 0 {
                        tracing::warn!(index, "chat completion choice other than 0 skipped");
                        continue;
                    }
                    self.decode_choice(choice, out);
                }
            }
            None | Some(Value::Null) => {}
            Some(_) => tracing::warn!("chat completion chunk with non-array `choices` skipped"),
        }

        if let Some(usage) = obj.get("usage").filter(|u| !u.is_null()) {
            match serde_json::from_value::<WireUsageIn>(usage.clone()) {
                Ok(wire) => {
                    let usage = wire.to_usage();
                    if !usage.is_zero() {
                        out.push(StreamEvent::Usage { usage });
                    }
                }
                Err(err) => tracing::warn!(%err, "unreadable usage in chat completion chunk skipped"),
            }
        }
        Ok(())
    }

    /// True once `data: [DONE]` was seen.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Closes whatever is still open when the upstream stream ends.
    pub fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        self.close_tools(out);
    }

    fn close_tools(&mut self, out: &mut Vec<StreamEvent>) {
        for slot in self.tools.iter_mut().filter(|t| t.open) {
            slot.open = false;
            out.push(StreamEvent::ToolCallEnd { index: slot.index });
        }
    }

    fn decode_choice(&mut self, choice: &Value, out: &mut Vec<StreamEvent>) {
        if let Some(delta) = choice.get("delta").filter(|d| d.is_object()) {
            let reasoning = [delta.get("reasoning_content"), delta.get("reasoning")]
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .find(|s| !s.is_empty());
            if let Some(text) = reasoning {
                out.push(StreamEvent::ThinkingDelta { text: text.to_owned() });
            }
            if let Some(text) = delta.get("content").and_then(Value::as_str).filter(|s| !s.is_empty()) {
                out.push(StreamEvent::TextDelta { text: text.to_owned() });
            }
            match delta.get("tool_calls") {
                Some(Value::Array(calls)) => {
                    for call in calls {
                        self.decode_tool_call(call, out);
                    }
                }
                None | Some(Value::Null) => {}
                Some(_) => tracing::warn!("chat completion delta with non-array `tool_calls` skipped"),
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            if self.stopped {
                tracing::warn!(reason, "repeated finish_reason skipped");
                return;
            }
            self.stopped = true;
            self.close_tools(out);
            out.push(StreamEvent::Stop { reason: stop_reason(reason), stop_sequence: None });
        }
    }

    fn decode_tool_call(&mut self, call: &Value, out: &mut Vec<StreamEvent>) {
        if !call.is_object() {
            tracing::warn!("chat completion tool call that is not an object skipped");
            return;
        }
        let upstream_index = call.get("index").and_then(Value::as_u64);
        let id = call.get("id").and_then(Value::as_str).filter(|s| !s.is_empty());
        let function = call.get("function");
        let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
        let arguments = match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(s)) => s.clone(),
            None | Some(Value::Null) => String::new(),
            // Some vendors send the arguments as an object in one go.
            Some(other) => other.to_string(),
        };

        // The call this fragment continues: the latest one at the same upstream index. Without
        // an index, the call with the same id, or else the latest call.
        let current = match (upstream_index, id) {
            (Some(_), _) => self.tools.iter().rposition(|t| t.upstream_index == upstream_index),
            (None, Some(id)) => self.tools.iter().rposition(|t| t.upstream_id.as_deref() == Some(id)),
            (None, None) => self.tools.len().checked_sub(1),
        };
        let is_new = match current {
            None => true,
            Some(pos) => id.is_some_and(|id| {
                self.tools.get(pos).is_some_and(|t| t.upstream_id.as_deref().is_some_and(|known| known != id))
            }),
        };

        if is_new && id.is_none() && name.is_none_or(str::is_empty) {
            // Nothing to continue and nothing that names a call: a stray fragment.
            tracing::warn!("chat completion tool-call fragment without a call to continue skipped");
            return;
        }
        let index = if is_new {
            if let Some(pos) = current {
                // A new call at an index that held another: that one is complete.
                if let Some(old) = self.tools.get_mut(pos).filter(|t| t.open) {
                    old.open = false;
                    out.push(StreamEvent::ToolCallEnd { index: old.index });
                }
            }
            let index = u32::try_from(self.tools.len()).unwrap_or(u32::MAX);
            let upstream_id = id.map(str::to_owned);
            let id = upstream_id.clone().unwrap_or_else(|| format!("call_{index}"));
            self.tools.push(ToolSlot { upstream_index, upstream_id, index, open: true });
            out.push(StreamEvent::ToolCallStart { index, id, name: name.unwrap_or_default().to_owned() });
            index
        } else {
            match current.and_then(|pos| self.tools.get(pos)) {
                Some(slot) => slot.index,
                None => return,
            }
        };
        if !arguments.is_empty() {
            out.push(StreamEvent::ToolCallDelta { index, arguments });
        }
    }
}
