//! An in-process mock of an OpenAI-compatible upstream: `POST /v1/chat/completions` answering
//! with a whole JSON completion when the body's `"stream"` is false or absent, and with SSE when
//! it is true (`chunks` text deltas `chunk_delay` apart, then a finish chunk, a usage chunk with
//! `prompt_tokens_details.cached_tokens`, and `data: [DONE]`). Every answer waits `latency`
//! first. Listens on 127.0.0.1 only.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use futures::StreamExt as _;
use serde_json::{Value, json};

/// How the mock answers.
#[derive(Debug, Clone, Copy)]
pub struct MockConfig {
    /// Waited before any answer (before the first byte of a stream).
    pub latency: Duration,
    /// Text deltas per streamed answer (at least 1).
    pub chunks: u32,
    /// Delay between streamed text deltas.
    pub chunk_delay: Duration,
}

/// A running mock; dropping it leaves the server task running until the runtime ends.
#[derive(Debug)]
pub struct Mock {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Mock {
    pub async fn start(config: MockConfig) -> anyhow::Result<Mock> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = Router::new().route("/v1/chat/completions", post(completions)).with_state(config);
        let task = tokio::spawn(async move {
            // The bench ends the task by aborting it; a serve error just ends the mock early,
            // which the load phases then report as errors.
            let _ = axum::serve(listener, app).await;
        });
        Ok(Mock { addr, task })
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

const USAGE: &str =
    r#"{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20,"prompt_tokens_details":{"cached_tokens":4}}"#;

async fn completions(State(cfg): State<MockConfig>, Json(body): Json<Value>) -> Response {
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
                "message": {"role": "assistant", "content": "Hello from the mock upstream."},
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
    let rest: Vec<Bytes> = (1..cfg.chunks.max(1)).map(|i| chunk(&format!(r#"{{"content":"tok{i} "}}"#), "null")).collect();
    let delay = cfg.chunk_delay;
    let head = futures::stream::iter([Ok::<Bytes, std::io::Error>(first)]);
    let middle = futures::stream::iter(rest).then(move |b| async move {
        tokio::time::sleep(delay).await;
        Ok(b)
    });
    let tail = futures::stream::iter([Ok(Bytes::from([finish, usage].concat()))]);
    let body = Body::from_stream(head.chain(middle).chain(tail));
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")],
        body,
    )
        .into_response()
}
