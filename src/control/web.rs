//! The web tools' settings (`[web]`) through the control service: read and change them, set or
//! clear the Brave Search key (write-only, in the keyring like provider keys), and run one test
//! search with the settings in the file.
//!
//! The engine installs its search provider and fetcher once per start, so setting changes apply
//! at the next start (`restartRequired` says when the file differs from the running engine); the
//! key is resolved on each search and applies at once.

use std::time::Instant;

use crate::config::{BRAVE_KEY_NAME, KeyRef, WebConfig, WebFetch, WebSearch};
use crate::control::{ControlError, ControlService, blocking, dto, edit, key_info, key_secret, keyring_of};
use crate::search::http::{WebOptions, api_client};
use crate::search::search_provider;

/// The longest test query.
const MAX_QUERY_CHARS: usize = 400;

impl ControlService {
    pub async fn web_settings(&self) -> Result<dto::WebSettings, ControlError> {
        let web = self.current().web;
        let keyring = keyring_of(&self.inner.gateway);
        let secrets = self.inner.gateway.secrets().clone();
        let key_ref = web.key_ref();
        let key = blocking(move || Ok(key_info(&key_ref, keyring.as_ref(), &secrets))).await?;
        Ok(dto::WebSettings {
            search: match web.search {
                WebSearch::None => dto::WebSearchKind::None,
                WebSearch::Brave => dto::WebSearchKind::Brave,
                WebSearch::Searxng => dto::WebSearchKind::Searxng,
            },
            search_url: web.search_url.clone(),
            effective_search_url: web.search_base_url(),
            fetch: match web.fetch {
                WebFetch::Keyhaven => dto::WebFetchMode::Keyhaven,
                WebFetch::Editor => dto::WebFetchMode::Editor,
            },
            fetch_max_bytes: web.fetch_max_bytes,
            timeout_ms: web.timeout,
            key,
            restart_required: web != self.inner.started_web,
        })
    }

    /// Writes the given `[web]` fields to the config file (validated like a start-up load).
    pub async fn set_web_settings(&self, input: dto::WebSettingsInput) -> Result<dto::WebSettings, ControlError> {
        self.change(move |doc, _| edit::set_web(doc, &input)).await?;
        self.web_settings().await
    }

    /// The keyring entry the Brave key lives in; refused when `[web] key` names an environment
    /// variable.
    fn web_key_entry(web: &WebConfig) -> Result<String, ControlError> {
        match &web.key {
            Some(KeyRef::Keyring(n)) => Ok(n.clone()),
            Some(KeyRef::Env(var)) => Err(ControlError::Invalid(format!(
                "the Brave Search key is read from the environment variable `{var}`; \
                 remove `key` from [web] to keep it in the keyring"
            ))),
            None => Ok(BRAVE_KEY_NAME.to_owned()),
        }
    }

    /// Stores the Brave Search key in the keyring, bound to the Brave search URL in effect (Brave's
    /// own endpoint unless `search = "brave"` names another), (and, with a config file and no `[web] key`
    /// yet, writes `key = "keyring:brave-search"` so the file says where it is).
    pub async fn set_web_key(&self, input: dto::KeyInput) -> Result<dto::WebSettings, ControlError> {
        let secret = key_secret(input)?;
        let web = self.current().web;
        let entry = Self::web_key_entry(&web)?;
        // Bound to the search URL the file names (Brave's own endpoint by default): the key never
        // goes anywhere else, so a `search_url` changed later needs the key entered again.
        let origin = match web.search {
            WebSearch::Brave => web.search_base_url(),
            WebSearch::None | WebSearch::Searxng => None,
        }
        .unwrap_or_else(|| crate::config::BRAVE_DEFAULT_URL.to_owned());
        let secrets = self.inner.gateway.secrets().clone();
        let name = entry.clone();
        blocking(move || Ok(secrets.store(&name, &origin, &secret)?)).await?;
        if web.key.is_none() && self.inner.config.path().is_some() {
            let key = format!("keyring:{entry}");
            self.change(move |doc, _| {
                edit::set_in_table(doc, "web", "key", toml_edit::Value::from(key.as_str()));
                Ok(())
            })
            .await?;
        }
        self.web_settings().await
    }

    /// Removes the Brave Search key from the keyring.
    pub async fn delete_web_key(&self) -> Result<dto::WebSettings, ControlError> {
        let entry = Self::web_key_entry(&self.current().web)?;
        let keyring = keyring_of(&self.inner.gateway);
        blocking(move || Ok(keyring.delete(&entry)?)).await?;
        self.inner.gateway.secrets().clear_cache();
        self.web_settings().await
    }

    /// Runs `query` through the provider the config file names (so a change can be tried before
    /// the restart that applies it).
    pub async fn test_web_search(&self, input: dto::WebTestInput) -> Result<dto::WebTestResult, ControlError> {
        let query = input.query.trim().to_owned();
        if query.is_empty() || query.chars().count() > MAX_QUERY_CHARS || query.chars().any(char::is_control) {
            return Err(ControlError::Invalid(format!(
                "the query must be 1 to {MAX_QUERY_CHARS} printable characters"
            )));
        }
        let web = self.current().web;
        let http = api_client(&WebOptions::from_config(&web)).map_err(|e| ControlError::Internal(e.to_string()))?;
        let started = Instant::now();
        let failed =
            |message: String| dto::WebTestResult { ok: false, hits: 0, first_title: None, latency_ms: 0, message };
        let provider = match search_provider(&web, http, self.inner.gateway.secrets()) {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(failed("web search is off (search = \"none\")".into())),
            Err(e) => return Ok(failed(e.to_string())),
        };
        let cancel = self.inner.shutdown.child_token();
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(ControlError::Unavailable("the engine is stopping".into())),
            r = provider.search(&query, 10) => r,
        };
        let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        Ok(match result {
            Ok(hits) => dto::WebTestResult {
                ok: true,
                hits: u32::try_from(hits.len()).unwrap_or(u32::MAX),
                first_title: hits.first().map(|h| h.title.clone()),
                latency_ms,
                message: format!("{} result(s)", hits.len()),
            },
            Err(e) => dto::WebTestResult { latency_ms, ..failed(e.to_string()) },
        })
    }
}
