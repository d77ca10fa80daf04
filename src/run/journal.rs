//! Persistence of a run through the store's serial writer: the run row, every appended message
//! (idempotent by message id), tool rounds and the finish. Writes are queued without waiting (the
//! run never waits on a commit between steps); [`Journal::barrier`] waits for all of them before
//! the run reports its outcome, so a finished run's transcript is durable.
//!
//! A journal without a store records nothing (tests, front ends without persistence).

use std::sync::{Arc, Mutex};

use crate::model::{Entry, RunFinish, RunStart, ToolRoundRecord};
use crate::store::{Ack, ConversationOp, Store};

#[derive(Debug)]
pub struct Journal {
    store: Option<Arc<Store>>,
    conversation_id: String,
    run_id: String,
    acks: Mutex<Vec<Ack<u64>>>,
}

impl Journal {
    pub fn new(store: Option<Arc<Store>>, conversation_id: &str, run_id: &str) -> Journal {
        Journal {
            store,
            conversation_id: conversation_id.to_owned(),
            run_id: run_id.to_owned(),
            acks: Mutex::new(Vec::new()),
        }
    }

    /// A journal that records nothing.
    pub fn none() -> Journal {
        Journal::new(None, "", "")
    }

    fn push(&self, op: ConversationOp) {
        let Some(store) = &self.store else { return };
        let ack = store.conversation(op);
        if let Ok(mut acks) = self.acks.lock() {
            acks.push(ack);
        }
    }

    pub(crate) fn start_run(&self, client: &str, model: &str, started_ms: i64) {
        self.push(ConversationOp::StartRun(RunStart {
            id: self.run_id.clone(),
            conversation_id: self.conversation_id.clone(),
            client: client.to_owned(),
            model: model.to_owned(),
            started_ms,
        }));
    }

    pub(crate) fn append(&self, seq: u64, entry: &Entry, created_ms: i64) {
        self.push(ConversationOp::Append {
            conversation_id: self.conversation_id.clone(),
            seq,
            run_id: Some(self.run_id.clone()),
            entry: entry.clone(),
            created_ms,
        });
    }

    /// Persists a compacted transcript: the conversation's messages are replaced by `entries`
    /// (positions from 0) in one transaction; later appends continue from there.
    pub fn replace(&self, entries: &[Entry], created_ms: i64) {
        self.push(ConversationOp::Replace {
            conversation_id: self.conversation_id.clone(),
            run_id: (!self.run_id.is_empty()).then(|| self.run_id.clone()),
            entries: entries.to_vec(),
            created_ms,
        });
    }

    pub(crate) fn tool_round(&self, record: ToolRoundRecord) {
        self.push(ConversationOp::ToolRound(record));
    }

    pub(crate) fn finish(&self, finish: RunFinish) {
        self.push(ConversationOp::FinishRun(finish));
    }

    /// Waits until every queued write is committed (or failed). Returns how many failed.
    pub async fn barrier(&self) -> u32 {
        let acks = self.acks.lock().map(|mut a| std::mem::take(&mut *a)).unwrap_or_default();
        let mut failed = 0;
        for ack in acks {
            if let Err(e) = ack.await {
                failed += 1;
                tracing::warn!(run_id = %self.run_id, error = %e, "agent transcript write failed");
            }
        }
        failed
    }
}
