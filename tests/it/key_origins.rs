//! Issue 14 §2, §3, §8: a stored key goes only to the origin it was stored for, nothing follows a
//! redirect with a key, and no log line carries one. Real engines on port 0 and recording servers
//! that stand for the caller's own server: with the control token, no sequence of control calls
//! makes Keyhaven send a stored key or an environment variable there.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use reqwest::Method;
use secrecy::SecretString;
use serde_json::{Value, json};

use keyhaven::app::{Engine, EngineExtras};
use keyhaven::config::{EngineConfig, load_str};
use keyhaven::secrets::{Keyring, MemoryKeyring, Secrets};

use crate::support::{CANARY_KEY, Client, TestEngine, config_text};

/// An environment variable the user set for Keyhaven (paired with the mock in the config).
const ENV_CANARY: &str = "sk-env-canary-5555aaaa";
/// Any other variable of the process (e.g. AWS_SECRET_ACCESS_KEY).
const OTHER_CANARY: &str = "aws-secret-canary-7777bbbb";
const BRAVE_CANARY: &str = "BSA-brave-canary-9999cccc";

/// A server that records every request (method, path and query, headers, body) and answers with
/// a fixed status and body, or a redirect.
#[derive(Clone)]
struct Recorder {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    async fn start(status: u16, redirect_to: Option<String>) -> Recorder {
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let s = seen.clone();
        let app =
            Router::new().fallback(move |method: axum::http::Method, uri: Uri, headers: HeaderMap, body: String| {
                let s = s.clone();
                let redirect_to = redirect_to.clone();
                async move {
                    s.lock().expect("seen").push(format!("{method} {uri} {headers:?} {body}"));
                    let mut resp: Response = match redirect_to {
                        Some(to) => (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, to)]).into_response(),
                        None => (
                            StatusCode::from_u16(status).expect("status"),
                            [(header::CONTENT_TYPE, "application/json")],
                            r#"{"error":{"type":"api_error","message":"nope"}}"#,
                        )
                            .into_response(),
                    };
                    resp.headers_mut().insert("x-recorder", header::HeaderValue::from_static("1"));
                    resp
                }
            });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Recorder { url, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().expect("seen").clone()
    }
}

fn messages(model: &str) -> Value {
    json!({"model": model, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
}

/// An engine that owns its config file, with an environment holding canaries.
async fn engine_with_env(config: &str, keyring: Arc<MemoryKeyring>) -> TestEngine {
    let dir = tempfile::tempdir().expect("tempdir");
    keyring.set("test-key", &SecretString::from(CANARY_KEY)).expect("key");
    let env = Arc::new(|name: &str| match name {
        "KEYHAVEN_UPSTREAM_KEY" => Some(ENV_CANARY.to_owned()),
        "KEYHAVEN_SPARE" | "AWS_SECRET_ACCESS_KEY" => Some(OTHER_CANARY.to_owned()),
        _ => None,
    });
    let secrets = Secrets::new(keyring, env);
    let path = dir.path().join("config.toml");
    std::fs::write(&path, config).expect("write config");
    let config = EngineConfig {
        config_path: Some(path),
        database_path: dir.path().join("keyhaven.db"),
        file: load_str("test.toml", config).expect("test config"),
        listen: Some("127.0.0.1:0".parse().expect("addr")),
        ca_dir: dir.path().join("ca"),
        proxy_listen: Some("127.0.0.1:0".parse().expect("addr")),
        upstream_overrides: Default::default(),
    };
    let engine = Engine::start_with(config, secrets, EngineExtras::default()).await.expect("engine starts");
    let handle = engine.handle();
    let base = format!("http://{}", engine.local_addr());
    TestEngine { engine: Some(engine), handle, dir, base, http: reqwest::Client::new() }
}

fn assert_clean(server: &Recorder) {
    let seen = server.seen();
    assert!(seen.is_empty(), "the caller's server was contacted: {seen:?}");
}

#[tokio::test]
async fn a_provider_redirect_is_not_followed_and_names_the_location() {
    let target = Recorder::start(200, None).await;
    let redirector = Recorder::start(0, Some(format!("{}/v1/elsewhere", target.url))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = TestEngine::start_in(dir, &config_text(&redirector.url, "")).await;
    for (client, model) in [(Client::Anthropic, "an-model"), (Client::Openai, "oa-model")] {
        let resp = engine.post(client, &messages(model)).await;
        assert_eq!(resp.status().as_u16(), 502, "{model}");
        let body = resp.text().await.expect("body");
        assert!(
            body.contains(&format!("answered 307 with a redirect to {}/v1/elsewhere", target.url)),
            "{model}: {body}"
        );
        assert!(!body.contains(CANARY_KEY));
    }
    // count_tokens asks the provider too: a redirect there falls back to the estimate.
    let resp = engine
        .http
        .post(engine.url("/v1/messages/count_tokens"))
        .header("content-type", "application/json")
        .json(&json!({"model": "an-model", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("count");
    assert_eq!(resp.headers().get("x-keyhaven-token-count").and_then(|v| v.to_str().ok()), Some("estimate"));
    // A connection test is a gateway call: same answer.
    let (status, body) = engine.control(Method::POST, "/api/providers/an/test", None).await;
    assert_eq!(status, 200, "{body}");
    let test: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(test["errorKind"], "upstream_redirect", "{body}");
    assert!(test["message"].as_str().is_some_and(|m| m.contains("/v1/elsewhere")), "{body}");
    assert_clean(&target);
    // One request per call (a redirect is not retried), and the bound origin got the key.
    let seen = redirector.seen();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(seen.iter().all(|r| r.contains(CANARY_KEY)));
}

#[tokio::test]
async fn no_control_sequence_sends_a_secret_to_the_callers_server() {
    let legit = Recorder::start(500, None).await;
    let brave = Recorder::start(500, None).await;
    let evil = Recorder::start(200, None).await;
    let config = format!(
        r#"{}
[[providers]]
name = "envp"
kind = "openai"
base_url = "{legit}/v1"
key = "env:KEYHAVEN_UPSTREAM_KEY"

[[models]]
name = "env-model"
provider = "envp"
upstream = "gpt-4o-mini"

[web]
search = "brave"
search_url = "{brave}"
"#,
        config_text(&legit.url, ""),
        legit = legit.url,
        brave = brave.url,
    );
    let keyring = Arc::new(MemoryKeyring::default());
    let engine = engine_with_env(&config, keyring.clone()).await;
    let ctl = |m: Method, p: &'static str, b: Option<Value>| {
        let e = &engine;
        async move { e.control(m, p, b).await }
    };
    let provider = |name: &str, base: &str, key: Value| {
        json!({"name": name, "kind": "anthropic", "baseUrl": base, "key": key,
               "reasoningContent": null, "maxCompletionTokens": null})
    };
    let evil_v1 = format!("{}/v1", evil.url);

    // The legacy entry `test-key` (no origin yet) cannot be paired with a new origin.
    let (status, body) = ctl(
        Method::POST,
        "/api/providers",
        Some(provider("evil0", &evil_v1, json!({"source": "keyring", "name": "test-key"}))),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("older Keyhaven"), "{body}");

    // Its first use by the configured provider binds it to that provider's origin.
    let (status, body) = ctl(Method::POST, "/api/providers/an/test", None).await;
    assert_eq!(status, 200, "{body}");
    assert!(legit.seen().iter().any(|r| r.contains(CANARY_KEY)), "the configured origin got the key");

    // Re-pointing a provider that has a key needs the key entered again.
    let (status, body) = ctl(
        Method::PUT,
        "/api/providers/an",
        Some(provider("an", &evil_v1, json!({"source": "keyring", "name": "test-key"}))),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("needs its API key entered again"), "{body}");
    let (status, body) = ctl(
        Method::PUT,
        "/api/providers/envp",
        Some(json!({"name": "envp", "kind": "openai", "baseUrl": evil_v1, "key": {"source": "env", "name": "KEYHAVEN_UPSTREAM_KEY"},
                    "reasoningContent": null, "maxCompletionTokens": null})),
    )
    .await;
    assert_eq!(status, 400, "{body}");

    // A new provider on the caller's server naming the bound entry: allowed, but the key stays home,
    // for a connection test and for a call.
    let (status, body) = ctl(
        Method::POST,
        "/api/providers",
        Some(provider("evil", &evil_v1, json!({"source": "keyring", "name": "test-key"}))),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = ctl(
        Method::POST,
        "/api/models",
        Some(json!({"name": "evil-model", "aliases": [], "provider": "evil", "upstream": "x", "contextWindow": null,
                    "maxOutputTokens": null, "capabilities": null, "tools": null, "price": null})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, body) = ctl(Method::POST, "/api/providers/evil/test", None).await;
    let test: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(test["ok"], false, "{body}");
    assert_eq!(test["errorKind"], "key", "{body}");
    assert!(test["message"].as_str().is_some_and(|m| m.contains("never sent to")), "{body}");
    let resp = engine.post(Client::Anthropic, &messages("evil-model")).await;
    assert_eq!(resp.status().as_u16(), 401);

    // Environment variables: neither an arbitrary one nor the user's own one can be pointed there.
    for var in ["AWS_SECRET_ACCESS_KEY", "KEYHAVEN_SPARE", "KEYHAVEN_UPSTREAM_KEY"] {
        let (status, body) = ctl(
            Method::POST,
            "/api/providers",
            Some(provider("evil-env", &evil_v1, json!({"source": "env", "name": var}))),
        )
        .await;
        assert_eq!(status, 400, "{var}: {body}");
        assert!(body.contains("environment variable"), "{body}");
        let (status, body) = ctl(
            Method::PUT,
            "/api/providers/evil",
            Some(provider("evil", &evil_v1, json!({"source": "env", "name": var}))),
        )
        .await;
        assert_eq!(status, 400, "{var}: {body}");
    }
    // Keyhaven's own entries are not keys.
    let (status, body) = ctl(
        Method::POST,
        "/api/providers",
        Some(provider("evil-ca", &evil_v1, json!({"source": "keyring", "name": "local-ca-root-key"}))),
    )
    .await;
    assert_eq!(status, 400, "{body}");

    // The Brave key: stored for the configured search URL; re-pointing search_url keeps it home.
    let (status, body) = ctl(Method::PUT, "/api/web/key", Some(json!({"value": BRAVE_CANARY}))).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = ctl(Method::POST, "/api/web/test", Some(json!({"query": "q"}))).await;
    assert_eq!(status, 200, "{body}");
    assert!(brave.seen().iter().any(|r| r.contains(BRAVE_CANARY)), "the configured search URL got the key");
    let (status, body) = ctl(Method::PUT, "/api/web", Some(json!({"searchUrl": evil.url}))).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = ctl(Method::POST, "/api/web/test", Some(json!({"query": "q"}))).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("never sent to"), "{body}");

    // `[server] ui_dir` is not settable through the API.
    let before = std::fs::read_to_string(engine.dir.path().join("config.toml")).expect("config");
    let (status, body) = ctl(Method::PUT, "/api/settings", Some(json!({"uiDir": "/"}))).await;
    assert!((400..500).contains(&status), "{status} {body}");
    let after = std::fs::read_to_string(engine.dir.path().join("config.toml")).expect("config");
    assert!(!after.contains("ui_dir"), "{after}");
    assert!(before.contains("[web]"));

    // Entering the key again moves a provider: the new key is bound to the new origin, and the
    // old entry, still used by the other providers, keeps its key and origin.
    let moved = json!({"name": "an", "kind": "anthropic", "baseUrl": evil_v1,
                       "key": {"source": "keyring", "name": "test-key"}, "reasoningContent": null,
                       "maxCompletionTokens": null, "keyValue": "sk-typed-for-the-new-server"});
    let (status, body) = ctl(Method::PUT, "/api/providers/an", Some(moved)).await;
    assert_eq!(status, 200, "{body}");
    let p: Value = serde_json::from_str(&body).expect("json");
    assert_ne!(p["key"]["name"], "test-key", "{body}");
    assert!(!body.contains("sk-typed"), "{body}");
    let resp = engine.post(Client::Anthropic, &messages("an-model")).await;
    let _ = resp.text().await;
    let seen = evil.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].contains("sk-typed-for-the-new-server"));
    for canary in [CANARY_KEY, ENV_CANARY, OTHER_CANARY, BRAVE_CANARY] {
        assert!(!seen[0].contains(canary), "{canary} reached the caller's server");
    }
    let resp = engine.post(Client::Openai, &messages("oa-model")).await;
    let _ = resp.text().await;
    assert!(legit.seen().last().is_some_and(|r| r.contains(CANARY_KEY)), "oa keeps its key");
}

#[test]
fn upstream_errors_in_logs_are_redacted() {
    // A current-thread runtime, so the thread-local log capture sees the engine's tasks. Other
    // tests install and drop their own thread-local subscribers concurrently, which can race
    // tracing's global callsite-interest cache and lose a line; so the scenario may run up to three
    // times until the expected lines are captured. No captured line may carry the key in any run.
    let mut text = Vec::new();
    for _ in 0..3 {
        text = redaction_scenario();
        for l in &text {
            assert!(!l.contains(CANARY_KEY), "a log line carries the key: {l}");
        }
        let seen = |needle: &str| text.iter().any(|l| l.contains(needle));
        if seen("retrying upstream") && seen("falling back") && seen("[REDACTED]") {
            return;
        }
    }
    panic!("the retry, fallback and redaction lines were never captured: {text:#?}");
}

/// One upstream that echoes the key in its errors, behind a group; the log lines it produced.
fn redaction_scenario() -> Vec<String> {
    let ring = keyhaven::control::logs::LogRing::new(1000);
    let subscriber = tracing_subscriber::layer::SubscriberExt::with(tracing_subscriber::registry(), ring.layer());
    let _guard = tracing::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        // An upstream that echoes the key in its error: retried (503), then a group falls back.
        let echo = format!(r#"{{"error":{{"type":"overloaded_error","message":"bad key {CANARY_KEY}"}}}}"#);
        let mock = crate::support::MockUpstream::start().await;
        for _ in 0..4 {
            mock.push(crate::support::Reply::json(503, &echo));
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let config =
            config_text(&mock.url(), "") + "\n[[groups]]\nname = \"both\"\nmodels = [\"an-model\", \"oa-model\"]\n";
        let engine = TestEngine::start_in(dir, &config).await;
        let resp = engine.post(Client::Anthropic, &messages("both")).await;
        let body = resp.text().await.expect("body");
        assert!(!body.contains(CANARY_KEY), "{body}");
        engine.stop().await;
    });
    ring.tail(1000).iter().map(|l| format!("{l:?}")).collect()
}
