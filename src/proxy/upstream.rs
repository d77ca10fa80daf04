//! The HTTPS client that forwards intercepted requests Keyhaven does not answer to the official
//! host: rustls with the web PKI roots (never with verification disabled), HTTP/2 when the
//! upstream offers it through ALPN, bodies streamed both ways, end-to-end headers (including
//! `authorization` and `x-cursor-checksum`) unchanged, hop-by-hop headers dropped.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use http::header::{self, HeaderMap, HeaderName};
use http::{Request, Response, StatusCode, Uri, Version};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::TokioTimer;
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;

use crate::config::UpstreamOverrides;
use crate::proxy::{ProxyError, SpawnExec};
use crate::task::Spawner;

/// Settings of the upstream client.
#[derive(Debug, Clone)]
pub struct UpstreamOptions {
    /// Tests only: dial these addresses for these hosts, and trust these extra roots.
    pub overrides: UpstreamOverrides,
    pub connect_timeout: Duration,
    /// How long an idle pooled connection is kept.
    pub pool_idle: Duration,
}

impl Default for UpstreamOptions {
    fn default() -> UpstreamOptions {
        UpstreamOptions {
            overrides: UpstreamOverrides::default(),
            connect_timeout: Duration::from_secs(10),
            pool_idle: Duration::from_secs(60),
        }
    }
}

/// Resolves host names with the system resolver, except the test overrides.
#[derive(Clone)]
struct Resolver {
    overrides: Arc<HashMap<String, SocketAddr>>,
}

type ResolveFuture = Pin<Box<dyn Future<Output = std::io::Result<std::vec::IntoIter<SocketAddr>>> + Send>>;

impl tower::Service<Name> for Resolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = ResolveFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let host = name.as_str().to_ascii_lowercase();
        let fixed = self.overrides.get(&host).copied();
        Box::pin(async move {
            if let Some(addr) = fixed {
                return Ok(vec![addr].into_iter());
            }
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            Ok(addrs.into_iter())
        })
    }
}

/// The forwarding client. Cheap to clone; connections are pooled.
#[derive(Clone)]
pub struct Upstream {
    client: Client<HttpsConnector<HttpConnector<Resolver>>, Body>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").finish_non_exhaustive()
    }
}

impl Upstream {
    pub fn new(options: &UpstreamOptions, spawner: &Spawner) -> Result<Upstream, ProxyError> {
        let mut roots = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        for der in &options.overrides.extra_roots_der {
            roots
                .add(CertificateDer::from(der.clone()))
                .map_err(|e| ProxyError::Tls(format!("extra upstream root: {e}")))?;
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| ProxyError::Tls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut http =
            HttpConnector::new_with_resolver(Resolver { overrides: Arc::new(options.overrides.hosts.clone()) });
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(options.connect_timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let exec = SpawnExec::new(spawner.clone(), spawner.root_token().child_token());
        let client = Client::builder(exec)
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(options.pool_idle)
            .build(https);
        Ok(Upstream { client })
    }

    /// Sends `req` (absolute `https://` URI) to the official host and streams the answer back.
    /// Connection failures become a 502 with a short plain-text body.
    pub async fn forward(&self, req: Request<Body>) -> Response<Body> {
        let (mut parts, body) = req.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        // The URI carries the authority; hyper writes `Host` (h1) or `:authority` (h2) from it.
        parts.headers.remove(header::HOST);
        // Whatever the client spoke, the upstream connection's ALPN decides the version.
        parts.version = Version::HTTP_11;
        let uri = parts.uri.clone();
        match self.client.request(Request::from_parts(parts, body)).await {
            Ok(resp) => {
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, Body::new(body))
            }
            Err(e) => {
                // The path only: a query may carry credentials (Cursor's `/auth/poll?…&verifier=…`).
                let host = uri.authority().map_or("", |a| a.as_str());
                tracing::warn!(host, path = uri.path(), error = %e, "upstream request failed");
                bad_gateway(&uri)
            }
        }
    }
}

/// A router that forwards every request to the official host: what `app` passes as the proxy's
/// service until the Cursor handlers exist. More specific routes can be merged in front of it.
pub fn forward_router(upstream: Upstream) -> axum::Router {
    axum::Router::new().fallback(move |req: axum::extract::Request| {
        let upstream = upstream.clone();
        async move { upstream.forward(req).await }
    })
}

fn bad_gateway(uri: &Uri) -> Response<Body> {
    let mut resp = Response::new(Body::from(format!(
        "keyhaven: could not reach {}\n",
        uri.authority().map_or("the upstream", |a| a.as_str())
    )));
    *resp.status_mut() = StatusCode::BAD_GATEWAY;
    resp.headers_mut().insert(header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
}

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1, RFC 9113 §8.2.2).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
    "trailer",
];

/// Removes hop-by-hop headers and every header named in `Connection`; keeps `TE` only as
/// `trailers` (gRPC and Connect need it).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        headers.remove(n);
    }
    for n in HOP_BY_HOP {
        headers.remove(n);
    }
    let te_trailers = headers
        .get_all(header::TE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("trailers"));
    headers.remove(header::TE);
    if te_trailers {
        headers.insert(header::TE, http::HeaderValue::from_static("trailers"));
    }
}
