//! The web tools' HTTP clients, built from `[web]` values passed in: a `Keyhaven/<version>`
//! User-Agent and a per-request timeout; search APIs (which carry a key) follow no redirects;
//! pages are fetched with a [`page_client`] whose resolver refuses loopback, private, link-local,
//! unique-local and other special addresses except for the host the user approved, and the fetcher
//! follows at most [`MAX_REDIRECTS`] redirects itself, checking every hop. Also the helpers every caller shares: reading a body up to a cap, describing a
//! transport error without its URL, and showing a URL without credentials.
//!
//! Invariant: no message built here carries a URL's user name or password, a request header or
//! an API key.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::config::WebConfig;
use crate::search::SearchError;

/// The User-Agent of every web-tool request.
pub const USER_AGENT: &str = concat!("Keyhaven/", env!("CARGO_PKG_VERSION"));
/// The most redirects one page fetch follows.
pub const MAX_REDIRECTS: usize = 5;

/// The client's knobs, from `[web]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebOptions {
    /// The whole request, body included.
    pub timeout: Duration,
    /// The most bytes of one fetched page.
    pub max_bytes: usize,
}

impl WebOptions {
    pub fn from_config(web: &WebConfig) -> WebOptions {
        WebOptions {
            timeout: Duration::from_millis(web.timeout.max(1)),
            max_bytes: usize::try_from(web.fetch_max_bytes.max(1)).unwrap_or(usize::MAX),
        }
    }
}

/// Resolves a host name to its addresses (the system resolver by default; tests give a map).
pub type Lookup = Arc<dyn Fn(String) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> + Send + Sync>;

/// The system resolver.
pub fn system_lookup() -> Lookup {
    Arc::new(|host: String| {
        Box::pin(async move { Ok(tokio::net::lookup_host((host.as_str(), 0)).await?.map(|a| a.ip()).collect()) })
    })
}

/// The name of the special range `ip` is in (loopback, private, link-local, unique-local, …), or
/// `None` for an ordinary public address. IPv4 addresses inside IPv6 (mapped, NAT64) count as the
/// IPv4 address.
pub fn special_range(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return special_v4(v4);
            }
            let seg = v6.segments();
            if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2..6] == [0, 0, 0, 0] {
                let [a, b] = seg[6].to_be_bytes();
                let [c, d] = seg[7].to_be_bytes();
                return special_v4(Ipv4Addr::new(a, b, c, d));
            }
            if v6.is_loopback() {
                Some("loopback")
            } else if v6.is_unspecified() {
                Some("unspecified")
            } else if seg[0] & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if seg[0] & 0xffc0 == 0xfec0 {
                Some("site-local")
            } else if seg[0] & 0xfe00 == 0xfc00 {
                Some("unique-local")
            } else if v6.is_multicast() {
                Some("multicast")
            } else if seg[0] == 0x2001 && seg[1] == 0x0db8 {
                Some("documentation")
            } else if seg[0..5] == [0, 0, 0, 0, 0] {
                // IPv4-compatible (deprecated) and other reserved low addresses.
                Some("reserved")
            } else {
                None
            }
        }
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if a == 0 {
        Some("unspecified")
    } else if a == 100 && (64..128).contains(&b) {
        Some("shared (carrier-grade NAT)")
    } else if a == 192 && b == 0 && c == 0 {
        Some("reserved")
    } else if (a == 192 && b == 0 && c == 2) || (a == 198 && b == 51 && c == 100) || (a == 203 && b == 0 && c == 113) {
        Some("documentation")
    } else if a == 198 && (18..20).contains(&b) {
        Some("benchmarking")
    } else if a >= 224 {
        Some("multicast or reserved")
    } else {
        None
    }
}

/// A URL's host as the approval compares it: lower case, without a trailing dot (IPv6 in brackets).
pub fn host_key(url: &reqwest::Url) -> String {
    url.host_str().unwrap_or("").trim_end_matches('.').to_ascii_lowercase()
}

/// The resolver of the page client: every address a name resolves to is checked, and a name that
/// resolves to a special address ([`special_range`]) is refused unless it is the approved host.
/// reqwest connects only to the addresses returned here, so what is checked is what is reached.
struct Guarded {
    lookup: Lookup,
    approved: String,
}

/// A refusal, as the resolver's error.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

impl Resolve for Guarded {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().trim_end_matches('.').to_ascii_lowercase();
        let approved = host == self.approved;
        let lookup = self.lookup.clone();
        Box::pin(async move {
            let addrs = lookup(host.clone()).await?;
            if !approved && let Some((ip, range)) = addrs.iter().find_map(|ip| special_range(*ip).map(|r| (ip, r))) {
                return Err(
                    Box::new(Refused(refusal(&host, Some(*ip), range))) as Box<dyn std::error::Error + Send + Sync>
                );
            }
            let addrs: Addrs = Box::new(addrs.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

/// Why `host` is not fetched.
pub fn refusal(host: &str, ip: Option<IpAddr>, range: &str) -> String {
    let via = ip.map(|ip| format!(" resolves to {ip}, which is")).unwrap_or_else(|| " is".to_owned());
    format!(
        "{host}{via} a {range} address (this machine or the local network); Keyhaven fetches such an address only \
         from a host the user approved exactly"
    )
}

/// Builds the client for one approved page fetch: no redirects (the fetcher follows them itself,
/// checking each hop), no proxy (the addresses checked are the ones connected to), and the
/// [`Guarded`] resolver with `approved` as the one host allowed to reach special addresses.
pub fn page_client(opts: &WebOptions, approved: String, lookup: Lookup) -> Result<reqwest::Client, SearchError> {
    reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .timeout(opts.timeout)
        .connect_timeout(opts.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(Guarded { lookup, approved }))
        .build()
        .map_err(|e| SearchError::Provider(format!("cannot build the HTTP client: {}", e.without_url())))
}

/// Builds the search-API client: the same settings, but no redirects, because reqwest keeps
/// custom headers (Brave's `X-Subscription-Token`) on a redirect to another host.
pub fn api_client(opts: &WebOptions) -> Result<reqwest::Client, SearchError> {
    build(opts, reqwest::redirect::Policy::none())
}

fn build(opts: &WebOptions, policy: reqwest::redirect::Policy) -> Result<reqwest::Client, SearchError> {
    reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .timeout(opts.timeout)
        .connect_timeout(opts.timeout)
        .redirect(policy)
        .build()
        .map_err(|e| SearchError::Provider(format!("cannot build the HTTP client: {}", e.without_url())))
}

/// `url` for messages: no user name or password, no fragment.
pub fn display_url(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_fragment(None);
    u.to_string()
}

/// A transport error in words, without the URL reqwest puts in its own message.
pub fn describe(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        return format!("no complete answer within {} s", timeout.as_secs_f64());
    }
    let mut parts = Vec::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.contains(&text) {
            parts.push(text);
        }
        source = s.source();
    }
    let detail = if parts.is_empty() { without_url(e) } else { parts.join(": ") };
    if e.is_redirect() {
        format!("redirect refused: {detail}")
    } else if e.is_connect() {
        format!("cannot connect: {detail}")
    } else {
        detail
    }
}

/// reqwest's own message with the URL it names taken out.
fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(url) = e.url() {
        s = s.replace(&format!(" ({url})"), "").replace(url.as_str(), "");
    }
    s
}

/// Reads `resp`'s body up to `cap` bytes; `true` when it was longer and cut there.
pub async fn read_capped(resp: reqwest::Response, cap: usize, timeout: Duration) -> Result<(Vec<u8>, bool), String> {
    let mut body = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| describe(&e, timeout))?;
        let room = cap.saturating_sub(body.len());
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}
