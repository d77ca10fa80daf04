//! The output hub: a run publishes framed messages; subscribers (RunSSE or Run responses) read
//! them from the start, so a re-subscriber on the same request id gets the whole run replayed,
//! then follows live. Idle subscribers emit a server heartbeat frame that is not buffered.
//!
//! The terminal frame is the last one published: [`Output::finish`] publishes it and closes the
//! hub in one step, so nothing can follow it.
//!
//! The hub counts its live subscriptions ([`Output::subscribers`]), so the run can tell that every
//! RunSSE reader went away (a dropped connection) and cancel itself after a grace period.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

#[derive(Debug, Default)]
struct State {
    /// Frames from `base` on.
    frames: VecDeque<Bytes>,
    /// Index of `frames[0]` among all frames published.
    base: usize,
    bytes: usize,
    closed: bool,
}

#[derive(Debug)]
pub struct Output {
    state: Mutex<State>,
    replay_bytes: usize,
    /// Bumped on every publish and on close.
    version: watch::Sender<u64>,
    /// Live subscriptions.
    subscribers: watch::Sender<usize>,
}

impl Output {
    pub fn new(replay_bytes: usize) -> Output {
        Output {
            state: Mutex::new(State::default()),
            replay_bytes,
            version: watch::Sender::new(0),
            subscribers: watch::Sender::new(0),
        }
    }

    /// Appends a frame; ignored once closed. Returns whether it was published.
    pub fn publish(&self, frame: Bytes) -> bool {
        self.push(frame, false)
    }

    /// Publishes the terminal frame and closes the hub. Only the first call has an effect.
    pub fn finish(&self, frame: Bytes) -> bool {
        self.push(frame, true)
    }

    fn push(&self, frame: Bytes, close: bool) -> bool {
        let Ok(mut s) = self.state.lock() else { return false };
        if s.closed {
            return false;
        }
        s.bytes += frame.len();
        s.frames.push_back(frame);
        // Keep the replay buffer bounded (never dropping the newest frame).
        while s.bytes > self.replay_bytes && s.frames.len() > 1 {
            if let Some(old) = s.frames.pop_front() {
                s.bytes -= old.len();
                s.base += 1;
            }
        }
        s.closed |= close;
        drop(s);
        self.version.send_modify(|v| *v += 1);
        true
    }

    pub fn is_closed(&self) -> bool {
        self.state.lock().map_or(true, |s| s.closed)
    }

    /// Resolves once the hub is closed (the terminal frame is published).
    pub async fn closed(&self) {
        let mut rx = self.version.subscribe();
        while !self.is_closed() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Frames published so far (including any dropped from the replay buffer).
    pub fn published(&self) -> usize {
        self.state.lock().map_or(0, |s| s.base + s.frames.len())
    }

    /// A reader from the first buffered frame.
    pub fn subscribe(self: &Arc<Self>, heartbeat: Duration, heartbeat_frame: Bytes) -> Subscription {
        self.subscribers.send_modify(|n| *n += 1);
        Subscription { hub: self.clone(), cursor: 0, rx: self.version.subscribe(), heartbeat, heartbeat_frame }
    }

    /// The number of live subscriptions, watched.
    pub fn subscribers(&self) -> watch::Receiver<usize> {
        self.subscribers.subscribe()
    }
}

/// One reader of a hub (counted while it lives).
#[derive(Debug)]
pub struct Subscription {
    hub: Arc<Output>,
    cursor: usize,
    rx: watch::Receiver<u64>,
    heartbeat: Duration,
    heartbeat_frame: Bytes,
}

impl Subscription {
    /// The next frame; a heartbeat after `heartbeat` of silence; `None` after the terminal frame.
    pub async fn next(&mut self) -> Option<Bytes> {
        loop {
            self.rx.borrow_and_update();
            {
                let s = self.hub.state.lock().ok()?;
                self.cursor = self.cursor.max(s.base);
                if let Some(frame) = s.frames.get(self.cursor - s.base) {
                    self.cursor += 1;
                    return Some(frame.clone());
                }
                if s.closed {
                    return None;
                }
            }
            match tokio::time::timeout(self.heartbeat, self.rx.changed()).await {
                Ok(Ok(())) => {}
                // The hub is gone: nothing more will come.
                Ok(Err(_)) => return None,
                Err(_) => return Some(self.heartbeat_frame.clone()),
            }
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.subscribers.send_modify(|n| *n = n.saturating_sub(1));
    }
}
