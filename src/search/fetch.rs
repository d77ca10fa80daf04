//! [`HttpFetcher`]: Keyhaven's own `fetch_url`, run after the user approved the URL. An http(s)
//! GET with the shared client (redirects, timeout, User-Agent), the body read up to
//! `fetch_max_bytes` (then cut and marked truncated), HTML turned into Markdown, text and JSON
//! passed through, anything else (images, archives, binaries) refused with a message the model
//! can act on.

use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::header::{ACCEPT, CONTENT_TYPE};

use crate::search::http::{WebOptions, describe, display_url, read_capped};
use crate::search::{FetchedPage, PageFetcher, SearchError, convert};

/// What the `Accept` header asks for.
const ACCEPT_PAGES: &str = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.1";

/// Fetches pages over HTTP(S).
#[derive(Debug, Clone)]
pub struct HttpFetcher {
    client: reqwest::Client,
    max_bytes: usize,
    timeout: Duration,
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
    /// `client` comes from [`crate::search::http::client`] with the same `opts`.
    pub fn new(client: reqwest::Client, opts: &WebOptions) -> HttpFetcher {
        HttpFetcher { client, max_bytes: opts.max_bytes, timeout: opts.timeout }
    }

    async fn get(&self, url: &str) -> Result<FetchedPage, SearchError> {
        let fail = |m: String| SearchError::Fetch(m);
        let parsed =
            reqwest::Url::parse(url.trim()).map_err(|e| fail(format!("`{}` is not a URL ({e})", url.trim())))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(fail(format!("only http and https URLs can be fetched, not `{}:` URLs", parsed.scheme())));
        }
        let shown = display_url(&parsed);
        let resp = self
            .client
            .get(parsed)
            .header(ACCEPT, ACCEPT_PAGES)
            .send()
            .await
            .map_err(|e| fail(format!("fetching {shown} failed: {}", describe(&e, self.timeout))))?;
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
