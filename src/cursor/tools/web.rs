//! The `web_search` tool: with a search provider (`crate::search`), the user approves the search
//! first (`web_search_request_query`), then Keyhaven runs it server-side and the model gets the
//! results; a rejection is an error result with the user's reason. Without a provider the model
//! is told plainly that web search is unavailable (no query is sent). The card is a
//! `web_search_tool_call` (arguments only; the reference gives no result shape).

use serde::Deserialize;

use crate::cursor::protocol::agent::{
    self, interaction_query, interaction_response, tool_call, web_search_request_response,
};
use crate::cursor::tools::dispatch::{Call, CursorTools};
use crate::run::ToolOutput;

/// Results asked of the provider per search.
const MAX_HITS: usize = 8;

pub const UNAVAILABLE: &str = "Web search is unavailable: no search provider is configured in Keyhaven. Do not \
retry; answer from what you know, or ask the user for the information or a URL to fetch.";

#[derive(Deserialize)]
pub(crate) struct SearchIn {
    query: String,
}

impl CursorTools {
    pub(crate) async fn web_search(&self, c: Call<'_>, a: SearchIn) -> ToolOutput {
        let args = agent::WebSearchArgs { search_term: a.query.clone(), tool_call_id: c.id.to_owned() };
        let card = tool_call::Tool::WebSearchToolCall(agent::WebSearchToolCall { args: Some(args.clone()) });
        self.started(c, card.clone());
        let out = match &self.search {
            None => ToolOutput::error(UNAVAILABLE),
            Some(provider) => {
                let query = interaction_query::Query::WebSearchRequestQuery(agent::WebSearchRequestQuery {
                    args: Some(args.clone()),
                });
                match self.queries.ask(query).await {
                    Some(interaction_response::Result::WebSearchRequestResponse(r)) => match r.result {
                        Some(web_search_request_response::Result::Approved(_)) => {
                            match provider.search(&a.query, MAX_HITS).await {
                                Ok(hits) => ToolOutput::text(crate::search::render(&a.query, &hits)),
                                Err(e) => ToolOutput::error(format!("Web search failed: {e}")),
                            }
                        }
                        Some(web_search_request_response::Result::Rejected(r)) => {
                            let reason =
                                if r.reason.trim().is_empty() { String::new() } else { format!(": {}", r.reason) };
                            ToolOutput::error(format!("The user declined the web search{reason}."))
                        }
                        None => ToolOutput::error("The editor answered the web search request without a decision."),
                    },
                    None => ToolOutput::error("The web search request was abandoned."),
                }
            }
        };
        self.completed(c, card);
        out
    }
}
