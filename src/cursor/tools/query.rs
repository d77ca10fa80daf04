//! Interaction queries (docs/cursor-wire.md §4.10): the server asks the UI for approval or input
//! (`interaction_query{id, …}`) and the client answers, possibly minutes later, with an
//! `interaction_response` of the same id via BidiAppend (heartbeats keep the stream alive
//! meanwhile). Ids are per run from 1; a response for an unknown or abandoned id is dropped, and
//! an abandoned query (its future dropped: cancel, break) forgets its id. A query unanswered for
//! `[agent] question_timeout` ends as [`Unanswered::TimedOut`] (and forgets its id too).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::cursor::protocol::agent::{self, agent_server_message, interaction_query, interaction_response};
use crate::cursor::protocol::events;
use crate::cursor::transport::Output;

/// Why a query has no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unanswered {
    /// The run went away first (cancel, break, shutdown).
    #[error("the request to the user was abandoned (the run was interrupted)")]
    Dropped,
    #[error("nobody answered in the editor within {}", human(*.0))]
    TimedOut(Duration),
}

/// `d` as a person says it: seconds under two minutes, else minutes (rounded up).
fn human(d: Duration) -> String {
    let secs = d.as_millis().div_ceil(1000).max(1);
    if secs < 120 { format!("{secs} s") } else { format!("{} minutes", secs.div_ceil(60)) }
}

#[derive(Debug)]
pub struct QueryChannel {
    output: Arc<Output>,
    timeout: Duration,
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
    /// Queries wait at most `timeout` for their answer.
    pub fn new(output: Arc<Output>, timeout: Duration) -> Arc<QueryChannel> {
        Arc::new(QueryChannel { output, timeout, next_id: AtomicU32::new(1), pending: Mutex::default() })
    }

    /// Sends `query` and waits for the client's answer.
    pub async fn ask(&self, query: interaction_query::Query) -> Result<interaction_response::Result, Unanswered> {
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
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(_)) => Err(Unanswered::Dropped),
            Err(_) => {
                tracing::info!(id, "interaction query unanswered; giving up");
                Err(Unanswered::TimedOut(self.timeout))
            }
        }
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
