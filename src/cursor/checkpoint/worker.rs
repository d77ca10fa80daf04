//! Checkpoints during a run: the [`Tracker`] (a `RunObserver`) mirrors the transcript from
//! `MessageAppended` events and asks for a checkpoint when a tool round starts (so pending tool
//! calls survive a crash), when its results are appended, and right after a compaction replaced
//! the transcript (`Compacted` carries the new one; a crash mid-turn then resumes from the
//! compacted state); the [`Publisher`] publishes each one, in the order asked: new blobs go to
//! the client with `set_blob_args`, and the `conversation_checkpoint_update` follows only when
//! every one of them is acknowledged. The driver publishes the final checkpoint (before
//! `turn_ended`, also after a cancel) from the real transcript ([`Tracker::snapshot`]).
//!
//! - Each snapshot carries the todo list as it is when the snapshot is taken (the conversation's
//!   [`TodoList`], shared with the tools), so a `todo_write` reaches the next checkpoint of the
//!   same turn.
//! - Which blobs are not sent again ([`trusted`]): those acknowledged during this run, and those
//!   of the latest checkpoint the client acknowledged before (per conversation, persisted) that
//!   the client's run request still references (its `conversation_state` roots and turns, the
//!   turns' user message and steps, `pre_fetched_blobs`). An acknowledgement alone is not
//!   trusted across runs: the IDE may have lost its blob store since (reinstall, cleared
//!   storage, another machine), and a checkpoint naming a blob the client lacks cannot be
//!   resumed; the client's own state is the evidence that its store still holds them.
//! - Acks are awaited at most [`Publisher::timeout`] (`[agent] blob_ack_timeout`). On timeout,
//!   or when the client refuses a blob, that checkpoint is **skipped** (not published, logged)
//!   and the publisher gives up for the rest of the run: later checkpoints are skipped at once,
//!   so a client that does not answer KV delays a turn by one timeout at most.
//! - A checkpoint identical to the previous one is not published again.
//! - Each published state is also stored (`checkpoints` table, version 1, keyed by the number of
//!   messages it covers), and its blob ids become the conversation's acknowledged set
//!   (`acked_blobs`, stored as differences).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prost::Message as _;
use tokio::sync::mpsc;

use crate::cursor::blobs::{BlobChannel, BlobError, BlobId};
use crate::cursor::checkpoint::{Encoded, MAX_WIRE_BYTES, Meta, encode, trim};
use crate::cursor::protocol::agent::{self, agent_server_message};
use crate::cursor::protocol::events;
use crate::cursor::tools::catalog::Catalog;
use crate::cursor::tools::interact::ModeCell;
use crate::cursor::tools::todos::TodoList;
use crate::cursor::transport::Output;
use crate::model::Entry;
use crate::run::{RunEvent, RunObserver};
use crate::store::{CheckpointRecord, ConversationOp, Store};

/// The version of the stored checkpoint rows this build writes.
pub const STORED_VERSION: u32 = 1;

/// A transcript snapshot to checkpoint, with the context use and the todo list at that point.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub entries: Vec<Entry>,
    pub used_tokens: u64,
    /// Serialized `TodoItem`s, as the list was when the snapshot was taken.
    pub todos: Vec<Vec<u8>>,
}

#[derive(Debug, Default)]
struct Mirror {
    entries: Vec<Entry>,
    used_tokens: u64,
}

/// Mirrors the run's transcript and requests checkpoints at tool-round boundaries and after a
/// compaction.
#[derive(Debug)]
pub struct Tracker {
    mirror: Mutex<Mirror>,
    todos: Arc<TodoList>,
    tx: Mutex<Option<mpsc::UnboundedSender<Snapshot>>>,
}

/// A rough token count of `entries` (the context indicator after a compaction, until the next
/// model call reports real usage).
fn estimated_tokens(entries: &[Entry]) -> u64 {
    entries
        .iter()
        .map(|e| serde_json::to_string(&e.message.content).map_or(0, |s| s.chars().count().div_ceil(4)))
        .map(|n| u64::try_from(n).unwrap_or(u64::MAX))
        .sum()
}

impl Tracker {
    /// A tracker starting from the transcript as the run finds it; `todos` is the conversation's
    /// list (read whenever a snapshot is taken).
    pub fn new(entries: &[Entry], todos: Arc<TodoList>) -> (Tracker, mpsc::UnboundedReceiver<Snapshot>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mirror = Mirror { entries: entries.to_vec(), ..Mirror::default() };
        (Tracker { mirror: Mutex::new(mirror), todos, tx: Mutex::new(Some(tx)) }, rx)
    }

    /// Context use of the latest model call.
    pub fn used_tokens(&self) -> u64 {
        self.mirror.lock().map_or(0, |m| m.used_tokens)
    }

    /// The todo list as it is now, serialized for the state.
    fn todos(&self) -> Vec<Vec<u8>> {
        self.todos.get().iter().map(prost::Message::encode_to_vec).collect()
    }

    /// A snapshot of `entries` (the final checkpoint's: the real transcript) with the latest
    /// context use and the todo list as it is now.
    pub fn snapshot(&self, entries: &[Entry]) -> Snapshot {
        Snapshot { entries: entries.to_vec(), used_tokens: self.used_tokens(), todos: self.todos() }
    }

    fn request(&self) {
        let Ok(m) = self.mirror.lock() else { return };
        if let Some(tx) = self.tx.lock().ok().and_then(|t| t.clone()) {
            let _ = tx.send(Snapshot { entries: m.entries.clone(), used_tokens: m.used_tokens, todos: self.todos() });
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
            RunEvent::Compacted { summary: Some(_), entries, .. } => {
                if let Ok(mut m) = self.mirror.lock() {
                    m.entries = entries.to_vec();
                    m.used_tokens = estimated_tokens(entries);
                }
                self.request();
            }
            RunEvent::ToolRoundStarted { .. } | RunEvent::ToolRoundFinished { .. } => self.request(),
            _ => {}
        }
    }
}

/// The blob ids a checkpoint need not send again (module docs): every id acknowledged during
/// this run (`sent`), and the ids of the client's previous checkpoint (`acked`) that its run
/// request still references (`held`: roots, turns, pre-fetched blobs), including the user
/// message and steps of a referenced turn (`children`, from the encoding).
pub fn trusted(
    acked: &HashSet<BlobId>,
    held: &HashSet<BlobId>,
    sent: &HashSet<BlobId>,
    children: &HashMap<BlobId, Vec<BlobId>>,
) -> HashSet<BlobId> {
    let mut held = held.clone();
    for (turn, kids) in children {
        if held.contains(turn) {
            held.extend(kids.iter().copied());
        }
    }
    acked.iter().filter(|id| held.contains(*id)).chain(sent).copied().collect()
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
    /// The blob ids of the latest checkpoint the client acknowledged (per conversation, shared
    /// across runs, persisted; `Conversation::acked_blobs`).
    pub acked: Arc<Mutex<HashSet<BlobId>>>,
    /// Blob ids the run request shows the client holds ([`super::held_by_client`]).
    pub held: HashSet<BlobId>,
    /// Blob ids acknowledged during this run.
    pub sent: Mutex<HashSet<BlobId>>,
    pub timeout: Duration,
    /// Mode, workspace and context window (used tokens and todos come with each snapshot).
    pub meta: Meta,
    /// The run's current mode (an approved `switch_mode` changes it); overrides `meta.mode`.
    pub mode: Option<Arc<ModeCell>>,
    pub catalog: Option<Arc<Catalog>>,
    pub store: Option<Arc<Store>>,
    pub conversation_id: String,
    pub run_id: String,
    pub gave_up: AtomicBool,
    pub last: Mutex<Vec<u8>>,
}

impl Publisher {
    /// Builds, pushes and publishes the checkpoint of `snap`.
    pub async fn publish(&self, snap: &Snapshot) -> Publish {
        if self.gave_up.load(Ordering::Relaxed) {
            return Publish::Skipped("the client did not acknowledge earlier blobs".to_owned());
        }
        let mode = self.mode.as_ref().map_or(self.meta.mode, |m| m.get());
        let meta = Meta { used_tokens: snap.used_tokens, todos: snap.todos.clone(), mode, ..self.meta.clone() };
        let mut enc = encode(&snap.entries, &meta, self.catalog.as_deref());
        let trimmed = trim(&mut enc.state, MAX_WIRE_BYTES);
        if trimmed.any() {
            tracing::info!(conversation = %self.conversation_id, ?trimmed, "checkpoint trimmed to stay under the wire limit");
        }
        let bytes = enc.state.encode_to_vec();
        if self.last.lock().is_ok_and(|l| *l == bytes) {
            return Publish::Unchanged;
        }
        let known = self.trusted(&enc);
        let referenced = enc.referenced();
        let ids: HashSet<BlobId> = referenced.iter().map(|(id, _)| *id).collect();
        let new: Vec<(BlobId, Vec<u8>)> =
            referenced.into_iter().filter(|(id, _)| !known.contains(id)).map(|(id, d)| (id, d.to_vec())).collect();
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
        if let Ok(mut sent) = self.sent.lock() {
            sent.extend(new.iter().map(|(id, _)| *id));
        }
        self.remember(ids);
        let msg = agent::AgentServerMessage {
            message: Some(agent_server_message::Message::ConversationCheckpointUpdate(enc.state)),
        };
        let size = bytes.len();
        self.output.publish(events::frame(&msg, false));
        if let Some(store) = &self.store {
            // Queued; the run's journal barrier does not wait for it (a lost row only means the
            // client's copy is the newer one).
            drop(store.conversation(ConversationOp::Checkpoint {
                record: CheckpointRecord {
                    conversation_id: self.conversation_id.clone(),
                    seq: u64::try_from(snap.entries.len()).unwrap_or(u64::MAX),
                    run_id: Some(self.run_id.clone()),
                    version: STORED_VERSION,
                    created_ms: crate::clock::now_ms(),
                    state: bytes.clone(),
                },
                last_message_id: snap.entries.last().map(|e| e.id.clone()),
            }));
        }
        if let Ok(mut l) = self.last.lock() {
            *l = bytes;
        }
        Publish::Published { bytes: size, blobs: new.len() }
    }

    /// The blob ids this checkpoint need not send ([`trusted`]).
    fn trusted(&self, enc: &Encoded) -> HashSet<BlobId> {
        let acked = self.acked.lock().map(|a| a.clone()).unwrap_or_default();
        let sent = self.sent.lock().map(|s| s.clone()).unwrap_or_default();
        trusted(&acked, &self.held, &sent, &enc.children)
    }

    /// The published checkpoint's blobs become the conversation's acknowledged set (stored as
    /// the difference to the previous one).
    fn remember(&self, ids: HashSet<BlobId>) {
        let Ok(mut acked) = self.acked.lock() else { return };
        let added: Vec<Vec<u8>> = ids.difference(&acked).map(|id| id.to_vec()).collect();
        let removed: Vec<Vec<u8>> = acked.difference(&ids).map(|id| id.to_vec()).collect();
        *acked = ids;
        drop(acked);
        if let Some(store) = self.store.as_ref().filter(|_| !(added.is_empty() && removed.is_empty())) {
            // Queued like the checkpoint row; a lost write only means blobs are sent again.
            drop(store.conversation(ConversationOp::AckedBlobs {
                conversation_id: self.conversation_id.clone(),
                added,
                removed,
                acked_ms: crate::clock::now_ms(),
            }));
        }
    }

    /// Publishes every requested snapshot in order until the tracker is gone.
    pub async fn work(&self, mut rx: mpsc::UnboundedReceiver<Snapshot>) {
        while let Some(snap) = rx.recv().await {
            self.publish(&snap).await;
        }
    }
}
