//! Connect entry points for decrypted Cursor traffic (the proxy's service in `local` and
//! `hybrid` modes; in `upstream` mode and for account calls the proxy never gets here).
//!
//! - `agent.v1.AgentService/RunSSE`: server stream of binary envelopes labelled
//!   `text/event-stream`, fed by the transport's output hub.
//! - `aiserver.v1.BidiService/BidiAppend`: always 200 with an empty body, also for bad input,
//!   unknown request ids and finished runs; 403 `permission_denied` only for another client's
//!   stream (below). Appends for streams that were passed upstream (health
//!   checks, legacy chat) go upstream too.
//! - `agent.v1.AgentService/Run`: the h2 bidi stream; the same transport, request frames fed
//!   into the inbox in arrival order.
//! - Model catalog, `ServerTime`, `NetworkService/IsConnected`: answered locally.
//! - `GetServerConfig`: the official answer, with only `http2_config` changed when
//!   `[cursor] http2` asks for it ([`crate::cursor::services::server_config`]).
//! - Everything else: forwarded upstream unchanged ([`Upstream::forward`]).
//!
//! In `hybrid` mode an agent stream's route is decided by its run request ([`routes`]): a model
//! marked `cursor = "upstream"`, or one Keyhaven does not know, sends the whole stream (RunSSE or
//! `Run`, and every append) to the official service unchanged.
//!
//! The update guard ([`crate::cursor::guard`]): every request's `x-cursor-client-version` is
//! shown to the guard first; a version whose self-test ([`selftest`]) failed is passed through
//! to the official service whole (like `upstream` mode), except appends to a local stream that
//! started before the failure. A new version is served normally while its test runs.
//!
//! A local stream belongs to the client that first named it (issue 14 §5): its request id alone
//! lets no other local connection read its output or inject tool results, approvals or messages.
//! The IDE sends each BidiAppend on a new connection (`Connection: close`, docs/cursor-wire.md
//! §1.5), so the binding cannot be the TLS connection; it is a digest of the IDE's own identity
//! headers ([`client_binding`]: its Cursor access token, client version and type, privacy mode).
//! A RunSSE or append whose binding differs gets Connect `permission_denied` (HTTP 403) and
//! touches nothing. A `Run` (h2 bidi) stream is one request and takes no appends at all.

mod routes;
pub mod selftest;
mod tab;
mod unary;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use prost::Message;

use crate::config::{CursorHttp2, RoutingMode};
use crate::cursor::guard::{Guard, Verdict};
use crate::cursor::protocol::connect::{self, Code, EndStream, Envelope, EnvelopeDecoder, ErrorBody};
use crate::cursor::protocol::{aiserver, connect::FrameError};
use crate::cursor::transport::{Push, Subscription, Transport};
use crate::cursor::turn::Backend;
use crate::proxy::ModeSwitch;
use crate::proxy::upstream::Upstream;
use crate::task::Spawner;

pub use routes::Route;
use routes::{AppendRoute, Held, Routes, SseRoute};

/// The largest RunSSE / stream-open request body read.
const MAX_OPEN_BODY: usize = 64 * 1024;

/// The IDE's identity headers a stream is bound to. Not `x-cursor-checksum` (it changes every
/// 30 minutes) nor the per-request ids.
const BINDING_HEADERS: [&str; 4] = ["authorization", "x-cursor-client-version", "x-cursor-client-type", "x-ghost-mode"];

/// The owner of an h2 `Run` stream: no request's binding equals it, so no append gets in.
const NO_APPENDS: [u8; 32] = [0; 32];

/// The digest of a request's identity headers ([`BINDING_HEADERS`]; absent and empty differ).
/// The access token never leaves this function other than hashed.
pub(crate) fn client_binding(headers: &HeaderMap) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"keyhaven cursor stream binding v1");
    for name in BINDING_HEADERS {
        h.update(name.as_bytes());
        match headers.get(name) {
            Some(v) => {
                h.update([1]);
                h.update((v.len() as u64).to_be_bytes());
                h.update(v.as_bytes());
            }
            None => h.update([0]),
        }
    }
    h.finalize().into()
}

/// The answer to a RunSSE or append from another client than the stream's.
fn not_your_stream() -> ErrorBody {
    ErrorBody::cursor(
        Code::PermissionDenied,
        aiserver::error_details::Error::Unspecified,
        "Not your agent stream",
        "this agent stream belongs to another client",
        false,
    )
}

/// What the Cursor router is configured with, besides its parts.
#[derive(Debug, Clone, Copy)]
pub struct CursorOptions {
    /// `GetServerConfig`'s `http2_config`.
    pub http2: CursorHttp2,
    /// How long a hybrid-mode stream waits for the run request that decides its route.
    pub route_wait: Duration,
}

impl Default for CursorOptions {
    fn default() -> CursorOptions {
        CursorOptions { http2: CursorHttp2::Official, route_wait: Duration::from_secs(30) }
    }
}

/// State of the Cursor router.
#[derive(Debug, Clone)]
pub struct CursorState {
    pub backend: Arc<Backend>,
    pub upstream: Upstream,
    pub spawner: Spawner,
    /// The proxy's routing mode (the router only sees `local` and `hybrid` traffic).
    pub mode: ModeSwitch,
    pub options: CursorOptions,
    routes: Arc<Routes>,
    /// Cursor Tab: one suggestion in flight per editor.
    tab: crate::cursor::tab::Supersede,
    /// The update guard (`None`: every version is served as configured).
    guard: Option<Arc<Guard>>,
}

impl CursorState {
    pub fn new(
        backend: Arc<Backend>,
        upstream: Upstream,
        spawner: Spawner,
        mode: ModeSwitch,
        options: CursorOptions,
    ) -> CursorState {
        let max = backend.registry().options().max_transports;
        let routes = Arc::new(Routes::new(max, options.route_wait, spawner.clone()));
        CursorState { backend, upstream, spawner, mode, options, routes, guard: None, tab: Default::default() }
    }

    /// The same state with the update guard in front of every request.
    pub fn with_guard(mut self, guard: Arc<Guard>) -> CursorState {
        self.guard = Some(guard);
        self
    }

    /// The update guard, if any.
    pub fn guard(&self) -> Option<&Arc<Guard>> {
        self.guard.as_ref()
    }

    fn hybrid(&self) -> bool {
        self.mode.get() == RoutingMode::Hybrid
    }

    /// Cursor Tab requests whose provider call is in flight (tests, diagnostics).
    pub fn tab_in_flight(&self) -> usize {
        self.tab.in_flight()
    }

    /// Streams whose route is not decided yet (hybrid mode), for tests and diagnostics.
    pub fn pending_routes(&self) -> usize {
        self.routes.pending_len()
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
        .route("/aiserver.v1.AiService/GetServerConfig", post(unary::server_config))
        .route("/aiserver.v1.AiService/StreamCpp", post(tab::stream_cpp))
        .route("/aiserver.v1.AiService/RefreshTabContext", post(tab::refresh_tab_context))
        .route("/aiserver.v1.AiService/GetCppEditClassification", post(tab::edit_classification))
        .route("/aiserver.v1.AiService/StreamNextCursorPrediction", post(tab::next_cursor_prediction))
        .route("/aiserver.v1.ServerConfigService/GetServerConfig", post(unary::server_config))
        .fallback(forward)
        .layer(axum::middleware::from_fn_with_state(state.clone(), update_guard))
        .with_state(state)
}

/// The IDE's version header.
const CLIENT_VERSION: &str = "x-cursor-client-version";

/// Marks a request whose Cursor version failed its self-test (read by [`bidi_append`]).
#[derive(Debug, Clone, Copy)]
struct GuardedUpstream;

/// Shows the request's Cursor version to the update guard; a version that failed its self-test
/// goes to the official service. Appends are decided in [`bidi_append`] (a local stream that
/// started before the failure keeps its appends).
async fn update_guard(State(state): State<CursorState>, mut req: Request, next: axum::middleware::Next) -> Response {
    let verdict = match (&state.guard, header_str(req.headers(), CLIENT_VERSION)) {
        (Some(guard), Some(version)) => guard.observe(version),
        _ => Verdict::Serve,
    };
    if verdict == Verdict::Serve {
        return next.run(req).await;
    }
    if req.uri().path() == "/aiserver.v1.BidiService/BidiAppend" {
        req.extensions_mut().insert(GuardedUpstream);
        return next.run(req).await;
    }
    tracing::debug!(path = req.uri().path(), "Cursor version failed its self-test: passed through");
    forward(State(state), req).await
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
        state.routes.remember_upstream(id);
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
async fn run_sse(State(state): State<CursorState>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_OPEN_BODY).await else {
        return stream_error(bad_request("RunSSE request too large"));
    };
    let id = match open_request_id(&parts.headers, &bytes) {
        Ok(id) => id,
        Err(e) => return stream_error(bad_request(&format!("RunSSE request: {e}"))),
    };
    if state.hybrid() {
        return hybrid_run_sse(state, parts, bytes, id);
    }
    let transport = match state.backend.transport(&id) {
        Ok(t) => t,
        Err(e) => return stream_error(too_many_streams(&e.to_string())),
    };
    if !transport.admit(client_binding(&parts.headers)) {
        tracing::warn!(request_id = %id, "RunSSE from another client than the stream's refused");
        return stream_error(not_your_stream());
    }
    tracing::debug!(request_id = %id, "RunSSE subscribed");
    stream_response("text/event-stream", subscription_body(state.backend.subscribe(&transport)))
}

type FrameStream = futures::stream::BoxStream<'static, Result<Bytes, axum::Error>>;

fn error_frames(body: ErrorBody) -> FrameStream {
    let frame = connect::encode_end_stream(&EndStream { error: Some(body), ..EndStream::default() });
    futures::stream::once(async move { Ok(frame) }).boxed()
}

/// RunSSE in hybrid mode: the 200 head goes out at once (docs/cursor-wire.md §1.6; a client may
/// wait for it before its first append), and the body follows the route the run request picks:
/// the local subscription, or the official stream's body frames (byte-identical; a non-200
/// official answer becomes a Connect error frame). The head announces gzip when the client
/// accepts it, so official frames compressed with it decode; local frames are uncompressed.
fn hybrid_run_sse(state: CursorState, parts: http::request::Parts, bytes: Bytes, id: String) -> Response {
    let gzip = connect::accepts_gzip(header_str(&parts.headers, "connect-accept-encoding"));
    let binding = client_binding(&parts.headers);
    let frames = async move {
        match state.routes.sse(&state.backend, &id).await {
            SseRoute::Local => match state.backend.transport(&id) {
                Ok(transport) if !transport.admit(binding) => {
                    tracing::warn!(request_id = %id, "RunSSE from another client than the stream's refused");
                    error_frames(not_your_stream())
                }
                Ok(transport) => {
                    tracing::debug!(request_id = %id, "RunSSE subscribed (hybrid)");
                    subscription_body(state.backend.subscribe(&transport)).into_data_stream().boxed()
                }
                Err(e) => error_frames(too_many_streams(&e.to_string())),
            },
            SseRoute::Upstream => {
                tracing::debug!(request_id = %id, "RunSSE forwarded upstream (hybrid)");
                let resp = state.upstream.forward(Request::from_parts(parts, Body::from(bytes))).await;
                if resp.status() == StatusCode::OK {
                    resp.into_body().into_data_stream().boxed()
                } else {
                    error_frames(upstream_refused(resp.status()))
                }
            }
            SseRoute::Full => error_frames(too_many_streams("too many agent streams wait for their run request")),
            SseRoute::TimedOut => error_frames(no_run_request()),
        }
    };
    let mut resp = stream_response("text/event-stream", Body::from_stream(futures::stream::once(frames).flatten()));
    if gzip {
        resp.headers_mut().insert("connect-content-encoding", HeaderValue::from_static("gzip"));
    }
    resp
}

/// The official service answered an upstream-routed RunSSE with something other than 200.
fn upstream_refused(status: StatusCode) -> ErrorBody {
    ErrorBody::cursor(
        Code::Unavailable,
        aiserver::error_details::Error::NetworkError,
        "Cursor's service refused the stream",
        &format!("the official RunSSE answered HTTP {}", status.as_u16()),
        true,
    )
}

fn too_many_streams(detail: &str) -> ErrorBody {
    ErrorBody::cursor(
        Code::ResourceExhausted,
        aiserver::error_details::Error::ResourceExhausted,
        "Too many agent streams",
        detail,
        true,
    )
}

/// The answer to a stream whose run request never came (the run driver's own error, for streams
/// that never got a transport).
fn no_run_request() -> ErrorBody {
    ErrorBody::cursor(
        Code::DeadlineExceeded,
        aiserver::error_details::Error::Timeout,
        "No request",
        "no run request arrived for this stream",
        false,
    )
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
    if state.routes.is_upstream(&append.request_id)
        || (parts.extensions.get::<GuardedUpstream>().is_some()
            && state.backend.registry().get(&append.request_id).is_none())
    {
        return state.upstream.forward(Request::from_parts(parts, Body::from(bytes))).await;
    }
    let binding = client_binding(&parts.headers);
    let refused = |id: &str| {
        tracing::warn!(request_id = %id, "BidiAppend from another client than the stream's refused");
        unary_error(&not_your_stream())
    };
    if state.hybrid() {
        let held = Held { seqno: append.seqno, data: append.data.clone(), parts: parts.clone(), body: bytes.clone() };
        match state.routes.append(&state.backend, &append.request_id, held) {
            AppendRoute::Held | AppendRoute::Dropped => return append_ok(),
            AppendRoute::Local(t) if !t.admit(binding) => return refused(&append.request_id),
            AppendRoute::Local(t) => {
                push(&t, append.seqno, append.data);
                return append_ok();
            }
            AppendRoute::Upstream(earlier) => {
                forward_held(&state, earlier);
                tracing::debug!(request_id = %append.request_id, "agent stream forwarded upstream (hybrid)");
                return state.upstream.forward(Request::from_parts(parts, Body::from(bytes))).await;
            }
            AppendRoute::Undecided => {}
        }
    }
    match state.backend.transport(&append.request_id) {
        Ok(t) if !t.admit(binding) => return refused(&append.request_id),
        Ok(t) => push(&t, append.seqno, append.data),
        Err(e) => tracing::warn!(request_id = %append.request_id, error = %e, "append dropped"),
    }
    append_ok()
}

fn push(t: &Transport, seqno: u64, data: Bytes) {
    match t.inbox.push(seqno, data) {
        Push::Accepted => {}
        other => tracing::debug!(request_id = %t.request_id, seqno, outcome = ?other, "append not queued"),
    }
}

/// Sends appends held while the route was undecided to the official service, in seqno order,
/// on the tracked spawner (their client got its 200 already).
fn forward_held(state: &CursorState, mut held: Vec<Held>) {
    if held.is_empty() {
        return;
    }
    held.sort_by_key(|h| h.seqno);
    let upstream = state.upstream.clone();
    state.spawner.spawn(state.spawner.root_token().child_token(), async move {
        for h in held {
            let resp = upstream.forward(Request::from_parts(h.parts, Body::from(h.body))).await;
            // Drain the (empty) answer so the pooled connection is reused.
            let _ = axum::body::to_bytes(resp.into_body(), 64 * 1024).await;
        }
    });
}

/// `agent.v1.AgentService/Run`: h2 bidi. Request frames go into a fresh transport's inbox in
/// arrival order; the response streams its output hub. In hybrid mode the first frame (the run
/// request) decides the route first; an upstream stream is forwarded whole, the frames read so
/// far included.
async fn run(State(state): State<CursorState>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let gzip = match connect::is_gzip(header_str(&parts.headers, "connect-content-encoding")) {
        Ok(g) => g,
        Err(e) => return stream_response_error(bad_request(&e.to_string())),
    };
    let mut frames = body.into_data_stream();
    let mut dec = EnvelopeDecoder::new(gzip);
    let mut first = None;
    if state.hybrid() {
        let mut read = Vec::new();
        let got = tokio::time::timeout(state.options.route_wait, first_frame(&mut frames, &mut dec, &mut read)).await;
        let message = match got {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => return stream_response_error(bad_request(&format!("Run request frame: {e}"))),
            Err(_) => return stream_response_error(no_run_request()),
        };
        if message.as_ref().map(|m| state.routes.route_for(&state.backend, m)) == Some(Route::Upstream) {
            tracing::debug!("Run stream forwarded upstream (hybrid)");
            let rest = frames.map(|c| c.map_err(std::io::Error::other));
            let replay = futures::stream::iter(read.into_iter().map(Ok::<Bytes, std::io::Error>));
            let body = Body::from_stream(replay.chain(rest));
            return state.upstream.forward(Request::from_parts(parts, body)).await;
        }
        first = message;
    }
    let id = format!("run-{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>());
    let transport = match state.backend.transport(&id) {
        Ok(t) => t,
        Err(e) => return stream_response_error(too_many_streams(&e.to_string())),
    };
    // The stream is this one request: nothing may append to it by its (never disclosed) id.
    transport.admit(NO_APPENDS);
    let t = transport.clone();
    state.spawner.spawn(transport.cancel.clone(), async move {
        let mut seqno = 0u64;
        if let Some(m) = first {
            t.inbox.push(seqno, m);
            seqno += 1;
        }
        loop {
            // Frames already buffered first, then the next chunk.
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
            // The run's end ends the reader too, even if the client keeps its side open.
            let chunk = tokio::select! {
                biased;
                () = t.output.closed() => return,
                c = frames.next() => c,
            };
            match chunk {
                Some(Ok(chunk)) => dec.push(&chunk),
                _ => return,
            }
        }
    });
    stream_response("application/connect+proto", subscription_body(state.backend.subscribe(&transport)))
}

/// Reads request chunks (keeping them in `read`) until the first envelope is complete: its
/// message, or `None` when the stream ends (or ends the stream) before one.
async fn first_frame<S>(
    frames: &mut S,
    dec: &mut EnvelopeDecoder,
    read: &mut Vec<Bytes>,
) -> Result<Option<Bytes>, FrameError>
where
    S: futures::Stream<Item = Result<Bytes, axum::Error>> + Unpin,
{
    loop {
        match dec.try_next()? {
            Some(Envelope::Message(m)) => return Ok(Some(m)),
            Some(Envelope::EndStream(_)) => return Ok(None),
            None => {}
        }
        match frames.next().await {
            Some(Ok(chunk)) => {
                dec.push(&chunk);
                read.push(chunk);
            }
            _ => return Ok(None),
        }
    }
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
