//! The `lingma` provider end to end: a mock Lingma IPC backend (WebSocket, JSON-RPC) behind
//! `/v1/chat/completions` and `/v1/messages`. Discovery through the `.info.json` file, the three
//! session modes (which JSON-RPC calls the backend saw), the one-request-at-a-time rule (429 in
//! the caller's dialect), image files, reconnecting to a restarted assistant on a new port, the
//! request timeout, and tool calls through the forced emulation.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use keyhaven::model::CallStatus;

use crate::support::lingma::{Behavior, MockLingma};
use crate::support::wire;
use crate::support::{Client, TestEngine, config_with};

const MODEL: &str = "lingma-kimi";

struct Setup {
    engine: TestEngine,
    info: PathBuf,
    images: PathBuf,
}

/// An engine with one lingma provider; `extra` goes into its `[[providers]]` table.
async fn setup(mock: &MockLingma, extra: &str) -> Setup {
    let dir = tempfile::tempdir().expect("dir");
    let info = dir.path().join("SharedClientCache").join(".info.json");
    std::fs::create_dir_all(info.parent().expect("parent")).expect("mkdir");
    mock.write_info(&info);
    let images = dir.path().join("images");
    std::fs::create_dir_all(&images).expect("mkdir");
    let tables = format!(
        r#"
[[providers]]
name = "lg"
kind = "lingma"
info_file = "{}"
temp_dir = "{}"
cwd = "/work/project"
{extra}

[[models]]
name = "{MODEL}"
provider = "lg"
upstream = "kimi-k2.6"
tools = "native"
"#,
        info.display(),
        images.display()
    );
    let config = config_with("http://127.0.0.1:9", "", &tables);
    let engine = TestEngine::start_in(dir, &config).await;
    Setup { engine, info, images }
}

fn chat(text: &str, stream: bool) -> Value {
    json!({"model": MODEL, "stream": stream, "messages": [{"role": "user", "content": text}]})
}

fn messages(text: &str, stream: bool) -> Value {
    json!({"model": MODEL, "max_tokens": 100, "stream": stream, "messages": [{"role": "user", "content": text}]})
}

/// Sends and returns the answer's text (streamed or not), asserting 200.
async fn ask(engine: &TestEngine, client: Client, body: &Value) -> String {
    let resp = engine.post(client, body).await;
    let status = resp.status();
    let raw = resp.text().await.expect("body");
    assert_eq!(status, 200, "{raw}");
    wire::read(client, &raw, body["stream"] == true).text()
}

fn methods(mock: &MockLingma) -> Vec<String> {
    mock.requests().into_iter().map(|(m, _)| m).collect()
}

#[tokio::test]
async fn fresh_mode_opens_and_deletes_a_session_per_request() {
    let mock = MockLingma::start().await;
    mock.push(Behavior::text("Hello from Lingma, fresh."));
    let s = setup(&mock, r#"session_mode = "fresh""#).await;
    assert_eq!(ask(&s.engine, Client::Openai, &chat("hi", false)).await, "Hello from Lingma, fresh.");
    assert_eq!(ask(&s.engine, Client::Anthropic, &messages("again", true)).await, "Hello from Lingma, fresh.");
    let deletes = mock.wait_for("chat/deleteSessionById", 2).await;
    assert_eq!(
        methods(&mock),
        [
            "initialize",
            "session/new",
            "session/set_model",
            "session/prompt",
            "chat/deleteSessionById",
            "session/new",
            "session/set_model",
            "session/prompt",
            "chat/deleteSessionById"
        ]
    );
    let prompts = mock.calls("session/prompt");
    for (i, p) in prompts.iter().enumerate() {
        assert_eq!(p["sessionId"], deletes[i]["sessionId"], "the prompt's session is the one deleted");
        assert_eq!(p["_meta"]["ai-coding/model"], "kimi2.6");
    }
    assert_ne!(prompts[0]["sessionId"], prompts[1]["sessionId"]);
    assert_eq!(mock.calls("session/set_model")[0]["modelId"], "kimi2.6", "kimi-k2.6 maps to Lingma's id");
    assert_eq!(mock.calls("session/new")[0]["cwd"], "/work/project");
    let rows = s.engine.wait_calls(2).await;
    for row in rows {
        assert_eq!(row.summary.status, CallStatus::Ok);
        assert!(row.summary.usage_estimated, "Lingma reports no usage");
        assert_eq!(row.summary.provider.as_deref(), Some("lg"));
    }
}

#[tokio::test]
async fn reuse_mode_keeps_one_session_and_sends_only_the_latest_message() {
    let mock = MockLingma::start().await;
    mock.push(Behavior::text("Sticky answer."));
    let s = setup(&mock, r#"session_mode = "reuse""#).await;
    ask(&s.engine, Client::Openai, &chat("one", true)).await;
    ask(&s.engine, Client::Anthropic, &messages("two", false)).await;
    let history = json!({"model": MODEL, "messages": [
        {"role": "user", "content": "one"}, {"role": "assistant", "content": "Sticky answer."},
        {"role": "user", "content": "three"}]});
    ask(&s.engine, Client::Openai, &history).await;
    assert_eq!(mock.calls("session/new").len(), 1, "{:?}", methods(&mock));
    assert_eq!(mock.calls("session/set_model").len(), 1, "the model is set once on the sticky session");
    assert!(mock.calls("chat/deleteSessionById").is_empty());
    let prompts = mock.calls("session/prompt");
    let texts: Vec<&str> = prompts.iter().map(|p| p["prompt"][0]["text"].as_str().expect("text")).collect();
    assert_eq!(texts, ["one", "two", "three"]);
    assert!(prompts.iter().all(|p| p["sessionId"] == "sess-1"));
}

#[tokio::test]
async fn auto_mode_reuses_single_turns_and_isolates_system_prompts_and_history() {
    let mock = MockLingma::start().await;
    mock.push(Behavior::text("Auto."));
    let s = setup(&mock, "").await;
    ask(&s.engine, Client::Openai, &chat("first", false)).await;
    let with_system = json!({"model": MODEL, "max_tokens": 50, "system": "Be terse.",
        "messages": [{"role": "user", "content": "second"}]});
    ask(&s.engine, Client::Anthropic, &with_system).await;
    ask(&s.engine, Client::Openai, &chat("third", false)).await;
    let prompts = mock.calls("session/prompt");
    assert_eq!(prompts[0]["sessionId"], "sess-1");
    assert_eq!(prompts[1]["sessionId"], "sess-2", "a system prompt gets a fresh session");
    assert_eq!(prompts[2]["sessionId"], "sess-1", "single turns go back to the sticky session");
    let text = prompts[1]["prompt"][0]["text"].as_str().expect("text");
    assert!(text.contains("Be terse.") && text.contains("User: second"), "{text}");
    let deletes = mock.wait_for("chat/deleteSessionById", 1).await;
    assert_eq!(deletes.len(), 1);
    assert_eq!(deletes[0]["sessionId"], "sess-2");
}

#[tokio::test]
async fn a_second_concurrent_request_gets_429_in_its_dialect() {
    let mock = MockLingma::start().await;
    mock.push(Behavior::Answer { chunks: vec!["slow ".into(); 6], delay: Duration::from_millis(150) });
    let s = setup(&mock, "").await;
    let first = {
        let http = s.engine.http.clone();
        let url = s.engine.url(Client::Openai.path());
        tokio::spawn(async move {
            let resp = http.post(url).json(&chat("long one", true)).send().await.expect("sent");
            let status = resp.status();
            (status, resp.text().await.expect("body"))
        })
    };
    mock.wait_for("session/prompt", 1).await;
    let resp = s.engine.post(Client::Anthropic, &messages("me too", false)).await;
    assert_eq!(resp.status(), 429);
    let body: Value = resp.json().await.expect("json");
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert!(body["error"]["message"].as_str().expect("message").contains("one request at a time"));
    let resp = s.engine.post(Client::Openai, &chat("and me", false)).await;
    assert_eq!(resp.status(), 429);
    let body: Value = resp.json().await.expect("json");
    assert!(body["error"]["message"].as_str().expect("message").contains("one request at a time"));
    let (status, text) = first.await.expect("first request");
    assert_eq!(status, 200);
    assert!(wire::read_stream(Client::Openai, &text).text().contains("slow"), "{text}");
    assert_eq!(mock.calls("session/prompt").len(), 1, "rejected requests never reach Lingma");
    // Once the first finished, the next one is served.
    ask(&s.engine, Client::Openai, &chat("now", false)).await;
}

#[tokio::test]
async fn a_queue_lets_a_second_request_wait() {
    let mock = MockLingma::start().await;
    mock.push(Behavior::Answer { chunks: vec!["a".into(); 3], delay: Duration::from_millis(100) });
    let s = setup(&mock, "queue = 1").await;
    let (x, y) = (chat("x", false), chat("y", false));
    let (a, b) = tokio::join!(ask(&s.engine, Client::Openai, &x), ask(&s.engine, Client::Openai, &y));
    assert_eq!((a.as_str(), b.as_str()), ("aaa", "aaa"));
}

#[cfg(unix)]
#[tokio::test]
async fn images_travel_as_private_temp_files_removed_afterwards() {
    let mock = MockLingma::start().await;
    mock.push(Behavior::text("A red pixel."));
    let s = setup(&mock, "").await;
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}")}}]}]});
    assert_eq!(ask(&s.engine, Client::Openai, &body).await, "A red pixel.");
    let images = mock.images();
    assert_eq!(images.len(), 1);
    let img = &images[0];
    assert!(img.uri.starts_with("lingma:///agent/file?path="), "{}", img.uri);
    assert!(img.existed, "the file exists while Lingma answers");
    assert_eq!(img.mode, Some(0o600));
    assert_eq!((img.mime.as_str(), img.data.as_str()), ("image/png", png));
    assert!(img.path.starts_with(&s.images), "{} is in the configured temp dir", img.path.display());
    assert!(!img.path.exists(), "the file is removed after the call");
    let prompt = &mock.calls("session/prompt")[0];
    assert_eq!(prompt["contextParams"][0]["uri"], img.uri.as_str());
    assert_eq!(std::fs::read_dir(&s.images).expect("dir").count(), 0);
}

#[tokio::test]
async fn reconnects_when_the_assistant_restarts_on_a_new_port() {
    let first = MockLingma::start().await;
    first.push(Behavior::text("From the first."));
    let s = setup(&first, "").await;
    assert_eq!(ask(&s.engine, Client::Openai, &chat("a", false)).await, "From the first.");
    first.stop();
    let second = MockLingma::start().await;
    second.push(Behavior::text("From the second."));
    second.write_info(&s.info);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(ask(&s.engine, Client::Anthropic, &messages("b", false)).await, "From the second.");
    assert_eq!(methods(&second)[..2], ["initialize", "session/new"]);
    assert_eq!(ask(&s.engine, Client::Openai, &chat("c", true)).await, "From the second.");
}

#[tokio::test]
async fn a_request_that_never_finishes_hits_the_configured_timeout() {
    let mock = MockLingma::start().await;
    mock.push(Behavior::Hang { chunks: vec!["partial".into()] });
    let s = setup(&mock, "timeout = 400").await;
    let started = std::time::Instant::now();
    let resp = s.engine.post(Client::Openai, &chat("hang", false)).await;
    assert_eq!(resp.status(), 504);
    let body: Value = resp.json().await.expect("json");
    assert!(body["error"]["message"].as_str().expect("message").contains("Lingma request"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let row = s.engine.only_call().await;
    assert_eq!(row.summary.status, CallStatus::Error);
    assert_eq!(row.summary.error_kind.as_deref(), Some("timeout"));
    // The abandoned sticky session is not reused.
    mock.push(Behavior::text("fine"));
    assert_eq!(ask(&s.engine, Client::Openai, &chat("again", false)).await, "fine");
    assert_eq!(mock.calls("session/new").len(), 2);
}

fn tools_openai() -> Value {
    json!([{"type": "function", "function": {"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}])
}

#[tokio::test]
async fn tool_calls_are_always_emulated() {
    let mock = MockLingma::start().await;
    mock.push(Behavior::text(
        "Reading it.\n```json action\n{\"tool\": \"read_file\", \"parameters\": {\"path\": \"src/main.rs\"}}\n```",
    ));
    let s = setup(&mock, "").await;
    for (client, stream) in [(Client::Openai, false), (Client::Anthropic, true)] {
        let body = match client {
            Client::Anthropic => json!({"model": MODEL, "max_tokens": 100, "stream": stream,
                "tools": [{"name": "read_file", "description": "Read a file.",
                    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}],
                "messages": [{"role": "user", "content": "show main"}]}),
            _ => json!({"model": MODEL, "stream": stream, "tools": tools_openai(),
                "messages": [{"role": "user", "content": "show main"}]}),
        };
        let resp = s.engine.post(client, &body).await;
        assert_eq!(resp.status(), 200);
        let raw = resp.text().await.expect("body");
        let calls: Vec<(String, Value)> =
            wire::read(client, &raw, stream).tool_calls().into_iter().map(|(_, name, input)| (name, input)).collect();
        assert_eq!(calls, [("read_file".to_owned(), json!({"path": "src/main.rs"}))], "{client:?}");
    }
    let prompts = mock.calls("session/prompt");
    let text = prompts[0]["prompt"][0]["text"].as_str().expect("text");
    assert!(text.contains("```json action") && text.contains("read_file"), "the contract is in the prompt: {text}");
    assert_eq!(mock.calls("chat/deleteSessionById").len(), 2, "tool requests run in fresh sessions");
}

#[cfg(unix)]
#[tokio::test]
async fn image_files_are_removed_when_the_call_fails_too() {
    let mock = MockLingma::start().await;
    mock.push(Behavior::Hang { chunks: vec![] });
    let s = setup(&mock, "timeout = 300").await;
    let body = json!({"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/AAAA"}}]}]});
    let resp = s.engine.post(Client::Anthropic, &body).await;
    assert_eq!(resp.status(), 504);
    let images = mock.images();
    assert_eq!(images.len(), 1);
    assert!(images[0].existed);
    assert!(images[0].path.extension().is_some_and(|e| e == "jpg"));
    assert!(!images[0].path.exists(), "removed after the timeout");
    assert_eq!(std::fs::read_dir(&s.images).expect("dir").count(), 0);
}
