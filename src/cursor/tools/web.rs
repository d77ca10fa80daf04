//! The web tools that Keyhaven runs server-side after the user's approval (docs/cursor-wire.md
//! §4.10: for web search and web fetch, the server fetches after the user approves).
//!
//! - `web_search`: with a search provider (`crate::search`), a `web_search_request_query`, then
//!   the search; the card is a `web_search_tool_call` whose result lists the references. Without
//!   a provider the model is told plainly that web search is unavailable (no query is sent).
//! - `fetch_url` with a fetcher installed ([`ToolKind::WebFetch`]): a `web_fetch_request_query`,
//!   then the fetch; the card is a `web_fetch_tool_call` with the page's Markdown. Without a
//!   fetcher `fetch_url` goes to the editor (`inspect`).
//!
//! A rejection is an error result carrying the user's reason; an abandoned query (cancel, break)
//! an error result too; the card always completes.
//!
//! [`ToolKind::WebFetch`]: crate::cursor::tools::catalog::ToolKind::WebFetch

use serde::Deserialize;

use crate::cursor::protocol::agent::{
    self, interaction_query, interaction_response, tool_call, web_fetch_request_response, web_fetch_result,
    web_search_request_response, web_search_result,
};
use crate::cursor::tools::dispatch::{Call, CursorTools};
use crate::cursor::tools::inspect::FetchIn;
use crate::run::ToolOutput;

/// Results asked of the provider per search.
const MAX_HITS: usize = 8;

pub const UNAVAILABLE: &str = "Web search is unavailable: no search provider is configured in Keyhaven. Do not \
retry; answer from what you know, or ask the user for the information or a URL to fetch.";

#[derive(Deserialize)]
pub(crate) struct SearchIn {
    query: String,
}

/// What the user decided on an approval query.
enum Decision {
    Approved,
    Rejected(String),
    /// No decision (the run abandoned the query, or the editor sent none); the message says which.
    None(String),
}

fn declined(what: &str, reason: &str) -> String {
    let reason = if reason.trim().is_empty() { String::new() } else { format!(": {}", reason.trim()) };
    format!("The user declined the {what}{reason}.")
}

impl CursorTools {
    async fn approve(&self, query: interaction_query::Query) -> Decision {
        match self.queries.ask(query).await {
            Ok(interaction_response::Result::WebSearchRequestResponse(r)) => match r.result {
                Some(web_search_request_response::Result::Approved(_)) => Decision::Approved,
                Some(web_search_request_response::Result::Rejected(r)) => Decision::Rejected(r.reason),
                None => Decision::None("The editor answered the request without a decision.".to_owned()),
            },
            Ok(interaction_response::Result::WebFetchRequestResponse(r)) => match r.result {
                Some(web_fetch_request_response::Result::Approved(_)) => Decision::Approved,
                Some(web_fetch_request_response::Result::Rejected(r)) => Decision::Rejected(r.reason),
                None => Decision::None("The editor answered the request without a decision.".to_owned()),
            },
            Ok(_) => Decision::None("The editor answered the request with another kind of response.".to_owned()),
            Err(e) => Decision::None(format!("no answer: {e}")),
        }
    }

    pub(crate) async fn web_search(&self, c: Call<'_>, a: SearchIn) -> ToolOutput {
        let args = agent::WebSearchArgs { search_term: a.query.clone(), tool_call_id: c.id.to_owned() };
        let card = |result: web_search_result::Result| {
            tool_call::Tool::WebSearchToolCall(agent::WebSearchToolCall {
                args: Some(args.clone()),
                result: Some(agent::WebSearchResult { result: Some(result) }),
            })
        };
        self.started(
            c,
            tool_call::Tool::WebSearchToolCall(agent::WebSearchToolCall { args: Some(args.clone()), result: None }),
        );
        let error = |msg: String| {
            (web_search_result::Result::Error(agent::WebSearchError { error: msg.clone() }), ToolOutput::error(msg))
        };
        let (result, out) = match &self.search {
            None => error(UNAVAILABLE.to_owned()),
            Some(provider) => {
                let query = interaction_query::Query::WebSearchRequestQuery(agent::WebSearchRequestQuery {
                    args: Some(args.clone()),
                });
                match self.approve(query).await {
                    Decision::Approved => match provider.search(&a.query, MAX_HITS).await {
                        Ok(hits) => {
                            let references = hits
                                .iter()
                                .map(|h| agent::WebSearchReference {
                                    title: h.title.clone(),
                                    url: h.url.clone(),
                                    chunk: h.snippet.clone(),
                                })
                                .collect();
                            (
                                web_search_result::Result::Success(agent::WebSearchSuccess { references }),
                                ToolOutput::text(crate::search::render(&a.query, &hits)),
                            )
                        }
                        Err(e) => error(format!("Web search failed: {e}")),
                    },
                    Decision::Rejected(reason) => (
                        web_search_result::Result::Rejected(agent::WebSearchRejected { reason: reason.clone() }),
                        ToolOutput::error(declined("web search", &reason)),
                    ),
                    Decision::None(msg) => error(format!("Web search: {msg}")),
                }
            }
        };
        self.completed(c, card(result));
        out
    }

    pub(crate) async fn web_fetch(&self, c: Call<'_>, a: FetchIn) -> ToolOutput {
        let args = agent::WebFetchArgs { url: a.url.clone(), tool_call_id: c.id.to_owned() };
        let card = |result: Option<web_fetch_result::Result>| {
            tool_call::Tool::WebFetchToolCall(agent::WebFetchToolCall {
                args: Some(args.clone()),
                result: result.map(|r| agent::WebFetchResult { result: Some(r) }),
            })
        };
        self.started(c, card(None));
        let error = |msg: String| {
            (
                web_fetch_result::Result::Error(agent::WebFetchError { url: a.url.clone(), error: msg.clone() }),
                ToolOutput::error(format!("Fetching {} failed: {msg}", a.url)),
            )
        };
        let (result, out) = match &self.fetcher {
            None => error("no page fetcher is configured".to_owned()),
            Some(fetcher) => {
                let query = interaction_query::Query::WebFetchRequestQuery(agent::WebFetchRequestQuery {
                    args: Some(args.clone()),
                    skip_approval: false,
                });
                match self.approve(query).await {
                    Decision::Approved => match fetcher.fetch(&a.url).await {
                        Ok(page) => {
                            let cut = if page.truncated { "\n[page truncated]" } else { "" };
                            // The card shows the final URL; a redirect to another host says so.
                            let markdown = match (host_of(&a.url), host_of(&page.url)) {
                                (Some(asked), Some(got)) if asked != got => {
                                    format!("> Redirected from {asked} to {got}.\n\n{}", page.markdown)
                                }
                                _ => page.markdown,
                            };
                            let text = format!("{}:\n{markdown}{cut}", page.url);
                            (
                                web_fetch_result::Result::Success(agent::WebFetchSuccess { url: page.url, markdown }),
                                ToolOutput::text(text),
                            )
                        }
                        Err(e) => error(e.to_string()),
                    },
                    Decision::Rejected(reason) => (
                        web_fetch_result::Result::Rejected(agent::WebFetchRejected { reason: reason.clone() }),
                        ToolOutput::error(declined(&format!("fetch of {}", a.url), &reason)),
                    ),
                    Decision::None(msg) => error(msg),
                }
            }
        };
        self.completed(c, card(Some(result)));
        out
    }
}

/// A URL's host (lower case), for telling the user a fetch ended on another host.
fn host_of(url: &str) -> Option<String> {
    let rest = url.trim().split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if host.starts_with('[') { host.split_inclusive(']').next()? } else { host.split(':').next()? };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}
