//! Usage statistics and the call history: the store's rollups and rows turned into DTOs, plus
//! the derived numbers (cache hit rate, error rate, latency percentiles from the histogram).

use std::sync::atomic::Ordering;

use crate::control::{ControlError, ControlService, dto};
use crate::model::{CallStatus, CostSource, Usage};
use crate::store::{self, CallFilter, LATENCY_BOUNDS_MS, LatencyHistogram, UsageGroup};

/// The longest usage window, in days.
pub const MAX_DAYS: u32 = 366;
/// The largest page of the call history.
pub const MAX_PAGE: u32 = 500;

/// `(since, until)` as `YYYY-MM-DD` for the last `days` UTC days ending on `today`.
/// The budgets' zone for people: `UTC`, `UTC+02:00`, or `local time, UTC+01:00` when it is the
/// system's.
pub(crate) fn zone_label(time_zone: Option<&str>, offset_s: i32) -> String {
    let sign = if offset_s < 0 { '−' } else { '+' };
    let abs = offset_s.unsigned_abs();
    let utc = format!("UTC{sign}{:02}:{:02}", abs / 3600, abs % 3600 / 60);
    match time_zone.map(str::trim) {
        None | Some("local") | Some("") => format!("local time, {utc}"),
        Some(_) if offset_s == 0 => "UTC".to_owned(),
        Some(_) => utc,
    }
}

pub(crate) fn window(today: time::Date, days: u32) -> (String, String) {
    let days = days.clamp(1, MAX_DAYS);
    let since = today.saturating_sub(time::Duration::days(i64::from(days) - 1));
    (since.to_string(), today.to_string())
}

/// The upper bound of the bucket holding the `q` quantile (0 < q <= 1) of `counts`.
pub(crate) fn percentile(counts: &[u64], q: f64) -> Option<u64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    #[expect(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "a rank")]
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for (i, c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            let bound = LATENCY_BOUNDS_MS.get(i).copied().unwrap_or(LATENCY_BOUNDS_MS[LATENCY_BOUNDS_MS.len() - 1] + 1);
            return u64::try_from(bound).ok();
        }
    }
    None
}

fn ratio(num: u64, den: u64) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "a display ratio")]
    if den == 0 { 0.0 } else { num as f64 / den as f64 }
}

/// The numbers of one group. `hist` is its latency histogram, if any.
pub(crate) fn stats(
    calls: u64,
    errors: u64,
    usage: &Usage,
    cost_micros: i64,
    total_ms_sum: i64,
    hist: Option<&LatencyHistogram>,
) -> dto::UsageStats {
    let prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens;
    let timed: u64 = hist.map_or(calls, |h| h.counts.iter().sum());
    #[expect(clippy::cast_precision_loss, reason = "display values")]
    let (cost_usd, avg) = (cost_micros as f64 / 1e6, if timed == 0 { 0.0 } else { total_ms_sum as f64 / timed as f64 });
    dto::UsageStats {
        calls,
        errors,
        error_rate: ratio(errors, calls),
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        cache_read_tokens: usage.cache_read_tokens,
        cache_write_tokens: usage.cache_write_tokens,
        reasoning_tokens: usage.reasoning_tokens,
        cache_hit_rate: ratio(usage.cache_read_tokens, prompt),
        cost_micros,
        cost_usd,
        avg_latency_ms: avg,
        latency: hist.map_or_else(dto::Latency::default, |h| dto::Latency {
            p50_ms: percentile(&h.counts, 0.50),
            p95_ms: percentile(&h.counts, 0.95),
            p99_ms: percentile(&h.counts, 0.99),
        }),
    }
}

fn group_of(g: dto::UsageGroupBy) -> UsageGroup {
    match g {
        dto::UsageGroupBy::Day => UsageGroup::Day,
        dto::UsageGroupBy::Model => UsageGroup::Model,
        dto::UsageGroupBy::Provider => UsageGroup::Provider,
        dto::UsageGroupBy::Client => UsageGroup::Client,
    }
}

fn status_to_dto(s: CallStatus) -> dto::CallStatus {
    match s {
        CallStatus::InFlight => dto::CallStatus::InFlight,
        CallStatus::Ok => dto::CallStatus::Ok,
        CallStatus::Error => dto::CallStatus::Error,
        CallStatus::Canceled => dto::CallStatus::Canceled,
        CallStatus::Interrupted => dto::CallStatus::Interrupted,
    }
}

fn status_from_dto(s: dto::CallStatus) -> CallStatus {
    match s {
        dto::CallStatus::InFlight => CallStatus::InFlight,
        dto::CallStatus::Ok => CallStatus::Ok,
        dto::CallStatus::Error => CallStatus::Error,
        dto::CallStatus::Canceled => CallStatus::Canceled,
        dto::CallStatus::Interrupted => CallStatus::Interrupted,
    }
}

fn summary(c: store::CallSummary) -> dto::CallSummary {
    dto::CallSummary {
        id: c.id,
        started_ms: c.started_ms,
        finished_ms: c.finished_ms,
        status: status_to_dto(c.status),
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
        usage_estimated: c.usage_estimated,
        cost_micros: c.cost_micros,
        ttft_ms: c.ttft_ms,
        total_ms: c.total_ms,
        retries: c.retries,
        error_kind: c.error_kind,
        error_message: c.error_message,
        conversation_id: c.conversation_id,
        request_id: c.request_id,
        session_id: c.session_id,
        budget_downgrade: c.budget_downgrade,
        cost_source: c.cost_source.map(source_to_dto),
    }
}

fn source_to_dto(s: CostSource) -> dto::CostSource {
    match s {
        CostSource::Reported => dto::CostSource::Reported,
        CostSource::Computed => dto::CostSource::Computed,
        CostSource::Estimated => dto::CostSource::Estimated,
    }
}

impl ControlService {
    /// Tokens, cost, cache hit rate, error rate and latency percentiles over the last
    /// `query.days` days, in total and per day, model, provider or client. Reads only the
    /// rollups (`usage_daily`, `latency_daily`).
    pub async fn usage(&self, query: dto::UsageQuery) -> Result<dto::UsageReport, ControlError> {
        if query.days == 0 || query.days > MAX_DAYS {
            return Err(ControlError::Invalid(format!("days: 1 to {MAX_DAYS}")));
        }
        let group = group_of(query.group_by);
        let store = &self.inner.store;
        let local = query.local_today == Some(true) && query.days == 1;
        let (since, until, rows, hists, all, since_ms, until_ms, time_zone);
        if local {
            // Today in the budgets' zone: from `calls` (the rollups are UTC days).
            let offset = self.inner.gateway.budgets().offset_s();
            let now = crate::clock::now_ms();
            let (start, end) = crate::provider::budget::period_bounds(crate::config::BudgetPeriod::Day, offset, now);
            let day = time::OffsetDateTime::from_unix_timestamp(start.div_euclid(1000))
                .map(|t| t.to_offset(time::UtcOffset::from_whole_seconds(offset).unwrap_or(time::UtcOffset::UTC)))
                .map_or_else(|_| String::new(), |t| t.date().to_string());
            (since, until) = (day.clone(), day);
            (rows, hists, all) = store.usage_between(start, end, group).await?;
            (since_ms, until_ms) = (start, end);
            time_zone = zone_label(self.current().time_zone.as_deref(), offset);
        } else {
            (since, until) = window(time::OffsetDateTime::now_utc().date(), query.days);
            rows = store.usage_grouped(&since, &until, group).await?;
            hists = store.latency_histograms(&since, &until, Some(group)).await?;
            all = store.latency_histograms(&since, &until, None).await?;
            let day_ms = |d: &str| crate::control::export::parse_bound(d, false);
            (since_ms, until_ms) = (day_ms(&since)?, crate::control::export::parse_bound(&until, true)?);
            time_zone = "UTC".to_owned();
        }
        let mut total_usage = Usage::default();
        let (mut calls, mut errors, mut cost, mut ms) = (0u64, 0u64, 0i64, 0i64);
        let mut out = Vec::new();
        for r in &rows {
            calls += r.calls;
            errors += r.errors;
            cost = cost.saturating_add(r.cost_micros);
            ms = ms.saturating_add(r.total_ms_sum);
            total_usage.input_tokens += r.usage.input_tokens;
            total_usage.output_tokens += r.usage.output_tokens;
            total_usage.cache_read_tokens += r.usage.cache_read_tokens;
            total_usage.cache_write_tokens += r.usage.cache_write_tokens;
            total_usage.reasoning_tokens += r.usage.reasoning_tokens;
            let hist = hists.iter().find(|h| h.key == r.key);
            out.push(dto::UsageGroupRow {
                key: r.key.clone(),
                stats: stats(r.calls, r.errors, &r.usage, r.cost_micros, r.total_ms_sum, hist),
            });
        }
        let found = store.cost_sources(since_ms, until_ms).await?;
        let cost_sources = CostSource::ALL
            .into_iter()
            .map(|s| {
                let row = found.iter().find(|r| r.source == Some(s));
                dto::CostSourceShare {
                    source: source_to_dto(s),
                    calls: row.map_or(0, |r| r.calls),
                    cost_micros: row.map_or(0, |r| r.cost_micros),
                }
            })
            .collect();
        Ok(dto::UsageReport {
            since,
            until,
            time_zone,
            group_by: query.group_by,
            totals: stats(calls, errors, &total_usage, cost, ms, all.first()),
            rows: out,
            cost_sources,
        })
    }

    /// Tokens, cost, calls and errors per UTC day and model, provider or client over the last
    /// `query.days` days (the Overview's charts over time). Reads only `usage_daily`.
    pub async fn usage_series(&self, query: dto::UsageSeriesQuery) -> Result<dto::UsageSeries, ControlError> {
        if query.days == 0 || query.days > MAX_DAYS {
            return Err(ControlError::Invalid(format!("days: 1 to {MAX_DAYS}")));
        }
        if query.split_by == dto::UsageGroupBy::Day {
            return Err(ControlError::Invalid("splitBy: model, provider or client".into()));
        }
        let (since, until) = window(time::OffsetDateTime::now_utc().date(), query.days);
        let rows = self.inner.store.usage_split(&since, &until, group_of(query.split_by)).await?;
        let points = rows
            .into_iter()
            .map(|r| dto::UsagePoint {
                day: r.day,
                key: r.key,
                calls: r.calls,
                errors: r.errors,
                input_tokens: r.usage.input_tokens,
                output_tokens: r.usage.output_tokens,
                cache_read_tokens: r.usage.cache_read_tokens,
                cache_write_tokens: r.usage.cache_write_tokens,
                cost_micros: r.cost_micros,
            })
            .collect();
        Ok(dto::UsageSeries { since, until, split_by: query.split_by, points })
    }

    /// Calls grouped by client session over the last `query.days` days, most recently active
    /// first. Reads `calls` (sessions are not in the rollups).
    pub async fn sessions(&self, query: dto::SessionQuery) -> Result<dto::SessionList, ControlError> {
        if query.days == 0 || query.days > MAX_DAYS {
            return Err(ControlError::Invalid(format!("days: 1 to {MAX_DAYS}")));
        }
        let since =
            time::OffsetDateTime::now_utc().date().saturating_sub(time::Duration::days(i64::from(query.days) - 1));
        let since_ms = since.midnight().assume_utc().unix_timestamp().saturating_mul(1000);
        let rows = self.inner.store.sessions(since_ms, query.limit.min(MAX_PAGE)).await?;
        let sessions = rows
            .into_iter()
            .map(|r| dto::SessionSummary {
                session_id: r.session_id,
                client: r.client,
                calls: r.calls,
                errors: r.errors,
                input_tokens: r.usage.input_tokens,
                output_tokens: r.usage.output_tokens,
                cache_read_tokens: r.usage.cache_read_tokens,
                cache_write_tokens: r.usage.cache_write_tokens,
                cost_micros: r.cost_micros,
                first_ms: r.first_ms,
                last_ms: r.last_ms,
            })
            .collect();
        Ok(dto::SessionList { sessions })
    }

    /// One page of the call history, newest first.
    pub async fn calls(&self, query: dto::CallQuery) -> Result<dto::CallPage, ControlError> {
        let limit = if query.limit == 0 { 100 } else { query.limit.min(MAX_PAGE) };
        let filter = CallFilter {
            limit: limit + 1,
            offset: query.offset,
            model: query.model,
            status: query.status.map(status_from_dto),
            client: query.client,
            provider: query.provider,
            since_ms: query.since_ms,
            conversation_id: query.conversation,
            session_id: query.session,
        };
        let mut rows = self.inner.store.recent_calls(filter).await?;
        let has_more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        Ok(dto::CallPage { calls: rows.into_iter().map(summary).collect(), offset: query.offset, limit, has_more })
    }

    /// The price table in use and each configured model's effective price (the live config).
    pub async fn prices(&self) -> Result<dto::PriceReport, ControlError> {
        crate::control::prices::report(&self.current(), &self.inner.prices).map_err(ControlError::Internal)
    }

    /// A CSV or JSON export of the calls (`what = "calls"`) or the daily usage (`"usage"`) in the
    /// query's window ([`crate::control::export`]): the body, its content type and a file name.
    pub async fn export(
        &self,
        what: &str,
        query: dto::ExportQuery,
    ) -> Result<(String, &'static str, String), ControlError> {
        use crate::control::export::{self, Format, Range};
        let format = Format::parse(query.format.as_deref().unwrap_or("csv"))?;
        let range = Range::parse(query.since.as_deref(), query.until.as_deref(), 0, crate::clock::now_ms())?;
        let store = &self.inner.store;
        let body = match what {
            "calls" => export::calls(store, range, format).await?,
            "usage" => export::usage(store, range, format).await?,
            other => return Err(ControlError::NotFound(format!("no export `{other}`"))),
        };
        Ok((body, format.content_type(), range.file_name(what, format)))
    }

    pub async fn call(&self, id: &str) -> Result<dto::CallDetail, ControlError> {
        let Some(d) = self.inner.store.call_detail(id).await? else {
            return Err(ControlError::NotFound(format!("no call `{id}`")));
        };
        Ok(dto::CallDetail {
            price_version: d.summary.price_version.clone(),
            summary: summary(d.summary),
            request_body: d.request_body,
            response_body: d.response_body,
            notes: d.notes,
            context_blocks: d
                .context_blocks
                .into_iter()
                .map(|b| dto::ContextBlock { kind: b.kind, source: b.source, bytes: b.bytes })
                .collect(),
        })
    }

    /// Deletes one call from the history (usage statistics keep it).
    pub async fn delete_call(&self, id: &str) -> Result<dto::Deleted, ControlError> {
        let deleted = self.inner.store.delete_call(id).await?;
        if deleted == 0 {
            return Err(ControlError::NotFound(format!("no call `{id}`")));
        }
        Ok(dto::Deleted { deleted })
    }

    pub async fn retention(&self) -> Result<dto::Retention, ControlError> {
        Ok(dto::Retention { days: self.retention_days() })
    }

    /// Sets the retention (kept in the config file when there is one) and prunes at once.
    pub async fn set_retention(&self, input: dto::Retention) -> Result<dto::RetentionApplied, ControlError> {
        if input.days > 36_500 {
            return Err(ControlError::Invalid("days: at most 36500 (0 keeps everything)".into()));
        }
        if self.inner.config.path().is_some() {
            let days = input.days;
            self.change(move |doc, _| {
                crate::control::edit::set_in_table(doc, "server", "retention_days", i64::from(days).into());
                Ok(())
            })
            .await?;
        }
        let pruned = self.apply_retention(input.days).await?;
        Ok(dto::RetentionApplied { days: input.days, pruned })
    }

    /// Makes `days` the live retention and deletes the calls older than it.
    pub(crate) async fn apply_retention(&self, days: u32) -> Result<u64, ControlError> {
        self.inner.retention_days.store(days, Ordering::Relaxed);
        if days == 0 {
            return Ok(0);
        }
        let cutoff = crate::clock::now_ms().saturating_sub(i64::from(days) * 86_400_000);
        Ok(self.inner.store.prune(cutoff).await?)
    }
}
