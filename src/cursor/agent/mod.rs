//! One Cursor agent turn on the generic run engine (`crate::run`): compiles the run request
//! (model, user message, mode, MCP tools, workspace), picks up the conversation's transcript,
//! runs the engine with Cursor's tool host and maps its events to interaction updates.
//!
//! While the run works, this driver reads the transport's inbox (seqno order) and routes each
//! client message: exec results and exec control to the run's [`ExecChannel`], conversation
//! actions through [`delivery`] to the conversation's current run (cancel, insert, break,
//! summarize); heartbeats, KV acks and the rest are ignored. The run future is polled in the
//! same task (no spawn), and a panic inside it still ends the turn.
//!
//! The turn's first messages: the system prompt (first turn only), messages left pending by the
//! previous run, then the user message. A user message whose id the transcript holds already (a
//! resubmission after an error) is appended again under a run-scoped id unless it is the
//! transcript's last message, so every request ends with the user's message. A run request whose
//! action is `summarize_action` compacts the conversation and ends (see [`compact`]).
//!
//! Invariant: a turn without tool calls produces exactly the frames of the part-1 turn
//! (`thinking_delta`, `thinking_completed`, `text_delta`, `token_delta`, then the terminal).

pub mod compact;
pub mod delivery;
mod prompt;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use tokio::time::Instant;

use crate::cursor::agent::delivery::Delivery;
use crate::cursor::conversation::{Conversation, Conversations};
use crate::cursor::protocol::agent::{self, AgentMode, agent_client_message, conversation_action};
use crate::cursor::protocol::connect;
use crate::cursor::protocol::events::{self, TurnUsage};
use crate::cursor::tools::catalog::Catalog;
use crate::cursor::tools::dispatch::{CursorTools, model_call_id};
use crate::cursor::tools::exec::ExecChannel;
use crate::cursor::tools::query::QueryChannel;
use crate::cursor::transport::{Output, Transport};
use crate::model::{Entry, ErrorInfo, Message, Role, RunStatus};
use crate::provider::Gateway;
use crate::run::RunCommand;
use crate::run::{
    CancelReason, CommandResult, GatewayModel, Journal, RunEvent, RunObserver, RunPorts, RunSpec, Summarizer,
    command_channel,
};

/// Limits of the agent loop (from `[agent]`).
#[derive(Debug, Clone, Copy)]
pub struct AgentOptions {
    pub max_steps: u32,
    /// How long the client may stay silent on one exec.
    pub exec_timeout: Duration,
    /// Compact when the latest prompt used this share (percent) of the model's context window
    /// (0: only on Cursor's summarize action).
    pub compact_at_percent: u64,
}

impl Default for AgentOptions {
    fn default() -> AgentOptions {
        AgentOptions { max_steps: 50, exec_timeout: Duration::from_secs(300), compact_at_percent: 80 }
    }
}

/// How a turn ended, for the transport's terminal.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEnd {
    Ended(TurnUsage),
    Shutdown,
    Provider(ErrorInfo),
    Internal(String),
}

/// What a turn needs from the backend.
#[derive(Debug)]
pub struct AgentDeps<'a> {
    pub gateway: &'a Arc<Gateway>,
    pub conversations: &'a Conversations,
    pub options: AgentOptions,
    /// The web search provider (`None`: the model is told search is unavailable).
    pub search: Option<Arc<dyn crate::search::SearchProvider>>,
}

/// Runs one turn for `run` (whose model resolved to `model_name`) on transport `t`.
pub async fn run_turn(deps: AgentDeps<'_>, t: &Transport, run: agent::AgentRunRequest, model_name: String) -> TurnEnd {
    let action = match run.action.and_then(|a| a.action) {
        Some(conversation_action::Action::UserMessageAction(action)) => action,
        Some(conversation_action::Action::SummarizeAction(_)) => {
            let mcp = run.mcp_tools.map(|m| m.mcp_tools).unwrap_or_default();
            return compact::summarize_turn(&deps, t, run.conversation_id.as_deref(), &mcp, model_name).await;
        }
        // Resume and other actions: nothing to continue yet.
        _ => return TurnEnd::Ended(TurnUsage::default()),
    };
    let user = action.user_message.unwrap_or_default();
    let ctx = action.request_context.unwrap_or_default();
    let env = ctx.env.clone().unwrap_or_default();
    let workspace = prompt::workspace_root(&env);
    let mode = AgentMode::try_from(user.mode).unwrap_or(AgentMode::Unspecified);
    let mut mcp = run.mcp_tools.map(|m| m.mcp_tools).unwrap_or_default();
    for tool in ctx.tools {
        if !mcp.iter().any(|m| m.name == tool.name) {
            mcp.push(tool);
        }
    }
    let catalog = Arc::new(Catalog::build(mode, &mcp));
    let run_id = t.request_id.clone();
    let conversation = match run.conversation_id.filter(|c| !c.is_empty()) {
        Some(id) => deps.conversations.get(&id).await,
        None => Conversation::detached(&run_id),
    };
    conversation.supersede("new_message_submitted");
    let mut transcript = tokio::select! {
        biased;
        () = t.cancel.cancelled() => return TurnEnd::Shutdown,
        g = conversation.transcript.lock() => g,
    };
    let mut initial = Vec::new();
    if transcript.is_empty() {
        let system = prompt::system(run.custom_system_prompt.as_deref(), &env, workspace.as_deref(), &ctx.rules);
        initial.push(Entry::new(format!("system:{}", conversation.id), Message::text(Role::System, system)));
    }
    initial.extend(conversation.take_pending());
    let mut user_id = delivery::user_entry_id(&user.message_id, &format!("{run_id}:user"));
    if transcript.contains(&user_id) && transcript.entries().last().is_none_or(|e| e.id != user_id) {
        user_id = format!("{user_id}@{run_id}");
    }
    initial.push(Entry::new(user_id, Message::text(Role::User, user.text)));
    let context_window = deps.gateway.catalog().resolve(&model_name).and_then(|r| r.model.context_window);
    let spec = RunSpec {
        run_id: run_id.clone(),
        conversation_id: conversation.id.clone(),
        client: "cursor".to_owned(),
        model: model_name,
        tools: catalog.defs().to_vec(),
        max_steps: deps.options.max_steps,
        context_window,
        template: crate::model::Request::default(),
    };
    let exec = ExecChannel::new(t.output.clone(), deps.options.exec_timeout);
    let queries = QueryChannel::new(t.output.clone());
    let tools = CursorTools {
        catalog: catalog.clone(),
        exec: exec.clone(),
        output: t.output.clone(),
        workspace,
        todos: conversation.todo_list.clone(),
        queries: queries.clone(),
        search: deps.search.clone(),
    };
    let frames = Frames::new(t.output.clone(), catalog, &run_id);
    let model = GatewayModel { gateway: deps.gateway.clone(), dialect: "cursor", client: "cursor".to_owned() };
    let compactor = Summarizer {
        model: Arc::new(model.clone()),
        model_name: spec.model.clone(),
        tools: spec.tools.clone(),
        percent: deps.options.compact_at_percent,
        requested: Arc::default(),
        cancel: t.cancel.child_token(),
    };
    let journal = Journal::new(deps.conversations.store().cloned(), &conversation.id, &run_id);
    let (handle, inbox) = command_channel(&run_id, transcript.entries().iter().map(|e| e.id.as_str()));
    conversation.set_current(Some(handle.clone()));
    let ports = RunPorts { model: &model, tools: &tools, observer: &frames, compactor: &compactor, journal: &journal };
    let engine = crate::run::run(&spec, &mut transcript, initial, ports, inbox, &t.cancel);
    let mut engine = std::pin::pin!(AssertUnwindSafe(engine).catch_unwind());
    let mut inbox_open = true;
    let outcome = loop {
        tokio::select! {
            biased;
            r = &mut engine => break r,
            m = t.inbox.next(), if inbox_open => match m {
                Some((seqno, data)) => route(seqno, &data, &Channels { exec: &exec, queries: &queries, output: &t.output }, &conversation, &run_id, &compactor),
                None => inbox_open = false,
            },
        }
    };
    conversation.set_current(None);
    let outcome = match outcome {
        Ok(o) => {
            conversation.add_pending(o.pending.clone());
            o
        }
        Err(_) => {
            tracing::error!(request_id = %run_id, "the agent run panicked");
            return TurnEnd::Internal("the agent run failed inside Keyhaven".to_owned());
        }
    };
    tracing::debug!(request_id = %run_id, status = outcome.status.as_str(), steps = outcome.steps, "cursor run ended");
    let usage = if outcome.usage_reported {
        let n = |v: u64| Some(i64::try_from(v).unwrap_or(i64::MAX));
        TurnUsage {
            input_tokens: n(outcome.usage.input_tokens),
            output_tokens: n(outcome.usage.output_tokens),
            cache_read_tokens: n(outcome.usage.cache_read_tokens),
            cache_write_tokens: n(outcome.usage.cache_write_tokens),
        }
    } else {
        frames.estimated_usage()
    };
    match (outcome.status, outcome.canceled_by, outcome.error) {
        (RunStatus::Canceled, Some(CancelReason::Shutdown), _) => TurnEnd::Shutdown,
        (RunStatus::ProviderError, _, Some(e)) => TurnEnd::Provider(e),
        (RunStatus::Failed, _, e) => {
            TurnEnd::Internal(e.map_or_else(|| "the agent run failed".to_owned(), |e| e.message))
        }
        _ => TurnEnd::Ended(usage),
    }
}

/// Routes one client message that arrived during run `run_id`.
/// Where a run's client messages go.
struct Channels<'a> {
    exec: &'a ExecChannel,
    queries: &'a QueryChannel,
    output: &'a Output,
}

fn route(
    seqno: u64,
    data: &Bytes,
    ch: &Channels<'_>,
    conversation: &Conversation,
    run_id: &str,
    compactor: &Summarizer,
) {
    let msg = match connect::decode_message::<agent::AgentClientMessage>(data) {
        Ok(m) => m,
        Err(e) => {
            tracing::debug!(seqno, error = %e, "undecodable client message ignored");
            return;
        }
    };
    match msg.message {
        Some(agent_client_message::Message::ExecClientMessage(m)) => ch.exec.deliver(m),
        Some(agent_client_message::Message::ExecClientControlMessage(c)) => ch.exec.control(c),
        Some(agent_client_message::Message::InteractionResponse(r)) => ch.queries.deliver(r),
        Some(agent_client_message::Message::ConversationAction(action)) => {
            match delivery::classify(action, run_id, seqno) {
                Delivery::Ignore => {}
                Delivery::Summarize => compactor.requested.store(true, std::sync::atomic::Ordering::SeqCst),
                Delivery::Command(cmd) => {
                    let (kind, batch) = match &cmd {
                        RunCommand::InsertMessages(b) => ("insert", b.clone()),
                        RunCommand::BreakMessages(b) => ("break", b.clone()),
                        RunCommand::Cancel { .. } => ("cancel", Vec::new()),
                    };
                    let result = conversation.deliver(Some(run_id), cmd);
                    if result == CommandResult::StaleTarget {
                        tracing::debug!(seqno, kind, "conversation action for another run ignored");
                        return;
                    }
                    tracing::info!(seqno, kind, ?result, "conversation action delivered to the run");
                    if result == CommandResult::Applied {
                        for entry in &batch {
                            ch.output.publish(events::frame(&delivery::appended(entry), false));
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

#[derive(Debug, Default)]
struct FrameState {
    thinking_since: Option<Instant>,
    output_estimate: i64,
    step: u32,
    /// Tool names by call id (partial cards name their case).
    names: HashMap<String, String>,
}

/// Maps run events to interaction updates on the transport's output.
#[derive(Debug)]
struct Frames {
    output: Arc<Output>,
    catalog: Arc<Catalog>,
    run_id: String,
    state: Mutex<FrameState>,
}

impl Frames {
    fn new(output: Arc<Output>, catalog: Arc<Catalog>, run_id: &str) -> Frames {
        Frames { output, catalog, run_id: run_id.to_owned(), state: Mutex::default() }
    }

    fn emit(&self, m: &agent::AgentServerMessage) {
        self.output.publish(events::frame(m, false));
    }

    fn close_thinking(&self, s: &mut FrameState) {
        if let Some(started) = s.thinking_since.take() {
            let ms = i32::try_from(started.elapsed().as_millis()).unwrap_or(i32::MAX);
            self.emit(&events::thinking_completed(ms));
        }
    }

    /// Publishes a `token_delta` estimate for `text`.
    fn tokens(&self, s: &mut FrameState, text: &str) {
        let n = crate::cursor::turn::estimate_tokens(text);
        self.emit(&events::token_delta(n));
        s.output_estimate += i64::from(n);
    }

    /// `turn_ended` numbers when no call reported usage: the output estimate only.
    fn estimated_usage(&self) -> TurnUsage {
        let estimate = self.state.lock().map_or(0, |s| s.output_estimate);
        if estimate > 0 {
            TurnUsage { output_tokens: Some(estimate), ..TurnUsage::default() }
        } else {
            TurnUsage::default()
        }
    }
}

impl RunObserver for Frames {
    fn on_event(&self, event: RunEvent<'_>) {
        let Ok(mut s) = self.state.lock() else { return };
        match event {
            RunEvent::StepStarted { step } => s.step = step,
            RunEvent::ThinkingDelta(text) => {
                s.thinking_since.get_or_insert_with(Instant::now);
                self.emit(&events::thinking_delta(text));
                self.tokens(&mut s, text);
            }
            RunEvent::TextDelta(text) => {
                self.close_thinking(&mut s);
                self.emit(&events::text_delta(text));
                self.tokens(&mut s, text);
            }
            RunEvent::ToolCallBegin { step, id, name } => {
                self.close_thinking(&mut s);
                s.names.insert(id.to_owned(), name.to_owned());
                let mcid = model_call_id(&self.run_id, step);
                self.emit(&events::partial_tool_call(id, self.catalog.skeleton(name), "", &mcid));
            }
            RunEvent::ToolCallArgs { id, delta } => {
                let card = s.names.get(id).and_then(|n| self.catalog.skeleton(n));
                let mcid = model_call_id(&self.run_id, s.step);
                self.emit(&events::partial_tool_call(id, card, delta, &mcid));
            }
            RunEvent::StepCompleted { .. } => self.close_thinking(&mut s),
            RunEvent::CompactionStarted => {
                self.close_thinking(&mut s);
                self.emit(&compact::summary_started());
            }
            RunEvent::Compacted { summary, .. } => {
                if let Some(summary) = summary {
                    self.emit(&compact::summary(summary));
                }
                self.emit(&compact::summary_completed());
            }
            RunEvent::Usage(_) | RunEvent::ToolRoundStarted { .. } | RunEvent::ToolRoundFinished { .. } => {}
        }
    }
}
