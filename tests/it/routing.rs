//! Model groups: fallback in order on connect errors, 429 and 5xx before the first byte, never
//! after it; per-provider cooldown and recovery; per-model timeouts; headers and call rows that
//! name the model that served.

use std::time::Duration;

use keyhaven::model::CallStatus;

use crate::support::fixtures::{Case, request, upstream_sse};
use crate::support::{Client, MockUpstream, Reply, TestEngine, Up, config_with};

const BUSY: &str = r#"{"error":{"message":"busy","type":"server_error"}}"#;

/// Two OpenAI-kind providers on the same mock (told apart by path), one model each, a group.
fn group_config(mock: &MockUpstream, routing: &str) -> String {
    let url = mock.url();
    let tables = format!(
        r#"
[[providers]]
name = "pb"
kind = "openai"
base_url = "{url}/b/v1"
key = "keyring:test-key"

[[models]]
name = "m-b"
provider = "pb"
upstream = "b-upstream"

[[models]]
name = "slow-model"
provider = "oa"
upstream = "slow"
timeouts = {{ first_byte = 200 }}

[[groups]]
name = "smart"
models = ["oa-model", "m-b"]

{routing}
"#
    );
    config_with(&url, "", &tables)
}

async fn engine(mock: &MockUpstream, routing: &str) -> TestEngine {
    TestEngine::start_in(tempfile::tempdir().expect("dir"), &group_config(mock, routing)).await
}

fn paths(mock: &MockUpstream) -> Vec<String> {
    mock.seen().into_iter().map(|s| s.path).collect()
}

#[tokio::test]
async fn a_group_falls_back_in_order_and_says_so() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::json(503, BUSY));
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let engine = engine(&mock, "").await;
    let resp = engine.post(Client::Anthropic, &request(Client::Anthropic, "smart", false, Case::Text)).await;
    assert_eq!(resp.status(), 200);
    let h = resp.headers();
    assert_eq!(h["x-keyhaven-model"], "m-b");
    assert_eq!(h["x-keyhaven-provider"], "pb");
    assert_eq!(h["x-keyhaven-attempts"], "2");
    assert_eq!(h["x-keyhaven-fallbacks"], "oa-model");
    let _ = resp.text().await;
    assert_eq!(paths(&mock), ["/v1/chat/completions", "/b/v1/chat/completions"], "one attempt on the first model");
    let row = engine.only_call().await;
    assert_eq!(row.summary.status, CallStatus::Ok);
    assert_eq!(row.summary.model, "smart");
    assert_eq!(row.summary.provider.as_deref(), Some("pb"), "the row names the model that served");
    assert_eq!(row.summary.upstream_model.as_deref(), Some("b-upstream"));
    assert_eq!(row.summary.retries, 1);
    engine.stop().await;
}

#[tokio::test]
async fn client_errors_do_not_fall_back_and_the_last_model_keeps_its_retries() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::json(400, r#"{"error":{"message":"bad","type":"invalid_request_error"}}"#));
    let engine = engine(&mock, "").await;
    let resp = engine.post(Client::Openai, &request(Client::Openai, "smart", false, Case::Text)).await;
    assert_eq!(resp.status(), 400);
    assert_eq!(paths(&mock).len(), 1);

    // All fail with 503: one attempt on the first, then 1 + 2 retries on the last.
    mock.push(Reply::json(503, BUSY));
    let resp = engine.post(Client::Openai, &request(Client::Openai, "smart", false, Case::Text)).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["x-keyhaven-attempts"], "4");
    assert_eq!(resp.headers()["x-keyhaven-fallbacks"], "oa-model");
    assert_eq!(paths(&mock).len(), 5);
    engine.stop().await;
}

#[tokio::test]
async fn never_a_fallback_after_the_first_byte() {
    let mock = MockUpstream::start().await;
    let engine = engine(&mock, "").await;
    for client in [Client::Openai, Client::Anthropic] {
        mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::ErrorMidStream)));
        mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
        let before = paths(&mock).len();
        let resp = engine.post(client, &request(client, "smart", true, Case::Text)).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["x-keyhaven-model"], "oa-model");
        let text = resp.text().await.expect("body");
        assert!(text.contains("overloaded"), "the mid-stream error reaches the client: {text}");
        assert_eq!(paths(&mock).len(), before + 1, "no second attempt after the first byte");
        // Drain the unused reply so the next client starts with the failing one.
        let _ = engine.post(client, &request(client, "smart", false, Case::Text)).await.text().await;
    }
    engine.stop().await;
}

#[tokio::test]
async fn a_failing_provider_cools_down_then_recovers() {
    let mock = MockUpstream::start().await;
    let engine = engine(&mock, "[routing]\ncooldown_failures = 2\ncooldown_window = 60000\ncooldown = 400\n").await;
    let ok = || Reply::sse(&upstream_sse(Up::Openai, Case::Text));
    for _ in 0..2 {
        mock.push(Reply::json(503, BUSY));
        mock.push(ok());
        let resp = engine.post(Client::Openai, &request(Client::Openai, "smart", false, Case::Text)).await;
        assert_eq!(resp.headers()["x-keyhaven-model"], "m-b");
    }
    let health = engine.handle.gateway.provider_health();
    let oa = health.iter().find(|h| h.provider == "oa").expect("oa row");
    assert!(oa.cooling_down && oa.cooldown_remaining_ms <= 400, "{oa:?}");
    assert_eq!(oa.total_failures, 2);
    assert!(!health.iter().find(|h| h.provider == "pb").expect("pb row").cooling_down);

    // While cooling down, the group skips the provider without calling it.
    let before = paths(&mock).len();
    mock.push(ok());
    let resp = engine.post(Client::Openai, &request(Client::Openai, "smart", false, Case::Text)).await;
    assert_eq!(resp.headers()["x-keyhaven-model"], "m-b");
    assert_eq!(resp.headers()["x-keyhaven-attempts"], "1");
    assert_eq!(resp.headers()["x-keyhaven-fallbacks"], "oa-model");
    assert_eq!(paths(&mock)[before..], ["/b/v1/chat/completions"]);

    // After the cooldown, it is tried first again.
    tokio::time::sleep(Duration::from_millis(450)).await;
    mock.push(ok());
    let resp = engine.post(Client::Openai, &request(Client::Openai, "smart", false, Case::Text)).await;
    assert_eq!(resp.headers()["x-keyhaven-model"], "oa-model");
    assert!(resp.headers().get("x-keyhaven-fallbacks").is_none());
    assert!(!engine.handle.gateway.provider_health().iter().any(|h| h.cooling_down));
    engine.stop().await;
}

#[tokio::test]
async fn per_model_first_byte_timeout() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)).head_delay(Duration::from_secs(2)));
    let engine = engine(&mock, "").await;
    let t = tokio::time::Instant::now();
    let resp = engine.post(Client::Openai, &request(Client::Openai, "slow-model", false, Case::Text)).await;
    assert_eq!(resp.status(), 504);
    assert!(t.elapsed() < Duration::from_millis(1500), "{:?}", t.elapsed());
    engine.stop().await;
}
