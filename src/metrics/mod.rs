//! Prometheus metrics (`GET /metrics`, text format 0.0.4): what the gateway did since this
//! process started, recorded as each call starts and finishes, and the ledger's health read at
//! scrape time.
//!
//! Recording is cheap: atomic counters and histograms of the `prometheus` crate, looked up by
//! label values (a hash and a read lock, never held across an await), plus one short-held map
//! from a call's id to the labels its start named (a finish record does not repeat them).
//!
//! Series (all names follow Prometheus conventions: counters end in `_total`, durations are
//! `_seconds`):
//! - `keyhaven_requests_total{route, client, model, provider, status}`: finished calls;
//!   `status` is the ledger's (`ok`, `error`, `canceled`, `interrupted`).
//! - `keyhaven_errors_total{route, client, model, provider, kind}`: finished calls with status
//!   `error`, by the ledger's `error_kind`.
//! - `keyhaven_{input,output,cache_read,cache_write,reasoning}_tokens_total{client, model,
//!   provider}` and `keyhaven_cost_usd_total{client, model, provider}`: the ledger's usage and cost
//!   (reasoning tokens are a part of output tokens).
//! - `keyhaven_request_duration_seconds`, `keyhaven_time_to_first_token_seconds`
//!   `{route, model, provider}` and `keyhaven_overhead_seconds{route}` (the
//!   `x-keyhaven-overhead-ms` time) histograms.
//! - `keyhaven_calls_in_flight{route}`.
//! - `keyhaven_ledger_queue_depth`, `keyhaven_ledger_commit_seconds` (one writer batch, applied
//!   and committed), `keyhaven_ledger_dropped_total`.
//! - Per budget, read from the budgets' counters at scrape time (`{budget, period, scope}`):
//!   `keyhaven_budget_spend_usd` (finished calls of the current period, the ledger's cost),
//!   `keyhaven_budget_in_flight_usd` (estimates of calls in flight), `keyhaven_budget_limit_usd`,
//!   `keyhaven_budget_used_ratio` ((spend + in flight) / limit), `keyhaven_budget_soft_ratio`
//!   (the soft threshold as a fraction) and `keyhaven_budget_reset_timestamp_seconds` (when the
//!   period ends).
//!
//! Labels stay few: `route` is the entry point the dialect names (`/v1/messages`, `cursor`, …),
//! `model` is the requested name when it resolved to a configured model (else `unknown`),
//! `provider` the provider that served (else `none`), and `client` the product token of the
//! client's User-Agent (`claude-cli/2.0 (external)` → `claude-cli`, lower case, at most 40
//! characters) or its client token's name; after [`MAX_CLIENTS`] distinct clients, further ones
//! are `other`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use prometheus::proto::{Bucket, Counter, Gauge, Histogram, Metric, MetricFamily, MetricType};
use prometheus::{CounterVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};

use crate::model::{CallFinish, CallStart, CallStatus};
use crate::store::Store;

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;
/// Distinct `client` label values before further clients become `other`.
pub const MAX_CLIENTS: usize = 64;

const DURATION_BUCKETS: &[f64] = &[0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0];
const TTFT_BUCKETS: &[f64] = &[0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0];
const OVERHEAD_BUCKETS: &[f64] = &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];

#[derive(Debug, thiserror::Error)]
#[error("metrics: {0}")]
pub struct MetricsError(String);

impl From<prometheus::Error> for MetricsError {
    fn from(e: prometheus::Error) -> MetricsError {
        MetricsError(e.to_string())
    }
}

/// One budget's state at scrape time (filled by `app` from the gateway's budgets: `metrics` does
/// not depend on `provider`).
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetSample {
    pub name: String,
    /// `day`, `week` or `month`.
    pub period: &'static str,
    /// `all`, `client`, `provider` or `model`.
    pub scope: &'static str,
    /// Finished calls of the current period.
    pub spent_micros: u64,
    /// Estimates of calls in flight.
    pub in_flight_micros: u64,
    pub limit_micros: u64,
    pub soft_percent: u8,
    pub reset_ms: i64,
}

/// Where the budget samples come from.
pub type BudgetSource = Box<dyn Fn() -> Vec<BudgetSample> + Send + Sync>;

/// The labels a call's start named, kept until its finish.
#[derive(Debug, Clone)]
struct Pending {
    route: &'static str,
    client: String,
    model: String,
    resolved: bool,
    provider: Option<String>,
}

/// The engine's metrics. Shared behind an `Arc`.
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    errors: IntCounterVec,
    input: IntCounterVec,
    output: IntCounterVec,
    cache_read: IntCounterVec,
    cache_write: IntCounterVec,
    reasoning: IntCounterVec,
    cost: CounterVec,
    duration: HistogramVec,
    ttft: HistogramVec,
    overhead: HistogramVec,
    in_flight: IntGaugeVec,
    pending: Mutex<HashMap<String, Pending>>,
    clients: Mutex<HashSet<String>>,
    store: Option<Arc<Store>>,
    budgets: OnceLock<BudgetSource>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// The route label of a call's dialect.
pub fn route_of(dialect: &str) -> &'static str {
    match dialect {
        "openai_chat" => "/v1/chat/completions",
        "openai_responses" => "/v1/responses",
        "anthropic" => "/v1/messages",
        "anthropic_count_tokens" => "/v1/messages/count_tokens",
        "cursor" => "cursor",
        "control_test" => "control_test",
        "fim_completions" | "fim_codestral" | "fim_ollama" => "cursor_tab",
        _ => "other",
    }
}

/// The client label: the User-Agent's first product token (or a client token's name), lower
/// case, at most 40 characters; `unknown` when empty.
pub fn client_label(client: &str) -> String {
    let product = client.split_whitespace().next().unwrap_or("");
    let name = product.split('/').next().unwrap_or("");
    let label: String = name.chars().take(40).collect::<String>().to_lowercase();
    if label.is_empty() { "unknown".to_owned() } else { label }
}

fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> Result<IntCounterVec, MetricsError> {
    let c = IntCounterVec::new(Opts::new(name, help), labels)?;
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

fn histogram_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    buckets: &[f64],
    labels: &[&str],
) -> Result<HistogramVec, MetricsError> {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets.to_vec()), labels)?;
    registry.register(Box::new(h.clone()))?;
    Ok(h)
}

fn ms_to_secs(ms: i64) -> f64 {
    ms.max(0) as f64 / 1000.0
}

impl Metrics {
    /// The metrics of one engine; `store` (when calls are recorded) is read at scrape time for
    /// the ledger's queue depth and commit times.
    pub fn new(store: Option<Arc<Store>>) -> Result<Metrics, MetricsError> {
        let r = Registry::new();
        let call = &["route", "client", "model", "provider", "status"];
        let err = &["route", "client", "model", "provider", "kind"];
        let usage = &["client", "model", "provider"];
        let timed = &["route", "model", "provider"];
        let tokens = |name: &str, what: &str| {
            counter_vec(&r, name, &format!("{what} tokens of finished calls, as recorded in the ledger"), usage)
        };
        let cost = CounterVec::new(
            Opts::new("keyhaven_cost_usd_total", "Cost of finished calls in USD, as recorded in the ledger"),
            usage,
        )?;
        r.register(Box::new(cost.clone()))?;
        let in_flight =
            IntGaugeVec::new(Opts::new("keyhaven_calls_in_flight", "Calls started and not finished"), &["route"])?;
        r.register(Box::new(in_flight.clone()))?;
        Ok(Metrics {
            requests: counter_vec(&r, "keyhaven_requests_total", "Finished calls by status", call)?,
            errors: counter_vec(&r, "keyhaven_errors_total", "Finished calls with status error, by error kind", err)?,
            input: tokens("keyhaven_input_tokens_total", "Input (uncached)")?,
            output: tokens("keyhaven_output_tokens_total", "Output")?,
            cache_read: tokens("keyhaven_cache_read_tokens_total", "Cache-read")?,
            cache_write: tokens("keyhaven_cache_write_tokens_total", "Cache-write")?,
            reasoning: tokens("keyhaven_reasoning_tokens_total", "Reasoning (part of output)")?,
            cost,
            duration: histogram_vec(
                &r,
                "keyhaven_request_duration_seconds",
                "Time from a call's start to its finish",
                DURATION_BUCKETS,
                timed,
            )?,
            ttft: histogram_vec(
                &r,
                "keyhaven_time_to_first_token_seconds",
                "Time from a call's start to its first content",
                TTFT_BUCKETS,
                timed,
            )?,
            overhead: histogram_vec(
                &r,
                "keyhaven_overhead_seconds",
                "Time spent in Keyhaven per call, upstream waiting excluded (x-keyhaven-overhead-ms)",
                OVERHEAD_BUCKETS,
                &["route"],
            )?,
            in_flight,
            registry: r,
            pending: Mutex::new(HashMap::new()),
            clients: Mutex::new(HashSet::new()),
            store,
            budgets: OnceLock::new(),
        })
    }

    /// Sets where the budget families come from (once; later calls are ignored).
    pub fn set_budget_source(&self, source: BudgetSource) {
        let _ = self.budgets.set(source);
    }

    fn client(&self, raw: &str) -> String {
        let label = client_label(raw);
        let mut seen = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(&label) {
            return label;
        }
        if seen.len() >= MAX_CLIENTS {
            return "other".to_owned();
        }
        seen.insert(label.clone());
        label
    }

    /// A call's in-flight row was queued.
    pub fn call_started(&self, start: &CallStart) {
        let pending = Pending {
            route: route_of(&start.dialect),
            client: self.client(&start.client),
            model: start.model.clone(),
            resolved: start.model_id.is_some(),
            provider: start.provider.clone(),
        };
        self.in_flight.with_label_values(&[pending.route]).inc();
        let mut map = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        map.insert(start.id.clone(), pending);
    }

    /// A call's finish was queued (exactly once per call).
    pub fn call_finished(&self, finish: &CallFinish) {
        let started = self.pending.lock().unwrap_or_else(PoisonError::into_inner).remove(&finish.id);
        let p = match started {
            Some(p) => {
                self.in_flight.with_label_values(&[p.route]).dec();
                p
            }
            None => Pending {
                route: "other",
                client: "unknown".to_owned(),
                model: String::new(),
                resolved: false,
                provider: None,
            },
        };
        let model = if p.resolved || finish.model_id.is_some() { p.model.as_str() } else { "unknown" };
        let model = if model.is_empty() { "unknown" } else { model };
        let provider = finish.provider.as_deref().or(p.provider.as_deref()).unwrap_or("none");
        let client = p.client.as_str();
        self.requests.with_label_values(&[p.route, client, model, provider, finish.status.as_str()]).inc();
        if finish.status == CallStatus::Error {
            let kind = finish.error_kind.as_deref().unwrap_or("unknown");
            self.errors.with_label_values(&[p.route, client, model, provider, kind]).inc();
        }
        let usage = [client, model, provider];
        let u = &finish.usage;
        for (vec, n) in [
            (&self.input, u.input_tokens),
            (&self.output, u.output_tokens),
            (&self.cache_read, u.cache_read_tokens),
            (&self.cache_write, u.cache_write_tokens),
            (&self.reasoning, u.reasoning_tokens),
        ] {
            // Touch the series even at zero, so a scrape shows every client/model pair.
            vec.with_label_values(&usage).inc_by(n);
        }
        let cost = finish.cost_micros.unwrap_or(0).max(0) as f64 / 1e6;
        self.cost.with_label_values(&usage).inc_by(cost);
        let timed = [p.route, model, provider];
        self.duration.with_label_values(&timed).observe(ms_to_secs(finish.total_ms));
        if let Some(ttft) = finish.ttft_ms {
            self.ttft.with_label_values(&timed).observe(ms_to_secs(ttft));
        }
    }

    /// Keyhaven's own time on a call of `dialect` (the overhead header's value).
    pub fn observe_overhead(&self, dialect: &str, engine: Duration) {
        self.overhead.with_label_values(&[route_of(dialect)]).observe(engine.as_secs_f64());
    }

    /// Everything in the Prometheus text format.
    pub fn render(&self) -> Result<String, MetricsError> {
        let mut families = self.registry.gather();
        if let Some(store) = &self.store {
            families.extend(ledger_families(&store.ledger_stats()));
        }
        if let Some(source) = self.budgets.get() {
            let samples = source();
            if !samples.is_empty() {
                families.extend(budget_families(&samples));
            }
        }
        Ok(TextEncoder::new().encode_to_string(&families)?)
    }
}

fn family(name: &str, help: &str, kind: MetricType, metric: Metric) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_owned());
    f.set_help(help.to_owned());
    f.set_field_type(kind);
    f.set_metric(vec![metric]);
    f
}

/// The ledger's families, built from the store's atomics at scrape time.
fn ledger_families(s: &crate::store::LedgerSnapshot) -> Vec<MetricFamily> {
    let mut depth = Gauge::default();
    depth.set_value(s.queue_depth as f64);
    let mut dropped = Counter::default();
    dropped.set_value(s.dropped as f64);
    let mut h = Histogram::default();
    h.set_sample_count(s.commits);
    h.set_sample_sum(s.commit_seconds_sum);
    h.set_bucket(
        s.commit_buckets
            .iter()
            .map(|(bound, n)| {
                let mut b = Bucket::default();
                b.set_upper_bound(*bound);
                b.set_cumulative_count(*n);
                b
            })
            .collect(),
    );
    let mut depth_metric = Metric::default();
    depth_metric.set_gauge(depth);
    let mut commit_metric = Metric::default();
    commit_metric.set_histogram(h);
    let mut dropped_metric = Metric::default();
    dropped_metric.set_counter(dropped);
    vec![
        family(
            "keyhaven_ledger_queue_depth",
            "Ledger writes queued and not yet taken by the writer",
            MetricType::GAUGE,
            depth_metric,
        ),
        family(
            "keyhaven_ledger_commit_seconds",
            "Time to apply and commit one batch of ledger writes",
            MetricType::HISTOGRAM,
            commit_metric,
        ),
        family(
            "keyhaven_ledger_dropped_total",
            "Ledger records dropped because the write queue was full",
            MetricType::COUNTER,
            dropped_metric,
        ),
    ]
}

fn gauge_metric(labels: &[(&str, &str)], value: f64) -> Metric {
    let mut g = Gauge::default();
    g.set_value(value);
    let mut m = Metric::default();
    m.set_label(
        labels
            .iter()
            .map(|(k, v)| {
                let mut l = prometheus::proto::LabelPair::default();
                l.set_name((*k).to_owned());
                l.set_value((*v).to_owned());
                l
            })
            .collect(),
    );
    m.set_gauge(g);
    m
}

/// The budget families, one gauge per budget each, built at scrape time.
pub(crate) fn budget_families(samples: &[BudgetSample]) -> Vec<MetricFamily> {
    type Read = fn(&BudgetSample) -> f64;
    fn usd(micros: u64) -> f64 {
        micros as f64 / 1e6
    }
    let gauges: [(&str, &str, Read); 6] = [
        ("keyhaven_budget_spend_usd", "Spend of finished calls in the budget's current period, in USD", |s| {
            usd(s.spent_micros)
        }),
        ("keyhaven_budget_in_flight_usd", "Estimated cost of the budget's calls in flight, in USD", |s| {
            usd(s.in_flight_micros)
        }),
        ("keyhaven_budget_limit_usd", "The budget's limit per period, in USD", |s| usd(s.limit_micros)),
        ("keyhaven_budget_used_ratio", "(spend + in flight) / limit of the budget's current period", |s| {
            if s.limit_micros == 0 {
                1.0
            } else {
                s.spent_micros.saturating_add(s.in_flight_micros) as f64 / s.limit_micros as f64
            }
        }),
        ("keyhaven_budget_soft_ratio", "The budget's soft threshold as a fraction of its limit", |s| {
            f64::from(s.soft_percent) / 100.0
        }),
        ("keyhaven_budget_reset_timestamp_seconds", "When the budget's current period ends (Unix time)", |s| {
            s.reset_ms as f64 / 1000.0
        }),
    ];
    gauges
        .iter()
        .map(|(name, help, read)| {
            let mut f = MetricFamily::default();
            f.set_name((*name).to_owned());
            f.set_help((*help).to_owned());
            f.set_field_type(MetricType::GAUGE);
            f.set_metric(
                samples
                    .iter()
                    .map(|s| gauge_metric(&[("budget", &s.name), ("period", s.period), ("scope", s.scope)], read(s)))
                    .collect(),
            );
            f
        })
        .collect()
}

#[cfg(test)]
mod tests;
