//! Restore: an incoming `ConversationStateStructure` → transcript entries.
//!
//! The engine's own transcript (SQLite) is the source of truth; the incoming state is used only
//! when the local transcript is missing or behind ([`plan`]): the state's root ids extend the
//! ids of the local messages. Blobs come from `pre_fetched_blobs` or a `get_blob_args` round trip
//! and are verified (`id == sha256(content)`); a blob that does not match its id, is missing or
//! cannot be read refuses the whole state with a [`RecoveryError`] (the turn ends with a Connect
//! error, nothing is appended).
//!
//! The todo list is taken from the incoming state when the conversation has none ([`todos`]:
//! the engine keeps it in memory only, so after a restart the client's copy is the only one).
//!
//! Pending tool calls (an assistant message whose calls have no results, e.g. the editor closed
//! mid-tool or the connection dropped) are resolved with *interrupted* error results, never
//! re-issued: a re-issued shell command or write could act twice, and the model sees the
//! interruption and can call the tool again ([`interrupted_results`]).

use std::collections::HashMap;
use std::time::Duration;

use crate::cursor::blobs::{BlobChannel, BlobError, short, verify};
use crate::cursor::checkpoint::{ROOT_VERSION, RootBlob, root_ids};
use crate::cursor::protocol::agent;
use crate::model::{Entry, Message, Part, Role};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecoveryError {
    #[error(transparent)]
    Blob(#[from] BlobError),
    #[error("root message {0} is not a Keyhaven checkpoint message: {1}")]
    Unreadable(String, String),
    #[error("root message {0} was written by a newer Keyhaven (version {1})")]
    TooNew(String, u32),
}

/// What to do with an incoming state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The local transcript is current (or the state is empty or does not extend it).
    KeepLocal,
    /// Restore these root ids (those after the local messages).
    Restore(Vec<Vec<u8>>),
}

/// Decides whether `state` is needed on top of the `local` entries.
pub fn plan(local: &[Entry], state: Option<&agent::ConversationStateStructure>) -> Plan {
    let Some(state) = state else { return Plan::KeepLocal };
    let incoming = &state.root_prompt_messages_json;
    if incoming.len() <= local.len() {
        return Plan::KeepLocal;
    }
    let ours = root_ids(local);
    if ours.iter().zip(incoming).all(|(a, b)| a.as_slice() == b.as_slice()) {
        Plan::Restore(incoming[local.len()..].to_vec())
    } else {
        tracing::info!(
            local = local.len(),
            incoming = incoming.len(),
            "incoming checkpoint diverges; the local transcript wins"
        );
        Plan::KeepLocal
    }
}

/// Where blobs come from: the run request's `pre_fetched_blobs`, then the client.
#[derive(Debug)]
pub struct Source<'a> {
    pub pre_fetched: HashMap<Vec<u8>, Vec<u8>>,
    pub client: &'a BlobChannel,
    pub timeout: Duration,
}

impl Source<'_> {
    pub fn new(pre: Vec<agent::PreFetchedBlob>, client: &BlobChannel, timeout: Duration) -> Source<'_> {
        Source { pre_fetched: pre.into_iter().map(|b| (b.id, b.value)).collect(), client, timeout }
    }

    async fn blob(&self, id: &[u8]) -> Result<Vec<u8>, BlobError> {
        if id.len() != 32 {
            return Err(BlobError::BadId(short(id)));
        }
        let data = self.content(id).await?;
        verify(id, &data)?;
        Ok(data)
    }

    /// A blob the client made (a long prompt, an image): from `pre_fetched_blobs`, else read
    /// over KV. Not checked against its id: the client names its own blobs, and nothing of
    /// Keyhaven's state depends on them.
    pub async fn content(&self, id: &[u8]) -> Result<Vec<u8>, BlobError> {
        let data = match self.pre_fetched.get(id) {
            Some(d) => d.clone(),
            None => match tokio::time::timeout(self.timeout, self.client.get(id)).await {
                Ok(Ok(Some(d))) => d,
                Ok(Ok(None)) => return Err(BlobError::Missing(short(id))),
                Ok(Err(_)) | Err(_) => return Err(BlobError::Timeout(short(id))),
            },
        };
        Ok(data)
    }
}

/// Reads and verifies the root messages `ids` (in order).
pub async fn restore(ids: &[Vec<u8>], source: &Source<'_>) -> Result<Vec<Entry>, RecoveryError> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let data = source.blob(id).await?;
        let blob: RootBlob =
            serde_json::from_slice(&data).map_err(|e| RecoveryError::Unreadable(short(id), e.to_string()))?;
        if blob.v > ROOT_VERSION {
            return Err(RecoveryError::TooNew(short(id), blob.v));
        }
        out.push(blob.entry());
    }
    Ok(out)
}

/// Drops leading messages a provider request cannot start with after a trimmed checkpoint
/// (anything before the first user message, except system messages).
pub fn drop_orphans(entries: Vec<Entry>, after_local: bool) -> Vec<Entry> {
    if after_local {
        return entries;
    }
    let mut seen_user = false;
    entries
        .into_iter()
        .filter(|e| {
            seen_user |= e.message.role == Role::User;
            seen_user || e.message.role == Role::System
        })
        .collect()
}

/// The todo list an incoming state carries (unreadable items are skipped). The engine does not
/// store the list, so after a restart the client's checkpoint is its only copy.
pub fn todos(state: Option<&agent::ConversationStateStructure>) -> Vec<agent::TodoItem> {
    use prost::Message as _;
    state.map_or_else(Vec::new, |s| s.todos.iter().filter_map(|t| agent::TodoItem::decode(t.as_slice()).ok()).collect())
}

/// The tool message resolving the newest assistant message's unanswered calls, if any.
pub fn interrupted_results(entries: &[Entry]) -> Option<Entry> {
    let last = super::pending_calls(entries)?;
    let parts: Vec<Part> = last
        .message
        .content
        .iter()
        .filter_map(|p| match p {
            Part::ToolUse { id, .. } => Some(Part::ToolResult {
                tool_use_id: id.clone(),
                content: vec![Part::text(
                    "Interrupted: the connection to the editor was lost before this tool call finished.",
                )],
                is_error: true,
            }),
            _ => None,
        })
        .collect();
    Some(Entry::new(format!("{}:interrupted", last.id), Message { role: Role::Tool, content: parts }))
}
