//! [`Searxng`]: a SearXNG instance's JSON API (`GET {base}/search?q=&format=json`; results in
//! `results[].{title,url,content}`). No key. The instance must enable the JSON format
//! (`search.formats` in its `settings.yml`); otherwise it answers 403, which the message says.

use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::header::ACCEPT;
use serde::Deserialize;

use crate::search::convert::strip_tags;
use crate::search::provider::{read_json, status_error, transport_error};
use crate::search::{SearchError, SearchHit, SearchProvider};

const NAME: &str = "SearXNG";

#[derive(Debug, Clone)]
pub struct Searxng {
    client: reqwest::Client,
    base: String,
    timeout: Duration,
}

#[derive(Debug, Deserialize)]
struct Answer {
    #[serde(default)]
    results: Vec<Hit>,
}

#[derive(Debug, Deserialize)]
struct Hit {
    #[serde(default)]
    title: String,
    url: String,
    #[serde(default)]
    content: Option<String>,
}

impl Searxng {
    pub fn new(client: reqwest::Client, base: &str, timeout: Duration) -> Searxng {
        Searxng { client, base: base.trim_end_matches('/').to_owned(), timeout }
    }

    async fn run(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, SearchError> {
        let url = reqwest::Url::parse_with_params(&format!("{}/search", self.base), [("q", query), ("format", "json")])
            .map_err(|e| SearchError::Provider(format!("the {NAME} URL `{}` is invalid: {e}", self.base)))?;
        let resp = self
            .client
            .get(url)
            .header(ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| transport_error(NAME, &e, self.timeout))?;
        let status = resp.status();
        if status == reqwest::StatusCode::FORBIDDEN {
            return Err(SearchError::Provider(format!(
                "{NAME} refused the request (HTTP 403): the instance must allow the JSON format \
                 (search.formats in its settings.yml)"
            )));
        }
        if !status.is_success() {
            return Err(status_error(NAME, &resp));
        }
        let answer: Answer = read_json(NAME, resp, self.timeout).await?;
        Ok(answer
            .results
            .into_iter()
            .take(limit)
            .map(|h| SearchHit {
                title: strip_tags(&h.title),
                url: h.url,
                snippet: strip_tags(h.content.as_deref().unwrap_or("")),
            })
            .collect())
    }
}

impl SearchProvider for Searxng {
    fn search<'a>(&'a self, query: &'a str, limit: usize) -> BoxFuture<'a, Result<Vec<SearchHit>, SearchError>> {
        Box::pin(self.run(query, limit))
    }
}
