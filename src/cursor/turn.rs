//! One streamed turn of the Cursor agent, end to end: the run driver reads the transport's inbox
//! in seqno order, takes the `run_request`, calls the provider through
//! [`crate::provider::Gateway::call`] (which records the call row, client `cursor`), and publishes
//! `thinking_delta` / `thinking_completed` / `text_delta` / `token_delta` updates, then
//! `turn_ended` with usage and the end-stream frame. A `cancel_action` stops the provider call;
//! a provider error ends the run with a Connect error frame carrying `aiserver.v1.ErrorDetails`.
//!
//! Invariant: every run ends with exactly one terminal: `turn_ended` followed by `{}`, or a
//! Connect error end-stream (no request, bad request, unknown model, provider error, shutdown).
//! Part 1 has no tools, checkpoints or conversation state: the provider sees the user message
//! (and a custom system prompt, if any) only.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::cursor::protocol::agent::{self, agent_client_message, conversation_action};
use crate::cursor::protocol::aiserver::error_details::Error as CursorError;
use crate::cursor::protocol::connect::{self, Code, EndStream, ErrorBody};
use crate::cursor::protocol::events::{self, TurnUsage};
use crate::cursor::services::model_catalog;
use crate::cursor::transport::{Registry, RegistryError, RegistryOptions, Subscription, Transport};
use crate::model::{self, ErrorInfo, ErrorKind, Message, Role, StreamEvent, Usage};
use crate::provider::{CallContext, Gateway};
use crate::task::Spawner;

/// Timing knobs of the backend.
#[derive(Debug, Clone, Copy)]
pub struct BackendOptions {
    pub registry: RegistryOptions,
    /// How long a transport waits for its first message (seqno 0) before it gives up.
    pub first_message_wait: Duration,
    /// How long a finished transport stays registered (late appends, re-subscribers).
    pub linger: Duration,
}

impl Default for BackendOptions {
    fn default() -> BackendOptions {
        BackendOptions {
            registry: RegistryOptions::default(),
            first_message_wait: Duration::from_secs(60),
            linger: Duration::from_secs(30),
        }
    }
}

/// The Cursor agent backend: the transport registry plus what a run needs.
#[derive(Debug)]
pub struct Backend {
    registry: Registry,
    gateway: Arc<Gateway>,
    spawner: Spawner,
    options: BackendOptions,
}

impl Backend {
    pub fn new(gateway: Arc<Gateway>, spawner: Spawner, options: BackendOptions) -> Arc<Backend> {
        Arc::new(Backend { registry: Registry::new(options.registry), gateway, spawner, options })
    }

    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The transport for `request_id`; a new one gets its run driver.
    pub fn transport(self: &Arc<Self>, request_id: &str) -> Result<Arc<Transport>, RegistryError> {
        let (t, created) = self.registry.get_or_create(request_id, self.spawner.root_token())?;
        if created {
            let backend = self.clone();
            let transport = t.clone();
            // The driver watches the transport's token (a child of the root) itself, so that a
            // shutdown still ends the run with a terminal frame.
            self.spawner.spawn_graceful(async move { backend.drive(transport).await });
        }
        Ok(t)
    }

    /// A reader of the transport's output, with idle heartbeats.
    pub fn subscribe(&self, t: &Transport) -> Subscription {
        output_subscription(t, self.options.registry.heartbeat)
    }

    async fn drive(self: Arc<Self>, t: Arc<Transport>) {
        let terminal = self.run(&t).await;
        t.inbox.close();
        match terminal {
            Terminal::Ended(usage) => {
                t.output.publish(events::frame(&events::turn_ended(usage), false));
                t.output.finish(connect::encode_end_stream(&EndStream::default()));
            }
            Terminal::Error(body) => {
                tracing::info!(request_id = %t.request_id, code = ?body.code, message = %body.message, "cursor run ended with an error");
                t.output.finish(connect::encode_end_stream(&EndStream { error: Some(body), ..EndStream::default() }));
            }
        }
        tokio::select! {
            () = t.cancel.cancelled() => {}
            () = tokio::time::sleep(self.options.linger) => {}
        }
        self.registry.remove(&t.request_id);
    }

    async fn run(&self, t: &Transport) -> Terminal {
        let first = tokio::select! {
            biased;
            () = t.cancel.cancelled() => return Terminal::shutdown(),
            r = tokio::time::timeout(self.options.first_message_wait, t.inbox.next()) => r,
        };
        let data = match first {
            Ok(Some((_, data))) => data,
            Ok(None) => return Terminal::shutdown(),
            Err(_) => {
                return Terminal::error(
                    Code::DeadlineExceeded,
                    CursorError::Timeout,
                    "No request",
                    "no run request arrived for this stream",
                    false,
                );
            }
        };
        let run = match connect::decode_message::<agent::AgentClientMessage>(&data) {
            Ok(agent::AgentClientMessage { message: Some(agent_client_message::Message::RunRequest(run)) }) => run,
            Ok(_) => {
                return Terminal::error(
                    Code::InvalidArgument,
                    CursorError::BadRequest,
                    "Bad request",
                    "the first message of a run must be a run_request",
                    false,
                );
            }
            Err(e) => {
                return Terminal::error(
                    Code::InvalidArgument,
                    CursorError::BadRequest,
                    "Bad request",
                    &format!("the run request does not decode: {e}"),
                    false,
                );
            }
        };
        self.turn(t, run).await
    }

    async fn turn(&self, t: &Transport, run: agent::AgentRunRequest) -> Terminal {
        let catalog = self.gateway.catalog();
        let selection = model_catalog::requested_model(&run).unwrap_or_default().to_owned();
        let Some(model_name) = model_catalog::resolve(&catalog, &selection) else {
            let detail = format!("`{selection}` is not one of the models configured in Keyhaven");
            return Terminal::error(Code::NotFound, CursorError::BadModelName, "Unknown model", &detail, false);
        };
        let user = match run.action.and_then(|a| a.action) {
            Some(conversation_action::Action::UserMessageAction(a)) => {
                a.user_message.map(|m| m.text).unwrap_or_default()
            }
            // Resume with no local conversation state: nothing to continue (part 1).
            _ => return Terminal::Ended(TurnUsage::default()),
        };
        let mut messages = Vec::new();
        if let Some(system) = run.custom_system_prompt.filter(|s| !s.is_empty()) {
            messages.push(Message::text(Role::System, system));
        }
        messages.push(Message::text(Role::User, user));
        let req = model::Request { model: model_name, messages, stream: true, ..model::Request::default() };
        let cancel = t.cancel.child_token();
        let ctx = CallContext {
            id: format!("kh-cursor-{:016x}", rand::random::<u64>()),
            dialect: "cursor",
            client: "cursor".to_owned(),
            request_body: None,
            cancel: cancel.clone(),
        };
        let open = self.gateway.call(req, ctx);
        tokio::pin!(open);
        let opened = loop {
            tokio::select! {
                biased;
                () = t.cancel.cancelled() => return Terminal::shutdown(),
                m = t.inbox.next() => if client_cancels(m) {
                    return Terminal::Ended(TurnUsage::default());
                },
                r = &mut open => break r,
            }
        };
        let mut call = match opened {
            Ok(call) => call,
            Err(f) => return Terminal::provider(&f.error.info()),
        };
        let mut usage: Option<Usage> = None;
        let mut output_estimate: i64 = 0;
        let mut thinking_since: Option<Instant> = None;
        loop {
            let ev = tokio::select! {
                biased;
                () = t.cancel.cancelled() => {
                    cancel.cancel();
                    return Terminal::shutdown();
                }
                m = t.inbox.next() => {
                    if client_cancels(m) {
                        cancel.cancel();
                        drop(call);
                        return Terminal::Ended(turn_usage(usage, output_estimate));
                    }
                    continue;
                }
                ev = call.next() => ev,
            };
            let Some(ev) = ev else { break };
            match ev {
                StreamEvent::ThinkingDelta { text } if !text.is_empty() => {
                    thinking_since.get_or_insert_with(Instant::now);
                    self.emit(t, &events::thinking_delta(&text));
                    output_estimate += self.token_delta(t, &text);
                }
                StreamEvent::TextDelta { text } if !text.is_empty() => {
                    close_thinking(self, t, &mut thinking_since);
                    self.emit(t, &events::text_delta(&text));
                    output_estimate += self.token_delta(t, &text);
                }
                StreamEvent::Usage { usage: u } => usage.get_or_insert_with(Usage::default).merge_max(&u),
                StreamEvent::Error { error } => return Terminal::provider(&error),
                _ => {}
            }
        }
        close_thinking(self, t, &mut thinking_since);
        Terminal::Ended(turn_usage(usage, output_estimate))
    }

    fn emit(&self, t: &Transport, message: &agent::AgentServerMessage) {
        t.output.publish(events::frame(message, false));
    }

    /// Publishes a `token_delta` for `text` (an estimate: a quarter of its characters, at least
    /// one) and returns the estimate.
    fn token_delta(&self, t: &Transport, text: &str) -> i64 {
        let tokens = estimate_tokens(text);
        self.emit(t, &events::token_delta(tokens));
        i64::from(tokens)
    }
}

/// Output tokens estimated for a delta: `ceil(chars / 4)`, at least 1.
pub fn estimate_tokens(text: &str) -> i32 {
    i32::try_from(text.chars().count().div_ceil(4).max(1)).unwrap_or(i32::MAX)
}

fn close_thinking(backend: &Backend, t: &Transport, since: &mut Option<Instant>) {
    if let Some(started) = since.take() {
        let ms = i32::try_from(started.elapsed().as_millis()).unwrap_or(i32::MAX);
        backend.emit(t, &events::thinking_completed(ms));
    }
}

/// Reads a client message that arrived during a run: true when it cancels the run. Heartbeats and
/// messages later parts handle (exec results, KV acks) are ignored; a closed inbox never cancels.
fn client_cancels(m: Option<(u64, Bytes)>) -> bool {
    let Some((seqno, data)) = m else { return false };
    match connect::decode_message::<agent::AgentClientMessage>(&data) {
        Ok(agent::AgentClientMessage {
            message:
                Some(agent_client_message::Message::ConversationAction(agent::ConversationAction {
                    action: Some(conversation_action::Action::CancelAction(c)),
                    ..
                })),
        }) => {
            tracing::info!(seqno, reason = %c.reason, "cursor run canceled by the client");
            true
        }
        Ok(_) => false,
        Err(e) => {
            tracing::debug!(seqno, error = %e, "undecodable client message ignored");
            false
        }
    }
}

/// `turn_ended`'s numbers: the provider's usage when it came (disjoint input, cache reads and
/// writes, output), else the output estimate only.
fn turn_usage(usage: Option<Usage>, output_estimate: i64) -> TurnUsage {
    let n = |v: u64| Some(i64::try_from(v).unwrap_or(i64::MAX));
    match usage {
        Some(u) => TurnUsage {
            input_tokens: n(u.input_tokens),
            output_tokens: n(u.output_tokens),
            cache_read_tokens: n(u.cache_read_tokens),
            cache_write_tokens: n(u.cache_write_tokens),
        },
        None if output_estimate > 0 => TurnUsage { output_tokens: Some(output_estimate), ..TurnUsage::default() },
        None => TurnUsage::default(),
    }
}

/// How a run ends.
#[derive(Debug)]
enum Terminal {
    Ended(TurnUsage),
    Error(ErrorBody),
}

impl Terminal {
    fn error(code: Code, kind: CursorError, title: &str, detail: &str, retryable: bool) -> Terminal {
        Terminal::Error(ErrorBody::cursor(code, kind, title, detail, retryable))
    }

    fn shutdown() -> Terminal {
        Terminal::error(
            Code::Unavailable,
            CursorError::Internal,
            "Keyhaven stopped",
            "Keyhaven is shutting down",
            false,
        )
    }

    /// A provider failure as a readable Cursor error.
    fn provider(error: &ErrorInfo) -> Terminal {
        let (code, kind, title, retryable) = provider_error(error.kind);
        Terminal::error(code, kind, title, &format!("{title}: {}", error.message), retryable)
    }
}

/// The Connect code, Cursor error kind, title and retryable flag for a provider error kind. A
/// rejected provider key never maps to Cursor's own login errors.
pub fn provider_error(kind: ErrorKind) -> (Code, CursorError, &'static str, bool) {
    match kind {
        ErrorKind::NotFound => (Code::NotFound, CursorError::BadModelName, "Model not found at the provider", false),
        ErrorKind::Authentication | ErrorKind::PermissionDenied => {
            (Code::FailedPrecondition, CursorError::BadUserApiKey, "The provider rejected Keyhaven's key", false)
        }
        ErrorKind::RateLimited => {
            (Code::ResourceExhausted, CursorError::RateLimited, "The provider is rate limiting", false)
        }
        ErrorKind::Timeout => (Code::DeadlineExceeded, CursorError::Timeout, "The provider timed out", false),
        ErrorKind::InvalidRequest | ErrorKind::RequestTooLarge => {
            (Code::InvalidArgument, CursorError::BadRequest, "The provider refused the request", false)
        }
        ErrorKind::Overloaded | ErrorKind::Upstream | ErrorKind::Internal => {
            (Code::Unavailable, CursorError::ProviderError, "Provider error", false)
        }
    }
}

/// A subscription on a transport's output, with the server heartbeat frame.
pub fn output_subscription(t: &Transport, heartbeat: Duration) -> Subscription {
    t.output.subscribe(heartbeat, events::frame(&events::heartbeat(), false))
}
