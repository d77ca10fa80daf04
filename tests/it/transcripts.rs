//! The transcript suite: every case in all nine directions (clients speaking OpenAI Chat,
//! Anthropic Messages or OpenAI Responses, each against upstreams of the same three dialects),
//! streamed and not. The client's answer is read back by `support::wire` (a hand-written reader
//! of the vendors' documented formats, not the engine's codecs) and compared with what the
//! upstream said; the call row is checked too.

use serde_json::{Value, json};

use base64::Engine as _;
use keyhaven::model::CallStatus;

use crate::support::fixtures::{Case, RESPONSES_ENCRYPTED, request, upstream_sse};
use crate::support::wire::{self, Answer, Finish, Part};
use crate::support::{Client, MockUpstream, Reply, TestEngine, Up, responses_final, responses_items_done};

const DIRECTIONS: [(Client, Up); 9] = [
    (Client::Openai, Up::Openai),
    (Client::Openai, Up::Anthropic),
    (Client::Openai, Up::Responses),
    (Client::Anthropic, Up::Openai),
    (Client::Anthropic, Up::Anthropic),
    (Client::Anthropic, Up::Responses),
    (Client::Responses, Up::Openai),
    (Client::Responses, Up::Anthropic),
    (Client::Responses, Up::Responses),
];

struct Outcome {
    resp: Answer,
    raw: String,
    upstream_request: Value,
    row: keyhaven::store::CallDetail,
}

async fn run(client: Client, up: Up, case: Case, stream: bool) -> Outcome {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(up, case)));
    let engine = TestEngine::start(&mock).await;
    let resp = engine.post(client, &request(client, up.model(), stream, case)).await;
    let status = resp.status();
    assert!(resp.headers().contains_key("x-keyhaven-overhead-ms"), "overhead header");
    assert!(resp.headers().contains_key("x-request-id"));
    let raw = resp.text().await.expect("body");
    let resp = if stream {
        assert_eq!(status, 200, "{raw}");
        wire::read_stream(client, &raw)
    } else if case == Case::ErrorMidStream {
        Answer::default()
    } else {
        assert_eq!(status, 200, "{raw}");
        wire::read_body(client, &raw)
    };
    let seen = mock.seen();
    assert_eq!(seen.len(), 1, "exactly one upstream attempt");
    assert_eq!(seen[0].path, up.path());
    let row = engine.only_call().await;
    engine.stop().await;
    Outcome { resp, raw, upstream_request: seen[0].body.clone(), row }
}

/// What a thinking signature the client got says, read by hand from the envelope format
/// (ARCHITECTURE.md, "Reasoning round-trips"): `khr1.` + base64url of `{"f": family, "id", "d"}`;
/// anything else is Anthropic's own signature, as is.
fn envelope(sig: &str) -> (String, Option<String>, Option<String>) {
    let Some(b64) = sig.strip_prefix("khr1.") else { return ("anthropic".to_owned(), None, Some(sig.to_owned())) };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(b64.trim_end_matches('='))
        .unwrap_or_else(|e| panic!("envelope is not base64url ({e}): {sig}"));
    let v: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("envelope is not JSON ({e}): {sig}"));
    let s = |k: &str| v[k].as_str().map(str::to_owned);
    (s("f").unwrap_or_else(|| panic!("envelope without family: {v}")), s("id"), s("d"))
}

fn text_of(resp: &Answer) -> String {
    resp.text()
}

#[tokio::test]
async fn plain_text_in_every_direction() {
    for (client, up) in DIRECTIONS {
        for stream in [true, false] {
            let o = run(client, up, Case::Text, stream).await;
            let ctx = format!("{client:?}->{up:?} stream={stream}");
            assert_eq!(text_of(&o.resp), "Hello world", "{ctx}");
            assert_eq!(o.resp.parts.len(), 1, "{ctx}: no empty blocks: {:?}", o.resp.parts);
            assert_eq!(o.resp.finish, Some(Finish::EndTurn), "{ctx}");
            assert_eq!(o.row.summary.status, CallStatus::Ok, "{ctx}");
            assert_eq!(o.row.summary.usage.output_tokens, 5, "{ctx}");
            assert_eq!(o.row.summary.usage.input_tokens, 20, "{ctx}");
            assert!(!o.row.summary.usage_estimated, "{ctx}");
            assert_eq!(o.row.summary.client, "keyhaven-tests/1.0");
            // The upstream got the system prompt and the user turn in its own dialect.
            match up {
                Up::Openai => {
                    assert_eq!(
                        o.upstream_request["messages"][0],
                        json!({"role": "system", "content": "Be brief."}),
                        "{ctx}"
                    );
                    assert_eq!(o.upstream_request["stream"], json!(true));
                    assert_eq!(o.upstream_request["model"], json!("gpt-4o-mini"));
                }
                // An Anthropic client's body goes to Anthropic as it was sent (`system` a string).
                Up::Anthropic if client == Client::Anthropic => {
                    assert_eq!(o.upstream_request["system"], json!("Be brief."), "{ctx}");
                    assert_eq!(o.upstream_request["model"], json!("claude-sonnet-4-5"));
                }
                Up::Anthropic => {
                    assert_eq!(o.upstream_request["system"][0]["text"], json!("Be brief."), "{ctx}");
                    assert_eq!(o.upstream_request["model"], json!("claude-sonnet-4-5"));
                }
                Up::Responses => {
                    assert_eq!(o.upstream_request["instructions"], json!("Be brief."), "{ctx}");
                    assert_eq!(o.upstream_request["input"][0]["content"][0]["text"], json!("Hi"), "{ctx}");
                    assert_eq!(o.upstream_request["model"], json!("gpt-5-mini"));
                    assert_eq!(o.upstream_request["stream"], json!(true));
                    assert_eq!(o.upstream_request["store"], json!(false));
                }
            }
            if stream {
                match client {
                    Client::Openai => assert!(o.raw.trim_end().ends_with("data: [DONE]"), "{ctx}: {}", o.raw),
                    Client::Anthropic => assert!(o.raw.contains("event: message_stop"), "{ctx}"),
                    Client::Responses => {
                        assert!(o.raw.starts_with("event: response.created"), "{ctx}: {}", o.raw);
                        assert!(o.raw.contains("event: response.completed"), "{ctx}: {}", o.raw);
                    }
                }
            }
            if client == Client::Responses {
                let body = responses_final(&o.raw, stream);
                assert_eq!(body["status"], json!("completed"), "{ctx}");
                assert!(body["id"].as_str().is_some_and(|id| id.starts_with("resp_")), "{ctx}: {body}");
            }
        }
    }
}

#[tokio::test]
async fn two_parallel_tool_calls_with_fragmented_arguments() {
    for (client, up) in DIRECTIONS {
        for stream in [true, false] {
            let o = run(client, up, Case::Tools, stream).await;
            let ctx = format!("{client:?}->{up:?} stream={stream}");
            let tools = o.resp.tool_calls();
            assert_eq!(
                tools,
                vec![
                    ("call_a".to_owned(), "get_weather".to_owned(), json!({"city": "Paris"})),
                    ("call_b".to_owned(), "get_time".to_owned(), json!({"tz": "CET"})),
                ],
                "{ctx}"
            );
            assert_eq!(o.resp.finish, Some(Finish::ToolUse), "{ctx}");
            assert!(text_of(&o.resp).is_empty(), "{ctx}: no stray text block");
            // Tool definitions reached the upstream in its own shape.
            match up {
                Up::Openai => {
                    assert_eq!(o.upstream_request["tools"][0]["type"], json!("function"), "{ctx}");
                    assert_eq!(o.upstream_request["tools"][1]["function"]["name"], json!("get_time"), "{ctx}");
                }
                Up::Anthropic => {
                    assert_eq!(o.upstream_request["tools"][0]["name"], json!("get_weather"), "{ctx}");
                    assert!(o.upstream_request["tools"][0]["input_schema"].is_object(), "{ctx}");
                }
                Up::Responses => {
                    assert_eq!(o.upstream_request["tools"][0]["type"], json!("function"), "{ctx}");
                    assert_eq!(o.upstream_request["tools"][1]["name"], json!("get_time"), "{ctx}");
                    assert!(o.upstream_request["tools"][1].get("function").is_none(), "{ctx}: not nested");
                }
            }
            if client == Client::Responses {
                // What Codex needs: every finished call carries call_id, name and the whole
                // arguments string (cc-switch #3893), also in the final response.
                let done = responses_items_done(&o.raw, stream);
                let calls: Vec<(Value, Value, Value)> = done
                    .iter()
                    .filter(|i| i["type"] == "function_call")
                    .map(|i| (i["call_id"].clone(), i["name"].clone(), i["arguments"].clone()))
                    .collect();
                assert_eq!(
                    calls,
                    vec![
                        (json!("call_a"), json!("get_weather"), json!("{\"city\":\"Paris\"}")),
                        (json!("call_b"), json!("get_time"), json!("{\"tz\":\"CET\"}")),
                    ],
                    "{ctx}: {}",
                    o.raw
                );
                let body = responses_final(&o.raw, stream);
                let finals: Vec<&Value> =
                    body["output"].as_array().into_iter().flatten().filter(|i| i["type"] == "function_call").collect();
                assert_eq!(finals.len(), 2, "{ctx}: {body}");
                assert!(finals.iter().all(|i| i["arguments"].is_string() && i["name"].is_string()), "{ctx}");
            }
            if stream {
                // Arguments stream as fragments (an Anthropic client gets the fragments of a call
                // that the OpenAI upstream interleaved with another call's buffered into one).
                let fragments = o.resp.arg_fragments;
                assert!(fragments >= 3, "{ctx}: {fragments} fragments");
            }
        }
    }
}

#[tokio::test]
async fn thinking_with_signature() {
    for (client, up) in DIRECTIONS {
        for stream in [true, false] {
            let o = run(client, up, Case::Thinking, stream).await;
            let ctx = format!("{client:?}->{up:?} stream={stream}");
            let Some(Part::Thinking { text, signature }) = o.resp.parts.first() else {
                panic!("{ctx}: thinking first: {:?}", o.resp.parts)
            };
            assert_eq!(text, "Let me think.", "{ctx}");
            assert_eq!(text_of(&o.resp), "Answer: 4", "{ctx}");
            // Every client that carries a signature gets the upstream's reasoning in an envelope
            // of its family (an Anthropic signature as is, or wrapped for a Responses client); a
            // Chat client's `reasoning_content` decodes as Chat reasoning.
            let family = |sig: &Option<String>| sig.as_deref().map(envelope);
            let want = match (client, up) {
                // A Chat client has nowhere to carry a signature: `reasoning_content` only.
                (Client::Openai, _) => None,
                (_, Up::Openai) => Some(("openai_chat".to_owned(), None, None)),
                (_, Up::Anthropic) => Some(("anthropic".to_owned(), None, Some("EqQBCkYIBxgCKkBsig==".to_owned()))),
                (_, Up::Responses) => {
                    Some(("openai_responses".to_owned(), Some("rs_1".to_owned()), Some(RESPONSES_ENCRYPTED.to_owned())))
                }
            };
            assert_eq!(family(signature), want, "{ctx}");
            // The client's thinking request reached the upstream in its own terms.
            match up {
                Up::Openai => {
                    assert!(o.upstream_request.get("reasoning_effort").is_some(), "{ctx}: {}", o.upstream_request)
                }
                Up::Anthropic => assert_eq!(o.upstream_request["thinking"]["type"], json!("enabled"), "{ctx}"),
                Up::Responses => {
                    assert!(o.upstream_request["reasoning"]["effort"].is_string(), "{ctx}: {}", o.upstream_request);
                    assert_eq!(o.upstream_request["include"], json!(["reasoning.encrypted_content"]), "{ctx}");
                }
            }
        }
    }
}

#[tokio::test]
async fn cache_usage_maps_to_each_dialect() {
    for (client, up) in DIRECTIONS {
        for stream in [true, false] {
            let o = run(client, up, Case::Cache, stream).await;
            let ctx = format!("{client:?}->{up:?} stream={stream}");
            let u = o.row.summary.usage;
            match up {
                // OpenAI Chat and Responses: input 1000 includes 800 cached.
                Up::Openai | Up::Responses => {
                    assert_eq!((u.input_tokens, u.cache_read_tokens, u.cache_write_tokens), (200, 800, 0), "{ctx}")
                }
                // Anthropic: 200 uncached + 800 read + 100 written.
                Up::Anthropic => {
                    assert_eq!((u.input_tokens, u.cache_read_tokens, u.cache_write_tokens), (200, 800, 100), "{ctx}")
                }
            }
            assert_eq!(u.output_tokens, 7, "{ctx}");
            // What the client sees, in its own accounting: the cached part, and the whole prompt
            // (Chat: `prompt_tokens` includes the cached ones; Anthropic: input + cache read +
            // cache write; Responses: `input_tokens` includes them).
            let cu = &o.resp.usage;
            let n = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("{ctx}: a token count: {cu}"));
            let (cached, prompt) = match client {
                Client::Openai => (n(&cu["prompt_tokens_details"]["cached_tokens"]), n(&cu["prompt_tokens"])),
                Client::Anthropic => (
                    n(&cu["cache_read_input_tokens"]),
                    n(&cu["input_tokens"])
                        + n(&cu["cache_read_input_tokens"])
                        + cu["cache_creation_input_tokens"].as_u64().unwrap_or(0),
                ),
                Client::Responses => (n(&cu["input_tokens_details"]["cached_tokens"]), n(&cu["input_tokens"])),
            };
            assert_eq!(cached, 800, "{ctx}: {cu}");
            assert_eq!(prompt, u.openai_prompt_tokens(), "{ctx}: total prompt preserved: {cu}");
            if client == Client::Openai && stream {
                assert!(o.raw.contains("\"cached_tokens\":800"), "{ctx}: {}", o.raw);
            }
            if client == Client::Responses {
                // Responses counts cached tokens inside input_tokens (a subset).
                let usage = &responses_final(&o.raw, stream)["usage"];
                assert_eq!(usage["input_tokens_details"]["cached_tokens"], json!(800), "{ctx}: {usage}");
                assert_eq!(usage["input_tokens"], json!(u.openai_prompt_tokens()), "{ctx}: {usage}");
                assert_eq!(usage["total_tokens"], json!(u.openai_prompt_tokens() + 7), "{ctx}: {usage}");
            }
            if client == Client::Anthropic && up == Up::Anthropic {
                assert_eq!(cu["cache_creation_input_tokens"], json!(100), "{ctx}: {cu}");
            }
            // Cost is priced from the shipped table with cache reads and writes priced separately.
            assert!(o.row.summary.cost_micros.is_some_and(|c| c > 0), "{ctx}: {:?}", o.row.summary.cost_micros);
            assert!(o.row.summary.price_version.is_some(), "{ctx}");
        }
    }
}

#[tokio::test]
async fn error_mid_stream_ends_cleanly_and_is_recorded() {
    for (client, up) in DIRECTIONS {
        let o = run(client, up, Case::ErrorMidStream, true).await;
        let ctx = format!("{client:?}->{up:?}");
        assert_eq!(text_of(&o.resp), "partial", "{ctx}");
        let err = o.resp.error.clone().unwrap_or_else(|| panic!("{ctx}: a terminal error event: {}", o.raw));
        assert!(err.contains("overloaded"), "{ctx}: {err:?}");
        match client {
            Client::Openai => assert!(o.raw.trim_end().ends_with("data: [DONE]"), "{ctx}: clean end: {}", o.raw),
            Client::Anthropic => assert!(o.raw.contains("event: error"), "{ctx}"),
            Client::Responses => {
                assert!(o.raw.contains("event: error"), "{ctx}");
                assert!(o.raw.contains("event: response.failed"), "{ctx}: {}", o.raw);
                assert!(!o.raw.contains("response.completed"), "{ctx}");
            }
        }
        assert_eq!(o.row.summary.status, CallStatus::Error, "{ctx}");
        assert!(o.row.summary.error_message.as_deref().unwrap_or("").contains("overloaded"), "{ctx}");
        // Non-streaming: the same upstream failure is an error response (nothing was sent yet).
        let n = run(client, up, Case::ErrorMidStream, false).await;
        assert!(n.raw.contains("overloaded"), "{ctx}: {}", n.raw);
        assert_eq!(n.row.summary.status, CallStatus::Error, "{ctx}");
    }
}

/// A second turn carrying the first turn's reasoning back: DeepSeek-style `reasoning_content`
/// must reach an OpenAI-compatible upstream again, and a signed thinking block an Anthropic one.
#[tokio::test]
async fn reasoning_round_trips_on_the_next_turn() {
    for (client, up) in DIRECTIONS {
        let first = run(client, up, Case::Thinking, false).await;
        let mock = MockUpstream::start().await;
        mock.push(Reply::sse(&upstream_sse(up, Case::Text)));
        let engine = TestEngine::start(&mock).await;
        let assistant = match client {
            Client::Openai => {
                let raw: Value = serde_json::from_str(&first.raw).expect("json");
                raw["choices"][0]["message"].clone()
            }
            Client::Anthropic => {
                let raw: Value = serde_json::from_str(&first.raw).expect("json");
                json!({"role": "assistant", "content": raw["content"]})
            }
            Client::Responses => {
                let raw: Value = serde_json::from_str(&first.raw).expect("json");
                raw["output"].clone()
            }
        };
        let mut body = request(client, up.model(), false, Case::Thinking);
        if client == Client::Responses {
            let input = body["input"].as_array_mut().expect("input");
            input.extend(assistant.as_array().cloned().unwrap_or_default());
            input.push(json!({"role": "user", "content": "And 3+3?"}));
        } else {
            let msgs = body["messages"].as_array_mut().expect("messages");
            msgs.push(assistant);
            msgs.push(json!({"role": "user", "content": "And 3+3?"}));
        }
        let resp = engine.post(client, &body).await;
        assert_eq!(resp.status(), 200);
        let seen = mock.seen();
        let sent = &seen[0].body;
        let ctx = format!("{client:?}->{up:?}: {sent}");
        match up {
            Up::Openai => {
                let assistant =
                    sent["messages"].as_array().expect("msgs").iter().find(|m| m["role"] == "assistant").cloned();
                let assistant = assistant.unwrap_or_else(|| panic!("{ctx}"));
                assert_eq!(assistant["reasoning_content"], json!("Let me think."), "{ctx}");
            }
            Up::Anthropic => {
                let assistant =
                    sent["messages"].as_array().expect("msgs").iter().find(|m| m["role"] == "assistant").cloned();
                let blocks = assistant.map(|a| a["content"].clone()).unwrap_or_default();
                let thinking = blocks.as_array().and_then(|b| b.iter().find(|x| x["type"] == "thinking").cloned());
                if client == Client::Anthropic {
                    let thinking = thinking.unwrap_or_else(|| panic!("{ctx}"));
                    assert_eq!(thinking["signature"], json!("EqQBCkYIBxgCKkBsig=="), "{ctx}");
                } else if client == Client::Responses {
                    // The signature travelled to Codex as encrypted_content and came back.
                    let thinking = thinking.unwrap_or_else(|| panic!("{ctx}"));
                    assert_eq!(thinking["signature"], json!("EqQBCkYIBxgCKkBsig=="), "{ctx}");
                    assert_eq!(thinking["thinking"], json!("Let me think."), "{ctx}");
                } else {
                    // OpenAI Chat clients cannot carry a signature; unsigned thinking is dropped
                    // rather than sent to Anthropic, which would reject it.
                    assert!(thinking.is_none(), "{ctx}");
                }
            }
            Up::Responses => {
                let input = sent["input"].as_array().expect("input");
                let reasoning = input.iter().find(|i| i["type"] == "reasoning");
                if client == Client::Openai {
                    // Unsigned reasoning cannot be used by a Responses upstream: not sent.
                    assert!(reasoning.is_none(), "{ctx}");
                } else {
                    let reasoning = reasoning.unwrap_or_else(|| panic!("{ctx}"));
                    assert_eq!(reasoning["encrypted_content"], json!(RESPONSES_ENCRYPTED), "{ctx}");
                    // The upstream's own item id comes back with its ciphertext.
                    assert_eq!(reasoning["id"], json!("rs_1"), "{ctx}: the upstream's item id");
                }
                let assistant = input.iter().find(|i| i["role"] == "assistant").unwrap_or_else(|| panic!("{ctx}"));
                assert_eq!(assistant["content"][0]["text"], json!("Answer: 4"), "{ctx}");
            }
        }
        engine.stop().await;
    }
}

#[tokio::test]
async fn image_input_reaches_every_upstream() {
    const PNG: &str =
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    for (client, up) in DIRECTIONS {
        let mock = MockUpstream::start().await;
        mock.push(Reply::sse(&upstream_sse(up, Case::Text)));
        let engine = TestEngine::start(&mock).await;
        let mut body = request(client, up.model(), true, Case::Text);
        let content = match client {
            Client::Openai => json!([{"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG}")}}]),
            Client::Anthropic => json!([{"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]),
            Client::Responses => json!([{"type": "input_text", "text": "What is this?"},
                {"type": "input_image", "image_url": format!("data:image/png;base64,{PNG}")}]),
        };
        let list = if client == Client::Responses { "input" } else { "messages" };
        let last = body[list].as_array_mut().and_then(|m| m.last_mut()).expect("user message");
        last["content"] = content;
        let resp = engine.post(client, &body).await;
        assert_eq!(resp.status(), 200);
        let _ = resp.text().await;
        let sent = mock.seen()[0].body.to_string();
        let ctx = format!("{client:?}->{up:?}: {sent}");
        match up {
            Up::Openai => assert!(sent.contains(&format!("\"url\":\"data:image/png;base64,{PNG}\"")), "{ctx}"),
            Up::Responses => {
                assert!(sent.contains(&format!("\"image_url\":\"data:image/png;base64,{PNG}\"")), "{ctx}")
            }
            Up::Anthropic => {
                assert!(sent.contains("\"type\":\"base64\"") && sent.contains("\"media_type\":\"image/png\""), "{ctx}");
                assert!(sent.contains(PNG), "{ctx}");
            }
        }
        engine.stop().await;
    }
}

#[tokio::test]
async fn models_are_listed_in_both_shapes() {
    let mock = MockUpstream::start().await;
    let engine = TestEngine::start(&mock).await;
    let oa: Value = engine.http.get(engine.url("/v1/models")).send().await.expect("get").json().await.expect("json");
    let names: Vec<_> =
        oa["data"].as_array().expect("data").iter().map(|m| m["id"].as_str().unwrap_or("").to_owned()).collect();
    assert_eq!(names, vec!["oa-model", "an-model", "rs-model"]);
    let an: Value = engine
        .http
        .get(engine.url("/v1/models"))
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(an["data"][1]["type"], json!("model"));
    assert_eq!(an["has_more"], json!(false));
    engine.stop().await;
}
