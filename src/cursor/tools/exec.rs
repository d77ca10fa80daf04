//! The exec channel of one run: the server asks the client to act (`exec_server_message`), the
//! client answers with the same `id` (`exec_client_message`, possibly several for a shell
//! stream) and closes each exec with `exec_client_control_message.stream_close`.
//!
//! - Ids are per run, increasing from 1; `exec_id` is the tool call id (so cards and execs match).
//! - Replies are routed by id to the waiting [`Exec`]; replies for unknown or finished ids are
//!   dropped.
//! - `throw` fails the exec; `heartbeat` (and any reply) restarts its silence timer.
//! - An exec whose client stays silent longer than the silence timeout fails with
//!   [`ExecError::Timeout`]. An [`Exec`] dropped before it finished (cancel, timeout, a
//!   superseded round) sends `exec_server_control_message.abort{id}`, so the client stops it too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::cursor::protocol::agent::{
    self, agent_server_message, exec_client_control_message, exec_client_message, exec_server_control_message,
    exec_server_message,
};
use crate::cursor::protocol::events;
use crate::cursor::transport::Output;

/// One thing the client said about an exec.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecEvent {
    Message(exec_client_message::Message),
    /// `stream_close`: the client finished the exec.
    Closed,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    #[error("the editor did not answer within {0} s")]
    Timeout(u64),
    #[error("the editor failed to run it: {0}")]
    Thrown(String),
    #[error("the editor closed the request without a result")]
    Closed,
    #[error("the run is over")]
    Gone,
}

enum Signal {
    Event(ExecEvent),
    Heartbeat,
    Thrown(String),
}

#[derive(Debug)]
pub struct ExecChannel {
    output: Arc<Output>,
    next_id: AtomicU32,
    pending: Mutex<HashMap<u32, mpsc::UnboundedSender<Signal>>>,
    silence: Duration,
}

impl std::fmt::Debug for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signal")
    }
}

impl ExecChannel {
    pub fn new(output: Arc<Output>, silence: Duration) -> Arc<ExecChannel> {
        Arc::new(ExecChannel { output, next_id: AtomicU32::new(1), pending: Mutex::default(), silence })
    }

    /// Sends an exec request and returns the handle its replies arrive on.
    pub fn start(self: &Arc<Self>, exec_id: &str, message: exec_server_message::Message) -> Exec {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id, tx);
        }
        let msg = agent::AgentServerMessage {
            message: Some(agent_server_message::Message::ExecServerMessage(agent::ExecServerMessage {
                id,
                exec_id: exec_id.to_owned(),
                message: Some(message),
            })),
        };
        self.output.publish(events::frame(&msg, false));
        Exec { id, rx, channel: self.clone(), finished: false }
    }

    fn signal(&self, id: u32, signal: Signal) {
        let tx = self.pending.lock().ok().and_then(|p| p.get(&id).cloned());
        match tx {
            Some(tx) => {
                let _ = tx.send(signal);
            }
            None => tracing::debug!(id, "exec reply for an unknown or finished exec dropped"),
        }
    }

    /// Routes an `exec_client_message`.
    pub fn deliver(&self, m: agent::ExecClientMessage) {
        if let Some(message) = m.message {
            self.signal(m.id, Signal::Event(ExecEvent::Message(message)));
        }
    }

    /// Routes an `exec_client_control_message`.
    pub fn control(&self, c: agent::ExecClientControlMessage) {
        match c.message {
            Some(exec_client_control_message::Message::StreamClose(s)) => {
                self.signal(s.id, Signal::Event(ExecEvent::Closed));
            }
            Some(exec_client_control_message::Message::Throw(t)) => self.signal(t.id, Signal::Thrown(t.error)),
            Some(exec_client_control_message::Message::Heartbeat(h)) => self.signal(h.id, Signal::Heartbeat),
            None => {}
        }
    }

    /// Execs still waiting for their client.
    pub fn pending(&self) -> usize {
        self.pending.lock().map_or(0, |p| p.len())
    }

    fn remove(&self, id: u32) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&id);
        }
    }

    fn abort(&self, id: u32) {
        self.remove(id);
        let msg = agent::AgentServerMessage {
            message: Some(agent_server_message::Message::ExecServerControlMessage(agent::ExecServerControlMessage {
                message: Some(exec_server_control_message::Message::Abort(agent::ExecAbort { id })),
            })),
        };
        self.output.publish(events::frame(&msg, false));
    }
}

/// One exec waiting for its client.
#[derive(Debug)]
pub struct Exec {
    id: u32,
    rx: mpsc::UnboundedReceiver<Signal>,
    channel: Arc<ExecChannel>,
    finished: bool,
}

impl Exec {
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The next reply (heartbeats restart the silence timer and are not returned).
    pub async fn next(&mut self) -> Result<ExecEvent, ExecError> {
        loop {
            let silence = self.channel.silence;
            match tokio::time::timeout(silence, self.rx.recv()).await {
                Err(_) => return Err(ExecError::Timeout(silence.as_secs())),
                Ok(None) => return Err(ExecError::Gone),
                Ok(Some(Signal::Heartbeat)) => {}
                Ok(Some(Signal::Thrown(e))) => {
                    self.finish();
                    return Err(ExecError::Thrown(e));
                }
                Ok(Some(Signal::Event(e))) => return Ok(e),
            }
        }
    }

    /// The one result of a non-streaming exec; the exec is finished afterwards.
    pub async fn result(mut self) -> Result<exec_client_message::Message, ExecError> {
        let r = match self.next().await {
            Ok(ExecEvent::Message(m)) => Ok(m),
            Ok(ExecEvent::Closed) => Err(ExecError::Closed),
            Err(e) => Err(e),
        };
        if r.is_ok() {
            self.finish();
        }
        r
    }

    /// Marks the exec done: later replies (the `stream_close`) are dropped quietly; no abort.
    pub fn finish(&mut self) {
        if !self.finished {
            self.finished = true;
            self.channel.remove(self.id);
        }
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        if !self.finished {
            tracing::debug!(id = self.id, "exec abandoned; aborting it on the client");
            self.channel.abort(self.id);
        }
    }
}
