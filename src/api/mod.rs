//! HTTP entry points: the OpenAI- (Chat Completions and Responses) and Anthropic-compatible
//! gateway endpoints, and on the same listener the control API under `/api/` and the web UI at
//! `/` ([`control`]).
//!
//! Handlers are thin: decode with the inbound dialect, call [`crate::provider::Gateway`], encode.
//! Every request passes the local-endpoint [`guard`] (exact Host, Origin, JSON-only POST).
//! [`error::ApiError`] is the one place that maps an error to a status and a body in the
//! caller's dialect.

mod clients;
pub mod control;
mod conversations;
mod count;
pub mod cursor;
mod error;
mod gateway;
mod guard;
mod inbound;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

pub use clients::{ClientDirectory, NoClients};
pub use conversations::Conversations;
pub use error::ApiError;
pub use guard::GuardConfig;
pub use inbound::Inbound;

use crate::provider::Gateway;

/// Shared state of the gateway router.
#[derive(Clone, Debug)]
pub struct ApiState {
    pub gateway: Arc<Gateway>,
    pub guard: Arc<GuardConfig>,
    pub max_request_bytes: usize,
    /// Cancelled at engine shutdown; every call takes a child token.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Finished Responses conversations, for `previous_response_id` (memory only).
    pub conversations: Arc<Conversations>,
    /// Client tokens issued by `keyhaven setup`.
    pub clients: Arc<dyn ClientDirectory>,
    /// Refuse calls that present no known client token.
    pub require_client_token: bool,
    /// The control API and web UI; `None`: neither is served.
    pub control: Option<control::ControlApi>,
    /// Prometheus metrics (`GET /metrics`, guarded like the control API, served with it).
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl std::fmt::Debug for dyn ClientDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientDirectory")
    }
}

/// The gateway router. Tests drive it with `oneshot` or a server on port 0.
pub fn router(state: ApiState) -> Router {
    let guard = state.guard.clone();
    let tokens = clients::TokenGate { clients: state.clients.clone(), required: state.require_client_token };
    // Every `/v1` route checks the client token; `/health` spends nothing and reveals nothing.
    let v1 = Router::new()
        .route("/v1/chat/completions", post(gateway::chat_completions))
        .route("/v1/messages", post(gateway::messages))
        .route("/v1/messages/count_tokens", post(count::count_tokens))
        .route("/v1/responses", post(gateway::responses))
        .route("/v1/models", get(gateway::models))
        .route_layer(axum::middleware::from_fn_with_state(tokens, clients::gate));
    let mut app = v1
        .route("/health", get(gateway::health))
        .layer(axum::middleware::from_fn_with_state(guard.clone(), guard::check));
    let ui = control::ui::UiState {
        dir: state.control.as_ref().and_then(|c| c.ui_dir.clone()),
        sessions: state.control.as_ref().map(|c| c.sessions.clone()),
        guard: Arc::new(control::guard::ControlGuard::without_token(&guard)),
    };
    if let Some(c) = state.control.clone() {
        app = app.merge(control::router(c, guard, state.metrics.clone()));
    }
    app.fallback(move |req: axum::extract::Request| {
        let ui = ui.clone();
        async move { control::ui::serve(axum::extract::State(ui), req).await }
    })
    .with_state(state)
}
