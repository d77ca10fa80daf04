//! The call recorder's sink: `app` connects it to the store. Writes are queued, never block the
//! request path, and each returns an [`Ack`] that resolves when the write is durable.

use std::future::Future;
use std::pin::Pin;

use crate::model::{CallFinish, CallStart, ReasoningRecord};

/// Resolves once the record is durable (the store's call journal, or its SQLite commit) or has
/// failed; failures are logged by the sink.
pub type Ack = Pin<Box<dyn Future<Output = ()> + Send>>;

pub trait CallSink: Send + Sync {
    fn start(&self, start: CallStart) -> Ack;
    fn finish(&self, finish: CallFinish) -> Ack;
    /// The reasoning before some tool calls, for the gateway's memory to survive a restart.
    /// Records nothing by default.
    fn reasoning(&self, _record: ReasoningRecord) -> Ack {
        Box::pin(async {})
    }
}

/// Records nothing (benchmarks of the bare relay, tests).
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl CallSink for NullSink {
    fn start(&self, _: CallStart) -> Ack {
        Box::pin(async {})
    }

    fn finish(&self, _: CallFinish) -> Ack {
        Box::pin(async {})
    }
}
