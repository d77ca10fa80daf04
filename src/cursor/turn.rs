//! The Cursor backend's entry: the run driver reads the transport's inbox in seqno order, takes
//! the `run_request`, resolves the model and hands the turn to [`crate::cursor::agent`] (the
//! agent loop with tools on the generic run engine), then ends the transport with exactly one
//! terminal.
//!
//! Invariant: every run ends with exactly one terminal: `turn_ended` followed by `{}`, or a
//! Connect error end-stream (no request, bad request, unknown model, provider error, an internal
//! failure, shutdown).

use std::sync::Arc;
use std::time::Duration;

use crate::cursor::agent::{self as agent_turn, AgentDeps, AgentOptions, TurnEnd};
use crate::cursor::conversation::Conversations;
use crate::cursor::protocol::agent::{self, agent_client_message};
use crate::cursor::protocol::aiserver::error_details::Error as CursorError;
use crate::cursor::protocol::connect::{self, Code, EndStream, ErrorBody};
use crate::cursor::protocol::events::{self, TurnUsage};
use crate::cursor::services::model_catalog;
use crate::cursor::transport::{Registry, RegistryError, RegistryOptions, Subscription, Transport};
use crate::model::{ErrorInfo, ErrorKind};
use crate::provider::Gateway;
use crate::store::Store;
use crate::task::Spawner;

/// Timing knobs of the backend.
#[derive(Debug, Clone, Copy)]
pub struct BackendOptions {
    pub registry: RegistryOptions,
    /// How long a transport waits for its first message (seqno 0) before it gives up.
    pub first_message_wait: Duration,
    /// How long a finished transport stays registered (late appends, re-subscribers).
    pub linger: Duration,
    pub agent: AgentOptions,
}

impl Default for BackendOptions {
    fn default() -> BackendOptions {
        BackendOptions {
            registry: RegistryOptions::default(),
            first_message_wait: Duration::from_secs(60),
            linger: Duration::from_secs(30),
            agent: AgentOptions::default(),
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
    conversations: Conversations,
    search: std::sync::OnceLock<Arc<dyn crate::search::SearchProvider>>,
    fetcher: std::sync::OnceLock<Arc<dyn crate::search::PageFetcher>>,
}

impl Backend {
    /// `store` persists transcripts (and lets a restarted engine continue a conversation).
    pub fn new(
        gateway: Arc<Gateway>,
        store: Option<Arc<Store>>,
        spawner: Spawner,
        options: BackendOptions,
    ) -> Arc<Backend> {
        Arc::new(Backend {
            registry: Registry::new(options.registry),
            gateway,
            spawner,
            options,
            conversations: Conversations::new(store),
            search: std::sync::OnceLock::new(),
            fetcher: std::sync::OnceLock::new(),
        })
    }

    /// Installs the web search provider (once; `false` if one is installed already).
    pub fn set_search_provider(&self, provider: Arc<dyn crate::search::SearchProvider>) -> bool {
        self.search.set(provider).is_ok()
    }

    /// Installs the server-side page fetcher for `fetch_url` (once; `false` if one is installed
    /// already). Without one, pages are fetched by the editor.
    pub fn set_page_fetcher(&self, fetcher: Arc<dyn crate::search::PageFetcher>) -> bool {
        self.fetcher.set(fetcher).is_ok()
    }

    /// The installed web search provider, if any.
    pub fn search_provider(&self) -> Option<&Arc<dyn crate::search::SearchProvider>> {
        self.search.get()
    }

    /// The installed server-side page fetcher, if any (`None`: the editor fetches).
    pub fn page_fetcher(&self) -> Option<&Arc<dyn crate::search::PageFetcher>> {
        self.fetcher.get()
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
            r = tokio::time::timeout(self.options.first_message_wait, t.inbox.first(&is_run_request)) => r,
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
        let deps = AgentDeps {
            gateway: &self.gateway,
            conversations: &self.conversations,
            options: self.options.agent,
            search: self.search.get().cloned(),
            fetcher: self.fetcher.get().cloned(),
        };
        match agent_turn::run_turn(deps, t, run, model_name).await {
            TurnEnd::Ended(usage) => Terminal::Ended(usage),
            TurnEnd::Shutdown => Terminal::shutdown(),
            TurnEnd::Provider(e) => Terminal::provider(&e),
            TurnEnd::CheckpointRefused(detail) => Terminal::error(
                Code::InvalidArgument,
                CursorError::BadRequest,
                "Checkpoint refused",
                &format!("The conversation's checkpoint could not be restored: {detail}"),
                false,
            ),
            TurnEnd::Internal(detail) => {
                Terminal::error(Code::Internal, CursorError::Internal, "Keyhaven failed", &detail, false)
            }
        }
    }
}

/// Output tokens estimated for a delta: `ceil(chars / 4)`, at least 1.
pub fn estimate_tokens(text: &str) -> i32 {
    i32::try_from(text.chars().count().div_ceil(4).max(1)).unwrap_or(i32::MAX)
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
        let (code, kind, mut title, retryable) = provider_error(error.kind);
        if error.message.starts_with(crate::provider::BUDGET_MESSAGE_PREFIX) {
            // A spent Keyhaven budget, not the provider: the notice says so in the chat.
            title = "Keyhaven budget reached";
        }
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

/// Whether an append holds a `run_request` (a run may start at any seqno; see the inbox).
fn is_run_request(data: &[u8]) -> bool {
    matches!(
        connect::decode_message::<agent::AgentClientMessage>(data),
        Ok(agent::AgentClientMessage { message: Some(agent_client_message::Message::RunRequest(_)) })
    )
}
