//! A scriptable mock upstream on 127.0.0.1:0. It records every request it sees and answers from
//! a queue of [`Reply`]s (the latest one repeats). It notices when the engine drops a streamed
//! response before the end, and when.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Body pieces, sent `delay` apart.
    pub chunks: Vec<String>,
    pub delay: Duration,
    /// Wait this long before the response head.
    pub head_delay: Duration,
    /// After the chunks, keep the stream open (silent) instead of ending it.
    pub hang: bool,
    /// After this many chunks, wait for a permit of the semaphore before sending the rest.
    pub gate: Option<(usize, Arc<tokio::sync::Semaphore>)>,
}

impl Reply {
    pub fn sse(text: &str) -> Reply {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            chunks: split_events(text),
            delay: Duration::ZERO,
            head_delay: Duration::ZERO,
            hang: false,
            gate: None,
        }
    }

    pub fn json(status: u16, body: &str) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            chunks: vec![body.to_owned()],
            delay: Duration::ZERO,
            head_delay: Duration::ZERO,
            hang: false,
            gate: None,
        }
    }

    pub fn header(mut self, k: &str, v: &str) -> Reply {
        self.headers.push((k.into(), v.into()));
        self
    }

    pub fn delay(mut self, d: Duration) -> Reply {
        self.delay = d;
        self
    }

    pub fn head_delay(mut self, d: Duration) -> Reply {
        self.head_delay = d;
        self
    }

    pub fn hang(mut self) -> Reply {
        self.hang = true;
        self
    }

    /// Sends `chunks` chunks, then waits until `gate` gives a permit before the rest.
    pub fn gate(mut self, chunks: usize, gate: Arc<tokio::sync::Semaphore>) -> Reply {
        self.gate = Some((chunks, gate));
        self
    }
}

/// Splits SSE text into one chunk per event, so fragments really arrive separately.
fn split_events(text: &str) -> Vec<String> {
    text.split_inclusive("\n\n").map(str::to_owned).collect()
}

#[derive(Debug, Clone)]
pub struct Seen {
    /// When the request arrived.
    pub at: Instant,
    pub path: String,
    pub headers: HeaderMap,
    pub body: serde_json::Value,
}

#[derive(Debug, Default)]
struct Inner {
    replies: VecDeque<Reply>,
    /// The latest reply taken; it answers again when the queue is empty.
    last: Option<Reply>,
    seen: Vec<Seen>,
    /// When a streamed body was dropped before its end.
    dropped_at: Vec<Instant>,
}

#[derive(Debug, Clone)]
pub struct MockUpstream {
    addr: std::net::SocketAddr,
    inner: Arc<Mutex<Inner>>,
}

impl MockUpstream {
    pub async fn start() -> MockUpstream {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let app = axum::Router::new().fallback(handle).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind mock");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        MockUpstream { addr, inner }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues a reply; once the queue is empty, the latest reply taken keeps answering.
    pub fn push(&self, reply: Reply) -> &Self {
        self.inner.lock().expect("lock").replies.push_back(reply);
        self
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.inner.lock().expect("lock").seen.clone()
    }

    pub fn dropped_at(&self) -> Vec<Instant> {
        self.inner.lock().expect("lock").dropped_at.clone()
    }
}

struct DropWatch {
    inner: Arc<Mutex<Inner>>,
    finished: bool,
}

impl DropWatch {
    fn finish(&mut self) {
        self.finished = true;
    }
}

impl Drop for DropWatch {
    fn drop(&mut self) {
        if !self.finished
            && let Ok(mut i) = self.inner.lock()
        {
            i.dropped_at.push(Instant::now());
        }
    }
}

async fn handle(
    State(inner): State<Arc<Mutex<Inner>>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let reply = {
        let mut i = inner.lock().expect("lock");
        i.seen.push(Seen {
            at: Instant::now(),
            path: uri.path().to_owned(),
            headers,
            body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
        });
        match i.replies.pop_front() {
            Some(r) => {
                i.last = Some(r.clone());
                Some(r)
            }
            None => i.last.clone(),
        }
    };
    let Some(reply) = reply else {
        return Response::builder().status(500).body(Body::from("no reply scripted")).expect("response");
    };
    tokio::time::sleep(reply.head_delay).await;
    let watch = DropWatch { inner: inner.clone(), finished: false };
    let stream = futures::stream::unfold(
        (reply.chunks.clone().into_iter(), watch, reply.clone(), true, 0usize),
        |(mut it, mut watch, reply, first, sent)| async move {
            if !first && !reply.delay.is_zero() {
                tokio::time::sleep(reply.delay).await;
            }
            if let Some((n, gate)) = &reply.gate
                && sent == *n
            {
                gate.acquire().await.expect("gate open").forget();
            }
            match it.next() {
                Some(chunk) => Some((Ok::<_, Infallible>(Bytes::from(chunk)), (it, watch, reply, false, sent + 1))),
                None => {
                    if reply.hang {
                        std::future::pending::<()>().await;
                    }
                    watch.finish();
                    None
                }
            }
        },
    );
    let mut resp = Response::builder().status(StatusCode::from_u16(reply.status).expect("status"));
    for (k, v) in &reply.headers {
        resp = resp.header(k, v);
    }
    resp.body(Body::from_stream(stream)).expect("response")
}
