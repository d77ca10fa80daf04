//! Compaction: before every model cycle the run asks its [`Compactor`] whether the context is
//! nearing the model's window (or a compaction was requested, e.g. Cursor's summarize action);
//! if so, the compactor returns the entries that replace the transcript.
//!
//! This is the one place the append-only rule is broken, explicitly: the transcript is replaced
//! as a whole ([`crate::run::Transcript::replace`]), the journal persists the replacement in one
//! transaction, and from then on the new transcript only grows again (so provider prompt caches
//! hit from the compacted prefix on).
//!
//! [`Summarizer`] is the shipped compactor: it asks the model for a summary of the conversation
//! so far and replaces the transcript with the system message (verbatim), one user message
//! holding the summary and the latest user request, and nothing else. A summary that fails or
//! comes back empty keeps the transcript as it was.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::model::{self, Accumulator, Entry, Message, Role, StreamEvent};
use crate::run::port::{ModelCall, ModelPort};

/// What a compactor decides on.
#[derive(Debug, Clone, Copy)]
pub struct CompactionContext<'a> {
    pub entries: &'a [Entry],
    /// Prompt tokens of the latest model call (input plus cache reads and writes), 0 before the
    /// first call.
    pub last_prompt_tokens: u64,
    /// The model's context window, when the catalog knows it.
    pub context_window: Option<u64>,
}

/// A compaction's result: the new transcript and the summary shown to the user.
#[derive(Debug, Clone, PartialEq)]
pub struct Compacted {
    pub entries: Vec<Entry>,
    pub summary: String,
}

pub trait Compactor: Send + Sync {
    fn should_compact(&self, ctx: &CompactionContext<'_>) -> bool;

    /// The entries that replace the transcript, or `None` to keep it. `id` is unique per
    /// compaction (new entries' ids derive from it).
    fn compact<'a>(&'a self, entries: &'a [Entry], id: &'a str) -> BoxFuture<'a, Option<Compacted>>;
}

/// Never compacts.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCompaction;

impl Compactor for NoCompaction {
    fn should_compact(&self, _: &CompactionContext<'_>) -> bool {
        false
    }

    fn compact<'a>(&'a self, _: &'a [Entry], _: &'a str) -> BoxFuture<'a, Option<Compacted>> {
        Box::pin(async { None })
    }
}

/// The default trigger: the latest prompt used at least `percent` of the window.
pub fn nearing_window(ctx: &CompactionContext<'_>, percent: u64) -> bool {
    ctx.context_window.is_some_and(|w| w > 0 && ctx.last_prompt_tokens.saturating_mul(100) >= w.saturating_mul(percent))
}

/// The instruction that asks for the summary (appended as the last user message of the
/// summarizing call only; it never enters the transcript).
pub const SUMMARY_INSTRUCTION: &str = "Summarize the conversation so far for your own later use: the user's \
goals and requests, decisions made, files read or changed (with paths), commands run and their outcomes, \
errors met, and what remains to do. Be complete but concise; write plain text, no preamble. Do not call tools.";

/// Compacts by asking the model for a summary (see the module docs).
pub struct Summarizer {
    pub model: Arc<dyn ModelPort>,
    /// The model name as the catalog knows it.
    pub model_name: String,
    /// The run's tools: sent along (with `tool_choice = none`) because providers refuse tool
    /// calls in a transcript without tool definitions, and the same tools keep the prompt
    /// prefix cacheable.
    pub tools: Vec<model::ToolDef>,
    /// Compact when the latest prompt used at least this share of the window (percent; 0 = never
    /// automatically).
    pub percent: u64,
    /// Set by the front end to compact before the next model cycle regardless of size.
    pub requested: Arc<AtomicBool>,
    pub cancel: CancellationToken,
}

impl std::fmt::Debug for Summarizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Summarizer").field("model_name", &self.model_name).field("percent", &self.percent).finish()
    }
}

impl Summarizer {
    /// Asks the model for a summary of `entries`; `None` when it fails or says nothing.
    pub async fn summary(&self, entries: &[Entry]) -> Option<String> {
        let mut messages: Vec<Message> = entries.iter().map(|e| e.message.clone()).collect();
        messages.push(Message::text(Role::User, SUMMARY_INSTRUCTION));
        let request = model::Request {
            model: self.model_name.clone(),
            messages,
            tools: self.tools.clone(),
            tool_choice: (!self.tools.is_empty()).then_some(model::ToolChoice::None),
            stream: true,
            ..model::Request::default()
        };
        let call = ModelCall { cancel: self.cancel.child_token() };
        let mut events = match self.model.open(request, call).await {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(kind = e.kind.as_str(), "the summary call failed; the transcript is kept");
                return None;
            }
        };
        let mut acc = Accumulator::new();
        while let Some(ev) = events.next().await {
            let stop = matches!(ev, StreamEvent::Error { .. });
            acc.push(&ev);
            if stop {
                break;
            }
        }
        if acc.error().is_some() {
            tracing::warn!("the summary call failed mid-stream; the transcript is kept");
            return None;
        }
        let text = model::joined_text(&acc.finish(0).content, "\n");
        let text = text.trim();
        (!text.is_empty()).then(|| text.to_owned())
    }
}

/// The transcript after a summary: the leading system message (verbatim), then one user message
/// with the summary and the latest user request.
pub fn summarized(entries: &[Entry], summary: &str, id: &str) -> Vec<Entry> {
    let mut out: Vec<Entry> = entries.iter().take_while(|e| e.message.role == Role::System).cloned().collect();
    let latest = entries.iter().rev().find(|e| e.message.role == Role::User && !e.message.joined_text("\n").is_empty());
    let mut text = format!(
        "The earlier conversation was compacted to save context. Summary of it:\n<summary>\n{summary}\n</summary>\n"
    );
    if let Some(latest) = latest {
        text.push_str(&format!(
            "\nThe user's latest message, verbatim:\n<latest_user_message>\n{}\n</latest_user_message>\n\
             Continue from where the summary leaves off.",
            latest.message.joined_text("\n")
        ));
    }
    out.push(Entry::new(format!("{id}:summary"), Message::text(Role::User, text)));
    out
}

impl Compactor for Summarizer {
    fn should_compact(&self, ctx: &CompactionContext<'_>) -> bool {
        self.requested.load(Ordering::SeqCst) || (self.percent > 0 && nearing_window(ctx, self.percent))
    }

    fn compact<'a>(&'a self, entries: &'a [Entry], id: &'a str) -> BoxFuture<'a, Option<Compacted>> {
        Box::pin(async move {
            self.requested.store(false, Ordering::SeqCst);
            let summary = self.summary(entries).await?;
            Some(Compacted { entries: summarized(entries, &summary, id), summary })
        })
    }
}
