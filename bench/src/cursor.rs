//! The Cursor phase: what Keyhaven's Cursor backend adds to a turn's first token.
//!
//! An engine in `local` routing mode (its provider is the in-process mock) is driven through its
//! intercepting proxy the way Cursor does in HTTP/1.1 mode, trusting only the engine's local CA:
//! per turn, RunSSE on one connection, then the seq-0 BidiAppend (the `run_request`) on a second,
//! already-connected one. Measured per turn: from sending that BidiAppend to reading the first
//! `text_delta` frame on RunSSE. Right before each turn the same mock is asked directly for a
//! streamed answer, and its time to the first SSE `data:` line is the mock's TTFT. The report
//! gives both and their difference (what the target of ≤ 2 ms is about).
//!
//! Connection setup (CONNECT + TLS) is outside the measured span: it is the proxy phase's subject.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use keyhaven::cursor::protocol::agent::{
    self, agent_client_message, agent_server_message, interaction_update, kv_client_message, kv_server_message,
};
use keyhaven::cursor::protocol::aiserver;
use keyhaven::cursor::protocol::connect::{self, Envelope, EnvelopeDecoder};
use prost::Message as _;
use rustls::pki_types::ServerName;

use crate::load::{self, Target};
use crate::proxy::{self, HOST, Route};

/// The model the bench engine serves.
pub const MODEL: &str = "bench-model";

/// Per-turn timings in milliseconds.
#[derive(Debug, Default)]
pub struct Turns {
    /// Seq-0 BidiAppend sent → first `text_delta` frame read.
    pub first_delta_ms: Vec<f64>,
    /// The mock asked directly: request sent → first SSE `data:` line.
    pub mock_ttft_ms: Vec<f64>,
    pub errors: u64,
    pub first_error: Option<String>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// An HTTP/1.1 connection to api2.cursor.sh through the proxy.
async fn connect(proxy_addr: SocketAddr, tls: &tokio_rustls::TlsConnector) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let tcp = proxy::open(Route::Proxy(proxy_addr)).await?;
    let stream = tls.connect(ServerName::try_from(HOST)?, tcp).await.context("TLS handshake")?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

fn post(path: &str, content_type: &str, body: Vec<u8>) -> anyhow::Result<http::Request<Full<Bytes>>> {
    Ok(http::Request::post(path)
        .header(http::header::HOST, HOST)
        .header(http::header::CONTENT_TYPE, content_type)
        .header("connect-protocol-version", "1")
        .body(Full::new(Bytes::from(body)))?)
}

fn run_request(text: &str) -> Vec<u8> {
    agent::AgentClientMessage {
        message: Some(agent_client_message::Message::RunRequest(agent::AgentRunRequest {
            action: Some(agent::ConversationAction {
                action: Some(agent::conversation_action::Action::UserMessageAction(agent::UserMessageAction {
                    user_message: Some(agent::UserMessage { text: text.to_owned(), ..Default::default() }),
                    ..Default::default()
                })),
                ..Default::default()
            }),
            requested_model: Some(agent::RequestedModel { model_id: MODEL.to_owned(), ..Default::default() }),
            ..Default::default()
        })),
    }
    .encode_to_vec()
}

/// What a RunSSE frame is, as far as the measurement cares.
enum Seen {
    TextDelta,
    /// A KV `set_blob_args` request (checkpoint blobs) the client acknowledges, like the IDE.
    SetBlob(u32),
    Other,
    End,
}

/// Reads RunSSE until the next frame that matters.
async fn next_frame(body: &mut Incoming, dec: &mut EnvelopeDecoder) -> anyhow::Result<Seen> {
    loop {
        match dec.try_next()? {
            Some(Envelope::Message(m)) => {
                let msg: agent::AgentServerMessage = connect::decode_message(&m)?;
                if let Some(agent_server_message::Message::KvServerMessage(agent::KvServerMessage {
                    id,
                    message: Some(kv_server_message::Message::SetBlobArgs(_)),
                })) = &msg.message
                {
                    return Ok(Seen::SetBlob(*id));
                }
                let is_text = matches!(
                    msg.message,
                    Some(agent_server_message::Message::InteractionUpdate(agent::InteractionUpdate {
                        message: Some(interaction_update::Message::TextDelta(_))
                    }))
                );
                return Ok(if is_text { Seen::TextDelta } else { Seen::Other });
            }
            Some(Envelope::EndStream(_)) => return Ok(Seen::End),
            None => {
                let frame = body.frame().await.context("RunSSE ended early")??;
                if let Ok(data) = frame.into_data() {
                    dec.push(&data);
                }
            }
        }
    }
}

/// One turn: returns the measured span.
async fn turn(proxy_addr: SocketAddr, tls: &tokio_rustls::TlsConnector, id: &str) -> anyhow::Result<Duration> {
    let mut sse = connect(proxy_addr, tls).await?;
    let mut appends = connect(proxy_addr, tls).await?;
    let open = aiserver::BidiRequestId { request_id: id.to_owned() }.encode_to_vec();
    let resp = sse
        .send_request(post(
            "/agent.v1.AgentService/RunSSE",
            "application/connect+proto",
            connect::encode_envelope(&open, false).to_vec(),
        )?)
        .await?;
    anyhow::ensure!(resp.status() == http::StatusCode::OK, "RunSSE: HTTP {}", resp.status());
    let mut body = resp.into_body();
    let mut dec = EnvelopeDecoder::new(true);
    appends.ready().await?;
    let append = post(
        "/aiserver.v1.BidiService/BidiAppend",
        "application/proto",
        connect::encode_append(id, 0, &run_request("hi")),
    )?;
    let t0 = Instant::now();
    let sent = appends.send_request(append);
    let first = async {
        loop {
            match next_frame(&mut body, &mut dec).await? {
                Seen::TextDelta => return anyhow::Ok(t0.elapsed()),
                Seen::Other | Seen::SetBlob(_) => {}
                Seen::End => anyhow::bail!("the turn ended without a text_delta"),
            }
        }
    };
    let (answer, first) = tokio::join!(sent, first);
    let first = first?;
    anyhow::ensure!(answer?.status() == http::StatusCode::OK, "BidiAppend refused");
    // Read the turn to its end, so the next one starts on a quiet engine; the checkpoint's blob
    // writes are acknowledged as the IDE does (the turn ends after its checkpoint).
    let mut seqno = 1;
    loop {
        match next_frame(&mut body, &mut dec).await? {
            Seen::End => break,
            Seen::SetBlob(kv) => {
                let ack = agent::AgentClientMessage {
                    message: Some(agent_client_message::Message::KvClientMessage(agent::KvClientMessage {
                        id: kv,
                        message: Some(kv_client_message::Message::SetBlobResult(agent::SetBlobResult { error: None })),
                    })),
                };
                appends.ready().await?;
                let answer = appends
                    .send_request(post(
                        "/aiserver.v1.BidiService/BidiAppend",
                        "application/proto",
                        connect::encode_append(id, seqno, &ack.encode_to_vec()),
                    )?)
                    .await?;
                anyhow::ensure!(answer.status() == http::StatusCode::OK, "BidiAppend (KV ack) refused");
                seqno += 1;
            }
            Seen::TextDelta | Seen::Other => {}
        }
    }
    Ok(first)
}

/// `n` measured turns after `warmup` unmeasured ones, one at a time, each bounded by `timeout`.
pub async fn turns(
    proxy_addr: SocketAddr,
    tls: &tokio_rustls::TlsConnector,
    client: &reqwest::Client,
    mock: &Target,
    n: u32,
    warmup: u32,
    timeout: Duration,
) -> Turns {
    let mut out = Turns::default();
    for i in 0..warmup + n {
        let direct = load::streaming(client, mock, 1, 1, 1).await;
        let id = format!("bench-turn-{i}");
        let via = tokio::time::timeout(timeout, turn(proxy_addr, tls, &id))
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("timed out")));
        if i < warmup {
            continue;
        }
        match (via, direct.ttfb_ms.first()) {
            (Ok(d), Some(ttft)) => {
                out.first_delta_ms.push(ms(d));
                out.mock_ttft_ms.push(*ttft);
            }
            (Err(e), _) => {
                out.errors += 1;
                out.first_error.get_or_insert(format!("{e:#}"));
            }
            (Ok(_), None) => {
                out.errors += 1;
                out.first_error.get_or_insert(format!("direct: {:?}", direct.first_error));
            }
        }
    }
    out
}
