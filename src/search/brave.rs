//! [`BraveSearch`]: the Brave Search API (`GET {base}/res/v1/web/search?q=&count=` with the
//! `X-Subscription-Token` header; results in `web.results[].{title,url,description}`).
//!
//! The key is resolved through [`Secrets`] on each search (cached there), so a key set or
//! cleared on the Settings page applies to the next search without a restart.

use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::header::ACCEPT;
use secrecy::ExposeSecret;
use serde::Deserialize;

use crate::config::KeyRef;
use crate::search::convert::strip_tags;
use crate::search::provider::{read_json, status_error, transport_error};
use crate::search::{SearchError, SearchHit, SearchProvider};
use crate::secrets::{BoundKey, Secrets};

const NAME: &str = "Brave Search";
/// Brave's largest `count`.
const MAX_COUNT: usize = 20;

#[derive(Debug, Clone)]
pub struct BraveSearch {
    client: reqwest::Client,
    base: String,
    secrets: Secrets,
    key: KeyRef,
    timeout: Duration,
}

#[derive(Debug, Deserialize)]
struct Answer {
    #[serde(default)]
    web: Option<Web>,
}

#[derive(Debug, Deserialize)]
struct Web {
    #[serde(default)]
    results: Vec<Hit>,
}

#[derive(Debug, Deserialize)]
struct Hit {
    #[serde(default)]
    title: String,
    url: String,
    #[serde(default)]
    description: String,
}

impl BraveSearch {
    /// `base` is the API's base URL (`https://api.search.brave.com`, or a test server).
    pub fn new(client: reqwest::Client, base: &str, secrets: Secrets, key: KeyRef, timeout: Duration) -> BraveSearch {
        BraveSearch { client, base: base.trim_end_matches('/').to_owned(), secrets, key, timeout }
    }

    async fn key(&self) -> Result<BoundKey, SearchError> {
        if let Some(k) = self.secrets.cached(&self.key) {
            return Ok(k);
        }
        let (secrets, key, base) = (self.secrets.clone(), self.key.clone(), self.base.clone());
        tokio::task::spawn_blocking(move || secrets.resolve(&key, &base))
            .await
            .map_err(|e| SearchError::Provider(format!("the keyring lookup failed: {e}")))?
            .map_err(|e| SearchError::Provider(format!("no {NAME} API key: {e}")))
    }

    async fn run(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, SearchError> {
        let key = self.key().await?;
        let count = limit.clamp(1, MAX_COUNT).to_string();
        let url = reqwest::Url::parse_with_params(
            &format!("{}/res/v1/web/search", self.base),
            [("q", query), ("count", count.as_str())],
        )
        .map_err(|e| SearchError::Provider(format!("the {NAME} URL `{}` is invalid: {e}", self.base)))?;
        // The key goes only to the origin it was stored for (`[web] search_url` may have moved).
        let secret = key.for_url(url.as_str()).map_err(|e| SearchError::Provider(format!("{NAME}: {e}")))?;
        let resp = self
            .client
            .get(url)
            .header(ACCEPT, "application/json")
            .header("X-Subscription-Token", secret.expose_secret())
            .send()
            .await
            .map_err(|e| transport_error(NAME, &e, self.timeout))?;
        if !resp.status().is_success() {
            return Err(status_error(NAME, &resp));
        }
        let answer: Answer = read_json(NAME, resp, self.timeout).await?;
        Ok(answer
            .web
            .map(|w| w.results)
            .unwrap_or_default()
            .into_iter()
            .take(limit)
            .map(|h| SearchHit { title: strip_tags(&h.title), url: h.url, snippet: strip_tags(&h.description) })
            .collect())
    }
}

impl SearchProvider for BraveSearch {
    fn search<'a>(&'a self, query: &'a str, limit: usize) -> BoxFuture<'a, Result<Vec<SearchHit>, SearchError>> {
        Box::pin(self.run(query, limit))
    }
}
