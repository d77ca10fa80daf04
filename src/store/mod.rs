//! The call store: every gateway call as a row in SQLite, plus a per-day usage rollup.
//!
//! This is the only module that speaks SQL. Writes go through one serial writer, a dedicated
//! thread owning the read-write connection (WAL, `synchronous=NORMAL` by default: a commit is a
//! write(2) to the WAL, which survives the process being killed; `FULL` adds the fsync that
//! survives power loss), fed by a bounded queue with a lane of its own for call starts. The
//! writer commits queued starts first, in small transactions of their own, then the rest in
//! batches, and resolves each command's [`Ack`] after its commit (see `writer`); a call's start
//! is first appended to the call journal and its ack is ready then, so the request path never
//! waits for SQLite (see `journal`; not with `synchronous=FULL`). WAL checkpoints
//! run on a thread and connection of their own (see `checkpoint`). Enqueuing never blocks: a
//! full queue drops the record, resolves its ack to [`StoreError::QueueFull`] and counts it in
//! [`Store::dropped`]. Reads use a separate read-only connection on tokio's blocking pool.
//!
//! Semantics where a call's records arrive oddly:
//! - a start for an id that exists is ignored;
//! - a finish without a start inserts a complete row (started at `finished_ms - total_ms`, empty
//!   dialect/client/model), so no call is lost;
//! - a finish for a row that is no longer in flight is ignored (the first finish wins);
//! - [`Store::interrupt_stale`] turns in-flight rows of earlier processes into `interrupted`
//!   rows, counted in the rollup as errors.
//!
//! `usage_daily` is keyed by the UTC day of the call's start, the requested model name, the
//! provider and the client, and is updated in the same transaction as each finish. Pruning and
//! deleting calls leave it untouched. `latency_daily` has the same key plus a histogram bucket of
//! `total_ms` ([`LATENCY_BOUNDS_MS`]), so latency percentiles never scan `calls` either.

mod checkpoint;
mod conversation;
mod cursor_versions;
mod journal;
mod queue;
mod read;
mod schema;
mod stats;
mod writer;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use crate::model::{CallFinish, CallStart, RunRecord, StoredMessage, ToolRoundRecord};
use crate::store::checkpoint::{CheckpointOptions, Checkpointer, Wal};
use crate::store::journal::{Entry, Journal};
use crate::store::queue::{PushError, Queue};
use crate::store::writer::{Command, Writer};

pub use conversation::{CheckpointRecord, ConversationOp};
pub use cursor_versions::CursorVersionRow;
pub use read::{
    CallDetail, CallFilter, CallSummary, ContextBlock, CostSourceRow, DEFAULT_LIMIT, LATENCY_BOUNDS_MS,
    LatencyHistogram, MAX_LIMIT, SessionRow, UsageBetween, UsageDailyRow, UsageGroup, UsageGroupRow, UsageRow,
    UsageSplitRow, UsageTotals,
};
pub use stats::{COMMIT_BOUNDS_SECONDS, LedgerSnapshot};

/// The nice value of the writer and checkpointer threads: with the call journal nothing on the
/// request path waits for them, so on a busy core they yield to the threads that serve clients
/// (they still get about a tenth of it when both want it, and all of it otherwise).
const BACKGROUND_NICE: i32 = 10;

/// Lowers the calling thread's CPU priority to [`BACKGROUND_NICE`] (Linux: nice is per thread).
/// Failing to is logged, not fatal.
pub(crate) fn background_priority() {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), BACKGROUND_NICE) {
        tracing::debug!(error = %e, "store thread priority not lowered");
    }
}

/// How long SQLite waits on a lock held by another connection.
const BUSY_TIMEOUT: Duration = Duration::from_millis(5000);

/// How long a history read waits for what the pace holds back to be committed
/// ([`Store::read_history`]).
const HISTORY_FLUSH_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The database file could not be opened or set up (missing directory, read-only location,
    /// not a database, ...).
    #[error("cannot open database at {path}: {message}")]
    Open { path: String, message: String },
    #[error(
        "database at {path} was written by a newer Keyhaven (schema {found}, this build knows {supported}); \
         upgrade Keyhaven or use another data directory"
    )]
    SchemaTooNew { path: String, found: i64, supported: i64 },
    #[error("store migration {version} failed: {message}")]
    Migration { version: i64, message: String },
    /// An SQLite error on a read or write (including a failed batch commit, e.g. disk full).
    #[error("store database error: {0}")]
    Sqlite(String),
    /// The write queue was full; the record was dropped.
    #[error("store write queue is full; record dropped")]
    QueueFull,
    /// The store was closed, or its writer stopped, before the command was applied.
    #[error("store is closed")]
    Closed,
    /// A row that this build cannot read.
    #[error("corrupt store row: {0}")]
    Corrupt(String),
    /// The writer thread or a blocking read task could not be started or failed.
    #[error("store task failed: {0}")]
    Task(String),
}

impl StoreError {
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Open { .. } => "open",
            StoreError::SchemaTooNew { .. } => "schema_too_new",
            StoreError::Migration { .. } => "migration",
            StoreError::Sqlite(_) => "sqlite",
            StoreError::QueueFull => "queue_full",
            StoreError::Closed => "closed",
            StoreError::Corrupt(_) => "corrupt",
            StoreError::Task(_) => "task",
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        StoreError::Sqlite(e.to_string())
    }
}

#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// `synchronous=FULL` (each commit fsynced: durable across power loss) when true, `NORMAL`
    /// otherwise (each commit written to the OS: durable when the process dies, not when the
    /// machine loses power).
    pub synchronous_full: bool,
    /// Capacity of the write queue (at least 1).
    pub writer_queue: usize,
    /// This process's epoch (e.g. its start time in ms); stamped on every start row. In-flight rows
    /// with an older epoch are stale (see [`Store::interrupt_stale`]).
    pub epoch: i64,
    /// The WAL is emptied (`TRUNCATE` checkpoint) after this long without writes.
    pub idle_checkpoint: Duration,
    /// How often the checkpointer copies the WAL into the database (`PASSIVE`) while writes come.
    pub checkpoint_interval: Duration,
    /// The WAL file size past which the checkpointer empties it (`TRUNCATE`, the writer waiting).
    pub max_wal_bytes: u64,
    /// How long journaled starts and finishes may wait for company before the writer commits
    /// them (one transaction for all that came meanwhile). Only with a call journal: without
    /// one, a start's ack is its commit and the writer takes it at once. The default is 50 ms.
    /// History reads commit what waits before they read (`Store::read_history`), so the pace
    /// never hides a call from the dashboard. A shorter pace commits more often, and each commit
    /// rewrites the pages it touches (at 500 streams/s the writer thread took 7–8 % of a
    /// core at 5 ms and under 3 % at 50 ms).
    pub commit_pace: Duration,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            synchronous_full: false,
            writer_queue: 4096,
            epoch: 0,
            idle_checkpoint: Duration::from_secs(5),
            checkpoint_interval: Duration::from_millis(500),
            max_wal_bytes: 64 * 1024 * 1024,
            commit_pace: Duration::from_millis(50),
        }
    }
}

/// Resolves once the command is committed (or failed). Dropping it does not cancel the command.
#[must_use = "an Ack may be dropped, but awaiting it is the only way to learn whether the write committed"]
pub struct Ack<T = ()> {
    state: AckState<T>,
}

enum AckState<T> {
    Pending(oneshot::Receiver<Result<T, StoreError>>),
    Ready(Option<Result<T, StoreError>>),
}

impl<T> std::fmt::Debug for Ack<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            AckState::Pending(_) => "pending",
            AckState::Ready(_) => "ready",
        };
        f.debug_struct("Ack").field("state", &state).finish()
    }
}

impl<T> Ack<T> {
    fn ready(result: Result<T, StoreError>) -> Ack<T> {
        Ack { state: AckState::Ready(Some(result)) }
    }

    /// Waits outside an async context (panics inside one, like tokio's `blocking_recv`).
    pub fn wait_blocking(self) -> Result<T, StoreError> {
        match self.state {
            AckState::Pending(rx) => rx.blocking_recv().unwrap_or(Err(StoreError::Closed)),
            AckState::Ready(r) => r.unwrap_or(Err(StoreError::Closed)),
        }
    }
}

// The receiver is Unpin and a ready result is only moved out, never pinned.
impl<T> Unpin for Ack<T> {}

impl<T> Future for Ack<T> {
    type Output = Result<T, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().state {
            AckState::Pending(rx) => Pin::new(rx).poll(cx).map(|r| r.unwrap_or(Err(StoreError::Closed))),
            AckState::Ready(r) => Poll::Ready(r.take().unwrap_or(Err(StoreError::Closed))),
        }
    }
}

/// The call store. Share it behind an `Arc`; dropping it stops the writer after it has applied
/// everything already queued (the drop blocks for that long).
pub struct Store {
    queue: Arc<Queue>,
    writer: Option<JoinHandle<()>>,
    checkpointer: Option<Checkpointer>,
    reader: Arc<Mutex<Connection>>,
    /// The call journal (file-backed stores with `synchronous=NORMAL`): a call's head waits for
    /// its journal append, not for SQLite (see `journal`).
    journal: Option<Arc<Journal>>,
    dropped: AtomicU64,
    /// Queue depth and commit times (the metrics endpoint reads them).
    stats: Arc<stats::WriterStats>,
    epoch: i64,
    location: String,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("location", &self.location).field("epoch", &self.epoch).finish_non_exhaustive()
    }
}

/// The oldest SQLite the store runs on: `STRICT` tables (3.37) and `RETURNING` (3.35). Linux and
/// macOS builds link the system's library (Debian 12 ships 3.40); Windows builds bundle one.
pub const MIN_SQLITE_VERSION: i32 = 3_037_000;

/// `Err` names the SQLite found when it is older than [`MIN_SQLITE_VERSION`].
fn check_sqlite_version(found: i32, name: &str) -> Result<(), String> {
    if found >= MIN_SQLITE_VERSION {
        return Ok(());
    }
    Err(format!("SQLite {name} is too old: Keyhaven needs 3.37 or newer (install a newer libsqlite3)"))
}

fn configure(conn: &Connection, opts: &StoreOptions, file_backed: bool) -> rusqlite::Result<()> {
    check_sqlite_version(rusqlite::version_number(), rusqlite::version()).map_err(|m| {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_MISUSE), Some(m))
    })?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    if file_backed {
        let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(mode, "store could not switch to WAL journal mode");
        }
    }
    conn.pragma_update(None, "synchronous", if opts.synchronous_full { "FULL" } else { "NORMAL" })?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    if file_backed {
        // Checkpoints are the checkpointer's job, never a commit's (see `checkpoint`).
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    }
    Ok(())
}

/// Puts call records read back from the journal into `calls`: every start first, with the epoch
/// of the process that wrote it (a start whose row exists is ignored), then every finish in the
/// order written (a finish for a row no longer in flight is ignored), so a finish never lands
/// before its own start, whichever segment each is in.
fn replay(conn: &mut Connection, replayed: &[Entry]) -> rusqlite::Result<()> {
    if replayed.is_empty() {
        return Ok(());
    }
    let tx = conn.transaction()?;
    for entry in replayed {
        if let Entry::Start { epoch, start } = entry {
            writer::insert_start(&tx, start, *epoch)?;
        }
    }
    for entry in replayed {
        if let Entry::Finish { finish } = entry {
            writer::apply_finish(&tx, finish)?;
        }
    }
    tx.commit()?;
    tracing::info!(records = replayed.len(), "call records replayed from the journal");
    Ok(())
}

/// The database file and SQLite's companions, owner-only (they hold request and response bodies
/// and transcripts). A missing database file is created empty with mode 0600 first: SQLite keeps
/// the mode of a file that exists and gives the `-wal`, `-shm` and `-journal` files it creates
/// the database file's mode. Companions left looser by an earlier build are restricted.
pub fn private_files(path: &Path) -> Result<(), String> {
    crate::perms::private_file(path).map_err(|e| format!("cannot create or restrict {}: {e}", path.display()))?;
    for suffix in ["-wal", "-shm", "-journal", "-calls-a", "-calls-b"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let companion = std::path::PathBuf::from(name);
        crate::perms::restrict(&companion, crate::perms::FILE_MODE)
            .map_err(|e| format!("cannot restrict {}: {e}", companion.display()))?;
    }
    Ok(())
}

impl Store {
    /// Opens (creating if needed, with its parent directory) the database at `path`, migrates it
    /// and starts the writer. On Unix the database and its `-wal`/`-shm` files are 0600 and a
    /// directory it creates 0700 (see [`crate::perms`]).
    pub fn open(path: &Path, opts: StoreOptions) -> Result<Store, StoreError> {
        let location = path.display().to_string();
        let open_err = |message: String| StoreError::Open { path: location.clone(), message };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            crate::perms::create_dirs(parent)
                .map_err(|e| open_err(format!("cannot create {}: {e}", parent.display())))?;
        }
        private_files(path).map_err(open_err)?;
        let mut conn = Connection::open(path).map_err(|e| open_err(e.to_string()))?;
        configure(&conn, &opts, true).map_err(|e| open_err(e.to_string()))?;
        schema::migrate(&mut conn, &location).map_err(|e| match e {
            StoreError::Sqlite(message) => open_err(message),
            other => other,
        })?;
        // What an earlier process journaled goes into `calls` first, whatever this one's mode;
        // a journal another live process owns is left alone (see `Journal::open`).
        let paths = journal::segment_paths(path);
        let journal_err = |e: std::io::Error| open_err(format!("call journal: {e}"));
        let journal = match Journal::open(&paths).map_err(journal_err)? {
            Some((journal, replayed)) => {
                replay(&mut conn, &replayed).map_err(|e| open_err(format!("call journal replay: {e}")))?;
                journal.clear().map_err(journal_err)?;
                if opts.synchronous_full {
                    // The power-loss option: each start's commit is fsynced before the head instead.
                    drop(journal);
                    paths.iter().try_for_each(std::fs::remove_file).map_err(journal_err)?;
                    None
                } else {
                    Some(Arc::new(journal))
                }
            }
            None => {
                tracing::info!("call journal owned by another process; starts wait for their commit");
                None
            }
        };
        let reader =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .and_then(|r| {
                    r.busy_timeout(BUSY_TIMEOUT)?;
                    Ok(r)
                })
                .map_err(|e| open_err(format!("read connection: {e}")))?;
        let wal = Arc::new(Wal::default());
        let checkpointer = Checkpointer::start(
            path,
            Arc::clone(&wal),
            CheckpointOptions {
                interval: opts.checkpoint_interval,
                idle: opts.idle_checkpoint,
                max_wal_bytes: opts.max_wal_bytes,
                synchronous_full: opts.synchronous_full,
            },
        )
        .map_err(|e| open_err(format!("checkpoint connection: {e}")))?;
        Store::start(
            Arc::new(Mutex::new(conn)),
            Arc::new(Mutex::new(reader)),
            wal,
            (Some(checkpointer), journal),
            opts,
            location,
        )
    }

    /// A private in-memory database (for tests). Reads share the writer's connection, so they see
    /// committed data only and wait while a batch is being written.
    pub fn open_in_memory(opts: StoreOptions) -> Result<Store, StoreError> {
        let location = ":memory:".to_owned();
        let mut conn = Connection::open_in_memory()?;
        configure(&conn, &opts, false)?;
        schema::migrate(&mut conn, &location)?;
        let conn = Arc::new(Mutex::new(conn));
        Store::start(Arc::clone(&conn), conn, Arc::new(Wal::default()), (None, None), opts, location)
    }

    fn start(
        conn: Arc<Mutex<Connection>>,
        reader: Arc<Mutex<Connection>>,
        wal: Arc<Wal>,
        (checkpointer, journal): (Option<Checkpointer>, Option<Arc<Journal>>),
        opts: StoreOptions,
        location: String,
    ) -> Result<Store, StoreError> {
        let pace = if journal.is_some() { opts.commit_pace } else { Duration::ZERO };
        let queue = Arc::new(Queue::paced(opts.writer_queue, pace, writer::MAX_BATCH));
        let stats = Arc::new(stats::WriterStats::default());
        let writer = Writer { conn, queue: Arc::clone(&queue), epoch: opts.epoch, wal, stats: stats.clone() };
        let handle = std::thread::Builder::new()
            .name("keyhaven-store".into())
            .spawn(move || writer.run())
            .map_err(|e| StoreError::Task(format!("cannot start the store writer: {e}")))?;
        Ok(Store {
            queue,
            writer: Some(handle),
            checkpointer,
            reader,
            journal,
            dropped: AtomicU64::new(0),
            stats,
            epoch: opts.epoch,
            location,
        })
    }

    /// This process's epoch, as passed in [`StoreOptions`].
    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// Records dropped because the write queue was full, since open.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The writer's queue depth and commit times, and the records dropped (metrics).
    pub fn ledger_stats(&self) -> LedgerSnapshot {
        self.stats.snapshot(self.dropped(), u64::try_from(self.queue.len()).unwrap_or(u64::MAX))
    }

    fn submit<T>(&self, make: impl FnOnce(writer::Reply<T>) -> Command) -> Ack<T> {
        let (reply, rx) = oneshot::channel();
        match self.queue.push(make(reply)) {
            Ok(()) => Ack { state: AckState::Pending(rx) },
            Err(PushError::Full(cmd)) => {
                let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::warn!(command = cmd.name(), dropped, "store write queue full; record dropped");
                Ack::ready(Err(StoreError::QueueFull))
            }
            Err(PushError::Closed) => Ack::ready(Err(StoreError::Closed)),
        }
    }

    /// Queues the in-flight row of a call. Never blocks on SQLite: with the call journal the ack
    /// is ready once the start is appended to it (a write(2), durable when the process dies);
    /// without it (in-memory stores, `synchronous=FULL`, or a failed append) once the row is
    /// committed.
    pub fn record_start(&self, mut start: CallStart) -> Ack {
        let held = self.journal_append(|j| j.append_start(self.epoch, &mut start));
        let journaled = held.is_some();
        let ack = self.submit(|r| Command::Start(Box::new(start), r, held));
        if journaled { Ack::ready(Ok(())) } else { ack }
    }

    /// Appends to the call journal, when there is one; `None` without one or when the append
    /// failed (the record then relies on its SQLite commit alone).
    fn journal_append(
        &self,
        append: impl FnOnce(&Arc<Journal>) -> std::io::Result<journal::Held>,
    ) -> Option<journal::Held> {
        let journal = self.journal.as_ref()?;
        match append(journal) {
            Ok(held) => Some(held),
            Err(e) => {
                tracing::warn!(error = %e, "call journal append failed; the record waits for SQLite instead");
                None
            }
        }
    }

    /// Queues the completion of a call (and its rollup). Never blocks.
    pub fn record_finish(&self, mut finish: CallFinish) -> Ack {
        let held = self.journal_append(|j| j.append_finish(&mut finish));
        self.submit(|r| Command::Finish(Box::new(finish), r, held))
    }

    /// Deletes one call row (its rollup contribution stays). Resolves to the rows deleted.
    pub fn delete_call(&self, id: impl Into<String>) -> Ack<u64> {
        let id = id.into();
        self.submit(|r| Command::DeleteCall(id, r))
    }

    /// Retention: deletes finished calls that started before `before_ms`, and the agent
    /// conversations idle since before it (transcript, runs, tool rounds, checkpoints, pending
    /// messages, acknowledged blobs; never one with a running run). In-flight calls and the
    /// rollups stay. Resolves to the calls deleted.
    pub fn prune(&self, before_ms: i64) -> Ack<u64> {
        self.submit(|reply| Command::Prune { before_ms, reply })
    }

    /// Marks every in-flight row recorded by an earlier process (older epoch) `interrupted`, and
    /// adds it to the rollup as an error. Run once at startup. Resolves to the rows changed.
    pub fn interrupt_stale(&self) -> Ack<u64> {
        self.submit(Command::InterruptStale)
    }

    /// Queues a transcript write (see [`ConversationOp`]). Never blocks. Resolves to the rows
    /// inserted or changed (0 for an idempotent repeat).
    pub fn conversation(&self, op: ConversationOp) -> Ack<u64> {
        self.submit(|r| Command::Conversation(Box::new(op), r))
    }

    /// The gateway's remembered reasoning since `since_ms`, oldest first (loaded at start).
    pub async fn reasoning_since(&self, since_ms: i64) -> Result<Vec<crate::model::ReasoningRecord>, StoreError> {
        self.read(move |c| Ok(conversation::reasoning_since(c, since_ms)?)).await
    }

    /// The Cursor versions seen, most recently seen first (the update guard).
    pub async fn cursor_versions(&self) -> Result<Vec<CursorVersionRow>, StoreError> {
        self.read(|c| Ok(cursor_versions::all(c)?)).await
    }

    /// A conversation's messages in order.
    pub async fn conversation_messages(&self, conversation_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
        let id = conversation_id.to_owned();
        self.read(move |c| conversation::messages(c, &id)).await
    }

    /// A conversation's runs, oldest first.
    pub async fn conversation_runs(&self, conversation_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        let id = conversation_id.to_owned();
        self.read(move |c| conversation::runs(c, &id)).await
    }

    /// A run's tool rounds by step.
    pub async fn tool_rounds(&self, run_id: &str) -> Result<Vec<ToolRoundRecord>, StoreError> {
        let id = run_id.to_owned();
        self.read(move |c| conversation::tool_rounds(c, &id)).await
    }

    /// The newest checkpoint of a conversation.
    pub async fn latest_checkpoint(&self, conversation_id: &str) -> Result<Option<CheckpointRecord>, StoreError> {
        let id = conversation_id.to_owned();
        self.read(move |c| conversation::latest_checkpoint(c, &id)).await
    }

    /// The messages pending for a conversation's next run, in delivery order.
    pub async fn pending_messages(&self, conversation_id: &str) -> Result<Vec<crate::model::Entry>, StoreError> {
        let id = conversation_id.to_owned();
        self.read(move |c| conversation::pending_messages(c, &id)).await
    }

    /// The blob ids a conversation's client acknowledged.
    pub async fn acked_blobs(&self, conversation_id: &str) -> Result<Vec<Vec<u8>>, StoreError> {
        let id = conversation_id.to_owned();
        self.read(move |c| conversation::acked_blob_ids(c, &id)).await
    }

    /// Resolves once everything queued before it is committed.
    pub fn flush(&self) -> Ack {
        self.submit(Command::Flush)
    }

    /// Stops the writer after it has applied everything queued, and waits for it.
    pub fn close(mut self) -> Result<(), StoreError> {
        let (reply, _rx) = oneshot::channel();
        // Shutdown is queued even when the queue is full; the writer drains.
        let _ = self.queue.push_always(Command::Shutdown(reply));
        self.join()
    }

    /// Stops the writer once it has applied what is queued, then the checkpointer (after its last
    /// checkpoint), and waits for both.
    fn join(&mut self) -> Result<(), StoreError> {
        self.queue.close();
        let writer = match self.writer.take() {
            Some(handle) => handle.join().map_err(|_| StoreError::Task("the store writer panicked".into())),
            None => Ok(()),
        };
        let checkpointer = self.checkpointer.take().map_or(Ok(()), |mut c| c.stop());
        // Everything journaled is committed now (or failed for good): nothing left to replay.
        if writer.is_ok()
            && let Some(journal) = &self.journal
            && let Err(e) = journal.clear()
        {
            tracing::warn!(error = %e, "call journal not emptied at close; the next start replays it");
        }
        writer.and(checkpointer)
    }

    #[cfg(test)]
    pub(crate) fn pause_writer(&self) -> PauseGuard {
        let (paused_tx, paused_rx) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel();
        if self.queue.push_always(Command::Pause { paused: paused_tx, release: release_rx }).is_ok() {
            let _ = paused_rx.recv();
        }
        PauseGuard { _release: release }
    }

    /// Test hook: runs `f` on the read connection (the writer's own for in-memory stores).
    #[cfg(test)]
    pub(crate) fn with_read_conn<T>(&self, f: impl FnOnce(&Connection) -> T) -> T {
        f(&self.reader.lock().unwrap_or_else(PoisonError::into_inner))
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = Arc::clone(&self.reader);
        tokio::task::spawn_blocking(move || f(&conn.lock().unwrap_or_else(PoisonError::into_inner)))
            .await
            .map_err(|e| StoreError::Task(format!("store read failed: {e}")))?
    }

    /// A read of the call history or its rollups. It sees every record acknowledged before it:
    /// the pace may hold journaled starts and finishes back for up to `commit_pace`, and a
    /// dashboard that loads a page once would show them missing until the next reload, so what
    /// waits is committed first. A flush that fails (a full queue, a closed writer) leaves the
    /// read to show what is committed, and so does a writer that takes longer than
    /// [`HISTORY_FLUSH_WAIT`] (a stalled disk must not stall the dashboard).
    async fn read_history<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(HISTORY_FLUSH_WAIT, self.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "store flush before a history read failed; reading what is committed")
            }
            Err(_) => tracing::debug!("store writer busy past the history read's wait; reading what is committed"),
        }
        self.read(f).await
    }

    /// Usage per UTC day and model, from `since_day` (`YYYY-MM-DD`) on, oldest first.
    pub async fn usage_by_day(&self, since_day: &str) -> Result<Vec<UsageRow>, StoreError> {
        let since = since_day.to_owned();
        self.read_history(move |c| read::usage_by_day(c, &since)).await
    }

    /// Usage summed over every day from `since_day` (`YYYY-MM-DD`) on.
    pub async fn usage_totals(&self, since_day: &str) -> Result<UsageTotals, StoreError> {
        let since = since_day.to_owned();
        self.read_history(move |c| read::usage_totals(c, &since)).await
    }

    /// Calls matching `filter`, newest first, without bodies.
    pub async fn recent_calls(&self, filter: CallFilter) -> Result<Vec<CallSummary>, StoreError> {
        self.read_history(move |c| read::recent_calls(c, &filter)).await
    }

    /// Calls grouped by client session, most recently active first (see [`SessionRow`]).
    pub async fn sessions(&self, since_ms: i64, limit: u32) -> Result<Vec<SessionRow>, StoreError> {
        self.read_history(move |c| read::sessions(c, since_ms, limit)).await
    }

    /// One call with its bodies.
    pub async fn call_detail(&self, id: &str) -> Result<Option<CallDetail>, StoreError> {
        let id = id.to_owned();
        self.read_history(move |c| read::call_detail(c, &id)).await
    }

    /// Usage per day, model, provider or client over `since_day..=until_day` (`YYYY-MM-DD`), from
    /// the `usage_daily` rollup.
    pub async fn usage_grouped(
        &self,
        since_day: &str,
        until_day: &str,
        group: UsageGroup,
    ) -> Result<Vec<UsageGroupRow>, StoreError> {
        let (since, until) = (since_day.to_owned(), until_day.to_owned());
        self.read_history(move |c| read::usage_grouped(c, &since, &until, group)).await
    }

    /// Usage per UTC day and group (model, provider or client) over `since_day..=until_day`,
    /// from the `usage_daily` rollup, ordered by day, then key.
    pub async fn usage_split(
        &self,
        since_day: &str,
        until_day: &str,
        group: UsageGroup,
    ) -> Result<Vec<UsageSplitRow>, StoreError> {
        let (since, until) = (since_day.to_owned(), until_day.to_owned());
        self.read_history(move |c| read::usage_split(c, &since, &until, group)).await
    }

    /// Latency histograms (buckets of [`LATENCY_BOUNDS_MS`]) over `since_day..=until_day`, per
    /// group or (with `None`) one for everything, from the `latency_daily` rollup.
    pub async fn latency_histograms(
        &self,
        since_day: &str,
        until_day: &str,
        group: Option<UsageGroup>,
    ) -> Result<Vec<LatencyHistogram>, StoreError> {
        let (since, until) = (since_day.to_owned(), until_day.to_owned());
        self.read_history(move |c| read::latency_histograms(c, &since, &until, group)).await
    }

    /// Spend since `since_ms` per client, provider and model (see [`crate::model::SpendRow`]),
    /// for the budgets' seed.
    pub async fn spend_since(&self, since_ms: i64) -> Result<Vec<crate::model::SpendRow>, StoreError> {
        self.read_history(move |c| read::spend_since(c, since_ms)).await
    }

    /// Usage per group of the finished calls started in `since_ms..until_ms`, with latency
    /// histograms per group and over all (from `calls`; see [`read::usage_between`]).
    pub async fn usage_between(
        &self,
        since_ms: i64,
        until_ms: i64,
        group: UsageGroup,
    ) -> Result<UsageBetween, StoreError> {
        self.read_history(move |c| read::usage_between(c, since_ms, until_ms, group)).await
    }

    /// Queues a budget alert (kept once per budget, period and level). Never blocks.
    pub fn record_budget_alert(&self, alert: crate::model::BudgetAlert) -> Ack<u64> {
        self.submit(|r| Command::BudgetAlert(Box::new(alert), r))
    }

    /// Budget alerts of periods that started at or after `since_ms` (the budgets' seed).
    pub async fn budget_alerts_since(&self, since_ms: i64) -> Result<Vec<crate::model::BudgetAlert>, StoreError> {
        self.read(move |c| read::budget_alerts_since(c, since_ms)).await
    }

    /// Finished calls started in `since_ms..until_ms` by cost source (from `calls`: what
    /// retention kept).
    pub async fn cost_sources(&self, since_ms: i64, until_ms: i64) -> Result<Vec<CostSourceRow>, StoreError> {
        self.read_history(move |c| read::cost_sources(c, since_ms, until_ms)).await
    }

    /// A page of the calls started in `since_ms..until_ms`, oldest first, after `(started_ms,
    /// id)` (keyset paging for exports). At most `limit` (capped at [`MAX_LIMIT`]).
    pub async fn calls_page(
        &self,
        since_ms: i64,
        until_ms: i64,
        after: Option<(i64, String)>,
        limit: u32,
    ) -> Result<Vec<CallSummary>, StoreError> {
        self.read_history(move |c| read::calls_page(c, since_ms, until_ms, after, limit)).await
    }

    /// The `usage_daily` rows of `since_day..=until_day` (`YYYY-MM-DD`), one per day, model,
    /// provider and client.
    pub async fn usage_daily(&self, since_day: &str, until_day: &str) -> Result<Vec<UsageDailyRow>, StoreError> {
        let (since, until) = (since_day.to_owned(), until_day.to_owned());
        self.read_history(move |c| read::usage_daily(c, &since, &until)).await
    }

    pub async fn count_calls(&self) -> Result<u64, StoreError> {
        self.read_history(read::count_calls).await
    }

    /// Where the database lives (`:memory:` for in-memory stores).
    pub fn location(&self) -> &str {
        &self.location
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Err(e) = self.join() {
            tracing::warn!(error = %e, "store stopped uncleanly");
        }
    }
}

/// Test hook: the writer stays blocked until this is dropped.
#[cfg(test)]
pub(crate) struct PauseGuard {
    _release: std::sync::mpsc::Sender<()>,
}

#[cfg(test)]
mod tests;
