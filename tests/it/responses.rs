//! `/v1/responses` end to end: a Codex-shaped request against every upstream dialect (the tool
//! history must reach each upstream intact and the stream Codex gets back must carry complete
//! function calls), `previous_response_id` chaining, and errors in the Responses shape.

use serde_json::{Value, json};

use crate::support::fixtures::{Case, request, upstream_sse};
use crate::support::{Client, MockUpstream, Reply, TestEngine, Up, responses_final, responses_items_done};

fn codex_request(model: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/openai_responses/request_decode/codex_multi_turn.json");
    let mut body: Value = serde_json::from_slice(&std::fs::read(path).expect("codex fixture")).expect("JSON");
    body["model"] = json!(model);
    body
}

/// (call id, tool name, arguments as JSON) of every call, and (call id, output text) of every
/// result, in the order the body has them, whatever its dialect.
type Calls = Vec<(String, String, Value)>;
type Results = Vec<(String, String)>;

fn parse_args(v: &Value) -> Value {
    match v {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
        other => other.clone(),
    }
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

fn tool_history(up: Up, body: &Value) -> (Calls, Results) {
    let mut calls = Vec::new();
    let mut results = Vec::new();
    match up {
        Up::Openai => {
            for m in body["messages"].as_array().expect("messages") {
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    calls.push((s(&c["id"]), s(&c["function"]["name"]), parse_args(&c["function"]["arguments"])));
                }
                if m["role"] == "tool" {
                    results.push((s(&m["tool_call_id"]), s(&m["content"])));
                }
            }
        }
        Up::Anthropic => {
            for m in body["messages"].as_array().expect("messages") {
                for b in m["content"].as_array().into_iter().flatten() {
                    if b["type"] == "tool_use" {
                        calls.push((s(&b["id"]), s(&b["name"]), b["input"].clone()));
                    }
                    if b["type"] == "tool_result" {
                        let text = match &b["content"] {
                            Value::String(t) => t.clone(),
                            Value::Array(parts) => parts.iter().map(|p| s(&p["text"])).collect(),
                            _ => String::new(),
                        };
                        results.push((s(&b["tool_use_id"]), text));
                    }
                }
            }
        }
        Up::Responses => {
            for i in body["input"].as_array().expect("input") {
                if i["type"] == "function_call" {
                    assert!(i["arguments"].is_string(), "arguments must be a string: {i}");
                    calls.push((s(&i["call_id"]), s(&i["name"]), parse_args(&i["arguments"])));
                }
                if i["type"] == "function_call_output" {
                    results.push((s(&i["call_id"]), s(&i["output"])));
                }
            }
        }
    }
    (calls, results)
}

#[tokio::test]
async fn codex_request_reaches_every_upstream_with_its_tool_history() {
    let original = codex_request("x");
    let (want_calls, want_results) = tool_history(Up::Responses, &original);
    assert_eq!(want_calls.len(), 3);
    for up in Up::ALL {
        let mock = MockUpstream::start().await;
        mock.push(Reply::sse(&upstream_sse(up, Case::Tools)));
        let engine = TestEngine::start(&mock).await;
        let resp = engine.post(Client::Responses, &codex_request(up.model())).await;
        assert_eq!(resp.status(), 200, "{up:?}");
        let raw = resp.text().await.expect("body");
        let seen = mock.seen();
        let sent = &seen[0].body;
        let ctx = format!("{up:?}: {sent}");

        // The whole tool history, ids, names and arguments intact, results in order.
        let (calls, results) = tool_history(up, sent);
        assert_eq!(calls, want_calls, "{ctx}");
        assert_eq!(results, want_results, "{ctx}");
        // Codex's function tools everywhere; its hosted web_search only toward a Responses
        // upstream (which runs it), its custom tools nowhere.
        let tools = sent["tools"].as_array().expect("tools");
        let tool_names: Vec<String> = tools
            .iter()
            .filter(|t| t["type"] == "function" || t.get("type").is_none())
            .map(|t| s(&t["name"]).to_owned() + &s(&t["function"]["name"]))
            .collect();
        assert_eq!(tool_names, ["shell", "update_plan", "apply_patch"], "{ctx}");
        let hosted: Vec<Value> =
            tools.iter().filter(|t| t["type"] != "function" && t.get("type").is_some()).cloned().collect();
        let want_hosted = if up == Up::Responses { vec![json!({"type": "web_search"})] } else { vec![] };
        assert_eq!(hosted, want_hosted, "{ctx}");

        match up {
            Up::Openai => {
                let msgs = sent["messages"].as_array().expect("messages");
                assert_eq!(msgs[0]["role"], json!("system"), "{ctx}");
                assert!(s(&msgs[0]["content"]).starts_with("You are Codex"), "{ctx}");
                // Every tool message directly follows the assistant call or another result.
                for (i, m) in msgs.iter().enumerate() {
                    if m["role"] == "tool" {
                        let prev = &msgs[i - 1];
                        assert!(prev["role"] == "tool" || prev["tool_calls"].is_array(), "{ctx}: message {i}");
                    }
                }
                // The two parallel calls share one assistant message.
                let parallel = msgs.iter().find(|m| m["tool_calls"].as_array().is_some_and(|c| c.len() == 2));
                assert!(parallel.is_some(), "{ctx}");
            }
            Up::Anthropic => {
                let system = sent["system"].to_string();
                assert!(system.contains("You are Codex") && system.contains("permissions instructions"), "{ctx}");
                let msgs = sent["messages"].as_array().expect("messages");
                // Roles alternate, and each result answers the calls of the turn before it.
                for pair in msgs.windows(2) {
                    assert_ne!(pair[0]["role"], pair[1]["role"], "{ctx}");
                    let ids = |m: &Value, ty: &str, key: &str| -> Vec<String> {
                        m["content"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter(|b| b["type"] == ty)
                            .map(|b| s(&b[key]))
                            .collect()
                    };
                    let results = ids(&pair[1], "tool_result", "tool_use_id");
                    if !results.is_empty() {
                        assert_eq!(results, ids(&pair[0], "tool_use", "id"), "{ctx}");
                    }
                }
            }
            Up::Responses => {
                assert_eq!(sent["instructions"], original["instructions"], "{ctx}");
                assert_eq!(sent["input"][0]["role"], json!("developer"), "{ctx}");
                let reasoning: Vec<&Value> =
                    sent["input"].as_array().expect("input").iter().filter(|i| i["type"] == "reasoning").collect();
                assert_eq!(reasoning.len(), 2, "{ctx}");
                assert_eq!(reasoning[0]["encrypted_content"], json!("gAAAAABoEnc1-first"), "{ctx}");
                assert_eq!(sent["reasoning"]["effort"], json!("medium"), "{ctx}");
            }
        }

        // What Codex gets back: complete function calls, then response.completed with usage.
        let done = responses_items_done(&raw, true);
        let calls: Vec<(Value, Value)> = done
            .iter()
            .filter(|i| i["type"] == "function_call")
            .map(|i| (i["name"].clone(), i["arguments"].clone()))
            .collect();
        assert_eq!(
            calls,
            vec![(json!("get_weather"), json!("{\"city\":\"Paris\"}")), (json!("get_time"), json!("{\"tz\":\"CET\"}"))],
            "{ctx}"
        );
        let fin = responses_final(&raw, true);
        assert_eq!(fin["usage"]["output_tokens"], json!(30), "{ctx}");
        assert_eq!(engine.only_call().await.summary.dialect, "openai_responses");
        engine.stop().await;
    }
}

fn user_texts(up: Up, body: &Value) -> Vec<(String, String)> {
    // (role, text) of every message the upstream saw, system included.
    let mut out = Vec::new();
    match up {
        Up::Openai => {
            for m in body["messages"].as_array().expect("messages") {
                out.push((s(&m["role"]), s(&m["content"])));
            }
        }
        Up::Anthropic => {
            for b in body["system"].as_array().into_iter().flatten() {
                out.push(("system".into(), s(&b["text"])));
            }
            for m in body["messages"].as_array().expect("messages") {
                let text = match &m["content"] {
                    Value::String(t) => t.clone(),
                    Value::Array(parts) => parts.iter().map(|p| s(&p["text"])).collect(),
                    _ => String::new(),
                };
                out.push((s(&m["role"]), text));
            }
        }
        Up::Responses => {
            out.push(("system".into(), s(&body["instructions"])));
            for i in body["input"].as_array().expect("input") {
                let text: String = i["content"].as_array().into_iter().flatten().map(|p| s(&p["text"])).collect();
                out.push((s(&i["role"]), text));
            }
        }
    }
    out
}

#[tokio::test]
async fn previous_response_id_expands_the_conversation() {
    for up in Up::ALL {
        for stream in [false, true] {
            let ctx = format!("{up:?} stream={stream}");
            let mock = MockUpstream::start().await;
            mock.push(Reply::sse(&upstream_sse(up, Case::Text)));
            let engine = TestEngine::start(&mock).await;

            let first =
                engine.post(Client::Responses, &request(Client::Responses, up.model(), stream, Case::Text)).await;
            assert_eq!(first.status(), 200, "{ctx}");
            let first_id = s(&responses_final(&first.text().await.expect("body"), stream)["id"]);
            assert!(first_id.starts_with("resp_"), "{ctx}: {first_id}");

            let next = |prev: &str, text: &str| {
                json!({"model": up.model(), "stream": stream, "instructions": "Be brief.", "store": false,
                    "previous_response_id": prev, "input": [{"role": "user", "content": text}]})
            };
            let second = engine.post(Client::Responses, &next(&first_id, "And again?")).await;
            assert_eq!(second.status(), 200, "{ctx}");
            let second_id = s(&responses_final(&second.text().await.expect("body"), stream)["id"]);
            assert_ne!(second_id, first_id);
            let third = engine.post(Client::Responses, &next(&second_id, "Once more?")).await;
            assert_eq!(third.status(), 200, "{ctx}");
            let _ = third.text().await;

            let seen = mock.seen();
            assert_eq!(seen.len(), 3, "{ctx}");
            let assistant = "assistant";
            // The upstream saw the whole conversation, with the instructions once.
            assert_eq!(
                user_texts(up, &seen[2].body),
                vec![
                    ("system".to_owned(), "Be brief.".to_owned()),
                    ("user".to_owned(), "Hi".to_owned()),
                    (assistant.to_owned(), "Hello world".to_owned()),
                    ("user".to_owned(), "And again?".to_owned()),
                    (assistant.to_owned(), "Hello world".to_owned()),
                    ("user".to_owned(), "Once more?".to_owned()),
                ],
                "{ctx}: {}",
                seen[2].body
            );

            // An id this process never answered: 400 in the Responses shape, no upstream call.
            let resp = engine.post(Client::Responses, &next("resp_unknown", "x")).await;
            assert_eq!(resp.status(), 400, "{ctx}");
            let body: Value = resp.json().await.expect("json");
            assert_eq!(body["error"]["code"], json!("previous_response_not_found"), "{ctx}: {body}");
            assert_eq!(body["error"]["param"], json!("previous_response_id"), "{ctx}");
            assert_eq!(body["error"]["type"], json!("invalid_request_error"), "{ctx}");
            assert!(s(&body["error"]["message"]).contains("resp_unknown"), "{ctx}");
            assert_eq!(mock.seen().len(), 3, "{ctx}: nothing sent upstream");
            engine.stop().await;
        }
    }
}

#[tokio::test]
async fn a_failed_response_cannot_be_continued() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Responses, Case::ErrorMidStream)));
    let engine = TestEngine::start(&mock).await;
    let resp =
        engine.post(Client::Responses, &request(Client::Responses, Up::Responses.model(), true, Case::Text)).await;
    let raw = resp.text().await.expect("body");
    let failed = raw
        .split("\n\n")
        .filter_map(|ev| ev.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|d| d["type"] == "response.failed")
        .unwrap_or_else(|| panic!("response.failed: {raw}"));
    let id = s(&failed["response"]["id"]);
    assert_eq!(failed["response"]["error"]["code"], json!("server_is_overloaded"));
    let body = json!({"model": "rs-model", "previous_response_id": id, "input": "continue"});
    let resp = engine.post(Client::Responses, &body).await;
    assert_eq!(resp.status(), 400);
    engine.stop().await;
}

#[tokio::test]
async fn responses_errors_have_the_openai_shape() {
    let mock = MockUpstream::start().await;
    let engine = TestEngine::start(&mock).await;
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"{not json".to_vec(), 400, "malformed JSON"),
        (br#"{"model": "rs-model", "input": 5}"#.to_vec(), 400, "input"),
        (br#"{"model": "rs-model", "input": [{"type": "function_call", "name": "f"}]}"#.to_vec(), 400, "call_id"),
        (br#"{"model": "nope", "input": "x"}"#.to_vec(), 404, "nope"),
    ];
    for (body, status, needle) in cases {
        let resp = engine
            .http
            .post(engine.url("/v1/responses"))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status().as_u16(), status, "{}", String::from_utf8_lossy(&body));
        let err: Value = resp.json().await.expect("json");
        assert!(err["error"]["type"].is_string(), "{err}");
        assert!(s(&err["error"]["message"]).contains(needle), "{err} should mention {needle}");
    }
    // Refused by the guard (not JSON): still the Responses shape.
    let resp = engine.http.post(engine.url("/v1/responses")).body("x").send().await.expect("send");
    assert_eq!(resp.status().as_u16(), 415);
    let err: Value = resp.json().await.expect("json");
    assert!(err["error"]["message"].is_string(), "{err}");
    assert!(mock.seen().is_empty(), "nothing reached the upstream");
    engine.stop().await;
}

/// Clients that do not speak Responses reach a Responses upstream too, in every case the
/// transcript suite covers; this checks the upstream request for a Chat and an Anthropic client.
#[tokio::test]
async fn chat_and_anthropic_clients_reach_a_responses_upstream() {
    for client in Client::ALL {
        let mock = MockUpstream::start().await;
        mock.push(Reply::sse(&upstream_sse(Up::Responses, Case::Text)));
        let engine = TestEngine::start(&mock).await;
        let resp = engine.post(client, &request(client, Up::Responses.model(), false, Case::Tools)).await;
        assert_eq!(resp.status(), 200, "{client:?}");
        let sent = &mock.seen()[0].body;
        assert_eq!(mock.seen()[0].path, "/v1/responses");
        assert_eq!(
            mock.seen()[0].headers.get("authorization").and_then(|v| v.to_str().ok()),
            Some(format!("Bearer {}", crate::support::CANARY_KEY).as_str())
        );
        assert_eq!(
            sent["tools"][0],
            json!({"type": "function", "name": "get_weather", "description": "Weather by city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}, "strict": false}),
            "{client:?}"
        );
        assert_eq!(sent["store"], json!(false));
        engine.stop().await;
    }
}
