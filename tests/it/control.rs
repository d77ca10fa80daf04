//! The control service and its HTTP API against a real engine on port 0 with a real SQLite file
//! and config file: providers and models added through the service serve real calls, which show
//! up in the history and the usage rollups with the right cost and cache hit rate; routing mode,
//! CA status per trust store (fixture keychain), call deletion, retention, client setup; keys
//! never appear in any answer; config edits keep comments; and the PX-9 matrix on `/api/`.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use keyhaven::app::EngineExtras;
use keyhaven::config::RoutingMode;
use keyhaven::control::dto;
use keyhaven::control::token::ControlToken;
use keyhaven::model::{CallFinish, CallStart, CallStatus, Usage};
use keyhaven::proxy::trust::{Cmd, CmdOutput, CommandRunner, TrustEnv, TrustOs};
use keyhaven::secrets::MemoryKeyring;
use keyhaven::setup::{Platform, SetupEnv};
use serde::Serialize;
use serde_json::{Value, json};
use sha1::Digest;

use crate::support::fixtures::{Case, request, upstream_sse};
use crate::support::{CANARY_KEY, Client, MockUpstream, Reply, TestEngine, Up, config_text};

/// A second key, set through the control service.
const CONTROL_CANARY: &str = "sk-control-canary-fedcba9876543210";

/// A stand-in for macOS `security` on the login keychain: keeps the SHA-1 of what was added.
#[derive(Default)]
pub(crate) struct FakeKeychain {
    pub(crate) hashes: Mutex<BTreeSet<String>>,
}

fn sha1_of_pem(path: &str) -> String {
    use base64::Engine as _;
    let pem = std::fs::read_to_string(path).expect("root pem");
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD.decode(b64).expect("base64");
    hex::encode_upper(sha1::Sha1::digest(der))
}

impl CommandRunner for FakeKeychain {
    fn run(&self, cmd: &Cmd) -> std::io::Result<CmdOutput> {
        let mut hashes = self.hashes.lock().expect("hashes");
        let ok = |stdout: String| Ok(CmdOutput { success: true, code: Some(0), stdout, stderr: String::new() });
        match cmd.args.first().map(String::as_str) {
            Some("find-certificate") => ok(hashes.iter().map(|h| format!("SHA-1 hash: {h}\n")).collect()),
            Some("add-trusted-cert") => {
                hashes.insert(sha1_of_pem(cmd.args.last().expect("path")));
                ok(String::new())
            }
            Some("delete-certificate") => {
                let h = cmd.args.iter().skip_while(|a| *a != "-Z").nth(1).cloned().unwrap_or_default();
                hashes.remove(&h);
                ok(String::new())
            }
            _ => Err(std::io::Error::new(std::io::ErrorKind::NotFound, "unknown")),
        }
    }
}

const HEADER: &str = "# Keyhaven test config. This comment must survive every edit.\n";

async fn start(mock: &MockUpstream) -> (TestEngine, Arc<FakeKeychain>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".claude")).expect("home");
    let keychain = Arc::new(FakeKeychain::default());
    let extras = EngineExtras {
        local_offset_s: None,
        trust: Some(TrustEnv {
            os: TrustOs::MacOs,
            root: dir.path().join("fsroot"),
            home: home.clone(),
            runner: keychain.clone(),
        }),
        setup: Some(SetupEnv {
            home,
            platform: Platform::Linux,
            appdata: None,
            data_dir: dir.path().to_path_buf(),
            gateway_url: "http://127.0.0.1:4937".into(),
            proxy_url: "http://127.0.0.1:4938".into(),
        }),
        logs: None,
    };
    let config = format!("{HEADER}{}", config_text(&mock.url(), "retention_days = 30   # keep a month"));
    let engine = TestEngine::start_full(dir, &config, Arc::new(MemoryKeyring::default()), true, extras).await;
    (engine, keychain)
}

/// Every answer of the run, serialised, to check that no key ever appears.
#[derive(Default)]
struct Seen(Vec<String>);

impl Seen {
    fn add<T: Serialize>(&mut self, v: &T) {
        self.0.push(serde_json::to_string(v).expect("serialise"));
    }

    fn check_no_keys(&self) {
        assert!(self.0.len() > 20, "the test saw every kind of answer");
        for s in &self.0 {
            assert!(!s.contains(CANARY_KEY) && !s.contains(CONTROL_CANARY), "a key leaked: {s}");
        }
    }
}

fn config_file(engine: &TestEngine) -> String {
    std::fs::read_to_string(engine.dir.path().join("config.toml")).expect("config")
}

#[tokio::test]
async fn providers_models_calls_usage_routing_retention_through_the_control_service() {
    let mock = MockUpstream::start().await;
    let (engine, _) = start(&mock).await;
    let ctl = engine.handle.control().clone();
    let mut seen = Seen::default();

    // Status and the providers of the file.
    let status = ctl.status().await.expect("status");
    assert_eq!(status.model_count, 3);
    assert_eq!(status.gateway_url, engine.base);
    seen.add(&status);
    let providers = ctl.providers().await.expect("providers");
    assert_eq!(providers.len(), 3);
    assert!(providers.iter().all(|p| p.key.as_ref().is_some_and(|k| k.has_key && k.name == "test-key")));
    seen.add(&providers);

    // A new provider and model, with a key set through the service.
    let p = ctl
        .create_provider(dto::ProviderInput {
            name: "p2".into(),
            kind: dto::ProviderKind::Openai,
            base_url: format!("{}/v1", mock.url()),
            key: None,
            reasoning_content: None,
            max_completion_tokens: None,
            key_value: None,
        })
        .await
        .expect("create provider");
    assert!(p.key.is_none());
    seen.add(&p);
    let key: dto::KeyInput = serde_json::from_value(json!({ "value": CONTROL_CANARY })).expect("key input");
    let info = ctl.set_provider_key("p2", key).await.expect("set key");
    assert_eq!(info, dto::KeyInfo { source: dto::KeySource::Keyring, name: "p2".into(), has_key: true });
    seen.add(&info);
    let m = ctl
        .create_model(dto::ModelInput {
            name: "m2".into(),
            aliases: vec!["m2-alias".into()],
            provider: "p2".into(),
            upstream: "gpt-4o-mini".into(),
            context_window: Some(128_000),
            max_output_tokens: None,
            capabilities: None,
            tools: None,
            price: Some(dto::PriceInput {
                input: Some("1".into()),
                output: Some("2".into()),
                cache_read: Some("0.5".into()),
                cache_write: Some("0".into()),
            }),
        })
        .await
        .expect("create model");
    assert!(m.priced && !m.id.is_empty());
    seen.add(&m);
    let text = config_file(&engine);
    assert!(text.starts_with(HEADER), "comments survive:\n{text}");
    assert!(text.contains("retention_days = 30   # keep a month"), "{text}");
    assert!(text.contains("key = \"keyring:p2\""), "{text}");
    assert!(!text.contains(CONTROL_CANARY), "keys never go into the config file");

    // A real call through the gateway reaches the new model (live catalog, key from the keyring).
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Cache)));
    let resp = engine.post(Client::Openai, &request(Client::Openai, "m2", false, Case::Text)).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap_or_default());
    let auth = mock.seen().last().and_then(|s| s.headers.get("authorization").cloned()).expect("auth header");
    assert_eq!(auth.to_str().expect("ascii"), format!("Bearer {CONTROL_CANARY}"));
    let _ = engine.wait_calls(1).await;

    // History: filter, page, detail.
    let page =
        ctl.calls(dto::CallQuery { provider: Some("p2".into()), ..dto::CallQuery::default() }).await.expect("calls");
    assert_eq!(page.calls.len(), 1);
    assert!(!page.has_more);
    let call = page.calls[0].clone();
    assert_eq!((call.model.as_str(), call.provider.as_deref()), ("m2", Some("p2")));
    assert_eq!((call.input_tokens, call.cache_read_tokens, call.output_tokens), (200, 800, 7));
    assert_eq!(call.cost_micros, Some(614), "200 × $1 + 7 × $2 + 800 × $0.5 per Mtok");
    seen.add(&page);
    let detail = ctl.call(&call.id).await.expect("detail");
    assert!(detail.request_body.as_deref().is_some_and(|b| b.contains("m2")));
    assert!(detail.response_body.is_some());
    seen.add(&detail);

    // Usage by model, provider and client: cost and cache hit rate from the rollups.
    for (group, key) in [
        (dto::UsageGroupBy::Model, "m2"),
        (dto::UsageGroupBy::Provider, "p2"),
        (dto::UsageGroupBy::Client, call.client.as_str()),
    ] {
        let report = ctl.usage(dto::UsageQuery { days: 7, group_by: group, local_today: None }).await.expect("usage");
        let row = report.rows.iter().find(|r| r.key == key).unwrap_or_else(|| panic!("{group:?} {key}: {report:?}"));
        assert_eq!(row.stats.calls, 1);
        assert_eq!(row.stats.cost_micros, 614);
        assert!((row.stats.cache_hit_rate - 0.8).abs() < 1e-9, "800 / (200 + 800 + 0)");
        assert_eq!(row.stats.error_rate, 0.0);
        assert!(row.stats.latency.p50_ms.is_some() && row.stats.latency.p99_ms >= row.stats.latency.p50_ms);
        assert_eq!(report.totals.calls, 1);
        seen.add(&report);
    }
    let by_day = ctl
        .usage(dto::UsageQuery { days: 1, group_by: dto::UsageGroupBy::Day, local_today: None })
        .await
        .expect("usage");
    assert_eq!(by_day.rows.len(), 1);
    assert!(ctl.usage(dto::UsageQuery { days: 0, group_by: dto::UsageGroupBy::Day, local_today: None }).await.is_err());
    // Over time: one point per day and provider, the same numbers as the totals.
    let series = ctl
        .usage_series(dto::UsageSeriesQuery { days: 7, split_by: dto::UsageGroupBy::Provider })
        .await
        .expect("series");
    let point = series.points.iter().find(|p| p.key == "p2").expect("p2 point");
    assert_eq!((point.calls, point.cost_micros, point.input_tokens, point.output_tokens), (1, 614, 200, 7));
    assert_eq!(point.day, series.until, "today");
    seen.add(&series);
    let split_by_day = ctl.usage_series(dto::UsageSeriesQuery { days: 7, split_by: dto::UsageGroupBy::Day }).await;
    assert_eq!(split_by_day.expect_err("refused").kind(), "invalid");

    // Connection test: a 1-token call through the gateway, recorded under keyhaven-control.
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let test = ctl.test_provider("p2").await.expect("test");
    assert!(test.ok, "{test:?}");
    assert_eq!(test.model, "m2");
    let sent = mock.seen().last().expect("seen").body.clone();
    assert!(sent["max_tokens"] == 1 || sent["max_completion_tokens"] == 1, "{sent}");
    seen.add(&test);
    mock.push(Reply::json(401, r#"{"error":{"message":"bad key","type":"invalid_request_error"}}"#));
    let failed = ctl.test_model("m2").await.expect("test");
    assert!(!failed.ok && failed.error_kind.is_some(), "{failed:?}");
    seen.add(&failed);
    let tests = ctl
        .calls(dto::CallQuery { client: Some(keyhaven::control::TEST_CLIENT.into()), ..dto::CallQuery::default() })
        .await
        .expect("calls");
    assert_eq!(tests.calls.len(), 2);

    // Routing mode: live on the proxy and kept in the file.
    let r = ctl.set_routing(dto::RoutingInput { mode: dto::RoutingMode::Upstream }).await.expect("routing");
    let local = |m: &str| dto::ModelRoute { model: m.into(), route: dto::CursorRoute::Local };
    let all_local = vec![local("oa-model"), local("an-model"), local("rs-model"), local("m2")];
    let tab = dto::TabRouting { model: None, fim_models: Vec::new() };
    assert_eq!(r, dto::Routing { mode: dto::RoutingMode::Upstream, proxy_running: true, models: all_local, tab });
    assert_eq!(engine.handle.proxy.as_ref().expect("proxy").mode.get(), RoutingMode::Upstream);
    assert!(config_file(&engine).contains("mode = \"upstream\""));
    seen.add(&r);
    // Per-model hybrid route: kept in the file, live in the catalog, kept by a model edit.
    let r = ctl
        .set_model_route("m2", dto::ModelRouteInput { route: dto::CursorRoute::Upstream })
        .await
        .expect("model route");
    assert_eq!(r.models[3], dto::ModelRoute { model: "m2".into(), route: dto::CursorRoute::Upstream });
    assert_eq!(r.models[..3], [local("oa-model"), local("an-model"), local("rs-model")]);
    assert!(config_file(&engine).contains("cursor = \"upstream\""), "{}", config_file(&engine));
    let live = |name: &str| engine.handle.gateway.catalog().resolve(name).expect("model").model.cursor;
    assert_eq!(live("m2"), keyhaven::config::CursorRoute::Upstream);
    let mut edit = dto::ModelInput {
        name: "m2".into(),
        aliases: vec!["m2-alias".into()],
        provider: "p2".into(),
        upstream: "gpt-4o-mini".into(),
        context_window: Some(128_000),
        max_output_tokens: None,
        capabilities: None,
        tools: None,
        price: m.price.clone(),
    };
    edit.max_output_tokens = Some(1000);
    ctl.update_model("m2", edit).await.expect("update model");
    assert_eq!(live("m2"), keyhaven::config::CursorRoute::Upstream, "a model edit keeps its route");
    let r = ctl.set_model_route("m2", dto::ModelRouteInput { route: dto::CursorRoute::Local }).await.expect("route");
    assert_eq!(r.models[3].route, dto::CursorRoute::Local);
    assert_eq!(live("m2"), keyhaven::config::CursorRoute::Local);
    let missing = ctl.set_model_route("nope", dto::ModelRouteInput { route: dto::CursorRoute::Local }).await;
    assert_eq!(missing.expect_err("unknown model").kind(), "not_found");
    seen.add(&r);

    // Delete a call: gone from the history, still in the usage.
    assert_eq!(ctl.delete_call(&call.id).await.expect("delete").deleted, 1);
    assert_eq!(ctl.delete_call(&call.id).await.expect_err("gone").kind(), "not_found");
    assert!(
        ctl.calls(dto::CallQuery { model: Some("m2".into()), ..Default::default() }).await.expect("c").calls.len() == 2
    );
    let usage = ctl
        .usage(dto::UsageQuery { days: 7, group_by: dto::UsageGroupBy::Provider, local_today: None })
        .await
        .expect("usage");
    assert_eq!(usage.rows.iter().find(|r| r.key == "p2").expect("p2").stats.calls, 3);

    // Retention: an old call is pruned at once; the setting is live and in the file.
    let store = &engine.handle.store;
    let old_ms = 1_600_000_000_000;
    store
        .record_start(CallStart {
            id: "old".into(),
            started_ms: old_ms,
            dialect: "openai_chat".into(),
            client: "curl".into(),
            model: "m2".into(),
            model_id: None,
            provider: Some("p2".into()),
            upstream_model: None,
            stream: false,
            request_body: None,
            conversation_id: None,
            request_id: None,
            session_id: None,
            budget_downgrade: None,
        })
        .await
        .expect("start");
    store
        .record_finish(CallFinish {
            id: "old".into(),
            finished_ms: old_ms + 5,
            status: CallStatus::Ok,
            http_status: Some(200),
            usage: Usage::default(),
            usage_estimated: false,
            cost_micros: None,
            price_version: None,
            cost_source: None,
            ttft_ms: None,
            total_ms: 5,
            retries: 0,
            error_kind: None,
            error_message: None,
            request_body: None,
            response_body: None,
            model_id: None,
            provider: None,
            upstream_model: None,
            notes: Vec::new(),
        })
        .await
        .expect("finish");
    let applied = ctl.set_retention(dto::Retention { days: 7 }).await.expect("retention");
    assert_eq!(applied, dto::RetentionApplied { days: 7, pruned: 1 });
    assert_eq!(ctl.retention().await.expect("r").days, 7);
    assert!(config_file(&engine).contains("retention_days = 7   # keep a month"), "the comment stays");
    seen.add(&applied);

    // Settings: restart-only fields are named; non-loopback is refused.
    let s = ctl
        .set_settings(dto::SettingsInput { capture_bodies: Some(false), ..Default::default() })
        .await
        .expect("settings");
    assert_eq!(s.restart_required, ["captureBodies"]);
    assert!(!s.settings.capture_bodies);
    seen.add(&s);
    let bad = ctl.set_settings(dto::SettingsInput { listen: Some("0.0.0.0:4937".into()), ..Default::default() }).await;
    assert_eq!(bad.expect_err("refused").kind(), "invalid");

    // Deleting: a provider in use is refused; then model and provider go; the key stays write-only.
    assert_eq!(ctl.delete_provider("p2").await.expect_err("in use").kind(), "conflict");
    ctl.delete_model("m2").await.expect("delete model");
    let gone = engine.post(Client::Openai, &request(Client::Openai, "m2", false, Case::Text)).await;
    assert_eq!(gone.status(), 404, "the live catalog no longer has it");
    seen.add(&ctl.delete_provider_key("p2").await.expect("delete key"));
    ctl.delete_provider("p2").await.expect("delete provider");
    assert_eq!(ctl.providers().await.expect("p").len(), 3);
    seen.add(&ctl.models().await.expect("models"));
    seen.add(&ctl.settings().await.expect("settings"));
    seen.add(&ctl.routing().await.expect("routing"));
    seen.add(&ctl.status().await.expect("status"));
    seen.add(&ctl.tail(100));
    let text = config_file(&engine);
    assert!(text.starts_with(HEADER) && !text.contains("p2"), "{text}");

    // Client setup: detection, route and undo through the service.
    let clients = ctl.clients().await.expect("clients");
    assert_eq!(clients.len(), 3);
    let claude = clients.iter().find(|c| c.client == dto::SetupClient::ClaudeCode).expect("claude");
    assert!(claude.installed && !claude.routed);
    seen.add(&clients);
    let routed = ctl.route_client(dto::SetupClient::ClaudeCode, dto::RouteOptions::default()).await.expect("route");
    assert!(routed.changed);
    seen.add(&routed);
    let clients = ctl.clients().await.expect("clients");
    assert!(clients.iter().any(|c| c.client == dto::SetupClient::ClaudeCode && c.routed && c.recorded));
    seen.add(&ctl.undo_client(dto::SetupClient::ClaudeCode).await.expect("undo"));

    seen.check_no_keys();
    engine.stop().await;
}

#[tokio::test]
async fn ca_status_install_rotate_uninstall_per_trust_store() {
    let mock = MockUpstream::start().await;
    let (engine, keychain) = start(&mock).await;
    let ctl = engine.handle.control().clone();
    let states = |s: &[dto::TrustStore]| s.iter().map(|t| t.state).collect::<Vec<_>>();

    let status = ctl.ca_status().await.expect("status");
    assert!(status.exists, "the proxy created the root at start");
    assert!(status.intercept.contains(&"cursor.sh".to_owned()), "{status:?}");
    assert_eq!(states(&status.stores), [dto::TrustState::Absent]);
    let first = status.fingerprint_sha256.clone().expect("fingerprint");

    let installed = ctl.ca_install().await.expect("install");
    assert!(installed.ok);
    assert_eq!(states(&installed.stores), [dto::TrustState::Installed]);
    assert_eq!(states(&installed.status.stores), [dto::TrustState::Present]);
    assert_eq!(keychain.hashes.lock().expect("h").len(), 1);

    let rotated = ctl.ca_rotate().await.expect("rotate");
    assert!(rotated.ok, "{rotated:?}");
    assert_eq!(states(&rotated.stores), [dto::TrustState::Removed, dto::TrustState::Installed]);
    assert_ne!(rotated.status.fingerprint_sha256.as_deref(), Some(first.as_str()));
    assert!(rotated.notes.iter().any(|n| n.contains("Restart Keyhaven")));
    assert_eq!(keychain.hashes.lock().expect("h").len(), 1, "only the new root is trusted");

    let removed = ctl.ca_uninstall().await.expect("uninstall");
    assert_eq!(states(&removed.stores), [dto::TrustState::Removed]);
    assert_eq!(states(&ctl.ca_status().await.expect("status").stores), [dto::TrustState::Absent]);
    engine.stop().await;
}

/// A PX-9 case: its name, the headers that differ from a good request, the expected status.
type Case9 = (&'static str, Vec<(&'static str, String)>, u16);

/// What must not change when a request is refused.
async fn snapshot(engine: &TestEngine) -> (String, u64, usize) {
    let calls = engine.handle.store.count_calls().await.expect("count");
    let providers = engine.handle.control().providers().await.expect("providers").len();
    (config_file(engine), calls, providers)
}

#[tokio::test]
async fn control_api_refuses_foreign_pages_with_no_side_effects() {
    let mock = MockUpstream::start().await;
    let (engine, _) = start(&mock).await;
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let r = engine.post(Client::Openai, &request(Client::Openai, "oa-model", false, Case::Text)).await;
    assert_eq!(r.status(), 200);
    let call_id = engine.wait_calls(1).await[0].summary.id.clone();
    let token = ControlToken::load_or_create(engine.dir.path()).expect("token");
    let port = engine.base.rsplit(':').next().expect("port").to_owned();
    let good_origin = format!("http://127.0.0.1:{port}");
    let before = snapshot(&engine).await;

    let provider = json!({ "name": "evil", "kind": "openai", "baseUrl": "https://evil.example/v1",
        "key": null, "reasoningContent": null, "maxCompletionTokens": null });
    // (method, path, body) of state-changing calls.
    let targets: Vec<(reqwest::Method, String, Value)> = vec![
        (reqwest::Method::POST, "/api/providers".into(), provider),
        (reqwest::Method::DELETE, format!("/api/calls/{call_id}"), Value::Null),
        (reqwest::Method::PUT, "/api/retention".into(), json!({ "days": 1 })),
        (reqwest::Method::DELETE, "/api/providers/oa".into(), Value::Null),
    ];
    let bearer = format!("Bearer {}", token.expose());
    let cases: Vec<Case9> = vec![
        ("host evil", vec![("host", format!("evil.example:{port}"))], 403),
        ("host nip.io", vec![("host", format!("127.0.0.1.nip.io:{port}"))], 403),
        ("host nip.io bare", vec![("host", "127.0.0.1.nip.io".into())], 403),
        ("host 0.0.0.0", vec![("host", format!("0.0.0.0:{port}"))], 403),
        ("origin evil", vec![("origin", "http://evil.example".into())], 403),
        ("origin null", vec![("origin", "null".into())], 403),
        ("origin localhost.evil", vec![("origin", format!("http://localhost.evil.com:{port}"))], 403),
        ("origin app.evil", vec![("origin", "http://app.evil.com".into())], 403),
        ("origin prefix", vec![("origin", format!("{good_origin}.evil.com"))], 403),
        ("origin other port", vec![("origin", "http://127.0.0.1:1".into())], 403),
        ("text/plain", vec![("content-type", "text/plain".into())], 415),
        ("form", vec![("content-type", "application/x-www-form-urlencoded".into())], 415),
        ("no token", vec![("authorization", String::new())], 401),
        ("wrong token", vec![("authorization", format!("Bearer {}", "0".repeat(64)))], 401),
        ("basic auth", vec![("authorization", format!("Basic {}", token.expose()))], 401),
    ];
    for (method, path, body) in &targets {
        for (name, headers, status) in &cases {
            let mut req = engine.http.request(method.clone(), engine.url(path));
            let mut set = BTreeSet::new();
            for (k, v) in headers {
                set.insert(*k);
                if !v.is_empty() {
                    req = req.header(*k, v);
                }
            }
            if !set.contains("content-type") {
                req = req.header("content-type", "application/json");
            }
            if !set.contains("authorization") {
                req = req.header("authorization", &bearer);
            }
            if !body.is_null() {
                req = req.body(serde_json::to_vec(body).expect("json"));
            }
            let resp = req.send().await.expect("send");
            assert_eq!(resp.status().as_u16(), *status, "{name}: {method} {path}");
            assert!(resp.headers().get("access-control-allow-origin").is_none(), "{name}: no CORS, ever");
            let err: dto::ErrorBody = resp.json().await.expect("error body");
            assert!(!err.kind.is_empty());
        }
    }
    // A CORS preflight gets no CORS answer either.
    let pre = engine
        .http
        .request(reqwest::Method::OPTIONS, engine.url("/api/providers"))
        .header("origin", "http://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .expect("send");
    assert!(pre.headers().keys().all(|k| !k.as_str().starts_with("access-control-")), "{:?}", pre.headers());
    assert_eq!(snapshot(&engine).await, before, "no refused request changed anything");

    // The same requests with the right headers (and the UI's own origin) do work.
    let ok = engine
        .http
        .get(engine.url("/api/status"))
        .header("authorization", &bearer)
        .header("origin", &good_origin)
        .send()
        .await
        .expect("send");
    assert_eq!(ok.status(), 200);
    assert!(ok.headers().get("access-control-allow-origin").is_none());
    let status: dto::EngineStatus = ok.json().await.expect("status");
    assert_eq!(status.model_count, 3);
    let del = engine
        .http
        .delete(engine.url(&format!("/api/calls/{call_id}")))
        .header("authorization", &bearer)
        .header("content-type", "application/json")
        .send()
        .await
        .expect("send");
    assert_eq!(del.status(), 200);
    let usage = engine
        .http
        .get(engine.url("/api/usage?days=7&groupBy=model"))
        .header("authorization", &bearer)
        .send()
        .await
        .expect("send");
    assert_eq!(usage.status(), 200);
    let report: dto::UsageReport = usage.json().await.expect("usage");
    assert_eq!(report.totals.calls, 1);
    let bad =
        engine.http.get(engine.url("/api/usage?days=x")).header("authorization", &bearer).send().await.expect("s");
    assert_eq!(bad.status(), 400);
    assert_eq!(bad.json::<dto::ErrorBody>().await.expect("body").kind, "invalid");
    let missing = engine
        .http
        .put(engine.url("/api/models/nope"))
        .header("authorization", &bearer)
        .header("content-type", "application/json")
        .body(r#"{"name":"nope","aliases":[],"provider":"oa","upstream":"x","contextWindow":null,"maxOutputTokens":null,"capabilities":null,"tools":null,"price":null}"#)
        .send()
        .await
        .expect("send");
    assert_eq!(missing.status(), 404);
    let route = engine
        .http
        .put(engine.url("/api/routing/models/an-model"))
        .header("authorization", &bearer)
        .header("content-type", "application/json")
        .body(r#"{"route":"upstream"}"#)
        .send()
        .await
        .expect("send");
    assert_eq!(route.status(), 200);
    let routing: dto::Routing = route.json().await.expect("routing");
    assert_eq!(routing.models[1], dto::ModelRoute { model: "an-model".into(), route: dto::CursorRoute::Upstream });
    engine.stop().await;
}

#[tokio::test]
async fn the_ui_is_served_byte_for_byte_without_the_token() {
    let mock = MockUpstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let ui = dir.path().join("ui");
    std::fs::create_dir_all(ui.join("assets")).expect("ui");
    std::fs::write(ui.join("index.html"), r#"<meta name="keyhaven-token" content="%KEYHAVEN_TOKEN%"><div id=app>"#)
        .expect("index");
    std::fs::write(ui.join("assets").join("app.js"), "console.log(1)").expect("js");
    std::fs::write(dir.path().join("secret.txt"), "outside").expect("secret");
    let extra = format!("ui_dir = {:?}", ui.display().to_string());
    let engine = TestEngine::start_full(
        dir,
        &config_text(&mock.url(), &extra),
        Arc::new(MemoryKeyring::default()),
        false,
        EngineExtras::default(),
    )
    .await;
    let token = ControlToken::load_or_create(engine.dir.path()).expect("token");
    let index = engine.http.get(engine.url("/")).send().await.expect("send");
    assert_eq!(index.status(), 200);
    assert_eq!(index.headers()["x-frame-options"], "DENY");
    assert_eq!(index.headers()["cache-control"], "no-store");
    let html = index.text().await.expect("html");
    assert!(!html.contains(token.expose()), "the page never carries the control token: {html}");
    assert!(html.contains("%KEYHAVEN_TOKEN%"), "an old placeholder is served as it is: {html}");
    let spa = engine.http.get(engine.url("/usage/models")).send().await.expect("send");
    assert!(spa.text().await.expect("html").contains("keyhaven-token"), "client routes get the app");
    let js = engine.http.get(engine.url("/assets/app.js")).send().await.expect("send");
    assert_eq!(js.headers()["content-type"], "text/javascript; charset=utf-8");
    for path in ["/../secret.txt", "/assets/../../secret.txt", "/%2e%2e/secret.txt", "/assets/missing.js"] {
        let r = engine.http.get(engine.url(path)).send().await.expect("send");
        assert_eq!(r.status(), 404, "{path}");
        assert!(!r.text().await.expect("body").contains("outside"), "{path}");
    }
    let rebinding = engine.http.get(engine.url("/")).header("host", "evil.example").send().await.expect("send");
    assert_eq!(rebinding.status(), 403, "DNS rebinding cannot read the page");
    let foreign = engine.http.get(engine.url("/")).header("origin", "http://evil.example").send().await.expect("s");
    assert_eq!(foreign.status(), 403);
    engine.stop().await;
}

/// A control-API request with the token (JSON on every method but GET).
async fn api(engine: &TestEngine, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let (status, text) = engine.control(method, path, body).await;
    (status, if text.is_empty() { Value::Null } else { serde_json::from_str(&text).expect("JSON answer") })
}

/// Every file under `dir` with its bytes, to prove a dry run wrote nothing.
fn tree(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if !p.extension().is_some_and(|x| x == "db" || x == "db-wal" || x == "db-shm") {
                out.push((p.display().to_string(), std::fs::read(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn client_previews_change_nothing_and_show_the_exact_change() {
    let mock = MockUpstream::start().await;
    let (engine, _) = start(&mock).await;
    let home = engine.dir.path().join("home");
    let settings = home.join(".claude").join("settings.json");
    let original = "{\n  // my settings\n  \"theme\": \"dark\"\n}\n";
    std::fs::write(&settings, original).expect("settings");
    let before = tree(engine.dir.path());

    // Route preview: the diff names the file and Keyhaven's keys, the token is redacted, nothing
    // on disk (config, state, token registry, backups) changed.
    let (status, preview) = api(
        &engine,
        reqwest::Method::POST,
        "/api/clients/claudeCode/route/preview",
        Some(json!({ "model": "an-model", "smallModel": null, "disableHttp2": false })),
    )
    .await;
    assert_eq!(status, 200, "{preview}");
    let preview: dto::SetupPreview = serde_json::from_value(preview).expect("preview");
    assert!(preview.changes_file);
    assert_eq!(preview.path, settings.display().to_string());
    for want in ["ANTHROPIC_BASE_URL", "http://127.0.0.1:4937", "ANTHROPIC_MODEL", "an-model", "+"] {
        assert!(preview.diff.contains(want), "{want} in {}", preview.diff);
    }
    assert!(!has_token(&preview.diff) && preview.diff.contains("[REDACTED]"), "{}", preview.diff);
    assert_eq!(tree(engine.dir.path()), before, "a preview writes nothing");

    // The real route writes what the preview showed; undo preview shows the way back.
    let (status, routed) = api(
        &engine,
        reqwest::Method::POST,
        "/api/clients/claudeCode/route",
        Some(json!({ "model": "an-model", "smallModel": null, "disableHttp2": false })),
    )
    .await;
    assert_eq!(status, 200, "{routed}");
    let written = std::fs::read_to_string(&settings).expect("settings");
    assert!(written.contains("// my settings") && written.contains("\"ANTHROPIC_MODEL\": \"an-model\""), "{written}");
    let (again, _) = api(&engine, reqwest::Method::POST, "/api/clients/claudeCode/route/preview", None).await;
    assert_eq!(again, 200);
    let mid = tree(engine.dir.path());
    let (status, undo) = api(&engine, reqwest::Method::POST, "/api/clients/claudeCode/undo/preview", None).await;
    assert_eq!(status, 200, "{undo}");
    let undo: dto::SetupPreview = serde_json::from_value(undo).expect("preview");
    assert!(undo.changes_file && undo.diff.contains("-") && undo.diff.contains("ANTHROPIC_BASE_URL"), "{undo:?}");
    assert!(!has_token(&undo.diff), "{}", undo.diff);
    assert_eq!(tree(engine.dir.path()), mid, "an undo preview writes nothing");
    let (status, _) = api(&engine, reqwest::Method::POST, "/api/clients/claudeCode/undo", None).await;
    assert_eq!(status, 200);
    assert_eq!(std::fs::read_to_string(&settings).expect("settings"), original, "restored byte for byte");
    let (status, err) = api(&engine, reqwest::Method::POST, "/api/clients/claudeCode/undo/preview", None).await;
    assert_eq!((status, err["kind"].as_str()), (409, Some("setup")), "nothing to undo: {err}");
    let (status, _) = api(&engine, reqwest::Method::POST, "/api/clients/nope/route/preview", None).await;
    assert_eq!(status, 404);

    // The generic client: GET never carries a token; the POST issues one and returns it once.
    let (status, env) = api(&engine, reqwest::Method::GET, "/api/clients/env", None).await;
    assert_eq!(status, 200);
    let env: dto::EnvSetup = serde_json::from_value(env).expect("env");
    assert!(!env.token_issued && !has_token(&env.exports));
    assert!(env.exports.contains("export OPENAI_BASE_URL='http://127.0.0.1:4937/v1'"), "{}", env.exports);
    assert!(env.exports.contains("export ANTHROPIC_BASE_URL='http://127.0.0.1:4937'"), "{}", env.exports);
    let (status, issued) = api(&engine, reqwest::Method::POST, "/api/clients/env/route", None).await;
    assert_eq!(status, 200);
    let issued: dto::EnvSetup = serde_json::from_value(issued).expect("env");
    assert!(issued.token_issued && has_token(&issued.exports), "{}", issued.exports);
    let token = issued.vars.iter().find(|v| v.name == "OPENAI_API_KEY").expect("key var").value.clone();
    let (_, again) = api(&engine, reqwest::Method::POST, "/api/clients/env/route", None).await;
    assert_eq!(again["vars"][1]["value"], token.as_str(), "the same token, not a new one each time");
    let (_, shown) = api(&engine, reqwest::Method::GET, "/api/clients/env", None).await;
    assert_eq!(shown["tokenIssued"], true);
    assert!(!shown.to_string().contains(&token), "GET redacts the token");
    let (status, undone) = api(&engine, reqwest::Method::POST, "/api/clients/env/undo", None).await;
    assert_eq!(status, 200);
    assert_eq!(undone["tokenIssued"], false);
    assert!(undone["unsets"].as_str().is_some_and(|u| u.contains("unset OPENAI_BASE_URL")), "{undone}");
    engine.stop().await;
}

/// Whether `text` holds a real client token (`kh-` and 64 hex digits).
fn has_token(text: &str) -> bool {
    text.match_indices("kh-").any(|(i, _)| {
        let rest = &text[i + 3..];
        rest.len() >= 64 && rest.chars().take(64).all(|c| c.is_ascii_hexdigit())
    })
}

#[tokio::test]
async fn calls_record_the_clients_session_and_the_api_filters_and_groups_by_it() {
    const CLAUDE_SESSION: &str = "7f3c2a9e-0d4b-4c41-9d7e-2b8f0e6a1c55";
    const CODEX_SESSION: &str = "0199a5c1-3b7e-7d20-a1f4-5e2c9b8d7a61";
    let mock = MockUpstream::start().await;
    let engine = TestEngine::start(&mock).await;
    let send = |client: Client, model: &str, header: Option<(&str, &str)>, ua: &str| {
        let mut req = engine
            .http
            .post(engine.url(client.path()))
            .header("content-type", "application/json")
            .header("anthropic-version", "2023-06-01")
            .header("user-agent", ua);
        if let Some((k, v)) = header {
            req = req.header(k, v);
        }
        req.json(&request(client, model, false, Case::Text)).send()
    };
    // Claude Code twice, Codex (its `session_id` header) once, a client without a session once,
    // and a header that is not a session id (spaces) once.
    let sends = [
        (Client::Anthropic, Up::Anthropic, Some(("x-claude-code-session-id", CLAUDE_SESSION)), "claude-cli/2.1.3"),
        (Client::Anthropic, Up::Anthropic, Some(("X-Claude-Code-Session-Id", CLAUDE_SESSION)), "claude-cli/2.1.3"),
        (Client::Responses, Up::Responses, Some(("session_id", CODEX_SESSION)), "codex_cli_rs/0.46.0"),
        (Client::Openai, Up::Openai, None, "curl/8"),
        (Client::Openai, Up::Openai, Some(("session_id", "not a session id")), "curl/8"),
    ];
    for (client, up, header, ua) in sends {
        mock.push(Reply::sse(&upstream_sse(up, Case::Text)));
        let resp = send(client, up.model(), header, ua).await.expect("send");
        assert_eq!(resp.status(), 200);
        let _ = resp.text().await;
    }
    let rows = engine.wait_calls(5).await;
    let sessions: BTreeSet<Option<&str>> = rows.iter().map(|r| r.summary.session_id.as_deref()).collect();
    assert_eq!(sessions, BTreeSet::from([None, Some(CLAUDE_SESSION), Some(CODEX_SESSION)]));

    let (status, body) = engine
        .control(reqwest::Method::GET, &format!("/api/calls?limit=0&offset=0&session={CLAUDE_SESSION}"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    let page: Value = serde_json::from_str(&body).expect("json");
    let calls = page["calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 2, "{body}");
    assert!(calls.iter().all(|c| c["sessionId"] == CLAUDE_SESSION && c["client"] == "claude-cli/2.1.3"), "{body}");

    let (status, body) = engine.control(reqwest::Method::GET, "/api/usage/sessions?days=1", None).await;
    assert_eq!(status, 200, "{body}");
    let list: Value = serde_json::from_str(&body).expect("json");
    let got: Vec<(String, String, u64, u64)> = list["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| {
            (
                s["sessionId"].as_str().expect("id").to_owned(),
                s["client"].as_str().expect("client").to_owned(),
                s["calls"].as_u64().expect("calls"),
                s["inputTokens"].as_u64().expect("tokens"),
            )
        })
        .collect();
    // Most recently active first; the fixture streams report 20 input tokens a call.
    assert_eq!(
        got,
        vec![
            (CODEX_SESSION.to_owned(), "codex_cli_rs/0.46.0".to_owned(), 1, 20),
            (CLAUDE_SESSION.to_owned(), "claude-cli/2.1.3".to_owned(), 2, 40),
        ]
    );
    let (status, _) = engine.control(reqwest::Method::GET, "/api/usage/sessions?days=0", None).await;
    assert_eq!(status, 400);
    engine.stop().await;
}
