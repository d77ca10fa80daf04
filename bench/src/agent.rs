//! The agent-loop benchmark (`--agent-turns N`): 20-tool-call agent turns on the generic run
//! engine (`keyhaven::run`) against an in-process mock provider (a `ModelPort` that streams a
//! scripted tool call per step, then a final answer) and an instant tool host returning 1 KiB
//! per call, with the transcript journaled to a real SQLite file through the store's writer.
//!
//! Reported: wall time per tool round (turn time / 20; it includes the in-process mock
//! provider and tools, so it is an upper bound on the engine's own time), with and without the
//! journal; and resident memory per open conversation (each holding one finished 20-call turn,
//! 43 messages).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use keyhaven::model::{self, Entry, ErrorInfo, Message, Role, StopReason, StreamEvent, Usage};
use keyhaven::run::{
    EventStream, Journal, ModelCall, ModelPort, NoCompaction, RunPorts, RunSpec, ToolCall, ToolContext, ToolHost,
    ToolOutput, Transcript, command_channel, run,
};
use keyhaven::store::{Store, StoreOptions};
use tokio_util::sync::CancellationToken;

/// Tool calls per turn.
pub const CALLS: u32 = 20;

/// Streams one tool call per step for [`CALLS`] steps, then a text answer.
struct MockModel;

impl ModelPort for MockModel {
    fn open<'a>(&'a self, request: model::Request, _: ModelCall) -> BoxFuture<'a, Result<EventStream, ErrorInfo>> {
        // The step is the number of tool messages so far.
        let step = request.messages.iter().filter(|m| m.role == Role::Tool).count();
        let usage = StreamEvent::Usage {
            usage: Usage { input_tokens: 1000 + 300 * step as u64, output_tokens: 40, ..Usage::default() },
        };
        let events = if step < CALLS as usize {
            vec![
                StreamEvent::TextDelta { text: format!("Reading file {step}.") },
                StreamEvent::ToolCallStart { index: 0, id: format!("call-{step}"), name: "read_file".into() },
                StreamEvent::ToolCallDelta { index: 0, arguments: format!("{{\"path\":\"src/file{step}.rs\"}}") },
                StreamEvent::ToolCallEnd { index: 0 },
                usage,
                StreamEvent::Stop { reason: StopReason::ToolUse, stop_sequence: None },
            ]
        } else {
            vec![
                StreamEvent::TextDelta { text: "All files read; here is the summary.".into() },
                usage,
                StreamEvent::Stop { reason: StopReason::EndTurn, stop_sequence: None },
            ]
        };
        Box::pin(async move { Ok(futures::stream::iter(events).boxed()) })
    }
}

/// Answers every call at once with 1 KiB of text.
struct InstantTools;

impl ToolHost for InstantTools {
    fn execute<'a>(&'a self, call: ToolCall, _: ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move { ToolOutput::text(format!("{}\n{}", call.input, "x".repeat(1000))) })
    }
}

fn spec(run_id: &str, conversation_id: &str) -> RunSpec {
    RunSpec {
        run_id: run_id.to_owned(),
        conversation_id: conversation_id.to_owned(),
        client: "bench".into(),
        model: "bench-model".into(),
        tools: Vec::new(),
        max_steps: CALLS + 5,
        context_window: None,
        template: model::Request::default(),
    }
}

/// One 20-call turn on a fresh transcript; returns its wall time.
async fn turn(store: Option<&Arc<Store>>, conversation_id: &str, transcript: &mut Transcript) -> Duration {
    let run_id = format!("{conversation_id}-r");
    let journal = Journal::new(store.cloned(), conversation_id, &run_id);
    let (_handle, inbox) = command_channel(&run_id, []);
    let cancel = CancellationToken::new();
    let ports = RunPorts {
        model: &MockModel,
        tools: &InstantTools,
        observer: &(),
        compactor: &NoCompaction,
        journal: &journal,
    };
    let initial = vec![
        Entry::new(format!("{conversation_id}-sys"), Message::text(Role::System, "You are a coding agent.")),
        Entry::new(format!("{conversation_id}-u"), Message::text(Role::User, "Read all twenty files.")),
    ];
    let started = Instant::now();
    let out = run(&spec(&run_id, conversation_id), transcript, initial, ports, inbox, &cancel).await;
    let took = started.elapsed();
    debug_assert_eq!(out.steps, CALLS + 1);
    took
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Runs the phase and renders its report.
pub async fn phase(turns: u32, conversations: u32, rss_kib: fn() -> Option<(u64, u64)>) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(Store::open(
        &dir.path().join("agent.db"),
        StoreOptions { synchronous_full: true, ..StoreOptions::default() },
    )?);
    let mut out = String::new();
    writeln!(out, "## Agent loop: {CALLS}-tool-call turns (in-process mock provider, instant tools)\n")?;
    writeln!(out, "| journal | turns | per tool round p50 | p99 | mean | whole turn p50 |")?;
    writeln!(out, "|---|---|---|---|---|---|")?;
    for (label, s) in [("none", None), ("SQLite file (synchronous=FULL)", Some(&store))] {
        let mut samples = Vec::new();
        for i in 0..turns {
            let mut t = Transcript::new();
            samples.push(turn(s, &format!("bench-{label:.4}-{i}"), &mut t).await);
        }
        samples.sort();
        let per = |d: Duration| d / CALLS;
        let mean = samples.iter().sum::<Duration>() / turns.max(1);
        writeln!(
            out,
            "| {label} | {turns} | {:.3} ms | {:.3} ms | {:.3} ms | {:.2} ms |",
            ms(per(pct(&samples, 0.5))),
            ms(per(pct(&samples, 0.99))),
            ms(per(mean)),
            ms(pct(&samples, 0.5)),
        )?;
    }
    // Memory: conversations kept open, each with one finished turn.
    let before = rss_kib().map(|r| r.0);
    let mut open = Vec::with_capacity(conversations as usize);
    for i in 0..conversations {
        let mut t = Transcript::new();
        turn(None, &format!("mem-{i}"), &mut t).await;
        open.push(t);
    }
    let after = rss_kib().map(|r| r.0);
    let messages: usize = open.iter().map(Transcript::len).sum::<usize>() / open.len().max(1);
    if let (Some(b), Some(a)) = (before, after) {
        let per = (a.saturating_sub(b) as f64) / f64::from(conversations.max(1));
        writeln!(
            out,
            "\nMemory per open conversation ({messages} messages, ~21 KiB of tool output): {per:.1} KiB \
             (RSS {b} → {a} KiB over {conversations} conversations)."
        )?;
    }
    drop(open);
    store.flush().await?;
    Ok(out)
}
