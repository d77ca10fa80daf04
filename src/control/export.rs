//! Usage and call exports (CSV or JSON) over a time window: what `keyhaven usage|calls
//! --csv|--json` prints and what the control API's downloads (`/api/usage/export`,
//! `/api/calls/export`) serve, from one code path.
//!
//! - Calls: one row per call started in the window, oldest first, read in keyset pages (any
//!   length). No request or response bodies, no keys: the columns are the ledger's metadata,
//!   usage, cost (exact decimal USD from the integer micro-dollars), its source and price
//!   version.
//! - Usage: the `usage_daily` rollup (one row per UTC day, model, provider and client) over the
//!   days the window touches.
//! - Bounds: `YYYY-MM-DD` (a UTC day: `since` from its start, `until` through its end) or RFC 3339
//!   (an instant; `until` is exclusive).
//! - CSV (the `csv` crate: RFC 4180 quoting) has a header row. A text cell that a spreadsheet
//!   would run as a formula (starting with `=`, `+`, `-`, `@`, tab or CR) gets a leading `'`.

use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::{Date, OffsetDateTime};

use crate::control::ControlError;
use crate::store::{CallSummary, Store, UsageDailyRow};

/// Rows read per page while exporting calls.
const PAGE: u32 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv,
    Json,
}

impl Format {
    pub fn parse(s: &str) -> Result<Format, ControlError> {
        match s {
            "csv" => Ok(Format::Csv),
            "json" => Ok(Format::Json),
            other => Err(ControlError::Invalid(format!("format: csv or json, not `{other}`"))),
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Csv => "text/csv; charset=utf-8",
            Format::Json => "application/json",
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Json => "json",
        }
    }
}

/// `since_ms..until_ms` (until exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub since_ms: i64,
    pub until_ms: i64,
}

fn date(s: &str) -> Option<Date> {
    Date::parse(s, time::macros::format_description!("[year]-[month]-[day]")).ok()
}

fn day_start_ms(d: Date) -> i64 {
    d.midnight().assume_utc().unix_timestamp().saturating_mul(1000)
}

/// A bound: a UTC day (`until` then means the end of that day) or an RFC 3339 instant.
pub fn parse_bound(s: &str, until: bool) -> Result<i64, ControlError> {
    let s = s.trim();
    if let Some(d) = date(s) {
        let d = if until { d.next_day().unwrap_or(d) } else { d };
        return Ok(day_start_ms(d));
    }
    let t = OffsetDateTime::parse(s, &Rfc3339).map_err(|_| {
        ControlError::Invalid(format!("`{s}`: a date (2026-11-30) or an RFC 3339 time (2026-11-30T09:00:00Z)"))
    })?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000)
        .map_err(|_| ControlError::Invalid(format!("`{s}`: out of range")))
}

impl Range {
    /// From optional bounds; a missing `since` is `default_since_ms`, a missing `until` is now
    /// (`now_ms`, exclusive, so a call starting this millisecond is in the next export).
    pub fn parse(
        since: Option<&str>,
        until: Option<&str>,
        default_since_ms: i64,
        now_ms: i64,
    ) -> Result<Range, ControlError> {
        let since_ms = since.map(|s| parse_bound(s, false)).transpose()?.unwrap_or(default_since_ms);
        let until_ms = until.map(|s| parse_bound(s, true)).transpose()?.unwrap_or(now_ms.saturating_add(1));
        if until_ms < since_ms {
            return Err(ControlError::Invalid("until is before since".into()));
        }
        Ok(Range { since_ms, until_ms })
    }

    /// The UTC days the window touches, `YYYY-MM-DD`, first and last.
    pub fn days(self) -> (String, String) {
        let day = |ms: i64| {
            OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
                .map_or_else(|_| "0000-01-01".to_owned(), |t| t.date().to_string())
        };
        (day(self.since_ms), day(self.until_ms.saturating_sub(1).max(self.since_ms)))
    }

    /// A file name for a download of `what` (`calls`, `usage`).
    pub fn file_name(self, what: &str, format: Format) -> String {
        let (since, until) = self.days();
        format!("keyhaven-{what}-{since}-to-{until}.{}", format.extension())
    }
}

/// `123_456_789` micro-USD as `123.456789`.
pub fn usd(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let m = micros.unsigned_abs();
    format!("{sign}{}.{:06}", m / 1_000_000, m % 1_000_000)
}

fn rfc3339(ms: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

/// One exported call: the ledger's columns without bodies.
#[derive(Debug, Clone, Serialize)]
pub struct CallRow {
    pub id: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub status: &'static str,
    pub dialect: String,
    pub client: String,
    pub model: String,
    pub model_id: Option<String>,
    pub provider: Option<String>,
    pub upstream_model: Option<String>,
    pub stream: bool,
    pub http_status: Option<u16>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
    pub cost_usd: Option<String>,
    pub cost_micros: Option<i64>,
    pub cost_source: Option<&'static str>,
    pub price_version: Option<String>,
    pub ttft_ms: Option<i64>,
    pub total_ms: Option<i64>,
    pub retries: u32,
    pub error_kind: Option<String>,
    pub error_message: Option<String>,
    pub conversation_id: Option<String>,
    pub request_id: Option<String>,
    pub session_id: Option<String>,
    /// The cheaper model or group a budget sent the call to (`model` is what the client asked for).
    pub budget_downgrade: Option<String>,
}

impl From<CallSummary> for CallRow {
    fn from(c: CallSummary) -> CallRow {
        CallRow {
            started_at: rfc3339(c.started_ms),
            finished_at: c.finished_ms.map(rfc3339),
            status: c.status.as_str(),
            id: c.id,
            dialect: c.dialect,
            client: c.client,
            model: c.model,
            model_id: c.model_id,
            provider: c.provider,
            upstream_model: c.upstream_model,
            stream: c.stream,
            http_status: c.http_status,
            input_tokens: c.usage.input_tokens,
            output_tokens: c.usage.output_tokens,
            cache_read_tokens: c.usage.cache_read_tokens,
            cache_write_tokens: c.usage.cache_write_tokens,
            reasoning_tokens: c.usage.reasoning_tokens,
            cost_usd: c.cost_micros.map(usd),
            cost_micros: c.cost_micros,
            cost_source: c.cost_source.map(crate::model::CostSource::as_str),
            price_version: c.price_version,
            ttft_ms: c.ttft_ms,
            total_ms: c.total_ms,
            retries: c.retries,
            error_kind: c.error_kind,
            error_message: c.error_message,
            conversation_id: c.conversation_id,
            request_id: c.request_id,
            session_id: c.session_id,
            budget_downgrade: c.budget_downgrade,
        }
    }
}

/// One exported `usage_daily` row.
#[derive(Debug, Clone, Serialize)]
pub struct UsageExportRow {
    pub day: String,
    pub model: String,
    pub provider: String,
    pub client: String,
    pub calls: u64,
    pub errors: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
    pub cost_usd: String,
    pub cost_micros: i64,
    pub total_ms_sum: i64,
}

impl From<UsageDailyRow> for UsageExportRow {
    fn from(r: UsageDailyRow) -> UsageExportRow {
        UsageExportRow {
            day: r.day,
            model: r.model,
            provider: r.provider,
            client: r.client,
            calls: r.calls,
            errors: r.errors,
            input_tokens: r.usage.input_tokens,
            output_tokens: r.usage.output_tokens,
            cache_read_tokens: r.usage.cache_read_tokens,
            cache_write_tokens: r.usage.cache_write_tokens,
            reasoning_tokens: r.usage.reasoning_tokens,
            cost_usd: usd(r.cost_micros),
            cost_micros: r.cost_micros,
            total_ms_sum: r.total_ms_sum,
        }
    }
}

/// A text cell a spreadsheet would evaluate gets a leading `'`.
fn defuse(s: &str) -> std::borrow::Cow<'_, str> {
    if s.starts_with(['=', '+', '-', '@', '\t', '\r']) { format!("'{s}").into() } else { s.into() }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn csv_err(e: csv::Error) -> ControlError {
    ControlError::Internal(format!("CSV: {e}"))
}

const CALL_HEADER: [&str; 30] = [
    "id",
    "started_at",
    "finished_at",
    "status",
    "dialect",
    "client",
    "model",
    "model_id",
    "provider",
    "upstream_model",
    "stream",
    "http_status",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cost_usd",
    "cost_micros",
    "cost_source",
    "price_version",
    "ttft_ms",
    "total_ms",
    "retries",
    "error_kind",
    "error_message",
    "conversation_id",
    "request_id",
    "session_id",
    "budget_downgrade",
];

fn call_record(r: &CallRow) -> Vec<String> {
    let text = |s: &str| defuse(s).into_owned();
    let text_opt = |s: &Option<String>| s.as_deref().map(text).unwrap_or_default();
    vec![
        text(&r.id),
        r.started_at.clone(),
        opt(r.finished_at.as_ref()),
        r.status.to_owned(),
        text(&r.dialect),
        text(&r.client),
        text(&r.model),
        text_opt(&r.model_id),
        text_opt(&r.provider),
        text_opt(&r.upstream_model),
        r.stream.to_string(),
        opt(r.http_status),
        r.input_tokens.to_string(),
        r.output_tokens.to_string(),
        r.cache_read_tokens.to_string(),
        r.cache_write_tokens.to_string(),
        r.reasoning_tokens.to_string(),
        opt(r.cost_usd.as_ref()),
        opt(r.cost_micros),
        opt(r.cost_source),
        text_opt(&r.price_version),
        opt(r.ttft_ms),
        opt(r.total_ms),
        r.retries.to_string(),
        text_opt(&r.error_kind),
        text_opt(&r.error_message),
        text_opt(&r.conversation_id),
        text_opt(&r.request_id),
        text_opt(&r.session_id),
        text_opt(&r.budget_downgrade),
    ]
}

/// Every call started in `range`, oldest first.
pub async fn calls(store: &Store, range: Range, format: Format) -> Result<String, ControlError> {
    let mut rows = Vec::new();
    let mut after = None;
    loop {
        let page = store.calls_page(range.since_ms, range.until_ms, after.clone(), PAGE).await?;
        let full = page.len() >= PAGE as usize;
        after = page.last().map(|c| (c.started_ms, c.id.clone()));
        rows.extend(page.into_iter().map(CallRow::from));
        if !full {
            break;
        }
    }
    match format {
        Format::Json => serde_json::to_string_pretty(&rows).map_err(|e| ControlError::Internal(e.to_string())),
        Format::Csv => {
            let mut w = csv::Writer::from_writer(Vec::new());
            w.write_record(CALL_HEADER).map_err(csv_err)?;
            for r in &rows {
                w.write_record(call_record(r)).map_err(csv_err)?;
            }
            finish(w)
        }
    }
}

fn finish(w: csv::Writer<Vec<u8>>) -> Result<String, ControlError> {
    let bytes = w.into_inner().map_err(|e| ControlError::Internal(format!("CSV: {e}")))?;
    String::from_utf8(bytes).map_err(|e| ControlError::Internal(e.to_string()))
}

const USAGE_HEADER: [&str; 14] = [
    "day",
    "model",
    "provider",
    "client",
    "calls",
    "errors",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cost_usd",
    "cost_micros",
    "total_ms_sum",
];

/// The `usage_daily` rows of the days `range` touches.
pub async fn usage(store: &Store, range: Range, format: Format) -> Result<String, ControlError> {
    let (since, until) = range.days();
    let rows: Vec<UsageExportRow> = store.usage_daily(&since, &until).await?.into_iter().map(Into::into).collect();
    match format {
        Format::Json => serde_json::to_string_pretty(&rows).map_err(|e| ControlError::Internal(e.to_string())),
        Format::Csv => {
            let mut w = csv::Writer::from_writer(Vec::new());
            w.write_record(USAGE_HEADER).map_err(csv_err)?;
            for r in &rows {
                w.write_record([
                    defuse(&r.day).into_owned(),
                    defuse(&r.model).into_owned(),
                    defuse(&r.provider).into_owned(),
                    defuse(&r.client).into_owned(),
                    r.calls.to_string(),
                    r.errors.to_string(),
                    r.input_tokens.to_string(),
                    r.output_tokens.to_string(),
                    r.cache_read_tokens.to_string(),
                    r.cache_write_tokens.to_string(),
                    r.reasoning_tokens.to_string(),
                    r.cost_usd.clone(),
                    r.cost_micros.to_string(),
                    r.total_ms_sum.to_string(),
                ])
                .map_err(csv_err)?;
            }
            finish(w)
        }
    }
}

#[cfg(test)]
mod tests;
