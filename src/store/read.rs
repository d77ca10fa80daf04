//! Read queries and the row types they return. Each runs as one short statement on the read-only
//! connection.

use rusqlite::types::{Type, Value};
use rusqlite::{Connection, OptionalExtension, Row, params_from_iter};
use serde::Serialize;

use crate::model::{CallStatus, CostSource, Usage};
use crate::store::StoreError;

/// Rows returned by [`CallFilter`] when its `limit` is 0.
pub const DEFAULT_LIMIT: u32 = 100;
/// The most rows one [`CallFilter`] query returns.
pub const MAX_LIMIT: u32 = 1000;

/// Usage of one model on one UTC day, summed over providers and clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsageRow {
    /// `YYYY-MM-DD`, UTC, of the calls' start.
    pub day: String,
    /// The model name the clients asked for.
    pub model: String,
    pub calls: u64,
    /// Calls that ended `error` or `interrupted`.
    pub errors: u64,
    pub usage: Usage,
    /// Micro-USD; calls without a known cost count as 0.
    pub cost_micros: i64,
    pub total_ms_sum: i64,
}

/// Usage summed over every day from `since_day`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct UsageTotals {
    pub calls: u64,
    pub errors: u64,
    pub usage: Usage,
    pub cost_micros: i64,
    pub total_ms_sum: i64,
}

/// Upper bounds (inclusive, ms) of the latency histogram buckets in `latency_daily`; one more
/// bucket holds everything slower than the last bound.
pub const LATENCY_BOUNDS_MS: [i64; 22] = [
    50, 100, 200, 300, 500, 750, 1_000, 1_500, 2_000, 3_000, 5_000, 7_500, 10_000, 15_000, 20_000, 30_000, 45_000,
    60_000, 120_000, 300_000, 600_000, 1_800_000,
];

/// What usage rows are grouped by (every group sums over the others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageGroup {
    Day,
    Model,
    Provider,
    Client,
}

impl UsageGroup {
    fn column(self) -> &'static str {
        match self {
            UsageGroup::Day => "day",
            UsageGroup::Model => "model",
            UsageGroup::Provider => "provider",
            UsageGroup::Client => "client",
        }
    }
}

/// Usage of one group (a day, model, provider or client) summed over a day range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsageGroupRow {
    /// The day (`YYYY-MM-DD`), model, provider or client; `''` when unknown.
    pub key: String,
    pub calls: u64,
    pub errors: u64,
    pub usage: Usage,
    pub cost_micros: i64,
    pub total_ms_sum: i64,
}

/// Usage of one group (a model, provider or client) on one UTC day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsageSplitRow {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    /// The model, provider or client; `''` when unknown.
    pub key: String,
    pub calls: u64,
    pub errors: u64,
    pub usage: Usage,
    pub cost_micros: i64,
    pub total_ms_sum: i64,
}

/// The latency histogram of one group (or of everything, with an empty key, when the query was
/// ungrouped): `counts[i]` calls fell in bucket `i` of [`LATENCY_BOUNDS_MS`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LatencyHistogram {
    pub key: String,
    pub counts: Vec<u64>,
}

/// Which calls [`Store::recent_calls`](crate::store::Store::recent_calls) lists, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallFilter {
    /// 0 means [`DEFAULT_LIMIT`]; capped at [`MAX_LIMIT`].
    pub limit: u32,
    pub offset: u32,
    pub model: Option<String>,
    pub status: Option<CallStatus>,
    pub client: Option<String>,
    pub provider: Option<String>,
    /// Only calls started at or after this time.
    pub since_ms: Option<i64>,
    /// Only the calls of this front-end conversation.
    pub conversation_id: Option<String>,
    /// Only the calls of this client session.
    pub session_id: Option<String>,
}

/// One call without its bodies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallSummary {
    pub id: String,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
    pub status: CallStatus,
    pub dialect: String,
    pub client: String,
    pub model: String,
    pub model_id: Option<String>,
    pub provider: Option<String>,
    pub upstream_model: Option<String>,
    pub stream: bool,
    pub http_status: Option<u16>,
    pub usage: Usage,
    pub usage_estimated: bool,
    pub cost_micros: Option<i64>,
    pub price_version: Option<String>,
    pub ttft_ms: Option<i64>,
    pub total_ms: Option<i64>,
    pub retries: u32,
    pub error_kind: Option<String>,
    pub error_message: Option<String>,
    pub conversation_id: Option<String>,
    pub request_id: Option<String>,
    /// The client's own session (Claude Code, Codex), when it sent one.
    pub session_id: Option<String>,
    /// The cheaper model or group a budget sent the call to (`model` is what the client asked for).
    pub budget_downgrade: Option<String>,
    /// Where the usage and cost came from (`None`: in flight, or nothing to count).
    pub cost_source: Option<CostSource>,
}

/// One call with its captured bodies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallDetail {
    #[serde(flatten)]
    pub summary: CallSummary,
    pub request_body: Option<String>,
    pub response_body: Option<String>,
    /// The epoch of the process that recorded the start (`None` when the start was lost).
    pub process_epoch: Option<i64>,
    /// What Keyhaven changed about the call that the user should know (e.g. a server tool the
    /// upstream cannot run, left out); the `notes` column, a JSON list.
    pub notes: Vec<String>,
    /// The context blocks of the agent run the call belongs to (its `request_id`), if recorded.
    pub context_blocks: Vec<ContextBlock>,
}

/// One block of context that went into an agent run's prompt (a Cursor attachment): its kind
/// (`file`, `selection`, `rule`, `image`, …), where it came from (path, URL or name; may be
/// empty) and its size in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ContextBlock {
    pub kind: String,
    pub source: String,
    pub bytes: u64,
}

const SUMMARY_COLUMNS: &str = "id, started_ms, finished_ms, status, dialect, client, model, model_id, provider, \
     upstream_model, stream, http_status, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, \
     reasoning_tokens, usage_estimated, cost_micros, price_version, ttft_ms, total_ms, retries, error_kind, \
     error_message, conversation_id, request_id, session_id, budget_downgrade, cost_source";

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn usage_at(row: &Row<'_>, first: usize) -> rusqlite::Result<Usage> {
    Ok(Usage {
        input_tokens: to_u64(row.get(first)?),
        output_tokens: to_u64(row.get(first + 1)?),
        cache_read_tokens: to_u64(row.get(first + 2)?),
        cache_write_tokens: to_u64(row.get(first + 3)?),
        reasoning_tokens: to_u64(row.get(first + 4)?),
    })
}

fn summary_from_row(row: &Row<'_>) -> rusqlite::Result<CallSummary> {
    let status: String = row.get(3)?;
    let status = CallStatus::parse(&status).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            3,
            Type::Text,
            Box::new(StoreError::Corrupt(format!("unknown call status {status:?}"))),
        )
    })?;
    let http_status: Option<i64> = row.get(11)?;
    let retries: i64 = row.get(22)?;
    Ok(CallSummary {
        id: row.get(0)?,
        started_ms: row.get(1)?,
        finished_ms: row.get(2)?,
        status,
        dialect: row.get(4)?,
        client: row.get(5)?,
        model: row.get(6)?,
        model_id: row.get(7)?,
        provider: row.get(8)?,
        upstream_model: row.get(9)?,
        stream: row.get(10)?,
        http_status: http_status.and_then(|s| u16::try_from(s).ok()),
        usage: usage_at(row, 12)?,
        usage_estimated: row.get(17)?,
        cost_micros: row.get(18)?,
        price_version: row.get(19)?,
        ttft_ms: row.get(20)?,
        total_ms: row.get(21)?,
        retries: u32::try_from(retries).unwrap_or(u32::MAX),
        error_kind: row.get(23)?,
        error_message: row.get(24)?,
        conversation_id: row.get(25)?,
        request_id: row.get(26)?,
        session_id: row.get(27)?,
        budget_downgrade: row.get(28)?,
        cost_source: row.get::<_, Option<String>>(29)?.as_deref().and_then(CostSource::parse),
    })
}

pub(crate) fn recent_calls(conn: &Connection, filter: &CallFilter) -> Result<Vec<CallSummary>, StoreError> {
    let mut sql = format!("SELECT {SUMMARY_COLUMNS} FROM calls WHERE 1");
    let mut params: Vec<Value> = Vec::new();
    if let Some(model) = &filter.model {
        sql.push_str(" AND model = ?");
        params.push(Value::Text(model.clone()));
    }
    if let Some(status) = filter.status {
        sql.push_str(" AND status = ?");
        params.push(Value::Text(status.as_str().to_owned()));
    }
    if let Some(client) = &filter.client {
        sql.push_str(" AND client = ?");
        params.push(Value::Text(client.clone()));
    }
    if let Some(provider) = &filter.provider {
        sql.push_str(" AND provider = ?");
        params.push(Value::Text(provider.clone()));
    }
    if let Some(conversation) = &filter.conversation_id {
        sql.push_str(" AND conversation_id = ?");
        params.push(Value::Text(conversation.clone()));
    }
    if let Some(session) = &filter.session_id {
        sql.push_str(" AND session_id = ?");
        params.push(Value::Text(session.clone()));
    }
    if let Some(since) = filter.since_ms {
        sql.push_str(" AND started_ms >= ?");
        params.push(Value::Integer(since));
    }
    sql.push_str(" ORDER BY started_ms DESC, id DESC LIMIT ? OFFSET ?");
    let limit = if filter.limit == 0 { DEFAULT_LIMIT } else { filter.limit.min(MAX_LIMIT) };
    params.push(Value::Integer(i64::from(limit)));
    params.push(Value::Integer(i64::from(filter.offset)));
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map(params_from_iter(params), summary_from_row)?.collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

pub(crate) fn call_detail(conn: &Connection, id: &str) -> Result<Option<CallDetail>, StoreError> {
    let sql =
        format!("SELECT {SUMMARY_COLUMNS}, request_body, response_body, process_epoch, notes FROM calls WHERE id = ?1");
    let detail = conn
        .prepare_cached(&sql)?
        .query_row([id], |row| {
            Ok(CallDetail {
                summary: summary_from_row(row)?,
                request_body: row.get(30)?,
                response_body: row.get(31)?,
                process_epoch: row.get(32)?,
                notes: notes_of(row.get(33)?),
                context_blocks: Vec::new(),
            })
        })
        .optional()?;
    let Some(mut detail) = detail else { return Ok(None) };
    if let Some(run_id) = detail.summary.request_id.as_deref() {
        let json: Option<String> = conn
            .prepare_cached("SELECT blocks FROM run_context_blocks WHERE run_id = ?1")?
            .query_row([run_id], |r| r.get(0))
            .optional()?;
        // A list this build cannot read is shown as none rather than failing the call's page.
        detail.context_blocks = json.and_then(|j| serde_json::from_str(&j).ok()).unwrap_or_default();
    }
    Ok(Some(detail))
}

/// The `notes` column: a JSON list of strings (a value that is not one reads as one note).
fn notes_of(raw: Option<String>) -> Vec<String> {
    raw.map(|t| serde_json::from_str(&t).unwrap_or_else(|_| vec![t])).unwrap_or_default()
}

pub(crate) fn count_calls(conn: &Connection) -> Result<u64, StoreError> {
    let n: i64 = conn.query_row("SELECT COUNT(*) FROM calls", [], |r| r.get(0))?;
    Ok(to_u64(n))
}

pub(crate) fn usage_by_day(conn: &Connection, since_day: &str) -> Result<Vec<UsageRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT day, model, SUM(calls), SUM(errors), SUM(input_tokens), SUM(output_tokens), \
         SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(reasoning_tokens), SUM(cost_micros), \
         SUM(total_ms_sum) \
         FROM usage_daily WHERE day >= ?1 GROUP BY day, model ORDER BY day, model",
    )?;
    let rows = stmt
        .query_map([since_day], |row| {
            Ok(UsageRow {
                day: row.get(0)?,
                model: row.get(1)?,
                calls: to_u64(row.get(2)?),
                errors: to_u64(row.get(3)?),
                usage: usage_at(row, 4)?,
                cost_micros: row.get(9)?,
                total_ms_sum: row.get(10)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

pub(crate) fn usage_totals(conn: &Connection, since_day: &str) -> Result<UsageTotals, StoreError> {
    let totals = conn
        .prepare_cached(
            "SELECT COALESCE(SUM(calls), 0), COALESCE(SUM(errors), 0), COALESCE(SUM(input_tokens), 0), \
         COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), \
         COALESCE(SUM(reasoning_tokens), 0), COALESCE(SUM(cost_micros), 0), COALESCE(SUM(total_ms_sum), 0) \
         FROM usage_daily WHERE day >= ?1",
        )?
        .query_row([since_day], |row| {
            Ok(UsageTotals {
                calls: to_u64(row.get(0)?),
                errors: to_u64(row.get(1)?),
                usage: usage_at(row, 2)?,
                cost_micros: row.get(7)?,
                total_ms_sum: row.get(8)?,
            })
        })?;
    Ok(totals)
}

/// Usage per group over the days `since_day..=until_day` (`YYYY-MM-DD`), ordered by key. Reads
/// only `usage_daily`.
pub(crate) fn usage_grouped(
    conn: &Connection,
    since_day: &str,
    until_day: &str,
    group: UsageGroup,
) -> Result<Vec<UsageGroupRow>, StoreError> {
    let col = group.column();
    let sql = format!(
        "SELECT {col}, SUM(calls), SUM(errors), SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens), \
         SUM(cache_write_tokens), SUM(reasoning_tokens), SUM(cost_micros), SUM(total_ms_sum) \
         FROM usage_daily WHERE day >= ?1 AND day <= ?2 GROUP BY {col} ORDER BY {col}"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt
        .query_map([since_day, until_day], |row| {
            Ok(UsageGroupRow {
                key: row.get(0)?,
                calls: to_u64(row.get(1)?),
                errors: to_u64(row.get(2)?),
                usage: usage_at(row, 3)?,
                cost_micros: row.get(8)?,
                total_ms_sum: row.get(9)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Usage rows per group, latency histograms per group, and the latency histogram over all.
pub type UsageBetween = (Vec<UsageGroupRow>, Vec<LatencyHistogram>, Vec<LatencyHistogram>);

/// Usage per group of the finished calls started in `since_ms..until_ms`, counted as in
/// `usage_daily` (errors are `error` and `interrupted`), with the latency histograms per group
/// and over all (the Overview's "Today" in the user's zone, which the UTC-day rollups cannot
/// give; through the `started_ms` index). `UsageGroup::Day` groups everything under `''`.
pub(crate) fn usage_between(
    conn: &Connection,
    since_ms: i64,
    until_ms: i64,
    group: UsageGroup,
) -> Result<UsageBetween, StoreError> {
    let col = match group {
        UsageGroup::Day => "''",
        UsageGroup::Provider => "COALESCE(provider, '')",
        g => g.column(),
    };
    let finished = "started_ms >= ?1 AND started_ms < ?2 AND status != 'in_flight'";
    let sql = format!(
        "SELECT {col} AS k, COUNT(*), SUM(status IN ('error', 'interrupted')), SUM(input_tokens), SUM(output_tokens), \
         SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(reasoning_tokens), SUM(COALESCE(cost_micros, 0)), \
         SUM(COALESCE(total_ms, 0)) FROM calls WHERE {finished} GROUP BY k ORDER BY k"
    );
    let rows = conn
        .prepare_cached(&sql)?
        .query_map([since_ms, until_ms], |row| {
            Ok(UsageGroupRow {
                key: row.get(0)?,
                calls: to_u64(row.get(1)?),
                errors: to_u64(row.get(2)?),
                usage: usage_at(row, 3)?,
                cost_micros: row.get(8)?,
                total_ms_sum: row.get(9)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let hists = |key: &str| -> Result<Vec<LatencyHistogram>, StoreError> {
        let sql = format!(
            "SELECT {key} AS k, {} AS b, COUNT(*) FROM calls WHERE {finished} AND total_ms IS NOT NULL \
             GROUP BY k, b ORDER BY k, b",
            crate::store::writer::bucket_expr()
        );
        let found: Vec<(String, i64, i64)> = conn
            .prepare_cached(&sql)?
            .query_map([since_ms, until_ms], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(fold_histograms(found))
    };
    Ok((rows, hists(col)?, hists("''")?))
}

/// Usage per day and group over the days `since_day..=until_day`, ordered by day, then key.
/// Reads only `usage_daily`. `group` is a column other than the day.
pub(crate) fn usage_split(
    conn: &Connection,
    since_day: &str,
    until_day: &str,
    group: UsageGroup,
) -> Result<Vec<UsageSplitRow>, StoreError> {
    let col = group.column();
    let sql = format!(
        "SELECT day, {col}, SUM(calls), SUM(errors), SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens), \
         SUM(cache_write_tokens), SUM(reasoning_tokens), SUM(cost_micros), SUM(total_ms_sum) \
         FROM usage_daily WHERE day >= ?1 AND day <= ?2 GROUP BY day, {col} ORDER BY day, {col}"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt
        .query_map([since_day, until_day], |row| {
            Ok(UsageSplitRow {
                day: row.get(0)?,
                key: row.get(1)?,
                calls: to_u64(row.get(2)?),
                errors: to_u64(row.get(3)?),
                usage: usage_at(row, 4)?,
                cost_micros: row.get(9)?,
                total_ms_sum: row.get(10)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Latency histograms over the days `since_day..=until_day`: one per group, or a single one with
/// an empty key when `group` is `None`. Reads only `latency_daily` (bounded by days × keys ×
/// buckets, never by the number of calls).
pub(crate) fn latency_histograms(
    conn: &Connection,
    since_day: &str,
    until_day: &str,
    group: Option<UsageGroup>,
) -> Result<Vec<LatencyHistogram>, StoreError> {
    let key = group.map_or("''", UsageGroup::column);
    let sql = format!(
        "SELECT {key}, bucket, SUM(calls) FROM latency_daily WHERE day >= ?1 AND day <= ?2 \
         GROUP BY {key}, bucket ORDER BY {key}, bucket"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows: Vec<(String, i64, i64)> = stmt
        .query_map([since_day, until_day], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(fold_histograms(rows))
}

/// `(key, bucket, calls)` rows ordered by key, then bucket → one histogram per key.
fn fold_histograms(rows: Vec<(String, i64, i64)>) -> Vec<LatencyHistogram> {
    let mut out: Vec<LatencyHistogram> = Vec::new();
    for (key, bucket, calls) in rows {
        if out.last().is_none_or(|h| h.key != key) {
            out.push(LatencyHistogram { key, counts: vec![0; LATENCY_BOUNDS_MS.len() + 1] });
        }
        let idx = usize::try_from(bucket).unwrap_or(usize::MAX).min(LATENCY_BOUNDS_MS.len());
        if let Some(h) = out.last_mut() {
            h.counts[idx] += to_u64(calls);
        }
    }
    out
}

/// One client session's calls, summed ([`Store::sessions`](crate::store::Store::sessions)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionRow {
    pub session_id: String,
    /// The client of the session's latest call.
    pub client: String,
    pub calls: u64,
    pub errors: u64,
    pub usage: Usage,
    pub cost_micros: i64,
    pub first_ms: i64,
    pub last_ms: i64,
}

/// Calls grouped by client session, most recently active first: sessions with a call started at
/// or after `since_ms`, at most `limit` (0 means [`DEFAULT_LIMIT`], capped at [`MAX_LIMIT`]).
/// Reads `calls` through its `session_id` index.
pub(crate) fn sessions(conn: &Connection, since_ms: i64, limit: u32) -> Result<Vec<SessionRow>, StoreError> {
    let limit = if limit == 0 { DEFAULT_LIMIT } else { limit.min(MAX_LIMIT) };
    let mut stmt = conn.prepare_cached(
        "SELECT session_id, \
         (SELECT c2.client FROM calls c2 WHERE c2.session_id = calls.session_id ORDER BY c2.started_ms DESC LIMIT 1), \
         COUNT(*), SUM(status = 'error'), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), \
         COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), \
         COALESCE(SUM(reasoning_tokens), 0), COALESCE(SUM(cost_micros), 0), MIN(started_ms), MAX(started_ms) \
         FROM calls WHERE session_id IS NOT NULL GROUP BY session_id HAVING MAX(started_ms) >= ?1 \
         ORDER BY MAX(started_ms) DESC, session_id LIMIT ?2",
    )?;
    let rows = stmt
        .query_map(rusqlite::params![since_ms, i64::from(limit)], |row| {
            Ok(SessionRow {
                session_id: row.get(0)?,
                client: row.get(1)?,
                calls: to_u64(row.get(2)?),
                errors: to_u64(row.get(3)?),
                usage: usage_at(row, 4)?,
                cost_micros: row.get(9)?,
                first_ms: row.get(10)?,
                last_ms: row.get(11)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Spend of the calls started at or after `since_ms` (finished ones; a call in flight has no cost
/// yet), one row per client, provider, routed model and model id: the budgets' seed. Reads
/// `calls` through its `started_ms` index; a budget downgrade counts as the model it went to.
pub(crate) fn spend_since(conn: &Connection, since_ms: i64) -> Result<Vec<crate::model::SpendRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT client, provider, COALESCE(budget_downgrade, model), model_id, SUM(cost_micros) \
         FROM calls WHERE started_ms >= ?1 AND cost_micros > 0 \
         GROUP BY client, provider, COALESCE(budget_downgrade, model), model_id",
    )?;
    let rows = stmt
        .query_map([since_ms], |row| {
            Ok(crate::model::SpendRow {
                client: row.get(0)?,
                provider: row.get(1)?,
                model: row.get(2)?,
                model_id: row.get(3)?,
                cost_micros: to_u64(row.get(4)?),
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Budget alerts of periods that started at or after `since_ms`, oldest first.
pub(crate) fn budget_alerts_since(
    conn: &Connection,
    since_ms: i64,
) -> Result<Vec<crate::model::BudgetAlert>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT budget, level, period_start_ms, reset_ms, spent_micros, limit_micros, at_ms \
         FROM budget_alerts WHERE period_start_ms >= ?1 ORDER BY at_ms",
    )?;
    let rows = stmt
        .query_map([since_ms], |row| {
            let level: String = row.get(1)?;
            Ok((
                level,
                crate::model::BudgetAlert {
                    budget: row.get(0)?,
                    level: crate::model::AlertLevel::Soft,
                    period_start_ms: row.get(2)?,
                    reset_ms: row.get(3)?,
                    spent_micros: to_u64(row.get(4)?),
                    limit_micros: to_u64(row.get(5)?),
                    at_ms: row.get(6)?,
                },
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows
        .into_iter()
        .filter_map(|(level, mut a)| {
            a.level = crate::model::AlertLevel::parse(&level)?;
            Some(a)
        })
        .collect())
}

/// Calls and cost by where the cost came from ([`Store::cost_sources`](crate::store::Store::cost_sources)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CostSourceRow {
    /// `None`: nothing to count (the provider never accepted the call, token counts).
    pub source: Option<CostSource>,
    pub calls: u64,
    pub cost_micros: i64,
}

/// Finished calls started in `since_ms..until_ms`, by cost source (reads `calls` through its
/// `started_ms` index: only the calls retention kept).
pub(crate) fn cost_sources(conn: &Connection, since_ms: i64, until_ms: i64) -> Result<Vec<CostSourceRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT cost_source, COUNT(*), COALESCE(SUM(cost_micros), 0) FROM calls \
         WHERE started_ms >= ?1 AND started_ms < ?2 AND status <> 'in_flight' \
         GROUP BY cost_source ORDER BY cost_source",
    )?;
    let rows = stmt
        .query_map([since_ms, until_ms], |row| {
            Ok(CostSourceRow {
                source: row.get::<_, Option<String>>(0)?.as_deref().and_then(CostSource::parse),
                calls: to_u64(row.get(1)?),
                cost_micros: row.get(2)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// One page of the calls started in `since_ms..until_ms`, oldest first, after the call
/// `(started_ms, id)` when given (keyset paging, for exports of any length). Without bodies.
pub(crate) fn calls_page(
    conn: &Connection,
    since_ms: i64,
    until_ms: i64,
    after: Option<(i64, String)>,
    limit: u32,
) -> Result<Vec<CallSummary>, StoreError> {
    let (after_ms, after_id) = after.unwrap_or((i64::MIN, String::new()));
    let sql = format!(
        "SELECT {SUMMARY_COLUMNS} FROM calls WHERE started_ms >= ?1 AND started_ms < ?2 \
         AND (started_ms > ?3 OR (started_ms = ?3 AND id > ?4)) ORDER BY started_ms, id LIMIT ?5"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let limit = i64::from(limit.clamp(1, MAX_LIMIT));
    let rows = stmt
        .query_map(rusqlite::params![since_ms, until_ms, after_ms, after_id, limit], summary_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// One `usage_daily` row: a UTC day, model, provider and client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsageDailyRow {
    pub day: String,
    pub model: String,
    /// `''` when unknown.
    pub provider: String,
    pub client: String,
    pub calls: u64,
    pub errors: u64,
    pub usage: Usage,
    pub cost_micros: i64,
    pub total_ms_sum: i64,
}

/// The `usage_daily` rows of `since_day..=until_day`, ordered by day, model, provider, client.
pub(crate) fn usage_daily(
    conn: &Connection,
    since_day: &str,
    until_day: &str,
) -> Result<Vec<UsageDailyRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT day, model, provider, client, calls, errors, input_tokens, output_tokens, cache_read_tokens, \
         cache_write_tokens, reasoning_tokens, cost_micros, total_ms_sum FROM usage_daily \
         WHERE day >= ?1 AND day <= ?2 ORDER BY day, model, provider, client",
    )?;
    let rows = stmt
        .query_map([since_day, until_day], |row| {
            Ok(UsageDailyRow {
                day: row.get(0)?,
                model: row.get(1)?,
                provider: row.get(2)?,
                client: row.get(3)?,
                calls: to_u64(row.get(4)?),
                errors: to_u64(row.get(5)?),
                usage: usage_at(row, 6)?,
                cost_micros: row.get(11)?,
                total_ms_sum: row.get(12)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}
