//! Agent transcripts in SQLite (migration 0004): conversations, runs, tool rounds, the
//! append-only message log and checkpoints; and (migration 0006) the messages pending for a
//! conversation's next run and the blob ids its client acknowledged.
//!
//! Every write is one [`ConversationOp`] applied by the serial writer:
//! - starting a run creates its conversation row when missing (and bumps `updated_ms`);
//! - appending a message is idempotent: a message id (or a position) the conversation already
//!   holds changes nothing, and the op reports 0 rows;
//! - a run is finished once: a finish for a run that is no longer `running` changes nothing;
//! - a tool round is keyed by (run, step); a repeat changes nothing;
//! - a pending message is keyed by its id; appending a message with that id to the conversation
//!   deletes it in the same transaction (it was delivered), and rows whose id the transcript
//!   already holds are never read back as pending;
//! - replacing the messages (compaction) also deletes the conversation's checkpoints: they
//!   covered messages that are gone, and the next one is the compacted transcript's; a
//!   checkpoint whose last message is no longer at its position is not stored (one taken before
//!   a compaction but written after it);
//! - the acknowledged blob ids change by differences (added, removed);
//! - a run's context blocks (migration 0012) are written once per run (a repeat changes nothing).

use rusqlite::{Connection, OptionalExtension, named_params};

use crate::model::{Entry, Message, RunFinish, RunRecord, RunStart, RunStatus, StoredMessage, ToolRoundRecord, Usage};
use crate::store::StoreError;
use crate::store::writer::to_i64;

/// A checkpoint as stored: the first `seq` messages of the conversation, versioned state bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointRecord {
    pub conversation_id: String,
    pub seq: u64,
    pub run_id: Option<String>,
    pub version: u32,
    pub created_ms: i64,
    pub state: Vec<u8>,
}

/// One transcript write.
#[derive(Debug, Clone)]
pub enum ConversationOp {
    StartRun(RunStart),
    Append {
        conversation_id: String,
        seq: u64,
        run_id: Option<String>,
        entry: Entry,
        created_ms: i64,
    },
    /// Compaction: the conversation's messages become `entries` (positions from 0).
    Replace {
        conversation_id: String,
        run_id: Option<String>,
        entries: Vec<Entry>,
        created_ms: i64,
    },
    ToolRound(ToolRoundRecord),
    FinishRun(RunFinish),
    /// `last_message_id` names the last message the checkpoint covers (position `seq - 1`): when
    /// the conversation's message there is another (a compaction replaced the messages after
    /// the checkpoint was taken), the stale checkpoint is not stored.
    Checkpoint {
        record: CheckpointRecord,
        last_message_id: Option<String>,
    },
    /// Messages for the conversation's next run (a repeated id changes nothing). Creates the
    /// conversation row when missing.
    AddPending {
        conversation_id: String,
        entries: Vec<Entry>,
        created_ms: i64,
    },
    /// The client's acknowledged blob ids change: `added` are recorded, `removed` forgotten.
    /// Creates the conversation row when missing.
    AckedBlobs {
        conversation_id: String,
        added: Vec<Vec<u8>>,
        removed: Vec<Vec<u8>>,
        acked_ms: i64,
    },
    /// The reasoning before some tool calls (the gateway's memory); rows older than
    /// `expire_before_ms` go.
    Reasoning {
        record: crate::model::ReasoningRecord,
        expire_before_ms: i64,
    },
    /// The context blocks of a run's user message (shown with the run's calls).
    RunContext {
        run_id: String,
        conversation_id: String,
        blocks: Vec<crate::store::ContextBlock>,
        created_ms: i64,
    },
    /// A Cursor version's row (the update guard: seen, self-test result).
    CursorVersion(crate::store::CursorVersionRow),
}

impl ConversationOp {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            ConversationOp::StartRun(_) => "start_run",
            ConversationOp::Append { .. } => "append_message",
            ConversationOp::Replace { .. } => "replace_messages",
            ConversationOp::ToolRound(_) => "tool_round",
            ConversationOp::FinishRun(_) => "finish_run",
            ConversationOp::Checkpoint { .. } => "checkpoint",
            ConversationOp::AddPending { .. } => "add_pending",
            ConversationOp::AckedBlobs { .. } => "acked_blobs",
            ConversationOp::Reasoning { .. } => "reasoning",
            ConversationOp::RunContext { .. } => "run_context",
            ConversationOp::CursorVersion(_) => "cursor_version",
        }
    }
}

fn changed(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

fn insert_message(
    conn: &Connection,
    conversation_id: &str,
    seq: u64,
    run_id: Option<&str>,
    entry: &Entry,
    created_ms: i64,
) -> rusqlite::Result<u64> {
    let content = serde_json::to_string(&entry.message.content)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    let role = role_name(&entry.message);
    let n = conn
        .prepare_cached(
            "INSERT INTO messages (conversation_id, seq, message_id, run_id, role, content, created_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT DO NOTHING",
        )?
        .execute(rusqlite::params![conversation_id, to_i64(seq), entry.id, run_id, role, content, created_ms])?;
    // Delivered: it is no longer pending (same transaction).
    conn.prepare_cached("DELETE FROM pending_messages WHERE conversation_id = ?1 AND message_id = ?2")?
        .execute(rusqlite::params![conversation_id, entry.id])?;
    Ok(changed(n))
}

fn role_name(message: &Message) -> String {
    serde_json::to_value(message.role).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

/// Creates the conversation row when missing (its client is filled in by the first run).
fn ensure_conversation(conn: &Connection, conversation_id: &str, now_ms: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO conversations (id, client, created_ms, updated_ms) VALUES (?1, '', ?2, ?2) \
         ON CONFLICT (id) DO NOTHING",
    )?
    .execute(rusqlite::params![conversation_id, now_ms])?;
    Ok(())
}

fn add_pending(conn: &Connection, conversation_id: &str, entries: &[Entry], created_ms: i64) -> rusqlite::Result<u64> {
    ensure_conversation(conn, conversation_id, created_ms)?;
    // Rows a run appended under the same id without consuming them (the transcript held the id
    // already) are not pending.
    conn.prepare_cached(
        "DELETE FROM pending_messages WHERE conversation_id = ?1 AND message_id IN \
         (SELECT message_id FROM messages WHERE conversation_id = ?1)",
    )?
    .execute([conversation_id])?;
    let mut n = 0;
    for entry in entries {
        let content = serde_json::to_string(&entry.message.content)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        n += changed(
            conn.prepare_cached(
                "INSERT INTO pending_messages (conversation_id, position, message_id, role, content, created_ms) \
                 SELECT ?1, COALESCE(MAX(position) + 1, 0), ?2, ?3, ?4, ?5 FROM pending_messages \
                 WHERE conversation_id = ?1 ON CONFLICT DO NOTHING",
            )?
            .execute(rusqlite::params![
                conversation_id,
                entry.id,
                role_name(&entry.message),
                content,
                created_ms
            ])?,
        );
    }
    Ok(n)
}

fn acked_blobs(
    conn: &Connection,
    conversation_id: &str,
    added: &[Vec<u8>],
    removed: &[Vec<u8>],
    acked_ms: i64,
) -> rusqlite::Result<u64> {
    ensure_conversation(conn, conversation_id, acked_ms)?;
    let mut n = 0;
    for id in removed {
        n += changed(
            conn.prepare_cached("DELETE FROM acked_blobs WHERE conversation_id = ?1 AND blob_id = ?2")?
                .execute(rusqlite::params![conversation_id, id])?,
        );
    }
    for id in added {
        n += changed(
            conn.prepare_cached(
                "INSERT INTO acked_blobs (conversation_id, blob_id, acked_ms) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (conversation_id, blob_id) DO UPDATE SET acked_ms = excluded.acked_ms",
            )?
            .execute(rusqlite::params![conversation_id, id, acked_ms])?,
        );
    }
    Ok(n)
}

/// Applies one op inside the writer's transaction; returns the rows it inserted or changed.
/// Retention: deletes every conversation whose last activity (the row's `updated_ms`, its newest
/// run start or finish, message, pending message, acknowledged blob or checkpoint) is before
/// `before_ms` and that has no running run, with everything it owns (runs, tool rounds,
/// messages, checkpoints, pending messages, acknowledged blobs and run context blocks go by
/// `ON DELETE CASCADE`).
/// Returns the conversations deleted.
pub(crate) fn prune(conn: &Connection, before_ms: i64) -> rusqlite::Result<u64> {
    let n = conn
        .prepare_cached(
            "DELETE FROM conversations WHERE updated_ms < ?1 \
             AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.conversation_id = conversations.id \
                 AND (r.status = 'running' OR r.started_ms >= ?1 OR COALESCE(r.finished_ms, 0) >= ?1)) \
             AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = conversations.id AND m.created_ms >= ?1) \
             AND NOT EXISTS (SELECT 1 FROM pending_messages p WHERE p.conversation_id = conversations.id \
                 AND p.created_ms >= ?1) \
             AND NOT EXISTS (SELECT 1 FROM acked_blobs b WHERE b.conversation_id = conversations.id \
                 AND b.acked_ms >= ?1) \
             AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.conversation_id = conversations.id \
                 AND c.created_ms >= ?1)",
        )?
        .execute([before_ms])?;
    Ok(u64::try_from(n).unwrap_or(u64::MAX))
}

pub(crate) fn apply(conn: &Connection, op: &ConversationOp, epoch: i64) -> rusqlite::Result<u64> {
    match op {
        ConversationOp::CursorVersion(row) => crate::store::cursor_versions::upsert(conn, row),
        ConversationOp::RunContext { run_id, conversation_id, blocks, created_ms } => {
            let json =
                serde_json::to_string(blocks).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
            ensure_conversation(conn, conversation_id, *created_ms)?;
            let n = conn
                .prepare_cached(
                    "INSERT INTO run_context_blocks (run_id, conversation_id, blocks, created_ms) \
                     VALUES (?1, ?2, ?3, ?4) ON CONFLICT (run_id) DO NOTHING",
                )?
                .execute(rusqlite::params![run_id, conversation_id, json, created_ms])?;
            Ok(changed(n))
        }
        ConversationOp::StartRun(s) => {
            conn.prepare_cached(
                "INSERT INTO conversations (id, client, created_ms, updated_ms) VALUES (?1, ?2, ?3, ?3) \
                 ON CONFLICT (id) DO UPDATE SET updated_ms = MAX(updated_ms, excluded.updated_ms), \
                 client = CASE WHEN client = '' THEN excluded.client ELSE client END",
            )?
            .execute(rusqlite::params![s.conversation_id, s.client, s.started_ms])?;
            let n = conn
                .prepare_cached(
                    "INSERT INTO runs (id, conversation_id, model, status, started_ms, process_epoch) \
                     VALUES (?1, ?2, ?3, 'running', ?4, ?5) ON CONFLICT (id) DO NOTHING",
                )?
                .execute(rusqlite::params![s.id, s.conversation_id, s.model, s.started_ms, epoch])?;
            Ok(changed(n))
        }
        ConversationOp::Append { conversation_id, seq, run_id, entry, created_ms } => {
            insert_message(conn, conversation_id, *seq, run_id.as_deref(), entry, *created_ms)
        }
        ConversationOp::Replace { conversation_id, run_id, entries, created_ms } => {
            let mut n = changed(
                conn.prepare_cached("DELETE FROM messages WHERE conversation_id = ?1")?
                    .execute(rusqlite::params![conversation_id])?,
            );
            // The old checkpoints covered messages that are gone (and would outrank the
            // compacted transcript's by `seq`).
            n += changed(
                conn.prepare_cached("DELETE FROM checkpoints WHERE conversation_id = ?1")?
                    .execute(rusqlite::params![conversation_id])?,
            );
            for (seq, entry) in entries.iter().enumerate() {
                let seq = u64::try_from(seq).unwrap_or(u64::MAX);
                n += insert_message(conn, conversation_id, seq, run_id.as_deref(), entry, *created_ms)?;
            }
            Ok(n)
        }
        ConversationOp::ToolRound(r) => {
            let n = conn
                .prepare_cached(
                    "INSERT INTO tool_rounds (run_id, step, started_ms, finished_ms, calls, failed, status) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT DO NOTHING",
                )?
                .execute(rusqlite::params![
                    r.run_id,
                    r.step,
                    r.started_ms,
                    r.finished_ms,
                    r.calls,
                    r.failed,
                    r.status
                ])?;
            Ok(changed(n))
        }
        ConversationOp::FinishRun(f) => {
            let n = conn
                .prepare_cached(
                    "UPDATE runs SET status = :status, finished_ms = :finished_ms, steps = :steps, \
                 input_tokens = :input, output_tokens = :output, cache_read_tokens = :cache_read, \
                 cache_write_tokens = :cache_write, error_kind = :error_kind, error_message = :error_message \
                 WHERE id = :id AND status = 'running'",
                )?
                .execute(named_params! {
                    ":id": f.id,
                    ":status": f.status.as_str(),
                    ":finished_ms": f.finished_ms,
                    ":steps": f.steps,
                    ":input": to_i64(f.usage.input_tokens),
                    ":output": to_i64(f.usage.output_tokens),
                    ":cache_read": to_i64(f.usage.cache_read_tokens),
                    ":cache_write": to_i64(f.usage.cache_write_tokens),
                    ":error_kind": f.error.as_ref().map(|e| e.kind.as_str()),
                    ":error_message": f.error.as_ref().map(|e| e.message.as_str()),
                })?;
            Ok(changed(n))
        }
        ConversationOp::Checkpoint { record: c, last_message_id } => {
            if let Some(id) = last_message_id {
                let current: bool = conn
                    .prepare_cached(
                        "SELECT EXISTS (SELECT 1 FROM messages WHERE conversation_id = ?1 AND seq = ?2 \
                         AND message_id = ?3)",
                    )?
                    .query_row(rusqlite::params![c.conversation_id, to_i64(c.seq) - 1, id], |r| r.get(0))?;
                if !current {
                    return Ok(0);
                }
            }
            let n = conn
                .prepare_cached(
                    "INSERT INTO checkpoints (conversation_id, seq, run_id, version, created_ms, state) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (conversation_id, seq) DO UPDATE SET \
                     run_id = excluded.run_id, version = excluded.version, created_ms = excluded.created_ms, \
                     state = excluded.state",
                )?
                .execute(rusqlite::params![
                    c.conversation_id,
                    to_i64(c.seq),
                    c.run_id,
                    c.version,
                    c.created_ms,
                    c.state
                ])?;
            Ok(changed(n))
        }
        ConversationOp::AddPending { conversation_id, entries, created_ms } => {
            add_pending(conn, conversation_id, entries, *created_ms)
        }
        ConversationOp::AckedBlobs { conversation_id, added, removed, acked_ms } => {
            acked_blobs(conn, conversation_id, added, removed, *acked_ms)
        }
        ConversationOp::Reasoning { record, expire_before_ms } => remember_reasoning(conn, record, *expire_before_ms),
    }
}

fn remember_reasoning(
    conn: &Connection,
    r: &crate::model::ReasoningRecord,
    expire_before_ms: i64,
) -> rusqlite::Result<u64> {
    conn.prepare_cached("DELETE FROM reasoning_memory WHERE created_ms < ?1")?.execute([expire_before_ms])?;
    let mut n = 0;
    for id in &r.tool_call_ids {
        n += conn
            .prepare_cached(
                "INSERT INTO reasoning_memory (tool_call_id, provider, parts, created_ms) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (tool_call_id, provider) DO UPDATE SET parts = excluded.parts, created_ms = excluded.created_ms",
            )?
            .execute(rusqlite::params![id, r.provider, r.parts, r.created_ms])?;
    }
    Ok(changed(n))
}

/// The remembered reasoning since `since_ms`, oldest first, one record per tool call.
pub(crate) fn reasoning_since(
    conn: &Connection,
    since_ms: i64,
) -> rusqlite::Result<Vec<crate::model::ReasoningRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT tool_call_id, provider, parts, created_ms FROM reasoning_memory WHERE created_ms >= ?1 \
         ORDER BY created_ms, tool_call_id",
    )?;
    let rows = stmt.query_map([since_ms], |row| {
        Ok(crate::model::ReasoningRecord {
            tool_call_ids: vec![row.get(0)?],
            provider: row.get(1)?,
            parts: row.get(2)?,
            created_ms: row.get(3)?,
        })
    })?;
    rows.collect()
}

/// Marks `running` runs of earlier processes `interrupted` (start-up).
pub(crate) fn interrupt_stale_runs(conn: &Connection, epoch: i64) -> rusqlite::Result<u64> {
    let n = conn
        .prepare_cached(
            "UPDATE runs SET status = 'interrupted', finished_ms = ?1, error_kind = 'interrupted', \
             error_message = 'Keyhaven stopped before this run finished' \
             WHERE status = 'running' AND process_epoch < ?1",
        )?
        .execute([epoch])?;
    Ok(changed(n))
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// The conversation's messages in order.
pub(crate) fn messages(conn: &Connection, conversation_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, message_id, run_id, role, content FROM messages WHERE conversation_id = ?1 ORDER BY seq",
    )?;
    let rows = stmt.query_map([conversation_id], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, Option<String>>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, String>(4)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (seq, id, run_id, role, content) = row?;
        let role = serde_json::from_value(serde_json::Value::String(role.clone()))
            .map_err(|_| StoreError::Corrupt(format!("message {id}: unknown role `{role}`")))?;
        let content = serde_json::from_str(&content)
            .map_err(|e| StoreError::Corrupt(format!("message {id}: content does not decode: {e}")))?;
        out.push(StoredMessage { seq: to_u64(seq), run_id, entry: Entry { id, message: Message { role, content } } });
    }
    Ok(out)
}

/// The conversation's runs, oldest first.
pub(crate) fn runs(conn: &Connection, conversation_id: &str) -> Result<Vec<RunRecord>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, conversation_id, model, status, started_ms, finished_ms, steps, input_tokens, output_tokens, \
         cache_read_tokens, cache_write_tokens, error_kind FROM runs WHERE conversation_id = ?1 \
         ORDER BY started_ms, id",
    )?;
    let rows = stmt.query_map([conversation_id], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, i64>(4)?,
            r.get::<_, Option<i64>>(5)?,
            r.get::<_, i64>(6)?,
            [r.get::<_, i64>(7)?, r.get::<_, i64>(8)?, r.get::<_, i64>(9)?, r.get::<_, i64>(10)?],
            r.get::<_, Option<String>>(11)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, conversation_id, model, status, started_ms, finished_ms, steps, t, error_kind) = row?;
        let status =
            RunStatus::parse(&status).ok_or_else(|| StoreError::Corrupt(format!("run {id}: status `{status}`")))?;
        out.push(RunRecord {
            id,
            conversation_id,
            model,
            status,
            started_ms,
            finished_ms,
            steps: u32::try_from(steps).unwrap_or(0),
            usage: Usage {
                input_tokens: to_u64(t[0]),
                output_tokens: to_u64(t[1]),
                cache_read_tokens: to_u64(t[2]),
                cache_write_tokens: to_u64(t[3]),
                reasoning_tokens: 0,
            },
            error_kind,
        });
    }
    Ok(out)
}

/// The run's tool rounds, by step.
pub(crate) fn tool_rounds(conn: &Connection, run_id: &str) -> Result<Vec<ToolRoundRecord>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT run_id, step, started_ms, finished_ms, calls, failed, status FROM tool_rounds \
         WHERE run_id = ?1 ORDER BY step",
    )?;
    let rows = stmt.query_map([run_id], |r| {
        Ok(ToolRoundRecord {
            run_id: r.get(0)?,
            step: r.get(1)?,
            started_ms: r.get(2)?,
            finished_ms: r.get(3)?,
            calls: r.get(4)?,
            failed: r.get(5)?,
            status: r.get(6)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The newest checkpoint of the conversation.
pub(crate) fn latest_checkpoint(
    conn: &Connection,
    conversation_id: &str,
) -> Result<Option<CheckpointRecord>, StoreError> {
    let row = conn
        .prepare_cached(
            "SELECT conversation_id, seq, run_id, version, created_ms, state FROM checkpoints \
             WHERE conversation_id = ?1 ORDER BY seq DESC LIMIT 1",
        )?
        .query_row([conversation_id], |r| {
            Ok(CheckpointRecord {
                conversation_id: r.get(0)?,
                seq: to_u64(r.get(1)?),
                run_id: r.get(2)?,
                version: r.get(3)?,
                created_ms: r.get(4)?,
                state: r.get(5)?,
            })
        })
        .optional()?;
    Ok(row)
}

/// The messages pending for the conversation's next run, in delivery order (without those the
/// transcript already holds).
pub(crate) fn pending_messages(conn: &Connection, conversation_id: &str) -> Result<Vec<Entry>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT p.message_id, p.role, p.content FROM pending_messages p WHERE p.conversation_id = ?1 \
         AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = ?1 AND m.message_id = p.message_id) \
         ORDER BY p.position",
    )?;
    let rows = stmt.query_map([conversation_id], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, role, content) = row?;
        let role = serde_json::from_value(serde_json::Value::String(role.clone()))
            .map_err(|_| StoreError::Corrupt(format!("pending message {id}: unknown role `{role}`")))?;
        let content = serde_json::from_str(&content)
            .map_err(|e| StoreError::Corrupt(format!("pending message {id}: content does not decode: {e}")))?;
        out.push(Entry { id, message: Message { role, content } });
    }
    Ok(out)
}

/// The blob ids the conversation's client acknowledged.
pub(crate) fn acked_blob_ids(conn: &Connection, conversation_id: &str) -> Result<Vec<Vec<u8>>, StoreError> {
    let mut stmt =
        conn.prepare_cached("SELECT blob_id FROM acked_blobs WHERE conversation_id = ?1 ORDER BY blob_id")?;
    let rows = stmt.query_map([conversation_id], |r| r.get::<_, Vec<u8>>(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
