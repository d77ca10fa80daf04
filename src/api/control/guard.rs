//! The control API's guard: a loopback peer (where the server recorded one), exact `Host`, exact `Origin` (only the listener's own origins), then
//! either the bearer token (constant time) or a dashboard session cookie ([`super::session`]),
//! JSON on every method but GET and HEAD. A cookie is ambient (the browser adds it on its own), so
//! a request authenticated by it must also show that it comes from the page itself: an `Origin`
//! (which passed the exact check), `Sec-Fetch-Site: same-origin`, or the [`UI_HEADER`] the UI
//! adds (a page of another origin cannot send a custom header without a CORS preflight, which
//! this server never grants). Refusals are 403 (Host,
//! Origin), 401 (token) and 415 (content type), decided before any handler runs, so a refused
//! request has no side effect. No CORS header is ever added; responses are `no-store`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::api::GuardConfig;
use crate::api::control::error_response;
use crate::api::control::session::Sessions;
use crate::control::token::ControlToken;

/// The header the dashboard's own requests carry (for browsers that send no `Sec-Fetch-Site`).
pub const UI_HEADER: &str = "x-keyhaven-ui";

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A peer on another machine (a listener beyond loopback).
    Remote,
    Host,
    Origin,
    Token,
    ContentType,
}

impl Refusal {
    pub fn response(self) -> Response {
        match self {
            Refusal::Remote => error_response(
                StatusCode::FORBIDDEN,
                "forbidden",
                "the control API and the dashboard answer this machine only",
            ),
            Refusal::Host => error_response(StatusCode::FORBIDDEN, "forbidden", "Host not allowed"),
            Refusal::Origin => error_response(StatusCode::FORBIDDEN, "forbidden", "Origin not allowed"),
            Refusal::Token => error_response(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "no dashboard session or control token: run `keyhaven dashboard` and open the link it prints",
            ),
            Refusal::ContentType => error_response(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "Content-Type must be application/json",
            ),
        }
    }
}

#[derive(Debug)]
pub struct ControlGuard {
    hosts: Vec<String>,
    origins: Vec<String>,
    token: Option<Arc<ControlToken>>,
    sessions: Option<Arc<Sessions>>,
}

impl ControlGuard {
    /// The listener's hosts; its origins are `http://` + each host. With a token, requests must
    /// present it (the UI's static files are served without one).
    pub fn new(cfg: &GuardConfig, token: Arc<ControlToken>) -> ControlGuard {
        let mut g = ControlGuard::without_token(cfg);
        g.token = Some(token);
        g
    }

    pub fn without_token(cfg: &GuardConfig) -> ControlGuard {
        let origins = cfg.hosts.iter().map(|h| format!("http://{}", h.to_ascii_lowercase())).collect();
        ControlGuard { hosts: cfg.hosts.clone(), origins, token: None, sessions: None }
    }

    /// Also admits requests with a live dashboard session cookie (from the page itself).
    pub fn with_sessions(mut self, sessions: Arc<Sessions>) -> ControlGuard {
        self.sessions = Some(sessions);
        self
    }

    /// `Err` when the request must be refused.
    pub fn admit(&self, req: &Request) -> Result<(), Refusal> {
        // The peer, where the server recorded it (in-process callers have none).
        let peer = req.extensions().get::<axum::extract::ConnectInfo<std::net::SocketAddr>>();
        if peer.is_some_and(|p| !p.0.ip().to_canonical().is_loopback()) {
            return Err(Refusal::Remote);
        }
        let headers = req.headers();
        // HTTP/2 carries the host as `:authority` (the URI), HTTP/1.1 as `Host`.
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| req.uri().authority().map(|a| a.as_str()));
        if !host.is_some_and(|h| self.hosts.iter().any(|a| a.eq_ignore_ascii_case(h))) {
            return Err(Refusal::Host);
        }
        if let Some(origin) = headers.get(header::ORIGIN)
            && !origin.to_str().is_ok_and(|o| self.origins.iter().any(|a| a == o))
        {
            return Err(Refusal::Origin);
        }
        if let Some(token) = &self.token {
            let presented = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            if !presented.is_some_and(|p| token.verify(p)) {
                if !self.sessions.as_ref().is_some_and(|s| s.verify(headers)) {
                    return Err(Refusal::Token);
                }
                let from_the_page = headers.contains_key(header::ORIGIN)
                    || headers.contains_key(UI_HEADER)
                    || headers.get("sec-fetch-site").is_some_and(|v| v.as_bytes() == b"same-origin");
                if !from_the_page {
                    return Err(Refusal::Origin);
                }
            }
            if !matches!(*req.method(), Method::GET | Method::HEAD) {
                let json = headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.split(';').next())
                    .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
                if !json {
                    return Err(Refusal::ContentType);
                }
            }
        }
        Ok(())
    }
}

/// Adds the headers every control and UI response carries.
pub fn harden(resp: &mut Response) {
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.remove(header::ACCESS_CONTROL_ALLOW_ORIGIN);
}

#[cfg(test)]
mod tests;

pub async fn check(State(guard): State<Arc<ControlGuard>>, req: Request, next: Next) -> Response {
    let mut resp = match guard.admit(&req) {
        Ok(()) => next.run(req).await,
        Err(refusal) => refusal.response(),
    };
    harden(&mut resp);
    resp
}
