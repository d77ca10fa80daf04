//! The web behind the agent's tools: a pluggable [`SearchProvider`] for `web_search` and a
//! [`PageFetcher`] for server-side `fetch_url` (after the user's approval). Without a search
//! provider the tool tells the model plainly that web search is unavailable; without a fetcher
//! pages are fetched by the editor (exec `fetch_args`).
//!
//! Implementations, one job per file: [`http`] (the one client: User-Agent, timeout, redirect
//! limit, capped reads), [`fetch`] ([`HttpFetcher`]), [`convert`] (HTML to Markdown, snippet
//! tags), [`brave`] and [`searxng`] (the providers), `provider` (their shared status and JSON
//! handling) and [`tools`] ([`WebTools`], built from `[web]`).
//!
//! Invariant: `search` names no front end; it is traits, their data types and implementations,
//! so providers can be added without touching `cursor`. It reads no environment: the client is
//! built from `[web]` values and the Brave key comes through [`crate::secrets::Secrets`].

pub mod brave;
pub mod convert;
pub mod fetch;
pub mod http;
mod provider;
pub mod searxng;
pub mod tools;

#[cfg(test)]
mod tests;

pub use brave::BraveSearch;
pub use fetch::HttpFetcher;
pub use searxng::Searxng;
pub use tools::{WebTools, search_provider};

use futures::future::BoxFuture;

/// One search result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchHit {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SearchError {
    #[error("the search provider failed: {0}")]
    Provider(String),
    /// A page could not be fetched (the message says why, for the model and the user).
    #[error("{0}")]
    Fetch(String),
}

/// A web page fetched for the model, as text (HTML converted to Markdown-ish text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedPage {
    /// The final URL (after redirects).
    pub url: String,
    pub markdown: String,
    /// The page was longer than the fetcher's limit and was cut.
    pub truncated: bool,
}

pub trait PageFetcher: Send + Sync + std::fmt::Debug {
    /// Fetches an http(s) `url`.
    fn fetch<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<FetchedPage, SearchError>>;
}

pub trait SearchProvider: Send + Sync + std::fmt::Debug {
    /// At most `limit` results for `query`.
    fn search<'a>(&'a self, query: &'a str, limit: usize) -> BoxFuture<'a, Result<Vec<SearchHit>, SearchError>>;
}

/// The results as the model sees them.
pub fn render(query: &str, hits: &[SearchHit]) -> String {
    if hits.is_empty() {
        return format!("No web results for \"{query}\".");
    }
    let mut s = format!("Web results for \"{query}\":\n");
    for (i, h) in hits.iter().enumerate() {
        s.push_str(&format!("{}. {}\n   {}\n   {}\n", i + 1, h.title, h.url, h.snippet));
    }
    s
}
