//! WAL checkpoints off the writer's path: a thread of its own with a connection of its own.
//!
//! The writer's connection never checkpoints (`wal_autocheckpoint = 0`), so a commit is only the
//! WAL append (plus its fsync with `synchronous = FULL`). Every `interval` in which the writer
//! committed, this thread runs `PASSIVE` checkpoints, which copy WAL frames into the database
//! file while the writer keeps committing (no lock the writer needs is taken); the writer starts
//! the WAL over from its beginning once a checkpoint has copied every frame. Two cases take the
//! writer's [`Gate`] (the writer passes it for each transaction, so it waits there, for the
//! length of one checkpoint, instead of in SQLite's sleeping busy handler) and run a
//! `TRUNCATE` checkpoint, which empties the WAL file:
//! - the WAL file has grown past `max_wal_bytes` (under sustained writes a passive checkpoint
//!   rarely copies the frames appended while it ran, so the WAL could otherwise grow without
//!   bound);
//! - the writer has been idle for `idle`.
//!
//! A `kill -9` in the middle of any of these loses nothing: SQLite replays the WAL at the next
//! open. Stopping the thread runs a last `TRUNCATE` when anything was written since the last one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::store::StoreError;

/// How long a `TRUNCATE` checkpoint waits for a reader to finish (the writer waits meanwhile).
const TRUNCATE_BUSY_TIMEOUT: Duration = Duration::from_millis(250);

/// What the writer and the checkpointer share.
#[derive(Default)]
pub(crate) struct Wal {
    /// Passed by the writer for each transaction, by the checkpointer for a `TRUNCATE`.
    pub(crate) gate: Gate,
    /// Transactions the writer has ended (committed or not), since open.
    pub(crate) commits: AtomicU64,
}

/// A turnstile between the writer's transactions and a `TRUNCATE` checkpoint. Unlike a plain
/// mutex it is fair to the checkpointer: once it asks, the writer finishes its transaction and
/// waits for the checkpoint before starting another (a writer that commits back to back would
/// otherwise win a mutex again and again).
#[derive(Default)]
pub(crate) struct Gate {
    state: Mutex<GateState>,
    turn: Condvar,
}

#[derive(Default)]
struct GateState {
    in_transaction: bool,
    checkpoint_waiting: bool,
    checkpointing: bool,
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, GateState>) -> MutexGuard<'a, GateState> {
        self.turn.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    /// The writer's pass for one transaction (waits while a checkpoint asks for or has the gate).
    pub(crate) fn transaction(&self) -> Pass<'_> {
        let mut state = self.lock();
        while state.checkpoint_waiting || state.checkpointing {
            state = self.wait(state);
        }
        state.in_transaction = true;
        Pass { gate: self, checkpoint: false }
    }

    /// The checkpointer's pass (waits for the transaction under way, if any).
    fn checkpoint(&self) -> Pass<'_> {
        let mut state = self.lock();
        state.checkpoint_waiting = true;
        while state.in_transaction {
            state = self.wait(state);
        }
        state.checkpoint_waiting = false;
        state.checkpointing = true;
        Pass { gate: self, checkpoint: true }
    }
}

/// Holds the gate until dropped.
pub(crate) struct Pass<'a> {
    gate: &'a Gate,
    checkpoint: bool,
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        if self.checkpoint {
            state.checkpointing = false;
        } else {
            state.in_transaction = false;
        }
        drop(state);
        self.gate.turn.notify_all();
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct CheckpointOptions {
    pub(crate) interval: Duration,
    pub(crate) idle: Duration,
    pub(crate) max_wal_bytes: u64,
    pub(crate) synchronous_full: bool,
}

/// The checkpoint thread; [`Checkpointer::stop`] (or dropping it) stops and joins it.
pub(crate) struct Checkpointer {
    stop: Option<Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl Checkpointer {
    pub(crate) fn start(db: &Path, wal: Arc<Wal>, opts: CheckpointOptions) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open(db)?;
        conn.busy_timeout(TRUNCATE_BUSY_TIMEOUT)?;
        conn.pragma_update(None, "synchronous", if opts.synchronous_full { "FULL" } else { "NORMAL" })?;
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        let mut name = db.as_os_str().to_owned();
        name.push("-wal");
        let wal_path = PathBuf::from(name);
        let (stop, stopped) = std::sync::mpsc::channel();
        // Read here, not in the thread: a thread started late (nice 10 on a busy machine) would
        // otherwise take commits made before it ran for the baseline and never checkpoint them.
        let seen = wal.commits.load(Ordering::Acquire);
        let handle = std::thread::Builder::new()
            .name("keyhaven-store-checkpoint".into())
            .spawn(move || run(&conn, &wal_path, &wal, opts, seen, &stopped))
            .map_err(|e| StoreError::Task(format!("cannot start the store checkpointer: {e}")))?;
        Ok(Checkpointer { stop: Some(stop), handle: Some(handle) })
    }

    /// Stops the thread (after its last checkpoint) and waits for it.
    pub(crate) fn stop(&mut self) -> Result<(), StoreError> {
        self.stop = None;
        match self.handle.take() {
            Some(h) => h.join().map_err(|_| StoreError::Task("the store checkpointer panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        if self.stop().is_err() {
            tracing::warn!("the store checkpointer panicked");
        }
    }
}

fn run(conn: &Connection, wal_path: &Path, wal: &Wal, opts: CheckpointOptions, mut seen: u64, stopped: &Receiver<()>) {
    crate::store::background_priority();
    let tick = opts.interval.min(opts.idle).max(Duration::from_millis(1));
    let mut last_commit = Instant::now();
    // Whether the WAL may hold frames since the last TRUNCATE. At the start it may: the
    // migrations, the journal's replay and `interrupt_stale` wrote through other connections.
    let mut written = true;
    // A message or a hang-up (the Store dropped its sender) stops the loop.
    while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(tick) {
        let commits = wal.commits.load(Ordering::Acquire);
        if commits != seen {
            seen = commits;
            last_commit = Instant::now();
            written = true;
            passive(conn);
            let size = std::fs::metadata(wal_path).map_or(0, |m| m.len());
            if size > opts.max_wal_bytes {
                tracing::debug!(size, "store WAL over its cap; truncating it");
                truncate(conn, wal);
            }
        } else if written && last_commit.elapsed() >= opts.idle {
            // Put off by a busy reader: tried again at the next tick.
            written = !truncate(conn, wal);
        }
    }
    if written || wal.commits.load(Ordering::Acquire) != seen {
        truncate(conn, wal);
    }
    tracing::debug!("store checkpointer stopped");
}

/// Copies what it can of the WAL into the database without blocking the writer; again while it
/// makes progress and frames remain (the frames appended during the last one), a few times.
fn passive(conn: &Connection) {
    let mut last = None;
    for _ in 0..4 {
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))) {
            Ok((log, copied)) if copied < log && last != Some(copied) => last = Some(copied),
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(error = %e, "store WAL checkpoint failed");
                return;
            }
        }
    }
}

/// Empties the WAL file, with the writer waiting at the gate; whether it did.
fn truncate(conn: &Connection, wal: &Wal) -> bool {
    let _pass = wal.gate.checkpoint();
    match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get::<_, i64>(0)) {
        Ok(0) => true,
        Ok(_) => {
            tracing::debug!("store WAL truncation put off: a reader was busy");
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "store WAL checkpoint failed");
            false
        }
    }
}
