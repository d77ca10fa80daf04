//! The run state machine: [`run`] drives `ModelCycle → ToolRound → … → Finalizing` and returns
//! exactly one [`RunOutcome`].
//!
//! Every wait is a biased `select!` with the shutdown token first and the command channel second,
//! so cancellation is always seen before a provider event or a tool result.

use std::panic::AssertUnwindSafe;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

use crate::model::{
    self, Accumulator, Entry, ErrorInfo, ErrorKind, Message, Part, Role, RunFinish, RunStatus, StreamEvent, ToolDef,
    ToolRoundRecord, Usage,
};
use crate::run::command::{ENDED, FINALIZING, RunCommand, RunInbox};
use crate::run::compaction::{CompactionContext, Compactor};
use crate::run::journal::Journal;
use crate::run::messages::Transcript;
use crate::run::port::{ModelCall, ModelPort, RunEvent, RunObserver, ToolCall, ToolContext, ToolHost, ToolOutput};

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub run_id: String,
    pub conversation_id: String,
    /// The front end's client name (for the run row).
    pub client: String,
    /// The model name as the catalog knows it.
    pub model: String,
    /// The tools the model sees (the same list every step and every turn, for prompt caching).
    pub tools: Vec<ToolDef>,
    /// The most model cycles one run may take.
    pub max_steps: u32,
    pub context_window: Option<u64>,
    /// Sampling and thinking settings copied into every request.
    pub template: model::Request,
}

/// Who canceled a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelReason {
    /// The front end's client (e.g. Cursor's stop button), with its reason
    /// ([`CONTINUED_ELSEWHERE`]: another run takes over the unfinished step).
    Client(String),
    /// The run's token fired (engine shutdown or the front end abandoning the run).
    Shutdown,
}

/// The cancel reason for a run that another run continues (e.g. a resume after a dropped
/// connection): the unanswered step is left open for it, without a "no answer" note.
pub const CONTINUED_ELSEWHERE: &str = "continued_elsewhere";

/// How a run ended. Exactly one per run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub status: RunStatus,
    /// The provider's error (`ProviderError`) or the internal failure (`Failed`).
    pub error: Option<ErrorInfo>,
    pub canceled_by: Option<CancelReason>,
    /// Model cycles started.
    pub steps: u32,
    /// Provider usage summed over the run's model calls.
    pub usage: Usage,
    /// Whether any model call reported usage (else `usage` holds output estimates only).
    pub usage_reported: bool,
    /// The run stopped at [`RunSpec::max_steps`].
    pub step_limit_reached: bool,
    /// Messages inserted while the run could no longer take them; the front end delivers them to
    /// the next run.
    pub pending: Vec<Entry>,
    /// Transcript writes that failed (logged; the outcome stands).
    pub journal_failures: u32,
}

/// The front end's implementations the run works through.
#[derive(Clone, Copy)]
pub struct RunPorts<'a> {
    pub model: &'a dyn ModelPort,
    pub tools: &'a dyn ToolHost,
    pub observer: &'a dyn RunObserver,
    pub compactor: &'a dyn Compactor,
    pub journal: &'a Journal,
}

impl std::fmt::Debug for RunPorts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunPorts").finish_non_exhaustive()
    }
}

enum State {
    ModelCycle,
    ToolRound(Vec<ToolCall>),
    Finalizing(Ending),
}

/// How the loop ended, before finalizing.
enum Ending {
    Completed { step_limit: bool },
    Canceled(CancelReason),
    ProviderError(ErrorInfo),
}

/// What woke a wait.
enum Wake<T> {
    Cancel,
    Command(Option<RunCommand>),
    Ready(T),
}

/// Runs one agent run to its end. `initial` (the new user message, usually) is appended first,
/// idempotently. `cancel` is the shutdown path; [`RunCommand::Cancel`] the client's.
pub async fn run(
    spec: &RunSpec,
    transcript: &mut Transcript,
    initial: Vec<Entry>,
    ports: RunPorts<'_>,
    inbox: RunInbox,
    cancel: &CancellationToken,
) -> RunOutcome {
    let mut engine = Engine {
        spec,
        transcript,
        ports,
        inbox,
        commands_open: true,
        cancel,
        step: 0,
        usage: Usage::default(),
        usage_reported: false,
        last_prompt_tokens: 0,
        pending: Vec::new(),
    };
    ports.journal.start_run(&spec.client, &spec.model, crate::clock::now_ms());
    for entry in initial {
        engine.append(entry);
    }
    let mut state = State::ModelCycle;
    let ending = loop {
        state = match state {
            State::ModelCycle => engine.model_cycle().await,
            State::ToolRound(calls) => engine.tool_round(calls).await,
            State::Finalizing(ending) => break ending,
        };
    };
    engine.finalize(ending).await
}

struct Engine<'a, 'b> {
    spec: &'b RunSpec,
    transcript: &'b mut Transcript,
    ports: RunPorts<'a>,
    inbox: RunInbox,
    commands_open: bool,
    cancel: &'b CancellationToken,
    step: u32,
    usage: Usage,
    usage_reported: bool,
    last_prompt_tokens: u64,
    /// Insertions waiting for the current step to complete.
    pending: Vec<Entry>,
}

/// What a command asks of the current wait.
enum Directive {
    Continue,
    Cancel(CancelReason),
    Break(Vec<Entry>),
}

impl Engine<'_, '_> {
    fn append(&mut self, entry: Entry) {
        self.inbox.remember(&entry.id);
        if let Some(seq) = self.transcript.append(entry.clone()) {
            self.ports.journal.append(seq, &entry, crate::clock::now_ms());
            self.ports.observer.on_event(RunEvent::MessageAppended { seq, entry: &entry });
        }
    }

    fn command(&mut self, cmd: Option<RunCommand>) -> Directive {
        match cmd {
            None => {
                self.commands_open = false;
                Directive::Continue
            }
            Some(RunCommand::InsertMessages(batch)) => {
                self.pending.extend(batch);
                Directive::Continue
            }
            Some(RunCommand::BreakMessages(batch)) => Directive::Break(batch),
            Some(RunCommand::Cancel { reason }) => Directive::Cancel(CancelReason::Client(reason)),
        }
    }

    /// Applies compaction if the compactor asks for it.
    async fn maybe_compact(&mut self) {
        let compactor: &dyn Compactor = self.ports.compactor;
        let ctx = CompactionContext {
            entries: self.transcript.entries(),
            last_prompt_tokens: self.last_prompt_tokens,
            context_window: self.spec.context_window,
        };
        if !compactor.should_compact(&ctx) {
            return;
        }
        let before = self.transcript.len();
        let id = format!("{}:c{}", self.spec.run_id, self.step + 1);
        self.ports.observer.on_event(RunEvent::CompactionStarted);
        let compacted = tokio::select! {
            biased;
            () = self.cancel.cancelled() => None,
            c = compactor.compact(self.transcript.entries(), &id) => c,
        };
        match compacted {
            Some(c) => {
                self.transcript.replace(c.entries);
                for e in self.transcript.entries() {
                    self.inbox.remember(&e.id);
                }
                self.ports.journal.replace(self.transcript.entries(), crate::clock::now_ms());
                self.last_prompt_tokens = 0;
                let after = self.transcript.len();
                let entries = self.transcript.entries();
                self.ports.observer.on_event(RunEvent::Compacted { before, after, summary: Some(&c.summary), entries });
            }
            None => self.ports.observer.on_event(RunEvent::Compacted {
                before,
                after: before,
                summary: None,
                entries: self.transcript.entries(),
            }),
        }
    }

    async fn model_cycle(&mut self) -> State {
        for entry in std::mem::take(&mut self.pending) {
            self.append(entry);
        }
        if self.step >= self.spec.max_steps {
            return State::Finalizing(Ending::Completed { step_limit: true });
        }
        self.maybe_compact().await;
        self.step += 1;
        let step = self.step;
        let observer = self.ports.observer;
        observer.on_event(RunEvent::StepStarted { step });
        let request = model::Request {
            model: self.spec.model.clone(),
            messages: self.transcript.messages(),
            tools: self.spec.tools.clone(),
            stream: true,
            ..self.spec.template.clone()
        };
        let call_cancel = self.cancel.child_token();
        let model: &dyn ModelPort = self.ports.model;
        let mut open = model.open(request, ModelCall { cancel: call_cancel.clone() });
        let opened = loop {
            let wake = tokio::select! {
                biased;
                () = self.cancel.cancelled() => Wake::Cancel,
                c = self.inbox.rx.recv(), if self.commands_open => Wake::Command(c),
                r = &mut open => Wake::Ready(r),
            };
            match wake {
                Wake::Cancel => {
                    call_cancel.cancel();
                    return State::Finalizing(Ending::Canceled(CancelReason::Shutdown));
                }
                Wake::Command(c) => match self.command(c) {
                    Directive::Continue => {}
                    Directive::Cancel(reason) => {
                        call_cancel.cancel();
                        return State::Finalizing(Ending::Canceled(reason));
                    }
                    Directive::Break(batch) => {
                        call_cancel.cancel();
                        batch.into_iter().for_each(|e| self.append(e));
                        return State::ModelCycle;
                    }
                },
                Wake::Ready(r) => break r,
            }
        };
        drop(open);
        let mut events = match opened {
            Ok(events) => events,
            Err(error) => return State::Finalizing(Ending::ProviderError(error)),
        };
        let mut acc = Accumulator::new();
        // Tool call ids by stream index, for argument deltas.
        let mut ids: Vec<(u32, String)> = Vec::new();
        loop {
            let wake = tokio::select! {
                biased;
                () = self.cancel.cancelled() => Wake::Cancel,
                c = self.inbox.rx.recv(), if self.commands_open => Wake::Command(c),
                ev = events.next() => Wake::Ready(ev),
            };
            let ev = match wake {
                Wake::Cancel => {
                    drop(events);
                    call_cancel.cancel();
                    self.commit_partial(acc, step);
                    return State::Finalizing(Ending::Canceled(CancelReason::Shutdown));
                }
                Wake::Command(c) => match self.command(c) {
                    Directive::Continue => continue,
                    Directive::Cancel(reason) => {
                        drop(events);
                        call_cancel.cancel();
                        self.commit_partial(acc, step);
                        return State::Finalizing(Ending::Canceled(reason));
                    }
                    Directive::Break(batch) => {
                        drop(events);
                        call_cancel.cancel();
                        self.commit_partial(acc, step);
                        batch.into_iter().for_each(|e| self.append(e));
                        return State::ModelCycle;
                    }
                },
                Wake::Ready(None) => break,
                Wake::Ready(Some(ev)) => ev,
            };
            match &ev {
                StreamEvent::TextDelta { text } if !text.is_empty() => observer.on_event(RunEvent::TextDelta(text)),
                StreamEvent::ThinkingDelta { text } if !text.is_empty() => {
                    observer.on_event(RunEvent::ThinkingDelta(text));
                }
                StreamEvent::ToolCallStart { index, id, name } => {
                    ids.push((*index, id.clone()));
                    observer.on_event(RunEvent::ToolCallBegin { step, id, name });
                }
                StreamEvent::ToolCallDelta { index, arguments } if !arguments.is_empty() => {
                    if let Some((_, id)) = ids.iter().find(|(i, _)| i == index) {
                        observer.on_event(RunEvent::ToolCallArgs { id, delta: arguments });
                    }
                }
                StreamEvent::Usage { usage } => observer.on_event(RunEvent::Usage(usage)),
                _ => {}
            }
            acc.push(&ev);
            if matches!(ev, StreamEvent::Error { .. }) {
                break;
            }
        }
        drop(events);
        self.add_usage(&acc);
        if let Some(error) = acc.error().cloned() {
            return State::Finalizing(Ending::ProviderError(error));
        }
        let response = acc.finish(crate::clock::now_ms());
        let calls: Vec<ToolCall> = response
            .content
            .iter()
            .filter_map(|p| match p {
                Part::ToolUse { id, name, input } => {
                    Some(ToolCall { id: id.clone(), name: name.clone(), input: input.clone() })
                }
                _ => None,
            })
            .collect();
        if !response.content.is_empty() {
            let id = format!("{}:a{step}", self.spec.run_id);
            self.append(Entry::new(id, Message { role: Role::Assistant, content: response.content }));
        }
        observer.on_event(RunEvent::StepCompleted { step, tool_calls: calls.len() });
        if !calls.is_empty() {
            return State::ToolRound(calls);
        }
        if self.pending.is_empty() {
            State::Finalizing(Ending::Completed { step_limit: false })
        } else {
            State::ModelCycle
        }
    }

    fn add_usage(&mut self, acc: &Accumulator) {
        let u = if acc.saw_usage() {
            self.usage_reported = true;
            acc.usage()
        } else {
            Usage { output_tokens: acc.estimated_output_tokens(), ..Usage::default() }
        };
        self.last_prompt_tokens = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens;
        self.usage.input_tokens += u.input_tokens;
        self.usage.output_tokens += u.output_tokens;
        self.usage.cache_read_tokens += u.cache_read_tokens;
        self.usage.cache_write_tokens += u.cache_write_tokens;
        self.usage.reasoning_tokens += u.reasoning_tokens;
    }

    /// Commits what a canceled model call streamed (text and thinking; tool calls without results
    /// would make the next request invalid, so they are left out).
    fn commit_partial(&mut self, acc: Accumulator, step: u32) {
        self.add_usage(&acc);
        let content: Vec<Part> = acc
            .finish(crate::clock::now_ms())
            .content
            .into_iter()
            .filter(|p| !matches!(p, Part::ToolUse { .. }))
            .collect();
        if !content.is_empty() {
            let id = format!("{}:a{step}", self.spec.run_id);
            self.append(Entry::new(id, Message { role: Role::Assistant, content }));
        }
    }

    async fn tool_round(&mut self, calls: Vec<ToolCall>) -> State {
        let step = self.step;
        let started_ms = crate::clock::now_ms();
        let observer = self.ports.observer;
        observer.on_event(RunEvent::ToolRoundStarted { step, calls: calls.len() });
        let round = self.cancel.child_token();
        let tools: &dyn ToolHost = self.ports.tools;
        let mut results: Vec<Option<ToolOutput>> = vec![None; calls.len()];
        let mut running = FuturesUnordered::new();
        for (i, call) in calls.iter().enumerate() {
            let ctx = ToolContext { run_id: self.spec.run_id.clone(), step, cancel: round.child_token() };
            let fut = AssertUnwindSafe(tools.execute(call.clone(), ctx)).catch_unwind();
            running.push(async move { (i, fut.await) });
        }
        let after = loop {
            if running.is_empty() {
                break Directive::Continue;
            }
            let wake = tokio::select! {
                biased;
                () = self.cancel.cancelled() => Wake::Cancel,
                c = self.inbox.rx.recv(), if self.commands_open => Wake::Command(c),
                r = running.next() => Wake::Ready(r),
            };
            match wake {
                Wake::Cancel => break Directive::Cancel(CancelReason::Shutdown),
                Wake::Command(c) => match self.command(c) {
                    Directive::Continue => {}
                    other => break other,
                },
                Wake::Ready(Some((i, Ok(out)))) => results[i] = Some(out),
                Wake::Ready(Some((i, Err(_panic)))) => {
                    tracing::warn!(tool = %calls[i].name, "a tool panicked; its call gets an error result");
                    results[i] = Some(ToolOutput::error("The tool failed internally and returned no result."));
                }
                Wake::Ready(None) => break Directive::Continue,
            }
        };
        // Abandon what still runs: the token first (hosts may react), then drop the futures.
        round.cancel();
        drop(running);
        let mut failed = 0;
        let parts: Vec<Part> = calls
            .iter()
            .zip(results)
            .map(|(call, out)| {
                let out = out.unwrap_or_else(|| {
                    ToolOutput::error("Interrupted: the tool call was canceled before it finished.")
                });
                failed += u32::from(out.is_error);
                Part::ToolResult { tool_use_id: call.id.clone(), content: out.content, is_error: out.is_error }
            })
            .collect();
        let interrupted = !matches!(after, Directive::Continue);
        self.append(Entry::new(format!("{}:t{step}", self.spec.run_id), Message { role: Role::Tool, content: parts }));
        self.ports.journal.tool_round(ToolRoundRecord {
            run_id: self.spec.run_id.clone(),
            step,
            started_ms,
            finished_ms: crate::clock::now_ms(),
            calls: u32::try_from(calls.len()).unwrap_or(u32::MAX),
            failed,
            status: if interrupted { "interrupted" } else { "completed" }.to_owned(),
        });
        observer.on_event(RunEvent::ToolRoundFinished { step, failed });
        match after {
            Directive::Continue => State::ModelCycle,
            Directive::Cancel(reason) => State::Finalizing(Ending::Canceled(reason)),
            Directive::Break(batch) => {
                batch.into_iter().for_each(|e| self.append(e));
                State::ModelCycle
            }
        }
    }

    /// After a provider error or a cancellation, leaves the transcript well formed for the next
    /// turn: when it does not end with an assistant message (the user's message or tool results
    /// went unanswered), an assistant note saying why is appended, so the next user message never
    /// follows another user message and the prefix stays append-only.
    fn note_unanswered(&mut self, ending: &Ending) {
        if self.transcript.entries().last().is_none_or(|e| e.message.role == Role::Assistant) {
            return;
        }
        let (id, text) = match ending {
            Ending::ProviderError(error) => (
                "error",
                format!(
                    "(No answer: the model call failed with a provider error ({}): {})",
                    error.kind.as_str(),
                    error.message
                ),
            ),
            Ending::Canceled(CancelReason::Client(reason)) if reason == CONTINUED_ELSEWHERE => return,
            Ending::Canceled(CancelReason::Client(_)) => {
                ("stopped", "(No answer: the user stopped this turn.)".to_owned())
            }
            Ending::Canceled(CancelReason::Shutdown) => {
                ("stopped", "(No answer: the turn was interrupted when Keyhaven stopped.)".to_owned())
            }
            Ending::Completed { .. } => return,
        };
        self.append(Entry::new(format!("{}:{id}", self.spec.run_id), Message::text(Role::Assistant, text)));
    }

    async fn finalize(mut self, ending: Ending) -> RunOutcome {
        self.note_unanswered(&ending);
        self.inbox.set_phase(FINALIZING);
        // Commands that arrived too late: insertions go back to the front end.
        while let Ok(cmd) = self.inbox.rx.try_recv() {
            if let RunCommand::InsertMessages(batch) | RunCommand::BreakMessages(batch) = cmd {
                self.pending.extend(batch);
            }
        }
        let (status, error, canceled_by, step_limit_reached) = match ending {
            Ending::Completed { step_limit } => (RunStatus::Completed, None, None, step_limit),
            Ending::Canceled(reason) => (RunStatus::Canceled, None, Some(reason), false),
            Ending::ProviderError(e) => (RunStatus::ProviderError, Some(e), None, false),
        };
        let error = error.or_else(|| {
            step_limit_reached.then(|| ErrorInfo {
                kind: ErrorKind::Internal,
                message: format!("the run reached its limit of {} model calls", self.spec.max_steps),
            })
        });
        self.ports.journal.finish(RunFinish {
            id: self.spec.run_id.clone(),
            finished_ms: crate::clock::now_ms(),
            status,
            error: error.clone(),
            steps: self.step,
            usage: self.usage,
        });
        let journal_failures = self.ports.journal.barrier().await;
        self.inbox.set_phase(ENDED);
        RunOutcome {
            status,
            error,
            canceled_by,
            steps: self.step,
            usage: self.usage,
            usage_reported: self.usage_reported,
            step_limit_reached,
            pending: std::mem::take(&mut self.pending),
            journal_failures,
        }
    }
}
