//! `POST /v1/messages/count_tokens`: the provider's exact count when it has one, a labelled local
//! estimate otherwise (within 10 % of the reference counts shipped in the fixtures), and a call
//! row for each.

use serde_json::{Value, json};

use keyhaven::model::CallStatus;

use crate::support::{CANARY_KEY, MockUpstream, Reply, TestEngine};

async fn count(engine: &TestEngine, body: &Value) -> reqwest::Response {
    engine
        .http
        .post(engine.url("/v1/messages/count_tokens"))
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .expect("reaches the engine")
}

fn body(model: &str) -> Value {
    json!({
        "model": model,
        "system": "You are a scientist",
        "messages": [{"role": "user", "content": "Hello, Claude"}],
        "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    })
}

#[tokio::test]
async fn anthropic_providers_count_exactly() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::json(200, r#"{"input_tokens": 1234}"#));
    let engine = TestEngine::start(&mock).await;
    let resp = count(&engine, &body("an-model")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-keyhaven-token-count"], "exact");
    let answer: Value = resp.json().await.expect("json");
    assert_eq!(answer, json!({"input_tokens": 1234}));
    let seen = mock.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/messages/count_tokens");
    assert_eq!(seen[0].headers["x-api-key"], CANARY_KEY);
    let sent = &seen[0].body;
    assert_eq!(sent["model"], "claude-sonnet-4-5", "the upstream id");
    assert!(sent.get("max_tokens").is_none() && sent.get("stream").is_none(), "{sent}");
    assert!(sent["system"].to_string().contains("scientist"), "{sent}");
    assert_eq!(sent["tools"][0]["name"], "get_weather");
    let row = engine.only_call().await;
    assert_eq!(row.summary.dialect, "anthropic_count_tokens");
    assert_eq!(row.summary.status, CallStatus::Ok);
    assert_eq!(row.summary.usage.input_tokens, 0, "counting is not billed");
    let recorded: Value = serde_json::from_str(row.response_body.as_deref().expect("body")).expect("json");
    assert_eq!(recorded, json!({"input_tokens": 1234, "token_count": "exact"}));
    engine.stop().await;
}

#[tokio::test]
async fn a_failed_provider_count_falls_back_to_a_labelled_estimate() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::json(404, r#"{"type":"error","error":{"type":"not_found_error","message":"no such endpoint"}}"#));
    let engine = TestEngine::start(&mock).await;
    let resp = count(&engine, &body("an-model")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-keyhaven-token-count"], "estimate");
    let answer: Value = resp.json().await.expect("json");
    let n = answer["input_tokens"].as_u64().expect("count");
    // Claude estimate: the tool-use system prompt alone is 346 tokens.
    assert!(n > 346 && n < 450, "{n}");
    engine.stop().await;
}

#[tokio::test]
async fn openai_models_are_estimated_locally_and_unknown_models_are_404() {
    let mock = MockUpstream::start().await;
    let engine = TestEngine::start(&mock).await;
    let resp = count(&engine, &body("oa-model")).await;
    assert_eq!(resp.headers()["x-keyhaven-token-count"], "estimate");
    assert!(mock.seen().is_empty(), "no upstream call");
    let resp = count(&engine, &body("nope")).await;
    assert_eq!(resp.status(), 404);
    let rows = engine.wait_calls(2).await;
    assert!(rows.iter().all(|r| r.summary.dialect == "anthropic_count_tokens"));
    engine.stop().await;
}

#[tokio::test]
async fn estimates_stay_within_ten_percent_of_the_reference_counts() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/count_tokens");
    let prompts: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("prompts.json")).expect("prompts")).expect("json");
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).expect("reference")).expect("json");
    let mock = MockUpstream::start().await;
    let engine = TestEngine::start(&mock).await;
    let mut report = Vec::new();
    for p in prompts.as_array().expect("array") {
        let name = p["name"].as_str().expect("name");
        let mut req = p["request"].clone();
        req["model"] = json!("oa-model");
        let resp = count(&engine, &req).await;
        assert_eq!(resp.headers()["x-keyhaven-token-count"], "estimate");
        let got = resp.json::<Value>().await.expect("json")["input_tokens"].as_u64().expect("n");
        let want = reference["openai"][name].as_u64().expect("reference count");
        let off = (got as f64 - want as f64).abs() / want as f64;
        report.push(format!("{name}: estimate {got}, reference {want} ({:+.1} %)", off * 100.0));
        assert!(off <= 0.10, "{name}: {got} vs {want}\n{}", report.join("\n"));
    }
    assert_eq!(report.len(), 10);
    engine.stop().await;
}

/// What Claude Code 2.1 sends to `count_tokens`: a system message inside `messages`, adaptive
/// thinking, context management, server and client tools, cache controls.
fn claude_code_body(model: &str) -> Value {
    json!({
        "model": model,
        "system": [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "List the files in this directory."}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should run ls.", "signature": "EqQBCkYIBxgCKkA"},
                {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": "ls"}}
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "README.md\nsrc"}]},
            {"role": "system", "content": "The user switched to plan mode."},
            {"role": "user", "content": "Now summarise them."}
        ],
        "tools": [
            {"name": "Bash", "description": "Run a shell command", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
        ],
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    })
}

#[tokio::test]
async fn claude_codes_count_is_forwarded_to_anthropic_as_sent() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::json(200, r#"{"input_tokens": 2187}"#));
    let engine = TestEngine::start(&mock).await;
    let sent = claude_code_body("an-model");
    let resp = engine
        .http
        .post(engine.url("/v1/messages/count_tokens?beta=true"))
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "claude-code-20250219,context-management-2025-06-27")
        .header("x-claude-code-session-id", "7f3c2a9e-0d4b-4c41-9d7e-2b8f0e6a1c55")
        .json(&sent)
        .send()
        .await
        .expect("reaches the engine");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-keyhaven-token-count"], "exact");
    assert_eq!(resp.json::<Value>().await.expect("json"), json!({"input_tokens": 2187}));
    let seen = mock.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/messages/count_tokens");
    assert_eq!(seen[0].headers["anthropic-beta"], "claude-code-20250219,context-management-2025-06-27");
    // Byte for byte what the client sent, but for the model's upstream name.
    let mut want = sent.clone();
    want["model"] = json!("claude-sonnet-4-5");
    assert_eq!(seen[0].body, want);
    let row = engine.only_call().await;
    assert_eq!(row.summary.status, CallStatus::Ok);
    assert_eq!(row.summary.session_id.as_deref(), Some("7f3c2a9e-0d4b-4c41-9d7e-2b8f0e6a1c55"));
    engine.stop().await;
}

#[tokio::test]
async fn claude_codes_count_elsewhere_is_a_marked_estimate() {
    let mock = MockUpstream::start().await;
    let engine = TestEngine::start(&mock).await;
    let resp = count(&engine, &claude_code_body("oa-model")).await;
    assert_eq!(resp.status(), 200, "never a 400 for fields Keyhaven does not know");
    assert_eq!(resp.headers()["x-keyhaven-token-count"], "estimate");
    let n = resp.json::<Value>().await.expect("json")["input_tokens"].as_u64().expect("count");
    // The texts alone are about 60 o200k tokens and the tools about 50: a sane, non-zero figure.
    assert!((60..400).contains(&n), "{n}");
    assert!(mock.seen().is_empty(), "no upstream call");
    let row = engine.only_call().await;
    let recorded: Value = serde_json::from_str(row.response_body.as_deref().expect("body")).expect("json");
    assert_eq!(recorded, json!({"input_tokens": n, "token_count": "estimate"}));
    // Not JSON, or no model: still the decoder's 400.
    let resp = engine
        .http
        .post(engine.url("/v1/messages/count_tokens"))
        .header("content-type", "application/json")
        .body(r#"{"messages": []}"#)
        .send()
        .await
        .expect("reaches the engine");
    assert_eq!(resp.status(), 400);
    engine.stop().await;
}
