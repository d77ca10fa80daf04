//! Unit tests of the run engine: a scripted model port, scripted tools (echo, slow, failing,
//! panicking, never finishing), cancellation in every phase, idempotent appends and the journal.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::model::{self, Entry, ErrorInfo, ErrorKind, Message, Part, Role, RunStatus, StopReason, StreamEvent, Usage};
use crate::run::{
    CancelReason, CommandResult, EventStream, Journal, ModelCall, ModelPort, NoCompaction, RunCommand, RunEvent,
    RunObserver, RunOutcome, RunPorts, RunSpec, ToolCall, ToolContext, ToolHost, ToolOutput, Transcript,
    command_channel, run,
};
use crate::store::{Store, StoreOptions};

/// A hang guard: tests never wait on wall time for their assertions, but a broken engine must
/// fail instead of hanging the suite.
const GUARD: Duration = Duration::from_secs(20);

enum Reply {
    Events(Vec<StreamEvent>),
    /// These events, then silence forever.
    Hang(Vec<StreamEvent>),
    Fail(ErrorInfo),
}

#[derive(Default)]
struct Script {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<model::Request>>,
    polled: AtomicUsize,
}

impl Script {
    fn new(replies: Vec<Reply>) -> Script {
        Script { replies: Mutex::new(replies.into()), ..Script::default() }
    }

    fn requests(&self) -> Vec<model::Request> {
        self.requests.lock().expect("lock").clone()
    }
}

impl ModelPort for Script {
    fn open<'a>(&'a self, request: model::Request, _: ModelCall) -> BoxFuture<'a, Result<EventStream, ErrorInfo>> {
        Box::pin(async move {
            self.polled.fetch_add(1, Ordering::SeqCst);
            self.requests.lock().expect("lock").push(request);
            match self.replies.lock().expect("lock").pop_front() {
                Some(Reply::Events(evs)) => Ok(futures::stream::iter(evs).boxed()),
                Some(Reply::Hang(evs)) => Ok(futures::stream::iter(evs).chain(futures::stream::pending()).boxed()),
                Some(Reply::Fail(e)) => Err(e),
                None => Err(ErrorInfo { kind: ErrorKind::Internal, message: "script exhausted".into() }),
            }
        })
    }
}

fn usage(input: u64, output: u64) -> StreamEvent {
    StreamEvent::Usage { usage: Usage { input_tokens: input, output_tokens: output, ..Usage::default() } }
}

fn text_reply(text: &str) -> Reply {
    Reply::Events(vec![
        StreamEvent::TextDelta { text: text.into() },
        usage(10, 2),
        StreamEvent::Stop { reason: StopReason::EndTurn, stop_sequence: None },
    ])
}

fn tool_events(calls: &[(&str, &str, serde_json::Value)]) -> Vec<StreamEvent> {
    let mut evs = Vec::new();
    for (i, (id, name, args)) in calls.iter().enumerate() {
        let index = u32::try_from(i).expect("index");
        evs.push(StreamEvent::ToolCallStart { index, id: (*id).into(), name: (*name).into() });
        evs.push(StreamEvent::ToolCallDelta { index, arguments: args.to_string() });
        evs.push(StreamEvent::ToolCallEnd { index });
    }
    evs.push(usage(20, 5));
    evs.push(StreamEvent::Stop { reason: StopReason::ToolUse, stop_sequence: None });
    evs
}

fn tool_reply(calls: &[(&str, &str, serde_json::Value)]) -> Reply {
    Reply::Events(tool_events(calls))
}

type ToolFn = dyn Fn(ToolCall, ToolContext) -> BoxFuture<'static, ToolOutput> + Send + Sync;

struct Tools(Box<ToolFn>);

impl ToolHost for Tools {
    fn execute<'a>(&'a self, call: ToolCall, ctx: ToolContext) -> BoxFuture<'a, ToolOutput> {
        (self.0)(call, ctx)
    }
}

fn echo_tools() -> Tools {
    Tools(Box::new(|call, _| Box::pin(async move { ToolOutput::text(format!("{}:{}", call.name, call.input)) })))
}

#[derive(Default)]
struct Events(Mutex<Vec<String>>);

impl RunObserver for Events {
    fn on_event(&self, event: RunEvent<'_>) {
        let s = match event {
            RunEvent::StepStarted { step } => format!("step {step}"),
            RunEvent::TextDelta(t) => format!("text {t}"),
            RunEvent::ThinkingDelta(t) => format!("thinking {t}"),
            RunEvent::ToolCallBegin { id, name, .. } => format!("call {id} {name}"),
            RunEvent::ToolCallArgs { id, .. } => format!("args {id}"),
            RunEvent::Usage(_) | RunEvent::MessageAppended { .. } => return,
            RunEvent::StepCompleted { step, tool_calls } => format!("step {step} done {tool_calls}"),
            RunEvent::ToolRoundStarted { calls, .. } => format!("round {calls}"),
            RunEvent::ToolRoundFinished { failed, .. } => format!("round done {failed}"),
            RunEvent::CompactionStarted => "compaction".to_owned(),
            RunEvent::Compacted { before, after, summary, .. } => format!("compacted {before} {after} {summary:?}"),
        };
        self.0.lock().expect("lock").push(s);
    }
}

fn spec(run_id: &str) -> RunSpec {
    RunSpec {
        run_id: run_id.into(),
        conversation_id: "conv".into(),
        client: "test".into(),
        model: "m".into(),
        tools: Vec::new(),
        max_steps: 10,
        context_window: None,
        template: model::Request::default(),
    }
}

fn user(id: &str, text: &str) -> Entry {
    Entry::new(id, Message::text(Role::User, text))
}

struct Harness<'a> {
    model: &'a Script,
    tools: &'a dyn ToolHost,
    observer: &'a Events,
    journal: &'a Journal,
}

impl Harness<'_> {
    fn ports(&self) -> RunPorts<'_> {
        RunPorts {
            model: self.model,
            tools: self.tools,
            observer: self.observer,
            compactor: &NoCompaction,
            journal: self.journal,
        }
    }
}

/// Runs with no commands and a fresh token.
async fn run_simple(
    model: &Script,
    tools: &dyn ToolHost,
    transcript: &mut Transcript,
    initial: Vec<Entry>,
) -> (RunOutcome, Vec<String>) {
    let observer = Events::default();
    let journal = Journal::none();
    let h = Harness { model, tools, observer: &observer, journal: &journal };
    let (_handle, inbox) = command_channel("r1", []);
    let cancel = CancellationToken::new();
    let out = tokio::time::timeout(GUARD, run(&spec("r1"), transcript, initial, h.ports(), inbox, &cancel))
        .await
        .expect("the run ends");
    (out, observer.0.into_inner().expect("events"))
}

fn roles(t: &Transcript) -> Vec<Role> {
    t.entries().iter().map(|e| e.message.role).collect()
}

fn tool_results(entry: &Entry) -> Vec<(String, String, bool)> {
    entry
        .message
        .content
        .iter()
        .map(|p| match p {
            Part::ToolResult { tool_use_id, content, is_error } => {
                let text = ToolOutput { content: content.clone(), is_error: *is_error }.joined_text();
                (tool_use_id.clone(), text, *is_error)
            }
            other => panic!("not a tool result: {other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn a_plain_run_completes_with_one_model_cycle() {
    let model = Script::new(vec![text_reply("hello")]);
    let mut t = Transcript::new();
    let (out, events) = run_simple(&model, &echo_tools(), &mut t, vec![user("u1", "hi")]).await;
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!((out.steps, out.usage.input_tokens, out.usage.output_tokens), (1, 10, 2));
    assert!(out.usage_reported && out.error.is_none() && out.canceled_by.is_none());
    assert_eq!(roles(&t), vec![Role::User, Role::Assistant]);
    assert_eq!(events, vec!["step 1", "text hello", "step 1 done 0"]);
}

#[tokio::test]
async fn tool_calls_of_one_step_run_at_once_and_results_keep_call_order() {
    let model = Script::new(vec![
        tool_reply(&[("c1", "slow", json!({"n": 1})), ("c2", "fast", json!({"n": 2}))]),
        text_reply("done"),
    ]);
    // `slow` cannot finish before `fast` has started: a sequential executor would deadlock here.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let tools = Tools(Box::new(move |call, _| {
        let barrier = barrier.clone();
        Box::pin(async move {
            barrier.wait().await;
            if call.name == "slow" {
                tokio::task::yield_now().await;
                tokio::task::yield_now().await;
            }
            ToolOutput::text(format!("{} ok", call.name))
        })
    }));
    let mut t = Transcript::new();
    let (out, events) = run_simple(&model, &tools, &mut t, vec![user("u1", "go")]).await;
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(out.steps, 2);
    assert_eq!(out.usage.input_tokens, 30, "usage is summed over the run's model calls");
    assert_eq!(roles(&t), vec![Role::User, Role::Assistant, Role::Tool, Role::Assistant]);
    assert_eq!(
        tool_results(&t.entries()[2]),
        vec![("c1".into(), "slow ok".into(), false), ("c2".into(), "fast ok".into(), false)]
    );
    assert_eq!(t.entries()[2].id, "r1:t1");
    assert_eq!(
        events,
        vec![
            "step 1",
            "call c1 slow",
            "args c1",
            "call c2 fast",
            "args c2",
            "step 1 done 2",
            "round 2",
            "round done 0",
            "step 2",
            "text done",
            "step 2 done 0"
        ]
    );
    // The second request carries the tool calls and their results, after the first request's messages.
    let reqs = model.requests();
    assert_eq!(reqs[1].messages[..1], reqs[0].messages[..]);
    assert_eq!(reqs[1].messages.len(), 3);
}

#[tokio::test]
async fn failing_and_panicking_tools_become_error_results_and_the_run_goes_on() {
    let model = Script::new(vec![
        tool_reply(&[("c1", "fail", json!({})), ("c2", "panic", json!({})), ("c3", "echo", json!({"x": 1}))]),
        text_reply("recovered"),
    ]);
    let tools = Tools(Box::new(|call, _| {
        Box::pin(async move {
            match call.name.as_str() {
                "fail" => ToolOutput::error("no such file"),
                "panic" => panic!("tool bug"),
                _ => ToolOutput::text("fine"),
            }
        })
    }));
    let mut t = Transcript::new();
    let (out, events) = run_simple(&model, &tools, &mut t, vec![user("u1", "go")]).await;
    assert_eq!(out.status, RunStatus::Completed);
    let results = tool_results(&t.entries()[2]);
    assert_eq!(results[0], ("c1".into(), "no such file".into(), true));
    assert!(results[1].2 && results[1].1.contains("failed internally"), "{results:?}");
    assert_eq!(results[2], ("c3".into(), "fine".into(), false));
    assert!(events.contains(&"round done 2".to_owned()));
}

#[tokio::test]
async fn provider_errors_end_the_run_once_at_open_and_mid_stream() {
    let err = ErrorInfo { kind: ErrorKind::RateLimited, message: "slow down".into() };
    let model = Script::new(vec![Reply::Fail(err.clone())]);
    let mut t = Transcript::new();
    let (out, _) = run_simple(&model, &echo_tools(), &mut t, vec![user("u1", "hi")]).await;
    assert_eq!((out.status, out.error), (RunStatus::ProviderError, Some(err.clone())));
    assert_eq!(roles(&t), vec![Role::User, Role::Assistant], "the failed call leaves a note, not a dangling user turn");
    let note = &t.entries()[1];
    assert_eq!(note.id, "r1:error");
    let note_text = ToolOutput { content: note.message.content.clone(), is_error: false }.joined_text();
    assert!(note_text.contains("rate_limited") && note_text.contains("slow down"), "{note_text}");

    let model = Script::new(vec![Reply::Events(vec![
        StreamEvent::TextDelta { text: "par".into() },
        StreamEvent::Error { error: err.clone() },
        StreamEvent::TextDelta { text: "never seen".into() },
    ])]);
    let (out, events) = run_simple(&model, &echo_tools(), &mut t, vec![user("u2", "again")]).await;
    assert_eq!((out.status, out.error), (RunStatus::ProviderError, Some(err)));
    assert_eq!(events, vec!["step 1", "text par"]);
    // The next request alternates: user, assistant note, user (never two user messages in a row).
    assert_eq!(
        model.requests()[0].messages.iter().map(|m| m.role).collect::<Vec<_>>(),
        vec![Role::User, Role::Assistant, Role::User]
    );
}

#[tokio::test]
async fn no_note_when_the_transcript_already_ends_with_an_answer() {
    let err = ErrorInfo { kind: ErrorKind::Upstream, message: "boom".into() };
    let model = Script::new(vec![Reply::Fail(err)]);
    let mut t = Transcript::from_entries([user("u1", "hi"), Entry::new("a1", Message::text(Role::Assistant, "hello"))]);
    let (out, _) = run_simple(&model, &echo_tools(), &mut t, vec![]).await;
    assert_eq!(out.status, RunStatus::ProviderError);
    assert_eq!(roles(&t), vec![Role::User, Role::Assistant]);
}

/// A model port shared with a summarizer (an `Arc` of the script).
struct Shared(Arc<Script>);

impl ModelPort for Shared {
    fn open<'a>(&'a self, request: model::Request, call: ModelCall) -> BoxFuture<'a, Result<EventStream, ErrorInfo>> {
        self.0.open(request, call)
    }
}

#[tokio::test]
async fn a_prompt_near_the_window_is_summarized_before_the_next_model_cycle() {
    let script = Arc::new(Script::new(vec![
        // Call 1 uses 900 of 1000 tokens and asks for a tool.
        Reply::Events(vec![
            StreamEvent::ToolCallStart { index: 0, id: "c1".into(), name: "echo".into() },
            StreamEvent::ToolCallDelta { index: 0, arguments: "{}".into() },
            StreamEvent::ToolCallEnd { index: 0 },
            usage(900, 5),
            StreamEvent::Stop { reason: StopReason::ToolUse, stop_sequence: None },
        ]),
        // The summary call.
        text_reply("the user asked for an echo; it ran"),
        // Call 2 on the compacted transcript.
        text_reply("done"),
    ]));
    let port = Shared(script.clone());
    let summarizer = crate::run::Summarizer {
        model: Arc::new(Shared(script.clone())),
        model_name: "m".into(),
        tools: Vec::new(),
        percent: 80,
        requested: Arc::default(),
        cancel: CancellationToken::new(),
    };
    let observer = Events::default();
    let journal = Journal::none();
    let ports =
        RunPorts { model: &port, tools: &echo_tools(), observer: &observer, compactor: &summarizer, journal: &journal };
    let mut t = Transcript::from_entries([Entry::new("sys", Message::text(Role::System, "be brief"))]);
    let (_h, inbox) = command_channel("r1", []);
    let spec = RunSpec { context_window: Some(1000), ..spec("r1") };
    let cancel = CancellationToken::new();
    let out = tokio::time::timeout(GUARD, run(&spec, &mut t, vec![user("u1", "echo please")], ports, inbox, &cancel))
        .await
        .expect("the run ends");
    assert_eq!(out.status, RunStatus::Completed);
    let requests = script.requests();
    assert_eq!(requests.len(), 3);
    // The summary call sees the whole transcript plus the instruction, and no tool may be called.
    let summary_call = &requests[1];
    assert_eq!(summary_call.messages.len(), 5, "system, user, assistant, tool, instruction");
    assert_eq!(summary_call.tool_choice, None, "no tools in this run, so no tool_choice");
    // The next call starts from the compacted transcript: system verbatim, then the summary.
    let after = &requests[2].messages;
    assert_eq!(after.iter().map(|m| m.role).collect::<Vec<_>>(), vec![Role::System, Role::User]);
    assert_eq!(after[0], Message::text(Role::System, "be brief"));
    let text = ToolOutput { content: after[1].content.clone(), is_error: false }.joined_text();
    assert!(text.contains("the user asked for an echo; it ran") && text.contains("echo please"), "{text}");
    assert_eq!(t.entries().iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), vec!["sys", "r1:c2:summary", "r1:a2"]);
    let events = observer.0.into_inner().expect("events");
    assert!(events.contains(&"compaction".to_owned()), "{events:?}");
    assert!(events.iter().any(|e| e.starts_with("compacted 4 2 Some(")), "{events:?}");
}

/// Runs with a command handle and a token the test controls.
async fn run_controlled(
    model: &Script,
    tools: &dyn ToolHost,
    transcript: &mut Transcript,
    control: impl FnOnce(crate::run::RunHandle, CancellationToken) -> BoxFuture<'static, ()>,
) -> RunOutcome {
    let observer = Events::default();
    let journal = Journal::none();
    let h = Harness { model, tools, observer: &observer, journal: &journal };
    let (handle, inbox) = command_channel("r1", []);
    let cancel = CancellationToken::new();
    let driver = control(handle, cancel.clone());
    let spec = spec("r1");
    let run = run(&spec, transcript, vec![user("u1", "go")], h.ports(), inbox, &cancel);
    let (out, ()) = tokio::time::timeout(GUARD, futures::future::join(run, driver)).await.expect("the run ends");
    out
}

#[tokio::test]
async fn a_client_cancel_during_the_model_call_keeps_the_partial_text() {
    let model = Script::new(vec![Reply::Hang(vec![StreamEvent::TextDelta { text: "partial".into() }])]);
    let mut t = Transcript::new();
    let polled = &model.polled;
    let out = run_controlled(&model, &echo_tools(), &mut t, |h, _| {
        Box::pin(async move {
            // Cancel once the run is waiting on the silent stream.
            for _ in 0..100 {
                tokio::task::yield_now().await;
            }
            assert_eq!(h.send(None, RunCommand::Cancel { reason: "stop".into() }), CommandResult::Applied);
        })
    })
    .await;
    assert_eq!(polled.load(Ordering::SeqCst), 1);
    assert_eq!(out.status, RunStatus::Canceled);
    assert_eq!(out.canceled_by, Some(CancelReason::Client("stop".into())));
    assert_eq!(roles(&t), vec![Role::User, Role::Assistant]);
    assert_eq!(t.entries()[1].message, Message::text(Role::Assistant, "partial"));
}

/// A tool that never finishes and notices being dropped.
struct Stuck {
    dropped: Arc<AtomicBool>,
    cancelled_seen: Arc<AtomicBool>,
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl ToolHost for Stuck {
    fn execute<'a>(&'a self, _: ToolCall, ctx: ToolContext) -> BoxFuture<'a, ToolOutput> {
        let flag = DropFlag(self.dropped.clone());
        let seen = self.cancelled_seen.clone();
        Box::pin(async move {
            let _flag = flag;
            ctx.cancel.cancelled().await;
            seen.store(true, Ordering::SeqCst);
            std::future::pending::<ToolOutput>().await
        })
    }
}

#[tokio::test]
async fn a_cancel_during_tools_aborts_them_and_writes_interrupted_results() {
    let model = Script::new(vec![tool_reply(&[("c1", "stuck", json!({})), ("c2", "stuck", json!({}))])]);
    let stuck = Stuck { dropped: Arc::default(), cancelled_seen: Arc::default() };
    let mut t = Transcript::new();
    let out = run_controlled(&model, &stuck, &mut t, |h, _| {
        Box::pin(async move {
            for _ in 0..100 {
                tokio::task::yield_now().await;
            }
            h.send(None, RunCommand::Cancel { reason: "user_stopped_generation".into() });
        })
    })
    .await;
    assert_eq!(out.status, RunStatus::Canceled);
    assert!(stuck.dropped.load(Ordering::SeqCst), "the unfinished tool futures are dropped");
    assert_eq!(roles(&t), vec![Role::User, Role::Assistant, Role::Tool, Role::Assistant]);
    assert_eq!(t.entries()[3].id, "r1:stopped", "a note closes the stopped turn");
    let results = tool_results(&t.entries()[2]);
    assert!(results.iter().all(|(_, text, err)| *err && text.starts_with("Interrupted")), "{results:?}");
    assert_eq!(results.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), vec!["c1", "c2"]);
}

#[tokio::test]
async fn a_run_continued_elsewhere_leaves_its_step_open_without_a_note() {
    let model = Script::new(vec![tool_reply(&[("c1", "stuck", json!({}))])]);
    let stuck = Stuck { dropped: Arc::default(), cancelled_seen: Arc::default() };
    let mut t = Transcript::new();
    let out = run_controlled(&model, &stuck, &mut t, |h, _| {
        Box::pin(async move {
            for _ in 0..100 {
                tokio::task::yield_now().await;
            }
            h.send(None, RunCommand::Cancel { reason: crate::run::CONTINUED_ELSEWHERE.into() });
        })
    })
    .await;
    assert_eq!(out.status, RunStatus::Canceled);
    assert_eq!(roles(&t), vec![Role::User, Role::Assistant, Role::Tool], "interrupted results, then no note");
}

#[tokio::test]
async fn shutdown_is_checked_before_anything_else() {
    let model = Script::new(vec![text_reply("never")]);
    let mut t = Transcript::new();
    let out = run_controlled(&model, &echo_tools(), &mut t, |h, cancel| {
        cancel.cancel();
        // A command queued at the same time loses against the token.
        h.send(None, RunCommand::InsertMessages(vec![user("u9", "late")]));
        Box::pin(async {})
    })
    .await;
    assert_eq!(model.polled.load(Ordering::SeqCst), 0, "the model call is never started");
    assert_eq!(out.status, RunStatus::Canceled);
    assert_eq!(out.canceled_by, Some(CancelReason::Shutdown));
    assert_eq!(out.pending.len(), 1, "the late insertion goes back to the front end");
}

#[tokio::test]
async fn insertions_wait_for_the_step_and_then_get_their_own_model_cycle() {
    let model = Script::new(vec![Reply::Hang(vec![StreamEvent::TextDelta { text: "one".into() }]), text_reply("two")]);
    // The first reply hangs; break it with a message, then insert one during the second cycle.
    let mut t = Transcript::new();
    let out = run_controlled(&model, &echo_tools(), &mut t, |h, _| {
        Box::pin(async move {
            for _ in 0..50 {
                tokio::task::yield_now().await;
            }
            assert_eq!(
                h.send(Some("r1"), RunCommand::BreakMessages(vec![user("u2", "actually")])),
                CommandResult::Applied
            );
            assert_eq!(
                h.send(Some("r1"), RunCommand::BreakMessages(vec![user("u2", "actually")])),
                CommandResult::Duplicate
            );
            assert_eq!(
                h.send(Some("r0"), RunCommand::InsertMessages(vec![user("u3", "x")])),
                CommandResult::StaleTarget
            );
        })
    })
    .await;
    assert_eq!(out.status, RunStatus::Completed);
    let texts: Vec<_> = t.entries().iter().map(|e| (e.message.role, e.id.clone())).collect();
    assert_eq!(
        texts,
        vec![
            (Role::User, "u1".to_owned()),
            (Role::Assistant, "r1:a1".to_owned()),
            (Role::User, "u2".to_owned()),
            (Role::Assistant, "r1:a2".to_owned())
        ]
    );
}

#[tokio::test]
async fn an_insertion_during_a_tool_round_lands_after_the_results() {
    let model = Script::new(vec![tool_reply(&[("c1", "gate", json!({}))]), text_reply("a"), text_reply("b")]);
    let gate = Arc::new(tokio::sync::Notify::new());
    let g = gate.clone();
    let tools = Tools(Box::new(move |_, _| {
        let g = g.clone();
        Box::pin(async move {
            g.notified().await;
            ToolOutput::text("opened")
        })
    }));
    let mut t = Transcript::new();
    let out = run_controlled(&model, &tools, &mut t, move |h, _| {
        Box::pin(async move {
            for _ in 0..50 {
                tokio::task::yield_now().await;
            }
            assert_eq!(h.send(None, RunCommand::InsertMessages(vec![user("u2", "also")])), CommandResult::Applied);
            for _ in 0..50 {
                tokio::task::yield_now().await;
            }
            gate.notify_one();
        })
    })
    .await;
    assert_eq!(out.status, RunStatus::Completed);
    let ids: Vec<_> = t.entries().iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, vec!["u1", "r1:a1", "r1:t1", "u2", "r1:a2"]);
}

#[tokio::test]
async fn appends_are_idempotent_and_commands_after_the_end_say_so() {
    let model = Script::new(vec![text_reply("a"), text_reply("b")]);
    let mut t = Transcript::new();
    let (_, _) = run_simple(&model, &echo_tools(), &mut t, vec![user("u1", "hi")]).await;
    // The same user message delivered again (a client retry) is not appended twice.
    let (h, inbox) = command_channel("r2", t.entries().iter().map(|e| e.id.as_str()));
    assert_eq!(h.send(None, RunCommand::InsertMessages(vec![user("u1", "hi")])), CommandResult::Duplicate);
    let observer = Events::default();
    let journal = Journal::none();
    let ports = RunPorts {
        model: &model,
        tools: &echo_tools(),
        observer: &observer,
        compactor: &NoCompaction,
        journal: &journal,
    };
    let out = run(&spec("r2"), &mut t, vec![user("u1", "hi")], ports, inbox, &CancellationToken::new()).await;
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(t.entries().iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), vec!["u1", "r1:a1", "r2:a1"]);
    assert!(h.is_ended());
    assert_eq!(h.send(None, RunCommand::Cancel { reason: "late".into() }), CommandResult::RunEnded);
}

#[tokio::test]
async fn the_step_limit_ends_a_looping_run() {
    let model = Script::new((0..5).map(|i| tool_reply(&[(&format!("c{i}"), "echo", json!({}))])).collect());
    let mut t = Transcript::new();
    let observer = Events::default();
    let journal = Journal::none();
    let ports = RunPorts {
        model: &model,
        tools: &echo_tools(),
        observer: &observer,
        compactor: &NoCompaction,
        journal: &journal,
    };
    let (_h, inbox) = command_channel("r1", []);
    let spec = RunSpec { max_steps: 3, ..spec("r1") };
    let out = run(&spec, &mut t, vec![user("u1", "loop")], ports, inbox, &CancellationToken::new()).await;
    assert_eq!((out.status, out.steps, out.step_limit_reached), (RunStatus::Completed, 3, true));
    assert_eq!(model.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_persists_runs_messages_and_tool_rounds_once() {
    let store = Arc::new(Store::open_in_memory(StoreOptions::default()).expect("store"));
    let model =
        Script::new(vec![tool_reply(&[("c1", "echo", json!({"a": 1}))]), text_reply("done"), text_reply("again")]);
    let mut t = Transcript::new();
    for run_id in ["r1", "r2"] {
        let journal = Journal::new(Some(store.clone()), "conv", run_id);
        let observer = Events::default();
        let ports = RunPorts {
            model: &model,
            tools: &echo_tools(),
            observer: &observer,
            compactor: &NoCompaction,
            journal: &journal,
        };
        let (_h, inbox) = command_channel(run_id, []);
        // The second run re-delivers u1 (idempotent) and adds u2.
        let initial = vec![user("u1", "hi"), user(&format!("u-{run_id}"), "next")];
        let out = run(&spec(run_id), &mut t, initial, ports, inbox, &CancellationToken::new()).await;
        assert_eq!(out.status, RunStatus::Completed);
        assert_eq!(out.journal_failures, 0);
    }
    let stored = store.conversation_messages("conv").await.expect("messages");
    let got: Vec<_> = stored.iter().map(|m| (m.seq, m.entry.id.as_str(), m.entry.message.role)).collect();
    assert_eq!(
        got,
        vec![
            (0, "u1", Role::User),
            (1, "u-r1", Role::User),
            (2, "r1:a1", Role::Assistant),
            (3, "r1:t1", Role::Tool),
            (4, "r1:a2", Role::Assistant),
            (5, "u-r2", Role::User),
            (6, "r2:a1", Role::Assistant),
        ]
    );
    assert_eq!(stored.iter().map(|m| m.entry.clone()).collect::<Vec<_>>(), t.entries());
    let runs = store.conversation_runs("conv").await.expect("runs");
    assert_eq!(
        runs.iter().map(|r| (r.id.as_str(), r.status, r.steps)).collect::<Vec<_>>(),
        vec![("r1", RunStatus::Completed, 2), ("r2", RunStatus::Completed, 1)]
    );
    assert_eq!(runs[0].usage.input_tokens, 30);
    let rounds = store.tool_rounds("r1").await.expect("rounds");
    assert_eq!(rounds.len(), 1);
    assert_eq!((rounds[0].step, rounds[0].calls, rounds[0].failed, rounds[0].status.as_str()), (1, 1, 0, "completed"));
    // A transcript loaded back equals the one in memory.
    assert_eq!(Transcript::from_entries(stored.into_iter().map(|m| m.entry)).entries(), t.entries());
}
