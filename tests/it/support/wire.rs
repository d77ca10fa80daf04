//! A client-side reader of the three dialects, written by hand from the vendors' documented wire
//! formats and independent of the engine: it parses server-sent events into JSON and accumulates
//! them the way the official clients do, so a mistake mirrored in the engine's encoders and
//! decoders cannot pass. Never call `keyhaven::dialect` from here (tests/it/layering.rs checks).
//!
//! What it reads, per dialect:
//! - OpenAI Chat Completions: a `chat.completion` body (`choices[0].message` with `content`,
//!   DeepSeek-style `reasoning_content`, `tool_calls[{id, function{name, arguments}}]`,
//!   `finish_reason`, `usage`), or `chat.completion.chunk` events whose `choices[0].delta` carries
//!   `content` / `reasoning_content` fragments and `tool_calls` fragments keyed by `index` (the
//!   first fragment of a call has its `id` and `function.name`, later ones `function.arguments`
//!   pieces), a final chunk with `usage` and `choices: []`, `data: [DONE]`; an error mid-stream is a
//!   chunk `{"error": {"message", …}}`.
//! - Anthropic Messages: a `message` body (`content` blocks `text`, `thinking` with `signature`,
//!   `tool_use` with `input`; `stop_reason`; `usage`), or `message_start` (usage so far),
//!   `content_block_start` / `content_block_delta` (`text_delta`, `thinking_delta`,
//!   `signature_delta`, `input_json_delta` with `partial_json`) / `content_block_stop` by `index`,
//!   `message_delta` (`delta.stop_reason`, cumulative `usage`), `message_stop`, `ping` and `error`
//!   (`{"type": "error", "error": {"type", "message"}}`).
//! - OpenAI Responses: a `response` body (`status`, `output` items `message` with `output_text`
//!   parts, `reasoning` with `summary` and `encrypted_content`, `function_call` with `call_id`,
//!   `name`, `arguments`; `usage`), or `response.*` events: `response.output_item.added` /
//!   `.done` by `output_index`, `response.output_text.delta`,
//!   `response.reasoning_summary_text.delta`, `response.function_call_arguments.delta`, the final
//!   `response.completed` / `response.incomplete` / `response.failed` with the whole response, and
//!   `error` (`{"type": "error", "message", …}`).

use serde_json::{Value, json};

use super::Client;

/// One piece of the answer as the client sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(String),
    /// Reasoning: Chat `reasoning_content`, an Anthropic `thinking` block (with its `signature`),
    /// a Responses `reasoning` item (summary text, `encrypted_content` as the signature).
    Thinking {
        text: String,
        signature: Option<String>,
    },
    /// A tool call with its arguments as the JSON text the client received.
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
}

/// How the answer ended, read from the dialect's own field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// Chat `stop`, Anthropic `end_turn`, a completed Responses answer without function calls.
    EndTurn,
    /// Chat `tool_calls`, Anthropic `tool_use`, a completed Responses answer with function calls.
    ToolUse,
    /// Anything else, as sent (e.g. `length`, `max_tokens`, `incomplete`).
    Other(String),
}

/// Everything a client accumulated from one answer.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    pub parts: Vec<Part>,
    pub finish: Option<Finish>,
    /// The dialect's usage object as sent (Anthropic: `message_start` usage merged with the
    /// cumulative `message_delta` usage).
    pub usage: Value,
    /// The message of an error the stream ended with.
    pub error: Option<String>,
    /// How many argument fragments of tool calls the stream carried.
    pub arg_fragments: usize,
}

impl Answer {
    /// All text parts, concatenated.
    pub fn text(&self) -> String {
        self.parts.iter().filter_map(|p| if let Part::Text(t) = p { Some(t.as_str()) } else { None }).collect()
    }

    /// The tool calls: id, name and the arguments parsed as JSON (they must be JSON).
    pub fn tool_calls(&self) -> Vec<(String, String, Value)> {
        self.parts
            .iter()
            .filter_map(|p| match p {
                Part::ToolCall { id, name, arguments } => {
                    let args = serde_json::from_str(arguments)
                        .unwrap_or_else(|e| panic!("tool call {id}: arguments are not JSON ({e}): {arguments}"));
                    Some((id.clone(), name.clone(), args))
                }
                _ => None,
            })
            .collect()
    }
}

/// Reads a whole answer: an SSE stream when `stream`, else the JSON body.
pub fn read(client: Client, raw: &str, stream: bool) -> Answer {
    if stream { read_stream(client, raw) } else { read_body(client, raw) }
}

/// One server-sent event: its `event:` name (if any) and its `data:` lines joined.
#[derive(Debug)]
pub struct Sse {
    pub event: Option<String>,
    pub data: String,
}

/// Parses a whole SSE body as the HTML spec's event-stream format says: fields per line, events
/// dispatched on a blank line, `:` comments ignored, one optional space after the colon.
pub fn sse(raw: &str) -> Vec<Sse> {
    let mut out = Vec::new();
    let (mut event, mut data, mut has_data) = (None, String::new(), false);
    for line in raw.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)) {
        if line.is_empty() {
            if has_data {
                out.push(Sse { event: event.take(), data: std::mem::take(&mut data) });
            }
            (event, has_data) = (None, false);
            data.clear();
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = Some(value.to_owned()),
            "data" => {
                if has_data {
                    data.push('\n');
                }
                data.push_str(value);
                has_data = true;
            }
            _ => {}
        }
    }
    if has_data {
        out.push(Sse { event, data });
    }
    out
}

fn json_of(ev: &Sse) -> Value {
    serde_json::from_str(&ev.data)
        .unwrap_or_else(|e| panic!("event {:?}: data is not JSON ({e}): {}", ev.event, ev.data))
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// Reads a non-streamed answer body.
pub fn read_body(client: Client, raw: &str) -> Answer {
    let body: Value = serde_json::from_str(raw).unwrap_or_else(|e| panic!("answer is not JSON ({e}): {raw}"));
    match client {
        Client::Openai => chat_body(&body),
        Client::Anthropic => anthropic_body(&body),
        Client::Responses => responses_body(&body),
    }
}

/// Reads a streamed answer.
pub fn read_stream(client: Client, raw: &str) -> Answer {
    let events = sse(raw);
    match client {
        Client::Openai => chat_stream(&events),
        Client::Anthropic => anthropic_stream(&events),
        Client::Responses => responses_stream(&events),
    }
}

fn chat_finish(reason: &Value) -> Option<Finish> {
    match reason.as_str()? {
        "stop" => Some(Finish::EndTurn),
        "tool_calls" => Some(Finish::ToolUse),
        other => Some(Finish::Other(other.to_owned())),
    }
}

fn chat_body(body: &Value) -> Answer {
    assert_eq!(body["object"], "chat.completion", "a chat.completion object: {body}");
    let choice = &body["choices"][0];
    let msg = &choice["message"];
    assert_eq!(msg["role"], "assistant", "{body}");
    let mut parts = Vec::new();
    if let Some(r) = msg["reasoning_content"].as_str().filter(|r| !r.is_empty()) {
        parts.push(Part::Thinking { text: r.to_owned(), signature: None });
    }
    if let Some(t) = msg["content"].as_str().filter(|t| !t.is_empty()) {
        parts.push(Part::Text(t.to_owned()));
    }
    for call in msg["tool_calls"].as_array().into_iter().flatten() {
        assert_eq!(call["type"], "function", "{call}");
        parts.push(Part::ToolCall {
            id: str_of(&call["id"]),
            name: str_of(&call["function"]["name"]),
            arguments: call["function"]["arguments"]
                .as_str()
                .unwrap_or_else(|| panic!("arguments string: {call}"))
                .to_owned(),
        });
    }
    Answer { parts, finish: chat_finish(&choice["finish_reason"]), usage: body["usage"].clone(), ..Answer::default() }
}

fn chat_stream(events: &[Sse]) -> Answer {
    let (mut reasoning, mut text) = (String::new(), String::new());
    // (index, id, name, arguments) in the order the calls first appeared.
    let mut calls: Vec<(u64, String, String, String)> = Vec::new();
    let mut answer = Answer::default();
    let mut done = false;
    for ev in events {
        assert!(!done, "nothing may follow data: [DONE]: {}", ev.data);
        if ev.data == "[DONE]" {
            done = true;
            continue;
        }
        let chunk = json_of(ev);
        if let Some(err) = chunk.get("error").filter(|e| !e.is_null()) {
            answer.error = Some(str_of(&err["message"]));
            continue;
        }
        assert_eq!(chunk["object"], "chat.completion.chunk", "{chunk}");
        if chunk.get("usage").is_some_and(|u| !u.is_null()) {
            answer.usage = chunk["usage"].clone();
        }
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            assert_eq!(choice["index"], 0, "one choice: {chunk}");
            let delta = &choice["delta"];
            reasoning += delta["reasoning_content"].as_str().unwrap_or_default();
            text += delta["content"].as_str().unwrap_or_default();
            for tc in delta["tool_calls"].as_array().into_iter().flatten() {
                let index = tc["index"].as_u64().unwrap_or_else(|| panic!("tool call fragment without index: {tc}"));
                let pos = match calls.iter().position(|c| c.0 == index) {
                    Some(p) => p,
                    None => {
                        calls.push((index, String::new(), String::new(), String::new()));
                        calls.len() - 1
                    }
                };
                let call = &mut calls[pos];
                if let Some(id) = tc["id"].as_str() {
                    call.1 = id.to_owned();
                }
                if let Some(name) = tc["function"]["name"].as_str() {
                    call.2 += name;
                }
                if let Some(args) = tc["function"]["arguments"].as_str().filter(|a| !a.is_empty()) {
                    call.3 += args;
                    answer.arg_fragments += 1;
                }
            }
            if let Some(f) = chat_finish(&choice["finish_reason"]) {
                answer.finish = Some(f);
            }
        }
    }
    assert!(done, "a Chat stream ends with data: [DONE]");
    if !reasoning.is_empty() {
        answer.parts.push(Part::Thinking { text: reasoning, signature: None });
    }
    if !text.is_empty() {
        answer.parts.push(Part::Text(text));
    }
    answer.parts.extend(calls.into_iter().map(|(_, id, name, arguments)| Part::ToolCall { id, name, arguments }));
    answer
}

fn anthropic_finish(reason: &Value) -> Option<Finish> {
    match reason.as_str()? {
        "end_turn" => Some(Finish::EndTurn),
        "tool_use" => Some(Finish::ToolUse),
        other => Some(Finish::Other(other.to_owned())),
    }
}

fn anthropic_block(block: &Value) -> Part {
    match block["type"].as_str() {
        Some("text") => Part::Text(str_of(&block["text"])),
        Some("thinking") => Part::Thinking {
            text: str_of(&block["thinking"]),
            signature: block["signature"].as_str().map(str::to_owned),
        },
        Some("tool_use") => Part::ToolCall {
            id: str_of(&block["id"]),
            name: str_of(&block["name"]),
            arguments: block["input"].to_string(),
        },
        _ => panic!("a content block this reader does not know: {block}"),
    }
}

fn anthropic_body(body: &Value) -> Answer {
    assert_eq!(body["type"], "message", "{body}");
    assert_eq!(body["role"], "assistant", "{body}");
    let parts =
        body["content"].as_array().unwrap_or_else(|| panic!("content: {body}")).iter().map(anthropic_block).collect();
    Answer { parts, finish: anthropic_finish(&body["stop_reason"]), usage: body["usage"].clone(), ..Answer::default() }
}

fn merge(into: &mut Value, from: &Value) {
    if let (Some(a), Some(b)) = (into.as_object_mut(), from.as_object()) {
        for (k, v) in b {
            a.insert(k.clone(), v.clone());
        }
    } else if !from.is_null() {
        *into = from.clone();
    }
}

fn anthropic_stream(events: &[Sse]) -> Answer {
    let mut answer = Answer::default();
    // Blocks by index: the start block, then its accumulated deltas (JSON input as text).
    let mut blocks: Vec<(u64, Value, String)> = Vec::new();
    let mut stopped = false;
    for ev in events {
        let data = json_of(ev);
        let kind = str_of(&data["type"]);
        assert_eq!(ev.event.as_deref(), Some(kind.as_str()), "the event name is the data's type: {}", ev.data);
        match kind.as_str() {
            "message_start" => merge(&mut answer.usage, &data["message"]["usage"]),
            "content_block_start" => {
                let index = data["index"].as_u64().unwrap_or_else(|| panic!("index: {data}"));
                assert!(blocks.iter().all(|b| b.0 != index), "block {index} started twice");
                blocks.push((index, data["content_block"].clone(), String::new()));
            }
            "content_block_delta" => {
                let index = data["index"].as_u64();
                let block = blocks
                    .iter_mut()
                    .find(|b| Some(b.0) == index)
                    .unwrap_or_else(|| panic!("delta for a block never started: {data}"));
                let delta = &data["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => {
                        let t = str_of(&block.1["text"]) + delta["text"].as_str().unwrap_or_default();
                        block.1["text"] = json!(t);
                    }
                    Some("thinking_delta") => {
                        let t = str_of(&block.1["thinking"]) + delta["thinking"].as_str().unwrap_or_default();
                        block.1["thinking"] = json!(t);
                    }
                    Some("signature_delta") => {
                        let s = str_of(&block.1["signature"]) + delta["signature"].as_str().unwrap_or_default();
                        block.1["signature"] = json!(s);
                    }
                    Some("input_json_delta") => {
                        block.2 += delta["partial_json"].as_str().unwrap_or_default();
                        answer.arg_fragments += 1;
                    }
                    _ => panic!("a delta this reader does not know: {data}"),
                }
            }
            "content_block_stop" => {}
            "message_delta" => {
                if let Some(f) = anthropic_finish(&data["delta"]["stop_reason"]) {
                    answer.finish = Some(f);
                }
                merge(&mut answer.usage, &data["usage"]);
            }
            "message_stop" => stopped = true,
            "ping" => {}
            "error" => answer.error = Some(str_of(&data["error"]["message"])),
            other => panic!("an event this reader does not know: {other}: {}", ev.data),
        }
    }
    assert!(stopped || answer.error.is_some(), "an Anthropic stream ends with message_stop or error");
    for (_, mut block, input) in blocks {
        if block["type"] == "tool_use" && !input.is_empty() {
            block["input"] =
                serde_json::from_str(&input).unwrap_or_else(|e| panic!("tool input is not JSON ({e}): {input}"));
        }
        answer.parts.push(anthropic_block(&block));
    }
    answer
}

fn responses_item(item: &Value) -> Option<Part> {
    match item["type"].as_str() {
        Some("message") => {
            let text: String = item["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c["type"] == "output_text")
                .filter_map(|c| c["text"].as_str())
                .collect();
            Some(Part::Text(text))
        }
        Some("reasoning") => {
            let text: String =
                item["summary"].as_array().into_iter().flatten().filter_map(|s| s["text"].as_str()).collect();
            Some(Part::Thinking { text, signature: item["encrypted_content"].as_str().map(str::to_owned) })
        }
        Some("function_call") => Some(Part::ToolCall {
            id: str_of(&item["call_id"]),
            name: str_of(&item["name"]),
            arguments: item["arguments"].as_str().unwrap_or_else(|| panic!("arguments string: {item}")).to_owned(),
        }),
        _ => None,
    }
}

/// An item as far as its deltas built it.
fn responses_streamed(item: &Value) -> Option<Part> {
    match item["type"].as_str() {
        Some("message") => Some(Part::Text(str_of(&item["__text"]))),
        Some("reasoning") => Some(Part::Thinking {
            text: str_of(&item["__summary"]),
            signature: item["encrypted_content"].as_str().map(str::to_owned),
        }),
        Some("function_call") => Some(Part::ToolCall {
            id: str_of(&item["call_id"]),
            name: str_of(&item["name"]),
            arguments: str_of(&item["__arguments"]),
        }),
        _ => None,
    }
}

fn responses_finish(response: &Value, parts: &[Part]) -> Option<Finish> {
    match response["status"].as_str()? {
        "completed" if parts.iter().any(|p| matches!(p, Part::ToolCall { .. })) => Some(Finish::ToolUse),
        "completed" => Some(Finish::EndTurn),
        other => Some(Finish::Other(other.to_owned())),
    }
}

fn responses_body(body: &Value) -> Answer {
    assert_eq!(body["object"], "response", "{body}");
    let parts: Vec<Part> = body["output"].as_array().into_iter().flatten().filter_map(responses_item).collect();
    let finish = responses_finish(body, &parts);
    Answer { parts, finish, usage: body["usage"].clone(), ..Answer::default() }
}

fn responses_stream(events: &[Sse]) -> Answer {
    let mut answer = Answer::default();
    // Items by output_index, accumulated from the deltas, then checked against the done item.
    let mut items: Vec<(u64, Value)> = Vec::new();
    let mut finished: Vec<u64> = Vec::new();
    let mut last = None;
    for ev in events {
        let data = json_of(ev);
        let kind = str_of(&data["type"]);
        assert_eq!(ev.event.as_deref(), Some(kind.as_str()), "the event name is the data's type: {}", ev.data);
        let index = data["output_index"].as_u64();
        let item = |items: &mut Vec<(u64, Value)>| -> usize {
            items
                .iter()
                .position(|i| Some(i.0) == index)
                .unwrap_or_else(|| panic!("event for an item never added: {data}"))
        };
        match kind.as_str() {
            "response.output_item.added" => {
                let i = index.unwrap_or_else(|| panic!("output_index: {data}"));
                items.push((i, data["item"].clone()));
            }
            "response.output_text.delta" => {
                let p = item(&mut items);
                let t = str_of(&items[p].1["__text"]) + data["delta"].as_str().unwrap_or_default();
                items[p].1["__text"] = json!(t);
            }
            "response.reasoning_summary_text.delta" => {
                let p = item(&mut items);
                let t = str_of(&items[p].1["__summary"]) + data["delta"].as_str().unwrap_or_default();
                items[p].1["__summary"] = json!(t);
            }
            "response.function_call_arguments.delta" => {
                let p = item(&mut items);
                let t = str_of(&items[p].1["__arguments"]) + data["delta"].as_str().unwrap_or_default();
                items[p].1["__arguments"] = json!(t);
                answer.arg_fragments += 1;
            }
            "response.output_item.done" => {
                let p = item(&mut items);
                let done = &data["item"];
                let streamed = &items[p].1;
                // What the deltas built must be what the finished item says.
                match responses_item(done) {
                    Some(Part::Text(t)) => assert_eq!(str_of(&streamed["__text"]), t, "streamed = done: {data}"),
                    Some(Part::ToolCall { arguments, .. }) => {
                        assert_eq!(str_of(&streamed["__arguments"]), arguments, "streamed = done: {data}")
                    }
                    Some(Part::Thinking { text, .. }) if streamed.get("__summary").is_some() => {
                        assert_eq!(str_of(&streamed["__summary"]), text, "streamed = done: {data}")
                    }
                    _ => {}
                }
                items[p].1 = done.clone();
                finished.push(items[p].0);
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                if let Some(msg) = data["response"]["error"]["message"].as_str() {
                    answer.error.get_or_insert_with(|| msg.to_owned());
                }
                last = Some(data["response"].clone());
            }
            "error" => answer.error = Some(str_of(&data["message"])),
            _ => {}
        }
    }
    let last = last.unwrap_or_else(|| panic!("a Responses stream ends with its final response event"));
    items.sort_by_key(|i| i.0);
    // An item the stream never finished (an error cut it short) is what its deltas built.
    answer.parts = items
        .iter()
        .filter_map(|(n, i)| if finished.contains(n) { responses_item(i) } else { responses_streamed(i) })
        .collect();
    answer.finish = responses_finish(&last, &answer.parts);
    answer.usage = last["usage"].clone();
    answer
}
