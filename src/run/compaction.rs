//! Compaction hooks: before every model cycle the run asks its [`Compactor`] whether the context
//! is nearing the model's window (or a compaction was requested, e.g. Cursor's summarize action);
//! if so, the compactor returns the entries that replace the transcript.
//!
//! This is the one place the append-only rule is broken, explicitly. The run ships only
//! [`NoCompaction`]; a summarizing compactor (and persisting the replaced transcript) is still to
//! come (see ARCHITECTURE.md).

use futures::future::BoxFuture;

use crate::model::Entry;

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

pub trait Compactor: Send + Sync {
    fn should_compact(&self, ctx: &CompactionContext<'_>) -> bool;

    /// The entries that replace the transcript, or `None` to keep it.
    fn compact<'a>(&'a self, entries: &'a [Entry]) -> BoxFuture<'a, Option<Vec<Entry>>>;
}

/// Never compacts.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCompaction;

impl Compactor for NoCompaction {
    fn should_compact(&self, _: &CompactionContext<'_>) -> bool {
        false
    }

    fn compact<'a>(&'a self, _: &'a [Entry]) -> BoxFuture<'a, Option<Vec<Entry>>> {
        Box::pin(async { None })
    }
}

/// The default trigger: the latest prompt used at least `percent` of the window.
pub fn nearing_window(ctx: &CompactionContext<'_>, percent: u64) -> bool {
    ctx.context_window.is_some_and(|w| w > 0 && ctx.last_prompt_tokens.saturating_mul(100) >= w.saturating_mul(percent))
}
