//! The `lingma` provider kind: the local Tongyi Lingma IDE assistant's backend as an upstream.
//!
//! - **Transport** ([`transport`]): JSON-RPC 2.0 in `Content-Length` frames, over a WebSocket
//!   (`ws://127.0.0.1:{websocketPort}/`, the port read from the assistant's
//!   `SharedClientCache/.info.json` on every connect) or, on Windows, the named pipe
//!   `\\.\pipe\lingma-*` (tokio's named-pipe client; other builds say it is not supported).
//! - **One call** ([`Client::open`]): connect if needed (`initialize`), delete sessions an
//!   interrupted call left behind, `session/new` (fresh, or when the sticky session is missing),
//!   `session/set_model` (fresh, or when the sticky session's model changes), then
//!   `session/prompt` (a request whose answer is not awaited). `session/update` notifications of
//!   this request id (`_meta["ai-coding/request-id"]`) follow: `agent_message_chunk` becomes
//!   [`StreamEvent::TextDelta`], `agent_thought_chunk` thinking, and the `chat_finish`
//!   notification ends the answer ([`StopReason::EndTurn`]). No usage is reported, so the call
//!   row is estimated. A fresh session is deleted (`chat/deleteSessionById`, not awaited) when
//!   the answer ends; one a call abandoned (error, timeout, client gone) is deleted at the start
//!   of the next call, and an abandoned sticky session is dropped.
//! - **One request at a time**: the connection sits behind an async mutex held by the call's
//!   [`LingmaStream`] until the answer ends; a call that finds it taken waits only if fewer than
//!   `queue` calls already wait, otherwise it gets [`ProviderError::Busy`] (429).
//! - **Reconnect**: a transport failure drops the connection (and the sticky session); a failure
//!   on a connection kept from an earlier call is retried at once on a new connection; other
//!   failures before the first event are [`ProviderError::Connect`], which the gateway retries
//!   with its backoff — each retry re-reads the info file, so a restarted assistant on a new port
//!   is found.
//! - **No background task**: every read happens inline in the call that owns the connection, so
//!   nothing is spawned; notifications for other request ids are skipped, and requests from the
//!   backend get an empty result.
//! - **Images** of the latest user message are written to private (0600) files in the
//!   configured `temp_dir` and sent as `{type: "image", mimeType, uri:
//!   "lingma:///agent/file?path=…", data}` next to the text (in `prompt` and `contextParams`);
//!   the files are removed when the call ends, however it ends.
//! - **Timeout**: `timeout` (ms) bounds the whole call, queueing included.

mod prompt;
mod transport;

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use crate::config::{LingmaOptions, SessionMode};
use crate::model::{ErrorInfo, ErrorKind, ImageSource, StopReason, StreamEvent};
use crate::provider::error::ProviderError;

pub use prompt::{Prompt, build, model_id, parse_model_table, resolve_mode};
pub use transport::{Conn, Endpoint, SharedInfo, encode_frame, parse_info, resolve, take_frame, ws_url};

/// How long connecting (TCP and handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The per-provider clients, created on first use (and replaced when a provider's settings
/// change with a new catalog).
#[derive(Debug, Default)]
pub struct Registry {
    clients: Mutex<HashMap<String, Arc<Client>>>,
}

impl Registry {
    pub fn client(&self, provider: &str, opts: &Arc<LingmaOptions>) -> Arc<Client> {
        let mut clients = self.clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match clients.get(provider) {
            Some(c) if *c.opts == **opts => c.clone(),
            _ => {
                let c = Arc::new(Client::new(opts.clone()));
                clients.insert(provider.to_owned(), c.clone());
                c
            }
        }
    }

    /// Opens one call of `prompt`.
    pub async fn open(&self, prompt: &Prompt) -> Result<LingmaStream, ProviderError> {
        self.client(&prompt.provider, &prompt.opts).open(prompt).await
    }
}

/// The connection state of one provider, owned by the call that holds the lock.
#[derive(Debug, Default)]
struct State {
    conn: Option<Conn>,
    /// The session `reuse` calls share, and the model last set on it.
    sticky: Option<(String, Option<String>)>,
    /// Fresh sessions still to delete.
    stale: Vec<String>,
    /// The call in progress: its session and whether it was fresh. Still set when a call
    /// ends abnormally (its stream or open was dropped).
    in_progress: Option<(String, bool)>,
    next_id: u64,
}

/// One lingma provider.
#[derive(Debug)]
pub struct Client {
    opts: Arc<LingmaOptions>,
    state: Arc<tokio::sync::Mutex<State>>,
    waiting: AtomicU32,
}

/// Why a step failed.
enum Fail {
    /// The connection broke: drop it, maybe retry on a new one.
    Transport(String),
    Provider(ProviderError),
}

static REQUEST_SEQ: AtomicU64 = AtomicU64::new(0);

fn lingma_error(message: impl Into<String>) -> ProviderError {
    ProviderError::Upstream {
        status: 502,
        info: ErrorInfo { kind: ErrorKind::Upstream, message: message.into() },
        retry_after: None,
    }
}

impl Client {
    fn new(opts: Arc<LingmaOptions>) -> Client {
        Client { opts, state: Arc::new(tokio::sync::Mutex::new(State::default())), waiting: AtomicU32::new(0) }
    }

    /// The connection, exclusively: at once, after waiting in the bounded queue, or `Busy`.
    async fn acquire(&self) -> Result<OwnedMutexGuard<State>, ProviderError> {
        if let Ok(g) = self.state.clone().try_lock_owned() {
            return Ok(g);
        }
        let queued = self.waiting.fetch_add(1, Ordering::SeqCst);
        struct Leave<'a>(&'a AtomicU32);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _leave = Leave(&self.waiting);
        if queued >= self.opts.queue {
            return Err(ProviderError::Busy(
                "the Lingma assistant handles one request at a time and another request is in progress; retry when it has finished"
                    .into(),
            ));
        }
        Ok(self.state.clone().lock_owned().await)
    }

    /// Starts one call: everything up to the sent `session/prompt`.
    pub async fn open(&self, prompt: &Prompt) -> Result<LingmaStream, ProviderError> {
        let timeout = Duration::from_millis(self.opts.timeout);
        let deadline = Instant::now() + timeout;
        let timed_out = || ProviderError::Timeout(timeout, "the Lingma request");
        let mut guard = tokio::time::timeout_at(deadline, self.acquire()).await.map_err(|_| timed_out())??;
        // A call that ended abnormally leaves its session behind.
        if let Some((session, fresh)) = guard.in_progress.take() {
            if fresh {
                guard.stale.push(session);
            } else {
                guard.sticky = None;
            }
        }
        let images = TempImages::write(self.opts.temp_dir.as_deref(), &prompt.images).await?;
        let request_id =
            format!("keyhaven-{}-{:08x}", REQUEST_SEQ.fetch_add(1, Ordering::Relaxed), rand::random::<u32>());
        for attempt in 0..2 {
            let reused = guard.conn.is_some();
            let started =
                tokio::time::timeout_at(deadline, start(&mut guard, &self.opts, prompt, &images, &request_id))
                    .await
                    .map_err(|_| timed_out())?;
            match started {
                Ok((session, prompt_id)) => {
                    let fresh = prompt.mode == SessionMode::Fresh;
                    guard.in_progress = Some((session.clone(), fresh));
                    return Ok(LingmaStream {
                        guard: Some(guard),
                        request_id,
                        prompt_id,
                        session,
                        fresh,
                        model: prompt.upstream.clone(),
                        pending: VecDeque::new(),
                        images,
                        deadline,
                        timeout,
                        started: false,
                        finished: false,
                    });
                }
                Err(Fail::Transport(e)) => {
                    guard.conn = None;
                    guard.sticky = None;
                    if !(reused && attempt == 0) {
                        return Err(ProviderError::Connect(e));
                    }
                    tracing::info!(error = %e, "the kept Lingma connection is gone; reconnecting");
                }
                Err(Fail::Provider(e)) => return Err(e),
            }
        }
        Err(ProviderError::Connect("Lingma could not be reached".into()))
    }
}

/// Connect if needed, then session, model and prompt. Returns the session and the prompt's
/// JSON-RPC id.
async fn start(
    st: &mut State,
    opts: &LingmaOptions,
    prompt: &Prompt,
    images: &TempImages,
    request_id: &str,
) -> Result<(String, u64), Fail> {
    if st.conn.is_none() {
        let endpoint = transport::resolve(opts).map_err(|e| Fail::Provider(ProviderError::Connect(e)))?;
        let conn = Conn::connect(endpoint, CONNECT_TIMEOUT).await.map_err(Fail::Transport)?;
        st.conn = Some(conn);
        st.sticky = None;
        call(st, "initialize", json!({"protocolVersion": 1, "clientCapabilities": {}, "timestamp": u64::try_from(crate::clock::now_ms()).unwrap_or(0)})).await?;
    }
    for session in std::mem::take(&mut st.stale) {
        notify(st, "chat/deleteSessionById", json!({"sessionId": session})).await?;
    }
    let meta = json!({
        "ai-coding/request-id": request_id,
        "ai-coding/mode": "agent",
        "ai-coding/model": prompt.model,
        "ai-coding/shell-type": if cfg!(windows) { "powershell" } else { "sh" },
        "ai-coding/enabled-mcp-servers": [],
    });
    let reuse = prompt.mode != SessionMode::Fresh;
    let (session, new_session) = match (&st.sticky, reuse) {
        (Some((s, _)), true) => (s.clone(), false),
        _ => {
            let cwd = opts.cwd.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
            let created =
                call(st, "session/new", json!({"cwd": cwd, "mcpServers": [], "_meta": {}, "timestamp": u64::try_from(crate::clock::now_ms()).unwrap_or(0)}))
                    .await?;
            let id = ["sessionId", "id"]
                .iter()
                .find_map(|k| created.get(*k).and_then(Value::as_str))
                .filter(|s| !s.trim().is_empty())
                .ok_or_else(|| Fail::Provider(lingma_error("Lingma's session/new returned no sessionId")))?
                .to_owned();
            if reuse {
                st.sticky = Some((id.clone(), None));
            }
            (id, true)
        }
    };
    let model_set = st.sticky.as_ref().filter(|_| reuse).and_then(|(_, m)| m.clone());
    if !prompt.model.is_empty() && model_set.as_deref() != Some(prompt.model.as_str()) {
        let params = json!({"sessionId": session, "modelId": prompt.model, "timestamp": u64::try_from(crate::clock::now_ms()).unwrap_or(0), "_meta": meta});
        if let Err(e) = call(st, "session/set_model", params).await {
            if reuse {
                st.sticky = None;
            }
            return Err(e);
        }
        if let Some((_, m)) = st.sticky.as_mut().filter(|_| reuse) {
            *m = Some(prompt.model.clone());
        }
    }
    let mut items = vec![json!({"type": "text", "text": prompt.text(new_session)})];
    items.extend(images.items.iter().cloned());
    let params = json!({
        "sessionId": session,
        "prompt": items,
        "contextParams": images.items,
        "_meta": meta,
    });
    let id = notify(st, "session/prompt", params).await?;
    Ok((session, id))
}

/// Sends a request without waiting for its answer; returns its id.
async fn notify(st: &mut State, method: &str, params: Value) -> Result<u64, Fail> {
    st.next_id += 1;
    let id = st.next_id;
    let conn = st.conn.as_mut().ok_or_else(|| Fail::Transport("not connected".into()))?;
    conn.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .await
        .map_err(Fail::Transport)?;
    Ok(id)
}

/// Sends a request and waits for its answer (other traffic is handled or skipped meanwhile).
async fn call(st: &mut State, method: &str, params: Value) -> Result<Value, Fail> {
    let id = notify(st, method, params).await?;
    let conn = st.conn.as_mut().ok_or_else(|| Fail::Transport("not connected".into()))?;
    loop {
        let msg = conn.recv().await.map_err(Fail::Transport)?;
        if answer_server_request(conn, &msg).await? {
            continue;
        }
        if msg.get("method").is_none() && msg.get("id").and_then(Value::as_u64) == Some(id) {
            if let Some(err) = msg.get("error") {
                let text = err.get("message").and_then(Value::as_str).unwrap_or("unknown error");
                return Err(Fail::Provider(lingma_error(format!("Lingma {method} failed: {text}"))));
            }
            return Ok(msg.get("result").cloned().unwrap_or(Value::Null));
        }
    }
}

/// Answers a request from the backend (a message with both `method` and `id`) with an empty
/// result. True when `msg` was one.
async fn answer_server_request(conn: &mut Conn, msg: &Value) -> Result<bool, Fail> {
    match (msg.get("method"), msg.get("id")) {
        (Some(_), Some(id)) if !id.is_null() => {
            conn.send(&json!({"jsonrpc": "2.0", "id": id, "result": null})).await.map_err(Fail::Transport)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// The images of one call, as files the assistant can read; removed on drop.
#[derive(Debug, Default)]
struct TempImages {
    paths: Vec<PathBuf>,
    /// The `{type: "image", …}` items.
    items: Vec<Value>,
}

impl TempImages {
    async fn write(dir: Option<&Path>, images: &[ImageSource]) -> Result<TempImages, ProviderError> {
        if images.is_empty() {
            return Ok(TempImages::default());
        }
        let dir = dir.map(Path::to_path_buf);
        let images = images.to_vec();
        tokio::task::spawn_blocking(move || write_images(dir.as_deref(), &images))
            .await
            .map_err(|_| ProviderError::Canceled)?
    }
}

impl Drop for TempImages {
    fn drop(&mut self) {
        for p in self.paths.drain(..) {
            if let Err(e) = std::fs::remove_file(&p)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %p.display(), error = %e, "could not remove a Lingma image file");
            }
        }
    }
}

fn write_images(dir: Option<&Path>, images: &[ImageSource]) -> Result<TempImages, ProviderError> {
    let mut out = TempImages::default();
    for img in images {
        match img {
            ImageSource::Base64 { media_type, data } => {
                let dir =
                    dir.ok_or_else(|| ProviderError::Local("no temp_dir is configured for Lingma images".into()))?;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data.trim())
                    .map_err(|e| ProviderError::Local(format!("an image is not valid base64: {e}")))?;
                let ext = match media_type.as_str() {
                    "image/png" => "png",
                    "image/gif" => "gif",
                    "image/webp" => "webp",
                    "image/bmp" => "bmp",
                    _ => "jpg",
                };
                let path = dir.join(format!("keyhaven-lingma-{:016x}.{ext}", rand::random::<u64>()));
                write_private(&path, &bytes)
                    .map_err(|e| ProviderError::Local(format!("cannot write a Lingma image file: {e}")))?;
                out.paths.push(path.clone());
                let abs = std::path::absolute(&path).unwrap_or(path);
                let uri = format!("lingma:///agent/file?path={}", percent_encode(&abs.display().to_string()));
                out.items.push(json!({"type": "image", "mimeType": media_type, "uri": uri, "data": data.trim()}));
            }
            ImageSource::Url { url } => {
                out.items.push(json!({"type": "image", "mimeType": "image/jpeg", "uri": url}));
            }
        }
    }
    Ok(out)
}

/// Creates a new file readable by this user only.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let mut f = o.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Percent-encodes everything but unreserved characters (a query value).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What a backend message means for the call.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    Text(String),
    Thought(String),
    Finish,
    /// The backend answered `session/prompt` with an error.
    Failed(String),
    Other,
}

/// Classifies one message for the call with `request_id` whose prompt had JSON-RPC id `prompt_id`.
pub fn classify(msg: &Value, request_id: &str, prompt_id: u64) -> Incoming {
    if msg.get("method").and_then(Value::as_str) == Some("session/update") {
        let params = &msg["params"];
        let rid = params.get("_meta").and_then(|m| m.get("ai-coding/request-id")).and_then(Value::as_str);
        if rid != Some(request_id) {
            return Incoming::Other;
        }
        let update = &params["update"];
        let text = || update.get("content").and_then(|c| c.get("text")).and_then(Value::as_str).unwrap_or_default();
        return match update.get("sessionUpdate").and_then(Value::as_str) {
            Some("agent_message_chunk") if !text().is_empty() => Incoming::Text(text().to_owned()),
            Some("agent_thought_chunk") if !text().is_empty() => Incoming::Thought(text().to_owned()),
            Some("notification") if update.get("type").and_then(Value::as_str) == Some("chat_finish") => {
                Incoming::Finish
            }
            _ => Incoming::Other,
        };
    }
    if msg.get("method").is_none()
        && msg.get("id").and_then(Value::as_u64) == Some(prompt_id)
        && let Some(err) = msg.get("error")
    {
        let text = err.get("message").and_then(Value::as_str).unwrap_or("unknown error");
        return Incoming::Failed(text.to_owned());
    }
    Incoming::Other
}

/// One call's answer. Holds the connection until the answer ends (or the stream is dropped).
pub struct LingmaStream {
    guard: Option<OwnedMutexGuard<State>>,
    request_id: String,
    prompt_id: u64,
    session: String,
    fresh: bool,
    model: String,
    pending: VecDeque<StreamEvent>,
    images: TempImages,
    deadline: Instant,
    timeout: Duration,
    /// An event has been delivered.
    started: bool,
    finished: bool,
}

impl std::fmt::Debug for LingmaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LingmaStream").field("request_id", &self.request_id).finish_non_exhaustive()
    }
}

impl LingmaStream {
    /// The next canonical event; `None` once the answer ended. Cancel-safe.
    pub async fn next(&mut self) -> Option<Result<StreamEvent, ProviderError>> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Some(Ok(ev));
            }
            if self.finished {
                return None;
            }
            let guard = self.guard.as_mut()?;
            let Some(conn) = guard.conn.as_mut() else { return Some(Err(ProviderError::Disconnected)) };
            let msg = match tokio::time::timeout_at(self.deadline, conn.recv()).await {
                Err(_) => {
                    self.abandon();
                    return Some(Err(ProviderError::Timeout(self.timeout, "the Lingma request")));
                }
                Ok(Err(e)) => {
                    guard.conn = None;
                    guard.sticky = None;
                    let started = self.started;
                    self.abandon();
                    // Before the first event the gateway may retry (on a new connection).
                    return Some(Err(if started { ProviderError::Disconnected } else { ProviderError::Connect(e) }));
                }
                Ok(Ok(msg)) => msg,
            };
            if let Err(Fail::Transport(_)) = answer_server_request(conn, &msg).await {
                guard.conn = None;
            }
            match classify(&msg, &self.request_id, self.prompt_id) {
                Incoming::Text(text) => self.push(StreamEvent::TextDelta { text }),
                Incoming::Thought(text) => self.push(StreamEvent::ThinkingDelta { text }),
                Incoming::Finish => {
                    self.push(StreamEvent::Stop { reason: StopReason::EndTurn, stop_sequence: None });
                    self.finish().await;
                }
                Incoming::Failed(text) => {
                    self.abandon();
                    return Some(Err(lingma_error(format!("Lingma session/prompt failed: {text}"))));
                }
                Incoming::Other => {}
            }
        }
    }

    fn push(&mut self, ev: StreamEvent) {
        if !self.started {
            self.started = true;
            self.pending
                .push_back(StreamEvent::MessageStart { id: self.request_id.clone(), model: self.model.clone() });
        }
        self.pending.push_back(ev);
    }

    /// The answer ended: delete a fresh session (not awaited), release the connection.
    async fn finish(&mut self) {
        self.finished = true;
        if let Some(mut guard) = self.guard.take() {
            guard.in_progress = None;
            if self.fresh
                && notify(&mut guard, "chat/deleteSessionById", json!({"sessionId": self.session})).await.is_err()
            {
                guard.conn = None;
                guard.stale.push(self.session.clone());
            }
        }
        self.images = TempImages::default();
    }

    /// The call ends without its answer: the next call cleans up the session.
    fn abandon(&mut self) {
        self.finished = true;
        self.guard = None;
        self.images = TempImages::default();
    }
}

#[cfg(test)]
mod tests;
