//! `GET /metrics` after a scripted run against a real engine and a mock upstream: parsed with a
//! real Prometheus text-format parser (`prometheus-parse`), every counter matches the ledger's
//! rows; the endpoint is guarded like the control API; each budget's spend, limit and reset time
//! are served and equal the ledger's rows of the period.

use std::collections::BTreeMap;

use keyhaven::model::CallStatus;
use keyhaven::store::CallSummary;
use prometheus_parse::{Scrape, Value};

use crate::support::fixtures::{Case, request, upstream_sse};
use crate::support::{Client, MockUpstream, Reply, TestEngine, Up, config_with};

/// The route label of a dialect, as the metrics documentation names it (written by hand).
fn route(dialect: &str) -> &'static str {
    match dialect {
        "openai_chat" => "/v1/chat/completions",
        "anthropic" => "/v1/messages",
        "openai_responses" => "/v1/responses",
        other => panic!("unexpected dialect {other}"),
    }
}

/// The client label of `TestEngine::post`'s `User-Agent: keyhaven-tests/1.0`.
const CLIENT: &str = "keyhaven-tests";

async fn scrape(engine: &TestEngine) -> Scrape {
    let (status, text) = engine.control(reqwest::Method::GET, "/metrics", None).await;
    assert_eq!(status, 200, "{text}");
    Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("Prometheus text format")
}

fn value(v: &Value) -> f64 {
    match v {
        Value::Counter(x) | Value::Gauge(x) | Value::Untyped(x) => *x,
        other => panic!("not a scalar: {other:?}"),
    }
}

/// Sums the samples of `metric` by the given label values.
fn by_labels(scrape: &Scrape, metric: &str, labels: &[&str]) -> BTreeMap<Vec<String>, f64> {
    let mut out = BTreeMap::new();
    for s in scrape.samples.iter().filter(|s| s.metric == metric) {
        let key = labels.iter().map(|l| s.labels.get(l).unwrap_or("").to_owned()).collect();
        *out.entry(key).or_insert(0.0) += value(&s.value);
    }
    out
}

fn ledger<F: Fn(&CallSummary) -> f64>(rows: &[CallSummary], labels: &[&str], f: F) -> BTreeMap<Vec<String>, f64> {
    let mut out = BTreeMap::new();
    for r in rows {
        let key = labels
            .iter()
            .map(|l| match *l {
                "route" => route(&r.dialect).to_owned(),
                "client" => CLIENT.to_owned(),
                "model" => r.model.clone(),
                "provider" => r.provider.clone().unwrap_or_default(),
                "status" => r.status.as_str().to_owned(),
                "kind" => r.error_kind.clone().unwrap_or_default(),
                other => panic!("label {other}"),
            })
            .collect();
        *out.entry(key).or_insert(0.0) += f(r);
    }
    out
}

#[tokio::test]
async fn metrics_match_the_ledger_after_a_scripted_run() {
    let mock = MockUpstream::start().await;
    let engine = TestEngine::start(&mock).await;
    // 1. Anthropic client, streaming, cache usage (200 input, 800 cache read, 100 cache write, 7 out).
    mock.push(Reply::sse(&upstream_sse(Up::Anthropic, Case::Cache)));
    let r = engine.post(Client::Anthropic, &request(Client::Anthropic, "an-model", true, Case::Text)).await;
    assert_eq!(r.status(), 200);
    r.text().await.expect("body");
    // 2. Chat client, whole answer (20 in, 5 out).
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let r = engine.post(Client::Openai, &request(Client::Openai, "oa-model", false, Case::Text)).await;
    assert_eq!(r.status(), 200);
    r.text().await.expect("body");
    // 3. Chat client, the upstream refuses (400: not retried).
    mock.push(Reply::json(400, r#"{"error":{"message":"bad request","type":"invalid_request_error"}}"#));
    let r = engine.post(Client::Openai, &request(Client::Openai, "oa-model", false, Case::Text)).await;
    assert_eq!(r.status(), 400);
    r.text().await.expect("body");
    // 4. Anthropic client, streaming, the upstream fails mid-stream.
    mock.push(Reply::sse(&upstream_sse(Up::Anthropic, Case::ErrorMidStream)));
    let r = engine.post(Client::Anthropic, &request(Client::Anthropic, "an-model", true, Case::Text)).await;
    r.text().await.expect("body");
    // 5. Responses client, streaming.
    mock.push(Reply::sse(&upstream_sse(Up::Responses, Case::Text)));
    let r = engine.post(Client::Responses, &request(Client::Responses, "rs-model", true, Case::Text)).await;
    assert_eq!(r.status(), 200);
    r.text().await.expect("body");

    let rows: Vec<CallSummary> = engine.wait_calls(5).await.into_iter().map(|d| d.summary).collect();
    let count = |s: CallStatus| rows.iter().filter(|r| r.status == s).count();
    assert_eq!((count(CallStatus::Ok), count(CallStatus::Error)), (3, 2), "{rows:#?}");
    let scrape = scrape(&engine).await;

    let five = &["route", "client", "model", "provider", "status"];
    let expected = ledger(&rows, five, |_| 1.0);
    assert_eq!(by_labels(&scrape, "keyhaven_requests_total", five), expected);
    let errors = &["route", "client", "model", "provider", "kind"];
    let error_rows: Vec<CallSummary> = rows.iter().filter(|r| r.status == CallStatus::Error).cloned().collect();
    assert_eq!(by_labels(&scrape, "keyhaven_errors_total", errors), ledger(&error_rows, errors, |_| 1.0));

    let usage = &["client", "model", "provider"];
    for (metric, tokens) in [
        ("keyhaven_input_tokens_total", (|r: &CallSummary| r.usage.input_tokens) as fn(&CallSummary) -> u64),
        ("keyhaven_output_tokens_total", |r| r.usage.output_tokens),
        ("keyhaven_cache_read_tokens_total", |r| r.usage.cache_read_tokens),
        ("keyhaven_cache_write_tokens_total", |r| r.usage.cache_write_tokens),
    ] {
        assert_eq!(by_labels(&scrape, metric, usage), ledger(&rows, usage, |r| tokens(r) as f64), "{metric}");
    }
    // By hand: the Anthropic cache call's usage is in its counters.
    let an = vec![CLIENT.to_owned(), "an-model".to_owned(), "an".to_owned()];
    assert!(by_labels(&scrape, "keyhaven_cache_read_tokens_total", usage)[&an] >= 800.0);
    assert!(by_labels(&scrape, "keyhaven_cache_write_tokens_total", usage)[&an] >= 100.0);

    let cost = by_labels(&scrape, "keyhaven_cost_usd_total", usage);
    let want = ledger(&rows, usage, |r| r.cost_micros.unwrap_or(0) as f64 / 1e6);
    assert_eq!(cost.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    for (k, v) in &want {
        assert!((cost[k] - v).abs() < 1e-9, "{k:?}: {} vs {v}", cost[k]);
    }
    assert!(want.values().sum::<f64>() > 0.0, "the run cost something");

    // Histograms: one duration observation per call, one TTFT per call that produced content.
    let timed = &["route", "model", "provider"];
    let counts = |metric: &str| {
        by_labels(&scrape, &format!("{metric}_count"), timed).into_iter().filter(|(_, v)| *v > 0.0).collect()
    };
    let durations: BTreeMap<_, _> = counts("keyhaven_request_duration_seconds");
    assert_eq!(durations, ledger(&rows, timed, |_| 1.0));
    let with_ttft: Vec<CallSummary> = rows.iter().filter(|r| r.ttft_ms.is_some()).cloned().collect();
    assert_eq!(counts("keyhaven_time_to_first_token_seconds"), ledger(&with_ttft, timed, |_| 1.0));
    let overhead = by_labels(&scrape, "keyhaven_overhead_seconds_count", &["route"]);
    assert_eq!(overhead.values().sum::<f64>(), 5.0, "{overhead:?}");
    let buckets = scrape
        .samples
        .iter()
        .find(|s| s.metric == "keyhaven_request_duration_seconds")
        .map(|s| s.value.clone())
        .expect("duration histogram");
    assert!(matches!(buckets, Value::Histogram(ref b) if !b.is_empty()));

    // Nothing in flight; the ledger's writer has committed and its queue is empty.
    let in_flight = by_labels(&scrape, "keyhaven_calls_in_flight", &["route"]);
    assert!(in_flight.values().all(|v| *v == 0.0), "{in_flight:?}");
    let depth = by_labels(&scrape, "keyhaven_ledger_queue_depth", &[]);
    assert_eq!(depth.values().sum::<f64>(), 0.0);
    let commits = by_labels(&scrape, "keyhaven_ledger_commit_seconds_count", &[]);
    assert!(commits.values().sum::<f64>() >= 1.0, "{commits:?}");
    assert!(scrape.docs.contains_key("keyhaven_requests_total"));
    engine.stop().await;
}

#[tokio::test]
async fn metrics_need_the_control_token_and_refuse_foreign_pages() {
    let mock = MockUpstream::start().await;
    let engine = TestEngine::start(&mock).await;
    let url = engine.url("/metrics");
    let http = &engine.http;
    let none = http.get(&url).send().await.expect("send");
    assert_eq!(none.status(), 401);
    let wrong = http.get(&url).bearer_auth("not-the-token").send().await.expect("send");
    assert_eq!(wrong.status(), 401);
    let token = keyhaven::control::token::ControlToken::load_or_create(engine.dir.path()).expect("token");
    let foreign =
        http.get(&url).bearer_auth(token.expose()).header("origin", "http://evil.example").send().await.expect("send");
    assert_eq!(foreign.status(), 403);
    let host = http.get(&url).bearer_auth(token.expose()).header("host", "evil.example").send().await.expect("send");
    assert_eq!(host.status(), 403);
    let ok = http.get(&url).bearer_auth(token.expose()).send().await.expect("send");
    assert_eq!(ok.status(), 200);
    let ct = ok.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    engine.stop().await;
}

/// 1000 input and 100 output tokens (OpenAI's `prompt_tokens` has no cached part here).
const CHAT_USAGE: &str = concat!(
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"x\",",
    "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"hello\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"x\",",
    "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],",
    "\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":100,\"total_tokens\":1100}}\n\n",
    "data: [DONE]\n\n",
);

const BUDGETS: &str = r#"
[[models]]
name = "big"
provider = "oa"
upstream = "big-upstream"
price = { input = "10.00", output = "30.00" }

[[models]]
name = "small"
provider = "oa"
upstream = "small-upstream"
price = { input = "0.10", output = "0.30" }

[[budgets]]
name = "monthly"
period = "month"
limit_usd = 1

[[budgets]]
name = "oa-daily"
provider = "oa"
period = "day"
limit_usd = 0.04
soft_percent = 50

[[budgets]]
name = "small-weekly"
model = "small"
period = "week"
limit_usd = 0.5
"#;

/// Samples of `metric` by budget name: (period, scope, value).
fn budget_gauge(scrape: &Scrape, metric: &str) -> BTreeMap<String, (String, String, f64)> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric)
        .map(|s| {
            let label = |l: &str| s.labels.get(l).unwrap_or("").to_owned();
            (label("budget"), (label("period"), label("scope"), value(&s.value)))
        })
        .collect()
}

#[tokio::test]
async fn budget_spend_limit_and_reset_are_served_and_match_the_ledger() {
    let mock = MockUpstream::start().await;
    let config = format!("time_zone = \"UTC\"\n{}", config_with(&mock.url(), "", BUDGETS));
    let engine = TestEngine::start_in(tempfile::tempdir().expect("dir"), &config).await;
    for model in ["big", "big", "small"] {
        mock.push(Reply::sse(CHAT_USAGE));
        let body = serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
        let r = engine.post(Client::Openai, &body).await;
        assert_eq!(r.status(), 200);
        r.text().await.expect("body");
    }
    let rows: Vec<CallSummary> = engine.wait_calls(3).await.into_iter().map(|d| d.summary).collect();
    let scrape = scrape(&engine).await;

    // By hand: big = 1000 × $10/M + 100 × $30/M = $0.013; small = 1000 × $0.10/M + 100 × $0.30/M
    // = $0.00013.
    let spend = budget_gauge(&scrape, "keyhaven_budget_spend_usd");
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    let want = [
        ("monthly", "month", "all", 0.02613),
        ("oa-daily", "day", "provider", 0.02613),
        ("small-weekly", "week", "model", 0.00013),
    ];
    assert_eq!(spend.len(), 3, "{spend:?}");
    for (name, period, scope, usd) in want {
        let (p, s, v) = &spend[name];
        assert_eq!((p.as_str(), s.as_str()), (period, scope), "{name}");
        assert!(close(*v, usd), "{name}: {v} vs {usd}");
    }
    // And against the ledger: every row is in this period; `small-weekly` has the small model's rows.
    let ledger_usd = |f: &dyn Fn(&CallSummary) -> bool| {
        rows.iter().filter(|r| f(r)).map(|r| r.cost_micros.unwrap_or(0)).sum::<i64>() as f64 / 1e6
    };
    assert!(close(spend["monthly"].2, ledger_usd(&|_| true)));
    assert!(close(spend["oa-daily"].2, ledger_usd(&|r| r.provider.as_deref() == Some("oa"))));
    assert!(close(spend["small-weekly"].2, ledger_usd(&|r| r.model == "small")));

    let limit = budget_gauge(&scrape, "keyhaven_budget_limit_usd");
    assert!(close(limit["monthly"].2, 1.0) && close(limit["oa-daily"].2, 0.04) && close(limit["small-weekly"].2, 0.5));
    let used = budget_gauge(&scrape, "keyhaven_budget_used_ratio");
    assert!(close(used["oa-daily"].2, 0.02613 / 0.04), "{used:?}");
    let soft = budget_gauge(&scrape, "keyhaven_budget_soft_ratio");
    assert!(close(soft["oa-daily"].2, 0.5) && close(soft["monthly"].2, 0.8), "{soft:?}");
    let in_flight = budget_gauge(&scrape, "keyhaven_budget_in_flight_usd");
    assert!(in_flight.values().all(|(_, _, v)| *v == 0.0), "{in_flight:?}");

    // Reset times in UTC, computed here: tomorrow, next Monday, the first of next month.
    let now = time::OffsetDateTime::now_utc();
    let today = now.date();
    let secs = |d: time::Date| d.midnight().assume_utc().unix_timestamp() as f64;
    let monday = today + time::Duration::days(7 - i64::from(today.weekday().number_days_from_monday()));
    let first = if today.month() == time::Month::December {
        time::Date::from_calendar_date(today.year() + 1, time::Month::January, 1)
    } else {
        time::Date::from_calendar_date(today.year(), today.month().next(), 1)
    }
    .expect("date");
    let reset = budget_gauge(&scrape, "keyhaven_budget_reset_timestamp_seconds");
    assert_eq!(reset["oa-daily"].2, secs(today.next_day().expect("tomorrow")));
    assert_eq!(reset["small-weekly"].2, secs(monday));
    assert_eq!(reset["monthly"].2, secs(first));
    assert_eq!(
        scrape.docs.get("keyhaven_budget_spend_usd").map(String::as_str),
        Some("Spend of finished calls in the budget's current period, in USD")
    );
    engine.stop().await;
}
