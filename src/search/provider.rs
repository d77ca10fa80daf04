//! What the search providers share: turning an answer's status into a [`SearchError::Provider`]
//! with a clear reason, and reading a JSON body (capped) into a typed value.

use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::search::SearchError;
use crate::search::http::{describe, display_url, read_capped};

/// The most bytes of a search answer read (results are a few KiB).
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// A failed request (no answer) in words.
pub(crate) fn transport_error(provider: &str, e: &reqwest::Error, timeout: Duration) -> SearchError {
    if e.is_timeout() {
        return SearchError::Provider(format!("{provider} did not answer within {} s", timeout.as_secs_f64()));
    }
    SearchError::Provider(format!("{provider} could not be reached: {}", describe(e, timeout)))
}

/// A non-2xx answer in words; a redirect (never followed: the request may carry a key) names
/// where it pointed.
pub(crate) fn status_error(provider: &str, resp: &reqwest::Response) -> SearchError {
    let code = resp.status().as_u16();
    SearchError::Provider(match code {
        401 | 403 => format!("{provider} refused the request (HTTP {code}): check the API key"),
        300..=399 => {
            let to = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|l| resp.url().join(l.trim()).ok())
                .map_or_else(|| "an address it did not give".to_owned(), |u| display_url(&u));
            format!(
                "{provider} answered with a redirect (HTTP {code}) to {to}, which Keyhaven does not follow; set \
                 search_url to the address it redirects to"
            )
        }
        429 => format!("{provider} rate limit reached (HTTP 429); try again later"),
        500..=599 => format!("{provider} is unavailable (HTTP {code}); try again later"),
        _ => format!("{provider} answered HTTP {code}"),
    })
}

/// The body of a 2xx answer as `T`.
pub(crate) async fn read_json<T: DeserializeOwned>(
    provider: &str,
    resp: reqwest::Response,
    timeout: Duration,
) -> Result<T, SearchError> {
    let (bytes, truncated) = read_capped(resp, MAX_ANSWER_BYTES, timeout)
        .await
        .map_err(|m| SearchError::Provider(format!("reading {provider}'s answer failed: {m}")))?;
    if truncated {
        return Err(SearchError::Provider(format!("{provider}'s answer is larger than 4 MiB")));
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        SearchError::Provider(format!(
            "{provider} sent an answer that is not the expected JSON (line {}, column {})",
            e.line(),
            e.column()
        ))
    })
}
