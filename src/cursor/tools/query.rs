//! Interaction queries (cursor-protocol.md §4.10): the server asks the UI for approval or input
//! (`interaction_query{id, …}`) and the client answers, possibly minutes later, with an
//! `interaction_response` of the same id via BidiAppend (heartbeats keep the stream alive
//! meanwhile). Ids are per run from 1; a response for an unknown or abandoned id is dropped, and
//! an abandoned query (its future dropped: cancel, break) forgets its id.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::cursor::protocol::agent::{self, agent_server_message, interaction_query, interaction_response};
use crate::cursor::protocol::events;
use crate::cursor::transport::Output;

#[derive(Debug)]
pub struct QueryChannel {
    output: Arc<Output>,
    next_id: AtomicU32,
    pending: Mutex<HashMap<u32, oneshot::Sender<interaction_response::Result>>>,
}

/// Forgets its id when the asking future is dropped.
struct Forget<'a>(&'a QueryChannel, u32);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        if let Ok(mut p) = self.0.pending.lock() {
            p.remove(&self.1);
        }
    }
}

impl QueryChannel {
    pub fn new(output: Arc<Output>) -> Arc<QueryChannel> {
        Arc::new(QueryChannel { output, next_id: AtomicU32::new(1), pending: Mutex::default() })
    }

    /// Sends `query` and waits for the client's answer (`None` if the run goes away first).
    pub async fn ask(&self, query: interaction_query::Query) -> Option<interaction_response::Result> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id, tx);
        }
        let _forget = Forget(self, id);
        let msg = agent::AgentServerMessage {
            message: Some(agent_server_message::Message::InteractionQuery(agent::InteractionQuery {
                id,
                query: Some(query),
            })),
        };
        self.output.publish(events::frame(&msg, false));
        rx.await.ok()
    }

    /// Routes an `interaction_response`.
    pub fn deliver(&self, r: agent::InteractionResponse) {
        let tx = self.pending.lock().ok().and_then(|mut p| p.remove(&r.id));
        match (tx, r.result) {
            (Some(tx), Some(result)) => {
                let _ = tx.send(result);
            }
            _ => tracing::debug!(id = r.id, "interaction response for an unknown query dropped"),
        }
    }

    /// Queries waiting for their answer.
    pub fn pending(&self) -> usize {
        self.pending.lock().map_or(0, |p| p.len())
    }
}
