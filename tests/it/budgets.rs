//! Budgets (issue 17) against a real engine on port 0, a mock upstream and a real SQLite file:
//! spend comes from the ledger (and survives a restart), the soft threshold is reported, a spent
//! `refuse` budget answers 429 `budget_exceeded` in each client's dialect, a `downgrade` budget
//! sends new conversations (only) to the cheaper model and records it, and a call already
//! streaming is never cut; each level (soft, limit) alerts once per period, also across a restart;
//! a call in flight counts with its tokenizer estimate. Expected bodies are written by hand from the vendors' error shapes
//! (OpenAI `{"error": {message, type, param, code}}`, Anthropic `{"type": "error", "error":
//! {type, message}}`) with Keyhaven's `budget_exceeded` type.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::support::{Client, MockUpstream, Reply, TestEngine, config_with};

/// 1000 input and 100 output tokens: at the `big` model's $10 / $30 per million, $0.013.
const CHAT_USAGE: &str = concat!(
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"x\",",
    "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"hello\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"x\",",
    "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],",
    "\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":100,\"total_tokens\":1100}}\n\n",
    "data: [DONE]\n\n",
);

/// One call's cost in micro-USD (see [`CHAT_USAGE`]).
const CALL_MICROS: u64 = 13_000;

const MODELS: &str = r#"
[[models]]
name = "big"
provider = "oa"
upstream = "big-upstream"
price = { input = "10.00", output = "30.00", cache_read = "1.00", cache_write = "10.00" }

[[models]]
name = "small"
provider = "oa"
upstream = "small-upstream"
price = { input = "0.10", output = "0.30", cache_read = "0.01", cache_write = "0.10" }
"#;

/// The test config in the zone +02:00 with `budgets` appended.
fn config(mock: &MockUpstream, budgets: &str) -> String {
    format!("time_zone = \"+02:00\"\n{}", config_with(&mock.url(), "", &format!("{MODELS}\n{budgets}")))
}

fn ask(client: Client, model: &str, text: &str) -> Value {
    match client {
        Client::Openai => json!({"model": model, "messages": [{"role": "user", "content": text}]}),
        Client::Anthropic => {
            json!({"model": model, "max_tokens": 100, "messages": [{"role": "user", "content": text}]})
        }
        Client::Responses => json!({"model": model, "input": text}),
    }
}

/// A Chat request in a conversation under way (an assistant turn already happened).
fn follow_up(model: &str, first: &str) -> Value {
    json!({"model": model, "messages": [
        {"role": "user", "content": first},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "and then?"}
    ]})
}

/// The first instant of next month in +02:00, as Unix ms and RFC 3339 (computed here by hand).
fn next_month_reset() -> (i64, String) {
    let offset = time::UtcOffset::from_hms(2, 0, 0).expect("offset");
    let now = time::OffsetDateTime::now_utc().to_offset(offset);
    let (y, m) = if now.month() == time::Month::December {
        (now.year() + 1, 1u8)
    } else {
        (now.year(), u8::from(now.month()) + 1)
    };
    let date = time::Date::from_calendar_date(y, time::Month::try_from(m).expect("month"), 1).expect("date");
    let at = date.midnight().assume_offset(offset);
    (at.unix_timestamp() * 1000, format!("{y:04}-{m:02}-01T00:00:00+02:00"))
}

async fn call_ok(engine: &TestEngine, mock: &MockUpstream, client: Client, model: &str, text: &str) {
    mock.push(Reply::sse(CHAT_USAGE));
    let resp = engine.post(client, &ask(client, model, text)).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap_or_default());
    let _ = resp.text().await;
}

async fn budgets(engine: &TestEngine) -> Value {
    let (status, body) = engine.control(reqwest::Method::GET, "/api/budgets", None).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

#[tokio::test]
async fn spend_comes_from_the_ledger_survives_a_restart_and_the_soft_threshold_is_reported() {
    let mock = MockUpstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let config = config(
        &mock,
        r#"
[[budgets]]
name = "monthly"
period = "month"
limit_usd = 0.02
soft_percent = 50

[[budgets]]
name = "oa-daily"
provider = "oa"
period = "day"
limit_usd = 1
"#,
    );
    let keyring = Arc::new(keyhaven::secrets::MemoryKeyring::default());
    let engine = TestEngine::start_with_keyring(dir, &config, keyring.clone()).await;
    let report = budgets(&engine).await;
    assert_eq!(report["budgets"][0]["spentMicros"], 0);
    assert_eq!(report["budgets"][0]["level"], "ok");

    call_ok(&engine, &mock, Client::Openai, "big", "hi").await;
    engine.wait_calls(1).await;
    let (reset_ms, _) = next_month_reset();
    let check = |report: &Value, when: &str| {
        let monthly = &report["budgets"][0];
        assert_eq!(monthly["name"], "monthly", "{when}: {report:#}");
        assert_eq!(monthly["scope"], "all");
        assert_eq!(monthly["spentMicros"], CALL_MICROS, "{when}: {report:#}");
        assert_eq!(monthly["inFlightMicros"], 0, "{when}");
        assert_eq!(monthly["percent"], 65, "{when}");
        assert_eq!(monthly["level"], "warning", "{when}: 65 % is past the 50 % soft threshold");
        assert_eq!(monthly["resetMs"], reset_ms, "{when}");
        let daily = &report["budgets"][1];
        assert_eq!(daily["scope"], "provider");
        assert_eq!(daily["target"], "oa");
        assert_eq!(daily["spentMicros"], CALL_MICROS, "{when}");
        assert_eq!(daily["percent"], 1, "{when}");
        assert_eq!(daily["level"], "ok", "{when}");
        assert_eq!(report["todayMicros"], CALL_MICROS, "{when}");
        assert_eq!(report["nearest"], "monthly", "{when}");
        assert_eq!(report["utcOffsetS"], 7200, "{when}");
    };
    check(&budgets(&engine).await, "after the call");

    // A new process on the same database: the spend is read back from the ledger.
    let dir = engine.stop().await;
    let engine = TestEngine::start_with_keyring(dir, &config, keyring).await;
    check(&budgets(&engine).await, "after a restart");
    engine.stop().await;
}

#[tokio::test]
async fn a_spent_refuse_budget_answers_429_budget_exceeded_in_each_dialect() {
    let mock = MockUpstream::start().await;
    let config = config(
        &mock,
        r#"
[[budgets]]
name = "cap"
limit_usd = 0.01
on_limit = "refuse"
"#,
    );
    let engine = TestEngine::start_in(tempfile::tempdir().expect("dir"), &config).await;
    call_ok(&engine, &mock, Client::Openai, "big", "hi").await;
    engine.wait_calls(1).await;

    let (_, reset_at) = next_month_reset();
    let message = format!(
        "Keyhaven budget `cap` is used up (limit $0.01 per month); new calls are refused until it resets at \
         {reset_at}. Raise the limit or change the budget on the dashboard (Budgets)"
    );
    let openai =
        json!({"error": {"message": message, "type": "budget_exceeded", "param": null, "code": "budget_exceeded"}});
    let anthropic = json!({"type": "error", "error": {"type": "budget_exceeded", "message": message}});
    for (client, want) in [(Client::Openai, &openai), (Client::Anthropic, &anthropic), (Client::Responses, &openai)] {
        for stream in [false, true] {
            let mut body = ask(client, "small", "hi again");
            body["stream"] = json!(stream);
            let resp = engine.post(client, &body).await;
            assert_eq!(resp.status(), 429, "{client:?} stream={stream}");
            assert_eq!(resp.headers().get("x-should-retry").and_then(|v| v.to_str().ok()), Some("false"));
            let got: Value = resp.json().await.expect("json body");
            assert_eq!(&got, want, "{client:?} stream={stream}");
        }
    }
    assert_eq!(mock.seen().len(), 1, "refused calls never reach the upstream");
    let calls = engine.wait_calls(7).await;
    let refused: Vec<_> = calls.iter().filter(|c| c.summary.error_kind.as_deref() == Some("budget_exceeded")).collect();
    assert_eq!(refused.len(), 6, "every refusal has its row");
    assert!(refused.iter().all(|c| c.summary.http_status == Some(429) && c.summary.cost_micros.unwrap_or(0) == 0));
    engine.stop().await;
}

#[tokio::test]
async fn a_downgrade_budget_moves_new_conversations_only_and_records_it() {
    let mock = MockUpstream::start().await;
    let config = config(
        &mock,
        r#"
[[budgets]]
name = "big-cap"
model = "big"
period = "week"
limit_usd = 0.01
on_limit = "downgrade"
downgrade_to = "small"
"#,
    );
    let engine = TestEngine::start_in(tempfile::tempdir().expect("dir"), &config).await;
    call_ok(&engine, &mock, Client::Openai, "big", "first task").await;
    assert_eq!(mock.seen()[0].body["model"], "big-upstream");

    // A new conversation: the cheaper model, recorded on the row.
    call_ok(&engine, &mock, Client::Openai, "big", "second task").await;
    assert_eq!(mock.seen()[1].body["model"], "small-upstream", "a new conversation is downgraded");
    let calls = engine.wait_calls(2).await;
    let row = &calls[0].summary;
    assert_eq!(row.model, "big", "the row keeps what the client asked for");
    assert_eq!(row.budget_downgrade.as_deref(), Some("small"));
    assert_eq!(row.upstream_model.as_deref(), Some("small-upstream"));
    assert!(calls[1].summary.budget_downgrade.is_none());

    // A conversation that was under way before the limit keeps its model...
    mock.push(Reply::sse(CHAT_USAGE));
    let resp = engine.post(Client::Openai, &follow_up("big", "first task")).await;
    assert_eq!(resp.status(), 200);
    let _ = resp.text().await;
    assert_eq!(mock.seen()[2].body["model"], "big-upstream", "never switched mid-conversation");

    // ...and the one that started downgraded stays on the cheaper model.
    mock.push(Reply::sse(CHAT_USAGE));
    let resp = engine.post(Client::Openai, &follow_up("big", "second task")).await;
    assert_eq!(resp.status(), 200);
    let _ = resp.text().await;
    assert_eq!(mock.seen()[3].body["model"], "small-upstream");
    let calls = engine.wait_calls(4).await;
    assert_eq!(calls[0].summary.budget_downgrade.as_deref(), Some("small"));
    assert!(calls[1].summary.budget_downgrade.is_none());

    // Other models are not limited by this budget.
    let (status, body) = engine.control(reqwest::Method::GET, "/api/budgets", None).await;
    assert_eq!(status, 200);
    let report: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(report["budgets"][0]["level"], "exceeded", "{report:#}");
    assert_eq!(report["budgets"][0]["onLimit"], "downgrade");
    engine.stop().await;
}

#[tokio::test]
async fn a_call_already_streaming_is_not_cut_when_the_limit_is_reached() {
    let mock = MockUpstream::start().await;
    let config = config(
        &mock,
        r#"
[[budgets]]
name = "cap"
period = "day"
limit_usd = 0.01
"#,
    );
    let engine = TestEngine::start_in(tempfile::tempdir().expect("dir"), &config).await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    mock.push(Reply::sse(CHAT_USAGE).gate(1, gate.clone()));
    let mut body = ask(Client::Openai, "big", "long answer");
    body["stream"] = json!(true);
    let streaming = engine.post(Client::Openai, &body).await;
    assert_eq!(streaming.status(), 200);

    // Meanwhile another call spends the budget.
    call_ok(&engine, &mock, Client::Openai, "big", "quick one").await;
    let mut next = ask(Client::Openai, "big", "one more");
    next["stream"] = json!(true);
    assert_eq!(engine.post(Client::Openai, &next).await.status(), 429, "new calls are refused now");

    // The stream that was running finishes whole.
    gate.add_permits(1);
    let text = streaming.text().await.expect("the stream ends");
    assert!(text.contains("\"finish_reason\":\"stop\""), "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let calls = engine.wait_calls(3).await;
    let first = calls.iter().find(|c| c.summary.stream && c.summary.error_kind.is_none()).expect("the streamed call");
    assert_eq!(first.summary.status, keyhaven::model::CallStatus::Ok);
    assert_eq!(first.summary.cost_micros, Some(CALL_MICROS as i64));
    engine.stop().await;
}

#[tokio::test]
async fn budgets_are_edited_through_the_control_api_and_written_to_the_config_file() {
    let mock = MockUpstream::start().await;
    let config = config(&mock, "");
    let keyring = Arc::new(keyhaven::secrets::MemoryKeyring::default());
    let engine = TestEngine::start_full(
        tempfile::tempdir().expect("dir"),
        &config,
        keyring,
        true,
        keyhaven::app::EngineExtras::default(),
    )
    .await;
    call_ok(&engine, &mock, Client::Openai, "big", "hi").await;
    engine.wait_calls(1).await;

    let input = json!({"name": "team", "scope": "model", "target": "big", "period": "month", "limitUsd": 0.01,
                       "onLimit": "downgrade", "downgradeTo": "small"});
    let (status, body) = engine.control(reqwest::Method::POST, "/api/budgets", Some(input)).await;
    assert_eq!(status, 200, "{body}");
    let report: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(report["budgets"][0]["spentMicros"], CALL_MICROS, "seeded from the ledger: {report:#}");
    assert_eq!(report["budgets"][0]["level"], "exceeded");
    let file = std::fs::read_to_string(engine.dir.path().join("config.toml")).expect("config");
    let parsed = keyhaven::config::load_str("config.toml", &file).expect("valid");
    assert_eq!(parsed.budgets.len(), 1);
    assert_eq!(parsed.budgets[0].model.as_deref(), Some("big"));
    assert_eq!(parsed.budgets[0].downgrade_to.as_deref(), Some("small"));

    // Applied at once: a new conversation goes to the cheaper model.
    call_ok(&engine, &mock, Client::Openai, "big", "next").await;
    assert_eq!(mock.seen()[1].body["model"], "small-upstream");

    // A bad budget is refused with the validation's words, and nothing is written.
    let bad =
        json!({"name": "x", "scope": "model", "target": "nope", "period": "day", "limitUsd": 1, "onLimit": "refuse"});
    let (status, body) = engine.control(reqwest::Method::POST, "/api/budgets", Some(bad)).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("unknown model or group `nope`"), "{body}");

    let (status, body) = engine.control(reqwest::Method::DELETE, "/api/budgets/team", None).await;
    assert_eq!(status, 200, "{body}");
    let file = std::fs::read_to_string(engine.dir.path().join("config.toml")).expect("config");
    assert!(keyhaven::config::load_str("config.toml", &file).expect("valid").budgets.is_empty());
    engine.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_gets_a_visible_notice_when_a_budget_refuses() {
    use keyhaven::cursor::protocol::aiserver;
    use keyhaven::cursor::protocol::connect::Code;

    use crate::cursor_sim::{FrameReader, run_request, sim_with};
    // gpt-4o-mini at the shipped table's price: one call costs more than 1 µ$.
    let s = sim_with(
        &format!(
            "[proxy]\nmode = \"local\"\n{}\n[[budgets]]\nname = \"cap\"\nlimit_usd = 0.000001\n",
            crate::cursor_sim::SHORT
        ),
        "",
    )
    .await;
    s.mock.push(Reply::sse(CHAT_USAGE));
    let resp = s.te.post(Client::Openai, &ask(Client::Openai, "oa-model", "spend")).await;
    assert_eq!(resp.status(), 200);
    let _ = resp.text().await;
    s.te.wait_calls(1).await;

    s.append("r-budget", 0, &run_request("oa-model", "hi")).await;
    let (_, end) = FrameReader::new(s.run_sse("r-budget").await).rest().await;
    let err = end.error.expect("an error end-stream");
    assert_eq!(err.code, Code::ResourceExhausted);
    assert_eq!(err.cursor_details().expect("ErrorDetails").error, aiserver::error_details::Error::RateLimited as i32);
    assert!(err.message.contains("Keyhaven budget reached"), "{err:?}");
    assert!(err.message.contains("budget `cap` is used up"), "{err:?}");
    assert_eq!(s.mock.seen().len(), 1, "the refused run never reached the upstream");
    s.te.stop().await;
}

#[tokio::test]
async fn each_level_alerts_once_per_period_and_a_restart_does_not_alert_again() {
    let mock = MockUpstream::start().await;
    // One call costs $0.013: 43 %, 86 %, 130 % of $0.03.
    let config = config(
        &mock,
        r#"
[[budgets]]
name = "daily"
period = "day"
limit_usd = 0.03
soft_percent = 40
"#,
    );
    let dir = tempfile::tempdir().expect("dir");
    let keyring = Arc::new(keyhaven::secrets::MemoryKeyring::default());
    let engine = TestEngine::start_with_keyring(dir, &config, keyring.clone()).await;
    assert_eq!(budgets(&engine).await["alerts"], json!([]));
    let levels = |report: &Value| -> Vec<(String, String)> {
        report["alerts"]
            .as_array()
            .expect("alerts")
            .iter()
            .map(|a| (a["budget"].as_str().unwrap_or("").to_owned(), a["level"].as_str().unwrap_or("").to_owned()))
            .collect()
    };
    call_ok(&engine, &mock, Client::Openai, "big", "one").await;
    engine.wait_calls(1).await;
    let report = budgets(&engine).await;
    assert_eq!(levels(&report), [("daily".to_owned(), "soft".to_owned())], "{report:#}");
    let soft = &report["alerts"][0];
    assert_eq!(soft["spentUsd"], 0.013);
    assert_eq!(soft["limitUsd"], 0.03);
    assert_eq!(soft["percent"], 43);
    assert_eq!(soft["onLimit"], "refuse");
    assert_eq!(soft["resetMs"], report["budgets"][0]["resetMs"]);
    assert_eq!(soft["periodStartMs"], report["budgets"][0]["periodStartMs"]);

    call_ok(&engine, &mock, Client::Openai, "big", "two").await;
    engine.wait_calls(2).await;
    assert_eq!(levels(&budgets(&engine).await).len(), 1, "86 %: no second soft alert");

    call_ok(&engine, &mock, Client::Openai, "big", "three").await;
    engine.wait_calls(3).await;
    let report = budgets(&engine).await;
    assert_eq!(
        levels(&report),
        [("daily".to_owned(), "soft".to_owned()), ("daily".to_owned(), "hard".to_owned())],
        "{report:#}"
    );
    assert_eq!(report["alerts"][1]["percent"], 130);
    // Refused calls cost nothing and raise nothing more.
    let refused = engine.post(Client::Openai, &ask(Client::Openai, "big", "four")).await;
    assert_eq!(refused.status(), 429);
    let _ = refused.text().await;
    assert_eq!(levels(&budgets(&engine).await).len(), 2);

    // A new process on the same database, the same period: the ledger remembers both alerts, so
    // they are listed again as they were raised (same time) and not raised again.
    let before = budgets(&engine).await["alerts"].clone();
    let dir = engine.stop().await;
    let engine = TestEngine::start_with_keyring(dir, &config, keyring).await;
    let report = budgets(&engine).await;
    assert_eq!(report["budgets"][0]["level"], "exceeded", "{report:#}");
    let at = |alerts: &Value| -> Vec<(Value, Value, Value)> {
        alerts
            .as_array()
            .expect("alerts")
            .iter()
            .map(|a| (a["budget"].clone(), a["level"].clone(), a["atMs"].clone()))
            .collect()
    };
    assert_eq!(at(&report["alerts"]), at(&before), "listed as raised before the restart, not raised again");
    engine.stop().await;
}

#[tokio::test]
async fn a_call_in_flight_counts_with_its_input_tokens_not_its_bytes() {
    let mock = MockUpstream::start().await;
    let config = config(&mock, "[[budgets]]\nname = \"cap\"\nlimit_usd = 100\n");
    let engine = TestEngine::start_in(tempfile::tempdir().expect("dir"), &config).await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    mock.push(Reply::sse(CHAT_USAGE).gate(1, gate.clone()));
    // "hello" and then " hello" 999 times: 6,000 bytes (1,500 at bytes / 4) but one o200k token
    // per word, so about 1,000 tokens plus a few of message framing; at the big model's $10 per
    // million input tokens, about $0.010.
    let text = format!("hello{}", " hello".repeat(999));
    let mut body = ask(Client::Openai, "big", &text);
    body["stream"] = json!(true);
    let streaming = engine.post(Client::Openai, &body).await;
    assert_eq!(streaming.status(), 200);
    let in_flight = budgets(&engine).await["budgets"][0]["inFlightMicros"].as_u64().expect("in flight");
    assert!((10_000..=10_100).contains(&in_flight), "{in_flight} µ$: 1,000 to 1,010 tokens at $10/M");
    gate.add_permits(1);
    streaming.text().await.expect("the stream ends");
    engine.wait_calls(1).await;
    let report = budgets(&engine).await;
    assert_eq!(report["budgets"][0]["inFlightMicros"], 0);
    assert_eq!(report["budgets"][0]["spentMicros"], CALL_MICROS);
    engine.stop().await;
}

/// Records a finished call started at `started_ms` costing `cost` micro-USD, straight into the
/// engine's store.
async fn recorded(engine: &TestEngine, id: &str, started_ms: i64, cost: i64) {
    use keyhaven::model::{CallFinish, CallStart, CallStatus, Usage};
    let store = &engine.handle.store;
    let start = CallStart {
        id: id.into(),
        started_ms,
        dialect: "openai_chat".into(),
        client: "curl".into(),
        model: "big".into(),
        model_id: None,
        provider: Some("oa".into()),
        upstream_model: None,
        stream: false,
        request_body: None,
        conversation_id: None,
        request_id: None,
        session_id: None,
        budget_downgrade: None,
    };
    store.record_start(start).await.expect("start");
    let finish = CallFinish {
        id: id.into(),
        finished_ms: started_ms + 700,
        status: CallStatus::Ok,
        http_status: Some(200),
        usage: Usage { input_tokens: 100, output_tokens: 10, ..Usage::default() },
        usage_estimated: false,
        cost_micros: Some(cost),
        price_version: None,
        cost_source: None,
        ttft_ms: None,
        total_ms: 700,
        retries: 0,
        error_kind: None,
        error_message: None,
        request_body: None,
        response_body: None,
        model_id: None,
        provider: None,
        upstream_model: None,
        notes: Vec::new(),
    };
    store.record_finish(finish).await.expect("finish");
}

#[tokio::test]
async fn the_overviews_today_is_the_day_in_the_budgets_zone() {
    let mock = MockUpstream::start().await;
    let engine = TestEngine::start_in(tempfile::tempdir().expect("dir"), &config(&mock, "")).await;
    // Midnight today at +02:00 (the config's time_zone), computed here: 22:00 UTC the day before.
    let offset = time::UtcOffset::from_hms(2, 0, 0).expect("offset");
    let today = time::OffsetDateTime::now_utc().to_offset(offset).date();
    let midnight = today.midnight().assume_offset(offset).unix_timestamp() * 1000;
    recorded(&engine, "before-midnight", midnight - 60_000, 500).await;
    recorded(&engine, "after-midnight", midnight + 60_000, 1_000).await;

    let (status, body) =
        engine.control(reqwest::Method::GET, "/api/usage?days=1&groupBy=model&localToday=true", None).await;
    assert_eq!(status, 200, "{body}");
    let report: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(report["timeZone"], "UTC+02:00");
    assert_eq!(report["since"], today.to_string());
    assert_eq!(report["until"], today.to_string());
    assert_eq!(report["totals"]["calls"], 1, "{report:#}");
    assert_eq!(report["totals"]["costMicros"], 1_000);
    assert_eq!(report["totals"]["inputTokens"], 100);
    assert_eq!(report["totals"]["latency"]["p50Ms"], 750, "700 ms is in the bucket up to 750 ms: {report:#}");
    assert_eq!(report["rows"][0]["key"], "big");
    assert_eq!(report["rows"][0]["stats"]["calls"], 1);

    let (status, body) = engine.control(reqwest::Method::GET, "/api/usage?days=1&groupBy=model", None).await;
    assert_eq!(status, 200, "{body}");
    let utc: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(utc["timeZone"], "UTC");
    assert_eq!(utc["since"], time::OffsetDateTime::now_utc().date().to_string());
    engine.stop().await;
}
