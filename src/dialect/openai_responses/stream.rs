//! Streaming: [`StreamEncoder`] writes Responses SSE events toward clients, [`StreamDecoder`]
//! reads an upstream's Responses events into canonical [`StreamEvent`]s.

use serde_json::{Map, Value, json};

use crate::dialect::DecodeError;
use crate::dialect::openai_responses::REDACTED_PREFIX;
use crate::dialect::openai_responses::decode::{canonical_encrypted, output_parts, stop_reason};
use crate::dialect::openai_responses::encode::{
    ResponseHead, client_encrypted, created_secs, error_code, function_call_item, item_id, message_item,
    output_text_part, reasoning_item, response_object, status_of,
};
use crate::dialect::openai_responses::types::{InItem, WireUsageIn};
use crate::dialect::sse::{SseEvent, write_event};
use crate::model::{ErrorInfo, ErrorKind, Part, StopReason, StreamEvent, Usage};

// ---------------------------------------------------------------------------------------------
// Encoder
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct OpenText {
    output_index: usize,
    id: String,
    text: String,
}

#[derive(Debug)]
struct OpenReasoning {
    output_index: usize,
    id: String,
    text: String,
    /// A summary part was announced (`response.reasoning_summary_part.added`).
    part_open: bool,
}

#[derive(Debug)]
struct ToolItem {
    index: u32,
    output_index: usize,
    id: String,
    call_id: String,
    name: String,
    arguments: String,
    open: bool,
}

/// Turns canonical stream events into Responses SSE events (`response.created` ...
/// `response.completed`), each with its `type` as the SSE event name and a `sequence_number`.
///
/// Text and reasoning items are closed when another kind of output starts; function-call items
/// stay open until their `ToolCallEnd` (parallel calls may interleave: every event names its
/// item), and each closes with `response.output_item.done` carrying `call_id`, `name` and the
/// complete `arguments` string. [`StreamEncoder::finish`] closes what is open and writes
/// `response.completed` (or `response.incomplete` after a token limit) with the whole output and
/// usage. An error event becomes `error` then `response.failed`, after which nothing is written.
#[derive(Debug)]
pub struct StreamEncoder {
    id: String,
    model: String,
    created_at: i64,
    seq: u64,
    started: bool,
    finished: bool,
    counts: [usize; 3],
    /// Finished items by output index (`Null` while an item is open).
    output: Vec<Value>,
    text: Option<OpenText>,
    reasoning: Option<OpenReasoning>,
    tools: Vec<ToolItem>,
    usage: Option<Usage>,
    stop: Option<StopReason>,
}

impl StreamEncoder {
    /// `id` is the response id the client sees (and may send back as `previous_response_id`).
    pub fn new(id: &str, model: &str, created_ms: i64) -> StreamEncoder {
        StreamEncoder {
            id: id.to_owned(),
            model: model.to_owned(),
            created_at: created_secs(created_ms),
            seq: 0,
            started: false,
            finished: false,
            counts: [0; 3],
            output: Vec::new(),
            text: None,
            reasoning: None,
            tools: Vec::new(),
            usage: None,
            stop: None,
        }
    }

    fn emit(&mut self, out: &mut String, ty: &str, fields: Value) {
        let mut obj = Map::new();
        obj.insert("type".into(), json!(ty));
        if let Value::Object(fields) = fields {
            obj.extend(fields);
        }
        obj.insert("sequence_number".into(), json!(self.seq));
        self.seq += 1;
        write_event(out, Some(ty), &Value::Object(obj).to_string());
    }

    fn next_id(&mut self, prefix: &'static str) -> String {
        let slot = match prefix {
            "msg" => 0,
            "rs" => 1,
            _ => 2,
        };
        let n = self.counts[slot];
        self.counts[slot] += 1;
        item_id(&self.id, prefix, n)
    }

    fn head<'a>(
        &'a self,
        status: &'a str,
        incomplete: Option<&'a str>,
        error: Option<&'a ErrorInfo>,
    ) -> ResponseHead<'a> {
        ResponseHead {
            id: &self.id,
            model: &self.model,
            created_at: self.created_at,
            status,
            incomplete,
            error,
            usage: self.usage.as_ref(),
        }
    }

    fn ensure_started(&mut self, out: &mut String) {
        if self.started {
            return;
        }
        self.started = true;
        let response = response_object(&self.head("in_progress", None, None), Vec::new());
        self.emit(out, "response.created", json!({"response": response}));
        let response = response_object(&self.head("in_progress", None, None), Vec::new());
        self.emit(out, "response.in_progress", json!({"response": response}));
    }

    /// Reserves the next output index and announces `item` there.
    fn add_item(&mut self, out: &mut String, item: Value) -> usize {
        let output_index = self.output.len();
        self.output.push(Value::Null);
        self.emit(out, "response.output_item.added", json!({"output_index": output_index, "item": item}));
        output_index
    }

    fn done_item(&mut self, out: &mut String, output_index: usize, item: Value) {
        if let Some(slot) = self.output.get_mut(output_index) {
            *slot = item.clone();
        }
        self.emit(out, "response.output_item.done", json!({"output_index": output_index, "item": item}));
    }

    fn close_text(&mut self, out: &mut String) {
        let Some(open) = self.text.take() else { return };
        let base = json!({"item_id": open.id, "output_index": open.output_index, "content_index": 0});
        let mut fields = base.clone();
        fields["text"] = json!(open.text);
        fields["logprobs"] = json!([]);
        self.emit(out, "response.output_text.done", fields);
        let mut fields = base;
        fields["part"] = output_text_part(&open.text);
        self.emit(out, "response.content_part.done", fields);
        self.done_item(out, open.output_index, message_item(&open.id, "completed", Some(&open.text)));
    }

    fn close_reasoning(&mut self, out: &mut String, encrypted: Option<&str>) {
        let Some(open) = self.reasoning.take() else { return };
        if open.part_open {
            let base = json!({"item_id": open.id, "output_index": open.output_index, "summary_index": 0});
            let mut fields = base.clone();
            fields["text"] = json!(open.text);
            self.emit(out, "response.reasoning_summary_text.done", fields);
            let mut fields = base;
            fields["part"] = json!({"type": "summary_text", "text": open.text});
            self.emit(out, "response.reasoning_summary_part.done", fields);
        }
        self.done_item(out, open.output_index, reasoning_item(&open.id, &open.text, encrypted));
    }

    fn open_reasoning(&mut self, out: &mut String) {
        if self.reasoning.is_some() {
            return;
        }
        self.close_text(out);
        let id = self.next_id("rs");
        let output_index = self.add_item(out, reasoning_item(&id, "", None));
        self.reasoning = Some(OpenReasoning { output_index, id, text: String::new(), part_open: false });
    }

    fn close_tool(&mut self, out: &mut String, pos: usize) {
        let Some(tool) = self.tools.get_mut(pos).filter(|t| t.open) else { return };
        tool.open = false;
        let (output_index, id, call_id, name, arguments) =
            (tool.output_index, tool.id.clone(), tool.call_id.clone(), tool.name.clone(), tool.arguments.clone());
        self.emit(
            out,
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": output_index, "name": name, "arguments": arguments}),
        );
        self.done_item(out, output_index, function_call_item(&id, "completed", &call_id, &name, &arguments));
    }

    /// Appends the SSE events for `event` to `out` (possibly none).
    pub fn encode(&mut self, event: &StreamEvent, out: &mut String) {
        if self.finished {
            return;
        }
        match event {
            StreamEvent::MessageStart { .. } => self.ensure_started(out),
            StreamEvent::TextDelta { text } => {
                if text.is_empty() {
                    return;
                }
                self.ensure_started(out);
                self.close_reasoning(out, None);
                if self.text.is_none() {
                    let id = self.next_id("msg");
                    let output_index = self.add_item(out, message_item(&id, "in_progress", None));
                    self.emit(
                        out,
                        "response.content_part.added",
                        json!({"item_id": id, "output_index": output_index, "content_index": 0, "part": output_text_part("")}),
                    );
                    self.text = Some(OpenText { output_index, id, text: String::new() });
                }
                let Some(open) = self.text.as_mut() else { return };
                open.text.push_str(text);
                let fields = json!({"item_id": open.id, "output_index": open.output_index, "content_index": 0, "delta": text, "logprobs": []});
                self.emit(out, "response.output_text.delta", fields);
            }
            StreamEvent::ThinkingDelta { text } => {
                if text.is_empty() {
                    return;
                }
                self.ensure_started(out);
                self.open_reasoning(out);
                let Some(open) = self.reasoning.as_mut() else { return };
                let announce = !open.part_open;
                open.part_open = true;
                open.text.push_str(text);
                let (id, output_index) = (open.id.clone(), open.output_index);
                if announce {
                    self.emit(
                        out,
                        "response.reasoning_summary_part.added",
                        json!({"item_id": id, "output_index": output_index, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
                    );
                }
                self.emit(
                    out,
                    "response.reasoning_summary_text.delta",
                    json!({"item_id": id, "output_index": output_index, "summary_index": 0, "delta": text}),
                );
            }
            StreamEvent::ThinkingSignature { signature } => {
                self.ensure_started(out);
                self.open_reasoning(out);
                self.close_reasoning(out, Some(&client_encrypted(signature)));
            }
            StreamEvent::RedactedThinking { data } => {
                self.ensure_started(out);
                self.close_reasoning(out, None);
                self.open_reasoning(out);
                self.close_reasoning(out, Some(&format!("{REDACTED_PREFIX}{data}")));
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                if self.tools.iter().any(|t| t.index == *index) {
                    tracing::warn!(index, "responses: duplicate tool call start ignored");
                    return;
                }
                self.ensure_started(out);
                self.close_text(out);
                self.close_reasoning(out, None);
                let item_id = self.next_id("fc");
                let output_index = self.add_item(out, function_call_item(&item_id, "in_progress", id, name, ""));
                self.tools.push(ToolItem {
                    index: *index,
                    output_index,
                    id: item_id,
                    call_id: id.clone(),
                    name: name.clone(),
                    arguments: String::new(),
                    open: true,
                });
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                if arguments.is_empty() {
                    return;
                }
                let Some(tool) = self.tools.iter_mut().find(|t| t.index == *index && t.open) else {
                    tracing::warn!(index, "responses: arguments for an unknown or closed tool call dropped");
                    return;
                };
                tool.arguments.push_str(arguments);
                let fields = json!({"item_id": tool.id, "output_index": tool.output_index, "delta": arguments});
                self.emit(out, "response.function_call_arguments.delta", fields);
            }
            StreamEvent::ToolCallEnd { index } => {
                if let Some(pos) = self.tools.iter().position(|t| t.index == *index) {
                    self.close_tool(out, pos);
                }
            }
            StreamEvent::Usage { usage } => match &mut self.usage {
                Some(known) => known.merge_max(usage),
                None => self.usage = Some(*usage),
            },
            StreamEvent::Stop { reason, .. } => self.stop = Some(reason.clone()),
            StreamEvent::Error { error } => {
                self.ensure_started(out);
                self.finished = true;
                self.emit(
                    out,
                    "error",
                    json!({"code": error_code(error.kind), "message": error.message, "param": null}),
                );
                let output = self.output.iter().filter(|v| !v.is_null()).cloned().collect();
                let response = response_object(&self.head("failed", None, Some(error)), output);
                self.emit(out, "response.failed", json!({"response": response}));
            }
        }
    }

    /// Closes open items and writes `response.completed` (or `response.incomplete`) with the whole
    /// output and usage. Writes nothing after an error, or when called twice.
    pub fn finish(&mut self, out: &mut String) {
        if self.finished {
            return;
        }
        self.ensure_started(out);
        self.finished = true;
        self.close_text(out);
        self.close_reasoning(out, None);
        let mut open: Vec<(u32, usize)> =
            self.tools.iter().enumerate().filter(|(_, t)| t.open).map(|(pos, t)| (t.index, pos)).collect();
        open.sort_unstable();
        for (_, pos) in open {
            self.close_tool(out, pos);
        }
        if self.usage.is_none() {
            self.usage = Some(Usage::default());
        }
        let (status, incomplete) = status_of(self.stop.as_ref());
        let output = self.output.clone();
        let response = response_object(&self.head(status, incomplete, None), output);
        let ty = if status == "incomplete" { "response.incomplete" } else { "response.completed" };
        self.emit(out, ty, json!({"response": response}));
    }
}

// ---------------------------------------------------------------------------------------------
// Decoder
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
enum ItemKind {
    Message {
        streamed: bool,
    },
    Reasoning {
        streamed: bool,
        summary_index: Option<u64>,
    },
    Tool {
        index: u32,
        call_id: String,
        name: String,
        started: bool,
        /// Arguments received before the call could be started (no name yet).
        buffered: String,
        /// Any argument text was delivered (or buffered).
        got_arguments: bool,
        open: bool,
    },
    Other,
}

#[derive(Debug)]
struct ItemSlot {
    item_id: Option<String>,
    output_index: Option<u64>,
    kind: ItemKind,
}

/// Turns an upstream's Responses SSE events into canonical stream events.
///
/// Items are found by `item_id`, else by `output_index`. Function calls are numbered by order of
/// appearance and started once their name is known (from `output_item.added`, else from
/// `output_item.done`); arguments that arrive only in `function_call_arguments.done` or
/// `output_item.done` are delivered from there. Content that was never streamed as deltas
/// (servers that send only finished items, or only `response.completed`) is taken from the
/// finished items.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    done: bool,
    started: bool,
    errored: bool,
    items: Vec<ItemSlot>,
    next_tool: u32,
    saw_tool: bool,
}

fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// True once `response.completed`, `response.incomplete`, `response.failed` or `error` was
    /// seen.
    pub fn is_done(&self) -> bool {
        self.done
    }

    fn find(&self, data: &Value) -> Option<usize> {
        if let Some(id) = str_field(data, "item_id").or_else(|| data.get("item").and_then(|i| str_field(i, "id")))
            && let Some(pos) = self.items.iter().position(|s| s.item_id.as_deref() == Some(id))
        {
            return Some(pos);
        }
        let index = data.get("output_index").and_then(Value::as_u64)?;
        self.items.iter().position(|s| s.output_index == Some(index))
    }

    /// Decodes one SSE event. Data that is not JSON is an error; unknown events are skipped.
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
        if !value.is_object() {
            tracing::warn!("responses: stream event that is not an object skipped");
            return Ok(());
        }
        if self.done {
            tracing::warn!("responses: stream event after the end skipped");
            return Ok(());
        }
        let ty = str_field(&value, "type").or(event.event.as_deref()).unwrap_or("").to_owned();
        match ty.as_str() {
            "response.created" | "response.in_progress" | "response.queued" => {
                if !self.started
                    && let Some(resp) = value.get("response")
                {
                    self.started = true;
                    out.push(StreamEvent::MessageStart {
                        id: str_field(resp, "id").unwrap_or_default().to_owned(),
                        model: str_field(resp, "model").unwrap_or_default().to_owned(),
                    });
                }
            }
            "response.output_item.added" => self.item_added(&value, out),
            "response.output_item.done" => self.item_done(&value, out),
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(delta) = str_field(&value, "delta").filter(|d| !d.is_empty()) {
                    if let Some(ItemKind::Message { streamed }) = self.find(&value).map(|p| &mut self.items[p].kind) {
                        *streamed = true;
                    }
                    out.push(StreamEvent::TextDelta { text: delta.to_owned() });
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let Some(delta) = str_field(&value, "delta").filter(|d| !d.is_empty()) else { return Ok(()) };
                let summary_index = value.get("summary_index").and_then(Value::as_u64);
                if let Some(ItemKind::Reasoning { streamed, summary_index: last }) =
                    self.find(&value).map(|p| &mut self.items[p].kind)
                {
                    *streamed = true;
                    // A new summary part: keep the parts apart as the non-streamed form does.
                    if summary_index.is_some() && last.is_some() && summary_index != *last {
                        out.push(StreamEvent::ThinkingDelta { text: "\n\n".into() });
                    }
                    if summary_index.is_some() {
                        *last = summary_index;
                    }
                }
                out.push(StreamEvent::ThinkingDelta { text: delta.to_owned() });
            }
            "response.function_call_arguments.delta" => {
                let delta = str_field(&value, "delta").unwrap_or_default().to_owned();
                if let Some(pos) = self.find(&value) {
                    self.tool_arguments(pos, delta, out);
                } else {
                    tracing::warn!("responses: arguments for an unknown function call skipped");
                }
            }
            "response.function_call_arguments.done" => {
                if let Some(pos) = self.find(&value)
                    && let ItemKind::Tool { got_arguments: false, .. } = self.items[pos].kind
                {
                    let args = str_field(&value, "arguments").unwrap_or_default().to_owned();
                    self.tool_arguments(pos, args, out);
                }
            }
            "response.completed" | "response.incomplete" => {
                let resp = value.get("response").cloned().unwrap_or(Value::Null);
                self.complete(&resp, out);
            }
            "response.failed" => {
                self.done = true;
                if !self.errored {
                    self.errored = true;
                    let error = crate::dialect::error::from_value(&value, None).unwrap_or_else(|| ErrorInfo {
                        kind: ErrorKind::Upstream,
                        message: "the upstream response failed".into(),
                    });
                    out.push(StreamEvent::Error { error });
                }
            }
            "error" => {
                self.done = true;
                if !self.errored {
                    self.errored = true;
                    let error = crate::dialect::error::stream_error(data);
                    out.push(StreamEvent::Error { error });
                }
            }
            "response.content_part.added"
            | "response.content_part.done"
            | "response.output_text.done"
            | "response.output_text.annotation.added"
            | "response.refusal.done"
            | "response.reasoning_summary_part.added"
            | "response.reasoning_summary_part.done"
            | "response.reasoning_summary_text.done"
            | "response.reasoning_text.done" => {}
            other => tracing::warn!(event = other, "responses: unknown stream event skipped"),
        }
        Ok(())
    }

    fn item_added(&mut self, value: &Value, out: &mut Vec<StreamEvent>) {
        let Some(item) = value.get("item").filter(|i| i.is_object()) else {
            tracing::warn!("responses: output_item.added without an item skipped");
            return;
        };
        if self.find(value).is_some() {
            tracing::warn!("responses: repeated output_item.added skipped");
            return;
        }
        let kind = match str_field(item, "type").unwrap_or("") {
            "message" => ItemKind::Message { streamed: false },
            "reasoning" => ItemKind::Reasoning { streamed: false, summary_index: None },
            "function_call" => self.new_tool(item),
            other => {
                tracing::warn!(item_type = other, "responses: output item without a canonical counterpart skipped");
                ItemKind::Other
            }
        };
        self.items.push(ItemSlot {
            item_id: str_field(item, "id").map(str::to_owned),
            output_index: value.get("output_index").and_then(Value::as_u64),
            kind,
        });
        let pos = self.items.len() - 1;
        if matches!(self.items[pos].kind, ItemKind::Tool { .. }) {
            self.start_tool(pos, out);
            let args = arguments_of(item);
            if !args.is_empty() {
                self.tool_arguments(pos, args, out);
            }
        }
    }

    fn new_tool(&mut self, item: &Value) -> ItemKind {
        let index = self.next_tool;
        self.next_tool += 1;
        self.saw_tool = true;
        let call_id =
            str_field(item, "call_id").filter(|c| !c.is_empty()).map_or_else(|| format!("call_{index}"), str::to_owned);
        ItemKind::Tool {
            index,
            call_id,
            name: str_field(item, "name").unwrap_or_default().to_owned(),
            started: false,
            buffered: String::new(),
            got_arguments: false,
            open: true,
        }
    }

    /// Starts the call at `pos` once its name is known, with any buffered arguments.
    fn start_tool(&mut self, pos: usize, out: &mut Vec<StreamEvent>) {
        if let Some(ItemSlot { kind: ItemKind::Tool { index, call_id, name, started, buffered, .. }, .. }) =
            self.items.get_mut(pos)
            && !*started
            && !name.is_empty()
        {
            *started = true;
            out.push(StreamEvent::ToolCallStart { index: *index, id: call_id.clone(), name: name.clone() });
            if !buffered.is_empty() {
                out.push(StreamEvent::ToolCallDelta { index: *index, arguments: std::mem::take(buffered) });
            }
        }
    }

    fn tool_arguments(&mut self, pos: usize, args: String, out: &mut Vec<StreamEvent>) {
        let Some(ItemSlot { kind: ItemKind::Tool { index, started, buffered, got_arguments, open, .. }, .. }) =
            self.items.get_mut(pos)
        else {
            tracing::warn!("responses: arguments for an item that is not a function call skipped");
            return;
        };
        if args.is_empty() || !*open {
            return;
        }
        *got_arguments = true;
        if *started {
            out.push(StreamEvent::ToolCallDelta { index: *index, arguments: args });
        } else {
            buffered.push_str(&args);
        }
    }

    fn item_done(&mut self, value: &Value, out: &mut Vec<StreamEvent>) {
        let Some(item) = value.get("item").filter(|i| i.is_object()) else { return };
        let pos = match self.find(value) {
            Some(pos) => pos,
            None => {
                // A finished item that was never announced: take it whole.
                let mut added = value.clone();
                if let Value::Object(obj) = &mut added {
                    obj.insert("type".into(), json!("response.output_item.added"));
                }
                // Announce without arguments; they follow from the finished item below.
                if let Some(Value::Object(i)) = added.get_mut("item") {
                    i.remove("arguments");
                }
                self.item_added(&added, out);
                match self.find(value) {
                    Some(pos) => pos,
                    None => return,
                }
            }
        };
        match &mut self.items[pos].kind {
            ItemKind::Message { streamed } => {
                if !*streamed {
                    *streamed = true;
                    let text = item_text(item);
                    if !text.is_empty() {
                        out.push(StreamEvent::TextDelta { text });
                    }
                }
            }
            ItemKind::Reasoning { streamed, .. } => {
                let was_streamed = *streamed;
                *streamed = true;
                reasoning_events(item, !was_streamed, out);
            }
            ItemKind::Tool { name, .. } => {
                if name.is_empty()
                    && let Some(n) = str_field(item, "name")
                {
                    n.clone_into(name);
                }
                self.start_tool(pos, out);
                if let ItemKind::Tool { got_arguments: false, .. } = self.items[pos].kind {
                    self.tool_arguments(pos, arguments_of(item), out);
                }
                self.end_tool(pos, out);
            }
            ItemKind::Other => {}
        }
    }

    fn end_tool(&mut self, pos: usize, out: &mut Vec<StreamEvent>) {
        // A call that never got a name still ends up as a call, so its arguments are not lost.
        if let Some(ItemSlot { kind: ItemKind::Tool { index, name, started, buffered, open, .. }, .. }) =
            self.items.get_mut(pos)
            && *open
        {
            *open = false;
            if !*started {
                *started = true;
                out.push(StreamEvent::ToolCallStart { index: *index, id: format!("call_{index}"), name: name.clone() });
                if !buffered.is_empty() {
                    out.push(StreamEvent::ToolCallDelta { index: *index, arguments: std::mem::take(buffered) });
                }
            }
            out.push(StreamEvent::ToolCallEnd { index: *index });
        }
    }

    fn complete(&mut self, resp: &Value, out: &mut Vec<StreamEvent>) {
        self.done = true;
        if !self.started {
            self.started = true;
            out.push(StreamEvent::MessageStart {
                id: str_field(resp, "id").unwrap_or_default().to_owned(),
                model: str_field(resp, "model").unwrap_or_default().to_owned(),
            });
        }
        // Nothing was streamed item by item: take the output whole.
        if self.items.is_empty()
            && let Some(output) = resp.get("output").cloned()
        {
            match serde_json::from_value::<Vec<InItem>>(output)
                .map_err(|e| e.to_string())
                .and_then(|items| output_parts(items).map_err(|e| e.to_string()))
            {
                Ok(parts) => self.parts_events(parts, out),
                Err(err) => tracing::warn!(%err, "responses: unreadable output in the final response skipped"),
            }
        }
        self.finish(out);
        if let Some(usage) = resp.get("usage").filter(|u| !u.is_null()) {
            match serde_json::from_value::<WireUsageIn>(usage.clone()) {
                Ok(wire) => {
                    let usage = wire.to_usage();
                    if !usage.is_zero() {
                        out.push(StreamEvent::Usage { usage });
                    }
                }
                Err(err) => tracing::warn!(%err, "responses: unreadable usage skipped"),
            }
        }
        let reason = stop_reason(str_field(resp, "status"), resp.get("incomplete_details"), self.saw_tool);
        out.push(StreamEvent::Stop { reason, stop_sequence: None });
    }

    fn parts_events(&mut self, parts: Vec<Part>, out: &mut Vec<StreamEvent>) {
        for part in parts {
            match part {
                Part::Text { text, .. } if !text.is_empty() => out.push(StreamEvent::TextDelta { text }),
                Part::Thinking { text, signature } => {
                    if !text.is_empty() {
                        out.push(StreamEvent::ThinkingDelta { text });
                    }
                    if let Some(signature) = signature {
                        out.push(StreamEvent::ThinkingSignature { signature });
                    }
                }
                Part::RedactedThinking { data } => out.push(StreamEvent::RedactedThinking { data }),
                Part::ToolUse { id, name, input } => {
                    let index = self.next_tool;
                    self.next_tool += 1;
                    self.saw_tool = true;
                    out.push(StreamEvent::ToolCallStart { index, id, name });
                    let arguments = crate::dialect::openai_responses::encode::arguments_string(&input);
                    out.push(StreamEvent::ToolCallDelta { index, arguments });
                    out.push(StreamEvent::ToolCallEnd { index });
                }
                _ => {}
            }
        }
    }

    /// Ends function calls the upstream never finished (a cut-off stream).
    pub fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        let open: Vec<usize> = self
            .items
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s.kind, ItemKind::Tool { open: true, .. }))
            .map(|(pos, _)| pos)
            .collect();
        for pos in open {
            self.end_tool(pos, out);
        }
    }
}

/// A function call item's `arguments` as text (an object is tolerated).
fn arguments_of(item: &Value) -> String {
    match item.get("arguments") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => String::new(),
        Some(other) => other.to_string(),
    }
}

/// The text of a finished message item (`output_text` and `refusal` parts).
fn item_text(item: &Value) -> String {
    let Some(parts) = item.get("content").and_then(Value::as_array) else { return String::new() };
    parts.iter().filter_map(|p| str_field(p, "text").or_else(|| str_field(p, "refusal"))).collect()
}

/// Thinking events from a finished reasoning item: its text when it was not streamed, then its
/// envelope.
fn reasoning_events(item: &Value, with_text: bool, out: &mut Vec<StreamEvent>) {
    if with_text {
        let texts = |key: &str| -> Vec<String> {
            item.get(key)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|p| str_field(p, "text").map(str::to_owned)).collect())
                .unwrap_or_default()
        };
        let mut text = texts("summary").join("\n\n");
        if text.is_empty() {
            text = texts("content").join("\n\n");
        }
        if !text.is_empty() {
            out.push(StreamEvent::ThinkingDelta { text });
        }
    }
    if let Some(enc) = str_field(item, "encrypted_content").filter(|e| !e.is_empty()) {
        match enc.strip_prefix(REDACTED_PREFIX) {
            Some(data) => out.push(StreamEvent::RedactedThinking { data: data.to_owned() }),
            None => {
                out.push(StreamEvent::ThinkingSignature { signature: canonical_encrypted(str_field(item, "id"), enc) })
            }
        }
    }
}
