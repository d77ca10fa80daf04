//! One gateway call from resolved request to finished record: route, record start, attempts with
//! retries before the first byte, then a stream of canonical events that finalises the record on
//! every exit path (including being dropped when the client goes away).

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use secrecy::SecretString;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{RetryConfig, TimeoutConfig};
use crate::model::{self, Accumulator, CallFinish, CallStart, CallStatus, StreamEvent};
use crate::provider::error::ProviderError;
use crate::provider::retry::{backoff, retryable_status};
use crate::provider::upstream::{self, EventStream};
use crate::provider::{CallSink, Catalog, Route};
use crate::secrets::{Secrets, redact};

#[derive(Debug, Clone)]
pub struct GatewayOptions {
    pub timeouts: TimeoutConfig,
    pub retry: RetryConfig,
    pub capture_bodies: bool,
    pub body_capture_limit: usize,
}

/// What the inbound side knows about a call.
#[derive(Debug, Clone)]
pub struct CallContext {
    pub id: String,
    pub dialect: &'static str,
    pub client: String,
    /// The raw inbound body, for capture.
    pub request_body: Option<bytes::Bytes>,
    pub cancel: CancellationToken,
}

/// A call that failed before anything reached the client (its record is already finalised).
#[derive(Debug)]
pub struct CallFailure {
    pub error: ProviderError,
    /// Time spent waiting on the upstream, so the overhead header can exclude it.
    pub upstream_wait: Duration,
}

/// Where the engine spent its time, for the overhead header.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    pub started: Instant,
    /// Engine time before the first attempt was sent.
    pub prepare: Duration,
    /// When the first upstream event arrived.
    pub first_event: Instant,
    /// When the latest upstream event arrived.
    pub last_event: Instant,
    pub retries: u32,
}

pub struct Gateway {
    http: reqwest::Client,
    catalog: RwLock<Arc<Catalog>>,
    secrets: Secrets,
    sink: Arc<dyn CallSink>,
    opts: GatewayOptions,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").field("opts", &self.opts).finish_non_exhaustive()
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Gateway {
    pub fn new(catalog: Catalog, secrets: Secrets, sink: Arc<dyn CallSink>, opts: GatewayOptions) -> Gateway {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(opts.timeouts.connect))
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_nodelay(true)
            .user_agent(concat!("keyhaven/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        Gateway { http, catalog: RwLock::new(Arc::new(catalog)), secrets, sink, opts }
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().map(|c| c.clone()).unwrap_or_default()
    }

    /// Swaps in a new catalog; calls already running keep the one they started with.
    pub fn set_catalog(&self, catalog: Catalog) {
        if let Ok(mut c) = self.catalog.write() {
            *c = Arc::new(catalog);
        }
    }

    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// Starts a call. On `Ok`, the upstream accepted the request and its first event is in hand;
    /// on `Err`, nothing was sent to the client yet and the record is already finalised.
    pub async fn call(&self, req: model::Request, ctx: CallContext) -> Result<CallStream, CallFailure> {
        let started = Instant::now();
        let catalog = self.catalog();
        let route = catalog.resolve(&req.model);
        let mut guard = CallGuard {
            sink: self.sink.clone(),
            id: ctx.id.clone(),
            started,
            started_ms: now_ms(),
            price: route.as_ref().and_then(|r| r.model.price),
            price_version: catalog.price_version().map(str::to_owned),
            secret: None,
            capture: self.opts.capture_bodies,
            capture_limit: self.opts.body_capture_limit,
            request_bytes: ctx.request_body.as_ref().map_or(0, bytes::Bytes::len),
            retries: 0,
            ttft: None,
            acc: Some(Accumulator::new()),
            request_body: None,
            upstream_wait: Duration::ZERO,
            accepted: false,
            done: false,
        };
        let started_ack = self.sink.start(CallStart {
            id: ctx.id.clone(),
            started_ms: guard.started_ms,
            dialect: ctx.dialect.to_owned(),
            client: ctx.client.clone(),
            model: req.model.clone(),
            model_id: route.as_ref().map(|r| r.model.id.clone()),
            provider: route.as_ref().map(|r| r.provider.name.clone()),
            upstream_model: route.as_ref().map(|r| r.model.upstream.clone()),
            stream: req.stream,
            request_body: None,
        });
        let result =
            self.open(route, &req, &ctx, &mut guard, started).await.map_err(|e| e.redacted(guard.secret.as_ref()));
        // The in-flight row must be durable before the client sees a byte.
        started_ack.await;
        match result {
            Ok((route, events, first, prepare, first_event)) => {
                guard.accepted = true;
                let timings =
                    Timings { started, prepare, first_event, last_event: first_event, retries: guard.retries };
                let cancel = ctx.cancel.clone();
                let mut stream = CallStream { events, first: Some(first), guard, timings, route, error: None, cancel };
                if let Some(body) = &ctx.request_body {
                    stream.guard.capture_request(body);
                }
                Ok(stream)
            }
            Err(err) => {
                if let Some(body) = &ctx.request_body {
                    guard.capture_request(body);
                }
                guard.finalize(CallStatus::Error, Some(&err)).await;
                Err(CallFailure { error: err, upstream_wait: guard.upstream_wait })
            }
        }
    }

    async fn open(
        &self,
        route: Option<Route>,
        req: &model::Request,
        ctx: &CallContext,
        guard: &mut CallGuard,
        started: Instant,
    ) -> Result<(Route, EventStream, StreamEvent, Duration, Instant), ProviderError> {
        let Some(route) = route else { return Err(ProviderError::UnknownModel(req.model.clone())) };
        let key = match &route.provider.key {
            None => None,
            Some(key_ref) => {
                let secrets = self.secrets.clone();
                let key_ref = key_ref.clone();
                let resolved = tokio::task::spawn_blocking(move || secrets.resolve(&key_ref))
                    .await
                    .map_err(|_| ProviderError::Canceled)?;
                Some(resolved.map_err(|source| ProviderError::Key { provider: route.provider.name.clone(), source })?)
            }
        };
        guard.secret.clone_from(&key);
        let prepared = upstream::prepare(&route, req, key.as_ref())?;
        let prepare = started.elapsed();
        let t = self.opts.timeouts;
        let deadline = started + Duration::from_millis(t.total);
        let mut attempt = 0u32;
        loop {
            let attempt_deadline = (Instant::now() + Duration::from_millis(t.first_byte)).min(deadline);
            let attempt_started = Instant::now();
            let outcome = tokio::select! {
                biased;
                () = ctx.cancel.cancelled() => return Err(ProviderError::Canceled),
                r = tokio::time::timeout_at(attempt_deadline, self.attempt(&prepared, deadline)) => {
                    r.unwrap_or(Err(ProviderError::Timeout(Duration::from_millis(t.first_byte), "waiting for the first byte")))
                }
            };
            guard.upstream_wait += attempt_started.elapsed();
            let err = match outcome {
                Ok((events, first)) => return Ok((route, events, first, prepare, Instant::now())),
                Err(err) => err,
            };
            let retry_in = match &err {
                ProviderError::Connect(_) => Some(None),
                ProviderError::Upstream { status, retry_after, .. } if retryable_status(*status) => match retry_after {
                    Some(after) if after.as_millis() > u128::from(self.opts.retry.max_retry_after) => None,
                    other => Some(*other),
                },
                _ => None,
            };
            let Some(retry_in) = retry_in.filter(|_| attempt < self.opts.retry.max_retries) else { return Err(err) };
            let delay = retry_in.unwrap_or_else(|| {
                backoff(Duration::from_millis(self.opts.retry.base_backoff), attempt, rand::random())
            });
            if Instant::now() + delay >= deadline {
                return Err(err);
            }
            tracing::info!(call = %ctx.id, attempt, error = %err, ?delay, "retrying upstream");
            attempt += 1;
            guard.retries = attempt;
            tokio::select! {
                biased;
                () = ctx.cancel.cancelled() => return Err(ProviderError::Canceled),
                () = tokio::time::sleep(delay) => {}
            }
            guard.upstream_wait += delay;
        }
    }

    /// One attempt: the response head, then the first event.
    async fn attempt(
        &self,
        prepared: &upstream::Prepared,
        deadline: Instant,
    ) -> Result<(EventStream, StreamEvent), ProviderError> {
        let resp = upstream::send(&self.http, prepared).await?;
        let idle = Duration::from_millis(self.opts.timeouts.idle);
        let mut events = EventStream::new(resp, prepared.kind, idle, deadline);
        match events.next().await {
            Some(Ok(StreamEvent::Error { error })) => Err(upstream::stream_error(&error)),
            Some(Ok(first)) => Ok((events, first)),
            Some(Err(e)) => Err(e),
            None => Err(ProviderError::Disconnected),
        }
    }
}

/// Finalises the call record exactly once: explicitly, or as canceled when dropped.
struct CallGuard {
    sink: Arc<dyn CallSink>,
    id: String,
    started: Instant,
    started_ms: i64,
    price: Option<crate::pricing::Price>,
    price_version: Option<String>,
    secret: Option<SecretString>,
    capture: bool,
    capture_limit: usize,
    request_bytes: usize,
    retries: u32,
    ttft: Option<Duration>,
    acc: Option<Accumulator>,
    request_body: Option<String>,
    /// Time spent waiting on the upstream (attempts and backoff) before the first event.
    upstream_wait: Duration,
    /// The upstream accepted the request (a 2xx head arrived).
    accepted: bool,
    done: bool,
}

impl CallGuard {
    fn capture_request(&mut self, body: &[u8]) {
        // The request body is written with the finish record (one write instead of two).
        if self.capture {
            let text = String::from_utf8_lossy(body);
            self.request_body = Some(self.cap(&text));
        }
    }

    fn cap(&self, text: &str) -> String {
        let secrets: Vec<&SecretString> = self.secret.iter().collect();
        let mut text = redact(text, &secrets);
        if text.len() > self.capture_limit {
            let mut end = self.capture_limit;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push_str("…[truncated]");
        }
        text
    }

    fn build_finish(&mut self, status: CallStatus, err: Option<&ProviderError>) -> CallFinish {
        self.done = true;
        let acc = self.acc.take().unwrap_or_default();
        let mut usage = acc.usage();
        // Estimate only what an upstream that accepted the request may bill; a call refused before
        // that cost nothing.
        let estimated = !acc.saw_usage() && self.accepted;
        if estimated {
            usage.output_tokens = usage.output_tokens.max(acc.estimated_output_tokens());
            usage.input_tokens = usage.input_tokens.max((self.request_bytes as u64).div_ceil(4));
        }
        let cost = self.price.as_ref().map(|p| crate::pricing::cost_micros(p, &usage));
        let (error_kind, error_message) = match (err, acc.error()) {
            (Some(e), _) => (Some(e.kind().to_owned()), Some(self.cap(&e.to_string()))),
            (None, Some(info)) => (Some(info.kind.as_str().to_owned()), Some(self.cap(&info.message))),
            (None, None) => (None, None),
        };
        let http_status = match (status, err) {
            (_, Some(e)) if status == CallStatus::Error && self.ttft.is_none() => Some(e.status()),
            (CallStatus::Canceled, _) => None,
            _ => Some(200),
        };
        let response_body = (self.capture && (status != CallStatus::Error || self.ttft.is_some()))
            .then(|| acc.finish(0))
            .and_then(|r| serde_json::to_string(&r).ok())
            .map(|t| self.cap(&t));
        CallFinish {
            id: self.id.clone(),
            finished_ms: now_ms(),
            status,
            http_status,
            usage,
            usage_estimated: estimated,
            cost_micros: cost,
            price_version: self.price.as_ref().and(self.price_version.clone()),
            ttft_ms: self.ttft.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            total_ms: i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX),
            retries: self.retries,
            error_kind,
            error_message,
            response_body,
            request_body: self.request_body.take(),
        }
    }

    async fn finalize(&mut self, status: CallStatus, err: Option<&ProviderError>) {
        if self.done {
            return;
        }
        let finish = self.build_finish(status, err);
        self.sink.finish(finish).await;
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if !self.done {
            // The client went away (or the engine is shutting down): the write is queued now;
            // nobody waits for its acknowledgement.
            let finish = self.build_finish(CallStatus::Canceled, None);
            drop(self.sink.finish(finish));
        }
    }
}

/// A started call's events. Dropping it cancels the upstream request and records the call as
/// canceled.
pub struct CallStream {
    events: EventStream,
    first: Option<StreamEvent>,
    guard: CallGuard,
    timings: Timings,
    route: Route,
    error: Option<ProviderError>,
    cancel: CancellationToken,
}

impl std::fmt::Debug for CallStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallStream").field("id", &self.guard.id).finish_non_exhaustive()
    }
}

impl CallStream {
    pub fn timings(&self) -> Timings {
        self.timings
    }

    pub fn route(&self) -> &Route {
        &self.route
    }

    /// The next event. A mid-stream failure comes out as one [`StreamEvent::Error`]; after the
    /// last event the record is finalised (and durable) before `None` is returned. Cancel-safe.
    pub async fn next(&mut self) -> Option<StreamEvent> {
        if self.guard.done {
            return None;
        }
        let next = match self.first.take() {
            Some(first) => Some(Ok(first)),
            None => tokio::select! {
                biased;
                () = self.cancel.cancelled() => Some(Err(ProviderError::Canceled)),
                next = self.events.next() => next,
            },
        };
        let next = next.map(|r| match r {
            Ok(StreamEvent::Error { mut error }) => {
                let secrets: Vec<&SecretString> = self.guard.secret.iter().collect();
                error.message = redact(&error.message, &secrets);
                Ok(StreamEvent::Error { error })
            }
            Ok(ev) => Ok(ev),
            Err(e) => Err(e.redacted(self.guard.secret.as_ref())),
        });
        match next {
            Some(Ok(ev)) => {
                self.timings.last_event = Instant::now();
                if self.guard.ttft.is_none() && is_content(&ev) {
                    self.guard.ttft = Some(self.guard.started.elapsed());
                }
                if let Some(acc) = self.guard.acc.as_mut() {
                    acc.push(&ev);
                }
                if let StreamEvent::Error { .. } = ev {
                    self.guard.finalize(CallStatus::Error, None).await;
                }
                Some(ev)
            }
            Some(Err(ProviderError::Canceled)) => {
                let error = model::ErrorInfo {
                    kind: model::ErrorKind::Overloaded,
                    message: "Keyhaven is shutting down".into(),
                };
                self.guard.finalize(CallStatus::Canceled, None).await;
                Some(StreamEvent::Error { error })
            }
            Some(Err(err)) => {
                let ev = StreamEvent::Error { error: err.info() };
                if let Some(acc) = self.guard.acc.as_mut() {
                    acc.push(&ev);
                }
                self.guard.finalize(CallStatus::Error, Some(&err)).await;
                self.error = Some(err);
                Some(ev)
            }
            None => {
                self.guard.finalize(CallStatus::Ok, None).await;
                None
            }
        }
    }

    /// Reads the whole answer (non-streaming clients), with the final timings. A failure before
    /// the end is an error, since nothing has been sent to the client yet.
    pub async fn collect(mut self) -> (Result<model::Response, ProviderError>, Timings) {
        let mut acc = Accumulator::new();
        while let Some(ev) = self.next().await {
            if let StreamEvent::Error { error } = &ev {
                let err = self.error.take().unwrap_or_else(|| upstream::stream_error(error));
                return (Err(err), self.timings);
            }
            acc.push(&ev);
        }
        (Ok(acc.finish(now_ms())), self.timings)
    }
}

fn is_content(ev: &StreamEvent) -> bool {
    matches!(
        ev,
        StreamEvent::TextDelta { .. }
            | StreamEvent::ThinkingDelta { .. }
            | StreamEvent::ToolCallStart { .. }
            | StreamEvent::RedactedThinking { .. }
    )
}
