//! The single serial writer: a dedicated thread that owns the read-write connection and applies
//! queued commands in transactions, acking every command after its commit.
//!
//! Call starts come first: each turn of the loop commits every queued start in one small
//! transaction of its own, then applies the other commands (finishes and their rollups, transcript
//! writes, retention) in a second transaction that stops taking commands as soon as a start is
//! queued, so a start waits behind at most the one command being applied and that commit. The
//! writer never checkpoints the WAL (`wal_autocheckpoint = 0`): `checkpoint` does, on its own
//! connection and thread.
//!
//! Each command runs inside its own savepoint, so one bad command fails alone; a failed commit
//! (disk full, I/O error) fails every command of its transaction. The thread survives both.

use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use rusqlite::{Connection, Transaction, TransactionBehavior, named_params};
use tokio::sync::oneshot;

use crate::model::{CallFinish, CallStart, CallStatus};
use crate::store::checkpoint::Wal;
use crate::store::conversation::{self, ConversationOp};
use crate::store::journal::Held;
use crate::store::queue::{Queue, Wake};
use crate::store::{LATENCY_BOUNDS_MS, StoreError};

/// The most commands applied in one transaction.
pub(crate) const MAX_BATCH: usize = 256;

pub(crate) type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

pub(crate) enum Command {
    /// A call's in-flight row; with its journal entry held until the row is committed.
    Start(Box<CallStart>, Reply<()>, Option<Held>),
    /// A call's finish; with its journal entry held until it is committed.
    Finish(Box<CallFinish>, Reply<()>, Option<Held>),
    DeleteCall(String, Reply<u64>),
    Prune {
        before_ms: i64,
        reply: Reply<u64>,
    },
    InterruptStale(Reply<u64>),
    /// A transcript write (conversations, runs, messages, tool rounds, checkpoints).
    Conversation(Box<ConversationOp>, Reply<u64>),
    /// A budget alert was raised (kept so a restart does not raise it again).
    BudgetAlert(Box<crate::model::BudgetAlert>, Reply<u64>),
    Flush(Reply<()>),
    Shutdown(Reply<()>),
    /// Test hook: the writer signals `paused`, then blocks until `release` disconnects.
    #[cfg(test)]
    Pause {
        paused: std::sync::mpsc::Sender<()>,
        release: std::sync::mpsc::Receiver<()>,
    },
}

impl Command {
    /// A start or finish held in the call journal: its ack does not wait for the commit.
    pub(crate) fn journaled(&self) -> bool {
        matches!(self, Command::Start(_, _, Some(_)) | Command::Finish(_, _, Some(_)))
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Command::Start(..) => "start",
            Command::Finish(..) => "finish",
            Command::DeleteCall(..) => "delete_call",
            Command::Prune { .. } => "prune",
            Command::InterruptStale(_) => "interrupt_stale",
            Command::Conversation(op, _) => op.name(),
            Command::BudgetAlert(..) => "budget_alert",
            Command::Flush(_) => "flush",
            Command::Shutdown(_) => "shutdown",
            #[cfg(test)]
            Command::Pause { .. } => "pause",
        }
    }

    fn fail(self, err: StoreError) {
        // A dropped receiver just means the caller did not wait for the ack.
        match self {
            Command::Start(_, r, _) | Command::Finish(_, r, _) | Command::Flush(r) | Command::Shutdown(r) => {
                let _ = r.send(Err(err));
            }
            Command::DeleteCall(_, r)
            | Command::Prune { reply: r, .. }
            | Command::InterruptStale(r)
            | Command::Conversation(_, r)
            | Command::BudgetAlert(_, r) => {
                let _ = r.send(Err(err));
            }
            #[cfg(test)]
            Command::Pause { .. } => {}
        }
    }
}

/// A command applied inside the open transaction, waiting for the commit to be acked.
enum Done {
    Unit(Reply<()>, Result<(), StoreError>),
    /// A journaled record (start or finish): its journal entry is let go once the commit is known.
    Journaled(Reply<()>, Result<(), StoreError>, Option<Held>),
    Count(Reply<u64>, Result<u64, StoreError>),
}

impl Done {
    fn error(&self) -> Option<StoreError> {
        match self {
            Done::Unit(_, Err(e)) | Done::Journaled(_, Err(e), _) | Done::Count(_, Err(e)) => Some(e.clone()),
            _ => None,
        }
    }

    fn send(self, commit: Result<(), &StoreError>) {
        match self {
            Done::Unit(r, res) => {
                let _ = r.send(commit.map_err(Clone::clone).and(res));
            }
            Done::Journaled(r, res, held) => {
                let _ = r.send(commit.map_err(Clone::clone).and(res));
                drop(held);
            }
            Done::Count(r, res) => {
                let _ = r.send(commit.map_err(Clone::clone).and(res));
            }
        }
    }
}

pub(crate) struct Writer {
    pub(crate) conn: Arc<Mutex<Connection>>,
    pub(crate) queue: Arc<Queue>,
    pub(crate) epoch: i64,
    /// Shared with the checkpointer: the commit count and the gate held across each transaction.
    pub(crate) wal: Arc<Wal>,
    /// Commit times (metrics).
    pub(crate) stats: Arc<crate::store::stats::WriterStats>,
}

impl Writer {
    pub(crate) fn run(self) {
        crate::store::background_priority();
        let mut shutting_down = false;
        loop {
            if shutting_down && self.queue.is_empty() {
                break;
            }
            if let Wake::Closed = self.queue.wait() {
                break;
            }
            #[cfg(test)]
            if let Some(Command::Pause { paused, release }) = self.queue.take_pause() {
                let _ = paused.send(());
                let _ = release.recv();
                continue;
            }
            let starts = self.queue.take_starts(MAX_BATCH);
            if self.queue.is_paced() && starts.iter().all(Command::journaled) {
                // No start's ack waits for this commit: the starts need not commit ahead of the
                // rest; one transaction. (A start whose journal append failed takes the path below.)
                let mut starts = starts.into_iter();
                let mut taken = 0;
                let rolled_back = self.execute(
                    || {
                        starts.next().or_else(|| {
                            if taken == MAX_BATCH {
                                return None;
                            }
                            taken += 1;
                            self.queue.pop_rest()
                        })
                    },
                    &mut shutting_down,
                );
                // A rollback fails the starts not yet applied (the rest stay queued).
                if let Some(err) = rolled_back {
                    starts.for_each(|cmd| cmd.fail(err.clone()));
                }
                continue;
            }
            if !starts.is_empty() {
                let mut starts = starts.into_iter();
                if let Some(err) = self.execute(|| starts.next(), &mut shutting_down) {
                    // The transaction rolled back: the starts not yet applied fail with it.
                    starts.for_each(|cmd| cmd.fail(err.clone()));
                }
            }
            let mut taken = 0;
            // A rollback leaves the commands not yet taken queued for the next transaction.
            let _ = self.execute(
                || {
                    if taken == MAX_BATCH {
                        return None;
                    }
                    taken += 1;
                    self.queue.pop_rest()
                },
                &mut shutting_down,
            );
        }
        tracing::debug!("store writer stopped");
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies the commands `next` yields in one transaction (none: no transaction). Returns the
    /// error when the transaction rolled back before `next` ran dry.
    fn execute(&self, mut next: impl FnMut() -> Option<Command>, shutting_down: &mut bool) -> Option<StoreError> {
        let first = next()?;
        let began = std::time::Instant::now();
        let pass = self.wal.gate.transaction();
        let mut conn = self.lock();
        let mut tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
            Ok(tx) => tx,
            Err(e) => {
                let err = StoreError::from(e);
                tracing::warn!(error = %err, "store write transaction failed to begin");
                first.fail(err.clone());
                return Some(err);
            }
        };
        let mut done = Vec::new();
        let mut cmd = Some(first);
        while let Some(c) = cmd.take().or_else(&mut next) {
            let applied = match c {
                Command::Start(start, r, held) => {
                    Done::Journaled(r, in_savepoint(&mut tx, |t| insert_start(t, &start, self.epoch)), held)
                }
                Command::Finish(finish, r, held) => {
                    Done::Journaled(r, in_savepoint(&mut tx, |t| apply_finish(t, &finish)), held)
                }
                Command::DeleteCall(id, r) => Done::Count(r, in_savepoint(&mut tx, |t| delete_call(t, &id))),
                Command::Prune { before_ms, reply } => {
                    Done::Count(reply, in_savepoint(&mut tx, |t| prune(t, before_ms)))
                }
                Command::InterruptStale(r) => Done::Count(r, in_savepoint(&mut tx, |t| interrupt_stale(t, self.epoch))),
                Command::Conversation(op, r) => {
                    Done::Count(r, in_savepoint(&mut tx, |t| conversation::apply(t, &op, self.epoch)))
                }
                Command::BudgetAlert(alert, r) => Done::Count(r, in_savepoint(&mut tx, |t| insert_alert(t, &alert))),
                Command::Flush(r) => Done::Unit(r, Ok(())),
                Command::Shutdown(r) => {
                    *shutting_down = true;
                    Done::Unit(r, Ok(()))
                }
                #[cfg(test)]
                Command::Pause { .. } => continue,
            };
            // Some errors (disk full, I/O) make SQLite roll back the whole transaction. Then nothing
            // of it is committed: fail it all rather than run the rest outside a transaction.
            if let Some(err) = applied.error().filter(|_| tx.is_autocommit()) {
                tracing::warn!(error = %err, commands = done.len() + 1, "store write transaction rolled back");
                done.push(applied);
                done.into_iter().for_each(|d| d.send(Err(&err)));
                return Some(err);
            }
            done.push(applied);
        }
        let committed = tx.commit();
        drop(conn);
        drop(pass);
        self.wal.commits.fetch_add(1, Ordering::Release);
        self.stats.committed(began.elapsed());
        match committed {
            Ok(()) => done.into_iter().for_each(|d| d.send(Ok(()))),
            Err(e) => {
                let err = StoreError::from(e);
                tracing::warn!(error = %err, commands = done.len(), "store write transaction failed to commit");
                done.into_iter().for_each(|d| d.send(Err(&err)));
            }
        }
        None
    }
}

/// Runs `f` in a savepoint of `tx`: on error only its own changes roll back. The savepoint
/// statements are prepared once (rusqlite's `Savepoint` formats and parses them for each
/// command, which is a measurable part of the writer's time at a thousand records a second).
fn in_savepoint<T>(
    tx: &mut Transaction<'_>,
    f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
) -> Result<T, StoreError> {
    let conn: &Connection = tx;
    let run = |sql: &str| conn.prepare_cached(sql).and_then(|mut s| s.execute([])).map(drop);
    run("SAVEPOINT keyhaven_command")?;
    match f(conn).and_then(|value| run("RELEASE keyhaven_command").map(|()| value)) {
        Ok(value) => Ok(value),
        Err(e) => {
            // Fails when SQLite already rolled the whole transaction back (the caller checks).
            let _ = run("ROLLBACK TO keyhaven_command").and_then(|()| run("RELEASE keyhaven_command"));
            Err(e.into())
        }
    }
}

/// SQLite integers are i64; token counts beyond that are clamped.
pub(crate) fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Records a budget alert; one already recorded for the budget, period and level is kept.
fn insert_alert(conn: &Connection, a: &crate::model::BudgetAlert) -> rusqlite::Result<u64> {
    let n = conn
        .prepare_cached(
            "INSERT INTO budget_alerts (budget, period_start_ms, level, reset_ms, spent_micros, limit_micros, at_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (budget, period_start_ms, level) DO NOTHING",
        )?
        .execute(rusqlite::params![
            a.budget,
            a.period_start_ms,
            a.level.as_str(),
            a.reset_ms,
            to_i64(a.spent_micros),
            to_i64(a.limit_micros),
            a.at_ms
        ])?;
    Ok(n as u64)
}

/// Inserts the in-flight row. A start for an id that already exists is ignored.
pub(crate) fn insert_start(conn: &Connection, s: &CallStart, epoch: i64) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO calls (id, started_ms, status, dialect, client, model, model_id, provider, upstream_model, \
         stream, request_body, process_epoch, conversation_id, request_id, session_id, budget_downgrade) \
         VALUES (:id, :started_ms, :status, :dialect, :client, :model, :model_id, :provider, :upstream_model, \
         :stream, :request_body, :epoch, :conversation_id, :request_id, :session_id, :budget_downgrade) \
         ON CONFLICT (id) DO NOTHING",
    )?;
    stmt.execute(named_params! {
        ":id": s.id,
        ":started_ms": s.started_ms,
        ":status": CallStatus::InFlight.as_str(),
        ":dialect": s.dialect,
        ":client": s.client,
        ":model": s.model,
        ":model_id": s.model_id,
        ":provider": s.provider,
        ":upstream_model": s.upstream_model,
        ":stream": s.stream,
        ":request_body": s.request_body,
        ":epoch": epoch,
        ":conversation_id": s.conversation_id,
        ":request_id": s.request_id,
        ":session_id": s.session_id,
        ":budget_downgrade": s.budget_downgrade,
    })?;
    Ok(())
}

/// Completes an in-flight row, or inserts a complete row when the start never arrived (its
/// `started_ms` is then `finished_ms - total_ms` and the start-only columns are empty). A finish
/// for a row that is no longer in flight is ignored, so the rollup counts each call once.
pub(crate) fn apply_finish(conn: &Connection, f: &CallFinish) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO calls (id, started_ms, finished_ms, status, http_status, input_tokens, output_tokens, \
         cache_read_tokens, cache_write_tokens, reasoning_tokens, usage_estimated, cost_micros, price_version, \
         ttft_ms, total_ms, retries, error_kind, error_message, request_body, response_body, model_id, provider, \
         upstream_model, notes, cost_source) \
         VALUES (:id, :finished_ms - :total_ms, :finished_ms, :status, :http_status, :input, :output, :cache_read, \
         :cache_write, :reasoning, :estimated, :cost, :price_version, :ttft_ms, :total_ms, :retries, :error_kind, \
         :error_message, :request_body, :response_body, :model_id, :provider, :upstream_model, :notes, :cost_source) \
         ON CONFLICT (id) DO UPDATE SET finished_ms = excluded.finished_ms, status = excluded.status, \
         http_status = excluded.http_status, input_tokens = excluded.input_tokens, \
         output_tokens = excluded.output_tokens, cache_read_tokens = excluded.cache_read_tokens, \
         cache_write_tokens = excluded.cache_write_tokens, reasoning_tokens = excluded.reasoning_tokens, \
         usage_estimated = excluded.usage_estimated, cost_micros = excluded.cost_micros, \
         price_version = excluded.price_version, cost_source = excluded.cost_source, ttft_ms = excluded.ttft_ms, total_ms = excluded.total_ms, \
         retries = excluded.retries, error_kind = excluded.error_kind, error_message = excluded.error_message, \
         request_body = COALESCE(excluded.request_body, calls.request_body), \
         response_body = excluded.response_body, \
         model_id = COALESCE(excluded.model_id, calls.model_id), \
         provider = COALESCE(excluded.provider, calls.provider), \
         upstream_model = COALESCE(excluded.upstream_model, calls.upstream_model), \
         notes = excluded.notes \
         WHERE calls.status = 'in_flight'",
    )?;
    let changed = stmt.execute(named_params! {
        ":id": f.id,
        ":finished_ms": f.finished_ms,
        ":total_ms": f.total_ms,
        ":status": f.status.as_str(),
        ":http_status": f.http_status,
        ":input": to_i64(f.usage.input_tokens),
        ":output": to_i64(f.usage.output_tokens),
        ":cache_read": to_i64(f.usage.cache_read_tokens),
        ":cache_write": to_i64(f.usage.cache_write_tokens),
        ":reasoning": to_i64(f.usage.reasoning_tokens),
        ":estimated": f.usage_estimated,
        ":cost": f.cost_micros,
        ":price_version": f.price_version,
        ":ttft_ms": f.ttft_ms,
        ":retries": f.retries,
        ":error_kind": f.error_kind,
        ":error_message": f.error_message,
        ":request_body": f.request_body,
        ":response_body": f.response_body,
        ":model_id": f.model_id,
        ":provider": f.provider,
        ":upstream_model": f.upstream_model,
        ":notes": (!f.notes.is_empty()).then(|| serde_json::to_string(&f.notes).unwrap_or_default()),
        ":cost_source": f.cost_source.map(crate::model::CostSource::as_str),
    })?;
    if changed > 0 {
        add_to_rollup(conn, &f.id)?;
    }
    Ok(())
}

/// `col = col + excluded.col`, saturating at the i64 bounds instead of raising SQLite's integer
/// overflow error (which would fail the whole finish).
fn saturating_add(col: &str) -> String {
    format!(
        "{col} = CASE \
         WHEN excluded.{col} > 0 AND {col} > 9223372036854775807 - excluded.{col} THEN 9223372036854775807 \
         WHEN excluded.{col} < 0 AND {col} < -9223372036854775808 - excluded.{col} THEN -9223372036854775808 \
         ELSE {col} + excluded.{col} END"
    )
}

/// Adds one finished row to `usage_daily` (the day of its start, UTC). Errors are `error` and
/// `interrupted` calls; `canceled` is not an error.
fn add_to_rollup(conn: &Connection, id: &str) -> rusqlite::Result<()> {
    static SQL: LazyLock<String> = LazyLock::new(rollup_sql);
    conn.prepare_cached(&SQL)?.execute([id])?;
    add_to_latency(conn, id)
}

fn rollup_sql() -> String {
    let sums = [
        "calls",
        "errors",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "cost_micros",
        "total_ms_sum",
    ]
    .map(saturating_add)
    .join(", ");
    format!(
        "INSERT INTO usage_daily (day, model, provider, client, calls, errors, input_tokens, output_tokens, \
         cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_micros, total_ms_sum) \
         SELECT strftime('%Y-%m-%d', started_ms / 1000, 'unixepoch'), model, COALESCE(provider, ''), client, 1, \
         status IN ('error', 'interrupted'), input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, \
         reasoning_tokens, COALESCE(cost_micros, 0), COALESCE(total_ms, 0) \
         FROM calls WHERE id = ?1 \
         ON CONFLICT (day, model, provider, client) DO UPDATE SET {sums}"
    )
}

/// The `CASE` expression mapping `total_ms` to its bucket in [`LATENCY_BOUNDS_MS`].
pub(crate) fn bucket_expr() -> String {
    let mut sql = String::from("CASE");
    for (i, bound) in LATENCY_BOUNDS_MS.iter().enumerate() {
        sql.push_str(&format!(" WHEN total_ms <= {bound} THEN {i}"));
    }
    sql.push_str(&format!(" ELSE {} END", LATENCY_BOUNDS_MS.len()));
    sql
}

/// Adds one finished row's duration to `latency_daily` (rows without a duration are skipped).
fn add_to_latency(conn: &Connection, id: &str) -> rusqlite::Result<()> {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        format!(
            "INSERT INTO latency_daily (day, model, provider, client, bucket, calls) \
             SELECT strftime('%Y-%m-%d', started_ms / 1000, 'unixepoch'), model, COALESCE(provider, ''), client, \
             {}, 1 FROM calls WHERE id = ?1 AND total_ms IS NOT NULL \
             ON CONFLICT (day, model, provider, client, bucket) DO UPDATE SET calls = calls + 1",
            bucket_expr()
        )
    });
    conn.prepare_cached(&SQL)?.execute([id])?;
    Ok(())
}

fn delete_call(conn: &Connection, id: &str) -> rusqlite::Result<u64> {
    let n = conn.prepare_cached("DELETE FROM calls WHERE id = ?1")?.execute([id])?;
    Ok(u64::try_from(n).unwrap_or(u64::MAX))
}

/// Deletes finished calls that started before `before_ms`, and the agent transcripts idle since
/// before it (see [`conversation::prune`]). In-flight rows and rollups stay. Returns the calls
/// deleted.
fn prune(conn: &Connection, before_ms: i64) -> rusqlite::Result<u64> {
    let n = conn
        .prepare_cached("DELETE FROM calls WHERE started_ms < ?1 AND status <> 'in_flight'")?
        .execute([before_ms])?;
    let conversations = conversation::prune(conn, before_ms)?;
    if conversations > 0 {
        tracing::info!(conversations, "pruned agent transcripts past retention");
    }
    Ok(u64::try_from(n).unwrap_or(u64::MAX))
}

/// Marks in-flight rows of earlier processes interrupted and counts them in the rollup as
/// errors. Their duration is unknown: `finished_ms` is this process's epoch (when the interruption
/// was noticed) and `total_ms`/`ttft_ms` stay NULL; the usage is flagged estimated.
fn interrupt_stale(conn: &Connection, epoch: i64) -> rusqlite::Result<u64> {
    let ids: Vec<String> = conn
        .prepare_cached(
            "UPDATE calls SET status = 'interrupted', finished_ms = ?1, usage_estimated = 1, cost_source = 'estimated', \
             error_kind = 'interrupted', error_message = 'Keyhaven stopped before this call finished' \
             WHERE status = 'in_flight' AND process_epoch < ?1 RETURNING id",
        )?
        .query_map([epoch], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for id in &ids {
        add_to_rollup(conn, id)?;
    }
    let runs = conversation::interrupt_stale_runs(conn, epoch)?;
    if runs > 0 {
        tracing::info!(runs, "agent runs left running by an earlier process are marked interrupted");
    }
    Ok(u64::try_from(ids.len()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
