//! Compaction on Cursor's wire: the `summary_started`, `summary{summary}`, `summary_completed`
//! interaction updates (docs/cursor-wire.md §4.6, cases 10, 9, 11) around every compaction, and
//! the turn a `summarize_action` run request asks for.
//!
//! Compaction itself is `run::Summarizer`: during a run it happens before a model cycle when
//! the latest prompt used `[agent] compact_at` percent of the model's context window (from the
//! catalog's `context_window`), or after a mid-run `summarize_action`. A `summarize_action` as
//! the run request's own action compacts the conversation at once and ends the turn with
//! `turn_ended` and `{}` (an assistant acknowledgement follows the summary there, so the next
//! user message never follows another user message) and publishes the compacted state as a
//! checkpoint (blobs acknowledged first) before `turn_ended`. Either way the transcript is
//! replaced explicitly (the one exception to append-only; the store's copy is replaced in one
//! transaction), and later turns append to the compacted transcript again.

use std::collections::HashSet;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::cursor::agent::delivery::Injections;
use crate::cursor::agent::{AgentDeps, Routes, TurnEnd, pump};
use crate::cursor::blobs::{BlobChannel, BlobId};
use crate::cursor::checkpoint::Meta;
use crate::cursor::checkpoint::worker::{Publisher, Snapshot};
use crate::cursor::protocol::agent::{self, AgentMode, McpToolDefinition, interaction_update};
use crate::cursor::protocol::events::{self, TurnUsage};
use crate::cursor::tools::catalog::Catalog;
use crate::cursor::tools::exec::ExecChannel;
use crate::cursor::tools::query::QueryChannel;
use crate::cursor::transport::Transport;
use crate::model::{Entry, Message, Role};
use crate::run::compaction::summarized;
use crate::run::{GatewayModel, Journal, Summarizer};

pub fn summary_started() -> agent::AgentServerMessage {
    events::update(interaction_update::Message::SummaryStarted(agent::SummaryStartedUpdate {}))
}

pub fn summary(text: &str) -> agent::AgentServerMessage {
    events::update(interaction_update::Message::Summary(agent::SummaryUpdate { summary: text.to_owned() }))
}

pub fn summary_completed() -> agent::AgentServerMessage {
    events::update(interaction_update::Message::SummaryCompleted(agent::SummaryCompletedUpdate { hook_message: None }))
}

/// What the `summarize_action` run request says about the client's state.
#[derive(Debug)]
pub struct Incoming {
    /// Blob ids the client shows it holds (`checkpoint::held_by_client`).
    pub held: HashSet<BlobId>,
    pub mode: AgentMode,
    pub workspace_paths: Vec<String>,
}

/// The turn of a `summarize_action` run request: compacts the conversation (when it has
/// anything to compact), publishes the compacted checkpoint and ends.
pub async fn summarize_turn(
    deps: &AgentDeps<'_>,
    t: &Transport,
    conversation_id: Option<&str>,
    mcp: &[McpToolDefinition],
    model_name: String,
    incoming: Incoming,
) -> TurnEnd {
    let Some(id) = conversation_id.filter(|c| !c.is_empty()) else {
        return TurnEnd::Ended(TurnUsage::default());
    };
    let conversation = deps.conversations.get(id).await;
    conversation.supersede("summarize");
    let mut transcript = tokio::select! {
        biased;
        () = t.cancel.cancelled() => return TurnEnd::Shutdown,
        g = conversation.transcript.lock() => g,
    };
    let emit = |m: &agent::AgentServerMessage| t.output.publish(events::frame(m, false));
    if transcript.entries().iter().all(|e| e.message.role == Role::System) {
        return TurnEnd::Ended(TurnUsage::default());
    }
    let catalog = Catalog::build(AgentMode::Agent, mcp);
    let summarizer = Summarizer {
        model: Arc::new(GatewayModel {
            gateway: deps.gateway.clone(),
            dialect: "cursor",
            client: "cursor".to_owned(),
            conversation_id: Some(conversation.id.clone()),
            request_id: Some(t.request_id.clone()),
        }),
        model_name,
        tools: catalog.defs().to_vec(),
        percent: 0,
        requested: Arc::default(),
        cancel: t.cancel.child_token(),
    };
    emit(&summary_started());
    let text = tokio::select! {
        biased;
        () = t.cancel.cancelled() => return TurnEnd::Shutdown,
        s = summarizer.summary(transcript.entries()) => s,
    };
    if let Some(text) = text {
        let id = format!("{}:c0", t.request_id);
        let mut entries = summarized(transcript.entries(), &text, &id);
        // The next turn's user message must not follow the summary's user message directly.
        entries.push(Entry::new(
            format!("{id}:ack"),
            Message::text(Role::Assistant, "Understood. I will continue from this summary."),
        ));
        transcript.replace(entries);
        let journal = Journal::new(deps.conversations.store().cloned(), &conversation.id, &t.request_id);
        journal.replace(transcript.entries(), crate::clock::now_ms());
        let failed = journal.barrier().await;
        if failed > 0 {
            tracing::warn!(request_id = %t.request_id, "the compacted transcript was not persisted");
        }
        emit(&summary(&text));
        emit(&summary_completed());
        // The compacted state as a checkpoint (its blobs acknowledged first), so a client that
        // resumes or restores sees the summary, not the older transcript.
        let blobs = BlobChannel::new(t.output.clone());
        let (exec, queries) = (
            ExecChannel::new(t.output.clone(), deps.options.exec_timeout),
            QueryChannel::new(t.output.clone(), deps.options.question_timeout),
        );
        let no_cancel = AtomicBool::new(false);
        let routes = Routes {
            exec: &exec,
            blobs: &blobs,
            queries: &queries,
            output: &t.output,
            conversation: &conversation,
            run_id: &t.request_id,
            client_run_id: None,
            injections: &Injections::default(),
            compactor: None,
            run: None,
            early_cancel: &no_cancel,
        };
        let publisher = Publisher {
            blobs: blobs.clone(),
            output: t.output.clone(),
            acked: conversation.acked_blobs.clone(),
            held: incoming.held,
            sent: Mutex::default(),
            timeout: deps.options.blob_ack_timeout,
            meta: Meta { mode: incoming.mode, workspace_paths: incoming.workspace_paths, ..Meta::default() },
            mode: None,
            catalog: Some(Arc::new(catalog)),
            store: deps.conversations.store().cloned(),
            conversation_id: conversation.id.clone(),
            run_id: t.request_id.clone(),
            gave_up: AtomicBool::new(false),
            last: Mutex::default(),
        };
        let snap = Snapshot {
            entries: transcript.entries().to_vec(),
            used_tokens: 0,
            todos: conversation.todos().iter().map(prost::Message::encode_to_vec).collect(),
        };
        if pump(t, &routes, publisher.publish(&snap)).await.is_none() {
            return TurnEnd::Shutdown;
        }
        return TurnEnd::Ended(TurnUsage::default());
    }
    emit(&summary_completed());
    TurnEnd::Ended(TurnUsage::default())
}
