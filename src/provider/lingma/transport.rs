//! The byte level of the Lingma IPC: where the backend listens (the assistant's
//! `SharedClientCache/.info.json`), the connection (WebSocket, or a Windows named pipe), and the
//! LSP-style framing both carry: `Content-Length: N\r\n\r\n` followed by N bytes of JSON.
//!
//! Over WebSocket each frame is sent as one text message; received messages are buffered and
//! split on the same framing (a message that is bare JSON, without the header, is taken whole).
//! [`Conn::recv`] is cancel-safe: partial input stays in the connection's buffer.

use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use crate::config::{LingmaOptions, LingmaTransport};

/// The largest frame accepted from the backend.
const MAX_FRAME: usize = 16 * 1024 * 1024;

/// What the assistant's cache file says about its running backend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharedInfo {
    pub websocket_port: Option<u16>,
    pub pid: Option<u32>,
    pub ipc_server_path: Option<String>,
}

/// Parses `.info.json`: `{"websocketPort": N, "pid": N, "ipcServerPath": "..."}`, or the older
/// plain form (port, pid and pipe on the first three lines).
pub fn parse_info(text: &str) -> Result<SharedInfo, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("the file is empty".into());
    }
    let info = if text.starts_with('{') {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        SharedInfo {
            websocket_port: v.get("websocketPort").and_then(Value::as_u64).and_then(|p| u16::try_from(p).ok()),
            pid: v.get("pid").and_then(Value::as_u64).and_then(|p| u32::try_from(p).ok()),
            ipc_server_path: v
                .get("ipcServerPath")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        }
    } else {
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let port = lines.next().unwrap_or_default();
        SharedInfo {
            websocket_port: Some(port.parse().map_err(|_| format!("`{port}` is not a port"))?),
            pid: lines.next().and_then(|l| l.parse().ok()),
            ipc_server_path: lines.next().map(str::to_owned),
        }
    };
    if info.websocket_port.unwrap_or(0) == 0 && info.ipc_server_path.is_none() {
        return Err("no websocketPort or ipcServerPath in it".into());
    }
    Ok(info)
}

/// Where to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    WebSocket(String),
    Pipe(String),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::WebSocket(u) => f.write_str(u),
            Endpoint::Pipe(p) => f.write_str(p),
        }
    }
}

/// Reads the info file (every time: the port changes when the assistant restarts).
fn read_info(path: Option<&Path>) -> Result<SharedInfo, String> {
    let path = path.ok_or("no info_file is configured for this lingma provider")?;
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!("cannot read the Lingma info file {}: {e} (is the Lingma assistant running?)", path.display())
    })?;
    parse_info(&text).map_err(|e| format!("the Lingma info file {}: {e}", path.display()))
}

/// The endpoint for these settings: an explicit `ws_url`/`pipe`, else the info file.
/// `auto` is the named pipe on Windows and the WebSocket elsewhere.
pub fn resolve(opts: &LingmaOptions) -> Result<Endpoint, String> {
    let transport = match opts.transport {
        LingmaTransport::Auto if cfg!(windows) => LingmaTransport::Pipe,
        LingmaTransport::Auto => LingmaTransport::Websocket,
        t => t,
    };
    match transport {
        LingmaTransport::Pipe => {
            if let Some(p) = &opts.pipe {
                return Ok(Endpoint::Pipe(pipe_path(p)));
            }
            match read_info(opts.info_file.as_deref()).map(|i| i.ipc_server_path) {
                Ok(Some(p)) => Ok(Endpoint::Pipe(pipe_path(&p))),
                other => match listed_pipe() {
                    Some(p) => Ok(Endpoint::Pipe(p)),
                    None => Err(other.err().unwrap_or_else(|| {
                        "the Lingma info file names no ipcServerPath and no lingma-* pipe exists; set `pipe`".into()
                    })),
                },
            }
        }
        LingmaTransport::Websocket | LingmaTransport::Auto => {
            if let Some(u) = &opts.ws_url {
                return Ok(Endpoint::WebSocket(u.clone()));
            }
            let info = read_info(opts.info_file.as_deref())?;
            match info.websocket_port {
                Some(port) if port > 0 => Ok(Endpoint::WebSocket(ws_url(port))),
                _ => Err("the Lingma info file names no websocketPort".into()),
            }
        }
    }
}

/// The backend's WebSocket URL for a port: the public material connects to the root path.
pub fn ws_url(port: u16) -> String {
    format!("ws://127.0.0.1:{port}/")
}

/// The last (by name) `\\.\pipe\lingma-*` pipe, as the assistant names its pipes.
#[cfg(windows)]
fn listed_pipe() -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir(r"\\.\pipe\")
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("lingma-"))
        .collect();
    names.sort();
    names.pop().map(|n| pipe_path(&n))
}

#[cfg(not(windows))]
fn listed_pipe() -> Option<String> {
    None
}

fn pipe_path(p: &str) -> String {
    if p.starts_with(r"\\.\pipe\") { p.to_owned() } else { format!(r"\\.\pipe\{p}") }
}

/// One frame: header and body.
pub fn encode_frame(body: &[u8]) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

/// Takes one complete frame's body off the front of `buf`; `Ok(None)` while it is incomplete.
pub fn take_frame(buf: &mut Vec<u8>) -> Result<Option<Vec<u8>>, String> {
    let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        if buf.len() > 8 * 1024 {
            return Err("a frame header without its end".into());
        }
        return Ok(None);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]);
    let len = head
        .split("\r\n")
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok())?
        })
        .ok_or_else(|| format!("a frame without Content-Length: {}", head.chars().take(80).collect::<String>()))?;
    if len > MAX_FRAME {
        return Err(format!("a frame of {len} bytes exceeds {MAX_FRAME}"));
    }
    let start = head_end + 4;
    if buf.len() < start + len {
        return Ok(None);
    }
    let body = buf[start..start + len].to_vec();
    buf.drain(..start + len);
    Ok(Some(body))
}

/// A byte stream carrying frames (the named pipe; tests use an in-memory pipe).
pub trait ByteIo: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> ByteIo for T {}

enum Io {
    Ws(Box<WebSocketStream<TcpStream>>),
    Bytes(Pin<Box<dyn ByteIo>>),
}

/// One connection to the backend.
pub struct Conn {
    io: Io,
    buf: Vec<u8>,
    pub endpoint: Endpoint,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("endpoint", &self.endpoint).finish_non_exhaustive()
    }
}

impl Conn {
    /// Connects within `timeout`.
    pub async fn connect(endpoint: Endpoint, timeout: Duration) -> Result<Conn, String> {
        let io = tokio::time::timeout(timeout, Conn::open(&endpoint))
            .await
            .map_err(|_| format!("connecting to Lingma at {endpoint} timed out"))??;
        Ok(Conn { io, buf: Vec::new(), endpoint })
    }

    async fn open(endpoint: &Endpoint) -> Result<Io, String> {
        match endpoint {
            Endpoint::WebSocket(url) => {
                let authority = url
                    .strip_prefix("ws://")
                    .and_then(|r| r.split('/').next())
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| format!("`{url}` is not a ws:// URL"))?;
                let tcp = TcpStream::connect(authority).await.map_err(|e| {
                    format!("cannot connect to Lingma at {url}: {e} (is the Lingma assistant running?)")
                })?;
                let _ = tcp.set_nodelay(true);
                let (ws, _) = tokio_tungstenite::client_async(url.as_str(), tcp)
                    .await
                    .map_err(|e| format!("the WebSocket handshake with Lingma at {url} failed: {e}"))?;
                Ok(Io::Ws(Box::new(ws)))
            }
            Endpoint::Pipe(path) => open_pipe(path).map(|p| Io::Bytes(Box::pin(p))),
        }
    }

    /// A connection over any byte stream (the named pipe, or a test's in-memory pipe).
    pub fn from_bytes(io: impl ByteIo + 'static, endpoint: Endpoint) -> Conn {
        Conn { io: Io::Bytes(Box::pin(io)), buf: Vec::new(), endpoint }
    }

    /// Sends one JSON-RPC message.
    pub async fn send(&mut self, msg: &Value) -> Result<(), String> {
        let body = serde_json::to_vec(msg).map_err(|e| e.to_string())?;
        let frame = encode_frame(&body);
        match &mut self.io {
            Io::Ws(ws) => {
                let text = String::from_utf8(frame).map_err(|e| e.to_string())?;
                ws.send(Message::text(text)).await.map_err(|e| format!("writing to Lingma failed: {e}"))
            }
            Io::Bytes(io) => {
                io.write_all(&frame).await.map_err(|e| format!("writing to Lingma failed: {e}"))?;
                io.flush().await.map_err(|e| format!("writing to Lingma failed: {e}"))
            }
        }
    }

    /// The next JSON-RPC message. Cancel-safe.
    pub async fn recv(&mut self) -> Result<Value, String> {
        loop {
            if let Some(body) = take_frame(&mut self.buf)? {
                return serde_json::from_slice(&body).map_err(|e| format!("Lingma sent a frame that is not JSON: {e}"));
            }
            match &mut self.io {
                Io::Ws(ws) => {
                    let payload: Vec<u8> = match ws.next().await {
                        Some(Ok(Message::Text(t))) => t.as_bytes().to_vec(),
                        Some(Ok(Message::Binary(b))) => b.to_vec(),
                        Some(Ok(Message::Close(_))) | None => return Err("Lingma closed the connection".into()),
                        Some(Ok(_)) => continue,
                        Some(Err(e)) => return Err(format!("reading from Lingma failed: {e}")),
                    };
                    if self.buf.is_empty() && payload.trim_ascii_start().starts_with(b"{") {
                        return serde_json::from_slice(&payload)
                            .map_err(|e| format!("Lingma sent a message that is not JSON: {e}"));
                    }
                    self.buf.extend_from_slice(&payload);
                }
                Io::Bytes(io) => {
                    let mut chunk = [0u8; 16 * 1024];
                    let n = io.read(&mut chunk).await.map_err(|e| format!("reading from Lingma failed: {e}"))?;
                    if n == 0 {
                        return Err("Lingma closed the connection".into());
                    }
                    self.buf.extend_from_slice(&chunk[..n]);
                }
            }
            if self.buf.len() > MAX_FRAME + 8 * 1024 {
                return Err("Lingma sent an oversized frame".into());
            }
        }
    }
}

#[cfg(windows)]
fn open_pipe(path: &str) -> Result<tokio::net::windows::named_pipe::NamedPipeClient, String> {
    tokio::net::windows::named_pipe::ClientOptions::new()
        .open(path)
        .map_err(|e| format!("cannot open the Lingma pipe {path}: {e} (is the Lingma assistant running?)"))
}

/// Named pipes exist on Windows only.
#[cfg(not(windows))]
fn open_pipe(path: &str) -> Result<tokio::io::DuplexStream, String> {
    Err(format!(
        "the Lingma pipe transport ({path}) is not supported on this build: named pipes are Windows-only; use transport = \"websocket\""
    ))
}
