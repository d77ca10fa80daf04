//! FIM provider calls (Cursor Tab's models) against a scripted upstream in each FIM dialect: the
//! exact body Keyhaven sends (written by hand from the vendors' documentation: DeepSeek FIM
//! completion, Mistral `createFIMCompletion`, Ollama `/api/generate`), the streamed answer
//! decoded, and the call row (client `cursor-tab`, dialect, usage, cost).

use std::time::Duration;

use keyhaven::model::{CallStatus, FimRequest, StreamEvent};
use keyhaven::provider::CallContext;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::mock::Reply;
use crate::support::{MockUpstream, TestEngine, config_text};

/// FIM models on the mock: DeepSeek-style completions under `/beta`, Codestral under `/v1`, Ollama
/// at the server root (its base URL given with `/v1`, as users copy it from the OpenAI-compatible
/// docs). Prices are overrides: $1 / $2 per million input / output tokens.
pub fn fim_models(mock_url: &str) -> String {
    format!(
        r#"
[[providers]]
name = "ds"
kind = "openai"
base_url = "{mock_url}/beta"
key = "keyring:test-key"

[[providers]]
name = "mi"
kind = "openai"
base_url = "{mock_url}/v1"
key = "keyring:test-key"

[[providers]]
name = "ol"
kind = "openai"
base_url = "{mock_url}/v1"

[[models]]
name = "ds-fim"
provider = "ds"
upstream = "deepseek-chat"
fim = true
price = {{ input = "1.00", output = "2.00" }}

[[models]]
name = "codestral"
provider = "mi"
upstream = "codestral-latest"
fim = "codestral"
price = {{ input = "1.00", output = "2.00" }}

[[models]]
name = "qwen-fim"
provider = "ol"
upstream = "qwen2.5-coder:1.5b"
fim = "ollama"
"#
    )
}

fn ctx(id: &str) -> CallContext {
    CallContext {
        id: id.into(),
        dialect: "fim",
        client: "cursor-tab".into(),
        request_body: None,
        cancel: CancellationToken::new(),
        conversation_id: None,
        request_id: Some("tab-req-1".into()),
        session_id: None,
    }
}

fn request(model: &str) -> FimRequest {
    FimRequest {
        model: model.into(),
        prompt: "fn add(a: i32, b: i32) -> i32 {\n    ".into(),
        suffix: "\n}\n".into(),
        max_tokens: 64,
        stop: vec!["\n".into()],
        temperature: Some(0.0),
    }
}

async fn start(mock: &MockUpstream) -> TestEngine {
    let dir = tempfile::tempdir().expect("tempdir");
    TestEngine::start_in(dir, &(config_text(&mock.url(), "") + &fim_models(&mock.url()))).await
}

async fn text_of(te: &TestEngine, model: &str) -> String {
    let mut s = te.handle.gateway.fim(request(model), ctx("fim-1"), Duration::from_secs(5)).await.expect("accepted");
    let mut text = String::new();
    while let Some(ev) = s.next().await {
        match ev {
            StreamEvent::TextDelta { text: t } => text.push_str(&t),
            StreamEvent::Error { error } => panic!("error: {error:?}"),
            _ => {}
        }
    }
    text
}

#[tokio::test]
async fn completions_dialect_sends_prompt_and_suffix_and_records_the_call() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(concat!(
        "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"text\":\"a + \",\"index\":0,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"text\":\"b\",\"index\":0,\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":500,\"total_tokens\":1500}}\n\n",
        "data: [DONE]\n\n",
    )));
    let te = start(&mock).await;
    assert_eq!(text_of(&te, "ds-fim").await, "a + b");
    let seen = mock.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/beta/completions");
    assert_eq!(
        seen[0].body,
        json!({
            "model": "deepseek-chat",
            "prompt": "fn add(a: i32, b: i32) -> i32 {\n    ",
            "suffix": "\n}\n",
            "max_tokens": 64,
            "stop": ["\n"],
            "temperature": 0.0,
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
    assert_eq!(
        seen[0].headers.get("authorization").and_then(|v| v.to_str().ok()),
        Some(format!("Bearer {}", crate::support::CANARY_KEY).as_str())
    );
    let row = te.only_call().await.summary;
    assert_eq!(row.client, "cursor-tab");
    assert_eq!(row.dialect, "fim_completions");
    assert_eq!(row.status, CallStatus::Ok);
    assert_eq!(row.provider.as_deref(), Some("ds"));
    assert_eq!((row.usage.input_tokens, row.usage.output_tokens), (1000, 500));
    // 1000 × $1/M + 500 × $2/M = $0.002.
    assert_eq!(row.cost_micros, Some(2000));
    assert_eq!(row.request_id.as_deref(), Some("tab-req-1"));
}

#[tokio::test]
async fn codestral_dialect_uses_the_fim_endpoint_and_chunk_deltas() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(concat!(
        "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"model\":\"codestral-latest\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"a \"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"model\":\"codestral-latest\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"+ b\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":2000,\"completion_tokens\":0,\"total_tokens\":2000}}\n\n",
        "data: [DONE]\n\n",
    )));
    let te = start(&mock).await;
    assert_eq!(text_of(&te, "codestral").await, "a + b");
    let seen = mock.seen();
    assert_eq!(seen[0].path, "/v1/fim/completions");
    assert_eq!(
        seen[0].body,
        json!({
            "model": "codestral-latest",
            "prompt": "fn add(a: i32, b: i32) -> i32 {\n    ",
            "suffix": "\n}\n",
            "max_tokens": 64,
            "stop": ["\n"],
            "temperature": 0.0,
            "stream": true
        })
    );
    let row = te.only_call().await.summary;
    assert_eq!(row.dialect, "fim_codestral");
    assert_eq!(row.cost_micros, Some(2000));
}

#[tokio::test]
async fn ollama_dialect_posts_generate_with_suffix_and_options() {
    let mock = MockUpstream::start().await;
    let lines = concat!(
        "{\"model\":\"qwen2.5-coder:1.5b\",\"created_at\":\"2026-01-01T00:00:00Z\",\"response\":\"a + \",\"done\":false}\n",
        "{\"model\":\"qwen2.5-coder:1.5b\",\"created_at\":\"2026-01-01T00:00:00Z\",\"response\":\"b\",\"done\":false}\n",
        "{\"model\":\"qwen2.5-coder:1.5b\",\"created_at\":\"2026-01-01T00:00:00Z\",\"response\":\"\",\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":40,\"eval_count\":3}\n",
    );
    mock.push(Reply::json(200, lines).header("content-type", "application/x-ndjson"));
    let te = start(&mock).await;
    assert_eq!(text_of(&te, "qwen-fim").await, "a + b");
    let seen = mock.seen();
    assert_eq!(seen[0].path, "/api/generate");
    assert_eq!(
        seen[0].body,
        json!({
            "model": "qwen2.5-coder:1.5b",
            "prompt": "fn add(a: i32, b: i32) -> i32 {\n    ",
            "suffix": "\n}\n",
            "stream": true,
            "options": {"num_predict": 64, "stop": ["\n"], "temperature": 0.0}
        })
    );
    assert!(seen[0].headers.get("authorization").is_none(), "no key configured, none sent");
    let row = te.only_call().await.summary;
    assert_eq!(row.dialect, "fim_ollama");
    assert_eq!((row.usage.input_tokens, row.usage.output_tokens), (40, 3));
}

#[tokio::test]
async fn provider_error_is_recorded_and_a_chat_model_is_refused() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::json(401, r#"{"error":{"message":"Authentication Fails","type":"authentication_error"}}"#));
    let te = start(&mock).await;
    let err = te.handle.gateway.fim(request("ds-fim"), ctx("fim-e"), Duration::from_secs(5)).await.expect_err("401");
    assert!(err.error.to_string().contains("Authentication Fails"), "{}", err.error);
    let row = te.only_call().await.summary;
    assert_eq!(row.status, CallStatus::Error);
    assert_eq!(row.http_status, Some(401));
    let err = te.handle.gateway.fim(request("oa-model"), ctx("fim-c"), Duration::from_secs(5)).await.expect_err("chat");
    assert!(err.error.to_string().contains("not a FIM model"), "{}", err.error);
    assert_eq!(mock.seen().len(), 1, "a chat model is never sent a FIM request");
}

#[tokio::test]
async fn a_spent_refuse_budget_stops_tab_calls() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(concat!(
        "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"text\":\"b\",\"index\":0,\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":500,\"total_tokens\":1500}}\n\n",
        "data: [DONE]\n\n",
    )));
    let dir = tempfile::tempdir().expect("tempdir");
    let budget = "\n[[budgets]]\nname = \"tab-cap\"\nclient = \"cursor-tab\"\nperiod = \"day\"\nlimit_usd = 0.001\non_limit = \"refuse\"\n";
    let te = TestEngine::start_in(dir, &(config_text(&mock.url(), "") + &fim_models(&mock.url()) + budget)).await;
    // The first call costs $0.002, over the $0.001 cap.
    assert_eq!(text_of(&te, "ds-fim").await, "b");
    te.wait_calls(1).await;
    let err =
        te.handle.gateway.fim(request("ds-fim"), ctx("fim-2"), Duration::from_secs(5)).await.expect_err("refused");
    assert!(err.error.to_string().contains("tab-cap"), "{}", err.error);
    assert_eq!(mock.seen().len(), 1, "the refused call never reached the provider");
}
