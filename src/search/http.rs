//! The web tools' HTTP clients, built from `[web]` values passed in: a `Keyhaven/<version>`
//! User-Agent and a per-request timeout; pages follow at most [`MAX_REDIRECTS`] redirects and only
//! to http(s), search APIs (which carry a key) follow none. Also the helpers every caller shares: reading a body up to a cap, describing a
//! transport error without its URL, and showing a URL without credentials.
//!
//! Invariant: no message built here carries a URL's user name or password, a request header or
//! an API key.

use std::time::Duration;

use futures::StreamExt;

use crate::config::WebConfig;
use crate::search::SearchError;

/// The User-Agent of every web-tool request.
pub const USER_AGENT: &str = concat!("Keyhaven/", env!("CARGO_PKG_VERSION"));
/// The most redirects one request follows.
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

/// Builds the page client (follows redirects, see [`MAX_REDIRECTS`]).
pub fn client(opts: &WebOptions) -> Result<reqwest::Client, SearchError> {
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        if attempt.previous().len() >= MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else if !matches!(attempt.url().scheme(), "http" | "https") {
            let scheme = attempt.url().scheme().to_owned();
            attempt.error(format!("a redirect to a `{scheme}:` URL (only http and https are followed)"))
        } else {
            attempt.follow()
        }
    });
    build(opts, policy)
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
