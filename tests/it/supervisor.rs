//! The tray app's engine lifecycle (`app::supervisor`) against real engines on port 0: start,
//! stop and start again (the config file is re-read), the error state of a failed start and its
//! recovery, stop cancels and records an in-flight call, restore on stop puts routed clients
//! back (and leaves them when off), the in-process control transport answers like `/api/`, and
//! no start after the final shutdown.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keyhaven::app::EngineExtras;
use keyhaven::app::supervisor::{Autostart, ConfigSource, Supervisor, SupervisorOptions};
use keyhaven::config::{EngineConfig, load_str};
use keyhaven::control::dto::{self, EngineState};
use keyhaven::secrets::{Keyring, MemoryKeyring, Secrets};
use keyhaven::setup::{Platform, SetupEnv};
use secrecy::SecretString;
use serde_json::{Value, json};

use crate::support::fixtures::{Case, request, upstream_sse};
use crate::support::{CANARY_KEY, Client, MockUpstream, Reply, Up, config_text};

struct Fixture {
    dir: tempfile::TempDir,
    home: PathBuf,
    /// Overrides the listen address of the next starts (`None`: port 0).
    listen: Arc<Mutex<Option<std::net::SocketAddr>>>,
    supervisor: Supervisor,
    autostart: Arc<FakeAutostart>,
}

#[derive(Default)]
struct FakeAutostart(AtomicBool);

impl Autostart for FakeAutostart {
    fn is_enabled(&self) -> Result<bool, String> {
        Ok(self.0.load(Ordering::SeqCst))
    }

    fn set_enabled(&self, on: bool) -> Result<(), String> {
        self.0.store(on, Ordering::SeqCst);
        Ok(())
    }
}

impl Fixture {
    fn new(mock: &MockUpstream) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join(".claude")).expect("home");
        let config_path = dir.path().join("config.toml");
        std::fs::write(&config_path, config_text(&mock.url(), "")).expect("config");
        let keyring = Arc::new(MemoryKeyring::default());
        keyring.set("test-key", &SecretString::from(CANARY_KEY)).expect("key");
        let listen = Arc::new(Mutex::new(None));
        let data = dir.path().to_path_buf();
        let l = listen.clone();
        // Re-reads the file on every start, as the app's source does.
        let source: ConfigSource = Arc::new(move || {
            let text = std::fs::read_to_string(&config_path).map_err(|e| e.to_string())?;
            let file = load_str("config.toml", &text).map_err(|e| e.to_string())?;
            Ok(EngineConfig {
                config_path: Some(config_path.clone()),
                database_path: data.join("keyhaven.db"),
                file,
                listen: Some(l.lock().expect("listen").unwrap_or_else(|| "127.0.0.1:0".parse().expect("addr"))),
                ca_dir: data.join("ca"),
                proxy_listen: Some("127.0.0.1:0".parse().expect("addr")),
                upstream_overrides: Default::default(),
            })
        });
        let extras = EngineExtras {
            local_offset_s: None,
            trust: None,
            setup: Some(SetupEnv {
                home: home.clone(),
                platform: Platform::Linux,
                appdata: None,
                data_dir: dir.path().to_path_buf(),
                gateway_url: "http://127.0.0.1:4937".into(),
                proxy_url: "http://127.0.0.1:4938".into(),
            }),
            logs: None,
        };
        let autostart = Arc::new(FakeAutostart::default());
        let supervisor = Supervisor::new(SupervisorOptions {
            config: source,
            secrets: Secrets::new(keyring, Arc::new(|_| None)),
            extras,
            grace: Duration::from_secs(5),
            autostart: Some(autostart.clone()),
        });
        Fixture { dir, home, listen, supervisor, autostart }
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let r = self.supervisor.request(method, path, body).await;
        (r.status, r.body)
    }

    fn config_file(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }
}

async fn reachable(url: &str) -> bool {
    reqwest::Client::new().get(format!("{url}/v1/models")).send().await.is_ok()
}

#[tokio::test]
async fn start_stop_start_follows_state_and_rereads_the_config() {
    let mock = MockUpstream::start().await;
    let f = Fixture::new(&mock);
    let mut changes = f.supervisor.subscribe();
    assert_eq!(f.supervisor.status().state, EngineState::Stopped);
    let (status, body) = f.call("GET", "/api/status", None).await;
    assert_eq!((status, body["kind"].as_str()), (503, Some("unavailable")), "stopped: {body}");

    f.supervisor.start().await.expect("start");
    let s = f.supervisor.status();
    assert_eq!(s.state, EngineState::Running);
    let url = s.gateway_url.clone().expect("url");
    assert!(changes.has_changed().expect("watch"), "the tray hears about it");
    changes.mark_unchanged();
    assert!(reachable(&url).await);
    let (status, body) = f.call("GET", "/api/status", None).await;
    assert_eq!(status, 200);
    assert_eq!(body["gatewayUrl"], json!(url));
    assert_eq!(body["modelCount"], json!(3));
    // Starting a running engine changes nothing.
    let again = f.supervisor.start().await.expect("start again");
    assert_eq!(format!("http://{}", again.addr), url);

    let (status, body) = f.call("POST", "/api/app/stop", None).await;
    assert_eq!(status, 200);
    assert_eq!(body["state"], json!("stopped"));
    assert_eq!(body["lastStop"]["drained"], json!(true));
    assert!(!reachable(&url).await, "the listener is closed after stop");
    assert!(f.supervisor.handle().is_none());
    let (status, body) = f.call("GET", "/api/models", None).await;
    assert_eq!(status, 503, "{body}");
    assert!(body["message"].as_str().is_some_and(|m| m.contains("stopped")));

    // An edit made while stopped applies on the next start.
    let text = std::fs::read_to_string(f.config_file()).expect("config");
    std::fs::write(f.config_file(), text.replace("[retry]", "retention_days = 12\n\n[retry]")).expect("edit");
    let (status, body) = f.call("POST", "/api/app/start", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], json!("running"));
    let (_, settings) = f.call("GET", "/api/settings", None).await;
    assert_eq!(settings["retentionDays"], json!(12));
    f.supervisor.shutdown().await;
}

#[tokio::test]
async fn a_failed_start_is_the_error_state_until_a_start_succeeds() {
    let mock = MockUpstream::start().await;
    let f = Fixture::new(&mock);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    *f.listen.lock().expect("listen") = Some(taken.local_addr().expect("addr"));

    let err = f.supervisor.start().await.expect_err("the port is taken");
    assert_eq!(err.kind(), "bind");
    let s = f.supervisor.status();
    assert_eq!(s.state, EngineState::Error);
    assert!(s.error.as_deref().is_some_and(|e| e.contains("cannot listen")), "{s:?}");
    let (status, body) = f.call("GET", "/api/status", None).await;
    assert_eq!(status, 503);
    assert!(body["message"].as_str().is_some_and(|m| m.contains("cannot listen")), "{body}");
    let (status, body) = f.call("POST", "/api/app/start", None).await;
    assert_eq!((status, body["kind"].as_str()), (500, Some("bind")));

    drop(taken);
    *f.listen.lock().expect("listen") = None;
    f.supervisor.start().await.expect("starts once the port is free");
    let s = f.supervisor.status();
    assert_eq!((s.state, s.error), (EngineState::Running, None));

    // A broken config file is an error too, with the file's message.
    f.supervisor.stop().await;
    std::fs::write(f.config_file(), "[server]\nlisten = 5\n").expect("break");
    assert_eq!(f.supervisor.start().await.expect_err("broken").kind(), "config");
    assert_eq!(f.supervisor.status().state, EngineState::Error);
    // Stop from the error state goes back to stopped.
    f.supervisor.stop().await;
    assert_eq!(f.supervisor.status().state, EngineState::Stopped);
}

#[tokio::test]
async fn stop_cancels_and_records_an_in_flight_call() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)).delay(Duration::from_millis(400)));
    let f = Fixture::new(&mock);
    let handle = f.supervisor.start().await.expect("start");
    let url = format!("http://{}{}", handle.addr, Client::Openai.path());
    let body = request(Client::Openai, Up::Openai.model(), true, Case::Text);
    let resp = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .json(&body)
        .send()
        .await
        .expect("the stream starts");
    assert_eq!(resp.status(), 200);
    let report = f.supervisor.stop().await;
    assert!(report.drained, "the call was cancelled within the grace period");
    let _ = resp.text().await;
    let rows =
        handle.store.recent_calls(keyhaven::store::CallFilter { limit: 10, ..Default::default() }).await.expect("rows");
    assert_eq!(rows.len(), 1);
    assert_ne!(rows[0].status, keyhaven::model::CallStatus::InFlight, "the row is final: {:?}", rows[0].status);
}

fn claude_settings(f: &Fixture) -> PathBuf {
    f.home.join(".claude").join("settings.json")
}

const CLAUDE_BEFORE: &str = "{\n  // the user's own settings\n  \"theme\": \"dark\"\n}\n";

#[tokio::test]
async fn restore_on_stop_puts_routed_clients_back() {
    let mock = MockUpstream::start().await;
    let f = Fixture::new(&mock);
    std::fs::write(claude_settings(&f), CLAUDE_BEFORE).expect("claude settings");
    f.supervisor.start().await.expect("start");

    // Off (the default): a stop leaves the client routed.
    let (status, body) = f.call("POST", "/api/clients/claudeCode/route", None).await;
    assert_eq!(status, 200, "{body}");
    let routed = std::fs::read_to_string(claude_settings(&f)).expect("read");
    assert!(routed.contains("ANTHROPIC_BASE_URL"));
    let report = f.supervisor.stop().await;
    assert!(report.restored.is_empty());
    assert_eq!(std::fs::read_to_string(claude_settings(&f)).expect("read"), routed);

    // On: set through the same settings route the UI uses; the next stop restores.
    f.supervisor.start().await.expect("start");
    let (status, body) = f.call("PUT", "/api/settings", Some(json!({ "restoreOnStop": true }))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["settings"]["restoreOnStop"], json!(true));
    assert!(std::fs::read_to_string(f.config_file()).expect("config").contains("restore_on_stop = true"));
    let report = f.supervisor.stop().await;
    assert_eq!(report.restored, vec!["Claude Code".to_owned()], "{report:?}");
    assert!(report.notes.is_empty(), "{report:?}");
    assert_eq!(std::fs::read_to_string(claude_settings(&f)).expect("read"), CLAUDE_BEFORE, "byte-identical");
    assert_eq!(f.supervisor.status().last_stop.map(|s| s.restored), Some(vec!["Claude Code".to_owned()]));

    // The setting survives the restart (it is in the file); Quit restores too.
    f.supervisor.start().await.expect("start");
    let (_, settings) = f.call("GET", "/api/settings", None).await;
    assert_eq!(settings["restoreOnStop"], json!(true));
    let (status, _) = f.call("POST", "/api/clients/claudeCode/route", None).await;
    assert_eq!(status, 200);
    let report = f.supervisor.shutdown().await;
    assert_eq!(report.restored, vec!["Claude Code".to_owned()]);
    assert_eq!(std::fs::read_to_string(claude_settings(&f)).expect("read"), CLAUDE_BEFORE);
}

#[tokio::test]
async fn in_process_control_answers_like_the_http_api() {
    let mock = MockUpstream::start().await;
    let f = Fixture::new(&mock);
    let handle = f.supervisor.start().await.expect("start");
    let token = std::fs::read_to_string(f.dir.path().join("control-token")).expect("token");
    let http = reqwest::Client::new();
    let base = format!("http://{}", handle.addr);

    for (method, path, body) in [
        ("GET", "/api/routing", None),
        ("PUT", "/api/routing", Some(json!({ "mode": "upstream" }))),
        ("GET", "/api/routing", None),
        ("GET", "/api/calls?limit=5&offset=0", None),
        ("PUT", "/api/routing", Some(json!({ "mode": "sideways" }))),
        ("GET", "/api/models/none/nothing", None),
        ("DELETE", "/api/models/no-such-model", None),
    ] {
        let local = f.supervisor.request(method, path, body.clone()).await;
        let mut req = http
            .request(method.parse().expect("method"), format!("{base}{path}"))
            .header("authorization", format!("Bearer {}", token.trim()))
            .header("content-type", "application/json");
        if let Some(b) = &body {
            req = req.json(b);
        }
        let resp = req.send().await.expect("http");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        assert_eq!(local.status, status, "{method} {path}: {}", local.body);
        if status < 400 {
            let http_body: Value = serde_json::from_str(&text).expect("json");
            assert_eq!(local.body, http_body, "{method} {path}");
        } else {
            assert!(
                local.body["kind"].is_string() && local.body["message"].is_string(),
                "{method} {path}: {}",
                local.body
            );
        }
    }
    // The HTTP side still wants its token; the in-process side has none to give.
    let refused = http.get(format!("{base}/api/status")).send().await.expect("http");
    assert_eq!(refused.status(), 401);
    let (status, _) = f.call("GET", "/not-api", None).await;
    assert_eq!(status, 404);

    // App routes: start on login through the host's switch.
    let (status, body) = f.call("GET", "/api/app", None).await;
    assert_eq!((status, body["startOnLogin"].clone()), (200, json!(false)));
    let (status, body) = f.call("PUT", "/api/app", Some(json!({ "startOnLogin": true }))).await;
    assert_eq!((status, body["startOnLogin"].clone()), (200, json!(true)));
    assert!(f.autostart.0.load(Ordering::SeqCst));
    let (status, _) = f.call("PUT", "/api/app", Some(json!({ "startOnLogin": "yes" }))).await;
    assert_eq!(status, 400);
    f.supervisor.shutdown().await;
}

#[tokio::test]
async fn no_start_after_the_final_shutdown() {
    let mock = MockUpstream::start().await;
    let f = Fixture::new(&mock);
    let handle = f.supervisor.start().await.expect("start");
    let url = format!("http://{}", handle.addr);
    let report = f.supervisor.shutdown().await;
    assert!(report.drained);
    assert!(!reachable(&url).await);
    assert_eq!(f.supervisor.start().await.expect_err("closed").kind(), "closed");
    let status: dto::AppStatus = f.supervisor.status();
    assert_eq!(status.state, EngineState::Stopped);
}
