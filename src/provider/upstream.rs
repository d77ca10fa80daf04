//! One upstream attempt over HTTP, and the upstream's SSE stream decoded into canonical events.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use eventsource_stream::{EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use http::{HeaderMap, HeaderValue, header};
use secrecy::ExposeSecret;
use tokio::time::Instant;

use crate::config::ProviderKind;
use crate::dialect::sse::SseEvent;
use crate::dialect::{DecodeError, anthropic, openai_chat, openai_responses};
use crate::model::{self, ErrorInfo, StreamEvent};
use crate::provider::error::ProviderError;
use crate::provider::lingma::{self, LingmaStream};
use crate::provider::retry::parse_retry_after;
use crate::provider::{ProviderEntry, Route};
use crate::secrets::BoundKey;

/// The Anthropic API version Keyhaven speaks.
const ANTHROPIC_VERSION: &str = "2023-06-01";
/// The largest single SSE event accepted from an upstream.
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// An encoded request, reused across attempts.
#[derive(Debug)]
pub struct Prepared {
    pub url: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub kind: ProviderKind,
    /// The Lingma kind's prompt (no HTTP request then).
    pub lingma: Option<std::sync::Arc<lingma::Prompt>>,
}

pub fn prepare(route: &Route, req: &model::Request, key: Option<&BoundKey>) -> Result<Prepared, ProviderError> {
    let p: &ProviderEntry = &route.provider;
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::ACCEPT, HeaderValue::from_static("text/event-stream"));
    if p.kind == ProviderKind::Lingma {
        let opts = p.lingma.clone().ok_or_else(|| ProviderError::Local("lingma settings missing".into()))?;
        let prompt = lingma::build(&p.name, &opts, &route.model.upstream, req).map_err(ProviderError::Local)?;
        return Ok(Prepared {
            url: format!("lingma://{}", p.name),
            headers,
            body: Bytes::new(),
            kind: p.kind,
            lingma: Some(std::sync::Arc::new(prompt)),
        });
    }
    let left = left_out(p.kind, req);
    if !left.is_empty() {
        tracing::warn!(provider = %p.name, notes = ?left, "left out of the request");
    }
    let (url, body) = match p.kind {
        ProviderKind::Openai => {
            let opts = openai_chat::EncodeOptions {
                reasoning_content: p.reasoning_content,
                max_tokens_field: if p.max_completion_tokens {
                    openai_chat::MaxTokensField::MaxCompletionTokens
                } else {
                    openai_chat::MaxTokensField::MaxTokens
                },
                reasoning_effort: route.model.capabilities.thinking,
            };
            (format!("{}/chat/completions", p.base_url), openai_chat::encode_request(req, &route.model.upstream, &opts))
        }
        ProviderKind::Anthropic => {
            headers.insert("anthropic-version", HeaderValue::from_static(ANTHROPIC_VERSION));
            // An Anthropic client's beta flags go to an Anthropic upstream as it sent them.
            if let Some(pt) = model::Passthrough::of(req, model::WireDialect::Anthropic)
                && !pt.betas.is_empty()
                && let Ok(v) = HeaderValue::from_str(&pt.betas.join(","))
            {
                headers.insert("anthropic-beta", v);
            }
            let opts = anthropic::EncodeOptions { default_max_tokens: route.model.max_output_tokens.unwrap_or(8192) };
            (format!("{}/messages", p.base_url), anthropic::encode_request(req, &route.model.upstream, &opts))
        }
        ProviderKind::OpenaiResponses => {
            let opts = openai_responses::EncodeOptions { reasoning: route.model.capabilities.thinking };
            (format!("{}/responses", p.base_url), openai_responses::encode_request(req, &route.model.upstream, &opts))
        }
        ProviderKind::Lingma => return Err(ProviderError::Local("lingma is not an HTTP provider".into())),
    };
    if let Some(key) = key {
        attach_key(&mut headers, p, &url, key)?;
    }
    let body = serde_json::to_vec(&body).map_err(|e| ProviderError::Malformed(e.to_string()))?;
    Ok(Prepared { url, headers, body: Bytes::from(body), kind: p.kind, lingma: None })
}

/// What a request loses toward an upstream of `kind`, one note each for the call row. A client's
/// server tools (Anthropic `web_search_*`, `web_fetch_*`, `code_execution_*`, tool search, MCP
/// toolsets; OpenAI hosted tools) and its `mcp_servers` reach only an upstream of its own dialect
/// (the encoders send a passthrough's tools and fields only to their own dialect); toward any
/// other upstream they are left out, never a 400, and said here.
pub fn left_out(kind: ProviderKind, req: &model::Request) -> Vec<String> {
    let Some(pt) = req.passthrough.as_deref() else { return Vec::new() };
    let same = matches!(
        (pt.dialect, kind),
        (model::WireDialect::Anthropic, ProviderKind::Anthropic)
            | (model::WireDialect::OpenaiChat, ProviderKind::Openai)
            | (model::WireDialect::OpenaiResponses, ProviderKind::OpenaiResponses)
    );
    if same {
        return Vec::new();
    }
    let vendor = if pt.dialect == model::WireDialect::Anthropic { "Anthropic" } else { "OpenAI" };
    let mut notes: Vec<String> = pt
        .tool_names()
        .into_iter()
        .map(|t| format!("{vendor} built-in tool `{t}` left out: this upstream cannot run it"))
        .collect();
    if let Some(servers) = pt.fields.get("mcp_servers").and_then(serde_json::Value::as_array) {
        for s in servers {
            let name = s.get("name").and_then(serde_json::Value::as_str).unwrap_or("unnamed");
            notes.push(format!("MCP server `{name}` left out: this upstream cannot reach it"));
        }
    }
    notes
}

/// Puts the key on a request for `url` in the provider's header (`x-api-key` for Anthropic,
/// `Authorization: Bearer` otherwise), after checking that `url` is on the origin the key is bound
/// to ([`BoundKey::for_url`]).
pub(crate) fn attach_key(
    headers: &mut HeaderMap,
    p: &ProviderEntry,
    url: &str,
    key: &BoundKey,
) -> Result<(), ProviderError> {
    let secret = key.for_url(url).map_err(|source| ProviderError::Key { provider: p.name.clone(), source })?;
    let (name, value) = match p.kind {
        ProviderKind::Anthropic => (header::HeaderName::from_static("x-api-key"), secret.expose_secret().to_owned()),
        ProviderKind::Openai | ProviderKind::OpenaiResponses | ProviderKind::Lingma => {
            (header::AUTHORIZATION, format!("Bearer {}", secret.expose_secret()))
        }
    };
    let mut v = HeaderValue::from_str(&value)
        .map_err(|_| ProviderError::Connect(format!("provider `{}`: the key has invalid characters", p.name)))?;
    v.set_sensitive(true);
    headers.insert(name, v);
    Ok(())
}

/// Opens the upstream's event stream: an HTTP request, or a Lingma IPC call.
pub async fn open(
    http: &reqwest::Client,
    lingma: &lingma::Registry,
    p: &Prepared,
    idle: Duration,
    deadline: Instant,
) -> Result<EventStream, ProviderError> {
    match &p.lingma {
        Some(prompt) => Ok(EventStream::lingma(lingma.open(prompt).await?, idle, deadline)),
        None => {
            let resp = send(http, p).await?;
            Ok(EventStream::new(resp, p.kind, idle, deadline))
        }
    }
}

/// The body an Anthropic-kind provider counts for `req` (the canonical request encoded, for
/// requests Keyhaven rewrote, e.g. emulated tools).
pub fn count_body(route: &Route, req: &model::Request) -> serde_json::Value {
    let opts = anthropic::EncodeOptions { default_max_tokens: route.model.max_output_tokens.unwrap_or(8192) };
    let mut body = anthropic::encode_request(req, &route.model.upstream, &opts);
    count_only(&mut body);
    body
}

/// The body the client sent, for the provider to count exactly as sent: only `model` becomes the
/// upstream's name (and the fields a count does not take go).
pub fn count_body_as_sent(route: &Route, mut body: serde_json::Value) -> serde_json::Value {
    if let Some(o) = body.as_object_mut() {
        o.insert("model".into(), serde_json::Value::String(route.model.upstream.clone()));
    }
    count_only(&mut body);
    body
}

/// The count endpoint takes the prompt only.
fn count_only(body: &mut serde_json::Value) {
    if let Some(o) = body.as_object_mut() {
        for field in
            ["max_tokens", "stream", "temperature", "top_p", "top_k", "stop_sequences", "metadata", "service_tier"]
        {
            o.remove(field);
        }
    }
}

/// Asks an Anthropic-kind provider to count the input tokens of `body`
/// (`{base_url}/messages/count_tokens`, non-streaming JSON `{"input_tokens": N}`), with the
/// client's `anthropic-beta` (features such as context management change what is counted).
pub async fn count_tokens(
    http: &reqwest::Client,
    route: &Route,
    body: &serde_json::Value,
    beta: Option<&str>,
    key: Option<&BoundKey>,
) -> Result<u64, ProviderError> {
    let p: &ProviderEntry = &route.provider;
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert("anthropic-version", HeaderValue::from_static(ANTHROPIC_VERSION));
    if let Some(v) = beta.and_then(|b| HeaderValue::from_str(b).ok()) {
        headers.insert("anthropic-beta", v);
    }
    let url = format!("{}/messages/count_tokens", p.base_url);
    if let Some(key) = key {
        attach_key(&mut headers, p, &url, key)?;
    }
    let resp = http.post(&url).headers(headers).json(body).send().await.map_err(|e| send_error(&e))?;
    if let Some(err) = redirect_error(&resp) {
        return Err(err);
    }
    let status = resp.status().as_u16();
    let bytes = read_capped(resp, 64 * 1024).await;
    if !(200..300).contains(&status) {
        return Err(ProviderError::Upstream {
            status,
            info: crate::dialect::error::decode_error(status, &bytes),
            retry_after: None,
        });
    }
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| ProviderError::Malformed(e.to_string()))?;
    value
        .get("input_tokens")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| ProviderError::Malformed("count_tokens answer without input_tokens".into()))
}

/// Sends one attempt and waits for the response head. Non-2xx statuses become
/// [`ProviderError::Upstream`] with the upstream's error decoded in its dialect.
pub async fn send(http: &reqwest::Client, p: &Prepared) -> Result<reqwest::Response, ProviderError> {
    let resp =
        http.post(&p.url).headers(p.headers.clone()).body(p.body.clone()).send().await.map_err(|e| send_error(&e))?;
    let status = resp.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(resp);
    }
    if let Some(err) = redirect_error(&resp) {
        return Err(err);
    }
    let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let retry_after = parse_retry_after(
        header("retry-after-ms").as_deref(),
        header("retry-after").as_deref(),
        std::time::SystemTime::now(),
    );
    // Error bodies are small; cap what is read anyway.
    let body = read_capped(resp, 64 * 1024).await;
    // One reader for every kind: OpenAI-compatible vendors and proxies mix the shapes.
    let info = crate::dialect::error::decode_error(status, &body);
    Err(ProviderError::Upstream { status, info, retry_after })
}

/// A 3xx answer as [`ProviderError::Redirect`], naming where it pointed (without any user name or
/// password in it). The client follows no redirects (`Gateway::new`), so a 3xx arrives here.
fn redirect_error(resp: &reqwest::Response) -> Option<ProviderError> {
    if !resp.status().is_redirection() {
        return None;
    }
    let raw = resp.headers().get(header::LOCATION).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let location = match raw {
        None => "nowhere (no Location header)".to_owned(),
        Some(raw) => match resp.url().join(raw.trim()) {
            Ok(mut u) => {
                let _ = u.set_username("");
                let _ = u.set_password(None);
                u.to_string()
            }
            Err(_) => raw.chars().take(300).collect(),
        },
    };
    Some(ProviderError::Redirect { status: resp.status().as_u16(), location })
}

async fn read_capped(resp: reqwest::Response, cap: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        let room = cap.saturating_sub(out.len());
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if out.len() >= cap {
            break;
        }
    }
    out
}

/// Classifies a failed send. Only a connect error (refused, DNS, TLS handshake, connect timeout)
/// proves the provider never saw the request; any other failure happened with the request
/// written or being written (hyper already resends, by itself, a request a pooled connection
/// closed before writing it), so the provider may be processing it: [`ProviderError::Sent`].
fn send_error(e: &reqwest::Error) -> ProviderError {
    if e.is_connect() { ProviderError::Connect(describe(e)) } else { ProviderError::Sent(describe(e)) }
}

/// A reqwest error without the URL's query or any header (nothing secret).
fn describe(e: &reqwest::Error) -> String {
    let what = if e.is_connect() {
        "connection failed"
    } else if e.is_timeout() {
        "timed out"
    } else if e.is_body() || e.is_decode() {
        "bad response body"
    } else {
        "request failed"
    };
    let mut cause = String::new();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        cause = s.to_string();
        src = s.source();
    }
    if cause.is_empty() { what.to_owned() } else { format!("{what}: {cause}") }
}

enum Decoder {
    Openai(openai_chat::StreamDecoder),
    Anthropic(anthropic::StreamDecoder),
    OpenaiResponses(openai_responses::StreamDecoder),
}

impl Decoder {
    fn decode(&mut self, ev: &SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), DecodeError> {
        match self {
            Decoder::Openai(d) => d.decode(ev, out),
            Decoder::Anthropic(d) => d.decode(ev, out),
            Decoder::OpenaiResponses(d) => d.decode(ev, out),
        }
    }

    fn is_done(&self) -> bool {
        match self {
            Decoder::Openai(d) => d.is_done(),
            Decoder::Anthropic(d) => d.is_done(),
            Decoder::OpenaiResponses(d) => d.is_done(),
        }
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        match self {
            Decoder::Openai(d) => d.finish(out),
            Decoder::Anthropic(d) => d.finish(out),
            Decoder::OpenaiResponses(d) => d.finish(out),
        }
    }

    fn skipped(&self) -> &[String] {
        match self {
            Decoder::Anthropic(d) => d.skipped(),
            Decoder::Openai(_) | Decoder::OpenaiResponses(_) => &[],
        }
    }
}

/// A transport failure while reading the upstream body, already described without secrets.
#[derive(Debug)]
struct TransportError(String);

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

type SseStream =
    Pin<Box<dyn Stream<Item = Result<eventsource_stream::Event, EventStreamError<TransportError>>> + Send>>;

/// Where an [`EventStream`]'s events come from.
enum Source {
    Sse { sse: SseStream, decoder: Decoder },
    Lingma(Box<LingmaStream>),
}

/// One item pulled from a [`Source`].
enum Pulled {
    Sse(Option<Result<eventsource_stream::Event, EventStreamError<TransportError>>>),
    Lingma(Option<Result<StreamEvent, ProviderError>>),
}

impl Source {
    async fn pull(&mut self) -> Pulled {
        match self {
            Source::Sse { sse, .. } => Pulled::Sse(sse.next().await),
            Source::Lingma(l) => Pulled::Lingma(l.next().await),
        }
    }
}

/// The upstream's events, decoded. [`EventStream::next`] is cancel-safe.
pub struct EventStream {
    source: Source,
    pending: VecDeque<StreamEvent>,
    scratch: Vec<StreamEvent>,
    ended: bool,
    idle: Duration,
    deadline: Instant,
    last_activity: Instant,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream").field("ended", &self.ended).finish_non_exhaustive()
    }
}

impl EventStream {
    pub fn new(resp: reqwest::Response, kind: ProviderKind, idle: Duration, deadline: Instant) -> EventStream {
        // Bound what one event may buffer: an upstream that never ends an event is cut off.
        let mut since_boundary = 0usize;
        let bytes = resp.bytes_stream().map(move |chunk| {
            let chunk = chunk.map_err(|e| TransportError(describe(&e)))?;
            match chunk.iter().rposition(|&b| b == b'\n') {
                Some(pos) => since_boundary = chunk.len() - pos - 1,
                None => since_boundary += chunk.len(),
            }
            if since_boundary > MAX_EVENT_BYTES {
                return Err(TransportError(format!("an event exceeded {MAX_EVENT_BYTES} bytes")));
            }
            Ok(chunk)
        });
        let sse = bytes.eventsource().boxed();
        let decoder = match kind {
            // Lingma never answers over HTTP; its streams are built by `EventStream::lingma`.
            ProviderKind::Openai | ProviderKind::Lingma => Decoder::Openai(openai_chat::StreamDecoder::new()),
            ProviderKind::Anthropic => Decoder::Anthropic(anthropic::StreamDecoder::new()),
            ProviderKind::OpenaiResponses => Decoder::OpenaiResponses(openai_responses::StreamDecoder::new()),
        };
        EventStream {
            source: Source::Sse { sse, decoder },
            pending: VecDeque::new(),
            scratch: Vec::new(),
            ended: false,
            idle,
            deadline,
            last_activity: Instant::now(),
        }
    }

    /// A Lingma call's events, under the same idle and total timeouts.
    pub fn lingma(stream: LingmaStream, idle: Duration, deadline: Instant) -> EventStream {
        EventStream {
            source: Source::Lingma(Box::new(stream)),
            pending: VecDeque::new(),
            scratch: Vec::new(),
            ended: false,
            idle,
            deadline,
            last_activity: Instant::now(),
        }
    }

    /// The types of the upstream's content blocks that had no canonical form and were not
    /// forwarded (Anthropic server tool calls and results), each once.
    pub fn skipped_blocks(&self) -> &[String] {
        match &self.source {
            Source::Sse { decoder, .. } => decoder.skipped(),
            Source::Lingma(_) => &[],
        }
    }

    /// The next canonical event; `None` once the upstream finished cleanly.
    pub async fn next(&mut self) -> Option<Result<StreamEvent, ProviderError>> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Some(Ok(ev));
            }
            if self.ended {
                return None;
            }
            let idle_at = (self.last_activity + self.idle).min(self.deadline);
            let item = tokio::select! {
                item = self.source.pull() => item,
                () = tokio::time::sleep_until(idle_at) => {
                    self.ended = true;
                    let which = if idle_at == self.deadline { "total" } else { "idle between chunks" };
                    return Some(Err(ProviderError::Timeout(self.idle, which)));
                }
            };
            self.last_activity = Instant::now();
            let (decoder, item) = match (&mut self.source, item) {
                (Source::Sse { decoder, .. }, Pulled::Sse(item)) => (decoder, item),
                (_, Pulled::Lingma(item)) => match item {
                    Some(Ok(ev)) => {
                        self.pending.push_back(ev);
                        continue;
                    }
                    Some(Err(e)) => {
                        self.ended = true;
                        return Some(Err(e));
                    }
                    None => {
                        self.ended = true;
                        continue;
                    }
                },
                (Source::Lingma(_), Pulled::Sse(_)) => {
                    self.ended = true;
                    return Some(Err(ProviderError::Disconnected));
                }
            };
            match item {
                Some(Ok(ev)) => {
                    let ev = SseEvent { event: (ev.event != "message").then_some(ev.event), data: ev.data };
                    if let Err(e) = decoder.decode(&ev, &mut self.scratch) {
                        self.ended = true;
                        return Some(Err(ProviderError::Malformed(e.to_string())));
                    }
                    self.pending.extend(self.scratch.drain(..));
                    if decoder.is_done() {
                        decoder.finish(&mut self.scratch);
                        self.pending.extend(self.scratch.drain(..));
                        self.ended = true;
                    }
                }
                Some(Err(EventStreamError::Transport(e))) => {
                    // After a 2xx head the provider is answering (and billing): never retried.
                    self.ended = true;
                    return Some(Err(ProviderError::Sent(e.0)));
                }
                Some(Err(e)) => {
                    self.ended = true;
                    return Some(Err(ProviderError::Malformed(e.to_string())));
                }
                None => {
                    self.ended = true;
                    decoder.finish(&mut self.scratch);
                    self.pending.extend(self.scratch.drain(..));
                    // A stream that ends without its terminal marker was cut.
                    if !self.pending.iter().any(|e| matches!(e, StreamEvent::Stop { .. })) {
                        return Some(Err(ProviderError::Disconnected));
                    }
                }
            }
        }
    }
}

/// An in-stream error event as a provider error (used when it arrives before the first byte).
pub fn stream_error(info: &ErrorInfo) -> ProviderError {
    let status = match info.kind {
        model::ErrorKind::RateLimited => 429,
        model::ErrorKind::Overloaded => 529,
        model::ErrorKind::InvalidRequest => 400,
        model::ErrorKind::Authentication => 401,
        model::ErrorKind::PermissionDenied => 403,
        model::ErrorKind::NotFound => 404,
        model::ErrorKind::RequestTooLarge => 413,
        model::ErrorKind::Timeout => 504,
        model::ErrorKind::Upstream | model::ErrorKind::Internal => 502,
    };
    ProviderError::Upstream { status, info: info.clone(), retry_after: None }
}
