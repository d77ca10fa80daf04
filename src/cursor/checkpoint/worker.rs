//! Checkpoints during a run: the [`Tracker`] (a `RunObserver`) mirrors the transcript from
//! `MessageAppended` events and asks for a checkpoint when a tool round starts (so pending tool
//! calls survive a crash) and when its results are appended; the [`Publisher`] publishes each
//! one: new blobs go to the client with `set_blob_args`, and the `conversation_checkpoint_update`
//! follows only when every one of them is acknowledged. The driver publishes the final
//! checkpoint (before `turn_ended`, also after a cancel) from the real transcript.
//!
//! - Blobs the client acknowledged are remembered per conversation and not sent again.
//! - Acks are awaited at most [`Publisher::timeout`] (`[agent] blob_ack_timeout`). On timeout,
//!   or when the client refuses a blob, that checkpoint is **skipped** (not published, logged)
//!   and the publisher gives up for the rest of the run: later checkpoints are skipped at once,
//!   so a client that does not answer KV delays a turn by one timeout at most.
//! - A checkpoint identical to the previous one is not published again.
//! - Each published state is also stored (`checkpoints` table, version 1, keyed by the number of
//!   messages it covers).
//! - After a compaction the mirror is stale; the tracker then asks for nothing more and only the
//!   final checkpoint (from the real transcript) is published.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost::Message as _;
use tokio::sync::mpsc;

use crate::cursor::blobs::{BlobChannel, BlobError, BlobId};
use crate::cursor::checkpoint::{MAX_WIRE_BYTES, Meta, encode, trim};
use crate::cursor::protocol::agent::{self, agent_server_message};
use crate::cursor::protocol::events;
use crate::cursor::tools::catalog::Catalog;
use crate::cursor::transport::Output;
use crate::model::Entry;
use crate::run::{RunEvent, RunObserver};
use crate::store::{CheckpointRecord, ConversationOp, Store};

/// The version of the stored checkpoint rows this build writes.
pub const STORED_VERSION: u32 = 1;

/// A transcript snapshot to checkpoint, with the context use at that point.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub entries: Vec<Entry>,
    pub used_tokens: u64,
}

#[derive(Debug, Default)]
struct Mirror {
    entries: Vec<Entry>,
    used_tokens: u64,
    stale: bool,
}

/// Mirrors the run's transcript and requests checkpoints at tool-round boundaries.
#[derive(Debug)]
pub struct Tracker {
    mirror: Mutex<Mirror>,
    tx: Mutex<Option<mpsc::UnboundedSender<Snapshot>>>,
}

impl Tracker {
    /// A tracker starting from the transcript as the run finds it.
    pub fn new(entries: &[Entry]) -> (Tracker, mpsc::UnboundedReceiver<Snapshot>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mirror = Mirror { entries: entries.to_vec(), ..Mirror::default() };
        (Tracker { mirror: Mutex::new(mirror), tx: Mutex::new(Some(tx)) }, rx)
    }

    /// Context use of the latest model call.
    pub fn used_tokens(&self) -> u64 {
        self.mirror.lock().map_or(0, |m| m.used_tokens)
    }

    fn request(&self) {
        let Ok(m) = self.mirror.lock() else { return };
        if m.stale {
            return;
        }
        if let Some(tx) = self.tx.lock().ok().and_then(|t| t.clone()) {
            let _ = tx.send(Snapshot { entries: m.entries.clone(), used_tokens: m.used_tokens });
        }
    }

    /// No more requests: the publisher's [`Publisher::work`] ends after the queued ones.
    pub fn close(&self) {
        if let Ok(mut t) = self.tx.lock() {
            t.take();
        }
    }
}

impl RunObserver for Tracker {
    fn on_event(&self, event: RunEvent<'_>) {
        match event {
            RunEvent::MessageAppended { entry, .. } => {
                if let Ok(mut m) = self.mirror.lock() {
                    m.entries.push(entry.clone());
                }
            }
            RunEvent::Usage(u) => {
                if let Ok(mut m) = self.mirror.lock() {
                    m.used_tokens = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens + u.output_tokens;
                }
            }
            RunEvent::Compacted { .. } => {
                if let Ok(mut m) = self.mirror.lock() {
                    m.stale = true;
                }
            }
            RunEvent::ToolRoundStarted { .. } | RunEvent::ToolRoundFinished { .. } => self.request(),
            _ => {}
        }
    }
}

/// Two observers in order.
#[derive(Debug, Clone, Copy)]
pub struct Both<'a, A: ?Sized, B: ?Sized>(pub &'a A, pub &'a B);

impl<A: RunObserver + ?Sized, B: RunObserver + ?Sized> RunObserver for Both<'_, A, B> {
    fn on_event(&self, event: RunEvent<'_>) {
        self.0.on_event(event);
        self.1.on_event(event);
    }
}

/// What became of one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Publish {
    Published {
        bytes: usize,
        blobs: usize,
    },
    /// Identical to the previous one.
    Unchanged,
    /// Not published: the client did not acknowledge its blobs (or an earlier timeout).
    Skipped(String),
}

/// Publishes checkpoints of one run.
#[derive(Debug)]
pub struct Publisher {
    pub blobs: Arc<BlobChannel>,
    pub output: Arc<Output>,
    /// Blob ids the client acknowledged (per conversation, shared across runs).
    pub acked: Arc<Mutex<HashSet<BlobId>>>,
    pub timeout: Duration,
    pub meta: Meta,
    pub catalog: Option<Arc<Catalog>>,
    pub store: Option<Arc<Store>>,
    pub conversation_id: String,
    pub run_id: String,
    pub gave_up: AtomicBool,
    pub last: Mutex<Vec<u8>>,
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Publisher {
    /// Builds, pushes and publishes the checkpoint of `snap`.
    pub async fn publish(&self, snap: &Snapshot) -> Publish {
        if self.gave_up.load(Ordering::Relaxed) {
            return Publish::Skipped("the client did not acknowledge earlier blobs".to_owned());
        }
        let meta = Meta { used_tokens: snap.used_tokens, ..self.meta.clone() };
        let mut enc = encode(&snap.entries, &meta, self.catalog.as_deref());
        let trimmed = trim(&mut enc.state, MAX_WIRE_BYTES);
        if trimmed.any() {
            tracing::info!(conversation = %self.conversation_id, ?trimmed, "checkpoint trimmed to stay under the wire limit");
        }
        let bytes = enc.state.encode_to_vec();
        if self.last.lock().is_ok_and(|l| *l == bytes) {
            return Publish::Unchanged;
        }
        let known = self.acked.lock().map(|a| a.clone()).unwrap_or_default();
        let new: Vec<(BlobId, Vec<u8>)> = enc
            .referenced()
            .into_iter()
            .filter(|(id, _)| !known.contains(id))
            .map(|(id, d)| (id, d.to_vec()))
            .collect();
        let acks: Vec<_> = new.iter().map(|(id, data)| self.blobs.set(id, data.clone())).collect();
        let waited = tokio::time::timeout(self.timeout, futures::future::join_all(acks)).await;
        let failure = match waited {
            Err(_) => Some(BlobError::Timeout(format!("{} blobs", new.len())).to_string()),
            Ok(results) => results.into_iter().find_map(|r| match r {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some("the run ended".to_owned()),
            }),
        };
        if let Some(why) = failure {
            self.gave_up.store(true, Ordering::Relaxed);
            tracing::warn!(conversation = %self.conversation_id, reason = %why, "checkpoint skipped: blobs not acknowledged");
            return Publish::Skipped(why);
        }
        if let Ok(mut a) = self.acked.lock() {
            a.extend(new.iter().map(|(id, _)| *id));
        }
        let msg = agent::AgentServerMessage {
            message: Some(agent_server_message::Message::ConversationCheckpointUpdate(enc.state)),
        };
        let size = bytes.len();
        self.output.publish(events::frame(&msg, false));
        if let Some(store) = &self.store {
            // Queued; the run's journal barrier does not wait for it (a lost row only means the
            // client's copy is the newer one).
            drop(store.conversation(ConversationOp::Checkpoint(CheckpointRecord {
                conversation_id: self.conversation_id.clone(),
                seq: u64::try_from(snap.entries.len()).unwrap_or(u64::MAX),
                run_id: Some(self.run_id.clone()),
                version: STORED_VERSION,
                created_ms: now_ms(),
                state: bytes.clone(),
            })));
        }
        if let Ok(mut l) = self.last.lock() {
            *l = bytes;
        }
        Publish::Published { bytes: size, blobs: new.len() }
    }

    /// Publishes every requested snapshot in order until the tracker is gone.
    pub async fn work(&self, mut rx: mpsc::UnboundedReceiver<Snapshot>) {
        while let Some(snap) = rx.recv().await {
            self.publish(&snap).await;
        }
    }
}
