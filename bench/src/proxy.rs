//! The proxy phase: what Keyhaven's intercepting proxy costs.
//!
//! A local HTTPS upstream ([`Upstream`]: rustls on 127.0.0.1 with a throwaway CA and a leaf for
//! `api2.cursor.sh`) answers every request with `200 ok`. The engine under test gets
//! `upstream_overrides` that dial `api2.cursor.sh` at that upstream and trust its CA, so
//! intercepted requests on an account path ([`PATH`], under `/auth/`, which
//! `keyhaven::proxy::always_upstream` forwards in every routing mode) travel
//! client -> proxy (TLS with the local CA's leaf) -> upstream (TLS with the throwaway leaf).
//!
//! Measured:
//! - [`handshakes`]: connection setups, each a fresh TCP connection, `CONNECT api2.cursor.sh:443`
//!   to the proxy, then a full TLS handshake (client session resumption off, so every handshake
//!   presents the leaf) trusting only the engine's local CA. The first one of a fresh engine mints
//!   the leaf; the rest hit the leaf cache. The same against the upstream directly (no CONNECT) is
//!   the reference.
//! - [`requests`]: `GET` latencies on one kept-alive HTTP/1.1 connection, directly to the upstream
//!   and through the proxy (which forwards over its own pooled upstream connection).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::{BodyExt as _, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// The intercepted host the client asks for.
pub const HOST: &str = "api2.cursor.sh";
/// An account path: always forwarded upstream, whatever the routing mode.
pub const PATH: &str = "/auth/keyhaven-bench";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A running local HTTPS upstream; [`Upstream::stop`] ends its accept loop.
#[derive(Debug)]
pub struct Upstream {
    pub addr: SocketAddr,
    /// The throwaway CA that signed the upstream's leaf.
    pub ca_der: CertificateDer<'static>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    pub async fn start() -> anyhow::Result<Upstream> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "keyhaven-bench upstream CA");
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf_key = KeyPair::generate()?;
        let mut leaf = CertificateParams::new(vec![HOST.to_owned()])?;
        leaf.use_authority_key_identifier_extension = true;
        let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf_cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
            )?;
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { return };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let svc = hyper::service::service_fn(|_req: http::Request<Incoming>| async {
                        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        Ok(Upstream { addr, ca_der: ca_cert.der().clone(), task })
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

/// A TLS client trusting only `root`, offering HTTP/1.1, with session resumption off so every
/// handshake is a full one.
pub fn connector(root: CertificateDer<'static>) -> anyhow::Result<tokio_rustls::TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root)?;
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.resumption = rustls::client::Resumption::disabled();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(cfg)))
}

/// How the client reaches `api2.cursor.sh`.
#[derive(Debug, Clone, Copy)]
pub enum Route {
    /// TCP straight to the upstream.
    Direct(SocketAddr),
    /// TCP to the proxy, then `CONNECT api2.cursor.sh:443`.
    Proxy(SocketAddr),
}

/// A TCP stream on which the next bytes are the TLS handshake with `api2.cursor.sh`.
pub async fn open(route: Route) -> anyhow::Result<TcpStream> {
    let addr = match route {
        Route::Direct(a) | Route::Proxy(a) => a,
    };
    let mut tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    if let Route::Proxy(_) = route {
        let target = format!("{HOST}:443");
        tcp.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes()).await?;
        // The proxy sends nothing after its answer until the client speaks, so whole reads
        // cannot swallow TLS bytes.
        let mut head = Vec::new();
        let mut buf = [0u8; 512];
        while !head.ends_with(b"\r\n\r\n") {
            let n = tcp.read(&mut buf).await?;
            anyhow::ensure!(n > 0, "the proxy closed during CONNECT");
            head.extend_from_slice(&buf[..n]);
        }
        anyhow::ensure!(head.starts_with(b"HTTP/1.1 200"), "CONNECT refused: {}", String::from_utf8_lossy(&head));
    }
    Ok(tcp)
}

/// Connection setup latencies in milliseconds.
#[derive(Debug, Default)]
pub struct Handshakes {
    /// TCP connect (+ CONNECT) + TLS handshake, per connection.
    pub setup_ms: Vec<f64>,
    /// The TLS handshake alone, per connection.
    pub tls_ms: Vec<f64>,
    /// Wall time of the whole batch.
    pub wall: Duration,
    pub errors: u64,
    pub first_error: Option<String>,
}

impl Handshakes {
    pub fn per_second(&self) -> f64 {
        self.setup_ms.len() as f64 / self.wall.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

async fn handshake(route: Route, tls: &tokio_rustls::TlsConnector) -> anyhow::Result<(f64, f64)> {
    let t0 = Instant::now();
    let tcp = open(route).await?;
    let t1 = Instant::now();
    let mut stream = tls.connect(ServerName::try_from(HOST)?, tcp).await.context("TLS handshake")?;
    let t2 = Instant::now();
    // close_notify, so the server side ends cleanly; not timed.
    let _ = stream.shutdown().await;
    Ok((ms(t2 - t0), ms(t2 - t1)))
}

/// `n` handshakes, `concurrency` at a time (1: strictly sequential), each bounded by `timeout`.
pub async fn handshakes(
    route: Route,
    tls: &tokio_rustls::TlsConnector,
    n: u32,
    concurrency: usize,
    timeout: Duration,
) -> Handshakes {
    let start = Instant::now();
    let results: Vec<anyhow::Result<(f64, f64)>> = futures::stream::iter(0..n)
        .map(|_| async move {
            tokio::time::timeout(timeout, handshake(route, tls))
                .await
                .unwrap_or_else(|_| Err(anyhow::anyhow!("timed out")))
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut out = Handshakes { wall: start.elapsed(), ..Handshakes::default() };
    for r in results {
        match r {
            Ok((setup, tls)) => {
                out.setup_ms.push(setup);
                out.tls_ms.push(tls);
            }
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert(format!("{e:#}"));
            }
        }
    }
    out
}

/// Request latencies in milliseconds on one kept-alive connection.
#[derive(Debug, Default)]
pub struct Requests {
    pub latency_ms: Vec<f64>,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// Opens one connection over `route`, sends `warmup` unmeasured then `n` measured `GET PATH`
/// requests on it one after another, each bounded by `timeout`. A failure ends the run (the
/// connection is gone) and is reported as an error.
pub async fn requests(
    route: Route,
    tls: &tokio_rustls::TlsConnector,
    n: u32,
    warmup: u32,
    timeout: Duration,
) -> Requests {
    let mut out = Requests::default();
    if let Err(e) = requests_inner(route, tls, n, warmup, timeout, &mut out).await {
        out.errors += 1;
        out.first_error.get_or_insert(format!("{e:#}"));
    }
    out
}

async fn requests_inner(
    route: Route,
    tls: &tokio_rustls::TlsConnector,
    n: u32,
    warmup: u32,
    timeout: Duration,
    out: &mut Requests,
) -> anyhow::Result<()> {
    let tcp = open(route).await?;
    let stream = tls.connect(ServerName::try_from(HOST)?, tcp).await.context("TLS handshake")?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let conn = tokio::spawn(conn);
    let result = async {
        for i in 0..warmup + n {
            let req = http::Request::get(PATH).header(http::header::HOST, HOST).body(Empty::<Bytes>::new())?;
            let t = Instant::now();
            let body = tokio::time::timeout(timeout, async {
                sender.ready().await?;
                let resp = sender.send_request(req).await?;
                anyhow::ensure!(resp.status() == http::StatusCode::OK, "status {}", resp.status());
                anyhow::Ok(resp.into_body().collect().await?.to_bytes())
            })
            .await
            .context("request timed out")??;
            let elapsed = t.elapsed();
            anyhow::ensure!(body.as_ref() == b"ok", "unexpected body {body:?}");
            if i >= warmup {
                out.latency_ms.push(ms(elapsed));
            }
        }
        anyhow::Ok(())
    }
    .await;
    conn.abort();
    result
}
