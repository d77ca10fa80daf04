//! The web tools end to end: an engine started with `[web] search = "searxng"` against a mock
//! SearXNG installs a provider that really searches there, plus Keyhaven's fetcher; the control
//! API reads and changes `[web]` (the file keeps its comments, a restart is flagged), stores the
//! Brave key write-only (never echoed, never in the file), runs a test search with it, and a
//! restart applies the new settings (Brave, editor fetching: no fetcher installed).

use std::sync::Arc;

use keyhaven::secrets::{Keyring, MemoryKeyring};
use secrecy::SecretString;
use serde_json::{Value, json};

use crate::support::{MockUpstream, Reply, TestEngine, config_text};

const BRAVE_CANARY: &str = "BSA-web-canary-0123456789abcdef";
const HEADER: &str = "# web tools test config; this comment must survive\n";

const SEARX_OK: &str = r#"{"query":"keyhaven","results":[
  {"title":"Keyhaven <b>home</b>","url":"https://keyhaven.example/","content":"a local gateway"},
  {"title":"Docs","url":"https://keyhaven.example/docs","content":"read me"}]}"#;
const BRAVE_OK: &str =
    r#"{"web":{"results":[{"title":"Brave hit","url":"https://b.example/","description":"found"}]}}"#;

async fn api(engine: &TestEngine, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, String) {
    engine.control(method, path, body).await
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).expect("JSON answer")
}

#[tokio::test]
async fn web_settings_round_trip_and_the_brave_key_is_never_echoed() {
    let llm = MockUpstream::start().await;
    let searx = MockUpstream::start().await;
    searx.push(Reply::json(200, SEARX_OK));
    let brave = MockUpstream::start().await;
    brave.push(Reply::json(200, BRAVE_OK));
    let keyring = Arc::new(MemoryKeyring::default());
    let config = format!(
        "{HEADER}{}\n[web]\nsearch = \"searxng\"   # self-hosted\nsearch_url = \"{}\"\n",
        config_text(&llm.url(), ""),
        searx.url()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = TestEngine::start_full(dir, &config, keyring.clone(), true, Default::default()).await;

    // The engine installed a SearXNG provider that searches the configured instance, and its
    // own fetcher (fetch = "keyhaven" by default).
    let backend = engine.handle.cursor.as_ref().expect("the proxy runs").backend.clone();
    let provider = backend.search_provider().expect("a search provider is installed");
    let hits = provider.search("keyhaven", 5).await.expect("searched the mock instance");
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0].title, "Keyhaven home");
    assert_eq!(searx.seen()[0].path, "/search");
    assert!(backend.page_fetcher().is_some(), "Keyhaven fetches by default");

    let mut answers = Vec::new();
    let (status, text) = api(&engine, reqwest::Method::GET, "/api/web", None).await;
    assert_eq!(status, 200, "{text}");
    let web = parse(&text);
    assert_eq!(web["search"], "searxng");
    assert_eq!(web["searchUrl"], searx.url());
    assert_eq!(web["fetch"], "keyhaven");
    assert_eq!(web["fetchMaxBytes"], 2 * 1024 * 1024);
    assert_eq!(web["timeoutMs"], 20_000);
    assert_eq!(web["key"], json!({"source": "keyring", "name": "brave-search", "hasKey": false}));
    assert_eq!(web["restartRequired"], false);
    answers.push(text);

    // Switch to Brave (on a mock) with editor fetching: written to the file, flagged for restart.
    let input = json!({"search": "brave", "searchUrl": brave.url(), "fetch": "editor", "timeoutMs": 15000});
    let (status, text) = api(&engine, reqwest::Method::PUT, "/api/web", Some(input)).await;
    assert_eq!(status, 200, "{text}");
    let web = parse(&text);
    assert_eq!((web["search"].as_str(), web["fetch"].as_str()), (Some("brave"), Some("editor")));
    assert_eq!(web["effectiveSearchUrl"], brave.url());
    assert_eq!(web["restartRequired"], true);
    answers.push(text);
    let file = std::fs::read_to_string(engine.dir.path().join("config.toml")).expect("config");
    assert!(file.starts_with(HEADER) && file.contains("# self-hosted"), "comments survive:\n{file}");
    assert!(
        file.contains("search = \"brave\"") && file.contains("fetch = \"editor\"") && file.contains("timeout = 15000")
    );

    // The key goes to the keyring; answers only say it is there.
    let (status, text) = api(&engine, reqwest::Method::PUT, "/api/web/key", Some(json!({"value": BRAVE_CANARY}))).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(parse(&text)["key"]["hasKey"], true);
    answers.push(text);
    let file = std::fs::read_to_string(engine.dir.path().join("config.toml")).expect("config");
    assert!(file.contains("key = \"keyring:brave-search\"") && !file.contains(BRAVE_CANARY), "{file}");

    // A test search goes to the file's provider with the key in its header.
    let (status, text) = api(&engine, reqwest::Method::POST, "/api/web/test", Some(json!({"query": "rust"}))).await;
    assert_eq!(status, 200, "{text}");
    let result = parse(&text);
    assert_eq!((result["ok"].as_bool(), result["hits"].as_u64()), (Some(true), Some(1)), "{text}");
    assert_eq!(result["firstTitle"], "Brave hit");
    answers.push(text);
    let seen = brave.seen();
    assert_eq!(seen[0].path, "/res/v1/web/search");
    assert_eq!(seen[0].headers.get("x-subscription-token").and_then(|v| v.to_str().ok()), Some(BRAVE_CANARY));

    // Bad input is refused and the file stays as it was.
    let (status, text) =
        api(&engine, reqwest::Method::PUT, "/api/web", Some(json!({"searchUrl": "ftp://nope.example"}))).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("web.search_url"), "{text}");
    let (status, text) = api(&engine, reqwest::Method::PUT, "/api/web/key", Some(json!({"value": ""}))).await;
    assert_eq!(status, 400, "{text}");
    answers.push(text);

    // Clearing the key: the next test search says it is missing.
    let (status, text) = api(&engine, reqwest::Method::DELETE, "/api/web/key", None).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(parse(&text)["key"]["hasKey"], false);
    answers.push(text);
    let (_, text) = api(&engine, reqwest::Method::POST, "/api/web/test", Some(json!({"query": "rust"}))).await;
    let result = parse(&text);
    assert_eq!(result["ok"], false);
    assert!(result["message"].as_str().is_some_and(|m| m.contains("no Brave Search API key")), "{text}");
    answers.push(text);
    let (_, text) = api(&engine, reqwest::Method::GET, "/api/web", None).await;
    answers.push(text);
    for a in &answers {
        assert!(!a.contains(BRAVE_CANARY), "the key was echoed: {a}");
    }

    // A restart applies the file: Brave answers web_search, and the editor fetches.
    keyring.set("brave-search", &SecretString::from(BRAVE_CANARY)).expect("key");
    let text = std::fs::read_to_string(engine.dir.path().join("config.toml")).expect("config");
    let dir = engine.stop().await;
    let engine = TestEngine::start_full(dir, &text, keyring, true, Default::default()).await;
    let backend = engine.handle.cursor.as_ref().expect("the proxy runs").backend.clone();
    assert!(backend.page_fetcher().is_none(), "fetch = \"editor\" installs no fetcher");
    let hits = backend.search_provider().expect("brave").search("again", 3).await.expect("brave answers");
    assert_eq!(hits[0].url, "https://b.example/");
    let (_, text) = api(&engine, reqwest::Method::GET, "/api/web", None).await;
    assert_eq!(parse(&text)["restartRequired"], false, "{text}");
    engine.stop().await;
}

#[tokio::test]
async fn search_none_installs_no_provider() {
    let llm = MockUpstream::start().await;
    let engine = TestEngine::start(&llm).await;
    let backend = engine.handle.cursor.as_ref().expect("the proxy runs").backend.clone();
    assert!(backend.search_provider().is_none());
    assert!(backend.page_fetcher().is_some());
    engine.stop().await;
}
