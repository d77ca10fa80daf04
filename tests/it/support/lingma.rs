//! A mock Lingma IPC backend: a WebSocket server on 127.0.0.1:0 speaking JSON-RPC in
//! `Content-Length` frames, written from the public description of the assistant's protocol.
//! It answers `initialize`, `session/new` (`{sessionId}`), `session/set_model`,
//! `chat/deleteSessionById`, and streams each `session/prompt` back as `session/update`
//! notifications (`agent_message_chunk`… then the `chat_finish` notification) tagged with the
//! prompt's `_meta["ai-coding/request-id"]`. It records every request, and for image parts
//! whether the file behind the `lingma:///agent/file?path=` uri existed (and its mode) while the
//! prompt was being answered.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

/// How the mock answers one prompt.
#[derive(Debug, Clone)]
pub enum Behavior {
    /// These chunks, `delay` apart, then `chat_finish`.
    Answer { chunks: Vec<String>, delay: Duration },
    /// These chunks, then nothing, ever.
    Hang { chunks: Vec<String> },
}

impl Behavior {
    pub fn text(text: &str) -> Behavior {
        Behavior::Answer { chunks: split(text), delay: Duration::ZERO }
    }
}

/// Splits text into small chunks at char boundaries.
fn split(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(7).map(|c| c.iter().collect()).collect()
}

/// An image part as the mock saw it while answering.
#[derive(Debug, Clone)]
pub struct SeenImage {
    pub uri: String,
    pub mime: String,
    pub data: String,
    pub path: PathBuf,
    pub existed: bool,
    pub mode: Option<u32>,
}

#[derive(Debug, Default)]
struct State {
    /// Every request: (method, params).
    requests: Vec<(String, Value)>,
    behaviors: VecDeque<Behavior>,
    last: Option<Behavior>,
    sessions: u32,
    images: Vec<SeenImage>,
}

#[derive(Debug, Clone)]
pub struct MockLingma {
    pub port: u16,
    state: Arc<Mutex<State>>,
    stop: CancellationToken,
}

impl MockLingma {
    pub async fn start() -> MockLingma {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind mock lingma");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = CancellationToken::new();
        let (s, t) = (state.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = t.cancelled() => return,
                    a = listener.accept() => a,
                };
                let Ok((tcp, _)) = accepted else { continue };
                tokio::spawn(serve(tcp, s.clone(), t.clone()));
            }
        });
        MockLingma { port, state, stop }
    }

    /// Writes the assistant's cache file pointing at this server.
    pub fn write_info(&self, path: &Path) {
        let info = json!({"websocketPort": self.port, "pid": 4242, "ipcServerPath": "lingma-test"});
        std::fs::write(path, info.to_string()).expect("write info file");
    }

    /// Queues a behaviour; the latest one taken keeps answering.
    pub fn push(&self, b: Behavior) -> &Self {
        self.state.lock().expect("lock").behaviors.push_back(b);
        self
    }

    /// Closes the listener and every connection.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    pub fn requests(&self) -> Vec<(String, Value)> {
        self.state.lock().expect("lock").requests.clone()
    }

    /// The params of every request of `method`.
    pub fn calls(&self, method: &str) -> Vec<Value> {
        self.requests().into_iter().filter(|(m, _)| m == method).map(|(_, p)| p).collect()
    }

    pub fn images(&self) -> Vec<SeenImage> {
        self.state.lock().expect("lock").images.clone()
    }

    /// Waits until `n` requests of `method` arrived.
    pub async fn wait_for(&self, method: &str, n: usize) -> Vec<Value> {
        for _ in 0..300 {
            let calls = self.calls(method);
            if calls.len() >= n {
                return calls;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("mock lingma: {method} was not called {n} times; saw {:?}", self.requests());
    }
}

fn frame(v: &Value) -> Message {
    let body = v.to_string();
    Message::text(format!("Content-Length: {}\r\n\r\n{body}", body.len()))
}

/// Splits complete frames off `buf`.
fn frames(buf: &mut String) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(end) = buf.find("\r\n\r\n") {
        let len: usize = buf[..end]
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("frame has Content-Length");
        let start = end + 4;
        if buf.len() < start + len {
            break;
        }
        out.push(serde_json::from_str(&buf[start..start + len]).expect("frame body is JSON"));
        buf.drain(..start + len);
    }
    out
}

fn query_path(uri: &str) -> PathBuf {
    let raw = uri.split_once("?path=").map(|(_, p)| p).unwrap_or_default();
    let bytes = raw.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).expect("hex");
            out.push(u8::from_str_radix(hex, 16).expect("hex digit"));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    PathBuf::from(String::from_utf8(out).expect("utf-8 path"))
}

#[cfg(unix)]
fn mode_of(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).ok().map(|m| m.permissions().mode() & 0o777)
}

#[cfg(not(unix))]
fn mode_of(_: &Path) -> Option<u32> {
    None
}

async fn serve(tcp: tokio::net::TcpStream, state: Arc<Mutex<State>>, stop: CancellationToken) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else { return };
    let mut buf = String::new();
    loop {
        let msg = tokio::select! {
            () = stop.cancelled() => return,
            m = ws.next() => m,
        };
        match msg {
            Some(Ok(Message::Text(t))) => buf.push_str(t.as_str()),
            Some(Ok(_)) => continue,
            _ => return,
        }
        for req in frames(&mut buf) {
            let method = req["method"].as_str().unwrap_or_default().to_owned();
            let id = req["id"].clone();
            if method.is_empty() {
                continue; // an answer to something we never ask
            }
            state.lock().expect("lock").requests.push((method.clone(), req["params"].clone()));
            let result = match method.as_str() {
                "session/new" => {
                    let mut s = state.lock().expect("lock");
                    s.sessions += 1;
                    json!({"sessionId": format!("sess-{}", s.sessions)})
                }
                "session/prompt" => {
                    let behavior = {
                        let mut s = state.lock().expect("lock");
                        let b = s.behaviors.pop_front().or_else(|| s.last.clone()).unwrap_or(Behavior::text("ok"));
                        s.last = Some(b.clone());
                        b
                    };
                    for item in req["params"]["prompt"].as_array().into_iter().flatten() {
                        if item["type"] == "image" {
                            let uri = item["uri"].as_str().unwrap_or_default().to_owned();
                            let path = query_path(&uri);
                            let seen = SeenImage {
                                existed: path.exists(),
                                mode: mode_of(&path),
                                mime: item["mimeType"].as_str().unwrap_or_default().to_owned(),
                                data: item["data"].as_str().unwrap_or_default().to_owned(),
                                uri,
                                path,
                            };
                            state.lock().expect("lock").images.push(seen);
                        }
                    }
                    let rid = req["params"]["_meta"]["ai-coding/request-id"].clone();
                    let update = |u: Value| {
                        json!({"jsonrpc": "2.0", "method": "session/update",
                            "params": {"sessionId": req["params"]["sessionId"], "_meta": {"ai-coding/request-id": rid}, "update": u}})
                    };
                    let (chunks, delay, finish) = match behavior {
                        Behavior::Answer { chunks, delay } => (chunks, delay, true),
                        Behavior::Hang { chunks } => (chunks, Duration::ZERO, false),
                    };
                    for c in chunks {
                        if !delay.is_zero() {
                            tokio::time::sleep(delay).await;
                        }
                        let u = update(
                            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": c}}),
                        );
                        if ws.send(frame(&u)).await.is_err() {
                            return;
                        }
                    }
                    if !finish {
                        continue;
                    }
                    let u = update(
                        json!({"sessionUpdate": "notification", "type": "chat_finish", "data": {"reason": "stop"}}),
                    );
                    if ws.send(frame(&u)).await.is_err() {
                        return;
                    }
                    json!({"stopReason": "end_turn"})
                }
                _ => Value::Null,
            };
            if ws.send(frame(&json!({"jsonrpc": "2.0", "id": id, "result": result}))).await.is_err() {
                return;
            }
        }
    }
}
