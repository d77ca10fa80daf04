//! The writer's queue: two lanes under one lock. Call starts (what a client's first byte waits
//! for) have their own lane and always go first; everything else (finishes with their rollups,
//! transcript writes, retention, flushes) waits in the other. The capacity bounds both lanes
//! together; a push never blocks.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use crate::store::writer::Command;

/// Why a command was not queued (it is handed back).
pub(crate) enum PushError {
    Full(Command),
    Closed,
}

/// What the writer found when it woke up.
pub(crate) enum Wake {
    /// At least one command is queued.
    Ready,
    /// The queue is closed and empty: the writer stops.
    Closed,
}

#[derive(Default)]
struct Lanes {
    starts: VecDeque<Command>,
    rest: VecDeque<Command>,
    closed: bool,
}

impl Lanes {
    fn len(&self) -> usize {
        self.starts.len() + self.rest.len()
    }
}

pub(crate) struct Queue {
    lanes: Mutex<Lanes>,
    wake: Condvar,
    capacity: usize,
}

impl Queue {
    pub(crate) fn new(capacity: usize) -> Queue {
        Queue { lanes: Mutex::new(Lanes::default()), wake: Condvar::new(), capacity: capacity.max(1) }
    }

    fn lock(&self) -> MutexGuard<'_, Lanes> {
        self.lanes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `cmd` in its lane, unless the queue is full or closed.
    pub(crate) fn push(&self, cmd: Command) -> Result<(), PushError> {
        let mut lanes = self.lock();
        if lanes.closed {
            return Err(PushError::Closed);
        }
        if lanes.len() >= self.capacity {
            return Err(PushError::Full(cmd));
        }
        if matches!(cmd, Command::Start(..)) {
            lanes.starts.push_back(cmd);
        } else {
            lanes.rest.push_back(cmd);
        }
        drop(lanes);
        self.wake.notify_one();
        Ok(())
    }

    /// Queues `cmd` at the end of the other lane even when the queue is full (shutdown must not be
    /// dropped); refused only once closed.
    pub(crate) fn push_always(&self, cmd: Command) -> Result<(), Command> {
        let mut lanes = self.lock();
        if lanes.closed {
            return Err(cmd);
        }
        lanes.rest.push_back(cmd);
        drop(lanes);
        self.wake.notify_one();
        Ok(())
    }

    /// No more pushes; the writer applies what is queued and stops.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_all();
    }

    /// Blocks until a command is queued, or the queue is closed and empty.
    pub(crate) fn wait(&self) -> Wake {
        let mut lanes = self.lock();
        loop {
            if lanes.len() > 0 {
                return Wake::Ready;
            }
            if lanes.closed {
                return Wake::Closed;
            }
            lanes = self.wake.wait(lanes).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Commands queued and not yet taken (both lanes).
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.lock().len() == 0
    }

    /// Takes up to `max` queued starts, oldest first.
    pub(crate) fn take_starts(&self, max: usize) -> Vec<Command> {
        let mut lanes = self.lock();
        let n = lanes.starts.len().min(max);
        lanes.starts.drain(..n).collect()
    }

    /// The oldest command of the other lane, but only while no start waits (a start never waits
    /// behind more than the command being applied), and never the test pause hook.
    pub(crate) fn pop_rest(&self) -> Option<Command> {
        let mut lanes = self.lock();
        if !lanes.starts.is_empty() {
            return None;
        }
        #[cfg(test)]
        if matches!(lanes.rest.front(), Some(Command::Pause { .. })) {
            return None;
        }
        lanes.rest.pop_front()
    }

    /// Test hook: the pause command, when it is next in the other lane.
    #[cfg(test)]
    pub(crate) fn take_pause(&self) -> Option<Command> {
        let mut lanes = self.lock();
        if matches!(lanes.rest.front(), Some(Command::Pause { .. })) {
            return lanes.rest.pop_front();
        }
        None
    }
}
