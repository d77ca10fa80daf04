//! A scripted vendor upstream for the client matrix (`tests/it/clients.rs`): one axum server on
//! 127.0.0.1:0 that answers `/v1/chat/completions` as a DeepSeek-style Chat reasoner,
//! `/v1/responses` as OpenAI Responses and `/v1/messages` as Anthropic, each in its vendor's own
//! wire format, written here by hand (never with Keyhaven's encoders).
//!
//! It plays a scripted model: the client's prompt carries a marker `[kh scenario=NAME run=ID]`
//! (plus `path=P` for the agent turn) and the upstream answers that scenario, looking only at what
//! the request holds (a request that carries tool results gets the final answer). It enforces the
//! vendors' rules that a gateway can break, with the vendors' own error shapes (400):
//! - every dialect: each tool call is answered by its result right after it, and no result lacks
//!   its call;
//! - Anthropic, thinking on (`enabled`/`adaptive`): the last assistant turn that carries a tool
//!   call issued with thinking starts with a thinking block, and every thinking block's signature
//!   is one this upstream issued;
//! - Chat (DeepSeek's thinking mode): an assistant message whose tool calls were issued with
//!   reasoning carries `reasoning_content`;
//! - Responses with `store: false`: a `function_call` issued with reasoning is preceded by its
//!   reasoning item carrying the `encrypted_content` issued (only issued when the request's
//!   `include` asks for `reasoning.encrypted_content`); an `encrypted_content` this upstream never
//!   issued is refused.
//!
//! Every request is logged per run, with the answer given, so a failing cell can show it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

/// The text of the `text` scenario (non-ASCII on purpose).
pub const TEXT: &str = "Hello from the scripted upstream: grüße ✓";
/// The final text after the parallel tool calls were answered.
pub const PARALLEL_DONE: &str = "parallel-done";
/// The reasoning/thinking text the upstream issues.
pub const REASONING: &str = "The user wants the weather in Paris; I will call get_weather.";
/// The final text of the reasoning scenario.
pub const REASONED: &str = "reasoned-ok";
/// The answer when the request carried the client's image.
pub const IMAGE_OK: &str = "image-ok";
/// The message of the upstream's error event mid-stream.
pub const ERROR_MSG: &str = "kh-upstream-overloaded";
/// The text sent before an error event or a dropped connection.
pub const PARTIAL: &str = "partial answer ";
/// The answer to a second request after a dropped connection (a retry).
pub const RETRIED: &str = "kh-retried-after-drop";
/// The answer after the 429.
pub const AFTER_429: &str = "kh-after-429";
/// The 1x1 PNG the clients send, base64.
pub const PNG_B64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
/// The arguments of the two parallel calls.
pub fn weather_args() -> Value {
    json!({"city": "Paris, FR", "unit": "celsius"})
}
pub fn time_args() -> Value {
    json!({"tz": "Europe/Paris"})
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    Chat,
    Responses,
    Anthropic,
}

impl Dialect {
    pub const ALL: [Dialect; 3] = [Dialect::Chat, Dialect::Responses, Dialect::Anthropic];

    pub fn name(self) -> &'static str {
        match self {
            Dialect::Chat => "chat",
            Dialect::Responses => "responses",
            Dialect::Anthropic => "anthropic",
        }
    }

    /// The engine's model routed to this upstream dialect (see `support::config_text`).
    pub fn model(self) -> &'static str {
        match self {
            Dialect::Chat => "oa-model",
            Dialect::Responses => "rs-model",
            Dialect::Anthropic => "an-model",
        }
    }

    fn of_path(path: &str) -> Option<Dialect> {
        match path {
            "/v1/chat/completions" => Some(Dialect::Chat),
            "/v1/responses" => Some(Dialect::Responses),
            "/v1/messages" => Some(Dialect::Anthropic),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    Text,
    ParallelTools,
    ToolResult,
    Reasoning,
    /// As `Reasoning`, but the client replays the tool turn without its reasoning (as a client
    /// that clears thinking does): the engine must restore what the upstream needs.
    ReasoningDropped,
    Image,
    ErrorMidStream,
    Dropped,
    RateLimited,
    Agent,
}

impl Scenario {
    /// What the SDK drivers run.
    pub const SDK: [Scenario; 9] = [
        Scenario::Text,
        Scenario::ParallelTools,
        Scenario::ToolResult,
        Scenario::Reasoning,
        Scenario::ReasoningDropped,
        Scenario::Image,
        Scenario::ErrorMidStream,
        Scenario::Dropped,
        Scenario::RateLimited,
    ];
    /// What the CLIs run.
    pub const CLI: [Scenario; 5] =
        [Scenario::Text, Scenario::Agent, Scenario::ErrorMidStream, Scenario::Dropped, Scenario::RateLimited];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Text => "text",
            Scenario::ParallelTools => "parallel_tools",
            Scenario::ToolResult => "tool_result",
            Scenario::Reasoning => "reasoning",
            Scenario::ReasoningDropped => "reasoning_dropped",
            Scenario::Image => "image",
            Scenario::ErrorMidStream => "error_mid_stream",
            Scenario::Dropped => "dropped",
            Scenario::RateLimited => "rate_limited",
            Scenario::Agent => "agent",
        }
    }

    /// Scenarios where the client is meant to see an error (or the engine may pass one on).
    pub fn expects_error(self) -> bool {
        matches!(self, Scenario::ErrorMidStream | Scenario::Dropped | Scenario::RateLimited)
    }

    fn parse(s: &str) -> Option<Scenario> {
        [Scenario::Agent].into_iter().chain(Scenario::SDK).find(|x| x.name() == s)
    }
}

/// A tool call the upstream issues.
#[derive(Debug, Clone)]
struct Call {
    id: String,
    name: String,
    /// The arguments as JSON text.
    args: String,
}

#[derive(Debug, Clone)]
enum Block {
    /// Reasoning/thinking text (may be empty: Anthropic's `display: "omitted"`).
    Reasoning(String),
    Text(String),
    Tools(Vec<Call>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tail {
    End,
    /// The vendor's error event after the blocks.
    Error,
    /// The connection drops after the blocks.
    Drop,
}

enum Answer {
    Script(Vec<Block>, Tail),
    Status(u16, Value),
}

/// What this upstream issued with a tool call, to check what comes back.
#[derive(Debug, Clone, Default)]
struct Issued {
    /// Anthropic: the thinking signature sent before the call.
    signature: Option<String>,
    /// Chat: reasoning was sent with the call.
    reasoning: bool,
    /// Responses: the reasoning item's id and its `encrypted_content` (when included).
    reasoning_item: Option<(String, Option<String>)>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    issued: HashMap<String, Issued>,
    signatures: Vec<String>,
    encrypted: Vec<String>,
    /// Requests seen per run.
    counts: HashMap<String, u32>,
    /// One line per request per run: what came and what was answered.
    log: HashMap<String, Vec<String>>,
}

impl Inner {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

#[derive(Debug, Clone)]
pub struct VendorUpstream {
    addr: std::net::SocketAddr,
    inner: Arc<Mutex<Inner>>,
}

impl VendorUpstream {
    pub async fn start() -> VendorUpstream {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let app = axum::Router::new().fallback(handle).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind vendor upstream");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        VendorUpstream { addr, inner }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What the upstream saw and answered for one run.
    pub fn log(&self, run: &str) -> Vec<String> {
        self.inner.lock().expect("lock").log.get(run).cloned().unwrap_or_default()
    }

    /// The marker a client puts in its prompt.
    pub fn marker(scenario: Scenario, run: &str) -> String {
        format!("[kh scenario={} run={run}]", scenario.name())
    }
}

struct Marker {
    scenario: Scenario,
    run: String,
    path: Option<String>,
}

fn find_marker(text: &str) -> Option<Marker> {
    let start = text.find("[kh scenario=")?;
    let rest = &text[start + 1..];
    let inner = &rest[..rest.find(']')?];
    let mut scenario = None;
    let mut run = None;
    let mut path = None;
    for word in inner.split_whitespace() {
        if let Some(v) = word.strip_prefix("scenario=") {
            scenario = Scenario::parse(v);
        } else if let Some(v) = word.strip_prefix("run=") {
            run = Some(v.to_owned());
        } else if let Some(v) = word.strip_prefix("path=") {
            path = Some(v.to_owned());
        }
    }
    Some(Marker { scenario: scenario?, run: run?, path })
}

async fn handle(State(inner): State<Arc<Mutex<Inner>>>, method: Method, uri: axum::http::Uri, body: Bytes) -> Response {
    let Some(dialect) = Dialect::of_path(uri.path()).filter(|_| method == Method::POST) else {
        return plain(404, "not a vendor endpoint");
    };
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return status_reply(dialect, 400, invalid(dialect, "the body is not JSON"), false);
    };
    let text = String::from_utf8_lossy(&body).into_owned();
    let stream = req["stream"] == true;
    let marker = find_marker(&text);
    let run = marker.as_ref().map(|m| m.run.clone()).unwrap_or_else(|| "(no marker)".into());
    let mut guard = inner.lock().expect("lock");
    let answer = match validate(dialect, &req, &guard) {
        Some(msg) => Answer::Status(400, invalid(dialect, &msg)),
        None => match &marker {
            Some(m) => answer(dialect, &req, m, &mut guard),
            None => Answer::Script(vec![Block::Text("no scenario marker".into())], Tail::End),
        },
    };
    let summary = match &answer {
        Answer::Status(s, b) => format!("{s} {b}"),
        Answer::Script(blocks, tail) => format!("200 {blocks:?} then {tail:?}"),
    };
    guard.log.entry(run).or_default().push(format!("POST {} stream={stream} -> {summary}", uri.path()));
    match answer {
        Answer::Status(s, b) => {
            drop(guard);
            status_reply(dialect, s, b, s == 429)
        }
        Answer::Script(blocks, tail) => {
            let blocks = issue(dialect, &req, blocks, &mut guard);
            drop(guard);
            let model = req["model"].as_str().unwrap_or("model").to_owned();
            if stream {
                let usage = req["stream_options"]["include_usage"] == true;
                let chunks = match dialect {
                    Dialect::Chat => chat_sse(&model, &blocks, tail, usage),
                    Dialect::Anthropic => anthropic_sse(&model, &blocks, tail),
                    Dialect::Responses => responses_sse(&model, &blocks, tail),
                };
                sse_reply(chunks, tail == Tail::Drop)
            } else {
                let body = match (dialect, tail) {
                    (_, Tail::Error | Tail::Drop) => return status_reply(dialect, 529, overloaded(dialect), false),
                    (Dialect::Chat, _) => chat_json(&model, &blocks),
                    (Dialect::Anthropic, _) => anthropic_json(&model, &blocks),
                    (Dialect::Responses, _) => responses_json(&model, &blocks),
                };
                json_reply(200, &body)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Scenario answers

fn answer(dialect: Dialect, req: &Value, m: &Marker, inner: &mut Inner) -> Answer {
    let results = tool_results(dialect, req);
    let count = {
        let c = inner.counts.entry(m.run.clone()).or_insert(0);
        *c += 1;
        *c
    };
    let text = |t: &str| Answer::Script(vec![Block::Text(t.to_owned())], Tail::End);
    match m.scenario {
        Scenario::Text => text(TEXT),
        Scenario::ParallelTools if !results.is_empty() => text(PARALLEL_DONE),
        Scenario::ParallelTools => Answer::Script(
            vec![Block::Tools(vec![
                Call { id: String::new(), name: "get_weather".into(), args: weather_args().to_string() },
                Call { id: String::new(), name: "get_time".into(), args: time_args().to_string() },
            ])],
            Tail::End,
        ),
        Scenario::ToolResult if !results.is_empty() => {
            text(&format!("tool said: {}", results.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>().join(" | ")))
        }
        Scenario::ToolResult => Answer::Script(
            vec![Block::Tools(vec![Call {
                id: String::new(),
                name: "get_weather".into(),
                args: json!({"city": "Paris, FR"}).to_string(),
            }])],
            Tail::End,
        ),
        Scenario::Reasoning | Scenario::ReasoningDropped if !results.is_empty() => text(REASONED),
        Scenario::Reasoning | Scenario::ReasoningDropped => Answer::Script(
            vec![
                Block::Reasoning(REASONING.into()),
                Block::Tools(vec![Call {
                    id: String::new(),
                    name: "get_weather".into(),
                    args: json!({"city": "Paris, FR"}).to_string(),
                }]),
            ],
            Tail::End,
        ),
        Scenario::Image => {
            if has_image(dialect, req) {
                text(IMAGE_OK)
            } else {
                Answer::Status(
                    400,
                    invalid(dialect, "scripted upstream: the request carries no image with the client's PNG"),
                )
            }
        }
        Scenario::ErrorMidStream => Answer::Script(vec![Block::Text(PARTIAL.into())], Tail::Error),
        Scenario::Dropped if count == 1 => Answer::Script(vec![Block::Text(PARTIAL.into())], Tail::Drop),
        Scenario::Dropped => text(RETRIED),
        Scenario::RateLimited if count == 1 => Answer::Status(429, rate_limited(dialect)),
        Scenario::RateLimited => text(AFTER_429),
        Scenario::Agent if !results.is_empty() => {
            let all = results.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>().join("\n");
            match all.find("kh-secret-") {
                Some(i) => {
                    let token: String =
                        all[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
                    text(&format!("The file says: {token}"))
                }
                None => Answer::Status(
                    400,
                    invalid(
                        dialect,
                        &format!("scripted upstream: the tool result lacks the file's content: {all:.300}"),
                    ),
                ),
            }
        }
        Scenario::Agent => {
            let path = m.path.clone().unwrap_or_default();
            let names = tool_names(req);
            let call = if names.iter().any(|n| n == "Read") {
                Call { id: String::new(), name: "Read".into(), args: json!({"file_path": path}).to_string() }
            } else if names.iter().any(|n| n == "exec_command") {
                Call {
                    id: String::new(),
                    name: "exec_command".into(),
                    args: json!({"cmd": format!("cat {path}")}).to_string(),
                }
            } else if names.iter().any(|n| n == "shell") {
                Call { id: String::new(), name: "shell".into(), args: json!({"command": ["cat", path]}).to_string() }
            } else {
                return Answer::Status(
                    400,
                    invalid(dialect, &format!("scripted upstream: no file-reading tool offered (tools: {names:?})")),
                );
            };
            Answer::Script(vec![Block::Reasoning(REASONING.into()), Block::Tools(vec![call])], Tail::End)
        }
    }
}

/// Gives calls their ids and decides, per vendor, whether reasoning is sent; records what was issued.
fn issue(dialect: Dialect, req: &Value, blocks: Vec<Block>, inner: &mut Inner) -> Vec<Block> {
    let mut out = Vec::new();
    let mut pending = Issued::default();
    for b in blocks {
        match b {
            Block::Reasoning(text) => match dialect {
                Dialect::Anthropic => {
                    let on = matches!(req["thinking"]["type"].as_str(), Some("enabled" | "adaptive"));
                    if on {
                        let sig = format!("EqkBsig{}{}", inner.id(), "Zm9vYmFyYmF6");
                        inner.signatures.push(sig.clone());
                        pending.signature = Some(sig.clone());
                        let shown = if req["thinking"]["display"] == "omitted" { String::new() } else { text };
                        out.push(Block::Reasoning(format!("{shown}\u{0}{sig}")));
                    }
                }
                Dialect::Chat => {
                    pending.reasoning = true;
                    out.push(Block::Reasoning(text));
                }
                Dialect::Responses => {
                    let id = format!("rs_{:04}", inner.id());
                    let include =
                        req["include"].as_array().is_some_and(|a| a.iter().any(|v| v == "reasoning.encrypted_content"));
                    let enc = include.then(|| format!("gAAAAAB{}enc{}", inner.id(), id));
                    if let Some(e) = &enc {
                        inner.encrypted.push(e.clone());
                    }
                    let summary = if req["reasoning"]["summary"].is_null() { String::new() } else { text };
                    pending.reasoning_item = Some((id.clone(), enc.clone()));
                    out.push(Block::Reasoning(format!("{summary}\u{0}{id}\u{0}{}", enc.unwrap_or_default())));
                }
            },
            Block::Tools(calls) => {
                let mut given = Vec::new();
                for mut c in calls {
                    c.id = match dialect {
                        Dialect::Anthropic => format!("toolu_{:04}", inner.id()),
                        _ => format!("call_{:04}", inner.id()),
                    };
                    inner.issued.insert(c.id.clone(), pending.clone());
                    given.push(c);
                }
                out.push(Block::Tools(given));
            }
            t @ Block::Text(_) => out.push(t),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Reading requests

fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str().or_else(|| p["content"].as_str()))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn items(dialect: Dialect, req: &Value) -> Vec<Value> {
    match dialect {
        Dialect::Responses => match &req["input"] {
            Value::Array(a) => a.clone(),
            _ => Vec::new(),
        },
        _ => req["messages"].as_array().cloned().unwrap_or_default(),
    }
}

/// The tool results a request carries: (call id, text).
fn tool_results(dialect: Dialect, req: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for m in items(dialect, req) {
        match dialect {
            Dialect::Chat if m["role"] == "tool" => {
                out.push((m["tool_call_id"].as_str().unwrap_or_default().to_owned(), content_text(&m["content"])));
            }
            Dialect::Anthropic => {
                for b in m["content"].as_array().into_iter().flatten().filter(|b| b["type"] == "tool_result") {
                    out.push((b["tool_use_id"].as_str().unwrap_or_default().to_owned(), content_text(&b["content"])));
                }
            }
            Dialect::Responses if m["type"] == "function_call_output" || m["type"] == "custom_tool_call_output" => {
                out.push((m["call_id"].as_str().unwrap_or_default().to_owned(), content_text(&m["output"])));
            }
            _ => {}
        }
    }
    out
}

fn tool_names(req: &Value) -> Vec<String> {
    req["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().or_else(|| t["name"].as_str()))
        .map(str::to_owned)
        .collect()
}

fn has_image(dialect: Dialect, req: &Value) -> bool {
    let data_url = format!("data:image/png;base64,{PNG_B64}");
    items(dialect, req).iter().flat_map(|m| m["content"].as_array().cloned().unwrap_or_default()).any(|p| match dialect
    {
        Dialect::Chat => p["type"] == "image_url" && p["image_url"]["url"] == data_url.as_str(),
        Dialect::Anthropic => p["type"] == "image" && p["source"]["type"] == "base64" && p["source"]["data"] == PNG_B64,
        Dialect::Responses => p["type"] == "input_image" && p["image_url"] == data_url.as_str(),
    })
}

// ---------------------------------------------------------------------------------------------
// The vendors' rules

fn validate(dialect: Dialect, req: &Value, inner: &Inner) -> Option<String> {
    let items = items(dialect, req);
    match dialect {
        Dialect::Chat => validate_chat(&items, inner),
        Dialect::Anthropic => validate_anthropic(req, &items, inner),
        Dialect::Responses => validate_responses(req, &items, inner),
    }
}

fn validate_chat(messages: &[Value], inner: &Inner) -> Option<String> {
    for (i, m) in messages.iter().enumerate() {
        let ids: Vec<&str> =
            m["tool_calls"].as_array().into_iter().flatten().filter_map(|c| c["id"].as_str()).collect();
        if m["role"] != "assistant" || ids.is_empty() {
            continue;
        }
        let answered: Vec<&str> = messages[i + 1..]
            .iter()
            .take_while(|n| n["role"] == "tool")
            .filter_map(|n| n["tool_call_id"].as_str())
            .collect();
        let missing: Vec<&str> = ids.iter().copied().filter(|id| !answered.contains(id)).collect();
        if !missing.is_empty() {
            return Some(format!(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each \
                 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                missing.join(", ")
            ));
        }
        let reasoned = ids.iter().any(|id| inner.issued.get(*id).is_some_and(|x| x.reasoning));
        if reasoned && m["reasoning_content"].as_str().is_none_or(str::is_empty) {
            return Some(format!(
                "Missing `reasoning_content` field in the assistant message at message index {i}. For more \
                 information, please refer to https://api-docs.deepseek.com/guides/thinking_mode#tool-calls"
            ));
        }
    }
    None
}

fn validate_anthropic(req: &Value, messages: &[Value], inner: &Inner) -> Option<String> {
    let thinking_on = matches!(req["thinking"]["type"].as_str(), Some("enabled" | "adaptive"));
    let blocks = |m: &Value| m["content"].as_array().cloned().unwrap_or_default();
    let mut last_tool_turn = None;
    for (i, m) in messages.iter().enumerate() {
        let uses: Vec<String> = blocks(m)
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .filter_map(|b| b["id"].as_str().map(str::to_owned))
            .collect();
        if m["role"] == "assistant" && !uses.is_empty() {
            let next = messages.get(i + 1).map(blocks).unwrap_or_default();
            let answered: Vec<&str> =
                next.iter().filter(|b| b["type"] == "tool_result").filter_map(|b| b["tool_use_id"].as_str()).collect();
            let missing: Vec<&str> = uses.iter().map(String::as_str).filter(|id| !answered.contains(id)).collect();
            if !missing.is_empty() {
                return Some(format!(
                    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each \
                     `tool_use` block must have a corresponding `tool_result` block in the next message.",
                    missing.join(", ")
                ));
            }
            last_tool_turn = Some((i, uses));
        }
        if m["role"] == "user" && i > 0 {
            let prev: Vec<String> = blocks(&messages[i - 1])
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .filter_map(|b| b["id"].as_str().map(str::to_owned))
                .collect();
            for (j, b) in blocks(m).iter().enumerate() {
                if b["type"] == "tool_result" && !prev.iter().any(|p| b["tool_use_id"] == p.as_str()) {
                    return Some(format!(
                        "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {}. Each \
                         `tool_result` block must have a corresponding `tool_use` block in the previous message.",
                        b["tool_use_id"]
                    ));
                }
            }
        }
        if m["role"] == "assistant" {
            for (j, b) in blocks(m).iter().enumerate() {
                if b["type"] == "thinking" && !inner.signatures.iter().any(|s| b["signature"] == s.as_str()) {
                    return Some(format!("messages.{i}.content.{j}: Invalid `signature` in `thinking` block"));
                }
            }
        }
    }
    if thinking_on && let Some((i, uses)) = last_tool_turn {
        let issued_with_thinking = uses.iter().any(|id| inner.issued.get(id).is_some_and(|x| x.signature.is_some()));
        let first =
            blocks(&messages[i]).first().and_then(|b| b["type"].as_str().map(str::to_owned)).unwrap_or_default();
        if issued_with_thinking && first != "thinking" && first != "redacted_thinking" {
            return Some(format!(
                "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. When \
                 `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the \
                 lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from \
                 previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at \
                 https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
            ));
        }
    }
    None
}

fn validate_responses(req: &Value, input: &[Value], inner: &Inner) -> Option<String> {
    let store_false = req["store"] == false;
    for (i, item) in input.iter().enumerate() {
        if item["type"] == "reasoning"
            && let Some(enc) = item["encrypted_content"].as_str()
            && !inner.encrypted.iter().any(|e| e == enc)
        {
            return Some(format!(
                "The encrypted content for item {} could not be verified. Reason: Encrypted content could not be \
                 decrypted or parsed.",
                item["id"].as_str().unwrap_or(&format!("input[{i}]"))
            ));
        }
        if item["type"] == "function_call_output" {
            let id = item["call_id"].as_str().unwrap_or_default();
            if !input[..i].iter().any(|p| p["type"] == "function_call" && p["call_id"] == id) {
                return Some(format!("No tool call found for function call output with call_id {id}."));
            }
        }
        if item["type"] == "function_call" {
            let id = item["call_id"].as_str().unwrap_or_default();
            if !input[i + 1..].iter().any(|p| p["type"] == "function_call_output" && p["call_id"] == id) {
                return Some(format!("No tool output found for function call {id}."));
            }
            if let Some((rs, enc)) = inner.issued.get(id).and_then(|x| x.reasoning_item.clone())
                && store_false
            {
                let fc = item["id"].as_str().unwrap_or(id);
                let carried = input[..i]
                    .iter()
                    .any(|p| p["type"] == "reasoning" && enc.as_deref().is_some_and(|e| p["encrypted_content"] == e));
                if !carried {
                    return Some(format!(
                        "Item '{fc}' of type 'function_call' was provided without its required 'reasoning' item: '{rs}'."
                    ));
                }
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Error bodies

fn invalid(dialect: Dialect, msg: &str) -> Value {
    match dialect {
        Dialect::Anthropic => json!({"type": "error", "error": {"type": "invalid_request_error", "message": msg}}),
        _ => json!({"error": {"message": msg, "type": "invalid_request_error", "param": null, "code": null}}),
    }
}

fn rate_limited(dialect: Dialect) -> Value {
    match dialect {
        Dialect::Anthropic => json!({"type": "error", "error": {"type": "rate_limit_error",
            "message": "Number of request tokens has exceeded your per-minute rate limit"}}),
        _ => json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "param": null,
            "code": "rate_limit_exceeded"}}),
    }
}

fn overloaded(dialect: Dialect) -> Value {
    match dialect {
        Dialect::Anthropic => json!({"type": "error", "error": {"type": "overloaded_error", "message": ERROR_MSG}}),
        _ => json!({"error": {"message": ERROR_MSG, "type": "server_error", "param": null, "code": "server_error"}}),
    }
}

// ---------------------------------------------------------------------------------------------
// Wire formats

/// Pieces of `s` of `n` characters: argument fragments that split keys and values.
fn pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(n).map(|c| c.iter().collect()).collect()
}

/// A reasoning block's parts: (text, Anthropic signature / Responses id, Responses encrypted_content).
fn reasoning_parts(r: &str) -> (String, String, String) {
    let mut it = r.split('\u{0}');
    let a = it.next().unwrap_or_default().to_owned();
    let b = it.next().unwrap_or_default().to_owned();
    let c = it.next().unwrap_or_default().to_owned();
    (a, b, c)
}

fn chat_chunk(model: &str, delta: Value, finish: Option<&str>) -> String {
    let chunk = json!({"id": "chatcmpl-kh", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model,
        "system_fingerprint": "fp_kh", "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
    format!("data: {chunk}\n\n")
}

fn chat_sse(model: &str, blocks: &[Block], tail: Tail, usage: bool) -> Vec<String> {
    let mut out = vec![chat_chunk(model, json!({"role": "assistant", "content": ""}), None)];
    let mut finish = "stop";
    for b in blocks {
        match b {
            Block::Reasoning(r) => {
                for p in pieces(r, 12) {
                    out.push(chat_chunk(model, json!({"content": null, "reasoning_content": p}), None));
                }
            }
            Block::Text(t) => {
                for p in pieces(t, 7) {
                    out.push(chat_chunk(model, json!({"content": p}), None));
                }
            }
            Block::Tools(calls) => {
                finish = "tool_calls";
                for (i, c) in calls.iter().enumerate() {
                    out.push(chat_chunk(
                        model,
                        json!({"tool_calls": [{"index": i, "id": c.id, "type": "function",
                            "function": {"name": c.name, "arguments": ""}}]}),
                        None,
                    ));
                }
                // The calls' fragments interleave, as parallel calls do on the wire.
                let frags: Vec<Vec<String>> = calls.iter().map(|c| pieces(&c.args, 5)).collect();
                let rounds = frags.iter().map(Vec::len).max().unwrap_or(0);
                for r in 0..rounds {
                    for (i, f) in frags.iter().enumerate() {
                        if let Some(p) = f.get(r) {
                            out.push(chat_chunk(
                                model,
                                json!({"tool_calls": [{"index": i, "function": {"arguments": p}}]}),
                                None,
                            ));
                        }
                    }
                }
            }
        }
    }
    match tail {
        Tail::End => {
            out.push(chat_chunk(model, json!({}), Some(finish)));
            if usage {
                let chunk = json!({"id": "chatcmpl-kh", "object": "chat.completion.chunk", "created": 1_700_000_000,
                    "model": model, "choices": [],
                    "usage": {"prompt_tokens": 21, "completion_tokens": 9, "total_tokens": 30}});
                out.push(format!("data: {chunk}\n\n"));
            }
            out.push("data: [DONE]\n\n".into());
        }
        Tail::Error => out.push(format!("data: {}\n\n", overloaded(Dialect::Chat))),
        Tail::Drop => {}
    }
    out
}

fn chat_json(model: &str, blocks: &[Block]) -> Value {
    let mut message = json!({"role": "assistant", "content": null, "refusal": null});
    let mut finish = "stop";
    for b in blocks {
        match b {
            Block::Reasoning(r) => message["reasoning_content"] = json!(r),
            Block::Text(t) => message["content"] = json!(t),
            Block::Tools(calls) => {
                finish = "tool_calls";
                message["tool_calls"] = calls
                    .iter()
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.args}}))
                    .collect();
            }
        }
    }
    json!({"id": "chatcmpl-kh", "object": "chat.completion", "created": 1_700_000_000, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": {"prompt_tokens": 21, "completion_tokens": 9, "total_tokens": 30}})
}

fn an_event(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn anthropic_sse(model: &str, blocks: &[Block], tail: Tail) -> Vec<String> {
    let mut out = vec![
        an_event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_kh01", "type": "message", "role": "assistant",
                "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 21, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}}),
        ),
        an_event("ping", json!({"type": "ping"})),
    ];
    let mut index = 0;
    let mut stop = "end_turn";
    let delta = |i: usize, d: Value| {
        an_event("content_block_delta", json!({"type": "content_block_delta", "index": i, "delta": d}))
    };
    let block_stop = |i: usize| an_event("content_block_stop", json!({"type": "content_block_stop", "index": i}));
    for b in blocks {
        match b {
            Block::Reasoning(r) => {
                let (text, sig, _) = reasoning_parts(r);
                out.push(an_event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index,
                        "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
                ));
                for p in pieces(&text, 12) {
                    out.push(delta(index, json!({"type": "thinking_delta", "thinking": p})));
                }
                out.push(delta(index, json!({"type": "signature_delta", "signature": sig})));
                out.push(block_stop(index));
                index += 1;
            }
            Block::Text(t) => {
                out.push(an_event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
                ));
                for p in pieces(t, 7) {
                    out.push(delta(index, json!({"type": "text_delta", "text": p})));
                }
                out.push(block_stop(index));
                index += 1;
            }
            Block::Tools(calls) => {
                stop = "tool_use";
                for c in calls {
                    out.push(an_event(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": index,
                            "content_block": {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}}),
                    ));
                    for p in pieces(&c.args, 5) {
                        out.push(delta(index, json!({"type": "input_json_delta", "partial_json": p})));
                    }
                    out.push(block_stop(index));
                    index += 1;
                }
            }
        }
    }
    match tail {
        Tail::End => {
            out.push(an_event(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                    "usage": {"output_tokens": 9}}),
            ));
            out.push(an_event("message_stop", json!({"type": "message_stop"})));
        }
        Tail::Error => out.push(an_event("error", overloaded(Dialect::Anthropic))),
        Tail::Drop => {}
    }
    out
}

fn anthropic_json(model: &str, blocks: &[Block]) -> Value {
    let mut content = Vec::new();
    let mut stop = "end_turn";
    for b in blocks {
        match b {
            Block::Reasoning(r) => {
                let (text, sig, _) = reasoning_parts(r);
                content.push(json!({"type": "thinking", "thinking": text, "signature": sig}));
            }
            Block::Text(t) => content.push(json!({"type": "text", "text": t})),
            Block::Tools(calls) => {
                stop = "tool_use";
                for c in calls {
                    let input: Value = serde_json::from_str(&c.args).unwrap_or(Value::Null);
                    content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
                }
            }
        }
    }
    json!({"id": "msg_kh01", "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": stop, "stop_sequence": null, "usage": {"input_tokens": 21, "output_tokens": 9}})
}

/// The output items of a Responses answer (all completed).
fn responses_items(blocks: &[Block]) -> Vec<Value> {
    let mut out = Vec::new();
    for b in blocks {
        match b {
            Block::Reasoning(r) => {
                let (text, id, enc) = reasoning_parts(r);
                let summary = if text.is_empty() { json!([]) } else { json!([{"type": "summary_text", "text": text}]) };
                let mut item = json!({"id": id, "type": "reasoning", "summary": summary});
                if !enc.is_empty() {
                    item["encrypted_content"] = json!(enc);
                }
                out.push(item);
            }
            Block::Text(t) => out
                .push(json!({"id": "msg_kh01", "type": "message", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": t, "annotations": [], "logprobs": []}]})),
            Block::Tools(calls) => {
                for c in calls {
                    out.push(json!({"id": format!("fc_{}", c.id.trim_start_matches("call_")), "type": "function_call",
                        "status": "completed", "call_id": c.id, "name": c.name, "arguments": c.args}));
                }
            }
        }
    }
    out
}

fn response_object(model: &str, status: &str, output: Vec<Value>) -> Value {
    let usage = if status == "completed" {
        json!({"input_tokens": 21, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 9,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 30})
    } else {
        Value::Null
    };
    json!({"id": "resp_kh01", "object": "response", "created_at": 1_700_000_000, "status": status, "model": model,
        "output": output, "error": null, "incomplete_details": null, "parallel_tool_calls": true, "tools": [],
        "tool_choice": "auto", "usage": usage, "store": false, "metadata": {}})
}

fn responses_sse(model: &str, blocks: &[Block], tail: Tail) -> Vec<String> {
    let mut seq = 0u64;
    let mut out = Vec::new();
    let mut ev = |name: &str, mut data: Value| {
        data["type"] = json!(name);
        data["sequence_number"] = json!(seq);
        seq += 1;
        out.push(format!("event: {name}\ndata: {data}\n\n"));
    };
    ev("response.created", json!({"response": response_object(model, "in_progress", vec![])}));
    ev("response.in_progress", json!({"response": response_object(model, "in_progress", vec![])}));
    let items = responses_items(blocks);
    for (o, item) in items.iter().enumerate() {
        let id = item["id"].clone();
        match item["type"].as_str() {
            Some("reasoning") => {
                ev(
                    "response.output_item.added",
                    json!({"output_index": o, "item": {"id": id, "type": "reasoning", "summary": []}}),
                );
                for (s, part) in item["summary"].as_array().into_iter().flatten().enumerate() {
                    let text = part["text"].as_str().unwrap_or_default();
                    ev(
                        "response.reasoning_summary_part.added",
                        json!({"item_id": id, "output_index": o, "summary_index": s,
                        "part": {"type": "summary_text", "text": ""}}),
                    );
                    for p in pieces(text, 12) {
                        ev(
                            "response.reasoning_summary_text.delta",
                            json!({"item_id": id, "output_index": o, "summary_index": s, "delta": p}),
                        );
                    }
                    ev(
                        "response.reasoning_summary_text.done",
                        json!({"item_id": id, "output_index": o, "summary_index": s, "text": text}),
                    );
                    ev(
                        "response.reasoning_summary_part.done",
                        json!({"item_id": id, "output_index": o, "summary_index": s,
                        "part": {"type": "summary_text", "text": text}}),
                    );
                }
                ev("response.output_item.done", json!({"output_index": o, "item": item}));
            }
            Some("message") => {
                let text = item["content"][0]["text"].as_str().unwrap_or_default();
                ev(
                    "response.output_item.added",
                    json!({"output_index": o, "item": {"id": id, "type": "message",
                    "status": "in_progress", "role": "assistant", "content": []}}),
                );
                ev(
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": o, "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}),
                );
                for p in pieces(text, 7) {
                    ev(
                        "response.output_text.delta",
                        json!({"item_id": id, "output_index": o, "content_index": 0, "delta": p, "logprobs": []}),
                    );
                }
                if tail != Tail::End {
                    break;
                }
                ev(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": o, "content_index": 0, "text": text, "logprobs": []}),
                );
                ev(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": o, "content_index": 0,
                    "part": {"type": "output_text", "text": text, "annotations": [], "logprobs": []}}),
                );
                ev("response.output_item.done", json!({"output_index": o, "item": item}));
            }
            _ => {
                let args = item["arguments"].as_str().unwrap_or_default();
                let mut added = item.clone();
                added["arguments"] = json!("");
                added["status"] = json!("in_progress");
                ev("response.output_item.added", json!({"output_index": o, "item": added}));
                for p in pieces(args, 5) {
                    ev("response.function_call_arguments.delta", json!({"item_id": id, "output_index": o, "delta": p}));
                }
                ev(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": o, "arguments": args}),
                );
                ev("response.output_item.done", json!({"output_index": o, "item": item}));
            }
        }
    }
    match tail {
        Tail::End => ev("response.completed", json!({"response": response_object(model, "completed", items)})),
        Tail::Error => {
            let mut failed = response_object(model, "failed", vec![]);
            failed["error"] = json!({"code": "server_error", "message": ERROR_MSG});
            ev("response.failed", json!({"response": failed}));
        }
        Tail::Drop => {}
    }
    out
}

fn responses_json(model: &str, blocks: &[Block]) -> Value {
    response_object(model, "completed", responses_items(blocks))
}

// ---------------------------------------------------------------------------------------------
// Replies

fn plain(status: u16, text: &str) -> Response {
    Response::builder().status(status).body(Body::from(text.to_owned())).expect("response")
}

fn json_reply(status: u16, body: &Value) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(status).expect("status"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("response")
}

fn status_reply(dialect: Dialect, status: u16, body: Value, retry_after: bool) -> Response {
    let mut resp = Response::builder()
        .status(StatusCode::from_u16(status).expect("status"))
        .header("content-type", "application/json");
    if retry_after {
        resp = resp.header("retry-after", "0");
    }
    if dialect == Dialect::Anthropic {
        resp = resp.header("request-id", "req_kh01");
    } else {
        resp = resp.header("x-request-id", "req_kh01");
    }
    resp.body(Body::from(body.to_string())).expect("response")
}

/// An SSE body, one chunk per event; with `drop`, the connection is cut after the chunks (no
/// end of the chunked body), as when a vendor's connection breaks mid-stream.
fn sse_reply(chunks: Vec<String>, drop: bool) -> Response {
    let stream = futures::stream::unfold((chunks.into_iter(), drop, false), |(mut it, drop, done)| async move {
        if done {
            return None;
        }
        match it.next() {
            Some(c) => Some((Ok(Bytes::from(c)), (it, drop, false))),
            None if drop => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Some((Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "scripted drop")), (it, drop, true)))
            }
            None => None,
        }
    });
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .expect("response")
}

// ---------------------------------------------------------------------------------------------
// The wire tap

/// A transparent proxy between the clients and the engine that notes, per run (the marker in the
/// body), each request's method, path and the engine's status, with the body of every error
/// answer. It never decodes a success: it shows when the engine refused a request that the client
/// then worked around (Claude Code, for one, retries without what was refused).
/// Per run: (status, line) of each request the tap passed on.
type TapLog = Arc<Mutex<HashMap<String, Vec<(u16, String)>>>>;

#[derive(Debug, Clone)]
pub struct WireTap {
    addr: std::net::SocketAddr,
    log: TapLog,
}

#[derive(Clone)]
struct TapState {
    target: String,
    http: reqwest::Client,
    log: TapLog,
}

impl WireTap {
    pub async fn start(target: &str) -> WireTap {
        let log = Arc::new(Mutex::new(HashMap::new()));
        let state = TapState { target: target.to_owned(), http: reqwest::Client::new(), log: log.clone() };
        let app = axum::Router::new().fallback(tap).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind wire tap");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        WireTap { addr, log }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// (status, "METHOD path -> status [error body]") per request of a run.
    pub fn log(&self, run: &str) -> Vec<(u16, String)> {
        self.log.lock().expect("lock").get(run).cloned().unwrap_or_default()
    }
}

async fn tap(
    State(st): State<TapState>,
    method: Method,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let run = find_marker(&String::from_utf8_lossy(&body)).map(|m| m.run).unwrap_or_else(|| "(no marker)".into());
    let path = uri.path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_default();
    let mut req = st.http.request(method.clone(), format!("{}{path}", st.target)).body(body);
    for (k, v) in &headers {
        if k != "host" && k != "content-length" {
            req = req.header(k, v);
        }
    }
    let note =
        |status: u16, line: String| st.log.lock().expect("lock").entry(run.clone()).or_default().push((status, line));
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            note(502, format!("{method} {path} -> engine unreachable: {e}"));
            return plain(502, "wire tap: engine unreachable");
        }
    };
    let status = resp.status();
    let mut out = Response::builder().status(status.as_u16());
    for (k, v) in resp.headers() {
        if k != "content-length" && k != "transfer-encoding" {
            out = out.header(k, v);
        }
    }
    if status.as_u16() >= 400 {
        let text = resp.text().await.unwrap_or_default();
        note(status.as_u16(), format!("{method} {path} -> {} {text:.600}", status.as_u16()));
        return out.body(Body::from(text)).expect("response");
    }
    note(status.as_u16(), format!("{method} {path} -> {}", status.as_u16()));
    out.body(Body::from_stream(resp.bytes_stream())).expect("response")
}
