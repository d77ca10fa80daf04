//! A Cursor client simulator at the wire level, written from docs/cursor-wire.md, driving the whole
//! engine through its intercepting proxy with the engine's real CA: the harness (`Sim`: RunSSE,
//! hex BidiAppends, the h2 bidi `Run` stream, a test "official host") shared with `connect_wire`,
//! and the cases of routing: hybrid routing per model, the model catalog, `GetServerConfig` and
//! passthrough of calls Keyhaven does not answer. After each case the transport registry, the
//! undecided routes and (where no upstream connection is pooled) the engine's task count are back
//! to where they started.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use keyhaven::app::Engine;
use keyhaven::config::{EngineConfig, RoutingMode, UpstreamOverrides, load_str};
use keyhaven::cursor::protocol::agent::{self, agent_client_message, agent_server_message, interaction_update};
use keyhaven::cursor::protocol::aiserver;
use keyhaven::cursor::protocol::connect::{self, Code, EndStream, Envelope, EnvelopeDecoder};
use keyhaven::secrets::{Keyring, MemoryKeyring, Secrets};
use prost::Message;
use rustls::pki_types::{CertificateDer, ServerName};
use secrecy::SecretString;
use tokio::net::TcpListener;

use crate::proxy::{TestPki, connect_via_proxy, server_tls, test_pki};
use crate::support::fixtures::{Case, upstream_sse};
use crate::support::{CANARY_KEY, MockUpstream, Reply, TestEngine, Up, config_text};

pub(crate) const TIMEOUT: Duration = Duration::from_secs(20);

/// The official `GetServerConfig` answer of the test host: agent URLs plus a field Keyhaven's
/// proto does not know (field 100, an indexing key).
pub(crate) fn official_server_config() -> Vec<u8> {
    let mut raw = aiserver::GetServerConfigResponse {
        http2_config: aiserver::Http2Config::ForceAllEnabled as i32,
        agent_url_config: Some(aiserver::AgentUrlConfig {
            agent_url: "https://agent.api5.cursor.sh".into(),
            agentn_url: "https://agentn.api5.cursor.sh".into(),
        }),
    }
    .encode_to_vec();
    prost::encoding::string::encode(100, &"indexing-key-from-cursor".to_owned(), &mut raw);
    raw
}

/// What the test official host saw.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) path: String,
    headers: http::HeaderMap,
    body: Bytes,
}

/// A TLS "official host" that records each request and echoes its body back (`Run` streams
/// its echo as the request arrives, full duplex; `GetServerConfig` answers gzip).
pub(crate) async fn official_host(pki: &TestPki) -> (std::net::SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let acceptor = tokio_rustls::TlsAcceptor::from(server_tls(pki));
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let s = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            let s = s.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let s = s.clone();
                    async move {
                        let path = req.uri().path().to_owned();
                        let headers = req.headers().clone();
                        if path.ends_with("/Run") {
                            s.lock().expect("seen").push(Seen { path: path.clone(), headers, body: Bytes::new() });
                            let resp = Response::builder()
                                .status(200)
                                .header("x-official", path)
                                .header("content-type", "application/connect+proto")
                                .body(req.into_body().boxed())
                                .expect("response");
                            return Ok::<_, Infallible>(resp);
                        }
                        let body = req.into_body().collect().await.expect("body").to_bytes();
                        s.lock().expect("seen").push(Seen { path: path.clone(), headers, body: body.clone() });
                        if path.ends_with("/GetServerConfig") {
                            let resp = Response::builder()
                                .status(200)
                                .header("x-official", path)
                                .header("content-type", "application/proto")
                                .header("content-encoding", "gzip")
                                .body(
                                    Full::new(Bytes::from(connect::gzip(&official_server_config())))
                                        .map_err(|e| match e {})
                                        .boxed(),
                                )
                                .expect("response");
                            return Ok::<_, Infallible>(resp);
                        }
                        let resp = Response::builder()
                            .status(200)
                            .header("x-official", path)
                            .header("content-type", "application/proto")
                            .body(Full::new(body).map_err(|e| match e {}).boxed())
                            .expect("response");
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

pub(crate) struct Sim {
    pub(crate) te: TestEngine,
    pub(crate) mock: MockUpstream,
    dial: Dialer,
    pub(crate) seen: Arc<Mutex<Vec<Seen>>>,
    /// The engine's task count once started (listeners and loops only).
    tasks: usize,
}

pub(crate) type ReqBody = StreamBody<Pin<Box<dyn futures::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send>>>;

/// A simulator in `local` mode with short lingers and waits (so finished runs and placeholders
/// leave the registry within a test).
pub(crate) async fn sim() -> Sim {
    sim_with(&format!("[proxy]\nmode = \"local\"\n{SHORT}"), "").await
}

/// `[cursor]` waits for tests: long enough for a loaded machine, short enough to settle.
pub(crate) const SHORT: &str = "[cursor]\nlinger = 1000\nfirst_message_wait = 5000\n";

/// `tables` are appended to the test config; `an_model` goes into the `an-model` table.
pub(crate) async fn sim_with(tables: &str, an_model: &str) -> Sim {
    let mock = MockUpstream::start().await;
    let pki = test_pki();
    let (official, seen) = official_host(&pki).await;
    let dir = tempfile::tempdir().expect("tempdir");
    // This client never answers KV requests: each turn's checkpoint is skipped after a short
    // ack timeout (checkpoints are covered by `checkpoint_recovery`).
    let text = config_text(&mock.url(), "")
        .replace("name = \"an-model\"\n", &format!("name = \"an-model\"\n{an_model}\n"))
        + "\n[agent]\nblob_ack_timeout = 50\n"
        + tables;
    let file = load_str("test.toml", &text).expect("config");
    let keyring = Arc::new(MemoryKeyring::default());
    keyring.set("test-key", &SecretString::from(CANARY_KEY)).expect("key");
    let secrets = Secrets::new(keyring, Arc::new(|_| None));
    let mut hosts = HashMap::new();
    hosts.insert("api2.cursor.sh".to_owned(), official);
    let config = EngineConfig {
        config_path: None,
        database_path: dir.path().join("keyhaven.db"),
        file,
        listen: Some("127.0.0.1:0".parse().expect("addr")),
        ca_dir: dir.path().join("ca"),
        proxy_listen: Some("127.0.0.1:0".parse().expect("addr")),
        upstream_overrides: UpstreamOverrides { hosts, extra_roots_der: vec![pki.ca_der.to_vec()] },
    };
    let engine = Engine::start(config, secrets).await.expect("engine starts");
    let handle = engine.handle();
    let base = format!("http://{}", engine.local_addr());
    let pem = std::fs::read_to_string(dir.path().join("ca").join(keyhaven::proxy::ca::CERT_FILE)).expect("ca pem");
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let ca = CertificateDer::from(base64::engine::general_purpose::STANDARD.decode(b64).expect("pem body"));
    let te = TestEngine { engine: Some(engine), handle, dir, base, http: reqwest::Client::new() };
    let tasks = te.engine.as_ref().expect("engine").spawner().len();
    let dial = Dialer { proxy: te.handle.proxy.as_ref().expect("proxy").addr, ca };
    Sim { te, mock, dial, seen, tasks }
}

/// Opens client connections to api2.cursor.sh through the proxy, trusting only the engine's CA.
#[derive(Clone)]
pub(crate) struct Dialer {
    proxy: std::net::SocketAddr,
    ca: CertificateDer<'static>,
}

impl Dialer {
    pub(crate) fn tls(&self, alpn: &[u8]) -> tokio_rustls::TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.clone()).expect("root");
        let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![alpn.to_vec()];
        tokio_rustls::TlsConnector::from(Arc::new(cfg))
    }

    /// An HTTP/2 connection to api2.cursor.sh through the proxy, trusting only the engine's CA.
    pub(crate) async fn h2(&self) -> hyper::client::conn::http2::SendRequest<ReqBody> {
        let tcp = connect_via_proxy(self.proxy, "api2.cursor.sh:443").await.expect("CONNECT");
        let name = ServerName::try_from("api2.cursor.sh").expect("name");
        let tls = self.tls(b"h2").connect(name, tcp).await.expect("tls");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "the proxy speaks h2");
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.expect("h2");
        tokio::spawn(conn);
        send
    }

    /// One HTTP/1.1 request to api2.cursor.sh through the proxy (a fresh connection, as Cursor's
    /// BidiAppends mostly are), trusting only the engine's CA.
    pub(crate) async fn send(&self, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Response<Incoming> {
        let tcp = connect_via_proxy(self.proxy, "api2.cursor.sh:443").await.expect("CONNECT");
        let name = ServerName::try_from("api2.cursor.sh").expect("name");
        let tls = self.tls(b"http/1.1").connect(name, tcp).await.expect("tls");
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.expect("h1");
        tokio::spawn(conn);
        let mut req = Request::post(format!("https://api2.cursor.sh{path}")).header("host", "api2.cursor.sh");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::from(body))).expect("request");
        tokio::time::timeout(TIMEOUT, send.send_request(req)).await.expect("in time").expect("response")
    }
}

impl Sim {
    pub(crate) fn set_mode(&self, mode: RoutingMode) {
        self.te.handle.proxy.as_ref().expect("proxy").mode.set(mode);
    }

    /// Waits until every agent stream is gone (no transport, no undecided route) and, with
    /// `tasks`, until the engine runs no more tasks than at start (nothing leaked). Fails if that
    /// never happens.
    pub(crate) async fn settled(&self, tasks: bool) {
        let cursor = self.te.handle.cursor.as_ref().expect("cursor backend");
        let spawner = self.te.engine.as_ref().expect("engine").spawner();
        for _ in 0..600 {
            let quiet = cursor.backend.registry().is_empty() && cursor.state.pending_routes() == 0;
            if quiet && (!tasks || spawner.len() <= self.tasks) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "leaked: {} transports, {} undecided routes, {} tasks (started with {})",
            cursor.backend.registry().len(),
            cursor.state.pending_routes(),
            spawner.len(),
            self.tasks
        );
    }

    pub(crate) async fn h2(&self) -> hyper::client::conn::http2::SendRequest<ReqBody> {
        self.dial.h2().await
    }

    pub(crate) async fn send(&self, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Response<Incoming> {
        self.dial.send(path, headers, body).await
    }

    /// Opens an h2 `Run` stream: the request side stays open for `send`ing client frames. The
    /// response head is awaited separately (in hybrid mode it comes once the first frame decided
    /// the route), so the first frame is sent before waiting for it, as Connect clients do.
    pub(crate) async fn run_h2(
        &self,
        h2: &mut hyper::client::conn::http2::SendRequest<ReqBody>,
        first: Bytes,
    ) -> (tokio::sync::mpsc::UnboundedSender<Bytes>, Response<Incoming>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
        tx.send(first).expect("queue the first frame");
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
        });
        let body: ReqBody = StreamBody::new(Box::pin(stream));
        let req = Request::post("https://api2.cursor.sh/agent.v1.AgentService/Run")
            .header("content-type", "application/connect+proto")
            .header("connect-protocol-version", "1")
            .header("te", "trailers")
            .body(body)
            .expect("request");
        let resp = tokio::time::timeout(TIMEOUT, h2.send_request(req)).await.expect("in time").expect("response");
        (tx, resp)
    }

    pub(crate) async fn unary(&self, path: &str, body: Vec<u8>) -> (StatusCode, Bytes) {
        let resp =
            self.send(path, &[("content-type", "application/proto"), ("connect-protocol-version", "1")], body).await;
        let status = resp.status();
        (status, resp.into_body().collect().await.expect("body").to_bytes())
    }

    pub(crate) async fn append(&self, request_id: &str, seqno: u64, msg: &[u8]) {
        let (status, body) =
            self.unary("/aiserver.v1.BidiService/BidiAppend", connect::encode_append(request_id, seqno, msg)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.is_empty(), "BidiAppend answers with an empty body");
    }

    /// A gzip BidiAppend (`content-encoding: gzip`).
    pub(crate) async fn append_gzip(&self, request_id: &str, seqno: u64, msg: &[u8]) {
        let body = connect::gzip(&connect::encode_append(request_id, seqno, msg));
        let resp = self
            .send(
                "/aiserver.v1.BidiService/BidiAppend",
                &[("content-type", "application/proto"), ("content-encoding", "gzip")],
                body,
            )
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(resp.into_body().collect().await.expect("body").to_bytes().is_empty());
    }

    /// Opens RunSSE. The request is sent at once; in hybrid mode the answer waits for the route,
    /// so the caller awaits the returned task after its appends.
    pub(crate) fn run_sse_task(&self, request_id: &str, gzip: bool) -> tokio::task::JoinHandle<Response<Incoming>> {
        let s = self.dial.clone();
        let open = aiserver::BidiRequestId { request_id: request_id.to_owned() }.encode_to_vec();
        tokio::spawn(async move {
            let mut headers = vec![("content-type", "application/connect+proto"), ("connect-protocol-version", "1")];
            if gzip {
                headers.push(("connect-content-encoding", "gzip"));
            }
            s.send("/agent.v1.AgentService/RunSSE", &headers, connect::encode_envelope(&open, gzip).to_vec()).await
        })
    }

    pub(crate) async fn run_sse(&self, request_id: &str) -> Response<Incoming> {
        ok_sse(self.run_sse_task(request_id, false).await.expect("RunSSE task"))
    }
}

pub(crate) fn ok_sse(resp: Response<Incoming>) -> Response<Incoming> {
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers().get("content-type").expect("ct"), "text/event-stream");
    resp
}

/// Reads a stream's frames one at a time (heartbeats skipped), for full-duplex cases.
pub(crate) struct FrameReader {
    body: Incoming,
    dec: EnvelopeDecoder,
}

/// One frame of an agent stream.
#[derive(Debug, PartialEq)]
pub(crate) enum Out {
    Update(Box<interaction_update::Message>),
    End(EndStream),
}

impl FrameReader {
    pub(crate) fn new(resp: Response<Incoming>) -> FrameReader {
        FrameReader { body: resp.into_body(), dec: EnvelopeDecoder::new(true) }
    }

    pub(crate) async fn next(&mut self) -> Out {
        loop {
            match self.dec.try_next().expect("well-formed envelope") {
                Some(Envelope::Message(m)) => {
                    let msg: agent::AgentServerMessage = connect::decode_message(&m).expect("server message");
                    // Heartbeats, KV requests and checkpoints are dropped, as in `read_frames`.
                    let live = matches!(msg.message, Some(agent_server_message::Message::InteractionUpdate(_)));
                    if live && msg != keyhaven::cursor::protocol::events::heartbeat() {
                        return Out::Update(Box::new(update(&msg)));
                    }
                }
                Some(Envelope::EndStream(j)) => return Out::End(connect::decode_end_stream(&j).expect("end json")),
                None => {
                    let frame = tokio::time::timeout(TIMEOUT, self.body.frame())
                        .await
                        .expect("a frame in time")
                        .expect("the stream goes on until its end-stream frame")
                        .expect("frame");
                    if let Ok(data) = frame.into_data() {
                        self.dec.push(&data);
                    }
                }
            }
        }
    }

    /// Everything up to and including the end-stream frame; nothing may follow it.
    pub(crate) async fn rest(mut self) -> (Vec<interaction_update::Message>, EndStream) {
        let mut got = Vec::new();
        loop {
            match self.next().await {
                Out::Update(u) => got.push(*u),
                Out::End(end) => {
                    let tail = tokio::time::timeout(TIMEOUT, self.body.collect()).await.expect("ends").expect("body");
                    assert!(tail.to_bytes().is_empty(), "nothing follows the end-stream frame");
                    return (got, end);
                }
            }
        }
    }
}

/// Reads a RunSSE body to its end: the interaction updates (heartbeats, KV requests and
/// checkpoints dropped) and the end-stream.
pub(crate) async fn read_frames(resp: Response<Incoming>) -> (Vec<agent::AgentServerMessage>, connect::EndStream) {
    let body = tokio::time::timeout(TIMEOUT, resp.into_body().collect()).await.expect("run ends").expect("body");
    let envs = connect::decode_envelopes(&body.to_bytes(), true).expect("well-formed envelopes");
    let mut msgs = Vec::new();
    let mut end = None;
    for env in envs {
        assert!(end.is_none(), "nothing follows the end-stream frame");
        match env {
            Envelope::Message(m) => {
                let msg: agent::AgentServerMessage = connect::decode_message(&m).expect("server message");
                let live = matches!(msg.message, Some(agent_server_message::Message::InteractionUpdate(_)));
                if live && msg != keyhaven::cursor::protocol::events::heartbeat() {
                    msgs.push(msg);
                }
            }
            Envelope::EndStream(j) => end = Some(connect::decode_end_stream(&j).expect("end json")),
        }
    }
    (msgs, end.expect("an end-stream frame"))
}

/// The update of `m`; a `step_completed`'s measured duration reads as 0 (so sequences compare).
pub(crate) fn update(m: &agent::AgentServerMessage) -> interaction_update::Message {
    match &m.message {
        Some(agent_server_message::Message::InteractionUpdate(u)) => match u.message.clone().expect("update case") {
            interaction_update::Message::StepCompleted(c) => {
                assert!(c.step_duration_ms >= 0, "{c:?}");
                step_done(c.step_id)
            }
            other => other,
        },
        other => panic!("not an interaction update: {other:?}"),
    }
}

pub(crate) fn step(id: u64) -> interaction_update::Message {
    interaction_update::Message::StepStarted(agent::StepStartedUpdate { step_id: id })
}

pub(crate) fn step_done(id: u64) -> interaction_update::Message {
    interaction_update::Message::StepCompleted(agent::StepCompletedUpdate { step_id: id, step_duration_ms: 0 })
}

pub(crate) fn run_request(model: &str, text: &str) -> Vec<u8> {
    agent::AgentClientMessage {
        message: Some(agent_client_message::Message::RunRequest(agent::AgentRunRequest {
            action: Some(agent::ConversationAction {
                action: Some(agent::conversation_action::Action::UserMessageAction(agent::UserMessageAction {
                    user_message: Some(agent::UserMessage {
                        text: text.to_owned(),
                        message_id: "m-1".into(),
                        mode: agent::AgentMode::Agent as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                })),
                ..Default::default()
            }),
            requested_model: Some(agent::RequestedModel { model_id: model.to_owned(), ..Default::default() }),
            conversation_id: Some("conv-1".into()),
            ..Default::default()
        })),
    }
    .encode_to_vec()
}

pub(crate) const HEARTBEAT: [u8; 2] = [0x3a, 0x00];

pub(crate) fn text(s: &str) -> interaction_update::Message {
    interaction_update::Message::TextDelta(agent::TextDeltaUpdate { text: s.into(), is_server_notice: false })
}

pub(crate) fn tokens(n: i32) -> interaction_update::Message {
    interaction_update::Message::TokenDelta(agent::TokenDeltaUpdate { tokens: n })
}

pub(crate) fn ended(input: i64, output: i64, cache_read: i64) -> interaction_update::Message {
    interaction_update::Message::TurnEnded(agent::TurnEndedUpdate {
        input_tokens: Some(input),
        output_tokens: Some(output),
        cache_read_tokens: Some(cache_read),
        cache_write_tokens: Some(0),
    })
}

pub(crate) fn thinking(s: &str) -> interaction_update::Message {
    interaction_update::Message::ThinkingDelta(agent::ThinkingDeltaUpdate { text: s.into(), thinking_style: None })
}

pub(crate) fn cancel(reason: &str) -> Vec<u8> {
    agent::AgentClientMessage {
        message: Some(agent_client_message::Message::ConversationAction(agent::ConversationAction {
            action: Some(agent::conversation_action::Action::CancelAction(agent::CancelAction {
                reason: reason.into(),
            })),
            ..Default::default()
        })),
    }
    .encode_to_vec()
}

/// The plain turn's text deltas, then a provider that stays silent (no finish, no usage).
pub(crate) fn hanging_text() -> Reply {
    let full = upstream_sse(Up::Openai, Case::Text);
    let events: String = full.split_inclusive("\n\n").take_while(|e| !e.contains("\"stop\"")).collect();
    Reply::sse(&events).hang()
}

/// The exact updates of the plain (`Case::Text`) turn from the OpenAI mock.
pub(crate) fn plain_turn() -> Vec<interaction_update::Message> {
    vec![step(1), text("Hello"), tokens(2), text(" world"), tokens(2), step_done(1), ended(20, 5, 0)]
}

/// Checks the thinking turn's updates (`thinking_completed` carries a measured duration).
pub(crate) fn assert_thinking_turn(got: &[interaction_update::Message]) {
    assert_eq!(got.len(), 10, "{got:?}");
    assert_eq!(&got[..5], &[step(1), thinking("Let me "), tokens(2), thinking("think."), tokens(2)]);
    assert!(matches!(got[5], interaction_update::Message::ThinkingCompleted(_)), "{got:?}");
    assert_eq!(&got[6..], &[text("Answer: 4"), tokens(3), step_done(1), ended(10, 12, 0)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_hybrid_routes_each_model_local_or_upstream() {
    let s = sim_with(SHORT, "cursor = \"upstream\"").await;
    assert_eq!(s.te.handle.proxy.as_ref().expect("proxy").mode.get(), RoutingMode::Hybrid, "the default mode");
    // An upstream model: RunSSE waits for the route; the appends held meanwhile (seq 1) and the
    // deciding one (seq 0) reach the official host byte-identical, and RunSSE is answered there.
    let sse = s.run_sse_task("r-up", false);
    let heartbeat = connect::encode_append("r-up", 1, &HEARTBEAT);
    let run = connect::encode_append("r-up", 0, &run_request("an-model", "hi"));
    for body in [&heartbeat, &run] {
        let resp =
            s.send("/aiserver.v1.BidiService/BidiAppend", &[("content-type", "application/proto")], body.clone()).await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    // The head came from Keyhaven at once (a client may wait for it before appending); the body
    // is the official stream's (the test host echoes the RunSSE request body).
    let resp = ok_sse(sse.await.expect("RunSSE"));
    assert!(resp.headers().get("x-official").is_none(), "the head is Keyhaven's");
    let open = aiserver::BidiRequestId { request_id: "r-up".into() }.encode_to_vec();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(body, connect::encode_envelope(&open, false), "the official stream's bytes");
    // A later append follows the stream upstream (the test host echoes it).
    let later = connect::encode_append("r-up", 2, &HEARTBEAT);
    let resp =
        s.send("/aiserver.v1.BidiService/BidiAppend", &[("content-type", "application/proto")], later.clone()).await;
    assert_eq!(resp.headers().get("x-official").expect("answered upstream"), "/aiserver.v1.BidiService/BidiAppend");
    // Unknown to Keyhaven: upstream too.
    let resp = s
        .send(
            "/aiserver.v1.BidiService/BidiAppend",
            &[("content-type", "application/proto")],
            connect::encode_append("r-auto", 0, &run_request("cursor-auto", "hi")),
        )
        .await;
    assert!(resp.headers().get("x-official").is_some());
    let resp = ok_sse(s.run_sse_task("r-auto", false).await.expect("RunSSE"));
    let open = aiserver::BidiRequestId { request_id: "r-auto".into() }.encode_to_vec();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(body, connect::encode_envelope(&open, false), "the official stream's bytes");
    // A local model is served here.
    s.mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let sse = s.run_sse_task("r-local", false);
    s.append("r-local", 0, &run_request("oa-model", "hi")).await;
    let (got, _) = FrameReader::new(ok_sse(sse.await.expect("RunSSE"))).rest().await;
    assert_eq!(got, plain_turn());
    // h2 Run with the upstream model: the whole stream, first frame included, goes upstream.
    let mut h2 = s.h2().await;
    let frame = connect::encode_envelope(&run_request("an-model", "hi"), false);
    let (tx, resp) = s.run_h2(&mut h2, frame.clone()).await;
    // Full duplex through the proxy: a later frame comes back too, then the client ends.
    let beat = connect::encode_envelope(&HEARTBEAT, false);
    tx.send(beat.clone()).expect("send");
    drop(tx);
    let frame = Bytes::from([frame, beat].concat());
    assert_eq!(resp.headers().get("x-official").expect("answered upstream"), "/agent.v1.AgentService/Run");
    assert_eq!(resp.into_body().collect().await.expect("body").to_bytes(), frame, "the echo of the frame sent");

    let seen = s.seen.lock().expect("seen").clone();
    let paths: Vec<&str> = seen.iter().map(|x| x.path.as_str()).collect();
    let appends: Vec<&Bytes> =
        seen.iter().filter(|x| x.path == "/aiserver.v1.BidiService/BidiAppend").map(|x| &x.body).collect();
    assert_eq!(paths.iter().filter(|p| **p == "/agent.v1.AgentService/RunSSE").count(), 2, "{paths:?}");
    assert_eq!(paths.iter().filter(|p| **p == "/agent.v1.AgentService/Run").count(), 1, "{paths:?}");
    for want in [&run, &heartbeat, &later] {
        assert!(appends.iter().any(|b| b.as_ref() == want.as_slice()), "an append reached upstream unchanged");
    }
    assert_eq!(appends.len(), 4, "r-up's three appends and r-auto's run request");
    assert_eq!(s.mock.seen().len(), 1, "only the local model reached the provider");

    // In local mode the same model is served locally.
    s.set_mode(RoutingMode::Local);
    s.mock.push(Reply::sse(&upstream_sse(Up::Anthropic, Case::Text)));
    s.append("r-now-local", 0, &run_request("an-model", "hi")).await;
    let (got, end) = FrameReader::new(s.run_sse("r-now-local").await).rest().await;
    assert!(matches!(got.last(), Some(interaction_update::Message::TurnEnded(_))), "{got:?}");
    assert_eq!(end, EndStream::default());
    assert_eq!(s.mock.seen().len(), 2);
    s.settled(false).await;
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_server_config_is_the_official_answer_with_only_the_transport_knob_changed() {
    // Default (`official`): byte-identical, gzip and headers as sent.
    let s = sim().await;
    let resp = s
        .send(
            "/aiserver.v1.AiService/GetServerConfig",
            &[("content-type", "application/proto"), ("x-cursor-checksum", "abc/def")],
            Vec::new(),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers().get("content-encoding").expect("gzip kept"), "gzip");
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(connect::gunzip(&body, 1 << 20).expect("gzip"), official_server_config());
    s.te.stop().await;

    // `http2 = "bidi_disabled"`: the same answer plus the knob, on both paths.
    let s = sim_with("[proxy]\nmode = \"local\"\n[cursor]\nhttp2 = \"bidi_disabled\"\n", "").await;
    for path in ["/aiserver.v1.AiService/GetServerConfig", "/aiserver.v1.ServerConfigService/GetServerConfig"] {
        let resp =
            s.send(path, &[("content-type", "application/proto"), ("x-cursor-checksum", "abc/def")], Vec::new()).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers().get("x-official").expect("from the official host"), path);
        assert!(resp.headers().get("content-encoding").is_none(), "sent decompressed");
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        let official = official_server_config();
        assert_eq!(&body[..official.len()], &official[..], "every official byte is kept");
        let cfg = aiserver::GetServerConfigResponse::decode(body).expect("GetServerConfigResponse");
        assert_eq!(cfg.http2_config, aiserver::Http2Config::ForceBidiDisabled as i32);
        assert_eq!(cfg.agent_url_config.expect("urls").agentn_url, "https://agentn.api5.cursor.sh");
    }
    let seen = s.seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|x| x.headers.get("x-cursor-checksum").is_some_and(|v| v == "abc/def")));
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_model_catalog_lists_the_configured_models() {
    let s = sim().await;
    let (status, body) = s
        .unary(
            "/aiserver.v1.AiService/AvailableModels",
            aiserver::AvailableModelsRequest { exclude_max_named_models: true, ..Default::default() }.encode_to_vec(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let list = aiserver::AvailableModelsResponse::decode(body).expect("AvailableModelsResponse");
    let names: Vec<_> = list.models.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, vec!["oa-model", "an-model", "rs-model"]);
    assert_eq!(list.models[0].client_display_name.as_deref(), Some("oa-model"));
    assert_eq!(list.composer_model_config.expect("composer").default_model, "oa-model");
    let (_, body) = s.unary("/aiserver.v1.AiService/GetDefaultModel", Vec::new()).await;
    assert_eq!(aiserver::GetDefaultModelResponse::decode(body).expect("default").model, "oa-model");
    let (_, body) = s.unary("/agent.v1.AgentService/GetUsableModels", Vec::new()).await;
    assert_eq!(agent::GetUsableModelsResponse::decode(body).expect("usable").models.len(), 3);
    let (status, body) = s.unary("/aiserver.v1.NetworkService/IsConnected", Vec::new()).await;
    assert_eq!((status, body.len()), (StatusCode::OK, 0));
    let (_, body) = s.unary("/aiserver.v1.AiService/ServerTime", Vec::new()).await;
    assert!(aiserver::ServerTimeResponse::decode(body).expect("time").transmit_timestamp > 1.0e9);
    // A bad unary body is a Connect error, not a crash.
    let (status, body) = s.unary("/aiserver.v1.AiService/AvailableModels", vec![0xff, 0xff]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let err: connect::ErrorBody = serde_json::from_slice(&body).expect("connect error json");
    assert_eq!(err.code, Code::InvalidArgument);
    // No catalog call reached the official host.
    assert!(s.seen.lock().expect("seen").is_empty());
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_passthrough_is_byte_identical_with_headers_intact() {
    let s = sim().await;
    let payload: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    for path in ["/aiserver.v1.AiService/SomethingNew", "/aiserver.v1.DashboardService/GetTeams"] {
        let resp = s
            .send(
                path,
                &[
                    ("content-type", "application/proto"),
                    ("x-cursor-checksum", "abc/def"),
                    ("authorization", "Bearer t"),
                ],
                payload.clone(),
            )
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers().get("x-official").expect("from the official host"), path);
        assert_eq!(resp.into_body().collect().await.expect("body").to_bytes().as_ref(), &payload[..]);
    }
    let seen = s.seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 2);
    for x in &seen {
        assert_eq!(x.body.as_ref(), &payload[..], "byte-identical body at {}", x.path);
        assert_eq!(x.headers.get("x-cursor-checksum").expect("checksum"), "abc/def");
        assert_eq!(x.headers.get("authorization").expect("auth"), "Bearer t");
    }
    s.te.stop().await;
}
