//! The Cursor Tab cell of `--external`: Keyhaven's own share of one suggestion.
//!
//! A `keyhaven serve` process with the proxy in `local` mode and `[cursor_tab]` pointing at a FIM
//! model on an instant FIM mock (a raw HTTP/1.1 server in this process, keep-alive, answering a
//! fixed SSE completion the moment a request is read). Suggestions are sent one after another as
//! `AiService/StreamCpp` on one HTTP/1.1 connection through the proxy, trusting only the engine's
//! CA. Per suggestion, with one clock (this process):
//!
//! - `t0` the client sends StreamCpp, `t1` the mock has read the FIM request,
//! - `t2` the mock has written its answer, `t3` the client has read the last frame;
//! - Keyhaven's share = `(t1 - t0) + (t3 - t2)`: request in → provider call out, plus provider
//!   answer in → last frame out (loopback transit included, so it is an upper bound).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use keyhaven::cursor::protocol::aiserver;
use keyhaven::cursor::protocol::connect;
use prost::Message as _;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use crate::proxy::{self, HOST, Route};

/// The FIM model the bench gateway's Tab uses.
pub const MODEL: &str = "bench-fim";

/// The config the Tab gateway adds: the FIM provider on the mock and `[cursor_tab]`.
pub fn config(fim_url: &str) -> String {
    format!(
        "\n[[providers]]\nname = \"fim\"\nkind = \"openai\"\nbase_url = \"{fim_url}/v1\"\n\n\
         [[models]]\nname = \"{MODEL}\"\nprovider = \"fim\"\nupstream = \"mock-fim\"\nfim = true\n\n\
         [cursor_tab]\nmodel = \"{MODEL}\"\n"
    )
}

/// The instant FIM mock: (request read, answer written) per request.
pub struct FimMock {
    pub addr: SocketAddr,
    times: Arc<Mutex<Vec<(Instant, Instant)>>>,
    task: tokio::task::JoinHandle<()>,
}

const ANSWER_BODY: &str = concat!(
    "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"text\":\" b\",\"index\":0,\"finish_reason\":\"stop\"}]}\n\n",
    "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":2,\"total_tokens\":42}}\n\n",
    "data: [DONE]\n\n",
);

impl FimMock {
    pub async fn start() -> anyhow::Result<FimMock> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let times: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
        let t = times.clone();
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let _ = sock.set_nodelay(true);
                tokio::spawn(serve(sock, t.clone()));
            }
        });
        Ok(FimMock { addr, times, task })
    }

    fn take(&self) -> Option<(Instant, Instant)> {
        self.times.lock().ok()?.pop()
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One keep-alive connection: read a request (head + content-length body), answer at once.
async fn serve(mut sock: TcpStream, times: Arc<Mutex<Vec<(Instant, Instant)>>>) {
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{ANSWER_BODY}",
        ANSWER_BODY.len()
    );
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(p) = find(&buf, b"\r\n\r\n") {
                break p + 4;
            }
            match sock.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let len = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        while buf.len() < head_end + len {
            match sock.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
        let read = Instant::now();
        buf.drain(..head_end + len);
        if sock.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
        let written = Instant::now();
        if let Ok(mut t) = times.lock() {
            t.push((read, written));
        }
    }
}

/// Per-suggestion timings in milliseconds.
#[derive(Debug, Default)]
pub struct Suggestions {
    /// Keyhaven's share: (t1 - t0) + (t3 - t2).
    pub share_ms: Vec<f64>,
    /// The whole suggestion as the client sees it: t3 - t0.
    pub total_ms: Vec<f64>,
    pub errors: u64,
    pub first_error: Option<String>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn request_body() -> Vec<u8> {
    let req = aiserver::StreamCppRequest {
        current_file: Some(aiserver::CurrentFileInfo {
            relative_workspace_path: "src/lib.rs".into(),
            contents: "fn add(a: i32, b: i32) -> i32 {\n    a +\n}\n".into(),
            cursor_position: Some(aiserver::CursorPosition { line: 1, column: 7 }),
            workspace_root_path: "/bench".into(),
            ..Default::default()
        }),
        model_name: Some("fast".into()),
        cpp_intent_info: Some(aiserver::CppIntentInfo { source: "typing".into() }),
        ..Default::default()
    };
    connect::encode_envelope(&req.encode_to_vec(), false).to_vec()
}

/// `n` measured suggestions after `warm` unmeasured ones, one connection through the proxy.
pub async fn suggestions(
    proxy_addr: SocketAddr,
    tls: &tokio_rustls::TlsConnector,
    mock: &FimMock,
    n: u32,
    warm: u32,
    timeout: Duration,
) -> Suggestions {
    let mut out = Suggestions::default();
    let fail = |out: &mut Suggestions, e: String| {
        out.errors += 1;
        out.first_error.get_or_insert(e);
    };
    let mut sender = None;
    let body = Bytes::from(request_body());
    for i in 0..n + warm {
        if sender.is_none() {
            match connect(proxy_addr, tls).await {
                Ok(s) => sender = Some(s),
                Err(e) => {
                    fail(&mut out, format!("{e:#}"));
                    continue;
                }
            }
        }
        let Some(s) = sender.as_mut() else { continue };
        let req = http::Request::post("/aiserver.v1.AiService/StreamCpp")
            .header(http::header::HOST, HOST)
            .header(http::header::CONTENT_TYPE, "application/connect+proto")
            .header("connect-protocol-version", "1")
            .header("authorization", "Bearer bench-cursor-token")
            .header("x-request-id", format!("bench-tab-{i}"))
            .body(Full::new(body.clone()));
        let Ok(req) = req else { continue };
        let t0 = Instant::now();
        let got = tokio::time::timeout(timeout, async {
            // The previous exchange must have released the connection.
            s.ready().await?;
            let resp = s.send_request(req).await?;
            let bytes = resp.into_body().collect().await?.to_bytes();
            Ok::<Bytes, hyper::Error>(bytes)
        })
        .await;
        let t3 = Instant::now();
        let bytes = match got {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => {
                sender = None;
                fail(&mut out, e.to_string());
                continue;
            }
            Err(_) => {
                sender = None;
                fail(&mut out, "timed out".into());
                continue;
            }
        };
        // A suggestion has a range frame (field 11) and ends with a success end-stream `{}`.
        let ok = bytes.ends_with(&[2, 0, 0, 0, 2, b'{', b'}']) && bytes.windows(2).any(|w| w == [0x5a, 0x04]);
        let Some((t1, t2)) = mock.take() else {
            fail(&mut out, "the FIM mock saw no request".into());
            continue;
        };
        if !ok {
            fail(&mut out, format!("not a suggestion: {} bytes", bytes.len()));
            continue;
        }
        if i >= warm {
            out.share_ms.push(ms(t1.saturating_duration_since(t0)) + ms(t3.saturating_duration_since(t2)));
            out.total_ms.push(ms(t3 - t0));
        }
    }
    out
}

async fn connect(
    proxy_addr: SocketAddr,
    tls: &tokio_rustls::TlsConnector,
) -> anyhow::Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
    let tcp = proxy::open(Route::Proxy(proxy_addr)).await?;
    let stream = tls.connect(ServerName::try_from(HOST)?, tcp).await.context("TLS handshake")?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}
