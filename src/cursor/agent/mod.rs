//! One Cursor agent turn on the generic run engine (`crate::run`): compiles the run request
//! (model, user message or resume, mode, MCP tools, workspace), picks up the conversation's
//! transcript (restoring it from the incoming checkpoint when the local one is missing or behind,
//! `cursor::checkpoint::recovery`), runs the engine with Cursor's tool host, maps its events to
//! interaction updates and publishes checkpoints (`cursor::checkpoint::worker`).
//!
//! While the turn works, this driver reads the transport's inbox (seqno order) and routes each
//! client message: exec results and exec control to the run's [`ExecChannel`], KV answers to its
//! [`BlobChannel`], interaction responses to its [`QueryChannel`], conversation actions through
//! [`delivery`] to the conversation's current run (cancel, insert, break, summarize); heartbeats
//! and the rest are ignored. The run, the checkpoint worker and the detach watch are polled in the
//! same task (no spawn), and a panic inside the run still ends the turn.
//!
//! The turn's first messages: the system prompt (first turn only), restored messages, messages
//! left pending by the previous run, then the user message. A user message whose id the transcript
//! holds already (a resubmission after an error) is appended again under a run-scoped id unless it
//! is the transcript's last message, so every request ends with the user's message. A run request
//! whose action is `summarize_action` compacts the conversation and ends (see [`compact`]).
//!
//! Frames of a turn: the live updates (`thinking_delta`, `thinking_completed`, `text_delta`,
//! `token_delta`, tool cards and execs), checkpoints after a tool round starts, after its
//! results and after a compaction (each preceded by its new blobs' `set_blob_args`), and a final
//! checkpoint before the terminal (also after a cancel; not on shutdown).
//!
//! - **Resume** (`resume_action`): an unfinished conversation (its last message is the user's or
//!   tool results) continues with a new model cycle; a completed one (last message from the
//!   assistant) ends at once with an empty `turn_ended`. Pending tool calls, local or restored,
//!   get interrupted results first (never re-issued; see `recovery`).
//! - **Detach**: when every RunSSE reader of the transport is gone, the run keeps going for
//!   `[agent] detach_grace` (a re-subscriber gets the replay); then it is canceled like a stop
//!   (final checkpoint, `turn_ended`, `{}`).

pub mod actions;
pub mod compact;
pub mod context;
pub mod delivery;
pub mod parts;
mod prompt;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cursor::agent::actions::Start;
use crate::cursor::agent::delivery::{Delivery, Injections};
use crate::cursor::blobs::BlobChannel;
use crate::cursor::checkpoint::recovery::{self, Plan, Source};
use crate::cursor::checkpoint::worker::{Both, Publisher, Tracker};
use crate::cursor::checkpoint::{self, Meta};
use crate::cursor::conversation::{Conversation, Conversations};
use crate::cursor::protocol::agent::context_injection_state::State::{Delivered, Queued, QueuedForNextTurn, Rejected};
use crate::cursor::protocol::agent::{self, AgentMode, agent_client_message};
use crate::cursor::protocol::connect;
use crate::cursor::protocol::events::{self, TurnUsage};
use crate::cursor::tools::catalog::{Catalog, ToolKind, mode_from_wire};
use crate::cursor::tools::dispatch::{CursorTools, model_call_id};
use crate::cursor::tools::exec::ExecChannel;
use crate::cursor::tools::interact::ModeCell;
use crate::cursor::tools::query::QueryChannel;
use crate::cursor::tools::stream::FieldStream;
use crate::cursor::transport::{Output, Transport};
use crate::model::{Entry, ErrorInfo, Message, Part, Role, RunStatus};
use crate::provider::Gateway;
use crate::run::{
    CancelReason, CommandResult, GatewayModel, Journal, RunCommand, RunEvent, RunHandle, RunObserver, RunPorts,
    RunSpec, Summarizer, command_channel,
};

/// Limits of the agent loop (from `[agent]`).
#[derive(Debug, Clone, Copy)]
pub struct AgentOptions {
    pub max_steps: u32,
    /// How long the client may stay silent on one exec.
    pub exec_timeout: Duration,
    /// How long the client may take to acknowledge a checkpoint's blobs (or return a blob).
    pub blob_ack_timeout: Duration,
    /// How long a run continues without any RunSSE reader.
    pub detach_grace: Duration,
    /// Compact when the latest prompt used this share (percent) of the model's context window
    /// (0: only on Cursor's summarize action).
    pub compact_at_percent: u64,
    /// How long the user may take to answer an interaction query.
    pub question_timeout: Duration,
}

impl Default for AgentOptions {
    fn default() -> AgentOptions {
        AgentOptions {
            max_steps: 50,
            exec_timeout: Duration::from_secs(300),
            blob_ack_timeout: Duration::from_secs(10),
            detach_grace: Duration::from_secs(180),
            compact_at_percent: 80,
            question_timeout: Duration::from_secs(900),
        }
    }
}

/// How a turn ended, for the transport's terminal.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEnd {
    Ended(TurnUsage),
    Shutdown,
    Provider(ErrorInfo),
    Internal(String),
    /// The incoming checkpoint could not be used (a blob that does not match its id, a missing
    /// or unreadable blob); nothing was appended.
    CheckpointRefused(String),
}

/// What a turn needs from the backend.
#[derive(Debug)]
pub struct AgentDeps<'a> {
    pub gateway: &'a Arc<Gateway>,
    pub conversations: &'a Conversations,
    pub options: AgentOptions,
    /// The web search provider (`None`: the model is told search is unavailable).
    pub search: Option<Arc<dyn crate::search::SearchProvider>>,
    /// The server-side page fetcher (`None`: the editor fetches pages).
    pub fetcher: Option<Arc<dyn crate::search::PageFetcher>>,
}

/// What starts the turn's user message.
enum Kick {
    User(Box<agent::UserMessage>),
    /// The plan card's Build: the message is written once the conversation's todos are known.
    Plan(Box<agent::ExecutePlanAction>),
}

/// Where client messages go while a turn works.
struct Routes<'a> {
    exec: &'a ExecChannel,
    blobs: &'a BlobChannel,
    queries: &'a QueryChannel,
    output: &'a Output,
    conversation: &'a Conversation,
    run_id: &'a str,
    /// The client's id of this run (3.15 `AgentRunRequest.run_id`), if it sent one.
    client_run_id: Option<&'a str>,
    /// Injected messages waiting to be delivered.
    injections: &'a Injections,
    /// Set once the run exists (a summarize action before it is ignored).
    compactor: Option<&'a Summarizer>,
    run: Option<&'a RunHandle>,
    /// A `cancel_action` that arrived before the run existed.
    early_cancel: &'a AtomicBool,
}

/// Polls `fut` while routing client messages; `None` when the transport is canceled (shutdown).
async fn pump<F: Future>(t: &Transport, routes: &Routes<'_>, fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut open = true;
    loop {
        tokio::select! {
            biased;
            () = t.cancel.cancelled() => return None,
            out = &mut fut => return Some(out),
            m = t.inbox.next(), if open => match m {
                Some((seqno, data)) => {
                    // No run to compile attachments for: the message's text is delivered.
                    if let Some(action) = route(seqno, &data, routes) {
                        act(seqno, delivery::classify(action, routes.run_id, seqno), routes);
                    }
                }
                None => open = false,
            },
        }
    }
}

/// Resolves once the transport has had no reader for `grace` (pending forever otherwise).
async fn detached(mut subs: watch::Receiver<usize>, grace: Duration) {
    loop {
        while *subs.borrow_and_update() > 0 {
            if subs.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
        let back = tokio::time::timeout(grace, subs.wait_for(|n| *n > 0)).await.map(|r| r.is_ok());
        match back {
            Err(_) => return,
            Ok(false) => return std::future::pending().await,
            Ok(true) => {}
        }
    }
}

/// Runs one turn for `run` (whose model resolved to `model_name`) on transport `t`.
pub async fn run_turn(deps: AgentDeps<'_>, t: &Transport, run: agent::AgentRunRequest, model_name: String) -> TurnEnd {
    let agent::AgentRunRequest {
        conversation_state,
        action,
        mcp_tools,
        conversation_id,
        custom_system_prompt,
        pre_fetched_blobs,
        run_id: client_run_id,
        ..
    } = run;
    let action = action.unwrap_or_default();
    let parts_refs = action.request_context_parts;
    let (kick, mut ctx, forced_mode, injection) = match actions::start(action.action) {
        Start::Message { user, ctx, mode, injection } => (Some(Kick::User(user)), *ctx, mode, injection),
        Start::ExecutePlan(a) => {
            let ctx = a.request_context.clone().unwrap_or_default();
            let mode = actions::execution_mode(&a);
            (Some(Kick::Plan(a)), ctx, Some(mode), None)
        }
        Start::Resume(ctx) => (None, *ctx, None, None),
        Start::Summarize => {
            let mcp = mcp_tools.map(|m| m.mcp_tools).unwrap_or_default();
            let incoming = compact::Incoming {
                held: checkpoint::held_by_client(conversation_state.as_ref(), &pre_fetched_blobs),
                mode: conversation_state.as_ref().and_then(|s| s.mode).map_or(AgentMode::Agent, mode_from_wire),
                workspace_paths: conversation_state
                    .as_ref()
                    .map(|s| {
                        s.previous_workspace_uris
                            .iter()
                            .map(|u| u.strip_prefix("file://").unwrap_or(u).to_owned())
                            .collect()
                    })
                    .unwrap_or_default(),
            };
            return compact::summarize_turn(&deps, t, conversation_id.as_deref(), &mcp, model_name, incoming).await;
        }
        Start::Nothing => return TurnEnd::Ended(TurnUsage::default()),
        Start::Unsupported(name) => {
            tracing::info!(request_id = %t.request_id, action = name, "run request with an action Keyhaven does not support");
            t.output.publish(events::frame(&events::notice(&actions::unsupported_notice(name, false)), false));
            return TurnEnd::Ended(TurnUsage::default());
        }
    };
    let mode = match (forced_mode, &kick) {
        (Some(m), _) => m,
        (None, Some(Kick::User(u))) => mode_from_wire(u.mode),
        _ => conversation_state.as_ref().and_then(|s| s.mode).map_or(AgentMode::Agent, mode_from_wire),
    };
    let run_id = t.request_id.clone();
    let conversation = match conversation_id.filter(|c| !c.is_empty()) {
        Some(id) => deps.conversations.get(&id).await,
        None => Conversation::detached(&run_id),
    };
    // A resume takes over the unfinished step of a run that may still be waiting (its stream
    // dropped): that run ends without a "no answer" note, so the step stays open for this one.
    conversation.supersede(if kick.is_some() { "new_message_submitted" } else { crate::run::CONTINUED_ELSEWHERE });
    let mut transcript = tokio::select! {
        biased;
        () = t.cancel.cancelled() => return TurnEnd::Shutdown,
        g = conversation.transcript.lock() => g,
    };
    let exec = ExecChannel::new(t.output.clone(), deps.options.exec_timeout);
    let blobs = BlobChannel::new(t.output.clone());
    let queries = QueryChannel::new(t.output.clone(), deps.options.question_timeout);
    let early_cancel = AtomicBool::new(false);
    let injections = Arc::new(Injections::default());
    let pre_routes = Routes {
        exec: &exec,
        blobs: &blobs,
        queries: &queries,
        output: &t.output,
        conversation: &conversation,
        run_id: &run_id,
        client_run_id: client_run_id.as_deref().filter(|r| !r.is_empty()),
        injections: &injections,
        compactor: None,
        run: None,
        early_cancel: &early_cancel,
    };

    // The local transcript is the source of truth; the incoming state fills it when it is
    // missing or behind.
    let held = checkpoint::held_by_client(conversation_state.as_ref(), &pre_fetched_blobs);
    if conversation.todos().is_empty() {
        conversation.set_todos(recovery::todos(conversation_state.as_ref()));
    }
    let mut restored = Vec::new();
    let source = Source::new(pre_fetched_blobs, &blobs, deps.options.blob_ack_timeout);
    if let Plan::Restore(ids) = recovery::plan(transcript.entries(), conversation_state.as_ref()) {
        match pump(t, &pre_routes, recovery::restore(&ids, &source)).await {
            None => return TurnEnd::Shutdown,
            Some(Err(e)) => {
                tracing::warn!(request_id = %run_id, error = %e, "incoming checkpoint refused");
                return TurnEnd::CheckpointRefused(e.to_string());
            }
            Some(Ok(entries)) => {
                tracing::info!(request_id = %run_id, messages = entries.len(), "transcript restored from the incoming checkpoint");
                restored = recovery::drop_orphans(entries, !transcript.is_empty());
            }
        }
    }
    if early_cancel.load(Ordering::Relaxed) {
        return TurnEnd::Ended(TurnUsage::default());
    }
    // 3.15: rules, skills, subagents and MCP definitions in client blobs.
    if let Some(refs) = parts_refs {
        let Some(notices) = pump(t, &pre_routes, parts::resolve(refs, &mut ctx, &source)).await else {
            return TurnEnd::Shutdown;
        };
        for notice in &notices {
            t.output.publish(events::frame(&events::notice(notice), false));
        }
    }
    let env = ctx.env.clone().unwrap_or_default();
    let workspace = prompt::workspace_root(&env);
    let mut mcp = mcp_tools.map(|m| m.mcp_tools).unwrap_or_default();
    for tool in std::mem::take(&mut ctx.tools) {
        if !mcp.iter().any(|m| m.name == tool.name) {
            mcp.push(tool);
        }
    }
    // Tools the user turned off in Cursor's settings are not offered.
    let mut off = Vec::new();
    if ctx.web_search_enabled == Some(false) {
        off.push(crate::cursor::tools::catalog::WEB_SEARCH);
    }
    if ctx.web_fetch_enabled == Some(false) {
        off.push(crate::cursor::tools::catalog::FETCH);
    }
    let catalog = Arc::new(Catalog::with_server_fetch(mode, &mcp, deps.fetcher.is_some()).without(&off));
    let mut initial = Vec::new();
    // The user's rules, skills and MCP instructions in the system prompt this run writes (the
    // Calls page lists them with the run's attachments).
    let mut system_blocks = Vec::new();
    if transcript.is_empty() && restored.first().is_none_or(|e| e.message.role != Role::System) {
        let (system, blocks) =
            prompt::system_with_blocks(custom_system_prompt.as_deref(), &env, workspace.as_deref(), &ctx);
        system_blocks = blocks;
        initial.push(Entry::new(format!("system:{}", conversation.id), Message::text(Role::System, system)));
    }
    initial.extend(restored);
    let tail: Vec<Entry> = initial.last().or_else(|| transcript.entries().last()).cloned().into_iter().collect();
    if let Some(results) = recovery::interrupted_results(&tail) {
        initial.push(results);
    }
    initial.extend(conversation.take_pending());
    let vision = deps.gateway.catalog().resolve(&model_name).is_none_or(|r| r.model.capabilities.vision);
    let user = kick.map(|k| match k {
        Kick::User(u) => *u,
        Kick::Plan(a) => actions::plan_message(&a, &conversation.todos()),
    });
    match user {
        Some(user) => {
            let fallback = injection.as_ref().map_or_else(|| format!("{run_id}:user"), |i| format!("inject:{i}"));
            let mut user_id = delivery::user_entry_id(&user.message_id, &fallback);
            if transcript.contains(&user_id) && transcript.entries().last().is_none_or(|e| e.id != user_id) {
                user_id = format!("{user_id}@{run_id}");
            }
            let io = context::Io { blobs: &source, exec: &exec, run_id: &run_id, workspace: workspace.as_deref() };
            let earlier: Vec<Entry> = transcript.entries().iter().chain(&initial).cloned().collect();
            let attached = match pump(t, &pre_routes, context::user_content(&user, &ctx, &io, &earlier, vision)).await {
                Some(a) => a,
                None => return TurnEnd::Shutdown,
            };
            for notice in &attached.notices {
                t.output.publish(events::frame(&events::notice(notice), false));
            }
            // The Calls page lists them with each call of this run (its `request_id`).
            let listed: Vec<_> =
                std::mem::take(&mut system_blocks).into_iter().chain(attached.blocks.clone()).collect();
            if let Some(store) = deps.conversations.store().filter(|_| !listed.is_empty()) {
                drop(store.conversation(crate::store::ConversationOp::RunContext {
                    run_id: run_id.clone(),
                    conversation_id: conversation.id.clone(),
                    blocks: listed,
                    created_ms: crate::clock::now_ms(),
                }));
            }
            let message = match attached.parts.as_slice() {
                [Part::Text { text, .. }] => Message::text(Role::User, text.clone()),
                _ => Message { role: Role::User, content: attached.parts },
            };
            if let Some(injection) = &injection {
                injections.track(&user_id, injection);
            }
            initial.push(Entry::new(user_id, message));
        }
        None => {
            let last = initial.last().or_else(|| transcript.entries().last());
            let unfinished = last.is_some_and(|e| matches!(e.message.role, Role::User | Role::Tool));
            if !unfinished {
                tracing::debug!(request_id = %run_id, "resume of a completed conversation: nothing to do");
                return TurnEnd::Ended(TurnUsage::default());
            }
        }
    }
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
    let mode_cell = Arc::new(ModeCell::new(mode));
    // Mid-run messages' attachments are read like the first message's.
    let mid_workspace = workspace.clone();
    let mid_io = context::Io { blobs: &source, exec: &exec, run_id: &run_id, workspace: mid_workspace.as_deref() };
    let tools = CursorTools {
        catalog: catalog.clone(),
        exec: exec.clone(),
        output: t.output.clone(),
        workspace,
        todos: conversation.todo_list.clone(),
        queries: queries.clone(),
        search: deps.search.clone(),
        fetcher: deps.fetcher.clone(),
        mode: mode_cell.clone(),
        blobs: Some(crate::cursor::blobs::BlobReader {
            channel: blobs.clone(),
            timeout: deps.options.blob_ack_timeout,
        }),
        terminals_folder: Some(env.terminals_folder.clone()).filter(|f| !f.is_empty()),
    };
    let frames = Frames::new(t.output.clone(), catalog.clone(), &run_id, injections.clone());
    let model = GatewayModel {
        gateway: deps.gateway.clone(),
        dialect: "cursor",
        client: "cursor".to_owned(),
        conversation_id: Some(conversation.id.clone()),
        request_id: Some(run_id.clone()),
    };
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
    let (tracker, snapshots) = Tracker::new(transcript.entries(), conversation.todo_list.clone());
    let publisher = Publisher {
        blobs: blobs.clone(),
        output: t.output.clone(),
        acked: conversation.acked_blobs.clone(),
        held,
        sent: Mutex::default(),
        timeout: deps.options.blob_ack_timeout,
        // Used tokens and todos come with each snapshot.
        meta: Meta { mode, workspace_paths: env.workspace_paths.clone(), context_window, ..Meta::default() },
        mode: Some(mode_cell),
        catalog: Some(catalog),
        store: deps.conversations.store().cloned(),
        conversation_id: conversation.id.clone(),
        run_id: run_id.clone(),
        gave_up: AtomicBool::new(false),
        last: Mutex::default(),
    };
    let routes = Routes { compactor: Some(&compactor), run: Some(&handle), ..pre_routes };
    let mut worker = std::pin::pin!(publisher.work(snapshots));
    let mut worker_done = false;
    // Mid-run actions whose attachments are being read, by seqno (delivered with their text if
    // the run ends first).
    let mut compiling: HashMap<u64, agent::ConversationAction> = HashMap::new();
    let outcome = {
        let observer = Both(&frames, &tracker);
        let ports =
            RunPorts { model: &model, tools: &tools, observer: &observer, compactor: &compactor, journal: &journal };
        let engine = crate::run::run(&spec, &mut transcript, initial, ports, inbox, &t.cancel);
        let mut engine = std::pin::pin!(AssertUnwindSafe(engine).catch_unwind());
        let mut detach = std::pin::pin!(detached(t.output.subscribers(), deps.options.detach_grace));
        let mut detach_fired = false;
        let mut inbox_open = true;
        let mut attaching = futures::stream::FuturesUnordered::new();
        loop {
            tokio::select! {
                biased;
                r = &mut engine => break r,
                m = t.inbox.next(), if inbox_open => match m {
                    Some((seqno, data)) => {
                        if let Some(action) = route(seqno, &data, &routes) {
                            compiling.insert(seqno, action.clone());
                            attaching.push(attach(seqno, action, &mid_io, &ctx, vision));
                        }
                    }
                    None => inbox_open = false,
                },
                Some((seqno, action, attached)) = attaching.next(), if !attaching.is_empty() => {
                    compiling.remove(&seqno);
                    for notice in &attached.notices {
                        t.output.publish(events::frame(&events::notice(notice), false));
                    }
                    let message = match attached.parts.as_slice() {
                        [Part::Text { text, .. }] => Message::text(Role::User, text.clone()),
                        _ => Message { role: Role::User, content: attached.parts },
                    };
                    act(seqno, delivery::classify_with(action, &run_id, seqno, message), &routes);
                }
                () = &mut worker, if !worker_done => worker_done = true,
                () = &mut detach, if !detach_fired => {
                    detach_fired = true;
                    tracing::info!(request_id = %run_id, "no RunSSE reader within the grace period; canceling the run");
                    handle.send(None, RunCommand::Cancel { reason: "client_disconnected".to_owned() });
                }
            }
        }
    };
    // Their text goes the way of any message that arrives as a run ends.
    let mut late: Vec<_> = compiling.into_iter().collect();
    late.sort_by_key(|(seqno, _)| *seqno);
    for (seqno, action) in late {
        act(seqno, delivery::classify(action, &run_id, seqno), &routes);
    }
    // Checkpoints already requested are published (in order) before the final one.
    tracker.close();
    if !worker_done {
        let _ = pump(t, &routes, &mut worker).await;
    }
    conversation.set_current(None);
    // Injections the run took but never delivered wait for the next turn (with the run's pending
    // messages).
    for injection in injections.take_remaining() {
        t.output.publish(events::frame(
            &delivery::injection_state(&injection, QueuedForNextTurn(agent::ContextInjectionQueuedForNextTurn {})),
            false,
        ));
    }
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
    let shutdown = outcome.canceled_by == Some(CancelReason::Shutdown);
    if !shutdown {
        let _ = pump(t, &routes, publisher.publish(&tracker.snapshot(transcript.entries()))).await;
    }
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

/// Routes one client message that arrived during the turn. A user message with attachments is
/// handed back (its context is compiled before it is delivered, [`act`]).
fn route(seqno: u64, data: &Bytes, routes: &Routes<'_>) -> Option<agent::ConversationAction> {
    let msg = match connect::decode_message::<agent::AgentClientMessage>(data) {
        Ok(m) => m,
        Err(e) => {
            tracing::debug!(seqno, error = %e, "undecodable client message ignored");
            return None;
        }
    };
    match msg.message {
        Some(agent_client_message::Message::ExecClientMessage(m)) => routes.exec.deliver(m),
        Some(agent_client_message::Message::ExecClientControlMessage(c)) => routes.exec.control(c),
        Some(agent_client_message::Message::KvClientMessage(k)) => routes.blobs.deliver(k),
        Some(agent_client_message::Message::InteractionResponse(r)) => routes.queries.deliver(r),
        Some(agent_client_message::Message::ConversationAction(action)) => {
            if delivery::needs_context(&action) {
                return Some(action);
            }
            act(seqno, delivery::classify(action, routes.run_id, seqno), routes);
        }
        _ => {}
    }
    None
}

/// Compiles a mid-run message's attachments like the first message's (`earlier` is empty: the
/// run holds the transcript).
async fn attach(
    seqno: u64,
    action: agent::ConversationAction,
    io: &context::Io<'_>,
    ctx: &agent::RequestContext,
    vision: bool,
) -> (u64, agent::ConversationAction, context::Attached) {
    let user = delivery::main_user(&action).cloned().unwrap_or_default();
    // Its reads are `<run>:in<seqno>:ctx<n>`.
    let prefix = format!("{}:in{seqno}", io.run_id);
    let io = context::Io { blobs: io.blobs, exec: io.exec, run_id: &prefix, workspace: io.workspace };
    let attached = context::user_content(&user, ctx, &io, &[], vision).await;
    (seqno, action, attached)
}

/// Acts on a classified mid-run action.
fn act(seqno: u64, d: Delivery, routes: &Routes<'_>) {
    match d {
        Delivery::Ignore => {}
        Delivery::Unsupported(name) => {
            tracing::info!(seqno, action = name, "conversation action Keyhaven does not support ignored");
            routes.output.publish(events::frame(&events::notice(&actions::unsupported_notice(name, true)), false));
        }
        Delivery::Inject { injection_id, expected_run_id, entry } => {
            inject(routes, seqno, &injection_id, &expected_run_id, entry)
        }
        Delivery::Summarize => {
            if let Some(c) = routes.compactor {
                c.requested.store(true, Ordering::SeqCst);
            }
        }
        // Before the run exists (while a checkpoint is restored): end the turn at once.
        Delivery::Command(RunCommand::Cancel { reason }) if routes.run.is_none() => {
            tracing::info!(seqno, %reason, "cursor run canceled by the client before it started");
            routes.early_cancel.store(true, Ordering::Relaxed);
        }
        Delivery::Command(cmd) => {
            let (kind, batch) = match &cmd {
                RunCommand::InsertMessages(b) => ("insert", b.clone()),
                RunCommand::BreakMessages(b) => ("break", b.clone()),
                RunCommand::Cancel { .. } => ("cancel", Vec::new()),
            };
            let result = routes.conversation.deliver(Some(routes.run_id), cmd);
            if result == CommandResult::StaleTarget {
                tracing::debug!(seqno, kind, "conversation action for another run ignored");
                return;
            }
            tracing::info!(seqno, kind, ?result, "conversation action delivered to the run");
            if result == CommandResult::Applied {
                for entry in &batch {
                    routes.output.publish(events::frame(&delivery::appended(entry), false));
                }
            }
        }
    }
}

/// Delivers an injected message (`inject_context_action`) to the running turn and acknowledges
/// it with `context_injection_state` (see [`delivery`]).
fn inject(routes: &Routes<'_>, seqno: u64, injection_id: &str, expected_run_id: &str, entry: Entry) {
    let state = |s| {
        routes.output.publish(events::frame(&delivery::injection_state(injection_id, s), false));
    };
    if let Some(ours) = routes.client_run_id.filter(|r| !expected_run_id.is_empty() && r != &expected_run_id) {
        tracing::info!(seqno, expected_run_id, ours, "injection for another run rejected");
        state(Rejected(agent::ContextInjectionRejected {
            reason: "the run this message was meant for is no longer running".to_owned(),
        }));
        return;
    }
    let entry_id = entry.id.clone();
    if routes.run.is_none() {
        // The run is not started yet (its checkpoint or attachments are read): the message waits
        // for the next turn.
        routes.conversation.add_pending(vec![entry]);
        state(QueuedForNextTurn(agent::ContextInjectionQueuedForNextTurn {}));
        return;
    }
    match routes.conversation.deliver(Some(routes.run_id), RunCommand::InsertMessages(vec![entry])) {
        CommandResult::Applied if routes.conversation.has_pending(&entry_id) => {
            state(QueuedForNextTurn(agent::ContextInjectionQueuedForNextTurn {}));
        }
        CommandResult::Applied => {
            routes.injections.track(&entry_id, injection_id);
            state(Queued(agent::ContextInjectionQueued {}));
        }
        CommandResult::Duplicate => tracing::debug!(seqno, injection_id, "injection delivered already"),
        result => {
            tracing::info!(seqno, ?result, "injection for a run that is gone rejected");
            state(Rejected(agent::ContextInjectionRejected {
                reason: "the run this message was meant for is no longer running".to_owned(),
            }));
        }
    }
}

#[derive(Debug, Default)]
struct FrameState {
    thinking_since: Option<Instant>,
    output_estimate: i64,
    step: u32,
    /// When the current step began (`step_completed` carries its duration).
    step_since: Option<Instant>,
    /// Tool names by call id (partial cards name their case).
    names: HashMap<String, String>,
    /// The new file text of `write_file` calls, followed as the arguments stream.
    edits: HashMap<String, FieldStream>,
}

/// Maps run events to interaction updates on the transport's output.
#[derive(Debug)]
struct Frames {
    output: Arc<Output>,
    catalog: Arc<Catalog>,
    run_id: String,
    state: Mutex<FrameState>,
    /// Injected messages to acknowledge as delivered when they enter the transcript.
    injections: Arc<Injections>,
}

impl Frames {
    fn new(output: Arc<Output>, catalog: Arc<Catalog>, run_id: &str, injections: Arc<Injections>) -> Frames {
        Frames { output, catalog, run_id: run_id.to_owned(), state: Mutex::default(), injections }
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

    /// Ends the current step (`step_completed` with its duration).
    fn close_step(&self, s: &mut FrameState) {
        if let Some(since) = s.step_since.take() {
            let ms = i64::try_from(since.elapsed().as_millis()).unwrap_or(i64::MAX);
            self.emit(&events::step_completed(s.step, ms));
        }
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
            RunEvent::StepStarted { step } => {
                self.close_step(&mut s);
                s.step = step;
                s.step_since = Some(Instant::now());
                s.edits.clear();
                self.emit(&events::step_started(step));
            }
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
                if self.catalog.kind(name) == Some(ToolKind::Write) {
                    s.edits.insert(id.to_owned(), FieldStream::new("contents"));
                }
                let mcid = model_call_id(&self.run_id, step);
                let card = self.catalog.skeleton(name).map(|c| with_id(c, id));
                self.emit(&events::partial_tool_call(id, card, "", &mcid));
            }
            RunEvent::ToolCallArgs { id, delta } => {
                let card = s.names.get(id).and_then(|n| self.catalog.skeleton(n)).map(|c| with_id(c, id));
                let mcid = model_call_id(&self.run_id, s.step);
                self.emit(&events::partial_tool_call(id, card, delta, &mcid));
                if let Some(text) = s.edits.get_mut(id).map(|f| f.push(delta)).filter(|t| !t.is_empty()) {
                    self.emit(&events::edit_delta(id, &text, &mcid));
                }
            }
            RunEvent::StepCompleted { tool_calls, .. } => {
                self.close_thinking(&mut s);
                if tool_calls == 0 {
                    self.close_step(&mut s);
                }
            }
            RunEvent::ToolRoundFinished { .. } => self.close_step(&mut s),
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
            RunEvent::MessageAppended { entry, .. } => {
                if let Some(injection) = self.injections.delivered(&entry.id) {
                    self.emit(&delivery::injection_state(
                        &injection,
                        Delivered(agent::ContextInjectionDelivered {
                            step: i32::try_from(s.step).unwrap_or(i32::MAX),
                            delivery_batch_id: entry.id.clone(),
                            delivered_at_ms: crate::clock::now_ms(),
                        }),
                    ));
                }
            }
            RunEvent::Usage(_) | RunEvent::ToolRoundStarted { .. } => {}
        }
    }
}

/// A card with its call id set (`ToolCall.tool_call_id`, 3.x builds).
fn with_id(mut card: agent::ToolCall, id: &str) -> agent::ToolCall {
    card.tool_call_id = Some(id.to_owned());
    card
}
