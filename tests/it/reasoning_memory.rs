//! The gateway's reasoning memory (issue 13 §2) against a real engine and a real SQLite file: a
//! Chat Completions client cannot carry a DeepSeek-style reasoner's `reasoning_content`, so when it
//! replays the tool turn the engine puts the reasoning back — also after a restart, from the
//! database — and with `record_calls = false` nothing is kept on disk. The upstream bodies are
//! checked against the shape DeepSeek documents for thinking-mode tool calls, written by hand.

use serde_json::{Value, json};

use crate::support::{Client, MockUpstream, Reply, TestEngine, config_text};

/// A DeepSeek-style reasoner's stream: reasoning, then one tool call (as the vendor sends it).
const REASONER_TOOL_CALL: &str = concat!(
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"deepseek-reasoner\",",
    "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"I need the file first.\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"deepseek-reasoner\",",
    "\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_mem_1\",\"type\":\"function\",",
    "\"function\":{\"name\":\"read\",\"arguments\":\"{\\\"path\\\":\\\"a.txt\\\"}\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"deepseek-reasoner\",",
    "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}],",
    "\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15}}\n\n",
    "data: [DONE]\n\n",
);

const REASONER_TEXT: &str = concat!(
    "data: {\"id\":\"c2\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"deepseek-reasoner\",",
    "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"done\"},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
);

fn ask() -> Value {
    json!({"model": "oa-model", "stream": true, "messages": [{"role": "user", "content": "read a.txt"}],
           "tools": [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]})
}

/// What a Chat client sends next: the tool call without any reasoning (Chat has no field for it).
fn replay() -> Value {
    json!({"model": "oa-model", "stream": true, "messages": [
        {"role": "user", "content": "read a.txt"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_mem_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a.txt\"}"}}]},
        {"role": "tool", "tool_call_id": "call_mem_1", "content": "hello"}
    ], "tools": [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]})
}

fn replayed_assistant(mock: &MockUpstream) -> Value {
    let seen = mock.seen();
    let last = seen.last().expect("the replay reached the upstream");
    last.body["messages"][1].clone()
}

async fn first_turn(engine: &TestEngine, mock: &MockUpstream) {
    mock.push(Reply::sse(REASONER_TOOL_CALL));
    let resp = engine.post(Client::Openai, &ask()).await;
    assert_eq!(resp.status(), 200);
    let _ = resp.text().await;
    engine.wait_calls(1).await;
}

#[tokio::test]
async fn a_chat_client_replay_gets_its_reasoning_back_even_after_a_restart() {
    let mock = MockUpstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let config = config_text(&mock.url(), "");
    // One keyring across the restart, like the OS keyring (it holds the local CA's key too).
    let keyring = std::sync::Arc::new(keyhaven::secrets::MemoryKeyring::default());
    let engine = TestEngine::start_with_keyring(dir, &config, keyring.clone()).await;
    first_turn(&engine, &mock).await;

    mock.push(Reply::sse(REASONER_TEXT));
    let resp = engine.post(Client::Openai, &replay()).await;
    assert_eq!(resp.status(), 200);
    let _ = resp.text().await;
    let assistant = replayed_assistant(&mock);
    assert_eq!(assistant["reasoning_content"], "I need the file first.", "{assistant:#}");
    assert_eq!(assistant["tool_calls"][0]["id"], "call_mem_1");

    // A new process on the same database remembers it.
    let dir = engine.stop().await;
    let engine = TestEngine::start_with_keyring(dir, &config, keyring).await;
    mock.push(Reply::sse(REASONER_TEXT));
    let resp = engine.post(Client::Openai, &replay()).await;
    assert_eq!(resp.status(), 200);
    let _ = resp.text().await;
    let assistant = replayed_assistant(&mock);
    assert_eq!(assistant["reasoning_content"], "I need the file first.", "after a restart: {assistant:#}");
    engine.stop().await;
}

#[tokio::test]
async fn without_record_calls_the_memory_is_not_kept_on_disk() {
    let mock = MockUpstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let config = config_text(&mock.url(), "record_calls = false");
    let keyring = std::sync::Arc::new(keyhaven::secrets::MemoryKeyring::default());
    let engine = TestEngine::start_with_keyring(dir, &config, keyring.clone()).await;
    mock.push(Reply::sse(REASONER_TOOL_CALL));
    let resp = engine.post(Client::Openai, &ask()).await;
    let _ = resp.text().await;

    // In memory it works within the process.
    mock.push(Reply::sse(REASONER_TEXT));
    let _ = engine.post(Client::Openai, &replay()).await.text().await;
    assert_eq!(replayed_assistant(&mock)["reasoning_content"], "I need the file first.");

    let dir = engine.stop().await;
    let engine = TestEngine::start_with_keyring(dir, &config, keyring).await;
    mock.push(Reply::sse(REASONER_TEXT));
    let _ = engine.post(Client::Openai, &replay()).await.text().await;
    let assistant = replayed_assistant(&mock);
    assert!(assistant.get("reasoning_content").is_none_or(Value::is_null), "nothing was on disk: {assistant:#}");
    engine.stop().await;
}
