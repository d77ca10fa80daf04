//! Conversation id → conversation (docs/cursor-backend.md §2.2 "cursor/conversation"): the
//! transcript each Cursor chat continues, and its current run.
//!
//! - One run at a time per conversation: a new run cancels the current one (as Cursor's
//!   `new_message_submitted` does) and waits for its transcript lock, so runs of one conversation
//!   never interleave their appends.
//! - A conversation not in memory is loaded from the store (its persisted messages), so a
//!   restarted Keyhaven continues the same transcript and the provider still sees a growing
//!   prefix.
//! - Delivery ([`Conversation::deliver`]): a command names the run it was meant for (the request
//!   id of the stream it arrived on); a different current run answers `StaleTarget` and the
//!   command is dropped. Messages a run could no longer take (it was finalizing, or it was
//!   canceled before its next model call) are kept as pending and open the next run, ahead of
//!   its own user message. Pending messages are stored too (`pending_messages`): a restarted
//!   engine loads them with the transcript, and the store forgets each one in the transaction
//!   that appends it to the transcript, so a crash neither loses nor repeats one.
//! - The blob ids of the latest checkpoint the client acknowledged ([`Conversation::acked_blobs`])
//!   are loaded from the store too; the checkpoint publisher decides what they are trusted for
//!   (`checkpoint::worker`).
//! - Todos are kept here, server-side, per conversation ([`Conversation::todos`]); the
//!   `update_todos` tool replaces or merges them and checkpoints read them. Every published
//!   checkpoint is stored, so a conversation loaded from the store takes its todo list from its
//!   latest stored checkpoint.
//! - The registry is bounded; idle conversations beyond the bound are dropped from memory (their
//!   transcript stays in the store).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use prost::Message as _;

use crate::cursor::blobs::BlobId;
use crate::cursor::checkpoint::worker::STORED_VERSION;
use crate::cursor::protocol::agent::{ConversationStateStructure, TodoItem};
use crate::cursor::tools::todos::TodoList;
use crate::model::Entry;
use crate::run::{CommandResult, RunCommand, RunHandle, Transcript};
use crate::store::{CheckpointRecord, ConversationOp, Store};

/// Conversations kept in memory at most (idle ones beyond are dropped).
const MAX_CONVERSATIONS: usize = 256;

#[derive(Debug)]
pub struct Conversation {
    pub id: String,
    /// Held by the run working on the conversation.
    pub transcript: tokio::sync::Mutex<Transcript>,
    current: Mutex<Option<RunHandle>>,
    /// The blob ids of the latest checkpoint the client acknowledged (stored; the checkpoint
    /// publisher keeps it and decides when they need not be sent again).
    pub acked_blobs: Arc<Mutex<HashSet<BlobId>>>,
    /// Messages delivered too late for their run; the next run starts with them (stored).
    pending: Mutex<Vec<Entry>>,
    /// The todo list the `todo_write` tool keeps.
    pub todo_list: Arc<TodoList>,
    /// Where pending messages are stored (`None`: a detached conversation, or no store).
    store: Option<Arc<Store>>,
}

/// What a conversation starts with besides its transcript (from the store).
#[derive(Debug, Default)]
struct Loaded {
    pending: Vec<Entry>,
    acked_blobs: HashSet<BlobId>,
    todos: Vec<TodoItem>,
}

impl Conversation {
    fn new(id: &str, transcript: Transcript, loaded: Loaded, store: Option<Arc<Store>>) -> Conversation {
        Conversation {
            id: id.to_owned(),
            transcript: tokio::sync::Mutex::new(transcript),
            current: Mutex::new(None),
            acked_blobs: Arc::new(Mutex::new(loaded.acked_blobs)),
            pending: Mutex::new(loaded.pending),
            todo_list: Arc::new(TodoList::from(loaded.todos)),
            store,
        }
    }

    /// Delivers `cmd` to the current run if `target` (when given) is that run. Without a current
    /// run, message batches become pending for the next run (`Applied`) and a cancel is
    /// `RunEnded`. A run that is finalizing answers `RunClosing` and its messages become pending.
    pub fn deliver(&self, target: Option<&str>, cmd: RunCommand) -> CommandResult {
        let current = self.current.lock().ok().and_then(|c| c.clone());
        let result = match &current {
            Some(h) => h.send(target, cmd.clone()),
            None if target.is_some() => CommandResult::StaleTarget,
            None => CommandResult::RunEnded,
        };
        if matches!(result, CommandResult::RunClosing | CommandResult::RunEnded)
            && let RunCommand::InsertMessages(batch) | RunCommand::BreakMessages(batch) = cmd
        {
            self.add_pending(batch);
            return CommandResult::Applied;
        }
        result
    }

    /// Keeps messages for the next run (in memory and, queued, in the store).
    pub fn add_pending(&self, batch: Vec<Entry>) {
        if batch.is_empty() {
            return;
        }
        let Ok(mut p) = self.pending.lock() else { return };
        let added: Vec<Entry> = batch.into_iter().filter(|e| !p.iter().any(|q| q.id == e.id)).collect();
        p.extend(added.iter().cloned());
        drop(p);
        if let Some(store) = self.store.as_ref().filter(|_| !added.is_empty()) {
            // Queued ahead of anything the next run appends (one serial writer).
            drop(store.conversation(ConversationOp::AddPending {
                conversation_id: self.id.clone(),
                entries: added,
                created_ms: crate::clock::now_ms(),
            }));
        }
    }

    /// Whether a message with this id waits for the next run.
    pub fn has_pending(&self, id: &str) -> bool {
        self.pending.lock().is_ok_and(|p| p.iter().any(|e| e.id == id))
    }

    /// Takes the messages waiting for the next run. The stored copies stay until the run appends
    /// them to the transcript (the store drops each with its append), so a crash in between
    /// loses none.
    pub fn take_pending(&self) -> Vec<Entry> {
        self.pending.lock().map(|mut p| std::mem::take(&mut *p)).unwrap_or_default()
    }

    /// The conversation's todo list (server-side; checkpoints serialize it).
    pub fn todos(&self) -> Vec<TodoItem> {
        self.todo_list.get()
    }

    /// Restores the list (e.g. from a checkpoint).
    pub fn set_todos(&self, todos: Vec<TodoItem>) {
        self.todo_list.set(todos);
    }

    /// A conversation that is not registered (no conversation id: nothing to continue).
    pub fn detached(id: &str) -> Arc<Conversation> {
        Arc::new(Conversation::new(id, Transcript::new(), Loaded::default(), None))
    }

    /// Cancels the run working on this conversation, if any.
    pub fn supersede(&self, reason: &str) {
        if let Some(h) = self.current.lock().ok().and_then(|c| c.clone()) {
            h.send(None, RunCommand::Cancel { reason: reason.to_owned() });
        }
    }

    /// Records the run now working on the conversation.
    pub fn set_current(&self, handle: Option<RunHandle>) {
        if let Ok(mut c) = self.current.lock() {
            *c = handle;
        }
    }
}

#[derive(Debug)]
pub struct Conversations {
    store: Option<Arc<Store>>,
    map: Mutex<HashMap<String, Arc<Conversation>>>,
}

impl Conversations {
    pub fn new(store: Option<Arc<Store>>) -> Conversations {
        Conversations { store, map: Mutex::default() }
    }

    pub fn store(&self) -> Option<&Arc<Store>> {
        self.store.as_ref()
    }

    /// The conversation `id`, loaded from the store when it is not in memory.
    pub async fn get(&self, id: &str) -> Arc<Conversation> {
        if let Some(c) = self.map.lock().ok().and_then(|m| m.get(id).cloned()) {
            return c;
        }
        let (transcript, loaded) = match &self.store {
            Some(store) => (load_transcript(store, id).await, load_rest(store, id).await),
            None => (Transcript::new(), Loaded::default()),
        };
        let Ok(mut map) = self.map.lock() else { return Conversation::detached(id) };
        if let Some(c) = map.get(id) {
            return c.clone();
        }
        if map.len() >= MAX_CONVERSATIONS {
            map.retain(|_, c| Arc::strong_count(c) > 1);
        }
        let c = Arc::new(Conversation::new(id, transcript, loaded, self.store.clone()));
        map.insert(id.to_owned(), c.clone());
        c
    }
}

async fn load_transcript(store: &Store, id: &str) -> Transcript {
    match store.conversation_messages(id).await {
        Ok(rows) => Transcript::from_entries(rows.into_iter().map(|m| m.entry)),
        Err(e) => {
            tracing::warn!(error = %e, "could not load a conversation's transcript; starting it afresh");
            Transcript::new()
        }
    }
}

/// Pending messages and acknowledged blob ids; a failed read costs only those (logged).
async fn load_rest(store: &Store, id: &str) -> Loaded {
    let pending = store.pending_messages(id).await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "could not load a conversation's pending messages");
        Vec::new()
    });
    let acked = store.acked_blobs(id).await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "could not load a conversation's acknowledged blobs; they will be sent again");
        Vec::new()
    });
    let acked_blobs = acked.into_iter().filter_map(|b| BlobId::try_from(b.as_slice()).ok()).collect();
    let todos = match store.latest_checkpoint(id).await {
        Ok(Some(record)) => stored_todos(&record),
        Ok(None) => Vec::new(),
        Err(e) => {
            tracing::warn!(error = %e, "could not read a conversation's latest checkpoint; its todo list starts empty");
            Vec::new()
        }
    };
    Loaded { pending, acked_blobs, todos }
}

/// The todo list of a stored checkpoint (the engine's own copy of the list; undecodable parts
/// are skipped).
fn stored_todos(record: &CheckpointRecord) -> Vec<TodoItem> {
    if record.version != STORED_VERSION {
        return Vec::new();
    }
    match ConversationStateStructure::decode(record.state.as_slice()) {
        Ok(state) => state.todos.iter().filter_map(|t| TodoItem::decode(t.as_slice()).ok()).collect(),
        Err(e) => {
            tracing::warn!(error = %e, "a stored checkpoint does not decode; its todo list is not restored");
            Vec::new()
        }
    }
}
