//! The proxy's accept loop and its first request on each connection: `CONNECT` (intercept or
//! tunnel) or an absolute-URI plain-HTTP request (passed through).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::proxy::intercept::{self, Shared};
use crate::proxy::{ProxyDeps, ProxyError, ProxyOptions};

/// The largest request head accepted from a proxy client.
pub const MAX_HEAD: usize = 16 * 1024;

pub(crate) fn run(socket: TcpListener, options: ProxyOptions, deps: ProxyDeps) -> Result<(), ProxyError> {
    let spawner = deps.spawner.clone();
    let token = spawner.root_token().child_token();
    let shared = Arc::new(Shared::new(options, deps)?);
    let accept_spawner = spawner.clone();
    spawner.spawn(token.clone(), async move {
        loop {
            let (stream, peer) = match socket.accept().await {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "proxy accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let shared = shared.clone();
            accept_spawner.spawn(token.child_token(), async move {
                if let Err(e) = handle(stream, shared).await {
                    tracing::debug!(%peer, error = %e, "proxy connection ended with an error");
                }
            });
        }
    });
    Ok(())
}

/// The parsed first request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, Vec<u8>)>,
    /// Length of the head in the buffer, including the blank line.
    pub len: usize,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeadError {
    Incomplete,
    TooLarge,
    Malformed(String),
}

/// Parses a request head from `buf`.
pub(crate) fn parse_head(buf: &[u8]) -> Result<Head, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => Ok(Head {
            method: req.method.unwrap_or_default().to_owned(),
            target: req.path.unwrap_or_default().to_owned(),
            headers: req.headers.iter().map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec())).collect(),
            len,
        }),
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => Err(HeadError::Incomplete),
        Err(e) => Err(HeadError::Malformed(e.to_string())),
    }
}

/// `host:port` of a CONNECT target, host lowercased and without IPv6 brackets.
pub(crate) fn connect_target(target: &str) -> Option<(String, u16)> {
    let authority: http::uri::Authority = target.parse().ok()?;
    let port = authority.port_u16()?;
    if authority.as_str().contains('@') {
        return None;
    }
    let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    (!host.is_empty()).then_some((host, port))
}

async fn respond(stream: &mut TcpStream, status: &str, body: &str) -> io::Result<()> {
    let msg = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(msg.as_bytes()).await?;
    stream.shutdown().await
}

async fn handle(mut stream: TcpStream, shared: Arc<Shared>) -> io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let head = tokio::time::timeout(shared.options.handshake_timeout, async {
        loop {
            match parse_head(&buf) {
                Err(HeadError::Incomplete) => {}
                other => return Ok::<_, io::Error>(other),
            }
            let mut chunk = [0u8; 2048];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(Err(HeadError::Incomplete));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    let head = match head {
        Err(_) => return respond(&mut stream, "408 Request Timeout", "request head timed out\n").await,
        Ok(r) => r?,
    };
    let head = match head {
        Ok(h) => h,
        Err(HeadError::Incomplete) => return Ok(()),
        Err(HeadError::TooLarge) => {
            return respond(&mut stream, "431 Request Header Fields Too Large", "request head too large\n").await;
        }
        Err(HeadError::Malformed(e)) => {
            return respond(&mut stream, "400 Bad Request", &format!("malformed request: {e}\n")).await;
        }
    };
    let rest = buf.split_off(head.len);
    if head.method.eq_ignore_ascii_case("CONNECT") {
        let Some((host, port)) = connect_target(&head.target) else {
            return respond(&mut stream, "400 Bad Request", "CONNECT needs host:port\n").await;
        };
        if shared.deps.ca.intercept().matches(&host) {
            stream.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await?;
            let stream = Rewind::new(rest, stream);
            return intercept::serve(stream, host, port, shared).await;
        }
        return tunnel(stream, &host, port, rest, &shared).await;
    }
    plain_http(stream, head, rest, &shared).await
}

/// A blind tunnel: dial, answer 200, then copy bytes both ways until either side closes.
async fn tunnel(mut client: TcpStream, host: &str, port: u16, rest: Vec<u8>, shared: &Shared) -> io::Result<()> {
    let dial = tokio::time::timeout(shared.options.connect_timeout, TcpStream::connect((host, port))).await;
    let mut upstream = match dial {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(host, port, error = %e, "tunnel target unreachable");
            return respond(&mut client, "502 Bad Gateway", &format!("cannot connect to {host}:{port}: {e}\n")).await;
        }
        Err(_) => {
            return respond(&mut client, "504 Gateway Timeout", &format!("connecting to {host}:{port} timed out\n"))
                .await;
        }
    };
    let _ = upstream.set_nodelay(true);
    client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await?;
    if !rest.is_empty() {
        upstream.write_all(&rest).await?;
    }
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await.map(|_| ())
}

/// A plain-HTTP request in absolute form: passed through to the origin, one request per
/// connection (`Connection: close`), never decrypted or recorded.
async fn plain_http(mut client: TcpStream, head: Head, rest: Vec<u8>, shared: &Shared) -> io::Result<()> {
    let Some(rest_of_url) = head.target.strip_prefix("http://") else {
        return respond(&mut client, "400 Bad Request", "this is a proxy: send CONNECT or an absolute http:// URI\n")
            .await;
    };
    let (authority, path) = match rest_of_url.find('/') {
        Some(i) => (&rest_of_url[..i], &rest_of_url[i..]),
        None => (rest_of_url, "/"),
    };
    let Ok(parsed) = authority.parse::<http::uri::Authority>() else {
        return respond(&mut client, "400 Bad Request", "bad host in URI\n").await;
    };
    let lengths = head.headers.iter().filter(|(n, _)| n == "content-length").count();
    let chunked = head.headers.iter().any(|(n, _)| n == "transfer-encoding");
    if lengths > 1 || (lengths == 1 && chunked) {
        return respond(&mut client, "400 Bad Request", "ambiguous message length\n").await;
    }
    let host = parsed.host().trim_start_matches('[').trim_end_matches(']').to_owned();
    let port = parsed.port_u16().unwrap_or(80);
    let dial = tokio::time::timeout(shared.options.connect_timeout, TcpStream::connect((host.as_str(), port))).await;
    let mut upstream = match dial {
        Ok(Ok(s)) => s,
        _ => return respond(&mut client, "502 Bad Gateway", &format!("cannot connect to {host}:{port}\n")).await,
    };
    let mut out = format!("{} {} HTTP/1.1\r\n", head.method, path).into_bytes();
    let dropped = ["connection", "proxy-connection", "keep-alive", "proxy-authorization", "te", "trailer", "upgrade"];
    for (name, value) in &head.headers {
        if dropped.contains(&name.as_str()) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"connection: close\r\n\r\n");
    out.extend_from_slice(&rest);
    upstream.write_all(&out).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await.map(|_| ())
}

/// A stream that first yields bytes already read past the request head.
pub(crate) struct Rewind<S> {
    prefix: Vec<u8>,
    pos: usize,
    inner: S,
}

impl<S> Rewind<S> {
    pub(crate) fn new(prefix: Vec<u8>, inner: S) -> Rewind<S> {
        Rewind { prefix, pos: 0, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.pos < self.prefix.len() {
            let n = (self.prefix.len() - self.pos).min(buf.remaining());
            let start = self.pos;
            buf.put_slice(&self.prefix[start..start + n]);
            self.pos += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
