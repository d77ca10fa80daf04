//! The writer's queue: two lanes under one lock. Call starts (what a client's first byte waits
//! for) have their own lane and always go first; everything else (finishes with their rollups,
//! transcript writes, retention, flushes) waits in the other. The capacity bounds both lanes
//! together; a push never blocks.
//!
//! With a pace (the store has a call journal), a journaled start or finish does not wake the
//! writer on its own: nobody waits for its commit (its ack was the journal append), so the writer
//! lets such records gather for up to one pace and commits them in one transaction. Each
//! transaction rewrites the table and index pages it touches into the WAL, so one commit of ten
//! records writes a fraction of what ten commits write, and the writer thread wakes once instead
//! of ten times. Any other command (a flush, a delete, a transcript write, an unjournaled start)
//! wakes it at once, and so does a queue holding a batch's worth.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

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
    /// Queued commands that must not wait for the pace.
    urgent: usize,
    /// When the oldest queued command was pushed (the pace runs from there).
    since: Option<Instant>,
}

impl Lanes {
    fn len(&self) -> usize {
        self.starts.len() + self.rest.len()
    }

    /// Bookkeeping after commands were taken (`urgent` of them urgent).
    fn taken(&mut self, urgent: usize) {
        self.urgent = self.urgent.saturating_sub(urgent);
        if self.len() == 0 {
            self.since = None;
        }
    }
}

pub(crate) struct Queue {
    lanes: Mutex<Lanes>,
    wake: Condvar,
    capacity: usize,
    /// How long journaled records may wait for company (zero: the writer takes each at once).
    pace: Duration,
    /// A queue this long wakes the writer even within the pace.
    batch: usize,
}

impl Queue {
    /// A queue whose journaled records wait up to `pace` (or until `batch` are queued); a zero
    /// pace wakes the writer for every command.
    pub(crate) fn paced(capacity: usize, pace: Duration, batch: usize) -> Queue {
        Queue {
            lanes: Mutex::new(Lanes::default()),
            wake: Condvar::new(),
            capacity: capacity.max(1),
            pace,
            batch: batch.max(1),
        }
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
        let urgent = self.pace.is_zero() || !cmd.journaled();
        let was_empty = lanes.len() == 0;
        if was_empty {
            lanes.since = Some(Instant::now());
        }
        if urgent {
            lanes.urgent += 1;
        }
        if matches!(cmd, Command::Start(..)) {
            lanes.starts.push_back(cmd);
        } else {
            lanes.rest.push_back(cmd);
        }
        // The writer sleeps untimed only on an empty queue; otherwise it already waits for the
        // pace to run out and needs waking only for an urgent command or a full batch.
        let wake = urgent || was_empty || lanes.len() == self.batch;
        drop(lanes);
        if wake {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// Queues `cmd` at the end of the other lane even when the queue is full (shutdown must not be
    /// dropped); refused only once closed.
    pub(crate) fn push_always(&self, cmd: Command) -> Result<(), Command> {
        let mut lanes = self.lock();
        if lanes.closed {
            return Err(cmd);
        }
        if lanes.len() == 0 {
            lanes.since = Some(Instant::now());
        }
        lanes.urgent += 1;
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

    /// Blocks until there is work: an urgent command, a batch, journaled records that have
    /// waited a pace, or a closed queue (with what is left; [`Wake::Closed`] once empty).
    pub(crate) fn wait(&self) -> Wake {
        let mut lanes = self.lock();
        loop {
            let n = lanes.len();
            if n == 0 {
                if lanes.closed {
                    return Wake::Closed;
                }
                lanes = self.wake.wait(lanes).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            if lanes.urgent > 0 || lanes.closed || n >= self.batch {
                return Wake::Ready;
            }
            let waited = lanes.since.map_or(self.pace, |t| t.elapsed());
            let Some(left) = self.pace.checked_sub(waited).filter(|d| !d.is_zero()) else {
                return Wake::Ready;
            };
            lanes = self.wake.wait_timeout(lanes, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Commands queued and not yet taken (both lanes).
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.lock().len() == 0
    }

    /// Whether journaled records wait for company (then starts need not commit apart).
    pub(crate) fn is_paced(&self) -> bool {
        !self.pace.is_zero()
    }

    /// Takes up to `max` queued starts, oldest first.
    pub(crate) fn take_starts(&self, max: usize) -> Vec<Command> {
        let mut lanes = self.lock();
        let n = lanes.starts.len().min(max);
        let taken: Vec<Command> = lanes.starts.drain(..n).collect();
        let urgent = taken.iter().filter(|c| self.pace.is_zero() || !c.journaled()).count();
        lanes.taken(urgent);
        taken
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
        let cmd = lanes.rest.pop_front()?;
        let urgent = usize::from(self.pace.is_zero() || !cmd.journaled());
        lanes.taken(urgent);
        Some(cmd)
    }

    /// Test hook: the pause command, when it is next in the other lane.
    #[cfg(test)]
    pub(crate) fn take_pause(&self) -> Option<Command> {
        let mut lanes = self.lock();
        if matches!(lanes.rest.front(), Some(Command::Pause { .. })) {
            lanes.taken(1);
            return lanes.rest.pop_front();
        }
        None
    }
}
