//! The local-endpoint guard (docs/security-reliability.md §2.2): exact `Host` allowlist (DNS
//! rebinding), exact `Origin` check (a page on another origin gets nothing), and JSON-only POST (a
//! cross-site "simple request" cannot carry a body without a preflight). No CORS headers are ever
//! sent, so browsers never let another origin read a response.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::{ApiError, Inbound};
use crate::model::ErrorKind;

/// The response header with the time spent inside Keyhaven.
pub const OVERHEAD: &str = "x-keyhaven-overhead-ms";

#[derive(Debug, Clone)]
pub struct GuardConfig {
    /// Exact `Host` header values accepted, e.g. `127.0.0.1:4937`, `localhost:4937`.
    pub hosts: Vec<String>,
    /// Exact `Origin` values accepted (browser UIs that are allowed to call). Empty: any request
    /// carrying an `Origin` header is refused.
    pub origins: Vec<String>,
    /// A listener beyond loopback (`allow_remote`, client tokens required): gateway calls from
    /// other machines name this machine's LAN address or name, so the gateway takes any `Host`
    /// (a browser page still cannot present a client token). The control API and the dashboard
    /// keep the exact hosts and answer loopback peers only.
    pub remote: bool,
}

impl GuardConfig {
    /// The host names a loopback listener on `addr` answers to.
    pub fn for_listener(addr: SocketAddr) -> GuardConfig {
        let port = addr.port();
        let mut hosts = vec![format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("[::1]:{port}")];
        let own = addr.to_string();
        if !hosts.contains(&own) {
            hosts.push(own);
        }
        GuardConfig { hosts, origins: Vec::new(), remote: false }
    }
}

pub async fn check(State(cfg): State<Arc<GuardConfig>>, req: Request, next: Next) -> Response {
    let started = tokio::time::Instant::now();
    let mut resp = admit(&cfg, req, next).await;
    // Handlers that call an upstream set a precise value; everything else was all engine time.
    if !resp.headers().contains_key(OVERHEAD) {
        let ms = format!("{:.3}", started.elapsed().as_secs_f64() * 1000.0);
        if let Ok(v) = HeaderValue::from_str(&ms) {
            resp.headers_mut().insert(OVERHEAD, v);
        }
    }
    resp
}

async fn admit(cfg: &GuardConfig, req: Request, next: Next) -> Response {
    let dialect = Inbound::for_path(req.uri().path());
    let headers = req.headers();
    let host =
        headers.get(header::HOST).and_then(|h| h.to_str().ok()).or_else(|| req.uri().authority().map(|a| a.as_str()));
    if !(cfg.remote || host.is_some_and(|h| cfg.hosts.iter().any(|a| a.eq_ignore_ascii_case(h)))) {
        return ApiError::new(dialect, ErrorKind::PermissionDenied, "Host not allowed").into_response();
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let ok = origin.to_str().is_ok_and(|o| cfg.origins.iter().any(|a| a == o));
        if !ok {
            return ApiError::new(dialect, ErrorKind::PermissionDenied, "Origin not allowed").into_response();
        }
    }
    if req.method() == Method::POST {
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            let mut e = ApiError::new(dialect, ErrorKind::InvalidRequest, "Content-Type must be application/json");
            e.status = axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE;
            return e.into_response();
        }
    }
    next.run(req).await
}
