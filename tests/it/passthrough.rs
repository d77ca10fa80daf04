//! What real clients send reaches the upstream (issue 13 §1, §2): a Claude Code–shaped request goes
//! to an Anthropic upstream unchanged (model name aside) with the client's `anthropic-beta`, is
//! translated for a Chat upstream, and reasoning comes back to the client in an envelope that
//! restores the upstream's own reasoning on the next turn. Expected bodies are written by hand
//! from the vendors' documented formats.

use serde_json::{Value, json};

use crate::support::fixtures::{Case, upstream_sse};
use crate::support::{Client, MockUpstream, Reply, TestEngine, Up};

/// The envelope of OpenAI-compatible Chat reasoning: `khr1.` + base64url(`{"f":"openai_chat"}`).
const CHAT_ENVELOPE: &str = "khr1.eyJmIjoib3BlbmFpX2NoYXQifQ";

const BETAS: &str = "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,mid-conversation-system-2026-04-07,effort-2025-11-24";

/// Claude Code 2.1's first requests, reduced: every field and block kind it sends.
fn claude_code_body(model: &str) -> Value {
    json!({
        "model": model,
        "max_tokens": 32000,
        "stream": true,
        "system": [
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
            {"type": "text", "text": "Tool guidance.", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What is in notes.pdf?", "cache_control": {"type": "ephemeral"}},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}, "cache_control": {"type": "ephemeral"}}
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should read it.", "signature": "EqQBCkYIBxgCKkBsig==", "cache_control": {"type": "ephemeral"}},
                {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"file_path": "/w/notes.pdf"}, "cache_control": {"type": "ephemeral"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "notes", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ]},
            {"role": "system", "content": "<system-reminder>The todo list is empty.</system-reminder>"},
            {"role": "user", "content": [{"type": "text", "text": "Summarise.", "cache_control": {"type": "ephemeral"}}]}
        ],
        "tools": [
            {"name": "Read", "description": "Reads a file", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}, "cache_control": {"type": "ephemeral"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
            {"type": "web_fetch_20250910", "name": "web_fetch"},
            {"type": "code_execution_20250825", "name": "code_execution"},
            {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
            {"type": "bash_20250124", "name": "bash"}
        ],
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}]},
        "metadata": {"user_id": "user_abc_account__session_1"},
        "mcp_servers": [{"type": "url", "url": "https://mcp.example.com/sse", "name": "example"}],
        "container": "container_1"
    })
}

async fn post_claude_code(engine: &TestEngine, body: &Value) -> reqwest::Response {
    engine
        .http
        .post(engine.url("/v1/messages?beta=true"))
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", BETAS)
        .header("x-claude-code-session-id", "8c1f0a52-6d0e-4a51-9d1c-2b0f3a4e5d6c")
        .header("user-agent", "claude-cli/2.1.0 (external, cli)")
        .json(body)
        .send()
        .await
        .expect("request reaches the engine")
}

#[tokio::test]
async fn claude_code_request_reaches_anthropic_unchanged_with_its_betas() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Anthropic, Case::Text)));
    let engine = TestEngine::start(&mock).await;

    let body = claude_code_body("an-model");
    let resp = post_claude_code(&engine, &body).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap_or_default());
    let _ = resp.text().await;

    let seen = mock.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/messages");
    let mut expected = body.clone();
    expected["model"] = json!("claude-sonnet-4-5");
    assert_eq!(seen[0].body, expected, "the client's body, only the model name replaced");
    let beta = seen[0].headers.get("anthropic-beta").and_then(|v| v.to_str().ok());
    assert_eq!(beta, Some(BETAS));
    // Nothing was left out, so the call row notes nothing (control API too).
    let row = engine.only_call().await;
    assert_eq!(row.notes, Vec::<String>::new());
    let (status, detail) = engine.control(reqwest::Method::GET, &format!("/api/calls/{}", row.summary.id), None).await;
    assert_eq!(status, 200, "{detail}");
    let detail: Value = serde_json::from_str(&detail).expect("detail JSON");
    assert_eq!(detail["notes"], json!([]), "{detail}");
    engine.stop().await;
}

#[tokio::test]
async fn foreign_envelopes_never_reach_anthropic() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Anthropic, Case::Text)));
    let engine = TestEngine::start(&mock).await;

    // The conversation ran on a Chat reasoner before; its thinking carries the Chat envelope.
    let mut body = claude_code_body("an-model");
    body["messages"][1]["content"][0]["signature"] = json!(CHAT_ENVELOPE);
    let resp = post_claude_code(&engine, &body).await;
    assert_eq!(resp.status(), 200);
    let _ = resp.text().await;

    let mut expected = body.clone();
    expected["model"] = json!("claude-sonnet-4-5");
    expected["messages"][1]["content"] = json!([
        {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"file_path": "/w/notes.pdf"}, "cache_control": {"type": "ephemeral"}}
    ]);
    assert_eq!(mock.seen()[0].body, expected, "the foreign thinking block is dropped, nothing else changes");
    engine.stop().await;
}

#[tokio::test]
async fn claude_code_request_is_translated_for_a_chat_upstream() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let engine = TestEngine::start(&mock).await;

    let mut body = claude_code_body("oa-model");
    // Thinking that came from this Chat reasoner on the previous turn.
    body["messages"][1]["content"][0]["signature"] = json!(CHAT_ENVELOPE);
    let resp = post_claude_code(&engine, &body).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap_or_default());
    let _ = resp.text().await;

    let seen = mock.seen();
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert!(seen[0].headers.get("anthropic-beta").is_none());
    // Chat Completions: system messages where they were, reasoning_content next to the tool
    // call, the tool result as a `tool` message, effort as reasoning_effort, server tools and
    // Anthropic-only fields left out.
    let expected = json!({
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are Claude Code, Anthropic's official CLI for Claude.\n\nTool guidance."},
            {"role": "user", "content": [{"type": "text", "text": "What is in notes.pdf?"}, {"type": "text", "text": "notes"}]},
            {"role": "assistant", "content": null, "reasoning_content": "I should read it.",
             "tool_calls": [{"id": "toolu_01", "type": "function", "function": {"name": "Read", "arguments": "{\"file_path\":\"/w/notes.pdf\"}"}}]},
            {"role": "tool", "tool_call_id": "toolu_01", "content": "notes"},
            {"role": "system", "content": "<system-reminder>The todo list is empty.</system-reminder>"},
            {"role": "user", "content": "Summarise."}
        ],
        "tools": [{"type": "function", "function": {"name": "Read", "description": "Reads a file",
            "parameters": {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}}}],
        "max_tokens": 32000,
        "user": "user_abc_account__session_1",
        "reasoning_effort": "high",
        "stream": true,
        "stream_options": {"include_usage": true}
    });
    assert_eq!(seen[0].body, expected);
    // What was left out is on the call row and in the control API's call detail.
    let notes = vec![
        "Anthropic built-in tool `web_search_20250305` left out: this upstream cannot run it",
        "Anthropic built-in tool `web_fetch_20250910` left out: this upstream cannot run it",
        "Anthropic built-in tool `code_execution_20250825` left out: this upstream cannot run it",
        "Anthropic built-in tool `tool_search_tool_regex_20251119` left out: this upstream cannot run it",
        "Anthropic built-in tool `bash_20250124` left out: this upstream cannot run it",
        "MCP server `example` left out: this upstream cannot reach it",
    ];
    let row = engine.only_call().await;
    assert_eq!(row.summary.status, keyhaven::model::CallStatus::Ok);
    assert_eq!(row.notes, notes);
    let (status, detail) = engine.control(reqwest::Method::GET, &format!("/api/calls/{}", row.summary.id), None).await;
    assert_eq!(status, 200, "{detail}");
    let detail: Value = serde_json::from_str(&detail).expect("detail JSON");
    assert_eq!(detail["notes"], json!(notes), "{detail}");
    engine.stop().await;
}

#[tokio::test]
async fn chat_reasoning_reaches_an_anthropic_client_in_an_envelope() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Thinking)));
    let engine = TestEngine::start(&mock).await;

    let body = json!({"model": "oa-model", "max_tokens": 100, "thinking": {"type": "adaptive"},
        "messages": [{"role": "user", "content": "2+2?"}]});
    let resp = engine.post(Client::Anthropic, &body).await;
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.expect("JSON");
    assert_eq!(
        answer["content"][0],
        json!({"type": "thinking", "thinking": "Let me think.", "signature": CHAT_ENVELOPE})
    );
    assert_eq!(answer["content"][1], json!({"type": "text", "text": "Answer: 4"}));
    engine.stop().await;
}

#[tokio::test]
async fn chat_reasoning_reaches_a_responses_client_with_encrypted_content() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Thinking)));
    let engine = TestEngine::start(&mock).await;

    let body = json!({"model": "oa-model", "input": "2+2?", "reasoning": {"effort": "low"}, "store": false,
        "include": ["reasoning.encrypted_content"]});
    let resp = engine.post(Client::Responses, &body).await;
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.expect("JSON");
    let reasoning = &answer["output"][0];
    assert_eq!(reasoning["type"], json!("reasoning"));
    assert_eq!(reasoning["summary"], json!([{"type": "summary_text", "text": "Let me think."}]));
    assert_eq!(reasoning["encrypted_content"], json!(CHAT_ENVELOPE));

    // The next turn replays it: the Chat upstream gets its reasoning back as reasoning_content.
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let next = json!({"model": "oa-model", "store": false, "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "2+2?"}]},
        {"type": "reasoning", "id": "rs_x", "summary": [{"type": "summary_text", "text": "Let me think."}], "encrypted_content": CHAT_ENVELOPE},
        {"type": "function_call", "call_id": "call_1", "name": "calc", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "4"}
    ]});
    let resp = engine.post(Client::Responses, &next).await;
    assert_eq!(resp.status(), 200);
    let _ = resp.text().await;
    let sent = &mock.seen()[1].body;
    assert_eq!(
        sent["messages"][1],
        json!({"role": "assistant", "content": null, "reasoning_content": "Let me think.",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": "{}"}}]})
    );
    engine.stop().await;
}

#[tokio::test]
async fn responses_reasoning_is_restored_with_its_own_id_and_ciphertext() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Responses, Case::Text)));
    let engine = TestEngine::start(&mock).await;

    // An Anthropic client replays a turn that ran on the Responses upstream: the envelope holds
    // the upstream's item id and encrypted_content (`{"f":"openai_responses","id":"rs_9","d":"gAAAA-enc"}`).
    let envelope = "khr1.eyJmIjoib3BlbmFpX3Jlc3BvbnNlcyIsImlkIjoicnNfOSIsImQiOiJnQUFBQS1lbmMifQ";
    let body = json!({"model": "rs-model", "max_tokens": 100, "thinking": {"type": "adaptive"}, "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Use the tool.", "signature": envelope},
            {"type": "thinking", "thinking": "Anthropic's own.", "signature": "EqQBCkYIBxgCKkBsig=="},
            {"type": "tool_use", "id": "call_w", "name": "weather", "input": {}}
        ]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_w", "content": "sunny"}]}
    ]});
    let resp = engine.post(Client::Anthropic, &body).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap_or_default());
    let _ = resp.text().await;
    let sent = &mock.seen()[0].body;
    assert_eq!(sent["store"], json!(false));
    assert_eq!(
        sent["input"],
        json!([
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
            {"type": "reasoning", "id": "rs_9", "summary": [{"type": "summary_text", "text": "Use the tool."}], "encrypted_content": "gAAAA-enc"},
            {"type": "function_call", "call_id": "call_w", "name": "weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_w", "output": "sunny"}
        ]),
        "the Responses reasoning item is restored before its call; Anthropic's thinking is not sent"
    );
    engine.stop().await;
}

#[tokio::test]
async fn the_base_url_probe_answers_without_a_dashboard() {
    // Claude Code probes its base URL with `HEAD /` before the first call.
    let mock = MockUpstream::start().await;
    let engine = TestEngine::start(&mock).await;
    let http = reqwest::Client::new();
    let head = http.head(engine.url("/")).send().await.expect("HEAD /");
    assert_eq!(head.status(), 200);
    let get = http.get(engine.url("/")).send().await.expect("GET /");
    assert_eq!(get.status(), 404, "GET / without a dashboard is still not found");
    assert!(mock.seen().is_empty(), "a probe never reaches a provider");
    engine.stop().await;
}

/// An Anthropic upstream that ran a server tool (web search) streams, per Anthropic's documented
/// format, a `server_tool_use` block with its input and a `web_search_tool_result` block between
/// its text blocks. A Chat or Responses client has no form for them: it gets the text (never a
/// client tool call it would try to run), and the call row says what was not forwarded.
#[tokio::test]
async fn server_tool_blocks_from_anthropic_are_noted_and_the_text_kept() {
    let sse = [
        ("message_start", json!({"type": "message_start", "message": {"id": "msg_01", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 30, "output_tokens": 1}}})),
        ("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
        ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me look. "}})),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        ("content_block_start", json!({"type": "content_block_start", "index": 1, "content_block":
            {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {}}})),
        ("content_block_delta", json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"query\": \"rust 2024\"}"}})),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 1})),
        ("content_block_start", json!({"type": "content_block_start", "index": 2, "content_block":
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": [
                {"type": "web_search_result", "url": "https://blog.rust-lang.org/", "title": "Rust Blog", "encrypted_content": "EqgfCioIARgBIiQ", "page_age": null}]}})),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 2})),
        ("content_block_start", json!({"type": "content_block_start", "index": 3, "content_block": {"type": "text", "text": ""}})),
        ("content_block_delta", json!({"type": "content_block_delta", "index": 3, "delta": {"type": "text_delta", "text": "Rust 2024 shipped."}})),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 3})),
        ("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": 12, "server_tool_use": {"web_search_requests": 1}}})),
        ("message_stop", json!({"type": "message_stop"})),
    ]
    .iter()
    .map(|(e, d)| format!("event: {e}\ndata: {d}\n\n"))
    .collect::<String>();
    for (client, stream) in [(Client::Openai, true), (Client::Responses, false), (Client::Anthropic, true)] {
        let mock = MockUpstream::start().await;
        mock.push(Reply::sse(&sse));
        let engine = TestEngine::start(&mock).await;
        let body = match client {
            Client::Responses => json!({"model": "an-model", "stream": stream, "input": "What shipped?"}),
            _ => {
                json!({"model": "an-model", "max_tokens": 100, "stream": stream, "messages": [{"role": "user", "content": "What shipped?"}]})
            }
        };
        let resp = engine.post(client, &body).await;
        let status = resp.status();
        let raw = resp.text().await.expect("body");
        assert_eq!(status, 200, "{client:?}: {raw}");
        let answer = crate::support::wire::read(client, &raw, stream);
        assert_eq!(answer.text(), "Let me look. Rust 2024 shipped.", "{client:?}: {raw}");
        assert!(answer.tool_calls().is_empty(), "{client:?}: a server tool is no client tool call: {raw}");
        assert_eq!(answer.finish, Some(crate::support::wire::Finish::EndTurn), "{client:?}");
        let row = engine.only_call().await;
        assert_eq!(row.summary.status, keyhaven::model::CallStatus::Ok);
        assert_eq!(
            row.notes,
            [
                "upstream `server_tool_use` block not forwarded: Keyhaven has no form for it (the answer's text is kept)",
                "upstream `web_search_tool_result` block not forwarded: Keyhaven has no form for it (the answer's text is kept)",
            ],
            "{client:?}"
        );
        engine.stop().await;
    }
}
