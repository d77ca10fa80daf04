//! Exports and cost sources: a run with a reported, a computed and an estimated call, then the
//! control API's CSV and JSON downloads and `keyhaven calls|usage --csv|--json` (the real binary
//! on the same database), parsed back with a CSV parser and checked against the ledger.

use std::process::Command;

use keyhaven::model::CostSource;
use keyhaven::store::CallSummary;

use crate::support::fixtures::{Case, request, upstream_sse};
use crate::support::{Client, MockUpstream, Reply, TestEngine, Up};

fn parse_csv(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let headers = r.headers().expect("header row").iter().map(str::to_owned).collect();
    let rows = r.records().map(|rec| rec.expect("record").iter().map(str::to_owned).collect()).collect();
    (headers, rows)
}

fn col<'a>(headers: &[String], row: &'a [String], name: &str) -> &'a str {
    let i = headers.iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name}"));
    &row[i]
}

/// Micro-dollars as the decimal USD the export writes (by hand: six decimals).
fn usd(micros: i64) -> String {
    format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

async fn run_calls(engine: &TestEngine, mock: &MockUpstream) -> Vec<CallSummary> {
    // Reported: the provider's usage chunk (20 in, 5 out).
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let r = engine.post(Client::Openai, &request(Client::Openai, "oa-model", true, Case::Text)).await;
    r.text().await.expect("body");
    // Computed: the same answer without a usage chunk; gpt-4o-mini's own tokenizer is o200k.
    let no_usage: String =
        upstream_sse(Up::Openai, Case::Text).split_inclusive("\n\n").filter(|e| !e.contains("\"usage\"")).collect();
    mock.push(Reply::sse(&no_usage));
    let r = engine.post(Client::Openai, &request(Client::Openai, "oa-model", true, Case::Text)).await;
    r.text().await.expect("body");
    // Estimated: the answer breaks off with an error before any usage.
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::ErrorMidStream)));
    let r = engine.post(Client::Openai, &request(Client::Openai, "oa-model", true, Case::Text)).await;
    r.text().await.expect("body");
    let mut rows: Vec<CallSummary> = engine.wait_calls(3).await.into_iter().map(|d| d.summary).collect();
    rows.sort_by_key(|r| (r.started_ms, r.id.clone()));
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_and_cost_sources_match_the_ledger() {
    let mock = MockUpstream::start().await;
    let engine = TestEngine::start(&mock).await;
    let rows = run_calls(&engine, &mock).await;
    let sources: Vec<_> = rows.iter().map(|r| r.cost_source).collect();
    assert_eq!(sources, [Some(CostSource::Reported), Some(CostSource::Computed), Some(CostSource::Estimated)]);
    assert_eq!((rows[0].usage.input_tokens, rows[0].usage.output_tokens), (20, 5));
    // o200k_base, OpenAI's chat framing: 3 to prime the reply, 4 per message (3 + the role),
    // "Be brief." is 3 tokens ("Be", " brief", "."), "Hi" one; the answer "Hello world" is two.
    assert_eq!((rows[1].usage.input_tokens, rows[1].usage.output_tokens), (3 + 4 + 3 + 4 + 1, 2));
    assert!(rows[1].usage_estimated, "no provider usage: still flagged");
    assert!(rows.iter().all(|r| r.cost_micros.is_some_and(|c| c > 0)), "{rows:#?}");

    // The control API's CSV download.
    let today = time::OffsetDateTime::now_utc().date().to_string();
    let (status, text) =
        engine.control(reqwest::Method::GET, &format!("/api/calls/export?format=csv&since={today}"), None).await;
    assert_eq!(status, 200, "{text}");
    let (headers, records) = parse_csv(&text);
    assert_eq!(records.len(), 3);
    for name in ["request_body", "response_body", "process_epoch"] {
        assert!(!headers.iter().any(|h| h == name), "{name} is not exported");
    }
    assert!(!text.contains("Be brief."), "no request bodies");
    for (row, rec) in rows.iter().zip(&records) {
        assert_eq!(col(&headers, rec, "id"), row.id);
        assert_eq!(col(&headers, rec, "status"), row.status.as_str());
        assert_eq!(col(&headers, rec, "cost_source"), row.cost_source.map_or("", CostSource::as_str));
        assert_eq!(col(&headers, rec, "budget_downgrade"), row.budget_downgrade.as_deref().unwrap_or(""));
        assert_eq!(col(&headers, rec, "input_tokens"), row.usage.input_tokens.to_string());
        assert_eq!(col(&headers, rec, "output_tokens"), row.usage.output_tokens.to_string());
        assert_eq!(col(&headers, rec, "cost_usd"), usd(row.cost_micros.expect("cost")));
        assert_eq!(col(&headers, rec, "client"), row.client);
        assert!(col(&headers, rec, "started_at").starts_with(&today));
    }
    // The same through a plain request: content type and file name of a download.
    let token = keyhaven::control::token::ControlToken::load_or_create(engine.dir.path()).expect("token");
    let resp = engine
        .http
        .get(engine.url(&format!("/api/calls/export?since={today}&until={today}")))
        .bearer_auth(token.expose())
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/csv; charset=utf-8");
    let disposition = resp.headers()["content-disposition"].to_str().expect("ascii").to_owned();
    assert_eq!(disposition, format!("attachment; filename=\"keyhaven-calls-{today}-to-{today}.csv\""));
    let unauth = engine.http.get(engine.url("/api/calls/export")).send().await.expect("send");
    assert_eq!(unauth.status(), 401);
    // A window before the calls is empty; a bad bound is a 400.
    let (_, empty) = engine.control(reqwest::Method::GET, "/api/calls/export?until=2020-01-01", None).await;
    assert_eq!(parse_csv(&empty).1.len(), 0);
    let (status, _) = engine.control(reqwest::Method::GET, "/api/calls/export?since=last-week", None).await;
    assert_eq!(status, 400);

    // Usage as JSON: one row (today, oa-model, oa, the test client) with the ledger's sums.
    let (status, text) = engine.control(reqwest::Method::GET, "/api/usage/export?format=json", None).await;
    assert_eq!(status, 200, "{text}");
    let usage: serde_json::Value = serde_json::from_str(&text).expect("json");
    let usage = usage.as_array().expect("array");
    assert_eq!(usage.len(), 1, "{usage:?}");
    let cost: i64 = rows.iter().filter_map(|r| r.cost_micros).sum();
    assert_eq!(usage[0]["calls"], 3);
    assert_eq!(usage[0]["cost_micros"], cost);
    assert_eq!(usage[0]["cost_usd"], usd(cost));
    assert_eq!(usage[0]["model"], "oa-model");

    // The Overview's split.
    let (_, text) = engine.control(reqwest::Method::GET, "/api/usage?days=1&groupBy=model", None).await;
    let report: serde_json::Value = serde_json::from_str(&text).expect("json");
    let split: Vec<(String, u64, i64)> = report["costSources"]
        .as_array()
        .expect("costSources")
        .iter()
        .map(|s| {
            (
                s["source"].as_str().unwrap_or("").to_owned(),
                s["calls"].as_u64().unwrap_or(0),
                s["costMicros"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    let want: Vec<(String, u64, i64)> = rows
        .iter()
        .map(|r| (r.cost_source.map_or("", CostSource::as_str).to_owned(), 1, r.cost_micros.unwrap_or(0)))
        .collect();
    assert_eq!(split, want);

    // The CLI prints the same export from the database file.
    let dir = engine.stop().await;
    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_keyhaven"))
            .arg("--data-dir")
            .arg(dir.path())
            .arg("--config")
            .arg(dir.path().join("absent.toml"))
            .args(args)
            .env("RUST_LOG", "warn")
            .output()
            .expect("run keyhaven")
    };
    let out = cli(&["calls", "--csv", "--since", &today]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (cli_headers, cli_records) = parse_csv(&String::from_utf8(out.stdout).expect("utf-8"));
    assert_eq!((cli_headers, cli_records), (headers, records));
    let out = cli(&["calls", "--json", "--since", &format!("{today}T00:00:00Z")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let ids: Vec<&str> = json.as_array().expect("array").iter().filter_map(|c| c["id"].as_str()).collect();
    assert_eq!(ids, rows.iter().map(|r| r.id.as_str()).collect::<Vec<_>>());
    let out = cli(&["usage", "--csv"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (h, recs) = parse_csv(&String::from_utf8(out.stdout).expect("utf-8"));
    assert_eq!(recs.len(), 1);
    assert_eq!(col(&h, &recs[0], "cost_micros"), cost.to_string());
    assert_eq!(col(&h, &recs[0], "day"), today);
    let out = cli(&["calls", "--csv", "--since", "soon"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("RFC 3339"));
}

#[tokio::test]
async fn prices_show_the_table_version_and_each_models_source() {
    let mock = MockUpstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = crate::support::config_text(&mock.url(), "")
        + r#"
[[models]]
name = "cheap"
provider = "oa"
upstream = "gpt-4o-mini"
price = { input = "1.25", output = "2.5" }

[[models]]
name = "unpriced"
provider = "oa"
upstream = "some-local-model"
"#;
    let engine = TestEngine::start_in(dir, &config).await;
    let (status, text) = engine.control(reqwest::Method::GET, "/api/prices", None).await;
    assert_eq!(status, 200, "{text}");
    let report: serde_json::Value = serde_json::from_str(&text).expect("json");
    // The shipped table's version line in src/pricing/prices.toml.
    assert_eq!(report["version"], "2026-12-01");
    assert_eq!(report["currency"], "USD");
    let model = |name: &str| {
        report["models"].as_array().expect("models").iter().find(|m| m["name"] == name).cloned().expect("model")
    };
    // gpt-4o-mini* in the table: 0.15 / 0.60 / 0.075 / 0.15 USD per million tokens.
    let table = model("oa-model");
    assert_eq!(table["source"], "table");
    assert_eq!(
        table["perMtok"],
        serde_json::json!({"input": "0.150000", "output": "0.600000", "cacheRead": "0.075000", "cacheWrite": "0.150000"})
    );
    // The override replaces input and output; the cache prices stay the table's.
    let cheap = model("cheap");
    assert_eq!(cheap["source"], "config");
    assert_eq!(
        cheap["perMtok"],
        serde_json::json!({"input": "1.250000", "output": "2.500000", "cacheRead": "0.075000", "cacheWrite": "0.150000"})
    );
    // A hand-written override without a version: `config-` and 8 hex digits of its amounts.
    let v = cheap["version"].as_str().expect("version");
    assert!(v.starts_with("config-") && v.len() == 15 && v[7..].chars().all(|c| c.is_ascii_hexdigit()), "{v}");
    assert_eq!(table["version"], "2026-12-01");
    let none = model("unpriced");
    assert_eq!(none["source"], "none");
    assert!(none["perMtok"].is_null());
    assert!(none["version"].is_null(), "no price, no version");
    let dir = engine.stop().await;
    std::fs::write(dir.path().join("config.toml"), &config).expect("config");
    let out = Command::new(env!("CARGO_BIN_EXE_keyhaven"))
        .arg("--config")
        .arg(dir.path().join("config.toml"))
        .arg("--data-dir")
        .arg(dir.path())
        .arg("prices")
        .env("RUST_LOG", "warn")
        .output()
        .expect("run keyhaven");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(text.starts_with("Price table 2026-12-01 (USD per million tokens)"), "{text}");
    let cheap_line = text.lines().find(|l| l.starts_with("cheap ")).expect("cheap line");
    assert!(cheap_line.contains("config") && cheap_line.contains("1.250000"), "{cheap_line}");
}

/// The Chat reply's usage (20 input, 5 output tokens) at `input` / `output` micro-USD per million
/// tokens, by hand.
fn text_cost(input: i64, output: i64) -> i64 {
    (20 * input + 5 * output) / 1_000_000
}

async fn chat_call(engine: &TestEngine, mock: &MockUpstream) {
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let r = engine.post(Client::Openai, &request(Client::Openai, "oa-model", false, Case::Text)).await;
    assert_eq!(r.status(), 200);
    r.text().await.expect("body");
}

#[tokio::test]
async fn a_price_override_prices_new_calls_with_its_own_version_and_never_reprices_history() {
    let mock = MockUpstream::start().await;
    let config = crate::support::config_text(&mock.url(), "");
    let keyring = std::sync::Arc::new(keyhaven::secrets::MemoryKeyring::default());
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = TestEngine::start_full(dir, &config, keyring, true, keyhaven::app::EngineExtras::default()).await;
    // Before: the table's gpt-4o-mini price (0.15 / 0.60 USD per million) and version.
    chat_call(&engine, &mock).await;
    let before = engine.wait_calls(1).await[0].summary.clone();
    assert_eq!(before.cost_micros, Some(text_cost(150_000, 600_000)));
    assert_eq!(before.price_version.as_deref(), Some("2026-12-01"));

    let body = serde_json::json!({"input": "1.00", "output": "2.00"});
    let (status, text) = engine.control(reqwest::Method::PUT, "/api/prices/oa-model", Some(body)).await;
    assert_eq!(status, 200, "{text}");
    let report: serde_json::Value = serde_json::from_str(&text).expect("json");
    let model = report["models"].as_array().expect("models").iter().find(|m| m["name"] == "oa-model").cloned();
    let model = model.expect("oa-model");
    assert_eq!(model["source"], "config");
    // The cache prices stay the table's.
    assert_eq!(
        model["perMtok"],
        serde_json::json!({"input": "1.000000", "output": "2.000000", "cacheRead": "0.075000", "cacheWrite": "0.150000"})
    );
    let version = model["version"].as_str().expect("version").to_owned();
    assert!(version.starts_with("override-20") && version.ends_with('Z') && version.len() == 25, "{version}");
    assert_eq!(report["version"], "2026-12-01", "the table's own version is unchanged");
    let file = std::fs::read_to_string(engine.dir.path().join("config.toml")).expect("config file");
    assert!(file.contains(&format!("version = \"{version}\"")), "{file}");

    // After: the override's price and version; the earlier row is untouched.
    chat_call(&engine, &mock).await;
    let calls = engine.wait_calls(2).await;
    let after = calls.iter().find(|c| c.summary.id != before.id).expect("the new call").summary.clone();
    assert_eq!(after.cost_micros, Some(text_cost(1_000_000, 2_000_000)));
    assert_eq!(after.price_version.as_deref(), Some(version.as_str()));
    let old = calls.iter().find(|c| c.summary.id == before.id).expect("the old call").summary.clone();
    assert_eq!((old.cost_micros, old.price_version), (before.cost_micros, before.price_version.clone()));

    // Bad amounts and unknown models are refused; nothing is written.
    let bad = serde_json::json!({"input": "-1", "output": "2"});
    let (status, _) = engine.control(reqwest::Method::PUT, "/api/prices/oa-model", Some(bad)).await;
    assert_eq!(status, 400);
    let (status, _) = engine.control(reqwest::Method::DELETE, "/api/prices/nope", None).await;
    assert_eq!(status, 404);

    // Unset: the table's price and version again.
    let (status, text) = engine.control(reqwest::Method::DELETE, "/api/prices/oa-model", None).await;
    assert_eq!(status, 200, "{text}");
    chat_call(&engine, &mock).await;
    let calls = engine.wait_calls(3).await;
    let third = calls.iter().find(|c| c.summary.id != before.id && c.summary.id != after.id).expect("third");
    assert_eq!(third.summary.cost_micros, Some(text_cost(150_000, 600_000)));
    assert_eq!(third.summary.price_version.as_deref(), Some("2026-12-01"));

    // The command line with no engine running edits the file: `prices` then shows the override.
    let dir = engine.stop().await;
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_keyhaven"))
            .arg("--config")
            .arg(dir.path().join("config.toml"))
            .arg("--data-dir")
            .arg(dir.path())
            .args(args)
            .env("RUST_LOG", "warn")
            .output()
            .expect("run keyhaven");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let said = run(&["prices", "set", "oa-model", "--input", "0.5", "--output", "0.75", "--cache-read", "0.05"]);
    assert!(said.contains("not running"), "{said}");
    let listing = run(&["prices"]);
    let line = listing.lines().find(|l| l.starts_with("oa-model ")).expect("oa-model line");
    assert!(line.contains("config") && line.contains("0.500000") && line.contains("0.050000"), "{line}");
    assert!(line.contains("override-20"), "{line}");
    run(&["prices", "unset", "oa-model"]);
    let listing = run(&["prices"]);
    let line = listing.lines().find(|l| l.starts_with("oa-model ")).expect("oa-model line");
    assert!(line.contains("table") && line.contains("2026-12-01"), "{line}");
}
