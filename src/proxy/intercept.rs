//! The decrypting leg: check the ClientHello's SNI against the CONNECT host, terminate TLS with a
//! leaf for it, serve HTTP/1.1 or HTTP/2 on the decrypted stream, check each request's authority
//! against the SNI (421 otherwise), route it, and meter it for the call log.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, Uri, header};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::LazyConfigAcceptor;
use tower::ServiceExt;

use crate::config::RoutingMode;
use crate::proxy::ca::LeafResolver;
use crate::proxy::{InterceptRecord, InterceptSink, ProxyDeps, ProxyError, ProxyOptions, SpawnExec, always_upstream};

/// What every connection shares.
pub(crate) struct Shared {
    pub options: ProxyOptions,
    pub deps: ProxyDeps,
    tls: Arc<rustls::ServerConfig>,
}

impl Shared {
    pub(crate) fn new(options: ProxyOptions, deps: ProxyDeps) -> Result<Shared, ProxyError> {
        let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| ProxyError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(LeafResolver { ca: deps.ca.clone() }));
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Shared { options, deps, tls: Arc::new(tls) })
    }
}

/// Serves one intercepted CONNECT: the client has been told 200 and now sends its ClientHello.
pub(crate) async fn serve<S>(stream: S, host: String, port: u16, shared: Arc<Shared>) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream);
    let start = match tokio::time::timeout(shared.options.handshake_timeout, acceptor).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(%host, error = %e, "no TLS ClientHello after CONNECT");
            return Ok(());
        }
        Err(_) => return Ok(()),
    };
    let sni = start.client_hello().server_name().map(str::to_ascii_lowercase);
    if sni.as_deref().map(|s| s.strip_suffix('.').unwrap_or(s)) != Some(host.as_str()) {
        // Never route by one name and verify by another: no termination, no tunnel.
        tracing::warn!(connect = %host, sni = ?sni, "SNI does not match the CONNECT host; closing");
        return Ok(());
    }
    let tls = match tokio::time::timeout(shared.options.handshake_timeout, start.into_stream(shared.tls.clone())).await
    {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            tracing::debug!(%host, error = %e, "TLS handshake with the client failed");
            return Ok(());
        }
        Err(_) => return Ok(()),
    };
    let authority = if port == 443 { host.clone() } else { format!("{host}:{port}") };
    let conn = Arc::new(Conn { host, authority, shared: shared.clone() });
    let exec = SpawnExec::new(shared.deps.spawner.clone(), shared.deps.spawner.root_token().child_token());
    let mut builder = auto::Builder::new(exec);
    builder.http1().timer(TokioTimer::new());
    builder.http2().timer(TokioTimer::new());
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let conn = conn.clone();
        async move { Ok::<_, Infallible>(conn.handle(req).await) }
    });
    if let Err(e) = builder.serve_connection(TokioIo::new(tls), service).await {
        tracing::debug!(error = %e, "intercepted connection ended with an error");
    }
    Ok(())
}

/// One decrypted connection: its SNI host and what it may be routed to.
struct Conn {
    host: String,
    /// `host` or `host:port` as it goes into upstream URIs.
    authority: String,
    shared: Arc<Shared>,
}

/// The host part of an authority, lowercased, without port or a trailing dot.
fn host_of(authority: &str) -> String {
    let host = match authority.parse::<http::uri::Authority>() {
        Ok(a) => a.host().to_owned(),
        Err(_) => authority.to_owned(),
    };
    let host = host.to_ascii_lowercase();
    host.strip_suffix('.').map(str::to_owned).unwrap_or(host)
}

impl Conn {
    async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        let started = Instant::now();
        let method = req.method().to_string();
        let path = req.uri().path().to_owned();
        let inner = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_owned())
            .or_else(|| req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).map(str::to_owned));
        let meter = Arc::new(Meter {
            bytes_in: AtomicU64::new(0),
            sink: self.shared.deps.sink.clone(),
            method,
            host: self.host.clone(),
            path,
            started,
        });
        if inner.as_deref().map(host_of).as_deref() != Some(self.host.as_str()) {
            tracing::warn!(sni = %self.host, authority = ?inner, "request authority does not match SNI: 421");
            let mut resp =
                Response::new(Body::from("misdirected request: the authority does not match the TLS name\n"));
            *resp.status_mut() = StatusCode::MISDIRECTED_REQUEST;
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
            return meter.wrap(resp);
        }
        let (mut parts, body) = req.into_parts();
        let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        parts.uri = match Uri::try_from(format!("https://{}{pq}", self.authority)) {
            Ok(u) => u,
            Err(_) => {
                let mut resp = Response::new(Body::from("bad request target\n"));
                *resp.status_mut() = StatusCode::BAD_REQUEST;
                return meter.wrap(resp);
            }
        };
        let body = Body::new(Counted { inner: body, count: CountInto::Request(meter.clone()) });
        let req = Request::from_parts(parts, body);
        let deps = &self.shared.deps;
        let resp = if deps.mode.get() == RoutingMode::Upstream || always_upstream(req.uri().path()) {
            deps.upstream.forward(req).await
        } else {
            match deps.service.clone().oneshot(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            }
        };
        meter.wrap(resp)
    }
}

/// Accounting for one exchange; emits the record when the response body is dropped.
struct Meter {
    bytes_in: AtomicU64,
    sink: Arc<dyn InterceptSink>,
    method: String,
    host: String,
    path: String,
    started: Instant,
}

impl Meter {
    fn wrap(self: Arc<Meter>, resp: Response<Body>) -> Response<Body> {
        let status = resp.status().as_u16();
        resp.map(|body| {
            let complete = http_body::Body::is_end_stream(&body);
            Body::new(Counted {
                inner: body,
                count: CountInto::Response(Box::new(ResponseTally { meter: self, status, bytes_out: 0, complete })),
            })
        })
    }
}

struct ResponseTally {
    meter: Arc<Meter>,
    status: u16,
    bytes_out: u64,
    complete: bool,
}

impl Drop for ResponseTally {
    fn drop(&mut self) {
        let m = &self.meter;
        m.sink.record(InterceptRecord {
            method: m.method.clone(),
            host: m.host.clone(),
            path: m.path.clone(),
            status: self.status,
            bytes_in: m.bytes_in.load(Ordering::Relaxed),
            bytes_out: self.bytes_out,
            duration_ms: u64::try_from(m.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            complete: self.complete,
        });
    }
}

enum CountInto {
    Request(Arc<Meter>),
    Response(Box<ResponseTally>),
}

/// A body that counts its data bytes as they pass.
struct Counted<B> {
    inner: B,
    count: CountInto,
}

impl<B> http_body::Body for Counted<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                // hyper stops polling once `is_end_stream` is true, so the end may never be
                // reported as `None`.
                let ended = self.inner.is_end_stream();
                match &mut self.count {
                    CountInto::Request(m) => {
                        m.bytes_in.fetch_add(n, Ordering::Relaxed);
                    }
                    CountInto::Response(t) => {
                        t.bytes_out += n;
                        t.complete |= ended;
                    }
                }
            }
            Poll::Ready(None) => {
                if let CountInto::Response(t) = &mut self.count {
                    t.complete = true;
                }
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
