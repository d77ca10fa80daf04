//! One gateway call from resolved request to finished record: route, record start, attempts with
//! retries before the first byte, then a stream of canonical events that finalises the record on
//! every exit path (including being dropped when the client goes away).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use secrecy::SecretString;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{RetryConfig, RoutingConfig, TimeoutConfig};
use crate::model::{self, Accumulator, CallFinish, CallStart, CallStatus, StreamEvent};
use crate::provider::budget::{self, Budgets, Decision, Reservation, SpendKey};
use crate::provider::emulation::{self, Emulator, Finish};
use crate::provider::error::ProviderError;
use crate::provider::health::{HealthBook, ProviderHealth};
use crate::provider::lingma;
use crate::provider::memory::ReasoningMemory;
use crate::provider::retry::backoff;
use crate::provider::upstream::{self, EventStream};
use crate::provider::{CallSink, Catalog, Route};
use crate::secrets::{BoundKey, Secrets, redact};

#[derive(Debug, Clone)]
pub struct GatewayOptions {
    pub timeouts: TimeoutConfig,
    pub retry: RetryConfig,
    pub routing: RoutingConfig,
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
    /// The front end's conversation and request, recorded on the call row (e.g. Cursor's
    /// conversation id and agent stream request id).
    pub conversation_id: Option<String>,
    pub request_id: Option<String>,
    /// The client's own session (Claude Code's `X-Claude-Code-Session-Id`, Codex's `session_id`
    /// header), recorded on the call row.
    pub session_id: Option<String>,
}

/// A call that failed before anything reached the client (its record is already finalised).
#[derive(Debug)]
pub struct CallFailure {
    pub error: ProviderError,
    /// Time spent waiting on the upstream, so the overhead header can exclude it.
    pub upstream_wait: Duration,
    /// Upstream attempts made, over all models tried.
    pub attempts: u32,
    /// Models of a group that were skipped (failed, or cooling down), in order.
    pub fallbacks: Vec<String>,
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
    /// Time spent waiting for the in-flight record to commit after the upstream answered (engine
    /// time: it delays the client's first byte).
    pub record_wait: Duration,
    pub retries: u32,
}

impl Timings {
    /// Time the call spent waiting on the upstream, up to the latest event.
    pub fn upstream_wait(&self) -> Duration {
        self.last_event.duration_since(self.started).saturating_sub(self.prepare + self.record_wait)
    }
}

pub struct Gateway {
    http: reqwest::Client,
    catalog: RwLock<Arc<Catalog>>,
    secrets: Secrets,
    sink: Arc<dyn CallSink>,
    opts: GatewayOptions,
    health: HealthBook,
    /// Connections to local Lingma assistants (the `lingma` kind).
    lingma: Arc<lingma::Registry>,
    /// Reasoning before each tool call, for replays that lost it (`provider::memory`).
    memory: Arc<ReasoningMemory>,
    /// Spend per budget (`provider::budget`), checked when a call starts.
    budgets: Arc<Budgets>,
}

/// What a successful open hands to the [`CallStream`].
struct Opened {
    route: Route,
    events: EventStream,
    first: StreamEvent,
    prepare: Duration,
    first_event: Instant,
    emulated: Option<EmulatedSetup>,
}

/// What an emulated call needs for its corrective retry.
struct EmulatedSetup {
    /// The request as the upstream saw it (contract in the system prompt).
    request: model::Request,
    /// The tools the contract names.
    tool_names: Vec<String>,
    key: Option<BoundKey>,
    timeouts: TimeoutConfig,
    deadline: Instant,
}

/// The status a call that ended with `err` is recorded with: canceled (the client went away, a
/// newer request superseded it, shutdown) is not an error.
fn failed_status(err: &ProviderError) -> CallStatus {
    if matches!(err, ProviderError::Canceled) { CallStatus::Canceled } else { CallStatus::Error }
}

/// Whether a failed model of a group may hand the request to the next one: the same
/// classification as retries ([`ProviderError::not_processed`]: connect errors, 429, 5xx), never
/// a timeout after sending or a lost answer.
fn may_fall_back(err: &ProviderError) -> bool {
    err.not_processed()
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").field("opts", &self.opts).finish_non_exhaustive()
    }
}

mod count;
mod fim;

pub use count::{CountRequest, TokenCount};
pub use fim::{FimStream, fim_url, row_dialect};

impl Gateway {
    pub fn new(catalog: Catalog, secrets: Secrets, sink: Arc<dyn CallSink>, opts: GatewayOptions) -> Gateway {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(opts.timeouts.connect))
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_nodelay(true)
            .user_agent(concat!("keyhaven/", env!("CARGO_PKG_VERSION")))
            // A request carries the key and the body: a redirect is an error (`upstream::send`),
            // never followed (reqwest keeps `x-api-key` on a cross-origin redirect).
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        let health = HealthBook::new(opts.routing);
        Gateway {
            http,
            catalog: RwLock::new(Arc::new(catalog)),
            secrets,
            sink,
            opts,
            health,
            lingma: Arc::new(lingma::Registry::default()),
            memory: Arc::new(ReasoningMemory::default()),
            budgets: Arc::new(Budgets::default()),
        }
    }

    /// The budgets (configured by `app` at start and by control when they change).
    pub fn budgets(&self) -> &Arc<Budgets> {
        &self.budgets
    }

    /// Applies the budgets to a new call: `Ok(Some(to))` when it is downgraded to `to` (the
    /// request's model is replaced), `Err` when a `refuse` budget is spent. A conversation that
    /// started downgraded stays on its cheaper model; one under way is never switched.
    fn apply_budgets(
        &self,
        req: &mut model::Request,
        ctx: &CallContext,
        catalog: &Catalog,
    ) -> Result<Option<String>, ProviderError> {
        let now = crate::clock::now_ms();
        let new = budget::is_new_conversation(req);
        let refuse_for = |model: &str, conversation: u64| -> Result<(), ProviderError> {
            let route = catalog.candidates(model).into_iter().next();
            let key = spend_key(&ctx.client, model, route.as_ref());
            match self.budgets.check(&key, Some(conversation), now) {
                Decision::Refuse { budget, reset_ms } => Err(self.refusal(budget, reset_ms, now)),
                _ => Ok(()),
            }
        };
        if !new && self.budgets.any_downgraded() {
            let digest = budget::conversation_digest(&req.model, req);
            if let Some(to) = self.budgets.downgraded(digest) {
                refuse_for(&to, digest)?;
                req.model.clone_from(&to);
                return Ok(Some(to));
            }
        }
        let route = catalog.candidates(&req.model).into_iter().next();
        let key = spend_key(&ctx.client, &req.model, route.as_ref());
        match self.budgets.check(&key, (!new).then_some(0), now) {
            Decision::Proceed => Ok(None),
            Decision::Refuse { budget, reset_ms } => Err(self.refusal(budget, reset_ms, now)),
            Decision::Downgrade { budget, to } => {
                let digest = budget::conversation_digest(&req.model, req);
                refuse_for(&to, digest)?;
                tracing::info!(call = %ctx.id, budget = %budget, from = %req.model, to = %to, "budget reached: new conversation downgraded");
                self.budgets.remember_downgrade(digest, &to);
                req.model.clone_from(&to);
                Ok(Some(to))
            }
        }
    }

    fn refusal(&self, budget: String, reset_ms: i64, now_ms: i64) -> ProviderError {
        let states = self.budgets.states(now_ms);
        let state = states.iter().find(|s| s.name == budget);
        let offset = time::UtcOffset::from_whole_seconds(self.budgets.offset_s()).unwrap_or(time::UtcOffset::UTC);
        let reset_at = time::OffsetDateTime::from_unix_timestamp(reset_ms.div_euclid(1000))
            .map(|t| t.to_offset(offset))
            .ok()
            .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
            .unwrap_or_default();
        ProviderError::BudgetExceeded {
            limit_usd: state.map_or(0.0, |s| s.limit_micros as f64 / 1e6),
            period: state.map_or("period", |s| s.period.as_str()),
            budget,
            reset_ms,
            reset_at,
        }
    }

    /// Every configured provider's health (cooldowns of the routing), sorted by name.
    /// Loads the reasoning memory persisted by an earlier process (see `provider::memory`).
    /// Returns how many tool calls were loaded.
    pub fn load_reasoning(&self, records: &[model::ReasoningRecord]) -> usize {
        self.memory.load(records, crate::clock::now_ms())
    }

    pub fn provider_health(&self) -> Vec<ProviderHealth> {
        self.health.snapshot(&self.catalog().provider_names(), Instant::now())
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
    pub async fn call(&self, mut req: model::Request, ctx: CallContext) -> Result<CallStream, CallFailure> {
        let started = Instant::now();
        let catalog = self.catalog();
        let asked_for = req.model.clone();
        let (refused, downgrade) = if self.budgets.is_empty() {
            (None, None)
        } else {
            match self.apply_budgets(&mut req, &ctx, &catalog) {
                Ok(to) => (None, to),
                Err(e) => (Some(e), None),
            }
        };
        let candidates = catalog.candidates(&req.model);
        let route = candidates.first().cloned();
        if let Some(r) = &route {
            let restored = self.memory.restore(&r.provider.name, &mut req, crate::clock::now_ms());
            if restored > 0 {
                tracing::debug!(call = %ctx.id, restored, "reasoning put back from the gateway's memory");
            }
        }
        let mut guard = CallGuard {
            sink: self.sink.clone(),
            id: ctx.id.clone(),
            started,
            started_ms: crate::clock::now_ms(),
            price: route.as_ref().and_then(|r| r.model.price),
            price_version: route.as_ref().and_then(|r| r.model.price_version.clone()),
            secret: None,
            capture: self.opts.capture_bodies,
            capture_limit: self.opts.body_capture_limit,
            request_bytes: ctx.request_body.as_ref().map_or(0, bytes::Bytes::len),
            retries: 0,
            ttft: None,
            acc: Some(Accumulator::new()),
            memory: self.memory.clone(),
            request_body: None,
            request: None,
            upstream_wait: Duration::ZERO,
            accepted: false,
            done: false,
            route: route.clone(),
            notes: Vec::new(),
            budget: None,
        };
        if refused.is_none() {
            let key = spend_key(&ctx.client, &req.model, route.as_ref());
            // The in-flight estimate: the request's input tokens counted with the engine's
            // tokenizer (`provider::tokens`, as for `cost_source`) at the model's price (only worth
            // computing when a budget can use it; today's spend needs none).
            let estimate = if self.budgets.is_empty() {
                0
            } else {
                let (family, _) = route.as_ref().map_or((crate::provider::tokens::Family::Openai, false), |r| {
                    crate::provider::tokens::model_tokenizer(
                        r.provider.kind == crate::config::ProviderKind::Anthropic,
                        &r.model.upstream,
                    )
                });
                let input = crate::provider::tokens::estimate(&req, family);
                let usage = model::Usage { input_tokens: input, ..model::Usage::default() };
                guard.price.as_ref().map_or(0, |p| u64::try_from(crate::pricing::cost_micros(p, &usage)).unwrap_or(0))
            };
            let reservation = self.budgets.reserve(&key, estimate, guard.started_ms);
            guard.budget = Some(BudgetHold {
                budgets: self.budgets.clone(),
                reservation,
                client: ctx.client.clone(),
                routed: req.model.clone(),
            });
        }
        let started_ack = self.sink.start(CallStart {
            id: ctx.id.clone(),
            started_ms: guard.started_ms,
            dialect: ctx.dialect.to_owned(),
            client: ctx.client.clone(),
            model: asked_for,
            model_id: route.as_ref().map(|r| r.model.id.clone()),
            provider: route.as_ref().map(|r| r.provider.name.clone()),
            upstream_model: route.as_ref().map(|r| r.model.upstream.clone()),
            stream: req.stream,
            request_body: None,
            conversation_id: ctx.conversation_id.clone(),
            request_id: ctx.request_id.clone(),
            session_id: ctx.session_id.clone(),
            budget_downgrade: downgrade,
        });
        let mut fallbacks = Vec::new();
        let result = match refused {
            Some(err) => Err(err),
            None => self
                .open(candidates, &req, &ctx, &mut guard, started, &mut fallbacks)
                .await
                .map_err(|e| e.redacted(guard.secret.as_ref())),
        };
        // The in-flight row must be durable (journaled or committed) before the client sees a byte.
        let ack_from = Instant::now();
        started_ack.await;
        let record_wait = ack_from.elapsed();
        match result {
            Ok(opened) => {
                guard.accepted = true;
                let timings = Timings {
                    started,
                    prepare: opened.prepare,
                    first_event: opened.first_event,
                    last_event: opened.first_event,
                    record_wait,
                    retries: guard.retries,
                };
                let cancel = ctx.cancel.clone();
                let emu = opened.emulated.map(|setup| EmuState {
                    emulator: emulation::emulator_for(&req, &ctx.id),
                    setup,
                    http: self.http.clone(),
                    lingma: self.lingma.clone(),
                    queue: VecDeque::new(),
                    finished: false,
                    reopening: None,
                });
                guard.request = Some(req);
                let mut stream = CallStream {
                    events: opened.events,
                    first: Some(opened.first),
                    guard,
                    timings,
                    route: opened.route,
                    error: None,
                    pending_error: None,
                    cancel,
                    fallbacks,
                    emu,
                    skipped_seen: 0,
                };
                if let Some(body) = &ctx.request_body {
                    stream.guard.capture_request(body);
                }
                Ok(stream)
            }
            Err(err) => {
                if let Some(body) = &ctx.request_body {
                    guard.capture_request(body);
                }
                guard.request = Some(req);
                guard.finalize(failed_status(&err), Some(&err));
                Err(CallFailure {
                    error: err,
                    upstream_wait: guard.upstream_wait,
                    attempts: guard.retries + 1,
                    fallbacks,
                })
            }
        }
    }

    /// Tries the candidates in order (a group's models, or the one model). Models whose provider
    /// cools down are skipped unless all are; a model that fails with a connect error, 429 or 5xx
    /// before the first byte hands over to the next one. Every model but the last gets one
    /// attempt (the next model is the better retry); the last gets the configured retries.
    async fn open(
        &self,
        candidates: Vec<Route>,
        req: &model::Request,
        ctx: &CallContext,
        guard: &mut CallGuard,
        started: Instant,
        fallbacks: &mut Vec<String>,
    ) -> Result<Opened, ProviderError> {
        if candidates.is_empty() {
            return Err(ProviderError::UnknownModel(req.model.clone()));
        }
        let now = Instant::now();
        let (ready, cooling): (Vec<Route>, Vec<Route>) =
            candidates.iter().cloned().partition(|r| !self.health.cooling(&r.provider.name, now));
        let order = if ready.is_empty() {
            candidates
        } else {
            for r in &cooling {
                tracing::info!(call = %ctx.id, model = %r.model.name, provider = %r.provider.name, "skipping a model whose provider cools down");
                fallbacks.push(r.model.name.clone());
            }
            ready
        };
        let mut prepare = None;
        let count = order.len();
        for (i, route) in order.into_iter().enumerate() {
            let last = i + 1 == count;
            if i > 0 {
                guard.retries += 1;
            }
            guard.price = route.model.price;
            guard.price_version.clone_from(&route.model.price_version);
            guard.route = Some(route.clone());
            let max_retries = if last { self.opts.retry.max_retries } else { 0 };
            match self.open_one(&route, req, ctx, guard, started, max_retries, &mut prepare).await {
                Ok((events, first, emulated)) => {
                    self.health.success(&route.provider.name);
                    return Ok(Opened {
                        route,
                        events,
                        first,
                        prepare: prepare.unwrap_or_default(),
                        first_event: Instant::now(),
                        emulated,
                    });
                }
                Err(err) if !last && may_fall_back(&err) => {
                    tracing::info!(call = %ctx.id, model = %route.model.name, error = %err, "falling back to the next model of the group");
                    fallbacks.push(route.model.name.clone());
                }
                Err(err) => return Err(err),
            }
        }
        Err(ProviderError::UnknownModel(req.model.clone()))
    }

    /// One model: its key, the request in its shape (emulated tools or not), then attempts with
    /// retries before the first byte.
    #[expect(clippy::too_many_arguments, reason = "one call's state, threaded through")]
    async fn open_one(
        &self,
        route: &Route,
        req: &model::Request,
        ctx: &CallContext,
        guard: &mut CallGuard,
        started: Instant,
        max_retries: u32,
        prepare_time: &mut Option<Duration>,
    ) -> Result<(EventStream, StreamEvent, Option<EmulatedSetup>), ProviderError> {
        let key = self.key_for(route).await?;
        guard.secret = key.as_ref().map(|k| k.redaction().clone());
        let emulated_req = emulation::applies(&route.model, req).then(|| emulation::rewrite(req));
        guard.notes = upstream::left_out(route.provider.kind, req);
        let prepared = upstream::prepare(route, emulated_req.as_ref().unwrap_or(req), key.as_ref())?;
        if prepare_time.is_none() {
            *prepare_time = Some(started.elapsed());
        }
        let t = self.opts.timeouts.with(&route.model.timeouts);
        let deadline = started + Duration::from_millis(t.total);
        let mut attempt = 0u32;
        loop {
            let attempt_deadline = (Instant::now() + Duration::from_millis(t.first_byte)).min(deadline);
            let attempt_started = Instant::now();
            let outcome = tokio::select! {
                biased;
                () = ctx.cancel.cancelled() => return Err(ProviderError::Canceled),
                r = tokio::time::timeout_at(attempt_deadline, self.attempt(&prepared, t.idle, deadline)) => {
                    r.unwrap_or(Err(ProviderError::Timeout(Duration::from_millis(t.first_byte), "waiting for the first byte")))
                }
            };
            guard.upstream_wait += attempt_started.elapsed();
            let err = match outcome {
                Ok((events, first)) => {
                    let emulated = emulated_req.map(|request| EmulatedSetup {
                        request,
                        tool_names: emulation::effective_tools(req).into_iter().map(|t| t.name).collect(),
                        key: key.clone(),
                        timeouts: t,
                        deadline,
                    });
                    return Ok((events, first, emulated));
                }
                // Redacted here, before anything logs it (retries, fallbacks, health).
                Err(err) => err.redacted(key.as_ref().map(BoundKey::redaction)),
            };
            if may_fall_back(&err) {
                let secrets: Vec<&SecretString> = key.iter().map(BoundKey::redaction).collect();
                self.health.failure(&route.provider.name, &redact(&err.to_string(), &secrets), Instant::now());
            }
            let retry_in = match &err {
                _ if !err.not_processed() => None,
                ProviderError::Upstream { retry_after, .. } => match retry_after {
                    Some(after) if after.as_millis() > u128::from(self.opts.retry.max_retry_after) => None,
                    other => Some(*other),
                },
                _ => Some(None),
            };
            let Some(retry_in) = retry_in.filter(|_| attempt < max_retries) else { return Err(err) };
            let delay = retry_in.unwrap_or_else(|| {
                backoff(Duration::from_millis(self.opts.retry.base_backoff), attempt, rand::random())
            });
            if Instant::now() + delay >= deadline {
                return Err(err);
            }
            tracing::info!(call = %ctx.id, attempt, error = %err, ?delay, "retrying upstream");
            attempt += 1;
            guard.retries += 1;
            tokio::select! {
                biased;
                () = ctx.cancel.cancelled() => return Err(ProviderError::Canceled),
                () = tokio::time::sleep(delay) => {}
            }
            guard.upstream_wait += delay;
        }
    }

    /// The provider's key, bound to the origins it may go to (checked again where it is attached).
    async fn key_for(&self, route: &Route) -> Result<Option<BoundKey>, ProviderError> {
        let Some(key_ref) = &route.provider.key else { return Ok(None) };
        let resolved = match self.secrets.cached(key_ref) {
            Some(key) => Ok(key),
            None => {
                // The first use may ask the OS keyring (D-Bus, Keychain): off the runtime.
                let secrets = self.secrets.clone();
                let key_ref = key_ref.clone();
                let origin = route.provider.base_url.clone();
                tokio::task::spawn_blocking(move || secrets.resolve(&key_ref, &origin))
                    .await
                    .map_err(|_| ProviderError::Canceled)?
            }
        };
        resolved.map(Some).map_err(|source| ProviderError::Key { provider: route.provider.name.clone(), source })
    }

    /// One attempt: the response head, then the first event.
    async fn attempt(
        &self,
        prepared: &upstream::Prepared,
        idle_ms: u64,
        deadline: Instant,
    ) -> Result<(EventStream, StreamEvent), ProviderError> {
        let idle = Duration::from_millis(idle_ms);
        let mut events = upstream::open(&self.http, &self.lingma, prepared, idle, deadline).await?;
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
    memory: Arc<ReasoningMemory>,
    request_body: Option<String>,
    /// The request, kept for a local count of its tokens when the provider reports no usage.
    request: Option<model::Request>,
    /// Time spent waiting on the upstream (attempts and backoff) before the first event.
    upstream_wait: Duration,
    /// The upstream accepted the request (a 2xx head arrived).
    accepted: bool,
    done: bool,
    /// The model that served the call (or the last one tried).
    route: Option<Route>,
    /// What the row notes about the call (server tools the serving upstream cannot run).
    notes: Vec<String>,
    /// The call's in-flight estimate against the budgets, settled at finish.
    budget: Option<BudgetHold>,
}

/// A call's estimate held against the budgets until it finishes.
struct BudgetHold {
    budgets: Arc<Budgets>,
    reservation: Reservation,
    client: String,
    /// The model or group the call was routed as.
    routed: String,
}

/// What a call is, for matching budgets: its client, its first (or serving) route's provider and
/// model, and the name it was routed as.
fn spend_key<'a>(client: &'a str, requested: &'a str, route: Option<&'a Route>) -> SpendKey<'a> {
    SpendKey {
        client,
        provider: route.map(|r| r.provider.name.as_str()),
        requested,
        model: route.map(|r| r.model.name.as_str()),
    }
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
        let acc_error = acc.error().cloned();
        let full = acc.finish(0);
        let cost_source = if estimated {
            // Counted with the engine's tokenizer (`provider::tokens`); the model's own for
            // o200k models, an approximation otherwise. Only a complete answer is "computed".
            let (family, own) = self.route.as_ref().map_or((crate::provider::tokens::Family::Openai, false), |r| {
                crate::provider::tokens::model_tokenizer(
                    r.provider.kind == crate::config::ProviderKind::Anthropic,
                    &r.model.upstream,
                )
            });
            let input = match &self.request {
                Some(req) => crate::provider::tokens::estimate(req, family),
                None => (self.request_bytes as u64).div_ceil(4),
            };
            usage.input_tokens = usage.input_tokens.max(input);
            usage.output_tokens =
                usage.output_tokens.max(crate::provider::tokens::output_tokens(&full.content, family));
            let complete = status == CallStatus::Ok && self.request.is_some();
            Some(if own && complete { model::CostSource::Computed } else { model::CostSource::Estimated })
        } else if self.accepted {
            Some(model::CostSource::Reported)
        } else {
            None
        };
        self.request = None;
        let cost = self.price.as_ref().map(|p| crate::pricing::cost_micros(p, &usage));
        if let Some(hold) = self.budget.take() {
            let key = spend_key(&hold.client, &hold.routed, self.route.as_ref());
            hold.budgets.finish(hold.reservation, &key, cost.and_then(|c| u64::try_from(c).ok()).unwrap_or(0));
        }
        let (error_kind, error_message) = match (err, acc_error.as_ref()) {
            (Some(e), _) => (Some(e.kind().to_owned()), Some(self.cap(&e.to_string()))),
            (None, Some(info)) => (Some(info.kind.as_str().to_owned()), Some(self.cap(&info.message))),
            (None, None) => (None, None),
        };
        let http_status = match (status, err) {
            (_, Some(e)) if status == CallStatus::Error && self.ttft.is_none() => Some(e.status()),
            (CallStatus::Canceled, _) => None,
            _ => Some(200),
        };
        let capture = self.capture && (status != CallStatus::Error || self.ttft.is_some());
        let answer = (capture || status == CallStatus::Ok).then_some(full);
        if let (CallStatus::Ok, Some(answer), Some(route)) = (status, &answer, &self.route)
            && let Some(record) = self.memory.remember(&route.provider.name, &answer.content, crate::clock::now_ms())
        {
            drop(self.sink.reasoning(record));
        }
        let response_body =
            answer.filter(|_| capture).and_then(|r| serde_json::to_string(&r).ok()).map(|t| self.cap(&t));
        CallFinish {
            id: self.id.clone(),
            finished_ms: crate::clock::now_ms(),
            status,
            http_status,
            usage,
            usage_estimated: estimated,
            cost_micros: cost,
            price_version: self.price.as_ref().and(self.price_version.clone()),
            cost_source,
            ttft_ms: self.ttft.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            total_ms: i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX),
            retries: self.retries,
            error_kind,
            error_message,
            response_body,
            request_body: self.request_body.take(),
            model_id: self.route.as_ref().map(|r| r.model.id.clone()),
            provider: self.route.as_ref().map(|r| r.provider.name.clone()),
            upstream_model: self.route.as_ref().map(|r| r.model.upstream.clone()),
            notes: self.notes.clone(),
        }
    }

    fn finalize(&mut self, status: CallStatus, err: Option<&ProviderError>) {
        if self.done {
            return;
        }
        let finish = self.build_finish(status, err);
        // Queued now; not awaited: the commit must not delay the client's last byte. A crash in
        // the few milliseconds before it lands leaves the row in flight, and the next start marks
        // it interrupted, so the call is never lost.
        drop(self.sink.finish(finish));
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

/// The reopened upstream of an emulated call's corrective retry.
type Reopen = Pin<Box<dyn Future<Output = Result<EventStream, ProviderError>> + Send>>;

/// The emulation of one call: the reply parser and what its one retry needs.
struct EmuState {
    emulator: Emulator,
    setup: EmulatedSetup,
    http: reqwest::Client,
    lingma: Arc<lingma::Registry>,
    /// Events ready for the caller.
    queue: VecDeque<StreamEvent>,
    /// The emulator has emitted its last event.
    finished: bool,
    /// The corrective attempt being opened (kept here so `next` stays cancel-safe).
    reopening: Option<Reopen>,
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
    /// The error behind the next [`StreamEvent::Error`] delivered (for the record).
    pending_error: Option<ProviderError>,
    cancel: CancellationToken,
    fallbacks: Vec<String>,
    emu: Option<EmuState>,
    /// How many of the upstream's skipped block types are already noted on the row.
    skipped_seen: usize,
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

    /// The model and provider that serve the call.
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// Models of a group that were skipped before this one served the call, in order.
    pub fn fallbacks(&self) -> &[String] {
        &self.fallbacks
    }

    /// Whether the call's tools are emulated.
    pub fn emulated(&self) -> bool {
        self.emu.is_some()
    }

    /// The next upstream event (or failure), secrets redacted.
    async fn upstream_next(&mut self) -> Option<Result<StreamEvent, ProviderError>> {
        if let Some(first) = self.first.take() {
            return Some(Ok(first));
        }
        if let Some(reopen) = self.emu.as_mut().and_then(|e| e.reopening.as_mut()) {
            let opened = tokio::select! {
                biased;
                () = self.cancel.cancelled() => Err(ProviderError::Canceled),
                r = reopen => r,
            };
            if let Some(emu) = self.emu.as_mut() {
                emu.reopening = None;
            }
            match opened {
                Ok(events) => {
                    self.events = events;
                    self.skipped_seen = 0;
                }
                Err(e) => return Some(Err(e.redacted(self.guard.secret.as_ref()))),
            }
        }
        let next = tokio::select! {
            biased;
            () = self.cancel.cancelled() => Some(Err(ProviderError::Canceled)),
            next = self.events.next() => next,
        };
        // Blocks the upstream sent that the client cannot get (server tool calls and results)
        // are said on the call row; the text around them is delivered.
        let skipped = self.events.skipped_blocks();
        if skipped.len() > self.skipped_seen {
            for block in &skipped[self.skipped_seen..] {
                self.guard.notes.push(format!(
                    "upstream `{block}` block not forwarded: Keyhaven has no form for it (the answer's text is kept)"
                ));
            }
            self.skipped_seen = skipped.len();
        }
        next.map(|r| match r {
            Ok(StreamEvent::Error { mut error }) => {
                let secrets: Vec<&SecretString> = self.guard.secret.iter().collect();
                error.message = redact(&error.message, &secrets);
                Ok(StreamEvent::Error { error })
            }
            Ok(ev) => Ok(ev),
            Err(e) => Err(e.redacted(self.guard.secret.as_ref())),
        })
    }

    /// Hands one event to the caller: timings, the record's accumulator, and the final record
    /// when it is a terminal error.
    async fn deliver(&mut self, ev: StreamEvent) -> StreamEvent {
        self.timings.last_event = Instant::now();
        if self.guard.ttft.is_none() && is_content(&ev) {
            self.guard.ttft = Some(self.guard.started.elapsed());
        }
        if let Some(acc) = self.guard.acc.as_mut() {
            acc.push(&ev);
        }
        if let StreamEvent::Error { .. } = ev {
            let err = self.pending_error.take();
            self.guard.finalize(err.as_ref().map_or(CallStatus::Error, failed_status), err.as_ref());
            self.error = err;
        }
        ev
    }

    /// Starts the one corrective attempt of an emulated call.
    fn start_retry(&mut self, reason: &str, reply: &str) -> Result<(), ProviderError> {
        let Some(emu) = self.emu.as_mut() else { return Ok(()) };
        tracing::warn!(call = %self.guard.id, %reason, "emulated tool call broke the contract: one corrective retry");
        let req = emulation::corrective(&emu.setup.request, reply, reason, &emu.setup.tool_names);
        let prepared = upstream::prepare(&self.route, &req, emu.setup.key.as_ref())?;
        let http = emu.http.clone();
        let lingma = emu.lingma.clone();
        let t = emu.setup.timeouts;
        let deadline = emu.setup.deadline;
        let first_byte = (Instant::now() + Duration::from_millis(t.first_byte)).min(deadline);
        emu.emulator.restart();
        self.guard.retries += 1;
        emu.reopening = Some(Box::pin(async move {
            let open = upstream::open(&http, &lingma, &prepared, Duration::from_millis(t.idle), deadline);
            tokio::time::timeout_at(first_byte, open).await.unwrap_or(Err(ProviderError::Timeout(
                Duration::from_millis(t.first_byte),
                "waiting for the first byte",
            )))
        }));
        Ok(())
    }

    /// The next event. A mid-stream failure comes out as one [`StreamEvent::Error`]; after the
    /// last event the record is finalised (and durable) before `None` is returned. Cancel-safe.
    pub async fn next(&mut self) -> Option<StreamEvent> {
        loop {
            if self.guard.done {
                return None;
            }
            if let Some(emu) = self.emu.as_mut() {
                if let Some(ev) = emu.queue.pop_front() {
                    return Some(self.deliver(ev).await);
                }
                if emu.finished {
                    self.guard.finalize(CallStatus::Ok, None);
                    return None;
                }
            }
            let next = self.upstream_next().await;
            if let Some(Err(ProviderError::Canceled)) = next {
                let error = model::ErrorInfo {
                    kind: model::ErrorKind::Overloaded,
                    message: "Keyhaven is shutting down".into(),
                };
                self.guard.finalize(CallStatus::Canceled, None);
                return Some(StreamEvent::Error { error });
            }
            let Some(emu) = self.emu.as_mut() else {
                return match next {
                    Some(Ok(ev)) => Some(self.deliver(ev).await),
                    Some(Err(err)) => {
                        let ev = StreamEvent::Error { error: err.info() };
                        self.pending_error = Some(err);
                        Some(self.deliver(ev).await)
                    }
                    None => {
                        self.guard.finalize(CallStatus::Ok, None);
                        None
                    }
                };
            };
            let mut out = Vec::new();
            match next {
                Some(Ok(ev)) => emu.emulator.push(ev, &mut out),
                Some(Err(err)) => {
                    emu.emulator.push(StreamEvent::Error { error: err.info() }, &mut out);
                    self.pending_error = Some(err);
                }
                None => match emu.emulator.finish(&mut out) {
                    Finish::Done => emu.finished = true,
                    Finish::Retry { reason, reply } => {
                        if let Err(err) = self.start_retry(&reason, &reply) {
                            let ev = StreamEvent::Error { error: err.info() };
                            self.pending_error = Some(err);
                            return Some(self.deliver(ev).await);
                        }
                    }
                },
            }
            if let Some(emu) = self.emu.as_mut() {
                emu.queue.extend(out);
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
        (Ok(acc.finish(crate::clock::now_ms())), self.timings)
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
