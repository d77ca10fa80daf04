//! [`HttpFetcher`]: Keyhaven's own `fetch_url`, run after the user approved the URL. An http(s)
//! GET (timeout, User-Agent), the body read up to
//! `fetch_max_bytes` (then cut and marked truncated), HTML turned into Markdown, text and JSON
//! passed through, anything else (images, archives, binaries) refused with a message the model
//! can act on.
//!
//! The user approved one URL, so its host is the one host that may be on this machine or the
//! local network. Redirects (at most [`MAX_REDIRECTS`], http(s) only) are followed here, hop by
//! hop: an IP literal in a special range ([`special_range`]: loopback, private, link-local such as
//! 169.254.169.254, unique-local, …) is refused unless it is the approved host, and names are
//! resolved by the client's checking resolver ([`page_client`]), which connects only to the
//! addresses it checked.

use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::header::{ACCEPT, CONTENT_TYPE, LOCATION};

use crate::search::http::{
    Lookup, MAX_REDIRECTS, WebOptions, describe, display_url, host_key, page_client, read_capped, refusal,
    special_range, system_lookup,
};
use crate::search::{FetchedPage, PageFetcher, SearchError, convert};

/// What the `Accept` header asks for.
const ACCEPT_PAGES: &str = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.1";

/// Fetches pages over HTTP(S).
#[derive(Clone)]
pub struct HttpFetcher {
    opts: WebOptions,
    lookup: Lookup,
    max_bytes: usize,
    timeout: Duration,
}

impl std::fmt::Debug for HttpFetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpFetcher").field("opts", &self.opts).finish_non_exhaustive()
    }
}

/// How a body is turned into text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Html,
    Text,
    /// No content type: decided from the bytes.
    Unknown,
}

impl HttpFetcher {
    /// A fetcher with the system resolver.
    pub fn new(opts: &WebOptions) -> HttpFetcher {
        HttpFetcher::with_lookup(opts, system_lookup())
    }

    /// A fetcher whose names resolve through `lookup` (tests).
    pub fn with_lookup(opts: &WebOptions, lookup: Lookup) -> HttpFetcher {
        HttpFetcher { opts: *opts, lookup, max_bytes: opts.max_bytes, timeout: opts.timeout }
    }

    async fn get(&self, url: &str) -> Result<FetchedPage, SearchError> {
        let fail = |m: String| SearchError::Fetch(m);
        let parsed =
            reqwest::Url::parse(url.trim()).map_err(|e| fail(format!("`{}` is not a URL ({e})", url.trim())))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(fail(format!("only http and https URLs can be fetched, not `{}:` URLs", parsed.scheme())));
        }
        let shown = display_url(&parsed);
        let approved = host_key(&parsed);
        let client = page_client(&self.opts, approved.clone(), self.lookup.clone())?;
        let mut at = parsed;
        let mut hops = 0usize;
        let resp = loop {
            check_literal(&at, &approved).map_err(|m| fail(format!("fetching {} refused: {m}", display_url(&at))))?;
            let resp = client.get(at.clone()).header(ACCEPT, ACCEPT_PAGES).send().await.map_err(|e| {
                let hop = if hops > 0 { format!(" (redirected to {})", display_url(&at)) } else { String::new() };
                fail(format!("fetching {shown}{hop} failed: {}", describe(&e, self.timeout)))
            })?;
            let location = resp.headers().get(LOCATION).and_then(|v| v.to_str().ok());
            let Some(location) = location.filter(|_| resp.status().is_redirection()) else { break resp };
            let next = at
                .join(location.trim())
                .map_err(|e| fail(format!("fetching {shown} failed: a redirect to `{location}`, not a URL ({e})")))?;
            if hops >= MAX_REDIRECTS {
                return Err(fail(format!("fetching {shown} failed: more than {MAX_REDIRECTS} redirects")));
            }
            if !matches!(next.scheme(), "http" | "https") {
                return Err(fail(format!(
                    "fetching {shown} failed: redirect refused: a redirect to a `{}:` URL (only http and https are followed)",
                    next.scheme()
                )));
            }
            hops += 1;
            at = next;
        };
        let final_url = display_url(resp.url());
        let status = resp.status();
        if !status.is_success() {
            let reason = status.canonical_reason().map(|r| format!(" {r}")).unwrap_or_default();
            return Err(fail(format!("{final_url} returned HTTP {}{reason}", status.as_u16())));
        }
        let content_type = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
            .filter(|v| !v.is_empty());
        let kind = match content_type.as_deref() {
            None => Body::Unknown,
            Some(t) => classify(t).ok_or_else(|| {
                fail(format!(
                    "{final_url} is `{t}`, not a page Keyhaven can read (only HTML, text and JSON are fetched)"
                ))
            })?,
        };
        let (bytes, truncated) = read_capped(resp, self.max_bytes, self.timeout)
            .await
            .map_err(|m| fail(format!("reading {final_url} failed: {m}")))?;
        let kind = match kind {
            Body::Unknown => sniff(&bytes).ok_or_else(|| {
                fail(format!("{final_url} has no content type and is not text; only HTML, text and JSON are fetched"))
            })?,
            k => k,
        };
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if truncated {
            // A cut in the middle of a character leaves a replacement character at the end.
            text.truncate(text.trim_end_matches('\u{FFFD}').len());
        }
        let markdown = match kind {
            // Parsing a large page is CPU work: off the async threads.
            Body::Html => tokio::task::spawn_blocking(move || convert::html_to_markdown(&text))
                .await
                .map_err(|e| fail(format!("converting {final_url} failed: {e}")))?,
            Body::Text | Body::Unknown => text,
        };
        Ok(FetchedPage { url: final_url, markdown, truncated })
    }
}

impl PageFetcher for HttpFetcher {
    fn fetch<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<FetchedPage, SearchError>> {
        Box::pin(self.get(url))
    }
}

/// Refuses an IP-literal host in a special range unless it is the approved host (names are checked
/// by the client's resolver).
fn check_literal(url: &reqwest::Url, approved: &str) -> Result<(), String> {
    let ip = match url.host() {
        Some(url::Host::Ipv4(ip)) => std::net::IpAddr::V4(ip),
        Some(url::Host::Ipv6(ip)) => std::net::IpAddr::V6(ip),
        Some(url::Host::Domain(_)) => return Ok(()),
        None => return Err("the URL has no host".to_owned()),
    };
    match special_range(ip) {
        Some(range) if host_key(url) != approved => Err(refusal(&host_key(url), None, range)),
        _ => Ok(()),
    }
}

/// How a content type is read; `None` refuses it.
fn classify(content_type: &str) -> Option<Body> {
    match content_type {
        "text/html" | "application/xhtml+xml" => Some(Body::Html),
        t if t.starts_with("text/") => Some(Body::Text),
        "application/json"
        | "application/xml"
        | "application/javascript"
        | "application/x-yaml"
        | "application/yaml"
        | "application/toml" => Some(Body::Text),
        t if t.ends_with("+json") || t.ends_with("+xml") => Some(Body::Text),
        _ => None,
    }
}

/// An untyped body: HTML if it looks like it, text if it is UTF-8 without NULs, else `None`.
fn sniff(bytes: &[u8]) -> Option<Body> {
    let head = &bytes[..bytes.len().min(1024)];
    if head.contains(&0) {
        return None;
    }
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        // A cut inside the last character is fine; anything else is not text.
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&head[..e.valid_up_to()]).ok()?,
        Err(_) => return None,
    };
    let lower = text.trim_start().to_ascii_lowercase();
    if lower.starts_with("<!doctype html") || lower.starts_with("<html") { Some(Body::Html) } else { Some(Body::Text) }
}
