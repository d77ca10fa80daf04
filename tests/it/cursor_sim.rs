//! A Cursor client simulator, written from cursor-protocol.md, driving the whole engine through
//! its intercepting proxy with the engine's real CA: RunSSE plus hex BidiAppends (out of order,
//! duplicated), the model catalog, wire robustness, and passthrough of calls Keyhaven does not
//! answer to a test "official host".

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use keyhaven::app::Engine;
use keyhaven::config::{EngineConfig, UpstreamOverrides, load_str};
use keyhaven::cursor::protocol::agent::{self, agent_client_message, agent_server_message, interaction_update};
use keyhaven::cursor::protocol::aiserver;
use keyhaven::cursor::protocol::connect::{self, Code, Envelope};
use keyhaven::secrets::{Keyring, MemoryKeyring, Secrets};
use prost::Message;
use rustls::pki_types::{CertificateDer, ServerName};
use secrecy::SecretString;
use tokio::net::TcpListener;

use crate::proxy::{TestPki, connect_via_proxy, server_tls, test_pki};
use crate::support::fixtures::{Case, upstream_sse};
use crate::support::{CANARY_KEY, MockUpstream, Reply, TestEngine, Up, config_text};

const TIMEOUT: Duration = Duration::from_secs(20);

/// What the test official host saw.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    headers: http::HeaderMap,
    body: Bytes,
}

/// A TLS "official host" that records each request and echoes its body back.
async fn official_host(pki: &TestPki) -> (std::net::SocketAddr, Arc<Mutex<Vec<Seen>>>) {
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
                        let body = req.into_body().collect().await.expect("body").to_bytes();
                        s.lock().expect("seen").push(Seen { path: path.clone(), headers, body: body.clone() });
                        let resp = Response::builder()
                            .status(200)
                            .header("x-official", path)
                            .header("content-type", "application/proto")
                            .body(Full::new(body))
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

struct Sim {
    te: TestEngine,
    mock: MockUpstream,
    ca: CertificateDer<'static>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

async fn sim() -> Sim {
    let mock = MockUpstream::start().await;
    let pki = test_pki();
    let (official, seen) = official_host(&pki).await;
    let dir = tempfile::tempdir().expect("tempdir");
    // This client never answers KV requests: each turn's checkpoint is skipped after a short
    // ack timeout (checkpoints are covered by `checkpoint_recovery`).
    let text = config_text(&mock.url(), "") + "\n[agent]\nblob_ack_timeout = 50\n";
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
    Sim { te, mock, ca, seen }
}

impl Sim {
    /// One HTTP/1.1 request to api2.cursor.sh through the proxy (a fresh connection, as Cursor's
    /// BidiAppends mostly are), trusting only the engine's CA.
    async fn send(&self, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Response<Incoming> {
        let proxy = self.te.handle.proxy.clone().expect("proxy");
        let tcp = connect_via_proxy(proxy.addr, "api2.cursor.sh:443").await.expect("CONNECT");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.clone()).expect("root");
        let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let name = ServerName::try_from("api2.cursor.sh").expect("name");
        let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp).await.expect("tls");
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.expect("h1");
        tokio::spawn(conn);
        let mut req = Request::post(format!("https://api2.cursor.sh{path}")).header("host", "api2.cursor.sh");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::from(body))).expect("request");
        tokio::time::timeout(TIMEOUT, send.send_request(req)).await.expect("in time").expect("response")
    }

    async fn unary(&self, path: &str, body: Vec<u8>) -> (StatusCode, Bytes) {
        let resp =
            self.send(path, &[("content-type", "application/proto"), ("connect-protocol-version", "1")], body).await;
        let status = resp.status();
        (status, resp.into_body().collect().await.expect("body").to_bytes())
    }

    async fn append(&self, request_id: &str, seqno: u64, msg: &[u8]) {
        let (status, body) =
            self.unary("/aiserver.v1.BidiService/BidiAppend", connect::encode_append(request_id, seqno, msg)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.is_empty(), "BidiAppend answers with an empty body");
    }

    async fn run_sse(&self, request_id: &str) -> Response<Incoming> {
        let open = aiserver::BidiRequestId { request_id: request_id.to_owned() }.encode_to_vec();
        let resp = self
            .send(
                "/agent.v1.AgentService/RunSSE",
                &[("content-type", "application/connect+proto"), ("connect-protocol-version", "1")],
                connect::encode_envelope(&open, false).to_vec(),
            )
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers().get("content-type").expect("ct"), "text/event-stream");
        resp
    }
}

/// Reads a RunSSE body to its end: the interaction updates (heartbeats, KV requests and
/// checkpoints dropped) and the end-stream.
async fn read_frames(resp: Response<Incoming>) -> (Vec<agent::AgentServerMessage>, connect::EndStream) {
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

fn update(m: &agent::AgentServerMessage) -> interaction_update::Message {
    match &m.message {
        Some(agent_server_message::Message::InteractionUpdate(u)) => u.message.clone().expect("update case"),
        other => panic!("not an interaction update: {other:?}"),
    }
}

fn run_request(model: &str, text: &str) -> Vec<u8> {
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

const HEARTBEAT: [u8; 2] = [0x3a, 0x00];

fn text(s: &str) -> interaction_update::Message {
    interaction_update::Message::TextDelta(agent::TextDeltaUpdate { text: s.into() })
}

fn tokens(n: i32) -> interaction_update::Message {
    interaction_update::Message::TokenDelta(agent::TokenDeltaUpdate { tokens: n })
}

fn ended(input: i64, output: i64, cache_read: i64) -> interaction_update::Message {
    interaction_update::Message::TurnEnded(agent::TurnEndedUpdate {
        input_tokens: Some(input),
        output_tokens: Some(output),
        cache_read_tokens: Some(cache_read),
        cache_write_tokens: Some(0),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_plain_and_thinking_turns_stream_the_exact_frames() {
    let s = sim().await;
    s.mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    // RunSSE first; the heartbeat (seq 1) arrives before the run request (seq 0), then again.
    let resp = s.run_sse("req-plain").await;
    s.append("req-plain", 1, &HEARTBEAT).await;
    s.append("req-plain", 0, &run_request("oa-model", "hi")).await;
    s.append("req-plain", 1, &HEARTBEAT).await;
    let (msgs, end) = read_frames(resp).await;
    let got: Vec<_> = msgs.iter().map(update).collect();
    assert_eq!(got, vec![text("Hello"), tokens(2), text(" world"), tokens(2), ended(20, 5, 0)]);
    assert_eq!(end, connect::EndStream::default(), "success end-stream is {{}}");
    // An append for the finished run still gets its 200.
    s.append("req-plain", 2, &HEARTBEAT).await;
    let call = s.te.only_call().await;
    assert_eq!(call.summary.client, "cursor");
    assert_eq!(call.summary.model, "oa-model");

    // A thinking turn: appends before RunSSE this time.
    s.mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Thinking)));
    s.append("req-think", 0, &run_request("oa-model", "2+2?")).await;
    let (msgs, end) = read_frames(s.run_sse("req-think").await).await;
    let got: Vec<_> = msgs.iter().map(update).collect();
    assert_eq!(got.len(), 8, "{got:?}");
    assert_eq!(
        got[0],
        interaction_update::Message::ThinkingDelta(agent::ThinkingDeltaUpdate {
            text: "Let me ".into(),
            thinking_style: None
        })
    );
    assert_eq!(got[1], tokens(2));
    assert_eq!(
        got[2],
        interaction_update::Message::ThinkingDelta(agent::ThinkingDeltaUpdate {
            text: "think.".into(),
            thinking_style: None
        })
    );
    assert_eq!(got[3], tokens(2));
    assert!(matches!(got[4], interaction_update::Message::ThinkingCompleted(_)));
    assert_eq!(&got[5..], &[text("Answer: 4"), tokens(3), ended(10, 12, 0)]);
    assert_eq!(end, connect::EndStream::default());
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
async fn cursor_wire_robustness_has_defined_answers() {
    let s = sim().await;
    let bad_hex = aiserver::BidiAppendRequest {
        data: "zz".into(),
        request_id: Some(aiserver::BidiRequestId { request_id: "r-bad".into() }),
        append_seqno: 0,
        data_binary: Vec::new(),
    }
    .encode_to_vec();
    let gz = [("content-type", "application/proto"), ("content-encoding", "gzip")];
    for (body, headers) in
        [(bad_hex, &gz[..1]), (vec![0xff, 0x01, 0x02], &gz[..1]), (vec![1, 2, 3, 4], &gz[..]), (Vec::new(), &gz[..1])]
    {
        let resp = s.send("/aiserver.v1.BidiService/BidiAppend", headers, body).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(resp.into_body().collect().await.expect("body").to_bytes().is_empty());
    }
    // An unknown request id: 200, empty.
    s.append("never-opened", 5, &HEARTBEAT).await;
    // Truncated and wrongly sized RunSSE envelopes: an error end-stream, not a hang or a crash.
    for body in [vec![0, 0, 0], vec![0, 0, 0, 0, 50, 1, 2], vec![0, 0xff, 0xff, 0xff, 0xff]] {
        let resp =
            s.send("/agent.v1.AgentService/RunSSE", &[("content-type", "application/connect+proto")], body).await;
        let (msgs, end) = read_frames(resp).await;
        assert!(msgs.is_empty());
        assert_eq!(end.error.expect("error").code, Code::InvalidArgument);
    }
    // Invalid protobuf as the run request, and an unknown model: Connect errors with details.
    let resp = s.run_sse("r-garbage").await;
    s.append("r-garbage", 0, &[0x0a, 0x03, 0xff, 0xff, 0xff]).await;
    let (_, end) = read_frames(resp).await;
    assert_eq!(end.error.expect("error").code, Code::InvalidArgument);
    let resp = s.run_sse("r-model").await;
    s.append("r-model", 0, &run_request("no-such-model", "hi")).await;
    let (_, end) = read_frames(resp).await;
    let err = end.error.expect("error");
    assert_eq!(err.code, Code::NotFound);
    let details = err.cursor_details().expect("ErrorDetails");
    assert_eq!(details.error, aiserver::error_details::Error::BadModelName as i32);
    // A provider failure: a readable Cursor error.
    s.mock.push(Reply::json(500, r#"{"error":{"message":"boom","type":"server_error"}}"#));
    let resp = s.run_sse("r-fail").await;
    s.append("r-fail", 0, &run_request("oa-model", "hi")).await;
    let (_, end) = read_frames(resp).await;
    let err = end.error.expect("error");
    assert_eq!(err.code, Code::Unavailable);
    assert!(err.message.contains("boom"), "{err:?}");
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_cancel_action_stops_the_provider_call() {
    let s = sim().await;
    s.mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)).delay(Duration::from_millis(300)).hang());
    let resp = s.run_sse("r-cancel").await;
    s.append("r-cancel", 0, &run_request("oa-model", "hi")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cancel = agent::AgentClientMessage {
        message: Some(agent_client_message::Message::ConversationAction(agent::ConversationAction {
            action: Some(agent::conversation_action::Action::CancelAction(agent::CancelAction {
                reason: "user_stopped_generation".into(),
            })),
            ..Default::default()
        })),
    }
    .encode_to_vec();
    s.append("r-cancel", 1, &cancel).await;
    let (msgs, end) = read_frames(resp).await;
    assert!(matches!(msgs.last().map(update), Some(interaction_update::Message::TurnEnded(_))), "{msgs:?}");
    assert_eq!(end, connect::EndStream::default());
    let call = s.te.only_call().await;
    assert_eq!(call.summary.status, keyhaven::model::CallStatus::Canceled);
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
