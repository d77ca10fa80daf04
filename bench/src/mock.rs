//! An in-process mock of an OpenAI-compatible upstream: `POST /v1/chat/completions` answering
//! with a whole JSON completion when the body's `"stream"` is false or absent, and with SSE when
//! it is true (`chunks` text deltas `chunk_delay` apart, then a finish chunk, a usage chunk with
//! `prompt_tokens_details.cached_tokens`, and `data: [DONE]`). Every answer waits `latency`
//! first. Listens on 127.0.0.1 only.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::ListenerExt as _;
use bytes::Bytes;
use futures::StreamExt as _;
use serde_json::{Value, json};

/// How the mock answers. The stream shape can change between phases ([`Mock::set_stream`]),
/// because Keyhaven always streams from its upstream: the non-streaming phase wants the engine's
/// upstream stream without inter-chunk delays, the streaming phase wants them.
#[derive(Debug)]
struct MockConfig {
    /// Waited before any answer (before the first byte of a stream).
    latency: Duration,
    /// Text deltas per answer (at least 1); the whole JSON answer holds the same text.
    chunks: AtomicU32,
    /// Delay between streamed text deltas, in microseconds.
    chunk_delay_us: AtomicU64,
}

/// A running mock; [`Mock::stop`] ends it.
#[derive(Debug)]
pub struct Mock {
    pub addr: SocketAddr,
    config: Arc<MockConfig>,
    task: tokio::task::JoinHandle<()>,
}

impl Mock {
    pub async fn start(latency: Duration, chunks: u32, chunk_delay: Duration) -> anyhow::Result<Mock> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        // Without TCP_NODELAY, Nagle's algorithm holds back small SSE writes until the peer's
        // delayed ACK (~40 ms on Linux), which would be the mock's fault, not Keyhaven's.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let config = Arc::new(MockConfig { latency, chunks: AtomicU32::new(1), chunk_delay_us: AtomicU64::new(0) });
        let app = Router::new().route("/v1/chat/completions", post(completions)).with_state(config.clone());
        let task = tokio::spawn(async move {
            // The bench ends the task by aborting it; a serve error just ends the mock early,
            // which the load phases then report as errors.
            let _ = axum::serve(listener, app).await;
        });
        let mock = Mock { addr, config, task };
        mock.set_stream(chunks, chunk_delay);
        Ok(mock)
    }

    /// Sets the shape of answers from now on.
    pub fn set_stream(&self, chunks: u32, chunk_delay: Duration) {
        self.config.chunks.store(chunks.max(1), Ordering::Relaxed);
        let us = u64::try_from(chunk_delay.as_micros()).unwrap_or(u64::MAX);
        self.config.chunk_delay_us.store(us, Ordering::Relaxed);
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

const USAGE: &str =
    r#"{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20,"prompt_tokens_details":{"cached_tokens":4}}"#;

async fn completions(State(cfg): State<Arc<MockConfig>>, Json(body): Json<Value>) -> Response {
    let chunks = cfg.chunks.load(Ordering::Relaxed).max(1);
    let delay = Duration::from_micros(cfg.chunk_delay_us.load(Ordering::Relaxed));
    if !cfg.latency.is_zero() {
        tokio::time::sleep(cfg.latency).await;
    }
    let model = body.get("model").and_then(Value::as_str).unwrap_or("mock-model").to_owned();
    if body.get("stream").and_then(Value::as_bool) != Some(true) {
        let usage: Value = serde_json::from_str(USAGE).unwrap_or(Value::Null);
        return Json(json!({
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": (0..chunks).map(|i| format!("tok{i} ")).collect::<String>()},
                "finish_reason": "stop"
            }],
            "usage": usage
        }))
        .into_response();
    }
    let chunk = |delta: &str, finish: &str| {
        Bytes::from(format!(
            "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\
             \"model\":\"{model}\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        ))
    };
    let first = chunk(r#"{"role":"assistant","content":"tok0 "}"#, "null");
    let finish = chunk("{}", r#""stop""#);
    let usage = Bytes::from(format!(
        "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\
         \"model\":\"{model}\",\"choices\":[],\"usage\":{USAGE}}}\n\ndata: [DONE]\n\n"
    ));
    let rest: Vec<Bytes> = (1..chunks).map(|i| chunk(&format!(r#"{{"content":"tok{i} "}}"#), "null")).collect();
    let head = futures::stream::iter([Ok::<Bytes, std::io::Error>(first)]);
    let middle = futures::stream::iter(rest).then(move |b| async move {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        Ok(b)
    });
    let tail = futures::stream::iter([Ok(Bytes::from([finish, usage].concat()))]);
    let body = Body::from_stream(head.chain(middle).chain(tail));
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], body)
        .into_response()
}
