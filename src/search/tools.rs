//! [`WebTools`]: the search provider and page fetcher `[web]` asks for, built on one shared
//! client. `search = "none"` gives no provider; `fetch = "editor"` gives no fetcher (the editor
//! fetches). The fetcher and the providers use clients built from the same `[web]` options (the
//! providers' follows no redirects). `app` installs the result into the Cursor backend; the
//! control service builds a provider the same way for its test search.

use std::sync::Arc;

use crate::config::{WebConfig, WebFetch, WebSearch};
use crate::search::brave::BraveSearch;
use crate::search::fetch::HttpFetcher;
use crate::search::http::{WebOptions, api_client};
use crate::search::searxng::Searxng;
use crate::search::{PageFetcher, SearchError, SearchProvider};
use crate::secrets::Secrets;

/// The web tools' implementations for one engine run.
#[derive(Debug, Clone, Default)]
pub struct WebTools {
    pub search: Option<Arc<dyn SearchProvider>>,
    pub fetcher: Option<Arc<dyn PageFetcher>>,
}

impl WebTools {
    /// Builds what `web` asks for. `secrets` resolves the Brave key on each search.
    pub fn from_config(web: &WebConfig, secrets: &Secrets) -> Result<WebTools, SearchError> {
        let opts = WebOptions::from_config(web);
        let fetcher: Option<Arc<dyn PageFetcher>> = match web.fetch {
            WebFetch::Keyhaven => Some(Arc::new(HttpFetcher::new(&opts))),
            WebFetch::Editor => None,
        };
        Ok(WebTools { search: search_provider(web, api_client(&opts)?, secrets)?, fetcher })
    }
}

/// The search provider `web` names, on `http` (an [`api_client`]; `None` for `search = "none"`).
pub fn search_provider(
    web: &WebConfig,
    http: reqwest::Client,
    secrets: &Secrets,
) -> Result<Option<Arc<dyn SearchProvider>>, SearchError> {
    let timeout = WebOptions::from_config(web).timeout;
    let base = web.search_base_url();
    Ok(match (web.search, base) {
        (WebSearch::None, _) => None,
        (WebSearch::Brave, Some(base)) => {
            Some(Arc::new(BraveSearch::new(http, &base, secrets.clone(), web.key_ref(), timeout)))
        }
        (WebSearch::Searxng, Some(base)) => Some(Arc::new(Searxng::new(http, &base, timeout))),
        (kind, None) => {
            return Err(SearchError::Provider(format!(
                "search = \"{}\" needs search_url (the instance's base URL)",
                kind.as_str()
            )));
        }
    })
}
