//! The run's ports: how it reaches a model ([`ModelPort`], with [`GatewayModel`] over
//! `provider::Gateway`), how a front end executes tools ([`ToolHost`]) and watches the run
//! ([`RunObserver`]).

use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::model::{self, Entry, ErrorInfo, Part, StreamEvent, Usage};
use crate::provider::{CallContext, Gateway};

/// A model call's events, in order.
pub type EventStream = BoxStream<'static, StreamEvent>;

/// What the run tells the model port about one call.
#[derive(Debug, Clone)]
pub struct ModelCall {
    /// Cancelled when the run no longer wants the call (the port must stop it).
    pub cancel: CancellationToken,
}

pub trait ModelPort: Send + Sync {
    /// Starts a streamed call. `Err` means nothing was streamed (the provider refused or failed).
    fn open<'a>(&'a self, request: model::Request, call: ModelCall) -> BoxFuture<'a, Result<EventStream, ErrorInfo>>;
}

/// [`ModelPort`] through the gateway: every model call is a recorded gateway call (its own row in
/// `calls`, with the front end's dialect and client names and its conversation and request ids).
#[derive(Debug, Clone)]
pub struct GatewayModel {
    pub gateway: Arc<Gateway>,
    pub dialect: &'static str,
    pub client: String,
    pub conversation_id: Option<String>,
    pub request_id: Option<String>,
}

impl ModelPort for GatewayModel {
    fn open<'a>(&'a self, request: model::Request, call: ModelCall) -> BoxFuture<'a, Result<EventStream, ErrorInfo>> {
        Box::pin(async move {
            let ctx = CallContext {
                id: format!("kh-{}-{:016x}", self.client, rand::random::<u64>()),
                dialect: self.dialect,
                client: self.client.clone(),
                request_body: None,
                cancel: call.cancel,
                conversation_id: self.conversation_id.clone(),
                request_id: self.request_id.clone(),
                session_id: None,
            };
            match self.gateway.call(request, ctx).await {
                Ok(stream) => {
                    Ok(futures::stream::unfold(stream, |mut s| async move { s.next().await.map(|e| (e, s)) }).boxed())
                }
                Err(f) => Err(f.error.info()),
            }
        })
    }
}

/// One tool call the model made, with its parsed arguments (a JSON string when they were not
/// valid JSON, see [`model::Part::ToolUse`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub input: Value,
}

/// A tool's result as the model will see it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// Text and image parts.
    pub content: Vec<Part>,
    pub is_error: bool,
}

impl ToolOutput {
    pub fn text(text: impl Into<String>) -> ToolOutput {
        ToolOutput { content: vec![Part::text(text)], is_error: false }
    }

    pub fn error(text: impl Into<String>) -> ToolOutput {
        ToolOutput { content: vec![Part::text(text)], is_error: true }
    }

    /// The text parts joined (for logs and tests).
    pub fn joined_text(&self) -> String {
        crate::model::joined_text(&self.content, "\n")
    }
}

/// What a tool execution knows about its run.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub run_id: String,
    pub step: u32,
    /// Cancelled when the round is abandoned (cancel, break). The future is dropped right after,
    /// so hosts must release what they hold on drop too.
    pub cancel: CancellationToken,
}

/// Executes tool calls for a run. Every call of a step is started at once; the run awaits them
/// concurrently. A host that panics produces an error result, never a hung or lost run.
pub trait ToolHost: Send + Sync {
    fn execute<'a>(&'a self, call: ToolCall, ctx: ToolContext) -> BoxFuture<'a, ToolOutput>;
}

/// What a run reports while it works (synchronously, in order).
#[derive(Debug, Clone, Copy)]
pub enum RunEvent<'a> {
    /// A model cycle begins (steps count from 1).
    StepStarted {
        step: u32,
    },
    ThinkingDelta(&'a str),
    TextDelta(&'a str),
    /// The model began a tool call; its arguments stream next.
    ToolCallBegin {
        step: u32,
        id: &'a str,
        name: &'a str,
    },
    ToolCallArgs {
        id: &'a str,
        delta: &'a str,
    },
    /// Usage of the current model call so far (totals, not increments).
    Usage(&'a Usage),
    /// The model cycle ended (the assistant message is committed).
    StepCompleted {
        step: u32,
        tool_calls: usize,
    },
    ToolRoundStarted {
        step: u32,
        calls: usize,
    },
    ToolRoundFinished {
        step: u32,
        failed: u32,
    },
    /// A message was appended to the transcript at position `seq` (front ends that mirror the
    /// transcript, e.g. for checkpoints, follow these).
    MessageAppended {
        seq: u64,
        entry: &'a Entry,
    },
    /// A compaction begins (the summary call runs next).
    CompactionStarted,
    /// A compaction ended: `summary` is `Some` when the transcript was replaced (`before` and
    /// `after` are its lengths, `entries` the transcript now, so mirrors can follow), `None` when
    /// it was kept.
    Compacted {
        before: usize,
        after: usize,
        summary: Option<&'a str>,
        entries: &'a [Entry],
    },
}

pub trait RunObserver: Send + Sync {
    fn on_event(&self, event: RunEvent<'_>);
}

/// Ignores every event.
impl RunObserver for () {
    fn on_event(&self, _: RunEvent<'_>) {}
}
