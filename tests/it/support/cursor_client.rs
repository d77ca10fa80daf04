//! A Cursor client simulator for agent turns with tools, written from docs/cursor-wire.md §4.8 and
//! §5.3: it opens RunSSE through the engine's intercepting proxy (trusting only the engine's CA),
//! appends the run request, then reads the stream and really executes every exec request
//! (read, write, delete, grep and glob, ls, shell through `sh -c`, MCP) against a temporary
//! workspace, answering with hex BidiAppends in seqno order and a `stream_close` after each
//! reply, the way the IDE does. A [`Policy`] makes it misbehave per exec (never answer, throw,
//! reject, answer late with heartbeats).
//!
//! Like the IDE it keeps a blob store across turns (§4.9): `set_blob_args` are stored and
//! acknowledged, `get_blob_args` answered from the store (unset data when missing); [`Kv`] makes
//! it stay silent instead. A [`Turn`] can carry the last checkpoint (`conversation_state`),
//! `pre_fetched_blobs` and a `resume_action` instead of a user message.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use keyhaven::cursor::protocol::agent::{
    self, agent_client_message, agent_server_message, exec_client_control_message, exec_client_message,
    exec_server_control_message, exec_server_message, grep_union_result, interaction_response, interaction_update,
    kv_client_message, kv_server_message, shell_stream,
};
use keyhaven::cursor::protocol::aiserver;
use keyhaven::cursor::protocol::connect::{self, Envelope, EnvelopeDecoder};
use keyhaven::secrets::MemoryKeyring;
use prost::Message;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

use crate::proxy::connect_via_proxy;
use crate::support::{MockUpstream, TestEngine, config_text};

/// The client's blob store: id → content.
pub type BlobStore = Arc<Mutex<HashMap<Vec<u8>, Vec<u8>>>>;

/// How the simulated client treats KV requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kv {
    /// Store and acknowledge blobs, serve them back.
    Answer,
    /// Never answer a KV request.
    Ignore,
}

/// A hang guard for one read or request; assertions never depend on it.
pub const TIMEOUT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// Provider replies (OpenAI Chat SSE, as the mock upstream sends them)

fn oa_chunk(delta: Value, finish: Option<&str>) -> String {
    let chunk = json!({
        "id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    });
    format!("data: {chunk}\n\n")
}

fn oa_usage(prompt: u64, completion: u64) -> String {
    let chunk = json!({
        "id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "gpt-4o-mini",
        "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion}
    });
    format!("data: {chunk}\n\n")
}

/// A streamed answer with these tool calls (`(id, name, arguments)`), arguments in two pieces.
pub fn oa_tools(calls: &[(&str, &str, Value)]) -> String {
    let mut s = oa_chunk(json!({"role": "assistant", "content": null}), None);
    for (i, (id, name, args)) in calls.iter().enumerate() {
        let text = args.to_string();
        let (a, b) = text.split_at(text.len() / 2);
        s += &oa_chunk(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
            None,
        );
        s += &oa_chunk(json!({"tool_calls": [{"index": i, "function": {"arguments": a}}]}), None);
        s += &oa_chunk(json!({"tool_calls": [{"index": i, "function": {"arguments": b}}]}), None);
    }
    s += &oa_chunk(json!({}), Some("tool_calls"));
    s += &oa_usage(100, 20);
    s + "data: [DONE]\n\n"
}

/// A text answer that starts streaming and then never finishes (pair with `Reply::hang`).
pub fn oa_text_unfinished(text: &str) -> String {
    [oa_chunk(json!({"role": "assistant", "content": ""}), None), oa_chunk(json!({"content": text}), None)].concat()
}

/// A streamed text answer.
pub fn oa_text(text: &str) -> String {
    [
        oa_chunk(json!({"role": "assistant", "content": ""}), None),
        oa_chunk(json!({"content": text}), None),
        oa_chunk(json!({}), Some("stop")),
        oa_usage(50, 5),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat()
}

// ---------------------------------------------------------------------------------------------
// The engine and the client's connection

pub struct CursorSim {
    pub te: TestEngine,
    pub mock: MockUpstream,
    pub ws: Workspace,
    /// The client's blob store (kept across turns and engine restarts, like the IDE's).
    pub blobs: BlobStore,
    pub kv: Kv,
    /// How the simulated user answers interaction queries.
    pub user: User,
    conn: Conn,
    keyring: Arc<MemoryKeyring>,
    config: String,
}

/// What every request needs: the proxy and the CA to trust.
#[derive(Clone)]
struct Conn {
    proxy: SocketAddr,
    ca: CertificateDer<'static>,
    /// The client's identity headers (the IDE's, unless a test sends as another client).
    identity: Vec<(String, String)>,
}

/// The identity headers the simulated IDE sends on every request (docs/cursor-wire.md §1.5): its
/// Cursor access token, client version and type, and privacy mode.
pub const IDE_IDENTITY: [(&str, &str); 4] = [
    ("authorization", "Bearer sim-cursor-access-token"),
    ("x-cursor-client-version", "2.6.19"),
    ("x-cursor-client-type", "ide"),
    ("x-ghost-mode", "true"),
];

impl Conn {
    async fn send(&self, path: &str, content_type: &str, body: Vec<u8>) -> Response<Incoming> {
        let tcp = connect_via_proxy(self.proxy, "api2.cursor.sh:443").await.expect("CONNECT");
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
        let mut req = Request::post(format!("https://api2.cursor.sh{path}"))
            .header("host", "api2.cursor.sh")
            .header("content-type", content_type)
            .header("connect-protocol-version", "1");
        for (k, v) in &self.identity {
            req = req.header(k, v);
        }
        let req = req.body(Full::new(Bytes::from(body))).expect("request");
        tokio::time::timeout(TIMEOUT, send.send_request(req)).await.expect("in time").expect("response")
    }

    async fn append(&self, request_id: &str, seqno: u64, msg: &[u8]) {
        let resp = self
            .send(
                "/aiserver.v1.BidiService/BidiAppend",
                "application/proto",
                connect::encode_append(request_id, seqno, msg),
            )
            .await;
        let resp = ok_or_panic(resp, "BidiAppend").await;
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert!(body.is_empty(), "BidiAppend answers with an empty body");
    }
}

/// Starts an engine whose `[agent]` table is `agent` (e.g. `exec_timeout = 2000`).
pub async fn start(agent: &str) -> CursorSim {
    start_with(agent, "").await
}

/// A model of the test config with a 1000-token context window (compaction tests).
pub const SMALL_MODEL: &str = r#"
[[models]]
name = "small-model"
provider = "oa"
upstream = "gpt-4o-mini"
context_window = 1000
capabilities = { tools = true }
"#;

/// As [`start`], with `extra` (e.g. more `[[models]]`) appended to the config.
pub async fn start_with(agent: &str, extra: &str) -> CursorSim {
    start_server("", agent, extra).await
}

/// As [`start_with`], with `server` in the `[server]` table (e.g. `record_calls = false`).
pub async fn start_server(server: &str, agent: &str, extra: &str) -> CursorSim {
    let mock = MockUpstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_text(&mock.url(), server) + "\n[agent]\n" + agent + "\n" + extra;
    let keyring = Arc::new(MemoryKeyring::default());
    let te = TestEngine::start_with_keyring(dir, &config, keyring.clone()).await;
    let conn = Conn::of(&te);
    CursorSim {
        te,
        mock,
        ws: Workspace::new(),
        blobs: BlobStore::default(),
        kv: Kv::Answer,
        user: agreeable_user(),
        conn,
        keyring,
        config,
    }
}

impl Conn {
    fn of(te: &TestEngine) -> Conn {
        let pem =
            std::fs::read_to_string(te.dir.path().join("ca").join(keyhaven::proxy::ca::CERT_FILE)).expect("ca pem");
        let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let ca = CertificateDer::from(base64::engine::general_purpose::STANDARD.decode(b64).expect("pem body"));
        let identity = IDE_IDENTITY.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Conn { proxy: te.handle.proxy.clone().expect("proxy").addr, ca, identity }
    }
}

impl CursorSim {
    /// A request through the proxy from another local client, whose identity headers are
    /// `identity` instead of the IDE's (issue 14 §5: foreign injections).
    pub async fn send_as(
        &self,
        identity: &[(&str, &str)],
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> Response<Incoming> {
        let identity = identity.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Conn { identity, ..self.conn.clone() }.send(path, content_type, body).await
    }
}

impl CursorSim {
    /// The messages of the transcript a checkpoint references, read from the client's blob store
    /// (so they were acknowledged before it); each blob's id is checked to be its SHA-256.
    pub fn roots(&self, state: &agent::ConversationStateStructure) -> Vec<keyhaven::cursor::checkpoint::RootBlob> {
        let store = self.blobs.lock().expect("blobs");
        state
            .root_prompt_messages_json
            .iter()
            .map(|id| {
                let data = store.get(id).expect("the client holds every referenced blob");
                let sha = keyhaven::cursor::blobs::blob_id(data);
                assert_eq!(sha.as_slice(), id.as_slice(), "a blob id is the sha256 of its content");
                serde_json::from_slice(data).expect("root json")
            })
            .collect()
    }

    /// Stops the engine and starts a new one on the same data directory, keyring and workspace.
    pub async fn restart(self) -> CursorSim {
        let CursorSim { te, mock, ws, blobs, kv, user, keyring, config, .. } = self;
        let dir = te.stop().await;
        let te = TestEngine::start_with_keyring(dir, &config, keyring.clone()).await;
        let conn = Conn::of(&te);
        CursorSim { te, mock, ws, blobs, kv, user, conn, keyring, config }
    }

    /// Stops the engine and starts a new one on a **fresh** data directory (nothing of the old
    /// database); the workspace and the client's blob store stay.
    pub async fn fresh_data_dir(self) -> CursorSim {
        let CursorSim { te, mock, ws, blobs, kv, user, config, .. } = self;
        drop(te.stop().await);
        let keyring = Arc::new(MemoryKeyring::default());
        let dir = tempfile::tempdir().expect("tempdir");
        let te = TestEngine::start_with_keyring(dir, &config, keyring.clone()).await;
        let conn = Conn::of(&te);
        CursorSim { te, mock, ws, blobs, kv, user, conn, keyring, config }
    }
}

// ---------------------------------------------------------------------------------------------
// Runs

/// What a turn asks for.
#[derive(Debug, Clone)]
pub struct Turn {
    pub request_id: String,
    pub conversation_id: String,
    pub message_id: String,
    pub text: String,
    pub mode: agent::AgentMode,
    /// A raw `UserMessage.mode` value sent instead of `mode` (values this build's enum lacks,
    /// e.g. Cursor 3.x's `AGENT_MODE_CUSTOM = 8`).
    pub mode_value: Option<i32>,
    pub mcp_tools: Vec<agent::McpToolDefinition>,
    /// The checkpoint the client stored (sent back as `conversation_state`).
    pub state: Option<agent::ConversationStateStructure>,
    pub pre_fetched_blobs: Vec<agent::PreFetchedBlob>,
    /// Send `resume_action` instead of the user message.
    pub resume: bool,
    /// The model the client picked (`oa-model` unless set).
    pub model: String,
    /// Send `summarize_action` as the run's action instead of the user message.
    pub summarize: bool,
    /// What the user attached (`UserMessage.selected_context`).
    pub selected: Option<agent::SelectedContext>,
    /// The request context's rules, skills, instructions and switches (`env` is filled in).
    pub context: agent::RequestContext,
    /// The message text moved into a blob (`text` is then sent empty).
    pub text_blob_id: Option<Vec<u8>>,
}

impl Turn {
    pub fn new(request_id: &str, conversation_id: &str, text: &str) -> Turn {
        Turn {
            request_id: request_id.into(),
            conversation_id: conversation_id.into(),
            message_id: format!("m-{request_id}"),
            text: text.into(),
            mode: agent::AgentMode::Agent,
            mode_value: None,
            mcp_tools: Vec::new(),
            state: None,
            pre_fetched_blobs: Vec::new(),
            resume: false,
            model: "oa-model".into(),
            summarize: false,
            selected: None,
            context: agent::RequestContext::default(),
            text_blob_id: None,
        }
    }

    pub fn with_state(mut self, state: Option<agent::ConversationStateStructure>) -> Turn {
        self.state = state;
        self
    }

    pub fn resuming(mut self) -> Turn {
        self.resume = true;
        self
    }

    /// A run request that asks to summarize (compact) the conversation.
    pub fn summarize(request_id: &str, conversation_id: &str) -> Turn {
        Turn { summarize: true, ..Turn::new(request_id, conversation_id, "") }
    }
}

/// How the simulated client treats one exec request.
#[derive(Debug, Clone)]
pub enum Act {
    /// Execute it against the workspace.
    Run,
    /// Never answer.
    Ignore,
    /// `exec_client_control_message.throw`.
    Throw(String),
    /// Shell only: the user rejects the command.
    Reject(String),
    /// Send this many exec heartbeats `gap` apart, then execute it.
    Late { heartbeats: u32, gap: Duration },
    /// Answer with this message instead.
    Reply(exec_client_message::Message),
    /// Execute it once the semaphore gives a permit (the test decides when).
    After(Arc<tokio::sync::Semaphore>),
}

pub type Policy = Arc<dyn Fn(&agent::ExecServerMessage) -> Act + Send + Sync>;

pub fn run_everything() -> Policy {
    Arc::new(|_| Act::Run)
}

/// The user's answer to an interaction query (`None`: the user never answers).
pub type User = Arc<dyn Fn(&agent::InteractionQuery) -> Option<interaction_response::Result> + Send + Sync>;

/// A user who approves every request, picks the first option of every question and accepts
/// every plan (saved under `file:///plans/<name>.md`).
pub fn agreeable_user() -> User {
    use agent::interaction_query::Query;
    Arc::new(|q| {
        Some(match q.query.as_ref()? {
            Query::WebSearchRequestQuery(_) => {
                interaction_response::Result::WebSearchRequestResponse(agent::WebSearchRequestResponse {
                    result: Some(agent::web_search_request_response::Result::Approved(agent::WebSearchApproved {})),
                })
            }
            Query::WebFetchRequestQuery(_) => {
                interaction_response::Result::WebFetchRequestResponse(agent::WebFetchRequestResponse {
                    result: Some(agent::web_fetch_request_response::Result::Approved(agent::WebFetchApproved {})),
                })
            }
            Query::SwitchModeRequestQuery(_) => {
                interaction_response::Result::SwitchModeRequestResponse(agent::SwitchModeRequestResponse {
                    result: Some(agent::switch_mode_request_response::Result::Approved(agent::SwitchModeApproved {})),
                })
            }
            Query::AskQuestionInteractionQuery(a) => {
                let answers = a
                    .args
                    .iter()
                    .flat_map(|a| &a.questions)
                    .map(|q| agent::AskQuestionAnswer {
                        question_id: q.id.clone(),
                        selected_option_ids: q.options.iter().take(1).map(|o| o.id.clone()).collect(),
                        freeform_text: None,
                    })
                    .collect();
                interaction_response::Result::AskQuestionInteractionResponse(agent::AskQuestionInteractionResponse {
                    result: Some(agent::AskQuestionResult {
                        result: Some(agent::ask_question_result::Result::Success(agent::AskQuestionSuccess {
                            answers,
                        })),
                    }),
                })
            }
            Query::CreatePlanRequestQuery(p) => {
                let name = p.args.as_ref().map_or("plan", |a| a.name.as_str()).replace(' ', "-");
                interaction_response::Result::CreatePlanRequestResponse(agent::CreatePlanRequestResponse {
                    result: Some(agent::CreatePlanResult {
                        result: Some(agent::create_plan_result::Result::Success(agent::CreatePlanSuccess {})),
                        plan_uri: format!("file:///plans/{name}.md"),
                    }),
                })
            }
        })
    })
}

/// What the client saw of one run.
#[derive(Debug, Default)]
pub struct Seen {
    /// Every server message but heartbeats, in order.
    pub msgs: Vec<agent::AgentServerMessage>,
    pub end: Option<connect::EndStream>,
    /// Exec ids the server aborted.
    pub aborts: Vec<u32>,
    /// KV and checkpoint events in the order the client saw or did them: `set <id>` (request
    /// received), `acked <id>` (ack delivered), `get <id>`, `checkpoint <index in msgs>`.
    pub kv_log: Vec<String>,
}

impl Seen {
    pub fn updates(&self) -> Vec<interaction_update::Message> {
        self.msgs
            .iter()
            .filter_map(|m| match &m.message {
                Some(agent_server_message::Message::InteractionUpdate(u)) => u.message.clone(),
                _ => None,
            })
            .collect()
    }

    pub fn execs(&self) -> Vec<agent::ExecServerMessage> {
        self.msgs
            .iter()
            .filter_map(|m| match &m.message {
                Some(agent_server_message::Message::ExecServerMessage(x)) => Some(x.clone()),
                _ => None,
            })
            .collect()
    }

    /// The interaction queries of the run, in order.
    pub fn queries(&self) -> Vec<agent::InteractionQuery> {
        self.msgs
            .iter()
            .filter_map(|m| match &m.message {
                Some(agent_server_message::Message::InteractionQuery(q)) => Some(q.clone()),
                _ => None,
            })
            .collect()
    }

    /// The checkpoints of the run, in order.
    pub fn checkpoints(&self) -> Vec<agent::ConversationStateStructure> {
        self.msgs
            .iter()
            .filter_map(|m| match &m.message {
                Some(agent_server_message::Message::ConversationCheckpointUpdate(c)) => Some(c.clone()),
                _ => None,
            })
            .collect()
    }

    /// The newest checkpoint (what the IDE would send back next turn).
    pub fn last_checkpoint(&self) -> Option<agent::ConversationStateStructure> {
        self.checkpoints().pop()
    }

    pub fn turn_ended(&self) -> Option<agent::TurnEndedUpdate> {
        self.updates().into_iter().find_map(|u| match u {
            interaction_update::Message::TurnEnded(t) => Some(t),
            _ => None,
        })
    }

    /// The completed card of a call.
    pub fn completed(&self, call_id: &str) -> agent::ToolCall {
        self.updates()
            .into_iter()
            .find_map(|u| match u {
                interaction_update::Message::ToolCallCompleted(c) if c.call_id == call_id => c.tool_call,
                _ => None,
            })
            .unwrap_or_else(|| panic!("no tool_call_completed for {call_id}"))
    }

    /// The kinds of frame of one call, in order: `partial`, `started`, `exec`, `completed`,
    /// `delta`.
    pub fn call_sequence(&self, call_id: &str) -> Vec<&'static str> {
        let mut out = Vec::new();
        for m in &self.msgs {
            match &m.message {
                Some(agent_server_message::Message::InteractionUpdate(u)) => match &u.message {
                    Some(interaction_update::Message::PartialToolCall(p))
                        if p.call_id == call_id && out.last() != Some(&"partial") =>
                    {
                        out.push("partial");
                    }
                    Some(interaction_update::Message::ToolCallStarted(p)) if p.call_id == call_id => {
                        out.push("started")
                    }
                    Some(interaction_update::Message::ToolCallCompleted(p)) if p.call_id == call_id => {
                        out.push("completed");
                    }
                    Some(interaction_update::Message::ToolCallDelta(p))
                        if p.call_id == call_id && out.last() != Some(&"delta") =>
                    {
                        out.push("delta");
                    }
                    _ => {}
                },
                Some(agent_server_message::Message::ExecServerMessage(x)) if x.exec_id == call_id => out.push("exec"),
                _ => {}
            }
        }
        out
    }
}

/// A run in progress: the reader task answers execs; the test may cancel, send follow-up
/// actions, and wait until the client has seen something.
pub struct Run {
    request_id: String,
    seq: Arc<AtomicU64>,
    conn: Conn,
    task: tokio::task::JoinHandle<Seen>,
    /// Every server message but heartbeats so far (what `Seen::msgs` will hold).
    live: Live,
}

type Live = Arc<Mutex<Vec<agent::AgentServerMessage>>>;

impl CursorSim {
    async fn open_run_sse(&self, request_id: &str) -> Response<Incoming> {
        let open = aiserver::BidiRequestId { request_id: request_id.to_owned() }.encode_to_vec();
        let resp = self
            .conn
            .send(
                "/agent.v1.AgentService/RunSSE",
                "application/connect+proto",
                connect::encode_envelope(&open, false).to_vec(),
            )
            .await;
        ok_or_panic(resp, "RunSSE open").await
    }

    fn read_run(&self, request_id: &str, resp: Response<Incoming>, seq: Arc<AtomicU64>, policy: Policy) -> Run {
        let (conn, ws, id, s) = (self.conn.clone(), self.ws.clone(), request_id.to_owned(), seq.clone());
        let live = Live::default();
        let kv = (self.blobs.clone(), self.kv, live.clone(), self.user.clone());
        let task = tokio::spawn(async move { drive(resp.into_body(), conn, ws, id, s, policy, kv).await });
        Run { request_id: request_id.to_owned(), seq, conn: self.conn.clone(), task, live }
    }

    /// Opens RunSSE, appends the run request (seqno 0) and starts answering execs per `policy`.
    pub async fn start_run(&self, turn: &Turn, policy: Policy) -> Run {
        self.start_run_at(turn, 0, policy).await
    }

    /// As [`CursorSim::start_run`], with the run request at append seqno `first` (later appends
    /// follow it).
    pub async fn start_run_at(&self, turn: &Turn, first: u64, policy: Policy) -> Run {
        let resp = self.open_run_sse(&turn.request_id).await;
        let seq = Arc::new(AtomicU64::new(first));
        let first = seq.fetch_add(1, Ordering::SeqCst);
        self.conn.append(&turn.request_id, first, &run_request(turn, &self.ws.root_str()).encode_to_vec()).await;
        self.read_run(&turn.request_id, resp, seq, policy)
    }

    /// Opens RunSSE again for a run whose connection dropped, and reads it from the start (the
    /// output hub replays) with the same append seqnos.
    pub async fn resubscribe(&self, dropped: Dropped, policy: Policy) -> Run {
        let resp = self.open_run_sse(&dropped.request_id).await;
        self.read_run(&dropped.request_id, resp, dropped.seq, policy)
    }

    /// Opens RunSSE and appends `message` (a hand-encoded `AgentClientMessage`, see
    /// `cursor_raw`) as seqno 0.
    pub async fn start_raw_run(&self, request_id: &str, message: &[u8], policy: Policy) -> Run {
        let resp = self.open_run_sse(request_id).await;
        let seq = Arc::new(AtomicU64::new(1));
        self.conn.append(request_id, 0, message).await;
        self.read_run(request_id, resp, seq, policy)
    }

    /// A whole turn with every exec executed.
    pub async fn turn(&self, turn: &Turn) -> Seen {
        self.start_run(turn, run_everything()).await.finish().await
    }
}

impl Run {
    async fn send(&self, msg: agent_client_message::Message) {
        let seqno = self.seq.fetch_add(1, Ordering::SeqCst);
        let bytes = agent::AgentClientMessage { message: Some(msg) }.encode_to_vec();
        self.conn.append(&self.request_id, seqno, &bytes).await;
    }

    /// Appends a hand-encoded `AgentClientMessage` (see `cursor_raw`) at the next seqno.
    pub async fn send_raw(&self, message: &[u8]) {
        let seqno = self.seq.fetch_add(1, Ordering::SeqCst);
        self.conn.append(&self.request_id, seqno, message).await;
    }

    /// The stop button.
    pub async fn cancel(&self) {
        self.send(agent_client_message::Message::ConversationAction(agent::ConversationAction {
            action: Some(agent::conversation_action::Action::CancelAction(agent::CancelAction {
                reason: "user_stopped_generation".into(),
            })),
            ..Default::default()
        }))
        .await;
    }

    /// The server messages seen so far.
    pub fn live_messages(&self) -> Vec<agent::AgentServerMessage> {
        self.live.lock().expect("live").clone()
    }

    /// Waits until the messages seen so far satisfy `ready` (a hang guard of [`TIMEOUT`]).
    pub async fn wait_until(&self, ready: impl Fn(&[agent::AgentServerMessage]) -> bool) {
        let wait = async {
            while !ready(&self.live.lock().expect("live")) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(TIMEOUT, wait).await.expect("the awaited frames arrive");
    }

    /// The RunSSE connection drops (no cancel): the reader stops and closes its connection.
    pub async fn drop_connection(self) -> Dropped {
        self.task.abort();
        let _ = self.task.await;
        Dropped { request_id: self.request_id, seq: self.seq }
    }

    /// A follow-up user message sent while the run works (`conversation_action` with a
    /// `user_message_action`); `interrupt` marks the pending tool calls as interrupted for it.
    pub async fn user_message(&self, message_id: &str, text: &str, interrupt: bool) {
        self.send(agent_client_message::Message::ConversationAction(agent::ConversationAction {
            action: Some(agent::conversation_action::Action::UserMessageAction(agent::UserMessageAction {
                user_message: Some(agent::UserMessage {
                    text: text.into(),
                    message_id: message_id.into(),
                    mode: agent::AgentMode::Agent as i32,
                    ..Default::default()
                }),
                interrupted_pending_tool_call_resolutions: interrupt.then(Vec::new),
                ..Default::default()
            })),
            ..Default::default()
        }))
        .await;
    }

    /// The summarize action, sent while the run works.
    pub async fn summarize(&self) {
        self.send(agent_client_message::Message::ConversationAction(agent::ConversationAction {
            action: Some(agent::conversation_action::Action::SummarizeAction(agent::SummarizeAction {})),
            ..Default::default()
        }))
        .await;
    }

    /// Waits until the server messages seen so far (heartbeats excluded) satisfy `done`.
    pub async fn wait_for(&self, done: impl Fn(&[agent::AgentServerMessage]) -> bool) {
        self.wait_until(done).await;
    }

    /// Waits for the run's end-stream and returns what the client saw.
    pub async fn finish(self) -> Seen {
        tokio::time::timeout(TIMEOUT * 2, self.task).await.expect("the run ends").expect("reader task")
    }
}

/// A run whose RunSSE connection dropped.
pub struct Dropped {
    pub request_id: String,
    seq: Arc<AtomicU64>,
}

/// The terminals folder the simulated editor reports (`RequestContextEnv.terminals_folder`).
pub const TERMINALS: &str = "/home/u/.cursor/projects/p/terminals";

pub fn run_request(turn: &Turn, workspace: &str) -> agent::AgentClientMessage {
    let request_context = agent::RequestContext {
        env: Some(agent::RequestContextEnv {
            os_version: "linux".into(),
            workspace_paths: vec![workspace.to_owned()],
            shell: "sh".into(),
            terminals_folder: TERMINALS.into(),
            ..Default::default()
        }),
        ..turn.context.clone()
    };
    let action = if turn.summarize {
        agent::conversation_action::Action::SummarizeAction(agent::SummarizeAction {})
    } else if turn.resume {
        agent::conversation_action::Action::ResumeAction(agent::ResumeAction { request_context: Some(request_context) })
    } else {
        agent::conversation_action::Action::UserMessageAction(agent::UserMessageAction {
            user_message: Some(agent::UserMessage {
                text: if turn.text_blob_id.is_some() { String::new() } else { turn.text.clone() },
                message_id: turn.message_id.clone(),
                mode: turn.mode_value.unwrap_or(turn.mode as i32),
                selected_context: turn.selected.clone(),
                text_blob_id: turn.text_blob_id.clone(),
                ..Default::default()
            }),
            request_context: Some(request_context),
            ..Default::default()
        })
    };
    agent::AgentClientMessage {
        message: Some(agent_client_message::Message::RunRequest(agent::AgentRunRequest {
            conversation_state: turn.state.clone(),
            pre_fetched_blobs: turn.pre_fetched_blobs.clone(),
            action: Some(agent::ConversationAction { action: Some(action), ..Default::default() }),
            requested_model: Some(agent::RequestedModel { model_id: turn.model.clone(), ..Default::default() }),
            mcp_tools: Some(agent::McpTools { mcp_tools: turn.mcp_tools.clone() }),
            conversation_id: Some(turn.conversation_id.clone()),
            ..Default::default()
        })),
    }
}

/// `resp` when it is a 200; otherwise panics with its status and body (e.g. the proxy's answer
/// when a request went to Cursor's servers, which tests cannot reach).
async fn ok_or_panic(resp: Response<Incoming>, what: &str) -> Response<Incoming> {
    if resp.status() == StatusCode::OK {
        return resp;
    }
    let status = resp.status();
    let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    panic!("{what} answered {status}: {}", String::from_utf8_lossy(&body));
}

async fn next_envelope(body: &mut Incoming, dec: &mut EnvelopeDecoder) -> Option<Envelope> {
    loop {
        if let Some(env) = dec.try_next().expect("well-formed envelopes") {
            return Some(env);
        }
        match tokio::time::timeout(TIMEOUT, body.frame()).await.expect("a frame in time") {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    dec.push(&data);
                }
            }
            _ => return None,
        }
    }
}

async fn drive(
    mut body: Incoming,
    conn: Conn,
    ws: Workspace,
    request_id: String,
    seq: Arc<AtomicU64>,
    policy: Policy,
    (blobs, kv, live, user): (BlobStore, Kv, Live, User),
) -> Seen {
    let mut dec = EnvelopeDecoder::new(true);
    let mut seen = Seen::default();
    let heartbeat = keyhaven::cursor::protocol::events::heartbeat();
    let mut tasks = Vec::new();
    while let Some(env) = next_envelope(&mut body, &mut dec).await {
        let m = match env {
            Envelope::EndStream(j) => {
                assert!(seen.end.is_none(), "one end-stream frame");
                seen.end = Some(connect::decode_end_stream(&j).expect("end json"));
                continue;
            }
            Envelope::Message(m) => {
                assert!(seen.end.is_none(), "nothing follows the end-stream frame");
                // Every frame against the independent description of Cursor's types.
                crate::support::cursor_schema::assert_server_message(&m);
                connect::decode_message::<agent::AgentServerMessage>(&m).expect("server message")
            }
        };
        if m == heartbeat {
            continue;
        }
        seen.msgs.push(m.clone());
        live.lock().expect("live").push(m.clone());
        match m.message {
            Some(agent_server_message::Message::ExecServerControlMessage(agent::ExecServerControlMessage {
                message: Some(exec_server_control_message::Message::Abort(a)),
            })) => seen.aborts.push(a.id),
            Some(agent_server_message::Message::ConversationCheckpointUpdate(state)) => {
                seen.kv_log.push(format!("checkpoint {}", seen.msgs.len() - 1));
                check_checkpoint_blobs(&state, &blobs);
            }
            Some(agent_server_message::Message::KvServerMessage(k)) => {
                // Answered in line, in order, like the IDE's KV handler.
                let answer = match k.message {
                    Some(kv_server_message::Message::SetBlobArgs(a)) => {
                        seen.kv_log.push(format!("set {}", hex::encode(&a.blob_id)));
                        let id = a.blob_id.clone();
                        blobs.lock().expect("blobs").insert(a.blob_id, a.blob_data);
                        Some((
                            kv_client_message::Message::SetBlobResult(agent::SetBlobResult { error: None }),
                            Some(id),
                        ))
                    }
                    Some(kv_server_message::Message::GetBlobArgs(a)) => {
                        seen.kv_log.push(format!("get {}", hex::encode(&a.blob_id)));
                        let data = blobs.lock().expect("blobs").get(&a.blob_id).cloned();
                        Some((
                            kv_client_message::Message::GetBlobResult(agent::GetBlobResult { blob_data: data }),
                            None,
                        ))
                    }
                    None => None,
                };
                if let (Some((reply, acked)), Kv::Answer) = (answer, kv) {
                    let seqno = seq.fetch_add(1, Ordering::SeqCst);
                    let msg = agent_client_message::Message::KvClientMessage(agent::KvClientMessage {
                        id: k.id,
                        message: Some(reply),
                    });
                    conn.append(&request_id, seqno, &agent::AgentClientMessage { message: Some(msg) }.encode_to_vec())
                        .await;
                    if let Some(id) = acked {
                        seen.kv_log.push(format!("acked {}", hex::encode(id)));
                    }
                }
            }
            Some(agent_server_message::Message::InteractionQuery(q)) => {
                // The user decides (possibly never), concurrently with everything else.
                let Some(result) = user(&q) else { continue };
                let (conn, id, seq) = (conn.clone(), request_id.clone(), seq.clone());
                tasks.push(tokio::spawn(async move {
                    let msg = agent_client_message::Message::InteractionResponse(agent::InteractionResponse {
                        id: q.id,
                        result: Some(result),
                    });
                    let seqno = seq.fetch_add(1, Ordering::SeqCst);
                    conn.append(&id, seqno, &agent::AgentClientMessage { message: Some(msg) }.encode_to_vec()).await;
                }));
            }
            Some(agent_server_message::Message::ExecServerMessage(x)) => {
                // Like the IDE, execs are handled concurrently.
                let (conn, ws, id, seq, act) = (conn.clone(), ws.clone(), request_id.clone(), seq.clone(), policy(&x));
                tasks.push(tokio::spawn(answer(conn, ws, id, seq, x, act)));
            }
            _ => {}
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    seen
}

/// Checks the blobs a checkpoint names (they were stored before it) against the independent
/// description: turns, their user message and steps, and the serialized todos.
fn check_checkpoint_blobs(state: &agent::ConversationStateStructure, blobs: &BlobStore) {
    use crate::support::cursor_schema::assert_blob;
    let store = blobs.lock().expect("blobs");
    for todo in &state.todos {
        assert_blob("TodoItem", todo);
    }
    for id in &state.turns {
        let Some(data) = store.get(id) else { continue };
        assert_blob("ConversationTurnStructure", data);
        let turn = agent::ConversationTurnStructure::decode(data.as_slice()).expect("turn blob");
        if let Some(agent::conversation_turn_structure::Turn::AgentConversationTurn(t)) = turn.turn {
            if let Some(user) = store.get(&t.user_message) {
                assert_blob("UserMessage", user);
            }
            for step in t.steps.iter().filter_map(|s| store.get(s)) {
                assert_blob("ConversationStep", step);
            }
        }
    }
}

/// Answers one exec per `act`: the replies, then `stream_close`.
async fn answer(
    conn: Conn,
    ws: Workspace,
    request_id: String,
    seq: Arc<AtomicU64>,
    x: agent::ExecServerMessage,
    act: Act,
) {
    let send = |msg: agent_client_message::Message| {
        let (conn, id, seq) = (conn.clone(), request_id.clone(), seq.clone());
        async move {
            let seqno = seq.fetch_add(1, Ordering::SeqCst);
            conn.append(&id, seqno, &agent::AgentClientMessage { message: Some(msg) }.encode_to_vec()).await;
        }
    };
    let id = x.id;
    let replies = match act {
        Act::Ignore => return,
        Act::Throw(error) => {
            send(agent_client_message::Message::ExecClientControlMessage(agent::ExecClientControlMessage {
                message: Some(exec_client_control_message::Message::Throw(agent::ExecThrow {
                    id,
                    error,
                    ..Default::default()
                })),
            }))
            .await;
            return;
        }
        Act::Reject(reason) => vec![exec_client_message::Message::ShellStream(agent::ShellStream {
            event: Some(shell_stream::Event::Rejected(agent::ShellRejected { reason, ..Default::default() })),
        })],
        Act::Reply(reply) => vec![reply],
        Act::Late { heartbeats, gap } => {
            for _ in 0..heartbeats {
                tokio::time::sleep(gap).await;
                send(agent_client_message::Message::ExecClientControlMessage(agent::ExecClientControlMessage {
                    message: Some(exec_client_control_message::Message::Heartbeat(agent::ExecHeartbeat { id })),
                }))
                .await;
            }
            ws.execute(&x).await
        }
        Act::Run => ws.execute(&x).await,
        Act::After(gate) => {
            gate.acquire().await.expect("gate open").forget();
            ws.execute(&x).await
        }
    };
    for reply in replies {
        send(agent_client_message::Message::ExecClientMessage(agent::ExecClientMessage {
            id,
            exec_id: x.exec_id.clone(),
            message: Some(reply),
        }))
        .await;
    }
    send(agent_client_message::Message::ExecClientControlMessage(agent::ExecClientControlMessage {
        message: Some(exec_client_control_message::Message::StreamClose(agent::ExecStreamClose { id })),
    }))
    .await;
}

// ---------------------------------------------------------------------------------------------
// The workspace the client executes against

#[derive(Clone)]
pub struct Workspace {
    dir: Arc<tempfile::TempDir>,
    /// Paths the client was asked to touch outside the workspace (must stay empty).
    pub escapes: Arc<Mutex<Vec<String>>>,
}

impl Workspace {
    fn new() -> Workspace {
        Workspace { dir: Arc::new(tempfile::tempdir().expect("workspace")), escapes: Arc::default() }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn root_str(&self) -> String {
        self.root().display().to_string()
    }

    pub fn write(&self, rel: &str, text: &str) {
        let p = self.root().join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    pub fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.root().join(rel)).ok()
    }

    /// A path inside the workspace, or `None` (recorded) for anything else.
    fn inside(&self, p: &str) -> Option<PathBuf> {
        let path = PathBuf::from(p);
        if path.starts_with(self.root()) && !path.components().any(|c| c == std::path::Component::ParentDir) {
            Some(path)
        } else {
            self.escapes.lock().expect("escapes").push(p.to_owned());
            None
        }
    }

    fn rel(&self, p: &Path) -> String {
        p.strip_prefix(self.root()).unwrap_or(p).display().to_string()
    }

    /// Every file under `dir`, sorted.
    fn files(&self, dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            if d.is_file() {
                out.push(d);
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&d) else { continue };
            for e in entries.flatten() {
                stack.push(e.path());
            }
        }
        out.sort();
        out
    }

    /// The reply messages for one exec request.
    pub async fn execute(&self, x: &agent::ExecServerMessage) -> Vec<exec_client_message::Message> {
        use exec_client_message::Message as R;
        use exec_server_message::Message as Q;
        match x.message.clone().expect("exec case") {
            Q::ReadArgs(a) => vec![R::ReadResult(self.read_exec(&a))],
            Q::WriteArgs(a) => vec![R::WriteResult(self.write_exec(&a))],
            Q::DeleteArgs(a) => vec![R::DeleteResult(self.delete_exec(&a))],
            Q::GrepArgs(a) => vec![R::GrepResult(self.grep_exec(&a))],
            Q::LsArgs(a) => vec![R::LsResult(self.ls_exec(&a))],
            Q::ShellStreamArgs(a) | Q::ShellArgs(a) => self.shell_exec(&a).await,
            Q::McpArgs(a) => vec![R::McpResult(mcp_exec(&a))],
            Q::DiagnosticsArgs(a) => vec![R::DiagnosticsResult(self.diagnostics_exec(&a))],
            Q::FetchArgs(a) => vec![R::FetchResult(fetch_exec(&a))],
        }
    }

    fn read_exec(&self, a: &agent::ReadArgs) -> agent::ReadResult {
        use agent::read_result::Result as R;
        let result = match self.inside(&a.path) {
            None => R::Rejected(agent::PathReason { path: a.path.clone(), reason: "outside the workspace".into() }),
            Some(p) => match std::fs::read_to_string(&p) {
                Err(_) => R::FileNotFound(agent::PathOnly { path: a.path.clone() }),
                Ok(text) => {
                    let total = i32::try_from(text.lines().count()).expect("lines");
                    let content = match (a.offset, a.limit) {
                        (None, None) => text.clone(),
                        (offset, limit) => {
                            let skip = usize::try_from(offset.unwrap_or(1).max(1) - 1).expect("offset");
                            let take = limit.map_or(usize::MAX, |l| usize::try_from(l).expect("limit"));
                            text.lines().skip(skip).take(take).map(|l| format!("{l}\n")).collect()
                        }
                    };
                    R::Success(agent::ReadSuccess {
                        path: a.path.clone(),
                        output: Some(agent::read_success::Output::Content(content)),
                        total_lines: total,
                        file_size: i64::try_from(text.len()).expect("size"),
                        truncated: false,
                        output_blob_id: None,
                    })
                }
            },
        };
        agent::ReadResult { result: Some(result) }
    }

    fn write_exec(&self, a: &agent::WriteArgs) -> agent::WriteResult {
        use agent::write_result::Result as R;
        let result = match self.inside(&a.path) {
            None => R::Rejected(agent::WriteRejected { path: a.path.clone(), reason: "outside the workspace".into() }),
            Some(p) => {
                if let Some(parent) = p.parent() {
                    std::fs::create_dir_all(parent).expect("mkdir");
                }
                std::fs::write(&p, &a.file_text).expect("write");
                R::Success(agent::WriteSuccess {
                    path: a.path.clone(),
                    lines_created: i32::try_from(a.file_text.lines().count()).expect("lines"),
                    file_size: i32::try_from(a.file_text.len()).expect("size"),
                    file_content_after_write: a.return_file_content_after_write.then(|| a.file_text.clone()),
                })
            }
        };
        agent::WriteResult { result: Some(result) }
    }

    fn delete_exec(&self, a: &agent::DeleteArgs) -> agent::DeleteResult {
        use agent::delete_result::Result as R;
        let result = match self.inside(&a.path) {
            None => R::Rejected(agent::PathReason { path: a.path.clone(), reason: "outside the workspace".into() }),
            Some(p) => match std::fs::read_to_string(&p) {
                Err(_) => R::FileNotFound(agent::PathOnly { path: a.path.clone() }),
                Ok(prev) => {
                    std::fs::remove_file(&p).expect("remove");
                    R::Success(agent::DeleteSuccess {
                        path: a.path.clone(),
                        deleted_file: a.path.clone(),
                        file_size: i64::try_from(prev.len()).expect("size"),
                        prev_content: prev,
                    })
                }
            },
        };
        agent::DeleteResult { result: Some(result) }
    }

    fn grep_exec(&self, a: &agent::GrepArgs) -> agent::GrepResult {
        use agent::grep_result::Result as R;
        let root = a.path.clone().unwrap_or_else(|| self.root_str());
        let Some(dir) = self.inside(&root) else {
            return agent::GrepResult {
                result: Some(R::Error(agent::GrepError { error: "outside the workspace".into() })),
            };
        };
        let ci = a.case_insensitive.unwrap_or(false);
        let pattern = if ci { a.pattern.to_lowercase() } else { a.pattern.clone() };
        let mut content = Vec::new();
        let mut files = Vec::new();
        let mut counts = Vec::new();
        for file in self.files(&dir) {
            let rel = self.rel(&file);
            if let Some(g) = &a.glob {
                let subject = if g.contains('/') {
                    rel.clone()
                } else {
                    file.file_name().expect("name").to_string_lossy().into_owned()
                };
                if !glob_match(g.as_bytes(), subject.as_bytes()) {
                    continue;
                }
            }
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            if pattern.is_empty() {
                files.push(rel);
                continue;
            }
            let matches: Vec<agent::GrepContentMatch> = text
                .lines()
                .enumerate()
                .filter(|(_, l)| if ci { l.to_lowercase().contains(&pattern) } else { l.contains(&pattern) })
                .map(|(i, l)| agent::GrepContentMatch {
                    line_number: i32::try_from(i + 1).expect("line"),
                    content: l.to_owned(),
                    ..Default::default()
                })
                .collect();
            if matches.is_empty() {
                continue;
            }
            files.push(rel.clone());
            counts.push(agent::GrepFileCount { file: rel.clone(), count: i32::try_from(matches.len()).expect("n") });
            content.push(agent::GrepFileMatch { file: rel, matches });
        }
        let mode = a.output_mode.clone().unwrap_or_else(|| "content".into());
        let union = match mode.as_str() {
            "files_with_matches" => grep_union_result::Result::Files(agent::GrepFilesResult {
                total_files: i32::try_from(files.len()).expect("n"),
                files,
                ..Default::default()
            }),
            "count" => grep_union_result::Result::Count(agent::GrepCountResult {
                total_files: i32::try_from(counts.len()).expect("n"),
                counts,
                ..Default::default()
            }),
            _ => grep_union_result::Result::Content(agent::GrepContentResult {
                total_matched_lines: content.iter().map(|f| i32::try_from(f.matches.len()).expect("n")).sum(),
                matches: content,
                ..Default::default()
            }),
        };
        let mut workspace_results = std::collections::HashMap::new();
        workspace_results.insert(root.clone(), agent::GrepUnionResult { result: Some(union) });
        agent::GrepResult {
            result: Some(R::Success(agent::GrepSuccess {
                pattern: a.pattern.clone(),
                path: root,
                output_mode: mode,
                workspace_results,
            })),
        }
    }

    fn tree(&self, dir: &Path) -> agent::LsDirectoryTreeNode {
        let mut node = agent::LsDirectoryTreeNode {
            abs_path: dir.display().to_string(),
            children_were_processed: true,
            ..Default::default()
        };
        let mut entries: Vec<_> =
            std::fs::read_dir(dir).map(|r| r.flatten().map(|e| e.path()).collect()).unwrap_or_default();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                node.children_dirs.push(self.tree(&p));
            } else {
                node.children_files
                    .push(agent::LsFile { name: p.file_name().expect("name").to_string_lossy().into_owned() });
            }
        }
        node.num_files = i32::try_from(node.children_files.len()).expect("n");
        node
    }

    fn ls_exec(&self, a: &agent::LsArgs) -> agent::LsResult {
        use agent::ls_result::Result as R;
        let result = match self.inside(&a.path) {
            None => R::Rejected(agent::PathReason { path: a.path.clone(), reason: "outside the workspace".into() }),
            Some(p) if p.is_dir() => R::Success(agent::LsSuccess { directory_tree_root: Some(self.tree(&p)) }),
            Some(_) => R::Error(agent::PathError { path: a.path.clone(), error: "not a directory".into() }),
        };
        agent::LsResult { result: Some(result) }
    }

    async fn shell_exec(&self, a: &agent::ShellArgs) -> Vec<exec_client_message::Message> {
        use shell_stream::Event as E;
        let ev = |e| exec_client_message::Message::ShellStream(agent::ShellStream { event: Some(e) });
        let Some(wd) = self.inside(&a.working_directory) else {
            return vec![ev(E::Rejected(agent::ShellRejected {
                reason: "outside the workspace".into(),
                ..Default::default()
            }))];
        };
        let cmd = a.command.clone();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("sh").arg("-c").arg(cmd).current_dir(wd).output()
        })
        .await
        .expect("shell task")
        .expect("sh runs");
        let mut msgs = vec![ev(E::Start(agent::ShellStreamStart {}))];
        if !out.stdout.is_empty() {
            msgs.push(ev(E::Stdout(agent::ShellStreamStdout {
                data: String::from_utf8_lossy(&out.stdout).into_owned(),
            })));
        }
        if !out.stderr.is_empty() {
            msgs.push(ev(E::Stderr(agent::ShellStreamStderr {
                data: String::from_utf8_lossy(&out.stderr).into_owned(),
            })));
        }
        let code = u32::try_from(out.status.code().unwrap_or(255)).unwrap_or(255);
        msgs.push(ev(E::Exit(agent::ShellStreamExit { code, cwd: a.working_directory.clone(), aborted: false })));
        msgs
    }
}

impl Workspace {
    /// The simulated language server: a file containing `FIXME` has one warning per such line.
    fn diagnostics_exec(&self, a: &agent::DiagnosticsArgs) -> agent::DiagnosticsResult {
        use agent::diagnostics_result::Result as R;
        let result = match self.inside(&a.path) {
            None => R::Rejected(agent::PathReason { path: a.path.clone(), reason: "outside the workspace".into() }),
            Some(p) => match std::fs::read_to_string(&p) {
                Err(_) => R::FileNotFound(agent::PathOnly { path: a.path.clone() }),
                Ok(text) => {
                    let diagnostics: Vec<agent::Diagnostic> = text
                        .lines()
                        .enumerate()
                        .filter(|(_, l)| l.contains("FIXME"))
                        .map(|(i, l)| agent::Diagnostic {
                            severity: 2,
                            range: agent::Range {
                                start: Some(agent::Position { line: u32::try_from(i).expect("line"), column: 3 }),
                                end: Some(agent::Position { line: u32::try_from(i).expect("line"), column: 8 }),
                            }
                            .encode_to_vec(),
                            message: format!("unresolved FIXME: {}", l.trim()),
                            source: "sim-lint".into(),
                            code: b"FIX1".to_vec(),
                            ..Default::default()
                        })
                        .collect();
                    R::Success(agent::DiagnosticsSuccess {
                        path: a.path.clone(),
                        total_diagnostics: i32::try_from(diagnostics.len()).expect("n"),
                        diagnostics,
                    })
                }
            },
        };
        agent::DiagnosticsResult { result: Some(result) }
    }
}

/// The simulated web: `https://example.test/…` answers a fixed page, everything else fails.
fn fetch_exec(a: &agent::FetchArgs) -> agent::FetchResult {
    use agent::fetch_result::Result as R;
    let result = if a.url.starts_with("https://example.test/") {
        R::Success(agent::FetchSuccess {
            url: a.url.clone(),
            content: format!("<html><body>page at {}</body></html>", a.url),
            status_code: 200,
            content_type: "text/html".into(),
        })
    } else {
        R::Error(agent::FetchError { url: a.url.clone(), error: "no network in the simulator".into() })
    };
    agent::FetchResult { result: Some(result) }
}

/// The simulated MCP server: `echo` returns its arguments as text plus a 1-pixel PNG.
fn mcp_exec(a: &agent::McpArgs) -> agent::McpResult {
    use agent::mcp_content::Content;
    if a.tool_name != "echo" {
        return agent::McpResult {
            result: Some(agent::mcp_result::Result::ToolNotFound(agent::McpToolNotFound {
                name: a.name.clone(),
                available_tools: vec!["echo".into()],
            })),
        };
    }
    let mut keys: Vec<_> = a.args.keys().cloned().collect();
    keys.sort();
    let text = keys
        .iter()
        .map(|k| format!("{k}={}", keyhaven::cursor::tools::json::to_json(&a.args[k])))
        .collect::<Vec<_>>()
        .join(",");
    agent::McpResult {
        result: Some(agent::mcp_result::Result::Success(agent::McpSuccess {
            content: vec![
                agent::McpContent { content: Some(Content::Text(agent::McpTextContent { text })) },
                agent::McpContent {
                    content: Some(Content::Image(agent::McpImageContent {
                        data: vec![0x89, b'P', b'N', b'G'],
                        mime_type: "image/png".into(),
                    })),
                },
            ],
            is_error: false,
        })),
    }
}

/// A small glob matcher: `*` (not across `/`), `**/` (any directories), `**`, `?`.
pub fn glob_match(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (None, Some(_)) => false,
        (Some(b'*'), _) if p.starts_with(b"**/") => {
            glob_match(&p[3..], s) || s.iter().position(|&c| c == b'/').is_some_and(|i| glob_match(p, &s[i + 1..]))
        }
        (Some(b'*'), _) if p.starts_with(b"**") => glob_match(&p[2..], s) || (!s.is_empty() && glob_match(p, &s[1..])),
        (Some(b'*'), _) => glob_match(&p[1..], s) || (s.first().is_some_and(|&c| c != b'/') && glob_match(p, &s[1..])),
        (Some(b'?'), Some(&c)) if c != b'/' => glob_match(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a == b => glob_match(&p[1..], &s[1..]),
        _ => false,
    }
}
