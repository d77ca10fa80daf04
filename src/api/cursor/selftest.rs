//! The Cursor update guard's self-test ([`crate::cursor::guard`]): Keyhaven's own Cursor answers,
//! produced by the real code (this module's Connect router, the transport, the agent loop, the
//! gateway and its dialect codecs) against a scripted OpenAI-style provider on a loopback port of
//! this process (no network), judged byte by byte the way the IDE would read them.
//!
//! Steps ([`Step`]):
//! 1. `model_list`: `AvailableModels` and `GetUsableModels` answer 200 `application/proto` with
//!    the scripted model.
//! 2. `text_turn`: a RunSSE stream and its BidiAppend run request; the answer's text deltas
//!    spell the scripted text, a `turn_ended` comes, the stream ends without an error.
//! 3. `tool_round`: the scripted model calls `read_file`; the backend asks the "IDE" to read
//!    through the exec channel, shows a read card, sends the result back to the model, whose
//!    answer (quoting what it read) ends the turn.
//!
//! The judge: every frame must be a well-formed Connect envelope whose message decodes as
//! `AgentServerMessage` and re-encodes to the same bytes (no field the IDE's decoder would not
//! know, no wire-type clash); the text, the turn end and the read card are read from the raw
//! bytes by the field numbers of docs/cursor-wire.md (§4.6, §4.7), not through the generated
//! types. KV requests (checkpoint blobs) are answered like the IDE does.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use http_body_util::BodyExt;
use prost::Message;
use tower::ServiceExt;

use crate::config::RoutingMode;
use crate::cursor::guard::{SelfTest, SelfTestResult, Step, StepFailure};
use crate::cursor::protocol::agent::{self, agent_client_message, agent_server_message, kv_server_message};
use crate::cursor::protocol::connect::{self, Envelope, EnvelopeDecoder};
use crate::cursor::protocol::{aiserver, events};
use crate::cursor::turn::{Backend, BackendOptions};
use crate::provider::{Catalog, Gateway, GatewayOptions, NullSink};
use crate::proxy::ModeSwitch;
use crate::proxy::upstream::Upstream;
use crate::task::Spawner;

use super::{CursorOptions, CursorState};

/// The scripted model's name.
const MODEL: &str = "keyhaven-selftest";
/// What the scripted model answers a plain message with.
const TEXT: &str = "Keyhaven self-test: the answer arrived.";
/// The user message that makes the scripted model call `read_file`.
const TOOL_PROMPT: &str = "keyhaven self-test: read the file";
/// The file the scripted model reads, and what the "IDE" answers.
const TOOL_FILE: &str = "keyhaven-selftest.txt";
const TOOL_CONTENT: &str = "self-test file content 7f3a";
/// The longest a step may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);

/// Builds the self-test's catalog from its config (`app` prices it with the shipped table).
pub type CatalogBuilder = Arc<dyn Fn(&crate::config::FileConfig) -> Result<Catalog, String> + Send + Sync>;

/// The self-test, built from the proxy's own parts.
#[derive(Clone)]
pub struct CursorSelfTest {
    upstream: Upstream,
    spawner: Spawner,
    catalog: CatalogBuilder,
}

impl std::fmt::Debug for CursorSelfTest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CursorSelfTest").finish_non_exhaustive()
    }
}

impl CursorSelfTest {
    /// `upstream` is only there to build the router (the self-test's requests never leave).
    pub fn new(upstream: Upstream, spawner: Spawner, catalog: CatalogBuilder) -> CursorSelfTest {
        CursorSelfTest { upstream, spawner, catalog }
    }
}

impl SelfTest for CursorSelfTest {
    fn run(&self, fault: Option<Step>) -> Pin<Box<dyn Future<Output = SelfTestResult> + Send + 'static>> {
        let this = self.clone();
        Box::pin(async move { this.run_all(fault).await })
    }
}

fn fail(step: Step, detail: impl Into<String>) -> StepFailure {
    StepFailure { step, detail: detail.into() }
}

impl CursorSelfTest {
    async fn run_all(self, fault: Option<Step>) -> SelfTestResult {
        let token = self.spawner.root_token().child_token();
        let _stop = token.clone().drop_guard();
        let provider = Scripted { fault };
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| fail(Step::ModelList, format!("scripted provider: {e}")))?;
        let addr = listener.local_addr().map_err(|e| fail(Step::ModelList, format!("scripted provider: {e}")))?;
        let app = Router::new().route("/v1/chat/completions", post(scripted)).with_state(provider);
        let serve_token = token.clone();
        self.spawner.spawn(token.clone(), async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(serve_token.cancelled_owned());
            if let Err(e) = serve.await {
                tracing::debug!(error = %e, "self-test provider stopped");
            }
        });
        let router = self.router(&format!("http://{addr}/v1")).map_err(|e| fail(Step::ModelList, e))?;
        for step in Step::ALL {
            let run = async {
                match step {
                    Step::ModelList => model_list(&router, fault == Some(Step::ModelList)).await,
                    Step::TextTurn => text_turn(&router).await,
                    Step::ToolRound => tool_round(&router).await,
                }
            };
            match tokio::time::timeout(STEP_TIMEOUT, run).await {
                Ok(Ok(())) => {}
                Ok(Err(detail)) => return Err(fail(step, detail)),
                Err(_) => return Err(fail(step, "no answer in time")),
            }
        }
        Ok(())
    }

    /// The Cursor router on a backend whose only model is the scripted one (local mode).
    fn router(&self, base_url: &str) -> Result<Router, String> {
        let toml = format!(
            "[[providers]]\nname = \"selftest\"\nkind = \"openai\"\nbase_url = \"{base_url}\"\n\n\
             [[models]]\nname = \"{MODEL}\"\nprovider = \"selftest\"\nupstream = \"scripted\"\ntools = \"native\"\n"
        );
        let file = crate::config::load_str("self-test", &toml).map_err(|e| format!("self-test config: {e}"))?;
        let catalog = (self.catalog)(&file)?;
        let mut timeouts = file.timeouts;
        timeouts.connect = timeouts.connect.min(2_000);
        let gateway = Arc::new(Gateway::new(
            catalog,
            crate::secrets::Secrets::empty(),
            Arc::new(NullSink),
            GatewayOptions {
                timeouts,
                retry: file.retry,
                routing: file.routing,
                capture_bodies: false,
                body_capture_limit: 0,
            },
        ));
        let mut options = BackendOptions { first_message_wait: Duration::from_secs(10), ..BackendOptions::default() };
        options.linger = Duration::from_secs(1);
        options.agent.exec_timeout = Duration::from_secs(10);
        options.agent.blob_ack_timeout = Duration::from_secs(5);
        let backend = Backend::new(gateway, None, self.spawner.clone(), options);
        let state = CursorState::new(
            backend,
            self.upstream.clone(),
            self.spawner.clone(),
            ModeSwitch::new(RoutingMode::Local),
            CursorOptions::default(),
        );
        Ok(super::router(state))
    }
}

// ---------------------------------------------------------------------------------------------
// The scripted provider (OpenAI Chat Completions, streamed)

#[derive(Debug, Clone, Copy)]
struct Scripted {
    fault: Option<Step>,
}

fn chunk(delta: serde_json::Value, finish: Option<&str>) -> String {
    let c = serde_json::json!({
        "id": "chatcmpl-selftest", "object": "chat.completion.chunk", "created": 0, "model": "scripted",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    });
    format!("data: {c}\n\n")
}

fn text_answer(text: &str) -> String {
    [
        chunk(serde_json::json!({"role": "assistant", "content": ""}), None),
        chunk(serde_json::json!({"content": text}), None),
        chunk(serde_json::json!({}), Some("stop")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat()
}

fn tool_answer() -> String {
    let args = serde_json::json!({ "path": TOOL_FILE }).to_string();
    [
        chunk(serde_json::json!({"role": "assistant", "content": null}), None),
        chunk(
            serde_json::json!({"tool_calls": [{"index": 0, "id": "call_selftest", "type": "function",
                "function": {"name": "read_file", "arguments": args}}]}),
            None,
        ),
        chunk(serde_json::json!({}), Some("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat()
}

/// Answers by the conversation's state: a tool result → quotes it; the tool prompt → calls
/// `read_file`; anything else → [`TEXT`]. A fault on a run step breaks that step's answer.
async fn scripted(State(s): State<Scripted>, body: Bytes) -> Response {
    let req: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let messages = req["messages"].as_array().cloned().unwrap_or_default();
    let tool_result = messages.iter().rev().find(|m| m["role"] == "tool").map(|m| content_text(&m["content"]));
    let wants_tool = messages.iter().any(|m| m["role"] == "user" && content_text(&m["content"]).contains(TOOL_PROMPT));
    let sse = match (tool_result, wants_tool) {
        (Some(result), _) => text_answer(&format!("read: {result}")),
        (None, true) if s.fault == Some(Step::ToolRound) => text_answer("no tool today"),
        (None, true) => tool_answer(),
        (None, false) if s.fault == Some(Step::TextTurn) => {
            let mut resp =
                Response::new(Body::from(r#"{"error":{"message":"self-test fault","type":"invalid_request_error"}}"#));
            *resp.status_mut() = StatusCode::BAD_REQUEST;
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            return resp;
        }
        (None, false) => text_answer(TEXT),
    };
    let mut resp = Response::new(Body::from(sse));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    resp
}

/// A Chat message's content as text (a string, or the text of its parts).
fn content_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(""),
        _ => String::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// The steps

async fn call(router: &Router, path: &str, content_type: &'static str, body: Vec<u8>) -> Result<Response, String> {
    let req = Request::builder()
        .method("POST")
        .uri(path)
        .header(header::CONTENT_TYPE, content_type)
        .header("connect-protocol-version", "1")
        .body(Body::from(body))
        .map_err(|e| e.to_string())?;
    router.clone().oneshot(req).await.map_err(|e| match e {})
}

async fn unary(router: &Router, path: &str, corrupt: bool) -> Result<Vec<u8>, String> {
    let resp = call(router, path, "application/proto", Vec::new()).await?;
    if resp.status() != StatusCode::OK {
        return Err(format!("{path} answered HTTP {}", resp.status().as_u16()));
    }
    let ct = resp.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    if ct != "application/proto" {
        return Err(format!("{path} answered content type {ct:?}"));
    }
    let mut bytes = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes().to_vec();
    if corrupt {
        // The test hook: a field number the IDE's type does not have.
        bytes.extend_from_slice(&[0xf8, 0x3e, 0x01]);
    }
    Ok(bytes)
}

/// Step 1: both catalog answers decode strictly and list the scripted model.
async fn model_list(router: &Router, corrupt: bool) -> Result<(), String> {
    let available = unary(router, "/aiserver.v1.AiService/AvailableModels", corrupt).await?;
    let m: aiserver::AvailableModelsResponse = strict(&available).map_err(|e| format!("AvailableModels: {e}"))?;
    // `model_names` is field 1 (repeated string).
    let names: Vec<String> = raw::strings(&available, 1).map_err(|e| format!("AvailableModels: {e}"))?;
    if names != [MODEL] || m.models.first().and_then(|x| x.supports_agent) != Some(true) {
        return Err(format!("AvailableModels lists {names:?}, not the agent model {MODEL}"));
    }
    let usable = unary(router, "/agent.v1.AgentService/GetUsableModels", false).await?;
    let u: agent::GetUsableModelsResponse = strict(&usable).map_err(|e| format!("GetUsableModels: {e}"))?;
    if u.models.iter().map(|d| d.model_id.as_str()).collect::<Vec<_>>() != [MODEL] {
        return Err("GetUsableModels does not list the scripted model".to_owned());
    }
    Ok(())
}

/// Decodes `bytes` and checks that they re-encode to themselves.
fn strict<M: Message + Default>(bytes: &[u8]) -> Result<M, String> {
    let m = M::decode(bytes).map_err(|e| format!("does not decode: {e}"))?;
    if m.encode_to_vec() != bytes {
        return Err("carries fields or encodings the IDE's type does not have".to_owned());
    }
    Ok(m)
}

/// What a run showed.
#[derive(Debug, Default)]
struct Seen {
    text: String,
    turn_ended: bool,
    read_card: bool,
    read_exec: bool,
}

/// Step 2: a text turn.
async fn text_turn(router: &Router) -> Result<(), String> {
    let seen = run(router, "selftest-text", "Say something.").await?;
    if seen.text != TEXT {
        return Err(format!("the text deltas spell {:?}, not the model's answer", seen.text));
    }
    Ok(())
}

/// Step 3: one tool round.
async fn tool_round(router: &Router) -> Result<(), String> {
    let seen = run(router, "selftest-tool", TOOL_PROMPT).await?;
    if !seen.read_exec {
        return Err("the model's read_file call never reached the IDE's exec channel".to_owned());
    }
    if !seen.read_card {
        return Err("no completed read card".to_owned());
    }
    if !seen.text.contains(TOOL_CONTENT) {
        return Err(format!("the tool result did not reach the model (answer {:?})", seen.text));
    }
    Ok(())
}

fn run_request(conversation: &str, text: &str) -> Vec<u8> {
    let action = agent::conversation_action::Action::UserMessageAction(agent::UserMessageAction {
        user_message: Some(agent::UserMessage {
            text: text.to_owned(),
            message_id: format!("{conversation}-m1"),
            mode: agent::AgentMode::Agent as i32,
            ..Default::default()
        }),
        request_context: Some(agent::RequestContext {
            env: Some(agent::RequestContextEnv {
                os_version: "linux".into(),
                workspace_paths: vec!["/keyhaven-selftest".into()],
                shell: "sh".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    agent::AgentClientMessage {
        message: Some(agent_client_message::Message::RunRequest(agent::AgentRunRequest {
            action: Some(agent::ConversationAction { action: Some(action), ..Default::default() }),
            requested_model: Some(agent::RequestedModel { model_id: MODEL.to_owned(), ..Default::default() }),
            conversation_id: Some(conversation.to_owned()),
            ..Default::default()
        })),
    }
    .encode_to_vec()
}

/// Sends `message` as the stream's next append; the answer must be the empty 200.
async fn append(router: &Router, id: &str, seqno: &mut u64, message: &agent::AgentClientMessage) -> Result<(), String> {
    let body = connect::encode_append(id, *seqno, &message.encode_to_vec());
    *seqno += 1;
    let resp = call(router, "/aiserver.v1.BidiService/BidiAppend", "application/proto", body).await?;
    if resp.status() != StatusCode::OK {
        return Err(format!("BidiAppend answered HTTP {}", resp.status().as_u16()));
    }
    Ok(())
}

/// One run over RunSSE + BidiAppend, playing the IDE: KV requests and the read exec are answered.
async fn run(router: &Router, conversation: &str, text: &str) -> Result<Seen, String> {
    let id = format!("{conversation}-{:016x}", rand::random::<u64>());
    let open = connect::encode_envelope(&aiserver::BidiRequestId { request_id: id.clone() }.encode_to_vec(), false);
    let resp = call(router, "/agent.v1.AgentService/RunSSE", "application/connect+proto", open.to_vec()).await?;
    if resp.status() != StatusCode::OK {
        return Err(format!("RunSSE answered HTTP {}", resp.status().as_u16()));
    }
    let gzip = resp.headers().get("connect-content-encoding").is_some_and(|v| v.as_bytes() == b"gzip");
    let mut body = resp.into_body();
    let mut seqno = 0u64;
    let first =
        agent::AgentClientMessage::decode(run_request(conversation, text).as_slice()).map_err(|e| e.to_string())?;
    append(router, &id, &mut seqno, &first).await?;
    let heartbeat = events::heartbeat();
    let mut dec = EnvelopeDecoder::new(gzip);
    let mut seen = Seen::default();
    loop {
        let env = match dec.try_next().map_err(|e| format!("bad envelope: {e}"))? {
            Some(env) => env,
            None => match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        dec.push(&data);
                    }
                    continue;
                }
                Some(Err(e)) => return Err(format!("stream broke: {e}")),
                None => return Err("the stream ended without an end-stream frame".to_owned()),
            },
        };
        let bytes = match env {
            Envelope::EndStream(json) => {
                let end = connect::decode_end_stream(&json).map_err(|e| format!("bad end-stream: {e}"))?;
                if let Some(err) = end.error {
                    return Err(format!("the run ended with an error: {}", err.message));
                }
                if !seen.turn_ended {
                    return Err("the stream ended without turn_ended".to_owned());
                }
                return Ok(seen);
            }
            Envelope::Message(m) => m,
        };
        let msg: agent::AgentServerMessage = strict(&bytes).map_err(|e| format!("server message: {e}"))?;
        if msg == heartbeat {
            continue;
        }
        judge_raw(&bytes, &mut seen)?;
        match msg.message {
            Some(agent_server_message::Message::KvServerMessage(k)) => {
                let reply = match k.message {
                    Some(kv_server_message::Message::SetBlobArgs(_)) => {
                        agent::kv_client_message::Message::SetBlobResult(agent::SetBlobResult { error: None })
                    }
                    Some(kv_server_message::Message::GetBlobArgs(_)) => {
                        agent::kv_client_message::Message::GetBlobResult(agent::GetBlobResult { blob_data: None })
                    }
                    None => continue,
                };
                let m = agent_client_message::Message::KvClientMessage(agent::KvClientMessage {
                    id: k.id,
                    message: Some(reply),
                });
                append(router, &id, &mut seqno, &agent::AgentClientMessage { message: Some(m) }).await?;
            }
            Some(agent_server_message::Message::ExecServerMessage(x)) => {
                answer_exec(router, &id, &mut seqno, x, &mut seen).await?;
            }
            _ => {}
        }
    }
}

/// Answers a read of [`TOOL_FILE`] with [`TOOL_CONTENT`]; anything else is an error.
async fn answer_exec(
    router: &Router,
    id: &str,
    seqno: &mut u64,
    x: agent::ExecServerMessage,
    seen: &mut Seen,
) -> Result<(), String> {
    use agent::exec_server_message::Message as Q;
    let Some(Q::ReadArgs(a)) = x.message else {
        return Err("the backend asked the IDE for something else than a read".to_owned());
    };
    if !a.path.ends_with(TOOL_FILE) {
        return Err(format!("the backend asked to read {:?}", a.path));
    }
    seen.read_exec = true;
    let result = agent::ReadResult {
        result: Some(agent::read_result::Result::Success(agent::ReadSuccess {
            path: a.path.clone(),
            output: Some(agent::read_success::Output::Content(format!("{TOOL_CONTENT}\n"))),
            total_lines: 1,
            file_size: i64::try_from(TOOL_CONTENT.len() + 1).unwrap_or(0),
            truncated: false,
            output_blob_id: None,
        })),
    };
    let reply = agent_client_message::Message::ExecClientMessage(agent::ExecClientMessage {
        id: x.id,
        exec_id: x.exec_id.clone(),
        message: Some(agent::exec_client_message::Message::ReadResult(result)),
    });
    append(router, id, seqno, &agent::AgentClientMessage { message: Some(reply) }).await?;
    let close = agent_client_message::Message::ExecClientControlMessage(agent::ExecClientControlMessage {
        message: Some(agent::exec_client_control_message::Message::StreamClose(agent::ExecStreamClose { id: x.id })),
    });
    append(router, id, seqno, &agent::AgentClientMessage { message: Some(close) }).await
}

/// Reads what the IDE shows from the raw bytes, by docs/cursor-wire.md's numbers:
/// `AgentServerMessage.interaction_update = 1`; in `InteractionUpdate`, `text_delta = 1`
/// (`TextDeltaUpdate.text = 1`), `tool_call_completed = 3` (`ToolCallUpdate.tool_call = 2`,
/// `ToolCall.read_tool_call = 8`), `turn_ended = 14`.
fn judge_raw(bytes: &[u8], seen: &mut Seen) -> Result<(), String> {
    for (field, value) in raw::fields(bytes)? {
        let (1, raw::Value::Bytes(update)) = (field, value) else { continue };
        for (f, v) in raw::fields(update)? {
            match (f, v) {
                (1, raw::Value::Bytes(delta)) => {
                    for text in raw::strings(delta, 1)? {
                        seen.text.push_str(&text);
                    }
                }
                (3, raw::Value::Bytes(done)) => {
                    for (g, w) in raw::fields(done)? {
                        if let (2, raw::Value::Bytes(call)) = (g, w)
                            && raw::fields(call)?.iter().any(|(n, _)| *n == 8)
                        {
                            seen.read_card = true;
                        }
                    }
                }
                (14, _) => seen.turn_ended = true,
                _ => {}
            }
        }
    }
    Ok(())
}

/// A protobuf wire reader independent of the generated types.
mod raw {
    pub enum Value<'a> {
        Varint,
        Fixed,
        Bytes(&'a [u8]),
    }

    fn varint(b: &[u8], at: &mut usize) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *b.get(*at).ok_or("truncated varint")?;
            *at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint too long".to_owned())
    }

    /// The fields of one message, in order.
    pub fn fields(b: &[u8]) -> Result<Vec<(u64, Value<'_>)>, String> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < b.len() {
            let key = varint(b, &mut at)?;
            let value = match key & 7 {
                0 => {
                    varint(b, &mut at)?;
                    Value::Varint
                }
                1 | 5 => {
                    at += if key & 7 == 1 { 8 } else { 4 };
                    if at > b.len() {
                        return Err("truncated fixed field".to_owned());
                    }
                    Value::Fixed
                }
                2 => {
                    let len = usize::try_from(varint(b, &mut at)?).map_err(|_| "length too large")?;
                    let end = at.checked_add(len).filter(|e| *e <= b.len()).ok_or("truncated field")?;
                    let v = &b[at..end];
                    at = end;
                    Value::Bytes(v)
                }
                w => return Err(format!("wire type {w}")),
            };
            out.push((key >> 3, value));
        }
        Ok(out)
    }

    /// Field `n` as UTF-8 strings (every occurrence).
    pub fn strings(b: &[u8], n: u64) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        for (f, v) in fields(b)? {
            match (f == n, v) {
                (true, Value::Bytes(s)) => out.push(String::from_utf8(s.to_vec()).map_err(|_| "invalid UTF-8")?),
                (true, _) => return Err(format!("field {n} is not length-delimited")),
                _ => {}
            }
        }
        Ok(out)
    }
}
