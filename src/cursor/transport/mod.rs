//! Request id → transport handle (docs/cursor-backend.md §2.1 "cursor/transport").
//!
//! A [`Transport`] is one agent stream's plumbing: an [`Inbox`] that delivers the client's
//! messages in `append_seqno` order, and an [`Output`] hub that buffers the run's frames for the
//! RunSSE (or Run) response and replays them to a re-subscriber. Either side may arrive first:
//! RunSSE can open before the first BidiAppend, and appends can arrive before RunSSE.
//!
//! Invariants: the registry is bounded ([`RegistryOptions::max_transports`]); a transport whose
//! run ended stays registered for a linger period so late appends still get their 200 and a
//! re-subscriber still gets the replay; the output hub is closed exactly once, and after it is
//! closed nothing more is published.

mod inbox;
mod output;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use inbox::{Inbox, InboxOptions, Push};
pub use output::{Output, Subscription};

/// Limits of the registry.
#[derive(Debug, Clone, Copy)]
pub struct RegistryOptions {
    pub max_transports: usize,
    pub inbox: InboxOptions,
    /// Server heartbeat on an idle subscription.
    pub heartbeat: Duration,
    /// Bytes of frames an output hub keeps for replay.
    pub replay_bytes: usize,
}

impl Default for RegistryOptions {
    fn default() -> RegistryOptions {
        RegistryOptions {
            max_transports: 1024,
            inbox: InboxOptions::default(),
            heartbeat: Duration::from_secs(5),
            replay_bytes: 32 * 1024 * 1024,
        }
    }
}

/// One agent stream's plumbing.
#[derive(Debug)]
pub struct Transport {
    pub request_id: String,
    pub inbox: Inbox,
    pub output: Arc<Output>,
    /// Cancelled when the run must stop (client cancel, shutdown).
    pub cancel: CancellationToken,
    /// The client the stream belongs to: an opaque digest the HTTP layer computes from the
    /// client's identity, set by the first request that names this stream.
    owner: OnceLock<[u8; 32]>,
}

impl Transport {
    /// Whether a request from the client `binding` may use this stream: the first caller binds
    /// it, later ones must match (issue 14 §5: a request id alone lets nobody else in).
    pub fn admit(&self, binding: [u8; 32]) -> bool {
        *self.owner.get_or_init(|| binding) == binding
    }
}

/// The registry of live transports, keyed by request id.
#[derive(Debug)]
pub struct Registry {
    options: RegistryOptions,
    map: Mutex<HashMap<String, Arc<Transport>>>,
}

/// Why a transport could not be created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("too many concurrent agent streams")]
    Full,
}

impl Registry {
    pub fn new(options: RegistryOptions) -> Registry {
        Registry { options, map: Mutex::new(HashMap::new()) }
    }

    pub fn options(&self) -> &RegistryOptions {
        &self.options
    }

    pub fn get(&self, request_id: &str) -> Option<Arc<Transport>> {
        self.map.lock().ok()?.get(request_id).cloned()
    }

    /// The transport for `request_id`, and whether it was created by this call (the caller then
    /// starts its run driver).
    pub fn get_or_create(
        &self,
        request_id: &str,
        parent: &CancellationToken,
    ) -> Result<(Arc<Transport>, bool), RegistryError> {
        let mut map = self.map.lock().map_err(|_| RegistryError::Full)?;
        if let Some(t) = map.get(request_id) {
            return Ok((t.clone(), false));
        }
        if map.len() >= self.options.max_transports {
            return Err(RegistryError::Full);
        }
        let t = Arc::new(Transport {
            request_id: request_id.to_owned(),
            inbox: Inbox::new(self.options.inbox),
            output: Arc::new(Output::new(self.options.replay_bytes)),
            cancel: parent.child_token(),
            owner: OnceLock::new(),
        });
        map.insert(request_id.to_owned(), t.clone());
        Ok((t, true))
    }

    /// Removes the transport (after its linger period).
    pub fn remove(&self, request_id: &str) {
        if let Ok(mut map) = self.map.lock() {
            map.remove(request_id);
        }
    }

    pub fn len(&self) -> usize {
        self.map.lock().map_or(0, |m| m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests;
