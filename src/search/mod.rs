//! Web search behind the agent's `web_search` tool: a pluggable [`SearchProvider`] (none ships
//! yet; the engine runs without one unless a front end or embedding passes one in). Without a
//! provider the tool tells the model plainly that web search is unavailable.
//!
//! Invariant: `search` names no front end; it is a trait and its data types, so providers can be
//! added (a search API over `provider`'s HTTP client, a local index) without touching `cursor`.

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
