//! The Cursor versions seen and the update guard's self-test result for each (table
//! `cursor_versions`, migration 0013). Written through the writer like every other row
//! ([`crate::store::ConversationOp::CursorVersion`]), read with [`crate::store::Store::cursor_versions`].

use rusqlite::Connection;
use serde::{Deserialize, Serialize};

/// One Cursor version: when it was first and last seen, and its self-test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CursorVersionRow {
    pub version: String,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
    /// `running`, `passed` or `failed`; `None`: never tested.
    pub test_status: Option<String>,
    /// The step that failed (`model_list`, `text_turn`, `tool_round`).
    pub failed_step: Option<String>,
    /// What the failed step saw.
    pub detail: Option<String>,
    /// When the last self-test ended (or started, while it runs).
    pub tested_ms: Option<i64>,
}

/// Upserts the whole row (first seen is kept from an existing row, last seen only grows).
pub(crate) fn upsert(conn: &Connection, row: &CursorVersionRow) -> rusqlite::Result<u64> {
    let n = conn
        .prepare_cached(
            "INSERT INTO cursor_versions (version, first_seen_ms, last_seen_ms, test_status, failed_step, detail, tested_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (version) DO UPDATE SET \
             first_seen_ms = MIN(first_seen_ms, excluded.first_seen_ms), \
             last_seen_ms = MAX(last_seen_ms, excluded.last_seen_ms), \
             test_status = excluded.test_status, failed_step = excluded.failed_step, \
             detail = excluded.detail, tested_ms = excluded.tested_ms",
        )?
        .execute(rusqlite::params![
            row.version,
            row.first_seen_ms,
            row.last_seen_ms,
            row.test_status,
            row.failed_step,
            row.detail,
            row.tested_ms
        ])?;
    Ok(u64::try_from(n).unwrap_or(u64::MAX))
}

/// Every version seen, the most recently seen first.
pub(crate) fn all(conn: &Connection) -> rusqlite::Result<Vec<CursorVersionRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT version, first_seen_ms, last_seen_ms, test_status, failed_step, detail, tested_ms \
         FROM cursor_versions ORDER BY last_seen_ms DESC, version",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(CursorVersionRow {
            version: r.get(0)?,
            first_seen_ms: r.get(1)?,
            last_seen_ms: r.get(2)?,
            test_status: r.get(3)?,
            failed_step: r.get(4)?,
            detail: r.get(5)?,
            tested_ms: r.get(6)?,
        })
    })?;
    rows.collect()
}
