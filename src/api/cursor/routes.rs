//! Which side serves an agent stream: Keyhaven or the official service.
//!
//! - Streams opened by a `*SSE` call other than RunSSE (health checks, legacy chat, BugBot) are
//!   forwarded upstream; their request ids are remembered so their BidiAppends follow them.
//! - In `hybrid` mode an agent stream's run request (BidiAppend seqno 0) decides: the requested
//!   model's `cursor` route, and upstream for a model Keyhaven does not know (or no model at all).
//!   A run request that does not decode stays local, where it gets its defined error.
//! - Until the decision, a RunSSE for the id waits (at most `wait`), and appends with a later
//!   seqno are held (their client gets 200 at once). The decision hands the held appends to the
//!   chosen side: pushed into the local transport's inbox, or forwarded upstream in seqno order.
//! - Bounded: an undecided id expires after `wait` (a tracked timer task removes it, with its
//!   held appends); at most `max` undecided ids, [`MAX_HELD`] held appends and
//!   [`MAX_HELD_BYTES`] of them per id; beyond that appends are dropped and RunSSE gets
//!   `resource_exhausted`.
//!
//! Lock order: `pending` before the transport registry's lock, never the other way round.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::CursorRoute;
use crate::cursor::protocol::agent::{self, agent_client_message};
use crate::cursor::protocol::connect;
use crate::cursor::services::model_catalog;
use crate::cursor::transport::Transport;
use crate::cursor::turn::Backend;
use crate::task::Spawner;

/// How many request ids of upstream-passed streams are remembered.
const MAX_UPSTREAM_IDS: usize = 4096;
/// Appends held per undecided stream.
pub const MAX_HELD: usize = 256;
/// Bytes of appends held per undecided stream.
pub const MAX_HELD_BYTES: usize = 16 * 1024 * 1024;

/// Where an agent stream runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Local,
    Upstream,
}

/// An append that arrived before its stream's route was decided: its decoded position and data
/// (for the local inbox) and the request as received (for the official service).
#[derive(Debug)]
pub struct Held {
    pub seqno: u64,
    pub data: Bytes,
    pub parts: http::request::Parts,
    pub body: Bytes,
}

/// What to do with one append in hybrid mode.
#[derive(Debug)]
pub enum AppendRoute {
    /// Not decided yet; the append is kept.
    Held,
    /// Not decided yet and nothing more can be kept; the append is dropped.
    Dropped,
    /// Decided (now or earlier) local: push it into this transport.
    Local(Arc<Transport>),
    /// Decided upstream by this append: forward it, and these earlier ones.
    Upstream(Vec<Held>),
    /// Hybrid routing does not apply (the local transport path takes it).
    Undecided,
}

/// What a RunSSE does in hybrid mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseRoute {
    Local,
    Upstream,
    /// Too many streams wait for their run request.
    Full,
    /// The run request did not come in time.
    TimedOut,
}

#[derive(Debug)]
struct Pending {
    held: Vec<Held>,
    held_bytes: usize,
    decided: watch::Sender<Option<Route>>,
    since: Instant,
}

impl Pending {
    fn new() -> Pending {
        Pending { held: Vec::new(), held_bytes: 0, decided: watch::Sender::new(None), since: Instant::now() }
    }
}

/// The routing state of the Cursor router.
#[derive(Debug)]
pub struct Routes {
    max: usize,
    wait: Duration,
    spawner: Spawner,
    pending: Mutex<HashMap<String, Pending>>,
    upstream_ids: Mutex<HashSet<String>>,
}

impl Routes {
    pub fn new(max: usize, wait: Duration, spawner: Spawner) -> Routes {
        Routes { max, wait, spawner, pending: Mutex::default(), upstream_ids: Mutex::default() }
    }

    /// The undecided entry for `id`, created (with its expiry timer) when missing; `None` when
    /// too many are undecided.
    fn entry<'a>(self: &Arc<Self>, pending: &'a mut HashMap<String, Pending>, id: &str) -> Option<&'a mut Pending> {
        if !pending.contains_key(id) {
            if pending.len() >= self.max {
                self.sweep(pending);
                if pending.len() >= self.max {
                    return None;
                }
            }
            let p = Pending::new();
            let since = p.since;
            pending.insert(id.to_owned(), p);
            let routes = self.clone();
            let id = id.to_owned();
            self.spawner.spawn(self.spawner.root_token().child_token(), async move {
                tokio::time::sleep(routes.wait).await;
                if let Ok(mut pending) = routes.pending.lock()
                    && pending.get(&id).is_some_and(|p| p.since == since)
                {
                    tracing::debug!(request_id = %id, "no run request decided this stream's route in time");
                    pending.remove(&id);
                }
            });
        }
        pending.get_mut(id)
    }

    pub fn remember_upstream(&self, id: String) {
        if let Ok(mut ids) = self.upstream_ids.lock() {
            if ids.len() >= MAX_UPSTREAM_IDS {
                ids.clear();
            }
            ids.insert(id);
        }
    }

    pub fn is_upstream(&self, id: &str) -> bool {
        self.upstream_ids.lock().is_ok_and(|ids| ids.contains(id))
    }

    pub fn pending_len(&self) -> usize {
        self.pending.lock().map_or(0, |p| p.len())
    }

    /// The route a run request asks for (see the module docs).
    pub fn route_for(&self, backend: &Backend, message: &[u8]) -> Route {
        let Ok(agent::AgentClientMessage { message: Some(agent_client_message::Message::RunRequest(run)) }) =
            connect::decode_message::<agent::AgentClientMessage>(message)
        else {
            return Route::Local;
        };
        let catalog = backend.gateway().catalog();
        let selection = model_catalog::requested_model(&run).unwrap_or_default();
        let route = model_catalog::resolve(&catalog, selection)
            .and_then(|name| catalog.resolve(&name))
            .map_or(CursorRoute::Upstream, |r| r.model.cursor);
        match route {
            CursorRoute::Local => Route::Local,
            CursorRoute::Upstream => Route::Upstream,
        }
    }

    /// Removes undecided entries older than `wait` (their RunSSE has given up by then).
    fn sweep(&self, pending: &mut HashMap<String, Pending>) {
        let now = Instant::now();
        pending.retain(|_, p| now.duration_since(p.since) < self.wait);
    }

    /// Routes one decoded append (hybrid mode).
    pub fn append(self: &Arc<Self>, backend: &Arc<Backend>, id: &str, held: Held) -> AppendRoute {
        let Ok(mut pending) = self.pending.lock() else { return AppendRoute::Undecided };
        if self.is_upstream(id) {
            return AppendRoute::Upstream(Vec::new());
        }
        if let Some(t) = backend.registry().get(id) {
            return AppendRoute::Local(t);
        }
        // The run request decides the route, whatever its seqno (a reused request id may start
        // at a seqno other than 0); anything else waits for it.
        if held.seqno != 0 && !is_run_request(&held.data) {
            let Some(entry) = self.entry(&mut pending, id) else {
                tracing::warn!(request_id = %id, "too many agent streams wait for their run request; append dropped");
                return AppendRoute::Dropped;
            };
            let duplicate = entry.held.iter().any(|h| h.seqno == held.seqno);
            if duplicate || entry.held.len() >= MAX_HELD || entry.held_bytes + held.body.len() > MAX_HELD_BYTES {
                return AppendRoute::Dropped;
            }
            entry.held_bytes += held.body.len();
            entry.held.push(held);
            return AppendRoute::Held;
        }
        let entry = pending.remove(id);
        let route = self.route_for(backend, &held.data);
        let (earlier, decided) = match entry {
            Some(p) => (p.held, Some(p.decided)),
            None => (Vec::new(), None),
        };
        let answer = match route {
            Route::Upstream => {
                self.remember_upstream(id.to_owned());
                AppendRoute::Upstream(earlier)
            }
            Route::Local => match backend.transport(id) {
                Ok(t) => {
                    // The run request's client owns the stream; held appends of others are dropped.
                    t.admit(super::client_binding(&held.parts.headers));
                    for h in earlier {
                        if t.admit(super::client_binding(&h.parts.headers)) {
                            let _ = t.inbox.push(h.seqno, h.data);
                        } else {
                            tracing::warn!(request_id = %id, "held append from another client than the stream's dropped");
                        }
                    }
                    AppendRoute::Local(t)
                }
                Err(e) => {
                    tracing::warn!(request_id = %id, error = %e, "append dropped");
                    AppendRoute::Dropped
                }
            },
        };
        if let Some(d) = decided {
            d.send_replace(Some(route));
        }
        answer
    }

    /// Waits for the route of a RunSSE's stream (hybrid mode).
    pub async fn sse(self: &Arc<Self>, backend: &Backend, id: &str) -> SseRoute {
        let mut rx = {
            let Ok(mut pending) = self.pending.lock() else { return SseRoute::Local };
            if self.is_upstream(id) {
                return SseRoute::Upstream;
            }
            if backend.registry().get(id).is_some() {
                return SseRoute::Local;
            }
            let Some(entry) = self.entry(&mut pending, id) else { return SseRoute::Full };
            entry.decided.subscribe()
        };
        let decided = tokio::time::timeout(self.wait, rx.wait_for(Option::is_some)).await;
        match decided {
            Ok(Ok(route)) => match *route {
                Some(Route::Upstream) => SseRoute::Upstream,
                _ => SseRoute::Local,
            },
            // Swept, or no run request in time: the held appends go with it.
            Ok(Err(_)) | Err(_) => {
                if let Ok(mut pending) = self.pending.lock()
                    && pending.get(id).is_some_and(|p| p.decided.borrow().is_none())
                {
                    pending.remove(id);
                }
                SseRoute::TimedOut
            }
        }
    }
}

/// The append carries the run's `run_request`.
fn is_run_request(message: &[u8]) -> bool {
    matches!(
        connect::decode_message::<agent::AgentClientMessage>(message),
        Ok(agent::AgentClientMessage { message: Some(agent_client_message::Message::RunRequest(_)) })
    )
}
