//! Fill-in-the-middle calls (Cursor Tab): one attempt to a FIM model in its dialect
//! ([`crate::dialect::fim`]), recorded like every call (in-flight row committed before the answer
//! is handed on, finalised on every exit path, priced, counted against the budgets).
//!
//! No retries and no fallback: a suggestion that fails is replaced by the next keystroke's.
//! The reqwest client is the gateway's, so connections to the provider stay pooled and warm
//! between suggestions. Dropping a [`FimStream`], or cancelling its context's token, drops the
//! HTTP response at once (the provider sees the connection or stream go away) and records the
//! call as canceled.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use http::{HeaderMap, HeaderValue, header};
use secrecy::SecretString;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{FimDialect, ProviderKind};
use crate::dialect::fim::{codestral, completions, ollama};
use crate::model::{self, CallFinish, CallStart, CallStatus, FimRequest, StreamEvent, Usage};
use crate::provider::budget::{Decision, Reservation};
use crate::provider::error::ProviderError;
use crate::provider::gateway::{CallContext, CallFailure, Gateway, spend_key};
use crate::provider::upstream::{self, Prepared};
use crate::provider::{Budgets, CallSink, Route};
use crate::secrets::{BoundKey, redact};

/// The largest line (one SSE event or one Ollama object) read from a FIM provider.
const MAX_LINE: usize = 1024 * 1024;

type Body = Pin<Box<dyn Stream<Item = Result<Bytes, reqwest::Error>> + Send>>;

/// The dialect tag written on the call row.
pub fn row_dialect(d: FimDialect) -> &'static str {
    match d {
        FimDialect::Completions => "fim_completions",
        FimDialect::Codestral => "fim_codestral",
        FimDialect::Ollama => "fim_ollama",
    }
}

/// The request URL for a provider's base URL. Ollama's endpoint is at the server root, so a base
/// URL that ends in `/v1` (its OpenAI-compatible API) or `/api` is taken back to the root.
pub fn fim_url(dialect: FimDialect, base_url: &str) -> String {
    let base = base_url.trim_end_matches('/');
    match dialect {
        FimDialect::Completions => format!("{base}{}", completions::PATH),
        FimDialect::Codestral => format!("{base}{}", codestral::PATH),
        FimDialect::Ollama => {
            let root = base.strip_suffix("/v1").or_else(|| base.strip_suffix("/api")).unwrap_or(base);
            format!("{root}{}", ollama::PATH)
        }
    }
}

/// The encoded request.
fn prepare(
    route: &Route,
    dialect: FimDialect,
    req: &FimRequest,
    key: Option<&BoundKey>,
) -> Result<Prepared, ProviderError> {
    let url = fim_url(dialect, &route.provider.base_url);
    let upstream = &route.model.upstream;
    let (body, accept) = match dialect {
        FimDialect::Completions => (completions::encode_request(req, upstream), "text/event-stream"),
        FimDialect::Codestral => (codestral::encode_request(req, upstream), "text/event-stream"),
        FimDialect::Ollama => (ollama::encode_request(req, upstream), "application/x-ndjson"),
    };
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::ACCEPT, HeaderValue::from_static(accept));
    if let Some(key) = key {
        upstream::attach_key(&mut headers, &route.provider, &url, key)?;
    }
    let body = serde_json::to_vec(&body).map_err(|e| ProviderError::Malformed(e.to_string()))?;
    Ok(Prepared { url, headers, body: Bytes::from(body), kind: ProviderKind::Openai, lingma: None })
}

impl Gateway {
    /// Starts a FIM call with the model `req.model` names (it must be a FIM model). `timeout`
    /// bounds the whole call. On `Ok` the provider accepted the request (a 2xx head) and the
    /// in-flight row is durable (see `CallSink::start`); on `Err` the record is already finalised.
    pub async fn fim(&self, req: FimRequest, ctx: CallContext, timeout: Duration) -> Result<FimStream, CallFailure> {
        let started = Instant::now();
        let deadline = started + timeout;
        let catalog = self.catalog();
        let route = catalog.resolve(&req.model);
        let dialect = route.as_ref().and_then(|r| r.model.fim);
        let mut guard = FimGuard {
            sink: self.sink.clone(),
            id: ctx.id.clone(),
            started,
            started_ms: crate::clock::now_ms(),
            price: route.as_ref().and_then(|r| r.model.price),
            price_version: catalog.price_version().map(str::to_owned),
            route: route.clone(),
            capture: self.opts.capture_bodies.then_some(self.opts.body_capture_limit),
            request_body: None,
            request_len: req.text_len(),
            secret: None,
            usage: None,
            text: String::new(),
            ttft: None,
            accepted: false,
            done: false,
            budget: None,
        };
        let start = CallStart {
            id: ctx.id.clone(),
            started_ms: guard.started_ms,
            dialect: dialect.map_or("fim", row_dialect).to_owned(),
            client: ctx.client.clone(),
            model: req.model.clone(),
            model_id: route.as_ref().map(|r| r.model.id.clone()),
            provider: route.as_ref().map(|r| r.provider.name.clone()),
            upstream_model: route.as_ref().map(|r| r.model.upstream.clone()),
            stream: true,
            request_body: None,
            conversation_id: ctx.conversation_id.clone(),
            request_id: ctx.request_id.clone(),
            session_id: ctx.session_id.clone(),
            budget_downgrade: None,
        };
        let opened = match (&route, dialect) {
            (Some(route), Some(dialect)) => {
                if self.budgets.is_empty() {
                    Ok((route.clone(), dialect))
                } else {
                    let key = spend_key(&ctx.client, &req.model, Some(route));
                    match self.budgets.check(&key, None, guard.started_ms) {
                        Decision::Refuse { budget, reset_ms } => Err(self.refusal(budget, reset_ms, guard.started_ms)),
                        _ => {
                            let reservation = self.budgets.reserve(&key, 0, guard.started_ms);
                            guard.budget =
                                Some((self.budgets.clone(), reservation, ctx.client.clone(), req.model.clone()));
                            Ok((route.clone(), dialect))
                        }
                    }
                }
            }
            (Some(r), None) => Err(ProviderError::Local(format!("model `{}` is not a FIM model", r.model.name))),
            (None, _) => Err(ProviderError::UnknownModel(req.model.clone())),
        };
        let started_ack = self.sink.start(start);
        let result = match opened {
            Ok((route, dialect)) => self.fim_open(&route, dialect, &req, &ctx, &mut guard, deadline).await,
            Err(e) => Err(e),
        };
        started_ack.await;
        match result {
            Ok(body) => {
                guard.accepted = true;
                Ok(FimStream {
                    body,
                    dialect: dialect.unwrap_or(FimDialect::Completions),
                    buf: Vec::new(),
                    pending: VecDeque::new(),
                    ended: false,
                    guard,
                    deadline,
                    timeout,
                    cancel: ctx.cancel,
                })
            }
            Err(err) => {
                guard.finalize(super::failed_status(&err), Some(&err));
                Err(CallFailure { error: err, upstream_wait: started.elapsed(), attempts: 1, fallbacks: Vec::new() })
            }
        }
    }

    async fn fim_open(
        &self,
        route: &Route,
        dialect: FimDialect,
        req: &FimRequest,
        ctx: &CallContext,
        guard: &mut FimGuard,
        deadline: Instant,
    ) -> Result<Body, ProviderError> {
        let key = self.key_for(route).await?;
        guard.secret = key.as_ref().map(|k| k.redaction().clone());
        let prepared = prepare(route, dialect, req, key.as_ref())?;
        if let Some(limit) = guard.capture {
            guard.request_body = Some(cap(&String::from_utf8_lossy(&prepared.body), limit));
        }
        let sent = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => return Err(ProviderError::Canceled),
            r = tokio::time::timeout_at(deadline, upstream::send(&self.http, &prepared)) => r,
        };
        match sent {
            Ok(Ok(resp)) => Ok(Box::pin(resp.bytes_stream())),
            Ok(Err(e)) => Err(e.redacted(key.as_ref().map(BoundKey::redaction))),
            Err(_) => Err(ProviderError::Timeout(deadline.duration_since(guard.started), "waiting for the FIM answer")),
        }
    }
}

fn cap(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[truncated]", &text[..end])
}

/// Finalises a FIM call's record exactly once: explicitly, or as canceled when dropped.
struct FimGuard {
    sink: Arc<dyn CallSink>,
    id: String,
    started: Instant,
    started_ms: i64,
    price: Option<crate::pricing::Price>,
    price_version: Option<String>,
    route: Option<Route>,
    /// The body capture limit, when bodies are captured.
    capture: Option<usize>,
    request_body: Option<String>,
    request_len: usize,
    secret: Option<SecretString>,
    usage: Option<Usage>,
    text: String,
    ttft: Option<Duration>,
    accepted: bool,
    done: bool,
    /// The budgets, the call's reservation, its client and the model name it was asked for.
    budget: Option<(Arc<Budgets>, Reservation, String, String)>,
}

impl FimGuard {
    fn finalize(&mut self, status: CallStatus, err: Option<&ProviderError>) {
        if self.done {
            return;
        }
        self.done = true;
        let reported = self.usage.is_some();
        let mut usage = self.usage.unwrap_or_default();
        let estimated = !reported && self.accepted;
        if estimated {
            // About four bytes per token: the engine's estimate when the provider reports none.
            usage.input_tokens = (self.request_len as u64).div_ceil(4);
            usage.output_tokens = (self.text.len() as u64).div_ceil(4);
        }
        let cost = self.price.as_ref().map(|p| crate::pricing::cost_micros(p, &usage));
        if let Some((budgets, reservation, client, requested)) = self.budget.take() {
            let key = spend_key(&client, &requested, self.route.as_ref());
            budgets.finish(reservation, &key, cost.and_then(|c| u64::try_from(c).ok()).unwrap_or(0));
        }
        let secrets: Vec<&SecretString> = self.secret.iter().collect();
        let (error_kind, error_message) = match err {
            Some(e) => (Some(e.kind().to_owned()), Some(redact(&e.to_string(), &secrets))),
            None => (None, None),
        };
        let http_status = match (status, err) {
            (CallStatus::Error, Some(e)) if !self.accepted => Some(e.status()),
            (CallStatus::Canceled, _) => None,
            _ => Some(200),
        };
        let response_body = self.capture.filter(|_| self.accepted).map(|limit| cap(&self.text, limit));
        let finish = CallFinish {
            id: self.id.clone(),
            finished_ms: crate::clock::now_ms(),
            status,
            http_status,
            usage,
            usage_estimated: estimated,
            cost_micros: cost,
            price_version: self.price.as_ref().and(self.price_version.clone()),
            cost_source: if estimated {
                Some(model::CostSource::Estimated)
            } else if self.accepted {
                Some(model::CostSource::Reported)
            } else {
                None
            },
            ttft_ms: self.ttft.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            total_ms: i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX),
            retries: 0,
            error_kind,
            error_message,
            request_body: self.request_body.take(),
            response_body,
            model_id: None,
            provider: None,
            upstream_model: None,
            notes: Vec::new(),
        };
        // Queued, not awaited: the commit must not delay the suggestion.
        drop(self.sink.finish(finish));
    }
}

impl Drop for FimGuard {
    fn drop(&mut self) {
        self.finalize(CallStatus::Canceled, None);
    }
}

/// A started FIM call's events: `TextDelta`s, `Usage`, `Stop`, and at most one `Error` (the last
/// event). Dropping it drops the provider's response and records the call as canceled.
pub struct FimStream {
    body: Body,
    dialect: FimDialect,
    buf: Vec<u8>,
    pending: VecDeque<StreamEvent>,
    ended: bool,
    guard: FimGuard,
    deadline: Instant,
    timeout: Duration,
    cancel: CancellationToken,
}

impl std::fmt::Debug for FimStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FimStream").field("id", &self.guard.id).finish_non_exhaustive()
    }
}

impl FimStream {
    /// The model and provider serving the call.
    pub fn route(&self) -> Option<&Route> {
        self.guard.route.as_ref()
    }

    /// Decodes the complete lines in the buffer into `pending`.
    fn decode_lines(&mut self, all: bool) -> Result<(), ProviderError> {
        loop {
            let Some(pos) = self.buf.iter().position(|&b| b == b'\n') else {
                if all && !self.buf.is_empty() {
                    let rest = std::mem::take(&mut self.buf);
                    self.decode_one(&rest)?;
                }
                return Ok(());
            };
            let line: Vec<u8> = self.buf.drain(..=pos).collect();
            self.decode_one(&line[..pos])?;
        }
    }

    fn decode_one(&mut self, line: &[u8]) -> Result<(), ProviderError> {
        let line = String::from_utf8_lossy(line);
        let line = line.trim_end_matches('\r');
        let events = match self.dialect {
            FimDialect::Ollama => ollama::decode_line(line),
            d => {
                let Some(data) = line.strip_prefix("data:") else { return Ok(()) };
                let data = data.strip_prefix(' ').unwrap_or(data);
                if d == FimDialect::Codestral { codestral::decode_event(data) } else { completions::decode_event(data) }
            }
        };
        let events = events.map_err(|e| ProviderError::Malformed(e.to_string()))?;
        self.pending.extend(events);
        Ok(())
    }

    /// Ends the call with an error event (the record says `err`).
    fn fail(&mut self, err: ProviderError) -> StreamEvent {
        self.ended = true;
        let secrets: Vec<&SecretString> = self.guard.secret.iter().collect();
        let mut info = err.info();
        info.message = redact(&info.message, &secrets);
        self.guard.finalize(super::failed_status(&err), Some(&err));
        StreamEvent::Error { error: info }
    }

    /// The next event; `None` after the last (the record is then finalised). Cancel-safe.
    pub async fn next(&mut self) -> Option<StreamEvent> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                match &ev {
                    StreamEvent::TextDelta { text } => {
                        if self.guard.ttft.is_none() {
                            self.guard.ttft = Some(self.guard.started.elapsed());
                        }
                        self.guard.text.push_str(text);
                    }
                    StreamEvent::Usage { usage } => {
                        let mut u = self.guard.usage.unwrap_or_default();
                        u.merge_max(usage);
                        self.guard.usage = Some(u);
                    }
                    StreamEvent::Error { error } => {
                        let err = ProviderError::Upstream { status: 200, info: error.clone(), retry_after: None };
                        return Some(self.fail(err));
                    }
                    _ => {}
                }
                return Some(ev);
            }
            if self.ended {
                self.guard.finalize(CallStatus::Ok, None);
                return None;
            }
            let chunk = tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Some(self.fail(ProviderError::Canceled)),
                c = tokio::time::timeout_at(self.deadline, self.body.next()) => c,
            };
            match chunk {
                Err(_) => return Some(self.fail(ProviderError::Timeout(self.timeout, "waiting for the FIM answer"))),
                Ok(Some(Ok(bytes))) => {
                    self.buf.extend_from_slice(&bytes);
                    if let Err(e) = self.decode_lines(false) {
                        return Some(self.fail(e));
                    }
                    if self.buf.len() > MAX_LINE {
                        return Some(self.fail(ProviderError::Malformed("a line longer than 1 MiB".into())));
                    }
                }
                Ok(Some(Err(e))) => {
                    let msg = if e.is_timeout() { "timed out".to_owned() } else { "the answer broke off".to_owned() };
                    return Some(self.fail(ProviderError::Sent(msg)));
                }
                Ok(None) => {
                    if let Err(e) = self.decode_lines(true) {
                        return Some(self.fail(e));
                    }
                    self.ended = true;
                }
            }
        }
    }
}
