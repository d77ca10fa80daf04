//! Schema migrations: numbered SQL files embedded in the binary, applied in order under
//! `PRAGMA user_version`, each in its own transaction.

use rusqlite::{Connection, TransactionBehavior};

use crate::store::StoreError;

/// Migration `n` (1-based) is `MIGRATIONS[n - 1]`; after it, `user_version` is `n`.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_create_calls.sql"),
    include_str!("migrations/0002_create_usage_daily.sql"),
    include_str!("migrations/0003_create_latency_daily.sql"),
    include_str!("migrations/0004_create_agent_transcripts.sql"),
    include_str!("migrations/0005_add_call_conversation.sql"),
    include_str!("migrations/0006_create_pending_and_acked_blobs.sql"),
    include_str!("migrations/0007_add_call_session.sql"),
    include_str!("migrations/0008_create_reasoning_memory.sql"),
    include_str!("migrations/0009_add_call_notes.sql"),
    include_str!("migrations/0010_add_call_cost_source.sql"),
    include_str!("migrations/0011_add_call_budget_downgrade.sql"),
    include_str!("migrations/0012_create_run_context_blocks.sql"),
    include_str!("migrations/0013_create_cursor_versions.sql"),
    include_str!("migrations/0014_create_budget_alerts.sql"),
];

/// The newest schema version this build knows.
pub(crate) fn supported_version() -> i64 {
    i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX)
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

/// Brings the database up to [`supported_version`]. Refuses a database from a newer build.
pub(crate) fn migrate(conn: &mut Connection, path: &str) -> Result<(), StoreError> {
    let supported = supported_version();
    let too_new = |found| StoreError::SchemaTooNew { path: path.to_owned(), found, supported };
    let found = user_version(conn)?;
    if found > supported {
        return Err(too_new(found));
    }
    for (version, sql) in (1..).zip(MIGRATIONS) {
        if version <= found {
            continue;
        }
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Another process may have migrated between our check and the lock.
        let now = user_version(&tx)?;
        if now > supported {
            return Err(too_new(now));
        }
        if now >= version {
            continue;
        }
        tx.execute_batch(sql).map_err(|e| StoreError::Migration { version, message: e.to_string() })?;
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
        tracing::info!(version, path, "applied store migration");
    }
    Ok(())
}
