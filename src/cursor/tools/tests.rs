//! Unit tests of the Cursor tool catalog, edits and JSON conversion, and of the web search tool's
//! approval flow (with a fake search provider; the engine ships none).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::cursor::protocol::agent::{self, AgentMode, interaction_response, web_search_request_response};
use crate::cursor::tools::catalog::Catalog;
use crate::cursor::tools::dispatch::CursorTools;
use crate::cursor::tools::exec::ExecChannel;
use crate::cursor::tools::query::QueryChannel;
use crate::cursor::tools::web::UNAVAILABLE;
use crate::cursor::transport::Output;
use crate::run::{ToolCall, ToolContext, ToolHost};
use crate::search::{SearchError, SearchHit, SearchProvider};

#[derive(Debug)]
struct Fake;

impl SearchProvider for Fake {
    fn search<'a>(&'a self, query: &'a str, limit: usize) -> BoxFuture<'a, Result<Vec<SearchHit>, SearchError>> {
        Box::pin(async move {
            Ok(vec![SearchHit {
                title: format!("About {query}"),
                url: "https://example.test/a".into(),
                snippet: format!("limit {limit}"),
            }])
        })
    }
}

fn tools(search: Option<Arc<dyn SearchProvider>>) -> (CursorTools, Arc<QueryChannel>) {
    let output = Arc::new(Output::new(1 << 20));
    let queries = QueryChannel::new(output.clone());
    let t = CursorTools {
        catalog: Arc::new(Catalog::build(AgentMode::Agent, &[])),
        exec: ExecChannel::new(output.clone(), Duration::from_secs(5)),
        output,
        workspace: None,
        todos: Arc::default(),
        queries: queries.clone(),
        search,
        fetcher: None,
        mode: Arc::new(crate::cursor::tools::interact::ModeCell::new(AgentMode::Agent)),
    };
    (t, queries)
}

fn call() -> (ToolCall, ToolContext) {
    (
        ToolCall { id: "c1".into(), name: "web_search".into(), input: json!({"query": "rust async"}) },
        ToolContext { run_id: "r1".into(), step: 1, cancel: CancellationToken::new() },
    )
}

/// Answers the first query with `result` once it is waiting.
async fn answer(queries: &QueryChannel, result: web_search_request_response::Result) {
    while queries.pending() == 0 {
        tokio::task::yield_now().await;
    }
    queries.deliver(agent::InteractionResponse {
        id: 1,
        result: Some(interaction_response::Result::WebSearchRequestResponse(agent::WebSearchRequestResponse {
            result: Some(result),
        })),
    });
}

#[tokio::test]
async fn an_approved_search_runs_on_the_provider() {
    let (t, queries) = tools(Some(Arc::new(Fake)));
    let (c, ctx) = call();
    let approve = web_search_request_response::Result::Approved(agent::WebSearchApproved {});
    let (out, ()) = futures::future::join(t.execute(c, ctx), answer(&queries, approve)).await;
    assert!(!out.is_error);
    assert!(out.joined_text().contains("About rust async") && out.joined_text().contains("https://example.test/a"));
    assert_eq!(queries.pending(), 0);
}

#[tokio::test]
async fn a_rejected_search_is_an_error_with_the_reason() {
    let (t, queries) = tools(Some(Arc::new(Fake)));
    let (c, ctx) = call();
    let reject = web_search_request_response::Result::Rejected(agent::WebSearchRejected { reason: "offline".into() });
    let (out, ()) = futures::future::join(t.execute(c, ctx), answer(&queries, reject)).await;
    assert!(out.is_error);
    assert_eq!(out.joined_text(), "The user declined the web search: offline.");
}

#[tokio::test]
async fn without_a_provider_the_model_is_told_search_is_unavailable() {
    let (t, queries) = tools(None);
    let (c, ctx) = call();
    let out = t.execute(c, ctx).await;
    assert!(out.is_error);
    assert_eq!(out.joined_text(), UNAVAILABLE);
    assert_eq!(queries.pending(), 0, "nothing to approve");
}
