//! Which upstream failures are retried (and may fall back to the next model of a group), judged
//! by what the upstream itself counted: only failures that prove the request was not processed
//! (connection refused, 429, 5xx head) are tried again; a request whose body was written and
//! whose answer was then lost, or a 2xx answer whose connection broke, is never sent twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use keyhaven::model::CallStatus;

use crate::support::fixtures::{Case, request, upstream_sse};
use crate::support::{Client, MockUpstream, Reply, TestEngine, Up, config_with};

const RATE_LIMITED: &str = r#"{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}"#;
const BUSY: &str = r#"{"error":{"message":"busy","type":"server_error"}}"#;

/// `oa-model` (and the other two kinds) on `first`, `m-b` on `second`; group `g` tries them in
/// that order.
fn group_config(first: &str, second: &str) -> String {
    let tables = format!(
        r#"
[[providers]]
name = "pb"
kind = "openai"
base_url = "{second}/b/v1"
key = "keyring:test-key-b"

[[models]]
name = "m-b"
provider = "pb"
upstream = "b-upstream"

[[groups]]
name = "g"
models = ["oa-model", "m-b"]
"#
    );
    config_with(first, "", &tables)
}

async fn start_engine(first: &str, second: &str) -> TestEngine {
    // A key is bound to the one origin it is first used with: the second server has its own.
    let keyring = std::sync::Arc::new(keyhaven::secrets::MemoryKeyring::default());
    keyhaven::secrets::Keyring::set(
        keyring.as_ref(),
        "test-key-b",
        &secrecy::SecretString::from(crate::support::CANARY_KEY),
    )
    .expect("key");
    TestEngine::start_with_keyring(tempfile::tempdir().expect("dir"), &group_config(first, second), keyring).await
}

/// What a raw upstream does once it has read a whole request (head and body).
#[derive(Debug, Clone, Copy)]
enum Behaviour {
    /// Closes the socket without a byte of answer.
    CloseAfterBody,
    /// Sends a 200 SSE head (chunked) and `events` whole SSE events of an OpenAI stream, then
    /// drops the connection without the terminating chunk.
    HeadThenDrop { events: usize },
}

/// A hand-rolled HTTP/1.1 upstream on 127.0.0.1:0 that counts the requests it read completely.
struct RawUpstream {
    url: String,
    processed: Arc<AtomicUsize>,
}

impl RawUpstream {
    async fn start(behaviour: Behaviour) -> RawUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let processed = Arc::new(AtomicUsize::new(0));
        let count = processed.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let count = count.clone();
                tokio::spawn(async move { serve(sock, behaviour, count).await });
            }
        });
        RawUpstream { url, processed }
    }

    fn processed(&self) -> usize {
        self.processed.load(Ordering::SeqCst)
    }
}

async fn serve(mut sock: TcpStream, behaviour: Behaviour, count: Arc<AtomicUsize>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    // Read the head, then exactly content-length bytes of body.
    let body_start = loop {
        let Ok(n) = sock.read(&mut chunk).await else { return };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..body_start]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("the engine sends a content-length");
    while buf.len() < body_start + length {
        let Ok(n) = sock.read(&mut chunk).await else { return };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body: Value = serde_json::from_slice(&buf[body_start..body_start + length]).expect("a JSON body");
    assert!(body.get("model").is_some(), "{body}");
    count.fetch_add(1, Ordering::SeqCst);
    match behaviour {
        Behaviour::CloseAfterBody => {}
        Behaviour::HeadThenDrop { events } => {
            let mut out = String::from(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
            );
            for ev in upstream_sse(Up::Openai, Case::Text).split_inclusive("\n\n").take(events) {
                out.push_str(&format!("{:x}\r\n{ev}\r\n", ev.len()));
            }
            let _ = sock.write_all(out.as_bytes()).await;
            let _ = sock.flush().await;
            // Let the client read what was sent before the connection goes.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Dropping the socket closes it: no terminating chunk, no answer.
}

fn dead_url() -> String {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", dead.local_addr().expect("addr"));
    drop(dead);
    url
}

#[tokio::test]
async fn connection_refused_is_retried_then_falls_back() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let engine = start_engine(&dead_url(), &mock.url()).await;

    // Alone, the model is tried 1 + 2 times.
    let resp = engine.post(Client::Openai, &request(Client::Openai, "oa-model", true, Case::Text)).await;
    assert_eq!(resp.status(), 502);
    assert_eq!(resp.headers()["x-keyhaven-attempts"], "3");
    let _ = resp.text().await;
    let row = engine.only_call().await;
    assert_eq!(row.summary.error_kind.as_deref(), Some("connect"));
    assert_eq!(row.summary.retries, 2);

    // In a group, the refused model hands over to the next one.
    let resp = engine.post(Client::Openai, &request(Client::Openai, "g", false, Case::Text)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-keyhaven-fallbacks"], "oa-model");
    assert_eq!(resp.headers()["x-keyhaven-model"], "m-b");
    let body: Value = resp.json().await.expect("json");
    assert_eq!(body["choices"][0]["message"]["content"], "Hello world", "{body}");
    assert_eq!(mock.seen().len(), 1, "the second model was asked once");
    engine.stop().await;
}

#[tokio::test]
async fn a_request_read_and_never_answered_is_not_retried_nor_falls_back() {
    let raw = RawUpstream::start(Behaviour::CloseAfterBody).await;
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let engine = start_engine(&raw.url, &mock.url()).await;

    for (client, model) in [(Client::Openai, "oa-model"), (Client::Anthropic, "g")] {
        let before = raw.processed();
        let resp = engine.post(client, &request(client, model, false, Case::Text)).await;
        assert_eq!(resp.status(), 502, "{model}");
        assert_eq!(resp.headers()["x-keyhaven-attempts"], "1", "{model}");
        assert!(resp.headers().get("x-keyhaven-fallbacks").is_none(), "{model}");
        let body: Value = resp.json().await.expect("json");
        let message = body["error"]["message"].as_str().expect("message");
        assert!(message.contains("the request reached the provider, but the answer was lost"), "{body}");
        assert_eq!(raw.processed(), before + 1, "{model}: the upstream processed it exactly once");
    }
    assert!(mock.seen().is_empty(), "never handed to the next model of the group");
    let rows = engine.wait_calls(2).await;
    for row in rows {
        assert_eq!(row.summary.status, CallStatus::Error);
        assert_eq!(row.summary.error_kind.as_deref(), Some("answer_lost"));
        assert_eq!(row.summary.retries, 0);
        assert_eq!(row.summary.http_status, Some(502));
    }
    engine.stop().await;
}

#[tokio::test]
async fn a_2xx_head_then_a_dropped_connection_is_not_retried() {
    // The connection breaks right after the head: nothing reached the client yet, still no retry.
    let raw = RawUpstream::start(Behaviour::HeadThenDrop { events: 0 }).await;
    let mock = MockUpstream::start().await;
    let engine = start_engine(&raw.url, &mock.url()).await;
    let resp = engine.post(Client::Openai, &request(Client::Openai, "g", true, Case::Text)).await;
    assert_eq!(resp.status(), 502);
    assert_eq!(resp.headers()["x-keyhaven-attempts"], "1");
    let _ = resp.text().await;
    assert_eq!(raw.processed(), 1);
    assert!(mock.seen().is_empty(), "no fallback after a 2xx head");
    let row = engine.only_call().await;
    assert_eq!((row.summary.status, row.summary.retries), (CallStatus::Error, 0));
    assert_eq!(row.summary.error_kind.as_deref(), Some("answer_lost"));
    engine.stop().await;

    // Mid-stream: the client has its 200 and part of the answer, then one terminal error.
    let raw = RawUpstream::start(Behaviour::HeadThenDrop { events: 2 }).await;
    let engine = start_engine(&raw.url, &mock.url()).await;
    let resp = engine.post(Client::Anthropic, &request(Client::Anthropic, "oa-model", true, Case::Text)).await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.expect("body");
    assert!(text.contains("event: content_block_delta"), "{text}");
    assert!(text.contains("event: error"), "{text}");
    assert!(text.contains("the answer was lost"), "{text}");
    assert_eq!(raw.processed(), 1, "never a retry after the first byte");
    let row = engine.only_call().await;
    assert_eq!((row.summary.status, row.summary.retries), (CallStatus::Error, 0));
    assert_eq!(row.summary.error_kind.as_deref(), Some("answer_lost"));
    engine.stop().await;
}

#[tokio::test]
async fn a_429_then_success_is_retried_once() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::json(429, RATE_LIMITED).header("retry-after-ms", "20"));
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let engine = start_engine(&mock.url(), &dead_url()).await;
    let resp = engine.post(Client::Responses, &request(Client::Responses, "oa-model", false, Case::Text)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-keyhaven-attempts"], "2");
    let _ = resp.text().await;
    assert_eq!(mock.seen().len(), 2, "one refusal, one answer");
    let row = engine.only_call().await;
    assert_eq!((row.summary.status, row.summary.retries), (CallStatus::Ok, 1));
    engine.stop().await;
}

#[tokio::test]
async fn a_503_head_is_retried() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::json(503, BUSY));
    mock.push(Reply::json(503, BUSY));
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let engine = start_engine(&mock.url(), &dead_url()).await;
    let resp = engine.post(Client::Openai, &request(Client::Openai, "oa-model", true, Case::Text)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-keyhaven-attempts"], "3");
    let _ = resp.text().await;
    assert_eq!(mock.seen().len(), 3, "two refusals, one answer");
    let row = engine.only_call().await;
    assert_eq!((row.summary.status, row.summary.retries), (CallStatus::Ok, 2));
    engine.stop().await;
}
