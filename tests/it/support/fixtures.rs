//! Upstream streams per dialect and case, written in each API's exact wire shape, and client
//! requests in each client dialect.

use serde_json::{Value, json};

use crate::support::{Client, Up};

/// The cases of the transcript suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    Text,
    Tools,
    Thinking,
    Cache,
    ErrorMidStream,
}

fn oa(delta: Value, finish: Option<&str>) -> String {
    let chunk = json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    });
    format!("data: {chunk}\n\n")
}

fn oa_usage(prompt: u64, cached: u64, completion: u64) -> String {
    let chunk = json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "gpt-4o-mini",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                  "prompt_tokens_details": {"cached_tokens": cached}}
    });
    format!("data: {chunk}\n\n")
}

fn an(event: &str, data: Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

fn an_start(input: u64, cache_read: u64, cache_write: u64) -> String {
    an(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_01", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input, "output_tokens": 1, "cache_read_input_tokens": cache_read,
                      "cache_creation_input_tokens": cache_write}}}),
    )
}

fn an_block(index: u32, block: Value) -> String {
    an("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": block}))
}

fn an_delta(index: u32, delta: Value) -> String {
    an("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": delta}))
}

fn an_stop(index: u32) -> String {
    an("content_block_stop", json!({"type": "content_block_stop", "index": index}))
}

fn an_end(reason: &str, output: u64) -> String {
    an(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null}, "usage": {"output_tokens": output}}),
    ) + &an("message_stop", json!({"type": "message_stop"}))
}

/// One Responses SSE event, named after its type, with a sequence number.
fn rs(seq: &mut u64, ty: &str, mut data: Value) -> String {
    data["type"] = json!(ty);
    data["sequence_number"] = json!(*seq);
    *seq += 1;
    format!("event: {ty}\ndata: {data}\n\n")
}

fn rs_response(status: &str, output: Value, usage: Value) -> Value {
    json!({"id": "resp_up1", "object": "response", "created_at": 1_700_000_000, "status": status, "error": null,
        "incomplete_details": null, "model": "gpt-5-mini", "output": output, "usage": usage})
}

fn rs_usage(input: u64, cached: u64, output: u64) -> Value {
    json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": input + output})
}

/// A Responses upstream's stream for `case`, in OpenAI's exact event shapes: `response.created`,
/// the items' events, then `response.completed` with the whole output and usage (or `error` and
/// `response.failed`).
fn responses_sse(case: Case) -> String {
    let mut seq = 0;
    let s = &mut seq;
    let mut out = rs(s, "response.created", json!({"response": rs_response("in_progress", json!([]), Value::Null)}));
    out += &rs(s, "response.in_progress", json!({"response": rs_response("in_progress", json!([]), Value::Null)}));
    let msg =
        |id: &str| json!({"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []});
    let msg_done = |id: &str, text: &str| {
        json!({"id": id, "type": "message", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]})
    };
    let text_events = |s: &mut u64, id: &str, index: u64, pieces: &[&str]| -> String {
        let mut out = rs(s, "response.output_item.added", json!({"output_index": index, "item": msg(id)}));
        out += &rs(
            s,
            "response.content_part.added",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
        );
        for piece in pieces {
            out += &rs(
                s,
                "response.output_text.delta",
                json!({"item_id": id, "output_index": index, "content_index": 0, "delta": piece}),
            );
        }
        out
    };
    match case {
        Case::Text => {
            out += &text_events(s, "msg_1", 0, &["Hello", " world"]);
            out += &rs(
                s,
                "response.output_text.done",
                json!({"item_id": "msg_1", "output_index": 0, "content_index": 0, "text": "Hello world"}),
            );
            out += &rs(
                s,
                "response.output_item.done",
                json!({"output_index": 0, "item": msg_done("msg_1", "Hello world")}),
            );
            out += &rs(
                s,
                "response.completed",
                json!({"response": rs_response("completed", json!([msg_done("msg_1", "Hello world")]), rs_usage(20, 0, 5))}),
            );
        }
        Case::Tools => {
            let call = |id: &str, call_id: &str, name: &str, args: &str, status: &str| json!({"id": id, "type": "function_call", "status": status, "call_id": call_id, "name": name, "arguments": args});
            out += &rs(
                s,
                "response.output_item.added",
                json!({"output_index": 0, "item": call("fc_a", "call_a", "get_weather", "", "in_progress")}),
            );
            out += &rs(
                s,
                "response.function_call_arguments.delta",
                json!({"item_id": "fc_a", "output_index": 0, "delta": "{\"city\":"}),
            );
            out += &rs(
                s,
                "response.output_item.added",
                json!({"output_index": 1, "item": call("fc_b", "call_b", "get_time", "", "in_progress")}),
            );
            out += &rs(
                s,
                "response.function_call_arguments.delta",
                json!({"item_id": "fc_a", "output_index": 0, "delta": "\"Paris\"}"}),
            );
            out += &rs(
                s,
                "response.function_call_arguments.delta",
                json!({"item_id": "fc_b", "output_index": 1, "delta": "{\"tz\":"}),
            );
            out += &rs(
                s,
                "response.function_call_arguments.delta",
                json!({"item_id": "fc_b", "output_index": 1, "delta": "\"CET\"}"}),
            );
            let a = call("fc_a", "call_a", "get_weather", "{\"city\":\"Paris\"}", "completed");
            let b = call("fc_b", "call_b", "get_time", "{\"tz\":\"CET\"}", "completed");
            out += &rs(
                s,
                "response.function_call_arguments.done",
                json!({"item_id": "fc_a", "output_index": 0, "arguments": a["arguments"]}),
            );
            out += &rs(s, "response.output_item.done", json!({"output_index": 0, "item": a}));
            out += &rs(
                s,
                "response.function_call_arguments.done",
                json!({"item_id": "fc_b", "output_index": 1, "arguments": b["arguments"]}),
            );
            out += &rs(s, "response.output_item.done", json!({"output_index": 1, "item": b}));
            out += &rs(
                s,
                "response.completed",
                json!({"response": rs_response("completed", json!([a, b]), rs_usage(50, 0, 30))}),
            );
        }
        Case::Thinking => {
            let reasoning = json!({"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Let me think."}], "encrypted_content": RESPONSES_ENCRYPTED});
            out += &rs(
                s,
                "response.output_item.added",
                json!({"output_index": 0, "item": {"id": "rs_1", "type": "reasoning", "summary": []}}),
            );
            out += &rs(
                s,
                "response.reasoning_summary_part.added",
                json!({"item_id": "rs_1", "output_index": 0, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
            );
            out += &rs(
                s,
                "response.reasoning_summary_text.delta",
                json!({"item_id": "rs_1", "output_index": 0, "summary_index": 0, "delta": "Let me "}),
            );
            out += &rs(
                s,
                "response.reasoning_summary_text.delta",
                json!({"item_id": "rs_1", "output_index": 0, "summary_index": 0, "delta": "think."}),
            );
            out += &rs(s, "response.output_item.done", json!({"output_index": 0, "item": reasoning}));
            out += &text_events(s, "msg_1", 1, &["Answer: 4"]);
            out +=
                &rs(s, "response.output_item.done", json!({"output_index": 1, "item": msg_done("msg_1", "Answer: 4")}));
            out += &rs(
                s,
                "response.completed",
                json!({"response": rs_response("completed", json!([reasoning, msg_done("msg_1", "Answer: 4")]), rs_usage(10, 0, 12))}),
            );
        }
        Case::Cache => {
            out += &text_events(s, "msg_1", 0, &["cached"]);
            out += &rs(s, "response.output_item.done", json!({"output_index": 0, "item": msg_done("msg_1", "cached")}));
            out += &rs(
                s,
                "response.completed",
                json!({"response": rs_response("completed", json!([msg_done("msg_1", "cached")]), rs_usage(1000, 800, 7))}),
            );
        }
        Case::ErrorMidStream => {
            out += &text_events(s, "msg_1", 0, &["partial"]);
            out += &rs(
                s,
                "error",
                json!({"code": "server_is_overloaded", "message": "The server is overloaded", "param": null}),
            );
            out += &rs(
                s,
                "response.failed",
                json!({"response": {"id": "resp_up1", "object": "response", "status": "failed",
                "error": {"code": "server_is_overloaded", "message": "The server is overloaded"}, "output": [], "usage": null}}),
            );
        }
    }
    out
}

/// The encrypted reasoning a Responses upstream returns in the thinking case.
pub const RESPONSES_ENCRYPTED: &str = "gAAAAABoRsEnc-thinking";

pub fn upstream_sse(up: Up, case: Case) -> String {
    match (up, case) {
        (Up::Openai, Case::Text) => [
            oa(json!({"role": "assistant", "content": ""}), None),
            oa(json!({"content": "Hello"}), None),
            oa(json!({"content": " world"}), None),
            oa(json!({}), Some("stop")),
            oa_usage(20, 0, 5),
            "data: [DONE]\n\n".into(),
        ]
        .concat(),
        (Up::Openai, Case::Tools) => [
            oa(json!({"role": "assistant", "content": null}), None),
            oa(json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}), None),
            oa(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}), None),
            oa(json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": ""}}]}), None),
            oa(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}), None),
            oa(json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"tz\":"}}]}), None),
            oa(json!({"tool_calls": [{"index": 1, "function": {"arguments": "\"CET\"}"}}]}), None),
            oa(json!({}), Some("tool_calls")),
            oa_usage(50, 0, 30),
            "data: [DONE]\n\n".into(),
        ]
        .concat(),
        (Up::Openai, Case::Thinking) => [
            oa(json!({"role": "assistant", "content": "", "reasoning_content": ""}), None),
            oa(json!({"reasoning_content": "Let me "}), None),
            oa(json!({"reasoning_content": "think."}), None),
            oa(json!({"content": "Answer: 4"}), None),
            oa(json!({}), Some("stop")),
            oa_usage(10, 0, 12),
            "data: [DONE]\n\n".into(),
        ]
        .concat(),
        (Up::Openai, Case::Cache) => [
            oa(json!({"role": "assistant", "content": "cached"}), None),
            oa(json!({}), Some("stop")),
            oa_usage(1000, 800, 7),
            "data: [DONE]\n\n".into(),
        ]
        .concat(),
        (Up::Openai, Case::ErrorMidStream) => [
            oa(json!({"role": "assistant", "content": "partial"}), None),
            format!("data: {}\n\n", json!({"error": {"message": "The server is overloaded", "type": "server_error", "code": null}})),
        ]
        .concat(),
        (Up::Anthropic, Case::Text) => [
            an_start(20, 0, 0),
            an_block(0, json!({"type": "text", "text": ""})),
            an("ping", json!({"type": "ping"})),
            an_delta(0, json!({"type": "text_delta", "text": "Hello"})),
            an_delta(0, json!({"type": "text_delta", "text": " world"})),
            an_stop(0),
            an_end("end_turn", 5),
        ]
        .concat(),
        (Up::Anthropic, Case::Tools) => [
            an_start(50, 0, 0),
            an_block(0, json!({"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {}})),
            an_delta(0, json!({"type": "input_json_delta", "partial_json": ""})),
            an_delta(0, json!({"type": "input_json_delta", "partial_json": "{\"city\":"})),
            an_delta(0, json!({"type": "input_json_delta", "partial_json": "\"Paris\"}"})),
            an_stop(0),
            an_block(1, json!({"type": "tool_use", "id": "call_b", "name": "get_time", "input": {}})),
            an_delta(1, json!({"type": "input_json_delta", "partial_json": "{\"tz\":"})),
            an_delta(1, json!({"type": "input_json_delta", "partial_json": "\"CET\"}"})),
            an_stop(1),
            an_end("tool_use", 30),
        ]
        .concat(),
        (Up::Anthropic, Case::Thinking) => [
            an_start(10, 0, 0),
            an_block(0, json!({"type": "thinking", "thinking": "", "signature": ""})),
            an_delta(0, json!({"type": "thinking_delta", "thinking": "Let me "})),
            an_delta(0, json!({"type": "thinking_delta", "thinking": "think."})),
            an_delta(0, json!({"type": "signature_delta", "signature": "EqQBCkYIBxgCKkBsig=="})),
            an_stop(0),
            an_block(1, json!({"type": "text", "text": ""})),
            an_delta(1, json!({"type": "text_delta", "text": "Answer: 4"})),
            an_stop(1),
            an_end("end_turn", 12),
        ]
        .concat(),
        (Up::Anthropic, Case::Cache) => [
            an_start(200, 800, 100),
            an_block(0, json!({"type": "text", "text": ""})),
            an_delta(0, json!({"type": "text_delta", "text": "cached"})),
            an_stop(0),
            an_end("end_turn", 7),
        ]
        .concat(),
        (Up::Responses, case) => responses_sse(case),
        (Up::Anthropic, Case::ErrorMidStream) => [
            an_start(5, 0, 0),
            an_block(0, json!({"type": "text", "text": ""})),
            an_delta(0, json!({"type": "text_delta", "text": "partial"})),
            an("error", json!({"type": "error", "error": {"type": "overloaded_error", "message": "The server is overloaded"}})),
        ]
        .concat(),
    }
}

pub fn tools_openai() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather by city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}
    ])
}

pub fn tools_responses() -> Value {
    json!([
        {"type": "function", "name": "get_weather", "description": "Weather by city", "strict": false, "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}
    ])
}

pub fn tools_anthropic() -> Value {
    json!([
        {"name": "get_weather", "description": "Weather by city", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        {"name": "get_time", "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}}}}
    ])
}

/// A first-turn request in the client's dialect.
pub fn request(client: Client, model: &str, stream: bool, case: Case) -> Value {
    let mut body = match client {
        Client::Openai => json!({
            "model": model, "stream": stream, "stream_options": {"include_usage": true},
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
        }),
        Client::Anthropic => json!({
            "model": model, "stream": stream, "max_tokens": 1024, "system": "Be brief.",
            "messages": [{"role": "user", "content": "Hi"}]
        }),
        Client::Responses => json!({
            "model": model, "stream": stream, "instructions": "Be brief.", "store": false,
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}]
        }),
    };
    if case == Case::Tools {
        body["tools"] = match client {
            Client::Openai => tools_openai(),
            Client::Anthropic => tools_anthropic(),
            Client::Responses => tools_responses(),
        };
    }
    if case == Case::Thinking {
        match client {
            Client::Openai => body["reasoning_effort"] = json!("medium"),
            Client::Anthropic => body["thinking"] = json!({"type": "enabled", "budget_tokens": 2048}),
            Client::Responses => body["reasoning"] = json!({"effort": "medium", "summary": "auto"}),
        }
    }
    body
}
