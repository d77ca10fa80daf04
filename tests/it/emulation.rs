//! Tool-call emulation end to end: a chat-only mock model (OpenAI Chat SSE, text only) answers
//! with action blocks; clients of both dialects see native tool calls, every upstream request
//! keeps the contract (no native tools, contract in the system prompt, history replayed as text
//! with the continuation instruction), and contract breaks get one corrective retry.

use serde_json::{Value, json};

use keyhaven::model::CallStatus;
use keyhaven::provider::emulation::CONTINUATION;

use crate::support::mock::Seen;
use crate::support::wire::{self, Answer, Finish};
use crate::support::{Client, MockUpstream, Reply, TestEngine, config_with};

/// An OpenAI Chat stream whose text arrives in `piece`-byte chunks (at char boundaries).
fn chat_sse(text: &str, piece: usize) -> String {
    let chunk = |delta: Value, finish: Option<&str>| {
        let c = json!({"id": "chatcmpl-e", "object": "chat.completion.chunk", "created": 1, "model": "chat-only",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {c}\n\n")
    };
    let mut out = chunk(json!({"role": "assistant", "content": ""}), None);
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = piece.min(rest.len());
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (a, b) = rest.split_at(end);
        out += &chunk(json!({"content": a}), None);
        rest = b;
    }
    out += &chunk(json!({}), Some("stop"));
    let usage = json!({"id": "chatcmpl-e", "object": "chat.completion.chunk", "created": 1, "model": "chat-only",
        "choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}});
    out + &format!("data: {usage}\n\ndata: [DONE]\n\n")
}

async fn engine(mock: &MockUpstream) -> TestEngine {
    let tables = r#"
[[models]]
name = "emu-model"
provider = "oa"
upstream = "chat-only"
tools = "emulated"

[[models]]
name = "auto-model"
provider = "oa"
upstream = "chat-only"
tools = "auto"
capabilities = { tools = false, vision = false, thinking = false }
"#;
    TestEngine::start_in(tempfile::tempdir().expect("dir"), &config_with(&mock.url(), "", tables)).await
}

fn schema() -> Value {
    json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
}

fn tools(client: Client) -> Value {
    match client {
        Client::Anthropic => json!([{"name": "read_file", "description": "Read a file.", "input_schema": schema()},
                                    {"name": "terminal", "description": "Run a command.", "input_schema": {"type": "object"}}]),
        Client::Openai => json!([
            {"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": schema()}},
            {"type": "function", "function": {"name": "terminal", "description": "Run a command.", "parameters": {"type": "object"}}}]),
        Client::Responses => json!([
            {"type": "function", "name": "read_file", "description": "Read a file.", "parameters": schema()},
            {"type": "function", "name": "terminal", "description": "Run a command.", "parameters": {"type": "object"}}]),
    }
}

/// The model's replies over a 5-turn session: four tool turns in different accepted shapes,
/// then the final answer.
fn script(turn: usize) -> String {
    match turn {
        1 => "I'll read it.\n\n```json action\n{\"tool\": \"read_file\", \"parameters\": {\"path\": \"f1\"}}\n```".into(),
        2 => "```json action\n{\"tool\": \"read_file\", \"path\": \"f2\"}\n```".into(),
        3 => "Next:\n```json\n{\"name\": \"read_file\", \"arguments\": \"{\\\"path\\\": \\\"f3\\\"}\"}\n```\n".into(),
        4 => "Two more.\n```json action\n{\"tool\": \"READ_FILE\", \"input\": {\"path\": \"f4\"}}\n```\n```json action\n{\"tool\": \"Bash\", \"parameters\": {\"command\": \"ls\"}}\n```".into(),
        _ => "All done: the files say hello.".into(),
    }
}

fn tool_uses(resp: &Answer) -> Vec<(String, String, Value)> {
    resp.tool_calls()
}

fn text(resp: &Answer) -> String {
    resp.text()
}

/// Sends, asserts 200 and reads the answer the way the client's own dialect says.
async fn send(engine: &TestEngine, client: Client, body: &Value, stream: bool) -> Answer {
    let resp = engine.post(client, body).await;
    assert_eq!(resp.status(), 200);
    let raw = resp.text().await.expect("body");
    wire::read(client, &raw, stream)
}

/// Checks one upstream request of the session: turn `turn` (1-based).
fn check_upstream(seen: &Seen, turn: usize) {
    let body = &seen.body;
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none(), "turn {turn}: native tools sent: {body}");
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(messages[0]["role"], "system", "turn {turn}");
    let system = messages[0].to_string();
    assert!(
        system.contains("# Tool use") && system.contains("```json action") && system.contains("read_file"),
        "turn {turn}: {system}"
    );
    for m in messages {
        assert!(m["role"] != "tool" && m.get("tool_calls").is_none(), "turn {turn}: native history: {m}");
    }
    let all = body["messages"].to_string();
    // Every earlier tool call is replayed as the action block, every result with the instruction.
    let calls = [0, 0, 1, 2, 3, 5][turn];
    let results = all.matches("Tool result for read_file (call ").count()
        + all.matches("Tool result for terminal (call ").count();
    assert_eq!(results, calls, "turn {turn}: {all}");
    assert_eq!(all.matches("```json action").count(), 1 + calls, "turn {turn}: contract + replays");
    let continuation = &CONTINUATION[..40];
    assert_eq!(all.matches(continuation).count(), [0, 0, 1, 2, 3, 4][turn], "turn {turn}: {all}");
    if turn > 1 {
        assert!(all.contains("Tool result for read_file (call call_emu_"), "turn {turn}: {all}");
    }
}

async fn session(client: Client, stream: bool) {
    let mock = MockUpstream::start().await;
    let engine = engine(&mock).await;
    let mut messages = vec![json!({"role": "user", "content": "Read the files and tell me what they say."})];
    for turn in 1..=5 {
        mock.push(Reply::sse(&chat_sse(&script(turn), 5)));
        let mut body = match client {
            Client::Responses => {
                json!({"model": "emu-model", "max_output_tokens": 512, "stream": stream, "input": messages, "tools": tools(client)})
            }
            _ => {
                json!({"model": "emu-model", "max_tokens": 512, "stream": stream, "messages": messages, "tools": tools(client)})
            }
        };
        if turn == 1 && client == Client::Openai {
            body["tool_choice"] = json!("auto");
        }
        let resp = send(&engine, client, &body, stream).await;
        check_upstream(&mock.seen()[turn - 1], turn);
        let calls = tool_uses(&resp);
        if turn == 5 {
            assert!(calls.is_empty());
            assert_eq!(text(&resp), "All done: the files say hello.");
            assert_eq!(resp.finish, Some(Finish::EndTurn));
            break;
        }
        assert_eq!(resp.finish, Some(Finish::ToolUse), "turn {turn}: {resp:?}");
        let expected: Vec<(String, Value)> = match turn {
            4 => vec![("read_file".into(), json!({"path": "f4"})), ("terminal".into(), json!({"command": "ls"}))],
            n => vec![("read_file".into(), json!({"path": format!("f{n}")}))],
        };
        let got: Vec<(String, Value)> = calls.iter().map(|(_, n, i)| (n.clone(), i.clone())).collect();
        assert_eq!(got, expected, "turn {turn}");
        assert!(calls.iter().all(|(id, _, _)| id.starts_with("call_emu_")));
        if turn == 1 {
            assert_eq!(text(&resp).trim(), "I'll read it.");
        }
        // The client runs the tools and sends everything back, tools included, as clients do.
        match client {
            Client::Anthropic => {
                let content: Vec<Value> = calls
                    .iter()
                    .map(|(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input}))
                    .collect();
                messages.push(json!({"role": "assistant", "content": content}));
                let results: Vec<Value> = calls
                    .iter()
                    .map(|(id, _, _)| json!({"type": "tool_result", "tool_use_id": id, "content": format!("contents of {id}")}))
                    .collect();
                messages.push(json!({"role": "user", "content": results}));
            }
            Client::Openai => {
                let tool_calls: Vec<Value> = calls
                    .iter()
                    .map(|(id, name, input)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": input.to_string()}}))
                    .collect();
                messages.push(json!({"role": "assistant", "content": null, "tool_calls": tool_calls}));
                for (id, _, _) in &calls {
                    messages.push(json!({"role": "tool", "tool_call_id": id, "content": format!("contents of {id}")}));
                }
            }
            Client::Responses => {
                for (id, name, input) in &calls {
                    messages.push(
                        json!({"type": "function_call", "call_id": id, "name": name, "arguments": input.to_string()}),
                    );
                }
                for (id, _, _) in &calls {
                    messages.push(
                        json!({"type": "function_call_output", "call_id": id, "output": format!("contents of {id}")}),
                    );
                }
            }
        }
    }
    assert_eq!(mock.seen().len(), 5, "no retries in a well-behaved session");
    let rows = engine.wait_calls(5).await;
    assert!(rows.iter().all(|r| r.summary.status == CallStatus::Ok && r.summary.retries == 0));
    engine.stop().await;
}

#[tokio::test]
async fn five_turn_session_through_messages_streaming() {
    session(Client::Anthropic, true).await;
}

#[tokio::test]
async fn five_turn_session_through_chat_completions() {
    session(Client::Openai, false).await;
}

#[tokio::test]
async fn five_turn_session_through_chat_completions_streaming() {
    session(Client::Openai, true).await;
}

#[tokio::test]
async fn five_turn_session_through_responses_streaming() {
    session(Client::Responses, true).await;
}

fn one_turn(client: Client, model: &str, stream: bool) -> Value {
    json!({"model": model, "max_tokens": 256, "stream": stream, "tools": tools(client),
           "messages": [{"role": "user", "content": "Read f1."}]})
}

#[tokio::test]
async fn a_refusal_gets_one_corrective_retry() {
    let mock = MockUpstream::start().await;
    let engine = engine(&mock).await;
    mock.push(Reply::sse(&chat_sse("I'm sorry, but I cannot use tools or access your files.", 8)));
    mock.push(Reply::sse(&chat_sse(
        "```json action\n{\"tool\": \"read_file\", \"parameters\": {\"path\": \"f1\"}}\n```",
        8,
    )));
    let resp = send(&engine, Client::Openai, &one_turn(Client::Openai, "emu-model", false), false).await;
    assert_eq!(tool_uses(&resp).len(), 1, "{resp:?}");
    assert!(text(&resp).is_empty(), "the refusal never reached the client: {resp:?}");
    let seen = mock.seen();
    assert_eq!(seen.len(), 2);
    let retry = seen[1].body["messages"].as_array().expect("messages");
    let last = retry.last().expect("last").to_string();
    assert!(last.contains("did not follow the tool contract"), "{last}");
    assert_eq!(retry[retry.len() - 2]["role"], "assistant", "the bad reply is shown to the model");
    let row = engine.only_call().await;
    assert_eq!((row.summary.status, row.summary.retries), (CallStatus::Ok, 1));
    assert_eq!(row.summary.usage.output_tokens, 40, "both attempts are billed");

    // A second refusal is final: exactly one retry.
    mock.push(Reply::sse(&chat_sse("I cannot use tools.", 8)));
    let resp = send(&engine, Client::Anthropic, &one_turn(Client::Anthropic, "emu-model", false), false).await;
    assert_eq!(text(&resp), "I cannot use tools.");
    assert_eq!(mock.seen().len(), 4);
    engine.stop().await;
}

#[tokio::test]
async fn streaming_retries_a_malformed_block_only_before_anything_was_released() {
    let mock = MockUpstream::start().await;
    let engine = engine(&mock).await;
    let bad = "```json action\n{\"tool\": \"read_file\", \"parameters\": {\"path\": \"f1\"\n```";
    mock.push(Reply::sse(&chat_sse(bad, 4)));
    mock.push(Reply::sse(&chat_sse(
        "```json action\n{\"tool\": \"read_file\", \"parameters\": {\"path\": \"f1\"}}\n```",
        4,
    )));
    let resp = send(&engine, Client::Anthropic, &one_turn(Client::Anthropic, "emu-model", true), true).await;
    assert_eq!(tool_uses(&resp).len(), 1, "{resp:?}");
    assert!(text(&resp).is_empty(), "{resp:?}");
    assert_eq!(mock.seen().len(), 2);

    // Prose went out first: the malformed block is shown as text, no retry.
    mock.push(Reply::sse(&chat_sse(&format!("Reading now.\n{bad}"), 4)));
    let resp = send(&engine, Client::Openai, &one_turn(Client::Openai, "emu-model", true), true).await;
    assert!(tool_uses(&resp).is_empty());
    assert_eq!(text(&resp), format!("Reading now.\n{bad}"));
    assert_eq!(mock.seen().len(), 3);
    engine.stop().await;
}

#[tokio::test]
async fn auto_emulates_only_without_native_tool_support_and_plain_chat_is_untouched() {
    let mock = MockUpstream::start().await;
    let engine = engine(&mock).await;
    mock.push(Reply::sse(&chat_sse(
        "```json action\n{\"tool\": \"read_file\", \"parameters\": {\"path\": \"x\"}}\n```",
        16,
    )));
    let resp = send(&engine, Client::Openai, &one_turn(Client::Openai, "auto-model", false), false).await;
    assert_eq!(tool_uses(&resp).len(), 1);
    assert!(mock.seen()[0].body.get("tools").is_none());
    // oa-model has native tools (capabilities.tools = true, tools = "native").
    mock.push(Reply::sse(&chat_sse("hi", 16)));
    let _ = send(&engine, Client::Openai, &one_turn(Client::Openai, "oa-model", false), false).await;
    assert!(mock.seen()[1].body.get("tools").is_some());
    // No tools at all: the emulated model gets the request unchanged.
    mock.push(Reply::sse(&chat_sse("hi", 16)));
    let body = json!({"model": "emu-model", "messages": [{"role": "user", "content": "hi"}]});
    let resp = send(&engine, Client::Openai, &body, false).await;
    assert_eq!(text(&resp), "hi");
    assert!(!mock.seen()[2].body.to_string().contains("# Tool use"));
    engine.stop().await;
}
