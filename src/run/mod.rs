//! The generic agent loop, independent of any front end (docs/cursor-backend.md §5 "RunEngine").
//!
//! A run alternates a **model cycle** (one streamed provider call over the transcript) and a
//! **tool round** (every tool call of that step executed at once through a [`ToolHost`] the front
//! end implements) until the model answers without tool calls, the client cancels, the provider
//! fails or the step limit is reached. The states are explicit ([`engine`]):
//!
//! ```text
//! ModelCycle ──tool calls──► ToolRound ──results appended──► ModelCycle
//!     │ no tool calls (and nothing inserted)                     │ Cancel / shutdown
//!     ▼                                                          ▼
//! Finalizing (journal barrier) ──────────────────────────────► Ended (one RunOutcome)
//! ```
//!
//! Invariants:
//! - **Cancellation is checked first** in every wait (a biased `select!`): shutdown (the token) and
//!   [`RunCommand::Cancel`] win over provider events, tool results and other commands.
//! - **Exactly one outcome** per run: [`run`] returns one [`RunOutcome`] on every path (provider
//!   errors, cancellation, a panicking tool), and the journal records the run's finish once.
//! - **Append-only transcript.** Messages are appended with stable ids ([`Transcript::append`]
//!   ignores an id it holds), never edited, removed or reordered, so the messages sent to the
//!   provider across turns are a growing prefix (provider prompt caches keep hitting). Only a
//!   [`Compactor`] may replace the transcript.
//! - **A failed run leaves a well-formed transcript.** After a provider error or a cancellation,
//!   an assistant note saying so is appended when the transcript does not end with an assistant
//!   message, so the next turn's user message never follows an unanswered one.
//! - **Tool results stay paired.** A tool round appends one `tool` message holding a result for
//!   every call of the step, in call order; unfinished calls get an "interrupted" error result.
//!   Messages inserted while a step runs wait until its results are appended.
//! - `run` never names `cursor`; front ends adapt through [`port`].

pub mod command;
pub mod compaction;
mod engine;
pub mod journal;
mod messages;
pub mod port;

pub use command::{CommandResult, RunCommand, RunHandle, RunInbox, command_channel};
pub use compaction::{Compacted, CompactionContext, Compactor, NoCompaction, Summarizer};
pub use engine::{CONTINUED_ELSEWHERE, CancelReason, RunOutcome, RunPorts, RunSpec, run};
pub use journal::Journal;
pub use messages::Transcript;
pub use port::{
    EventStream, GatewayModel, ModelCall, ModelPort, RunEvent, RunObserver, ToolCall, ToolContext, ToolHost, ToolOutput,
};

#[cfg(test)]
mod tests;
