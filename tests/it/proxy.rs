//! The intercepting proxy and the local CA end to end: real clients (curl, rustls, hyper, Node,
//! OpenSSL, NSS) against a proxy on 127.0.0.1:0 whose "official host" is a local rustls server
//! reached through the test-only upstream override.
//!
//! External tools are skipped with a message when missing, unless `KEYHAVEN_REQUIRE_TOOLS` is
//! set (CI sets it), in which case a missing tool fails the test.

use crate::support::skip::skip;
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::routing::any;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use keyhaven::config::{RoutingMode, UpstreamOverrides};
use keyhaven::proxy::ca::{CaPaths, KEYRING_ENTRY, LocalCa};
use keyhaven::proxy::upstream::{Upstream, UpstreamOptions, forward_router};
use keyhaven::proxy::{
    self, InterceptList, InterceptRecord, InterceptSink, ModeSwitch, ProxyDeps, ProxyHandle, ProxyOptions,
};
use keyhaven::secrets::{Keyring, MemoryKeyring};
use keyhaven::task::Spawner;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// Tools

fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// Whether `name` may be used; panics when it is missing and tools are required.
fn have_tool(name: &str, package: &str) -> bool {
    if find_tool(name).is_some() {
        return true;
    }
    assert!(
        std::env::var_os("KEYHAVEN_REQUIRE_TOOLS").is_none(),
        "`{name}` is required (KEYHAVEN_REQUIRE_TOOLS is set): install the Debian package `{package}`"
    );
    skip(&format!("`{name}` not found (Debian package `{package}`); set KEYHAVEN_REQUIRE_TOOLS to make this fatal"));
    false
}

struct Out {
    ok: bool,
    stdout: Vec<u8>,
    stderr: String,
}

fn run_tool(cmd: &mut Command) -> Out {
    let out = cmd.output().expect("tool starts");
    Out { ok: out.status.success(), stdout: out.stdout, stderr: String::from_utf8_lossy(&out.stderr).into_owned() }
}

async fn run_blocking(mut cmd: Command) -> Out {
    tokio::task::spawn_blocking(move || run_tool(&mut cmd)).await.expect("tool task")
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| u8::try_from((i * 31 + i / 977) % 251).expect("byte")).collect()
}

// ---------------------------------------------------------------------------------------------
// The test "official host": a rustls + hyper server with its own (unconstrained) test CA.

pub(crate) struct TestPki {
    ca_pem: String,
    pub(crate) ca_der: CertificateDer<'static>,
    leaf_der: CertificateDer<'static>,
    leaf_key: PrivatePkcs8KeyDer<'static>,
}

pub(crate) fn test_pki() -> TestPki {
    let ca_key = KeyPair::generate().expect("key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "Test Upstream CA");
    let ca_cert = ca_params.self_signed(&ca_key).expect("ca");
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().expect("key");
    let mut leaf =
        CertificateParams::new(vec!["api2.cursor.sh".to_owned(), "api3.cursor.sh".to_owned(), "localhost".to_owned()])
            .expect("params");
    leaf.use_authority_key_identifier_extension = true;
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).expect("leaf");
    TestPki {
        ca_pem: ca_cert.pem(),
        ca_der: ca_cert.der().clone(),
        leaf_der: leaf_cert.der().clone(),
        leaf_key: PrivatePkcs8KeyDer::from(leaf_key.serialize_der()),
    }
}

#[derive(Debug, Clone)]
struct Seen {
    path: String,
    version: http::Version,
    headers: http::HeaderMap,
}

#[derive(Clone, Default)]
struct UpState {
    seen: Arc<Mutex<Vec<Seen>>>,
    /// When a `/hang` response body was dropped (the proxy let go of the stream).
    hang_closed: Arc<Mutex<Option<Instant>>>,
}

struct TestUpstream {
    addr: SocketAddr,
    state: UpState,
}

type UpBody = http_body_util::combinators::BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

async fn upstream_handle(state: UpState, req: Request<Incoming>) -> Response<UpBody> {
    state.seen.lock().expect("seen").push(Seen {
        path: req.uri().path().to_owned(),
        version: req.version(),
        headers: req.headers().clone(),
    });
    let path = req.uri().path().to_owned();
    let ok = |body: UpBody| Response::builder().status(200).header("x-upstream", "yes").body(body).expect("response");
    if path == "/echo" {
        // Full duplex: the response streams the request body back as it arrives.
        return ok(req.into_body().map_err(|e| Box::new(e) as _).boxed());
    }
    if let Some(n) = path.strip_prefix("/big/") {
        let n: usize = n.parse().expect("size");
        let data = pattern(n);
        let chunks: Vec<Result<Frame<Bytes>, Box<dyn std::error::Error + Send + Sync>>> =
            data.chunks(64 * 1024).map(|c| Ok(Frame::data(Bytes::copy_from_slice(c)))).collect();
        return ok(StreamBody::new(futures::stream::iter(chunks)).boxed());
    }
    if path == "/hang" {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Box<dyn std::error::Error + Send + Sync>>>(1);
        let closed = state.hang_closed.clone();
        tokio::spawn(async move {
            loop {
                if tx.send(Ok(Frame::data(Bytes::from_static(b"tick\n")))).await.is_err() {
                    *closed.lock().expect("closed") = Some(Instant::now());
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        let stream = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|x| (x, rx)) });
        return ok(StreamBody::new(stream).boxed());
    }
    ok(Full::new(Bytes::from(format!("upstream:{path}"))).map_err(|e| match e {}).boxed())
}

pub(crate) fn server_tls(pki: &TestPki) -> Arc<rustls::ServerConfig> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![pki.leaf_der.clone()], PrivateKeyDer::Pkcs8(pki.leaf_key.clone_key()))
        .expect("cert");
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(cfg)
}

async fn start_upstream(pki: &TestPki) -> TestUpstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let acceptor = tokio_rustls::TlsAcceptor::from(server_tls(pki));
    let state = UpState::default();
    let st = state.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            let st = st.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let svc = hyper::service::service_fn(move |req| {
                    let st = st.clone();
                    async move { Ok::<_, Infallible>(upstream_handle(st, req).await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    TestUpstream { addr, state }
}

/// A TLS echo server (raw bytes), for the tunnel test.
async fn start_tls_echo(pki: &TestPki) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let mut cfg = (*server_tls(pki)).clone();
    cfg.alpn_protocols.clear();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let (mut r, mut w) = tokio::io::split(tls);
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    addr
}

// ---------------------------------------------------------------------------------------------
// The proxy under test

#[derive(Default)]
struct Records(Mutex<Vec<InterceptRecord>>);

impl InterceptSink for Records {
    fn record(&self, record: InterceptRecord) {
        self.0.lock().expect("records").push(record);
    }
}

struct Harness {
    dir: tempfile::TempDir,
    spawner: Spawner,
    proxy: ProxyHandle,
    mode: ModeSwitch,
    ca: Arc<LocalCa>,
    keyring: Arc<MemoryKeyring>,
    records: Arc<Records>,
    up: TestUpstream,
    pki: TestPki,
    /// The proxy CA's certificate file.
    ca_file: PathBuf,
    /// The test upstream CA's certificate file.
    up_ca_file: PathBuf,
}

async fn harness() -> Harness {
    let pki = test_pki();
    let up = start_upstream(&pki).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let keyring = Arc::new(MemoryKeyring::default());
    let intercept = InterceptList::new(["cursor.sh", "cursor.com"]);
    let paths = CaPaths::new(dir.path().join("ca"));
    let ca =
        Arc::new(LocalCa::create(&paths, keyring.as_ref(), &intercept, time::OffsetDateTime::now_utc()).expect("ca"));
    let spawner = Spawner::new();
    let mut hosts = HashMap::new();
    for h in ["api2.cursor.sh", "api3.cursor.sh"] {
        hosts.insert(h.to_owned(), up.addr);
    }
    let upstream = Upstream::new(
        &UpstreamOptions {
            overrides: UpstreamOverrides { hosts, extra_roots_der: vec![pki.ca_der.to_vec()] },
            connect_timeout: Duration::from_secs(5),
            pool_idle: Duration::from_millis(200),
        },
        &spawner,
    )
    .expect("upstream");
    let service = forward_router(upstream.clone())
        .route("/local", any(|| async { "local" }))
        .route("/auth/full_stripe_profile", any(|| async { "forged" }));
    let records = Arc::new(Records::default());
    let mode = ModeSwitch::new(RoutingMode::Hybrid);
    let deps = ProxyDeps {
        ca: ca.clone(),
        service,
        upstream,
        mode: mode.clone(),
        sink: records.clone(),
        spawner: spawner.clone(),
    };
    let proxy = proxy::start(ProxyOptions::new("127.0.0.1:0".parse().expect("addr")), deps).await.expect("proxy");
    let ca_file = paths.cert();
    let up_ca_file = dir.path().join("upstream-ca.pem");
    std::fs::write(&up_ca_file, &pki.ca_pem).expect("write");
    Harness { dir, spawner, proxy, mode, ca, keyring, records, up, pki, ca_file, up_ca_file }
}

impl Harness {
    fn proxy_url(&self) -> String {
        format!("http://{}", self.proxy.addr)
    }

    fn curl(&self, extra: &[&str]) -> Command {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--max-time", "20", "--proxy", &self.proxy_url()]);
        cmd.args(extra);
        cmd
    }

    /// Waits until the spawner runs at most `n` tasks.
    async fn settle_to(&self, n: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.spawner.len() > n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.spawner.len()
    }

    fn records(&self) -> Vec<InterceptRecord> {
        self.records.0.lock().expect("records").clone()
    }

    /// CONNECT through the proxy, then a TLS client trusting `root` with SNI `sni`.
    async fn tls_via_proxy(
        &self,
        connect: &str,
        sni: &str,
        root: &CertificateDer<'static>,
        alpn: &[&[u8]],
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tcp = connect_via_proxy(self.proxy.addr, connect).await?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(root.clone()).expect("root");
        let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let name = ServerName::try_from(sni.to_owned()).expect("name");
        tcp.set_nodelay(true)?;
        tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp).await
    }
}

/// Sends `CONNECT target` and reads the proxy's answer; `Err` unless it is 200.
pub(crate) async fn connect_via_proxy(proxy: SocketAddr, target: &str) -> std::io::Result<TcpStream> {
    let mut tcp = TcpStream::connect(proxy).await?;
    tcp.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes()).await?;
    let head = read_head(&mut tcp).await?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(head));
    }
    Ok(tcp)
}

/// Reads up to the end of a response head, byte by byte (so nothing after it is consumed).
async fn read_head(tcp: &mut TcpStream) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if tcp.read(&mut b).await? == 0 {
            break;
        }
        head.push(b[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

// ---------------------------------------------------------------------------------------------
// Through the proxy with curl

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_serves_intercepted_host_over_http1_and_http2_with_curl() {
    if !have_tool("curl", "curl") {
        return;
    }
    let h = harness().await;
    let body = pattern(3 * 1024 * 1024 + 17);
    let body_file = h.dir.path().join("body.bin");
    std::fs::write(&body_file, &body).expect("write");
    for (flag, version) in [("--http1.1", "1.1"), ("--http2", "2")] {
        let out_file = h.dir.path().join(format!("out-{version}.bin"));
        let cmd = h.curl(&[
            flag,
            "--cacert",
            h.ca_file.to_str().expect("path"),
            "-H",
            "x-cursor-checksum: abc123/def",
            "-H",
            "authorization: Bearer tok-1",
            "-H",
            "connection: keep-alive, x-hop",
            "-H",
            "x-hop: must-not-pass",
            "-H",
            "content-type: application/octet-stream",
            "--data-binary",
            &format!("@{}", body_file.display()),
            "-o",
            out_file.to_str().expect("path"),
            "-w",
            "%{http_code} %{http_version}",
            "https://api2.cursor.sh/echo",
        ]);
        let out = run_blocking(cmd).await;
        assert!(out.ok, "curl {flag} failed: {}", out.stderr);
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("200 {version}"), "status and HTTP version");
        let echoed = std::fs::read(&out_file).expect("read");
        assert_eq!(sha256(&echoed), sha256(&body), "the body streamed through unchanged both ways ({flag})");
    }
    // The official host saw the end-to-end headers unchanged, no hop-by-hop ones, over HTTP/2.
    let seen = h.up.state.seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 2);
    // Over h1 the client's `Connection: keep-alive, x-hop` names x-hop as hop-by-hop; over h2
    // curl cannot send `Connection` at all, so x-hop is an ordinary header there.
    assert!(seen[0].headers.get("x-hop").is_none(), "a header named in Connection is dropped");
    for s in &seen {
        assert_eq!(s.path, "/echo");
        assert_eq!(s.version, http::Version::HTTP_2, "the upstream leg keeps HTTP/2");
        assert_eq!(s.headers.get("x-cursor-checksum").expect("checksum"), "abc123/def");
        assert_eq!(s.headers.get("authorization").expect("auth"), "Bearer tok-1");
        assert!(s.headers.get("connection").is_none());
        assert!(s.headers.get("proxy-connection").is_none());
    }
    // Large download.
    let out_file = h.dir.path().join("big.bin");
    let out = run_blocking(h.curl(&[
        "--http2",
        "--cacert",
        h.ca_file.to_str().expect("path"),
        "-o",
        out_file.to_str().expect("path"),
        "https://api2.cursor.sh/big/5000000",
    ]))
    .await;
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(sha256(&std::fs::read(&out_file).expect("read")), sha256(&pattern(5_000_000)));
    // Every exchange reached the call log.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let records = h.records();
    let echo: Vec<_> = records.iter().filter(|r| r.path == "/echo").collect();
    assert_eq!(echo.len(), 2, "{records:?}");
    for r in echo {
        assert_eq!((r.method.as_str(), r.host.as_str(), r.status), ("POST", "api2.cursor.sh", 200));
        assert_eq!(r.bytes_in, body.len() as u64);
        assert_eq!(r.bytes_out, body.len() as u64);
        assert!(r.complete);
    }
    assert!(records.iter().any(|r| r.path == "/big/5000000" && r.bytes_out == 5_000_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_tunnels_unlisted_host_untouched() {
    let h = harness().await;
    let echo = start_tls_echo(&h.pki).await;
    // The client trusts only the upstream's own CA: it must see the upstream's own certificate.
    let mut tls = h
        .tls_via_proxy(&format!("localhost:{}", echo.port()), "localhost", &h.pki.ca_der, &[])
        .await
        .expect("tunnelled TLS handshake with the real server");
    let peer = tls.get_ref().1.peer_certificates().expect("peer certs")[0].clone();
    assert_eq!(peer, h.pki.leaf_der, "the client sees the origin's certificate, not a Keyhaven leaf");
    let data = pattern(1024 * 1024 + 3);
    let (mut r, mut w) = tokio::io::split(&mut tls);
    let send = async {
        w.write_all(&data).await.expect("write");
        w.flush().await.expect("flush");
    };
    let mut back = vec![0u8; data.len()];
    let recv = async { r.read_exact(&mut back).await.expect("read") };
    tokio::time::timeout(TIMEOUT, async { tokio::join!(send, recv) }).await.expect("echo in time");
    assert_eq!(sha256(&back), sha256(&data), "tunnelled bytes are identical");
    drop(tls);
    assert_eq!(h.ca.cached_leaves(), 0, "no leaf was minted for a tunnelled host");
    assert!(h.records().is_empty(), "tunnels are not intercepted exchanges");

    if have_tool("curl", "curl") {
        let up_port = h.up.addr.port();
        let out = run_blocking(h.curl(&[
            "--cacert",
            h.up_ca_file.to_str().expect("path"),
            &format!("https://localhost:{up_port}/hello"),
        ]))
        .await;
        assert!(out.ok, "{}", out.stderr);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "upstream:/hello");
        // With only the Keyhaven CA trusted, an off-list host fails: the proxy did not decrypt it.
        let out = run_blocking(h.curl(&[
            "--cacert",
            h.ca_file.to_str().expect("path"),
            &format!("https://localhost:{up_port}/hello"),
        ]))
        .await;
        assert!(!out.ok, "an off-list host is never signed by the Keyhaven CA");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_answers_421_when_authority_differs_from_sni() {
    let h = harness().await;
    if have_tool("curl", "curl") {
        for flag in ["--http1.1", "--http2"] {
            let out = run_blocking(h.curl(&[
                flag,
                "--cacert",
                h.ca_file.to_str().expect("path"),
                "-H",
                "Host: api3.cursor.sh",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "https://api2.cursor.sh/echo",
            ]))
            .await;
            assert_eq!(String::from_utf8_lossy(&out.stdout), "421", "{flag}: {}", out.stderr);
        }
    }
    // CONNECT to one allowlisted host, SNI for another: closed without a certificate.
    let r = h.tls_via_proxy("api2.cursor.sh:443", "api3.cursor.sh", h.ca.cert_der(), &[]).await;
    assert!(r.is_err(), "SNI that differs from the CONNECT host is never terminated");
    assert!(h.up.state.seen.lock().expect("seen").is_empty(), "nothing reached the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_switches_mode_at_runtime_without_dropping_the_connection() {
    let h = harness().await;
    let tls = h.tls_via_proxy("api2.cursor.sh:443", "api2.cursor.sh", h.ca.cert_der(), &[b"h2"]).await.expect("tls");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.expect("h2");
    tokio::spawn(conn);
    let get = |path: &str| {
        Request::get(format!("https://api2.cursor.sh{path}")).body(Empty::<Bytes>::new()).expect("request")
    };
    let text = |resp: Response<Incoming>| async move {
        String::from_utf8(resp.into_body().collect().await.expect("body").to_bytes().to_vec()).expect("utf8")
    };
    assert_eq!(text(send.send_request(get("/local")).await.expect("local")).await, "local");
    // Account calls never reach the engine's service, whatever the mode.
    assert_eq!(
        text(send.send_request(get("/auth/full_stripe_profile")).await.expect("auth")).await,
        "upstream:/auth/full_stripe_profile"
    );
    h.mode.set(RoutingMode::Upstream);
    assert_eq!(h.proxy.mode.get(), RoutingMode::Upstream, "the handle shares the switch");
    assert_eq!(text(send.send_request(get("/local")).await.expect("same connection")).await, "upstream:/local");
    h.mode.set(RoutingMode::Local);
    assert_eq!(text(send.send_request(get("/local")).await.expect("same connection")).await, "local");
}

// ---------------------------------------------------------------------------------------------
// Bad input

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_survives_bad_input_and_leaks_no_task() {
    let h = harness().await;
    let baseline = h.spawner.len();
    assert_eq!(baseline, 1, "only the accept loop runs");

    // Garbage before CONNECT.
    let mut tcp = TcpStream::connect(h.proxy.addr).await.expect("connect");
    tcp.write_all(b"\x16\x03\x01\x02\x00garbage\r\n\r\n").await.expect("write");
    let mut resp = String::new();
    tcp.read_to_string(&mut resp).await.expect("read");
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");

    // A head that never ends is cut off at the size limit.
    let mut tcp = TcpStream::connect(h.proxy.addr).await.expect("connect");
    let _ = tcp.write_all(&vec![b'a'; 40 * 1024]).await;
    let mut resp = Vec::new();
    let _ = tcp.read_to_end(&mut resp).await;
    assert!(resp.is_empty() || resp.starts_with(b"HTTP/1.1 4"), "{}", String::from_utf8_lossy(&resp));

    // CONNECT to a closed port.
    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind").local_addr().expect("addr");
    let err = connect_via_proxy(h.proxy.addr, &format!("127.0.0.1:{}", closed.port())).await.expect_err("refused");
    assert!(err.to_string().starts_with("HTTP/1.1 502"), "{err}");

    // CONNECT without a port.
    let err = connect_via_proxy(h.proxy.addr, "api2.cursor.sh").await.expect_err("no port");
    assert!(err.to_string().starts_with("HTTP/1.1 400"), "{err}");

    // TLS handshake failure: garbage after an intercepted CONNECT.
    let mut tcp = connect_via_proxy(h.proxy.addr, "api2.cursor.sh:443").await.expect("connect");
    tcp.write_all(b"this is not a ClientHello at all\r\n\r\n").await.expect("write");
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(TIMEOUT, tcp.read_to_end(&mut rest)).await.expect("closed in time");

    // A client that trusts the wrong root aborts the handshake.
    assert!(h.tls_via_proxy("api2.cursor.sh:443", "api2.cursor.sh", &h.pki.ca_der, &[]).await.is_err());

    // A client that goes away mid-stream: the upstream sees the close promptly.
    for alpn in [&b"http/1.1"[..], &b"h2"[..]] {
        *h.up.state.hang_closed.lock().expect("lock") = None;
        let tls = h.tls_via_proxy("api2.cursor.sh:443", "api2.cursor.sh", h.ca.cert_der(), &[alpn]).await.expect("tls");
        let mut body = if alpn == b"h2" {
            let (mut send, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.expect("h2");
            let conn = tokio::spawn(conn);
            let req = Request::get("https://api2.cursor.sh/hang").body(Empty::<Bytes>::new()).expect("req");
            let resp = send.send_request(req).await.expect("response");
            assert_eq!(resp.status(), StatusCode::OK);
            let mut body = resp.into_body();
            body.frame().await.expect("a frame").expect("data");
            drop(body);
            drop(send);
            conn.abort();
            None
        } else {
            let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.expect("h1");
            let conn = tokio::spawn(conn);
            let req = Request::get("/hang").header("host", "api2.cursor.sh").body(Empty::<Bytes>::new()).expect("req");
            let resp = send.send_request(req).await.expect("response");
            let mut body = resp.into_body();
            body.frame().await.expect("a frame").expect("data");
            Some((body, conn, send))
        };
        let dropped_at = Instant::now();
        if let Some((b, conn, s)) = body.take() {
            drop(b);
            drop(s);
            conn.abort();
        }
        let mut closed = None;
        while dropped_at.elapsed() < Duration::from_secs(2) {
            closed = *h.up.state.hang_closed.lock().expect("lock");
            if closed.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let closed = closed.expect("the upstream stream was closed");
        let lag = closed.saturating_duration_since(dropped_at);
        assert!(lag < Duration::from_millis(250), "upstream saw the close after {lag:?}");
    }

    // No panic took the listener down, and every connection task ended (the upstream pool's
    // idle connections and its idle timer expire too).
    let left = h.settle_to(baseline + 1).await;
    assert!(left <= baseline + 1, "{left} tasks left, baseline {baseline}");
    assert!(h.tls_via_proxy("api2.cursor.sh:443", "api2.cursor.sh", h.ca.cert_der(), &[]).await.is_ok());
    let hangs: Vec<_> = h.records().into_iter().filter(|r| r.path == "/hang").collect();
    assert_eq!(hangs.len(), 2);
    assert!(hangs.iter().all(|r| !r.complete && r.bytes_out > 0), "{hangs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_absolute_uri_is_passed_through() {
    let h = harness().await;
    let origin = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = origin.local_addr().expect("addr").port();
    let server = tokio::spawn(async move {
        let (mut s, _) = origin.accept().await.expect("accept");
        let mut buf = vec![0u8; 4096];
        let n = s.read(&mut buf).await.expect("read");
        let req = String::from_utf8_lossy(&buf[..n]).into_owned();
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nplain").await.expect("write");
        req
    });
    let mut tcp = TcpStream::connect(h.proxy.addr).await.expect("connect");
    tcp.write_all(
        format!("GET http://127.0.0.1:{port}/p?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Connection: keep-alive\r\n\r\n")
            .as_bytes(),
    )
    .await
    .expect("write");
    let mut resp = String::new();
    tcp.read_to_string(&mut resp).await.expect("read");
    assert!(resp.starts_with("HTTP/1.1 200") && resp.ends_with("plain"), "{resp}");
    let seen = server.await.expect("origin");
    assert!(seen.starts_with("GET /p?q=1 HTTP/1.1\r\n"), "origin-form on the way out: {seen}");
    assert!(!seen.to_ascii_lowercase().contains("proxy-connection"), "{seen}");
}

// ---------------------------------------------------------------------------------------------
// Key custody

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ca_private_key_is_nowhere_on_disk_when_a_keyring_exists() {
    let h = harness().await;
    // Use the proxy once, so leaves are minted and any cache would be written.
    let _ = h.tls_via_proxy("api2.cursor.sh:443", "api2.cursor.sh", h.ca.cert_der(), &[]).await.expect("tls");
    let pem = h.keyring.get(KEYRING_ENTRY).expect("keyring").expect("the key is in the keyring");
    let key = KeyPair::from_pem(pem.expose_secret()).expect("key");
    let der = key.serialize_der();
    let needles: Vec<Vec<u8>> = vec![
        der.clone(),
        pem.expose_secret().as_bytes().to_vec(),
        // The base64 body of the PEM, in case of a re-wrapped copy.
        pem.expose_secret().lines().filter(|l| !l.starts_with("-----")).collect::<String>().into_bytes(),
    ];
    let mut hits = Vec::new();
    scan(h.dir.path(), &needles, &mut hits);
    assert!(hits.is_empty(), "root key bytes found on disk: {hits:?}");
    assert!(!CaPaths::new(h.dir.path().join("ca")).key_file().exists());
}

fn scan(dir: &Path, needles: &[Vec<u8>], hits: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = entry.path();
        if p.is_dir() {
            scan(&p, needles, hits);
        } else if let Ok(bytes) = std::fs::read(&p)
            && needles.iter().any(|n| !n.is_empty() && bytes.windows(n.len()).any(|w| w == n.as_slice()))
        {
            hits.push(p);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_starts_the_proxy_next_to_the_gateway() {
    let mock = crate::support::MockUpstream::start().await;
    let te = crate::support::TestEngine::start(&mock).await;
    let proxy = te.handle.proxy.clone().expect("the proxy is on by default");
    assert!(proxy.addr.ip().is_loopback());
    assert_ne!(proxy.addr, te.handle.addr);
    assert_eq!(proxy.mode.get(), RoutingMode::Hybrid);
    assert!(te.dir.path().join("ca").join(keyhaven::proxy::ca::CERT_FILE).exists());
    // Tunnels work through the engine's proxy.
    let target = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = target.local_addr().expect("addr").port();
    let mut tcp = connect_via_proxy(proxy.addr, &format!("127.0.0.1:{port}")).await.expect("tunnel");
    let (mut inner, _) = target.accept().await.expect("accept");
    tcp.write_all(b"ping").await.expect("write");
    let mut buf = [0u8; 4];
    inner.read_exact(&mut buf).await.expect("read");
    assert_eq!(&buf, b"ping");
    te.stop().await;
}

// ---------------------------------------------------------------------------------------------
// CA-1: the name-constraint matrix, with the production root

/// Names the real code path issues leaves for.
const ALLOWED: [&str; 5] =
    ["cursor.sh", "api2.cursor.sh", "agentn.global.api5.cursor.sh", "cursor.com", "www.cursor.com"];
/// Names it refuses; leaves for them are forged below with the root key, as a thief would.
const OFF_LIST: [&str; 8] = [
    "example.com",
    "evilcursor.sh",
    "cursor.sh.evil.com",
    "127.0.0.1",
    "cursor.shx",
    "api2.cursor.sh.example",
    "*.example.com",
    "api.openai.com",
];

struct Case {
    name: String,
    /// Which root signed it: "keyhaven" or "control".
    root: &'static str,
    cert_pem: String,
    key_pem: String,
    cert_der: CertificateDer<'static>,
    expect_ok: bool,
}

/// The host name a client asks for when checking `name` (a wildcard is checked with a name it
/// covers).
fn client_name(name: &str) -> String {
    name.strip_prefix("*.").map_or(name.to_owned(), |rest| format!("anything.{rest}"))
}

fn forged_leaf(
    name: &str,
    issuer: &Issuer<'_, KeyPair>,
    now: time::OffsetDateTime,
) -> (String, String, CertificateDer<'static>) {
    let mut params = keyhaven::proxy::ca::leaf_params("placeholder.cursor.sh", now).expect("params");
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    params.subject_alt_names = match name.parse::<std::net::IpAddr>() {
        Ok(ip) => vec![rcgen::SanType::IpAddress(ip)],
        Err(_) => vec![rcgen::SanType::DnsName(name.to_owned().try_into().expect("ia5"))],
    };
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, issuer).expect("sign");
    (cert.pem(), key.serialize_pem(), cert.der().clone())
}

struct Matrix {
    dir: tempfile::TempDir,
    root_pem: String,
    root_der: CertificateDer<'static>,
    control_pem: String,
    control_der: CertificateDer<'static>,
    cases: Vec<Case>,
}

fn matrix() -> Matrix {
    let now = time::OffsetDateTime::now_utc();
    let dir = tempfile::tempdir().expect("tempdir");
    let keyring = MemoryKeyring::default();
    let intercept = InterceptList::new(["cursor.sh", "cursor.com"]);
    let ca = LocalCa::create(&CaPaths::new(dir.path().join("ca")), &keyring, &intercept, now).expect("ca");
    let mut cases = Vec::new();
    for name in ALLOWED {
        let leaf = ca.issue_leaf(name, now).expect("allowlisted leaf");
        let key = KeyPair::try_from(&leaf.key_der).expect("key");
        let cert_pem = pem_encode("CERTIFICATE", leaf.cert_der.as_ref());
        cases.push(Case {
            name: name.into(),
            root: "keyhaven",
            cert_pem,
            key_pem: key.serialize_pem(),
            cert_der: leaf.cert_der,
            expect_ok: true,
        });
    }
    // The real code path refuses every off-list name.
    for name in OFF_LIST {
        let err = ca.issue_leaf(name, now).expect_err("off-list names get no leaf");
        assert_eq!(err.kind(), "ca_host_not_allowed", "{name}");
    }
    // A thief with the root key signs them anyway.
    let key = KeyPair::from_pem(keyring.get(KEYRING_ENTRY).expect("get").expect("key").expose_secret()).expect("key");
    let leaked = Issuer::from_ca_cert_pem(ca.cert_pem(), key).expect("issuer");
    // The control: the same root parameters without the name constraint.
    let mut control_params =
        keyhaven::proxy::ca::root_params(&intercept, now, keyhaven::proxy::ca::random_serial()).expect("params");
    control_params.name_constraints = None;
    let control_key = KeyPair::generate().expect("key");
    let control_cert = control_params.self_signed(&control_key).expect("control");
    let control = Issuer::new(control_params, control_key);
    for name in OFF_LIST {
        let (cert_pem, key_pem, cert_der) = forged_leaf(name, &leaked, now);
        cases.push(Case { name: name.into(), root: "keyhaven", cert_pem, key_pem, cert_der, expect_ok: false });
        let (cert_pem, key_pem, cert_der) = forged_leaf(name, &control, now);
        cases.push(Case { name: name.into(), root: "control", cert_pem, key_pem, cert_der, expect_ok: true });
    }
    Matrix {
        dir,
        root_pem: ca.cert_pem().to_owned(),
        root_der: ca.cert_der().clone(),
        control_pem: control_cert.pem(),
        control_der: control_cert.der().clone(),
        cases,
    }
}

fn pem_encode(label: &str, der: &[u8]) -> String {
    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::new();
    for chunk in der.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(char::from(B64[usize::try_from((n >> (18 - 6 * i)) & 63).expect("index")]));
            } else {
                b64.push('=');
            }
        }
    }
    let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).expect("ascii")).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

impl Matrix {
    fn root_der(&self, case: &Case) -> &CertificateDer<'static> {
        if case.root == "control" { &self.control_der } else { &self.root_der }
    }

    fn write(&self) -> Vec<(PathBuf, PathBuf, PathBuf)> {
        let root = self.dir.path().join("root.pem");
        let control = self.dir.path().join("control.pem");
        std::fs::write(&root, &self.root_pem).expect("write");
        std::fs::write(&control, &self.control_pem).expect("write");
        self.cases
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let cert = self.dir.path().join(format!("leaf-{i}.pem"));
                let key = self.dir.path().join(format!("leaf-{i}.key"));
                std::fs::write(&cert, &c.cert_pem).expect("write");
                std::fs::write(&key, &c.key_pem).expect("write");
                (if c.root == "control" { control.clone() } else { root.clone() }, cert, key)
            })
            .collect()
    }
}

#[test]
fn name_constraints_hold_in_rustls_webpki() {
    let m = matrix();
    let now = UnixTime::now();
    for c in &m.cases {
        let anchors = [webpki::anchor_from_trusted_cert(m.root_der(c)).expect("anchor")];
        let ee = webpki::EndEntityCert::try_from(&c.cert_der).expect("leaf parses");
        let chain = ee.verify_for_usage(
            &[webpki::ring::ECDSA_P256_SHA256],
            &anchors,
            &[],
            now,
            webpki::KeyUsage::server_auth(),
            None,
            None,
        );
        let name = client_name(&c.name);
        let server_name = ServerName::try_from(name.as_str()).expect("name");
        let verdict = chain.map(|_| ()).and_then(|()| ee.verify_is_valid_for_subject_name(&server_name));
        if c.expect_ok {
            assert!(verdict.is_ok(), "{} under {} root: {verdict:?}", c.name, c.root);
        } else {
            assert!(
                matches!(verdict, Err(webpki::Error::NameConstraintViolation)),
                "{} under {} root must violate the constraint: {verdict:?}",
                c.name,
                c.root
            );
        }
    }
}

#[test]
fn name_constraints_hold_in_openssl_and_strict_mode_passes() {
    if !have_tool("openssl", "openssl") {
        return;
    }
    let m = matrix();
    let files = m.write();
    let root = &files[0].0;
    let out = run_tool(Command::new("openssl").args(["verify", "-x509_strict", "-CAfile"]).arg(root).arg(root));
    assert!(out.ok, "the root passes -x509_strict: {}", String::from_utf8_lossy(&out.stdout));
    for (c, (root, cert, _)) in m.cases.iter().zip(&files) {
        let out = run_tool(Command::new("openssl").args(["verify", "-x509_strict", "-CAfile"]).arg(root).arg(cert));
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), out.stderr);
        if c.expect_ok {
            assert!(out.ok, "{} under {} root: {text}", c.name, c.root);
        } else {
            assert!(!out.ok && text.contains("subtree violation"), "{} under {} root: {text}", c.name, c.root);
        }
    }
}

const NODE_SCRIPT: &str = r#"
const tls = require('tls');
const fs = require('fs');
const cases = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
function one(c) {
  return new Promise((resolve) => {
    const server = tls.createServer({ key: fs.readFileSync(c.key), cert: fs.readFileSync(c.cert) }, (s) => s.end('ok'));
    server.listen(0, '127.0.0.1', () => {
      const opts = { host: '127.0.0.1', port: server.address().port,
                     ca: [...tls.rootCertificates, fs.readFileSync(c.root, 'utf8')] };
      if (!c.ip) opts.servername = c.name;
      const sock = tls.connect(opts, () => { sock.destroy(); server.close(); resolve('ok'); });
      sock.on('error', (e) => { server.close(); resolve('error ' + (e.code || '') + ' ' + e.message); });
    });
  });
}
(async () => { const out = []; for (const c of cases) out.push(await one(c)); console.log(JSON.stringify(out)); })();
"#;

#[test]
fn name_constraints_hold_in_node_tls() {
    if !have_tool("node", "nodejs") {
        return;
    }
    let m = matrix();
    let files = m.write();
    let cases: Vec<serde_json::Value> = m
        .cases
        .iter()
        .zip(&files)
        .map(|(c, (root, cert, key))| {
            serde_json::json!({"name": client_name(&c.name), "ip": c.name.parse::<std::net::IpAddr>().is_ok(),
                "root": root, "cert": cert, "key": key})
        })
        .collect();
    let input = m.dir.path().join("cases.json");
    std::fs::write(&input, serde_json::to_vec(&cases).expect("json")).expect("write");
    let script = m.dir.path().join("verify.js");
    std::fs::write(&script, NODE_SCRIPT).expect("write");
    let out = run_tool(Command::new("node").arg(&script).arg(&input));
    assert!(out.ok, "{}", out.stderr);
    let results: Vec<String> = serde_json::from_slice(&out.stdout).expect("node output");
    for (c, r) in m.cases.iter().zip(&results) {
        if c.expect_ok {
            assert_eq!(r, "ok", "{} under {} root", c.name, c.root);
        } else {
            assert!(r.to_ascii_lowercase().contains("subtree violation"), "{} under {} root: {r}", c.name, c.root);
        }
    }
}

#[test]
fn name_constraints_hold_in_nss_vfychain() {
    if !have_tool("certutil", "libnss3-tools") || !have_tool("vfychain", "libnss3-tools") {
        return;
    }
    let m = matrix();
    let files = m.write();
    let mut dbs = HashMap::new();
    for (kind, root) in [("keyhaven", &files[0].0), ("control", &files[ALLOWED.len() + 1].0)] {
        let db = m.dir.path().join(format!("nss-{kind}"));
        std::fs::create_dir_all(&db).expect("mkdir");
        let d = format!("sql:{}", db.display());
        assert!(run_tool(Command::new("certutil").args(["-N", "-d", &d, "--empty-password"])).ok);
        let add =
            run_tool(Command::new("certutil").args(["-A", "-d", &d, "-n", "root", "-t", "C,,", "-a", "-i"]).arg(root));
        assert!(add.ok, "{}", add.stderr);
        dbs.insert(kind, d);
    }
    for (c, (_, cert, _)) in m.cases.iter().zip(&files) {
        let out = run_tool(Command::new("vfychain").args(["-d", &dbs[c.root], "-u", "1", "-a"]).arg(cert));
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), out.stderr);
        if c.expect_ok {
            assert!(text.contains("Chain is good"), "{} under {} root: {text}", c.name, c.root);
        } else {
            assert!(text.contains("Chain is bad"), "{} under {} root: {text}", c.name, c.root);
        }
    }
}

/// Serves a fixed page over TLS with one leaf, until the returned sender is dropped.
async fn serve_page(cert: &CertificateDer<'static>, key_pem: &str) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    use rustls::pki_types::pem::PemObject;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("key");
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .expect("cert");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = &mut stopped => return,
                a = listener.accept() => a,
            };
            let Ok((tcp, _)) = accepted else { return };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let body = "<html><body>KEYHAVEN-MATRIX-OK</body></html>";
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(resp.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (addr, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn name_constraints_hold_in_headless_chromium() {
    if !have_tool("chromium", "chromium") || !have_tool("certutil", "libnss3-tools") {
        return;
    }
    let m = matrix();
    let files = m.write();
    // Each root is trusted through the user NSS database of its own HOME, as on a desktop.
    let mut homes = HashMap::new();
    for (kind, root) in [("keyhaven", &files[0].0), ("control", &files[ALLOWED.len() + 1].0)] {
        let home = m.dir.path().join(format!("home-{kind}"));
        let db = home.join(".pki").join("nssdb");
        std::fs::create_dir_all(&db).expect("mkdir");
        let d = format!("sql:{}", db.display());
        assert!(run_tool(Command::new("certutil").args(["-N", "-d", &d, "--empty-password"])).ok);
        let add =
            run_tool(Command::new("certutil").args(["-A", "-d", &d, "-n", "root", "-t", "C,,", "-a", "-i"]).arg(root));
        assert!(add.ok, "{}", add.stderr);
        homes.insert(kind, home);
    }
    // Two allowlisted names keep the run short; every off-list name and its control run.
    let cases = m.cases.iter().enumerate().filter(|(i, _)| *i < 2 || *i >= ALLOWED.len());
    for (i, c) in cases {
        let (addr, stop) = serve_page(&c.cert_der, &c.key_pem).await;
        let host =
            if c.name.parse::<std::net::IpAddr>().is_ok() { "127.0.0.1".to_owned() } else { client_name(&c.name) };
        let mut cmd = Command::new("chromium");
        cmd.env("HOME", &homes[c.root])
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions"])
            .arg(format!("--user-data-dir={}", m.dir.path().join(format!("profile-{i}")).display()))
            .arg("--host-resolver-rules=MAP * 127.0.0.1")
            .arg("--dump-dom")
            .arg(format!("https://{host}:{}/", addr.port()));
        let out = run_blocking(cmd).await;
        drop(stop);
        let loaded = String::from_utf8_lossy(&out.stdout).contains("KEYHAVEN-MATRIX-OK");
        assert_eq!(
            loaded,
            c.expect_ok,
            "{} under {} root: chromium stdout {:?}",
            c.name,
            c.root,
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Trust stores against fixtures (CA-5, CA-6): the real `update-ca-certificates` on a fixture
// root, and a real NSS database in a temporary HOME.

use keyhaven::proxy::trust::{
    Cmd, CmdOutput, CommandRunner, LinuxLayout, Outcome, RootRef, SystemRunner, TrustEnv, TrustOs, install, nss_db,
    status, uninstall,
};
use time::OffsetDateTime;

/// Records commands; runs the real `update-ca-certificates` and `certutil` when asked.
struct Recorder {
    log: Mutex<Vec<Cmd>>,
    real: bool,
}

impl CommandRunner for Recorder {
    fn run(&self, cmd: &Cmd) -> std::io::Result<CmdOutput> {
        self.log.lock().expect("log").push(cmd.clone());
        if self.real {
            return SystemRunner.run(cmd);
        }
        Ok(CmdOutput { success: true, code: Some(0), ..CmdOutput::default() })
    }
}

fn have_trust_tool(tool: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file() || d.join(tool).is_symlink()));
    if !found {
        assert!(
            std::env::var_os("KEYHAVEN_REQUIRE_TOOLS").is_none(),
            "`{tool}` is required (KEYHAVEN_REQUIRE_TOOLS is set)"
        );
    }
    found
}

fn real_root(dir: &Path) -> RootRef {
    let ca = LocalCa::create(
        &CaPaths::new(dir.join("ca")),
        &MemoryKeyring::default(),
        &InterceptList::new(["cursor.sh", "cursor.com"]),
        OffsetDateTime::now_utc(),
    )
    .expect("ca");
    RootRef {
        pem: ca.cert_pem().to_owned(),
        path: CaPaths::new(dir.join("ca")).cert(),
        nickname: format!("Keyhaven Local CA {}", &ca.fingerprint_sha256()[..8]),
        sha1: ca.fingerprint_sha1(),
    }
}

/// Every file under `dir` whose content contains `needle`, or that is a symlink to a Keyhaven file.
fn copies(dir: &Path, needle: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_symlink() {
            if std::fs::read_link(&p).is_ok_and(|t| t.to_string_lossy().contains("keyhaven")) {
                out.push(p);
            }
        } else if p.is_dir() {
            copies(&p, needle, out);
        } else if std::fs::read_to_string(&p).is_ok_and(|s| s.contains(needle)) {
            out.push(p);
        }
    }
}

#[test]
fn trust_debian_layout_install_is_idempotent_and_uninstall_leaves_zero_copies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = dir.path().join("root");
    for d in ["usr/local/share/ca-certificates", "usr/share/ca-certificates/mozilla", "etc/ssl/certs"] {
        std::fs::create_dir_all(fs.join(d)).expect("mkdir");
    }
    // One ordinary CA so the bundle is never empty (as on a real system).
    let other = real_root(&dir.path().join("other"));
    std::fs::write(fs.join("usr/share/ca-certificates/mozilla/Other.crt"), other.pem.replace("\r", "")).expect("w");
    std::fs::write(fs.join("etc/ca-certificates.conf"), "mozilla/Other.crt\n").expect("w");
    let root = real_root(dir.path());
    let real = have_trust_tool("update-ca-certificates") && have_trust_tool("openssl");
    let rec = Arc::new(Recorder { log: Mutex::default(), real });
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("mkdir");
    let env = TrustEnv { os: TrustOs::Linux, root: fs.clone(), home, runner: rec.clone() };
    assert_eq!(LinuxLayout::detect(&fs), Some(LinuxLayout::Debian));
    let first = install(&env, &root);
    assert_eq!(first[0].outcome, Outcome::Installed, "{first:?}");
    for _ in 0..2 {
        assert_eq!(install(&env, &root)[0].outcome, Outcome::AlreadyInstalled);
    }
    assert_eq!(status(&env, &root)[0].outcome, Outcome::Present);
    let body = root.pem.lines().nth(1).expect("a base64 line").to_owned();
    if real {
        let bundle = std::fs::read_to_string(fs.join("etc/ssl/certs/ca-certificates.crt")).expect("bundle");
        assert_eq!(bundle.matches(&body).count(), 1, "exactly one bundle entry");
    }
    assert_eq!(uninstall(&env)[0].outcome, Outcome::Removed(1));
    let mut left = Vec::new();
    copies(&fs, &body, &mut left);
    if real {
        assert!(left.is_empty(), "copies left after uninstall: {left:?}");
        let bundle = std::fs::read_to_string(fs.join("etc/ssl/certs/ca-certificates.crt")).expect("bundle");
        assert!(bundle.contains(other.pem.lines().nth(1).expect("line")), "other roots stay");
    } else {
        assert!(left.iter().all(|p| !p.starts_with(fs.join("usr/local"))), "{left:?}");
    }
    assert_eq!(uninstall(&env)[0].outcome, Outcome::Removed(0));
    let log = rec.log.lock().expect("log");
    let refreshes: Vec<String> =
        log.iter().filter(|c| c.program == "update-ca-certificates").map(ToString::to_string).collect();
    assert_eq!(refreshes.len(), 2, "one refresh per change: {refreshes:?}");
    assert!(refreshes[1].contains("--fresh"), "removal rebuilds links from scratch");
}

#[test]
fn trust_nss_user_db_install_is_idempotent_and_uninstall_removes_every_keyhaven_root() {
    if !have_trust_tool("certutil") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("mkdir");
    let env = TrustEnv {
        os: TrustOs::Linux,
        root: dir.path().join("no-system-store"),
        home: home.clone(),
        runner: Arc::new(SystemRunner),
    };
    let old = real_root(&dir.path().join("old"));
    let root = real_root(dir.path());
    assert_eq!(install(&env, &old)[1].outcome, Outcome::Installed, "creates the db when missing");
    assert_eq!(status(&env, &root)[1].outcome, Outcome::Stale);
    assert_eq!(install(&env, &root)[1].outcome, Outcome::Installed);
    assert_eq!(install(&env, &root)[1].outcome, Outcome::AlreadyInstalled);
    assert_eq!(status(&env, &root)[1].outcome, Outcome::Present);
    assert_eq!(uninstall(&env)[1].outcome, Outcome::Removed(2));
    assert_eq!(status(&env, &root)[1].outcome, Outcome::Absent);
    let list = SystemRunner.run(&Cmd::new("certutil", ["-d", &nss_db(&home), "-L"])).expect("list");
    assert!(!list.stdout.contains("Keyhaven"), "{}", list.stdout);
    // A read-only database is a clear failure, not a silent success.
    #[cfg(unix)]
    if !is_root() {
        use std::os::unix::fs::PermissionsExt;
        let db = home.join(".pki/nssdb");
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o500)).expect("chmod");
        for f in std::fs::read_dir(&db).expect("ls").flatten() {
            std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o400)).expect("chmod");
        }
        assert!(install(&env, &root)[1].outcome.is_failure());
    }
}

#[cfg(unix)]
fn is_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0).unwrap_or(false)
}

// ---------------------------------------------------------------------------------------------
// PX-7: full duplex over h2

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_relay_is_full_duplex() {
    let h = harness().await;
    let tls = h.tls_via_proxy("api2.cursor.sh:443", "api2.cursor.sh", h.ca.cert_der(), &[b"h2"]).await.expect("tls");
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.expect("h2");
    tokio::spawn(conn);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
    let stream = Box::pin(futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|x| (x, rx)) }));
    let req = Request::post("https://api2.cursor.sh/echo")
        .header("content-type", "application/connect+proto")
        .header("te", "trailers")
        .body(StreamBody::new(stream))
        .expect("request");
    let mut resp_fut = Some(tokio::spawn(async move { send.send_request(req).await }));
    let mut body = None;
    for i in 0..20u8 {
        tx.send(Ok(Frame::data(Bytes::from(vec![i; 100])))).await.expect("send frame");
        if let Some(fut) = resp_fut.take() {
            let resp = tokio::time::timeout(TIMEOUT, async { fut.await.expect("join").expect("response") })
                .await
                .expect("the response head arrives while the request is still open");
            assert_eq!(resp.status(), StatusCode::OK);
            body = Some(resp.into_body());
        }
        let b = body.as_mut().expect("body");
        // Each frame's echo arrives before the next frame is sent: nothing buffers the request.
        let mut got = 0;
        while got < 100 {
            let frame =
                tokio::time::timeout(TIMEOUT, b.frame()).await.expect("echo in time").expect("frame").expect("ok");
            let data = frame.into_data().expect("data");
            assert!(data.iter().all(|x| *x == i));
            got += data.len();
        }
    }
    drop(tx);
    let rest = tokio::time::timeout(TIMEOUT, body.expect("body").collect()).await.expect("end").expect("ok");
    assert!(rest.to_bytes().is_empty());
}
