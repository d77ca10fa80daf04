//! The KV channel of one run (docs/cursor-wire.md §4.9): the server keeps blobs in the client's
//! store with `kv_server_message.set_blob_args` and reads them back with `get_blob_args`; the
//! client answers each request by `id` (`set_blob_result`, `get_blob_result`) through the inbox.
//!
//! - A blob's id is the SHA-256 of its bytes (32 raw bytes), so the same content has the same id
//!   in every checkpoint and a blob read back can be verified ([`verify`]).
//! - Request ids are per run, increasing from 1; answers for unknown ids are dropped.
//! - The channel never waits by itself: callers put their own timeout around [`Pending`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

use crate::cursor::protocol::agent::{self, agent_server_message, kv_client_message, kv_server_message};
use crate::cursor::protocol::events;
use crate::cursor::transport::Output;

/// A blob id: SHA-256 of the blob.
pub type BlobId = [u8; 32];

pub fn blob_id(data: &[u8]) -> BlobId {
    Sha256::digest(data).into()
}

/// Why a blob read back from the client was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlobError {
    #[error("blob id {0} is not 32 bytes long")]
    BadId(String),
    #[error("blob {0} does not match its id (sha256 of the content differs)")]
    Corrupt(String),
    #[error("blob {0} is missing on the client")]
    Missing(String),
    #[error("the client did not return blob {0} in time")]
    Timeout(String),
    #[error("the client refused to store a blob: {0}")]
    Refused(String),
}

/// A short hex form of an id for messages and logs.
pub fn short(id: &[u8]) -> String {
    id.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Checks that `data` is the content of `id`.
pub fn verify(id: &[u8], data: &[u8]) -> Result<(), BlobError> {
    if id.len() != 32 {
        return Err(BlobError::BadId(short(id)));
    }
    if blob_id(data).as_slice() == id { Ok(()) } else { Err(BlobError::Corrupt(short(id))) }
}

enum Waiter {
    Set(oneshot::Sender<Result<(), BlobError>>),
    Get(oneshot::Sender<Option<Vec<u8>>>),
}

/// The KV channel of one run.
pub struct BlobChannel {
    output: Arc<Output>,
    next_id: AtomicU32,
    waiting: Mutex<HashMap<u32, Waiter>>,
}

impl std::fmt::Debug for BlobChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobChannel").finish_non_exhaustive()
    }
}

/// An answer the client owes.
pub type Pending<T> = oneshot::Receiver<T>;

impl BlobChannel {
    pub fn new(output: Arc<Output>) -> Arc<BlobChannel> {
        Arc::new(BlobChannel { output, next_id: AtomicU32::new(1), waiting: Mutex::default() })
    }

    fn send(&self, waiter: Waiter, message: kv_server_message::Message) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut w) = self.waiting.lock() {
            w.insert(id, waiter);
        }
        let msg = agent::AgentServerMessage {
            message: Some(agent_server_message::Message::KvServerMessage(agent::KvServerMessage {
                id,
                message: Some(message),
            })),
        };
        self.output.publish(events::frame(&msg, false));
    }

    /// Asks the client to store `data` under `id`; resolves when the client acknowledges it.
    pub fn set(&self, id: &BlobId, data: Vec<u8>) -> Pending<Result<(), BlobError>> {
        let (tx, rx) = oneshot::channel();
        let args = agent::SetBlobArgs { blob_id: id.to_vec(), blob_data: data };
        self.send(Waiter::Set(tx), kv_server_message::Message::SetBlobArgs(args));
        rx
    }

    /// Asks the client for blob `id`; resolves with its bytes (`None` when the client has none).
    /// The caller verifies them.
    pub fn get(&self, id: &[u8]) -> Pending<Option<Vec<u8>>> {
        let (tx, rx) = oneshot::channel();
        self.send(
            Waiter::Get(tx),
            kv_server_message::Message::GetBlobArgs(agent::GetBlobArgs { blob_id: id.to_vec() }),
        );
        rx
    }

    /// Routes a `kv_client_message`.
    pub fn deliver(&self, m: agent::KvClientMessage) {
        let waiter = self.waiting.lock().ok().and_then(|mut w| w.remove(&m.id));
        match (waiter, m.message) {
            (Some(Waiter::Set(tx)), Some(kv_client_message::Message::SetBlobResult(r))) => {
                let _ = tx.send(match r.error {
                    Some(e) => Err(BlobError::Refused(e.message)),
                    None => Ok(()),
                });
            }
            (Some(Waiter::Get(tx)), Some(kv_client_message::Message::GetBlobResult(r))) => {
                let _ = tx.send(r.blob_data);
            }
            (Some(w), _) => {
                tracing::debug!(id = m.id, "KV answer of the wrong kind; the request stays open");
                if let Ok(mut map) = self.waiting.lock() {
                    map.insert(m.id, w);
                }
            }
            (None, _) => tracing::debug!(id = m.id, "KV answer for an unknown request dropped"),
        }
    }
}

/// Reads client blobs named in exec results (e.g. `ReadSuccess.output_blob_id`) with a timeout.
#[derive(Debug, Clone)]
pub struct BlobReader {
    pub channel: Arc<BlobChannel>,
    pub timeout: std::time::Duration,
}

impl BlobReader {
    /// The blob's bytes (the client's own blob: not checked against its id).
    pub async fn read(&self, id: &[u8]) -> Result<Vec<u8>, BlobError> {
        match tokio::time::timeout(self.timeout, self.channel.get(id)).await {
            Ok(Ok(Some(d))) => Ok(d),
            Ok(Ok(None)) => Err(BlobError::Missing(short(id))),
            Ok(Err(_)) | Err(_) => Err(BlobError::Timeout(short(id))),
        }
    }
}
