//! Test harness: a scriptable mock upstream, an engine on port 0 with a temp data dir, and
//! helpers to read what a client received (`wire`, written from the vendors' formats).

pub mod cursor_client;
pub mod cursor_raw;
pub mod cursor_schema;
pub mod fixtures;
pub mod lingma;
pub mod mock;
pub mod skip;
pub mod tab_wire;
pub mod vendor;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use keyhaven::app::{Engine, EngineExtras, EngineHandle};
use keyhaven::config::{EngineConfig, load_str};
use keyhaven::secrets::{Keyring, MemoryKeyring, Secrets};
use keyhaven::store::CallDetail;
use secrecy::SecretString;

pub use mock::{MockUpstream, Reply};

/// The provider key every test engine uses; it must never show up in bodies, rows or logs.
pub const CANARY_KEY: &str = "sk-canary-0123456789abcdef";

/// The three upstream dialects, each behind its own model name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Up {
    Openai,
    Anthropic,
    Responses,
}

impl Up {
    pub const ALL: [Up; 3] = [Up::Openai, Up::Anthropic, Up::Responses];

    pub fn model(self) -> &'static str {
        match self {
            Up::Openai => "oa-model",
            Up::Anthropic => "an-model",
            Up::Responses => "rs-model",
        }
    }

    /// The path the upstream is called on.
    pub fn path(self) -> &'static str {
        match self {
            Up::Openai => "/v1/chat/completions",
            Up::Anthropic => "/v1/messages",
            Up::Responses => "/v1/responses",
        }
    }
}

/// The three client dialects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    Openai,
    Anthropic,
    Responses,
}

impl Client {
    pub const ALL: [Client; 3] = [Client::Openai, Client::Anthropic, Client::Responses];

    pub fn path(self) -> &'static str {
        match self {
            Client::Openai => "/v1/chat/completions",
            Client::Anthropic => "/v1/messages",
            Client::Responses => "/v1/responses",
        }
    }
}

pub struct TestEngine {
    pub engine: Option<Engine>,
    pub handle: EngineHandle,
    pub dir: tempfile::TempDir,
    pub base: String,
    pub http: reqwest::Client,
}

/// The test config; `extra` goes into `[server]`, `tables` at the end (e.g. `[timeouts]`).
pub fn config_with(mock_url: &str, extra: &str, tables: &str) -> String {
    config_text(mock_url, extra) + tables
}

pub fn config_text(mock_url: &str, extra: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
{extra}

[retry]
base_backoff = 10

[[providers]]
name = "oa"
kind = "openai"
base_url = "{mock_url}/v1"
key = "keyring:test-key"

[[providers]]
name = "an"
kind = "anthropic"
base_url = "{mock_url}/v1"
key = "keyring:test-key"

[[providers]]
name = "rs"
kind = "openai-responses"
base_url = "{mock_url}/v1"
key = "keyring:test-key"

[[models]]
name = "oa-model"
provider = "oa"
upstream = "gpt-4o-mini"
capabilities = {{ tools = true, vision = true, thinking = true }}

[[models]]
name = "an-model"
provider = "an"
upstream = "claude-sonnet-4-5"
capabilities = {{ tools = true, vision = true, thinking = true }}

[[models]]
name = "rs-model"
provider = "rs"
upstream = "gpt-5-mini"
capabilities = {{ tools = true, vision = true, thinking = true }}
"#
    )
}

impl TestEngine {
    pub async fn start(mock: &MockUpstream) -> TestEngine {
        TestEngine::start_with(mock, "").await
    }

    /// `extra` goes into the `[server]` table.
    pub async fn start_with(mock: &MockUpstream, extra: &str) -> TestEngine {
        let dir = tempfile::tempdir().expect("tempdir");
        TestEngine::start_in(dir, &config_text(&mock.url(), extra)).await
    }

    pub async fn start_in(dir: tempfile::TempDir, config: &str) -> TestEngine {
        TestEngine::start_with_keyring(dir, config, Arc::new(MemoryKeyring::default())).await
    }

    /// Starts with a given keyring (tests that issue client tokens first).
    pub async fn start_with_keyring(dir: tempfile::TempDir, config: &str, keyring: Arc<MemoryKeyring>) -> TestEngine {
        TestEngine::start_full(dir, config, keyring, false, EngineExtras::default()).await
    }

    /// The most general start: with `config_file`, the config is written to `config.toml` in the
    /// data dir and the engine (its control service) owns that file.
    pub async fn start_full(
        dir: tempfile::TempDir,
        config: &str,
        keyring: Arc<MemoryKeyring>,
        config_file: bool,
        extras: EngineExtras,
    ) -> TestEngine {
        let file = load_str("test.toml", config).expect("test config");
        keyring.set("test-key", &SecretString::from(CANARY_KEY)).expect("key");
        let secrets = Secrets::new(keyring, Arc::new(|_| None));
        let config_path = config_file.then(|| {
            let path = dir.path().join("config.toml");
            std::fs::write(&path, config).expect("write config");
            path
        });
        let config = EngineConfig {
            config_path,
            database_path: dir.path().join("keyhaven.db"),
            file,
            listen: Some("127.0.0.1:0".parse().expect("addr")),
            ca_dir: dir.path().join("ca"),
            proxy_listen: Some("127.0.0.1:0".parse().expect("addr")),
            upstream_overrides: Default::default(),
        };
        let engine = Engine::start_with(config, secrets, extras).await.expect("engine starts");
        let handle = engine.handle();
        let base = format!("http://{}", engine.local_addr());
        TestEngine { engine: Some(engine), handle, dir, base, http: reqwest::Client::new() }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A control-API request with the control token (JSON on every method but GET): the status
    /// and the body's text.
    pub async fn control(&self, method: reqwest::Method, path: &str, body: Option<serde_json::Value>) -> (u16, String) {
        let token = keyhaven::control::token::ControlToken::load_or_create(self.dir.path()).expect("token");
        let mut req = self.http.request(method.clone(), self.url(path)).bearer_auth(token.expose());
        if method != reqwest::Method::GET {
            req = req.header("content-type", "application/json");
        }
        if let Some(b) = body {
            req = req.body(serde_json::to_vec(&b).expect("json"));
        }
        let resp = req.send().await.expect("send");
        let status = resp.status().as_u16();
        (status, resp.text().await.expect("body"))
    }

    pub async fn post(&self, client: Client, body: &serde_json::Value) -> reqwest::Response {
        self.http
            .post(self.url(client.path()))
            .header("content-type", "application/json")
            .header("user-agent", "keyhaven-tests/1.0")
            .header("anthropic-version", "2023-06-01")
            .json(body)
            .send()
            .await
            .expect("request reaches the engine")
    }

    /// The single call row (waits for it to be finalised).
    pub async fn only_call(&self) -> CallDetail {
        let calls = self.wait_calls(1).await;
        calls.into_iter().next().expect("one call")
    }

    /// Waits until `n` calls are finalised, then returns them (newest first).
    pub async fn wait_calls(&self, n: usize) -> Vec<CallDetail> {
        let store = &self.handle.store;
        for _ in 0..200 {
            let _ = store.flush().await;
            let rows = store
                .recent_calls(keyhaven::store::CallFilter { limit: 100, ..Default::default() })
                .await
                .expect("read calls");
            if rows.len() >= n && rows.iter().all(|r| r.status != keyhaven::model::CallStatus::InFlight) {
                let mut out = Vec::new();
                for r in rows {
                    out.push(store.call_detail(&r.id).await.expect("detail").expect("row"));
                }
                return out;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("calls were not finalised in time");
    }

    /// Shuts the engine down and hands back its data directory.
    pub async fn stop(mut self) -> tempfile::TempDir {
        if let Some(e) = self.engine.take() {
            e.shutdown(Duration::from_secs(5)).await;
        }
        self.dir
    }
}

/// The final response object a Responses client got: the body, or the response of the last
/// `response.completed` / `response.incomplete` event.
pub fn responses_final(raw: &str, stream: bool) -> serde_json::Value {
    if !stream {
        return serde_json::from_str(raw).expect("response JSON");
    }
    sse_data(raw)
        .into_iter()
        .rev()
        .find(|d| d["type"] == "response.completed" || d["type"] == "response.incomplete")
        .map(|d| d["response"].clone())
        .unwrap_or_else(|| panic!("no final response event: {raw}"))
}

/// The finished items a Responses client got: `response.output_item.done` items when streamed,
/// else the body's output.
pub fn responses_items_done(raw: &str, stream: bool) -> Vec<serde_json::Value> {
    if !stream {
        return responses_final(raw, false)["output"].as_array().cloned().unwrap_or_default();
    }
    sse_data(raw).into_iter().filter(|d| d["type"] == "response.output_item.done").map(|d| d["item"].clone()).collect()
}

/// The JSON data of every SSE event in `raw`.
fn sse_data(raw: &str) -> Vec<serde_json::Value> {
    raw.split("\n\n")
        .filter_map(|ev| ev.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}
