//! The local HTTPS proxy Cursor is pointed at, and the local CA behind it.
//!
//! - [`listener`]: an HTTP proxy on loopback. `CONNECT host:port` to a host on the
//!   [`InterceptList`] is decrypted with a leaf from [`ca::LocalCa`] (ALPN `h2` and `http/1.1`)
//!   and served by the service `app` passes in; every other `CONNECT` is a raw TCP tunnel, byte for
//!   byte, so the client sees the real certificate. Absolute-URI requests (plain HTTP) are passed
//!   through, never decrypted.
//! - Interception needs the CONNECT host, the TLS SNI and the inner `Host`/`:authority` to agree:
//!   CONNECT and SNI differ → the connection is closed; inner authority differs → 421.
//! - [`upstream::Upstream`] forwards what the engine does not answer to the official host.
//! - [`RoutingMode`] (`local | upstream | hybrid`) is switched at runtime through [`ModeSwitch`]
//!   without dropping connections. In `upstream` mode every request goes straight to the official
//!   host; otherwise it goes to the service from `app` (`api::cursor`'s router, which answers the
//!   agent streams and the model catalog and forwards the rest through [`upstream::Upstream`]). Account, auth,
//!   dashboard and billing calls ([`always_upstream`]) go upstream in every mode.
//! - Every intercepted exchange is reported to an [`InterceptSink`] as an [`InterceptRecord`].
//! - [`trust`]: installing the root into the OS trust stores.
//!
//! Invariant: depends on leaves only (`config`, `task`, `secrets`); it never names `api`, `cursor`,
//! `provider` or `store`.

pub mod allowlist;
pub mod ca;
mod intercept;
mod listener;
pub mod trust;
pub mod upstream;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use axum::Router;
use tokio_util::sync::CancellationToken;

pub use allowlist::InterceptList;

use crate::config::RoutingMode;
use crate::proxy::ca::{CaError, LocalCa};
use crate::proxy::upstream::Upstream;
use crate::task::Spawner;

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot listen on {addr}: {source} (is another Keyhaven or another program using this port?)")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("TLS setup: {0}")]
    Tls(String),
    #[error(transparent)]
    Ca(#[from] CaError),
}

impl ProxyError {
    pub fn kind(&self) -> &'static str {
        match self {
            ProxyError::Bind { .. } => "proxy_bind",
            ProxyError::Tls(_) => "proxy_tls",
            ProxyError::Ca(e) => e.kind(),
        }
    }
}

/// The routing mode, shared between the proxy and `app`; changing it affects the next request
/// and drops no connection.
#[derive(Debug, Clone)]
pub struct ModeSwitch(Arc<AtomicU8>);

impl ModeSwitch {
    pub fn new(mode: RoutingMode) -> ModeSwitch {
        ModeSwitch(Arc::new(AtomicU8::new(encode(mode))))
    }

    pub fn get(&self) -> RoutingMode {
        match self.0.load(Ordering::Relaxed) {
            0 => RoutingMode::Local,
            1 => RoutingMode::Upstream,
            _ => RoutingMode::Hybrid,
        }
    }

    pub fn set(&self, mode: RoutingMode) {
        self.0.store(encode(mode), Ordering::Relaxed);
    }
}

fn encode(mode: RoutingMode) -> u8 {
    match mode {
        RoutingMode::Local => 0,
        RoutingMode::Upstream => 1,
        RoutingMode::Hybrid => 2,
    }
}

/// Paths that carry the user's Cursor account (login, plan, usage, billing). They always go to
/// the official service unchanged, whatever the mode: Keyhaven never answers them itself.
pub fn always_upstream(path: &str) -> bool {
    const PREFIXES: [&str; 6] = [
        "/auth/",
        "/oauth/",
        "/aiserver.v1.AuthService/",
        "/aiserver.v1.DashboardService/",
        "/aiserver.v1.BillingService/",
        "/aiserver.v1.TeamService/",
    ];
    PREFIXES.iter().any(|p| path.starts_with(p))
}

/// One intercepted request and its response, for the call log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterceptRecord {
    pub method: String,
    pub host: String,
    pub path: String,
    pub status: u16,
    /// Request body bytes read from the client.
    pub bytes_in: u64,
    /// Response body bytes written to the client.
    pub bytes_out: u64,
    pub duration_ms: u64,
    /// Whether the response went to its end (false: the client or upstream broke off).
    pub complete: bool,
}

/// Where intercepted exchanges are reported. Called once per exchange, when its response body
/// ends or is dropped; must not block.
pub trait InterceptSink: Send + Sync {
    fn record(&self, record: InterceptRecord);
}

/// A sink that writes each record to the log.
#[derive(Debug, Default, Clone, Copy)]
pub struct TracingSink;

impl InterceptSink for TracingSink {
    fn record(&self, r: InterceptRecord) {
        tracing::info!(
            target: "keyhaven::proxy::exchange",
            method = %r.method, host = %r.host, path = %r.path, status = r.status,
            bytes_in = r.bytes_in, bytes_out = r.bytes_out, duration_ms = r.duration_ms, complete = r.complete,
            "intercepted exchange"
        );
    }
}

/// Proxy settings.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    pub listen: SocketAddr,
    /// How long a client may take to send its first request head, and to finish the TLS hello.
    pub handshake_timeout: Duration,
    /// How long dialling a tunnel target may take.
    pub connect_timeout: Duration,
}

impl ProxyOptions {
    pub fn new(listen: SocketAddr) -> ProxyOptions {
        ProxyOptions { listen, handshake_timeout: Duration::from_secs(10), connect_timeout: Duration::from_secs(10) }
    }
}

/// What the proxy works with; built by `app`.
pub struct ProxyDeps {
    pub ca: Arc<LocalCa>,
    /// Serves decrypted requests in `local` and `hybrid` modes (absolute `https://` URIs).
    pub service: Router,
    pub upstream: Upstream,
    pub mode: ModeSwitch,
    pub sink: Arc<dyn InterceptSink>,
    pub spawner: Spawner,
}

/// The running proxy.
#[derive(Debug, Clone)]
pub struct ProxyHandle {
    pub addr: SocketAddr,
    pub mode: ModeSwitch,
}

/// Binds the listener and starts accepting on the spawner, until the root token is cancelled.
pub async fn start(options: ProxyOptions, deps: ProxyDeps) -> Result<ProxyHandle, ProxyError> {
    let addr = options.listen;
    let socket = tokio::net::TcpListener::bind(addr).await.map_err(|source| ProxyError::Bind { addr, source })?;
    let addr = socket.local_addr().map_err(|source| ProxyError::Bind { addr, source })?;
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "the proxy listens on a non-loopback address: other machines can use it");
    }
    let handle = ProxyHandle { addr, mode: deps.mode.clone() };
    listener::run(socket, options, deps)?;
    tracing::info!(%addr, "keyhaven proxy listening");
    Ok(handle)
}

/// A hyper executor that spawns through the engine's [`Spawner`], so connection tasks are
/// tracked and cancelled at shutdown like every other task.
#[derive(Debug, Clone)]
pub(crate) struct SpawnExec {
    spawner: Spawner,
    token: CancellationToken,
}

impl SpawnExec {
    pub(crate) fn new(spawner: Spawner, token: CancellationToken) -> SpawnExec {
        SpawnExec { spawner, token }
    }
}

impl<F> hyper::rt::Executor<F> for SpawnExec
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        self.spawner.spawn(self.token.clone(), fut);
    }
}

#[cfg(test)]
mod tests;
