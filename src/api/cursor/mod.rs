//! Connect entry points for decrypted Cursor traffic (the proxy's service in `local` and
//! `hybrid` modes; in `upstream` mode and for account calls the proxy never gets here).
//!
//! - `agent.v1.AgentService/RunSSE`: server stream of binary envelopes labelled
//!   `text/event-stream`, fed by the transport's output hub.
//! - `aiserver.v1.BidiService/BidiAppend`: always 200 with an empty body, also for bad input,
//!   unknown request ids and finished runs. Appends for streams that were passed upstream (health
//!   checks, legacy chat) go upstream too.
//! - `agent.v1.AgentService/Run`: the h2 bidi stream; the same transport, request frames fed
//!   into the inbox in arrival order.
//! - Model catalog, `ServerTime`, `NetworkService/IsConnected`: answered locally.
//! - Everything else: forwarded upstream unchanged ([`Upstream::forward`]).

mod unary;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use prost::Message;

use crate::cursor::protocol::connect::{self, Code, EndStream, Envelope, EnvelopeDecoder, ErrorBody};
use crate::cursor::protocol::{aiserver, connect::FrameError};
use crate::cursor::transport::{Push, Subscription};
use crate::cursor::turn::Backend;
use crate::proxy::upstream::Upstream;
use crate::task::Spawner;

/// How many request ids of upstream-passed streams are remembered.
const MAX_UPSTREAM_IDS: usize = 4096;
/// The largest RunSSE / stream-open request body read.
const MAX_OPEN_BODY: usize = 64 * 1024;

/// State of the Cursor router.
#[derive(Debug, Clone)]
pub struct CursorState {
    pub backend: Arc<Backend>,
    pub upstream: Upstream,
    pub spawner: Spawner,
    /// Request ids of `*SSE` streams that were forwarded upstream: their appends follow them.
    upstream_ids: Arc<Mutex<HashSet<String>>>,
}

impl CursorState {
    pub fn new(backend: Arc<Backend>, upstream: Upstream, spawner: Spawner) -> CursorState {
        CursorState { backend, upstream, spawner, upstream_ids: Arc::default() }
    }

    fn remember_upstream(&self, id: String) {
        if let Ok(mut ids) = self.upstream_ids.lock() {
            if ids.len() >= MAX_UPSTREAM_IDS {
                ids.clear();
            }
            ids.insert(id);
        }
    }

    fn is_upstream(&self, id: &str) -> bool {
        self.upstream_ids.lock().is_ok_and(|ids| ids.contains(id))
    }
}

/// The router the proxy serves decrypted Cursor requests with.
pub fn router(state: CursorState) -> Router {
    Router::new()
        .route("/agent.v1.AgentService/RunSSE", post(run_sse))
        .route("/agent.v1.AgentService/Run", post(run))
        .route("/aiserver.v1.BidiService/BidiAppend", post(bidi_append))
        .route("/aiserver.v1.AiService/AvailableModels", post(unary::available_models))
        .route("/aiserver.v1.AiService/GetUsableModels", post(unary::usable_models))
        .route("/agent.v1.AgentService/GetUsableModels", post(unary::usable_models))
        .route("/aiserver.v1.AiService/GetDefaultModel", post(unary::default_model))
        .route("/aiserver.v1.AiService/GetDefaultModelForCli", post(unary::default_model_for_cli))
        .route("/agent.v1.AgentService/GetDefaultModelForCli", post(unary::default_model_for_cli))
        .route("/aiserver.v1.AiService/ServerTime", post(unary::server_time))
        .route("/aiserver.v1.NetworkService/IsConnected", post(unary::is_connected))
        .fallback(forward)
        .with_state(state)
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn now_secs() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Forwards a request upstream unchanged. Opening a `*SSE` stream other than RunSSE records its
/// request id, so the stream's BidiAppends are forwarded too.
async fn forward(State(state): State<CursorState>, req: Request) -> Response {
    if !req.uri().path().ends_with("SSE") {
        return state.upstream.forward(req).await;
    }
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_OPEN_BODY).await else {
        return stream_error(ErrorBody::cursor(
            Code::ResourceExhausted,
            aiserver::error_details::Error::BadRequest,
            "Bad request",
            "stream request too large",
            false,
        ));
    };
    if let Ok(id) = open_request_id(&parts.headers, &bytes) {
        state.remember_upstream(id);
    }
    state.upstream.forward(Request::from_parts(parts, Body::from(bytes))).await
}

/// The request id in a stream-open body: one envelope holding a `BidiRequestId`.
fn open_request_id(headers: &HeaderMap, body: &[u8]) -> Result<String, FrameError> {
    let gzip = connect::is_gzip(header_str(headers, "connect-content-encoding"))?;
    let envs = connect::decode_envelopes(body, gzip)?;
    let Some(Envelope::Message(m)) = envs.into_iter().next() else { return Err(FrameError::Missing("request_id")) };
    let id: aiserver::BidiRequestId = connect::decode_message(&m)?;
    if id.request_id.is_empty() { Err(FrameError::Missing("request_id")) } else { Ok(id.request_id) }
}

/// A streaming response that carries only an error end-stream frame.
fn stream_error(body: ErrorBody) -> Response {
    let frame = connect::encode_end_stream(&EndStream { error: Some(body), ..EndStream::default() });
    stream_response("text/event-stream", Body::from(frame))
}

fn stream_response(content_type: &'static str, body: Body) -> Response {
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("connect-accept-encoding", HeaderValue::from_static("gzip"));
    resp
}

fn subscription_body(sub: Subscription) -> Body {
    let stream = futures::stream::unfold(sub, |mut sub| async move {
        sub.next().await.map(|frame| (Ok::<Bytes, std::convert::Infallible>(frame), sub))
    });
    Body::from_stream(stream)
}

fn bad_request(detail: &str) -> ErrorBody {
    ErrorBody::cursor(Code::InvalidArgument, aiserver::error_details::Error::BadRequest, "Bad request", detail, false)
}

/// `agent.v1.AgentService/RunSSE`.
async fn run_sse(State(state): State<CursorState>, headers: HeaderMap, body: Body) -> Response {
    let Ok(bytes) = axum::body::to_bytes(body, MAX_OPEN_BODY).await else {
        return stream_error(bad_request("RunSSE request too large"));
    };
    let id = match open_request_id(&headers, &bytes) {
        Ok(id) => id,
        Err(e) => return stream_error(bad_request(&format!("RunSSE request: {e}"))),
    };
    let transport = match state.backend.transport(&id) {
        Ok(t) => t,
        Err(e) => {
            return stream_error(ErrorBody::cursor(
                Code::ResourceExhausted,
                aiserver::error_details::Error::ResourceExhausted,
                "Too many agent streams",
                &e.to_string(),
                true,
            ));
        }
    };
    tracing::debug!(request_id = %id, "RunSSE subscribed");
    stream_response("text/event-stream", subscription_body(state.backend.subscribe(&transport)))
}

/// An empty `BidiAppendResponse`.
fn append_ok() -> Response {
    let mut resp = Response::new(Body::empty());
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/proto"));
    resp
}

/// `aiserver.v1.BidiService/BidiAppend`: always 200 with an empty body.
async fn bidi_append(State(state): State<CursorState>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, connect::MAX_MESSAGE_BYTES * 2 + 1024).await else {
        tracing::debug!("BidiAppend body too large; ignored");
        return append_ok();
    };
    let append = match connect::unary_body(&bytes, header_str(&parts.headers, "content-encoding"))
        .and_then(|b| connect::decode_append(&b))
    {
        Ok(a) => a,
        Err(e) => {
            tracing::debug!(error = %e, "undecodable BidiAppend ignored");
            return append_ok();
        }
    };
    if state.is_upstream(&append.request_id) {
        return state.upstream.forward(Request::from_parts(parts, Body::from(bytes))).await;
    }
    match state.backend.transport(&append.request_id) {
        Ok(t) => match t.inbox.push(append.seqno, append.data) {
            Push::Accepted => {}
            other => {
                tracing::debug!(request_id = %append.request_id, seqno = append.seqno, outcome = ?other, "append not queued")
            }
        },
        Err(e) => tracing::warn!(request_id = %append.request_id, error = %e, "append dropped"),
    }
    append_ok()
}

/// `agent.v1.AgentService/Run`: h2 bidi. Request frames go into a fresh transport's inbox in
/// arrival order; the response streams its output hub.
async fn run(State(state): State<CursorState>, headers: HeaderMap, body: Body) -> Response {
    let gzip = match connect::is_gzip(header_str(&headers, "connect-content-encoding")) {
        Ok(g) => g,
        Err(e) => return stream_response_error(bad_request(&e.to_string())),
    };
    let id = format!("run-{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>());
    let transport = match state.backend.transport(&id) {
        Ok(t) => t,
        Err(e) => return stream_response_error(bad_request(&e.to_string())),
    };
    let t = transport.clone();
    state.spawner.spawn(transport.cancel.clone(), async move {
        let mut frames = body.into_data_stream();
        let mut dec = EnvelopeDecoder::new(gzip);
        let mut seqno = 0u64;
        while let Some(chunk) = frames.next().await {
            let Ok(chunk) = chunk else { break };
            dec.push(&chunk);
            loop {
                match dec.try_next() {
                    Ok(Some(Envelope::Message(m))) => {
                        t.inbox.push(seqno, m);
                        seqno += 1;
                    }
                    Ok(Some(Envelope::EndStream(_))) | Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "bad Run request frame; the request side is closed");
                        return;
                    }
                }
            }
        }
    });
    stream_response("application/connect+proto", subscription_body(state.backend.subscribe(&transport)))
}

fn stream_response_error(body: ErrorBody) -> Response {
    let frame = connect::encode_end_stream(&EndStream { error: Some(body), ..EndStream::default() });
    stream_response("application/connect+proto", Body::from(frame))
}

/// A unary Connect error response.
fn unary_error(body: &ErrorBody) -> Response {
    let mut resp = Response::new(Body::from(body.to_json()));
    *resp.status_mut() = StatusCode::from_u16(body.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// A unary success: the message as `application/proto`, gzip when the client accepts it.
fn unary_ok<M: Message>(headers: &HeaderMap, msg: &M) -> Response {
    let raw = msg.encode_to_vec();
    let gzip = !raw.is_empty() && connect::accepts_gzip(header_str(headers, "accept-encoding"));
    let mut resp = Response::new(Body::from(if gzip { connect::gzip(&raw) } else { raw }));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/proto"));
    if gzip {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    resp
}

/// Decodes a unary request (checks that it is well-formed even when its fields are unused).
async fn unary_request<M: Message + Default>(headers: &HeaderMap, body: Body) -> Result<M, Response> {
    let bytes = axum::body::to_bytes(body, connect::MAX_MESSAGE_BYTES)
        .await
        .map_err(|_| unary_error(&bad_request("request too large")))?;
    connect::unary_body(&bytes, header_str(headers, "content-encoding"))
        .and_then(|b| connect::decode_message::<M>(&b))
        .map_err(|e| unary_error(&bad_request(&e.to_string())))
}

/// The configured models, for the catalog answers.
fn catalog(state: &CursorState) -> Arc<crate::provider::Catalog> {
    state.backend.gateway().catalog()
}
