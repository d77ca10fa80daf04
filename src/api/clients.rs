//! Which client made a call: a Keyhaven client token (issued by `keyhaven setup`) presented as
//! `Authorization: Bearer kh-…` or `x-api-key: kh-…` names it; otherwise the User-Agent does.
//! When the gateway requires tokens, a call without a known token is refused.

use axum::http::{HeaderMap, header};

/// Maps a presented client token to the client's name. Implemented by `app` over the setup
/// module's token registry; lookups must not block (the implementation caches).
pub trait ClientDirectory: Send + Sync {
    fn client_for(&self, token: &str) -> Option<String>;
}

/// A directory with no tokens.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoClients;

impl ClientDirectory for NoClients {
    fn client_for(&self, _: &str) -> Option<String> {
        None
    }
}

/// The token a request presents, if any.
pub fn presented_token(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
    bearer.or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok())).map(str::trim)
}

/// The headers a client names its own session with, in the order they are read: Claude Code's
/// `X-Claude-Code-Session-Id`; the Codex CLI's `session_id` (and `conversation_id`, which older
/// Codex releases sent with the same value).
const SESSION_HEADERS: [&str; 3] = ["x-claude-code-session-id", "session_id", "conversation_id"];
/// The longest session id recorded (client ids are UUIDs; anything longer is not one).
const MAX_SESSION_CHARS: usize = 128;

/// The client's own session id for the call record, when it sent one: printable ASCII without
/// spaces, at most [`MAX_SESSION_CHARS`] characters; anything else is ignored.
pub fn session(headers: &HeaderMap) -> Option<String> {
    SESSION_HEADERS.iter().find_map(|name| {
        let v = headers.get(*name)?.to_str().ok()?.trim();
        let ok = !v.is_empty() && v.len() <= MAX_SESSION_CHARS && v.bytes().all(|b| b.is_ascii_graphic());
        ok.then(|| v.to_owned())
    })
}

/// The client name for the call record: the token's client, else the User-Agent.
pub fn identify(directory: &dyn ClientDirectory, headers: &HeaderMap) -> (Option<String>, String) {
    let by_token = presented_token(headers).and_then(|t| directory.client_for(t));
    let ua = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("unknown");
    let name = by_token.clone().unwrap_or_else(|| ua.chars().take(120).collect());
    (by_token, name)
}

/// The client-token gate in front of every `/v1` route (`server.require_client_token`): a call
/// that spends money or reveals the catalog (`/v1/messages/count_tokens` calls the provider,
/// `/v1/models` lists what the user pays for) needs a known token like the model calls do.
#[derive(Clone)]
pub struct TokenGate {
    pub clients: std::sync::Arc<dyn ClientDirectory>,
    pub required: bool,
}

/// The answer to a call without a known client token, in the caller's dialect.
pub fn token_required(path: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    let msg = "this gateway requires a Keyhaven client token (see `keyhaven setup`)";
    crate::api::ApiError::new(crate::api::Inbound::for_path(path), crate::model::ErrorKind::Authentication, msg)
        .into_response()
}

/// Middleware: refuses a `/v1` call without a known client token when tokens are required.
pub async fn gate(
    axum::extract::State(gate): axum::extract::State<TokenGate>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if gate.required && presented_token(req.headers()).and_then(|t| gate.clients.client_for(t)).is_none() {
        return token_required(req.uri().path());
    }
    next.run(req).await
}
#[cfg(test)]
mod tests;
