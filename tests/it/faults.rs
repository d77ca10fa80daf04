//! Upstream faults and client disconnects: retries only before the first byte, timeouts, clean
//! terminal errors, cancellation that reaches the upstream, and secrets that never leak.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use keyhaven::model::CallStatus;

use crate::support::fixtures::{Case, request, upstream_sse};
use crate::support::{CANARY_KEY, Client, MockUpstream, Reply, TestEngine, Up};

const RATE_LIMITED: &str = r#"{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}"#;

#[tokio::test]
async fn retries_429_honouring_retry_after_then_succeeds() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::json(429, RATE_LIMITED).header("retry-after", "1"));
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let engine = TestEngine::start(&mock).await;
    let t = Instant::now();
    let resp = engine.post(Client::Openai, &request(Client::Openai, "oa-model", true, Case::Text)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-keyhaven-attempts"], "2");
    // The second wait was the upstream's, not the engine's.
    let overhead: f64 = resp.headers()["x-keyhaven-overhead-ms"].to_str().expect("ascii").parse().expect("number");
    assert!(overhead < 200.0, "overhead {overhead} ms must exclude the Retry-After wait");
    let _ = resp.text().await;
    assert!(t.elapsed() >= Duration::from_millis(950), "waited out Retry-After: {:?}", t.elapsed());
    assert_eq!(mock.seen().len(), 2);
    let row = engine.only_call().await;
    assert_eq!((row.summary.status, row.summary.retries), (CallStatus::Ok, 1));
    engine.stop().await;
}

#[tokio::test]
async fn long_retry_after_is_passed_to_the_client() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::json(429, RATE_LIMITED).header("retry-after", "120"));
    let engine = TestEngine::start(&mock).await;
    for client in [Client::Openai, Client::Anthropic] {
        let model = if client == Client::Openai { "oa-model" } else { "an-model" };
        let resp = engine.post(client, &request(client, model, true, Case::Text)).await;
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()["retry-after"], "120");
        let body: Value = resp.json().await.expect("json");
        // Both dialects keep the message under error.message.
        assert_eq!(body["error"]["message"], "Rate limit reached", "{body}");
    }
    assert_eq!(mock.seen().len(), 2, "no retry for either client");
    engine.stop().await;
}

#[tokio::test]
async fn server_errors_retry_at_most_twice() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::json(503, r#"{"error":{"message":"busy","type":"server_error"}}"#));
    let engine = TestEngine::start(&mock).await;
    mock.push(
        Reply::json(503, r#"{"error":{"message":"busy","type":"server_error"}}"#)
            .head_delay(Duration::from_millis(300)),
    );
    let resp = engine.post(Client::Anthropic, &request(Client::Anthropic, "oa-model", false, Case::Text)).await;
    assert_eq!(resp.status(), 503);
    let overhead: f64 = resp.headers()["x-keyhaven-overhead-ms"].to_str().expect("ascii").parse().expect("number");
    assert!(overhead < 300.0, "overhead {overhead} ms must exclude three slow upstream attempts");
    assert_eq!(mock.seen().len(), 3, "1 attempt + 2 retries");
    let row = engine.only_call().await;
    assert_eq!((row.summary.status, row.summary.retries), (CallStatus::Error, 2));
    assert_eq!(row.summary.http_status, Some(503));
    engine.stop().await;
}

#[tokio::test]
async fn client_errors_are_not_retried_and_keep_the_upstream_message() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::json(
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens too large"}}"#,
    ));
    let engine = TestEngine::start(&mock).await;
    let resp = engine.post(Client::Openai, &request(Client::Openai, "an-model", false, Case::Text)).await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.expect("json");
    assert_eq!(body["error"]["message"], "max_tokens too large");
    assert_eq!(mock.seen().len(), 1);
    engine.stop().await;
}

#[tokio::test]
async fn unreachable_upstream_is_a_502_after_retries() {
    let mock = MockUpstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    // A port nothing listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", dead.local_addr().expect("addr"));
    drop(dead);
    let engine = TestEngine::start_in(dir, &crate::support::config_text(&url, "")).await;
    let resp = engine.post(Client::Openai, &request(Client::Openai, "oa-model", true, Case::Text)).await;
    assert_eq!(resp.status(), 502);
    let row = engine.only_call().await;
    assert_eq!(row.summary.error_kind.as_deref(), Some("connect"));
    assert_eq!(row.summary.retries, 2);
    drop(mock);
    engine.stop().await;
}

#[tokio::test]
async fn first_byte_timeout_is_a_504_and_idle_timeout_ends_the_stream() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)).head_delay(Duration::from_secs(3)));
    let dir = tempfile::tempdir().expect("dir");
    let config = crate::support::config_with(&mock.url(), "", "\n[timeouts]\nfirst_byte = 300\nidle = 300\n");
    let engine = TestEngine::start_in(dir, &config).await;
    let resp = engine.post(Client::Openai, &request(Client::Openai, "oa-model", true, Case::Text)).await;
    assert_eq!(resp.status(), 504);
    assert_eq!(mock.seen().len(), 1, "a first-byte timeout is ambiguous: never retried");

    // Headers and one chunk, then silence: the stream ends with a terminal error.
    let partial = upstream_sse(Up::Openai, Case::Text).split_inclusive("\n\n").take(2).collect::<String>();
    mock.push(Reply::sse(&partial).hang());
    let t = Instant::now();
    let resp = engine.post(Client::Openai, &request(Client::Openai, "oa-model", true, Case::Text)).await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.expect("body");
    assert!(t.elapsed() < Duration::from_secs(3), "idle timeout fired: {:?}", t.elapsed());
    assert!(text.contains("\"error\""), "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let rows = engine.wait_calls(2).await;
    assert!(rows.iter().all(|r| r.summary.status == CallStatus::Error));
    assert!(rows.iter().any(|r| r.summary.error_kind.as_deref() == Some("timeout")));
    engine.stop().await;
}

#[tokio::test]
async fn upstream_cut_mid_stream_is_one_attempt_and_a_terminal_error() {
    let mock = MockUpstream::start().await;
    let cut = upstream_sse(Up::Anthropic, Case::Text).split_inclusive("\n\n").take(4).collect::<String>();
    mock.push(Reply::sse(&cut));
    let engine = TestEngine::start(&mock).await;
    let resp = engine.post(Client::Anthropic, &request(Client::Anthropic, "an-model", true, Case::Text)).await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.expect("body");
    assert!(text.contains("event: error"), "{text}");
    assert!(text.contains("closed the stream before it finished"), "{text}");
    assert_eq!(mock.seen().len(), 1, "never a retry after the first byte");
    let row = engine.only_call().await;
    assert_eq!(row.summary.status, CallStatus::Error);
    assert_eq!(row.summary.error_kind.as_deref(), Some("upstream_disconnected"));
    assert_eq!(row.summary.usage.input_tokens, 20, "partial usage kept");
    engine.stop().await;
}

#[tokio::test]
async fn client_disconnect_cancels_the_upstream_quickly() {
    let mock = MockUpstream::start().await;
    let long: String = std::iter::repeat_n(
        upstream_sse(Up::Openai, Case::Text).split_inclusive("\n\n").nth(1).unwrap_or_default().to_owned(),
        200,
    )
    .collect();
    mock.push(Reply::sse(&long).delay(Duration::from_millis(50)));
    let engine = TestEngine::start(&mock).await;
    let mut resp = engine.post(Client::Openai, &request(Client::Openai, "oa-model", true, Case::Text)).await;
    assert_eq!(resp.status(), 200);
    let first = resp.chunk().await.expect("chunk");
    assert!(first.is_some());
    let dropped = Instant::now();
    drop(resp);
    let mut waited = Duration::ZERO;
    while mock.dropped_at().is_empty() && waited < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(5)).await;
        waited += Duration::from_millis(5);
    }
    let at = *mock.dropped_at().first().expect("the upstream saw the disconnect");
    assert!(
        at.duration_since(dropped) < Duration::from_millis(250),
        "upstream closed after {:?}",
        at.duration_since(dropped)
    );
    let row = engine.only_call().await;
    assert_eq!(row.summary.status, CallStatus::Canceled);
    assert!(row.summary.usage_estimated);
    assert!(row.summary.usage.output_tokens > 0, "partial output counted");
    engine.stop().await;
}

#[tokio::test]
async fn keys_reach_the_upstream_header_and_nowhere_else() {
    let mock = MockUpstream::start().await;
    // The upstream error echoes the key back, as some do.
    mock.push(Reply::json(
        401,
        &format!(r#"{{"error":{{"message":"bad key {CANARY_KEY}","type":"authentication_error"}}}}"#),
    ));
    mock.push(Reply::sse(&upstream_sse(Up::Anthropic, Case::Text)));
    let engine = TestEngine::start(&mock).await;
    let r1 = engine.post(Client::Openai, &request(Client::Openai, "oa-model", false, Case::Text)).await;
    let r1_body = r1.text().await.expect("body");
    let r2 = engine.post(Client::Anthropic, &request(Client::Anthropic, "an-model", false, Case::Text)).await;
    let r2_body = r2.text().await.expect("body");
    let seen = mock.seen();
    assert_eq!(seen[0].headers["authorization"], format!("Bearer {CANARY_KEY}"));
    assert_eq!(seen[1].headers["x-api-key"], CANARY_KEY);
    engine.wait_calls(2).await;
    let dir = engine.stop().await;
    assert!(!r1_body.contains(CANARY_KEY), "an upstream error echoing the key is redacted: {r1_body}");
    assert!(!r2_body.contains(CANARY_KEY));
    let mut files = Vec::new();
    walk(dir.path(), &mut files);
    assert!(files.iter().any(|f| f.ends_with("keyhaven.db")), "{files:?}");
    for file in files {
        let bytes = std::fs::read(&file).expect("read");
        let hit = bytes.windows(CANARY_KEY.len()).any(|w| w == CANARY_KEY.as_bytes());
        assert!(!hit, "the key leaked into {}", file.display());
    }
}

/// Every file below `dir` (the database, its WAL, the CA directory, ...).
fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[tokio::test]
async fn client_giving_up_on_a_whole_answer_cancels_the_upstream() {
    let mock = MockUpstream::start().await;
    let one = upstream_sse(Up::Openai, Case::Text).split_inclusive("\n\n").nth(1).unwrap_or_default().to_owned();
    mock.push(Reply::sse(&one.repeat(100)).delay(Duration::from_millis(50)));
    let engine = TestEngine::start(&mock).await;
    let client = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().expect("client");
    let sent = client
        .post(engine.url("/v1/chat/completions"))
        .json(&request(Client::Openai, "oa-model", false, Case::Text))
        .send()
        .await;
    assert!(sent.is_err(), "the client timed out");
    let gave_up = Instant::now();
    let mut waited = Duration::ZERO;
    while mock.dropped_at().is_empty() && waited < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(5)).await;
        waited += Duration::from_millis(5);
    }
    let at = *mock.dropped_at().first().expect("the upstream saw the disconnect");
    assert!(at.saturating_duration_since(gave_up) < Duration::from_millis(250));
    let row = engine.only_call().await;
    assert_eq!(row.summary.status, CallStatus::Canceled);
    engine.stop().await;
}

#[tokio::test]
async fn refused_calls_record_no_estimated_usage() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::json(400, r#"{"error":{"message":"bad","type":"invalid_request_error"}}"#));
    let engine = TestEngine::start(&mock).await;
    let resp = engine.post(Client::Openai, &request(Client::Openai, "oa-model", true, Case::Text)).await;
    assert_eq!(resp.status(), 400);
    let row = engine.only_call().await;
    assert_eq!(row.summary.usage, keyhaven::model::Usage::default());
    assert!(!row.summary.usage_estimated);
    assert_eq!(row.summary.cost_micros.unwrap_or(0), 0);
    engine.stop().await;
}
